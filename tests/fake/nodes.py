"""``sys/devices/system/node`` of a fake machine (the node lists, each node's CPUs, links, distances,
meminfo, numastat and huge pages, the firmware's HMAT figures), the weighted-interleave weights
(``sys/kernel/mm/mempolicy``) and ``proc/meminfo``."""

from __future__ import annotations

from numabind.cpulist import format_cpulist

from .cpus import nr_cpu_ids
from .masks import GIB_KB, NODE, WEIGHTS, kernel_mask

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .machine import FakeMachine


def node_files(m: FakeMachine, out: dict, links: dict) -> None:
    q = m.quirks
    online = m.online()
    node_online = m.node_online()
    possible = m.node_possible()
    nbits = nr_cpu_ids(m)
    dirs = m.node_dirs()
    out[f"{NODE}/online"] = format_cpulist(node_online) + "\n"
    out[f"{NODE}/possible"] = format_cpulist(possible) + "\n"
    out[f"{NODE}/has_cpu"] = format_cpulist(n for n in dirs if m.nodes[n].cpus & online) + "\n"
    out[f"{NODE}/has_memory"] = format_cpulist(n for n in dirs if m.nodes[n].memory_kb) + "\n"
    out[f"{NODE}/has_normal_memory"] = out[f"{NODE}/has_memory"]
    order = sorted(possible if q.distance_over == "possible" else node_online)
    for nid in dirs:
        node = m.nodes[nid]
        base = f"{NODE}/node{nid}"
        cpus = node.cpus & online
        if q.lists:
            out[f"{base}/cpulist"] = format_cpulist(cpus) + "\n"
        if q.masks and q.node_cpumap:
            out[f"{base}/cpumap"] = kernel_mask(cpus, nbits) + "\n"
        if q.node_cpu_links:
            for c in sorted(cpus):
                links[f"{base}/cpu{c}"] = f"../../cpu/cpu{c}"
        kb = node.memory_kb
        pages = m.hugepages.get(nid, {})
        huge_kb = sum(size * count for size, count in pages.items())
        out[f"{base}/meminfo"] = (
            f"Node {nid} MemTotal:       {kb} kB\n"
            f"Node {nid} MemFree:        {(kb - huge_kb) // 2} kB\n"
            f"Node {nid} MemUsed:        {kb - (kb - huge_kb) // 2} kB\n"
            f"Node {nid} HugePages_Total: {sum(pages.values())}\n"
        )
        # the kernel's allocation counters, in pages: 1 GiB of 4 KiB pages hit per node, a few misses past node 0
        hit, miss = (nid + 1) * 262144, nid * 256
        out[f"{base}/numastat"] = (f"numa_hit {hit}\nnuma_miss {miss}\nnuma_foreign {2 * miss}\n"
                                   f"interleave_hit 128\nlocal_node {hit}\nother_node {miss}\n")
        for size, count in pages.items():
            out[f"{base}/hugepages/hugepages-{size}kB/nr_hugepages"] = f"{count}\n"
            out[f"{base}/hugepages/hugepages-{size}kB/free_hugepages"] = f"{count}\n"
        row = [node.distances.get(o, 10 if o == nid else 20) for o in order]
        out[f"{base}/distance"] = " ".join(str(d) for d in row) + "\n"


def meminfo(m: FakeMachine, out: dict) -> None:
    """``proc/meminfo``: MemTotal is ``memtotal_kb``, else the nodes' sum (16 GiB without nodes)."""
    total = m.memtotal_kb
    if total is None:
        total = sum(n.memory_kb for n in m.nodes.values()) or 16 * GIB_KB
    out["proc/meminfo"] = (f"MemTotal:       {total} kB\nMemFree:        {total // 2} kB\n"
                           f"MemAvailable:   {total // 2} kB\n")


def hmat_files(m: FakeMachine, out: dict, links: dict) -> None:
    """``nodeN/access0/initiators``: the HMAT figures and a link to each best initiator."""
    for nid, figures in m.hmat.items():
        base = f"{NODE}/node{nid}/access0/initiators"
        for name, value in figures.items():
            if name != "initiators" and value is not None:
                out[f"{base}/{name}"] = f"{value}\n"
        for ini in sorted(figures["initiators"]):
            links[f"{base}/node{ini}"] = f"../../../node{ini}"


def weights_files(m: FakeMachine, out: dict) -> None:
    """``weighted_interleave/nodeN`` (Linux 6.9+) and the ``auto`` switch (6.16+)."""
    if m.interleave_weights is None:
        return
    for nid, weight in m.interleave_weights.items():
        out[f"{WEIGHTS}/node{nid}"] = f"{weight}\n"
    if m.interleave_auto:
        out[f"{WEIGHTS}/{m.interleave_auto}"] = "true\n" if m.interleave_auto_value else "false\n"
