"""``getLogger(__name__)`` without importing :mod:`logging` until a record can be seen.

Importing :mod:`logging` costs more than the rest of ``numabind run`` together (it brings ``re``,
``traceback``, ``string`` and ``weakref`` along). A record can only reach a handler once the program
(or a test framework, or the CLI) has imported :mod:`logging` to configure one, so until then a
record is dropped, which is what logging itself would do with numabind's ``NullHandler`` and no
handler configured. From the moment :mod:`logging` is in ``sys.modules`` every call goes to the real
``logging.getLogger(name)``, unchanged.
"""

from __future__ import annotations

import sys
TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

__all__ = ["getLogger", "Logger"]

DEBUG, INFO, WARNING, ERROR = 10, 20, 30, 40
_modules = sys.modules
_null_added = False


def _real(name: str) -> Any:
    global _null_added
    import logging

    if not _null_added:   # the library's NullHandler, as every library adds it
        root = logging.getLogger("numabind")
        if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
            root.addHandler(logging.NullHandler())
        _null_added = True
    return logging.getLogger(name)


class Logger:
    """The part of :class:`logging.Logger` numabind uses, resolved on first use after logging is imported."""

    __slots__ = ("name", "_logger")

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger: Any = None

    def _get(self) -> Any:
        logger = self._logger
        if logger is None:
            logger = self._logger = _real(self.name)
        return logger

    # stacklevel=2: the record names numabind's caller of this method, as logging's own would
    def isEnabledFor(self, level: int) -> bool:
        return "logging" in _modules and self._get().isEnabledFor(level)

    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        if "logging" in _modules:
            self._get().log(level, msg, *args, stacklevel=2, **kwargs)

    def debug(self, msg: str, *args: Any, **kwargs: Any) -> None:
        if "logging" in _modules:
            self._get().debug(msg, *args, stacklevel=2, **kwargs)

    def info(self, msg: str, *args: Any, **kwargs: Any) -> None:
        if "logging" in _modules:
            self._get().info(msg, *args, stacklevel=2, **kwargs)

    def warning(self, msg: str, *args: Any, **kwargs: Any) -> None:
        if "logging" in _modules:
            self._get().warning(msg, *args, stacklevel=2, **kwargs)

    def error(self, msg: str, *args: Any, **kwargs: Any) -> None:
        if "logging" in _modules:
            self._get().error(msg, *args, stacklevel=2, **kwargs)


def getLogger(name: str) -> Logger:  # noqa: N802 - the name of the function it stands for
    return Logger(name)
