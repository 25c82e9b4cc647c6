"""Issue 3, item 7: ``set_mempolicy`` and ``mbind`` denied by a seccomp filter (EPERM).

Without strict mode numabind walks its degrade ladder, each refused step logged with the
errno, and still binds the CPUs; in strict mode it raises ``BindError`` naming
``set_mempolicy`` and ``EPERM``, and an uncaught one ends the process with a traceback.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import subprocess
import sys

import pytest

from . import harness, probe

MPOL_DEFAULT = 0


def _denied(backend: str, cpus: list[int], policy: str, nodes: list[int]) -> dict:
    os.environ["NUMABIND_BACKEND"] = backend
    probe.deny_mempolicy()
    import numabind

    out: dict = {"raw": probe.raw_set_mempolicy(MPOL_DEFAULT)}
    collect = probe.LogCollector()
    logging.getLogger("numabind").addHandler(collect)
    logging.getLogger("numabind").setLevel(logging.DEBUG)
    plan = numabind.Plan(cpus=frozenset(cpus), mem_policy=policy, mem_nodes=frozenset(nodes))
    before = sorted(os.sched_getaffinity(0))
    try:
        numabind.bind_current(plan, strict=True)
    except numabind.BindError as e:
        out["strict"] = {"type": type(e).__name__, "errno": e.errno, "syscall": e.syscall, "text": str(e),
                         "is_oserror": isinstance(e, OSError)}
    else:
        out["strict"] = None
    out["strict_rolled_back"] = sorted(os.sched_getaffinity(0)) == before
    del collect.records[:]
    report = numabind.bind_current(plan)
    out.update(backend=report.backend, warnings=list(report.warnings), cpus=sorted(report.applied.cpus),
               policy=report.applied.mem_policy, logged=[m for lvl, m in collect.records if lvl == "WARNING"],
               threads={tid: sorted(c) for tid, c in probe.thread_affinities().items()})
    return out


@pytest.mark.numa_vm(topology="2n")
@pytest.mark.parametrize("backend", ["libnuma", "syscall"])
@pytest.mark.parametrize("policy, nodes, ladder", [
    ("bind", [1], ["bind", "preferred"]),
    ("interleave", [0, 1], ["interleave", "preferred-many", "preferred"]),
], ids=["bind", "interleave"])
def test_denied_set_mempolicy_degrades_step_by_step(backend, policy, nodes, ladder, vm_topology):
    cpus = sorted(vm_topology.node_cpus(1))
    r = probe.in_child(_denied, backend, cpus, policy, nodes)
    assert r["raw"] == -errno.EPERM, "the seccomp filter is not in force"
    # strict: BindError(EPERM, set_mempolicy), CPUs untouched
    s = r["strict"]
    assert s is not None, "strict mode accepted a denied set_mempolicy"
    assert s["errno"] == errno.EPERM and s["syscall"] == "set_mempolicy" and s["is_oserror"]
    assert "set_mempolicy" in s["text"] and "EPERM" in s["text"]
    assert r["strict_rolled_back"]
    # default: the ladder, one EPERM warning per refused step, in order; the CPUs still bound
    assert r["backend"] == backend
    eperm = [w for w in r["warnings"] if "EPERM" in w]
    assert len(eperm) == len(ladder), r["warnings"]
    assert all("set_mempolicy" in w for w in eperm)
    steps = []
    for w in eperm:
        named = [p for p in ladder if re.search(rf"(?<![\w-]){re.escape(p)}(?![\w-])", w)]
        steps.append(named[0] if len(named) == 1 else named)
    assert steps == ladder, eperm
    assert any("unchanged" in w or "not applied" in w for w in r["warnings"][len(eperm):] + eperm[-1:])
    assert all(any(w in m for m in r["logged"]) for w in r["warnings"]), "every warning is logged"
    assert r["cpus"] == cpus and all(c == cpus for c in r["threads"].values())
    assert r["policy"] == "default"
    print(f"item 7, {backend}, {policy} {nodes} with set_mempolicy denied: strict -> {s['type']}: {s['text']}; "
          f"default -> CPUs {r['cpus']}, policy {r['policy']}, ladder {' -> '.join(steps)} -> unchanged:")
    for w in r["warnings"]:
        print(f"    warning: {w}")


STRICT_UNCAUGHT = """
import sys
sys.path.insert(0, {root!r})
from tests.vm import probe
probe.deny_mempolicy()
import numabind
numabind.bind_current(numabind.Plan(cpus=frozenset({cpus}), mem_policy="bind", mem_nodes=frozenset({{1}})),
                      strict=True)
