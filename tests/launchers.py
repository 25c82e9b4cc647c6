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


#: A child command that prints what it was started with as one JSON line.
REPORT_CODE = (
    "import json, os; "
    "print(json.dumps({'rank': os.environ.get('LOCAL_RANK', os.environ.get('SLURM_LOCALID')), "
    "'cpus': sorted(os.sched_getaffinity(0)), 'cvd': os.environ.get('CUDA_VISIBLE_DEVICES')}), flush=True)"
)


def report_command() -> list[str]:
    return [sys.executable, "-c", REPORT_CODE]


def numabind_command() -> list[str]:
    """The installed console script next to this interpreter (what a launch line names)."""
    script = Path(sys.executable).with_name("numabind")
    return [str(script)] if script.exists() else [sys.executable, "-m", "numabind"]


def json_lines(text: str) -> list[dict]:
    """Every stdout line that is a JSON object (launchers prefix or interleave other lines)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        start = line.find("{")
        if start < 0:
            continue
        try:
            value = json.loads(line[start:])
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
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
