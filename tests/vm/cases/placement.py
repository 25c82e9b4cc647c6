"""Where the kernel puts memory after numabind binds, measured in a forked child: the checks
tests/vm/test_vm_placement.py runs in the x86 guests and test_vm_arm64.py in the arm64 one."""

from __future__ import annotations

import os
import threading

import pytest

from .. import probe

MIB = probe.MIB


def node_share(m: dict, node: int, source: str) -> float:
    counts = {int(k): v for k, v in m[source].items()}
    return probe.shares(counts).get(node, 0.0)


def _bind_and_measure(backend: str, plan_kwargs: dict, size: int, strict: bool = True) -> dict:
    """In the child: start threads, bind through ``backend``, then allocate and count."""
    os.environ["NUMABIND_BACKEND"] = backend
    import numabind

    stop = threading.Event()
    workers = [threading.Thread(target=stop.wait, name=f"worker{k}", daemon=True) for k in range(3)]
    for w in workers:
        w.start()
    try:
        report = numabind.bind_current(numabind.Plan(**plan_kwargs), strict=strict)
        affinities = probe.thread_affinities()
        out = probe.measure(size)
    finally:
        stop.set()
    out.update(backend=report.backend, warnings=list(report.warnings), applied_cpus=sorted(report.applied.cpus),
               applied_policy=report.applied.mem_policy, applied_nodes=sorted(report.applied.mem_nodes or ()),
               threads={tid: sorted(c) for tid, c in affinities.items()})
    return out


def bind_current_to_node1_places_threads_and_pages(backend, vm_topology):
    cpus = sorted(vm_topology.node_cpus(1))
    plan = dict(cpus=frozenset(cpus), mem_policy="bind", mem_nodes=frozenset({1}))
    m = probe.in_child(_bind_and_measure, backend, plan, 64 * MIB)
    assert m["backend"] == backend
    assert m["warnings"] == []
    assert m["applied_cpus"] == cpus and m["applied_policy"] == "bind" and m["applied_nodes"] == [1]
    assert len(m["threads"]) >= 4
    assert all(c == cpus for c in m["threads"].values()), m["threads"]
    share_mp, share_maps = node_share(m, 1, "move_pages"), node_share(m, 1, "numa_maps")
    print(f"item 1, {backend}: threads {len(m['threads'])}/{len(m['threads'])} on CPUs {cpus}; "
          f"64 MiB after bind: move_pages {probe.fmt_shares(m['move_pages'])}; numa_maps N1={share_maps:.2f}% "
          f"({m['policy']})")
    assert m["policy"] == "bind:1"
    assert share_mp >= 99.0 and share_maps >= 99.0


CHILD_REPORT = r"""
import json, os, threading
from tests.vm import probe
stop = threading.Event()
ts = [threading.Thread(target=stop.wait, daemon=True) for _ in range(3)]
[t.start() for t in ts]
m = probe.measure(64 << 20)
m["threads"] = {tid: sorted(c) for tid, c in probe.thread_affinities().items()}
stop.set()
print("RESULT " + json.dumps(m))
"""


def interleave_spreads_pages_evenly(vm_topology):
    plan = dict(mem_policy="interleave", mem_nodes=frozenset({0, 1}))
    m = probe.in_child(_bind_and_measure, "syscall", plan, 64 * MIB)
    assert m["warnings"] == [] and m["applied_policy"] == "interleave" and m["applied_nodes"] == [0, 1]
    n0, n1 = node_share(m, 0, "move_pages"), node_share(m, 1, "move_pages")
    print(f"item 4, interleave 0,1 over 64 MiB: move_pages {probe.fmt_shares(m['move_pages'])}; "
          f"numa_maps {probe.fmt_shares(m['numa_maps'])} ({m['policy']})")
    assert m["policy"] == "interleave:0-1"
    assert abs(n0 - 50.0) <= 5.0 and abs(n1 - 50.0) <= 5.0
    assert abs(node_share(m, 0, "numa_maps") - 50.0) <= 5.0
    assert n0 + n1 == pytest.approx(100.0)


def _fill_node(node: int, leave: int, ready, done) -> None:
    """Child: bind memory to ``node`` and hold all but ``leave`` bytes of its free memory."""
    import numabind

    numabind.bind_current(numabind.Plan(mem_policy="bind", mem_nodes=frozenset({node})), strict=True)
    free = probe.node_meminfo(node)["MemFree"]
    region = probe.Region(max(free - leave, 0)).touch()
    ready.send(probe.node_meminfo(node)["MemFree"])
    done.wait(300)
    region.close()


def preferred_measure(node: int, size: int) -> dict:
    import numabind

    report = numabind.bind_current(numabind.Plan(mem_policy="preferred", mem_nodes=frozenset({node})), strict=True)
    out = probe.measure(size)
    out["applied_policy"] = report.applied.mem_policy
    return out


def preferred_to_a_full_node_falls_back_without_oom(vm_topology):
    size = 96 * MIB
    free_before = probe.node_meminfo(1)["MemFree"]
    roomy = probe.in_child(preferred_measure, 1, size)
    assert roomy["applied_policy"] == "preferred"
    assert node_share(roomy, 1, "move_pages") >= 99.0  # the preference is real when there is room

    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    ready_r, ready_w = ctx.Pipe(duplex=False)
    done = ctx.Event()
    filler = ctx.Process(target=_fill_node, args=(1, 24 * MIB, ready_w, done), daemon=True)
    filler.start()
    try:
        assert ready_r.poll(240), f"the filler did not fill node 1 (exit code {filler.exitcode})"
        free_full = ready_r.recv()
        full = probe.in_child(preferred_measure, 1, size)
        assert filler.is_alive(), "the filler died (OOM?)"
    finally:
        done.set()
        filler.join(30)
        if filler.is_alive():
            filler.kill()
    counts = {int(k): v for k, v in full["move_pages"].items()}
    assert all(node >= 0 for node in counts), f"pages without a node: {counts}"
    assert sum(counts.values()) == size // probe.PAGE
    elsewhere = 100.0 - node_share(full, 1, "move_pages")
    print(f"item 4, preferred 1: node 1 free {free_before >> 20} MiB -> {free_full >> 20} MiB after filling; "
          f"96 MiB with room: {probe.fmt_shares(roomy['move_pages'])}; with node 1 full: "
          f"{probe.fmt_shares(full['move_pages'])} ({elsewhere:.1f}% fell back, no OOM)")
    # node 1 had free_full bytes left: what did not fit fell back (the kernel may reclaim some cache on node 1
    # first, hence the slack; without the fallback the child would have been OOM-killed or all on node 1)
    must_fall_back = 100.0 * (size - free_full - 32 * MIB) / size
    assert elsewhere >= max(10.0, must_fall_back), (elsewhere, must_fall_back)


def bind_memory_only(node: int, size: int) -> dict:
    import numabind

    report = numabind.bind_current(numabind.Plan(mem_policy="bind", mem_nodes=frozenset({node})), strict=True)
    out = probe.measure(size)
    out.update(warnings=list(report.warnings), applied_policy=report.applied.mem_policy,
               applied_nodes=sorted(report.applied.mem_nodes or ()))
    return out
