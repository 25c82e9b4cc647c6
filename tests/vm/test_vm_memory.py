"""numabind.bind_memory on a real multi-node kernel: where the pages of one range go (issue 27).

The guest has three nodes (``mem-only``: 0 and 1 with CPUs, 2 memory only). Every range is a
``probe.Region`` (a mapping of its own between guard pages), so its pages are counted without numabind
twice: by ``move_pages(2)`` in query mode and on its own line of ``/proc/self/numa_maps``; the report's own
count must agree. bind_memory changes only the range's policy, never the thread's, so the cases run in the
guest's pytest process.
"""

from __future__ import annotations

import logging
import sys

import pytest

from . import probe

MIB = probe.MIB
SIZE = 32 * MIB


def _counts(region: probe.Region) -> tuple[dict[int, int], dict[int, int]]:
    return dict(region.node_counts()), region.numa_maps()["nodes"]


def _share(counts: dict[int, int], node: int) -> float:
    return probe.shares(counts).get(node, 0.0)


@pytest.mark.numa_vm(topology="mem-only")
def test_interleave_over_nodes_0_and_1_puts_pages_on_both(vm_topology):
    from numabind.memory import bind_memory, page_placement

    with probe.Region(SIZE) as r:
        report = bind_memory((r.addr, r.size), "interleave", nodes={0, 1}, strict=True)
        assert report.read_back == ("interleave", frozenset({0, 1})) and report.placement.not_faulted == r.pages
        r.touch()
        by_move_pages, by_maps = _counts(r)
        line = r.numa_maps()["policy"]
        placed = page_placement((r.addr, r.size))
    print(f"bind_memory interleave 0,1 over 32 MiB: move_pages {probe.fmt_shares(by_move_pages)}; numa_maps "
          f"{probe.fmt_shares(by_maps)} ({line})")
    assert line == "interleave:0-1"
    assert dict(placed.by_node) == by_move_pages and placed.not_faulted == 0
    assert set(by_move_pages) == {0, 1} and set(by_maps) == {0, 1}
    assert abs(_share(by_move_pages, 0) - 50.0) <= 10.0 and abs(_share(by_maps, 0) - 50.0) <= 10.0


@pytest.mark.numa_vm(topology="mem-only")
@pytest.mark.parametrize("node", [1, 2])
def test_bind_puts_the_pages_on_the_node(vm_topology, node):
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
        by_move_pages, by_maps = _counts(r)
        after = page_placement((r.addr, r.size))
        line = r.numa_maps()["policy"]
    print(f"bind_memory bind {node} over 32 MiB, touched after: move_pages {probe.fmt_shares(by_move_pages)}; "
          f"numa_maps {probe.fmt_shares(by_maps)} ({line})")
    assert report.applied and line == f"bind:{node}"
    assert by_move_pages == {node: r.pages} and by_maps == {node: r.pages}
    assert dict(after.by_node) == {node: r.pages}


@pytest.mark.numa_vm(topology="mem-only")
def test_move_moves_pages_touched_before_from_node_0_to_node_1(vm_topology):
    from numabind.memory import bind_memory

    with probe.Region(SIZE) as r:
        bind_memory((r.addr, r.size), "bind", nodes={0}, strict=True)
        r.touch()
        before_mp, before_maps = _counts(r)
        assert before_mp == {0: r.pages} and before_maps == {0: r.pages}
        lenient = bind_memory((r.addr, r.size), "bind", nodes={1}, strict=False)    # no move: the pages stay
        assert lenient.off_nodes == r.pages and "move=True" in lenient.warnings[0]
        report = bind_memory((r.addr, r.size), "bind", nodes={1}, move=True, strict=True)
        after_mp, after_maps = _counts(r)
    print(f"bind_memory bind 1 move=True over 32 MiB touched on node 0: before move_pages "
          f"{probe.fmt_shares(before_mp)}; after move_pages {probe.fmt_shares(after_mp)}, numa_maps "
          f"{probe.fmt_shares(after_maps)}; report {report.placement.describe()}")
    assert report.ok and report.move and dict(report.placement.by_node) == {1: r.pages}
    assert after_mp == {1: r.pages} and after_maps == {1: r.pages}


@pytest.mark.numa_vm(topology="mem-only")
def test_sglang_helpers_spread_over_every_memory_node(vm_topology, monkeypatch, caplog):
    from numabind.compat import _sglang_memory as sm

    from ..test_compat_sglang_memory import fake_torch

    assert sm.numa_memory_nodes() == [0, 1, 2]
    with probe.Region(SIZE) as r:
        assert sm.numa_interleave_memory(r.addr, r.size) == (0, 1, 2)
        r.touch()
        by_move_pages, _ = _counts(r)
        counts = sm.numa_page_counts(r.addr, r.size)
    assert counts == by_move_pages and set(counts) == {0, 1, 2}

    torch = fake_torch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    with caplog.at_level(logging.INFO, logger="sglang.srt.utils.numa_utils"):
        tensor, buffer = sm.allocate_interleaved_pinned_table((SIZE // 4,), torch.float32)
    try:
        assert buffer is not None and tensor.data_ptr() == buffer.ptr
        table = sm.numa_page_counts(buffer.ptr, buffer.nbytes)
        assert set(table) == {0, 1, 2} and sum(table.values()) == SIZE // probe.PAGE
        assert ("register", buffer.ptr, SIZE, 0) in torch.calls
        assert "Pinned 0.0 GiB of host memory across NUMA nodes" in caplog.text
    finally:
        buffer.release()
    print(f"sglang numa_interleave_memory over 32 MiB: {probe.fmt_shares(counts)}; "
          f"allocate_interleaved_pinned_table 32 MiB: {probe.fmt_shares(table)}")
