"""The backends, and the choice of one, in the spirit of pyzmq's backend chooser.

Default order: ``libnuma`` → ``syscall`` → ``numactl`` → ``none``. ``NUMABIND_BACKEND`` forces one by name; a
forced backend that cannot load is an error, never a silent substitute. This module re-exports the names the
rest of the package takes from ``numabind.backends``.
"""

import _thread
from sys import modules as _modules
TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)

from .._base import environ_get, getLogger
from .._fs import WEIGHTS_AUTO_NAMES, WEIGHTS_DIR
from ..errors import NumabindError
from .base import (MPOL_F_ADDR, MPOL_F_NODE, MPOL_F_NUMA_BALANCING, MPOL_F_RELATIVE_NODES, MPOL_F_STATIC_NODES,
                   MPOL_MF_MOVE, MPOL_MF_MOVE_ALL, MPOL_MF_STRICT, MPOL_MODE_FLAGS, MPOL_MODES, MPOL_NAMES,
                   SETTLE_ROUNDS, THREAD_MODES, WALK_BOUND, WALK_CHECK_FIRST, WALK_DIFFERS, WALK_EXITED, WALK_FLAGS,
                   WALK_LEFT_ALONE, WALK_MATCHING, WALK_NOT_TRIED, WALK_ONLY_CALLER, WALK_STOP_ON_ERROR,
                   WALK_UNCHANGED, AffinityWalk, Backend, BindCall, MemPolicyState, MemPolicySwap, check_threads,
                   exec_command, pin_process, policy_of, process_ended, settle, walk_all, write_weights)
from .native import NativeBackend, load_native, refused

if TYPE_CHECKING:  # pragma: no cover
    from typing import Any
    from ..types import BackendName

__all__ = ["AffinityWalk", "Backend", "BACKEND_NAMES", "BindCall", "LIBNUMA_SONAME", "LibnumaBackend",
           "MemPolicyState", "MemPolicySwap", "MPOL_F_ADDR", "MPOL_F_NODE", "MPOL_F_NUMA_BALANCING",
           "MPOL_F_RELATIVE_NODES", "MPOL_F_STATIC_NODES", "MPOL_MF_MOVE", "MPOL_MF_MOVE_ALL", "MPOL_MF_STRICT",
           "MPOL_MODE_FLAGS", "MPOL_MODES", "MPOL_NAMES", "NativeBackend", "SETTLE_ROUNDS", "SyscallBackend",
           "THREAD_MODES", "WALK_BOUND", "WALK_CHECK_FIRST", "WALK_DIFFERS", "WALK_EXITED", "WALK_FLAGS",
           "WALK_LEFT_ALONE", "WALK_MATCHING", "WALK_NOT_TRIED", "WALK_ONLY_CALLER", "WALK_STOP_ON_ERROR",
           "WALK_UNCHANGED", "WEIGHTS_AUTO_NAMES", "WEIGHTS_DIR", "backend_for", "backend_info",
           "check_backend_name", "check_threads", "exec_command", "get_backend", "interleave_next_node",
           "load_native", "lock_for_fork", "pin_process", "policy_of", "process_ended", "refused", "reset_backends",
           "settle", "unlock_after_fork", "walk_all", "write_weights"]

log = getLogger(__name__)

BACKEND_NAMES: "tuple[BackendName, ...]" = ("libnuma", "syscall", "numactl", "none")
_lock = _thread.allocate_lock()   # _thread: threading stays off the import path of numabind run
_instances: dict[str, Backend] = {}
_failures: dict[str, str] = {}
_chosen: dict[str | None, tuple[Backend, str]] = {}   # get_backend's answers, until reset_backends


#: Each backend's module and class. A module is imported when its backend is chosen, or when one of its names
#: below is asked of this package (numabind run loads only the chosen one's).
_MODULES = {"libnuma": "LibnumaBackend", "syscall": "SyscallBackend", "numactl": "NumactlBackend",
            "none": "AffinityOnlyBackend"}
_LAZY = {"LibnumaBackend": "libnuma", "LIBNUMA_SONAME": "libnuma", "interleave_next_node": "libnuma",
         "SyscallBackend": "syscall"}


def __getattr__(name: str) -> "Any":
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_backend_module(module), name)


def _backend_module(name: str) -> "Any":
    full = f"{__name__}.{name}"
    __import__(full)      # not importlib.import_module: importing importlib costs numabind run's start
    return _modules[full]


def _construct(name: str) -> Backend:
    return getattr(_backend_module(name), _MODULES[name])()   # type: ignore[no-any-return]


