"""``numabind topology --matrix``: GPU x NIC PCI link classes and nodes, like ``nvidia-smi topo -m``; below the
grid each NIC, each GPU's nearest NICs and their environment (:func:`numabind.iodevices.nic_env`), the legend.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..iodevices import Nic, PciPlace, gpu_places, link_matrix, nearest_nics, nic_env, scan_nics

__all__ = ["LEGEND", "format_matrix", "matrix_dict", "topology_matrix"]

LEGEND = (
    ("PIX", "at most one PCIe bridge between them (the same PCIe switch)"),
    ("PXB", "several PCIe bridges, not through the host bridge"),
    ("PHB", "through a PCIe host bridge (different root ports of one CPU)"),
    ("NODE", "through the interconnect between host bridges of one NUMA node"),
    ("SYS", "across NUMA nodes (the SMP interconnect), or a node the firmware does not give"),
)


def _node(value: int | None) -> str:
    return "N/A" if value is None else str(value)


def matrix_dict(gpus: Sequence[Any], places: Sequence[PciPlace], nics: Sequence[Nic]) -> dict[str, Any]:
    """The matrix as plain data: ``gpus`` (``topology.gpus``) with their ``places`` (same order), ``nics``."""
    grid = link_matrix(places, nics)
    nearest = nearest_nics(places, nics)
    return {
        "nics": [n.to_dict() for n in nics],
        "gpus": [{"index": g.index, "pci_address": p.address, "numa_node": g.numa_node, "pci_path": list(p.path),
                  "links": dict(zip((n.name for n in nics), row)),
                  "nearest": [n.name for n in nearest[p.address]], "env": nic_env(p, places, nics)}
                 for g, p, row in zip(gpus, places, grid)],
        "legend": dict(LEGEND),
    }


def format_matrix(gpus: Sequence[Any], places: Sequence[PciPlace], nics: Sequence[Nic], *,
                  as_json: bool = False) -> str:
    """The text (``nvidia-smi topo -m``'s layout) or, with ``as_json``, the JSON of :func:`matrix_dict`."""
    data = matrix_dict(gpus, places, nics)
    if as_json:
        return json.dumps(data, indent=2, sort_keys=True)
    if not gpus and not nics:
        return "no GPU and no network device on a PCI function\n"
    head = [""] + [n.name for n in nics] + ["NUMA Affinity"]
    rows = [head]
    for g, entry in zip(gpus, data["gpus"]):
        rows.append([f"GPU{g.index}"] + [entry["links"][n.name] for n in nics] + [_node(g.numa_node)])
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.append("")
    for n in nics:
        names = ", ".join(n.netdevs + tuple(f"{u} (on it)" for u in n.uppers)) or "no interface"
        ports = f" ports {','.join(map(str, n.ports))}" if n.ports else ""
        vf = f" VF of {n.physfn}" if n.physfn else ""
        lines.append(f"{n.name}: {n.kind} {n.address} node {_node(n.numa_node)}{ports}{vf}; {names}")
    for g, entry in zip(gpus, data["gpus"]):
        env = " ".join(f"{k}={v}" for k, v in sorted(entry["env"].items())) or "(no NIC)"
        lines.append(f"GPU{g.index} ({entry['pci_address']}): nearest {', '.join(entry['nearest']) or 'none'}; {env}")
    lines.append("")
    lines.append("Legend:")
    lines.extend(f"  {k:<4} = {v}" for k, v in LEGEND)
    return "\n".join(lines) + "\n"


def topology_matrix(topology: Any, *, as_json: bool = False) -> str:
    """:func:`format_matrix` of ``topology.gpus`` and the NICs under the topology's root (``topology.nics`` when
    it has them)."""
    nics = getattr(topology, "nics", None)
    if nics is None:
        nics = scan_nics(topology.root)
    places = gpu_places(topology.root, topology.gpus)
    return format_matrix(topology.gpus, places, tuple(nics), as_json=as_json)
