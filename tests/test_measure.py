"""``numabind check --measure`` (issue 44 section 3): the C primitives' contracts (bounded time, the cycle, the
buffer sizes), this host's matrices (every cell measured from its node's CPUs over pages verified on its node, on
time), the matrices' shape on a fake multi-node machine, and the GPU copy path with a fake torch in the child.

No test asserts a figure's value: only that it is there and positive (a loaded runner or a TCG guest measures
nothing of use). The nodes and CPUs are this machine's, derived at run time.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from numabind.preflight import check
from numabind.preflight import measure as m
from numabind.topology import discover
from tests.fakesys import memory_only_nodes
from tests.kernel import ROOT, numabind_cli

native = pytest.importorskip("numabind._native", reason="the native core is not installed")
ffi, lib = native.ffi, native.lib

#: Seconds a run may take past the seconds asked (the child's start, the buffers' set-up) in these tests.
SLACK = 10.0
#: A fake torch package for the measuring child: tests/faketorch.py's module with CUDA devices whose tensors
#: record their copies; absent (ImportError) when $FAKE_TORCH_GPUS is unset.
TORCH_INIT = """
import os, sys
if os.environ.get("FAKE_TORCH_GPUS") is None:
    raise ImportError("no module named torch (fake)")
from tests.faketorch import FakeTensor, fake_torch
torch = fake_torch()
count = int(os.environ["FAKE_TORCH_GPUS"])
host_empty = torch.empty


class DeviceTensor:
    def __init__(self, nbytes, device):
        self.nbytes, self.device = nbytes, device

    def copy_(self, src, non_blocking=False):
        assert src.pinned and src.nbytes == self.nbytes
        torch.calls.append(("copy", self.device, src.data_ptr()))


def empty(shape, dtype, device="cpu", pin_memory=False):
    if device != "cpu":
        return DeviceTensor(shape[0], device)
    t = host_empty(shape, dtype, device, pin_memory)
    t.nbytes, t.device = shape[0], "cpu"
    return t


torch.empty = empty
torch.cuda.is_available = lambda: count > 0
torch.cuda.device_count = lambda: count
torch.cuda.synchronize = lambda device=None: torch.calls.append(("synchronize", device))
sys.modules["torch"] = torch
"""


def _own_nodes() -> tuple[dict[int, frozenset[int]], list[int]]:
    """This machine's sources (node -> CPUs this process may use) and targets (nodes with memory it may use)."""
    topo = discover()
    return m._sources(topo), m._targets(topo)


