"""Ranks started by a launcher (torchrun, Slurm, MPI, PALS): local rank, local world size, the rank's GPU, its plan.

:func:`local_rank` reads the first set of ``LOCAL_RANK`` (torchrun), ``SLURM_LOCALID``,
``OMPI_COMM_WORLD_LOCAL_RANK`` (Open MPI), ``MPI_LOCALRANKID`` (MPICH/Hydra), ``PMI_LOCAL_RANK`` (Cray PMI) and
``PALS_LOCAL_RANKID`` (HPE PALS); :func:`local_world_size` the same launcher's ``LOCAL_WORLD_SIZE``;
``SLURM_STEP_TASKS_PER_NODE``, ``SLURM_TASKS_PER_NODE`` (this node's entry, by ``SLURM_NODEID``),
``SLURM_NTASKS_PER_NODE``; ``OMPI_COMM_WORLD_LOCAL_SIZE``; ``MPI_LOCALNRANKS``; ``PMI_LOCAL_SIZE``;
``PALS_LOCAL_SIZE``. ``NUMABIND_LOCAL_RANK`` / ``NUMABIND_LOCAL_WORLD_SIZE`` override them. A rank that is missing
or malformed is an error, never rank 0. :func:`place_rank` hands the rank's GPU (:func:`rank_gpu`), or its share
of a machine without one, to :mod:`numabind.strategies.ranks`. The rules in words: ``docs/howto/ranks.rst``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._base import Strictness, strict_from_env
from ._vendors import VISIBILITY_VARIABLES
from ._fs import ascii_int
from ._util import FrozenMap
from .cpulist import format_cpulist
from .errors import NumabindError, PlanError
from .plan import Plan
from .strategies import plan_gpu_share, plan_rank, rank_limit
from .strategies import UNBIND_FLAGS as UNBIND_FLAGS, plan_cpu_rank as plan_cpu_rank   # importable here, as before
from .strategies.common import ids_or_none, plan_fields

if TYPE_CHECKING:  # pragma: no cover
    from .types import Mode, NodePolicy

log = logging.getLogger(__name__)

__all__ = ["LAUNCHERS", "Launcher", "RankPlan", "discover_for_env", "local_rank", "local_world_size", "place_rank",
           "plan_cpu_rank", "plan_for_rank", "plan_owned_gpus", "rank_gpu", "rank_limit"]

#: Variables that override what the launcher says.
RANK_OVERRIDE = "NUMABIND_LOCAL_RANK"
SIZE_OVERRIDE = "NUMABIND_LOCAL_WORLD_SIZE"
#: Most digits accepted in a rank or size variable (a machine never runs a million ranks).
_MAX_DIGITS = 6
#: Variables that narrow the GPUs a process sees (stripped to list every GPU of the machine).
_DEVICE_FILTERS = tuple(name for names in VISIBILITY_VARIABLES.values() for name in names)
#: What ``device`` of :func:`place_rank` takes: None (a GPU rank when a GPU is visible, else a CPU rank).
DEVICES = ("gpu", "cpu")
#: How a rank's :exc:`PlanError` says to give the local world size when the launcher did not.
_SIZE_FIX = f"set {SIZE_OVERRIDE}=N (the number of ranks on this machine)"


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
    return next((launcher for launcher in LAUNCHERS if launcher.rank_var in env), None)


def local_rank(env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """``(local rank, the variable it came from)``; NumabindError when no launcher set one or it is malformed
    (a malformed variable is never skipped for a later one)."""
    env = _env(env)
    if RANK_OVERRIDE in env:
        return _number(RANK_OVERRIDE, env[RANK_OVERRIDE], "local rank"), RANK_OVERRIDE
    launcher = _launcher(env)
    if launcher is None:
        names = ", ".join(lch.rank_var for lch in LAUNCHERS)
        raise NumabindError(f"no local rank in the environment: none of {names} is set. Start the command through its "
                            f"launcher (torchrun, srun, mpirun, mpiexec) or set {RANK_OVERRIDE}=N")
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
    """``(ranks on this machine, where that came from)`` from the launcher that gave the local rank;
    ``(None, why)`` when it did not say. Zero or a malformed value is an error."""
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
    """``(visible GPU index, the rule that chose it)`` for local rank ``rank``: the only visible GPU, else the one
    whose index is the rank. :class:`PlanError` when no GPU is visible or the rank has none."""
    gpus = sorted(g.index for g in topology.gpus)
    if not gpus:
        raise PlanError(f"local rank {rank} (from {source}): no GPU is visible (check CUDA_VISIBLE_DEVICES / "
                        f"HIP_VISIBLE_DEVICES and that the driver is loaded); bind with explicit options instead")
    if len(gpus) == 1:
        return gpus[0], "the launcher gave this rank one visible GPU"
    if rank not in gpus:
        raise PlanError(f"local rank {rank} (from {source}) has no GPU: {len(gpus)} GPUs are visible "
                        f"({format_cpulist(gpus)}); start at most {len(gpus)} ranks per machine, or give each rank "
                        f"its own device (e.g. srun --gpus-per-task=1)")
    return rank, f"local rank {rank} indexes the {len(gpus)} visible GPUs"


# ------------------------------------------------------------------ the rank's plan
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
        """One line: ``local rank 1 (SLURM_LOCALID) -> GPU 1 on node 1: cpus 8-15, memory bind 1``."""
        if self.device == "cpu":
            shown = format_cpulist(self.cpu_nodes)
            where = f"CPU rank on node{'s' if len(self.cpu_nodes) > 1 else ''} {shown}"
        else:
            where = f"GPU {self.gpu}" + (f" on node {self.numa_node}" if self.numa_node is not None else " (no node)")
        return f"local rank {self.rank} ({self.rank_source}) -> {where}: {self.plan.describe()}"

    def to_dict(self) -> dict[str, Any]:
        same = ("local_world_size", "local_world_size_source", "gpu", "gpu_rule", "pci_address", "numa_node", "mode",
                "policy", "device")
        return {"local_rank": self.rank, "local_rank_source": self.rank_source,
                **{name: getattr(self, name) for name in same},
                "cpu_nodes": list(self.cpu_nodes), "nics": list(self.nics), "env": dict(self.env),
                "launcher_cpus": ids_or_none(self.launcher_cpus), "within_affinity": self.within_affinity,
                "limit_cpus": ids_or_none(self.limit_cpus), "cpu_rule": self.cpu_rule, "plan": plan_fields(self.plan),
                "placed": self.plan.cpus is not None or self.plan.mem_policy is not None,
                "warnings": list(self.warnings), "reasons": list(self.reasons)}


def discover_for_env(env: Mapping[str, str]) -> Any:
    """The machine under ``env``'s ``NUMABIND_FSROOT`` (the live one when unset), as the launchers see it."""
    from ._fs import FsReader
    from .topology import discover_from

    return discover_from(FsReader(env.get("NUMABIND_FSROOT") or "/"), env=env)


