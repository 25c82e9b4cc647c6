"""Synthetic sysfs/procfs trees for discovery tests.

:class:`FakeMachine` describes a machine (NUMA nodes, CPUs, caches, cpusets,
CPU model) and :meth:`FakeMachine.write` lays it out under a root directory
the way the Linux kernel does, so ``numabind.discover(root)`` reads it like a
live system. ``write`` is idempotent and only touches the files it owns (it
removes the ones it wrote before and no longer describes), so other builders
(``tests/fakegpu.py``) can add ``sys/bus/pci/devices/...`` to the same root.

Ready-made machines: :func:`one_node`, :func:`two_sockets`, :func:`snc`,
:func:`memory_only_nodes`, :func:`offline_cpus`, :func:`sparse_nodes`,
:func:`cgroup_restricted`, :func:`cgroup_v1_restricted`, :func:`big`,
:func:`no_numa_dir`. Each takes the root first and returns the written
machine. Test modules get the ``fake_machine`` factory fixture with
``from tests.fakesys import fake_machine``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from numabind._fs import FsReader
from numabind.cpulist import format_cpulist, format_mask

try:
    import pytest
except ImportError:  # the benchmark uses the builder without pytest
    pytest = None

__all__ = [
    "FakeMachine",
    "FACTORIES",
    "fake_machine",
    "one_node",
    "two_sockets",
    "snc",
    "memory_only_nodes",
    "offline_cpus",
    "sparse_nodes",
    "cgroup_restricted",
    "cgroup_v1_restricted",
    "big",
    "no_numa_dir",
    "GIB_KB",
]

GIB_KB = 1024 * 1024  # kB in one GiB

NODE = "sys/devices/system/node"
CPU = "sys/devices/system/cpu"
CGROUP = "sys/fs/cgroup"

_CACHE_SIZES = {(1, "Data"): "48K", (1, "Instruction"): "32K", (2, "Unified"): "2048K"}


@dataclass
class _NodeSpec:
    id: int
    cpus: frozenset
    memory_kb: int
    distances: dict


@dataclass
class _Cpuset:
    path: str
    cpus: frozenset | None
    mems: frozenset | None
    effective_cpus: frozenset | None = None
    effective_mems: frozenset | None = None
    at: str | None = None          # cgroup v2: directory holding the files (an ancestor)
    hybrid: bool = False           # cgroup v2 mounted at sys/fs/cgroup/unified


def _ids(values: Iterable[int]) -> frozenset:
    return frozenset(int(v) for v in values)


class FakeMachine:
    """A machine description that writes itself as a sysfs/procfs tree."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.nodes: dict[int, _NodeSpec] = {}
        self.numa_dir = True
        self.online_cpus: frozenset | None = None     # default: every CPU of a node/topology
        self.possible_cpus: frozenset | None = None   # default: online + offline CPUs
        self.online_nodes: frozenset | None = None    # default: the nodes added
        self.possible_nodes: frozenset | None = None  # default: online nodes
        self.topology: dict[int, tuple[int, int]] = {}  # cpu -> (package, core)
        self.siblings_override: dict[int, frozenset] = {}
        self.caches: list[tuple[int, str, frozenset]] = []
        self.status: tuple[frozenset | None, frozenset | None] | None = ("default", "default")
        self.cgroup2: _Cpuset | None = None
        self.cgroup1: _Cpuset | None = None
        self.model_name: str | None = None
        self.cppc_highest_perf: int | None = None
        self.memtotal_kb: int | None = None           # proc/meminfo; default: sum of nodes
        self.overrides: dict[str, str | None] = {}    # rel path -> text (None: no such file)
        self._written: set[str] = set()

    # -- description ---------------------------------------------------------

    def add_node(self, id: int, cpus: Iterable[int] = (), memory_kb: int = 16 * GIB_KB,
                 distances: Mapping[int, int] | None = None) -> FakeMachine:
        """A NUMA node; ``distances`` maps other node ids to SLIT distances
        (unlisted: 10 to itself, 20 to the others)."""
        self.nodes[id] = _NodeSpec(id, _ids(cpus), memory_kb, dict(distances or {}))
        return self

    def set_distances(self, matrix: Mapping[int, Mapping[int, int]]) -> FakeMachine:
        for nid, row in matrix.items():
            self.nodes[nid].distances.update(row)
        return self

    def set_online_cpus(self, cpus: Iterable[int]) -> FakeMachine:
        self.online_cpus = _ids(cpus)
        return self

    def set_possible_cpus(self, cpus: Iterable[int]) -> FakeMachine:
        self.possible_cpus = _ids(cpus)
        return self

    def set_online_nodes(self, nodes: Iterable[int]) -> FakeMachine:
        self.online_nodes = _ids(nodes)
        return self

    def set_possible_nodes(self, nodes: Iterable[int]) -> FakeMachine:
        self.possible_nodes = _ids(nodes)
        return self

    def set_cpu_topology(self, cpu: int, package: int, core: int,
                         siblings: Iterable[int] | None = None) -> FakeMachine:
        """Package and core of ``cpu``. Siblings default to the online CPUs with
        the same (package, core), as the kernel computes them."""
        self.topology[cpu] = (package, core)
        if siblings is not None:
            self.siblings_override[cpu] = _ids(siblings)
        return self

    def add_cache(self, level: int, type: str, cpus: Iterable[int]) -> FakeMachine:
        """One cache instance shared by ``cpus`` (type Data, Instruction or Unified)."""
        self.caches.append((level, type, _ids(cpus)))
        return self

    def add_core_caches(self) -> FakeMachine:
        """L1 Data, L1 Instruction and L2 per core (shared by its hyperthreads)."""
        cores: dict[tuple[int, int], set] = {}
        for cpu, key in self.topology.items():
            cores.setdefault(key, set()).add(cpu)
        for cpus in sorted(cores.values(), key=min):
            self.add_cache(1, "Data", cpus).add_cache(1, "Instruction", cpus)
            self.add_cache(2, "Unified", cpus)
        return self

    def set_status(self, cpus: Iterable[int] | None, mems: Iterable[int] | None) -> FakeMachine:
        """proc/self/status Cpus_allowed(_list) and Mems_allowed(_list);
        None leaves a line out."""
        self.status = (None if cpus is None else _ids(cpus), None if mems is None else _ids(mems))
        return self

    def remove_status(self) -> FakeMachine:
        self.status = None
        return self

    def set_cgroup2(self, path: str, cpus: Iterable[int] | None, mems: Iterable[int] | None,
                    at: str | None = None, hybrid: bool = False) -> FakeMachine:
        """The process is in cgroup v2 ``path``; ``cpuset.*.effective`` are written in
        ``at`` (default ``path``; an ancestor models a leaf without the cpuset
        controller). The root cgroup gets the machine's CPUs and nodes."""
        self.cgroup2 = _Cpuset(path, None if cpus is None else _ids(cpus),
                               None if mems is None else _ids(mems), at=at, hybrid=hybrid)
        return self

    def set_cgroup1(self, path: str, cpus: Iterable[int], mems: Iterable[int],
                    effective_cpus: Iterable[int] | None = None,
                    effective_mems: Iterable[int] | None = None) -> FakeMachine:
        """The process is in legacy cpuset ``path`` (``cpuset.cpus``/``cpuset.mems``,
        plus ``cpuset.effective_*`` when given)."""
        self.cgroup1 = _Cpuset(
            path, _ids(cpus), _ids(mems),
            None if effective_cpus is None else _ids(effective_cpus),
            None if effective_mems is None else _ids(effective_mems),
        )
        return self

    def set_model_name(self, name: str) -> FakeMachine:
        self.model_name = name
        return self

    def set_cppc(self, highest_perf: int) -> FakeMachine:
        self.cppc_highest_perf = highest_perf
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
            return self.possible_cpus
        return self.all_cpus() | self.online()

    def node_online(self) -> frozenset:
        return self.online_nodes if self.online_nodes is not None else frozenset(self.nodes)

    def siblings(self, cpu: int) -> frozenset:
        if cpu in self.siblings_override:
            return self.siblings_override[cpu]
        key = self.topology[cpu]
        online = self.online()
        return frozenset(c for c, k in self.topology.items() if k == key and c in online)

    # -- files ---------------------------------------------------------------

    def files(self) -> dict[str, str]:
        """Every file of the tree: relative path -> content."""
        out: dict[str, str] = {}
        online, possible = self.online(), self.possible()
        self._cpu_files(out, online, possible)
        if self.numa_dir and self.nodes:
            self._node_files(out, online)
        total = self.memtotal_kb
        if total is None:
            total = sum(n.memory_kb for n in self.nodes.values()) or 16 * GIB_KB
        out["proc/meminfo"] = (f"MemTotal:       {total} kB\nMemFree:        {total // 2} kB\n"
                               f"MemAvailable:   {total // 2} kB\n")
        self._process_files(out, online)
        if self.model_name is not None:
            block = "processor\t: {n}\nvendor_id\t: GenuineIntel\nmodel name\t: {m}\n\n"
            out["proc/cpuinfo"] = "".join(
                block.format(n=n, m=self.model_name) for n in range(min(len(online), 4)))
        if self.cppc_highest_perf is not None:
            out[f"{CPU}/cpu0/acpi_cppc/highest_perf"] = f"{self.cppc_highest_perf}\n"
        for rel, text in self.overrides.items():
            if text is None:
                for key in [k for k in out if k == rel or k.startswith(rel.rstrip("/") + "/")]:
                    del out[key]
            else:
                out[rel] = text
        return out

    def _cpu_files(self, out: dict, online: frozenset, possible: frozenset) -> None:
        out[f"{CPU}/online"] = format_cpulist(online) + "\n"
        out[f"{CPU}/possible"] = format_cpulist(possible) + "\n"
        out[f"{CPU}/present"] = format_cpulist(possible) + "\n"
        out[f"{CPU}/offline"] = format_cpulist(possible - online) + "\n"
        out[f"{CPU}/kernel_max"] = "8191\n"
        per_cpu: dict[int, list] = {}
        for level, ctype, cpus in self.caches:
            for cpu in cpus:
                per_cpu.setdefault(cpu, []).append((level, ctype, cpus))
        for cpu in sorted(possible):
            base = f"{CPU}/cpu{cpu}"
            if cpu != 0:
                out[f"{base}/online"] = "1\n" if cpu in online else "0\n"
            if cpu not in online:
                continue  # the kernel removes topology/ and cache/ of offline CPUs
            if cpu in self.topology:
                package, core = self.topology[cpu]
                sibs = self.siblings(cpu)
                pkg = [c for c, k in self.topology.items() if k[0] == package and c in online]
                out[f"{base}/topology/physical_package_id"] = f"{package}\n"
                out[f"{base}/topology/core_id"] = f"{core}\n"
                out[f"{base}/topology/thread_siblings_list"] = format_cpulist(sibs) + "\n"
                out[f"{base}/topology/core_siblings_list"] = format_cpulist(pkg) + "\n"
            kinds = sorted(per_cpu.get(cpu, []), key=lambda c: (c[0], c[1]))
            for index, (level, ctype, cpus) in enumerate(kinds):
                idir = f"{base}/cache/index{index}"
                out[f"{idir}/level"] = f"{level}\n"
                out[f"{idir}/type"] = f"{ctype}\n"
                out[f"{idir}/shared_cpu_list"] = format_cpulist(cpus & online) + "\n"
                out[f"{idir}/size"] = _CACHE_SIZES.get((level, ctype), "32768K") + "\n"

    def _node_files(self, out: dict, online: frozenset) -> None:
        node_online = self.node_online()
        possible = self.possible_nodes if self.possible_nodes is not None else node_online
        out[f"{NODE}/online"] = format_cpulist(node_online) + "\n"
        out[f"{NODE}/possible"] = format_cpulist(possible) + "\n"
        out[f"{NODE}/has_cpu"] = format_cpulist(
            n.id for n in self.nodes.values() if n.cpus & online) + "\n"
        out[f"{NODE}/has_memory"] = format_cpulist(
            n.id for n in self.nodes.values() if n.memory_kb) + "\n"
        order = sorted(node_online)
        for node in self.nodes.values():
            base = f"{NODE}/node{node.id}"
            out[f"{base}/cpulist"] = format_cpulist(node.cpus & online) + "\n"
            kb = node.memory_kb
            out[f"{base}/meminfo"] = (
                f"Node {node.id} MemTotal:       {kb} kB\n"
                f"Node {node.id} MemFree:        {kb // 2} kB\n"
                f"Node {node.id} MemUsed:        {kb - kb // 2} kB\n"
            )
            row = [node.distances.get(o, 10 if o == node.id else 20) for o in order]
            out[f"{base}/distance"] = " ".join(str(d) for d in row) + "\n"

    def _process_files(self, out: dict, online: frozenset) -> None:
        mems_all = frozenset(self.nodes) if (self.numa_dir and self.nodes) else frozenset({0})
        if self.status is not None:
            cpus, mems = self.status
            cpus = online if cpus == "default" else cpus
            mems = mems_all if mems == "default" else mems
            lines = ["Name:\tpython3", "State:\tR (running)", "Pid:\t4242"]
            if cpus is not None:
                lines += [f"Cpus_allowed:\t{format_mask(cpus)}",
                          f"Cpus_allowed_list:\t{format_cpulist(cpus)}"]
            if mems is not None:
                lines += [f"Mems_allowed:\t{format_mask(mems)}",
                          f"Mems_allowed_list:\t{format_cpulist(mems)}"]
            lines.append("voluntary_ctxt_switches:\t3")
            out["proc/self/status"] = "\n".join(lines) + "\n"
        cgroup_lines = []
        if self.cgroup1 is not None:
            cg = self.cgroup1
            cgroup_lines += [f"4:memory:{cg.path}", f"3:cpuset:{cg.path}"]
            out["proc/self/cpuset"] = cg.path + "\n"
            d = f"{CGROUP}/cpuset" + ("" if cg.path == "/" else cg.path)
            out[f"{d}/cpuset.cpus"] = format_cpulist(cg.cpus) + "\n"
            out[f"{d}/cpuset.mems"] = format_cpulist(cg.mems) + "\n"
            if cg.effective_cpus is not None:
                out[f"{d}/cpuset.effective_cpus"] = format_cpulist(cg.effective_cpus) + "\n"
            if cg.effective_mems is not None:
                out[f"{d}/cpuset.effective_mems"] = format_cpulist(cg.effective_mems) + "\n"
        if self.cgroup2 is not None:
            cg = self.cgroup2
            cgroup_lines.append(f"0::{cg.path}")
            mount = f"{CGROUP}/unified" if cg.hybrid else CGROUP
            out[f"{mount}/cpuset.cpus.effective"] = format_cpulist(online) + "\n"
            out[f"{mount}/cpuset.mems.effective"] = format_cpulist(mems_all) + "\n"
            at = cg.path if cg.at is None else cg.at
            d = mount + ("" if at == "/" else at)
            out[f"{d}/cgroup.procs"] = "4242\n"
            if cg.cpus is not None:
                out[f"{d}/cpuset.cpus.effective"] = format_cpulist(cg.cpus) + "\n"
            if cg.mems is not None:
                out[f"{d}/cpuset.mems.effective"] = format_cpulist(cg.mems) + "\n"
            if at != cg.path:
                out[f"{mount}{cg.path}/cgroup.procs"] = "4242\n"
        if cgroup_lines:
            out["proc/self/cgroup"] = "\n".join(cgroup_lines) + "\n"

    def write(self) -> Path:
        """Write (or rewrite) the tree; returns the root. Idempotent."""
        files = self.files()
        for rel in sorted(self._written - files.keys()):
            path = self.root / rel
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            # Prune directories this left empty, so a removed node or CPU is gone.
            parent = path.parent
            while parent != self.root:
                try:
                    parent.rmdir()
                except OSError:
                    break
                parent = parent.parent
        made: set[Path] = set()
        for rel, text in files.items():
            path = self.root / rel
            if path.parent not in made:
                path.parent.mkdir(parents=True, exist_ok=True)
                made.add(path.parent)
            path.write_text(text)
        self._written = set(files)
        return self.root

    @property
    def path(self) -> str:
        return str(self.root)


