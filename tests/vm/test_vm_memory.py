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
from .cases import memory
from .cases.memory import SIZE, region_counts


@pytest.mark.numa_vm(topology="mem-only")
def test_interleave_over_nodes_0_and_1_puts_pages_on_both(vm_topology):
    memory.interleave_over_nodes_0_and_1_puts_pages_on_both(vm_topology)


@pytest.mark.numa_vm(topology="mem-only")
@pytest.mark.parametrize("node", [1, 2])
def test_bind_puts_the_pages_on_the_node(vm_topology, node):
    memory.bind_puts_the_pages_on_the_node(vm_topology, node)


@pytest.mark.numa_vm(topology="mem-only")
def test_move_moves_pages_touched_before_from_node_0_to_node_1(vm_topology):
    memory.move_moves_pages_touched_before_from_node_0_to_node_1(vm_topology)


@pytest.mark.numa_vm(topology="mem-only")
def test_sglang_helpers_spread_over_every_memory_node(vm_topology, monkeypatch, caplog):
    from numabind.compat import _sglang_memory as sm

    from ..faketorch import fake_torch

    assert sm.numa_memory_nodes() == [0, 1, 2]
    with probe.Region(SIZE) as r:
        assert sm.numa_interleave_memory(r.addr, r.size) == (0, 1, 2)
        r.touch()
        by_move_pages, _ = region_counts(r)
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
