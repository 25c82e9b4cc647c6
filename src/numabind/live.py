"""The running process and the live machine: limits, threads, mask sizes, the machine's nodes.

Every read goes through :class:`numabind._fs.FsReader` at ``/`` (:func:`reader`). Only the thread list and the mask
sizes are on the success path of :func:`numabind.bind_current`; limits are read only to explain a refusal.
"""

import os
TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

    from ._fs import FsReader
    from .errors import BindError

from ._base import Value
from .cpulist import parse_cpulist
from .errors import PlanError
from .plan import Allowed, Plan, absent_from_machine

__all__ = ["AFFINITY_HOLDS_ONLINE", "LiveMachine", "LiveNode", "check_native_version", "check_present",
           "cpu_mask_bits", "gettid",
           "interleave_weights", "limits", "machine", "mems_allowed", "native_lib", "node_mask_bits", "reader",
           "thread_ids", "thread_name", "unlisted"]

_reader: "FsReader | None" = None


def reader() -> "FsReader":
    """The live system's reader (``/``), made once."""
    global _reader
    if _reader is None:
        from ._fs import FsReader

        _reader = FsReader("/")
    return _reader


def _ids(rel: str) -> frozenset[int] | None:
    text = reader().read(rel)
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
    """Read the possible ids (and the node ids :func:`check_present` keeps) again on next use (tests that
    pretend another kernel)."""
    _mask_bits.clear()
    _node_ids_seen.clear()


# ----------------------------------------------------------------------------- limits
def mems_allowed() -> frozenset[int] | None:
    """``Mems_allowed_list`` of this process, or None when unreadable."""
    listed = _status_value(reader().read("proc/self/status") or "", "Mems_allowed_list")
    if listed is None:
        return None
    try:
        return parse_cpulist(listed, what="Mems_allowed_list")
    except ValueError:
        return None


def _status_value(text: str, key: str) -> str | None:
    """The value of the first ``key:`` line of ``/proc/PID/status`` text, trimmed (as
    :func:`numabind._fs.key_values` reads it), without splitting every line (``numabind run`` reads one)."""
    if text.startswith(key + ":"):
        at = 0
    else:
        at = text.find("\n" + key + ":") + 1      # 0: not there
        if not at:
            return None
    end = text.find("\n", at)
    return text[at + len(key) + 1:end if end >= 0 else len(text)].strip()


def _online() -> frozenset[int]:
    return _ids("sys/devices/system/cpu/online") or frozenset(os.sched_getaffinity(0))


def _node_ids(nodes: "frozenset[int] | None") -> tuple[frozenset[int], frozenset[int]]:
    """(online nodes, nodes with memory) from ``node/online`` as read (``nodes``); one node 0 with the memory
    on a kernel without NUMA."""
    memory = _ids("sys/devices/system/node/has_memory")
    if nodes is None:       # a kernel without NUMA: one node 0
        nodes = frozenset({0})
    if memory is None:
        memory = frozenset({0}) if nodes == {0} else nodes
    return nodes, memory


def limits() -> Allowed:
    """What the live kernel lets this process use now (:class:`~numabind.plan.Allowed`): the online CPUs of
    its cpuset, ``Mems_allowed``, where each came from, and its affinity beside them
    (:func:`numabind._cgroup.read_allowed`, as discovery reads it)."""
    from ._cgroup import read_allowed   # the one cpuset reader (cgroup v2, v1, legacy)

    online = _online()
    nodes, memory = _node_ids(_ids("sys/devices/system/node/online"))
    return read_allowed(reader(), online, nodes, memory, frozenset(os.sched_getaffinity(0)))


# ----------------------------------------------------------------------------- what the machine has
_node_ids_seen: "list[frozenset[int]]" = []    # the NUMA nodes that exist, as check_present last read them


def _existing_nodes(again: bool) -> frozenset[int]:
    if again or not _node_ids_seen:
        _node_ids_seen[:] = [_node_ids(_ids("sys/devices/system/node/online"))[0]]
    return _node_ids_seen[0]


