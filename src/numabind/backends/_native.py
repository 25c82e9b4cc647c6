"""The two backends over the compiled core: ``libnuma`` and ``syscall``.

They differ only in which C functions they call: ``nb_sys_*`` (raw
``syscall()``: :class:`SyscallBackend`) or ``nb_numa_*`` (the same calls inside
libnuma.so.1, opened at run time with dlopen(): :class:`LibnumaBackend`). Both
live in this one module, so a bind imports one backend module whichever it uses.
Masks are sized from the kernel's possible CPUs and nodes (:mod:`numabind.live`)
and kept per id set, so binding the same plan again allocates nothing.
"""

import os
TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence
    from typing import Any

from .. import live
from ..cpulist import ids_to_words, words_to_ids
from ..errors import BindError, NumabindError
from . import (
    MPOL_MODES,
    WALK_ONLY_CALLER,
    AffinityWalk,
    Backend,
    BindCall,
    MemPolicyState,
    MemPolicySwap,
    decode,
    policy_of,
)


__all__ = ["LIBNUMA_SONAME", "LibnumaBackend", "NativeBackend", "SyscallBackend", "load_native"]


def load_native() -> "Any":
    """The compiled module, or raise ImportError with the reason: one short line, with how to get it."""
    try:
        from .. import _native  # built by build_ffi.py
    except ImportError as e:
        missing = isinstance(e, ModuleNotFoundError) or "cannot import name '_native'" in str(e)
        why = "not installed" if missing else " ".join(str(e).split())[:160]
        raise ImportError(
            f"native core numabind._native is not available ({why}): install gcc and python3-dev, "
            f"then reinstall numabind"
        ) from e
    return _native


# Slots of nb_*_bind's int header (csrc/numabind.h's enum nb_bind_slot).
_NOW_MODE, _ERRS, _WALKED, _PROCESSED, _EXITED, _CLEAN, _HEADER = 2, 3, 6, 7, 8, 9, 10


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


