"""A module drop-in for vLLM's ``vllm.utils.numa_utils``, bound in-process by numabind.

Every function of vLLM's module that vLLM imports or its tests patch is here with vLLM's signature, return type
and exceptions, its numactl option strings exactly as vLLM computes them; children are bound at birth by numabind
instead of numactl (:doc:`/howto/compat`). vLLM is never imported.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib
import logging
import multiprocessing
import multiprocessing.spawn
import os
import shutil  # noqa: F401 - vLLM's tests patch numa_utils.shutil.which (the probe's)
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path  # noqa: F401 - vLLM's tests patch Path.read_text through numa_utils.Path
from typing import Any

from ..auto import auto_plan_available
from ..cpulist import format_cpulist
from ..errors import NumabindError, PlanError
from ..plan import Plan
from . import (
    WRAPPER_ARGS_ENV,
    WRAPPER_PYTHON_ENV,
    NumaBindingUnavailable,
    bind_children,
    cannot_apply,
    current_topology,
    mem_policy,
    open_libnuma,
    refresh_topology,
    strip_memory_args,
    wrapper_environment,
    wrapper_executable,
)
from ._vllm_pct import (  # noqa: F401 - the PCT gate under vLLM's names (its tests read and clear them here)
    NODE_CPULIST_PATH as _NODE_CPULIST_PATH,
    PCT_CAPABLE_SKUS as _PCT_CAPABLE_SKUS,
    PCT_HIGHEST_PERF_PATH as _PCT_HIGHEST_PERF_PATH,
    PROC_CPUINFO_PATH as _PROC_CPUINFO_PATH,
    PctSku as _PctSku,
    maybe_get_pct_cpu_binding as _maybe_get_pct_cpu_binding,
    pct_sku_config as _pct_sku_config,
    pct_sku_from_cpuinfo as _pct_sku_from_cpuinfo,
)

#: vLLM's module has psutil as an attribute (its tests patch through it); nothing here reads through it.
psutil: Any
try:
    psutil = importlib.import_module("psutil")
except ImportError:  # pragma: no cover - depends on the environment
    psutil = None

__all__ = [
    "auto_bind_decision",
    "can_auto_bind",
    "configure_subprocess",
    "current_topology",
    "enginecore_plan",
    "get_auto_numa_nodes",
    "get_libnuma",
    "log_current_affinity_state",
    "refresh_topology",
    "worker_plan",
]

#: vLLM's logger name for this module: a child of ``vllm``, so vLLM's logging configuration applies.
logger = logging.getLogger("vllm.utils.numa_utils")

#: The variables vLLM's wrapper (and numabind's) reads its numactl options and Python interpreter from.
_NUMACTL_ARGS_ENV = WRAPPER_ARGS_ENV
_NUMACTL_PYTHON_EXECUTABLE_ENV = WRAPPER_PYTHON_ENV


class _Envs:
    """vLLM's ``envs`` as far as this module reads it: each attribute is the variable's value now
    (``VLLM_WORKER_MULTIPROC_METHOD`` defaults to vLLM's ``fork``); tests may set attributes."""

    _DEFAULTS = {"VLLM_WORKER_MULTIPROC_METHOD": "fork"}     # vLLM's default start method

    def __getattr__(self, name: str) -> str:
        if name not in self._DEFAULTS:
            raise AttributeError(name)
        return os.environ.get(name, self._DEFAULTS[name])


envs: Any = _Envs()


# ----------------------------------------------------------------------------- libnuma and the memory policy
@functools.cache
def get_libnuma() -> ctypes.CDLL | None:
    """libnuma opened with ctypes (``libnuma.so``, then ``libnuma.so.1``), or None; numabind does not use it."""
    return open_libnuma(logger)


def _get_mempolicy() -> int | None:
    """The calling thread's memory-policy mode as the kernel numbers it, or None when unreadable."""
    from ..backends import MPOL_MODES   # the kernel's numbers, read where numabind reads them

    policy = mem_policy(logger)
    return None if policy is None else MPOL_MODES.get(policy)


def _can_set_mempolicy() -> bool:
    """Whether this process can use the memory-policy calls (its policy can be read)."""
    return _get_mempolicy() is not None


# ----------------------------------------------------------------------------- automatic detection
def _auto_numa_problem(require_unbound_process: bool) -> str | None:
    """Why automatic GPU-to-NUMA detection should not be attempted here, or None."""
    try:
        topology = current_topology()
    except Exception as e:  # noqa: BLE001 - detection never fails startup
        return f"the machine could not be discovered: {e}"
    if not topology.gpus:
        return "no GPU is visible (check CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES)"
    if require_unbound_process and not any(g.vendor in ("nvidia", "amd") for g in topology.gpus):
        return "automatic NUMA binding is only done for NVIDIA and AMD GPUs (vLLM's CUDA and ROCm platforms)"
    ok, why = auto_plan_available(topology, mem_policy=None if require_unbound_process else "default")
    return None if ok else why


def _is_auto_numa_available(verbose: bool = True, *, require_unbound_process: bool = False) -> bool:
    """Whether automatic GPU-to-NUMA detection should be attempted (never raises); the reason for a "no" is
    logged at WARNING when ``verbose`` (the user asked for binding), else at DEBUG."""
    problem = _auto_numa_problem(require_unbound_process)
    if problem is not None:
        (logger.warning if verbose else logger.debug)("NUMA nodes of the GPUs are not detected: %s", problem)
    return problem is None


def get_auto_numa_nodes() -> list[int] | None:
    """The NUMA node of every visible GPU, in visible order, or None when detection is not possible."""
    if not _is_auto_numa_available():
        return None
    nodes = [g.numa_node for g in sorted(current_topology().gpus, key=lambda g: g.index)]
    logger.info("NUMA nodes of the visible GPUs, detected: %s", nodes)
    return nodes


# ----------------------------------------------------------------------------- GPU index and nodes
def _local_launch(parallel_config: Any) -> bool:
    pc = parallel_config
    return (pc.distributed_executor_backend not in ("ray", "external_launcher")
            and getattr(pc, "data_parallel_backend", "mp") != "ray"
            and getattr(pc, "nnodes_within_dp", 1) == 1)


def _shard_size(parallel_config: Any) -> int:
    pp = getattr(parallel_config, "pipeline_parallel_size", None)
    tp = getattr(parallel_config, "tensor_parallel_size", None)
    if pp is not None and tp is not None:
        return int(pp) * int(tp)
    return int(parallel_config.world_size)


def _dp_local_rank(parallel_config: Any, dp_local_rank: int | None) -> int:
    if dp_local_rank is None:
        dp_local_rank = getattr(parallel_config, "data_parallel_rank_local", None)
    if dp_local_rank is None:
        dp_local_rank = getattr(parallel_config, "data_parallel_index", None)
    return int(dp_local_rank or 0)


def _get_gpu_index(parallel_config: Any, local_rank: int, dp_local_rank: int | None = None) -> int:
    """The visible GPU of a worker: ``ParallelConfig.get_local_gpu_index`` where vLLM has it, else
    vLLM's formula (local rank plus DP rank times TP x PP, for local launches)."""
    get = getattr(parallel_config, "get_local_gpu_index", None)
    if callable(get):
        return int(get(local_rank, dp_local_rank))
    if not _local_launch(parallel_config):
        return local_rank
    return local_rank + _dp_local_rank(parallel_config, dp_local_rank) * _shard_size(parallel_config)


def _get_numa_node(parallel_config: Any, gpu_index: int) -> int:
    """The NUMA node of visible GPU ``gpu_index``; detected nodes are stored in ``numa_bind_nodes``."""
    nodes = parallel_config.numa_bind_nodes
    if nodes is None:
        nodes = get_auto_numa_nodes()
        if nodes is None:
            raise NumaBindingUnavailable(
                "NUMA binding is on (--numa-bind) but the NUMA node of each visible GPU could not be "
                "detected (the warning above says why); pass --numa-bind-nodes with one node per visible "
                "GPU, or turn --numa-bind off")
        parallel_config.numa_bind_nodes = list(nodes)
    if gpu_index >= len(nodes):
        raise PlanError(
            f"GPU index {gpu_index} is beyond numa_bind_nodes {list(nodes)} ({len(nodes)} entries); "
            f"--numa-bind-nodes needs one node per visible GPU")
    return int(nodes[gpu_index])


def _get_cpu_binding(parallel_config: Any, gpu_index: int, numa_nodes: list[int]) -> str | None:
    """The CPU list (numactl syntax) for a process, or None to bind to its nodes' CPUs."""
    cpu_bindings = parallel_config.numa_bind_cpus
    if cpu_bindings is None:
        pct = _maybe_get_pct_cpu_binding(numa_nodes)
        return None if pct is None else ",".join(map(str, pct))
    if gpu_index >= len(cpu_bindings):
        raise PlanError(
            f"GPU index {gpu_index} is beyond numa_bind_cpus ({len(cpu_bindings)} entries); "
            f"--numa-bind-cpus needs one CPU list per visible GPU")
    return str(cpu_bindings[gpu_index])


def _get_enginecore_numa_nodes(parallel_config: Any, dp_local_rank: int | None = None) -> list[int]:
    """The sorted, distinct NUMA nodes of the GPUs of an EngineCore's DP shard."""
    nodes = parallel_config.numa_bind_nodes
    if nodes is None:
        _get_numa_node(parallel_config, 0)  # detects and stores them
        nodes = parallel_config.numa_bind_nodes
    if _local_launch(parallel_config):
        start = _get_gpu_index(parallel_config, 0, dp_local_rank)
        shard = range(start, min(start + _shard_size(parallel_config), len(nodes)))
    else:
        shard = range(len(nodes))
    if not shard:
        return [nodes[0]]
    return sorted({nodes[i] for i in shard})


# ----------------------------------------------------------------------------- numactl option strings
def _numactl_options(parallel_config: Any, who: str, cpus: str | None, nodes: list[int], where: str) -> str:
    """numactl options binding ``who`` to ``cpus`` (None: the CPUs of ``nodes``) and memory to ``nodes``
    (preferred under automatic binding); logged at INFO as vLLM logs them."""
    node_list = ",".join(map(str, nodes))
    if cpus is not None:
        logger.info("Binding %s to CPUs %s and %s %s", who, cpus, where, node_list)
        cpu_arg = f"--physcpubind={cpus}"
    else:
        logger.info("Binding %s to %s %s", who, where, node_list)
        cpu_arg = f"--cpunodebind={node_list}"
    auto = getattr(parallel_config, "_numa_bind_auto", False)
    memory = ("preferred" if len(nodes) == 1 else "preferred-many") if auto else "membind"
    return f"{cpu_arg} --{memory}={node_list}"


def _get_numactl_worker_args(parallel_config: Any, local_rank: int, dp_local_rank: int | None = None) -> str:
    """numactl options for one TP/PP worker: its GPU's node, or its explicit or PCT CPUs."""
    gpu_index = _get_gpu_index(parallel_config, local_rank, dp_local_rank)
    node = _get_numa_node(parallel_config, gpu_index)
    cpus = _get_cpu_binding(parallel_config, gpu_index, [node])
    who = f"worker subprocess (local_rank={local_rank}, gpu_index={gpu_index})"
    return _numactl_options(parallel_config, who, cpus, [node], "NUMA node")


def _get_numactl_enginecore_args(parallel_config: Any, local_rank: int,
                                 dp_local_rank: int | None = None) -> str:
    """numactl options for an EngineCore: every node of its shard, or the union of their PCT priority CPUs
    (per-worker ``--numa-bind-cpus`` lists are not used: the shard's nodes contain them all)."""
    nodes = _get_enginecore_numa_nodes(parallel_config, dp_local_rank)
    pct = None if parallel_config.numa_bind_cpus is not None else _maybe_get_pct_cpu_binding(nodes)
    cpus = None if pct is None else ",".join(map(str, pct))
    return _numactl_options(parallel_config, f"EngineCore subprocess (local_rank={local_rank})", cpus, nodes,
                            "NUMA nodes")


def _get_numactl_args(vllm_config: Any, local_rank: int, dp_local_rank: int | None = None,
                      process_kind: str = "worker") -> str | None:
    """The numactl options for a child of ``process_kind``, or None when NUMA binding is off."""
    pc = vllm_config.parallel_config
    if not pc.numa_bind:
        return None
    if process_kind == "EngineCore":
        return _get_numactl_enginecore_args(pc, local_rank, dp_local_rank)
    if process_kind == "worker":
        return _get_numactl_worker_args(pc, local_rank, dp_local_rank)
    raise PlanError(f"Unknown process_kind {process_kind!r}; expected 'worker' or 'EngineCore'.")


def _probe_numactl_args(numactl_args: str) -> bool:
    """Whether ``numactl_args`` can be applied in this process (:func:`numabind.compat.cannot_apply`)."""
    problem = cannot_apply(numactl_args)
    if problem is not None:
        logger.debug("NUMA binding %r cannot be applied here: %s", numactl_args, problem)
    return problem is None


def _resolve_numactl_args(numactl_args: str) -> str:
    """``numactl_args``, or without its memory policy, or ``""``: the first that can be applied (a step down
    is one WARNING naming what was refused, why, and what is used instead)."""
    first = cannot_apply(numactl_args)
    if first is None:
        return numactl_args
    cpu_only = strip_memory_args(numactl_args)
    chosen = ""
    if cpu_only and cpu_only != numactl_args and cannot_apply(cpu_only) is None:
        chosen = cpu_only
    logger.warning("numactl options %r cannot be applied in this process (%s); falling back to %s. "
                   "In a container, add --cap-add SYS_NICE for full NUMA binding.",
                   numactl_args, first, repr(chosen) if chosen else "no NUMA binding")
    return chosen


# ----------------------------------------------------------------------------- the automatic gate
def auto_bind_decision(parallel_config: Any, local_rank: int,
                       dp_local_rank: int | None = None) -> tuple[bool, str]:
    """Whether vLLM's automatic binding should happen here, and why; stores the detected nodes. vLLM's
    conditions (spawn start method, local mp/uni launchers, no ``--device-ids``, an unbound process with the
    default memory policy, a node with CPUs for every visible GPU), without needing numactl. Never raises."""
    pc = parallel_config
    method = envs.VLLM_WORKER_MULTIPROC_METHOD
    if method != "spawn":
        return False, f"automatic NUMA binding needs the spawn start method (VLLM_WORKER_MULTIPROC_METHOD={method})"
    if pc.distributed_executor_backend not in ("mp", "uni") or getattr(pc, "data_parallel_backend", "mp") != "mp":
        return False, "automatic NUMA binding needs vLLM's local mp/uni launchers"
    if getattr(pc, "assigned_physical_gpu_ids", None) is not None:
        return False, "automatic NUMA binding does not follow --device-ids remapping"
    try:
        problem = _auto_numa_problem(require_unbound_process=True)
        if problem is not None:
            return False, problem
        nodes = get_auto_numa_nodes()
        if not nodes:
            return False, "no GPU-to-NUMA mapping was detected"
        topology = current_topology()
        if len(nodes) != len(topology.gpus) or any(not isinstance(n, int) or n < 0 for n in nodes):
            return False, f"the GPU-to-NUMA mapping {nodes} does not give a node to each of the {len(topology.gpus)} GPUs"
        last_rank = max(local_rank, pc.local_world_size - 1)
        last_dp = (getattr(pc, "data_parallel_rank_local", None) or 0) + max(pc.data_parallel_size_local - 1, 0)
        last_gpu = max(_get_gpu_index(pc, last_rank, dp_local_rank), _get_gpu_index(pc, last_rank, last_dp))
        if last_gpu >= len(nodes):
            return False, f"local workers reach GPU index {last_gpu}, beyond the {len(nodes)} visible GPUs"
        empty = sorted(n for n in set(nodes) if n not in topology.nodes or not topology.nodes[n].cpus)
        if empty:
            return False, f"NUMA nodes {format_cpulist(empty)} have no CPUs"
        pc.numa_bind_nodes = list(nodes)
        return True, f"GPUs on NUMA nodes {nodes}"
    except Exception as e:  # noqa: BLE001 - the gate never fails startup
        logger.debug("the automatic NUMA binding check failed", exc_info=True)
        return False, f"the check failed: {e}"


def can_auto_bind(parallel_config: Any, local_rank: int, dp_local_rank: int | None = None) -> bool:
    """vLLM's ``_can_auto_bind``: True when automatic binding should happen (the reason at DEBUG)."""
    ok, why = auto_bind_decision(parallel_config, local_rank, dp_local_rank)
    logger.debug("automatic NUMA binding %s: %s", "possible" if ok else "not possible", why)
    return ok


_can_auto_bind = can_auto_bind


# ----------------------------------------------------------------------------- starting children
@contextlib.contextmanager
def configure_subprocess(vllm_config: Any, local_rank: int, dp_local_rank: int | None = None,
                         process_kind: str = "worker") -> Iterator[None]:
    """Children started inside are bound at birth to the NUMA binding vLLM computes for them.

    ``numa_bind=None`` decides automatic binding once, here in the launcher. A binding that cannot be applied
    loses its memory policy, then its CPUs (WARNINGs); an unknown ``process_kind`` is a ValueError when
    binding is on.
    """
    pc = vllm_config.parallel_config
    if pc.numa_bind is None:
        pc.numa_bind = _can_auto_bind(pc, local_rank, dp_local_rank)
        pc._numa_bind_auto = pc.numa_bind
        if not pc.numa_bind:
            logger.info("Automatic NUMA binding is not possible here; children start unbound "
                        "(the reason is logged at DEBUG).")
    if not pc.numa_bind:
        yield
        return
    numactl_args = _get_numactl_args(vllm_config, local_rank, dp_local_rank, process_kind) or ""
    numactl_args = _resolve_numactl_args(numactl_args)
    if not numactl_args:
        if getattr(pc, "_numa_bind_auto", False):
            pc.numa_bind = False
            pc.numa_bind_nodes = None
            pc._numa_bind_auto = False
        yield
        return
    _note_start_method()
    try:
        plan = Plan.from_numactl_args(numactl_args, topology=current_topology())
    except PlanError as e:   # the probe accepted it, the machine changed since (affinity, CPUs offline)
        logger.warning("NUMA binding %r was accepted by the probe but cannot be bound now (%s); the %s "
                       "subprocess (local_rank=%s) starts unbound", numactl_args, e, process_kind, local_rank)
        yield
        return
    logger.debug("Starting %s subprocess (local_rank=%s, dp_local_rank=%s) bound at birth to %s (%s)",
                 process_kind, local_rank, dp_local_rank, numactl_args, plan.describe())
    python_executable = os.fsdecode(multiprocessing.spawn.get_executable())
    with _set_numa_wrapper_env(numactl_args, python_executable), bind_children(plan, logger):
        yield


_method_noted = threading.Event()


def _note_start_method() -> None:
    """Say once per process that children are bound under a start method vLLM does not bind."""
    method = envs.VLLM_WORKER_MULTIPROC_METHOD
    if method != "spawn" and not _method_noted.is_set():
        _method_noted.set()
        logger.info("VLLM_WORKER_MULTIPROC_METHOD=%s: vLLM itself binds only spawned children (it warns and "
                    "starts them unbound); numabind binds them at birth with this start method too", method)


def worker_plan(parallel_config: Any, local_rank: int, dp_local_rank: int | None = None) -> Plan:
    """The :class:`numabind.Plan` of one worker (its numactl options resolved on this machine)."""
    args = _get_numactl_worker_args(parallel_config, local_rank, dp_local_rank)
    return Plan.from_numactl_args(args, topology=current_topology())


def enginecore_plan(parallel_config: Any, local_rank: int, dp_local_rank: int | None = None) -> Plan:
    """The :class:`numabind.Plan` of an EngineCore (its numactl options resolved on this machine)."""
    args = _get_numactl_enginecore_args(parallel_config, local_rank, dp_local_rank)
    return Plan.from_numactl_args(args, topology=current_topology())


# ----------------------------------------------------------------------------- what a process got
def _show(binding: Any) -> list[str]:
    """numactl --show's fields from a :class:`numabind.Binding`."""
    lines = [f"policy: {binding.mem_policy or 'unknown'}",
             "physcpubind: " + " ".join(map(str, sorted(binding.cpus)))]
    nodes = binding.mem_nodes if binding.mem_policy not in (None, "default", "local") else binding.mems_allowed
    key = "preferred" if binding.mem_policy == "preferred" else "membind"
    lines.append(f"{key}: " + " ".join(map(str, sorted(nodes))))
    return lines


def _log_numactl_show(label: str) -> bool:
    """Log (DEBUG) this process's CPU affinity and memory policy as ``numactl --show`` prints them (numabind
    reads them itself without numactl); False when they cannot be read."""
    try:
        result = subprocess.run(["numactl", "--show"], check=True, capture_output=True, text=True)
    except FileNotFoundError:
        result = None
    except (OSError, subprocess.SubprocessError) as e:
        logger.debug("`numactl --show` failed for %s (%s); numabind reads the binding itself", label, e)
        result = None
    if result is not None:
        fields = [line.strip() for line in str(result.stdout).splitlines() if line.strip()]
        if fields:
            logger.debug("%s affinity: %s", label, ", ".join(fields))
            return True
    from ..verify import current_binding

    try:
        binding = current_binding()
    except NumabindError as e:
        logger.warning("The NUMA binding of %s cannot be read: %s", label, e)
        return False
    logger.debug("%s affinity: %s", label, ", ".join(_show(binding)))
    return True


def log_current_affinity_state(label: str) -> None:
    """Log (DEBUG) the CPU affinity and memory policy this process runs with."""
    _log_numactl_show(label)


# ----------------------------------------------------------------------------- vLLM's numactl plumbing
def _get_numactl_executable() -> tuple[str, str]:
    """numabind's wrapper (:func:`numabind.compat.wrapper_executable`) and a line describing it."""
    path = wrapper_executable()
    return path, (f"{path} via {_NUMACTL_ARGS_ENV} and {_NUMACTL_PYTHON_EXECUTABLE_ENV} "
                  f"(numabind binds the child, no numactl needed)")


@contextlib.contextmanager
def _set_numa_wrapper_env(numactl_args: str, python_executable: str) -> Iterator[None]:
    """The wrapper's two variables set for the block (:func:`numabind.compat.wrapper_environment`)."""
    with wrapper_environment(numactl_args, python_executable):
        yield


@contextlib.contextmanager
def _mp_set_executable(executable: str, debug_str: str) -> Iterator[None]:
    """Inside the block multiprocessing spawns children through ``executable`` (restored on exit); under
    another ``VLLM_WORKER_MULTIPROC_METHOD`` than spawn it warns and changes nothing, as vLLM does."""
    method = envs.VLLM_WORKER_MULTIPROC_METHOD
    if method != "spawn":
        logger.warning("multiprocessing's executable is not replaced by %s: VLLM_WORKER_MULTIPROC_METHOD=%s, and "
                       "only spawned children run it; set VLLM_WORKER_MULTIPROC_METHOD=spawn", executable, method)
        yield
        return
    old = os.fsdecode(multiprocessing.spawn.get_executable())
    multiprocessing.spawn.set_executable(executable)
    logger.debug("multiprocessing's spawn executable %s -> %s (%s)", old, executable, debug_str)
    try:
        yield
    finally:
        now = os.fsdecode(multiprocessing.spawn.get_executable())
        multiprocessing.spawn.set_executable(old)
        if now != executable:
            logger.warning("multiprocessing's spawn executable was changed to %s inside the NUMA binding block; "
                           "restored to %s", now, old)
