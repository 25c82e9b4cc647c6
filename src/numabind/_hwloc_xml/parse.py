"""The grammar of an hwloc XML file: expat's events into objects, matrices, memory attributes and CPU kinds, and
hwloc's bitmaps (docs/discovery.rst, "Safety" and "Cost")."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .._base import excerpt, printable
from ..cpulist import MAX_ID
from ..errors import NumabindError

#: Largest hwloc XML file read (bytes); the corpus' largest (384 PUs with I/O) is 335 KB.
MAX_XML_BYTES = 64 << 20
#: Deepest element nesting accepted (hwloc's deepest trees, with PCI bridges, are a few dozen levels).
MAX_XML_DEPTH = 256
#: Most objects (``<object>`` elements) one file may hold.
MAX_XML_OBJECTS = 1_000_000
#: What to do about a file numabind refuses.
REEXPORT = "export it again with lstopo FILE.xml (or lstopo-no-graphics --of xml FILE.xml)"
WORD_HEX = frozenset("0123456789abcdefABCDEF")


def fail(path: str, line: int | None, problem: str, fix: str = "") -> NumabindError:
    where = f"hwloc XML {printable(path)}" + (f", line {line}" if line else "")
    tail = f"; {fix}" if fix else ""
    return NumabindError(f"{where}: {problem}{tail}")


def shown(text: str) -> str:
    """A file's value in an error: :func:`numabind._base.excerpt` (its first characters, escaped as typed)."""
    return excerpt(text, escape=True)


class Obj:
    """One ``<object>``: its attributes, the line of its start tag, its parent's position, its infos."""

    __slots__ = ("type", "attrs", "line", "parent", "infos", "children")

    def __init__(self, attrs: dict[str, str], line: int, parent: int) -> None:
        self.type = attrs.get("type", "")
        self.attrs = attrs
        self.line = line
        self.parent = parent
        self.infos: dict[str, str] = {}
        self.children: list[int] = []


@dataclass(slots=True)
class Matrix:
    """A distance matrix as the file gives it (v2 ``distances2`` or v1 ``distances``)."""

    attrs: dict[str, str]
    line: int
    indexes: list[str] = field(default_factory=list)
    values: list[str] = field(default_factory=list)
    latencies: list[tuple[str, int]] = field(default_factory=list)


@dataclass(slots=True)
class Extra:
    """A ``<memattr>`` (its values) or a ``<cpukind>`` (its infos): attributes and the line of the start tag."""

    attrs: dict[str, str]
    line: int
    values: list[tuple[dict[str, str], int]] = field(default_factory=list)     # memattr_value attributes, line
    infos: dict[str, str] = field(default_factory=dict)


#: The stack's mark of a ``<memattr>`` or ``<cpukind>`` that was kept (one under the root): only its children
#: are its values and infos (a ``memattr_value`` elsewhere belongs to none, and there may be no memattr yet).
_KEPT = -2


