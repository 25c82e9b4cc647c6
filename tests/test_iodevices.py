"""numabind.iodevices: PCI functions, NICs and block devices, and the nodes of numactl's device specifiers.

Fake machines come from tests/fakesys.py plus tests/fakeio.py (the kernel's layout: devices under
sys/devices, symlinks from sys/bus/pci/devices, sys/class/{net,block} and sys/dev/block). On this
host, each device specifier is also compared with what the real numactl makes of it.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from numabind import Plan, discover
from numabind._fs import FsReader
from numabind.errors import PlanError
from numabind.iodevices import DeviceNodes, pci_class_name, scan_pci
from tests.fakeio import add_block, add_net, add_pci_function
from tests.fakesys import two_sockets

NIC, NVME, GPU = "0000:18:00.0", "0000:9a:00.0", "0000:3b:00.0"


@pytest.fixture
def io_machine(tmp_path):
    """Two sockets (node 0: CPUs 0-3, node 1: 4-7); a NIC on node 0 (eth0, behind virtio), an NVMe disk
    with two partitions on node 1, a GPU whose firmware gives no node, a bridge; lo and loop0."""
    two_sockets(tmp_path, cpus_per_socket=4, smt=False)
    add_pci_function(tmp_path, NIC, pci_class=0x020000, numa_node=0, local_cpulist="0-3")
    add_net(tmp_path, "eth0", NIC, via="virtio2")
    add_pci_function(tmp_path, NVME, pci_class=0x010802, numa_node=1, local_cpulist="4-7")
    add_block(tmp_path, "nvme0n1", NVME, "259:0", via="nvme/nvme0",
              partitions={"nvme0n1p1": "259:1", "nvme0n1p2": "259:2"})
    add_pci_function(tmp_path, GPU, pci_class=0x030200, numa_node=-1, vendor=0x10DE, device=0x2330)
    add_pci_function(tmp_path, "0000:00:00.0", pci_class=0x060000, numa_node=None)
    add_net(tmp_path, "lo", None)
    add_block(tmp_path, "loop0", None, "7:0")
    return tmp_path


@pytest.mark.parametrize("spec, node", [
    (f"pci:{NIC}", 0), ("pci:18:00.0", 0), ("pci:18:00", 0), ("pci:0:18:0.0", 0), ("pci:0000:9A:00.0", 1),
    ("netdev:eth0", 0), ("block:nvme0n1", 1), ("block:nvme0n1p2", 1),
])
def test_device_nodes_of_a_fake_machine(io_machine, spec, node):
    assert DeviceNodes(str(io_machine)).node_of(spec) == node
    assert DeviceNodes(FsReader(str(io_machine))).node_of(spec) == node


@pytest.mark.parametrize("spec, pattern", [
    (f"pci:{GPU}", r"gives the PCI function 0000:3b:00.0 no NUMA node \(numa_node is -1\)"),
    ("pci:0000:00:00.0", r"cannot read the NUMA node"),
    ("pci:0000:77:00.0", r"no PCI function 0000:77:00.0 under .*functions: 0000:00:00.0, 0000:18:00.0"),
    ("pci:18:00.9", r"is not a PCI address"),
    ("pci:18:20.0", r"is not a PCI address"),
    ("pci:xyz", r"is not a PCI address"),
    ("pci:", r"names no device"),
    ("netdev:eth9", r"no network interface 'eth9' \(sys/class/net lists: eth0, lo\)"),
    ("netdev:lo", r"network interface lo is a virtual device"),
    ("netdev:../eth0", r"is not a device name"),
    ("block:loop0", r"block device loop0 is a virtual device"),
    ("block:sda", r"no block device 'sda'"),
    ("usb:1", r"'usb' is not one of pci:, netdev:, block:, file:"),
])
def test_device_specifier_errors_name_the_device(io_machine, spec, pattern):
    with pytest.raises(PlanError, match=pattern):
        DeviceNodes(str(io_machine)).node_of(spec)


def test_file_is_placed_by_the_block_device_of_its_file_system(io_machine, tmp_path_factory):
    """file:PATH stats PATH (here a real file) and finds its device number among the fake block devices."""
    data = tmp_path_factory.mktemp("data") / "x"
    data.write_text("x")
    dev = os.stat(data).st_dev
    number = f"{os.major(dev)}:{os.minor(dev)}"
    if number in ("259:0", "259:1", "259:2", "7:0"):
        pytest.skip(f"this file system's device {number} collides with the fake ones")
    add_block(io_machine, "nvme1n1", NVME, number)
    finder = DeviceNodes(str(io_machine))
    assert finder.node_of(f"file:{data}") == 1
    # without sys/dev/block, the dev files of sys/class/block are searched
    shutil.rmtree(io_machine / "sys/dev/block")
    assert finder.node_of(f"file:{data}") == 1
    with pytest.raises(PlanError, match="cannot stat"):
        finder.node_of(f"file:{data}.missing")
    with pytest.raises(PlanError, match="character device"):
        finder.node_of("file:/dev/null")
    os.unlink(io_machine / "sys/class/block/nvme1n1")
    with pytest.raises(PlanError, match=f"device {number}, which is no block device"):
        finder.node_of(f"file:{data}")


def test_scan_pci_lists_functions_with_their_nics_and_disks(io_machine):
    devices = {d.address: d for d in scan_pci(str(io_machine))}
    assert list(devices) == sorted(devices) == ["0000:00:00.0", NIC, GPU, NVME]
    nic, nvme, gpu, bridge = devices[NIC], devices[NVME], devices[GPU], devices["0000:00:00.0"]
    assert (nic.kind, nic.numa_node, nic.nets, nic.blocks) == ("Ethernet", 0, ("eth0",), ())
    assert nic.local_cpus == frozenset(range(4))
    assert (nvme.kind, nvme.numa_node, nvme.blocks) == ("NVMExp", 1, ("nvme0n1",))   # partitions left out
    assert (gpu.kind, gpu.numa_node, gpu.vendor_id) == ("3D", None, 0x10DE)
    assert (bridge.kind, bridge.numa_node, bridge.important) == ("HostBridge", None, False)
    assert nic.important and nvme.important and gpu.important
    assert nic.describe() == f"PCI {NIC} (Ethernet) net eth0"
    assert nvme.to_dict()["blocks"] == ["nvme0n1"] and nvme.to_dict()["class"] == "0x010802"


def test_pci_class_names():
    assert [pci_class_name(c) for c in (0x020000, 0x020700, 0x010802, 0x030000, 0x120000, 0x0B4000, 0xFF0000)] == [
        "Ethernet", "InfiniBand", "NVMExp", "VGA", "ProcessingAccelerator", "Co-Processor", "class ff00"]
    assert pci_class_name(None) == "unknown"


def test_plan_from_numactl_args_with_the_device_finder(io_machine):
    topo = discover(str(io_machine))
    finder = DeviceNodes(str(io_machine))
    plan = Plan.from_numactl_args("-N netdev:eth0 -m block:nvme0n1p1", topology=topo, device_node=finder.node_of)
    assert plan == Plan(cpus=frozenset(range(4)), mem_policy="bind", mem_nodes={1})
    assert Plan.from_numactl_args(f"-i !pci:{NIC}", topology=topo, device_node=finder.node_of).mem_nodes == {1}


# --------------------------------------------------------------------------- this host, against numactl
def _host_specifiers() -> list[str]:
    specs = [f"pci:{d.address}" for d in scan_pci("/")][:6]
    specs += [f"netdev:{n}" for n in sorted(os.listdir("/sys/class/net"))][:4]
    specs += [f"block:{b}" for b in sorted(os.listdir("/sys/class/block"))][:4]
    return specs + ["file:/etc/passwd", "file:/proc/self/status"]


def _numactl_node(spec: str) -> int | None:
    """The node numactl binds memory to for ``--membind=SPEC``, or None when it refuses the specifier."""
    cp = subprocess.run(["numactl", f"--membind={spec}", "numactl", "--show"], capture_output=True, text=True,
                        timeout=30)
    if cp.returncode != 0:
        return None
    line = next(x for x in cp.stdout.splitlines() if x.startswith("membind:"))
    nodes = line.split(":", 1)[1].split()
    assert len(nodes) == 1, cp.stdout
    return int(nodes[0])


@pytest.mark.kernel
@pytest.mark.skipif(shutil.which("numactl") is None, reason="numactl is not installed")
def test_host_device_specifiers_agree_with_numactl():
    finder = DeviceNodes("/")
    for spec in _host_specifiers():
        try:
            ours: int | None = finder.node_of(spec)
        except PlanError:
            ours = None
        assert ours == _numactl_node(spec), spec


def test_virtual_interfaces_take_the_node_of_their_pci_functions(tmp_path):
    """A bond and a VLAN (issue 29 §1) name the node of the functions under them; a bond across nodes, or over
    a function the firmware gives no node, is a PlanError naming the functions; lo stays virtual."""
    from tests.fakeio import MIXED, add_upper, mixed_box

    mixed_box(tmp_path)
    nodes = DeviceNodes(str(tmp_path))
    assert nodes.node_of("netdev:bond0") == 0          # eth1 (firmware -1, its bridge's node 0) and eth2
    assert nodes.node_of("netdev:eth0.100") == 0
    add_upper(tmp_path, "bond1", ["eth3", "ib0"], bond=True)
    with pytest.raises(PlanError, match=rf"spans PCI functions on different nodes: {MIXED['eth3']} \(node 0\), "
                                        rf"{MIXED['mlx5_0']} \(node 1\)"):
        nodes.node_of("netdev:bond1")
    (tmp_path / "sys/bus/pci/devices/0000:02:02.0/numa_node").write_text("-1\n")
    (tmp_path / "sys/bus/pci/devices/0000:01:00.0/numa_node").write_text("-1\n")
    (tmp_path / "sys/bus/pci/devices/0000:00:01.0/numa_node").write_text("-1\n")
    with pytest.raises(PlanError, match=r"netdev:bond0.*0000:07:00.0 \(node unknown\).*gives one no NUMA node"):
        nodes.node_of("netdev:bond0")
    with pytest.raises(PlanError, match="network interface lo is a virtual device"):
        nodes.node_of("netdev:lo")