def _load(name: str) -> Backend | None:
    """The backend ``name``, or None with the reason stored in _failures."""
    with _lock:
        if name in _instances:
            return _instances[name]
        if name in _failures:
            return None
        try:
            be = _construct(name)
        except (ImportError, OSError, NumabindError) as e:
            _failures[name] = f"{type(e).__name__}: {e}"
            log.debug("backend %s unavailable: %s", name, _failures[name])
            return None
        _instances[name] = be
        log.debug("backend %s available", name)
        return be


def get_backend(name: str | None = None) -> tuple[Backend, str]:
    """(backend, why it was chosen). ``name`` or ``$NUMABIND_BACKEND`` forces one."""
    return backend_for(name, None if name else environ_get("NUMABIND_BACKEND") or None)


def backend_for(name: str | None, from_env: str | None) -> tuple[Backend, str]:
    """:func:`get_backend` for a caller that read ``$NUMABIND_BACKEND`` already (``from_env``: its value,
    None when unset or empty; not used when ``name`` is given)."""
    key = from_env if not name else "=" + name
    hit = _chosen.get(key)
    if hit is not None:
        return hit
    out = _choose(name or None, name or from_env)
    _chosen[key] = out
    return out


def check_backend_name(value: str, source: str = "NUMABIND_BACKEND") -> None:
    """NumabindError naming ``value`` (of ``source``, default ``$NUMABIND_BACKEND``) and the backends when it is
    none of them: the one message for it (the CLI gives it as a usage error before binding, :func:`get_backend`
    when it binds)."""
    if value not in BACKEND_NAMES:
        unset = " (or unset it: the first usable)" if source == "NUMABIND_BACKEND" else ""
        raise NumabindError(f"{source}={value!r} is not a backend; choose one of {', '.join(BACKEND_NAMES)}{unset}")


def _choose(name: str | None, forced: str | None) -> tuple[Backend, str]:
    if forced:
        check_backend_name(forced, "backend" if name else "NUMABIND_BACKEND")
        be = _load(forced)
        if be is None:
            raise NumabindError(f"backend {forced!r} was forced but cannot be used: {_failures[forced]}")
        how = "argument" if name else "NUMABIND_BACKEND"
        return be, f"{forced} forced by {how}"
    skipped: list[str] = []
    said: dict[str, str] = {}  # failure text -> the first backend that failed so (each cause said once)
    for cand in BACKEND_NAMES:
        be = _load(cand)
        if be is not None:
            why = f"{cand}: first usable in the order {' > '.join(BACKEND_NAMES)}"
            if skipped:
                why += " (" + "; ".join(skipped) + ")"
            return be, why
        failure = _failures[cand]
        skipped.append(f"{cand} unavailable: " + (f"same as {said[failure]}" if failure in said else failure))
        said.setdefault(failure, cand)
    raise NumabindError("no backend is usable: " + "; ".join(skipped))  # "none" always loads


def _native_state() -> tuple[bool, str]:
    """(True, what the loaded native core is: its version and file) or (False, one line saying that it is
    missing or unusable and how to get it)."""
    try:
        native = load_native()
    except (ImportError, NumabindError) as e:   # missing, or built for another version
        return False, str(e)
    built = native.ffi.string(native.lib.nb_version()).decode("ascii", "replace")
    return True, f"numabind._native {built} loaded from {native.__file__}"


def backend_info() -> "dict[str, Any]":
    """Which backends can be used here and why the others cannot; ``native`` says where the compiled core was
    loaded from, or why it is missing and how to get it (``native_ok``)."""
    available = {n: _load(n) is not None for n in BACKEND_NAMES}
    try:
        be, why = get_backend()
        selected, reason = be.name, why
    except NumabindError as e:
        selected, reason = None, str(e)
    native_ok, native = _native_state()
    return {
        "selected": selected,
        "reason": reason,
        "available": available,
        "unavailable": {n: _failures[n] for n in BACKEND_NAMES if not available[n]},
        "native": native,
        "native_ok": native_ok,
    }


def lock_for_fork() -> None:
    """Hold the registry lock across a fork (an ``os.register_at_fork`` *before* hook),
    so a child never inherits it locked by a thread that does not exist there."""
    _lock.acquire()


def unlock_after_fork() -> None:
    """Release what :func:`lock_for_fork` took, in the parent and in the child."""
    _lock.release()


def reset_backends() -> None:
    """Forget loaded backends and failures (tests that change the environment)."""
    with _lock:
        _instances.clear()
        _failures.clear()
        _chosen.clear()
