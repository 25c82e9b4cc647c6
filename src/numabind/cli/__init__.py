"""Command line: ``numabind`` (also ``python -m numabind``): :func:`main` sends each command line where it is
read; ``numabind run``'s fast path (:func:`fast_run`) binds and execs here (docs/cli.rst, "How a command line is
read"). On ``numabind run``'s start (P7): no ``__future__``, ``typing``, argparse or logging at import, so
annotations naming type-checking imports are strings.
"""

import os
import sys

from .._base import EXIT_NOT_APPLIED, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, EXIT_USAGE, WARNING, keep_binding_env
from .._numactl import OPTIONS as NUMACTL_OPTIONS, OWN as NUMACTL_OWN, spellings

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the fast path)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable, Sequence
    from typing import TypeVar

    from .._base import Strictness
    from ..devices import Gpu

    _R = TypeVar("_R")

__all__ = ["main", "fast_run", "command_environ", "command_problem", "completion_main", "configure_logging",
           "device_node", "exec_command", "gpu_index", "gpu_spec", "list_body", "list_syntax_problem", "LIST_FORMS",
           "printable_lines", "run_spellings", "run_strictness", "stdout_gone", "write_out", "HANDED", "NOT_APPLIED",
           "RUN_OPTIONS", "RUN_VALUED", "SUBCOMMANDS", "USAGE", "NOT_EXECUTABLE", "NOT_FOUND", "SIGPIPE_STATUS"]

#: Exit statuses of ``numabind run`` before the command runs (docs/_include/exit-status.rst).
NOT_APPLIED, USAGE, NOT_EXECUTABLE, NOT_FOUND = EXIT_NOT_APPLIED, EXIT_USAGE, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND

#: ``numabind run``'s options in ``--help``'s order: name -> kind (:data:`HANDED` kinds go to
#: :meth:`Plan.from_numactl_args`). The fast path takes ``own`` and the handed kinds; any other option is the full
#: command line's.
RUN_OPTIONS = {
    "physcpubind": "cpus", "cpunodebind": "cpus", "membind": "memory", "preferred": "memory",
    "preferred-many": "memory", "interleave": "memory", "weighted-interleave": "memory", "weights": "weights",
    "set-weights": "own", "localalloc": "memory", "all": "all", "within-affinity": "numactl", "balancing": "numactl",
    "gpu": "gpu", "gpus": "gpus", "dry-run": "full", "gpu-from-rank": "gpu", "nic": "full",
    "bind-replayed-root": "full", "mode": "shape", "policy": "shape", "migrate": "own", "strict": "own",
    "lenient": "own", "backend": "own", "thread": "full",
}
#: The kinds :meth:`Plan.from_numactl_args` reads.
HANDED = ("cpus", "memory", "weights", "all")
#: ``numabind run``'s own options (not of numactl's vocabulary) that take a value.
RUN_VALUED = ("gpu", "gpus", "mode", "policy", "backend", "thread")


def run_spellings(name: str) -> "tuple[tuple[str, ...], bool]":
    """(option strings, whether it takes a value) of ``numabind run``'s option ``name`` (:data:`RUN_OPTIONS`): one
    of numactl's vocabulary is spelled as :mod:`numabind._numactl` says (``-N``, ``--cpunodebind``, ``--cpubind``),
    run's own are ``--NAME``."""
    if RUN_OPTIONS[name] in (*HANDED, "numactl"):
        return spellings(name), (NUMACTL_OPTIONS.get(name) or NUMACTL_OWN[name])[1]
    return (f"--{name}",), name in RUN_VALUED


#: What the fast path takes: option string -> (name, takes a value); any other word is the full CLI's.
_FAST = {flag: (name, takes) for name, kind in RUN_OPTIONS.items() if kind == "own" or kind in HANDED
         for flags, takes in [run_spellings(name)] for flag in flags}


