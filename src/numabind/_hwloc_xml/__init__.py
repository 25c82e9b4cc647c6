"""An hwloc XML topology (formats v1 to v3) as a discovery root (docs/discovery.rst, "hwloc XML"):
:func:`read_topology` gives its machine as :class:`~numabind._facts.Facts` and its PCI functions, whose files
(:meth:`HwlocTopology.tree`) the other readers read from memory.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from .._facts import Facts
from .io import Function, gpu_notes, read_pci
from .machine import read_machine
from .parse import MAX_XML_BYTES, MAX_XML_DEPTH, MAX_XML_OBJECTS, looks_like_hwloc_xml, parse, read_error
from .tree import Tree, tree_files

__all__ = ["MAX_XML_BYTES", "MAX_XML_DEPTH", "MAX_XML_OBJECTS", "HwlocTopology", "gpu_order_note",
           "looks_like_hwloc_xml", "read_error", "read_topology", "tree_files", "xml_of", "xml_root"]


@dataclass
class HwlocTopology:
    """What numabind takes from an hwloc XML file: its machine (``facts``), its PCI functions by bus id, and how
    its GPUs are ordered (``gpu_notes``: vendor -> why numabind's order of them is uncertain)."""

    path: str
    version: str
    facts: Facts
    pci: dict[str, Function]
    gpu_notes: dict[str, str]

    @cached_property
    def tree(self) -> Tree:
        """The files a kernel would show of the machine to the readers other than the topology's (made once)."""
        return Tree(*tree_files(self))


def read_topology(path: str, data: bytes) -> HwlocTopology:
    """The machine the hwloc XML file ``path`` describes, from its bytes ``data``; NumabindError (file and line)
    for anything it cannot read."""
    r = parse(path, data)
    facts, numa = read_machine(path, r)
    root = r.objects[0]
    pci = read_pci(path, r.objects, facts, numa, r.version)
    carried = {k.partition(".")[2]: v for k, v in root.infos.items() if k.startswith("NumabindGpuOrder.")}
    return HwlocTopology(path, r.version, facts, pci, gpu_notes(path, pci, carried))


_read: dict[tuple[str, int, int], HwlocTopology] = {}     # (realpath, size, mtime_ns) -> the file read


def xml_root(path: str, load: Callable[[], bytes]) -> HwlocTopology:
    """The hwloc XML file ``path`` read once per (file, size, mtime); ``load()`` gives its bytes."""
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    found = _read.get(key)
    if found is None:
        found = _read[key] = read_topology(path, load())
    return found


def xml_of(reader: Any) -> HwlocTopology | None:
    """The hwloc XML file ``reader`` reads (an :class:`~numabind._fs.FsReader`), None for any other root."""
    found: HwlocTopology | None = getattr(reader, "xml", None)
    return found


def gpu_order_note(reader: Any, vendor: str | None = None) -> str:
    """What an XML root says about the order of the GPUs of ``vendor`` (None: every vendor); "" where there is
    nothing to say."""
    topo = xml_of(reader)
    if topo is None:
        return ""
    return ("; ".join(topo.gpu_notes.values()) if vendor is None else topo.gpu_notes.get(vendor, "")).strip()
