"""numactl 2.0.19 as the oracle of ``numabind show`` and ``numabind run``, weighted interleave included.

Debian 12's numactl (2.0.16) predates weighted interleave (MPOL_WEIGHTED_INTERLEAVE, Linux 6.9+);
numactl 2.0.19 sets it (``-w``). ``bash scripts/numactl_oracle.sh`` builds 2.0.19 from Debian's source
into tests/_cache/numactl-2.0.19/numactl; ``NUMABIND_NUMACTL_ORACLE=/path/to/numactl`` names another
build. Without one these tests skip, unless ``NUMABIND_REQUIRE_ORACLE=1`` (CI), where they fail.

For every binding below, in children only (this process keeps its own policy):

* ``ORACLE OPTS -- numabind show`` prints ``ORACLE OPTS -- ORACLE --show``, line for line, except
  where numactl 2.0.19 prints a broken line (``KNOWN``): a policy its ``--show`` has no words for
  (weighted interleave is ``policy: [6]``; bind with NUMA balancing ``policy: [8194]``) and the policies
  its ``preferred node:`` switch lacks (weighted interleave, local, bind with balancing) get no line end,
  so ``physcpubind:`` is glued to ``preferred node:``. There numabind prints the policy's name, a
  ``preferred node:`` value of its own and, under weighted interleave, the interleave lines and the
  system's weights; every other line is still numactl's, and the test checks that numactl still breaks it.
* ``numabind run OPTS -- ORACLE --show`` prints exactly what ``ORACLE OPTS -- ORACLE --show`` prints:
  numabind sets what numactl 2.0.19 sets, as numactl reads it back.
* ``numabind run OPTS -- numabind show`` prints what ``ORACLE OPTS -- numabind show`` prints.

With several memory nodes, the next interleave node (which differs between two processes that
allocated differently) is masked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from numabind import discover
from tests.kernel import MEM_NODE, ROOT, child_env
from tests.numactl_oracle import CACHED, ORACLE_ENV, REQUIRE_ENV, VERSION

pytestmark = pytest.mark.kernel

WEIGHTS_DIR = Path("/sys/kernel/mm/mempolicy/weighted_interleave")
NUMABIND = (sys.executable, "-m", "numabind")


# --------------------------------------------------------------------------- the bindings
def _bindings() -> list[tuple[str, list[str], str | None]]:
    """(id, numactl options, what it needs of the kernel or None). Nothing assumes this host's ids."""
    topo = discover()
    cpu = max(os.sched_getaffinity(0))
    mem = str(MEM_NODE)
    node = str(min(n for n, nd in topo.nodes.items() if cpu in nd.cpus))
    c = str(cpu)
    out: list[tuple[list[str], str | None]] = [
        ([], None), (["-C", c], None), (["-N", node], None), (["-m", mem], None), (["-C", c, "-m", mem], None),
        (["-a", "-m", mem], None), (["-p", mem], None), (["-C", c, "-p", mem], None),
        (["-i", mem], None), (["-i", "all"], None), (["-N", node, "-i", mem], None),
        (["-P", mem], "preferred-many"), (["-C", c, "-P", mem], "preferred-many"),
        (["-w", mem], "weighted"), (["-w", "all"], "weighted"), (["-C", c, "-w", mem], "weighted"),
        (["-N", node, "-w", mem], "weighted"), (["-a", "-w", mem], "weighted"),
        (["-l"], None), (["-C", c, "-l"], None), (["-b", "-m", mem], "balancing"),
    ]
    return [(" ".join(o) or "unbound", o, need) for o, need in out]


BINDINGS = _bindings()


def _kernel_lacks(oracle: str, need: str | None, opts: list[str]) -> str | None:
    """Why this kernel cannot hold the binding (the test then skips), or None."""
    if need is None:
        return None
    if need == "weighted" and not (WEIGHTS_DIR / f"node{MEM_NODE}").is_file():
        return f"this kernel has no weighted interleave ({WEIGHTS_DIR}/node{MEM_NODE} is absent: Linux 6.9+)"
    cp = subprocess.run([oracle, *opts, "--", "true"], capture_output=True, text=True, timeout=60)
    if cp.returncode != 0:
        return f"this kernel refuses numactl {' '.join(opts)} ({need}): {cp.stderr.strip()}"
    return None


def _run(argv: list[str]) -> list[str]:
    cp = subprocess.run(argv, capture_output=True, text=True, env=child_env(), timeout=120, cwd=ROOT)
    assert cp.returncode == 0 and cp.stderr == "", (argv, cp.returncode, cp.stderr)
    return cp.stdout.splitlines()


def _masked(lines: list[str]) -> list[str]:
    """With several memory nodes, the next interleave node is masked."""
    if len([n for n, nd in discover().nodes.items() if nd.memory_bytes]) <= 1:
        return lines
    return [("preferred node: N (interleave next)" if line.endswith("(interleave next)") else
             "interleavenode: N" if line.startswith("interleavenode:") else line) for line in lines]


def _value(lines: list[str], key: str) -> str:
    values = [line[len(key) + 2:] for line in lines if line.startswith(key + ": ")]
    assert len(values) == 1, (key, lines)
    return values[0]


# numactl 2.0.19's --show where it breaks a line: its policy word, and numabind's name for that policy
KNOWN = {"-w": ("[6]", "weighted-interleave"), "-l": ("local", "local"), "-b": ("[8194]", "bind")}
GLUED = "preferred node: physcpubind: "


