"""``numabind check --measure``: the node-to-node distances measured (:func:`measure`), beside the firmware's.

For every node with CPUs this process may use (a *source*) and every node with memory it may use (a *target*), a
cell is measured in a short-lived child (``python -m numabind.preflight.measure``), never in the caller:

* the child binds all its threads to the source node's CPUs (:func:`numabind.bind_current`) and reads them back;
* each target's buffers are bound there (:func:`numabind.bind_memory`, ``mbind``), faulted in and **verified**
  with ``move_pages`` (:func:`numabind.memory.page_placement`) before any cell over them is measured: a cell whose
  pages are not all on its target is not measured, and says so;
* the compiled core measures (``csrc/numabind.c``): a dependent-load chase around one random cycle of cache lines
  over a buffer larger than the last-level cache (ns per load, the shape of Intel MLC's idle latency), a streaming
  read and a copy (MB/s, a copy counted as bytes read plus written, as STREAM does).

The run is bounded: ``seconds`` (counted once the buffers are ready) is split across the cells (and the GPU copies),
a cell that would start after the deadline is reported as not measured, and the parent kills a child that overruns
by :data:`MARGIN` seconds. With
torch and a CUDA device, pinned host memory on each node is copied to each GPU (nvbandwidth's ``host_to_device``),
which names the fastest node for each GPU and whether its plan chose it. No figure is asserted anywhere: it is
this machine's, as measured.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..cpulist import format_cpulist
from .probes import run_module

if TYPE_CHECKING:  # pragma: no cover
    from ..topology import Topology

__all__ = ["DEFAULT_SECONDS", "MARGIN", "Cell", "GpuCopy", "Measurement", "buffer_bytes", "child_main", "measure"]

#: ``--seconds`` by default.
DEFAULT_SECONDS = 10.0
#: Seconds the child may run past ``seconds`` (its start, and binding, writing and verifying the buffers, which
#: come before the measuring clock starts) before it is killed.
MARGIN = 30.0
#: The chase's stride: one cache line.
STRIDE = 64
#: The smallest buffer measured, and the largest.
MIN_BUFFER = 16 << 20
MAX_BUFFER = 1 << 30
#: Bytes of pinned host memory each GPU copy moves.
GPU_COPY_BYTES = 64 << 20
#: The share of a cell's time the chase gets; the read and the copy share the rest.
CHASE_SHARE = 0.5
#: The share of ``seconds`` the GPU copies get when there are GPUs to copy to.
GPU_SHARE = 0.4


@dataclass(frozen=True)
class Cell:
    """One source node -> target node cell: ``cpus`` the child held (read back after the bind), ``pages`` of its
    buffers and where they were (``by_node``, checked before measuring); ``latency_ns`` (ns per dependent load),
    ``read_mb_s`` and ``copy_mb_s`` (MB/s, 10^6 bytes); ``error`` when not measured (``out_of_time``: the
    deadline came first)."""

    source: int
    target: int
    cpus: frozenset[int] = frozenset()
    pages: int = 0
    by_node: Mapping[int, int] = field(default_factory=dict)
    latency_ns: float | None = None
    read_mb_s: float | None = None
    copy_mb_s: float | None = None
    loads: int = 0
    error: str | None = None
    out_of_time: bool = False

    @property
    def measured(self) -> bool:
        return self.error is None and self.latency_ns is not None

    @property
    def on_target(self) -> bool:
        """Every page of the cell's buffers was on the target node when it was measured."""
        return self.pages > 0 and dict(self.by_node) == {self.target: self.pages}

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "cpus": format_cpulist(self.cpus),
                "pages": self.pages, "by_node": {str(n): c for n, c in sorted(self.by_node.items())},
                "measured": self.measured, "on_target": self.on_target, "latency_ns": _round(self.latency_ns),
                "read_mb_s": _round(self.read_mb_s), "copy_mb_s": _round(self.copy_mb_s), "loads": self.loads,
                "error": self.error, "out_of_time": self.out_of_time}


