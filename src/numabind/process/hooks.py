"""The hooks that bind multiprocessing children at birth: spawn (inheritance from the launching thread,
or the numactl wrapper), forkserver (preparation data) and fork (an at-fork hook), and
:func:`configure_subprocess`, which installs them for the calling thread's block."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

from .._base import Strictness, getLogger, keep_binding_env
from .. import backends as _backends
from .. import live
from ..bind import bind_current, bind_thread, strict_default, strict_label
from ..errors import PlanError
from ..plan import Plan, check_plan
from . import reports
from .payload import _BIND_KEY, _ENV_KEY, _PATH_HINT, _PATH_KEY, _bind_payload, _binding_env, _check_args, _Entry
from .reports import ChildBindings, ChildReport

if TYPE_CHECKING:  # pragma: no cover
    from ..types import BackendName, ThreadMode

__all__ = ["configure_subprocess"]

log = getLogger(__name__)


_local = threading.local()
_install_lock = threading.Lock()
_installed = 0
_orig_prep: Callable[[str], dict[str, Any]] | None = None
_orig_spawnv: Callable[[bytes, Sequence[str], Sequence[int]], int] | None = None
_fork_hook_registered = False


def _top() -> _Entry | None:
    """The innermost plan of the calling thread in this process (a forked child ignores its parent's)."""
    st: list[_Entry] | None = getattr(_local, "stack", None)
    if st:
        e = st[-1]
        if e.pid == os.getpid():
            return e
    return None


_LAUNCHERS = {"multiprocessing.popen_spawn_posix": "spawn", "multiprocessing.popen_forkserver": "forkserver",
              "multiprocessing.forkserver": "server"}


def _launcher() -> str:
    """Which multiprocessing module asks for preparation data (a few frames up, in case of wrappers)."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            break
        found = _LAUNCHERS.get(frame.f_globals.get("__name__", ""))
        if found:
            return found
        frame = frame.f_back
    return "unknown"


def _get_preparation_data(name: str) -> dict[str, Any]:
    assert _orig_prep is not None   # installed before this replaces multiprocessing's
    data = _orig_prep(name)
    entry = _top()
    if entry is None:
        return data
    method = _launcher()
    if method == "server":
        return data  # the forkserver's own start: it must stay unbound (its keys are filtered anyway)
    if method == "spawn" and entry.spawn == "inherit" and entry.prefix is None:
        env = _binding_env()    # TensorRT-LLM must not undo the binding (the other children set it themselves)
        if env:
            data[_ENV_KEY] = env
        return data  # bound by inheritance from the launching thread (_spawnv_passfds)
    data[_PATH_KEY] = _PATH_HINT
    data[_BIND_KEY] = _bind_payload(entry, method)
    return data


def _spawnv_passfds(path: bytes, args: Sequence[str], passfds: Sequence[int]) -> int:
    """Start a spawn child bound, by inheritance from this thread or through the numactl wrapper; the
    forkserver and the resource tracker (no ``--multiprocessing-fork``) start unbound."""
    assert _orig_spawnv is not None   # installed before this replaces multiprocessing's
    entry = _top()
    if entry is None or not args or args[-1] != "--multiprocessing-fork":
        return _orig_spawnv(path, args, passfds)
    if entry.prefix is not None:
        return _orig_spawnv(os.fsencode(entry.prefix[0]), [*entry.prefix, os.fsdecode(path), *args[1:]], passfds)
    if entry.spawn != "inherit":
        return _orig_spawnv(path, args, passfds)
    with bind_thread(entry.plan, strict=entry.strict, backend=entry.backend) as report:
        pid = _orig_spawnv(path, args, passfds)
    # The child holds this thread's binding from birth on but runs no numabind code for it: its
    # runtime record (for numabind stat) is written here, under its pid and start time.
    birth = reports._with_record(ChildReport(pid, "spawn", report))
    if entry.known is not None:
        entry.known[pid] = birth
    return pid


def _mp() -> tuple[Any, Any]:
    import multiprocessing.spawn as mp_spawn
    import multiprocessing.util as mp_util

    return mp_spawn, mp_util


def _before_fork() -> None:
    if _top() is not None:
        # A thread of the parent may hold the backend registry lock while this
        # thread forks; hold it across fork so the child's copy is released.
        _backends.lock_for_fork()
        _local.holds_lock = True


def _release_fork_lock() -> bool:
    """Release the registry lock :func:`_before_fork` took; whether it held it (a fork inside a block)."""
    held: bool = getattr(_local, "holds_lock", False)
    if held:
        _local.holds_lock = False
        _backends.unlock_after_fork()
    return held


def _after_fork_child() -> None:
    held = _release_fork_lock()
    st = getattr(_local, "stack", None)
    if not held or not st:
        return
    entry = st[-1]
    pid = os.getpid()
    try:
        report = bind_current(entry.plan, strict=entry.strict, threads=entry.threads, backend=entry.backend)
    except BaseException as e:  # noqa: BLE001 - an at-fork hook cannot raise: fail the child loudly
        reports._write_report(entry.report_dir, ChildReport(pid, "fork", None, f"{type(e).__name__}: {e}"))
        text = (f"numabind: fork child {pid} could not be bound at birth to {entry.plan.describe()}"
                f" ({strict_label(entry.strict)}); exiting with status 1\n" + traceback.format_exc())
        with contextlib.suppress(OSError):
            os.write(2, text.encode(errors="replace"))
        os._exit(1)
    birth = reports._set_birth(ChildReport(pid, "fork", report))   # with its runtime record
    reports._write_report(entry.report_dir, birth)
    for outer in st:  # the child is bound now; its own children are born from it
        outer.pid = -1


def _install() -> None:
    global _installed, _orig_prep, _orig_spawnv, _fork_hook_registered
    mp_spawn, mp_util = _mp()
    with _install_lock:
        if _installed == 0:
            # A wrapper left inside another library's wrapper (see _uninstall) is still in the
            # chain: wrapping again would make it call itself.
            if _orig_prep is None or mp_spawn.get_preparation_data is _orig_prep:
                _orig_prep = mp_spawn.get_preparation_data
                mp_spawn.get_preparation_data = _get_preparation_data
            if _orig_spawnv is None or mp_util.spawnv_passfds is _orig_spawnv:
                _orig_spawnv = mp_util.spawnv_passfds
                mp_util.spawnv_passfds = _spawnv_passfds
        _installed += 1
        if not _fork_hook_registered:  # at-fork hooks cannot be unregistered: registered once, idle when unused
            os.register_at_fork(before=_before_fork, after_in_parent=_release_fork_lock,
                                after_in_child=_after_fork_child)
            _fork_hook_registered = True


def _uninstall() -> None:
    global _installed
    mp_spawn, mp_util = _mp()
    with _install_lock:
        _installed -= 1
        if _installed:
            return
        # When another library wrapped them after us, ours stays inside theirs, idle without a plan.
        if mp_spawn.get_preparation_data is _get_preparation_data:
            mp_spawn.get_preparation_data = _orig_prep
        else:
            log.debug("multiprocessing.spawn.get_preparation_data was wrapped by another library; ours stays inside")
        if mp_util.spawnv_passfds is _spawnv_passfds:
            mp_util.spawnv_passfds = _orig_spawnv
        else:
            log.debug("multiprocessing.util.spawnv_passfds was wrapped by another library; ours stays inside")


@contextlib.contextmanager
def configure_subprocess(plan: Plan, *, strict: Strictness | None = None, backend: BackendName | None = None,
                         threads: ThreadMode = "matching", report: bool = True,
                         spawn: str = "inherit") -> Iterator[ChildBindings]:
    """Bind every multiprocessing child this thread starts inside the block, at birth (spawn, forkserver, fork).

    Yields a :class:`ChildBindings` whose ``report(pid)`` says what each child applied (``report=False`` writes
    no reports). ``strict`` (default ``NUMABIND_STRICT``) applies in the child: one that cannot be bound dies at
    once with a :class:`BirthBindError` traceback naming the cause, and its report carries the error; lenient,
    it starts degraded with the warnings in its report. A plan naming CPUs or nodes this machine lacks raises
    :class:`PlanError` here, before any child starts.

    The plan belongs to the calling thread (nested blocks: the innermost wins); children that other threads
    start, such as a Pool's replacement workers, are not bound: give pools ``initializer=bind_current`` or
    :func:`pool_plans`. On exit multiprocessing is restored; the parent's own binding never changes.
    """
    check_plan(plan, "configure_subprocess")
    live.check_present(plan, "configure_subprocess")   # here, in the parent: no child starts unbound for it
    strict = strict_default(strict)
    _check_args(backend, strict, threads)
    if spawn not in ("inherit", "in-child"):
        raise PlanError(f"spawn={spawn!r} is not 'inherit' or 'in-child'")
    be, why = _backends.get_backend(backend)
    prefix = be.command_prefix(plan)   # PlanError here if numactl cannot express the plan
    mode = "numactl-wrapper" if prefix is not None else "in-process"
    handle = ChildBindings(plan, mode, be.name, report)
    # a backend's own name is one of BACKEND_NAMES
    entry = _Entry(plan=plan, text=plan.to_text(), strict=strict, backend=cast("BackendName", be.name), threads=threads,
                   report_dir=handle.directory, prefix=prefix, spawn=spawn,
                   known=handle.known if report else None)
    log.info("children of thread %s are bound at birth to %s (%s via %s: %s)",
             threading.current_thread().name, plan.describe(), mode, be.name, why)
    keep_binding_env(dict(os.environ))   # said here, once (INFO, or WARNING for the user's 1); the children set it
    _install()
    if not hasattr(_local, "stack"):
        _local.stack = []
    st: list[_Entry] = _local.stack
    st.append(entry)
    try:
        yield handle
    finally:
        with contextlib.suppress(ValueError):
            st.remove(entry)
        _uninstall()


