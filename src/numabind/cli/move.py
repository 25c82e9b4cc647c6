"""``numabind move``: move processes that are already running (``taskset -a -p`` + ``migratepages``).

    numabind move PID... [numactl options | --gpu GPU [--mode M] [--policy P] | --node N | --plan TEXT | --restore]
                  [--all-children] [--strict | --lenient] [--backend B] [--dry-run] [--json] [-v]
                  [--thread PATTERN=SPEC ... [--watch SECONDS]]

The move itself is :func:`numabind.move`; what each option does, the exit statuses and what is printed as the
process wrote it: docs/move.rst.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .. import _proc, live
from .._base import EXIT_NOT_APPLIED, EXIT_USAGE, Strictness, printable
from .._numactl import BINDING, OPTIONS, spellings
from ..cpulist import format_cpulist
from ..errors import NumabindError, PlanError
from ..plan import Plan
from . import configure_logging, device_node, gpu_index, gpu_spec, list_syntax_problem, printable_lines, run_strictness
from ._parser import VERBOSE_HELP, ArgumentParser, UsageError, pid_arg, print_json

__all__ = ["add_parser", "build_parser", "cmd_move", "main", "move_plan"]

#: What each of numactl's binding options (:data:`numabind._numactl.BINDING`) does to a running process.
_NUMACTL_HELP = {
    "physcpubind": ("CPUS", "every thread on these CPUs"),
    "cpunodebind": ("NODES", "every thread on the CPUs of these nodes"),
    "membind": ("NODES", "migrate the pages onto these nodes"),
    "preferred": ("NODE", "migrate the pages onto this node"),
    "preferred-many": ("NODES", "migrate the pages onto these nodes"),
    "interleave": ("NODES", "migrate the pages onto these nodes"),
    "weighted-interleave": ("NODES", "migrate the pages onto these nodes"),
    "localalloc": (None, "no page is moved (a policy without nodes)"),
}


class _Once(argparse.Action):
    """Store an option's value, refusing a second one (argparse would silently keep the last)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} given twice: give it once")
        setattr(namespace, self.dest, values)


DESCRIPTION = ("Move running processes: every thread gets the binding's CPUs (threads born meanwhile too), then "
               "the pages are migrated onto its memory nodes (migrate_pages), and both are read back. numactl's "
               "options are read against the whole machine (as with -a); the kernel applies the process's own "
               "cpuset. The process keeps its own memory policy (no kernel call sets another process's): what it "
               "allocates later follows that policy. Exit: 0 moved; 1 not moved (no such process, refused, "
               "--strict degradations, no record for --restore); 2 usage.")
#: The name argparse puts before its errors (``numabind: error: ...``).
PROG = "numabind"
USAGE = ("numabind move PID... [numactl options | --gpu GPU | --node N | --plan TEXT | --restore] [--all-children] "
         "[--strict | --lenient] [--dry-run] [--json] [--thread PATTERN=SPEC ... [--watch SECONDS]]")


def build_parser(sub: Any = None) -> argparse.ArgumentParser:
    """``numabind move``'s own parser (:func:`main`), or, given the CLI's subparsers ``sub``, registered there."""
    shape: dict[str, Any] = {"prog": PROG, "usage": USAGE, "description": DESCRIPTION, "allow_abbrev": False}
    m = ArgumentParser(**shape) if sub is None else sub.add_parser(
        "move", help="move running processes: every thread's CPUs and their pages (taskset -a -p + migratepages)",
        **shape)
    m.add_argument("pids", nargs="*", type=pid_arg, metavar="PID", help="the processes to move")
    for name in BINDING:
        metavar, text = _NUMACTL_HELP[name]
        if OPTIONS[name][1]:
            m.add_argument(*spellings(name), dest=name.replace("-", "_"), metavar=metavar, action=_Once, help=text)
        else:
            m.add_argument(*spellings(name), action="store_true", help=text)
    m.add_argument(*spellings("all"), action="store_true",
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
    m.add_argument("--thread", action="append", metavar="PATTERN=SPEC", default=None,
                   help="after the move, give the threads whose name (comm) matches the glob PATTERN a share of the "
                        "binding's CPUs: SPEC is N (whole cores, in order), cpus:LIST (inside the binding) or rest "
                        "(what no other share took); repeat it; the first pattern a name matches wins "
                        "(docs/named-threads.rst)")
    m.add_argument("--watch", type=_seconds, metavar="SECONDS", default=None, action=_Once,
                   help="with --thread: keep placing the threads that appear or rename themselves for SECONDS "
                        "(stops early when the process ends)")
    m.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                   help="one JSON list: each process's MoveReport.to_dict(), or its error")
    m.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=VERBOSE_HELP)
    return m


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (0 or more), e.g. --watch 30")
    return value


