"""``numabind.check()`` (:func:`check`): does this machine, this container and this process's limits let numabind's plans hold?

For the plans numabind would apply here (every GPU's, else a worker per node's; or the ones given) it

* tries every kernel call the plans need for real, in a short-lived child (:mod:`numabind.preflight.probes`), and names
  the cause and the fix of each refusal in ``numabind run``'s words;
* proves placement: the child binds each plan, touches memory and counts where the pages went, and a thread it
  starts after the bind does the same;
* cross-checks the GPUs' identity across every source present (:mod:`numabind.preflight.gpus`);
* reports pod alignment: GPUs whose node the cpuset leaves out, a Guaranteed pod without exclusive CPUs
  (:mod:`numabind.preflight.pods`);
* with ``measure=True``, measures the node-to-node latency and bandwidth matrices (and host to GPU copies) in
  another child, in about ``seconds`` (:mod:`numabind.preflight.measure`).

It returns a frozen :class:`CheckReport`; ``numabind check`` prints it and exits with its ``exit_status``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..cpulist import format_cpulist
from ..errors import PlanError
from .pods import PodAlignment, pod_alignment
from .probes import Refusal, classify, run_child

if TYPE_CHECKING:  # pragma: no cover
    from ..plan import Plan
    from ..topology import Topology
    from .gpus import GpuIdentity
    from .measure import Measurement

__all__ = ["CheckReport", "Placement", "Trial", "check", "default_plans", "quick"]

#: The share of a plan's pages that must be on its nodes for its placement to hold.
MIN_SHARE = 0.99
#: The child's time limit by default, in seconds (trials and placement together).
DEFAULT_TIMEOUT = 60.0
#: What a trial's call is called in the one-line verdict.
_LABELS = {"set_mempolicy": "memory policy", "sched_setaffinity": "CPU affinity", "mbind": "mbind",
           "migrate_pages": "migrate_pages", "move_pages": "move_pages"}


@dataclass(frozen=True)
class Trial:
    """One kernel call tried in the child: ``call`` (the system call), ``what`` it was asked, ``ok``; when refused,
    ``errno`` (its name), ``error`` (the refusal, as ``run`` says it) and ``refusal`` (cause and fix)."""

    call: str
    what: str
    ok: bool
    errno: str | None = None
    error: str | None = None
    refusal: Refusal | None = None

    def describe(self) -> str:
        if self.ok:
            return f"{self.call} ({self.what}): allowed"
        head = f"{self.call} ({self.what}): refused" + (f" ({self.errno})" if self.errno else "")
        if self.refusal is None:
            return f"{head}: {self.error}"
        return f"{head}, cause: {self.refusal.cause}: {self.refusal.detail}"

    def to_dict(self) -> dict[str, Any]:
        return {"call": self.call, "what": self.what, "ok": self.ok, "errno": self.errno, "error": self.error,
                "cause": None if self.refusal is None else self.refusal.cause,
                "fix": None if self.refusal is None else self.refusal.fix,
                "detail": None if self.refusal is None else self.refusal.detail}


@dataclass(frozen=True)
class Placement:
    """Where one plan's memory went: ``nodes`` the plan's memory nodes; ``pages`` touched, ``by_node`` node ->
    pages; ``share`` of the faulted pages on ``nodes``; the same for a thread started after the bind
    (``late_share``) and whether it held the plan's CPUs (``late_cpus_held``); ``error`` when it could not be
    measured, ``warnings`` what the bind degraded."""

    who: str
    plan: str
    nodes: frozenset[int]
    pages: int = 0
    by_node: Mapping[int, int] = field(default_factory=dict)
    share: float | None = None
    late_share: float | None = None
    late_cpus_held: bool | None = None
    warnings: tuple[str, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return (self.error is None and not self.warnings and self.share is not None and self.share >= MIN_SHARE
                and self.late_share is not None and self.late_share >= MIN_SHARE and self.late_cpus_held is True)

    def describe(self) -> str:
        where = f"node {format_cpulist(self.nodes)}"
        if self.error is not None:
            return f"{self.who} ({where}): not measured: {self.error}"
        text = (f"{self.who} ({where}): {_percent(self.share)} of {self.pages} pages on {where}; a thread started "
                f"after the bind: {_percent(self.late_share)} on it, CPUs "
                f"{'held' if self.late_cpus_held else 'NOT held'}")
        return text + "".join(f"; warning: {w}" for w in self.warnings)

    def to_dict(self) -> dict[str, Any]:
        return {"who": self.who, "plan": self.plan, "nodes": format_cpulist(self.nodes), "pages": self.pages,
                "by_node": {str(n): c for n, c in sorted(self.by_node.items())}, "share": self.share,
                "late_thread": {"share": self.late_share, "cpus_held": self.late_cpus_held},
                "warnings": list(self.warnings), "error": self.error, "ok": self.ok}


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{share:.1%}"


@dataclass(frozen=True)
class CheckReport:
    """What :func:`check` found. ``plans``: (who, plan) checked; ``trials`` and ``placement`` from the child;
    ``gpus`` the GPU identity cross-check (None when not run); ``pods`` the pod alignment; ``skipped``: the parts
    not done and why; ``problems``: what failed outside those parts (a GPU without a plan, the child's death);
    ``backend`` the child's backend; ``seconds`` the time it took; ``measure`` the measured matrices (None: not
    asked, ``check(measure=True)`` / ``--measure``)."""

    root: str
    plans: tuple[tuple[str, Plan], ...]
    trials: tuple[Trial, ...]
    placement: tuple[Placement, ...]
    gpus: GpuIdentity | None
    pods: PodAlignment
    skipped: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    backend: str | None = None
    seconds: float = 0.0
    measure: Measurement | None = None

    @property
    def ok(self) -> bool:
        """Everything holds: every call allowed, every placement on its nodes, the GPUs agree, the pod aligned."""
        return (not self.problems and all(t.ok for t in self.trials) and all(p.ok for p in self.placement)
                and (self.gpus is None or self.gpus.ok) and self.pods.ok
                and (self.measure is None or self.measure.ok))

    @property
    def exit_status(self) -> int:
        """0 when everything holds, 1 when something would fail or degrade."""
        return 0 if self.ok else 1

    def failures(self) -> list[str]:
        """One line per thing that would fail or degrade, the most fundamental first."""
        out = list(self.problems)
        out += [t.describe() for t in self.trials if not t.ok]
        out += [p.describe() for p in self.placement if not p.ok]
        if self.gpus is not None and not self.gpus.ok:
            out += [f"GPU identity: {d.describe()}" for d in self.gpus.disagreements]
        out += [f"pod alignment: {line}" for line in self.pods.problems]
        if self.measure is not None:
            out += self.measure.problems()
        return out

    def verdict(self) -> str:
        """One line for the first screen: the first thing that fails, with its cause and fix; else what held."""
        refused = next((t for t in self.trials if not t.ok), None)
        if refused is not None:
            label = _LABELS.get(refused.call, refused.call)
            fix = refused.refusal.fix if refused.refusal is not None else (refused.error or "")
            return f"{label}: refused ({refused.errno or 'error'}): {fix}"
        if self.problems:
            return self.problems[0]
        failed = next((p for p in self.placement if not p.ok), None)
        if failed is not None:
            return f"placement: {failed.describe()}"
        if self.gpus is not None and not self.gpus.ok and self.gpus.disagreements:
            return f"GPU identity: {self.gpus.disagreements[0].describe()}"
        if self.pods.problems:
            return f"pod alignment: {self.pods.problems[0]}"
        if self.measure is not None and self.measure.problems():
            return self.measure.problems()[0]
        return "ok: " + self._held()

    def _held(self) -> str:
        parts = []
        if self.trials:
            calls = sorted({t.call for t in self.trials})
            parts.append(f"{', '.join(calls)} allowed")
        if self.placement:
            nodes = format_cpulist(set().union(*(p.nodes for p in self.placement)))
            parts.append(f"placement held on node {nodes}")
        parts += [f"{s} skipped" for s in self._skipped_parts()]
        return "; ".join(parts) or "nothing to check"

    def _skipped_parts(self) -> list[str]:
        return [s.split(":", 1)[0] for s in self.skipped]

    def describe(self) -> str:
        """The report as ``numabind check`` prints it."""
        lines = [f"numabind check ({'ok' if self.ok else 'FAILED'}, {self.seconds:.2f} s"
                 + (f", backend {self.backend}" if self.backend else "") + ")", "plans:"]
        lines += [f"  {who}: {plan.describe()}" for who, plan in self.plans] or ["  (none)"]
        if self.trials:
            lines.append("kernel calls (tried in a child):")
            lines += [f"  {t.describe()}" for t in self.trials]
        if self.placement:
            lines.append(f"placement (pages on the plan's nodes; at least {MIN_SHARE:.0%} must be):")
            lines += [f"  {p.describe()}" for p in self.placement]
        if self.gpus is not None:
            lines.append(f"GPU identity: {', '.join(self.gpus.sources) or 'no source'}: "
                         + ("agree" if self.gpus.ok else "DISAGREE"))
            lines += [f"  {d.describe()}" for d in self.gpus.disagreements]
        lines.append(f"pod alignment: {self.pods.describe()}")
        if self.measure is not None:
            lines.append(self.measure.describe())
        lines += [f"skipped: {s}" for s in self.skipped]
        lines += [f"problem: {p}" for p in self.problems]
        lines.append(f"verdict: {self.verdict()}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``numabind check --json`` prints exactly this."""
        return {
            "ok": self.ok, "exit_status": self.exit_status, "verdict": self.verdict(), "root": self.root,
            "seconds": round(self.seconds, 3), "backend": self.backend,
            "plans": [{"who": who, "plan": plan.describe(), "cpus": _ids(plan.cpus),
                       "mem_policy": plan.mem_policy, "mem_nodes": _ids(plan.mem_nodes)} for who, plan in self.plans],
            "trials": [t.to_dict() for t in self.trials],
            "placement": [p.to_dict() for p in self.placement],
            "gpus": None if self.gpus is None else self.gpus.to_dict(),
            "pods": self.pods.to_dict(),
            "measure": None if self.measure is None else self.measure.to_dict(),
            "skipped": list(self.skipped), "problems": list(self.problems), "failures": self.failures(),
        }


