"""Where a process's memory really is: :func:`locality` and the :class:`Locality` it returns (its pages per node,
where its threads may run, and whether numabind bound it). What is read, and what is raised: docs/move.rst.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from . import _proc, live
from ._base import BOUND_ENV
from ._proc import NodePages
from .backends import get_backend
from .cpulist import format_cpulist, parse_cpulist
from .errors import AccessDenied, NoSuchProcess, NumabindError
from .plan import Plan

__all__ = ["BoundBy", "Locality", "SOURCE_EXEC", "SOURCE_NUMACTL", "SOURCE_UNVERIFIED", "ThreadPlacement",
           "locality", "mems_allowed"]

_KINDS = ("anon", "file", "huge")


def _nodes_of(cpus: frozenset[int], node_cpus: dict[int, frozenset[int]]) -> frozenset[int]:
    return frozenset(n for n, c in node_cpus.items() if c & cpus)


@dataclass(frozen=True, slots=True)
class ThreadPlacement:
    """One thread: the CPUs it may run on and the NUMA nodes of those CPUs."""

    tid: int
    name: str
    cpus: frozenset[int]
    nodes: frozenset[int]

    def __post_init__(self) -> None:
        object.__setattr__(self, "cpus", frozenset(self.cpus))
        object.__setattr__(self, "nodes", frozenset(self.nodes))


@dataclass(frozen=True, slots=True)
class BoundBy:
    """How numabind bound a process: ``source`` says where this was read (an exec marker, a birth report, a
    runtime record), ``requested`` the plan asked for, ``applied`` what the kernel held right after binding
    (None when not recorded, as through numactl)."""

    source: str
    requested: Plan
    applied: Plan | None = None

    @property
    def verified(self) -> bool:
        """False for an exec marker without a start time (an older numabind's): not known to be this process's."""
        return self.source != SOURCE_UNVERIFIED


@dataclass(frozen=True, slots=True)
class Locality:
    """Where the pages of process ``pid`` are, next to where its threads may run (frozen; not hashable).

    ``pages`` is None when ``numa_maps`` could not be read (``error`` says why). A page is *local* on one of
    ``cpu_nodes`` (the nodes of its threads' CPUs), else *remote*. ``mem_policy``: this process's only."""

    pid: int
    name: str = "?"
    error: str | None = None
    pages: NodePages | None = None
    page_size: int = 0
    cpus: frozenset[int] = frozenset()
    cpu_nodes: frozenset[int] = frozenset()
    threads: tuple[ThreadPlacement, ...] = ()
    mems_allowed: frozenset[int] | None = None
    mem_policy: str | None = None
    bound: BoundBy | None = None

    def __post_init__(self) -> None:
        for name, value in (("page_size", self.page_size or os.sysconf("SC_PAGE_SIZE")),
                            ("cpus", frozenset(self.cpus)), ("cpu_nodes", frozenset(self.cpu_nodes)),
                            ("threads", tuple(self.threads)),
                            ("mems_allowed", None if self.mems_allowed is None else frozenset(self.mems_allowed))):
            object.__setattr__(self, name, value)

    __hash__ = None    # type: ignore[assignment]  # holds NodePages (dicts): not hashable

    # -- figures ---------------------------------------------------------------------
    @property
    def ok(self) -> bool:
        """True when everything was read."""
        return self.error is None

    @property
    def node_pages(self) -> dict[int, int]:
        """Resident pages per node (base pages); empty when numa_maps was not read."""
        return dict(self.pages.total) if self.pages is not None else {}

    @property
    def total_pages(self) -> int:
        return sum(self.node_pages.values())

    def pages_on(self, nodes: frozenset[int] | set[int]) -> int:
        return sum(n for node, n in self.node_pages.items() if node in nodes)

    @property
    def local_pages(self) -> int:
        return self.pages_on(self.cpu_nodes)

    @property
    def remote_pages(self) -> int:
        return self.total_pages - self.local_pages

    def remote_share_of(self, nodes: frozenset[int] | set[int]) -> float | None:
        """The share of the pages that is on nodes other than ``nodes``; None when no page was counted."""
        total = self.total_pages
        if not total:
            return None
        return (total - self.pages_on(nodes)) / total

    @property
    def remote_share(self) -> float | None:
        """The share of the pages that is remote to every CPU the process may run on (None: no pages)."""
        return self.remote_share_of(self.cpu_nodes)

    @property
    def local_share(self) -> float | None:
        share = self.remote_share
        return None if share is None else 1.0 - share

    def remote_share_by_kind(self, kind: str) -> float | None:
        """The remote share of ``kind`` (anon, file, huge) of mapping; None without such pages."""
        if kind not in _KINDS:
            raise NumabindError(f"remote_share_by_kind: kind {kind!r} is not one of {', '.join(_KINDS)}")
        if self.pages is None:
            return None
        counts: dict[int, int] = getattr(self.pages, kind)
        total = sum(counts.values())
        if not total:
            return None
        return sum(n for node, n in counts.items() if node not in self.cpu_nodes) / total

    # -- text and JSON ---------------------------------------------------------------
    def describe(self) -> str:
        """A few lines for people (``numabind stat`` prints a table instead)."""
        head = f"pid {self.pid} ({self.name})"
        lines = [head + (f": {self.error}" if self.error else "")]
        lines.append(f"  cpus {format_cpulist(self.cpus) or '?'} on nodes {format_cpulist(self.cpu_nodes) or '?'}"
                     f"; mems allowed {format_cpulist(self.mems_allowed) if self.mems_allowed is not None else '?'}")
        if self.pages is not None:
            mib = self.page_size / (1 << 20)
            per_node = ", ".join(f"node {n}: {p * mib:.1f} MiB" for n, p in sorted(self.node_pages.items()))
            lines.append(f"  resident {self.total_pages * mib:.1f} MiB ({per_node or 'no pages'})")
            share = self.remote_share
            if share is not None:
                lines.append(f"  remote {100 * share:.1f}% ({self.remote_pages * mib:.1f} MiB on nodes other than "
                             f"{format_cpulist(self.cpu_nodes) or 'none'})")
            if self.pages.policies:
                policies = sorted(self.pages.policies.items(), key=lambda kv: -kv[1])
                lines.append("  mapping policies: " + ", ".join(f"{pol} {n * mib:.1f} MiB" for pol, n in policies))
        if self.mem_policy is not None:
            lines.append(f"  memory policy (calling thread): {self.mem_policy}")
        if self.bound is not None:
            said = "bound by numabind" if self.bound.verified else "unverified numabind marker"
            lines.append(f"  {said} ({self.bound.source}): {self.bound.requested.describe()}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable (node ids as strings); :meth:`from_dict` reads it back."""
        pages = None
        if self.pages is not None:
            p = self.pages
            pages = {k: {str(n): c for n, c in sorted(getattr(p, k).items())} for k in ("total", "anon", "file",
                                                                                     "huge", "shared")}
            pages["policies"] = dict(p.policies)
        share = self.remote_share
        bound = None
        if self.bound is not None:
            b = self.bound
            bound = {"source": b.source, "requested": b.requested.to_text(), "verified": b.verified,
                     "applied": None if b.applied is None else b.applied.to_text()}
        return {
            "pid": self.pid, "name": self.name, "error": self.error, "page_size": self.page_size, "pages": pages,
            "cpus": format_cpulist(self.cpus), "cpu_nodes": format_cpulist(self.cpu_nodes),
            "mems_allowed": None if self.mems_allowed is None else format_cpulist(self.mems_allowed),
            "mem_policy": self.mem_policy, "local_pages": self.local_pages, "remote_pages": self.remote_pages,
            "remote_share": share, "remote_share_by_kind": {k: self.remote_share_by_kind(k) for k in _KINDS},
            "threads": [{"tid": t.tid, "name": t.name, "cpus": format_cpulist(t.cpus), "nodes": format_cpulist(t.nodes),
                         "remote_share": self.remote_share_of(t.nodes)} for t in self.threads],
            "bound": bound,
        }

    @classmethod
    def from_dict(cls, data: object) -> Locality:
        """Parse :meth:`to_dict` output strictly; ValueError otherwise (the derived figures are recomputed)."""
        if not isinstance(data, dict):
            raise ValueError("a locality is not an object")

        def intval(d: dict[str, Any], key: str) -> int:
            v = d.get(key)
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"{key} is not an int")
            return v

        def text(d: dict[str, Any], key: str, optional: bool = False) -> Any:
            v = d.get(key)
            if not (isinstance(v, str) or (optional and v is None)):
                raise ValueError(f"{key} is not a string")
            return v

        def ids(value: Any, key: str) -> frozenset[int]:
            if not isinstance(value, str):
                raise ValueError(f"{key} is not a cpulist string")
            return parse_cpulist(value, what=key)

        def counts(value: Any, key: str, keys_are_ids: bool = True) -> dict[Any, int]:
            if not isinstance(value, dict):
                raise ValueError(f"{key} is not an object")
            out: dict[Any, int] = {}
            for k, v in value.items():
                if not isinstance(v, int) or isinstance(v, bool) or v < 0 or (keys_are_ids and not k.isdigit()):
                    raise ValueError(f"{key} holds {k!r}: {v!r}")
                out[int(k) if keys_are_ids else k] = v
            return out

        pages = None
        raw = data.get("pages")
        if raw is not None:
            if not isinstance(raw, dict):
                raise ValueError("pages is not an object")
            kinds = {k: counts(raw.get(k), f"pages.{k}") for k in ("total", "shared", "anon", "file", "huge")}
            pages = NodePages(kinds["total"], kinds["shared"], anon=kinds["anon"], file=kinds["file"],
                              huge=kinds["huge"], policies=counts(raw.get("policies"), "pages.policies",
                                                                  keys_are_ids=False))
        threads = []
        raw_threads = data.get("threads")
        if not isinstance(raw_threads, list):
            raise ValueError("threads is not a list")
        for t in raw_threads:
            if not isinstance(t, dict):
                raise ValueError("a thread is not an object")
            threads.append(ThreadPlacement(intval(t, "tid"), text(t, "name"), ids(t.get("cpus"), "thread cpus"),
                                           ids(t.get("nodes"), "thread nodes")))
        bound = None
        raw_bound = data.get("bound")
        if raw_bound is not None:
            if not isinstance(raw_bound, dict):
                raise ValueError("bound is not an object")
            applied = text(raw_bound, "applied", optional=True)
            bound = BoundBy(text(raw_bound, "source"), Plan.from_text(text(raw_bound, "requested")),
                            None if applied is None else Plan.from_text(applied))
        mems = data.get("mems_allowed")
        return cls(pid=intval(data, "pid"), name=text(data, "name"), error=text(data, "error", optional=True),
                   pages=pages, page_size=intval(data, "page_size"), cpus=ids(data.get("cpus"), "cpus"),
                   cpu_nodes=ids(data.get("cpu_nodes"), "cpu_nodes"), threads=tuple(threads),
                   mems_allowed=None if mems is None else ids(mems, "mems_allowed"),
                   mem_policy=text(data, "mem_policy", optional=True), bound=bound)


# ----------------------------------------------------------------------------- reading
#: BoundBy.source of each way numabind records a binding.
SOURCE_EXEC = "numabind run / wrap_command (its environment at exec)"
SOURCE_NUMACTL = ("numabind run / wrap_command through numactl (its environment at exec; applied by numactl, "
                  "not read back)")
#: BoundBy.source of an exec marker without a start time (an older numabind's): read, not trusted.
SOURCE_UNVERIFIED = ("exec marker without a start time, from an older numabind: unverified, the pid may "
                     "have been reused")
_NUMACTL_APPLIED = "numactl"      # the applied field of the numactl wrapper's marker


def _from_marker(marker: str, pid: int, started: int) -> BoundBy | None:
    """The binding an exec marker records for process ``pid`` started at ``started``; None when the marker is
    another process's or does not parse; unverified without a start time."""
    owner, _, rest = marker.partition("|")
    owner_pid, timed, start = owner.partition(":")
    if owner_pid != str(pid):      # inherited from a parent that numabind bound: not this process's binding
        return None
    if timed and not (started and start == str(started)):     # the pid's earlier holder's (pid reuse)
        return None
    requested, _, applied = rest.partition("|")
    try:
        wanted = Plan.from_text(requested)
        if not timed:
            return BoundBy(SOURCE_UNVERIFIED, wanted,
                           None if applied in ("", _NUMACTL_APPLIED) else Plan.from_text(applied))
        if applied == _NUMACTL_APPLIED:
            return BoundBy(SOURCE_NUMACTL, wanted, None)
        return BoundBy(SOURCE_EXEC, wanted, Plan.from_text(applied) if applied else None)
    except NumabindError:
        return None


def _bound_by(pid: int, me: bool, started: int) -> BoundBy | None:
    """What numabind recorded about binding ``pid``: the birth report, else the exec marker, else a runtime record."""
    from . import records   # records loads json: kept off numabind move's start (only a migration reads them)

    birth = records.own_birth() if me else None   # handed down by numabind.process when this process was born
    if birth is not None:
        return BoundBy(f"birth report ({birth[0]})", birth[1], birth[2])
    marker = _proc.environ_value(pid, BOUND_ENV)
    unverified = None
    if marker:
        found = _from_marker(marker, pid, started)
        if found is not None and found.verified:
            return found
        unverified = found             # shown only when no runtime record says more
    rec = records.read_record(pid, started)
    if rec is None:
        return unverified
    method, wanted, held = rec.get("start_method"), rec.get("requested"), rec.get("applied")
    if (not isinstance(method, str) or not method.isidentifier() or not isinstance(wanted, str)
            or not (held is None or isinstance(held, str))):
        return unverified
    try:
        return BoundBy(f"runtime record ({method})", Plan.from_text(wanted),
                       None if held is None else Plan.from_text(held))
    except NumabindError:
        return unverified


def mems_allowed(pid: int, status: dict[str, str]) -> frozenset[int] | None:
    """``Mems_allowed_list`` of ``pid``'s ``status`` (read already), or None when missing or malformed."""
    try:
        return parse_cpulist(status["Mems_allowed_list"], what=f"/proc/{pid}/status Mems_allowed_list")
    except (KeyError, ValueError):
        return None


def _own_policy() -> str | None:
    """The calling thread's memory policy, as ``numabind show`` words it (None when it cannot be read)."""
    try:
        be, _ = get_backend()
        policy, nodes = be.get_mempolicy()
    except (NumabindError, OSError):
        return None
    return f"{policy} {format_cpulist(nodes)}".rstrip()


def locality(pid: int | None = None, *, pages: NodePages | None = None) -> Locality:
    """Where the pages of process ``pid`` (default: this one) are, next to where its threads may run.

    Raises :class:`~numabind.errors.NoSuchProcess` when it does not exist, is a zombie or exits while read,
    :class:`~numabind.errors.AccessDenied` when its pages may not be read. What the kernel cannot say is the
    :class:`Locality`'s ``error``. ``pages`` (this process only): counts already read.
    """
    if pid is not None and (not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0):
        raise NumabindError(f"locality needs a process id (a positive int) or None for this process, got {pid!r}")
    me = pid is None or pid == os.getpid()
    pid = os.getpid() if pid is None else pid
    if pages is not None and not me:
        raise NumabindError("locality(pages=...) applies to this process only")
    if not me:   # pid N in a /proc of another PID namespace is not process N here (this one reads /proc/self)
        _proc.check_procfs(f"process {pid}")
    if not _proc.process_exists(pid):
        raise NoSuchProcess(pid, f"no such process: /proc/{pid} does not exist")
    started = _proc.start_time(pid)
    status = _proc.status_fields(pid) or {}
    name = status.get("Name", "?")
    if not started:
        raise NoSuchProcess(pid, "exited: a zombie its parent has not reaped yet (it has no memory left)",
                            status.get("Name"))
    node_cpus = {n: node.cpus for n, node in live.machine().nodes.items()}
    tasks = _proc.process_tasks(pid)
    threads: list[ThreadPlacement] = []
    if tasks is not None:
        for tid in sorted(tasks.cpus, key=lambda t: (t != pid, t)):   # the main thread first
            cpus = tasks.cpus[tid]
            threads.append(ThreadPlacement(tid, tasks.names.get(tid, "?"), cpus, _nodes_of(cpus, node_cpus)))
    allowed = frozenset().union(*(t.cpus for t in threads)) if threads else frozenset()
    mems = mems_allowed(pid, status)
    error = None
    if pages is None:
        text = _proc.numa_maps_text(pid)
        if text is not None:
            pages = _proc.parse_numa_maps(text)
        elif not _proc.process_exists(pid) or _proc.start_time(pid) != started:
            raise NoSuchProcess(pid, "exited while being read", status.get("Name"))
        elif not _proc.has_numa_maps(pid):
            error = "this kernel has no /proc/PID/numa_maps (built without NUMA: CONFIG_NUMA=n); pages per node unknown"
        else:
            raise AccessDenied(pid, f"permission denied reading /proc/{pid}/numa_maps (it needs the right to trace "
                                    f"the process: the same user, or root)", status.get("Name"))
    if not _proc.process_exists(pid) or _proc.start_time(pid) != started:
        raise NoSuchProcess(pid, "exited while being read", status.get("Name"))
    if error is None and not threads:
        error = f"its threads could not be read (/proc/{pid}/task)"
    return Locality(pid, name=name, error=error, pages=pages, cpus=allowed, cpu_nodes=_nodes_of(allowed, node_cpus),
                    threads=tuple(threads), mems_allowed=mems, mem_policy=_own_policy() if me else None,
                    bound=_bound_by(pid, me, started))
