"""Should numabind bind GPU workers on its own? The automatic-binding gate.

The conditions are pure (:func:`numabind.strategies.auto_gate`); this module
adds the one thing they need from the live machine: the process's current
affinity and memory policy, read through :mod:`numabind.bind`.
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
    """Whether automatic binding should be attempted, and why (never raises).

    Conditions, checked in this order:

    * more than one NUMA node has CPUs;
    * at least one GPU is visible (or listed in ``gpus``);
    * the process is not already bound by its launcher: its CPU affinity
      covers ``unbound_cpus`` (default: every online CPU; in a container
      pinned by a cpuset, pass the cpuset's CPUs);
    * the memory policy is still ``default``;
    * every GPU (``gpus``, default every visible one) gets a plan in ``mode``.

    ``affinity`` and ``mem_policy`` default, for the live machine (root
    ``/``), to what :func:`numabind.current_binding` reads from the kernel;
    for a dump, to the dump's allowed CPUs and ``default``.
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