def _ids(ids: frozenset[int] | None) -> str | None:
    return None if ids is None else format_cpulist(ids)


# ----------------------------------------------------------------------------- which plans
def node_plans(topology: Topology) -> list[tuple[str, Plan]]:
    """Without GPUs: a worker per node with CPUs this process may use (its memory bound there when allowed)."""
    from ..plan import Plan

    out = []
    for n, node in sorted(topology.nodes.items()):
        cpus = node.cpus & topology.allowed_cpus
        if not cpus:
            continue
        mem = frozenset({n}) if node.has_memory and n in topology.allowed_nodes else None
        out.append((f"node {n}", Plan(cpus=cpus, mem_policy="bind" if mem else None, mem_nodes=mem)))
    return out


def default_plans(topology: Topology, gpus: Iterable[int] | None = None) -> tuple[list[tuple[str, Plan]], list[str]]:
    """((who, plan) per GPU in ``gpus`` (default every visible GPU), or per node when there is none; one line per
    GPU that cannot be placed). Plans that are the same are checked once, for all their GPUs."""
    from ..strategies import plan_table

    if gpus is None and not topology.gpus:
        return node_plans(topology), []
    rows = plan_table(topology, mode="node", policy="bind", gpus=None if gpus is None else list(gpus))
    problems = [f"gpu {r.gpu} cannot be placed: {r.error}" for r in rows if r.plan is None]
    by_plan: dict[Plan, list[int]] = {}
    for r in rows:
        if r.plan is not None:
            by_plan.setdefault(r.plan, []).append(r.gpu)
    plans = [(("gpus " if len(ids) > 1 else "gpu ") + format_cpulist(ids), plan) for plan, ids in by_plan.items()]
    return plans, problems


