"""What the root's files say about accelerators, whatever the vendor: the PCI scan, the device files, the NUMA
placement, and the bounded parsers the vendor modules share. Device files are only stat'ed, never opened; numbers
are parsed as bounded ASCII decimals or hex, never handed to ``int()``. See ``docs/gpus.rst``.
"""

from __future__ import annotations

import os
import stat

from .._base import excerpt, getLogger, printable
from .._fs import ascii_int
from .._vendors import ASCEND_NPUS, BASE_CLASSES, DRIVERS, PASSTHROUGH_DRIVERS, PCI_IDS, PCI_VENDORS, gpu_vendor
from ..cpulist import format_cpulist, parse_cpulist
from ..errors import PlanError
from .values import PciGpu

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the looks' start)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

log = getLogger(__name__)

__all__ = ["INDEX_DIGITS", "RENDER_NODE", "accessible", "addrs", "bdf", "device_nodes", "drop_other_drivers",
           "hex_attr", "index", "kept", "names", "node_verdicts", "normal_bdf", "numbered", "place_numa_node",
           "said", "scan_pci_gpus", "warn"]

_PCI_DEVICES = "sys/bus/pci/devices"
#: Digits of a PCI address as sysfs spells it (lower case), and of a sysfs hex attribute. Plain string tests
#: instead of regular expressions.
_LOWER_HEX = frozenset("0123456789abcdef")
_ANY_HEX = frozenset("0123456789abcdefABCDEF")
_DIGITS = frozenset("0123456789")
#: Device file names ``renderD<N>`` of AMD's and Intel's GPUs (``/dev/dri``).
RENDER_NODE = "renderD"
#: Most digits accepted in a visibility index (CUDA_VISIBLE_DEVICES & co.).
INDEX_DIGITS = 9


# ------------------------------------------------------------------------------------ small parsers
def hex_attr(text: str | None) -> int | None:
    """A sysfs hex attribute (``0x10de``: an optional ``0x``, then 1 to 16 ASCII hex digits), else None."""
    if text is None:
        return None
    digits = text.strip()
    if digits[:2] in ("0x", "0X"):
        digits = digits[2:]
    return int(digits, 16) if 0 < len(digits) <= 16 and set(digits) <= _ANY_HEX else None


def bdf(text: str) -> tuple[str, str, str, str] | None:
    """``(domain, bus, device, function)`` of a PCI address spelled ``dddd:bb:dd.f`` (a domain of 4 to 8 and
    bus and device of 2 lower-case hex digits, a function 0 to 7), else None."""
    parts = text.split(":")
    if len(parts) != 3:
        return None
    domain, bus, rest = parts
    device, dot, function = rest[:2], rest[2:3], rest[3:]
    if not (4 <= len(domain) <= 8 and len(bus) == 2 and len(rest) == 4 and dot == "." and len(function) == 1
            and function in "01234567" and set(domain + bus + device) <= _LOWER_HEX):
        return None
    return domain, bus, device, function


def normal_bdf(name: str) -> str | None:
    """A procfs/NVML bus id (``0000:18:00.0``, ``00000000:18:00.0``) as sysfs spells it."""
    m = bdf(name.strip().lower())
    if m is None:
        return None
    return f"{int(m[0], 16):04x}:{m[1]}:{m[2]}.{m[3]}"


def numbered(name: str, prefix: str) -> int | None:
    """N of a device file name ``<prefix><N>`` (N: 1 to 6 ASCII digits), else None."""
    digits = name[len(prefix):]
    if name.startswith(prefix) and 0 < len(digits) <= 6 and set(digits) <= _DIGITS:
        return int(digits)
    return None


def index(text: str) -> int | None:
    """An index of a visibility variable: 1 to :data:`INDEX_DIGITS` ASCII digits and nothing else, else None."""
    return ascii_int(text, max_digits=INDEX_DIGITS) if text.isascii() and text.isdigit() else None


