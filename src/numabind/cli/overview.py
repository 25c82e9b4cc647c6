"""``numabind`` without a subcommand, the first screen: the topology, the GPUs, a plan per GPU worker (or per
node), what keeps GPUs off their node, this process's binding and the backends (``--json``: all of it as one
object)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from .._base import printable
from ..backends import backend_info
from ..cpulist import format_cpulist
from ..strategies import plan_table
from . import printable_lines
from ._parser import print_json
from .look import allowed_what, gpu_text, source_words, table, topology_text
from .plan import GPU_HEAD, gpu_cells, plans_json, plans_text
from .show import binding_json

if TYPE_CHECKING:  # pragma: no cover
    from ..strategies import PlanRow
    from ..topology import Topology

__all__ = ["alignment_warnings", "cmd_main"]


def _by_text(items: Iterable[tuple[int, str]]) -> list[tuple[str, str]]:
    """``(gpu, text)`` pairs grouped by text, in first-seen order: ``[("gpus 4-7", text), ("gpu 0", other)]``."""
    groups: dict[str, list[int]] = {}
    for gpu, text in items:
        groups.setdefault(text, []).append(gpu)
    return [(("gpus " if len(ids) > 1 else "gpu ") + format_cpulist(ids), text) for text, ids in groups.items()]


def _plans_text(topo: Topology, rows: Sequence[PlanRow]) -> str:
    """The first screen's plan table: one line per GPU worker; why a GPU cannot be placed below it (GPUs with
    the same reason on one line)."""
    if not topo.gpus:
        return plans_text(topo)
    cells = [list(GPU_HEAD)]
    errors = []
    for r in rows:
        if r.plan is None:
            cells.append([str(r.gpu), "-", "cannot place (see below)", "-"])
            error = (r.error or "no reason given").replace(f"from {topo.allowed_source}",
                                                           source_words(topo.allowed_source))
            errors.append((r.gpu, error.removeprefix(f"GPU {r.gpu} ({r.vendor} {r.pci_address}): ")))
            continue
        cells.append(gpu_cells(r))
    lines = ["Plans per GPU worker (mode node, memory bind):", table(cells)]
    lines += [f"{who} cannot be placed: {text}" for who, text in _by_text(errors)]
    lines.append("(numabind plan explains each GPU's placement)")
    return "\n".join(lines)


def alignment_warnings(topo: Topology, who: str = "this process") -> list[str]:
    """One line per NUMA node holding GPUs whose CPUs or memory ``who``'s cpuset leaves out (their workers would
    run off their node); empty when all are aligned."""
    out = []
    for node in sorted({g.numa_node for g in topo.gpus if g.numa_node is not None}):
        held = topo.nodes.get(node)
        no_cpus = held is not None and bool(held.cpus) and not held.cpus & topo.allowed_cpus
        no_mem = held is not None and held.has_memory and node not in topo.allowed_nodes
        if not (no_cpus or no_mem):
            continue
        gpus = [g.index for g in topo.gpus if g.numa_node == node]
        missing = " or ".join(what for what, off in (("CPUs", no_cpus), ("memory", no_mem)) if off)
        out.append(f"{'gpus' if len(gpus) > 1 else 'gpu'} {format_cpulist(gpus)} on node {node}: {who} may use "
                   f"none of node {node}'s {missing}, only {allowed_what(topo)}, so their workers would run "
                   f"off their GPU's node; give the pod node {node}'s CPUs and memory (Kubernetes Topology Manager "
                   f"policy single-numa-node or restricted) or use the GPUs of the allowed nodes")
    return out


def cmd_main(args: argparse.Namespace) -> int:
    from ..preflight import quick
    from ..topology import discover
    from ..verify import current_binding

    topo = discover(args.root)
    info = backend_info()
    replayed = args.root is not None and os.path.realpath(args.root) != "/"
    who = "the replayed process" if replayed else "this process"
    rows = plan_table(topo, mode="node", policy="bind") if topo.gpus else ()
    check = quick()     # this host's calls, tried in a child (a replayed machine's cannot be tried from here)
    if args.json:
        print_json({"topology": topo.to_dict(), "plans": plans_json(topo, rows=rows or None),
                    "binding": binding_json(current_binding()), "backends": info, "check": check.to_dict()})
        return 0
    if replayed:
        print(f"#### the replayed machine, read from {printable(args.root)} (not the host this runs on) ####")
        print()
    else:
        print(f"check: {printable_lines(check.verdict())} (numabind check: the details)")
        print()
    print("== topology ==")
    print(topology_text(topo, who))
    print()
    print("== GPUs ==")
    print(gpu_text(topo))
    print()
    print("== plans ==")
    print(printable_lines(_plans_text(topo, rows)))     # notes and errors quote the machine's strings
    for line in alignment_warnings(topo, who):
        print(printable_lines(f"WARNING: {line}"))
    print()
    if replayed:
        print("#### this host, live: the process running numabind (not the replayed machine) ####")
        print()
    if replayed:
        print(f"check: {printable_lines(check.verdict())} (numabind check: the details)")
    print("== current binding of this process ==")
    print(current_binding().describe())
    print()
    print("== backends ==")
    native = None if info["native_ok"] else info["native"]
    reason = info["reason"]
    if native:  # said once, in one line, instead of once per native backend
        print(native)
        reason = reason.replace(f"ImportError: {native}", "native core missing (above)")
    else:
        print(f"native core: {info['native']}")
    print(f"selected: {info['selected']} ({reason})")
    for name, why in info["unavailable"].items():
        if not (native and native in why):
            print(f"unavailable: {name}: {why}")
    return 0
