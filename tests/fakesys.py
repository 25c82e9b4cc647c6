"""Synthetic sysfs/procfs trees for discovery tests, written the way Linux writes them.

:class:`FakeMachine` describes a machine (NUMA nodes, CPUs, caches, cpusets,
CPU model) and :meth:`FakeMachine.write` lays it out under a root directory
as a kernel does: every list both as a hex mask and as a ``_list`` file,
``core_cpus``/``package_cpus``/``die_*``/``cluster_*``, cache
``shared_cpu_map``, the ``nodeN/cpuM`` and ``cpuM/nodeN`` links,
``proc/mounts`` with the cgroup mounts. So ``numabind.discover(root)`` reads
it like a live system and hwloc's ``lstopo-no-graphics --input ROOT`` reads
it like a dump.

What real machines do differently is switched on with :meth:`set_quirks`
(see :class:`Quirks`): old kernels without ``_list`` files or without the
5.x file names, NUL padding after the text, an empty ``cpu0/online``,
distance rows over the possible nodes, nodes without ``cpumap``...

``write`` is idempotent and only touches the files it owns (it removes the
ones it wrote before and no longer describes), so other builders
(``tests/fakegpu.py``) can add ``sys/bus/pci/devices/...`` to the same root.

Ready-made machines (each takes the root first and returns the written
machine) are listed in :data:`FACTORIES`. Test modules get the
``fake_machine`` factory fixture with ``from tests.fakesys import fake_machine``.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from numabind._fs import FsReader
from numabind.cpulist import format_cpulist, ids_to_words
from numabind.errors import PlanError

try:
    import pytest
except ImportError:  # the benchmark uses the builder without pytest
    pytest = None

__all__ = [
    "FakeMachine",
    "Quirks",
    "FACTORIES",
    "ORACLE_FACTORIES",
    "fake_machine",
    "kernel_mask",
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
    "old_kernel",
    "padded",
    "offline_node0",
    "legacy_cpuset",
    "gpu_memory_cpuset",
    "many_nodes",
    "hybrid",
    "arm_clusters",
    "multi_die",
    "power_cpuinfo",
    "grace_hopper",
    "grace_blackwell",
    "kunpeng920",
    "GIB_KB",
]

GIB_KB = 1024 * 1024  # kB in one GiB

NODE = "sys/devices/system/node"
CPU = "sys/devices/system/cpu"
CGROUP = "sys/fs/cgroup"

_CACHE_SIZES = {(1, "Data"): "48K", (1, "Instruction"): "32K", (2, "Unified"): "2048K"}


def format_mask(ids: Iterable[int], nbits: int | None = None) -> str:
    """Kernel hex mask of ``ids`` in 32-bit words, most significant first (``Cpus_allowed: 00000000,0000000f``).

    ``nbits`` (default: enough for the largest id, at least 32) sets the width. numabind only parses
    masks (:func:`numabind.cpulist.parse_mask`); fake machines write them.
    """
    items = set(ids)
    bad = [i for i in items if not isinstance(i, int) or isinstance(i, bool) or i < 0]
    if bad:
        raise PlanError(f"{bad[0]!r} is not a CPU or node id")
    top = max(items) + 1 if items else 1
    nwords = (max(nbits or 0, top, 1) + 31) // 32
    return ",".join(f"{w:08x}" for w in reversed(ids_to_words(items, nwords * 32, 32)))


def kernel_mask(ids: Iterable[int], nbits: int) -> str:
    """``ids`` as the kernel's ``%*pb`` prints a bitmap of ``nbits`` bits: 32-bit
    words, most significant first, the top word only as wide as its bits need
    (``"3"`` for CPUs 0-1 of a 2-CPU kernel, ``"ff,ffffffff"`` for 40 CPUs)."""
    nbits = max(1, nbits)
    text = format_mask(ids, nbits)
    words = text.split(",")
    top_bits = nbits - 32 * (len(words) - 1)
    words[0] = words[0][-((top_bits + 3) // 4):]
    return ",".join(words)


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
class _NodeSpec:
    id: int
    cpus: frozenset
    memory_kb: int
    distances: dict


@dataclass
class _Cpuset:
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
class _CpuSpec:
    package: int
    core: int
    die: int = 0
    cluster: int | None = None     # None: cluster_id = core id (what x86 kernels write)


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
        self.cpu_specs: dict[int, _CpuSpec] = {}
        self.siblings_override: dict[int, frozenset] = {}
        self.caches: list[tuple[int, str, frozenset]] = []
        self.status: tuple | None = ("default", "default")
        self.cgroup2: _Cpuset | None = None
        self.cgroup1: _Cpuset | None = None
        self.cpuset_fs: _Cpuset | None = None
        self.model_name: str | None = None
        self.arm_cpu = (0x41, 0x3, 0xD0C, 1)           # arm64 cpuinfo: implementer, variant, part, revision
        self.cache_sizes: dict[tuple[int, str], str] = {}   # (level, type) -> size file text (default _CACHE_SIZES)
        self.cppc_highest_perf: int | None = None
        self.memtotal_kb: int | None = None           # proc/meminfo; default: sum of nodes
        self.hugepages: dict[int, dict[int, int]] = {}  # node -> {page kB: count}
        self.cpu_kinds: dict[str, frozenset] = {}     # hybrid PMUs: "cpu_core"/"cpu_atom" -> CPUs
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
        """Nodes the kernel has online; the others get no directory (as on Linux)."""
        self.online_nodes = _ids(nodes)
        return self

    def set_possible_nodes(self, nodes: Iterable[int]) -> FakeMachine:
        self.possible_nodes = _ids(nodes)
        return self

    def set_cpu_topology(self, cpu: int, package: int, core: int,
                         siblings: Iterable[int] | None = None, die: int = 0,
                         cluster: int | None = None) -> FakeMachine:
        """Package, core (and die, cluster) of ``cpu``. Siblings default to the
        online CPUs with the same (package, die, core), as the kernel computes them."""
        self.topology[cpu] = (package, core)
        self.cpu_specs[cpu] = _CpuSpec(package, core, die, cluster)
        if siblings is not None:
            self.siblings_override[cpu] = _ids(siblings)
        return self

    def add_cache(self, level: int, type: str, cpus: Iterable[int]) -> FakeMachine:
        """One cache instance shared by ``cpus`` (type Data, Instruction or Unified)."""
        self.caches.append((level, type, _ids(cpus)))
        return self

    def add_core_caches(self) -> FakeMachine:
        """L1 Data, L1 Instruction and L2 per core (shared by its hyperthreads)."""
        for cpus in sorted(self._core_groups().values(), key=min):
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
                    at: str | None = None, hybrid: bool = False,
                    mount: str | None = None) -> FakeMachine:
        """The process is in cgroup v2 ``path``; ``cpuset.*.effective`` are written in
        ``at`` (default ``path``; an ancestor models a leaf without the cpuset
        controller). The root cgroup gets the machine's CPUs and nodes. ``mount``
        (default ``sys/fs/cgroup``, or ``sys/fs/cgroup/unified`` when ``hybrid``)."""
        if mount is None:
            mount = f"{CGROUP}/unified" if hybrid else CGROUP
        self.cgroup2 = _Cpuset("cgroup2", path, None if cpus is None else _ids(cpus),
                               None if mems is None else _ids(mems), at=at, mount=mount)
        return self

    def set_cgroup1(self, path: str, cpus: Iterable[int], mems: Iterable[int],
                    effective_cpus: Iterable[int] | None = None,
                    effective_mems: Iterable[int] | None = None,
                    mount: str = f"{CGROUP}/cpuset", noprefix: bool = False) -> FakeMachine:
        """The process is in cgroup v1 cpuset ``path`` (``cpuset.cpus``/``cpuset.mems``,
        plus ``cpuset.effective_*`` when given) of the hierarchy mounted at ``mount``."""
        self.cgroup1 = _Cpuset(
            "cgroup1", path, _ids(cpus), _ids(mems),
            None if effective_cpus is None else _ids(effective_cpus),
            None if effective_mems is None else _ids(effective_mems),
            mount=mount, noprefix=noprefix,
        )
        return self

    def set_cpuset_fs(self, path: str, cpus: Iterable[int], mems: Iterable[int],
                      mount: str = "dev/cpuset") -> FakeMachine:
        """The legacy cpuset filesystem (``mount -t cpuset none /dev/cpuset``): files
        ``cpus`` and ``mems`` without a prefix, the path in proc/self/cpuset."""
        self.cpuset_fs = _Cpuset("cpuset", path, _ids(cpus), _ids(mems), mount=mount)
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
                           "initiators": _ids(initiators)}
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

    def _spec(self, cpu: int) -> _CpuSpec:
        return self.cpu_specs.get(cpu) or _CpuSpec(*self.topology[cpu])

    def _core_groups(self) -> dict[tuple, set]:
        cores: dict[tuple, set] = {}
        for cpu in self.topology:
            s = self._spec(cpu)
            cores.setdefault((s.package, s.die, s.core), set()).add(cpu)
        return cores

    def siblings(self, cpu: int) -> frozenset:
        if cpu in self.siblings_override:
            return self.siblings_override[cpu]
        s = self._spec(cpu)
        online = self.online()
        return frozenset(c for c in self.topology if c in online
                         and (self._spec(c).package, self._spec(c).die, self._spec(c).core)
                         == (s.package, s.die, s.core))

    def allowed(self) -> tuple[frozenset, frozenset]:
        """(CPUs, nodes) this description allows the process: what discovery must report."""
        online = self.online()
        nodes = frozenset(self.node_dirs()) if (self.numa_dir and self.nodes) else frozenset({0})
        cpus, mems = online, nodes
        if self.status is not None:
            s_cpus, s_mems = self.status
            if s_cpus not in ("default", None):
                cpus = cpus & s_cpus
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
        return self._layout()[0]

    def links(self) -> dict[str, str]:
        """Every symlink of the tree: relative path -> link target."""
        return self._layout()[1]

    def _layout(self) -> tuple[dict[str, str], dict[str, str]]:
        out: dict[str, str] = {}
        links: dict[str, str] = {}
        online, possible = self.online(), self.possible()
        self._cpu_files(out, links, online, possible)
        if self.numa_dir and self.nodes:
            self._node_files(out, links, online)
        total = self.memtotal_kb
        if total is None:
            total = sum(n.memory_kb for n in self.nodes.values()) or 16 * GIB_KB
        out["proc/meminfo"] = (f"MemTotal:       {total} kB\nMemFree:        {total // 2} kB\n"
                               f"MemAvailable:   {total // 2} kB\n")
        self._process_files(out, online)
        if self.model_name is not None or self.quirks.cpuinfo == "arm64":
            out["proc/cpuinfo"] = self._cpuinfo(online)
        if self.cppc_highest_perf is not None:
            out[f"{CPU}/cpu0/acpi_cppc/highest_perf"] = f"{self.cppc_highest_perf}\n"
        for pmu, cpus in self.cpu_kinds.items():
            out[f"sys/devices/{pmu}/cpus"] = format_cpulist(cpus & online) + "\n"
        for nid, figures in self.hmat.items():
            base = f"{NODE}/node{nid}/access0/initiators"
            for name, value in figures.items():
                if name != "initiators" and value is not None:
                    out[f"{base}/{name}"] = f"{value}\n"
            for ini in sorted(figures["initiators"]):
                links[f"{base}/node{ini}"] = f"../../../node{ini}"
        if self.interleave_weights is not None:
            wdir = "sys/kernel/mm/mempolicy/weighted_interleave"
            for nid, weight in self.interleave_weights.items():
                out[f"{wdir}/node{nid}"] = f"{weight}\n"
            if self.interleave_auto:
                out[f"{wdir}/{self.interleave_auto}"] = "true\n" if self.interleave_auto_value else "false\n"
        if self.quirks.padding:
            for rel, text in out.items():
                if rel.startswith("sys/") and text:
                    out[rel] = text + "\0"
        for rel, text in self.overrides.items():
            if text is None:
                prefix = rel.rstrip("/") + "/"
                for table in (out, links):
                    for key in [k for k in table if k == rel or k.startswith(prefix)]:
                        del table[key]
            else:
                links.pop(rel, None)
                out[rel] = text
        return out, links

    def _cpuinfo(self, online: frozenset) -> str:
        kind = self.quirks.cpuinfo
        blocks = []
        for n in sorted(online):
            if kind == "x86":
                s = self.cpu_specs.get(n)
                blocks.append(
                    f"processor\t: {n}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n"
                    f"model\t\t: 143\nmodel name\t: {self.model_name}\nstepping\t: 8\n"
                    f"physical id\t: {s.package if s else 0}\ncore id\t\t: {s.core if s else n}\n\n")
            elif kind == "power":
                blocks.append(f"processor\t: {n}\ncpu\t\t: {self.model_name}\n"
                              f"clock\t\t: 3800.000000MHz\nrevision\t: 2.3 (pvr 004e 1203)\n\n")
            elif kind == "arm64":
                implementer, variant, part, revision = self.arm_cpu
                blocks.append(f"processor\t: {n}\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\n"
                              f"CPU implementer\t: 0x{implementer:02x}\nCPU architecture: 8\n"
                              f"CPU variant\t: 0x{variant:x}\nCPU part\t: 0x{part:03x}\n"
                              f"CPU revision\t: {revision}\n\n")
            elif kind == "ia64":
                blocks.append(f"processor  : {n}\nvendor     : GenuineIntel\nfamily     : 32\n"
                              f"model name : {self.model_name}\n\n")
            else:
                raise ValueError(f"unknown cpuinfo format {kind!r}")
        text = "".join(blocks)
        if kind == "power":
            text += "timebase\t: 512000000\nplatform\t: PowerNV\nmodel\t\t: 9006-22P\n"
        return text

    def _sets(self, out: dict, base: str, name: str, ids: frozenset, nbits: int,
              list_name: str | None = None) -> None:
        """A mask file ``name`` and its list form (``name_list`` unless given)."""
        q = self.quirks
        if q.masks:
            out[f"{base}/{name}"] = kernel_mask(ids, nbits) + "\n"
        if q.lists:
            out[f"{base}/{list_name or name + '_list'}"] = format_cpulist(ids) + "\n"

    def _cpu_files(self, out: dict, links: dict, online: frozenset, possible: frozenset) -> None:
        q = self.quirks
        nr_cpu_ids = max(possible | online | {0}) + 1
        if q.cpu_online_file:
            out[f"{CPU}/online"] = format_cpulist(online) + "\n"
        out[f"{CPU}/possible"] = format_cpulist(possible) + "\n"
        out[f"{CPU}/present"] = format_cpulist(possible) + "\n"
        out[f"{CPU}/offline"] = format_cpulist(possible - online) + "\n"
        out[f"{CPU}/kernel_max"] = "8191\n"
        per_cpu: dict[int, list] = {}
        for level, ctype, cpus in self.caches:
            for cpu in cpus:
                per_cpu.setdefault(cpu, []).append((level, ctype, cpus))
        node_of = {c: n.id for n in self.nodes.values() for c in n.cpus}
        dirs = set(self.node_dirs())
        groups = {}
        for cpu, spec in ((c, self._spec(c)) for c in self.topology if c in online):
            groups.setdefault(("pkg", spec.package), set()).add(cpu)
            groups.setdefault(("die", spec.package, spec.die), set()).add(cpu)
            cl = spec.cluster if spec.cluster is not None else spec.core
            groups.setdefault(("cl", spec.package, spec.die, cl), set()).add(cpu)
        for cpu in sorted(possible):
            base = f"{CPU}/cpu{cpu}"
            if cpu != 0:
                out[f"{base}/online"] = "1\n" if cpu in online else "0\n"
            elif q.cpu0_online == "empty":
                out[f"{base}/online"] = ""
            elif q.cpu0_online == "file":
                out[f"{base}/online"] = "1\n" if cpu in online else "0\n"
            if cpu not in online:
                continue  # the kernel removes topology/ and cache/ of offline CPUs
            nid = node_of.get(cpu)
            if q.cpu_node_links and nid is not None and nid in dirs:
                links[f"{base}/node{nid}"] = f"../../node/node{nid}"
            if cpu in self.topology:
                spec = self._spec(cpu)
                sibs = self.siblings(cpu)
                pkg = frozenset(groups[("pkg", spec.package)])
                die = frozenset(groups[("die", spec.package, spec.die)])
                cl = spec.cluster if spec.cluster is not None else spec.core
                cluster = frozenset(groups[("cl", spec.package, spec.die, cl)])
                t = f"{base}/topology"
                out[f"{t}/physical_package_id"] = f"{spec.package}\n"
                out[f"{t}/core_id"] = f"{spec.core}\n"
                self._sets(out, t, "thread_siblings", sibs, nr_cpu_ids)
                self._sets(out, t, "core_siblings", pkg, nr_cpu_ids)
                if q.new_names:
                    out[f"{t}/die_id"] = f"{spec.die}\n"
                    out[f"{t}/cluster_id"] = f"{cl}\n"
                    self._sets(out, t, "core_cpus", sibs, nr_cpu_ids)
                    self._sets(out, t, "package_cpus", pkg, nr_cpu_ids)
                    self._sets(out, t, "die_cpus", die, nr_cpu_ids)
                    self._sets(out, t, "cluster_cpus", cluster, nr_cpu_ids)
            kinds = sorted(per_cpu.get(cpu, []), key=lambda c: (c[0], c[1]))
            for index, (level, ctype, cpus) in enumerate(kinds):
                idir = f"{base}/cache/index{index}"
                out[f"{idir}/level"] = f"{level}\n"
                out[f"{idir}/type"] = f"{ctype}\n"
                self._sets(out, idir, "shared_cpu_map", cpus & online, nr_cpu_ids,
                           "shared_cpu_list")
                size = self.cache_sizes.get((level, ctype)) or _CACHE_SIZES.get((level, ctype), "32768K")
                out[f"{idir}/size"] = size + "\n"

    def _node_files(self, out: dict, links: dict, online: frozenset) -> None:
        q = self.quirks
        node_online = self.node_online()
        possible = self.node_possible()
        nr_cpu_ids = max(self.possible() | online | {0}) + 1
        dirs = self.node_dirs()
        out[f"{NODE}/online"] = format_cpulist(node_online) + "\n"
        out[f"{NODE}/possible"] = format_cpulist(possible) + "\n"
        out[f"{NODE}/has_cpu"] = format_cpulist(
            n for n in dirs if self.nodes[n].cpus & online) + "\n"
        out[f"{NODE}/has_memory"] = format_cpulist(
            n for n in dirs if self.nodes[n].memory_kb) + "\n"
        out[f"{NODE}/has_normal_memory"] = out[f"{NODE}/has_memory"]
        order = sorted(possible if q.distance_over == "possible" else node_online)
        for nid in dirs:
            node = self.nodes[nid]
            base = f"{NODE}/node{nid}"
            cpus = node.cpus & online
            if q.lists:
                out[f"{base}/cpulist"] = format_cpulist(cpus) + "\n"
            if q.masks and q.node_cpumap:
                out[f"{base}/cpumap"] = kernel_mask(cpus, nr_cpu_ids) + "\n"
            if q.node_cpu_links:
                for c in sorted(cpus):
                    links[f"{base}/cpu{c}"] = f"../../cpu/cpu{c}"
            kb = node.memory_kb
            huge_kb = sum(size * count for size, count in self.hugepages.get(nid, {}).items())
            out[f"{base}/meminfo"] = (
                f"Node {nid} MemTotal:       {kb} kB\n"
                f"Node {nid} MemFree:        {(kb - huge_kb) // 2} kB\n"
                f"Node {nid} MemUsed:        {kb - (kb - huge_kb) // 2} kB\n"
                f"Node {nid} HugePages_Total: {sum(self.hugepages.get(nid, {}).values())}\n"
            )
            for size, count in self.hugepages.get(nid, {}).items():
                out[f"{base}/hugepages/hugepages-{size}kB/nr_hugepages"] = f"{count}\n"
                out[f"{base}/hugepages/hugepages-{size}kB/free_hugepages"] = f"{count}\n"
            row = [node.distances.get(o, 10 if o == nid else 20) for o in order]
            out[f"{base}/distance"] = " ".join(str(d) for d in row) + "\n"

    def _process_files(self, out: dict, online: frozenset) -> None:
        mems_all = frozenset(self.node_dirs()) if (self.numa_dir and self.nodes) else frozenset({0})
        if self.status is not None:
            cpus, mems = self.status
            cpus = online if cpus == "default" else cpus
            mems = mems_all if mems == "default" else mems
            lines = ["Name:\tpython3", "State:\tR (running)", "Pid:\t4242"]
            if cpus is not None:
                lines += [f"Cpus_allowed:\t{kernel_mask(cpus, max(self.possible() | {0}) + 1)}",
                          f"Cpus_allowed_list:\t{format_cpulist(cpus)}"]
            if mems is not None:
                lines += [f"Mems_allowed:\t{format_mask(mems, 1024)}",
                          f"Mems_allowed_list:\t{format_cpulist(mems)}"]
            lines.append("voluntary_ctxt_switches:\t3")
            out["proc/self/status"] = "\n".join(lines) + "\n"
        mounts = ["sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0",
                  "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0"]
        cgroup_lines = []
        if self.cgroup2 is not None:
            cg = self.cgroup2
            cgroup_lines.append(f"0::{cg.path}")
            mounts.append(f"cgroup2 /{cg.mount} cgroup2 rw,nosuid,nodev,noexec,relatime 0 0")
            out[f"{cg.mount}/cgroup.controllers"] = "cpuset cpu io memory pids\n"
            out[f"{cg.mount}/cpuset.cpus.effective"] = format_cpulist(online) + "\n"
            out[f"{cg.mount}/cpuset.mems.effective"] = format_cpulist(mems_all) + "\n"
            at = cg.path if cg.at is None else cg.at
            d = cg.mount + ("" if at == "/" else at)
            out[f"{d}/cgroup.procs"] = "4242\n"
            if cg.cpus is not None:
                out[f"{d}/cpuset.cpus.effective"] = format_cpulist(cg.cpus) + "\n"
            if cg.mems is not None:
                out[f"{d}/cpuset.mems.effective"] = format_cpulist(cg.mems) + "\n"
            if at != cg.path:
                out[f"{cg.mount}{cg.path}/cgroup.procs"] = "4242\n"
        for cg in (self.cgroup1, self.cpuset_fs):
            if cg is None:
                continue
            legacy = cg.kind == "cpuset"
            prefix = "" if (legacy or cg.noprefix) else "cpuset."
            if legacy:
                mounts.append(f"none /{cg.mount} cpuset rw,relatime 0 0")
            else:
                opts = "rw,nosuid,nodev,noexec,relatime,cpuset" + (",noprefix" if cg.noprefix else "")
                mounts.append(f"cgroup /{cg.mount} cgroup {opts} 0 0")
                cgroup_lines.insert(0, f"4:memory:{cg.path}")
            cgroup_lines.insert(0, f"3:cpuset:{cg.path}")
            out["proc/self/cpuset"] = cg.path + "\n"
            out[f"{cg.mount}/{prefix}cpus"] = format_cpulist(online) + "\n"
            out[f"{cg.mount}/{prefix}mems"] = format_cpulist(mems_all) + "\n"
            d = cg.mount + ("" if cg.path == "/" else cg.path)
            out[f"{d}/{prefix}cpus"] = format_cpulist(cg.cpus) + "\n"
            out[f"{d}/{prefix}mems"] = format_cpulist(cg.mems) + "\n"
            out[f"{d}/tasks"] = "4242\n"
            if cg.effective_cpus is not None:
                out[f"{d}/{prefix}effective_cpus"] = format_cpulist(cg.effective_cpus) + "\n"
            if cg.effective_mems is not None:
                out[f"{d}/{prefix}effective_mems"] = format_cpulist(cg.effective_mems) + "\n"
        if cgroup_lines:
            out["proc/self/cgroup"] = "\n".join(cgroup_lines) + "\n"
        if self.quirks.proc_mounts:
            out["proc/mounts"] = "\n".join(mounts) + "\n"

    def write(self) -> Path:
        """Write (or rewrite) the tree; returns the root. Idempotent."""
        files, links = self._layout()
        wanted = {**{k: "file" for k in files}, **{k: "link" for k in links}}
        for rel in sorted(set(self._written) - set(wanted), reverse=True):
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
            if self._written.get(rel) == "link" or path.is_symlink():
                path.unlink()
            path.write_text(text)
        for rel, target in links.items():
            path = self.root / rel
            if path.parent not in made:
                path.parent.mkdir(parents=True, exist_ok=True)
                made.add(path.parent)
            if os.path.lexists(path):
                if path.is_symlink() and os.readlink(path) == target:
                    continue
                path.unlink()
            os.symlink(target, path)
        self._written = wanted
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
                 f"cores {sorted((min(c), format_cpulist(c)) for c in self._core_groups().values())}",
                 f"caches {[(lvl, t[0], format_cpulist(c)) for lvl, t, c in self.caches]}",
                 f"status {self.status}", f"quirks {changed}"]
        for cg in (self.cgroup2, self.cgroup1, self.cpuset_fs):
            if cg is not None:
                parts.append(f"{cg.kind} {cg.path!r} at {cg.at!r} mount {cg.mount!r} "
                             f"noprefix={cg.noprefix} cpus {format_cpulist(cg.cpus or ())} "
                             f"mems {format_cpulist(cg.mems or ())}")
        return "FakeMachine(" + "; ".join(parts) + ")"


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
    """two_sockets(8) in a cgroup v1 cpuset ``/docker/abc``: cpuset.cpus 0-3,8-11,
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


