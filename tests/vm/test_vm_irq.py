"""Issue 45, section 1, in the 3-node guest, as root: ``numabind irq`` lists a real virtio device's interrupts, moves
them onto node 1's CPUs and reads them back, and ``--restore`` puts them back; each step checked without numabind
(``/sys/bus/pci/devices/*/msi_irqs``, ``/proc/irq/N/*_list`` and ``/proc/interrupts`` read here).

The guest's virtio devices are the two 9p shares (``virtio-9p-pci``, MSI-X, not kernel-managed: a 9p device asks
for no spread affinity). The host share sits on the root bus, where QEMU gives it no NUMA node (``numa_node`` -1);
the results share sits behind a PCI expander bridge of node 1 (tests/vm/guest.py), so its function has node 1. The
first test moves every virtio function's interrupts with the library's ``apply_irqs`` onto node 1's CPUs, then
drives 9p traffic (``os.stat`` of files on the host share) to see them arrive on the CPU the kernel chose; the second
runs ``numabind irq --apply --all`` as a user would: the node-1 function's interrupts move onto node 1's CPUs, the
function without a node is left and said, and ``--restore`` puts everything back. Topology ``mem-only``: node 0 CPUs 0-1, node 1 CPUs 2-3, node 2
memory only; the same guest as ``test_vm_move.py``.
"""

from __future__ import annotations

import json
import os

import pytest

from numabind import irq
from numabind.cli import commands
from numabind.cpulist import parse_cpulist

from .specs import REPO_ROOT

VIRTIO = "0x1af4"


def _msi_irqs() -> dict[str, list[int]]:
    """PCI address -> MSI(-X) interrupts of each virtio function, read from sysfs here."""
    out = {}
    base = "/sys/bus/pci/devices"
    for address in sorted(os.listdir(base)):
        with open(f"{base}/{address}/vendor") as f:
            if f.read().strip() != VIRTIO:
                continue
        try:
            out[address] = sorted(int(n) for n in os.listdir(f"{base}/{address}/msi_irqs"))
        except FileNotFoundError:
            continue
    return {a: n for a, n in out.items() if n}


def _list(number: int, name: str) -> frozenset[int]:
    with open(f"/proc/irq/{number}/{name}") as f:
        return parse_cpulist(f.read().strip())


def _counts(numbers: list[int]) -> dict[int, dict[int, int]]:
    """Per-CPU counts of ``numbers`` from /proc/interrupts, read here."""
    with open("/proc/interrupts") as f:
        lines = f.read().splitlines()
    cpus = [int(w[3:]) for w in lines[0].split()]
    out = {}
    for line in lines[1:]:
        head, _, rest = line.partition(":")
        if head.strip().isdigit() and int(head) in numbers:
            out[int(head)] = dict(zip(cpus, map(int, rest.split()[:len(cpus)])))
    return out


