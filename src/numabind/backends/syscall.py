"""The ``syscall`` backend: raw system calls through numabind._native; no libnuma."""

from __future__ import annotations

from ._native import NativeBackend

__all__ = ["SyscallBackend"]


class SyscallBackend(NativeBackend):
    name = "syscall"
    prefix = "nb_sys_"
