"""The machine as a tree of objects, as hwloc builds it: text like ``lstopo``'s and hwloc's XML.

Objects nest by CPU sets (machine, packages, caches, clusters, cores, PUs, and Groups where a NUMA node's CPUs are
not one object's); each NUMA node is a memory child of the highest object with exactly its CPUs, a CPU-less node
hangs from the machine in a Group of its own, as hwloc does. The tree is pure (the caller discovers).
"""

from __future__ import annotations

from .._base import printable
from .._vendors import HWLOC_BACKENDS, HWLOC_OSDEVS, PCI_IDS, PCI_NAMES
from ..cpulist import format_cpulist

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the looks' start)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable
    from typing import Any

    from ..iodevices import PciDevice
    from ..topology import Cache, Topology

__all__ = ["Obj", "build_tree", "hwloc_bitmap", "hwloc_xml", "tree_text", "size_text"]


#: XML attribute escapes: markup characters, the quote, and the whitespace an attribute value would normalise.
_XML_ATTR = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "\n": "&#10;", "\r": "&#13;",
                           "\t": "&#9;"})


def quoteattr(value: str) -> str:
    """``value`` as a double-quoted XML attribute value. Written here rather than taken from ``xml.sax.saxutils``, whose
    import brings ``urllib.request`` (http, email, ssl): most of ``numabind topology``'s start-up."""
    return '"' + value.translate(_XML_ATTR) + '"'


#: Nesting order of objects with the same CPUs (the machine outermost, PUs innermost).
_RANK = {"Machine": 0, "Package": 1, "Group": 2, "Cluster": 2, "Cache": 3, "Core": 30, "PU": 31}


class Obj:
    """One object of the tree (``kind``: Machine, Package, Group, Cluster, Cache, Core, PU)."""

    __slots__ = ("kind", "os_index", "cpus", "cache", "children", "memory", "io")

    def __init__(self, kind: str, os_index: int | None, cpus: frozenset[int], cache: Cache | None = None) -> None:
        self.kind, self.os_index, self.cpus, self.cache = kind, os_index, cpus, cache
        self.children: list[Obj] = []
        self.memory: list[int] = []            # NUMA node ids attached here
        self.io: list[PciDevice] = []

    def rank(self) -> int:
        if self.cache is not None:   # higher levels outside lower ones; data outside instruction
            return _RANK["Cache"] + (10 - self.cache.level) * 2 + (self.cache.type == "Instruction")
        return _RANK[self.kind]

    def walk(self) -> Iterable[Obj]:
        yield self
        for child in self.children:
            yield from child.walk()


def _insert(root: Obj, obj: Obj) -> None:
    """Put ``obj`` below the deepest object holding all its CPUs (objects come biggest first)."""
    parent = root
    while True:
        inner = next((c for c in parent.children if obj.cpus <= c.cpus), None)
        if inner is None:
            break
        parent = inner
    parent.children.append(obj)


def _sort(obj: Obj) -> None:
    obj.children.sort(key=lambda c: (min(c.cpus) if c.cpus else 1 << 30, c.rank()))
    for child in obj.children:
        _sort(child)


