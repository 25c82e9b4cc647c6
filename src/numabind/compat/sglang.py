"""A drop-in for SGLang's ``sglang.srt.utils.numa_utils``, bound in-process by numabind, with SGLang's
signatures, environment and logger (``docs/howto/sglang.rst``). The functions here call each other through this
module, so what the host patches on it is what runs; its parts sit beside it (``_sglang_*.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import importlib
import math
import multiprocessing
import multiprocessing.spawn
import os
import shutil  # noqa: F401 - SGLang's tests patch numa_utils.shutil.which and .subprocess.run (the probe's)
import subprocess  # noqa: F401
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from .._fs import FsReader
from ..bind import BindReport
from ..cpulist import format_cpulist
from ..errors import NumabindError, PlanError
from ..plan import Plan
from . import (
    NumaBindingUnavailable,
    bind_children,
    cannot_apply,
    current_topology,
    forward_warnings,
    mem_policy,
    on_live_machine,
    open_libnuma,
    refresh_topology,
    wrapper_environment,
    wrapper_executable,
)
from . import strip_memory_args as _strip_memory_args  # SGLang's name
from ._sglang_base import NumaListError, crash_on_failure, env_bool, fail, logger, process_cpus
from ._sglang_cpu import init_threads_binding
from ._sglang_memory import (InterleavedPinnedBuffer, allocate_interleaved_pinned_table, get_shm_numa_distribution,
                             numa_interleave_memory, numa_memory_nodes, numa_page_counts, temp_membind)
from ._sglang_npu import (NpuAffinityAssignment, NpuAffinityError, NpuTopology, NpuTopologyEntry,
                          query_npu_smi_topology, resolve_npu_affinity_assignment, resolve_physical_npu_id)
from ._sglang_xpu import (  # the XPU leaves under SGLang's names: _xpu_pci_address calls them through here
    integrated as _integrated,
    list_xpu_pci_addresses as _list_xpu_pci_addresses,
    pci_key as _pci_key,
    xpu_runtime_count as _xpu_runtime_count,
    xpu_visible_device_indices as _xpu_visible_device_indices,
)

__all__ = [
    "InterleavedPinnedBuffer",
    "NpuAffinityAssignment",
    "NpuAffinityError",
    "NpuTopology",
    "NpuTopologyEntry",
    "NumaListError",
    "query_npu_smi_topology",
    "resolve_npu_affinity_assignment",
    "resolve_physical_npu_id",
    "allocate_interleaved_pinned_table",
    "get_shm_numa_distribution",
    "numa_interleave_memory",
    "numa_memory_nodes",
    "numa_page_counts",
    "temp_membind",
    "configure_subprocess",
    "current_topology",
    "get_libnuma",
    "get_numa_node_if_available",
    "init_threads_binding",
    "numa_bind_to_node",
    "refresh_topology",
]

#: ``CUDA_VISIBLE_DEVICES`` when this module was imported (SGLang's launcher imports it before it narrows the
#: variable per child): what GPU ids of ``--numa-node`` refer to.
_LAUNCH_CUDA_VISIBLE_DEVICES = os.environ.get("CUDA_VISIBLE_DEVICES")

#: SGLang's platform flags. None (the default) means: an NVIDIA (``_is_cuda``) or Intel (``_is_xpu``) GPU is
#: visible to numabind's discovery; True or False overrides it (SGLang sets them from torch at import).
_is_cuda: bool | None = None
_is_xpu: bool | None = None
#: The directory whose presence makes a machine NUMA for SGLang (a second node), and the nodes NVML's mask spans.
_NODE1_PATH = "/sys/devices/system/node/node1"
_NODE_GLOB = "/sys/devices/system/node/node[0-9]*"
#: Where SGLang reads an Intel GPU's NUMA node.
_PCI_NUMA_NODE = "/sys/bus/pci/devices/{}/numa_node"


# ----------------------------------------------------------------------------- failures
def _handle_numa_bind_failure(node: int | None = None, allowed_cpus: Iterable[int] | None = None,
                              gpu_id: int | None = None, *, reason: str | None = None) -> None:
    """SGLang's failure (:func:`fail`) of a binding that could not be applied at all; without ``reason``, a node
    with no CPU in ``allowed_cpus``."""
    if reason is None:
        on = f" for GPU {gpu_id}" if gpu_id is not None else ""
        reason = (f"NUMA node {node} has none of the CPUs this process may use "
                  f"({format_cpulist(sorted(allowed_cpus or ()))}); skipping NUMA binding{on}.")
    fail(reason)


# ----------------------------------------------------------------------------- libnuma and availability
@functools.cache
def get_libnuma() -> ctypes.CDLL | None:
    """libnuma opened with ctypes (``libnuma.so``, then ``libnuma.so.1``), or None (numabind does not use it)."""
    return open_libnuma(logger)


def _can_set_mempolicy() -> bool:
    """Whether this process can use the memory-policy calls (its policy can be read)."""
    return mem_policy(logger) is not None


def _platform(flag: bool | None, vendor: str) -> bool:
    """SGLang's platform flag when set, else whether numabind's discovery sees a GPU of ``vendor``."""
    if flag is not None:
        return bool(flag)
    try:
        return any(g.vendor == vendor for g in current_topology().gpus)
    except Exception as e:  # noqa: BLE001 - detection never fails startup
        logger.warning("The machine could not be discovered, skipping NUMA binding: %s", e)
        return False


def _on_xpu() -> bool:
    """Whether GPU ids are Intel XPU ids: ``_is_xpu`` says so, or (both flags automatic) Intel GPUs are
    visible and NVIDIA ones are not."""
    if _is_xpu is not None:
        return bool(_is_xpu)
    return not _platform(_is_cuda, "nvidia") and _platform(_is_xpu, "intel")


def _is_numa_available() -> bool:
    """Whether SGLang's automatic NUMA binding applies here: SGLang's CUDA or XPU platform, a second NUMA node
    and memory-policy calls permitted (numactl is not required)."""
    if not (_platform(_is_cuda, "nvidia") or _platform(_is_xpu, "intel")):
        return False
    if not (os.path.isdir(_NODE1_PATH) if on_live_machine() else _replayed_isdir(_NODE1_PATH)):
        return False
    if not _can_set_mempolicy():
        logger.warning("This process may not use NUMA memory policies; skipping NUMA binding of the GPUs. "
                       "In a container, add --cap-add SYS_NICE.")
        return False
    return True


def _replayed_isdir(path: str) -> bool:
    """Whether ``path`` is a directory of the replayed machine, read as discovery reads the current topology's
    root (:class:`numabind._fs.FsReader`); False when the root cannot be read."""
    try:
        return FsReader(current_topology().root).isdir(path.lstrip("/"))
    except NumabindError:
        return False


def _gpu(device_id: int) -> Any | None:
    return next((g for g in current_topology().gpus if g.index == device_id), None)


def _query_numa_node_for_gpu(device_id: int) -> list[int]:
    """The NUMA nodes GPU ``device_id`` has memory affinity with, sorted; ``[]`` when unknown. NVML's answer
    where ``pynvml`` imports (as SGLang), else numabind's discovery; an XPU id on SGLang's XPU platform."""
    if _on_xpu():
        return _query_numa_node_for_xpu(device_id)
    try:
        pynvml: Any = importlib.import_module("pynvml")
    except ImportError:
        return _discovered_numa_nodes(device_id)
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - NVML absent or broken: numabind's discovery answers
        logger.debug("NVML cannot be initialised (%s); using numabind's discovery for GPU %d", e, device_id)
        return _discovered_numa_nodes(device_id)
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(_get_nvml_device_index(device_id))
        count = len(glob.glob(_NODE_GLOB))
        bits = ctypes.sizeof(ctypes.c_ulong) * 8
        words = pynvml.nvmlDeviceGetMemoryAffinity(handle, max(1, math.ceil(count / bits)),
                                                   pynvml.NVML_AFFINITY_SCOPE_NODE)
        return [n for n in range(count) if int(words[n // bits]) >> (n % bits) & 1]
    except Exception as e:  # noqa: BLE001 - an NVML error skips the binding, as in SGLang
        logger.warning("NVML could not give the memory affinity of GPU %d: %s; skipping its NUMA binding",
                       device_id, e)
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception as e:  # noqa: BLE001
            logger.debug("nvmlShutdown failed: %s", e)


def _discovered_numa_nodes(device_id: int) -> list[int]:
    gpu = _gpu(device_id)
    if gpu is None:
        visible = ", ".join(str(g.index) for g in current_topology().gpus) or "none"
        logger.warning("GPU %d is not visible (visible GPUs: %s); skipping its NUMA binding", device_id, visible)
        return []
    if gpu.numa_node is None:
        logger.warning("The NUMA node of GPU %d (%s) is unknown: %s; skipping its NUMA binding",
                       device_id, gpu.pci_address, gpu.numa_note or "firmware reports -1")
        return []
    return [gpu.numa_node]


def _get_nvml_device_index(device_id: int) -> int:
    """The NVML (PCI order) index of CUDA device ``device_id``, ``device_id`` itself when not visible."""
    gpu = _gpu(device_id)
    return device_id if gpu is None or gpu.physical_index is None else gpu.physical_index


# ----------------------------------------------------------------------------- Intel GPUs (XPU)
def _xpu_pci_address(device_id: int) -> str | None:
    """The PCI address of ``xpu:<device_id>``, or None when it cannot be known for sure: the Intel GPUs
    ``ZE_AFFINITY_MASK`` exposes must be as many as ``torch.xpu.device_count()`` (or, without the integrated
    ones, as many)."""
    addresses = _list_xpu_pci_addresses()
    if not addresses:
        return None
    visible = [addresses[i] for i in _xpu_visible_device_indices(len(addresses))]
    count = _xpu_runtime_count()
    if count is None:
        logger.warning("The XPU runtime's device count is unknown (torch is not imported); the order of "
                       "%d Intel GPUs cannot be checked, skipping the NUMA lookup of xpu:%d", len(visible), device_id)
        return None
    if count != len(visible):
        discrete = [a for a in visible if not _integrated(_pci_key(a) or (1, 1, 0, 0))]
        if count != len(discrete):
            logger.warning("The XPU runtime counts %d devices but %d Intel GPUs are visible (%s); skipping the "
                           "NUMA lookup of xpu:%d", count, len(visible), ", ".join(visible) or "none", device_id)
            return None
        visible = discrete
    return visible[device_id] if 0 <= device_id < len(visible) else None


def _query_numa_node_for_xpu(device_id: int) -> list[int]:
    """The NUMA node of ``xpu:<device_id>`` as a one-element list, ``[]`` when unknown: SGLang's lookup on the
    live machine, numabind's discovery under ``NUMABIND_FSROOT`` or a pinned topology."""
    if not on_live_machine():
        return _discovered_numa_nodes(device_id)
    address = _xpu_pci_address(device_id)
    if address is None:
        return []
    try:
        with open(_PCI_NUMA_NODE.format(address)) as f:
            node = int(f.read().strip())
    except (OSError, ValueError) as e:
        logger.warning("The NUMA node of xpu:%d (%s) cannot be read: %s; skipping its NUMA binding",
                       device_id, address, e)
        return []
    if node < 0:
        logger.warning("The firmware gives xpu:%d (%s) no NUMA node; skipping its NUMA binding", device_id, address)
        return []
    return [node]


