"""Reading the kernel's view of the machine under a root (sysfs and procfs, live or a dump) into
:class:`~numabind._facts.Facts` (docs/discovery.rst). A missing file is not an error; a file that cannot be parsed
raises :class:`~numabind.errors.NumabindError` naming the file and its text.
"""

from __future__ import annotations

import os

from .._base import getLogger
from .._cgroup import read_allowed
from .._facts import Facts, NodeFacts
from .._fs import WEIGHTS_AUTO_NAMES, WEIGHTS_DIR, FsReader, ascii_int, key_values, malformed
from ..cpulist import format_cpulist, parse_cpulist, parse_mask
from ..errors import NumabindError, PlanError
from ..plan import Allowed

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the looks' start)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable, Iterable, Mapping

__all__ = ["ARM_CPU_PARTS", "arm_cpu_name", "read_facts", "read_weights"]

log = getLogger("numabind.topology")     # the package's logger: the name a warning is printed with

_NODE_DIR = "sys/devices/system/node"
_CPU_DIR = "sys/devices/system/cpu"
_PMU_DIR = "sys/devices"

#: SLIT distance of a node to itself (the kernel's LOCAL_DISTANCE).
LOCAL_DISTANCE = 10


def read_facts(reader: FsReader) -> Facts:
    """What the kernel says of the machine under ``reader``'s root."""
    _require_sysfs(reader)
    sets = _Sets(reader)
    online_cpus, possible_cpus = _read_cpus(reader)
    nodes, online_nodes, possible_nodes = _read_nodes(reader, sets, online_cpus)
    if not online_cpus:
        # A dump without sys/devices/system/cpu: trust the nodes' cpulists.
        online_cpus = frozenset().union(*(n.cpus for n in nodes.values()))
        possible_cpus = possible_cpus | online_cpus
    if not online_cpus:
        raise NumabindError(
            f"no online CPU found under {reader.origin!r}: {_CPU_DIR}/online, the cpuN "
            f"directories and the nodes' CPU lists are all missing or empty")
    cpuinfo = _cpuinfo(reader)
    try:
        # x86 kernels make a core's cluster the CPUs of its L2, which the caches hold: the cluster files (one
        # more file per core there, some 9% of discovery at 512 CPUs) are read on other machines only.
        x86 = _is_x86(cpuinfo)
        cores, clusters, capacities, caches = _read_cpu_details(reader, sets, online_cpus, clusters=not x86,
                                                                capacities=not x86)
    finally:
        reader.forget()
    # an Intel hybrid CPU's PMUs: cpu_core lists the performance cores, cpu_atom the efficiency cores
    p_cpus = sets.list_file(f"{_PMU_DIR}/cpu_core/cpus")
    e_cpus = None if p_cpus is None else sets.list_file(f"{_PMU_DIR}/cpu_atom/cpus")
    return Facts(
        online_cpus=online_cpus, possible_cpus=possible_cpus, online_nodes=online_nodes,
        possible_nodes=possible_nodes, nodes=nodes, cores=cores, clusters=clusters, capacities=capacities,
        hybrid_pmus=None if p_cpus is None or e_cpus is None else (p_cpus, e_cpus), caches=caches,
        allowed=_read_allowed(reader, online_cpus, nodes),
        model_name=_model_name(reader, cpuinfo),
        cppc_highest_perf=_read_int(reader, f"{_CPU_DIR}/cpu0/acpi_cppc/highest_perf"),
        weights=read_weights(reader))


# -- parsing helpers (every error names the file) -----------------------------


def _parsed(reader: FsReader, rel: str, text: str, parse: Callable[..., frozenset[int]], what: str) -> frozenset[int]:
    """``parse`` (a list or a mask) of ``text``, read from ``rel``; an error names the file and shows its text."""
    try:
        return parse(text, what=what)
    except PlanError as exc:
        raise malformed(reader, rel, text, str(exc)) from None


def _read_list(reader: FsReader, rel: str, what: str = "cpulist") -> frozenset[int] | None:
    text = reader.read(rel)
    if text is None:
        return None
    return _parsed(reader, rel, text, parse_cpulist, what)


def _read_int(reader: FsReader, rel: str) -> int | None:
    text = reader.read(rel)
    if text is None:
        return None
    value = ascii_int(text, signed=True)
    if value is None:
        raise malformed(reader, rel, text, "expected one integer")
    return value


