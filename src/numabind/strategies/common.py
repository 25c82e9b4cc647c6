"""What every strategy reads of the machine: the machine planned on (the cpuset, or the inherited affinity when
asked), node distances, a hybrid CPU's performance cores, whole cores, and the words a plan's reason uses."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..cpulist import format_cpulist
from ..plan import core_groups
from ..topology import LOCAL_DISTANCE

if TYPE_CHECKING:  # pragma: no cover
    from ..plan import Plan
    from ..topology import Topology

_UNKNOWN_DISTANCE = 255


def topology_or_discover(topology: Topology | None) -> Topology:
    """``topology``, or the discovered live machine when it is None (the one place that does this)."""
    if topology is None:
        from ..topology import discover

        topology = discover()
    return topology


def planned_on(topology: Topology | None, within_affinity: bool) -> Topology:
    """``topology`` (or the live one), narrowed to the inherited affinity with ``within_affinity``."""
    topology = topology_or_discover(topology)
    return narrowed_to_affinity(topology) if within_affinity else topology


def narrowed_to_affinity(topology: Topology) -> Topology:
    """``topology`` narrowed to the inherited affinity (a :class:`PlanError` when unknown)."""
    narrowed = topology.allowed.within_affinity()
    return topology.replace(allowed_cpus=narrowed.allowed_cpus, allowed_source=narrowed.cpus_source)


def widen_fix(topology: Topology) -> str:
    """The fix for CPUs the limit refuses: widen the cpuset, or (when narrowed on request) drop within_affinity."""
    if "within the inherited affinity" in allowed_source(topology):
        return "drop within_affinity (--within-affinity) to plan within the cpuset"
    return "widen the cpuset"


def inherited(topology: Topology, chosen: frozenset[int], what: str) -> str | None:
    """The reason that says a plan leaves the affinity the parent left behind (None when it does not)."""
    affinity = getattr(topology, "affinity", None)
    if affinity is None or topology.allowed_cpus <= affinity or chosen <= affinity:
        return None
    return f"inherited CPUs {fmt(affinity)} from the parent; binding {what} {fmt(chosen)}"


def fmt(ids: Iterable[int]) -> str:
    return format_cpulist(ids) if ids else "none"


def ids_or_none(ids: Iterable[int] | None) -> str | None:
    """A set of ids as a JSON field: its cpulist, or None."""
    return None if ids is None else format_cpulist(ids)


def plan_fields(plan: Plan) -> dict[str, Any]:
    """A plan as the JSON of ``numabind plan`` shows it (a GPU's row, a rank)."""
    return {"cpus": ids_or_none(plan.cpus), "mem_policy": plan.mem_policy, "mem_nodes": ids_or_none(plan.mem_nodes),
            "numactl": plan.to_numactl_args()}


def distance(topology: Topology, a: int, b: int) -> int:
    node = topology.nodes.get(a)
    default = LOCAL_DISTANCE if a == b else _UNKNOWN_DISTANCE
    return node.distances.get(b, default) if node is not None else default


def nearest(topology: Topology, origin: int, candidates: Iterable[int]) -> int:
    """The candidate nearest to ``origin`` (SLIT distance, then id); ``candidates`` is not empty."""
    return min(candidates, key=lambda n: (distance(topology, origin, n), n))


def allowed_source(topology: Topology) -> str:
    return getattr(topology, "allowed_source", "") or "the cpuset"


def whole_cores(topology: Topology, cpus: frozenset[int]) -> list[frozenset[int]]:
    """``cpus`` as whole cores (hyperthread siblings together, :func:`numabind.plan.core_groups`), by lowest CPU."""
    return sorted((core for _, core in core_groups(cpus, topology)), key=min)


def nodes_of(topology: Topology, cpus: Iterable[int]) -> frozenset[int]:
    """The nodes ``cpus`` are on."""
    return frozenset(node for c in cpus if c in topology.cpus and (node := topology.cpus[c].node) is not None)


def prefer_performance(topology: Topology, cpus: frozenset[int], what: str, reasons: list[str]) -> frozenset[int]:
    """The performance cores of ``cpus`` on a hybrid CPU, said in ``reasons``; else ``cpus`` itself."""
    fast = cpus & topology.performance_cpus
    if not fast or fast == cpus:
        return cpus
    reasons.append(f"hybrid CPU: {what} keep their performance cores (CPUs {fmt(fast)}), not the efficiency "
                   f"cores (CPUs {fmt(cpus - fast)}; core kinds from {topology.kinds_source})")
    return fast
