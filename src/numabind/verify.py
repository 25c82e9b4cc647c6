"""Verify: :func:`current_binding` reads what the kernel holds for this process (like ``numactl --show``), and
:func:`verify_current` compares it with a :class:`Plan` without changing anything.
"""

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)
if TYPE_CHECKING:  # pragma: no cover
    from .types import BackendName, ThreadMode

from . import live
from ._base import Strictness, Value, getLogger
from .backends import WALK_EXITED, check_threads, get_backend, walk_all
from .bind import BindReport, strict_default
from .cpulist import format_cpulist
from .errors import BindError, NumabindError
from .plan import Plan, check_plan, format_weights, plannable_policy, read_back_plan

__all__ = ["Binding", "current_binding", "verify_current"]

log = getLogger(__name__)


class Binding(Value):
    """What the kernel says now (like ``numactl --show``); ``weights``: under weighted interleave, the system-wide
    weight of each of ``mem_nodes`` (else empty)."""

    __slots__ = ("cpus", "mem_policy", "mem_nodes", "mems_allowed", "backend", "threads", "weights")
    _compare = ("cpus", "mem_policy", "mem_nodes", "mems_allowed", "backend", "weights")
    cpus: frozenset[int]               # affinity of the calling thread
    mem_policy: str | None             # None when the backend cannot read it
    mem_nodes: frozenset[int]
    mems_allowed: frozenset[int]       # the cpuset's memory nodes
    backend: str
    threads: dict[int, frozenset[int]]
    weights: dict[int, int]

    def __init__(self, cpus: frozenset[int], mem_policy: str | None, mem_nodes: frozenset[int],
                 mems_allowed: frozenset[int], backend: str, threads: dict[int, frozenset[int]] | None = None,
                 weights: dict[int, int] | None = None) -> None:
        for k, v in (("cpus", frozenset(cpus)), ("mem_policy", mem_policy), ("mem_nodes", frozenset(mem_nodes)),
                     ("mems_allowed", frozenset(mems_allowed)), ("backend", backend), ("threads", dict(threads or {})),
                     ("weights", dict(weights or {}))):
            object.__setattr__(self, k, v)

    def __hash__(self) -> int:
        return hash((self.cpus, self.mem_policy, self.mem_nodes, self.mems_allowed, self.backend,
                     tuple(sorted(self.weights.items()))))

    @property
    def plan(self) -> Plan:
        """The binding as a Plan (a policy a Plan cannot express shows as None)."""
        policy = plannable_policy(self.mem_policy)
        return Plan(cpus=self.cpus, mem_policy=policy, mem_nodes=self.mem_nodes if policy else None,
                    weights=self.weights if policy == "weighted-interleave" and self.weights else None)

    def describe(self) -> str:
        lines = [f"cpus:         {format_cpulist(self.cpus)}",
                 f"policy:       {self.mem_policy or 'unknown (backend ' + self.backend + ' cannot read it)'}"]
        if self.mem_nodes:
            lines.append(f"nodes:        {format_cpulist(self.mem_nodes)}")
        if self.weights:
            lines.append(f"weights:      {format_weights(self.weights)} (system-wide, "
                         f"/sys/kernel/mm/mempolicy/weighted_interleave)")
        lines.append(f"mems allowed: {format_cpulist(self.mems_allowed)}")
        others = {tid: c for tid, c in self.threads.items() if c != self.cpus}
        if others:
            lines.append("threads with other affinity: " +
                         ", ".join(f"{tid}:{format_cpulist(c)}" for tid, c in sorted(others.items())))
        lines.append(f"backend:      {self.backend}")
        return "\n".join(lines)


