"""NVML, optional: the probe through ``pynvml`` (imported lazily) and its merge into the sysfs GPUs, for the live
root only. NVML adds MIG instance UUIDs and a second opinion on affinity; every failure degrades to "no
information" with a DEBUG line.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._base import getLogger, printable
from ..cpulist import format_cpulist, words_to_ids
from .sysfs import kept, normal_bdf
from .values import PciGpu

log = getLogger(__name__)

__all__ = ["NvmlDevice", "normalize_bus_id", "probe", "with_nvml"]

#: ``NVML_AFFINITY_SCOPE_NODE``: affinity expressed as NUMA nodes, not sockets.
_SCOPE_NODE = 0
#: Bits asked for in NVML's affinity bitmaps (64-bit words).
_CPU_BITS = 8192
_NODE_BITS = 1024


@dataclass(frozen=True)
class NvmlDevice:
    """What NVML says about one physical GPU."""

    nvml_index: int
    pci_address: str
    uuid: str | None = None
    name: str | None = None
    minor: int | None = None
    cpu_affinity: frozenset[int] | None = None
    memory_nodes: frozenset[int] | None = None
    mig_uuids: tuple[str, ...] = ()


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value).rstrip("\x00")


def normalize_bus_id(bus_id: str | bytes) -> str:
    """NVML's ``00000000:1B:00.0`` (bytes or str) as sysfs's ``0000:1b:00.0`` (unparsable: as given, lower case)."""
    text = (_text(bus_id) or "").strip().lower()
    return normal_bdf(text) or text


def _call(nvml: Any, name: str, *args: Any) -> Any:
    """Call ``nvml.<name>(*args)``; None when missing or when NVML refuses."""
    fn = getattr(nvml, name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception as exc:  # pynvml.NVMLError and friends
        log.debug("NVML: %s failed: %s", name, exc)
        return None


def _mig_uuids(nvml: Any, handle: Any) -> tuple[str, ...]:
    mode = _call(nvml, "nvmlDeviceGetMigMode", handle)
    current = mode[0] if isinstance(mode, (tuple, list)) else mode
    if not current:
        return ()
    count = _call(nvml, "nvmlDeviceGetMaxMigDeviceCount", handle) or 0
    out = []
    for k in range(int(count)):
        mig = _call(nvml, "nvmlDeviceGetMigDeviceHandleByIndex", handle, k)
        if mig is None:
            continue
        uuid = _text(_call(nvml, "nvmlDeviceGetUUID", mig))
        if uuid:
            out.append(uuid)
    return tuple(out)


def _device(nvml: Any, i: int) -> NvmlDevice | None:
    handle = _call(nvml, "nvmlDeviceGetHandleByIndex", i)
    pci = _call(nvml, "nvmlDeviceGetPciInfo", handle) if handle is not None else None
    bus_id = getattr(pci, "busId", None) if pci is not None else None
    if bus_id is None:
        return None
    cpu_words = _call(nvml, "nvmlDeviceGetCpuAffinity", handle, _CPU_BITS // 64)
    mem_words = _call(nvml, "nvmlDeviceGetMemoryAffinity", handle, _NODE_BITS // 64, _SCOPE_NODE)
    minor = _call(nvml, "nvmlDeviceGetMinorNumber", handle)
    return NvmlDevice(
        nvml_index=i,
        pci_address=normalize_bus_id(bus_id),
        uuid=_text(_call(nvml, "nvmlDeviceGetUUID", handle)),
        name=_text(_call(nvml, "nvmlDeviceGetName", handle)),
        minor=int(minor) if minor is not None else None,
        cpu_affinity=words_to_ids(int(w) for w in cpu_words) if cpu_words is not None else None,
        memory_nodes=words_to_ids(int(w) for w in mem_words) if mem_words is not None else None,
        mig_uuids=_mig_uuids(nvml, handle),
    )


def probe() -> tuple[NvmlDevice, ...] | None:
    """Every GPU NVML reports, or None when NVML is unavailable."""
    try:
        nvml = importlib.import_module("pynvml")
    except Exception as exc:  # ImportError, or a broken installation
        log.debug("NVML: pynvml not importable (%s); using sysfs only", exc)
        return None
    try:
        nvml.nvmlInit()
    except Exception as exc:
        log.debug("NVML: nvmlInit failed (%s); using sysfs only", exc)
        return None
    try:
        count = _call(nvml, "nvmlDeviceGetCount")
        if count is None:
            return None
        devices = tuple(d for d in (_device(nvml, i) for i in range(int(count))) if d is not None)
        log.debug("NVML: %d devices", len(devices))
        return devices
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception as exc:
            log.debug("NVML: nvmlShutdown failed: %s", exc)


def with_nvml(gpus: list[PciGpu], nvml_devices: Sequence[NvmlDevice]) -> list[PciGpu]:
    """``gpus`` with what NVML says of its NVIDIA GPUs (NVML's UUID, model and minor win; sysfs's CPUs do)."""
    by_addr = {d.pci_address: d for d in nvml_devices}
    out = []
    for g in gpus:
        d = by_addr.get(g.pci_address) if g.vendor == "nvidia" else None
        if d is not None:
            if g.uuid and d.uuid and g.uuid != d.uuid:
                log.warning("GPU %s: procfs says UUID %s, NVML says %s; using NVML's", g.pci_address, g.uuid, d.uuid)
            if g.local_cpus and d.cpu_affinity is not None and d.cpu_affinity != g.local_cpus:
                log.warning(
                    "GPU %s: sysfs local_cpulist %s, NVML CPU affinity %s; using sysfs",
                    g.pci_address, format_cpulist(g.local_cpus), format_cpulist(d.cpu_affinity),
                )
            g = g.replace(
                uuid=kept(d.uuid) or g.uuid,
                name=kept(d.name) or g.name,
                minor=d.minor if d.minor is not None else g.minor,
                local_cpus=g.local_cpus or (d.cpu_affinity or frozenset()),
                mig_uuids=tuple(printable(m) for m in d.mig_uuids),
                nvml_memory_nodes=d.memory_nodes,
            )
        out.append(g)
    return out
