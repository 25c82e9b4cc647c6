"""Ranks started by a launcher (torchrun, Slurm, MPI, PALS): local rank, local world size, the rank's GPU, its plan.

A launcher starts one process per GPU on every machine and tells each its
*local rank* (its number among the processes on this machine) through the
environment. :func:`local_rank` reads it, in this order, the first variable
that is set winning:

======================  =============================  ==========================================
launcher                local rank                     local world size
======================  =============================  ==========================================
torchrun                ``LOCAL_RANK``                 ``LOCAL_WORLD_SIZE``
Slurm (srun)            ``SLURM_LOCALID``              ``SLURM_STEP_TASKS_PER_NODE``, ``SLURM_TASKS_PER_NODE``
                                                       (this node's entry, by ``SLURM_NODEID``),
                                                       ``SLURM_NTASKS_PER_NODE``
Open MPI                ``OMPI_COMM_WORLD_LOCAL_RANK`` ``OMPI_COMM_WORLD_LOCAL_SIZE``
MPICH / Intel MPI       ``MPI_LOCALRANKID``            ``MPI_LOCALNRANKS``
(Hydra)
Cray PMI                ``PMI_LOCAL_RANK``             ``PMI_LOCAL_SIZE``
HPE PALS                ``PALS_LOCAL_RANKID``          ``PALS_LOCAL_SIZE``
======================  =============================  ==========================================

``NUMABIND_LOCAL_RANK`` / ``NUMABIND_LOCAL_WORLD_SIZE`` override them. The
local world size is read from the same launcher as the rank (torchrun started
by srun has torchrun's ``LOCAL_WORLD_SIZE``, not Slurm's one task per node).
A rank that is missing or malformed is an error, never rank 0.

The rank's GPU (:func:`rank_gpu`) is the visible GPU whose index is the local
rank, or, when the launcher gave each rank exactly one visible device (Slurm
``--gpus-per-task=1``, Ray), that device.

:func:`place_rank` plans it with :func:`numabind.plan_for_gpu` and never
widens what the launcher left the process: the plan is intersected with the
cpuset and with the launcher's affinity (``within``; by default the affinity
the process was started with, ``topology.affinity``: for a rank the launcher's
per-rank binding is a choice, not a leftover), and in strict mode a plan that
falls outside them is an error. ``exclusive`` and
``core-complex`` split a node between the ranks that share it: the local ranks
``0 .. local world size - 1`` when ranks index the visible GPUs, the machine's
GPUs when each rank has its own.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._base import Strictness, strict_from_env
from ._fs import ascii_int
from .cpulist import format_cpulist
from .errors import NumabindError, PlanError
from .plan import Plan

log = logging.getLogger(__name__)

__all__ = [
    "LAUNCHERS",
    "discover_for_env",
    "Launcher",
    "RankPlan",
    "local_rank",
    "local_world_size",
    "place_rank",
    "plan_for_rank",
    "plan_owned_gpus",
    "rank_gpu",
]

#: Variables that override what the launcher says.
RANK_OVERRIDE = "NUMABIND_LOCAL_RANK"
SIZE_OVERRIDE = "NUMABIND_LOCAL_WORLD_SIZE"
#: Most digits accepted in a rank or size variable (a machine never runs a million ranks).
_MAX_DIGITS = 6
#: Variables that narrow the GPUs a process sees (stripped to list every GPU of the machine).
_DEVICE_FILTERS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK",
                   "ASCEND_RT_VISIBLE_DEVICES")
#: Modes whose share depends on the other ranks that use the same node.
_SHARED_MODES = ("exclusive", "core-complex")


@dataclass(frozen=True)
class Launcher:
    """One launcher's variables: the local rank and, in order of preference, the local world size."""

    name: str
    rank_var: str
    size_vars: tuple[str, ...]


LAUNCHERS: tuple[Launcher, ...] = (
    Launcher("torchrun", "LOCAL_RANK", ("LOCAL_WORLD_SIZE",)),
    Launcher("Slurm", "SLURM_LOCALID", ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
                                        "SLURM_NTASKS_PER_NODE")),
    Launcher("Open MPI", "OMPI_COMM_WORLD_LOCAL_RANK", ("OMPI_COMM_WORLD_LOCAL_SIZE",)),
    Launcher("MPICH/Hydra", "MPI_LOCALRANKID", ("MPI_LOCALNRANKS",)),
    Launcher("Cray PMI", "PMI_LOCAL_RANK", ("PMI_LOCAL_SIZE",)),
    Launcher("PALS", "PALS_LOCAL_RANKID", ("PALS_LOCAL_SIZE",)),
)
_SLURM_PER_NODE = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")


