"""One thread per core (issue 29 §2): the placement of a pool's threads (pure, on fake machines), the OpenMP
environment that agrees with a plan, splitting a plan's cores, and ``pin_threads`` on this host's kernel."""

from __future__ import annotations

import logging
import os
import threading

import pytest

import numabind
from numabind.cpulist import parse_cpulist
from numabind.errors import BindError, PlanError
from numabind.plan import Plan, core_groups
from numabind.strategies import thread_placement
from numabind.threads import PinReport, pin_threads
from numabind.topology import discover

from .fake.machines import hybrid_laptop, snc, two_sockets
from .kernel import CPU_A

L = parse_cpulist


@pytest.fixture(scope="module")
def snc4(tmp_path_factory):
    """2 packages x 2 nodes x 4 cores x 2 threads: node 0 = 0-3,16-19, node 1 = 4-7,20-23, node 2 = 8-11,24-27,
    node 3 = 12-15,28-31; siblings c and c + 16; one L3 per package (written once: a Topology is frozen)."""
    root = tmp_path_factory.mktemp("snc4")
    snc(root)
    return discover(root)


def _ids(sets):
    return [numabind.format_cpulist(s) for s in sets]


# ----------------------------------------------------------------------------- cores
def test_core_groups_keep_siblings_together_node_by_node(snc4):
    cpus = L("0-1,4,16-17,20,28")
    assert core_groups(cpus, snc4) == [(0, L("0,16")), (0, L("1,17")), (1, L("4,20")), (3, L("28"))]
    # without a machine each CPU is a core of an unknown node
    assert core_groups(L("0,16"), None) == [(None, L("0")), (None, L("16"))]


# ----------------------------------------------------------------------------- placement
def test_compact_gives_each_thread_a_whole_core_node_by_node(snc4):
    plan = Plan(cpus=L("0-7,16-23"))
    assert _ids(thread_placement(plan, 5, snc4)) == ["0,16", "1,17", "2,18", "3,19", "4,20"]
    assert thread_placement(plan, 0, snc4) == ()


def test_scatter_takes_one_core_of_each_node_in_turn(snc4):
    plan = Plan(cpus=L("0-7,16-23"))
    assert _ids(thread_placement(plan, 4, snc4, order="scatter")) == ["0,16", "4,20", "1,17", "5,21"]


def test_scatter_inside_a_node_takes_one_core_of_each_cache_group_in_turn(tmp_path):
    snc(tmp_path, sockets=1, nodes_per_socket=1, cores_per_node=8, smt=False, ccx_cores=4)
    topo = discover(tmp_path)
    assert topo.llc_groups() == (L("0-3"), L("4-7"))
    plan = Plan(cpus=L("0-7"))
    assert _ids(thread_placement(plan, 4, topo, order="scatter")) == ["0", "4", "1", "5"]
    assert _ids(thread_placement(plan, 4, topo, order="compact")) == ["0", "1", "2", "3"]


def test_more_threads_than_cores_one_cpu_each_first_threads_first_then_wrapping(tmp_path):
    two_sockets(tmp_path, cpus_per_socket=4)          # socket 0: 0-1,4-5 (siblings c, c + 4)
    topo = discover(tmp_path)
    plan = Plan(cpus=L("0-1,4-5"))
    assert _ids(thread_placement(plan, 2, topo)) == ["0,4", "1,5"]
    assert _ids(thread_placement(plan, 5, topo)) == ["0", "1", "4", "5", "0"]
    with pytest.raises(PlanError, match=r"5 threads for the 2 cores of the plan \(CPUs 0-1,4-5\).*strict=False"):
        thread_placement(plan, 5, topo, strict=True)


@pytest.mark.parametrize("kwargs, match", [
    ({"threads": 2, "order": "round-robin"}, "order 'round-robin' is not one of compact, scatter"),
    ({"threads": -1}, "threads must be a count"),
    ({"threads": True}, "threads must be a count"),
])
def test_placement_refuses_bad_input(snc4, kwargs, match):
    with pytest.raises(PlanError, match=match):
        thread_placement(Plan(cpus=L("0-3")), topology=snc4, **kwargs)


def test_placement_needs_cpus(snc4):
    with pytest.raises(PlanError, match="cpus=None"):
        thread_placement(Plan(mem_policy="local"), 2, snc4)


# ----------------------------------------------------------------------------- thread_env
def test_thread_env_places_one_thread_per_core(snc4):
    plan = Plan(cpus=L("0-1,16-17,4,20"))
    assert plan.thread_env(snc4) == {"OMP_NUM_THREADS": "3", "OMP_PLACES": "{0,16},{1,17},{4,20}",
                                     "OMP_PROC_BIND": "close"}
    assert plan.thread_env(snc4, proc_bind="spread")["OMP_PROC_BIND"] == "spread"


def test_thread_env_without_a_topology_is_one_place_per_cpu():
    assert Plan(cpus=L("2-3,8")).thread_env() == {"OMP_NUM_THREADS": "3", "OMP_PLACES": "{2},{3},{8}",
                                                  "OMP_PROC_BIND": "close"}


