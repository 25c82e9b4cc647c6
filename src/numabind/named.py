"""Named threads inside a worker's slice: :func:`pin_named_threads` gives each thread whose name (its ``comm``)
matches a pattern its own share of a plan's CPUs, and :func:`watch_named_threads` places the threads that appear
(or rename themselves) later.

A layout maps a thread-name pattern (an :mod:`fnmatch` glob over ``/proc/PID/task/TID/comm``) to a share:

- ``N``: N whole cores of the plan, taken in order (:func:`numabind.plan.core_groups`: by node, then lowest CPU);
- ``cpus:LIST``: these CPUs, which must lie inside the plan;
- ``rest`` (or ``*``): the plan's CPUs that no other share took.

The first pattern a thread's name matches wins, in the order given. Planning (:func:`layout_shares`) is pure; the
placing sets each thread through the backend's per-thread ``sched_setaffinity`` and reads it back.
"""

from __future__ import annotations

import errno
import fnmatch
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Union

from . import _proc
from ._base import printable
from .backends import get_backend
from .cpulist import MAX_ID, format_cpulist, parse_cpulist
from .errors import BindError, NumabindError, PlanError
from .plan import Plan, check_plan, core_groups
from .strategies import topology_or_discover
from .topology import Topology

if TYPE_CHECKING:  # pragma: no cover
    from .backends import Backend
    from .plan import CoresView
    from .types import BackendName

__all__ = ["NamedReport", "NamedThread", "Share", "layout_shares", "parse_layout_item", "pin_named_threads",
           "watch_named_threads"]

log = logging.getLogger(__name__)

#: A share as given: a number of whole cores, ``"rest"``/``"*"``, ``"cpus:LIST"``, a spec's text (``"2"``), or CPU ids.
ShareSpec = Union[int, str, Iterable[int]]
#: A layout: pattern -> share, in order (a mapping keeps its order), or (pattern, share) pairs.
Layout = Union[Mapping[str, ShareSpec], Iterable[tuple[str, ShareSpec]]]

#: What happened to one thread: placed as asked; set, but the kernel holds fewer CPUs; refused; exited before or
#: while it was set (or its id came to name another thread); matched by no pattern (left as it was).
STATUSES = ("placed", "narrowed", "failed", "exited", "unmatched")
#: The spellings of the share of the CPUs no other share took.
REST = ("rest", "*")
#: The watch's pause between two listings of ``/proc/PID/task``: the first after a change, and the longest (the
#: pause doubles while nothing changes).
WATCH_FIRST_S, WATCH_LONGEST_S = 0.02, 0.5
#: How long after its birth a thread that no pattern but ``rest`` matched has its name read again (a thread
#: usually names itself right after it starts, with the name it inherited until then).
RENAME_WINDOW_S = 2.0
#: How to fix a refusal of the kernel.
_FIX = {errno.EPERM: "setting another user's threads needs CAP_SYS_NICE (run as the process's user, or root)",
        errno.EINVAL: "the CPUs are outside the thread's cpuset (see /proc/PID/task/TID/status Cpus_allowed_list)"}


@dataclass(frozen=True)
class Share:
    """One entry of a layout, resolved: the ``pattern``, the spec as given (``spec``: ``2``, ``cpus:4-5``,
    ``rest``) and the CPUs it stands for."""

    pattern: str
    spec: str
    cpus: frozenset[int]

    @property
    def rest(self) -> bool:
        return self.spec in REST

    def to_dict(self) -> dict[str, Any]:
        return {"pattern": self.pattern, "spec": self.spec, "cpus": format_cpulist(self.cpus)}


@dataclass(frozen=True)
class NamedThread:
    """One thread of a :func:`pin_named_threads` (or of a watch): its ``tid``, ``name``, the ``pattern`` it matched
    (None: none), the CPUs it was given (``cpus``; None when unmatched), held ``before`` and read back ``after``
    (None when it exited), ``status`` (:data:`STATUSES`) and, when not placed, why (``detail``)."""

    tid: int
    name: str
    pattern: str | None
    cpus: frozenset[int] | None
    before: frozenset[int] | None
    after: frozenset[int] | None
    status: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise PlanError(f"status {self.status!r} is not one of {', '.join(STATUSES)}")

    def to_dict(self) -> dict[str, Any]:
        def ids(v: frozenset[int] | None) -> str | None:
            return None if v is None else format_cpulist(v)

        return {"tid": self.tid, "name": self.name, "pattern": self.pattern, "cpus": ids(self.cpus),
                "before": ids(self.before), "after": ids(self.after), "status": self.status, "detail": self.detail}