# ------------------------------------------------------------------ parsing
def _shown(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:40] + "...")


def _number(var: str, value: str, what: str) -> int:
    """``value`` of ``var`` as a count: ASCII digits only, at most six of them."""
    number = ascii_int(value, max_digits=_MAX_DIGITS) if value == value.strip() else None
    if number is None:
        raise NumabindError(
            f"{var}={_shown(value)} is not a {what}: expected a number of 1 to {_MAX_DIGITS} ASCII digits "
            f"(set by the launcher; override with {RANK_OVERRIDE if what == 'local rank' else SIZE_OVERRIDE}=N)"
        )
    return number


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def _launcher(env: Mapping[str, str]) -> Launcher | None:
    """The first launcher whose rank variable is set."""
    for launcher in LAUNCHERS:
        if launcher.rank_var in env:
            return launcher
    return None


def local_rank(env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """``(local rank, the variable it came from)``; NumabindError when no launcher set one or it is malformed.

    ``NUMABIND_LOCAL_RANK`` wins over the launchers' variables, which are read
    in the order of :data:`LAUNCHERS`. A set but malformed variable is an error
    even when a later one would parse: it is never skipped.
    """
    env = _env(env)
    if RANK_OVERRIDE in env:
        return _number(RANK_OVERRIDE, env[RANK_OVERRIDE], "local rank"), RANK_OVERRIDE
    launcher = _launcher(env)
    if launcher is None:
        names = ", ".join(lch.rank_var for lch in LAUNCHERS)
        raise NumabindError(
            f"no local rank in the environment: none of {names} is set. Start the command through its "
            f"launcher (torchrun, srun, mpirun, mpiexec) or set {RANK_OVERRIDE}=N"
        )
    return _number(launcher.rank_var, env[launcher.rank_var], "local rank"), launcher.rank_var


def _slurm_tasks_on_node(var: str, value: str, env: Mapping[str, str]) -> tuple[int | None, str]:
    """This node's entry of Slurm's compressed per-node list (``2(x3),1``), by ``SLURM_NODEID``."""
    entries: list[tuple[int, int]] = []     # (tasks, nodes with that many)
    for part in value.split(","):
        tasks, sep, rest = part.partition("(x")
        if sep and not rest.endswith(")"):
            raise NumabindError(f"{var}={_shown(value)}: entry {part!r} is not N or N(xM)")
        repeat = _number(var, rest[:-1], "node count") if sep else 1
        entries.append((_number(var, tasks, "task count"), repeat))
    if len({t for t, _ in entries}) == 1:
        return entries[0][0], var
    node_var = "SLURM_NODEID"
    if node_var not in env:
        return None, f"{var}={_shown(value)} differs between nodes and {node_var} is not set"
    node = _number(node_var, env[node_var], "node id")
    seen = 0
    for count, repeat in entries:
        seen += repeat
        if node < seen:
            return count, f"{var} (entry of {node_var}={node})"
    raise NumabindError(f"{node_var}={node} is past the {seen} nodes that {var}={_shown(value)} lists")


def local_world_size(env: Mapping[str, str] | None = None) -> tuple[int | None, str]:
    """``(ranks on this machine, where that came from)``; ``(None, why)`` when the launcher did not say.

    Read from ``NUMABIND_LOCAL_WORLD_SIZE``, else from the launcher that gave
    the local rank (see :data:`LAUNCHERS`). Zero or a malformed value is an error.
    """
    env = _env(env)
    if SIZE_OVERRIDE in env:
        size, source = _number(SIZE_OVERRIDE, env[SIZE_OVERRIDE], "local world size"), SIZE_OVERRIDE
    else:
        launcher = _launcher(env)
        if launcher is None:
            return None, f"no launcher variable is set (and no {SIZE_OVERRIDE})"
        size = None
        source = f"{launcher.name} set none of {', '.join(launcher.size_vars)}"
        for var in launcher.size_vars:
            if var not in env:
                continue
            if var in _SLURM_PER_NODE:
                size, source = _slurm_tasks_on_node(var, env[var], env)
                if size is None:
                    continue
            else:
                size, source = _number(var, env[var], "local world size"), var
            break
    if size == 0:
        raise NumabindError(f"{source} says 0 ranks run on this machine; a rank is running, so that is wrong")
    return size, source


# ------------------------------------------------------------------ the rank's GPU
def rank_gpu(topology: Any, rank: int, source: str = "the local rank") -> tuple[int, str]:
    """``(visible GPU index, the rule that chose it)`` for local rank ``rank``.

    One visible GPU: it is the rank's (the launcher gave each rank its own
    device). Several: the one whose visible index is the rank. Raises
    :class:`PlanError` when no GPU is visible or the rank has none.
    """
    gpus = sorted(g.index for g in topology.gpus)
    if not gpus:
        raise PlanError(
            f"local rank {rank} (from {source}): no GPU is visible (check CUDA_VISIBLE_DEVICES / "
            f"HIP_VISIBLE_DEVICES and that the driver is loaded); bind with explicit options instead"
        )
    if len(gpus) == 1:
        return gpus[0], "the launcher gave this rank one visible GPU"
    if rank not in gpus:
        raise PlanError(
            f"local rank {rank} (from {source}) has no GPU: {len(gpus)} GPUs are visible "
            f"({format_cpulist(gpus)}); start at most {len(gpus)} ranks per machine, or give each rank "
            f"its own device (e.g. srun --gpus-per-task=1)"
        )
    return rank, f"local rank {rank} indexes the {len(gpus)} visible GPUs"


# ------------------------------------------------------------------ planning
@dataclass(frozen=True)
class RankPlan:
    """Where one local rank goes, and why (``numabind plan --gpu-from-rank --json`` prints ``to_dict()``)."""

    rank: int
    rank_source: str                    # the variable, e.g. "SLURM_LOCALID"
    local_world_size: int | None
    local_world_size_source: str        # the variable, or why it is unknown
    gpu: int | None                     # visible index
    gpu_rule: str
    pci_address: str | None
    numa_node: int | None
    mode: str
    policy: str | None
    plan: Plan
    launcher_cpus: frozenset[int]       # the CPUs the process may use (never widened)
    warnings: tuple[str, ...] = ()
    reasons: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        """One line: ``local rank 1 (SLURM_LOCALID) -> GPU 1 on node 1: cpus 8-15, memory bind 1``."""
        where = f"GPU {self.gpu}" + (f" on node {self.numa_node}" if self.numa_node is not None else " (no node)")
        return f"local rank {self.rank} ({self.rank_source}) -> {where}: {self.plan.describe()}"

    def to_dict(self) -> dict[str, Any]:
        def ids(v: Iterable[int] | None) -> str | None:
            return None if v is None else format_cpulist(v)

        return {
            "local_rank": self.rank,
            "local_rank_source": self.rank_source,
            "local_world_size": self.local_world_size,
            "local_world_size_source": self.local_world_size_source,
            "gpu": self.gpu,
            "gpu_rule": self.gpu_rule,
            "pci_address": self.pci_address,
            "numa_node": self.numa_node,
            "mode": self.mode,
            "policy": self.policy,
            "launcher_cpus": ids(self.launcher_cpus),
            "plan": {
                "cpus": ids(self.plan.cpus),
                "mem_policy": self.plan.mem_policy,
                "mem_nodes": ids(self.plan.mem_nodes),
                "numactl": self.plan.to_numactl_args(),
            },
            "placed": self.plan.cpus is not None or self.plan.mem_policy is not None,
            "warnings": list(self.warnings),
            "reasons": list(self.reasons),
        }


def discover_for_env(env: Mapping[str, str]) -> Any:
    """The machine under ``env``'s ``NUMABIND_FSROOT`` (the live one when unset), as the launchers see it."""
    from ._fs import FsReader
    from .topology import discover_from

    return discover_from(FsReader(env.get("NUMABIND_FSROOT") or "/"), env=env)


def _shared_limit(topology: Any) -> frozenset[int]:
    """The CPUs every rank of this machine may use: the cpuset (``topology.allowed_cpus``, on any root),
    never the affinity the launcher gave this one, so the shares of ``exclusive`` are cut from the cpuset."""
    return frozenset(topology.allowed_cpus)


def _all_gpus(topology: Any, env: Mapping[str, str]) -> tuple[Any, ...]:
    """Every GPU of the machine, numbered as if no visibility variable were set."""
    from ._fs import FsReader
    from .devices import discover_gpus

    unfiltered = {k: v for k, v in env.items() if k not in _DEVICE_FILTERS}
    try:
        return tuple(discover_gpus(FsReader(topology.root), topology.nodes, env=unfiltered))
    except NumabindError as exc:
        log.debug("listing every GPU under %s failed: %s", topology.root, exc)
        return ()


def _peer_topology(topology: Any, indices: list[int], own_devices: bool, size: int | None, size_source: str,
                   mode: str, env: Mapping[str, str], reasons: list[str]) -> tuple[Any, dict[int, int]]:
    """``(topology whose GPUs are the peers, visible index -> index in it)``.

    Only ``exclusive`` and ``core-complex`` depend on the peers: they share a
    node among the GPUs of ``topology.gpus`` that are on it. Ranks that index
    the visible GPUs share with the local ranks ``0 .. size - 1``; a process
    that owns its devices (one visible GPU per rank, a Ray worker) shares with
    every GPU of the machine, each owned by someone else.
    """
    same = {i: i for i in indices}
    if mode not in _SHARED_MODES:
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
    every = _all_gpus(topology, env)
    by_address = {g.pci_address: g.index for g in every}
    mapping = {}
    for g in topology.gpus:
        if g.index in same and g.pci_address in by_address:
            mapping[g.index] = by_address[g.pci_address]
    if len(mapping) != len(indices):
        reasons.append(f"{mode}: the machine's other GPUs could not be listed; the node is shared among the "
                       f"visible GPUs only")
        return topology, same
    if mode == "exclusive" and size is not None and size > len(every):
        raise PlanError(
            f"exclusive mode: {size} local ranks ({size_source}) share the machine's {len(every)} GPUs, so "
            f"some ranks share a GPU and cannot each get their own cores; use --mode node (or core-complex)"
        )
    shown = ", ".join(str(mapping[i]) for i in indices)
    reasons.append(f"{mode}: this process has its own GPU(s); the node is shared among the machine's GPUs on it "
                   f"(GPU {shown} of {len(every)} with no visibility variable)")
    return _topology_with(topology, gpus=every), mapping


def _topology_with(topology: Any, **changes: Any) -> Any:
    """A copy of ``topology`` with ``changes`` (its own ``replace`` when it has one)."""
    replace = getattr(topology, "replace", None)
    return replace(**changes) if callable(replace) else dataclasses.replace(topology, **changes)


def _with_reason(plan: Plan, reason: str) -> Plan:
    return plan.replace(reason=reason)


def _narrow(plan: Plan, allowed: frozenset[int], allowed_source: str, strict: Strictness,
            warnings: list[str], label: str) -> Plan:
    """``plan`` within the CPUs the launcher left the process; strict: an error when it does not fit
    (``"partial"``: when none of its CPUs is left)."""
    if plan.cpus is None:
        return plan
    outside = plan.cpus - allowed
    if not outside:
        return plan
    inside = plan.cpus & allowed
    msg = (f"{label}: the plan's CPUs {format_cpulist(outside)} are outside the CPUs this process may use "
           f"{format_cpulist(allowed)} ({allowed_source}); numabind never widens what the launcher set")
    if strict is True or (strict == "partial" and not inside):
        raise PlanError(msg + "; give the rank those CPUs (e.g. srun --cpu-bind=none) or run without strict mode")
    if inside:
        warnings.append(f"{msg}: CPUs narrowed to {format_cpulist(inside)}")
    else:
        warnings.append(f"{msg}: CPU affinity left as the launcher set it, only the memory policy is applied")
    return plan.replace(cpus=inside or None)


def plan_owned_gpus(topology: Any, indices: Iterable[int], *, label: str, mode: str = "node",
                    policy: str | None = "bind", own_devices: bool = True, size: int | None = None,
                    size_source: str = "", env: Mapping[str, str] | None = None,
                    within: Iterable[int] | None = None, strict: Strictness = False, migrate: bool = False,
                    reasons: list[str] | None = None, warnings: list[str] | None = None) -> Plan:
    """The plan of a process that drives the visible GPUs ``indices`` (a rank, a Ray worker).

    One GPU: :func:`numabind.plan_for_gpu`; several: the union of each one's
    CPUs, memory as :func:`numabind.plan_for_gpus`. Planned within the CPUs
    every process of the machine may use, then narrowed to ``within`` and the
    topology's allowed CPUs (never wider; strict: a PlanError). GPUs with no
    NUMA node are left out (strict: a PlanError); with none left the plan is
    empty (binds nothing). ``reasons`` and ``warnings`` collect what was done.
    """
    from .strategies import plan_for_gpu, plan_for_gpus

    env = _env(env)
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
    allowed = frozenset(topology.allowed_cpus)
    allowed_source = f"the cpuset's CPUs, from {topology.allowed_source or 'the cpuset'}"
    if within is not None:
        allowed &= frozenset(within)
        allowed_source += " and the launcher's affinity"
    peers, mapping = _peer_topology(topology, placed, own_devices, size, size_source, mode, env, reasons)
    wide = _topology_with(peers, allowed_cpus=_shared_limit(topology))
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
    plan = _narrow(ideal, allowed, allowed_source, strict, warnings, label)
    return _with_reason(plan, "; ".join(reasons + warnings))


def place_rank(mode: str = "node", policy: str | None = "bind", topology: Any = None, *,
               env: Mapping[str, str] | None = None, within: Iterable[int] | None = None,
               strict: Strictness | None = None, migrate: bool = False) -> RankPlan:
    """Plan this process as the local rank its launcher started: rank, GPU, plan and every reason.

    ``mode`` and ``policy`` are those of :func:`numabind.plan_for_gpu`;
    ``env`` defaults to ``os.environ`` (the rank variables, ``NUMABIND_STRICT``,
    and, with ``topology=None``, ``NUMABIND_FSROOT`` and the visibility
    variables for discovery). ``within`` further limits the CPUs: the affinity
    the launcher gave the process (default: ``topology.affinity``, the one it
    was started with, or a replayed machine's ``Cpus_allowed``). ``strict`` (default ``NUMABIND_STRICT``) makes a plan outside
    the allowed CPUs, or a GPU with no NUMA node, an error (``"partial"``: only
    when nothing of the plan is left); otherwise the plan is narrowed (or left
    empty) with a warning in ``warnings``, logged.
    """
    env = _env(env)
    strict = strict_from_env(env) if strict is None else strict
    rank, rank_source = local_rank(env)
    size, size_source = local_world_size(env)
    if size is not None and rank >= size:
        raise NumabindError(f"local rank {rank} (from {rank_source}) is not below the local world size {size} "
                            f"(from {size_source}); the launcher's variables disagree")
    if topology is None:
        topology = discover_for_env(env)
    index, rule = rank_gpu(topology, rank, rank_source)
    if within is None:      # the launcher's per-rank binding, as discovery recorded it (None: unknown)
        within = topology.affinity
    gpu = next(g for g in topology.gpus if g.index == index)
    label = f"local rank {rank} ({rank_source})"
    reasons = [f"{label} -> GPU {index} ({gpu.pci_address}): {rule}"]
    warnings: list[str] = []
    plan = plan_owned_gpus(topology, [index], label=label, mode=mode, policy=policy,
                           own_devices=len(topology.gpus) == 1, size=size, size_source=size_source, env=env,
                           within=within, strict=strict, migrate=migrate, reasons=reasons, warnings=warnings)
    for w in warnings:
        log.warning("%s", w)
    log.info("%s -> GPU %d (%s), node %s, mode %s: %s", label, index, rule,
             gpu.numa_node if gpu.numa_node is not None else "unknown", mode, plan.describe())
    allowed = frozenset(topology.allowed_cpus) & (frozenset(within) if within is not None else topology.allowed_cpus)
    return RankPlan(
        rank=rank, rank_source=rank_source, local_world_size=size, local_world_size_source=size_source,
        gpu=index, gpu_rule=rule, pci_address=gpu.pci_address, numa_node=gpu.numa_node, mode=mode, policy=policy,
        plan=plan, launcher_cpus=allowed, warnings=tuple(warnings), reasons=tuple(reasons),
    )


def plan_for_rank(mode: str = "node", policy: str | None = "bind", topology: Any = None, *,
                  env: Mapping[str, str] | None = None, within: Iterable[int] | None = None,
                  strict: Strictness | None = None, migrate: bool = False) -> Plan:
    """The :class:`~numabind.Plan` of this process's local rank (see :func:`place_rank`).

    ``numabind.bind_current(numabind.plan_for_rank())`` binds a script that a
    launcher started, when its launch line cannot change.
    """
    return place_rank(mode, policy, topology, env=env, within=within, strict=strict, migrate=migrate).plan