def _server_gpu_id(gpu_id: int) -> int:
    """The GPU id in the launcher's numbering, undoing ``SGLANG_ONE_VISIBLE_DEVICE_PER_PROCESS`` (which
    narrows ``CUDA_VISIBLE_DEVICES`` to one entry and passes 0)."""
    if gpu_id != 0 or not env_bool("SGLANG_ONE_VISIBLE_DEVICE_PER_PROCESS", False):
        return gpu_id
    now = os.environ.get("CUDA_VISIBLE_DEVICES")
    tokens = [t.strip() for t in now.split(",")] if now is not None else []
    if len(tokens) != 1:
        return gpu_id
    token = tokens[0]
    if _LAUNCH_CUDA_VISIBLE_DEVICES is None:
        if token.isdigit():
            return int(token)
    else:
        launch = [t.strip() for t in _LAUNCH_CUDA_VISIBLE_DEVICES.split(",")]
        if token in launch:
            return launch.index(token)
    logger.warning("CUDA_VISIBLE_DEVICES=%s names no GPU of the launcher's CUDA_VISIBLE_DEVICES=%s; "
                   "indexing --numa-node with GPU id %d", now, _LAUNCH_CUDA_VISIBLE_DEVICES, gpu_id)
    return gpu_id


def get_numa_node_if_available(server_args: Any, gpu_id: int) -> int | None:
    """GPU ``gpu_id``'s NUMA node: from ``--numa-node``, else detected (``SGLANG_AUTO_NUMA_BIND``), else None."""
    numa_nodes = server_args.numa_node
    if numa_nodes is not None:
        index = _server_gpu_id(gpu_id)
        if not 0 <= index < len(numa_nodes):
            raise NumaListError(f"GPU {index} has no entry in --numa-node {list(numa_nodes)}; "
                                f"give one NUMA node per GPU")
        return int(numa_nodes[index])
    if not env_bool("SGLANG_AUTO_NUMA_BIND", True) or not _is_numa_available():
        return None
    nodes = _query_numa_node_for_gpu(gpu_id)
    if not nodes:
        return None
    if len(nodes) > 1:
        logger.warning("Multiple NUMA nodes found for GPU %d: %s. Using the first one (%d); pass --numa-node "
                       "to choose another.", gpu_id, nodes, nodes[0])
    return int(nodes[0])


