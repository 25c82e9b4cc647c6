"""I/O devices and the NUMA nodes they sit on: PCI functions, network interfaces, block devices.

Discovery, like :mod:`numabind.topology`: everything is read through one
:class:`~numabind._fs.FsReader` under a root, so a replayed machine (a directory or an
``hwloc-gather-topology`` dump) answers like the live one.

* :func:`scan_pci` lists the PCI functions of ``sys/bus/pci/devices`` with their class, ids,
  ``numa_node`` and ``local_cpulist``, and the network interfaces and block devices that
  ``sys/class/net`` and ``sys/class/block`` put on each (``numabind topology`` shows them per
  node, and its hwloc XML carries them).
* :class:`DeviceNodes` finds the node of numactl's device specifiers (``numabind run
  --membind=pci:0000:18:00.0``, ``--cpunodebind=netdev:eth0``; see
  :meth:`numabind.plan.Plan.from_numactl_args`): ``pci:[SEG:]BUS:DEV[.FN]`` (hexadecimal,
  segment and function 0 when left out) reads that function's ``numa_node``;
  ``netdev:IFACE`` and ``block:DEV`` follow the ``sys/class/net`` or ``sys/class/block``
  link to the device and read the ``numa_node`` of the nearest device above it that has one
  (a virtio NIC's PCI function, a partition's disk controller); ``file:PATH`` stats PATH on
  this machine's file system (a block device file names itself, any other file the device
  of its file system) and finds that block device under ``sys/dev/block/MAJ:MIN`` (else by
  the ``dev`` files of ``sys/class/block``). A device that does not exist, a virtual one
  (``lo``, ``loop0``, an overlay or tmpfs file) and one whose firmware reports
  ``numa_node`` -1 are a :class:`~numabind.errors.PlanError` saying so, never node 0.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import Any

from ._fs import FsReader, ascii_int
from .cpulist import format_cpulist, parse_cpulist
from .errors import PlanError

__all__ = ["DeviceNodes", "PciDevice", "pci_class_name", "scan_pci"]

_PCI = "sys/bus/pci/devices"
_HEX = frozenset("0123456789abcdef")

#: PCI base classes (and a few subclasses) by the names lspci and hwloc use.
_BASE_CLASSES = {
    0x00: "Unclassified", 0x01: "Storage", 0x02: "Network", 0x03: "Display", 0x04: "Multimedia",
    0x05: "Memory", 0x06: "Bridge", 0x07: "Communication", 0x08: "System", 0x09: "Input", 0x0A: "Docking",
    0x0B: "Processor", 0x0C: "SerialBus", 0x0D: "Wireless", 0x0E: "Intelligent", 0x0F: "Satellite",
    0x10: "Encryption", 0x11: "SignalProcessing", 0x12: "ProcessingAccelerator", 0x13: "Instrumentation",
}
_SUBCLASSES = {
    0x0100: "SCSI", 0x0101: "IDE", 0x0104: "RAID", 0x0106: "SATA", 0x0107: "SAS", 0x0108: "NVMExp",
    0x0200: "Ethernet", 0x0207: "InfiniBand", 0x0300: "VGA", 0x0302: "3D", 0x0B40: "Co-Processor",
    0x0C03: "USB", 0x0C05: "SMBus", 0x0600: "HostBridge", 0x0601: "ISABridge", 0x0604: "PCIBridge",
}
#: Base classes of the devices a topology listing shows (as hwloc keeps "important" I/O objects):
#: storage, network, display, processors/co-processors, accelerators.
IMPORTANT_CLASSES = frozenset({0x01, 0x02, 0x03, 0x0B, 0x12})


def pci_class_name(pci_class: int | None) -> str:
    """``0x020000`` -> ``"Ethernet"``, ``0x010802`` -> ``"NVMExp"``; by base class when the subclass has no name."""
    if pci_class is None:
        return "unknown"
    return _SUBCLASSES.get(pci_class >> 8) or _BASE_CLASSES.get(pci_class >> 16, f"class {pci_class >> 8:04x}")


@dataclass(frozen=True)
class PciDevice:
    """One PCI function as sysfs lists it."""

    address: str                     # "0000:18:00.0"
    vendor_id: int | None
    device_id: int | None
    pci_class: int | None            # the 24-bit class code (base, subclass, programming interface)
    numa_node: int | None            # None when the firmware reports -1 (or nothing)
    local_cpus: frozenset[int]       # local_cpulist; empty when not reported
    nets: tuple[str, ...] = ()       # network interfaces on this function (sys/class/net)
    blocks: tuple[str, ...] = ()     # whole block devices on it (sys/class/block, partitions left out)
    extra: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    @property
    def kind(self) -> str:
        return pci_class_name(self.pci_class)

    @property
    def important(self) -> bool:
        return self.pci_class is not None and (self.pci_class >> 16) in IMPORTANT_CLASSES

    def describe(self) -> str:
        """``PCI 0000:00:03.0 (Ethernet) net eth0``."""
        names = [f"net {n}" for n in self.nets] + [f"block {b}" for b in self.blocks]
        return f"PCI {self.address} ({self.kind})" + ("" if not names else " " + ", ".join(names))

    def to_dict(self) -> dict[str, Any]:
        return {"address": self.address, "class": None if self.pci_class is None else f"0x{self.pci_class:06x}",
                "kind": self.kind, "vendor_id": None if self.vendor_id is None else f"0x{self.vendor_id:04x}",
                "device_id": None if self.device_id is None else f"0x{self.device_id:04x}",
                "numa_node": self.numa_node, "local_cpus": format_cpulist(self.local_cpus),
                "nets": list(self.nets), "blocks": list(self.blocks)}


def _reader(root: str | os.PathLike[str] | FsReader | None) -> FsReader:
    return root if isinstance(root, FsReader) else FsReader(root)


def _hex_file(reader: FsReader, rel: str) -> int | None:
    text = reader.read_strip(rel)
    if not text or not text.startswith("0x"):
        return None
    digits = text[2:].lower()
    return int(digits, 16) if digits and len(digits) <= 8 and set(digits) <= _HEX else None


def _node_file(reader: FsReader, rel: str) -> int | None:
    """A ``numa_node`` file: the node, or None for -1 (unknown), a missing or a malformed file."""
    text = reader.read_strip(rel)
    value = None if text is None else ascii_int(text, signed=True, max_digits=6)
    return value if value is not None and value >= 0 else None


def _is_bdf(name: str) -> bool:
    """``SSSS:BB:DD.F`` in lower-case hexadecimal, as sysfs names PCI functions."""
    if len(name) != 12 or name[4] != ":" or name[7] != ":" or name[10] != ".":
        return False
    return set(name[:4] + name[5:7] + name[8:10] + name[11]) <= _HEX


def _pci_owner(path: str) -> str | None:
    """The last PCI function in a sysfs device path (``/sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0``)."""
    for part in reversed(path.split("/")):
        if _is_bdf(part):
            return part
    return None


def _class_members(reader: FsReader, cls: str) -> dict[str, list[str]]:
    """PCI address -> names of the ``sys/class/CLS`` entries whose device lies below that function."""
    out: dict[str, list[str]] = {}
    for name in reader.listdir(f"sys/class/{cls}"):
        if cls == "block" and reader.exists(f"sys/class/block/{name}/partition"):
            continue
        real = reader.realpath(f"sys/class/{cls}/{name}")
        owner = _pci_owner(real) if real else None
        if owner is not None:
            out.setdefault(owner, []).append(name)
    return out


def scan_pci(root: str | os.PathLike[str] | FsReader | None = None) -> tuple[PciDevice, ...]:
    """Every PCI function under the root, in address order, with its network and block devices."""
    reader = _reader(root)
    nets = _class_members(reader, "net")
    blocks = _class_members(reader, "block")
    found = []
    for name in reader.listdir(_PCI):
        address = name.lower()
        if not _is_bdf(address):
            continue
        base = f"{_PCI}/{name}"
        cpulist = reader.read_strip(f"{base}/local_cpulist")
        try:
            local = parse_cpulist(cpulist) if cpulist else frozenset()
        except PlanError:
            local = frozenset()
        found.append(PciDevice(
            address=address, vendor_id=_hex_file(reader, f"{base}/vendor"),
            device_id=_hex_file(reader, f"{base}/device"), pci_class=_hex_file(reader, f"{base}/class"),
            numa_node=_node_file(reader, f"{base}/numa_node"), local_cpus=local,
            nets=tuple(sorted(nets.get(address, ()))), blocks=tuple(sorted(blocks.get(address, ())))))
    found.sort(key=lambda d: d.address)
    return tuple(found)


def _parse_pci(text: str) -> str | None:
    """``[SEG:]BUS:DEV[.FN]`` (hexadecimal) as sysfs spells the function, or None."""
    head, dot, fn = text.partition(".")
    parts = head.split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    if len(parts) != 3 or (dot and not fn):
        return None
    fields = [*parts, fn or "0"]
    if not all(f and len(f) <= w and set(f.lower()) <= _HEX for f, w in zip(fields, (4, 2, 2, 1))):
        return None
    seg, bus, dev, func = (int(f, 16) for f in fields)
    if dev > 0x1F or func > 7:
        return None
    return f"{seg:04x}:{bus:02x}:{dev:02x}.{func:x}"


class DeviceNodes:
    """Finds the NUMA node of numactl's device specifiers under one root (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str] | FsReader | None = None) -> None:
        self.reader = _reader(root)

    def node_of(self, spec: str) -> int:
        """The node of ``pci:...``, ``netdev:IF``, ``block:DEV`` or ``file:PATH``; PlanError when there is none."""
        kind, sep, name = spec.partition(":")
        if not sep or not name:
            raise PlanError(f"device specifier {spec!r} names no device; write e.g. pci:0000:18:00.0, "
                            f"netdev:eth0, block:nvme0n1 or file:/data")
        if kind == "pci":
            return self._pci(spec, name)
        if kind == "netdev":
            return self._class(spec, "net", name)
        if kind == "block":
            return self._class(spec, "block", name)
        if kind == "file":
            return self._file(spec, name)
        raise PlanError(f"device specifier {spec!r}: {kind!r} is not one of pci:, netdev:, block:, file:")

    # -- the kinds -------------------------------------------------------------------
    def _pci(self, spec: str, text: str) -> int:
        address = _parse_pci(text)
        if address is None:
            raise PlanError(f"{spec!r}: {text!r} is not a PCI address; write [SEGMENT:]BUS:DEVICE[.FUNCTION] in "
                            f"hexadecimal, as lspci -D prints it (e.g. pci:0000:18:00.0 or pci:18:00)")
        base = f"{_PCI}/{address}"
        if not self.reader.isdir(base):
            listed = [n for n in self.reader.listdir(_PCI) if _is_bdf(n.lower())]
            shown = ", ".join(listed[:12]) + (" ..." if len(listed) > 12 else "") if listed else "none"
            raise PlanError(f"{spec!r}: no PCI function {address} under {self.reader.path(_PCI)} "
                            f"(functions: {shown})")
        return self._node(spec, base, f"PCI function {address}")

    def _class(self, spec: str, cls: str, name: str) -> int:
        if "/" in name or name in (".", ".."):
            raise PlanError(f"{spec!r}: {name!r} is not a device name (a name in {self.reader.path('sys/class/' + cls)})")
        rel = f"sys/class/{cls}/{name}"
        real = self.reader.realpath(rel)
        if real is None:
            names = self.reader.listdir(f"sys/class/{cls}")
            raise PlanError(f"{spec!r}: no {'network interface' if cls == 'net' else 'block device'} {name!r} "
                            f"(sys/class/{cls} lists: {', '.join(names) or 'nothing'})")
        what = f"{'network interface' if cls == 'net' else 'block device'} {name}"
        if not real.strip("/").startswith("sys/devices/") and self.reader.exists(f"{rel}/device/numa_node"):
            return self._node(spec, f"{rel}/device", what)     # a tree with plain class directories
        return self._above(spec, real, what)

    def _file(self, spec: str, path: str) -> int:
        try:
            st = os.stat(path)
        except OSError as e:
            raise PlanError(f"{spec!r}: cannot stat {path!r}: {e.strerror}") from None
        if stat.S_ISCHR(st.st_mode):
            raise PlanError(f"{spec!r}: {path!r} is a character device; file: takes a file or a block device "
                            f"(for a NIC use netdev:, for a PCI device pci:)")
        dev = st.st_rdev if stat.S_ISBLK(st.st_mode) else st.st_dev
        major, minor = os.major(dev), os.minor(dev)
        number = f"{major}:{minor}"
        real = self.reader.realpath(f"sys/dev/block/{number}")
        if real is None:
            for name in self.reader.listdir("sys/class/block"):
                if self.reader.read_strip(f"sys/class/block/{name}/dev") == number:
                    real = self.reader.realpath(f"sys/class/block/{name}")
                    break
        if real is None:
            raise PlanError(f"{spec!r}: {path!r} is on device {number}, which is no block device (a tmpfs, overlay "
                            f"or network file system has none): it lies on no NUMA node")
        return self._above(spec, real, f"block device {number} of {path}")

    # -- reading the node --------------------------------------------------------------
    def _above(self, spec: str, real: str, what: str) -> int:
        """The node of the nearest device at or above the sysfs device path ``real``."""
        parts = real.strip("/").split("/")
        while len(parts) > 2 and parts[:2] == ["sys", "devices"]:
            base = "/".join(parts)
            if self.reader.exists(f"{base}/numa_node"):
                return self._node(spec, base, what)
            parts.pop()
        raise PlanError(f"{spec!r}: the {what} is a virtual device ({real}): no device above it has a NUMA "
                        f"node; name a physical device's node instead")

    def _node(self, spec: str, base: str, what: str) -> int:
        text = self.reader.read_strip(f"{base}/numa_node")
        node = None if text is None else ascii_int(text, signed=True, max_digits=6)
        if node is None:
            raise PlanError(f"{spec!r}: cannot read the NUMA node of the {what} ({self.reader.path(base)}/numa_node: "
                            f"{text!r})")
        if node < 0:
            raise PlanError(f"{spec!r}: the firmware gives the {what} no NUMA node (numa_node is {node}); give the "
                            f"node by number instead")
        return node
