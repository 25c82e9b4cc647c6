"""An hwloc XML topology as a discovery root (``lstopo t.xml``; the manual: docs/discovery.rst, "hwloc XML").

:func:`read_topology` reads a file (format v1 of hwloc 1.x, v2 of 2.x, v3 of 3.x) into an :class:`HwlocTopology`:
its machine as the same :class:`~numabind._facts.Facts` the sysfs reader gives, which the topology's one builder
makes values of, and its PCI functions, whose files (:meth:`HwlocTopology.tree`) numabind's other readers (GPUs,
I/O devices, node memory) read from memory. :func:`xml_root` reads a file once; :func:`xml_of` is the one a reader
reads.
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

    @property
    def gpu_note(self) -> str:
        return "; ".join(self.gpu_notes.values())

    @cached_property
    def tree(self) -> Tree:
        """The files a kernel would show of the machine to the readers other than the topology's (made once)."""
        return Tree(*tree_files(self))


def read_topology(path: str, data: bytes) -> HwlocTopology:
    """The machine the hwloc XML file ``path`` describes, from its bytes ``data``; NumabindError (file and line)
    for anything it cannot read. The whole file is read and checked before anything is made of it."""
    r = parse(path, data)
    facts, numa = read_machine(path, r)
    root = r.objects[0]
    pci = read_pci(path, r.objects, facts, numa, r.version)
    carried = {k.partition(".")[2]: v for k, v in root.infos.items() if k.startswith("NumabindGpuOrder.")}
    return HwlocTopology(path, r.version, facts, pci, gpu_notes(path, pci, carried))


_read: dict[tuple[str, int, int], HwlocTopology] = {}     # (realpath, size, mtime_ns) -> the file read


def xml_root(path: str, load: Callable[[], bytes]) -> HwlocTopology:
    """The hwloc XML file ``path`` read once per (file, size, mtime); ``load()`` gives its bytes (the bounded
    read of :mod:`numabind._fs`)."""
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
    """What an XML root says about its GPUs' order (for their identity note): of the GPUs of ``vendor``
    (``"nvidia"``, ``"amd"``, ``"intel"``, ``"ascend"``), or of every vendor; "" for another root and where the
    file's OS devices number the GPUs as numabind does."""
    topo = xml_of(reader)
    if topo is None:
        return ""
    return (topo.gpu_note if vendor is None else topo.gpu_notes.get(vendor, "")).strip()