# ----------------------------------------------------------------------------- the C primitives
def _walk(buf, lines: int, stride: int) -> list[int]:
    """The line indexes the cycle visits from line 0, until it comes back (at most ``lines + 1`` steps)."""
    base = int(ffi.cast("uintptr_t", buf))
    at, seen = base, []
    for _ in range(lines + 1):
        seen.append((at - base) // stride)
        at = int(ffi.cast("uintptr_t *", at)[0])
        if at == base:
            break
    return seen


@pytest.mark.parametrize(("lines", "stride"), [(2, 64), (3, 64), (1000, 64), (257, 128)])
def test_chase_link_makes_one_cycle_through_every_line(lines, stride):
    area = bytearray(lines * stride + 17)       # a tail shorter than a line is left out
    buf = ffi.from_buffer(area)
    assert lib.nb_chase_link(buf, len(area), stride, 7) == lines
    visited = _walk(buf, lines, stride)
    assert sorted(visited) == list(range(lines))


def test_chase_link_orders_differ_by_seed_and_are_not_sequential():
    orders = []
    for seed in (1, 2):
        area = bytearray(4096 * 64)
        buf = ffi.from_buffer(area)
        lib.nb_chase_link(buf, len(area), 64, seed)
        orders.append(_walk(buf, 4096, 64))
    assert orders[0] != orders[1]
    assert orders[0] != list(range(4096))


@pytest.mark.parametrize(("size", "stride"), [(64, 64), (0, 64), (4096, 4), (4096, 12), (4096, 0)])
def test_chase_link_refuses_what_it_cannot_link(size, stride):
    area = bytearray(max(size, 1))
    assert lib.nb_chase_link(ffi.from_buffer(area), size, stride, 1) == -22    # -EINVAL


def _timed(call) -> float:
    started = time.monotonic()
    assert call() == 0
    return time.monotonic() - started


@pytest.mark.parametrize("budget_ms", [0, 50, 200])
def test_each_loop_stops_after_its_budget(budget_ms):
    size = 8 << 20
    area, dst = bytearray(size), bytearray(size)
    buf = ffi.from_buffer(area)
    lib.nb_chase_link(buf, size, 64, 3)
    per_load, loads = ffi.new("double *"), ffi.new("unsigned long long *")
    rate, moved = ffi.new("double *"), ffi.new("unsigned long long *")
    budget = budget_ms * 1_000_000
    calls = [(lambda: lib.nb_chase(buf, budget, per_load, loads)),
             (lambda: lib.nb_stream_read(buf, size, budget, rate, moved)),
             (lambda: lib.nb_stream_copy(ffi.from_buffer(dst), buf, size, budget, rate, moved))]
    for call in calls:
        took = _timed(call)
        assert budget_ms / 1000 <= took + 0.001 and took < budget_ms / 1000 + 0.5, took
    assert loads[0] >= 256 and per_load[0] > 0 and moved[0] > 0 and rate[0] > 0
    if budget_ms == 0:                          # one batch: 256 loads, one 1 MiB chunk (copied: read + written)
        assert loads[0] == 256 and moved[0] == 2 << 20


def test_read_counts_whole_passes_and_copy_copies():
    src, dst = bytearray(os.urandom(3 << 20)), bytearray(3 << 20)
    rate, moved = ffi.new("double *"), ffi.new("unsigned long long *")
    assert lib.nb_stream_read(ffi.from_buffer(src), len(src), 0, rate, moved) == 0
    assert moved[0] == 1 << 20                  # one chunk
    assert lib.nb_stream_copy(ffi.from_buffer(dst), ffi.from_buffer(src), len(src), 20_000_000, rate, moved) == 0
    assert moved[0] >= 2 * len(src) and dst == src


def test_stream_calls_refuse_bad_ranges():
    area = bytearray(1 << 20)
    buf = ffi.from_buffer(area)
    rate, moved = ffi.new("double *"), ffi.new("unsigned long long *")
    assert lib.nb_stream_read(buf, 4, 0, rate, moved) == -22
    assert lib.nb_stream_copy(buf + 100, buf, 4096, 0, rate, moved) == -22     # overlapping
    assert lib.nb_stream_copy(buf + 4096, buf, 0, 0, rate, moved) == -22
    assert lib.nb_chase(ffi.NULL, 0, ffi.new("double *"), ffi.new("unsigned long long *")) == -22


# ----------------------------------------------------------------------------- this host's kernel
@pytest.mark.kernel
@pytest.mark.mempolicy
def test_this_host_every_cell_from_its_node_over_pages_on_its_node(no_gpu_env):
    sources, targets = _own_nodes()
    started = time.monotonic()
    got = m.measure(discover(), seconds=2, progress=False)
    took = time.monotonic() - started
    print(f"check --measure --seconds 2 here: {took:.2f} s\n{got.describe()}")
    assert took < 2 + SLACK and got.error is None and got.ok
    assert got.sources == tuple(sources) and got.targets == tuple(targets)
    assert [(c.source, c.target) for c in got.cells] == [(s, t) for s in sources for t in targets]
    for c in got.cells:
        assert c.measured and c.cpus == sources[c.source], c
        assert c.on_target and dict(c.by_node) == {c.target: c.pages} and c.pages >= 2 * got.buffer_bytes // 4096
        assert c.latency_ns > 0 and c.read_mb_s > 0 and c.copy_mb_s > 0 and c.loads >= 256
    assert got.gpu_skipped and not got.gpus


@pytest.mark.kernel
@pytest.mark.mempolicy
def test_a_cell_after_the_deadline_is_not_measured_and_nothing_hangs(no_gpu_env):
    started = time.monotonic()
    got = m.measure(discover(), seconds=1e-6, progress=False)    # over before the first cell starts
    assert time.monotonic() - started < SLACK
    assert got.cells and all(c.out_of_time and not c.measured and "out of time" in c.error for c in got.cells)
    assert got.ok and got.problems() == []          # not reached is said, not a failure
    assert "not measured: node" in got.describe()


@pytest.mark.kernel
def test_a_child_past_its_time_is_killed_and_reported():
    sources, targets = _own_nodes()
    request = {"sources": sources, "targets": targets, "size": 1 << 20, "seconds": 30.0, "gpus": None}
    started = time.monotonic()
    answer = m._run(request, 1.0, False)
    assert time.monotonic() - started < 5
    assert "did not finish within 1 s and was killed" in answer["error"]


def test_a_child_that_cannot_take_the_request_says_why():
    answer = m._run({"nothing": 1}, 30, False)
    assert "exited with status 1 without an answer" in answer["error"] and "KeyError" in answer["error"]


@pytest.mark.kernel
@pytest.mark.mempolicy
def test_check_measure_puts_the_matrices_in_the_report(no_gpu_env):
    sources, targets = _own_nodes()
    report = check(placement=False, measure=True, seconds=1)
    assert report.measure is not None and report.measure.ok and report.exit_status == 0
    out = report.to_dict()["measure"]
    assert sorted(out["latency_ns"]) == [str(s) for s in sources]
    assert all(sorted(row) == [str(t) for t in targets] for row in out["latency_ns"].values())
    assert "Idle latency" in report.describe() and "SLIT distances" in report.describe()
    assert check(placement=False).measure is None and check(placement=False).to_dict()["measure"] is None


@pytest.mark.kernel
@pytest.mark.mempolicy
def test_cli_measure_json_carries_the_matrices():
    sources, targets = _own_nodes()
    started = time.monotonic()
    cp = numabind_cli("check", "--no-placement", "--measure", "--seconds", "1", "--json")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert time.monotonic() - started < 1 + SLACK
    out = json.loads(cp.stdout)["measure"]
    assert set(out) >= {"latency_ns", "read_mb_s", "copy_mb_s", "slit", "hmat", "cells", "gpus", "gpu_skipped"}
    assert out["sources"] == sorted(sources) and out["targets"] == targets
    for c in out["cells"]:
        assert c["measured"] and c["on_target"] and c["by_node"] == {str(c["target"]): c["pages"]}
    assert cp.stderr == ""                          # no progress line when stderr is not a terminal


def test_check_refuses_seconds_without_measure_and_no_time():
    from numabind.errors import PlanError

    with pytest.raises(PlanError, match="measure=True"):
        check(seconds=2)
    with pytest.raises(PlanError, match="no time to measure"):
        check(measure=True, seconds=0)


@pytest.mark.parametrize("argv", [("--seconds", "2"), ("--measure", "--seconds", "0"),
                                  ("--measure", "--seconds", "lots"), ("--measure", "--seconds", "-1")])
def test_cli_seconds_usage_errors_exit_2(argv):
    cp = numabind_cli("check", "--no-placement", *argv)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "seconds" in cp.stderr and "Traceback" not in cp.stderr


def test_a_replayed_root_skips_the_measure(tmp_path, no_gpu_env):
    memory_only_nodes(tmp_path)
    report = check(tmp_path, measure=True, seconds=1)
    assert report.measure is None
    assert any(s.startswith("measure: the discovery root") for s in report.skipped)


# ----------------------------------------------------------------------------- shapes on a fake machine
def _fake_answer(request, timeout, progress):
    cells = [{"source": s, "target": t, "cpus": sorted(cpus), "pages": 8, "by_node": {str(t): 8},
              "latency_ns": 100.0 + t, "read_mb_s": 1000.0, "copy_mb_s": 900.0, "loads": 256}
             for s, cpus in request["sources"].items() for t in request["targets"]]
    return {"cells": cells, "gpus": [], "gpu_skipped": "no GPU on this machine (sysfs lists none)"}


def test_fake_multi_node_matrices_have_cpu_rows_and_memory_columns(tmp_path, monkeypatch):
    memory_only_nodes(tmp_path)          # 0, 1 with CPUs; 2 (CXL) and 3 (HBM) memory only; 4 neither
    topo = discover(tmp_path)
    monkeypatch.setattr(m, "_run", _fake_answer)
    got = m.measure(topo, seconds=1, progress=False)
    assert got.sources == (0, 1) and got.targets == (0, 1, 2, 3) and got.ok
    out = got.to_dict()
    assert {s: list(row) for s, row in out["latency_ns"].items()} == {"0": ["0", "1", "2", "3"],
                                                                       "1": ["0", "1", "2", "3"]}
    assert out["slit"]["1"] == {"0": 21, "1": 10, "2": 26, "3": 80}
    lines = got.describe().splitlines()
    at = lines.index("Idle latency (ns per dependent load)")
    assert lines[at + 2].split() == ["Numa", "node", "0", "1", "2", "3"]
    assert [line.split()[0] for line in lines[at + 3:at + 5]] == ["0", "1"] and lines[at + 5] == ""
    assert "HMAT" in got.describe()


def test_a_cell_off_its_node_is_a_problem(monkeypatch, tmp_path):
    memory_only_nodes(tmp_path)

    def off(request, timeout, progress):
        answer = _fake_answer(request, timeout, progress)
        answer["cells"][1].update(by_node={"0": 8}, error="its pages are not all on node 1 (8 pages: 8 on node 0)")
        return answer

    monkeypatch.setattr(m, "_run", off)
    got = m.measure(discover(tmp_path), seconds=1, progress=False)
    assert not got.ok and got.problems() == [
        "measure: node 0 -> node 1: its pages are not all on node 1 (8 pages: 8 on node 0)"]
    assert got.matrix(lambda c: c.latency_ns)[2].split()[2] == "-"


def test_buffer_bytes_exceeds_the_last_level_cache_within_the_smallest_node(tmp_path):
    memory_only_nodes(tmp_path)
    topo = discover(tmp_path)
    size = m.buffer_bytes(topo, [0, 1, 2, 3])
    llc = max((c.size_bytes or 0) for c in topo.caches)
    assert size % (1 << 20) == 0 and size >= max(2 * llc, m.MIN_BUFFER) and size <= m.MAX_BUFFER
    small = type("T", (), {"caches": topo.caches, "nodes": {0: type("N", (), {"memory_bytes": 64 << 20})()}})()
    assert m.buffer_bytes(small, [0]) == 8 << 20


def test_progress_line_only_when_asked(capsys):
    shown = m._Progress(True, 2, time.monotonic() + 5)
    shown.step("node 0 -> node 1")
    shown.end()
    assert "measuring node 0 -> node 1 (1/2," in capsys.readouterr().err
    quiet = m._Progress(False, 2, time.monotonic() + 5)
    quiet.step("node 0 -> node 0")
    quiet.end()
    assert capsys.readouterr().err == ""


# ----------------------------------------------------------------------------- GPU copies (fake torch)
def _fake_torch_env(tmp_path, monkeypatch, gpus: int | None) -> None:
    pkg = tmp_path / "torchpkg" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(TORCH_INIT)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "torchpkg"), ROOT]))
    if gpus is None:
        monkeypatch.delenv("FAKE_TORCH_GPUS", raising=False)
    else:
        monkeypatch.setenv("FAKE_TORCH_GPUS", str(gpus))