# ----------------------------------------------------------------------------- the report from the child's answer
def _trials_of(answer: Mapping[str, Any]) -> tuple[Trial, ...]:
    raw = answer.get("trials") or []
    facts = answer.get("status") or {}
    failed = [t for t in raw if not t["ok"] and t.get("errno") is not None]
    every_enosys = bool(failed) and len(failed) == len(raw) and all(t["errno"] == _errno("ENOSYS") for t in failed)
    out = []
    for t in raw:
        err = t.get("errno")
        refusal = None
        if not t["ok"] and err is not None:
            refusal = classify(t["call"], err, facts, policy=t.get("policy"), nodes=t.get("nodes") or (),
                               cpus=t.get("cpus") or (), every_call_enosys=every_enosys)
        out.append(Trial(t["call"], t["what"], bool(t["ok"]), None if err is None else _errno_name(err),
                         t.get("error"), refusal))
    return tuple(out)


def _errno(name: str) -> int:
    import errno

    return int(getattr(errno, name))


def _errno_name(err: int) -> str:
    import errno

    return errno.errorcode.get(err, f"errno {err}")


def _share(counts: Mapping[str, int], nodes: frozenset[int]) -> float | None:
    faulted = sum(counts.values())
    return None if not faulted else sum(c for n, c in counts.items() if int(n) in nodes) / faulted


