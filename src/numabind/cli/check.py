"""``numabind check``: preflight and self-test (:func:`numabind.preflight.check`). Which plans: every GPU's (or a
worker per node's) by default, else the one ``numabind run`` would apply for the same options (``--gpu N``,
``--gpu-from-rank``, ``--gpus LIST`` or numactl's options, read by ``run``'s own code). Exit 0 when everything
holds, 1 when something would fail or degrade, 2 for a usage error."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ..errors import NumabindError
from . import NOT_APPLIED, RUN_OPTIONS, printable_lines, run_spellings
from ._parser import CliError, Once, UsageError, global_options, print_json
from .run import _ARGUMENTS, _run_plan, check_run_options, check_run_syntax

if TYPE_CHECKING:  # pragma: no cover
    from ..plan import Plan

__all__ = ["add_parser", "check_plans", "cmd_check"]

#: The kinds of ``numabind run``'s options (:data:`numabind.cli.RUN_OPTIONS`) that choose the plan checked.
_KINDS = ("cpus", "memory", "weights", "all", "numactl", "gpu", "gpus", "shape")
#: run's own options check takes too: what the plan does (--migrate) and how it is bound (--backend).
_OWN = ("migrate", "backend")


def _names() -> list[str]:
    return [name for name, kind in RUN_OPTIONS.items() if kind in _KINDS or name in _OWN]


def add_parser(sub: Any) -> None:
    """Register ``check`` on the CLI's subparsers: run's plan options, and check's own."""
    c = sub.add_parser("check", parents=global_options(),
                       help="check that the plans hold here: kernel calls tried in a child, placement, GPUs, pod",
                       description="Try every kernel call the plans need in a short-lived child, prove placement "
                                   "(bind, touch memory, count where the pages are), cross-check the GPUs and the "
                                   "pod's cpuset. Plans: every GPU's (or a worker per node's), or the one "
                                   "`numabind run` would apply for the options given. Exit 0 when everything "
                                   "holds, 1 when something would fail or degrade, 2 for a usage error.")
    for name in _names():
        flags, takes = run_spellings(name)
        c.add_argument(*flags, action=Once if takes else "store_true", **_ARGUMENTS[name])
    c.add_argument("--mib", type=_mib, default=64, help="MiB each plan's placement touches (default 64)")
    c.add_argument("--no-placement", action="store_true",
                   help="only try the kernel calls (fast: for a readiness probe)")
    c.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="seconds the child may take before it is killed and reported (default 60)")
    c.add_argument("--measure", action="store_true",
                   help="also measure the node-to-node latency and bandwidth matrices (and host to GPU copies), "
                        "beside the firmware's distances")
    c.add_argument("--seconds", type=_seconds, default=None, metavar="N",
                   help="about how long --measure takes, split across the cells (default 10)")
    # what run's plan code reads of a namespace, for options check does not take: plans on the discovery root
    # (run's dry run plans there too), nothing strict, no launcher extras
    c.set_defaults(dry_run=True, strict=None, lenient=False, nic=False, bind_replayed_root=False, set_weights=False,
                   command=[])


def _mib(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of MiB (1 or more)")
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (above 0, at most 3600)")
    return value


def _given(args: argparse.Namespace) -> bool:
    """Whether an option that chooses the plan was given (else every GPU's plan is checked)."""
    return any(getattr(args, name.replace("-", "_"), None) not in (None, False)
               for name, kind in RUN_OPTIONS.items() if kind in ("cpus", "memory", "weights", "gpu", "gpus"))


def check_plans(args: argparse.Namespace) -> list[Plan] | None:
    """The plan ``numabind run`` would apply for ``args``' options (None: none given, check the default plans).
    A usage error is :class:`UsageError`; a plan the machine cannot take is a :class:`CliError` (exit 1)."""
    check_run_options(args)
    if not _given(args):
        for name, kind in RUN_OPTIONS.items():
            if kind in ("all", "numactl", "shape") and getattr(args, name.replace("-", "_"), None) not in (None, False):
                raise UsageError(f"numabind check: --{name} shapes a plan: give the binding (--gpu N, --membind, "
                                 f"...) it goes with, or drop it to check every GPU's plan")
        return None
    check_run_syntax(args)
    try:
        if getattr(args, "gpus", None) is not None:
            from ..topology import discover
            from .launch import gpu_launch

            return [gpu_launch(args, discover(args.root)).plan]
        return [_run_plan(args)]
    except UsageError:
        raise
    except NumabindError as e:
        raise CliError(f"numabind check: {e}", NOT_APPLIED) from None


def cmd_check(args: argparse.Namespace) -> int:
    from ..preflight import DEFAULT_TIMEOUT, check

    if args.seconds is not None and not args.measure:
        raise UsageError("numabind check: --seconds is the time --measure takes; give --measure with it")
    plans = check_plans(args)
    report = check(args.root, plans=plans, placement=not args.no_placement, mib=args.mib,
                   timeout=args.timeout or DEFAULT_TIMEOUT, backend=args.backend, measure=args.measure,
                   seconds=args.seconds)
    if args.json:
        print_json(report.to_dict())
    else:
        print(printable_lines(report.describe()))
    return report.exit_status