# -- ready-made machines ---------------------------------------------------------


def _smt_layout(m: FakeMachine, packages: int, cores_per_package: int, smt: bool,
                node_of_core: Callable[[int, int], int]) -> dict[int, set]:
    """Linux x86 numbering: all first threads, then all second threads.
    Returns node -> CPUs."""
    total_cores = packages * cores_per_package
    threads = 2 if smt else 1
    nodes: dict[int, set] = {}
    for t in range(threads):
        for p in range(packages):
            for k in range(cores_per_package):
                cpu = t * total_cores + p * cores_per_package + k
                m.set_cpu_topology(cpu, p, k)
                nodes.setdefault(node_of_core(p, k), set()).add(cpu)
    return nodes


def one_node(root, ncpus: int = 4, memory_kb: int = 16 * GIB_KB) -> FakeMachine:
    """One package, one node, no SMT; L1/L2 per CPU, one L3."""
    m = FakeMachine(root)
    m.add_node(0, range(ncpus), memory_kb)
    for cpu in range(ncpus):
        m.set_cpu_topology(cpu, 0, cpu)
    m.add_core_caches().add_cache(3, "Unified", range(ncpus))
    m.set_model_name("Fake CPU @ 2.00GHz")
    m.write()
    return m


def two_sockets(root, cpus_per_socket: int = 8, smt: bool = True,
                memory_kb: int = 64 * GIB_KB) -> FakeMachine:
    """Two packages, one node each (distance 21); SMT siblings numbered
    after all first threads (socket 0 = 0-3,8-11 for 8 CPUs per socket)."""
    m = FakeMachine(root)
    cores = cpus_per_socket // 2 if smt else cpus_per_socket
    nodes = _smt_layout(m, 2, cores, smt, lambda p, k: p)
    for nid, cpus in sorted(nodes.items()):
        m.add_node(nid, cpus, memory_kb, {1 - nid: 21})
    m.add_core_caches()
    for nid, cpus in sorted(nodes.items()):
        m.add_cache(3, "Unified", cpus)
    m.set_model_name("Intel(R) Xeon(R) Platinum 8480+")
    m.write()
    return m


