"""SGLang's memory helpers (``sglang.srt.utils.numa_utils``): its names, arguments and results, restated over
:func:`numabind.bind_memory` (``mbind(2)`` through numabind's core, read back with ``move_pages(2)``; no libnuma).
Failures are SGLang's (``_sglang_base.fail``). ``compat.sglang`` re-exports everything here.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from .. import live
from ..backends import get_backend
from ..bind import bind_thread
from ..errors import NumabindError
from ..memory import MemoryReport, bind_memory, page_placement
from ..plan import Plan, narrow_nodes
from ._sglang_base import env_bool, fail, logger

__all__ = ["InterleavedPinnedBuffer", "allocate_interleaved_pinned_table", "get_shm_numa_distribution",
           "numa_interleave_memory", "numa_memory_nodes", "numa_page_counts", "temp_membind"]

#: The file numa_maps is read from (a module constant: tests point it at a file of their own).
_NUMA_MAPS_PATH = "/proc/self/numa_maps"

_PROT_READ_WRITE = 0x1 | 0x2
_MAP_PRIVATE_ANONYMOUS = 0x02 | 0x20
_MAP_FAILED = ctypes.c_void_p(-1).value


def _policy_readable() -> bool:
    """Whether this process may use the memory-policy calls (get_mempolicy answers)."""
    try:
        get_backend()[0].get_mempolicy()
    except (NumabindError, OSError):
        return False
    return True


# ----------------------------------------------------------------------------- nodes and pages
def numa_memory_nodes() -> list[int]:
    """The NUMA nodes with memory that this process may allocate from (what interleaving spreads over)."""
    try:
        limits = live.limits()
    except (NumabindError, OSError) as e:
        logger.debug(f"cannot read the memory nodes: {e}")
        return []
    return sorted(limits.memory_nodes & limits.allowed_nodes)


def numa_page_counts(ptr: int, nbytes: int) -> dict[int, int]:
    """Pages of exactly ``[ptr, ptr + nbytes)`` per NUMA node (``move_pages``: pages not faulted in yet are not
    counted); ``{}`` when the kernel cannot say."""
    try:
        return dict(page_placement((int(ptr), int(nbytes))).by_node)
    except (NumabindError, OSError) as e:
        logger.debug(f"cannot count the pages at {ptr:#x}: {e}")
        return {}


def get_shm_numa_distribution(path: str | os.PathLike[str]) -> dict[int, int]:
    """Pages per NUMA node of the mappings of the shared-memory file ``path`` in this process (their
    ``numa_maps`` lines, summed; each line counts in its own page size); ``{}`` when none is mapped or
    ``numa_maps`` cannot be read."""
    names = {os.fspath(path), os.path.realpath(path)}
    counts: dict[int, int] = {}
    try:
        with open(_NUMA_MAPS_PATH) as f:
            lines = f.read().splitlines()
    except OSError as e:
        logger.debug(f"cannot read {_NUMA_MAPS_PATH}: {e}")
        return counts
    for line in lines:
        fields = line.split(" ")
        if not any(w.startswith("file=") and w[5:] in names for w in fields):
            continue
        for word in fields:
            key, eq, value = word.partition("=")
            if eq and len(key) > 1 and key[0] == "N" and key[1:].isdigit() and value.isdigit():
                counts[int(key[1:])] = counts.get(int(key[1:]), 0) + int(value)
    return counts


# ----------------------------------------------------------------------------- policies
def numa_interleave_memory(ptr: int, nbytes: int) -> tuple[int, ...]:
    """Interleave the pages of ``[ptr, ptr + nbytes)`` (rounded out to whole pages) over
    :func:`numa_memory_nodes`, for the pages touched from now on; returns the nodes, or ``()`` when there are
    fewer than two (nothing to spread over). Raises OSError (a :class:`~numabind.BindError`) when the kernel
    refuses the policy."""
    nodes = numa_memory_nodes()
    if len(nodes) < 2:
        logger.debug(f"not interleaving {nbytes} bytes at {ptr:#x}: memory nodes {nodes}")
        return ()
    bind_memory((int(ptr), int(nbytes)), "interleave", nodes=frozenset(nodes), strict="partial", verify=False)
    return tuple(nodes)


@contextlib.contextmanager
def temp_membind(numa_node: int) -> Iterator[None]:
    """The calling thread allocates only from ``numa_node`` inside the block (its memory policy is bind to that
    node), and gets its own policy back afterwards. Pages faulted in the block land there; a node this process
    cannot allocate from, or a policy the kernel refuses, is a failure (a WARNING, or RuntimeError under
    SGLANG_CRASH_ON_NUMA_BIND_FAILURE) and the block runs unbound."""
    node = int(numa_node)
    _, why = narrow_nodes(frozenset({node}), live.limits(), "bind")
    with contextlib.ExitStack() as stack:
        try:
            if not why:
                stack.enter_context(bind_thread(Plan(mem_policy="bind", mem_nodes=frozenset({node})), strict=True))
        except (NumabindError, OSError) as e:
            why = str(e) or type(e).__name__
        if why:
            fail(f"cannot bind memory allocations to NUMA node {node}: {why}")
        yield


# ----------------------------------------------------------------------------- pinned host memory
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                          ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def _host_register(ptr: int, nbytes: int) -> int:
    """Page-lock ``[ptr, ptr + nbytes)`` and map it for the GPU (``cudaHostRegister``); its CUDA status."""
    try:
        import torch   # an optional dependency: only the pinning needs it
    except ImportError as e:
        raise RuntimeError(f"pinning host memory needs torch with CUDA ({e})") from None
    cuda: Any = torch.cuda
    return int(cuda.cudart().cudaHostRegister(ptr, nbytes, 0))


class InterleavedPinnedBuffer:
    """Anonymous memory whose pages are interleaved over every memory node, faulted in by this thread, then
    page-locked for the GPU (``cudaHostRegister``, like ``pin_memory=True``). ``report`` is what bind_memory
    said. Needs at least two memory nodes (RuntimeError otherwise); a refused policy is an OSError.
    """

    def __init__(self, nbytes: int) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        self.nbytes = -(-int(nbytes) // page) * page
        self.ptr: int | None = None
        self._registered = False
        self.report: MemoryReport | None = None
        nodes = numa_memory_nodes()
        if len(nodes) < 2:
            raise RuntimeError(f"interleaving needs at least two NUMA nodes, got {nodes}")
        if self.nbytes <= 0:
            raise RuntimeError(f"cannot allocate {nbytes} bytes")
        self._libc = _libc()
        ptr = self._libc.mmap(None, self.nbytes, _PROT_READ_WRITE, _MAP_PRIVATE_ANONYMOUS, -1, 0)
        if not ptr or ptr == _MAP_FAILED:
            raise MemoryError(f"mmap of {self.nbytes} bytes failed: {os.strerror(ctypes.get_errno())}")
        self.ptr = ptr
        try:
            try:
                self.report = bind_memory((ptr, self.nbytes), "interleave", nodes=frozenset(nodes),
                                          strict="partial", verify=False)
            except NumabindError as e:
                if isinstance(e, OSError):
                    raise
                raise RuntimeError(f"cannot interleave {self.nbytes} bytes over nodes {nodes}: {e}") from e
            ctypes.memset(ptr, 0, self.nbytes)    # fault every page in now, under the policy, from this thread
            rc = _host_register(ptr, self.nbytes)
            if rc != 0:
                raise RuntimeError(f"cudaHostRegister of {self.nbytes} bytes failed: {rc}")
            self._registered = True
        except BaseException:
            self._release(synchronize=False)
            raise

    def __del__(self) -> None:
        if sys.is_finalizing():   # the CUDA runtime may be gone: the process's end takes the mapping
            return
        try:
            self.release()
        except Exception:   # noqa: BLE001 - a finalizer must not raise
            pass

    def release(self) -> None:
        """Unlock and unmap, after the GPU finished the work queued so far (nothing may read it later)."""
        self._release(synchronize=True)

    def _release(self, *, synchronize: bool) -> None:
        ptr = self.ptr
        if ptr is None:
            return
        if self._registered:
            torch: Any = sys.modules.get("torch")    # imported by the registration
            if synchronize and torch is not None and torch.cuda.is_initialized():
                torch.cuda.synchronize()
            try:
                rc = int(torch.cuda.cudart().cudaHostUnregister(ptr))
            except Exception as e:   # noqa: BLE001 - the runtime may be torn down already
                logger.debug(f"cudaHostUnregister failed during release: {e}")
                return
            if rc != 0:
                logger.warning(f"cudaHostUnregister of {self.nbytes} bytes returned {rc}; leaving the mapping")
                return
            self._registered = False
        self._libc.munmap(ptr, self.nbytes)
        self.ptr = None

    def as_tensor(self, shape: Sequence[int], dtype: Any) -> Any:
        """A torch tensor of ``shape`` and ``dtype`` over the start of this memory; it does not own it: keep
        this buffer alive as long as anything (a CUDA graph included) may read the tensor."""
        import torch

        if self.ptr is None:
            raise RuntimeError("the buffer was released")
        numel = math.prod(int(dim) for dim in shape)
        raw = (ctypes.c_uint8 * self.nbytes).from_address(self.ptr)
        return torch.frombuffer(raw, dtype=torch.uint8).view(dtype)[:numel].view(*shape)


def allocate_interleaved_pinned_table(shape: Sequence[int], dtype: Any, *,
                                      interleave: bool = True) -> tuple[Any, InterleavedPinnedBuffer | None]:
    """A pinned host tensor whose pages are spread over every memory node: ``(tensor, buffer)``; ``buffer`` owns
    the memory. Plain ``pin_memory=True`` storage and None when interleaving is off, there are fewer than two
    memory nodes or the policy cannot be applied (a failure then); pages not spread over two nodes are a failure.
    """
    import torch

    def plain() -> tuple[Any, None]:
        return torch.empty(shape, dtype=dtype, device="cpu", pin_memory=True), None

    nodes = numa_memory_nodes()
    if not interleave or not env_bool("SGLANG_PLE_OFFLOAD_NUMA_INTERLEAVE", True) or len(nodes) < 2:
        return plain()
    if not _policy_readable():
        fail("NUMA interleave is unavailable because the process cannot query its memory policy; "
                        "using regular pinned memory.")
        return plain()
    nbytes = math.prod(int(dim) for dim in shape) * torch.empty((), dtype=dtype).element_size()
    try:
        buffer = InterleavedPinnedBuffer(nbytes)
    except (OSError, RuntimeError) as error:
        fail(f"NUMA-interleaved pinned allocation failed; using regular pinned memory: {error}")
        return plain()
    assert buffer.ptr is not None
    tensor = buffer.as_tensor(shape, dtype)
    counts = numa_page_counts(buffer.ptr, buffer.nbytes)
    if len(set(counts) & set(nodes)) < 2:
        try:
            fail(f"NUMA interleave policy did not spread the pinned table across the memory nodes "
                            f"{nodes}; pages per node {counts}.")
        except BaseException:
            buffer.release()
            raise
    else:
        logger.info(f"Pinned {nbytes / 2**30:.1f} GiB of host memory across NUMA nodes; pages per node {counts}")
    return tensor, buffer
