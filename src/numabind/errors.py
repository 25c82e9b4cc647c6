"""Exceptions raised by numabind.

Every error names the input or the system call that caused it and, where
there is one, the fix.
"""

import os
import sys

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (errors is on every import path)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

__all__ = ["NumabindError", "PlanError", "BindError", "BirthBindError", "BindWarning", "MEMORY_CALLS", "refusal_fix",
           "NoSuchProcess", "AccessDenied", "warn_degraded"]


class NumabindError(Exception):
    """Base class of every error numabind raises on purpose."""


class PlanError(NumabindError, ValueError):
    """A plan, cpulist or nodelist is invalid, or does not fit the machine."""


#: The memory-policy calls a container's seccomp profile may forbid (Docker's default profile, and the
#: RuntimeDefault of containerd and CRI-O, allow them only with CAP_SYS_NICE).
MEMORY_CALLS = ("set_mempolicy", "mbind", "migrate_pages", "move_pages", "get_mempolicy",
                "set_mempolicy_home_node")

#: The fix a refused call's message ends with, one per (errno name, kind of call). ``{call}`` is the call,
#: ``{cpuset}`` the CPUs the thread's cpuset allows (" (the cpuset allows CPUs 0-3)" or "").
_FIXES = {
    ("EPERM", "memory"): (
        "likely cause: no CAP_SYS_NICE, or a seccomp profile that forbids {call} (Docker's default profile allows "
        "set_mempolicy, mbind and get_mempolicy only with CAP_SYS_NICE); fix: --cap-add SYS_NICE (Kubernetes: "
        "securityContext.capabilities.add: [\"SYS_NICE\"]) or a seccomp profile that allows {call}; "
        "--lenient (strict=False) runs without this binding"),
    ("EPERM", "cpus"): (
        "likely cause: a seccomp profile that forbids {call}, or a thread of another user (that needs "
        "CAP_SYS_NICE); fix: a seccomp profile that allows {call}, or --cap-add SYS_NICE (Kubernetes: "
        "securityContext.capabilities.add: [\"SYS_NICE\"]); --lenient (strict=False) runs without this binding"),
    ("EINVAL", "cpus"): (
        "likely cause: the CPUs are outside the thread's cpuset{cpuset}; fix: pick CPUs inside it, or widen it "
        "(docker --cpuset-cpus; Kubernetes: the pod's CPU requests under the static CPU manager); --lenient "
        "(strict=False) runs without this binding"),
}


def refusal_fix(err: int, syscall: str, cpuset: "str | None" = None) -> str:
    """The likely cause of a refused binding call and its fix, in one line ("" when none is known); ``cpuset``:
    the CPUs the thread's cpuset allows, when known."""
    import errno   # only when an error is made

    kind = "memory" if syscall in MEMORY_CALLS else "cpus" if syscall == "sched_setaffinity" else None
    text = _FIXES.get((errno.errorcode.get(err, ""), kind or ""))
    if text is None:
        return ""
    return text.format(call=syscall, cpuset=f" (the cpuset allows CPUs {cpuset})" if cpuset else "")


class BindError(NumabindError, OSError):
    """The kernel (or a helper binary) refused a binding.

    ``errno`` and ``syscall`` name the refusal, ``detail`` what was being attempted, ``fix`` the likely cause
    and its fix, which the message ends with (:func:`refusal_fix`'s unless given; ``""``: none). ``cpuset``: the
    CPUs the thread's cpuset allows. ``brief``: the message without the fix.
    """

    errno: int     # always set (OSError's may be None)

    def __init__(self, err: int, syscall: str, detail: str = "", cpuset: "str | None" = None,
                 fix: "str | None" = None) -> None:
        import errno   # only when an error is made: errno is off the import path of a bind

        name = errno.errorcode.get(err, f"errno {err}")
        head = f"{syscall} failed with {name} ({os.strerror(err)})"
        if fix is None:
            fix = refusal_fix(err, syscall, cpuset)
        # a detail that quotes an earlier error of the same call keeps its words, not its head a second time
        shown = detail.replace(f"{head}: ", "")
        msg = f"{head}: {shown}" if shown else head
        self.brief = msg
        if fix and fix not in msg:
            msg += f"; {fix}"
        super().__init__(err, msg)
        self.syscall = syscall
        self.detail = detail
        self.errno_name = name
        self.fix = fix
        self.cpuset = cpuset

    def __str__(self) -> str:  # OSError's default prefixes "[Errno N]"
        return str(self.args[1])

    def __reduce__(self) -> "tuple[type[BindError], tuple[int | None, str, str, str | None, str]]":
        return (type(self), (self.errno, self.syscall, self.detail, self.cpuset, self.fix))


class BirthBindError(NumabindError):
    """A child could not be bound at birth under strict mode (the cause is chained)."""


class BindWarning(RuntimeWarning):
    """A binding was degraded: what the kernel or the cpuset refused, and what is in force instead."""


#: The warnings registry of :class:`BindWarning`: the causes said in this process.
_SAID: "dict[str | tuple[str, type[Warning], int], int]" = {}


def warn_degraded(text: str, logger: str = "numabind.bind") -> None:
    """Say a degraded binding once per distinct cause (``text``) as a :class:`BindWarning`, unless logging
    decides (a handler other than a ``NullHandler`` gets ``logger``'s WARNING, or logging drops it): a lenient
    bind is never silent, and never said twice. Call it after the record was logged (``docs/guide.rst``).
    """
    logging = sys.modules.get("logging")
    if logging is not None and _logging_decides(logging, logging.getLogger(logger)):
        return
    import warnings   # only when a degradation is said (not in sys.modules at start-up)

    # a fixed place, not the caller's line: each cause once per process, on one line (no source line to show)
    warnings.warn_explicit(text, BindWarning, logger, 0, module="numabind", registry=_SAID)


def _logging_decides(logging: "Any", logger: "Any") -> bool:
    """Whether logging shows or drops ``logger``'s WARNING records by the program's own configuration."""
    if not logger.isEnabledFor(logging.WARNING):   # a level above WARNING, or logging.disable
        return True
    node = logger
    while node is not None:
        if any(not isinstance(h, logging.NullHandler) for h in node.handlers):
            return True
        if not node.propagate:
            break
        node = node.parent
    return False


class _ProcessError(NumabindError):
    """A process could not be read: ``pid``, its ``name`` when known (else None) and ``reason``."""

    def __init__(self, pid: int, reason: str, name: "str | None" = None) -> None:
        super().__init__(f"process {pid}" + (f" ({name})" if name else "") + f": {reason}")
        self.pid = pid
        self.reason = reason
        self.name = name

    def __reduce__(self) -> "tuple[type[_ProcessError], tuple[int, str, str | None]]":
        return (type(self), (self.pid, self.reason, self.name))


class NoSuchProcess(_ProcessError):
    """The process does not exist, is a zombie, or exited while being read (psutil's ``NoSuchProcess``)."""


class AccessDenied(_ProcessError):
    """This process may not read that one (another user's; psutil's ``AccessDenied``)."""
