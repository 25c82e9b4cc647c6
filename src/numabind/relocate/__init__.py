"""Move a process that is already running: :func:`move` (``taskset -a -p`` and ``migratepages`` in one call), and
:func:`recorded_plan` (``numabind move --restore``). Reused thread ids and pids, strictness and permissions:
docs/move.rst.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING, NamedTuple

from .. import _proc, live
from .._base import getLogger, printable
from ..backends import (SETTLE_ROUNDS, WALK_BOUND, WALK_DIFFERS, WALK_EXITED, WALK_STOP_ON_ERROR, Backend,
                        get_backend, pin_process, process_ended)
from ..bind import ThreadResult, strict_default, strict_label
from ..cpulist import format_cpulist
from ..errors import AccessDenied, BindError, NoSuchProcess, NumabindError, PlanError
from ..plan import Plan, check_plan
from ..residency import Locality, locality, mems_allowed
from .report import MEMORY_POLICY_KEPT_NOTE, MEMORY_POLICY_NOTE, MoveReport, ProcessMove, policy_note

if TYPE_CHECKING:  # pragma: no cover
    from .._base import Strictness
    from ..backends import AffinityWalk
    from ..types import BackendName

__all__ = ["MEMORY_POLICY_KEPT_NOTE", "MEMORY_POLICY_NOTE", "MoveReport", "ProcessMove", "memory_nodes", "move",
           "recorded_plan"]

log = getLogger(__name__)   # logging is imported only by a program that uses it (the CLI's -v)

#: The fix of a refused sched_setaffinity on another process's thread.
AFFINITY_FIX = ("setting the CPUs of another user's threads needs CAP_SYS_NICE: run numabind move as the "
                "process's owner, or as root")
#: The fix of a refused migrate_pages.
MIGRATE_FIX = ("migrate_pages needs the right to trace the process (the same user, with kernel.yama.ptrace_scope "
               "allowing it) or CAP_SYS_NICE: run numabind move as the process's owner, or as root")
#: Passes over a process tree: the first, then this many more for children born while it was moved.
TREE_ROUNDS = 2


def _pid(value: object, what: str = "pid") -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise PlanError(f"numabind.move: {what} must be a process id (a positive int), got {value!r}")
    return value


# ----------------------------------------------------------------------------- reading the target
def _where(pid: int) -> tuple[Locality | None, str | None]:
    """Where the pages of ``pid`` are after a move, and what could not be read (None: everything was)."""
    try:
        found = locality(pid)
    except (NoSuchProcess, AccessDenied) as e:   # an exit is noticed by the caller's own check
        return None, e.reason
    return found, found.error


def _alive(pid: int, started: int, pin: int | None = None) -> bool:
    """Whether ``pid`` is still the process that started at ``started`` (and its pidfd ``pin`` saw no end)."""
    return not process_ended(pin) and _proc.start_time(pid) == started


def _started(pid: int) -> int:
    """The start time of ``pid``, or a NumabindError saying that it does not exist or has exited."""
    if not _proc.process_exists(pid):
        raise NumabindError(f"numabind move: no process {pid}: /proc/{pid} does not exist (it exited, or the PID "
                            f"is wrong; numabind stat or ps lists the running ones)")
    started = _proc.start_time(pid)
    if not started:
        raise NumabindError(f"numabind move: process {pid} has exited (a zombie its parent has not reaped): "
                            f"nothing is left to move")
    return started


# ----------------------------------------------------------------------------- one process
#: The detail of a vanished thread.
VANISHED = ("its id ended, or came to name another thread, while its CPUs were set (its start time under "
            "/proc/PID/task changed): not counted as bound")


class _Set(NamedTuple):
    """One thread as it was set: its walk status, CPUs before and after, start time when listed, and whether it
    vanished (not the same thread after the call)."""

    tid: int
    status: int
    before: frozenset[int]
    after: frozenset[int]
    start: int
    vanished: bool


def _walked(walk: AffinityWalk, starts: dict[int, int], same: list[bool]) -> list[_Set]:
    return [_Set(walk.tids[i], walk.status[i], walk.before(i),
                 walk.after(i) if walk.status[i] in (WALK_BOUND, WALK_DIFFERS) else walk.before(i),
                 starts[walk.tids[i]], walk.status[i] != WALK_EXITED and not same[i]) for i in range(walk.processed)]


def _results(pid: int, walk: list[_Set]) -> tuple[ThreadResult, ...]:
    out = []
    for t in walk:
        name = _proc.thread_name(pid, t.tid)
        if t.vanished:
            out.append(ThreadResult(t.tid, name, t.before, None, "vanished", VANISHED))
        elif t.status == WALK_EXITED:
            out.append(ThreadResult(t.tid, name, t.before, None, "exited"))
        elif t.status in (WALK_BOUND, WALK_DIFFERS):
            out.append(ThreadResult(t.tid, name, t.before, t.after, "bound"))
        elif t.status < 0:
            error = str(_affinity_refused(pid, -t.status, t.tid))
            out.append(ThreadResult(t.tid, name, t.before, t.before, "failed", error))
        else:
            out.append(ThreadResult(t.tid, name, t.before, t.before, "unchanged"))
    return tuple(out)


def _affinity_refused(pid: int, err: int, tid: int) -> BindError:
    """The error of a refused sched_setaffinity on thread ``tid`` of ``pid``, with numabind move's fix."""
    fix = AFFINITY_FIX if err == errno.EPERM else (
        "the CPUs are outside the process's cpuset (see its /proc/PID/status Cpus_allowed_list)"
        if err == errno.EINVAL else None)
    return BindError(err, "sched_setaffinity", f"thread {tid} of pid {pid}", fix=fix)


