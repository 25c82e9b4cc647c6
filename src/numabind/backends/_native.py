"""Shared implementation of the two cffi backends (libnuma and raw syscalls).

They differ only in which C functions they call: ``nb_sys_*`` (raw
``syscall()``) or ``nb_numa_*`` (the same calls inside a dlopen'd libnuma).
"""

from __future__ import annotations

import errno as _errno

from ..cpulist import ids_to_words, words_to_ids
from ..errors import BindError
from .base import (
    MPOL_MF_MOVE,
    MPOL_MODE_FLAGS,
    MPOL_MODES,
    MPOL_NAMES,
    Backend,
    MemPolicyState,
    cpu_mask_bits,
    node_mask_bits,
)


def load_native():
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


class NativeBackend(Backend):
    """Calls ``<prefix>set_mempolicy`` and friends from numabind._native."""

    prefix = ""

    def __init__(self) -> None:
        native = load_native()
        self.ffi = native.ffi
        self.lib = native.lib
        self._fn = {n: getattr(self.lib, self.prefix + n) for n in (
            "set_mempolicy", "get_mempolicy", "mbind", "migrate_pages", "move_pages")}

    # -- helpers ----------------------------------------------------------
    def _node_mask(self, nodes):
        bits = node_mask_bits()
        words = ids_to_words(nodes, bits)
        return self.ffi.new("unsigned long[]", words), bits

    def _check(self, rc: int, syscall: str, detail: str) -> int:
        if rc < 0:
            raise BindError(-rc, syscall, detail)
        return rc

    # -- affinity ---------------------------------------------------------
    def _setaff(self, tid, bits, mask):
        return self.lib.nb_sys_sched_setaffinity(tid, bits // 8, mask)

    def _getaff(self, tid, bits, mask):
        return self.lib.nb_sys_sched_getaffinity(tid, bits // 8, mask)

    def set_affinity(self, tid: int, cpus: frozenset[int]) -> None:
        bits = cpu_mask_bits()
        mask = self.ffi.new("unsigned long[]", ids_to_words(cpus, bits))
        self._check(self._setaff(tid, bits, mask), "sched_setaffinity", f"thread {tid}")

    def get_affinity(self, tid: int) -> frozenset[int]:
        bits = cpu_mask_bits()
        mask = self.ffi.new("unsigned long[]", bits // 64)
        self._check(self._getaff(tid, bits, mask), "sched_getaffinity", f"thread {tid}")
        return words_to_ids(list(mask))

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
        mask, bits = self._node_mask(())
        self._check(self._fn["get_mempolicy"](mode, mask, bits + 1, self.ffi.NULL, 0),
                    "get_mempolicy", "calling thread")
        return MemPolicyState(mode=mode[0], nodes=words_to_ids(list(mask)))

    def restore_mempolicy(self, state: MemPolicyState) -> None:
        if state.nodes:
            mask, bits = self._node_mask(state.nodes)
            rc = self._fn["set_mempolicy"](state.mode, mask, bits + 1)
        else:
            rc = self._fn["set_mempolicy"](state.mode, self.ffi.NULL, 0)
        self._check(rc, "set_mempolicy", f"restoring {state.describe()} (mode word {state.mode:#x})")

    def get_mempolicy(self) -> tuple[str, frozenset[int]]:
        state = self.save_mempolicy()
        value = state.mode & ~MPOL_MODE_FLAGS
        nodes = state.nodes
        name = MPOL_NAMES.get(value, f"mode{value}")
        if name == "preferred" and not nodes:
            name = "local"  # older kernels store MPOL_LOCAL as preferred with no node
        if name in ("default", "local"):
            nodes = frozenset()
        return name, nodes

    def migrate_pages(self, pid: int, from_nodes: frozenset[int], to_nodes: frozenset[int]) -> int:
        old, bits = self._node_mask(from_nodes)
        new, _ = self._node_mask(to_nodes)
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
