"""The GPU and NPU vendors numabind knows: one table (issue 43, "one fact, one home").

Stored by column (one dict per fact, keyed by vendor, in :data:`NAMES`' order) as plain dicts and tuples, so
run-path modules may import it.
"""

__all__ = ["ASCEND_NPUS", "BASE_CLASSES", "DISCOVERY_VARIABLES", "DRIVERS", "HWLOC_BACKENDS", "HWLOC_OSDEVS",
           "NAMES", "ORDER_VARIABLES", "PASSTHROUGH_DRIVERS", "PCI_IDS", "PCI_NAMES", "PCI_VENDORS", "UUID_TOOLS",
           "VENDOR_VARIABLE", "VISIBILITY_VARIABLES", "gpu_vendor", "identity_fix"]

# ----------------------------------------------------------------------------------------- the table
#: The vendors, in the order discovery prefers their runtimes (a discrete accelerator of a later vendor wins
#: over an integrated Intel GPU).
NAMES = ("nvidia", "amd", "intel", "ascend")
#: PCI vendor id of each.
PCI_IDS = {"nvidia": 0x10DE, "amd": 0x1002, "intel": 0x8086, "ascend": 0x19E5}
#: Its name in the PCI id database (hwloc's ``GPUVendor`` info).
PCI_NAMES = {"nvidia": "NVIDIA Corporation", "amd": "Advanced Micro Devices, Inc. [AMD/ATI]",
             "intel": "Intel Corporation", "ascend": "Huawei Technologies Co., Ltd."}
#: The PCI base classes its accelerators have (0x03 display, 0x12 processing accelerator).
BASE_CLASSES = {"nvidia": (0x03, 0x12), "amd": (0x03, 0x12), "intel": (0x03,), "ascend": (0x12,)}
#: The kernel drivers through which its runtime drives them (empty: any driver but a passthrough one).
DRIVERS: dict[str, tuple[str, ...]] = {"nvidia": ("nvidia",), "amd": ("amdgpu",), "intel": ("i915", "xe"),
                                       "ascend": ()}
#: The variables that say which devices a process sees, in the order the runtime applies them (ROCm:
#: ``ROCR_VISIBLE_DEVICES`` first, then ``HIP_VISIBLE_DEVICES`` indexes into what it left).
VISIBILITY_VARIABLES = {"nvidia": ("CUDA_VISIBLE_DEVICES",), "amd": ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"),
                        "intel": ("ZE_AFFINITY_MASK",), "ascend": ("ASCEND_RT_VISIBLE_DEVICES",)}
#: The other variables that change which devices the runtime numbers, or in which order: the order switches and
#: what a container runtime was asked to expose (in host terms).
ORDER_VARIABLES: dict[str, tuple[str, ...]] = {
    "nvidia": ("CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES"), "amd": ("GPU_DEVICE_ORDINAL",),
    "intel": ("ZE_ENABLE_PCI_ID_DEVICE_ORDER", "ZE_FLAT_DEVICE_HIERARCHY"), "ascend": ("ASCEND_VISIBLE_DEVICES",)}
#: The tool that lists its devices' UUIDs (a UUID names a device whatever the numbering).
UUID_TOOLS = {"nvidia": "nvidia-smi -L", "amd": "rocm-smi --showuniqueid", "intel": "", "ascend": ""}
#: How to settle which board an index is when numabind cannot tell, for a vendor without UUIDs to name.
_ORDER_FIXES = {"intel": "set ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 or pass an explicit node per GPU",
                "ascend": "pass an explicit NUMA node per NPU (npu-smi info -t topo prints each NPU's CPU affinity)"}
#: The names of the OS devices hwloc gives its GPUs (``nvml0``, ``cuda0``), the runtime's own numbering first;
#: hwloc has none for Ascend NPUs.
HWLOC_OSDEVS: dict[str, tuple[str, ...]] = {"nvidia": ("nvml", "cuda"), "amd": ("rsmi", "opencl"),
                                            "intel": ("ze", "opencl"), "ascend": ()}
#: The hwloc backend that names those OS devices: its subtype and the info that holds the UUID.
HWLOC_BACKENDS = {"nvidia": ("NVML", "NVIDIAUUID"), "amd": ("RSMI", "AMDUUID"),
                  "intel": ("LevelZero", "LevelZeroUUID")}

#: PCI device ids (vendor 0x19e5) of Huawei Ascend NPUs -> model (the vendor's other accelerator functions are not
#: NPUs).
ASCEND_NPUS = {0xD100: "Ascend 310", 0xD500: "Ascend 310P", 0xD801: "Ascend 910", 0xD802: "Ascend 910B",
               0xD803: "Ascend 910_93"}
#: Drivers that hand a device to a virtual machine: no runtime on this host can use it.
PASSTHROUGH_DRIVERS = ("vfio-pci", "pci-stub")
#: numabind's own setting: whose runtime numbers the devices when several vendors' are present.
VENDOR_VARIABLE = "NUMABIND_GPU_VENDOR"

# ----------------------------------------------------------------------------------------- views
#: PCI vendor id -> vendor.
PCI_VENDORS = {pci: name for name, pci in PCI_IDS.items()}
#: Every variable that changes which devices discovery numbers, or how.
DISCOVERY_VARIABLES = tuple(v for name in NAMES for v in VISIBILITY_VARIABLES[name] + ORDER_VARIABLES[name]) + (
    VENDOR_VARIABLE,)


def gpu_vendor(vendor_id: int | None, base_class: int | None, device_id: int | None) -> str | None:
    """The vendor of a PCI function discovery takes as a GPU (or an Ascend NPU), else None."""
    vendor = PCI_VENDORS.get(vendor_id) if vendor_id is not None else None
    if vendor is None or base_class not in BASE_CLASSES[vendor]:
        return None
    return None if vendor == "ascend" and device_id not in ASCEND_NPUS else vendor


def identity_fix(vendor: str) -> str:
    """What makes the identity of ``vendor``'s devices certain: the end of every identity note."""
    tool = UUID_TOOLS[vendor]
    if not tool:
        return _ORDER_FIXES[vendor]
    return f"set {' or '.join(VISIBILITY_VARIABLES[vendor])} to GPU UUIDs ({tool}) or pass an explicit node per GPU"
