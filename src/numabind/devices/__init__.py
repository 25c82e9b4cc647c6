"""Accelerator (GPU, NPU) discovery from sysfs, procfs, device files and optionally NVML.

``topology.gpus`` is what a worker of one vendor's runtime sees, numbered as that runtime numbers it. The package:
:mod:`~numabind.devices.values`, :mod:`~numabind.devices.sysfs`, one module per vendor,
:mod:`~numabind.devices.visibility` and :mod:`~numabind.devices.nvml` (loaded only when asked). See ``docs/gpus.rst``.
"""

from __future__ import annotations

import os

from .._base import getLogger
from .._vendors import ASCEND_NPUS as ASCEND_NPUS
from .._vendors import NAMES, VENDOR_VARIABLE, VISIBILITY_VARIABLES, identity_fix
from .._vendors import PCI_VENDORS as VENDORS
from ..errors import PlanError
from .amd import amd_runtime, read_kfd, with_kfd
from .ascend import ascend_runtime
from .intel import intel_runtime
from .nvidia import nvidia_procfs, nvidia_runtime, parse_nvidia_information, with_procfs
from .sysfs import place_numa_node, said, scan_pci_gpus
from .values import IDENTITIES, Gpu, PciGpu
from .visibility import MAX_LISTED_GPUS as MAX_LISTED_GPUS
from .visibility import gpu_list_entries, pick_gpus, select, select_visible, visibility_environ

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the looks' start)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping
    from typing import Any

log = getLogger(__name__)

__all__ = ["Gpu", "IDENTITIES", "PciGpu", "VENDORS", "VISIBILITY_VARIABLES", "discover_gpus", "gpu_list_entries",
           "parse_nvidia_information", "pick_gpus", "place_numa_node", "scan_pci_gpus", "select_visible",
           "visibility_environ"]


def _runtime_vendor(gpus: list[PciGpu], wanted: str | None) -> str | None:
    if wanted:
        if wanted not in NAMES:
            raise PlanError(f"GPU vendor {wanted!r} is not one of {', '.join(NAMES)}")
        return wanted
    present = {g.vendor for g in gpus}
    discrete = {g.vendor for g in gpus if not g.integrated}
    for pool in (discrete, present):
        for v in NAMES:
            if v in pool:
                return v
    return None


def discover_gpus(reader: Any, nodes: Mapping[int, Any], env: Mapping[str, str] | None = None, *,
                  vendor: str | None = None, use_nvml: bool | None = None) -> tuple[Gpu, ...]:
    """Visible accelerators under ``reader``'s root, in visible-index order.

    ``nodes`` (``{id: Node}``) places GPUs whose firmware reports no node; ``env`` defaults to ``os.environ``;
    ``vendor`` (default ``$NUMABIND_GPU_VENDOR``, else the first present) picks whose runtime numbers the devices;
    ``use_nvml`` defaults to "only for the live root"."""
    live = bool(getattr(reader, "is_live", False))
    container_env = env is not None or live
    env = os.environ if env is None else env
    procfs = nvidia_procfs(reader)
    kfd = read_kfd(reader)
    gpus = with_kfd(with_procfs(reader, scan_pci_gpus(reader), procfs), kfd)
    if use_nvml is None:
        use_nvml = live and any(g.vendor == "nvidia" for g in gpus)
    nvml_devices = None
    if use_nvml:
        from . import nvml      # pynvml's import and NVML's start are paid only when NVML is asked

        nvml_devices = nvml.probe()
        if nvml_devices is not None:
            gpus = nvml.with_nvml(gpus, nvml_devices)
    if vendor is None:
        vendor = (env.get(VENDOR_VARIABLE) or "").strip().lower() or None
        if vendor is not None and vendor not in NAMES:
            log.warning("%s=%s is not one of %s; ignored", VENDOR_VARIABLE, said(vendor), ", ".join(NAMES))
            vendor = None
    chosen_vendor = _runtime_vendor(gpus, vendor)
    if chosen_vendor is None:
        return ()
    if chosen_vendor == "nvidia":
        runtime = nvidia_runtime(reader, gpus, env, container_env, procfs, nvml_devices)
    elif chosen_vendor == "amd":
        runtime = amd_runtime(reader, gpus, kfd)
    elif chosen_vendor == "ascend":
        runtime = ascend_runtime(reader, gpus, env, container_env)
    else:
        runtime = intel_runtime(reader, gpus, env)
    physical, membership, order = runtime
    doubt = membership + order
    if len(physical) > 1 and not getattr(reader, "is_live", True):
        from .._hwloc_xml import gpu_order_note     # an hwloc XML root: how its GPUs are ordered, if unsure

        xml_note = gpu_order_note(reader, chosen_vendor)
        if xml_note:
            doubt.append(xml_note)
    picks, _notes, order_doubts = select(chosen_vendor, physical, env)
    doubt += order_doubts
    note = "; ".join(doubt + [identity_fix(chosen_vendor)]) if doubt else ""
    out = []
    for index, (pos, mig_uuid, named) in enumerate(picks):
        g = physical[pos]
        node, source, numa_note = place_numa_node(g, nodes)
        if node is None:
            log.warning("GPU %d (%s): NUMA node unknown: %s", index, g.pci_address, numa_note)
        certain = not doubt or named
        out.append(Gpu(
            index=index, pci_address=g.pci_address, vendor=g.vendor, numa_node=node, local_cpus=g.local_cpus,
            uuid=g.uuid, name=g.name, minor=g.minor, integrated=g.integrated, numa_source=source, numa_note=numa_note,
            device_id=g.device_id, physical_index=pos, mig_uuid=mig_uuid,
            identity="certain" if certain else "uncertain", identity_note="" if certain else note))
    log.debug("GPUs (%s runtime): %s", chosen_vendor, "; ".join(g.describe() for g in out) or "none visible")
    return tuple(out)
