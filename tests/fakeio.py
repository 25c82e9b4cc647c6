"""Fake PCI functions, network interfaces and block devices, laid out as the Linux kernel lays them out.

Devices live under ``sys/devices/pciSSSS:BB/SSSS:BB:DD.F``; ``sys/bus/pci/devices``, ``sys/class/net``,
``sys/class/block`` and ``sys/dev/block`` hold relative symlinks to them, as sysfs does, so
``numabind.iodevices`` and hwloc's ``lstopo --input`` read them like a live machine. Virtual
devices (``lo``, ``loop0``) live under ``sys/devices/virtual``. Add them to a root that
``tests/fakesys.py`` wrote.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["add_block", "add_net", "add_netdev", "add_pci_function", "add_pci_node", "add_port", "add_rdma",
           "add_upper", "device_dir", "dgx_box", "mixed_box", "pci_dir"]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _link(root: Path, rel: str, target_rel: str) -> None:
    """A relative symlink ``rel`` -> ``target_rel`` (both relative to ``root``)."""
    link = root / rel
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(os.path.relpath(root / target_rel, link.parent))


def pci_dir(address: str) -> str:
    """``sys/devices/pci0000:18/0000:18:00.0`` for ``0000:18:00.0``."""
    return f"sys/devices/pci{address[:7]}/{address}"


def add_pci_function(root, address: str, *, pci_class: int = 0x020000, numa_node: int | None = 0,
                     local_cpulist: str | None = None, vendor: int = 0x8086, device: int = 0x1572) -> str:
    """A PCI function; ``numa_node=None`` leaves the file out (``-1`` writes what firmware without SRAT gives)."""
    root = Path(root)
    base = pci_dir(address)
    _write(root / base / "class", f"0x{pci_class:06x}\n")
    _write(root / base / "vendor", f"0x{vendor:04x}\n")
    _write(root / base / "device", f"0x{device:04x}\n")
    if numa_node is not None:
        _write(root / base / "numa_node", f"{numa_node}\n")
    if local_cpulist is not None:
        _write(root / base / "local_cpulist", f"{local_cpulist}\n")
    _link(root, f"sys/bus/pci/devices/{address}", base)
    return base


def add_net(root, name: str, address: str | None, *, via: str | None = None) -> str:
    """A network interface on PCI function ``address`` (below a ``via`` device such as ``virtio2``), or a
    virtual one (``address=None``)."""
    root = Path(root)
    parent = "sys/devices/virtual" if address is None else pci_dir(address) + (f"/{via}" if via else "")
    base = f"{parent}/net/{name}"
    _write(root / base / "ifindex", "2\n")
    _link(root, f"sys/class/net/{name}", base)
    return base


def add_block(root, name: str, address: str | None, dev: str, *, via: str | None = None,
              partitions: dict[str, str] | None = None) -> str:
    """A disk ``name`` (``dev`` is its ``MAJ:MIN``) on PCI function ``address`` (``None``: virtual, like
    ``loop0``), with ``partitions`` (name -> ``MAJ:MIN``) below it as the kernel puts them."""
    root = Path(root)
    parent = "sys/devices/virtual" if address is None else pci_dir(address) + (f"/{via}" if via else "")
    base = f"{parent}/block/{name}"
    _write(root / base / "dev", f"{dev}\n")
    _link(root, f"sys/class/block/{name}", base)
    _link(root, f"sys/dev/block/{dev}", base)
    for part, part_dev in (partitions or {}).items():
        pbase = f"{base}/{part}"
        _write(root / pbase / "dev", f"{part_dev}\n")
        _write(root / pbase / "partition", "1\n")
        _link(root, f"sys/class/block/{part}", pbase)
        _link(root, f"sys/dev/block/{part_dev}", pbase)
    return base


# -- PCIe trees: host bridges, root ports, switches, NICs, RDMA devices ---------------------------------------
# A kernel puts each function below the bridge it sits behind (sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/
# ...), and hwloc builds its PCI tree from each bridge's config space (header type 1, secondary and subordinate
# bus numbers at 0x18-0x1a), so a tree written here carries both.

def _config(vendor: int, device: int, pci_class: int, buses: tuple[int, int, int] | None) -> bytes:
    """The first 64 bytes of a function's config space (type 1 header with ``buses`` for a bridge)."""
    space = bytearray(64)
    space[0:2] = vendor.to_bytes(2, "little")
    space[2:4] = device.to_bytes(2, "little")
    space[9:12] = pci_class.to_bytes(3, "little")
    if buses is not None:
        space[0x0E] = 0x01
        space[0x18:0x1B] = bytes(buses)
    return bytes(space)


