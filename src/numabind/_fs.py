"""The one place that reads sysfs and procfs files, relative to a root (the live ``/``, a dump's directory or
tarball, an hwloc XML file; ``docs/discovery.rst``).

A directory root other than ``/`` is read as a chroot at it would see it (:func:`_walk`): no link leads out of
it. Every read is bounded and non-blocking (:func:`read_bounded`, the one such read in numabind): anything but a
regular file is refused, and text ends at the first NUL byte.
"""

import os
import stat
import sys
from _thread import get_ident as _get_ident   # built in, loaded by every interpreter's import system

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Sequence

    from ._hwloc_xml import HwlocTopology

from ._base import excerpt, printable
from .errors import NumabindError

__all__ = ["FsReader", "RefusedFile", "malformed", "read_bounded", "read_in_root", "resolve_root", "ascii_int", "key_values", "MAX_READ",
           "WEIGHTS_AUTO_NAMES", "WEIGHTS_DIR"]

#: Largest file (bytes) a read without an explicit limit accepts.
MAX_READ = 8 << 20

#: The system-wide weights of MPOL_WEIGHTED_INTERLEAVE (Linux 6.9+): one file ``nodeN`` per node holding
#: its weight (1-255), and from Linux 6.16 ``auto`` (``true``: the kernel derives them from the firmware's
#: bandwidth figures; writing a weight switches it to ``false``). Relative to the file-system root.
WEIGHTS_DIR = "sys/kernel/mm/mempolicy/weighted_interleave"
#: Names the ``auto`` switch has been seen under (6.16's, and ``__auto_type`` where a C23 compiler
#: expanded the kernel's ``auto`` macro in the attribute's name).
WEIGHTS_AUTO_NAMES = ("auto", "__auto_type")

_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
_NOFOLLOW_FLAGS = _OPEN_FLAGS | os.O_NOFOLLOW
#: A directory on the way of a confined walk: opened for its descriptor only, never through a link.
_WALK_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Links a confined walk follows before it gives up (the kernel's own limit, ELOOP).
MAX_LINKS = 40
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}


def ascii_int(text: str, *, signed: bool = False, max_digits: int = 20) -> int | None:
    """``text`` (whitespace trimmed) as a decimal integer of ASCII digits, else None. Unlike ``int()``, non-ASCII
    digits, underscores, ``+`` and more than ``max_digits`` digits are refused."""
    body = text.strip()
    negative = signed and body.startswith("-")
    if negative:
        body = body[1:]
    if not body or len(body) > max_digits or not (body.isascii() and body.isdigit()):
        return None
    value = int(body)
    return -value if negative else value


