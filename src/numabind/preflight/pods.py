"""Pod alignment for ``numabind check``: GPUs whose node the cpuset leaves out, and a Kubernetes Guaranteed pod
without exclusive CPUs.

Both read what discovery read (the cpuset, :attr:`Topology.allowed_cpus` and :attr:`Topology.allowed_nodes`) and
the process's cgroup path (``proc/self/cgroup`` under the discovery root), so a replayed root is judged as its own
machine. The pod's QoS class is in that path: the kubelet puts a Burstable pod under ``kubepods-burstable`` (or
``kubepods/burstable``), a BestEffort one under ``...besteffort``, and a Guaranteed one directly under ``kubepods``.
A cgroup namespace that hides the path (``0::/``) leaves the class unknown, which is said, not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._base import printable
from .._fs import FsReader
from ..cpulist import format_cpulist

if TYPE_CHECKING:  # pragma: no cover
    from ..topology import Topology

__all__ = ["PodAlignment", "cgroup_path", "pod_alignment", "qos_class"]


@dataclass(frozen=True)
class PodAlignment:
    """``cgroup``: the process's cgroup path (None when unreadable); ``qos``: the pod's QoS class
    (``"Guaranteed"``, ``"Burstable"``, ``"BestEffort"``; None outside Kubernetes or when the path is hidden);
    ``exclusive_cpus``: the cpuset holds fewer CPUs than are online; ``problems``: one line per misalignment,
    with its fix."""

    cgroup: str | None
    qos: str | None
    exclusive_cpus: bool
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        where = f"cgroup {printable(self.cgroup)}" if self.cgroup else "cgroup unknown"   # another user may name it
        pod = f"Kubernetes {self.qos} pod" if self.qos else "not a Kubernetes pod (or its cgroup path is hidden)"
        cpus = "exclusive CPUs" if self.exclusive_cpus else "every online CPU"
        head = f"{pod}, {where}, {cpus}"
        return head + ("".join(f"\n  {p}" for p in self.problems) if self.problems else ": aligned")

    def to_dict(self) -> dict[str, Any]:
        return {"cgroup": self.cgroup, "qos": self.qos, "exclusive_cpus": self.exclusive_cpus,
                "problems": list(self.problems), "ok": self.ok}


def cgroup_path(reader: FsReader) -> str | None:
    """The process's cgroup v2 path (``0::PATH``), else its cpuset's v1 path, from ``proc/self/cgroup``."""
    text = reader.read("proc/self/cgroup")
    if text is None:
        return None
    v1 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            return parts[2].strip()
        if "cpuset" in parts[1].split(","):
            v1 = parts[2].strip()
    return v1


def qos_class(path: str | None) -> str | None:
    """The Kubernetes QoS class a cgroup path says (None: not under ``kubepods``)."""
    if not path or "kubepods" not in path:
        return None
    if "besteffort" in path:
        return "BestEffort"
    if "burstable" in path:
        return "Burstable"
    return "Guaranteed"


def _gpu_problems(topology: Topology) -> list[str]:
    out = []
    for node in sorted({g.numa_node for g in topology.gpus if g.numa_node is not None}):
        held = topology.nodes.get(node)
        if held is None:
            continue
        missing = [what for what, off in (("CPUs", bool(held.cpus) and not held.cpus & topology.allowed_cpus),
                                          ("memory", held.has_memory and node not in topology.allowed_nodes)) if off]
        if not missing:
            continue
        gpus = format_cpulist(g.index for g in topology.gpus if g.numa_node == node)
        out.append(f"gpu {gpus} on node {node}: the cpuset ({topology.allowed_source or 'online'}) allows none of "
                   f"node {node}'s {' or '.join(missing)} (CPUs {format_cpulist(topology.allowed_cpus)}, memory "
                   f"nodes {format_cpulist(topology.allowed_nodes) or 'none'}), so its worker would run off its "
                   f"GPU's node; fix: give the pod node {node}'s CPUs and memory (Kubernetes Topology Manager "
                   f"policy single-numa-node or restricted) or use the GPUs of the allowed nodes")
    return out


def pod_alignment(topology: Topology) -> PodAlignment:
    """The pod alignment of the process under ``topology``'s root."""
    path = cgroup_path(FsReader(topology.root))
    qos = qos_class(path)
    exclusive = topology.allowed_cpus != topology.online_cpus
    problems = _gpu_problems(topology)
    if qos == "Guaranteed" and not exclusive:
        problems.append(f"a Guaranteed pod without exclusive CPUs: its cpuset is every online CPU "
                        f"({format_cpulist(topology.online_cpus)}), so other pods' threads share its cores; fix: "
                        f"the kubelet's static CPU manager (--cpu-manager-policy=static) and whole-number CPU "
                        f"requests equal to the limits")
    return PodAlignment(cgroup=path, qos=qos, exclusive_cpus=exclusive, problems=tuple(problems))