# ----------------------------------------------------------------------------- numactl-syntax plans
def _node_cpus(node: int) -> set[int]:
    """The online CPUs of NUMA ``node`` (empty when it has none or does not exist)."""
    found = current_topology().nodes.get(node)
    return set(found.cpus) if found is not None else set()


def _numactl_cpu_mem_args(node: int, gpu_id: int) -> str | None:
    """numactl options binding to ``node``, with the CPUs narrowed to those this process may use;
    None (after :func:`_handle_numa_bind_failure`) when none of them is."""
    node_cpus = _node_cpus(node)
    if not node_cpus:
        return f"--cpunodebind={node} --membind={node}"
    allowed = set(process_cpus(current_topology()))
    target = node_cpus & allowed
    if not target:
        _handle_numa_bind_failure(node, allowed, gpu_id)
        return None
    if target == node_cpus:
        return f"--cpunodebind={node} --membind={node}"
    return f"--physcpubind={','.join(map(str, sorted(target)))} --membind={node}"


def _probe_numactl_args(numactl_args: str) -> tuple[str | None, str]:
    """The strongest of ``numactl_args``, its memory binding as preferred, and its CPUs only that can
    be applied in this process, and ``""``; ``(None, why)`` when none can (``why``: the last refusal)."""
    first = cannot_apply(numactl_args, logger)
    if first is None:
        return numactl_args, ""
    if "--membind=" in numactl_args:
        preferred = numactl_args.replace("--membind=", "--preferred=")
        if cannot_apply(preferred, logger) is None:
            logger.warning("Hard memory binding %r was rejected: %s; falling back to the soft preferred "
                           "policy %r", numactl_args, first, preferred)
            return preferred, ""
    cpu_only = _strip_memory_args(numactl_args)
    if cpu_only and cpu_only != numactl_args:
        problem = cannot_apply(cpu_only, logger)
        if problem is None:
            logger.warning("Memory binding %r was rejected: %s; falling back to CPU-only binding %r",
                           numactl_args, first, cpu_only)
            return cpu_only, ""
        first = problem
    return None, first


