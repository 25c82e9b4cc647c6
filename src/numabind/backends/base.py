"""The surface every backend offers (:class:`Backend`), the values its calls return, the kernel constants they
share (read from the compiled core), and what a bind does the same way whatever the backend: the walk's flags,
binding the threads started while a walk ran (:func:`settle`), the system-wide interleave weights, and the process
calls of ``numabind run`` (exec) and ``numabind move`` (a pidfd). Reading the running process is
:mod:`numabind.live`: a backend only makes calls.
"""

import _thread
import os
from abc import ABC, abstractmethod
TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)

from .. import live
from .._base import EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, Value, getLogger
from .._fs import WEIGHTS_DIR   # the sysfs paths belong to the readers' floor
from ..cpulist import format_cpulist, words_to_ids
from ..errors import BindError, NumabindError, PlanError
from ..plan import MEM_POLICIES, format_weights

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping, Sequence
    from typing import Any
    from ..plan import Plan
    from ..types import ThreadMode

log = getLogger("numabind.backends")


# ----------------------------------------------------------------------------- the core's constants
try:
    _lib: "Any" = live.native_lib()
except (ImportError, NumabindError):   # no usable compiled core (missing, or another version's)
    _lib = None
# Per-thread outcome of Backend.affinity_many (csrc/numabind.h's enum nb_thread_status; a negative one is -errno of a
# refused sched_setaffinity), its flags (enum nb_affinity_flags) and WALK_ONLY_CALLER of Backend.apply_all (the
# caller alone, no thread list). Without a core no C code reads them: the Python walk numbers them itself.
(WALK_BOUND, WALK_LEFT_ALONE, WALK_EXITED, WALK_UNCHANGED, WALK_NOT_TRIED, WALK_DIFFERS, WALK_MATCHING,
 WALK_STOP_ON_ERROR, WALK_CHECK_FIRST, WALK_ONLY_CALLER) = (
    (0, 1, 2, 3, 4, 5, 1, 2, 4, 8) if _lib is None else
    tuple(getattr(_lib, "NB_" + n) for n in ("BOUND", "LEFT_ALONE", "EXITED", "UNCHANGED", "NOT_TRIED", "DIFFERS",
                                             "MATCHING", "STOP_ON_ERROR", "CHECK_FIRST", "ONLY_CALLER")))

#: The kernel's memory-policy modes (``MPOL_*`` of <linux/mempolicy.h>) by the names a Plan gives them, and its
#: flags: of a mode word (``MPOL_F_STATIC_NODES``, ``MPOL_F_RELATIVE_NODES``, ``MPOL_F_NUMA_BALANCING``), of
#: get_mempolicy (``MPOL_F_NODE``, ``MPOL_F_ADDR``) and of mbind (``MPOL_MF_*``): read from the compiled core
#: (``lib.NB_MPOL_*``), never written here. Without a core no call takes them: no modes, every flag 0.
_MPOL_WORDS = ("F_STATIC_NODES", "F_RELATIVE_NODES", "F_NUMA_BALANCING", "F_NODE", "F_ADDR", "MF_STRICT", "MF_MOVE",
               "MF_MOVE_ALL")


def _mpol_constants() -> "tuple[dict[str, int], tuple[int, ...]]":
    if _lib is None:
        return {}, (0,) * len(_MPOL_WORDS)
    modes = {p: getattr(_lib, "NB_MPOL_" + p.upper().replace("-", "_")) for p in MEM_POLICIES}
    return dict(sorted(modes.items(), key=lambda kv: kv[1])), tuple(getattr(_lib, "NB_MPOL_" + w) for w in _MPOL_WORDS)


MPOL_MODES, (MPOL_F_STATIC_NODES, MPOL_F_RELATIVE_NODES, MPOL_F_NUMA_BALANCING, MPOL_F_NODE, MPOL_F_ADDR,
             MPOL_MF_STRICT, MPOL_MF_MOVE, MPOL_MF_MOVE_ALL) = _mpol_constants()
MPOL_NAMES = {v: k for k, v in MPOL_MODES.items()}
MPOL_MODE_FLAGS = MPOL_F_STATIC_NODES | MPOL_F_RELATIVE_NODES | MPOL_F_NUMA_BALANCING

#: How many times a bind lists the threads again after its walk, binding the threads that started meanwhile,
#: before a list that still shows new threads is a failure (threads keep starting threads faster than binding).
SETTLE_ROUNDS = 8


