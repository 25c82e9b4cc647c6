"""Apply a :class:`~numabind.plan.Plan` to the running process, then verify it.

``bind_current`` sets the CPU affinity of every thread and the memory policy
of the calling thread through a backend, reads back what the kernel now says
and returns a :class:`BindReport`. A binding that cannot be applied in full is
either raised (``strict=True``) after rolling back, or degraded step by step —
hard bind → preferred → CPU only → nothing — with a WARNING per step
(``strict=False``; ``strict="partial"`` degrades too, but raises when nothing
of the plan is in force in the end).
"""

from __future__ import annotations

import errno as _errno
import logging
import os
from dataclasses import dataclass, field

from .backends import Backend, get_backend
from .backends.base import MemPolicyState, node_pages
from .cpulist import format_cpulist
from ._env import Strictness, strict_from_env
from .errors import BindError, NumabindError, PlanError
from .plan import MEM_POLICIES, Plan

__all__ = ["BindReport", "Binding", "STRICT_VALUES", "ThreadResult", "bind_current", "current_binding",
           "strict_default", "strict_label"]

log = logging.getLogger(__name__)

THREAD_MODES = ("matching", "all", "current")


STRICT_VALUES = (True, False, "partial")


def strict_default(strict: Strictness | None) -> Strictness:
    """``strict`` if given (True, False or ``"partial"``), else ``NUMABIND_STRICT`` from the environment.

    See :mod:`numabind._env` for the accepted spellings; any other value is a PlanError.
    """
    if strict is None:
        return strict_from_env()
    if strict == "partial":
        return "partial"
    if isinstance(strict, int) and strict in (0, 1):   # True, False (and 0/1, as before)
        return bool(strict)
    raise PlanError(f"strict={strict!r} is not one of True, False, 'partial' (or None for $NUMABIND_STRICT)")


def strict_label(strict: Strictness) -> str:
    """``"strict"``, ``"lenient"`` or ``"partial"``: the word used in messages and command lines."""
    return "partial" if strict == "partial" else "strict" if strict else "lenient"


@dataclass(frozen=True)
class ThreadResult:
    """What happened to one thread's CPU affinity."""

    tid: int
    name: str
    before: frozenset[int]
    after: frozenset[int] | None
    status: str          # "bound" | "left-alone" | "exited" | "failed" | "unchanged"
    detail: str = ""


