"""tools/capture_machine.py: a dump of what discovery reads replays to the same machine.

Every ready-made fake machine (but the largest), and GPU boxes of each vendor (with NICs and disks under their nodes), is
captured and replayed from the tarball: discovery, the PCI devices and the ``numabind topology`` tree must
be those of the original. On this host, the live machine is captured and replayed the same way.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from numabind.cli.tree import build_tree, tree_text
from numabind.iodevices import scan_pci
from numabind.topology import discover, discover_from

from .fakegpu import BOX_ADDRS, container, eight_gpu_box
from .fakeio import add_block, add_net, add_pci_function
from .fakesys import FACTORIES, fake_machine, two_sockets  # noqa: F401  (fixture)
from .tools import TOOLS, load_tool

capture_machine = load_tool("capture_machine")
TOOL = TOOLS / "capture_machine.py"


def _assert_replays(root, dump: Path) -> None:
    view = capture_machine.capture(dump, root)
    original = discover_from(capture_machine.FsReader(root), env={})
    assert view == original.to_dict()        # the capture itself sees what discovery sees
    again = discover_from(capture_machine.FsReader(dump), env={})
    assert capture_machine.comparable(again.to_dict()) == capture_machine.comparable(view)
    assert scan_pci(dump) == scan_pci(root)
    assert tree_text(again, build_tree(again, scan_pci(dump))) == \
        tree_text(original, build_tree(original, scan_pci(root)))


#: ``big`` (1152 CPUs) is left out: its capture is some 50,000 files, over a minute of file-system work on a
#: 2-CPU machine, and it holds no kind of file the other machines lack (``many_nodes`` has the most nodes).
CAPTURED = sorted(set(FACTORIES) - {"big"})


@pytest.mark.parametrize("kind", CAPTURED)
def test_every_fake_machine_replays_from_its_capture(fake_machine, tmp_path, kind):
    machine = fake_machine(kind)
    _assert_replays(machine.path, tmp_path / f"{kind}.tar.bz2")


@pytest.mark.parametrize("vendor", ["nvidia", "amd", "intel"])
def test_a_gpu_box_replays_with_its_gpus_nics_and_disks(tmp_path, vendor):
    root = tmp_path / "box"
    two_sockets(root, cpus_per_socket=8)
    eight_gpu_box(root, vendor)
    add_pci_function(root, "0000:19:00.0", numa_node=0)
    add_net(root, "ens1", "0000:19:00.0")
    add_pci_function(root, "0000:9b:00.0", pci_class=0x010802, numa_node=1)
    add_block(root, "nvme0n1", "0000:9b:00.0", "259:0", partitions={"nvme0n1p1": "259:1"})
    dump = tmp_path / "box.tar.bz2"
    _assert_replays(root, dump)
    gpus = discover(dump).gpus
    assert [g.vendor for g in gpus] == [vendor] * 8
    assert [g.numa_node for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_the_dump_keeps_only_what_discovery_reads(tmp_path):
    root = tmp_path / "box"
    two_sockets(root, cpus_per_socket=4).set_cgroup2("/job", cpus=range(4), mems=[0]).write()
    eight_gpu_box(root, "nvidia")
    (root / "proc" / "cmdline").write_text("BOOT_IMAGE=/vmlinuz secret=1\n")
    (root / "proc" / "self" / "environ").write_text("TOKEN=abc\0")
    mounts = root / "proc" / "mounts"
    mounts.write_text("/dev/vda / ext4 rw 0 0\ntmpfs /mnt/private/tools tmpfs ro 0 0\n" + mounts.read_text())
    status = root / "proc" / "self" / "status"
    status.write_text("Name:\tsecret-job\nPid:\t4242\nUid:\t1000\t1000\t1000\t1000\n" + status.read_text())
    dump = tmp_path / "box.tar.bz2"
    view = capture_machine.capture(dump, root)
    with tarfile.open(dump) as tar:
        names = tar.getnames()
        kept_status = tar.extractfile("machine/proc/self/status").read().decode()
        kept_mounts = tar.extractfile("machine/proc/mounts").read().decode()
    assert "machine/proc/cmdline" not in names and "machine/proc/self/environ" not in names
    assert "machine/proc/driver/nvidia/gpus/0000:18:00.0/information" in names
    assert kept_status and all(line.startswith(("Cpus_allowed", "Mems_allowed"))
                               for line in kept_status.splitlines()), kept_status
    assert kept_mounts and all(line.split()[2] in ("cgroup", "cgroup2", "cpuset")
                               for line in kept_mounts.splitlines()), kept_mounts
    assert view["allowed_cpus"] == "0-3" and view["allowed_source"].endswith("cgroup2:/job")
    assert discover(dump).to_dict()["allowed_source"] == view["allowed_source"]


def test_this_host_replays_from_its_capture(tmp_path):
    """The live machine, through the command line, with --check."""
    dump = tmp_path / "host.tar.bz2"
    out = subprocess.run([sys.executable, str(TOOL), str(dump), "--check"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "the dump replays to the same topology" in out.stdout
    live, again = discover("/"), discover(dump)
    assert again.nodes.keys() == live.nodes.keys()
    assert again.online_cpus == live.online_cpus
    assert {n: node.cpus for n, node in again.nodes.items()} == {n: node.cpus for n, node in live.nodes.items()}


def test_device_files_keep_whether_they_can_be_opened(tmp_path):
    """A container's view: procfs masked to the exposed GPUs, one device file present but not openable."""
    root = tmp_path / "box"
    two_sockets(root, cpus_per_socket=4)
    eight_gpu_box(root, "nvidia")
    env = container(root, "nvidia", [1, 6], style="legacy")
    os.chmod(root / "dev" / "nvidia6", 0)
    dump = tmp_path / "box.tar.bz2"
    view = capture_machine.capture(dump, root, env=env)
    assert [g["pci_address"] for g in view["gpus"]] == [BOX_ADDRS[1]]
    again = discover_from(capture_machine.FsReader(dump), env=env)
    assert capture_machine.comparable(again.to_dict()) == capture_machine.comparable(view)
