"""Apply a :class:`~numabind.plan.Plan` to the running process, and report what the kernel then holds.

:func:`bind_current` makes one backend call; when the kernel holds exactly what was asked, the report is built at
once, otherwise :mod:`numabind._transaction` explains, degrades or rolls back. See docs/guide.rst, "Binding, in
depth".
"""

import os
import sys
TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence
    from typing import Any

    from .types import BackendName, ThreadMode

from . import live
from ._base import BOUND_ENV, INFO, Strictness, Value, bind_settings, environ_copy, getLogger, strict_from_env
from .backends import (THREAD_MODES, WALK_BOUND, WALK_DIFFERS, WALK_EXITED, WALK_FLAGS, WALK_LEFT_ALONE,
                       WALK_ONLY_CALLER, AffinityWalk, Backend, BindCall, MemPolicyState, backend_for, check_threads,
                       get_backend, write_weights)
from .cpulist import format_cpulist
from .errors import BindError, NumabindError, PlanError, warn_degraded
from .plan import MEM_POLICIES, Plan, check_plan, format_weights, read_back_plan

__all__ = ["BOUND_ENV", "BindReport", "STRICT_VALUES", "THREAD_MODES", "ThreadResult", "bind_current", "bind_thread",
           "bound_environ", "interleave_weights", "set_interleave_weights", "strict_default", "strict_label"]

log = getLogger(__name__)

STRICT_VALUES = (True, False, "partial")


def strict_default(strict: Strictness | None) -> Strictness:
    """``strict`` if given (True, False or ``"partial"``), else ``NUMABIND_STRICT``; any other value is a PlanError."""
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


#: Caps of what :meth:`BindReport.from_dict` accepts (children write the files): thread records, list entries,
#: characters of a long string and of a short one (a name, a status).
MAX_REPORT_THREADS = 1 << 16
MAX_REPORT_LINES = 4096
MAX_REPORT_TEXT = 1 << 16
MAX_REPORT_NAME = 256


def _capped(value: str, what: str, cap: int = MAX_REPORT_TEXT) -> str:
    if len(value) > cap:
        raise ValueError(f"{what} has {len(value)} characters, more than the cap of {cap}")
    return value


def _ids(value: object, what: str) -> frozenset[int] | None:
    if value is None:
        return None
    if not isinstance(value, str) or (value and not all(c in "0123456789,-" for c in value)):
        raise ValueError(f"{what} is not a cpulist string")
    _capped(value, what)
    from .cpulist import parse_cpulist

    return parse_cpulist(value, what=what)


# ----------------------------------------------------------------------------- reports
class ThreadResult(Value):
    """What happened to one thread's CPU affinity."""

    __slots__ = ("tid", "name", "before", "after", "status", "detail")
    tid: int
    name: str
    before: frozenset[int]
    after: frozenset[int] | None
    status: str          # "bound" | "left-alone" | "exited" | "failed" | "unchanged"
    detail: str

    def __init__(self, tid: int, name: str, before: frozenset[int], after: frozenset[int] | None, status: str,
                 detail: str = "") -> None:
        for k, v in (("tid", tid), ("name", name), ("before", frozenset(before)),
                     ("after", None if after is None else frozenset(after)), ("status", status), ("detail", detail)):
            object.__setattr__(self, k, v)

    def to_dict(self) -> "dict[str, Any]":
        return {"tid": self.tid, "name": self.name, "before": format_cpulist(self.before),
                "after": None if self.after is None else format_cpulist(self.after), "status": self.status,
                "detail": self.detail}

    @classmethod
    def from_dict(cls, data: object) -> "ThreadResult":
        if not isinstance(data, dict):
            raise ValueError("a thread record is not an object")
        tid, name, status, detail = (data.get(k) for k in ("tid", "name", "status", "detail"))
        if (not isinstance(tid, int) or isinstance(tid, bool) or not isinstance(name, str)
                or not isinstance(status, str) or not isinstance(detail, str)):
            raise ValueError("a thread record's tid, name, status or detail is malformed")
        _capped(name, "a thread record's name", MAX_REPORT_NAME)
        _capped(status, "a thread record's status", MAX_REPORT_NAME)
        _capped(detail, "a thread record's detail")
        before = _ids(data.get("before"), "thread before")
        return cls(tid, name, before or frozenset(), _ids(data.get("after"), "thread after"), status, detail)


