"""Real-kernel tests of ``bind_current`` and ``current_binding`` on this host.

Nothing assumes this host's CPU ids or node count: the CPUs and nodes come from
tests/kernel.py, derived at run time (the suite also runs in a QEMU guest with 4 CPUs and 3
nodes, tests/vm/test_vm_suite.py). Every test here touches the kernel (``@pytest.mark.kernel``). The autouse fixture ``restore_process``
saves the affinity of every thread and the calling thread's memory policy and
puts them back afterwards; tests whose faults cannot be undone (seccomp
filters) run in a child process.

What a binding did is read back through channels that do not go through the
code under test: ``/proc/self/status`` and ``/proc/self/task/<tid>/status``
(``Cpus_allowed_list``), ``os.sched_getaffinity(tid)``, the raw
``get_mempolicy`` system call of ``numabind._native`` and ``numactl --show``
run from the calling thread (a child inherits its policy).
"""

from __future__ import annotations

import errno
import json
import functools
import logging
import multiprocessing
import os
import pickle
import threading

import pytest

import numabind
from numabind import BindError, Plan, PlanError, live
from numabind.cpulist import format_cpulist
from numabind.backends import get_backend
from numabind.backends import Backend
from tests.kernel import (  # noqa: F401  (all_cpus, forced, two_cpus: fixtures)
    ALLOWED,
    CPU_A,
    CPU_B,
    MEM_NODE,
    MISSING_NODE,
    MPOL,
    MPOL_F_NUMA_BALANCING,
    MPOL_F_RELATIVE_NODES,
    MPOL_F_STATIC_NODES,
    NO_SUCH_TID,
    ONLINE_CPUS,
    OUTSIDE_CPU,
    ROOT,
    SECCOMP,
    Parked,
    all_cpus,
    assert_numactl_shows,
    expected_raw,
    forced,
    ids_of,
    numactl_show,
    raw_mempolicy,
    raw_set_mempolicy,
    raw_set_word,
    raw_word,
    run_json,
    run_python,
    status_cpus,
    thread_affinities,
    two_cpus,
    wait_gone,
)

pytestmark = pytest.mark.kernel

BACKENDS = ("libnuma", "syscall", "numactl", "none")
NATIVE = ("libnuma", "syscall")           # the backends that set a memory policy in-process
POLICIES = ("bind", "preferred", "preferred-many", "interleave", "local", "default")
A, B, N = CPU_A, CPU_B, MEM_NODE           # short names for the plans below


def stepwise(be, monkeypatch) -> None:
    """Make ``be`` bind step by step (live.thread_ids, then the walk, in C for the native backends) instead
    of in its one call, so that a test can hand the walk a thread list of its own."""
    monkeypatch.setattr(be, "apply_all", functools.partial(Backend.apply_all, be))


def generic(be, monkeypatch) -> None:
    """Make ``be`` bind step by step (no one-call bind) and do its walk and its memory-policy swap with the
    per-call Python versions (Backend's), so that a test can refuse one call of one thread by patching
    set_affinity / set_mempolicy."""
    monkeypatch.setattr(be, "apply_all", functools.partial(Backend.apply_all, be))
    monkeypatch.setattr(be, "affinity_many", functools.partial(Backend.affinity_many, be))
    monkeypatch.setattr(be, "swap_mempolicy", functools.partial(Backend.swap_mempolicy, be))


# --------------------------------------------------------------------------- CPU binding
@pytest.mark.parametrize("backend", BACKENDS)
def test_cpu0_then_cpu1_and_back(backend, forced, all_cpus):
    kwargs, reason = forced(backend)
    with Parked(2) as parked:
        for cpus in ({A}, {B}, all_cpus):
            report = numabind.bind_current(Plan(cpus=cpus), **kwargs)
            assert report.backend == backend
            assert reason in report.backend_reason
            assert report.applied.cpus == cpus
            assert report.ok, report.warnings
            assert os.sched_getaffinity(0) == cpus
            assert status_cpus() == cpus
            assert status_cpus(threading.get_native_id()) == cpus
            for tid in parked.tids:
                assert os.sched_getaffinity(tid) == cpus
                assert status_cpus(tid) == cpus
            statuses = {t.tid: t.status for t in report.threads}
            assert report.threads[0].tid == threading.get_native_id()
            for tid in [threading.get_native_id(), *parked.tids]:
                assert statuses[tid] == "bound"
    assert set(parked.seen.values()) == {all_cpus}


@pytest.mark.parametrize("backend", BACKENDS)
def test_cpu_only_plan_leaves_memory_policy(backend, all_cpus):
    raw_set_mempolicy("interleave", {N})
    report = numabind.bind_current(Plan(cpus={B}), backend=backend)
    assert report.ok, report.warnings
    assert raw_mempolicy() == (MPOL["interleave"], frozenset({N}))
    assert os.sched_getaffinity(0) == {B}


@pytest.mark.parametrize("backend", BACKENDS)
def test_threads_created_before_the_call_are_all_bound(backend, all_cpus):
    with Parked(4) as parked:
        report = numabind.bind_current(Plan(cpus={B}), backend=backend)
        by_tid = {t.tid: t for t in report.threads}
        for tid in parked.tids:
            assert by_tid[tid].status == "bound"
            assert by_tid[tid].before == all_cpus
            assert by_tid[tid].after == {B}
            assert os.sched_getaffinity(tid) == {B}
            assert status_cpus(tid) == {B}
        binding = numabind.current_binding(backend)
        assert {tid: binding.threads[tid] for tid in parked.tids} == {tid: frozenset({B}) for tid in parked.tids}
    # the threads themselves run on CPU 1 now
    assert parked.seen == {tid: frozenset({B}) for tid in parked.tids}


@pytest.mark.parametrize("backend", BACKENDS)
def test_thread_pinned_elsewhere_is_left_alone_and_reported(backend, all_cpus, two_cpus):
    with Parked(pins=[None, {A}, None]) as parked:
        pinned = next(tid for tid in parked.tids if os.sched_getaffinity(tid) == {A})
        others = [tid for tid in parked.tids if tid != pinned]
        report = numabind.bind_current(Plan(cpus={B}), backend=backend)
        by_tid = {t.tid: t for t in report.threads}
        assert by_tid[pinned].status == "left-alone"
        assert f"pinned to {A}" in by_tid[pinned].detail
        assert os.sched_getaffinity(pinned) == {A}
        assert status_cpus(pinned) == {A}
        for tid in others:
            assert by_tid[tid].status == "bound"
            assert os.sched_getaffinity(tid) == {B}
        assert "1 left-alone" in report.describe()
        assert f"{pinned}:{A}" in numabind.current_binding(backend).describe()


@pytest.mark.parametrize("backend", BACKENDS)
def test_threads_all_binds_pinned_threads_too(backend, all_cpus, two_cpus):
    with Parked(pins=[{A}, None]) as parked:
        report = numabind.bind_current(Plan(cpus={B}), threads="all", backend=backend)
        assert {t.status for t in report.threads} == {"bound"}
        for tid in parked.tids:
            assert os.sched_getaffinity(tid) == {B}
            assert status_cpus(tid) == {B}


@pytest.mark.parametrize("backend", BACKENDS)
def test_threads_current_binds_only_the_caller(backend, all_cpus):
    with Parked(2) as parked:
        report = numabind.bind_current(Plan(cpus={A}), threads="current", backend=backend)
        assert [t.tid for t in report.threads] == [threading.get_native_id()]
        assert os.sched_getaffinity(0) == {A}
        for tid in parked.tids:
            assert os.sched_getaffinity(tid) == all_cpus
            assert status_cpus(tid) == all_cpus


