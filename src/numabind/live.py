"""The running process, read from the live system: limits, threads, pages per node, mask sizes.

Every read goes through :class:`numabind._fs.FsReader` at ``/`` (the live kernel; a replayed root
never applies to the process that runs). The thread list comes from the native core (one
``getdents64`` pass) when it is installed, else from ``os.listdir``. None of this is on the
success path of :func:`numabind.bind_current` except the thread list and the mask sizes (read
once): limits are read only to explain a refusal or a difference between what was asked and what
the kernel applied.
"""

import os
TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

    from ._fs import FsReader

from ._base import Value
from .cpulist import parse_cpulist
from .plan import Limits

__all__ = ["LiveMachine", "LiveNode", "NodePages", "ProcessTasks", "cpu_mask_bits", "environ_value", "gettid", "has_numa_maps",
           "interleave_weights",
           "limits", "machine", "mems_allowed", "node_mask_bits", "node_pages", "numa_maps_text", "parse_numa_maps",
           "process_children", "process_exists", "process_tasks", "start_time", "status_fields", "thread_ids",
           "thread_name"]

_reader: "FsReader | None" = None


def _live() -> "FsReader":
    global _reader
    if _reader is None:
        from ._fs import FsReader

        _reader = FsReader("/")
    return _reader


def _ids(rel: str) -> frozenset[int] | None:
    text = _live().read(rel)
    if text is None:
        return None
    try:
        return parse_cpulist(text, what=rel)
    except ValueError:
        return None


# ----------------------------------------------------------------------------- mask sizes
_mask_bits: dict[str, int] = {}


