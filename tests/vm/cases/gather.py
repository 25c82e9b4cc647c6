"""``numabind gather`` and its replay (issue 44 §2), shared by tests/test_gather.py (this host, every fake machine),
tests/vm/test_vm_gather.py (the 3-node guest) and test_vm_arm64.py (the arm64 guest).

A machine is gathered where it is (:func:`gather_here`: the archive and what the four looks printed there, written
into a folder); the archive is replayed elsewhere (:func:`replay_matches`: on the host, for a guest) and the looks
must print the same on the replay, once :func:`comparable` has taken out what names where a machine was read from
(the ``root:`` line, the banners of a replay, "the replayed process") and the live part of the first screen (the
``check:`` line of this host's calls, the current binding of this process and the backends: what a replay prints
under "this host, live"), which is the
process running numabind wherever it runs. On a live machine the free memory of
``hardware`` is what it was when each command ran, so :func:`comparable` takes the figure out there (``live``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import tarfile
from pathlib import Path

#: The looks a replay must print as the machine did: the first screen, every GPU's plan, numactl's --hardware, the
#: topology (nodes, the tree of packages, caches, cores and PCI devices, the GPUs).
LOOKS = {"overview": (), "plan": ("plan", "--all"), "hardware": ("hardware",), "topology": ("topology",)}

_FREE = re.compile(r"^(node \d+ free:) \d+ MB$")


def look(root: str | None, words: tuple[str, ...]) -> str:
    """``numabind [--root ROOT] WORDS`` through the command line in this process: what it printed on stdout, then
    on stderr, then ``exit N`` (``plan --all`` on a machine without GPUs says so and exits 1: the replay must too)."""
    from numabind.cli import main

    out, err = io.StringIO(), io.StringIO()
    argv = (["--root", root] if root is not None else []) + list(words)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return f"{out.getvalue()}{err.getvalue()}exit {rc}\n"


def comparable(text: str, *, live: bool = False) -> list[str]:
    """The lines of a look that a replay must print as the machine did (see the module docstring)."""
    kept = []
    live_part = False
    for line in text.splitlines():
        if line.startswith(("#### ", "check: ")):   # the banners of a replay; this host's calls (numabind check)
            continue
        if line == "== current binding of this process ==":
            live_part = True                   # to the end of the first screen: the binding, the backends
        if live_part and not line.startswith("exit "):
            continue
        if line.startswith("root: ") or not line.strip():
            continue
        line = line.replace("the replayed process", "this process")
        kept.append(_FREE.sub(r"\1 (what it was then)", line) if live else line)
    return kept


def looks(root: str | None) -> dict[str, str]:
    """What each of :data:`LOOKS` prints for ``root`` (None: this machine)."""
    return {name: look(root, words) for name, words in LOOKS.items()}


def differences(source: dict[str, str], replay: dict[str, str], *, live: bool) -> list[str]:
    """The looks whose comparable lines differ, each with the first lines that do."""
    found = []
    for name in LOOKS:
        a, b = comparable(source[name], live=live), comparable(replay[name], live=live)
        if a != b:
            diff = [f"  machine: {x!r}\n  replay:  {y!r}" for x, y in zip(a, b) if x != y][:4]
            found.append(f"{name}: {len(a)} lines against {len(b)}\n" + "\n".join(diff))
    return found


def archive_members(archive: Path) -> dict[str, bytes | None]:
    """Every member of the archive: a regular file's bytes, None for anything else."""
    with tarfile.open(archive) as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()}


# ----------------------------------------------------------------------------- a guest
def gather_here(folder: str | os.PathLike[str], name: str) -> Path:
    """In a guest: ``numabind gather -o FOLDER/NAME.tar.bz2`` of this machine, and what the looks printed here in
    ``FOLDER/NAME.looks.json``; the archive's path. The gather must replay to the same discovery
    (``differences`` empty), leave nothing out but the host's name, and hold numabind check's report."""
    from numabind.gather import gather

    archive = Path(folder) / f"{name}.tar.bz2"
    result = gather(archive)
    (Path(folder) / f"{name}.looks.json").write_text(json.dumps(looks(None)))
    print(result.describe())
    assert result.differences == (), result.describe()
    assert {item.why for item in result.left_out} <= {"the host's name (numabind gather --hostname puts it in)"}, (
        result.describe())
    assert result.check_error is None, result.check_error
    return archive


def replay_matches(folder: str | os.PathLike[str], name: str) -> dict[str, int]:
    """On the host: the archive :func:`gather_here` left in ``folder`` replays to what the looks printed in the
    guest; the number of lines compared per look."""
    archive = Path(folder) / f"{name}.tar.bz2"
    source = json.loads((Path(folder) / f"{name}.looks.json").read_text())
    replay = looks(str(archive))
    found = differences(source, replay, live=True)
    assert not found, f"{archive} replays otherwise than the guest printed:\n" + "\n".join(found)
    return {n: len(comparable(source[n], live=True)) for n in LOOKS}


def share() -> Path:
    """The guest's writable folder that the host reads after the run (the run's folder on the host)."""
    path = os.environ.get("_NUMABIND_VM_SHARE")
    assert path and os.path.isdir(path), f"no writable share in this guest (_NUMABIND_VM_SHARE={path!r})"
    return Path(path)


def guest_gathers(name: str, vm_topology) -> Path:
    """The guest's case (the 3-node guest's test_vm_gather.py and the arm64 guest's test_vm_arm64.py): gather this
    machine into the share as ``NAME.tar.bz2`` (with what the looks printed), and check in the guest that the
    archive holds the nodes QEMU was told to emulate; the host replays it afterwards (:func:`replay_matches`)."""
    from numabind.topology import discover

    archive = gather_here(share(), name)
    topo = discover(archive)
    ids = list(range(len(vm_topology.nodes)))
    assert sorted(topo.nodes) == ids
    assert [sorted(topo.nodes[i].cpus) for i in ids] == [sorted(vm_topology.node_cpus(i)) for i in ids]
    assert [i for i in ids if not topo.nodes[i].cpus] == list(vm_topology.memory_only_nodes)
    print(f"{name}: {archive.stat().st_size} bytes, nodes {ids}, memory-only {list(vm_topology.memory_only_nodes)}")
    return archive

