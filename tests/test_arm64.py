"""arm64 servers (issue 35): NVIDIA Grace (GH200, GB200), HiSilicon Kunpeng 920, on fake machines.

* ``core-complex`` where the firmware's cache tree has no shared last-level cache (a PPTT without the
  system-level cache): the last level is each core's private L2, which is no complex; the plan falls back
  to the kernel's clusters larger than a core, else to the node, and says why.
* The CPU model, which arm64's ``/proc/cpuinfo`` does not name: from ``CPU implementer`` / ``CPU part``.
* The cluster level (``cluster_cpus_list``, ``cluster_id``): discovery, JSON, the tree, what is read.

hwloc checks the fakes themselves (tests/test_hwloc_oracle.py reads every ready-made machine, these
included, and compares the clusters too).
"""

from __future__ import annotations

import collections
import json
import logging

import pytest

from numabind import plan_for_gpu, plan_for_gpus
from numabind.cli import main
from numabind.cli.tree import build_tree, hwloc_xml, tree_text
from numabind.cpulist import parse_cpulist
from numabind.topology import ARM_CPU_PARTS, arm_cpu_name, discover, discover_from

from .fakegpu import add_nvidia_gpu, nv_uuid
from .fakesys import (
    CPU,
    FakeMachine,
    RecordingReader,
    grace_blackwell,
    grace_hopper,
    kunpeng920,
    one_node,
    two_sockets,
)
from .lstopo import LSTOPO, cluster_differences, lstopo_view

pytestmark = pytest.mark.usefixtures("no_gpu_env")

L = parse_cpulist
GRACE = "ARM Neoverse V2 (NVIDIA Grace, AWS Graviton4)"


def gb200(root, **kwargs):
    """:func:`grace_blackwell` with its four GPUs: two on node 0, two on node 1."""
    m = grace_blackwell(root, **kwargs)
    for k, (bus, node) in enumerate([(0x01, 0), (0x02, 0), (0x81, 1), (0x82, 1)]):
        add_nvidia_gpu(root, f"0009:{bus:02x}:00.0", numa_node=node, local_cpulist="", minor=k,
                       uuid=nv_uuid(k), model="NVIDIA GB200")
    return m


# ----------------------------------------------------------------------- core-complex without a shared cache
def test_core_complex_on_grace_without_l3_uses_the_node_and_says_why(tmp_path, caplog):
    gb200(tmp_path, l3=False)
    t = discover(tmp_path)
    assert len(t.llc_groups()) == 144                    # the last level is each core's L2
    with caplog.at_level(logging.WARNING, logger="numabind.strategies"):
        plans = [plan_for_gpu(i, mode="core-complex", topology=t) for i in range(4)]
    assert [p.cpus for p in plans] == [L("0-71"), L("0-71"), L("72-143"), L("72-143")]
    assert [p.mem_nodes for p in plans] == [{0}, {0}, {1}, {1}]
    assert "private to each core" in plans[0].reason and "using the node" in plans[0].reason
    assert any("private to each core" in r.getMessage() for r in caplog.records)
    shard = plan_for_gpus([0, 1], t, mode="core-complex")
    assert shard.cpus == L("0-71")


def test_core_complex_on_grace_with_l3_is_the_l3(tmp_path):
    gb200(tmp_path)
    t = discover(tmp_path)
    plan = plan_for_gpu(1, mode="core-complex", topology=t)
    assert plan.cpus == L("0-71")
    assert "L3 groups" in plan.reason and "private" not in plan.reason


def test_core_complex_without_l3_falls_back_to_the_clusters(tmp_path):
    gb200(tmp_path, l3=False, cluster_cores=4)
    t = discover(tmp_path)
    plans = [plan_for_gpu(i, mode="core-complex", topology=t) for i in range(4)]
    assert [p.cpus for p in plans] == [L("0-3"), L("4-7"), L("72-75"), L("76-79")]
    assert "clusters" in plans[0].reason and "private to each core" in plans[0].reason