@dataclass(frozen=True)
class BindReport:
    """The outcome of :func:`bind_current`."""

    requested: Plan
    applied: Plan                      # read back from the kernel after binding
    backend: str                       # "libnuma" | "syscall" | "numactl" | "none"
    backend_reason: str
    threads: tuple[ThreadResult, ...] = ()
    warnings: tuple[str, ...] = ()     # every degradation, with errno and syscall
    notes: tuple[str, ...] = ()        # facts that are not degradations
    pages_not_migrated: int | None = None   # migrate=True: pages left on other nodes (None: not measured)
    pages_migrated: int | None = None       # migrate=True: pages moved onto the plan's nodes

    @property
    def ok(self) -> bool:
        """True when everything requested is in force, with no degradation."""
        return not self.warnings

    def describe(self) -> str:
        lines = [f"requested: {self.requested.describe()}",
                 f"applied:   {self.applied.describe()}",
                 f"backend:   {self.backend} ({self.backend_reason})"]
        counts: dict[str, int] = {}
        for t in self.threads:
            counts[t.status] = counts.get(t.status, 0) + 1
        if counts:
            lines.append("threads:   " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
        if self.pages_migrated is not None or self.pages_not_migrated is not None:
            lines.append(f"migrated:  {self.pages_migrated if self.pages_migrated is not None else '?'} pages moved, "
                         f"{self.pages_not_migrated if self.pages_not_migrated is not None else '?'} left behind")
        lines += [f"warning:   {w}" for w in self.warnings]
        lines += [f"note:      {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass(frozen=True)
class Binding:
    """What the kernel says now (like ``numactl --show``)."""

    cpus: frozenset[int]               # affinity of the calling thread
    mem_policy: str | None             # None when the backend cannot read it
    mem_nodes: frozenset[int]
    mems_allowed: frozenset[int]       # the cpuset's memory nodes
    backend: str
    threads: dict[int, frozenset[int]] = field(default_factory=dict, compare=False)

    @property
    def plan(self) -> Plan:
        """The binding as a Plan (a policy a Plan cannot express shows as None)."""
        policy = _plannable(self.mem_policy)
        return Plan(cpus=self.cpus, mem_policy=policy, mem_nodes=self.mem_nodes if policy else None)

    def describe(self) -> str:
        lines = [f"cpus:         {format_cpulist(self.cpus)}",
                 f"policy:       {self.mem_policy or 'unknown (backend ' + self.backend + ' cannot read it)'}"]
        if self.mem_nodes:
            lines.append(f"nodes:        {format_cpulist(self.mem_nodes)}")
        lines.append(f"mems allowed: {format_cpulist(self.mems_allowed)}")
        others = {tid: c for tid, c in self.threads.items() if c != self.cpus}
        if others:
            lines.append("threads with other affinity: " +
                         ", ".join(f"{tid}:{format_cpulist(c)}" for tid, c in sorted(others.items())))
        lines.append(f"backend:      {self.backend}")
        return "\n".join(lines)


def _plannable(policy: str | None) -> str | None:
    """``policy`` if a Plan can carry it (kernels newer than numabind have more modes), else None."""
    return policy if policy in MEM_POLICIES else None


def current_binding(backend: str | None = None) -> Binding:
    """Read the calling thread's affinity and memory policy, and every thread's affinity."""
    be, _ = get_backend(backend)
    limits = be.kernel_limits()
    try:
        policy, nodes = be.get_mempolicy()
    except BindError as e:
        log.debug("memory policy unreadable through %s: %s", be.name, e)
        policy, nodes = None, frozenset()
    threads = {}
    for tid in be.thread_ids():
        try:
            threads[tid] = be.get_affinity(tid)
        except BindError:
            continue
    return Binding(cpus=be.get_affinity(0), mem_policy=policy, mem_nodes=nodes,
                   mems_allowed=limits.mems_allowed, backend=be.name, threads=threads)


class _Binder:
    """One bind_current call: state, rollback and the report under construction."""

    def __init__(self, plan: Plan, strict: Strictness, threads: str, be: Backend, why: str) -> None:
        self.plan, self.strict, self.thread_mode, self.be, self.why = plan, strict, threads, be, why
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self.failures: list[NumabindError] = []    # every refusal that was degraded (strict="partial")
        self.undo: list = []
        self.pages_migrated: int | None = None
        self.limits = be.kernel_limits()
        self.mem_target: tuple[str, frozenset[int]] | None = None   # what was set, after the ladder
        self.cpu_target: frozenset[int] | None = None

    # -- degradation ------------------------------------------------------
    def warn(self, message: str) -> None:
        self.warnings.append(message)
        log.warning("%s", message)

    def fail(self, exc: NumabindError) -> None:
        """In strict mode roll back and raise; otherwise the caller degrades."""
        if self.strict is True:
            self.rollback()
            raise exc
        self.failures.append(exc)

    def check_partial(self) -> None:
        """``strict="partial"``: roll back and raise when neither the CPUs nor any memory step is in force."""
        plan = self.plan
        if self.strict != "partial" or (plan.cpus is None and plan.mem_policy is None):
            return
        if self.cpu_target is not None or self.mem_target is not None:
            return
        self.rollback()
        text = (f"nothing of the plan ({plan.describe()}) could be applied (strict='partial'): "
                + "; ".join(self.warnings))
        refused = next((e for e in self.failures if isinstance(e, BindError)), None)
        if refused is not None:
            raise BindError(refused.errno, refused.syscall, text)
        raise PlanError(text)

    def rollback(self) -> None:
        for action in reversed(self.undo):
            try:
                action()
            except BindError as e:  # a thread that exited meanwhile, typically
                log.debug("rollback step failed: %s", e)
        self.undo.clear()

    # -- memory -------------------------------------------------------------
    def memory_candidates(self) -> list[tuple[str, frozenset[int]]]:
        plan = self.plan
        nodes = plan.mem_nodes or frozenset()
        if not nodes:
            return [(plan.mem_policy, nodes)]
        usable = nodes & self.limits.mems_allowed & self.limits.memory_nodes
        dropped = nodes - usable
        if dropped:
            why = []
            missing = dropped - self.limits.online_nodes
            if missing:
                why.append(f"nodes {format_cpulist(missing)} do not exist "
                           f"(online nodes: {format_cpulist(self.limits.online_nodes)})")
            memless = dropped - missing - self.limits.memory_nodes
            if memless:
                why.append(f"nodes {format_cpulist(memless)} have no memory")
            if dropped - missing - self.limits.mems_allowed:
                why.append(f"nodes {format_cpulist(dropped - missing - self.limits.mems_allowed)} are outside "
                           f"Mems_allowed {format_cpulist(self.limits.mems_allowed)} (cpuset)")
            self.fail(PlanError(f"memory policy {plan.mem_policy} {format_cpulist(nodes)}: " + "; ".join(why)))
            if not usable:
                self.warn(f"memory policy {plan.mem_policy} {format_cpulist(nodes)} not applied: "
                          + "; ".join(why))
                return []
            self.warn(f"memory nodes narrowed from {format_cpulist(nodes)} to {format_cpulist(usable)}: "
                      + "; ".join(why))
        ladder = [(plan.mem_policy, usable)]
        if plan.mem_policy in ("bind", "interleave", "preferred-many") and len(usable) > 1:
            if plan.mem_policy != "preferred-many":
                ladder.append(("preferred-many", usable))
        if plan.mem_policy != "preferred":
            ladder.append(("preferred", frozenset({min(usable)})))
        return ladder

    def apply_memory(self) -> None:
        if self.plan.mem_policy is None:
            return
        if not self.be.in_process_memory:
            try:
                self.be.set_mempolicy(self.plan.mem_policy, self.plan.mem_nodes or frozenset())
            except BindError as e:  # the backend's own explanation of why it cannot
                self.fail(e)
                self.warn(f"{e}; memory policy left unchanged")
            return
        old: MemPolicyState | None
        try:
            old = self.be.save_mempolicy()
        except BindError as e:
            if self.strict is True:  # nothing has been changed yet: refuse rather than risk a change that cannot be undone
                raise BindError(e.errno, "get_mempolicy",
                                f"the calling thread's memory policy cannot be read ({e}), so a strict bind "
                                f"could not be rolled back; nothing was changed") from None
            old = None
            self.notes.append(f"the old memory policy could not be read ({e}); it could not have been "
                              f"restored had a later step failed")
            log.debug("cannot read the old memory policy: %s", e)
        ladder = self.memory_candidates()
        if not ladder:
            return
        for k, (policy, nodes) in enumerate(ladder):
            try:
                self.be.set_mempolicy(policy, nodes)
            except BindError as e:
                self.fail(e)
                self.warn(f"{e}; memory policy {policy} {format_cpulist(nodes)} not applied")
                continue
            self.mem_target = (policy, nodes)
            if old is not None:
                self.undo.append(lambda old=old: self.be.restore_mempolicy(old))
            if k:
                self.warn(f"memory policy degraded to {policy} {format_cpulist(nodes)}")
            return
        self.warn("memory policy left unchanged (every step of the ladder was refused)")

    # -- CPUs -----------------------------------------------------------------
    def target_cpus(self) -> frozenset[int] | None:
        cpus = self.plan.cpus
        if cpus is None:
            return None
        allowed = self.limits.online_cpus
        source = "online CPUs"
        if self.limits.cpuset_cpus is not None:
            allowed = allowed & self.limits.cpuset_cpus
            source = f"online CPUs in the cpuset ({self.limits.cpuset_source})"
        outside = cpus - allowed
        if not outside:
            return cpus
        msg = (f"CPUs {format_cpulist(outside)} are outside the {source} "
               f"{format_cpulist(allowed)}")
        self.fail(PlanError(msg))
        if not cpus & allowed:
            self.warn(f"{msg}; CPU binding not applied")
            return None
        self.warn(f"{msg}; CPU binding narrowed to {format_cpulist(cpus & allowed)}")
        return cpus & allowed

    def apply_cpus(self) -> list[ThreadResult]:
        cpus = self.target_cpus()
        me = self.be.gettid()
        caller_before = self.be.get_affinity(0)
        results: list[ThreadResult] = []
        if cpus is not None:
            try:
                self.be.set_affinity(0, cpus)
                self.undo.append(lambda: self.be.set_affinity(0, caller_before))
            except BindError as e:
                self.fail(e)
                self.warn(f"{e}; CPU binding not applied")
                cpus = None
        self.cpu_target = cpus
        results.append(ThreadResult(me, self.be.thread_name(me), caller_before, self.be.get_affinity(0),
                                    "unchanged" if cpus is None else "bound"))
        if self.thread_mode == "current":
            return results
        for tid in self.be.thread_ids():
            if tid == me:
                continue
            name = self.be.thread_name(tid)
            try:
                before = self.be.get_affinity(tid)
            except BindError as e:
                if e.errno == _errno.ESRCH:
                    results.append(ThreadResult(tid, name, frozenset(), None, "exited"))
                    continue
                raise
            if cpus is None:
                results.append(ThreadResult(tid, name, before, before, "unchanged"))
                continue
            if self.thread_mode == "matching" and before != caller_before:
                results.append(ThreadResult(
                    tid, name, before, before, "left-alone",
                    f"pinned to {format_cpulist(before)}, not the process's {format_cpulist(caller_before)}"))
                continue
            try:
                self.be.set_affinity(tid, cpus)
            except BindError as e:
                if e.errno == _errno.ESRCH:
                    results.append(ThreadResult(tid, name, before, None, "exited"))
                    continue
                self.fail(e)
                self.warn(f"{e}; thread {tid} ({name}) keeps CPUs {format_cpulist(before)}")
                results.append(ThreadResult(tid, name, before, before, "failed", str(e)))
                continue
            self.undo.append(lambda tid=tid, before=before: self.be.set_affinity(tid, before))
            try:
                after = self.be.get_affinity(tid)
            except BindError:
                results.append(ThreadResult(tid, name, before, None, "exited"))
                continue
            results.append(ThreadResult(tid, name, before, after, "bound"))
        left = [r for r in results if r.status == "left-alone"]
        if left:
            shown = ", ".join(f"{r.tid} ({r.name}) on {format_cpulist(r.before)}" for r in left[:8])
            more = f" and {len(left) - 8} more" if len(left) > 8 else ""
            self.warn(f"{len(left)} thread(s) left out of the CPU binding by threads='matching' because their "
                      f"affinity differs from the calling thread's {format_cpulist(caller_before)}: {shown}{more}; "
                      f"they keep their CPUs (threads='all' binds them too)")
        return results

    # -- migration --------------------------------------------------------------
    def migrate(self) -> int | None:
        """Move the pages the process already has onto the plan's nodes (``migrate_pages``).

        Pages are counted per node in ``/proc/self/numa_maps`` before and after:
        ``self.pages_migrated`` is what left the other nodes, the return value what
        stayed there. Pages in shared or file-backed mappings (used by other
        processes too) cannot move without CAP_SYS_NICE and are a note; private
        pages that stayed (pinned, locked, busy) and a refused call (EPERM) are
        warnings. Counts are approximate while other threads allocate.
        """
        self.pages_migrated = None
        if not self.plan.migrate:
            return None
        target = (self.plan.mem_nodes or frozenset()) & self.limits.memory_nodes
        source = (self.limits.mems_allowed & self.limits.memory_nodes) - target
        if not target or not source:
            self.pages_migrated = 0
            return 0
        before = node_pages()
        try:
            refused = self.be.migrate_pages(0, source, target)
        except BindError as e:
            # the last step: in strict mode the binding is rolled back, and pages the call moved before
            # failing cannot be put back (the kernel says only that it failed); the error says so
            self.fail(BindError(e.errno, e.syscall, f"{e.detail}; the binding was rolled back, but pages "
                                                    f"moved before the error stay on nodes {format_cpulist(target)}"))
            self.warn(f"{e}; pages already allocated stay where they are")
            return None
        after = node_pages()
        src, dst = format_cpulist(source), format_cpulist(target)
        if before is None or after is None:
            self.notes.append("/proc/self/numa_maps is unreadable: pages moved were not counted")
            if refused:
                self.warn(f"migrate_pages could not move {refused} pages from nodes {src} to nodes {dst}")
            return refused
        self.pages_migrated = max(0, before.on(source) - after.on(source))
        left = after.on(source)
        shared = min(after.shared_on(source), left)
        private = left - shared
        log.info("migrated %d pages from nodes %s to nodes %s; %d stayed (%d shared or file-backed)",
                 self.pages_migrated, src, dst, left, shared)
        if private or refused:
            self.warn(f"{private} private pages stayed on nodes {src} (pinned, locked or busy)"
                      + (f"; migrate_pages reported {refused} pages it could not move" if refused else ""))
        if shared:
            self.notes.append(f"{shared} pages in shared or file-backed mappings stayed on nodes {src} "
                              f"(other processes map them; moving them needs CAP_SYS_NICE)")
        return left

    # -- verification -------------------------------------------------------------
    def read_back(self) -> Plan:
        """What the kernel says now; a difference from what was set is a failure."""
        cpus = self.be.get_affinity(0)
        try:
            policy, nodes = self.be.get_mempolicy()
        except BindError as e:
            if self.mem_target is not None:
                self.warn(f"cannot verify the memory policy: {e}")
            policy, nodes = None, None
        applied = Plan(cpus=cpus, mem_policy=_plannable(policy), mem_nodes=(nodes or None) if _plannable(policy) else None,
                       reason="read back from the kernel")
        if policy is not None and _plannable(policy) is None:
            self.notes.append(f"the calling thread's memory policy is {policy}, which a Plan cannot express; "
                              f"report.applied shows it as unchanged")
        if self.cpu_target is not None and cpus != self.cpu_target:
            message = (f"the kernel applied CPUs {format_cpulist(cpus)} instead of "
                       f"{format_cpulist(self.cpu_target)}")
            self.fail(BindError(_errno.EINVAL, "sched_setaffinity", message))
            self.warn(message)
        if self.mem_target is not None and policy is not None and (policy, nodes) != self.mem_target:
            want = f"{self.mem_target[0]} {format_cpulist(self.mem_target[1])}".strip()
            message = f"the kernel reports memory policy {policy} {format_cpulist(nodes)} instead of {want}"
            self.fail(BindError(_errno.EINVAL, "set_mempolicy", message))
            self.warn(message)
        return applied


def bind_current(plan: Plan, strict: Strictness | None = None, *, threads: str = "matching",
                 backend: str | None = None) -> BindReport:
    """Bind the running process to ``plan`` and report what the kernel now says.

    * CPU affinity is set on **every thread** (``threads="matching"``: those
      whose affinity equals the calling thread's, the others were pinned on
      purpose and are left alone; ``"all"``: every thread; ``"current"``: only
      the caller). Threads left alone by ``"matching"`` are a WARNING in
      ``report.warnings`` (so ``report.ok`` is False) naming them, but not a
      strict failure: nothing numabind tried to change was refused.
    * The memory policy is set on the calling thread; threads created
      afterwards inherit it. Other existing threads cannot be changed by any
      kernel interface; they allocate from the local node of the CPUs they are
      now bound to (``report.notes`` says so).
    * ``strict=True`` (default: ``NUMABIND_STRICT``) raises :class:`PlanError` or
      :class:`BindError` on any weakening and rolls back everything this call
      changed; it refuses before changing anything when the old memory policy
      cannot be read (it could not be put back). ``strict=False``: every
      degradation is in ``report.warnings`` and logged. ``strict="partial"``:
      degrades like False, but when in the end neither the CPU binding nor
      any step of the memory ladder is in force, it rolls back and raises
      (a :class:`BindError` when the kernel refused something, else a
      :class:`PlanError`), with every step's reason in the message.
    * ``migrate=True`` moves pages last, after everything else was applied and
      verified; if ``migrate_pages`` itself fails under strict, the binding is
      rolled back and the error says that pages already moved stay.

    Usable as a multiprocessing initializer:
    ``Pool(initializer=numabind.bind_current, initargs=(plan,))``.
    """
    if not isinstance(plan, Plan):
        raise PlanError(f"bind_current needs a numabind.Plan, got {type(plan).__name__}: {plan!r}")
    if threads not in THREAD_MODES:
        raise PlanError(f"threads={threads!r} is not one of {', '.join(THREAD_MODES)}")
    strict = strict_default(strict)
    be, why = get_backend(backend)
    b = _Binder(plan, strict, threads, be, why)
    try:
        b.apply_memory()
        results = b.apply_cpus()
        applied = b.read_back()
        b.check_partial()
        left = b.migrate()      # last: nothing after it can fail and leave pages moved for a binding undone
    except BaseException:
        # strict failures have rolled back already; anything unexpected must not leave a half binding
        b.rollback()
        raise
    others = [r for r in results[1:] if r.status != "exited"]
    if plan.mem_policy is not None and others and be.in_process_memory:
        b.notes.append(
            f"the memory policy was set on the calling thread only; {len(others)} other thread(s) keep "
            f"theirs and allocate from the local node of the CPUs they run on (use migrate=True to move "
            f"pages they already touched)")
    report = BindReport(requested=plan, applied=applied, backend=be.name, backend_reason=why,
                        threads=tuple(results), warnings=tuple(b.warnings), notes=tuple(b.notes),
                        pages_not_migrated=left, pages_migrated=b.pages_migrated)
    log.info("pid %d bound via %s: %s", os.getpid(), be.name, applied.describe())
    return report