def _unfiltered(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the variables that narrow the GPUs a process sees."""
    return {k: v for k, v in env.items() if k not in _DEVICE_FILTERS}


def plan_owned_gpus(topology: Any, indices: Iterable[int], *, env: Mapping[str, str] | None = None,
                    **options: Any) -> Plan:
    """:func:`numabind.strategies.plan_gpu_share` under ``env`` (default ``os.environ``)."""
    return plan_gpu_share(topology, indices, unfiltered_env=_unfiltered(_env(env)), **options)


def place_rank(mode: Mode = "node", policy: NodePolicy | None = "bind", topology: Any = None, *,
               env: Mapping[str, str] | None = None, within: Iterable[int] | None = None,
               strict: Strictness | None = None, migrate: bool = False, device: str | None = None,
               nics: bool = False, within_affinity: bool = False) -> RankPlan:
    """Plan this process as the local rank its launcher started: rank, GPU, plan and every reason.

    ``mode`` and ``policy`` as :func:`numabind.plan_for_gpu`; ``env`` defaults to ``os.environ``. ``within``, the
    launcher's affinity, limits the plan only with ``within_affinity=True`` (:func:`numabind.strategies.rank_limit`);
    ``strict`` (default ``NUMABIND_STRICT``) refuses what lenient mode narrows with a warning (logged).
    ``device``: ``"gpu"``, ``"cpu"`` (a share of the machine) or None (a GPU rank when a GPU is visible).
    ``nics=True`` puts the nearest NICs' NCCL/UCX variables in ``RankPlan.env``, less those ``env`` sets.
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
    gpu = None
    if device == "cpu" or (device is None and not topology.gpus):
        rule = "device='cpu': a CPU rank" if device == "cpu" else "no GPU is visible: a CPU rank"
        reasons = [f"{label}: {rule}"]
    else:
        index, rule = rank_gpu(topology, rank, rank_source)
        gpu = next(g for g in topology.gpus if g.index == index)
        reasons = [f"{label} -> GPU {index} ({gpu.pci_address}): {rule}"]
    placed = plan_rank(topology, rank, size, None if gpu is None else gpu.index, label=label, reasons=reasons,
                       size_source=size_source, size_fix=_SIZE_FIX, own_devices=len(topology.gpus) == 1,
                       unfiltered_env=_unfiltered(env), mode=mode, policy=policy, env=env, within=within,
                       strict=strict, migrate=migrate, nics=nics, within_affinity=within_affinity)
    spans = placed.cpu_nodes
    node = gpu.numa_node if gpu is not None else spans[0] if len(spans) == 1 else None
    for w in placed.warnings:
        log.warning("%s", w)
    if gpu is None:
        log.info("%s -> CPU rank on nodes %s: %s", label, format_cpulist(spans), placed.plan.describe())
    else:
        log.info("%s -> GPU %d (%s), node %s, mode %s: %s", label, gpu.index, rule,
                 node if node is not None else "unknown", mode, placed.plan.describe())
    return RankPlan(
        rank=rank, rank_source=rank_source, local_world_size=size, local_world_size_source=size_source,
        gpu=None if gpu is None else gpu.index, gpu_rule=rule, pci_address=None if gpu is None else gpu.pci_address,
        numa_node=node, mode=mode, policy=policy, plan=placed.plan, launcher_cpus=limit.launcher_cpus,
        warnings=placed.warnings, reasons=placed.reasons, device="gpu" if gpu is not None else "cpu",
        cpu_nodes=placed.cpu_nodes, env=placed.env, nics=placed.nics, within_affinity=within_affinity,
        limit_cpus=limit.cpus, cpu_rule=limit.rule,
    )


def plan_for_rank(mode: Mode = "node", policy: NodePolicy | None = "bind", topology: Any = None, *,
                  env: Mapping[str, str] | None = None, within: Iterable[int] | None = None,
                  strict: Strictness | None = None, migrate: bool = False, device: str | None = None,
                  within_affinity: bool = False) -> Plan:
    """The :class:`~numabind.Plan` of this process's local rank (see :func:`place_rank`):
    ``numabind.bind_current(numabind.plan_for_rank())`` binds a script whose launch line cannot change.
    """
    return place_rank(mode, policy, topology, env=env, within=within, strict=strict, migrate=migrate,
                      device=device, within_affinity=within_affinity).plan