def _parse(args: list[str]) -> tuple[list[str], dict[str, str], list[str]] | None:
    """(numactl argv, numabind's own settings by name, command), or None when the full CLI must handle ``args``."""
    numactl: list[str] = []
    seen: set[str] = set()
    own: dict[str, str] = {}
    k = 0
    while k < len(args):
        tok = args[k]
        k += 1
        if tok == "--":
            command = args[k:]
            return (numactl, own, command) if command and numactl and command_problem(command) is None else None
        flag, eq, value = tok.partition("=") if tok.startswith("--") else (tok[:2], "", tok[2:])
        if not tok.startswith("--") and value:
            eq = "="
        spec = _FAST.get(flag)
        if spec is None or spec[0] in seen:
            return None
        name, takes = spec
        seen.add(name)
        handed = RUN_OPTIONS[name] != "own"
        if not takes:
            if eq:
                return None
            if handed:
                numactl.append(f"--{name}")
            else:
                own[name] = "1"
            continue
        if not eq:
            if k >= len(args) or args[k] == "--" or args[k].startswith("-"):
                return None
            value = args[k]
            k += 1
        if not value or (name == "weights" and value == "bandwidth"):
            return None
        if handed:
            numactl.append(f"--{name}={value}")
        else:
            own[name] = value
    return None


def run_strictness(strict: bool, lenient: bool) -> "Strictness":
    """``--strict`` True, ``--lenient`` False, else ``NUMABIND_STRICT`` when set, else True; both flags at once
    raise ValueError."""
    if strict and lenient:
        raise ValueError("--strict and --lenient contradict each other: give one of them")
    if strict or lenient:
        return bool(strict)
    if os.environ.get("NUMABIND_STRICT", ""):
        from .._base import strict_from_env

        return strict_from_env()
    return True


def device_node(spec: str) -> int:
    """The node of a numactl device specifier (``pci:``, ``netdev:``, ``block:``, ``file:``) on this machine."""
    from ..iodevices import DeviceNodes

    return DeviceNodes("/").node_of(spec)


def printable_lines(text: str) -> str:
    """``text`` with each line through :func:`numabind._base.printable` (line ends kept)."""
    from .._base import printable

    return "\n".join(printable(line) for line in text.split("\n"))


#: The CPU or node list forms :func:`list_syntax_problem`'s errors offer.
LIST_FORMS = ("N or N-M separated by commas (e.g. '0-3,8'), 'all', '!LIST' (all but) or '+LIST' (relative to "
              "the cpuset)")


def list_body(value: str) -> "str | None":
    """The list of a numactl CPU or node list ``value`` after its ``!`` and ``+``; None for ``all`` and a device,
    which planning reads."""
    from ..plan import DEVICE_SPECIFIERS   # where used, as this module's other imports (the fast path's start)

    text = value[1:] if value.startswith("!") else value
    text = text[1:] if text.startswith("+") else text
    return None if text == "all" or text.startswith((*DEVICE_SPECIFIERS, "ip:")) else text


def list_syntax_problem(flag: str, value: str) -> "str | None":
    """What is wrong with ``value`` as a numactl CPU or node list whatever the machine (numactl's syntax: no
    strides), or None."""
    from ..cpulist import syntax_problem

    text = list_body(value)
    return None if text is None else syntax_problem(text, what=flag, strides=False, forms=LIST_FORMS)


def gpu_spec(text: str) -> "int | str":
    """``--gpu``'s argparse ``type``: one GPU as ``--gpus`` names them (visible index, UUID or PCI address);
    anything else is an ArgumentTypeError."""
    import argparse

    from .._base import excerpt
    from ..devices import gpu_list_entries
    from ..errors import NumabindError

    shown = excerpt(text, escape=True)
    try:
        entries = gpu_list_entries(text)
    except NumabindError:
        raise argparse.ArgumentTypeError(f"{shown} is not a GPU: give one visible index (0), UUID (GPU-...) or PCI "
                                         f"address (0000:1b:00.0); --gpus LIST takes several") from None
    if len(entries) != 1:
        raise argparse.ArgumentTypeError(f"{shown} names {len(entries)} GPUs and --gpu takes one; "
                                         f"use --gpus {shown} for several")
    return entries[0]