# ----------------------------------------------------------------------------- Huawei Ascend NPUs
def _npu_numa_node(gpu_id: int) -> tuple[int | None, str]:
    """The NUMA node of runtime NPU ``gpu_id`` and a description of it; (None, why) when unknown."""
    physical, topo = resolve_physical_npu_id(gpu_id), query_npu_smi_topology()
    entry = topo.entries.get(physical)
    if entry is None:
        return None, f"physical NPU {physical} is not in the NPU topology ({topo.listing()})"
    said = f"physical NPU {physical}, CPU affinity {entry.raw_cpu_affinity} ({topo.source})"
    if entry.numa_node is None:
        return None, f"{said} lies in no single NUMA node"
    return entry.numa_node, f"{said}: node {entry.numa_node}"


def _check_npu_numa_node(server_args: Any, gpu_id: int) -> None:
    """Refuse an explicit ``--numa-node`` entry that contradicts NPU ``gpu_id``'s node (SGLang's rule: only
    when ``SGLANG_SET_CPU_AFFINITY`` or ``SGLANG_NPU_MEMORY_PREFERRED_BIND`` is on)."""
    numa_nodes = server_args.numa_node
    if numa_nodes is None or not (env_bool("SGLANG_SET_CPU_AFFINITY", False)
                                  or env_bool("SGLANG_NPU_MEMORY_PREFERRED_BIND", False)):
        return
    if not 0 <= gpu_id < len(numa_nodes):
        raise NumaListError(f"NPU {gpu_id} has no entry in --numa-node {list(numa_nodes)}; give one NUMA node per NPU")
    wanted = int(numa_nodes[gpu_id])
    node, said = _npu_numa_node(gpu_id)
    if node is None:
        logger.warning("--numa-node gives NPU %d node %d, which cannot be checked: %s", gpu_id, wanted, said)
        return
    if node != wanted:
        raise NpuAffinityError(
            f"--numa-node gives NPU {gpu_id} NUMA node {wanted}, which conflicts with NPU topology ({said}); "
            f"give it node {node}, or unset SGLANG_SET_CPU_AFFINITY and SGLANG_NPU_MEMORY_PREFERRED_BIND",
            stage="validate_numa_node", logical_npu_id=gpu_id)


