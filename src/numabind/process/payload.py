"""What a child receives, and what binds it: entries of multiprocessing's preparation data that,
when the child unpickles them, put numabind's own directory first on ``sys.path`` and bind the child
(:func:`_child_bind`) before ``prepare()`` re-imports the parent's ``__main__``."""

from __future__ import annotations

import operator
import os
from typing import TYPE_CHECKING, Any

from .. import backends as _backends
from .._base import Strictness, keep_binding_env
from ..bind import THREAD_MODES, BindReport, bind_current, strict_label
from ..verify import verify_current
from ..errors import BirthBindError, NumabindError, PlanError
from ..plan import Plan
from . import reports

if TYPE_CHECKING:  # pragma: no cover
    from ..types import BackendName, ThreadMode


#: Keys numabind adds to multiprocessing's preparation data.
_PATH_KEY = "_numabind_sys_path"
_BIND_KEY = "_numabind_bind"
_ENV_KEY = "_numabind_env"
#: The directory numabind was imported from (the parent of the package directory).
_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Entry:
    """One configure_subprocess block of one thread."""

    __slots__ = ("plan", "text", "strict", "backend", "threads", "report_dir", "prefix", "spawn", "known", "pid")

    def __init__(self, plan: Plan, text: str, strict: Strictness, backend: BackendName, threads: ThreadMode,
                 report_dir: str | None, prefix: list[str] | None, spawn: str = "inherit",
                 known: dict[int, reports.ChildReport] | None = None) -> None:
        self.plan, self.text, self.strict, self.backend, self.threads = plan, text, strict, backend, threads
        self.report_dir, self.spawn = report_dir, spawn   # spawn: "inherit" | "in-child"
        self.prefix = prefix              # numactl wrapper prefix, when no in-process backend
        self.known = known                # ChildBindings.known, for reports made in this process
        self.pid = os.getpid()


def _check_args(backend: object, strict: object, threads: object) -> None:
    if backend is not None and backend not in _backends.BACKEND_NAMES:
        raise PlanError(f"backend {backend!r} is not one of {', '.join(_backends.BACKEND_NAMES)}")
    if not (isinstance(strict, bool) or strict == "partial"):
        raise PlanError(f"strict must be True, False or 'partial', got {strict!r}")
    if threads not in THREAD_MODES:
        raise PlanError(f"threads={threads!r} is not one of {', '.join(THREAD_MODES)}")


def _bind_or_verify(plan: Plan, strict: Strictness, backend: BackendName | None, threads: ThreadMode,
                    verify: bool) -> BindReport:
    """Bind this process (or, after the numactl wrapper bound it at exec, check that it did)."""
    if not verify:
        return bind_current(plan, strict=strict, threads=threads, backend=backend)
    report = verify_current(plan, strict=strict, threads="current", backend=backend)
    return report.replace(backend_reason="bound at exec by numabind/numactl_wrapper.sh",
                          notes=("bound by numactl at exec, verified in the child", *report.notes))


def _child_bind(text: str, strict: Strictness, backend: BackendName | None, threads: ThreadMode, report_dir: str | None,
                method: str, verify: bool) -> str:
    """Run inside a spawn/forkserver child while it unpickles its preparation data; every argument is
    checked (``text`` by the strict :meth:`Plan.from_text`), nothing is evaluated."""
    plan = Plan.from_text(text)
    _check_args(backend, strict, threads)
    if not (report_dir is None or isinstance(report_dir, str)) or method not in ("spawn", "forkserver", "unknown"):
        raise PlanError("malformed numabind preparation data")
    pid = os.getpid()
    try:
        report = _bind_or_verify(plan, strict, backend, threads, bool(verify))
    except NumabindError as e:
        reports._write_report(report_dir, reports.ChildReport(pid, method, None, f"{type(e).__name__}: {e}"))
        raise BirthBindError(f"{method} child {pid} could not be bound at birth to "
                             f"{plan.describe()} ({strict_label(strict)}): {e}") from e
    birth = reports._set_birth(reports.ChildReport(pid, method, report))   # with its runtime record
    reports._write_report(report_dir, birth)
    return "bound"


class _Call:
    """Unpickles as ``fn(*args)``; with builtins and ``operator`` functions the child imports nothing for it."""

    def __init__(self, fn: Any, *args: object) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple[object, ...]:
        return (self.fn, self.args)


def _module_attr(module: str, name: str) -> _Call:
    return _Call(getattr, _Call(__import__, module), name)


#: Unpickles as ``sys.path.insert(0, <numabind's parent dir>)`` in the child, which imports numabind before
#: ``prepare()`` installs the parent's sys.path: it gets the parent's copy, never a ``numabind/`` in its working
#: directory. ``prepare()`` replaces sys.path right after.
_PATH_HINT = _Call(list.insert, _module_attr("sys", "path"), 0, _PKG_PARENT)


def _binding_env() -> tuple[_Call, ...]:
    """What keep_binding_env would set here, as preparation data for a spawn child bound by inheritance: each
    unpickles as ``os.environ[name] = value``."""
    env = dict(os.environ)
    keep_binding_env(env, say=False)
    return tuple(_Call(operator.setitem, _module_attr("os", "environ"), k, v)
                 for k, v in env.items() if os.environ.get(k) != v)


def _bind_payload(entry: _Entry, method: str) -> _Call:
    """Unpickles as :func:`_child_bind` of ``entry`` (a spawn child of the numactl wrapper only verifies)."""
    verify = method == "spawn" and entry.prefix is not None
    return _Call(_child_bind, entry.text, entry.strict, entry.backend, entry.threads, entry.report_dir, method, verify)
