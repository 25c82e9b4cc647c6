"""The memory policy of one range of memory (:func:`bind_memory`) and where its pages are now
(:func:`page_placement`); the kernel calls are :mod:`numabind.backends.range`.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import live
from ._base import Strictness
from ._util import FrozenMap
from .backends import get_backend
from .backends.range import (MPOL_MF_MOVE, MPOL_MF_STRICT, PAGE_SIZE, buffer_address, mbind_range, page_status,
                             range_backend, range_policy, release)
from .bind import strict_default, strict_label
from .cpulist import format_cpulist
from .errors import BindError, NumabindError, PlanError, warn_degraded
from .plan import MEM_POLICIES, Plan, format_weights, narrow_nodes

if TYPE_CHECKING:  # pragma: no cover
    from .backends import NativeBackend
    from .types import BackendName, MemPolicy

__all__ = ["MemoryReport", "PagePlacement", "bind_memory", "page_placement"]

log = logging.getLogger(__name__)

#: The largest address (exclusive) of a range: user space of a 64-bit kernel fits well below it.
_ADDRESS_END = 1 << 64
#: Statuses of move_pages(2) that mean "no page there yet" (EFAULT: some kernels' untouched or zero page).
_NOT_FAULTED = (-errno.ENOENT, -errno.EFAULT)


@dataclass(frozen=True)
class PagePlacement:
    """Where the pages of one range are, by ``move_pages(2)`` in query mode: ``pages`` in the range, ``by_node``
    (node -> pages), ``not_faulted`` (never touched yet), ``errors`` (errno -> pages the kernel would not place).
    """

    pages: int
    by_node: Mapping[int, int]                  # a FrozenMap once made, without zero counts
    not_faulted: int = 0
    errors: Mapping[int, int] = field(default_factory=FrozenMap)   # likewise

    def __post_init__(self) -> None:
        object.__setattr__(self, "pages", int(self.pages))
        object.__setattr__(self, "by_node", FrozenMap({int(n): int(c) for n, c in self.by_node.items() if c}))
        object.__setattr__(self, "not_faulted", int(self.not_faulted))
        object.__setattr__(self, "errors", FrozenMap({int(e): int(c) for e, c in (self.errors or {}).items() if c}))

    @property
    def faulted(self) -> int:
        """Pages that are somewhere (on a node)."""
        return sum(self.by_node.values())

    def outside(self, nodes: frozenset[int]) -> int:
        """Pages on a node not in ``nodes``."""
        return sum(c for n, c in self.by_node.items() if n not in nodes)

    def describe(self) -> str:
        where = " ".join(f"N{n}={c}" for n, c in self.by_node.items()) or "none on a node"
        extra = f", {self.not_faulted} not faulted in" if self.not_faulted else ""
        if self.errors:
            extra += ", " + ", ".join(f"{c} {errno.errorcode.get(e, e)}" for e, c in self.errors.items())
        return f"{self.pages} pages: {where}{extra}"

    def to_dict(self) -> dict[str, Any]:
        return {"pages": self.pages, "by_node": {str(n): c for n, c in self.by_node.items()},
                "not_faulted": self.not_faulted,
                "errors": {errno.errorcode.get(e, str(e)): c for e, c in self.errors.items()}}


@dataclass(frozen=True)
class MemoryReport:
    """What :func:`bind_memory` did to one page-aligned range, and where its pages are afterwards: ``applied``
    (else ``error``), ``read_back`` (``(mode, nodes)`` the kernel holds for the first page; None: unread),
    ``placement`` (None with ``verify=False``) and ``warnings`` (every degradation, with the reason).
    """

    address: int
    length: int
    mode: str
    nodes: frozenset[int]
    move: bool
    backend: str
    applied: bool
    error: str | None = None
    read_back: tuple[str, frozenset[int]] | None = None
    placement: PagePlacement | None = None
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        read_back = self.read_back
        for name, value in (("address", int(self.address)), ("length", int(self.length)),
                            ("nodes", frozenset(self.nodes)), ("move", bool(self.move)),
                            ("applied", bool(self.applied)),
                            ("read_back", None if read_back is None else (read_back[0], frozenset(read_back[1]))),
                            ("warnings", tuple(self.warnings))):
            object.__setattr__(self, name, value)

    @property
    def pages(self) -> int:
        """Pages in the range."""
        return self.length // PAGE_SIZE

    @property
    def off_nodes(self) -> int:
        """Pages on a node outside ``nodes`` (0 for a policy without nodes, or when not counted)."""
        if self.placement is None or not self.nodes:
            return 0
        return self.placement.outside(self.nodes)

    @property
    def ok(self) -> bool:
        """The kernel holds the policy and no page is on another node."""
        return self.applied and not self.warnings

    def describe(self) -> str:
        what = f"{self.mode} {format_cpulist(self.nodes)}" if self.nodes else self.mode
        state = "set" if self.applied else f"NOT set ({self.error})"
        where = f"; {self.placement.describe()}" if self.placement is not None else ""
        return f"{what} on {self.length} bytes at {self.address:#x} {state}{where}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "address": self.address, "length": self.length, "pages": self.pages, "mode": self.mode,
            "nodes": format_cpulist(self.nodes), "move": self.move, "backend": self.backend,
            "applied": self.applied, "error": self.error,
            "read_back": None if self.read_back is None else {"mode": self.read_back[0],
                                                              "nodes": format_cpulist(self.read_back[1])},
            "placement": None if self.placement is None else self.placement.to_dict(),
            "off_nodes": self.off_nodes, "warnings": list(self.warnings),
        }


# ----------------------------------------------------------------------------- the range of a buffer
def _range_of(buf: object, length: int | None) -> tuple[int, int, Any]:
    """``(address, bytes, keep)`` of what ``bind_memory`` was given; ``keep`` holds a buffer till released."""
    if isinstance(buf, tuple):
        if len(buf) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in buf):
            raise PlanError(f"bind_memory takes an (address, length) pair of two ints, got {buf!r}"[:300])
        address, size = buf
        if address <= 0 or size < 0 or address + size > _ADDRESS_END:
            raise PlanError(f"bind_memory: ({address:#x}, {size}) is not a range of this address space; "
                            f"give the start address and the length in bytes of memory this process maps")
        keep = None
    elif callable(getattr(buf, "data_ptr", None)) and not _has_buffer(buf):
        address, size, keep = _tensor_range(buf), _nbytes(buf), None
    else:
        try:
            address, size, keep = buffer_address(buf)
        except TypeError:
            raise PlanError(f"bind_memory needs an object with the buffer protocol (bytearray, mmap, memoryview, "
                            f"numpy array), a tensor or storage with data_ptr() and nbytes, or an (address, "
                            f"length) pair; got {type(buf).__name__}") from None
        except BufferError as e:
            raise PlanError(f"bind_memory: the {type(buf).__name__} is not one contiguous range ({e}); pass a "
                            f"contiguous buffer, or the (address, length) of the memory behind it") from None
        except ImportError as e:
            raise BindError(errno.ENOSYS, "mbind", f"{e}") from None
    if length is not None:
        if not isinstance(length, int) or isinstance(length, bool):
            release(keep)
            raise PlanError(f"bind_memory: length must be an int number of bytes, got {length!r}")
        if length > size or length < 0:
            release(keep)
            raise PlanError(f"bind_memory: length={length} does not fit the buffer of {size} bytes; give a length "
                            f"from 1 to {size}, or leave it out for the whole buffer")
        size = length
    if size == 0:
        release(keep)
        raise PlanError("bind_memory: the range is empty (zero bytes); give a buffer or length of at least one byte")
    return address, size, keep


def _has_buffer(obj: object) -> bool:
    try:
        memoryview(obj).release()  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


def _tensor_range(obj: Any) -> int:
    device = getattr(obj, "device", None)
    kind = getattr(device, "type", device)
    if kind is not None and str(kind) != "cpu":
        raise PlanError(f"bind_memory: the {type(obj).__name__} lives on {kind}, not in host memory; bind a CPU "
                        f"tensor (pinned or not) or its untyped_storage()")
    contiguous = getattr(obj, "is_contiguous", None)
    if callable(contiguous) and not contiguous():
        raise PlanError(f"bind_memory: the {type(obj).__name__} is not contiguous; pass its untyped_storage() or a "
                        f"contiguous tensor")
    address = int(obj.data_ptr())
    if address <= 0:
        raise PlanError(f"bind_memory: the {type(obj).__name__} has no memory behind it (data_ptr() is 0)")
    return address


def _nbytes(obj: Any) -> int:
    nbytes = getattr(obj, "nbytes", None)
    if callable(nbytes):
        nbytes = nbytes()
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
        raise PlanError(f"bind_memory: cannot tell the size of the {type(obj).__name__} (nbytes is {nbytes!r}); "
                        f"pass an (address, length) pair")
    return nbytes


def _pages(address: int, size: int) -> tuple[int, int]:
    """The page-aligned ``(start, length)`` that covers ``size`` bytes from ``address``."""
    start = address - address % PAGE_SIZE
    end = -(-(address + size) // PAGE_SIZE) * PAGE_SIZE
    return start, end - start


# ----------------------------------------------------------------------------- the policy
def _policy(plan: object, mode: str | None, nodes: object) -> tuple[str, frozenset[int], Plan]:
    if isinstance(plan, str):
        if mode is not None:
            raise PlanError(f"bind_memory got the mode twice ({plan!r} and mode={mode!r}); give one")
        plan, mode = None, plan
    if plan is not None:
        if not isinstance(plan, Plan):
            raise PlanError(f"bind_memory needs a numabind.Plan or a mode name, got {type(plan).__name__}"[:300])
        if mode is not None or nodes is not None:
            raise PlanError("bind_memory got a Plan and mode=/nodes= too; give the policy one way")
        if plan.mem_policy is None:
            raise PlanError(f"bind_memory: the plan ({plan.describe()}) has no memory policy; give one, e.g. "
                            f"Plan(mem_policy='bind', mem_nodes={{0}}), or mode='bind', nodes={{0}}")
        return plan.mem_policy, plan.mem_nodes or frozenset(), plan
    if mode is None:
        raise PlanError("bind_memory needs a memory policy: a Plan, or mode= (one of "
                        f"{', '.join(MEM_POLICIES)}) with nodes=")
    if mode not in MEM_POLICIES:
        raise PlanError(f"bind_memory: mode {mode!r} is not one of {', '.join(MEM_POLICIES)}")
    built = Plan(mem_policy=mode, mem_nodes=nodes)   # the one check of a mode and its nodes
    assert built.mem_policy is not None
    return built.mem_policy, built.mem_nodes or frozenset(), built


def _check_nodes(policy: str, nodes: frozenset[int]) -> None:
    if not nodes:
        return
    limits = live.limits()
    _, why = narrow_nodes(nodes, limits, policy)
    if why:
        usable = limits.memory_nodes & limits.allowed_nodes
        raise PlanError(f"bind_memory: {why}; pick nodes from {format_cpulist(usable) or 'none'}")


# ----------------------------------------------------------------------------- the public functions
def page_placement(buf: object, *, length: int | None = None, backend: BackendName | None = None) -> PagePlacement:
    """Where the pages of ``buf`` (as :func:`bind_memory` takes it) are now, by ``move_pages(2)`` in query mode.
    Raises PlanError on bad input and BindError when the kernel (or the backend) cannot say."""
    address, size, keep = _range_of(buf, length)
    try:
        start, span = _pages(address, size)
        be = range_backend(get_backend(backend)[0])
        return _count(be, start, span // PAGE_SIZE)
    finally:
        release(keep)


def _count(be: NativeBackend, start: int, pages: int) -> PagePlacement:
    by_node: dict[int, int] = {}
    errors: dict[int, int] = {}
    not_faulted = 0
    for chunk in page_status(be, start, pages):
        for status in chunk:
            if status >= 0:
                by_node[status] = by_node.get(status, 0) + 1
            elif status in _NOT_FAULTED:
                not_faulted += 1
            else:
                errors[-status] = errors.get(-status, 0) + 1
    return PagePlacement(pages, by_node, not_faulted, errors)


def bind_memory(buf: object, plan: Plan | MemPolicy | None = None, *, mode: MemPolicy | None = None,
                nodes: object = None, length: int | None = None, move: bool = False,
                strict: Strictness | None = None, verify: bool = True,
                backend: BackendName | None = None) -> MemoryReport:
    """Set the NUMA memory policy of one range of memory (``mbind(2)``) and say where its pages are.

    ``buf``: an object with the buffer protocol (read-only too), an object with ``data_ptr()`` and ``nbytes`` (a
    CPU torch tensor or its ``untyped_storage()``), or an ``(address, length)`` pair; ``length`` takes its first
    bytes. **The policy covers whole pages**: memory sharing the range's first and last pages gets it too. The
    policy: a :class:`~numabind.plan.Plan`'s, or its name as ``plan`` or ``mode=`` with ``nodes=``.
    ``move=True`` (or the plan's ``migrate``) also moves the pages already there (``MPOL_MF_MOVE``).

    Returns a frozen :class:`MemoryReport`. ``strict`` (default ``$NUMABIND_STRICT``): ``True`` raises BindError
    when the kernel refused or pages are on other nodes after the call, ``"partial"`` only when it refused;
    ``False`` reports either in ``warnings`` with a WARNING. Bad input raises PlanError.
    """
    strict = strict_default(strict)
    if not isinstance(move, bool):
        raise PlanError(f"bind_memory: move must be True or False, got {move!r}")
    policy, node_set, built = _policy(plan, mode, nodes)
    move = move or built.migrate
    if move and not node_set:
        raise PlanError(f"bind_memory: move=True needs nodes to move the pages to; {policy!r} names none")
    _check_nodes(policy, node_set)
    address, size, keep = _range_of(buf, length)
    try:
        return _bind(address, size, policy, node_set, built, move, strict, verify, backend)
    finally:
        release(keep)


def _bind(address: int, size: int, policy: str, nodes: frozenset[int], plan: Plan, move: bool,
          strict: Strictness, verify: bool, backend: str | None) -> MemoryReport:
    start, span = _pages(address, size)
    what = f"{policy} {format_cpulist(nodes)}" if nodes else policy
    where = f"{span // PAGE_SIZE} pages at {start:#x}"
    warnings: list[str] = []
    if plan.weights and policy == "weighted-interleave":
        system = live.interleave_weights()
        have = {n: system.weights.get(n) for n in plan.weights} if system is not None else {}
        if have != dict(plan.weights):
            text = (f"weights {format_weights(plan.weights)} differ from the system's "
                    f"({format_weights({n: w for n, w in have.items() if w}) or 'none'}); a range interleaves by "
                    f"the system's weights: set them with numabind.set_interleave_weights")
            if strict is True:
                raise PlanError(f"bind_memory: {text}")
            warnings.append(text)
    flags = (MPOL_MF_MOVE | (MPOL_MF_STRICT if strict is True else 0)) if move else 0
    be_name = "none"
    error: BindError | None = None
    be: NativeBackend | None = None
    try:
        chosen = get_backend(backend)[0]
        be_name = chosen.name
        be = range_backend(chosen)
        mbind_range(be, start, span, policy, nodes, flags)
    except BindError as e:
        error = e
        if e.errno == errno.EINVAL and policy == "weighted-interleave" and live.interleave_weights() is None:
            error = BindError(e.errno, e.syscall, f"{e.detail}; this kernel has no weighted interleave (Linux 6.9 "
                                                  f"and newer): use 'interleave'")
    except NumabindError as e:   # no backend at all, or a forced one that cannot load
        error = BindError(errno.ENOSYS, "mbind", str(e))
    if error is not None and strict in (True, "partial"):
        raise error
    read_back: tuple[str, frozenset[int]] | None = None
    placement: PagePlacement | None = None
    if be is not None:
        try:
            read_back = range_policy(be, start)
        except BindError as e:
            warnings.append(f"the range's policy could not be read back: {e}")
        if verify:
            try:
                placement = _count(be, start, span // PAGE_SIZE)
            except BindError as e:
                warnings.append(f"where the pages are could not be counted: {e}")
    if error is not None:
        warnings.insert(0, f"memory policy {what} not set on {where}: {error}")
    elif read_back is not None and read_back != (policy, nodes) and policy != "default":
        warnings.append(f"the kernel holds {read_back[0]} {format_cpulist(read_back[1])} for the range, not {what}")
    if error is None and placement is not None and nodes:
        off = placement.outside(nodes)
        if off:
            others = {n: c for n, c in placement.by_node.items() if n not in nodes}
            fix = ("the kernel could not move them (memory full there, or pages shared with another process)"
                   if move else "they were there before the policy was set: pass move=True to move them")
            warnings.append(f"{off} of {placement.pages} pages are on nodes {format_cpulist(others)}, outside "
                            f"{format_cpulist(nodes)}: {fix}")
    report = MemoryReport(start, span, policy, nodes, move, be_name, error is None,
                          None if error is None else str(error), read_back, placement, tuple(warnings))
    if warnings and strict is True:
        raise BindError(errno.EIO, "mbind", f"{what} on {where} (strict): " + "; ".join(warnings))
    for text in warnings:
        log.warning("bind_memory (%s): %s", strict_label(strict), text)
        warn_degraded(f"bind_memory ({strict_label(strict)}): {text}", "numabind.memory")   # where logging shows nothing
    if error is None:
        log.info("bind_memory: %s on %s%s", what, where,
                 f"; {placement.describe()}" if placement is not None else "")
    return report
