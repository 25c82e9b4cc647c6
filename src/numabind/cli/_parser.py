"""The command line's argparse parser class, one home for ``numabind`` (cli.commands) and ``numabind move``
(cli.move, which builds its own parser to start without the rest of the CLI)."""

from __future__ import annotations

import argparse

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing: numabind move loads this module
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

__all__ = ["ArgumentParser"]


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, but an option's value ``--`` (``--physcpubind=--``) is that value, checked like any other.

    argparse (Python 3.11's, and later ones until CPython changed it) drops a ``--`` from an option's values and
    then stores ``[]`` for it without calling its ``type`` or checking its ``choices``: ``--backend=--`` was
    silently ignored, ``--physcpubind=--`` (numactl's ``-C --`` hands it on) and ``--root=--`` ended in a
    traceback. Subcommands' parsers are of this class too (``add_subparsers`` makes them of the parent's).

    ``raw_epilog``: text printed as written below the help (tables, examples), where argparse's ``epilog``
    would be wrapped and ``RawDescriptionHelpFormatter`` would stop wrapping the description too."""

    def __init__(self, *args: Any, raw_epilog: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.raw_epilog = raw_epilog    # printed as written below the help (the description is wrapped as usual)

    def format_help(self) -> str:
        text = super().format_help()
        return text if self.raw_epilog is None else f"{text}\n{self.raw_epilog}\n"

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        if action.option_strings and action.nargs is None and arg_strings == ["--"]:
            value = self._get_value(action, "--")
            self._check_value(action, value)
            return value
        return super()._get_values(action, arg_strings)