def test_core_complex_cli_on_grace_without_l3(tmp_path, capsys):
    gb200(tmp_path, l3=False)
    rc = main(["--root", str(tmp_path), "plan", "--gpu", "0", "--mode", "core-complex", "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    (row,) = json.loads(out)
    assert row["plan"]["cpus"] == "0-71"
    assert any("private to each core" in why for why in row["reasons"]), row["reasons"]


def test_core_complex_on_kunpeng_is_the_dies_l3(tmp_path):
    kunpeng920(tmp_path)
    add_nvidia_gpu(tmp_path, "0000:01:00.0", numa_node=2, local_cpulist="64-95")
    plan = plan_for_gpu(0, mode="core-complex", topology=discover(tmp_path))
    assert plan.cpus == L("64-95") and plan.mem_nodes == {2}


def test_a_cache_shared_by_a_cores_threads_is_still_no_complex(tmp_path):
    """The per-core test counts a core's threads as one core (an SMT machine whose last level is its L2)."""
    m = FakeMachine(tmp_path)
    m.add_node(0, range(8))
    for c in range(8):
        m.set_cpu_topology(c, 0, c % 4)                  # cores {0,4}, {1,5}, ...
    m.add_core_caches().write()
    add_nvidia_gpu(m.path, "0000:01:00.0", numa_node=0, local_cpulist="0-7")
    plan = plan_for_gpu(0, mode="core-complex", topology=discover(m.path))
    assert plan.cpus == L("0-7")


# ------------------------------------------------------------------------------------------- the CPU model
@pytest.mark.parametrize("ids,name", sorted(ARM_CPU_PARTS.items()))
def test_arm64_cpu_named_from_implementer_and_part(tmp_path, ids, name):
    m = one_node(tmp_path)
    m.set_arm_cpu(*ids).write()
    t = discover(tmp_path)
    assert t.model_name == name
    assert t.to_dict()["model_name"] == name


def test_the_table_names_the_issues_parts():
    assert "Neoverse V2" in arm_cpu_name(0x41, 0xD4F) and "Grace" in arm_cpu_name(0x41, 0xD4F)
    assert "Graviton4" in arm_cpu_name(0x41, 0xD4F)
    assert arm_cpu_name(0x48, 0xD01) == "HiSilicon Kunpeng 920"
    assert "Neoverse N1" in arm_cpu_name(0x41, 0xD0C) and "Ampere Altra" in arm_cpu_name(0x41, 0xD0C)
    assert "Graviton3" in arm_cpu_name(0x41, 0xD40)
    assert "Neoverse N2" in arm_cpu_name(0x41, 0xD49) and "Neoverse V3" in arm_cpu_name(0x41, 0xD84)
    assert "Ampere-1" in arm_cpu_name(0xC0, 0xAC3) and "Ampere-1a" in arm_cpu_name(0xC0, 0xAC4)


def test_unknown_arm64_part_is_named_by_its_ids(tmp_path):
    m = one_node(tmp_path)
    m.set_arm_cpu(0x41, 0xD0B).write()
    assert discover(tmp_path).model_name == "ARM implementer 0x41 part 0xd0b"


def test_malformed_arm64_ids_leave_the_model_unknown_with_a_warning(tmp_path, caplog):
    m = one_node(tmp_path)
    m.set_arm_cpu(0x41, 0xD4F).write()
    path = tmp_path / "proc/cpuinfo"
    path.write_text(path.read_text().replace("0xd4f", "Grace"))
    with caplog.at_level(logging.WARNING, logger="numabind.topology"):
        assert discover(tmp_path).model_name is None
    assert any("CPU part" in r.getMessage() for r in caplog.records)


def test_x86_model_name_is_unchanged(tmp_path):
    two_sockets(tmp_path)
    assert discover(tmp_path).model_name == "Intel(R) Xeon(R) Platinum 8480+"


def test_cli_names_the_grace_cpu(tmp_path, capsys):
    gb200(tmp_path)
    for argv in (["--root", str(tmp_path)], ["--root", str(tmp_path), "topology"]):
        assert main(argv) == 0
        assert f"cpu model: {GRACE}" in capsys.readouterr().out
    assert main(["--root", str(tmp_path), "topology", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model_name"] == GRACE


# -------------------------------------------------------------------------------------------- the clusters
def test_kunpeng_clusters_discovered(tmp_path):
    kunpeng920(tmp_path)
    t = discover(tmp_path)
    assert t.model_name == "HiSilicon Kunpeng 920"
    assert t.cpus[5].cluster == 1 and t.cpus[5].cluster_cpus == L("4-7")
    assert t.cpus[70].cluster == 17 and t.cpus[70].cluster_cpus == L("68-71")
    groups = t.cluster_groups()
    assert len(groups) == 32 and all(len(g) == 4 for g in groups)
    assert t.to_dict()["cluster_groups"][:2] == ["0-3", "4-7"]
    assert sorted(t.nodes) == [0, 1, 2, 3] and t.package_nodes() == {0: {0, 1}, 1: {2, 3}}
    assert t.nodes[1].distances == {0: 12, 1: 10, 2: 22, 3: 24}


def test_grace_without_cluster_level_has_no_cluster_groups(tmp_path):
    grace_hopper(tmp_path)
    t = discover(tmp_path)
    assert t.cluster_groups() == () and t.to_dict()["cluster_groups"] == []
    assert t.cpus[7].cluster_cpus == {7} and t.cpus[7].cluster == -1


def test_one_cluster_id_for_every_core_is_read_by_cpus_not_ids(tmp_path):
    """Firmware whose PPTT has no level between core and package: each cluster is its core, while the
    ids may be one number for all (the package's); clusters are told apart by their CPUs."""
    m = grace_hopper(tmp_path, l3=False)
    for c in range(72):
        m.set_file(f"{CPU}/cpu{c}/topology/cluster_id", "0\n")
    m.write()
    t = discover(tmp_path)
    assert t.cluster_groups() == ()
    assert {c.cluster_cpus for c in t.cpus.values()} == {frozenset({c}) for c in range(72)}


def test_cluster_files_read_once_per_cluster(tmp_path):
    kunpeng920(tmp_path)
    reader = RecordingReader(tmp_path)
    discover_from(reader)
    counts = collections.Counter(r.rsplit("/", 1)[1] for r in reader.reads if "/topology/cluster" in r)
    assert counts == {"cluster_cpus_list": 32, "cluster_id": 32}
    assert max(collections.Counter(reader.reads).values()) == 1


def test_kernel_without_cluster_files_is_read_once(tmp_path):
    m = kunpeng920(tmp_path)
    m.set_quirks(new_names=False).write()
    reader = RecordingReader(tmp_path)
    t = discover_from(reader)
    assert t.cluster_groups() == () and t.cpus[5].cluster_cpus == frozenset() and t.cpus[5].cluster == -1
    assert len([r for r in reader.reads if "/topology/cluster" in r]) <= 2   # list, then mask, of cpu0


def test_x86_reads_no_cluster_file(tmp_path):
    """x86 kernels make the cluster an L2's CPUs, which the caches hold: no file per core is read."""
    two_sockets(tmp_path)
    reader = RecordingReader(tmp_path)
    discover_from(reader)
    assert not [r for r in reader.reads if "cluster" in r]


def test_tree_shows_clusters_that_are_no_other_object(tmp_path):
    kunpeng920(tmp_path)
    t = discover(tmp_path)
    text = tree_text(t, build_tree(t))
    assert any(line.strip() == "Cluster 1" for line in text.splitlines())
    assert text.count("Cluster ") == 32
    xml = hwloc_xml(t, build_tree(t))
    assert xml.count('subtype="Cluster"') == 32
    grace_hopper(tmp_path / "g")
    g = discover(tmp_path / "g")
    assert "Cluster" not in tree_text(g, build_tree(g))


@pytest.mark.skipif(LSTOPO is None, reason="hwloc's lstopo-no-graphics is not installed (Debian package hwloc-nox)")
@pytest.mark.parametrize("shape", [kunpeng920, lambda root: grace_blackwell(root, l3=False, cluster_cores=4)],
                         ids=["kunpeng920", "gb200_clusters"])
def test_lstopo_sees_the_same_clusters(tmp_path, shape):
    shape(tmp_path / "m")
    t = discover(tmp_path / "m")
    view = lstopo_view(tmp_path / "m")
    assert view.xml.count('subtype="Cluster"') == len(t.cluster_groups()) > 0
    assert cluster_differences(t, view) == []
    (tmp_path / "ours.xml").write_text(hwloc_xml(t, build_tree(t)))   # and lstopo reads ours back
    assert lstopo_view(tmp_path / "ours.xml").xml.count('subtype="Cluster"') == len(t.cluster_groups())