class _Sets:
    """Reads CPU sets from list files or hex masks, parsing each distinct text once
    (the same text recurs per core, per cache and per node)."""

    __slots__ = ("reader", "_lists", "_masks", "_sizes")

    def __init__(self, reader: FsReader) -> None:
        self.reader = reader
        self._lists: dict[str, frozenset[int]] = {}
        self._masks: dict[str, frozenset[int]] = {}
        self._sizes: dict[str, int | None] = {}

    def size_file(self, rel: str) -> int | None:
        """A cache ``size`` file in bytes (:func:`_parse_size`), each distinct text parsed once."""
        text = self.reader.read_strip(rel)
        if not text:
            return None
        sizes = self._sizes
        if text not in sizes:
            sizes[text] = _parse_size(self.reader, rel, text)
        return sizes[text]

    def list_file(self, rel: str, what: str = "cpulist") -> frozenset[int] | None:
        text = self.reader.read(rel)
        if text is None:
            return None
        return self.list_text(rel, text, what)

    def list_text(self, rel: str, text: str, what: str = "cpulist") -> frozenset[int]:
        """:meth:`list_file` of a text already read from ``rel``."""
        found = self._lists.get(text)
        if found is None:
            found = self._lists[text] = _parsed(self.reader, rel, text, parse_cpulist, what)
        return found

    def mask_file(self, rel: str, what: str = "mask") -> frozenset[int] | None:
        text = self.reader.read(rel)
        if text is None:
            return None
        found = self._masks.get(text)
        if found is None:
            found = self._masks[text] = _parsed(self.reader, rel, text, parse_mask, what)
        return found

    def first(self, base: str, *names: str) -> frozenset[int] | None:
        """The set in the first of ``base/name`` that exists; names ending in
        ``list`` are lists, the others masks."""
        for name in names:
            rel = f"{base}/{name}"
            found = self.list_file(rel) if name.endswith("list") else self.mask_file(rel)
            if found is not None:
                return found
        return None


_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _parse_size(reader: FsReader, rel: str, text: str) -> int | None:
    """The text of a cache ``size`` file (the kernel writes ``48K``) in bytes; None when malformed."""
    unit = text[-1:].upper() if text[-1:].isalpha() else ""
    digits = text[:-1] if unit else text
    value = ascii_int(digits, max_digits=12) if unit in _SIZE_UNITS else None
    if value is None:
        log.debug("unparsable cache size %s: %r", reader.path(rel), text[:40])
        return None
    return value * _SIZE_UNITS[unit]


def _parse_memtotal_kb(reader: FsReader, rel: str, text: str) -> int:
    """MemTotal in kB from ``proc/meminfo`` or a node's ``meminfo``."""
    for line in text.splitlines():
        head, sep, rest = line.partition("MemTotal:")
        if not sep:
            continue
        parts = rest.split()
        kb = ascii_int(parts[0]) if parts else None
        if kb is None or parts[1:] not in ([], ["kB"]):
            raise malformed(reader, rel, line, "MemTotal is not '<number> kB'")
        return kb
    raise malformed(reader, rel, text, "no MemTotal line")


def _require_sysfs(reader: FsReader) -> None:
    if reader.isdir(_CPU_DIR) or reader.isdir(_NODE_DIR):
        return
    raise NumabindError(
        f"discovery root {reader.origin!r} holds no sysfs: neither {_CPU_DIR} nor {_NODE_DIR} "
        f"is a directory under {reader.root!r}. Give the directory that holds sys/ and proc/ "
        f"(or an hwloc-gather-topology .tar.bz2), or / for this machine")


# -- reading steps -------------------------------------------------------------


def _read_cpus(reader: FsReader) -> tuple[frozenset[int], frozenset[int]]:
    """(online, possible) CPUs."""
    online = _read_list(reader, f"{_CPU_DIR}/online")
    dirs: list[int] | None = None
    if online is None:
        # No online file: every cpuN directory is online unless its online file says 0
        # (cpu0 often has no such file, some kernels leave it empty).
        dirs = reader.numbered(_CPU_DIR, "cpu")
        found = set()
        for cpu in dirs:
            rel = f"{_CPU_DIR}/cpu{cpu}/online"
            text = reader.read(rel)
            if text is None or not text.strip():
                found.add(cpu)
                continue
            flag = ascii_int(text)
            if flag not in (0, 1):
                raise malformed(reader, rel, text, "expected 0 or 1")
            if flag:
                found.add(cpu)
        online = frozenset(found)
        log.debug("no %s/online; %d CPUs from cpuN directories", _CPU_DIR, len(online))
    possible = _read_list(reader, f"{_CPU_DIR}/possible")
    if possible is None:
        if dirs is None:
            dirs = reader.numbered(_CPU_DIR, "cpu")
        possible = frozenset(dirs)
    return online, possible | online


