"""Discovery of synthetic sysfs/procfs trees (exact results) and of this host."""

from __future__ import annotations

import collections
import copy
import dataclasses
import json
import os
import pickle
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numabind._cgroup import Cpuset, read_cpuset
from numabind._fs import FsReader
from numabind.cpulist import format_cpulist, parse_cpulist
from numabind.errors import NumabindError
from numabind.topology import (
    Cache,
    Cpu,
    MemoryAccess,
    Topology,
    discover,
    discover_from,
)

from .fakegpu import add_nvidia_gpu, nv_uuid
from .lstopo import LSTOPO, differences, lstopo_view
from .fakesys import (
    GIB_KB,
    FakeMachine,
    RecordingReader,
    arm_clusters,
    big,
    cgroup_restricted,
    cgroup_v1_restricted,
    fake_machine,  # noqa: F401  (pytest fixture)
    gpu_memory_cpuset,
    hybrid,
    legacy_cpuset,
    many_nodes,
    memory_only_nodes,
    multi_die,
    no_numa_dir,
    offline_cpus,
    offline_node0,
    old_kernel,
    one_node,
    padded,
    power_cpuinfo,
    snc,
    sparse_nodes,
    two_sockets,
)

L = parse_cpulist
GIB = 1024 ** 3
NODE = "sys/devices/system/node"
CPU = "sys/devices/system/cpu"


@pytest.fixture(autouse=True)
def _no_fsroot_env(monkeypatch):
    monkeypatch.delenv("NUMABIND_FSROOT", raising=False)
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                "ZE_AFFINITY_MASK", "NUMABIND_GPU_VENDOR", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(var, raising=False)


def nodes_summary(t: Topology) -> dict:
    return {n.id: (n.cpus, n.memory_bytes, dict(n.distances)) for n in t.nodes.values()}


def caches_summary(t: Topology) -> list:
    return [(c.level, c.type, c.cpus) for c in t.caches]


# -- machine classes ------------------------------------------------------------------


def test_one_node(tmp_path):
    one_node(tmp_path, ncpus=4)
    t = discover(tmp_path)
    assert t.root == str(tmp_path)
    assert nodes_summary(t) == {0: (L("0-3"), 16 * GIB, {0: 10})}
    assert t.online_cpus == t.possible_cpus == t.allowed_cpus == L("0-3")
    assert t.online_nodes == t.possible_nodes == t.allowed_nodes == {0}
    assert t.allowed_source == "status"
    assert dict(t.cpus) == {c: Cpu(c, 0, 0, c, frozenset({c})) for c in range(4)}
    assert caches_summary(t) == (
        [(1, "Data", {c}) for c in range(4)]
        + [(1, "Instruction", {c}) for c in range(4)]
        + [(2, "Unified", {c}) for c in range(4)]
        + [(3, "Unified", L("0-3"))]
    )
    assert t.llc_groups() == (L("0-3"),)
    assert t.model_name == "Fake CPU @ 2.00GHz"
    assert t.cppc_highest_perf is None
    assert t.gpus == ()
    assert t.package_nodes() == {0: {0}}
    assert t.nodes_with_memory == t.nodes_with_cpus == {0}


def test_two_sockets_smt_numbering(tmp_path):
    two_sockets(tmp_path, cpus_per_socket=8)
    t = discover(tmp_path)
    assert nodes_summary(t) == {
        0: (L("0-3,8-11"), 64 * GIB, {0: 10, 1: 21}),
        1: (L("4-7,12-15"), 64 * GIB, {0: 21, 1: 10}),
    }
    assert t.cpus[8] == Cpu(8, 0, 0, 0, L("0,8"))
    assert t.cpus[13] == Cpu(13, 1, 1, 1, L("5,13"))
    assert t.cpus[7] == Cpu(7, 1, 1, 3, L("7,15"))
    assert t.package_nodes() == {0: {0}, 1: {1}}
    assert t.package_cpus() == {0: L("0-3,8-11"), 1: L("4-7,12-15")}
    assert t.llc_groups() == (L("0-3,8-11"), L("4-7,12-15"))
    assert len(t.caches) == 8 * 3 + 2
    assert t.caches[0] == Cache(1, "Data", L("0,8"))
    assert t.caches[-1] == Cache(3, "Unified", L("4-7,12-15"))
    assert t.allowed_cpus == L("0-15") and t.allowed_nodes == {0, 1}
    assert t.model_name == "Intel(R) Xeon(R) Platinum 8480+"


def test_two_sockets_without_smt(tmp_path):
    two_sockets(tmp_path, cpus_per_socket=6, smt=False)
    t = discover(tmp_path)
    assert {n: node.cpus for n, node in t.nodes.items()} == {0: L("0-5"), 1: L("6-11")}
    assert all(c.siblings == {c.id} for c in t.cpus.values())
    assert t.cpus[9] == Cpu(9, 1, 1, 3, frozenset({9}))
    assert t.to_dict()["cpus"]["threads_per_core"] == 1


def test_snc_several_nodes_per_package(tmp_path):
    snc(tmp_path)  # 2 packages x 2 nodes x 4 cores x 2 threads
    t = discover(tmp_path)
    assert nodes_summary(t) == {
        0: (L("0-3,16-19"), 32 * GIB, {0: 10, 1: 12, 2: 21, 3: 21}),
        1: (L("4-7,20-23"), 32 * GIB, {0: 12, 1: 10, 2: 21, 3: 21}),
        2: (L("8-11,24-27"), 32 * GIB, {0: 21, 1: 21, 2: 10, 3: 12}),
        3: (L("12-15,28-31"), 32 * GIB, {0: 21, 1: 21, 2: 12, 3: 10}),
    }
    assert t.package_nodes() == {0: {0, 1}, 1: {2, 3}}
    assert t.llc_groups() == (L("0-7,16-23"), L("8-15,24-31"))
    assert t.cpus[20] == Cpu(20, 1, 0, 4, L("4,20"))
    assert t.node_of_cpu(27) == 2


def test_nps_core_complexes(tmp_path):
    snc(tmp_path, sockets=1, nodes_per_socket=4, cores_per_node=2, smt=False, ccx_cores=4)
    t = discover(tmp_path)
    assert {n: node.cpus for n, node in t.nodes.items()} == {
        0: L("0-1"), 1: L("2-3"), 2: L("4-5"), 3: L("6-7")}
    assert dict(t.nodes[0].distances) == {0: 10, 1: 12, 2: 12, 3: 12}
    assert t.llc_groups() == (L("0-3"), L("4-7"))
    assert t.package_nodes() == {0: {0, 1, 2, 3}}


def test_memory_only_and_empty_nodes(tmp_path):
    memory_only_nodes(tmp_path)
    t = discover(tmp_path)
    assert {n: (node.cpus, node.memory_bytes) for n, node in t.nodes.items()} == {
        0: (L("0-7"), 64 * GIB),
        1: (L("8-15"), 64 * GIB),
        2: (frozenset(), 128 * GIB),
        3: (frozenset(), 96 * GIB),
        4: (frozenset(), 0),
    }
    assert dict(t.nodes[2].distances) == {0: 24, 1: 26, 2: 10, 3: 80, 4: 80}
    assert dict(t.nodes[3].distances) == {0: 80, 1: 80, 2: 80, 3: 10, 4: 80}
    assert t.nodes_with_memory == {0, 1, 2, 3}
    assert t.nodes_with_cpus == {0, 1}
    assert not t.nodes[2].has_cpus and t.nodes[2].has_memory
    assert not t.nodes[4].has_cpus and not t.nodes[4].has_memory
    assert t.online_nodes == t.possible_nodes == t.allowed_nodes == L("0-4")
    assert t.package_nodes() == {0: {0}, 1: {1}}
    assert t.online_cpus == L("0-15")


