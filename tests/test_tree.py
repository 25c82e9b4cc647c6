"""``numabind topology``'s object tree (numabind.cli.tree): lstopo-like text and hwloc XML.

The XML is checked by hwloc itself: ``lstopo --input FILE.xml`` must read what numabind writes, and
what it reads back (PUs, nodes with their CPUs and memory, distances, the allowed sets, cores,
packages, every cache, the PCI devices with their NICs and disks) must be numabind's own view of the
machine, on every ready-made fake machine of tests/fakesys.py and every real dump in tests/dumps/.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from numabind.cli import main
from numabind.cli.tree import build_tree, hwloc_bitmap, hwloc_xml, size_text, tree_text
from numabind.iodevices import scan_pci
from numabind.topology import discover
from tests.fakeio import add_block, add_net, add_pci_function
from tests.fakesys import ORACLE_FACTORIES, memory_only_nodes, snc, two_sockets
from tests.lstopo import LSTOPO, differences, hwloc_bitmap as parse_bitmap, lstopo_view

DUMPS = sorted((Path(__file__).resolve().parent / "dumps").glob("*.tar.bz2"))
needs_lstopo = pytest.mark.skipif(LSTOPO is None, reason="hwloc's lstopo-no-graphics is not installed "
                                  "(Debian package hwloc-nox)")


def _xml_of(topo) -> str:
    pci = [d for d in scan_pci(topo.root) if d.important]
    return hwloc_xml(topo, build_tree(topo, pci))


def _lstopo_reads(xml: str, tmp_path) -> tuple[object, ET.Element]:
    """What lstopo makes of ``xml``: the parsed view (tests/lstopo.py) and its own XML's root."""
    path = tmp_path / "numabind.xml"
    path.write_text(xml)
    view = lstopo_view(path)
    return view, ET.fromstring(view.xml)


def _pci_of(tree: ET.Element) -> dict[str, list[str]]:
    """PCI bus id -> the names of the OS devices (NICs, disks) below it, as lstopo read them."""
    out = {}
    for obj in tree.iter("object"):
        if obj.get("type") == "PCIDev":
            out[obj.get("pci_busid")] = sorted(o.get("name") for o in obj.iter("object") if o.get("type") == "OSDev")
    return out


@needs_lstopo
@pytest.mark.parametrize("name", sorted(ORACLE_FACTORIES))
def test_lstopo_reads_the_xml_of_every_fake_machine(name, tmp_path):
    ORACLE_FACTORIES[name](tmp_path / "m")
    topo = discover(tmp_path / "m")
    view, _ = _lstopo_reads(_xml_of(topo), tmp_path)
    assert differences(topo, view) == []


@needs_lstopo
@pytest.mark.parametrize("dump", DUMPS, ids=lambda p: p.name.removesuffix(".tar.bz2"))
def test_lstopo_reads_the_xml_of_every_real_dump(dump, tmp_path):
    topo = discover(dump)
    view, tree = _lstopo_reads(_xml_of(topo), tmp_path)
    assert differences(topo, view) == []
    assert _pci_of(tree) == {d.address: sorted(d.nets + d.blocks) for d in scan_pci(topo.root) if d.important}


def _io_machine(root) -> None:
    """Two sockets with a NIC on node 0, an NVMe disk on node 1 and a GPU the firmware gives no node."""
    two_sockets(root, cpus_per_socket=4, smt=False)
    add_pci_function(root, "0000:18:00.0", pci_class=0x020000, numa_node=0, local_cpulist="0-3")
    add_net(root, "ens1", "0000:18:00.0")
    add_pci_function(root, "0000:9a:00.0", pci_class=0x010802, numa_node=1, local_cpulist="4-7",
                     vendor=0x144D, device=0xA808)
    add_block(root, "nvme0n1", "0000:9a:00.0", "259:0", partitions={"nvme0n1p1": "259:1"})
    add_pci_function(root, "0000:c1:00.0", pci_class=0x030200, numa_node=-1, vendor=0x10DE, device=0x2330)
    add_pci_function(root, "0000:00:1f.3", pci_class=0x040300, numa_node=0)   # audio: not shown