def snc(root, sockets: int = 2, nodes_per_socket: int = 2, cores_per_node: int = 4,
        smt: bool = True, memory_kb: int = 32 * GIB_KB,
        ccx_cores: int | None = None) -> FakeMachine:
    """Sub-NUMA clustering / NPS: several nodes per package. Distances: 10 local,
    12 same package, 21 other package. L3 per package, or per ``ccx_cores`` cores
    (AMD core complexes) when given."""
    m = FakeMachine(root)
    cores = nodes_per_socket * cores_per_node
    nodes = _smt_layout(m, sockets, cores, smt,
                        lambda p, k: p * nodes_per_socket + k // cores_per_node)
    for nid, cpus in sorted(nodes.items()):
        dist = {o: (10 if o == nid else 12 if o // nodes_per_socket == nid // nodes_per_socket
                    else 21) for o in nodes}
        m.add_node(nid, cpus, memory_kb, dist)
    m.add_core_caches()
    groups: dict[tuple[int, int], set] = {}
    for cpu, (p, k) in m.topology.items():
        key = (p, 0) if ccx_cores is None else (p, k // ccx_cores)
        groups.setdefault(key, set()).add(cpu)
    for key in sorted(groups):
        m.add_cache(3, "Unified", groups[key])
    m.set_model_name("Fake SNC CPU")
    m.write()
    return m


def memory_only_nodes(root) -> FakeMachine:
    """Two CPU nodes (0: 0-7, 1: 8-15, 64 GiB each), a CXL memory node 2 (128 GiB),
    a GPU HBM node 3 (96 GiB) and an empty node 4 (no CPUs, no memory, as
    Grace Hopper's spare MIG nodes)."""
    m = FakeMachine(root)
    matrix = {
        0: {0: 10, 1: 21, 2: 24, 3: 80, 4: 80},
        1: {0: 21, 1: 10, 2: 26, 3: 80, 4: 80},
        2: {0: 24, 1: 26, 2: 10, 3: 80, 4: 80},
        3: {0: 80, 1: 80, 2: 80, 3: 10, 4: 80},
        4: {0: 80, 1: 80, 2: 80, 3: 80, 4: 10},
    }
    m.add_node(0, range(0, 8), 64 * GIB_KB, matrix[0])
    m.add_node(1, range(8, 16), 64 * GIB_KB, matrix[1])
    m.add_node(2, (), 128 * GIB_KB, matrix[2])
    m.add_node(3, (), 96 * GIB_KB, matrix[3])
    m.add_node(4, (), 0, matrix[4])
    for cpu in range(16):
        m.set_cpu_topology(cpu, cpu // 8, cpu % 8)
    m.add_core_caches().add_cache(3, "Unified", range(8)).add_cache(3, "Unified", range(8, 16))
    m.set_model_name("Fake Grace-like CPU")
    m.write()
    return m


def offline_cpus(root) -> FakeMachine:
    """Two nodes of 8 possible CPUs (0-7, 8-15); CPUs 3, 6, 7 and 12 offline; node 1
    has no memory (CPU-only)."""
    m = FakeMachine(root)
    m.add_node(0, range(8), 32 * GIB_KB, {1: 21})
    m.add_node(1, range(8, 16), 0, {0: 21})
    for cpu in range(16):
        m.set_cpu_topology(cpu, cpu // 8, (cpu % 8) // 2)  # SMT pairs (0,1), (2,3), ...
    m.set_possible_cpus(range(16))
    m.set_online_cpus(set(range(16)) - {3, 6, 7, 12})
    online = m.online()
    for p in range(2):
        for k in range(4):
            pair = {p * 8 + 2 * k, p * 8 + 2 * k + 1} & online
            if pair:
                m.add_cache(2, "Unified", pair)
    m.add_cache(3, "Unified", range(8)).add_cache(3, "Unified", range(8, 16))
    m.write()
    return m


def sparse_nodes(root) -> FakeMachine:
    """Nodes 0, 2 and 5 online (8 possible); 4 CPUs each; distance rows follow
    the online ids."""
    m = FakeMachine(root)
    m.add_node(0, range(0, 4), 8 * GIB_KB, {2: 20, 5: 30})
    m.add_node(2, range(4, 8), 8 * GIB_KB, {0: 20, 5: 25})
    m.add_node(5, range(8, 12), 4 * GIB_KB, {0: 30, 2: 25})
    for cpu in range(12):
        m.set_cpu_topology(cpu, cpu // 4, cpu % 4)
    m.set_possible_nodes(range(8))
    m.write()
    return m


def cgroup_restricted(root) -> FakeMachine:
    """two_sockets(8) in a container: cgroup v2 ``/kubepods/pod7/ctr`` with
    cpuset.cpus.effective 4-7,12-15 (socket 1) and mems 1; the affinity
    (status) allows 2-15."""
    m = two_sockets(root, 8)
    m.set_status(range(2, 16), (0, 1))
    m.set_cgroup2("/kubepods/pod7/ctr", (4, 5, 6, 7, 12, 13, 14, 15), (1,))
    m.write()
    return m


def cgroup_v1_restricted(root) -> FakeMachine:
    """two_sockets(8) in a legacy cpuset ``/docker/abc``: cpuset.cpus 0-3,8-11,
    effective_cpus 0-2,8-10, mems 0."""
    m = two_sockets(root, 8)
    m.set_cgroup1("/docker/abc", (0, 1, 2, 3, 8, 9, 10, 11), (0,),
                  effective_cpus=(0, 1, 2, 8, 9, 10), effective_mems=(0,))
    m.write()
    return m


def big(root, packages: int = 8, nodes_per_package: int = 2, cores_per_node: int = 36,
        smt: bool = True, caches: bool = True) -> FakeMachine:
    """Over 1024 CPUs: by default 8 packages x 2 nodes x 36 cores x 2 threads = 1152."""
    m = FakeMachine(root)
    cores = nodes_per_package * cores_per_node
    nodes = _smt_layout(m, packages, cores, smt,
                        lambda p, k: p * nodes_per_package + k // cores_per_node)
    for nid, cpus in sorted(nodes.items()):
        dist = {o: (10 if o == nid else 12 if o // nodes_per_package == nid // nodes_per_package
                    else 32) for o in nodes}
        m.add_node(nid, cpus, 64 * GIB_KB, dist)
    if caches:
        m.add_core_caches()
        for p in range(packages):
            m.add_cache(3, "Unified", [c for c, k in m.topology.items() if k[0] == p])
    m.write()
    return m


def no_numa_dir(root, ncpus: int = 4, memtotal_kb: int = 8 * GIB_KB) -> FakeMachine:
    """A CONFIG_NUMA=n kernel: no sys/devices/system/node at all."""
    m = FakeMachine(root)
    for cpu in range(ncpus):
        m.set_cpu_topology(cpu, 0, cpu)
    m.numa_dir = False
    m.memtotal_kb = memtotal_kb
    m.write()
    return m


FACTORIES: dict[str, Callable[..., FakeMachine]] = {
    "one_node": one_node,
    "two_sockets": two_sockets,
    "snc": snc,
    "memory_only_nodes": memory_only_nodes,
    "offline_cpus": offline_cpus,
    "sparse_nodes": sparse_nodes,
    "cgroup_restricted": cgroup_restricted,
    "cgroup_v1_restricted": cgroup_v1_restricted,
    "big": big,
    "no_numa_dir": no_numa_dir,
}


def _make_factory(base: Path) -> Callable[..., FakeMachine]:
    counter = itertools.count()

    def make(kind: str | None = None, **kwargs) -> FakeMachine:
        """``make()``: an empty FakeMachine; ``make("snc", nodes_per_socket=4)``: a
        written ready-made one. Each call gets its own root under tmp_path."""
        root = base / f"machine{next(counter)}"
        if kind is None:
            return FakeMachine(root)
        return FACTORIES[kind](root, **kwargs)

    return make


if pytest is not None:

    @pytest.fixture
    def fake_machine(tmp_path):
        """Factory of fake machines rooted under ``tmp_path``."""
        return _make_factory(tmp_path)
else:  # pragma: no cover - only the benchmark runs without pytest
    fake_machine = None


class RecordingReader(FsReader):
    """An FsReader that remembers every path it read (tests and bench/bench_discover.py count reads)."""

    def __init__(self, root) -> None:
        super().__init__(root)
        self.reads: list[str] = []

    def read(self, rel, limit=None):
        self.reads.append(rel)
        return super().read(rel, limit)
