"""Runtime records of processes numabind bound at birth, for ``numabind stat`` in other processes.

A child bound at birth writes ``<runtime dir>/<pid>.<start time>.json`` (the first safe one of
:func:`record_dirs`), which :func:`numabind.locality` reads from any process of the same user (or root); only the
user's own regular files, never through a link. The whole story: ``docs/guide.rst``.
"""

from __future__ import annotations

import errno
import os
import stat

from . import _proc
from ._base import environ_get, getLogger, printable
from ._fs import RefusedFile, read_bounded
from .errors import NumabindError
from .plan import Plan

__all__ = ["NO_RECORD_ENV", "UnsafeDirError", "UnsafeFileError", "keep_own_birth", "load_json", "open_private_dir",
           "open_runtime_dir", "own_birth", "read_private_file", "read_record", "record_dir", "record_dirs",
           "records_disabled", "write_private_file", "write_record"]

log = getLogger(__name__)

#: ``NUMABIND_NO_RECORD=1`` (or true/yes/on): write no runtime records.
NO_RECORD_ENV = "NUMABIND_NO_RECORD"
_RECORD_VERSION = 1
_RECORD_MAX = 64 << 10      # a record is a few hundred bytes; larger is not one of ours
_RECORD_DEPTH = 4           # a record is one flat object; deeper nesting is not one of ours
_METHOD_MAX = 32            # a start method is a short name ("fork", "forkserver", "pool", ...)
_NUMBER_MAX = 24            # characters of a JSON number: an int of 20 digits, a float as repr writes one
_SAID_MAX = 1024            # bad records remembered as already warned about, at most
_PRUNE_LOOK = 64            # names looked at per write, from a random place in the directory
_PRUNE_MAX = 32             # stale records removed per write at most
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_RUN_USER = "/run/user"                 # /run/user/<uid>: made by the system for that user alone
_SHARED_BASES = ("/dev/shm", "/tmp")    # world-writable: another user may squat numabind-<uid> there
_warned: set[str] = set()               # candidates already warned about in this process
_bad_said: set[tuple[str, str]] = set()  # (path, why) of bad records already warned about in this process


class UnsafeDirError(OSError):
    """A directory numabind may not trust (a symlink, another user's, writable by others), or none usable."""


class UnsafeFileError(UnsafeDirError):
    """A file in a private directory that is not one numabind wrote (a symlink, a FIFO, another user's, too large)."""


def records_disabled() -> bool:
    """True when ``NUMABIND_NO_RECORD`` asks for no records (1, true, yes or on)."""
    return (environ_get(NO_RECORD_ENV) or "").strip().lower() in ("1", "true", "yes", "on")


def _own_xdg() -> str | None:
    xdg = environ_get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg) and os.path.isdir(xdg) and os.access(xdg, os.W_OK | os.X_OK):
        return xdg
    return None


def _home(uid: int) -> str | None:
    """The home directory of ``uid`` in the password database (not ``$HOME``: other processes must find it)."""
    import pwd   # only when the chain gets this far

    try:
        home = pwd.getpwuid(uid).pw_dir
    except KeyError:
        return None
    return home if os.path.isabs(home) else None


def _run_user_is(uid: int) -> bool:
    """True when ``/run/user/<uid>`` is a real directory of ``uid`` (the system makes it at login)."""
    try:
        st = os.lstat(f"{_RUN_USER}/{uid}")
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & 0o022


def record_dirs(uid: int | None = None, xdg: str | None = None) -> list[str]:
    """Every place records of user ``uid`` (default: this process's) may be, in the order a writer tries them:
    ``$XDG_RUNTIME_DIR/numabind`` (``xdg``), ``/run/user/<uid>/numabind``, ``/dev/shm/numabind-<uid>``,
    ``/tmp/numabind-<uid>``, ``<home>/.cache/numabind/run``."""
    if uid is None:
        uid = os.geteuid()
    out: list[str] = []
    if xdg and os.path.isabs(xdg):
        out.append(os.path.join(xdg, "numabind"))
    out.append(f"{_RUN_USER}/{uid}/numabind")
    out += [f"{base}/numabind-{uid}" for base in _SHARED_BASES]
    home = _home(uid)
    if home:
        out.append(os.path.join(home, ".cache", "numabind", "run"))
    return list(dict.fromkeys(out))


def _write_candidates() -> list[str]:
    """record_dirs of this process, less an XDG_RUNTIME_DIR it cannot write and a /run/user/<uid> not its own."""
    uid = os.geteuid()
    skip = "" if _run_user_is(uid) else f"{_RUN_USER}/{uid}/numabind"
    return [p for p in record_dirs(uid, _own_xdg()) if p != skip]


def record_dir() -> str:
    """The first place this process would write its records to (:func:`open_runtime_dir` finds the safe one)."""
    return _write_candidates()[0]


