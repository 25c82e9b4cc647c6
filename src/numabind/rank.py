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

:func:`place_rank` plans it with :func:`numabind.plan_for_gpu`, by one rule for
a launcher's binding (:func:`rank_limit`): the cpuset is the limit. The affinity
the launcher set (srun's default task binding, ``mpirun --bind-to core``) is
where the process starts, and the plan replaces it, as numactl does;
``within_affinity=True`` (``--within-affinity``) is the explicit way to stay
inside it (narrowed with a warning; strict mode refuses a plan outside it),
and memory is then never bound to a node the process cannot run on. The
rank's reasons say which rule applied. ``exclusive`` and
``core-complex`` split a node between the ranks that share it: the local ranks
``0 .. local world size - 1`` when ranks index the visible GPUs, the machine's
GPUs when each rank has its own.

A rank with no visible GPU (or ``device="cpu"``) gets its share of the machine
(:func:`plan_cpu_rank`): whole nodes when there are no more ranks than nodes,
else equal blocks of cores (SMT siblings together; the cores left over go to
no rank), memory on every node its CPUs span, all within the cpuset.
``place_rank(nics=True)`` also chooses the NICs nearest the rank's GPU
(:func:`numabind.iodevices.gpu_nics`) and the ``NCCL_IB_HCA``,
``UCX_NET_DEVICES`` and ``NCCL_SOCKET_IFNAME`` to export for them
(``RankPlan.env``; a variable the environment already sets is left to it).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._base import Strictness, excerpt, strict_from_env
from ._fs import ascii_int
from ._util import FrozenMap
from .cpulist import format_cpulist
from .errors import NumabindError, PlanError
from .plan import Allowed, Plan

if TYPE_CHECKING:  # pragma: no cover
    from .types import Mode, NodePolicy

log = logging.getLogger(__name__)

__all__ = [
    "LAUNCHERS",
    "discover_for_env",
    "Launcher",
    "RankPlan",
    "local_rank",
    "local_world_size",
    "place_rank",
    "plan_cpu_rank",
    "plan_for_rank",
    "plan_owned_gpus",
    "rank_gpu",
    "rank_limit",
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
#: The launcher flags that leave a rank's CPUs to numabind (named when ``--within-affinity`` refuses a plan).
UNBIND_FLAGS = "srun --cpu-bind=none, mpirun --bind-to none"


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
    launcher_cpus: frozenset[int]       # the affinity the launcher set, within the cpuset (the cpuset if unknown)
    warnings: tuple[str, ...] = ()
    reasons: tuple[str, ...] = field(default=())
    device: str = "gpu"                 # "gpu", or "cpu" for a rank without a GPU
    cpu_nodes: tuple[int, ...] = ()     # a CPU rank's nodes (its share of the machine)
    env: FrozenMap[str, str] = field(default_factory=FrozenMap)   # to export (--nic), the user's own left out
    nics: tuple[str, ...] = ()          # the NICs chosen (--nic)
    within_affinity: bool = False       # True: the plan stays inside launcher_cpus; False: the cpuset is the limit
    limit_cpus: frozenset[int] = frozenset()    # the CPUs the plan was limited to (rank_limit)
    cpu_rule: str = ""                  # which rule applied, in words (also among the reasons)

    def describe(self) -> str:
        """One line: ``local rank 1 (SLURM_LOCALID) -> GPU 1 on node 1: cpus 8-15, memory bind 1``
        (``-> CPU rank on nodes 0-1: ...`` for a rank without a GPU)."""
        if self.device == "cpu":
            shown = format_cpulist(self.cpu_nodes)
            where = f"CPU rank on node{'s' if len(self.cpu_nodes) > 1 else ''} {shown}"
        else:
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
            "device": self.device,
            "cpu_nodes": list(self.cpu_nodes),
            "nics": list(self.nics),
            "env": dict(self.env),
            "launcher_cpus": ids(self.launcher_cpus),
            "within_affinity": self.within_affinity,
            "limit_cpus": ids(self.limit_cpus),
            "cpu_rule": self.cpu_rule,
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
                   mode: Mode, env: Mapping[str, str], reasons: list[str]) -> tuple[Any, dict[int, int]]:
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


def rank_limit(topology: Any, within: Iterable[int] | None = None,
               within_affinity: bool = False) -> tuple[frozenset[int], str, frozenset[int], str]:
    """``(the CPUs a rank's plan may use, where that limit comes from, the launcher's CPUs, the rule in words)``.

    The one rule for a launcher's binding: the cpuset (``topology.allowed_cpus``) is the limit. The affinity
    the launcher set (``within``; by default ``topology.affinity``: the live process's, or a replayed
    machine's ``Cpus_allowed``, never this process's for another root) is where the process starts, and the
    plan replaces it, as numactl does. ``within_affinity=True`` keeps the plan inside it (a
    :class:`PlanError` when it is unknown, as :meth:`numabind.plan.Allowed.within_affinity` says)."""
    cpuset = frozenset(topology.allowed_cpus)
    source = f"the cpuset's CPUs, from {topology.allowed_source or 'the cpuset'}"
    affinity = topology.affinity if within is None else frozenset(within)
    launcher = cpuset if affinity is None else frozenset(affinity) & cpuset
    if within_affinity:
        kept = Allowed.of(topology).replace(affinity=affinity).within_affinity().allowed_cpus
        return kept, source + " and the launcher's affinity", launcher, (
            f"--within-affinity: the plan stays inside the affinity the launcher set (CPUs "
            f"{format_cpulist(kept)}, within the cpuset)")
    rule = f"the cpuset is the limit (CPUs {format_cpulist(cpuset)}, from {topology.allowed_source or 'the cpuset'})"
    if affinity is not None and not cpuset <= frozenset(affinity):
        rule += (f"; the affinity the launcher set (CPUs {format_cpulist(launcher) or 'none'}) is where the process "
                 f"starts, and the plan replaces it as numactl does (--within-affinity keeps the rank inside it)")
    return cpuset, source, launcher, rule


def _node_of(topology: Any, cpus: Iterable[int]) -> frozenset[int]:
    """The nodes ``cpus`` are on."""
    return frozenset(topology.cpus[c].node for c in cpus if c in topology.cpus and topology.cpus[c].node is not None)


def _memory_where_it_runs(plan: Plan, runs_on: frozenset[int], topology: Any, warnings: list[str],
                          label: str) -> Plan:
    """``plan`` with its memory never on a node whose CPUs the process cannot run on (``runs_on``): such nodes
    are dropped; with none of its nodes left, memory is preferred on the nodes of ``runs_on`` (said in
    ``warnings``). Memory-only nodes are no node's CPUs, so they stay."""
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
    local = frozenset(n for n in _node_of(topology, runs_on)
                      if n in nodes and nodes[n].has_memory and n in topology.allowed_nodes)
    if not local:
        warnings.append(f"{label}: memory not {plan.mem_policy} on {where}, and no node of those CPUs has memory "
                        f"this process may use: memory policy left unchanged")
        return plan.replace(mem_policy=None, mem_nodes=None, migrate=False)
    policy = "preferred" if len(local) == 1 else "preferred-many"
    warnings.append(f"{label}: memory not {plan.mem_policy} on {where}: memory {policy} on node(s) "
                    f"{format_cpulist(local)}, where the CPUs it keeps are")
    return plan.replace(mem_policy=policy, mem_nodes=local)


def _narrow(plan: Plan, allowed: frozenset[int], allowed_source: str, strict: Strictness,
            warnings: list[str], label: str, topology: Any = None, within_affinity: bool = False) -> Plan:
    """``plan`` within ``allowed`` (:func:`rank_limit`); strict: an error when it does not fit (``"partial"``:
    when none of its CPUs is left). Lenient: the CPUs narrowed, or the launcher's affinity kept when none is
    left, and memory never on a node the process cannot run on (:func:`_memory_where_it_runs`)."""
    if plan.cpus is None:
        return plan
    outside = plan.cpus - allowed
    if not outside:
        return plan
    inside = plan.cpus & allowed
    msg = (f"{label}: the plan's CPUs {format_cpulist(outside)} are outside the CPUs this process may use "
           f"{format_cpulist(allowed)} ({allowed_source})")
    if strict is True or (strict == "partial" and not inside):
        fix = (f"; give the rank those CPUs ({UNBIND_FLAGS}), drop --within-affinity to plan within the "
               f"cpuset, or run without strict mode" if within_affinity else
               "; widen the cpuset or run without strict mode")
        raise PlanError(msg + fix)
    if inside:
        warnings.append(f"{msg}: CPUs narrowed to {format_cpulist(inside)}")
    else:
        warnings.append(f"{msg}: CPU affinity left as the launcher set it")
    narrowed = plan.replace(cpus=inside or None)
    if topology is None:
        return narrowed
    return _memory_where_it_runs(narrowed, inside or allowed, topology, warnings, label)


def plan_owned_gpus(topology: Any, indices: Iterable[int], *, label: str, mode: Mode = "node",
                    policy: NodePolicy | None = "bind", own_devices: bool = True, size: int | None = None,
                    size_source: str = "", env: Mapping[str, str] | None = None,
                    within: Iterable[int] | None = None, strict: Strictness = False, migrate: bool = False,
                    reasons: list[str] | None = None, warnings: list[str] | None = None,
                    within_affinity: bool = False) -> Plan:
    """The plan of a process that drives the visible GPUs ``indices`` (a rank, a Ray worker).

    One GPU: :func:`numabind.plan_for_gpu`; several: the union of each one's
    CPUs, memory as :func:`numabind.plan_for_gpus`. Planned within the CPUs
    every process of the machine may use (the cpuset), by :func:`rank_limit`'s
    rule: ``within`` is the affinity the launcher set (default
    ``topology.affinity``), which the plan replaces unless ``within_affinity``
    keeps it inside (narrowed; strict: a PlanError). GPUs with no
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
    allowed, allowed_source, _, rule = rank_limit(topology, within, within_affinity)
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
    reasons.append(rule)
    plan = _narrow(ideal, allowed, allowed_source, strict, warnings, label, topology, within_affinity)
    return _with_reason(plan, "; ".join(reasons + warnings))


#: What ``device`` of :func:`place_rank` takes: None (a GPU rank when a GPU is visible, else a CPU rank).
DEVICES = ("gpu", "cpu")


def _cores_of(topology: Any, cpus: frozenset[int]) -> list[frozenset[int]]:
    """``cpus`` grouped by physical core (SMT siblings together), by lowest CPU."""
    groups = set()
    for c in cpus:
        info = topology.cpus.get(c)
        siblings = frozenset(info.siblings) if info is not None and info.siblings else frozenset({c})
        groups.add(siblings & cpus or frozenset({c}))
    return sorted(groups, key=min)


def _rank_nodes(topology: Any, limit: frozenset[int]) -> list[int]:
    """The nodes with CPUs in ``limit``, by package (of their lowest CPU), then id: neighbours in a package
    (SNC/NPS nodes) next to each other."""
    def package(n: int) -> int:
        info = topology.cpus.get(min(topology.nodes[n].cpus & limit))
        return -1 if info is None else info.package

    nodes = [n for n in topology.nodes if topology.nodes[n].cpus & limit]
    return sorted(nodes, key=lambda n: (package(n), n))


def plan_cpu_rank(topology: Any, rank: int, size: int | None, *, size_source: str = "",
                  policy: NodePolicy | None = "bind", label: str | None = None,
                  reasons: list[str] | None = None) -> tuple[Plan, tuple[int, ...]]:
    """``(plan, its nodes)`` of local rank ``rank`` of ``size`` ranks that have no GPU, within the cpuset
    (``topology.allowed_cpus``; the launcher's affinity is :func:`place_rank`'s narrowing, after).

    * ranks <= nodes (the nodes with CPUs in the cpuset, by package then id): each rank gets whole nodes,
      rank r the r-th of ``size`` contiguous groups (one node each when there are as many ranks as nodes;
      4 SNC nodes and 2 ranks: one package each; 3 ranks on 4 nodes: 1, 1, 2 nodes);
    * ranks > nodes: the cores of those nodes (SMT siblings together, in node order) are split into ``size``
      equal blocks of ``cores // size``, rank r the r-th; the ``cores % size`` cores left over go to no rank
      (the launcher, data loaders and the system run there; the reasons name them). No core for a rank is a
      PlanError.

    On a hybrid CPU the ranks keep the performance cores (:func:`numabind.strategies.prefer_performance`, as
    the GPU placement modes do): a node's share is its performance CPUs, and the cores split among more ranks
    than nodes are the performance cores when there is one for each rank.

    Memory (``policy``; ``preferred`` over several nodes becomes ``preferred-many``) goes on every node the
    rank's CPUs span that has memory in ``topology.allowed_nodes``. An unknown ``size`` plans one rank per
    node and is a PlanError for a rank past the nodes."""
    from .strategies import prefer_performance

    label = label or f"local rank {rank}"
    reasons = [] if reasons is None else reasons
    limit = _shared_limit(topology)
    nodes = _rank_nodes(topology, limit)
    if not nodes:
        raise PlanError(f"{label}: no NUMA node has a CPU this process may use ({format_cpulist(limit) or 'none'}); "
                        f"check the cpuset")
    count = len(nodes)
    if size is None:
        if rank >= count:
            raise PlanError(f"{label}: the local world size is unknown ({size_source}) and rank {rank} is past the "
                            f"{count} node(s) that one rank per node would use; set {SIZE_OVERRIDE}=N (the number "
                            f"of ranks on this machine)")
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
        split = "one node per rank" if size == count else \
            f"{count} nodes split into {size} groups of whole nodes, in order"
        reasons.append(f"CPU rank {rank} of {size} -> {group} ({split}): CPUs {format_cpulist(cpus)}")
    else:
        cores = [core for n in nodes for core in _cores_of(topology, topology.nodes[n].cpus & limit)]
        fast = prefer_performance(topology, frozenset().union(*cores), f"the CPUs of {count} node(s)", hybrid)
        if len(fast_cores := _cores_of(topology, fast)) >= size:
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
        mine = sorted({topology.cpus[c].node for c in cpus if c in topology.cpus and topology.cpus[c].node is not None})
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


def _rank_nics(topology: Any, index: int, own_devices: bool, size: int | None, env: Mapping[str, str],
               strict: Strictness, reasons: list[str], warnings: list[str]) -> tuple[FrozenMap[str, str],
                                                                                     tuple[str, ...]]:
    """``(variables to export, NIC names)`` for the rank on visible GPU ``index`` (``--nic``).

    Ties are split among the GPUs of the ranks that share the NICs: every GPU of the machine when each rank has
    its own (the same split on every rank), else the visible GPUs ``0 .. size - 1``. A variable already in
    ``env`` is left as it is (said in the reasons). NICs that cannot be read are a warning (strict: an error)."""
    from .iodevices import gpu_nics

    if own_devices:
        peers: tuple[Any, ...] = _all_gpus(topology, env) or tuple(topology.gpus)
    else:
        peers = tuple(g for g in topology.gpus if size is None or g.index < size) or tuple(topology.gpus)
    try:
        choice = gpu_nics(topology, index, peers=peers)
    except NumabindError as exc:
        return _no_nics(f"--nic: the NICs nearest GPU {index} could not be found: {exc}", strict, warnings)
    return _exports(choice, env, reasons)


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


def _cpu_rank_nics(topology: Any, rank: int, size: int | None, env: Mapping[str, str], strict: Strictness,
                   reasons: list[str], warnings: list[str]) -> tuple[FrozenMap[str, str], tuple[str, ...]]:
    """``--nic`` for a CPU rank: the NICs on its (first) node, else the nearest by node; ties split among the
    local ranks whose first node it is (every rank's share computed as :func:`plan_cpu_rank` does)."""
    from .iodevices import PciPlace, choose_nics, scan_nics

    count = size if size is not None else len(_rank_nodes(topology, _shared_limit(topology)))
    try:
        places = [PciPlace(f"local rank {r:06d}", (f"local rank {r:06d}",),
                           plan_cpu_rank(topology, r, count, policy=None)[1][0]) for r in range(max(count, rank + 1))]
        found = getattr(topology, "nics", None)
        choice = choose_nics(places[rank], places, scan_nics(topology.root) if found is None else found,
                             label=f"local rank {rank} (node {places[rank].numa_node})", sharers="ranks")
    except NumabindError as exc:
        return _no_nics(f"--nic: the NICs of local rank {rank} could not be found: {exc}", strict, warnings)
    return _exports(choice, env, reasons)


def place_rank(mode: Mode = "node", policy: NodePolicy | None = "bind", topology: Any = None, *,
               env: Mapping[str, str] | None = None, within: Iterable[int] | None = None,
               strict: Strictness | None = None, migrate: bool = False, device: str | None = None,
               nics: bool = False, within_affinity: bool = False) -> RankPlan:
    """Plan this process as the local rank its launcher started: rank, GPU, plan and every reason.

    ``mode`` and ``policy`` are those of :func:`numabind.plan_for_gpu`;
    ``env`` defaults to ``os.environ`` (the rank variables, ``NUMABIND_STRICT``,
    and, with ``topology=None``, ``NUMABIND_FSROOT`` and the visibility
    variables for discovery). The cpuset is the limit (:func:`rank_limit`):
    ``within`` is the affinity the launcher gave the process (default:
    ``topology.affinity``, the one it was started with, or a replayed machine's
    ``Cpus_allowed``), where it starts; the plan replaces it, as numactl does.
    ``within_affinity=True`` (``--within-affinity``) keeps the plan inside it:
    ``strict`` (default ``NUMABIND_STRICT``) then makes a plan outside it an
    error naming the launcher flag that frees the CPUs (``"partial"``: only
    when nothing of the plan is left); otherwise the plan is narrowed with a
    warning, and memory is never bound to a node the process cannot run on
    (with no CPU of the plan left: preferred on the nodes of the launcher's
    CPUs). A GPU with no NUMA node is an error in strict mode, else the rank is
    left unbound with a warning. Warnings are in ``warnings``, logged;
    ``cpu_rule`` says which rule applied.

    ``device``: ``"gpu"`` plans the rank's GPU (no visible GPU is a PlanError), ``"cpu"`` plans a rank
    without one (:func:`plan_cpu_rank`: its share of the nodes by the local world size; ``mode`` does not
    apply), None (the default) a GPU rank when a GPU is visible, else a CPU rank. ``nics=True`` also
    chooses the rank's nearest NICs (:func:`numabind.iodevices.gpu_nics`; a CPU rank's are those of its
    first node, else the nearest by node): ``RankPlan.env`` holds ``NCCL_IB_HCA``, ``UCX_NET_DEVICES`` and
    ``NCCL_SOCKET_IFNAME`` for them, less those ``env`` already sets, and the reasons name each NIC and its
    link class.
    """
    if device is not None and device not in DEVICES:
        raise PlanError(f"device {device!r} is not one of {', '.join(DEVICES)} (or None: a GPU when one is visible)")
    env = _env(env)
    strict = strict_from_env(env) if strict is None else strict
    rank, rank_source = local_rank(env)
    size, size_source = local_world_size(env)
    if size is not None and rank >= size:
        raise NumabindError(f"local rank {rank} (from {rank_source}) is not below the local world size {size} "
                            f"(from {size_source}); the launcher's variables disagree")
    if topology is None:
        topology = discover_for_env(env)
    label = f"local rank {rank} ({rank_source})"
    limit = rank_limit(topology, within, within_affinity)
    if device == "cpu" or (device is None and not topology.gpus):
        return _place_cpu_rank(topology, rank, rank_source, size, size_source, mode, policy, within, strict,
                               migrate, nics, device, label, limit, env, within_affinity)
    index, rule = rank_gpu(topology, rank, rank_source)
    gpu = next(g for g in topology.gpus if g.index == index)
    reasons = [f"{label} -> GPU {index} ({gpu.pci_address}): {rule}"]
    warnings: list[str] = []
    own = len(topology.gpus) == 1
    plan = plan_owned_gpus(topology, [index], label=label, mode=mode, policy=policy,
                           own_devices=own, size=size, size_source=size_source, env=env,
                           within=within, strict=strict, migrate=migrate, reasons=reasons, warnings=warnings,
                           within_affinity=within_affinity)
    exports: FrozenMap[str, str] = FrozenMap()
    chosen: tuple[str, ...] = ()
    if nics:
        exports, chosen = _rank_nics(topology, index, own, size, env, strict, reasons, warnings)
        plan = _with_reason(plan, "; ".join([plan.reason] + [r for r in reasons if r.startswith("--nic:")]))
    for w in warnings:
        log.warning("%s", w)
    log.info("%s -> GPU %d (%s), node %s, mode %s: %s", label, index, rule,
             gpu.numa_node if gpu.numa_node is not None else "unknown", mode, plan.describe())
    return RankPlan(
        rank=rank, rank_source=rank_source, local_world_size=size, local_world_size_source=size_source,
        gpu=index, gpu_rule=rule, pci_address=gpu.pci_address, numa_node=gpu.numa_node, mode=mode, policy=policy,
        plan=plan, launcher_cpus=limit[2], warnings=tuple(warnings), reasons=tuple(reasons), env=exports,
        nics=chosen, within_affinity=within_affinity, limit_cpus=limit[0], cpu_rule=limit[3],
    )


def _place_cpu_rank(topology: Any, rank: int, rank_source: str, size: int | None, size_source: str, mode: Mode,
                    policy: NodePolicy | None, within: Iterable[int] | None, strict: Strictness, migrate: bool,
                    nics: bool, device: str | None, label: str,
                    limit: tuple[frozenset[int], str, frozenset[int], str], env: Mapping[str, str],
                    within_affinity: bool) -> RankPlan:
    """:func:`place_rank` for a rank without a GPU (:func:`plan_cpu_rank`, then the launcher's narrowing)."""
    rule = "device='cpu': a CPU rank" if device == "cpu" else "no GPU is visible: a CPU rank"
    reasons = [f"{label}: {rule}"]
    warnings: list[str] = []
    if mode != "node":
        reasons.append(f"mode {mode} places GPU ranks; a CPU rank takes its share of the nodes")
    ideal, spans = plan_cpu_rank(topology, rank, size, size_source=size_source, policy=policy, label=label,
                                 reasons=reasons)
    exports: FrozenMap[str, str] = FrozenMap()
    chosen: tuple[str, ...] = ()
    if nics:
        exports, chosen = _cpu_rank_nics(topology, rank, size, env, strict, reasons, warnings)
    if migrate and ideal.mem_policy is not None:
        ideal = ideal.replace(migrate=True)
    reasons.append(limit[3])
    plan = _narrow(ideal, limit[0], limit[1], strict, warnings, label, topology, within_affinity)
    plan = _with_reason(plan, "; ".join(reasons + warnings))
    for w in warnings:
        log.warning("%s", w)
    log.info("%s -> CPU rank on nodes %s: %s", label, format_cpulist(spans), plan.describe())
    return RankPlan(
        rank=rank, rank_source=rank_source, local_world_size=size, local_world_size_source=size_source,
        gpu=None, gpu_rule=rule, pci_address=None, numa_node=spans[0] if len(spans) == 1 else None, mode=mode,
        policy=policy, plan=plan, launcher_cpus=limit[2], warnings=tuple(warnings), reasons=tuple(reasons),
        device="cpu", cpu_nodes=spans, env=exports, nics=chosen, within_affinity=within_affinity,
        limit_cpus=limit[0], cpu_rule=limit[3],
    )


def plan_for_rank(mode: Mode = "node", policy: NodePolicy | None = "bind", topology: Any = None, *,
                  env: Mapping[str, str] | None = None, within: Iterable[int] | None = None,
                  strict: Strictness | None = None, migrate: bool = False, device: str | None = None,
                  within_affinity: bool = False) -> Plan:
    """The :class:`~numabind.Plan` of this process's local rank (see :func:`place_rank`; ``device="cpu"``
    plans a rank without a GPU: its share of the machine's nodes or cores).

    ``numabind.bind_current(numabind.plan_for_rank())`` binds a script that a
    launcher started, when its launch line cannot change.
    """
    return place_rank(mode, policy, topology, env=env, within=within, strict=strict, migrate=migrate,
                      device=device, within_affinity=within_affinity).plan