@dataclass(frozen=True)
class NamedReport:
    """The outcome of :func:`pin_named_threads` or :func:`watch_named_threads`: the process (``pid``), the
    ``shares`` of the layout, the ``backend``, one :class:`NamedThread` per thread seen (a thread placed twice, as
    it renamed itself, appears once, as last placed), the watch's seconds (``watched``: 0 for none) and every
    degradation in ``warnings``."""

    pid: int
    shares: tuple[Share, ...]
    backend: str
    threads: tuple[NamedThread, ...]
    watched: float = 0.0
    warnings: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """Whether every thread still alive that a pattern matched holds exactly the CPUs of its share."""
        return all(t.status in ("placed", "exited", "unmatched") for t in self.threads)

    def then(self, later: NamedReport) -> NamedReport:
        """This report followed by ``later``'s (a watch of the same process): a thread in both appears as
        ``later`` has it."""
        again = {t.tid for t in later.threads}
        threads = (*(t for t in self.threads if t.tid not in again), *later.threads)
        return replace(self, threads=threads, watched=later.watched, warnings=(*self.warnings, *later.warnings))

    def describe(self) -> str:
        """One line per share, then one per thread, e.g. ``thread 4711 (acl_thread) acl_thread*: CPUs 0-3 -> 2
        placed``."""
        lines = [f"pid {self.pid}: {len(self.threads)} threads, backend {self.backend}"
                 + (f", watched {self.watched:g} s" if self.watched else "")]
        lines += [printable(f"share {s.pattern}={s.spec}: CPUs {format_cpulist(s.cpus)}") for s in self.shares]
        for t in self.threads:   # a thread's name is its process's choice: shown as ps shows it
            before = "-" if t.before is None else format_cpulist(t.before)
            after = "-" if t.after is None else format_cpulist(t.after)
            lines.append(printable(f"thread {t.tid} ({t.name}) {t.pattern or '(no pattern)'}: CPUs {before} -> "
                                   f"{after} {t.status}" + (f": {t.detail}" if t.detail else "")))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "backend": self.backend, "shares": [s.to_dict() for s in self.shares],
                "threads": [t.to_dict() for t in self.threads], "watched": self.watched, "ok": self.ok,
                "warnings": list(self.warnings)}


# ----------------------------------------------------------------------------- the layout (pure)
def parse_layout_item(text: str) -> tuple[str, str]:
    """``PATTERN=SPEC`` (the CLI's ``--thread``) as ``(pattern, spec)``; the last ``=`` splits (a pattern may hold
    one). A PlanError names the text and the forms."""
    pattern, eq, spec = text.rpartition("=")
    if not eq or not pattern or not spec:
        raise PlanError(f"--thread {text!r}: give PATTERN=SPEC, e.g. 'acl_thread=1', 'loop*=cpus:4-5' or '*=rest' "
                        f"(SPEC: N whole cores, cpus:LIST, or rest)")
    return pattern, spec


def _items(layout: Layout) -> list[tuple[str, ShareSpec]]:
    if isinstance(layout, Mapping):
        return list(layout.items())
    if isinstance(layout, (str, bytes)) or not isinstance(layout, Iterable):
        raise PlanError(f"layout must map thread-name patterns to shares (a dict, or (pattern, share) pairs), got "
                        f"{type(layout).__name__}: {layout!r}"[:400])
    items = []
    for item in layout:
        if not isinstance(item, tuple) or len(item) != 2:
            raise PlanError(f"layout: {item!r} is not a (pattern, share) pair"[:400])
        items.append(item)
    return items


def _cpu_ids(where: str, share: Iterable[Any]) -> str:
    """An iterable share's CPU ids as a list's text; PlanError unless each is a CPU id (an int from 0)."""
    ids = list(itertools.islice(share, MAX_ID + 2))
    if len(ids) > MAX_ID + 1 or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= MAX_ID
                                        for c in ids):
        raise PlanError(f"{where}: {ids[:8]!r} is not a set of CPU ids (ints from 0 to {MAX_ID}); give "
                        f"N (cores), 'cpus:LIST' or 'rest'"[:400])
    return format_cpulist(frozenset(ids))


