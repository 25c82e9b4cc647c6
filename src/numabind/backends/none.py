"""The ``none`` backend: CPU affinity through the standard library's sched_setaffinity, nothing else (neither the
compiled core nor numactl is usable). The ``numactl`` backend builds on it."""

import errno
import os

from ..errors import BindError
from .base import Backend, MemPolicyState

__all__ = ["AffinityOnlyBackend"]


class AffinityOnlyBackend(Backend):
    """No native code, no numactl: affinity only (report backend "none")."""

    name = "none"
    in_process_memory = False
    _why_no_memory = ("the 'none' backend sets CPU affinity only (neither numabind._native nor numactl "
                      "is usable here; see numabind.backend_info())")

    def set_affinity(self, tid: int, cpus: frozenset[int]) -> None:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError as e:
            raise BindError(e.errno or errno.EINVAL, "sched_setaffinity", f"thread {tid}") from None

    def get_affinity(self, tid: int) -> frozenset[int]:
        try:
            return frozenset(os.sched_getaffinity(tid))
        except OSError as e:
            raise BindError(e.errno or errno.EINVAL, "sched_getaffinity", f"thread {tid}") from None

    def set_mempolicy(self, policy: str, nodes: frozenset[int]) -> None:
        raise BindError(errno.ENOTSUP, "set_mempolicy", self._why_no_memory)

    def get_mempolicy(self) -> tuple[str, frozenset[int]]:
        raise BindError(errno.ENOTSUP, "get_mempolicy", self._why_no_memory)

    def save_mempolicy(self) -> MemPolicyState:
        raise BindError(errno.ENOTSUP, "get_mempolicy", self._why_no_memory)

    def restore_mempolicy(self, state: MemPolicyState) -> None:
        raise BindError(errno.ENOTSUP, "set_mempolicy", self._why_no_memory)

    def migrate_pages(self, pid: int, from_nodes: frozenset[int], to_nodes: frozenset[int]) -> int:
        raise BindError(errno.ENOTSUP, "migrate_pages", self._why_no_memory)
