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

__all__ = ["add_block", "add_net", "add_pci_function", "pci_dir"]


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
