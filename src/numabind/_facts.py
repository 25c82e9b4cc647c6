"""What a reader found of a machine, in the kernel's terms: the one shape every discovery source gives, which
:func:`numabind.topology.build.build` makes the values of (docs/discovery.rst).
"""

from __future__ import annotations

from ._base import Value
from ._util import FrozenMap

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the looks' start)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping

    from .plan import Allowed

__all__ = ["Facts", "NodeFacts"]


class NodeFacts(Value):
    """One NUMA node: its online CPUs, its MemTotal (bytes), its SLIT row ({node: distance}, empty when the kernel gives
    none) and the firmware's HMAT figures (``access0/initiators``: {figure: value}, the initiator nodes), or None."""

    cpus: frozenset[int]
    memory_bytes: int
    distances: dict[int, int]
    access: tuple[dict[str, int | None], frozenset[int]] | None = None


class Facts(Value):
    """A machine as a reader found it. Ids the kernel does not give are -1; what it does not say is empty or None."""

    online_cpus: frozenset[int]
    possible_cpus: frozenset[int]
    online_nodes: frozenset[int]
    possible_nodes: frozenset[int]
    nodes: dict[int, NodeFacts]                                   # in id order
    cores: dict[int, tuple[int, int, frozenset[int]]]             # online CPU -> (package, core, the core's CPUs)
    allowed: Allowed                                              # the cpuset and the affinity beside it
    #: CPU -> (``cluster_id`` of a cluster larger than the core, else -1; the cluster's online CPUs)
    clusters: Mapping[int, tuple[int, frozenset[int]]] = FrozenMap()
    capacities: Mapping[int, int] = FrozenMap()                   # CPU -> ``cpu_capacity``
    hybrid_pmus: tuple[frozenset[int], frozenset[int]] | None = None   # ``cpu_core``'s and ``cpu_atom``'s CPUs
    #: (level, type, online CPUs) -> ``size`` in bytes (None: not given), each instance once
    caches: Mapping[tuple[int, str, frozenset[int]], int | None] = FrozenMap()
    model_name: str | None = None
    cppc_highest_perf: int | None = None
    #: weighted interleave's system weights: ({node: weight}, ``auto``, the switch's file name), None without them
    weights: tuple[dict[int, int], bool | None, str | None] | None = None
