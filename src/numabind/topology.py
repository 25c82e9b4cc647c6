"""Topology value objects and discovery (reads files under a root only).

:func:`discover` reads the kernel's view of the machine through one
:class:`~numabind._fs.FsReader`, so a dump of ``sys/`` and ``proc/`` in a
directory is discovered exactly like the live system:

* ``sys/devices/system/node/node*/{cpulist,meminfo,distance}`` and
  ``node/{online,possible}``: the NUMA nodes, memory-only and CPU-only ones too.
  A kernel without ``node/`` (``CONFIG_NUMA=n``) gives one node 0 holding every
  online CPU and ``proc/meminfo``'s MemTotal.
* ``sys/devices/system/cpu/{online,possible}``, ``cpuN/topology/*`` and
  ``cpuN/cache/index*/*`` of each online CPU.
* ``proc/self/status``, the cgroup v2 and v1 cpusets: the CPUs and memory
  nodes this process (or the dumped one) may use.
* ``proc/cpuinfo``'s model name and ``cpu0/acpi_cppc/highest_perf``.

A file that is missing is not an error (most of them are optional on some
kernel); a file that is present but cannot be parsed raises
:class:`~numabind.errors.NumabindError` naming the file and its text.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import posixpath
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._fs import FsReader
from ._util import FrozenMap
from .cpulist import format_cpulist, parse_cpulist, parse_mask
from .devices import Gpu, discover_gpus
from .errors import NumabindError, PlanError

__all__ = ["Cache", "Cpu", "Cpuset", "Node", "Topology", "discover", "discover_from", "read_cpuset"]

log = logging.getLogger(__name__)

_NODE_DIR = "sys/devices/system/node"
_CPU_DIR = "sys/devices/system/cpu"
_CGROUP_DIR = "sys/fs/cgroup"

#: SLIT distance of a node to itself (the kernel's LOCAL_DISTANCE).
LOCAL_DISTANCE = 10


@dataclass(frozen=True)
class Cpu:
    """One online logical CPU."""

    id: int
    node: int | None                 # NUMA node holding this CPU (None if no node lists it)
    package: int                     # physical_package_id, -1 when unknown
    core: int                        # core_id, -1 when unknown
    siblings: frozenset[int]         # thread_siblings_list (contains id itself)


@dataclass(frozen=True)
class Cache:
    """One cache instance shared by a group of CPUs."""

    level: int
    type: str                        # "Unified" | "Data" | "Instruction"
    cpus: frozenset[int]             # shared_cpu_list

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "type": self.type, "cpus": format_cpulist(self.cpus)}


@dataclass(frozen=True)
class Node:
    """One NUMA node as the kernel lists it (memory-only and CPU-only too)."""

    id: int
    cpus: frozenset[int]             # online CPUs of the node; empty for memory-only nodes
    memory_bytes: int                # MemTotal of the node; 0 for CPU-only nodes
    distances: FrozenMap[int, int] = field(default_factory=FrozenMap)

    @property
    def has_memory(self) -> bool:
        return self.memory_bytes > 0

    @property
    def has_cpus(self) -> bool:
        return bool(self.cpus)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "cpus": format_cpulist(self.cpus),
            "memory_bytes": self.memory_bytes,
            "distances": {str(k): v for k, v in self.distances.items()},
        }


@dataclass(frozen=True)
class Topology:
    """What discovery found under one root. Frozen, hashable, picklable."""

    root: str
    nodes: FrozenMap[int, Node]
    cpus: FrozenMap[int, Cpu]        # online CPUs
    online_cpus: frozenset[int]
    possible_cpus: frozenset[int]
    allowed_cpus: frozenset[int]     # the process's (or the dump's cpuset's) CPUs
    online_nodes: frozenset[int]
    possible_nodes: frozenset[int]
    allowed_nodes: frozenset[int]    # Mems_allowed / cpuset.mems
    caches: tuple[Cache, ...] = ()   # distinct cache instances, sorted by (level, type, min cpu)
    model_name: str | None = None    # /proc/cpuinfo "model name" of the first CPU
    cppc_highest_perf: int | None = None  # cpu0/acpi_cppc/highest_perf (PCT gate)
    gpus: tuple[Gpu, ...] = ()
    allowed_source: str = ""         # where allowed_cpus/allowed_nodes were read from

    # -- queries -------------------------------------------------------------

    @property
    def nodes_with_memory(self) -> frozenset[int]:
        """Ids of the nodes whose MemTotal is above 0."""
        return frozenset(n.id for n in self.nodes.values() if n.memory_bytes > 0)

    @property
    def nodes_with_cpus(self) -> frozenset[int]:
        """Ids of the nodes with at least one online CPU."""
        return frozenset(n.id for n in self.nodes.values() if n.cpus)

    def node_of_cpu(self, cpu: int) -> int | None:
        """The node listing ``cpu`` (online CPUs only), else None."""
        found = self.cpus.get(cpu)
        if found is not None:
            return found.node
        for node in self.nodes.values():
            if cpu in node.cpus:
                return node.id
        return None

    def package_cpus(self) -> dict[int, frozenset[int]]:
        """Package id -> its online CPUs (-1 collects CPUs of unknown package)."""
        out: dict[int, set[int]] = {}
        for cpu in self.cpus.values():
            out.setdefault(cpu.package, set()).add(cpu.id)
        return {pkg: frozenset(cpus) for pkg, cpus in sorted(out.items())}

    def package_nodes(self) -> dict[int, frozenset[int]]:
        """Package id -> ids of the nodes with CPUs in that package.

        Memory-only nodes belong to no package. CPUs whose package is unknown
        are collected under -1.
        """
        out: dict[int, set[int]] = {}
        for cpu in self.cpus.values():
            if cpu.node is not None:
                out.setdefault(cpu.package, set()).add(cpu.node)
        return {pkg: frozenset(nodes) for pkg, nodes in sorted(out.items())}

    def llc_groups(self) -> tuple[frozenset[int], ...]:
        """CPU sets of the distinct last-level caches, ordered by lowest CPU.

        The last level is the highest level among Unified and Data caches;
        () when the kernel exposed no cache information.
        """
        candidates = [c for c in self.caches if c.type in ("Unified", "Data")]
        if not candidates:
            return ()
        top = max(c.level for c in candidates)
        groups = {c.cpus for c in candidates if c.level == top}
        return tuple(sorted(groups, key=min))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable summary; CPU and node sets as canonical cpulists."""
        packages = self.package_cpus()
        cores = {(c.package, c.core, c.siblings) for c in self.cpus.values()}
        return {
            "root": self.root,
            "model_name": self.model_name,
            "cppc_highest_perf": self.cppc_highest_perf,
            "online_cpus": format_cpulist(self.online_cpus),
            "possible_cpus": format_cpulist(self.possible_cpus),
            "allowed_cpus": format_cpulist(self.allowed_cpus),
            "online_nodes": format_cpulist(self.online_nodes),
            "possible_nodes": format_cpulist(self.possible_nodes),
            "allowed_nodes": format_cpulist(self.allowed_nodes),
            "allowed_source": self.allowed_source,
            "cpus": {
                "online": len(self.online_cpus),
                "allowed": len(self.allowed_cpus),
                "cores": len(cores),
                "threads_per_core": max((len(c.siblings) for c in self.cpus.values()), default=0),
                "packages": {str(pkg): format_cpulist(cpus) for pkg, cpus in packages.items()},
            },
            "nodes": [node.to_dict() for node in self.nodes.values()],
            "caches": [cache.to_dict() for cache in self.caches],
            "llc_groups": [format_cpulist(g) for g in self.llc_groups()],
            "gpus": [_gpu_to_dict(g) for g in self.gpus],
        }


