"""The backends: the interface every backend provides, the kernel constants they share, the two
backends over the compiled core, and the choice of one, in the spirit of pyzmq's backend chooser.

A backend is the only code that talks to the kernel, and it only makes calls: reading the running
process (limits, thread list, numa_maps, mask sizes) is :mod:`numabind.live`. All backends offer
the same small surface (:class:`Backend`); :mod:`numabind.bind` never knows which one it got.

The ``libnuma`` and ``syscall`` backends differ only in which C functions of :mod:`numabind._native`
they call: ``nb_sys_*`` (raw ``syscall()``: :class:`SyscallBackend`) or ``nb_numa_*`` (the same
calls inside libnuma.so.1, opened at run time with dlopen(): :class:`LibnumaBackend`). Masks are
sized from the kernel's possible CPUs and nodes (:mod:`numabind.live`) and kept per id set, so
binding the same plan again allocates nothing. The ``numactl`` and ``none`` backends are in
:mod:`numabind.backends.numactl`.

Default order: ``libnuma`` (dlopen'd libnuma.so.1) → ``syscall`` (raw system
calls) → ``numactl`` (birth-time binding through the numactl binary) →
``none`` (CPU affinity only). ``NUMABIND_BACKEND`` forces one by name; a forced
backend that cannot load is an error, never a silent substitute. All of this is one module, so a
bind through the compiled core loads one backend module.
"""

import _thread
import os
import sys
from abc import ABC, abstractmethod
TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)

from .. import live
from .._base import EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, Value, environ_get, getLogger
from .._fs import WEIGHTS_AUTO_NAMES, WEIGHTS_DIR   # the sysfs paths belong to the readers' floor
from ..cpulist import format_cpulist, ids_to_words, words_to_ids
from ..errors import BindError, NumabindError, PlanError
from ..plan import format_weights

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping, Sequence
    from typing import Any
    from ..plan import Plan
    from ..types import BackendName, ThreadMode