def test_thread_env_never_widens_a_plan_holding_half_a_core(snc4):
    env = Plan(cpus=L("0,1,17")).thread_env(snc4)
    assert env["OMP_PLACES"] == "{0},{1,17}" and env["OMP_NUM_THREADS"] == "2"


def test_thread_env_of_a_plan_without_cpus_is_empty():
    assert Plan(mem_policy="bind", mem_nodes={0}).thread_env() == {}


def test_thread_env_refuses_an_unknown_binding():
    with pytest.raises(PlanError, match="proc_bind 'master' is not one of close, spread"):
        Plan(cpus={0}).thread_env(proc_bind="master")


# ----------------------------------------------------------------------------- split
def test_split_gives_disjoint_parts_of_whole_cores_same_node_first(snc4):
    plan = Plan(cpus=L("0-7,16-23"), mem_policy="bind", mem_nodes={0, 1}, reason="rank 0")
    main, loader, extra = plan.split([3, 4, 1], snc4)
    assert main.cpus == L("0-2,16-18") and main.mem_nodes == {0}
    assert loader.cpus == L("4-7,20-23") and loader.mem_nodes == {1}
    assert extra.cpus == L("3,19") and extra.mem_nodes == {0}
    assert main.mem_policy == "bind"
    assert main.reason == "part 0 of split [3, 4, 1]: 3 cores on node 0 (CPUs 0-2,16-18) of rank 0"


def test_split_picks_the_node_that_fits_best_and_spans_only_when_none_holds_a_part(snc4):
    plan = Plan(cpus=L("0-6,16-22"), mem_policy="interleave", mem_nodes={0, 1})   # node 0: 4 cores, node 1: 3
    a, b = plan.split([3, 4], snc4)
    assert a.cpus == L("4-6,20-22") and b.cpus == L("0-3,16-19")
    (whole,) = plan.split([6], snc4)
    assert whole.cpus == L("0-3,16-19,4-5,20-21") and whole.mem_nodes == {0, 1}
    assert "6 cores on nodes 0-1" in whole.reason


def test_split_keeps_the_memory_policy_where_narrowing_would_empty_it(snc4):
    cxl = Plan(cpus=L("0-1,16-17"), mem_policy="bind", mem_nodes={3})
    assert [p.mem_nodes for p in cxl.split([1, 1], snc4)] == [{3}, {3}]
    preferred = Plan(cpus=L("0-1,16-17,4,20"), mem_policy="preferred", mem_nodes={1})
    assert [p.mem_nodes for p in preferred.split([2, 1], snc4)] == [{1}, {1}]
    untouched = Plan(cpus=L("0-1"))
    assert [p.mem_policy for p in untouched.split([1, 1], snc4)] == [None, None]


def test_split_narrows_weights_with_the_nodes(snc4):
    plan = Plan(cpus=L("0,4"), mem_policy="weighted-interleave", mem_nodes={0, 1}, weights={0: 3, 1: 1})
    a, b = plan.split([1, 1], snc4)
    assert (a.mem_nodes, dict(a.weights)) == ({0}, {0: 3}) and (b.mem_nodes, dict(b.weights)) == ({1}, {1: 1})


def test_split_without_a_topology_counts_cpus():
    assert [p.cpus for p in Plan(cpus=L("0-3")).split([1, 3])] == [L("0"), L("1-3")]


@pytest.mark.parametrize("sizes, match", [
    ([5, 4], r"split \[5, 4\] asks for 9 cores, but the plan has 8 cores: 0-7,16-23"),
    (3, "split takes a list of core counts"),
    ([], "one or more positive ints"),
    ([2, 0], "one or more positive ints"),
    ([1.5], "one or more positive ints"),
])
def test_split_errors_name_the_input(snc4, sizes, match):
    with pytest.raises(PlanError, match=match):
        Plan(cpus=L("0-7,16-23")).split(sizes, snc4)


def test_split_needs_cpus():
    with pytest.raises(PlanError, match="cpus=None"):
        Plan(mem_policy="local").split([1])


# ----------------------------------------------------------------------------- hybrid
def test_a_hybrid_laptop_pins_threads_on_its_performance_cores_first(tmp_path):
    hybrid_laptop(tmp_path)
    topo = discover(tmp_path)
    plan = numabind.plan_for_gpu(0, topology=topo, nodes=[0])
    assert plan.cpus == L("0-11") and "performance cores (CPUs 0-11)" in plan.reason
    assert _ids(thread_placement(plan, 3, topo)) == ["0-1", "2-3", "4-5"]
    assert plan.thread_env(topo)["OMP_NUM_THREADS"] == "6"


# ----------------------------------------------------------------------------- the real kernel
def _start(n):
    stop = threading.Event()
    started = [threading.Event() for _ in range(n)]
    pool = [threading.Thread(target=lambda e=e: (e.set(), stop.wait()), daemon=True) for e in started]
    for t in pool:
        t.start()
    for e in started:
        e.wait()
    return pool, stop