def test_unknown_thread_mode_and_non_plan_are_plan_errors():
    with pytest.raises(PlanError, match="threads="):
        numabind.bind_current(Plan(cpus={A}), threads="some")
    with pytest.raises(PlanError, match="needs a numabind.Plan"):
        numabind.bind_current("--physcpubind=0")
    assert issubclass(PlanError, ValueError)


@pytest.mark.parametrize("backend", BACKENDS)
def test_thread_exiting_during_the_walk_is_not_an_error(backend, monkeypatch, all_cpus):
    """The victim is alive when /proc/self/task lists it and gone when the walk reaches it: the real
    ESRCH of the kernel, in the C walk of the native backends and in the Python one of the others."""
    stop = threading.Event()
    victim = threading.Thread(target=stop.wait, daemon=True)
    victim.start()
    vtid = victim.native_id
    real_ids = live.thread_ids

    def thread_ids(first=0):
        listed = real_ids(first)
        if stop.is_set():    # listed again after the walk (threads started meanwhile): the victim is gone
            return listed
        assert vtid in listed
        stop.set()
        victim.join()
        wait_gone(vtid)
        return listed

    monkeypatch.setattr(live, "thread_ids", thread_ids)
    stepwise(get_backend(backend)[0], monkeypatch)
    with Parked(1) as parked:
        report = numabind.bind_current(Plan(cpus={B}), backend=backend)
        by_tid = {t.tid: t for t in report.threads}
        assert by_tid[vtid].status == "exited"
        assert by_tid[parked.tids[0]].status == "bound"
        assert os.sched_getaffinity(parked.tids[0]) == {B}
    assert report.ok, report.warnings


@pytest.mark.parametrize("backend", BACKENDS)
def test_thread_gone_before_its_affinity_is_read(backend, monkeypatch, all_cpus):
    real_ids = live.thread_ids
    monkeypatch.setattr(live, "thread_ids", lambda first=0: real_ids(first) + [NO_SUCH_TID])
    stepwise(get_backend(backend)[0], monkeypatch)
    report = numabind.bind_current(Plan(cpus={A}), backend=backend, strict=True)
    assert {t.tid: t.status for t in report.threads}[NO_SUCH_TID] == "exited"
    assert os.sched_getaffinity(0) == {A}


def test_threads_coming_and_going_while_binding(all_cpus):
    """Real churn: short-lived threads start and exit while bind_current walks /proc/self/task."""
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            batch = [threading.Thread(target=lambda: None) for _ in range(8)]
            for t in batch:
                t.start()
            for t in batch:
                t.join()

    spinner = threading.Thread(target=churn, daemon=True)
    spinner.start()
    try:
        for k in range(40):
            cpus = {(A, B)[k % 2]}
            report = numabind.bind_current(Plan(cpus=cpus), threads="all", backend="syscall")
            assert report.applied.cpus == cpus
            assert {t.status for t in report.threads} <= {"bound", "exited"}
    finally:
        stop.set()
        spinner.join()


# --------------------------------------------------------------------------- memory policy
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("backend", NATIVE)
def test_each_memory_policy_to_node_0(backend, policy, forced):
    kwargs, reason = forced(backend)
    # start from a different policy, so that "default" has something to undo
    raw_set_mempolicy("interleave" if policy != "interleave" else "bind", {N})
    nodes = None if policy in ("local", "default") else {N}
    report = numabind.bind_current(Plan(mem_policy=policy, mem_nodes=nodes), **kwargs)
    assert report.ok, report.warnings
    assert reason in report.backend_reason
    assert report.applied.mem_policy == policy
    assert report.applied.mem_nodes == frozenset(nodes or ())
    assert raw_mempolicy() in expected_raw(policy)
    for name in NATIVE:  # both native readers agree
        assert get_backend(name)[0].get_mempolicy() == (policy, frozenset(nodes or ()))
    assert_numactl_shows(policy)
    binding = numabind.current_binding(backend)
    assert (binding.mem_policy, binding.mem_nodes) == (policy, frozenset(nodes or ()))


@pytest.mark.parametrize("backend", NATIVE)
def test_cpus_and_memory_together(backend, all_cpus):
    with Parked(2) as parked:
        # the parked threads and any this interpreter already runs (a plugin's, a library's)
        others = len(os.listdir("/proc/self/task")) - 1
        report = numabind.bind_current(Plan(cpus={B}, mem_policy="bind", mem_nodes={N}), backend=backend)
        assert report.applied == Plan(cpus={B}, mem_policy="bind", mem_nodes={N})
        assert report.ok, report.warnings
        assert status_cpus() == {B}
        assert raw_mempolicy() == (MPOL["bind"], frozenset({N}))
        assert_numactl_shows("bind")
        assert numactl_show()["physcpubind"].split() == [str(B)]
        # other threads cannot be given a policy; the report says so
        assert others >= 2
        assert any("calling thread only" in n and f"{others} other thread" in n for n in report.notes), report.notes
        for tid in parked.tids:
            assert os.sched_getaffinity(tid) == {B}


@pytest.mark.parametrize("backend", NATIVE)
def test_threads_started_after_the_call_inherit_the_policy(backend):
    numabind.bind_current(Plan(cpus={A}, mem_policy="interleave", mem_nodes={N}), backend=backend)
    seen = {}

    def probe():
        seen["policy"] = raw_mempolicy()
        seen["cpus"] = frozenset(os.sched_getaffinity(0))

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    assert seen == {"policy": (MPOL["interleave"], frozenset({N})), "cpus": frozenset({A})}


