"""The PCI functions of an hwloc XML file, with their locality, place under ``sys/devices`` and OS devices, and how
the file numbers its GPUs (docs/discovery.rst, "hwloc XML")."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .._base import getLogger, printable
from .._facts import Facts
from .._vendors import HWLOC_OSDEVS, NAMES, gpu_vendor
from .parse import REEXPORT, WORD_HEX, Obj, fail, obj_bitmap, shown

log = getLogger("numabind._hwloc_xml")     # the package's logger: the name a warning is printed with

_IO_TYPES = frozenset({"Bridge", "PCIDev", "OSDev", "Misc"})
#: OS device kinds the kernel shows in a class, by hwloc's ``osdev_type``: hwloc 2's numbers (0 block, 2 network,
#: 3 OpenFabrics), hwloc 3's bits (1 storage, 16 network, 32 OpenFabrics).
_OSDEV_KINDS_V2 = {"0": "block", "2": "net", "3": "infiniband"}
_OSDEV_KINDS_V3 = ((32, "infiniband"), (16, "net"), (1, "block"))


@dataclass(frozen=True)
class Function:
    """A PCI function of the file (a ``PCIDev``, or a ``Bridge`` numabind can name)."""

    pci_class: int                   # 16 bits: base class and subclass
    vendor_id: int
    device_id: int
    node: int                        # its locality's one node (or one node with CPUs), else -1
    local: frozenset[int]            # its locality's PUs
    infos: dict[str, str]
    #: its OS devices: (name, "net" | "infiniband" | "block" where the kernel shows it in that class, infos)
    osdevs: tuple[tuple[str, str | None, dict[str, str]], ...]
    #: where the kernel puts it under ``sys/devices`` (host bridge, bridges, itself); None where no host bridge says
    place: tuple[str, ...] | None

    @property
    def gpu(self) -> str | None:
        """The vendor of a function live discovery takes as a GPU (or an Ascend NPU), else None."""
        return gpu_vendor(self.vendor_id, self.pci_class >> 8, self.device_id)


def read_pci(path: str, objs: list[Obj], facts: Facts, numa: bool, version: str) -> dict[str, Function]:
    """Each PCI function of the file by bus id; ``numa``: whether the file has NUMANode objects."""
    cpu_nodes = {nid for nid, node in facts.nodes.items() if node.cpus}
    all_nodes = frozenset(facts.nodes)
    pus = facts.online_cpus
    places: dict[int, tuple[frozenset[int], int]] = {}     # locality position -> (local PUs, node)
    out: dict[str, Function] = {}
    for obj in objs:
        if obj.type != "PCIDev" and (obj.type != "Bridge" or "pci_busid" not in obj.attrs):
            continue
        bus = bus_id(obj.attrs.get("pci_busid", ""))
        kind = _pci_type(obj.attrs.get("pci_type", ""))
        if (bus is None or kind is None) and obj.type == "Bridge":
            continue            # a bridge numabind cannot name is a directory of the tree, nothing more
        if bus is None or kind is None:
            raise fail(path, obj.line, f"a PCIDev with pci_busid={shown(obj.attrs.get('pci_busid', ''))} "
                       f"pci_type={shown(obj.attrs.get('pci_type', ''))}, not a bus id and class [vendor:device]",
                       REEXPORT)
        up = obj.parent
        while up >= 0 and objs[up].type in _IO_TYPES:
            up = objs[up].parent
        place = places.get(up)
        if place is None:                   # once per locality: the devices behind it share its set
            if up < 0:
                local, nodes = pus, all_nodes
            else:
                holder = objs[up]
                bm = obj_bitmap(path, holder)
                local = bm.within(pus) if bm is not None else pus
                ns = obj_bitmap(path, holder, "nodeset")
                nodes = ns.within(facts.nodes) if ns is not None and numa else all_nodes
                if holder.type == "NUMANode":                  # v1: I/O below a node
                    nodes = frozenset({int(holder.attrs["os_index"])})
            with_cpus = nodes & cpu_nodes
            place = places[up] = (local, min(nodes) if len(nodes) == 1 else
                                  min(with_cpus) if len(with_cpus) == 1 else -1)
        local, node = place
        if bus in out:
            log.warning("hwloc XML %s, line %d: a second PCIDev %s (class %04x); a bus id names one device, "
                        "the first is kept", path, obj.line, bus, kind[0])
            continue
        if obj.infos.get("NumabindNUMANode") == "-1":
            node = -1                   # numabind's export: the firmware gave this function no node
        osdevs = tuple((printable(objs[c].attrs.get("name", "")), _osdev_kind(version, objs[c].attrs), objs[c].infos)
                       for c in obj.children if objs[c].type == "OSDev")
        out[bus] = Function(kind[0], kind[1], kind[2], node, local, obj.infos, osdevs, _sysfs_path(objs, obj, bus))
    return out


def _pci_type(text: str) -> tuple[int, int, int] | None:
    """(class, vendor, device) of ``pci_type="0302 [10de:1db8] [10de:131d] a1"``; None when malformed."""
    parts = text.split()
    if len(parts) < 2 or len(parts[0]) != 4 or not set(parts[0]) <= WORD_HEX:
        return None
    ids = parts[1]
    if len(ids) != 11 or ids[0] != "[" or ids[5] != ":" or ids[10] != "]" or not (
            set(ids[1:5]) | set(ids[6:10])) <= WORD_HEX:
        return None
    return int(parts[0], 16), int(ids[1:5], 16), int(ids[6:10], 16)


def bus_id(text: str) -> str | None:
    """The canonical PCI bus id ``dddd:bb:dd.f`` of ``text``, else None."""
    t = text.strip().lower()
    parts = t.replace(".", ":").split(":")
    if len(parts) != 4 or not all(p and set(p) <= WORD_HEX for p in parts):
        return None
    dom, bus, dev, fn = parts
    if len(dom) > 8 or len(bus) != 2 or len(dev) != 2 or len(fn) != 1 or int(fn, 16) > 7:
        return None
    return f"{int(dom, 16):04x}:{bus}:{dev}.{fn}"


def _host_bridge(obj: Obj) -> str | None:
    """``pciSSSS:BB`` of a host bridge (hwloc's ``bridge_type="0-1"``, ``bridge_pci="SSSS:[BB-EE]"``), else None."""
    if obj.type != "Bridge" or "pci_busid" in obj.attrs or not obj.attrs.get("bridge_type", "").startswith("0"):
        return None
    text = obj.attrs.get("bridge_pci", "")
    dom, sep, rest = text.partition(":[")
    bus = rest.partition("-")[0]
    if not sep or not 1 <= len(dom) <= 4 or len(bus) != 2 or not set(dom + bus) <= WORD_HEX:
        return None
    return f"pci{int(dom, 16):04x}:{bus.lower()}"


def _sysfs_path(objs: list[Obj], obj: Obj, bus: str) -> tuple[str, ...] | None:
    """Where the kernel puts PCI function ``bus`` under ``sys/devices``: its host bridge, the bridges down to it
    and itself; None when no host bridge holds it."""
    chain = [bus]
    up = obj.parent
    while up >= 0 and objs[up].type in _IO_TYPES:
        above = objs[up]
        host = _host_bridge(above)
        if host is not None:
            return (host, *reversed(chain))
        busid = bus_id(above.attrs.get("pci_busid", "")) if above.type == "Bridge" else None
        if busid is None:
            return None
        chain.append(busid)
        up = above.parent
    return None


def _osdev_kind(version: str, attrs: dict[str, str]) -> str | None:
    text = attrs.get("osdev_type", "")
    if not version.startswith("3"):
        return _OSDEV_KINDS_V2.get(text)
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        return None
    bits = int(text)
    return next((kind for bit, kind in _OSDEV_KINDS_V3 if bits & bit), None)


def runtime_index(name: str, prefixes: tuple[str, ...]) -> tuple[int, int] | None:
    """(rank of the prefix, index) of an OS device ``cuda3``/``nvml3``/``rsmi0``/``opencl0d2``/``ze1``."""
    for rank, prefix in enumerate(prefixes):
        if name.startswith(prefix):
            tail = name[len(prefix):]
            if prefix == "opencl":
                tail = tail.partition("d")[2]
            if tail.isascii() and tail.isdigit() and len(tail) <= 6:
                return rank, int(tail)
    return None


def gpu_notes(path: str, pci: dict[str, Function], carried: dict[str, str]) -> dict[str, str]:
    """{vendor: note} on how the file's GPUs are ordered where numabind's order may differ; ``carried``: the notes
    numabind's own export wrote."""
    name = printable(os.path.basename(path))
    out: dict[str, str] = {}
    for vendor in NAMES:
        gpus = sorted(bus for bus, f in pci.items() if f.gpu == vendor)
        if len(gpus) < 2:
            continue                    # one device (or none) has one order
        if carried.get(vendor):
            out[vendor] = carried[vendor]
            continue
        notes: list[str] = []
        prefixes = HWLOC_OSDEVS[vendor]
        if not prefixes:
            continue                    # hwloc has no Ascend OS devices: NPUs are paired as on a live machine
        indexed: dict[str, dict[str, int]] = {}       # OS device kind -> {bus id: its index}
        for bus in gpus:
            for osdev, _kind, _infos in pci[bus].osdevs:
                hit = runtime_index(osdev, prefixes)
                if hit is not None:
                    indexed.setdefault(prefixes[hit[0]], {}).setdefault(bus, hit[1])
        if not indexed:
            out[vendor] = (f"{name} carries no {'/'.join(prefixes)} OS devices for its {vendor} GPUs (exported "
                           f"without them, or with I/O filtered): numabind numbers them in PCI bus order")
            continue
        rsmi = indexed.get("rsmi", {})
        # AMD GPUs with an rsmi OS device each get the KFD topology in that order: it is numabind's order then
        ours, said = ((sorted(gpus, key=lambda b: rsmi[b]), "rsmi order") if vendor == "amd" and len(rsmi) == len(gpus)
                      else (gpus, "PCI bus order"))
        for kind, found in indexed.items():
            by_runtime = sorted(found, key=lambda b: found[b])
            by_ours = [b for b in ours if b in found]
            if by_runtime != by_ours:
                notes.append(f"{name}'s {kind} OS devices number its {vendor} GPUs {', '.join(by_runtime)}; "
                             f"numabind numbers them in {said} ({', '.join(by_ours)})")
        covered = max(len(found) for found in indexed.values())
        if covered < len(gpus):
            notes.append(f"{name} has OS devices for {covered} of its {len(gpus)} {vendor} GPUs; numabind "
                         f"numbers all {len(gpus)}")
        if notes:
            out[vendor] = "; ".join(notes)
    return out
