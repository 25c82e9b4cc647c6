"""Placement strategies: which CPUs and memory nodes a GPU worker should use (pure).

Every function here takes a :class:`~numabind.topology.Topology` and returns
values; nothing reads a file or calls the kernel (``topology: Topology | None = None`` only
means "call :func:`numabind.topology.discover` first"). The automatic-binding
gate's one live input, the process's current binding, is read by
:func:`numabind.auto.auto_plan_available`, which then calls :func:`auto_gate`.

Placement of one GPU:

1. its node: an explicit per-GPU node list, else ``gpu.numa_node``;
2. the CPU node: that node if it has CPUs, else the nearest node (SLIT
   distance, then id) that has CPUs the process may use;
3. the memory node(s): the CPU node if it has memory, else the nearest node
   with memory the process may use (memory-only and CPU-only layouts);
4. the mode picks CPUs of the CPU node (``node``, ``exclusive``,
   ``core-complex``, ``pct``) or of its whole package (``socket``);
5. CPUs are intersected with ``topology.allowed_cpus`` (the cpuset: never the affinity the
   process inherited, unless ``within_affinity=True`` asks for it) and memory nodes with
   ``topology.allowed_nodes``; an empty result is a :class:`PlanError`. A plan that leaves the
   inherited affinity says so in its reason;
6. on a hybrid CPU (:attr:`~numabind.topology.Topology.performance_cpus`) the mode keeps the allowed
   performance cores of the node or package, and the reason says so (explicit ``cpus`` are kept as given).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from .cpulist import format_cpulist, parse_cpulist
from .errors import PlanError
from .plan import MAX_WEIGHT, NODE_POLICIES, Plan, check_plan, core_groups
from .devices import Gpu
from .topology import LOCAL_DISTANCE, Topology

if TYPE_CHECKING:  # pragma: no cover
    from .types import Mode, NodePolicy, Strictness

log = logging.getLogger(__name__)

__all__ = [
    "MODES",
    "PCT_SKUS",
    "POLICIES",
    "PctSku",
    "PlanRow",
    "auto_gate",
    "bandwidth_weights",
    "pct_config",
    "pct_priority_cpus",
    "plan_for_gpu",
    "plan_for_gpus",
    "narrowed_to_affinity",
    "plan_table",
    "prefer_performance",
    "MODE_SUMMARIES",
    "THREAD_ORDERS",
    "thread_placement",
    "weights_from_bandwidth",
]

MODES: tuple[Mode, ...] = ("node", "socket", "exclusive", "core-complex", "pct")
#: Each mode in one line, for ``--help`` (docs/_include/modes.rst says the same at length; a test keeps them paired).
MODE_SUMMARIES: dict[Mode, str] = {
    "node": "every allowed CPU of the GPU's node, memory on that node (the default)",
    "socket": "every allowed CPU of the GPU's package (socket), memory on the package's nodes",
    "exclusive": "the node's physical cores split evenly among its GPUs, hyperthread siblings together",
    "core-complex": "one last-level-cache group of the node per GPU (an AMD CCX/CCD, a Kunpeng die)",
    "pct": "the node's priority cores (Granite Rapids with Priority Core Turbo), else the whole node",
}
#: Memory policies a strategy can produce; None leaves the policy alone.
POLICIES = (*NODE_POLICIES, None)
_UNKNOWN_DISTANCE = 255


@dataclass(frozen=True)
class PctSku:
    """Granite Rapids SKU facts for the Priority Core Turbo heuristic.

    ``highest_perf`` is the CPPC ``highest_perf`` cpu0 reports when PCT is on
    (the SKU's maximum PCT core frequency in 100 MHz units); ``stride`` is the
    number of logical CPUs per priority group (total threads / 8 priority
    cores): priority CPUs of a node are those with ``cpu % stride in (0, 1)``.
    """

    highest_perf: int
    stride: int


#: Known PCT-capable Xeon 6 (Granite Rapids) SKUs, from Intel's published
#: frequencies; 6776P was measured on a DGX B300, the others are not measured.
PCT_SKUS = {
    "6776P": PctSku(highest_perf=46, stride=16),   # 64C/128T, 4.6 GHz
    "6774P": PctSku(highest_perf=46, stride=16),   # 64C/128T, 4.6 GHz
    "6962P": PctSku(highest_perf=44, stride=18),   # 72C/144T, 4.4 GHz
}


def topology_or_discover(topology: Topology | None) -> Topology:
    """``topology``, or the discovered live machine when it is None (the one place that does this)."""
    if topology is None:
        from .topology import discover

        topology = discover()
    return topology


_topology = topology_or_discover


def _planned_on(topology: Topology | None, within_affinity: bool) -> Topology:
    """The machine a plan is made on: ``topology`` (or the live one), whose limit is its cpuset
    (``allowed_cpus``); with ``within_affinity``, narrowed to the affinity the process inherited (the explicit
    choice, :meth:`numabind.plan.Allowed.within_affinity`)."""
    topology = topology_or_discover(topology)
    return narrowed_to_affinity(topology) if within_affinity else topology


def narrowed_to_affinity(topology: Topology) -> Topology:
    """``topology`` with its allowed CPUs narrowed to the affinity the process inherited (``within_affinity``,
    ``--within-affinity``); a :class:`PlanError` when that affinity is unknown or outside the cpuset."""
    narrowed = topology.allowed.within_affinity()
    return topology.replace(allowed_cpus=narrowed.allowed_cpus, allowed_source=narrowed.cpus_source)


def _widen_fix(topology: Topology) -> str:
    """The fix for CPUs the limit refuses: widen the cpuset, or (when narrowed on request) drop within_affinity."""
    if "within the inherited affinity" in _allowed_source(topology):
        return "drop within_affinity (--within-affinity) to plan within the cpuset"
    return "widen the cpuset"


def _inherited(topology: Topology, chosen: frozenset[int], what: str) -> str | None:
    """The reason that says a plan leaves the affinity the parent left behind (None when it does not)."""
    affinity = getattr(topology, "affinity", None)
    if affinity is None or topology.allowed_cpus <= affinity or chosen <= affinity:
        return None
    return f"inherited CPUs {_fmt(affinity)} from the parent; binding {what} {_fmt(chosen)}"


def _fmt(ids: Iterable[int]) -> str:
    return format_cpulist(ids) if ids else "none"


def _distance(topology: Topology, a: int, b: int) -> int:
    node = topology.nodes.get(a)
    default = LOCAL_DISTANCE if a == b else _UNKNOWN_DISTANCE
    return node.distances.get(b, default) if node is not None else default


def _nearest(topology: Topology, origin: int, candidates: Iterable[int]) -> int:
    """The candidate nearest to ``origin`` (SLIT distance, then id); ``candidates`` is not empty."""
    return min(candidates, key=lambda n: (_distance(topology, origin, n), n))


def _allowed_source(topology: Topology) -> str:
    return getattr(topology, "allowed_source", "") or "the cpuset"


# ------------------------------------------------------------------- PCT
def pct_config(topology: Topology) -> tuple[PctSku | None, str]:
    """The PCT SKU entry if this machine passes both gates, else ``(None, why)``.

    Gates (fail closed): the CPU model name names a known SKU, and cpu0's CPPC
    ``highest_perf`` equals that SKU's value (PCT enabled in firmware).
    """
    model = topology.model_name
    if not model:
        return None, "the CPU model name is unknown (no 'model name' in /proc/cpuinfo)"
    hits = [sku for sku in PCT_SKUS if re.search(rf"(?<![0-9A-Za-z]){re.escape(sku)}(?![0-9A-Za-z])", model)]
    if not hits:
        return None, f"CPU {model!r} is not a known PCT-capable Granite Rapids SKU ({', '.join(PCT_SKUS)})"
    sku = PCT_SKUS[hits[0]]
    perf = topology.cppc_highest_perf
    if perf is None:
        return None, f"{hits[0]}: cpu0 acpi_cppc/highest_perf is unreadable"
    if perf != sku.highest_perf:
        return None, (
            f"{hits[0]}: cpu0 CPPC highest_perf is {perf}, not {sku.highest_perf}; PCT looks disabled"
        )
    return sku, f"{hits[0]} with CPPC highest_perf {perf}: priority CPUs are cpu % {sku.stride} in (0, 1)"


def pct_priority_cpus(topology: Topology, nodes: Iterable[int]) -> tuple[frozenset[int] | None, str]:
    """Allowed PCT priority CPUs of ``nodes`` (union), or ``(None, why)``."""
    sku, why = pct_config(topology)
    if sku is None:
        return None, why
    out: set[int] = set()
    for n in nodes:
        node = topology.nodes.get(n)
        if node is None:
            continue
        out.update(c for c in node.cpus if c % sku.stride in (0, 1))
    allowed = frozenset(out) & topology.allowed_cpus
    if not allowed:
        return None, f"{why}; but nodes {_fmt(nodes)} have no allowed priority CPUs"
    return allowed, why


# -------------------------------------------------------------- placement
@dataclass(frozen=True)
class _Placement:
    index: int
    gpu: Gpu | None
    node: int                      # the GPU's own node
    cpu_node: int
    mem_node: int
    reasons: tuple[str, ...]


def _find_gpu(topology: Topology, index: int) -> Gpu | None:
    for g in topology.gpus:
        if g.index == index:
            return g
    return None


def _gpu_label(index: int, gpu: Gpu | None) -> str:
    return f"GPU {index} ({gpu.vendor} {gpu.pci_address})" if gpu is not None else f"GPU {index}"


def _place(topology: Topology, index: int, nodes: Sequence[int] | None) -> _Placement:
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise PlanError(f"GPU index must be a non-negative int, got {index!r}")
    gpu = _find_gpu(topology, index)
    label = _gpu_label(index, gpu)
    reasons: list[str] = []
    if nodes is not None:
        if index >= len(nodes):
            raise PlanError(
                f"GPU index {index} is not covered by the per-GPU node list of {len(nodes)} entries "
                f"({list(nodes)}); give one node per visible GPU"
            )
        node = nodes[index]
        reasons.append(f"{label}: node {node} from the explicit per-GPU node list")
    else:
        if gpu is None:
            visible = ", ".join(str(g.index) for g in topology.gpus) or "none"
            raise PlanError(
                f"GPU {index} is not visible (visible GPUs: {visible}); check CUDA_VISIBLE_DEVICES / "
                f"HIP_VISIBLE_DEVICES or pass an explicit per-GPU node list"
            )
        if gpu.numa_node is None:
            raise PlanError(
                f"{label}: cannot place it, its NUMA node is unknown ({gpu.numa_note or 'firmware reports -1'}); "
                f"pass an explicit node for it"
            )
        node = gpu.numa_node
        how = {"numa_node": "its numa_node"}.get(gpu.numa_source, gpu.numa_note or gpu.numa_source)
        reasons.append(f"{label} is on node {node} ({how})")
    if not isinstance(node, int) or node not in topology.nodes:
        raise PlanError(f"{label}: node {node!r} does not exist (nodes: {_fmt(topology.nodes)})")

    cpu_node = node
    if not (topology.nodes[node].cpus & topology.allowed_cpus):
        usable = [n for n, nd in topology.nodes.items() if nd.cpus & topology.allowed_cpus]
        if not topology.nodes[node].cpus:
            if not usable:
                raise PlanError(
                    f"{label}: node {node} has no CPUs and no node has CPUs in the allowed set "
                    f"{_fmt(topology.allowed_cpus)} (from {_allowed_source(topology)}); {_widen_fix(topology)}"
                )
            cpu_node = _nearest(topology, node, usable)
            reasons.append(
                f"node {node} has no CPUs; CPUs from node {cpu_node}, the nearest node with CPUs "
                f"(distance {_distance(topology, node, cpu_node)})"
            )
        else:
            raise PlanError(
                f"{label}: node {node} has CPUs {_fmt(topology.nodes[node].cpus)} but none of them is in "
                f"the allowed CPUs {_fmt(topology.allowed_cpus)} (from {_allowed_source(topology)}); "
                f"{_widen_fix(topology)} or choose another GPU/node"
            )

    mem_node = cpu_node
    cn = topology.nodes[cpu_node]
    if not cn.has_memory:
        usable = [n for n, nd in topology.nodes.items() if nd.has_memory and n in topology.allowed_nodes]
        if not usable:
            raise PlanError(f"{label}: no allowed node has memory (allowed nodes {_fmt(topology.allowed_nodes)})")
        mem_node = _nearest(topology, cpu_node, usable)
        reasons.append(
            f"node {cpu_node} has no memory; memory on node {mem_node}, the nearest node with memory "
            f"(distance {_distance(topology, cpu_node, mem_node)})"
        )
    elif cpu_node not in topology.allowed_nodes:
        raise PlanError(
            f"{label}: memory node {cpu_node} is outside the allowed memory nodes "
            f"{_fmt(topology.allowed_nodes)} (from {_allowed_source(topology)})"
        )
    return _Placement(index, gpu, node, cpu_node, mem_node, tuple(reasons))


def _trim(topology: Topology, cpus: frozenset[int], what: str, reasons: list[str], label: str, node: int) -> frozenset[int]:
    allowed = cpus & topology.allowed_cpus
    if not allowed:
        raise PlanError(
            f"{label}: {what} {_fmt(cpus)} (node {node}) are all outside the allowed CPUs "
            f"{_fmt(topology.allowed_cpus)} (from {_allowed_source(topology)}); {_widen_fix(topology)}"
        )
    if allowed != cpus:
        reasons.append(
            f"{what} {_fmt(cpus)} trimmed to {_fmt(allowed)} by the allowed CPUs "
            f"{_fmt(topology.allowed_cpus)} (from {_allowed_source(topology)})"
        )
    return allowed


def _peers(topology: Topology, placement: _Placement, nodes: Sequence[int] | None) -> list[int]:
    """Visible GPU indices whose CPUs come from the same node, sorted."""
    indices = {g.index for g in topology.gpus}
    if nodes is not None:
        indices |= set(range(len(nodes)))
    peers = []
    for i in sorted(indices):
        if i == placement.index:
            peers.append(i)
            continue
        try:
            other = _place(topology, i, nodes)
        except PlanError:
            continue
        if other.cpu_node == placement.cpu_node:
            peers.append(i)
    return peers


def _cores(topology: Topology, cpus: frozenset[int]) -> list[frozenset[int]]:
    """``cpus`` grouped by physical core (hyperthread siblings together), by lowest CPU."""
    seen: dict[frozenset[int], frozenset[int]] = {}
    for c in cpus:
        info = topology.cpus.get(c)
        key = frozenset(info.siblings) if info is not None and info.siblings else frozenset({c})
        seen[key] = key & cpus
    return sorted(set(seen.values()), key=min)


def prefer_performance(topology: Topology, cpus: frozenset[int], what: str, reasons: list[str]) -> frozenset[int]:
    """The performance cores of ``cpus`` on a hybrid CPU (:attr:`Topology.performance_cpus`), said in
    ``reasons``; ``cpus`` itself when it holds cores of one kind only (or none of the performance kind)."""
    fast = cpus & topology.performance_cpus
    if not fast or fast == cpus:
        return cpus
    reasons.append(f"hybrid CPU: {what} keep their performance cores (CPUs {_fmt(fast)}), not the efficiency "
                   f"cores (CPUs {_fmt(cpus - fast)}; core kinds from {topology.kinds_source})")
    return fast


def _node_cpus(topology: Topology, p: _Placement, label: str, reasons: list[str]) -> frozenset[int]:
    node = topology.nodes[p.cpu_node]
    cpus = _trim(topology, node.cpus, f"node {p.cpu_node} CPUs", reasons, label, p.cpu_node)
    return prefer_performance(topology, cpus, f"node {p.cpu_node} CPUs", reasons)


# One function per placement mode: (topology, placement, label, per-GPU nodes, reasons) -> (cpus, memory nodes).
_ModeResult = tuple[frozenset[int], frozenset[int]]


def _mode_node(topology: Topology, p: _Placement, label: str, nodes: Sequence[int] | None, reasons: list[str]) -> _ModeResult:
    return _node_cpus(topology, p, label, reasons), frozenset({p.mem_node})


def _mode_socket(topology: Topology, p: _Placement, label: str, nodes: Sequence[int] | None, reasons: list[str]) -> _ModeResult:
    mem = frozenset({p.mem_node})
    node_cpus = topology.nodes[p.cpu_node].cpus
    packages = {topology.cpus[c].package for c in node_cpus if c in topology.cpus}
    packages.discard(-1)
    if len(packages) != 1:
        reasons.append(f"socket: the package of node {p.cpu_node} is unknown; using the node")
        return _node_cpus(topology, p, label, reasons), mem
    pkg = packages.pop()
    pkg_cpus = topology.package_cpus()[pkg]
    pkg_nodes = sorted(topology.package_nodes()[pkg])
    reasons.append(f"socket: package {pkg} spans nodes {_fmt(pkg_nodes)}")
    cpus = _trim(topology, pkg_cpus, f"package {pkg} CPUs", reasons, label, p.cpu_node)
    cpus = prefer_performance(topology, cpus, f"package {pkg} CPUs", reasons)
    with_memory = [n for n in pkg_nodes if topology.nodes[n].has_memory]
    mem_nodes = frozenset(n for n in with_memory if n in topology.allowed_nodes)
    if len(mem_nodes) < len(with_memory):
        reasons.append(
            f"memory nodes {_fmt(set(with_memory) - mem_nodes)} of package {pkg} are outside the allowed "
            f"memory nodes {_fmt(topology.allowed_nodes)}"
        )
    return cpus, (mem_nodes or mem)


def _mode_exclusive(topology: Topology, p: _Placement, label: str, nodes: Sequence[int] | None, reasons: list[str]) -> _ModeResult:
    cpus = _node_cpus(topology, p, label, reasons)
    cores = _cores(topology, cpus)
    peers = _peers(topology, p, nodes)
    if len(cores) < len(peers):
        raise PlanError(
            f"{label}: exclusive mode needs at least one core per GPU, but node {p.cpu_node} has "
            f"{len(cores)} allowed cores ({_fmt(cpus)}) for {len(peers)} GPUs ({_fmt(peers)})"
        )
    base, extra = divmod(len(cores), len(peers))
    pos = peers.index(p.index)
    start = pos * base + min(pos, extra)
    mine = cores[start:start + base + (1 if pos < extra else 0)]
    out = frozenset().union(*mine)
    reasons.append(
        f"exclusive: {len(cores)} cores of node {p.cpu_node} split among GPUs {_fmt(peers)}; "
        f"this GPU gets cores {start}-{start + len(mine) - 1} (CPUs {_fmt(out)})"
    )
    return out, frozenset({p.mem_node})


def _within_a_core(topology: Topology, group: frozenset[int]) -> bool:
    """Whether the CPU set ``group`` is no larger than one core (its CPUs are one core's threads)."""
    first = topology.cpus.get(min(group))
    return len(group) == 1 or (first is not None and group <= first.siblings)


def _mode_core_complex(topology: Topology, p: _Placement, label: str, nodes: Sequence[int] | None, reasons: list[str]) -> _ModeResult:
    mem = frozenset({p.mem_node})
    cpus = _node_cpus(topology, p, label, reasons)
    groups = sorted({g & cpus for g in topology.llc_groups() if g & cpus}, key=lambda g: (-len(g), min(g)))
    if not groups:
        reasons.append(f"core-complex: no cache information for node {p.cpu_node}; using the node")
        return cpus, mem
    level = max(c.level for c in topology.caches if c.type in ("Unified", "Data"))
    what = f"L{level} groups"
    if all(_within_a_core(topology, g) for g in groups):
        # The firmware describes no cache shared by cores (several arm64 PPTTs leave out the system-level
        # cache): a core's private cache is no complex. The kernel's clusters, else the node.
        clusters = sorted({g & cpus for g in topology.cluster_groups() if g & cpus}, key=lambda g: (-len(g), min(g)))
        why = (f"the last-level caches of node {p.cpu_node} (L{level}) are private to each core (the firmware "
               f"describes no shared cache)")
        if all(_within_a_core(topology, g) for g in clusters):
            log.warning("core-complex for %s: %s, nor a cluster larger than a core; using the node's CPUs %s",
                        label, why, _fmt(cpus))
            reasons.append(f"core-complex: {why}, nor a cluster larger than a core: using the node")
            return cpus, mem
        log.warning("core-complex for %s: %s; using the kernel's clusters of cores instead", label, why)
        reasons.append(f"core-complex: {why}; using the kernel's clusters of cores (cluster_cpus_list)")
        groups, what = clusters, "clusters"
    peers = _peers(topology, p, nodes)
    pos = peers.index(p.index)
    group = groups[pos % len(groups)]
    shared = " (shared: fewer groups than GPUs)" if len(groups) < len(peers) else ""
    reasons.append(
        f"core-complex: node {p.cpu_node} has {len(groups)} {what} for GPUs {_fmt(peers)}; "
        f"this GPU gets group {pos % len(groups)} (CPUs {_fmt(group)}){shared}"
    )
    return group, mem


def _mode_pct(topology: Topology, p: _Placement, label: str, nodes: Sequence[int] | None, reasons: list[str]) -> _ModeResult:
    prio, why = pct_priority_cpus(topology, [p.cpu_node])
    if prio is None:
        reasons.append(f"pct not engaged ({why}); using node {p.cpu_node}")
        return _node_cpus(topology, p, label, reasons), frozenset({p.mem_node})
    reasons.append(f"pct: {why}; node {p.cpu_node} priority CPUs {_fmt(prio)}")
    return prio, frozenset({p.mem_node})


_MODE_FUNCTIONS = {
    "node": _mode_node,
    "socket": _mode_socket,
    "exclusive": _mode_exclusive,
    "core-complex": _mode_core_complex,
    "pct": _mode_pct,
}
assert tuple(_MODE_FUNCTIONS) == MODES


def _mode_cpus(topology: Topology, p: _Placement, mode: str, nodes: Sequence[int] | None, reasons: list[str]) -> _ModeResult:
    """``(cpus, memory nodes)`` for one placed GPU in ``mode``."""
    fn = _MODE_FUNCTIONS.get(mode)
    if fn is None:
        raise PlanError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    return fn(topology, p, _gpu_label(p.index, p.gpu), nodes, reasons)


def _mem_plan(policy: NodePolicy | None, mem_nodes: frozenset[int],
              reasons: list[str]) -> tuple[NodePolicy | None, frozenset[int] | None]:
    if policy not in POLICIES:
        raise PlanError(f"policy {policy!r} is not one of bind, preferred, preferred-many, interleave (or None)")
    if policy is None:
        reasons.append("memory policy left unchanged")
        return None, None
    if policy == "preferred" and len(mem_nodes) > 1:
        reasons.append(f"preferred over {len(mem_nodes)} nodes becomes preferred-many")
        policy = "preferred-many"
    return policy, mem_nodes


_CPUS_SHAPE = "one CPU list per visible GPU, each a cpulist string or a set of ints, e.g. cpus=['0-3', '4-7']"


def _explicit_cpus(topology: Topology, cpus: object, index: int, label: str, reasons: list[str], node: int) -> frozenset[int]:
    if isinstance(cpus, (str, bytes, bytearray)) or not isinstance(cpus, Sequence):
        raise PlanError(f"cpus must be a sequence of {_CPUS_SHAPE}; got {type(cpus).__name__}: {cpus!r}"[:400])
    if index >= len(cpus):
        raise PlanError(
            f"GPU index {index} is not covered by the per-GPU CPU list of {len(cpus)} entries; "
            f"give one CPU list per visible GPU"
        )
    entry = cpus[index]
    if isinstance(entry, (int, bytes, bytearray)) or not isinstance(entry, (str, Iterable)):
        raise PlanError(f"cpus[{index}] is {type(entry).__name__} {entry!r}; cpus takes {_CPUS_SHAPE}"[:400])
    try:
        ids = parse_cpulist(entry, what=f"CPU list for GPU {index}") if isinstance(entry, str) else frozenset(entry)
    except TypeError:
        raise PlanError(f"cpus[{index}] holds unhashable items {entry!r}; cpus takes {_CPUS_SHAPE}"[:400]) from None
    if ids:
        ids = Plan(cpus=ids).cpus or frozenset()  # every id a non-negative int, or a PlanError naming it
    if not ids:
        raise PlanError(f"the CPU list for GPU {index} is empty")
    reasons.append(f"CPUs {_fmt(ids)} from the explicit per-GPU CPU list")
    return _trim(topology, frozenset(ids), "explicit CPUs", reasons, label, node)


def _check_identity(p: _Placement, nodes: Sequence[int] | None, strict: Strictness | None, reasons: list[str]) -> None:
    """A GPU whose identity is uncertain (see numabind.devices): said in the reasons, refused when strict."""
    gpu = p.gpu
    if nodes is not None or gpu is None or getattr(gpu, "identity", "certain") == "certain":
        return
    label = _gpu_label(p.index, gpu)
    note = getattr(gpu, "identity_note", "") or "its discovery sources disagree"
    if strict is None:
        from ._base import strict_from_env

        strict = strict_from_env() is True    # NUMABIND_STRICT=partial degrades: plans with the note
    if strict is True:
        raise PlanError(f"{label}: which board this index is, is uncertain: {note}; strict mode "
                        f"(NUMABIND_STRICT) does not plan on a guess")
    reasons.append(f"{label}: identity uncertain ({note})")


def _plan_one(topology: Topology, index: int, mode: Mode, policy: NodePolicy | None, nodes: Sequence[int] | None,
              cpus: Sequence[object] | None, migrate: bool,
              strict: Strictness | None = None) -> tuple[Plan, _Placement, tuple[str, ...]]:
    if mode not in MODES:
        raise PlanError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    p = _place(topology, index, nodes)
    reasons = list(p.reasons)
    _check_identity(p, nodes, strict, reasons)
    if cpus is not None:
        chosen = _explicit_cpus(topology, cpus, index, _gpu_label(index, p.gpu), reasons, p.cpu_node)
        mem_nodes = frozenset({p.mem_node})
    else:
        chosen, mem_nodes = _mode_cpus(topology, p, mode, nodes, reasons)
    said = _inherited(topology, chosen, f"node {p.cpu_node}'s CPUs" if mode == "node" and cpus is None else "CPUs")
    if said:
        reasons.append(said)
    mem_policy, mem = _mem_plan(policy, mem_nodes, reasons)
    if mem is not None:
        reasons.append(
            f"memory {mem_policy} {_fmt(mem)} (distance {max(_distance(topology, p.node, n) for n in mem)} "
            f"from node {p.node})"
        )
    plan = Plan(cpus=chosen, mem_policy=mem_policy, mem_nodes=mem, migrate=migrate and mem is not None,
                reason=f"{mode}: " + "; ".join(reasons))
    return plan, p, tuple(reasons)


# ------------------------------------------------------------- public API
def plan_for_gpu(gpu_index: int, mode: Mode = "node", topology: Topology | None = None, *,
                 policy: NodePolicy | None = "bind", nodes: Sequence[int] | None = None,
                 cpus: Sequence[object] | None = None, migrate: bool = False, strict: Strictness | None = None,
                 within_affinity: bool = False) -> Plan:
    """The plan for a worker that drives visible GPU ``gpu_index``.

    ``mode`` is one of :data:`MODES`; ``policy`` the memory policy (``bind``,
    ``preferred`` — becoming ``preferred-many`` over several nodes —,
    ``preferred-many``, ``interleave``, or None to leave memory alone).
    ``nodes`` / ``cpus`` are explicit per-GPU lists indexed by visible GPU
    index (like vLLM's ``--numa-bind-nodes`` / ``--numa-bind-cpus``): a node
    id per GPU, and a cpulist string or id set per GPU; ``cpus`` overrides the
    mode's CPU choice. Raises :class:`PlanError` when the GPU cannot be placed.
    A GPU whose identity is uncertain (``gpu.identity``) is planned with that
    said in the plan's reason, or refused when ``strict`` is True (default
    ``NUMABIND_STRICT``; ``"partial"`` plans with the note); explicit ``nodes``
    do not depend on it.

    The limit is the cpuset (``topology.allowed_cpus``), never the affinity the process inherited: a
    worker whose parent was bound to node 0 is planned on its GPU's node all the same, and the plan's
    reason says so ("inherited CPUs 0-1 from the parent; binding node 1's CPUs 2-3").
    ``within_affinity=True`` plans within the inherited affinity instead (the explicit choice).
    """
    topology = _planned_on(topology, within_affinity)
    plan, _, _ = _plan_one(topology, gpu_index, mode, policy, nodes, cpus, migrate, strict)
    log.debug("plan for GPU %d: %s (%s)", gpu_index, plan.describe(), plan.reason)
    return plan


def plan_for_gpus(indices: Iterable[int], topology: Topology | None = None, *, mode: Mode = "node",
                  policy: NodePolicy | None = "bind", nodes: Sequence[int] | None = None,
                  cpus: Sequence[object] | None = None, migrate: bool = False, strict: Strictness | None = None,
                  within_affinity: bool = False) -> Plan:
    """The plan for a process driving a shard of GPUs (EngineCore, DP rank, torchrun agent).

    CPUs are the allowed CPUs of the members' CPU nodes (for ``pct``, the
    members' priority CPUs), united with each member's own CPUs, so the plan
    is always a superset of every member's plan and members spawned from it
    can narrow their affinity. Memory is the union of the members' nodes. ``within_affinity``: as
    :func:`plan_for_gpu`.
    """
    topology = _planned_on(topology, within_affinity)
    indices = list(indices)
    if not indices:
        raise PlanError("a shard needs at least one GPU index")
    members = [_plan_one(topology, i, mode, policy, nodes, cpus, migrate, strict) for i in indices]
    cpu_nodes = sorted({p.cpu_node for _, p, _ in members})
    out = frozenset().union(*((plan.cpus or frozenset()) for plan, _, _ in members))
    if mode != "pct" or cpus is not None:
        for n in cpu_nodes:
            out |= topology.nodes[n].cpus & topology.allowed_cpus
    mem_nodes = frozenset().union(*((plan.mem_nodes or frozenset()) for plan, _, _ in members))
    reasons = [f"shard of GPUs {_fmt(indices)} on nodes {_fmt(cpu_nodes)}"]
    mem_policy, mem = _mem_plan(policy, mem_nodes, reasons) if policy is not None else (None, None)
    if mem is not None:
        reasons.append(f"memory {mem_policy} {_fmt(mem)}")
    reasons.append("members: " + " | ".join(f"GPU {p.index}: {plan.describe()}" for plan, p, _ in members))
    plan = Plan(cpus=out, mem_policy=mem_policy, mem_nodes=mem, migrate=migrate and mem is not None,
                reason=f"{mode}: " + "; ".join(reasons))
    log.debug("plan for GPUs %s: %s", _fmt(indices), plan.describe())
    return plan


@dataclass(frozen=True)
class PlanRow:
    """One line of ``numabind plan``: a GPU, where it is, and its plan or why there is none."""

    gpu: int
    pci_address: str | None
    vendor: str | None
    numa_node: int | None
    numa_source: str | None
    cpu_node: int | None
    mem_nodes: frozenset[int] | None
    distance: int | None            # SLIT distance from the GPU's node to its farthest memory node
    node_cpus: frozenset[int] | None
    trimmed_cpus: frozenset[int] | None   # CPUs of the CPU node outside the allowed set
    plan: Plan | None
    error: str | None
    reasons: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        def ids(v: Iterable[int] | None) -> str | None:
            return None if v is None else format_cpulist(v)

        return {
            "gpu": self.gpu,
            "pci_address": self.pci_address,
            "vendor": self.vendor,
            "numa_node": self.numa_node,
            "numa_source": self.numa_source,
            "cpu_node": self.cpu_node,
            "mem_nodes": ids(self.mem_nodes),
            "distance": self.distance,
            "node_cpus": ids(self.node_cpus),
            "trimmed_cpus": ids(self.trimmed_cpus),
            "plan": None if self.plan is None else {
                "cpus": ids(self.plan.cpus),
                "mem_policy": self.plan.mem_policy,
                "mem_nodes": ids(self.plan.mem_nodes),
                "numactl": self.plan.to_numactl_args(),
            },
            "error": self.error,
            "reasons": list(self.reasons),
        }


def plan_table(topology: Topology | None = None, mode: Mode = "node", policy: NodePolicy | None = "bind", *,
               gpus: Iterable[int] | None = None, nodes: Sequence[int] | None = None,
               cpus: Sequence[object] | None = None, strict: Strictness | None = None,
               within_affinity: bool = False) -> tuple[PlanRow, ...]:
    """One :class:`PlanRow` per GPU (``gpus``, default every visible GPU); never raises PlanError per GPU.

    A GPU that cannot be placed gets a row with ``plan=None`` and ``error``
    set. An unknown ``mode`` or ``policy`` still raises, since no row can
    help with that.
    """
    if mode not in MODES:
        raise PlanError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    if policy not in POLICIES:
        raise PlanError(f"policy {policy!r} is not one of bind, preferred, preferred-many, interleave (or None)")
    topology = _planned_on(topology, within_affinity)
    wanted = sorted({g.index for g in topology.gpus}) if gpus is None else list(gpus)
    rows = []
    for i in wanted:
        gpu = _find_gpu(topology, i)
        base: dict[str, Any] = dict(gpu=i, pci_address=gpu.pci_address if gpu else None, vendor=gpu.vendor if gpu else None,
                    numa_node=gpu.numa_node if gpu else None, numa_source=gpu.numa_source if gpu else None)
        try:
            plan, p, why = _plan_one(topology, i, mode, policy, nodes, cpus, False, strict)
        except PlanError as exc:
            rows.append(PlanRow(**base, cpu_node=None, mem_nodes=None, distance=None, node_cpus=None,
                                trimmed_cpus=None, plan=None, error=str(exc), reasons=()))
            continue
        node_cpus = topology.nodes[p.cpu_node].cpus
        mem = plan.mem_nodes or frozenset({p.mem_node})
        rows.append(PlanRow(
            **base,
            cpu_node=p.cpu_node,
            mem_nodes=plan.mem_nodes,
            distance=max(_distance(topology, p.node, n) for n in mem),
            node_cpus=node_cpus,
            trimmed_cpus=node_cpus - topology.allowed_cpus,
            plan=plan,
            error=None,
            reasons=why,
        ))
    return tuple(rows)


# -------------------------------------------------------- automatic gate
def auto_gate(topology: Topology, *, affinity: Iterable[int] | None = None, mem_policy: str | None = None,
              gpus: Iterable[int] | None = None, mode: Mode = "node", unbound_cpus: Iterable[int] | None = None,
              live: Any = None) -> tuple[bool, str]:
    """The pure automatic-binding gate (see :func:`numabind.auto.auto_plan_available`); never raises.

    ``live`` is what the kernel says about the process (``.cpus``, ``.mem_policy``)
    when ``topology`` is the live machine, read by the caller; None when unreadable.
    """
    try:
        cpu_nodes = sorted(n for n, nd in topology.nodes.items() if nd.cpus)
        if len(cpu_nodes) < 2:
            return False, f"only {len(cpu_nodes)} NUMA node with CPUs; nothing to choose"
        indices = sorted({g.index for g in topology.gpus}) if gpus is None else sorted(set(gpus))
        if not indices:
            return False, "no visible GPU"
        is_live = getattr(topology, "root", None) == "/"
        current = live
        if affinity is None:
            dumped = topology.affinity if topology.affinity is not None else topology.allowed_cpus
            affinity = dumped if not is_live else (current.cpus if current is not None else None)
            if affinity is None:
                return False, "the process CPU affinity is unreadable"
        affinity = frozenset(affinity)
        reference = topology.online_cpus if unbound_cpus is None else frozenset(unbound_cpus)
        if not reference <= affinity:
            return False, (
                f"CPU affinity {_fmt(affinity)} does not cover {_fmt(reference)}: the launcher already bound "
                f"this process; pass explicit nodes to override"
            )
        if mem_policy is None:
            mem_policy = "default" if not is_live else getattr(current, "mem_policy", None)
            if mem_policy is None:
                return False, "the memory policy is unreadable (in a container, try --cap-add SYS_NICE)"
        if mem_policy != "default":
            return False, f"memory policy is already {mem_policy!r}; pass explicit nodes to override"
        placed = []
        for i in indices:
            try:
                # automatic binding never guesses which board a GPU is: an uncertain one stops the gate
                _, p, _ = _plan_one(topology, i, mode, "preferred", None, None, False, True)
            except PlanError as exc:
                return False, f"GPU {i} cannot be placed: {exc}"
            placed.append(f"GPU {i}->node {p.cpu_node}")
        return True, f"{len(cpu_nodes)} nodes with CPUs, process unbound; " + ", ".join(placed)
    except Exception as exc:  # never raise from the gate
        log.debug("automatic binding gate failed", exc_info=True)
        return False, f"gate failed: {exc}"


# ----------------------------------------------------------------------------- weighted interleave
def weights_from_bandwidth(bandwidths: Mapping[int, float], *, tolerance: float = 0.02,
                           max_weight: int = MAX_WEIGHT) -> dict[int, int]:
    """Weighted-interleave weights proportional to each node's memory bandwidth (pure).

    ``bandwidths`` maps node -> bandwidth in any one unit (HMAT's ``read_bandwidth`` is MB/s). The
    weights are the smallest whole numbers whose ratios are within ``tolerance`` (relative) of the
    bandwidths' ratios, with no common factor, each from 1 to ``max_weight`` (the kernel's 255);
    when no such numbers exist, the closest ones that fit. ``{0: 30000, 2: 10000}`` gives
    ``{0: 3, 2: 1}``: three pages on node 0 for every page on node 2.
    """
    if not isinstance(bandwidths, Mapping) or not bandwidths:
        raise PlanError("weights_from_bandwidth needs a non-empty mapping node -> bandwidth")
    for node, bw in bandwidths.items():
        if not isinstance(node, int) or isinstance(node, bool) or node < 0:
            raise PlanError(f"weights_from_bandwidth: node {node!r} is not a non-negative int")
        if isinstance(bw, bool) or not isinstance(bw, (int, float)) or not math.isfinite(bw) or bw <= 0:
            raise PlanError(f"weights_from_bandwidth: node {node} has bandwidth {bw!r}; give a positive number "
                            f"(a node without bandwidth figures cannot be weighted by them)")
    if not (isinstance(max_weight, int) and 1 <= max_weight <= MAX_WEIGHT):
        raise PlanError(f"max_weight must be an int from 1 to {MAX_WEIGHT}, got {max_weight!r}")
    lowest = min(bandwidths.values())
    ratios = {n: bw / lowest for n, bw in bandwidths.items()}
    top = max(ratios.values())
    best: dict[int, int] | None = None
    for scale in range(1, max_weight + 1):
        if round(top * scale) > max_weight:
            break
        weights = {n: max(1, round(r * scale)) for n, r in ratios.items()}
        best = weights
        if all(abs(weights[n] - r * scale) <= tolerance * r * scale for n, r in ratios.items()):
            break
    if best is None:        # the spread is wider than 1:max_weight: the largest node gets max_weight
        best = {n: max(1, min(max_weight, round(r * max_weight / top))) for n, r in ratios.items()}
    common = 0
    for w in best.values():
        common = math.gcd(common, w)
    return {n: w // common for n, w in sorted(best.items())}


def bandwidth_weights(nodes: Iterable[int], topology: Topology | None = None, *, tolerance: float = 0.02) -> dict[int, int]:
    """Weights for interleaving over ``nodes`` by their memory bandwidth, from the firmware's HMAT figures
    (``nodeN/access0/initiators/read_bandwidth``, as :attr:`numabind.topology.Node.access` holds them):
    "interleave by bandwidth" without knowing the numbers. A node without the figures (no HMAT, as on
    most machines without CXL memory) is a :class:`PlanError` naming it.
    """
    topology = topology_or_discover(topology)
    wanted = sorted(set(nodes))
    if not wanted:
        raise PlanError("bandwidth_weights needs at least one node")
    bandwidths: dict[int, float] = {}
    missing = []
    for n in wanted:
        node = topology.nodes.get(n)
        if node is None:
            raise PlanError(f"bandwidth_weights: node {n} does not exist (nodes: {_fmt(topology.nodes)})")
        access = node.access
        if access is None or not access.read_bandwidth:
            missing.append(n)
        else:
            bandwidths[n] = access.read_bandwidth
    if missing:
        raise PlanError(f"no bandwidth figures for node(s) {_fmt(missing)} under {topology.root} "
                        f"(sys/devices/system/node/nodeN/access0/initiators/read_bandwidth: the firmware has no HMAT "
                        f"table for them); give the weights by hand, e.g. weights={{{wanted[0]}: 3, ...}}")
    weights = weights_from_bandwidth(bandwidths, tolerance=tolerance)
    log.debug("interleave weights from read bandwidth %s: %s", bandwidths, weights)
    return weights


# ------------------------------------------------------------- one thread per core
#: How :func:`thread_placement` orders a plan's cores: ``compact`` fills a node's cores in order before the
#: next node's (``KMP_AFFINITY=compact``, ``OMP_PROC_BIND=close``); ``scatter`` takes one core of each node in
#: turn, and inside a node one of each last-level cache group in turn (``scatter``, ``OMP_PROC_BIND=spread``).
THREAD_ORDERS = ("compact", "scatter")


_Item = TypeVar("_Item")


def _round_robin(lists: Sequence[Sequence[_Item]]) -> list[_Item]:
    """The first item of each list, then the second of each, and so on."""
    out: list[_Item] = []
    for i in range(max((len(x) for x in lists), default=0)):
        out += [x[i] for x in lists if i < len(x)]
    return out


def thread_placement(plan: Plan, threads: int, topology: Topology, *, order: str = "compact",
                     strict: bool = False) -> tuple[frozenset[int], ...]:
    """The CPUs of each of ``threads`` threads, one thread per core of ``plan`` (pure: what
    :func:`numabind.pin_threads` applies).

    The plan's CPUs are taken as ``topology``'s whole cores (hyperthread siblings together,
    :func:`numabind.plan.core_groups`), ordered by ``order`` (:data:`THREAD_ORDERS`). With no more threads
    than cores, thread ``i`` gets the ``i``-th core: all of its CPUs in the plan, none shared with another
    thread. With more threads than cores, ``strict`` raises :class:`PlanError`; otherwise each thread gets one
    CPU, every core's first hyperthread before any core's second, wrapping around to the first CPU once every
    CPU of the plan has a thread.
    """
    check_plan(plan, "thread_placement")
    if order not in THREAD_ORDERS:
        raise PlanError(f"order {order!r} is not one of {', '.join(THREAD_ORDERS)}")
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        raise PlanError(f"threads must be a count of threads (an int >= 0), got {threads!r}"[:200])
    if plan.cpus is None:
        raise PlanError("pinning threads needs a plan with CPUs; this one leaves them as they are (cpus=None)")
    grouped = core_groups(plan.cpus, topology)
    if order == "compact":
        cores = [core for _, core in grouped]
    else:
        llc_of = {cpu: i for i, group in enumerate(topology.llc_groups()) for cpu in group}
        by_node: dict[int | None, dict[int, list[frozenset[int]]]] = {}
        for node, core in grouped:
            by_node.setdefault(node, {}).setdefault(llc_of.get(min(core), -1), []).append(core)
        cores = _round_robin([_round_robin(list(groups.values())) for groups in by_node.values()])
    if threads <= len(cores):
        return tuple(cores[:threads])
    if strict:
        raise PlanError(f"{threads} threads for the {len(cores)} cores of the plan (CPUs {_fmt(plan.cpus)}): one "
                        f"thread per core takes at most {len(cores)}; pin fewer threads, plan more cores, or "
                        f"pass strict=False to share cores (one CPU per thread, wrapping around)")
    slots = _round_robin([sorted(core) for core in cores])
    return tuple(frozenset({slots[i % len(slots)]}) for i in range(threads))