class _Mover:
    """One call of :func:`move`: the backend, strictness, what was set (to put back under strict)."""

    def __init__(self, plan: Plan, strict: Strictness, be: Backend) -> None:
        self.plan, self.strict, self.be = plan, strict, be
        self.walks: list[tuple[int, list[_Set]]] = []     # what was set, per process: the undo log of strict
        self.pin: int | None = None                  # the pidfd of the process being moved (None: none)

    def _same_threads(self, pid: int, walk: AffinityWalk, starts: dict[int, int], warnings: list[str]) -> list[bool]:
        """Per thread of ``walk``: whether its id still names the thread listed (same start time); a warning for
        one whose CPUs were set and whose id now names another process's thread."""
        cpus = self.plan.cpus
        same = []
        for i in range(walk.processed):
            tid = walk.tids[i]
            ok = _proc.thread_start_time(pid, tid) == starts[tid]
            same.append(ok)
            if ok or walk.status[i] not in (WALK_BOUND, WALK_DIFFERS) or cpus is None:
                continue
            owner = _proc.thread_owner(tid)
            if owner is not None and owner != pid:
                warnings.append(f"pid {pid}: thread id {tid} ended while its CPUs were set and now names a thread of "
                                f"process {owner}, which may hold CPUs {format_cpulist(cpus)} now (numabind cannot "
                                f"tell, and cannot put it back safely: check process {owner}'s CPUs)")
        return same

    def degrade(self, error: NumabindError, warnings: list[str], said: str) -> None:
        """A degradation: ``error`` raised under strict, else ``said`` added to ``warnings``."""
        if self.strict is True:
            raise error from None
        warnings.append(said)

    def set_cpus(self, pid: int, started: int, warnings: list[str]) -> list[_Set]:
        """Every thread of ``pid`` set to the plan's CPUs, the list read again until it settles."""
        cpus, be = self.plan.cpus, self.be
        flags = WALK_STOP_ON_ERROR if self.strict is True else 0
        walk: list[_Set] = []
        self.walks.append((pid, walk))
        seen: set[int] = set()
        for rounds in range(SETTLE_ROUNDS + 2):
            listed = _proc.task_ids(pid)
            if not listed and not seen and _alive(pid, started):
                message = (f"pid {pid}: /proc/{pid}/task cannot be listed, so its threads cannot be found; their "
                           f"CPUs were not changed")
                self.degrade(BindError(errno.EACCES, "getdents64", message), warnings, message)
                break
            new = [t for t in listed if t not in seen]
            if not new:
                break
            if rounds == SETTLE_ROUNDS + 1:
                shown = ", ".join(map(str, new[:8])) + (f" and {len(new) - 8} more" if len(new) > 8 else "")
                message = (f"pid {pid}: threads kept starting threads during the move: after {SETTLE_ROUNDS} more "
                           f"listings of /proc/{pid}/task, {len(new)} new thread(s) still appeared ({shown}); they "
                           f"and the threads they start may keep their old CPUs (run numabind move again)")
                self.degrade(BindError(errno.EAGAIN, "sched_setaffinity", message), warnings, message)
                break
            seen.update(new)
            starts = {t: _proc.thread_start_time(pid, t) for t in new}   # who each id names now
            walk += [_Set(t, WALK_EXITED, frozenset(), frozenset(), 0, False) for t in new if not starts[t]]
            new = [t for t in new if starts[t]]
            while new:    # a walk stops at a refusal of its first thread: the rest are tried in a walk of their own
                one = be.affinity_many(new, cpus, flags)
                same = self._same_threads(pid, one, starts, warnings)
                walk += _walked(one, starts, same)
                refused = [i for i in range(one.processed) if one.status[i] < 0 and same[i]]
                if refused and self.strict is True:
                    i = refused[0]
                    raise _affinity_refused(pid, -one.status[i], one.tids[i])
                new = new[max(1, one.processed):]
            if not _alive(pid, started, self.pin):
                break
        return walk

    def check_cpus(self, pid: int, walk: list[_Set], warnings: list[str]) -> None:
        """Refused threads and threads the kernel gave other CPUs (its cpuset): warnings, or raised when strict."""
        cpus = self.plan.cpus
        assert cpus is not None
        refused: dict[int, list[int]] = {}
        other: dict[frozenset[int], list[int]] = {}
        for t in walk:
            if t.vanished:
                continue
            if t.status < 0:
                refused.setdefault(-t.status, []).append(t.tid)
            elif t.status in (WALK_BOUND, WALK_DIFFERS) and t.after != cpus:
                other.setdefault(t.after, []).append(t.tid)
        for err, tids in sorted(refused.items()):
            e = _affinity_refused(pid, err, tids[0])
            warnings.append(f"{e}" + (f" (and {len(tids) - 1} more thread(s) of pid {pid}, refused alike)"
                                      if len(tids) > 1 else "") + "; they keep their CPUs")
        for got, tids in sorted(other.items(), key=lambda kv: sorted(kv[0])):
            message = (f"pid {pid}: the kernel holds CPUs {format_cpulist(got)} for {len(tids)} thread(s) "
                       f"({', '.join(map(str, tids[:8]))}{' ...' if len(tids) > 8 else ''}), not "
                       f"{format_cpulist(cpus)} (the process's cpuset allows only those)")
            self.degrade(BindError(errno.EINVAL, "sched_setaffinity", message), warnings, message)

    def verify_cpus(self, pid: int, started: int, warnings: list[str], refused: frozenset[int]) -> None:
        """Read every thread's CPUs again: one that holds others now is a degradation; ``refused``: threads whose
        refusal was said already."""
        cpus = self.plan.cpus
        assert cpus is not None
        starts = {t: _proc.thread_start_time(pid, t) for t in _proc.task_ids(pid)}
        tids = [t for t, s in starts.items() if s]
        if not tids or not _alive(pid, started, self.pin):
            return
        now = self.be.affinity_many(tids, None)
        off = [(now.tids[i], now.before(i)) for i in range(now.processed)
               if now.status[i] != WALK_EXITED and now.status[i] >= 0 and now.before(i) != cpus
               and now.tids[i] not in refused
               and _proc.thread_start_time(pid, now.tids[i]) == starts[now.tids[i]]]   # what was read was that thread
        if off:
            shown = ", ".join(f"{t} on {format_cpulist(c)}" for t, c in off[:8])
            message = (f"pid {pid}: read back after the move, {len(off)} thread(s) hold other CPUs than "
                       f"{format_cpulist(cpus)}: {shown}{' ...' if len(off) > 8 else ''} (the process re-pinned "
                       f"them, or its cpuset narrowed them)")
            if self.strict is True or not any(w.startswith(f"pid {pid}: the kernel holds CPUs") for w in warnings):
                self.degrade(BindError(errno.EINVAL, "sched_setaffinity", message), warnings, message)

    def undo(self) -> list[str]:
        """Put back the CPUs this call set (strict failures); what could not be put back, said."""
        stayed = []
        for pid, walk in self.walks:
            for tid, st, before, _after, start, gone in walk:
                if gone or st not in (WALK_BOUND, WALK_DIFFERS) or _proc.thread_start_time(pid, tid) != start:
                    continue     # not set, or not the thread that was set any more (it exited): nothing to put back
                try:
                    self.be.set_affinity(tid, before)
                except BindError as e:
                    if e.errno != errno.ESRCH:
                        stayed.append(f"thread {tid} of pid {pid} keeps the new CPUs ({e})")
                    continue
                if _proc.thread_start_time(pid, tid) != start:
                    owner = _proc.thread_owner(tid)
                    if owner is not None and owner != pid:
                        stayed.append(f"thread id {tid} of pid {pid} ended while its CPUs were put back and now names "
                                      f"a thread of process {owner}, which may have been given CPUs "
                                      f"{format_cpulist(before)} (check process {owner}'s CPUs)")
        self.walks.clear()
        return stayed

    def migrate(self, pid: int, started: int, warnings: list[str],
                notes: list[str]) -> tuple[int | None, int | None, int | None, int | None, Locality | None]:
        """Pages of ``pid`` moved onto the plan's nodes: (moved, left, left shared, refused by the kernel,
        locality after)."""
        target = frozenset(self.plan.mem_nodes or ())
        memory = memory_nodes()
        allowed = mems_allowed(pid, _proc.status_fields(pid) or {})
        allowed = memory if allowed is None else allowed
        source = (allowed & memory) - target
        outside = target - allowed
        if outside:
            message = (f"pid {pid}: nodes {format_cpulist(outside)} are outside the process's cpuset memory nodes "
                       f"({format_cpulist(allowed)}): its pages cannot go there")
            self.degrade(PlanError(message), warnings, message)
        before = _proc.node_pages(pid)
        refused = None
        if source and target & allowed:
            if not _alive(pid, started, self.pin):
                raise _Exited(pid)
            try:
                refused = self.be.migrate_pages(pid, source, target)
            except BindError as e:
                if e.errno == errno.ESRCH or not _alive(pid, started, self.pin):
                    raise
                err = BindError(e.errno, e.syscall, e.detail, fix=MIGRATE_FIX if e.errno == errno.EPERM else None)
                self.degrade(err, warnings, f"{err}; its pages stay where they are")
                return None, None, None, None, _where(pid)[0]
            if not _alive(pid, started, self.pin):   # the pid may have named another process during the call
                raise _Exited(pid)
        after, why = _where(pid)
        pages = None if after is None else after.pages
        if before is None or pages is None:
            why = why or f"/proc/{pid}/numa_maps is unreadable"
            warnings.append(f"pid {pid}: where its pages are could not be read ({why}): pages moved were not counted")
            return None, None, None, refused, after
        moved = max(0, before.on(source) - pages.on(source))
        left = pages.on(source)
        shared = min(pages.shared_on(source), left)
        private = left - shared
        src, dst = format_cpulist(source), format_cpulist(target)
        log.info("pid %d: migrated %d pages from nodes %s to nodes %s; %d stayed (%d shared or file-backed)",
                 pid, moved, src or "-", dst, left, shared)
        if private or refused:
            warnings.append(f"pid {pid}: {private} private pages stayed on nodes {src} (pinned, locked, busy, or "
                            f"node {dst} is full)" + (f"; migrate_pages reported {refused} pages it could not move"
                                                     if refused else ""))
        if shared:
            notes.append(f"pid {pid}: {shared} pages in shared or file-backed mappings stayed on nodes {src} "
                            f"(other processes map them: moving them needs CAP_SYS_NICE)")
        return moved, left, shared, refused, after

    def one(self, pid: int, root: bool, tree: set[int] | frozenset[int] = frozenset()) -> ProcessMove:
        """Move process ``pid``; ``root``: the one named by the caller (its exit is an error), else a descendant,
        moved only while its parent is in ``tree``."""
        try:
            started = _started(pid)
        except NumabindError as e:
            if root:
                raise
            return ProcessMove(pid, error=str(e).removeprefix("numabind move: "))
        self.pin = pin_process(pid)
        try:
            return self._one(pid, started, root, tree)
        finally:
            if self.pin is not None:
                os.close(self.pin)
            self.pin = None

    def _one(self, pid: int, started: int, root: bool, tree: set[int] | frozenset[int]) -> ProcessMove:
        status = _proc.status_fields(pid) or {}
        name = status.get("Name", "?")
        if not _alive(pid, started, self.pin):     # the pidfd may hold a process that took the pid since
            if root:
                raise NumabindError(f"numabind move: process {pid} ({printable(name)}) exited before it could be "
                                    f"moved; nothing is left to move")
            return ProcessMove(pid, name, error=f"process {pid} ({printable(name)}) exited before it could be moved")
        if not root:
            ppid = status.get("PPid", "")
            if not (ppid.isascii() and ppid.isdigit() and int(ppid) in tree):
                return ProcessMove(pid, name, error=f"process {pid} ({printable(name)}) is no longer in the tree "
                                                    f"(its parent is {printable(ppid) or '?'}): its pid may have been "
                                                    f"taken by another process since the tree was listed; not moved")
        warnings: list[str] = []
        notes: list[str] = []
        walk = None
        try:
            if self.plan.cpus is not None:
                walk = self.set_cpus(pid, started, warnings)
            if not _alive(pid, started, self.pin) or (walk and all(t.status == WALK_EXITED for t in walk)):
                raise _Exited(pid)
            if walk is not None:
                self.check_cpus(pid, walk, warnings)
            moved = left = shared = refused = None
            after = None
            if self.plan.mem_nodes:
                moved, left, shared, refused, after = self.migrate(pid, started, warnings, notes)
            if self.plan.cpus is not None:
                refusals = frozenset(t.tid for t in walk or () if t.status < 0)
                self.verify_cpus(pid, started, warnings, refusals)
            if not _alive(pid, started, self.pin):
                raise _Exited(pid)
        except (_Exited, BindError) as e:
            if isinstance(e, BindError) and (e.errno != errno.ESRCH or _alive(pid, started, self.pin)):
                raise
            message = f"process {pid} ({printable(name)}) exited while it was being moved"
            if root:
                raise NumabindError(f"numabind move: {message}; nothing is left to move") from None
            return ProcessMove(pid, name, () if walk is None else _results(pid, walk), error=message)
        threads = () if walk is None else _results(pid, walk)
        return ProcessMove(pid, name, tuple(threads), moved, left, shared, refused, after, None, tuple(warnings),
                           tuple(notes))


