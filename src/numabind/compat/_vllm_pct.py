"""vLLM's Priority Core Turbo (PCT) gate: the SKU table, the two gates and each node's priority CPUs
(re-exported by :mod:`numabind.compat.vllm` under vLLM's names). On the live machine vLLM's paths are read with
``open()`` and ``Path.read_text`` (vLLM's tests patch those); elsewhere numabind's discovery answers.
"""

from __future__ import annotations

import functools
import logging
import re
from pathlib import Path
from typing import NamedTuple

from ..cpulist import parse_cpulist
from ..errors import PlanError
from ..strategies import PCT_SKUS, pct_config, pct_priority_cpus
from . import REFRESH_HOOKS, current_topology, on_live_machine

__all__ = ["NODE_CPULIST_PATH", "PCT_CAPABLE_SKUS", "PCT_HIGHEST_PERF_PATH", "PROC_CPUINFO_PATH", "PctSku",
           "maybe_get_pct_cpu_binding", "pct_sku_config", "pct_sku_from_cpuinfo"]

#: vLLM's logger (the same object :mod:`numabind.compat.vllm` logs through).
logger = logging.getLogger("vllm.utils.numa_utils")

#: The files behind the PCT gate, and the node directories vLLM reads CPU lists from.
PCT_HIGHEST_PERF_PATH = "/sys/devices/system/cpu/cpu0/acpi_cppc/highest_perf"
PROC_CPUINFO_PATH = "/proc/cpuinfo"
NODE_CPULIST_PATH = "/sys/devices/system/node/node{}/cpulist"


class PctSku(NamedTuple):
    """A PCT-capable SKU under vLLM's field names (numabind's :class:`~numabind.strategies.PctSku`
    calls ``priority_stride`` ``stride``)."""

    highest_perf: int
    priority_stride: int


#: vLLM's SKU table, built from numabind's :data:`~numabind.strategies.PCT_SKUS`.
PCT_CAPABLE_SKUS: dict[str, PctSku] = {
    name: PctSku(highest_perf=sku.highest_perf, priority_stride=sku.stride) for name, sku in PCT_SKUS.items()
}


def _sku_named_in(model: str) -> PctSku | None:
    for name, sku in PCT_CAPABLE_SKUS.items():
        if re.search(rf"(?<![0-9A-Za-z]){re.escape(name)}(?![0-9A-Za-z])", model):
            return sku
    return None


def pct_sku_from_cpuinfo() -> PctSku | None:
    """The PCT entry whose SKU the CPU model name names (the first gate only), or None."""
    if not on_live_machine():
        return _sku_named_in(current_topology().model_name or "")
    try:
        with open(PROC_CPUINFO_PATH) as f:
            for line in f:
                if line.lstrip().lower().startswith("model name"):
                    found = _sku_named_in(line)
                    if found is not None:
                        return found
    except OSError as e:
        logger.debug("PCT: %s cannot be read: %s", PROC_CPUINFO_PATH, e)
    return None


@functools.cache
def pct_sku_config() -> PctSku | None:
    """The PCT entry of this machine when its CPU model and cpu0's CPPC ``highest_perf`` both match one."""
    if not on_live_machine():
        sku, why = pct_config(current_topology())
        logger.debug("PCT: %s", why)
        return None if sku is None else PctSku(sku.highest_perf, sku.stride)
    found = pct_sku_from_cpuinfo()
    if found is None:
        logger.debug("PCT: the CPU model is not a known PCT-capable SKU")
        return None
    try:
        with open(PCT_HIGHEST_PERF_PATH) as f:
            actual = int(f.read().strip())
    except (OSError, ValueError) as e:
        logger.debug("PCT: %s cannot be read: %s", PCT_HIGHEST_PERF_PATH, e)
        return None
    if actual != found.highest_perf:
        logger.debug("PCT: highest_perf is %d, not the SKU's %d (PCT off)", actual, found.highest_perf)
        return None
    return found


REFRESH_HOOKS.append(pct_sku_config.cache_clear)


def _node_priority_cpus(node: int, stride: int) -> set[int]:
    """The CPUs of ``node`` with ``cpu % stride in (0, 1)`` (``Path.read_text``), those this process may use."""
    path = Path(NODE_CPULIST_PATH.format(node))
    try:
        cpus = parse_cpulist(path.read_text().strip())
    except (OSError, ValueError, PlanError) as e:
        logger.debug("PCT: the CPUs of NUMA node %d cannot be read from %s: %s", node, path, e)
        return set()
    topology = current_topology()
    out = {c for c in cpus if c % stride in (0, 1)}
    if topology.allowed_cpus != topology.online_cpus:
        out &= topology.allowed_cpus
    return out


def maybe_get_pct_cpu_binding(numa_nodes: list[int]) -> list[int] | None:
    """The PCT priority CPUs of ``numa_nodes`` (those this process may use), sorted, or None."""
    sku = pct_sku_config()
    if sku is None:
        return None
    union: set[int] = set()
    for node in numa_nodes:
        if on_live_machine():
            cpus = _node_priority_cpus(node, sku.priority_stride)
        else:
            found, _ = pct_priority_cpus(current_topology(), [node])
            cpus = set(found or ())
        if cpus:
            union |= cpus
            logger.info("Priority Core Turbo (CPU stride %d): priority CPUs of NUMA node %d are %s",
                        sku.priority_stride, node, ",".join(map(str, sorted(cpus))))
    return sorted(union) or None