@dataclass(frozen=True)
class GpuCopy:
    """Pinned host memory on each node copied to GPU ``gpu``: ``mb_s`` node -> MB/s (None: not measured, why in
    ``errors``); ``planned`` the memory nodes its plan chose."""

    gpu: int
    mb_s: Mapping[int, float | None]
    planned: frozenset[int] = frozenset()
    errors: Mapping[int, str] = field(default_factory=dict)

    @property
    def fastest(self) -> int | None:
        measured = {n: v for n, v in self.mb_s.items() if v is not None}
        return max(measured, key=lambda n: measured[n]) if measured else None

    @property
    def plan_chose_fastest(self) -> bool | None:
        return None if self.fastest is None or not self.planned else self.fastest in self.planned

    def describe(self) -> str:
        figures = ", ".join(f"node {n}: {_figure(v)}" for n, v in sorted(self.mb_s.items()))
        if self.fastest is None:
            return f"gpu {self.gpu}: host to device not measured: {'; '.join(self.errors.values()) or figures}"
        chose = {True: "the plan chose it", False: "the plan chose node " + format_cpulist(self.planned),
                 None: "no plan to compare"}[self.plan_chose_fastest]
        return f"gpu {self.gpu}: host to device MB/s: {figures}; fastest from node {self.fastest} ({chose})"

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "mb_s": {str(n): _round(v) for n, v in sorted(self.mb_s.items())},
                "planned": format_cpulist(self.planned), "fastest": self.fastest,
                "plan_chose_fastest": self.plan_chose_fastest,
                "errors": {str(n): e for n, e in sorted(self.errors.items())}}