class _Exited(Exception):
    """The process exited while it was being moved."""


def move(pid: int, plan: Plan, *, strict: Strictness | None = None, all_children: bool = False,
         backend: BackendName | None = None) -> MoveReport:
    """Move a running process (``taskset -a -p`` + ``migratepages``): every thread of ``pid`` gets ``plan.cpus``
    (threads started meanwhile too), then its pages are migrated onto ``plan.mem_nodes``; both are read back. Its
    memory policy cannot be set from outside (``notes`` says so). ``all_children=True``: every descendant too.

    ``strict`` (default ``$NUMABIND_STRICT``): True raises BindError/PlanError naming the pid and the fix, after
    putting back the CPUs it set; otherwise every degradation is in ``warnings``. A ``pid`` that does not exist,
    or exits before it is moved, raises :class:`~numabind.errors.NumabindError` (docs/move.rst).
    """
    pid = _pid(pid)
    check_plan(plan, "numabind.move")
    if not isinstance(all_children, bool):
        raise PlanError(f"numabind.move: all_children must be True or False, got {all_children!r}")
    strict = strict_default(strict)
    _proc.check_procfs("numabind move", acting=True)
    _check_fits(plan)
    be, why = get_backend(backend)
    mover = _Mover(plan, strict, be)
    processes: list[ProcessMove] = []
    try:
        processes.append(mover.one(pid, root=True))
        if all_children:
            done = {pid}
            for _ in range(TREE_ROUNDS):
                todo = [p for p in _proc.process_tree(pid) if p not in done]
                if not todo:
                    break
                for child in todo:
                    processes.append(mover.one(child, root=False, tree=done))
                    done.add(child)
    except NumabindError as exc:
        stayed = mover.undo() if strict is True else []
        if strict is True and isinstance(exc, (BindError, PlanError)):
            # a migrate_pages that failed may have moved some: it does not say
            stay = f", but pages already moved (if any) stay on nodes {format_cpulist(plan.mem_nodes or ())}"
            tail = "; the CPUs it set were put back" + (stay if plan.mem_nodes else "")
            if stayed:
                tail += "; not put back: " + "; ".join(stayed)
            if isinstance(exc, BindError):
                raise BindError(exc.errno, exc.syscall, f"pid {pid} (strict): {exc.detail}{tail}",
                                fix=exc.fix) from None
            raise PlanError(f"numabind move pid {pid} (strict): {exc}{tail}") from None
        raise
    warnings = [w for p in processes for w in p.warnings]
    notes = []
    if plan.mem_policy is not None:
        notes.append(policy_note(plan, processes))
    notes += [n for p in processes for n in p.notes]
    exited = [p for p in processes if p.error]
    if exited:
        notes.append(f"{len(exited)} child process(es) could not be moved: " +
                     "; ".join(f"{p.pid}: {p.error}" for p in exited[:8]))
    report = MoveReport(plan, be.name, why, tuple(processes), tuple(warnings), tuple(notes))
    if warnings:
        log.warning("numabind move pid %d (%s): %s", pid, strict_label(strict), "; ".join(warnings))
    log.info("moved pid %d via %s: %s", pid, be.name, "; ".join(p.describe() for p in processes))
    return report