@pytest.mark.numa_vm(topology="mem-only")
def test_irq_moves_a_virtio_devices_interrupts_to_node_1_reads_back_and_restores(vm_topology, monkeypatch, capsys):
    assert os.geteuid() == 0, "the guest runs its tests as root"
    monkeypatch.delenv("NUMABIND_FSROOT", raising=False)
    found = _msi_irqs()
    assert found, "the guest has no virtio function with MSI interrupts"

    assert commands.main(["irq", "--all", "--json"]) == 0
    shown = {d["pci_address"]: [i["irq"] for i in d["irqs"]] for d in json.loads(capsys.readouterr().out)["devices"]}
    for address, numbers in found.items():
        assert shown.get(address) == numbers, f"{address}: numabind irq shows {shown.get(address)}, sysfs {numbers}"

    node1 = frozenset(vm_topology.node_cpus(1))
    import numabind

    topo = numabind.discover()
    devices = irq.device_irqs(topo, [(a, "virtio", None) for a in found])
    moved = "irq: not moved"
    before = {i.number: _list(i.number, "smp_affinity_list") for d in devices for i in d.irqs}
    try:
        changes = irq.apply_irqs([(d, node1) for d in devices])
        assert {c.status for c in changes} <= {"moved", "unchanged"}, [c.to_dict() for c in changes]
        for c in changes:
            assert _list(c.irq, "smp_affinity_list") == node1
            assert _list(c.irq, "effective_affinity_list") <= node1
            assert c.effective == _list(c.irq, "effective_affinity_list")
        numbers = sorted(before)
        start = _counts(numbers)
        for _ in range(3):
            for name in os.listdir(REPO_ROOT / "src/numabind"):
                os.stat(REPO_ROOT / "src/numabind" / name)     # 9p requests: interrupts of the share's device
        end = _counts(numbers)
        grew = {n: {cpu: end[n][cpu] - start[n][cpu] for cpu in end[n] if end[n][cpu] != start[n][cpu]}
                for n in numbers}
        moved = (f"irq: virtio {sorted(found)} interrupts {numbers} moved to node 1 CPUs {sorted(node1)}; effective "
                 f"{ {c.irq: sorted(c.effective or ()) for c in changes} }; counts that grew after the move: {grew}")
        assert any(grew.values()), "no 9p interrupt arrived while stat-ing files on the share"
        for n, by_cpu in grew.items():
            assert set(by_cpu) <= node1, f"IRQ {n} ran on {sorted(by_cpu)} after it was moved to {sorted(node1)}"
    finally:
        assert commands.main(["irq", "--restore"]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    for number, was in before.items():
        assert _list(number, "smp_affinity_list") == was, out
    print(moved)
    print(f"irq --restore: {out.strip()}")


@pytest.mark.numa_vm(topology="mem-only")
def test_irq_apply_cli_moves_the_node_1_devices_interrupts_onto_node_1(vm_topology, capsys):
    assert os.geteuid() == 0, "the guest runs its tests as root"
    os.environ.pop("NUMABIND_FSROOT", None)
    node1 = frozenset(vm_topology.node_cpus(1))
    placed = {a: n for a, n in _msi_irqs().items()
              if open(f"/sys/bus/pci/devices/{a}/numa_node").read().strip() == "1"}
    assert placed, "no virtio function of node 1 (the results share behind the node-1 expander bridge)"
    numbers = sorted(n for ns in placed.values() for n in ns)
    original = {n: _list(n, "smp_affinity_list") for n in numbers}    # the kernel's: node 1's CPUs already
    node0 = frozenset(vm_topology.node_cpus(0))
    for n in numbers:     # off the device's node, as irqbalance or an operator leaves them on the other socket
        with open(f"/proc/irq/{n}/smp_affinity_list", "w") as f:
            f.write(",".join(map(str, sorted(node0))))
    before = {n: _list(n, "smp_affinity_list") for n in numbers}
    assert all(was == node0 for was in before.values()), before

    assert commands.main(["irq", "--apply", "--all", "--dry-run"]) == 0
    dry = capsys.readouterr().out
    for n in numbers:
        assert f"> /proc/irq/{n}/smp_affinity_list" in dry, dry
    assert all(_list(n, "smp_affinity_list") == before[n] for n in numbers), "a dry run changed an affinity"

    try:
        assert commands.main(["irq", "--apply", "--all", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        changes = {c["irq"]: c for c in out["changes"]}
        for n in numbers:
            assert changes[n]["status"] == "moved", changes[n]
            assert _list(n, "smp_affinity_list") == node1
            assert _list(n, "effective_affinity_list") <= node1
        print(f"irq --apply --all: node-1 function {sorted(placed)} interrupts {numbers} on CPUs "
              f"{ {n: sorted(_list(n, 'effective_affinity_list')) for n in numbers} }; notes {out['notes']}")
    finally:
        assert commands.main(["irq", "--restore"]) == 0, capsys.readouterr()
    capsys.readouterr()
    try:
        for n in numbers:
            assert _list(n, "smp_affinity_list") == before[n]      # --restore: back where --apply found them
    finally:
        for n in numbers:
            with open(f"/proc/irq/{n}/smp_affinity_list", "w") as f:
                f.write(",".join(map(str, sorted(original[n]))))

