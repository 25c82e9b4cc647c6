"""The visibility variables: how each runtime reads them (:func:`select_visible`), the GPU lists of ``numabind
run --gpus`` and the variables a command gets so that it sees exactly its GPUs. Grammar: ``docs/gpus.rst``.
"""

from __future__ import annotations

from .._vendors import VISIBILITY_VARIABLES
from ..errors import PlanError
from .sysfs import INDEX_DIGITS, bdf, index, normal_bdf, said, warn
from .values import Gpu, PciGpu, Pick

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the looks' start)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Collection, Mapping, Sequence

__all__ = ["MAX_LISTED_GPUS", "gpu_list_entries", "match_uuid", "pick_gpus", "select", "select_visible",
           "visibility_environ"]

#: Most GPUs one list may name (a range such as ``0-999999999`` is refused, never expanded).
MAX_LISTED_GPUS = 4096
_CUDA, = VISIBILITY_VARIABLES["nvidia"]
_ROCR, _HIP = VISIBILITY_VARIABLES["amd"]
_ZE, = VISIBILITY_VARIABLES["intel"]
_ASCEND, = VISIBILITY_VARIABLES["ascend"]


# ------------------------------------------------------------------------------------ what a runtime keeps
def match_uuid(entry: str, uuids: Sequence[str | None]) -> int | None:
    """The one position whose UUID ``entry`` is a prefix of (case-insensitive), else None."""
    want = entry.lower()
    hits = [k for k, u in enumerate(uuids) if u and u.lower().startswith(want)]
    return hits[0] if len(hits) == 1 else None


def _parse_entries(value: str, count: int, uuids: Sequence[str | None],
                   mig: Mapping[str, int], var: str) -> tuple[list[Pick], str]:
    """CUDA-style list: indices, GPU-uuid prefixes, MIG ids; the first bad entry ends it."""
    chosen: list[Pick] = []
    for raw in value.split(","):
        entry = raw.strip()
        pick: Pick | None = None
        if entry.isascii() and entry.isdigit():
            k = index(entry)
            if k is None:
                why = f"is not a valid index (more than {INDEX_DIGITS} digits)"
            else:
                pick = (k, None, False) if k < count else None
                why = f"index {k} is out of range ({count} devices)"
        elif entry.upper().startswith("MIG-GPU-"):
            k = match_uuid(entry[4:].split("/", 1)[0], uuids)
            pick = (k, entry, True) if k is not None else None
            why = "names no known parent GPU"
        elif entry.upper().startswith("MIG-"):
            keys = [m for m in mig if m.lower().startswith(entry.lower())]
            pick = (mig[keys[0]], keys[0], True) if len(keys) == 1 else None
            why = ("is ambiguous" if keys else
                   "names no known MIG instance" + ("" if mig else " (MIG UUIDs need NVML: pip install nvidia-ml-py)"))
        elif entry.upper().startswith("GPU-"):
            k = match_uuid(entry, uuids)
            pick = (k, None, True) if k is not None else None
            why = "matches no GPU UUID or more than one"
            if not any(uuids):
                why += " (UUIDs come from the driver's /proc/driver/nvidia or NVML; neither is readable)"
        else:
            why = "is not an index or a UUID"
        if pick is not None and any(p[:2] == pick[:2] for p in chosen):
            pick, why = None, "repeats an earlier device"
        if pick is None:
            return chosen, warn(f"{var}: entry {said(entry)} {why}; it and the entries after it are ignored")
        chosen.append(pick)
    return chosen, ""


def _mask_device(entry: str) -> int | None:
    """The device an entry of ``ZE_AFFINITY_MASK`` (``N`` or ``N.sub``) names."""
    return index(entry.strip().split(".", 1)[0])


def _ascend_select(count: int, value: str) -> tuple[list[Pick], list[str], list[str]]:
    """``ASCEND_RT_VISIBLE_DEVICES`` as CANN reads it: ``(picks, notes, doubts)``."""
    chosen: list[Pick] = []
    for raw in value.split(","):
        k = index(raw)
        if k is None or k >= count:
            why = "is not a device id" if k is None else f"names no device ({count} devices)"
            return chosen, [warn(f"{_ASCEND}: entry {said(raw)} {why}; CANN reads only the ids before it, "
                                 f"and so does numabind")], []
        if chosen and k <= chosen[-1][0]:
            note = warn(f"{_ASCEND}: entry {k} is not larger than the one before it; CANN supports ascending lists "
                        f"only; numabind reads the ids before it")
            return chosen, [note], [note]
        chosen.append((k, None, False))
    return chosen, [], []


