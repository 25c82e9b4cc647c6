"""The backends: the interface every backend provides, the kernel constants they share, and the choice
of one, in the spirit of pyzmq's backend chooser.

A backend is the only code that talks to the kernel, and it only makes calls: reading the running
process (limits, thread list, numa_maps, mask sizes) is :mod:`numabind.live`. All backends offer
the same small surface (:class:`Backend`); :mod:`numabind.bind` never knows which one it got.

Default order: ``libnuma`` (dlopen'd libnuma.so.1) → ``syscall`` (raw system
calls) → ``numactl`` (birth-time binding through the numactl binary) →
``none`` (CPU affinity only). ``NUMABIND_BACKEND`` forces one by name; a forced
backend that cannot load is an error, never a silent substitute. The interface and the choice are
one module, so a bind loads two backend modules: this one and the backend it uses.
"""

import _thread
import errno
import os
from abc import ABC, abstractmethod
TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)

from .._base import Value, environ_get, getLogger
from ..cpulist import format_cpulist, words_to_ids
from ..errors import BindError, NumabindError

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping, Sequence
    from typing import Any
    from ..plan import Plan

__all__ = [
    "AffinityWalk",
    "Backend",
    "backend_info",
    "BACKEND_NAMES",
    "BindCall",
    "get_backend",
    "lock_for_fork",
    "MemPolicyState",
    "MemPolicySwap",
    "MPOL_MODE_FLAGS",
    "MPOL_MODES",
    "MPOL_NAMES",
    "reset_backends",
    "unlock_after_fork",
    "WALK_BOUND",
    "WALK_CHECK_FIRST",
    "WALK_DIFFERS",
    "WALK_EXITED",
    "WALK_LEFT_ALONE",
    "WALK_MATCHING",
    "WALK_NOT_TRIED",
    "WALK_ONLY_CALLER",
    "WALK_STOP_ON_ERROR",
    "WALK_UNCHANGED",
    "WEIGHTS_AUTO_NAMES",
    "WEIGHTS_DIR",
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
#: The system-wide weights of MPOL_WEIGHTED_INTERLEAVE (Linux 6.9+): one file ``nodeN`` per node holding
#: its weight (1-255), and from Linux 6.16 ``auto`` (``true``: the kernel derives them from the firmware's
#: bandwidth figures; writing a weight switches it to ``false``). Relative to the file-system root.
WEIGHTS_DIR = "sys/kernel/mm/mempolicy/weighted_interleave"
#: Names the ``auto`` switch has been seen under (6.16's, and ``__auto_type`` where a C23 compiler
#: expanded the kernel's ``auto`` macro in the attribute's name).
WEIGHTS_AUTO_NAMES = ("auto", "__auto_type")

# Per-thread outcome of Backend.affinity_many (the values of csrc/numabind.h's enum nb_thread_status);
# a negative value is -errno of a refused sched_setaffinity.
WALK_BOUND, WALK_LEFT_ALONE, WALK_EXITED, WALK_UNCHANGED, WALK_NOT_TRIED, WALK_DIFFERS = 0, 1, 2, 3, 4, 5
# Flags of Backend.affinity_many (enum nb_affinity_flags); WALK_ONLY_CALLER (Backend.apply_all only): the
# calling thread alone, no thread list.
WALK_MATCHING, WALK_STOP_ON_ERROR, WALK_CHECK_FIRST, WALK_ONLY_CALLER = 1, 2, 4, 8


class MemPolicyState(Value):
    """A thread's memory policy exactly as ``get_mempolicy`` returned it, to be put back as it was.

    ``mode`` is the whole mode word: the ``MPOL_*`` mode with its ``MPOL_F_STATIC_NODES`` /
    ``MPOL_F_RELATIVE_NODES`` / ``MPOL_F_NUMA_BALANCING`` flags; ``nodes`` the node mask the kernel
    returned with it (for static and relative nodes, the mask the policy was set with).
    """

    __slots__ = ("mode", "nodes")
    mode: int
    nodes: frozenset[int]

    def __init__(self, mode: int, nodes: frozenset[int]) -> None:
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "nodes", frozenset(nodes))

    @property
    def flags(self) -> int:
        return self.mode & MPOL_MODE_FLAGS

    @property
    def policy(self) -> str:
        """The mode's name as a Plan spells it (``local`` for the preferred-without-node of old kernels)."""
        return policy_of(self.mode, self.nodes)[0]

    def describe(self) -> str:
        name = MPOL_NAMES.get(self.mode & ~MPOL_MODE_FLAGS, f"mode{self.mode & ~MPOL_MODE_FLAGS}")
        flags = [f for f, bit in (("static", MPOL_F_STATIC_NODES), ("relative", MPOL_F_RELATIVE_NODES),
                                  ("balancing", MPOL_F_NUMA_BALANCING)) if self.mode & bit]
        nodes = f" {format_cpulist(self.nodes)}" if self.nodes else ""
        return name + "".join(f"+{f}" for f in flags) + nodes