def _cpus_mask(cpulist: str) -> str:
    """``0-3`` -> ``0000000f`` (the kernel's local_cpus)."""
    from numabind.cpulist import parse_cpulist

    value = sum(1 << c for c in parse_cpulist(cpulist)) if cpulist else 0
    return f"{value:08x}"


def device_dir(root, address: str) -> str:
    """Where ``address`` lives (below its bridges), relative to ``root``; :func:`pci_dir` when not yet added."""
    link = Path(root) / f"sys/bus/pci/devices/{address}"
    if link.is_symlink():
        return os.path.relpath(os.path.realpath(link), os.path.realpath(root))
    return pci_dir(address)


def add_pci_node(root, address: str, parent: str | None = None, *, pci_class: int, numa_node: int | None = 0,
                 local_cpulist: str | None = None, vendor: int = 0x8086, device: int = 0x1572,
                 buses: tuple[int, int] | None = None, physfn: str | None = None) -> str:
    """A PCI function below ``parent`` (an address already added; None: on its host bridge ``pciSSSS:BB``), as
    the kernel and hwloc see it. A bridge gives ``buses`` (secondary, subordinate); a VF its ``physfn``."""
    root = Path(root)
    base = (device_dir(root, parent) if parent else f"sys/devices/pci{address[:7]}") + f"/{address}"
    bus = int(address[5:7], 16)
    _write(root / base / "class", f"0x{pci_class:06x}\n")
    _write(root / base / "vendor", f"0x{vendor:04x}\n")
    _write(root / base / "device", f"0x{device:04x}\n")
    (root / base / "config").write_bytes(_config(vendor, device, pci_class,
                                                 None if buses is None else (bus, *buses)))
    if numa_node is not None:
        _write(root / base / "numa_node", f"{numa_node}\n")
    if local_cpulist is not None:
        _write(root / base / "local_cpulist", f"{local_cpulist}\n")
        _write(root / base / "local_cpus", _cpus_mask(local_cpulist) + "\n")
    _link(root, f"sys/bus/pci/devices/{address}", base)
    if physfn is not None:
        _link(root, f"{base}/physfn", device_dir(root, physfn))
        pf = device_dir(root, physfn)
        k = len([n for n in os.listdir(root / pf) if n.startswith("virtfn")])
        _link(root, f"{pf}/virtfn{k}", base)
    return base


def add_port(root, address: str, parent: str | None, secondary: int, subordinate: int, *, numa_node: int | None = 0,
             local_cpulist: str | None = None) -> str:
    """A PCIe bridge (a root port, a switch's upstream or downstream port) leading to buses ``secondary``..."""
    return add_pci_node(root, address, parent, pci_class=0x060400, numa_node=numa_node, local_cpulist=local_cpulist,
                        device=0x2030, buses=(secondary, subordinate))


def add_rdma(root, name: str, address: str, *, ports: tuple[int, ...] = (1,), link_layer: str = "InfiniBand") -> str:
    """An RDMA device ``name`` (``sys/class/infiniband/NAME``) on PCI function ``address``, with its ports."""
    root = Path(root)
    base = f"{device_dir(root, address)}/infiniband/{name}"
    for port in ports:
        _write(root / base / f"ports/{port}/link_layer", f"{link_layer}\n")
        _write(root / base / f"ports/{port}/state", "4: ACTIVE\n")
    _link(root, f"{base}/device", device_dir(root, address))
    _link(root, f"sys/class/infiniband/{name}", base)
    return base


def add_upper(root, name: str, lowers: list[str], *, bond: bool) -> str:
    """A bond (``bond=True``: ``bonding/slaves``) or a VLAN on the interfaces ``lowers``: a virtual interface
    with ``lower_IF`` links to them and ``upper_NAME`` links back, as the kernel's adjacency lists are."""
    root = Path(root)
    base = f"sys/devices/virtual/net/{name}"
    _write(root / base / "ifindex", "9\n")
    if bond:
        _write(root / base / "bonding/slaves", " ".join(lowers) + "\n")
    for low in lowers:
        low_dir = os.path.relpath(os.path.realpath(root / f"sys/class/net/{low}"), os.path.realpath(root))
        _link(root, f"{base}/lower_{low}", low_dir)
        _link(root, f"{low_dir}/upper_{name}", base)
    _link(root, f"sys/class/net/{name}", base)
    return base


