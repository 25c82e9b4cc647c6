"""Issue 12: ``numabind stat`` on a two-node guest: a worker bound to node 1 is local, a worker whose
CPUs were moved to node 1 after it touched its memory on node 0 shows that memory as remote.

The workers are separate processes (``numabind run ... -- python -c WORKER``) that allocate
and touch 32 MiB in a ``probe.Region``, say ``ready`` and wait on stdin. What ``numabind stat
--json`` says is compared with the worker's ``/proc/PID/numa_maps`` read here, without numabind.

A worker's *file* pages (the interpreter and its libraries) are page-cache pages the guest's other
processes brought in on node 0 first; they stay there whatever the worker's binding, so the
assertion of locality is on its anonymous memory (``remote_share_by_kind("anon")``); the total
share is printed next to it.
"""

from __future__ import annotations

import pytest

from .cases import stat


@pytest.mark.numa_vm(topology="2n")
def test_stat_of_a_worker_bound_to_node_1_is_local(vm_topology):
    stat.stat_of_a_worker_bound_to_node_1_is_local(vm_topology)


@pytest.mark.numa_vm(topology="2n")
def test_stat_of_a_late_cpu_only_bound_worker_shows_its_remote_share(vm_topology):
    stat.stat_of_a_late_cpu_only_bound_worker_shows_its_remote_share(vm_topology)