def test_offline_cpus_and_cpu_only_node(tmp_path):
    offline_cpus(tmp_path)
    t = discover(tmp_path)
    online = L("0-2,4-5,8-11,13-15")
    assert t.online_cpus == online
    assert t.possible_cpus == L("0-15")
    assert set(t.cpus) == online
    assert nodes_summary(t) == {
        0: (L("0-2,4-5"), 32 * GIB, {0: 10, 1: 21}),
        1: (L("8-11,13-15"), 0, {0: 21, 1: 10}),
    }
    assert t.nodes_with_memory == {0} and t.nodes_with_cpus == {0, 1}
    assert t.cpus[2].siblings == {2}           # its sibling 3 is offline
    assert t.cpus[13] == Cpu(13, 1, 1, 2, frozenset({13}))
    assert t.cpus[14].siblings == {14, 15}
    assert t.node_of_cpu(3) is None and t.node_of_cpu(4) == 0 and t.node_of_cpu(99) is None
    assert caches_summary(t) == [
        (2, "Unified", L("0-1")), (2, "Unified", L("2")), (2, "Unified", L("4-5")),
        (2, "Unified", L("8-9")), (2, "Unified", L("10-11")), (2, "Unified", L("13")),
        (2, "Unified", L("14-15")),
        (3, "Unified", L("0-2,4-5")), (3, "Unified", L("8-11,13-15")),
    ]
    assert t.allowed_cpus == online


def test_offline_cpus_listed_by_an_odd_node_cpulist_are_dropped(tmp_path):
    m = offline_cpus(tmp_path)
    m.set_file(f"{NODE}/node0/cpulist", "0-7\n").write()
    t = discover(tmp_path)
    assert t.nodes[0].cpus == L("0-2,4-5")


def test_sparse_node_ids(tmp_path):
    sparse_nodes(tmp_path)
    t = discover(tmp_path)
    assert nodes_summary(t) == {
        0: (L("0-3"), 8 * GIB, {0: 10, 2: 20, 5: 30}),
        2: (L("4-7"), 8 * GIB, {0: 20, 2: 10, 5: 25}),
        5: (L("8-11"), 4 * GIB, {0: 30, 2: 25, 5: 10}),
    }
    assert t.online_nodes == {0, 2, 5} and t.allowed_nodes == {0, 2, 5}
    assert t.possible_nodes == L("0-7")
    assert t.cpus[9].node == 5
    assert t.package_nodes() == {0: {0}, 1: {2}, 2: {5}}
    assert t.caches == () and t.llc_groups() == ()
    assert list(t.nodes) == [0, 2, 5]


def test_cgroup_v2_restriction_is_intersected_with_affinity(tmp_path):
    cgroup_restricted(tmp_path)
    t = discover(tmp_path)
    assert t.allowed_cpus == L("4-7,12-15")
    assert t.allowed_nodes == {1}
    assert t.allowed_source == "status+cgroup2:/kubepods/pod7/ctr"
    assert t.online_cpus == L("0-15")             # the machine is still whole


def test_cgroup_v2_nearest_ancestor_with_cpuset(tmp_path):
    m = two_sockets(tmp_path, 8)
    m.set_cgroup2("/system.slice/job.service", L("0-3"), L("0"), at="/system.slice").write()
    t = discover(tmp_path)
    assert (t.allowed_cpus, t.allowed_nodes) == (L("0-3"), {0})
    assert t.allowed_source == "status+cgroup2:/system.slice"


def test_cgroup_v2_falls_back_to_the_root_cgroup(tmp_path):
    m = two_sockets(tmp_path, 8)
    m.set_cgroup2("/user.slice/session-1.scope", None, None).write()
    t = discover(tmp_path)
    assert (t.allowed_cpus, t.allowed_nodes) == (L("0-15"), {0, 1})
    assert t.allowed_source == "status+cgroup2:/"


def test_cgroup_v2_hybrid_mount(tmp_path):
    m = two_sockets(tmp_path, 8)
    m.set_cgroup2("/ctr", L("8-11"), L("0"), hybrid=True).write()
    t = discover(tmp_path)
    assert (t.allowed_cpus, t.allowed_nodes) == (L("8-11"), {0})
    assert t.allowed_source == "status+cgroup2:/ctr"


def test_cgroup_path_cannot_escape_the_mount(tmp_path):
    m = two_sockets(tmp_path, 8)
    m.set_cgroup2("/../../ctr", L("1-2"), L("1"), at="/ctr").write()
    t = discover(tmp_path)
    assert t.allowed_source == "status+cgroup2:/ctr"
    assert t.allowed_cpus == L("1-2")


def test_cgroup_v1_effective_files_win(tmp_path):
    cgroup_v1_restricted(tmp_path)
    t = discover(tmp_path)
    assert t.allowed_cpus == L("0-2,8-10")
    assert t.allowed_nodes == {0}
    assert t.allowed_source == "status+cgroup1:/docker/abc"


def test_cgroup_v1_without_effective_files(tmp_path):
    m = two_sockets(tmp_path, 8)
    m.set_cgroup1("/docker/abc", L("0-3,8-11"), L("0")).write()
    t = discover(tmp_path)
    assert (t.allowed_cpus, t.allowed_nodes) == (L("0-3,8-11"), {0})


def test_cgroup_v1_path_from_proc_self_cgroup(tmp_path):
    m = two_sockets(tmp_path, 8)
    m.set_cgroup1("/docker/abc", L("4-7"), L("1")).remove_file("proc/self/cpuset").write()
    t = discover(tmp_path)
    assert (t.allowed_cpus, t.allowed_nodes) == (L("4-7"), {1})
    assert t.allowed_source == "status+cgroup1:/docker/abc"


def test_read_cpuset_v2_v1_and_none(tmp_path):
    m = cgroup_restricted(tmp_path / "v2")
    assert read_cpuset(FsReader(m.root)) == Cpuset(
        L("4-7,12-15"), frozenset({1}), "cgroup2:/kubepods/pod7/ctr")
    m = cgroup_v1_restricted(tmp_path / "v1")
    assert read_cpuset(FsReader(m.root)) == Cpuset(L("0-2,8-10"), frozenset({0}),
                                                  "cgroup1:/docker/abc")
    m = two_sockets(tmp_path / "none", 8)
    assert read_cpuset(FsReader(m.root)) is None


def test_cpuset_excluding_whole_nodes(tmp_path):
    m = memory_only_nodes(tmp_path)
    m.set_status(L("0-15"), L("0-4")).set_cgroup2("/job", L("8-15"), L("1-2")).write()
    t = discover(tmp_path)
    assert (t.allowed_cpus, t.allowed_nodes) == (L("8-15"), {1, 2})
    assert set(t.nodes) == {0, 1, 2, 3, 4}        # the others are still listed


def test_status_masks_without_lists(tmp_path):
    m = two_sockets(tmp_path, 8)
    m.set_file("proc/self/status",
               "Name:\tx\nCpus_allowed:\t00000000,0000f00f\nMems_allowed:\t00000000,00000002\n")
    m.write()
    t = discover(tmp_path)
    assert (t.affinity, t.allowed_nodes) == (L("0-3,12-15"), {1})     # the affinity beside, not the limit
    assert t.allowed_cpus == t.online_cpus
    assert t.allowed_source == "status"


def test_status_wider_than_the_machine_is_cut_to_online(tmp_path):
    m = offline_cpus(tmp_path)
    m.set_status(L("0-1023"), L("0-1023")).write()
    t = discover(tmp_path)
    assert t.allowed_cpus == t.online_cpus == L("0-2,4-5,8-11,13-15")
    assert t.allowed_nodes == {0, 1}


