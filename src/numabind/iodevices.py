"""I/O devices and the NUMA nodes they sit on: PCI functions, network interfaces, block devices, and the nearest
network devices of each GPU (what ``nvidia-smi topo -m`` prints, from sysfs alone).

Read through one :class:`~numabind._fs.FsReader` under a root, so a replayed machine answers like the live one.
What each function reads and how ties are split: docs/iodevices.rst.
"""

from __future__ import annotations

import os
import stat   # already loaded by os: costs nothing

from ._base import Value, field
from ._fs import FsReader, ascii_int
from .cpulist import format_cpulist, parse_cpulist
from .errors import PlanError

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the looks' start)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable, Sequence
    from typing import Any

__all__ = ["LINK_CLASSES", "NIC_ENV_VARS", "DeviceNodes", "Nic", "NicChoice", "PciDevice", "PciPlace", "choose_nics",
           "gpu_nics", "gpu_places", "interface_functions", "link_class", "link_matrix", "nearest_nics", "nic_env",
           "pci_class_name", "pci_place", "scan_nics", "scan_pci"]

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


class PciDevice(Value):
    """One PCI function as sysfs lists it (``extra`` takes no part in equality and hashing)."""

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
        if kind in ("netdev", "block"):
            return self._class(spec, "net" if kind == "netdev" else "block", name)
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
            raise PlanError(f"{spec!r}: {name!r} is not a device name (a name in "
                            f"{self.reader.path('sys/class/' + cls)})")
        rel, device = f"sys/class/{cls}/{name}", "network interface" if cls == "net" else "block device"
        real = self.reader.realpath(rel)
        if real is None:
            raise PlanError(f"{spec!r}: no {device} {name!r} (sys/class/{cls} lists: "
                            f"{', '.join(self.reader.listdir(f'sys/class/{cls}')) or 'nothing'})")
        what = f"{device} {name}"
        if not real.strip("/").startswith("sys/devices/") and self.reader.exists(f"{rel}/device/numa_node"):
            return self._node(spec, f"{rel}/device", what)     # a tree with plain class directories
        if cls == "net" and _pci_owner(real) is None:
            functions = interface_functions(self.reader, name)
            if functions:                                      # a bond's slaves, a VLAN's lower device
                return self._stacked(spec, what, functions)
        return self._above(spec, real, what)

    def _stacked(self, spec: str, what: str, functions: tuple[str, ...]) -> int:
        """The one node of the PCI functions under a virtual interface (each as :func:`pci_place` finds it)."""
        places = [pci_place(self.reader, f) for f in functions]
        nodes = {p.numa_node for p in places}
        shown = ", ".join(f"{p.address} (node {'unknown' if p.numa_node is None else p.numa_node})" for p in places)
        first = places[0].numa_node
        if first is None or None in nodes:
            raise PlanError(f"{spec!r}: the {what} sits on PCI functions {shown}; the firmware gives one no NUMA "
                            f"node; give the node by number instead")
        if len(nodes) > 1:
            raise PlanError(f"{spec!r}: the {what} spans PCI functions on different nodes: {shown}; name one of "
                            f"its interfaces (netdev:IF) or a node by number")
        return first

    def _file(self, spec: str, path: str) -> int:
        try:
            st = os.stat(path)
        except OSError as e:
            raise PlanError(f"{spec!r}: cannot stat {path!r}: {e.strerror}") from None
        if stat.S_ISCHR(st.st_mode):
            raise PlanError(f"{spec!r}: {path!r} is a character device; file: takes a file or a block device "
                            f"(for a NIC use netdev:, for a PCI device pci:)")
        dev = st.st_rdev if stat.S_ISBLK(st.st_mode) else st.st_dev
        number = f"{os.major(dev)}:{os.minor(dev)}"
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


# -- the nearest network device of each GPU ----------------------------------------------------------------------

#: Link classes between two PCI functions, nearest first (``nvidia-smi topo -m``'s names).
LINK_CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS")


