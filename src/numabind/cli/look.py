"""The looks: ``numabind hardware`` (numactl's ``--hardware``) and ``numabind topology``: their parsers, handlers
and text, and their own path.

The plain forms (``hardware``, ``topology [--of text|xml]``, numactl's ``-H``) are taken by :func:`fast_look`
before the full command line is loaded (no argparse, json, logging or planning modules; P9); any other form, and
any error, is the full command line's (:func:`add_hardware`, :func:`add_topology`).
"""

from __future__ import annotations

import sys

from .._base import printable
from ..cpulist import format_cpulist

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the looks' start)
if TYPE_CHECKING:  # pragma: no cover
    import argparse
    from collections.abc import Iterable
    from typing import Any

    from ..topology import Topology

__all__ = ["OUTPUT_FORMS", "USAGE", "add_hardware", "add_topology", "allowed_what", "cmd_hardware",
           "cmd_topology", "compressed", "fast_look", "gpu_text", "hardware_text", "look_output", "meminfo_free",
           "node_free_bytes", "of_error", "output_form", "size_text", "source_words", "table", "topology_output",
           "topology_text"]


# ----------------------------------------------------------------------------- words and tables
def size_text(nbytes: int) -> str:
    """``1.5 GiB`` from a GiB up, else whole MiB."""
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes // 2**20} MiB"


