"""Issue 3, items 2 and 3, through the process-integration API (``numabind.process``).

Item 2: a launcher on node 0 starts a child that touches 256 MiB, under spawn, forkserver and
fork, once bound at birth through ``configure_subprocess`` (node 1) and once with CPU-only late
binding; the scenario is ``cases.process._scenario``, run by ``probe.in_child``. The
spawn mode where the child binds itself while it unpickles its preparation data
(``spawn="in-child"``) is measured as well.

Item 3: ``migrate=True`` moves 256 MiB touched on node 0 to node 1, and the BindReport counts
the pages moved (``pages_migrated``) and left behind (``pages_not_migrated``).
"""

from __future__ import annotations

import multiprocessing
import os

import pytest

from numabind.process import configure_subprocess

from . import probe
from .cases import process
from .cases.process import SIZE, child_touch


@pytest.mark.numa_vm(topology="2n")
@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_birth_time_binding_beats_late_cpu_only_binding(method, vm_topology):
    process.birth_time_binding_beats_late_cpu_only_binding(method, vm_topology)


def _in_child_scenario(node0_cpus: list[int], node1_cpus: list[int]) -> dict:
    """A launcher on node 0 starts a spawn child that binds itself before re-importing __main__."""
    from numabind.process import configure_subprocess

    os.sched_setaffinity(0, node0_cpus)
    import numabind

    plan = numabind.Plan(cpus=frozenset(node1_cpus), mem_policy="bind", mem_nodes=frozenset({1}))
    ctx = multiprocessing.get_context("spawn")
    with configure_subprocess(plan, spawn="in-child", strict=True) as births:
        r, w = ctx.Pipe(duplex=False)
        p = ctx.Process(target=child_touch, args=(SIZE, w))
        p.start()
    w.close()
    assert r.poll(240), f"spawn child gave no result (exit code {p.exitcode})"
    birth = r.recv()
    p.join(60)
    rep = births.report(p.pid, timeout=30)
    return {"birth": birth, "exitcode": p.exitcode, "start_method": rep.start_method,
            "warnings": list(rep.report.warnings), "applied": rep.report.applied.to_text(),
            "launcher_cpus": sorted(os.sched_getaffinity(0))}


@pytest.mark.numa_vm(topology="2n")
def test_spawn_child_binding_itself_places_its_memory(vm_topology):
    node0, node1 = sorted(vm_topology.node_cpus(0)), sorted(vm_topology.node_cpus(1))
    r = probe.in_child(_in_child_scenario, node0, node1, timeout=480)
    birth = r["birth"]
    share = probe.shares(birth["move_pages"]).get(1, 0.0)
    whole = probe.shares(birth["process"]).get(1, 0.0)
    print(f"item 2, spawn in-child: 256 MiB touched by the child on N1: {share:.2f}% "
          f"(numa_maps {probe.shares(birth['numa_maps']).get(1, 0.0):.2f}%, {birth['policy']}); "
          f"whole child on N1: {whole:.2f}% (interpreter start-up ran before the binding)")
    assert r["exitcode"] == 0 and r["start_method"] == "spawn" and r["warnings"] == []
    assert r["launcher_cpus"] == node0 and birth["cpus"] == node1
    assert share >= 99.5 and probe.shares(birth["numa_maps"]).get(1, 0.0) >= 99.5
    assert birth["policy"] == "bind:1"


@pytest.mark.numa_vm(topology="2n")
def test_migrate_reports_pages_moved_and_left(vm_topology):
    process.migrate_reports_pages_moved_and_left(vm_topology)


def _flags_across_spawn(word: int, nodes: list[int], node1_cpus: list[int]) -> dict:
    """The launching thread on a flagged policy over two nodes spawns children inside configure_subprocess."""
    import numabind
    from tests import proc_targets

    out: dict = {"set": probe.raw_set_mempolicy(word, set(nodes)), "before": proc_targets.mode_word()}
    plan = numabind.Plan(cpus=frozenset(node1_cpus), mem_policy="bind", mem_nodes=frozenset({1}))
    ctx = multiprocessing.get_context("spawn")
    r, w = ctx.Pipe(duplex=False)
    with configure_subprocess(plan, strict=True):
        p = ctx.Process(target=proc_targets.report_state, args=(w,))
        p.start()
    out["child"] = r.recv() if r.poll(120) else None
    p.join(60)
    out["after_spawn"] = proc_targets.mode_word()
    try:  # a strict failure (a CPU the guest lacks): the thread is put back the same way
        with configure_subprocess(numabind.Plan(cpus=frozenset({max(node1_cpus) + 64})), strict=True):
            ctx.Process(target=proc_targets.report_state, args=(w,)).start()
        out["strict_error"] = None
    except numabind.NumabindError as e:
        out["strict_error"] = str(e)
    out["after_strict"] = proc_targets.mode_word()
    return out


@pytest.mark.numa_vm(topology="2n")
@pytest.mark.parametrize("word", [2 | 1 << 13, 2 | 1 << 15, 3 | 1 << 14],
                         ids=["bind+balancing", "bind+static", "interleave+relative"])
def test_spawn_puts_back_the_launching_threads_flags_and_mask(word, vm_topology):
    """Issue 15, item 3 on two nodes: ``numactl -b -m 0,1`` and static/relative masks survive a spawn."""
    r = probe.in_child(_flags_across_spawn, word, [0, 1], sorted(vm_topology.node_cpus(1)), timeout=240)
    assert r["set"] == 0, f"the guest kernel refuses {word:#x}: {r['set']}"
    assert r["before"] == [word, [0, 1]]
    child = r["child"]
    assert child["cpus"] == sorted(vm_topology.node_cpus(1)) and (child["policy"], child["nodes"]) == ("bind", [1])
    assert r["after_spawn"] == [word, [0, 1]], f"{r['after_spawn'][0]:#x} after one spawn"
    assert r["strict_error"] and "not online" in r["strict_error"]
    assert r["after_strict"] == [word, [0, 1]]
    print(f"item 3 (issue 15), {word:#x} over nodes 0,1: kept across a spawn and a strict failure")