def _placement_of(who: str, plan: Plan, raw: Mapping[str, Any]) -> Placement:
    nodes = plan.mem_nodes or frozenset()
    if raw.get("error"):
        return Placement(who, plan.describe(), nodes, error=str(raw["error"]))
    late = raw.get("late_thread") or {}
    by_node = {int(n): int(c) for n, c in (raw.get("by_node") or {}).items()}
    error = None
    if raw.get("not_faulted"):
        error = f"{raw['not_faulted']} of {raw.get('pages')} touched pages are not on any node"
    if late.get("error"):
        error = f"the thread started after the bind failed: {late['error']}"
    held = None if plan.cpus is None or "cpus" not in late else frozenset(late["cpus"]) == plan.cpus
    return Placement(who, plan.describe(), nodes, pages=int(raw.get("pages") or 0), by_node=by_node,
                     share=_share(raw.get("by_node") or {}, nodes),
                     late_share=_share(late.get("by_node") or {}, nodes),
                     late_cpus_held=True if plan.cpus is None and "cpus" in late else held,
                     warnings=tuple(raw.get("warnings") or ()), error=error)


def _placements(plans: Sequence[tuple[str, Plan]], answer: Mapping[str, Any]) -> tuple[Placement, ...]:
    measured = [(who, plan) for who, plan in plans if plan.mem_policy is not None]
    raws = answer.get("placement") or []
    return tuple(_placement_of(who, plan, raw) for (who, plan), raw in zip(measured, raws))


# ----------------------------------------------------------------------------- check()
def _live(root: str | os.PathLike[str] | None) -> tuple[str, bool]:
    """(the discovery root as a string, whether it is this machine)."""
    chosen = os.fspath(root) if root is not None else os.environ.get("NUMABIND_FSROOT") or "/"
    return chosen, os.path.realpath(chosen) == "/"