def _spec(pattern: str, share: ShareSpec, plan_cpus: frozenset[int]) -> tuple[str, int | frozenset[int] | None]:
    """(the spec's text, a number of cores, explicit CPUs or None for rest) of one entry."""
    where = f"layout {pattern!r}"
    if isinstance(share, bool):
        raise PlanError(f"{where}: {share!r} is not a share; give N (cores), 'cpus:LIST' or 'rest'")
    if isinstance(share, int):
        if not -10 ** 9 < share < 10 ** 9:
            raise PlanError(f"{where}: a number of cores of {share.bit_length()} bits is no share; give a number "
                            f"of cores the plan has, 'cpus:LIST' or 'rest'")
        text = str(share)
    elif isinstance(share, str):
        text = share.strip()
    elif isinstance(share, Iterable) and not isinstance(share, (bytes, Mapping)):
        text = "cpus:" + _cpu_ids(where, share)
    else:
        raise PlanError(f"{where}: {share!r} is not a share; give N (cores), 'cpus:LIST' or 'rest'"[:400])
    if text in REST:
        return text, None
    if text.isascii() and text.isdigit() and len(text) <= 9:
        if int(text) < 1:
            raise PlanError(f"{where}: {text} cores is no share; give 1 or more cores, 'cpus:LIST' or 'rest'")
        return text, int(text)
    if not text.startswith("cpus:"):
        raise PlanError(f"{where}: share {text!r} is not one of N (whole cores, e.g. 2), cpus:LIST (e.g. cpus:4-5) "
                        f"or rest"[:400])
    try:
        cpus = parse_cpulist(text[5:], what=f"{where} cpus")
    except (NumabindError, ValueError) as e:
        raise PlanError(f"{where}: {e}") from None
    if not cpus:
        raise PlanError(f"{where}: {text!r} names no CPUs; give cpus:LIST, e.g. cpus:4-5")
    outside = cpus - plan_cpus
    if outside:
        raise PlanError(f"{where}: CPUs {format_cpulist(outside)} of {text} are outside the plan (CPUs "
                        f"{format_cpulist(plan_cpus)}); name CPUs of the plan")
    return text, cpus


def layout_shares(layout: Layout, plan: Plan, topology: CoresView | None = None) -> tuple[Share, ...]:
    """Each pattern of ``layout`` with its CPUs of ``plan``, in the order given (pure; the cores are
    ``topology``'s, each CPU a core of its own without one). Explicit CPU lists are taken as given (two may
    overlap); ``N`` takes the next N whole cores holding no CPU of an explicit list or of an earlier ``N``;
    ``rest`` is every CPU of the plan no other share took. A PlanError, before anything is placed, for a share
    outside the plan, more cores than the plan has left, a rest left empty, or a pattern given twice."""
    check_plan(plan, "pin_named_threads")
    if not plan.cpus:
        raise PlanError("pin_named_threads shares the plan's CPUs, but the plan leaves the CPUs as they are "
                        "(cpus=None); give a plan with CPUs")
    items = _items(layout)
    if not items:
        raise PlanError("the layout is empty: give at least one PATTERN=SPEC (e.g. 'main=1', '*=rest')")
    specs: list[tuple[str, str, int | frozenset[int] | None]] = []
    for pattern, share in items:
        if not isinstance(pattern, str) or not pattern:
            raise PlanError(f"layout: pattern {pattern!r} is not a thread-name glob (e.g. 'acl_thread', 'worker*')")
        if any(pattern == p for p, _, _ in specs):
            raise PlanError(f"layout: pattern {pattern!r} is given twice; give each pattern once")
        specs.append((pattern, *_spec(pattern, share, plan.cpus)))
    explicit = frozenset().union(*(s for _, _, s in specs if isinstance(s, frozenset)))
    free = [core for _, core in core_groups(plan.cpus, topology) if not core & explicit]
    taken: dict[str, frozenset[int]] = {}
    for pattern, text, s in specs:
        if isinstance(s, int):
            if s > len(free):
                raise PlanError(f"layout {pattern}={text}: {s} cores asked, but only {len(free)} whole cores of the "
                                f"plan (CPUs {format_cpulist(plan.cpus)}) are left for it; give fewer cores")
            taken[pattern] = frozenset().union(*free[:s])
            free = free[s:]
        elif isinstance(s, frozenset):
            taken[pattern] = s
    rest = plan.cpus - frozenset().union(*taken.values())
    out = []
    for pattern, text, s in specs:
        if s is None and not rest:
            raise PlanError(f"layout {pattern}={text}: the other shares take every CPU of the plan (CPUs "
                            f"{format_cpulist(plan.cpus)}), so rest is empty; give them fewer")
        out.append(Share(pattern, text, rest if s is None else taken[pattern]))
    return tuple(out)


