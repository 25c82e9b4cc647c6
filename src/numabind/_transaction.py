"""What :func:`numabind.bind.bind_current` does when the one-call path was not clean: a :class:`Transaction` keeps
the undo log, explains every refusal, degrades step by step with a WARNING each (or rolls back and raises under
``strict=True``), and migrates pages last. A clean bind never imports this module.
"""

from __future__ import annotations

import errno as _errno
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ._base import Strictness
    from .backends import Backend, BindCall, MemPolicyState, MemPolicySwap
    from .plan import Limits, Plan
    from .types import ThreadMode

from . import _proc, live
from ._base import getLogger
from ._util import FrozenMap
from .backends import (SETTLE_ROUNDS, WALK_BOUND, WALK_DIFFERS, WALK_FLAGS, WALK_LEFT_ALONE, WEIGHTS_DIR, AffinityWalk,
                       settle, walk_all, write_weights)
from .backends import refused as refused_error   # a refused call's BindError, naming the cpuset
from .cpulist import format_cpulist
from .errors import BindError, NumabindError, PlanError
from .plan import format_weights, narrow_cpus, narrow_nodes, plannable_policy, read_back_plan

__all__ = ["SETTLE_ROUNDS", "Transaction", "note_not_undone", "undo_call", "undo_walk"]

log = getLogger("numabind.bind")   # its warnings are bind_current's


