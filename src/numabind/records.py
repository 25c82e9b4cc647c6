"""Runtime records of processes numabind bound at birth, for ``numabind stat`` in other processes.

A child that numabind binds when it is born (``configure_subprocess``'s spawn, forkserver and fork
children, :func:`numabind.bound` calls, :func:`numabind.pool_plans` workers) keeps what it was bound
to in memory (:func:`numabind.birth_report`), where no other process can see it. So the binding also
writes a small record, ``<runtime dir>/<pid>.<start time>.json``, that :func:`numabind.locality` of
that pid reads from any process of the same user (or root):

* the runtime dir is ``$XDG_RUNTIME_DIR/numabind`` when ``XDG_RUNTIME_DIR`` names a directory this
  process may write, else ``/dev/shm/numabind-<uid>``; it is created with mode 0700 and refused (no
  record) when it is a symlink, another user's, or writable by its group or others;
* the start time (``/proc/PID/stat``, :func:`numabind._proc.start_time`) in the name means a reused pid
  never matches a dead process's record; records whose process is gone are ignored, and each write
  removes a bounded number of them;
* a record is written atomically (a temporary file in the same directory, then ``os.replace``);
* it is never needed: a failure to write one only logs (DEBUG) and leaves a note in the child's
  report, and ``NUMABIND_NO_RECORD=1`` turns records off.

A plain :func:`numabind.bind_current` in a process's own code writes nothing (its success path does no
I/O); only the birth bindings above do.
"""

from __future__ import annotations

import json
import os
import stat

from . import _proc
from ._base import environ_get, getLogger

__all__ = ["NO_RECORD_ENV", "read_record", "record_dir", "records_disabled", "write_record"]

log = getLogger(__name__)

#: ``NUMABIND_NO_RECORD=1`` (or true/yes/on): write no runtime records.
NO_RECORD_ENV = "NUMABIND_NO_RECORD"
_RECORD_VERSION = 1
_RECORD_MAX = 64 << 10      # a record is a few hundred bytes; larger is not one of ours
_PRUNE_LOOK = 64            # names looked at per write, from a random place in the directory
_PRUNE_MAX = 32             # stale records removed per write at most
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeDirError(OSError):
    """The runtime directory is not one numabind may trust (a symlink, another user's, writable by others)."""


def records_disabled() -> bool:
    """True when ``NUMABIND_NO_RECORD`` asks for no records (1, true, yes or on)."""
    return (environ_get(NO_RECORD_ENV) or "").strip().lower() in ("1", "true", "yes", "on")


def record_dir() -> str:
    """The runtime directory this process writes its records to (see the module docstring)."""
    xdg = environ_get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg) and os.path.isdir(xdg) and os.access(xdg, os.W_OK | os.X_OK):
        return os.path.join(xdg, "numabind")
    return f"/dev/shm/numabind-{os.geteuid()}"


def _open_dir(path: str, uid: int) -> int:
    """A descriptor of directory ``path`` when it is safe: a real directory (not a symlink) owned by
    ``uid``, not writable by group or others. OSError (UnsafeDirError) otherwise."""
    fd = os.open(path, _DIR_FLAGS)     # O_NOFOLLOW: a symlink in its place is ELOOP, never followed
    try:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafeDirError(f"{path} is not a directory")
        if st.st_uid != uid:
            raise UnsafeDirError(f"{path} belongs to uid {st.st_uid}, not {uid}")
        if st.st_mode & 0o022:
            raise UnsafeDirError(f"{path} is writable by its group or others (mode {stat.S_IMODE(st.st_mode):o})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _name(pid: int, start: int) -> str:
    return f"{pid}.{start}.json"


def write_record(pid: int, start_method: str, requested: str, applied: str | None) -> str | None:
    """Record that ``pid`` was bound at birth (plan texts, :meth:`numabind.Plan.to_text`).

    Returns None when the record was written (or records are off), else why it was not, for a note in
    the report; it never raises (a bind does not fail because of its record).
    """
    if records_disabled():
        return None
    try:
        start = _proc.start_time(pid)
        if not start:
            raise OSError(f"process {pid} is gone (no start time in /proc/{pid}/stat)")
        path = record_dir()
        uid = os.geteuid()
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except FileExistsError:   # a file or a dangling symlink in its place: _open_dir says which
            pass
        fd = _open_dir(path, uid)
        try:
            data = json.dumps({"numabind_record": _RECORD_VERSION, "pid": pid, "start_time": start,
                               "start_method": start_method, "requested": requested, "applied": applied},
                              sort_keys=True).encode()
            tmp = f".{pid}.{start}.{os.urandom(6).hex()}.tmp"
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                          dir_fd=fd)
            try:
                try:
                    os.write(out, data)
                finally:
                    os.close(out)
                os.replace(tmp, _name(pid, start), src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=fd)
                except OSError:
                    pass
                raise
            _prune(fd, keep=(pid, start))
        finally:
            os.close(fd)
    except (OSError, ValueError) as e:
        why = f"no runtime record written for numabind stat: {e}"
        log.debug("pid %d: %s", pid, why)
        return why
    return None


