"""Exceptions raised by numabind.

Every error names the input or the system call that caused it and, where
there is one, the fix.
"""

import os

__all__ = ["NumabindError", "PlanError", "BindError", "BirthBindError"]


class NumabindError(Exception):
    """Base class of every error numabind raises on purpose."""


class PlanError(NumabindError, ValueError):
    """A plan, cpulist or nodelist is invalid, or does not fit the machine."""


class BindError(NumabindError, OSError):
    """The kernel (or a helper binary) refused a binding.

    ``errno`` is the error number, ``syscall`` the call that failed
    (``"set_mempolicy"``, ``"sched_setaffinity"``, ...), ``detail`` what was
    being attempted.
    """

    errno: int     # always set (OSError's may be None)

    def __init__(self, err: int, syscall: str, detail: str = "") -> None:
        import errno   # only when an error is made: errno is off the import path of a bind

        name = errno.errorcode.get(err, f"errno {err}")
        msg = f"{syscall} failed with {name} ({os.strerror(err)})"
        if detail:
            msg += f": {detail}"
        super().__init__(err, msg)
        self.syscall = syscall
        self.detail = detail
        self.errno_name = name

    def __str__(self) -> str:  # OSError's default prefixes "[Errno N]"
        return str(self.args[1])

    def __reduce__(self) -> "tuple[type[BindError], tuple[int | None, str, str]]":
        return (type(self), (self.errno, self.syscall, self.detail))


class BirthBindError(NumabindError):
    """A child could not be bound at birth under strict mode (the cause is chained)."""
