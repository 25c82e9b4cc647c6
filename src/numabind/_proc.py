"""Processes by pid, read from ``/proc`` of the live system: whether one exists, its start time,
status, threads with their CPUs, children and environment, and where its pages are
(``/proc/PID/numa_maps``, per node).

What ``numabind stat`` (:mod:`numabind.residency`), the bound-process records and page migration
read about a process; none of it is on the path of a bind. What psutil knows of another process is
read through psutil (DESIGN.md, "the machine"): whether it exists, its threads, its children and its
environment (:func:`process_exists`, :func:`process_tasks`, :func:`process_children`,
:func:`process_tree`, :func:`environ_value`). psutil is imported inside those functions, never when this
module is (a child bound at birth loads it), and reads ``/proc`` below the root of
:func:`numabind.live.reader`: ``psutil.PROCFS_PATH`` is set to ``<root>/proc`` for the length of each
call, under a lock, and put back after it. The rest goes through that reader (the live system's
:class:`~numabind._fs.FsReader`): the start time in clock ticks (psutil gives it only in seconds),
``/proc/PID/status`` (psutil has no whole-file view of it), each thread's name and allowed CPUs (psutil
reads a thread's CPUs with ``sched_getaffinity``, which a replayed machine cannot answer) and numa_maps.

Whose ``/proc`` it is: a procfs mounted from another PID namespace (``unshare --pid`` without
``--mount-proc``, a host's /proc in a container) numbers processes as that namespace does, so process N in
it is not the process N that this process's kernel calls reach. :func:`procfs_mismatch` is the one check
(``/proc/self`` names the caller by the number this process has); every reader here goes through it: on
the live system with such a procfs, another process reads as unreadable (never as the process of the same
number there), and this process is read through ``/proc/self``. :func:`check_procfs` is the error every
command that takes process ids raises first (``numabind move``, :func:`numabind.residency.locality`).
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
    """Why ``/proc`` below :func:`numabind.live.reader`'s root does not show this process's PID namespace, or
    None when it does (or the root is a replayed machine's: its processes are read as the machine they are).

    ``/proc/self`` names the caller by the number that procfs's namespace gives it: the number this process
    has (``getpid``) when the procfs is its namespace's, another number (an ancestor namespace's procfs) or
    none (a procfs of a namespace the caller is not in) when not. The same fact :func:`numabind.live.thread_ids`
    checks for the caller's own threads (``/proc/self/task`` without the calling thread). Read at every call
    (a readlink): a fork or a new mount changes the answer.
    """
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
    """Raise :class:`~numabind.errors.NumabindError` (``who: why; fix``) unless the process ids read from
    ``/proc`` are those this process's kernel calls reach (:func:`procfs_mismatch`). ``acting``: the caller acts
    on the processes it reads (moves them), so a replayed machine's ``/proc`` is refused too."""
    fs = live.reader()
    if acting and not fs.is_live:
        raise NumabindError(f"{who}: the processes below {printable(fs.path('proc'))} are a replayed machine's, "
                            f"not this kernel's, so none of them can be acted on: read /proc of the live system "
                            f"(unset NUMABIND_FSROOT)")
    why = procfs_mismatch()
    if why is not None:
        raise NumabindError(f"{who}: {why}; {FOREIGN_PROCFS_FIX}")


