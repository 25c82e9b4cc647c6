"""What a process may use, and the narrowing of a plan's CPUs and nodes to it (pure: no I/O).

:class:`Limits` is built either from a :class:`~numabind.topology.Topology` (planning, on any root)
or, for the running process, by :func:`numabind.live.limits` from the live kernel. The two functions
below are the one place that says which CPUs and nodes of a request fit, and why the others do not:
:meth:`numabind.plan.Plan.validate`, the placement strategies and :func:`numabind.bind_current` all
use them.
"""

from __future__ import annotations

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)

from ._value import Value
from .cpulist import format_cpulist

if TYPE_CHECKING:  # pragma: no cover
    from .topology import Topology

__all__ = ["Limits", "narrow_cpus", "narrow_nodes"]


class Limits(Value):
    """The CPUs and memory nodes a process may use, and where each limit came from.

    ``online_cpus``: CPUs the kernel has online; ``allowed_cpus``: the online CPUs the process may
    be bound to (its cpuset, or for a dump the dumped process's allowed set); ``nodes``: the NUMA
    nodes that exist; ``memory_nodes``: those with memory; ``allowed_nodes``: the memory nodes the
    process may allocate from (``Mems_allowed`` / ``cpuset.mems``).
    """

    __slots__ = ("online_cpus", "allowed_cpus", "cpus_source", "nodes", "memory_nodes", "allowed_nodes",
                 "nodes_source")

    def __init__(self, online_cpus: frozenset[int], allowed_cpus: frozenset[int], cpus_source: str,
                 nodes: frozenset[int], memory_nodes: frozenset[int], allowed_nodes: frozenset[int],
                 nodes_source: str) -> None:
        for name, value in (("online_cpus", online_cpus), ("allowed_cpus", allowed_cpus), ("nodes", nodes),
                            ("memory_nodes", memory_nodes), ("allowed_nodes", allowed_nodes)):
            object.__setattr__(self, name, frozenset(value))
        object.__setattr__(self, "cpus_source", cpus_source)
        object.__setattr__(self, "nodes_source", nodes_source)

    online_cpus: frozenset[int]
    allowed_cpus: frozenset[int]
    cpus_source: str
    nodes: frozenset[int]
    memory_nodes: frozenset[int]
    allowed_nodes: frozenset[int]
    nodes_source: str

    @classmethod
    def from_topology(cls, topology: Topology) -> Limits:
        source = getattr(topology, "allowed_source", "") or ""
        return cls(online_cpus=topology.online_cpus, allowed_cpus=topology.allowed_cpus,
                   cpus_source=source or "affinity", nodes=frozenset(topology.nodes),
                   memory_nodes=frozenset(n for n, node in topology.nodes.items() if node.has_memory),
                   allowed_nodes=topology.allowed_nodes, nodes_source=source or "Mems_allowed")


def narrow_cpus(cpus: frozenset[int], limits: Limits) -> tuple[frozenset[int], str | None]:
    """``(the CPUs of cpus the process may use, None)`` or, when some do not fit, the kept ones and why."""
    kept = cpus & limits.allowed_cpus
    outside = cpus - kept
    if not outside:
        return kept, None
    why = (f"CPUs {format_cpulist(outside)} are outside the CPUs this process may use "
           f"({format_cpulist(limits.allowed_cpus) or 'none'}, from {limits.cpus_source})")
    offline = outside - limits.online_cpus
    if offline:
        why += (f"; CPUs {format_cpulist(offline)} are not online on this machine "
                f"(online: {format_cpulist(limits.online_cpus)})")
    return kept, why + "; pick CPUs inside that set or widen the cpuset"


def narrow_nodes(nodes: frozenset[int], limits: Limits, policy: str | None = None) -> tuple[frozenset[int], str | None]:
    """``(the memory nodes of nodes the process may allocate from, None)`` or the kept ones and why."""
    kept = nodes & limits.nodes & limits.memory_nodes & limits.allowed_nodes
    if kept == nodes:
        return kept, None
    why = []
    missing = nodes - limits.nodes
    if missing:
        why.append(f"NUMA nodes {format_cpulist(missing)} do not exist (nodes: {format_cpulist(limits.nodes)})")
    memless = nodes - missing - limits.memory_nodes
    if memless:
        what = f"a {policy} policy" if policy else "a memory policy"
        why.append(f"NUMA nodes {format_cpulist(memless)} have no memory; {what} cannot place pages there")
    outside = nodes - missing - memless - limits.allowed_nodes
    if outside:
        why.append(f"NUMA nodes {format_cpulist(outside)} are outside the memory nodes this process may use "
                   f"({format_cpulist(limits.allowed_nodes) or 'none'}, from {limits.nodes_source})")
    return kept, "; ".join(why)