@dataclass(frozen=True)
class Measurement:
    """The matrices: ``sources`` (nodes with CPUs, the rows), ``targets`` (nodes with memory, the columns),
    ``cells``; the firmware's ``slit`` (source -> target -> distance) and ``hmat`` (target -> its HMAT figures);
    ``gpus`` the GPU copies, or ``gpu_skipped`` why not; ``error`` when the child failed."""

    sources: tuple[int, ...]
    targets: tuple[int, ...]
    cells: tuple[Cell, ...]
    slit: Mapping[int, Mapping[int, int]]
    hmat: Mapping[int, Mapping[str, Any]]
    buffer_bytes: int
    seconds_asked: float
    seconds: float = 0.0
    gpus: tuple[GpuCopy, ...] = ()
    gpu_skipped: str | None = None
    error: str | None = None

    def cell(self, source: int, target: int) -> Cell | None:
        return next((c for c in self.cells if c.source == source and c.target == target), None)

    @property
    def ok(self) -> bool:
        """No failure: every cell measured over pages on its target, or not reached in the time given."""
        return self.error is None and all(c.out_of_time or (c.measured and c.on_target) for c in self.cells)

    def problems(self) -> list[str]:
        out = [f"measure: {self.error}"] if self.error else []
        return out + [f"measure: node {c.source} -> node {c.target}: {c.error}" for c in self.cells
                      if not c.out_of_time and not (c.measured and c.on_target) and c.error]

    def matrix(self, value: Callable[[Cell], float | None]) -> list[str]:
        """Rows of one matrix in Intel MLC's shape: a header of target nodes, a row per source node."""
        lines = ["".ljust(10) + "Numa node", "Numa node " + "".join(f"{t:>10}" for t in self.targets)]
        for s in self.sources:
            row = []
            for t in self.targets:
                c = self.cell(s, t)
                row.append(_figure(value(c) if c is not None and c.measured else None))
            lines.append(f"{s:>9} " + "".join(f"{v:>10}" for v in row))
        return lines

    def describe(self) -> str:
        mib = self.buffer_bytes >> 20
        lines = [f"measured ({self.seconds:.2f} s of {self.seconds_asked:g} s asked; {mib} MiB buffers on each node, "
                 f"pages verified on it)", "rows: the node of the CPUs; columns: the node of the memory"]
        if self.error:
            lines.append(f"  not measured: {self.error}")
        parts: list[tuple[str, Callable[[Cell], float | None]]] = [
            ("Idle latency (ns per dependent load)", lambda c: c.latency_ns),
            ("Read bandwidth (MB/s)", lambda c: c.read_mb_s),
            ("Copy bandwidth (MB/s, read + written)", lambda c: c.copy_mb_s)]
        for title, value in parts:
            lines += ["", title] + self.matrix(value)
        lines += ["", "SLIT distances (firmware)"] + self._slit_rows()
        lines += [""] + self._hmat_lines()
        lines += [f"not measured: node {c.source} -> node {c.target}: {c.error}" for c in self.cells if c.error]
        if self.gpus:
            lines.append("GPU copies (pinned host memory on each node -> device):")
            lines += [f"  {g.describe()}" for g in self.gpus]
        elif self.gpu_skipped:
            lines.append(f"GPU copies: skipped: {self.gpu_skipped}")
        return "\n".join(lines)

    def _slit_rows(self) -> list[str]:
        lines = ["".ljust(10) + "Numa node", "Numa node " + "".join(f"{t:>10}" for t in self.targets)]
        for s in self.sources:
            row = self.slit.get(s, {})
            lines.append(f"{s:>9} " + "".join(f"{row.get(t, '-'):>10}" for t in self.targets))
        return lines

    def _hmat_lines(self) -> list[str]:
        if not self.hmat:
            return ["HMAT: the kernel exposes no figures (no nodeN/access0 in sysfs)"]
        lines = ["HMAT (firmware, from each node's best initiators):"]
        for t, a in sorted(self.hmat.items()):
            lines.append(f"  node {t} from node {a.get('initiators') or '-'}: read latency "
                         f"{_figure(a.get('read_latency'))} ns, read bandwidth {_figure(a.get('read_bandwidth'))} "
                         f"MB/s, write bandwidth {_figure(a.get('write_bandwidth'))} MB/s")
        return lines

    def to_dict(self) -> dict[str, Any]:
        def grid(value: Callable[[Cell], float | None]) -> dict[str, dict[str, float | None]]:
            return {str(s): {str(t): _round(value(c)) if (c := self.cell(s, t)) is not None and c.measured else None
                             for t in self.targets} for s in self.sources}

        return {"ok": self.ok, "seconds": round(self.seconds, 3), "seconds_asked": self.seconds_asked,
                "buffer_bytes": self.buffer_bytes, "sources": list(self.sources), "targets": list(self.targets),
                "latency_ns": grid(lambda c: c.latency_ns), "read_mb_s": grid(lambda c: c.read_mb_s),
                "copy_mb_s": grid(lambda c: c.copy_mb_s),
                "slit": {str(s): {str(t): self.slit.get(s, {}).get(t) for t in self.targets} for s in self.sources},
                "hmat": {str(t): dict(a) for t, a in sorted(self.hmat.items())},
                "cells": [c.to_dict() for c in self.cells], "gpus": [g.to_dict() for g in self.gpus],
                "gpu_skipped": self.gpu_skipped, "error": self.error, "problems": self.problems()}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _figure(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if isinstance(value, float) else str(value)


# ----------------------------------------------------------------------------- the parent's side
def buffer_bytes(topology: Topology, targets: Sequence[int]) -> int:
    """Each buffer's size: twice the largest last-level cache (at least :data:`MIN_BUFFER`), no more than an
    eighth of the smallest target node's memory nor :data:`MAX_BUFFER`; a whole number of MiB."""
    caches = [c.size_bytes for c in topology.caches if c.type in ("Unified", "Data") and c.size_bytes]
    wanted = max(2 * max(caches, default=0), MIN_BUFFER)
    smallest = min((topology.nodes[t].memory_bytes for t in targets if topology.nodes[t].memory_bytes),
                   default=MAX_BUFFER * 8)
    return max(1 << 20, min(wanted, smallest // 8, MAX_BUFFER) >> 20 << 20)


def _sources(topology: Topology) -> dict[int, frozenset[int]]:
    out = {}
    for n, node in sorted(topology.nodes.items()):
        cpus = node.cpus & topology.allowed_cpus
        if cpus:
            out[n] = cpus
    return out


def _targets(topology: Topology) -> list[int]:
    return [n for n, node in sorted(topology.nodes.items()) if node.has_memory and n in topology.allowed_nodes]


def _planned(topology: Topology) -> dict[int, frozenset[int]]:
    from ..strategies import plan_table

    rows = plan_table(topology, mode="node", policy="bind")
    return {r.gpu: r.plan.mem_nodes or frozenset() for r in rows if r.plan is not None}


def measure(topology: Topology, *, seconds: float = DEFAULT_SECONDS, backend: str | None = None,
            progress: bool | None = None) -> Measurement:
    """Measure every source -> target cell of this machine (``topology`` must be this machine's) in a child, in
    about ``seconds``; ``progress`` (default: when stderr is a terminal) shows a progress line on stderr."""
    from ..errors import PlanError

    if not seconds > 0:
        raise PlanError(f"check --measure: --seconds {seconds!r} gives no time to measure; give a number above 0")
    sources, targets = _sources(topology), _targets(topology)
    size = buffer_bytes(topology, targets)
    slit = {s: {t: d for t, d in topology.nodes[s].distances.items()} for s in sources}
    hmat = {t: access.to_dict() for t in targets if (access := topology.nodes[t].access) is not None}
    shown = sys.stderr.isatty() if progress is None else progress
    started = time.monotonic()
    request = {"sources": sources, "targets": targets, "size": size, "seconds": float(seconds),
               "backend": backend, "progress": shown, "gpus": _planned(topology) if topology.gpus else None}
    answer = _run(request, seconds + MARGIN, shown)
    cells = tuple(_cell(raw) for raw in answer.get("cells") or ())
    gpus = tuple(_gpu(raw) for raw in answer.get("gpus") or ())
    return Measurement(tuple(sources), tuple(targets), cells, slit, hmat, size, float(seconds),
                       seconds=time.monotonic() - started, gpus=gpus, gpu_skipped=answer.get("gpu_skipped"),
                       error=answer.get("error"))


def _run(request: Mapping[str, Any], timeout: float, progress: bool) -> dict[str, Any]:
    return run_module("numabind.preflight.measure", request, timeout=timeout, who="the measuring child",
                      hint="give fewer --seconds, or run it on a less loaded machine", show_stderr=progress)


def _cell(raw: Mapping[str, Any]) -> Cell:
    return Cell(int(raw["source"]), int(raw["target"]), frozenset(raw.get("cpus") or ()), int(raw.get("pages") or 0),
                {int(n): int(c) for n, c in (raw.get("by_node") or {}).items()}, raw.get("latency_ns"),
                raw.get("read_mb_s"), raw.get("copy_mb_s"), int(raw.get("loads") or 0), raw.get("error"),
                bool(raw.get("out_of_time")))


def _gpu(raw: Mapping[str, Any]) -> GpuCopy:
    return GpuCopy(int(raw["gpu"]), {int(n): v for n, v in (raw.get("mb_s") or {}).items()},
                   frozenset(raw.get("planned") or ()), {int(n): e for n, e in (raw.get("errors") or {}).items()})


# ----------------------------------------------------------------------------- the child's side
class _Progress:
    """One line on stderr, rewritten in place (only when asked: the parent's stderr is a terminal)."""

    def __init__(self, shown: bool, total: int, deadline: float) -> None:
        self.shown, self.total, self.deadline, self.done = shown, total, deadline, 0

    def step(self, what: str) -> None:
        self.done += 1
        if self.shown:
            left = max(0.0, self.deadline - time.monotonic())
            sys.stderr.write(f"\rmeasuring {what} ({self.done}/{self.total}, {left:.1f} s left)\x1b[K")
            sys.stderr.flush()

    def end(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


class _Target:
    """One target node's buffers: ``chase`` (linked into one cycle) and ``stream`` (read whole, copied half to
    half), bound there and verified; ``error`` when that failed."""

    def __init__(self, node: int, size: int) -> None:
        import mmap

        self.node, self.size = node, size
        self.chase, self.stream = mmap.mmap(-1, size), mmap.mmap(-1, size)
        self.pages = 0
        self.by_node: dict[int, int] = {}
        self.error: str | None = None

    def prepare(self) -> None:
        from ..errors import NumabindError
        from ..memory import bind_memory, page_placement

        ffi, lib = _core()
        try:
            for area in (self.chase, self.stream):
                done = bind_memory(area, "bind", nodes={self.node}, strict=False, verify=False)
                if not done.applied:
                    raise NumabindError(f"mbind of its buffer onto node {self.node} failed: {done.error}")
            lib.nb_chase_link(ffi.from_buffer(self.chase), self.size, STRIDE, 0x5EED + self.node)
            lib.nb_touch_range(ffi.from_buffer(self.stream), self.size, 4096)
            for area in (self.chase, self.stream):
                placed = page_placement(area)
                self.pages += placed.pages
                for n, c in placed.by_node.items():
                    self.by_node[n] = self.by_node.get(n, 0) + c
            if self.by_node != {self.node: self.pages}:
                where = ", ".join(f"{c} on node {n}" for n, c in sorted(self.by_node.items())) or "none on a node"
                self.error = f"its pages are not all on node {self.node} ({self.pages} pages: {where})"
        except NumabindError as e:
            self.error = str(e)

    def measure(self, budget_s: float) -> dict[str, Any]:
        ffi, lib = _core()
        chase_ns = int(budget_s * CHASE_SHARE * 1e9)
        stream_ns = int(budget_s * (1 - CHASE_SHARE) / 2 * 1e9)
        per_load, count = ffi.new("double *"), ffi.new("unsigned long long *")
        lib.nb_chase(ffi.from_buffer(self.chase), chase_ns, per_load, count)
        latency, loads = per_load[0], int(count[0])
        rate = ffi.new("double *")
        buf = ffi.from_buffer(self.stream)
        lib.nb_stream_read(buf, self.size, stream_ns, rate, count)
        read = rate[0] / 1e6
        half = self.size // 2
        lib.nb_stream_copy(buf + half, buf, half, stream_ns, rate, count)
        return {"latency_ns": latency, "loads": loads, "read_mb_s": read, "copy_mb_s": rate[0] / 1e6}

    def close(self) -> None:
        self.chase.close()
        self.stream.close()


def _core() -> tuple[Any, Any]:
    """The compiled core's ``ffi`` and ``lib``, its version checked (:func:`numabind.live.native_lib`)."""
    from ..live import native_lib

    lib = native_lib()
    from .._native import ffi   # loaded already: native_lib() checked it

    return ffi, lib


def _bind_cpus(cpus: frozenset[int]) -> frozenset[int]:
    """Bind every thread of the child to ``cpus``; the CPUs the kernel then says it holds."""
    from ..bind import bind_current
    from ..plan import Plan

    bind_current(Plan(cpus=cpus), strict=True)
    return frozenset(os.sched_getaffinity(0))


def _cells(request: Mapping[str, Any], seconds: float) -> list[dict[str, Any]]:
    """Every source -> target cell, in ``seconds`` from the moment the buffers are bound, written and verified."""
    from ..errors import NumabindError

    sources: dict[int, frozenset[int]] = request["sources"]
    targets = [_Target(t, int(request["size"])) for t in request["targets"]]
    out: list[dict[str, Any]] = []
    try:
        for t in targets:
            t.prepare()
        deadline = time.monotonic() + seconds
        progress = _Progress(bool(request.get("progress")), len(sources) * len(targets), deadline)
        for s, cpus in sources.items():
            try:
                held, error = _bind_cpus(cpus), None
            except NumabindError as e:
                held, error = frozenset(), f"binding to node {s}'s CPUs {format_cpulist(cpus)} failed: {e}"
            if error is None and held != cpus:
                error = f"the child holds CPUs {format_cpulist(held)}, not node {s}'s {format_cpulist(cpus)}"
            for t in targets:
                left = len(sources) * len(targets) - len(out)
                out.append(_one(s, t, sorted(held), error, deadline, left))
                progress.step(f"node {s} -> node {t.node}")
        progress.end()
    finally:
        for t in targets:
            t.close()
    return out


def _one(source: int, t: _Target, held: list[int], error: str | None, deadline: float,
         left: int) -> dict[str, Any]:
    cell: dict[str, Any] = {"source": source, "target": t.node, "cpus": held, "pages": t.pages,
                            "by_node": {str(n): c for n, c in t.by_node.items()}}
    now = time.monotonic()
    if error or t.error:
        return dict(cell, error=error or t.error)
    if now >= deadline:
        return dict(cell, error="out of time (give more --seconds)", out_of_time=True)
    return dict(cell, **t.measure((deadline - now) / left))


def _gpu_copies(request: Mapping[str, Any], seconds: float) -> tuple[list[dict[str, Any]], str | None]:
    """Pinned host memory on each target node copied to each GPU, ``seconds`` (from torch's import on) split
    evenly."""
    planned: dict[int, frozenset[int]] | None = request.get("gpus")
    if planned is None:
        return [], "no GPU on this machine (sysfs lists none)"
    try:
        import torch  # optional: only to copy to the GPUs
    except ImportError:
        return [], "torch is not importable (pip install torch to measure host to device copies)"
    if not torch.cuda.is_available():
        return [], "torch.cuda.is_available() is False (no CUDA device, or no driver)"
    gpus = sorted(planned) or list(range(torch.cuda.device_count()))
    nodes: list[int] = request["targets"]
    deadline = time.monotonic() + seconds
    out = []
    for k, gpu in enumerate(gpus):
        mb_s: dict[str, float | None] = {}
        errors: dict[str, str] = {}
        for j, node in enumerate(nodes):
            left = (len(gpus) - k) * len(nodes) - j
            budget = (deadline - time.monotonic()) / left
            if budget <= 0:
                mb_s[str(node)], errors[str(node)] = None, "out of time (give more --seconds)"
                continue
            try:
                mb_s[str(node)] = _host_to_device(torch, gpu, node, budget)
            except Exception as e:  # noqa: BLE001 - any failure of torch or the bind is this cell's, reported
                mb_s[str(node)], errors[str(node)] = None, f"{type(e).__name__}: {e}"
        out.append({"gpu": gpu, "mb_s": mb_s, "planned": sorted(planned.get(gpu, ())), "errors": errors})
    return out, None


def _host_to_device(torch: Any, gpu: int, node: int, budget: float) -> float:
    """MB/s of pinned host memory allocated under a bind to ``node`` (verified there) copied to ``gpu``."""
    from ..bind import bind_current
    from ..memory import page_placement
    from ..plan import Plan

    bind_current(Plan(mem_policy="bind", mem_nodes=frozenset({node})), strict=True)
    try:
        host = torch.empty((GPU_COPY_BYTES,), dtype=torch.uint8, pin_memory=True)
    finally:
        bind_current(Plan(mem_policy="default"), strict=False)
    placed = page_placement(host)
    if dict(placed.by_node) != {node: placed.pages}:
        raise RuntimeError(f"the pinned memory is not all on node {node} ({placed.describe()})")
    device = torch.empty((GPU_COPY_BYTES,), dtype=torch.uint8, device=f"cuda:{gpu}")
    copies, started = 0, time.monotonic()
    while True:
        device.copy_(host, non_blocking=True)
        copies += 1
        torch.cuda.synchronize(gpu)
        elapsed = time.monotonic() - started
        if elapsed >= budget:
            return float(copies * GPU_COPY_BYTES / elapsed / 1e6)


def _answer_for(request: Mapping[str, Any]) -> dict[str, Any]:
    from ..errors import NumabindError

    try:
        _core()
    except (ImportError, NumabindError) as e:
        return {"error": f"the measuring loops are numabind's compiled core, which cannot load: {e} (install gcc and "
                         f"python3-dev, then reinstall numabind)", "cells": [], "gpus": []}
    seconds = float(request["seconds"])
    share = GPU_SHARE if request.get("gpus") is not None else 0.0
    answer: dict[str, Any] = {"cells": _cells(request, seconds * (1 - share))}
    answer["gpus"], answer["gpu_skipped"] = _gpu_copies(request, seconds * share)
    return answer


def child_main() -> int:
    """The child: the request (pickled by :func:`measure`) on stdin, one JSON object on stdout."""
    request = pickle.loads(sys.stdin.buffer.read())
    if request.get("backend"):   # the binds below choose their backend as every bind does
        os.environ["NUMABIND_BACKEND"] = request["backend"]
    print(json.dumps(_answer_for(request)))
    return 0


if __name__ == "__main__":  # pragma: no cover - run by measure() in a child
    sys.exit(child_main())