def gpu_index(spec: "int | str", gpus: "Sequence[Gpu]") -> int:
    """The visible index of ``--gpu``'s GPU among ``gpus``: an index as given, a UUID or PCI address looked up
    (a PlanError when no visible GPU has it)."""
    if isinstance(spec, int):
        return spec
    from ..devices import pick_gpus

    chosen, _ = pick_gpus(spec, gpus)
    return chosen[0].index


def command_environ(env: dict[str, str]) -> dict[str, str]:
    """``env`` with :func:`numabind._base.keep_binding_env` applied, its WARNING written to stderr (the fast path
    has no logging)."""
    found = keep_binding_env(env, say=False)
    if found is not None and found[0] >= WARNING:
        sys.stderr.write(f"numabind.bind: WARNING: {found[1]}\n")
    return env


def command_problem(command: list[str]) -> str | None:
    """What makes ``command`` impossible to exec (an empty name, a NUL byte), or None: a usage error."""
    if not command[0]:
        return ("the command name is empty (''): give the program to run, by name or path, after the options "
                "(an unset shell variable gives an empty word)")
    for k, word in enumerate(command):
        if "\0" in word:
            what = "the command name" if k == 0 else f"argument {k} of the command"
            return f"{what} holds a NUL byte, which exec cannot pass: remove it"
    return None


def exec_command(command: list[str], env: dict[str, str]) -> int:
    """exec ``command`` (searched on PATH); on failure print the error and return 127 (not found), 126 (not
    executable) or 2 (:func:`command_problem`)."""
    problem = command_problem(command)
    if problem is not None:
        sys.stderr.write(f"numabind: error: {problem}\n")
        return USAGE
    from ..backends import exec_command   # the kernel door: loaded by numabind run anyway, not by every command

    return exec_command(command, env)


def fast_run(args: list[str]) -> int | None:
    """Bind and exec for plain numactl options; None when the full CLI must handle ``args``."""
    parsed = _parse(args)
    root = os.environ.get("NUMABIND_FSROOT")
    if parsed is None or (root and os.path.realpath(root) != "/"):
        return None
    numactl, own, command = parsed
    from ..backends import BACKEND_NAMES, get_backend
    from ..errors import NumabindError

    backend = own.get("backend")
    if backend is not None and backend not in BACKEND_NAMES:
        return None
    try:
        strict = run_strictness("strict" in own, "lenient" in own)
        from .. import live
        from ..bind import bind_current, bound_environ
        from ..plan import Plan

        machine = live.machine(cpuset_if_narrowed=True)   # the cpuset only when the affinity leaves out a CPU
        plan = Plan.from_numactl_args(numactl, topology=machine, migrate="migrate" in own,
                                      device_node=device_node, reason="numabind run " + " ".join(numactl))
        plan = plan.validate(machine)    # a LiveMachine has what validate reads
        if "set-weights" in own and not plan.weights:
            return None       # the full CLI says what --set-weights needs
        be, _ = get_backend(backend)
    except (NumabindError, ValueError):
        return None   # the full CLI says whether it is a usage error (2) or a binding that does not fit (1)
    try:
        prefix = be.command_prefix(plan)
        if prefix is not None:
            from .._base import environ_copy

            os.execve(prefix[0], prefix + command, command_environ(environ_copy()))
        from .._base import warn_through

        warn_through(configure_logging)   # a degradation is logged as the full CLI shows it, once (not a BindWarning)
        report = bind_current(plan, strict=strict, backend=backend, set_weights="set-weights" in own)
    except NumabindError as e:
        sys.stderr.write(f"numabind: error: {e}\n")
        return NOT_APPLIED
    return exec_command(command, command_environ(bound_environ(report)))   # _NUMABIND_BOUND: for numabind stat


