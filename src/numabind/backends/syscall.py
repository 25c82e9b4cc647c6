"""The ``syscall`` backend: raw system calls through the compiled core (``nb_sys_*``); no libnuma."""

from .native import NativeBackend

__all__ = ["SyscallBackend"]


class SyscallBackend(NativeBackend):
    """The ``syscall`` backend: raw system calls through numabind._native; no libnuma."""

    name = "syscall"
    prefix = "nb_sys_"
