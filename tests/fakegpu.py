"""Adds accelerators to a fake sysfs/procfs tree (a directory used as discovery root).

Writes what the kernel and the drivers expose for a GPU:

* ``sys/bus/pci/devices/<addr>/{class,vendor,device,numa_node,local_cpulist}``
  (and ``drm/renderD<N>``, ``driver`` when asked)
* NVIDIA: ``proc/driver/nvidia/gpus/<addr>/information``, MIG capabilities
  under ``proc/driver/nvidia/capabilities/gpu<minor>/mig``
* AMD: ``sys/class/kfd/kfd/topology/nodes/<n>/{properties,name,gpu_id}``
* Huawei Ascend NPUs: the PCI function only (the driver's ``davinci<N>`` has no sysfs parent)
* device files under ``dev/`` (``nvidia<minor>``, ``kfd``, ``dri/renderD<N>``, ``davinci<N>``)
  as plain files: a replayed root cannot hold device nodes, and numabind reads
  a replayed device file's owner read/write bits as "accessible" (mode 000 is
  a device this process may not open).

:func:`eight_gpu_box` lays out a 2-socket, 8-GPU server of one vendor as bare
metal shows it; :func:`container` then turns it into what a container given
some of the GPUs sees (sysfs is not namespaced, so it still lists all eight).

Works on its own or on top of a tree made by ``tests/fakesys.py``.
"""

from __future__ import annotations

import os
import shutil
import types

from numabind._fs import FsReader
from numabind._util import FrozenMap
from numabind.cpulist import parse_cpulist
from numabind.topology import Node

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


