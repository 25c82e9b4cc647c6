"""How a plan is spread (pure): interleave weights by the nodes' memory bandwidth, and one thread per core."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from ..errors import PlanError
from ..plan import MAX_WEIGHT, check_plan, core_groups
from .common import fmt, topology_or_discover

if TYPE_CHECKING:  # pragma: no cover
    from ..plan import Plan
    from ..topology import Topology

log = logging.getLogger(__name__)

__all__ = ["THREAD_ORDERS", "bandwidth_weights", "thread_placement", "weights_from_bandwidth"]


# ----------------------------------------------------------------------------- weighted interleave
def weights_from_bandwidth(bandwidths: Mapping[int, float], *, tolerance: float = 0.02,
                           max_weight: int = MAX_WEIGHT) -> dict[int, int]:
    """Weighted-interleave weights proportional to each node's memory bandwidth (any one unit): the smallest whole
    numbers from 1 to ``max_weight`` whose ratios are within ``tolerance`` of the bandwidths', else the closest
    that fit. ``{0: 30000, 2: 10000}`` gives ``{0: 3, 2: 1}``.
    """
    if not isinstance(bandwidths, Mapping) or not bandwidths:
        raise PlanError("weights_from_bandwidth needs a non-empty mapping node -> bandwidth")
    for node, bw in bandwidths.items():
        if not isinstance(node, int) or isinstance(node, bool) or node < 0:
            raise PlanError(f"weights_from_bandwidth: node {node!r} is not a non-negative int")
        if isinstance(bw, bool) or not isinstance(bw, (int, float)) or not math.isfinite(bw) or bw <= 0:
            raise PlanError(f"weights_from_bandwidth: node {node} has bandwidth {bw!r}; give a positive number "
                            f"(a node without bandwidth figures cannot be weighted by them)")
    if not (isinstance(max_weight, int) and 1 <= max_weight <= MAX_WEIGHT):
        raise PlanError(f"max_weight must be an int from 1 to {MAX_WEIGHT}, got {max_weight!r}")
    lowest = min(bandwidths.values())
    ratios = {n: bw / lowest for n, bw in bandwidths.items()}
    top = max(ratios.values())
    best: dict[int, int] | None = None
    for scale in range(1, max_weight + 1):
        if round(top * scale) > max_weight:
            break
        weights = {n: max(1, round(r * scale)) for n, r in ratios.items()}
        best = weights
        if all(abs(weights[n] - r * scale) <= tolerance * r * scale for n, r in ratios.items()):
            break
    if best is None:        # the spread is wider than 1:max_weight: the largest node gets max_weight
        best = {n: max(1, min(max_weight, round(r * max_weight / top))) for n, r in ratios.items()}
    common = 0
    for w in best.values():
        common = math.gcd(common, w)
    return {n: w // common for n, w in sorted(best.items())}


def bandwidth_weights(nodes: Iterable[int], topology: Topology | None = None, *, tolerance: float = 0.02) -> dict[int, int]:
    """Weights for interleaving over ``nodes`` by their HMAT read bandwidth (:attr:`numabind.topology.Node.access`);
    a node without the figures is a :class:`PlanError` naming it.
    """
    topology = topology_or_discover(topology)
    wanted = sorted(set(nodes))
    if not wanted:
        raise PlanError("bandwidth_weights needs at least one node")
    bandwidths: dict[int, float] = {}
    missing = []
    for n in wanted:
        node = topology.nodes.get(n)
        if node is None:
            raise PlanError(f"bandwidth_weights: node {n} does not exist (nodes: {fmt(topology.nodes)})")
        access = node.access
        if access is None or not access.read_bandwidth:
            missing.append(n)
        else:
            bandwidths[n] = access.read_bandwidth
    if missing:
        raise PlanError(f"no bandwidth figures for node(s) {fmt(missing)} under {topology.root} "
                        f"(sys/devices/system/node/nodeN/access0/initiators/read_bandwidth: the firmware has no HMAT "
                        f"table for them); give the weights by hand, e.g. weights={{{wanted[0]}: 3, ...}}")
    weights = weights_from_bandwidth(bandwidths, tolerance=tolerance)
    log.debug("interleave weights from read bandwidth %s: %s", bandwidths, weights)
    return weights


# ------------------------------------------------------------- one thread per core
#: How :func:`thread_placement` orders a plan's cores: ``compact`` fills a node before the next; ``scatter`` takes
#: one core of each node in turn, and inside a node one of each last-level cache group in turn.
THREAD_ORDERS = ("compact", "scatter")


_Item = TypeVar("_Item")


def _round_robin(lists: Sequence[Sequence[_Item]]) -> list[_Item]:
    """The first item of each list, then the second of each, and so on."""
    out: list[_Item] = []
    for i in range(max((len(x) for x in lists), default=0)):
        out += [x[i] for x in lists if i < len(x)]
    return out


def thread_placement(plan: Plan, threads: int, topology: Topology, *, order: str = "compact",
                     strict: bool = False) -> tuple[frozenset[int], ...]:
    """The CPUs of each of ``threads`` threads (what :func:`numabind.pin_threads` applies): thread ``i`` gets the
    ``i``-th whole core of ``plan`` in ``order``. With more threads than cores, ``strict`` raises
    :class:`PlanError`; otherwise each thread gets one CPU, every core's first hyperthread first, wrapping around.
    """
    check_plan(plan, "thread_placement")
    if order not in THREAD_ORDERS:
        raise PlanError(f"order {order!r} is not one of {', '.join(THREAD_ORDERS)}")
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        raise PlanError(f"threads must be a count of threads (an int >= 0), got {threads!r}"[:200])
    if plan.cpus is None:
        raise PlanError("pinning threads needs a plan with CPUs; this one leaves them as they are (cpus=None)")
    grouped = core_groups(plan.cpus, topology)
    if order == "compact":
        cores = [core for _, core in grouped]
    else:
        llc_of = {cpu: i for i, group in enumerate(topology.llc_groups()) for cpu in group}
        by_node: dict[int | None, dict[int, list[frozenset[int]]]] = {}
        for node, core in grouped:
            by_node.setdefault(node, {}).setdefault(llc_of.get(min(core), -1), []).append(core)
        cores = _round_robin([_round_robin(list(groups.values())) for groups in by_node.values()])
    if threads <= len(cores):
        return tuple(cores[:threads])
    if strict:
        raise PlanError(f"{threads} threads for the {len(cores)} cores of the plan (CPUs {fmt(plan.cpus)}): one "
                        f"thread per core takes at most {len(cores)}; pin fewer threads, plan more cores, or "
                        f"pass strict=False to share cores (one CPU per thread, wrapping around)")
    slots = _round_robin([sorted(core) for core in cores])
    return tuple(frozenset({slots[i % len(slots)]}) for i in range(threads))
