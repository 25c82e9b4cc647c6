"""Processes that are bound when they are born.

* :func:`configure_subprocess` — every ``multiprocessing`` child started by the
  calling thread inside the ``with`` block is bound at birth:

  - ``spawn`` (default ``spawn="inherit"``): CPU affinity and memory policy are
    per-thread attributes that a child inherits from the thread that forks it
    and keeps across ``execve``. numabind binds *only the launching thread*,
    through the cffi backend, for the instant multiprocessing forks and execs
    the child (``multiprocessing.util.spawnv_passfds``), then restores that
    thread. The child is bound from its first instruction: before the
    interpreter starts, before ``__main__`` is re-imported, before any user
    import, and it never needs to import numabind. Strict failures raise from
    ``Process.start()`` in the parent, with the thread already restored.
  - ``spawn`` with ``spawn="in-child"``, and ``forkserver``: the parent adds one
    entry to the *preparation data* multiprocessing pickles for the child
    (``multiprocessing.spawn.get_preparation_data``). The child unpickles that
    dict before ``prepare()`` re-imports the parent's ``__main__``; unpickling
    the entry calls :func:`_child_bind`, which binds the child with
    :func:`~numabind.bind_current`. ``prepare()`` ignores keys it does not
    know. The forkserver process keeps only ``main_path``/``sys_path`` of its
    own preparation data, so it stays unbound; only its children are bound.
    A forkserver child pays the numabind import unless the server preloaded
    it (it preloads ``__main__``, which usually imports numabind).
  - ``fork``: an ``os.register_at_fork(after_in_child=...)`` hook binds the child
    inside ``os.fork()``, before the target runs (any ``os.fork()`` of the
    thread inside the block, including ``subprocess`` with ``preexec_fn``).
  - Only the ``numactl`` backend usable (no native module): ``spawn`` children
    are started through ``numabind/numactl_wrapper.sh`` (put in front of that
    one child's command line, not made the global executable, so the
    forkserver and the resource tracker are never wrapped) and check their
    binding while unpickling; ``fork`` and ``forkserver`` children get CPU
    affinity in-process, and their memory policy cannot be set (a warning, or
    a failure under strict).

* :func:`bound` — a picklable callable that binds, then calls ``fn``.
* :func:`wrap_command` — an argv that starts a command already bound.
* :func:`popen_kwargs` — ``subprocess.Popen`` keyword arguments whose child is
  bound after fork, before ``exec``.
* :func:`pool_plans` — pool ``initializer``/``initargs`` that give each worker
  its own plan from a list, round robin, stable when workers are replaced.
* :func:`node_pages` — pages of a process per NUMA node, from ``numa_maps``.

``Plan(migrate=True)``: a spawn child needs none (its pages are born in
place); a fork or forkserver child moves the pages it inherited, but pages it
still shares with its parent move only with CAP_SYS_NICE, and then they move
for the parent too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import multiprocessing.spawn as _mp_spawn
import multiprocessing.util as _mp_util
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from . import backends as _backends
from .backends.base import MemPolicyState, NodePages, node_pages
from ._fs import FsReader
from ._env import Strictness
from .bind import THREAD_MODES, BindReport, bind_current, current_binding, strict_default, strict_label
from .cpulist import format_cpulist
from .errors import BindError, NumabindError, PlanError
from .plan import Plan

__all__ = [
    "BirthBindError",
    "ChildBindings",
    "ChildReport",
    "NodePages",
    "BoundCall",
    "bound",
    "birth_report",
    "configure_subprocess",
    "node_pages",
    "pool_plans",
    "popen_kwargs",
    "wrap_command",
    "worker_slot",
]

log = logging.getLogger(__name__)

#: Keys numabind adds to multiprocessing's preparation data.
_PATH_KEY = "_numabind_sys_path"
_BIND_KEY = "_numabind_bind"
_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_REPORT_MAX = 1 << 20


class BirthBindError(NumabindError):
    """A child could not be bound at birth under strict mode (the cause is chained)."""


# ----------------------------------------------------------------------------- reports
@dataclass(frozen=True)
class ChildReport:
    """What a child said about its own binding at birth."""

    pid: int
    start_method: str                 # "spawn" | "forkserver" | "fork" ("call"/"pool": bound/pool_plans)
    report: BindReport | None         # None when binding failed (strict)
    error: str | None = None          # the exception, when binding failed

    @property
    def ok(self) -> bool:
        return self.error is None and self.report is not None and self.report.ok


def _report_record(pid: int, method: str, report: BindReport | None, error: str | None) -> dict:
    rec: dict = {"pid": pid, "start_method": method, "error": error}
    if report is not None:
        rec.update(requested=report.requested.to_text(), applied=report.applied.to_text(),
                   backend=report.backend, backend_reason=report.backend_reason,
                   warnings=list(report.warnings), notes=list(report.notes),
                   pages_migrated=report.pages_migrated,
                   pages_not_migrated=report.pages_not_migrated)
    return rec


def _str_list(value, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} is not a list of strings")
    return tuple(value)


def _opt_int(value, what: str) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise ValueError(f"{what} is not an int")
    return value


def _report_from_record(rec: dict) -> ChildReport:
    """Parse a child's JSON record strictly (plans through Plan.from_text)."""
    if not isinstance(rec, dict):
        raise ValueError("not an object")
    pid = _opt_int(rec.get("pid"), "pid")
    method = rec.get("start_method")
    error = rec.get("error")
    if pid is None or not isinstance(method, str) or not (error is None or isinstance(error, str)):
        raise ValueError("pid, start_method or error malformed")
    report = None
    if "requested" in rec:
        for key in ("backend", "backend_reason"):
            if not isinstance(rec.get(key), str):
                raise ValueError(f"{key} is not a string")
        report = BindReport(requested=Plan.from_text(rec["requested"]), applied=Plan.from_text(rec["applied"]),
                            backend=rec["backend"], backend_reason=rec["backend_reason"],
                            warnings=_str_list(rec.get("warnings"), "warnings"),
                            notes=_str_list(rec.get("notes"), "notes"),
                            pages_migrated=_opt_int(rec.get("pages_migrated"), "pages_migrated"),
                            pages_not_migrated=_opt_int(rec.get("pages_not_migrated"), "pages_not_migrated"))
    return ChildReport(pid=pid, start_method=method, report=report, error=error)