class _NativeBindCall(BindCall):
    """A BindCall over nb_*_bind's arrays: the walk and the memory policies are built only when asked for."""

    __slots__ = ("_raw",)

    def __init__(self, ints: "Any", masks: "Any", cap: int, nw: int, cw: int, policy: str | None,
                 nodes: frozenset[int]) -> None:
        self.clean, self.processed, self.exited = ints[_CLEAN] == 1, ints[_PROCESSED], ints[_EXITED]
        self._walk = None
        self._raw = (ints, masks, cap, nw, cw, policy, nodes)

    @property
    def walk(self) -> AffinityWalk | None:
        walk = self._walk
        if walk is None:
            ints, masks, cap, nw, cw, _, _ = self._raw
            if not ints[_WALKED]:
                return None
            first = 2 * nw
            walk = self._walk = AffinityWalk(ints + _HEADER, ints + _HEADER + cap, ints[_PROCESSED], masks + first,
                                             masks + first + cap * cw, cw, (ints, masks))
        return walk

    def swap(self) -> MemPolicySwap | None:
        ints, masks, _, nw, _, policy, nodes = self._raw
        if policy is None:
            return None
        return _swap_of(ints, 1, masks, nw, policy, nodes)

    def now(self) -> tuple[str, frozenset[int]] | BindError | None:
        ints, masks, _, nw, _, policy, _ = self._raw
        if policy is not None:
            return None
        if ints[_ERRS + 2] < 0:
            return BindError(-ints[_ERRS + 2], "get_mempolicy", "calling thread")
        return policy_of(ints[_NOW_MODE], decode(masks[nw:2 * nw]))


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
        self._cpu_masks: dict[frozenset[int], tuple[Any, int]] = {}
        self._node_masks: dict[frozenset[int], tuple[Any, int]] = {}
        self._cap = 8        # threads apply_all makes room for: the last count, with some slack
        self._int_array = self.ffi.typeof("int[]")
        self._word_array = self.ffi.typeof("unsigned long[]")

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
            raise BindError(-rc, syscall, detail)
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
            raise BindError(-done, "sched_setaffinity", f"{n} threads")
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
        mode = self.ffi.new("int *")
        bits = live.node_mask_bits()
        mask = self.ffi.new("unsigned long[]", bits // 64)
        self._check(self._fn["get_mempolicy"](mode, mask, bits + 1, self.ffi.NULL, 0),
                    "get_mempolicy", "calling thread")
        return policy_of(mode[0], words_to_ids(mask))

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

    def apply_all(self, policy: str | None, nodes: frozenset[int], cpus: frozenset[int] | None, flags: int,
                  need_old: bool) -> BindCall:
        ffi = self.ffi
        if policy is not None and nodes:
            nmask, nbits = self._node_masks.get(nodes) or self._node_mask(nodes)
        else:
            nmask, nbits = ffi.NULL, live.node_mask_bits()
        if cpus is None:
            cmask, cbits = ffi.NULL, live.cpu_mask_bits()
        else:
            cmask, cbits = self._cpu_masks.get(cpus) or self._mask(self._cpu_masks, cpus, live.cpu_mask_bits())
        nw, cw = nbits // 64, cbits // 64
        mode = -1 if policy is None else MPOL_MODES[policy]
        cap = 1 if flags & WALK_ONLY_CALLER else self._cap
        new, int_array, word_array = ffi.new, self._int_array, self._word_array
        while True:
            ints = new(int_array, _HEADER + 2 * cap)              # the header, tids, statuses
            masks = new(word_array, 2 * nw + 2 * cap * cw)        # old and current nodes, before, after
            n = self._bind(mode, nmask, nbits + 1, nw, need_old, cmask, cw, flags, cap, ints, masks)
            if n < 0:
                raise OSError(-n, f"cannot list /proc/self/task: {os.strerror(-n)}")
            if n <= cap:
                break
            cap = n + n // 2 + 8
        if not flags & WALK_ONLY_CALLER:
            self._cap = n + n // 2 + 8
        return _NativeBindCall(ints, masks, cap, nw, cw, policy, nodes)

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


#: The soname opened; ``_NUMABIND_LIBNUMA`` overrides it (tests use it to
#: simulate a machine without libnuma). Only a bare library file name is
#: accepted: a path would let the environment choose code to load.
LIBNUMA_SONAME = "libnuma.so.1"
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+-")


def _bare_soname(name: str) -> bool:
    """``lib<name>.so`` with optional ``.<digits>`` version parts, nothing else (no path, no space)."""
    stem, dot_so, version = name.partition(".so")
    if not (dot_so and stem.startswith("lib") and len(stem) > 3 and all(c in _NAME_CHARS for c in stem[3:])):
        return False
    return version == "" or (version.startswith(".") and all(p.isascii() and p.isdigit()
                                                             for p in version[1:].split(".")))


class LibnumaBackend(NativeBackend):
    name = "libnuma"
    prefix = "nb_numa_"

    def __init__(self) -> None:
        super().__init__()
        soname = os.environ.get("_NUMABIND_LIBNUMA", LIBNUMA_SONAME)
        if not _bare_soname(soname):
            raise NumabindError(
                f"_NUMABIND_LIBNUMA={soname[:100]!r} is not a bare shared-library name like "
                f"'libnuma.so.1'; refusing to load it (unset the variable)"
            )
        err = self.ffi.new("char[]", 512)
        if self.lib.nb_numa_load(soname.encode(), err, 512) != 0:
            raise NumabindError(f"cannot load {soname}: {self.ffi.string(err).decode(errors='replace')}")
        if self.lib.nb_numa_available() < 0:
            raise NumabindError(f"{soname} loaded, but numa_available() says this kernel has no NUMA support")

    def _setaff(self, tid: int, bits: int, mask: "Any") -> int:
        return self.lib.nb_numa_sched_setaffinity(tid, bits, mask)  # type: ignore[no-any-return]

    def _getaff(self, tid: int, bits: int, mask: "Any") -> int:
        return self.lib.nb_numa_sched_getaffinity(tid, bits, mask)  # type: ignore[no-any-return]
