"""Backend selection, in the spirit of pyzmq's backend chooser.

Default order: ``libnuma`` (dlopen'd libnuma.so.1) → ``syscall`` (raw system
calls) → ``numactl`` (birth-time binding through the numactl binary) →
``none`` (CPU affinity only). ``NUMABIND_BACKEND`` forces one by name; a forced
backend that cannot load is an error, never a silent substitute.
"""

from __future__ import annotations

import _thread

from .. import _log
from .._env import environ_get
from ..errors import NumabindError
from .base import Backend

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

__all__ = ["Backend", "BACKEND_NAMES", "get_backend", "backend_info", "lock_for_fork", "reset_backends",
           "unlock_after_fork"]

log = _log.getLogger(__name__)

BACKEND_NAMES = ("libnuma", "syscall", "numactl", "none")
_lock = _thread.allocate_lock()   # _thread: threading stays off the import path of numabind run
_instances: dict[str, Backend] = {}
_failures: dict[str, str] = {}
_chosen: dict[str | None, tuple[Backend, str]] = {}   # get_backend's answers, until reset_backends


def _construct(name: str) -> Backend:
    if name == "libnuma":
        from ._native import LibnumaBackend

        return LibnumaBackend()
    if name == "syscall":
        from ._native import SyscallBackend

        return SyscallBackend()
    if name == "numactl":
        from .numactl import NumactlBackend

        return NumactlBackend()
    from .numactl import AffinityOnlyBackend

    return AffinityOnlyBackend()


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
    forced = name or environ_get("NUMABIND_BACKEND") or None
    key = forced if name is None else "=" + name
    hit = _chosen.get(key)
    if hit is not None:
        return hit
    out = _choose(name, forced)
    _chosen[key] = out
    return out


def _choose(name: str | None, forced: str | None) -> tuple[Backend, str]:
    if forced:
        if forced not in BACKEND_NAMES:
            raise NumabindError(
                f"NUMABIND_BACKEND={forced!r} is not a backend; choose one of {', '.join(BACKEND_NAMES)}"
            )
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


def _native_problem() -> str | None:
    """One line saying that the native core is missing and how to get it; None when it loads."""
    from ._native import load_native

    try:
        load_native()
    except ImportError as e:
        return str(e)
    return None


def backend_info() -> dict[str, Any]:
    """Which backends can be used here and why the others cannot.

    ``native`` is None when the compiled core loads, else one line saying it is missing and how to get it.
    """
    available = {n: _load(n) is not None for n in BACKEND_NAMES}
    try:
        be, why = get_backend()
        selected, reason = be.name, why
    except NumabindError as e:
        selected, reason = None, str(e)
    return {
        "selected": selected,
        "reason": reason,
        "available": available,
        "unavailable": {n: _failures[n] for n in BACKEND_NAMES if not available[n]},
        "native": _native_problem(),
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