def _npu_preferred_plan(gpu_id: int) -> tuple[Plan | None, str]:
    """``--preferred=N`` on NPU ``gpu_id``'s node when it can be applied; (None, "") with a warning when not."""
    node, said = _npu_numa_node(gpu_id)
    if node is None:
        logger.warning("The NUMA node of NPU %d is unknown (%s); its scheduler starts without a memory "
                       "preference", gpu_id, said)
        return None, ""
    preferred = f"--preferred={node}"
    resolved, why = _probe_numactl_args(preferred)
    if resolved is None:
        logger.warning("Memory preference %r for NPU %d could not be applied%s; its scheduler starts without one",
                       preferred, gpu_id, f": {why}" if why else "")
        return None, ""
    return Plan.from_numactl_args(resolved, topology=current_topology()), resolved


# ----------------------------------------------------------------------------- starting children
@contextlib.contextmanager
def configure_subprocess(server_args: Any, gpu_id: int) -> Iterator[None]:
    """Scheduler children started inside are bound at birth to GPU ``gpu_id``'s NUMA node.

    Under ``SGLANG_CRASH_ON_NUMA_BIND_FAILURE`` a binding of which nothing can be applied raises
    :class:`RuntimeError` here, before any child starts. On an NPU a ``--numa-node`` that contradicts the
    NPU's node raises :class:`NpuAffinityError`; ``SGLANG_NPU_MEMORY_PREFERRED_BIND`` gives a child that
    would start unbound a memory preference for its NPU's node.
    """
    npu = getattr(server_args, "device", None) == "npu"
    if npu:
        _check_npu_numa_node(server_args, gpu_id)
    plan, args = _child_plan(server_args, gpu_id)
    if plan is None and npu and env_bool("SGLANG_NPU_MEMORY_PREFERRED_BIND", False):
        plan, args = _npu_preferred_plan(gpu_id)
    if plan is None:
        yield
        return
    logger.info("Scheduler process for %s %d is bound at birth to %s (%s)", "NPU" if npu else "GPU", gpu_id, args,
                plan.describe())
    with bind_children(plan, logger, strict="partial" if crash_on_failure() else False):
        yield


