"""Accelerator (GPU) discovery from sysfs, procfs and optionally NVML.

Reads only through an :class:`numabind._fs.FsReader`; NVML (``pynvml``) is
used only for the live root and only when it imports.

Sources, in the order they are consulted:

* ``sys/bus/pci/devices/<addr>/{class,vendor,device,numa_node,local_cpulist}``:
  every display-class (0x03) device of NVIDIA (0x10de), AMD (0x1002) and
  Intel (0x8086), and processing-accelerator-class (0x12) devices of NVIDIA
  and AMD. Intel GPUs on PCI bus 0 are integrated and flagged as such.
* ``proc/driver/nvidia/gpus/<addr>/information``: UUID, model, minor number.
* ``sys/class/kfd/kfd/topology/nodes/*``: AMD GPU agents (UUID, APU flag) and
  the order ROCm numbers them in.
* NVML: UUIDs, MIG instance UUIDs and their parents, CPU and memory affinity.

Device numbering follows the runtime of one vendor (``topology.gpus`` is what
a worker of that runtime sees): NVIDIA if any NVIDIA GPU is present, else AMD,
else Intel; ``vendor=`` or ``$NUMABIND_GPU_VENDOR`` picks another.

* NVIDIA: physical order is PCI bus order. That is exactly CUDA's order under
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and NVML's order always. CUDA's default
  (``FASTEST_FIRST``) puts faster models first and breaks ties by PCI bus id,
  so it equals PCI order when all GPUs are the same model; when they are not,
  numabind keeps PCI order and logs a warning suggesting ``PCI_BUS_ID``.
  ``CUDA_VISIBLE_DEVICES`` entries are indices, ``GPU-<uuid>`` (or a unique
  prefix of one), ``MIG-<uuid>`` and ``MIG-GPU-<uuid>/<gi>/<ci>``; the first
  entry that is invalid, ambiguous or repeated ends the list, and an empty
  value means no devices.
* AMD: physical order is the KFD topology node order (PCI order without KFD).
  ``ROCR_VISIBLE_DEVICES`` filters first, then ``HIP_VISIBLE_DEVICES`` (or
  ``CUDA_VISIBLE_DEVICES`` when HIP's is unset) indexes into what is left;
  both take indices or ``GPU-<uuid>`` entries with the same rules as CUDA.
* Intel: physical order is PCI order. ``ZE_AFFINITY_MASK`` (``N`` or
  ``N.sub`` entries) filters and never permutes; entries that name no device
  are skipped; an empty value means all devices. Tile-as-device mode
  (``ZE_FLAT_DEVICE_HIERARCHY=FLAT``) numbers tiles, which sysfs cannot count,
  so numabind numbers whole cards.

Firmware that reports ``numa_node = -1`` is placed by its ``local_cpulist``
(the one node whose CPUs it overlaps), on a machine with one node with CPUs on
that node, else through NVML's memory affinity, else left ``None``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from .cpulist import format_cpulist, parse_cpulist
from .errors import PlanError

log = logging.getLogger(__name__)

__all__ = [
    "Gpu",
    "PciGpu",
    "VENDORS",
    "discover_gpus",
    "parse_nvidia_information",
    "place_numa_node",
    "scan_pci_gpus",
    "select_visible",
]

#: PCI vendor id -> numabind vendor name.
VENDORS = {0x10DE: "nvidia", 0x1002: "amd", 0x8086: "intel"}
_VENDOR_ORDER = ("nvidia", "amd", "intel")
#: PCI base classes accepted per vendor (0x03 display, 0x12 processing accelerator).
_BASE_CLASSES = {"nvidia": (0x03, 0x12), "amd": (0x03, 0x12), "intel": (0x03,)}
_PCI_DEVICES = "sys/bus/pci/devices"
_NV_PROC = "proc/driver/nvidia/gpus"
_KFD_NODES = "sys/class/kfd/kfd/topology/nodes"
_BDF = re.compile(r"([0-9a-f]{4,8}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])")


@dataclass(frozen=True)
class Gpu:
    """One accelerator as a worker process sees it.

    ``numa_source`` says how ``numa_node`` was found: ``"numa_node"`` (the PCI
    device's own attribute), ``"local_cpulist"``, ``"single-node"``, ``"nvml"``
    or ``"unknown"`` (then ``numa_node`` is None and ``numa_note`` says why).
    ``physical_index`` is the device's number with no visibility variable
    set; ``mig_uuid`` is set when the visible device is a MIG instance of
    this physical GPU.
    """

    index: int                      # visible index (after CUDA_VISIBLE_DEVICES & co.)
    pci_address: str                # "0000:1b:00.0"
    vendor: str                     # "nvidia" | "amd" | "intel"
    numa_node: int | None           # None when the firmware reports -1 and nothing else places it
    local_cpus: frozenset[int] = field(default_factory=frozenset)
    uuid: str | None = None
    name: str | None = None
    minor: int | None = None
    integrated: bool = False
    numa_source: str = "numa_node"
    numa_note: str = ""
    device_id: int | None = None
    physical_index: int | None = None
    mig_uuid: str | None = None

    def describe(self) -> str:
        """One human line: ``GPU 0 nvidia 0000:1b:00.0 node 0``."""
        where = f"node {self.numa_node}" if self.numa_node is not None else "node unknown"
        extra = f" ({self.mig_uuid})" if self.mig_uuid else ""
        return f"GPU {self.index} {self.vendor} {self.pci_address}{extra} {where}"

    def to_dict(self) -> dict:
        """JSON-serializable form (cpu sets as canonical cpulists)."""
        return {
            "index": self.index,
            "pci_address": self.pci_address,
            "vendor": self.vendor,
            "numa_node": self.numa_node,
            "numa_source": self.numa_source,
            "numa_note": self.numa_note,
            "local_cpus": format_cpulist(self.local_cpus),
            "uuid": self.uuid,
            "name": self.name,
            "minor": self.minor,
            "integrated": self.integrated,
            "device_id": f"0x{self.device_id:04x}" if self.device_id is not None else None,
            "physical_index": self.physical_index,
            "mig_uuid": self.mig_uuid,
        }


@dataclass(frozen=True)
class PciGpu:
    """A GPU as sysfs lists it, before numbering (internal record, public for tests)."""

    pci_address: str
    vendor: str
    pci_class: int
    device_id: int | None
    firmware_node: int | None       # numa_node as read; None when missing or unparsable
    local_cpus: frozenset[int]
    integrated: bool = False
    uuid: str | None = None
    name: str | None = None
    minor: int | None = None
    kfd_node: int | None = None
    mig_uuids: tuple[str, ...] = ()
    nvml_memory_nodes: frozenset[int] | None = None


# ---------------------------------------------------------------- sysfs scan
def _read_hex(reader, rel: str) -> int | None:
    text = reader.read_strip(rel)
    if not text:
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None


def _is_integrated(vendor: str, address: str) -> bool:
    m = _BDF.fullmatch(address)
    return vendor == "intel" and m is not None and int(m.group(1), 16) == 0 and int(m.group(2), 16) == 0


def scan_pci_gpus(reader) -> list[PciGpu]:
    """Every GPU-class PCI device of a known vendor under the reader's root, PCI order."""
    found = []
    for addr in reader.listdir(_PCI_DEVICES):
        address = addr.lower()
        if not _BDF.fullmatch(address):
            continue
        base = f"{_PCI_DEVICES}/{addr}"
        vendor_id = _read_hex(reader, f"{base}/vendor")
        vendor = VENDORS.get(vendor_id) if vendor_id is not None else None
        pci_class = _read_hex(reader, f"{base}/class")
        if vendor is None or pci_class is None or (pci_class >> 16) not in _BASE_CLASSES[vendor]:
            continue
        node = reader.read_int(f"{base}/numa_node")
        cpulist = reader.read_strip(f"{base}/local_cpulist")
        try:
            local = parse_cpulist(cpulist) if cpulist else frozenset()
        except PlanError:
            log.debug("GPU %s: unparsable local_cpulist %r", address, cpulist)
            local = frozenset()
        found.append(PciGpu(
            pci_address=address,
            vendor=vendor,
            pci_class=pci_class,
            device_id=_read_hex(reader, f"{base}/device"),
            firmware_node=node,
            local_cpus=local,
            integrated=_is_integrated(vendor, address),
        ))
    found.sort(key=lambda g: g.pci_address)
    log.debug("PCI scan: %d GPUs (%s)", len(found), ", ".join(f"{g.vendor} {g.pci_address}" for g in found))
    return found


def parse_nvidia_information(text: str) -> dict[str, str]:
    """``Key: value`` lines of ``proc/driver/nvidia/gpus/*/information``."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _nvidia_proc(reader, gpus: list[PciGpu]) -> list[PciGpu]:
    out = []
    for g in gpus:
        if g.vendor == "nvidia":
            text = reader.read(f"{_NV_PROC}/{g.pci_address}/information")
            if text is not None:
                info = parse_nvidia_information(text)
                minor = info.get("Device Minor")
                g = replace(
                    g,
                    uuid=info.get("GPU UUID") or g.uuid,
                    name=info.get("Model") or g.name,
                    minor=int(minor) if minor and minor.isdigit() else g.minor,
                )
        out.append(g)
    return out


def _kfd_properties(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return out


def _amd_kfd(reader, gpus: list[PciGpu]) -> list[PciGpu]:
    by_addr: dict[str, tuple[int, dict[str, int], str | None]] = {}
    node_ids = sorted((int(n) for n in reader.listdir(_KFD_NODES) if n.isdigit()))
    for nid in node_ids:
        text = reader.read(f"{_KFD_NODES}/{nid}/properties")
        if text is None:
            continue
        props = _kfd_properties(text)
        if not props.get("simd_count"):
            continue  # a CPU agent
        loc = props.get("location_id")
        if loc is None:
            continue
        addr = f"{props.get('domain', 0):04x}:{loc >> 8 & 0xFF:02x}:{loc >> 3 & 0x1F:02x}.{loc & 7:x}"
        by_addr[addr] = (nid, props, reader.read_strip(f"{_KFD_NODES}/{nid}/name"))
    out = []
    for g in gpus:
        hit = by_addr.get(g.pci_address) if g.vendor == "amd" else None
        if hit is not None:
            nid, props, name = hit
            unique = props.get("unique_id")
            g = replace(
                g,
                kfd_node=nid,
                uuid=f"GPU-{unique:016x}" if unique else g.uuid,
                name=name or g.name,
                integrated=g.integrated or props.get("cpu_cores_count", 0) > 0,
                minor=props.get("drm_render_minor", g.minor),
            )
        out.append(g)
    return out


def _with_nvml(gpus: list[PciGpu], nvml_devices) -> list[PciGpu]:
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
            g = replace(
                g,
                uuid=d.uuid or g.uuid,
                name=d.name or g.name,
                minor=d.minor if d.minor is not None else g.minor,
                local_cpus=g.local_cpus or (d.cpu_affinity or frozenset()),
                mig_uuids=d.mig_uuids,
                nvml_memory_nodes=d.memory_nodes,
            )
        out.append(g)
    return out


# ------------------------------------------------------------------ placing
def place_numa_node(gpu: PciGpu, nodes: Mapping) -> tuple[int | None, str, str]:
    """``(node, source, note)`` for one GPU; node None when it cannot be placed."""
    fw = gpu.firmware_node
    if fw is not None and fw >= 0 and fw in nodes:
        mem = gpu.nvml_memory_nodes
        if mem and fw not in mem:
            log.warning(
                "GPU %s: sysfs numa_node %d, NVML memory affinity nodes %s; using sysfs",
                gpu.pci_address, fw, format_cpulist(mem),
            )
        return fw, "numa_node", ""
    said = "is missing" if fw is None else f"is {fw}" + ("" if fw < 0 else " (no such node)")
    cpu_nodes = sorted(n for n, node in nodes.items() if node.cpus)
    if len(cpu_nodes) == 1:
        return cpu_nodes[0], "single-node", f"numa_node {said}; the machine has one node with CPUs"
    if gpu.local_cpus:
        touched = [n for n in cpu_nodes if nodes[n].cpus & gpu.local_cpus]
        if len(touched) == 1:
            return touched[0], "local_cpulist", (
                f"numa_node {said}; local_cpulist {format_cpulist(gpu.local_cpus)} lies in node {touched[0]}"
            )
    mem = gpu.nvml_memory_nodes
    if mem is not None:
        known = sorted(n for n in mem if n in nodes)
        if len(known) == 1:
            return known[0], "nvml", f"numa_node {said}; NVML memory affinity is node {known[0]}"
    if gpu.local_cpus:
        touched = [n for n in cpu_nodes if nodes[n].cpus & gpu.local_cpus]
        why = f"local_cpulist {format_cpulist(gpu.local_cpus)} spans nodes {format_cpulist(touched)}"
    else:
        why = "there is no local_cpulist"
    return None, "unknown", f"firmware numa_node {said} and {why}"


# -------------------------------------------------------------- visibility
def _match_uuid(entry: str, uuids: Sequence[str | None]) -> int | None:
    want = entry.lower()
    hits = [k for k, u in enumerate(uuids) if u and u.lower().startswith(want)]
    return hits[0] if len(hits) == 1 else None


def _parse_entries(value: str, count: int, uuids: Sequence[str | None],
                   mig: Mapping[str, int], var: str) -> tuple[list[tuple[int, str | None]], str]:
    """CUDA-style list: indices, GPU-uuid prefixes, MIG ids; the first bad entry ends it."""
    chosen: list[tuple[int, str | None]] = []
    for raw in value.split(","):
        entry = raw.strip()
        pick: tuple[int, str | None] | None = None
        if re.fullmatch(r"[0-9]+", entry):
            k = int(entry)
            pick = (k, None) if k < count else None
            why = f"index {k} is out of range ({count} devices)"
        elif entry.upper().startswith("MIG-GPU-"):
            parent_uuid = entry[4:].split("/", 1)[0]
            k = _match_uuid(parent_uuid, uuids)
            pick = (k, entry) if k is not None else None
            why = "names no known parent GPU"
        elif entry.upper().startswith("MIG-"):
            keys = [m for m in mig if m.lower().startswith(entry.lower())]
            pick = (mig[keys[0]], keys[0]) if len(keys) == 1 else None
            why = ("is ambiguous" if keys else
                   "names no known MIG instance" + ("" if mig else " (MIG UUIDs need NVML: pip install nvidia-ml-py)"))
        elif entry.upper().startswith("GPU-"):
            k = _match_uuid(entry, uuids)
            pick = (k, None) if k is not None else None
            why = "matches no GPU UUID or more than one"
            if not any(uuids):
                why += " (UUIDs come from the driver's /proc/driver/nvidia or NVML; neither is readable)"
        else:
            why = "is not an index or a UUID"
        if pick is not None and pick in chosen:
            pick, why = None, "repeats an earlier device"
        if pick is None:
            note = f"{var}: entry {entry!r} {why}; it and the entries after it are ignored"
            log.warning("%s", note)
            return chosen, note
        chosen.append(pick)
    return chosen, ""


def select_visible(vendor: str, devices: Sequence[PciGpu], env: Mapping[str, str]
                   ) -> tuple[list[tuple[int, str | None]], list[str]]:
    """Positions (into ``devices``, physical order) the runtime makes visible, in visible order.

    Returns ``([(position, mig_uuid_or_None), ...], notes)``.
    """
    count = len(devices)
    everything = [(k, None) for k in range(count)]
    notes: list[str] = []
    if vendor == "nvidia":
        value = env.get("CUDA_VISIBLE_DEVICES")
        if value is None:
            return everything, notes
        mig = {m: k for k, d in enumerate(devices) for m in d.mig_uuids}
        chosen, note = _parse_entries(value, count, [d.uuid for d in devices], mig, "CUDA_VISIBLE_DEVICES")
        notes += [note] if note else []
        return chosen, notes
    if vendor == "amd":
        chosen = everything
        rocr = env.get("ROCR_VISIBLE_DEVICES")
        if rocr is not None:
            chosen, note = _parse_entries(rocr, count, [d.uuid for d in devices], {}, "ROCR_VISIBLE_DEVICES")
            notes += [note] if note else []
        var = "HIP_VISIBLE_DEVICES" if "HIP_VISIBLE_DEVICES" in env else "CUDA_VISIBLE_DEVICES"
        hip = env.get(var)
        if hip is not None:
            sub = [devices[k] for k, _ in chosen]
            inner, note = _parse_entries(hip, len(sub), [d.uuid for d in sub], {}, var)
            notes += [note] if note else []
            chosen = [chosen[k] for k, _ in inner]
        return chosen, notes
    value = env.get("ZE_AFFINITY_MASK")
    if not value or not value.strip():
        return everything, notes
    keep = set()
    for raw in value.split(","):
        head = raw.strip().split(".", 1)[0]
        if head.isdigit() and int(head) < count:
            keep.add(int(head))
        else:
            note = f"ZE_AFFINITY_MASK: entry {raw.strip()!r} names no device ({count} devices); skipped"
            log.warning("%s", note)
            notes.append(note)
    return [(k, None) for k in sorted(keep)], notes


def _runtime_vendor(gpus: Sequence[PciGpu], wanted: str | None) -> str | None:
    if wanted:
        if wanted not in _VENDOR_ORDER:
            raise PlanError(f"GPU vendor {wanted!r} is not one of {', '.join(_VENDOR_ORDER)}")
        return wanted
    present = {g.vendor for g in gpus}
    discrete = {g.vendor for g in gpus if not g.integrated}
    for pool in (discrete, present):
        for v in _VENDOR_ORDER:
            if v in pool:
                return v
    return None


def _physical_order(vendor: str, gpus: Sequence[PciGpu], env: Mapping[str, str]) -> list[PciGpu]:
    mine = [g for g in gpus if g.vendor == vendor]
    if vendor == "amd" and mine and all(g.kfd_node is not None for g in mine):
        return sorted(mine, key=lambda g: g.kfd_node)
    mine.sort(key=lambda g: g.pci_address)
    if vendor == "nvidia" and env.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST") != "PCI_BUS_ID":
        models = {g.name or g.device_id for g in mine}
        if len(models) > 1:
            log.warning(
                "GPUs of different models (%s) with CUDA_DEVICE_ORDER=%s: CUDA may number them "
                "fastest first, numabind numbers them in PCI bus order; set CUDA_DEVICE_ORDER=PCI_BUS_ID "
                "so both agree",
                ", ".join(sorted(str(m) for m in models)), env.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST (default)"),
            )
    return mine


def discover_gpus(reader, nodes, env=None, *, vendor: str | None = None,
                  use_nvml: bool | None = None) -> tuple[Gpu, ...]:
    """Visible accelerators under ``reader``'s root, in visible-index order.

    ``nodes`` is the discovered ``{id: Node}`` mapping (used to place GPUs whose
    firmware reports ``numa_node = -1``); ``env`` defaults to ``os.environ``.
    ``vendor`` (default ``$NUMABIND_GPU_VENDOR``, else the first of nvidia,
    amd, intel present) picks whose runtime numbers the devices. ``use_nvml``
    defaults to "only for the live root".
    """
    env = os.environ if env is None else env
    gpus = _amd_kfd(reader, _nvidia_proc(reader, scan_pci_gpus(reader)))
    if use_nvml is None:
        use_nvml = bool(getattr(reader, "is_live", False)) and any(g.vendor == "nvidia" for g in gpus)
    if use_nvml:
        from . import _nvml

        nvml_devices = _nvml.probe()
        if nvml_devices is not None:
            gpus = _with_nvml(gpus, nvml_devices)
    if vendor is None:
        vendor = (env.get("NUMABIND_GPU_VENDOR") or "").strip().lower() or None
        if vendor is not None and vendor not in _VENDOR_ORDER:
            log.warning("NUMABIND_GPU_VENDOR=%r is not one of %s; ignored", vendor, ", ".join(_VENDOR_ORDER))
            vendor = None
    chosen_vendor = _runtime_vendor(gpus, vendor)
    if chosen_vendor is None:
        return ()
    physical = _physical_order(chosen_vendor, gpus, env)
    visible, _notes = select_visible(chosen_vendor, physical, env)
    out = []
    for index, (pos, mig_uuid) in enumerate(visible):
        g = physical[pos]
        node, source, note = place_numa_node(g, nodes)
        if node is None:
            log.warning("GPU %d (%s): NUMA node unknown: %s", index, g.pci_address, note)
        out.append(Gpu(
            index=index,
            pci_address=g.pci_address,
            vendor=g.vendor,
            numa_node=node,
            local_cpus=g.local_cpus,
            uuid=g.uuid,
            name=g.name,
            minor=g.minor,
            integrated=g.integrated,
            numa_source=source,
            numa_note=note,
            device_id=g.device_id,
            physical_index=pos,
            mig_uuid=mig_uuid,
        ))
    log.debug("GPUs (%s runtime): %s", chosen_vendor, "; ".join(g.describe() for g in out) or "none visible")
    return tuple(out)
