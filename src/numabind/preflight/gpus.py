"""GPU identity, cross-checked (``numabind check``, issue 44): every source present says which GPUs there are and,
for each, its PCI address, UUID, NUMA node, local CPUs and numbers; a disagreement names the GPU, the sources and
what each says.

The sources, each used only when present (an absent one is said, with why, never an error):

* ``sysfs``: numabind's own discovery (:func:`numabind.devices.discover_gpus`, without NVML): the GPUs the
  runtime can open with no visibility variable, and the index each gets under the caller's variables;
* ``nvml``: nvidia-ml-py (:func:`numabind.devices.nvml.probe`);
* ``nvidia-smi``: ``nvidia-smi --query-gpu=index,pci.bus_id,uuid,name --format=csv,noheader``;
* ``nvidia-smi topo``: the CPU Affinity and NUMA Affinity columns of ``nvidia-smi topo -m``;
* ``torch``: the CUDA (or HIP) runtime's own numbering, asked in a short-lived child under the caller's
  environment (``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER`` are read when the runtime starts);
* ``visibility``: what the visibility variables (:data:`numabind._vendors.VISIBILITY_VARIABLES`) and
  ``NVIDIA_VISIBLE_DEVICES`` ask for;
* ``amd-smi`` (else ``rocm-smi``), ``xpu-smi``, ``npu-smi``: each vendor's tool, PCI address per device and its
  NUMA node where the tool says it.

Every command runs without a shell, with a short timeout; a failure becomes "unavailable: why". A replayed
machine (a root other than ``/``) is compared with its own files and the visibility variables only: this host's
tools would describe this host. torch is asked only when another source found a GPU (importing it takes seconds).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._base import excerpt, getLogger, printable
from .._fs import FsReader
from .._util import FrozenMap
from .._vendors import NAMES, VISIBILITY_VARIABLES
from ..cpulist import format_cpulist, parse_cpulist
from ..devices import discover_gpus
from ..devices.nvml import probe
from ..devices.sysfs import normal_bdf
from ..errors import NumabindError

if TYPE_CHECKING:
    from ..devices import Gpu
    from ..topology import Topology

log = getLogger(__name__)

__all__ = ["FIELDS", "Disagreement", "GpuIdentity", "SOURCES", "SeenGpu", "Sighting", "cross_check_gpus",
           "parse_npu_smi", "parse_topo_matrix"]

#: What a disagreement may be about: a GPU's PCI address, UUID, NUMA node, local CPUs, its index with no visibility
#: variable, its index under them (or "not visible"), whether a tool lists it; how many GPUs are listed, visible.
FIELDS = ("PCI address", "UUID", "NUMA node", "local CPUs", "index", "CUDA index", "listed", "count", "visible count")
#: Every source, in the order they are asked and shown.
SOURCES = ("sysfs", "nvml", "nvidia-smi", "nvidia-smi topo", "amd-smi", "rocm-smi", "xpu-smi", "npu-smi", "torch",
           "visibility")
#: Seconds a vendor tool may take; the torch child may take longer (importing torch is slow on a cold disk).
TOOL_TIMEOUT = 10.0
TORCH_TIMEOUT = 60.0
#: Most bytes of a tool's output read.
_OUTPUT_LIMIT = 1 << 20
#: The deepest nesting a tool's JSON may have (theirs nest three or four levels).
_JSON_DEPTH = 16
#: The sources that list every GPU of their vendor, visibility variables aside.
_LISTING = ("sysfs", "nvml", "nvidia-smi", "amd-smi", "rocm-smi", "xpu-smi", "npu-smi")
#: The sources that number the GPUs a process sees under the visibility variables.
_VISIBLE = ("sysfs", "torch", "visibility")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CELLS = re.compile(r"\s*\t\s*|\s{2,}")
_NVIDIA, = VISIBILITY_VARIABLES["nvidia"]
_CONTAINER = "NVIDIA_VISIBLE_DEVICES"


# ------------------------------------------------------------------------------------------------ values
@dataclass(frozen=True)
class Sighting:
    """What one source says of one GPU; None where it says nothing.

    ``index`` is the GPU's number with no visibility variable (nvidia-smi's, NVML's, numabind's physical index);
    ``cuda_index`` the number the runtime gives it under the visibility variables."""

    source: str
    vendor: str
    pci_address: str | None = None
    uuid: str | None = None
    numa_nodes: frozenset[int] | None = None
    local_cpus: frozenset[int] | None = None
    index: int | None = None
    cuda_index: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "vendor": self.vendor, "pci_address": self.pci_address, "uuid": self.uuid,
                "numa_node": _nodes(self.numa_nodes), "local_cpus": _cpus(self.local_cpus), "index": self.index,
                "cuda_index": self.cuda_index}


@dataclass(frozen=True)
class SeenGpu:
    """One GPU and what each source says of it."""

    label: str                        # "GPU 0000:18:00.0 (numabind GPU 0)"
    vendor: str
    pci_address: str | None
    sightings: tuple[Sighting, ...]

    def said(self, source: str) -> Sighting | None:
        return next((s for s in self.sightings if s.source == source), None)

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.label, "vendor": self.vendor, "pci_address": self.pci_address,
                "sources": {s.source: s.to_dict() for s in self.sightings}}


@dataclass(frozen=True)
class Disagreement:
    """Sources that say different things of one GPU (or of how many GPUs there are)."""

    gpu: str                          # the GPU's label, or "nvidia GPUs" for a count
    field: str                        # one of FIELDS
    values: FrozenMap[str, str]       # source -> what it says, as shown
    hint: str = ""                    # the likely cause and the fix, when known

    def describe(self) -> str:
        """``GPU 0000:9a:00.0 (numabind GPU 1): UUID differs: sysfs says GPU-1, nvidia-smi says GPU-7``."""
        said = ", ".join(f"{src} says {self.values[src]}" for src in _ordered(self.values))
        return f"{self.gpu}: {self.field} differs: {said}" + (f"; {self.hint}" if self.hint else "")

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "field": self.field, "values": {s: self.values[s] for s in _ordered(self.values)},
                "hint": self.hint, "describe": self.describe()}


@dataclass(frozen=True)
class GpuIdentity:
    """The cross-check: the sources used, those absent (and why), each GPU as each source sees it, and where they
    disagree."""

    sources: tuple[str, ...]
    unavailable: FrozenMap[str, str]
    gpus: tuple[SeenGpu, ...]
    disagreements: tuple[Disagreement, ...]
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.disagreements

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "sources": list(self.sources),
                "unavailable": {s: self.unavailable[s] for s in _ordered(self.unavailable)},
                "gpus": [g.to_dict() for g in self.gpus],
                "disagreements": [d.to_dict() for d in self.disagreements], "notes": list(self.notes)}


@dataclass(frozen=True)
class _Said:
    """One source's answer: its sightings, how many GPUs it lists or numbers, and what it noticed."""

    sightings: tuple[Sighting, ...]
    vendors: frozenset[str]           # whose GPUs it would list
    count: int | None = None          # GPUs it lists with no visibility variable
    visible: int | None = None        # GPUs the runtime numbers under the visibility variables
    shown: Mapping[str, str] = field(default_factory=dict)   # "count"/"visible count" -> how to show it
    notes: tuple[str, ...] = ()


