"""The harness checks itself: the guest really has several nodes (inside), and the host
turns guest results into its own (fast host tests, with a stand-in for QEMU)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from . import harness

TOPOLOGY_PARAMS = [pytest.param(name, marks=pytest.mark.numa_vm(topology=name), id=name)
                   for name in harness.TOPOLOGIES]


@pytest.mark.parametrize("name", TOPOLOGY_PARAMS)
def test_guest_has_the_nodes_qemu_was_given(name, vm_topology):
    assert vm_topology.name == name
    assert os.path.isdir("/sys/devices/system/node/node1")
    sysnode = Path("/sys/devices/system/node")
    online = sorted(int(p.name[4:]) for p in sysnode.glob("node[0-9]*"))
    assert online == list(range(len(vm_topology.nodes)))
    for i, spec in enumerate(vm_topology.nodes):
        cpulist = (sysnode / f"node{i}" / "cpulist").read_text().strip()
        expected = ",".join(f"{lo}-{hi}" if lo != hi else str(lo) for lo, hi in harness._ranges(spec.cpus))
        assert cpulist == expected, f"node {i}"
        distances = [int(v) for v in (sysnode / f"node{i}" / "distance").read_text().split()]
        assert distances == vm_topology.distance_matrix()[i], f"node {i}"
    print(f"{name}: {len(online)} nodes, distances {vm_topology.distance_matrix()}")
