"""hwloc's view of a sysfs/procfs tree, as the oracle numabind's discovery is checked against.

:func:`lstopo_view` runs ``lstopo-no-graphics --input ROOT --disallowed --of xml -``
(Debian package ``hwloc-nox``) and reduces the XML to what numabind also
reports; :func:`differences` lists where a :class:`numabind.topology.Topology`
disagrees with it (:func:`cluster_differences`: about its clusters larger than a
core). hwloc reads only the files a kernel writes, so the two agree on every
machine unless numabind misreads one.

The environment of lstopo is pinned so that its view is the kernel's:
``HWLOC_USE_NUMA_DISTANCES=1`` keeps the distance matrix but does not move
CPU-less nodes next to their nearest CPUs (their ``cpuset`` stays empty, as
their ``cpumap`` is), and ``HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES=1`` keeps GPU
memory nodes, which the kernel lists like any other.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

__all__ = ["LSTOPO", "HwlocView", "lstopo_view", "differences", "cluster_differences", "hwloc_bitmap"]

LSTOPO = shutil.which("lstopo-no-graphics") or shutil.which("lstopo")

_CACHE_TYPES = {"0": "Unified", "1": "Data", "2": "Instruction"}


def hwloc_bitmap(text: str | None) -> frozenset[int]:
    """hwloc's bitmap text (``0x0000ffff`` or ``0x00000001,0xffffffff``) as ids."""
    if not text or text == "0x0":
        return frozenset()
    if "f...f" in text:
        raise ValueError(f"infinite hwloc bitmap {text!r}")
    words = text.split(",")
    out = set()
    for k, word in enumerate(reversed(words)):     # empty words are zero words
        value = int(word, 16) if word else 0
        for bit in range(32):
            if value >> bit & 1:
                out.add(32 * k + bit)
    return frozenset(out)


@dataclass
class HwlocView:
    """What lstopo found: the sets numabind also reports."""

    pus: frozenset[int] = frozenset()
    allowed_cpus: frozenset[int] = frozenset()
    allowed_nodes: frozenset[int] = frozenset()
    nodes: dict[int, tuple[frozenset[int], int]] = field(default_factory=dict)  # id -> (cpus, bytes)
    distances: dict[int, dict[int, int]] = field(default_factory=dict)
    packages: dict[frozenset[int], int] = field(default_factory=dict)   # cpuset -> os_index
    cores: set[frozenset[int]] = field(default_factory=set)
    caches: set[tuple[int, str, frozenset[int]]] = field(default_factory=set)
    xml: str = ""