def add_netdev(root, name: str, address: str) -> str:
    """A network interface on PCI function ``address`` wherever it sits in the tree (with its ``device`` link)."""
    root = Path(root)
    base = f"{device_dir(root, address)}/net/{name}"
    _write(root / base / "ifindex", "2\n")
    _link(root, f"{base}/device", device_dir(root, address))
    _link(root, f"sys/class/net/{name}", base)
    return base


#: The DGX-like box: CPUs 0-3 on node 0 (socket 0), 4-7 on node 1; per socket two host bridges, each a root
#: port and a PCIe switch (upstream port, four downstream ports) with two GPUs and two InfiniBand NICs.
DGX_HOSTS = ("0000:15", "0000:37", "0000:97", "0000:b7")
DGX_CPUS = {0: "0-3", 1: "4-7"}


def dgx_box(root) -> dict[str, list[str]]:
    """8 GPUs and 8 IB NICs (``mlx5_0``-``mlx5_7``, netdevs ``ibp*``) behind 4 switches on 2 sockets.

    Switch k (host bridge ``DGX_HOSTS[k]``, node k // 2) holds GPUs 2k, 2k+1 and NICs mlx5_2k, mlx5_2k+1.
    Returns ``{"gpus": [addresses], "nics": [addresses]}`` in PCI order (GPU/NIC order within a switch: GPU,
    NIC, GPU, NIC)."""
    from tests.fakegpu import add_nvidia_gpu, nv_uuid
    from tests.fakesys import two_sockets

    two_sockets(root, cpus_per_socket=4, smt=False)
    gpus, nics = [], []
    for k, host in enumerate(DGX_HOSTS):
        node, cpus = k // 2, DGX_CPUS[k // 2]
        hb = int(host[5:], 16)
        rp, up = f"{host}:01.0", f"0000:{hb + 1:02x}:00.0"
        add_port(root, rp, None, hb + 1, hb + 6, numa_node=node, local_cpulist=cpus)
        add_port(root, up, rp, hb + 2, hb + 6, numa_node=node, local_cpulist=cpus)
        for j in range(4):
            down = f"0000:{hb + 2:02x}:{j:02x}.0"
            add_port(root, down, up, hb + 3 + j, hb + 3 + j, numa_node=node, local_cpulist=cpus)
            fn = f"0000:{hb + 3 + j:02x}:00.0"
            if j % 2 == 0:
                g = 2 * k + j // 2
                add_pci_node(root, fn, down, pci_class=0x030200, numa_node=node, local_cpulist=cpus,
                             vendor=0x10DE, device=0x2330)
                add_nvidia_gpu(root, fn, numa_node=node, local_cpulist=cpus, uuid=nv_uuid(g), minor=g)
                gpus.append(fn)
            else:
                n = 2 * k + j // 2
                add_pci_node(root, fn, down, pci_class=0x020700, numa_node=node, local_cpulist=cpus,
                             vendor=0x15B3, device=0x1021)
                add_rdma(root, f"mlx5_{n}", fn)
                add_netdev(root, f"ibp{hb + 3 + j}s0", fn)
                nics.append(fn)
    return {"gpus": gpus, "nics": nics}


#: The mixed box's functions (see :func:`mixed_box`).
MIXED = {"gpu0": "0000:03:00.0", "gpu1": "0000:83:00.0", "eth0": "0000:06:00.0", "eth1": "0000:07:00.0",
         "eth2": "0000:08:00.0", "eth3": "0000:41:00.0", "mlx5_0": "0000:81:00.0", "mlx5_1": "0000:81:00.1"}


