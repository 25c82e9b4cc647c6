"""The nearest network device of each GPU (issue 29 §1): PCI paths, link classes, tie splitting, the launcher
environment and ``numabind topology --matrix``, on fake PCIe switch trees (tests/fakeio.py) written as a kernel
writes them; the link classes are checked against hwloc's PCI tree of the same trees (``lstopo --input``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numabind.cli.matrix import format_matrix, topology_matrix
from numabind.errors import PlanError
from numabind.iodevices import (LINK_CLASSES, PciPlace, gpu_places, interface_functions, link_class, nearest_nics,
                                nic_env, pci_place, scan_nics)
from numabind.topology import discover

from .fakeio import MIXED, add_pci_node, add_port, add_rdma, dgx_box, mixed_box
from .fakesys import two_sockets
from .lstopo import LSTOPO, hwloc_bitmap

needs_lstopo = pytest.mark.skipif(LSTOPO is None, reason="hwloc's lstopo-no-graphics is not installed "
                                  "(Debian package hwloc-nox)")


def place(address: str, *bridges: str, host: str = "pci0000:00", node: int | None = 0) -> PciPlace:
    return PciPlace(address, (host, *bridges, address) if host else (address,), node)


# -- link classes, pure --------------------------------------------------------------------------------------


@pytest.mark.parametrize("a, b, want", [
    (place("g", "rp", "up", "d1"), place("n", "rp", "up", "d2"), "PIX"),         # one switch
    (place("g", "rp", "up", "d1"), place("n", "rp", "up", "d1"), "PIX"),         # one downstream port
    (place("g", "rp"), place("n", "rp"), "PIX"),                                 # functions of one device
    (place("g", "rp", "up", "d1"), place("n", "rp", "up", "d2", "up2", "d3"), "PXB"),
    (place("g", "rp", "up", "d1", "u2", "d2"), place("n", "rp", "up", "d1", "u3", "d3"), "PXB"),
    (place("g", "rp1", "up", "d1"), place("n", "rp2"), "PHB"),                   # different root ports
    (place("g"), place("n"), "PHB"),                                             # both on the root bus
    (place("g", "rp"), place("n", "rp", host="pci0000:40"), "NODE"),
    (place("g", "rp"), place("n", "rp", host="pci0000:80", node=1), "SYS"),
    (place("g", "rp", node=None), place("n", "rp", host="pci0000:40"), "SYS"),   # node not known
    (place("g", host="", node=0), place("n", host="", node=0), "NODE"),          # no tree in sysfs
    (place("g", host="", node=0), place("n", host="", node=1), "SYS"),
])
def test_link_class(a, b, want):
    assert link_class(a, b) == want and link_class(b, a) == want
    assert want in LINK_CLASSES


# -- the DGX-like box ------------------------------------------------------------------------------------------


def test_dgx_box_nics_and_link_classes(tmp_path):
    box = dgx_box(tmp_path)
    nics = scan_nics(tmp_path)
    assert [n.name for n in nics] == [f"mlx5_{k}" for k in range(8)]
    assert all(n.kind == "ib" and n.ports == (1,) and len(n.netdevs) == 1 for n in nics)
    assert [n.address for n in nics] == box["nics"]
    assert [n.numa_node for n in nics] == [0, 0, 0, 0, 1, 1, 1, 1]
    gpus = [pci_place(tmp_path, a) for a in box["gpus"]]
    assert gpus[0].path == ("pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0")
    for g, gpu in enumerate(gpus):
        row = [link_class(gpu, n.place) for n in nics]
        switch, socket = g // 2, g // 4
        want = ["PIX" if n // 2 == switch else "NODE" if n // 4 == socket else "SYS" for n in range(8)]
        assert row == want, f"GPU {g}"


def test_dgx_box_ties_split_one_nic_per_gpu(tmp_path):
    box = dgx_box(tmp_path)
    nics = scan_nics(tmp_path)
    gpus = gpu_places(tmp_path, discover(tmp_path).gpus)
    assert [g.address for g in gpus] == box["gpus"]
    nearest = nearest_nics(gpus, nics)
    assert [[n.name for n in nearest[g.address]] for g in gpus] == [[f"mlx5_{k}"] for k in range(8)]
    for k, g in enumerate(gpus):
        env = nic_env(g, gpus, nics)
        assert env == {"NCCL_IB_HCA": f"=mlx5_{k}:1", "UCX_NET_DEVICES": f"mlx5_{k}:1",
                       "NCCL_SOCKET_IFNAME": "=" + nics[k].netdevs[0]}


def test_ties_split_evenly_in_pci_order():
    """Four GPUs on two NICs: alternate; one GPU on two NICs: both; a GPU with no NIC of a kind: ()."""
    nics_tree = [place(f"n{k}", "rp", "up", f"dn{k}") for k in range(2)]
    from numabind.iodevices import Nic

    nics = [Nic(name=f"mlx5_{k}", kind="ib", place=p, ports=(1, 2)) for k, p in enumerate(nics_tree)]
    gpus = [place(f"g{k}", "rp", "up", f"dg{k}") for k in range(4)]
    got = nearest_nics(gpus, nics)
    assert [got[g.address][0].name for g in gpus] == ["mlx5_0", "mlx5_1", "mlx5_0", "mlx5_1"]
    assert [n.name for n in nearest_nics(gpus[:1], nics)["g0"]] == ["mlx5_0", "mlx5_1"]
    assert nic_env(gpus[0], gpus[:1], nics)["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_0:2,mlx5_1:1,mlx5_1:2"
    assert nearest_nics(gpus, nics, kind="eth") == {g.address: () for g in gpus}
    assert nic_env(gpus[0], gpus, []) == {}
    with pytest.raises(PlanError, match="GPU g0 is not among the GPUs"):
        nic_env(gpus[0], gpus[1:], nics)


# -- every class, bonds, VLANs, VFs, numa_node -1 ----------------------------------------------------------------


def test_mixed_box_every_class_and_virtual_devices(tmp_path):
    mixed_box(tmp_path)
    nics = {n.name: n for n in scan_nics(tmp_path)}
    assert sorted(nics) == ["eth0", "eth1", "eth2", "eth3", "mlx5_0", "mlx5_1"]   # lo, bond0, eth0.100: no function
    gpu0, gpu1 = pci_place(tmp_path, MIXED["gpu0"]), pci_place(tmp_path, MIXED["gpu1"])
    assert {name: link_class(gpu0, n.place) for name, n in nics.items()} == {
        "eth0": "PXB", "eth1": "PIX", "eth2": "PHB", "eth3": "NODE", "mlx5_0": "SYS", "mlx5_1": "SYS"}
    assert link_class(gpu1, nics["mlx5_0"].place) == "PHB"
    assert nics["eth1"].numa_node == 0                  # firmware -1: the bridge above it gives the node
    assert (nics["mlx5_1"].physfn, nics["mlx5_1"].numa_node) == (MIXED["mlx5_0"], 1)   # a VF: its PF's node
    assert (nics["mlx5_0"].kind, nics["mlx5_0"].netdevs, nics["eth3"].kind) == ("ib", ("ib0",), "eth")
    assert nics["eth1"].uppers == nics["eth2"].uppers == ("bond0",) and nics["eth0"].uppers == ("eth0.100",)
    assert interface_functions(tmp_path, "bond0") == (MIXED["eth1"], MIXED["eth2"])
    assert interface_functions(tmp_path, "eth0.100") == (MIXED["eth0"],)
    assert interface_functions(tmp_path, "lo") == ()
    gpus = [gpu0, gpu1]
    assert nic_env(gpu0, gpus, nics.values()) == {"NCCL_IB_HCA": "=mlx5_0:1", "UCX_NET_DEVICES": "mlx5_0:1",
                                                   "NCCL_SOCKET_IFNAME": "=bond0"}
    # the VF is not offered beside its own physical function
    assert [n.name for n in nearest_nics(gpus, nics.values())[gpu1.address]] == ["mlx5_0"]
    with pytest.raises(PlanError, match="no PCI function 0000:99:00.0"):
        pci_place(tmp_path, "0000:99:00.0")


def test_bond_without_lower_links_uses_its_slaves_file(tmp_path):
    mixed_box(tmp_path)
    for low in ("eth1", "eth2"):
        (tmp_path / "sys/devices/virtual/net/bond0" / f"lower_{low}").unlink()
    assert interface_functions(tmp_path, "bond0") == (MIXED["eth1"], MIXED["eth2"])


# -- the matrix ------------------------------------------------------------------------------------------------


def test_topology_matrix_text_and_json(tmp_path):
    mixed_box(tmp_path)
    topo = discover(tmp_path)
    text = topology_matrix(topo)
    lines = text.splitlines()
    assert lines[0].split() == ["eth0", "eth1", "eth2", "eth3", "mlx5_0", "mlx5_1", "NUMA", "Affinity"]
    assert lines[1].split() == ["GPU0", "PXB", "PIX", "PHB", "NODE", "SYS", "SYS", "0"]
    assert lines[2].split() == ["GPU1", "SYS", "SYS", "SYS", "SYS", "PHB", "PHB", "1"]
    assert "mlx5_1: ib 0000:81:00.1 node 1 ports 1 VF of 0000:81:00.0; ib1" in lines
    assert any(ln.startswith("GPU0 (0000:03:00.0): nearest eth1;") and "NCCL_SOCKET_IFNAME==bond0" in ln
               for ln in lines)
    data = json.loads(topology_matrix(topo, as_json=True))
    assert data["gpus"][0]["links"] == {"eth0": "PXB", "eth1": "PIX", "eth2": "PHB", "eth3": "NODE",
                                        "mlx5_0": "SYS", "mlx5_1": "SYS"}
    assert data["gpus"][1]["nearest"] == ["mlx5_0"] and set(data["legend"]) == set(LINK_CLASSES)
    assert format_matrix((), (), ()) == "no GPU and no network device on a PCI function\n"


# -- hwloc as the oracle ---------------------------------------------------------------------------------------


def hwloc_places(root) -> dict[str, PciPlace]:
    """Each PCI function's place as hwloc's tree has it: the host bridge (named by its first bus, as sysfs names
    the root), the bridges above it, itself; its node: the NUMA node with the CPUs of the object the host bridge
    hangs from."""
    env = dict(os.environ, LC_ALL="C")
    for var in ("HWLOC_FSROOT", "HWLOC_XMLFILE", "HWLOC_SYNTHETIC", "HWLOC_COMPONENTS"):
        env.pop(var, None)
    out = subprocess.run([LSTOPO, "--input", str(root), "--whole-io", "--of", "xml", "-"], capture_output=True,
                         text=True, timeout=120, env=env, check=True).stdout
    tree = ET.fromstring(out)
    node_of = {hwloc_bitmap(o.get("cpuset")): int(o.get("os_index")) for o in tree.iter("object")
               if o.get("type") == "NUMANode"}
    places: dict[str, PciPlace] = {}

    def walk(obj, chain, cpus):
        kind = obj.get("type")
        if kind == "Bridge" and obj.get("bridge_type", "").startswith("0-"):       # a host bridge
            dom, _, rng = obj.get("bridge_pci").partition(":")
            chain = (f"pci{dom}:{rng.strip('[]').split('-')[0]}",)
        elif kind == "Bridge":
            chain = chain + (obj.get("pci_busid"),)
        elif kind == "PCIDev":
            address = obj.get("pci_busid")
            places[address] = PciPlace(address, chain + (address,), node_of.get(cpus))
        if obj.get("cpuset") is not None and kind not in ("Bridge", "PCIDev"):
            cpus = hwloc_bitmap(obj.get("cpuset"))
        for child in obj.findall("object"):
            walk(child, chain, cpus)

    walk(tree.find("object"), (), frozenset())
    return places


@needs_lstopo
@pytest.mark.parametrize("factory", [dgx_box, mixed_box], ids=["dgx", "mixed"])
def test_link_classes_agree_with_hwlocs_pci_tree(tmp_path, factory):
    factory(tmp_path)
    theirs = hwloc_places(tmp_path)
    gpus = gpu_places(tmp_path, discover(tmp_path).gpus)
    nics = scan_nics(tmp_path)
    assert gpus and nics
    for p in [*gpus, *(n.place for n in nics)]:
        assert p.path == theirs[p.address].path, p.address
    ours = {(g.address, n.address): link_class(g, n.place) for g in gpus for n in nics}
    hwloc = {(g.address, n.address): link_class(theirs[g.address], theirs[n.address]) for g in gpus for n in nics}
    assert ours == hwloc
    assert set(ours.values()) >= ({"PIX", "NODE", "SYS"} if factory is dgx_box else set(LINK_CLASSES))


# -- random PCIe trees -----------------------------------------------------------------------------------------

#: Random trees checked per run (lstopo is one subprocess per tree).
RANDOM_TREES = 25


def subtree(depth: int):
    """An endpoint (``"gpu"``, ``"nic"``, ``"ib"``) or a switch: a list of downstream ports' subtrees."""
    leaf = st.sampled_from(["gpu", "nic", "ib"])
    if depth == 0:
        return leaf
    return st.one_of(leaf, st.lists(subtree(depth - 1), min_size=1, max_size=3))