@pytest.mark.kernel
def test_pin_threads_places_three_threads_read_back_from_the_kernel():
    """Three threads of this process each on a core of the plan (this host's CPUs: 1 CPU under taskset too)."""
    topo = discover()
    plan = Plan(cpus=os.sched_getaffinity(0))
    pool, stop = _start(3)
    try:
        report = pin_threads(plan, pool, topology=topo)
        expected = thread_placement(plan, 3, topo)
        held = [frozenset(os.sched_getaffinity(t.native_id)) for t in pool]
        assert held == list(expected)
        assert [t.tid for t in report.threads] == [t.native_id for t in pool]
        assert [t.after for t in report.threads] == held and [t.cpus for t in report.threads] == held
        assert all(t.status == "pinned" for t in report.threads) and report.ok
        cores = len(core_groups(plan.cpus, topo))
        assert len(set(held[:cores])) == min(3, cores)          # distinct cores before any is shared
        assert all(h <= plan.cpus for h in held)
        assert bool(report.warnings) == (cores < 3)
    finally:
        stop.set()


@pytest.mark.kernel
def test_pin_threads_by_default_pins_every_thread_but_the_caller():
    me = threading.get_native_id()
    before = frozenset(os.sched_getaffinity(0))
    pool, stop = _start(2)
    try:
        report = pin_threads(Plan(cpus={CPU_A}))      # one core: strict=False shares it
        tids = {t.tid for t in report.threads}
        assert me not in tids and {t.native_id for t in pool} <= tids
        for t in pool:
            assert os.sched_getaffinity(t.native_id) == {CPU_A}
        assert frozenset(os.sched_getaffinity(0)) == before
    finally:
        stop.set()


@pytest.mark.kernel
def test_pin_threads_strict_refuses_more_threads_than_cores():
    pool, stop = _start(2)
    try:
        before = [os.sched_getaffinity(t.native_id) for t in pool]
        with pytest.raises(PlanError, match="2 threads for the 1 cores"):
            pin_threads(Plan(cpus={CPU_A}), pool, strict=True)
        assert [os.sched_getaffinity(t.native_id) for t in pool] == before     # nothing was applied
    finally:
        stop.set()


@pytest.mark.kernel
def test_a_refused_thread_is_reported_and_logged_never_dropped(caplog, monkeypatch):
    pool, stop = _start(1)
    topo = discover()
    outside = max(topo.possible_cpus | topo.online_cpus) + 1    # a CPU this machine does not have
    fake = Plan(cpus={outside})
    # the kernel refuses it here, as when the CPU goes offline between the check and the apply (issue 42 §1:
    # otherwise such a plan is a PlanError before any thread is touched, tests/test_impossible_plans.py)
    monkeypatch.setattr("numabind.live.check_present", lambda plan, what: None)
    try:
        with caplog.at_level(logging.WARNING, logger="numabind.threads"):
            report = pin_threads(fake, pool, topology=topo, strict=False)
        (only,) = report.threads
        assert only.tid == pool[0].native_id and only.status == "failed" and only.after == only.before
        assert not report.ok and report.warnings
        assert any("pin_threads: thread" in r.getMessage() for r in caplog.records)
        assert "sched_setaffinity failed" in only.detail and "outside what the thread may use" in only.detail
        with pytest.raises(BindError, match=f"pin_threads thread {pool[0].native_id}"):
            pin_threads(fake, pool, topology=topo, strict=True)
        with pytest.raises(BindError, match="no thread could be pinned"):
            pin_threads(fake, pool, topology=topo, strict="partial")
    finally:
        stop.set()


@pytest.mark.kernel
def test_strict_puts_back_the_threads_pinned_before_a_refusal(monkeypatch):
    pool, stop = _start(1)
    me = threading.get_native_id()
    topo = discover()
    outside = max(topo.possible_cpus | topo.online_cpus) + 1
    # the first thread is pinned (its CPU exists), the second (this one) refused: the first is put back
    monkeypatch.setattr("numabind.threads.thread_placement",
                        lambda *a, **k: (frozenset({CPU_A}), frozenset({outside})))
    try:
        os.sched_setaffinity(pool[0].native_id, os.sched_getaffinity(0))
        before = frozenset(os.sched_getaffinity(pool[0].native_id))
        with pytest.raises(BindError, match="were put back"):
            pin_threads(Plan(cpus={CPU_A}), [pool[0].native_id, me], topology=topo, strict=True)
        assert frozenset(os.sched_getaffinity(pool[0].native_id)) == before
        assert frozenset(os.sched_getaffinity(me)) == before
    finally:
        stop.set()


def test_pin_threads_refuses_bad_thread_lists():
    with pytest.raises(PlanError, match=r"threads=\[5\]"):
        pin_threads(Plan(cpus={0}), 5)
    with pytest.raises(PlanError, match="not started"):
        pin_threads(Plan(cpus={0}), [threading.Thread(target=print)])
    with pytest.raises(PlanError, match="listed twice"):
        pin_threads(Plan(cpus={0}), [os.getpid(), os.getpid()])
    with pytest.raises(PlanError, match="order 'spread' is not one of"):
        pin_threads(Plan(cpus={0}), [], order="spread")


def test_pin_threads_is_public():
    assert numabind.pin_threads is pin_threads and numabind.PinReport is PinReport