def _is_host_bridge(name: str) -> bool:
    """``pci0000:15``: a PCI root (host bridge) directory of ``sys/devices``."""
    return len(name) == 10 and name.startswith("pci") and name[7] == ":" and set(name[3:7] + name[8:]) <= _HEX


class PciPlace(Value):
    """A PCI function's place: ``path`` is ``(host bridge, bridge, ..., address)`` from the root down (just
    ``(address,)`` when sysfs shows no tree), ``numa_node`` None when neither it nor anything above it has one."""

    address: str
    path: tuple[str, ...]
    numa_node: int | None

    @property
    def host_bridge(self) -> str | None:
        return self.path[0] if len(self.path) > 1 and _is_host_bridge(self.path[0]) else None


def _chain(real: str) -> tuple[str, ...]:
    """The host bridge and PCI functions of a sysfs device path, from the root down."""
    parts = real.strip("/").split("/")
    if parts[:2] != ["sys", "devices"]:
        return ()
    out = tuple(p for p in parts[2:] if _is_host_bridge(p) or _is_bdf(p))
    return out if out and _is_host_bridge(out[0]) else tuple(p for p in out if _is_bdf(p))


def pci_place(root: str | os.PathLike[str] | FsReader | None, address: str) -> PciPlace:
    """Where PCI function ``address`` sits (see :class:`PciPlace`); PlanError when there is no such function."""
    reader = _reader(root)
    address = address.lower()
    rel = f"{_PCI}/{address}"
    real = reader.realpath(rel)
    if real is None:
        raise PlanError(f"no PCI function {address} under {reader.path(_PCI)}; give an address lspci -D lists")
    path = _chain(real)
    if not path or path[-1] != address:
        path = (address,)
    node = _node_file(reader, f"{rel}/numa_node")
    if node is None and reader.exists(f"{rel}/physfn"):
        pf = _pci_owner(reader.realpath(f"{rel}/physfn") or "")
        node = None if pf is None else _node_file(reader, f"{_PCI}/{pf}/numa_node")
    for above in reversed(path[:-1]):
        if node is not None:
            break
        if _is_bdf(above):
            node = _node_file(reader, f"{_PCI}/{above}/numa_node")
    return PciPlace(address=address, path=path, numa_node=node)


def link_class(a: PciPlace, b: PciPlace) -> str:
    """The link between two PCI functions, one of :data:`LINK_CLASSES` (see the module docstring)."""
    host = a.host_bridge
    if host is None or host != b.host_bridge:
        return "NODE" if a.numa_node is not None and a.numa_node == b.numa_node else "SYS"
    above_a, above_b = a.path[:-1], b.path[:-1]
    common = 0
    while common < min(len(above_a), len(above_b)) and above_a[common] == above_b[common]:
        common += 1
    if common <= 1:
        return "PHB"
    return "PIX" if len(above_a) - common <= 1 and len(above_b) - common <= 1 else "PXB"


class Nic(Value):
    """A network device on a PCI function: an RDMA device (InfiniBand or RoCE) or a plain interface."""

    name: str
    kind: str                        # "ib" (an RDMA device) or "eth"
    place: PciPlace
    ports: tuple[int, ...] = ()      # an RDMA device's ports
    netdevs: tuple[str, ...] = ()    # the interfaces on its function
    uppers: tuple[str, ...] = ()     # the virtual interfaces stacked on them (bonds, VLANs)
    physfn: str | None = None        # the physical function of an SR-IOV VF

    @property
    def address(self) -> str:
        return self.place.address

    @property
    def numa_node(self) -> int | None:
        return self.place.numa_node

    @property
    def ifnames(self) -> tuple[str, ...]:
        """The interfaces sockets use: the uppermost ones (a bond, a VLAN) where there are, else ``netdevs``."""
        return self.uppers or self.netdevs

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "pci_address": self.address, "numa_node": self.numa_node,
                "pci_path": list(self.place.path), "ports": list(self.ports), "netdevs": list(self.netdevs),
                "uppers": list(self.uppers), "physfn": self.physfn}