@st.composite
def trees(draw):
    """Host bridges (bus 0x00, 0x40, 0x80, 0xc0) on node 0 or 1, each with root ports over subtrees; some
    endpoints with firmware numa_node -1."""
    hosts = draw(st.lists(st.tuples(st.sampled_from([0, 1]), st.lists(subtree(2), min_size=1, max_size=3)),
                          min_size=1, max_size=4))
    unknown = draw(st.sets(st.integers(0, 40), max_size=5))
    return hosts, unknown


def need(tree) -> int:
    """Buses a subtree takes below the port that leads to it: an endpoint its own; a switch its upstream port's
    bus, its internal bus (the downstream ports) and its children's."""
    return 1 if isinstance(tree, str) else 2 + sum(need(c) for c in tree)


def build(root, hosts, unknown) -> tuple[list[str], list[str]]:
    """Write the tree (host bridge h on bus 0x40*h; each root port's range after the previous one's); the GPU and
    NIC addresses."""
    from .fakeio import add_netdev

    two_sockets(root, cpus_per_socket=4, smt=False)
    gpus: list[str] = []
    nics: list[str] = []

    def put(tree, parent: str, bus: int, node: int, cpus: str) -> None:
        address = f"0000:{bus:02x}:00.0"
        if isinstance(tree, str):
            k = len(gpus) + len(nics)
            fw = -1 if k in unknown else node
            if tree == "gpu":
                add_pci_node(root, address, parent, pci_class=0x030200, numa_node=fw, local_cpulist=cpus,
                             vendor=0x10DE, device=0x2330)
                gpus.append(address)
                return
            add_pci_node(root, address, parent, pci_class=0x020700 if tree == "ib" else 0x020000, numa_node=fw,
                         local_cpulist=cpus, vendor=0x15B3, device=0x1021)
            if tree == "ib":
                add_rdma(root, f"mlx5_{len(nics)}", address)
            else:
                add_netdev(root, f"eth{len(nics)}", address)
            nics.append(address)
            return
        add_port(root, address, parent, bus + 1, bus + need(tree) - 1, numa_node=node, local_cpulist=cpus)
        start = bus + 2
        for j, child in enumerate(tree):
            down = f"0000:{bus + 1:02x}:{j:02x}.0"
            add_port(root, down, address, start, start + need(child) - 1, numa_node=node, local_cpulist=cpus)
            put(child, down, start, node, cpus)
            start += need(child)

    for h, (node, ports) in enumerate(hosts):
        cpus = "0-3" if node == 0 else "4-7"
        start = 0x40 * h + 1
        for k, child in enumerate(ports):
            rp = f"0000:{0x40 * h:02x}:{k + 1:02x}.0"
            add_port(root, rp, None, start, start + need(child) - 1, numa_node=node, local_cpulist=cpus)
            put(child, rp, start, node, cpus)
            start += need(child)
    return gpus, nics


