"""SGLang's CPU backend: the CPUs of each rank's OpenMP threads (re-exported by :mod:`numabind.compat.sglang`)."""

from __future__ import annotations

import os

from ..cpulist import format_cpulist
from ..errors import PlanError
from ..plan import Plan, core_groups
from . import current_topology
from ._sglang_base import NumaListError, logger

__all__ = ["init_threads_binding"]


def init_threads_binding(*, numa_index: int, world_size: int) -> str:
    """The CPUs (a cpulist string) for the OpenMP threads of CPU-backend rank ``numa_index``: under
    ``SGLANG_CPU_OMP_THREADS_BIND=all`` (the default) the physical cores this process may use on the
    ``numa_index``-th node with CPUs, else the rank's entry of the variable's ``|``-separated CPU lists.
    """
    value = os.environ.get("SGLANG_CPU_OMP_THREADS_BIND", "all")
    topology = current_topology()
    node_ids = sorted(topology.nodes_with_cpus)
    if value == "all":
        if world_size > len(node_ids):
            raise PlanError(
                f"SGLANG_CPU_OMP_THREADS_BIND is unset (all) and the world size {world_size} is larger than "
                f"the {len(node_ids)} NUMA nodes with CPUs; give each rank its CPUs, e.g. "
                f"SGLANG_CPU_OMP_THREADS_BIND='0-15|16-31|...' with {world_size} lists")
        if not 0 <= numa_index < len(node_ids):
            raise NumaListError(f"rank {numa_index} has no NUMA node: this machine has {len(node_ids)} nodes with CPUs")
        if world_size < len(node_ids):
            logger.warning("%d NUMA nodes have CPUs but the world size is %d: %d nodes are not used",
                           len(node_ids), world_size, len(node_ids) - world_size)
        node = node_ids[numa_index]
        usable = topology.nodes[node].cpus & topology.allowed_cpus
        cores = sorted(min(core) for _, core in core_groups(usable, topology))   # the lowest CPU of each core
        if not cores:
            raise PlanError(f"NUMA node {node} (rank {numa_index}) has no CPU this process may use "
                            f"({format_cpulist(topology.allowed_cpus)}); set SGLANG_CPU_OMP_THREADS_BIND")
        return format_cpulist(cores)
    groups = value.split("|")
    if len(groups) < world_size or not 0 <= numa_index < len(groups):
        raise NumaListError(
            f"SGLANG_CPU_OMP_THREADS_BIND={value!r} has {len(groups)} CPU lists, which does not cover rank "
            f"{numa_index} of world size {world_size}; give one list per rank, separated by '|'")
    group = groups[numa_index].strip()
    try:
        Plan.from_numactl_args(f"--physcpubind={group}", topology=topology).validate(topology)
    except PlanError as e:
        raise PlanError(f"SGLANG_CPU_OMP_THREADS_BIND list {numa_index} ({group!r}): {e}") from None
    if world_size > len(node_ids):
        logger.warning("The world size %d is larger than the %d NUMA nodes with CPUs: how much memory each rank "
                       "has cannot be known in advance; set --max-total-tokens", world_size, len(node_ids))
    return group
