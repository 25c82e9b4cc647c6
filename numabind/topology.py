"""Topology value objects and discovery (reads files under a root only)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._util import FrozenMap
from .devices import Gpu

__all__ = ["Cache", "Cpu", "Node", "Topology", "discover"]


@dataclass(frozen=True)
class Cpu:
    """One online logical CPU."""

    id: int
    node: int | None                 # NUMA node holding this CPU (None if no node lists it)
    package: int                     # physical_package_id, -1 when unknown
    core: int                        # core_id, -1 when unknown
    siblings: frozenset[int]         # thread_siblings_list (contains id itself)


@dataclass(frozen=True)
class Cache:
    """One cache instance shared by a group of CPUs."""

    level: int
    type: str                        # "Unified" | "Data" | "Instruction"
    cpus: frozenset[int]             # shared_cpu_list


@dataclass(frozen=True)
class Node:
    """One NUMA node as the kernel lists it (memory-only and CPU-only too)."""

    id: int
    cpus: frozenset[int]             # online CPUs of the node; empty for memory-only nodes
    memory_bytes: int                # MemTotal of the node; 0 for CPU-only nodes
    distances: FrozenMap[int, int] = field(default_factory=FrozenMap)

    @property
    def has_memory(self) -> bool:
        return self.memory_bytes > 0

    @property
    def has_cpus(self) -> bool:
        return bool(self.cpus)


@dataclass(frozen=True)
class Topology:
    """What discovery found under one root. Frozen, hashable, picklable."""

    root: str
    nodes: FrozenMap[int, Node]
    cpus: FrozenMap[int, Cpu]        # online CPUs
    online_cpus: frozenset[int]
    possible_cpus: frozenset[int]
    allowed_cpus: frozenset[int]     # the process's (or the dump's cpuset's) CPUs
    online_nodes: frozenset[int]
    possible_nodes: frozenset[int]
    allowed_nodes: frozenset[int]    # Mems_allowed / cpuset.mems
    caches: tuple[Cache, ...] = ()   # distinct cache instances, sorted by (level, type, min cpu)
    model_name: str | None = None    # /proc/cpuinfo "model name" of the first CPU
    cppc_highest_perf: int | None = None  # cpu0/acpi_cppc/highest_perf (PCT gate)
    gpus: tuple[Gpu, ...] = ()
    allowed_source: str = ""         # where allowed_cpus/allowed_nodes were read from