class _Unavailable(Exception):
    """A source that cannot answer; the message says why."""


def _ordered(keys: Iterable[str]) -> list[str]:
    return sorted(keys, key=lambda s: SOURCES.index(s) if s in SOURCES else len(SOURCES))


def _nodes(nodes: frozenset[int] | None) -> str | None:
    return None if nodes is None else format_cpulist(nodes)


def _cpus(cpus: frozenset[int] | None) -> str | None:
    return None if cpus is None else format_cpulist(cpus)


# ------------------------------------------------------------------------------------------------ commands
def _run(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> str:
    """The standard output of ``argv`` (no shell); :class:`_Unavailable` naming why when it cannot answer: not on
    PATH, no answer in ``timeout`` seconds, more than ``_OUTPUT_LIMIT`` bytes printed, or a failure."""
    exe = shutil.which(argv[0], path=env.get("PATH", os.defpath))
    if exe is None:
        raise _Unavailable(f"{argv[0]} is not on PATH")
    shown = " ".join(argv)
    try:
        child = subprocess.Popen([exe, *argv[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(env),
                                 stdin=subprocess.DEVNULL, bufsize=0)   # unbuffered: one read per ready pipe
    except OSError as e:
        raise _Unavailable(f"{shown} could not start: {e}") from None
    try:
        out, err, why = _read_capped(child, timeout)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        for pipe in (child.stdout, child.stderr):
            if pipe is not None:
                pipe.close()
    if why:
        raise _Unavailable(f"{shown} {why}")
    stdout, stderr = (b.decode("utf-8", errors="replace") for b in (out, err))
    if child.returncode != 0:
        raise _Unavailable(f"{shown} exited with status {child.returncode}: "
                           f"{excerpt(stderr or stdout or 'no output')}")
    return stdout


def _read_capped(child: subprocess.Popen[bytes], timeout: float) -> tuple[bytes, bytes, str]:
    """``child``'s stdout and stderr until both close, and why it was cut short ("" when it was not): no answer
    in ``timeout`` seconds, or more than ``_OUTPUT_LIMIT`` bytes on either (the rest is never read)."""
    import selectors
    import time

    got: dict[int, bytearray] = {}
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        for pipe in (child.stdout, child.stderr):
            if pipe is not None:
                sel.register(pipe, selectors.EVENT_READ, pipe)
                got[pipe.fileno()] = bytearray()
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return b"", b"", f"did not answer in {timeout:g} s"
            for key, _ in sel.select(left):
                chunk = key.data.read(1 << 16)     # a raw pipe: one read(2), what is there, b"" at its end
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                got[key.fd] += chunk
                if len(got[key.fd]) > _OUTPUT_LIMIT:
                    return b"", b"", f"printed more than {_OUTPUT_LIMIT >> 20} MiB: not a device list"
    try:
        child.wait(max(deadline - time.monotonic(), 0.01))   # both pipes closed: it is ending, or it closed them
    except subprocess.TimeoutExpired:
        return b"", b"", f"did not answer in {timeout:g} s"
    out = got.get(child.stdout.fileno() if child.stdout is not None else -1, bytearray())
    err = got.get(child.stderr.fileno() if child.stderr is not None else -1, bytearray())
    return bytes(out), bytes(err), ""


def _json(text: str, what: str) -> Any:
    from ..records import load_json   # bounded: nesting, number length

    try:
        return load_json(text.encode("utf-8", errors="replace"), depth=_JSON_DEPTH)
    except ValueError:
        raise _Unavailable(f"{what} printed no JSON: {excerpt(text or 'nothing')}") from None


def _node_set(text: str) -> frozenset[int] | None:
    """A node or CPU list a tool printed (``0``, ``0-1``, ``0-15,32-47``); None for ``N/A``, ``-1`` and the like."""
    try:
        return parse_cpulist(text.strip(), what="list") or None
    except ValueError:
        return None


def _importable(name: str) -> bool:
    """Whether ``import name`` may succeed here, without importing it."""
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


# ------------------------------------------------------------------------------------------------ sysfs
def _without_visibility(env: Mapping[str, str]) -> dict[str, str]:
    listed = {v for name in NAMES for v in VISIBILITY_VARIABLES[name]}
    return {k: v for k, v in env.items() if k not in listed}


def _sysfs(topology: Topology, env: Mapping[str, str]) -> _Said:
    """numabind's discovery without NVML: every GPU the runtime can open, and each one's visible index."""
    physical: Sequence[Gpu]
    try:
        reader = FsReader(topology.root)
        physical = discover_gpus(reader, topology.nodes, env=_without_visibility(env), use_nvml=False)
    except (NumabindError, OSError) as e:
        log.debug("GPU cross-check: rediscovery under %s failed (%s); using the topology's GPUs", topology.root, e)
        physical = topology.gpus
    visible: dict[str, int] = {}
    for g in topology.gpus:
        visible.setdefault(g.pci_address, g.index)
    sightings = tuple(Sighting(
        "sysfs", g.vendor, g.pci_address, g.uuid, None if g.numa_node is None else frozenset({g.numa_node}),
        g.local_cpus or None, g.index if g.physical_index is None else g.physical_index,
        visible.get(g.pci_address)) for g in physical)
    vendors = frozenset(g.vendor for g in physical) or frozenset(NAMES)
    return _Said(sightings, vendors, count=len(sightings), visible=len(topology.gpus))


# ------------------------------------------------------------------------------------------------ NVIDIA
def _nvml() -> _Said:
    devices = probe()
    if devices is None:
        if _importable("pynvml"):
            raise _Unavailable("NVML did not start (nvmlInit failed: is the NVIDIA driver loaded?)")
        raise _Unavailable("pynvml is not importable (pip install nvidia-ml-py)")
    sightings = tuple(Sighting("nvml", "nvidia", d.pci_address, d.uuid, d.memory_nodes or None,
                               d.cpu_affinity or None, d.nvml_index) for d in devices)
    return _Said(sightings, frozenset({"nvidia"}), count=len(sightings))


def _nvidia_smi(env: Mapping[str, str]) -> _Said:
    out = _run(["nvidia-smi", "--query-gpu=index,pci.bus_id,uuid,name", "--format=csv,noheader"], env, TOOL_TIMEOUT)
    sightings = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",", 3)]
        if len(parts) == 4 and parts[0].isascii() and parts[0].isdigit() and len(parts[0]) <= 6:
            pci = normal_bdf(parts[1]) or printable(parts[1].lower())
            sightings.append(Sighting("nvidia-smi", "nvidia", pci, printable(parts[2]) or None, index=int(parts[0])))
    return _Said(tuple(sightings), frozenset({"nvidia"}), count=len(sightings))


def parse_topo_matrix(text: str) -> list[tuple[int, frozenset[int] | None, frozenset[int] | None]]:
    """``(GPU k, CPU Affinity, NUMA Affinity)`` of each ``GPU<k>`` row of ``nvidia-smi topo -m``."""
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header = next((line for line in lines if "CPU Affinity" in line), None)
    if header is None:
        return []
    columns = [c for c in _CELLS.split(header.strip()) if c]
    rows = []
    for line in lines:
        cells = [c for c in _CELLS.split(line.strip()) if c]
        m = re.fullmatch(r"GPU([0-9]{1,6})", cells[0]) if cells else None
        if m is None or len(cells) != len(columns) + 1:
            continue
        said = dict(zip(columns, cells[1:]))
        cpus = _node_set(said.get("CPU Affinity", ""))
        nodes = _node_set(said.get("NUMA Affinity", ""))
        rows.append((int(m.group(1)), cpus, nodes))
    return rows


def _nvidia_topo(env: Mapping[str, str]) -> _Said:
    rows = parse_topo_matrix(_run(["nvidia-smi", "topo", "-m"], env, TOOL_TIMEOUT))
    if not rows:
        raise _Unavailable("nvidia-smi topo -m printed no GPU row with a CPU Affinity column")
    return _Said(tuple(Sighting("nvidia-smi topo", "nvidia", numa_nodes=nodes, local_cpus=cpus, index=k)
                       for k, cpus, nodes in rows), frozenset({"nvidia"}))


# ------------------------------------------------------------------------------------------------ AMD, Intel, Ascend
def _walk(value: Any) -> Iterable[dict[str, Any]]:
    """Every dict inside a JSON value (the tools nest their per-device objects differently by version)."""
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def _amd_smi(env: Mapping[str, str]) -> _Said:
    data = _json(_run(["amd-smi", "static", "--bus", "--numa", "--json"], env, TOOL_TIMEOUT), "amd-smi")
    sightings = []
    for d in _walk(data):
        bus, numa = d.get("bus"), d.get("numa")
        pci = normal_bdf(str(bus.get("bdf", ""))) if isinstance(bus, dict) and "gpu" in d else None
        if pci is None:
            continue
        node = numa.get("node") if isinstance(numa, dict) else None
        nodes = frozenset({node}) if isinstance(node, int) and node >= 0 else None
        sightings.append(Sighting("amd-smi", "amd", pci, numa_nodes=nodes))
    return _Said(tuple(sightings), frozenset({"amd"}), count=len(sightings))


def _rocm_smi(env: Mapping[str, str]) -> _Said:
    data = _json(_run(["rocm-smi", "--showbus", "--showtoponuma", "--json"], env, TOOL_TIMEOUT), "rocm-smi")
    sightings = []
    for card, d in sorted(data.items() if isinstance(data, dict) else ()):
        pci = normal_bdf(str(d.get("PCI Bus", ""))) if isinstance(d, dict) and card.startswith("card") else None
        if pci is None:
            continue
        nodes = _node_set(str(d.get("(Topology) Numa Node", "")))
        sightings.append(Sighting("rocm-smi", "amd", pci, numa_nodes=nodes))
    return _Said(tuple(sightings), frozenset({"amd"}), count=len(sightings))


def _xpu_smi(env: Mapping[str, str]) -> _Said:
    data = _json(_run(["xpu-smi", "discovery", "-j"], env, TOOL_TIMEOUT), "xpu-smi")
    devices = data.get("device_list") if isinstance(data, dict) else None
    sightings = [Sighting("xpu-smi", "intel", normal_bdf(str(d.get("pci_bdf_address", ""))))
                 for d in (devices if isinstance(devices, list) else ()) if isinstance(d, dict) and normal_bdf(str(d.get("pci_bdf_address", "")))]
    return _Said(tuple(sightings), frozenset({"intel"}), count=len(sightings))


def parse_npu_smi(text: str) -> list[str]:
    """The PCI addresses of ``npu-smi info``'s table (its ``Bus-Id`` cells), in the table's order."""
    found = []
    for line in text.splitlines():
        for cell in line.split("|"):
            pci = normal_bdf(cell.strip())
            if pci is not None and pci not in found:
                found.append(pci)
    return found


def _npu_smi(env: Mapping[str, str]) -> _Said:
    found = parse_npu_smi(_run(["npu-smi", "info"], env, TOOL_TIMEOUT))
    if not found:
        raise _Unavailable("npu-smi info printed no Bus-Id")
    return _Said(tuple(Sighting("npu-smi", "ascend", pci) for pci in found), frozenset({"ascend"}),
                 count=len(found))


# ------------------------------------------------------------------------------------------------ torch
#: Run in a child with the caller's environment: the runtime reads the visibility variables when it starts, and
#: the caller keeps no CUDA context. Prints one JSON line.
_TORCH_PROBE = """
import json
try:
    import torch
except Exception as e:
    print(json.dumps({"absent": "torch is not importable (%s: %s)" % (type(e).__name__, e)}))
    raise SystemExit(0)
out = {"cuda": getattr(torch.version, "cuda", None), "hip": getattr(torch.version, "hip", None), "devices": []}
try:
    if not torch.cuda.is_available():
        out["absent"] = "torch sees no GPU (torch.cuda.is_available() is False)"
    else:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            bus = [getattr(p, k, None) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
            uuid = getattr(p, "uuid", None)
            out["devices"].append({"bus": bus if None not in bus else None,
                                   "uuid": None if uuid is None else str(uuid)})
except Exception as e:
    out["absent"] = "torch.cuda failed: %s: %s" % (type(e).__name__, e)
print(json.dumps(out))
"""


def _torch_importable(env: Mapping[str, str]) -> bool:
    """Whether a child under ``env`` may import torch (same interpreter: same path unless PYTHONPATH differs)."""
    if env.get("PYTHONPATH") != os.environ.get("PYTHONPATH"):
        return True
    return _importable("torch")


def _torch_pci(bus: Any) -> str | None:
    if not (isinstance(bus, list) and len(bus) == 3 and all(isinstance(b, int) and b >= 0 for b in bus)):
        return None
    return normal_bdf(f"{bus[0]:04x}:{bus[1]:02x}:{bus[2]:02x}.0")


def _torch_uuid(raw: Any, vendor: str) -> str | None:
    if not isinstance(raw, str) or not raw or vendor != "nvidia":
        return None
    text = printable(raw)
    return text if text.upper().startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def _torch(env: Mapping[str, str]) -> _Said:
    if not _torch_importable(env):
        raise _Unavailable("torch is not importable")
    lines = _run([sys.executable, "-c", _TORCH_PROBE], env, TORCH_TIMEOUT).strip().splitlines()
    said = _json(lines[-1] if lines else "", "the torch probe")
    if not isinstance(said, dict):
        raise _Unavailable(f"the torch probe printed {excerpt(str(said))}")
    if said.get("absent"):
        raise _Unavailable(printable(str(said["absent"])))
    vendor = "amd" if said.get("hip") else "nvidia"
    devices = [d for d in said.get("devices") or () if isinstance(d, dict)]
    sightings = tuple(Sighting("torch", vendor, _torch_pci(d.get("bus")), _torch_uuid(d.get("uuid"), vendor),
                               cuda_index=k) for k, d in enumerate(devices))
    return _Said(sightings, frozenset({vendor}), visible=len(sightings), notes=_order_notes(sightings, env))


def _order_notes(sightings: Sequence[Sighting], env: Mapping[str, str]) -> tuple[str, ...]:
    """Says when the runtime's order is not PCI bus order, and under which CUDA_DEVICE_ORDER."""
    pcis = [s.pci_address for s in sightings if s.pci_address is not None]
    if len(pcis) < len(sightings) or pcis == sorted(pcis):
        return ()
    order = env.get("CUDA_DEVICE_ORDER") or "FASTEST_FIRST (unset)"
    return (f"torch: the runtime numbers the GPUs {', '.join(pcis)}, not in PCI bus order "
            f"(CUDA_DEVICE_ORDER={order})",)


# ------------------------------------------------------------------------------------------------ visibility
def _entries(value: str) -> list[str]:
    return [e.strip() for e in value.split(",")]


def _listed(value: str | None) -> list[str] | None:
    """A list variable's entries; None when unset or a word (``all``, ``none``, ``void``) or a path."""
    if value is None or not value.strip() or value.strip().lower() in ("all", "none", "void") or "/" in value:
        return None
    return _entries(value)


def _visible_entries(vendor: str, env: Mapping[str, str]) -> tuple[str, list[str]] | None:
    """The variable that decides what ``vendor``'s runtime numbers last, and its entries (None: none is set)."""
    names = list(VISIBILITY_VARIABLES[vendor])
    if vendor == "amd" and _NVIDIA in env and names[-1] not in env:
        names.append(_NVIDIA)                    # HIP reads CUDA_VISIBLE_DEVICES when HIP_VISIBLE_DEVICES is unset
    for var in reversed(names):
        entries = _listed(env.get(var))
        if entries is not None:
            if vendor == "intel":
                entries = list(dict.fromkeys(e.split(".", 1)[0] for e in entries))   # N.sub: one device N
            return var, entries
    return None


def _container_entries(env: Mapping[str, str]) -> list[str] | None:
    """The GPUs ``NVIDIA_VISIBLE_DEVICES`` asks the container runtime for (``4:1``, a MIG slice, counts as GPU 4);
    None when unset, a word, a path, or when it names MIG devices by UUID (they do not say how many GPUs)."""
    entries = _listed(env.get(_CONTAINER))
    if entries is None or any(e.upper().startswith("MIG-") for e in entries):
        return None
    return list(dict.fromkeys(e.rpartition("=")[2].split(":", 1)[0] for e in entries))


def _cuda_sightings(entries: Sequence[str]) -> tuple[Sighting, ...]:
    """``CUDA_VISIBLE_DEVICES``'s entries as the GPUs they name: an index or a UUID (prefix), CUDA index k."""
    out = []
    for k, entry in enumerate(entries):
        if entry.isascii() and entry.isdigit() and len(entry) <= 6:
            out.append(Sighting("visibility", "nvidia", index=int(entry), cuda_index=k))
        elif entry.upper().startswith("GPU-") and len(entry) > 4:
            out.append(Sighting("visibility", "nvidia", uuid=printable(entry), cuda_index=k))
        elif not entry.upper().startswith("MIG-"):
            break                                # CUDA ignores the entries after an invalid one
    return tuple(out)


def _visibility(vendor: str | None, env: Mapping[str, str]) -> _Said:
    if vendor is None:
        raise _Unavailable("no GPU runtime to number (no GPU found)")
    chosen = _visible_entries(vendor, env)
    container = _container_entries(env) if vendor == "nvidia" else None
    if chosen is None and container is None:
        names = VISIBILITY_VARIABLES[vendor] + ((_CONTAINER,) if vendor == "nvidia" else ())
        raise _Unavailable(f"none of {', '.join(names)} is set")
    shown: dict[str, str] = {}
    sightings: tuple[Sighting, ...] = ()
    if chosen is not None:
        var, entries = chosen
        shown["visible count"] = f"{len(entries)} ({var}={excerpt(','.join(entries), escape=True)})"
        if var == _NVIDIA and vendor == "nvidia":
            sightings = _cuda_sightings(entries)
    if container is not None:
        shown["count"] = f"{len(container)} ({_CONTAINER}={excerpt(','.join(container), escape=True)})"
    return _Said(sightings, frozenset({vendor}), count=None if container is None else len(container),
                 visible=None if chosen is None else len(chosen[1]), shown=shown)


# ------------------------------------------------------------------------------------------------ grouping
@dataclass
class _Row:
    vendor: str
    pci_address: str | None
    sightings: list[Sighting]

    def said(self, source: str) -> Sighting | None:
        return next((s for s in self.sightings if s.source == source), None)


def _same_uuid(a: str | None, b: str | None) -> bool:
    """Whether two UUIDs name one GPU (one may be a prefix of the other, as the visibility variables allow)."""
    if not a or not b:
        return False
    a, b = a.lower(), b.lower()
    return a.startswith(b) or b.startswith(a)


def _find(rows: Sequence[_Row], s: Sighting) -> _Row | None:
    """The GPU a sighting is of: by PCI address, else UUID, else index (nvidia-smi's, then numabind's), else CUDA
    index (numabind's)."""
    same = [r for r in rows if r.vendor == s.vendor]
    if s.pci_address is not None:
        return next((r for r in same if r.pci_address == s.pci_address), None)
    if s.uuid is not None:
        return next((r for r in same if any(_same_uuid(s.uuid, o.uuid) for o in r.sightings)), None)
    for source, key in (("nvidia-smi", "index"), ("sysfs", "index"), ("sysfs", "cuda_index")):
        want = getattr(s, key)
        if want is not None:
            hit = next((r for r in same if (o := r.said(source)) is not None and getattr(o, key) == want), None)
            if hit is not None:
                return hit
    return None


def _group(answers: Mapping[str, _Said]) -> list[_Row]:
    rows: list[_Row] = []
    for source in _ordered(answers):
        for s in answers[source].sightings:
            row = _find(rows, s)
            if row is None and source == "visibility":
                continue                         # an entry naming no GPU: the visible count says it
            if row is None or row.said(source) is not None:
                row = _Row(s.vendor, s.pci_address, [])
                rows.append(row)
            row.sightings.append(s)
    return rows


def _label(row: _Row) -> str:
    sysfs = row.said("sysfs")
    if row.pci_address is not None:
        seen = f" (numabind GPU {sysfs.cuda_index})" if sysfs is not None and sysfs.cuda_index is not None else ""
        return f"GPU {row.pci_address}{seen}"
    s = row.sightings[0]
    number = s.cuda_index if s.cuda_index is not None else s.index
    return f"{s.source} GPU {number}" + (f" ({s.uuid})" if s.uuid else "")


# ------------------------------------------------------------------------------------------------ comparing
def _differ_exact(values: Sequence[Any]) -> bool:
    return len(set(values)) > 1


def _differ_uuid(values: Sequence[Any]) -> bool:
    return any(not _same_uuid(a, b) for a in values for b in values)


def _differ_nodes(values: Sequence[Any]) -> bool:
    common = frozenset.intersection(*values) if values else frozenset()
    return len(values) > 1 and not common


#: The fields compared per GPU: what is shown, how to read it off a sighting, when values differ, how to show one.
_FIELDS: tuple[tuple[str, str, Callable[[Sequence[Any]], bool], Callable[[Any], str]], ...] = (
    ("PCI address", "pci_address", _differ_exact, str),
    ("UUID", "uuid", _differ_uuid, str),
    ("NUMA node", "numa_nodes", _differ_nodes, format_cpulist),
    ("local CPUs", "local_cpus", _differ_exact, format_cpulist),
    ("index", "index", _differ_exact, str),
)


def _hint(name: str, row: _Row, env: Mapping[str, str]) -> str:
    if name == "UUID":
        return "a GPU named by UUID in CUDA_VISIBLE_DEVICES lands where nvidia-smi's UUID says"
    if name == "index":
        return ("numabind numbers GPUs in PCI bus order (as CUDA does under CUDA_DEVICE_ORDER=PCI_BUS_ID); "
                "name GPUs by UUID (nvidia-smi -L) to be sure which board an index is")
    if name == "CUDA index" and row.said("torch") is not None and env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        order = env.get("CUDA_DEVICE_ORDER") or "unset, so FASTEST_FIRST"
        return (f"CUDA_DEVICE_ORDER is {order}: the CUDA runtime numbers the fastest GPU first, numabind in PCI "
                f"bus order; set CUDA_DEVICE_ORDER=PCI_BUS_ID")
    if name == "NUMA node":
        return "numabind places the GPU by sysfs numa_node (the firmware's); check the BIOS's NUMA/SRAT settings"
    return ""


def _field_disagreements(row: _Row, label: str, env: Mapping[str, str]) -> list[Disagreement]:
    out = []
    for name, attr, differ, show in _FIELDS:
        said = {s.source: getattr(s, attr) for s in row.sightings if getattr(s, attr) is not None}
        if len(said) > 1 and differ(list(said.values())):
            values = FrozenMap({src: show(v) for src, v in said.items()})
            out.append(Disagreement(label, name, values, _hint(name, row, env)))
    return out


def _presence(row: _Row, label: str, answers: Mapping[str, _Said], env: Mapping[str, str]) -> list[Disagreement]:
    """A GPU some listing sources list and others do not; one some runtimes number and others do not."""
    out = []
    listing = {src: ("listed" if row.said(src) is not None else "not listed") for src in _LISTING
               if src in answers and answers[src].count is not None and row.vendor in answers[src].vendors}
    if len(set(listing.values())) > 1:
        out.append(Disagreement(label, "listed", FrozenMap(listing)))
    numbering: dict[str, str] = {}
    for src in _VISIBLE:
        s = row.said(src)
        if s is not None and s.cuda_index is not None:
            numbering[src] = str(s.cuda_index)
        elif (src != "visibility" and src in answers and answers[src].visible is not None
              and row.vendor in answers[src].vendors and (src != "sysfs" or s is not None)):
            numbering[src] = "not visible"
    if len(numbering) > 1 and len(set(numbering.values())) > 1:
        out.append(Disagreement(label, "CUDA index", FrozenMap(numbering), _hint("CUDA index", row, env)))
    return out


def _count_disagreements(vendor: str, answers: Mapping[str, _Said]) -> list[Disagreement]:
    out = []
    for name, attr in (("count", "count"), ("visible count", "visible")):
        said = {src: a for src, a in answers.items() if getattr(a, attr) is not None and vendor in a.vendors}
        values = {src: getattr(a, attr) for src, a in said.items()}
        if len(set(values.values())) > 1:
            shown = FrozenMap({src: a.shown.get(name, str(values[src])) for src, a in said.items()})
            hint = ("the container exposes other GPUs than it was asked for" if name == "count" and
                    "visibility" in said else "")
            out.append(Disagreement(f"{vendor} GPUs", name, shown, hint))
    return out


# ------------------------------------------------------------------------------------------------ the check
def _ask(answers: dict[str, _Said], unavailable: dict[str, str], source: str, ask: Callable[[], _Said]) -> None:
    try:
        answers[source] = ask()
    except _Unavailable as e:
        unavailable[source] = str(e)
        log.debug("GPU cross-check: %s unavailable: %s", source, e)


#: The sources that describe this host whatever the topology's root: asked only for the live root, unless told.
_HOST_SOURCES = ("nvml", "nvidia-smi", "nvidia-smi topo", "amd-smi", "rocm-smi", "xpu-smi", "npu-smi", "torch")


def _collect(topology: Topology, env: Mapping[str, str], tools: bool) -> tuple[dict[str, _Said], dict[str, str]]:
    answers: dict[str, _Said] = {}
    unavailable: dict[str, str] = {}
    _ask(answers, unavailable, "sysfs", lambda: _sysfs(topology, env))
    if tools:
        _ask_host(answers, unavailable, env)
    else:
        for source in _HOST_SOURCES:
            unavailable[source] = (f"not asked: the topology is a replayed machine ({topology.root}); this host's "
                                   f"tools would describe this host")
    vendor = topology.gpus[0].vendor if topology.gpus else next(
        (s.vendor for a in answers.values() for s in a.sightings), None)
    _ask(answers, unavailable, "visibility", lambda: _visibility(vendor, env))
    return answers, unavailable


def _ask_host(answers: dict[str, _Said], unavailable: dict[str, str], env: Mapping[str, str]) -> None:
    """NVML, the vendors' tools and torch: what this host says."""
    _ask(answers, unavailable, "nvml", _nvml)
    _ask(answers, unavailable, "nvidia-smi", lambda: _nvidia_smi(env))
    if "nvidia-smi" in answers:
        _ask(answers, unavailable, "nvidia-smi topo", lambda: _nvidia_topo(env))
    else:
        unavailable["nvidia-smi topo"] = unavailable["nvidia-smi"]
    _ask(answers, unavailable, "amd-smi", lambda: _amd_smi(env))
    if "amd-smi" in answers:
        unavailable["rocm-smi"] = "not asked: amd-smi answered"
    else:
        _ask(answers, unavailable, "rocm-smi", lambda: _rocm_smi(env))
    _ask(answers, unavailable, "xpu-smi", lambda: _xpu_smi(env))
    _ask(answers, unavailable, "npu-smi", lambda: _npu_smi(env))
    if any(a.sightings for a in answers.values()):
        _ask(answers, unavailable, "torch", lambda: _torch(env))
    else:                                        # importing torch takes seconds: not for a machine without GPUs
        unavailable["torch"] = "not asked: no other source found a GPU"


def cross_check_gpus(topology: Topology, *, env: Mapping[str, str] | None = None,
                     tools: bool | None = None) -> GpuIdentity:
    """Every GPU of ``topology`` (and any other a source lists) as each source present sees it, and where they
    disagree. ``env`` (default ``os.environ``) is the environment of the process whose GPUs are checked: its
    visibility variables, ``CUDA_DEVICE_ORDER``, and the ``PATH`` the tools are found on. ``tools``: whether to
    ask this host's NVML, vendor tools and torch; by default only when ``topology`` is the live root's (a
    replayed machine is another host's: only its own files and the visibility variables are compared)."""
    env = os.environ if env is None else env
    if tools is None:
        tools = os.path.realpath(topology.root) == "/"
    answers, unavailable = _collect(topology, env, tools)
    rows = _group(answers)
    seen = []
    disagreements: list[Disagreement] = []
    for vendor in [v for v in NAMES if any(r.vendor == v for r in rows) or
                   any(v in a.vendors and (a.count or a.visible) for a in answers.values())]:
        disagreements += _count_disagreements(vendor, answers)
    for row in rows:
        label = _label(row)
        seen.append(SeenGpu(label, row.vendor, row.pci_address, tuple(row.sightings)))
        disagreements += _field_disagreements(row, label, env)
        disagreements += _presence(row, label, answers, env)
    notes = tuple(n for a in answers.values() for n in a.notes)
    for d in disagreements:
        log.info("GPU identity: %s", d.describe())
    return GpuIdentity(tuple(_ordered(answers)), FrozenMap(unavailable), tuple(seen), tuple(disagreements), notes)
