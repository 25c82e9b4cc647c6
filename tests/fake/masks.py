"""The kernel's formats and the paths of a fake tree: hex masks as ``%*pb`` prints them, sizes, sysfs roots."""

from __future__ import annotations

from collections.abc import Iterable

from numabind.cpulist import ids_to_words
from numabind.errors import PlanError

GIB_KB = 1024 * 1024  # kB in one GiB

NODE = "sys/devices/system/node"
CPU = "sys/devices/system/cpu"
CGROUP = "sys/fs/cgroup"
WEIGHTS = "sys/kernel/mm/mempolicy/weighted_interleave"


def id_set(values: Iterable[int]) -> frozenset:
    return frozenset(int(v) for v in values)


def format_mask(ids: Iterable[int], nbits: int | None = None) -> str:
    """Kernel hex mask of ``ids`` in 32-bit words, most significant first (``Cpus_allowed: 00000000,0000000f``).

    ``nbits`` (default: enough for the largest id, at least 32) sets the width. numabind only parses
    masks (:func:`numabind.cpulist.parse_mask`); fake machines write them.
    """
    items = set(ids)
    bad = [i for i in items if not isinstance(i, int) or isinstance(i, bool) or i < 0]
    if bad:
        raise PlanError(f"{bad[0]!r} is not a CPU or node id")
    top = max(items) + 1 if items else 1
    nwords = (max(nbits or 0, top, 1) + 31) // 32
    return ",".join(f"{w:08x}" for w in reversed(ids_to_words(items, nwords * 32, 32)))


def kernel_mask(ids: Iterable[int], nbits: int) -> str:
    """``ids`` as the kernel's ``%*pb`` prints a bitmap of ``nbits`` bits: 32-bit
    words, most significant first, the top word only as wide as its bits need
    (``"3"`` for CPUs 0-1 of a 2-CPU kernel, ``"ff,ffffffff"`` for 40 CPUs)."""
    nbits = max(1, nbits)
    text = format_mask(ids, nbits)
    words = text.split(",")
    top_bits = nbits - 32 * (len(words) - 1)
    words[0] = words[0][-((top_bits + 3) // 4):]
    return ",".join(words)
