"""What every subcommand's argparse parser shares (``numabind`` and ``numabind move``'s own parser): the parser
class, :class:`Once`, the global options, the CLI's errors and ``--json``'s printer."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import NumabindError
from . import USAGE

__all__ = ["ArgumentParser", "CliError", "GLOBAL_DESTS", "Once", "ROOT_HELP", "UsageError", "VERBOSE_HELP",
           "global_options", "keep_global_options", "pid_arg", "print_json"]


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, but an option's value ``--`` (``--physcpubind=--``) is that value, checked like any other
    (argparse up to 3.11 stores ``[]`` for it unchecked). ``raw_epilog``: text printed unwrapped below the help."""

    def __init__(self, *args: Any, raw_epilog: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.raw_epilog = raw_epilog

    def format_help(self) -> str:
        text = super().format_help()
        return text if self.raw_epilog is None else f"{text}\n{self.raw_epilog}\n"

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        if action.option_strings and action.nargs is None and arg_strings == ["--"]:
            value = self._get_value(action, "--")
            self._check_value(action, value)
            return value
        return super()._get_values(action, arg_strings)


class Once(argparse.Action):
    """Store an option's value, refusing a second one (argparse would silently keep the last)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        old = getattr(namespace, self.dest, None)
        if old is not None:
            parser.error(f"{option_string} given twice (first {old!r}, then {values!r}; "
                         f"{'/'.join(self.option_strings)} is one option): give it once")
        setattr(namespace, self.dest, values)


class CliError(NumabindError):
    """An error the CLI reports with a given exit status (``exit_status``)."""

    def __init__(self, message: str, exit_status: int) -> None:
        super().__init__(message)
        self.exit_status = exit_status


class UsageError(CliError):
    """A command line numabind cannot take (exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, USAGE)


#: What ``--root`` and ``-v`` say in every parser that takes them.
ROOT_HELP = "discovery root (default $NUMABIND_FSROOT or /)"
VERBOSE_HELP = "log INFO (-v) or DEBUG (-vv)"


def global_options() -> list[ArgumentParser]:
    """The global options as a subcommand's ``parents`` (defaults suppressed: those given before stay)."""
    c = ArgumentParser(add_help=False)
    c.add_argument("--root", default=argparse.SUPPRESS, help=ROOT_HELP)
    c.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=VERBOSE_HELP)
    c.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON instead of text")
    return [c]


#: Options the top-level parser takes that a subcommand takes again: given before the subcommand they must stay.
GLOBAL_DESTS = ("json", "root", "verbose")


def keep_global_options(sub: Any) -> None:
    """Suppress the defaults of every subcommand's copy of a global option, so that it does not reset what was
    given before the subcommand (``numabind --json stat PID``)."""
    for parser in sub.choices.values():
        for action in parser._actions:
            if action.dest in GLOBAL_DESTS:
                action.default = argparse.SUPPRESS


def pid_arg(text: str) -> int:
    """A process id as an option or argument gives it (argparse's ``type``): a positive number."""
    if not (text.isascii() and text.isdigit()) or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id (a positive number)")
    return int(text)


def print_json(value: Any) -> None:
    """``--json``'s output: ``value`` indented, keys sorted, on stdout."""
    import json   # off numabind move's start

    print(json.dumps(value, indent=2, sort_keys=True))
