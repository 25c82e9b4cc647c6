"""Intel GPUs: which of them Level Zero numbers, in which order (``docs/gpus.rst``).
"""

from __future__ import annotations

from .._fs import ascii_int
from .sysfs import RENDER_NODE, addrs, device_nodes, drop_other_drivers, node_verdicts, said, warn
from .values import PciGpu, Runtime

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the looks' start)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping, Sequence
    from typing import Any

__all__ = ["intel_runtime"]


def _flag(env: Mapping[str, str], var: str) -> tuple[bool, str]:
    """An integer flag as Intel's driver reads it (non-zero is on); ``(on, problem)``."""
    raw = env.get(var)
    if raw is None or not raw.strip():
        return False, ""
    value = ascii_int(raw, max_digits=9)
    if value is None:
        return False, (f"{var}={said(raw)} is not a number (Intel's driver reads it as one, so it likely means "
                       f"off); use 1 or 0")
    return value != 0, ""


def intel_runtime(reader: Any, gpus: Sequence[PciGpu], env: Mapping[str, str]) -> Runtime:
    """The Intel GPUs Level Zero numbers, in its order, with the doubts about that set and order."""
    host = drop_other_drivers("intel", gpus)
    render = device_nodes(reader, "dev/dri", RENDER_NODE)
    keep = host
    membership: list[str] = []
    if render is not None:
        verdict = node_verdicts(host, lambda g: g.render_minor, render)
        keep = [g for g in host if verdict[g.pci_address] is not False]
        undecided = [g for g in host if verdict[g.pci_address] is None]
        if undecided:
            membership.append(warn(
                f"Intel GPUs {addrs(undecided)} have no known render node and /dev/dri holds fewer spare "
                f"accessible render nodes than them; numabind counts them all, Level Zero may count fewer"))
    pci_order, problem = _flag(env, "ZE_ENABLE_PCI_ID_DEVICE_ORDER")
    order: list[str] = []
    if problem:
        order.append(warn(problem))
    if not pci_order:
        keep = [g for g in keep if not g.integrated] + [g for g in keep if g.integrated]
        if any(g.integrated for g in keep) and not all(g.integrated for g in keep):
            order.append(warn(
                f"integrated and discrete Intel GPUs are visible ({addrs(keep)}): their order is the driver's "
                f"choice; numabind puts the integrated one last; set ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 "
                f"for PCI bus order"))
    return keep, membership, order
