"""Should numabind bind GPU workers on its own? The automatic-binding gate: :func:`numabind.strategies.auto_gate`,
with the live process's current affinity and memory policy.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .strategies import auto_gate, topology_or_discover

if TYPE_CHECKING:  # pragma: no cover
    from .topology import Topology
    from .types import MemPolicy, Mode

__all__ = ["auto_plan_available"]

log = logging.getLogger(__name__)


def _live_binding() -> Any:
    """What the kernel says about this process, or None when it cannot be read."""
    try:
        from .verify import current_binding

        return current_binding()
    except Exception as exc:  # no backend, or the kernel refused
        log.debug("auto binding: current binding unreadable: %s", exc)
        return None


def auto_plan_available(topology: Topology | None = None, *, affinity: Iterable[int] | None = None,
                        mem_policy: MemPolicy | None = None, gpus: Iterable[int] | None = None,
                        mode: Mode = "node", unbound_cpus: Iterable[int] | None = None) -> tuple[bool, str]:
    """Whether automatic binding should be attempted, and why (never raises): more than one NUMA node has CPUs,
    a GPU is visible (or listed in ``gpus``), the CPU affinity covers ``unbound_cpus`` (default every online
    CPU: the launcher did not bind it), the memory policy is ``default``, and every GPU gets a plan in ``mode``.
    ``affinity`` and ``mem_policy`` default to the live binding (for a dump: its allowed CPUs and ``default``).
    """
    try:
        topology = topology_or_discover(topology)
    except Exception as exc:
        ok, why = False, f"topology discovery failed: {exc}"
    else:
        live = None
        if getattr(topology, "root", None) == "/" and (affinity is None or mem_policy is None):
            live = _live_binding()
        ok, why = auto_gate(topology, affinity=affinity, mem_policy=mem_policy, gpus=gpus, mode=mode,
                            unbound_cpus=unbound_cpus, live=live)
    (log.info if ok else log.debug)("automatic binding %s: %s", "available" if ok else "skipped", why)
    return ok, why
