"""Adds accelerators to a fake sysfs/procfs tree (a directory used as discovery root).

Writes what the kernel and the drivers expose for a GPU:

* ``sys/bus/pci/devices/<addr>/{class,vendor,device,numa_node,local_cpulist}``
* NVIDIA: ``proc/driver/nvidia/gpus/<addr>/information``
* AMD: ``sys/class/kfd/kfd/topology/nodes/<n>/{properties,name,gpu_id}``

Works on its own or on top of a tree made by ``tests/fakesys.py``.
"""

from __future__ import annotations

import os

VENDOR_IDS = {"nvidia": 0x10DE, "amd": 0x1002, "intel": 0x8086}
DEFAULT_DEVICE = {"nvidia": 0x2330, "amd": 0x74A1, "intel": 0x0BD5}
DEFAULT_CLASS = {"nvidia": 0x030200, "amd": 0x120000, "intel": 0x038000}


def _write(root, rel: str, text: str) -> None:
    path = os.path.join(os.fspath(root), rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def nv_uuid(n: int) -> str:
    """A deterministic NVIDIA-style UUID: ``GPU-0000000n-1111-2222-3333-44444444444n``."""
    return f"GPU-{n:08x}-1111-2222-3333-{n:012x}"


def add_pci_device(root, address: str, *, vendor: str = "nvidia", numa_node: int | None = 0,
                   local_cpulist: str | None = "", device: int | None = None,
                   pci_class: int | None = None) -> str:
    """A PCI function under ``sys/bus/pci/devices``; ``None`` leaves a file out."""
    base = f"sys/bus/pci/devices/{address}"
    vendor_id = VENDOR_IDS.get(vendor, vendor if isinstance(vendor, int) else 0x1234)
    _write(root, f"{base}/vendor", f"0x{vendor_id:04x}\n")
    device = device if device is not None else DEFAULT_DEVICE.get(vendor, 0x1)
    pci_class = pci_class if pci_class is not None else DEFAULT_CLASS.get(vendor, 0x030000)
    _write(root, f"{base}/device", f"0x{device:04x}\n")
    _write(root, f"{base}/class", f"0x{pci_class:06x}\n")
    if numa_node is not None:
        _write(root, f"{base}/numa_node", f"{numa_node}\n")
    if local_cpulist is not None:
        _write(root, f"{base}/local_cpulist", f"{local_cpulist}\n")
    return address


def add_nvidia_gpu(root, address: str, *, numa_node: int | None = 0, local_cpulist: str | None = "",
                   uuid: str | None = None, model: str = "NVIDIA H100 80GB HBM3", minor: int = 0,
                   device: int = 0x2330, proc: bool = True) -> str:
    """An NVIDIA GPU, with the driver's ``information`` file unless ``proc=False``."""
    add_pci_device(root, address, vendor="nvidia", numa_node=numa_node, local_cpulist=local_cpulist,
                   device=device, pci_class=0x030200)
    if proc:
        _write(root, f"proc/driver/nvidia/gpus/{address}/information", (
            f"Model: \t\t {model}\n"
            f"IRQ:   \t\t {100 + minor}\n"
            f"GPU UUID: \t {uuid or nv_uuid(minor)}\n"
            f"Video BIOS: \t 96.00.99.00.01\n"
            f"Bus Type: \t PCIe\n"
            f"DMA Size: \t 52 bits\n"
            f"DMA Mask: \t 0xfffffffffffff\n"
            f"Bus Location: \t {address}\n"
            f"Device Minor: \t {minor}\n"
            f"GPU Excluded:\t No\n"
        ))
    return address


def _location_id(address: str) -> tuple[int, int]:
    dom, bus, devfn = address.split(":")
    dev, fn = devfn.split(".")
    return int(dom, 16), int(bus, 16) << 8 | int(dev, 16) << 3 | int(fn, 16)


def add_kfd_cpu_node(root, node_id: int, *, cpu_cores: int = 64) -> None:
    """A KFD CPU agent (simd_count 0)."""
    base = f"sys/class/kfd/kfd/topology/nodes/{node_id}"
    _write(root, f"{base}/gpu_id", "0\n")
    _write(root, f"{base}/name", "\n")
    _write(root, f"{base}/properties", f"cpu_cores_count {cpu_cores}\nsimd_count 0\nlocation_id 0\ndomain 0\n")


def add_amd_gpu(root, address: str, *, kfd_node: int | None, numa_node: int | None = 0,
                local_cpulist: str | None = "", unique_id: int | None = None, name: str = "gfx942",
                render_minor: int = 128, cpu_cores: int = 0, device: int = 0x74A1) -> str:
    """An AMD GPU; ``kfd_node=None`` leaves KFD out (no amdgpu KFD)."""
    add_pci_device(root, address, vendor="amd", numa_node=numa_node, local_cpulist=local_cpulist,
                   device=device, pci_class=0x120000)
    if kfd_node is not None:
        domain, loc = _location_id(address)
        base = f"sys/class/kfd/kfd/topology/nodes/{kfd_node}"
        _write(root, f"{base}/gpu_id", f"{1000 + kfd_node}\n")
        _write(root, f"{base}/name", f"{name}\n")
        _write(root, f"{base}/properties", (
            f"cpu_cores_count {cpu_cores}\n"
            f"simd_count 304\n"
            f"location_id {loc}\n"
            f"domain {domain}\n"
            f"unique_id {unique_id if unique_id is not None else 0x1000 + kfd_node}\n"
            f"drm_render_minor {render_minor}\n"
            f"gfx_target_version 90402\n"
        ))
    return address


def add_intel_gpu(root, address: str, *, numa_node: int | None = 0, local_cpulist: str | None = "",
                  device: int = 0x0BD5, pci_class: int = 0x038000) -> str:
    """An Intel GPU (on bus 00 it is the integrated one)."""
    return add_pci_device(root, address, vendor="intel", numa_node=numa_node, local_cpulist=local_cpulist,
                          device=device, pci_class=pci_class)