def _bits(kind: str) -> int:
    bits = _mask_bits.get(kind)
    if bits is None:
        ids = _ids(f"sys/devices/system/{kind}/possible")
        fallback = 0 if kind == "node" else (os.cpu_count() or 1) - 1
        top = (max(ids) if ids else fallback) + 1
        bits = _mask_bits[kind] = max(64, (top + 63) // 64 * 64)
    return bits


def node_mask_bits() -> int:
    """Bits in a node mask for this kernel: possible nodes, rounded up to 64 (read once).

    The kernel rejects ``get_mempolicy`` masks smaller than its node count, so masks are sized
    from ``node/possible``, not fixed at 64 or 1024.
    """
    bits = _mask_bits.get("node")
    return bits if bits is not None else _bits("node")


def cpu_mask_bits() -> int:
    """Bits in a CPU mask for this kernel: possible CPUs, rounded up to 64 (read once)."""
    bits = _mask_bits.get("cpu")
    return bits if bits is not None else _bits("cpu")


def forget_mask_bits() -> None:
    """Read the possible ids again on next use (tests that pretend another kernel)."""
    _mask_bits.clear()


# ----------------------------------------------------------------------------- limits
def mems_allowed() -> frozenset[int] | None:
    """``Mems_allowed_list`` of this process, or None when unreadable."""
    from ._fs import key_values

    listed = key_values(_live().read("proc/self/status") or "").get("Mems_allowed_list")
    if listed is None:
        return None
    try:
        return parse_cpulist(listed, what="Mems_allowed_list")
    except ValueError:
        return None


def limits() -> Limits:
    """What the live kernel lets this process use now: online CPUs in its cpuset, memory nodes in
    ``Mems_allowed``, and where each came from."""
    from .topology import read_cpuset   # the one cpuset reader (cgroup v2, v1, legacy)

    online = _ids("sys/devices/system/cpu/online") or frozenset(os.sched_getaffinity(0))
    nodes = _ids("sys/devices/system/node/online")
    memory = _ids("sys/devices/system/node/has_memory")
    if nodes is None:       # a kernel without NUMA: one node 0
        nodes = frozenset({0})
    if memory is None:
        memory = frozenset({0}) if nodes == {0} else nodes
    mems = mems_allowed()
    cpuset = read_cpuset(_live())
    allowed, source = online, "online CPUs"
    if cpuset is not None and cpuset.cpus is not None:
        allowed = online & cpuset.cpus
        source = f"online CPUs in the cpuset ({cpuset.source})"
    return Limits(online_cpus=online, allowed_cpus=allowed, cpus_source=source, nodes=nodes,
                  memory_nodes=memory, allowed_nodes=mems if mems is not None else memory,
                  nodes_source="Mems_allowed (cpuset)" if mems is not None else "nodes with memory")


# ----------------------------------------------------------------------------- threads
def gettid() -> int:
    """The calling thread's kernel thread id (``threading.get_native_id``)."""
    import _thread

    return _thread.get_native_id()


_native_module: "list[Any]" = []


def _native() -> "Any":
    """numabind._native, or None when it is not installed (looked up once)."""
    if not _native_module:
        try:
            from . import _native as native
        except ImportError:
            native = None
        _native_module.append(native)
    return _native_module[0]


_tid_buffer: "list[Any]" = []


def thread_ids(first: int = 0) -> list[int]:
    """Thread ids of this process (threads may exit at any moment); ``first``, when listed, comes first."""
    native = _native()
    if native is not None:
        ffi, lib = native.ffi, native.lib
        if not _tid_buffer:
            _tid_buffer.append(ffi.new("int[]", 64))
        while True:
            buf = _tid_buffer[0]
            cap = len(buf)
            n = lib.nb_task_list(first, buf, cap)
            if n < 0:
                raise OSError(-n, f"cannot list /proc/self/task: {os.strerror(-n)}")
            if n <= cap:
                return list(buf[0:n])
            _tid_buffer[0] = ffi.new("int[]", n + n // 2 + 16)
    out = [int(t) for t in os.listdir("/proc/self/task") if t.isdigit()]
    if first in out:
        out.remove(first)
        out.insert(0, first)
    return out


def thread_name(tid: int) -> str:
    """The thread's ``comm``, or ``'?'`` when it has exited."""
    return _live().read_strip(f"proc/self/task/{int(tid)}/comm") or "?"


def start_time(pid: int) -> int:
    """Process start time in clock ticks (field 22 of /proc/PID/stat), 0 if gone; guards against pid reuse."""
    text = _live().read(f"proc/{int(pid)}/stat")
    if not text:
        return 0
    fields = text[text.rfind(")") + 2:].split()
    if not fields or fields[0] in ("Z", "X"):  # exited, not yet reaped
        return 0
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return 0


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
    return key in _MAP_FIELDS or (key[:1] == "N" and key[1:].isdigit() and "=" in word)


def _add(into: "dict[Any, int]", key: "Any", n: int) -> None:
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
            if not value.isdigit():
                continue
            if key[:1] == "N" and key[1:].isdigit():
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
    if not _pid_ok(pid) or (tid is not None and not _pid_ok(tid)):
        return None
    rel = f"proc/{pid}/numa_maps" if tid is None else f"proc/{pid}/task/{tid}/numa_maps"
    try:
        text = _live().read(rel, limit=NUMA_MAPS_MAX + 1)
    except Exception:  # noqa: BLE001 - not a regular file, or a read error: not counted
        return None
    if text is None or len(text) > NUMA_MAPS_MAX:
        return None
    return text


def node_pages(pid: int | str = "self") -> NodePages | None:
    """Count a process's pages per node; None when numa_maps cannot be read (no NUMA, no permission)."""
    text = numa_maps_text(pid)
    return None if text is None else parse_numa_maps(text)


# ----------------------------------------------------------------------------- other processes
def process_exists(pid: int) -> bool:
    """Whether ``/proc/PID`` is there (a zombie counts: it has not been reaped)."""
    return _pid_ok(pid) and _live().isdir(f"proc/{pid}")


def has_numa_maps(pid: int | str = "self") -> bool:
    """Whether ``/proc/PID/numa_maps`` exists (kernels built without NUMA have none), readable or not."""
    return _pid_ok(pid) and _live().exists(f"proc/{pid}/numa_maps")


def status_fields(pid: int | str = "self", tid: int | None = None) -> dict[str, str] | None:
    """``/proc/PID/status`` (of thread ``tid``) as name -> value, or None when it cannot be read."""
    if not _pid_ok(pid) or (tid is not None and not _pid_ok(tid)):
        return None
    text = _live().read(f"proc/{pid}/status" if tid is None else f"proc/{pid}/task/{tid}/status")
    if text is None:
        return None
    from ._fs import key_values

    return key_values(text)


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
    """Every thread of ``pid`` with its name and allowed CPUs; None when ``/proc/PID/task`` cannot be listed."""
    if not _pid_ok(pid):
        return None
    reader = _live()
    tids = reader.numbered(f"proc/{pid}/task", "")
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
    return ProcessTasks(int(pid), names, cpus)


def process_children(pid: int) -> list[int]:
    """The children of ``pid``: ``/proc/PID/task/*/children`` (``CONFIG_PROC_CHILDREN``), else every
    process whose ``/proc/N/stat`` names ``pid`` as its parent."""
    if not _pid_ok(pid):
        return []
    reader = _live()
    out: set[int] = set()
    found_file = False
    for tid in reader.numbered(f"proc/{pid}/task", ""):
        text = reader.read(f"proc/{pid}/task/{tid}/children")
        if text is None:
            continue
        found_file = True
        out.update(int(w) for w in text.split() if w.isdigit())
    if not found_file and process_exists(pid):
        for other in reader.numbered("proc", ""):
            stat = reader.read(f"proc/{other}/stat")
            fields = stat[stat.rfind(")") + 2:].split() if stat else []
            if len(fields) > 1 and fields[1] == str(pid):
                out.add(other)
    return sorted(out)


#: Largest environment read from /proc/PID/environ (Linux caps a process's arguments and environment
#: at a quarter of its stack limit; beyond this the variable is not looked for).
ENVIRON_MAX = 4 << 20


def environ_value(pid: int, name: str) -> str | None:
    """The value of variable ``name`` in the environment ``pid`` was exec'd with (``/proc/PID/environ``),
    or None when it is not there or cannot be read (another user's process, a kernel thread).

    The file holds NUL-separated ``NAME=value`` entries, so it is read here as bytes (FsReader's text
    ends at the first NUL): non-blocking, a regular file only, at most :data:`ENVIRON_MAX` bytes.
    """
    if not _pid_ok(pid) or not name or "=" in name or "\0" in name:
        return None
    import stat

    try:
        fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, size = [], 0
        while size <= ENVIRON_MAX:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    if size > ENVIRON_MAX:
        return None
    key = name.encode() + b"="
    for entry in b"".join(chunks).split(b"\0"):
        if entry.startswith(key):
            return entry[len(key):].decode("utf-8", errors="replace")
    return None


def interleave_weights() -> "Any":
    """The live system's weighted-interleave weights (:class:`numabind.topology.InterleaveWeights`),
    or None when the kernel has no ``/sys/kernel/mm/mempolicy/weighted_interleave`` (before Linux 6.9)."""
    from .topology import read_interleave_weights

    return read_interleave_weights(_live())


# ----------------------------------------------------------------------------- the machine, minimally
class LiveNode(Value):
    """A node as :meth:`Plan.from_numactl_args` needs it: its online CPUs, and whether it has memory."""

    __slots__ = ("id", "cpus", "has_memory")
    id: int
    cpus: frozenset[int]
    has_memory: bool

    def __init__(self, id: int, cpus: frozenset[int], has_memory: bool) -> None:  # noqa: A002
        object.__setattr__(self, "id", id)
        object.__setattr__(self, "cpus", frozenset(cpus))
        object.__setattr__(self, "has_memory", has_memory)


class LiveMachine(Value):
    """The few facts of the live machine that numactl-style options need (``numabind run``):
    what :meth:`Plan.from_numactl_args` and :meth:`Plan.validate` read from a Topology, read in a
    handful of files instead of a whole discovery. ``allowed_cpus`` is the process's affinity
    (always inside its cpuset) among the online CPUs, ``allowed_nodes`` its ``Mems_allowed``."""

    __slots__ = ("nodes", "online_cpus", "allowed_cpus", "allowed_nodes", "allowed_source")
    nodes: dict[int, LiveNode]
    online_cpus: frozenset[int]
    allowed_cpus: frozenset[int]
    allowed_nodes: frozenset[int]
    allowed_source: str

    def __init__(self, nodes: dict[int, LiveNode], online_cpus: frozenset[int], allowed_cpus: frozenset[int],
                 allowed_nodes: frozenset[int], allowed_source: str) -> None:
        for k, v in (("nodes", dict(nodes)), ("online_cpus", frozenset(online_cpus)),
                     ("allowed_cpus", frozenset(allowed_cpus)), ("allowed_nodes", frozenset(allowed_nodes)),
                     ("allowed_source", allowed_source)):
            object.__setattr__(self, k, v)

    def __hash__(self) -> int:
        return hash((self.online_cpus, self.allowed_cpus, self.allowed_nodes))


def machine() -> LiveMachine:
    """The live machine's nodes (CPUs, memory), online CPUs, and what this process may use."""
    online = _ids("sys/devices/system/cpu/online") or frozenset(os.sched_getaffinity(0))
    node_ids = _ids("sys/devices/system/node/online")
    nodes: dict[int, LiveNode] = {}
    if node_ids is None:     # a kernel without NUMA: one node 0 with every CPU and the memory
        nodes[0] = LiveNode(0, online, True)
    else:
        memory = _ids("sys/devices/system/node/has_memory")
        for n in sorted(node_ids):
            cpus = _ids(f"sys/devices/system/node/node{n}/cpulist") or frozenset()
            nodes[n] = LiveNode(n, cpus & online, n in memory if memory is not None else True)
    mems = mems_allowed()
    allowed_nodes = frozenset(nodes) if mems is None else mems & frozenset(nodes)
    return LiveMachine(nodes=nodes, online_cpus=online, allowed_cpus=frozenset(os.sched_getaffinity(0)) & online,
                       allowed_nodes=allowed_nodes, allowed_source="the process's affinity and Mems_allowed")
