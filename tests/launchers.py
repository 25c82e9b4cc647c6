"""Fake GPU machines for the launcher tests (torchrun, Slurm, Ray) that bind for real.

The launcher tests start real processes that bind themselves, so the fake
machine's CPU ids are this host's: :func:`host_gpu_machine` splits the CPUs
this process may use into two NUMA nodes (first half, second half), puts one
package around both, and one NVIDIA GPU on each node. Everything is derived at
run time; a host with fewer than two usable CPUs cannot host the tests.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from tests.fakegpu import add_nvidia_gpu
from tests.fakesys import FakeMachine

#: PCI addresses of the fake GPUs (function 0, as torch formats them).
GPU_ADDRESSES = ("0000:1b:00.0", "0000:9a:00.0")


@dataclass(frozen=True)
class HostGpuMachine:
    """A written fake tree and what each GPU's node holds."""

    root: str
    node_cpus: tuple[frozenset[int], frozenset[int]]   # node 0, node 1

    @property
    def all_cpus(self) -> frozenset[int]:
        return self.node_cpus[0] | self.node_cpus[1]


def usable_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


# ------------------------------------------------------------------ a launcher that cannot run: skip, or fail in CI
REQUIRE_ENV = "NUMABIND_REQUIRE_LAUNCHERS"
TWO_CPUS = "a two-node fake machine needs two usable CPUs"


def launchers_required() -> bool:
    """``NUMABIND_REQUIRE_LAUNCHERS=1`` (CI): a launcher test that cannot run fails instead of skipping."""
    return os.environ.get(REQUIRE_ENV, "").strip() not in ("", "0", "no", "false")


def unavailable(reason: str) -> NoReturn:
    """Skip the running launcher test with ``reason``; fail it under ``NUMABIND_REQUIRE_LAUNCHERS=1``."""
    if launchers_required():
        pytest.fail(f"{REQUIRE_ENV}=1 and this launcher test cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def needs(ok: bool, reason: str) -> pytest.MarkDecorator:
    """A mark: the test runs where ``ok``, else skips with ``reason`` (fails under ``NUMABIND_REQUIRE_LAUNCHERS=1``;
    tests/conftest.py reads the mark before the test's fixtures are set up)."""
    return pytest.mark.launcher_needs(ok=ok, reason=reason)


needs_two_cpus = needs(len(usable_cpus()) >= 2, TWO_CPUS)


def host_gpu_machine(root: str | os.PathLike) -> HostGpuMachine:
    """Two nodes made of this host's usable CPUs, one GPU on each; one package spans both."""
    cpus = usable_cpus()
    if len(cpus) < 2:
        raise RuntimeError(f"a two-node fake machine needs two usable CPUs, this process has {cpus}")
    half = (len(cpus) + 1) // 2
    nodes = (frozenset(cpus[:half]), frozenset(cpus[half:]))
    m = FakeMachine(root)
    for nid, ids in enumerate(nodes):
        m.add_node(nid, ids, distances={1 - nid: 21})
    for core, cpu in enumerate(cpus):
        m.set_cpu_topology(cpu, 0, core)
    m.add_core_caches()
    for ids in nodes:
        m.add_cache(3, "Unified", ids)
    m.set_model_name("Fake launcher-test CPU")
    m.write()
    for nid, address in enumerate(GPU_ADDRESSES):
        add_nvidia_gpu(root, address, numa_node=nid, local_cpulist=",".join(map(str, sorted(nodes[nid]))),
                       minor=nid)
    return HostGpuMachine(root=str(root), node_cpus=nodes)


#: Where :data:`REPORT_CODE` also writes its report, one file per process, when this variable names a folder.
REPORT_DIR_VAR = "LAUNCHER_TEST_REPORT_DIR"

#: A child command that prints what it was started with as one JSON line, in one write(2): the ranks of a
#: launcher share its stdout, and ``print`` under PYTHONUNBUFFERED=1 writes the text and its newline in two
#: calls, so two ranks' lines could be glued together (``{...}{...}`` then an empty line). A write of under
#: PIPE_BUF bytes to a pipe is never interleaved with another. The same line also goes to
#: ``$LAUNCHER_TEST_REPORT_DIR/report-PID.json`` when that is set (:func:`rank_reports` reads them back).
REPORT_CODE = (
    "import json, os; "
    "line = (json.dumps({'rank': os.environ.get('LOCAL_RANK', os.environ.get('SLURM_LOCALID')), "
    "'cpus': sorted(os.sched_getaffinity(0)), 'cvd': os.environ.get('CUDA_VISIBLE_DEVICES')}) + '\\n').encode(); "
    f"folder = os.environ.get({REPORT_DIR_VAR!r}); "
    "folder and open(os.path.join(folder, f'report-{os.getpid()}.json'), 'xb').write(line); "
    "assert os.write(1, line) == len(line)"
)


def report_command() -> list[str]:
    return [sys.executable, "-c", REPORT_CODE]


def numabind_command() -> list[str]:
    """The installed console script next to this interpreter (what a launch line names)."""
    script = Path(sys.executable).with_name("numabind")
    return [str(script)] if script.exists() else [sys.executable, "-m", "numabind"]


def rank_reports(folder: str | os.PathLike) -> list[dict]:
    """The reports :data:`REPORT_CODE` wrote under ``folder`` (one per process that ran it), in file-name order."""
    return [json.loads(p.read_text()) for p in sorted(Path(folder).glob("report-*.json"))]


def json_lines(text: str) -> list[dict]:
    """Every JSON object that is a stdout line or ends one (launchers prefix or interleave other lines).

    Objects written back to back on one line (``{...}{...}``) are each returned."""
    decoder = json.JSONDecoder()
    out = []
    for line in text.splitlines():
        line = line.strip()
        start = line.find("{")
        if start < 0:
            continue
        found, pos = [], start
        try:
            while pos < len(line):
                value, pos = decoder.raw_decode(line, pos)
                found.append(value)
                while pos < len(line) and line[pos].isspace():
                    pos += 1
        except ValueError:
            continue
        out.extend(v for v in found if isinstance(v, dict))
    return out


def json_documents(text: str) -> list[dict]:
    """Every JSON object in ``text``, also pretty-printed ones spanning lines (one per rank)."""
    decoder = json.JSONDecoder()
    out, pos = [], 0
    while True:
        start = text.find("{", pos)
        if start < 0:
            return out
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            pos = start + 1
            continue
        if isinstance(value, dict):
            out.append(value)
        pos = end