@needs_lstopo
@settings(max_examples=RANDOM_TREES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_random_trees_agree_with_hwloc(spec):
    import tempfile

    hosts, unknown = spec
    with tempfile.TemporaryDirectory() as tmp:
        gpus, nic_addresses = build(tmp, hosts, unknown)
        theirs = hwloc_places(tmp)
        places = [pci_place(tmp, a) for a in gpus]
        nics = scan_nics(tmp)
        assert sorted(n.address for n in nics) == sorted(nic_addresses)
        for p in [*places, *(n.place for n in nics)]:
            assert p.path == theirs[p.address].path, p.address
            assert p.numa_node == theirs[p.address].numa_node, p.address
        for g in places:
            for n in nics:
                assert link_class(g, n.place) == link_class(theirs[g.address], theirs[n.address]), (g, n)
        nearest = nearest_nics(places, nics)
        for g in places:       # each GPU's NICs are of its nearest class, and every NIC of that class is someone's
            best = min((LINK_CLASSES.index(link_class(g, n.place)) for n in nics), default=None)
            assert all(LINK_CLASSES.index(link_class(g, n.place)) == best for n in nearest[g.address])
            assert bool(nearest[g.address]) == bool(nics)


def test_numabind_topology_matrix_on_the_command_line(tmp_path):
    """`numabind --root DIR topology --matrix [--json]` prints the same matrix, and `topo.nics` lists the NICs."""
    from tests.kernel import numabind_cli

    mixed_box(tmp_path)
    topo = discover(tmp_path)
    assert sorted(n.name for n in topo.nics) == ["eth0", "eth1", "eth2", "eth3", "mlx5_0", "mlx5_1"]
    cp = numabind_cli("--root", str(tmp_path), "topology", "--matrix")
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout == topology_matrix(topo)
    cp = numabind_cli("--root", str(tmp_path), "topology", "--matrix", "--json")
    assert cp.returncode == 0 and json.loads(cp.stdout)["gpus"][1]["nearest"] == ["mlx5_0"], cp.stderr


# -- the rank's NICs (place_rank(nics=True), numabind plan/run --gpu-from-rank --nic) ---------------------------

NIC_VARS = ("NCCL_IB_HCA", "UCX_NET_DEVICES", "NCCL_SOCKET_IFNAME")


def _rank(root, nics=True, **env):
    from numabind.rank import place_rank
    from numabind._fs import FsReader
    from numabind.topology import discover_from

    env = {k: str(v) for k, v in env.items()}
    return place_rank(topology=discover_from(FsReader(str(root)), env=env), env=env, nics=nics)


def test_each_rank_of_the_dgx_box_gets_the_nic_behind_its_switch(tmp_path):
    box = dgx_box(tmp_path)
    netdevs = {n.name: n.netdevs[0] for n in scan_nics(tmp_path)}
    for r in range(8):
        placed = _rank(tmp_path, LOCAL_RANK=r, LOCAL_WORLD_SIZE=8)
        assert placed.gpu == r and placed.nics == (f"mlx5_{r}",)
        assert dict(placed.env) == {"NCCL_IB_HCA": f"=mlx5_{r}:1", "UCX_NET_DEVICES": f"mlx5_{r}:1",
                                    "NCCL_SOCKET_IFNAME": "=" + netdevs[f"mlx5_{r}"]}
        named = f"mlx5_{r} ({box['nics'][r]}, PIX)"
        assert any(why.startswith("--nic: NCCL_IB_HCA, UCX_NET_DEVICES: RDMA " + named) for why in placed.reasons)
        assert named in placed.plan.reason and "split evenly" in placed.plan.reason   # 1 of the 2 PIX NICs
        assert placed.to_dict()["env"] == dict(placed.env) and placed.to_dict()["nics"] == [f"mlx5_{r}"]
    assert _rank(tmp_path, nics=False, LOCAL_RANK=0).env == {}                         # only when asked


def test_rank_nic_ties_split_among_the_ranks_that_share_them(tmp_path):
    dgx_box(tmp_path)
    alone = _rank(tmp_path, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1)       # one rank: both NICs behind its switch
    assert alone.nics == ("mlx5_0", "mlx5_1")
    assert alone.env["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1" and alone.env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1"
    assert "split evenly" not in alone.plan.reason
    pair = [_rank(tmp_path, LOCAL_RANK=r, LOCAL_WORLD_SIZE=2) for r in range(2)]
    assert [p.nics for p in pair] == [("mlx5_0",), ("mlx5_1",)]
    # each rank sees only its own GPU (srun --gpus-per-task=1): the split is over every GPU of the machine
    own = _rank(tmp_path, SLURM_LOCALID=3, SLURM_STEP_TASKS_PER_NODE=8, CUDA_VISIBLE_DEVICES=3)
    assert own.gpu == 0 and own.nics == ("mlx5_3",) and own.env["NCCL_IB_HCA"] == "=mlx5_3:1"


def test_rank_nic_env_never_overrides_the_users(tmp_path):
    dgx_box(tmp_path)
    placed = _rank(tmp_path, LOCAL_RANK=1, LOCAL_WORLD_SIZE=8, NCCL_SOCKET_IFNAME="eth9", UCX_NET_DEVICES="all")
    assert dict(placed.env) == {"NCCL_IB_HCA": "=mlx5_1:1"}
    assert "--nic: NCCL_SOCKET_IFNAME is already set ('eth9'): left as the user set it" in placed.plan.reason
    assert "--nic: UCX_NET_DEVICES is already set ('all'): left as the user set it (numabind would set " \
           "'mlx5_1:1')" in placed.reasons


def test_rank_nics_on_the_mixed_box_name_the_link_class(tmp_path):
    mixed_box(tmp_path)
    placed = _rank(tmp_path, LOCAL_RANK=0, LOCAL_WORLD_SIZE=2)
    # GPU 0's nearest RDMA device is across the sockets (its VF mlx5_1 goes with it), its nearest interface is
    # eth1 behind its own switch, enslaved to bond0
    assert dict(placed.env) == {"NCCL_IB_HCA": "=mlx5_0:1", "UCX_NET_DEVICES": "mlx5_0:1",
                                "NCCL_SOCKET_IFNAME": "=bond0"}
    assert f"RDMA mlx5_0 ({MIXED['mlx5_0']}, SYS)" in placed.plan.reason
    assert f"NCCL_SOCKET_IFNAME: bond0 on eth1 ({MIXED['eth1']}, PIX)" in placed.plan.reason


def test_rank_nics_without_nics_or_without_a_pci_tree(tmp_path):
    from tests.fakegpu import add_nvidia_gpu

    two_sockets(tmp_path)
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=0)
    placed = _rank(tmp_path, LOCAL_RANK=0)
    assert placed.env == {} and placed.nics == () and placed.warnings == ()
    assert "no RDMA device: NCCL_IB_HCA and UCX_NET_DEVICES are not set" in placed.plan.reason


def test_gpu_nics_is_plan_for_gpus_companion(tmp_path):
    from numabind.iodevices import choose_nics, gpu_nics

    box = dgx_box(tmp_path)
    topo = discover(tmp_path)
    choice = gpu_nics(topo, 5)
    assert [n.name for n in choice.rdma] == ["mlx5_5"] and choice.gpu == box["gpus"][5]
    assert choice.env == nic_env(pci_place(tmp_path, box["gpus"][5]), gpu_places(tmp_path, topo.gpus), topo.nics)
    assert [n.name for n in gpu_nics(topo, 5, peers=[topo.gpus[5]]).rdma] == ["mlx5_4", "mlx5_5"]
    assert choice.to_dict()["env"]["NCCL_IB_HCA"] == "=mlx5_5:1"
    with pytest.raises(PlanError, match="GPU 9 is not visible"):
        gpu_nics(topo, 9)
    with pytest.raises(PlanError, match="is not among the GPUs"):
        choose_nics(gpu_places(tmp_path, topo.gpus)[0], gpu_places(tmp_path, topo.gpus)[1:], topo.nics)


def _launch_env(root, **extra):
    from tests.kernel import child_env
    from numabind.rank import LAUNCHERS

    drop = {lch.rank_var for lch in LAUNCHERS} | {v for lch in LAUNCHERS for v in lch.size_vars} | set(NIC_VARS)
    env = {k: v for k, v in child_env().items() if k not in drop}
    env.update(NUMABIND_FSROOT=str(root), **extra)
    return env


def test_cli_plan_gpu_from_rank_nic(tmp_path):
    from tests.kernel import numabind_cli

    dgx_box(tmp_path)
    ifname = {n.name: n.netdevs[0] for n in scan_nics(tmp_path)}["mlx5_2"]
    env = _launch_env(tmp_path, LOCAL_RANK="2", LOCAL_WORLD_SIZE="8", NCCL_IB_HCA="mlx5_7")
    cp = numabind_cli("plan", "--gpu-from-rank", "--nic", "--json", env=env)
    assert cp.returncode == 0, cp.stderr
    got = json.loads(cp.stdout)
    assert got["env"] == {"UCX_NET_DEVICES": "mlx5_2:1", "NCCL_SOCKET_IFNAME": "=" + ifname}
    assert got["nics"] == ["mlx5_2"] and any("NCCL_IB_HCA is already set" in r for r in got["reasons"])
    cp = numabind_cli("plan", "--gpu-from-rank", "--nic", env=env)
    assert cp.returncode == 0, cp.stderr
    assert f"environment (--nic): NCCL_SOCKET_IFNAME=={ifname} UCX_NET_DEVICES=mlx5_2:1\n" in cp.stdout


@pytest.mark.kernel
def test_cli_run_gpu_from_rank_nic_exports_into_the_command(tmp_path):
    from tests.kernel import MEM_NODE, numabind_cli

    if MEM_NODE != 0:
        pytest.skip("the DGX box's GPU 2 is on node 0, which this host has no memory on")
    dgx_box(tmp_path)
    code = ("import json, os; print(json.dumps({v: os.environ.get(v) for v in "
            f"{NIC_VARS!r}}}))")
    env = _launch_env(tmp_path, LOCAL_RANK="2", LOCAL_WORLD_SIZE="8", NCCL_SOCKET_IFNAME="eth9")
    cp = numabind_cli("run", "--gpu-from-rank", "--nic", "--bind-replayed-root", "--within-affinity", "--", sys.executable, "-c", code,
                      env=env)
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout.splitlines()[-1]) == {"NCCL_IB_HCA": "=mlx5_2:1", "UCX_NET_DEVICES": "mlx5_2:1",
                                                      "NCCL_SOCKET_IFNAME": "eth9"}
    cp = numabind_cli("run", "--gpu-from-rank", "--bind-replayed-root", "--within-affinity", "--", sys.executable, "-c", code, env=env)
    assert json.loads(cp.stdout.splitlines()[-1]) == {"NCCL_IB_HCA": None, "UCX_NET_DEVICES": None,
                                                      "NCCL_SOCKET_IFNAME": "eth9"}     # without --nic: nothing


