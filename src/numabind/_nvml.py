"""Optional NVML probe through nvidia-ml-py's ``pynvml`` module (imported lazily).

numabind never needs NVML: sysfs is the source of truth and NVML only adds
what sysfs cannot tell (MIG instance UUIDs and their parents) and a second
opinion on CPU and memory affinity. Every failure (module missing, no driver,
an unsupported call) degrades to "no information" with a DEBUG line.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from typing import Any

from .cpulist import words_to_ids

log = logging.getLogger(__name__)

__all__ = ["NvmlDevice", "normalize_bus_id", "probe"]

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
    mig_uuids: tuple[str, ...] = field(default=())


def normalize_bus_id(bus_id: str | bytes) -> str:
    """NVML's ``00000000:1B:00.0`` (bytes or str) as sysfs's ``0000:1b:00.0``."""
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode("ascii", "replace")
    text = str(bus_id).strip().rstrip("\x00").lower()
    dom, sep, rest = text.partition(":")
    if not sep or not rest.count(":") == 1:
        return text
    try:
        return f"{int(dom, 16):04x}:{rest}"
    except ValueError:
        return text


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value).rstrip("\x00")


def _load() -> Any:
    try:
        return importlib.import_module("pynvml")
    except Exception as exc:  # ImportError, or a broken installation
        log.debug("NVML: pynvml not importable (%s); using sysfs only", exc)
        return None


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


def probe() -> tuple[NvmlDevice, ...] | None:
    """Every GPU NVML reports, or None when NVML is unavailable."""
    nvml = _load()
    if nvml is None:
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
        devices = []
        for i in range(int(count)):
            handle = _call(nvml, "nvmlDeviceGetHandleByIndex", i)
            if handle is None:
                continue
            pci = _call(nvml, "nvmlDeviceGetPciInfo", handle)
            bus_id = getattr(pci, "busId", None) if pci is not None else None
            if bus_id is None:
                continue
            cpu_words = _call(nvml, "nvmlDeviceGetCpuAffinity", handle, _CPU_BITS // 64)
            mem_words = _call(nvml, "nvmlDeviceGetMemoryAffinity", handle, _NODE_BITS // 64, _SCOPE_NODE)
            minor = _call(nvml, "nvmlDeviceGetMinorNumber", handle)
            devices.append(NvmlDevice(
                nvml_index=i,
                pci_address=normalize_bus_id(bus_id),
                uuid=_text(_call(nvml, "nvmlDeviceGetUUID", handle)),
                name=_text(_call(nvml, "nvmlDeviceGetName", handle)),
                minor=int(minor) if minor is not None else None,
                cpu_affinity=words_to_ids(int(w) for w in cpu_words) if cpu_words is not None else None,
                memory_nodes=words_to_ids(int(w) for w in mem_words) if mem_words is not None else None,
                mig_uuids=_mig_uuids(nvml, handle),
            ))
        log.debug("NVML: %d devices", len(devices))
        return tuple(devices)
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception as exc:
            log.debug("NVML: nvmlShutdown failed: %s", exc)