def _read_distances(reader: FsReader, rel: str, orders: Iterable[tuple[str, list[int]]],
                    keep: Iterable[int]) -> dict[int, int]:
    text = reader.read(rel)
    if text is None or not text.strip():
        return {}
    row = [ascii_int(x, max_digits=9) for x in text.split()]
    if any(v is None for v in row):
        raise malformed(reader, rel, text, "expected integers separated by spaces")
    tried = []
    for name, order in orders:
        if len(row) == len(order):
            wanted = set(keep)
            return {n: d for n, d in zip(order, row) if n in wanted and d is not None}
        tried.append(f"{len(order)} {name} ({format_cpulist(order)})")
    raise malformed(reader, rel, text,
                    f"{len(row)} distances, but there are " + ", ".join(dict.fromkeys(tried)))


def _read_nodes(
    reader: FsReader, sets: _Sets, online_cpus: frozenset[int]
) -> tuple[dict[int, NodeFacts], frozenset[int], frozenset[int]]:
    """(nodes, online node ids, possible node ids)."""
    dirs = reader.numbered(_NODE_DIR, "node") if reader.isdir(_NODE_DIR) else []
    if not dirs:
        meminfo = reader.read("proc/meminfo")
        kb = 0 if meminfo is None else _parse_memtotal_kb(reader, "proc/meminfo", meminfo)
        log.debug("no NUMA nodes under %s: one node 0 with %d CPUs, %d kB",
                  reader.path(_NODE_DIR), len(online_cpus), kb)
        return {0: NodeFacts(online_cpus, kb * 1024, {0: LOCAL_DISTANCE})}, frozenset({0}), frozenset({0})

    listed_online = _read_list(reader, f"{_NODE_DIR}/online", "nodelist")
    online = listed_online if listed_online is not None else frozenset(dirs)
    possible = _read_list(reader, f"{_NODE_DIR}/possible", "nodelist")
    possible = (possible if possible is not None else online) | online | frozenset(dirs)

    cpus_of: dict[int, frozenset[int] | None] = {}
    for nid in dirs:
        base = f"{_NODE_DIR}/node{nid}"
        found = sets.first(base, "cpulist", "cpumap")
        if found is None:
            links = reader.numbered(base, "cpu")         # node*/cpuN -> ../../cpu/cpuN
            found = frozenset(links) if links else None
        cpus_of[nid] = found
    if any(v is None for v in cpus_of.values()) and online_cpus:
        # Oldest kernels: only each CPU's cpuN/nodeM link says where it is.
        claimed = frozenset().union(*(v for v in cpus_of.values() if v is not None))
        by_link: dict[int, set[int]] = {}
        for cpu in sorted(online_cpus - claimed):
            linked = reader.numbered(f"{_CPU_DIR}/cpu{cpu}", "node")
            if len(linked) == 1:
                by_link.setdefault(linked[0], set()).add(cpu)
        for nid, value in cpus_of.items():
            if value is None:
                cpus_of[nid] = frozenset(by_link.get(nid, ()))
        log.debug("node CPUs from cpuN/nodeM links: %s",
                  {n: format_cpulist(c) for n, c in sorted(by_link.items())})

    ids: list[int] = []
    final: dict[int, frozenset[int]] = {}
    for nid in dirs:
        mine = cpus_of[nid] or frozenset()
        if online_cpus:
            mine = mine & online_cpus
        final[nid] = mine
        if nid in online:
            ids.append(nid)
        elif mine:
            log.warning("node %d has online CPUs %s but %s/online (%s) does not list it; "
                        "keeping it", nid, format_cpulist(mine), _NODE_DIR, format_cpulist(online))
            ids.append(nid)
            online = online | {nid}
    absent = online - frozenset(dirs)
    if absent:
        log.debug("online nodes %s have no directory under %s", format_cpulist(absent),
                  reader.path(_NODE_DIR))
    # The kernel prints one distance per online node, in increasing node id order;
    # some firmwares' rows cover the node directories or the possible nodes instead.
    orders = (("online nodes", sorted(online)), ("node directories", sorted(dirs)),
              ("possible nodes", sorted(possible)))
    nodes: dict[int, NodeFacts] = {}
    for nid in ids:
        base = f"{_NODE_DIR}/node{nid}"
        meminfo = reader.read(f"{base}/meminfo")
        kb = 0 if meminfo is None else _parse_memtotal_kb(reader, f"{base}/meminfo", meminfo)
        distances = _read_distances(reader, f"{base}/distance", orders, ids)
        nodes[nid] = NodeFacts(final[nid], kb * 1024, distances, _read_access(reader, base))
    return nodes, online, possible


