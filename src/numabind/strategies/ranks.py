"""Planning for the processes a launcher started, after :mod:`numabind.rank` mapped a rank to its GPU or CPU share
(pure but for listing the machine's GPUs and NICs). The rules in words: ``docs/howto/ranks.rst``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from .._base import excerpt
from .._util import FrozenMap
from ..cpulist import format_cpulist
from ..errors import NumabindError, PlanError
from ..plan import Allowed, Plan
from .common import nodes_of, prefer_performance, whole_cores
from .gpus import plan_for_gpu, plan_for_gpus

if TYPE_CHECKING:  # pragma: no cover
    from ..types import Mode, NodePolicy, Strictness

log = logging.getLogger(__name__)

__all__ = ["RankLimit", "RankPlacement", "SHARED_MODES", "UNBIND_FLAGS", "plan_cpu_rank", "plan_gpu_share", "plan_rank",
           "rank_limit"]

#: Modes whose share depends on the other ranks that use the same node.
SHARED_MODES = ("exclusive", "core-complex")
#: The launcher flags that leave a rank's CPUs to numabind (named when ``--within-affinity`` refuses a plan).
UNBIND_FLAGS = "srun --cpu-bind=none, mpirun --bind-to none"


class RankLimit(NamedTuple):
    """What :func:`rank_limit` says (a tuple: ``cpus, source, launcher_cpus, rule``)."""

    cpus: frozenset[int]            # the CPUs a rank's plan may use
    source: str                     # where that limit comes from
    launcher_cpus: frozenset[int]   # the affinity the launcher set, within the cpuset (the cpuset if unknown)
    rule: str                       # the rule in words


@dataclass(frozen=True)
class RankPlacement:
    """What was decided for one rank: its plan, the reasons and warnings, and its NICs (``--nic``)."""

    plan: Plan
    reasons: tuple[str, ...]
    warnings: tuple[str, ...]
    env: FrozenMap[str, str] = field(default_factory=FrozenMap)   # to export, those the environment sets left out
    nics: tuple[str, ...] = ()
    cpu_nodes: tuple[int, ...] = ()     # a CPU rank's nodes (its share of the machine)


def rank_limit(topology: Any, within: Iterable[int] | None = None, within_affinity: bool = False) -> RankLimit:
    """``(the CPUs a rank's plan may use, where that limit comes from, the launcher's CPUs, the rule in words)``:
    the cpuset; the launcher's affinity (``within``, default ``topology.affinity``) only with ``within_affinity``
    (a :class:`PlanError` when it is unknown)."""
    cpuset = frozenset(topology.allowed_cpus)
    source = f"the cpuset's CPUs, from {topology.allowed_source or 'the cpuset'}"
    affinity = topology.affinity if within is None else frozenset(within)
    launcher = cpuset if affinity is None else frozenset(affinity) & cpuset
    if within_affinity:
        kept = Allowed.of(topology).replace(affinity=affinity).within_affinity().allowed_cpus
        return RankLimit(kept, source + " and the launcher's affinity", launcher, (
            f"--within-affinity: the plan stays inside the affinity the launcher set (CPUs "
            f"{format_cpulist(kept)}, within the cpuset)"))
    rule = f"the cpuset is the limit (CPUs {format_cpulist(cpuset)}, from {topology.allowed_source or 'the cpuset'})"
    if affinity is not None and not cpuset <= frozenset(affinity):
        rule += (f"; the affinity the launcher set (CPUs {format_cpulist(launcher) or 'none'}) is where the process "
                 f"starts, and the plan replaces it as numactl does (--within-affinity keeps the rank inside it)")
    return RankLimit(cpuset, source, launcher, rule)


def _machine_gpus(topology: Any, unfiltered_env: Mapping[str, str]) -> tuple[Any, ...]:
    """Every GPU of the machine, numbered as under ``unfiltered_env`` (no visibility variable); () on failure."""
    from .._fs import FsReader
    from ..devices import discover_gpus

    try:
        return tuple(discover_gpus(FsReader(topology.root), topology.nodes, env=unfiltered_env))
    except NumabindError as exc:
        log.debug("listing every GPU under %s failed: %s", topology.root, exc)
        return ()


def _topology_with(topology: Any, **changes: Any) -> Any:
    """A copy of ``topology`` with ``changes`` (its own ``replace`` when it has one)."""
    replace = getattr(topology, "replace", None)
    return replace(**changes) if callable(replace) else dataclasses.replace(topology, **changes)


def _peer_topology(topology: Any, indices: list[int], own_devices: bool, size: int | None, size_source: str,
                   mode: Mode, unfiltered_env: Mapping[str, str], reasons: list[str]) -> tuple[Any, dict[int, int]]:
    """``(topology whose GPUs are the peers, visible index -> index in it)`` for the modes that share a node
    (:data:`SHARED_MODES`): the local ranks ``0 .. size - 1``, or every GPU of the machine for a process that owns
    its devices."""
    same = {i: i for i in indices}
    if mode not in SHARED_MODES:
        return topology, same
    if not own_devices:
        if size is None:
            reasons.append(f"{mode}: the local world size is unknown ({size_source}); the node is shared among "
                           f"every visible GPU on it")
            return topology, same
        peers = tuple(g for g in topology.gpus if g.index < size)
        reasons.append(f"{mode}: the node is shared among local ranks 0-{size - 1} ({size_source}={size}), "
                       f"rank r on visible GPU r")
        return _topology_with(topology, gpus=peers), same
    every = _machine_gpus(topology, unfiltered_env)
    by_address = {g.pci_address: g.index for g in every}
    mapping = {g.index: by_address[g.pci_address] for g in topology.gpus
               if g.index in same and g.pci_address in by_address}
    if len(mapping) != len(indices):
        reasons.append(f"{mode}: the machine's other GPUs could not be listed; the node is shared among the "
                       f"visible GPUs only")
        return topology, same
    if mode == "exclusive" and size is not None and size > len(every):
        raise PlanError(f"exclusive mode: {size} local ranks ({size_source}) share the machine's {len(every)} GPUs, "
                        f"so some ranks share a GPU and cannot each get their own cores; use --mode node (or "
                        f"core-complex)")
    shown = ", ".join(str(mapping[i]) for i in indices)
    reasons.append(f"{mode}: this process has its own GPU(s); the node is shared among the machine's GPUs on it "
                   f"(GPU {shown} of {len(every)} with no visibility variable)")
    return _topology_with(topology, gpus=every), mapping


def _memory_where_it_runs(plan: Plan, runs_on: frozenset[int], topology: Any, warnings: list[str],
                          label: str) -> Plan:
    """``plan`` with its memory moved off nodes whose CPUs are not in ``runs_on`` (said in ``warnings``)."""
    if not plan.mem_nodes:
        return plan
    nodes = topology.nodes
    foreign = frozenset(n for n in plan.mem_nodes if n in nodes and nodes[n].cpus and not nodes[n].cpus & runs_on)
    if not foreign:
        return plan
    kept = plan.mem_nodes - foreign
    where = (f"node(s) {format_cpulist(foreign)}, whose CPUs this process does not run on "
             f"(CPUs {format_cpulist(runs_on)})")
    if kept:
        warnings.append(f"{label}: memory not {plan.mem_policy} on {where}: kept on node(s) {format_cpulist(kept)}")
        policy = "preferred" if plan.mem_policy == "preferred-many" and len(kept) == 1 else plan.mem_policy
        return plan.replace(mem_policy=policy, mem_nodes=kept)
    local = frozenset(n for n in nodes_of(topology, runs_on)
                      if n in nodes and nodes[n].has_memory and n in topology.allowed_nodes)
    if not local:
        warnings.append(f"{label}: memory not {plan.mem_policy} on {where}, and no node of those CPUs has memory "
                        f"this process may use: memory policy left unchanged")
        return plan.replace(mem_policy=None, mem_nodes=None, migrate=False)
    policy = "preferred" if len(local) == 1 else "preferred-many"
    warnings.append(f"{label}: memory not {plan.mem_policy} on {where}: memory {policy} on node(s) "
                    f"{format_cpulist(local)}, where the CPUs it keeps are")
    return plan.replace(mem_policy=policy, mem_nodes=local)


def _narrow(plan: Plan, limit: RankLimit, strict: Strictness, warnings: list[str], label: str, topology: Any,
            within_affinity: bool) -> Plan:
    """``plan`` within ``limit``: strict, a :class:`PlanError` when it does not fit (``"partial"``: no CPU left);
    lenient, the CPUs narrowed (or left as the launcher set them) and memory moved to where they are."""
    if plan.cpus is None:
        return plan
    outside = plan.cpus - limit.cpus
    if not outside:
        return plan
    inside = plan.cpus & limit.cpus
    msg = (f"{label}: the plan's CPUs {format_cpulist(outside)} are outside the CPUs this process may use "
           f"{format_cpulist(limit.cpus)} ({limit.source})")
    if strict is True or (strict == "partial" and not inside):
        fix = (f"; give the rank those CPUs ({UNBIND_FLAGS}), drop --within-affinity to plan within the "
               f"cpuset, or run without strict mode" if within_affinity else
               "; widen the cpuset or run without strict mode")
        raise PlanError(msg + fix)
    if inside:
        warnings.append(f"{msg}: CPUs narrowed to {format_cpulist(inside)}")
    else:
        warnings.append(f"{msg}: CPU affinity left as the launcher set it")
    return _memory_where_it_runs(plan.replace(cpus=inside or None), inside or limit.cpus, topology, warnings, label)


def plan_gpu_share(topology: Any, indices: Iterable[int], *, label: str, mode: Mode = "node",
                   policy: NodePolicy | None = "bind", own_devices: bool = True, size: int | None = None,
                   size_source: str = "", unfiltered_env: Mapping[str, str] | None = None,
                   within: Iterable[int] | None = None, strict: Strictness = False, migrate: bool = False,
                   reasons: list[str] | None = None, warnings: list[str] | None = None,
                   within_affinity: bool = False) -> Plan:
    """The plan of a process that drives the visible GPUs ``indices`` (a rank, a Ray worker): one GPU's plan, or
    the union of each one's CPUs with memory as :func:`numabind.plan_for_gpus`, narrowed by :func:`rank_limit`.
    GPUs with no NUMA node are left out (strict: a PlanError); with none left the plan binds nothing.
    ``reasons`` and ``warnings`` collect what was done.
    """
    reasons = [] if reasons is None else reasons
    warnings = [] if warnings is None else warnings
    wanted = list(indices)
    by_index = {g.index: g for g in topology.gpus}
    placed = []
    for i in wanted:
        gpu = by_index.get(i)
        if gpu is None:
            raise PlanError(f"{label}: GPU {i} is not visible (visible: "
                            f"{format_cpulist(by_index) or 'none'})")
        if gpu.numa_node is None:
            why = f"{label}: GPU {i} ({gpu.pci_address}) has no NUMA node ({gpu.numa_note or 'firmware reports -1'})"
            if strict is True or (strict == "partial" and len(wanted) == 1):
                raise PlanError(why + "; run without strict mode to leave it unbound, or bind explicitly")
            warnings.append(why + ("; the process is left as the launcher started it" if len(wanted) == 1
                                   else "; it is left out of the plan"))
            continue
        placed.append(i)
    if not placed:
        return Plan(reason="; ".join(reasons + warnings))
    limit = rank_limit(topology, within, within_affinity)
    peers, mapping = _peer_topology(topology, placed, own_devices, size, size_source, mode, unfiltered_env or {},
                                    reasons)
    wide = _topology_with(peers, allowed_cpus=frozenset(topology.allowed_cpus))
    members = [plan_for_gpu(mapping[i], mode=mode, topology=wide, policy=policy, migrate=migrate) for i in placed]
    if len(members) == 1:
        ideal = members[0]
    else:
        shard = plan_for_gpus([mapping[i] for i in placed], topology=wide, mode=mode, policy=policy,
                              migrate=migrate)
        cpus = frozenset().union(*(m.cpus or frozenset() for m in members))
        ideal = Plan(cpus=cpus, mem_policy=shard.mem_policy, mem_nodes=shard.mem_nodes, migrate=shard.migrate,
                     reason=" | ".join(m.reason for m in members))
    reasons.append(ideal.reason)
    reasons.append(limit.rule)
    plan = _narrow(ideal, limit, strict, warnings, label, topology, within_affinity)
    return plan.replace(reason="; ".join(reasons + warnings))


def _rank_nodes(topology: Any, limit: frozenset[int]) -> list[int]:
    """The nodes with CPUs in ``limit``, by package (of their lowest CPU), then id."""
    def package(n: int) -> int:
        info = topology.cpus.get(min(topology.nodes[n].cpus & limit))
        return -1 if info is None else info.package

    nodes = [n for n in topology.nodes if topology.nodes[n].cpus & limit]
    return sorted(nodes, key=lambda n: (package(n), n))


def plan_cpu_rank(topology: Any, rank: int, size: int | None, *, size_source: str = "",
                  policy: NodePolicy | None = "bind", label: str | None = None, reasons: list[str] | None = None,
                  size_fix: str = "give the number of ranks on this machine") -> tuple[Plan, tuple[int, ...]]:
    """``(plan, its nodes)`` of local rank ``rank`` of ``size`` ranks without a GPU, within the cpuset: whole nodes
    when there are as many nodes as ranks or more, else equal blocks of whole cores (performance cores first on
    a hybrid CPU); memory on every node its CPUs span (``docs/howto/slurm.rst``, "Ranks without GPUs"). An
    unknown ``size`` is one rank per node; a rank past the nodes is a PlanError ending with ``size_fix``."""
    label = label or f"local rank {rank}"
    reasons = [] if reasons is None else reasons
    limit = frozenset(topology.allowed_cpus)
    nodes = _rank_nodes(topology, limit)
    if not nodes:
        raise PlanError(f"{label}: no NUMA node has a CPU this process may use ({format_cpulist(limit) or 'none'}); "
                        f"check the cpuset")
    count = len(nodes)
    if size is None:
        if rank >= count:
            raise PlanError(f"{label}: the local world size is unknown ({size_source}) and rank {rank} is past the "
                            f"{count} node(s) that one rank per node would use; {size_fix}")
        reasons.append(f"the local world size is unknown ({size_source}): one rank per node assumed "
                       f"({count} nodes)")
        size = count
    if rank >= size:
        raise PlanError(f"{label}: rank {rank} is not below the local world size {size} ({size_source})")
    hybrid: list[str] = []     # a hybrid CPU's performance cores, said after the rank's share
    if size <= count:
        mine = nodes[rank * count // size:(rank + 1) * count // size]
        group = f"node {mine[0]}" if len(mine) == 1 else f"nodes {format_cpulist(mine)}"
        cpus = prefer_performance(topology, frozenset().union(*(topology.nodes[n].cpus & limit for n in mine)),
                                  f"{group}'s CPUs", hybrid)
        split = ("one node per rank" if size == count else
                 f"{count} nodes split into {size} groups of whole nodes, in order")
        reasons.append(f"CPU rank {rank} of {size} -> {group} ({split}): CPUs {format_cpulist(cpus)}")
    else:
        cores = [core for n in nodes for core in whole_cores(topology, topology.nodes[n].cpus & limit)]
        fast = prefer_performance(topology, frozenset().union(*cores), f"the CPUs of {count} node(s)", hybrid)
        if len(fast_cores := whole_cores(topology, fast)) >= size:
            cores = fast_cores      # a core of its own for each rank among the performance cores
        else:
            hybrid.clear()          # too few performance cores for one each: every core is split
        block = len(cores) // size
        if block == 0:
            raise PlanError(f"{label}: {size} local ranks ({size_source}) but only {len(cores)} cores in the "
                            f"cpuset ({format_cpulist(limit)}): each rank needs a core of its own; start at most "
                            f"{len(cores)} ranks on this machine")
        cpus = frozenset().union(*cores[rank * block:(rank + 1) * block])
        spare = cores[size * block:]
        reasons.append(f"CPU rank {rank} of {size}: more ranks than the {count} node(s), so their "
                       f"{len(cores)} cores are split into {size} equal blocks of {block} core(s) (SMT siblings "
                       f"together, in node order): CPUs {format_cpulist(cpus)}")
        if spare:
            left = frozenset().union(*spare)
            reasons.append(f"{len(spare)} core(s) left to no rank ({len(cores)} cores do not split into {size} "
                           f"equal blocks): CPUs {format_cpulist(left)}")
        mine = sorted(nodes_of(topology, cpus))
    reasons.extend(hybrid)
    spans = tuple(n for n in nodes if n in mine)
    if policy is None:
        reasons.append("memory policy left unchanged")
        return Plan(cpus=cpus, reason="; ".join(reasons)), spans
    memory = frozenset(n for n in spans if topology.nodes[n].has_memory and n in topology.allowed_nodes)
    if not memory:
        reasons.append(f"memory policy left unchanged: no node of {format_cpulist(spans)} has memory this process "
                       f"may use (Mems_allowed {format_cpulist(topology.allowed_nodes) or 'empty'})")
        return Plan(cpus=cpus, reason="; ".join(reasons)), spans
    if policy == "preferred" and len(memory) > 1:
        reasons.append(f"preferred over {len(memory)} nodes becomes preferred-many")
        policy = "preferred-many"
    elif policy == "preferred-many" and len(memory) == 1:
        policy = "preferred"
    left_out = [n for n in spans if n not in memory]
    reasons.append(f"memory {policy} {format_cpulist(memory)}" +
                   (" (every node the CPUs span)" if len(memory) > 1 else "") +
                   (f"; node(s) {format_cpulist(left_out)} left out: no memory this process may use"
                    if left_out else ""))
    return Plan(cpus=cpus, mem_policy=policy, mem_nodes=memory, reason="; ".join(reasons)), spans


# ------------------------------------------------------------------ NICs (--nic)
def _no_nics(why: str, strict: Strictness, warnings: list[str]) -> tuple[FrozenMap[str, str], tuple[str, ...]]:
    """NICs that could not be read: an error under ``strict=True``, else a warning and no variable."""
    if strict is True:
        raise PlanError(why) from None
    warnings.append(why + "; no NCCL/UCX variable is set")
    return FrozenMap(), ()


def _exports(choice: Any, env: Mapping[str, str], reasons: list[str]) -> tuple[FrozenMap[str, str], tuple[str, ...]]:
    """The variables of a NIC choice that ``env`` does not already set (those it sets said in ``reasons``)."""
    reasons.extend(f"--nic: {r}" for r in choice.reasons)
    out = {}
    for var, value in choice.env_items:
        if var in env:
            reasons.append(f"--nic: {var} is already set ({excerpt(env[var], escape=True)}): left as the user set it "
                           f"(numabind would set {value!r})")
        else:
            out[var] = value
    return FrozenMap(out), tuple(dict.fromkeys(n.name for n in choice.rdma + choice.sockets))


def _gpu_rank_nics(topology: Any, index: int, own_devices: bool, size: int | None, env: Mapping[str, str],
                   unfiltered_env: Mapping[str, str], strict: Strictness, reasons: list[str],
                   warnings: list[str]) -> tuple[FrozenMap[str, str], tuple[str, ...]]:
    """``(variables to export, NIC names)`` for the rank on GPU ``index`` (strict: an error on failure)."""
    from ..iodevices import gpu_nics

    if own_devices:
        peers: tuple[Any, ...] = _machine_gpus(topology, unfiltered_env) or tuple(topology.gpus)
    else:
        peers = tuple(g for g in topology.gpus if size is None or g.index < size) or tuple(topology.gpus)
    try:
        choice = gpu_nics(topology, index, peers=peers)
    except NumabindError as exc:
        return _no_nics(f"--nic: the NICs nearest GPU {index} could not be found: {exc}", strict, warnings)
    return _exports(choice, env, reasons)


def _cpu_rank_nics(topology: Any, rank: int, size: int | None, env: Mapping[str, str], strict: Strictness,
                   reasons: list[str], warnings: list[str]) -> tuple[FrozenMap[str, str], tuple[str, ...]]:
    """``--nic`` for a CPU rank: the NICs nearest its first node, ties split among the ranks on that node."""
    from ..iodevices import PciPlace, choose_nics, scan_nics

    count = size if size is not None else len(_rank_nodes(topology, frozenset(topology.allowed_cpus)))
    try:
        places = [PciPlace(f"local rank {r:06d}", (f"local rank {r:06d}",),
                           plan_cpu_rank(topology, r, count, policy=None)[1][0]) for r in range(max(count, rank + 1))]
        found = getattr(topology, "nics", None)
        choice = choose_nics(places[rank], places, scan_nics(topology.root) if found is None else found,
                             label=f"local rank {rank} (node {places[rank].numa_node})", sharers="ranks")
    except NumabindError as exc:
        return _no_nics(f"--nic: the NICs of local rank {rank} could not be found: {exc}", strict, warnings)
    return _exports(choice, env, reasons)


# ------------------------------------------------------------------ one rank, whole
def plan_rank(topology: Any, rank: int, size: int | None, index: int | None, *, label: str, reasons: list[str],
              size_source: str = "", size_fix: str = "give the number of ranks on this machine",
              own_devices: bool = False, unfiltered_env: Mapping[str, str] | None = None, mode: Mode = "node",
              policy: NodePolicy | None = "bind", env: Mapping[str, str] | None = None,
              within: Iterable[int] | None = None, strict: Strictness = False, migrate: bool = False,
              nics: bool = False, within_affinity: bool = False) -> RankPlacement:
    """Local rank ``rank`` of ``size`` on visible GPU ``index`` (:func:`plan_gpu_share`), or a CPU rank with
    ``index`` None (:func:`plan_cpu_rank`, narrowed to :func:`rank_limit`); with ``nics``, its nearest NICs'
    variables that ``env`` does not set. ``reasons`` starts with how the rank was mapped."""
    warnings: list[str] = []
    env = env or {}
    if index is None:
        if mode != "node":
            reasons.append(f"mode {mode} places GPU ranks; a CPU rank takes its share of the nodes")
        plan, spans = plan_cpu_rank(topology, rank, size, size_source=size_source, policy=policy, label=label,
                                    reasons=reasons, size_fix=size_fix)
        exports, chosen = (_cpu_rank_nics(topology, rank, size, env, strict, reasons, warnings) if nics
                           else (FrozenMap(), ()))
        if migrate and plan.mem_policy is not None:
            plan = plan.replace(migrate=True)
        limit = rank_limit(topology, within, within_affinity)
        reasons.append(limit.rule)
        plan = _narrow(plan, limit, strict, warnings, label, topology, within_affinity)
        plan = plan.replace(reason="; ".join(reasons + warnings))
        return RankPlacement(plan, tuple(reasons), tuple(warnings), exports, chosen, spans)
    plan = plan_gpu_share(topology, [index], label=label, mode=mode, policy=policy, own_devices=own_devices,
                          size=size, size_source=size_source, unfiltered_env=unfiltered_env, within=within,
                          strict=strict, migrate=migrate, reasons=reasons, warnings=warnings,
                          within_affinity=within_affinity)
    exports, chosen = FrozenMap(), ()
    if nics:
        exports, chosen = _gpu_rank_nics(topology, index, own_devices, size, env, unfiltered_env or {}, strict,
                                         reasons, warnings)
        plan = plan.replace(reason="; ".join([plan.reason] + [r for r in reasons if r.startswith("--nic:")]))
    return RankPlacement(plan, tuple(reasons), tuple(warnings), exports, chosen)
