"""Fuzz of ``numabind run``'s option combinations: it applies exactly what was asked, or exits naming why:
2 for a usage error (whatever the machine), 1 for a binding this machine cannot give.

Hypothesis draws binding options in every spelling (``-C 1``, ``--physcpubind=1``, ``--cpus 1`` ...),
conflicting ones (``--gpu`` with explicit options, two memory policies, an option given twice,
``--mode``/``--policy`` without a GPU), values this machine does not have, and shuffles their order.
Each combination runs through ``numabind.cli.main`` in this process with ``exec`` intercepted: the
command it would have exec'd (the command itself, or the numactl wrapper's argv) is started from the
thread ``main`` bound, so it inherits exactly what an exec'd command would, and it reports its CPUs and
memory policy read from procfs and ``get_mempolicy(2)`` (tests/proc_targets.py, not numabind). The
expected outcome comes from a small model of numactl's options written here, not from numabind.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numabind import live
from numabind.cli import main
from tests.kernel import ROOT, ids_of, raw_set_word, raw_word, thread_affinities

pytestmark = pytest.mark.kernel

ALLOWED = sorted(os.sched_getaffinity(0))
#: What -N binds: the node's CPUs in the cpuset (numactl's rule), which under ``taskset -c 0`` is wider than the
#: affinity (the cpuset reader itself is tested against fake cgroup trees in tests/test_allowed.py).
CPUSET = live.limits().allowed_cpus
MEM_NODES = sorted(ids_of(open("/sys/devices/system/node/has_memory").read()))
NODE_CPUS = {n: ids_of(open(f"/sys/devices/system/node/node{n}/cpulist").read())
             for n in ids_of(open("/sys/devices/system/node/online").read())}
CPU_NODES = sorted(n for n, cpus in NODE_CPUS.items() if cpus & set(ALLOWED))
OUTSIDE_CPU = max(ids_of(open("/sys/devices/system/cpu/online").read())) + 1
MISSING_NODE = max(ids_of(open("/sys/devices/system/node/possible").read())) + 1

SPELLINGS = {  # option -> the ways to write it
    "physcpubind": ["-C", "--physcpubind", "--cpus"],
    "cpunodebind": ["-N", "--cpunodebind"],
    "membind": ["-m", "--membind"],
    "preferred": ["-p", "--preferred"],
    "preferred-many": ["--preferred-many"],
    "interleave": ["-i", "--interleave"],
}
MEMORY = ("membind", "preferred", "preferred-many", "interleave", "localalloc")
POLICY_OF = {"membind": "bind", "preferred": "preferred", "preferred-many": "preferred-many",
             "interleave": "interleave", "localalloc": "local"}
REPORT = ("import json, sys; sys.path.insert(0, sys.argv[1]); from tests import proc_targets as p; "
          "print(json.dumps(p.state('exec')))")


def _list(ids) -> str:
    return ",".join(str(i) for i in sorted(ids))


@st.composite
def option(draw, name: str, values) -> tuple[str, list[str], object]:
    """(option name, its argv words in a random spelling, the value's ids)."""
    ids = draw(values)
    flag = draw(st.sampled_from(SPELLINGS[name]))
    text = _list(ids)
    words = [f"{flag}={text}"] if flag.startswith("--") and draw(st.booleans()) else [flag, text]
    return name, words, frozenset(ids)


def subsets(pool, extra) -> st.SearchStrategy:
    """Non-empty subsets of ``pool``; one in ten with an id this machine lacks."""
    good = st.sets(st.sampled_from(pool), min_size=1, max_size=len(pool))
    return st.tuples(good, st.integers(0, 9)).map(lambda t: t[0] | {extra} if t[1] == 0 else t[0])


@st.composite
def run_options(draw):
    chosen: list[tuple[str, list[str], object]] = []
    cpu = draw(st.sampled_from(["none"] * 2 + ["physcpubind"] * 3 + ["cpunodebind"] * 2 + ["both"]))
    if cpu in ("physcpubind", "both"):
        chosen.append(draw(option("physcpubind", subsets(ALLOWED, OUTSIDE_CPU))))
    if cpu in ("cpunodebind", "both"):
        chosen.append(draw(option("cpunodebind", subsets(CPU_NODES, MISSING_NODE))))
    how_many = draw(st.sampled_from([0, 0, 0, 1, 1, 1, 1, 1, 2]))
    for name in draw(st.lists(st.sampled_from(MEMORY), min_size=how_many, max_size=how_many, unique=True)):
        if name == "localalloc":
            chosen.append((name, [draw(st.sampled_from(["-l", "--localalloc"]))], frozenset()))
        else:
            chosen.append(draw(option(name, subsets(MEM_NODES, MISSING_NODE))))
    valued = [c for c in chosen if c[0] != "localalloc"]
    if valued and draw(st.integers(0, 9)) == 0:   # an option given twice, maybe spelled another way
        chosen.append(draw(option(draw(st.sampled_from(valued))[0], subsets(ALLOWED, OUTSIDE_CPU))))
    extra: list[tuple[str, list[str], object]] = []
    if draw(st.integers(0, 7)) == 0:
        extra.append(("gpu", ["--gpu", "0"], None))
    if draw(st.integers(0, 9)) == 0:
        extra.append(("mode", ["--mode", draw(st.sampled_from(["node", "socket"]))], None))
    if draw(st.integers(0, 9)) == 0:
        extra.append(("policy", ["--policy", draw(st.sampled_from(["bind", "interleave"]))], None))
    if draw(st.booleans()):
        extra.append(("strict", ["--strict"], None))
    if draw(st.integers(0, 7)) == 0:
        extra.append(("migrate", ["--migrate"], None))
    backend = draw(st.sampled_from([None, "libnuma", "syscall", "numactl"]))
    if backend:
        extra.append(("backend", ["--backend", backend], None))
    return draw(st.permutations(chosen + extra))


def _names(*words: str):
    return lambda err: all(w in err for w in words)


def _node(n: int):
    return lambda err: re.search(rf"\bnodes? {n}\b", err) is not None


def expected(items) -> tuple[str, object]:
    """A model of the options, in the order the CLI checks them:

    ("exit2", [predicates on stderr, any one of which must hold]) — a usage error names what is wrong;
    ("exit1", [predicates]) — a binding this machine cannot give (a CPU or node it lacks) names it;
    ("gpu", None) — a GPU plan, compared with plan_for_gpu; ("bound", (cpus, policy, nodes)).
    """
    names = [name for name, _, _ in items]
    values = {name: ids for name, _, ids in items}
    explicit = [n for n in names if n in SPELLINGS or n == "localalloc"]
    if any(names.count(n) > 1 for n in names):                 # argparse, while parsing
        return "exit2", [_names("given twice")]
    if "gpu" in names and explicit:                            # then the combination of options
        return "exit2", [_names("--gpu", *("--" + n for n in explicit))]
    shaping = [n for n in ("mode", "policy") if n in names]
    if shaping and "gpu" not in names:
        return "exit2", [_names(*("--" + n for n in shaping))]
    if "gpu" in names:
        return "gpu", None
    if not explicit:     # --migrate alone may be refused first for wanting a memory policy
        alone = [_names("--migrate", "memory policy")] if "migrate" in names else []
        return "exit2", [_names("give a binding"), *alone]
    usage, misfit = [], []                       # then the command line, whatever the machine; then the machine
    if "physcpubind" in names and "cpunodebind" in names:
        usage.append(_names("--physcpubind", "--cpunodebind"))
    mem = [n for n in names if n in MEMORY]
    if len(mem) > 1:
        usage.append(_names(*("--" + n for n in mem)))
    if any(m == "preferred" and len(values[m]) > 1 for m in mem):
        usage.append(_names("preferred"))
    if "migrate" in names and (not mem or "localalloc" in mem):
        usage.append(_names("migrate"))
    if usage:
        return "exit2", usage
    cpus: frozenset[int] = frozenset(ALLOWED)
    if "physcpubind" in names:
        cpus = values["physcpubind"]
        if OUTSIDE_CPU in cpus:
            misfit.append(lambda err: re.search(rf"\bCPUs {OUTSIDE_CPU}\b", err) is not None)
    if "cpunodebind" in names:
        if MISSING_NODE in values["cpunodebind"]:
            misfit.append(_node(MISSING_NODE))
        cpus = frozenset().union(*(NODE_CPUS.get(n, frozenset()) for n in values["cpunodebind"])) & CPUSET
    policy, nodes = "default", frozenset()
    if mem:
        policy, nodes = POLICY_OF[mem[0]], values[mem[0]]
        if MISSING_NODE in nodes:
            misfit.append(_node(MISSING_NODE))
    if misfit:
        return "exit1", misfit
    return "bound", (sorted(cpus), policy, sorted(nodes))


class Executed(Exception):
    pass


def _refuse_exec(path, argv):
    raise Executed(list(argv))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=run_options())
