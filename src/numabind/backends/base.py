"""The interface every backend provides, and the kernel constants they share.

A backend is the only code that talks to the kernel. All of them offer the
same small surface; :mod:`numabind.bind` never knows which one it got.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass

from .._fs import FsReader
from ..cpulist import format_cpulist, parse_cpulist
from ..errors import BindError

__all__ = [
    "Backend",
    "MPOL_MODES",
    "MPOL_NAMES",
    "MPOL_F_NODE",
    "MPOL_F_ADDR",
    "MPOL_F_MEMS_ALLOWED",
    "MPOL_MF_STRICT",
    "MPOL_MF_MOVE",
    "MPOL_MF_MOVE_ALL",
    "MPOL_MODE_FLAGS",
    "node_mask_bits",
    "cpu_mask_bits",
    "KernelLimits",
    "MemPolicyState",
    "NodePages",
    "node_pages",
]

# <linux/mempolicy.h>
MPOL_MODES = {
    "default": 0,
    "preferred": 1,
    "bind": 2,
    "interleave": 3,
    "local": 4,
    "preferred-many": 5,
    "weighted-interleave": 6,
}
MPOL_NAMES = {v: k for k, v in MPOL_MODES.items()}
MPOL_F_STATIC_NODES = 1 << 15
MPOL_F_RELATIVE_NODES = 1 << 14
MPOL_F_NUMA_BALANCING = 1 << 13
MPOL_MODE_FLAGS = MPOL_F_STATIC_NODES | MPOL_F_RELATIVE_NODES | MPOL_F_NUMA_BALANCING
# get_mempolicy flags
MPOL_F_NODE = 1 << 0
MPOL_F_ADDR = 1 << 1
MPOL_F_MEMS_ALLOWED = 1 << 2
# mbind / move_pages flags
MPOL_MF_STRICT = 1 << 0
MPOL_MF_MOVE = 1 << 1
MPOL_MF_MOVE_ALL = 1 << 2


def _max_id(path: str, fallback: int) -> int:
    try:
        with open(path) as f:
            ids = parse_cpulist(f.read())
    except (OSError, ValueError):
        return fallback
    return max(ids) if ids else fallback


@functools.lru_cache(maxsize=None)
def node_mask_bits() -> int:
    """Bits in a node mask for this kernel: possible nodes, rounded up to 64.

    The kernel rejects ``get_mempolicy`` masks smaller than its node count, so
    masks are sized from ``node/possible`` (not from a fixed 64 or 1024).
    """
    top = _max_id("/sys/devices/system/node/possible", 0) + 1
    return max(64, (top + 63) // 64 * 64)


@functools.lru_cache(maxsize=None)
def cpu_mask_bits() -> int:
    """Bits in a CPU mask for this kernel: possible CPUs, rounded up to 64."""
    top = _max_id("/sys/devices/system/cpu/possible", (os.cpu_count() or 1) - 1) + 1
    return max(64, (top + 63) // 64 * 64)


@dataclass(frozen=True)
class MemPolicyState:
    """A thread's memory policy exactly as ``get_mempolicy`` returned it, to be put back as it was.

    ``mode`` is the whole mode word: the ``MPOL_*`` mode with its ``MPOL_F_STATIC_NODES`` /
    ``MPOL_F_RELATIVE_NODES`` / ``MPOL_F_NUMA_BALANCING`` flags; ``nodes`` the node mask the kernel
    returned with it (for static and relative nodes, the mask the policy was set with).
    """

    mode: int
    nodes: frozenset[int]

    @property
    def flags(self) -> int:
        return self.mode & MPOL_MODE_FLAGS

    def describe(self) -> str:
        name = MPOL_NAMES.get(self.mode & ~MPOL_MODE_FLAGS, f"mode{self.mode & ~MPOL_MODE_FLAGS}")
        flags = [f for f, bit in (("static", MPOL_F_STATIC_NODES), ("relative", MPOL_F_RELATIVE_NODES),
                                  ("balancing", MPOL_F_NUMA_BALANCING)) if self.mode & bit]
        nodes = f" {format_cpulist(self.nodes)}" if self.nodes else ""
        return name + "".join(f"+{f}" for f in flags) + nodes


@dataclass(frozen=True)
class KernelLimits:
    """What the live kernel lets this process use right now."""

    online_cpus: frozenset[int]
    online_nodes: frozenset[int]
    memory_nodes: frozenset[int]           # nodes with memory (node/has_memory)
    mems_allowed: frozenset[int]           # Mems_allowed_list of this process (its cpuset)
    cpuset_cpus: frozenset[int] | None     # the cpuset's CPUs, None when unknown
    cpuset_source: str = ""


_LIVE = FsReader("/")


def _live_ids(rel: str) -> frozenset[int] | None:
    text = _LIVE.read(rel)
    if text is None:
        return None
    try:
        return parse_cpulist(text)
    except ValueError:
        return None


class Backend(ABC):
    """One mechanism for applying a plan.

    Memory-policy calls act on the *calling thread* (the kernel offers no way
    to set another thread's policy); affinity calls take a thread id.
    """

    #: "libnuma" | "syscall" | "numactl"
    name: str = ""
    #: True when set_mempolicy works on the running process (not only at exec)
    in_process_memory: bool = True

    @abstractmethod
    def set_affinity(self, tid: int, cpus: frozenset[int]) -> None:
        """sched_setaffinity of one thread (0 = calling thread). Raises BindError."""

    @abstractmethod
    def get_affinity(self, tid: int) -> frozenset[int]:
        """sched_getaffinity of one thread. Raises BindError."""

    @abstractmethod
    def set_mempolicy(self, policy: str, nodes: frozenset[int]) -> None:
        """set_mempolicy of the calling thread. Raises BindError."""

    @abstractmethod
    def get_mempolicy(self) -> tuple[str, frozenset[int]]:
        """(policy name, nodes) of the calling thread. Raises BindError."""

    def save_mempolicy(self) -> MemPolicyState:
        """The calling thread's whole memory policy (mode, flags, nodes), for :meth:`restore_mempolicy`.

        Raises BindError when it cannot be read (then a change could not be undone).
        """
        raise BindError(errno.ENOTSUP, "get_mempolicy",
                        f"the {self.name} backend cannot save the calling thread's memory policy")

    def restore_mempolicy(self, state: MemPolicyState) -> None:
        """Put back what :meth:`save_mempolicy` returned, flags and node mask included. Raises BindError."""
        raise BindError(errno.ENOTSUP, "set_mempolicy",
                        f"the {self.name} backend cannot restore a memory policy ({state.describe()})")

    @abstractmethod
    def migrate_pages(self, pid: int, from_nodes: frozenset[int], to_nodes: frozenset[int]) -> int:
        """Move a process's pages; returns the number of pages that could not be moved."""

    def page_nodes(self, addresses: list[int]) -> list[int]:
        """Node of each page (move_pages query mode); negative values are -errno."""
        raise BindError(errno.ENOSYS, "move_pages", f"the {self.name} backend cannot query page placement")

    # -- live process state (the same for every backend) ---------------------
    def kernel_limits(self) -> KernelLimits:
        """Online CPUs, memory nodes, Mems_allowed and the cpuset's CPUs, read live."""
        from ..topology import read_cpuset

        online = _live_ids("sys/devices/system/cpu/online") or frozenset(os.sched_getaffinity(0))
        memory = _live_ids("sys/devices/system/node/has_memory")
        if memory is None:  # kernel without NUMA: one node 0
            memory = frozenset({0})
        nodes = _live_ids("sys/devices/system/node/online")
        if nodes is None:
            nodes = frozenset({0})
        mems = None
        for line in (_LIVE.read("proc/self/status") or "").splitlines():
            if line.startswith("Mems_allowed_list:"):
                mems = parse_cpulist(line.split(":", 1)[1])
        cpuset = read_cpuset(_LIVE)
        return KernelLimits(online_cpus=online, online_nodes=nodes, memory_nodes=memory,
                            mems_allowed=mems if mems is not None else memory,
                            cpuset_cpus=cpuset.cpus if cpuset else None,
                            cpuset_source=cpuset.source if cpuset else "")

    def thread_ids(self) -> list[int]:
        """Thread ids of this process (threads may exit at any moment)."""
        return [int(t) for t in _LIVE.listdir("proc/self/task") if t.isdigit()]

    def thread_name(self, tid: int) -> str:
        return (_LIVE.read_strip(f"proc/self/task/{tid}/comm") or "?")

    def gettid(self) -> int:
        return threading.get_native_id()

    def command_prefix(self, plan) -> list[str] | None:
        """argv prefix that starts a command bound to ``plan``, or None when the
        backend binds in-process (then the caller binds and execs)."""
        return None


@dataclass(frozen=True)
class NodePages:
    """Resident pages of a process per NUMA node (in base pages), from ``/proc/PID/numa_maps``."""

    total: dict[int, int]
    shared: dict[int, int]    # in file-backed mappings or pages mapped by several processes

    def on(self, nodes) -> int:
        return sum(n for node, n in self.total.items() if node in nodes)

    def shared_on(self, nodes) -> int:
        return sum(n for node, n in self.shared.items() if node in nodes)


_NODE_RE = re.compile(r"\bN(\d+)=(\d+)")
_KPAGE_RE = re.compile(r"\bkernelpagesize_kB=(\d+)")
_MAPMAX_RE = re.compile(r"\bmapmax=(\d+)")
_PAGE = os.sysconf("SC_PAGE_SIZE")


#: Largest numa_maps read (a process with hundreds of thousands of mappings); beyond it pages are not counted.
_NUMA_MAPS_MAX = 64 << 20


def _read_seq_file(path: str, cap: int) -> str | None:
    """A procfs seq file read to its end, or None (unreadable, or larger than ``cap`` bytes).

    A seq file such as ``numa_maps`` returns one batch of records per read(2), usually short of a page
    and of the buffer, so a short read is not the end of the file: only an empty read is.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > cap:
                return None
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks).decode("ascii", errors="replace")


def node_pages(pid: int | str = "self") -> NodePages | None:
    """Count a process's pages per node; None when numa_maps cannot be read (no NUMA, no permission)."""
    if not (pid == "self" or (isinstance(pid, int) and not isinstance(pid, bool) and pid > 0)
            or (isinstance(pid, str) and pid.isascii() and pid.isdigit())):
        return None
    text = _read_seq_file(f"/proc/{pid}/numa_maps", _NUMA_MAPS_MAX)
    if text is None:
        return None
    total: dict[int, int] = {}
    shared: dict[int, int] = {}
    for line in text.splitlines():
        scale = 1
        m = _KPAGE_RE.search(line)
        if m:
            scale = max(1, int(m[1]) * 1024 // _PAGE)
        mapmax = _MAPMAX_RE.search(line)
        is_shared = " file=" in line or (mapmax is not None and int(mapmax[1]) > 1)
        for node, count in _NODE_RE.findall(line):
            n = int(count) * scale
            total[int(node)] = total.get(int(node), 0) + n
            if is_shared:
                shared[int(node)] = shared.get(int(node), 0) + n
    return NodePages(total=total, shared=shared)