def _lowers(reader: FsReader, name: str) -> list[str]:
    """The interfaces below a virtual one: its ``lower_*`` links, else a bond's ``bonding/slaves``."""
    base = f"sys/class/net/{name}"
    found = [n[len("lower_"):] for n in reader.listdir(base) if n.startswith("lower_")]
    if not found:
        found = (reader.read_strip(f"{base}/bonding/slaves") or "").split()
    return sorted(set(found))


def interface_functions(root: str | os.PathLike[str] | FsReader | None, name: str) -> tuple[str, ...]:
    """The PCI functions under network interface ``name``: its own, or a bond's slaves' and a VLAN's lower
    device's (followed down any depth); () for a purely virtual one (``lo``)."""
    reader = _reader(root)
    seen: set[str] = set()
    out: set[str] = set()
    todo = [name]
    while todo:
        cur = todo.pop()
        if cur in seen:
            continue
        seen.add(cur)
        real = reader.realpath(f"sys/class/net/{cur}")
        owner = _pci_owner(real) if real else None
        if owner is not None:
            out.add(owner)
        else:
            todo.extend(_lowers(reader, cur))
    return tuple(sorted(out))


def scan_nics(root: str | os.PathLike[str] | FsReader | None = None) -> tuple[Nic, ...]:
    """Every RDMA device and every network interface on a PCI function, by PCI address (see the module
    docstring). A function with an RDMA device is listed once, under the RDMA device's name."""
    reader = _reader(root)
    nets = _class_members(reader, "net")
    uppers: dict[str, set[str]] = {}
    for name in reader.listdir("sys/class/net"):
        real = reader.realpath(f"sys/class/net/{name}")
        if real is not None and _pci_owner(real) is None:
            for address in interface_functions(reader, name):
                uppers.setdefault(address, set()).add(name)
    found: list[Nic] = []
    covered: set[str] = set()

    def make(name: str, kind: str, address: str, ports: tuple[int, ...]) -> Nic:
        physfn = (_pci_owner(reader.realpath(f"{_PCI}/{address}/physfn") or "")
                  if reader.exists(f"{_PCI}/{address}/physfn") else None)
        return Nic(name=name, kind=kind, place=pci_place(reader, address), ports=ports,
                   netdevs=tuple(sorted(nets.get(address, ()))), uppers=tuple(sorted(uppers.get(address, ()))),
                   physfn=physfn)

    for name in reader.listdir("sys/class/infiniband"):
        real = reader.realpath(f"sys/class/infiniband/{name}/device")
        owner = _pci_owner(real) if real else None
        if owner is None or not reader.exists(f"{_PCI}/{owner}"):
            continue                                   # a software RDMA device (rxe, siw) has no function
        ports = tuple(sorted(int(p) for p in reader.listdir(f"sys/class/infiniband/{name}/ports") if p.isdigit()))
        found.append(make(name, "ib", owner, ports))
        covered.add(owner)
    for address, names in sorted(nets.items()):
        if address not in covered and reader.exists(f"{_PCI}/{address}"):
            found.append(make(sorted(names)[0], "eth", address, ()))
    found.sort(key=lambda n: (n.address, n.name))
    return tuple(found)


def _nearest(gpu: PciPlace, pool: Sequence[Nic]) -> list[Nic]:
    """The NICs of ``pool`` in the nearest link class to ``gpu`` (a VF only when its physical function is not one)."""
    ranks = [LINK_CLASSES.index(link_class(gpu, n.place)) for n in pool]
    best = min(ranks, default=0)
    near = [n for n, r in zip(pool, ranks) if r == best]
    addresses = {n.address for n in near}
    return [n for n in near if n.physfn is None or n.physfn not in addresses]