#: The CLI's name for registering ``move`` on its subparsers (``add_parser(sub)``): the same one parser.
add_parser = build_parser


def _strictness(args: argparse.Namespace) -> Strictness:
    try:
        return run_strictness(args.strict, args.lenient)
    except ValueError as e:
        raise UsageError(str(e)) from None


def move_plan(args: argparse.Namespace) -> Plan | None:
    """The plan the options ask for (None for ``--restore``: each process's own); usage errors as UsageError, the rest
    as PlanError."""
    given = {name: getattr(args, name.replace("-", "_")) for name in BINDING}
    given = {name: value for name, value in given.items() if value is not None and value is not False}
    sources = [flag for flag, on in (("numactl options", bool(given)), ("--gpu", args.gpu is not None),
                                     ("--node", args.node is not None), ("--plan", args.plan is not None),
                                     ("--restore", args.restore)) if on]
    if len(sources) > 1:
        raise UsageError(f"{' and '.join(sources)} each give the binding: give one of them")
    if not sources:
        raise UsageError("give the binding to move to: numactl options (-N 1 -m 1, -C 2-3, ...), --gpu N, --node N, "
                     "--plan TEXT, or --restore")
    if (args.mode is not None or args.policy is not None) and args.gpu is None:
        raise UsageError("--mode and --policy shape the plan of --gpu N; give --gpu")
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
    for name, value in given.items():
        problem = None if value is True else list_syntax_problem(f"--{name}", value)   # numactl's forms only
        if problem is not None:
            raise UsageError(problem)
        argv.append(f"--{name}" if value is True else f"--{name}={value}")
    if args.node is not None:
        if args.node < 0:
            raise UsageError(f"--node {args.node} is not a node id")
        argv = [f"--cpunodebind={args.node}", f"--membind={args.node}"]
    # the whole machine, as numactl's -a: the process moved has its own cpuset, which the kernel applies
    return Plan.from_numactl_args([*argv, "--all"], topology=live.machine(), device_node=device_node,
                                  reason="numabind move " + " ".join(argv))


def _live_root() -> None:
    root = os.environ.get("NUMABIND_FSROOT")
    if root and os.path.realpath(root) != "/":
        raise UsageError(f"numabind move moves processes of this machine, but NUMABIND_FSROOT={root!r} is another "
                     f"discovery root (a replayed machine): unset NUMABIND_FSROOT")


def _message(e: BaseException) -> str:
    """An error's text without numabind move's own prefix, printable (it may quote the process's name)."""
    return printable(str(e).removeprefix("numabind move --restore: ").removeprefix("numabind move: "))


def main(argv: list[str] | None = None) -> int:
    """``numabind move ARGS`` (``argv`` default ``sys.argv[1:]``, as ``python -m numabind.cli.move ARGS``): the exit
    status."""
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if getattr(args, "verbose", 0):   # else logging stays unimported (off numabind move's start)
        configure_logging(args.verbose)
    return cmd_move(args, parser)