def _read_access(reader: FsReader, base: str) -> tuple[dict[str, int | None], frozenset[int]] | None:
    """The HMAT figures of one node (``access0/initiators``), None when the firmware gave none."""
    rel = f"{base}/access0/initiators"
    if not reader.isdir(rel):
        return None
    values = {name: _read_int(reader, f"{rel}/{name}")
              for name in ("read_bandwidth", "write_bandwidth", "read_latency", "write_latency")}
    for name, value in values.items():
        if value is not None and value < 0:
            raise malformed(reader, f"{rel}/{name}", str(value), "a negative figure")
    return values, frozenset(reader.numbered(rel, "node"))


def read_weights(reader: FsReader) -> tuple[dict[int, int], bool | None, str | None] | None:
    """The weighted-interleave weights under ``reader``'s root (:attr:`Facts.weights
    <numabind._facts.Facts.weights>`), or None when there are none (before Linux 6.9, or a dump without them).
    A weight file that does not hold a number from 1 to 255 is an error."""
    rel = WEIGHTS_DIR
    if not reader.isdir(rel):
        return None
    weights: dict[int, int] = {}
    for nid in reader.numbered(rel, "node"):
        value = _read_int(reader, f"{rel}/node{nid}")
        if value is None:
            continue                # unreadable (a file being removed with its node)
        if not 1 <= value <= 255:
            raise malformed(reader, f"{rel}/node{nid}", str(value), "a weight outside 1-255")
        weights[nid] = value
    auto = name = None
    for candidate in WEIGHTS_AUTO_NAMES:
        text = reader.read_strip(f"{rel}/{candidate}")
        if text is not None:
            if text not in ("true", "false", "1", "0", "Y", "N"):
                raise malformed(reader, f"{rel}/{candidate}", text, "expected true or false")
            auto, name = text in ("true", "1", "Y"), candidate
            break
    return weights, auto, name


_NO_OWNERS: Mapping[int, frozenset[int]] = {}


_CORE_FILES = ("topology/thread_siblings_list", "topology/core_id")
#: What a core whose cluster is not known yet reads (one CPU per cluster; the id of a cluster larger than its
#: core is read alone).
_CLUSTER_FILES = (*_CORE_FILES, "topology/cluster_cpus_list")
_CACHE_FILES = ("shared_cpu_list", "size")
#: The same with the core's ``cpu_capacity`` (read where the kernel may write it: not on x86).
_CORE_CAPACITY_FILES = (*_CORE_FILES, "cpu_capacity")
_CLUSTER_CAPACITY_FILES = (*_CLUSTER_FILES, "cpu_capacity")