def nearest_nics(gpus: Sequence[PciPlace], nics: Iterable[Nic], *, kind: str | None = None,
                 need_ifname: bool = False) -> dict[str, tuple[Nic, ...]]:
    """GPU address -> its nearest NICs (of ``kind`` ``"ib"``/``"eth"``; any when None; with an interface when
    ``need_ifname``): those of its nearest link class, shared evenly in PCI order among the GPUs with the same
    candidates; () when none qualifies (docs/iodevices.rst)."""
    pool = [n for n in nics if (kind is None or n.kind == kind) and (not need_ifname or n.ifnames)]
    candidates = {gpu.address: tuple(sorted(_nearest(gpu, pool), key=lambda n: (n.address, n.name))) for gpu in gpus}
    groups: dict[tuple[Nic, ...], list[str]] = {}
    for address in sorted(candidates):
        groups.setdefault(candidates[address], []).append(address)
    out: dict[str, tuple[Nic, ...]] = {}
    for cands, members in groups.items():
        share, total = len(members), len(cands)
        for k, address in enumerate(members):
            if not cands:
                out[address] = ()
            elif total >= share:
                out[address] = cands[k * total // share:(k + 1) * total // share]
            else:
                out[address] = (cands[k % total],)
    return {g.address: out[g.address] for g in gpus}


#: The variables :func:`nic_env` sets, in the order they are listed.
NIC_ENV_VARS = ("NCCL_IB_HCA", "UCX_NET_DEVICES", "NCCL_SOCKET_IFNAME")


class NicChoice(Value):
    """The NICs of the rank that drives GPU ``gpu`` (a PCI address): ``rdma`` its nearest RDMA devices,
    ``sockets`` its nearest devices with an interface, ``env`` (pairs, in :data:`NIC_ENV_VARS` order) the
    variables a launcher sets for them, ``reasons`` one line per choice naming each NIC and its link class."""

    gpu: str
    rdma: tuple[Nic, ...]
    sockets: tuple[Nic, ...]
    env_items: tuple[tuple[str, str], ...]
    reasons: tuple[str, ...]

    @property
    def env(self) -> dict[str, str]:
        return dict(self.env_items)

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "rdma": [n.name for n in self.rdma], "sockets": [n.name for n in self.sockets],
                "env": self.env, "reasons": list(self.reasons)}


def _shown_nics(gpu: PciPlace, chosen: Sequence[Nic], pool: Sequence[Nic], what: str, sharers: str) -> str:
    """``mlx5_0 (0000:19:00.0, PIX), 1 of the 2 PIX RDMA devices of GPU 0000:18:00.0``."""
    named = ", ".join(f"{n.name} ({n.address}, {link_class(gpu, n.place)})" for n in chosen)
    tied = len(_nearest(gpu, pool))
    share = ("" if tied <= len(chosen) else f"; {len(chosen)} of the {tied} {link_class(gpu, chosen[0].place)} "
             f"{what}s, split evenly among the {sharers} that share them")
    return f"{named}{share}"


