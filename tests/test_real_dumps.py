"""Real machines: hwloc-gather-topology dumps of real kernels (tests/dumps/, gathered by
``python3 -m tests.dumps.gather`` inside the multi-NUMA QEMU guests and on a build host).

Each dump is discovered straight from its .tar.bz2 and compared with the lstopo that reads
the same files; the facts QEMU was told to emulate (nodes, CPUs, distances, the cpusets the
gather script created) are pinned too, so a dump that stopped matching its guest would fail.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from numabind._fs import FsReader
from numabind.cpulist import parse_cpulist
from numabind.strategies import plan_for_gpu
from numabind.topology import discover, discover_from

from .kernel import numabind_cli
from .lstopo import LSTOPO, differences, lstopo_view
from .vm import harness

DUMPS = sorted((Path(__file__).resolve().parent / "dumps").glob("*.tar.bz2"))
L = parse_cpulist
needs_lstopo = pytest.mark.skipif(LSTOPO is None, reason="hwloc's lstopo-no-graphics is not "
                                  "installed (Debian package hwloc-nox)")

#: What each VM dump must show beyond agreeing with lstopo:
#: (guest topology, online CPUs, allowed CPUs, allowed nodes, allowed source).
EXPECTED = {
    "vm-2n": ("2n", "0-3", "0-3", "0-1", "cgroup2:/"),
    "vm-mem-only": ("mem-only", "0-3", "0-3", "0-2", "cgroup2:/"),
    "vm-asym": ("asym", "0-3", "0-3", "0-2", "cgroup2:/"),
    "vm-cgroup2-cpuset": ("mem-only", "0-3", "2-3", "1-2", "cgroup2:/job"),
    "vm-cgroup1-cpuset": ("2n", "0-3", "1-2", "0-1", "cgroup1:/batch"),
    # `mount -t cpuset` on a current kernel: /proc/mounts says cgroup with cpuset,noprefix
    "vm-legacy-cpuset": ("2n", "0-3", "2-3", "1", "cgroup1:/job"),
    "vm-cpu-offline": ("asym", "0,2", "0,2", "0-2", "cgroup2:/"),
}


def test_the_dumps_are_there():
    names = {p.name.removesuffix(".tar.bz2") for p in DUMPS}
    assert set(EXPECTED) | {"host"} <= names, sorted(names)


@needs_lstopo
@pytest.mark.parametrize("dump", DUMPS, ids=lambda p: p.name.removesuffix(".tar.bz2"))
def test_dump_agrees_with_lstopo(dump):
    topo = discover(dump)
    assert topo.root == str(dump)
    view = lstopo_view(FsReader(dump).root)
    diffs = differences(topo, view)
    assert diffs == [], f"{dump.name}: discover() and lstopo disagree:\n" + "\n".join(diffs)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_vm_dump_matches_what_the_guest_emulated(name):
    guest, online, allowed, nodes, source = EXPECTED[name]
    spec = harness.TOPOLOGIES[guest]
    topo = discover(Path(__file__).resolve().parent / "dumps" / f"{name}.tar.bz2")
    ids = list(range(len(spec.nodes)))
    assert sorted(topo.nodes) == ids
    assert topo.online_cpus == L(online)
    assert (topo.allowed_cpus, topo.allowed_nodes, topo.allowed_source) == (L(allowed), L(nodes),
                                                                           source)
    for i in ids:
        node = topo.nodes[i]
        assert node.cpus == frozenset(spec.nodes[i].cpus) & topo.online_cpus, f"node {i}"
        assert [node.distances[j] for j in ids] == spec.distance_matrix()[i], f"node {i}"
        emulated = spec.nodes[i].mem_mib << 20
        assert 0.8 * emulated <= node.memory_bytes <= emulated, f"node {i} memory"
    assert topo.possible_cpus == frozenset(range(spec.ncpus))


def test_offline_cpus_leave_their_node_the_online_ones():
    topo = discover(Path(__file__).resolve().parent / "dumps" / "vm-cpu-offline.tar.bz2")
    assert topo.nodes[0].cpus == {0}             # CPU 1 was taken offline
    assert topo.nodes[2].cpus == frozenset()     # its only CPU 3 too: memory stays
    assert topo.nodes[2].memory_bytes > 0 and 2 in topo.allowed_nodes
    assert set(topo.cpus) == {0, 2}


@pytest.mark.parametrize("dump", DUMPS, ids=lambda p: p.name.removesuffix(".tar.bz2"))
def test_dumps_hold_topology_files_only(dump):
    with tarfile.open(dump) as tf:
        names = [m.name.split("/", 1)[1] for m in tf.getmembers() if "/" in m.name]
        info = tf.extractfile(next(m for m in tf.getmembers()
                                   if m.name.endswith("proc/hwloc-nofile-info"))).read().decode()
        sizes = sum(m.size for m in tf.getmembers())
    for banned in ("proc/cmdline", "proc/version", "proc/stat", "cpuid", "sys/class/dmi",
                   "sys/devices/virtual/dmi"):
        assert not any(n == banned or n.startswith(banned + "/") for n in names), banned
    assert "HostName" not in info and "OSRelease" not in info
    assert not any(n.endswith(("/tasks", "/cgroup.procs")) for n in names)   # no process ids
    assert dump.stat().st_size < 16 * 1024 and sizes < 256 * 1024


def _cli(*args: str) -> subprocess.CompletedProcess:
    return numabind_cli(*args, timeout=120)


def test_cli_topology_and_plan_read_a_dump_tarball():
    dump = str(Path(__file__).resolve().parent / "dumps" / "vm-mem-only.tar.bz2")
    out = _cli("topology", "--root", dump, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [n["cpus"] for n in data["nodes"]] == ["0-1", "2-3", ""]
    assert data["root"] == dump
    text = _cli("--root", dump, "topology")
    assert text.returncode == 0 and "memory-only" in text.stdout, text.stdout + text.stderr
    plan = _cli("plan", "--root", dump, "--json")
    assert plan.returncode == 0, plan.stderr
    json.loads(plan.stdout)
    hw = _cli("--root", dump, "hardware")
    assert hw.returncode == 0 and "available: 3 nodes (0-2)" in hw.stdout, hw.stdout + hw.stderr


def test_cli_refuses_a_mistyped_root(tmp_path):
    out = _cli("--root", str(tmp_path / "typo"), "hardware")
    assert out.returncode == 2
    assert "does not exist" in out.stderr and "Traceback" not in out.stderr


def test_the_legacy_cpuset_dump_has_files_without_prefix():
    with tarfile.open(Path(__file__).resolve().parent / "dumps" / "vm-legacy-cpuset.tar.bz2") as tf:
        names = set(tf.getnames())
        mounts = tf.extractfile("vm-legacy-cpuset/proc/mounts").read().decode()
    assert "vm-legacy-cpuset/dev/cpuset/job/cpus" in names
    assert not any(n.endswith("/cpuset.cpus") and "/dev/cpuset/" in n for n in names)
    assert " /dev/cpuset cgroup rw,relatime,cpuset,noprefix" in mounts


# ------------------------------------------------------------------ captures of real GPU machines
# tests/dumps/captures/NAME.tar.bz2 was written by tools/capture_machine.py on a real machine with GPUs (what
# numabind's discovery read there: CPUs, nodes, caches, cpusets, PCI devices, the NVIDIA driver's files, which
# /dev/nvidiaN opened); NAME.json holds what nvidia-smi, nvidia-smi topo -m and tools/gpu_check.py (NVML) said
# on that machine. h200-vm was captured before the tool also copied hwloc's hex masks, so lstopo cannot read it:
# it is checked against nvidia-smi and NVML, not against lstopo.
CAPTURES = sorted((Path(__file__).resolve().parent / "dumps" / "captures").glob("*.tar.bz2"))


def _said(dump: Path) -> dict:
    return json.loads(dump.with_name(dump.name.removesuffix(".tar.bz2") + ".json").read_text())


def test_the_captures_are_there():
    assert {p.name.removesuffix(".tar.bz2") for p in CAPTURES} >= {"h200-vm"}


@pytest.mark.parametrize("dump", CAPTURES, ids=lambda p: p.name.removesuffix(".tar.bz2"))
def test_a_captured_gpu_machine_replays_what_nvidia_smi_and_nvml_said(dump):
    said = _said(dump)
    topo = discover(dump)
    gpus = [g for g in topo.gpus if g.vendor == "nvidia"]
    smi = said["nvidia_smi_query"]
    assert [g.pci_address for g in gpus] == [s["pci.bus_id"].lower()[4:] for s in smi]
    assert [g.uuid for g in gpus] == [s["uuid"] for s in smi]
    topo_m = {t["gpu"]: t for t in said["nvidia_smi_topo"]}
    checked = {r["index"]: r for r in said["gpu_check"]["gpus"]}
    assert said["gpu_check"]["agree"] is True
    for g in gpus:
        # nvidia-smi topo -m's NUMA and CPU affinity, NVML's memory and CPU affinity
        assert g.numa_node == int(topo_m[g.index]["numa_affinity"])
        assert g.local_cpus == parse_cpulist(topo_m[g.index]["cpu_affinity"])
        assert g.numa_node in parse_cpulist(checked[g.index]["nvml_memory_nodes"])
        assert g.local_cpus == parse_cpulist(checked[g.index]["nvml_cpus"])
        assert g.identity == "certain"
        plan = plan_for_gpu(g.index, topology=topo)
        assert plan.cpus == topo.nodes[g.numa_node].cpus & topo.allowed_cpus
        assert (plan.mem_policy, plan.mem_nodes) == ("bind", frozenset({g.numa_node}))


def test_the_h200_vm_has_a_firmware_without_numa_node():
    """The H200 virtual machine: one node, 16 CPUs, the GPU's numa_node -1 (no SRAT proximity for the device),
    placed on the only node with CPUs; CUDA_VISIBLE_DEVICES by UUID and by index find it, index 1 nothing."""
    dump = next(p for p in CAPTURES if p.name == "h200-vm.tar.bz2")
    topo = discover(dump)
    assert list(topo.nodes) == [0] and topo.online_cpus == parse_cpulist("0-15")
    (gpu,) = topo.gpus
    assert (gpu.pci_address, gpu.numa_node, gpu.numa_source) == ("0000:00:06.0", 0, "single-node")
    with tarfile.open(dump) as tar:
        assert tar.extractfile("machine/sys/devices/pci0000:00/0000:00:06.0/numa_node").read() == b"-1\n"
    reader = FsReader(dump)
    uuid = _said(dump)["nvidia_smi_query"][0]["uuid"]
    for value, found in ((uuid, ["0000:00:06.0"]), ("0", ["0000:00:06.0"]), ("1", [])):
        env = {"CUDA_VISIBLE_DEVICES": value, "NVIDIA_VISIBLE_DEVICES": "0"}
        assert [g.pci_address for g in discover_from(reader, env=env).gpus] == found, value


def test_cli_plans_on_the_captured_h200(tmp_path):
    dump = next(p for p in CAPTURES if p.name == "h200-vm.tar.bz2")
    out = _cli("plan", "--all", "--json", "--root", str(dump))
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert (row["pci_address"], row["plan"]["numactl"]) == ("0000:00:06.0", "--physcpubind=0-15 --membind=0")
