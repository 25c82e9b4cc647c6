"""Commands started bound: :func:`wrap_command` (an argv), :func:`popen_kwargs` (bound after fork,
before exec), :func:`bound` (a picklable callable), and :func:`_exec_main`, the entry of
``wrap_command``'s argv (``numabind run`` binds and execs the same way)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard, cast

from .. import backends as _backends, live
from .._base import EXIT_NOT_APPLIED, EXIT_USAGE, Strictness, Value, excerpt, keep_binding_env
from ..bind import bind_current, bound_environ, strict_default, strict_label
from ..errors import NumabindError, PlanError
from ..plan import Plan, check_plan
from . import reports
from .payload import _PKG_PARENT

if TYPE_CHECKING:  # pragma: no cover
    from ..types import BackendName, ThreadMode

__all__ = ["MAIN_CODE", "BoundCall", "bound", "exec_bound", "numabind_command", "popen_kwargs", "wrap_command"]


class BoundCall(Value):
    """``fn`` behind a binding: calling it binds the process, then calls ``fn``. Picklable if ``fn`` is."""

    __slots__ = ("plan", "fn", "strict", "backend", "threads")
    plan: Plan
    fn: Callable[..., Any]
    strict: Strictness | None
    backend: BackendName | None
    threads: ThreadMode

    def __init__(self, plan: Plan, fn: Callable[..., Any], strict: Strictness | None = None,
                 backend: BackendName | None = None, threads: ThreadMode = "matching") -> None:
        for k, v in (("plan", plan), ("fn", fn), ("strict", strict), ("backend", backend), ("threads", threads)):
            object.__setattr__(self, k, v)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        report = bind_current(self.plan, strict=self.strict, threads=self.threads, backend=self.backend)
        reports._set_birth(reports.ChildReport(os.getpid(), "call", report))   # and its runtime record
        return self.fn(*args, **kwargs)


def bound(plan: Plan, fn: Callable[..., Any], *, strict: Strictness | None = None,
          backend: BackendName | None = None, threads: ThreadMode = "matching") -> BoundCall:
    """A picklable callable that binds to ``plan``, then calls ``fn`` (e.g. ``Process(target=bound(plan, work))``)."""
    check_plan(plan, "bound")
    live.check_present(plan, "bound")      # in the parent: a child never starts unbound for want of a CPU
    if not callable(fn):
        raise TypeError(f"bound needs a callable, got {fn!r}")
    keep_binding_env(dict(os.environ))   # said here (INFO, or WARNING for the user's 1); the call sets it
    return BoundCall(plan, fn, strict, backend, threads)


# numabind's own code in a child starts as ``python -I -c <fixed code> <numabind's parent dir> ARGS``: isolated,
# it imports the parent's numabind copy from argv[1]; ARGS are only data.
_ISOLATED = "import sys; sys.path.insert(0, sys.argv.pop(1)); "
_EXEC_CODE = _ISOLATED + "from numabind.process.commands import _exec_main; _exec_main(sys.argv[1:])"
#: The code of :func:`numabind_command`: ``python -m numabind ARGS``, started isolated. The compat spawn
#: wrapper (``numabind/compat/numa_wrapper.sh``) holds this very text (a test compares them).
MAIN_CODE = _ISOLATED + 'import runpy; runpy.run_module("numabind", run_name="__main__", alter_sys=True)'


def numabind_command(args: Sequence[str], python: str | None = None) -> list[str]:
    """The argv of ``python -m numabind ARGS`` started isolated (``python``, default this interpreter, imports
    this very copy of numabind, whatever the working directory or ``PYTHON*`` hold); a command it execs still
    gets the environment unchanged."""
    return [sys.executable if python is None else python, "-I", "-c", MAIN_CODE, _PKG_PARENT, *args]


def wrap_command(plan: Plan, argv: Sequence[str], *, strict: Strictness | None = None,
                 backend: BackendName | None = None) -> list[str]:
    """An argv that runs ``argv`` bound to ``plan`` (give it to subprocess without a shell; no numactl needed).

    An isolated Python (``python -I``) that imports this very copy of numabind binds itself and execs the
    command, the environment unchanged but for ``_NUMABIND_BOUND`` (:func:`numabind.bind.bound_environ`); the
    plan travels as validated text, never as code. With only the numactl backend: the numactl wrapper's argv.
    ``migrate`` is dropped: a new process has no pages to move.
    """
    check_plan(plan, "wrap_command")
    live.check_present(plan, "wrap_command")    # here, not in the child the argv starts
    argv = list(argv)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise PlanError(f"wrap_command needs a non-empty list of strings, got {argv!r}")
    be, _ = _backends.get_backend(backend)
    keep_binding_env(dict(os.environ))   # said here (INFO, or WARNING for the user's 1); exec_bound sets it
    prefix = be.command_prefix(plan)
    if prefix is not None:
        return [*prefix, *argv]
    plan = plan.replace(migrate=False)
    flags = strict_label(strict_default(strict)) + "," + be.name
    return [sys.executable, "-I", "-c", _EXEC_CODE, _PKG_PARENT, plan.to_text(), flags, "--", *argv]


def _a_backend(name: str) -> TypeGuard[BackendName]:
    return name in _backends.BACKEND_NAMES


_STRICT_WORDS: dict[str, Strictness] = {"strict": True, "lenient": False, "partial": "partial"}


def _bind_saying_here(plan: Plan, **how: Any) -> Any:
    """bind_current without :class:`~numabind.errors.BindWarning` (the caller prints the warnings itself)."""
    import warnings

    from ..errors import BindWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BindWarning)
        return bind_current(plan, **how)


def exec_bound(plan: Plan, command: Sequence[str], *, strict: Strictness | None = None,
               backend: BackendName | None = None, verbose: bool = False) -> None:
    """Bind this process to ``plan``, print each warning on stderr, then exec ``command``. Never returns.

    A refused binding raises; a command that cannot be executed exits 126, one not found 127 (as from a
    shell). The command's environment gets ``_NUMABIND_BOUND`` (:func:`numabind.bind.bound_environ`).
    """
    report = _bind_saying_here(plan, strict=strict, backend=backend)
    if verbose:
        sys.stderr.write(report.describe() + "\n")
    for w in report.warnings:
        sys.stderr.write(f"numabind: warning: {w}\n")
    env = bound_environ(report)
    keep_binding_env(env, say=False)   # TensorRT-LLM must not undo the binding (wrap_command said so)
    raise SystemExit(_backends.exec_command(list(command), env))   # numabind run's exec


def _exec_main(argv: Sequence[str] | None = None) -> None:
    """Entry of :func:`wrap_command`'s argv: validate, bind, exec. Never returns; before the command runs it
    exits as ``numabind run`` does: 2 for malformed arguments, 1 when the binding cannot be applied."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if len(argv) < 4 or argv[2] != "--":
            raise PlanError("usage: <plan text> <strict|lenient|partial>,<backend> -- command [args...]")
        mode, _, backend = argv[1].partition(",")
        if mode not in _STRICT_WORDS or not _a_backend(backend):
            raise PlanError(f"bad flags {excerpt(argv[1], escape=True)}: expected strict|lenient|partial,<backend>")
        plan = Plan.from_text(argv[0])
    except NumabindError as e:
        sys.stderr.write(f"numabind: error: {e}\n")
        raise SystemExit(EXIT_USAGE) from None
    try:
        exec_bound(plan, argv[3:], strict=_STRICT_WORDS[mode], backend=backend)
    except NumabindError as e:
        sys.stderr.write(f"numabind: error: {e}\n")
        raise SystemExit(EXIT_NOT_APPLIED) from None