class Transaction:
    """One bind_current call: what was changed (the undo log), the degradations, the report under way."""

    __slots__ = ("plan", "strict", "be", "warnings", "notes", "failures", "undo", "pages_migrated", "_limits",
                 "mem_target", "cpu_target", "mem_now", "weights_now", "locality", "cpus_taken")

    def __init__(self, plan: Plan, strict: Strictness, be: Backend) -> None:
        self.plan, self.strict, self.be = plan, strict, be
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self.failures: list[NumabindError] = []    # every refusal that was degraded (strict="partial")
        self.undo: list[tuple[str, Callable[[], list[str] | None]]] = []   # (what it puts back, the step)
        self.pages_migrated: int | None = None
        self._limits: Limits | None = None
        self.mem_target: tuple[str, frozenset[int]] | None = None   # what was set, after the ladder
        self.cpu_target: frozenset[int] | None = None
        self.mem_now: tuple[str, frozenset[int]] | BindError | None = None   # read back right after the set
        self.weights_now: Any = None     # the system's interleave weights, once read
        self.locality: Any = None        # after migrate: where the pages are
        self.cpus_taken = False          # another bind ran since the CPUs were set: they are its, not to undo

    def limits(self) -> Limits:
        """The live limits, read the first time a refusal or a difference needs explaining."""
        if self._limits is None:
            self._limits = live.limits()
        return self._limits

    # -- degradation ------------------------------------------------------
    def warn(self, message: str) -> None:
        self.warnings.append(message)
        log.warning("%s", message)

    def fail(self, exc: NumabindError, warning: str | None = None) -> None:
        """In strict mode roll back and raise; otherwise keep ``exc`` and warn ``warning``: the caller degrades."""
        if self.strict is True:
            note_not_undone(exc, self.rollback())
            raise exc
        self.failures.append(exc)
        if warning is not None:
            self.warn(warning)

    def check_partial(self) -> None:
        """``strict="partial"``: roll back and raise when neither the CPUs nor any memory step is in force."""
        plan = self.plan
        if self.strict != "partial" or (plan.cpus is None and plan.mem_policy is None):
            return
        if self.cpu_target is not None or self.mem_target is not None:
            return
        stayed = self.rollback()
        text = (f"nothing of the plan ({plan.describe()}) could be applied (strict='partial'): "
                + "; ".join(self.warnings))
        refused = next((e for e in self.failures if isinstance(e, BindError)), None)
        exc: NumabindError = (BindError(refused.errno, refused.syscall, text) if refused is not None
                              else PlanError(text))
        note_not_undone(exc, stayed)
        raise exc

    def rollback(self) -> list[str]:
        """Undo every change, the last first; returns what could not be put back (each also a WARNING)."""
        stayed: list[str] = []
        undo, self.undo = self.undo, []
        for what, action in reversed(undo):
            try:
                stayed += action() or ()
            except BindError as e:
                stayed.append(f"{what} was not put back: {e}")
        for text in stayed:
            log.warning("rollback: %s", text)
        return stayed

    # -- weighted interleave's system-wide weights ------------------------------
    def system_weights(self, again: bool = False) -> Any:
        """The live :class:`~numabind.topology.InterleaveWeights` (None: the kernel has none), read once."""
        if self.weights_now is None or again:
            self.weights_now = live.interleave_weights() or False
        return self.weights_now or None

    def apply_weights(self) -> None:
        """``set_weights=True``: write the plan's weights that differ from the system's, undone on rollback."""
        system = self.system_weights()
        weights = self.plan.weights
        if system is None or not weights:
            return     # no weighted interleave here: the memory ladder says so
        change = {n: w for n, w in weights.items() if system.weights.get(n) != w}
        if not change:
            return
        unknown = frozenset(change) - frozenset(system.weights)
        if unknown:
            self.fail(PlanError(f"interleave weights: nodes {format_cpulist(unknown)} have no weight file in "
                                f"/sys/kernel/mm/mempolicy/weighted_interleave"))
            self.warn(f"interleave weights of nodes {format_cpulist(unknown)} not set: the kernel has no weight "
                      f"file for them")
            change = {n: w for n, w in change.items() if n not in unknown}
            if not change:
                return
        old = {n: system.weights[n] for n in change}
        try:
            write_weights(self.be, change, old)
        except BindError as e:
            self.fail(BindError(e.errno, e.syscall, f"{e.detail}; setting the system-wide interleave weights "
                                                    f"needs root (CAP_SYS_ADMIN)"),
                      f"{e}; the interleave weights stay {format_weights(old)}")
            return
        be = self.be
        if system.auto and system.auto_name:
            # undone last (the undo log runs backwards): writing the old weights switches auto off again
            name = system.auto_name
            self.undo.append((f"the kernel's automatic interleave weights ({WEIGHTS_DIR}/{name} true)",
                              lambda: be.set_interleave_auto(name, True)))
            self.notes.append(f"writing the interleave weights switched the kernel's automatic weights off "
                              f"(/sys/kernel/mm/mempolicy/weighted_interleave/{name} is now false; write true "
                              f"there to get the weights from the firmware's bandwidth figures back)")
        self.undo.append((f"the interleave weights {format_weights(old)}", lambda: write_weights(be, old, change)))
        log.info("interleave weights set to %s (were %s; system-wide)", format_weights(change), format_weights(old))
        self.notes.append(f"set the system-wide interleave weights {format_weights(change)} "
                          f"(were {format_weights(old)}); they apply to every process that interleaves by weight")
        self.system_weights(again=True)

    def check_weights(self, policy: str | None, nodes: frozenset[int]) -> Any:
        """Under weighted interleave: the system's weights of the plan's nodes (differing ones warned)."""
        if policy != "weighted-interleave":
            return None
        system = self.system_weights()
        if system is None:
            return None
        wanted = self.plan.weights
        in_force = {n: system.weights.get(n) for n in sorted(nodes)}
        if not wanted:
            self.notes.append("interleave weights (system-wide): " + ", ".join(
                f"node {n}: {w if w is not None else '?'}" for n, w in in_force.items()))
            return None
        got = {n: system.weights.get(n) for n in wanted}
        differ = {n: w for n, w in wanted.items() if got.get(n) != w}
        if differ:
            have = ", ".join(f"node {n}: {got.get(n) if got.get(n) is not None else 'none'}" for n in sorted(differ))
            message = (f"interleave weights {format_weights(differ)} asked for, but the system's are {have} "
                       f"(weights are system-wide, in /sys/kernel/mm/mempolicy/weighted_interleave; numabind "
                       f"writes them only when asked: set_weights=True, numabind run --set-weights, as root); "
                       f"pages are interleaved by the system's weights")
            self.fail(PlanError(message), message)
        return FrozenMap({n: w for n, w in got.items() if w is not None})

    # -- memory -------------------------------------------------------------
    def apply_memory(self, swap: MemPolicySwap | None = None) -> None:
        """Set the plan's memory policy (``swap``: what :meth:`Backend.apply_all` did already)."""
        plan, be = self.plan, self.be
        policy = plan.mem_policy
        if policy is None:
            return
        nodes = plan.mem_nodes or frozenset()
        if not be.in_process_memory:
            try:
                be.set_mempolicy(policy, nodes)
            except BindError as e:  # the backend's own explanation of why it cannot
                self.fail(e, f"{e}; memory policy left unchanged")
            return
        if swap is None:
            swap = be.swap_mempolicy(policy, nodes, need_old=self.strict is True)
        old = swap.old
        if swap.old_error is not None:
            unread = swap.old_error
            if self.strict is True:  # nothing has been changed yet: refuse rather than risk a change that cannot be undone
                raise BindError(unread.errno, "get_mempolicy",
                                f"the calling thread's memory policy cannot be read ({unread}), so a strict bind "
                                f"could not be rolled back; nothing was changed") from None
            self.notes.append(f"the old memory policy could not be read ({unread}); it could not have been "
                              f"restored had a later step failed")
            log.debug("cannot read the old memory policy: %s", unread)
        if swap.set_error is not None:
            self._memory_ladder(old, swap.set_error)
            return
        self._set(old, policy, nodes)
        self.mem_now = swap.now if swap.now is not None else swap.now_error

    def _set(self, old: MemPolicyState | None, policy: str, nodes: frozenset[int]) -> None:
        self.mem_target = (policy, nodes)
        if old is not None:
            be = self.be
            self.undo.append((f"the calling thread's memory policy {old.describe()}",
                              lambda: be.restore_mempolicy(old)))

    def _memory_ladder(self, old: MemPolicyState | None, refused: BindError) -> None:
        """The plan's policy was refused: explain why, then try the weaker steps."""
        plan = self.plan
        policy = plan.mem_policy
        assert policy is not None
        nodes = plan.mem_nodes or frozenset()
        usable = nodes
        if nodes:
            usable, why = narrow_nodes(nodes, self.limits(), policy)
            if why:
                self.fail(PlanError(f"memory policy {policy} {format_cpulist(nodes)}: {why}"))
                if not usable:
                    self.warn(f"memory policy {policy} {format_cpulist(nodes)} not applied: {why}")
                    return
                self.warn(f"memory nodes narrowed from {format_cpulist(nodes)} to {format_cpulist(usable)}: {why}")
        ladder = [(policy, usable)]
        if usable:
            if policy == "weighted-interleave":
                ladder.append(("interleave", usable))
            if policy in ("bind", "interleave", "weighted-interleave") and len(usable) > 1:
                ladder.append(("preferred-many", usable))
            if policy != "preferred":
                ladder.append(("preferred", frozenset({min(usable)})))
        said: set[str] = set()   # the fixes already said: a refusal's fix is said once, not per step
        for k, (step, step_nodes) in enumerate(ladder):
            if k == 0 and usable == nodes:
                e: BindError | None = refused        # that very call was refused already
            else:
                try:
                    self.be.set_mempolicy(step, step_nodes)
                    e = None
                except BindError as err:
                    e = err
            if e is not None:
                if step == "weighted-interleave" and e.errno == _errno.EINVAL and self.system_weights() is None:
                    e = BindError(e.errno, e.syscall, f"{e.detail}: this kernel has no MPOL_WEIGHTED_INTERLEAVE "
                                                      f"(Linux 6.9 and newer have it; /sys/kernel/mm/mempolicy/"
                                                      f"weighted_interleave is absent)")
                self.fail(e, f"{e.brief if e.fix in said else e}; memory policy {step} "
                             f"{format_cpulist(step_nodes)} not applied")
                said.add(e.fix)
                continue
            self._set(old, step, step_nodes)
            if k:
                dropped = (f" (the weights {format_weights(plan.weights)} do not apply to it)"
                           if plan.weights and step != "weighted-interleave" else "")
                self.warn(f"memory policy degraded to {step} {format_cpulist(step_nodes)}{dropped}")
            return
        self.warn("memory policy left unchanged (every step of the ladder was refused)")

    # -- CPUs -----------------------------------------------------------------
    def take(self, one: BindCall, threads: ThreadMode) -> AffinityWalk:
        """Go on from what :meth:`Backend.apply_all` did: the undo log, and every refusal explained."""
        swap = one.swap()
        if swap is not None:
            self.apply_memory(swap)
        else:
            self.mem_now = one.now()
        if one.walk is None:      # stopped before the walk: the memory ladder ran, now the CPUs
            return self.apply_cpus(threads)
        return self.apply_cpus(threads, one.walk, one.settle())

    def unlisted(self, err: BindError) -> None:
        """The threads cannot be listed: strict raises; otherwise only the calling thread is bound."""
        self.fail(BindError(err.errno, err.syscall, f"{err.detail}; nothing was changed (threads='current' binds "
                                                    f"the calling thread alone)"))
        self.warn(f"{err}; only the calling thread was bound (threads started from it inherit its binding; the "
                  f"others keep theirs)")

    def apply_cpus(self, threads: ThreadMode, walk: AffinityWalk | None = None,
                   settled: list[int] | BindError | None = None) -> AffinityWalk:
        """Set the plan's CPUs on the threads, going on from ``walk`` and ``settled`` when the one call made them."""
        plan, be = self.plan, self.be
        cpus = plan.cpus
        flags = WALK_FLAGS[threads, self.strict is True]
        if walk is None:
            me = live.gettid()
            tids = [me]
            if threads != "current":
                try:
                    tids = live.thread_ids(me)
                except BindError as e:
                    self.unlisted(e)
                    threads = "current"
            walk = be.affinity_many(tids, cpus, flags)
        if cpus is None:
            return walk
        held = [walk]   # the walk the undo step puts back: threads bound after the walk are added to it
        self.undo.append(("the CPUs of the threads",
                          lambda: [_TAKEN] if self.cpus_taken else undo_walk(be, held[0])))
        first = walk.status[0]
        if first < 0:
            return self._caller_refused(walk, refused_error(-first, "sched_setaffinity", f"thread {walk.tids[0]}"))
        if settled is None and threads != "current" and walk.processed > 1 and min(walk.status[0:walk.processed]) >= 0:
            settled = settle(be, walk, cpus, flags, held)   # the threads started while the walk ran: bound too
            walk = held[0]
        if isinstance(settled, BindError):
            self._relist_failed(settled)
        elif settled:
            self._unsettled(settled)
        got = walk.after(0)
        self.cpu_target = cpus
        if got != cpus:
            kept, why = narrow_cpus(cpus, self.limits())
            if why and got == kept:
                self.fail(PlanError(why), f"{why}; CPU binding narrowed to {format_cpulist(kept)}")
                self.cpu_target = kept
            else:
                message = f"the kernel applied CPUs {format_cpulist(got)} instead of {format_cpulist(cpus)}"
                self.fail(BindError(_errno.EINVAL, "sched_setaffinity", message), message)
                self.cpu_target = got
        statuses = list(walk.status[0:walk.processed])
        if min(statuses) < 0 or WALK_LEFT_ALONE in statuses or WALK_DIFFERS in statuses:
            self._other_threads(walk, statuses)
        return walk

    def _relist_failed(self, e: BindError) -> None:
        """Listing the threads again after the walk failed (``e``)."""
        self.fail(BindError(e.errno, e.syscall, f"{e.detail}, read again after the walk to find the "
                                                f"threads started meanwhile"),
                  f"{e}; threads started during the bind may keep their old CPUs")

    def _unsettled(self, new: list[int]) -> None:
        """After :data:`SETTLE_ROUNDS` more listings, the threads ``new`` still appeared."""
        shown = ", ".join(str(t) for t in new[:8]) + (f" and {len(new) - 8} more" if len(new) > 8 else "")
        message = (f"threads kept starting threads during the bind: after {SETTLE_ROUNDS} more listings of "
                   f"/proc/self/task, {len(new)} new thread(s) still appeared ({shown}); they and the "
                   f"threads they start may keep their old CPUs")
        self.fail(BindError(_errno.EAGAIN, "sched_setaffinity", message), message)

    def _caller_refused(self, walk: AffinityWalk, err: BindError) -> AffinityWalk:
        """The calling thread's sched_setaffinity was refused (no other thread was touched)."""
        why = None
        if err.errno == _errno.EINVAL:
            kept, why = narrow_cpus(self.plan.cpus or frozenset(), self.limits())
            if kept:
                why = None   # some CPUs fit: the kernel refused for another reason
        if why:
            self.fail(PlanError(why), f"{why}; CPU binding not applied")
        else:
            self.fail(err, f"{err}; CPU binding not applied")
        self.cpu_target = None
        self.undo.pop()
        try:
            return walk_all(self.be, walk.tids[0])   # what every thread keeps, for the report
        except BindError:
            return walk

    def _other_threads(self, walk: AffinityWalk, statuses: list[int]) -> None:
        """Refused threads, threads read back with other CPUs, and threads left out by 'matching'."""
        left = []
        for i, st in enumerate(statuses):
            tid = walk.tids[i]
            if st < 0:
                e = refused_error(-st, "sched_setaffinity", f"thread {tid}")
                self.fail(e, f"{e}; thread {tid} ({live.thread_name(tid)}) keeps CPUs {format_cpulist(walk.before(i))}")
            elif st == WALK_DIFFERS:
                message = (f"thread {tid} ({live.thread_name(tid)}) was given CPUs {format_cpulist(self.cpu_target or ())}"
                           f" but the kernel holds {format_cpulist(walk.after(i))} for it")
                self.fail(BindError(_errno.EINVAL, "sched_setaffinity", message), message)
            elif st == WALK_LEFT_ALONE:
                left.append(i)
        if left:
            caller = walk.before(0)
            shown = ", ".join(f"{walk.tids[i]} ({live.thread_name(walk.tids[i])}) on "
                              f"{format_cpulist(walk.before(i))}" for i in left[:8])
            more = f" and {len(left) - 8} more" if len(left) > 8 else ""
            self.warn(f"{len(left)} thread(s) left out of the CPU binding by threads='matching' because their "
                      f"affinity differs from the calling thread's {format_cpulist(caller)}: {shown}{more}; "
                      f"they keep their CPUs (threads='all' binds them too)")

    # -- verification -------------------------------------------------------------
    def read_back(self, walk: AffinityWalk) -> Plan:
        """What the kernel says now; a difference from what was set is a failure (explained by the limits)."""
        cpus = walk.after(0) if walk.processed and walk.status[0] >= 0 else self.be.get_affinity(0)
        return self._read_memory(cpus)

    def _read_memory(self, cpus: frozenset[int]) -> Plan:
        try:
            now = self.mem_now
            if isinstance(now, BindError):
                raise now
            policy, nodes = now if now is not None else self.be.get_mempolicy()
        except BindError as e:
            target = self.mem_target
            if target is not None:
                # set, but unverifiable: strict cannot vouch for it (rolled back, raised); lenient warns
                self.fail(BindError(e.errno, "get_mempolicy",
                                    f"the memory policy {target[0]} {format_cpulist(target[1])} was set but "
                                    f"cannot be read back to verify it ({e.detail or e})".replace("  ", " ")),
                          f"cannot verify the memory policy: {e}")
            return read_back_plan(cpus, None, None)
        plannable = plannable_policy(policy)
        if plannable is None:
            self.notes.append(f"the calling thread's memory policy is {policy}, which a Plan cannot express; "
                              f"report.applied shows it as unchanged")
        target = self.mem_target
        if target is not None and (policy, nodes) != target:
            want_policy, want_nodes = target
            kept, why = narrow_nodes(want_nodes, self.limits(), want_policy) if want_nodes else (want_nodes, None)
            if why and policy == want_policy and nodes == kept and kept:
                self.fail(PlanError(f"memory policy {want_policy} {format_cpulist(want_nodes)}: {why}"),
                          f"memory nodes narrowed from {format_cpulist(want_nodes)} to {format_cpulist(kept)}: {why}")
                self.mem_target = (want_policy, kept)
            else:
                want = f"{want_policy} {format_cpulist(want_nodes)}".strip()
                message = f"the kernel reports memory policy {policy} {format_cpulist(nodes)} instead of {want}"
                self.fail(BindError(_errno.EINVAL, "set_mempolicy", message), message)
        weights = self.check_weights(policy, nodes) if self.mem_target is not None else None
        return read_back_plan(cpus, plannable, (nodes or None) if plannable else None, weights)

    # -- migration --------------------------------------------------------------
    def migrate(self) -> int | None:
        """Move the pages the process already has onto the plan's nodes (``migrate_pages``): returns the pages that
        stayed on the other nodes (``self.pages_migrated``: those that left), counted in ``numa_maps``. Private
        pages that stayed and a refused call are warnings; shared or file-backed ones a note."""
        self.pages_migrated = None
        if not self.plan.migrate:
            return None
        limits = self.limits()
        target = (self.plan.mem_nodes or frozenset()) & limits.memory_nodes
        source = (limits.allowed_nodes & limits.memory_nodes) - target
        before = _proc.node_pages()
        if not target or not source:
            # nothing to move anywhere; the count still says where the pages are
            self.pages_migrated = 0
            if before is None:
                self.notes.append("/proc/self/numa_maps is unreadable: pages were not counted")
                return 0
            from .residency import locality   # only a bind that migrates reads it (it loads dataclasses)

            self.locality = locality(pages=before)
            return before.on(source)
        try:
            refused = self.be.migrate_pages(0, source, target)
        except BindError as e:
            # the last step: in strict mode the binding is rolled back, and pages the call moved before
            # failing cannot be put back (the kernel says only that it failed); the error says so
            self.fail(BindError(e.errno, e.syscall, f"{e.detail}; the binding was rolled back, but pages "
                                                    f"moved before the error stay on nodes {format_cpulist(target)}"),
                      f"{e}; pages already allocated stay where they are")
            return None
        after = _proc.node_pages()
        if after is not None:
            from .residency import locality   # as above

            self.locality = locality(pages=after)
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