def kept(text: str | None) -> str | None:
    """A string discovery keeps from a file of the machine (a model, a UUID, a driver's name), through
    :func:`numabind._base.printable`: a replayed root's files are someone else's, and every note, plan line and
    table that names the GPU prints what is kept here."""
    return None if text is None else printable(text)


def said(text: str) -> str:
    """A value the user set (an environment variable, a GPU list) in a message: :func:`numabind._base.excerpt`
    as typed, so the message shows which character is wrong; a file's text is quoted by ``excerpt`` alone."""
    return excerpt(text, escape=True)


def addrs(gpus: Sequence[PciGpu] | Sequence[str]) -> str:
    """``2 (0000:18:00.0, 0000:2a:00.0)``, or ``none``."""
    items = [g if isinstance(g, str) else g.pci_address for g in gpus]
    return f"{len(items)} ({', '.join(items)})" if items else "none"


def names(prefix: str, ids: Sequence[int]) -> str:
    """Device file names ``<prefix><N>``, ascending, or ``none``."""
    return ", ".join(f"{prefix}{i}" for i in sorted(ids)) or "none"


def warn(note: str) -> str:
    """``note``, logged at WARNING."""
    log.warning("%s", note)
    return note


# ------------------------------------------------------------------------------------ the PCI scan
def _is_integrated(vendor: str, address: str) -> bool:
    m = bdf(address)
    return vendor == "intel" and m is not None and int(m[0], 16) == 0 and int(m[1], 16) == 0


def _driver(reader: Any, base: str) -> str | None:
    realpath = getattr(reader, "realpath", None)
    real = realpath(f"{base}/driver") if realpath is not None else None
    return kept(os.path.basename(real)) if real else None


def _render_minor(reader: Any, base: str) -> int | None:
    for name in reader.listdir(f"{base}/drm"):
        minor = numbered(name, RENDER_NODE)
        if minor is not None:
            return minor
    return None


def scan_pci_gpus(reader: Any) -> list[PciGpu]:
    """Every GPU-class PCI device of a known vendor under the reader's root, PCI order."""
    found = []
    for addr in reader.listdir(_PCI_DEVICES):
        address = addr.lower()
        if bdf(address) is None:
            continue
        base = f"{_PCI_DEVICES}/{addr}"
        vendor_id = hex_attr(reader.read_strip(f"{base}/vendor"))
        pci_class = hex_attr(reader.read_strip(f"{base}/class")) if vendor_id in PCI_VENDORS else None
        if pci_class is None:
            continue
        device_id = hex_attr(reader.read_strip(f"{base}/device"))
        vendor = gpu_vendor(vendor_id, pci_class >> 16, device_id)
        if vendor is None:
            if vendor_id == PCI_IDS["ascend"] and pci_class >> 16 in BASE_CLASSES["ascend"]:
                log.debug("PCI %s: Huawei accelerator of device id %s is not an Ascend NPU; ignored", address,
                          f"0x{device_id:04x}" if device_id is not None else "unknown")
            continue
        raw_node = reader.read_strip(f"{base}/numa_node")
        node = ascii_int(raw_node, signed=True, max_digits=6) if raw_node is not None else None
        if raw_node and node is None:
            log.debug("GPU %s: unparsable numa_node %s", address, excerpt(raw_node))
        cpulist = reader.read_strip(f"{base}/local_cpulist")
        try:
            local = parse_cpulist(cpulist) if cpulist else frozenset()
        except PlanError:
            log.debug("GPU %s: unparsable local_cpulist %s", address, excerpt(cpulist or ""))
            local = frozenset()
        found.append(PciGpu(
            pci_address=address, vendor=vendor, pci_class=pci_class, device_id=device_id, firmware_node=node,
            local_cpus=local, integrated=_is_integrated(vendor, address), driver=_driver(reader, base),
            render_minor=_render_minor(reader, base) if vendor in ("amd", "intel") else None,
            name=ASCEND_NPUS.get(device_id) if vendor == "ascend" and device_id is not None else None))
    found.sort(key=lambda g: g.pci_address)
    log.debug("PCI scan: %d GPUs (%s)", len(found), ", ".join(f"{g.vendor} {g.pci_address}" for g in found))
    return found