def _parse_name(name: str) -> tuple[int, int] | None:
    """(pid, start time) of a record name, or of a temporary file's (``.<pid>.<start>.<hex>.tmp``)."""
    if name.endswith(".json"):
        parts = name[:-5].split(".")
    elif name.startswith(".") and name.endswith(".tmp"):
        parts = name[1:-4].split(".")[:2]
    else:
        return None
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def _prune(fd: int, keep: tuple[int, int]) -> int:
    """Remove up to _PRUNE_MAX records (and left-over temporary files) of processes that are gone,
    looking at _PRUNE_LOOK names from a random place; returns how many were removed."""
    try:
        names = os.listdir(fd)
    except OSError:
        return 0
    if not names:
        return 0
    first = int.from_bytes(os.urandom(4), "little") % len(names)
    removed = 0
    for i in range(min(_PRUNE_LOOK, len(names))):
        name = names[(first + i) % len(names)]
        owner = _parse_name(name)
        if owner is None or owner == keep or _proc.start_time(owner[0]) == owner[1]:
            continue
        try:
            os.unlink(name, dir_fd=fd)
            removed += 1
        except OSError:
            continue
        if removed >= _PRUNE_MAX:
            break
    return removed


def _read_dirs(pid: int, uid: int) -> list[str]:
    """Where the records of a process of user ``uid`` may be, most likely first."""
    out: list[str] = []
    if uid == os.geteuid():
        out.append(record_dir())
    xdg = _proc.environ_value(pid, "XDG_RUNTIME_DIR")   # the process's own, when this one may read it
    if xdg and os.path.isabs(xdg):
        out.append(os.path.join(xdg, "numabind"))
    out += [f"/run/user/{uid}/numabind", f"/dev/shm/numabind-{uid}"]
    return list(dict.fromkeys(out))


def read_record(pid: int, start: int) -> dict[str, object] | None:
    """The record of process ``pid`` started at ``start`` (clock ticks), or None: none written, the
    process's user unknown, a directory or file that is not safe, or a record of another process."""
    status = _proc.status_fields(pid) or {}
    uids = status.get("Uid", "").split()
    if len(uids) < 2 or not uids[1].isdigit() or not start:
        return None
    uid = int(uids[1])            # the effective uid: the one its files were created with
    for path in _read_dirs(pid, uid):
        try:
            fd = _open_dir(path, uid)
        except OSError:
            continue
        try:
            rec = _read_file(fd, _name(pid, start), uid)
        finally:
            os.close(fd)
        if rec is not None and rec.get("pid") == pid and rec.get("start_time") == start \
                and rec.get("numabind_record") == _RECORD_VERSION:
            return rec
    return None


def _read_file(dir_fd: int, name: str, uid: int) -> dict[str, object] | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_size > _RECORD_MAX:
            return None
        data = os.read(fd, _RECORD_MAX + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        rec = json.loads(data)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None
