"""The kernel calls for one range of memory: ``mbind(2)``, ``get_mempolicy(2)`` with ``MPOL_F_ADDR`` and
``move_pages(2)`` in query mode, through the compiled core. What to ask is :mod:`numabind.memory`; every refusal
is a :class:`~numabind.errors.BindError` naming the call, the range and the errno.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING, Any

from .. import live
from ..cpulist import ids_to_words, words_to_ids
from ..errors import BindError
from .base import (MPOL_F_ADDR, MPOL_F_NODE, MPOL_MF_MOVE, MPOL_MF_MOVE_ALL, MPOL_MF_STRICT, MPOL_MODES, Backend,
                   policy_of)
from .native import NativeBackend, load_native

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterator

__all__ = ["MPOL_F_ADDR", "MPOL_F_NODE", "MPOL_MF_MOVE", "MPOL_MF_MOVE_ALL", "MPOL_MF_STRICT", "PAGE_SIZE",
           "QUERY_CHUNK", "buffer_address", "mbind_range", "page_status", "range_policy", "range_backend"]

#: The page size of this kernel (the unit of mbind's range and of move_pages).
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
#: Pages asked about in one move_pages(2) call (the address and status arrays: 12 bytes a page).
QUERY_CHUNK = 1 << 16


def range_backend(be: Backend) -> NativeBackend:
    """``be`` when it can set the policy of a range (the ``libnuma`` and ``syscall`` backends, over the compiled
    core); else a BindError (ENOTSUP) that names the backend and the fix."""
    if isinstance(be, NativeBackend):
        return be
    raise BindError(errno.ENOTSUP, "mbind",
                    f"the {be.name} backend cannot set the memory policy of a range (it has no mbind); install "
                    f"numabind's native core (gcc and python3-dev, then reinstall) or set NUMABIND_BACKEND to "
                    f"libnuma or syscall")


def buffer_address(obj: object) -> tuple[int, int, Any]:
    """``(address, bytes, keep)`` of an object with the buffer protocol; ``keep`` holds the buffer until it is
    given to :func:`release`. Raises TypeError (no buffer protocol) or BufferError (not C-contiguous), and
    ImportError when the compiled core is not installed."""
    ffi = load_native().ffi
    keep = ffi.from_buffer(obj)
    return int(ffi.cast("uintptr_t", keep)), len(keep), keep


def release(keep: Any) -> None:
    """Let go of the buffer :func:`buffer_address` held."""
    if keep is not None:
        load_native().ffi.release(keep)


def _mask(nodes: frozenset[int]) -> tuple[Any, int]:
    """A node mask holding ``nodes`` and the maxnode to pass with it (bits + 1, as the kernel counts)."""
    bits = live.node_mask_bits()
    top = max(nodes) + 1 if nodes else 0
    if top > bits:
        bits = (top + 63) // 64 * 64
    ffi = load_native().ffi
    return ffi.new("unsigned long[]", ids_to_words(nodes, bits)), bits + 1


def mbind_range(be: NativeBackend, address: int, length: int, policy: str, nodes: frozenset[int],
                flags: int) -> None:
    """``mbind(address, length, MPOL_<policy>, nodes, flags)``; ``address`` page-aligned. Raises BindError."""
    ffi = be.ffi
    mode = MPOL_MODES[policy]
    if nodes:
        mask, maxnode = _mask(nodes)
    else:
        mask, maxnode = ffi.NULL, 0
    rc = getattr(be.lib, be.prefix + "mbind")(ffi.cast("void *", address), length, mode, mask, maxnode, flags)
    if rc < 0:
        what = f"{policy} nodes {sorted(nodes)}" if nodes else policy
        raise BindError(-rc, "mbind", f"{what} on {length} bytes at {address:#x} (flags {flags:#x})")


def range_policy(be: NativeBackend, address: int) -> tuple[str, frozenset[int]]:
    """The memory policy of the mapping at ``address`` (``get_mempolicy(MPOL_F_ADDR)``), as a Plan spells it:
    ``default`` when the range has none of its own. Raises BindError."""
    mode, nodes = range_mode(be, address)
    return policy_of(mode, nodes)


def page_status(be: NativeBackend, address: int, pages: int) -> Iterator[list[int]]:
    """Where each of ``pages`` pages from ``address`` (page-aligned) is, by ``move_pages(2)`` with no target
    nodes: per page its node, or ``-errno`` (``-ENOENT``: not faulted in yet), :data:`QUERY_CHUNK` pages per
    call, one list per call. Raises BindError when a call fails as a whole."""
    ffi = be.ffi
    query = getattr(be.lib, be.prefix + "move_pages")
    done = 0
    while done < pages:
        n = min(QUERY_CHUNK, pages - done)
        start = address + done * PAGE_SIZE
        addrs = ffi.new("uintptr_t[]", list(range(start, start + n * PAGE_SIZE, PAGE_SIZE)))
        status = ffi.new("int[]", n)
        rc = query(0, n, ffi.cast("void **", addrs), ffi.NULL, status, 0)
        if rc < 0:
            raise BindError(-rc, "move_pages", f"query of {n} pages at {start:#x}")
        yield list(status)
        done += n


def range_mode(be: NativeBackend, address: int) -> tuple[int, frozenset[int]]:
    """The memory policy of the mapping at ``address`` as the kernel returns it (``get_mempolicy(MPOL_F_ADDR)``):
    the raw mode word and its node mask, for callers that print the kernel's own numbering (numactl's
    ``--dump``). Raises BindError."""
    ffi = be.ffi
    bits = live.node_mask_bits()
    mode = ffi.new("int *")
    mask = ffi.new("unsigned long[]", bits // 64)
    rc = getattr(be.lib, be.prefix + "get_mempolicy")(mode, mask, bits + 1, ffi.cast("void *", address), MPOL_F_ADDR)
    if rc < 0:
        raise BindError(-rc, "get_mempolicy", f"MPOL_F_ADDR at {address:#x}")
    return int(mode[0]), words_to_ids(mask)


def page_node(be: NativeBackend, address: int) -> int:
    """The node of the page at ``address`` (``get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR)``); the kernel faults
    the page in first when it is not yet. Raises BindError."""
    ffi = be.ffi
    node = ffi.new("int *")
    rc = getattr(be.lib, be.prefix + "get_mempolicy")(node, ffi.NULL, 0, ffi.cast("void *", address),
                                                        MPOL_F_NODE | MPOL_F_ADDR)
    if rc < 0:
        raise BindError(-rc, "get_mempolicy", f"MPOL_F_NODE|MPOL_F_ADDR at {address:#x}")
    return int(node[0])
