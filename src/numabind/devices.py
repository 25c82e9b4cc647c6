"""Accelerator (GPU, NPU) discovery from sysfs, procfs, device files and optionally NVML.

Reads only through an :class:`numabind._fs.FsReader` under the discovery root:
file contents through ``reader.read``, device files (``dev/nvidia4``,
``dev/dri/renderD128``, ``dev/kfd``, ``dev/davinci3``) only by ``reader.stat``
(links followed inside a replayed root only), never opened. NVML (``pynvml``) is used only for the live
root and only when it imports.

Which GPUs, and in which order
------------------------------
``topology.gpus`` is what a worker of one vendor's runtime sees: NVIDIA if any
NVIDIA GPU is present, else AMD, else Intel, else Huawei Ascend NPUs (a
discrete accelerator of a later vendor wins over an integrated Intel GPU);
``vendor=`` or ``$NUMABIND_GPU_VENDOR`` picks another. Three steps:

1. **The GPUs this process can open** (the runtime's own numbering, "physical
   index"). sysfs is not namespaced: inside a container given 2 of 8 GPUs,
   ``sys/bus/pci/devices`` still lists all 8, while CUDA, ROCm and Level Zero
   number only the ones the container can open. Facts relied on:

   * NVIDIA. The legacy container runtime (``nvidia-container-cli``, used by
     ``docker --gpus`` and Kubernetes' device plugin) mounts a tmpfs over
     ``/proc/driver/nvidia`` and bind-mounts only the selected GPUs'
     ``gpus/<pci>`` directories, and creates only their ``/dev/nvidia<minor>``
     nodes (the minor is ``Device Minor`` in each ``information`` file). The
     CDI path (``--device nvidia.com/gpu=N``, podman) injects the device nodes
     but leaves ``/proc/driver/nvidia/gpus`` listing every GPU. A privileged
     container sees the host's whole ``/dev`` and can open every GPU, while the
     masked procfs lists only the selected ones. The driver's libraries open
     ``/dev/nvidia<minor>`` for each GPU and skip those they cannot open. So:
     when at least one ``dev/nvidia<N>`` exists under the root, the GPUs whose
     device node is accessible are the ones CUDA numbers (a GPU with no known
     minor is counted when enough unclaimed accessible nodes exist); with no
     device node at all (a dump, or a host where nothing created them yet) the
     ``proc/driver/nvidia/gpus`` listing decides; with neither,
     ``NVIDIA_VISIBLE_DEVICES`` does; with none of them, every GPU in sysfs.
     A GPU bound to another driver (``vfio-pci``) is never counted.
   * ``NVIDIA_VISIBLE_DEVICES`` (what the container runtime was asked to
     expose, in *host* terms): host indices (NVML order = PCI bus order of the
     host's NVIDIA GPUs), ``GPU-<uuid>``, ``MIG-<uuid>``, ``<gpu>:<mig>``,
     ``all``, ``none``, ``void``, empty, or a directory path (the device
     plugin's ``volume-mounts`` strategy lists the devices as entries there).
     It describes the container the *calling process* runs in, so it is read
     for the live root, or when ``env`` is passed explicitly. ``all`` is the
     default baked into CUDA images and ``void`` is what a CDI spec sets to
     switch the legacy hook off, so neither says what was exposed: they are
     used only when no file says anything. An explicit list that disagrees
     with the device files is reported and makes the identity uncertain.
   * AMD. The KFD topology (``sys/class/kfd/kfd/topology/nodes``) hides GPUs
     outside the process's device cgroup: their ``properties``, ``name`` and
     ``gpu_id`` read fail with EPERM, and KFD skips them for the process. ROCm
     numbers the readable GPU agents in KFD node order and needs ``/dev/kfd``
     and the GPU's ``/dev/dri/renderD<drm_render_minor>``. Without KFD the PCI
     order of the GPUs whose render node is accessible is used.
   * Intel. Level Zero opens the GPUs' render nodes ``/dev/dri/renderD<N>``
     (``sys/bus/pci/devices/<pci>/drm/renderD<N>`` names each GPU's); an
     inaccessible or missing node hides the GPU. With
     ``ZE_ENABLE_PCI_ID_DEVICE_ORDER=1`` (read as an integer, as the driver
     reads it) the driver reports devices in PCI bus order. Without it the
     order is the driver's: older compute-runtime releases keep their
     discovery order, newer ones sort by PCI bus id anyway, and the Level Zero
     loader documents that discrete GPU solutions come first. numabind then
     numbers discrete cards in PCI order and the integrated GPU (PCI bus 0)
     last, and when both kinds are visible their identity is uncertain.
   * Huawei Ascend ("ascend"). An NPU is a PCI function of vendor 0x19e5 in
     the processing-accelerator class (0x12) with one of the device ids of
     :data:`ASCEND_NPUS` (0xd100 Ascend 310, 0xd500 310P, 0xd801 910, 0xd802
     910B / Atlas A2, 0xd803 910_93 / Atlas A3, as Huawei's CANN log-collection
     script names them); other 0x19e5 functions of that class (the Kunpeng
     SoC's own crypto and compression engines) are not NPUs. The driver
     creates ``/dev/davinci<N>`` per NPU, N being the chip's *physical id*
     (Huawei's DCMI and npu-smi manuals: "ls /dev/davinci*" lists the
     physical ids), plus ``/dev/davinci_manager``, ``/dev/devmm_svm`` and
     ``/dev/hisi_hdc``, which a container needs as well. Ascend's container
     runtime mounts the selected ``davinci<N>`` under the host's N
     (``ASCEND_VISIBLE_DEVICES`` names host physical ids, ``0-2,4`` ranges
     allowed) and restricts the device cgroup to them. CANN numbers *logical*
     ids: on bare metal the logical id is the physical id; in a container
     its own devices are numbered from 0, which numabind takes in ascending
     physical id. So: the accessible ``dev/davinci<N>`` nodes decide, in
     ascending N (``Gpu.minor`` is N); with none under the root,
     ``ASCEND_VISIBLE_DEVICES`` (read like ``NVIDIA_VISIBLE_DEVICES``); else
     every NPU in sysfs. Which PCI function ``davinci<N>`` is cannot be read
     from sysfs: the driver creates the node with no parent device, and
     ``npu-smi info`` on 910B servers numbers NPU 0 at bus ``c1`` before bus
     ``01``, so the driver's order is not PCI bus order. numabind pairs the
     k-th physical id with the k-th NPU in PCI bus order; when the NPUs of
     the machine do not all share one NUMA node and CPU list, that guess
     decides the placement and every NPU's identity is uncertain (pass an
     explicit node per NPU; ``npu-smi info -t topo`` prints each NPU's CPU
     affinity).

   *Accessible* means: on the live root, a character device that
   ``os.access(path, R_OK | W_OK)`` allows (a device cgroup that denies a node
   with permissive mode bits is not seen without opening it; NVML's
   cross-check catches that on NVIDIA hosts); on a replayed root, where a
   fake machine carries ``dev/nvidia0`` as a plain file, a file whose owner
   read and write bits are set (``chmod 000`` stands for "denied").

2. **Order** (NVIDIA): PCI bus order, which is CUDA's order under
   ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and NVML's. CUDA's default
   (``FASTEST_FIRST``) puts faster models first and breaks ties by PCI bus id,
   so with GPUs of different models the order is uncertain (a warning suggests
   ``PCI_BUS_ID``). With MIG enabled on one of several visible GPUs, CUDA
   enumerates a single MIG device per process, so which index is which GPU is
   uncertain too (name the MIG device in ``CUDA_VISIBLE_DEVICES``).

3. **The visibility variables** index into that list:

   * ``CUDA_VISIBLE_DEVICES``: indices, ``GPU-<uuid>`` (or a unique prefix),
     ``MIG-<uuid>`` and ``MIG-GPU-<uuid>/<gi>/<ci>``; the first entry that is
     invalid, ambiguous or repeated ends the list (an index of more than 9
     digits is invalid, like one out of range), and an empty value means no
     devices.
   * AMD: ``ROCR_VISIBLE_DEVICES`` filters first, then ``HIP_VISIBLE_DEVICES``
     (or ``CUDA_VISIBLE_DEVICES`` when HIP's is unset) indexes into what is
     left; both take indices or ``GPU-<uuid>`` entries with the same rules.
   * Intel: ``ZE_AFFINITY_MASK`` (``N`` or ``N.sub`` entries) filters and never
     permutes; entries that name no device are skipped with a warning; an
     empty value means all devices. Tile-as-device mode
     (``ZE_FLAT_DEVICE_HIERARCHY=FLAT``) numbers tiles, which sysfs cannot
     count, so numabind numbers whole cards.
   * Ascend: ``ASCEND_RT_VISIBLE_DEVICES`` lists logical ids separated by
     commas, in ascending order (CANN's environment-variable reference); CANN
     reads the ids before the first entry that is not a plain id or names no
     device (``1, 2,3`` is ``1``; ``1,3,8`` on 8 NPUs is ``1,3``), and so does
     numabind, with a warning. An entry that is not larger than the one
     before ends the list too (CANN supports ascending lists only), and then
     the identity is uncertain. Unset or empty: every NPU.

4. **A command's GPUs** (``numabind run --gpus``): :func:`pick_gpus` resolves a
   list of visible indices, UUIDs and PCI addresses to visible GPUs, and
   :func:`visibility_environ` writes the variables above so that a command
   sees exactly those, composed with the ones already set (the parent's own
   entries are reused: indices stay indices, UUIDs stay UUIDs). For AMD it
   sets ``ROCR_VISIBLE_DEVICES``, which ROCm reads first, and renumbers
   ``HIP_VISIBLE_DEVICES`` when one was set.

Identity
--------
Each :class:`Gpu` says whether numabind is sure which board its index is
(``identity``: ``"certain"`` or ``"uncertain"``, with ``identity_note`` naming
the sources that disagree and the fix). It is uncertain when sources disagree
(NVML against the files, ``NVIDIA_VISIBLE_DEVICES`` against the device files,
the device files against themselves), when the order is the runtime's choice
(mixed CUDA models, MIG, integrated plus discrete Intel GPUs), except for a
device selected by UUID, whose identity does not depend on numbering. Each
disagreement is logged at WARNING naming both sources and what each said.
Plans carry the note; in strict mode (``NUMABIND_STRICT``) planning refuses an
uncertain GPU (:func:`numabind.strategies.plan_for_gpu`).

NVML, when importable (live root only), lists what the driver lets this
process open, in its index order: its list cross-checks the count and order,
confirms the file-based answer (then it is certain), or, when it disagrees,
replaces it (and the identity is uncertain).

Bad input is never fatal here: numbers are parsed as bounded ASCII decimals
(``²``, ``٣``, fullwidth digits and 5000-digit values are refused, never
handed to ``int()``); an unparsable ``Device Minor``, KFD node name or
property is ignored with a DEBUG line, an unparsable visibility entry is
handled as documented above with a WARNING.

Firmware that reports ``numa_node = -1`` is placed by its ``local_cpulist``
(the one node whose CPUs it overlaps), on a machine with one node with CPUs on
that node, else through NVML's memory affinity, else left ``None``.
"""

