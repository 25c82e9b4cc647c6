"""Processes by pid, from ``/proc`` below :func:`numabind.live.reader`'s root: what psutil knows through psutil,
the rest (start time, status, numa_maps) through the reader. A ``/proc`` of another PID namespace numbers processes
as that namespace does: :func:`procfs_mismatch` is the one check, and every reader here goes through it.
"""

from __future__ import annotations

import os
import stat
import threading

from ._base import Value, printable   # not dataclasses: a child bound at birth in the child loads this module
from ._fs import key_values
from .cpulist import parse_cpulist
from .errors import NumabindError
from . import live

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (numabind move starts without it)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable
    from typing import Any, TypeVar

    _T = TypeVar("_T")

__all__ = ["ENVIRON_MAX", "FOREIGN_PROCFS_FIX", "NUMA_MAPS_MAX", "NodePages", "ProcessTasks", "check_procfs",
           "environ_value", "has_numa_maps", "node_pages", "numa_maps_text", "parse_numa_maps", "procfs_mismatch",
           "process_children", "process_exists", "process_tasks", "processes_matching", "start_time", "status_fields", "task_ids",
           "thread_name", "thread_owner", "thread_start_time"]


# ----------------------------------------------------------------------------- whose /proc
#: The fix of a /proc that shows another PID namespace's processes.
FOREIGN_PROCFS_FIX = ("run numabind in the PID namespace this /proc belongs to, or give this namespace its own "
                      "procfs (unshare --pid --fork --mount-proc; in a container, mount -t proc proc /proc)")


def procfs_mismatch() -> str | None:
    """Why the live ``/proc`` does not show this process's PID namespace (``/proc/self`` is not ``getpid()``), or
    None when it does or the root is a replayed machine's. Read at every call: a fork or a mount changes it."""
    fs = live.reader()
    if not fs.is_live:
        return None
    me = os.getpid()
    try:
        shown: str | None = os.readlink(fs.path("proc/self"))
    except OSError:
        shown = None
    if shown == str(me):
        return None
    named = "no process" if shown is None else f"process {printable(shown)}"
    return (f"/proc/self names {named}, but this process is {me}: this /proc shows another PID namespace's "
            f"processes, so no process id in it can be trusted")


def check_procfs(who: str, *, acting: bool = False) -> None:
    """Raise :class:`~numabind.errors.NumabindError` (``who: why; fix``) unless the pids of ``/proc`` are those
    this kernel's calls reach; ``acting`` (the caller moves them) refuses a replayed machine's too."""
    fs = live.reader()
    if acting and not fs.is_live:
        raise NumabindError(f"{who}: the processes below {printable(fs.path('proc'))} are a replayed machine's, "
                            f"not this kernel's, so none of them can be acted on: read /proc of the live system "
                            f"(unset NUMABIND_FSROOT)")
    why = procfs_mismatch()
    if why is not None:
        raise NumabindError(f"{who}: {why}; {FOREIGN_PROCFS_FIX}")


def _where(pid: int | str) -> str | None:
    """``proc/PID`` for reading ``pid`` (``proc/self`` for this process), or None when it may not be read."""
    if not _pid_ok(pid):
        return None
    if pid == "self":
        return "proc/self"
    if live.reader().is_live:
        if int(pid) == os.getpid():
            return "proc/self"
        if procfs_mismatch() is not None:
            return None
    return f"proc/{int(pid)}"


# ----------------------------------------------------------------------------- pages per node
class NodePages(Value):
    """Resident pages of a process per NUMA node (in base pages), from ``/proc/PID/numa_maps``: ``total``, split by
    mapping into ``anon``, ``file`` and ``huge`` (as ``numastat -p``); ``shared`` (file-backed, or mapped by several
    processes); ``policies``: pages per memory policy as numa_maps prints it."""

    __slots__ = ("total", "shared", "anon", "file", "huge", "policies")
    total: dict[int, int]
    shared: dict[int, int]    # in file-backed mappings or pages mapped by several processes
    anon: dict[int, int]
    file: dict[int, int]
    huge: dict[int, int]
    policies: dict[str, int]

    def __init__(self, total: dict[int, int], shared: dict[int, int], anon: dict[int, int] | None = None,
                 file: dict[int, int] | None = None, huge: dict[int, int] | None = None,
                 policies: dict[str, int] | None = None) -> None:
        for name, value in (("total", total), ("shared", shared), ("anon", anon), ("file", file), ("huge", huge),
                            ("policies", policies)):
            object.__setattr__(self, name, dict(value or {}))

    def __hash__(self) -> int:  # holds dicts, like the dataclass it replaces: not hashable
        raise TypeError("unhashable type: 'NodePages'")

    def on(self, nodes: frozenset[int] | set[int]) -> int:
        return sum(n for node, n in self.total.items() if node in nodes)

    def shared_on(self, nodes: frozenset[int] | set[int]) -> int:
        return sum(n for node, n in self.shared.items() if node in nodes)

    @property
    def pages(self) -> int:
        """Every resident page counted (in base pages)."""
        return sum(self.total.values())


