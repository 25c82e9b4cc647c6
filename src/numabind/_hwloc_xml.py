"""An hwloc XML topology as a discovery root (see :mod:`numabind._fs`).

``lstopo t.xml`` writes a machine as hwloc XML; bug reports, Slurm, Open MPI and PMIx pass machines around in it.
:func:`read_topology` reads one (format v2 of hwloc 2.x, v1 of hwloc 1.x, and v3 of hwloc 3.x, which differs from
v2 only in what numabind does not read), and :func:`write_tree` writes what a Linux kernel would show of that
machine as a sysfs/procfs tree, which discovery then reads like any dump: no second discovery path to keep in step.

What the tree holds, from the XML:

* ``sys/devices/system/cpu``: ``online`` (the PUs), ``possible`` (with the root's ``complete_cpuset``), and per
  PU its core (the ``Core`` above it: ``thread_siblings_list``, ``core_id``), its package (``Package``, or v1's
  ``Socket``: ``physical_package_id``, ``core_siblings_list``) and its caches (``cache/indexK``: ``level``,
  ``type``, ``shared_cpu_list``, ``size``).
* ``sys/devices/system/node``: a ``nodeN`` per ``NUMANode`` (``cpulist``, ``cpumap``, ``meminfo`` from
  ``local_memory``, ``distance`` from the latency matrix). hwloc 2 gives a CPU-less node the cpuset of its
  locality, so a CPU's home node is the one the kernel would list it in: among the nodes whose cpuset holds it,
  one that is not a memory tier (hwloc's subtypes ``MCDRAM``, ``HBM``, ``GPUMemory``, ``NVM``, ``SPM``,
  ``CXL-*``), then the most local (smallest cpuset), then the lowest id. An XML without nodes (v1 without NUMA)
  gets node 0 with every PU and the machine's memory, as hwloc itself makes it.
* The latency matrix is the one named ``NUMALatency``, else an unnamed latency matrix of NUMA nodes whose
  diagonal is the SLIT's 10, else the first such (v1: ``distances`` of as many objects as there are nodes, as
  hwloc 2 reads them, values times ``latency_base``). Bandwidth matrices and heterogeneous ones (GPU NVLink) are not distances.
* Memory attributes (hwloc 2.3+ ``<memattr>``), as the kernel shows the firmware's HMAT table:
  ``nodeN/access0/initiators/{read,write}_{bandwidth,latency}`` (MB/s and ns: hwloc's Linux backend takes the
  kernel's numbers as they are) with a ``nodeM`` link per initiator node and ``nodeM/access0/targets/nodeN``
  back, and the same under ``access1`` (Linux 5.17+: CPU initiators, which every hwloc initiator is). ``Bandwidth``
  gives both bandwidths and ``Latency`` both latencies, unless ``ReadBandwidth``/``WriteBandwidth``/
  ``ReadLatency``/``WriteLatency`` give that figure. An initiator (a cpuset, or an object's) is the nodes whose
  CPUs it holds some of. Of a target's values the kernel shows one per figure: it narrows the initiators figure
  by figure (write latency, read latency, write bandwidth, read bandwidth) to those of the best value
  (drivers/acpi/numa/hmat.c), and links those left. Capacity, Locality, user attributes and 0 are not shown.
* CPU kinds (``<cpukind>``): an Intel hybrid CPU (the kinds' ``CoreType`` are ``IntelCore`` and ``IntelAtom``)
  gets the PMU lists ``sys/devices/cpu_core/cpus`` and ``sys/devices/cpu_atom/cpus``; any other set of kinds a
  per-CPU ``cpuN/cpu_capacity``: the kinds' ``LinuxCapacity`` where every kind has one, else 1024 for the most
  efficient kind and less for each lower one, evenly (by ``forced_efficiency`` where every kind has one, else in
  the file's order, which hwloc writes least efficient first). One kind without ``LinuxCapacity`` (the CPUs of
  one maximum frequency, as the DGX-2 has) is no hybrid CPU: nothing is written. Discovery reads
  ``cpu_capacity`` once per core: kinds that split a core's threads (hwloc's fake ones) read as the first's.
* ``proc/self/status``: ``Cpus_allowed_list`` and ``Mems_allowed_list`` from the root's ``allowed_cpuset`` and
  ``allowed_nodeset``; where those are not the whole machine (an XML exported inside a cpuset), a cgroup v2
  cpuset at ``sys/fs/cgroup`` too (``cpuset.cpus.effective``, ``cpuset.mems.effective``, with ``proc/mounts``
  and ``proc/self/cgroup``), which discovery takes as the limit.
* ``sys/bus/pci/devices/<bus id>``: ``class``, ``vendor``, ``device``, ``numa_node`` and ``local_cpulist`` of
  every ``PCIDev``, from its locality (the nearest ancestor that is not an I/O object: its cpuset, and its one
  node, or its one node with CPUs, else ``-1``). GPU discovery then takes GPUs as on a live machine (NVIDIA, AMD
  and Intel functions of the display or accelerator class: never an NVSwitch, a BMC's VGA of another vendor, a
  QEMU display; Huawei Ascend NPUs, vendor 0x19e5 of the accelerator class and an NPU's device id, never the
  Kunpeng SoC's own engines). An NVIDIA GPU gets ``proc/driver/nvidia/gpus/<bus id>/information`` (``Model``,
  and ``GPU UUID`` from its ``cuda``/``nvml`` OS device); AMD GPUs with ``rsmi`` OS devices get a KFD topology
  in that order. Ascend NPUs need nothing more: without ``dev/davinci*`` nodes discovery takes every NPU of
  sysfs in PCI bus order (hwloc has no Ascend OS devices). :func:`gpu_order_note` says, per vendor, where
  numabind's order (PCI bus order) is not the one the file's OS devices give, or the file has none of them
  for several GPUs; GPU discovery makes it the GPUs' identity note (their identity uncertain).
  A function below a host bridge (``bridge_type="0-1"``, ``bridge_pci="SSSS:[BB-EE]"``) and hwloc's ``Bridge``
  objects lives where the kernel puts it, ``sys/devices/pciSSSS:BB/<bridge>/.../<bus id>`` (the bridges are
  functions too), linked from ``sys/bus/pci/devices``; its ``net``, ``openfabrics`` (with the ports its
  ``PortN...`` infos name) and block OS devices are in ``sys/class/{net,infiniband,block}``, a ``renderDN`` OS
  device is its DRM render node. numabind's own export (:mod:`numabind.cli.tree`) adds infos hwloc has no word
  for: ``NumabindPhysFn`` (an SR-IOV VF's ``physfn``), ``NumabindNetUppers`` (bonds and VLANs on the function's
  interfaces), ``NumabindNUMANode`` ``-1`` (the firmware gave none), ``NumabindDeviceMinor`` (an NVIDIA GPU's
  ``Device Minor``) and, on the root, ``NumabindGpuOrder.VENDOR`` (why the exported machine's order of those
  GPUs was uncertain: the replay's note).

Safety: the file is parsed by expat with no DTD: an internal subset (entity declarations: "billion laughs", an
external entity) is refused when the parser meets it, before any expansion, and external entities are never
loaded. The file's bytes come from the one bounded read (:func:`numabind._fs.read_bounded`, capped at
:data:`MAX_XML_BYTES`): a larger file is refused from its size before a byte is read (and while read, if it
grows), anything but a regular file before it is opened for reading. Bad XML, a truncated file, another root element, a bitmap that does not parse and an id over
:data:`numabind.cpulist.MAX_ID` are :class:`~numabind.errors.NumabindError` naming the file and the line. The
whole file is read and checked before one file of the tree is written, so there is never a half-read topology.
An XML declaration whose ``encoding=`` Python or expat cannot read (an unknown codec, UTF-7, UTF-32, one that is
no text encoding) or that does not match the bytes is that same one-line error, naming the file and the line.

Cost: reading is linear in the file's size, in time and in memory (``python -m bench``, P10, gives both per MB).
A bitmap is parsed into an int (its words joined, never a set per bit), each object's set of PUs is made once and
shared by every PU below it (a set per bitmap text once), and the tree's lists and masks once per set.

Text: every string of the file that numabind keeps (infos: the CPU model, GPU models and UUIDs, PCI strings; OS
device names) is kept as :func:`numabind._base.printable` makes it: a replayed file is someone else's text, and a
control character would reach the terminal (or a line end start a line of the tree's files of its own).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (discovery of a replayed root's GPUs)

from ._base import excerpt, getLogger, printable
from .cpulist import MAX_ID, format_cpulist
from .errors import NumabindError

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable, Mapping
    from typing import Any

__all__ = ["GPU_NOTE_FILE", "MAX_XML_BYTES", "MAX_XML_DEPTH", "MAX_XML_OBJECTS", "HwlocTopology", "gpu_order_note",
           "looks_like_hwloc_xml", "read_error", "read_topology", "tree_files", "write_tree"]

log = getLogger(__name__)

#: Largest hwloc XML file read (bytes). The corpus' largest (384 PUs with I/O) is 335 KB; a machine of 8192
#: CPUs with every cache and I/O device stays far below.
MAX_XML_BYTES = 64 << 20
#: Deepest element nesting accepted (hwloc's deepest trees, with PCI bridges, are a few dozen levels).
MAX_XML_DEPTH = 256
#: Most objects (``<object>`` elements) one file may hold.
MAX_XML_OBJECTS = 1_000_000
#: The file of the tree, beside ``sys`` and ``proc``, that says where it came from and how its GPUs are ordered.
GPU_NOTE_FILE = "numabind-hwloc-xml"

_BITMAPS = ("cpuset", "complete_cpuset", "online_cpuset", "allowed_cpuset", "nodeset", "complete_nodeset",
            "allowed_nodeset")
_IO_TYPES = frozenset({"Bridge", "PCIDev", "OSDev", "Misc"})
_CACHE_TYPES = {"0": "Unified", "1": "Data", "2": "Instruction"}
_V2_CACHES = {f"L{n}Cache": n for n in range(1, 6)} | {f"L{n}iCache": n for n in range(1, 4)}
#: hwloc subtypes of NUMA nodes that are memory tiers (never a CPU's home node when another node holds it).
_TIERS = ("MCDRAM", "HBM", "GPUMemory", "NVM", "SPM", "CXL")
_WORD_HEX = frozenset("0123456789abcdefABCDEF")
#: PCI vendor ids and base classes of GPUs, as live discovery takes them (numabind.devices).
_GPU_VENDORS = {0x10DE: "nvidia", 0x1002: "amd", 0x8086: "intel", 0x19E5: "ascend"}
_GPU_CLASSES = {"nvidia": (0x03, 0x12), "amd": (0x03, 0x12), "intel": (0x03,), "ascend": (0x12,)}
#: PCI device ids of Huawei's Ascend NPUs (vendor 0x19e5), as numabind.devices.ASCEND_NPUS lists them: the
#: vendor's other accelerator-class functions (the Kunpeng SoC's crypto and compression engines) are no NPUs.
_ASCEND_NPUS = frozenset({0xD100, 0xD500, 0xD801, 0xD802, 0xD803})
_RUNTIME_OSDEVS = {"nvidia": ("nvml", "cuda"), "amd": ("rsmi", "opencl"), "intel": ("ze", "opencl"), "ascend": ()}


def _fail(path: str, line: int | None, problem: str, fix: str = "") -> NumabindError:
    where = f"hwloc XML {printable(path)}" + (f", line {line}" if line else "")
    tail = f"; {fix}" if fix else ""
    return NumabindError(f"{where}: {problem}{tail}")


_REEXPORT = "export it again with lstopo FILE.xml (or lstopo-no-graphics --of xml FILE.xml)"


# ----------------------------------------------------------------------------- parsing


class _Obj:
    """One ``<object>``: its attributes, the line of its start tag, its parent's position, its infos."""

    __slots__ = ("type", "attrs", "line", "parent", "depth", "infos", "children")

    def __init__(self, attrs: dict[str, str], line: int, parent: int, depth: int) -> None:
        self.type = attrs.get("type", "")
        self.attrs = attrs
        self.line = line
        self.parent = parent
        self.depth = depth
        self.infos: dict[str, str] = {}
        self.children: list[int] = []


