"""Accelerator (GPU) discovery from sysfs, procfs and optionally NVML.

Reads only through an :class:`numabind._fs.FsReader`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Gpu"]


@dataclass(frozen=True)
class Gpu:
    """One accelerator as a worker process sees it."""

    index: int                      # visible index (after CUDA_VISIBLE_DEVICES & co.)
    pci_address: str                # "0000:1b:00.0"
    vendor: str                     # "nvidia" | "amd" | "intel"
    numa_node: int | None           # None when the firmware reports -1 and nothing else places it
    local_cpus: frozenset[int] = field(default_factory=frozenset)


def discover_gpus(reader, nodes, env=None) -> tuple[Gpu, ...]:
    """Visible accelerators under ``reader``'s root, in visible-index order.

    ``nodes`` is the discovered ``{id: Node}`` mapping (used to place GPUs whose
    firmware reports ``numa_node = -1``); ``env`` defaults to ``os.environ``.
    """
    return ()
