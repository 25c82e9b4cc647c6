"""Ready-made fake machines (each takes the root first and returns the written machine), listed in
:data:`FACTORIES`; the ``fake_machine`` factory fixture; :class:`RecordingReader`, an FsReader that
counts what discovery reads."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from pathlib import Path

from numabind._fs import FsReader

from .machine import FakeMachine
from .masks import GIB_KB

try:
    import pytest
except ImportError:  # the benchmark uses the builder without pytest
    pytest = None

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


def hybrid_laptop(root) -> FakeMachine:
    """An Alder Lake-H-like laptop: 6 P-cores with SMT (CPUs 0-11, core ids 0,4,...,20) and 8 E-cores
    without (CPUs 12-19, core ids 24-31) in two clusters of 4 sharing an L2; one L3, one node; the kernel's
    cpu_core/cpu_atom PMU lists."""
    m = FakeMachine(root)
    m.add_node(0, range(20), 16 * GIB_KB)
    for k in range(6):
        pair = {2 * k, 2 * k + 1}
        for c in sorted(pair):
            m.set_cpu_topology(c, 0, 4 * k)
        m.add_cache(1, "Data", pair).add_cache(1, "Instruction", pair).add_cache(2, "Unified", pair)
    for e in range(8):
        m.set_cpu_topology(12 + e, 0, 24 + e, cluster=100 + e // 4)
        m.add_cache(1, "Data", {12 + e}).add_cache(1, "Instruction", {12 + e})
    m.add_cache(2, "Unified", range(12, 16)).add_cache(2, "Unified", range(16, 20))
    m.add_cache(3, "Unified", range(20))
    m.cpu_kinds = {"cpu_core": frozenset(range(12)), "cpu_atom": frozenset(range(12, 20))}
    m.set_model_name("12th Gen Intel(R) Core(TM) i7-12700H")
    m.write()
    return m


def big_little(root) -> FakeMachine:
    """An arm64 big.LITTLE board: 4 LITTLE cores (CPUs 0-3, ``cpu_capacity`` 446) and 4 big ones (CPUs 4-7,
    1024), a cluster and an L2 each, one node; no hybrid PMU lists (arm64 kernels write none)."""
    m = FakeMachine(root)
    m.add_node(0, range(8), 8 * GIB_KB)
    for c in range(8):
        m.set_cpu_topology(c, 0, c, cluster=c // 4)
        m.add_cache(1, "Data", {c}).add_cache(1, "Instruction", {c})
        m.cpu_capacity[c] = 446 if c < 4 else 1024
    m.add_cache(2, "Unified", range(4)).add_cache(2, "Unified", range(4, 8))
    m.set_quirks(cpuinfo="arm64")
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
    "hybrid_laptop": hybrid_laptop,
    "big_little": big_little,
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


def make_factory(base: Path) -> Callable[..., FakeMachine]:
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
        return make_factory(tmp_path)
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
