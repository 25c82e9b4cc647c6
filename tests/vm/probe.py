"""Measuring tools for the guest tests, written against the kernel directly (ctypes), so
that what numabind claims is checked by code that does not share its implementation.

* :class:`Region`: an anonymous mapping between two PROT_NONE guard pages, so it is one
  VMA of its own and one line of ``/proc/self/numa_maps``; its pages are counted per node
  both there and with ``move_pages(2)`` in query mode.
* :func:`in_child`: run a function in a forked child (no interpreter start-up, which costs
  seconds under emulation) and get its result or its traceback back.
* :func:`deny_mempolicy`: a seccomp filter that makes ``set_mempolicy``/``mbind`` fail
  with EPERM in the calling thread and everything it starts.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import multiprocessing
import logging
import os
import re
import struct
import traceback
from collections.abc import Callable, Mapping

PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1 << 20

# (mbind, set_mempolicy, get_mempolicy, move_pages) of this machine: x86_64's, or arm64's asm-generic numbers
SYS_MBIND, SYS_SET_MEMPOLICY, SYS_GET_MEMPOLICY, SYS_MOVE_PAGES = {
    "x86_64": (237, 238, 239, 279), "aarch64": (235, 237, 236, 239)}[os.uname().machine]

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.syscall.restype = ctypes.c_long
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

PROT_NONE, PROT_READ, PROT_WRITE = 0, 1, 2
MAP_PRIVATE, MAP_ANONYMOUS = 0x02, 0x20
MAP_FAILED = ctypes.c_void_p(-1).value


def _oserror(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


class Region:
    """``size`` bytes of anonymous memory as a VMA of its own (guard pages on both sides)."""

    def __init__(self, size: int) -> None:
        self.size = (size + PAGE - 1) // PAGE * PAGE
        base = _libc.mmap(None, self.size + 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if base in (None, MAP_FAILED):
            raise _oserror("mmap")
        self.base = base
        self.addr = base + PAGE
        for guard in (base, self.addr + self.size):
            if _libc.mprotect(guard, PAGE, PROT_NONE) != 0:
                raise _oserror("mprotect")

    def touch(self) -> Region:
        """Write every page (first touch is what allocates and places it)."""
        ctypes.memset(self.addr, 0x5A, self.size)
        return self

    @property
    def pages(self) -> int:
        return self.size // PAGE

    def page_nodes(self) -> list[int]:
        """Node of each page by move_pages(2) query mode; negative values are -errno."""
        n = self.pages
        ptrs = (ctypes.c_void_p * n)(*(self.addr + k * PAGE for k in range(n)))
        status = (ctypes.c_int * n)()
        rc = _libc.syscall(SYS_MOVE_PAGES, 0, ctypes.c_ulong(n), ptrs, None, status, 0)
        if rc != 0:
            raise _oserror("move_pages")
        return list(status)

    def node_counts(self) -> collections.Counter:
        """Pages per node (move_pages); key -errno for pages without a node (e.g. -ENOENT)."""
        return collections.Counter(self.page_nodes())

    def numa_maps(self) -> dict:
        """This region's line of /proc/self/numa_maps: {"policy": str, "nodes": {node: pages}, ...}."""
        key = f"{self.addr:x} "
        with open("/proc/self/numa_maps") as f:
            for line in f:
                if line.startswith(key):
                    fields = line.split()
                    nodes = {int(m[1]): int(m[2]) for m in re.finditer(r"\bN(\d+)=(\d+)", line)}
                    return {"policy": fields[1], "nodes": nodes, "line": line.strip()}
        raise LookupError(f"no numa_maps line starts at {self.addr:#x}")

    def close(self) -> None:
        if self.base is not None:
            _libc.munmap(self.base, self.size + 2 * PAGE)
            self.base = None

    def __enter__(self) -> Region:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def shares(counts: Mapping[int, int]) -> dict[int, float]:
    """Per-node share in percent of all counted pages (keys may be strings, as after JSON)."""
    total = sum(counts.values()) or 1
    return {int(node): 100.0 * n / total for node, n in sorted(counts.items(), key=lambda kv: int(kv[0]))}


def fmt_shares(counts: Mapping[int, int]) -> str:
    total = sum(counts.values())
    parts = [f"N{node}={pct:.2f}%" if node >= 0 else f"err{-node}={pct:.2f}%"
             for node, pct in shares(counts).items()]
    return " ".join(parts) + f" of {total} pages"


def measure(size: int) -> dict:
    """Allocate and touch ``size`` bytes now; where did the pages go (both counts)."""
    with Region(size) as r:
        r.touch()
        by_move_pages = dict(r.node_counts())
        maps = r.numa_maps()
    return {"pages": size // PAGE, "move_pages": by_move_pages, "numa_maps": maps["nodes"],
            "policy": maps["policy"], "line": maps["line"]}