@pytest.mark.kernel
@pytest.mark.mempolicy
def test_gpu_copies_from_pinned_memory_on_each_node(tmp_path, monkeypatch):
    _fake_torch_env(tmp_path, monkeypatch, 2)
    _, targets = _own_nodes()
    request = {"sources": {}, "targets": targets, "size": 1 << 20, "seconds": 1.0,
               "gpus": {0: frozenset({targets[0]}), 1: frozenset({targets[-1] + 100})}}
    answer = m._run(request, 30, False)
    assert answer.get("error") is None and answer["gpu_skipped"] is None, answer
    copies = [m._gpu(raw) for raw in answer["gpus"]]
    assert [g.gpu for g in copies] == [0, 1]
    for g in copies:
        assert sorted(g.mb_s) == targets and all(v is not None and v > 0 for v in g.mb_s.values()), g
        assert g.fastest in targets and not g.errors
    assert copies[0].plan_chose_fastest is (copies[0].fastest == targets[0])
    assert copies[1].plan_chose_fastest is False and "the plan chose node" in copies[1].describe()


@pytest.mark.parametrize(("gpus", "planned", "why"), [
    (None, {0: frozenset({0})}, "torch is not importable"),
    (0, {0: frozenset({0})}, "torch.cuda.is_available() is False"),
    (2, None, "no GPU on this machine"),
])
def test_gpu_copies_are_skipped_with_the_reason(tmp_path, monkeypatch, gpus, planned, why):
    _fake_torch_env(tmp_path, monkeypatch, gpus)
    answer = m._run({"sources": {}, "targets": [], "size": 1 << 20, "seconds": 1.0, "gpus": planned}, 30, False)
    assert answer["gpus"] == [] and answer["gpu_skipped"].startswith(why), answer


def test_gpu_copy_describes_the_fastest_node_and_the_plans_choice():
    g = m.GpuCopy(3, {0: 20000.0, 1: 12000.0, 2: None}, frozenset({1}), {2: "out of time (give more --seconds)"})
    assert g.fastest == 0 and g.plan_chose_fastest is False
    assert g.describe() == ("gpu 3: host to device MB/s: node 0: 20000.0, node 1: 12000.0, node 2: -; fastest from "
                            "node 0 (the plan chose node 1)")
    assert m.GpuCopy(0, {0: None}, frozenset({0}), {0: "boom"}).describe() == (
        "gpu 0: host to device not measured: boom")


def test_without_the_compiled_core_the_child_says_so_and_the_fix(tmp_path, monkeypatch):
    from tests.kernel import BLOCK_NATIVE

    (tmp_path / "sitecustomize.py").write_text(BLOCK_NATIVE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), ROOT]))
    answer = m._run({"sources": {0: frozenset({0})}, "targets": [0], "size": 1 << 20, "seconds": 1.0,
                     "gpus": None}, 30, False)
    assert "compiled core, which cannot load" in answer["error"] and "reinstall numabind" in answer["error"]
    assert answer["cells"] == []