class _Matrix:
    """A distance matrix as the file gives it (v2 ``distances2`` or v1 ``distances``)."""

    __slots__ = ("attrs", "line", "indexes", "values", "latencies", "owner")

    def __init__(self, attrs: dict[str, str], line: int, owner: int) -> None:
        self.attrs = attrs
        self.line = line
        self.owner = owner              # v1: the object the relative depth counts from
        self.indexes: list[str] = []
        self.values: list[str] = []
        self.latencies: list[tuple[str, int]] = []


class _Extra:
    """A ``<memattr>`` (its values) or a ``<cpukind>`` (its infos): attributes and the line of the start tag."""

    __slots__ = ("attrs", "line", "values", "infos")

    def __init__(self, attrs: dict[str, str], line: int) -> None:
        self.attrs = attrs
        self.line = line
        self.values: list[tuple[dict[str, str], int]] = []     # memattr_value attributes, line
        self.infos: dict[str, str] = {}


#: The stack's mark of a ``<memattr>`` or ``<cpukind>`` that was kept (one under the root): only its children
#: are its values and infos (a ``memattr_value`` elsewhere belongs to none, and there may be no memattr yet).
_KEPT = -2


class _Reader:
    """The expat handlers: they build the objects and matrices and refuse what hwloc never writes."""

    def __init__(self, path: str) -> None:
        from xml.parsers import expat

        self.path = path
        self.objects: list[_Obj] = []
        self.matrices: list[_Matrix] = []
        self.memattrs: list[_Extra] = []
        self.cpukinds: list[_Extra] = []
        self.extras = 0                 # memattr values and CPU kinds, counted against MAX_XML_OBJECTS
        self.version = ""
        self.stack: list[tuple[str, int]] = []      # (element, object position or -1)
        self.text: list[str] | None = None
        self.roots = 0
        p = expat.ParserCreate()
        p.buffer_text = True
        p.StartElementHandler = self.start
        p.EndElementHandler = self.end
        p.CharacterDataHandler = self.chars
        p.StartDoctypeDeclHandler = self.doctype
        p.EntityDeclHandler = self.entity
        p.ExternalEntityRefHandler = self.external
        p.SkippedEntityHandler = self.skipped
        p.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        self.parser = p

    def _line(self) -> int:
        return int(self.parser.CurrentLineNumber)

    def doctype(self, name: str, system_id: str | None, public_id: str | None, internal: int) -> None:
        if internal:
            raise _fail(self.path, self._line(), "the DOCTYPE has an internal subset (entity or element "
                        "declarations); hwloc never writes one and numabind refuses it (entity expansion)",
                        _REEXPORT)

    def entity(self, *args: Any) -> None:
        raise _fail(self.path, self._line(), "an entity declaration; numabind expands no entities", _REEXPORT)

    def external(self, *args: Any) -> int:
        raise _fail(self.path, self._line(), "a reference to an external entity; numabind loads none", _REEXPORT)

    def skipped(self, name: str, is_parameter: int) -> None:
        raise _fail(self.path, self._line(), f"a reference to the undeclared entity {name!r}", _REEXPORT)

    def start(self, name: str, attrs: dict[str, str]) -> None:
        depth = len(self.stack)
        line = self._line()
        if depth >= MAX_XML_DEPTH:
            raise _fail(self.path, line, f"elements nested deeper than {MAX_XML_DEPTH}; no hwloc topology is")
        if depth == 0:
            if name != "topology":
                raise _fail(self.path, line, f"the root element is <{printable(name)}>, not <topology>: not an hwloc "
                            f"XML topology", "give a file written by lstopo (lstopo FILE.xml)")
            self.version = attrs.get("version", "1.0")
            if self.version.split(".", 1)[0] not in ("1", "2", "3"):
                raise _fail(self.path, line, f"XML format version {self.version!r}; numabind reads versions 1 "
                            f"(hwloc 1.x), 2 (hwloc 2.x) and 3 (hwloc 3.x)", "export it with hwloc 2 or 3")
            self.stack.append((name, -1))
            return
        parent_name, parent_obj = self.stack[-1]
        pos = -1
        if name == "object":
            if parent_obj < 0 and parent_name != "topology":
                self.stack.append((name, -1))       # an object inside something that is not an object: ignored
                return
            if parent_obj < 0:
                self.roots += 1
                if self.roots > 1:
                    raise _fail(self.path, line, "a second root object; an hwloc topology has one",
                                _REEXPORT)
            if len(self.objects) >= MAX_XML_OBJECTS:
                raise _fail(self.path, line, f"more than {MAX_XML_OBJECTS} objects; no machine has that many")
            pos = len(self.objects)
            parent_depth = self.objects[parent_obj].depth if parent_obj >= 0 else -1
            self.objects.append(_Obj(dict(attrs), line, parent_obj, parent_depth + 1))
            if parent_obj >= 0:
                self.objects[parent_obj].children.append(pos)
        elif name == "info" and parent_obj >= 0 and parent_name == "object":
            key = attrs.get("name")
            if key is not None:     # kept as numabind prints it: the file is someone else's text
                self.objects[parent_obj].infos.setdefault(key, printable(attrs.get("value", "")))
        elif name in ("distances2", "distances"):
            self.matrices.append(_Matrix(dict(attrs, element=name), line, parent_obj))
        elif name in ("indexes", "u64values") and parent_name == "distances2":
            self.text = []
        elif name == "latency" and parent_name == "distances":
            self.matrices[-1].latencies.append((attrs.get("value", ""), line))
        elif name in ("memattr", "cpukind", "memattr_value") and (
                parent_name == ("memattr" if name == "memattr_value" else "topology")) and (
                name != "memattr_value" or parent_obj == _KEPT):
            self.extras += 1
            if self.extras > MAX_XML_OBJECTS:
                raise _fail(self.path, line, f"more than {MAX_XML_OBJECTS} memory attribute values and CPU kinds; "
                            f"no machine has that many")
            if name == "memattr_value":
                self.memattrs[-1].values.append((dict(attrs), line))
            else:
                (self.memattrs if name == "memattr" else self.cpukinds).append(_Extra(dict(attrs), line))
                pos = _KEPT             # its memattr_value and info children are its own
        elif name == "info" and parent_name == "cpukind" and parent_obj == _KEPT and attrs.get("name") is not None:
            self.cpukinds[-1].infos.setdefault(attrs["name"], printable(attrs.get("value", "")))
        self.stack.append((name, pos))

    def end(self, name: str) -> None:
        self.stack.pop()
        if self.text is not None and name in ("indexes", "u64values"):
            target = self.matrices[-1].indexes if name == "indexes" else self.matrices[-1].values
            target.extend("".join(self.text).split())
            self.text = None

    def chars(self, data: str) -> None:
        if self.text is not None:
            self.text.append(data)


def looks_like_hwloc_xml(name: str, head: bytes) -> bool:
    """Whether a file is to be read as hwloc XML: its ``name`` ends in ``.xml``, or its first bytes ``head``
    start (after blanks) with ``<?xml``, ``<!DOCTYPE topology`` or ``<topology``."""
    return name.lower().endswith(".xml") or head.lstrip().startswith((b"<?xml", b"<!DOCTYPE topology", b"<topology"))