print("NOT REACHED")
"""

CLI_UNDER_SECCOMP = """
import os, sys
sys.path.insert(0, {root!r})
from tests.vm import probe
probe.deny_mempolicy()
os.execv(sys.executable, [sys.executable, "-m", "numabind", "run", "--strict", "--membind=1", "--", "true"])
"""


@pytest.mark.numa_vm(topology="2n")
def test_strict_denied_set_mempolicy_ends_with_a_traceback(vm_topology):
    cpus = set(vm_topology.node_cpus(1))
    env = dict(os.environ, NUMABIND_BACKEND="syscall")
    proc = subprocess.run([sys.executable, "-c", STRICT_UNCAUGHT.format(root=str(harness.REPO_ROOT), cpus=cpus)],
                          capture_output=True, text=True, env=env, timeout=120, cwd=harness.REPO_ROOT)
    assert proc.returncode == 1 and "NOT REACHED" not in proc.stdout
    assert "Traceback (most recent call last)" in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "BindError" in last and "set_mempolicy" in last and "EPERM" in last, proc.stderr
    cli = subprocess.run([sys.executable, "-c", CLI_UNDER_SECCOMP.format(root=str(harness.REPO_ROOT))],
                         capture_output=True, text=True, env=dict(env, PYTHONPATH=str(harness.REPO_ROOT)),
                         timeout=120, cwd=harness.REPO_ROOT)
    assert cli.returncode != 0
    assert "set_mempolicy" in cli.stderr and "EPERM" in cli.stderr, cli.stderr
    print(f"item 7, strict uncaught: exit {proc.returncode}, {last}")
    print(f"item 7, numabind run --strict: exit {cli.returncode}, {cli.stderr.strip().splitlines()[-1]}")


SYS_SCHED_SETAFFINITY = 203  # x86_64, like the filter's other numbers


def _partial(cpus: list[int], deny: tuple[int, ...]) -> dict:
    """strict="partial" with ``deny`` refused by seccomp (EPERM): raise only when nothing could be applied."""
    probe.deny_mempolicy(syscalls=deny)
    import numabind

    before = sorted(os.sched_getaffinity(0))
    plan = numabind.Plan(cpus=frozenset(cpus), mem_policy="bind", mem_nodes=frozenset({1}))
    out: dict = {"before": before}
    try:
        report = numabind.bind_current(plan, strict="partial")
        out.update(error=None, warnings=list(report.warnings), cpus=sorted(report.applied.cpus),
                   policy=report.applied.mem_policy)
    except numabind.BindError as e:
        out["error"] = {"errno": e.errno, "syscall": e.syscall, "text": str(e)}
    out["after"] = sorted(os.sched_getaffinity(0))
    return out


@pytest.mark.numa_vm(topology="2n")
@pytest.mark.parametrize("backend", ["libnuma", "syscall"])
def test_partial_binds_the_cpus_when_only_memory_is_denied(backend, vm_topology, monkeypatch):
    """Issue 13/15: SGLang's rule — degrade step by step, raise only when nothing of the plan is in force."""
    monkeypatch.setenv("NUMABIND_BACKEND", backend)
    cpus = sorted(vm_topology.node_cpus(1))
    r = probe.in_child(_partial, cpus, (probe.SYS_SET_MEMPOLICY, probe.SYS_MBIND))
    assert r["error"] is None, r
    assert r["cpus"] == r["after"] == cpus and r["policy"] == "default"
    steps = [w for w in r["warnings"] if "EPERM" in w and "set_mempolicy" in w]
    assert len(steps) == 2, r["warnings"]   # bind 1, then preferred 1
    print(f"strict=partial, {backend}, set_mempolicy denied: CPUs {r['cpus']} bound, {len(steps)} refused steps")


@pytest.mark.numa_vm(topology="2n")
@pytest.mark.parametrize("backend", ["libnuma", "syscall"])
def test_partial_raises_when_cpus_and_memory_are_denied(backend, vm_topology, monkeypatch):
    monkeypatch.setenv("NUMABIND_BACKEND", backend)
    cpus = sorted(vm_topology.node_cpus(1))
    r = probe.in_child(_partial, cpus, (probe.SYS_SET_MEMPOLICY, SYS_SCHED_SETAFFINITY))
    assert r["error"] is not None, r
    assert r["error"]["errno"] == errno.EPERM and "nothing of the plan" in r["error"]["text"]
    assert "set_mempolicy" in r["error"]["text"] and "sched_setaffinity" in r["error"]["text"]
    assert r["after"] == r["before"]
    print(f"strict=partial, {backend}, set_mempolicy and sched_setaffinity denied: {r['error']['text']}")