def policy_of(mode: int, nodes: frozenset[int]) -> tuple[str, frozenset[int]]:
    """``(policy name, nodes)`` as a Plan spells them, from a get_mempolicy mode word and node mask."""
    value = mode & ~MPOL_MODE_FLAGS
    name = MPOL_NAMES.get(value) or f"mode{value}"
    if name in ("default", "local"):
        return name, frozenset()
    if name == "preferred" and not nodes:
        return "local", frozenset()   # older kernels store MPOL_LOCAL as preferred with no node
    return name, nodes


class MemPolicySwap:
    """What :meth:`Backend.swap_mempolicy` did: the policy before (or why it could not be read), the
    refusal of the new one if any, and the policy read back after it was set (or why not)."""

    __slots__ = ("old", "old_error", "set_error", "now", "now_error")

    def __init__(self, old: MemPolicyState | None = None, old_error: BindError | None = None,
                 set_error: BindError | None = None, now: tuple[str, frozenset[int]] | None = None,
                 now_error: BindError | None = None) -> None:
        self.old, self.old_error, self.set_error, self.now, self.now_error = old, old_error, set_error, now, now_error


_DECODED: dict[tuple[int, ...], frozenset[int]] = {}   # mask words -> ids (masks repeat: plans do)


def decode(words: "Any") -> frozenset[int]:
    """The ids of a mask given as 64-bit words (a C array slice or a sequence), remembered per mask."""
    key = tuple(words)
    ids = _DECODED.get(key)
    if ids is None:
        if len(_DECODED) > 256:
            _DECODED.clear()
        ids = _DECODED[key] = words_to_ids(key)
    return ids


class AffinityWalk:
    """One pass of :meth:`Backend.affinity_many`: per thread its status and its CPUs before and after.

    ``status[i]`` is one of the ``WALK_*`` values or ``-errno``; masks are decoded only when asked for
    (a native walk keeps the kernel's words).
    """

    __slots__ = ("tids", "status", "processed", "_before", "_after", "_words", "_owners", "_first")

    def __init__(self, tids: "Sequence[int]", status: "Sequence[int]", processed: int, before: "Any", after: "Any",
                 words: int = 0, owners: "tuple[Any, ...]" = ()) -> None:
        self.tids, self.status, self.processed = tids, status, processed
        self._before, self._after, self._words = before, after, words
        self._owners = owners     # the C arrays that status/after point into
        self._first: frozenset[int] | None = None

    def _decode(self, masks: "Any", i: int) -> frozenset[int]:
        w = self._words
        if not w:
            return masks[i]   # type: ignore[no-any-return]
        return decode(masks[i * w:(i + 1) * w])

    def before(self, i: int) -> frozenset[int]:
        return self._decode(self._before, i)

    def after(self, i: int) -> frozenset[int]:
        if i == 0:
            first = self._first
            if first is None:
                first = self._first = self._decode(self._after, 0)
            return first
        return self._decode(self._after, i)


