"""``numabind instrument [--] COMMAND [ARGS...]``: exec the command with numabind's bootstrap directory
(:mod:`numabind.compat.bootstrap`) first on ``PYTHONPATH``, so that its Python processes import numabind's
drop-ins for vLLM's and SGLang's ``numa_utils`` (docs/howto/vllm.rst). Exit 1 when another user could change the
bootstrap, 2 usage, 126/127 when the command cannot run, else the command's status.
"""

from __future__ import annotations

import os
import sys

from . import NOT_APPLIED, USAGE, command_problem, exec_command

__all__ = ["USAGE_TEXT", "bootstrap_dir", "instrumented_environ", "main"]

USAGE_TEXT = """usage: numabind instrument [--] COMMAND [ARGS...]

Run COMMAND with numabind in charge of vLLM's and SGLang's NUMA helpers (vllm.utils.numa_utils,
sglang.srt.utils.numa_utils) in every Python process it starts, without editing them: numabind's
bootstrap directory goes first on PYTHONPATH. Binding still follows the program's own NUMA options.
"""


def bootstrap_dir() -> str:
    """The directory ``numabind instrument`` puts first on ``PYTHONPATH`` (it holds ``sitecustomize.py``)."""
    from ..compat import bootstrap

    return os.path.dirname(os.path.abspath(bootstrap.__file__ or ""))


def _same(entry: str, directory: str) -> bool:
    try:
        return bool(entry) and os.path.samefile(entry, directory)
    except OSError:
        return False


def instrumented_environ(environ: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of ``environ`` (default ``os.environ``) whose ``PYTHONPATH`` starts with :func:`bootstrap_dir`.
    Raises PermissionError naming the path when another user could change the bootstrap or the package."""
    from ..compat.bootstrap.sitecustomize import package_problem, path_problem

    here = bootstrap_dir()
    problem = path_problem(os.path.join(here, "sitecustomize.py")) or package_problem()
    if problem is not None:
        raise PermissionError(f"refusing to instrument from a path another user can write: {problem}")
    env = dict(os.environ if environ is None else environ)
    old = env.get("PYTHONPATH", "")
    rest = [entry for entry in old.split(os.pathsep) if not _same(entry, here)] if old else []
    env["PYTHONPATH"] = os.pathsep.join([here, *rest])
    return env


def main(args: list[str]) -> int:
    """``numabind instrument ARGS``: exec the command instrumented; an exit status when it cannot run."""
    if args[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE_TEXT)
        return 0
    command = args[1:] if args[:1] == ["--"] else args
    if not command or (command[0].startswith("-") and args[:1] != ["--"]):
        sys.stderr.write(USAGE_TEXT.splitlines()[0] + "\nnumabind instrument: error: "
                         + ("a command to run is required\n" if not command
                            else f"unknown option {command[0]!r} (put the command after --)\n"))
        return USAGE
    problem = command_problem(command)
    if problem is not None:
        sys.stderr.write(USAGE_TEXT.splitlines()[0] + f"\nnumabind instrument: error: {problem}\n")
        return USAGE
    try:
        env = instrumented_environ()
    except PermissionError as e:
        sys.stderr.write(f"numabind instrument: error: {e}\n")
        return NOT_APPLIED
    missing = _no_host(env)
    if missing is not None:
        sys.stderr.write(f"numabind instrument: note: {missing}\n")
    return exec_command(command, env)


#: The packages whose NUMA helpers numabind stands in for (numabind.compat.bootstrap routes their modules).
HOSTS = ("vllm", "sglang")


def _no_host(env: dict[str, str]) -> str | None:
    """A note when this Python cannot import vLLM or SGLang with the command's ``PYTHONPATH`` (found by name,
    not imported); else None."""
    import importlib.util

    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[:0] = extra
    try:
        found = [name for name in HOSTS if importlib.util.find_spec(name) is not None]
    except (ImportError, ValueError):
        found = []
    finally:
        del sys.path[:len(extra)]
    if found:
        return None
    return (f"neither vllm nor sglang can be imported by {sys.executable}, so nothing will be replaced (the "
            f"command still runs; a command whose own Python has them is instrumented there)")