def _thread_results(walk: AffinityWalk) -> tuple[ThreadResult, ...]:
    """The per-thread outcome of a walk (names are read now: a thread gone meanwhile is '?')."""
    out = []
    caller_before = walk.before(0) if walk.processed else frozenset()
    for i in range(walk.processed):
        st, tid = walk.status[i], walk.tids[i]
        name = live.thread_name(tid)
        if st == WALK_EXITED:
            out.append(ThreadResult(tid, name, walk.before(i), None, "exited"))
        elif st in (WALK_BOUND, WALK_DIFFERS):
            detail = "" if st == WALK_BOUND else "its CPUs read back differ from the calling thread's"
            out.append(ThreadResult(tid, name, walk.before(i), walk.after(i), "bound", detail))
        elif st == WALK_LEFT_ALONE:
            before = walk.before(i)
            out.append(ThreadResult(tid, name, before, before, "left-alone",
                                    f"pinned to {format_cpulist(before)}, not the process's "
                                    f"{format_cpulist(caller_before)}"))
        elif st < 0:
            before = walk.before(i)
            out.append(ThreadResult(tid, name, before, before, "failed",
                                    str(BindError(-st, "sched_setaffinity", f"thread {tid}"))))
        else:   # only read (no CPUs in the plan, or not tried after a refusal)
            before = walk.before(i)
            out.append(ThreadResult(tid, name, before, before, "unchanged"))
    return tuple(out)


