"""The files a kernel would show of an hwloc XML file's nodes' memory and PCI functions, held in memory
(:class:`Tree`) for the readers other than the topology's."""

from __future__ import annotations

import os
import posixpath
import stat
from typing import TYPE_CHECKING

from .._base import getLogger, printable
from ..cpulist import format_cpulist
from .io import Function, bus_id, runtime_index
from .parse import WORD_HEX

if TYPE_CHECKING:  # pragma: no cover
    from . import HwlocTopology

log = getLogger("numabind._hwloc_xml")     # the package's logger: the name a warning is printed with

#: The most links one path may go through (the kernel's MAXSYMLINKS).
MAX_LINKS = 40


class Tree:
    """Files and symbolic links by their path relative to the root, served to :class:`numabind._fs.FsReader`
    (links resolve as in a chroot at the root)."""

    def __init__(self, files: dict[str, str], links: dict[str, str]) -> None:
        self.files = {rel: text if text.endswith("\n") else text + "\n" for rel, text in files.items()}
        self.links = links
        self.dirs: dict[str, set[str]] = {"": set()}            # directory -> the names in it
        for rel in (*self.files, *self.links):
            while rel:
                parent, _, name = rel.rpartition("/")
                self.dirs.setdefault(parent, set()).add(name)
                rel = parent

    def resolve(self, rel: str, *, last: bool = True) -> str | None:
        """``rel`` with every link on the way followed (the last component's too with ``last``); None past
        :data:`MAX_LINKS` links. ``..`` never climbs above the root."""
        todo = [p for p in reversed(rel.split("/")) if p and p != "."]
        done: list[str] = []
        hops = 0
        while todo:
            part = todo.pop()
            if part == "..":
                if done:
                    done.pop()
                continue
            here = "/".join([*done, part])
            target = self.links.get(here) if todo or last else None
            if target is None:
                done.append(part)
                continue
            hops += 1
            if hops > MAX_LINKS:
                return None
            if target.startswith("/"):
                done.clear()
            todo.extend(p for p in reversed(target.split("/")) if p and p != ".")
        return "/".join(done)

    def read(self, rel: str, limit: int | None = None) -> str | None:
        real = self.resolve(rel)
        text = None if real is None else self.files.get(real)
        return text if text is None or limit is None else text[:limit]

    def listdir(self, rel: str) -> list[str]:
        real = self.resolve(rel)
        return sorted(self.dirs.get(real, ())) if real is not None else []

    def stat(self, rel: str, *, follow: bool = True) -> os.stat_result | None:
        """A file's, directory's or (without ``follow``) link's kind and size; None for a path that is none."""
        real = self.resolve(rel, last=follow)
        if real is None:
            return None
        if real in self.links:
            mode, size = stat.S_IFLNK | 0o777, len(self.links[real])
        elif real in self.files:
            mode, size = stat.S_IFREG | 0o444, len(self.files[real].encode())
        elif real in self.dirs:
            mode, size = stat.S_IFDIR | 0o555, 0
        else:
            return None
        return os.stat_result((mode, 0, 0, 1, 0, 0, size, 0, 0, 0))

    def realpath(self, rel: str) -> str | None:
        """``rel`` resolved, as ``/sys/...``; None when it leads nowhere."""
        real = self.resolve(rel)
        return None if real is None or self.stat(real, follow=False) is None else "/" + real


def tree_files(topo: HwlocTopology) -> tuple[dict[str, str], dict[str, str]]:
    """The files ({path: text}) and links ({path: target}) of :class:`Tree`, paths relative to the root."""
    files: dict[str, str] = {}
    total = 0
    for nid, node in topo.facts.nodes.items():
        kb = node.memory_bytes >> 10
        files[f"sys/devices/system/node/node{nid}/meminfo"] = f"Node {nid} MemTotal:       {kb} kB\n"
        total += kb
    files["proc/meminfo"] = f"MemTotal:       {total} kB\n"
    links: dict[str, str] = {}
    _pci_files(topo, files, links)
    return files, links