def open_private_dir(path: str, uid: int, dir_fd: int | None = None) -> int:
    """A descriptor of directory ``path`` (relative to ``dir_fd``) when it is a real directory of ``uid`` not
    writable by its group or others; OSError otherwise (UnsafeDirError when something else stands there)."""
    try:
        fd = os.open(path, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafeDirError(errno.ELOOP, f"{path} is a symbolic link, not a directory") from None
        if e.errno == errno.ENOTDIR:
            raise UnsafeDirError(errno.ENOTDIR, f"{path} is not a directory") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafeDirError(errno.ENOTDIR, f"{path} is not a directory")
        if st.st_uid != uid:
            raise UnsafeDirError(errno.EPERM, f"{path} belongs to uid {st.st_uid}, not {uid}")
        if st.st_mode & 0o022:
            raise UnsafeDirError(errno.EPERM, f"{path} is writable by its group or others "
                                              f"(mode {stat.S_IMODE(st.st_mode):o})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _make_dir(path: str, parents: bool) -> None:
    """mkdir ``path`` with mode 0700 (its missing parents too when ``parents``); one that exists is left."""
    try:
        if parents:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass


def open_runtime_dir() -> tuple[str, int]:
    """(path, descriptor) of the first safe one of :func:`record_dirs`, made when missing (one that is not is
    skipped with a WARNING once per process); UnsafeDirError when none is left."""
    uid = os.geteuid()
    home = _home(uid)
    home_dir = os.path.join(home, ".cache", "numabind", "run") if home else None
    candidates = _write_candidates()
    why: list[str] = []
    for path in candidates:
        try:
            _make_dir(path, parents=path == home_dir)
            return path, open_private_dir(path, uid)
        except OSError as e:
            why.append(f"{path}: {e.strerror or e}")
            if path not in _warned:
                _warned.add(path)
                log.warning("runtime directory %s is not usable (%s); numabind goes on with the next of %s",
                            path, e.strerror or e, ", ".join(candidates))
    raise UnsafeDirError(errno.EPERM, "no safe runtime directory: " + "; ".join(why))


def write_private_file(dir_fd: int, name: str, data: bytes, stem: str) -> None:
    """Write ``name`` in ``dir_fd`` atomically: a new ``O_EXCL|O_NOFOLLOW`` file, then ``os.replace``."""
    tmp = f".{stem}.{os.urandom(6).hex()}.tmp"
    out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view):]
        finally:
            os.close(out)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def read_private_file(dir_fd: int, name: str, uid: int, limit: int) -> bytes | None:
    """The bytes of file ``name`` in the directory ``dir_fd``, or None when there is none; UnsafeFileError unless
    it is a regular file (not a link) of ``uid`` of at most ``limit`` bytes; other OSErrors as they come."""
    try:
        return read_bounded(name, limit, dir_fd=dir_fd, nofollow=True, uid=uid)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafeFileError(errno.ELOOP, f"{name} is a symbolic link") from None
        raise
    except RefusedFile as e:
        raise UnsafeFileError(errno.EFBIG if e.why == "size" else errno.EPERM, str(e)) from None


_own_birth: tuple[str, Plan, Plan] | None = None


def keep_own_birth(start_method: str, requested: Plan, applied: Plan) -> None:
    """Keep what this process was bound to at birth (start method, plan asked for, plan applied)."""
    global _own_birth
    _own_birth = (start_method, requested, applied)


def own_birth() -> tuple[str, Plan, Plan] | None:
    """What :func:`keep_own_birth` kept in this process (start method, requested, applied), else None."""
    return _own_birth


def _name(pid: int, start: int) -> str:
    return f"{pid}.{start}.json"


def write_record(pid: int, start_method: str, requested: str, applied: str | None) -> str | None:
    """Record that ``pid`` was bound at birth; never raises: None when written, else why not."""
    if records_disabled():
        return None
    try:
        start = _proc.start_time(pid)
        if not start:
            raise OSError(f"process {pid} is gone (no start time in /proc/{pid}/stat)")
        _path, fd = open_runtime_dir()
        try:
            import json   # only a record written or read needs it: off numabind move's start

            data = json.dumps({"numabind_record": _RECORD_VERSION, "pid": pid, "start_time": start,
                               "start_method": start_method, "requested": requested, "applied": applied},
                              sort_keys=True).encode()
            write_private_file(fd, _name(pid, start), data, f"{pid}.{start}")
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
    """Remove up to _PRUNE_MAX records of processes that are gone; returns how many."""
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
        out += _write_candidates()
    xdg = _proc.environ_value(pid, "XDG_RUNTIME_DIR")   # the process's own, when this one may read it
    out += record_dirs(uid, xdg)
    return list(dict.fromkeys(out))


