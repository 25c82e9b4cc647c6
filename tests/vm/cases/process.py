"""Issue 3, items 2 and 3: the scenarios and checks behind ``test_vm_process.py`` (and ``test_vm_arm64.py``).

A launcher pinned to node 0's CPUs (default memory policy, as an unbound launcher on node 0)
starts a child under a given start method; the child touches 256 MiB. Once it is bound at birth
through ``configure_subprocess`` (plan: node 1's CPUs, memory bound to node 1), once with
CPU-only late binding (``sched_setaffinity`` from inside the child, what ``torch.numa`` does).

The late child is started first. For forkserver that means the server is already running,
unbound, when configure_subprocess is entered, which is the common case in real programs.
"""

from __future__ import annotations

import multiprocessing
import os

from .. import probe

MIB = probe.MIB
SIZE = 256 * MIB


def child_touch(size: int, conn) -> None:
    """In the started child: where do ``size`` freshly touched bytes go, and the whole process?"""
    m = probe.measure(size)
    m["cpus"] = sorted(os.sched_getaffinity(0))
    m["process"] = probe.process_node_pages()
    m["policy_line"] = m.pop("line")
    conn.send(m)
    conn.close()


def _late_cpu_only(size: int, cpus: list[int], conn) -> None:
    os.sched_setaffinity(0, cpus)
    child_touch(size, conn)


def _start(ctx, target, args) -> dict:
    r, w = ctx.Pipe(duplex=False)
    p = ctx.Process(target=target, args=(*args, w))
    p.start()
    w.close()
    if not r.poll(240):
        p.kill()
        raise AssertionError(f"{ctx.get_start_method()} child gave no result (exit code {p.exitcode})")
    result = r.recv()
    p.join(60)
    assert p.exitcode == 0, f"{ctx.get_start_method()} child exited with {p.exitcode}"
    return result


def _scenario(method: str, node0_cpus: list[int], node1_cpus: list[int]) -> dict:
    """In a forked child of the test process: a launcher on node 0 starting both kinds of child."""
    import numabind

    os.sched_setaffinity(0, node0_cpus)
    ctx = multiprocessing.get_context(method)
    late = _start(ctx, _late_cpu_only, (SIZE, node1_cpus))
    plan = numabind.Plan(cpus=frozenset(node1_cpus), mem_policy="bind", mem_nodes=frozenset({1}))
    with numabind.configure_subprocess(plan):
        birth = _start(ctx, child_touch, (SIZE,))
    return {"late": late, "birth": birth, "launcher_cpus": sorted(os.sched_getaffinity(0)),
            "launcher_policy": numabind.current_binding().mem_policy}


def birth_time_binding_beats_late_cpu_only_binding(method, vm_topology):
    node0, node1 = sorted(vm_topology.node_cpus(0)), sorted(vm_topology.node_cpus(1))
    r = probe.in_child(_scenario, method, node0, node1, timeout=480)
    birth, late = r["birth"], r["late"]
    assert r["launcher_cpus"] == node0 and r["launcher_policy"] in ("default", None)
    assert birth["cpus"] == node1 and late["cpus"] == node1
    region_birth = probe.shares(birth["move_pages"]).get(1, 0.0)
    region_late = probe.shares(late["move_pages"]).get(1, 0.0)
    whole_birth = probe.shares(birth["process"]).get(1, 0.0)
    whole_late = probe.shares(late["process"]).get(1, 0.0)
    print(f"item 2, {method}: 256 MiB touched by the child on N1: birth-time {region_birth:.2f}% "
          f"(numa_maps {probe.shares(birth['numa_maps']).get(1, 0.0):.2f}%, {birth['policy']}) vs late CPU-only "
          f"{region_late:.2f}% ({late['policy']}); whole child on N1: birth-time {whole_birth:.2f}% vs late "
          f"{whole_late:.2f}% (difference {whole_birth - whole_late:+.2f} points)")
    assert region_birth >= 99.5 and probe.shares(birth["numa_maps"]).get(1, 0.0) >= 99.5
    assert birth["policy"] == "bind:1"


