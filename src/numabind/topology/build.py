"""The one builder of the topology's values: a :class:`~numabind._facts.Facts`, whatever reader gave it (sysfs and
procfs, a dump, an hwloc XML file), becomes a :class:`~numabind.topology.values.Topology`."""

from __future__ import annotations

from .._base import getLogger
from .._facts import Facts
from .._util import FrozenMap
from ..cpulist import format_cpulist
from ..devices import Gpu
from ..plan import Allowed
from .values import Cache, Cpu, InterleaveWeights, MemoryAccess, Node, Topology

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the looks' start)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable, Iterable

__all__ = ["EFFICIENCY", "PERFORMANCE", "build", "interleave_weights"]

log = getLogger("numabind.topology")     # the package's logger: the name a warning is printed with

PERFORMANCE, EFFICIENCY = "performance", "efficiency"
_NO_CLUSTER: tuple[int, frozenset[int]] = (-1, frozenset())


def build(facts: Facts, root: str, gpus: Callable[[FrozenMap[int, Node]], Iterable[Gpu]]) -> Topology:
    """The topology of ``facts``, found under ``root``; ``gpus(nodes)`` finds its GPUs, given its nodes."""
    nodes = FrozenMap({nid: Node(nid, f.cpus, f.memory_bytes, FrozenMap(f.distances),
                                 None if f.access is None else MemoryAccess(**f.access[0], initiators=f.access[1]))
                       for nid, f in facts.nodes.items()})
    node_of = {cpu: nid for nid, f in facts.nodes.items() for cpu in f.cpus}
    kind_of, kinds_source = _kinds(facts)
    cpus: dict[int, Cpu] = {}
    for cid in sorted(facts.online_cpus):
        package, core, siblings = facts.cores[cid]
        cluster, cluster_cpus = facts.clusters.get(cid, _NO_CLUSTER)
        cpus[cid] = Cpu(cid, node_of.get(cid), package, core, siblings, cluster, cluster_cpus,
                        facts.capacities.get(cid), kind_of.get(cid))
    caches = sorted((Cache(level, ctype, members, size) for (level, ctype, members), size in facts.caches.items()),
                    key=lambda c: (c.level, c.type, min(c.cpus), len(c.cpus)))
    allowed = facts.allowed
    return Topology(
        root=root,
        nodes=nodes,
        cpus=FrozenMap(cpus),
        online_cpus=facts.online_cpus,
        possible_cpus=facts.possible_cpus,
        allowed_cpus=allowed.allowed_cpus,
        online_nodes=facts.online_nodes,
        possible_nodes=facts.possible_nodes,
        allowed_nodes=allowed.allowed_nodes,
        caches=tuple(caches),
        model_name=facts.model_name,
        cppc_highest_perf=facts.cppc_highest_perf,
        gpus=tuple(gpus(nodes)),
        allowed_source=_joined_source(allowed),
        interleave_weights=interleave_weights(facts.weights),
        affinity=allowed.affinity,
        kinds_source=kinds_source,
    )


def interleave_weights(found: tuple[dict[int, int], bool | None, str | None] | None) -> InterleaveWeights | None:
    """The value of the weights a reader found (:attr:`Facts.weights <numabind._facts.Facts.weights>`)."""
    return None if found is None else InterleaveWeights(FrozenMap(found[0]), found[1], found[2])


def _kinds(facts: Facts) -> tuple[dict[int, str], str]:
    """The kind of each CPU of a hybrid CPU and where the kinds came from ("" when all of one kind): the hybrid
    PMUs' lists (``cpu_core``, ``cpu_atom``) first, else the highest ``cpu_capacity`` is performance."""
    online = facts.online_cpus
    kind_of: dict[int, str] = {}
    source = ""
    pmus = facts.hybrid_pmus
    if pmus is not None and pmus[0] & online and pmus[1] & online:
        kind_of.update((c, PERFORMANCE) for c in pmus[0] & online)
        kind_of.update((c, EFFICIENCY) for c in pmus[1] & online)
        source = "cpu_core/cpu_atom"
    elif len(set(facts.capacities.values())) > 1:
        top = max(facts.capacities.values())
        kind_of.update((c, PERFORMANCE if v == top else EFFICIENCY) for c, v in facts.capacities.items())
        source = "cpu_capacity"
    if source:
        log.debug("hybrid CPU (from %s): performance CPUs %s, efficiency CPUs %s", source,
                  format_cpulist(c for c, k in kind_of.items() if k == PERFORMANCE),
                  format_cpulist(c for c, k in kind_of.items() if k == EFFICIENCY))
    return kind_of, source


def _joined_source(allowed: Allowed) -> str:
    """``Topology.allowed_source``: where the CPUs and the nodes came from, "+"-joined, each once."""
    parts: list[str] = []
    for source in (allowed.nodes_source, allowed.cpus_source):
        for part in source.split("+"):
            if part not in parts and part not in ("online", "every node"):
                parts.append(part)
    return "+".join(parts) or "online"