def build_tree(topo: Topology, pci: Iterable[PciDevice] = ()) -> Obj:
    """The object tree of ``topo``, with ``pci`` devices hung from their nodes."""
    machine = Obj("Machine", 0, frozenset(topo.online_cpus))
    objs: list[Obj] = []
    for pkg, cpus in topo.package_cpus().items():
        if pkg >= 0:
            objs.append(Obj("Package", pkg, cpus))
    for cache in topo.caches:
        objs.append(Obj("Cache", None, frozenset(cache.cpus), cache))
    cores = {(c.package, c.core, c.siblings) for c in topo.cpus.values()}
    for _pkg, core, siblings in cores:
        objs.append(Obj("Core", core if core >= 0 else None, frozenset(siblings)))
    for cpu in sorted(topo.online_cpus):
        objs.append(Obj("PU", cpu, frozenset({cpu})))
    existing = {o.cpus for o in objs} | {machine.cpus}
    for cluster in topo.cluster_groups():
        if cluster not in existing:
            objs.append(Obj("Cluster", topo.cpus[min(cluster)].cluster, cluster))
            existing.add(cluster)
    for nid, node in sorted(topo.nodes.items()):
        if node.cpus and node.cpus not in existing:
            objs.append(Obj("Group", None, frozenset(node.cpus)))
            existing.add(node.cpus)
    objs.sort(key=lambda o: (-len(o.cpus), o.rank()))
    for obj in objs:
        _insert(machine, obj)
    _sort(machine)
    holder: dict[int, Obj] = {}
    for nid, node in sorted(topo.nodes.items()):
        if node.cpus:
            target = next(o for o in machine.walk() if o.cpus == node.cpus)   # the highest with these CPUs
        else:
            target = Obj("Group", None, frozenset())
            machine.children.append(target)
        target.memory.append(nid)
        holder[nid] = target
    for dev in pci:
        where = holder.get(dev.numa_node) if dev.numa_node is not None else None
        (where or machine).io.append(dev)
    return machine


# ----------------------------------------------------------------------------- text
def size_text(nbytes: int | None) -> str:
    """``48 KiB``, ``2 MiB``, ``19.0 GiB``."""
    if nbytes is None:
        return "size unknown"
    if nbytes >= 1 << 30:
        return f"{nbytes / (1 << 30):.1f} GiB"
    if nbytes >= 1 << 20:
        return f"{nbytes / (1 << 20):.0f} MiB" if nbytes % (1 << 20) == 0 else f"{nbytes / (1 << 20):.1f} MiB"
    return f"{nbytes // 1024} KiB" if nbytes >= 1024 else f"{nbytes} B"


def _cache_name(cache: Cache) -> str:
    suffix = {"Data": "d", "Instruction": "i"}.get(cache.type, "")
    return f"L{cache.level}{suffix}"


def _label(obj: Obj) -> str:
    if obj.kind == "Cache":
        assert obj.cache is not None
        size = obj.cache.size_bytes
        return f"{_cache_name(obj.cache)} ({size_text(size)})" if size is not None else _cache_name(obj.cache)
    if obj.kind == "PU":
        return f"PU {obj.os_index}"
    if obj.kind == "Core":
        return "Core" if obj.os_index is None else f"Core {obj.os_index}"
    if obj.kind == "Package":
        return f"Package {obj.os_index}"
    if obj.kind == "Cluster":
        return "Cluster" if obj.os_index is None or obj.os_index < 0 else f"Cluster {obj.os_index}"
    if obj.kind == "Group":
        return "Group" if obj.cpus else "Group (no CPUs)"
    return obj.kind


def tree_text(topo: Topology, root: Obj) -> str:
    """lstopo-like lines: one per object, a chain of single children joined with ``+``."""
    total = sum(n.memory_bytes for n in topo.nodes.values())
    lines = [f"Machine ({size_text(total)} total, CPUs {format_cpulist(root.cpus)})"]

    def node_line(nid: int, pad: str) -> str:
        node = topo.nodes[nid]
        cpus = f"CPUs {format_cpulist(node.cpus)}" if node.cpus else "no CPUs"
        memory = size_text(node.memory_bytes) if node.memory_bytes else "no memory"
        return f"{pad}NUMANode {nid} ({memory}, {cpus})"

    def emit(obj: Obj, depth: int) -> None:
        pad = "  " * depth
        labels = [_label(obj)]
        while len(obj.children) == 1 and not obj.memory and not obj.io:
            obj = obj.children[0]
            labels.append(_label(obj))
        lines.append(pad + " + ".join(labels))
        inner = "  " * (depth + 1)
        lines.extend(node_line(nid, inner) for nid in obj.memory)
        for child in obj.children:
            emit(child, depth + 1)
        lines.extend(inner + printable(dev.describe()) for dev in obj.io)   # names a replayed root gave

    lines.extend(node_line(nid, "  ") for nid in root.memory)
    for child in root.children:
        emit(child, 1)
    lines.extend("  " + printable(dev.describe()) + " (no NUMA node)" for dev in root.io)
    return "\n".join(lines)


