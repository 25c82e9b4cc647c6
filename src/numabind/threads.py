"""One thread per core inside this process: :func:`pin_threads` (what ``likwid-pin``, ``KMP_AFFINITY=compact``
and ``OMP_PLACES=cores`` do, done from Python), and the report of what it applied, :class:`PinReport`.

Planning stays pure: which CPUs each thread gets is :func:`numabind.strategies.thread_placement`. This
module only lists the threads (``/proc/self/task``, when none are named), applies each thread's CPUs
through the backend's per-thread ``sched_setaffinity`` and reads them back. A thread the kernel refuses is
raised (``strict=True``, after the threads pinned before it are put back) or reported and logged at WARNING
(``strict=False``); it is never dropped from the report. A thread that exits meanwhile is reported as
``exited``.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import live
from ._base import Strictness
from .backends import get_backend
from .bind import strict_default
from .cpulist import format_cpulist
from .errors import BindError, PlanError, warn_degraded

if TYPE_CHECKING:  # pragma: no cover
    from .types import BackendName
from .plan import Plan, check_plan, core_groups
from .strategies import THREAD_ORDERS, thread_placement, topology_or_discover
from .topology import Topology

__all__ = ["PinReport", "PinnedThread", "pin_threads"]

log = logging.getLogger(__name__)

#: What happened to one thread: its CPUs read back as asked; set, but the kernel holds fewer (its cpuset
#: narrowed them); refused; gone before it could be pinned.
PIN_STATUSES = ("pinned", "narrowed", "failed", "exited")


@dataclass(frozen=True)
class PinnedThread:
    """One thread of a :func:`pin_threads`: the CPUs it was given (``cpus``), what it held ``before`` and
    what the kernel holds ``after`` (None when it exited), ``status`` (one of ``pinned``, ``narrowed``,
    ``failed``, ``exited``) and, when not pinned, why (``detail``)."""

    tid: int
    name: str
    cpus: frozenset[int]
    before: frozenset[int] | None
    after: frozenset[int] | None
    status: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.status not in PIN_STATUSES:
            raise PlanError(f"status {self.status!r} is not one of {', '.join(PIN_STATUSES)}")

    def to_dict(self) -> dict[str, Any]:
        def ids(v: frozenset[int] | None) -> str | None:
            return None if v is None else format_cpulist(v)

        return {"tid": self.tid, "name": self.name, "cpus": ids(self.cpus), "before": ids(self.before),
                "after": ids(self.after), "status": self.status, "detail": self.detail}


@dataclass(frozen=True)
class PinReport:
    """The outcome of :func:`pin_threads`: the ``plan``, the ``order``, the ``backend`` that applied it, one
    :class:`PinnedThread` per thread asked for (in the order given), and every degradation in ``warnings``."""

    plan: Plan
    order: str
    backend: str
    threads: tuple[PinnedThread, ...]
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether every thread still alive holds exactly the CPUs it was given."""
        return all(t.status in ("pinned", "exited") for t in self.threads)

    @property
    def applied(self) -> dict[int, frozenset[int]]:
        """Thread id -> the CPUs the kernel holds for it now (threads that exited left out)."""
        return {t.tid: t.after for t in self.threads if t.after is not None}

    def describe(self) -> str:
        """One line per thread, e.g. ``thread 4711 (worker): CPUs 0,64 pinned``."""
        lines = [f"{len(self.threads)} threads, order {self.order}, backend {self.backend}"]
        for t in self.threads:
            shown = "-" if t.after is None else format_cpulist(t.after)
            lines.append(f"thread {t.tid} ({t.name}): CPUs {shown} {t.status}" + (f": {t.detail}" if t.detail else ""))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"plan": self.plan.describe(), "order": self.order, "backend": self.backend,
                "threads": [t.to_dict() for t in self.threads], "warnings": list(self.warnings)}


def _thread_ids(threads: object) -> list[int]:
    """Native thread ids from ``threads`` (ids, or objects with a ``native_id`` such as ``threading.Thread``);
    None: every thread of this process but the calling one."""
    if threads is None:
        return live.thread_ids()[1:]      # the caller is listed first
    if isinstance(threads, (int, str, bytes)) or not isinstance(threads, Iterable):
        raise PlanError(f"threads must be an iterable of native thread ids or threading.Thread objects, got "
                        f"{type(threads).__name__}: {threads!r}; for one thread write threads=[{threads!r}]"[:400])
    out: list[int] = []
    for item in threads:
        tid = getattr(item, "native_id", item)
        if not isinstance(tid, int) or isinstance(tid, bool) or tid <= 0:
            hint = " (a thread that was not started yet has none)" if hasattr(item, "native_id") else ""
            raise PlanError(f"threads: {item!r} is not a native thread id{hint}; give threading.get_native_id() "
                            f"values or started threading.Thread objects"[:400])
        if tid in out:
            raise PlanError(f"threads: thread {tid} is listed twice; one thread gets one core")
        out.append(tid)
    return out


def _why(err: int, cpus: frozenset[int], topology: Topology) -> str:
    """What a refused ``sched_setaffinity`` most likely means, and the fix."""
    if err == errno.EINVAL:
        return (f"CPUs {format_cpulist(cpus)} are outside what the thread may use (the cpuset allows "
                f"{format_cpulist(topology.allowed_cpus)}) or offline; plan inside the cpuset")
    if err == errno.EPERM:
        return ("the thread is not this process's, or a seccomp profile or a missing CAP_SYS_NICE refuses "
                "sched_setaffinity (containers: --cap-add SYS_NICE or a seccomp profile that allows it); "
                "strict=False reports it instead")
    return "the kernel refused it"