def _link(links: dict[str, str], rel: str, target: str) -> None:
    """A relative symlink ``rel`` -> ``target`` (both relative to the root), as sysfs makes them; the first kept."""
    links.setdefault(rel, posixpath.relpath(target, posixpath.dirname(rel)))


def _render_minor(f: Function) -> int | None:
    """N of a function's ``renderDN`` OS device (the DRM render node hwloc's Linux backend lists), else None."""
    for name, _kind, _infos in f.osdevs:
        tail = name[len("renderD"):] if name.startswith("renderD") else ""
        if tail.isascii() and tail.isdigit() and len(tail) <= 6:
            return int(tail)
    return None


def _port_of(info: str) -> int | None:
    """The port of an OpenFabrics info (``Port1State``, ``Port2LID``: 1, 2), else None."""
    if not info.startswith("Port"):
        return None
    digits = info[4:len(info) - len(info[4:].lstrip("0123456789"))]
    return int(digits) if digits and len(digits) <= 3 else None


def _safe_name(name: str) -> bool:
    """Whether an OS device name from the file can be a sysfs file name (one path component, printable)."""
    return (0 < len(name) <= 64 and name not in (".", "..") and name == printable(name)
            and not any(c in name for c in "/ \t\n\\"))


def _pci_bases(topo: HwlocTopology, links: dict[str, str]) -> dict[str, str]:
    """Each function's directory, as the kernel lays them out: under ``sys/devices`` below its bridges, linked
    from ``sys/bus/pci/devices`` (a plain directory there where the file gives no host bridge)."""
    bases: dict[str, str] = {}
    for bus in sorted(topo.pci):
        chain = topo.pci[bus].place
        if chain is None:
            bases[bus] = f"sys/bus/pci/devices/{bus}"
        else:
            bases[bus] = "sys/devices/" + "/".join(chain)
            _link(links, f"sys/bus/pci/devices/{bus}", bases[bus])
    return bases


def _osdev_files(topo: HwlocTopology, bases: dict[str, str], files: dict[str, str], links: dict[str, str]) -> None:
    """The network interfaces, RDMA devices and disks of each function, in their classes; an SR-IOV VF's
    ``physfn`` and the bonds and VLANs numabind's own export wrote (``NumabindPhysFn``, ``NumabindNetUppers``)."""
    for bus, f in sorted(topo.pci.items()):
        base = bases[bus]
        for name, kind, infos in f.osdevs:
            if kind is None:
                continue
            if not _safe_name(name):
                log.debug("hwloc XML %s: OS device %r of %s is no sysfs name; left out", topo.path, name, bus)
                continue
            here = f"{base}/{kind}/{name}"
            if f"sys/class/{kind}/{name}" in links:
                continue                # a name the kernel gives once
            if kind == "net":
                files[f"{here}/ifindex"] = "1"
            elif kind == "block":
                files[f"{here}/removable"] = "0"
            else:
                ports = sorted({p for p in map(_port_of, infos) if p is not None} or {1})
                for port in ports[:64]:
                    state = infos.get(f"Port{port}State", "4")
                    files[f"{here}/ports/{port}/state"] = f"{state}: {'ACTIVE' if state == '4' else 'DOWN'}"
                    if infos.get(f"Port{port}LinkLayer"):
                        files[f"{here}/ports/{port}/link_layer"] = infos[f"Port{port}LinkLayer"]
            _link(links, f"{here}/device", base)
            _link(links, f"sys/class/{kind}/{name}", here)
    for bus, f in sorted(topo.pci.items()):
        pf = bus_id(f.infos.get("NumabindPhysFn", ""))
        if pf is not None and pf in bases and pf != bus:
            _link(links, f"{bases[bus]}/physfn", bases[pf])
        nets = [n for n, kind, _i in f.osdevs if kind == "net" and _safe_name(n)]
        for upper in f.infos.get("NumabindNetUppers", "").split()[:64]:
            if not _safe_name(upper) or upper in nets:
                continue
            here = f"sys/devices/virtual/net/{upper}"
            existing = links.get(f"sys/class/net/{upper}")
            if existing is not None and "devices/virtual/" not in existing:
                continue                # a physical interface of that name
            files[f"{here}/ifindex"] = "1"
            _link(links, f"sys/class/net/{upper}", here)
            for low in nets:
                _link(links, f"{here}/lower_{low}", f"{bases[bus]}/net/{low}")


