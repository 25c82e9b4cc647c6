"""``numabind completion bash|zsh``: the shell completion script, generated from numabind's own argparse parser.

The script is written by shtab (an optional dependency, the ``completion`` extra: ``pip install shtab``) from
:func:`numabind.cli.commands.build_parser`, so every subcommand and option the parser knows is completed and
none is written by hand. Also runs as ``python -m numabind.cli.completion bash``.

Install it the way the shell expects (bash-completion reads ``~/.local/share/bash-completion/completions/NAME``
on demand; zsh reads ``_NAME`` files on ``$fpath``)::

    numabind completion bash > ~/.local/share/bash-completion/completions/numabind
    numabind completion zsh > ~/.zfunc/_numabind     # with fpath+=(~/.zfunc) before compinit in ~/.zshrc
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .._base import printable
from ..errors import NumabindError
from .commands import COMPLETION_SHELLS, build_parser

#: The shells a script is printed for (shtab writes these; tcsh is left out: numabind's docs name two).
SHELLS = COMPLETION_SHELLS

#: Exit statuses, as the rest of the command line gives them: 1 when the script cannot be made, 2 usage.
FAILED, USAGE = 1, 2


class CompletionError(NumabindError):
    """The completion script cannot be printed; ``exit_status`` is the command's exit status."""

    def __init__(self, message: str, exit_status: int) -> None:
        super().__init__(message)
        self.exit_status = exit_status


def script(shell: str) -> str:
    """The completion script for ``shell`` (``"bash"`` or ``"zsh"``), generated from the CLI's parser."""
    if shell not in SHELLS:
        raise CompletionError(f"completion: unknown shell {printable(shell)!r}; fix: name one of "
                              f"{', '.join(SHELLS)} (numabind completion bash)", USAGE)
    try:
        # an optional dependency (the completion extra), imported by name: only this command needs it, and the
        # package type-checks without it installed
        shtab = importlib.import_module("shtab")
    except ImportError:
        raise CompletionError("completion: the shtab package is not installed; fix: pip install shtab (the "
                              "completion extra) in numabind's environment", FAILED) from None
    text: str = shtab.complete(build_parser(), shell=shell)
    return text if text.endswith("\n") else text + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The subcommand's one argument, the shell."""
    parser.add_argument("shell", choices=SHELLS, help="the shell to print the completion script for")
    return parser


def main(argv: list[str] | None = None) -> int:
    """``numabind completion SHELL`` (``argv``: the words after ``completion``); prints the script."""
    parser = add_arguments(argparse.ArgumentParser(
        prog="numabind completion", description="Print the shell completion script for numabind, generated "
        "from its command line parser (needs shtab: pip install shtab)."))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        text = script(args.shell)
    except CompletionError as e:
        print(f"numabind: error: {e}", file=sys.stderr)
        return e.exit_status
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        return 141
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