def pin_threads(plan: Plan, threads: Iterable[object] | None = None, order: str = "compact", *,
                topology: Topology | None = None, strict: Strictness | None = None,
                backend: BackendName | None = None) -> PinReport:
    """Place each of ``threads`` on its own core of ``plan``: a pool's threads (torch's intra-op pool, an
    OpenMP team after its first parallel region, a ``ThreadPoolExecutor``'s workers), one per core.

    ``threads``: native thread ids (``threading.get_native_id()``, ``Thread.native_id``) or started
    ``threading.Thread`` objects, in the order they take the cores; None (the default) is every thread of
    this process except the calling one, which keeps its CPUs (it usually holds the whole plan already, through
    :func:`numabind.bind_current`, and a pool it starts later inherits them). ``order`` is ``compact`` or
    ``scatter`` (:data:`numabind.strategies.THREAD_ORDERS`); the cores are ``topology``'s (discovered when
    None). The CPUs each thread gets are :func:`numabind.strategies.thread_placement`'s: a whole core each
    (its hyperthreads in the plan); with more threads than cores ``strict=True`` raises
    :class:`~numabind.PlanError`, otherwise each thread gets one CPU, each core's first hyperthread first,
    wrapping around (a WARNING says so).

    A plan that names CPUs this machine does not have online (absent or offline) raises
    :class:`~numabind.PlanError` in every mode, before any thread is touched.

    Every thread is set and read back through the backend (``backend`` or ``$NUMABIND_BACKEND``). A thread
    the kernel refuses raises :class:`~numabind.BindError` under ``strict=True`` (the threads pinned before it
    are put back first) and is reported with status ``failed`` and logged at WARNING otherwise;
    ``strict="partial"`` raises only when no thread could be pinned; a degradation is said on stderr
    once per distinct cause where logging shows nothing (:func:`numabind.errors.warn_degraded`). ``strict`` None reads
    ``NUMABIND_STRICT``. Returns a :class:`PinReport`: per thread the CPUs given, held before and read back.
    """
    check_plan(plan, "pin_threads")
    live.check_present(plan, "pin_threads")    # CPUs the machine lacks: a PlanError in every mode
    if order not in THREAD_ORDERS:
        raise PlanError(f"order {order!r} is not one of {', '.join(THREAD_ORDERS)}")
    strict = strict_default(strict)
    tids = _thread_ids(threads)
    topo = topology_or_discover(topology)
    placement = thread_placement(plan, len(tids), topo, order=order, strict=strict is True)
    be, _ = get_backend(backend)
    warnings: list[str] = []
    cores = len(core_groups(plan.cpus or (), topo))
    if len(tids) > cores:
        shared = (f"{len(tids)} threads for the {cores} cores of the plan (CPUs {format_cpulist(plan.cpus or ())}): "
                  f"one CPU per thread, threads sharing cores")
        log.warning("pin_threads: %s", shared)
        warnings.append(shared)
    results: list[PinnedThread] = []
    first_errno = 0
    for tid, cpus in zip(tids, placement):
        name = live.thread_name(tid)
        before: frozenset[int] | None = None
        try:
            before = be.get_affinity(tid)
            be.set_affinity(tid, cpus)
            after = be.get_affinity(tid)
        except BindError as e:
            if e.errno == errno.ESRCH:
                results.append(PinnedThread(tid, name, cpus, before, None, "exited", "the thread exited"))
                continue
            hint = _why(e.errno, cpus, topo)
            why = f"thread {tid} ({name}) to CPUs {format_cpulist(cpus)}: {hint}"
            if strict is True:
                _put_back(be, results)
                raise BindError(e.errno, e.syscall, f"pin_threads {why}; the threads pinned before it were put "
                                                     f"back") from e
            first_errno = first_errno or e.errno
            log.warning("pin_threads: %s (%s)", why, e)
            warnings.append(f"{why} ({e})")
            results.append(PinnedThread(tid, name, cpus, before, before, "failed", f"{e}; {hint}"))
            continue
        if after == cpus:
            results.append(PinnedThread(tid, name, cpus, before, after, "pinned"))
            continue
        why = (f"thread {tid} ({name}) holds CPUs {format_cpulist(after)}, not the {format_cpulist(cpus)} it was "
               f"given (its cpuset narrowed them)")
        if strict is True:
            results.append(PinnedThread(tid, name, cpus, before, after, "narrowed", why))
            _put_back(be, results)
            raise BindError(errno.EINVAL, "sched_setaffinity", f"pin_threads: {why}; the threads pinned were put back")
        log.warning("pin_threads: %s", why)
        warnings.append(why)
        results.append(PinnedThread(tid, name, cpus, before, after, "narrowed", why))
    if strict == "partial" and results and not any(r.status in ("pinned", "narrowed") for r in results):
        failed = [r for r in results if r.status == "failed"]
        if failed:
            raise BindError(first_errno, "sched_setaffinity", f"pin_threads: no thread could be pinned: "
                                                              f"{failed[0].detail}")
    report = PinReport(plan, order, be.name, tuple(results), tuple(warnings))
    for text in warnings:   # logged each as it came; said on stderr where logging shows nothing
        warn_degraded(f"pin_threads: {text}", "numabind.threads")
    log.info("pin_threads (%s, %s): %s", order, be.name,
             "; ".join(f"{r.tid}->{format_cpulist(r.after or ())} {r.status}" for r in results) or "no threads")
    return report


def _put_back(be: Any, results: list[PinnedThread]) -> None:
    """Each thread already set back to the CPUs it held before (best effort: one that exited is skipped)."""
    for r in reversed(results):
        if r.before is not None and r.status in ("pinned", "narrowed"):
            try:
                be.set_affinity(r.tid, r.before)
            except BindError as e:
                log.warning("pin_threads: thread %d could not be put back on CPUs %s: %s", r.tid,
                            format_cpulist(r.before), e)
