"""Synthetic sysfs/procfs trees for discovery tests: the names test modules import, from the package
that builds them, :mod:`tests.fake` (one module per concern: CPUs, caches, nodes, the process's
cpuset and procfs, the writer, the ready-made machines; its docstring lists them).

:class:`FakeMachine` describes a machine and :meth:`FakeMachine.write` lays it out under a root as a
kernel does, so ``numabind.discover(root)`` reads it like a live system and hwloc's
``lstopo-no-graphics --input ROOT`` reads it like a dump. What real machines do differently is switched
on with :meth:`FakeMachine.set_quirks` (see :class:`Quirks`). Ready-made machines (each takes the root
first and returns the written machine) are listed in :data:`FACTORIES`; test modules get the
``fake_machine`` factory fixture with ``from tests.fakesys import fake_machine``.
"""

from tests.fake.machine import FakeMachine, Quirks
from tests.fake.machines import (
    FACTORIES,
    ORACLE_FACTORIES,
    RecordingReader,
    arm_clusters,
    big,
    cgroup_restricted,
    cgroup_v1_restricted,
    fake_machine,
    gpu_memory_cpuset,
    grace_blackwell,
    grace_blackwell_clusters,
    grace_blackwell_no_l3,
    grace_hopper,
    grace_hopper_no_l3,
    hybrid,
    kunpeng920,
    legacy_cpuset,
    many_nodes,
    memory_only_nodes,
    multi_die,
    no_numa_dir,
    offline_cpus,
    offline_node0,
    old_kernel,
    one_node,
    padded,
    power_cpuinfo,
    snc,
    sparse_nodes,
    two_sockets,
)
from tests.fake.masks import CGROUP, CPU, GIB_KB, NODE, format_mask, kernel_mask
from tests.fake.procfs import fake_numa_process, fake_procfs

__all__ = [
    "FakeMachine",
    "Quirks",
    "FACTORIES",
    "ORACLE_FACTORIES",
    "RecordingReader",
    "fake_machine",
    "format_mask",
    "kernel_mask",
    "fake_procfs",
    "fake_numa_process",
    "CGROUP",
    "CPU",
    "NODE",
    "GIB_KB",
    "one_node",
    "two_sockets",
    "snc",
    "memory_only_nodes",
    "offline_cpus",
    "sparse_nodes",
    "cgroup_restricted",
    "cgroup_v1_restricted",
    "big",
    "no_numa_dir",
    "old_kernel",
    "padded",
    "offline_node0",
    "legacy_cpuset",
    "gpu_memory_cpuset",
    "many_nodes",
    "hybrid",
    "arm_clusters",
    "multi_die",
    "power_cpuinfo",
    "grace_hopper",
    "grace_hopper_no_l3",
    "grace_blackwell",
    "grace_blackwell_no_l3",
    "grace_blackwell_clusters",
    "kunpeng920",
]