def _pci_files(topo: HwlocTopology, files: dict[str, str], links: dict[str, str]) -> None:
    """Each function's ``class``, ids, node and local CPUs; a GPU's render node, an NVIDIA GPU's ``information``
    and the KFD topology of AMD GPUs with ``rsmi`` OS devices."""
    amd_rank: dict[str, tuple[int, int]] = {}
    bases = _pci_bases(topo, links)
    for bus, f in sorted(topo.pci.items()):
        base = bases[bus]
        files[f"{base}/class"] = f"0x{f.pci_class:04x}00"
        files[f"{base}/vendor"] = f"0x{f.vendor_id:04x}"
        files[f"{base}/device"] = f"0x{f.device_id:04x}"
        files[f"{base}/numa_node"] = str(f.node)
        files[f"{base}/local_cpulist"] = format_cpulist(f.local)
        vendor = f.gpu
        if vendor is None:
            continue
        render = _render_minor(f)
        if render is not None:          # hwloc's Linux backend names the DRM render node of a GPU
            files[f"{base}/drm/renderD{render}/dev"] = f"226:{render}"
        said = [*(infos for _n, _k, infos in f.osdevs), f.infos]
        if vendor == "nvidia":
            uuid = next((v for i in said for k, v in i.items() if k.endswith("UUID") and v), None)
            model = next((i["GPUModel"] for i in said if i.get("GPUModel")), None) or f.infos.get("PCIDevice")
            lines = [f"Model: \t\t {model or 'NVIDIA GPU'}"]
            if uuid:
                lines.append(f"GPU UUID: \t {uuid}")
            lines.append(f"Bus Location: \t {bus}")
            minor = next((i["NumabindDeviceMinor"] for i in said[:-1] if "NumabindDeviceMinor" in i), "")
            if minor.isascii() and minor.isdigit() and len(minor) <= 6:
                lines.append(f"Device Minor: \t {int(minor)}")
            files[f"proc/driver/nvidia/gpus/{bus}/information"] = "\n".join(lines) + "\n"
        elif vendor == "amd":
            hits = [runtime_index(n, ("rsmi",)) for n, _k, _i in f.osdevs]
            index = min((h for h in hits if h is not None), default=None)
            if index is not None:
                amd_rank[bus] = index
    for k, bus in enumerate(sorted(amd_rank, key=lambda b: amd_rank[b])):
        dom, b, rest = bus.split(":")
        dev, fn = rest.split(".")
        location = int(b, 16) << 8 | int(dev, 16) << 3 | int(fn, 16)
        said = [infos for _n, _k, infos in topo.pci[bus].osdevs]
        uuid = next((v for i in said for key, v in i.items() if key.endswith("UUID") and v), "")
        tail = uuid[4:] if uuid.upper().startswith("GPU-") else uuid
        unique = int(tail, 16) if tail and len(tail) <= 16 and set(tail) <= WORD_HEX else 0
        props = ["simd_count 1", f"location_id {location}", f"domain {int(dom, 16)}"]
        if unique:
            props.append(f"unique_id {unique}")
        render = _render_minor(topo.pci[bus])
        if render is not None:
            props.append(f"drm_render_minor {render}")
        files[f"sys/class/kfd/kfd/topology/nodes/{k + 1}/properties"] = "\n".join(props) + "\n"
        model = next((i["GPUModel"] for i in said if i.get("GPUModel")), None)
        if model:
            files[f"sys/class/kfd/kfd/topology/nodes/{k + 1}/name"] = model
    if amd_rank:
        files["sys/class/kfd/kfd/topology/nodes/0/properties"] = "cpu_cores_count 1\nsimd_count 0\n"
    _osdev_files(topo, bases, files, links)