class BindCall:
    """What :meth:`Backend.apply_all` did in one call.

    ``clean``: every step succeeded and the kernel read back exactly what was asked (then nothing needs
    explaining). ``walk`` is the affinity walk, or None when it did not run (the memory policy was
    refused, or under ``need_old`` the old one was unreadable); ``processed`` its thread count, of which
    ``exited`` (other than the caller) exited during the walk. :meth:`swap` is the memory-policy swap
    (None when no policy was asked for); :meth:`now` the policy read in the same call when none was
    asked for (or why it could not be read). A native backend builds the walk and decodes the policies
    only when asked: a clean bind never needs them.
    """

    __slots__ = ("clean", "processed", "exited", "_walk", "_swap", "_now")

    def __init__(self, clean: bool, walk: AffinityWalk | None, exited: int, swap: MemPolicySwap | None = None,
                 now: tuple[str, frozenset[int]] | BindError | None = None) -> None:
        self.clean, self.exited, self._walk, self._swap, self._now = clean, exited, walk, swap, now
        self.processed = 0 if walk is None else walk.processed

    @property
    def walk(self) -> AffinityWalk | None:
        return self._walk

    def swap(self) -> MemPolicySwap | None:
        return self._swap

    def now(self) -> tuple[str, frozenset[int]] | BindError | None:
        return self._now