class BindReport(Value):
    """The outcome of :func:`bind_current` (frozen). ``applied`` is read back from the kernel after binding;
    ``threads`` has one :class:`ThreadResult` per thread, the caller first (names are read on first access: a
    thread gone meanwhile is ``'?'``). After ``migrate=True``, ``locality`` says where the pages are."""

    __slots__ = ("requested", "applied", "backend", "backend_reason", "_threads", "warnings", "notes",
                 "pages_not_migrated", "pages_migrated", "_walk", "locality")
    _FIELDS = ("requested", "applied", "backend", "backend_reason", "threads", "warnings", "notes",
               "pages_not_migrated", "pages_migrated", "locality")
    requested: Plan
    applied: Plan
    backend: str                       # "libnuma" | "syscall" | "numactl" | "none"
    backend_reason: str
    warnings: tuple[str, ...]          # every degradation, with errno and syscall
    notes: tuple[str, ...]             # facts that are not degradations
    pages_not_migrated: int | None     # migrate=True: pages left on other nodes (None: not measured)
    pages_migrated: int | None         # migrate=True: pages moved onto the plan's nodes
    locality: "Any"                    # migrate=True: numabind.residency.Locality after the move, else None
    _threads: tuple[ThreadResult, ...] | None      # None until ``threads`` decodes ``_walk``
    _walk: AffinityWalk | BindCall | None

    def __init__(self, requested: Plan, applied: Plan, backend: str, backend_reason: str,
                 threads: "Sequence[ThreadResult]" = (), warnings: "Sequence[str]" = (), notes: "Sequence[str]" = (),
                 pages_not_migrated: int | None = None, pages_migrated: int | None = None, locality: "Any" = None, *,
                 _walk: AffinityWalk | None = None) -> None:
        s = object.__setattr__
        s(self, "requested", requested)
        s(self, "applied", applied)
        s(self, "backend", backend)
        s(self, "backend_reason", backend_reason)
        s(self, "_threads", None if _walk is not None else tuple(threads))
        s(self, "_walk", _walk)
        s(self, "warnings", tuple(warnings))
        s(self, "notes", tuple(notes))
        s(self, "pages_not_migrated", pages_not_migrated)
        s(self, "pages_migrated", pages_migrated)
        s(self, "locality", locality)

    #: What a slot holds when it was never set: a clean bind's report (``_clean_report``) sets only the slots that
    #: differ from these, since every slot set costs a noticeable part of a bind.
    _UNSET = {"_threads": None, "warnings": (), "notes": (), "pages_not_migrated": None, "pages_migrated": None,
              "locality": None}

    def __getattr__(self, name: str) -> "Any":   # only called for a slot that was never set
        try:
            return BindReport._UNSET[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}") from None

    def __hash__(self) -> int:   # a Locality holds dicts
        return hash((self.requested, self.applied, self.backend, self.warnings, self.notes))

    @classmethod
    def _fields(cls) -> tuple[str, ...]:
        return cls._FIELDS

    @property
    def threads(self) -> tuple[ThreadResult, ...]:
        got = self._threads
        if got is None:
            walk = self._walk
            if isinstance(walk, BindCall):    # a clean bind keeps the one call's arrays, unread
                walk = walk.walk
            assert walk is not None   # _threads is None only while the walk is kept
            got = _thread_results(walk)
            object.__setattr__(self, "_threads", got)
            object.__setattr__(self, "_walk", None)
        return got

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
        loc = self.locality
        if loc is not None and loc.remote_share is not None:
            lines.append(f"locality:  {100 * loc.local_share:.1f}% of {loc.total_pages} resident pages on nodes "
                         f"{format_cpulist(loc.cpu_nodes)} (the nodes of its CPUs)")
        lines += [f"warning:   {w}" for w in self.warnings]
        lines += [f"note:      {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> "dict[str, Any]":
        """JSON-serializable; plans in their text form (:meth:`Plan.to_text`). :meth:`from_dict` reads it back."""
        return {"requested": self.requested.to_text(), "applied": self.applied.to_text(),
                "backend": self.backend, "backend_reason": self.backend_reason,
                "threads": [t.to_dict() for t in self.threads], "warnings": list(self.warnings),
                "notes": list(self.notes), "pages_migrated": self.pages_migrated,
                "pages_not_migrated": self.pages_not_migrated,
                "locality": None if self.locality is None else self.locality.to_dict()}

    @classmethod
    def from_dict(cls, data: object) -> "BindReport":
        """Parse :meth:`to_dict` output strictly (plans through :meth:`Plan.from_text`); ValueError otherwise."""
        if not isinstance(data, dict):
            raise ValueError("a bind report is not an object")
        for key in ("requested", "applied", "backend", "backend_reason"):
            if not isinstance(data.get(key), str):
                raise ValueError(f"{key} is not a string")
            _capped(data[key], key, MAX_REPORT_NAME if key == "backend" else MAX_REPORT_TEXT)

        def strings(key: str) -> tuple[str, ...]:
            value = data.get(key)
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{key} is not a list of strings")
            if len(value) > MAX_REPORT_LINES:
                raise ValueError(f"{key} has {len(value)} entries, more than the cap of {MAX_REPORT_LINES}")
            for v in value:
                _capped(v, f"an entry of {key}")
            return tuple(value)

        def count(key: str) -> int | None:
            value = data.get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise ValueError(f"{key} is not an int")
            return value

        threads = data.get("threads", [])
        if not isinstance(threads, list):
            raise ValueError("threads is not a list")
        if len(threads) > MAX_REPORT_THREADS:
            raise ValueError(f"threads has {len(threads)} entries, more than the cap of {MAX_REPORT_THREADS}")
        locality = None
        if data.get("locality") is not None:
            from .residency import Locality

            locality = Locality.from_dict(data["locality"])
        return cls(requested=Plan.from_text(data["requested"]), applied=Plan.from_text(data["applied"]),
                   backend=data["backend"], backend_reason=data["backend_reason"],
                   threads=tuple(ThreadResult.from_dict(t) for t in threads), warnings=strings("warnings"),
                   notes=strings("notes"), pages_migrated=count("pages_migrated"),
                   pages_not_migrated=count("pages_not_migrated"), locality=locality)


# A clean bind's report is built without ``__init__``'s checks and copies, by the slots' own setters; the slots
# left unset read as BindReport._UNSET says (no warnings, no pages counted, threads not decoded yet).
_new_report = object.__new__
_modules = sys.modules
_set_requested = BindReport.__dict__["requested"].__set__
_set_applied = BindReport.__dict__["applied"].__set__
_set_backend = BindReport.__dict__["backend"].__set__
_set_backend_reason = BindReport.__dict__["backend_reason"].__set__
_set_walk = BindReport.__dict__["_walk"].__set__
_set_notes = BindReport.__dict__["notes"].__set__


# ----------------------------------------------------------------------------- weighted interleave
def interleave_weights() -> dict[int, int] | None:
    """The system-wide weighted-interleave weight of each node (``/sys/kernel/mm/mempolicy/weighted_interleave``),
    or None when the kernel has no weighted interleave (before Linux 6.9)."""
    system = live.interleave_weights()
    return None if system is None else dict(system.weights)


def set_interleave_weights(weights: "Any", *, backend: "BackendName | None" = None) -> dict[int, int]:
    """Write the system-wide weights of the nodes in ``weights`` (a mapping or ``"0:3,1:1"``); returns the
    weights those nodes had before. System-wide, needs root; on Linux 6.16+ a write switches the kernel's auto mode
    off. Raises :class:`BindError` naming the file (earlier writes put back), :class:`PlanError` for bad weights or
    a kernel without weighted interleave.
    """
    from .plan import parse_weights

    if isinstance(weights, str):
        weights = parse_weights(weights)
    nodes = frozenset(weights) if isinstance(weights, dict) else None
    if nodes is None:
        try:
            weights = dict(weights)
            nodes = frozenset(weights)
        except (TypeError, ValueError):
            raise PlanError(f"set_interleave_weights needs a mapping node -> weight, got {weights!r}"[:300]) from None
    checked = Plan(mem_policy="weighted-interleave", mem_nodes=nodes or frozenset({0}), weights=weights).weights
    system = live.interleave_weights()
    if system is None:
        raise PlanError("this kernel has no weighted interleave (Linux 6.9 or newer has it): "
                        "/sys/kernel/mm/mempolicy/weighted_interleave is absent")
    unknown = frozenset(checked or ()) - frozenset(system.weights)
    if unknown:
        raise PlanError(f"nodes {format_cpulist(unknown)} have no weight file in /sys/kernel/mm/mempolicy/"
                        f"weighted_interleave (nodes with one: {format_cpulist(system.weights)})")
    be, _ = get_backend(backend)
    old = {n: system.weights[n] for n in checked or ()}
    write_weights(be, dict(checked or {}), old)
    log.info("interleave weights set to %s (were %s)", format_weights(checked or {}), format_weights(old))
    return old


def bound_environ(report: BindReport, environ: "Any" = None) -> dict[str, str]:
    """The environment to exec a command with after binding this process: ``environ`` (default ``os.environ``)
    plus ``_NUMABIND_BOUND=<pid>:<start time>|<requested plan>|<applied plan>``, which ``numabind stat`` trusts
    only when the pid and start time are the process's own (a child has another pid; 0 when ``/proc`` cannot be
    read: never trusted)."""
    env = environ_copy() if environ is None else dict(environ)
    # /proc/self/stat as numabind._proc.start_time reads it; _proc is not imported on numabind run's path
    stat = live.reader().read("proc/self/stat") or ""
    fields = stat[stat.rfind(")") + 2:].split()
    start = fields[19] if len(fields) > 19 and fields[19].isdigit() else "0"
    env[BOUND_ENV] = f"{os.getpid()}:{start}|{report.requested.to_text()}|{report.applied.to_text()}"
    return env


_last_applied: tuple[Plan | None, Plan | None] = (None, None)   # the last plan bound cleanly, and its applied


def _clean_report(plan: Plan, be: Backend, why: str, threads: "ThreadMode", one: BindCall) -> BindReport | None:
    """The report of a bind that :meth:`Backend.apply_all` did in full, read back exactly as asked: nothing
    to explain, undo or narrow. None when the policy read back is one a Plan cannot carry."""
    global _last_applied
    notes: tuple[str, ...] = ()
    if plan.mem_policy is None:
        now = one.now()
        if not isinstance(now, tuple) or now[0] not in MEM_POLICIES:
            return None
        cpus = plan.cpus if plan.cpus is not None else one.walk.after(0)   # type: ignore[union-attr]
        applied = read_back_plan(cpus, now[0], now[1] or None)
    else:
        last = _last_applied
        if last[0] is plan:
            applied = last[1]   # type: ignore[assignment]
        else:    # what the kernel read back is the plan's own CPUs and nodes, bit for bit
            cpus = plan.cpus if plan.cpus is not None else one.walk.after(0)   # type: ignore[union-attr]
            applied = read_back_plan(cpus, plan.mem_policy, plan.mem_nodes or None)
            if plan.cpus is not None:
                _last_applied = (plan, applied)
        others = 0 if one.released else one.processed - 1    # released: the caller alone
        if others > 0:
            others -= one.exited
        if others > 0:
            notes = (f"the memory policy was set on the calling thread only; {others} other thread(s) keep "
                     f"theirs and allocate from the local node of the CPUs they run on (use migrate=True to move "
                     f"pages they already touched)",)
    if "logging" in _modules and log.isEnabledFor(INFO):   # no record is seen before logging is imported (_base)
        who = (f"thread {one.walk.tids[0]} of pid {os.getpid()}"   # type: ignore[union-attr]
               if threads == "current" else f"pid {os.getpid()}")
        log.info("%s bound via %s: %s", who, be.name, applied.describe())
    report = _new_report(BindReport)
    _set_requested(report, plan)
    _set_applied(report, applied)
    _set_backend(report, be.name)
    _set_backend_reason(report, why)
    _set_walk(report, one)
    if notes:
        _set_notes(report, notes)
    return report


_NO_IDS: frozenset[int] = frozenset()
_STRICT_FLAGS = {threads: WALK_FLAGS[threads, True] for threads in THREAD_MODES}    # WALK_FLAGS without a tuple
_LENIENT_FLAGS = {threads: WALK_FLAGS[threads, False] for threads in THREAD_MODES}


def bind_current(plan: Plan, strict: Strictness | None = None, *, threads: "ThreadMode" = "matching",
                 backend: "BackendName | None" = None, set_weights: bool = False) -> BindReport:
    """Bind the running process to ``plan`` (the CPU affinity of every thread, the calling thread's memory policy)
    and report what the kernel then holds (:class:`BindReport`). The whole story is docs/guide.rst, "Binding, in
    depth".

    ``threads``: ``"matching"`` (those whose CPUs are the caller's; the others, pinned on purpose, are left alone
    with a warning), ``"all"`` or ``"current"``; threads started while it walks are bound too. ``strict`` (default
    ``$NUMABIND_STRICT``): True raises :class:`PlanError` or :class:`BindError` on any weakening, everything this
    call changed rolled back; False degrades step by step (hard bind, preferred, CPU only, nothing), a warning per
    step; ``"partial"`` degrades, but raises when nothing of the plan is in force in the end. ``set_weights``
    writes a weighted-interleave plan's weights system-wide (root). An exception that escapes leaves nothing of
    the call in force; binds in one process run one at a time; a plan that names CPUs or nodes the machine does
    not have is a :class:`PlanError` in every mode. Usable as a multiprocessing initializer:
    ``Pool(initializer=numabind.bind_current, initargs=(plan,))``.
    """
    # the checks, settings and fast path below are spelled out for speed: a bind takes microseconds
    if type(plan) is not Plan:
        check_plan(plan, "bind_current")
    if threads not in THREAD_MODES:
        check_threads(threads)
    live.check_present(plan, "bind_current")    # CPUs or nodes the machine lacks: a PlanError in every mode
    if strict is None and backend is None:
        strict, from_env = bind_settings()
        be, why = backend_for(None, from_env)
    else:
        strict = strict_default(strict)
        be, why = get_backend(backend)
    weights = set_weights and bool(plan.weights)
    one = tx = unlisted = None
    pending = [None]    # what the one call did, recorded before it runs (see Backend.apply_all)
    # one bind (and its rollback) at a time in this process: apply_all, or hold, takes the process's bind lock
    try:
        if be.in_process_memory and not weights:
            # the memory policy, the thread list and every thread's CPUs set and read back in one call
            flags = (_STRICT_FLAGS if strict is True else _LENIENT_FLAGS)[threads]
            try:
                one = be.apply_all(plan.mem_policy, plan.mem_nodes or _NO_IDS, plan.cpus, flags, strict is True,
                                   pending)
            except BindError as e:   # the threads cannot be listed: nothing was changed
                if strict is True:
                    raise BindError(e.errno, e.syscall, f"{e.detail}; nothing was changed (threads='current' "
                                                        f"binds the calling thread alone)") from None
                unlisted = e
                one = be.apply_all(plan.mem_policy, plan.mem_nodes or _NO_IDS, plan.cpus, flags | WALK_ONLY_CALLER,
                                   False, pending, keep_lock=True)
            if one is not None and not plan.migrate and plan.mem_policy != "weighted-interleave":
                if one.released:      # the caller alone, bound exactly as asked: nothing to explain or undo
                    report = _clean_report(plan, be, why, threads, one)
                    if report is not None:
                        pending[0] = None   # nothing to release (no signal is taken between this and the return)
                        return report
                elif one.clean and unlisted is None:   # clean: the call's walk settled too (BindCall.settle)
                    report = _clean_report(plan, be, why, threads, one)
                    if report is not None:
                        return report
        from ._transaction import Transaction   # the slow path: explain, degrade or roll back

        quiet = be.hold(pending)   # a no-op unless the one call released the lock (it was clean)
        tx = Transaction(plan, strict, be)
        if not quiet:
            tx.cpus_taken = True
        if unlisted is not None:
            tx.unlisted(unlisted)
            threads = "current"
        if weights:
            tx.apply_weights()
        if one is None:
            tx.apply_memory()
            walk = tx.apply_cpus(threads)
        else:
            walk = tx.take(one, threads)
        applied = tx.read_back(walk)
        tx.check_partial()
        left = tx.migrate()      # last: nothing after it can fail and leave pages moved for a binding undone
        if plan.mem_policy is not None and be.in_process_memory and walk.processed > 1:
            others = walk.processed - 1 - list(walk.status[1:walk.processed]).count(WALK_EXITED)
            if others:
                tx.notes.append(
                    f"the memory policy was set on the calling thread only; {others} other thread(s) keep "
                    f"theirs and allocate from the local node of the CPUs they run on (use migrate=True to "
                    f"move pages they already touched)")
        report = BindReport(requested=plan, applied=applied, backend=be.name, backend_reason=why,
                            warnings=tx.warnings, notes=tx.notes, pages_not_migrated=left,
                            pages_migrated=tx.pages_migrated, locality=tx.locality, _walk=walk)
        for text in tx.warnings:   # logged each as it came; said on stderr where logging shows nothing
            warn_degraded(text)
        if log.isEnabledFor(INFO):
            who = f"thread {walk.tids[0]} of pid {os.getpid()}" if threads == "current" else f"pid {os.getpid()}"
            log.info("%s bound via %s: %s", who, be.name, applied.describe())
        return report
    except BaseException as exc:
        # strict failures have rolled back already; anything else (a bug, a signal handler's exception
        # raised the moment the native call returned) must not leave a half binding, in any mode
        _roll_back(be, tx, exc, pending)
        raise
    finally:
        if pending[0] is not None:
            be.end_call(pending)    # the bind lock, held since apply_all or hold


def _roll_back(be: Backend, tx: "Any", exc: BaseException, pending: "list[Any]") -> None:
    """Undo whatever this bind changed when ``exc`` escapes it: the transaction's undo log, and the one call's
    changes not yet in it; what could not be put back is said on ``exc`` (and logged)."""
    from ._transaction import note_not_undone, undo_call

    stayed = tx.rollback() if tx is not None else []
    call = be.pending_call(pending)
    if call is not None:
        # the lock again if the call let it go (a clean bind of the caller alone): whether another bind ran since
        stayed += undo_call(be, call, cpus=be.hold(pending))
    note_not_undone(exc, stayed)


def bind_thread(plan: Plan, strict: Strictness | None = None, *,
                backend: "BackendName | None" = None) -> "_ThreadBinding":
    """Bind only the calling thread to ``plan`` for the ``with`` block, then put it back as it was.

    ``with numabind.bind_thread(plan) as report: ...``: a process started in the block is bound from its first
    instruction, the other threads never see a change. ``migrate`` is ignored. Strict failures raise on entry,
    rolled back; a memory policy that cannot be read is not changed (strict raises). On exit the thread's CPUs and
    whole memory policy are restored; a failure to restore is a WARNING.
    """
    check_plan(plan, "bind_thread")
    live.check_present(plan, "bind_thread")
    return _ThreadBinding(plan, strict_default(strict), backend)


class _ThreadBinding:
    """The context manager :func:`bind_thread` returns."""

    __slots__ = ("plan", "strict", "backend", "_be", "_cpus", "_saved")

    def __init__(self, plan: Plan, strict: Strictness, backend: "BackendName | None") -> None:
        self.plan, self.strict, self.backend = plan, strict, backend
        self._be: Backend | None = None
        self._cpus: frozenset[int] = frozenset()
        self._saved: MemPolicyState | None = None

    def __enter__(self) -> BindReport:
        plan, strict = self.plan, self.strict
        be, _ = get_backend(self.backend)
        cpus = be.get_affinity(0)
        bind = plan.replace(migrate=False) if plan.migrate else plan
        saved: MemPolicyState | None = None
        unsaved = None
        if bind.mem_policy is not None and be.in_process_memory:
            try:  # the whole mode word (MPOL_F_* flags included) and node mask, to be put back exactly
                saved = be.save_mempolicy()
            except BindError as e:
                unsaved = (f"memory policy {bind.mem_policy} {format_cpulist(bind.mem_nodes or ())} not applied: "
                           f"the launching thread's memory policy cannot be read ({e}), so it could not be "
                           f"restored afterwards")
                if strict is True or (strict == "partial" and bind.cpus is None):
                    raise BindError(e.errno, "get_mempolicy", f"{unsaved}; nothing was changed") from None
                log.warning("%s; the thread keeps its policy", unsaved)
                warn_degraded(f"{unsaved}; the thread keeps its policy")
                bind = Plan(cpus=bind.cpus, reason=bind.reason)
        report = bind_current(bind, strict=strict, threads="current", backend=self.backend)
        self._be, self._cpus, self._saved = be, cpus, saved
        if unsaved is not None:
            report = report.replace(requested=plan, warnings=(*report.warnings, unsaved))
        return report

    def __exit__(self, *exc: object) -> None:
        be = self._be
        if be is None:
            return
        self._be = None
        try:
            be.set_affinity(0, self._cpus)
            if self._saved is not None:
                be.restore_mempolicy(self._saved)
        except NumabindError as e:
            log.warning("could not restore the thread's binding: %s", e)
