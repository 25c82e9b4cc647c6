"""SGLang's CPU backend: the CPUs of each rank's OpenMP threads (``init_threads_binding``).

A part of :mod:`numabind.compat.sglang`, which re-exports it.
"""

from __future__ import annotations

import os
from typing import Any

from ..cpulist import format_cpulist
from ..errors import PlanError
from ..plan import core_groups
from . import current_topology, plan_from_numactl_args
from ._sglang_base import NumaListError, logger

__all__ = ["init_threads_binding"]


def _physical_cores(topology: Any, cpus: frozenset[int]) -> list[int]:
    """One CPU per physical core among ``cpus`` (the lowest allowed sibling), sorted."""
    return sorted(min(core) for _, core in core_groups(cpus, topology))


def init_threads_binding(*, numa_index: int, world_size: int) -> str:
    """The CPUs (a cpulist string) for the OpenMP threads of CPU-backend rank ``numa_index``.

    ``SGLANG_CPU_OMP_THREADS_BIND=all`` (the default): the physical cores this
    process may use on the ``numa_index``-th NUMA node with CPUs; ``world_size``
    (dp x tp x pp) must not exceed the number of such nodes. Otherwise the
    variable is ``|``-separated numactl CPU lists, one per rank, indexed by
    ``numa_index`` (a router worker with ``world_size`` 1 may pick any of them);
    the chosen list is checked against this machine and returned as written.
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
        cores = _physical_cores(topology, topology.nodes[node].cpus & topology.allowed_cpus)
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
        plan_from_numactl_args(f"--physcpubind={group}", topology).validate(topology)
    except PlanError as e:
        raise PlanError(f"SGLANG_CPU_OMP_THREADS_BIND list {numa_index} ({group!r}): {e}") from None
    if world_size > len(node_ids):
        logger.warning("The world size %d is larger than the %d NUMA nodes with CPUs: how much memory each rank "
                       "has cannot be known in advance; set --max-total-tokens", world_size, len(node_ids))
    return group