def process_node_pages(pid: int | str = "self", private_only: bool = False) -> dict[int, int]:
    """Pages per node over every mapping of process ``pid`` (the sum of its numa_maps lines).

    ``private_only``: only mappings without a backing file (heap, stack, anonymous; no huge
    pages), which no other process shares; a file page mapped after a count may already sit in
    the page cache on any node.
    """
    total: collections.Counter = collections.Counter()
    with open(f"/proc/{pid}/numa_maps") as f:
        for line in f:
            if private_only and (" file=" in line or " huge " in line):
                continue
            for m in re.finditer(r"\bN(\d+)=(\d+)", line):
                total[int(m[1])] += int(m[2])
    return dict(total)


def thread_affinities() -> dict[int, frozenset[int]]:
    """CPU affinity of every thread of this process."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            out[int(tid)] = frozenset(os.sched_getaffinity(int(tid)))
        except ProcessLookupError:
            continue
    return out


def node_meminfo(node: int) -> dict[str, int]:
    """/sys/devices/system/node/nodeN/meminfo in bytes."""
    out = {}
    with open(f"/sys/devices/system/node/node{node}/meminfo") as f:
        for line in f:
            m = re.match(rf"Node {node} (\w+):\s+(\d+)(?: kB)?", line)
            if m:
                out[m[1]] = int(m[2]) * (1024 if line.rstrip().endswith("kB") else 1)
    return out


def raw_set_mempolicy(mode: int, nodes: set[int] | frozenset[int] = frozenset()) -> int:
    """set_mempolicy(2) straight through syscall(); returns 0 or -errno."""
    mask = ctypes.c_ulong(sum(1 << n for n in nodes))
    rc = _libc.syscall(SYS_SET_MEMPOLICY, mode, ctypes.byref(mask) if nodes else None,
                       ctypes.c_ulong(64 if nodes else 0))
    return 0 if rc == 0 else -ctypes.get_errno()


# ----------------------------------------------------------------------------- seccomp
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
#: The seccomp_data.arch of this machine's system calls (a filter for another arch would deny nothing).
AUDIT_ARCH = {"x86_64": AUDIT_ARCH_X86_64, "aarch64": AUDIT_ARCH_AARCH64}[os.uname().machine]
_BPF_LD_W_ABS = 0x20
_BPF_JEQ_K = 0x15
_BPF_RET_K = 0x06


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def deny_mempolicy(err: int = errno.EPERM, syscalls: tuple[int, ...] = (SYS_SET_MEMPOLICY, SYS_MBIND)) -> None:
    """Install a seccomp filter: ``syscalls`` fail with ``err``, everything else is allowed.

    Applies to the calling thread and whatever it starts later (threads, children, exec).
    """
    if len(syscalls) != 2:
        raise ValueError("the filter is laid out for exactly two system calls")
    insns = [
        (_BPF_LD_W_ABS, 0, 0, 4),                        # A = seccomp_data.arch
        (_BPF_JEQ_K, 0, 5, AUDIT_ARCH),                  # other arch: allow (jump to 7)
        (_BPF_LD_W_ABS, 0, 0, 0),                        # A = seccomp_data.nr
        (_BPF_JEQ_K, 2, 0, syscalls[0]),                 # -> 6
        (_BPF_JEQ_K, 1, 0, syscalls[1]),                 # -> 6
        (_BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        (_BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | (err & 0xFFFF)),
        (_BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    code = b"".join(struct.pack("<HBBI", *i) for i in insns)
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(insns), ctypes.addressof(buf))
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _oserror("prctl(PR_SET_NO_NEW_PRIVS)")
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) != 0:
        raise _oserror("prctl(PR_SET_SECCOMP)")


# ----------------------------------------------------------------------------- children
class ChildFailed(AssertionError):
    """The child raised (its traceback is the message), died, or ran out of time."""


def _child_main(conn, fn, args):
    try:
        result = fn(*args)
    except BaseException:  # noqa: BLE001 - everything goes back to the parent
        conn.send(("error", traceback.format_exc()))
    else:
        conn.send(("ok", result))
    conn.close()


def in_child(fn: Callable, *args, timeout: float = 240):
    """Run ``fn(*args)`` in a forked child and return its (picklable) result.

    Memory policy and affinity changes stay in the child, so the test process is left as
    it was. A child that raises, dies or outlives ``timeout`` fails the test.
    """
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child_main, args=(child, fn, args))  # not daemonic: it may start children
    proc.start()
    child.close()
    try:
        if not parent.poll(timeout):
            raise ChildFailed(f"child {proc.pid} ({getattr(fn, '__name__', fn)}) gave no result within {timeout} s "
                              f"(exit code {proc.exitcode})")
        try:
            kind, value = parent.recv()
        except EOFError:
            proc.join(10)
            raise ChildFailed(f"child {proc.pid} died with exit code {proc.exitcode} before reporting") from None
    finally:
        if proc.is_alive():
            proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join()
        parent.close()
    if kind == "error":
        raise ChildFailed(f"in the child:\n{value}")
    return value


class LogCollector(logging.Handler):
    """Keeps (level, message) of every record, for asserting what numabind logged in a child."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelname, record.getMessage()))
