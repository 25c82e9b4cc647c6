"""The native mechanics of the ``libnuma`` and ``syscall`` backends: the compiled core (:func:`load_native`),
the one call of a whole bind (``nb_*_bind``) and :class:`NativeBackend`. The two backends differ only in the
prefix of the calls: ``nb_sys_`` (raw ``syscall()``) or ``nb_numa_`` (libnuma.so.1, dlopen'd).
"""

import sys
TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)

from .. import live
from ..cpulist import format_cpulist, ids_to_words, words_to_ids
from ..errors import BindError, NumabindError
from .base import (MPOL_MODES, SETTLE_ROUNDS, WALK_BOUND, WALK_EXITED, WALK_ONLY_CALLER, WALK_UNCHANGED, AffinityWalk,
                   Backend, BindCall, MemPolicyState, MemPolicySwap, decode, policy_of)

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence
    from typing import Any

__all__ = ["NativeBackend", "load_native", "refused"]


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
#: NB_COUNT_LINKS once /proc/self/task's link count (2 + threads) agreed with a listing of one thread, else 0: a
#: bind of a lone thread then lists nothing.
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
    """What nb_*_bind sets for one (policy, nodes, CPUs), kept per plan: its request and masks, the buffer's size,
    the facts of a bind done exactly as asked (``want``; ``want1`` for a lone thread, -1 when the facts cannot
    tell) and the last call, whose buffer the next bind reuses when nothing else holds it."""

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

    def __init__(self, req: _Request, cap: int, ffi: "Any") -> None:
        self._ints = ffi.new("int[]", req.size + cap * req.per_thread)
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
        if not ints[_FACTS] & _WALKED:
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
        if req.policy is None:
            return None
        return _swap_of(self._ints, 1, self._masks(), req.nw, req.policy, req.nodes)

    def now(self) -> tuple[str, frozenset[int]] | BindError | None:
        ints, req = self._ints, self._req
        if req.policy is not None:
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
            req.want = ((_NOW_READ if policy is None else _POLICY_FACTS) | _WALKED | _COUNTED
                        | (0 if cpus is None else _CPU_FACTS))
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
