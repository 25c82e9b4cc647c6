"""Huawei Ascend NPUs: which of them CANN numbers, in which order (the accessible ``/dev/davinci<N>`` nodes, then
``ASCEND_VISIBLE_DEVICES``, then sysfs; the pairing of physical ids with PCI functions is a guess: ``docs/gpus.rst``).
"""

from __future__ import annotations

from .sysfs import accessible, addrs, device_nodes, drop_other_drivers, index, names, said, warn
from .values import PciGpu, Runtime

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the looks' start)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping, Sequence
    from typing import Any

__all__ = ["ascend_runtime"]

#: Device file names ``davinci<N>`` (``/dev``).
_DAVINCI_NODE = "davinci"


def _env_ids(value: str, count: int) -> list[int] | None:
    """Host physical ids ``ASCEND_VISIBLE_DEVICES`` names (``0,3``, ``0-2,4``), below ``count``;
    None when an entry is not an id or a range (a processor name such as ``Ascend910-0``)."""
    ids: set[int] = set()
    for raw in value.split(","):
        head, dash, tail = raw.strip().partition("-")
        first = index(head)
        last = index(tail) if dash else first
        if first is None or last is None or last < first:
            return None
        ids.update(range(first, min(last, count - 1) + 1))
    return sorted(ids)


def ascend_runtime(reader: Any, gpus: Sequence[PciGpu], env: Mapping[str, str], container_env: bool) -> Runtime:
    """The NPUs CANN numbers, in its logical order, each with ``minor`` = its physical id (davinci N)."""
    host = drop_other_drivers("ascend", gpus)
    membership: list[str] = []
    order: list[str] = []
    dev = device_nodes(reader, "dev", _DAVINCI_NODE)
    if dev is not None:
        opened = sorted(n for n, ok in dev.items() if ok)
        stray = [n for n in opened if n >= len(host)]
        if stray:
            membership.append(warn(
                f"/dev holds accessible NPU device nodes {names(_DAVINCI_NODE, stray)}, but sysfs lists "
                f"{len(host)} Ascend NPUs ({addrs(host)}); numabind drops those nodes"))
        ids = [n for n in opened if n < len(host)]
        manager = accessible(reader, "dev/davinci_manager") if reader.exists("dev/davinci_manager") else None
        if ids and not manager:
            membership.append(warn(
                f"Ascend NPUs {names(_DAVINCI_NODE, opened)} are accessible but /dev/davinci_manager is "
                f"{'not accessible' if manager is False else 'missing'}: CANN may see no NPU (a container needs "
                f"--device /dev/davinci_manager, /dev/devmm_svm and /dev/hisi_hdc)"))
    else:
        value = env.get("ASCEND_VISIBLE_DEVICES") if container_env else None
        word = value.strip().lower() if value is not None else None
        ids = list(range(len(host)))                # unset: every NPU of sysfs
        named = _env_ids(word, len(host)) if word else None
        if word in ("", "void"):
            ids = []
        elif named is not None:
            ids = named
        elif word is not None:
            membership.append(warn(
                f"ASCEND_VISIBLE_DEVICES={said(value or '')} names devices numabind cannot resolve without "
                f"/dev/davinci* nodes; numabind counts all {len(host)} Ascend NPUs of sysfs"))
    keep = [host[k].replace(minor=k) for k in ids]
    placements = {(g.firmware_node, g.local_cpus) for g in host}
    if len(placements) > 1:
        order.append(warn(
            f"numabind cannot tell which PCI function each /dev/davinci<N> is (the driver gives the nodes no sysfs "
            f"parent and does not number the NPUs in PCI bus order on every server); it pairs physical id k with "
            f"the k-th NPU in PCI bus order (NPUs: {addrs(host)}), and these are not all on one NUMA node"))
    return keep, membership, order
