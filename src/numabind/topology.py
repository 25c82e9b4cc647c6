"""Topology value objects and discovery (reads files under a root only).

:func:`discover` reads the kernel's view of the machine through one
:class:`~numabind._fs.FsReader`, so a dump of ``sys/`` and ``proc/`` in a
directory (or an ``hwloc-gather-topology`` tarball) is discovered exactly
like the live system. It reads what every Linux kernel since 2.6 writes, the
way hwloc does:

* NUMA nodes: ``node/online`` (else the ``nodeN`` directories) and
  ``node/possible``. A node's CPUs come from ``cpulist``, else the hex mask
  ``cpumap``, else the node directory's ``cpuN`` links, else each CPU's own
  ``cpuN/nodeM`` link; only online CPUs are kept (a node whose CPUs are partly
  offline keeps the online ones). Memory is ``meminfo``'s MemTotal. A
  ``distance`` row is mapped onto the online nodes when it has as many values,
  else onto the node directories, else onto the possible nodes (firmwares that
  keep offline nodes in the SLIT). A kernel without ``node/``
  (``CONFIG_NUMA=n``) gives one node 0 holding every online CPU and
  ``proc/meminfo``'s MemTotal.
* CPUs: ``cpu/online`` (without it, every ``cpuN`` whose ``online`` file is
  not ``0``: a missing or empty file means online) and ``cpu/possible``;
  per core ``thread_siblings_list``, else ``thread_siblings`` (mask), else
  ``core_cpus(_list)``, plus ``core_id`` and ``physical_package_id``; per
  cache instance ``shared_cpu_list``, else ``shared_cpu_map`` (an empty map,
  as ia64 writes, means the core's threads), ``level``, ``type`` and ``size``.
* What the process (or the dumped one) may use, :attr:`Topology.allowed`, read by
  :func:`numabind._cgroup.read_allowed` (as the live process reads it): the
  online CPUs of its cpuset (cgroup v2, cgroup v1 or the legacy cpuset
  filesystem, wherever ``proc/mounts`` says they are), ``Mems_allowed`` and the
  cpuset's mems; the affinity it inherited (``sched_getaffinity`` live, a dump's
  ``Cpus_allowed``) beside it as :attr:`Topology.affinity`, never a limit.
  Memory nodes without CPUs (CXL, HBM, GPU memory) stay in the allowed nodes.
* Per cluster (Linux 5.16+) ``cluster_cpus_list``, else ``cluster_cpus`` (mask),
  read for one CPU of each cluster, and ``cluster_id`` where the cluster holds
  more than one core; not on x86 (``proc/cpuinfo`` with ``vendor_id`` and
  ``cpu family``), whose kernels make the cluster the CPUs of one L2 cache, which
  the caches already hold.
* ``proc/cpuinfo``'s model name (``model name``, or ``cpu``/``Processor``/
  ``cpu model`` on POWER, old ARM and MIPS; arm64 has none: there the core is
  named from ``CPU implementer`` and ``CPU part``) and
  ``cpu0/acpi_cppc/highest_perf``.
* Memory performance from the firmware's HMAT table, where there is one (CXL and
  other memory tiers): ``nodeN/access0/initiators/{read,write}_{bandwidth,latency}``
  (MB/s, ns) and the initiator nodes linked there, as :attr:`Node.access`; and the
  system-wide weights of weighted interleave (Linux 6.9+),
  ``sys/kernel/mm/mempolicy/weighted_interleave/nodeN`` and, from 6.16, its
  ``auto`` switch, as :attr:`Topology.interleave_weights`.

Where hwloc and the kernel disagree numabind follows what the kernel
enforces: for cgroup v1 it reads ``cpuset.effective_cpus`` (hwloc reads
``cpuset.cpus``); for cgroup v2 a cgroup without the cpuset controller is
limited by its nearest ancestor's ``cpuset.cpus.effective`` (hwloc reads only
the process's own cgroup); the affinity is no limit (hwloc's "allowed" set on the
live system is the cpuset too); distance rows over the possible nodes are
mapped by node id (hwloc takes the first values); memory nodes of NVIDIA GPUs
are kept (hwloc drops them unless ``HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES=1``).

A file that is missing is not an error (most of them are optional on some
kernel); a file that is present but cannot be parsed raises
:class:`~numabind.errors.NumabindError` naming the file and its text. A root
that holds no sysfs (no ``sys/devices/system/cpu`` nor ``.../node``) is an
error, never an empty machine.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)

from ._base import Value, getLogger
from ._cgroup import read_allowed
from ._fs import WEIGHTS_AUTO_NAMES, WEIGHTS_DIR, FsReader, ascii_int, key_values, malformed
from ._util import FrozenMap
from .cpulist import format_cpulist, parse_cpulist, parse_mask
from .devices import Gpu, discover_gpus
from .errors import NumabindError, PlanError
from .plan import Allowed

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable, Mapping
    from typing import Any, TypeVar

    from .iodevices import Nic

    _T = TypeVar("_T", bound=Value)

__all__ = ["ARM_CPU_PARTS", "Cache", "Cpu", "InterleaveWeights", "MemoryAccess", "Node", "Topology",
           "arm_cpu_name", "discover", "discover_from", "read_interleave_weights"]

log = getLogger(__name__)   # logging.getLogger(__name__), without importing logging until a record can be seen

_NODE_DIR = "sys/devices/system/node"
_CPU_DIR = "sys/devices/system/cpu"

#: SLIT distance of a node to itself (the kernel's LOCAL_DISTANCE).
LOCAL_DISTANCE = 10

_set = object.__setattr__          # sets a field of a frozen value (Value.__setattr__ refuses)
_NO_DISTANCES: FrozenMap[int, int] = FrozenMap()   # Node's default distances (immutable: one for all)


class Cpu(Value):
    """One online logical CPU.

    ``cluster_cpus`` is the kernel's ``cluster_cpus_list`` (Linux 5.16+: the cores of a cluster, as the
    firmware's PPTT describes them on arm64), empty where the kernel writes none and on x86, where it is
    not read (x86 kernels make it the CPUs of the core's L2, which :attr:`Topology.caches` holds).
    ``cluster`` is the ``cluster_id`` of a cluster larger than the core, -1 where the cluster is the core
    itself (its id is not read) or unknown. ``kind`` is ``"performance"`` or ``"efficiency"`` on a hybrid
    CPU (see :attr:`Topology.performance_cpus`), None elsewhere; ``capacity`` the kernel's ``cpu_capacity``
    (arm64, RISC-V: 1024 for the fastest core), None where the kernel writes none (x86). Like a cache's size
    they do not take part in equality, so a Cpu written with the first five fields equals the discovered one.
    """

    __slots__ = ("id", "node", "package", "core", "siblings", "cluster", "cluster_cpus", "capacity", "kind")
    _compare = ("id", "node", "package", "core", "siblings")

    def __init__(self, id: int, node: int | None, package: int, core: int,
                 siblings: frozenset[int], cluster: int = -1, cluster_cpus: frozenset[int] = frozenset(),
                 capacity: int | None = None, kind: str | None = None) -> None:
        _set(self, "id", id)
        _set(self, "node", node)
        _set(self, "package", package)
        _set(self, "core", core)
        _set(self, "siblings", siblings)
        _set(self, "cluster", cluster)
        _set(self, "cluster_cpus", cluster_cpus)
        _set(self, "capacity", capacity)
        _set(self, "kind", kind)

    id: int
    node: int | None                 # NUMA node holding this CPU (None if no node lists it)
    package: int                     # physical_package_id, -1 when unknown
    core: int                        # core_id, -1 when unknown
    siblings: frozenset[int]         # thread_siblings_list (contains id itself)
    cluster: int                     # cluster_id of a cluster larger than the core, else -1 (not compared)
    cluster_cpus: frozenset[int]     # cluster_cpus_list (online; not compared)
    capacity: int | None             # cpu_capacity (not on x86), None when absent (not compared)
    kind: str | None                 # "performance" | "efficiency" | None (not hybrid; not compared)


class Cache(Value):
    """One cache instance shared by a group of CPUs.

    ``size_bytes`` is the instance's ``size`` file (None when the kernel does not
    write one); it does not take part in equality.
    """

    __slots__ = ("level", "type", "cpus", "size_bytes")
    _compare = ("level", "type", "cpus")

    def __init__(self, level: int, type: str, cpus: frozenset[int],
                 size_bytes: int | None = None) -> None:
        _set(self, "level", level)
        _set(self, "type", type)
        _set(self, "cpus", cpus)
        _set(self, "size_bytes", size_bytes)

    level: int
    type: str                        # "Unified" | "Data" | "Instruction"
    cpus: frozenset[int]             # shared_cpu_list
    size_bytes: int | None           # size (not compared)

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "type": self.type, "cpus": format_cpulist(self.cpus),
                "size_bytes": self.size_bytes}


class MemoryAccess(Value):
    """How fast a node's memory is from its best initiators, as the firmware's HMAT table says
    (``nodeN/access0/initiators``): bandwidths in MB/s, latencies in ns (None: not given)."""

    __slots__ = ("read_bandwidth", "write_bandwidth", "read_latency", "write_latency", "initiators")

    def __init__(self, read_bandwidth: int | None = None, write_bandwidth: int | None = None,
                 read_latency: int | None = None, write_latency: int | None = None,
                 initiators: frozenset[int] = frozenset()) -> None:
        _set(self, "read_bandwidth", read_bandwidth)
        _set(self, "write_bandwidth", write_bandwidth)
        _set(self, "read_latency", read_latency)
        _set(self, "write_latency", write_latency)
        _set(self, "initiators", initiators)

    read_bandwidth: int | None
    write_bandwidth: int | None
    read_latency: int | None
    write_latency: int | None
    initiators: frozenset[int]       # the nodes (with CPUs) those figures are measured from

    def to_dict(self) -> dict[str, Any]:
        return {"read_bandwidth": self.read_bandwidth, "write_bandwidth": self.write_bandwidth,
                "read_latency": self.read_latency, "write_latency": self.write_latency,
                "initiators": format_cpulist(self.initiators)}


class InterleaveWeights(Value):
    """The system-wide weights of weighted interleave (``sys/kernel/mm/mempolicy/weighted_interleave``).

    ``weights`` maps each node with a weight file to its weight (1-255); ``auto`` is the kernel's
    auto mode (Linux 6.16+: weights derived from the HMAT bandwidths), None when the kernel has no
    such switch; ``auto_name`` the switch's file name.
    """

    __slots__ = ("weights", "auto", "auto_name")

    def __init__(self, weights: FrozenMap[int, int], auto: bool | None = None, auto_name: str | None = None) -> None:
        _set(self, "weights", weights)
        _set(self, "auto", auto)
        _set(self, "auto_name", auto_name)

    weights: FrozenMap[int, int]
    auto: bool | None
    auto_name: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"weights": {str(n): w for n, w in self.weights.items()}, "auto": self.auto}


class Node(Value):
    """One NUMA node as the kernel lists it (memory-only and CPU-only too).

    ``access`` holds the firmware's memory performance figures for the node (HMAT), None on the
    many machines without them.
    """

    __slots__ = ("id", "cpus", "memory_bytes", "distances", "access")

    def __init__(self, id: int, cpus: frozenset[int], memory_bytes: int,
                 distances: FrozenMap[int, int] = _NO_DISTANCES, access: MemoryAccess | None = None) -> None:
        _set(self, "id", id)
        _set(self, "cpus", cpus)
        _set(self, "memory_bytes", memory_bytes)
        _set(self, "distances", distances)
        _set(self, "access", access)

    id: int
    cpus: frozenset[int]             # online CPUs of the node; empty for memory-only nodes
    memory_bytes: int                # MemTotal of the node; 0 for CPU-only nodes
    distances: FrozenMap[int, int]   # SLIT distance to each node (empty when the kernel gives none)
    access: MemoryAccess | None

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
            "access": None if self.access is None else self.access.to_dict(),
        }


class Topology(Value):
    """What discovery found under one root. Frozen, hashable, picklable."""

    __slots__ = ("root", "nodes", "cpus", "online_cpus", "possible_cpus", "allowed_cpus", "online_nodes",
                 "possible_nodes", "allowed_nodes", "caches", "model_name", "cppc_highest_perf", "gpus",
                 "allowed_source", "interleave_weights", "affinity", "kinds_source")

    def __init__(self, root: str, nodes: FrozenMap[int, Node], cpus: FrozenMap[int, Cpu], online_cpus: frozenset[int],
                 possible_cpus: frozenset[int], allowed_cpus: frozenset[int], online_nodes: frozenset[int],
                 possible_nodes: frozenset[int], allowed_nodes: frozenset[int], caches: tuple[Cache, ...] = (),
                 model_name: str | None = None, cppc_highest_perf: int | None = None, gpus: tuple[Gpu, ...] = (),
                 allowed_source: str = "", interleave_weights: InterleaveWeights | None = None,
                 affinity: frozenset[int] | None = None, kinds_source: str = "") -> None:
        _set(self, "root", root)
        _set(self, "nodes", nodes)
        _set(self, "cpus", cpus)
        _set(self, "online_cpus", online_cpus)
        _set(self, "possible_cpus", possible_cpus)
        _set(self, "allowed_cpus", allowed_cpus)
        _set(self, "online_nodes", online_nodes)
        _set(self, "possible_nodes", possible_nodes)
        _set(self, "allowed_nodes", allowed_nodes)
        _set(self, "caches", caches)
        _set(self, "model_name", model_name)
        _set(self, "cppc_highest_perf", cppc_highest_perf)
        _set(self, "gpus", gpus)
        _set(self, "allowed_source", allowed_source)
        _set(self, "interleave_weights", interleave_weights)
        _set(self, "affinity", affinity)
        _set(self, "kinds_source", kinds_source)

    root: str
    nodes: FrozenMap[int, Node]
    cpus: FrozenMap[int, Cpu]        # online CPUs
    online_cpus: frozenset[int]
    possible_cpus: frozenset[int]
    allowed_cpus: frozenset[int]     # the online CPUs in the process's (or the dump's) cpuset: the limit
    online_nodes: frozenset[int]
    possible_nodes: frozenset[int]
    allowed_nodes: frozenset[int]    # Mems_allowed / cpuset.mems
    caches: tuple[Cache, ...]        # distinct cache instances, sorted by (level, type, min cpu)
    model_name: str | None           # /proc/cpuinfo "model name" of the first CPU
    cppc_highest_perf: int | None    # cpu0/acpi_cppc/highest_perf (PCT gate)
    gpus: tuple[Gpu, ...]
    allowed_source: str              # where allowed_cpus/allowed_nodes were read from
    interleave_weights: InterleaveWeights | None   # None: no weighted interleave (before Linux 6.9)
    affinity: frozenset[int] | None  # the affinity inherited (live) or dumped (Cpus_allowed), beside
                                     # the limit, never one; None where unknown
    kinds_source: str                # where the core kinds came from ("" when the CPU is not hybrid)

    # -- queries -------------------------------------------------------------

    @property
    def nics(self) -> "tuple[Nic, ...]":
        """Network and RDMA devices on PCI functions, with their PCI places (:func:`numabind.iodevices.scan_nics`:
        read under ``root`` when asked, so discovery itself stays off the NIC scan)."""
        from .iodevices import scan_nics

        return tuple(scan_nics(self.root))

    @property
    def allowed(self) -> Allowed:
        """What the process may use, as planning and the live process read it (:class:`numabind.plan.Allowed`):
        ``allowed_cpus`` (the cpuset), ``allowed_nodes``, their source, and the inherited ``affinity`` beside."""
        # allowed_source joins both sources; proc/self/status ("status") limits the nodes only
        cpus_source = "+".join(p for p in self.allowed_source.split("+") if p and p != "status")
        return Allowed(online_cpus=self.online_cpus, allowed_cpus=self.allowed_cpus,
                       cpus_source=cpus_source or ("online" if self.allowed_source else "the cpuset"),
                       nodes=frozenset(self.nodes),
                       memory_nodes=self.nodes_with_memory, allowed_nodes=self.allowed_nodes,
                       nodes_source=self.allowed_source or "Mems_allowed", affinity=self.affinity)

    @property
    def nodes_with_memory(self) -> frozenset[int]:
        """Ids of the nodes whose MemTotal is above 0."""
        return frozenset(n.id for n in self.nodes.values() if n.memory_bytes > 0)

    @property
    def nodes_with_cpus(self) -> frozenset[int]:
        """Ids of the nodes with at least one online CPU."""
        return frozenset(n.id for n in self.nodes.values() if n.cpus)

    @property
    def performance_cpus(self) -> frozenset[int]:
        """The online CPUs of the performance cores of a hybrid CPU (Intel's P-cores, Arm's big cores); empty
        when the cores are all of one kind (or the kernel does not say).

        Read from the hybrid PMUs' lists ``sys/devices/cpu_core/cpus`` (performance) and
        ``sys/devices/cpu_atom/cpus`` (efficiency) on x86, else from each CPU's ``cpu_capacity``: the CPUs of
        the highest capacity are the performance ones, all others efficiency (a big/middle/little CPU has
        one performance kind). :attr:`kinds_source` says which."""
        return frozenset(c.id for c in self.cpus.values() if c.kind == "performance")

    @property
    def efficiency_cpus(self) -> frozenset[int]:
        """The online CPUs of the efficiency cores of a hybrid CPU (Intel's E-cores, Arm's LITTLE cores);
        empty when the cores are all of one kind."""
        return frozenset(c.id for c in self.cpus.values() if c.kind == "efficiency")

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

    def cluster_groups(self) -> tuple[frozenset[int], ...]:
        """CPU sets of the clusters that hold more than one core (each CPU's ``cluster_cpus``), ordered
        by lowest CPU.

        () where the kernel describes no cluster larger than a core: before Linux 5.16, on arm64
        firmware without a cluster level, and on x86, where the files are not read (a cluster is the
        CPUs of one L2 there: see :meth:`llc_groups` and :attr:`caches`).
        """
        groups = set()
        for cpu in self.cpus.values():
            cluster = cpu.cluster_cpus
            if cluster and not cluster <= cpu.siblings:
                groups.add(cluster)
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
            "affinity": None if self.affinity is None else format_cpulist(self.affinity),
            "cpus": {
                "online": len(self.online_cpus),
                "allowed": len(self.allowed_cpus),
                "cores": len(cores),
                "threads_per_core": max((len(c.siblings) for c in self.cpus.values()), default=0),
                "packages": {str(pkg): format_cpulist(cpus) for pkg, cpus in packages.items()},
                **({"kinds": {"performance": format_cpulist(self.performance_cpus),
                              "efficiency": format_cpulist(self.efficiency_cpus),
                              "source": self.kinds_source}} if self.kinds_source else {}),
            },
            "nodes": [node.to_dict() for node in self.nodes.values()],
            "caches": [cache.to_dict() for cache in self.caches],
            "llc_groups": [format_cpulist(g) for g in self.llc_groups()],
            "cluster_groups": [format_cpulist(g) for g in self.cluster_groups()],
            "gpus": [g.to_dict() for g in self.gpus],
            "interleave_weights": None if self.interleave_weights is None else self.interleave_weights.to_dict(),
        }


# -- parsing helpers (every error names the file) -----------------------------


def _malformed(reader: FsReader, rel: str, text: str, why: str) -> NumabindError:
    return malformed(reader, rel, text, why)   # a short excerpt of the file, printable


def _parse_list_text(reader: FsReader, rel: str, text: str, what: str) -> frozenset[int]:
    try:
        return parse_cpulist(text, what=what)
    except PlanError as exc:
        raise _malformed(reader, rel, text, str(exc)) from None


def _parse_mask_text(reader: FsReader, rel: str, text: str, what: str) -> frozenset[int]:
    try:
        return parse_mask(text, what=what)
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
    value = ascii_int(text, signed=True)
    if value is None:
        raise _malformed(reader, rel, text, "expected one integer")
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
            found = self._lists[text] = _parse_list_text(self.reader, rel, text, what)
        return found

    def mask_file(self, rel: str, what: str = "mask") -> frozenset[int] | None:
        text = self.reader.read(rel)
        if text is None:
            return None
        found = self._masks.get(text)
        if found is None:
            found = self._masks[text] = _parse_mask_text(self.reader, rel, text, what)
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
            raise _malformed(reader, rel, line, "MemTotal is not '<number> kB'")
        return kb
    raise _malformed(reader, rel, text, "no MemTotal line")


def _require_sysfs(reader: FsReader) -> None:
    if reader.isdir(_CPU_DIR) or reader.isdir(_NODE_DIR):
        return
    raise NumabindError(
        f"discovery root {reader.origin!r} holds no sysfs: neither {_CPU_DIR} nor {_NODE_DIR} "
        f"is a directory under {reader.root!r}. Give the directory that holds sys/ and proc/ "
        f"(or an hwloc-gather-topology .tar.bz2), or / for this machine")


# -- discovery steps -----------------------------------------------------------


def _discover_cpus(reader: FsReader) -> tuple[frozenset[int], frozenset[int]]:
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
                raise _malformed(reader, rel, text, "expected 0 or 1")
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
                    keep: Iterable[int]) -> FrozenMap[int, int]:
    text = reader.read(rel)
    if text is None or not text.strip():
        return FrozenMap()
    row = [ascii_int(x, max_digits=9) for x in text.split()]
    if any(v is None for v in row):
        raise _malformed(reader, rel, text, "expected integers separated by spaces")
    tried = []
    for name, order in orders:
        if len(row) == len(order):
            wanted = set(keep)
            return FrozenMap({n: d for n, d in zip(order, row) if n in wanted and d is not None})
        tried.append(f"{len(order)} {name} ({format_cpulist(order)})")
    raise _malformed(reader, rel, text,
                     f"{len(row)} distances, but there are " + ", ".join(dict.fromkeys(tried)))


def _discover_nodes(
    reader: FsReader, sets: _Sets, online_cpus: frozenset[int]
) -> tuple[dict[int, Node], frozenset[int], frozenset[int]]:
    """(nodes, online node ids, possible node ids)."""
    dirs = reader.numbered(_NODE_DIR, "node") if reader.isdir(_NODE_DIR) else []
    if not dirs:
        meminfo = reader.read("proc/meminfo")
        kb = 0 if meminfo is None else _parse_memtotal_kb(reader, "proc/meminfo", meminfo)
        log.debug("no NUMA nodes under %s: one node 0 with %d CPUs, %d kB",
                  reader.path(_NODE_DIR), len(online_cpus), kb)
        node = Node(0, online_cpus, kb * 1024, FrozenMap({0: LOCAL_DISTANCE}))
        return {0: node}, frozenset({0}), frozenset({0})

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
    nodes: dict[int, Node] = {}
    for nid in ids:
        base = f"{_NODE_DIR}/node{nid}"
        meminfo = reader.read(f"{base}/meminfo")
        kb = 0 if meminfo is None else _parse_memtotal_kb(reader, f"{base}/meminfo", meminfo)
        distances = _read_distances(reader, f"{base}/distance", orders, ids)
        nodes[nid] = Node(nid, final[nid], kb * 1024, distances, _read_access(reader, base))
    return nodes, online, possible


def _read_access(reader: FsReader, base: str) -> MemoryAccess | None:
    """The HMAT figures of one node (``access0/initiators``), None when the firmware gave none."""
    rel = f"{base}/access0/initiators"
    if not reader.isdir(rel):
        return None
    values = {name: _read_int(reader, f"{rel}/{name}")
              for name in ("read_bandwidth", "write_bandwidth", "read_latency", "write_latency")}
    for name, value in values.items():
        if value is not None and value < 0:
            raise _malformed(reader, f"{rel}/{name}", str(value), "a negative figure")
    return MemoryAccess(initiators=frozenset(reader.numbered(rel, "node")), **values)


def read_interleave_weights(reader: FsReader) -> InterleaveWeights | None:
    """The weighted-interleave weights under ``reader``'s root, or None when there are none (before Linux
    6.9, or a dump without them). A weight file that does not hold a number from 1 to 255 is an error."""
    rel = WEIGHTS_DIR
    if not reader.isdir(rel):
        return None
    weights: dict[int, int] = {}
    for nid in reader.numbered(rel, "node"):
        value = _read_int(reader, f"{rel}/node{nid}")
        if value is None:
            continue                # unreadable (a file being removed with its node)
        if not 1 <= value <= 255:
            raise _malformed(reader, f"{rel}/node{nid}", str(value), "a weight outside 1-255")
        weights[nid] = value
    auto = name = None
    for candidate in WEIGHTS_AUTO_NAMES:
        text = reader.read_strip(f"{rel}/{candidate}")
        if text is not None:
            if text not in ("true", "false", "1", "0", "Y", "N"):
                raise _malformed(reader, f"{rel}/{candidate}", text, "expected true or false")
            auto, name = text in ("true", "1", "Y"), candidate
            break
    return InterleaveWeights(FrozenMap(weights), auto, name)


_NO_OWNERS: Mapping[int, frozenset[int]] = {}
_new = object.__new__
#: Per value class, each slot's setter (the slot's own descriptor): :func:`_made` sets a field with one call.
_SETTERS: dict[type, dict[str, Any]] = {}


def _made(cls: type[_T], fields: dict[str, Any]) -> _T:
    """An instance of the frozen value class ``cls`` holding ``fields`` (every one of its fields), made without
    its ``__init__`` and its keyword arguments: each slot is set through its descriptor, one call a field.
    Discovery makes a Cpu per CPU and a Cache per cache instance, thousands on a large machine. Equal,
    hashable and picklable as if made by ``cls(**fields)``."""
    setters = _SETTERS.get(cls)
    if setters is None:
        setters = _SETTERS[cls] = {name: getattr(cls, name).__set__ for name in cls._fields()}
    obj = _new(cls)
    for name, value in fields.items():
        setters[name](obj, value)
    return obj


_CORE_FILES = ("topology/thread_siblings_list", "topology/core_id")
#: What a core whose cluster is not known yet reads (one CPU per cluster; the id of a cluster larger than its
#: core is read alone).
_CLUSTER_FILES = (*_CORE_FILES, "topology/cluster_cpus_list")
_CACHE_FILES = ("shared_cpu_list", "size")
#: The same with the core's ``cpu_capacity`` (read where the kernel may write it: not on x86).
_CORE_CAPACITY_FILES = (*_CORE_FILES, "cpu_capacity")
_CLUSTER_CAPACITY_FILES = (*_CLUSTER_FILES, "cpu_capacity")


def _discover_cpu_details(
    reader: FsReader, sets: _Sets, online_cpus: frozenset[int], node_of: Mapping[int, int], *,
    clusters: bool = True, capacities: bool = True,
) -> tuple[dict[int, Cpu], tuple[Cache, ...]]:
    """Per-CPU topology and the distinct caches, reading each instance once.

    Hyperthread siblings share package and core, so one CPU's topology files
    describe its whole sibling set; the CPUs of one package mask
    (``core_siblings``) share its ``physical_package_id``, read once per package.
    A cache at ``indexK`` of one CPU is the ``indexK`` cache of every CPU in its
    shared set (the kernel builds the sharing per index), so those CPUs'
    ``indexK`` directories are skipped; siblings of one core have the same cache
    indexes, so a CPU whose sibling's indexes all cover it is not even listed.
    With ``clusters``, the cluster files are read, like the package's, for one CPU
    of each cluster, and not at all once one CPU has none (kernels before 5.16).
    With ``capacities``, ``cpu_capacity`` is read once per core (its threads share it), and not at all once
    a core has none (the kernel writes it for every CPU or for none).

    ``level`` and ``type`` of ``indexK`` are read once per package and list of
    cache indexes: the kernel numbers a CPU's caches in a fixed order (CPUID
    leaf 4 on x86, level by level elsewhere). They are read again for any
    instance that does not fit what was read (private where the first was shared
    or the reverse, or overlapping another instance of that level and type
    without being it), so a package mixing kinds of cores is still read as it is.
    """
    cpus: dict[int, Cpu] = {}
    known: dict[int, tuple[int, int, frozenset[int]]] = {}
    package_of: dict[int, int] = {}
    covered: dict[int, set[int]] = {}
    indexes_of: dict[int, list[int]] = {}
    layouts: dict[tuple[int, tuple[int, ...]], dict[int, tuple[int, str, bool]]] = {}
    instance_of: dict[tuple[int, str], dict[int, frozenset[int]]] = {}
    caches: set[Cache] = set()
    cluster_of: dict[int, tuple[int, frozenset[int]]] = {}
    no_cluster: tuple[int, frozenset[int]] = (-1, frozenset())
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
        cluster = cluster_of.get(cid, no_cluster)
        cpus[cid] = _made(Cpu, {"id": cid, "node": node_of.get(cid), "package": info[0], "core": info[1],
                                "siblings": info[2], "cluster": cluster[0], "cluster_cpus": cluster[1],
                                "capacity": capacity_of.get(cid), "kind": None})

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
                caches.add(_made(Cache, {"level": level, "type": ctype, "cpus": members,
                                         "size_bytes": sets.size_file(f"{idir}/size")}))
                owners = instance_of.setdefault((level, ctype), {})
                for cpu in members:
                    owners.setdefault(cpu, members)
    ordered = tuple(sorted(caches, key=lambda c: (c.level, c.type, min(c.cpus), len(c.cpus))))
    return cpus, ordered


_PMU_DIR = "sys/devices"
PERFORMANCE, EFFICIENCY = "performance", "efficiency"


def _core_kinds(sets: _Sets, online_cpus: frozenset[int], cpus: dict[int, Cpu]) -> str:
    """Mark the kind of each CPU of a hybrid CPU in ``cpus`` (in place) and return where the kinds came from
    ("" when the cores are all of one kind, or the kernel does not say).

    The hybrid PMUs' lists first (Intel since Alder Lake: ``sys/devices/cpu_core/cpus`` are the performance
    cores, ``sys/devices/cpu_atom/cpus`` the efficiency cores; both must list online CPUs), else the
    capacities read per core (``cpu_capacity``: the highest is performance, every lower one efficiency)."""
    kind_of: dict[int, str] = {}
    source = ""
    p_cpus = sets.list_file(f"{_PMU_DIR}/cpu_core/cpus")
    e_cpus = None if p_cpus is None else sets.list_file(f"{_PMU_DIR}/cpu_atom/cpus")
    if p_cpus is not None and e_cpus is not None and p_cpus & online_cpus and e_cpus & online_cpus:
        kind_of.update((c, PERFORMANCE) for c in p_cpus & online_cpus)
        kind_of.update((c, EFFICIENCY) for c in e_cpus & online_cpus)
        source = "cpu_core/cpu_atom"
    else:
        capacity = {c: cpu.capacity for c, cpu in cpus.items() if cpu.capacity is not None}
        if capacity and len(set(capacity.values())) > 1:
            top = max(capacity.values())
            kind_of.update((c, PERFORMANCE if v == top else EFFICIENCY) for c, v in capacity.items())
            source = "cpu_capacity"
    for c, kind in kind_of.items():
        cpu = cpus.get(c)
        if cpu is not None:
            cpus[c] = cpu.replace(kind=kind)
    if source:
        log.debug("hybrid CPU (from %s): performance CPUs %s, efficiency CPUs %s", source,
                  format_cpulist(c for c, k in kind_of.items() if k == PERFORMANCE),
                  format_cpulist(c for c, k in kind_of.items() if k == EFFICIENCY))
    return source


def _discover_allowed(reader: FsReader, online_cpus: frozenset[int], nodes: Mapping[int, Node]) -> Allowed:
    """What the process under the root may use (:func:`numabind._cgroup.read_allowed`): the cpuset, with the
    affinity beside it (on the live system this process's ``sched_getaffinity``)."""
    affinity = frozenset(os.sched_getaffinity(0)) if reader.is_live else None
    memory = frozenset(n for n, node in nodes.items() if node.memory_bytes > 0)
    return read_allowed(reader, online_cpus, frozenset(nodes), memory, affinity)


def _joined_source(allowed: Allowed) -> str:
    """``Topology.allowed_source``: where the CPUs and the nodes came from, "+"-joined, each once."""
    parts: list[str] = []
    for source in (allowed.nodes_source, allowed.cpus_source):
        for part in source.split("+"):
            if part not in parts and part not in ("online", "every node"):
                parts.append(part)
    return "+".join(parts) or "online"


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
    """The first CPU's model from its cpuinfo block ``found``: ``model name`` (x86, ia64, newer 32-bit
    ARM), else ``Processor`` (old ARM), ``cpu model`` (MIPS) or ``cpu`` (POWER, SPARC); arm64 kernels
    print none of them, so there the core is named from ``CPU implementer`` and ``CPU part``
    (:func:`arm_cpu_name`)."""
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


# -- entry points --------------------------------------------------------------


def discover(root: str | os.PathLike[str] | None = None) -> Topology:
    """Discover the machine under ``root`` (else ``$NUMABIND_FSROOT``, else ``/``).

    ``root`` may be a directory holding ``sys/`` and ``proc/`` or an
    ``hwloc-gather-topology`` tarball. On the live system (root ``/``)
    ``allowed_cpus`` is this process's cpuset and ``affinity`` its real affinity,
    ``os.sched_getaffinity(0)``.
    A root that does not exist or holds no sysfs raises NumabindError.
    """
    return discover_from(FsReader(root))


def discover_from(reader: FsReader, env: Mapping[str, str] | None = None) -> Topology:
    """Discovery through an existing reader (tools that record or replay reads).

    ``env`` is passed to GPU discovery (``CUDA_VISIBLE_DEVICES`` & co.);
    it defaults to ``os.environ``. A replayed root's directories are resolved once each while it runs
    (:meth:`FsReader.hold_dirs <numabind._fs.FsReader.hold_dirs>`).
    """
    reader.hold_dirs()
    try:
        return _discover_from(reader, env)
    finally:
        reader.release_dirs()


def _discover_from(reader: FsReader, env: Mapping[str, str] | None) -> Topology:
    start = time.perf_counter()
    _require_sysfs(reader)
    sets = _Sets(reader)
    online_cpus, possible_cpus = _discover_cpus(reader)
    nodes, online_nodes, possible_nodes = _discover_nodes(reader, sets, online_cpus)
    if not online_cpus:
        # A dump without sys/devices/system/cpu: trust the nodes' cpulists.
        online_cpus = frozenset().union(*(n.cpus for n in nodes.values()))
        possible_cpus = possible_cpus | online_cpus
    if not online_cpus:
        raise NumabindError(
            f"no online CPU found under {reader.origin!r}: {_CPU_DIR}/online, the cpuN "
            f"directories and the nodes' CPU lists are all missing or empty")
    node_of = {cpu: node.id for node in nodes.values() for cpu in node.cpus}
    cpuinfo = _cpuinfo(reader)
    try:
        # x86 kernels make a core's cluster the CPUs of its L2, which the caches hold: the cluster files (one
        # more file per core there, some 9% of discovery at 512 CPUs) are read on other machines only.
        x86 = _is_x86(cpuinfo)
        cpus, caches = _discover_cpu_details(reader, sets, online_cpus, node_of, clusters=not x86,
                                             capacities=not x86)
    finally:
        reader.forget()
    kinds_source = _core_kinds(sets, online_cpus, cpus)
    allowed = _discover_allowed(reader, online_cpus, nodes)
    allowed_cpus, allowed_nodes, source = allowed.allowed_cpus, allowed.allowed_nodes, _joined_source(allowed)
    frozen_nodes = FrozenMap(nodes)
    gpus = tuple(discover_gpus(reader, frozen_nodes, env=env))
    topo = Topology(
        root=reader.origin,           # what was asked for: a directory or a dump tarball
        nodes=frozen_nodes,
        cpus=FrozenMap(cpus),
        online_cpus=online_cpus,
        possible_cpus=possible_cpus,
        allowed_cpus=allowed_cpus,
        online_nodes=online_nodes,
        possible_nodes=possible_nodes,
        allowed_nodes=allowed_nodes,
        caches=caches,
        model_name=_model_name(reader, cpuinfo),
        cppc_highest_perf=_read_int(reader, f"{_CPU_DIR}/cpu0/acpi_cppc/highest_perf"),
        gpus=gpus,
        allowed_source=source,
        interleave_weights=read_interleave_weights(reader),
        affinity=allowed.affinity,
        kinds_source=kinds_source,
    )
    log.debug(
        "discovered %s in %.1f ms: %d nodes (%s), %d online CPUs, allowed CPUs %s "
        "nodes %s from %s, %d caches, %d GPUs",
        reader.origin, (time.perf_counter() - start) * 1e3, len(nodes),
        format_cpulist(nodes), len(online_cpus), format_cpulist(allowed_cpus),
        format_cpulist(allowed_nodes), source, len(caches), len(gpus),
    )
    return topo
