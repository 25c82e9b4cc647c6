"""What QEMU was told to emulate, read back in the guest: its nodes, CPUs and distances, and what ``numactl
--hardware`` says (tests/vm/test_vm_harness.py, test_vm_discovery.py, and the arm64 guest's test_vm_arm64.py)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from ..specs import cpu_ranges


def guest_has_the_nodes_qemu_was_given(name, vm_topology):
    assert vm_topology.name == name
    assert os.path.isdir("/sys/devices/system/node/node1")
    sysnode = Path("/sys/devices/system/node")
    online = sorted(int(p.name[4:]) for p in sysnode.glob("node[0-9]*"))
    assert online == list(range(len(vm_topology.nodes)))
    for i, spec in enumerate(vm_topology.nodes):
        cpulist = (sysnode / f"node{i}" / "cpulist").read_text().strip()
        expected = ",".join(f"{lo}-{hi}" if lo != hi else str(lo) for lo, hi in cpu_ranges(spec.cpus))
        assert cpulist == expected, f"node {i}"
        distances = [int(v) for v in (sysnode / f"node{i}" / "distance").read_text().split()]
        assert distances == vm_topology.distance_matrix()[i], f"node {i}"
    print(f"{name}: {len(online)} nodes, distances {vm_topology.distance_matrix()}")


def numactl_hardware() -> dict:
    """{"cpus": {node: set}, "mb": {node: int}, "distances": {node: [row]}} from numactl --hardware."""
    text = subprocess.run(["numactl", "--hardware"], capture_output=True, text=True, check=True).stdout
    out: dict = {"cpus": {}, "mb": {}, "distances": {}}
    for m in re.finditer(r"^node (\d+) cpus:(.*)$", text, re.M):
        out["cpus"][int(m[1])] = {int(c) for c in m[2].split()}
    for m in re.finditer(r"^node (\d+) size: (\d+) MB$", text, re.M):
        out["mb"][int(m[1])] = int(m[2])
    table = text.split("node distances:", 1)[1].strip().splitlines()[1:]
    for row in table:
        head, _, values = row.partition(":")
        out["distances"][int(head)] = [int(v) for v in values.split()]
    return out
