"""Every GPU's plan at once (``numabind plan``'s table) and the automatic-binding gate (pure)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from ..errors import PlanError
from ..plan import Plan
from .common import distance, fmt, ids_or_none, plan_fields, planned_on
from .gpus import MODES, POLICIES, _plan_one

if TYPE_CHECKING:  # pragma: no cover
    from ..topology import Topology
    from ..types import Mode, NodePolicy, Strictness

log = logging.getLogger(__name__)

__all__ = ["PlanRow", "auto_gate", "plan_table"]


@dataclass(frozen=True)
class PlanRow:
    """One line of ``numabind plan``: a GPU, where it is, and its plan or why there is none."""

    gpu: int
    pci_address: str | None
    vendor: str | None
    numa_node: int | None
    numa_source: str | None
    cpu_node: int | None
    mem_nodes: frozenset[int] | None
    distance: int | None            # SLIT distance from the GPU's node to its farthest memory node
    node_cpus: frozenset[int] | None
    trimmed_cpus: frozenset[int] | None   # CPUs of the CPU node outside the allowed set
    plan: Plan | None
    error: str | None
    reasons: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update({name: ids_or_none(getattr(self, name)) for name in ("mem_nodes", "node_cpus", "trimmed_cpus")},
                   plan=None if self.plan is None else plan_fields(self.plan), reasons=list(self.reasons))
        return out


def plan_table(topology: Topology | None = None, mode: Mode = "node", policy: NodePolicy | None = "bind", *,
               gpus: Iterable[int] | None = None, nodes: Sequence[int] | None = None,
               cpus: Sequence[object] | None = None, strict: Strictness | None = None,
               within_affinity: bool = False) -> tuple[PlanRow, ...]:
    """One :class:`PlanRow` per GPU (``gpus``, default every visible GPU): a GPU that cannot be placed gets
    ``plan=None`` and ``error``. Only an unknown ``mode`` or ``policy`` raises PlanError.
    """
    if mode not in MODES:
        raise PlanError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    if policy not in POLICIES:
        raise PlanError(f"policy {policy!r} is not one of bind, preferred, preferred-many, interleave (or None)")
    topology = planned_on(topology, within_affinity)
    wanted = sorted({g.index for g in topology.gpus}) if gpus is None else list(gpus)
    rows = []
    for i in wanted:
        gpu = next((g for g in topology.gpus if g.index == i), None)
        base: dict[str, Any] = dict(gpu=i, pci_address=gpu.pci_address if gpu else None, vendor=gpu.vendor if gpu else None,
                    numa_node=gpu.numa_node if gpu else None, numa_source=gpu.numa_source if gpu else None)
        try:
            plan, p, why = _plan_one(topology, i, mode, policy, nodes, cpus, False, strict)
        except PlanError as exc:
            rows.append(PlanRow(**base, cpu_node=None, mem_nodes=None, distance=None, node_cpus=None,
                                trimmed_cpus=None, plan=None, error=str(exc), reasons=()))
            continue
        node_cpus = topology.nodes[p.cpu_node].cpus
        mem = plan.mem_nodes or frozenset({p.mem_node})
        rows.append(PlanRow(
            **base,
            cpu_node=p.cpu_node,
            mem_nodes=plan.mem_nodes,
            distance=max(distance(topology, p.node, n) for n in mem),
            node_cpus=node_cpus,
            trimmed_cpus=node_cpus - topology.allowed_cpus,
            plan=plan,
            error=None,
            reasons=why,
        ))
    return tuple(rows)


# -------------------------------------------------------- automatic gate
def auto_gate(topology: Topology, *, affinity: Iterable[int] | None = None, mem_policy: str | None = None,
              gpus: Iterable[int] | None = None, mode: Mode = "node", unbound_cpus: Iterable[int] | None = None,
              live: Any = None) -> tuple[bool, str]:
    """The pure automatic-binding gate (see :func:`numabind.auto.auto_plan_available`); never raises. ``live``:
    the live process's binding (``.cpus``, ``.mem_policy``) the caller read, or None."""
    try:
        cpu_nodes = sorted(n for n, nd in topology.nodes.items() if nd.cpus)
        if len(cpu_nodes) < 2:
            return False, f"only {len(cpu_nodes)} NUMA node with CPUs; nothing to choose"
        indices = sorted({g.index for g in topology.gpus}) if gpus is None else sorted(set(gpus))
        if not indices:
            return False, "no visible GPU"
        is_live = getattr(topology, "root", None) == "/"
        current = live
        if affinity is None:
            dumped = topology.affinity if topology.affinity is not None else topology.allowed_cpus
            affinity = dumped if not is_live else (current.cpus if current is not None else None)
            if affinity is None:
                return False, "the process CPU affinity is unreadable"
        affinity = frozenset(affinity)
        reference = topology.online_cpus if unbound_cpus is None else frozenset(unbound_cpus)
        if not reference <= affinity:
            return False, (f"CPU affinity {fmt(affinity)} does not cover {fmt(reference)}: the launcher already bound "
                           f"this process; pass explicit nodes to override")
        if mem_policy is None:
            mem_policy = "default" if not is_live else getattr(current, "mem_policy", None)
            if mem_policy is None:
                return False, "the memory policy is unreadable (in a container, try --cap-add SYS_NICE)"
        if mem_policy != "default":
            return False, f"memory policy is already {mem_policy!r}; pass explicit nodes to override"
        placed = []
        for i in indices:
            try:
                # automatic binding never guesses which board a GPU is: an uncertain one stops the gate
                _, p, _ = _plan_one(topology, i, mode, "preferred", None, None, False, True)
            except PlanError as exc:
                return False, f"GPU {i} cannot be placed: {exc}"
            placed.append(f"GPU {i}->node {p.cpu_node}")
        return True, f"{len(cpu_nodes)} nodes with CPUs, process unbound; " + ", ".join(placed)
    except Exception as exc:  # never raise from the gate
        log.debug("automatic binding gate failed", exc_info=True)
        return False, f"gate failed: {exc}"

