"""``cpuN/cache/indexM`` of a fake machine: each online CPU's caches, ordered by level and type, with
``level``, ``type``, ``size`` and the CPUs sharing it (``shared_cpu_map``/``shared_cpu_list``)."""

from __future__ import annotations

from .cpus import mask_and_list, nr_cpu_ids
from .masks import CPU

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .machine import FakeMachine

#: The ``size`` of a cache by (level, type) unless the machine sets its own (``cache_sizes``); others 32768K.
CACHE_SIZES = {(1, "Data"): "48K", (1, "Instruction"): "32K", (2, "Unified"): "2048K"}


def cache_files(m: FakeMachine, out: dict) -> None:
    online = m.online()
    nbits = nr_cpu_ids(m)
    per_cpu: dict[int, list] = {}
    for level, ctype, cpus in m.caches:
        for cpu in cpus:
            per_cpu.setdefault(cpu, []).append((level, ctype, cpus))
    for cpu in sorted(m.possible()):
        if cpu not in online:
            continue  # the kernel removes cache/ of offline CPUs
        kinds = sorted(per_cpu.get(cpu, []), key=lambda c: (c[0], c[1]))
        for index, (level, ctype, cpus) in enumerate(kinds):
            idir = f"{CPU}/cpu{cpu}/cache/index{index}"
            out[f"{idir}/level"] = f"{level}\n"
            out[f"{idir}/type"] = f"{ctype}\n"
            mask_and_list(m.quirks, out, idir, "shared_cpu_map", cpus & online, nbits, "shared_cpu_list")
            size = m.cache_sizes.get((level, ctype)) or CACHE_SIZES.get((level, ctype), "32768K")
            out[f"{idir}/size"] = size + "\n"