def _write_report(directory: str | None, rec: dict) -> None:
    """Child side: write ``<dir>/<pid>.json`` atomically; a failure only logs."""
    if not directory:
        return
    pid = rec["pid"]
    tmp = os.path.join(directory, f".{pid}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, json.dumps(rec).encode())
        finally:
            os.close(fd)
        os.replace(tmp, os.path.join(directory, f"{pid}.json"))
    except OSError as e:  # the parent closed its ChildBindings meanwhile
        log.debug("cannot write the birth report of pid %d to %s: %s", pid, directory, e)


_birth: ChildReport | None = None


def birth_report() -> ChildReport | None:
    """In a child bound at birth (configure_subprocess, bound, pool_plans): what happened; else None."""
    return _birth


class ChildBindings:
    """The handle ``configure_subprocess`` yields: the plan, and the children's reports.

    A child that binds itself (fork, forkserver, ``spawn="in-child"``, the
    numactl wrapper) writes its report into a private directory (mode 0700)
    that lives until :meth:`close` or until this handle is garbage collected,
    so reports can be read after the ``with`` block; a spawn child bound by
    inheritance gets its report from the parent, kept in memory.
    """

    def __init__(self, plan: Plan, mode: str, backend: str, report: bool) -> None:
        self.plan = plan
        self.mode = mode                  # "in-process" | "numactl-wrapper"
        self.backend = backend
        self.directory = tempfile.mkdtemp(prefix="numabind-births-") if report else None
        self.known: dict[int, ChildReport] = {}   # reports made in this process (spawn by inheritance)
        self._finalizer = (weakref.finalize(self, _remove_dir, self.directory, os.getpid())
                           if self.directory else None)

    def reports(self) -> dict[int, ChildReport]:
        """Every report written so far, by pid."""
        out: dict[int, ChildReport] = dict(self.known)
        if not self.directory:
            return out
        for name in os.listdir(self.directory):
            if name.endswith(".json") and name[:-5].isdigit():
                rep = self._read(int(name[:-5]))
                if rep is not None:
                    out[rep.pid] = rep
        return out

    def _read(self, pid: int) -> ChildReport | None:
        path = os.path.join(self.directory or "", f"{pid}.json")
        try:
            with open(path, "rb") as f:
                data = f.read(_REPORT_MAX + 1)
        except FileNotFoundError:
            return None
        if len(data) > _REPORT_MAX:
            raise NumabindError(f"birth report {path} is larger than {_REPORT_MAX} bytes")
        try:
            return _report_from_record(json.loads(data))
        except (ValueError, PlanError) as e:
            raise NumabindError(f"birth report {path} is malformed: {e}") from None

    def report(self, pid: int, timeout: float = 30.0) -> ChildReport:
        """The report of child ``pid``, waiting up to ``timeout`` seconds for it."""
        if not self.directory:
            raise NumabindError("this configure_subprocess was entered with report=False")
        deadline = time.monotonic() + timeout
        delay = 0.001
        while True:
            rep = self.known.get(pid) or self._read(pid)
            if rep is not None:
                return rep
            if time.monotonic() >= deadline:
                raise TimeoutError(f"child {pid} wrote no birth report within {timeout} s "
                                   f"(it was not started inside configure_subprocess, or it died before binding)")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def close(self) -> None:
        """Remove the report directory (children that write later only log at DEBUG)."""
        if self._finalizer is not None:
            self._finalizer()

    def __repr__(self) -> str:
        return f"ChildBindings({self.plan}, mode={self.mode}, backend={self.backend})"


def _remove_dir(path: str, owner: int) -> None:
    if os.getpid() == owner:  # a forked child's copy of the handle must not delete it
        shutil.rmtree(path, ignore_errors=True)


# ----------------------------------------------------------------------------- binding in the child
def _check_args(backend, strict, threads) -> None:
    if backend is not None and backend not in _backends.BACKEND_NAMES:
        raise PlanError(f"backend {backend!r} is not one of {', '.join(_backends.BACKEND_NAMES)}")
    if not (isinstance(strict, bool) or strict == "partial"):
        raise PlanError(f"strict must be True, False or 'partial', got {strict!r}")
    if threads not in THREAD_MODES:
        raise PlanError(f"threads={threads!r} is not one of {', '.join(THREAD_MODES)}")


def _bind_or_verify(plan: Plan, strict: Strictness, backend: str | None, threads: str, verify: bool) -> BindReport:
    """Bind this process (or, after the numactl wrapper bound it at exec, check that it did)."""
    if not verify:
        return bind_current(plan, strict=strict, threads=threads, backend=backend)
    now = current_binding(backend)
    warnings = []
    if plan.cpus is not None and now.cpus != plan.cpus:
        warnings.append(f"the numactl wrapper left CPUs {format_cpulist(now.cpus)}, not {format_cpulist(plan.cpus)}")
    if plan.mem_policy is not None and now.mem_policy is not None and \
            (now.mem_policy, now.mem_nodes) != (plan.mem_policy, plan.mem_nodes or frozenset()):
        warnings.append(f"the numactl wrapper left memory policy {now.mem_policy} "
                        f"{format_cpulist(now.mem_nodes)}, not {plan.mem_policy} {format_cpulist(plan.mem_nodes or ())}")
    requested = (plan.cpus is not None) + (plan.mem_policy is not None)
    if warnings and (strict is True or (strict == "partial" and len(warnings) == requested)):
        raise NumabindError("; ".join(warnings))
    for w in warnings:
        log.warning("%s", w)
    return BindReport(requested=plan, applied=now.plan, backend=now.backend,
                      backend_reason="bound at exec by numabind/numactl_wrapper.sh",
                      warnings=tuple(warnings), notes=("bound by numactl at exec, verified in the child",))


def _child_bind(text, strict, backend, threads, report_dir, method, verify) -> str:
    """Run inside a spawn/forkserver child while it unpickles its preparation data.

    Every argument is checked: ``text`` goes through the strict
    :meth:`Plan.from_text`, nothing is evaluated.
    """
    global _birth
    plan = Plan.from_text(text)
    _check_args(backend, strict, threads)
    if not (report_dir is None or isinstance(report_dir, str)) or method not in ("spawn", "forkserver", "unknown"):
        raise PlanError("malformed numabind preparation data")
    pid = os.getpid()
    try:
        report = _bind_or_verify(plan, strict, backend, threads, bool(verify))
    except NumabindError as e:
        _write_report(report_dir, _report_record(pid, method, None, f"{type(e).__name__}: {e}"))
        raise BirthBindError(f"numabind: {method} child {pid} could not be bound at birth to "
                             f"{plan.describe()} ({strict_label(strict)}): {e}") from e
    _birth = ChildReport(pid, method, report)
    _write_report(report_dir, _report_record(pid, method, report, None))
    return "bound"


class _Import:
    """Unpickles as ``__import__(name)``: a builtin, so it needs no sys.path."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce__(self):
        return (__import__, (self.name,))


class _Attr:
    def __init__(self, obj, name: str) -> None:
        self.obj, self.name = obj, name

    def __reduce__(self):
        return (getattr, (self.obj, self.name))


class _PathHint:
    """Unpickles as ``sys.path.insert(0, <numabind's parent dir>)`` in the child.

    The child imports numabind before ``prepare()`` installs the parent's
    sys.path; putting the directory numabind was loaded from first makes it
    import exactly the parent's copy (not a ``numabind/`` in its working
    directory, which a ``python -c`` child has first on its path), also when
    the parent found numabind through a path of its own. ``prepare()``
    replaces sys.path right after, so nothing is left behind.
    """

    def __reduce__(self):
        return (list.insert, (_Attr(_Import("sys"), "path"), 0, _PKG_PARENT))


class _BindPayload:
    def __init__(self, entry: _Entry, method: str) -> None:
        self.entry, self.method = entry, method

    def __reduce__(self):
        e = self.entry
        verify = self.method == "spawn" and e.prefix is not None
        return (_child_bind, (e.text, e.strict, e.backend, e.threads, e.report_dir, self.method, verify))


# ----------------------------------------------------------------------------- per-thread state and hooks
@dataclass
class _Entry:
    plan: Plan
    text: str
    strict: Strictness
    backend: str
    threads: str
    report_dir: str | None
    prefix: list[str] | None          # numactl wrapper prefix, when no in-process backend
    spawn: str = "inherit"            # how spawn children are bound: "inherit" | "in-child"
    known: dict | None = None         # ChildBindings.known, for reports made in this process
    pid: int = field(default_factory=os.getpid)


_local = threading.local()
_install_lock = threading.Lock()
_installed = 0
_orig_prep = None
_orig_spawnv = None
_fork_hook_registered = False


def _stack() -> list[_Entry]:
    st = getattr(_local, "stack", None)
    if st is None:
        st = _local.stack = []
    return st


def _top() -> _Entry | None:
    """The innermost plan of the calling thread in this process (a forked child ignores its parent's)."""
    st = getattr(_local, "stack", None)
    if st:
        e = st[-1]
        if e.pid == os.getpid():
            return e
    return None


_LAUNCHERS = {"multiprocessing.popen_spawn_posix": "spawn", "multiprocessing.popen_forkserver": "forkserver",
              "multiprocessing.forkserver": "server"}


def _launcher() -> str:
    """Which multiprocessing module asks for preparation data (a few frames up, in case of wrappers)."""
    frame = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            break
        found = _LAUNCHERS.get(frame.f_globals.get("__name__", ""))
        if found:
            return found
        frame = frame.f_back
    return "unknown"


def _get_preparation_data(name):
    data = _orig_prep(name)
    entry = _top()
    if entry is None:
        return data
    method = _launcher()
    if method == "server":
        return data  # the forkserver's own start: it must stay unbound (its keys are filtered anyway)
    if method == "spawn" and entry.spawn == "inherit" and entry.prefix is None:
        return data  # bound by inheritance from the launching thread (_spawnv_passfds)
    data[_PATH_KEY] = _PathHint()
    data[_BIND_KEY] = _BindPayload(entry, method)
    return data


def _spawnv_passfds(path, args, passfds):
    """Start a spawn child bound: by inheritance from this thread, or through the numactl wrapper.

    Only spawn children (their command line ends with ``--multiprocessing-fork``)
    are touched; the forkserver and the resource tracker start unbound.
    """
    entry = _top()
    if entry is None or not args or args[-1] != "--multiprocessing-fork":
        return _orig_spawnv(path, args, passfds)
    if entry.prefix is not None:
        return _orig_spawnv(os.fsencode(entry.prefix[0]), [*entry.prefix, os.fsdecode(path), *args[1:]], passfds)
    if entry.spawn != "inherit":
        return _orig_spawnv(path, args, passfds)
    with _thread_bound(entry) as report:
        pid = _orig_spawnv(path, args, passfds)
    if entry.known is not None:
        entry.known[pid] = ChildReport(pid, "spawn", report)
    return pid


@contextlib.contextmanager
def _thread_bound(entry: _Entry) -> Iterator[BindReport]:
    """Bind only the calling thread to the entry's plan for the block, then restore it.

    Affinity and memory policy are per thread and a child inherits them from
    the thread that forks it, and keeps them across exec: a child started in
    the block is bound from its first instruction, and other threads of the
    parent never see a change. Strict failures raise here, already rolled back.
    """
    be, _ = _backends.get_backend(entry.backend)
    cpus = be.get_affinity(0)
    plan = entry.plan
    # a new process has no pages yet; migrating here would move the parent's
    plan = Plan(cpus=plan.cpus, mem_policy=plan.mem_policy, mem_nodes=plan.mem_nodes, reason=plan.reason)
    policy: MemPolicyState | None = None
    unsaved = None
    if plan.mem_policy is not None:
        try:  # the whole mode word (MPOL_F_* flags included) and node mask, to be put back exactly
            policy = be.save_mempolicy()
        except BindError as e:
            # The thread's policy could not be put back after the spawn: never change it.
            unsaved = (f"memory policy {plan.mem_policy} {format_cpulist(plan.mem_nodes or ())} not applied: the "
                       f"launching thread's memory policy cannot be read ({e}), so it could not be restored after "
                       f"the spawn")
            if entry.strict is True or (entry.strict == "partial" and plan.cpus is None):
                raise BindError(e.errno, "get_mempolicy", f"{unsaved}; nothing was changed") from None
            log.warning("%s; the child keeps the parent's policy", unsaved)
            plan = Plan(cpus=plan.cpus, reason=plan.reason)
    report = bind_current(plan, strict=entry.strict, threads="current", backend=entry.backend)
    if unsaved is not None:
        report = dataclasses.replace(report, requested=entry.plan, warnings=(*report.warnings, unsaved))
    try:
        yield report
    finally:
        try:
            be.set_affinity(0, cpus)
            if policy is not None:
                be.restore_mempolicy(policy)
        except NumabindError as e:
            log.warning("could not restore the launching thread's binding: %s", e)


def _before_fork() -> None:
    if _top() is not None:
        # A thread of the parent may hold the backend registry lock while this
        # thread forks; hold it across fork so the child's copy is released.
        _backends.lock_for_fork()
        _local.holds_lock = True


def _after_fork_parent() -> None:
    if getattr(_local, "holds_lock", False):
        _local.holds_lock = False
        _backends.unlock_after_fork()


def _after_fork_child() -> None:
    global _birth
    held = getattr(_local, "holds_lock", False)
    if held:
        _local.holds_lock = False
        _backends.unlock_after_fork()
    st = getattr(_local, "stack", None)
    if not held or not st:
        return
    entry = st[-1]
    pid = os.getpid()
    try:
        report = bind_current(entry.plan, strict=entry.strict, threads=entry.threads, backend=entry.backend)
    except BaseException as e:  # noqa: BLE001 - an at-fork hook cannot raise: fail the child loudly
        _write_report(entry.report_dir, _report_record(pid, "fork", None, f"{type(e).__name__}: {e}"))
        text = (f"numabind: fork child {pid} could not be bound at birth to {entry.plan.describe()}"
                f" ({strict_label(entry.strict)}); exiting with status 1\n" + traceback.format_exc())
        with contextlib.suppress(OSError):
            os.write(2, text.encode(errors="replace"))
        os._exit(1)
    _birth = ChildReport(pid, "fork", report)
    _write_report(entry.report_dir, _report_record(pid, "fork", report, None))
    for e in st:  # the child is bound now; its own children are born from it
        e.pid = -1


def _install() -> None:
    global _installed, _orig_prep, _orig_spawnv, _fork_hook_registered
    with _install_lock:
        if _installed == 0:
            # A wrapper left inside another library's wrapper (see _uninstall) is still in the
            # chain: wrapping again would make it call itself.
            if _orig_prep is None or _mp_spawn.get_preparation_data is _orig_prep:
                _orig_prep = _mp_spawn.get_preparation_data
                _mp_spawn.get_preparation_data = _get_preparation_data
            if _orig_spawnv is None or _mp_util.spawnv_passfds is _orig_spawnv:
                _orig_spawnv = _mp_util.spawnv_passfds
                _mp_util.spawnv_passfds = _spawnv_passfds
        _installed += 1
        if not _fork_hook_registered:  # at-fork hooks cannot be unregistered: registered once, idle when unused
            os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent,
                                after_in_child=_after_fork_child)
            _fork_hook_registered = True


def _uninstall() -> None:
    global _installed
    with _install_lock:
        _installed -= 1
        if _installed:
            return
        # When another library wrapped them after us, ours stays inside theirs, idle without a plan.
        if _mp_spawn.get_preparation_data is _get_preparation_data:
            _mp_spawn.get_preparation_data = _orig_prep
        else:
            log.debug("multiprocessing.spawn.get_preparation_data was wrapped by another library; ours stays inside")
        if _mp_util.spawnv_passfds is _spawnv_passfds:
            _mp_util.spawnv_passfds = _orig_spawnv
        else:
            log.debug("multiprocessing.util.spawnv_passfds was wrapped by another library; ours stays inside")


@contextlib.contextmanager
def configure_subprocess(plan: Plan, *, strict: Strictness | None = None, backend: str | None = None,
                         threads: str = "matching", report: bool = True,
                         spawn: str = "inherit") -> Iterator[ChildBindings]:
    """Bind every multiprocessing child this thread starts inside the block, at birth.

    Works for the ``spawn``, ``forkserver`` and ``fork`` start methods (see the
    module docstring for how). Yields a :class:`ChildBindings` whose
    ``report(pid)`` returns what each child applied (``report=False`` skips
    writing reports). ``strict`` (default ``NUMABIND_STRICT``) is applied in the
    child: a child that cannot be bound dies at once with a Python traceback
    naming the cause (:class:`BirthBindError` chained to the ``PlanError`` or
    ``BindError``), and its report carries the error; without strict it starts
    degraded, with the warnings in its report.

    Thread safety: the plan belongs to the calling thread. Several threads may
    each hold their own ``configure_subprocess`` with different plans and start
    children concurrently; each child gets the plan of the thread that started
    it. Children started by other threads (e.g. a Pool's worker-handler thread
    replacing workers) are not bound: give pools ``initializer=bind_current``
    or :func:`pool_plans`. Nesting is allowed; the innermost plan wins.

    On exit everything is restored (also on exceptions): multiprocessing's
    functions are put back when the last active block in the process ends, and
    the parent's own affinity and memory policy are never changed.
    """
    if not isinstance(plan, Plan):
        raise PlanError(f"configure_subprocess needs a numabind.Plan, got {type(plan).__name__}: {plan!r}")
    strict = strict_default(strict)
    _check_args(backend, strict, threads)
    if spawn not in ("inherit", "in-child"):
        raise PlanError(f"spawn={spawn!r} is not 'inherit' or 'in-child'")
    be, why = _backends.get_backend(backend)
    prefix = be.command_prefix(plan)   # PlanError here if numactl cannot express the plan
    mode = "numactl-wrapper" if prefix is not None else "in-process"
    handle = ChildBindings(plan, mode, be.name, report)
    entry = _Entry(plan=plan, text=plan.to_text(), strict=strict, backend=be.name, threads=threads,
                   report_dir=handle.directory, prefix=prefix, spawn=spawn,
                   known=handle.known if report else None)
    log.info("children of thread %s are bound at birth to %s (%s via %s: %s)",
             threading.current_thread().name, plan.describe(), mode, be.name, why)
    _install()
    st = _stack()
    st.append(entry)
    try:
        yield handle
    finally:
        with contextlib.suppress(ValueError):
            st.remove(entry)
        _uninstall()


# ----------------------------------------------------------------------------- bound callables
@dataclass(frozen=True)
class BoundCall:
    """``fn`` behind a binding: calling it binds the process, then calls ``fn``. Picklable if ``fn`` is."""

    plan: Plan
    fn: Callable
    strict: Strictness | None = None
    backend: str | None = None
    threads: str = "matching"

    def __call__(self, *args, **kwargs):
        global _birth
        report = bind_current(self.plan, strict=self.strict, threads=self.threads, backend=self.backend)
        _birth = ChildReport(os.getpid(), "call", report)
        return self.fn(*args, **kwargs)


def bound(plan: Plan, fn: Callable, *, strict: Strictness | None = None, backend: str | None = None,
          threads: str = "matching") -> BoundCall:
    """A picklable callable that binds to ``plan``, then calls ``fn`` (e.g. ``Process(target=bound(plan, work))``)."""
    if not isinstance(plan, Plan):
        raise PlanError(f"bound needs a numabind.Plan, got {type(plan).__name__}: {plan!r}")
    if not callable(fn):
        raise TypeError(f"bound needs a callable, got {fn!r}")
    return BoundCall(plan, fn, strict, backend, threads)


# ----------------------------------------------------------------------------- commands
# Run with -I (isolated: neither the working directory nor PYTHON* variables reach sys.path), so the
# interim Python imports exactly the numabind copy of the parent, from the directory passed as argv[1].
_EXEC_CODE = ("import sys; sys.path.insert(0, sys.argv[1]); "
              "from numabind.process import _exec_main; _exec_main(sys.argv[2:])")


def wrap_command(plan: Plan, argv: Sequence[str], *, strict: Strictness | None = None,
                 backend: str | None = None) -> list[str]:
    """An argv that runs ``argv`` bound to ``plan`` (give it to subprocess without a shell).

    With an in-process backend:
    ``[python, -I, -c, <fixed code>, <numabind's parent dir>, <plan text>, <strict>, --, *argv]``
    — an isolated Python that imports this very copy of numabind (never one in
    its working directory or on its PYTHONPATH), binds itself and execs the
    command with the environment unchanged (no numactl needed; the plan travels
    as validated text, never as code). With only the numactl backend: the
    numactl wrapper's argv. ``migrate`` is dropped: a new process has no pages
    to move.
    """
    if not isinstance(plan, Plan):
        raise PlanError(f"wrap_command needs a numabind.Plan, got {type(plan).__name__}: {plan!r}")
    argv = list(argv)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise PlanError(f"wrap_command needs a non-empty list of strings, got {argv!r}")
    be, _ = _backends.get_backend(backend)
    prefix = be.command_prefix(plan)
    if prefix is not None:
        return [*prefix, *argv]
    plan = Plan(cpus=plan.cpus, mem_policy=plan.mem_policy, mem_nodes=plan.mem_nodes, reason=plan.reason)
    flags = strict_label(strict_default(strict)) + "," + be.name
    return [sys.executable, "-I", "-c", _EXEC_CODE, _PKG_PARENT, plan.to_text(), flags, "--", *argv]


_STRICT_WORDS: dict[str, Strictness] = {"strict": True, "lenient": False, "partial": "partial"}


def _exec_main(argv: Sequence[str] | None = None) -> None:
    """Entry of :func:`wrap_command`'s argv: validate, bind, exec. Never returns."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if len(argv) < 4 or argv[2] != "--":
            raise PlanError("usage: <plan text> <strict|lenient|partial>,<backend> -- command [args...]")
        mode, _, backend = argv[1].partition(",")
        if mode not in _STRICT_WORDS or backend not in _backends.BACKEND_NAMES:
            raise PlanError(f"bad flags {argv[1][:100]!r}: expected strict|lenient|partial,<backend>")
        plan = Plan.from_text(argv[0])
        report = bind_current(plan, strict=_STRICT_WORDS[mode], backend=backend)
    except NumabindError as e:
        sys.stderr.write(f"numabind: error: {e}\n")
        raise SystemExit(2) from None
    for w in report.warnings:
        sys.stderr.write(f"numabind: warning: {w}\n")
    command = argv[3:]
    try:
        os.execvp(command[0], command)
    except OSError as e:
        sys.stderr.write(f"numabind: cannot execute {command[0]!r}: {e.strerror}\n")
        raise SystemExit(127) from None


class _PreexecBind:
    """preexec_fn: binds the forked child before exec (bind_current, calling thread only)."""

    def __init__(self, plan: Plan, strict: Strictness, backend: str) -> None:
        self.plan, self.strict, self.backend = plan, strict, backend

    def __call__(self) -> None:
        try:
            report = bind_current(self.plan, strict=self.strict, threads="current", backend=self.backend)
        except NumabindError as e:
            os.write(2, f"numabind: cannot bind the child before exec: {e}\n".encode(errors="replace"))
            raise
        for w in report.warnings:
            os.write(2, f"numabind: warning: {w}\n".encode(errors="replace"))


def popen_kwargs(plan: Plan, *, strict: Strictness | None = None, backend: str | None = None) -> dict:
    """``subprocess.Popen`` keyword arguments that bind the child after fork, before exec.

    ``subprocess.Popen(argv, **popen_kwargs(plan))``. Memory policy and affinity
    survive ``execve``. It uses ``preexec_fn``, which Python documents as unsafe
    when the parent runs threads; a threaded parent should rather use
    ``Popen(wrap_command(plan, argv))``, which also combines with
    ``process_group=``/``start_new_session=``. With only the numactl backend the
    same applies: use :func:`wrap_command`.
    """
    if not isinstance(plan, Plan):
        raise PlanError(f"popen_kwargs needs a numabind.Plan, got {type(plan).__name__}: {plan!r}")
    be, _ = _backends.get_backend(backend)
    if be.command_prefix(plan) is not None:
        raise NumabindError("the numactl backend cannot bind a child before exec in-process; "
                            "use subprocess.Popen(numabind.wrap_command(plan, argv))")
    plan = Plan(cpus=plan.cpus, mem_policy=plan.mem_policy, mem_nodes=plan.mem_nodes, reason=plan.reason)
    return {"preexec_fn": _PreexecBind(plan, strict_default(strict), be.name)}


# ----------------------------------------------------------------------------- pools
class _SlotTable:
    """A file of pool slots claimed by worker pids (fcntl-locked); slot k gets plans[k % len(plans)].

    A worker claims the lowest slot whose owner is gone, so a replacement (after
    ``maxtasksperchild``) gets the plan of the worker it replaces.
    """

    def __init__(self, plans: Sequence[Plan], slots: int, strict: Strictness | None, backend: str | None) -> None:
        fd, self.path = tempfile.mkstemp(prefix="numabind-pool-", suffix=".json")
        os.write(fd, json.dumps([[0, 0]] * slots).encode())
        os.close(fd)
        self.texts = [p.to_text() for p in plans]
        self.slots = slots
        self.strict, self.backend = strict, backend
        self._owner = os.getpid()
        weakref.finalize(self, _remove_file, self.path, self._owner)

    #: A replacement can start while the worker it replaces is still exiting
    #: (ProcessPoolExecutor starts it as soon as the old one reported its last
    #: result): wait this long for a slot to free before taking an extra one.
    CLAIM_WAIT_S = 2.0

    def claim(self) -> int:
        deadline = time.monotonic() + self.CLAIM_WAIT_S
        while True:
            slot = self._claim_once(extra=time.monotonic() >= deadline)
            if slot is not None:
                return slot
            time.sleep(0.01)

    def _claim_once(self, extra: bool) -> int | None:
        import fcntl

        me = (os.getpid(), _start_time(os.getpid()))
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX)
            table = json.loads(os.pread(fd, 1 << 20, 0) or b"[]")
            if not isinstance(table, list) or len(table) < self.slots or \
                    not all(isinstance(e, list) and len(e) == 2 for e in table):
                raise NumabindError(f"pool slot table {self.path} is malformed")
            free = [k for k, (pid, start) in enumerate(table) if not _alive(pid, start)]
            if free:
                slot = free[0]
                table[slot] = list(me)
            elif not extra:
                return None
            else:  # more live workers than slots: keep going round robin, and say why
                slot = len(table)
                table.append(list(me))
                log.warning("all %d pool slots are held by live workers; worker %d takes extra slot %d "
                            "(give pool_plans processes= the pool's size)", self.slots, me[0], slot)
            data = json.dumps(table).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)
        return slot


def _remove_file(path: str, owner: int) -> None:
    if os.getpid() == owner:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _start_time(pid: int) -> int:
    """Process start time in clock ticks (field 22 of /proc/PID/stat), 0 if gone; guards against pid reuse."""
    text = FsReader("/").read(f"proc/{pid}/stat")
    if not text:
        return 0
    fields = text[text.rfind(")") + 2:].split()
    if fields[0] in ("Z", "X"):  # exited, not yet reaped
        return 0
    return int(fields[19])


def _alive(pid, start) -> bool:
    return isinstance(pid, int) and pid > 0 and start != 0 and _start_time(pid) == start


_slot: tuple[int, Plan] | None = None


def worker_slot() -> tuple[int, Plan] | None:
    """In a pool worker set up by :func:`pool_plans`: ``(slot, plan)``; else None."""
    return _slot


def _claim_and_bind(table: _SlotTable) -> None:
    global _slot, _birth
    slot = table.claim()
    plan = Plan.from_text(table.texts[slot % len(table.texts)])
    report = bind_current(plan, strict=table.strict, backend=table.backend)
    _slot = (slot, plan)
    _birth = ChildReport(os.getpid(), "pool", report)
    log.info("pool worker %d took slot %d: %s", os.getpid(), slot, plan.describe())


def pool_plans(plans: Sequence[Plan], processes: int | None = None, *, strict: Strictness | None = None,
               backend: str | None = None) -> dict:
    """``initializer``/``initargs`` giving each pool worker its own plan, round robin.

    ``Pool(n, **pool_plans(plans, n))`` or ``ProcessPoolExecutor(n, **pool_plans(plans, n))``:
    the pool's workers take slots 0..n-1, slot k binds to ``plans[k % len(plans)]``.
    A worker that replaces an exited one (``maxtasksperchild``) takes the freed
    slot, so the plans stay evenly used. ``processes`` defaults to ``len(plans)``.
    Inside a worker, :func:`worker_slot` says which slot and plan it got.
    """
    plans = list(plans)
    if not plans or not all(isinstance(p, Plan) for p in plans):
        raise PlanError(f"pool_plans needs a non-empty list of numabind.Plan, got {plans!r}")
    slots = len(plans) if processes is None else processes
    if not isinstance(slots, int) or slots < 1:
        raise PlanError(f"processes must be a positive int, got {processes!r}")
    return {"initializer": _claim_and_bind, "initargs": (_SlotTable(plans, slots, strict, backend),)}


# ----------------------------------------------------------------------------- pages per node
