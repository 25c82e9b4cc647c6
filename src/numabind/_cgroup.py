"""The cpuset a process lives in (cgroup v2, cgroup v1, the legacy cpuset filesystem: ``docs/discovery.rst``), and
:func:`read_allowed`, the one answer to what it may use (:class:`numabind.plan.Allowed`). On the run path.
"""

import posixpath

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)
if TYPE_CHECKING:  # pragma: no cover
    from ._fs import FsReader

from ._base import Value, printable
from .cpulist import parse_cpulist, parse_mask
from .errors import NumabindError, PlanError
from .plan import Allowed

__all__ = ["CGROUP_DIR", "Cpuset", "cpusets", "read_allowed", "read_cpuset", "status_set"]

#: Where systemd, Docker and the cpuset(7) manual page mount cgroups (used when ``proc/mounts`` lists none).
CGROUP_DIR = "sys/fs/cgroup"


class Cpuset(Value):
    """The CPUs and memory nodes a process's cpuset allows (None: that file is not there), and where."""

    __slots__ = ("cpus", "mems", "source")
    cpus: "frozenset[int] | None"
    mems: "frozenset[int] | None"
    source: str                      # e.g. "cgroup2:/system.slice/x.service"

    def __init__(self, cpus: "frozenset[int] | None", mems: "frozenset[int] | None", source: str) -> None:
        object.__setattr__(self, "cpus", None if cpus is None else frozenset(cpus))
        object.__setattr__(self, "mems", None if mems is None else frozenset(mems))
        object.__setattr__(self, "source", source)


def _malformed(reader: "FsReader", rel: str, text: str, why: str) -> NumabindError:
    from ._fs import malformed   # as key_values below: _fs is imported by the reader's caller already

    return malformed(reader, rel, text, why)   # a short excerpt of the file, printable


def _read_list(reader: "FsReader", rel: str, what: str) -> "frozenset[int] | None":
    text = reader.read(rel)
    if text is None:
        return None
    try:
        return parse_cpulist(text, what=what)
    except PlanError as exc:
        raise _malformed(reader, rel, text, str(exc)) from None


def status_set(reader: "FsReader", fields: "dict[str, str]", name: str) -> "frozenset[int] | None":
    """``name`` (``Cpus_allowed``, ``Mems_allowed``) of ``proc/self/status``'s ``fields`` (its ``_list`` form, else
    its mask), or None; a malformed one raises NumabindError naming the file."""
    rel = "proc/self/status"
    try:
        if f"{name}_list" in fields:
            return parse_cpulist(fields[f"{name}_list"], what=f"{name}_list")
        if name in fields:
            return parse_mask(fields[name], what=name)
    except PlanError as exc:
        raise _malformed(reader, rel, fields.get(f"{name}_list", fields.get(name, "")), str(exc)) from None
    return None


def _cgroup_lines(reader: "FsReader") -> "list[tuple[str, str, str]]":
    text = reader.read("proc/self/cgroup")
    if text is None:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out.append((parts[0], parts[1], parts[2]))
    return out


def _clean_cgroup_path(path: str) -> str:
    # normpath clamps "/.." at "/" (the path never leaves the mount); lstrip: normpath keeps a leading "//"
    path = path.strip()
    if path.endswith(" (deleted)"):           # a cgroup removed while the process is in it
        path = path[:-len(" (deleted)")]
    return posixpath.normpath("/" + path.lstrip("/"))


def _unescape(field: str) -> str:
    """A ``proc/mounts`` field with its octal escapes (``\\040`` for a space) decoded."""
    if "\\" not in field:
        return field
    out, k = [], 0
    while k < len(field):
        chunk = field[k + 1:k + 4]
        if field[k] == "\\" and len(chunk) == 3 and all(c in "01234567" for c in chunk):
            out.append(chr(int(chunk, 8)))
            k += 4
        else:
            out.append(field[k])
            k += 1
    return "".join(out)


def _hierarchies(reader: "FsReader", lines: "list[tuple[str, str, str]]") -> "list[tuple[str, str, str]]":
    """(kind, mount, file prefix) of every cpuset-bearing mount of proc/mounts, else of the usual ones."""
    found: "list[tuple[str, str, str]]" = []
    text = reader.read("proc/mounts")
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        rel = posixpath.normpath("/" + _unescape(fields[1]).lstrip("/")).lstrip("/")
        fstype, options = fields[2], fields[3].split(",")
        if fstype == "cgroup2":
            found.append(("cgroup2", rel, "cpuset."))
        elif fstype == "cpuset":
            found.append(("cpuset", rel, ""))
        elif fstype == "cgroup" and "cpuset" in options:
            found.append(("cgroup1", rel, "" if "noprefix" in options else "cpuset."))
    if found:
        return found
    found = [("cgroup2", CGROUP_DIR, "cpuset."), ("cgroup2", f"{CGROUP_DIR}/unified", "cpuset."),
             ("cgroup1", f"{CGROUP_DIR}/cpuset", "cpuset.")]
    for _h, controllers, _p in lines:
        if "cpuset" in controllers.split(",") and controllers != "cpuset":
            found.append(("cgroup1", f"{CGROUP_DIR}/{controllers}", "cpuset."))
    found.append(("cpuset", "dev/cpuset", ""))
    return found


