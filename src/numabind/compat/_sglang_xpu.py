"""SGLang's Intel GPU (XPU) lookup on the live machine: the render nodes, Level Zero's order and mask
(re-exported by :mod:`numabind.compat.sglang` under SGLang's names)."""

from __future__ import annotations

import glob
import os
import sys
from typing import Any

from .._vendors import PCI_IDS
from ._sglang_base import SGLANG_TRUE, logger

__all__ = ["integrated", "list_xpu_pci_addresses", "pci_key", "xpu_runtime_count", "xpu_visible_device_indices"]

#: Where SGLang looks for Intel GPUs: the DRM render nodes and their PCI device.
DRI_RENDER_GLOB = "/dev/dri/renderD*"
DRM_DEVICE = "/sys/class/drm/{}/device"


def pci_key(address: str) -> tuple[int, int, int, int] | None:
    """(domain, bus, device, function) of a PCI address ``DDDD:BB:DD.F`` (hexadecimal), or None."""
    try:
        domain, bus, rest = address.split(":")
        device, function = rest.split(".")
        return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        return None


def integrated(key: tuple[int, int, int, int]) -> bool:
    """An integrated GPU: on bus 00 of PCI domain 0000."""
    return key[0] == 0 and key[1] == 0


def list_xpu_pci_addresses() -> list[str]:
    """The PCI addresses of the Intel GPUs whose render node this process can open, in Level Zero's order (PCI
    order, integrated GPUs last unless ``ZE_ENABLE_PCI_ID_DEVICE_ORDER`` is true)."""
    found: list[tuple[tuple[int, int, int, int], str]] = []
    for render in glob.glob(DRI_RENDER_GLOB):
        name = os.path.basename(render)
        if not os.access(render, os.R_OK | os.W_OK):
            logger.debug("%s cannot be opened by this process: not one of its XPUs", render)
            continue
        try:
            with open(DRM_DEVICE.format(name) + "/vendor") as f:
                vendor = int(f.read().strip(), 16)
        except (OSError, ValueError):
            continue
        if vendor != PCI_IDS["intel"]:
            continue
        address = os.path.basename(os.path.realpath(DRM_DEVICE.format(name)))
        key = pci_key(address)
        if key is not None:
            found.append((key, address))
    pci_order = os.environ.get("ZE_ENABLE_PCI_ID_DEVICE_ORDER", "").strip().lower() in SGLANG_TRUE
    found.sort(key=lambda item: (not pci_order and integrated(item[0]), item[0]))
    return [address for _, address in found]


def xpu_visible_device_indices(num_devices: int) -> list[int]:
    """The indices among ``num_devices`` Intel GPUs that ``ZE_AFFINITY_MASK`` exposes, ascending (Level Zero
    filters, it does not reorder); a sub-device entry (``1.0``) selects its root device, bad entries are dropped.
    """
    mask = os.environ.get("ZE_AFFINITY_MASK")
    if mask is None or mask.strip() in ("", "default"):
        return list(range(num_devices))
    picked = set()
    for entry in mask.split(","):
        try:
            index = int(entry.strip().split(".")[0])
        except ValueError:
            continue
        if 0 <= index < num_devices:
            picked.add(index)
    return sorted(picked)


def xpu_runtime_count() -> int | None:
    """``torch.xpu.device_count()`` when the host has imported torch (never imported here), else None."""
    torch: Any = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return int(torch.xpu.device_count())
    except Exception as e:  # noqa: BLE001 - a torch without XPU support
        logger.debug("torch.xpu.device_count() failed: %s", e)
        return None