def current_binding(backend: "BackendName | None" = None) -> Binding:
    """Read the calling thread's affinity and memory policy, and every thread's affinity."""
    be, _ = get_backend(backend)
    try:
        policy, nodes = be.get_mempolicy()
    except BindError as e:
        log.debug("memory policy unreadable through %s: %s", be.name, e)
        policy, nodes = None, frozenset()
    walk = walk_all(be, live.gettid())
    threads = {walk.tids[i]: walk.before(i) for i in range(walk.processed) if walk.status[i] != WALK_EXITED}
    mems = live.mems_allowed()
    if mems is None:
        mems = live.limits().allowed_nodes
    weights: dict[int, int] = {}
    if policy == "weighted-interleave":
        system = live.interleave_weights()
        if system is not None:
            weights = {n: w for n, w in system.weights.items() if n in nodes}
    return Binding(cpus=be.get_affinity(0), mem_policy=policy, mem_nodes=nodes, mems_allowed=mems,
                   backend=be.name, threads=threads, weights=weights)


def verify_current(plan: Plan, strict: Strictness | None = None, *, threads: "ThreadMode" = "matching",
                   backend: "BackendName | None" = None) -> BindReport:
    """Whether the kernel holds ``plan`` now, without changing anything: a :class:`BindReport` whose warnings name
    every difference (the other threads' CPUs too, unless ``threads="current"``). ``strict=True`` raises
    :class:`NumabindError` on any difference; ``"partial"`` only when neither the CPUs nor the memory policy match.
    """
    check_plan(plan, "verify_current")
    check_threads(threads)
    strict = strict_default(strict)
    be, why = get_backend(backend)
    me = live.gettid()
    walk = be.affinity_many([me] if threads == "current" else live.thread_ids(me), None)
    cpus = walk.before(0) if walk.processed and walk.status[0] >= 0 else be.get_affinity(0)
    warnings: list[str] = []
    notes: list[str] = []
    if plan.cpus is not None:
        if cpus != plan.cpus:
            warnings.append(f"the calling thread has CPUs {format_cpulist(cpus)}, not {format_cpulist(plan.cpus)}")
        others = [walk.tids[i] for i in range(1, walk.processed)
                  if walk.status[i] != WALK_EXITED and walk.before(i) != plan.cpus]
        if others:
            warnings.append(f"{len(others)} other thread(s) have other CPUs than {format_cpulist(plan.cpus)}: "
                            + ", ".join(map(str, others[:8])) + (" ..." if len(others) > 8 else ""))
    try:
        policy, nodes = be.get_mempolicy()
    except BindError as e:
        policy, nodes = None, frozenset()
        if plan.mem_policy is not None:
            notes.append(f"the memory policy could not be read ({e}); it was not verified")
    mem_differs = (plan.mem_policy is not None and policy is not None
                   and (policy, nodes) != (plan.mem_policy, plan.mem_nodes or frozenset()))
    if mem_differs:
        warnings.append(f"the memory policy is {policy} {format_cpulist(nodes)}".rstrip() +
                        f", not {plan.mem_policy} {format_cpulist(plan.mem_nodes or ())}".rstrip())
    weights = None
    if plan.weights and policy == "weighted-interleave":
        from ._util import FrozenMap

        system = live.interleave_weights()
        got = {} if system is None else {n: system.weights.get(n) for n in plan.weights}
        weights = FrozenMap({n: w for n, w in got.items() if w is not None})
        differ = {n: w for n, w in plan.weights.items() if got.get(n) != w}
        if differ:
            mem_differs = True
            warnings.append(f"the system's interleave weights are "
                            f"{format_weights(weights) or 'unreadable'}, not {format_weights(differ)}")
    requested = (plan.cpus is not None) + (plan.mem_policy is not None)
    failed = (plan.cpus is not None and cpus != plan.cpus) + mem_differs
    if warnings and (strict is True or (strict == "partial" and failed == requested)):
        raise NumabindError("; ".join(warnings))
    for w in warnings:
        log.warning("%s", w)
    plannable = plannable_policy(policy)
    applied = read_back_plan(cpus, plannable, (nodes or None) if plannable else None, weights)
    return BindReport(requested=plan, applied=applied, backend=be.name, backend_reason=why, warnings=warnings,
                      notes=notes, _walk=walk)