def mixed_box(root) -> dict[str, str]:
    """Every link class from GPU 0 (``0000:03:00.0``, node 0), and the virtual devices.

    Host bridge ``pci0000:00`` (node 0): root port 00:01.0 -> switch 01:00.0 -> downstream 02:00.0 -> GPU 0;
    02:01.0 -> a second switch 04:00.0 -> 05:00.0 -> ``eth0`` 06:00.0 (PXB); 02:02.0 -> ``eth1`` 07:00.0 (PIX,
    firmware ``numa_node`` -1); root port 00:02.0 -> ``eth2`` 08:00.0 (PHB). Host bridge ``pci0000:40`` (node 0):
    ``eth3`` 41:00.0 (NODE). Host bridge ``pci0000:80`` (node 1): ``mlx5_0`` 81:00.0 (SYS, netdev ``ib0``, RoCE
    port 1) and its SR-IOV VF ``mlx5_1`` 81:00.1 (netdev ``ib1``, ``numa_node`` -1), GPU 1 83:00.0 behind root
    port 80:02.0. ``bond0`` enslaves eth1 and eth2; VLAN ``eth0.100`` sits on eth0; ``lo`` is virtual."""
    from tests.fakegpu import add_nvidia_gpu, nv_uuid
    from tests.fakesys import two_sockets

    two_sockets(root, cpus_per_socket=4, smt=False)
    c0, c1 = DGX_CPUS[0], DGX_CPUS[1]
    add_port(root, "0000:00:01.0", None, 0x01, 0x07, local_cpulist=c0)
    add_port(root, "0000:01:00.0", "0000:00:01.0", 0x02, 0x07, local_cpulist=c0)
    add_port(root, "0000:02:00.0", "0000:01:00.0", 0x03, 0x03, local_cpulist=c0)
    add_port(root, "0000:02:01.0", "0000:01:00.0", 0x04, 0x06, local_cpulist=c0)
    add_port(root, "0000:04:00.0", "0000:02:01.0", 0x05, 0x06, local_cpulist=c0)
    add_port(root, "0000:05:00.0", "0000:04:00.0", 0x06, 0x06, local_cpulist=c0)
    add_port(root, "0000:02:02.0", "0000:01:00.0", 0x07, 0x07, local_cpulist=c0)
    add_port(root, "0000:00:02.0", None, 0x08, 0x08, local_cpulist=c0)
    add_port(root, "0000:40:01.0", None, 0x41, 0x41, local_cpulist=c0)
    add_port(root, "0000:80:01.0", None, 0x81, 0x81, numa_node=1, local_cpulist=c1)
    add_port(root, "0000:80:02.0", None, 0x83, 0x83, numa_node=1, local_cpulist=c1)
    for name, parent, node, cpus in (("gpu0", "0000:02:00.0", 0, c0), ("gpu1", "0000:80:02.0", 1, c1)):
        add_pci_node(root, MIXED[name], parent, pci_class=0x030200, numa_node=node, local_cpulist=cpus,
                     vendor=0x10DE, device=0x2330)
        add_nvidia_gpu(root, MIXED[name], numa_node=node, local_cpulist=cpus, uuid=nv_uuid(int(name[-1])),
                       minor=int(name[-1]))
    for name, parent, node in (("eth0", "0000:05:00.0", 0), ("eth1", "0000:02:02.0", -1),
                               ("eth2", "0000:00:02.0", 0), ("eth3", "0000:40:01.0", 0)):
        add_pci_node(root, MIXED[name], parent, pci_class=0x020000, numa_node=node, local_cpulist=c0)
        add_netdev(root, name, MIXED[name])
    add_pci_node(root, MIXED["mlx5_0"], "0000:80:01.0", pci_class=0x020000, numa_node=1, local_cpulist=c1,
                 vendor=0x15B3, device=0x101D)
    add_rdma(root, "mlx5_0", MIXED["mlx5_0"], link_layer="Ethernet")
    add_netdev(root, "ib0", MIXED["mlx5_0"])
    add_pci_node(root, MIXED["mlx5_1"], "0000:80:01.0", pci_class=0x020000, numa_node=-1, local_cpulist=c1,
                 vendor=0x15B3, device=0x101E, physfn=MIXED["mlx5_0"])
    add_rdma(root, "mlx5_1", MIXED["mlx5_1"], link_layer="Ethernet")
    add_netdev(root, "ib1", MIXED["mlx5_1"])
    add_upper(root, "bond0", ["eth1", "eth2"], bond=True)
    add_upper(root, "eth0.100", ["eth0"], bond=False)
    add_net(root, "lo", None)
    return dict(MIXED)