def old_kernel(root) -> FakeMachine:
    """two_sockets(8) as a 3.x/4.x kernel writes it: hex masks only (no cpulist,
    no *_list files), no core_cpus/package_cpus/die_*/cluster_*, no cpu0/online."""
    m = two_sockets(root, 8)
    m.set_quirks(lists=False, new_names=False)
    m.write()
    return m


def padded(root) -> FakeMachine:
    """snc() as some dump tools copy it: every sys/ file has a NUL after its text,
    and cpu0/online is an empty file."""
    m = snc(root)
    m.set_quirks(padding=True, cpu0_online="empty")
    m.write()
    return m


def offline_node0(root) -> FakeMachine:
    """Node 0 offline with its CPUs 0-3 (no directory, as Linux has it); nodes 1 and 2
    online with CPUs 4-7 and 8-11; possible nodes 0-2; the distance rows cover the
    possible nodes (``node1/distance`` = ``21 10 20``), as some firmwares make them."""
    m = FakeMachine(root)
    m.add_node(0, range(0, 4), 32 * GIB_KB, {1: 21, 2: 21})
    m.add_node(1, range(4, 8), 32 * GIB_KB, {0: 21, 2: 20})
    m.add_node(2, range(8, 12), 32 * GIB_KB, {0: 21, 1: 20})
    for cpu in range(12):
        m.set_cpu_topology(cpu, cpu // 4, cpu % 4)
    m.set_possible_cpus(range(12)).set_online_cpus(range(4, 12))
    m.set_online_nodes({1, 2}).set_possible_nodes({0, 1, 2})
    m.set_quirks(distance_over="possible")
    m.add_core_caches()
    m.write()
    return m


def legacy_cpuset(root) -> FakeMachine:
    """two_sockets(8) with the legacy cpuset filesystem at /dev/cpuset (cpus 4-7,12-15,
    mems 1), found through proc/mounts; no proc/self/status (as in a dump)."""
    m = two_sockets(root, 8)
    m.remove_status()
    m.set_cpuset_fs("/batch/job42", (4, 5, 6, 7, 12, 13, 14, 15), (1,))
    m.write()
    return m


def gpu_memory_cpuset(root) -> FakeMachine:
    """Two CPU nodes (0: 0-7, 8: 8-15) and six GPU memory nodes 250-255 without CPUs
    (96 GiB each); a cgroup v2 cpuset with mems 0,8,250-255 and CPUs 2-7,8-9."""
    m = FakeMachine(root)
    gpu = range(250, 256)
    m.add_node(0, range(0, 8), 240 * GIB_KB, {8: 40, **{g: 80 for g in gpu}})
    m.add_node(8, range(8, 16), 240 * GIB_KB, {0: 40, **{g: 80 for g in gpu}})
    for g in gpu:
        m.add_node(g, (), 96 * GIB_KB, {0: 80, 8: 80, **{o: 120 for o in gpu if o != g}})
    for cpu in range(16):
        m.set_cpu_topology(cpu, cpu // 8, cpu % 8)
    m.add_core_caches().add_cache(3, "Unified", range(8)).add_cache(3, "Unified", range(8, 16))
    m.set_possible_nodes(range(256))
    m.remove_status()
    m.set_cgroup2("/slurm/job1", (2, 3, 4, 5, 6, 7, 8, 9), (0, 8, *gpu))
    m.set_model_name("Fake Grace CPU")
    m.write()
    return m


def many_nodes(root, nodes: int = 72, cpus_per_node: int = 2) -> FakeMachine:
    """More than 64 nodes (two 32-bit words of node masks and more): ``nodes`` nodes
    of ``cpus_per_node`` CPUs, one package per 8 nodes."""
    m = FakeMachine(root)
    for n in range(nodes):
        cpus = range(n * cpus_per_node, (n + 1) * cpus_per_node)
        m.add_node(n, cpus, 4 * GIB_KB,
                   {o: (10 if o == n else 16 if o // 8 == n // 8 else 32) for o in range(nodes)})
        for c in cpus:
            m.set_cpu_topology(c, n // 8, c % (8 * cpus_per_node))
    m.write()
    return m


def hybrid(root) -> FakeMachine:
    """An Alder Lake-like hybrid: 8 P-cores with SMT (CPUs 0-15, core ids 0,4,8,...)
    and 8 E-cores without (CPUs 16-23, core ids 32-39) sharing an L2 per 4 E-cores;
    one L3; the kernel's cpu_core/cpu_atom PMU lists."""
    m = FakeMachine(root)
    m.add_node(0, range(24), 32 * GIB_KB)
    for k in range(8):
        for t in range(2):
            m.set_cpu_topology(2 * k + t, 0, 4 * k)
    for e in range(8):
        m.set_cpu_topology(16 + e, 0, 32 + e, cluster=100 + e // 4)
    for k in range(8):
        pair = {2 * k, 2 * k + 1}
        m.add_cache(1, "Data", pair).add_cache(1, "Instruction", pair)
        m.add_cache(2, "Unified", pair)
    for e in range(8):
        m.add_cache(1, "Data", {16 + e}).add_cache(1, "Instruction", {16 + e})
    m.add_cache(2, "Unified", range(16, 20)).add_cache(2, "Unified", range(20, 24))
    m.add_cache(3, "Unified", range(24))
    m.cpu_kinds = {"cpu_core": frozenset(range(16)), "cpu_atom": frozenset(range(16, 24))}
    m.set_model_name("12th Gen Intel(R) Core(TM) i9-12900K")
    m.write()
    return m


def arm_clusters(root) -> FakeMachine:
    """An arm64 server: 1 package, 2 nodes of 8 cores, clusters of 4 cores sharing
    an L2 (``cluster_id``), no SMT, no ``model name`` in cpuinfo."""
    m = FakeMachine(root)
    m.add_node(0, range(8), 64 * GIB_KB, {1: 15})
    m.add_node(1, range(8, 16), 64 * GIB_KB, {0: 15})
    for c in range(16):
        m.set_cpu_topology(c, 0, c, cluster=c // 4)
        m.add_cache(1, "Data", {c}).add_cache(1, "Instruction", {c})
    for cl in range(4):
        m.add_cache(2, "Unified", range(4 * cl, 4 * cl + 4))
    m.add_cache(3, "Unified", range(16))
    m.set_model_name("unused on arm64")
    m.set_quirks(cpuinfo="arm64")
    m.write()
    return m


def multi_die(root) -> FakeMachine:
    """2 packages x 2 dies x 4 cores x 2 threads, one node and one L3 per die
    (``die_id``, ``die_cpus``); core ids restart in each die."""
    m = FakeMachine(root)
    ncores = 2 * 2 * 4
    for t in range(2):
        for p in range(2):
            for d in range(2):
                for k in range(4):
                    cpu = t * ncores + (p * 2 + d) * 4 + k
                    m.set_cpu_topology(cpu, p, k, die=d)
    for p in range(2):
        for d in range(2):
            cpus = [c for c, s in m.cpu_specs.items() if (s.package, s.die) == (p, d)]
            nid = 2 * p + d
            m.add_node(nid, cpus, 16 * GIB_KB,
                       {o: (10 if o == nid else 12 if o // 2 == p else 21) for o in range(4)})
            m.add_cache(3, "Unified", cpus)
    m.add_core_caches()
    m.set_model_name("Fake multi-die CPU")
    m.write()
    return m


def power_cpuinfo(root) -> FakeMachine:
    """A POWER9-like box: 2 sockets x 4 cores x SMT4 (threads numbered per core),
    sparse node ids 0 and 8, cpuinfo with ``cpu`` instead of ``model name``."""
    m = FakeMachine(root)
    for p, nid in enumerate((0, 8)):
        cpus = range(16 * p, 16 * p + 16)
        m.add_node(nid, cpus, 128 * GIB_KB, {8 - nid: 40})
        for c in cpus:
            m.set_cpu_topology(c, p, 8 * p + (c % 16) // 4)
        m.add_cache(3, "Unified", cpus)
    m.add_core_caches()
    m.set_possible_nodes(range(16))
    m.set_model_name("POWER9 (raw), altivec supported")
    m.set_quirks(cpuinfo="power")
    m.write()
    return m


def _arm64_cores(m: FakeMachine, cpus: Iterable[int], package: int, cluster_cores: int | None,
                 first_cluster: int) -> None:
    """arm64 cores without SMT: core ids as the kernel numbers them from the PPTT (per package), L1d, L1i
    and L2 private to each core; clusters of ``cluster_cores`` cores (ids from ``first_cluster``), else
    each core its own cluster."""
    for k, cpu in enumerate(cpus):
        cluster = None if cluster_cores is None else first_cluster + k // cluster_cores
        m.set_cpu_topology(cpu, package, k, cluster=cluster)
        m.add_cache(1, "Data", {cpu}).add_cache(1, "Instruction", {cpu}).add_cache(2, "Unified", {cpu})


def grace_hopper(root, l3: bool = True, cluster_cores: int | None = None) -> FakeMachine:
    """NVIDIA GH200: one Grace (72 Neoverse V2 cores, CPUs 0-71, no SMT) on node 0 with 480 GiB; the
    Hopper GPU's memory as node 1 (96 GiB, no CPUs) and nodes 2-9 empty (MIG's spare nodes); distance
    80 between the CPU and the GPU memory. L1d/L1i 64 KiB and L2 1 MiB per core, and the 114 MiB L3 of
    the whole chip unless ``l3=False`` (a PPTT that leaves the system-level cache out); clusters of
    ``cluster_cores`` cores when given, else each core its own (no cluster level in the PPTT)."""
    m = FakeMachine(root)
    m.add_node(0, range(72), 480 * GIB_KB, {o: 80 for o in range(1, 10)})
    m.add_node(1, (), 96 * GIB_KB, {o: 80 for o in range(10) if o != 1})
    for nid in range(2, 10):
        m.add_node(nid, (), 0, {o: 80 for o in range(10) if o != nid})
    _arm64_cores(m, range(72), 0, cluster_cores, 0)
    if l3:
        m.add_cache(3, "Unified", range(72))
    m.cache_sizes = {(1, "Data"): "64K", (1, "Instruction"): "64K", (2, "Unified"): "1024K",
                     (3, "Unified"): "116736K"}
    m.set_arm_cpu(0x41, 0xD4F)
    m.write()
    return m


def grace_blackwell(root, l3: bool = True, cluster_cores: int | None = None) -> FakeMachine:
    """NVIDIA GB200 (a compute tray: two Grace, four Blackwell GPUs): 2 packages of 72 Neoverse V2 cores
    (no SMT), node 0 = CPUs 0-71 and node 1 = CPUs 72-143 (480 GiB each, distance 40), the GPUs' memory
    as nodes 2-5 (186 GiB each, no CPUs; 2-3 near node 0, 4-5 near node 1). Caches as
    :func:`grace_hopper`'s, per package; ``l3`` and ``cluster_cores`` likewise."""
    m = FakeMachine(root)
    near = {2: 0, 3: 0, 4: 1, 5: 1}
    matrix = {0: {1: 40}, 1: {0: 40}}
    for g, cpu_node in near.items():
        for n in (0, 1):
            matrix[n][g] = 80 if n == cpu_node else 120
        matrix[g] = {o: (80 if o == cpu_node else 120 if o in (0, 1) else 200) for o in range(6) if o != g}
    m.add_node(0, range(72), 480 * GIB_KB, matrix[0])
    m.add_node(1, range(72, 144), 480 * GIB_KB, matrix[1])
    for g in near:
        m.add_node(g, (), 186 * GIB_KB, matrix[g])
    for p in range(2):
        _arm64_cores(m, range(72 * p, 72 * p + 72), p, cluster_cores,
                     0 if cluster_cores is None else p * (72 // cluster_cores + 1))
        if l3:
            m.add_cache(3, "Unified", range(72 * p, 72 * p + 72))
    m.cache_sizes = {(1, "Data"): "64K", (1, "Instruction"): "64K", (2, "Unified"): "1024K",
                     (3, "Unified"): "116736K"}
    m.set_arm_cpu(0x41, 0xD4F)
    m.write()
    return m


def kunpeng920(root) -> FakeMachine:
    """A 2-socket HiSilicon Kunpeng 920 (6426-like): 2 packages x 2 dies (one node each) x 32 cores, no
    SMT (CPUs 0-127); clusters of 4 cores (the PPTT's CCLs), L1d/L1i 64 KiB and L2 512 KiB per core, a
    32 MiB L3 per die; distances 12 within a package, 20-24 across (the firmware's SLIT)."""
    m = FakeMachine(root)
    matrix = {0: {0: 10, 1: 12, 2: 20, 3: 22}, 1: {0: 12, 1: 10, 2: 22, 3: 24},
              2: {0: 20, 1: 22, 2: 10, 3: 12}, 3: {0: 22, 1: 24, 2: 12, 3: 10}}
    for nid in range(4):
        cpus = range(32 * nid, 32 * nid + 32)
        m.add_node(nid, cpus, 128 * GIB_KB, matrix[nid])
    for p in range(2):
        _arm64_cores(m, range(64 * p, 64 * p + 64), p, 4, 16 * p)
    for nid in range(4):
        m.add_cache(3, "Unified", range(32 * nid, 32 * nid + 32))
    m.cache_sizes = {(1, "Data"): "64K", (1, "Instruction"): "64K", (2, "Unified"): "512K",
                     (3, "Unified"): "32768K"}
    m.set_arm_cpu(0x48, 0xD01, variant=0x1)
    m.write()
    return m


def grace_hopper_no_l3(root) -> FakeMachine:
    """:func:`grace_hopper` whose firmware leaves the L3 out of the PPTT."""
    return grace_hopper(root, l3=False)


def grace_blackwell_no_l3(root) -> FakeMachine:
    """:func:`grace_blackwell` whose firmware leaves the L3 out of the PPTT."""
    return grace_blackwell(root, l3=False)


def grace_blackwell_clusters(root) -> FakeMachine:
    """:func:`grace_blackwell` without the L3, whose PPTT has clusters of 4 cores."""
    return grace_blackwell(root, l3=False, cluster_cores=4)


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
    "old_kernel": old_kernel,
    "padded": padded,
    "offline_node0": offline_node0,
    "legacy_cpuset": legacy_cpuset,
    "gpu_memory_cpuset": gpu_memory_cpuset,
    "many_nodes": many_nodes,
    "hybrid": hybrid,
    "arm_clusters": arm_clusters,
    "multi_die": multi_die,
    "power_cpuinfo": power_cpuinfo,
    "grace_hopper": grace_hopper,
    "grace_hopper_no_l3": grace_hopper_no_l3,
    "grace_blackwell": grace_blackwell,
    "grace_blackwell_no_l3": grace_blackwell_no_l3,
    "grace_blackwell_clusters": grace_blackwell_clusters,
    "kunpeng920": kunpeng920,
}

#: The ready-made machines the hwloc oracle test reads with lstopo (every one).
ORACLE_FACTORIES: dict[str, Callable[..., FakeMachine]] = dict(FACTORIES)


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