# ----------------------------------------------------------------------------- what the calls return
class MemPolicyState(Value):
    """A thread's memory policy exactly as ``get_mempolicy`` returned it, to be put back as it was: ``mode`` the
    whole mode word (``MPOL_*`` with its ``MPOL_F_*`` flags), ``nodes`` the node mask returned with it."""

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
    """What :meth:`Backend.swap_mempolicy` did: the policy before, the refusal if any, the policy read back after."""

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
    """One pass of :meth:`Backend.affinity_many`: per thread its status (a ``WALK_*`` value or ``-errno``) and its
    CPUs before and after, decoded only when asked for (a native walk keeps the kernel's words)."""

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

    def growable(self) -> "AffinityWalk":
        """The same walk over lists, to which threads found after it are appended (:func:`settle`)."""
        n = self.processed
        return AffinityWalk(list(self.tids[0:n]), list(self.status[0:n]), n, [self.before(i) for i in range(n)],
                            [self.after(i) for i in range(n)])


class BindCall:
    """What :meth:`Backend.apply_all` did in one call. ``clean``: every step succeeded and read back as asked.
    ``walk`` is None when it did not run (policy refused, or under ``need_old`` the old one unreadable);
    :meth:`swap` is None when no policy was asked for, :meth:`now` the policy read then (or why it could not be)."""

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
        """What the call's own :func:`settle` returned, or None when it did not look (the caller settles)."""
        return None

    def swap(self) -> MemPolicySwap | None:
        raise NotImplementedError

    def now(self) -> tuple[str, frozenset[int]] | BindError | None:
        raise NotImplementedError


class _Held:
    """The bind lock taken outside a native call: a bind buffer's header (nothing changed, nothing to undo)."""

    __slots__ = ("_ints",)
    _ints: "Any"


#: The bind lock where the native core (which has its own, shared by every backend) is not installed.
_serial = _thread.RLock()


def _fresh_serial() -> None:
    global _serial
    _serial = _thread.RLock()   # a forked child: the thread that held it does not exist there


os.register_at_fork(after_in_child=_fresh_serial)


# ----------------------------------------------------------------------------- the interface
class Backend(ABC):
    """One mechanism for applying a plan. Memory-policy calls act on the *calling thread* (the kernel offers no
    way to set another thread's policy); affinity calls take a thread id."""

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
        """For each thread: read its CPUs, set them to ``cpus`` (None: only read), read them back (unless it held
        ``cpus``: the set left them, its read is the read-back). ``WALK_MATCHING`` leaves alone a thread whose CPUs
        differ from ``tids[0]``'s; ``WALK_STOP_ON_ERROR`` stops at the first refusal; ``WALK_CHECK_FIRST`` stops after
        ``tids[0]`` unless it holds exactly ``cpus``. A failure of ``tids[0]`` always stops. A thread that was set but
        reads back other CPUs than ``tids[0]`` is ``WALK_DIFFERS``. Native backends do this in one C call."""
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
            try:   # CPUs the thread held are left by the set: its read is its read-back
                after[i] = before[i] if before[i] == cpus else self.get_affinity(tid)
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
        """One call for a whole bind: :meth:`swap_mempolicy` (``policy`` None: only read it), :meth:`affinity_many`
        over the threads, then :func:`settle`. None: no such call here (the caller does the steps one by one).

        It returns holding the bind lock (:meth:`hold`) unless it bound the caller alone exactly as asked and not
        ``keep_lock`` (``released``). ``pending`` (a one-item list) receives what the call will have done before
        it runs, so a signal handler's exception can still undo it (:meth:`pending_call`, :meth:`end_call`)."""
        return None

    def pending_call(self, pending: "list[Any]") -> BindCall | None:
        """The :class:`BindCall` that :meth:`apply_all` recorded in ``pending``, even one that never returned,
        or None when it changed nothing."""
        return None

    def hold(self, pending: "list[Any]") -> bool:
        """Take the process's bind lock (the native core's when installed), recorded in ``pending`` and released
        by :meth:`end_call`. True unless another bind took it since the call in ``pending`` released it (the CPUs
        that call set are then not its to undo)."""
        try:
            lib = live.native_lib()
        except ImportError:
            token = pending[0] = [0]
            _serial.acquire()
            token[0] = 1
            return True
        if pending[0] is not None and not isinstance(pending[0], list):
            return lib.nb_bind_hold(pending[0]._ints) == 1    # type: ignore[no-any-return]
        from .._native import ffi   # loaded already: live.native_lib() checked it

        held = pending[0] = object.__new__(_Held)
        held._ints = ffi.new("int[]", lib.NB_BIND_HEADER)
        lib.nb_bind_hold(held._ints)
        return True

    def end_call(self, pending: "list[Any]") -> None:
        """Release the bind lock that :meth:`apply_all` or :meth:`hold` recorded in ``pending`` holds (once)."""
        raw = pending[0]
        if isinstance(raw, list):
            if raw[0]:
                raw[0] = 0
                _serial.release()
        elif raw is not None:
            live.native_lib().nb_bind_release(raw._ints)

    @abstractmethod
    def set_mempolicy(self, policy: str, nodes: frozenset[int]) -> None:
        """set_mempolicy of the calling thread. Raises BindError."""

    @abstractmethod
    def get_mempolicy(self) -> tuple[str, frozenset[int]]:
        """(policy name, nodes) of the calling thread. Raises BindError."""

    def swap_mempolicy(self, policy: str, nodes: frozenset[int], need_old: bool = False) -> MemPolicySwap:
        """Save the calling thread's policy, set ``policy`` on ``nodes``, read it back; errors are returned. With
        ``need_old``, an unreadable old policy stops before anything is set."""
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
        """The calling thread's whole memory policy, for :meth:`restore_mempolicy`. Raises BindError."""
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
        """argv prefix that starts a command bound to ``plan``, or None when the backend binds in-process."""
        return None