def _numabind_form(theirs: list[str], opts: list[str]) -> list[str]:
    """What numabind prints where numactl 2.0.19 prints ``theirs`` with a broken line (``KNOWN``): the
    policy's name, its own ``preferred node:`` value (and, under weighted interleave, the interleave mask,
    next node and the system's weights), then numactl's lines from physcpubind on."""
    word, name = next(KNOWN[o] for o in opts if o in KNOWN)
    assert theirs[0] == f"policy: {word}", f"numactl {VERSION} no longer prints 'policy: {word}': {theirs}"
    assert theirs[1].startswith(GLUED), f"numactl {VERSION} no longer glues physcpubind: {theirs}"
    rest = ["physcpubind: " + theirs[1][len(GLUED):], *theirs[2:]]
    nodes = [int(n) for n in _value(theirs, "preferred").split()]
    if name == "weighted-interleave":
        nxt = min(nodes)     # one memory node: it; several: masked by _masked
        weights = ",".join(f"{n}:{(WEIGHTS_DIR / f'node{n}').read_text().strip()}" for n in nodes)
        head = [f"preferred node: {nxt} (interleave next)", f"interleavemask: {_value(theirs, 'preferred')}",
                f"interleavenode: {nxt}", f"weights: {weights} (system-wide, {WEIGHTS_DIR})"]
    elif name == "local":
        head = ["preferred node: current"]
    else:
        head = [f"preferred node: {_value(theirs, 'membind').split()[0]}"]
    return [f"policy: {name}", *head, *rest]


# --------------------------------------------------------------------------- the tests
def test_oracle_sets_weighted_interleave(oracle):
    """The oracle is numactl 2.0.19 and its -w is the kernel's weighted interleave; so is numabind run's."""
    if why := _kernel_lacks(oracle, "weighted", ["-w", str(MEM_NODE)]):
        pytest.skip(why)
    maps = ["head", "-n1", "/proc/self/numa_maps"]
    for argv in ([oracle, "-w", str(MEM_NODE), "--", *maps],
                 [*NUMABIND, "run", "-w", str(MEM_NODE), "--", *maps]):
        line = _run(argv)[0]
        assert line.split(" ", 1)[1].startswith(f"weighted interleave:{MEM_NODE} "), (argv, line)


@pytest.mark.parametrize("opts,need", [b[1:] for b in BINDINGS], ids=[b[0] for b in BINDINGS])
def test_show_is_numactl_2_0_19_show(oracle, opts, need):
    if why := _kernel_lacks(oracle, need, opts):
        pytest.skip(why)
    theirs = _run([oracle, *opts, "--", oracle, "--show"])
    ours = _run([oracle, *opts, "--", *NUMABIND, "show"])
    if any(o in KNOWN for o in opts):
        expected = _numabind_form(theirs, opts)
    else:
        expected = theirs
        assert all(":" in line for line in theirs) and not any(line.startswith(GLUED) for line in theirs)
    assert _masked(ours) == _masked(expected), "\n".join(["numactl:", *theirs, "numabind:", *ours])


def _run_cases() -> list:
    """The bindings ``numabind run`` takes (``-N node`` binds the node's CPUs in the cpuset, as numactl does,
    whatever the affinity: under ``taskset -c 0`` too)."""
    return [pytest.param(*b[1:], id=b[0]) for b in BINDINGS if b[1]]


@pytest.mark.parametrize("opts,need", _run_cases())
def test_run_binds_what_numactl_2_0_19_binds(oracle, opts, need):
    """(numabind run without a binding is refused, so the unbound case is not here.)"""
    if why := _kernel_lacks(oracle, need, opts):
        pytest.skip(why)
    theirs = _run([oracle, *opts, "--", oracle, "--show"])
    ours = _run([*NUMABIND, "run", *opts, "--", oracle, "--show"])
    assert _masked(ours) == _masked(theirs)
    theirs = _run([oracle, *opts, "--", *NUMABIND, "show"])
    ours = _run([*NUMABIND, "run", *opts, "--", *NUMABIND, "show"])
    assert _masked(ours) == _masked(theirs)


def test_without_the_oracle_the_tests_skip_or_fail(pytester, tmp_path):
    """No oracle: a skip that says how to build it; NUMABIND_REQUIRE_ORACLE=1: an error (the fixture fails)."""
    pytester.makepyfile(test_it=f"""
        from tests.numactl_oracle import oracle  # noqa: F401
        def test_it(oracle):
            pass
    """)
    missing = str(tmp_path / "no-numactl")
    env = {"PYTHONPATH": ROOT, ORACLE_ENV: missing}
    for require, outcome in (("0", "skipped"), ("1", "error")):
        cp = subprocess.run([sys.executable, "-m", "pytest", "-rsf", "-p", "no:cacheprovider", str(pytester.path)],
                            capture_output=True, text=True, timeout=120, cwd=pytester.path,
                            env=dict(child_env(), **env, **{REQUIRE_ENV: require}))
        assert f"1 {outcome}" in cp.stdout, cp.stdout
        assert "bash scripts/numactl_oracle.sh" in cp.stdout and missing in cp.stdout, cp.stdout


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_build_script_is_idempotent(oracle):
    """Once built, scripts/numactl_oracle.sh only prints where the binary is."""
    if os.environ.get(ORACLE_ENV):
        pytest.skip(f"{ORACLE_ENV} names the oracle; the script's cache is not in use")
    cp = subprocess.run(["bash", os.path.join(ROOT, "scripts", "numactl_oracle.sh")], capture_output=True,
                        text=True, timeout=60)
    assert cp.returncode == 0 and cp.stderr == "", cp.stderr
    assert cp.stdout == f"{CACHED}\n"