def choose_nics(gpu: PciPlace, gpus: Sequence[PciPlace], nics: Iterable[Nic], *, label: str | None = None,
                sharers: str = "GPUs") -> NicChoice:
    """The nearest NICs of ``gpu`` (one of ``gpus``, the GPUs that share the NICs), the environment for them
    (:func:`nic_env`) and the reasons; PlanError when ``gpu`` is not one of ``gpus``. ``label`` and ``sharers`` name
    ``gpu`` and ``gpus`` in the reasons (a CPU rank's place is a :class:`PciPlace` with no tree: its node's NICs)."""
    label = label or f"GPU {gpu.address}"
    if all(g.address != gpu.address for g in gpus):
        raise PlanError(f"GPU {gpu.address} is not among the GPUs whose NICs are shared "
                        f"({', '.join(g.address for g in gpus) or 'none'}); pass every GPU of the machine")
    nics = tuple(nics)
    env: list[tuple[str, str]] = []
    reasons: list[str] = []
    rdma = nearest_nics(gpus, nics, kind="ib")[gpu.address]
    ports = [f"{n.name}:{p}" for n in rdma for p in (n.ports or (1,))]
    if ports:
        env += [("NCCL_IB_HCA", "=" + ",".join(ports)), ("UCX_NET_DEVICES", ",".join(ports))]
        pool = [n for n in nics if n.kind == "ib"]
        reasons.append(f"NCCL_IB_HCA, UCX_NET_DEVICES: RDMA "
                       f"{_shown_nics(gpu, rdma, pool, 'RDMA device', sharers)} of {label}")
    else:
        reasons.append(f"no RDMA device: NCCL_IB_HCA and UCX_NET_DEVICES are not set for {label}")
    sockets = nearest_nics(gpus, nics, need_ifname=True)[gpu.address]
    names = sorted({i for n in sockets for i in n.ifnames})
    if names:
        env.append(("NCCL_SOCKET_IFNAME", "=" + ",".join(names)))
        pool = [n for n in nics if n.ifnames]
        reasons.append(f"NCCL_SOCKET_IFNAME: {', '.join(names)} on "
                       f"{_shown_nics(gpu, sockets, pool, 'NIC', sharers)} of {label}")
    else:
        reasons.append(f"no network interface on a PCI function: NCCL_SOCKET_IFNAME is not set for {label}")
    return NicChoice(gpu=gpu.address, rdma=rdma, sockets=sockets, env_items=tuple(env), reasons=tuple(reasons))


def nic_env(gpu: PciPlace, gpus: Sequence[PciPlace], nics: Iterable[Nic]) -> dict[str, str]:
    """The environment of the rank that drives ``gpu`` (one of ``gpus``): ``NCCL_IB_HCA`` and ``UCX_NET_DEVICES``
    from its nearest RDMA devices, ``NCCL_SOCKET_IFNAME`` from its nearest interfaces; left out when none qualifies."""
    return choose_nics(gpu, gpus, nics).env


def gpu_nics(topology: Any, index: int, *, peers: Iterable[Any] | None = None) -> NicChoice:
    """:func:`choose_nics` for visible GPU ``index`` of ``topology`` (``topology.gpus``, the NICs of ``topology.nics``
    or those under ``topology.root``); ``peers`` are the GPUs that share the NICs (anything with ``pci_address``;
    default every visible GPU), the GPU itself included. PlanError when ``index`` is not visible."""
    by_index = {g.index: g for g in topology.gpus}
    if index not in by_index:
        raise PlanError(f"GPU {index} is not visible (visible: {format_cpulist(by_index) or 'none'}); "
                        f"give a visible GPU index")
    reader = _reader(topology.root)
    nics = getattr(topology, "nics", None)
    found = tuple(scan_nics(reader) if nics is None else nics)
    gpu = pci_place(reader, by_index[index].pci_address)
    others = [g.pci_address.lower() for g in (topology.gpus if peers is None else peers)]
    addresses = sorted(set(others) | {gpu.address})
    places = tuple(gpu if a == gpu.address else pci_place(reader, a) for a in addresses)
    return choose_nics(gpu, places, found)


def gpu_places(root: str | os.PathLike[str] | FsReader | None, gpus: Iterable[Any]) -> tuple[PciPlace, ...]:
    """The places of ``topology.gpus`` (anything with ``pci_address``), in their order."""
    reader = _reader(root)
    return tuple(pci_place(reader, g.pci_address) for g in gpus)


def link_matrix(gpus: Sequence[PciPlace], nics: Sequence[Nic]) -> tuple[tuple[str, ...], ...]:
    """Row per GPU, column per NIC: the link classes (``nvidia-smi topo -m``'s GPU x NIC block)."""
    return tuple(tuple(link_class(g, n.place) for n in nics) for g in gpus)