def _where(pid: int | str) -> str | None:
    """``proc/PID`` for reading ``pid`` (``proc/self`` for this process on the live system), or None when it
    may not be read: not a pid, or another process's number in a /proc of another PID namespace."""
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
    """Resident pages of a process per NUMA node (in base pages), from ``/proc/PID/numa_maps``.

    ``total`` counts every mapping; ``anon``, ``file`` and ``huge`` split the same pages by the kind
    of mapping they are in (as ``numastat -p`` does): ``huge`` for hugetlbfs mappings (the ``huge``
    flag, or pages larger than the base page), ``file`` for the other mappings of a file (their
    copied-on-write private pages included: numa_maps counts per mapping), ``anon`` for the rest
    (heap, stack, anonymous mappings). Transparent huge pages sit in anonymous mappings and count
    as ``anon``. ``shared`` counts the pages of file-backed mappings and of mappings several
    processes map (``mapmax`` > 1). ``policies`` maps each memory policy numa_maps shows (``bind:1``,
    ``weighted interleave:0-1``, ``default``...) to the pages of the mappings under it.
    """

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
        object.__setattr__(self, "total", dict(total))
        object.__setattr__(self, "shared", dict(shared))
        object.__setattr__(self, "anon", dict(anon or {}))
        object.__setattr__(self, "file", dict(file or {}))
        object.__setattr__(self, "huge", dict(huge or {}))
        object.__setattr__(self, "policies", dict(policies or {}))

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


#: The fields numa_maps prints after a mapping's policy (``key=value`` or a bare flag); anything before
#: the first of them (and the ``N<node>=`` counts) is the policy, which may hold a space
#: (``weighted interleave:0-1``, ``prefer (many):0-1``) or an ``=`` (``bind=static:0``).
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
    """Count the ``N<node>=<pages>`` fields of numa_maps text, scaled to base pages (huge pages count
    as many): per node in all, in anonymous, file-backed and hugetlbfs mappings apart, in shared or
    file-backed mappings, and per memory policy (see :class:`NodePages`)."""
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


