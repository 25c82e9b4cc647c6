"""NVIDIA GPUs: what the driver's procfs says of them, and which of them CUDA numbers, in which order
(``docs/gpus.rst``).
"""

from __future__ import annotations

from .._base import excerpt, getLogger, printable
from .._fs import ascii_int, key_values
from .sysfs import (addrs, device_nodes, drop_other_drivers, index, kept, names, node_verdicts, normal_bdf, said,
                    warn)
from .values import PciGpu, Runtime
from .visibility import match_uuid

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the looks' start)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping, Sequence
    from typing import Any

log = getLogger(__name__)

__all__ = ["nvidia_procfs", "nvidia_runtime", "parse_nvidia_information", "with_procfs"]

_NV_PROC = "proc/driver/nvidia/gpus"
_NV_CAPS = "proc/driver/nvidia/capabilities"
#: Device file names ``nvidia<N>`` (``/dev``).
_NV_NODE = "nvidia"
#: Read cap for the driver's small files (bytes).
_INFO_LIMIT = 16384


def parse_nvidia_information(text: str) -> dict[str, str]:
    """``Key: value`` lines of ``proc/driver/nvidia/gpus/*/information``."""
    return key_values(text)


def nvidia_procfs(reader: Any) -> dict[str, str] | None:
    """``{pci address: directory name}`` of ``proc/driver/nvidia/gpus``; None when it lists nothing."""
    listed = {}
    for name in reader.listdir(_NV_PROC):
        addr = normal_bdf(name)
        if addr is not None:
            listed[addr] = name
    return listed or None


def with_procfs(reader: Any, gpus: list[PciGpu], listed: Mapping[str, str] | None) -> list[PciGpu]:
    """``gpus`` with what the driver's procfs says of its NVIDIA GPUs: UUID, model, minor, MIG instances."""
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
                    uuid=kept(info.get("GPU UUID")) or g.uuid,
                    name=kept(info.get("Model")) or g.name,
                    minor=minor if minor is not None else g.minor,
                )
        if g.vendor == "nvidia" and g.minor is not None:
            slices = [n for n in reader.listdir(f"{_NV_CAPS}/gpu{g.minor}/mig")
                      if n.startswith("gi") and ascii_int(n[2:], max_digits=6) is not None]
            if slices:
                g = g.replace(mig_slices=len(slices))
        out.append(g)
    return out


def _env_verdict(value: str, reader: Any, host: Sequence[PciGpu]) -> tuple[dict[str, bool | None], str]:
    """What ``NVIDIA_VISIBLE_DEVICES`` says about each host GPU, and that in words."""
    entries: list[str]
    if value.startswith("/"):
        # the device plugin's volume-mounts strategy: one entry per device under this directory
        parts = value.strip("/").split("/")
        entries = [] if ".." in parts else [printable(e) for e in reader.listdir("/".join(parts))[:1024]]
        shown = f"NVIDIA_VISIBLE_DEVICES={said(value)} lists {', '.join(entries) or 'no device'}"
    else:
        entries = [e.strip() for e in value.split(",") if e.strip()]
        shown = f"NVIDIA_VISIBLE_DEVICES={said(value)}"
    chosen: set[str] = set()
    unresolved: list[str] = []
    uuids = [g.uuid for g in host]
    for raw in entries:
        entry = raw.rpartition("=")[2].strip()        # CDI-style "nvidia.com/gpu=4"
        pos: int | None = None
        if entry.lower() == "all":
            return {g.pci_address: True for g in host}, shown
        head = entry.split(":", 1)[0]                 # "<gpu>:<mig>" names the parent GPU
        if head.isascii() and head.isdigit():
            k = index(head)
            pos = k if k is not None and k < len(host) else None
        elif entry.upper().startswith("MIG-GPU-"):
            pos = match_uuid(entry[4:].split("/", 1)[0], uuids)
        elif entry.upper().startswith("MIG-"):
            hits = [i for i, g in enumerate(host) if any(m.lower().startswith(entry.lower()) for m in g.mig_uuids)]
            pos = hits[0] if len(hits) == 1 else None
        elif entry.upper().startswith("GPU-"):
            pos = match_uuid(entry, uuids)
        if pos is None:
            unresolved.append(entry)
        else:
            chosen.add(host[pos].pci_address)
    if unresolved:
        log.debug("NVIDIA_VISIBLE_DEVICES: cannot resolve %s here", ", ".join(said(e) for e in unresolved[:4]))
        return {g.pci_address: (True if g.pci_address in chosen else None) for g in host}, shown
    return {g.pci_address: g.pci_address in chosen for g in host}, shown