def key_values(text: str, *, first_block: bool = False) -> dict[str, str]:
    """The ``key: value`` lines of ``text`` as a dict, both sides trimmed, split at the first colon; of a key
    given twice the first is kept. ``first_block``: stop at the first blank line after a field (``cpuinfo``)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if first_block and out and not line.strip():
                break
            continue
        key = key.strip()
        if key not in out:
            out[key] = value.strip()
    return out


def malformed(reader: "FsReader", rel: str, text: str, why: str) -> NumabindError:
    """The error for a file of ``reader`` that does not parse: its path, why, and an excerpt of the text."""
    return NumabindError(f"malformed {printable(reader.path(rel))}: {why} (content: {excerpt(text)})")


# -- roots -----------------------------------------------------------------------


def _resolve(root: str | os.PathLike[str] | None) -> "tuple[str, str, HwlocTopology | None]":
    """(root directory to read, what the user gave: shown in messages, the hwloc XML file it is or None)."""
    from_env = root is None
    if root is None:
        root = os.environ.get("NUMABIND_FSROOT") or "/"
    given = os.fspath(root)
    path = os.path.abspath(given)
    if path == "/":
        return "/", "/", None
    where = f"$NUMABIND_FSROOT={given!r}" if from_env else repr(given)
    from ._dump import dump_root, is_tarball, unpack   # a replayed machine only

    if os.path.isdir(path):
        return dump_root(path), path, None
    if os.path.isfile(path):
        if _is_hwloc_xml(path):
            from ._hwloc_xml import xml_root   # read once, its files served from memory (HwlocTopology.tree)

            return path, path, xml_root(path, lambda: _hwloc_xml_bytes(path))
        if not is_tarball(path):
            raise NumabindError(
                f"discovery root {where} is a file but neither an hwloc XML topology nor a tar archive; give a "
                f"directory holding sys/ and proc/, an hwloc-gather-topology .tar.bz2, or an hwloc XML file "
                f"(lstopo FILE.xml)")
        return dump_root(unpack(path)), path, None
    if os.path.lexists(path) or os.path.exists(path):
        raise NumabindError(f"discovery root {where} is neither a directory nor a tarball")
    raise NumabindError(
        f"discovery root {where} does not exist; give a directory holding sys/ and proc/ "
        f"(a dump of a machine), an hwloc-gather-topology .tar.bz2, or / for this machine")


def _is_hwloc_xml(path: str) -> bool:
    """Whether the file ``path`` is an hwloc XML topology, by its name or its first bytes."""
    from ._hwloc_xml import looks_like_hwloc_xml

    try:
        head = b"" if path.lower().endswith(".xml") else read_bounded(path, 256, prefix=True)
    except (OSError, NumabindError):
        return False
    return looks_like_hwloc_xml(path, head)


def _hwloc_xml_bytes(path: str) -> bytes:
    """The bytes of the hwloc XML file ``path``, through the one bounded read (capped before a byte is read)."""
    from ._hwloc_xml import MAX_XML_BYTES, read_error

    try:
        return read_bounded(path, MAX_XML_BYTES)
    except (OSError, RefusedFile) as exc:
        raise read_error(path, exc) from None


def resolve_root(root: str | os.PathLike[str] | None = None) -> str:
    """The discovery root (the argument, ``$NUMABIND_FSROOT`` or ``/``; a tarball unpacked)."""
    return _resolve(root)[0]


# -- the bounded read ------------------------------------------------------------

class RefusedFile(NumabindError):
    """A file :func:`read_bounded` will not read: ``why`` is ``"kind"`` (not a regular file: a FIFO, a
    device, a directory, a socket; ``mode`` is its ``st_mode``), ``"owner"`` (not the ``uid`` asked for)
    or ``"size"`` (more than the cap). ``path`` is the path as given, ``reason`` the rest of the message."""

    def __init__(self, path: str, why: str, reason: str, mode: int = 0) -> None:
        super().__init__(f"{path} {reason}")
        self.path, self.why, self.reason, self.mode = path, why, reason, mode


def _kind_of(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def read_bounded(path: str, cap: int, *, dir_fd: int | None = None, nofollow: bool = False,
                 uid: int | None = None, prefix: bool = False) -> bytes:
    """The bytes of the regular file ``path`` (relative to ``dir_fd``), opened non-blocking: anything but a regular
    file is refused before a byte is read. ``nofollow``: a link as the last component is ELOOP; ``uid``: another
    owner's file is refused; more than ``cap`` bytes is refused, unless ``prefix`` asks for the first ``cap``.
    Raises OSError as the kernel gives it, ValueError for a path holding a NUL, :class:`RefusedFile`."""
    fd = os.open(path, _NOFOLLOW_FLAGS if nofollow else _OPEN_FLAGS, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RefusedFile(path, "kind", f"is {_kind_of(st.st_mode)}, not a regular file", st.st_mode)
        if uid is not None and st.st_uid != uid:
            raise RefusedFile(path, "owner", f"belongs to uid {st.st_uid}, not {uid}", st.st_mode)
        if not prefix and st.st_size > cap:
            raise RefusedFile(path, "size", f"is larger than {cap} bytes", st.st_mode)
        end = cap if prefix else cap + 1      # one byte more than the cap tells a file over it
        chunks: list[bytes] = []
        size = 0
        while size < end:
            want = min(65536, end - size)
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            # a short read ends a file with a size; procfs and cgroup files (size 0) are read until read() is empty
            if len(chunk) < want and st.st_size > 0:
                break
    finally:
        os.close(fd)
    if size > cap:
        raise RefusedFile(path, "size", f"is larger than {cap} bytes", st.st_mode)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


# -- the confined walk ----------------------------------------------------------


def _walk(root: str, rel: str, *, lexical_rest: bool = False) -> "tuple[int, str, list[str]]":
    """``rel`` below ``root`` resolved as a chroot at ``root`` would: ``(descriptor of the directory holding the
    last component, its name, the names of the whole resolved path)``; the name is ``""`` for a directory reached
    by ``..`` or the root. A link is followed by its text only (an absolute one from ``root``), each directory
    opened ``O_NOFOLLOW``. The caller closes the descriptor. Raises OSError: the kernel's, ELOOP after
    :data:`MAX_LINKS` links, EXDEV for ``..`` above the root. ``lexical_rest``: past a link, from a missing
    directory on, the rest is taken as written (as ``os.path.realpath`` does); the name is then ``""``."""
    import errno   # a directory root only: off numabind run's path

    todo = [p for p in reversed(rel.split("/")) if p and p != "."]   # the next component last
    fds = [os.open(root, _WALK_FLAGS & ~os.O_NOFOLLOW)]              # the root as the user named it
    names: list[str] = []
    links = 0
    try:
        while todo:
            part = todo.pop()
            if part == "..":
                if len(fds) == 1:
                    raise OSError(errno.EXDEV, f"'..' climbs above the root {root}", rel)
                os.close(fds.pop())
                names.pop()
                continue
            if todo:
                try:
                    fds.append(os.open(part, _WALK_FLAGS, dir_fd=fds[-1]))
                    names.append(part)
                    continue
                except OSError as e:
                    if lexical_rest and links and e.errno == errno.ENOENT:   # inside a link's target
                        for rest in [part, *reversed(todo)]:
                            if rest != "..":
                                names.append(rest)
                            elif names:
                                names.pop()
                        return fds.pop(), "", names
                    if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    try:
                        target = os.readlink(part, dir_fd=fds[-1])
                    except OSError:
                        raise e from None           # a file where a directory is wanted
            else:
                try:
                    target = os.readlink(part, dir_fd=fds[-1])
                except OSError:                     # not a link (EINVAL), or missing: the caller's open says
                    names.append(part)
                    return fds.pop(), part, names
            links += 1
            if links > MAX_LINKS:
                raise OSError(errno.ELOOP, "too many levels of symbolic links", rel)
            if target.startswith("/"):
                while len(fds) > 1:
                    os.close(fds.pop())
                names.clear()
            todo.extend(p for p in reversed(target.split("/")) if p and p != ".")
        return fds.pop(), "", names
    finally:
        for fd in fds:
            os.close(fd)


def read_in_root(root: str, rel: str, cap: int, *, prefix: bool = False) -> bytes:
    """:func:`read_bounded` of ``rel`` below ``root`` through the confined walk (a directory is a RefusedFile)."""
    fd, name, _ = _walk(root, rel)
    try:
        if not name:
            raise RefusedFile(rel, "kind", f"is {_kind_of(stat.S_IFDIR)}, not a regular file", stat.S_IFDIR)
        return read_bounded(name, cap, dir_fd=fd, nofollow=True, prefix=prefix)
    finally:
        os.close(fd)


def _stat_in_root(root: str, rel: str) -> "os.stat_result":
    """``os.stat`` of ``rel`` below the directory ``root`` through the confined walk."""
    fd, name, _ = _walk(root, rel)
    try:
        return os.stat(name or ".", dir_fd=fd, follow_symlinks=False)
    finally:
        os.close(fd)


# -- the reader ------------------------------------------------------------------
#: Files up to this size (bytes, less one) are read in one call of the compiled core.
SMALL_READ = 4097
#: The core's NB_NOT_REGULAR and NB_RETRY, read by :func:`_load_core`.
NOT_REGULAR = RETRY = 0
#: Room (bytes) of one :meth:`FsReader.prefetch_numbered`, and the most files and ids it takes.
BATCH_READ = 16384
BATCH_FILES = 64
BATCH_IDS = 64
_CHARS = "char[]"
_INTS = "int[]"
_LONGS = "long[]"
_MISS = object()
#: Buffers handed back after a read, for the next one (a list's pop and append are atomic).
_small_bufs: "list[Any]" = []
_batch_bufs: "list[Any]" = []
_id_bufs: "list[Any]" = []
_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
_core: "tuple[Any, ...] | None" = None
_core_tried = False


def _load_core() -> "tuple[Any, ...] | None":
    """The compiled core's functions :class:`FsReader` calls, or None without one."""
    global _core, _core_tried, NOT_REGULAR, RETRY
    if not _core_tried:
        try:
            from . import _native
            module: "Any" = _native
        except ImportError:
            module = None
        if module is not None and hasattr(module.lib, "nb_read_tree"):
            _core = (module.ffi.new, module.lib.nb_read_file, module.ffi.string, module.lib.nb_list_numbered,
                     module.lib.nb_read_tree, module.ffi.buffer, module.ffi.unpack)
            NOT_REGULAR, RETRY = module.lib.NB_NOT_REGULAR, module.lib.NB_RETRY
        _core_tried = True
    return _core