_TAKEN = "the CPUs of the threads were not put back: another bind set them since (it keeps them)"


def undo_walk(be: Backend, walk: AffinityWalk) -> list[str]:
    """Put back the CPUs of every thread the walk changed (the caller last); returns what stayed."""
    stayed = []
    for i in range(walk.processed - 1, -1, -1):
        if walk.status[i] in (WALK_BOUND, WALK_DIFFERS):
            try:
                be.set_affinity(walk.tids[i] if i else 0, walk.before(i))
            except BindError as e:
                if e.errno != _errno.ESRCH:
                    stayed.append(f"thread {walk.tids[i]} keeps CPUs {format_cpulist(walk.after(i))} instead of "
                                  f"{format_cpulist(walk.before(i))} ({e})")
    return stayed


def undo_call(be: Backend, call: BindCall, cpus: bool = True) -> list[str]:
    """Undo one :meth:`Backend.apply_all` (its CPUs unless ``cpus`` is False); returns what stayed."""
    stayed = []
    walk = call.walk
    if walk is not None:
        stayed += undo_walk(be, walk) if cpus else [_TAKEN]
    swap = call.swap()
    if swap is not None and swap.old is not None and swap.set_error is None:
        try:
            be.restore_mempolicy(swap.old)
        except BindError as e:
            stayed.append(f"the calling thread's memory policy {swap.old.describe()} was not put back: {e}")
    for text in stayed:
        log.warning("rollback: %s", text)
    return stayed


def note_not_undone(exc: BaseException, stayed: list[str]) -> None:
    """Say on ``exc`` what a rollback could not put back: ``exc.not_undone`` (a tuple of lines, also on 3.10)
    and one note per line (``add_note``, Python 3.11+, shown under the traceback)."""
    done = getattr(exc, "not_undone", ())
    stayed = [text for text in dict.fromkeys(stayed) if text not in done]   # a step undone twice is said once
    if not stayed:
        return
    try:
        exc.not_undone = (*done, *stayed)   # type: ignore[attr-defined]
    except AttributeError:    # an exception type with slots and no __dict__
        pass
    add = getattr(exc, "add_note", None)
    for text in stayed:
        line = f"rollback incomplete: {text}"
        if add is not None:
            add(line)
        else:
            notes = getattr(exc, "__notes__", None)
            if isinstance(notes, list):
                notes.append(line)
            else:
                try:
                    exc.__notes__ = [line]   # type: ignore[attr-defined]
                except AttributeError:
                    pass