def configure_logging(verbose: int = 0) -> None:
    """Logging as numabind's command line shows it: ``name: LEVEL: message`` on stderr, from WARNING (INFO with
    ``-v``, DEBUG with ``-vv``). The full command line calls it first; a fast path only when a warning comes."""
    import logging

    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(name)s: %(levelname)s: %(message)s", stream=sys.stderr)


#: The exit status of a process ended by SIGPIPE (128 + 13 on Linux), numabind's when its reader goes away.
SIGPIPE_STATUS = 128 + 13


def stdout_gone() -> int:
    """After a ``BrokenPipeError`` on stdout: point stdout at /dev/null (the final flush cannot raise) and return
    :data:`SIGPIPE_STATUS`."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout is not a file (captured in tests)
        pass
    return SIGPIPE_STATUS


def write_out(text: str) -> int:
    """Write ``text`` to stdout and flush it: 0, or :func:`stdout_gone`'s status. Surrogates (command-line words
    outside the locale's encoding) are written as the bytes given, else backslash-escaped."""
    try:
        try:
            sys.stdout.write(text)
        except UnicodeEncodeError:
            encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
            escaped = text.encode(encoding, "backslashreplace")
            if sys.stdout is not sys.__stdout__ or sys.__stdout__ is None:   # a stream put in its place: text
                sys.stdout.write(escaped.decode(encoding))
            else:
                try:
                    data = text.encode(encoding, "surrogateescape")
                except UnicodeEncodeError:
                    data = escaped
                sys.__stdout__.flush()
                sys.__stdout__.buffer.write(data)
        sys.stdout.flush()   # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:
        return stdout_gone()
    return 0


def _without_collector(step: "Callable[[list[str]], _R]", args: list[str]) -> "_R":
    """``step(args)`` with the cyclic garbage collector off (on again after, if it was on): a fast path's objects
    live until exec or exit, and the collector's passes cost ~6 % of ``numabind run``'s start."""
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        return step(args)
    finally:
        if enabled:
            gc.enable()


#: numabind's subcommands: any other first word (or a numactl option) is numactl's command line.
SUBCOMMANDS = ("run", "show", "hardware", "topology", "plan", "stat", "check", "instrument", "move", "irq",
               "gather", "completion")


def completion_main(argv: list[str]) -> int:
    """``numabind completion SHELL``: :mod:`numabind.cli.commands` reaches it here (completion imports commands)."""
    from .completion import main as completion

    return completion(argv)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """``numabind ARGS`` (default ``sys.argv[1:]``). Invoked as ``numactl`` (``prog``, default from
    ``sys.argv[0]``), or with a numactl option or a command first: numactl's command line."""
    args = sys.argv[1:] if argv is None else list(argv)
    if prog is None:
        prog = os.path.basename(sys.argv[0]) if argv is None and sys.argv else "numabind"
    if args and args[0] == "run" and prog != "numactl":
        rc = _without_collector(fast_run, args[1:])   # execs, returns an exit status, or None: "not mine"
        if rc is not None:
            return rc
    elif args and args[0] == "instrument" and prog != "numactl":
        from .instrument import main as instrument_main   # its own small parser: the command is not numabind's

        return instrument_main(args[1:])
    elif args and args[0] in ("hardware", "topology") and prog != "numactl":
        from .look import fast_look

        rc = _without_collector(fast_look, args)   # a plain look, without argparse
        if rc is not None:
            return rc
    elif args and args[0] == "completion" and prog != "numactl":
        return completion_main(args[1:])
    elif args and args[0] == "move" and prog != "numactl":
        from .move import main as move_main   # its own parser: PIDs and numactl options, no command

        return move_main(args[1:])
    else:
        from .numactl import is_numactl_form, numactl_main

        if prog == "numactl" or is_numactl_form(args, SUBCOMMANDS):
            return _without_collector(numactl_main, args)   # binds and execs, or prints and exits
    from .commands import main as full_main

    return full_main(args)