def _read_cpu_details(
    reader: FsReader, sets: _Sets, online_cpus: frozenset[int], *, clusters: bool = True, capacities: bool = True,
) -> tuple[dict[int, tuple[int, int, frozenset[int]]], dict[int, tuple[int, frozenset[int]]], dict[int, int],
           dict[tuple[int, str, frozenset[int]], int | None]]:
    """Each CPU's (package, core, threads), cluster and capacity, and the distinct caches, reading each instance once.

    Sibling sets, packages, clusters and the CPUs sharing a cache are read through one member each; ``level`` and
    ``type`` of ``indexK`` once per package and index list, again for an instance that does not fit what was read
    (so a package mixing kinds of cores is read as it is). Clusters and capacities stop once a CPU has none."""
    known: dict[int, tuple[int, int, frozenset[int]]] = {}
    package_of: dict[int, int] = {}
    covered: dict[int, set[int]] = {}
    indexes_of: dict[int, list[int]] = {}
    layouts: dict[tuple[int, tuple[int, ...]], dict[int, tuple[int, str, bool]]] = {}
    instance_of: dict[tuple[int, str], dict[int, frozenset[int]]] = {}
    caches: dict[tuple[int, str, frozenset[int]], int | None] = {}
    cluster_of: dict[int, tuple[int, frozenset[int]]] = {}
    # clusters: False (the files are not read) on x86 and once a CPU has none (before Linux 5.16)
    capacity_of: dict[int, int] = {}

    for cid in sorted(online_cpus):
        base = f"{_CPU_DIR}/cpu{cid}"
        info = known.get(cid)
        indexes = None
        if info is None:
            # A new core: its cache indexes are listed, and the files below (the topology, each index not
            # yet covered) read, in one call of the compiled core; each is still read where it was.
            skip = 0                          # the indexes whose instance holding this CPU was read already
            for k, seen in covered.items():
                if cid in seen and k < 64:
                    skip |= 1 << k
            new_cluster = clusters and cid not in cluster_of
            files: tuple[str, ...]
            if capacities:
                files = _CLUSTER_CAPACITY_FILES if new_cluster else _CORE_CAPACITY_FILES
            else:
                files = _CLUSTER_FILES if new_cluster else _CORE_FILES
            indexes = reader.prefetch_numbered(base, files, "cache", "index", _CACHE_FILES, skip)
            topo = f"{base}/topology"
            siblings_text = reader.read(f"{topo}/thread_siblings_list")
            siblings = None if siblings_text is None else sets.list_text(f"{topo}/thread_siblings_list",
                                                                         siblings_text)
            if siblings is None:
                siblings = sets.first(topo, "thread_siblings", "core_cpus_list", "core_cpus")
            siblings = frozenset({cid}) if siblings is None else (siblings & online_cpus) | {cid}
            core = _read_int(reader, f"{topo}/core_id")
            if capacities:
                capacity = _read_int(reader, f"{base}/cpu_capacity")
                if capacity is None:
                    capacities = False
                else:
                    for sib in siblings:
                        capacity_of.setdefault(sib, capacity)
            if new_cluster:
                # A cluster that is the core itself (a PPTT without a cluster level) is known from its text
                # alone; the id of a larger one is read (not with the core's files: one more file per core).
                text = reader.read(f"{topo}/cluster_cpus_list")
                in_cluster: frozenset[int] | None
                if text is not None and text == siblings_text:
                    in_cluster = siblings
                elif text is not None:
                    in_cluster = sets.list_text(f"{topo}/cluster_cpus_list", text)
                else:
                    in_cluster = sets.mask_file(f"{topo}/cluster_cpus")
                if in_cluster is None:
                    clusters = False
                else:
                    in_cluster = (in_cluster & online_cpus) | siblings
                    number = -1 if in_cluster == siblings else _read_int(reader, f"{topo}/cluster_id")
                    cluster = (-1 if number is None else number, in_cluster)
                    for cpu in in_cluster:
                        cluster_of.setdefault(cpu, cluster)
            package = package_of.get(cid)
            if package is None:
                members = sets.first(topo, "core_siblings_list", "core_siblings",
                                     "package_cpus_list", "package_cpus")
                pid = _read_int(reader, f"{topo}/physical_package_id")
                package = -1 if pid is None else pid
                for cpu in (members or frozenset()) & online_cpus:
                    package_of.setdefault(cpu, package)
            info = (package, -1 if core is None else core, siblings)
            for sib in siblings:
                known.setdefault(sib, info)

        listed = None
        for sib in info[2]:
            listed = indexes_of.get(sib)
            if listed is not None:
                break
        if listed is not None:
            for k in listed:
                if cid not in covered[k]:
                    break
            else:
                continue                      # a sibling's indexes cover this CPU: nothing to list
        if indexes is None:
            indexes = reader.numbered(f"{base}/cache", "index")
        indexes_of[cid] = indexes
        layout = layouts.setdefault((info[0], tuple(indexes)), {})
        for index in indexes:
            found = covered.get(index)
            if found is None:
                seen = covered[index] = set()
            elif cid in found:
                continue
            else:
                seen = found
            idir = f"{base}/cache/index{index}"
            shared = sets.list_file(f"{idir}/shared_cpu_list")
            if shared is None:
                shared = sets.mask_file(f"{idir}/shared_cpu_map")
            if shared is None:
                shared = frozenset({cid})
            elif not shared:
                shared = info[2]              # ia64 writes empty maps: the core's threads
            shared = shared | {cid}
            seen.update(shared)
            members = shared & online_cpus
            private = members == info[2]
            kind = layout.get(index)
            if kind is not None and kind[2] == private:
                level, ctype = kind[0], kind[1]
                others = instance_of.get((level, ctype), _NO_OWNERS)
                for cpu in members:
                    other = others.get(cpu)
                    if other is not None and other is not members and other != members:
                        kind = None           # does not fit: read this instance's own files
                        break
            if kind is None or kind[2] != private:
                level_read = _read_int(reader, f"{idir}/level")
                type_read = reader.read_strip(f"{idir}/type")
                if level_read is None or type_read is None:
                    continue
                level, ctype = level_read, type_read
                layout.setdefault(index, (level, ctype, private))
            if members:
                caches.setdefault((level, ctype, members), sets.size_file(f"{idir}/size"))
                owners = instance_of.setdefault((level, ctype), {})
                for cpu in members:
                    owners.setdefault(cpu, members)
    return known, cluster_of, capacity_of, caches