__all__ = [
    "AffinityWalk",
    "Backend",
    "backend_info",
    "BACKEND_NAMES",
    "BindCall",
    "backend_for",
    "get_backend",
    "LIBNUMA_SONAME",
    "LibnumaBackend",
    "load_native",
    "lock_for_fork",
    "MemPolicyState",
    "MemPolicySwap",
    "MPOL_MODE_FLAGS",
    "MPOL_MODES",
    "MPOL_NAMES",
    "NativeBackend",
    "refused",
    "reset_backends",
    "SyscallBackend",
    "unlock_after_fork",
    "SETTLE_ROUNDS",
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

# Per-thread outcome of Backend.affinity_many: WALK_BOUND, WALK_LEFT_ALONE, WALK_EXITED, WALK_UNCHANGED,
# WALK_NOT_TRIED, WALK_DIFFERS (csrc/numabind.h's enum nb_thread_status); a negative value is -errno of a
# refused sched_setaffinity. Flags of Backend.affinity_many: WALK_MATCHING, WALK_STOP_ON_ERROR, WALK_CHECK_FIRST
# (enum nb_affinity_flags); of Backend.apply_all only: WALK_ONLY_CALLER (the calling thread alone, no thread
# list). Read from the compiled core, never written twice; without one, no C code reads them and the Python
# walk numbers them itself.
_WALK_NAMES = ("BOUND", "LEFT_ALONE", "EXITED", "UNCHANGED", "NOT_TRIED", "DIFFERS", "MATCHING", "STOP_ON_ERROR",
               "CHECK_FIRST", "ONLY_CALLER")


def _walk_constants() -> "tuple[int, ...]":
    try:
        lib = live.native_lib()
    except (ImportError, NumabindError):   # no usable compiled core (missing, or another version's)
        return (0, 1, 2, 3, 4, 5, 1, 2, 4, 8)   # Python's own numbering: no C code reads them then
    return tuple(getattr(lib, "NB_" + n) for n in _WALK_NAMES)


(WALK_BOUND, WALK_LEFT_ALONE, WALK_EXITED, WALK_UNCHANGED, WALK_NOT_TRIED, WALK_DIFFERS, WALK_MATCHING,
 WALK_STOP_ON_ERROR, WALK_CHECK_FIRST, WALK_ONLY_CALLER) = _walk_constants()
#: How many times a bind lists the threads again after its walk, binding the threads that started meanwhile,
#: before a list that still shows new threads is a failure (threads keep starting threads faster than binding).
SETTLE_ROUNDS = 8


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
    explaining): the backend's verdict, made in Python from the facts the call returned. ``walk`` is the affinity walk, or None when it did not run (the memory policy was
    refused, or under ``need_old`` the old one was unreadable); ``processed`` its thread count, of which
    ``exited`` (other than the caller) exited during the walk. :meth:`swap` is the memory-policy swap
    (None when no policy was asked for); :meth:`now` the policy read in the same call when none was
    asked for (or why it could not be read). A native backend builds the walk and decodes the policies
    only when asked: a clean bind never needs them.
    """

    __slots__ = ()

    @property
    def clean(self) -> bool:
        raise NotImplementedError

    @property
    def processed(self) -> int:
        raise NotImplementedError

    @property
    def released(self) -> bool:
        """True when :meth:`Backend.apply_all` let the bind lock go at once: the call bound the caller alone
        exactly as asked, and ``keep_lock`` was not given."""
        raise NotImplementedError

    @property
    def exited(self) -> int:
        raise NotImplementedError

    @property
    def walk(self) -> AffinityWalk | None:
        raise NotImplementedError

    def settle(self) -> "list[int] | BindError | None":
        """How listing the threads again after the walk ended (the call binds the threads started meanwhile,
        appended to the walk, up to ``SETTLE_ROUNDS`` more listings): ``[]`` settled (or nothing to look for),
        a list of the thread ids that still appeared at the last listing, the BindError of a listing that
        failed, or None when the call did not look (the caller lists again itself)."""
        return None

    def swap(self) -> MemPolicySwap | None:
        raise NotImplementedError

    def now(self) -> tuple[str, frozenset[int]] | BindError | None:
        raise NotImplementedError


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
        import errno   # off the import path of a bind: errno alone costs about 1 % of numabind run

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
                  need_old: bool, pending: "list[Any] | None" = None, keep_lock: bool = False) -> BindCall | None:
        """One call for a whole bind: list the threads, :meth:`swap_mempolicy` (``policy`` None: only
        read it), then :meth:`affinity_many` over them (``flags`` with ``WALK_ONLY_CALLER``: the caller
        only). It stops before the walk when the policy is refused, or under ``need_old`` when the old one
        is unreadable; the caller goes on from there. None: this backend has no such call (the caller
        does the steps one by one); native backends make it one C call.

        The call takes the process's bind lock (one bind at a time, see :meth:`hold`) and returns holding
        it, unless it bound the caller alone exactly as asked (``clean``, one thread: nothing is left to explain
        or undo) and ``keep_lock`` is False: then it lets the lock go at once (``released``); ``pending`` (a one-item list of the caller's) receives, just before the native call, what
        the call will have done: an exception that arrives before it returns (a signal handler's, raised the
        moment the native call returns) can still undo it (:meth:`pending_call`) and release the lock
        (:meth:`end_call`).
        """
        return None

    def pending_call(self, pending: "list[Any]") -> BindCall | None:
        """The :class:`BindCall` that :meth:`apply_all` recorded in ``pending``, even one that never returned,
        or None when it changed nothing."""
        return None

    def hold(self, pending: "list[Any]") -> bool:
        """Take the process's bind lock (one bind, and its rollback, at a time: a rollback must never undo
        another thread's bind), recorded in ``pending`` and released by :meth:`end_call`: for a bind that does
        not go through :meth:`apply_all`, or again after an :meth:`apply_all` that released it. The native
        core's lock when it is installed (every backend shares it, and a forked child starts with it free),
        else a lock of this module. True unless another bind took the lock since the call in ``pending``
        released it (the CPUs that call set may have been set again since: they are not its to undo)."""
        try:
            native = load_native()
        except ImportError:
            token = pending[0] = [0]
            _serial.acquire()
            token[0] = 1
            return True
        if pending[0] is not None and not isinstance(pending[0], list):
            return native.lib.nb_bind_hold(pending[0]._ints) == 1    # type: ignore[no-any-return]
        call = pending[0] = _NativeBindCall(None, 1, native.ffi)   # a call that changed nothing (no thread id)
        native.lib.nb_bind_hold(call._ints)
        return True

    def end_call(self, pending: "list[Any]") -> None:
        """Release the bind lock that :meth:`apply_all` or :meth:`hold` recorded in ``pending`` holds (once)."""
        raw = pending[0]
        if isinstance(raw, list):
            if raw[0]:
                raw[0] = 0
                _serial.release()
        elif raw is not None:
            load_native().lib.nb_bind_release(raw._ints)

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
        import errno

        raise BindError(errno.ENOTSUP, "get_mempolicy",
                        f"the {self.name} backend cannot save the calling thread's memory policy")

    def restore_mempolicy(self, state: MemPolicyState) -> None:
        """Put back what :meth:`save_mempolicy` returned, flags and node mask included. Raises BindError."""
        import errno

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
        import errno

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


# ----------------------------------------------------------------------------- the compiled core's backends
def refused(err: int, syscall: str, detail: str) -> BindError:
    """The :class:`BindError` of a call the kernel refused: its message ends with the likely cause and the fix
    (:func:`numabind.errors.refusal_fix`); for a ``sched_setaffinity`` refused with EINVAL it names the CPUs
    of the calling thread's cpuset (read only then)."""
    import errno   # only when a call was refused: off the import path of a bind

    cpuset = None
    if err == errno.EINVAL and syscall == "sched_setaffinity":
        try:
            cpuset = format_cpulist(live.limits().allowed_cpus) or None
        except (OSError, ValueError, NumabindError):   # unreadable: the fix says "the cpuset" without its CPUs
            cpuset = None
    return BindError(err, syscall, detail, cpuset)


def load_native() -> "Any":
    """The compiled module, or raise ImportError with the reason: one short line, with how to get it; a module
    compiled for another numabind version is a NumabindError (:func:`numabind.live.check_native_version`)."""
    try:
        from .. import _native  # built by build_ffi.py
    except ImportError as e:
        missing = isinstance(e, ModuleNotFoundError) or "cannot import name '_native'" in str(e)
        why = "not installed" if missing else " ".join(str(e).split())[:160]
        raise ImportError(
            f"native core numabind._native is not available ({why}): install gcc and python3-dev, "
            f"then reinstall numabind"
        ) from e
    if _native not in _checked:
        live.check_native_version(_native)
        _read_slots(_native)
        _checked.append(_native)
    return _native


_checked: "list[Any]" = []   # the compiled module once its version was checked


# Slots of nb_*_bind's int header (csrc/numabind.h's enum nb_bind_slot), its facts and flags: read from the core
# when it loads.
_NOW_MODE = _ERRS = _FACTS = _PROCESSED = _EXITED = _LINKS = _HELD = _SETTLED = _UNSEEN = _HEADER = 0
_NO_ROOM = _SETTLE_SHIFT = _NEED_OLD = _COUNT_LINKS = _COUNTED = _WALKED = _ROUNDS = 0
_POLICY_FACTS = _CPU_FACTS = _NOW_READ = 0   # the facts of a policy, and of CPUs, set and read back as asked
_ffi: "Any" = None
#: NB_COUNT_LINKS once this process saw the /proc/self/task directory's link count agree with a listing of one
#: thread (0 until then): procfs counts a task directory's links as 2 + its threads, and a bind of a lone thread
#: then lists nothing. Trusted once it agreed (the decision is Python's; the core only reads the count).
_count_links = 0


def _read_slots(native: "Any") -> None:
    global _NOW_MODE, _ERRS, _FACTS, _PROCESSED, _EXITED, _LINKS, _HELD, _SETTLED, _UNSEEN, _HEADER, _NO_ROOM
    global _SETTLE_SHIFT, _NEED_OLD, _COUNT_LINKS, _COUNTED, _WALKED, _ROUNDS, _POLICY_FACTS, _CPU_FACTS, _NOW_READ
    global _ffi
    lib = native.lib
    (_NOW_MODE, _ERRS, _FACTS, _PROCESSED, _EXITED, _LINKS, _HELD, _SETTLED, _UNSEEN, _HEADER, _NO_ROOM,
     _SETTLE_SHIFT, _NEED_OLD, _COUNT_LINKS, _COUNTED, _WALKED, _NOW_READ) = (
        lib.NB_BIND_NOW_MODE, lib.NB_BIND_ERRS, lib.NB_BIND_FACTS, lib.NB_BIND_PROCESSED, lib.NB_BIND_EXITED,
        lib.NB_BIND_LINKS, lib.NB_BIND_HELD, lib.NB_BIND_SETTLED, lib.NB_BIND_UNSEEN, lib.NB_BIND_HEADER,
        lib.NB_NO_ROOM, lib.NB_SETTLE_SHIFT, lib.NB_NEED_OLD, lib.NB_COUNT_LINKS, lib.NB_COUNTED, lib.NB_WALKED,
        lib.NB_NOW_READ)
    _ROUNDS = SETTLE_ROUNDS << _SETTLE_SHIFT
    _POLICY_FACTS = lib.NB_OLD_READ | lib.NB_POLICY_SET | lib.NB_NOW_READ | lib.NB_MODE_AS_SET | lib.NB_NODES_AS_SET
    _CPU_FACTS = lib.NB_CALLER_SET | lib.NB_CALLER_AS_SET
    _ffi = native.ffi


def _trust_links() -> None:
    global _count_links
    _count_links = _COUNT_LINKS


def _bind_masks_at(cap: int) -> int:
    """Where nb_*_bind's masks start in its buffer, in ints: the first even index after the header,
    ``cap`` thread ids and ``cap`` statuses."""
    return (_HEADER + 2 * cap + 1) & ~1


def _swap_of(ints: "Any", at: int, masks: "Any", words: int, policy: str, nodes: frozenset[int]) -> MemPolicySwap:
    """The MemPolicySwap of a swap_mempolicy's slots: old mode, mode now, the three errors from ``ints[at]``;
    the old and the current node masks (``words`` each) at the start of ``masks``."""
    out = MemPolicySwap()
    err_old, err_set, err_now = ints[at + 2], ints[at + 3], ints[at + 4]
    if err_old < 0:
        out.old_error = BindError(-err_old, "get_mempolicy", "calling thread")
    else:
        out.old = MemPolicyState(ints[at], decode(masks[0:words]))
    if err_set < 0:
        out.set_error = BindError(-err_set, "set_mempolicy", f"{policy} nodes {sorted(nodes)}")
    elif err_set == 0:
        if err_now < 0:
            out.now_error = BindError(-err_now, "get_mempolicy", "calling thread")
        else:
            out.now = policy_of(ints[at + 1], decode(masks[words:2 * words]))
    return out


class _Request:
    """What nb_*_bind sets for one (policy, nodes, CPUs), kept per plan: its ``struct nb_bind_request`` and the
    masks it points to, the buffer's size in ints (``size`` + ``per_thread`` * thread capacity), the facts of a
    bind done exactly as asked (``want``; ``want1`` for a lone thread, -1 when that needs more than the facts),
    the statuses other threads may end with in such a bind, and the last call, whose buffer the next bind uses
    again when nothing else holds it."""

    __slots__ = ("struct", "keep", "policy", "nodes", "cpus", "nw", "cw", "size", "per_thread", "want", "want1",
                 "others", "spare")
    struct: "Any"
    keep: "tuple[Any, Any]"
    policy: str | None
    nodes: frozenset[int]
    cpus: frozenset[int] | None
    nw: int
    cw: int
    size: int
    per_thread: int
    want: int
    want1: int
    others: frozenset[int]
    spare: "_NativeBindCall | None"


def _clean(ints: "Any", n: int, cap: int, req: _Request) -> bool:
    """The verdict on a call's facts (``n`` threads): every step succeeded and read back exactly what was asked,
    every other thread was bound as the caller (or exited), and listing again found no thread it missed. Only
    then is there nothing to explain or undo."""
    if (ints[_FACTS] | _COUNTED) != req.want:
        return False
    if req.cpus is None and ints[_HEADER + cap] != WALK_UNCHANGED:
        return False
    if n == 1:
        return True
    if ints[_PROCESSED] != n or ints[_SETTLED] != 1:
        return False
    start = _HEADER + cap + 1
    return set(ints[start:start + n - 1]) <= req.others


class _NativeBindCall(BindCall):
    """A BindCall over nb_*_bind's one buffer (``_ints``, ``_cap`` threads, for ``_req``): the walk and the memory
    policies are built only when asked for. ``clean`` and ``released`` are set by :meth:`NativeBackend.apply_all`.
    A walk built from it holds it (its arrays point into the buffer), so that the buffer is used again only once
    nothing refers to the call."""

    __slots__ = ("_ints", "_cap", "_req", "clean", "released")
    clean: bool
    released: bool

    def __init__(self, req: _Request | None, cap: int, ffi: "Any") -> None:
        self._ints = ffi.new("int[]", _HEADER if req is None else req.size + cap * req.per_thread)
        self._cap, self._req = cap, req
        self.clean = self.released = False

    @property
    def processed(self) -> int:
        return self._ints[_PROCESSED]   # type: ignore[no-any-return]

    @property
    def exited(self) -> int:
        return self._ints[_EXITED]   # type: ignore[no-any-return]

    def _masks(self) -> "Any":
        return _ffi.cast("unsigned long *", self._ints + _bind_masks_at(self._cap))

    @property
    def walk(self) -> AffinityWalk | None:
        ints, cap, req = self._ints, self._cap, self._req
        if req is None or not ints[_FACTS] & _WALKED:
            return None
        masks = self._masks() + 2 * req.nw
        return AffinityWalk(ints + _HEADER, ints + _HEADER + cap, ints[_PROCESSED], masks, masks + cap * req.cw,
                            req.cw, (self,))

    def settle(self) -> "list[int] | BindError | None":
        ints = self._ints
        state = ints[_SETTLED]
        if state == 1 or not ints[_FACTS] & _WALKED:
            return []
        if state == 0:
            start = _HEADER + ints[_PROCESSED]
            return list(ints[start:start + ints[_UNSEEN]])
        if state == _NO_ROOM:
            return None
        return live.unlisted(state, ints[0])

    def swap(self) -> MemPolicySwap | None:
        req = self._req
        if req is None or req.policy is None:
            return None
        return _swap_of(self._ints, 1, self._masks(), req.nw, req.policy, req.nodes)

    def now(self) -> tuple[str, frozenset[int]] | BindError | None:
        ints, req = self._ints, self._req
        if req is None or req.policy is not None:
            return None
        if ints[_ERRS + 2] < 0:
            return BindError(-ints[_ERRS + 2], "get_mempolicy", "calling thread")
        return policy_of(ints[_NOW_MODE], decode(self._masks()[req.nw:2 * req.nw]))


_refs = sys.getrefcount


def _references_alone() -> int:
    """What ``_refs`` says of the call a request keeps when nothing else refers to it, read as apply_all reads it
    (the same statements: interpreters differ in the references an argument takes)."""
    req = object.__new__(_Request)
    req.spare = object.__new__(_NativeBindCall)
    call = req.spare
    return _refs(call)


#: Interpreters that count every reference (CPython up to 3.13) say 3; one that borrows some (3.14) may say less,
#: and then a buffer is never used twice (-1): a call held elsewhere must never look alone.
_ALONE = 3 if _references_alone() == 3 else -1


def _fit(bits: int, ids: frozenset[int]) -> int:
    """``bits``, widened to hold every id (the kernel ignores bits past its own count)."""
    top = max(ids) + 1 if ids else 0
    return bits if top <= bits else (top + 63) // 64 * 64


class NativeBackend(Backend):
    """Calls ``<prefix>set_mempolicy`` and friends from numabind._native."""

    prefix = ""
    _MASKS_KEPT = 64

    def __init__(self) -> None:
        native = load_native()
        self.ffi = native.ffi
        self.lib = native.lib
        self._fn = {n: getattr(self.lib, self.prefix + n) for n in (
            "set_mempolicy", "get_mempolicy", "migrate_pages", "affinity_many", "swap_mempolicy", "bind")}
        self._bind = self._fn["bind"]
        self._release = self.lib.nb_bind_release
        self._cpu_masks: dict[frozenset[int], tuple[Any, int]] = {}
        self._node_masks: dict[frozenset[int], tuple[Any, int]] = {}
        self._cap = 16       # threads apply_all makes room for: twice the last count (it lists them again), and more
        self._requests: dict[tuple[str | None, frozenset[int], frozenset[int] | None], _Request] = {}

    # -- helpers ----------------------------------------------------------
    def _mask(self, cache: "dict[frozenset[int], tuple[Any, int]]", ids: frozenset[int],
              bits: int) -> "tuple[Any, int]":
        """A C array holding ``ids`` (kept per id set; callers never write into it) and its size in bits."""
        hit = cache.get(ids)
        if hit is None:
            bits = _fit(bits, ids)
            hit = (self.ffi.new("unsigned long[]", ids_to_words(ids, bits)), bits)
            if len(cache) >= self._MASKS_KEPT:
                cache.clear()
            cache[ids] = hit
        return hit

    def _node_mask(self, nodes: frozenset[int]) -> "tuple[Any, int]":
        return self._mask(self._node_masks, frozenset(nodes), live.node_mask_bits())

    def _check(self, rc: int, syscall: str, detail: str) -> int:
        if rc < 0:
            raise refused(-rc, syscall, detail)
        return rc

    # -- affinity ---------------------------------------------------------
    def _setaff(self, tid: int, bits: int, mask: "Any") -> int:
        return self.lib.nb_sys_sched_setaffinity(tid, bits // 8, mask)  # type: ignore[no-any-return]

    def _getaff(self, tid: int, bits: int, mask: "Any") -> int:
        return self.lib.nb_sys_sched_getaffinity(tid, bits // 8, mask)  # type: ignore[no-any-return]

    def set_affinity(self, tid: int, cpus: frozenset[int]) -> None:
        mask, bits = self._mask(self._cpu_masks, frozenset(cpus), live.cpu_mask_bits())
        self._check(self._setaff(tid, bits, mask), "sched_setaffinity", f"thread {tid}")

    def get_affinity(self, tid: int) -> frozenset[int]:
        bits = live.cpu_mask_bits()
        mask = self.ffi.new("unsigned long[]", bits // 64)
        self._check(self._getaff(tid, bits, mask), "sched_getaffinity", f"thread {tid}")
        return words_to_ids(mask)

    def affinity_many(self, tids: "Sequence[int]", cpus: frozenset[int] | None, flags: int = 0) -> AffinityWalk:
        n = len(tids)
        if cpus is None:
            mask, bits = self.ffi.NULL, live.cpu_mask_bits()
        else:
            mask, bits = self._mask(self._cpu_masks, cpus, live.cpu_mask_bits())
        words = bits // 64
        new = self.ffi.new
        ints = new("int[]", 2 * n)          # the tids, then the statuses
        ints[0:n] = tids
        masks = new("unsigned long[]", 2 * n * words)    # before, then after
        status, after = ints + n, masks + n * words
        done = self._fn["affinity_many"](ints, n, mask, words, flags, masks, after, status)
        if done < 0:
            raise refused(-done, "sched_setaffinity", f"{n} threads")
        return AffinityWalk(tids, status, done, masks, after, words, (ints, masks))

    # -- memory policy ----------------------------------------------------
    def set_mempolicy(self, policy: str, nodes: frozenset[int]) -> None:
        mode = MPOL_MODES[policy]
        if nodes:
            mask, bits = self._node_mask(nodes)
            rc = self._fn["set_mempolicy"](mode, mask, bits + 1)
        else:
            rc = self._fn["set_mempolicy"](mode, self.ffi.NULL, 0)
        self._check(rc, "set_mempolicy", f"{policy} nodes {sorted(nodes)}")

    def save_mempolicy(self) -> MemPolicyState:
        mode = self.ffi.new("int *")
        bits = live.node_mask_bits()
        mask = self.ffi.new("unsigned long[]", bits // 64)
        self._check(self._fn["get_mempolicy"](mode, mask, bits + 1, self.ffi.NULL, 0),
                    "get_mempolicy", "calling thread")
        return MemPolicyState(mode[0], words_to_ids(mask))

    def restore_mempolicy(self, state: MemPolicyState) -> None:
        if state.nodes:
            mask, bits = self._node_mask(state.nodes)
            rc = self._fn["set_mempolicy"](state.mode, mask, bits + 1)
        else:
            rc = self._fn["set_mempolicy"](state.mode, self.ffi.NULL, 0)
        self._check(rc, "set_mempolicy", f"restoring {state.describe()} (mode word {state.mode:#x})")

    def get_mempolicy(self) -> tuple[str, frozenset[int]]:
        state = self.save_mempolicy()
        return policy_of(state.mode, state.nodes)

    def swap_mempolicy(self, policy: str, nodes: frozenset[int], need_old: bool = False) -> MemPolicySwap:
        if nodes:
            mask, bits = self._node_mask(nodes)
        else:
            mask, bits = self.ffi.NULL, live.node_mask_bits()
        words = bits // 64
        ints = self.ffi.new("int[]", 5)                     # old mode, mode now, the three steps' errors
        masks = self.ffi.new("unsigned long[]", 2 * words)  # old nodes, nodes now
        self._fn["swap_mempolicy"](MPOL_MODES[policy], mask, bits + 1, need_old, ints, masks, ints + 1,
                                   masks + words, ints + 2)
        return _swap_of(ints, 0, masks, words, policy, nodes)

    def _request(self, policy: str | None, nodes: frozenset[int], cpus: frozenset[int] | None) -> _Request:
        """nb_*_bind's request for a policy, nodes and CPUs, kept per (policy, nodes, CPUs): a plan is bound with
        the same ones every time."""
        key = (policy, nodes, cpus)
        req = self._requests.get(key)
        if req is None:
            ffi = self.ffi
            if policy is not None and nodes:
                nmask, nbits = self._node_mask(nodes)
            else:
                nmask, nbits = ffi.NULL, live.node_mask_bits()
            if cpus is None:
                cmask, cbits = ffi.NULL, live.cpu_mask_bits()
            else:
                cmask, cbits = self._mask(self._cpu_masks, cpus, live.cpu_mask_bits())
            nw, cw = nbits // 64, cbits // 64   # the masks: old and current nodes, then CPUs before and after
            req = object.__new__(_Request)
            req.struct = ffi.new("struct nb_bind_request *", {
                "mode": -1 if policy is None else MPOL_MODES[policy], "nodemask": nmask, "maxnode": nbits + 1,
                "node_words": nw, "cpumask": cmask, "words": cw})
            req.keep = (nmask, cmask)            # the struct points into them
            req.policy, req.nodes, req.cpus, req.nw, req.cw = policy, nodes, cpus, nw, cw
            req.size = _bind_masks_at(0) + 4 * nw
            req.per_thread = _bind_masks_at(1) - _bind_masks_at(0) + 4 * cw
            req.want = (_NOW_READ if policy is None else _POLICY_FACTS) | _WALKED | _COUNTED | \
                (0 if cpus is None else _CPU_FACTS)
            req.want1 = -1 if cpus is None else req.want
            req.others = frozenset({WALK_UNCHANGED if cpus is None else WALK_BOUND, WALK_EXITED})
            req.spare = None
            if len(self._requests) >= self._MASKS_KEPT:
                self._requests.clear()
            self._requests[key] = req
        return req

    def apply_all(self, policy: str | None, nodes: frozenset[int], cpus: frozenset[int] | None, flags: int,
                  need_old: bool, pending: "list[Any] | None" = None, keep_lock: bool = False) -> BindCall:
        req = self._requests.get((policy, nodes, cpus)) or self._request(policy, nodes, cpus)
        only_caller = flags & WALK_ONLY_CALLER
        cap = 1 if only_caller else self._cap
        flags |= _ROUNDS | _count_links
        if need_old:
            flags |= _NEED_OLD
        while True:   # one buffer: header, tids, statuses, then the old and current nodes, CPUs before and after
            call = req.spare    # the last call's buffer again, when nothing refers to it any more (a report, a walk)
            if call is None or call._cap != cap or _refs(call) != _ALONE:
                call = req.spare = _NativeBindCall(req, cap, self.ffi)
            ints = call._ints
            ints[0] = 0           # no thread id yet: nothing changed, should the call never run
            if pending is not None:   # recorded before the call: it can be undone even if it never returns here
                pending[0] = call
            n = self._bind(req.struct, flags, cap, ints)
            if 0 <= n <= cap:
                break
            if n < 0:
                raise live.unlisted(n, live.gettid())
            cap = 2 * n + 16     # room to list the threads again after the walk
        if not only_caller:
            self._cap = 2 * n + 16
            if not flags & _COUNT_LINKS and n == 1 and ints[_LINKS] == 3:
                _trust_links()   # the link count agreed with a listing of the caller alone
        # the verdict, on the facts the call returned
        clean = call.clean = (n == 1 and (ints[_FACTS] | _COUNTED) == req.want1) or _clean(ints, n, cap, req)
        if clean and n == 1 and not keep_lock:   # the caller alone, all done exactly: nothing to explain or undo
            self._release(ints)
            call.released = True
        else:
            call.released = False
        return call

    def pending_call(self, pending: "list[Any]") -> BindCall | None:
        call = pending[0]
        if call is None or not call._ints[0]:   # NB_BIND_TID unset: stopped before changing anything
            return None
        return call    # type: ignore[no-any-return]

    def end_call(self, pending: "list[Any]") -> None:
        call = pending[0]
        if call is not None and call._ints[_HELD]:
            self._release(call._ints)

    def migrate_pages(self, pid: int, from_nodes: frozenset[int], to_nodes: frozenset[int]) -> int:
        old, bits = self._node_mask(from_nodes)
        new, bits2 = self._node_mask(to_nodes)
        if bits2 != bits:   # one size for both masks
            bits = max(bits, bits2)
            old = self.ffi.new("unsigned long[]", ids_to_words(from_nodes, bits))
            new = self.ffi.new("unsigned long[]", ids_to_words(to_nodes, bits))
        rc = self._fn["migrate_pages"](pid, bits + 1, old, new)
        return self._check(rc, "migrate_pages", f"pid {pid} from nodes {sorted(from_nodes)} to {sorted(to_nodes)}")


class SyscallBackend(NativeBackend):
    """The ``syscall`` backend: raw system calls through numabind._native; no libnuma."""

    name = "syscall"
    prefix = "nb_sys_"


#: The soname opened; ``_NUMABIND_LIBNUMA`` overrides it (tests use it to simulate a machine without
#: libnuma, users to pick one libnuma): only libnuma's own names, or an absolute path no other user can
#: write (:func:`_libnuma_to_load`), since the environment must not choose code to load.
LIBNUMA_SONAME = "libnuma.so.1"


def _libnuma_to_load(name: str) -> tuple[str | None, str]:
    """What ``_NUMABIND_LIBNUMA=name`` makes numabind load: (the name or path for dlopen, "") or (None,
    why it is refused). Accepted are libnuma's own names (``libnuma.so`` with optional ``.<digits>``
    parts, found by the dynamic loader) and an absolute path whose real path (symlinks resolved; that
    path is the one loaded), like every directory above it, belongs to root or to this user and is not
    writable by its group or others, so that no other user can put a library there; a file that does
    not exist yet is not refused here (loading it fails)."""
    stem, dot_so, version = name.partition(".so")
    if stem == "libnuma" and dot_so and (version == "" or (
            version.startswith(".") and all(p.isascii() and p.isdigit() for p in version[1:].split(".")))):
        return name, ""
    if not name.startswith("/") or "\0" in name or any(p in (".", "..") for p in name.split("/")):
        return None, "is neither one of libnuma's names (like 'libnuma.so.1') nor a plain absolute path"
    import stat as _stat   # only when the variable names a path: off the import path of numabind run

    uid = os.geteuid()
    real = path = os.path.realpath(name)
    while True:
        try:
            st = os.lstat(path)
        except OSError:
            st = None            # missing: only whoever may write the directory above can create it
        if st is not None:
            if path == real and not _stat.S_ISREG(st.st_mode):
                return None, f"names {real}, which is not a regular file"
            if st.st_uid not in (0, uid):
                return None, f"names {real}, and {path} belongs to uid {st.st_uid}, neither root nor this user"
            if st.st_mode & 0o022:
                return None, f"names {real}, and {path} is writable by its group or others"
        if path == "/":
            return real, ""
        path = os.path.dirname(path)


class LibnumaBackend(NativeBackend):
    name = "libnuma"
    prefix = "nb_numa_"

    def __init__(self) -> None:
        super().__init__()
        soname = os.environ.get("_NUMABIND_LIBNUMA", LIBNUMA_SONAME)
        target, refusal = _libnuma_to_load(soname)
        if target is None:
            raise NumabindError(
                f"_NUMABIND_LIBNUMA={soname[:100]!r} {refusal[:300]}; refusing to load it (unset the variable, "
                f"or name libnuma or an absolute path that only root or you can write)"
            )
        soname = target
        err = self.ffi.new("char[]", 512)
        if self.lib.nb_numa_load(soname.encode(), err, 512) != 0:
            raise NumabindError(f"cannot load {soname}: {self.ffi.string(err).decode(errors='replace')}")
        if self.lib.nb_numa_available() < 0:
            raise NumabindError(f"{soname} loaded, but numa_available() says this kernel has no NUMA support")

    def _setaff(self, tid: int, bits: int, mask: "Any") -> int:
        return self.lib.nb_numa_sched_setaffinity(tid, bits, mask)  # type: ignore[no-any-return]

    def _getaff(self, tid: int, bits: int, mask: "Any") -> int:
        return self.lib.nb_numa_sched_getaffinity(tid, bits, mask)  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------- choosing a backend
log = getLogger(__name__)

BACKEND_NAMES: "tuple[BackendName, ...]" = ("libnuma", "syscall", "numactl", "none")
_lock = _thread.allocate_lock()   # _thread: threading stays off the import path of numabind run
#: The bind lock where the native core (which has its own, shared by every backend) is not installed.
_serial = _thread.RLock()


def _fresh_serial() -> None:
    global _serial
    _serial = _thread.RLock()   # a forked child: the thread that held it does not exist there


os.register_at_fork(after_in_child=_fresh_serial)
_instances: dict[str, Backend] = {}
_failures: dict[str, str] = {}
_chosen: dict[str | None, tuple[Backend, str]] = {}   # get_backend's answers, until reset_backends


def _construct(name: str) -> Backend:
    if name == "libnuma":
        return LibnumaBackend()
    if name == "syscall":
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
    return backend_for(name, None if name else environ_get("NUMABIND_BACKEND") or None)


def backend_for(name: str | None, from_env: str | None) -> tuple[Backend, str]:
    """:func:`get_backend` for a caller that read ``$NUMABIND_BACKEND`` already (``from_env``: its value,
    None when unset or empty; not used when ``name`` is given)."""
    key = from_env if not name else "=" + name
    hit = _chosen.get(key)
    if hit is not None:
        return hit
    out = _choose(name or None, name or from_env)
    _chosen[key] = out
    return out


def check_backend_name(value: str, source: str = "NUMABIND_BACKEND") -> None:
    """NumabindError naming ``value`` (of ``source``, default ``$NUMABIND_BACKEND``) and the backends when it is
    none of them: the one message for it (the CLI gives it as a usage error before binding, :func:`get_backend`
    when it binds)."""
    if value not in BACKEND_NAMES:
        unset = " (or unset it: the first usable)" if source == "NUMABIND_BACKEND" else ""
        raise NumabindError(f"{source}={value!r} is not a backend; choose one of {', '.join(BACKEND_NAMES)}{unset}")


def _choose(name: str | None, forced: str | None) -> tuple[Backend, str]:
    if forced:
        check_backend_name(forced, "backend" if name else "NUMABIND_BACKEND")
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


def _native_state() -> tuple[bool, str]:
    """(True, what the loaded native core is: its version and file) or (False, one line saying that it is
    missing or unusable and how to get it)."""
    try:
        native = load_native()
    except (ImportError, NumabindError) as e:   # missing, or built for another version
        return False, str(e)
    built = native.ffi.string(native.lib.nb_version()).decode("ascii", "replace")
    return True, f"numabind._native {built} loaded from {native.__file__}"


def backend_info() -> "dict[str, Any]":
    """Which backends can be used here and why the others cannot.

    ``native`` says what the compiled core is: ``"numabind._native 0.1.0 loaded from /.../_native.abi3.so"``
    when it loads (``native_ok`` True), else one line saying it is missing and how to get it (``native_ok``
    False).
    """
    available = {n: _load(n) is not None for n in BACKEND_NAMES}
    try:
        be, why = get_backend()
        selected, reason = be.name, why
    except NumabindError as e:
        selected, reason = None, str(e)
    native_ok, native = _native_state()
    return {
        "selected": selected,
        "reason": reason,
        "available": available,
        "unavailable": {n: _failures[n] for n in BACKEND_NAMES if not available[n]},
        "native": native,
        "native_ok": native_ok,
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


# ----------------------------------------------------------------------------- the thread walk and the weights
#: What ``threads=`` of a bind or a verify may be: the threads whose CPUs match the caller's, all of them,
#: or the calling thread alone.
THREAD_MODES: "tuple[ThreadMode, ...]" = ("matching", "all", "current")
#: The walk's flags per (threads, strict is True): strict stops at the first refusal and checks the caller first.
WALK_FLAGS = {(threads, strict): (WALK_MATCHING if threads == "matching" else WALK_ONLY_CALLER if threads == "current"
                                  else 0) | (WALK_STOP_ON_ERROR | WALK_CHECK_FIRST if strict else 0)
              for threads in THREAD_MODES for strict in (False, True)}


def check_threads(threads: object) -> None:
    """Raise :class:`PlanError` unless ``threads`` is one of :data:`THREAD_MODES`."""
    if threads not in THREAD_MODES:
        raise PlanError(f"threads={threads!r} is not one of {', '.join(THREAD_MODES)}")


def walk_all(be: Backend, me: int) -> AffinityWalk:
    """Every thread of this process as it is now (``me`` the calling thread), read through ``be``."""
    return be.affinity_many(live.thread_ids(me), None)


def write_weights(be: Backend, weights: "dict[int, int]", old: "dict[int, int]") -> None:
    """Write the system-wide interleave ``weights``; on a refusal put back those already written (from ``old``)
    and raise the :class:`BindError`."""
    done: dict[int, int] = {}
    try:
        for n, w in sorted(weights.items()):
            be.set_interleave_weights({n: w})
            done[n] = w
    except BindError:
        if done:
            try:
                be.set_interleave_weights({n: old[n] for n in done})
            except BindError as e:
                log.warning("could not put back the interleave weights %s: %s",
                            format_weights({n: old[n] for n in done}), e)
        raise


def exec_command(command: "list[str]", env: "dict[str, str]") -> int:
    """exec ``command`` (searched on PATH); on failure the error is printed and the shell's status returned:
    127 when it is not found, 126 when it is found but cannot be executed."""
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:
        import errno    # only when the exec failed: off numabind run's path
        import shutil
        import sys

        exe = command[0]
        missing = e.errno == errno.ENOENT and (not os.path.lexists(exe) if "/" in exe else
                                               shutil.which(exe, path=env.get("PATH", os.defpath)) is None)
        why = "command not found" if missing and "/" not in exe else e.strerror
        sys.stderr.write(f"numabind: error: cannot execute {exe!r}: {why}\n")
        return EXIT_NOT_FOUND if missing else EXIT_NOT_EXECUTABLE
    return EXIT_NOT_EXECUTABLE   # not reached: exec replaced the process


def interleave_next_node() -> int | None:
    """The node the calling thread's next interleaved page goes to (``get_mempolicy(MPOL_F_NODE)``), read
    through libnuma's ``get_mempolicy`` (``numabind show``, as ``numactl --show``); None when libnuma is not
    there or refuses."""
    import ctypes   # numabind show only: off numabind run's path

    try:
        lib = ctypes.CDLL(LIBNUMA_SONAME, use_errno=True)
        mode = ctypes.c_int(0)
        if lib.get_mempolicy(ctypes.byref(mode), None, ctypes.c_ulong(0), None, ctypes.c_ulong(1)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return mode.value


# ----------------------------------------------------------------------------- holding another process
def pin_process(pid: int) -> int | None:
    """A pidfd on process ``pid`` (``pidfd_open(2)``), or None where there is none (Linux before 5.3, the process
    is gone). While it is open and :func:`process_ended` says no, the number ``pid`` names that process: a pid is
    reused only after its process has ended and been reaped. The caller closes it (``os.close``)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def process_ended(pidfd: int | None) -> bool:
    """Whether the process a :func:`pin_process` pidfd holds has ended (the pidfd polls readable from its exit
    on, zombie or reaped); False without a pidfd (the caller checks the start time alone)."""
    if pidfd is None:
        return False
    import select   # numabind move only: off numabind run's path

    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


__all__ += ["THREAD_MODES", "WALK_FLAGS", "check_backend_name", "check_threads", "exec_command", "interleave_next_node", "pin_process",
            "process_ended", "walk_all", "write_weights"]
