"""The description of a fake machine (:class:`FakeMachine`, :class:`Quirks`) and what it derives: online and
possible CPUs and nodes, cores and siblings, what the process is allowed. The files are laid out by
:mod:`tests.fake.writer` and the modules it calls."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from numabind.cpulist import format_cpulist

from . import writer
from .masks import CGROUP, GIB_KB, id_set

__all__ = ["Cpuset", "CpuSpec", "FakeMachine", "NodeSpec", "Quirks"]


@dataclass
class Quirks:
    """What real kernels and dump tools do that a tidy modern kernel does not."""

    lists: bool = True            # *_list files and node cpulist (older kernels: masks only)
    masks: bool = True            # hex masks (cpumap, thread_siblings, shared_cpu_map, ...)
    new_names: bool = True        # core_cpus, package_cpus, die_*, cluster_* (Linux 5.x)
    node_cpumap: bool = True      # node*/cpumap (with lists=False too: nothing but cpuN links)
    padding: bool = False         # "\n\0" after the text of every sys/ file
    cpu0_online: str = "missing"  # cpu0/online: "missing" | "empty" | "file"
    node_cpu_links: bool = True   # node*/cpuM -> ../../cpu/cpuM
    cpu_node_links: bool = True   # cpu*/nodeN -> ../../node/nodeN
    distance_over: str = "online"  # what distance rows cover: "online" | "possible"
    proc_mounts: bool = True      # proc/mounts listing sysfs, procfs and the cgroup mounts
    cpuinfo: str = "x86"          # "x86" | "power" | "arm64" (no "model name") | "ia64"
    cpu_online_file: bool = True  # cpu/online (without it: the cpuN/online files decide)


@dataclass
class NodeSpec:
    id: int
    cpus: frozenset
    memory_kb: int
    distances: dict


@dataclass
class Cpuset:
    kind: str                      # "cgroup2" | "cgroup1" | "cpuset" (legacy filesystem)
    path: str
    cpus: frozenset | None
    mems: frozenset | None
    effective_cpus: frozenset | None = None
    effective_mems: frozenset | None = None
    at: str | None = None          # cgroup v2: directory holding the files (an ancestor)
    mount: str = ""                # mount point relative to the root
    noprefix: bool = False         # cgroup v1 mounted with -o noprefix


@dataclass
class CpuSpec:
    package: int
    core: int
    die: int = 0
    cluster: int | None = None     # None: cluster_id = core id (what x86 kernels write)


class FakeMachine:
    """A machine description that writes itself as a sysfs/procfs tree."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.nodes: dict[int, NodeSpec] = {}
        self.numa_dir = True
        self.online_cpus: frozenset | None = None     # default: every CPU of a node/topology
        self.possible_cpus: frozenset | None = None   # default: online + offline CPUs
        self.online_nodes: frozenset | None = None    # default: the nodes added
        self.possible_nodes: frozenset | None = None  # default: online nodes
        self.topology: dict[int, tuple[int, int]] = {}  # cpu -> (package, core)
        self.cpu_specs: dict[int, CpuSpec] = {}
        self.siblings_override: dict[int, frozenset] = {}
        self.caches: list[tuple[int, str, frozenset]] = []
        self.status: tuple | None = ("default", "default")
        self.cgroup2: Cpuset | None = None
        self.cgroup1: Cpuset | None = None
        self.cpuset_fs: Cpuset | None = None
        self.model_name: str | None = None
        self.arm_cpu = (0x41, 0x3, 0xD0C, 1)           # arm64 cpuinfo: implementer, variant, part, revision
        self.cache_sizes: dict[tuple[int, str], str] = {}   # (level, type) -> size file text (default caches.CACHE_SIZES)
        self.cppc_highest_perf: int | None = None
        self.memtotal_kb: int | None = None           # proc/meminfo; default: sum of nodes
        self.hugepages: dict[int, dict[int, int]] = {}  # node -> {page kB: count}
        self.cpu_kinds: dict[str, frozenset] = {}     # hybrid PMUs: "cpu_core"/"cpu_atom" -> CPUs
        self.cpu_capacity: dict[int, int] = {}        # cpuN/cpu_capacity (arm64, RISC-V; not x86) -> value
        self.hmat: dict[int, dict] = {}               # node -> access0 figures and initiators (HMAT)
        self.interleave_weights: dict[int, int] | None = None   # weighted_interleave/nodeN (Linux 6.9+)
        self.interleave_auto: str | None = None       # the auto switch's file name (Linux 6.16+)
        self.interleave_auto_value = True
        self.quirks = Quirks()
        self.overrides: dict[str, str | None] = {}    # rel path -> text (None: no such file)
        self._written: dict[str, str] = {}            # rel -> "file" | "link"

    # -- description ---------------------------------------------------------

    def add_node(self, id: int, cpus: Iterable[int] = (), memory_kb: int = 16 * GIB_KB,
                 distances: Mapping[int, int] | None = None) -> FakeMachine:
        """A NUMA node; ``distances`` maps other node ids to SLIT distances
        (unlisted: 10 to itself, 20 to the others)."""
        self.nodes[id] = NodeSpec(id, id_set(cpus), memory_kb, dict(distances or {}))
        return self

    def set_distances(self, matrix: Mapping[int, Mapping[int, int]]) -> FakeMachine:
        for nid, row in matrix.items():
            self.nodes[nid].distances.update(row)
        return self

    def set_online_cpus(self, cpus: Iterable[int]) -> FakeMachine:
        self.online_cpus = id_set(cpus)
        return self

    def set_possible_cpus(self, cpus: Iterable[int]) -> FakeMachine:
        self.possible_cpus = id_set(cpus)
        return self

    def set_online_nodes(self, nodes: Iterable[int]) -> FakeMachine:
        """Nodes the kernel has online; the others get no directory (as on Linux)."""
        self.online_nodes = id_set(nodes)
        return self

    def set_possible_nodes(self, nodes: Iterable[int]) -> FakeMachine:
        self.possible_nodes = id_set(nodes)
        return self

    def set_cpu_topology(self, cpu: int, package: int, core: int,
                         siblings: Iterable[int] | None = None, die: int = 0,
                         cluster: int | None = None) -> FakeMachine:
        """Package, core (and die, cluster) of ``cpu``. Siblings default to the
        online CPUs with the same (package, die, core), as the kernel computes them."""
        self.topology[cpu] = (package, core)
        self.cpu_specs[cpu] = CpuSpec(package, core, die, cluster)
        if siblings is not None:
            self.siblings_override[cpu] = id_set(siblings)
        return self

    def add_cache(self, level: int, type: str, cpus: Iterable[int]) -> FakeMachine:
        """One cache instance shared by ``cpus`` (type Data, Instruction or Unified)."""
        self.caches.append((level, type, id_set(cpus)))
        return self

    def add_core_caches(self) -> FakeMachine:
        """L1 Data, L1 Instruction and L2 per core (shared by its hyperthreads)."""
        for cpus in sorted(self.core_groups().values(), key=min):
            self.add_cache(1, "Data", cpus).add_cache(1, "Instruction", cpus)
            self.add_cache(2, "Unified", cpus)
        return self

    def set_status(self, cpus: Iterable[int] | None, mems: Iterable[int] | None) -> FakeMachine:
        """proc/self/status Cpus_allowed(_list) and Mems_allowed(_list);
        None leaves a line out."""
        self.status = (None if cpus is None else id_set(cpus), None if mems is None else id_set(mems))
        return self

    def remove_status(self) -> FakeMachine:
        self.status = None
        return self

    def set_cgroup2(self, path: str, cpus: Iterable[int] | None, mems: Iterable[int] | None,
                    at: str | None = None, hybrid: bool = False,
                    mount: str | None = None) -> FakeMachine:
        """The process is in cgroup v2 ``path``; ``cpuset.*.effective`` are written in
        ``at`` (default ``path``; an ancestor models a leaf without the cpuset
        controller). The root cgroup gets the machine's CPUs and nodes. ``mount``
        (default ``sys/fs/cgroup``, or ``sys/fs/cgroup/unified`` when ``hybrid``)."""
        if mount is None:
            mount = f"{CGROUP}/unified" if hybrid else CGROUP
        self.cgroup2 = Cpuset("cgroup2", path, None if cpus is None else id_set(cpus),
                               None if mems is None else id_set(mems), at=at, mount=mount)
        return self

    def set_cgroup1(self, path: str, cpus: Iterable[int], mems: Iterable[int],
                    effective_cpus: Iterable[int] | None = None,
                    effective_mems: Iterable[int] | None = None,
                    mount: str = f"{CGROUP}/cpuset", noprefix: bool = False) -> FakeMachine:
        """The process is in cgroup v1 cpuset ``path`` (``cpuset.cpus``/``cpuset.mems``,
        plus ``cpuset.effective_*`` when given) of the hierarchy mounted at ``mount``."""
        self.cgroup1 = Cpuset(
            "cgroup1", path, id_set(cpus), id_set(mems),
            None if effective_cpus is None else id_set(effective_cpus),
            None if effective_mems is None else id_set(effective_mems),
            mount=mount, noprefix=noprefix,
        )
        return self

    def set_cpuset_fs(self, path: str, cpus: Iterable[int], mems: Iterable[int],
                      mount: str = "dev/cpuset") -> FakeMachine:
        """The legacy cpuset filesystem (``mount -t cpuset none /dev/cpuset``): files
        ``cpus`` and ``mems`` without a prefix, the path in proc/self/cpuset."""
        self.cpuset_fs = Cpuset("cpuset", path, id_set(cpus), id_set(mems), mount=mount)
        return self

    def set_model_name(self, name: str) -> FakeMachine:
        self.model_name = name
        return self

    def set_arm_cpu(self, implementer: int, part: int, variant: int = 0, revision: int = 0) -> FakeMachine:
        """An arm64 ``proc/cpuinfo`` (no ``model name``) with these ``CPU implementer`` and ``CPU part``."""
        self.arm_cpu = (implementer, variant, part, revision)
        self.quirks.cpuinfo = "arm64"
        return self

    def set_cppc(self, highest_perf: int) -> FakeMachine:
        self.cppc_highest_perf = highest_perf
        return self

    def set_hugepages(self, node: int, page_kb: int, count: int) -> FakeMachine:
        """``count`` reserved huge pages of ``page_kb`` kB on ``node`` (counted in MemTotal)."""
        self.hugepages.setdefault(node, {})[page_kb] = count
        return self

    def set_hmat(self, node: int, read_bandwidth: int | None = None, write_bandwidth: int | None = None,
                 read_latency: int | None = None, write_latency: int | None = None,
                 initiators: Iterable[int] = ()) -> FakeMachine:
        """The firmware's HMAT figures of ``node`` (MB/s, ns) from its best ``initiators``, written as Linux
        writes them: ``nodeN/access0/initiators/{read,write}_{bandwidth,latency}`` and ``nodeM`` links."""
        self.hmat[node] = {"read_bandwidth": read_bandwidth, "write_bandwidth": write_bandwidth,
                           "read_latency": read_latency, "write_latency": write_latency,
                           "initiators": id_set(initiators)}
        return self

    def set_interleave_weights(self, weights: Mapping[int, int], auto: str | None = None,
                               auto_value: bool = True) -> FakeMachine:
        """``sys/kernel/mm/mempolicy/weighted_interleave/nodeN`` (one per node given); ``auto`` names the
        6.16 auto switch file (``"auto"``) holding ``auto_value``, None leaves it out (6.9-6.15)."""
        self.interleave_weights = dict(weights)
        self.interleave_auto, self.interleave_auto_value = auto, auto_value
        return self

    def set_quirks(self, **changes) -> FakeMachine:
        """Switch :class:`Quirks` on or off, e.g. ``set_quirks(lists=False, padding=True)``."""
        self.quirks = dataclasses.replace(self.quirks, **changes)
        return self

    def set_file(self, rel: str, text: str) -> FakeMachine:
        """Write ``text`` at ``rel`` instead of what the description gives."""
        self.overrides[rel] = text
        return self

    def remove_file(self, rel: str) -> FakeMachine:
        """Leave ``rel`` (and anything under it, for a directory) out of the tree."""
        self.overrides[rel] = None
        return self

    # -- derived views -------------------------------------------------------

    def all_cpus(self) -> frozenset:
        cpus = set(self.topology)
        for node in self.nodes.values():
            cpus |= node.cpus
        if self.online_cpus is not None:
            cpus |= self.online_cpus
        return frozenset(cpus)

    def online(self) -> frozenset:
        return self.online_cpus if self.online_cpus is not None else self.all_cpus()

    def possible(self) -> frozenset:
        if self.possible_cpus is not None:
            return self.possible_cpus | self.online()
        return self.all_cpus() | self.online()

    def node_online(self) -> frozenset:
        return self.online_nodes if self.online_nodes is not None else frozenset(self.nodes)

    def node_possible(self) -> frozenset:
        possible = self.possible_nodes if self.possible_nodes is not None else frozenset()
        return possible | self.node_online()

    def node_dirs(self) -> list[int]:
        """Ids of the node directories: the online nodes that were described."""
        return sorted(n for n in self.nodes if n in self.node_online())

    def spec(self, cpu: int) -> CpuSpec:
        return self.cpu_specs.get(cpu) or CpuSpec(*self.topology[cpu])

    def core_groups(self) -> dict[tuple, set]:
        cores: dict[tuple, set] = {}
        for cpu in self.topology:
            s = self.spec(cpu)
            cores.setdefault((s.package, s.die, s.core), set()).add(cpu)
        return cores

    def siblings(self, cpu: int) -> frozenset:
        if cpu in self.siblings_override:
            return self.siblings_override[cpu]
        s = self.spec(cpu)
        online = self.online()
        return frozenset(c for c in self.topology if c in online
                         and (self.spec(c).package, self.spec(c).die, self.spec(c).core)
                         == (s.package, s.die, s.core))

    def allowed(self) -> tuple[frozenset, frozenset]:
        """(CPUs, nodes) this description allows the process: what discovery must report. The CPUs are the
        cpuset's (online CPUs without one), never the affinity the status file shows (Cpus_allowed): the kernel
        lets a process widen its affinity to its whole cpuset, and hwloc's allowed cpuset is the cpuset too."""
        online = self.online()
        nodes = frozenset(self.node_dirs()) if (self.numa_dir and self.nodes) else frozenset({0})
        cpus, mems = online, nodes
        if self.status is not None:
            _, s_mems = self.status
            if s_mems not in ("default", None):
                mems = mems & s_mems
        for cg in (self.cgroup2, self.cgroup1, self.cpuset_fs):
            if cg is None:
                continue
            c = cg.effective_cpus if cg.effective_cpus is not None else cg.cpus
            m = cg.effective_mems if cg.effective_mems is not None else cg.mems
            if c is not None:
                cpus = cpus & c
            if m is not None:
                mems = mems & m
        return cpus, mems

    # -- files ---------------------------------------------------------------

    def files(self) -> dict[str, str]:
        """Every regular file of the tree: relative path -> content."""
        return writer.layout(self)[0]

    def links(self) -> dict[str, str]:
        """Every symlink of the tree: relative path -> link target."""
        return writer.layout(self)[1]

    def write(self) -> Path:
        """Write (or rewrite) the tree; returns the root. Idempotent: only the files it wrote before and no
        longer describes are removed, so other builders (``tests/fakegpu.py``) can add to the same root."""
        files, links = writer.layout(self)
        self._written = writer.write_tree(self.root, files, links, self._written)
        return self.root

    @property
    def path(self) -> str:
        return str(self.root)

    def __repr__(self) -> str:
        nodes = ", ".join(f"{n.id}: cpus {format_cpulist(n.cpus)} {n.memory_kb} kB"
                          for n in self.nodes.values())
        changed = {f.name: getattr(self.quirks, f.name) for f in dataclasses.fields(Quirks)
                   if getattr(self.quirks, f.name) != f.default}
        parts = [f"nodes {{{nodes}}}", f"online CPUs {format_cpulist(self.online())}",
                 f"possible {format_cpulist(self.possible())}",
                 f"online nodes {format_cpulist(self.node_online())}",
                 f"possible nodes {format_cpulist(self.node_possible())}",
                 f"cores {sorted((min(c), format_cpulist(c)) for c in self.core_groups().values())}",
                 f"caches {[(lvl, t[0], format_cpulist(c)) for lvl, t, c in self.caches]}",
                 f"status {self.status}", f"quirks {changed}"]
        for cg in (self.cgroup2, self.cgroup1, self.cpuset_fs):
            if cg is not None:
                parts.append(f"{cg.kind} {cg.path!r} at {cg.at!r} mount {cg.mount!r} "
                             f"noprefix={cg.noprefix} cpus {format_cpulist(cg.cpus or ())} "
                             f"mems {format_cpulist(cg.mems or ())}")
        return "FakeMachine(" + "; ".join(parts) + ")"
