"""Where the pages of one range go after numabind.bind_memory, counted without numabind: the checks
tests/vm/test_vm_memory.py runs in the x86 guest and test_vm_arm64.py in the arm64 one."""

from __future__ import annotations

import pytest

from .. import probe

MIB = probe.MIB
SIZE = 32 * MIB


def region_counts(region: probe.Region) -> tuple[dict[int, int], dict[int, int]]:
    return dict(region.node_counts()), region.numa_maps()["nodes"]


def _share(counts: dict[int, int], node: int) -> float:
    return probe.shares(counts).get(node, 0.0)


def interleave_over_nodes_0_and_1_puts_pages_on_both(vm_topology):
    from numabind.memory import bind_memory, page_placement

    with probe.Region(SIZE) as r:
        report = bind_memory((r.addr, r.size), "interleave", nodes={0, 1}, strict=True)
        assert report.read_back == ("interleave", frozenset({0, 1})) and report.placement.not_faulted == r.pages
        r.touch()
        by_move_pages, by_maps = region_counts(r)
        line = r.numa_maps()["policy"]
        placed = page_placement((r.addr, r.size))
    print(f"bind_memory interleave 0,1 over 32 MiB: move_pages {probe.fmt_shares(by_move_pages)}; numa_maps "
          f"{probe.fmt_shares(by_maps)} ({line})")
    assert line == "interleave:0-1"
    assert dict(placed.by_node) == by_move_pages and placed.not_faulted == 0
    assert set(by_move_pages) == {0, 1} and set(by_maps) == {0, 1}
    assert abs(_share(by_move_pages, 0) - 50.0) <= 10.0 and abs(_share(by_maps, 0) - 50.0) <= 10.0


def bind_puts_the_pages_on_the_node(vm_topology, node):
    import numabind
    from numabind.memory import bind_memory, page_placement

    with probe.Region(SIZE) as r:
        bind_memory((r.addr, r.size), "bind", nodes={0}, strict=True)
        r.touch()                 # pages placed on node 0 before are not moved without move=True ...
        with pytest.raises(numabind.BindError, match="pass move=True"):
            bind_memory((r.addr, r.size), "bind", nodes={node}, strict=True)
    with probe.Region(SIZE) as r:
        report = bind_memory((r.addr, r.size), "bind", nodes={node}, strict=True)
        r.touch()                 # ... pages touched after the call go to the node
        by_move_pages, by_maps = region_counts(r)
        after = page_placement((r.addr, r.size))
        line = r.numa_maps()["policy"]
    print(f"bind_memory bind {node} over 32 MiB, touched after: move_pages {probe.fmt_shares(by_move_pages)}; "
          f"numa_maps {probe.fmt_shares(by_maps)} ({line})")
    assert report.applied and line == f"bind:{node}"
    assert by_move_pages == {node: r.pages} and by_maps == {node: r.pages}
    assert dict(after.by_node) == {node: r.pages}


def move_moves_pages_touched_before_from_node_0_to_node_1(vm_topology):
    from numabind.memory import bind_memory

    with probe.Region(SIZE) as r:
        bind_memory((r.addr, r.size), "bind", nodes={0}, strict=True)
        r.touch()
        before_mp, before_maps = region_counts(r)
        assert before_mp == {0: r.pages} and before_maps == {0: r.pages}
        lenient = bind_memory((r.addr, r.size), "bind", nodes={1}, strict=False)    # no move: the pages stay
        assert lenient.off_nodes == r.pages and "move=True" in lenient.warnings[0]
        report = bind_memory((r.addr, r.size), "bind", nodes={1}, move=True, strict=True)
        after_mp, after_maps = region_counts(r)
    print(f"bind_memory bind 1 move=True over 32 MiB touched on node 0: before move_pages "
          f"{probe.fmt_shares(before_mp)}; after move_pages {probe.fmt_shares(after_mp)}, numa_maps "
          f"{probe.fmt_shares(after_maps)}; report {report.placement.describe()}")
    assert report.ok and report.move and dict(report.placement.by_node) == {1: r.pages}
    assert after_mp == {1: r.pages} and after_maps == {1: r.pages}
