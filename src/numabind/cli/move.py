"""``numabind move``: move processes that are already running (``taskset -a -p`` + ``migratepages``).

    numabind move PID... [-C CPUS | -N NODES] [-m NODES | -p NODE | -P NODES | -i NODES | -w NODES | -l] [-a]
    numabind move PID... --gpu GPU [--mode M] [--policy P]
    numabind move PID... --node N
    numabind move PID... --plan 'v1;cpus=2-3;mem=bind:1;migrate=0'
    numabind move --restore PID...
    [--all-children] [--strict | --lenient] [--backend B] [--dry-run] [--json] [-v]

Every thread of each process gets the binding's CPUs (threads born meanwhile too), then its pages are migrated
onto the binding's memory nodes, and both are read back (:func:`numabind.move`). numactl's options are read by
:meth:`Plan.from_numactl_args` against the whole machine, as numactl's ``-a`` reads them: the process moved has
its own cpuset, which the kernel applies (what it narrows is reported). ``--node N`` is ``-N N -m N``; ``--plan``
takes a plan's text form (:meth:`Plan.to_text`). ``--restore`` puts back what numabind recorded when it bound the
process at birth (``numabind run``'s exec marker, or a runtime record); without a record it says so and exits 1.

The kernel has no call that sets another process's memory policy: what the process allocates after the move
follows its own policy (the report says so).

Every error says ``numabind: error: ...``, as the rest of the command line does.

Exit status: 0 when every process was moved as asked (``--lenient``: moved, with the warnings printed); 1 when a
process could not be moved (it does not exist or exited, the kernel refused, under ``--strict`` the default: any
degradation, or no record for ``--restore``); 2 for a usage error.

``--dry-run`` moves nothing: it prints each process's plan and the commands that would do the same
(``taskset -a -p -c CPUS PID``, ``migratepages PID FROM TO``; :func:`numabind.cli.launch.move_lines`), and exits 0.

What the moved process (or its owner) controls, its name, its threads' names, the fields of its record that
``--restore`` shows, and the kernel's text about it, is printed through :func:`numabind._base.printable` (the
text output, the warnings line, ``--dry-run`` and every error); ``--json`` prints it as JSON escapes it. A
``/proc`` of another PID namespace is refused before anything is read or moved
(:func:`numabind._proc.check_procfs`).
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import _proc, live
from .._base import EXIT_NOT_APPLIED, EXIT_USAGE, Strictness, printable
from ..errors import NumabindError, PlanError
from ..plan import Plan
from . import device_node, gpu_index, gpu_spec, list_syntax_problem, printable_lines, run_strictness
from ._parser import ArgumentParser

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off numabind move's start)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

__all__ = ["add_parser", "build_parser", "cmd_move", "main", "move_plan"]

#: numactl's options ``numabind move`` takes: dest -> numactl's long option.
NUMACTL_OPTIONS = (("physcpubind", "--physcpubind"), ("cpunodebind", "--cpunodebind"), ("membind", "--membind"),
                   ("preferred", "--preferred"), ("preferred_many", "--preferred-many"),
                   ("interleave", "--interleave"), ("weighted_interleave", "--weighted-interleave"))


class _Usage(NumabindError):
    """A command line ``numabind move`` cannot take (exit 2)."""


def _pid(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id (a positive number)")
    return int(text)


class _Once(argparse.Action):
    """Store an option's value, refusing a second one (argparse would silently keep the last)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} given twice: give it once")
        setattr(namespace, self.dest, values)