def _child_plan(server_args: Any, gpu_id: int) -> tuple[Plan | None, str]:
    if not env_bool("SGLANG_NUMA_BIND_V2", True):
        return None, ""
    node = get_numa_node_if_available(server_args, gpu_id)
    if node is None:
        return None, ""
    args = _numactl_cpu_mem_args(node, gpu_id)
    if args is None:
        return None, ""
    resolved, why = _probe_numactl_args(args)
    if resolved is None:
        _handle_numa_bind_failure(node, reason=(
            f"numabind could not apply NUMA binding {args!r} for node {node} in this process (a seccomp "
            f"profile refusing set_mempolicy/sched_setaffinity, or a cpuset refusing the policy)"
            f"{': ' + why if why else ''}; skipping NUMA binding for GPU {gpu_id}."))
        return None, ""
    return Plan.from_numactl_args(resolved, topology=current_topology()), resolved


_created = threading.local()


def _create_numactl_executable(numactl_args: str) -> tuple[str, str]:
    """numabind's fixed wrapper (:func:`numabind.compat.wrapper_executable`), where SGLang writes a script, and
    a line describing it; ``numactl_args`` are kept for this thread's next :func:`_mp_set_executable`."""
    _created.args = numactl_args
    path = wrapper_executable()
    return path, f"{path} with {numactl_args!r} (numabind binds the child, no numactl needed)"


@contextlib.contextmanager
def _mp_set_executable(executable: str, debug_str: str) -> Iterator[None]:
    """Inside the block spawned children start through ``executable`` (and, after
    :func:`_create_numactl_executable` in this thread, with its options in the wrapper's variables);
    both are restored on exit. As in SGLang, the start method must be spawn."""
    method = multiprocessing.get_start_method()
    if method != "spawn":
        raise PlanError(f"multiprocessing's start method is {method!r}; a spawn executable binds only "
                        f"spawned children (multiprocessing.set_start_method('spawn'))")
    args = getattr(_created, "args", None)
    _created.args = None
    old = os.fsdecode(multiprocessing.spawn.get_executable())
    with contextlib.ExitStack() as stack:
        if args is not None:
            stack.enter_context(wrapper_environment(args, old))
        multiprocessing.spawn.set_executable(executable)
        logger.debug("mp.set_executable %s -> %s (%s)", old, executable, debug_str)
        try:
            yield
        finally:
            multiprocessing.spawn.set_executable(old)
            logger.debug("mp.set_executable reverted to %s", old)


# ----------------------------------------------------------------------------- binding this process
def numa_bind_to_node(node: int) -> BindReport | None:
    """Bind this whole process to NUMA ``node``: every thread not pinned elsewhere runs on the node's CPUs this
    process may use (a memory-only node leaves them), and memory prefers the node. Returns the BindReport.

    A node with no allowed CPU, or a binding of which nothing can be applied, is a failure (a warning, or
    RuntimeError under ``SGLANG_CRASH_ON_NUMA_BIND_FAILURE``).
    """
    from ..bind import bind_current

    topology = current_topology()
    node_cpus = _node_cpus(node)
    cpus: frozenset[int] | None = None
    if node_cpus:
        allowed = process_cpus(topology)
        cpus = frozenset(node_cpus) & allowed
        if not cpus:
            _handle_numa_bind_failure(node, allowed)
            return None
    plan = Plan(cpus=cpus, mem_policy="preferred", mem_nodes=frozenset({node}),
                reason=f"numa_bind_to_node({node})")
    try:
        with forward_warnings(logger):
            report = bind_current(plan, strict="partial" if crash_on_failure() else False)
    except NumabindError as e:
        raise NumaBindingUnavailable(f"NUMA binding to node {node} could not be applied at all: {e} "
                                     f"(SGLANG_CRASH_ON_NUMA_BIND_FAILURE is set)") from e
    logger.info("Process %d bound to NUMA node %d: %s", os.getpid(), node, report.applied.describe())
    return report

