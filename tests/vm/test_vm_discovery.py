"""Issue 3, item 5: inside a real multi-node kernel, ``numabind.discover()`` agrees exactly with
``numactl --hardware`` and with hwloc's ``lstopo``, and all three agree with what QEMU was told
to emulate (nodes, CPUs, distances; memory within the kernel's reservations)."""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from . import harness
from .cases.nodes import numactl_hardware

TOPOLOGY_PARAMS = [pytest.param(name, marks=pytest.mark.numa_vm(topology=name), id=name)
                   for name in harness.TOPOLOGIES]


def _mask_to_ids(mask: str) -> set[int]:
    value = int(mask.replace(",0x", "").replace("0x", ""), 16)
    return {bit for bit in range(value.bit_length()) if value >> bit & 1}


def lstopo_xml() -> dict:
    """{"cpus": {node: set}, "bytes": {node: int}, "distances": {node: [row]}} from hwloc's XML export."""
    xml = subprocess.run(["lstopo-no-graphics", "--of", "xml"], capture_output=True, text=True, check=True).stdout
    root = ET.fromstring(xml)
    out: dict = {"cpus": {}, "bytes": {}, "distances": {}}
    for obj in root.iter("object"):
        if obj.get("type") == "NUMANode":
            node = int(obj.get("os_index"))
            out["cpus"][node] = _mask_to_ids(obj.get("cpuset"))
            out["bytes"][node] = int(obj.get("local_memory", "0"))
    for dist in root.iter("distances2"):
        if dist.get("type") != "NUMANode":
            continue
        nodes = [int(v) for v in dist.find("indexes").text.split()]
        values = [int(v) for v in dist.find("u64values").text.split()]
        n = len(nodes)
        for i, node in enumerate(nodes):
            out["distances"][node] = values[i * n:(i + 1) * n]
    return out


@pytest.mark.parametrize("name", TOPOLOGY_PARAMS)
def test_discover_matches_numactl_lstopo_and_qemu(name, vm_topology):
    import numabind

    topo = numabind.discover()
    numactl = numactl_hardware()
    hwloc = lstopo_xml()
    ids = list(range(len(vm_topology.nodes)))

    assert sorted(topo.nodes) == ids
    assert sorted(numactl["cpus"]) == ids
    assert sorted(hwloc["cpus"]) == ids
    for i in ids:
        node = topo.nodes[i]
        expected_cpus = set(vm_topology.nodes[i].cpus)
        assert set(node.cpus) == expected_cpus == numactl["cpus"][i] == hwloc["cpus"][i], f"node {i} CPUs"
        row = vm_topology.distance_matrix()[i]
        assert [node.distances[j] for j in ids] == row == numactl["distances"][i] == hwloc["distances"][i], \
            f"node {i} distances"
        # memory: numactl prints MemTotal in whole MiB, hwloc gives MemTotal in bytes
        assert node.memory_bytes == hwloc["bytes"][i], f"node {i} bytes"
        assert node.memory_bytes >> 20 == numactl["mb"][i], f"node {i} MiB"
        spec = vm_topology.nodes[i].mem_mib << 20
        assert 0.8 * spec <= node.memory_bytes <= spec, f"node {i}: {node.memory_bytes} of {spec} emulated"
    assert set(topo.online_cpus) == set(range(vm_topology.ncpus))
    assert set(topo.allowed_nodes) == set(ids)
    memory_only = [i for i in ids if not topo.nodes[i].cpus]
    assert memory_only == list(vm_topology.memory_only_nodes)
    print(f"{name}: nodes {ids}, memory-only {memory_only}, MiB "
          f"{[topo.nodes[i].memory_bytes >> 20 for i in ids]}, distances {[numactl['distances'][i] for i in ids]}; "
          f"discover() == numactl --hardware == lstopo == QEMU")


@pytest.mark.parametrize("name", TOPOLOGY_PARAMS)
def test_discover_agrees_with_lstopo_everywhere(name, vm_topology):
    """Issue 9: the whole comparison of tests/lstopo.py (caches, cores, packages, memory,
    distances, allowed sets) on the live multi-node kernel. On the live root numabind's
    allowed CPUs are the process's affinity; in the guest it is not narrowed, like hwloc's."""
    import numabind

    from tests.lstopo import differences, lstopo_view

    topo = numabind.discover()
    diffs = differences(topo, lstopo_view(None))
    assert diffs == [], "\n".join(diffs)
    print(f"{name}: discover() == lstopo on {len(topo.cpus)} CPUs, {len(topo.caches)} caches, "
          f"{len(topo.nodes)} nodes")


@pytest.mark.numa_vm(topology="asym")
def test_offline_cpus_on_a_real_kernel(vm_topology):
    """Issue 9, items 3 and 6: CPUs taken offline leave their node the online ones (node 2,
    whose only CPU goes, keeps its memory), and discovery still agrees with lstopo."""
    import numabind

    from tests.lstopo import differences, lstopo_view

    gone = [1, 3]
    files = [Path(f"/sys/devices/system/cpu/cpu{c}/online") for c in gone]
    try:
        for f in files:
            f.write_text("0")
        topo = numabind.discover()
        assert topo.online_cpus == {0, 2}
        assert {n: set(node.cpus) for n, node in topo.nodes.items()} == {0: {0}, 1: {2}, 2: set()}
        assert topo.nodes[2].memory_bytes > 0 and topo.allowed_nodes == {0, 1, 2}
        diffs = differences(topo, lstopo_view(None))
        assert diffs == [], "\n".join(diffs)
    finally:
        for f in files:
            f.write_text("1")
    assert numabind.discover().online_cpus == {0, 1, 2, 3}
    print("asym: CPUs 1 and 3 offline -> nodes {0: 0, 1: 2, 2: memory only}; discover() == lstopo")
