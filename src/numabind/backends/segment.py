"""Shared-memory segments mapped into this process so that a memory policy can be set on them: a System V
segment keyed by a file or a tmpfs/hugetlbfs file mapped shared, the page-by-page reads of such a range and the
touch that faults it in. Only calls live here (numactl's ``--shm``/``--file`` rules are the caller's); every
refusal is a :class:`~numabind.errors.BindError` naming the call and what was asked.
"""

from __future__ import annotations

import errno
import mmap
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import BindError
from . import get_backend
from .native import NativeBackend, load_native
from .range import PAGE_SIZE, buffer_address, mbind_range, page_node, range_backend, range_mode, release

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable, Iterator

__all__ = ["IPC_CREAT", "SHM_HUGETLB", "Segment", "attach_sysv", "ftok", "huge_page_size", "map_file",
           "open_file", "page_nodes", "page_policies", "segment_backend", "set_policy", "touch"]

# <sys/ipc.h>, <sys/shm.h> (Linux)
IPC_CREAT = 0o1000
SHM_HUGETLB = 0o4000


@dataclass
class Segment:
    """A shared range mapped into this process: ``length`` bytes at ``address``, which is ``offset`` bytes into
    the segment or file ``name``; ``page_size`` the unit of its policy (a huge page for hugetlb memory)."""

    kind: str                  # "shm" (System V) or "file"
    name: str
    address: int
    length: int
    offset: int
    page_size: int
    _hold: list[Any] = field(default_factory=list, repr=False)

    def close(self) -> None:
        """Unmap the range (the segment or file and its policy stay)."""
        hold, self._hold = self._hold, []
        for item in reversed(hold):
            if isinstance(item, int):
                load_native().lib.nb_shmdt(load_native().ffi.cast("void *", item))
            elif isinstance(item, mmap.mmap):
                item.close()
            else:
                release(item)


def segment_backend() -> NativeBackend:
    """The backend that sets and reads a range's policy (the compiled core's); BindError when there is none."""
    be, _ = get_backend()
    return range_backend(be)


def huge_page_size() -> int:
    """The default huge page size (``Hugepagesize`` of /proc/meminfo), else the base page size."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("Hugepagesize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return PAGE_SIZE


def ftok(path: str, proj_id: int) -> int:
    """The System V key of the file at ``path`` (``ftok(3)``: the key ``ipcrm`` and numactl compute), or
    -errno when the file cannot be stat'ed."""
    return int(load_native().lib.nb_ftok(os.fsencode(path), proj_id & 0xFF))


def attach_sysv(name: str, *, length: int, offset: int, mode: int, shmid: int, huge: bool,
                say: Callable[[str], None], need_length: Callable[[], None]) -> Segment:
    """Attach the System V segment keyed by the file ``name`` and id ``shmid``, creating the file and the segment
    (``length + offset`` bytes, ``mode``, ``huge`` pages; ``need_length`` raises when ``length`` is 0) when missing;
    ``say`` gets each notice. The range is ``length`` bytes (0: the whole segment) from ``offset``. Raises BindError."""
    lib, ffi = load_native().lib, load_native().ffi
    key = ftok(name, shmid)
    if key < 0:
        say(f"Creating shm key file {name} mode {mode:04o}")
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode))
        except OSError as e:
            raise BindError(e.errno or errno.EIO, "creat", f"cannot create key for shm {name}") from None
        key = ftok(name, shmid)
        if key < 0:
            raise BindError(-key, "ftok", f"cannot get key for newly created shm key file {name}")
    flags = SHM_HUGETLB if huge else 0
    sid = int(lib.nb_shmget(key, length, flags))
    if sid == -errno.ENOENT:
        if length == 0:
            need_length()
        say(f"Creating shared memory segment {name} id {shmid} mode {mode:04o} length "
            f"{(length + offset) / (1024 * 1024):.0f}MB")
        sid = int(lib.nb_shmget(key, length + offset, IPC_CREAT | mode | flags))
        if sid < 0:
            fix = ""
            if huge and -sid in (errno.ENOMEM, errno.EPERM):
                fix = ("; huge pages must be reserved first (/proc/sys/vm/nr_hugepages) and the group allowed "
                       "(/proc/sys/vm/hugetlb_shm_group), or drop --huge")
            raise BindError(-sid, "shmget", f"cannot create shared memory segment {name} of {length + offset} "
                            f"bytes (mode {mode:04o}{', huge pages' if huge else ''}){fix}")
    if length == 0:
        size = ffi.new("unsigned long long *")
        rc = lib.nb_shm_size(sid, size) if sid >= 0 else sid
        if rc < 0:
            raise BindError(-rc if sid >= 0 else errno.EINVAL, "shmctl", f"IPC_STAT of the segment of {name}")
        length = int(size[0])
    addr = ffi.new("void **")
    rc = lib.nb_shmat(sid, addr) if sid >= 0 else -errno.EINVAL
    if rc < 0:
        why = f"shmget found no segment of {length} bytes for {name} ({os.strerror(-sid)})" if sid < 0 else name
        raise BindError(-rc, "shmat", why)
    base = int(ffi.cast("uintptr_t", addr[0]))
    return Segment("shm", name, base + offset, length, offset, huge_page_size() if huge else PAGE_SIZE, [base])


