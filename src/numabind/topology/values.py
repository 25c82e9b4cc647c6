"""The topology's values: what discovery found under one root (:class:`Topology`), its CPUs, caches, NUMA nodes,
their memory performance and the weights of weighted interleave. Frozen values (:class:`numabind._base.Value`, a
frozen dataclass without :mod:`dataclasses` at import): hashable, comparable, picklable."""

from __future__ import annotations

from .._base import Value, field
from .._util import FrozenMap
from ..cpulist import format_cpulist
from ..devices import Gpu
from ..plan import Allowed

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the looks' start)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

    from ..iodevices import Nic

__all__ = ["Cache", "Cpu", "InterleaveWeights", "MemoryAccess", "Node", "Topology"]

_NO_DISTANCES: FrozenMap[int, int] = FrozenMap()   # Node's default distances (immutable: one for all)


class Cpu(Value):
    """One online logical CPU.

    ``cluster_cpus`` is the kernel's ``cluster_cpus_list`` (empty where none is written, and on x86, where it is not
    read); ``cluster`` the ``cluster_id`` of a cluster larger than the core, else -1. ``kind`` is ``"performance"`` or
    ``"efficiency"`` on a hybrid CPU, else None; ``capacity`` the kernel's ``cpu_capacity`` (None on x86). These do
    not take part in equality, so a Cpu written with the first five fields equals the discovered one."""

    id: int
    node: int | None                 # NUMA node holding this CPU (None if no node lists it)
    package: int                     # physical_package_id, -1 when unknown
    core: int                        # core_id, -1 when unknown
    siblings: frozenset[int]         # thread_siblings_list (contains id itself)
    cluster: int = field(default=-1, compare=False)      # cluster_id of a cluster larger than the core, else -1
    cluster_cpus: frozenset[int] = field(default=frozenset(), compare=False)    # cluster_cpus_list (online)
    capacity: int | None = field(default=None, compare=False)     # cpu_capacity (not on x86), None when absent
    kind: str | None = field(default=None, compare=False)         # "performance" | "efficiency" | None


class Cache(Value):
    """One cache instance shared by a group of CPUs; ``size_bytes`` (None: no ``size`` file) is not in equality."""

    level: int
    type: str                        # "Unified" | "Data" | "Instruction"
    cpus: frozenset[int]             # shared_cpu_list
    size_bytes: int | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "type": self.type, "cpus": format_cpulist(self.cpus),
                "size_bytes": self.size_bytes}


class MemoryAccess(Value):
    """How fast a node's memory is from its best initiators, as the firmware's HMAT table says
    (``nodeN/access0/initiators``): bandwidths in MB/s, latencies in ns (None: not given)."""

    read_bandwidth: int | None = None
    write_bandwidth: int | None = None
    read_latency: int | None = None
    write_latency: int | None = None
    initiators: frozenset[int] = frozenset()       # the nodes (with CPUs) those figures are measured from

    def to_dict(self) -> dict[str, Any]:
        return {"read_bandwidth": self.read_bandwidth, "write_bandwidth": self.write_bandwidth,
                "read_latency": self.read_latency, "write_latency": self.write_latency,
                "initiators": format_cpulist(self.initiators)}


class InterleaveWeights(Value):
    """The system-wide weights of weighted interleave: ``weights`` node -> weight (1-255); ``auto`` the kernel's auto
    mode (Linux 6.16+), None without such a switch; ``auto_name`` the switch's file name."""

    weights: FrozenMap[int, int]
    auto: bool | None = None
    auto_name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"weights": {str(n): w for n, w in self.weights.items()}, "auto": self.auto}


class Node(Value):
    """One NUMA node as the kernel lists it (memory-only and CPU-only too); ``access``: its HMAT figures, or None."""

    id: int
    cpus: frozenset[int]             # online CPUs of the node; empty for memory-only nodes
    memory_bytes: int                # MemTotal of the node; 0 for CPU-only nodes
    distances: FrozenMap[int, int] = _NO_DISTANCES   # SLIT distance to each node (empty when the kernel gives none)
    access: MemoryAccess | None = None

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
    """What discovery found under one root. Frozen, hashable, picklable; ``replace(**changes)`` is a changed copy."""

    root: str
    nodes: FrozenMap[int, Node]
    cpus: FrozenMap[int, Cpu]        # online CPUs
    online_cpus: frozenset[int]
    possible_cpus: frozenset[int]
    allowed_cpus: frozenset[int]     # the online CPUs in the process's (or the dump's) cpuset: the limit
    online_nodes: frozenset[int]
    possible_nodes: frozenset[int]
    allowed_nodes: frozenset[int]    # Mems_allowed / cpuset.mems
    caches: tuple[Cache, ...] = ()   # distinct cache instances, sorted by (level, type, min cpu)
    model_name: str | None = None    # /proc/cpuinfo "model name" of the first CPU
    cppc_highest_perf: int | None = None   # cpu0/acpi_cppc/highest_perf (PCT gate)
    gpus: tuple[Gpu, ...] = ()
    allowed_source: str = ""         # where allowed_cpus/allowed_nodes were read from
    interleave_weights: InterleaveWeights | None = None   # None: no weighted interleave (before Linux 6.9)
    affinity: frozenset[int] | None = None   # the affinity inherited (live) or dumped (Cpus_allowed), beside
                                             # the limit, never one; None where unknown
    kinds_source: str = ""           # where the core kinds came from ("" when the CPU is not hybrid)

    # -- queries -------------------------------------------------------------

    @property
    def nics(self) -> tuple[Nic, ...]:
        """Network and RDMA devices on PCI functions, with their PCI places (:func:`numabind.iodevices.scan_nics`:
        read under ``root`` when asked, so discovery itself stays off the NIC scan)."""
        from ..iodevices import scan_nics   # read when asked: discovery itself stays off the NIC scan

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
        when the cores are all of one kind (or the kernel does not say). :attr:`kinds_source` says where the kinds
        were read (docs/discovery.rst)."""
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
        """Package id -> ids of the nodes with CPUs in that package (-1: unknown package; memory-only nodes: none)."""
        out: dict[int, set[int]] = {}
        for cpu in self.cpus.values():
            if cpu.node is not None:
                out.setdefault(cpu.package, set()).add(cpu.node)
        return {pkg: frozenset(nodes) for pkg, nodes in sorted(out.items())}

    def llc_groups(self) -> tuple[frozenset[int], ...]:
        """CPU sets of the distinct last-level (highest Unified or Data) caches, ordered by lowest CPU; () without
        cache information."""
        candidates = [c for c in self.caches if c.type in ("Unified", "Data")]
        if not candidates:
            return ()
        top = max(c.level for c in candidates)
        groups = {c.cpus for c in candidates if c.level == top}
        return tuple(sorted(groups, key=min))

    def cluster_groups(self) -> tuple[frozenset[int], ...]:
        """CPU sets of the clusters that hold more than one core (each CPU's ``cluster_cpus``), ordered by lowest CPU.

        () where the kernel describes none (before Linux 5.16, and on x86, where the files are not read)."""
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
