"""Each NUMA node's memory and allocation counters under a discovery root (``numabind stat --system``, as
``numastat -m -n``). ``HugePages_*`` rows count huge pages: turned into bytes as numastat does (the node's
``hugepages-<size>kB`` counters, else ``Hugepagesize``). A kernel without NUMA has one node, 0, from
``proc/meminfo``. A file that cannot be read is named in its node's ``errors``; the other nodes are still read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ._base import excerpt, printable
from ._fs import FsReader, ascii_int, key_values
from .errors import NumabindError

__all__ = ["HUGE_COUNTS", "NUMASTAT_COUNTERS", "NodeMemory", "SystemMemory", "system_memory"]

_NODE_DIR = "sys/devices/system/node"
#: The counters of ``nodeN/numastat``, in the kernel's order.
NUMASTAT_COUNTERS = ("numa_hit", "numa_miss", "numa_foreign", "interleave_hit", "local_node", "other_node")
#: meminfo rows that count huge pages (not kB), and the per-size sysfs counter each one sums.
HUGE_COUNTS = {"HugePages_Total": "nr_hugepages", "HugePages_Free": "free_hugepages",
               "HugePages_Surp": "surplus_hugepages"}
_MAX_ROWS = 256          # a meminfo has about 40 rows; more is not a kernel's file


@dataclass(frozen=True)
class NodeMemory:
    """One node: ``memory`` (meminfo rows, bytes), ``numastat`` (counters, pages) and ``errors``."""

    node: int
    memory: dict[str, int] = field(default_factory=dict)
    numastat: dict[str, int] = field(default_factory=dict)
    errors: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"memory_bytes": dict(self.memory), "numastat_pages": dict(self.numastat), "errors": list(self.errors)}


@dataclass(frozen=True)
class SystemMemory:
    """Every node of the machine (:func:`system_memory`), with the page size that turns counters into bytes."""

    nodes: tuple[NodeMemory, ...]
    page_size: int
    root: str = "/"

    @property
    def ok(self) -> bool:
        """True when every file of every node was read."""
        return not any(n.errors for n in self.nodes)

    def memory_rows(self) -> list[str]:
        """The meminfo rows of all nodes, in the order the files list them (a row only some nodes have is kept)."""
        return list(dict.fromkeys(k for n in self.nodes for k in n.memory))

    def numastat_rows(self) -> list[str]:
        """The numastat counters of all nodes, the kernel's six first."""
        seen = list(dict.fromkeys(k for n in self.nodes for k in n.numastat))
        return [k for k in NUMASTAT_COUNTERS if k in seen] + [k for k in seen if k not in NUMASTAT_COUNTERS]

    def to_dict(self) -> dict[str, Any]:
        return {"root": self.root, "page_size": self.page_size,
                "nodes": {str(n.node): n.to_dict() for n in self.nodes}}


def _meminfo(text: str, node: int | None, what: str) -> tuple[dict[str, tuple[int, bool]], list[str]]:
    """(row -> (value, in kB), problems) of a node's meminfo, or of ``proc/meminfo`` with ``node`` None."""
    rows: dict[str, tuple[int, bool]] = {}
    bad: list[str] = []
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if node is not None:
            if len(words) < 3 or words[0] != "Node" or words[1] != str(node):
                bad.append(f"{what}: a line that is not 'Node {node} Key: value': {excerpt(line)}")
                continue
            words = words[2:]
        key = printable(words[0].rstrip(":"))   # a row's name is the file's: printed as ps would
        value = ascii_int(words[1]) if len(words) > 1 and words[0].endswith(":") else None
        unit = words[2:]
        if not key or value is None or unit not in ([], ["kB"]):
            bad.append(f"{what}: {excerpt(line)} is not 'Key: number [kB]'")
            continue
        if key not in rows and len(rows) < _MAX_ROWS:
            rows[key] = (value, bool(unit))
    return rows, bad


def _huge_page_kb(reader: FsReader) -> int | None:
    words = key_values(reader.read("proc/meminfo") or "").get("Hugepagesize", "").split()
    return ascii_int(words[0]) if words else None


def _huge_bytes(reader: FsReader, node: int, counter: str) -> int | None:
    """The bytes of ``counter`` summed over ``node``'s huge page sizes, or None when it lists no size."""
    base = f"{_NODE_DIR}/node{node}/hugepages"
    total, found = 0, False
    for name in reader.listdir(base):
        if not (name.startswith("hugepages-") and name.endswith("kB")):
            continue
        size = ascii_int(name[len("hugepages-"):-2])
        count = reader.read_int(f"{base}/{name}/{counter}")
        if size is None or count is None or count < 0:
            continue
        total += size * 1024 * count
        found = True
    return total if found else None


def _read(reader: FsReader, rel: str, errors: list[str]) -> str | None:
    """The text of ``rel``, or None with the reason added to ``errors``."""
    try:
        text = reader.read(rel)
    except NumabindError as e:          # not a regular file (a FIFO, a device) or too large: never read
        errors.append(str(e))
        return None
    if text is None:
        errors.append(f"{rel} cannot be read (missing or not readable)")
    return text


def _node(reader: FsReader, node: int, numa: bool, huge_kb: int | None) -> NodeMemory:
    errors: list[str] = []
    memory: dict[str, int] = {}
    rel = f"{_NODE_DIR}/node{node}/meminfo" if numa else "proc/meminfo"
    text = _read(reader, rel, errors)
    if text is not None:
        rows, bad = _meminfo(text, node if numa else None, rel)
        errors += bad[:3]
        for key, (value, kb) in rows.items():
            if key in HUGE_COUNTS:
                exact = _huge_bytes(reader, node, HUGE_COUNTS[key]) if numa else None
                if exact is not None:
                    memory[key] = exact
                elif huge_kb is not None:
                    memory[key] = value * huge_kb * 1024
                elif value == 0:
                    memory[key] = 0
                else:
                    errors.append(f"{rel}: {key} counts huge pages of an unknown size (no hugepages directory, "
                                  f"no Hugepagesize in proc/meminfo)")
            else:
                memory[key] = value * 1024 if kb else value
    numastat: dict[str, int] = {}
    if numa:
        rel = f"{_NODE_DIR}/node{node}/numastat"
        # a dump (hwloc-gather-topology, an hwloc XML) holds no counters: a missing file is not an error
        text = _read(reader, rel, errors) if reader.exists(rel) or reader.is_live else None
        if text is not None:
            for line in text.splitlines()[:_MAX_ROWS]:
                words = line.split()
                count = ascii_int(words[1]) if len(words) == 2 else None
                if count is None:
                    if words:
                        errors.append(f"{rel}: {excerpt(line)} is not 'counter number'")
                    continue
                numastat.setdefault(printable(words[0]), count)   # the file's name for it, printable
    return NodeMemory(node, memory, numastat, tuple(errors))


def system_memory(root: str | os.PathLike[str] | FsReader | None = None, *,
                  page_size: int | None = None) -> SystemMemory:
    """Every NUMA node's memory and allocation counters, read under ``root`` (a discovery root or an
    :class:`~numabind._fs.FsReader`). ``page_size`` (default this host's) turns counters into bytes. A root
    that does not exist is a NumabindError."""
    reader = root if isinstance(root, FsReader) else FsReader(root)
    nodes = reader.numbered(_NODE_DIR, "node")
    numa = bool(nodes)
    huge_kb = _huge_page_kb(reader)
    return SystemMemory(tuple(_node(reader, n, numa, huge_kb) for n in (nodes or [0])),
                        page_size=page_size or os.sysconf("SC_PAGE_SIZE"), root=reader.origin)