#: Largest numa_maps read (a process with hundreds of thousands of mappings); beyond it pages are not counted.
NUMA_MAPS_MAX = 64 << 20


#: The fields numa_maps prints after a mapping's policy; what comes before the first of them (or an ``N<node>=``
#: count) is the policy, which may hold a space or an ``=``.
_MAP_FIELDS = frozenset(("file", "heap", "stack", "huge", "anon", "dirty", "mapped", "mapmax", "swapcache",
                         "active", "writeback", "kernelpagesize_kB", "unevictable"))


def _is_field(word: str) -> bool:
    key = word.partition("=")[0]
    return key in _MAP_FIELDS or (key[:1] == "N" and _digits(key[1:]) and "=" in word)


def _digits(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also takes ``²`` and other digits ``int()`` refuses."""
    return text.isascii() and text.isdigit()


def _add(into: dict[Any, int], key: Any, n: int) -> None:
    into[key] = into.get(key, 0) + n


def parse_numa_maps(text: str, page_size: int | None = None) -> NodePages:
    """The ``N<node>=<pages>`` fields of numa_maps text as :class:`NodePages`, in base pages."""
    page = page_size or os.sysconf("SC_PAGE_SIZE")
    total: dict[int, int] = {}
    shared: dict[int, int] = {}
    kinds: dict[str, dict[int, int]] = {"anon": {}, "file": {}, "huge": {}}
    policies: dict[str, int] = {}
    for line in text.splitlines():
        words = line.split(" ")
        k = 1
        while k < len(words) and not _is_field(words[k]):
            k += 1
        scale = 1
        is_file = is_huge = False
        is_shared = False
        counts: list[tuple[int, int]] = []
        for word in words[k:]:
            key, eq, value = word.partition("=")
            if not eq:
                if key == "huge":
                    is_huge = True
                continue
            if key == "file":
                is_file = is_shared = True
                continue
            if not _digits(value):
                continue
            if key[:1] == "N" and _digits(key[1:]):
                counts.append((int(key[1:]), int(value)))
            elif key == "kernelpagesize_kB":
                scale = max(1, int(value) * 1024 // page)
            elif key == "mapmax" and int(value) > 1:
                is_shared = True
        if not counts:
            continue
        kind = kinds["huge" if is_huge or scale > 1 else "file" if is_file else "anon"]
        pages = 0
        for node, count in counts:
            n = count * scale
            pages += n
            _add(total, node, n)
            _add(kind, node, n)
            if is_shared:
                _add(shared, node, n)
        _add(policies, " ".join(words[1:k]) or "?", pages)
    return NodePages(total=total, shared=shared, anon=kinds["anon"], file=kinds["file"], huge=kinds["huge"],
                     policies=policies)


def _pid_ok(pid: object) -> bool:
    return (pid == "self" or (isinstance(pid, int) and not isinstance(pid, bool) and pid > 0)
            or (isinstance(pid, str) and pid.isascii() and pid.isdigit()))


def _file(pid: int | str, name: str, tid: int | None = None) -> str | None:
    """``proc/PID/NAME`` (``proc/PID/task/TID/NAME`` of thread ``tid``), or None when it may not be read."""
    where = _where(pid)
    if where is None or (tid is not None and not _pid_ok(tid)):
        return None
    return f"{where}/{name}" if tid is None else f"{where}/task/{int(tid)}/{name}"


def numa_maps_text(pid: int | str = "self", tid: int | None = None) -> str | None:
    """The whole ``/proc/PID/numa_maps`` (of thread ``tid``), or None when it cannot be read or is too large."""
    rel = _file(pid, "numa_maps", tid)
    if rel is None:
        return None
    try:
        text = live.reader().read(rel, limit=NUMA_MAPS_MAX + 1)
    except NumabindError:   # not a regular file: not counted (a read error is None already)
        return None
    if text is None or len(text) > NUMA_MAPS_MAX:
        return None
    return text


def node_pages(pid: int | str = "self") -> NodePages | None:
    """Count a process's pages per node; None when numa_maps cannot be read (no NUMA, no permission)."""
    text = numa_maps_text(pid)
    return None if text is None else parse_numa_maps(text)


# ----------------------------------------------------------------------------- processes
#: Held while ``psutil.PROCFS_PATH`` points at this reader's procfs: one call of this module's at a time.
_PSUTIL_LOCK = threading.Lock()


def _fresh_psutil_lock() -> None:
    global _PSUTIL_LOCK
    _PSUTIL_LOCK = threading.Lock()   # a forked child: the thread that held it does not exist there


os.register_at_fork(after_in_child=_fresh_psutil_lock)


def _pid_number(pid: int | str) -> int:
    """A pid :func:`_pid_ok` accepted as the number psutil takes (``self`` is this process)."""
    return os.getpid() if pid == "self" else int(pid)


def _through_psutil(read: Callable[[Any], _T], default: _T) -> _T:
    """``read(psutil)`` with ``psutil.PROCFS_PATH`` at the reader's ``/proc``, or ``default`` on failure."""
    # imported here: a child bound at birth loads this module, and never needs psutil (tests/run_path.py)
    import psutil  # type: ignore[import-untyped]   # psutil ships no type information

    if live.reader().is_live and procfs_mismatch() is not None:
        return default     # psutil would read the process of the same number in another namespace
    procfs = live.reader().path("proc")
    with _PSUTIL_LOCK:
        before = psutil.PROCFS_PATH
        psutil.PROCFS_PATH = procfs
        try:
            return read(psutil)
        except (psutil.Error, OSError, ValueError, IndexError):  # gone, not ours, a short or garbled file
            return default
        finally:
            psutil.PROCFS_PATH = before


def start_time(pid: int) -> int:
    """Process start time in clock ticks (field 22 of /proc/PID/stat), 0 if gone; guards against pid reuse.
    Not psutil's: it gives seconds, which cannot be turned back into the ticks records compare."""
    return thread_start_time(pid, None)


def thread_start_time(pid: int, tid: int | None) -> int:
    """Start time of thread ``tid`` of process ``pid`` in clock ticks, 0 when it is not a thread of ``pid`` (any
    more): a thread id reused by another process never appears under ``pid``'s ``task``."""
    rel = _file(pid, "stat", tid)
    return 0 if rel is None else _start_of(live.reader().read(rel))


def _start_of(text: str | None) -> int:
    """Field 22 of a ``stat`` file (0: none, or exited)."""
    if not text:
        return 0
    fields = text[text.rfind(")") + 2:].split()
    if not fields or fields[0] in ("Z", "X"):  # exited, not yet reaped
        return 0
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return 0


def process_exists(pid: int) -> bool:
    """Whether process (or thread) ``pid`` is there, as psutil sees it (a zombie, or one we may not read, counts)."""
    if not _pid_ok(pid):
        return False
    if live.reader().is_live and _pid_number(pid) == os.getpid() and procfs_mismatch() is not None:
        return True      # this process: psutil would read the process of its number in another namespace

    def read(psutil: Any) -> bool:
        try:
            psutil.Process(_pid_number(pid))   # NoSuchProcess when it is not
        except psutil.AccessDenied:            # there, but not this process's to read
            pass
        return True

    return _through_psutil(read, False)


def has_numa_maps(pid: int | str = "self") -> bool:
    """Whether ``/proc/PID/numa_maps`` exists (kernels built without NUMA have none), readable or not."""
    where = _where(pid)
    return where is not None and live.reader().exists(f"{where}/numa_maps")


def status_fields(pid: int | str = "self", tid: int | None = None) -> dict[str, str] | None:
    """``/proc/PID/status`` (of thread ``tid``) as name -> value, or None when it cannot be read."""
    rel = _file(pid, "status", tid)
    text = None if rel is None else live.reader().read(rel)
    return None if text is None else key_values(text)


def task_ids(pid: int) -> list[int]:
    """The thread ids listed in ``/proc/PID/task``, the main thread first; [] when it cannot be listed."""
    where = _where(pid)
    if where is None:
        return []
    tids = live.reader().numbered(f"{where}/task", "")
    if pid in tids:
        tids.remove(pid)
        tids.insert(0, pid)
    return tids


def thread_name(pid: int, tid: int) -> str:
    """The ``comm`` of thread ``tid`` of ``pid`` (its own text: print it escaped), or ``'?'``."""
    rel = _file(pid, "comm", tid)
    return "?" if rel is None else live.reader().read_strip(rel) or "?"


def thread_owner(tid: int) -> int | None:
    """The process (``Tgid`` of ``/proc/TID/status``) that thread id ``tid`` belongs to now, or None."""
    fields = status_fields(tid)
    tgid = None if fields is None else fields.get("Tgid", "")
    return int(tgid) if tgid and tgid.isascii() and tgid.isdigit() else None


class ProcessTasks(Value):
    """The threads of a process: each one's name and allowed CPUs (those that exited left out)."""

    __slots__ = ("pid", "names", "cpus")
    pid: int
    names: dict[int, str]
    cpus: dict[int, frozenset[int]]

    def __init__(self, pid: int, names: dict[int, str], cpus: dict[int, frozenset[int]]) -> None:
        object.__setattr__(self, "pid", pid)
        object.__setattr__(self, "names", dict(names))
        object.__setattr__(self, "cpus", dict(cpus))

    def __hash__(self) -> int:
        raise TypeError("unhashable type: 'ProcessTasks'")


def process_tasks(pid: int) -> ProcessTasks | None:
    """Every thread of ``pid`` (psutil's) with its name and ``Cpus_allowed_list`` (from its ``status``: psutil's
    would ask this kernel, not a replayed machine); None when its threads cannot be listed."""
    if not _pid_ok(pid):
        return None
    tids: list[int] = _through_psutil(lambda psutil: sorted(t.id for t in psutil.Process(_pid_number(pid)).threads()),
                                      [])
    if not tids:
        return None
    names: dict[int, str] = {}
    cpus: dict[int, frozenset[int]] = {}
    for tid in tids:
        fields = status_fields(pid, tid)
        allowed = None if fields is None else fields.get("Cpus_allowed_list")
        if allowed is None:
            continue          # exited meanwhile
        try:
            cpus[tid] = parse_cpulist(allowed, what=f"/proc/{pid}/task/{tid}/status Cpus_allowed_list")
        except ValueError:
            continue
        names[tid] = fields.get("Name", "?") if fields else "?"
    return ProcessTasks(_pid_number(pid), names, cpus)


def process_children(pid: int) -> list[int]:
    """The children of ``pid`` (psutil's ``Process.children()``), sorted; [] when it cannot be read."""
    if not _pid_ok(pid):
        return []
    return sorted(_through_psutil(lambda psutil: [c.pid for c in psutil.Process(_pid_number(pid)).children()], []))


def process_tree(root: int) -> list[int]:
    """``root`` and every descendant, parents before children; ``[root]`` alone when it cannot be read."""
    found: list[int] = []
    if _pid_ok(root):
        found = _through_psutil(
            lambda psutil: [c.pid for c in psutil.Process(_pid_number(root)).children(recursive=True)], [])
    return list(dict.fromkeys([root, *found]))


def processes_matching(pattern: str) -> list[tuple[int, str]]:
    """``(pid, name)`` of every other process whose name or command line holds ``pattern``, by pid (names are their
    owners' text: print them through :func:`numabind._base.printable`)."""
    if not pattern:
        return []
    me = os.getpid()

    def read(psutil: Any) -> list[tuple[int, str]]:
        found = []
        for p in psutil.process_iter(["name", "cmdline"]):
            name, cmdline = p.info.get("name") or "", p.info.get("cmdline") or []
            if p.pid != me and (pattern in name or pattern in " ".join(cmdline)):
                found.append((p.pid, name or "?"))
        return sorted(found)

    return _through_psutil(read, [])


#: Largest environment looked in (bytes).
ENVIRON_MAX = 4 << 20


def environ_value(pid: int, name: str) -> str | None:
    """The value of variable ``name`` in the environment ``pid`` was exec'd with (psutil's), or None when it is not
    there, cannot be read or is over :data:`ENVIRON_MAX` bytes; bytes that are not UTF-8 read as U+FFFD.
    A replayed machine's file is read only when it is a regular file inside the root, the one psutil's path
    reaches."""
    if not _pid_ok(pid) or not name or "=" in name or "\0" in name:
        return None
    fs = live.reader()
    if not fs.is_live:
        rel = f"proc/{pid}/environ"
        st = fs.lstat(rel)        # inside the root: no link, in the middle or last, leads out of it
        if st is None or not stat.S_ISREG(st.st_mode) or st.st_size > ENVIRON_MAX:
            return None
        try:           # what psutil opens (the path, the kernel following its links) must be that file
            opened = os.stat(fs.path(rel))
        except (OSError, ValueError):
            return None
        if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
            return None
    env: dict[str, str] | None = _through_psutil(lambda psutil: psutil.Process(_pid_number(pid)).environ(), None)
    if not env or sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 for k, v in env.items()) > ENVIRON_MAX:
        return None
    value = env.get(name)
    # psutil decodes with the file-system encoding's surrogate escapes: back to the bytes, then UTF-8
    return None if value is None else os.fsencode(value).decode("utf-8", errors="replace")