@pytest.mark.parametrize("ranks, want", [
    (2, [[f"mlx5_{k}" for k in range(4)], [f"mlx5_{k}" for k in range(4, 8)]]),     # a node each: its 4 NICs
    (4, [["mlx5_0", "mlx5_1"], ["mlx5_2", "mlx5_3"], ["mlx5_4", "mlx5_5"], ["mlx5_6", "mlx5_7"]]),
    (8, [[f"mlx5_{k}"] for k in range(8)]),
])
def test_cpu_ranks_split_the_nics_of_their_node(tmp_path, ranks, want):
    dgx_box(tmp_path)                              # 2 nodes of 4 cores, 4 RDMA NICs on each
    got = [_rank(tmp_path, LOCAL_RANK=r, LOCAL_WORLD_SIZE=ranks, CUDA_VISIBLE_DEVICES="") for r in range(ranks)]
    assert all(p.device == "cpu" for p in got)
    assert [list(p.nics) for p in got] == want
    assert got[0].env["NCCL_IB_HCA"] == "=" + ",".join(f"{n}:1" for n in want[0])
    assert f"RDMA {want[0][0]} ({scan_nics(tmp_path)[0].address}, NODE)" in got[0].plan.reason
    assert "of local rank 0 (node 0)" in got[0].plan.reason