def check_present(plan: Plan, what: str) -> None:
    """Raise :class:`~numabind.errors.PlanError` when ``plan`` names CPUs this machine does not have online
    (absent or offline) or NUMA nodes that do not exist (a memory-only node exists), before anything is
    applied: no strictness mode binds what the machine lacks (``what`` names the entry point in the message).
    CPUs or nodes outside the cpuset, and nodes without memory, stay the kernel's refusals at apply time."""
    cpus, nodes, seen = plan.cpus, plan.mem_nodes, _node_ids_seen
    if (cpus is None or cpus <= os.sched_getaffinity(0)) and (not nodes or (seen and nodes <= seen[0])):
        return      # the usual case, spelled out for speed: it runs on every bind
    online = None
    if cpus is not None and not cpus <= os.sched_getaffinity(0):
        online = _online()
        if cpus <= online:
            online = None
    known = None
    if nodes and not nodes <= _existing_nodes(False):
        known = _existing_nodes(True)
        if nodes <= known:
            known = None
    if online is None and known is None:
        return
    why = absent_from_machine(cpus if online is not None else None, nodes if known is not None else None,
                              online or frozenset(), known or frozenset(),
                              _ids("sys/devices/system/cpu/present") if online is not None else None,
                              _ids("sys/devices/system/node/possible") if known is not None else None)
    raise PlanError(f"{what}: {why}; no strictness mode binds CPUs or nodes this machine lacks (numabind "
                    f"hardware lists those it has)")


# ----------------------------------------------------------------------------- threads
def gettid() -> int:
    """The calling thread's kernel thread id (``threading.get_native_id``)."""
    import _thread

    return _thread.get_native_id()


_native_module: "list[Any]" = []


def _native() -> "Any":
    """numabind._native, or None when it is not installed (looked up once). Raises
    :class:`~numabind.errors.NumabindError` when it was compiled for another numabind version
    (:func:`check_native_version`)."""
    if not _native_module:
        try:
            from . import _native
            native: "Any" = _native
        except ImportError:
            native = None
        if native is not None:
            check_native_version(native)
        _native_module.append(native)
    return _native_module[0]


def native_lib() -> "Any":
    """The compiled core's ``lib``: raises ImportError when it is not installed, NumabindError when it was
    compiled for another numabind version."""
    native = _native()
    if native is None:
        raise ImportError("numabind._native is not installed")
    return native.lib


def check_native_version(native: "Any") -> None:
    """Refuse a compiled core built for another numabind version than this package's ``__version__`` (a
    stale build left by an editable install or a copied tree): its functions and buffer layout may differ,
    and would fail later with an AttributeError or worse."""
    from ._version import __version__

    version_of = getattr(native.lib, "nb_version", None)
    built = native.ffi.string(version_of()).decode("ascii", "replace") if version_of is not None else None
    if built == __version__:
        return
    from .errors import NumabindError

    shown = "an older version, from before cores said theirs" if built is None else f"version {built[:40]!r}"
    raise NumabindError(
        f"numabind's native core {getattr(native, '__file__', 'numabind._native')} was built for {shown}, but the "
        f"numabind package is version {__version__!r}: rebuild it (`pip install --force-reinstall --no-cache-dir .` "
        f"from the source tree, or `pip install --no-build-isolation -e .` for an editable install)")


_tid_buffer: "list[Any]" = []