def _arguments(m: argparse.ArgumentParser) -> None:
    m.add_argument("pids", nargs="*", type=_pid, metavar="PID", help="the processes to move")
    m.add_argument("-C", "--physcpubind", "--cpus", dest="physcpubind", metavar="CPUS", action=_Once,
                   help="every thread on these CPUs")
    m.add_argument("-N", "--cpunodebind", "--cpubind", dest="cpunodebind", metavar="NODES", action=_Once,
                   help="every thread on the CPUs of these nodes")
    m.add_argument("-m", "--membind", metavar="NODES", action=_Once, help="migrate the pages onto these nodes")
    m.add_argument("-p", "--preferred", metavar="NODE", action=_Once, help="migrate the pages onto this node")
    m.add_argument("-P", "--preferred-many", dest="preferred_many", metavar="NODES", action=_Once,
                   help="migrate the pages onto these nodes")
    m.add_argument("-i", "--interleave", metavar="NODES", action=_Once, help="migrate the pages onto these nodes")
    m.add_argument("-w", "--weighted-interleave", dest="weighted_interleave", metavar="NODES", action=_Once,
                   help="migrate the pages onto these nodes")
    m.add_argument("-l", "--localalloc", action="store_true", help="no page is moved (a policy without nodes)")
    m.add_argument("-a", "--all", action="store_true",
                   help="accepted for numactl's sake: lists are always read against the whole machine here")
    m.add_argument("--gpu", type=gpu_spec, metavar="GPU", action=_Once,
                   help="the plan of this GPU: its visible index, UUID or PCI address (see numabind plan)")
    m.add_argument("--mode", default=None, action=_Once, help="placement mode of --gpu (default node)")
    m.add_argument("--policy", default=None, action=_Once, help="memory policy of --gpu (default bind)")
    m.add_argument("--node", type=int, action=_Once, help="the CPUs and memory of this node (-N N -m N)")
    m.add_argument("--plan", metavar="TEXT", action=_Once,
                   help="a plan's text form, e.g. 'v1;cpus=2-3;mem=bind:1;migrate=0' (Plan.to_text)")
    m.add_argument("--restore", action="store_true",
                   help="put back the binding numabind recorded when it bound the process at birth")
    m.add_argument("--all-children", action="store_true", help="each process and all its descendants")
    m.add_argument("--strict", action="store_true", help="exit 1 on any degradation, the CPUs put back (default)")
    m.add_argument("--lenient", action="store_true", help="move what can be moved; print the warnings, exit 0")
    m.add_argument("--backend", default=None, action=_Once,
                   help="force a backend (default: $NUMABIND_BACKEND, else the first usable)")
    m.add_argument("--dry-run", action="store_true",
                   help="print the plan and the equivalent taskset and migratepages commands; move nothing")
    m.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                   help="one JSON list: each process's MoveReport.to_dict(), or its error")
    m.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help="log INFO (-v) or DEBUG (-vv)")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``move`` on the CLI's subparsers (for ``numabind --help``); :func:`main` runs it."""
    m = sub.add_parser("move", help="move running processes: every thread's CPUs and their pages "
                                    "(taskset -a -p + migratepages)",
                       prog=PROG, usage=USAGE, description=DESCRIPTION, allow_abbrev=False)
    _arguments(m)
    return m  # type: ignore[no-any-return]


DESCRIPTION = ("Move running processes: every thread gets the binding's CPUs (threads born meanwhile too), then "
               "the pages are migrated onto its memory nodes (migrate_pages), and both are read back. numactl's "
               "options are read against the whole machine (as with -a); the kernel applies the process's own "
               "cpuset. The process keeps its own memory policy (no kernel call sets another process's): what it "
               "allocates later follows that policy. Exit: 0 moved; 1 not moved (no such process, refused, "
               "--strict degradations, no record for --restore); 2 usage.")
#: The name argparse puts before its errors (``numabind: error: ...``, as every other error of the command line says);
#: the usage line names the subcommand itself.
PROG = "numabind"
USAGE = ("numabind move PID... [numactl options | --gpu GPU | --node N | --plan TEXT | --restore] [--all-children] "
         "[--strict | --lenient] [--dry-run] [--json]")


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog=PROG, usage=USAGE, allow_abbrev=False, description=DESCRIPTION)
    _arguments(p)
    return p


def _strictness(args: argparse.Namespace) -> Strictness:
    try:
        return run_strictness(args.strict, args.lenient)
    except ValueError as e:
        raise _Usage(str(e)) from None


def move_plan(args: argparse.Namespace) -> Plan | None:
    """The plan the options ask for (None for ``--restore``: each process's own); usage errors as _Usage, the rest
    as PlanError."""
    given = [f"--{d.replace('_', '-')}" for d, _ in NUMACTL_OPTIONS if getattr(args, d) is not None]
    if args.localalloc:
        given.append("--localalloc")
    sources = [flag for flag, on in (("numactl options", bool(given)), ("--gpu", args.gpu is not None),
                                     ("--node", args.node is not None), ("--plan", args.plan is not None),
                                     ("--restore", args.restore)) if on]
    if len(sources) > 1:
        raise _Usage(f"{' and '.join(sources)} each give the binding: give one of them")
    if not sources:
        raise _Usage("give the binding to move to: numactl options (-N 1 -m 1, -C 2-3, ...), --gpu N, --node N, "
                     "--plan TEXT, or --restore")
    if (args.mode is not None or args.policy is not None) and args.gpu is None:
        raise _Usage("--mode and --policy shape the plan of --gpu N; give --gpu")
    if args.restore:
        return None
    if args.plan is not None:
        return Plan.from_text(args.plan)
    if args.gpu is not None:
        from ..strategies import plan_for_gpu   # a whole discovery: only --gpu needs it
        from ..topology import discover

        topo = discover("/")
        return plan_for_gpu(gpu_index(args.gpu, topo.gpus), mode=args.mode or "node", topology=topo,
                            policy=args.policy or "bind")
    argv = []
    for d, flag in NUMACTL_OPTIONS:
        value = getattr(args, d)
        if value is not None:
            problem = list_syntax_problem(flag, value)    # numactl's forms only, as numabind run says
            if problem is not None:
                raise _Usage(problem)
            argv.append(f"{flag}={value}")
    if args.localalloc:
        argv.append("--localalloc")
    if args.node is not None:
        if args.node < 0:
            raise _Usage(f"--node {args.node} is not a node id")
        argv = [f"--cpunodebind={args.node}", f"--membind={args.node}"]
    # the whole machine, as numactl's -a: the process moved has its own cpuset, which the kernel applies
    return Plan.from_numactl_args([*argv, "--all"], topology=live.machine(), device_node=device_node,
                                  reason="numabind move " + " ".join(argv))