def numa_maps_text(pid: int | str = "self", tid: int | None = None) -> str | None:
    """The whole ``/proc/PID/numa_maps`` (of thread ``tid``: ``/proc/PID/task/TID/numa_maps``), or None when
    it cannot be read (no such process, no permission, a kernel without NUMA) or is too large."""
    where = _where(pid)
    if where is None or (tid is not None and not _pid_ok(tid)):
        return None
    rel = f"{where}/numa_maps" if tid is None else f"{where}/task/{int(tid)}/numa_maps"
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
    """``read(psutil)`` with ``psutil.PROCFS_PATH`` at ``/proc`` below :func:`numabind.live.reader`'s root
    (a replayed machine's too), put back as it was afterwards; ``default`` where psutil raises (the
    process is gone, a zombie where psutil says so, not this process's to read) or the files do not parse
    (a replayed root's, cut short).

    psutil's module-level setting is the only way to point it elsewhere, so the calls of this module are
    serialised by a lock; another thread of the program using psutil meanwhile sees the same setting
    (only under ``NUMABIND_FSROOT`` or a replayed reader does it differ from ``/proc``).
    """
    # imported here, not at the top: a child bound at birth loads this module, and numabind run's path and
    # bind_current never need psutil (tests/run_path.py)
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

    Read here, not through psutil: the value is compared with start times processes recorded of
    themselves in clock ticks (the records' names, the exec marker, ``bind``'s own read of
    ``/proc/self/stat``), and psutil gives it only in seconds (since boot through a private method, or
    since the epoch by adding a boot time that moves with the wall clock), which cannot be turned back
    into those ticks reliably.
    """
    where = _where(pid)
    return 0 if where is None else _start_of(live.reader().read(f"{where}/stat"))


def thread_start_time(pid: int, tid: int) -> int:
    """Start time of thread ``tid`` of process ``pid`` in clock ticks (``/proc/PID/task/TID/stat``), 0 when it is
    not a thread of ``pid`` (any more). A thread id is reused like a pid: the same id under the same process's
    ``task`` directory with the same start time is the same thread; another process's thread with that id never
    appears there."""
    where = _where(pid)
    if where is None or not _pid_ok(tid):
        return 0
    return _start_of(live.reader().read(f"{where}/task/{int(tid)}/stat"))


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
    """Whether process (or thread) ``pid`` is there, as psutil sees it (a zombie counts: it has not been
    reaped; one that may not be read counts too)."""
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
    where = _where(pid)
    if where is None or (tid is not None and not _pid_ok(tid)):
        return None
    text = live.reader().read(f"{where}/status" if tid is None else f"{where}/task/{int(tid)}/status")
    if text is None:
        return None
    return key_values(text)


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
    """The ``comm`` of thread ``tid`` of ``pid`` as the kernel has it (the process sets it: print it through
    :func:`numabind._base.printable`), or ``'?'`` when it is gone."""
    where = _where(pid)
    if where is None or not _pid_ok(tid):
        return "?"
    return live.reader().read_strip(f"{where}/task/{int(tid)}/comm") or "?"


def thread_owner(tid: int) -> int | None:
    """The process (``Tgid``) that thread id ``tid`` belongs to now (``/proc/TID/status``: the kernel answers for
    every thread id, listed or not), or None when no thread has it."""
    fields = status_fields(tid)
    tgid = None if fields is None else fields.get("Tgid", "")
    return int(tgid) if tgid and tgid.isascii() and tgid.isdigit() else None


class ProcessTasks(Value):
    """The threads of a process as ``/proc/PID/task`` shows them: per thread its name and the CPUs it
    may run on (``Cpus_allowed_list``). Threads that exit while being read are left out."""

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
    """Every thread of ``pid`` with its name and allowed CPUs; None when its threads cannot be listed.

    The threads are psutil's (``Process.threads()``); each one's name and ``Cpus_allowed_list`` come from
    ``/proc/PID/task/TID/status``: psutil names a thread only as a process of its own (``/proc/TID``, which
    a replayed machine does not have), and reads its CPUs with ``sched_getaffinity``, which would ask this
    kernel, not a replayed machine's files.
    """
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
    """The children of ``pid`` (psutil's ``Process.children()``: every process whose parent it is, none
    older than it), sorted; [] when it is gone or cannot be read."""
    if not _pid_ok(pid):
        return []
    return sorted(_through_psutil(lambda psutil: [c.pid for c in psutil.Process(_pid_number(pid)).children()], []))


def process_tree(root: int) -> list[int]:
    """``root`` and every descendant (psutil's ``Process.children(recursive=True)``, which lists a process
    after its parent), parents before children; ``[root]`` alone when it is gone or cannot be read."""
    found: list[int] = []
    if _pid_ok(root):
        found = _through_psutil(
            lambda psutil: [c.pid for c in psutil.Process(_pid_number(root)).children(recursive=True)], [])
    out, seen = [root], {root}
    for pid in found:
        if pid not in seen:
            seen.add(pid)
            out.append(pid)
    return out


def processes_matching(pattern: str) -> list[tuple[int, str]]:
    """``(pid, name)`` of every process whose name (``comm``) or command line (its words joined by spaces) holds
    ``pattern``, as ``numastat -p PATTERN`` finds processes, this process left out; sorted by pid, [] when none
    does (or ``pattern`` is empty). Through psutil's ``process_iter``; names and command lines are their
    owners': print them through :func:`numabind._base.printable`."""
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


#: Largest environment looked in (Linux caps a process's arguments and environment at a quarter of its
#: stack limit; beyond this the variable is not looked for, and a replayed machine's file is not read).
ENVIRON_MAX = 4 << 20


def environ_value(pid: int, name: str) -> str | None:
    """The value of variable ``name`` in the environment ``pid`` was exec'd with (psutil's
    ``Process.environ()``, from ``/proc/PID/environ``), or None when it is not there or cannot be read
    (another user's process, a kernel thread, a zombie) or the environment is over :data:`ENVIRON_MAX`
    bytes. Bytes that are not UTF-8 read as U+FFFD; a name given twice has psutil's answer (the last).

    The live kernel bounds its file (an exec's environment fits in a quarter of the stack limit); a
    replayed machine's (a directory under
    ``NUMABIND_FSROOT``) is read only when it is a regular file, not a symbolic link, of at most
    :data:`ENVIRON_MAX` bytes (a FIFO there would block psutil's read), found inside the root
    (:meth:`numabind._fs.FsReader.lstat`), and the same file psutil's path reaches (a link on the way, such as
    ``proc/PID`` to this host's ``/proc/self``, would take psutil out of the root).
    """
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