def thread_ids(first: int = 0) -> list[int]:
    """Thread ids of this process, the calling thread (``first``; 0: looked up here) first. Raises
    :class:`~numabind.errors.BindError` when ``/proc/self/task`` cannot be listed or lacks the caller's id (a
    ``/proc`` of another PID namespace)."""
    first = first or gettid()
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
                raise unlisted(n, first)
            if n <= cap:
                if n == 0 or buf[0] != first:
                    raise unlisted(lib.NB_CALLER_NOT_LISTED, first)
                return list(buf[0:n])
            _tid_buffer[0] = ffi.new("int[]", n + n // 2 + 16)
    try:
        out = [int(t) for t in os.listdir("/proc/self/task") if t.isdigit()]
    except OSError as e:
        import errno

        raise unlisted(-(e.errno or errno.EIO), first) from None
    if first not in out:
        raise unlisted(None, first)
    out.remove(first)
    out.insert(0, first)
    return out


def unlisted(code: int | None, me: int) -> "BindError":
    """The error of a thread listing that failed: ``code`` is ``-errno``, or (None, or the native core's
    ``NB_CALLER_NOT_LISTED``) a listing without the calling thread ``me``."""
    import errno

    from .errors import BindError

    if code is None or code >= 0 or code < -4095:
        return BindError(errno.ESRCH, "getdents64",
                         f"/proc/self/task does not list the calling thread {me}: this /proc shows another PID "
                         f"namespace's threads (or none), so no thread id in it can be trusted")
    return BindError(-code, "getdents64", "cannot list /proc/self/task (the threads of this process)")


def thread_name(tid: int) -> str:
    """The thread's ``comm``, or ``'?'`` when it has exited."""
    return reader().read_strip(f"proc/self/task/{int(tid)}/comm") or "?"


def interleave_weights() -> "Any":
    """The live system's weighted-interleave weights (:class:`numabind.topology.InterleaveWeights`),
    or None when the kernel has no ``/sys/kernel/mm/mempolicy/weighted_interleave`` (before Linux 6.9)."""
    from .topology import read_interleave_weights

    return read_interleave_weights(reader())


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
    """The few facts of the live machine that numactl-style options need (``numabind run``): its nodes and
    what this process may use (``allowed``, :class:`~numabind.plan.Allowed`: the cpuset, with the affinity
    beside it), read in a handful of files instead of a whole discovery. ``online_cpus``, ``allowed_cpus``,
    ``allowed_nodes``, ``affinity`` and ``allowed_source`` read ``allowed``, as a Topology's do."""

    __slots__ = ("nodes", "allowed")
    nodes: dict[int, LiveNode]
    allowed: Allowed

    def __init__(self, nodes: dict[int, LiveNode], allowed: Allowed) -> None:
        object.__setattr__(self, "nodes", dict(nodes))
        object.__setattr__(self, "allowed", allowed)

    def __hash__(self) -> int:
        return hash(self.allowed)

    @property
    def online_cpus(self) -> frozenset[int]:
        return self.allowed.online_cpus

    @property
    def allowed_cpus(self) -> frozenset[int]:
        return self.allowed.allowed_cpus

    @property
    def allowed_nodes(self) -> frozenset[int]:
        return self.allowed.allowed_nodes

    @property
    def affinity(self) -> "frozenset[int] | None":
        return self.allowed.affinity

    @property
    def allowed_source(self) -> str:
        return self.allowed.cpus_source


def machine(*, cpuset_if_narrowed: bool = False) -> LiveMachine:
    """The live machine's nodes (CPUs, memory), online CPUs, and what this process may use.

    ``cpuset_if_narrowed=True`` reads the cpuset only when the affinity leaves out an online CPU (the kernel keeps
    the affinity inside the cpuset, so the answer is the same, without the cgroup files)."""
    online = _online()
    listed = _ids("sys/devices/system/node/online")
    node_ids, memory = _node_ids(listed)
    nodes: dict[int, LiveNode] = {}
    if listed is None:     # a kernel without NUMA: one node 0 with every CPU and the memory
        nodes[0] = LiveNode(0, online, True)
    else:
        for n in sorted(node_ids):
            cpus = _ids(f"sys/devices/system/node/node{n}/cpulist") or frozenset()
            nodes[n] = LiveNode(n, cpus & online, n in memory)
    affinity = frozenset(os.sched_getaffinity(0))
    if cpuset_if_narrowed and affinity >= online:
        mems = mems_allowed()
        allowed = Allowed(online_cpus=online, allowed_cpus=online, cpus_source=AFFINITY_HOLDS_ONLINE,
                          nodes=node_ids, memory_nodes=memory,
                          allowed_nodes=node_ids if mems is None else mems & node_ids,
                          nodes_source="every node" if mems is None else "status", affinity=affinity & online)
        return LiveMachine(nodes=nodes, allowed=allowed)
    from ._cgroup import read_allowed   # the one cpuset reader; numabind run loads it only when it is needed

    allowed = read_allowed(reader(), online, node_ids, memory, affinity)
    return LiveMachine(nodes=nodes, allowed=allowed)


#: ``cpus_source`` of :func:`machine` ``(cpuset_if_narrowed=True)`` when the cpuset was not read.
AFFINITY_HOLDS_ONLINE = "online (the affinity holds every online CPU, so the cpuset does too)"
