"""Placement of GPU workers (pure): the CPUs and memory nodes of the worker of one GPU, or of a shard of GPUs, by
the rules the package's docstring (:mod:`numabind.strategies`) lists; the modes are in ``docs/_include/modes.rst``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..cpulist import parse_cpulist
from ..errors import PlanError
from ..plan import NODE_POLICIES, Plan
from .common import (allowed_source, distance, fmt, inherited, nearest, planned_on, prefer_performance, whole_cores,
                     widen_fix)

if TYPE_CHECKING:  # pragma: no cover
    from ..devices import Gpu
    from ..topology import Topology
    from ..types import Mode, NodePolicy, Strictness

log = logging.getLogger(__name__)

__all__ = ["MODES", "MODE_SUMMARIES", "PCT_SKUS", "POLICIES", "PctSku", "pct_config", "pct_priority_cpus",
           "plan_for_gpu", "plan_for_gpus"]

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


@dataclass(frozen=True)
class PctSku:
    """Granite Rapids SKU facts for Priority Core Turbo: ``highest_perf``, cpu0's CPPC ``highest_perf`` when PCT is
    on (100 MHz units); ``stride``, logical CPUs per priority group (priority CPUs: ``cpu % stride in (0, 1)``)."""

    highest_perf: int
    stride: int


#: Known PCT-capable Xeon 6 SKUs, from Intel's published frequencies (6776P measured on a DGX B300).
PCT_SKUS = {
    "6776P": PctSku(highest_perf=46, stride=16),   # 64C/128T, 4.6 GHz
    "6774P": PctSku(highest_perf=46, stride=16),   # 64C/128T, 4.6 GHz
    "6962P": PctSku(highest_perf=44, stride=18),   # 72C/144T, 4.4 GHz
}


# ------------------------------------------------------------------- PCT
def pct_config(topology: Topology) -> tuple[PctSku | None, str]:
    """``(the PCT SKU entry, why)`` when the model and cpu0's CPPC ``highest_perf`` match one, else ``(None, why)``."""
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
        return None, f"{hits[0]}: cpu0 CPPC highest_perf is {perf}, not {sku.highest_perf}; PCT looks disabled"
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
        return None, f"{why}; but nodes {fmt(nodes)} have no allowed priority CPUs"
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


def _gpu_label(index: int, gpu: Gpu | None) -> str:
    return f"GPU {index} ({gpu.vendor} {gpu.pci_address})" if gpu is not None else f"GPU {index}"


def _place(topology: Topology, index: int, nodes: Sequence[int] | None) -> _Placement:
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise PlanError(f"GPU index must be a non-negative int, got {index!r}")
    gpu = next((g for g in topology.gpus if g.index == index), None)
    label = _gpu_label(index, gpu)
    reasons: list[str] = []
    if nodes is not None:
        if index >= len(nodes):
            raise PlanError(f"GPU index {index} is not covered by the per-GPU node list of {len(nodes)} entries "
                            f"({list(nodes)}); give one node per visible GPU")
        node = nodes[index]
        reasons.append(f"{label}: node {node} from the explicit per-GPU node list")
    else:
        if gpu is None:
            visible = ", ".join(str(g.index) for g in topology.gpus) or "none"
            raise PlanError(f"GPU {index} is not visible (visible GPUs: {visible}); check CUDA_VISIBLE_DEVICES / "
                            f"HIP_VISIBLE_DEVICES or pass an explicit per-GPU node list")
        if gpu.numa_node is None:
            raise PlanError(
                f"{label}: cannot place it, its NUMA node is unknown ({gpu.numa_note or 'firmware reports -1'}); "
                f"pass an explicit node for it"
            )
        node = gpu.numa_node
        how = {"numa_node": "its numa_node"}.get(gpu.numa_source, gpu.numa_note or gpu.numa_source)
        reasons.append(f"{label} is on node {node} ({how})")
    if not isinstance(node, int) or node not in topology.nodes:
        raise PlanError(f"{label}: node {node!r} does not exist (nodes: {fmt(topology.nodes)})")

    cpu_node = node
    if not (topology.nodes[node].cpus & topology.allowed_cpus):
        usable = [n for n, nd in topology.nodes.items() if nd.cpus & topology.allowed_cpus]
        if not topology.nodes[node].cpus:
            if not usable:
                raise PlanError(f"{label}: node {node} has no CPUs and no node has CPUs in the allowed set "
                                f"{fmt(topology.allowed_cpus)} (from {allowed_source(topology)}); "
                                f"{widen_fix(topology)}")
            cpu_node = nearest(topology, node, usable)
            reasons.append(f"node {node} has no CPUs; CPUs from node {cpu_node}, the nearest node with CPUs "
                           f"(distance {distance(topology, node, cpu_node)})")
        else:
            raise PlanError(f"{label}: node {node} has CPUs {fmt(topology.nodes[node].cpus)} but none of them is in "
                            f"the allowed CPUs {fmt(topology.allowed_cpus)} (from {allowed_source(topology)}); "
                            f"{widen_fix(topology)} or choose another GPU/node")

    mem_node = cpu_node
    cn = topology.nodes[cpu_node]
    if not cn.has_memory:
        usable = [n for n, nd in topology.nodes.items() if nd.has_memory and n in topology.allowed_nodes]
        if not usable:
            raise PlanError(f"{label}: no allowed node has memory (allowed nodes {fmt(topology.allowed_nodes)})")
        mem_node = nearest(topology, cpu_node, usable)
        reasons.append(f"node {cpu_node} has no memory; memory on node {mem_node}, the nearest node with memory "
                       f"(distance {distance(topology, cpu_node, mem_node)})")
    elif cpu_node not in topology.allowed_nodes:
        raise PlanError(f"{label}: memory node {cpu_node} is outside the allowed memory nodes "
                        f"{fmt(topology.allowed_nodes)} (from {allowed_source(topology)})")
    return _Placement(index, gpu, node, cpu_node, mem_node, tuple(reasons))