class _PreexecBind:
    """preexec_fn: binds the forked child before exec (bind_current, calling thread only)."""

    def __init__(self, plan: Plan, strict: Strictness, backend: BackendName) -> None:
        self.plan, self.strict, self.backend = plan, strict, backend

    def __call__(self) -> None:
        try:
            report = _bind_saying_here(self.plan, strict=self.strict, threads="current", backend=self.backend)
        except NumabindError as e:
            os.write(2, f"numabind: cannot bind the child before exec: {e}\n".encode(errors="replace"))
            raise
        for w in report.warnings:
            os.write(2, f"numabind: warning: {w}\n".encode(errors="replace"))
        keep_binding_env(say=False)   # the child's environment, which exec keeps (unless Popen was given env=)


def popen_kwargs(plan: Plan, *, strict: Strictness | None = None, backend: BackendName | None = None) -> dict[str, Any]:
    """``subprocess.Popen`` keyword arguments that bind the child after fork, before exec.

    ``subprocess.Popen(argv, **popen_kwargs(plan))`` uses ``preexec_fn``, which Python calls unsafe when the
    parent runs threads: a threaded parent, or one with only the numactl backend (a NumabindError here), should
    use ``Popen(wrap_command(plan, argv))``.
    """
    check_plan(plan, "popen_kwargs")
    live.check_present(plan, "popen_kwargs")
    be, _ = _backends.get_backend(backend)
    if be.command_prefix(plan) is not None:
        raise NumabindError("the numactl backend cannot bind a child before exec in-process; "
                            "use subprocess.Popen(numabind.wrap_command(plan, argv))")
    plan = plan.replace(migrate=False)
    keep_binding_env(dict(os.environ))   # said here (INFO, or WARNING for the user's 1); the child sets it
    # a backend's own name is one of BACKEND_NAMES
    return {"preexec_fn": _PreexecBind(plan, strict_default(strict), cast("BackendName", be.name))}