def _not_regular(path: str, mode: int) -> RefusedFile:
    return RefusedFile(path, "kind", f"is {_kind_of(mode)}, not a regular file: a sysfs or procfs file (or a dump "
                                     f"of one) is always a regular file; check the root", mode)


_names_seen: "dict[tuple[Any, ...], tuple[Any, ...] | None]" = {}


def _encoded_names(new: "Any", names: "Sequence[str]", sub: str, prefix: str,
                   each: "Sequence[str]") -> "tuple[Any, ...] | None":
    """The ``struct nb_tree`` of a prefetch and its arrays (kept), or None when a name holds a NUL."""
    key = (tuple(names), sub, prefix, tuple(each))
    if key in _names_seen:
        return _names_seen[key]
    found = None
    if not any("\0" in part for part in (*names, sub, prefix, *each)):
        arrays = tuple(new(_CHARS, text.encode(_FS_ENCODING, _FS_ERRORS)) for text in (
            "".join(name + "\0" for name in names), sub, prefix, "".join(name + "\0" for name in each)))
        found = (new("struct nb_tree *", {"names": arrays[0], "count": len(names), "sub": arrays[1],
                                          "prefix": arrays[2], "each": arrays[3], "per": len(each)}), arrays)
    if len(_names_seen) < 64:
        _names_seen[key] = found
    return found


