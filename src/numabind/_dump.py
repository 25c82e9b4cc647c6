"""A dump of a machine as a discovery root: a directory holding ``sys/`` and ``proc/`` (or one directory that
does), or an ``hwloc-gather-topology`` tarball, unpacked safely (no path or link out of the dump, no device or
FIFO, caps on size and members) into a private temporary directory removed at exit.
"""

from __future__ import annotations

import os
import posixpath
import _thread

from ._base import getLogger
from .errors import NumabindError

__all__ = ["MAX_DUMP_BYTES", "MAX_DUMP_MEMBERS", "dump_root", "is_tarball", "unpack"]

log = getLogger(__name__)

#: Largest total size of the files unpacked from one dump tarball.
MAX_DUMP_BYTES = 256 << 20
#: Largest number of members unpacked from one dump tarball.
MAX_DUMP_MEMBERS = 500_000

_TAR_SUFFIXES = (".tar", ".tar.bz2", ".tbz2", ".tbz", ".tar.gz", ".tgz", ".tar.xz", ".txz")

_lock = _thread.allocate_lock()
_unpacked: dict[tuple[str, int, int], str] = {}       # (realpath, size, mtime_ns) -> unpacked root
_cleanup: list[str] = []
_owner_pid = os.getpid()


def _remove_unpacked() -> None:
    if os.getpid() != _owner_pid:     # a forked child must not delete its parent's dumps
        return
    import shutil

    for path in _cleanup:
        shutil.rmtree(path, ignore_errors=True)


def dump_root(path: str) -> str:
    """The directory of a dump that holds ``sys``/``proc``: ``path`` itself, or its only subdirectory."""
    names = _names(path)
    if "sys" in names or "proc" in names:
        return path
    subdirs = [inner for inner in (os.path.join(path, n) for n in names)
               if os.path.isdir(inner) and not os.path.islink(inner)]
    if len(subdirs) == 1 and {"sys", "proc"} & set(_names(subdirs[0])):
        return subdirs[0]
    return path


def _names(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def is_tarball(path: str) -> bool:
    if path.endswith(_TAR_SUFFIXES):
        return True
    import tarfile

    try:
        return tarfile.is_tarfile(path)
    except OSError:
        return False


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def unpack(tarball: str) -> str:
    """Unpack ``tarball`` into a private temporary directory, once per (file, size, mtime); returns it."""
    import atexit
    import shutil
    import tempfile

    st = os.stat(tarball)
    key = (os.path.realpath(tarball), st.st_size, st.st_mtime_ns)
    with _lock:
        found = _unpacked.get(key)
        if found is not None and os.path.isdir(found):
            return found
        dest = tempfile.mkdtemp(prefix="numabind-dump-")
        if not _cleanup:
            atexit.register(_remove_unpacked)
        _cleanup.append(dest)
        try:
            _extract(tarball, dest)
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        _unpacked[key] = dest
        log.debug("made %s from %s", dest, tarball)
        return dest


def _extract(tarball: str, dest: str) -> None:
    import tarfile

    real_dest = os.path.realpath(dest)
    total = 0
    links: list[str] = []
    skipped = 0
    try:
        tf = tarfile.open(tarball, "r:*")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise NumabindError(f"cannot read the dump {tarball}: {exc}") from None
    with tf:
        try:
            for count, member in enumerate(tf, 1):
                if count > MAX_DUMP_MEMBERS:
                    raise NumabindError(
                        f"the dump {tarball} has more than {MAX_DUMP_MEMBERS} members; "
                        f"a sysfs/procfs dump is far smaller (is this the right file?)")
                name = posixpath.normpath(member.name.replace("\\", "/"))
                parts = name.split("/")
                if name.startswith("/") or ".." in parts or name in (".", "") or "\0" in name:
                    skipped += 1
                    continue
                target = os.path.join(real_dest, *parts)
                parent = os.path.dirname(target)
                # realpath resolves the links already unpacked: nothing is created through
                # a link that leads outside (such links are dropped below).
                if member.isdir():
                    if not _inside(real_dest, os.path.realpath(target)):
                        skipped += 1
                        continue
                    os.makedirs(target, mode=0o700, exist_ok=True)
                    continue
                if not (member.isfile() or member.issym()):
                    skipped += 1        # devices, FIFOs, hard links: nothing sysfs dumps need
                    continue
                if not _inside(real_dest, os.path.realpath(parent)):
                    skipped += 1
                    continue
                os.makedirs(parent, mode=0o700, exist_ok=True)
                if os.path.lexists(target):
                    if os.path.isdir(target) and not os.path.islink(target):
                        skipped += 1
                        continue
                    os.unlink(target)
                if member.issym():
                    if posixpath.isabs(member.linkname) or "\0" in member.linkname:
                        skipped += 1
                        continue
                    os.symlink(member.linkname, target)
                    links.append(target)
                    continue
                total += member.size
                if total > MAX_DUMP_BYTES:
                    raise NumabindError(
                        f"the dump {tarball} unpacks to more than {MAX_DUMP_BYTES >> 20} MiB; "
                        f"a sysfs/procfs dump is a few MiB at most (is this the right file?)")
                src = tf.extractfile(member)
                if src is None:
                    skipped += 1
                    continue
                with src, open(target, "xb") as out:
                    remaining = member.size
                    while remaining > 0:
                        chunk = src.read(min(remaining, 1 << 20))
                        if not chunk:
                            break
                        out.write(chunk)
                        remaining -= len(chunk)
                # Private, readable; a device file's placeholder keeps whether it could be opened
                # read-write (GPU discovery on a dump reads that from its owner bits).
                os.chmod(target, member.mode & 0o600 if "dev" in parts[:2] else 0o600)
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise NumabindError(f"cannot unpack the dump {tarball}: {exc}") from None
    # A link is kept only if it resolves inside the dump, following every link on
    # the way; removing one can change where others resolve, so repeat until stable.
    changed = True
    while changed:
        changed = False
        for link in links:
            if os.path.islink(link) and not _inside(real_dest, os.path.realpath(link)):
                os.unlink(link)
                skipped += 1
                changed = True
    if skipped:
        log.debug("skipped %d members of %s (outside the dump, links out of it, "
                  "devices or FIFOs)", skipped, tarball)