# ----------------------------------------------------------------------------- the walk of a bind
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


def settle(be: Backend, walk: AffinityWalk, cpus: frozenset[int], flags: int,
           held: "list[AffinityWalk]") -> "list[int] | BindError":
    """Bind the threads started while ``walk`` set ``cpus``, listing them again up to :data:`SETTLE_ROUNDS` times.
    Returns ``[]`` when settled (or a refusal stopped it), the thread ids still new at the last listing, or the
    listing's BindError; ``held[0]`` is then the walk grown by those threads, each added before it was changed."""
    me = walk.tids[0]
    seen = set(walk.tids[0:walk.processed])
    grown: AffinityWalk | None = None
    caller_before, caller_after = walk.before(0), walk.after(0)
    rounds = 0
    while True:
        try:
            listed = live.thread_ids(me)
        except BindError as e:
            return e
        new = [t for t in listed if t not in seen]
        if not new or rounds == SETTLE_ROUNDS:
            return new
        if grown is None:
            grown = held[0] = walk.growable()
        seen.update(new)
        if not _bind_new(be, grown, new, cpus, flags, caller_before, caller_after):
            return []
        rounds += 1


def _bind_new(be: Backend, walk: AffinityWalk, tids: list[int], cpus: frozenset[int], flags: int,
              caller_before: frozenset[int], caller_after: frozenset[int]) -> bool:
    """Bind ``tids`` (threads a walk missed), each appended to ``walk`` (of lists) before it is changed. False
    when a refusal stops it (``WALK_STOP_ON_ERROR``)."""
    import errno

    status, before, after = walk.status, walk._before, walk._after
    for tid in tids:
        try:
            was = be.get_affinity(tid)
        except BindError as e:
            if e.errno == errno.ESRCH:
                continue     # gone already: nothing to report
            was, st = frozenset(), -(e.errno or errno.EIO)
        else:
            st = WALK_BOUND
            if flags & WALK_MATCHING and was != caller_before and was != cpus:
                st = WALK_LEFT_ALONE    # started by a thread pinned elsewhere
        walk.tids.append(tid)   # type: ignore[attr-defined]
        status.append(st)   # type: ignore[attr-defined]
        before.append(was)
        after.append(was)
        walk.processed += 1
        if st == WALK_LEFT_ALONE:
            continue
        if st == WALK_BOUND:
            try:
                be.set_affinity(tid, cpus)
                after[-1] = was if was == cpus else be.get_affinity(tid)
            except BindError as e:
                st = WALK_EXITED if e.errno == errno.ESRCH else -(e.errno or errno.EIO)
            else:
                st = WALK_BOUND if after[-1] == caller_after else WALK_DIFFERS
            status[-1] = st   # type: ignore[index]
        if st < 0 and flags & WALK_STOP_ON_ERROR:
            return False
    return True


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


# ----------------------------------------------------------------------------- a command, another process
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