def _batch_room(new: "Any") -> "tuple[Any, ...]":
    """The buffers of one :meth:`FsReader.prefetch_numbered` (bytes, spans, ids) and their ``struct nb_tree_room``."""
    data, spans, ids = new(_CHARS, BATCH_READ), new(_LONGS, 2 * BATCH_FILES + 1), new(_INTS, BATCH_IDS)
    return data, spans, ids, new("struct nb_tree_room *", {
        "ids": ids, "idcap": BATCH_IDS, "buf": data, "cap": BATCH_READ, "slot": SMALL_READ, "out": spans,
        "files": BATCH_FILES})


#: The most directory descriptors a reader holds (:meth:`FsReader.hold_dirs`).
DIR_FDS = 64


class _DirFds(dict[str, int]):
    """One thread's held directories of a replayed root (``O_PATH`` descriptors by path)."""

    def __init__(self) -> None:
        super().__init__()
        self.owner: int = _get_ident()
        self.depth: int = 1     # the hold_dirs calls not yet released
        self.free: set[str] = set()   # those reached without a link: their path reads what the descriptor does

    def resolve(self, root: str, rel: str) -> int:
        """The descriptor of the plain directory path ``rel`` (``""``: the root); OSError as the walk's."""
        fd = self.get(rel)
        if fd is not None:
            return fd
        import errno   # a replayed root only: off numabind run's path

        free = True
        if not rel:
            fd = os.open(root, _WALK_FLAGS & ~os.O_NOFOLLOW)
        else:
            parent, _, name = rel.rpartition("/")
            base = self.resolve(root, parent)
            free = parent in self.free
            try:
                fd = os.open(name, _WALK_FLAGS, dir_fd=base)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                fd = _walk_dir(root, rel)     # a link on the way: followed by its text, inside the root
                free = False
        if len(self) >= DIR_FDS:
            self.free.discard(old := next(iter(self)))
            os.close(self.pop(old))
        self[rel] = fd
        if free:
            self.free.add(rel)
        return fd

    def close(self) -> None:
        self.free.clear()
        while self:
            os.close(self.popitem()[1])

    def __del__(self) -> None:
        try:
            self.close()
        except (OSError, TypeError, AttributeError):   # closed already, or the interpreter is shutting down
            pass


