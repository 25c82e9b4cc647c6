"""AMD GPUs: what the KFD topology says of them, and which of them ROCm numbers, in which order
(``docs/gpus.rst``).
"""

from __future__ import annotations

from .._base import excerpt, getLogger
from .._fs import ascii_int
from .sysfs import RENDER_NODE, accessible, addrs, device_nodes, drop_other_drivers, kept, names, node_verdicts, warn
from .values import PciGpu, Runtime

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the looks' start)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence
    from typing import Any

log = getLogger(__name__)

__all__ = ["Kfd", "amd_runtime", "read_kfd", "with_kfd"]

_KFD_NODES = "sys/class/kfd/kfd/topology/nodes"
#: Read cap for a KFD node's ``properties`` (bytes).
_INFO_LIMIT = 16384


#: The KFD topology: its GPU agents (pci address -> (node id, properties, name)) and the node ids whose properties
#: this process cannot read.
Kfd = tuple[dict[str, tuple[int, dict[str, int], str | None]], list[int]]


def _properties(text: str) -> dict[str, int]:
    """``name value`` lines of a KFD ``properties`` file; values as bounded ASCII decimals."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isascii():
            value = ascii_int(parts[1], max_digits=20)
            if value is not None:
                out[parts[0]] = value
    return out


def read_kfd(reader: Any) -> Kfd | None:
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
        props = _properties(text)
        if not props.get("simd_count"):
            continue  # a CPU agent
        loc = props.get("location_id")
        if loc is None:
            continue
        addr = f"{props.get('domain', 0) & 0xFFFF:04x}:{loc >> 8 & 0xFF:02x}:{loc >> 3 & 0x1F:02x}.{loc & 7:x}"
        name = reader.read(f"{_KFD_NODES}/{nid}/name", 256)
        agents[addr] = (nid, props, kept(name.strip()) if name else None)
    return agents, hidden


def with_kfd(gpus: list[PciGpu], kfd: Kfd | None) -> list[PciGpu]:
    """``gpus`` with what the KFD topology says of its AMD GPUs: node, UUID, name, render minor."""
    out = []
    for g in gpus:
        hit = kfd[0].get(g.pci_address) if kfd is not None and g.vendor == "amd" else None
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


def amd_runtime(reader: Any, gpus: Sequence[PciGpu], kfd: Kfd | None) -> Runtime:
    """The AMD GPUs ROCm numbers, in its order, with the doubts about that set."""
    host = drop_other_drivers("amd", gpus)
    membership: list[str] = []
    if kfd is not None:
        keep = sorted((g for g in host if g.kfd_node is not None), key=lambda g: g.kfd_node or 0)
        if len(keep) < len(host):
            log.debug("KFD topology: GPU agents %s of the %d AMD GPUs in sysfs (%d KFD nodes hidden from this "
                      "process, a device cgroup such as a container's)", addrs(keep), len(host), len(kfd[1]))
        decided_by = f"the KFD topology shows GPU agents {addrs(keep)}"
    else:
        keep = host
        decided_by = f"sysfs lists {addrs(keep)}"
    render = device_nodes(reader, "dev/dri", RENDER_NODE)
    kfd_dev = accessible(reader, "dev/kfd") if hasattr(reader, "path") and reader.exists("dev/kfd") else None
    if render is None and kfd_dev is None:
        return keep, membership, []
    if not kfd_dev and keep:
        log.warning("AMD GPUs %s are present but /dev/kfd is %s: ROCm sees no GPU (a container needs "
                    "--device /dev/kfd)", addrs(keep), "not accessible" if kfd_dev is False else "missing")
        return [], membership, []
    verdict = node_verdicts(keep, lambda g: g.render_minor, render or {})
    dropped = [g for g in keep if verdict[g.pci_address] is False]
    if dropped and kfd is not None:
        open_nodes = [m for m, ok in (render or {}).items() if ok]
        membership.append(warn(
            f"{decided_by}, but /dev/dri holds accessible render nodes {names(RENDER_NODE, open_nodes)} only: "
            f"{addrs(dropped)} cannot be opened; numabind drops them, ROCm may fail on them instead"))
    undecided = [g for g in keep if verdict[g.pci_address] is None]
    if undecided:
        membership.append(warn(
            f"AMD GPUs {addrs(undecided)} have no known render node and /dev/dri holds fewer spare accessible "
            f"render nodes than them; numabind counts them all, ROCm may count fewer"))
    return [g for g in keep if verdict[g.pci_address] is not False], membership, []