def _read_allowed(reader: FsReader, online_cpus: frozenset[int], nodes: Mapping[int, NodeFacts]) -> Allowed:
    """What the process under the root may use (:func:`numabind._cgroup.read_allowed`): the cpuset, with the
    affinity beside it (on the live system this process's ``sched_getaffinity``)."""
    affinity = frozenset(os.sched_getaffinity(0)) if reader.is_live else None
    memory = frozenset(n for n, node in nodes.items() if node.memory_bytes > 0)
    return read_allowed(reader, online_cpus, frozenset(nodes), memory, affinity)


_MODEL_KEYS = ("model name", "Processor", "cpu model", "cpu")

#: arm64 cores by ``/proc/cpuinfo``'s (``CPU implementer``, ``CPU part``): the one table of them. One part
#: is the core of several chips, named in brackets.
ARM_CPU_PARTS: Mapping[tuple[int, int], str] = {
    (0x41, 0xD0C): "ARM Neoverse N1 (AWS Graviton2, Ampere Altra)",
    (0x41, 0xD40): "ARM Neoverse V1 (AWS Graviton3)",
    (0x41, 0xD49): "ARM Neoverse N2",
    (0x41, 0xD4F): "ARM Neoverse V2 (NVIDIA Grace, AWS Graviton4)",
    (0x41, 0xD84): "ARM Neoverse V3",
    (0x48, 0xD01): "HiSilicon Kunpeng 920",
    (0xC0, 0xAC3): "Ampere AmpereOne (Ampere-1)",
    (0xC0, 0xAC4): "Ampere AmpereOne (Ampere-1a)",
}


def arm_cpu_name(implementer: int, part: int) -> str:
    """The name of an arm64 core from its cpuinfo ids (:data:`ARM_CPU_PARTS`); a part not in the table is
    ``ARM implementer 0x41 part 0xd0b``."""
    return ARM_CPU_PARTS.get((implementer, part)) or f"ARM implementer 0x{implementer:02x} part 0x{part:03x}"


def _cpuinfo_hex(text: str | None) -> int | None:
    """A cpuinfo id such as ``0x41``; None when absent or not one."""
    if not text or not text.startswith(("0x", "0X")):
        return None
    digits = text[2:]
    if not digits or len(digits) > 8 or not all(c in "0123456789abcdefABCDEF" for c in digits):
        return None
    return int(digits, 16)


def _cpuinfo(reader: FsReader) -> dict[str, str] | None:
    """The first CPU's block of ``proc/cpuinfo`` as key -> value; None without the file."""
    text = reader.read("proc/cpuinfo", limit=8192)  # the first CPU's block
    return None if text is None else key_values(text, first_block=True)


def _is_x86(cpuinfo: Mapping[str, str] | None) -> bool:
    return cpuinfo is not None and "vendor_id" in cpuinfo and "cpu family" in cpuinfo


def _model_name(reader: FsReader, found: Mapping[str, str] | None) -> str | None:
    """The first CPU's model from its cpuinfo block ``found``: ``model name`` (x86, ia64, newer 32-bit ARM), else
    ``Processor`` (old ARM), ``cpu model`` (MIPS) or ``cpu`` (POWER, SPARC); arm64 kernels print none of them, so there
    the core is named from ``CPU implementer`` and ``CPU part`` (:func:`arm_cpu_name`)."""
    if found is None:
        return None
    named = next((found[k] for k in _MODEL_KEYS if found.get(k)), None)
    if named is not None:
        return named
    implementer = _cpuinfo_hex(found.get("CPU implementer"))
    part = _cpuinfo_hex(found.get("CPU part"))
    if implementer is None or part is None:
        if "CPU implementer" in found or "CPU part" in found:
            log.warning("proc/cpuinfo under %s: CPU implementer %r / CPU part %r are not hex ids; the CPU "
                        "model is unknown", reader.origin, found.get("CPU implementer"), found.get("CPU part"))
        return None
    return arm_cpu_name(implementer, part)