def lstopo_view(root: str | os.PathLike | None, timeout: float = 120) -> HwlocView:
    """Run lstopo on ``root`` (a directory holding sys/ and proc/; None: this machine)
    and parse its XML."""
    if LSTOPO is None:
        raise RuntimeError("lstopo-no-graphics is not installed (Debian package hwloc-nox)")
    env = dict(os.environ, HWLOC_USE_NUMA_DISTANCES="1", HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES="1",
               LC_ALL="C")
    for var in ("HWLOC_FSROOT", "HWLOC_XMLFILE", "HWLOC_SYNTHETIC", "HWLOC_COMPONENTS"):
        env.pop(var, None)
    where = [] if root is None else ["--input", os.fspath(root)]
    proc = subprocess.run([LSTOPO, *where, "--disallowed", "--of", "xml", "-"],
                          capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0 or "<topology" not in proc.stdout:
        raise RuntimeError(f"lstopo failed on {root} (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return parse_xml(proc.stdout)


def parse_xml(xml: str) -> HwlocView:
    tree = ET.fromstring(xml)
    view = HwlocView(xml=xml)
    machine = tree.find("object")
    assert machine is not None and machine.get("type") == "Machine", "no Machine object"
    view.allowed_cpus = hwloc_bitmap(machine.get("allowed_cpuset"))
    view.allowed_nodes = hwloc_bitmap(machine.get("allowed_nodeset"))
    pus = set()
    for obj in tree.iter("object"):
        kind = obj.get("type")
        cpuset = hwloc_bitmap(obj.get("cpuset"))
        if kind == "PU":
            pus.add(int(obj.get("os_index")))
        elif kind == "NUMANode":
            view.nodes[int(obj.get("os_index"))] = (cpuset, int(obj.get("local_memory", "0")))
        elif kind == "Package":
            view.packages[cpuset] = int(obj.get("os_index", "-1"))
        elif kind == "Core":
            view.cores.add(cpuset)
        elif kind in ("L1Cache", "L2Cache", "L3Cache", "L4Cache", "L5Cache",
                      "L1iCache", "L2iCache", "L3iCache"):
            level = int(obj.get("depth"))
            view.caches.add((level, _CACHE_TYPES[obj.get("cache_type", "0")], cpuset))
    view.pus = frozenset(pus)
    for dist in tree.iter("distances2"):
        if dist.get("type") != "NUMANode" or dist.get("name", "NUMALatency") != "NUMALatency":
            continue
        nodes = [int(v) for el in dist.findall("indexes") for v in (el.text or "").split()]
        values = [int(v) for el in dist.findall("u64values") for v in (el.text or "").split()]
        n = len(nodes)
        for i, node in enumerate(nodes):
            view.distances[node] = dict(zip(nodes, values[i * n:(i + 1) * n]))
    return view


def differences(topo, view: HwlocView, *, distances: bool = True, allowed: bool = True,
                packages: bool | None = None) -> list[str]:
    """Where ``topo`` (numabind) and ``view`` (hwloc) disagree; [] when they agree.

    ``distances=False`` / ``allowed=False`` skip what a caller checks against
    another truth (a case where numabind follows the kernel and hwloc does not).
    Packages are compared by CPU sets (and ids) when every CPU's package id is
    known (``packages=None``).
    """
    out: list[str] = []

    def check(what: str, ours, theirs) -> None:
        if ours != theirs:
            out.append(f"{what}: numabind {_show(ours)} != hwloc {_show(theirs)}")

    check("online CPUs (hwloc PUs)", topo.online_cpus, view.pus)
    check("node ids", sorted(topo.nodes), sorted(view.nodes))
    cpu_nodes = {n.cpus for n in topo.nodes.values() if n.cpus}
    for nid in sorted(set(topo.nodes) & set(view.nodes)):
        node = topo.nodes[nid]
        h_cpus, h_bytes = view.nodes[nid]
        if node.cpus or not h_cpus:
            check(f"node {nid} CPUs", node.cpus, h_cpus)
        elif not any(h_cpus == frozenset().union(*group) for group in _unions(cpu_nodes, h_cpus)):
            out.append(f"node {nid}: numabind has no CPUs, hwloc places it at {_show(h_cpus)}, "
                       f"which is not a union of CPU nodes")
        check(f"node {nid} memory bytes", node.memory_bytes, h_bytes)
    covered = frozenset().union(*(n.cpus for n in topo.nodes.values()))
    check("CPUs of all nodes", covered, view.pus)
    if distances and len(view.nodes) > 1:
        ours = {n: dict(node.distances) for n, node in topo.nodes.items()}
        check("distances", ours, view.distances)
    if allowed:
        check("allowed CPUs", topo.allowed_cpus, view.allowed_cpus & view.pus)
        check("allowed nodes", topo.allowed_nodes, view.allowed_nodes & frozenset(view.nodes))
    cores = {c.siblings for c in topo.cpus.values()}
    check("cores (thread sets)", cores, view.cores)
    if packages is None:
        packages = all(c.package >= 0 for c in topo.cpus.values())
    if packages:
        ours = {cpus: pkg for pkg, cpus in topo.package_cpus().items()}
        check("packages (CPU set -> id)", ours, view.packages)
    check("caches (level, type, CPUs)", {(c.level, c.type, c.cpus) for c in topo.caches},
          view.caches)
    check("L3 groups", {c.cpus for c in topo.caches if c.level == 3},
          {cpus for level, _t, cpus in view.caches if level == 3})
    return out


def cluster_differences(topo, view: HwlocView) -> list[str]:
    """Where ``topo``'s clusters larger than a core disagree with hwloc's Cluster groups (made from
    ``cluster_cpus``, numbered by ``cluster_id``). hwloc keeps no group with the CPUs of another object
    (a cache, a package, a node), so a cluster of ours hwloc lacks must have such CPUs."""
    from numabind.cpulist import format_cpulist

    tree = ET.fromstring(view.xml)
    theirs = set()
    others = set()
    for obj in tree.iter("object"):
        cpus = hwloc_bitmap(obj.get("cpuset"))
        if obj.get("type") == "Group" and obj.get("subtype") == "Cluster":
            theirs.add((int(obj.get("os_index", "-1")), cpus))
        elif obj.get("type") not in ("PU", "Core"):
            others.add(cpus)
    ours = {(topo.cpus[min(g)].cluster, g) for g in topo.cluster_groups()}
    out = [f"hwloc cluster {i} {format_cpulist(c)} is not one of numabind's" for i, c in sorted(
        theirs - ours, key=lambda x: min(x[1]))]
    out += [f"numabind cluster {i} {format_cpulist(c)} is neither hwloc's nor another object's CPUs"
            for i, c in sorted(ours - theirs, key=lambda x: min(x[1])) if c not in others]
    return out


def _unions(cpu_nodes: set[frozenset[int]], target: frozenset[int]):
    """The CPU-node sets inside ``target`` (hwloc attaches a CPU-less node to an
    object covering whole nodes when it cannot leave it at the machine)."""
    inside = [s for s in cpu_nodes if s <= target]
    yield inside


def _show(value) -> str:
    from numabind.cpulist import format_cpulist

    if isinstance(value, frozenset) and all(isinstance(v, int) for v in value):
        return f"{{{format_cpulist(value)}}}"
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(_show(v) for v in value)) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_show(k)}: {_show(v)}" for k, v in sorted(
            value.items(), key=lambda kv: str(kv[0]))) + "}"
    return repr(value)