def read_error(path: str, exc: Exception) -> NumabindError:
    """The error for an hwloc XML file ``path`` that the bounded read (:func:`numabind._fs.read_bounded`, capped
    at :data:`MAX_XML_BYTES`) refused or could not read: ``exc`` is its RefusedFile or OSError."""
    why = getattr(exc, "why", None)
    if why == "size":
        return _fail(path, None, f"is more than numabind's cap of {MAX_XML_BYTES >> 20} MiB for an hwloc XML "
                     f"topology (the largest machines' are a few MiB); is this the right file?")
    if why is not None:
        return _fail(path, None, f"cannot be read: {getattr(exc, 'reason', exc)}")
    return _fail(path, None, f"cannot be read: {getattr(exc, 'strerror', None) or exc}")


def _parse(path: str, data: bytes) -> _Reader:
    from xml.parsers import expat

    reader = _Reader(path)
    try:
        reader.parser.Parse(data, True)
    except NumabindError:
        raise
    except expat.ExpatError as exc:
        problem = expat.ErrorString(exc.code) if exc.code is not None else str(exc)
        hint = ("its XML declaration names an encoding that does not match its bytes (hwloc writes UTF-8)"
                if "encoding" in problem else
                "the file ends inside an element: it is truncated" if problem in (
                    "no element found", "unclosed token") or reader.parser.ErrorByteIndex >= len(data.rstrip())
                else "it is not well-formed XML")
        raise _fail(path, exc.lineno, f"{problem} (column {exc.offset}): {hint}", _REEXPORT) from None
    except (LookupError, ValueError, UnicodeError) as exc:
        # the XML declaration's encoding= is a codec Python lacks, one that is no text encoding, a multi-byte
        # one expat cannot take from Python (UTF-7, UTF-32, Shift-JIS) or one that cannot decode the bytes
        raise _fail(path, int(reader.parser.CurrentLineNumber) or 1, f"its XML declaration names an encoding "
                    f"numabind cannot read ({type(exc).__name__}: {_shown(str(exc))}); hwloc writes UTF-8",
                    _REEXPORT) from None
    if not reader.objects:
        raise _fail(path, None, "holds no <object>: an hwloc topology has a root object", _REEXPORT)
    return reader


# ----------------------------------------------------------------------------- bitmaps


class _Bitmap:
    """An hwloc bitmap: the ids set (an int's bits: a few bytes per word, where a set of ints takes hundreds), and
    whether every id from ``tail`` on is set (``0xf...f``)."""

    __slots__ = ("bits", "tail")

    def __init__(self, bits: int, tail: int | None) -> None:
        self.bits = bits
        self.tail = tail

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(_bit_ids(self.bits))

    def within(self, universe: Iterable[int]) -> frozenset[int]:
        """The ids of ``universe`` (a set or a mapping's keys) that are set: linear in the bitmap's words and,
        for a ``0xf...f`` one, in the universe."""
        inside = universe if isinstance(universe, (frozenset, set, dict)) else frozenset(universe)
        if self.tail is None:
            return frozenset(i for i in _bit_ids(self.bits) if i in inside)
        tail = self.tail
        return frozenset(i for i in _bit_ids(self.bits) if i in inside) | frozenset(i for i in inside if i >= tail)


#: The offsets of the bits set in each byte value.
_BYTE_BITS = tuple(tuple(b for b in range(8) if v >> b & 1) for v in range(256))