# ------------------------------------------------------------ device files
def add_dev_node(root, name: str, *, mode: int = 0o666) -> str:
    """A device file ``dev/<name>`` (a plain file with ``mode``; 0o000 stands for "not accessible")."""
    path = os.path.join(os.fspath(root), "dev", name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8"):
        pass
    os.chmod(path, mode)
    return path


def remove_dev_node(root, name: str) -> None:
    os.remove(os.path.join(os.fspath(root), "dev", name))


def add_render_node(root, address: str, minor: int) -> None:
    """``sys/bus/pci/devices/<addr>/drm/renderD<minor>``: which render node is this GPU's."""
    os.makedirs(os.path.join(os.fspath(root), f"sys/bus/pci/devices/{address}/drm/renderD{minor}"), exist_ok=True)
    os.makedirs(os.path.join(os.fspath(root), f"sys/bus/pci/devices/{address}/drm/card{minor - 128}"), exist_ok=True)


def add_driver_link(root, address: str, driver: str) -> None:
    """``sys/bus/pci/devices/<addr>/driver`` -> ``sys/bus/pci/drivers/<driver>``, as the kernel links it."""
    base = os.fspath(root)
    os.makedirs(os.path.join(base, f"sys/bus/pci/drivers/{driver}"), exist_ok=True)
    link = os.path.join(base, f"sys/bus/pci/devices/{address}/driver")
    os.symlink(f"../../drivers/{driver}", link)


def add_mig_instances(root, minor: int, gpu_instances=(1,)) -> None:
    """MIG GPU instances (each with compute instance 0) of the GPU with ``minor``, as procfs lists them."""
    base = f"proc/driver/nvidia/capabilities/gpu{minor}/mig"
    _write(root, f"{base}/config", "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n")
    _write(root, f"{base}/monitor", "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
    for gi in gpu_instances:
        _write(root, f"{base}/gi{gi}/access", f"DeviceFileMinor: {10 + gi}\nDeviceFileMode: 292\n")
        _write(root, f"{base}/gi{gi}/ci0/access", f"DeviceFileMinor: {100 + gi}\nDeviceFileMode: 292\n")


# ------------------------------------------------- 8-GPU servers and containers
#: PCI addresses of the 8 GPUs of :func:`eight_gpu_box`, in PCI order; the first 4 on node 0.
BOX_ADDRS = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
             "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
BOX_CPUS = {0: "0-55,112-167", 1: "56-111,168-223"}
#: KFD node ids of the AMD box's GPUs (by PCI position): KFD order is not PCI order.
AMD_KFD_NODES = [3, 2, 5, 4, 7, 6, 9, 8]


def box_node(k: int) -> int:
    """NUMA node of the box's k-th GPU (PCI order)."""
    return 0 if k < 4 else 1


def eight_gpu_box(root, vendor: str) -> list[str]:
    """A 2-socket server with 8 GPUs of ``vendor`` (4 per socket) as bare metal shows it.

    NVIDIA: minors 0-7 in PCI order, UUIDs ``nv_uuid(k)``, ``dev/nvidiactl``
    and ``dev/nvidia0-7``. AMD (MI300X-like): KFD CPU agents 0-1, GPU agents
    :data:`AMD_KFD_NODES`, render nodes 128-135, ``dev/kfd``. Intel (Max-like):
    render nodes 128-135. Returns the PCI addresses in PCI order.
    """
    for k, addr in enumerate(BOX_ADDRS):
        node = box_node(k)
        if vendor == "nvidia":
            add_nvidia_gpu(root, addr, numa_node=node, local_cpulist=BOX_CPUS[node], uuid=nv_uuid(k), minor=k)
            add_dev_node(root, f"nvidia{k}")
        elif vendor == "amd":
            add_amd_gpu(root, addr, kfd_node=AMD_KFD_NODES[k], numa_node=node, local_cpulist=BOX_CPUS[node],
                        unique_id=0xA000 + k, render_minor=128 + k)
            add_render_node(root, addr, 128 + k)
            add_dev_node(root, f"dri/renderD{128 + k}")
        elif vendor == "intel":
            add_intel_gpu(root, addr, numa_node=node, local_cpulist=BOX_CPUS[node])
            add_render_node(root, addr, 128 + k)
            add_dev_node(root, f"dri/renderD{128 + k}")
        else:
            raise ValueError(f"unknown vendor {vendor!r}")
    if vendor == "nvidia":
        add_dev_node(root, "nvidiactl")
    if vendor == "amd":
        add_kfd_cpu_node(root, 0)
        add_kfd_cpu_node(root, 1)
        add_dev_node(root, "kfd")
    return list(BOX_ADDRS)


#: The box's NUMA nodes as discovery makes them (64 GiB each, distances 10 and 21), for :func:`box_gpus`.
BOX_NODES = FrozenMap({
    n: Node(id=n, cpus=parse_cpulist(BOX_CPUS[n]), memory_bytes=64 << 30,
            distances=FrozenMap({m: 10 if m == n else 21 for m in BOX_CPUS}))
    for n in BOX_CPUS
})


def box_gpus(root, env=None, **kw):
    """The GPUs discovery finds under ``root`` (an :func:`eight_gpu_box`, or a :func:`container` of one) on
    :data:`BOX_NODES`, with the visibility variables of ``env`` (none by default)."""
    from numabind.devices import discover_gpus

    return discover_gpus(FsReader(root), BOX_NODES, env={} if env is None else env, **kw)


def container(root, vendor: str, expose, *, style: str = "legacy") -> dict[str, str]:
    """Turn an :func:`eight_gpu_box` root into what a container given host GPUs ``expose`` sees.

    ``expose`` are host indices (PCI order). NVIDIA ``style``: ``"legacy"``
    (nvidia-container-cli: ``/proc/driver/nvidia/gpus`` masked to the exposed
    GPUs, only their ``/dev/nvidiaN``), ``"cdi"`` (device nodes only, procfs
    unmasked), ``"privileged"`` (masked procfs, the host's whole ``/dev``).
    AMD: the hidden GPUs' KFD node files become unreadable (EPERM: here,
    absent), their render nodes absent. Intel: only the exposed render nodes.
    Returns the environment the container runtime sets.
    """
    base = os.fspath(root)
    hidden = [k for k in range(len(BOX_ADDRS)) if k not in expose]
    if vendor == "nvidia":
        for k in hidden:
            if style in ("legacy", "privileged"):
                shutil.rmtree(os.path.join(base, f"proc/driver/nvidia/gpus/{BOX_ADDRS[k]}"))
            if style in ("legacy", "cdi"):
                remove_dev_node(root, f"nvidia{k}")
        value = "void" if style == "cdi" else ",".join(str(k) for k in expose)
        return {"NVIDIA_VISIBLE_DEVICES": value}
    for k in hidden:
        remove_dev_node(root, f"dri/renderD{128 + k}")
        if vendor == "amd":
            kfd = os.path.join(base, f"sys/class/kfd/kfd/topology/nodes/{AMD_KFD_NODES[k]}")
            for name in ("properties", "name", "gpu_id"):
                os.remove(os.path.join(kfd, name))
    return {}


# ------------------------------------------------------------------ NVML
class FakeNVMLError(Exception):
    pass


def fake_pynvml(devices, *, init_fails=False):
    """A module with pynvml's surface; ``devices`` is a list of dicts.

    Each dict: ``bus`` (NVML's bus id), ``uuid``, ``name``, ``cpus`` (cpulist),
    ``mems`` (node ids), optionally ``mig`` (MIG UUIDs, None for an empty slot)
    and ``minor`` (default: the NVML index).
    """
    mod = types.ModuleType("pynvml")
    mod.NVMLError = FakeNVMLError
    calls = []

    def init():
        calls.append("init")
        if init_fails:
            raise FakeNVMLError("Driver Not Loaded")

    def words(ids, n):
        out = [0] * n
        for i in ids:
            out[i // 64] |= 1 << (i % 64)
        return out

    def mig_handle(h, k):
        migs = devices[h].get("mig", [])
        if k >= len(migs) or migs[k] is None:
            raise FakeNVMLError("Not Found")
        return ("mig", migs[k])

    mod.nvmlInit = init
    mod.nvmlShutdown = lambda: calls.append("shutdown")
    mod.nvmlDeviceGetCount = lambda: len(devices)
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=devices[h]["bus"].encode())
    mod.nvmlDeviceGetUUID = lambda h: h[1] if isinstance(h, tuple) else devices[h]["uuid"]
    mod.nvmlDeviceGetName = lambda h: devices[h]["name"]
    mod.nvmlDeviceGetMinorNumber = lambda h: devices[h].get("minor", h)
    mod.nvmlDeviceGetCpuAffinity = lambda h, n: words(parse_cpulist(devices[h]["cpus"]), n)
    mod.nvmlDeviceGetMemoryAffinity = lambda h, n, scope: words(devices[h]["mems"], n)
    mod.nvmlDeviceGetMigMode = lambda h: (1, 1) if "mig" in devices[h] else (0, 0)
    mod.nvmlDeviceGetMaxMigDeviceCount = lambda h: 7 if "mig" in devices[h] else 0
    mod.nvmlDeviceGetMigDeviceHandleByIndex = mig_handle
    mod.calls = calls
    return mod


# ------------------------------------------------------------ Huawei Ascend NPUs
#: Huawei's PCI vendor id; the device ids of Ascend NPUs are ``numabind.devices.ASCEND_NPUS``.
HUAWEI = 0x19E5
ASCEND_910B = 0xD802


def add_ascend_npu(root, address: str, *, numa_node: int | None = 0, local_cpulist: str | None = "",
                   device: int = ASCEND_910B, pci_class: int = 0x120000) -> str:
    """A Huawei PCI function (an Ascend 910B NPU unless ``device`` says otherwise)."""
    return add_pci_device(root, address, vendor=HUAWEI, numa_node=numa_node, local_cpulist=local_cpulist,
                          device=device, pci_class=pci_class)


def add_ascend_control_nodes(root, *, mode: int = 0o666) -> None:
    """``dev/davinci_manager``, ``dev/devmm_svm`` and ``dev/hisi_hdc``, which every process using an NPU opens."""
    for name in ("davinci_manager", "devmm_svm", "hisi_hdc"):
        add_dev_node(root, name, mode=mode)


#: PCI addresses of :func:`ascend_box`'s NPUs in PCI order (an Atlas 800-like layout); the first 4 on node 0.
ASCEND_ADDRS = ["0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:42:00.0",
                "0000:81:00.0", "0000:82:00.0", "0000:c1:00.0", "0000:c2:00.0"]


def ascend_box(root, *, cpus=None) -> list[str]:
    """A 2-socket server with 8 Ascend 910B NPUs (4 per socket) as bare metal shows it.

    ``dev/davinci0-7`` (physical ids 0-7) and the control nodes. ``cpus`` is
    ``{node: cpulist}`` (default :data:`BOX_CPUS`). Returns the PCI addresses.
    """
    cpus = cpus or BOX_CPUS
    for k, addr in enumerate(ASCEND_ADDRS):
        node = box_node(k)
        add_ascend_npu(root, addr, numa_node=node, local_cpulist=cpus[node])
        add_dev_node(root, f"davinci{k}")
    add_ascend_control_nodes(root)
    return list(ASCEND_ADDRS)


def ascend_container(root, expose, *, denied: bool = False) -> dict[str, str]:
    """Turn an :func:`ascend_box` root into what a container given physical NPUs ``expose`` sees.

    Ascend's container runtime mounts the chosen ``/dev/davinci<N>`` under the
    host's N (the others are absent; ``denied=True`` leaves them present with
    mode 000, as a privileged container whose device cgroup denies them).
    sysfs still lists all 8. Returns the environment the runtime sets.
    """
    for k in range(len(ASCEND_ADDRS)):
        if k not in expose:
            if denied:
                os.chmod(os.path.join(os.fspath(root), "dev", f"davinci{k}"), 0o000)
            else:
                remove_dev_node(root, f"davinci{k}")
    return {"ASCEND_VISIBLE_DEVICES": ",".join(str(k) for k in sorted(expose))}
