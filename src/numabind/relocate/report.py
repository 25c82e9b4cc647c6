"""What :func:`numabind.move` did: :class:`MoveReport`, one :class:`ProcessMove` per process, and the report's note
on the memory policy the moved process keeps (:func:`policy_note`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .._base import printable
from .._numactl import POLICIES
from ..bind import ThreadResult
from ..cpulist import format_cpulist, parse_cpulist
from ..errors import PlanError
from ..plan import Plan
from ..residency import Locality

__all__ = ["MEMORY_POLICY_KEPT_NOTE", "MEMORY_POLICY_NOTE", "MoveReport", "ProcessMove", "policy_note"]

#: The report's one note about the memory policy ({policy}: the plan's; {theirs}: what the process's mappings show).
MEMORY_POLICY_NOTE = ("the kernel has no call that sets another process's memory policy: the moved process keeps "
                      "its own ({theirs}), so pages it allocates from now on follow that policy, not {policy}; only "
                      "the pages it already had were migrated (to place later allocations too, start it bound "
                      "with numabind run, or have it call numabind.bind_current)")
#: The note when the process's own policy already is the plan's ({policy}; {theirs}: what its mappings show).
MEMORY_POLICY_KEPT_NOTE = ("the kernel has no call that sets another process's memory policy, but the moved process's "
                           "own already is the plan's ({theirs}), so pages it allocates from now on follow {policy} "
                           "too; the pages it already had were migrated")
#: numa_maps's words for the memory policies (the kernel's ``mpol_to_str``) and numabind's names for them.
_MAPS_POLICIES = {maps: name for name, (_, maps) in POLICIES.items()}


class _Threads:
    """``threads_<status>`` of a :class:`ProcessMove` or a :class:`MoveReport`: how many of its threads ended in one
    status (``bound``, ``exited``, ``failed`` for refused, ``vanished``); read-only."""

    def __init__(self, status: str, doc: str) -> None:
        self.status, self.__doc__ = status, doc

    def __get__(self, obj: Any, owner: Any = None) -> int:
        if obj is None:
            return self  # type: ignore[return-value]   # the class's attribute (help, autodoc)
        return sum(1 for t in obj.threads if t.status == self.status)


@dataclass(frozen=True, slots=True)
class ProcessMove:
    """What :func:`move` did to one process (frozen).

    ``threads``: one :class:`~numabind.bind.ThreadResult` per thread (main thread first); ``pages_moved``:
    pages that left the other nodes; ``pages_left``: pages still on them afterwards, of which
    ``pages_left_shared`` are in file-backed or shared mappings; ``pages_refused``: what ``migrate_pages``
    said it could not move (None when it did not run); ``locality``: where the pages are after the move
    (:class:`~numabind.residency.Locality`, None when not read; a snapshot, not part of equality); ``error``: why
    the process could not be moved at all (it exited, it does not exist), else None; ``warnings``: this process's
    degradations; ``notes``: facts that are not (pages in mappings other processes share, which stayed).
    """

    pid: int
    name: str = "?"
    threads: tuple[ThreadResult, ...] = ()
    pages_moved: int | None = None
    pages_left: int | None = None
    pages_left_shared: int | None = None
    pages_refused: int | None = None
    locality: Locality | None = field(default=None, compare=False)
    error: str | None = None
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("threads", "warnings", "notes"):     # a list given is kept as a tuple
            object.__setattr__(self, name, tuple(getattr(self, name)))

    threads_bound = _Threads("bound", "Threads that hold the plan's CPUs.")
    threads_exited = _Threads("exited", "Threads that exited meanwhile.")
    threads_refused = _Threads("failed", "Threads whose CPUs the kernel refused to set.")
    threads_vanished = _Threads("vanished", "Threads whose id ended, or came to name another thread, while they "
                                            "were set: not counted as bound.")

    def describe(self) -> str:
        head = f"pid {self.pid} ({self.name})"
        if self.error:
            return printable(f"{head}: {self.error}")
        parts = [f"{self.threads_bound} thread(s) bound"]
        if self.threads_exited:
            parts.append(f"{self.threads_exited} exited meanwhile")
        if self.threads_vanished:
            parts.append(f"{self.threads_vanished} vanished (exited, or their ids came to name other threads, while "
                         f"being set: not counted as bound)")
        if self.threads_refused:
            parts.append(f"{self.threads_refused} refused")
        cpus = {t.after for t in self.threads if t.status == "bound" and t.after is not None}
        if len(cpus) == 1:
            parts.append(f"on CPUs {format_cpulist(next(iter(cpus)))}")
        line = f"{head}: " + ", ".join(parts)
        if self.pages_moved is not None or self.pages_left is not None:
            left = "?" if self.pages_left is None else str(self.pages_left)
            shared = f" ({self.pages_left_shared} shared or file-backed)" if self.pages_left_shared else ""
            line += (f"; pages: {self.pages_moved if self.pages_moved is not None else '?'} moved, "
                     f"{left} left on other nodes{shared}")
        loc = self.locality
        if loc is not None and loc.pages is not None:
            mib = loc.page_size / (1 << 20)
            line += "; now " + (", ".join(f"node {n}: {p * mib:.1f} MiB" for n, p in sorted(loc.node_pages.items()))
                                or "no resident pages")
        return printable(line)   # the name is the process's

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name, "error": self.error,
                "threads": [t.to_dict() for t in self.threads], "threads_bound": self.threads_bound,
                "threads_exited": self.threads_exited, "threads_refused": self.threads_refused,
                "pages_moved": self.pages_moved, "pages_left": self.pages_left,
                "pages_left_shared": self.pages_left_shared, "pages_refused": self.pages_refused,
                "node_pages": None if self.locality is None or self.locality.pages is None else
                {str(n): c for n, c in sorted(self.locality.node_pages.items())},
                "warnings": list(self.warnings), "notes": list(self.notes),
                **({"threads_vanished": self.threads_vanished} if self.threads_vanished else {})}


@dataclass(frozen=True, slots=True)
class MoveReport:
    """The outcome of :func:`move` (frozen): the plan asked for, the backend, one :class:`ProcessMove` per
    process (the one named first, then its descendants with ``all_children=True``), every degradation
    (``warnings``) and the facts that are not degradations (``notes``: among them, once, that the kernel
    cannot set another process's memory policy)."""

    requested: Plan
    backend: str
    backend_reason: str
    processes: tuple[ProcessMove, ...] = ()
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("processes", "warnings", "notes"):   # a list given is kept as a tuple
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def ok(self) -> bool:
        """Everything asked is in force: no warning."""
        return not self.warnings

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(p.pid for p in self.processes)

    @property
    def threads(self) -> tuple[ThreadResult, ...]:
        return tuple(t for p in self.processes for t in p.threads)

    threads_bound, threads_exited, threads_refused, threads_vanished = (
        ProcessMove.threads_bound, ProcessMove.threads_exited, ProcessMove.threads_refused,
        ProcessMove.threads_vanished)

    def _pages(self, name: str) -> int | None:
        got = [getattr(p, name) for p in self.processes if getattr(p, name) is not None]
        return sum(got) if got else None

    @property
    def pages_moved(self) -> int | None:
        return self._pages("pages_moved")

    @property
    def pages_left(self) -> int | None:
        return self._pages("pages_left")

    def describe(self) -> str:
        lines = [f"requested: {self.requested.describe()}", f"backend:   {self.backend} ({self.backend_reason})"]
        lines += [f"moved:     {p.describe()}" for p in self.processes]
        lines += [f"warning:   {w}" for w in self.warnings]
        lines += [f"note:      {n}" for n in self.notes]
        return "\n".join(printable(line) for line in lines)   # names, records and kernel text about the process

    def to_dict(self) -> dict[str, Any]:
        return {"requested": self.requested.to_text(), "backend": self.backend, "backend_reason": self.backend_reason,
                "processes": [p.to_dict() for p in self.processes], "threads_bound": self.threads_bound,
                "threads_exited": self.threads_exited, "threads_refused": self.threads_refused,
                "pages_moved": self.pages_moved, "pages_left": self.pages_left, "ok": self.ok,
                "warnings": list(self.warnings), "notes": list(self.notes),
                **({"threads_vanished": self.threads_vanished} if self.threads_vanished else {})}


def _is_plans(shown: str, plan: Plan) -> bool:
    """Whether a policy as numa_maps shows it (``bind:0``, ``prefer (many):0-1``, ``bind=static:0``, ``default``)
    is ``plan``'s memory policy on the plan's nodes."""
    name, _, nodes = shown.partition(":")
    policy = _MAPS_POLICIES.get(name.partition("=")[0])     # '=static', '=relative': mode flags
    if policy is None or policy != plan.mem_policy:
        return False
    try:
        return parse_cpulist(nodes, what="numa_maps policy") == (plan.mem_nodes or frozenset())
    except PlanError:
        return False


def policy_note(plan: Plan, processes: Sequence[ProcessMove]) -> str:
    """The report's note on the memory policy: the process keeps its own, which the note says differs from the
    plan's, or already is the plan's (a ``--restore`` to the binding the process was born with, a second move)."""
    theirs: dict[str, int] = {}
    for p in processes:
        if p.locality is not None and p.locality.pages is not None:
            for pol, n in p.locality.pages.policies.items():
                theirs[pol] = theirs.get(pol, 0) + n
    said = max(theirs, key=lambda k: theirs[k]) if theirs else "unknown from outside"
    what = f"{plan.mem_policy} {format_cpulist(plan.mem_nodes or ())}".rstrip()
    if theirs and all(_is_plans(pol, plan) for pol in theirs):
        return MEMORY_POLICY_KEPT_NOTE.format(theirs=f"its mappings show {said}", policy=what)
    if theirs and _is_plans(said, plan):    # most mappings agree: those that do not are named apart
        others = ", ".join(pol for pol in sorted(theirs, key=lambda k: -theirs[k]) if not _is_plans(pol, plan))
        return (f"the kernel has no call that sets another process's memory policy: the moved process keeps its own, "
                f"which in most of its mappings already is the plan's ({said}), so pages it allocates there follow "
                f"{what}; in those under {others} they follow that policy instead; only the pages it already had were "
                f"migrated")
    return MEMORY_POLICY_NOTE.format(theirs=f"its mappings show {said}" if theirs else said, policy=what)
