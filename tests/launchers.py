"""Fake GPU machines for the launcher tests (torchrun, Slurm, Ray) that bind for real.

The launcher tests start real processes that bind themselves, so the fake
machine's CPU ids are this host's. :func:`host_gpu_machine` splits the CPUs
this process may use into two NUMA nodes (first half, second half), puts one
package around both, and one NVIDIA GPU on each node: a machine to plan on,
whose node 1 need not exist here. A plan that binds memory to a node this host
lacks is refused at every entry point (issue 42 §1), so a test that binds uses
:func:`host_gpu_machine` with ``on_host_nodes=True``: the fake's nodes are this
host's own (ids and usable CPUs), one GPU on each of the first two that hold
usable CPUs, planned in ``node`` mode; on a host with one such node both GPUs
sit on it and ``exclusive`` mode gives each rank its half of the node's cores,
so the two ranks still get different CPUs. Everything is derived at run time;
a host with fewer than two usable CPUs cannot host the tests.
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
    """A written fake tree: the CPUs GPU 0 and GPU 1 get in :attr:`mode`, and the node each GPU is on."""

    root: str
    node_cpus: tuple[frozenset[int], frozenset[int]]   # what GPU 0 and GPU 1 get (their nodes in "node" mode)
    all_cpus: frozenset[int]                            # every CPU of the fake machine
    gpu_nodes: tuple[int, int] = (0, 1)
    mode: str = "node"                                  # the placement mode that gives them node_cpus

    @property
    def mode_args(self) -> tuple[str, str]:
        """``--mode MODE`` for a launch line."""
        return ("--mode", self.mode)


def usable_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def _ids(text: str) -> frozenset[int]:
    out: set[int] = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(out)


def host_nodes() -> dict[int, frozenset[int]]:
    """This host's NUMA nodes that hold CPUs this process may use, with those CPUs; nodes with memory first
    (a GPU's rank binds its memory there). A kernel without NUMA sysfs is one node 0."""
    usable = frozenset(usable_cpus())
    base = Path("/sys/devices/system/node")
    try:
        memory = _ids((base / "has_memory").read_text()) if (base / "has_memory").exists() else None
        found = {int(d.name[4:]): _ids((d / "cpulist").read_text()) & usable
                 for d in base.glob("node[0-9]*") if (d / "cpulist").exists()}
    except OSError:
        found = {}
        memory = None
    found = {n: cpus for n, cpus in found.items() if cpus}
    if not found:
        return {0: usable}
    return dict(sorted(found.items(), key=lambda kv: (memory is not None and kv[0] not in memory, kv[0])))


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


def host_gpu_machine(root: str | os.PathLike, *, on_host_nodes: bool = False,
                     node_ids: tuple[int, int] = (0, 1)) -> HostGpuMachine:
    """Two nodes made of this host's usable CPUs (ids ``node_ids``), one GPU on each; one package spans both.

    ``on_host_nodes``: the nodes are this host's instead (see the module's docstring), so a rank can bind memory
    to its GPU's node here; :attr:`HostGpuMachine.mode` says which mode gives each GPU its own CPUs."""
    cpus = usable_cpus()
    if len(cpus) < 2:
        raise RuntimeError(f"a two-node fake machine needs two usable CPUs, this process has {cpus}")
    half = (len(cpus) + 1) // 2
    halves = (frozenset(cpus[:half]), frozenset(cpus[half:]))      # exclusive mode gives the first the extra core
    if not on_host_nodes:
        layout, gpu_nodes, shares, mode = dict(zip(node_ids, halves)), node_ids, halves, "node"
    else:
        layout = host_nodes()
        homes = list(layout)
        if len(homes) >= 2:
            gpu_nodes, mode = (homes[0], homes[1]), "node"
            shares = (layout[homes[0]], layout[homes[1]])
        else:
            gpu_nodes, shares, mode = (homes[0], homes[0]), halves, "exclusive"
    m = FakeMachine(root)
    for nid, ids in layout.items():
        m.add_node(nid, ids, distances={other: 21 for other in layout if other != nid})
    for core, cpu in enumerate(cpus):
        m.set_cpu_topology(cpu, 0, core)
    m.add_core_caches()
    for ids in (shares if gpu_nodes[0] == gpu_nodes[1] else layout.values()):
        m.add_cache(3, "Unified", ids)
    m.set_model_name("Fake launcher-test CPU")
    m.write()
    for k, address in enumerate(GPU_ADDRESSES):
        add_nvidia_gpu(root, address, numa_node=gpu_nodes[k],
                       local_cpulist=",".join(map(str, sorted(layout[gpu_nodes[k]]))), minor=k)
    return HostGpuMachine(root=str(root), node_cpus=shares, gpu_nodes=gpu_nodes, mode=mode,
                          all_cpus=frozenset().union(*layout.values()))


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