class Backend(ABC):
    """One mechanism for applying a plan.

    Memory-policy calls act on the *calling thread* (the kernel offers no way
    to set another thread's policy); affinity calls take a thread id.
    """

    #: "libnuma" | "syscall" | "numactl" | "none"
    name: str = ""
    #: True when set_mempolicy works on the running process (not only at exec)
    in_process_memory: bool = True

    @abstractmethod
    def set_affinity(self, tid: int, cpus: frozenset[int]) -> None:
        """sched_setaffinity of one thread (0 = calling thread). Raises BindError."""

    @abstractmethod
    def get_affinity(self, tid: int) -> frozenset[int]:
        """sched_getaffinity of one thread. Raises BindError."""

    def affinity_many(self, tids: "Sequence[int]", cpus: frozenset[int] | None, flags: int = 0) -> AffinityWalk:
        """For each thread: read its CPUs, set them to ``cpus`` (None: only read), read them back.

        ``WALK_MATCHING`` leaves alone a thread whose CPUs differ from ``tids[0]``'s;
        ``WALK_STOP_ON_ERROR`` stops at the first refusal; ``WALK_CHECK_FIRST`` stops after
        ``tids[0]`` unless it holds exactly ``cpus``. A failure of ``tids[0]`` always stops. A thread
        that was set but reads back other CPUs than ``tids[0]`` is ``WALK_DIFFERS``.
        Native backends do this in one C call; this is the same in Python.
        """
        n = len(tids)
        status = [WALK_NOT_TRIED] * n
        before: list[frozenset[int]] = [frozenset()] * n
        after: list[frozenset[int]] = [frozenset()] * n
        for i, tid in enumerate(tids):
            try:
                before[i] = self.get_affinity(tid)
            except BindError as e:
                status[i] = WALK_EXITED if e.errno == errno.ESRCH else -(e.errno or errno.EIO)
                if status[i] < 0 and (i == 0 or flags & WALK_STOP_ON_ERROR):
                    return AffinityWalk(tids, status, i + 1, before, after)
                continue
            if cpus is None or (flags & WALK_MATCHING and i and before[i] != before[0]):
                after[i] = before[i]
                status[i] = WALK_UNCHANGED if cpus is None else WALK_LEFT_ALONE
                continue
            try:
                self.set_affinity(tid, cpus)
            except BindError as e:
                after[i] = before[i]
                status[i] = WALK_EXITED if e.errno == errno.ESRCH else -(e.errno or errno.EIO)
                if status[i] < 0 and (i == 0 or flags & WALK_STOP_ON_ERROR):
                    return AffinityWalk(tids, status, i + 1, before, after)
                continue
            try:
                after[i] = self.get_affinity(tid)
            except BindError as e:
                if e.errno == errno.ESRCH:
                    status[i] = WALK_EXITED
                    continue
            status[i] = WALK_DIFFERS if i and status[0] == WALK_BOUND and after[i] != after[0] else WALK_BOUND
            if i == 0 and flags & WALK_CHECK_FIRST and after[0] != cpus:
                return AffinityWalk(tids, status, 1, before, after)
        return AffinityWalk(tids, status, n, before, after)

    def apply_all(self, policy: str | None, nodes: frozenset[int], cpus: frozenset[int] | None, flags: int,
                  need_old: bool) -> BindCall | None:
        """One call for a whole bind: list the threads, :meth:`swap_mempolicy` (``policy`` None: only
        read it), then :meth:`affinity_many` over them (``flags`` with ``WALK_ONLY_CALLER``: the caller
        only). It stops before the walk when the policy is refused, or under ``need_old`` when the old one
        is unreadable; the caller goes on from there. None: this backend has no such call (the caller
        does the steps one by one); native backends make it one C call.
        """
        return None

    @abstractmethod
    def set_mempolicy(self, policy: str, nodes: frozenset[int]) -> None:
        """set_mempolicy of the calling thread. Raises BindError."""

    @abstractmethod
    def get_mempolicy(self) -> tuple[str, frozenset[int]]:
        """(policy name, nodes) of the calling thread. Raises BindError."""

    def swap_mempolicy(self, policy: str, nodes: frozenset[int], need_old: bool = False) -> MemPolicySwap:
        """Save the calling thread's policy, set ``policy`` on ``nodes``, read it back; errors are returned.

        With ``need_old``, an unreadable old policy stops before anything is set. Native backends do
        the three calls in one C call; this is the same in Python.
        """
        out = MemPolicySwap()
        try:
            out.old = self.save_mempolicy()
        except BindError as e:
            out.old_error = e
            if need_old:
                return out
        try:
            self.set_mempolicy(policy, nodes)
        except BindError as e:
            out.set_error = e
            return out
        try:
            out.now = self.get_mempolicy()
        except BindError as e:
            out.now_error = e
        return out

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

    # -- the system-wide weights of weighted interleave (sysfs writes: the same for every backend) --
    def set_interleave_weights(self, weights: "Mapping[int, int]", root: str = "/") -> None:
        """Write each node's weight into ``WEIGHTS_DIR/nodeN`` (system-wide; needs root). Raises BindError
        naming the file; weights written before a refusal stay (the caller restores them)."""
        for node, weight in sorted(weights.items()):
            self._write_sysfs(os.path.join(root, WEIGHTS_DIR, f"node{int(node)}"), f"{int(weight)}\n",
                              f"interleave weight {weight} of node {node}")

    def set_interleave_auto(self, name: str, on: bool, root: str = "/") -> None:
        """Write ``true``/``false`` into ``WEIGHTS_DIR/<name>`` (the auto switch, Linux 6.16+). Raises BindError."""
        self._write_sysfs(os.path.join(root, WEIGHTS_DIR, name), "true\n" if on else "false\n",
                          f"weighted-interleave auto mode {'on' if on else 'off'}")

    @staticmethod
    def _write_sysfs(path: str, text: str, what: str) -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError as e:
            raise BindError(e.errno or errno.EIO, "open", f"{path} ({what})") from None
        try:
            os.write(fd, text.encode())
        except OSError as e:
            raise BindError(e.errno or errno.EIO, "write", f"{path} ({what})") from None
        finally:
            os.close(fd)

    def command_prefix(self, plan: "Plan") -> list[str] | None:
        """argv prefix that starts a command bound to ``plan``, or None when the
        backend binds in-process (then the caller binds and execs)."""
        return None


# ----------------------------------------------------------------------------- choosing a backend
log = getLogger(__name__)

BACKEND_NAMES = ("libnuma", "syscall", "numactl", "none")
_lock = _thread.allocate_lock()   # _thread: threading stays off the import path of numabind run
_instances: dict[str, Backend] = {}
_failures: dict[str, str] = {}
_chosen: dict[str | None, tuple[Backend, str]] = {}   # get_backend's answers, until reset_backends