def _nearest(reader: "FsReader", mount: str, path: str, names: "tuple[tuple[str, ...], tuple[str, ...]]"
             ) -> "tuple[str, frozenset[int] | None, frozenset[int] | None] | None":
    """(cgroup path, cpus, mems) at ``path`` or its nearest ancestor that has the files."""
    current = path
    while True:
        d = mount + ("" if current == "/" else current)
        cpus = next((s for s in (_read_list(reader, f"{d}/{n}", "cpulist") for n in names[0]) if s is not None), None)
        mems = next((s for s in (_read_list(reader, f"{d}/{n}", "nodelist") for n in names[1]) if s is not None), None)
        if cpus is not None or mems is not None:
            return current, cpus, mems
        if current == "/":
            return None
        current = posixpath.dirname(current)


def cpusets(reader: "FsReader") -> "list[Cpuset]":
    """The process's cpuset in each kind of hierarchy found (cgroup v2, cgroup v1, legacy cpuset), in that order."""
    lines = _cgroup_lines(reader)
    v2_path = next((p for h, c, p in lines if h == "0" and c == ""), None)
    v1_path = next((p for _h, c, p in lines if "cpuset" in c.split(",")), None)
    own = reader.read_strip("proc/self/cpuset") if v1_path is None else None
    out: "dict[str, Cpuset]" = {}
    for kind, mount, prefix in _hierarchies(reader, lines):
        if kind in out:
            continue
        names: "tuple[tuple[str, ...], tuple[str, ...]]"
        if kind == "cgroup2":
            raw = v2_path
            names = (("cpuset.cpus.effective",), ("cpuset.mems.effective",))
        else:
            raw = v1_path if v1_path is not None else own
            names = ((f"{prefix}effective_cpus", f"{prefix}cpus"), (f"{prefix}effective_mems", f"{prefix}mems"))
        if not raw:
            continue
        found = _nearest(reader, mount, _clean_cgroup_path(raw), names)
        if found is not None:
            out[kind] = Cpuset(cpus=found[1], mems=found[2], source=f"{kind}:{printable(found[0])}")
    return [out[k] for k in ("cgroup2", "cgroup1", "cpuset") if k in out]


def read_cpuset(reader: "FsReader") -> "Cpuset | None":
    """The first of :func:`cpusets`, or None."""
    found = cpusets(reader)
    return found[0] if found else None


def read_allowed(reader: "FsReader", online_cpus: "frozenset[int]", nodes: "frozenset[int]",
                 memory_nodes: "frozenset[int]", affinity: "frozenset[int] | None" = None) -> Allowed:
    """What the process under ``reader``'s root may use: the online CPUs of every cpuset found (all online CPUs
    without one), the nodes of ``Mems_allowed`` and the cpusets' mems. ``affinity``: the inherited one when the
    caller knows it, else ``Cpus_allowed`` of ``proc/self/status``.
    """
    from ._fs import key_values

    text = reader.read("proc/self/status")
    fields = key_values(text) if text is not None else {}
    mems = status_set(reader, fields, "Mems_allowed")
    node_sources = ["status"] if mems is not None else []
    if affinity is None:
        affinity = status_set(reader, fields, "Cpus_allowed")
    cpus = online_cpus
    cpu_sources = []
    for cpuset in cpusets(reader):
        if cpuset.cpus is not None:
            cpus = cpus & cpuset.cpus
            cpu_sources.append(cpuset.source)
        if cpuset.mems is not None:
            mems = cpuset.mems if mems is None else mems & cpuset.mems
            node_sources.append(cpuset.source)
    cpus_source = "+".join(cpu_sources) or "online"
    if not cpus:      # a cpuset of offline CPUs only (a dump caught mid-hotplug): the kernel would refuse all
        cpus, cpus_source = online_cpus, f"online (the cpuset {cpus_source} holds no online CPU)"
    return Allowed(online_cpus=online_cpus, allowed_cpus=cpus, cpus_source=cpus_source, nodes=nodes,
                   memory_nodes=memory_nodes, allowed_nodes=nodes if mems is None else mems & nodes,
                   nodes_source="+".join(node_sources) or "every node",
                   affinity=None if affinity is None else affinity & online_cpus)
