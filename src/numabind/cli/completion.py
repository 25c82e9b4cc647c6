"""``numabind completion bash|zsh``: the shell completion script, written by shtab (the ``completion`` extra)
from :func:`numabind.cli.commands.build_parser` (docs/install.rst)."""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

from .._base import printable
from . import NOT_APPLIED, USAGE, write_out
from ._parser import CliError
from .commands import COMPLETION_SHELLS, build_parser, subcommand

if TYPE_CHECKING:  # pragma: no cover
    import argparse


class CompletionError(CliError):
    """The completion script cannot be printed; ``exit_status`` is the command's exit status."""


def script(shell: str, parser: argparse.ArgumentParser | None = None) -> str:
    """The completion script for ``shell`` (``"bash"`` or ``"zsh"``), generated from the CLI's parser (``parser``,
    else :func:`numabind.cli.commands.build_parser`'s)."""
    if shell not in COMPLETION_SHELLS:
        raise CompletionError(f"completion: unknown shell {printable(shell)!r}; fix: name one of "
                              f"{', '.join(COMPLETION_SHELLS)} (numabind completion bash)", USAGE)
    try:
        shtab = importlib.import_module("shtab")   # by name: the package type-checks without it
    except ImportError:
        raise CompletionError("completion: the shtab package is not installed; fix: pip install shtab (the "
                              "completion extra) in numabind's environment", NOT_APPLIED) from None
    text: str = shtab.complete(parser if parser is not None else build_parser(), shell=shell)
    return text if text.endswith("\n") else text + "\n"


def main(argv: list[str] | None = None) -> int:
    """``numabind completion SHELL`` (``argv``: the words after ``completion``): prints the script."""
    parser = build_parser()
    args = subcommand(parser, "completion").parse_args(sys.argv[1:] if argv is None else argv)
    try:
        text = script(args.shell, parser)
    except CompletionError as e:
        print(f"numabind: error: {e}", file=sys.stderr)
        return e.exit_status
    return write_out(text)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