def _touch_then_migrate(size: int, src_cpus: list[int], dst_cpus: list[int]) -> dict:
    """Child: touch ``size`` bytes on node 0, then bind to node 1 with migrate=True.

    The transaction's own page counts (``numabind._proc.node_pages``, called right before and right
    after ``migrate_pages``) are recorded, so the test compares the report with the counts it was
    made from instead of with a count taken earlier plus a guessed margin: the interpreter maps and
    allocates pages between any earlier count and the system call (imports map file pages that sit
    in the page cache on node 0), and how many is not knowable."""
    import time

    import numabind
    from numabind import _proc

    numabind.bind_current(numabind.Plan(cpus=frozenset(src_cpus), mem_policy="bind", mem_nodes=frozenset({0})),
                          strict=True)
    counts: list[dict] = []
    count_pages = _proc.node_pages

    def recorded(pid="self"):
        pages = count_pages(pid)
        if pages is not None:
            counts.append({"total": pages.total.get(0, 0)})
        return pages

    with probe.Region(size) as region:
        region.touch()
        before = dict(region.node_counts())
        t0 = time.monotonic()
        _proc.node_pages = recorded
        try:
            report = numabind.bind_current(numabind.Plan(cpus=frozenset(dst_cpus), mem_policy="bind",
                                                         mem_nodes=frozenset({1}), migrate=True))
        finally:
            _proc.node_pages = count_pages
        seconds = time.monotonic() - t0
        after = dict(region.node_counts())
        maps = region.numa_maps()["nodes"]
        private_after = probe.process_node_pages(private_only=True)
    return {"private_after": private_after, "counts": counts,
            "before": before, "after": after, "numa_maps": maps, "seconds": seconds, "moved": report.pages_migrated,
            "left": report.pages_not_migrated, "warnings": list(report.warnings), "notes": list(report.notes),
            "cpus": sorted(report.applied.cpus), "policy": report.applied.mem_policy}


def migrate_reports_pages_moved_and_left(vm_topology):
    size = 256 * MIB
    pages = size // probe.PAGE
    src, dst = sorted(vm_topology.node_cpus(0)), sorted(vm_topology.node_cpus(1))
    r = probe.in_child(_touch_then_migrate, size, src, dst)
    assert probe.shares(r["before"]).get(0, 0.0) >= 99.0, r["before"]
    share = probe.shares(r["after"]).get(1, 0.0)
    print(f"item 3, migrate=True: region before {probe.fmt_shares(r['before'])}, after {probe.fmt_shares(r['after'])}; "
          f"BindReport: {r['moved']} pages moved, {r['left']} left on node 0; the transaction's counts on N0 "
          f"{r['counts']}; private pages on N0 afterwards {r['private_after'].get(0, 0)} "
          f"in {r['seconds']:.1f} s; "
          f"warnings {r['warnings']}; notes {r['notes']}")
    assert r["warnings"] == [] and r["cpus"] == dst and r["policy"] == "bind"
    assert share >= 99.0 and probe.shares(r["numa_maps"]).get(1, 0.0) >= 99.0
    # the report is the difference of the two counts it was made from, exactly
    assert len(r["counts"]) == 2, r["counts"]
    (first, second) = r["counts"]
    assert r["moved"] == first["total"] - second["total"] and r["left"] == second["total"]
    # and it agrees with the independent per-page count (move_pages): at least the region moved
    assert r["moved"] >= 0.99 * pages
    # no private page stayed on node 0 uncounted: under MPOL_BIND to node 1 no new anonymous page lands on
    # node 0 after the second count (copies on write too follow the policy), so a later count of the
    # mappings without a file can only be smaller than everything the report says stayed
    assert r["private_after"].get(0, 0) <= r["left"]