def _trim(topology: Topology, cpus: frozenset[int], what: str, reasons: list[str], label: str, node: int) -> frozenset[int]:
    allowed = cpus & topology.allowed_cpus
    if not allowed:
        raise PlanError(f"{label}: {what} {fmt(cpus)} (node {node}) are all outside the allowed CPUs "
                        f"{fmt(topology.allowed_cpus)} (from {allowed_source(topology)}); {widen_fix(topology)}")
    if allowed != cpus:
        reasons.append(f"{what} {fmt(cpus)} trimmed to {fmt(allowed)} by the allowed CPUs "
                       f"{fmt(topology.allowed_cpus)} (from {allowed_source(topology)})")
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
    reasons.append(f"socket: package {pkg} spans nodes {fmt(pkg_nodes)}")
    cpus = _trim(topology, pkg_cpus, f"package {pkg} CPUs", reasons, label, p.cpu_node)
    cpus = prefer_performance(topology, cpus, f"package {pkg} CPUs", reasons)
    with_memory = [n for n in pkg_nodes if topology.nodes[n].has_memory]
    mem_nodes = frozenset(n for n in with_memory if n in topology.allowed_nodes)
    if len(mem_nodes) < len(with_memory):
        reasons.append(f"memory nodes {fmt(set(with_memory) - mem_nodes)} of package {pkg} are outside the allowed "
                       f"memory nodes {fmt(topology.allowed_nodes)}")
    return cpus, (mem_nodes or mem)


def _mode_exclusive(topology: Topology, p: _Placement, label: str, nodes: Sequence[int] | None, reasons: list[str]) -> _ModeResult:
    cpus = _node_cpus(topology, p, label, reasons)
    cores = whole_cores(topology, cpus)
    peers = _peers(topology, p, nodes)
    if len(cores) < len(peers):
        raise PlanError(f"{label}: exclusive mode needs at least one core per GPU, but node {p.cpu_node} has "
                        f"{len(cores)} allowed cores ({fmt(cpus)}) for {len(peers)} GPUs ({fmt(peers)})")
    base, extra = divmod(len(cores), len(peers))
    pos = peers.index(p.index)
    start = pos * base + min(pos, extra)
    mine = cores[start:start + base + (1 if pos < extra else 0)]
    out = frozenset().union(*mine)
    reasons.append(f"exclusive: {len(cores)} cores of node {p.cpu_node} split among GPUs {fmt(peers)}; "
                   f"this GPU gets cores {start}-{start + len(mine) - 1} (CPUs {fmt(out)})")
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
                        label, why, fmt(cpus))
            reasons.append(f"core-complex: {why}, nor a cluster larger than a core: using the node")
            return cpus, mem
        log.warning("core-complex for %s: %s; using the kernel's clusters of cores instead", label, why)
        reasons.append(f"core-complex: {why}; using the kernel's clusters of cores (cluster_cpus_list)")
        groups, what = clusters, "clusters"
    peers = _peers(topology, p, nodes)
    pos = peers.index(p.index)
    group = groups[pos % len(groups)]
    shared = " (shared: fewer groups than GPUs)" if len(groups) < len(peers) else ""
    reasons.append(f"core-complex: node {p.cpu_node} has {len(groups)} {what} for GPUs {fmt(peers)}; "
                   f"this GPU gets group {pos % len(groups)} (CPUs {fmt(group)}){shared}")
    return group, mem


def _mode_pct(topology: Topology, p: _Placement, label: str, nodes: Sequence[int] | None, reasons: list[str]) -> _ModeResult:
    prio, why = pct_priority_cpus(topology, [p.cpu_node])
    if prio is None:
        reasons.append(f"pct not engaged ({why}); using node {p.cpu_node}")
        return _node_cpus(topology, p, label, reasons), frozenset({p.mem_node})
    reasons.append(f"pct: {why}; node {p.cpu_node} priority CPUs {fmt(prio)}")
    return prio, frozenset({p.mem_node})