def _construct(name: str) -> Backend:
    if name == "libnuma":
        from ._native import LibnumaBackend

        return LibnumaBackend()
    if name == "syscall":
        from ._native import SyscallBackend

        return SyscallBackend()
    if name == "numactl":
        from .numactl import NumactlBackend

        return NumactlBackend()
    from .numactl import AffinityOnlyBackend

    return AffinityOnlyBackend()


def _load(name: str) -> Backend | None:
    """The backend ``name``, or None with the reason stored in _failures."""
    with _lock:
        if name in _instances:
            return _instances[name]
        if name in _failures:
            return None
        try:
            be = _construct(name)
        except (ImportError, OSError, NumabindError) as e:
            _failures[name] = f"{type(e).__name__}: {e}"
            log.debug("backend %s unavailable: %s", name, _failures[name])
            return None
        _instances[name] = be
        log.debug("backend %s available", name)
        return be


def get_backend(name: str | None = None) -> tuple[Backend, str]:
    """(backend, why it was chosen). ``name`` or ``$NUMABIND_BACKEND`` forces one."""
    forced = name or environ_get("NUMABIND_BACKEND") or None
    key = forced if name is None else "=" + name
    hit = _chosen.get(key)
    if hit is not None:
        return hit
    out = _choose(name, forced)
    _chosen[key] = out
    return out


def _choose(name: str | None, forced: str | None) -> tuple[Backend, str]:
    if forced:
        if forced not in BACKEND_NAMES:
            raise NumabindError(
                f"NUMABIND_BACKEND={forced!r} is not a backend; choose one of {', '.join(BACKEND_NAMES)}"
            )
        be = _load(forced)
        if be is None:
            raise NumabindError(f"backend {forced!r} was forced but cannot be used: {_failures[forced]}")
        how = "argument" if name else "NUMABIND_BACKEND"
        return be, f"{forced} forced by {how}"
    skipped: list[str] = []
    said: dict[str, str] = {}  # failure text -> the first backend that failed so (each cause said once)
    for cand in BACKEND_NAMES:
        be = _load(cand)
        if be is not None:
            why = f"{cand}: first usable in the order {' > '.join(BACKEND_NAMES)}"
            if skipped:
                why += " (" + "; ".join(skipped) + ")"
            return be, why
        failure = _failures[cand]
        skipped.append(f"{cand} unavailable: " + (f"same as {said[failure]}" if failure in said else failure))
        said.setdefault(failure, cand)
    raise NumabindError("no backend is usable: " + "; ".join(skipped))  # "none" always loads


def _native_problem() -> str | None:
    """One line saying that the native core is missing and how to get it; None when it loads."""
    from ._native import load_native

    try:
        load_native()
    except ImportError as e:
        return str(e)
    return None


def backend_info() -> "dict[str, Any]":
    """Which backends can be used here and why the others cannot.

    ``native`` is None when the compiled core loads, else one line saying it is missing and how to get it.
    """
    available = {n: _load(n) is not None for n in BACKEND_NAMES}
    try:
        be, why = get_backend()
        selected, reason = be.name, why
    except NumabindError as e:
        selected, reason = None, str(e)
    return {
        "selected": selected,
        "reason": reason,
        "available": available,
        "unavailable": {n: _failures[n] for n in BACKEND_NAMES if not available[n]},
        "native": _native_problem(),
    }


def lock_for_fork() -> None:
    """Hold the registry lock across a fork (an ``os.register_at_fork`` *before* hook),
    so a child never inherits it locked by a thread that does not exist there."""
    _lock.acquire()


def unlock_after_fork() -> None:
    """Release what :func:`lock_for_fork` took, in the parent and in the child."""
    _lock.release()


def reset_backends() -> None:
    """Forget loaded backends and failures (tests that change the environment)."""
    with _lock:
        _instances.clear()
        _failures.clear()
        _chosen.clear()
