"""The ``numactl`` backend: CPU affinity as the ``none`` backend sets it, plus birth-time binding of new processes
through the fixed wrapper script ``numabind/numactl_wrapper.sh``, which execs the ``numactl`` binary. A running
process cannot change its own memory policy through numactl; the error says so instead of pretending.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess

from .._fs import key_values
from ..cpulist import format_cpulist, parse_cpulist
from ..errors import BindError, NumabindError
from ..plan import MEM_POLICIES
from .none import AffinityOnlyBackend

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from ..plan import Plan

__all__ = ["AffinityOnlyBackend", "NumactlBackend", "WRAPPER", "parse_numactl_show"]

WRAPPER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "numactl_wrapper.sh")


class NumactlBackend(AffinityOnlyBackend):
    """Binds new processes at birth through numactl; see the module docstring."""

    name = "numactl"
    _why_no_memory = (
        "the numactl backend sets memory policy only when it starts a process "
        "(numabind run, wrap_command, configure_subprocess); use the libnuma or syscall "
        "backend to change a running process"
    )

    def __init__(self) -> None:
        found = shutil.which("numactl")
        if found is None:
            raise NumabindError(
                "numactl is not installed or not on PATH; install the numactl package "
                "or use the libnuma or syscall backend"
            )
        #: The binary checked here; the wrapper execs exactly this one, never a PATH lookup of its own.
        self.numactl = os.path.abspath(found)
        st = os.stat(WRAPPER)
        if st.st_mode & stat.S_IWOTH or not st.st_mode & stat.S_IXUSR:
            raise NumabindError(f"{WRAPPER} must be executable and not world-writable (mode {st.st_mode:o})")

    def get_mempolicy(self) -> tuple[str, frozenset[int]]:
        """The calling thread's policy, as ``numactl --show`` started from it reports it (a child inherits it)."""
        try:
            out = subprocess.run([self.numactl, "--show"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as e:
            raise BindError(errno.EIO, "get_mempolicy", f"numactl --show failed: {e}") from None
        if out.returncode != 0:
            raise BindError(errno.EIO, "get_mempolicy", f"numactl --show: {out.stderr.strip()}")
        return parse_numactl_show(out.stdout)

    def migrate_pages(self, pid: int, from_nodes: frozenset[int], to_nodes: frozenset[int]) -> int:
        tool = shutil.which("migratepages")
        if tool is None:
            raise BindError(errno.ENOTSUP, "migrate_pages", "the migratepages tool (numactl package) is missing")
        out = subprocess.run([tool, str(pid or os.getpid()), format_cpulist(from_nodes), format_cpulist(to_nodes)],
                             capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise BindError(errno.EIO, "migrate_pages", f"migratepages: {out.stderr.strip()}")
        return 0

    def command_prefix(self, plan: Plan) -> list[str]:
        """The wrapper's argv: the numactl binary, the plan's text (the ``_NUMABIND_BOUND`` marker), the plan as
        numactl options, ``--``; ``--all`` first when the plan's CPUs leave the affinity (the cpuset is the limit)."""
        whole = ["--all"] if plan.cpus is not None and not plan.cpus <= os.sched_getaffinity(0) else []
        return [WRAPPER, f"--numactl={self.numactl}", f"--mark={plan.to_text()}", *whole, *plan.to_numactl_argv(),
                "--"]


def parse_numactl_show(text: str) -> tuple[str, frozenset[int]]:
    """(policy, nodes) from ``numactl --show`` output."""
    fields = key_values(text)
    policy = fields.get("policy", "")
    if policy not in MEM_POLICIES:
        raise BindError(errno.EIO, "get_mempolicy", f"unexpected numactl --show policy {policy!r}")

    def ids(key: str) -> frozenset[int]:
        return parse_cpulist(",".join(fields.get(key, "").split()), what=f"numactl --show {key}")

    if policy == "bind":
        return policy, ids("membind")
    if policy in ("interleave", "weighted-interleave"):
        return policy, ids("interleavemask")
    if policy == "preferred":
        return policy, parse_cpulist(fields.get("preferred node", "").split()[0], what="preferred node")
    if policy == "preferred-many":
        return policy, ids("preferred")
    return policy, frozenset()