def match(shares: Iterable[Share], name: str) -> Share | None:
    """The first share whose pattern ``name`` matches (case-sensitive, as ``comm`` is), or None."""
    return next((s for s in shares if fnmatch.fnmatchcase(name, s.pattern)), None)


# ----------------------------------------------------------------------------- placing
class _Placer:
    """Places threads of one process through one backend, keeping the last result per thread."""

    def __init__(self, pid: int, shares: tuple[Share, ...], be: Backend) -> None:
        self.pid, self.shares, self.be = pid, shares, be
        self.results: dict[int, NamedThread] = {}
        self.warnings: list[str] = []

    def look(self, tid: int) -> NamedThread:
        """Read thread ``tid``'s name and place it by the first share it matches."""
        name = _proc.thread_name(self.pid, tid)
        share = None if name == "?" else match(self.shares, name)
        result = self._unmatched(tid, name) if share is None else self._place(tid, name, share)
        self.results[tid] = result
        return result

    def _unmatched(self, tid: int, name: str) -> NamedThread:
        try:
            cpus: frozenset[int] | None = self.be.get_affinity(tid)
        except BindError:
            return NamedThread(tid, name, None, None, None, None, "exited", "the thread exited")
        return NamedThread(tid, name, None, None, cpus, cpus, "unmatched")

    def _place(self, tid: int, name: str, share: Share) -> NamedThread:
        start = _proc.thread_start_time(self.pid, tid)
        before: frozenset[int] | None = None
        if not start:
            return NamedThread(tid, name, share.pattern, share.cpus, None, None, "exited", "the thread exited")
        try:
            before = self.be.get_affinity(tid)
            self.be.set_affinity(tid, share.cpus)
            after = self.be.get_affinity(tid)
        except BindError as e:
            if e.errno == errno.ESRCH:
                return NamedThread(tid, name, share.pattern, share.cpus, before, None, "exited", "the thread exited")
            why = (f"thread {tid} ({name}) of pid {self.pid} to CPUs {format_cpulist(share.cpus)}: {e.brief}; "
                   f"{_FIX.get(e.errno, 'the kernel refused it')}")
            return self._degraded(NamedThread(tid, name, share.pattern, share.cpus, before, before, "failed", why))
        if _proc.thread_start_time(self.pid, tid) != start:
            return NamedThread(tid, name, share.pattern, share.cpus, before, None, "exited",
                               "the thread exited while it was set (its id may name another thread now)")
        if after != share.cpus:
            why = (f"thread {tid} ({name}) of pid {self.pid} holds CPUs {format_cpulist(after)}, not the "
                   f"{format_cpulist(share.cpus)} of {share.pattern}={share.spec} (its cpuset narrowed them)")
            return self._degraded(NamedThread(tid, name, share.pattern, share.cpus, before, after, "narrowed", why))
        log.info("pid %d thread %d (%s) matched %s: CPUs %s -> %s", self.pid, tid, name, share.pattern,
                 format_cpulist(before), format_cpulist(after))
        return NamedThread(tid, name, share.pattern, share.cpus, before, after, "placed")

    def _degraded(self, result: NamedThread) -> NamedThread:
        log.warning("pin_named_threads: %s", result.detail)
        self.warnings.append(result.detail)
        return result

    def report(self, watched: float = 0.0) -> NamedReport:
        return NamedReport(self.pid, self.shares, self.be.name, tuple(self.results.values()), watched,
                           tuple(self.warnings))


def _start(layout: Layout, plan: Plan, pid: int | None, topology: Topology | None,
           backend: BackendName | None) -> tuple[_Placer, int]:
    """The placer of ``pid`` (None: this process) and the process's start time; layout errors first."""
    if pid is None:
        pid = os.getpid()
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise PlanError(f"pin_named_threads: pid must be a process id (a positive int), got {pid!r}")
    shares = layout_shares(layout, plan, topology_or_discover(topology))
    _proc.check_procfs("pin_named_threads", acting=True)
    started = _proc.start_time(pid)
    if not started:
        raise NumabindError(f"pin_named_threads: no process {pid} (/proc/{pid} is absent, or it has exited); give "
                            f"the PID of a running process")
    be, _ = get_backend(backend)
    return _Placer(pid, shares, be), started


