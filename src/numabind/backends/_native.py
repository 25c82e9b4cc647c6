"""Shared implementation of the two cffi backends (libnuma and raw syscalls).

They differ only in which C functions they call: ``nb_sys_*`` (raw
``syscall()``) or ``nb_numa_*`` (the same calls inside a dlopen'd libnuma).
Masks are sized from the kernel's possible CPUs and nodes (:mod:`numabind.live`)
and kept per id set, so binding the same plan again allocates nothing.
"""

from __future__ import annotations

import errno as _errno
TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence
    from typing import Any

from .. import live
from ..cpulist import ids_to_words, words_to_ids
from ..errors import BindError
from .base import (
    MPOL_MF_MOVE,
    MPOL_MODES,
    AffinityWalk,
    Backend,
    MemPolicyState,
    MemPolicySwap,
    decode,
    policy_of,
)


def load_native() -> Any:
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
            "set_mempolicy", "get_mempolicy", "migrate_pages", "move_pages", "affinity_many", "swap_mempolicy")}
        self._cpu_masks: dict[frozenset[int], tuple[Any, int]] = {}
        self._node_masks: dict[frozenset[int], tuple[Any, int]] = {}

    # -- helpers ----------------------------------------------------------
    def _mask(self, cache: dict[frozenset[int], tuple[Any, int]], ids: frozenset[int], bits: int) -> tuple[Any, int]:
        """A C array holding ``ids`` (kept per id set; callers never write into it) and its size in bits."""
        hit = cache.get(ids)
        if hit is None:
            bits = _fit(bits, ids)
            hit = (self.ffi.new("unsigned long[]", ids_to_words(ids, bits)), bits)
            if len(cache) >= self._MASKS_KEPT:
                cache.clear()
            cache[ids] = hit
        return hit

    def _node_mask(self, nodes: frozenset[int]) -> tuple[Any, int]:
        return self._mask(self._node_masks, frozenset(nodes), live.node_mask_bits())

    def _check(self, rc: int, syscall: str, detail: str) -> int:
        if rc < 0:
            raise BindError(-rc, syscall, detail)
        return rc

    # -- affinity ---------------------------------------------------------
    def _setaff(self, tid: int, bits: int, mask: Any) -> int:
        return self.lib.nb_sys_sched_setaffinity(tid, bits // 8, mask)  # type: ignore[no-any-return]

    def _getaff(self, tid: int, bits: int, mask: Any) -> int:
        return self.lib.nb_sys_sched_getaffinity(tid, bits // 8, mask)  # type: ignore[no-any-return]

    def set_affinity(self, tid: int, cpus: frozenset[int]) -> None:
        mask, bits = self._mask(self._cpu_masks, frozenset(cpus), live.cpu_mask_bits())
        self._check(self._setaff(tid, bits, mask), "sched_setaffinity", f"thread {tid}")

    def get_affinity(self, tid: int) -> frozenset[int]:
        bits = live.cpu_mask_bits()
        mask = self.ffi.new("unsigned long[]", bits // 64)
        self._check(self._getaff(tid, bits, mask), "sched_getaffinity", f"thread {tid}")
        return words_to_ids(mask)

    def affinity_many(self, tids: Sequence[int], cpus: frozenset[int] | None, flags: int = 0) -> AffinityWalk:
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
        out = MemPolicySwap()
        if ints[2] < 0:
            out.old_error = BindError(-ints[2], "get_mempolicy", "calling thread")
        else:
            out.old = MemPolicyState(ints[0], decode(masks[0:words]))
        if ints[3] < 0:
            out.set_error = BindError(-ints[3], "set_mempolicy", f"{policy} nodes {sorted(nodes)}")
        elif ints[3] == 0:
            if ints[4] < 0:
                out.now_error = BindError(-ints[4], "get_mempolicy", "calling thread")
            else:
                out.now = policy_of(ints[1], decode(masks[words:2 * words]))
        return out

    def migrate_pages(self, pid: int, from_nodes: frozenset[int], to_nodes: frozenset[int]) -> int:
        old, bits = self._node_mask(from_nodes)
        new, bits2 = self._node_mask(to_nodes)
        if bits2 != bits:   # one size for both masks
            bits = max(bits, bits2)
            old = self.ffi.new("unsigned long[]", ids_to_words(from_nodes, bits))
            new = self.ffi.new("unsigned long[]", ids_to_words(to_nodes, bits))
        rc = self._fn["migrate_pages"](pid, bits + 1, old, new)
        return self._check(rc, "migrate_pages", f"pid {pid} from nodes {sorted(from_nodes)} to {sorted(to_nodes)}")

    def page_nodes(self, addresses: list[int]) -> list[int]:
        n = len(addresses)
        if n == 0:
            return []
        pages = self.ffi.new("void *[]", [self.ffi.cast("void *", a) for a in addresses])
        status = self.ffi.new("int[]", n)
        self._check(self._fn["move_pages"](0, n, pages, self.ffi.NULL, status, 0), "move_pages", "query")
        return list(status)

    def move_to_node(self, addresses: list[int], node: int) -> list[int]:
        """Move pages to ``node`` (move_pages); returns per-page status."""
        n = len(addresses)
        pages = self.ffi.new("void *[]", [self.ffi.cast("void *", a) for a in addresses])
        nodes = self.ffi.new("int[]", [node] * n)
        status = self.ffi.new("int[]", n)
        rc = self._fn["move_pages"](0, n, pages, nodes, status, MPOL_MF_MOVE)
        if rc < 0 and -rc != _errno.ENOENT:
            raise BindError(-rc, "move_pages", f"{n} pages to node {node}")
        return list(status)