@pytest.mark.parametrize("argv", (["plan", "--nic"], ["run", "--nic", "--", "true"], ["run", "-N", "0", "--nic", "--",
                                                                                  "true"]))
def test_nic_without_gpu_from_rank_is_a_usage_error(argv, capsys):
    from numabind.cli import main

    assert main(argv) == 2
    assert "--nic chooses the NICs of the rank's GPU; it goes with --gpu-from-rank" in capsys.readouterr().err


def test_nics_that_cannot_be_read_are_a_warning_or_under_strict_an_error(tmp_path, monkeypatch):
    from numabind import iodevices
    from numabind.rank import place_rank
    from numabind._fs import FsReader
    from numabind.topology import discover_from
    from numabind.errors import NumabindError

    def unreadable(*a, **k):
        raise NumabindError("class/infiniband: Permission denied")

    monkeypatch.setattr(iodevices, "gpu_nics", unreadable)
    monkeypatch.setattr(iodevices, "scan_nics", unreadable)
    for gpus in (True, False):                      # a GPU rank and a CPU-only rank
        root = tmp_path / str(gpus)
        dgx_box(root) if gpus else two_sockets(root)
        env = {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
        topo = discover_from(FsReader(str(root)), env=env)
        placed = place_rank(topology=topo, env=env, nics=True)
        assert placed.env == {} and placed.plan is not None
        assert any("could not be found: class/infiniband: Permission denied; no NCCL/UCX variable is set" in w
                   for w in placed.warnings), placed.warnings
        with pytest.raises(PlanError, match="could not be found: class/infiniband: Permission denied"):
            place_rank(topology=topo, env=env, nics=True, strict=True)