@needs_lstopo
def test_lstopo_reads_the_pci_devices_and_their_nics_and_disks(tmp_path):
    _io_machine(tmp_path / "m")
    topo = discover(tmp_path / "m")
    view, tree = _lstopo_reads(_xml_of(topo), tmp_path)
    assert differences(topo, view) == []
    assert _pci_of(tree) == {"0000:18:00.0": ["ens1"], "0000:9a:00.0": ["nvme0n1"], "0000:c1:00.0": []}
    # each device hangs below the object of its node (a node-less one below the machine)
    parents = {}
    for obj in tree.iter("object"):
        for child in obj.iter("object"):
            if child.get("type") == "PCIDev" and obj.get("cpuset") and obj.get("type") != "Bridge":
                parents[child.get("pci_busid")] = parse_bitmap(obj.get("cpuset"))
    assert parents["0000:9a:00.0"] <= topo.nodes[1].cpus
    assert parents["0000:18:00.0"] <= topo.nodes[0].cpus


def test_text_shows_cores_caches_and_devices_per_node(tmp_path, capsys):
    _io_machine(tmp_path)
    assert main(["topology", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    tree = out.split("\nMachine (")[1].split("\nGPUs")[0].splitlines()
    node1 = next(i for i, line in enumerate(tree) if line.strip().startswith("NUMANode 1 "))
    pkg1 = next(i for i, line in enumerate(tree) if "Package 1" in line)
    nvme = next(i for i, line in enumerate(tree) if "0000:9a:00.0" in line)
    nic = next(i for i, line in enumerate(tree) if "0000:18:00.0" in line)
    assert pkg1 < node1 < nvme and nic < pkg1          # each device in its node's subtree
    assert "block nvme0n1" in tree[nvme] and "(NVMExp)" in tree[nvme] and "net ens1" in tree[nic]
    assert any("0000:c1:00.0" in line and "(no NUMA node)" in line for line in tree)
    assert not any("1f.3" in line for line in tree)    # only storage, network, display, accelerators
    cores = [line for line in tree if "Core " in line]
    assert len(cores) == len(topo_cores(tmp_path))
    assert any("L3 (" in line for line in tree) and any("L1d (" in line for line in tree)


def topo_cores(root) -> set:
    return {c.siblings for c in discover(root).cpus.values()}


def test_text_of_a_node_without_cpus(tmp_path, capsys):
    memory_only_nodes(tmp_path)
    topo = discover(tmp_path)
    text = tree_text(topo, build_tree(topo))
    cpuless = [n for n, node in topo.nodes.items() if not node.cpus]
    assert cpuless
    for n in cpuless:
        assert any(line.strip().startswith(f"NUMANode {n} (") and "no CPUs" in line for line in text.splitlines())


def test_snc_nodes_get_groups(tmp_path):
    """Several nodes per package: each node's CPUs are a Group below the package, its node attached there."""
    snc(tmp_path, sockets=1, nodes_per_socket=2, cores_per_node=2)
    topo = discover(tmp_path)
    root = build_tree(topo)
    holders = {n: o for o in root.walk() for n in o.memory}
    for n, node in topo.nodes.items():
        assert holders[n].cpus == node.cpus


def test_xml_cli_is_the_module_and_json_has_cache_sizes(tmp_path, capsys):
    two_sockets(tmp_path, cpus_per_socket=4)
    topo = discover(tmp_path)
    assert main(["--root", str(tmp_path), "topology", "--of", "xml"]) == 0
    assert capsys.readouterr().out == _xml_of(topo)
    assert main(["topology", "--root", str(tmp_path), "--json"]) == 0
    caches = json.loads(capsys.readouterr().out)["caches"]
    assert caches and all("size_bytes" in c for c in caches)
    assert {c["size_bytes"] for c in caches} == {c.size_bytes for c in topo.caches}
    assert any(isinstance(c["size_bytes"], int) and c["size_bytes"] > 0 for c in caches)


@pytest.mark.skipif(not os.path.isdir("/sys/devices/system/node"), reason="needs a NUMA-aware kernel's sysfs")
@needs_lstopo
def test_this_machine(tmp_path, capsys):
    assert main(["topology", "--of", "xml"]) == 0
    view, _ = _lstopo_reads(capsys.readouterr().out, tmp_path)
    assert differences(discover(), view) == []


@pytest.mark.parametrize("ids,text", [((), "0x0"), ((0,), "0x00000001"), ((0, 1, 2, 3), "0x0000000f"),
                                      ((32,), "0x00000001,0x00000000"), ((1, 63), "0x80000000,0x00000002")])
def test_hwloc_bitmap(ids, text):
    assert hwloc_bitmap(ids) == text
    assert parse_bitmap(text) == frozenset(ids)


@pytest.mark.parametrize("nbytes,text", [(None, "size unknown"), (512, "512 B"), (48 * 1024, "48 KiB"),
                                         (2 << 20, "2 MiB"), (1536 * 1024, "1.5 MiB"), (19 << 30, "19.0 GiB")])
def test_size_text(nbytes, text):
    assert size_text(nbytes) == text