def read_record(pid: int, start: int) -> dict[str, object] | None:
    """The record of process ``pid`` started at ``start`` (clock ticks), or None; never raises.

    A bad record (not the user's regular file, over 64 KiB, nested, not JSON, a field of the wrong type) is
    skipped with one WARNING. The dict holds exactly the fields checked: ``numabind_record``, ``pid``,
    ``start_time``, ``start_method``, ``requested`` (a plan text) and ``applied`` (one or None).
    """
    status = _proc.status_fields(pid) or {}
    uids = status.get("Uid", "").split()
    if len(uids) < 2 or not uids[1].isdigit() or not start:
        return None
    uid = int(uids[1])            # the effective uid: the one its files were created with
    name = _name(pid, start)
    for path in _read_dirs(pid, uid):
        try:
            fd = open_private_dir(path, uid)
        except (OSError, ValueError):
            continue
        try:
            rec, why = _read_file(fd, name, uid, pid, start)
        finally:
            os.close(fd)
        if why is not None:
            _skip(os.path.join(path, name), why)
        elif rec is not None:
            return rec
    return None


def _skip(path: str, why: str) -> None:
    """One WARNING per process for a bad record (``numabind stat --watch`` reads it each round), printable."""
    if (path, why) in _bad_said:
        return
    if len(_bad_said) >= _SAID_MAX:
        _bad_said.clear()
    _bad_said.add((path, why))
    log.warning("runtime record %s skipped: %s (its process is taken as having no record; removing the file "
                "silences this)", printable(path), printable(why))


def _read_file(dir_fd: int, name: str, uid: int, pid: int, start: int) -> tuple[dict[str, object] | None, str | None]:
    """(the record in file ``name`` of ``dir_fd``, None) when good, (None, None) when missing, (None, why)."""
    try:
        data = read_private_file(dir_fd, name, uid, _RECORD_MAX)
    except OSError as e:
        why = str(e.strerror or e)
        return None, why[len(name) + 1:] if why.startswith(name + " ") else why
    if data is None:
        return None, None
    try:
        rec = load_json(data, depth=_RECORD_DEPTH)
    except ValueError as e:
        return None, f"not a numabind record: {e}"
    return _checked(rec, pid, start)


def _checked(rec: object, pid: int, start: int) -> tuple[dict[str, object] | None, str | None]:
    """(the fields of ``rec`` a reader uses, None) when each is right for ``pid`` and ``start``; (None, why)."""
    if not isinstance(rec, dict):
        return None, "its top level is not a JSON object"
    version = rec.get("numabind_record")
    if type(version) is not int:
        return None, "numabind_record (the record's version) is not an int"
    if version != _RECORD_VERSION:
        return None, f"it is a version {version} record; this numabind reads version {_RECORD_VERSION}"
    for key, want in (("pid", pid), ("start_time", start)):
        value = rec.get(key)
        if type(value) is not int:
            return None, f"{key} is not an int"
        if value != want:
            return None, f"{key} is {value}, not the {want} its name says"
    method = rec.get("start_method")
    if not (isinstance(method, str) and method.isascii() and method.isidentifier() and len(method) <= _METHOD_MAX):
        return None, f"start_method is not a name (ASCII letters, digits and _, at most {_METHOD_MAX})"
    plans: dict[str, object] = {}
    for key in ("requested", "applied"):
        text = rec.get(key)
        if text is None and key == "applied":
            plans[key] = None
            continue
        if not isinstance(text, str):
            return None, f"{key} is not a plan text" + (" or null" if key == "applied" else "")
        try:
            Plan.from_text(text)
        except (NumabindError, ValueError):
            return None, f"{key} is not a plan text numabind reads"
        plans[key] = text
    return {"numabind_record": version, "pid": pid, "start_time": start, "start_method": method, **plans}, None


def load_json(data: bytes, *, depth: int) -> object:
    """``data`` (JSON another process wrote) parsed with its work bounded, or ValueError saying why not: UTF-8
    only, nesting at most ``depth`` (checked before parsing), finite numbers of at most 24 characters."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"byte {e.start} is not UTF-8") from None
    if _too_deep(text, depth):
        raise ValueError(f"arrays and objects nest deeper than {depth}")
    import json   # only a record written or read needs it: off numabind move's start

    return json.loads(text, parse_int=_json_int, parse_float=_json_float, parse_constant=_json_constant)


def _too_deep(text: str, depth: int) -> bool:
    """Whether arrays and objects nest deeper than ``depth`` in the JSON ``text`` (strings skipped), in one pass."""
    if text.count("[") + text.count("{") <= depth:
        return False        # a flat record: nothing to scan
    import re   # json imports re anyway

    level = 0
    for m in re.finditer(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', text, re.DOTALL):   # a string is skipped whole
        c = text[m.start()]
        if c in "[{":
            level += 1
            if level > depth:
                return True
        elif c in "]}":
            level = max(level - 1, 0)    # unbalanced: json.loads says so
    return False


def _json_int(text: str) -> int:
    if len(text) > _NUMBER_MAX:
        raise ValueError(f"a number has more than {_NUMBER_MAX} characters")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text) if len(text) <= _NUMBER_MAX else float("inf")
    if value - value != 0.0:     # inf or nan
        raise ValueError(f"a number is out of range (or has more than {_NUMBER_MAX} characters)")
    return value


def _json_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")