def pin_named_threads(layout: Layout, plan: Plan, *, pid: int | None = None, topology: Topology | None = None,
                      backend: BackendName | None = None) -> NamedReport:
    """Give each thread of process ``pid`` (None: this process) whose name matches a pattern of ``layout`` that
    pattern's share of ``plan``'s CPUs (:func:`layout_shares`; the first pattern matched wins, in the order
    given); threads no pattern matches keep their CPUs. ``topology``: whose cores ``N`` counts (default: this
    machine's, discovered).

    Each thread is set through the backend (``backend`` or ``$NUMABIND_BACKEND``) with ``sched_setaffinity`` and
    read back. A bad layout raises :class:`~numabind.PlanError` before any thread is touched; a thread the kernel
    refuses, or whose cpuset narrows its share, is reported (and logged at WARNING), never dropped. Threads born
    later inherit their creator's CPUs: :func:`watch_named_threads` places them. Returns a :class:`NamedReport`:
    per thread its name, the pattern it matched, its CPUs before and after."""
    placer, _ = _start(layout, plan, pid, topology, backend)
    for tid in _proc.task_ids(placer.pid):
        placer.look(tid)
    return placer.report()


def watch_named_threads(layout: Layout, plan: Plan, *, pid: int, seconds: float | None,
                        topology: Topology | None = None, backend: BackendName | None = None,
                        known: Iterable[int] = (), stop: Callable[[], bool] | None = None) -> NamedReport:
    """Place the threads of ``pid`` that appear during the next ``seconds`` (None: until the process ends), as
    :func:`pin_named_threads` would, and return what it placed; it stops early when the process ends, or when
    ``stop()`` says so.

    Cheap: it lists ``/proc/PID/task`` and reads the ``comm`` of new thread ids only (``known`` ids, e.g. those a
    :func:`pin_named_threads` placed, are not read), pausing 20 ms after a change and up to 0.5 s while nothing
    changes. A thread that no pattern but ``rest`` matched (or none) has its name read again for 2 s after it was
    first seen, since threads usually name themselves just after they start; once a pattern that is not ``rest``
    matched it, it is not read again."""
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0):
        raise PlanError(f"watch_named_threads: seconds must be a number of seconds (0 or more) or None, got "
                        f"{seconds!r}")
    placer, started = _start(layout, plan, pid, topology, backend)
    began = time.monotonic()
    deadline = None if seconds is None else began + seconds
    seen = set(known)
    renaming: dict[int, float] = {}    # tid -> until when its name is read again
    pause = WATCH_FIRST_S
    while _proc.start_time(placer.pid) == started and not (stop is not None and stop()):
        now = time.monotonic()
        changed = _new_threads(placer, seen, renaming, now) + _renamed(placer, renaming, now)
        pause = WATCH_FIRST_S if changed else min(pause * 2, WATCH_LONGEST_S)
        if deadline is not None and now >= deadline:
            break
        time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - now)))
    return placer.report(watched=round(time.monotonic() - began, 3))


def _new_threads(placer: _Placer, seen: set[int], renaming: dict[int, float], now: float) -> int:
    """Place the threads not seen before; the number found."""
    fresh = [tid for tid in _proc.task_ids(placer.pid) if tid not in seen]
    for tid in fresh:
        seen.add(tid)
        result = placer.look(tid)
        if result.status != "exited" and (result.pattern is None or _is_rest(placer, result.pattern)):
            renaming[tid] = now + RENAME_WINDOW_S
    return len(fresh)


def _renamed(placer: _Placer, renaming: dict[int, float], now: float) -> int:
    """Read again the names of threads inside their rename window; place those renamed; the number renamed."""
    changed = 0
    for tid, until in list(renaming.items()):
        if now > until:
            del renaming[tid]
            continue
        name = _proc.thread_name(placer.pid, tid)
        if name == "?":
            del renaming[tid]
            continue
        if name == placer.results[tid].name:
            continue
        changed += 1
        result = placer.look(tid)
        if result.status == "exited" or (result.pattern is not None and not _is_rest(placer, result.pattern)):
            del renaming[tid]
    return changed


def _is_rest(placer: _Placer, pattern: str) -> bool:
    return any(s.pattern == pattern and s.rest for s in placer.shares)
