"""The full command line (argparse): :func:`build_parser` registers each subcommand's parser (:data:`COMMANDS`),
:func:`main` runs its handler. Global options go before or after the subcommand; an error exits 2 unless it
carries its own status.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from ..errors import NumabindError
from . import (USAGE, check, completion_main, configure_logging, gather, irq, look, move, overview, plan,
               printable_lines, run, show, stat, stdout_gone)
from ._parser import ROOT_HELP, VERBOSE_HELP, ArgumentParser, CliError, UsageError, keep_global_options
from .show import cmd_show   # numactl's -s (numabind.cli.numactl) shows through it

__all__ = ["COMMANDS", "COMPLETION_SHELLS", "ArgumentParser", "CliError", "UsageError", "build_parser", "cmd_show",
           "main", "subcommand"]

#: What ``numabind --help`` says below the options: numactl's form and what ``--root`` reads.
_EPILOG = """numactl's own form works too: numabind -N 0 -m 0 CMD, numabind -C 0-3 -m 0 -- CMD, numabind -H,
numabind -s (a link named numactl runs existing scripts unchanged).

--root R (or $NUMABIND_FSROOT) reads another machine instead of this one:
  a directory holding sys/ and proc/      numabind --root /tmp/dump plan --all
  an hwloc-gather-topology tarball        numabind --root host.tar.bz2 hardware
  an hwloc XML file (lstopo --of xml)     numabind --root nvidiaDGX2.xml plan --all

Shell completion: numabind completion bash|zsh."""

#: The shells ``numabind completion`` prints a script for.
COMPLETION_SHELLS = ("bash", "zsh")


def _add_instrument(sub: Any) -> None:
    """``instrument`` in ``numabind --help`` (:mod:`numabind.cli.instrument` reads its own command line)."""
    ins = sub.add_parser("instrument", help="run a Python program with numabind in place of vLLM's and SGLang's "
                                            "numa_utils, in every process (no source edit)")
    ins.add_argument("command", nargs=argparse.REMAINDER, help="the command and its arguments, after --")


def _cmd_instrument(args: argparse.Namespace) -> int:
    from .instrument import main as instrument_main

    return instrument_main(list(args.command))


def _add_completion(sub: Any) -> None:
    """``completion``'s one parser: :mod:`numabind.cli.completion` parses ``numabind completion ...`` with it."""
    cmp = sub.add_parser("completion", help="print the bash or zsh completion script (needs shtab)",
                         description="Print the shell completion script for numabind, generated from its command "
                                     "line parser (needs shtab: pip install shtab).")
    cmp.add_argument("shell", choices=COMPLETION_SHELLS, help="the shell to print the completion script for")


def _cmd_completion(args: argparse.Namespace) -> int:
    return completion_main([args.shell])    # through the package: numabind.cli.completion imports this module


#: numabind's subcommands in ``numabind --help``'s order: name -> (registers its parser, runs it).
COMMANDS: dict[str, tuple[Callable[[Any], object], Callable[[argparse.Namespace], int]]] = {
    "hardware": (look.add_hardware, look.cmd_hardware),
    "show": (show.add_parser, show.cmd_show),
    "topology": (look.add_topology, look.cmd_topology),
    "plan": (plan.add_parser, plan.cmd_plan),
    "run": (run.add_parser, run.cmd_run),
    "stat": (stat.add_parser, stat.cmd_stat),
    "check": (check.add_parser, check.cmd_check),
    "move": (move.add_parser, move.cmd_move),
    "irq": (irq.add_parser, irq.cmd_irq),
    "gather": (gather.add_parser, gather.cmd_gather),
    "instrument": (_add_instrument, _cmd_instrument),
    "completion": (_add_completion, _cmd_completion),
}


def build_parser() -> argparse.ArgumentParser:
    from .._version import __version__

    p = ArgumentParser(
        prog="numabind", raw_epilog=_EPILOG,
        description="Bind CPU affinity and NUMA memory policy without numactl. "
                    "Without a command: show the topology, GPUs, plans and the current binding.")
    p.add_argument("--version", action="version", version=f"numabind {__version__}")
    p.add_argument("--root", help=ROOT_HELP)
    p.add_argument("-v", "--verbose", action="count", default=0, help=VERBOSE_HELP)
    p.add_argument("--json", action="store_true", help="print JSON instead of text (every subcommand)")
    sub = p.add_subparsers(dest="cmd")
    for add, _ in COMMANDS.values():
        add(sub)
    keep_global_options(sub)
    return p


def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser :func:`build_parser`'s ``parser`` registered for subcommand ``name``."""
    found = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub: argparse.ArgumentParser = found.choices[name]
    return sub


def _message(e: BaseException) -> str:
    """The error's text without a leading ``numabind ...:``, each line printable."""
    text = str(e)
    for prefix in ("numabind run: ", "numabind show: ", "numabind plan: ", "numabind: "):
        if text.startswith(prefix):
            return printable_lines(text[len(prefix):])
    return printable_lines(text)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    try:
        rc = (overview.cmd_main if args.cmd is None else COMMANDS[args.cmd][1])(args) or 0
        sys.stdout.flush()   # a closed pipe shows here, not at interpreter exit
        return rc
    except BrokenPipeError:
        return stdout_gone()   # the reader went away (`numabind ... --json | head`)
    except NumabindError as e:
        print(f"numabind: error: {_message(e)}", file=sys.stderr)
        return getattr(e, "exit_status", USAGE)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