def _bit_ids(bits: int) -> list[int]:
    """The positions of the bits set in ``bits``, lowest first, in one pass over its bytes."""
    out: list[int] = []
    for k, byte in enumerate(bits.to_bytes((bits.bit_length() + 7) // 8, "little")):
        if byte:
            base = 8 * k
            out.extend(base + b for b in _BYTE_BITS[byte])
    return out


_MAX_WORDS = (MAX_ID + 1) // 32
_NONE: frozenset[int] = frozenset()


def _bitmap(path: str, obj_line: int, name: str, text: str) -> _Bitmap:
    """hwloc's bitmap text: 32-bit hex words, most significant first, separated by commas; an empty word is zero;
    a leading ``0xf...f`` sets every higher bit. Linear in the text: the words become one int, never a set."""
    body = text.strip()
    tail_all = body.startswith("0xf...f")
    if tail_all:
        body = body[len("0xf...f"):].lstrip(",")
    words = body.split(",") if body else []
    if len(words) > _MAX_WORDS + 1:
        raise _fail(path, obj_line, f"{name}={_shown(text)} has {len(words)} words: ids above {MAX_ID}, "
                    f"numabind's cap", _REEXPORT)
    digits_of: list[str] = []
    last = len(words) - 1
    for k, word in enumerate(reversed(words)):       # least significant first: the first fault is the one said
        if word == "" and k < last:
            digits_of.append("00000000")
            continue
        digits = word[2:] if word[:2] in ("0x", "0X") else None
        if not digits or len(digits) > 8 or not set(digits) <= _WORD_HEX:
            raise _fail(path, obj_line, f"{name}={_shown(text)} is not an hwloc bitmap (32-bit hex words such as "
                        f"0x0000ffff, separated by commas)", _REEXPORT)
        if 32 * k + 31 > MAX_ID:
            value = int(digits, 16) >> max(0, MAX_ID + 1 - 32 * k)
            if value:
                bit = max(32 * k, MAX_ID + 1) + (value & -value).bit_length() - 1
                raise _fail(path, obj_line, f"{name}={_shown(text)} sets bit {bit}, above numabind's cap of "
                            f"{MAX_ID} for a CPU or node id", _REEXPORT)
        digits_of.append(digits.rjust(8, "0"))
    bits = int("".join(reversed(digits_of)), 16) if digits_of else 0
    return _Bitmap(bits, 32 * len(words) if tail_all else None)


def _shown(text: str) -> str:
    """A file's value in an error: :func:`numabind._base.excerpt` (its first characters, escaped as typed)."""
    return excerpt(text, escape=True)


# ----------------------------------------------------------------------------- the model


class HwlocTopology:
    """What numabind takes from an hwloc XML file: the facts a kernel's sysfs and procfs would hold."""

    def __init__(self, path: str, version: str) -> None:
        self.path = path
        self.version = version
        self.pus: frozenset[int] = frozenset()
        self.possible_cpus: frozenset[int] = frozenset()
        self.core_of: dict[int, tuple[int | None, frozenset[int]]] = {}        # PU -> (core id, its threads)
        self.package_of: dict[int, tuple[int | None, frozenset[int]]] = {}     # PU -> (package id, its PUs)
        self.caches: list[tuple[int, str, frozenset[int], int | None]] = []    # (level, type, PUs, size)
        self.nodes: dict[int, tuple[frozenset[int], int, str | None]] = {}     # id -> (home PUs, bytes, subtype)
        self.node_localities: dict[int, frozenset[int]] = {}                   # id -> hwloc cpuset (locality)
        self.possible_nodes: frozenset[int] = frozenset()
        self.distances: dict[int, dict[int, int]] = {}
        self.allowed_cpus: frozenset[int] = frozenset()
        self.allowed_nodes: frozenset[int] = frozenset()
        #: bus id -> (class 16 bits, vendor, device, numa node or -1, local PUs, OS devices [(name, infos)], infos)
        self.pci: dict[str, tuple[int, int, int, int, frozenset[int], list[tuple[str, dict[str, str]]],
                                  dict[str, str]]] = {}
        #: bus id -> its place under ``sys/devices`` (host bridge, bridges, itself), None where no host bridge says
        self.pci_paths: dict[str, tuple[str, ...] | None] = {}
        #: bus id -> its OS devices the kernel shows in a class: [(name, "net"/"infiniband"/"block", infos)]
        self.osdevs: dict[str, list[tuple[str, str, dict[str, str]]]] = {}
        self.cpu_info: dict[str, str] = {}
        self.gpu_note = ""
        self.gpu_notes: dict[str, str] = {}        # vendor -> its part of gpu_note
        #: vendor -> the note numabind's own export carries (``NumabindGpuOrder.VENDOR`` of the root): why the
        #: exported machine's order of those GPUs was uncertain, said again on the replay
        self.carried_notes: dict[str, str] = {}
        #: node -> ({figure: value}, initiator nodes): what the kernel shows in ``nodeN/access0/initiators``
        self.access: dict[int, tuple[dict[str, int], frozenset[int]]] = {}
        #: an Intel hybrid CPU's PMU lists (``cpu_core``, ``cpu_atom``), or None
        self.hybrid_pmus: tuple[frozenset[int], frozenset[int]] | None = None
        #: PU -> ``cpu_capacity`` (the kinds of another hybrid CPU, or the XML's ``LinuxCapacity``)
        self.capacities: dict[int, int] = {}


def _int_attr(path: str, obj: _Obj, name: str, *, required: bool = False, cap: int | None = MAX_ID) -> int | None:
    raw = obj.attrs.get(name)
    if raw is None:
        if required:
            raise _fail(path, obj.line, f"a {obj.type} object without {name}", _REEXPORT)
        return None
    body = raw.strip()
    if not body.isascii() or not body.isdigit() or len(body) > 20:
        raise _fail(path, obj.line, f"{obj.type} {name}={_shown(raw)} is not a non-negative integer", _REEXPORT)
    value = int(body)
    if cap is not None and value > cap:
        raise _fail(path, obj.line, f"{obj.type} {name}={value} is above numabind's cap of {cap} for a CPU or "
                    f"node id", _REEXPORT)
    return value


def read_topology(path: str, data: bytes) -> HwlocTopology:
    """The machine the hwloc XML file ``path`` describes, from its bytes ``data``; NumabindError (file and line)
    for anything it cannot read."""
    r = _parse(path, data)
    objs = r.objects
    topo = HwlocTopology(path, r.version)
    root = objs[0]

    def cpuset(obj: _Obj, name: str = "cpuset") -> _Bitmap | None:
        text = obj.attrs.get(name)
        return None if text is None else _bitmap(path, obj.line, name, text)

    for obj in objs:                # every bitmap is checked, those numabind does not use too
        for name in _BITMAPS:
            if name in obj.attrs:
                cpuset(obj, name)

    # PUs
    pus: dict[int, int] = {}                # os index -> object position
    for pos, obj in enumerate(objs):
        if obj.type == "PU":
            cpu = _int_attr(path, obj, "os_index", required=True)
            assert cpu is not None
            if cpu in pus:
                raise _fail(path, obj.line, f"a second PU with os_index {cpu} (the first is on line "
                            f"{objs[pus[cpu]].line})", _REEXPORT)
            pus[cpu] = pos
    if not pus:
        raise _fail(path, root.line, "no PU object: numabind needs the machine's CPUs", _REEXPORT)
    online = frozenset(pus)
    topo.pus = online
    complete = cpuset(root, "complete_cpuset")
    topo.possible_cpus = online | (complete.ids if complete is not None else frozenset())
    pu_at = {pos: cpu for cpu, pos in pus.items()}

    # Every set below is made once (per object, or per bitmap text) and shared by all that hold it: a set per
    # PU of its package's or its cache's PUs made reading quadratic in the file's size, in time and in memory.
    of_text: dict[str, frozenset[int]] = {}         # cpuset text -> its PUs
    held: dict[int, frozenset[int]] = {}            # object position -> below(it)
    under: dict[int, frozenset[int]] = {}           # object position -> the PU objects in its subtree

    def pus_under(pos: int) -> frozenset[int]:
        """The PU objects in the subtree of ``pos``: one post-order pass, a child's set reused where it is the
        only one."""
        if pos in under:
            return under[pos]
        order: list[int] = []
        todo = [pos]
        while todo:
            p = todo.pop()
            if p not in under:
                order.append(p)
                todo.extend(objs[p].children)
        for p in reversed(order):                   # descendants before their ancestors
            parts = [under[c] for c in objs[p].children if under[c]]
            if p in pu_at:
                parts.append(frozenset({pu_at[p]}))
            under[p] = (_NONE if not parts else parts[0] if len(parts) == 1 else frozenset().union(*parts))
        return under[pos]

    def below(pos: int) -> frozenset[int]:
        """The PUs an object holds: its cpuset within the PUs (the PU objects below it where it has none)."""
        found = held.get(pos)
        if found is None:
            obj = objs[pos]
            text = obj.attrs.get("cpuset")
            if text is None:
                found = pus_under(pos)
            else:
                found = of_text.get(text)
                if found is None:
                    found = of_text[text] = _bitmap(path, obj.line, "cpuset", text).within(online)
            held[pos] = found
        return found

    # cores, packages, caches, by each PU's ancestors: first what each PU is under (every attribute checked in
    # the order of the PUs), then one set per object, its cpuset and the PUs below it that the cpuset misses
    ids: dict[int, int | None] = {}                                 # core/package position -> os_index
    cache_of: dict[int, tuple[int, str, int | None]] = {}            # cache position -> (level, type, size)
    missed: dict[int, list[int]] = {}                               # position -> PUs below it, not in its cpuset
    chains: list[tuple[int, int, int, list[int]]] = []              # (PU, core or -1, package or -1, caches)
    for cpu, pos in pus.items():
        core_pos = package_pos = -1
        caches: list[int] = []
        up = objs[pos].parent
        while up >= 0:
            o = objs[up]
            if o.type == "Core" and core_pos < 0:
                core_pos = up
                ids[up] = _int_attr(path, o, "os_index", cap=None)
            elif o.type in ("Package", "Socket") and package_pos < 0:
                package_pos = up
                ids[up] = _int_attr(path, o, "os_index", cap=None)
            elif o.type in _V2_CACHES or o.type == "Cache":
                if up not in cache_of:
                    level = _int_attr(path, o, "depth", cap=None) if "depth" in o.attrs else _V2_CACHES.get(o.type)
                    kind = _CACHE_TYPES.get(o.attrs.get("cache_type", "0"))
                    if o.type.endswith("iCache"):
                        kind = "Instruction"
                    if level is None or kind is None:
                        raise _fail(path, o.line, f"a {o.type} without a level (depth) or with cache_type="
                                    f"{_shown(o.attrs.get('cache_type', ''))}", _REEXPORT)
                    cache_of[up] = (level, kind, _int_attr(path, o, "cache_size", cap=None))
                caches.append(up)
            else:
                up = o.parent
                continue
            if cpu not in below(up):
                missed.setdefault(up, []).append(cpu)
            up = o.parent
        chains.append((cpu, core_pos, package_pos, caches))
    spans: dict[int, frozenset[int]] = {}

    def span(up: int) -> frozenset[int]:
        found = spans.get(up)
        if found is None:
            more = missed.get(up)
            found = spans[up] = below(up) | frozenset(more) if more else below(up)
        return found

    seen_caches: dict[tuple[int, str, frozenset[int]], int | None] = {}
    made: dict[int, tuple[int | None, frozenset[int]]] = {}           # one (id, PUs) per core and package
    for cpu, core_pos, package_pos, caches in chains:
        if core_pos >= 0:
            core = made.get(core_pos)
            if core is None:
                core = made[core_pos] = (ids[core_pos], span(core_pos))
            topo.core_of[cpu] = core
        else:
            topo.core_of[cpu] = (None, frozenset({cpu}))
        if package_pos >= 0:
            package = made.get(package_pos)
            if package is None:
                package = made[package_pos] = (ids[package_pos], span(package_pos))
            topo.package_of[cpu] = package
        for up in caches:
            level, kind, size = cache_of[up]
            seen_caches.setdefault((level, kind, span(up)), size)
    topo.caches = [(lv, kind, cpus, size) for (lv, kind, cpus), size in seen_caches.items()]

    # NUMA nodes
    node_objs: dict[int, int] = {}
    for pos, obj in enumerate(objs):
        if obj.type == "NUMANode":
            nid = _int_attr(path, obj, "os_index", required=True)
            assert nid is not None
            if nid in node_objs:
                raise _fail(path, obj.line, f"a second NUMANode with os_index {nid} (the first is on line "
                            f"{objs[node_objs[nid]].line})", _REEXPORT)
            node_objs[nid] = pos
    homes: dict[int, int] = {}
    if node_objs:
        locality = {nid: below(pos) for nid, pos in node_objs.items()}
        # a CPU's home: the best node holding it (not a tier, then the most local, then the lowest id): the
        # nodes best first, each giving the CPUs no better one took, until every CPU has one
        best_first = sorted(locality, key=lambda n: (_is_tier(objs[node_objs[n]]), len(locality[n]), n))
        done: set[int] = set()                  # localities (by identity) already given out
        for nid in best_first:
            cpus = locality[nid]
            if id(cpus) in done:
                continue                        # a node after another of the same set: none left for it
            done.add(id(cpus))
            for cpu in cpus:
                homes.setdefault(cpu, nid)
            if len(homes) == len(online):
                break
        mine_of: dict[int, list[int]] = {}
        for cpu, nid in homes.items():
            mine_of.setdefault(nid, []).append(cpu)
        for nid, pos in sorted(node_objs.items()):
            obj = objs[pos]
            memory = _int_attr(path, obj, "local_memory", cap=None) or 0
            mine = frozenset(mine_of.get(nid, ()))
            topo.nodes[nid] = (mine, memory, obj.attrs.get("subtype") or obj.infos.get("Type"))
            topo.node_localities[nid] = locality[nid]
        unhomed = online - frozenset(homes)
        if unhomed:
            log.warning("hwloc XML %s: no NUMA node holds PUs %s; they are in no node", path,
                        format_cpulist(unhomed))
    else:
        memory = _int_attr(path, root, "local_memory", cap=None) or 0
        topo.nodes[0] = (online, memory, None)
        topo.node_localities[0] = online
        log.debug("hwloc XML %s has no NUMANode: one node 0 with every PU and %d bytes", path, memory)
    node_ids = frozenset(topo.nodes)
    complete_nodes = cpuset(root, "complete_nodeset")
    topo.possible_nodes = node_ids | (complete_nodes.ids if complete_nodes is not None and node_objs
                                      else frozenset())

    # what the process may use
    allowed = cpuset(root, "allowed_cpuset")
    topo.allowed_cpus = online if allowed is None else allowed.within(online)
    allowed_n = cpuset(root, "allowed_nodeset") if node_objs else None
    topo.allowed_nodes = node_ids if allowed_n is None else allowed_n.within(node_ids)

    topo.distances = _distances(path, r, objs, node_objs, node_ids)
    if r.memattrs:
        topo.access = _memory_access(path, r, objs, topo, below)
    if r.cpukinds:
        _cpu_kinds(path, r, topo, cpuset)

    # the CPU's name, as proc/cpuinfo has it
    for pos in sorted({p for c, p in pus.items()}):
        up = objs[pos].parent
        while up >= 0 and objs[up].type not in ("Package", "Socket"):
            up = objs[up].parent
        infos = dict(root.infos)
        if up >= 0:
            infos.update(objs[up].infos)
        topo.cpu_info = {k: infos[k] for k in ("CPUVendor", "CPUFamilyNumber", "CPUModel") if infos.get(k)}
        break

    topo.carried_notes = {k.partition(".")[2]: v for k, v in root.infos.items() if k.startswith("NumabindGpuOrder.")}
    _read_pci(path, topo, objs, node_objs, cpuset)
    return topo


def _is_tier(obj: _Obj) -> bool:
    subtype = obj.attrs.get("subtype") or obj.infos.get("Type") or ""
    return subtype.startswith(_TIERS)


def _distances(path: str, r: _Reader, objs: list[_Obj], node_objs: Mapping[int, int],
               node_ids: frozenset[int]) -> dict[int, dict[int, int]]:
    """The NUMA latency matrix (see the module doc), as {node: {node: distance}}; {} when the file has none."""
    gp_to_node = {objs[pos].attrs.get("gp_index"): nid for nid, pos in node_objs.items()}
    found: list[tuple[str | None, int, list[int], list[int]]] = []   # (name, line, node ids, values)
    for m in r.matrices:
        a = m.attrs
        if a["element"] == "distances2":
            if a.get("type") != "NUMANode":
                continue
            kind = a.get("kind", "")
            if kind.isascii() and kind.isdigit() and len(kind) < 6 and int(kind) & 8:
                continue                                 # HWLOC_DISTANCES_KIND_MEANS_BANDWIDTH
            n = _count(path, m.line, a.get("nbobjs"))
            if len(m.indexes) != n or len(m.values) != n * n:
                raise _fail(path, m.line, f"distances2 of {n} objects lists {len(m.indexes)} indexes and "
                            f"{len(m.values)} values (expected {n} and {n * n})", _REEXPORT)
            ids: list[int] = []
            for text in m.indexes:
                if a.get("indexing", "os") == "gp":
                    nid = gp_to_node.get(text)
                else:
                    nid = int(text) if text.isascii() and text.isdigit() and len(text) <= 6 else None
                if nid is None or nid not in node_ids:
                    raise _fail(path, m.line, f"distances2 names NUMA node {_shown(text)}, which the file does "
                                f"not hold", _REEXPORT)
                ids.append(nid)
            values = [_distance(path, m.line, v) for v in m.values]
            found.append((a.get("name"), m.line, ids, values))
        else:
            # v1: hwloc 2 takes a matrix of as many objects as there are NUMA nodes for the nodes, in their
            # logical (document) order, whatever its relative_depth says (hwloc 2's own v1 export writes the
            # node matrix at the depth of the level below the nodes).
            n = _count(path, m.line, a.get("nbobjs"))
            if n != len(node_objs) or not n:
                continue
            if len(m.latencies) != n * n:
                raise _fail(path, m.line, f"distances of {n} objects lists {len(m.latencies)} latencies "
                            f"(expected {n * n})", _REEXPORT)
            at = sorted(node_objs.values())
            base = _float(path, m.line, a.get("latency_base", "1"))
            ids = [int(objs[p].attrs["os_index"]) for p in at]
            values = [_distance(path, line, str(round(_float(path, line, v) * base))) for v, line in m.latencies]
            found.append((None, m.line, ids, values))
    if not found:
        return {}
    slit = [f for f in found if all(f[3][i * len(f[2]) + i] == 10 for i in range(len(f[2])))]
    chosen = next((f for f in found if f[0] == "NUMALatency"), None) or (slit or found)[0]
    _name, line, ids, values = chosen
    n = len(ids)
    if set(ids) != node_ids or len(set(ids)) != n:
        log.warning("hwloc XML %s, line %d: the latency matrix covers nodes %s, not every node (%s); the nodes "
                    "get no distances", path, line, format_cpulist(ids), format_cpulist(node_ids))
        return {}
    return {a: {b: values[i * n + j] for j, b in enumerate(ids)} for i, a in enumerate(ids)}


#: hwloc's memory attributes that the kernel's HMAT figures are (hwloc's Linux backend reads them from there):
#: name -> (the figures it gives, whether higher is better). A ``Read``/``Write`` one overrides the plain one.
_MEMATTRS = {"Bandwidth": (("read_bandwidth", "write_bandwidth"), True),
             "ReadBandwidth": (("read_bandwidth",), True), "WriteBandwidth": (("write_bandwidth",), True),
             "Latency": (("read_latency", "write_latency"), False),
             "ReadLatency": (("read_latency",), False), "WriteLatency": (("write_latency",), False)}
#: The order in which the kernel narrows a target's best initiators (drivers/acpi/numa/hmat.c).
_FIGURES = ("write_latency", "read_latency", "write_bandwidth", "read_bandwidth")


def _memory_access(path: str, r: _Reader, objs: list[_Obj], topo: HwlocTopology,
                   below: Any) -> dict[int, tuple[dict[str, int], frozenset[int]]]:
    """The HMAT view of the XML's memory attributes: per target node, its best figures and the initiator
    nodes that reach them (see the module doc)."""
    gp_of = {o.attrs["gp_index"]: pos for pos, o in enumerate(objs) if "gp_index" in o.attrs}
    home = {cpu: nid for nid, (cpus, _m, _s) in topo.nodes.items() for cpu in cpus}
    # initiator (its cpuset text, or its object) -> the nodes whose CPUs it holds some of: once each
    nodes_of: dict[str | int, list[int]] = {}
    # figure -> target -> initiator node -> value, from the plain attribute and from the Read/Write one
    found: dict[tuple[str, bool], dict[int, dict[int, int]]] = {}
    for attr in r.memattrs:
        kind = _MEMATTRS.get(attr.attrs.get("name", ""))
        if kind is None:
            continue                    # Capacity, Locality and user attributes: no kernel file
        figures, higher = kind
        specific = len(figures) == 1
        for values, line in attr.values:
            if values.get("target_obj_type") != "NUMANode":
                continue
            target_pos = gp_of.get(values.get("target_obj_gp_index", ""))
            if target_pos is None or objs[target_pos].type != "NUMANode":
                log.warning("hwloc XML %s, line %d: a %s value for target gp_index %s, which is no NUMA node of "
                            "the file; ignored", path, line, attr.attrs["name"],
                            _shown(values.get("target_obj_gp_index", "")))
                continue
            target = int(objs[target_pos].attrs["os_index"])
            text = values.get("value", "")
            if not text.isascii() or not text.isdigit() or len(text) > 19:
                raise _fail(path, line, f"{attr.attrs['name']} value={_shown(text)} is not a non-negative "
                            f"integer", _REEXPORT)
            value = int(text)
            key: str | int
            if "initiator_cpuset" in values:
                key = values["initiator_cpuset"]
                initiators = nodes_of.get(key)
                if initiators is None:
                    cpus = _bitmap(path, line, "initiator_cpuset", key).within(topo.pus)
            else:
                ini_pos = gp_of.get(values.get("initiator_obj_gp_index", ""))
                if ini_pos is None:
                    log.debug("hwloc XML %s, line %d: a %s value without an initiator the file holds; ignored",
                              path, line, attr.attrs["name"])
                    continue
                key = ini_pos
                initiators = nodes_of.get(key)
                if initiators is None:
                    cpus = below(ini_pos)
            if initiators is None:
                initiators = nodes_of[key] = sorted({home[c] for c in cpus if c in home})
            if not value or not initiators:
                continue                # the kernel shows no 0, and only nodes as initiators
            for figure in figures:
                per = found.setdefault((figure, specific), {}).setdefault(target, {})
                for n in initiators:
                    old = per.get(n)
                    per[n] = value if old is None else (max if higher else min)(old, value)
    out: dict[int, tuple[dict[str, int], frozenset[int]]] = {}
    for target in sorted({t for per in found.values() for t in per}):
        by_figure = {f: found.get((f, True), {}).get(target) or found.get((f, False), {}).get(target) or {}
                     for f in _FIGURES}
        candidates = set().union(*by_figure.values())
        best_of: dict[str, int] = {}
        for figure in _FIGURES:          # as the kernel: each figure narrows the initiators to its best
            values_of = {n: v for n, v in by_figure[figure].items() if n in candidates}
            if not values_of:
                continue
            best = (max if figure.endswith("bandwidth") else min)(values_of.values())
            best_of[figure] = best
            candidates = {n for n, v in values_of.items() if v == best}
        if best_of:
            out[target] = (best_of, frozenset(candidates))
    return out


#: hwloc's ``CoreType`` of the kinds the kernel lists in ``sys/devices/cpu_core`` and ``cpu_atom``.
_INTEL_TYPES = {"IntelCore": 0, "IntelAtom": 1}
#: The kernel's ``cpu_capacity`` of the most capable CPUs.
_CAPACITY_SCALE = 1024


def _cpu_kinds(path: str, r: _Reader, topo: HwlocTopology, cpuset: Any) -> None:
    """What the kernel shows of the XML's CPU kinds (see the module doc)."""
    kinds: list[tuple[frozenset[int], _Extra]] = []
    for kind in r.cpukinds:
        text = kind.attrs.get("cpuset")
        if text is None:
            raise _fail(path, kind.line, "a cpukind without a cpuset", _REEXPORT)
        cpus = _bitmap(path, kind.line, "cpuset", text).within(topo.pus)
        if cpus:
            kinds.append((cpus, kind))
    if not kinds:
        return
    types = {k.infos.get("CoreType") for _c, k in kinds}
    if types <= set(_INTEL_TYPES) and len(types) == 2:
        p_cpus = frozenset().union(*(c for c, k in kinds if k.infos["CoreType"] == "IntelCore"))
        topo.hybrid_pmus = (p_cpus, frozenset().union(*(c for c, k in kinds)) - p_cpus)
        return
    capacities = [_kind_number(path, k, "LinuxCapacity", k.infos.get("LinuxCapacity")) for _c, k in kinds]
    if all(c is not None for c in capacities):
        ranks: list[int] = [c for c in capacities if c is not None]
    elif len(kinds) < 2:
        return                          # one kind, not hybrid: the kernel says nothing of it
    else:
        forced = [_kind_number(path, k, "forced_efficiency", k.attrs.get("forced_efficiency")) for _c, k in kinds]
        order: list[int] = ([f for f in forced if f is not None] if all(f is not None for f in forced)
                            else list(range(len(kinds))))     # hwloc writes the kinds least efficient first
        levels = {o: k for k, o in enumerate(sorted(set(order)))}
        ranks = [_CAPACITY_SCALE * (levels[o] + 1) // len(levels) for o in order]
    for (cpus, _k), capacity in zip(kinds, ranks):
        for cpu in cpus:
            topo.capacities.setdefault(cpu, capacity)


def _kind_number(path: str, kind: _Extra, name: str, text: str | None) -> int | None:
    if text is None:
        return None
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        raise _fail(path, kind.line, f"cpukind {name}={_shown(text)} is not a non-negative integer", _REEXPORT)
    return int(text)


def _count(path: str, line: int, text: str | None) -> int:
    if text is None or not text.isascii() or not text.isdigit() or len(text) > 6:
        raise _fail(path, line, f"a distance matrix size {_shown(text or '')} that is not a count", _REEXPORT)
    return int(text)


def _float(path: str, line: int, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1e12 or len(text) > 40:
        raise _fail(path, line, f"latency {_shown(text)} is not a non-negative number", _REEXPORT)
    return value


def _distance(path: str, line: int, text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        raise _fail(path, line, f"distance {_shown(text)} is not an integer of at most 9 digits (the kernel's "
                    f"SLIT distances are below 256)", _REEXPORT)
    return int(text)


def _pci_type(text: str) -> tuple[int, int, int] | None:
    """(class, vendor, device) of ``pci_type="0302 [10de:1db8] [10de:131d] a1"``; None when malformed."""
    parts = text.split()
    if len(parts) < 2 or len(parts[0]) != 4 or not set(parts[0]) <= _WORD_HEX:
        return None
    ids = parts[1]
    if len(ids) != 11 or ids[0] != "[" or ids[5] != ":" or ids[10] != "]" or not (
            set(ids[1:5]) | set(ids[6:10])) <= _WORD_HEX:
        return None
    return int(parts[0], 16), int(ids[1:5], 16), int(ids[6:10], 16)


def _bus_id(text: str) -> str | None:
    t = text.strip().lower()
    parts = t.replace(".", ":").split(":")
    if len(parts) != 4 or not all(p and set(p) <= _WORD_HEX for p in parts):
        return None
    dom, bus, dev, fn = parts
    if len(dom) > 8 or len(bus) != 2 or len(dev) != 2 or len(fn) != 1 or int(fn, 16) > 7:
        return None
    return f"{int(dom, 16):04x}:{bus}:{dev}.{fn}"


def _read_pci(path: str, topo: HwlocTopology, objs: list[_Obj], node_objs: Mapping[int, int],
              cpuset: Any) -> None:
    cpu_nodes = {nid for nid, (cpus, _m, _s) in topo.nodes.items() if cpus}
    all_nodes = frozenset(topo.nodes)
    places: dict[int, tuple[frozenset[int], int]] = {}     # locality position -> (local PUs, node)
    for obj in objs:
        if obj.type == "Bridge" and "pci_busid" in obj.attrs:
            bus = _bus_id(obj.attrs["pci_busid"])
            kind = _pci_type(obj.attrs.get("pci_type", ""))
            if bus is None or kind is None:
                continue            # a bridge numabind cannot name is a directory of the tree, nothing more
        elif obj.type != "PCIDev":
            continue
        else:
            bus = _bus_id(obj.attrs.get("pci_busid", ""))
            kind = _pci_type(obj.attrs.get("pci_type", ""))
        if bus is None or kind is None:
            raise _fail(path, obj.line, f"a PCIDev with pci_busid={_shown(obj.attrs.get('pci_busid', ''))} "
                        f"pci_type={_shown(obj.attrs.get('pci_type', ''))}, not a bus id and class [vendor:device]",
                        _REEXPORT)
        up = obj.parent
        while up >= 0 and objs[up].type in _IO_TYPES:
            up = objs[up].parent
        place = places.get(up)
        if place is None:                   # once per locality: the devices behind it share its set
            if up < 0:
                local, nodes = topo.pus, all_nodes
            else:
                holder = objs[up]
                bm = cpuset(holder)
                local = bm.within(topo.pus) if bm is not None else topo.pus
                ns = cpuset(holder, "nodeset")
                nodes = ns.within(topo.nodes) if ns is not None and node_objs else all_nodes
                if holder.type == "NUMANode":                  # v1: I/O below a node
                    nodes = frozenset({int(holder.attrs["os_index"])})
            with_cpus = nodes & cpu_nodes
            place = places[up] = (local, min(nodes) if len(nodes) == 1 else
                                  min(with_cpus) if len(with_cpus) == 1 else -1)
        local, node = place
        osdevs = [(printable(objs[c].attrs.get("name", "")), objs[c].infos) for c in obj.children
                  if objs[c].type == "OSDev"]
        if bus in topo.pci:
            log.warning("hwloc XML %s, line %d: a second PCIDev %s (class %04x); a bus id names one device, "
                        "the first is kept", path, obj.line, bus, kind[0])
            continue
        if obj.infos.get("NumabindNUMANode") == "-1":
            node = -1                   # numabind's export: the firmware gave this function no node
        topo.pci[bus] = (kind[0], kind[1], kind[2], node, local, osdevs, obj.infos)
        topo.pci_paths[bus] = _sysfs_path(objs, obj, bus)
        kinds = [(printable(objs[c].attrs.get("name", "")), _osdev_kind(topo.version, objs[c].attrs),
                  objs[c].infos) for c in obj.children if objs[c].type == "OSDev"]
        topo.osdevs[bus] = [(name, kind_of, infos) for name, kind_of, infos in kinds if kind_of is not None]
    topo.gpu_notes = _gpu_notes(path, topo)
    topo.gpu_note = "; ".join(topo.gpu_notes.values())


def _host_bridge(obj: _Obj) -> str | None:
    """``pciSSSS:BB`` of a host bridge (hwloc's ``bridge_type="0-1"``, ``bridge_pci="SSSS:[BB-EE]"``), else None."""
    if obj.type != "Bridge" or "pci_busid" in obj.attrs or not obj.attrs.get("bridge_type", "").startswith("0"):
        return None
    text = obj.attrs.get("bridge_pci", "")
    dom, sep, rest = text.partition(":[")
    bus = rest.partition("-")[0]
    if not sep or not 1 <= len(dom) <= 4 or len(bus) != 2 or not set(dom + bus) <= _WORD_HEX:
        return None
    return f"pci{int(dom, 16):04x}:{bus.lower()}"


def _sysfs_path(objs: list[_Obj], obj: _Obj, bus: str) -> tuple[str, ...] | None:
    """Where the kernel puts PCI function ``bus`` under ``sys/devices``: its host bridge, the bridges down to it
    and itself (hwloc's Bridge objects above it); None when no host bridge holds it (hwloc's bridges filtered out,
    or a file that does not say): the function is then a directory of ``sys/bus/pci/devices`` alone."""
    chain = [bus]
    up = obj.parent
    while up >= 0 and objs[up].type in _IO_TYPES:
        above = objs[up]
        host = _host_bridge(above)
        if host is not None:
            return (host, *reversed(chain))
        busid = _bus_id(above.attrs.get("pci_busid", "")) if above.type == "Bridge" else None
        if busid is None:
            return None
        chain.append(busid)
        up = above.parent
    return None


#: OS device kinds numabind writes as the kernel shows them, by hwloc's ``osdev_type``: hwloc 2's numbers
#: (0 block, 2 network, 3 OpenFabrics), hwloc 3's bits (1 storage, 16 network, 32 OpenFabrics).
_OSDEV_KINDS_V2 = {"0": "block", "2": "net", "3": "infiniband"}
_OSDEV_KINDS_V3 = ((32, "infiniband"), (16, "net"), (1, "block"))


def _osdev_kind(version: str, attrs: dict[str, str]) -> str | None:
    text = attrs.get("osdev_type", "")
    if not version.startswith("3"):
        return _OSDEV_KINDS_V2.get(text)
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        return None
    bits = int(text)
    return next((kind for bit, kind in _OSDEV_KINDS_V3 if bits & bit), None)


def _safe_name(name: str) -> bool:
    """Whether an OS device name from the file can be a sysfs file name (one path component, printable)."""
    return (0 < len(name) <= 64 and name not in (".", "..") and name == printable(name)
            and not any(c in name for c in "/ \t\n\\"))


def _is_gpu(cls: int, vendor_id: int, device: int) -> str | None:
    """The vendor name of a PCI function live discovery takes as a GPU (or an Ascend NPU), else None."""
    vendor = _GPU_VENDORS.get(vendor_id)
    if vendor is None or cls >> 8 not in _GPU_CLASSES[vendor]:
        return None
    return None if vendor == "ascend" and device not in _ASCEND_NPUS else vendor


def _gpus(topo: HwlocTopology, vendor: str) -> list[str]:
    return sorted(bus for bus, (cls, ven, dev, _n, _l, _o, _i) in topo.pci.items() if _is_gpu(cls, ven, dev) == vendor)


def _runtime_index(name: str, prefixes: tuple[str, ...]) -> tuple[int, int] | None:
    """(rank of the prefix, index) of an OS device ``cuda3``/``nvml3``/``rsmi0``/``opencl0d2``/``ze1``."""
    for rank, prefix in enumerate(prefixes):
        if name.startswith(prefix):
            tail = name[len(prefix):]
            if prefix == "opencl":
                tail = tail.partition("d")[2]
            if tail.isascii() and tail.isdigit() and len(tail) <= 6:
                return rank, int(tail)
    return None


def _gpu_notes(path: str, topo: HwlocTopology) -> dict[str, str]:
    """How the GPUs of each vendor are ordered, said for their identity note ({vendor: note}, none where the
    file's OS devices number them as numabind does)."""
    name = printable(os.path.basename(path))
    out: dict[str, str] = {}
    for vendor in ("nvidia", "amd", "intel", "ascend"):
        gpus = _gpus(topo, vendor)
        if len(gpus) < 2:
            continue                    # one device (or none) has one order
        if topo.carried_notes.get(vendor):
            out[vendor] = topo.carried_notes[vendor]
            continue
        notes: list[str] = []
        prefixes = _RUNTIME_OSDEVS[vendor]
        if not prefixes:
            continue                    # hwloc has no Ascend OS devices: NPUs are paired as on a live machine
        indexed: dict[str, dict[str, int]] = {}       # OS device kind -> {bus id: its index}
        for bus in gpus:
            for osdev, _infos in topo.pci[bus][5]:
                hit = _runtime_index(osdev, prefixes)
                if hit is not None:
                    indexed.setdefault(prefixes[hit[0]], {}).setdefault(bus, hit[1])
        if not indexed:
            out[vendor] = (f"{name} carries no {'/'.join(prefixes)} OS devices for its {vendor} GPUs (exported "
                           f"without them, or with I/O filtered): numabind numbers them in PCI bus order")
            continue
        rsmi = indexed.get("rsmi", {})
        # AMD GPUs with an rsmi OS device each get the KFD topology in that order: it is numabind's order then
        ours, said = ((sorted(gpus, key=lambda b: rsmi[b]), "rsmi order") if vendor == "amd" and len(rsmi) == len(gpus)
                      else (gpus, "PCI bus order"))
        for kind, found in indexed.items():
            by_runtime = sorted(found, key=lambda b: found[b])
            by_ours = [b for b in ours if b in found]
            if by_runtime != by_ours:
                notes.append(f"{name}'s {kind} OS devices number its {vendor} GPUs {', '.join(by_runtime)}; "
                             f"numabind numbers them in {said} ({', '.join(by_ours)})")
        covered = max(len(found) for found in indexed.values())
        if covered < len(gpus):
            notes.append(f"{name} has OS devices for {covered} of its {len(gpus)} {vendor} GPUs; numabind "
                         f"numbers all {len(gpus)}")
        if notes:
            out[vendor] = "; ".join(notes)
    return out


# ----------------------------------------------------------------------------- the tree


def _mask(ids: Iterable[int]) -> str:
    """The kernel's hex mask text: 32-bit words, most significant first, comma-separated. The zero words below the
    lowest id are one repeated string: a core's mask is as wide as its highest CPU id, and made word by word
    every core of a machine of thousands of CPUs cost more than the rest of the tree."""
    values = sorted(ids)
    if not values:
        return "00000000"
    low = values[0] // 32
    words = [0] * (values[-1] // 32 - low + 1)
    for i in values:
        words[i // 32 - low] |= 1 << (i % 32)
    return ",".join(f"{w:08x}" for w in reversed(words)) + ",00000000" * low


def _size_text(size: int | None) -> str | None:
    if size is None:
        return None
    return f"{size >> 10}K" if size and size % 1024 == 0 else str(size)


def write_tree(topo: HwlocTopology, dest: str) -> None:
    """Write the sysfs/procfs files a kernel would show of ``topo`` under the directory ``dest``."""
    files, links = tree_files(topo)
    made: set[str] = set()
    for rel in (*files, *links):
        parent = os.path.dirname(rel)
        if parent not in made:
            os.makedirs(os.path.join(dest, parent), mode=0o700, exist_ok=True)
            made.add(parent)
    for rel, text in files.items():
        with open(os.path.join(dest, rel), "x", encoding="utf-8") as out:
            out.write(text if text.endswith("\n") else text + "\n")
    for rel, target in links.items():
        os.symlink(target, os.path.join(dest, rel))


def tree_files(topo: HwlocTopology) -> tuple[dict[str, str], dict[str, str]]:
    """What :func:`write_tree` writes: ({path: text}, {path: symlink target}), paths relative to the root."""
    files: dict[str, str] = {}
    cpu_dir = "sys/devices/system/cpu"
    node_dir = "sys/devices/system/node"
    files[f"{cpu_dir}/online"] = format_cpulist(topo.pus)
    files[f"{cpu_dir}/possible"] = format_cpulist(topo.possible_cpus)
    order = {"Data": 0, "Instruction": 1, "Unified": 2}
    per_cpu: dict[int, list[tuple[int, str, frozenset[int], int | None]]] = {}
    for cache in sorted(topo.caches, key=lambda c: (c[0], order[c[1]])):
        for cpu in cache[2]:
            per_cpu.setdefault(cpu, []).append(cache)
    texts: dict[int, tuple[frozenset[int], str, str]] = {}

    def said(ids: frozenset[int]) -> tuple[str, str]:
        """(list, mask) of a set of CPUs, made once per set: the CPUs of a core, a package or a cache share
        theirs (made per CPU, a package's list cost its size for each of its CPUs)."""
        hit = texts.get(id(ids))
        if hit is None:
            hit = texts[id(ids)] = (ids, format_cpulist(ids), _mask(ids))   # the set kept: its id stays its own
        return hit[1], hit[2]

    for cpu in sorted(topo.pus):
        base = f"{cpu_dir}/cpu{cpu}"
        core, threads = topo.core_of[cpu]
        files[f"{base}/topology/thread_siblings_list"], files[f"{base}/topology/thread_siblings"] = said(threads)
        if core is not None:
            files[f"{base}/topology/core_id"] = str(core)
        package = topo.package_of.get(cpu)
        if package is not None:
            files[f"{base}/topology/core_siblings_list"] = said(package[1])[0]
            if package[0] is not None:
                files[f"{base}/topology/physical_package_id"] = str(package[0])
        for k, (level, kind, cpus, size) in enumerate(per_cpu.get(cpu, ())):
            idir = f"{base}/cache/index{k}"
            files[f"{idir}/level"] = str(level)
            files[f"{idir}/type"] = kind
            files[f"{idir}/shared_cpu_list"], files[f"{idir}/shared_cpu_map"] = said(cpus)
            size_text = _size_text(size)
            if size_text is not None:
                files[f"{idir}/size"] = size_text
    ids = sorted(topo.nodes)
    files[f"{node_dir}/online"] = format_cpulist(ids)
    files[f"{node_dir}/possible"] = format_cpulist(topo.possible_nodes)
    files[f"{node_dir}/has_cpu"] = format_cpulist(n for n in ids if topo.nodes[n][0])
    files[f"{node_dir}/has_memory"] = format_cpulist(n for n in ids if topo.nodes[n][1])
    total = 0
    for nid in ids:
        cpus, memory, _subtype = topo.nodes[nid]
        base = f"{node_dir}/node{nid}"
        files[f"{base}/cpulist"] = format_cpulist(cpus)
        files[f"{base}/cpumap"] = _mask(cpus)
        files[f"{base}/meminfo"] = f"Node {nid} MemTotal:       {memory >> 10} kB\n"
        total += memory >> 10
        if topo.distances:
            files[f"{base}/distance"] = " ".join(str(topo.distances[nid][o]) for o in ids)
    links: dict[str, str] = {}
    for nid, (figures, initiators) in sorted(topo.access.items()):
        # access0: the best initiators of any kind; access1 (Linux 5.17+): the best CPU initiators, the same
        # here (an hwloc initiator is a set of CPUs)
        for access in ("access0", "access1"):
            base = f"{node_dir}/node{nid}/{access}/initiators"
            for figure, value in figures.items():
                files[f"{base}/{figure}"] = str(value)
            for ini in sorted(initiators):
                links[f"{base}/node{ini}"] = f"../../../node{ini}"
                links[f"{node_dir}/node{ini}/{access}/targets/node{nid}"] = f"../../../node{nid}"
    if topo.hybrid_pmus is not None:
        files["sys/devices/cpu_core/cpus"] = format_cpulist(topo.hybrid_pmus[0])
        files["sys/devices/cpu_atom/cpus"] = format_cpulist(topo.hybrid_pmus[1])
    for cpu, capacity in sorted(topo.capacities.items()):
        files[f"{cpu_dir}/cpu{cpu}/cpu_capacity"] = str(capacity)
    files["proc/meminfo"] = f"MemTotal:       {total} kB\n"
    files["proc/self/status"] = (f"Name:\tlstopo\nCpus_allowed:\t{_mask(topo.allowed_cpus)}\n"
                                 f"Cpus_allowed_list:\t{format_cpulist(topo.allowed_cpus)}\n"
                                 f"Mems_allowed:\t{_mask(topo.allowed_nodes)}\n"
                                 f"Mems_allowed_list:\t{format_cpulist(topo.allowed_nodes)}\n")
    if topo.allowed_cpus != topo.pus or topo.allowed_nodes != frozenset(ids):
        # an XML exported inside a cpuset: the cpuset (a cgroup v2 one) is what discovery takes as the limit
        files["proc/mounts"] = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n"
        files["proc/self/cgroup"] = "0::/\n"
        files["sys/fs/cgroup/cpuset.cpus.effective"] = format_cpulist(topo.allowed_cpus)
        files["sys/fs/cgroup/cpuset.mems.effective"] = format_cpulist(topo.allowed_nodes)
    info = topo.cpu_info
    if info:
        lines = ["processor\t: 0"]
        if info.get("CPUVendor") and info.get("CPUFamilyNumber"):
            lines += [f"vendor_id\t: {info['CPUVendor']}", f"cpu family\t: {info['CPUFamilyNumber']}"]
        if info.get("CPUModel"):
            lines.append(f"model name\t: {info['CPUModel']}")
        files["proc/cpuinfo"] = "\n".join(lines) + "\n\n"
    _pci_files(topo, files, links)
    files[GPU_NOTE_FILE] = (f"source: {printable(topo.path)}\nversion: {topo.version}\ngpu_order: {topo.gpu_note}\n"
                            + "".join(f"gpu_order.{v}: {n}\n" for v, n in sorted(topo.gpu_notes.items())))
    return files, links


def _link(links: dict[str, str], rel: str, target: str) -> None:
    """A relative symlink ``rel`` -> ``target`` (both relative to the root), as sysfs makes them; the first kept."""
    links.setdefault(rel, os.path.relpath(target, os.path.dirname(rel)))


def _render_minor(osdevs: list[tuple[str, dict[str, str]]]) -> int | None:
    """N of a function's ``renderDN`` OS device (the DRM render node hwloc's Linux backend lists), else None."""
    for name, _infos in osdevs:
        tail = name[len("renderD"):] if name.startswith("renderD") else ""
        if tail.isascii() and tail.isdigit() and len(tail) <= 6:
            return int(tail)
    return None


def _port_of(info: str) -> int | None:
    """The port of an OpenFabrics info (``Port1State``, ``Port2LID``: 1, 2), else None."""
    if not info.startswith("Port"):
        return None
    digits = info[4:len(info) - len(info[4:].lstrip("0123456789"))]
    return int(digits) if digits and len(digits) <= 3 else None


def _pci_bases(topo: HwlocTopology, links: dict[str, str]) -> dict[str, str]:
    """Each function's directory: under ``sys/devices`` below its host bridge and bridges, with its link in
    ``sys/bus/pci/devices`` (as the kernel lays them out, so that a PCI function's path, its link class to
    another and a NIC's interfaces read as on the machine); a plain directory of ``sys/bus/pci/devices`` where
    the file gives no host bridge."""
    bases: dict[str, str] = {}
    for bus in sorted(topo.pci):
        chain = topo.pci_paths.get(bus)
        if chain is None:
            bases[bus] = f"sys/bus/pci/devices/{bus}"
        else:
            bases[bus] = "sys/devices/" + "/".join(chain)
            _link(links, f"sys/bus/pci/devices/{bus}", bases[bus])
    return bases


def _osdev_files(topo: HwlocTopology, bases: dict[str, str], files: dict[str, str], links: dict[str, str]) -> None:
    """The network interfaces, RDMA devices (with their ports) and disks of each function, in their classes;
    an SR-IOV VF's ``physfn``, and the bonds and VLANs numabind's own export says are stacked on a function's
    interfaces (infos ``NumabindPhysFn``, ``NumabindNetUppers``)."""
    for bus, found in sorted(topo.osdevs.items()):
        base = bases[bus]
        for name, kind, infos in found:
            if not _safe_name(name):
                log.debug("hwloc XML %s: OS device %r of %s is no sysfs name; left out", topo.path, name, bus)
                continue
            here = f"{base}/{kind}/{name}"
            if f"sys/class/{kind}/{name}" in links:
                continue                # a name the kernel gives once
            if kind == "net":
                files[f"{here}/ifindex"] = "1"
            elif kind == "block":
                files[f"{here}/removable"] = "0"
            else:
                ports = sorted({p for p in map(_port_of, infos) if p is not None} or {1})
                for port in ports[:64]:
                    state = infos.get(f"Port{port}State", "4")
                    files[f"{here}/ports/{port}/state"] = f"{state}: {'ACTIVE' if state == '4' else 'DOWN'}"
                    if infos.get(f"Port{port}LinkLayer"):
                        files[f"{here}/ports/{port}/link_layer"] = infos[f"Port{port}LinkLayer"]
            _link(links, f"{here}/device", base)
            _link(links, f"sys/class/{kind}/{name}", here)
    for bus, entry in sorted(topo.pci.items()):
        infos = entry[6]
        pf = _bus_id(infos.get("NumabindPhysFn", ""))
        if pf is not None and pf in bases and pf != bus:
            _link(links, f"{bases[bus]}/physfn", bases[pf])
        nets = [n for n, kind, _i in topo.osdevs.get(bus, ()) if kind == "net" and _safe_name(n)]
        for upper in infos.get("NumabindNetUppers", "").split()[:64]:
            if not _safe_name(upper) or upper in nets:
                continue
            here = f"sys/devices/virtual/net/{upper}"
            existing = links.get(f"sys/class/net/{upper}")
            if existing is not None and "devices/virtual/" not in existing:
                continue                # a physical interface of that name
            files[f"{here}/ifindex"] = "1"
            _link(links, f"sys/class/net/{upper}", here)
            for low in nets:
                _link(links, f"{here}/lower_{low}", f"{bases[bus]}/net/{low}")


def _pci_files(topo: HwlocTopology, files: dict[str, str], links: dict[str, str]) -> None:
    amd_rank: dict[str, tuple[int, int]] = {}
    bases = _pci_bases(topo, links)
    for bus, (cls, vendor, device, node, local, osdevs, infos) in sorted(topo.pci.items()):
        base = bases[bus]
        files[f"{base}/class"] = f"0x{cls:04x}00"
        files[f"{base}/vendor"] = f"0x{vendor:04x}"
        files[f"{base}/device"] = f"0x{device:04x}"
        files[f"{base}/numa_node"] = str(node)
        files[f"{base}/local_cpulist"] = format_cpulist(local)
        files[f"{base}/local_cpus"] = _mask(local)
        name = _is_gpu(cls, vendor, device)
        if name is None:
            continue
        render = _render_minor(osdevs)
        if render is not None:          # hwloc's Linux backend names the DRM render node of a GPU
            files[f"{base}/drm/renderD{render}/dev"] = f"226:{render}"
        uuid = next((v for _n, i in [*osdevs, ("", infos)] for k, v in i.items() if k.endswith("UUID") and v), None)
        model = next((i["GPUModel"] for _n, i in [*osdevs, ("", infos)] if i.get("GPUModel")), None) or \
            infos.get("PCIDevice")
        if name == "nvidia":
            lines = [f"Model: \t\t {model or 'NVIDIA GPU'}"]
            if uuid:
                lines.append(f"GPU UUID: \t {uuid}")
            lines.append(f"Bus Location: \t {bus}")
            minor = next((i["NumabindDeviceMinor"] for _n, i in osdevs if "NumabindDeviceMinor" in i), "")
            if minor.isascii() and minor.isdigit() and len(minor) <= 6:
                lines.append(f"Device Minor: \t {int(minor)}")
            files[f"proc/driver/nvidia/gpus/{bus}/information"] = "\n".join(lines) + "\n"
        elif name == "amd":
            hits = [_runtime_index(n, ("rsmi",)) for n, _i in osdevs]
            index = min((h for h in hits if h is not None), default=None)
            if index is not None:
                amd_rank[bus] = index
    for k, bus in enumerate(sorted(amd_rank, key=lambda b: amd_rank[b])):
        dom, b, rest = bus.split(":")
        dev, fn = rest.split(".")
        location = int(b, 16) << 8 | int(dev, 16) << 3 | int(fn, 16)
        osdevs = topo.pci[bus][5]
        uuid = next((v for _n, i in osdevs for key, v in i.items() if key.endswith("UUID") and v), "")
        tail = uuid[4:] if uuid.upper().startswith("GPU-") else uuid
        unique = int(tail, 16) if tail and len(tail) <= 16 and set(tail) <= _WORD_HEX else 0
        props = ["simd_count 1", f"location_id {location}", f"domain {int(dom, 16)}"]
        if unique:
            props.append(f"unique_id {unique}")
        render = _render_minor(osdevs)
        if render is not None:
            props.append(f"drm_render_minor {render}")
        files[f"sys/class/kfd/kfd/topology/nodes/{k + 1}/properties"] = "\n".join(props) + "\n"
        model = next((i["GPUModel"] for _n, i in osdevs if i.get("GPUModel")), None)
        if model:
            files[f"sys/class/kfd/kfd/topology/nodes/{k + 1}/name"] = model
    if amd_rank:
        files["sys/class/kfd/kfd/topology/nodes/0/properties"] = "cpu_cores_count 1\nsimd_count 0\n"
    _osdev_files(topo, bases, files, links)


def gpu_order_note(reader: Any, vendor: str | None = None) -> str:
    """What the tree of an XML root says about its GPUs' order (for their identity note): of the GPUs of
    ``vendor`` (``"nvidia"``, ``"amd"``, ``"intel"``, ``"ascend"``), or of every vendor; "" for another root
    and where the file's OS devices number the GPUs as numabind does."""
    if getattr(reader, "is_live", True):
        return ""
    text: str | None = reader.read(GPU_NOTE_FILE)
    if not text:
        return ""
    want = "gpu_order" if vendor is None else f"gpu_order.{vendor}"
    for line in text.splitlines():
        key, _sep, value = line.partition(": ")
        if key == want:
            return value.strip()
    return ""
