"""Issue 28, section 2, in a 3-node guest: ``numabind move`` moves a running process across nodes.

A worker with 32 threads is started on node 0's CPUs (``numabind run -N 0``, no memory policy: first touch puts
its pages on node 0) and touches 256 MiB in a ``probe.Region``. ``numabind move PID -N 1 -m 1`` (the command
line's own module) then moves it to node 1: every thread must be on node 1's CPUs (``os.sched_getaffinity`` of
each thread, read here) and at least 99 % of the region's pages on node 1, counted by the worker itself with
``move_pages(2)``; the whole process's anonymous pages (``/proc/PID/numa_maps``, read here) are printed beside it.
Topology ``mem-only``: nodes 0 (CPUs 0-1) and 1 (CPUs 2-3) with 512 MiB each, and node 2 (memory only).
"""

from __future__ import annotations

import pytest

from .cases import move


@pytest.mark.numa_vm(topology="mem-only")
def test_move_a_32_thread_process_with_256_mib_from_node_0_to_node_1(vm_topology):
    move.move_a_32_thread_process_with_256_mib_from_node_0_to_node_1(vm_topology)
