"""What a reader found of a machine, in the kernel's terms: the one shape every discovery source gives.

The sysfs reader (:mod:`numabind.topology.sysfs`) and the hwloc XML reader (:mod:`numabind._hwloc_xml`) each fill
a :class:`Facts`; :func:`numabind.topology.build.build` makes the values of it, whatever the source
(docs/discovery.rst).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .plan import Allowed

__all__ = ["Facts", "NodeFacts"]


@dataclass(frozen=True)
class NodeFacts:
    """One NUMA node: its online CPUs, its MemTotal (bytes), its SLIT row ({node: distance}, empty when the kernel
    gives none) and the firmware's HMAT figures (``access0/initiators``: {figure: value}, the initiator nodes), or
    None."""

    cpus: frozenset[int]
    memory_bytes: int
    distances: dict[int, int]
    access: tuple[dict[str, int | None], frozenset[int]] | None = None


@dataclass
class Facts:
    """A machine as a reader found it. Ids the kernel does not give are -1; what it does not say is empty or None."""

    online_cpus: frozenset[int]
    possible_cpus: frozenset[int]
    online_nodes: frozenset[int]
    possible_nodes: frozenset[int]
    nodes: dict[int, NodeFacts]                                   # in id order
    cores: dict[int, tuple[int, int, frozenset[int]]]             # online CPU -> (package, core, the core's CPUs)
    allowed: Allowed                                              # the cpuset and the affinity beside it
    #: CPU -> (``cluster_id`` of a cluster larger than the core, else -1; the cluster's online CPUs)
    clusters: dict[int, tuple[int, frozenset[int]]] = field(default_factory=dict)
    capacities: dict[int, int] = field(default_factory=dict)      # CPU -> ``cpu_capacity``
    hybrid_pmus: tuple[frozenset[int], frozenset[int]] | None = None   # ``cpu_core``'s and ``cpu_atom``'s CPUs
    #: (level, type, online CPUs) -> ``size`` in bytes (None: not given), each instance once
    caches: dict[tuple[int, str, frozenset[int]], int | None] = field(default_factory=dict)
    model_name: str | None = None
    cppc_highest_perf: int | None = None
    #: weighted interleave's system weights: ({node: weight}, ``auto``, the switch's file name), None without them
    weights: tuple[dict[int, int], bool | None, str | None] | None = None