def open_file(name: str, *, length: int, offset: int, mode: int,
              need_length: Callable[[], None]) -> tuple[int, int]:
    """Open (create with ``mode`` when missing, after ``need_length`` when ``length`` is 0) the file ``name``
    and make it at least ``length + offset`` bytes long; ``(fd, its block size)``: the page size of its
    filesystem (tmpfs, hugetlbfs). Raises BindError."""
    try:
        fd = os.open(name, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        if length == 0:
            need_length()
        try:
            fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
        except OSError as e:
            raise BindError(e.errno or errno.EIO, "open", f"cannot create file {name}") from None
    try:
        st = os.fstat(fd)
        if length + offset > st.st_size:
            os.ftruncate(fd, length + offset)
    except OSError as e:
        os.close(fd)
        raise BindError(e.errno or errno.EIO, "ftruncate", f"{name} to {length + offset} bytes") from None
    return fd, st.st_blksize


def map_file(fd: int, name: str, *, length: int, offset: int, page_size: int) -> Segment:
    """Map ``length`` bytes of the open file ``fd`` from ``offset``, shared and writable (``fd`` is closed).
    Raises BindError."""
    try:
        m = mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
    except (OSError, ValueError) as e:   # ValueError: an offset that is not page-aligned
        raise BindError(getattr(e, "errno", None) or errno.EINVAL, "mmap",
                        f"shm mmap of {length} bytes of {name} from offset {offset:#x} (the offset must be a "
                        f"multiple of the page size, {mmap.ALLOCATIONGRANULARITY:#x})") from None
    finally:
        os.close(fd)
    address, _, keep = buffer_address(m)
    return Segment("file", name, address, length, offset, page_size, [m, keep])


def set_policy(be: NativeBackend, seg: Segment, policy: str, nodes: frozenset[int], flags: int) -> None:
    """``mbind`` the whole range to ``policy`` over ``nodes`` with ``flags``. Raises BindError."""
    mbind_range(be, seg.address, seg.length, policy, nodes, flags)


def page_policies(be: NativeBackend, seg: Segment) -> Iterator[tuple[int, int, frozenset[int]]]:
    """``(offset in the range, raw mode, nodes)`` of each page of the range, in order."""
    for at in range(0, seg.length, seg.page_size):
        mode, nodes = range_mode(be, seg.address + at)
        yield at, mode, nodes


def page_nodes(be: NativeBackend, seg: Segment) -> Iterator[tuple[int, int]]:
    """``(offset in the range, node)`` of each page of the range, in order (each page is faulted in)."""
    for at in range(0, seg.length, seg.page_size):
        yield at, page_node(be, seg.address + at)


def touch(seg: Segment) -> int:
    """Fault in every base page of the range without changing what it holds; the pages touched."""
    native = load_native()
    return int(native.lib.nb_touch_range(native.ffi.cast("void *", seg.address), seg.length, PAGE_SIZE))