from __future__ import annotations

import os
import stat   # loaded by os already: free

from ._base import Value, excerpt, getLogger, printable
from ._fs import ascii_int, key_values
from .cpulist import format_cpulist, parse_cpulist
from .errors import PlanError

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (discovery's start-up, issue 34)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable, Collection, Mapping, Sequence
    from typing import Any

log = getLogger(__name__)

__all__ = [
    "Gpu",
    "IDENTITIES",
    "PciGpu",
    "VENDORS",
    "VISIBILITY_VARIABLES",
    "discover_gpus",
    "gpu_list_entries",
    "parse_nvidia_information",
    "pick_gpus",
    "place_numa_node",
    "scan_pci_gpus",
    "select_visible",
    "visibility_environ",
]

#: PCI vendor id -> numabind vendor name.
VENDORS = {0x10DE: "nvidia", 0x1002: "amd", 0x8086: "intel", 0x19E5: "ascend"}
#: PCI device ids (vendor 0x19e5) of Huawei Ascend NPUs -> model, as Huawei's CANN log-collection script names them.
ASCEND_NPUS = {0xD100: "Ascend 310", 0xD500: "Ascend 310P", 0xD801: "Ascend 910", 0xD802: "Ascend 910B",
               0xD803: "Ascend 910_93"}
#: Values of :attr:`Gpu.identity`.
IDENTITIES = ("certain", "uncertain")
_VENDOR_ORDER = ("nvidia", "amd", "intel", "ascend")
#: PCI base classes accepted per vendor (0x03 display, 0x12 processing accelerator).
_BASE_CLASSES = {"nvidia": (0x03, 0x12), "amd": (0x03, 0x12), "intel": (0x03,), "ascend": (0x12,)}
#: Kernel drivers through which each vendor's runtime drives its GPUs (empty: any driver but a passthrough one).
_DRIVERS: dict[str, tuple[str, ...]] = {"nvidia": ("nvidia",), "amd": ("amdgpu",), "intel": ("i915", "xe"),
                                        "ascend": ()}
#: Drivers that hand a device to a virtual machine: no runtime on this host can use it.
_PASSTHROUGH_DRIVERS = ("vfio-pci", "pci-stub")
_PCI_DEVICES = "sys/bus/pci/devices"
_NV_PROC = "proc/driver/nvidia/gpus"
_NV_CAPS = "proc/driver/nvidia/capabilities"
_KFD_NODES = "sys/class/kfd/kfd/topology/nodes"
#: Digits of a PCI address as sysfs spells it (lower case), and of a sysfs hex attribute. Plain string tests
#: instead of regular expressions: ``re`` is a third of discovery's start-up (issue 34).
_LOWER_HEX = frozenset("0123456789abcdef")
_ANY_HEX = frozenset("0123456789abcdefABCDEF")
_DIGITS = frozenset("0123456789")
#: Device file names ``<prefix><N>`` (N: 1 to 6 ASCII digits) of NVIDIA GPUs, render nodes and Ascend NPUs.
_NV_NODE = "nvidia"
_RENDER_NODE = "renderD"
_DAVINCI_NODE = "davinci"
#: Most digits accepted in a visibility index (CUDA_VISIBLE_DEVICES & co.).
_INDEX_DIGITS = 9
#: Read caps for the small driver files (bytes).
_INFO_LIMIT = 16384


class Gpu(Value):
    """One accelerator as a worker process sees it.

    ``numa_source`` says how ``numa_node`` was found: ``"numa_node"`` (the PCI
    device's own attribute), ``"local_cpulist"``, ``"single-node"``, ``"nvml"``
    or ``"unknown"`` (then ``numa_node`` is None and ``numa_note`` says why).
    ``physical_index`` is the device's number in its runtime with no
    visibility variable set (inside a container: among the GPUs the container
    can open); ``mig_uuid`` is set when the visible device is a MIG instance
    of this physical GPU. ``identity`` is ``"certain"`` or ``"uncertain"``
    (which board this index is); ``identity_note`` says why and how to fix it.
    ``vendor`` is ``"nvidia"``, ``"amd"``, ``"intel"`` or ``"ascend"`` (a
    Huawei Ascend NPU: ``minor`` is N of its ``/dev/davinci<N>``, the chip's
    physical id; ``name`` the model its PCI device id names).

    A frozen value (:class:`numabind._base.Value`, not a dataclass): ``gpu.replace(index=1)`` is a changed
    copy (``copy.replace`` from Python 3.13); ``dataclasses.replace`` does not apply.
    """

    __slots__ = ("index", "pci_address", "vendor", "numa_node", "local_cpus", "uuid", "name", "minor", "integrated",
                 "numa_source", "numa_note", "device_id", "physical_index", "mig_uuid", "identity", "identity_note")

    def __init__(self, index: int, pci_address: str, vendor: str, numa_node: int | None,
                 local_cpus: frozenset[int] = frozenset(), uuid: str | None = None, name: str | None = None,
                 minor: int | None = None, integrated: bool = False, numa_source: str = "numa_node",
                 numa_note: str = "", device_id: int | None = None, physical_index: int | None = None,
                 mig_uuid: str | None = None, identity: str = "certain", identity_note: str = "") -> None:
        for key, value in (("index", index), ("pci_address", pci_address), ("vendor", vendor),
                           ("numa_node", numa_node), ("local_cpus", frozenset(local_cpus)), ("uuid", uuid),
                           ("name", name), ("minor", minor), ("integrated", integrated),
                           ("numa_source", numa_source), ("numa_note", numa_note), ("device_id", device_id),
                           ("physical_index", physical_index), ("mig_uuid", mig_uuid), ("identity", identity),
                           ("identity_note", identity_note)):
            object.__setattr__(self, key, value)

    index: int                      # visible index (after CUDA_VISIBLE_DEVICES & co.)
    pci_address: str                # "0000:1b:00.0"
    vendor: str                     # "nvidia" | "amd" | "intel" | "ascend"
    numa_node: int | None           # None when the firmware reports -1 and nothing else places it
    local_cpus: frozenset[int]
    uuid: str | None
    name: str | None
    minor: int | None
    integrated: bool
    numa_source: str
    numa_note: str
    device_id: int | None
    physical_index: int | None
    mig_uuid: str | None
    identity: str
    identity_note: str

    @property
    def identity_certain(self) -> bool:
        return self.identity == "certain"

    def describe(self) -> str:
        """One human line: ``GPU 0 nvidia 0000:1b:00.0 node 0``."""
        where = f"node {self.numa_node}" if self.numa_node is not None else "node unknown"
        extra = f" ({self.mig_uuid})" if self.mig_uuid else ""
        doubt = "" if self.identity_certain else " [identity uncertain]"
        return f"GPU {self.index} {self.vendor} {self.pci_address}{extra} {where}{doubt}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form (cpu sets as canonical cpulists)."""
        return {
            "index": self.index,
            "pci_address": self.pci_address,
            "vendor": self.vendor,
            "numa_node": self.numa_node,
            "numa_source": self.numa_source,
            "numa_note": self.numa_note,
            "local_cpus": format_cpulist(self.local_cpus),
            "uuid": self.uuid,
            "name": self.name,
            "minor": self.minor,
            "integrated": self.integrated,
            "device_id": f"0x{self.device_id:04x}" if self.device_id is not None else None,
            "physical_index": self.physical_index,
            "mig_uuid": self.mig_uuid,
            "identity": self.identity,
            "identity_note": self.identity_note,
        }


class PciGpu(Value):
    """A GPU as sysfs lists it, before numbering (internal record, public for tests)."""

    __slots__ = ("pci_address", "vendor", "pci_class", "device_id", "firmware_node", "local_cpus", "integrated",
                 "uuid", "name", "minor", "kfd_node", "mig_uuids", "nvml_memory_nodes", "driver", "render_minor",
                 "mig_slices")

    def __init__(self, pci_address: str, vendor: str, pci_class: int, device_id: int | None,
                 firmware_node: int | None, local_cpus: frozenset[int], integrated: bool = False,
                 uuid: str | None = None, name: str | None = None, minor: int | None = None,
                 kfd_node: int | None = None, mig_uuids: tuple[str, ...] = (),
                 nvml_memory_nodes: frozenset[int] | None = None, driver: str | None = None,
                 render_minor: int | None = None, mig_slices: int = 0) -> None:
        for key, value in (("pci_address", pci_address), ("vendor", vendor), ("pci_class", pci_class),
                           ("device_id", device_id), ("firmware_node", firmware_node),
                           ("local_cpus", frozenset(local_cpus)), ("integrated", integrated), ("uuid", uuid),
                           ("name", name), ("minor", minor), ("kfd_node", kfd_node),
                           ("mig_uuids", tuple(mig_uuids)),
                           ("nvml_memory_nodes", None if nvml_memory_nodes is None else frozenset(nvml_memory_nodes)),
                           ("driver", driver), ("render_minor", render_minor), ("mig_slices", mig_slices)):
            object.__setattr__(self, key, value)

    pci_address: str
    vendor: str
    pci_class: int
    device_id: int | None
    firmware_node: int | None       # numa_node as read; None when missing or unparsable
    local_cpus: frozenset[int]
    integrated: bool
    uuid: str | None
    name: str | None
    minor: int | None               # NVIDIA device minor, AMD render minor, Ascend physical id (davinci<N>)
    kfd_node: int | None
    mig_uuids: tuple[str, ...]
    nvml_memory_nodes: frozenset[int] | None
    driver: str | None              # kernel driver bound to it (basename of its driver link)
    render_minor: int | None        # N of its /dev/dri/renderDN (AMD, Intel)
    mig_slices: int                 # MIG GPU instances procfs lists for it (NVIDIA)


# ------------------------------------------------------------ small parsers
def _hex(text: str | None) -> int | None:
    """A sysfs hex attribute (``0x10de``: an optional ``0x``, then 1 to 16 ASCII hex digits), else None."""
    if text is None:
        return None
    digits = text.strip()
    if digits[:2] in ("0x", "0X"):
        digits = digits[2:]
    return int(digits, 16) if 0 < len(digits) <= 16 and set(digits) <= _ANY_HEX else None


def _bdf(text: str) -> tuple[str, str, str, str] | None:
    """``(domain, bus, device, function)`` of a PCI address spelled ``dddd:bb:dd.f`` (a domain of 4 to 8 and
    bus and device of 2 lower-case hex digits, a function 0 to 7), else None."""
    parts = text.split(":")
    if len(parts) != 3:
        return None
    domain, bus, rest = parts
    device, dot, function = rest[:2], rest[2:3], rest[3:]
    if not (4 <= len(domain) <= 8 and len(bus) == 2 and len(rest) == 4 and dot == "." and len(function) == 1
            and function in "01234567" and set(domain + bus + device) <= _LOWER_HEX):
        return None
    return domain, bus, device, function


def _numbered(name: str, prefix: str) -> int | None:
    """N of a device file name ``<prefix><N>`` (N: 1 to 6 ASCII digits), else None."""
    digits = name[len(prefix):]
    if name.startswith(prefix) and 0 < len(digits) <= 6 and set(digits) <= _DIGITS:
        return int(digits)
    return None


def _kept(text: str | None) -> str | None:
    """A string discovery keeps from a file of the machine (a model, a UUID, a driver's name), through
    :func:`numabind._base.printable`: a replayed root's files are someone else's, and every note, plan line and
    table that names the GPU prints what is kept here."""
    return None if text is None else printable(text)


def _said(text: str) -> str:
    """A value the user set (an environment variable, a GPU list) in a message: :func:`numabind._base.excerpt`
    as typed, so the message shows which character is wrong; a file's text is quoted by ``excerpt`` alone."""
    return excerpt(text, escape=True)


def _addrs(gpus: Sequence[PciGpu] | Sequence[str]) -> str:
    items = [g if isinstance(g, str) else g.pci_address for g in gpus]
    return f"{len(items)} ({', '.join(items)})" if items else "none"


# ---------------------------------------------------------------- sysfs scan
def _read_hex(reader: Any, rel: str) -> int | None:
    return _hex(reader.read_strip(rel))


def _is_integrated(vendor: str, address: str) -> bool:
    m = _bdf(address)
    return vendor == "intel" and m is not None and int(m[0], 16) == 0 and int(m[1], 16) == 0


def _driver(reader: Any, base: str) -> str | None:
    realpath = getattr(reader, "realpath", None)
    real = realpath(f"{base}/driver") if realpath is not None else None
    return _kept(os.path.basename(real)) if real else None


def _render_minor(reader: Any, base: str) -> int | None:
    for name in reader.listdir(f"{base}/drm"):
        minor = _numbered(name, _RENDER_NODE)
        if minor is not None:
            return minor
    return None


def scan_pci_gpus(reader: Any) -> list[PciGpu]:
    """Every GPU-class PCI device of a known vendor under the reader's root, PCI order."""
    found = []
    for addr in reader.listdir(_PCI_DEVICES):
        address = addr.lower()
        if _bdf(address) is None:
            continue
        base = f"{_PCI_DEVICES}/{addr}"
        vendor_id = _read_hex(reader, f"{base}/vendor")
        vendor = VENDORS.get(vendor_id) if vendor_id is not None else None
        pci_class = _read_hex(reader, f"{base}/class")
        if vendor is None or pci_class is None or (pci_class >> 16) not in _BASE_CLASSES[vendor]:
            continue
        device_id = _read_hex(reader, f"{base}/device")
        if vendor == "ascend" and device_id not in ASCEND_NPUS:
            log.debug("PCI %s: Huawei accelerator of device id %s is not an Ascend NPU; ignored", address,
                      f"0x{device_id:04x}" if device_id is not None else "unknown")
            continue
        raw_node = reader.read_strip(f"{base}/numa_node")
        node = ascii_int(raw_node, signed=True, max_digits=6) if raw_node is not None else None
        if raw_node and node is None:
            log.debug("GPU %s: unparsable numa_node %s", address, excerpt(raw_node))
        cpulist = reader.read_strip(f"{base}/local_cpulist")
        try:
            local = parse_cpulist(cpulist) if cpulist else frozenset()
        except PlanError:
            log.debug("GPU %s: unparsable local_cpulist %s", address, excerpt(cpulist or ""))
            local = frozenset()
        found.append(PciGpu(
            pci_address=address,
            vendor=vendor,
            pci_class=pci_class,
            device_id=device_id,
            firmware_node=node,
            local_cpus=local,
            integrated=_is_integrated(vendor, address),
            driver=_driver(reader, base),
            render_minor=_render_minor(reader, base) if vendor in ("amd", "intel") else None,
            name=ASCEND_NPUS.get(device_id) if vendor == "ascend" and device_id is not None else None,
        ))
    found.sort(key=lambda g: g.pci_address)
    log.debug("PCI scan: %d GPUs (%s)", len(found), ", ".join(f"{g.vendor} {g.pci_address}" for g in found))
    return found


def _normal_bdf(name: str) -> str | None:
    """A procfs/NVML bus id (``0000:18:00.0``, ``00000000:18:00.0``) as sysfs spells it."""
    m = _bdf(name.strip().lower())
    if m is None:
        return None
    return f"{int(m[0], 16):04x}:{m[1]}:{m[2]}.{m[3]}"


def parse_nvidia_information(text: str) -> dict[str, str]:
    """``Key: value`` lines of ``proc/driver/nvidia/gpus/*/information``."""
    return key_values(text)


def _nvidia_procfs(reader: Any) -> dict[str, str] | None:
    """``{pci address: directory name}`` of ``proc/driver/nvidia/gpus``; None when it lists nothing."""
    listed = {}
    for name in reader.listdir(_NV_PROC):
        addr = _normal_bdf(name)
        if addr is not None:
            listed[addr] = name
    return listed or None


def _nvidia_proc(reader: Any, gpus: list[PciGpu], listed: Mapping[str, str] | None) -> list[PciGpu]:
    out = []
    for g in gpus:
        if g.vendor == "nvidia" and listed and g.pci_address in listed:
            text = reader.read(f"{_NV_PROC}/{listed[g.pci_address]}/information", _INFO_LIMIT)
            if text is not None:
                info = parse_nvidia_information(text)
                raw = info.get("Device Minor")
                minor = ascii_int(raw, max_digits=6) if raw else None
                if raw and minor is None:
                    log.debug("GPU %s: unparsable Device Minor %s; ignored", g.pci_address, excerpt(raw))
                g = g.replace(
                    uuid=_kept(info.get("GPU UUID")) or g.uuid,
                    name=_kept(info.get("Model")) or g.name,
                    minor=minor if minor is not None else g.minor,
                )
        if g.vendor == "nvidia" and g.minor is not None:
            slices = [n for n in reader.listdir(f"{_NV_CAPS}/gpu{g.minor}/mig")
                      if n.startswith("gi") and ascii_int(n[2:], max_digits=6) is not None]
            if slices:
                g = g.replace(mig_slices=len(slices))
        out.append(g)
    return out


def _kfd_properties(text: str) -> dict[str, int]:
    """``name value`` lines of a KFD ``properties`` file; values as bounded ASCII decimals."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isascii():
            value = ascii_int(parts[1], max_digits=20)
            if value is not None:
                out[parts[0]] = value
    return out


class _Kfd(Value):
    __slots__ = ("agents", "hidden")

    def __init__(self, agents: dict[str, tuple[int, dict[str, int], str | None]], hidden: list[int]) -> None:
        object.__setattr__(self, "agents", agents)
        object.__setattr__(self, "hidden", hidden)

    agents: dict[str, tuple[int, dict[str, int], str | None]]   # pci address -> (node id, properties, name)
    hidden: list[int]                                            # node ids whose properties cannot be read


def _kfd(reader: Any) -> _Kfd | None:
    """The KFD topology's GPU agents; None when there is no KFD topology."""
    entries = reader.listdir(_KFD_NODES)
    if not entries:
        return None
    ids = []
    for name in entries:
        nid = ascii_int(name, max_digits=6)
        if nid is None or name != str(nid):
            log.debug("KFD topology: node directory %s is not a node id; ignored", excerpt(name))
            continue
        ids.append(nid)
    agents: dict[str, tuple[int, dict[str, int], str | None]] = {}
    hidden = []
    for nid in sorted(ids):
        text = reader.read(f"{_KFD_NODES}/{nid}/properties", _INFO_LIMIT)
        if text is None:
            hidden.append(nid)      # EPERM: a GPU outside this process's device cgroup
            continue
        props = _kfd_properties(text)
        if not props.get("simd_count"):
            continue  # a CPU agent
        loc = props.get("location_id")
        if loc is None:
            continue
        addr = f"{props.get('domain', 0) & 0xFFFF:04x}:{loc >> 8 & 0xFF:02x}:{loc >> 3 & 0x1F:02x}.{loc & 7:x}"
        name = reader.read(f"{_KFD_NODES}/{nid}/name", 256)
        agents[addr] = (nid, props, _kept(name.strip()) if name else None)
    return _Kfd(agents, hidden)


def _amd_kfd(gpus: list[PciGpu], kfd: _Kfd | None) -> list[PciGpu]:
    out = []
    for g in gpus:
        hit = kfd.agents.get(g.pci_address) if kfd is not None and g.vendor == "amd" else None
        if hit is not None:
            nid, props, name = hit
            unique = props.get("unique_id")
            render = props.get("drm_render_minor")
            g = g.replace(
                kfd_node=nid,
                uuid=f"GPU-{unique:016x}" if unique else g.uuid,
                name=name or g.name,
                integrated=g.integrated or props.get("cpu_cores_count", 0) > 0,
                minor=render if render is not None else g.minor,
                render_minor=render if render is not None else g.render_minor,
            )
        out.append(g)
    return out


def _with_nvml(gpus: list[PciGpu], nvml_devices: Sequence[Any]) -> list[PciGpu]:
    by_addr = {d.pci_address: d for d in nvml_devices}
    out = []
    for g in gpus:
        d = by_addr.get(g.pci_address) if g.vendor == "nvidia" else None
        if d is not None:
            if g.uuid and d.uuid and g.uuid != d.uuid:
                log.warning("GPU %s: procfs says UUID %s, NVML says %s; using NVML's", g.pci_address, g.uuid, d.uuid)
            if g.local_cpus and d.cpu_affinity is not None and d.cpu_affinity != g.local_cpus:
                log.warning(
                    "GPU %s: sysfs local_cpulist %s, NVML CPU affinity %s; using sysfs",
                    g.pci_address, format_cpulist(g.local_cpus), format_cpulist(d.cpu_affinity),
                )
            g = g.replace(
                uuid=_kept(d.uuid) or g.uuid,
                name=_kept(d.name) or g.name,
                minor=d.minor if d.minor is not None else g.minor,
                local_cpus=g.local_cpus or (d.cpu_affinity or frozenset()),
                mig_uuids=tuple(printable(m) for m in d.mig_uuids),
                nvml_memory_nodes=d.memory_nodes,
            )
        out.append(g)
    return out


# ------------------------------------------------------------------ placing
def place_numa_node(gpu: PciGpu, nodes: Mapping[int, Any]) -> tuple[int | None, str, str]:
    """``(node, source, note)`` for one GPU; node None when it cannot be placed."""
    fw = gpu.firmware_node
    if fw is not None and fw >= 0 and fw in nodes:
        mem = gpu.nvml_memory_nodes
        if mem and fw not in mem:
            log.warning(
                "GPU %s: sysfs numa_node %d, NVML memory affinity nodes %s; using sysfs",
                gpu.pci_address, fw, format_cpulist(mem),
            )
        return fw, "numa_node", ""
    said = "is missing" if fw is None else f"is {fw}" + ("" if fw < 0 else " (no such node)")
    cpu_nodes = sorted(n for n, node in nodes.items() if node.cpus)
    if len(cpu_nodes) == 1:
        return cpu_nodes[0], "single-node", f"numa_node {said}; the machine has one node with CPUs"
    if gpu.local_cpus:
        touched = [n for n in cpu_nodes if nodes[n].cpus & gpu.local_cpus]
        if len(touched) == 1:
            return touched[0], "local_cpulist", (
                f"numa_node {said}; local_cpulist {format_cpulist(gpu.local_cpus)} lies in node {touched[0]}"
            )
    mem = gpu.nvml_memory_nodes
    if mem is not None:
        known = sorted(n for n in mem if n in nodes)
        if len(known) == 1:
            return known[0], "nvml", f"numa_node {said}; NVML memory affinity is node {known[0]}"
    if gpu.local_cpus:
        touched = [n for n in cpu_nodes if nodes[n].cpus & gpu.local_cpus]
        why = f"local_cpulist {format_cpulist(gpu.local_cpus)} spans nodes {format_cpulist(touched)}"
    else:
        why = "there is no local_cpulist"
    return None, "unknown", f"firmware numa_node {said} and {why}"


# ------------------------------------------------ which GPUs the runtime opens
def _accessible(reader: Any, rel: str) -> bool:
    """Whether the device file ``rel`` under the root could be opened read-write (see the module doc).

    Its mode is read through ``reader.stat``: in a replayed root a link is followed inside the root only,
    so a device node that links out of it never answers with a file of this machine."""
    st = reader.stat(rel)
    if st is None:
        return False
    if getattr(reader, "is_live", False):
        return stat.S_ISCHR(st.st_mode) and os.access(reader.path(rel), os.R_OK | os.W_OK)
    return bool(st.st_mode & 0o600 == 0o600)


def _device_nodes(reader: Any, directory: str, prefix: str) -> dict[int, bool] | None:
    """``{N: accessible}`` of the device files ``directory/<prefix N>``; None when there is none."""
    if not hasattr(reader, "path"):
        return None
    found = {}
    for name in reader.listdir(directory):
        n = _numbered(name, prefix)
        if n is not None:
            found[n] = _accessible(reader, f"{directory}/{name}")
    return found or None


def _node_verdicts(gpus: Sequence[PciGpu], minor_of: Callable[[PciGpu], int | None],
                   nodes: Mapping[int, bool]) -> dict[str, bool | None]:
    """Per GPU: can its device node be opened? None when that cannot be told.

    A GPU of unknown minor is openable when there are at least as many
    accessible device nodes no known GPU claims as GPUs of unknown minor,
    not openable when there is no such node, else undecided.
    """
    claimed = {m for m in map(minor_of, gpus) if m is not None}
    spare = [m for m, ok in nodes.items() if ok and m not in claimed]
    unknown = [g for g in gpus if minor_of(g) is None]
    out: dict[str, bool | None] = {}
    for g in gpus:
        m = minor_of(g)
        if m is not None:
            out[g.pci_address] = bool(nodes.get(m, False))
        elif not spare:
            out[g.pci_address] = False
        else:
            out[g.pci_address] = True if len(spare) >= len(unknown) else None
    return out


def _names(prefix: str, ids: Sequence[int]) -> str:
    return ", ".join(f"{prefix}{i}" for i in sorted(ids)) or "none"


def _drop_other_drivers(vendor: str, gpus: Sequence[PciGpu]) -> list[PciGpu]:
    out = []
    allowed = _DRIVERS[vendor]
    for g in gpus:
        if g.driver is not None and (g.driver not in allowed if allowed else g.driver in _PASSTHROUGH_DRIVERS):
            log.debug("GPU %s is bound to %s, not %s: its runtime cannot use it",
                      g.pci_address, g.driver, " or ".join(allowed) or "its vendor's driver")
            continue
        out.append(g)
    return out


class _Runtime(Value):
    __slots__ = ("gpus", "membership", "order")

    def __init__(self, gpus: list[PciGpu], membership: list[str], order: list[str]) -> None:
        object.__setattr__(self, "gpus", gpus)
        object.__setattr__(self, "membership", membership)
        object.__setattr__(self, "order", order)

    gpus: list[PciGpu]          # what the runtime numbers, in its order
    membership: list[str]       # why the set may be wrong (sources disagree)
    order: list[str]            # why the order may be wrong


def _warn(note: str) -> str:
    log.warning("%s", note)
    return note


def _nvidia_env_verdict(value: str, reader: Any, host: Sequence[PciGpu]) -> tuple[dict[str, bool | None], str]:
    """What ``NVIDIA_VISIBLE_DEVICES`` says about each host GPU, and that in words."""
    entries: list[str]
    if value.startswith("/"):
        # the device plugin's volume-mounts strategy: one entry per device under this directory
        parts = value.strip("/").split("/")
        entries = [] if ".." in parts else [printable(e) for e in reader.listdir("/".join(parts))[:1024]]
        said = f"NVIDIA_VISIBLE_DEVICES={_said(value)} lists {', '.join(entries) or 'no device'}"
    else:
        entries = [e.strip() for e in value.split(",") if e.strip()]
        said = f"NVIDIA_VISIBLE_DEVICES={_said(value)}"
    chosen: set[str] = set()
    unresolved: list[str] = []
    uuids = [g.uuid for g in host]
    for raw in entries:
        entry = raw.rpartition("=")[2].strip()        # CDI-style "nvidia.com/gpu=4"
        pos: int | None = None
        if entry.lower() == "all":
            return {g.pci_address: True for g in host}, said
        head = entry.split(":", 1)[0]                 # "<gpu>:<mig>" names the parent GPU
        if head.isascii() and head.isdigit():
            k = ascii_int(head, max_digits=_INDEX_DIGITS)
            pos = k if k is not None and k < len(host) else None
        elif entry.upper().startswith("MIG-GPU-"):
            pos = _match_uuid(entry[4:].split("/", 1)[0], uuids)
        elif entry.upper().startswith("MIG-"):
            hits = [i for i, g in enumerate(host) if any(m.lower().startswith(entry.lower()) for m in g.mig_uuids)]
            pos = hits[0] if len(hits) == 1 else None
        elif entry.upper().startswith("GPU-"):
            pos = _match_uuid(entry, uuids)
        if pos is None:
            unresolved.append(entry)
        else:
            chosen.add(host[pos].pci_address)
    if unresolved:
        log.debug("NVIDIA_VISIBLE_DEVICES: cannot resolve %s here", ", ".join(_said(e) for e in unresolved[:4]))
        return {g.pci_address: (True if g.pci_address in chosen else None) for g in host}, said
    return {g.pci_address: g.pci_address in chosen for g in host}, said


def _nvidia_runtime(reader: Any, gpus: Sequence[PciGpu], env: Mapping[str, str], container_env: bool,
                    procfs: Mapping[str, str] | None, nvml: Sequence[Any] | None) -> _Runtime:
    host = _drop_other_drivers("nvidia", sorted((g for g in gpus if g.vendor == "nvidia"),
                                                key=lambda g: g.pci_address))
    membership: list[str] = []
    order: list[str] = []
    dev = _device_nodes(reader, "dev", _NV_NODE)
    value = env.get("NVIDIA_VISIBLE_DEVICES") if container_env else None
    env_verdict: dict[str, bool | None] | None = None
    env_said = ""
    if value is not None:
        env_verdict, env_said = _nvidia_env_verdict(value.strip(), reader, host)
    listed = set(procfs or ())
    if dev is not None:
        verdict = _node_verdicts(host, lambda g: g.minor, dev)
        keep = [g for g in host if verdict[g.pci_address] is not False]
        open_nodes = [m for m, ok in dev.items() if ok]
        dev_said = f"/dev holds accessible NVIDIA device nodes {_names('nvidia', open_nodes)}"
        undecided = [g for g in host if verdict[g.pci_address] is None]
        if undecided:
            claimed = {g.minor for g in host if g.minor is not None}
            spare = [m for m in open_nodes if m not in claimed]
            membership.append(_warn(
                f"{dev_said}, but only {len(spare)} of them ({_names('nvidia', spare)}) belong to no GPU of known "
                f"minor, for {len(undecided)} GPUs of unknown minor ({_addrs(undecided)}, not in "
                f"/proc/driver/nvidia/gpus); numabind counts all {len(undecided)}, CUDA may open fewer"))
        if procfs is not None and {g.pci_address for g in keep} != listed & {g.pci_address for g in host}:
            log.debug("%s; /proc/driver/nvidia/gpus lists %s; the device nodes decide what CUDA can open "
                      "(CDI containers narrow by device node, privileged ones widen)",
                      dev_said, _addrs(sorted(listed)))
        decided_by = dev_said
    elif procfs is not None:
        keep = [g for g in host if g.pci_address in listed]
        decided_by = f"/proc/driver/nvidia/gpus lists {_addrs(sorted(listed))}"
    elif env_verdict is not None and value is not None:
        word = value.strip().lower()
        if word in ("", "none", "void"):
            keep = []
        else:
            keep = [g for g in host if env_verdict[g.pci_address] is not False]
            if any(env_verdict[g.pci_address] is None for g in host):
                membership.append(_warn(
                    f"{env_said} names devices numabind cannot resolve without the driver's /proc/driver/nvidia "
                    f"or NVML; numabind counts all {len(host)} NVIDIA GPUs of sysfs"))
        decided_by = env_said
        env_verdict = None          # it decided; nothing to cross-check
    else:
        keep = list(host)
        decided_by = f"sysfs lists {_addrs(host)}"
    if env_verdict is not None and value is not None and value.strip().lower() not in ("all", "none", "void", ""):
        kept = {g.pci_address for g in keep}
        wrong = [g for g in host if env_verdict[g.pci_address] is not None and
                 env_verdict[g.pci_address] != (g.pci_address in kept)]
        if wrong:
            named = sorted(a for a, v in env_verdict.items() if v)
            membership.append(_warn(
                f"{env_said} names {_addrs(named)}, but {decided_by}; numabind numbers what the device files "
                f"say ({_addrs(keep)})"))
    if nvml is not None:
        nvml_addrs = [d.pci_address for d in nvml]
        known = {g.pci_address: g for g in host}
        file_addrs = [g.pci_address for g in keep]
        if set(nvml_addrs) != set(file_addrs):
            note = _warn(f"NVML lists {_addrs(nvml_addrs)}, but {decided_by} ({_addrs(file_addrs)}); "
                         f"numabind numbers NVML's")
            membership = [note]
            keep = sorted((known[a] for a in nvml_addrs if a in known), key=lambda g: g.pci_address)
        else:
            if membership:
                log.debug("NVML confirms %s; the disagreement of the other sources is moot", _addrs(file_addrs))
            membership = []
            if nvml_addrs != file_addrs:
                membership.append(_warn(
                    f"NVML numbers the GPUs {', '.join(nvml_addrs)}; CUDA numbers them in PCI bus order "
                    f"({', '.join(file_addrs)}) under CUDA_DEVICE_ORDER=PCI_BUS_ID; numabind uses PCI bus order"))
    if env.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST") != "PCI_BUS_ID":
        # the PCI device id names the model; a name is only known where the driver's procfs or NVML told it
        by_id = all(g.device_id is not None for g in keep)
        models = {g.device_id if by_id else g.name for g in keep} - {None}
        if len(models) > 1:
            shown = sorted({g.name or (f"0x{g.device_id:04x}" if g.device_id is not None else "?")
                            for g in keep})
            order.append(_warn(
                f"GPUs of different models ({', '.join(shown)}) with CUDA_DEVICE_ORDER="
                f"{env.get('CUDA_DEVICE_ORDER', 'FASTEST_FIRST (default)')}: CUDA may number them fastest first, "
                f"numabind numbers them in PCI bus order; set CUDA_DEVICE_ORDER=PCI_BUS_ID so both agree"))
    mig = [g for g in keep if g.mig_slices or g.mig_uuids]
    if mig and len(keep) > 1:
        order.append(_warn(
            f"MIG is enabled on {_addrs(mig)} of the {len(keep)} visible GPUs: CUDA enumerates a single MIG device "
            f"per process, so which index is which GPU is the driver's choice; name the MIG device in "
            f"CUDA_VISIBLE_DEVICES (MIG-<uuid>)"))
    return _Runtime(keep, membership, order)


def _amd_runtime(reader: Any, gpus: Sequence[PciGpu], kfd: _Kfd | None) -> _Runtime:
    host = _drop_other_drivers("amd", [g for g in gpus if g.vendor == "amd"])
    membership: list[str] = []
    if kfd is not None:
        keep = sorted((g for g in host if g.kfd_node is not None), key=lambda g: g.kfd_node or 0)
        if len(keep) < len(host):
            log.debug("KFD topology: GPU agents %s of the %d AMD GPUs in sysfs (%d KFD nodes hidden from this "
                      "process, a device cgroup such as a container's)", _addrs(keep), len(host), len(kfd.hidden))
        decided_by = f"the KFD topology shows GPU agents {_addrs(keep)}"
    else:
        keep = sorted(host, key=lambda g: g.pci_address)
        decided_by = f"sysfs lists {_addrs(keep)}"
    render = _device_nodes(reader, "dev/dri", _RENDER_NODE)
    kfd_dev = _accessible(reader, "dev/kfd") if hasattr(reader, "path") and reader.exists("dev/kfd") else None
    if render is None and kfd_dev is None:
        return _Runtime(keep, membership, [])
    if not kfd_dev and keep:
        log.warning("AMD GPUs %s are present but /dev/kfd is %s: ROCm sees no GPU (a container needs "
                    "--device /dev/kfd)", _addrs(keep), "not accessible" if kfd_dev is False else "missing")
        return _Runtime([], membership, [])
    verdict = _node_verdicts(keep, lambda g: g.render_minor, render or {})
    dropped = [g for g in keep if verdict[g.pci_address] is False]
    if dropped and kfd is not None:
        open_nodes = [m for m, ok in (render or {}).items() if ok]
        membership.append(_warn(
            f"{decided_by}, but /dev/dri holds accessible render nodes {_names('renderD', open_nodes)} only: "
            f"{_addrs(dropped)} cannot be opened; numabind drops them, ROCm may fail on them instead"))
    undecided = [g for g in keep if verdict[g.pci_address] is None]
    if undecided:
        membership.append(_warn(
            f"AMD GPUs {_addrs(undecided)} have no known render node and /dev/dri holds fewer spare accessible "
            f"render nodes than them; numabind counts them all, ROCm may count fewer"))
    return _Runtime([g for g in keep if verdict[g.pci_address] is not False], membership, [])


def _flag(env: Mapping[str, str], var: str) -> tuple[bool, str]:
    """An integer flag as Intel's driver reads it (non-zero is on); ``(on, problem)``."""
    raw = env.get(var)
    if raw is None or not raw.strip():
        return False, ""
    value = ascii_int(raw, max_digits=9)
    if value is None:
        return False, (f"{var}={_said(raw)} is not a number (Intel's driver reads it as one, so it likely means "
                       f"off); use 1 or 0")
    return value != 0, ""


def _intel_runtime(reader: Any, gpus: Sequence[PciGpu], env: Mapping[str, str]) -> _Runtime:
    host = _drop_other_drivers("intel", sorted((g for g in gpus if g.vendor == "intel"),
                                               key=lambda g: g.pci_address))
    render = _device_nodes(reader, "dev/dri", _RENDER_NODE)
    keep = host
    if render is not None:
        verdict = _node_verdicts(host, lambda g: g.render_minor, render)
        keep = [g for g in host if verdict[g.pci_address] is not False]
        undecided = [g for g in host if verdict[g.pci_address] is None]
        membership = [_warn(
            f"Intel GPUs {_addrs(undecided)} have no known render node and /dev/dri holds fewer spare accessible "
            f"render nodes than them; numabind counts them all, Level Zero may count fewer")] if undecided else []
    else:
        membership = []
    pci_order, problem = _flag(env, "ZE_ENABLE_PCI_ID_DEVICE_ORDER")
    order: list[str] = []
    if problem:
        order.append(_warn(problem))
    if not pci_order:
        keep = [g for g in keep if not g.integrated] + [g for g in keep if g.integrated]
        if any(g.integrated for g in keep) and not all(g.integrated for g in keep):
            order.append(_warn(
                f"integrated and discrete Intel GPUs are visible ({_addrs(keep)}): their order is the driver's "
                f"choice; numabind puts the integrated one last; set ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 "
                f"for PCI bus order"))
    return _Runtime(keep, membership, order)


def _ascend_env_ids(value: str, count: int) -> list[int] | None:
    """Host physical ids ``ASCEND_VISIBLE_DEVICES`` names (``0,3``, ``0-2,4``), below ``count``;
    None when an entry is not an id or a range (a processor name such as ``Ascend910-0``)."""
    ids: set[int] = set()
    for raw in value.split(","):
        entry = raw.strip()
        head, dash, tail = entry.partition("-")
        first = ascii_int(head, max_digits=_INDEX_DIGITS) if head.isascii() and head.isdigit() else None
        last = (ascii_int(tail, max_digits=_INDEX_DIGITS) if tail.isascii() and tail.isdigit() else None) \
            if dash else first
        if first is None or last is None or last < first:
            return None
        ids.update(range(first, min(last, count - 1) + 1))
    return sorted(ids)


def _ascend_runtime(reader: Any, gpus: Sequence[PciGpu], env: Mapping[str, str], container_env: bool) -> _Runtime:
    """The NPUs CANN numbers, in its logical order, each with ``minor`` = its physical id (davinci N)."""
    host = _drop_other_drivers("ascend", sorted((g for g in gpus if g.vendor == "ascend"),
                                                key=lambda g: g.pci_address))
    membership: list[str] = []
    order: list[str] = []
    dev = _device_nodes(reader, "dev", _DAVINCI_NODE)
    if dev is not None:
        opened = sorted(n for n, ok in dev.items() if ok)
        stray = [n for n in opened if n >= len(host)]
        if stray:
            membership.append(_warn(
                f"/dev holds accessible NPU device nodes {_names('davinci', stray)}, but sysfs lists "
                f"{len(host)} Ascend NPUs ({_addrs(host)}); numabind drops those nodes"))
        keep = [host[n].replace(minor=n) for n in opened if n < len(host)]
        manager = _accessible(reader, "dev/davinci_manager") if reader.exists("dev/davinci_manager") else None
        if keep and not manager:
            membership.append(_warn(
                f"Ascend NPUs {_names('davinci', opened)} are accessible but /dev/davinci_manager is "
                f"{'not accessible' if manager is False else 'missing'}: CANN may see no NPU (a container needs "
                f"--device /dev/davinci_manager, /dev/devmm_svm and /dev/hisi_hdc)"))
    else:
        value = env.get("ASCEND_VISIBLE_DEVICES") if container_env else None
        word = value.strip().lower() if value is not None else None
        if word is None:
            keep = [g.replace(minor=k) for k, g in enumerate(host)]
        elif word in ("", "void"):
            keep = []
        else:
            ids = _ascend_env_ids(word, len(host))
            if ids is None:
                keep = [g.replace(minor=k) for k, g in enumerate(host)]
                membership.append(_warn(
                    f"ASCEND_VISIBLE_DEVICES={_said(value or '')} names devices numabind cannot resolve without "
                    f"/dev/davinci* nodes; numabind counts all {len(host)} Ascend NPUs of sysfs"))
            else:
                keep = [host[k].replace(minor=k) for k in ids]
    placements = {(g.firmware_node, g.local_cpus) for g in host}
    if len(placements) > 1:
        order.append(_warn(
            f"numabind cannot tell which PCI function each /dev/davinci<N> is (the driver gives the nodes no sysfs "
            f"parent and does not number the NPUs in PCI bus order on every server); it pairs physical id k with "
            f"the k-th NPU in PCI bus order (NPUs: {_addrs(host)}), and these are not all on one NUMA node"))
    return _Runtime(keep, membership, order)


def _ascend_select(devices: Sequence[PciGpu], env: Mapping[str, str]) -> tuple[list[_Pick], list[str], list[str]]:
    """``ASCEND_RT_VISIBLE_DEVICES`` as CANN reads it: ``(picks, notes, doubts)``."""
    var = "ASCEND_RT_VISIBLE_DEVICES"
    count = len(devices)
    value = env.get(var)
    if value is None or value == "":
        return [_Pick(k, None, False) for k in range(count)], [], []
    chosen: list[_Pick] = []
    for raw in value.split(","):
        k = ascii_int(raw, max_digits=_INDEX_DIGITS) if raw.isascii() and raw.isdigit() else None
        if k is None or k >= count:
            why = "is not a device id" if k is None else f"names no device ({count} devices)"
            note = f"{var}: entry {_said(raw)} {why}; CANN reads only the ids before it, and so does numabind"
            log.warning("%s", note)
            return chosen, [note], []
        if chosen and k <= chosen[-1].pos:
            note = _warn(f"{var}: entry {k} is not larger than the one before it; CANN supports ascending lists "
                         f"only; numabind reads the ids before it")
            return chosen, [note], [note]
        chosen.append(_Pick(k, None, False))
    return chosen, [], []


# -------------------------------------------------------------- visibility
def _match_uuid(entry: str, uuids: Sequence[str | None]) -> int | None:
    want = entry.lower()
    hits = [k for k, u in enumerate(uuids) if u and u.lower().startswith(want)]
    return hits[0] if len(hits) == 1 else None


class _Pick(Value):
    __slots__ = ("pos", "mig_uuid", "named")

    def __init__(self, pos: int, mig_uuid: str | None, named: bool) -> None:
        object.__setattr__(self, "pos", pos)
        object.__setattr__(self, "mig_uuid", mig_uuid)
        object.__setattr__(self, "named", named)

    pos: int                    # position in the runtime's list
    mig_uuid: str | None
    named: bool                 # selected by UUID: its identity does not depend on numbering


def _parse_entries(value: str, count: int, uuids: Sequence[str | None],
                   mig: Mapping[str, int], var: str) -> tuple[list[_Pick], str]:
    """CUDA-style list: indices, GPU-uuid prefixes, MIG ids; the first bad entry ends it."""
    chosen: list[_Pick] = []
    for raw in value.split(","):
        entry = raw.strip()
        pick: _Pick | None = None
        if entry.isascii() and entry.isdigit():
            k = ascii_int(entry, max_digits=_INDEX_DIGITS)
            if k is None:
                why = f"is not a valid index (more than {_INDEX_DIGITS} digits)"
            else:
                pick = _Pick(k, None, False) if k < count else None
                why = f"index {k} is out of range ({count} devices)"
        elif entry.upper().startswith("MIG-GPU-"):
            parent_uuid = entry[4:].split("/", 1)[0]
            k = _match_uuid(parent_uuid, uuids)
            pick = _Pick(k, entry, True) if k is not None else None
            why = "names no known parent GPU"
        elif entry.upper().startswith("MIG-"):
            keys = [m for m in mig if m.lower().startswith(entry.lower())]
            pick = _Pick(mig[keys[0]], keys[0], True) if len(keys) == 1 else None
            why = ("is ambiguous" if keys else
                   "names no known MIG instance" + ("" if mig else " (MIG UUIDs need NVML: pip install nvidia-ml-py)"))
        elif entry.upper().startswith("GPU-"):
            k = _match_uuid(entry, uuids)
            pick = _Pick(k, None, True) if k is not None else None
            why = "matches no GPU UUID or more than one"
            if not any(uuids):
                why += " (UUIDs come from the driver's /proc/driver/nvidia or NVML; neither is readable)"
        else:
            why = "is not an index or a UUID"
        if pick is not None and any((p.pos, p.mig_uuid) == (pick.pos, pick.mig_uuid) for p in chosen):
            pick, why = None, "repeats an earlier device"
        if pick is None:
            note = f"{var}: entry {_said(entry)} {why}; it and the entries after it are ignored"
            log.warning("%s", note)
            return chosen, note
        chosen.append(pick)
    return chosen, ""


def _select(vendor: str, devices: Sequence[PciGpu], env: Mapping[str, str]) -> tuple[list[_Pick], list[str]]:
    count = len(devices)
    everything = [_Pick(k, None, False) for k in range(count)]
    notes: list[str] = []
    if vendor == "nvidia":
        value = env.get("CUDA_VISIBLE_DEVICES")
        if value is None:
            return everything, notes
        mig = {m: k for k, d in enumerate(devices) for m in d.mig_uuids}
        chosen, note = _parse_entries(value, count, [d.uuid for d in devices], mig, "CUDA_VISIBLE_DEVICES")
        notes += [note] if note else []
        return chosen, notes
    if vendor == "amd":
        chosen = everything
        rocr = env.get("ROCR_VISIBLE_DEVICES")
        if rocr is not None:
            chosen, note = _parse_entries(rocr, count, [d.uuid for d in devices], {}, "ROCR_VISIBLE_DEVICES")
            notes += [note] if note else []
        var = "HIP_VISIBLE_DEVICES" if "HIP_VISIBLE_DEVICES" in env else "CUDA_VISIBLE_DEVICES"
        hip = env.get(var)
        if hip is not None:
            sub = [devices[p.pos] for p in chosen]
            inner, note = _parse_entries(hip, len(sub), [d.uuid for d in sub], {}, var)
            notes += [note] if note else []
            chosen = [chosen[p.pos].replace(named=chosen[p.pos].named or p.named) for p in inner]
        return chosen, notes
    value = env.get("ZE_AFFINITY_MASK")
    if not value or not value.strip():
        return everything, notes
    keep = set()
    for raw in value.split(","):
        head = raw.strip().split(".", 1)[0]
        k = ascii_int(head, max_digits=_INDEX_DIGITS) if head.isascii() and head.isdigit() else None
        if k is not None and k < count:
            keep.add(k)
        else:
            note = f"ZE_AFFINITY_MASK: entry {_said(raw.strip())} names no device ({count} devices); skipped"
            log.warning("%s", note)
            notes.append(note)
    return [_Pick(k, None, False) for k in sorted(keep)], notes


def select_visible(vendor: str, devices: Sequence[PciGpu], env: Mapping[str, str]
                   ) -> tuple[list[tuple[int, str | None]], list[str]]:
    """Positions (into ``devices``, the runtime's order) the visibility variables keep, in visible order.

    Returns ``([(position, mig_uuid_or_None), ...], notes)``.
    """
    if vendor == "ascend":
        picks, notes, _doubts = _ascend_select(devices, env)
    else:
        picks, notes = _select(vendor, devices, env)
    return [(p.pos, p.mig_uuid) for p in picks], notes


def _runtime_vendor(gpus: Sequence[PciGpu], wanted: str | None) -> str | None:
    if wanted:
        if wanted not in _VENDOR_ORDER:
            raise PlanError(f"GPU vendor {wanted!r} is not one of {', '.join(_VENDOR_ORDER)}")
        return wanted
    present = {g.vendor for g in gpus}
    discrete = {g.vendor for g in gpus if not g.integrated}
    for pool in (discrete, present):
        for v in _VENDOR_ORDER:
            if v in pool:
                return v
    return None


_FIXES = {
    "nvidia": "set CUDA_VISIBLE_DEVICES to GPU UUIDs (nvidia-smi -L) or pass an explicit node per GPU",
    "amd": "set ROCR_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES to GPU UUIDs (rocm-smi --showuniqueid) or pass an "
           "explicit node per GPU",
    "intel": "set ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 or pass an explicit node per GPU",
    "ascend": "pass an explicit NUMA node per NPU (npu-smi info -t topo prints each NPU's CPU affinity)",
}


def discover_gpus(reader: Any, nodes: Mapping[int, Any], env: Mapping[str, str] | None = None, *,
                  vendor: str | None = None, use_nvml: bool | None = None) -> tuple[Gpu, ...]:
    """Visible accelerators under ``reader``'s root, in visible-index order.

    ``nodes`` is the discovered ``{id: Node}`` mapping (used to place GPUs whose
    firmware reports ``numa_node = -1``); ``env`` defaults to ``os.environ``
    (``NVIDIA_VISIBLE_DEVICES`` and ``ASCEND_VISIBLE_DEVICES``, which describe
    the calling process's own container, are then read for the live root
    only). ``vendor`` (default ``$NUMABIND_GPU_VENDOR``, else the first of
    nvidia, amd, intel, ascend present)
    picks whose runtime numbers the devices. ``use_nvml`` defaults to "only
    for the live root".
    """
    container_env = env is not None or bool(getattr(reader, "is_live", False))
    env = os.environ if env is None else env
    procfs = _nvidia_procfs(reader)
    kfd = _kfd(reader)
    gpus = _amd_kfd(_nvidia_proc(reader, scan_pci_gpus(reader), procfs), kfd)
    if use_nvml is None:
        use_nvml = bool(getattr(reader, "is_live", False)) and any(g.vendor == "nvidia" for g in gpus)
    nvml_devices = None
    if use_nvml:
        from . import _nvml

        nvml_devices = _nvml.probe()
        if nvml_devices is not None:
            gpus = _with_nvml(gpus, nvml_devices)
    if vendor is None:
        vendor = (env.get("NUMABIND_GPU_VENDOR") or "").strip().lower() or None
        if vendor is not None and vendor not in _VENDOR_ORDER:
            log.warning("NUMABIND_GPU_VENDOR=%s is not one of %s; ignored", _said(vendor), ", ".join(_VENDOR_ORDER))
            vendor = None
    chosen_vendor = _runtime_vendor(gpus, vendor)
    if chosen_vendor is None:
        return ()
    if chosen_vendor == "nvidia":
        runtime = _nvidia_runtime(reader, gpus, env, container_env, procfs, nvml_devices)
    elif chosen_vendor == "amd":
        runtime = _amd_runtime(reader, gpus, kfd)
    elif chosen_vendor == "ascend":
        runtime = _ascend_runtime(reader, gpus, env, container_env)
    else:
        runtime = _intel_runtime(reader, gpus, env)
    physical = runtime.gpus
    doubt = runtime.membership + runtime.order
    if len(physical) > 1 and not getattr(reader, "is_live", True):
        from ._hwloc_xml import gpu_order_note     # an hwloc XML root: how its GPUs are ordered, if unsure

        xml_note = gpu_order_note(reader, chosen_vendor)
        if xml_note:
            doubt.append(xml_note)
    if chosen_vendor == "ascend":
        picks, _notes, order_doubts = _ascend_select(physical, env)
        doubt += order_doubts
    else:
        picks, _notes = _select(chosen_vendor, physical, env)
    note = "; ".join(doubt + [_FIXES[chosen_vendor]]) if doubt else ""
    out = []
    for index, pick in enumerate(picks):
        g = physical[pick.pos]
        node, source, numa_note = place_numa_node(g, nodes)
        if node is None:
            log.warning("GPU %d (%s): NUMA node unknown: %s", index, g.pci_address, numa_note)
        certain = not doubt or pick.named
        out.append(Gpu(
            index=index,
            pci_address=g.pci_address,
            vendor=g.vendor,
            numa_node=node,
            local_cpus=g.local_cpus,
            uuid=g.uuid,
            name=g.name,
            minor=g.minor,
            integrated=g.integrated,
            numa_source=source,
            numa_note=numa_note,
            device_id=g.device_id,
            physical_index=pick.pos,
            mig_uuid=pick.mig_uuid,
            identity="certain" if certain else "uncertain",
            identity_note="" if certain else note,
        ))
    log.debug("GPUs (%s runtime): %s", chosen_vendor, "; ".join(g.describe() for g in out) or "none visible")
    return tuple(out)


# ------------------------------------------- a command's GPUs (numabind run --gpus)
#: The variables that say which GPUs a command sees, by vendor: the ones :func:`visibility_environ` sets.
#: ROCm reads ``ROCR_VISIBLE_DEVICES`` first (the ROCr runtime enumerates only those agents, for HIP,
#: OpenCL and OpenMP offload alike); HIP's ``HIP_VISIBLE_DEVICES`` then indexes into what ROCr left.
VISIBILITY_VARIABLES = {"nvidia": ("CUDA_VISIBLE_DEVICES",), "amd": ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"),
                        "intel": ("ZE_AFFINITY_MASK",), "ascend": ("ASCEND_RT_VISIBLE_DEVICES",)}
#: Most GPUs one list may name (a range such as ``0-999999999`` is refused, never expanded).
MAX_LISTED_GPUS = 4096


def gpu_list_entries(spec: str) -> list[str | int]:
    """The entries of a GPU list (``numabind run --gpus``): visible indices (``A-B`` ranges expanded), UUIDs
    (``GPU-...``, or a unique prefix; ``MIG-...``) and PCI addresses (``0000:1b:00.0``, ``1b:00.0``), comma
    separated, in the list's order. Indices are ints, the rest strings (PCI addresses as sysfs spells them).
    What does not parse is a :class:`PlanError` naming the entry (whatever the machine)."""
    out: list[str | int] = []
    for raw in spec.split(","):
        entry = raw.strip()
        lo, dash, hi = entry.partition("-")
        if entry.isascii() and entry.isdigit():
            k = ascii_int(entry, max_digits=_INDEX_DIGITS)
            if k is None:
                raise PlanError(f"GPU list {_said(spec)}: index {_said(entry)} has more than {_INDEX_DIGITS} digits")
            out.append(k)
        elif dash and lo.isascii() and lo.isdigit() and hi.isascii() and hi.isdigit():
            a, b = ascii_int(lo, max_digits=_INDEX_DIGITS), ascii_int(hi, max_digits=_INDEX_DIGITS)
            if a is None or b is None or a > b or b - a >= MAX_LISTED_GPUS:
                raise PlanError(f"GPU list {_said(spec)}: range {_said(entry)} is not A-B with A <= B "
                                f"(at most {MAX_LISTED_GPUS} GPUs)")
            out.extend(range(a, b + 1))
        elif entry.upper().startswith(("GPU-", "MIG-")) and len(entry) > 4:
            out.append(entry)
        elif _normal_bdf(entry) is not None:
            out.append(_normal_bdf(entry) or entry)
        elif _bdf("0000:" + entry.lower()) is not None:   # bus:device.function
            out.append("0000:" + entry.lower())
        else:
            raise PlanError(f"GPU list {_said(spec)}: entry {_said(entry)} is not a visible index, a UUID "
                            f"(GPU-...) or a PCI address (0000:1b:00.0)" if entry else
                            f"GPU list {_said(spec)} has an empty entry: give GPUs separated by commas, e.g. 4,5")
        if len(out) > MAX_LISTED_GPUS:
            raise PlanError(f"GPU list {_said(spec)} names more than {MAX_LISTED_GPUS} GPUs")
    return out


def pick_gpus(spec: str, gpus: Sequence[Gpu], others: Sequence[PciGpu] = ()) -> tuple[list[Gpu], frozenset[int]]:
    """The visible GPUs (``gpus``, :attr:`Topology.gpus`) a list names (:func:`gpu_list_entries`), in the list's
    order, and the indices of those named by UUID. ``others`` are the machine's PCI GPUs (:func:`scan_pci_gpus`):
    a PCI address of another vendor's GPU is refused as a list of mixed vendors, naming the fix. Raises
    :class:`PlanError` naming the entry that names no visible GPU, or a GPU named twice."""
    chosen: list[Gpu] = []
    named: set[int] = set()
    vendors = sorted({g.vendor for g in gpus})
    for entry in gpu_list_entries(spec):
        if isinstance(entry, int):
            hit = [g for g in gpus if g.index == entry]
            why = f"visible GPU index {entry} is out of range ({len(gpus)} visible: {_visible_range(gpus)})"
        elif entry.upper().startswith("MIG-"):
            hit = [g for g in gpus if g.mig_uuid and g.mig_uuid.lower().startswith(entry.lower())]
            why = f"{_said(entry)} names no visible MIG device, or more than one"
        elif entry.upper().startswith("GPU-"):
            hit = [g for g in gpus if g.uuid and g.uuid.lower().startswith(entry.lower())]
            why = f"{_said(entry)} matches no visible GPU's UUID, or more than one"
        else:
            hit = [g for g in gpus if g.pci_address == entry]
            other = next((p for p in others if p.pci_address == entry), None)
            if not hit and other is not None and vendors and other.vendor not in vendors:
                raise PlanError(
                    f"GPU list {_said(spec)} mixes vendors: {entry} is an {other.vendor} GPU, the visible GPUs are "
                    f"{vendors[0]}'s; one command sees the GPUs of one runtime: list GPUs of one vendor "
                    f"(NUMABIND_GPU_VENDOR={other.vendor} numbers {other.vendor}'s)")
            why = f"{entry} is not the PCI address of a visible GPU"
        if len(hit) != 1:
            raise PlanError(f"GPU list {_said(spec)}: {why} (numabind plan lists them)")
        g = hit[0]
        if any(c.index == g.index for c in chosen):
            raise PlanError(f"GPU list {_said(spec)} names GPU {g.index} ({g.pci_address}) twice: name it once")
        chosen.append(g)
        if not isinstance(entry, int) and entry.upper().startswith("GPU-"):
            named.add(g.index)
    if not chosen:
        raise PlanError(f"GPU list {_said(spec)} names no GPU")
    return chosen, frozenset(named)


def _visible_range(gpus: Sequence[Gpu]) -> str:
    return f"0-{len(gpus) - 1}" if gpus else "none"


def _entries(value: str) -> list[str]:
    """A visibility variable's entries as the runtimes split them (:func:`_parse_entries`)."""
    return [raw.strip() for raw in value.split(",")]


def _naming(entries: Sequence[str], g: Gpu) -> str | None:
    """The entry of a filtering variable (ROCR_VISIBLE_DEVICES, in physical terms) that names ``g``."""
    for e in entries:
        if e.isascii() and e.isdigit() and ascii_int(e, max_digits=_INDEX_DIGITS) == g.physical_index:
            return e
        if e.upper().startswith("GPU-") and g.uuid and g.uuid.lower().startswith(e.lower()):
            return e
    return None


def visibility_environ(chosen: Sequence[Gpu], env: Mapping[str, str], named: Collection[int] = ()
                       ) -> dict[str, str]:
    """The variables that make a command see exactly ``chosen`` (visible GPUs of one vendor, as discovered under
    ``env``), composed with what ``env`` already says.

    * NVIDIA: ``CUDA_VISIBLE_DEVICES``. Set in ``env``: the entry it has for each GPU (under ``8,9,10,11``,
      visible GPUs 1 and 2 are ``9,10``; UUID and MIG entries stay UUIDs); unset: the GPU's index (its UUID
      when the list named it by UUID). In the list's order: the command's GPU 0 is the first listed.
    * AMD: ``ROCR_VISIBLE_DEVICES``, which ROCm reads first (entries of the one ``env`` has, else indices or
      UUIDs as for NVIDIA), in the list's order; when ``HIP_VISIBLE_DEVICES`` (or ``CUDA_VISIBLE_DEVICES``,
      HIP's fallback) is set, its indices would index into the new list, so ``HIP_VISIBLE_DEVICES`` becomes
      ``0,1,...``.
    * Intel: ``ZE_AFFINITY_MASK``: the entries of the one ``env`` has for those devices (``N.sub`` entries
      kept), else the device numbers; Level Zero never reorders, so the command's order is device order.
    * Ascend: ``ASCEND_RT_VISIBLE_DEVICES``: the logical ids, ascending (CANN reads ascending lists only).

    Raises :class:`PlanError` for GPUs of several vendors."""
    vendors = sorted({g.vendor for g in chosen})
    if len(vendors) != 1:
        raise PlanError(f"the GPUs of one command are of one vendor, got {', '.join(vendors) or 'none'}")
    vendor = vendors[0]

    def own(g: Gpu) -> str:
        pos = g.index if g.physical_index is None else g.physical_index
        return g.uuid if g.index in named and g.uuid else str(pos)

    if vendor == "nvidia":
        parent = env.get("CUDA_VISIBLE_DEVICES")
        if parent is None:
            return {"CUDA_VISIBLE_DEVICES": ",".join(own(g) for g in chosen)}
        listed = _entries(parent)
        return {"CUDA_VISIBLE_DEVICES": ",".join(listed[g.index] if g.index < len(listed) else own(g) for g in chosen)}
    if vendor == "amd":
        rocr = env.get("ROCR_VISIBLE_DEVICES")
        values = []
        for g in chosen:
            entry = _naming(_entries(rocr), g) if rocr is not None else None
            values.append(entry if entry is not None else own(g))
        out = {"ROCR_VISIBLE_DEVICES": ",".join(values)}
        if "HIP_VISIBLE_DEVICES" in env or "CUDA_VISIBLE_DEVICES" in env:
            out["HIP_VISIBLE_DEVICES"] = ",".join(str(k) for k in range(len(chosen)))
        return out
    positions = sorted(g.index if g.physical_index is None else g.physical_index for g in chosen)
    if vendor == "intel":
        mask = env.get("ZE_AFFINITY_MASK")
        if mask and mask.strip():
            kept: list[str] = []
            for e in _entries(mask):
                head = e.split(".", 1)[0]
                k = ascii_int(head, max_digits=_INDEX_DIGITS) if head.isascii() and head.isdigit() else None
                if k in positions and e not in kept:
                    kept.append(e)
            return {"ZE_AFFINITY_MASK": ",".join(kept)}
        return {"ZE_AFFINITY_MASK": ",".join(map(str, positions))}
    return {"ASCEND_RT_VISIBLE_DEVICES": ",".join(map(str, positions))}