def _live_root() -> None:
    root = os.environ.get("NUMABIND_FSROOT")
    if root and os.path.realpath(root) != "/":
        raise _Usage(f"numabind move moves processes of this machine, but NUMABIND_FSROOT={root!r} is another "
                     f"discovery root (a replayed machine): unset NUMABIND_FSROOT")


def _message(e: BaseException) -> str:
    """An error's text without numabind move's own prefix, printable (it may quote the process's name)."""
    text = str(e)
    for prefix in ("numabind move --restore: ", "numabind move: "):
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    return printable(text)


def _pids(args: argparse.Namespace) -> list[int]:
    out: list[int] = []
    for pid in args.pids:
        if pid not in out:
            out.append(pid)
    return out


def main(argv: list[str] | None = None) -> int:
    """``numabind move ARGS`` (``argv`` default ``sys.argv[1:]``, as ``python -m numabind.cli.move ARGS``): the exit
    status."""
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    verbose = getattr(args, "verbose", 0)
    if verbose:   # else logging stays unimported (it costs the start of every numabind move): warnings are printed
        import logging

        level = logging.INFO if verbose == 1 else logging.DEBUG
        logging.basicConfig(level=level, format="%(name)s: %(levelname)s: %(message)s", stream=sys.stderr)
    return cmd_move(args, parser)


def cmd_move(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> int:
    """Run ``numabind move`` from parsed options (:func:`add_parser`'s or :func:`build_parser`'s): the exit status."""
    from ..relocate import move, recorded_plan   # not for add_parser: the full CLI builds its parser from it

    as_json = getattr(args, "json", False)
    if "logging" not in sys.modules:   # a library WARNING (a bad runtime record) is printed, never lost
        from . import configure_logging
        from .._base import warn_through

        warn_through(configure_logging)
    try:
        _live_root()
        if not args.pids:
            raise _Usage("give at least one PID")
        strict = _strictness(args)
        plan = move_plan(args)
    except _Usage as e:
        (parser or build_parser()).print_usage(sys.stderr)
        print(f"numabind: error: {_message(e)}", file=sys.stderr)
        return EXIT_USAGE
    except NumabindError as e:   # a plan the machine cannot hold
        print(f"numabind: error: {_message(e)}", file=sys.stderr)
        return EXIT_NOT_APPLIED
    if getattr(args, "dry_run", False):
        return _dry_run(args, plan, as_json)
    rc = 0
    out: list[dict[str, Any]] = []
    for pid in _pids(args):
        try:
            target = recorded_plan(pid) if plan is None else plan
            report = move(pid, target, strict=strict, all_children=args.all_children, backend=args.backend)
        except (NumabindError, PlanError) as e:
            rc = EXIT_NOT_APPLIED
            print(f"numabind: error: {_message(e)}", file=sys.stderr)
            out.append({"pid": pid, "error": str(e)})
            continue
        if report.warnings and "logging" not in sys.modules:   # what the WARNING the library logs says
            sys.stderr.write(printable(f"numabind.move: WARNING: pid {pid}: " + "; ".join(report.warnings)) + "\n")
        if as_json:
            out.append(dict(report.to_dict(), pid=pid))
        else:
            print(printable_lines(report.describe()))
    if as_json:
        import json   # only --json prints JSON: off numabind move's start

        print(json.dumps(out, indent=2, sort_keys=True))
    sys.stdout.flush()
    return rc


def _dry_run(args: argparse.Namespace, plan: Plan | None, as_json: bool) -> int:
    """``--dry-run``: each process's plan (``--restore``: its record) and the commands that would move it."""
    from ..relocate import recorded_plan   # as in cmd_move
    from .launch import move_lines, render

    try:   # the pids given are this namespace's only when /proc is (as move itself checks)
        _proc.check_procfs("numabind move", acting=True)
    except NumabindError as e:
        print(f"numabind: error: {_message(e)}", file=sys.stderr)
        return EXIT_NOT_APPLIED
    memory = frozenset(n for n, node in live.machine().nodes.items() if node.has_memory)
    rc = 0
    out: list[str] = []
    for pid in _pids(args):
        try:
            target = recorded_plan(pid) if plan is None else plan
        except (NumabindError, PlanError) as e:
            rc = EXIT_NOT_APPLIED
            print(f"numabind: error: {_message(e)}", file=sys.stderr)
            continue
        notes = ["and each descendant of the process (--all-children)"] if args.all_children else []
        out.append(render(target, move_lines(target, pid, memory), as_json=as_json, extra={"pid": pid}, notes=notes))
    if as_json:
        import json   # as in cmd_move

        print(json.dumps({"dry_run": True, "processes": [json.loads(o) for o in out]}, indent=2, sort_keys=True))
    elif out:
        print(printable_lines("\n".join(out)))
    sys.stdout.flush()
    return rc


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