def _jsonable(value: Any) -> Any:
    if isinstance(value, (frozenset, set)):
        return format_cpulist(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _gpu_to_dict(gpu: Any) -> dict[str, Any]:
    to_dict = getattr(gpu, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    raw = {f.name: getattr(gpu, f.name) for f in dataclasses.fields(gpu)}
    return _jsonable(raw)


# -- parsing helpers (every error names the file) -----------------------------


def _malformed(reader: FsReader, rel: str, text: str, why: str) -> NumabindError:
    shown = text.strip()
    if len(shown) > 200:
        shown = shown[:200] + "..."
    return NumabindError(f"malformed {reader.path(rel)}: {why} (content: {shown!r})")


def _parse_list_text(reader: FsReader, rel: str, text: str, what: str) -> frozenset[int]:
    try:
        return parse_cpulist(text, what=what)
    except PlanError as exc:
        raise _malformed(reader, rel, text, str(exc)) from None


def _read_list(reader: FsReader, rel: str, what: str = "cpulist") -> frozenset[int] | None:
    text = reader.read(rel)
    if text is None:
        return None
    return _parse_list_text(reader, rel, text, what)


def _read_int(reader: FsReader, rel: str) -> int | None:
    text = reader.read(rel)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        raise _malformed(reader, rel, text, "expected one integer") from None


def _parse_memtotal_kb(reader: FsReader, rel: str, text: str) -> int:
    """MemTotal in kB from ``proc/meminfo`` or a node's ``meminfo``."""
    for line in text.splitlines():
        head, sep, rest = line.partition("MemTotal:")
        if not sep:
            continue
        parts = rest.split()
        if not parts or not parts[0].isdigit() or parts[1:] not in ([], ["kB"]):
            raise _malformed(reader, rel, line, "MemTotal is not '<number> kB'")
        return int(parts[0])
    raise _malformed(reader, rel, text, "no MemTotal line")


def _ids_from_dir(names: Iterable[str], prefix: str) -> list[int]:
    n = len(prefix)
    return sorted(int(name[n:]) for name in names if name.startswith(prefix) and name[n:].isdigit())


# -- discovery steps -----------------------------------------------------------


def _discover_cpus(reader: FsReader) -> tuple[frozenset[int], frozenset[int]]:
    """(online, possible) CPUs."""
    online = _read_list(reader, f"{_CPU_DIR}/online")
    if online is None:
        # No online file: every cpuN directory not marked offline is online.
        found = set()
        for cpu in _ids_from_dir(reader.listdir(_CPU_DIR), "cpu"):
            if _read_int(reader, f"{_CPU_DIR}/cpu{cpu}/online") != 0:
                found.add(cpu)
        online = frozenset(found)
        log.debug("no %s/online; %d CPUs from cpuN directories", _CPU_DIR, len(online))
    possible = _read_list(reader, f"{_CPU_DIR}/possible")
    if possible is None:
        possible = online
    return online, possible | online


def _discover_nodes(
    reader: FsReader, online_cpus: frozenset[int]
) -> tuple[dict[int, Node], frozenset[int], frozenset[int]]:
    """(nodes, online node ids, possible node ids)."""
    ids = _ids_from_dir(reader.listdir(_NODE_DIR), "node")
    if not ids:
        meminfo = reader.read("proc/meminfo")
        kb = 0 if meminfo is None else _parse_memtotal_kb(reader, "proc/meminfo", meminfo)
        log.debug("no NUMA nodes under %s: one node 0 with %d CPUs, %d kB",
                  reader.path(_NODE_DIR), len(online_cpus), kb)
        node = Node(0, online_cpus, kb * 1024, FrozenMap({0: LOCAL_DISTANCE}))
        return {0: node}, frozenset({0}), frozenset({0})

    listed_online = _read_list(reader, f"{_NODE_DIR}/online", "nodelist")
    online = listed_online if listed_online is not None else frozenset(ids)
    possible = _read_list(reader, f"{_NODE_DIR}/possible", "nodelist")
    possible = (possible if possible is not None else online) | online | frozenset(ids)
    # The kernel prints one distance per online node, in increasing node id order.
    order = sorted(online)
    nodes: dict[int, Node] = {}
    for nid in ids:
        base = f"{_NODE_DIR}/node{nid}"
        cpus = _read_list(reader, f"{base}/cpulist")
        if cpus is None:
            cpus = frozenset()
        elif online_cpus:
            cpus = cpus & online_cpus
        meminfo = reader.read(f"{base}/meminfo")
        kb = 0 if meminfo is None else _parse_memtotal_kb(reader, f"{base}/meminfo", meminfo)
        distances = _read_distances(reader, f"{base}/distance", order, ids)
        nodes[nid] = Node(nid, cpus, kb * 1024, distances)
    return nodes, online, possible


def _read_distances(reader: FsReader, rel: str, order: list[int], ids: list[int]) -> FrozenMap:
    text = reader.read(rel)
    if text is None:
        return FrozenMap()
    try:
        row = [int(x) for x in text.split()]
    except ValueError:
        raise _malformed(reader, rel, text, "expected integers separated by spaces") from None
    if len(row) == len(order):
        return FrozenMap(dict(zip(order, row)))
    if len(row) == len(ids):
        return FrozenMap(dict(zip(ids, row)))
    raise _malformed(
        reader, rel, text,
        f"{len(row)} distances, but there are {len(order)} online nodes "
        f"({format_cpulist(order)})",
    )


def _discover_cpu_details(
    reader: FsReader, online_cpus: frozenset[int], node_of: Mapping[int, int]
) -> tuple[dict[int, Cpu], tuple[Cache, ...]]:
    """Per-CPU topology and the distinct caches, reading each instance once.

    Hyperthread siblings share package and core, so one CPU's topology files
    describe its whole sibling set. A cache at ``indexK`` of one CPU is the
    ``indexK`` cache of every CPU in its ``shared_cpu_list`` (the kernel builds
    the sharing per index), so those CPUs' ``indexK`` directories are skipped;
    siblings of one core have the same cache indexes, so a CPU whose sibling's
    indexes all cover it is not even listed.
    """
    cpus: dict[int, Cpu] = {}
    known: dict[int, tuple[int, int, frozenset[int]]] = {}
    covered: dict[str, set[int]] = {}
    indexes_of: dict[int, list[str]] = {}
    caches: set[Cache] = set()
    parsed: dict[str, frozenset[int]] = {}  # the same list text recurs per core and cache

    def read_list(rel: str) -> frozenset[int] | None:
        text = reader.read(rel)
        if text is None:
            return None
        found = parsed.get(text)
        if found is None:
            found = parsed[text] = _parse_list_text(reader, rel, text, "cpulist")
        return found

    for cid in sorted(online_cpus):
        base = f"{_CPU_DIR}/cpu{cid}"
        info = known.get(cid)
        if info is None:
            topo = f"{base}/topology"
            siblings = read_list(f"{topo}/thread_siblings_list")
            siblings = frozenset({cid}) if siblings is None else (siblings & online_cpus) | {cid}
            core = _read_int(reader, f"{topo}/core_id")
            package = _read_int(reader, f"{topo}/physical_package_id")
            info = (-1 if package is None else package, -1 if core is None else core, siblings)
            for sib in siblings:
                known[sib] = info
        cpus[cid] = Cpu(cid, node_of.get(cid), info[0], info[1], info[2])

        listed = next((indexes_of[s] for s in info[2] if s in indexes_of), None)
        if listed is not None and all(cid in covered[name] for name in listed):
            continue
        names = [n for n in reader.listdir(f"{base}/cache") if n.startswith("index")]
        indexes_of[cid] = names
        for index in names:
            seen = covered.setdefault(index, set())
            if cid in seen:
                continue
            idir = f"{base}/cache/{index}"
            shared = read_list(f"{idir}/shared_cpu_list")
            shared = frozenset({cid}) if shared is None else shared | {cid}
            seen.update(shared)
            level = _read_int(reader, f"{idir}/level")
            ctype = reader.read_strip(f"{idir}/type")
            if level is None or ctype is None:
                continue
            members = shared & online_cpus
            if members:
                caches.add(Cache(level, ctype, members))
    ordered = tuple(sorted(caches, key=lambda c: (c.level, c.type, min(c.cpus), len(c.cpus))))
    return cpus, ordered


def _status_fields(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.startswith(("Cpus_allowed", "Mems_allowed")):
            out[key] = value.strip()
    return out


def _status_set(reader: FsReader, fields: dict[str, str], name: str) -> frozenset[int] | None:
    rel = "proc/self/status"
    if f"{name}_list" in fields:
        return _parse_list_text(reader, rel, fields[f"{name}_list"], f"{name}_list")
    if name in fields:
        try:
            return parse_mask(fields[name], what=name)
        except PlanError as exc:
            raise _malformed(reader, rel, fields[name], str(exc)) from None
    return None


def _cgroup_lines(reader: FsReader) -> list[tuple[str, str, str]]:
    text = reader.read("proc/self/cgroup")
    if text is None:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out.append((parts[0], parts[1], parts[2]))
    return out


def _clean_cgroup_path(path: str) -> str:
    # posixpath.normpath clamps "/.." at "/", so the path never leaves the mount.
    # A leading "//" would survive normpath (POSIX keeps it), hence the lstrip.
    return posixpath.normpath("/" + path.strip().split(" ", 1)[0].lstrip("/"))


def _cgroup2_cpuset(reader: FsReader, lines) -> tuple[str, frozenset | None, frozenset | None] | None:
    """(path, cpus, mems) of the nearest cgroup v2 cpuset at or above the process's cgroup."""
    path = next((p for h, c, p in lines if h == "0" and c == ""), None)
    if path is None:
        return None
    path = _clean_cgroup_path(path)
    for mount in (_CGROUP_DIR, f"{_CGROUP_DIR}/unified"):
        current = path
        while True:
            d = mount + ("" if current == "/" else current)
            cpus = _read_list(reader, f"{d}/cpuset.cpus.effective")
            mems = _read_list(reader, f"{d}/cpuset.mems.effective", "nodelist")
            if cpus is not None or mems is not None:
                return current, cpus, mems
            if current == "/":
                break
            current = posixpath.dirname(current)
    return None


def _cgroup1_cpuset(reader: FsReader, lines) -> tuple[str, frozenset | None, frozenset | None] | None:
    """(path, cpus, mems) of the process's legacy (v1) cpuset."""
    path = reader.read_strip("proc/self/cpuset")
    mounts = [f"{_CGROUP_DIR}/cpuset"]
    for _h, controllers, cpath in lines:
        if "cpuset" in controllers.split(","):
            if path is None:
                path = cpath
            if controllers != "cpuset":
                mounts.append(f"{_CGROUP_DIR}/{controllers}")
    if not path:
        return None
    path = _clean_cgroup_path(path)
    for mount in mounts:
        d = mount + ("" if path == "/" else path)
        cpus = _read_list(reader, f"{d}/cpuset.effective_cpus")
        if cpus is None:
            cpus = _read_list(reader, f"{d}/cpuset.cpus")
        if cpus is None:
            continue
        mems = _read_list(reader, f"{d}/cpuset.effective_mems", "nodelist")
        if mems is None:
            mems = _read_list(reader, f"{d}/cpuset.mems", "nodelist")
        return path, cpus, mems
    return None


def _discover_allowed(
    reader: FsReader, online_cpus: frozenset[int], node_ids: frozenset[int]
) -> tuple[frozenset[int], frozenset[int], str]:
    """(allowed CPUs, allowed nodes, source): the intersection of what was found."""
    cpus: frozenset[int] | None = None
    mems: frozenset[int] | None = None
    sources: list[str] = []

    def meet(current, found):
        return found if current is None else current & found

    if reader.is_live:
        cpus = frozenset(os.sched_getaffinity(0))
        sources.append("sched_getaffinity")
    status = reader.read("proc/self/status")
    if status is not None:
        fields = _status_fields(status)
        st_cpus = None if reader.is_live else _status_set(reader, fields, "Cpus_allowed")
        st_mems = _status_set(reader, fields, "Mems_allowed")
        if st_cpus is not None:
            cpus = meet(cpus, st_cpus)
        if st_mems is not None:
            mems = meet(mems, st_mems)
        if st_cpus is not None or st_mems is not None:
            sources.append("status")
    lines = _cgroup_lines(reader)
    for kind, found in (("cgroup2", _cgroup2_cpuset(reader, lines)),
                        ("cgroup1", _cgroup1_cpuset(reader, lines))):
        if found is None:
            continue
        path, cg_cpus, cg_mems = found
        if cg_cpus is not None and not reader.is_live:
            cpus = meet(cpus, cg_cpus)
        if cg_mems is not None:
            mems = meet(mems, cg_mems)
        sources.append(f"{kind}:{path}")
    if cpus is None:
        cpus = online_cpus
    elif not reader.is_live:
        cpus = cpus & online_cpus
    mems = node_ids if mems is None else mems & node_ids
    return cpus, mems, "+".join(sources) or "online"


def _model_name(reader: FsReader) -> str | None:
    text = reader.read("proc/cpuinfo", limit=8192)  # the first CPU's block
    if text is None:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "model name":
            return value.strip()
    return None


# -- entry points --------------------------------------------------------------


def discover(root: str | os.PathLike | None = None) -> Topology:
    """Discover the machine under ``root`` (else ``$NUMABIND_FSROOT``, else ``/``).

    On the live system (root ``/``) ``allowed_cpus`` is this process's real
    affinity, ``os.sched_getaffinity(0)``.
    """
    return discover_from(FsReader(root))


def discover_from(reader: FsReader, env: Mapping[str, str] | None = None) -> Topology:
    """Discovery through an existing reader (tools that record or replay reads).

    ``env`` is passed to GPU discovery (``CUDA_VISIBLE_DEVICES`` & co.);
    it defaults to ``os.environ``.
    """
    start = time.perf_counter()
    online_cpus, possible_cpus = _discover_cpus(reader)
    nodes, online_nodes, possible_nodes = _discover_nodes(reader, online_cpus)
    if not online_cpus:
        # A dump without sys/devices/system/cpu: trust the nodes' cpulists.
        online_cpus = frozenset().union(*(n.cpus for n in nodes.values()))
        possible_cpus = possible_cpus | online_cpus
    node_of = {cpu: node.id for node in nodes.values() for cpu in node.cpus}
    cpus, caches = _discover_cpu_details(reader, online_cpus, node_of)
    allowed_cpus, allowed_nodes, source = _discover_allowed(
        reader, online_cpus, frozenset(nodes)
    )
    frozen_nodes = FrozenMap(nodes)
    gpus = tuple(discover_gpus(reader, frozen_nodes, env=env))
    topo = Topology(
        root=reader.root,
        nodes=frozen_nodes,
        cpus=FrozenMap(cpus),
        online_cpus=online_cpus,
        possible_cpus=possible_cpus,
        allowed_cpus=allowed_cpus,
        online_nodes=online_nodes,
        possible_nodes=possible_nodes,
        allowed_nodes=allowed_nodes,
        caches=caches,
        model_name=_model_name(reader),
        cppc_highest_perf=_read_int(reader, f"{_CPU_DIR}/cpu0/acpi_cppc/highest_perf"),
        gpus=gpus,
        allowed_source=source,
    )
    log.debug(
        "discovered %s in %.1f ms: %d nodes (%s), %d online CPUs, allowed CPUs %s "
        "nodes %s from %s, %d caches, %d GPUs",
        reader.root, (time.perf_counter() - start) * 1e3, len(nodes),
        format_cpulist(nodes), len(online_cpus), format_cpulist(allowed_cpus),
        format_cpulist(allowed_nodes), source, len(caches), len(gpus),
    )
    return topo


@dataclass(frozen=True)
class Cpuset:
    """The CPUs and memory nodes a process's cpuset (cgroup v2 or v1) allows."""

    cpus: frozenset[int] | None
    mems: frozenset[int] | None
    source: str                      # e.g. "cgroup2:/system.slice/x.service"


def read_cpuset(reader: FsReader) -> Cpuset | None:
    """The nearest cpuset of the process under ``reader``'s root, or None.

    The backends use it on the live system to tell a CPU outside the cpuset
    (a PlanError) from a CPU the process merely is not bound to yet.
    """
    lines = _cgroup_lines(reader)
    for kind, found in (("cgroup2", _cgroup2_cpuset(reader, lines)),
                        ("cgroup1", _cgroup1_cpuset(reader, lines))):
        if found is not None:
            path, cpus, mems = found
            return Cpuset(cpus=cpus, mems=mems, source=f"{kind}:{path}")
    return None
