"""A drop-in for SGLang's ``sglang.srt.utils.numa_utils``, bound in-process by numabind.

The functions SGLang's launcher, scheduler and CPU model runner call, with
SGLang's signatures and environment:

* ``SGLANG_NUMA_BIND_V2`` (default on): :func:`configure_subprocess` binds each
  scheduler child it starts to its GPU's NUMA node;
* ``SGLANG_AUTO_NUMA_BIND`` (default on): without ``--numa-node``, the node is
  the GPU's own (sysfs, cross-checked with NVML by numabind's discovery);
* ``SGLANG_CRASH_ON_NUMA_BIND_FAILURE`` (default off): a binding of which
  *nothing* could be applied raises :class:`RuntimeError` instead of a
  warning; a binding that kept part of itself (preferred memory, or CPUs
  only) never does;
* ``SGLANG_CPU_OMP_THREADS_BIND`` (default ``all``): :func:`init_threads_binding`
  gives each rank of the CPU backend its CPUs;
* ``SGLANG_ONE_VISIBLE_DEVICE_PER_PROCESS``: the launcher narrows
  ``CUDA_VISIBLE_DEVICES`` to the child's one GPU and passes GPU id 0; the GPU
  is looked up under the variable as it is at the call, and an explicit
  ``--numa-node`` list is indexed by the GPU's id before the narrowing.

The binding ladder is SGLang's — hard memory binding, then preferred memory on
the same node, then CPUs only — with the CPUs intersected with what the
process may use (a constrained process is bound within its CPUs, not refused).
Unlike SGLang, children need no numactl, no script is written per call
(nothing is written at all) and :func:`configure_subprocess` swaps no global
executable, so launcher threads (one per DP rank) need no lock around it: each
child gets the plan of the thread that starts it. Where numactl is on PATH the
probes run ``numactl ARGS true`` as SGLang does (through this module's
``subprocess``); without it they are made in-process. A GPU's NUMA nodes come
from NVML's memory affinity when ``pynvml`` can be imported (as SGLang), else
from numabind's discovery. Records go to
``logging.getLogger("sglang.srt.utils.numa_utils")``. SGLang and torch are
never imported (the Intel XPU path reads ``torch.xpu.device_count()`` only when the
host has imported torch). Intel GPUs (XPU) follow SGLang's lookup on the live machine: the
render nodes this process can open, Level Zero's order (integrated GPU last unless
``ZE_ENABLE_PCI_ID_DEVICE_ORDER``), ``ZE_AFFINITY_MASK`` as a filter, cross-checked with the
runtime's device count; under ``NUMABIND_FSROOT`` or a pinned topology numabind's discovery
answers.

Huawei Ascend NPUs (``server_args.device == "npu"``) follow SGLang's NPU path:

* ``SGLANG_NPU_MEMORY_PREFERRED_BIND`` (default off): when the binding above
  gives the child nothing (no node, or nothing of it applicable), the child
  starts with memory *preferred* on its NPU's NUMA node (``--preferred=N``,
  probed first; refused, the child starts unbound with a warning). Its CPUs
  are the child's own business (SGLang's scheduler pins itself under
  ``SGLANG_SET_CPU_AFFINITY``).
* An explicit ``--numa-node`` that contradicts the NPU's node is refused with
  :class:`NpuAffinityError` (a RuntimeError) before any child starts, whenever
  ``SGLANG_SET_CPU_AFFINITY`` or ``SGLANG_NPU_MEMORY_PREFERRED_BIND`` is on,
  even with ``SGLANG_NUMA_BIND_V2`` off. ``SGLANG_SET_CPU_AFFINITY`` alone
  makes the parent look nothing up.
* An NPU's node: its runtime id is turned into its physical id (N of
  ``/dev/davinci<N>``) by numabind's discovery, after
  ``ASCEND_RT_VISIBLE_DEVICES`` / ``ASCEND_VISIBLE_DEVICES`` are checked as
  SGLang checks them (:func:`resolve_physical_npu_id`); the physical NPU's
  CPU affinity comes from ``npu-smi info -t topo`` on the live machine when
  npu-smi is on PATH (SGLang's source; run through this module's
  ``subprocess``), else from numabind's discovery, and its node is the one
  NUMA node holding all those CPUs (:func:`query_npu_smi_topology`).
  :func:`resolve_npu_affinity_assignment` gives a scheduler its fixed share of
  whole cores, as SGLang's NPU affinity does.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import importlib
import logging
import math
import multiprocessing
import multiprocessing.spawn
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .._fs import FsReader, ascii_int
from ..bind import BindReport
from ..cpulist import format_cpulist, parse_cpulist
from ..errors import NumabindError, PlanError
from ..plan import Plan
from . import (
    NumaBindingUnavailable,
    bind_children,
    current_topology,
    forward_warnings,
    numactl_probe,
    on_live_machine,
    open_libnuma,
    plan_from_numactl_args,
    probe_plan,
    refresh_topology,
    wrapper_environment,
    wrapper_executable,
)
from . import SGLANG_TRUE, sglang_env_bool as _env_bool
from ._sglang_memory import (InterleavedPinnedBuffer, allocate_interleaved_pinned_table, get_shm_numa_distribution,
                             numa_interleave_memory, numa_memory_nodes, numa_page_counts, temp_membind)

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

#: SGLang's logger name for this module.
logger = logging.getLogger("sglang.srt.utils.numa_utils")

#: ``CUDA_VISIBLE_DEVICES`` when this module was imported (SGLang's launcher imports it before it
#: narrows the variable per child): what GPU ids of ``--numa-node`` refer to.
_LAUNCH_CUDA_VISIBLE_DEVICES = os.environ.get("CUDA_VISIBLE_DEVICES")

#: SGLang's platform flags. None (the default) means: an NVIDIA (``_is_cuda``) or Intel (``_is_xpu``) GPU is
#: visible to numabind's discovery; True or False overrides it (SGLang sets them from torch at import).
_is_cuda: bool | None = None
_is_xpu: bool | None = None
#: The directory whose presence makes a machine NUMA for SGLang (a second node).
_NODE1_PATH = "/sys/devices/system/node/node1"
_NODE_GLOB = "/sys/devices/system/node/node[0-9]*"
#: Where SGLang looks for Intel GPUs: the DRM render nodes, their PCI device and its NUMA node.
_DRI_RENDER_GLOB = "/dev/dri/renderD*"
_DRM_DEVICE = "/sys/class/drm/{}/device"
_PCI_NUMA_NODE = "/sys/bus/pci/devices/{}/numa_node"
_INTEL_PCI_VENDOR = 0x8086


class NumaListError(PlanError, IndexError):
    """A per-GPU list (``--numa-node``, ``SGLANG_CPU_OMP_THREADS_BIND``) has no entry for a GPU or rank."""


def _crash_on_failure() -> bool:
    return _env_bool("SGLANG_CRASH_ON_NUMA_BIND_FAILURE", False)


def _ids(cpus: Iterable[int]) -> str:
    return ",".join(map(str, sorted(cpus)))


# ----------------------------------------------------------------------------- failures
def _handle_numa_bind_failure(node: int | None = None, allowed_cpus: Iterable[int] | None = None,
                              gpu_id: int | None = None, *,
                              reason: str | None = None) -> None:
    """Log a NUMA binding that could not be applied at all, and raise it under
    ``SGLANG_CRASH_ON_NUMA_BIND_FAILURE``.

    Without ``reason`` the failure is a node with no CPU in ``allowed_cpus``.
    """
    if reason is None:
        on = f" for GPU {gpu_id}" if gpu_id is not None else ""
        reason = (f"NUMA node {node} has none of the CPUs this process may use "
                  f"({format_cpulist(sorted(allowed_cpus or ()))}); skipping NUMA binding{on}.")
    logger.warning("%s", reason)
    if _crash_on_failure():
        raise NumaBindingUnavailable(f"{reason} (SGLANG_CRASH_ON_NUMA_BIND_FAILURE is set)")


# ----------------------------------------------------------------------------- libnuma and availability
@functools.cache
def get_libnuma() -> ctypes.CDLL | None:
    """libnuma opened with ctypes (``libnuma.so``, then ``libnuma.so.1``), or None.

    For code that imports it from here; numabind binds through its own backends.
    """
    return open_libnuma(logger)


def _can_set_mempolicy() -> bool:
    """Whether this process can use the memory-policy calls (its policy can be read)."""
    from ..verify import current_binding

    try:
        return current_binding().mem_policy is not None
    except Exception as e:  # noqa: BLE001 - no usable backend
        logger.debug("the memory policy cannot be read: %s", e)
        return False


def _cuda() -> bool:
    if _is_cuda is not None:
        return bool(_is_cuda)
    try:
        return any(g.vendor == "nvidia" for g in current_topology().gpus)
    except Exception as e:  # noqa: BLE001 - detection never fails startup
        logger.warning("The machine could not be discovered, skipping NUMA binding: %s", e)
        return False


def _xpu() -> bool:
    if _is_xpu is not None:
        return bool(_is_xpu)
    try:
        return any(g.vendor == "intel" for g in current_topology().gpus)
    except Exception as e:  # noqa: BLE001 - detection never fails startup
        logger.warning("The machine could not be discovered, skipping NUMA binding: %s", e)
        return False


def _on_xpu() -> bool:
    """Whether GPU ids are Intel XPU ids: ``_is_xpu`` says so, or (both flags automatic) Intel GPUs are
    visible and NVIDIA ones are not."""
    if _is_xpu is not None:
        return bool(_is_xpu)
    return _is_cuda is not True and not _cuda() and _xpu()


def _process_cpus(topology: Any) -> frozenset[int]:
    """The CPUs this process may use as SGLang means it: on the live machine the calling thread's
    affinity (``os.sched_getaffinity``, SGLang's own source), else the replayed or pinned topology's."""
    if on_live_machine():
        return frozenset(os.sched_getaffinity(0))
    return frozenset(topology.allowed_cpus)


def _is_numa_available() -> bool:
    """Whether SGLang's automatic NUMA binding applies here: SGLang's CUDA or XPU platform (NVIDIA or
    Intel GPUs visible, ``_is_cuda`` / ``_is_xpu``), a second NUMA node (``os.path.isdir`` of node1),
    and memory-policy calls permitted (``_can_set_mempolicy``). numactl is not required."""
    if not (_cuda() or _xpu()):
        return False
    if not (os.path.isdir(_NODE1_PATH) if on_live_machine() else _replayed_isdir(_NODE1_PATH)):
        return False
    if not _can_set_mempolicy():
        logger.warning("This process may not use NUMA memory policies; skipping NUMA binding of the GPUs. "
                       "In a container, add --cap-add SYS_NICE.")
        return False
    return True


def _replayed_isdir(path: str) -> bool:
    """Whether ``path`` is a directory of the replayed machine under the current topology's root, read as
    discovery reads it (:class:`numabind._fs.FsReader`: a link is followed inside the root only, a dump
    tarball or an hwloc XML file read as its tree); False when the root cannot be read."""
    try:
        return FsReader(current_topology().root).isdir(path.lstrip("/"))
    except NumabindError:
        return False


def _gpu(device_id: int) -> Any | None:
    return next((g for g in current_topology().gpus if g.index == device_id), None)


def _query_numa_node_for_gpu(device_id: int) -> list[int]:
    """The NUMA nodes GPU ``device_id`` (CUDA numbering under the current ``CUDA_VISIBLE_DEVICES``) has
    memory affinity with, sorted; ``[]`` when unknown. Several nodes stay several.

    With ``pynvml`` importable, NVML's memory affinity (node scope) is read as
    SGLang does; else numabind's discovery gives the GPU's node. On SGLang's XPU
    platform (:func:`_on_xpu`) ``device_id`` is an XPU id: :func:`_query_numa_node_for_xpu`.
    """
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
def _pci_key(address: str) -> tuple[int, int, int, int] | None:
    """(domain, bus, device, function) of a PCI address ``DDDD:BB:DD.F`` (hexadecimal), or None."""
    try:
        domain, bus, rest = address.split(":")
        device, function = rest.split(".")
        return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        return None


def _integrated(key: tuple[int, int, int, int]) -> bool:
    """An integrated GPU: on bus 00 of PCI domain 0000."""
    return key[0] == 0 and key[1] == 0


def _list_xpu_pci_addresses() -> list[str]:
    """The PCI addresses of the Intel GPUs this process can open, in Level Zero's device order.

    Each DRM render node (``/dev/dri/renderD*``) this process may read and write
    whose PCI device has vendor 0x8086, sorted by domain, bus, device and function,
    integrated GPUs (domain 0000, bus 00) last unless ``ZE_ENABLE_PCI_ID_DEVICE_ORDER``
    is true. A node that cannot be opened or whose vendor cannot be read is not one.
    """
    found: list[tuple[tuple[int, int, int, int], str]] = []
    for render in glob.glob(_DRI_RENDER_GLOB):
        name = os.path.basename(render)
        if not os.access(render, os.R_OK | os.W_OK):
            logger.debug("%s cannot be opened by this process: not one of its XPUs", render)
            continue
        try:
            with open(_DRM_DEVICE.format(name) + "/vendor") as f:
                vendor = int(f.read().strip(), 16)
        except (OSError, ValueError):
            continue
        if vendor != _INTEL_PCI_VENDOR:
            continue
        address = os.path.basename(os.path.realpath(_DRM_DEVICE.format(name)))
        key = _pci_key(address)
        if key is not None:
            found.append((key, address))
    pci_order = os.environ.get("ZE_ENABLE_PCI_ID_DEVICE_ORDER", "").strip().lower() in SGLANG_TRUE
    found.sort(key=lambda item: (not pci_order and _integrated(item[0]), item[0]))
    return [address for _, address in found]


def _xpu_visible_device_indices(num_devices: int) -> list[int]:
    """The indices among ``num_devices`` Intel GPUs that ``ZE_AFFINITY_MASK`` exposes, ascending.

    Level Zero filters, it does not reorder: ``3,0`` exposes devices 0 and 3 as
    ``xpu:0`` and ``xpu:1``. Unset, empty or ``default`` exposes all; a sub-device
    entry (``1.0``) selects its root device; duplicates, out-of-range and
    unparsable entries are dropped.
    """
    mask = os.environ.get("ZE_AFFINITY_MASK")
    if mask is None or mask.strip() in ("", "default"):
        return list(range(num_devices))
    picked = set()
    for entry in mask.split(","):
        try:
            index = int(entry.strip().split(".")[0])
        except ValueError:
            continue
        if 0 <= index < num_devices:
            picked.add(index)
    return sorted(picked)


def _xpu_runtime_count() -> int | None:
    """``torch.xpu.device_count()`` when the host has imported torch (never imported here), else None."""
    torch: Any = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return int(torch.xpu.device_count())
    except Exception as e:  # noqa: BLE001 - a torch without XPU support
        logger.debug("torch.xpu.device_count() failed: %s", e)
        return None


def _xpu_pci_address(device_id: int) -> str | None:
    """The PCI address of ``xpu:<device_id>``, or None when it cannot be known for sure.

    The Intel GPUs of :func:`_list_xpu_pci_addresses` that ``ZE_AFFINITY_MASK``
    exposes must be as many as the runtime counts (``torch.xpu.device_count()``);
    when only the integrated GPUs make the difference (a runtime that does not
    enumerate them) they are left out. Any other disagreement, or no count, is None.
    """
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
    """The NUMA node of ``xpu:<device_id>`` as a one-element list; ``[]`` when unknown (the firmware
    reports -1, the device cannot be matched or its node cannot be read). On the live machine SGLang's
    lookup (:func:`_xpu_pci_address`, then the PCI device's ``numa_node``); under
    ``NUMABIND_FSROOT`` or a pinned topology numabind's discovery answers."""
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
    """The GPU id in the launcher's numbering, undoing ``SGLANG_ONE_VISIBLE_DEVICE_PER_PROCESS``.

    The launcher narrows ``CUDA_VISIBLE_DEVICES`` to one entry of its own value
    (or to the id itself when it had none) and passes 0.
    """
    if gpu_id != 0 or not _env_bool("SGLANG_ONE_VISIBLE_DEVICE_PER_PROCESS", False):
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
    """The NUMA node for GPU ``gpu_id``: from ``server_args.numa_node``, else detected
    (``SGLANG_AUTO_NUMA_BIND``), else None."""
    numa_nodes = server_args.numa_node
    if numa_nodes is not None:
        index = _server_gpu_id(gpu_id)
        if not 0 <= index < len(numa_nodes):
            raise NumaListError(f"GPU {index} has no entry in --numa-node {list(numa_nodes)}; "
                                f"give one NUMA node per GPU")
        return int(numa_nodes[index])
    if not _env_bool("SGLANG_AUTO_NUMA_BIND", True):
        return None
    if not _is_numa_available():
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
    allowed = set(_process_cpus(current_topology()))
    target = node_cpus & allowed
    if not target:
        _handle_numa_bind_failure(node, allowed, gpu_id)
        return None
    if target == node_cpus:
        return f"--cpunodebind={node} --membind={node}"
    return f"--physcpubind={_ids(target)} --membind={node}"


def _strip_memory_args(numactl_args: str) -> str:
    """``numactl_args`` without the memory policy, keeping the CPU binding."""
    return " ".join(t for t in numactl_args.split()
                    if not t.startswith(("--membind", "--preferred", "--interleave")))


def _cannot_apply(numactl_args: str) -> str | None:
    """None when ``numactl_args`` can be applied here, else why not: ``numactl ARGS true`` (its stderr)
    on the live machine with numactl on PATH, else checked and tried in-process."""
    probed = numactl_probe(numactl_args)
    if probed is not None:
        ok, err = probed
        if not ok:
            logger.debug("numactl probe for %r rejected: %r", numactl_args, err)
        return None if ok else (err or "numactl refused it")
    topology = current_topology()
    try:
        plan = plan_from_numactl_args(numactl_args, topology)
    except PlanError as e:
        return str(e)
    return probe_plan(plan, topology)


def _probe_numactl_args(numactl_args: str) -> tuple[str | None, str]:
    """The strongest of ``numactl_args``, its memory binding as preferred, and its CPUs only that can
    be applied in this process, and ``""``; ``(None, why)`` when none can (``why``: the last refusal)."""
    first = _cannot_apply(numactl_args)
    if first is None:
        return numactl_args, ""
    if "--membind=" in numactl_args:
        preferred = numactl_args.replace("--membind=", "--preferred=")
        if _cannot_apply(preferred) is None:
            logger.warning("Hard memory binding %r was rejected: %s; falling back to the soft preferred "
                           "policy %r", numactl_args, first, preferred)
            return preferred, ""
    cpu_only = _strip_memory_args(numactl_args)
    if cpu_only and cpu_only != numactl_args:
        problem = _cannot_apply(cpu_only)
        if problem is None:
            logger.warning("Memory binding %r was rejected: %s; falling back to CPU-only binding %r",
                           numactl_args, first, cpu_only)
            return cpu_only, ""
        first = problem
    return None, first


# ----------------------------------------------------------------------------- Huawei Ascend NPUs
#: The variables SGLang reads, in its order, for the physical id of a runtime NPU id.
_ASCEND_VISIBILITY = ("ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES")
#: Where the live NPU lookup finds Huawei's tool, and the seconds it may take.
_NPU_SMI = "npu-smi"
_NPU_SMI_TIMEOUT = 10


class NpuAffinityError(NumabindError, RuntimeError):
    """An NPU's topology or CPU share cannot be found, or ``--numa-node`` contradicts it (SGLang's
    ``NpuAffinityError``, a RuntimeError). ``stage`` names the step; the ids are set where known."""

    def __init__(self, message: str, *, stage: str, logical_npu_id: int | None = None,
                 physical_npu_id: int | None = None) -> None:
        super().__init__(message)
        self.stage = stage
        self.logical_npu_id = logical_npu_id
        self.physical_npu_id = physical_npu_id


@dataclass(frozen=True)
class NpuTopologyEntry:
    """One physical NPU: its CPU affinity (as its source wrote it, and as CPU ids) and the NUMA node
    holding all those CPUs (None when no single node does)."""

    physical_npu_id: int
    raw_cpu_affinity: str
    local_cpu_ids: frozenset[int]
    numa_node: int | None


@dataclass(frozen=True)
class NpuTopology:
    """The physical NPUs of the machine by physical id, and where that came from."""

    source: str
    entries: Mapping[int, NpuTopologyEntry]
    online_cpu_ids: frozenset[int]


@dataclass(frozen=True)
class NpuAffinityAssignment:
    """The CPUs a scheduler of runtime NPU ``logical_npu_id`` owns: its fixed share
    (``slot_index`` of ``slots_on_node``) of the whole cores of its NPU's CPU affinity."""

    logical_npu_id: int
    physical_npu_id: int
    numa_node: int
    slot_index: int
    slots_on_node: int
    requested_pcores: int
    effective_pcores: int
    physical_core_keys: tuple[tuple[int, int], ...]
    logical_cpu_ids: tuple[int, ...]
    topology_source: str

    @property
    def runtime_npu_id(self) -> int:
        return self.logical_npu_id


def _npu_visibility() -> tuple[str | None, str | None]:
    """The first of ``ASCEND_RT_VISIBLE_DEVICES``, ``ASCEND_VISIBLE_DEVICES`` set to something: (name, value)."""
    for name in _ASCEND_VISIBILITY:
        value = os.environ.get(name)
        if value is not None and value.strip():
            return name, value.strip()
    return None, None


def resolve_physical_npu_id(logical_npu_id: int) -> int:
    """The physical id (N of ``/dev/davinci<N>``) of runtime NPU ``logical_npu_id``.

    As SGLang: a negative id, a visibility variable (``ASCEND_RT_VISIBLE_DEVICES``,
    else ``ASCEND_VISIBLE_DEVICES``) that is not distinct comma-separated ids, or
    an id past its end raise :class:`NpuAffinityError`. The answer is then
    numabind's discovery's (the NPU's ``minor``), which also knows a container's
    own numbering; where discovery does not know the NPU, SGLang's: the
    variable's entry, or the id itself.
    """
    if logical_npu_id < 0:
        raise NpuAffinityError(f"NPU id {logical_npu_id} is negative; runtime NPU ids start at 0",
                               stage="resolve_visible_device", logical_npu_id=logical_npu_id)
    name, value = _npu_visibility()
    listed: list[int] | None = None
    if value is not None:
        ids = [ascii_int(t.strip(), max_digits=9) for t in value.split(",")]
        if any(i is None for i in ids) or len(set(ids)) != len(ids):
            raise NpuAffinityError(f"{name}={value!r} is not a list of distinct physical NPU ids separated by "
                                   f"commas; fix or unset it", stage="resolve_visible_device",
                                   logical_npu_id=logical_npu_id)
        listed = [int(i) for i in ids if i is not None]
        if logical_npu_id >= len(listed):
            raise NpuAffinityError(f"NPU id {logical_npu_id} is outside {name}={value!r} ({len(listed)} NPUs)",
                                   stage="resolve_visible_device", logical_npu_id=logical_npu_id)
    npu = next((g for g in current_topology().gpus if g.vendor == "ascend" and g.index == logical_npu_id), None)
    if npu is not None and npu.minor is not None:
        return int(npu.minor)
    return listed[logical_npu_id] if listed is not None else logical_npu_id


def _unique_node(cpus: frozenset[int], topology: Any) -> int | None:
    """The one NUMA node whose CPUs include all of ``cpus``, else None."""
    hits = [nid for nid, node in topology.nodes.items() if cpus and cpus <= node.cpus]
    return hits[0] if len(hits) == 1 else None


def _parse_npu_smi_topology(text: str, topology: Any) -> dict[int, NpuTopologyEntry]:
    """The rows of ``npu-smi info -t topo``: ``NPU<id> <link kinds...> <cpulist>``; the header row ends in
    ``CPU Affinity``. A row whose last field is not a cpulist, or a repeated id, raises NpuAffinityError."""
    entries: dict[int, NpuTopologyEntry] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[-2:] == ["CPU", "Affinity"] or not fields[0].startswith("NPU"):
            continue
        digits = fields[0][3:]
        if not (digits.isascii() and digits.isdigit()):
            continue
        npu_id = int(digits)
        try:
            cpus = parse_cpulist(fields[-1])
        except PlanError as e:
            raise NpuAffinityError(f"npu-smi gives NPU{npu_id} the CPU affinity {fields[-1]!r}: {e}",
                                   stage="parse_npu_smi_cpu_affinity", physical_npu_id=npu_id) from None
        if npu_id in entries:
            raise NpuAffinityError(f"npu-smi lists NPU{npu_id} twice", stage="parse_npu_smi_row",
                                   physical_npu_id=npu_id)
        entries[npu_id] = NpuTopologyEntry(npu_id, fields[-1], cpus, _unique_node(cpus, topology))
    if not entries:
        raise NpuAffinityError("npu-smi info -t topo printed no NPU row", stage="parse_npu_smi_output")
    return entries


def query_npu_smi_topology() -> NpuTopology:
    """Each physical NPU's CPU affinity and NUMA node.

    On the live machine with ``npu-smi`` on PATH, from ``npu-smi info -t topo``
    (SGLang's source); when it fails, with a warning, and elsewhere, from
    numabind's discovery (each Ascend NPU's ``local_cpulist``, or its node's
    CPUs), keyed by physical id.
    """
    topology = current_topology()
    online = frozenset(topology.online_cpus)
    tool = shutil.which(_NPU_SMI) if on_live_machine() else None
    if tool is not None:
        try:
            done = subprocess.run([tool, "info", "-t", "topo"], capture_output=True, text=True,
                                  timeout=_NPU_SMI_TIMEOUT, check=False)
            if done.returncode != 0:
                raise NpuAffinityError(f"npu-smi info -t topo exited with {done.returncode}: "
                                       f"{(done.stderr or '').strip()[:300]}", stage="query_npu_smi")
            return NpuTopology("npu-smi info -t topo", _parse_npu_smi_topology(done.stdout, topology), online)
        except (OSError, subprocess.TimeoutExpired, NpuAffinityError) as e:
            logger.warning("The NPU topology could not be read from npu-smi (%s); using numabind's discovery", e)
    entries = {}
    for g in topology.gpus:
        if g.vendor != "ascend" or g.minor is None:
            continue
        node = topology.nodes.get(g.numa_node) if g.numa_node is not None else None
        cpus = frozenset(g.local_cpus) or (frozenset(node.cpus) if node is not None else frozenset())
        entries[int(g.minor)] = NpuTopologyEntry(int(g.minor), format_cpulist(cpus), cpus, g.numa_node)
    return NpuTopology("numabind discovery (sysfs)", entries, online)


def _npu_entry(gpu_id: int) -> tuple[int, NpuTopology, NpuTopologyEntry | None]:
    physical = resolve_physical_npu_id(gpu_id)
    topo = query_npu_smi_topology()
    return physical, topo, topo.entries.get(physical)


def _npu_numa_node(gpu_id: int) -> tuple[int | None, str]:
    """The NUMA node of runtime NPU ``gpu_id`` and a description of it; (None, why) when unknown."""
    physical, topo, entry = _npu_entry(gpu_id)
    if entry is None:
        return None, (f"physical NPU {physical} is not in the NPU topology ({topo.source} lists "
                      f"{sorted(topo.entries) or 'none'})")
    said = f"physical NPU {physical}, CPU affinity {entry.raw_cpu_affinity} ({topo.source})"
    if entry.numa_node is None:
        return None, f"{said} lies in no single NUMA node"
    return entry.numa_node, f"{said}: node {entry.numa_node}"


def _check_npu_numa_node(server_args: Any, gpu_id: int) -> None:
    """Refuse an explicit ``--numa-node`` entry that contradicts NPU ``gpu_id``'s node (SGLang's rule: only
    when ``SGLANG_SET_CPU_AFFINITY`` or ``SGLANG_NPU_MEMORY_PREFERRED_BIND`` is on)."""
    numa_nodes = server_args.numa_node
    if numa_nodes is None or not (_env_bool("SGLANG_SET_CPU_AFFINITY", False)
                                  or _env_bool("SGLANG_NPU_MEMORY_PREFERRED_BIND", False)):
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
    return plan_from_numactl_args(resolved, current_topology()), resolved


def _npu_pcores_requested() -> int:
    raw = os.environ.get("SGLANG_NPU_AFFINITY_PCORES_PER_PROC", "0").strip() or "0"
    try:
        value = int(raw)
    except ValueError:
        raise PlanError(f"SGLANG_NPU_AFFINITY_PCORES_PER_PROC={raw!r} is not an integer; give a number of "
                        f"physical cores (0: the whole share)") from None
    if value < 0:
        raise PlanError(f"SGLANG_NPU_AFFINITY_PCORES_PER_PROC must be >= 0 (it is {value}); 0 gives the whole share")
    return value


def resolve_npu_affinity_assignment(*, logical_npu_id: int, emit_topology_log: bool = False
                                    ) -> NpuAffinityAssignment:
    """The CPUs the scheduler of runtime NPU ``logical_npu_id`` owns, as SGLang's NPU affinity gives them.

    The NPUs with the same node and CPU affinity split that affinity's whole
    cores (each with all its online SMT siblings) into fixed, disjoint shares in
    physical-id order, independent of this process's CPUs; of its share the
    scheduler keeps the cores whose every sibling this process may use, at most
    ``SGLANG_NPU_AFFINITY_PCORES_PER_PROC`` of them (0: all; a larger number is
    clipped with a warning). An NPU with no usable core raises
    :class:`NpuAffinityError`.
    """
    requested = _npu_pcores_requested()
    physical, topo, entry = _npu_entry(logical_npu_id)
    if entry is None or entry.numa_node is None:
        raise NpuAffinityError(
            f"physical NPU {physical} has no NUMA node in the NPU topology ({topo.source} lists "
            f"{sorted(topo.entries) or 'none'})", stage="select_npu_topology",
            logical_npu_id=logical_npu_id, physical_npu_id=physical)
    topology = current_topology()
    if emit_topology_log:
        for e in sorted(topo.entries.values(), key=lambda e: e.physical_npu_id):
            logger.info("NPU topology (%s): physical NPU %d, node %s, CPU affinity %s", topo.source,
                        e.physical_npu_id, e.numa_node, e.raw_cpu_affinity)
    group = sorted(e.physical_npu_id for e in topo.entries.values()
                   if e.numa_node == entry.numa_node and e.local_cpu_ids == entry.local_cpu_ids)
    slot, slots = group.index(physical), len(group)
    cores: dict[tuple[int, int], frozenset[int]] = {}
    for cpu in entry.local_cpu_ids & topo.online_cpu_ids:
        info = topology.cpus.get(cpu)
        key = (info.package, info.core) if info is not None and info.core >= 0 else (-1, cpu)
        siblings = (info.siblings if info is not None and info.siblings else frozenset({cpu})) & topo.online_cpu_ids
        cores[key] = cores.get(key, frozenset()) | siblings
    keys = sorted(cores)
    start, end = slot * len(keys) // slots, (slot + 1) * len(keys) // slots
    usable = entry.local_cpu_ids & topo.online_cpu_ids & _process_cpus(topology)
    eligible = [k for k in keys[start:end] if cores[k] <= usable]
    if not eligible:
        owned = frozenset().union(*(cores[k] for k in keys[start:end]))
        raise NpuAffinityError(
            f"physical NPU {physical} has no whole core in its share {start}:{end} of the {len(keys)} cores of "
            f"CPU affinity {entry.raw_cpu_affinity} (share: {format_cpulist(owned) or 'empty'}, this process may "
            f"use {format_cpulist(_process_cpus(topology))}); widen the process's CPUs or use fewer NPUs per node",
            stage="filter_process_cpuset", logical_npu_id=logical_npu_id, physical_npu_id=physical)
    effective = len(eligible) if requested == 0 else min(requested, len(eligible))
    if requested > len(eligible):
        logger.warning("SGLANG_NPU_AFFINITY_PCORES_PER_PROC=%d is more than the %d whole cores of physical NPU %d's "
                       "share; using %d", requested, len(eligible), physical, effective)
    chosen = eligible[:effective]
    return NpuAffinityAssignment(
        logical_npu_id=logical_npu_id, physical_npu_id=physical, numa_node=entry.numa_node, slot_index=slot,
        slots_on_node=slots, requested_pcores=requested, effective_pcores=effective,
        physical_core_keys=tuple(chosen), logical_cpu_ids=tuple(sorted(c for k in chosen for c in cores[k])),
        topology_source=topo.source)


# ----------------------------------------------------------------------------- starting children
@contextlib.contextmanager
def configure_subprocess(server_args: Any, gpu_id: int) -> Iterator[None]:
    """Scheduler children started inside are bound at birth to GPU ``gpu_id``'s NUMA node.

    Under ``SGLANG_CRASH_ON_NUMA_BIND_FAILURE`` a binding of which nothing can
    be applied raises :class:`RuntimeError` here, before any child starts. On
    an NPU (``server_args.device == "npu"``) an explicit ``--numa-node`` that
    contradicts the NPU's node raises :class:`NpuAffinityError` first, and
    ``SGLANG_NPU_MEMORY_PREFERRED_BIND`` gives a child that would start
    unbound a memory preference for its NPU's node.
    """
    npu = getattr(server_args, "device", None) == "npu"
    if npu:
        _check_npu_numa_node(server_args, gpu_id)
    plan, args = _child_plan(server_args, gpu_id)
    if plan is None and npu and _env_bool("SGLANG_NPU_MEMORY_PREFERRED_BIND", False):
        plan, args = _npu_preferred_plan(gpu_id)
    if plan is None:
        yield
        return
    logger.info("Scheduler process for %s %d is bound at birth to %s (%s)", "NPU" if npu else "GPU", gpu_id, args,
                plan.describe())
    with bind_children(plan, logger, strict="partial" if _crash_on_failure() else False):
        yield


def _child_plan(server_args: Any, gpu_id: int) -> tuple[Plan | None, str]:
    if not _env_bool("SGLANG_NUMA_BIND_V2", True):
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
    return plan_from_numactl_args(resolved, current_topology()), resolved


_created = threading.local()


def _create_numactl_executable(numactl_args: str) -> tuple[str, str]:
    """An executable that starts a spawned child bound to ``numactl_args``, and a line describing it.

    SGLang writes a script per call; numabind returns its one fixed,
    environment-driven wrapper (:func:`numabind.compat.wrapper_executable`) and
    remembers ``numactl_args`` for this thread: :func:`_mp_set_executable`
    entered next puts them in the wrapper's variables. Nothing is written.
    :func:`configure_subprocess` does not need either.
    """
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
    """Bind this whole process to NUMA ``node``: every thread that is not pinned elsewhere runs on
    the node's CPUs this process may use, and memory prefers the node. Returns the BindReport.

    A memory-only node leaves the CPUs as they are. A node with no allowed CPU
    is a failure (a warning, or RuntimeError under
    ``SGLANG_CRASH_ON_NUMA_BIND_FAILURE``); so is a binding of which nothing
    can be applied (numabind's ``strict="partial"``).
    """
    from ..bind import bind_current

    topology = current_topology()
    node_cpus = _node_cpus(node)
    cpus: frozenset[int] | None = None
    if node_cpus:
        allowed = _process_cpus(topology)
        cpus = frozenset(node_cpus) & allowed
        if not cpus:
            _handle_numa_bind_failure(node, allowed)
            return None
    plan = Plan(cpus=cpus, mem_policy="preferred", mem_nodes=frozenset({node}),
                reason=f"numa_bind_to_node({node})")
    try:
        with forward_warnings(logger):
            report = bind_current(plan, strict="partial" if _crash_on_failure() else False)
    except NumabindError as e:
        raise NumaBindingUnavailable(f"NUMA binding to node {node} could not be applied at all: {e} "
                                     f"(SGLANG_CRASH_ON_NUMA_BIND_FAILURE is set)") from e
    logger.info("Process %d bound to NUMA node %d: %s", os.getpid(), node, report.applied.describe())
    return report


# ----------------------------------------------------------------------------- the CPU backend
def _physical_cores(topology: Any, cpus: frozenset[int]) -> list[int]:
    """One CPU per physical core among ``cpus`` (the lowest allowed sibling), sorted."""
    firsts = set()
    for cpu in cpus:
        info = topology.cpus.get(cpu)
        siblings = (info.siblings if info is not None and info.siblings else frozenset({cpu})) & cpus
        firsts.add(min(siblings))
    return sorted(firsts)


def init_threads_binding(*, numa_index: int, world_size: int) -> str:
    """The CPUs (a cpulist string) for the OpenMP threads of CPU-backend rank ``numa_index``.

    ``SGLANG_CPU_OMP_THREADS_BIND=all`` (the default): the physical cores this
    process may use on the ``numa_index``-th NUMA node with CPUs; ``world_size``
    (dp x tp x pp) must not exceed the number of such nodes. Otherwise the
    variable is ``|``-separated numactl CPU lists, one per rank, indexed by
    ``numa_index`` (a router worker with ``world_size`` 1 may pick any of them);
    the chosen list is checked against this machine and returned as written.
    """
    value = os.environ.get("SGLANG_CPU_OMP_THREADS_BIND", "all")
    topology = current_topology()
    node_ids = sorted(topology.nodes_with_cpus)
    if value == "all":
        if world_size > len(node_ids):
            raise PlanError(
                f"SGLANG_CPU_OMP_THREADS_BIND is unset (all) and the world size {world_size} is larger than "
                f"the {len(node_ids)} NUMA nodes with CPUs; give each rank its CPUs, e.g. "
                f"SGLANG_CPU_OMP_THREADS_BIND='0-15|16-31|...' with {world_size} lists")
        if not 0 <= numa_index < len(node_ids):
            raise NumaListError(f"rank {numa_index} has no NUMA node: this machine has {len(node_ids)} nodes with CPUs")
        if world_size < len(node_ids):
            logger.warning("%d NUMA nodes have CPUs but the world size is %d: %d nodes are not used",
                           len(node_ids), world_size, len(node_ids) - world_size)
        node = node_ids[numa_index]
        cores = _physical_cores(topology, topology.nodes[node].cpus & topology.allowed_cpus)
        if not cores:
            raise PlanError(f"NUMA node {node} (rank {numa_index}) has no CPU this process may use "
                            f"({format_cpulist(topology.allowed_cpus)}); set SGLANG_CPU_OMP_THREADS_BIND")
        return format_cpulist(cores)
    groups = value.split("|")
    if len(groups) < world_size or not 0 <= numa_index < len(groups):
        raise NumaListError(
            f"SGLANG_CPU_OMP_THREADS_BIND={value!r} has {len(groups)} CPU lists, which does not cover rank "
            f"{numa_index} of world size {world_size}; give one list per rank, separated by '|'")
    group = groups[numa_index].strip()
    try:
        plan_from_numactl_args(f"--physcpubind={group}", topology).validate(topology)
    except PlanError as e:
        raise PlanError(f"SGLANG_CPU_OMP_THREADS_BIND list {numa_index} ({group!r}): {e}") from None
    if world_size > len(node_ids):
        logger.warning("The world size %d is larger than the %d NUMA nodes with CPUs: how much memory each rank "
                       "has cannot be known in advance; set --max-total-tokens", world_size, len(node_ids))
    return group