def nvidia_runtime(reader: Any, gpus: Sequence[PciGpu], env: Mapping[str, str], container_env: bool,
                   procfs: Mapping[str, str] | None, nvml: Sequence[Any] | None) -> Runtime:
    """The NVIDIA GPUs CUDA numbers, in PCI bus order, with the doubts about that set and order."""
    host = drop_other_drivers("nvidia", gpus)
    membership: list[str] = []
    order: list[str] = []
    dev = device_nodes(reader, "dev", _NV_NODE)
    value = env.get("NVIDIA_VISIBLE_DEVICES") if container_env else None
    env_verdict: dict[str, bool | None] | None = None
    env_said = ""
    if value is not None:
        env_verdict, env_said = _env_verdict(value.strip(), reader, host)
    listed = set(procfs or ())
    if dev is not None:
        verdict = node_verdicts(host, lambda g: g.minor, dev)
        keep = [g for g in host if verdict[g.pci_address] is not False]
        open_nodes = [m for m, ok in dev.items() if ok]
        dev_said = f"/dev holds accessible NVIDIA device nodes {names('nvidia', open_nodes)}"
        undecided = [g for g in host if verdict[g.pci_address] is None]
        if undecided:
            claimed = {g.minor for g in host if g.minor is not None}
            spare = [m for m in open_nodes if m not in claimed]
            membership.append(warn(
                f"{dev_said}, but only {len(spare)} of them ({names('nvidia', spare)}) belong to no GPU of known "
                f"minor, for {len(undecided)} GPUs of unknown minor ({addrs(undecided)}, not in "
                f"/proc/driver/nvidia/gpus); numabind counts all {len(undecided)}, CUDA may open fewer"))
        if procfs is not None and {g.pci_address for g in keep} != listed & {g.pci_address for g in host}:
            log.debug("%s; /proc/driver/nvidia/gpus lists %s; the device nodes decide what CUDA can open "
                      "(CDI containers narrow by device node, privileged ones widen)",
                      dev_said, addrs(sorted(listed)))
        decided_by = dev_said
    elif procfs is not None:
        keep = [g for g in host if g.pci_address in listed]
        decided_by = f"/proc/driver/nvidia/gpus lists {addrs(sorted(listed))}"
    elif env_verdict is not None and value is not None:
        word = value.strip().lower()
        if word in ("", "none", "void"):
            keep = []
        else:
            keep = [g for g in host if env_verdict[g.pci_address] is not False]
            if any(env_verdict[g.pci_address] is None for g in host):
                membership.append(warn(
                    f"{env_said} names devices numabind cannot resolve without the driver's /proc/driver/nvidia "
                    f"or NVML; numabind counts all {len(host)} NVIDIA GPUs of sysfs"))
        decided_by = env_said
        env_verdict = None          # it decided; nothing to cross-check
    else:
        keep = list(host)
        decided_by = f"sysfs lists {addrs(host)}"
    if env_verdict is not None and value is not None and value.strip().lower() not in ("all", "none", "void", ""):
        kept_addrs = {g.pci_address for g in keep}
        wrong = [g for g in host if env_verdict[g.pci_address] is not None and
                 env_verdict[g.pci_address] != (g.pci_address in kept_addrs)]
        if wrong:
            named = sorted(a for a, v in env_verdict.items() if v)
            membership.append(warn(
                f"{env_said} names {addrs(named)}, but {decided_by}; numabind numbers what the device files "
                f"say ({addrs(keep)})"))
    if nvml is not None:
        nvml_addrs = [d.pci_address for d in nvml]
        known = {g.pci_address: g for g in host}
        file_addrs = [g.pci_address for g in keep]
        if set(nvml_addrs) != set(file_addrs):
            note = warn(f"NVML lists {addrs(nvml_addrs)}, but {decided_by} ({addrs(file_addrs)}); "
                        f"numabind numbers NVML's")
            membership = [note]
            keep = sorted((known[a] for a in nvml_addrs if a in known), key=lambda g: g.pci_address)
        else:
            if membership:
                log.debug("NVML confirms %s; the disagreement of the other sources is moot", addrs(file_addrs))
            membership = []
            if nvml_addrs != file_addrs:
                membership.append(warn(
                    f"NVML numbers the GPUs {', '.join(nvml_addrs)}; CUDA numbers them in PCI bus order "
                    f"({', '.join(file_addrs)}) under CUDA_DEVICE_ORDER=PCI_BUS_ID; numabind uses PCI bus order"))
    if env.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST") != "PCI_BUS_ID":
        # the PCI device id names the model; a name is only known where the driver's procfs or NVML told it
        by_id = all(g.device_id is not None for g in keep)
        models = {g.device_id if by_id else g.name for g in keep} - {None}
        if len(models) > 1:
            shown = sorted({g.name or (f"0x{g.device_id:04x}" if g.device_id is not None else "?")
                            for g in keep})
            order.append(warn(
                f"GPUs of different models ({', '.join(shown)}) with CUDA_DEVICE_ORDER="
                f"{env.get('CUDA_DEVICE_ORDER', 'FASTEST_FIRST (default)')}: CUDA may number them fastest first, "
                f"numabind numbers them in PCI bus order; set CUDA_DEVICE_ORDER=PCI_BUS_ID so both agree"))
    mig = [g for g in keep if g.mig_slices or g.mig_uuids]
    if mig and len(keep) > 1:
        order.append(warn(
            f"MIG is enabled on {addrs(mig)} of the {len(keep)} visible GPUs: CUDA enumerates a single MIG device "
            f"per process, so which index is which GPU is the driver's choice; name the MIG device in "
            f"CUDA_VISIBLE_DEVICES (MIG-<uuid>)"))
    return keep, membership, order