def _plans_for(topology: Topology, gpus: Iterable[int] | None,
               plans: Iterable[Plan] | None) -> tuple[list[tuple[str, Plan]], list[str]]:
    if plans is None:
        return default_plans(topology, gpus)
    given = list(plans)
    return [(f"plan {k}" if len(given) > 1 else "plan", p) for k, p in enumerate(given)], []


def check(root: str | os.PathLike[str] | None = None, *, gpus: Iterable[int] | None = None,
          plans: Iterable[Plan] | None = None, placement: bool = True, mib: int = 64,
          timeout: float = DEFAULT_TIMEOUT, backend: str | None = None, measure: bool = False,
          seconds: float | None = None) -> CheckReport:
    """Check that numabind's plans hold here (docs/check.rst); never binds the caller.

    ``root``: the discovery root (default ``$NUMABIND_FSROOT``, else ``/``); a replayed one is read for the plans,
    the GPUs and the pod, and the kernel calls and placement are skipped (they are this host's, not its).
    ``gpus``: the GPUs whose plans to check (default every visible GPU's, else a worker per node's); ``plans``:
    explicit plans instead. ``placement=False`` only tries the calls (fast: :func:`quick`); ``mib``: MiB each
    placement touches; ``timeout``: seconds the child may take (it is killed after, and that is reported);
    ``backend``: force one, as ``NUMABIND_BACKEND`` does. ``measure=True`` also measures the node-to-node
    matrices in another child, in about ``seconds`` (default :data:`numabind.preflight.measure.DEFAULT_SECONDS`;
    skipped on a replayed root).
    """
    from ..topology import discover
    from .gpus import cross_check_gpus

    from .measure import DEFAULT_SECONDS, measure as measure_matrices

    if mib < 1:
        raise PlanError(f"check: mib={mib} touches no memory; give 1 or more MiB")
    if seconds is not None and not measure:
        raise PlanError(f"check: seconds={seconds!r} is the time of the measurement; give measure=True with it")
    if measure and not (seconds is None or seconds > 0):
        raise PlanError(f"check: seconds={seconds!r} gives no time to measure; give a number above 0")
    started = time.monotonic()
    where, live = _live(root)
    topology = discover(where)
    chosen, problems = _plans_for(topology, gpus, plans)
    skipped: list[str] = []
    answer: dict[str, Any] = {}
    if not live:
        skipped.append(f"kernel calls and placement: the discovery root {where!r} is a replayed machine, whose "
                       f"kernel is not this host's (run numabind check on that machine)")
    elif not chosen:
        skipped.append("kernel calls and placement: no plan to check")
    else:
        answer = run_child([p for _, p in chosen], placement=placement, mib=mib, timeout=timeout, backend=backend)
        if answer.get("error"):
            problems.append(str(answer["error"]))
        if answer.get("backend_error"):
            problems.append(str(answer["backend_error"]))
        if not placement:
            skipped.append("placement: not asked (placement=False, --no-placement)")
    trials = _trials_of(answer)
    if live and placement and chosen and trials and not all(t.ok for t in trials):
        skipped.append("placement: not measured, since a call it needs was refused")
    measured = None
    if measure and live:
        measured = measure_matrices(topology, seconds=DEFAULT_SECONDS if seconds is None else seconds,
                                    backend=backend)
    elif measure:
        skipped.append(f"measure: the discovery root {where!r} is a replayed machine (run numabind check --measure "
                       f"on that machine)")
    return CheckReport(root=where, plans=tuple(chosen), trials=trials, placement=_placements(chosen, answer),
                       gpus=cross_check_gpus(topology), pods=pod_alignment(topology), skipped=tuple(skipped),
                       problems=tuple(problems), backend=answer.get("backend"),
                       seconds=time.monotonic() - started, measure=measured)


def quick(root: str | os.PathLike[str] | None = None, *, timeout: float = DEFAULT_TIMEOUT) -> CheckReport:
    """The fast part of :func:`check` (the calls only, no placement): for the first screen's one-line verdict."""
    return check(root, placement=False, timeout=timeout)
