"""Topology value objects and discovery (reads files under a root only).

:func:`discover` reads a root (the live system, a dump, an ``hwloc-gather-topology`` tarball or an hwloc XML file)
into :class:`numabind._facts.Facts` and builds the values of it; a root that holds no sysfs is an error. What is
read, and where numabind follows the kernel rather than hwloc: docs/discovery.rst.
"""

from __future__ import annotations

import os
import time

from .._base import getLogger
from .._fs import FsReader
from ..cpulist import format_cpulist
from ..devices import discover_gpus
from .build import build, interleave_weights
from .sysfs import ARM_CPU_PARTS, LOCAL_DISTANCE, arm_cpu_name, read_facts, read_weights
from .values import Cache, Cpu, InterleaveWeights, MemoryAccess, Node, Topology

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the looks' start)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping

__all__ = ["ARM_CPU_PARTS", "LOCAL_DISTANCE", "Cache", "Cpu", "InterleaveWeights", "MemoryAccess", "Node", "Topology",
           "arm_cpu_name", "discover", "discover_from", "read_interleave_weights"]

log = getLogger(__name__)


def discover(root: str | os.PathLike[str] | None = None) -> Topology:
    """Discover the machine under ``root`` (else ``$NUMABIND_FSROOT``, else ``/``).

    ``root`` may be a directory holding ``sys/`` and ``proc/``, an ``hwloc-gather-topology`` tarball or an hwloc XML
    file. On the live system (root ``/``) ``allowed_cpus`` is this process's cpuset and ``affinity`` its real affinity,
    ``os.sched_getaffinity(0)``. A root that does not exist or holds no sysfs raises NumabindError."""
    return discover_from(FsReader(root))


def discover_from(reader: FsReader, env: Mapping[str, str] | None = None) -> Topology:
    """Discovery through an existing reader (tools that record or replay reads).

    ``env`` is passed to GPU discovery (``CUDA_VISIBLE_DEVICES`` & co.); it defaults to ``os.environ``. A replayed
    root's directories are resolved once each while it runs (:meth:`FsReader.hold_dirs
    <numabind._fs.FsReader.hold_dirs>`)."""
    start = time.perf_counter()
    reader.hold_dirs()
    try:
        xml = None
        if not reader.is_live:
            from .._hwloc_xml import xml_of   # a replayed root only: off the live system's discovery

            xml = xml_of(reader)
        facts = read_facts(reader) if xml is None else xml.facts
        topo = build(facts, reader.origin, lambda nodes: discover_gpus(reader, nodes, env=env))
    finally:
        reader.release_dirs()
    log.debug("discovered %s in %.1f ms: %d nodes (%s), %d online CPUs, allowed CPUs %s nodes %s from %s, %d caches, "
              "%d GPUs", reader.origin, (time.perf_counter() - start) * 1e3, len(topo.nodes),
              format_cpulist(topo.nodes), len(topo.online_cpus), format_cpulist(topo.allowed_cpus),
              format_cpulist(topo.allowed_nodes), topo.allowed_source, len(topo.caches), len(topo.gpus))
    return topo


def read_interleave_weights(reader: FsReader) -> InterleaveWeights | None:
    """The weighted-interleave weights under ``reader``'s root, or None when there are none (before Linux
    6.9, or a dump without them). A weight file that does not hold a number from 1 to 255 is an error."""
    return interleave_weights(read_weights(reader))