def memory_nodes() -> frozenset[int]:
    """The nodes of this machine that have memory: where pages can go."""
    return frozenset(n for n, node in live.machine().nodes.items() if node.has_memory)


def _check_fits(plan: Plan) -> None:
    """A PlanError unless the plan's CPUs and nodes are this machine's and its nodes have memory."""
    live.check_present(plan, "numabind move")
    if plan.mem_nodes:
        memory = memory_nodes()
        lacking = plan.mem_nodes - memory
        if lacking:
            raise PlanError(f"numabind move: nodes {format_cpulist(lacking)} have no memory (nodes with memory: "
                            f"{format_cpulist(memory)}); give nodes with memory")


# ----------------------------------------------------------------------------- restore
def recorded_plan(pid: int) -> Plan:
    """The plan to put ``pid`` back to: what the kernel held right after numabind bound it at birth (else what
    was asked). A NumabindError when numabind recorded nothing for it, or only an unverified marker."""
    pid = _pid(pid)
    _proc.check_procfs("numabind move --restore", acting=True)
    _started(pid)
    bound = locality(pid).bound
    if bound is None:
        raise NumabindError(f"numabind move --restore: numabind recorded no binding for process {pid} (it was not "
                            f"started by numabind run, wrap_command or configure_subprocess, or its record is gone): "
                            f"give the binding to move it to instead")
    if not bound.verified:
        raise NumabindError(f"numabind move --restore: process {pid} carries an older numabind's marker without a "
                            f"start time ({bound.source}); it may be another process's, so it is not restored: "
                            f"give the binding to move it to instead")
    plan = bound.applied if bound.applied is not None else bound.requested
    return plan.replace(reason=f"restored: what numabind bound pid {pid} to at birth ({bound.source})")