# ----------------------------------------------------------------------------- hwloc XML
def hwloc_bitmap(ids: Iterable[int]) -> str:
    """hwloc's bitmap text: 32-bit words, most significant first (``0x00000001,0xffffffff``); ``0x0`` when empty."""
    values = sorted(ids)
    if not values:
        return "0x0"
    words = [0] * (values[-1] // 32 + 1)
    for i in values:
        words[i // 32] |= 1 << (i % 32)
    return ",".join(f"0x{w:08x}" for w in reversed(words))


_CACHE_TYPE = {"Unified": 0, "Data": 1, "Instruction": 2}


_NVIDIA = PCI_IDS["nvidia"]
#: hwloc 2's OS device types (``hwloc_obj_osdev_type_e``): block, GPU, network, OpenFabrics.
_OSDEV_BLOCK, _OSDEV_GPU, _OSDEV_NET, _OSDEV_OPENFABRICS = 0, 1, 2, 3

class _IoNode:
    """A Bridge or PCIDev of the XML: the host bridge (``device`` None), a bridge, or a function."""

    __slots__ = ("kind", "device", "depth", "buses", "children")

    def __init__(self, device: PciDevice | None, depth: int) -> None:
        self.kind = "PCIDev"
        self.device = device
        self.depth = depth
        self.buses = ""
        self.children: list[_IoNode] = []


class _Io:
    """The I/O part of the XML: the trees hung from each object, infos and OS devices per PCI address."""

    def __init__(self) -> None:
        self.hung: dict[int, list[_IoNode]] = {}
        self.infos: dict[str, list[tuple[str, str]]] = {}
        self.osdevs: dict[str, list[tuple[str, int, str | None, list[tuple[str, str]]]]] = {}
        self.notes: list[tuple[str, str]] = []      # the machine's infos: why its GPUs' order is uncertain


def _bus(address: str) -> int:
    return int(address[5:7], 16)


def _io(topo: Topology, root: Obj) -> _Io:
    """What a replay needs of the machine's I/O, read under ``topo.root``, as hwloc's backends write it: the tree's
    devices, NVSwitches, every GPU and network device under its chain of bridges, their OS devices (``net``,
    ``openfabrics``, disks, ``nvml0``/``rsmi0``/``ze0``), and numabind's infos ``NumabindPhysFn`` and
    ``NumabindNetUppers``."""
    from .._fs import FsReader
    from ..iodevices import pci_place, scan_nics, scan_pci

    reader = FsReader(topo.root)
    every = {d.address: d for d in scan_pci(reader)}
    leaves = {d.address: d for obj in root.walk() for d in obj.io}
    gpu_of = {g.pci_address.lower(): g for g in topo.gpus}
    nics = scan_nics(reader)
    for address, dev in every.items():
        nvswitch = dev.vendor_id == _NVIDIA and dev.pci_class is not None and dev.pci_class >> 8 == 0x0680
        if nvswitch or address in gpu_of:
            leaves.setdefault(address, dev)
    for nic in nics:
        if nic.address in every:
            leaves.setdefault(nic.address, every[nic.address])
    io = _Io()
    # the OS devices and infos of each function
    for vendor, (subtype, uuid_key) in HWLOC_BACKENDS.items():
        prefix = HWLOC_OSDEVS[vendor][0]
        ordered = sorted((g for g in topo.gpus if g.vendor == vendor), key=lambda g: (g.physical_index, g.index))
        doubt = next((g.identity_note for g in ordered if not g.identity_certain), None)
        if doubt is not None:
            # numabind is not sure which board each index is: no runtime OS device claims an order, the model
            # and UUID are the function's infos, and the machine says why (the replay is as unsure, in the
            # same words; the fix the note ends with is the replay's own)
            io.notes.append((f"NumabindGpuOrder.{vendor}", doubt.rsplit("; ", 1)[0]))
            for g in ordered:
                io.infos.setdefault(g.pci_address.lower(), []).extend(
                    ([("GPUModel", g.name)] if g.name else []) + ([(uuid_key, g.uuid)] if g.uuid else []))
            continue
        if len(ordered) < 2 and not any(g.uuid or g.name or g.minor is not None for g in ordered):
            continue                    # one GPU known by its address alone: an OS device would say nothing
        for k, g in enumerate(ordered):
            infos = [("Backend", subtype), ("GPUVendor", PCI_NAMES[vendor])]
            if g.name:
                infos.append(("GPUModel", g.name))
            if g.uuid:
                infos.append((uuid_key, g.uuid))
            if vendor == "nvidia" and g.minor is not None:
                infos.append(("NumabindDeviceMinor", str(g.minor)))     # /dev/nvidiaN: hwloc has no word for it
            found = io.osdevs.setdefault(g.pci_address.lower(), [])
            found.append((f"{prefix}{k}", _OSDEV_GPU, subtype, infos))
            if vendor != "nvidia" and g.minor is not None:     # the DRM render node, as hwloc's Linux backend
                found.append((f"renderD{g.minor}", _OSDEV_GPU, None, []))
    for address, dev in leaves.items():
        found = io.osdevs.setdefault(address, [])
        found[:0] = [(b, _OSDEV_BLOCK, None, []) for b in dev.blocks] + [(n, _OSDEV_NET, None, []) for n in dev.nets]
    for address, dev in leaves.items():
        if dev.numa_node is None:       # the firmware gives it none (-1): said, as hwloc would place it anyway
            io.infos.setdefault(address, []).append(("NumabindNUMANode", "-1"))
    for nic in nics:
        if nic.kind == "ib":
            ports: list[tuple[str, str]] = []
            for p in nic.ports:
                base = f"sys/class/infiniband/{nic.name}/ports/{p}"
                state = (reader.read_strip(f"{base}/state") or "").split(":")[0].strip()
                layer = reader.read_strip(f"{base}/link_layer") or ""
                ports += [(f"Port{p}State", state or "4")] + ([(f"Port{p}LinkLayer", layer)] if layer else [])
            io.osdevs.setdefault(nic.address, []).append((nic.name, _OSDEV_OPENFABRICS, None, ports))
        if nic.physfn:
            io.infos.setdefault(nic.address, []).append(("NumabindPhysFn", nic.physfn))
        if nic.uppers and ("NumabindNetUppers", " ".join(nic.uppers)) not in io.infos.get(nic.address, []):
            io.infos.setdefault(nic.address, []).append(("NumabindNetUppers", " ".join(nic.uppers)))
    # where each function hangs: below its bridges and host bridge, from its node's object
    holder = {nid: obj for obj in root.walk() for nid in obj.memory}
    groups: dict[str, list[tuple[tuple[str, ...], int | None]]] = {}
    for address in sorted(leaves):
        place = pci_place(reader, address)
        if place.host_bridge is None:
            item = _IoNode(leaves[address], 0)
            io.hung.setdefault(id(holder.get(place.numa_node, root) if place.numa_node is not None else root),
                               []).append(item)
            continue
        groups.setdefault(place.host_bridge, []).append((place.path[1:], place.numa_node))
    for host, members in sorted(groups.items()):
        nodes = {n for _p, n in members if n is not None}
        where = holder.get(next(iter(nodes)), root) if len(nodes) == 1 else root
        top = _IoNode(None, 0)
        top.kind = "Bridge"
        made: dict[str, _IoNode] = {}
        for path, _node in members:
            parent = top
            for depth, address in enumerate(path, start=1):
                step = made.get(address)
                if step is None:
                    dev = every.get(address) or leaves.get(address) or _placeholder(address)
                    step = made[address] = _IoNode(dev, depth)
                    parent.children.append(step)
                parent = step
        _ranges(top, host)
        io.hung.setdefault(id(where), []).append(top)
    return io


def _placeholder(address: str) -> PciDevice:
    from ..iodevices import PciDevice

    return PciDevice(address, None, None, 0x060400, None, frozenset())


def _ranges(item: _IoNode, host: str) -> int:
    """Make bridges of the items with children and give each bridge its bus range (hwloc's ``bridge_pci``);
    the highest bus below ``item``."""
    item.children.sort(key=lambda c: c.device.address if c.device is not None else "")
    low = int(host[8:], 16) if item.device is None else None
    high = _bus(item.device.address) if item.device is not None else int(host[8:], 16)
    for child in item.children:
        assert child.device is not None
        below = _ranges(child, host)
        bus = _bus(child.device.address)
        low = bus if low is None else min(low, bus)
        high = max(high, below, bus)
    if item.children or item.device is None:
        item.kind = "Bridge"
        item.buses = f"{host[3:7]}:[{low or 0:02x}-{high:02x}]"
    return high


def hwloc_xml(topo: Topology, root: Obj) -> str:
    """hwloc 2 XML (what ``lstopo --of xml`` writes) that ``lstopo --input FILE.xml`` reads, and that numabind
    replays as the machine it came from (see :func:`_io` for the I/O it carries)."""
    node_of = {cpu: n for n, node in topo.nodes.items() for cpu in node.cpus}
    io = _io(topo, root)
    gp = [0]
    out = ['<?xml version="1.0" encoding="UTF-8"?>', '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
           '<topology version="2.0">']

    def nodeset(obj: Obj) -> frozenset[int]:
        return frozenset(node_of[c] for c in obj.cpus if c in node_of) | frozenset(obj.memory)

    def attrs(kind: str, os_index: int | None, cpus: frozenset[int], nodes: frozenset[int],
              extra: list[tuple[str, Any]]) -> str:
        gp[0] += 1
        fields: list[tuple[str, Any]] = [("type", kind)]
        if os_index is not None:
            fields.append(("os_index", os_index))
        fields += [("cpuset", hwloc_bitmap(cpus)), ("complete_cpuset", hwloc_bitmap(cpus))]
        if kind == "Machine":
            fields.append(("allowed_cpuset", hwloc_bitmap(topo.allowed_cpus)))
        fields += [("nodeset", hwloc_bitmap(nodes)), ("complete_nodeset", hwloc_bitmap(nodes))]
        if kind == "Machine":
            fields.append(("allowed_nodeset", hwloc_bitmap(topo.allowed_nodes)))
        fields.append(("gp_index", gp[0]))
        fields += extra
        return " ".join(f"{k}={quoteattr(str(v))}" for k, v in fields)

    def emit(obj: Obj, depth: int) -> None:
        pad = "  " * depth
        extra: list[tuple[str, Any]] = []
        kind = obj.kind
        if obj.cache is not None:
            c = obj.cache
            kind = f"L{c.level}{'i' if c.type == 'Instruction' else ''}Cache"
            extra = [("cache_size", c.size_bytes or 0), ("depth", c.level), ("cache_linesize", 0),
                     ("cache_associativity", 0), ("cache_type", _CACHE_TYPE.get(c.type, 0))]
        elif kind == "Group":
            extra = [("kind", 1001), ("subkind", 0)]
        elif kind == "Cluster":      # as hwloc's Linux backend makes it: a Group numbered by cluster_id
            kind = "Group"
            extra = [("subtype", "Cluster"), ("kind", 222), ("subkind", 0)]
        os_index = obj.os_index if obj.kind in ("Machine", "Package", "Cluster", "Core", "PU") else None
        if os_index is not None and os_index < 0:
            os_index = None
        out.append(f"{pad}<object {attrs(kind, os_index, obj.cpus, nodeset(obj), extra)}>")
        if obj.kind == "Machine":
            out.extend(f'{pad}  <info name={quoteattr(k)} value={quoteattr(printable(v))}/>' for k, v in io.notes)
        if obj.kind == "Package" and topo.model_name:
            out.append(f'{pad}  <info name="CPUModel" value={quoteattr(printable(topo.model_name))}/>')
        for nid in obj.memory:
            mem = [("local_memory", topo.nodes[nid].memory_bytes)] if topo.nodes[nid].memory_bytes else []
            out.append(f"{pad}  <object {attrs('NUMANode', nid, obj.cpus, frozenset({nid}), mem)}/>")
        for child in obj.children:
            emit(child, depth + 1)
        for item in io.hung.get(id(obj), ()):
            emit_io(pad + "  ", item)
        out.append(f"{pad}</object>")

    def emit_io(pad: str, item: _IoNode) -> None:
        gp[0] += 1
        dev = item.device
        fields = [("type", item.kind), ("gp_index", gp[0])]
        if item.kind == "Bridge":
            fields += [("bridge_type", "0-1" if dev is None else "1-1"), ("depth", item.depth),
                       ("bridge_pci", item.buses)]
        if dev is not None:
            cls = (dev.pci_class or 0) >> 8
            if cls == 0x0680 and dev.vendor_id == _NVIDIA:
                fields.insert(2, ("subtype", "NVSwitch"))
            fields += [("pci_busid", dev.address),
                       ("pci_type", f"{cls:04x} [{dev.vendor_id or 0:04x}:{dev.device_id or 0:04x}] [0000:0000] 00"),
                       ("pci_link_speed", "0.000000")]
        head = f"{pad}<object " + " ".join(f"{k}={quoteattr(str(v))}" for k, v in fields)
        infos = io.infos.get(dev.address, []) if dev is not None else []
        osdevs = io.osdevs.get(dev.address, []) if dev is not None else []
        if not item.children and not infos and not osdevs:
            out.append(head + "/>")
            return
        out.append(head + ">")
        out.extend(f"{pad}  <info name={quoteattr(k)} value={quoteattr(printable(v))}/>" for k, v in infos)
        for name, osdev_type, subtype, osdev_infos in osdevs:
            gp[0] += 1
            sub = "" if subtype is None else f" subtype={quoteattr(subtype)}"
            tag = (f'{pad}  <object type="OSDev" gp_index="{gp[0]}" name={quoteattr(printable(name))}{sub} '
                   f'osdev_type="{osdev_type}"')
            if not osdev_infos:
                out.append(tag + "/>")
                continue
            out.append(tag + ">")
            out.extend(f"{pad}    <info name={quoteattr(k)} value={quoteattr(printable(v))}/>" for k, v in osdev_infos)
            out.append(f"{pad}  </object>")
        for child in item.children:
            emit_io(pad + "  ", child)
        out.append(f"{pad}</object>")

    emit(root, 1)
    ids = sorted(topo.nodes)
    matrix = [[topo.nodes[a].distances.get(b) for b in ids] for a in ids]
    if len(ids) > 1 and all(d is not None for row in matrix for d in row):
        index_text = "".join(f"{n} " for n in ids)
        values = [d for row in matrix for d in row]
        out.append(f'  <distances2 type="NUMANode" nbobjs="{len(ids)}" kind="5" name="NUMALatency" indexing="os">')
        out.append(f'    <indexes length="{len(index_text)}">{index_text}</indexes>')
        for k in range(0, len(values), 10):
            text = "".join(f"{d} " for d in values[k:k + 10])
            out.append(f'    <u64values length="{len(text)}">{text}</u64values>')
        out.append("  </distances2>")
    out.append("</topology>")
    return "\n".join(out) + "\n"
