"""The values of GPU discovery: an accelerator as a worker process sees it (:class:`Gpu`) and as sysfs lists it
(:class:`PciGpu`)."""

from __future__ import annotations

from .._base import Value
from ..cpulist import format_cpulist

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the looks' start)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

__all__ = ["IDENTITIES", "Gpu", "PciGpu", "Pick", "Runtime"]

#: Values of :attr:`Gpu.identity`.
IDENTITIES = ("certain", "uncertain")
#: The keys of :meth:`Gpu.to_dict`, in its order.
_DICT_KEYS = ("index", "pci_address", "vendor", "numa_node", "numa_source", "numa_note", "local_cpus", "uuid", "name",
              "minor", "integrated", "device_id", "physical_index", "mig_uuid", "identity", "identity_note")


class Gpu(Value):
    """One accelerator as a worker process sees it.

    ``numa_source`` says how ``numa_node`` was found (``"numa_node"``, ``"local_cpulist"``, ``"single-node"``,
    ``"nvml"`` or ``"unknown"``, then ``numa_note`` says why). ``physical_index`` is its number in its runtime with no
    visibility variable set; ``mig_uuid`` is set for a MIG instance; ``identity`` says whether numabind is sure which
    board this index is (``identity_note``: why not, and the fix). ``gpu.replace(index=1)`` is a changed copy."""

    index: int                      # visible index (after CUDA_VISIBLE_DEVICES & co.)
    pci_address: str                # "0000:1b:00.0"
    vendor: str                     # "nvidia" | "amd" | "intel" | "ascend"
    numa_node: int | None           # None when the firmware reports -1 and nothing else places it
    local_cpus: frozenset[int] = frozenset()
    uuid: str | None = None
    name: str | None = None
    minor: int | None = None
    integrated: bool = False
    numa_source: str = "numa_node"
    numa_note: str = ""
    device_id: int | None = None
    physical_index: int | None = None
    mig_uuid: str | None = None
    identity: str = "certain"
    identity_note: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "local_cpus", frozenset(self.local_cpus))

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
        out = {name: getattr(self, name) for name in _DICT_KEYS}
        out["local_cpus"] = format_cpulist(self.local_cpus)
        out["device_id"] = f"0x{self.device_id:04x}" if self.device_id is not None else None
        return out


class PciGpu(Value):
    """A GPU as sysfs lists it, before numbering (internal record, public for tests)."""

    pci_address: str
    vendor: str
    pci_class: int
    device_id: int | None
    firmware_node: int | None       # numa_node as read; None when missing or unparsable
    local_cpus: frozenset[int]
    integrated: bool = False
    uuid: str | None = None
    name: str | None = None
    minor: int | None = None        # NVIDIA device minor, AMD render minor, Ascend physical id (davinci<N>)
    kfd_node: int | None = None
    mig_uuids: tuple[str, ...] = ()
    nvml_memory_nodes: frozenset[int] | None = None
    driver: str | None = None       # kernel driver bound to it (basename of its driver link)
    render_minor: int | None = None  # N of its /dev/dri/renderDN (AMD, Intel)
    mig_slices: int = 0             # MIG GPU instances procfs lists for it (NVIDIA)

    def __post_init__(self) -> None:
        object.__setattr__(self, "local_cpus", frozenset(self.local_cpus))
        object.__setattr__(self, "mig_uuids", tuple(self.mig_uuids))
        if self.nvml_memory_nodes is not None:
            object.__setattr__(self, "nvml_memory_nodes", frozenset(self.nvml_memory_nodes))


#: What a vendor's runtime numbers: its devices in its order, why that set may be wrong (sources disagree), why
#: the order may be wrong.
Runtime = tuple[list[PciGpu], list[str], list[str]]
#: A device a visibility variable keeps: its position in the runtime's list, the MIG instance named, and whether
#: it was named by UUID (then its identity does not depend on numbering).
Pick = tuple[int, str | None, bool]