def test_no_process_files_allow_everything(tmp_path):
    m = two_sockets(tmp_path, 8)
    m.remove_status().write()
    t = discover(tmp_path)
    assert (t.allowed_cpus, t.allowed_nodes, t.allowed_source) == (L("0-15"), {0, 1}, "online")


def test_more_than_1024_cpus(tmp_path):
    big(tmp_path)  # 8 packages x 2 nodes x 36 cores x 2 threads
    t = discover(tmp_path)
    assert t.online_cpus == t.possible_cpus == t.allowed_cpus == L("0-1151")
    assert len(t.cpus) == 1152
    assert set(t.nodes) == set(range(16))
    assert t.nodes[0].cpus == L("0-35,576-611")
    assert t.nodes[15].cpus == L("540-575,1116-1151")
    assert dict(t.nodes[0].distances) == {0: 10, 1: 12, **{n: 32 for n in range(2, 16)}}
    assert t.cpus[1151] == Cpu(1151, 15, 7, 71, L("575,1151"))
    assert t.package_nodes() == {p: {2 * p, 2 * p + 1} for p in range(8)}
    assert t.llc_groups() == tuple(
        L(f"{72 * p}-{72 * p + 71},{576 + 72 * p}-{576 + 72 * p + 71}") for p in range(8))
    assert len(t.caches) == 576 * 3 + 8
    assert t.to_dict()["online_cpus"] == "0-1151"


def test_no_numa_dir_synthesizes_node_0(tmp_path):
    no_numa_dir(tmp_path, ncpus=4, memtotal_kb=8 * GIB_KB)
    t = discover(tmp_path)
    assert nodes_summary(t) == {0: (L("0-3"), 8 * GIB, {0: 10})}
    assert t.online_nodes == t.possible_nodes == t.allowed_nodes == {0}
    assert all(c.node == 0 for c in t.cpus.values())
    assert t.node_of_cpu(3) == 0


def test_no_numa_dir_and_no_meminfo(tmp_path):
    m = no_numa_dir(tmp_path)
    m.remove_file("proc/meminfo").write()
    assert discover(tmp_path).nodes[0].memory_bytes == 0


# -- missing optional files -------------------------------------------------------------


def test_missing_distance_meminfo_topology_and_caches(tmp_path):
    m = two_sockets(tmp_path, 8)
    for n in (0, 1):
        m.remove_file(f"{NODE}/node{n}/distance")
    m.remove_file(f"{NODE}/node1/meminfo")
    for c in range(16):
        m.remove_file(f"{CPU}/cpu{c}/topology").remove_file(f"{CPU}/cpu{c}/cache")
    m.remove_file("proc/cpuinfo").write()
    t = discover(tmp_path)
    assert nodes_summary(t) == {0: (L("0-3,8-11"), 64 * GIB, {}), 1: (L("4-7,12-15"), 0, {})}
    assert t.cpus[5] == Cpu(5, 1, -1, -1, frozenset({5}))
    assert t.caches == () and t.model_name is None
    assert t.package_nodes() == {-1: {0, 1}}


def test_missing_cpu_online_uses_cpu_dirs(tmp_path):
    m = offline_cpus(tmp_path)
    m.remove_file(f"{CPU}/online").remove_file(f"{CPU}/possible").write()
    t = discover(tmp_path)
    assert t.online_cpus == L("0-2,4-5,8-11,13-15")
    assert t.possible_cpus == L("0-15")               # every cpuN directory


def test_missing_cpu_dir_uses_node_cpulists(tmp_path):
    m = two_sockets(tmp_path, 8)
    m.remove_file(CPU).write()
    t = discover(tmp_path)
    assert t.online_cpus == L("0-15")
    assert t.cpus[9] == Cpu(9, 0, -1, -1, frozenset({9}))


def test_missing_node_online_uses_node_dirs(tmp_path):
    m = sparse_nodes(tmp_path)
    m.remove_file(f"{NODE}/online").remove_file(f"{NODE}/possible").write()
    t = discover(tmp_path)
    assert t.online_nodes == t.possible_nodes == {0, 2, 5}
    assert dict(t.nodes[2].distances) == {0: 20, 2: 10, 5: 25}


def test_cppc_highest_perf(tmp_path):
    m = one_node(tmp_path)
    m.set_cppc(46).write()
    assert discover(tmp_path).cppc_highest_perf == 46


# -- malformed files ----------------------------------------------------------------


@pytest.mark.parametrize("rel,text", [
    (f"{NODE}/node1/cpulist", "4-7,zz\n"),
    (f"{NODE}/node0/meminfo", "Node 0 MemTotal:   many kB\n"),
    (f"{NODE}/node0/meminfo", "Node 0 MemFree:   12 kB\n"),
    (f"{NODE}/node1/distance", "21 ten\n"),
    (f"{NODE}/node1/distance", "21 10 30\n"),
    (f"{NODE}/online", "0-\n"),
    (f"{CPU}/online", "0-15x\n"),
    (f"{CPU}/cpu5/topology/core_id", "five\n"),
    (f"{CPU}/cpu5/topology/thread_siblings_list", "13-5\n"),
    (f"{CPU}/cpu4/cache/index3/shared_cpu_list", "4-7,12-99999999\n"),
    (f"{CPU}/cpu0/cache/index0/level", "L1\n"),
    ("proc/self/status", "Cpus_allowed_list:\t0-3,q\n"),
    ("proc/self/status", "Mems_allowed:\tnothex\n"),
    (f"{CPU}/cpu0/acpi_cppc/highest_perf", "fast\n"),
])
def test_malformed_file_names_path_and_text(tmp_path, rel, text):
    m = two_sockets(tmp_path, 8)
    m.set_file(rel, text).write()
    with pytest.raises(NumabindError) as err:
        discover(tmp_path)
    msg = str(err.value)
    assert os.path.join(str(tmp_path), rel) in msg
    assert repr(text.strip().split("\t")[-1])[1:-1] in msg or text.strip() in msg


def test_malformed_cgroup_file(tmp_path):
    m = cgroup_restricted(tmp_path)
    m.set_file("sys/fs/cgroup/kubepods/pod7/ctr/cpuset.cpus.effective", "4-7,,\n").write()
    with pytest.raises(NumabindError, match="kubepods/pod7/ctr/cpuset.cpus.effective"):
        discover(tmp_path)


def test_malformed_no_numa_meminfo(tmp_path):
    m = no_numa_dir(tmp_path)
    m.set_file("proc/meminfo", "MemTotal: 12 MB\n").write()
    with pytest.raises(NumabindError, match=r"proc/meminfo.*MemTotal: 12 MB"):
        discover(tmp_path)


# -- roots ------------------------------------------------------------------------------


def test_fsroot_env_is_honoured(tmp_path, monkeypatch):
    sparse_nodes(tmp_path)
    monkeypatch.setenv("NUMABIND_FSROOT", str(tmp_path))
    t = discover()
    assert t.root == str(tmp_path)
    assert set(t.nodes) == {0, 2, 5}


def test_root_argument_beats_env(fake_machine, monkeypatch):
    a = fake_machine("sparse_nodes")
    b = fake_machine("one_node", ncpus=2)
    monkeypatch.setenv("NUMABIND_FSROOT", a.path)
    t = discover(b.root)                   # a pathlib.Path works too
    assert t.root == b.path
    assert set(t.nodes) == {0} and t.online_cpus == {0, 1}