def select(vendor: str, devices: Sequence[PciGpu], env: Mapping[str, str]
           ) -> tuple[list[Pick], list[str], list[str]]:
    """What ``vendor``'s visibility variables keep of ``devices`` (the runtime's order), in visible order:
    ``(picks, notes, doubts)``; a doubt (also a note) makes the identity of every device uncertain."""
    count = len(devices)
    everything: list[Pick] = [(k, None, False) for k in range(count)]
    notes: list[str] = []
    uuids = [d.uuid for d in devices]
    if vendor == "nvidia":
        value = env.get(_CUDA)
        if value is None:
            return everything, notes, []
        mig = {m: k for k, d in enumerate(devices) for m in d.mig_uuids}
        chosen, note = _parse_entries(value, count, uuids, mig, _CUDA)
        return chosen, [note] if note else [], []
    if vendor == "amd":
        chosen = everything
        rocr = env.get(_ROCR)
        if rocr is not None:
            chosen, note = _parse_entries(rocr, count, uuids, {}, _ROCR)
            notes += [note] if note else []
        var = _HIP if _HIP in env else _CUDA          # HIP's fallback
        hip = env.get(var)
        if hip is not None:
            inner, note = _parse_entries(hip, len(chosen), [uuids[p[0]] for p in chosen], {}, var)
            notes += [note] if note else []
            chosen = [(*chosen[pos][:2], chosen[pos][2] or named) for pos, _mig, named in inner]
        return chosen, notes, []
    if vendor == "ascend":
        value = env.get(_ASCEND)
        return _ascend_select(count, value) if value else (everything, notes, [])
    value = env.get(_ZE)
    if not value or not value.strip():
        return everything, notes, []
    keep = set()
    for raw in value.split(","):
        k = _mask_device(raw)
        if k is not None and k < count:
            keep.add(k)
        else:
            notes.append(warn(f"{_ZE}: entry {said(raw.strip())} names no device ({count} devices); skipped"))
    return [(k, None, False) for k in sorted(keep)], notes, []


def select_visible(vendor: str, devices: Sequence[PciGpu], env: Mapping[str, str]
                   ) -> tuple[list[tuple[int, str | None]], list[str]]:
    """Positions (into ``devices``, the runtime's order) the visibility variables keep, in visible order.

    Returns ``([(position, mig_uuid_or_None), ...], notes)``."""
    picks, notes, _doubts = select(vendor, devices, env)
    return [(pos, mig_uuid) for pos, mig_uuid, _named in picks], notes


# ------------------------------------------------------------------------------------ a command's GPUs
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
            k = index(entry)
            if k is None:
                raise PlanError(f"GPU list {said(spec)}: index {said(entry)} has more than {INDEX_DIGITS} digits")
            out.append(k)
        elif dash and lo.isascii() and lo.isdigit() and hi.isascii() and hi.isdigit():
            a, b = index(lo), index(hi)
            if a is None or b is None or a > b or b - a >= MAX_LISTED_GPUS:
                raise PlanError(f"GPU list {said(spec)}: range {said(entry)} is not A-B with A <= B "
                                f"(at most {MAX_LISTED_GPUS} GPUs)")
            out.extend(range(a, b + 1))
        elif entry.upper().startswith(("GPU-", "MIG-")) and len(entry) > 4:
            out.append(entry)
        elif normal_bdf(entry) is not None:
            out.append(normal_bdf(entry) or entry)
        elif bdf("0000:" + entry.lower()) is not None:   # bus:device.function
            out.append("0000:" + entry.lower())
        else:
            raise PlanError(f"GPU list {said(spec)}: entry {said(entry)} is not a visible index, a UUID "
                            f"(GPU-...) or a PCI address (0000:1b:00.0)" if entry else
                            f"GPU list {said(spec)} has an empty entry: give GPUs separated by commas, e.g. 4,5")
        if len(out) > MAX_LISTED_GPUS:
            raise PlanError(f"GPU list {said(spec)} names more than {MAX_LISTED_GPUS} GPUs")
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
            shown = f"0-{len(gpus) - 1}" if gpus else "none"
            why = f"visible GPU index {entry} is out of range ({len(gpus)} visible: {shown})"
        elif entry.upper().startswith("MIG-"):
            hit = [g for g in gpus if g.mig_uuid and g.mig_uuid.lower().startswith(entry.lower())]
            why = f"{said(entry)} names no visible MIG device, or more than one"
        elif entry.upper().startswith("GPU-"):
            hit = [g for g in gpus if g.uuid and g.uuid.lower().startswith(entry.lower())]
            why = f"{said(entry)} matches no visible GPU's UUID, or more than one"
        else:
            hit = [g for g in gpus if g.pci_address == entry]
            other = next((p for p in others if p.pci_address == entry), None)
            if not hit and other is not None and vendors and other.vendor not in vendors:
                raise PlanError(
                    f"GPU list {said(spec)} mixes vendors: {entry} is an {other.vendor} GPU, the visible GPUs are "
                    f"{vendors[0]}'s; one command sees the GPUs of one runtime: list GPUs of one vendor "
                    f"(NUMABIND_GPU_VENDOR={other.vendor} numbers {other.vendor}'s)")
            why = f"{entry} is not the PCI address of a visible GPU"
        if len(hit) != 1:
            raise PlanError(f"GPU list {said(spec)}: {why} (numabind plan lists them)")
        g = hit[0]
        if any(c.index == g.index for c in chosen):
            raise PlanError(f"GPU list {said(spec)} names GPU {g.index} ({g.pci_address}) twice: name it once")
        chosen.append(g)
        if not isinstance(entry, int) and entry.upper().startswith("GPU-"):
            named.add(g.index)
    if not chosen:
        raise PlanError(f"GPU list {said(spec)} names no GPU")
    return chosen, frozenset(named)


