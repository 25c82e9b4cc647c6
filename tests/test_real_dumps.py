"""Real machines: hwloc-gather-topology dumps of real kernels (tests/dumps/, gathered by
``python3 -m tests.dumps.gather`` inside the multi-NUMA QEMU guests and on a build host).

Each dump is discovered straight from its .tar.bz2 and compared with the lstopo that reads
the same files; the facts QEMU was told to emulate (nodes, CPUs, distances, the cpusets the
gather script created) are pinned too, so a dump that stopped matching its guest would fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from numabind._fs import FsReader
from numabind.cpulist import parse_cpulist
from numabind.topology import discover

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
    return subprocess.run([sys.executable, "-m", "numabind", *args], capture_output=True, text=True,
                          timeout=120)


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