def test_root_without_sysfs_is_an_error(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal: 1024 kB\n")
    with pytest.raises(NumabindError, match=r"holds no sysfs.*sys/devices/system/cpu"):
        discover(tmp_path)
    with pytest.raises(NumabindError, match="holds no sysfs"):
        discover(tmp_path / "proc")


def test_missing_root_is_an_error_not_an_empty_machine(tmp_path, monkeypatch):
    typo = tmp_path / "nonexistent" / "typo"
    with pytest.raises(NumabindError, match=r"does not exist.*hwloc-gather-topology"):
        discover(typo)
    monkeypatch.setenv("NUMABIND_FSROOT", str(typo))
    with pytest.raises(NumabindError, match=r"\$NUMABIND_FSROOT=.*does not exist"):
        discover()


def test_root_that_is_a_plain_file_is_an_error(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("not a dump\n")
    with pytest.raises(NumabindError, match="neither an hwloc XML topology nor a tar archive"):
        discover(f)


def test_sysfs_without_any_cpu_is_an_error(tmp_path):
    (tmp_path / CPU).mkdir(parents=True)
    with pytest.raises(NumabindError, match="no online CPU found"):
        discover(tmp_path)


@pytest.mark.kernel
def test_live_kernel_root(monkeypatch):
    t = discover()
    assert t.root == "/"
    assert t.affinity == os.sched_getaffinity(0) and t.allowed_cpus >= t.affinity   # the cpuset is the limit
    assert 0 in t.nodes
    assert t.allowed_cpus <= t.online_cpus
    assert set(t.cpus) == t.online_cpus
    assert "sched_getaffinity" not in t.allowed_source
    assert frozenset().union(*(n.cpus for n in t.nodes.values())) == t.online_cpus
    json.dumps(t.to_dict())


@pytest.mark.kernel
def test_live_kernel_uses_the_real_affinity():
    before = os.sched_getaffinity(0)
    one = {min(before)}
    limit = discover("/").allowed_cpus
    os.sched_setaffinity(0, one)
    try:
        t = discover("/")
        assert (t.affinity, t.allowed_cpus) == (one, limit)     # reported beside the cpuset, never a limit
    finally:
        os.sched_setaffinity(0, before)
    assert os.sched_getaffinity(0) == before


# -- value object behaviour -------------------------------------------------------------


def test_to_dict_is_json_and_round_trips(tmp_path):
    m = memory_only_nodes(tmp_path)
    m.set_cppc(46).write()
    t = discover(tmp_path)
    d = json.loads(json.dumps(t.to_dict()))
    assert d["online_cpus"] == "0-15" and L(d["allowed_cpus"]) == t.allowed_cpus
    assert L(d["possible_nodes"]) == t.possible_nodes == L(d["allowed_nodes"])
    assert d["nodes"][2] == {"id": 2, "cpus": "", "memory_bytes": 128 * GIB,
                             "distances": {"0": 24, "1": 26, "2": 10, "3": 80, "4": 80}, "access": None}
    assert [n["id"] for n in d["nodes"]] == [0, 1, 2, 3, 4]
    assert sum(n["memory_bytes"] for n in d["nodes"]) == (64 + 64 + 128 + 96) * GIB
    assert d["cpus"] == {"online": 16, "allowed": 16, "cores": 16, "threads_per_core": 1,
                         "packages": {"0": "0-7", "1": "8-15"}}
    assert d["caches"][0] == {"level": 1, "type": "Data", "cpus": "0", "size_bytes": 48 * 1024}
    assert d["llc_groups"] == ["0-7", "8-15"]
    assert (d["model_name"], d["cppc_highest_perf"]) == ("Fake Grace-like CPU", 46)
    assert d["gpus"] == [] and d["allowed_source"] == "status"
    assert d["interleave_weights"] is None


def test_cache_sizes_are_read_per_instance(tmp_path):
    """``size`` of every cache instance, in bytes (the kernel writes ``48K``); instances of one level may
    differ (hybrid cores), a missing or malformed file is None, and the size takes no part in equality."""
    m = two_sockets(tmp_path, cpus_per_socket=4, smt=False)
    (tmp_path / "sys/devices/system/cpu/cpu5/cache/index0/size").write_text("32K\n")
    (tmp_path / "sys/devices/system/cpu/cpu6/cache/index2/size").write_text("lots\n")
    (tmp_path / "sys/devices/system/cpu/cpu7/cache/index2/size").unlink()
    t = discover(tmp_path)
    sizes = {(c.level, c.type, format_cpulist(c.cpus)): c.size_bytes for c in t.caches}
    assert sizes[(1, "Data", "0")] == 48 * 1024 and sizes[(1, "Data", "5")] == 32 * 1024
    assert sizes[(2, "Unified", "4")] == 2048 * 1024
    assert sizes[(2, "Unified", "6")] is None and sizes[(2, "Unified", "7")] is None
    assert sizes[(3, "Unified", "4-7")] == 32768 * 1024
    assert Cache(1, "Data", L("5")) in t.caches
    assert {c["size_bytes"] for c in t.to_dict()["caches"] if c["type"] == "Instruction"} == {32 * 1024}
    del m


def test_to_dict_with_gpus(tmp_path):
    two_sockets(tmp_path, 8)
    add_nvidia_gpu(tmp_path, "0000:1b:00.0", numa_node=0, local_cpulist="0-3,8-11",
                   uuid=nv_uuid(0), minor=0)
    t = discover(tmp_path)
    (g,) = json.loads(json.dumps(t.to_dict()))["gpus"]
    assert g["pci_address"] == "0000:1b:00.0" and g["numa_node"] == 0
    assert L(g["local_cpus"]) == L("0-3,8-11")


def test_to_dict_holds_each_gpus_own_to_dict(tmp_path):
    two_sockets(tmp_path, 8)
    add_nvidia_gpu(tmp_path, "0000:1b:00.0", numa_node=0, local_cpulist="0-3,8-11", uuid=nv_uuid(0), minor=0)
    add_nvidia_gpu(tmp_path, "0000:9b:00.0", numa_node=1, local_cpulist="4-7,12-15", uuid=nv_uuid(1), minor=1)
    t = discover(tmp_path)
    assert len(t.gpus) == 2
    assert t.to_dict()["gpus"] == [g.to_dict() for g in t.gpus]


def test_topology_is_frozen_hashable_picklable(tmp_path):
    snc(tmp_path)
    t = discover(tmp_path)
    again = pickle.loads(pickle.dumps(t))
    assert again == t and hash(again) == hash(t)
    assert discover(tmp_path) == t
    assert {t: 1}[copy.deepcopy(t)] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.allowed_cpus = frozenset()


def test_llc_falls_back_to_the_highest_level_present(tmp_path):
    m = FakeMachine(tmp_path)
    m.add_node(0, range(4))
    for c in range(4):
        m.set_cpu_topology(c, 0, c // 2)
    m.add_cache(1, "Data", {0}).add_cache(1, "Instruction", {0})
    m.add_cache(2, "Unified", {0, 1}).add_cache(2, "Unified", {2, 3})
    m.write()
    t = discover(tmp_path)
    assert t.llc_groups() == (L("0-1"), L("2-3"))
    assert t.cpus[1].siblings == {0, 1}


# -- reads ------------------------------------------------------------------------------




def _own_reads(reader: RecordingReader) -> list[str]:
    prefixes = ("sys/devices/system/", "proc/self/", "proc/cpuinfo", "proc/meminfo",
                "sys/fs/cgroup/")
    return [r for r in reader.reads if r.startswith(prefixes)]


def test_each_file_read_once_and_shared_caches_skipped(tmp_path):
    two_sockets(tmp_path, 8)
    reader = RecordingReader(tmp_path)
    t = discover_from(reader)
    assert t == discover(tmp_path)
    reads = _own_reads(reader)
    assert max(collections.Counter(reads).values()) == 1
    cache_reads = [r for r in reads if "/cache/" in r]
    # shared_cpu_list and size of 8 cores x (L1d, L1i, L2) + 2 L3 (sizes differ between instances of
    # one level on hybrid CPUs); level and type of the 4 indexes once per package
    assert len(cache_reads) == (8 * 3 + 2) * 2 + 2 * 4 * 2
    assert {r.split("/")[4] for r in cache_reads if r.endswith(("/level", "/type"))} == {
        "cpu0", "cpu4"}
    assert not any(r.startswith(f"{CPU}/cpu8/") for r in reads)      # sibling of CPU 0
    assert {r.split("/")[4] for r in cache_reads if "/index3/" in r} == {"cpu0", "cpu4"}
    topo_reads = [r for r in reads if "/topology/" in r]
    # thread_siblings_list and core_id once per core; the package mask and id once per package
    assert len(topo_reads) == 8 * 2 + 2 * 2
    assert sum(r.endswith("/physical_package_id") for r in topo_reads) == 2


def test_private_per_thread_cache_is_still_read(tmp_path):
    m = FakeMachine(tmp_path)
    m.add_node(0, range(4))
    for c in range(4):
        m.set_cpu_topology(c, 0, c % 2)             # cores: {0,2} and {1,3}
    for c in range(4):
        m.add_cache(1, "Data", {c})                 # per thread
    m.add_cache(2, "Unified", {0, 2}).add_cache(2, "Unified", {1, 3})
    m.write()
    t = discover(tmp_path)
    assert caches_summary(t) == [(1, "Data", {0}), (1, "Data", {1}), (1, "Data", {2}),
                                 (1, "Data", {3}), (2, "Unified", L("0,2")),
                                 (2, "Unified", L("1,3"))]


# -- the builder ----------------------------------------------------------------------


def test_builder_rewrite_is_idempotent_and_keeps_foreign_files(tmp_path):
    m = memory_only_nodes(tmp_path)
    foreign = tmp_path / "sys/bus/pci/devices/0000:01:00.0/vendor"
    foreign.parent.mkdir(parents=True)
    foreign.write_text("0x10de\n")
    before = discover(tmp_path)
    assert m.write() == tmp_path
    assert discover(tmp_path) == before
    del m.nodes[4]
    m.write()
    assert not (tmp_path / NODE / "node4").exists()
    assert set(discover(tmp_path).nodes) == {0, 1, 2, 3}
    assert foreign.read_text() == "0x10de\n"


def test_fake_machine_fixture_gives_separate_roots(fake_machine):
    a = fake_machine()
    b = fake_machine("two_sockets", cpus_per_socket=4, smt=False)
    assert isinstance(a, FakeMachine) and a.root != b.root
    a.add_node(0, [0, 1]).write()
    assert discover(a.root).online_cpus == {0, 1}
    assert discover(b.root).online_cpus == L("0-7")


# -- generated layouts ----------------------------------------------------------------


@st.composite
def numa_layouts(draw):
    ids = sorted(draw(st.lists(st.integers(0, 11), min_size=1, max_size=5, unique=True)))
    ncpus = [draw(st.integers(0, 4)) for _ in ids]
    if sum(ncpus) == 0:
        ncpus[0] = 1
    memory = [draw(st.sampled_from([0, 7777, 3 * GIB_KB])) for _ in ids]
    dist = {}
    for i in ids:
        for j in ids:
            if i < j:
                dist[i, j] = dist[j, i] = draw(st.integers(11, 254))
    total = sum(ncpus)
    offline = draw(st.sets(st.integers(1, max(1, total - 1)), max_size=total // 2))
    offline.discard(0)
    offline = {c for c in offline if c < total}
    return ids, ncpus, memory, dist, offline


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(numa_layouts())
def test_generated_numa_layouts_are_discovered_exactly(layout):
    ids, ncpus, memory, dist, offline = layout
    with tempfile.TemporaryDirectory() as root:
        m = FakeMachine(root)
        cpu = 0
        expected_cpus = {}
        for nid, n, kb in zip(ids, ncpus, memory):
            cpus = set(range(cpu, cpu + n))
            cpu += n
            m.add_node(nid, cpus, kb, {o: dist[nid, o] for o in ids if o != nid})
            expected_cpus[nid] = frozenset(cpus - offline)
            for c in cpus:
                m.set_cpu_topology(c, ids.index(nid), c)
        m.set_possible_cpus(range(cpu)).set_online_cpus(set(range(cpu)) - offline)
        m.write()
        t = discover(root)
    assert list(t.nodes) == ids
    assert t.online_cpus == frozenset(range(cpu)) - offline
    assert t.possible_cpus == frozenset(range(cpu))
    for nid, kb in zip(ids, memory):
        node = t.nodes[nid]
        assert node.cpus == expected_cpus[nid]
        assert node.memory_bytes == kb * 1024
        assert dict(node.distances) == {o: (10 if o == nid else dist[nid, o]) for o in ids}
    for c in t.online_cpus:
        assert t.node_of_cpu(c) == next(n for n, cs in expected_cpus.items() if c in cs)
    assert t.nodes_with_cpus == {n for n, cs in expected_cpus.items() if cs}
    assert t.nodes_with_memory == {n for n, kb in zip(ids, memory) if kb}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sockets=st.integers(1, 3), per_socket=st.integers(1, 3), cores=st.integers(1, 3),
       smt=st.booleans(), ccx=st.one_of(st.none(), st.integers(1, 4)))
def test_generated_packages_cores_and_caches(sockets, per_socket, cores, smt, ccx):
    with tempfile.TemporaryDirectory() as root:
        snc(root, sockets=sockets, nodes_per_socket=per_socket, cores_per_node=cores,
            smt=smt, ccx_cores=ccx)
        reader = RecordingReader(root)
        t = discover_from(reader)
    core_count = sockets * per_socket * cores
    threads = 2 if smt else 1
    assert len(t.cpus) == core_count * threads
    l3: dict = {}
    for c in t.cpus.values():
        first = c.id % core_count                      # Linux numbering: thread-major
        package, k = divmod(first, per_socket * cores)
        assert (c.package, c.core) == (package, k)
        assert c.node == package * per_socket + k // cores
        assert c.siblings == {first + i * core_count for i in range(threads)}
        l3.setdefault((package, 0 if ccx is None else k // ccx), set()).add(c.id)
    assert set(t.llc_groups()) == {frozenset(g) for g in l3.values()}
    assert len(t.caches) == 3 * core_count + len(l3)
    assert t.package_nodes() == {
        p: frozenset(range(p * per_socket, (p + 1) * per_socket)) for p in range(sockets)}
    assert max(collections.Counter(_own_reads(reader)).values()) == 1


# -- what real kernels write (issue 9) ---------------------------------------------------


def test_masks_only_old_kernel(tmp_path):
    old_kernel(tmp_path)                      # no *_list files, no core_cpus & co
    assert not (tmp_path / NODE / "node0/cpulist").exists()
    t = discover(tmp_path)
    assert nodes_summary(t) == {
        0: (L("0-3,8-11"), 64 * GIB, {0: 10, 1: 21}),
        1: (L("4-7,12-15"), 64 * GIB, {0: 21, 1: 10}),
    }
    assert t.cpus[8] == Cpu(8, 0, 0, 0, L("0,8"))
    assert t.llc_groups() == (L("0-3,8-11"), L("4-7,12-15"))
    assert len(t.caches) == 8 * 3 + 2


@pytest.mark.parametrize("remove", ["lists", "cpumap", "node links", "cpu links"])
def test_node_cpus_fall_back_cpulist_cpumap_node_links_cpu_links(tmp_path, remove):
    m = two_sockets(tmp_path, 8)
    steps = ["lists", "cpumap", "node links", "cpu links"]
    q = {}
    for step in steps[:steps.index(remove) + 1]:
        q.update({"lists": {"lists": False}, "cpumap": {"node_cpumap": False},
                  "node links": {"node_cpu_links": False}, "cpu links": {}}[step])
    m.set_quirks(**q).write()
    t = discover(tmp_path)
    assert {n: node.cpus for n, node in t.nodes.items()} == {0: L("0-3,8-11"), 1: L("4-7,12-15")}
    assert t.node_of_cpu(12) == 1


def test_node_without_any_cpu_source_is_cpu_less(tmp_path):
    m = two_sockets(tmp_path, 8)
    m.set_quirks(lists=False, node_cpumap=False, node_cpu_links=False, cpu_node_links=False)
    m.write()
    t = discover(tmp_path)
    assert all(not n.cpus for n in t.nodes.values())
    assert t.online_cpus == L("0-15") and t.node_of_cpu(3) is None


def test_padding_after_the_text(tmp_path):
    m = padded(tmp_path)
    assert (tmp_path / NODE / "online").read_bytes() == b"0-3\n\0"
    m.set_file(f"{NODE}/node0/cpulist", "0-3,16-19\n\0\0\0\0")
    m.set_file(f"{NODE}/node1/distance", "12 10 21 21\n\0garbage after the NUL")
    m.write()
    t = discover(tmp_path)
    assert t.nodes[0].cpus == L("0-3,16-19")
    assert dict(t.nodes[1].distances) == {0: 12, 1: 10, 2: 21, 3: 21}
    assert t.online_cpus == L("0-31")


@pytest.mark.parametrize("cpu0", ["missing", "empty"])
def test_empty_or_missing_cpu_online_is_online(tmp_path, cpu0):
    m = offline_cpus(tmp_path)
    m.set_quirks(cpu0_online=cpu0, cpu_online_file=False).write()
    t = discover(tmp_path)
    assert t.online_cpus == L("0-2,4-5,8-11,13-15")


def test_cpu_online_list_wins_over_an_empty_cpu_file(tmp_path):
    m = offline_cpus(tmp_path)
    m.set_possible_cpus(range(16)).set_online_cpus(set(range(1, 16)) - {3, 6, 7, 12})
    m.set_quirks(cpu0_online="empty").write()
    assert 0 not in discover(tmp_path).online_cpus


def test_malformed_cpu_online_flag(tmp_path):
    m = offline_cpus(tmp_path)
    m.set_quirks(cpu_online_file=False).set_file(f"{CPU}/cpu5/online", "2\n").write()
    with pytest.raises(NumabindError, match=r"cpu5/online: expected 0 or 1"):
        discover(tmp_path)


def test_offline_node_0_distance_rows_over_possible_nodes(tmp_path):
    offline_node0(tmp_path)
    assert (tmp_path / NODE / "node1/distance").read_text() == "21 10 20\n"
    assert not (tmp_path / NODE / "node0").exists()
    t = discover(tmp_path)
    assert nodes_summary(t) == {
        1: (L("4-7"), 32 * GIB, {1: 10, 2: 20}),
        2: (L("8-11"), 32 * GIB, {1: 20, 2: 10}),
    }
    assert t.online_nodes == {1, 2} and t.possible_nodes == {0, 1, 2}
    assert t.online_cpus == L("4-11") and t.possible_cpus == L("0-11")


def test_distance_rows_over_online_nodes_with_node_0_offline(tmp_path):
    m = offline_node0(tmp_path)
    m.set_quirks(distance_over="online").write()
    assert (tmp_path / NODE / "node1/distance").read_text() == "10 20\n"
    assert dict(discover(tmp_path).nodes[2].distances) == {1: 20, 2: 10}


def test_node_directory_missing_from_node_online_but_with_cpus(tmp_path, caplog):
    m = two_sockets(tmp_path, 8)
    m.set_file(f"{NODE}/online", "0\n").write()
    with caplog.at_level("WARNING", logger="numabind.topology"):
        t = discover(tmp_path)
    assert set(t.nodes) == {0, 1} and t.nodes[1].cpus == L("4-7,12-15")
    assert "node 1 has online CPUs 4-7,12-15" in caplog.text


def test_legacy_cpuset_filesystem(tmp_path):
    legacy_cpuset(tmp_path)
    assert (tmp_path / "dev/cpuset/batch/job42/cpus").read_text() == "4-7,12-15\n"
    t = discover(tmp_path)
    assert (t.allowed_cpus, t.allowed_nodes) == (L("4-7,12-15"), {1})
    assert t.allowed_source == "cpuset:/batch/job42"
    assert read_cpuset(FsReader(tmp_path)) == Cpuset(L("4-7,12-15"), frozenset({1}),
                                                     "cpuset:/batch/job42")


def test_legacy_cpuset_mounted_elsewhere_without_proc_self_cgroup(tmp_path):
    m = two_sockets(tmp_path, 8)
    m.remove_status().set_cpuset_fs("/j", L("1-2"), L("0"), mount="mnt/my cpusets")
    m.remove_file("proc/self/cgroup").write()
    assert "/mnt/my cpusets cpuset" in (tmp_path / "proc/mounts").read_text()
    m.set_file("proc/mounts", (tmp_path / "proc/mounts").read_text().replace(
        "/mnt/my cpusets", "/mnt/my\\040cpusets")).write()
    t = discover(tmp_path)
    assert (t.allowed_cpus, t.allowed_source) == (L("1-2"), "cpuset:/j")


@pytest.mark.parametrize("noprefix", [False, True])
def test_cgroup_v1_mounted_anywhere(tmp_path, noprefix):
    m = two_sockets(tmp_path, 8)
    m.set_cgroup1("/slurm/uid_0/job_7", L("2-5"), L("0-1"), mount="run/cgroups/cpuset,cpuacct",
                  noprefix=noprefix).write()
    name = "cpus" if noprefix else "cpuset.cpus"
    assert (tmp_path / f"run/cgroups/cpuset,cpuacct/slurm/uid_0/job_7/{name}").exists()
    t = discover(tmp_path)
    assert (t.allowed_cpus, t.allowed_nodes) == (L("2-5"), {0, 1})
    assert t.allowed_source == "status+cgroup1:/slurm/uid_0/job_7"


def test_cgroup_v1_path_missing_under_the_mount_uses_the_nearest_ancestor(tmp_path):
    m = two_sockets(tmp_path, 8)
    m.set_cgroup1("/", L("0-3"), L("0")).write()      # the container sees its cgroup as root
    m.set_file("proc/self/cgroup", "3:cpuset:/docker/abc\n").remove_file("proc/self/cpuset")
    m.write()
    t = discover(tmp_path)
    assert (t.allowed_cpus, t.allowed_source) == (L("0-3"), "status+cgroup1:/")


def test_cgroup2_mount_found_in_proc_mounts(tmp_path):
    m = two_sockets(tmp_path, 8)
    m.set_cgroup2("/ctr", L("8-11"), L("0"), mount="run/unified").write()
    t = discover(tmp_path)
    assert (t.allowed_cpus, t.allowed_source) == (L("8-11"), "status+cgroup2:/ctr")


def test_deleted_cgroup_suffix(tmp_path):
    m = two_sockets(tmp_path, 8)
    m.set_cgroup2("/ctr", L("8-11"), L("0")).write()
    m.set_file("proc/self/cgroup", "0::/ctr (deleted)\n").write()
    assert discover(tmp_path).allowed_cpus == L("8-11")


def test_gpu_memory_nodes_in_a_cpuset_are_kept(tmp_path):
    gpu_memory_cpuset(tmp_path)
    t = discover(tmp_path)
    assert set(t.nodes) == {0, 8, *range(250, 256)}
    assert t.allowed_nodes == {0, 8, *range(250, 256)}
    assert t.allowed_cpus == L("2-9")
    assert all(not t.nodes[g].cpus and t.nodes[g].memory_bytes == 96 * GIB for g in range(250, 256))
    assert dict(t.nodes[250].distances)[8] == 80 and t.possible_nodes == L("0-255")


def test_more_than_64_nodes(tmp_path):
    many_nodes(tmp_path, nodes=72)
    t = discover(tmp_path)
    assert sorted(t.nodes) == list(range(72))
    assert t.nodes[71].cpus == L("142-143")
    assert t.nodes[70].distances[71] == 16 and t.nodes[0].distances[71] == 32
    assert t.allowed_nodes == L("0-71")


def test_hybrid_performance_and_efficiency_cores(tmp_path):
    hybrid(tmp_path)
    t = discover(tmp_path)
    assert t.cpus[0].siblings == {0, 1} and t.cpus[17].siblings == {17}
    assert t.cpus[17].core == 33 and t.cpus[2].core == 4
    assert (2, "Unified", L("16-19")) in caches_summary(t)
    assert (2, "Unified", L("0-1")) in caches_summary(t)
    assert t.llc_groups() == (L("0-23"),)
    assert t.to_dict()["cpus"]["cores"] == 16


def test_hybrid_core_kinds_from_the_pmu_lists(tmp_path):
    from .fake.machines import hybrid_laptop

    hybrid_laptop(tmp_path)       # 6 P-cores with SMT (0-11) + 8 E-cores (12-19), one node
    t = discover(tmp_path)
    assert t.performance_cpus == L("0-11") and t.efficiency_cpus == L("12-19")
    assert t.kinds_source == "cpu_core/cpu_atom"
    assert t.cpus[0].kind == "performance" and t.cpus[13].kind == "efficiency" and t.cpus[0].capacity is None
    assert t.to_dict()["cpus"]["kinds"] == {"performance": "0-11", "efficiency": "12-19",
                                            "source": "cpu_core/cpu_atom"}
    assert t.cpus[0] == Cpu(0, 0, 0, 0, L("0-1"))     # the kind takes no part in equality


def test_hybrid_core_kinds_from_cpu_capacity(tmp_path):
    from .fake.machines import big_little

    big_little(tmp_path)          # arm64: LITTLE 0-3 (capacity 446), big 4-7 (1024)
    t = discover(tmp_path)
    assert t.performance_cpus == L("4-7") and t.efficiency_cpus == L("0-3")
    assert t.kinds_source == "cpu_capacity"
    assert [t.cpus[c].capacity for c in range(8)] == [446] * 4 + [1024] * 4


def test_one_kind_of_core_is_no_hybrid(tmp_path):
    m = one_node(tmp_path, ncpus=4)
    m.cpu_capacity = {c: 1024 for c in range(4)}
    m.set_quirks(cpuinfo="arm64").write()
    t = discover(tmp_path)
    assert t.cpus[1].capacity == 1024 and t.cpus[1].kind is None
    assert t.performance_cpus == frozenset() and t.efficiency_cpus == frozenset() and t.kinds_source == ""
    assert "kinds" not in t.to_dict()["cpus"]
    m.cpu_kinds = {"cpu_core": frozenset(range(4))}   # a PMU list of one kind only
    m.write()
    assert discover(tmp_path).kinds_source == ""


def test_x86_reads_no_cpu_capacity(tmp_path):
    m = one_node(tmp_path, ncpus=4)
    m.cpu_capacity = {0: 1024, 1: 1024, 2: 512, 3: 512}   # no x86 kernel writes these: not read there
    m.set_model_name("Fake CPU").write()
    reader = RecordingReader(tmp_path)
    t = discover_from(reader)
    assert t.cpus[2].capacity is None and t.kinds_source == ""
    assert not any(r.endswith("cpu_capacity") for r in reader.reads)


def test_arm_clusters_without_model_name(tmp_path):
    arm_clusters(tmp_path)
    t = discover(tmp_path)
    assert t.model_name == "ARM Neoverse N1 (AWS Graviton2, Ampere Altra)"   # from CPU implementer/part
    assert {c.cpus for c in t.caches if c.level == 2} == {L("0-3"), L("4-7"), L("8-11"),
                                                          L("12-15")}
    assert t.package_nodes() == {0: {0, 1}}


def test_dies(tmp_path):
    multi_die(tmp_path)
    t = discover(tmp_path)
    assert t.nodes[1].cpus == L("4-7,20-23")
    assert t.cpus[4] == Cpu(4, 1, 0, 0, L("4,20"))      # core ids restart per die
    assert t.to_dict()["cpus"]["cores"] == 16
    assert t.package_nodes() == {0: {0, 1}, 1: {2, 3}}


@pytest.mark.parametrize("fmt,expected", [
    ("x86", "Fake CPU"), ("ia64", "Fake CPU"), ("power", "Fake CPU"),
    ("arm64", "ARM Neoverse N1 (AWS Graviton2, Ampere Altra)")])
def test_cpuinfo_formats(tmp_path, fmt, expected):
    m = one_node(tmp_path)
    m.set_model_name("Fake CPU").set_quirks(cpuinfo=fmt).write()
    assert discover(tmp_path).model_name == expected


def test_cpuinfo_old_arm_processor_line(tmp_path):
    m = one_node(tmp_path)
    m.set_file("proc/cpuinfo", "Processor\t: ARMv7 Processor rev 10 (v7l)\nprocessor\t: 0\n"
                               "BogoMIPS\t: 790.52\n\nHardware\t: Freescale i.MX6\n").write()
    assert discover(tmp_path).model_name == "ARMv7 Processor rev 10 (v7l)"


def test_power_threads_numbered_per_core_and_sparse_nodes(tmp_path):
    power_cpuinfo(tmp_path)
    t = discover(tmp_path)
    assert set(t.nodes) == {0, 8} and t.nodes[8].cpus == L("16-31")
    assert t.cpus[5].siblings == L("4-7")
    assert t.model_name == "POWER9 (raw), altivec supported"
    assert dict(t.nodes[0].distances) == {0: 10, 8: 40}


def test_empty_shared_cpu_map_means_the_core(tmp_path):
    m = two_sockets(tmp_path, 8)
    m.set_quirks(lists=False)
    m.write()
    for cpu in (0, 8):
        m.set_file(f"{CPU}/cpu{cpu}/cache/index3/shared_cpu_map", "0000\n")
    m.write()
    t = discover(tmp_path)
    assert Cache(3, "Unified", L("0,8")) in t.caches


@pytest.mark.parametrize("rel,text", [
    (f"{NODE}/node0/cpumap", "zz\n"),
    (f"{CPU}/cpu5/topology/thread_siblings", "2g\n"),
    (f"{NODE}/node0/distance", "10 ²1\n"),
    (f"{NODE}/node0/meminfo", "Node 0 MemTotal:   ²²² kB\n"),
    (f"{CPU}/cpu5/topology/core_id", "٥\n"),
])
def test_malformed_masks_and_non_ascii_numbers(tmp_path, rel, text):
    m = two_sockets(tmp_path, 8)
    m.set_quirks(lists=False).set_file(rel, text).write()
    with pytest.raises(NumabindError) as err:
        discover(tmp_path)
    assert os.path.join(str(tmp_path), rel) in str(err.value)
    assert repr(text.strip())[1:-1] in str(err.value)


def test_node_directory_named_with_non_ascii_digits_is_ignored(tmp_path):
    two_sockets(tmp_path, 8)
    (tmp_path / NODE / "node²").mkdir()
    (tmp_path / CPU / "cpu١").mkdir()
    t = discover(tmp_path)
    assert set(t.nodes) == {0, 1} and t.online_cpus == L("0-15")


def test_cores_of_one_package_with_other_cache_layouts_are_read_as_they_are(tmp_path):
    """Level and type of a cache index are read once per package, and again for an instance
    that does not fit: cores without an L2 (index2 is their shared L3) and cores whose index2
    is an L2 shared by a cluster, next to cores with a private L2."""
    m = FakeMachine(tmp_path)
    m.add_node(0, range(12))
    for c in range(12):
        m.set_cpu_topology(c, 0, c)
        m.add_cache(1, "Data", {c}).add_cache(1, "Instruction", {c})
    for c in range(4):
        m.add_cache(2, "Unified", {c})                     # big cores: private L2
    m.add_cache(2, "Unified", {4, 5}).add_cache(2, "Unified", {6, 7})   # clustered L2
    m.add_cache(3, "Unified", range(8))                    # L3 of cores 0-7
    m.add_cache(3, "Unified", range(8, 12))                # cores 8-11: no L2, index2 is this L3
    m.write()
    t = discover(tmp_path)
    assert caches_summary(t) == (
        [(1, "Data", {c}) for c in range(12)] + [(1, "Instruction", {c}) for c in range(12)]
        + [(2, "Unified", {c}) for c in range(4)] + [(2, "Unified", L("4-5")), (2, "Unified", L("6-7"))]
        + [(3, "Unified", L("0-7")), (3, "Unified", L("8-11"))]
    )
    assert (tmp_path / CPU / "cpu8/cache/index2/level").read_text() == "3\n"
    if LSTOPO is not None:
        assert differences(t, lstopo_view(tmp_path)) == []


# -- memory tiers: HMAT figures and the weights of weighted interleave -------------------


def test_hmat_figures_are_read_per_node(tmp_path):
    m = memory_only_nodes(tmp_path)
    m.set_hmat(0, read_bandwidth=30000, write_bandwidth=28000, read_latency=80, write_latency=90, initiators={0})
    m.set_hmat(2, read_bandwidth=10000, read_latency=250, initiators={0, 1}).write()
    t = discover(tmp_path)
    assert t.nodes[0].access == MemoryAccess(30000, 28000, 80, 90, frozenset({0}))
    assert t.nodes[2].access == MemoryAccess(read_bandwidth=10000, read_latency=250, initiators=frozenset({0, 1}))
    assert t.nodes[1].access is None                       # no HMAT entry: no figures, not zeros
    d = json.loads(json.dumps(t.to_dict()))
    assert d["nodes"][2]["access"] == {"read_bandwidth": 10000, "write_bandwidth": None, "read_latency": 250,
                                       "write_latency": None, "initiators": "0-1"}


def test_a_malformed_hmat_figure_names_the_file(tmp_path):
    m = memory_only_nodes(tmp_path)
    m.set_hmat(2, read_bandwidth=10000).set_file(f"{NODE}/node2/access0/initiators/read_bandwidth", "fast\n").write()
    with pytest.raises(NumabindError, match=r"node2/access0/initiators/read_bandwidth.*'fast'"):
        discover(tmp_path)


@pytest.mark.parametrize("auto, expected", [(None, None), ("auto", True), ("__auto_type", True)])
def test_interleave_weights_are_read(tmp_path, auto, expected):
    m = memory_only_nodes(tmp_path)
    m.set_interleave_weights({0: 3, 1: 1, 2: 7}, auto=auto).write()
    w = discover(tmp_path).interleave_weights
    assert w is not None and dict(w.weights) == {0: 3, 1: 1, 2: 7}
    assert (w.auto, w.auto_name) == (expected, auto)
    m.set_interleave_weights({0: 3}, auto="auto", auto_value=False).write()
    w = discover(tmp_path).interleave_weights
    assert dict(w.weights) == {0: 3} and w.auto is False


def test_no_weighted_interleave_before_linux_6_9(tmp_path):
    memory_only_nodes(tmp_path)
    assert discover(tmp_path).interleave_weights is None


@pytest.mark.parametrize("text", ["0\n", "256\n", "heavy\n"])
def test_a_weight_outside_the_kernel_range_names_the_file(tmp_path, text):
    m = memory_only_nodes(tmp_path)
    m.set_interleave_weights({0: 1, 1: 1}).set_file("sys/kernel/mm/mempolicy/weighted_interleave/node1", text).write()
    with pytest.raises(NumabindError, match="weighted_interleave/node1"):
        discover(tmp_path)


def test_live_weights_match_sysfs():
    """On this kernel: what discovery and numabind.live report is what the files say (or nothing, before 6.9)."""
    from numabind import live

    base = "/sys/kernel/mm/mempolicy/weighted_interleave"
    w = live.interleave_weights()
    assert (w is None) == (not os.path.isdir(base))
    if w is not None:
        files = {int(f[4:]): int(open(f"{base}/{f}").read()) for f in os.listdir(base)
                 if f.startswith("node") and f[4:].isdigit()}
        assert dict(w.weights) == files
        assert discover().interleave_weights == w


# -- the compiled core reads a core's files in one call; without it, one by one: the same machine either way
_DUMPS = sorted((os.path.dirname(__file__) + "/dumps/" + f) for f in os.listdir(os.path.dirname(__file__) + "/dumps")
                if f.endswith(".tar.bz2"))


def _seen(topo: Topology) -> tuple:
    """All of a topology, cache sizes included (Cache equality leaves them out)."""
    return topo, [(c.level, c.type, c.cpus, c.size_bytes) for c in topo.caches], topo.to_dict()


@pytest.mark.parametrize("shape", [one_node, two_sockets, snc, hybrid, arm_clusters, multi_die, old_kernel, padded,
                                   offline_cpus, sparse_nodes, power_cpuinfo, many_nodes, cgroup_restricted,
                                   *_DUMPS], ids=lambda s: getattr(s, "__name__", None) or os.path.basename(s))
def test_discovery_is_the_same_with_and_without_the_compiled_core(tmp_path, monkeypatch, shape):
    from numabind import _fs

    if callable(shape):
        shape(tmp_path)
        root = str(tmp_path)
    else:
        root = shape
    assert _fs._load_core() is not None, "the compiled core is not built"
    with_core = _seen(discover(root))
    monkeypatch.setattr(_fs, "_core", None)
    monkeypatch.setattr(_fs, "_core_tried", True)
    assert _seen(discover(root)) == with_core


def test_discovery_reads_each_core_in_one_call(tmp_path, monkeypatch):
    """One call of the compiled core per core lists its cache indexes and reads its topology and cache files;
    what is read alone is the rest (nodes, package ids, an index's level and type where its layout is new)."""
    from numabind import _fs

    snc(tmp_path, sockets=2, nodes_per_socket=2, cores_per_node=4, smt=True)   # 16 cores, 32 CPUs
    core = _fs._load_core()
    assert core is not None
    alone, trees = [], []

    def read_file(path, buf, cap):
        alone.append(os.fsdecode(path))
        return core[1](path, buf, cap)

    def read_tree(where, *args):
        trees.append(os.fsdecode(where))
        return core[4](where, *args)

    monkeypatch.setattr(_fs, "_core", (core[0], read_file, core[2], core[3], read_tree, *core[5:]))
    reader = RecordingReader(tmp_path)
    topo = discover_from(reader)
    assert len(trees) == 16 == len({c.siblings for c in topo.cpus.values()})
    core_files = ("/core_id", "/thread_siblings_list", "/shared_cpu_list", "/size")
    assert [r for r in reader.reads if r.endswith(core_files)]      # read by discovery...
    assert not [p for p in alone if p.endswith(core_files)]          # ...but none of them alone