def cmd_move(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> int:
    """Run ``numabind move`` from parsed options (:func:`add_parser`'s or :func:`build_parser`'s): the exit status."""
    from ..relocate import move, recorded_plan   # not for add_parser: the full CLI builds its parser from it

    as_json = getattr(args, "json", False)
    if "logging" not in sys.modules:   # a library WARNING (a bad runtime record) is printed, never lost
        from .._base import warn_through

        warn_through(configure_logging)
    try:
        _live_root()
        if not args.pids:
            raise UsageError("give at least one PID")
        strict = _strictness(args)
        plan = move_plan(args)
        layout = _layout(args, plan)
    except UsageError as e:
        (parser or build_parser()).print_usage(sys.stderr)
        print(f"numabind: error: {_message(e)}", file=sys.stderr)
        return EXIT_USAGE
    except NumabindError as e:   # a plan the machine cannot hold
        print(f"numabind: error: {_message(e)}", file=sys.stderr)
        return EXIT_NOT_APPLIED
    if getattr(args, "dry_run", False):
        return _dry_run(args, plan, as_json, layout)
    rc = 0
    out: list[dict[str, Any]] = []
    for pid in dict.fromkeys(args.pids):
        try:
            target = recorded_plan(pid) if plan is None else plan
            report = move(pid, target, strict=strict, all_children=args.all_children, backend=args.backend)
            named = None if layout is None else _place_threads(args, layout, target, pid)
        except (NumabindError, PlanError) as e:
            rc = EXIT_NOT_APPLIED
            print(f"numabind: error: {_message(e)}", file=sys.stderr)
            out.append({"pid": pid, "error": str(e)})
            continue
        if report.warnings and "logging" not in sys.modules:   # what the WARNING the library logs says
            sys.stderr.write(printable(f"numabind.move: WARNING: pid {pid}: " + "; ".join(report.warnings)) + "\n")
        if named is not None and not named.ok:
            rc = rc if strict is False else EXIT_NOT_APPLIED    # --lenient: said, exit 0
            if "logging" not in sys.modules:
                sys.stderr.write(printable(f"numabind.move: WARNING: pid {pid}: " + "; ".join(named.warnings)) + "\n")
        if as_json:
            out.append(dict(report.to_dict(), pid=pid, **({} if named is None else {"threads": named.to_dict()})))
        else:
            print(printable_lines(report.describe() + ("" if named is None else "\n" + named.describe())))
    if as_json:
        print_json(out)
    sys.stdout.flush()
    return rc


def _layout(args: argparse.Namespace, plan: Plan | None) -> list[tuple[str, str]] | None:
    """``--thread``'s layout (None without it), checked against ``plan`` before anything moves: a UsageError for
    what the options forbid, a PlanError for a share that does not fit."""
    if args.thread is None:
        if args.watch is not None:
            raise UsageError("--watch places named threads as they appear: give --thread PATTERN=SPEC with it")
        return None
    if plan is None:
        raise UsageError("--thread shares the CPUs of the binding given; --restore puts back a recorded one: "
                         "give a binding (-C, -N, --gpu, --node, --plan) with --thread")
    if args.all_children:
        raise UsageError("--thread places the named threads of the PIDs given, not of their descendants: drop "
                         "--all-children, or give each PID")
    from ..named import layout_shares, parse_layout_item
    from ..strategies import topology_or_discover

    layout = [parse_layout_item(text) for text in args.thread]
    layout_shares(layout, plan, topology_or_discover(None))
    return layout


def _place_threads(args: argparse.Namespace, layout: list[tuple[str, str]], plan: Plan, pid: int) -> Any:
    """The named threads of ``pid`` placed by ``layout``, and watched for ``--watch`` seconds."""
    from ..named import pin_named_threads, watch_named_threads

    report = pin_named_threads(layout, plan, pid=pid, backend=args.backend)
    if not args.watch:
        return report
    later = watch_named_threads(layout, plan, pid=pid, seconds=args.watch, backend=args.backend,
                                known=[t.tid for t in report.threads])
    return report.then(later)


def _dry_run(args: argparse.Namespace, plan: Plan | None, as_json: bool,
             layout: list[tuple[str, str]] | None = None) -> int:
    """``--dry-run``: each process's plan (``--restore``: its record) and the commands that would move it."""
    from ..relocate import memory_nodes, recorded_plan   # as in cmd_move
    from .launch import move_lines, render

    try:   # the pids given are this namespace's only when /proc is (as move itself checks)
        _proc.check_procfs("numabind move", acting=True)
    except NumabindError as e:
        print(f"numabind: error: {_message(e)}", file=sys.stderr)
        return EXIT_NOT_APPLIED
    memory = memory_nodes()
    shares = None
    if layout is not None and plan is not None:
        from ..named import layout_shares
        from ..strategies import topology_or_discover

        shares = layout_shares(layout, plan, topology_or_discover(None))
    rc = 0
    out: list[str] = []
    for pid in dict.fromkeys(args.pids):
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

        extra = {} if shares is None else {"threads": [s.to_dict() for s in shares]}
        print_json({"dry_run": True, "processes": [json.loads(o) for o in out], **extra})
    elif out:
        lines = [] if shares is None else [f"thread share {s.pattern}={s.spec}: CPUs {format_cpulist(s.cpus)}"
                                           for s in shares]
        print(printable_lines("\n".join([*out, *lines])))
    sys.stdout.flush()
    return rc


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