def _plain(body: str) -> bool:
    """Whether the relative path ``body`` has no empty component nor one starting with a dot."""
    return "//" not in body and "/." not in "/" + body


def _walk_dir(root: str, rel: str) -> int:
    """A descriptor (``O_PATH``) of the directory ``rel`` below ``root``, reached by :func:`_walk`."""
    fd, name, _ = _walk(root, rel)
    if not name:
        return fd
    try:
        return os.open(name, _WALK_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)


class FsReader:
    """Reads files below ``root`` (``origin``: what was asked for); missing files read as ``None``."""

    __slots__ = ("root", "is_live", "origin", "xml", "_prefix", "_pre", "_dirs")

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root, self.origin, self.xml = _resolve(root)   # xml: an hwloc XML root, its files in memory
        self.is_live = self.root == "/"
        self._prefix = self.root.rstrip("/") + "/"
        self._pre: "dict[str, Any] | None" = None
        self._dirs: "_DirFds | None" = None

    def path(self, rel: str) -> str:
        return self._prefix + rel.lstrip("/")

    def read(self, rel: str, limit: int | None = None) -> str | None:
        """The file's text up to its first NUL byte, or None when it cannot be opened; NumabindError for anything
        but a regular file, or over :data:`MAX_READ` bytes without ``limit`` (then the first ``limit`` bytes).
        A small file is read by the compiled core in one call."""
        if self.xml is not None:
            return self.xml.tree.read(rel, limit)
        pre = self._pre
        direct = self.is_live or self._link_free(rel)    # a replayed root: links only through the confined walk
        if not direct:
            if pre:
                pre.pop(rel, None)
            if direct is None:
                return None
        elif pre and limit is None:
            got = pre.pop(rel, _MISS)
            if got.__class__ is str:
                return got
            if got is not _MISS:
                return self._failed(self._prefix + rel, got)
        path = self._prefix + rel.lstrip("/")
        core = (_core or _load_core()) if direct else None
        if core and limit is None and "\0" not in path:
            buf = _small_bufs.pop() if _small_bufs else core[0](_CHARS, SMALL_READ)
            n = core[1](path.encode(_FS_ENCODING, _FS_ERRORS), buf, SMALL_READ)   # os.fsencode, without its checks
            if 0 <= n < SMALL_READ and n <= MAX_READ:
                text: str = core[2](buf, n).decode("utf-8", errors="replace")   # ffi.string: ends at a NUL
                _small_bufs.append(buf)
                return text
            _small_bufs.append(buf)
            if n < 0:
                return self._failed(path, n)
        try:   # a file too large for one small read, no compiled core, or a replayed root
            cap = MAX_READ if limit is None else limit
            data = (read_bounded(path, cap, prefix=limit is not None) if self.is_live
                    else self._read_in_root(rel, cap, limit is not None))
        except (OSError, ValueError):
            return None
        except RefusedFile as e:
            if e.why == "kind":
                raise _not_regular(path, e.mode) from None
            raise RefusedFile(path, "size", f"is larger than {MAX_READ} bytes; no sysfs or procfs file "
                                            f"discovery reads is that large", e.mode) from None
        nul = data.find(b"\0")
        if nul >= 0:
            data = data[:nul]
        return data.decode("utf-8", errors="replace")

    def _link_free(self, rel: str) -> "bool | None":
        """Whether ``rel`` of a replayed root reaches its file without a link or ``..``; None when it cannot."""
        body = rel.strip("/")
        dirs = self._held()
        if dirs is None or not _plain(body):
            try:
                fd, _, names = _walk(self.root, rel)
            except (OSError, ValueError):
                return None
            os.close(fd)
            return names == [p for p in rel.split("/") if p and p != "."]
        head, _, name = body.rpartition("/")
        try:
            fd = dirs.resolve(self.root, head)
            if not name:
                return True                       # the root itself
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
        except (OSError, ValueError):
            return None
        return head in dirs.free and not stat.S_ISLNK(mode)

    # -- a replayed root: each directory resolved once while held -------------------------------------

    def hold_dirs(self) -> None:
        """Until :meth:`release_dirs`, this thread's reads of a replayed root resolve each directory once and keep
        its descriptor, instead of walking from the root for every file (one discover() long). Calls nest."""
        if self.is_live or self.xml is not None:
            return
        dirs = self._dirs
        if dirs is None:
            self._dirs = _DirFds()
        elif dirs.owner == _get_ident():
            dirs.depth += 1

    def release_dirs(self) -> None:
        """Ends a :meth:`hold_dirs`: the last one closes the descriptors."""
        dirs = self._dirs
        if dirs is None or dirs.owner != _get_ident():
            return
        dirs.depth -= 1
        if dirs.depth <= 0:
            self._dirs = None
            dirs.close()

    def _held(self) -> "_DirFds | None":
        dirs = self._dirs
        return dirs if dirs is not None and dirs.owner == _get_ident() else None

    def _at(self, rel: str) -> "tuple[int, str, bool]":
        """``(directory descriptor, last component of rel, whether the caller closes it)``, held or walked."""
        body = rel.strip("/")
        dirs = self._held()
        if dirs is None or not _plain(body):
            fd, name, _ = _walk(self.root, body)
            return fd, name, True
        head, _, name = body.rpartition("/")
        return dirs.resolve(self.root, head), name, False

    def _read_in_root(self, rel: str, cap: int, prefix: bool) -> bytes:
        """:func:`read_in_root` of ``rel``, through the held directories when there are."""
        fd, name, own = self._at(rel)
        try:
            if name:
                try:
                    return read_bounded(name, cap, dir_fd=fd, nofollow=True, prefix=prefix)
                except OSError as e:
                    import errno   # a replayed root only

                    if own or e.errno != errno.ELOOP:
                        raise
            # a link as the last component (followed by its text, inside the root), or the root itself
            return read_in_root(self.root, rel, cap, prefix=prefix)
        finally:
            if own:
                os.close(fd)

    @staticmethod
    def _failed(path: str, code: int) -> None:
        """A core's read that failed with ``code``: NumabindError for anything but a regular file, else None."""
        if code <= NOT_REGULAR:
            raise _not_regular(path, (NOT_REGULAR - code) << 12)
        return None

    def prefetch_numbered(self, base: str, names: "Sequence[str]", sub: str, prefix: str,
                          each: "Sequence[str]", skip: int = 0) -> list[int]:
        """:meth:`numbered` of ``base/sub``, reading on the way, in one call of the compiled core, the files
        ``base/NAME`` of ``names`` and ``base/sub/<prefix>N/NAME`` of ``each`` for each id N listed whose bit in
        ``skip`` is clear. The next :meth:`read` of each of those files, and only that one, answers with what was
        read here; the next prefetch and :meth:`forget` drop the rest."""
        core = (_core or _load_core()) if self.xml is None else None
        if core and not self.is_live and not self._link_free(f"{base}/{sub}"):
            core = None       # a link on the way (or nothing there): listed and read through the confined walk
        inside = base.strip("/")
        head = inside + "/" if inside else ""         # the prefetched files' names, as read() is asked for them
        where = self._prefix + inside
        what = _encoded_names(core[0], names, sub, prefix, each) if core else None   # None: a name holding a NUL
        if not core or what is None or len(names) > BATCH_FILES or "\0" in where:
            self._pre = None
            return self.numbered(f"{base}/{sub}", prefix)
        bufs = _batch_bufs.pop() if _batch_bufs else _batch_room(core[0])
        listed = core[4](where.encode(_FS_ENCODING, _FS_ERRORS), skip, what[0], bufs[3])
        ids = core[6](bufs[2], listed) if 0 < listed <= BATCH_IDS else []
        keys: list[str] = []
        add = keys.append
        for name in names:
            add(head + name)
        for n in ids:
            if n >= 64 or not skip >> n & 1:
                below = f"{head}{sub}/{prefix}{n}/"
                for name in each:
                    add(below + name)
        del keys[BATCH_FILES:]
        spans = core[6](bufs[1], 1 + 2 * len(keys))   # the bytes used, then [start, length or code] per file
        spans.append(spans[0])                        # where the file after the last would start
        data = core[5](bufs[0], spans[0])[:]
        _batch_bufs.append(bufs)
        text = data.decode("ascii") if data.isascii() else None   # then a byte offset is a character's
        pre: "dict[str, Any]" = {}
        i = 1
        for key in keys:
            start, n = spans[i], spans[i + 1]
            i += 2
            if n >= 0:
                if spans[i] - start <= MAX_READ:      # the bytes read (the text ends at a NUL); else read() refuses it
                    pre[key] = (text[start:start + n] if text is not None
                                else data[start:start + n].decode("utf-8", "replace"))
            elif n != RETRY:
                pre[key] = n
        self._pre = pre
        if listed > BATCH_IDS:
            return self.numbered(f"{base}/{sub}", prefix)
        ids.sort()
        return ids

    def forget(self) -> None:
        """Drops what :meth:`prefetch_numbered` read and no :meth:`read` asked for yet."""
        self._pre = None

    def read_strip(self, rel: str) -> str | None:
        text = self.read(rel)
        return None if text is None else text.strip()

    def read_int(self, rel: str) -> int | None:
        """The file as a signed decimal (or ``0x`` hex) integer; None if missing or not one."""
        text = self.read_strip(rel)
        if text is None:
            return None
        if text.startswith("0x"):
            digits = text[2:]
            if digits and len(digits) <= 16 and digits.isascii() and all(
                    c in "0123456789abcdefABCDEF" for c in digits):
                return int(digits, 16)
            return None
        return ascii_int(text, signed=True)

    def listdir(self, rel: str) -> list[str]:
        if self.xml is not None:
            return self.xml.tree.listdir(rel)
        try:
            if self.is_live:
                return sorted(os.listdir(self.path(rel)))
            return sorted(self._listdir_in_root(rel))
        except (OSError, ValueError):
            return []

    def _listdir_in_root(self, rel: str) -> list[str]:
        """The names in directory ``rel`` of a replayed root, reached through the confined walk."""
        dirs = self._held()
        body = rel.strip("/")
        if dirs is not None and _plain(body):
            return self._list_at(dirs.resolve(self.root, body), ".")
        fd, name, _ = _walk(self.root, rel)
        try:
            return self._list_at(fd, name or ".")
        finally:
            os.close(fd)

    @staticmethod
    def _list_at(dir_fd: int, name: str) -> list[str]:
        fd = os.open(name, _LIST_FLAGS, dir_fd=dir_fd)
        try:
            return os.listdir(fd)
        finally:
            os.close(fd)

    def numbered(self, rel: str, prefix: str) -> list[int]:
        """Sorted ids N of the entries ``<prefix>N`` of directory ``rel`` (ASCII digits only)."""
        path = self._prefix + rel.lstrip("/")
        core = (_core or _load_core()) if self.xml is None and (self.is_live or self._link_free(rel)) else None
        if core and "\0" not in path and "\0" not in prefix:
            ids = _id_bufs.pop() if _id_bufs else core[0](_INTS, 64)
            cap = len(ids)
            while True:
                n = core[3](path.encode(_FS_ENCODING, _FS_ERRORS), prefix.encode(_FS_ENCODING, _FS_ERRORS), ids, cap)
                if n <= cap:
                    found = sorted(core[6](ids, n)) if n > 0 else []
                    if cap == 64:
                        _id_bufs.append(ids)
                    return found
                cap = n
                ids = core[0](_INTS, cap)
        try:
            names = (os.listdir(path) if self.is_live else self.xml.tree.listdir(rel) if self.xml is not None
                     else self._listdir_in_root(rel))
        except (OSError, ValueError):
            return []
        n = len(prefix)
        out = []
        for name in names:
            if name.startswith(prefix):
                digits = name[n:]
                # ASCII digits without a leading zero ("node01" is no kernel's name)
                if (digits.isascii() and digits.isdigit() and len(digits) <= 9
                        and (digits[0] != "0" or digits == "0")):
                    out.append(int(digits))
        out.sort()
        return out

    def stat(self, rel: str) -> "os.stat_result | None":
        """``os.stat`` of ``rel`` (links followed inside a replayed root), or None when it cannot be reached."""
        if self.xml is not None:
            return self.xml.tree.stat(rel)
        try:
            if self.is_live:
                return os.stat(self.path(rel))
            fd, name, own = self._at(rel)
            try:
                st = os.stat(name or ".", dir_fd=fd, follow_symlinks=False)
            finally:
                if own:
                    os.close(fd)
            return _stat_in_root(self.root, rel) if stat.S_ISLNK(st.st_mode) else st   # a link: followed inside
        except (OSError, ValueError):
            return None

    def lstat(self, rel: str) -> "os.stat_result | None":
        """``os.lstat`` of ``rel`` (links before the last component followed inside a replayed root), or None."""
        if self.xml is not None:
            return self.xml.tree.stat(rel, follow=False)
        try:
            if self.is_live:
                return os.lstat(self.path(rel))
            body = rel.strip("/")
            head, _, name = body.rpartition("/")
            if name in ("", ".", ".."):
                return _stat_in_root(self.root, body)        # a directory: no link to leave unfollowed
            dirs = self._held()
            if dirs is not None and _plain(body):
                return os.stat(name, dir_fd=dirs.resolve(self.root, head), follow_symlinks=False)
            fd, last, _ = _walk(self.root, head)             # the directory holding the name, resolved inside
            try:
                if last:                                     # not a link (the walk looked): opened as it is
                    held, fd = fd, os.open(last, _WALK_FLAGS, dir_fd=fd)
                    os.close(held)
                return os.stat(name, dir_fd=fd, follow_symlinks=False)
            finally:
                os.close(fd)
        except (OSError, ValueError):
            return None

    def exists(self, rel: str) -> bool:
        if self.is_live:
            return os.path.exists(self.path(rel))
        return self.stat(rel) is not None

    def isdir(self, rel: str) -> bool:
        if self.is_live:
            return os.path.isdir(self.path(rel))
        st = self.stat(rel)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def realpath(self, rel: str) -> str | None:
        """A sysfs symlink resolved inside the root, relative to it (``/sys/devices/...``), or None."""
        if self.xml is not None:
            return self.xml.tree.realpath(rel)
        if not self.is_live:
            try:
                fd, name, names = _walk(self.root, rel, lexical_rest=True)
            except (OSError, ValueError):
                return None
            try:
                if name:
                    os.stat(name, dir_fd=fd, follow_symlinks=False)   # lexists, as below
            except (OSError, ValueError):
                return None
            finally:
                os.close(fd)
            return "/" + "/".join(names)
        full = self.path(rel)
        if not os.path.lexists(full):
            return None
        real = os.path.realpath(full)
        if self.root != "/" and real.startswith(self.root + os.sep):
            real = real[len(self.root):]
        return real