class Reader:
    """The expat handlers: they build the objects and matrices and refuse what hwloc never writes."""

    def __init__(self, path: str) -> None:
        from xml.parsers import expat

        self.path = path
        self.objects: list[Obj] = []
        self.matrices: list[Matrix] = []
        self.memattrs: list[Extra] = []
        self.cpukinds: list[Extra] = []
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
            raise fail(self.path, self._line(), "the DOCTYPE has an internal subset (entity or element "
                       "declarations); hwloc never writes one and numabind refuses it (entity expansion)",
                       REEXPORT)

    def entity(self, *args: Any) -> None:
        raise fail(self.path, self._line(), "an entity declaration; numabind expands no entities", REEXPORT)

    def external(self, *args: Any) -> int:
        raise fail(self.path, self._line(), "a reference to an external entity; numabind loads none", REEXPORT)

    def skipped(self, name: str, is_parameter: int) -> None:
        raise fail(self.path, self._line(), f"a reference to the undeclared entity {name!r}", REEXPORT)

    def start(self, name: str, attrs: dict[str, str]) -> None:
        depth = len(self.stack)
        line = self._line()
        if depth >= MAX_XML_DEPTH:
            raise fail(self.path, line, f"elements nested deeper than {MAX_XML_DEPTH}; no hwloc topology is")
        if depth == 0:
            if name != "topology":
                raise fail(self.path, line, f"the root element is <{printable(name)}>, not <topology>: not an hwloc "
                           f"XML topology", "give a file written by lstopo (lstopo FILE.xml)")
            self.version = attrs.get("version", "1.0")
            if self.version.split(".", 1)[0] not in ("1", "2", "3"):
                raise fail(self.path, line, f"XML format version {self.version!r}; numabind reads versions 1 "
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
                    raise fail(self.path, line, "a second root object; an hwloc topology has one", REEXPORT)
            if len(self.objects) >= MAX_XML_OBJECTS:
                raise fail(self.path, line, f"more than {MAX_XML_OBJECTS} objects; no machine has that many")
            pos = len(self.objects)
            self.objects.append(Obj(dict(attrs), line, parent_obj))
            if parent_obj >= 0:
                self.objects[parent_obj].children.append(pos)
        elif name == "info" and parent_obj >= 0 and parent_name == "object":
            key = attrs.get("name")
            if key is not None:     # kept as numabind prints it: the file is someone else's text
                self.objects[parent_obj].infos.setdefault(key, printable(attrs.get("value", "")))
        elif name in ("distances2", "distances"):
            self.matrices.append(Matrix(dict(attrs, element=name), line))
        elif name in ("indexes", "u64values") and parent_name == "distances2":
            self.text = []
        elif name == "latency" and parent_name == "distances":
            self.matrices[-1].latencies.append((attrs.get("value", ""), line))
        elif name in ("memattr", "cpukind", "memattr_value") and (
                parent_name == ("memattr" if name == "memattr_value" else "topology")) and (
                name != "memattr_value" or parent_obj == _KEPT):
            self.extras += 1
            if self.extras > MAX_XML_OBJECTS:
                raise fail(self.path, line, f"more than {MAX_XML_OBJECTS} memory attribute values and CPU kinds; "
                           f"no machine has that many")
            if name == "memattr_value":
                self.memattrs[-1].values.append((dict(attrs), line))
            else:
                (self.memattrs if name == "memattr" else self.cpukinds).append(Extra(dict(attrs), line))
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
    """Whether a file is hwloc XML: its ``name`` ends in ``.xml``, or its first bytes ``head`` say so."""
    return name.lower().endswith(".xml") or head.lstrip().startswith((b"<?xml", b"<!DOCTYPE topology", b"<topology"))


def read_error(path: str, exc: Exception) -> NumabindError:
    """The error for an hwloc XML file ``path`` the bounded read refused (``exc``: RefusedFile) or could not read."""
    why = getattr(exc, "why", None)
    if why == "size":
        return fail(path, None, f"is more than numabind's cap of {MAX_XML_BYTES >> 20} MiB for an hwloc XML "
                    f"topology (the largest machines' are a few MiB); is this the right file?")
    if why is not None:
        return fail(path, None, f"cannot be read: {getattr(exc, 'reason', exc)}")
    return fail(path, None, f"cannot be read: {getattr(exc, 'strerror', None) or exc}")


def parse(path: str, data: bytes) -> Reader:
    from xml.parsers import expat

    reader = Reader(path)
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
        raise fail(path, exc.lineno, f"{problem} (column {exc.offset}): {hint}", REEXPORT) from None
    except (LookupError, ValueError, UnicodeError) as exc:
        # the XML declaration's encoding= is a codec Python lacks, one that is no text encoding, a multi-byte
        # one expat cannot take from Python (UTF-7, UTF-32, Shift-JIS) or one that cannot decode the bytes
        raise fail(path, int(reader.parser.CurrentLineNumber) or 1, f"its XML declaration names an encoding "
                   f"numabind cannot read ({type(exc).__name__}: {shown(str(exc))}); hwloc writes UTF-8",
                   REEXPORT) from None
    if not reader.objects:
        raise fail(path, None, "holds no <object>: an hwloc topology has a root object", REEXPORT)
    return reader


# ----------------------------------------------------------------------------- bitmaps
@dataclass(slots=True)
class Bitmap:
    """An hwloc bitmap: the ids set (an int's bits), and every id from ``tail`` on when set (``0xf...f``)."""

    bits: int
    tail: int | None

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(_bit_ids(self.bits))

    def within(self, universe: Iterable[int]) -> frozenset[int]:
        """The ids of ``universe`` (a set or a mapping's keys) that are set."""
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


def bitmap(path: str, obj_line: int, name: str, text: str) -> Bitmap:
    """hwloc's bitmap text: 32-bit hex words, most significant first, separated by commas; an empty word is zero;
    a leading ``0xf...f`` sets every higher bit. The words become one int, never a set (linear in the text)."""
    body = text.strip()
    tail_all = body.startswith("0xf...f")
    if tail_all:
        body = body[len("0xf...f"):].lstrip(",")
    words = body.split(",") if body else []
    if len(words) > _MAX_WORDS + 1:
        raise fail(path, obj_line, f"{name}={shown(text)} has {len(words)} words: ids above {MAX_ID}, "
                   f"numabind's cap", REEXPORT)
    digits_of: list[str] = []
    last = len(words) - 1
    for k, word in enumerate(reversed(words)):       # least significant first: the first fault is the one said
        if word == "" and k < last:
            digits_of.append("00000000")
            continue
        digits = word[2:] if word[:2] in ("0x", "0X") else None
        if not digits or len(digits) > 8 or not set(digits) <= WORD_HEX:
            raise fail(path, obj_line, f"{name}={shown(text)} is not an hwloc bitmap (32-bit hex words such as "
                       f"0x0000ffff, separated by commas)", REEXPORT)
        if 32 * k + 31 > MAX_ID:
            value = int(digits, 16) >> max(0, MAX_ID + 1 - 32 * k)
            if value:
                bit = max(32 * k, MAX_ID + 1) + (value & -value).bit_length() - 1
                raise fail(path, obj_line, f"{name}={shown(text)} sets bit {bit}, above numabind's cap of "
                           f"{MAX_ID} for a CPU or node id", REEXPORT)
        digits_of.append(digits.rjust(8, "0"))
    bits = int("".join(reversed(digits_of)), 16) if digits_of else 0
    return Bitmap(bits, 32 * len(words) if tail_all else None)


def obj_bitmap(path: str, obj: Obj, name: str = "cpuset") -> Bitmap | None:
    """The bitmap attribute ``name`` of ``obj``; None when it has none."""
    text = obj.attrs.get(name)
    return None if text is None else bitmap(path, obj.line, name, text)


def int_attr(path: str, obj: Obj, name: str, *, required: bool = False, cap: int | None = MAX_ID) -> int | None:
    raw = obj.attrs.get(name)
    if raw is None:
        if required:
            raise fail(path, obj.line, f"a {obj.type} object without {name}", REEXPORT)
        return None
    body = raw.strip()
    if not body.isascii() or not body.isdigit() or len(body) > 20:
        raise fail(path, obj.line, f"{obj.type} {name}={shown(raw)} is not a non-negative integer", REEXPORT)
    value = int(body)
    if cap is not None and value > cap:
        raise fail(path, obj.line, f"{obj.type} {name}={value} is above numabind's cap of {cap} for a CPU or "
                   f"node id", REEXPORT)
    return value