def test_run_applies_exactly_what_was_asked_or_exits_1_or_2(items, capsys, monkeypatch):
    monkeypatch.setattr(os, "execv", _refuse_exec)
    monkeypatch.setattr(os, "execvp", _refuse_exec)
    monkeypatch.setattr(os, "execvpe", lambda path, argv, env: _refuse_exec(path, argv))   # numabind run's exec
    monkeypatch.setattr(os, "execve", lambda path, argv, env: _refuse_exec(path, argv))    # the numactl backend's
    argv = ["run", *(w for _, words, _ in items for w in words), "--", sys.executable, "-c", REPORT, ROOT]
    affinities, word = thread_affinities(), raw_word()
    capsys.readouterr()
    try:
        try:
            rc: object = main(argv)
        except SystemExit as e:
            rc = e.code
        except Executed as e:
            # what exec would have run, started from the thread main() bound: it inherits the binding
            cp = subprocess.run(e.args[0], capture_output=True, text=True, timeout=60, env={
                k: v for k, v in os.environ.items() if not k.startswith(("NUMABIND_", "_NUMABIND_"))})
            assert cp.returncode == 0, (argv, cp.stderr)
            rc = json.loads(cp.stdout)
    finally:
        for tid, cpus in affinities.items():
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                pass
        raw_set_word(*word)
    err = capsys.readouterr().err
    kind, want = expected(items)
    if kind == "gpu":
        from numabind import PlanError, plan_for_gpu

        mode = next((w[1] for n, w, _ in items if n == "mode"), "node")
        policy = next((w[1] for n, w, _ in items if n == "policy"), "bind")
        try:
            plan = plan_for_gpu(0, mode=mode, policy=policy)
        except PlanError:
            assert rc == 1 and "numabind: error:" in err, (argv, rc, err)
            return
        kind, want = "bound", (sorted(plan.cpus), plan.mem_policy, sorted(plan.mem_nodes or ()))
    if kind in ("exit1", "exit2"):
        assert rc == int(kind[-1]), (argv, rc, err)
        assert any(named(err) for named in want), (argv, err)
        return
    assert isinstance(rc, dict), (argv, rc, err)
    cpus, policy, nodes = want
    assert rc["cpus"] == cpus, (argv, rc)
    if policy == "local":  # kernels before 5.x store MPOL_LOCAL as preferred with no node
        assert (rc["policy"], rc["nodes"]) in (("local", []), ("preferred", [])), (argv, rc)
    else:
        assert (rc["policy"], rc["nodes"]) == (policy, nodes), (argv, rc)