@pytest.mark.parametrize("backend", ("numactl", "none"))
def test_no_in_process_memory_policy_warns(backend, forced, caplog, all_cpus):
    kwargs, _ = forced(backend)
    before = raw_mempolicy()
    with caplog.at_level(logging.WARNING, logger="numabind"):
        report = numabind.bind_current(Plan(cpus={B}, mem_policy="bind", mem_nodes={N}), **kwargs)
    assert os.sched_getaffinity(0) == {B}            # the CPU part is applied
    assert raw_mempolicy() == before                  # the memory part is not, and says so
    assert not report.ok
    assert any("set_mempolicy" in w and "ENOTSUP" in w for w in report.warnings), report.warnings
    if backend == "numactl":
        assert any("numabind run" in w for w in report.warnings)
    assert any(r.levelno == logging.WARNING and "set_mempolicy" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("backend", ("numactl", "none"))
def test_no_in_process_memory_policy_strict_raises(backend, forced, all_cpus):
    kwargs, _ = forced(backend)
    before = raw_mempolicy()
    with pytest.raises(BindError) as exc:
        numabind.bind_current(Plan(cpus={B}, mem_policy="bind", mem_nodes={N}), strict=True, **kwargs)
    assert exc.value.errno == errno.ENOTSUP
    assert exc.value.syscall == "set_mempolicy"
    assert "set_mempolicy" in str(exc.value) and "ENOTSUP" in str(exc.value)
    assert isinstance(exc.value, OSError)
    assert os.sched_getaffinity(0) == all_cpus
    assert raw_mempolicy() == before


@pytest.mark.parametrize("backend", NATIVE)
def test_migrate_onto_every_memory_node_moves_nothing(backend):
    """Bound to all the memory nodes it may use, a process has no page on another node: nothing is
    moved, and the counts (from numa_maps, which the transaction reads) say so."""
    nodes = live.limits()
    every = nodes.allowed_nodes & nodes.memory_nodes
    report = numabind.bind_current(Plan(mem_policy="interleave", mem_nodes=every, migrate=True), backend=backend)
    assert (report.pages_migrated, report.pages_not_migrated) == (0, 0)
    assert report.ok, report.warnings
    assert "0 pages moved, 0 left behind" in report.describe()


# --------------------------------------------------------------------------- strict and rollback
@pytest.mark.parametrize("backend", BACKENDS)
def test_strict_cpus_outside_the_allowed_set_change_nothing(backend, all_cpus):
    if backend in NATIVE:
        raw_set_mempolicy("interleave", {N})   # the plan's bind would replace it: must be rolled back
        plan = Plan(cpus={B, OUTSIDE_CPU}, mem_policy="bind", mem_nodes={N})
    else:
        plan = Plan(cpus={B, OUTSIDE_CPU})
    with Parked(2):
        before = thread_affinities()
        policy = raw_mempolicy()
        with pytest.raises(PlanError, match=f"CPUs {OUTSIDE_CPU} are not online"):
            numabind.bind_current(plan, strict=True, backend=backend)
        assert thread_affinities() == before
        assert raw_mempolicy() == policy
        assert status_cpus() == all_cpus


@pytest.mark.parametrize("value", ("1", "true", "yes", "on"))
def test_numabind_strict_env_is_honoured(value, monkeypatch, all_cpus, apply_time):
    monkeypatch.setenv("NUMABIND_STRICT", value)
    raw_set_mempolicy("preferred", {N})
    with pytest.raises(PlanError, match=f"CPUs {OUTSIDE_CPU}"):
        numabind.bind_current(Plan(cpus={A, OUTSIDE_CPU}, mem_policy="bind", mem_nodes={N}))
    assert os.sched_getaffinity(0) == all_cpus
    assert raw_mempolicy() == (MPOL["preferred"], frozenset({N}))
    # an explicit strict=False wins over the environment
    report = numabind.bind_current(Plan(cpus={A, OUTSIDE_CPU}), strict=False)
    assert report.applied.cpus == {A}
    assert any("narrowed" in w for w in report.warnings)


def test_numabind_strict_zero_is_not_strict(monkeypatch, all_cpus, apply_time):
    monkeypatch.setenv("NUMABIND_STRICT", "0")
    report = numabind.bind_current(Plan(cpus={B, OUTSIDE_CPU}))
    assert report.applied.cpus == {B}
    assert not report.ok


@pytest.mark.parametrize("backend", NATIVE)
def test_strict_unknown_memory_node_changes_nothing(backend, all_cpus):
    raw_set_mempolicy("interleave", {N})
    with pytest.raises(PlanError, match=f"nodes {MISSING_NODE} do not exist"):
        numabind.bind_current(Plan(cpus={B}, mem_policy="bind", mem_nodes={MISSING_NODE}), strict=True, backend=backend)
    assert raw_mempolicy() == (MPOL["interleave"], frozenset({N}))
    assert os.sched_getaffinity(0) == all_cpus


@pytest.mark.parametrize("backend", NATIVE)
def test_strict_thread_refusal_rolls_back_threads_already_bound(backend, monkeypatch, all_cpus):
    """The last thread's sched_setaffinity is refused: everything done before is undone."""
    be, _ = get_backend(backend)
    generic(be, monkeypatch)
    raw_set_mempolicy("preferred", {N})
    with Parked(3) as parked:
        victim = max(parked.tids)
        real_set = be.set_affinity

        def set_affinity(tid, cpus):
            if tid == victim:
                raise BindError(errno.EPERM, "sched_setaffinity", f"thread {tid}")
            real_set(tid, cpus)

        monkeypatch.setattr(be, "set_affinity", set_affinity)
        before = thread_affinities()
        with pytest.raises(BindError) as exc:
            numabind.bind_current(Plan(cpus={A}, mem_policy="bind", mem_nodes={N}), strict=True, backend=backend)
        assert (exc.value.errno, exc.value.syscall) == (errno.EPERM, "sched_setaffinity")
        assert thread_affinities() == before
        assert raw_mempolicy() == (MPOL["preferred"], frozenset({N}))


@pytest.mark.parametrize("strict", [True, False])
def test_an_unexpected_error_midway_leaves_no_half_binding(monkeypatch, all_cpus, strict):
    """Not a kernel refusal but a bug or a vanished /proc: whatever was changed is undone, then it raises.
    (Step by step: the one-call bind lists the threads before it changes anything.)"""
    stepwise(get_backend("syscall")[0], monkeypatch)
    raw_set_mempolicy("preferred", {N})
    with Parked(2):
        before = thread_affinities()

        def broken_walk(first=0):
            raise RuntimeError("cannot list /proc/self/task")

        monkeypatch.setattr(live, "thread_ids", broken_walk)
        with pytest.raises(RuntimeError, match="/proc/self/task"):
            numabind.bind_current(Plan(cpus={A}, mem_policy="bind", mem_nodes={N}), strict=strict, backend="syscall")
        assert thread_affinities() == before
        assert raw_mempolicy() == (MPOL["preferred"], frozenset({N}))


@pytest.mark.parametrize("backend", NATIVE)
def test_non_strict_degrades_step_by_step_with_warnings(backend, monkeypatch, caplog, all_cpus):
    """bind refused → preferred; each step is a warning with errno and syscall, logged at WARNING."""
    be, _ = get_backend(backend)
    generic(be, monkeypatch)
    real = be.set_mempolicy

    def set_mempolicy(policy, nodes):
        if policy == "bind":
            raise BindError(errno.EPERM, "set_mempolicy", f"{policy} nodes {sorted(nodes)}")
        real(policy, nodes)

    monkeypatch.setattr(be, "set_mempolicy", set_mempolicy)
    with caplog.at_level(logging.WARNING, logger="numabind"):
        report = numabind.bind_current(Plan(cpus={B}, mem_policy="bind", mem_nodes={N}), backend=backend)
    assert report.applied == Plan(cpus={B}, mem_policy="preferred", mem_nodes={N})
    assert raw_mempolicy() == (MPOL["preferred"], frozenset({N}))
    assert any("set_mempolicy" in w and "EPERM" in w for w in report.warnings)
    assert any("degraded to preferred 0" in w for w in report.warnings)
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(logged) >= len(report.warnings) >= 2
    for w in report.warnings:
        assert any(w in m for m in logged)


def test_non_strict_cpus_partly_outside_are_narrowed_and_logged(caplog, all_cpus, apply_time):
    with caplog.at_level(logging.WARNING, logger="numabind"):
        report = numabind.bind_current(Plan(cpus={B, OUTSIDE_CPU}))
    assert report.applied.cpus == {B}
    assert os.sched_getaffinity(0) == {B}
    assert any(f"CPUs {OUTSIDE_CPU}" in w and f"narrowed to {B}" in w for w in report.warnings)
    assert any(f"CPUs {OUTSIDE_CPU}" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_non_strict_cpus_all_outside_leave_affinity(all_cpus, apply_time):
    report = numabind.bind_current(Plan(cpus={OUTSIDE_CPU}))
    assert os.sched_getaffinity(0) == all_cpus
    assert any("CPU binding not applied" in w for w in report.warnings)


@pytest.mark.parametrize("backend", NATIVE)
def test_non_strict_unknown_memory_node_is_reported(backend, caplog, apply_time):
    raw_set_mempolicy("interleave", {N})
    with caplog.at_level(logging.WARNING, logger="numabind"):
        report = numabind.bind_current(Plan(mem_policy="bind", mem_nodes={MISSING_NODE}), backend=backend)
    assert raw_mempolicy() == (MPOL["interleave"], frozenset({N}))
    assert any(f"nodes {MISSING_NODE} do not exist" in w for w in report.warnings)


@pytest.mark.parametrize("backend", NATIVE)
def test_non_strict_extra_memory_node_is_narrowed(backend, apply_time):
    report = numabind.bind_current(Plan(mem_policy="interleave", mem_nodes={N, MISSING_NODE}), backend=backend)
    assert raw_mempolicy() == (MPOL["interleave"], frozenset({N}))
    assert any(f"narrowed from {format_cpulist({N, MISSING_NODE})} to {N}" in w for w in report.warnings)


# --------------------------------------------------------------------------- kernel refusals (seccomp)
@pytest.mark.parametrize("backend", NATIVE)
def test_kernel_refusal_of_set_mempolicy_strict(backend):
    out = run_json(SECCOMP + f'''
import json, os, numabind
deny("set_mempolicy")
before = sorted(os.sched_getaffinity(0))
try:
    numabind.bind_current(numabind.Plan(cpus={{{A}}}, mem_policy="bind", mem_nodes={{{N}}}),
                          strict=True, backend="{backend}")
    err = None
except numabind.BindError as e:
    err = {{"errno": e.errno, "syscall": e.syscall, "text": str(e), "oserror": isinstance(e, OSError)}}
from numabind.backends import get_backend
print(json.dumps({{"err": err, "before": before, "after": sorted(os.sched_getaffinity(0)),
                   "policy": get_backend("syscall")[0].get_mempolicy()[0]}}))
''')
    assert out["err"] is not None, "a refused set_mempolicy must raise in strict mode"
    assert out["err"]["errno"] == errno.EPERM
    assert out["err"]["syscall"] == "set_mempolicy"
    assert "EPERM" in out["err"]["text"] and out["err"]["oserror"]
    assert out["after"] == out["before"]
    assert out["policy"] == "default"


@pytest.mark.parametrize("backend", NATIVE)
def test_kernel_refusal_of_set_mempolicy_degrades(backend):
    out = run_json(SECCOMP + f'''
import json, logging, os, numabind
deny("set_mempolicy")
records = []
class H(logging.Handler):
    def emit(self, r):
        records.append((r.levelname, r.getMessage()))
logging.getLogger("numabind").addHandler(H())
logging.getLogger("numabind").setLevel(logging.DEBUG)
r = numabind.bind_current(numabind.Plan(cpus={{{A}}}, mem_policy="bind", mem_nodes={{{N}}}), backend="{backend}")
print(json.dumps({{"warnings": r.warnings, "cpus": sorted(os.sched_getaffinity(0)),
                   "applied_cpus": sorted(r.applied.cpus), "applied_policy": r.applied.mem_policy,
                   "logged": [m for lvl, m in records if lvl == "WARNING"]}}))
''')
    assert out["cpus"] == out["applied_cpus"] == [A]         # CPU only: the third step of the ladder
    assert out["applied_policy"] == "default"
    steps = [w for w in out["warnings"] if "set_mempolicy" in w and "EPERM" in w]
    assert any("bind 0 not applied" in w for w in steps), out["warnings"]
    assert any("preferred 0 not applied" in w for w in steps), out["warnings"]
    for w in out["warnings"]:
        assert any(w in m for m in out["logged"]), (w, out["logged"])


@pytest.mark.parametrize("backend", NATIVE)
def test_kernel_refusal_of_sched_setaffinity_strict_rolls_back_memory(backend):
    out = run_json(SECCOMP + f'''
import json, os, numabind
from numabind.backends import get_backend
sc = get_backend("syscall")[0]
sc.set_mempolicy("preferred", frozenset({{{N}}}))
deny("sched_setaffinity")
try:
    numabind.bind_current(numabind.Plan(cpus={{{B}}}, mem_policy="interleave", mem_nodes={{{N}}}),
                          strict=True, backend="{backend}")
    err = None
except numabind.BindError as e:
    err = {{"errno": e.errno, "syscall": e.syscall}}
policy, nodes = sc.get_mempolicy()
print(json.dumps({{"err": err, "policy": policy, "nodes": sorted(nodes), "cpus": sorted(os.sched_getaffinity(0))}}))
''')
    assert out["err"] == {"errno": errno.EPERM, "syscall": "sched_setaffinity"}
    assert (out["policy"], out["nodes"]) == ("preferred", [N])
    assert out["cpus"] == sorted(os.sched_getaffinity(0))


@pytest.mark.parametrize("backend", NATIVE)
def test_kernel_refusal_of_sched_setaffinity_non_strict_keeps_memory(backend):
    out = run_json(SECCOMP + f'''
import json, os, numabind
deny("sched_setaffinity")
r = numabind.bind_current(numabind.Plan(cpus={{{B}}}, mem_policy="bind", mem_nodes={{{N}}}), backend="{backend}")
print(json.dumps({{"warnings": r.warnings, "policy": r.applied.mem_policy, "cpus": sorted(r.applied.cpus)}}))
''')
    assert out["policy"] == "bind"
    assert out["cpus"] == sorted(os.sched_getaffinity(0))
    assert any("sched_setaffinity" in w and "EPERM" in w and "CPU binding not applied" in w
               for w in out["warnings"])


# --------------------------------------------------------------------------- other policies already in force
def test_bind_current_when_the_caller_has_a_policy_numabind_does_not_plan():
    """A process started with MPOL_WEIGHTED_INTERLEAVE (Linux 6.9+, numactl -w) can still be CPU-bound.

    Reading the policy back must not turn the kernel's answer into an invalid Plan.
    """
    cp = run_python(f'''
import os, numabind
from numabind import _native
rc = _native.lib.nb_sys_set_mempolicy(6, _native.ffi.new("unsigned long[]", [1 << {N}]), 65)  # MPOL_WEIGHTED_INTERLEAVE
if rc == -22:
    raise SystemExit("no weighted interleave")
assert rc == 0, rc
r = numabind.bind_current(numabind.Plan(cpus={{{A}}}))
assert os.sched_getaffinity(0) == {{{A}}}, os.sched_getaffinity(0)
assert r.applied.cpus == {{{A}}}, r.applied
print("ok")
''')
    if "no weighted interleave" in cp.stderr:
        pytest.skip("this kernel has no MPOL_WEIGHTED_INTERLEAVE (Linux 6.9+)")
    assert cp.returncode == 0 and cp.stdout.strip() == "ok", cp.stderr[-2000:]


# --------------------------------------------------------------------------- current_binding
@pytest.mark.parametrize("backend", ("libnuma", "syscall", "numactl"))
def test_current_binding_matches_the_kernel(backend, all_cpus):
    raw_set_mempolicy("bind", {N})
    os.sched_setaffinity(0, {B})
    b = numabind.current_binding(backend)
    assert b.backend == backend
    assert b.cpus == {B} == status_cpus()
    assert (b.mem_policy, b.mem_nodes) == ("bind", frozenset({N}))
    with open("/proc/self/status") as f:
        mems = next(line.split(":", 1)[1] for line in f if line.startswith("Mems_allowed_list"))
    assert b.mems_allowed == ids_of(mems)
    assert b.plan == Plan(cpus={B}, mem_policy="bind", mem_nodes={N})
    text = b.describe()
    assert f"cpus:         {B}" in text and "policy:       bind" in text and f"backend:      {backend}" in text
    show = numactl_show()
    assert show["physcpubind"].split() == [str(B)] and show["policy"] == "bind"


def test_current_binding_default_state(all_cpus):
    b = numabind.current_binding()
    assert b.cpus == all_cpus
    assert b.mem_policy == numactl_show()["policy"] == "default"
    assert b.threads[threading.get_native_id()] == all_cpus


def test_current_binding_without_a_memory_reader(all_cpus):
    b = numabind.current_binding("none")
    assert b.mem_policy is None and b.cpus == all_cpus
    assert "unknown (backend none cannot read it)" in b.describe()
    assert b.plan == Plan(cpus=all_cpus)


def test_report_describe_names_backend_and_reason():
    report = numabind.bind_current(Plan(cpus={A}), backend="syscall")
    text = report.describe()
    assert "backend:   syscall (syscall forced by argument)" in text
    assert f"requested: cpus {A}, memory unchanged" in text


# --------------------------------------------------------------------------- multiprocessing
def _worker_report(_):
    with open("/proc/self/status") as f:
        listed = next(line.split(":", 1)[1].strip() for line in f if line.startswith("Cpus_allowed_list"))
    return os.getpid(), sorted(os.sched_getaffinity(0)), raw_mempolicy(), listed


@pytest.mark.parametrize("method", ("fork", "spawn"))
def test_bind_current_as_pool_initializer(method, all_cpus):
    plan = Plan(cpus={B}, mem_policy="bind", mem_nodes={N})
    ctx = multiprocessing.get_context(method)
    with ctx.Pool(2, initializer=numabind.bind_current, initargs=(plan,)) as pool:
        results = pool.map(_worker_report, range(6))
    assert {pid for pid, *_ in results} - {os.getpid()}
    for _, cpus, policy, listed in results:
        assert cpus == [B]
        assert listed == str(B)
        assert policy == (MPOL["bind"], frozenset({N}))
    # the parent is untouched
    assert os.sched_getaffinity(0) == all_cpus
    assert raw_mempolicy() == (MPOL["default"], frozenset())


@pytest.mark.parametrize("value", ("enabled", "2", "y", "maybe", "strict"))
def test_numabind_strict_unknown_value_is_an_error(value, monkeypatch):
    # a typo must not silently mean lenient (issue 15, item 10)
    monkeypatch.setenv("NUMABIND_STRICT", value)
    with pytest.raises(numabind.NumabindError, match=r"NUMABIND_STRICT=.*not understood.*1, true, yes, on"):
        numabind.bind_current(Plan(cpus=frozenset(os.sched_getaffinity(0))))


def test_the_settings_a_bind_reads_follow_the_environment_call_by_call(monkeypatch, all_cpus):
    """bind_current parses NUMABIND_STRICT and NUMABIND_BACKEND once per value, but reads them on every call:
    a change, a bad value (every time, never remembered) and a replaced os.environ are all seen."""
    plan = Plan(cpus={A})
    monkeypatch.setenv("NUMABIND_BACKEND", "syscall")
    assert numabind.bind_current(plan).backend == "syscall"
    monkeypatch.setenv("NUMABIND_BACKEND", "none")
    assert numabind.bind_current(plan).backend == "none"
    monkeypatch.delenv("NUMABIND_BACKEND")
    for _ in range(2):
        monkeypatch.setenv("NUMABIND_STRICT", "bogus")
        with pytest.raises(numabind.NumabindError, match="NUMABIND_STRICT='bogus' is not understood"):
            numabind.bind_current(plan)
        assert numabind.bind_current(plan, strict=False).ok     # given explicitly: the variable is not read
    monkeypatch.setattr(os, "environ", {"NUMABIND_BACKEND": "syscall", "NUMABIND_STRICT": "1"})
    assert numabind.bind_current(plan).backend == "syscall"
    monkeypatch.setattr(os, "environ", {"NUMABIND_STRICT": "maybe"})
    with pytest.raises(numabind.NumabindError, match="NUMABIND_STRICT='maybe'"):
        numabind.bind_current(plan)


# --------------------------------------------------------------------------- issue 15: loud and atomic
CPU = CPU_B

FLAGGED = {  # mode words that carry MPOL_F_* flags, all on MEM_NODE
    "bind+balancing": MPOL["bind"] | MPOL_F_NUMA_BALANCING,
    "bind+static": MPOL["bind"] | MPOL_F_STATIC_NODES,
    "interleave+relative": MPOL["interleave"] | MPOL_F_RELATIVE_NODES,
    "preferred+static": MPOL["preferred"] | MPOL_F_STATIC_NODES,
}


def set_flagged(word: int) -> tuple[int, frozenset[int]]:
    """Put the calling thread on ``word`` (raw set_mempolicy); skip where the kernel predates the flag."""
    from numabind import _native

    mask = _native.ffi.new("unsigned long[]", [1 << MEM_NODE])
    rc = _native.lib.nb_sys_set_mempolicy(word, mask, 65)
    if rc == -errno.EINVAL and word & MPOL_F_NUMA_BALANCING:
        pytest.skip("this kernel refuses MPOL_F_NUMA_BALANCING with MPOL_BIND (added in Linux 5.12)")
    assert rc == 0, f"set_mempolicy({word:#x}) returned {rc}"
    state = raw_word()
    assert state == (word, frozenset({MEM_NODE})), state
    return state


@pytest.mark.parametrize("backend", NATIVE)
@pytest.mark.parametrize("word", FLAGGED.values(), ids=FLAGGED.keys())
def test_save_and_restore_keep_the_whole_mode_word(backend, word):
    from numabind.backends import MemPolicyState

    be = get_backend(backend)[0]
    before = set_flagged(word)
    saved = be.save_mempolicy()
    assert saved == MemPolicyState(mode=word, nodes=frozenset({MEM_NODE}))
    assert saved.flags == word & (MPOL_F_STATIC_NODES | MPOL_F_RELATIVE_NODES | MPOL_F_NUMA_BALANCING)
    be.set_mempolicy("default", frozenset())
    assert raw_word() == (0, frozenset())
    be.restore_mempolicy(saved)
    assert raw_word() == before


@pytest.mark.parametrize("backend", NATIVE)
@pytest.mark.parametrize("word", FLAGGED.values(), ids=FLAGGED.keys())
def test_strict_rollback_restores_the_mode_flags(backend, word):
    """Issue 15, item 3: a strict failure after the policy was changed puts back flags and mask too."""
    before = set_flagged(word)
    with pytest.raises(PlanError, match=f"CPUs {OUTSIDE_CPU} are not online"):
        numabind.bind_current(Plan(cpus={CPU, OUTSIDE_CPU}, mem_policy="interleave", mem_nodes={MEM_NODE}),
                              strict=True, backend=backend)
    assert raw_word() == before


@pytest.mark.parametrize("word", FLAGGED.values(), ids=FLAGGED.keys())
def test_unexpected_error_rollback_restores_the_mode_flags(word, monkeypatch):
    before = set_flagged(word)

    def broken_walk(first=0):
        raise RuntimeError("cannot list /proc/self/task")

    monkeypatch.setattr(live, "thread_ids", broken_walk)
    stepwise(get_backend("syscall")[0], monkeypatch)
    with pytest.raises(RuntimeError):
        numabind.bind_current(Plan(cpus={CPU}, mem_policy="bind", mem_nodes={MEM_NODE}), backend="syscall")
    assert raw_word() == before


def _unreadable(*_args):
    raise BindError(errno.EPERM, "get_mempolicy", "calling thread")


@pytest.mark.parametrize("backend", NATIVE)
@pytest.mark.parametrize("later_failure", [False, True], ids=["fits", "then-cpu-outside"])
def test_strict_refuses_before_any_change_when_the_old_policy_is_unreadable(backend, later_failure, monkeypatch, apply_time):
    """Issue 15, item 4: no saved state, no change: strict raises first and leaves everything as it was."""
    be = get_backend(backend)[0]
    generic(be, monkeypatch)
    raw_set_mempolicy("preferred", {MEM_NODE})
    monkeypatch.setattr(be, "get_mempolicy", _unreadable)
    monkeypatch.setattr(be, "save_mempolicy", _unreadable, raising=False)
    cpus = {CPU, OUTSIDE_CPU} if later_failure else {CPU}
    with Parked(2):
        before = thread_affinities()
        with pytest.raises(BindError) as exc:
            numabind.bind_current(Plan(cpus=cpus, mem_policy="interleave", mem_nodes={MEM_NODE}),
                                  strict=True, backend=backend)
        assert (exc.value.errno, exc.value.syscall) == (errno.EPERM, "get_mempolicy")
        assert "nothing was changed" in str(exc.value)
        assert thread_affinities() == before
    assert raw_mempolicy() == (MPOL["preferred"], frozenset({MEM_NODE}))


@pytest.mark.parametrize("backend", NATIVE)
def test_lenient_with_an_unreadable_old_policy_applies_and_says_so(backend, monkeypatch):
    be = get_backend(backend)[0]
    generic(be, monkeypatch)
    monkeypatch.setattr(be, "save_mempolicy", _unreadable, raising=False)
    report = numabind.bind_current(Plan(cpus={CPU}, mem_policy="interleave", mem_nodes={MEM_NODE}),
                                   backend=backend)
    assert raw_mempolicy() == (MPOL["interleave"], frozenset({MEM_NODE}))
    assert os.sched_getaffinity(0) == {CPU}
    assert any("old memory policy could not be read" in n for n in report.notes), report.notes


@pytest.mark.parametrize("backend", NATIVE)
def test_kernel_refusal_of_get_mempolicy_strict_changes_nothing(backend):
    """The same with get_mempolicy really denied (seccomp, EPERM)."""
    out = run_json(SECCOMP + f'''
import json, os, numabind
deny("get_mempolicy")
before = sorted(os.sched_getaffinity(0))
try:
    numabind.bind_current(numabind.Plan(cpus={{{CPU}}}, mem_policy="interleave", mem_nodes={{{MEM_NODE}}}),
                          strict=True, backend="{backend}")
    err = None
except numabind.BindError as e:
    err = {{"errno": e.errno, "syscall": e.syscall, "text": str(e)}}
print(json.dumps({{"err": err, "before": before, "after": sorted(os.sched_getaffinity(0))}}))
''')
    assert out["err"] is not None, "strict must refuse when the old memory policy cannot be saved"
    assert (out["err"]["errno"], out["err"]["syscall"]) == (errno.EPERM, "get_mempolicy")
    assert out["after"] == out["before"]


class _Recorder:
    """Fake two memory nodes (so migration has a source) and record migrate_pages calls with the state then."""

    def __init__(self, be, monkeypatch, fail_with: BindError | None = None) -> None:
        self.calls: list[dict] = []
        real = live.limits()
        nodes = frozenset({MEM_NODE, MISSING_NODE})
        fake = real.replace(nodes=real.nodes | nodes, memory_nodes=nodes, allowed_nodes=nodes)
        monkeypatch.setattr(live, "limits", lambda: fake)

        def migrate_pages(pid, from_nodes, to_nodes):
            self.calls.append({"from": from_nodes, "to": to_nodes, "cpus": frozenset(os.sched_getaffinity(0)),
                               "policy": raw_mempolicy()})
            if fail_with is not None:
                raise fail_with
            return 0

        monkeypatch.setattr(be, "migrate_pages", migrate_pages)


@pytest.mark.parametrize("backend", NATIVE)
def test_migration_is_the_last_step(backend, monkeypatch):
    be = get_backend(backend)[0]
    rec = _Recorder(be, monkeypatch)
    report = numabind.bind_current(Plan(cpus={CPU}, mem_policy="bind", mem_nodes={MEM_NODE}, migrate=True),
                                   backend=backend)
    assert rec.calls == [{"from": {MISSING_NODE}, "to": {MEM_NODE}, "cpus": {CPU},
                          "policy": (MPOL["bind"], frozenset({MEM_NODE}))}]
    assert report.pages_migrated is not None


@pytest.mark.parametrize("backend", NATIVE)
def test_a_strict_failure_at_verification_moves_no_pages(backend, monkeypatch):
    """Issue 15, item 4: pages are moved only after the binding was verified, so a strict failure moved none."""
    be = get_backend(backend)[0]
    rec = _Recorder(be, monkeypatch)
    generic(be, monkeypatch)
    raw_set_mempolicy("preferred", {MEM_NODE})
    # the read-back sees another policy than the one set: a strict failure after everything was applied
    monkeypatch.setattr(be, "get_mempolicy", lambda: ("interleave", frozenset({MEM_NODE})))
    with pytest.raises(BindError, match="instead of bind"):
        numabind.bind_current(Plan(cpus={CPU}, mem_policy="bind", mem_nodes={MEM_NODE}, migrate=True),
                              strict=True, backend=backend)
    assert rec.calls == [], "pages were moved for a binding that was then rolled back"
    assert raw_mempolicy() == (MPOL["preferred"], frozenset({MEM_NODE}))


@pytest.mark.parametrize("backend", NATIVE)
def test_a_strict_migration_failure_rolls_back_and_says_pages_stay(backend, monkeypatch):
    be = get_backend(backend)[0]
    _Recorder(be, monkeypatch, fail_with=BindError(errno.EPERM, "migrate_pages", "pid 0"))
    raw_set_mempolicy("preferred", {MEM_NODE})
    before = thread_affinities()
    with pytest.raises(BindError) as exc:
        numabind.bind_current(Plan(cpus={CPU}, mem_policy="bind", mem_nodes={MEM_NODE}, migrate=True),
                              strict=True, backend=backend)
    assert exc.value.syscall == "migrate_pages" and "pages moved before the error stay" in str(exc.value)
    assert thread_affinities() == before
    assert raw_mempolicy() == (MPOL["preferred"], frozenset({MEM_NODE}))


@pytest.mark.parametrize("backend", BACKENDS)
def test_threads_left_out_by_matching_are_a_warning(backend, caplog, two_cpus):
    """Issue 15, item 9: the caller narrowed itself with os.sched_setaffinity(0, ...); the workers it left
    on every CPU are not bound by threads='matching', and the report says so instead of ok."""
    a, b = two_cpus
    allowed = frozenset(os.sched_getaffinity(0))
    with Parked(2) as parked:
        os.sched_setaffinity(0, {a})
        with caplog.at_level(logging.WARNING, logger="numabind"):
            report = numabind.bind_current(Plan(cpus={b}), backend=backend)
        by_tid = {t.tid: t for t in report.threads}
        for tid in parked.tids:
            assert by_tid[tid].status == "left-alone"
            assert os.sched_getaffinity(tid) == allowed
        assert os.sched_getaffinity(0) == {b}
        assert not report.ok
        left = sum(t.status == "left-alone" for t in report.threads)
        (warning,) = [w for w in report.warnings if "left out of the CPU binding" in w]
        assert warning.startswith(f"{left} thread(s)") and "threads='all'" in warning
        assert f"{parked.tids[0]} (" in warning or left > 8
        assert any(warning in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
        # threads="all" takes them too, and then nothing is left out
        report = numabind.bind_current(Plan(cpus={b}), threads="all", backend=backend)
        assert report.ok, report.warnings
        for tid in parked.tids:
            assert os.sched_getaffinity(tid) == {b}


# --------------------------------------------------------------------------- strict="partial"
def test_strict_values():
    from numabind.bind import strict_default

    assert [strict_default(v) for v in (True, False, "partial", 1, 0)] == [True, False, "partial", True, False]
    for bad in ("yes", "strict", 2, 0.5, "PARTIAL"):
        with pytest.raises(PlanError, match="strict="):
            strict_default(bad)
    with pytest.raises(PlanError, match="strict="):
        numabind.bind_current(Plan(cpus={CPU}), strict="sometimes")


@pytest.mark.parametrize("backend", NATIVE)
def test_partial_raises_when_nothing_could_be_applied(backend, apply_time):
    raw_set_mempolicy("preferred", {MEM_NODE})
    with Parked(1):
        before = thread_affinities()
        with pytest.raises(PlanError) as exc:
            numabind.bind_current(Plan(cpus={OUTSIDE_CPU}, mem_policy="bind", mem_nodes={MISSING_NODE}),
                                  strict="partial", backend=backend)
        text = str(exc.value)
        assert "nothing of the plan" in text and "strict='partial'" in text
        assert f"CPUs {OUTSIDE_CPU} are not online" in text and f"nodes {MISSING_NODE} do not exist" in text
        assert thread_affinities() == before
    assert raw_mempolicy() == (MPOL["preferred"], frozenset({MEM_NODE}))


@pytest.mark.parametrize("backend", NATIVE)
def test_partial_keeps_the_cpus_when_the_memory_cannot_be_applied(backend, caplog, apply_time):
    raw_set_mempolicy("preferred", {MEM_NODE})
    with caplog.at_level(logging.WARNING, logger="numabind"):
        report = numabind.bind_current(Plan(cpus={CPU}, mem_policy="bind", mem_nodes={MISSING_NODE}),
                                       strict="partial", backend=backend)
    assert os.sched_getaffinity(0) == {CPU} and report.applied.cpus == {CPU}
    assert raw_mempolicy() == (MPOL["preferred"], frozenset({MEM_NODE}))
    assert not report.ok and any(f"nodes {MISSING_NODE} do not exist" in w for w in report.warnings)
    assert any("do not exist" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


@pytest.mark.parametrize("backend", NATIVE)
def test_partial_keeps_the_memory_when_the_cpus_cannot_be_applied(backend, apply_time):
    before = frozenset(os.sched_getaffinity(0))
    report = numabind.bind_current(Plan(cpus={OUTSIDE_CPU}, mem_policy="interleave", mem_nodes={MEM_NODE}),
                                   strict="partial", backend=backend)
    assert raw_mempolicy() == (MPOL["interleave"], frozenset({MEM_NODE}))
    assert os.sched_getaffinity(0) == before
    assert any("CPU binding not applied" in w for w in report.warnings)


def test_partial_narrows_like_lenient(monkeypatch, apply_time):
    monkeypatch.setenv("NUMABIND_STRICT", "partial")
    report = numabind.bind_current(Plan(cpus={CPU, OUTSIDE_CPU}))
    assert report.applied.cpus == {CPU} and any("narrowed" in w for w in report.warnings)
    with pytest.raises(PlanError, match="nothing of the plan"):
        numabind.bind_current(Plan(cpus={OUTSIDE_CPU}))


@pytest.mark.parametrize("backend", ("numactl", "none"))
def test_partial_memory_only_plan_without_an_in_process_backend_raises(backend):
    before = raw_mempolicy()
    with pytest.raises(BindError) as exc:
        numabind.bind_current(Plan(mem_policy="bind", mem_nodes={MEM_NODE}), strict="partial", backend=backend)
    assert (exc.value.errno, exc.value.syscall) == (errno.ENOTSUP, "set_mempolicy")
    assert "nothing of the plan" in str(exc.value)
    assert raw_mempolicy() == before
    report = numabind.bind_current(Plan(cpus={CPU}, mem_policy="bind", mem_nodes={MEM_NODE}), strict="partial",
                                   backend=backend)
    assert os.sched_getaffinity(0) == {CPU} and not report.ok


@pytest.mark.parametrize("backend", NATIVE)
@pytest.mark.parametrize("denied", [("set_mempolicy",), ("set_mempolicy", "sched_setaffinity")],
                         ids=["memory", "memory+cpus"])
def test_partial_under_seccomp(backend, denied):
    """The kernel refuses (EPERM): partial raises only when both parts are refused."""
    out = run_json(SECCOMP + f'''
import json, os, numabind
deny(*{denied!r})
before = sorted(os.sched_getaffinity(0))
try:
    r = numabind.bind_current(numabind.Plan(cpus={{{CPU}}}, mem_policy="bind", mem_nodes={{{MEM_NODE}}}),
                              strict="partial", backend="{backend}")
    out = {{"err": None, "warnings": r.warnings, "cpus": sorted(r.applied.cpus)}}
except numabind.BindError as e:
    out = {{"err": {{"errno": e.errno, "syscall": e.syscall, "text": str(e)}}}}
out.update(before=before, after=sorted(os.sched_getaffinity(0)))
print(json.dumps(out))
''')
    if len(denied) == 1:
        assert out["err"] is None and out["cpus"] == out["after"] == [CPU]
        assert any("EPERM" in w and "set_mempolicy" in w for w in out["warnings"])
    else:
        assert out["err"] is not None, out
        assert out["err"]["errno"] == errno.EPERM and "nothing of the plan" in out["err"]["text"]
        assert "set_mempolicy" in out["err"]["text"] and "sched_setaffinity" in out["err"]["text"]
        assert out["after"] == out["before"]


# --------------------------------------------------------------------------- what is logged, verify_current, bind_thread
def test_info_names_the_thread_for_a_thread_only_bind(caplog):
    me = threading.get_native_id()
    with caplog.at_level(logging.INFO, logger="numabind"):
        numabind.bind_current(Plan(cpus={B}), threads="current")
        numabind.bind_current(Plan(cpus={A}))
    bound = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and "bound via" in r.getMessage()]
    assert bound[0].startswith(f"thread {me} of pid {os.getpid()} bound via"), bound
    assert bound[1].startswith(f"pid {os.getpid()} bound via"), bound


@pytest.mark.parametrize("backend", NATIVE)
def test_verify_current_changes_nothing_and_names_each_difference(backend):
    raw_set_mempolicy("interleave", {N})
    os.sched_setaffinity(0, {B})
    same = numabind.verify_current(Plan(cpus={B}, mem_policy="interleave", mem_nodes={N}), threads="current",
                                   backend=backend)
    assert same.ok and same.applied == Plan(cpus={B}, mem_policy="interleave", mem_nodes={N})
    other = numabind.verify_current(Plan(cpus={OUTSIDE_CPU}, mem_policy="bind", mem_nodes={N}), threads="current",
                                    backend=backend)
    assert not other.ok and len(other.warnings) == 2, other.warnings
    assert any(f"not {OUTSIDE_CPU}" in w for w in other.warnings) and any("not bind" in w for w in other.warnings)
    assert raw_mempolicy() == (MPOL["interleave"], frozenset({N})) and os.sched_getaffinity(0) == {B}
    with pytest.raises(numabind.NumabindError, match="not bind"):
        numabind.verify_current(Plan(mem_policy="bind", mem_nodes={N}), strict=True, backend=backend)


@pytest.mark.parametrize("backend", NATIVE)
def test_bind_thread_binds_the_caller_only_and_puts_it_back(backend, all_cpus):
    raw_set_mempolicy("preferred", {N})
    with Parked(1) as parked:
        with numabind.bind_thread(Plan(cpus={B}, mem_policy="bind", mem_nodes={N}), backend=backend) as report:
            assert os.sched_getaffinity(0) == {B} and raw_mempolicy() == (MPOL["bind"], frozenset({N}))
            assert os.sched_getaffinity(parked.tids[0]) == all_cpus
            assert [t.tid for t in report.threads] == [threading.get_native_id()]
        assert os.sched_getaffinity(0) == all_cpus
        assert raw_mempolicy() == (MPOL["preferred"], frozenset({N}))


def test_report_to_dict_round_trip_and_strict_from_dict():
    with Parked(1):
        report = numabind.bind_current(Plan(cpus={B}, mem_policy="bind", mem_nodes={N}))
    data = report.to_dict()
    again = numabind.BindReport.from_dict(json.loads(json.dumps(data)))
    assert again == report and again.threads == report.threads and len(again.threads) >= 2
    for bad in ({**data, "requested": "v1;cpus=__import__"}, {**data, "warnings": "x"}, {**data, "threads": [1]},
                {**data, "pages_migrated": True}, [data]):
        with pytest.raises(ValueError):
            numabind.BindReport.from_dict(bad)


def test_plan_without_dataclasses_keeps_its_value_behaviour():
    import copy
    import pickle

    plan = Plan(cpus={A}, mem_policy="bind", mem_nodes={N}, reason="why")
    assert plan == plan.replace(reason="another") and hash(plan) == hash(plan.replace(reason="x"))
    assert pickle.loads(pickle.dumps(plan)) == plan and copy.copy(plan) == plan
    assert plan.replace(migrate=True).migrate is True
    with pytest.raises(PlanError):
        plan.replace(mem_policy="local")   # checked like a new plan: local takes no nodes
    with pytest.raises(AttributeError):
        plan.cpus = frozenset({B})


# --------------------------------------------------------------------------- the one-call bind
ONE_CALL_PLANS = {
    "cpus+bind": (Plan(cpus={A}, mem_policy="bind", mem_nodes={N}), {}),
    "cpus only": (Plan(cpus={B}), {}),
    "memory only": (Plan(mem_policy="interleave", mem_nodes={N}), {}),
    "local": (Plan(cpus={A}, mem_policy="local"), {}),
    "current thread": (Plan(cpus={B}, mem_policy="preferred", mem_nodes={N}), {"threads": "current"}),
    "all threads, strict": (Plan(cpus={A}, mem_policy="bind", mem_nodes={N}), {"threads": "all", "strict": True}),
    "cpus partly outside": (Plan(cpus={A, OUTSIDE_CPU}, mem_policy="bind", mem_nodes={N}), {}),
    "missing node": (Plan(cpus={B}, mem_policy="bind", mem_nodes={N, MISSING_NODE}), {}),
    "nothing": (Plan(), {}),
}


def _outcome(report) -> tuple:
    """Everything a report says, the thread records without their before (it depends on the last bind)."""
    return (report.requested, report.applied, report.applied.reason, report.backend, report.warnings, report.notes,
            report.pages_migrated, report.pages_not_migrated,
            sorted((t.tid, t.after, t.status, t.detail) for t in report.threads))


@pytest.mark.parametrize("backend", NATIVE)
@pytest.mark.parametrize("name", ONE_CALL_PLANS)
def test_the_one_call_reports_exactly_what_the_steps_report(backend, name, monkeypatch, all_cpus, apply_time):
    """Clean or not, the bind done in one C call ends in the same kernel state and the same report as the
    bind done step by step."""
    plan, kwargs = ONE_CALL_PLANS[name]
    be = get_backend(backend)[0]
    reset = Plan(cpus=all_cpus, mem_policy="default")
    with Parked(2) as parked:
        got = {}
        for way in ("one call", "steps"):
            if way == "steps":
                stepwise(be, monkeypatch)
            numabind.bind_current(reset, threads="all", backend=backend)
            report = numabind.bind_current(plan, backend=backend, **kwargs)
            got[way] = (_outcome(report), raw_mempolicy(), thread_affinities())
        assert got["one call"] == got["steps"]
        if name == "cpus+bind":
            assert report.ok and report.applied == plan
            assert {t.tid for t in report.threads} >= {threading.get_native_id(), *parked.tids}


@pytest.mark.parametrize("backend", NATIVE)
def test_the_one_call_binds_more_threads_than_it_first_made_room_for(backend, all_cpus):
    with Parked(40) as parked:
        for cpus in ({A}, {B}):
            report = numabind.bind_current(Plan(cpus=cpus, mem_policy="bind", mem_nodes={N}), backend=backend)
            assert report.ok, report.warnings
            assert all(os.sched_getaffinity(t) == cpus for t in parked.tids)
            assert {t.tid for t in report.threads if t.status == "bound"} >= set(parked.tids)
            assert report.threads[0].tid == threading.get_native_id()
            assert any("40 other thread(s)" in n or "other thread(s) keep theirs" in n for n in report.notes)
        assert raw_mempolicy() == (MPOL["bind"], frozenset({N}))


@pytest.mark.parametrize("backend", NATIVE)
def test_a_clean_report_is_a_full_report(backend, all_cpus):
    """The report of a bind that needed no explanation: frozen, comparable, its threads read on demand,
    and it goes through to_dict/from_dict like any other."""
    plan = Plan(cpus={A}, mem_policy="bind", mem_nodes={N})
    report = numabind.bind_current(plan, backend=backend)
    assert report.ok and report.applied == plan and report.applied.reason == "read back from the kernel"
    assert isinstance(hash(report), int) and report == report.replace()
    assert report.threads[0].after == frozenset({A}) and report.threads[0].status == "bound"
    assert numabind.BindReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report
    with pytest.raises(Exception):
        report.applied = plan
    # the slots a clean bind leaves unset read as their defaults, and the report travels like a full one
    assert ((report.warnings, report.notes, report.pages_migrated, report.pages_not_migrated, report.locality)
            == ((), (), None, None, None))
    again = pickle.loads(pickle.dumps(report))
    assert again == report and again.threads == report.threads and "warnings=()" in repr(report)
    with pytest.raises(AttributeError, match="no_such_field"):
        report.no_such_field  # noqa: B018


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("threads", ("matching", "all", "current"))
def test_a_bind_that_fits_reads_no_limits_and_no_file(backend, threads, monkeypatch, all_cpus):
    """Issue 10: on success nothing but the system calls runs; limits (cgroups, sysfs, status) are read only to
    explain a refusal or a difference."""
    def refused(*_args, **_kwargs):
        raise AssertionError("the success path read the kernel's limits or a file")

    live.node_mask_bits(), live.cpu_mask_bits()      # the mask sizes: read once per process, not per bind
    monkeypatch.setattr(live, "limits", refused)
    monkeypatch.setattr(live, "mems_allowed", refused)
    monkeypatch.setattr(live, "reader", refused)
    plan = Plan(cpus={A}, mem_policy="bind", mem_nodes={N}) if backend in NATIVE else Plan(cpus={A})
    with Parked(2):
        report = numabind.bind_current(plan, strict=True, threads=threads, backend=backend)
    assert report.ok and report.applied.cpus == frozenset({A})


# --------------------------------------------------------------------------- the environment a bound command gets
def test_environ_copy_is_dict_of_os_environ_even_with_undecodable_bytes(monkeypatch):
    from numabind._base import environ_copy

    monkeypatch.setenv("NUMABIND_TEST_VALUE", "caf\xe9 \udcff")     # non-ASCII, and a byte that is not UTF-8
    monkeypatch.setenv("NUMABIND_TEST_\udcfe", "key not UTF-8")
    copy = environ_copy()
    assert copy == dict(os.environ)
    assert copy["NUMABIND_TEST_VALUE"] == "caf\xe9 \udcff"
    copy["NUMABIND_TEST_VALUE"] = "changed"
    assert os.environ["NUMABIND_TEST_VALUE"] == "caf\xe9 \udcff"      # a copy, not a view


def test_environ_copy_of_a_replaced_environ(monkeypatch):
    from numabind._base import environ_copy, environ_get

    monkeypatch.setattr(os, "environ", {"ONLY": "this"})
    assert environ_copy() == {"ONLY": "this"}
    assert environ_get("ONLY") == "this" and environ_get("PATH") is None


def test_bound_environ_is_the_environment_with_the_marker_numabind_stat_reads():
    from numabind.bind import BOUND_ENV, bound_environ

    report = numabind.bind_current(Plan(cpus=frozenset(os.sched_getaffinity(0))))
    from numabind._proc import start_time

    marker = f"{os.getpid()}:{start_time(os.getpid())}|{report.requested.to_text()}|{report.applied.to_text()}"
    assert bound_environ(report) == {**os.environ, BOUND_ENV: marker}
    assert BOUND_ENV not in os.environ
    assert bound_environ(report, {"PATH": "/bin"}) == {"PATH": "/bin", BOUND_ENV: marker}
