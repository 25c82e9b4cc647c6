"""Every launch line of the Slurm, MPI, Ray and torchrun how-tos shows the launcher's flag and says why (issue 42
§3): a launcher's binding is only where a rank starts, and numabind replaces it within the cpuset as numactl does,
so the lines turn it off (``srun --cpu-bind=none``, ``mpirun --bind-to none``, ...) and the prose after each code
block says why. The lines are read from the how-tos' code blocks, continuation lines joined.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

HOWTO = Path(__file__).resolve().parents[1] / "docs" / "howto"
PAGES = ("slurm", "mpi", "ray", "torchrun")

#: A launcher (a word of the line, or ``ray start``) and the flags, one of which its line must carry.
FLAGS = {
    "srun": ("--cpu-bind=none",),
    "mpirun": ("--bind-to none",),
    "mpiexec": ("-bind-to none", "I_MPI_PIN=0"),        # MPICH's Hydra, Open MPI's --bind-to, Intel MPI's pinning
    "torchrun": ("--no-python",),
    "ray start": ("--cpu-bind=none",),                  # Ray's nodes under Slurm: srun's binding off
}
#: A flag that must not be on the launcher's line: one tool binds.
FORBIDDEN = {"torchrun": "--numa-binding"}
#: What the sentence after a block says: why the flag is there.
WHY = re.compile(r"\b(why|reason)\b", re.I)
WITHIN = ("``--within-affinity`` stays inside the launcher's CPUs; with no CPU of the plan left it refuses in strict "
          "mode, or keeps those CPUs and prefers memory on their nodes.")


def code_blocks(text: str) -> list[tuple[list[str], str]]:
    """``(the block's command lines, the paragraph after it)`` for every literal block (``.. code::`` or a
    paragraph ending in ``::``) of an RST page; a line ending in ``\\`` is joined with the next."""
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not (re.match(r"\s*\.\. code(-block)?::", line) or (line.rstrip().endswith("::") and
                                                                not line.lstrip().startswith(".."))):
            continue
        body: list[str] = []
        while i < len(lines) and (not lines[i].strip() or lines[i][:1].isspace()):
            body.append(lines[i].strip())
            i += 1
        commands, pending = [], ""
        for b in body:
            if b.startswith(":"):            # a directive option (:class:, ...)
                continue
            if b.endswith("\\"):
                pending += b[:-1].rstrip() + " "
                continue
            commands.append((pending + b).strip())
            pending = ""
        commands = [c for c in commands if c and not c.startswith("#")]
        after = []
        j = i
        while j < len(lines) and lines[j].strip():
            after.append(lines[j].strip())
            j += 1
        out.append((commands, " ".join(after)))
    return out


def launcher_of(command: str) -> str | None:
    """The launcher a shell line runs (its first such word; ``ray start`` anywhere on it), or None."""
    if re.search(r"(^|\s)ray start(\s|$)", command):
        return "ray start"
    for word in command.split("#", 1)[0].split():
        if word in FLAGS:
            return word
    return None


def launch_lines(page: str) -> list[tuple[str, str, str]]:
    """``(launcher, line, the paragraph after its block)`` for every launch line of ``docs/howto/PAGE.rst``."""
    out = []
    for commands, after in code_blocks((HOWTO / f"{page}.rst").read_text()):
        for command in commands:
            launcher = launcher_of(command)
            if launcher is not None:
                out.append((launcher, command, after))
    return out


@pytest.mark.parametrize("page", PAGES)
def test_every_launch_line_carries_the_launchers_flag_and_says_why(page):
    lines = launch_lines(page)
    assert lines, f"docs/howto/{page}.rst has no launch line in a code block"
    for launcher, command, after in lines:
        shell = command.split(" #", 1)[0]
        flags = [f for f in FLAGS[launcher] if f in shell]
        assert flags, f"docs/howto/{page}.rst: {command!r} lacks {' or '.join(FLAGS[launcher])}"
        forbidden = FORBIDDEN.get(launcher)
        assert forbidden is None or forbidden not in shell, f"docs/howto/{page}.rst: {command!r} has {forbidden}"
        assert WHY.search(after) and any(f"``{f}``" in after for f in flags), \
            f"docs/howto/{page}.rst: no sentence after the block of {command!r} says why it has {flags[0]}: {after!r}"


@pytest.mark.parametrize("page", ["slurm", "mpi"])
def test_slurm_and_mpi_say_what_within_affinity_does(page):
    assert WITHIN in " ".join((HOWTO / f"{page}.rst").read_text().split())


def test_the_ray_howto_names_runtime_env_and_bind_actor_keeping_the_affinity():
    """The Ray how-to's "why" names the two calls that keep a worker inside what it inherited, and they exist."""
    import inspect

    from numabind.integrations import ray as numa_ray

    text = " ".join((HOWTO / "ray.rst").read_text().split())
    assert "``runtime_env(within_affinity=True)``" in text and "``bind_actor(within_affinity=True)``" in text
    for fn in (numa_ray.runtime_env, numa_ray.bind_actor):
        assert "within_affinity" in inspect.signature(fn).parameters


def test_the_checker_reads_joined_lines_comments_and_blocks():
    text = ("Run it:\n\n.. code:: sh\n\n   srun -N 2 \\\n      --cpu-bind=none numabind run -- x   # one line\n"
            "   # srun in a comment\n\nWhy ``--cpu-bind=none``: srun's binding.\nMore.\n\nNext::\n\n   mpirun -np 2 x\n")
    blocks = code_blocks(text)
    assert blocks == [(["srun -N 2 --cpu-bind=none numabind run -- x   # one line"],
                       "Why ``--cpu-bind=none``: srun's binding. More."), (["mpirun -np 2 x"], "")]
    assert [launcher_of(c) for b in blocks for c in b[0]] == ["srun", "mpirun"]
    assert launcher_of("srun --cpu-bind=none ray start --head") == "ray start"
    assert launcher_of("python train.py  # not torchrun") is None