_MODE_FUNCTIONS = {
    "node": _mode_node,
    "socket": _mode_socket,
    "exclusive": _mode_exclusive,
    "core-complex": _mode_core_complex,
    "pct": _mode_pct,
}
assert tuple(_MODE_FUNCTIONS) == MODES


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
        raise PlanError(f"GPU index {index} is not covered by the per-GPU CPU list of {len(cpus)} entries; "
                        f"give one CPU list per visible GPU")
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
    reasons.append(f"CPUs {fmt(ids)} from the explicit per-GPU CPU list")
    return _trim(topology, frozenset(ids), "explicit CPUs", reasons, label, node)


def _check_identity(p: _Placement, nodes: Sequence[int] | None, strict: Strictness | None, reasons: list[str]) -> None:
    """A GPU whose identity is uncertain (see numabind.devices): said in the reasons, refused when strict."""
    gpu = p.gpu
    if nodes is not None or gpu is None or getattr(gpu, "identity", "certain") == "certain":
        return
    label = _gpu_label(p.index, gpu)
    note = getattr(gpu, "identity_note", "") or "its discovery sources disagree"
    if strict is None:
        from .._base import strict_from_env

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
        chosen, mem_nodes = _MODE_FUNCTIONS[mode](topology, p, _gpu_label(index, p.gpu), nodes, reasons)
    said = inherited(topology, chosen, f"node {p.cpu_node}'s CPUs" if mode == "node" and cpus is None else "CPUs")
    if said:
        reasons.append(said)
    mem_policy, mem = _mem_plan(policy, mem_nodes, reasons)
    if mem is not None:
        reasons.append(f"memory {mem_policy} {fmt(mem)} (distance {max(distance(topology, p.node, n) for n in mem)} "
                       f"from node {p.node})")
    plan = Plan(cpus=chosen, mem_policy=mem_policy, mem_nodes=mem, migrate=migrate and mem is not None,
                reason=f"{mode}: " + "; ".join(reasons))
    return plan, p, tuple(reasons)


# ------------------------------------------------------------- public API
def plan_for_gpu(gpu_index: int, mode: Mode = "node", topology: Topology | None = None, *,
                 policy: NodePolicy | None = "bind", nodes: Sequence[int] | None = None,
                 cpus: Sequence[object] | None = None, migrate: bool = False, strict: Strictness | None = None,
                 within_affinity: bool = False) -> Plan:
    """The plan for a worker that drives visible GPU ``gpu_index``.

    ``mode`` is one of :data:`MODES`; ``policy`` the memory policy (``preferred`` over several nodes becomes
    ``preferred-many``; None leaves memory alone). ``nodes`` / ``cpus`` are explicit per-GPU lists indexed by
    visible GPU (a node id, a cpulist or id set), as vLLM's ``--numa-bind-nodes`` / ``--numa-bind-cpus``.
    A GPU whose identity is uncertain is refused when ``strict`` is True (default ``NUMABIND_STRICT``), else
    planned with a note. The limit is the cpuset, not the inherited affinity (the reason says when the plan
    leaves it), unless ``within_affinity=True``. Raises :class:`PlanError` when the GPU cannot be placed.
    """
    topology = planned_on(topology, within_affinity)
    plan, _, _ = _plan_one(topology, gpu_index, mode, policy, nodes, cpus, migrate, strict)
    log.debug("plan for GPU %d: %s (%s)", gpu_index, plan.describe(), plan.reason)
    return plan


def plan_for_gpus(indices: Iterable[int], topology: Topology | None = None, *, mode: Mode = "node",
                  policy: NodePolicy | None = "bind", nodes: Sequence[int] | None = None,
                  cpus: Sequence[object] | None = None, migrate: bool = False, strict: Strictness | None = None,
                  within_affinity: bool = False) -> Plan:
    """The plan for a process driving a shard of GPUs (EngineCore, DP rank, torchrun agent): the allowed CPUs of
    the members' CPU nodes (``pct``: their priority CPUs) and every member's own, so it is a superset of each
    member's plan; memory on the union of their nodes. Arguments as :func:`plan_for_gpu`.
    """
    topology = planned_on(topology, within_affinity)
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
    reasons = [f"shard of GPUs {fmt(indices)} on nodes {fmt(cpu_nodes)}"]
    mem_policy, mem = _mem_plan(policy, mem_nodes, reasons) if policy is not None else (None, None)
    if mem is not None:
        reasons.append(f"memory {mem_policy} {fmt(mem)}")
    reasons.append("members: " + " | ".join(f"GPU {p.index}: {plan.describe()}" for plan, p, _ in members))
    plan = Plan(cpus=out, mem_policy=mem_policy, mem_nodes=mem, migrate=migrate and mem is not None,
                reason=f"{mode}: " + "; ".join(reasons))
    log.debug("plan for GPUs %s: %s", fmt(indices), plan.describe())
    return plan