# ------------------------------------------------------------------------------------ placing
def place_numa_node(gpu: PciGpu, nodes: Mapping[int, Any]) -> tuple[int | None, str, str]:
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
    said_fw = "is missing" if fw is None else f"is {fw}" + ("" if fw < 0 else " (no such node)")
    cpu_nodes = sorted(n for n, node in nodes.items() if node.cpus)
    if len(cpu_nodes) == 1:
        return cpu_nodes[0], "single-node", f"numa_node {said_fw}; the machine has one node with CPUs"
    touched = [n for n in cpu_nodes if nodes[n].cpus & gpu.local_cpus]
    if len(touched) == 1:
        return touched[0], "local_cpulist", (
            f"numa_node {said_fw}; local_cpulist {format_cpulist(gpu.local_cpus)} lies in node {touched[0]}"
        )
    mem = gpu.nvml_memory_nodes
    if mem is not None:
        known = sorted(n for n in mem if n in nodes)
        if len(known) == 1:
            return known[0], "nvml", f"numa_node {said_fw}; NVML memory affinity is node {known[0]}"
    if gpu.local_cpus:
        why = f"local_cpulist {format_cpulist(gpu.local_cpus)} spans nodes {format_cpulist(touched)}"
    else:
        why = "there is no local_cpulist"
    return None, "unknown", f"firmware numa_node {said_fw} and {why}"


# ------------------------------------------------------------------------------------ device files
def accessible(reader: Any, rel: str) -> bool:
    """Whether the device file ``rel`` under the root could be opened read-write (by its mode: ``reader.stat``)."""
    st = reader.stat(rel)
    if st is None:
        return False
    if getattr(reader, "is_live", False):
        return stat.S_ISCHR(st.st_mode) and os.access(reader.path(rel), os.R_OK | os.W_OK)
    return bool(st.st_mode & 0o600 == 0o600)


def device_nodes(reader: Any, directory: str, prefix: str) -> dict[int, bool] | None:
    """``{N: accessible}`` of the device files ``directory/<prefix N>``; None when there is none."""
    if not hasattr(reader, "path"):
        return None
    found = {}
    for name in reader.listdir(directory):
        n = numbered(name, prefix)
        if n is not None:
            found[n] = accessible(reader, f"{directory}/{name}")
    return found or None


def node_verdicts(gpus: Sequence[PciGpu], minor_of: Callable[[PciGpu], int | None],
                  nodes: Mapping[int, bool]) -> dict[str, bool | None]:
    """Per GPU: can its device node be opened? None when that cannot be told (GPUs of unknown minor: openable when
    enough unclaimed accessible nodes remain for them, not when none does)."""
    claimed = {m for m in map(minor_of, gpus) if m is not None}
    spare = [m for m, ok in nodes.items() if ok and m not in claimed]
    unknown = [g for g in gpus if minor_of(g) is None]
    out: dict[str, bool | None] = {}
    for g in gpus:
        m = minor_of(g)
        if m is not None:
            out[g.pci_address] = bool(nodes.get(m, False))
        elif not spare:
            out[g.pci_address] = False
        else:
            out[g.pci_address] = True if len(spare) >= len(unknown) else None
    return out


def drop_other_drivers(vendor: str, gpus: Sequence[PciGpu]) -> list[PciGpu]:
    """``vendor``'s GPUs among ``gpus`` that its runtime can drive (not bound to another driver), PCI order."""
    out = []
    allowed = DRIVERS[vendor]
    for g in sorted(gpus, key=lambda g: g.pci_address):
        if g.vendor != vendor:
            continue
        if g.driver is not None and (g.driver not in allowed if allowed else g.driver in PASSTHROUGH_DRIVERS):
            log.debug("GPU %s is bound to %s, not %s: its runtime cannot use it",
                      g.pci_address, g.driver, " or ".join(allowed) or "its vendor's driver")
            continue
        out.append(g)
    return out