def table(rows: list[list[str]], figures: bool = False) -> str:
    """Rows as columns two spaces apart, without trailing blanks: left-aligned, or with ``figures`` every column
    but the first right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) if figures and i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     .rstrip() for r in rows)


def source_words(source: str) -> str:
    """``Topology.allowed_source`` in words: ``"status+cgroup1:/"`` is ``"cpuset: cgroup v1 /"``."""
    kinds = {"cgroup2": "cgroup v2", "cgroup1": "cgroup v1", "cpuset": "the legacy cpuset filesystem"}
    said = []
    for part in source.split("+"):
        kind, _, path = part.partition(":")
        if kind in kinds and path:
            said.append(f"{kinds[kind]} {path}")
        elif part.startswith("online ("):
            said.append(part[len("online ("):].rstrip(")"))
    # the cgroup path is the replayed machine's (a directory name in its dump): printed as ps would print it
    return "cpuset: " + printable(", ".join(said)) if said else "no cpuset: every online CPU"


def allowed_what(topo: Topology) -> str:
    """What the process may use, in words: ``CPUs 0-1 and memory of node 0 (cpuset: cgroup v1 /)``."""
    nodes = format_cpulist(topo.allowed_nodes)
    memory = f"memory of node{'s' if len(topo.allowed_nodes) != 1 else ''} {nodes}" if nodes else "no memory node"
    return f"CPUs {format_cpulist(topo.allowed_cpus) or 'none'} and {memory} ({source_words(topo.allowed_source)})"


def topology_text(topo: Topology, who: str = "this process") -> str:
    """The nodes in a table under the root, the CPU model, the online CPUs and what ``who`` may use."""
    ids = sorted(topo.nodes)
    rows = [["node", "cpus", "memory", "distances (" + " ".join(map(str, ids)) + ")"]]
    for n in ids:
        node = topo.nodes[n]
        kind = ("" if node.cpus and node.memory_bytes else " (memory-only)" if node.memory_bytes else
                " (cpu-only)" if node.cpus else " (no CPUs, no memory)")
        rows.append([str(n), (format_cpulist(node.cpus) or "-") + kind, size_text(node.memory_bytes),
                     " ".join(str(node.distances.get(m, "-")) for m in ids)])
    lines = [
        f"root: {printable(topo.root)}",      # a replayed machine's text is someone else's: printed as ps would
        f"cpu model: {printable(topo.model_name or 'unknown')}",
        f"online cpus: {format_cpulist(topo.online_cpus)}",
        f"{who} may use {allowed_what(topo)}" + (
            f"; its parent left it the affinity CPUs {format_cpulist(topo.affinity) or 'none'}"
            if topo.affinity is not None and topo.affinity != topo.allowed_cpus else ""),
        "",
        table(rows),
    ]
    return "\n".join(lines)


def gpu_text(topo: Topology) -> str:
    """The GPUs in a table (index, PCI address, vendor, node, local CPUs), or why none is listed."""
    if not topo.gpus:
        return "none found (no NVIDIA, AMD or Intel display/accelerator PCI device is visible)"
    rows = [["gpu", "pci", "vendor", "numa node", "local cpus"]]
    for g in topo.gpus:
        rows.append([str(g.index), printable(g.pci_address), printable(g.vendor),
                     "-" if g.numa_node is None else str(g.numa_node), format_cpulist(g.local_cpus) or "-"])
    return table(rows)


# ----------------------------------------------------------------------------- hardware (numactl --hardware)
def meminfo_free(text: str | None) -> int | None:
    """MemFree of a (node's) ``meminfo`` in bytes; None when it has none."""
    for line in (text or "").splitlines():
        head, sep, rest = line.partition("MemFree:")
        words = rest.split()
        if sep and words and words[0].isascii() and words[0].isdigit():
            return int(words[0]) * 1024
    return None


def node_free_bytes(root: str | None, topo: Topology) -> dict[int, int | None]:
    """MemFree of each node from its ``meminfo`` (``proc/meminfo`` for a kernel without NUMA's one node)."""
    from .._fs import FsReader

    reader = FsReader(root)
    out: dict[int, int | None] = {}
    for n in topo.nodes:
        text = reader.read(f"sys/devices/system/node/node{n}/meminfo")
        if text is None and len(topo.nodes) == 1:
            text = reader.read("proc/meminfo")
        out[n] = meminfo_free(text)
    return out


def compressed(cpus: Iterable[int]) -> str:
    """numactl --hardware --cpu-compress's CPU list: `` 0-3, 8-11 (8)``, `` 5 (1)``, `` (0)`` when empty."""
    ids = frozenset(cpus)
    runs = format_cpulist(ids).split(",") if ids else []   # the cpulist's runs, each after a blank
    return ",".join(f" {run}" for run in runs) + f" ({len(ids)})"


def hardware_text(topo: Topology, free: dict[int, int | None], cpu_compress: bool = False) -> str:
    """``numactl --hardware``'s lines (2.0.19's 4-wide distance columns), with a line end after the last."""
    ids = sorted(topo.nodes)
    lines = [f"available: {len(ids)} nodes ({format_cpulist(ids)})"]
    for n in ids:
        node = topo.nodes[n]
        lines.append(f"node {n} cpus:" + (compressed(node.cpus) if cpu_compress else
                                          "".join(f" {c}" for c in sorted(node.cpus))))
        lines.append(f"node {n} size: {node.memory_bytes // 2**20} MB")
        mb = free[n]
        lines.append(f"node {n} free: " + ("unknown (no MemFree in its meminfo)" if mb is None else f"{mb // 2**20} MB"))
    lines.append("node distances:")    # numactl 2.0.19's columns, 4 wide (2.0.16's were 3)
    lines.append("node  " + "".join(f"{n:>4} " for n in ids))
    for n in ids:
        lines.append(f"{n:>4}: " + "".join(f"{topo.nodes[n].distances.get(m, 0):>4} " for m in ids))
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- topology
def topology_output(topo: Topology, form: str) -> str:
    """``numabind topology``'s text (``form`` ``"text"``: nodes, the tree of packages, caches, cores and PCI
    devices, the GPUs) or hwloc 2 XML (``"xml"``), with a line end after the last line."""
    from ..iodevices import scan_pci
    from .tree import build_tree, hwloc_xml, tree_text

    pci = [d for d in scan_pci(topo.root) if d.important]
    tree = build_tree(topo, pci)
    if form == "xml":
        return hwloc_xml(topo, tree)
    gpus = "GPUs: " + gpu_text(topo) if not topo.gpus else "GPUs:\n" + gpu_text(topo)
    return f"{topology_text(topo)}\n\n{tree_text(topo, tree)}\n\n{gpus}\n"


# ----------------------------------------------------------------------------- the full command line's looks
#: The forms ``numabind topology --of`` writes.
OUTPUT_FORMS = ("text", "json", "xml")


def add_hardware(sub: Any) -> None:
    """Register ``hardware`` on the CLI's subparsers."""
    from ._parser import global_options   # the full command line's (argparse): kept off the look's own start

    sub.add_parser("hardware", parents=global_options(),
                   help="nodes, CPUs, memory, distances (like numactl --hardware)",
                   description="Like numactl --hardware: available nodes, each node's CPUs, size and free "
                               "memory, and the distance matrix.")


def add_topology(sub: Any) -> None:
    """Register ``topology`` on the CLI's subparsers (:data:`USAGE` is its usage line without the global options)."""
    from ._parser import global_options   # the full command line's (argparse): kept off the look's own start

    t = sub.add_parser("topology", parents=global_options(),
                       help="discovered topology: nodes, packages, caches, cores, PCI devices (like lstopo)")
    t.add_argument("--of", type=output_form, metavar="{" + ",".join(OUTPUT_FORMS) + "}", default=None,
                   help="output format: text (default), json (Topology.to_dict(), as --json) or xml (hwloc 2 XML: "
                        "lstopo --input m.xml m.svg draws it, numabind --root m.xml replays it)")
    t.add_argument("--matrix", action="store_true",
                   help="GPU x NIC PCI link classes (PIX/PXB/PHB/NODE/SYS) and nodes, like nvidia-smi topo -m")


def of_error(value: str) -> str:
    """What ``numabind topology --of VALUE`` says of a form it does not write (a picture: hwloc draws it)."""
    return (f"argument --of: numabind writes no {printable(value)!r}, only {', '.join(OUTPUT_FORMS)}; for a picture "
            f"let hwloc draw the XML: numabind topology --of xml > m.xml && lstopo --input m.xml m.svg (or .png, "
            f".pdf)")


def output_form(value: str) -> str:
    """``topology --of``'s type: a form numabind writes, else the error that says how to get a picture."""
    import argparse   # the full command line's, loaded by it already: kept off the look's own start

    if value not in OUTPUT_FORMS:
        raise argparse.ArgumentTypeError(of_error(value).removeprefix("argument --of: "))
    return value


def cmd_hardware(args: argparse.Namespace) -> int:
    """Like ``numactl --hardware``: available nodes, each node's CPUs, size and free memory, distances."""
    from ..topology import discover

    topo = discover(args.root)
    free = node_free_bytes(args.root, topo)
    if args.json:
        from ._parser import print_json   # the full command line's (argparse): kept off the look's own start

        ids = sorted(topo.nodes)
        print_json({"available": format_cpulist(ids),
                    "nodes": {str(n): {"cpus": format_cpulist(topo.nodes[n].cpus),
                                       "size_bytes": topo.nodes[n].memory_bytes, "free_bytes": free[n]} for n in ids},
                    "distances": {str(n): {str(m): d for m, d in sorted(topo.nodes[n].distances.items())}
                                  for n in ids}})
        return 0
    sys.stdout.write(hardware_text(topo, free))
    return 0


def cmd_topology(args: argparse.Namespace) -> int:
    from ..topology import discover

    topo = discover(args.root)
    form = args.of or ("json" if args.json else "text")
    if args.matrix:
        from .matrix import topology_matrix

        if form == "xml":
            raise SystemExit("numabind topology: --matrix prints text or JSON, not --of xml")
        sys.stdout.write(topology_matrix(topo, as_json=form == "json"))
        return 0
    if form == "json":
        from ._parser import print_json   # the full command line's (argparse): kept off the look's own start

        print_json(topo.to_dict())
        return 0
    sys.stdout.write(topology_output(topo, form))
    return 0


# ----------------------------------------------------------------------------- the look's own path
#: The forms the look's own path writes (JSON is the full command line's: it loads json).
_FAST_FORMS = ("text", "xml")
#: ``topology``'s usage line without the global options (``-h``, ``--root``, ``-v``, ``--json``: tests/test_look.py
#: checks it against :func:`add_topology`'s), before the error a form numabind does not write gives.
USAGE = f"usage: numabind topology [--of {{{','.join(OUTPUT_FORMS)}}}] [--matrix]"


def _of_value(words: list[str], k: int) -> str | None:
    """The value ``--of`` takes at ``words[k]`` (``--of=V``, or ``--of V``), else None."""
    if words[k].startswith("--of="):
        return words[k][len("--of="):]
    return words[k + 1] if words[k] == "--of" and k + 1 < len(words) else None


def _look_form(args: list[str]) -> tuple[str, str] | None:
    """(``"hardware"``, ``""``) or (``"topology"``, ``"text"``/``"xml"``) for a plain look's arguments (after
    ``numabind``); None for anything else. (numactl's ``-H --cpu-compress`` comes through :func:`look_output`.)"""
    if args == ["hardware"]:
        return "hardware", ""
    if not args or args[0] != "topology":
        return None
    rest = args[1:]
    if not rest:
        return "topology", "text"
    form = _of_value(rest, 0)
    return ("topology", form) if form in _FAST_FORMS and rest in ([f"--of={form}"], ["--of", form]) else None


def _bad_form(args: list[str]) -> str | None:
    """The ``--of`` value of ``numabind topology ...`` that is no output form, else None."""
    rest = args[1:]
    for k, word in enumerate(rest):
        if word == "--":
            break
        value = _of_value(rest, k)
        if value is not None and value not in OUTPUT_FORMS:
            return value
    return None


def look_output(what: str, how: str) -> str:
    """The text a look prints, for this machine (or ``NUMABIND_FSROOT``'s); raises what discovery raises."""
    from .._base import warn_through
    from ..topology import discover
    from . import configure_logging

    warn_through(configure_logging)    # a warning discovery gives is printed as the full command line prints it
    topo = discover(None)
    if what == "hardware":
        return hardware_text(topo, node_free_bytes(None, topo), cpu_compress=how == "compressed")
    return topology_output(topo, how)


def fast_look(args: list[str]) -> int | None:
    """Print a plain look (see the module docstring) and return 0; None when the full command line must take
    ``args`` (another form, or an error to report). ``topology --of svg`` (a form numabind does not write) is
    the usage error, exit 2, that says how hwloc draws numabind's XML (:func:`of_error`)."""
    bad = _bad_form(args) if args and args[0] == "topology" else None
    if bad is not None:
        sys.stderr.write(f"{USAGE}\nnumabind topology: error: {of_error(bad)}\n")
        return 2
    form = _look_form(args)
    if form is None:
        return None
    from ..errors import NumabindError

    try:
        text = look_output(*form)
    except NumabindError:
        return None        # the full command line says it, with its exit status
    from . import write_out

    return write_out(text)