def _entries(value: str) -> list[str]:
    """A visibility variable's entries as the runtimes split them (:func:`_parse_entries`)."""
    return [raw.strip() for raw in value.split(",")]


def _naming(entries: Sequence[str], g: Gpu) -> str | None:
    """The entry of a filtering variable (ROCR_VISIBLE_DEVICES, in physical terms) that names ``g``."""
    for e in entries:
        if e.isascii() and e.isdigit() and index(e) == g.physical_index:
            return e
        if e.upper().startswith("GPU-") and g.uuid and g.uuid.lower().startswith(e.lower()):
            return e
    return None


def visibility_environ(chosen: Sequence[Gpu], env: Mapping[str, str], named: Collection[int] = ()
                       ) -> dict[str, str]:
    """The variables that make a command see exactly ``chosen`` (visible GPUs of one vendor, as discovered under
    ``env``), composed with what ``env`` already says.

    NVIDIA ``CUDA_VISIBLE_DEVICES`` and AMD ``ROCR_VISIBLE_DEVICES`` (``HIP_VISIBLE_DEVICES`` then ``0,1,...``) in
    the list's order, Intel ``ZE_AFFINITY_MASK`` in device order, Ascend ``ASCEND_RT_VISIBLE_DEVICES`` ascending;
    each GPU as ``env``'s entry for it, else its index (its UUID when named by UUID). Details: docs/gpus.rst.

    Raises :class:`PlanError` for GPUs of several vendors."""
    vendors = sorted({g.vendor for g in chosen})
    if len(vendors) != 1:
        raise PlanError(f"the GPUs of one command are of one vendor, got {', '.join(vendors) or 'none'}")
    vendor = vendors[0]

    def own(g: Gpu) -> str:
        pos = g.index if g.physical_index is None else g.physical_index
        return g.uuid if g.index in named and g.uuid else str(pos)

    if vendor == "nvidia":
        parent = env.get(_CUDA)
        if parent is None:
            return {_CUDA: ",".join(own(g) for g in chosen)}
        listed = _entries(parent)
        return {_CUDA: ",".join(listed[g.index] if g.index < len(listed) else own(g) for g in chosen)}
    if vendor == "amd":
        rocr = env.get(_ROCR)
        values = []
        for g in chosen:
            entry = _naming(_entries(rocr), g) if rocr is not None else None
            values.append(entry if entry is not None else own(g))
        out = {_ROCR: ",".join(values)}
        if _HIP in env or _CUDA in env:
            out[_HIP] = ",".join(str(k) for k in range(len(chosen)))
        return out
    positions = sorted(g.index if g.physical_index is None else g.physical_index for g in chosen)
    if vendor == "intel":
        mask = env.get(_ZE)
        if mask and mask.strip():
            kept: list[str] = []
            for e in _entries(mask):
                if _mask_device(e) in positions and e not in kept:
                    kept.append(e)
            return {_ZE: ",".join(kept)}
        return {_ZE: ",".join(map(str, positions))}
    return {_ASCEND: ",".join(map(str, positions))}
