"""Huawei Ascend NPUs as SGLang's NPU path sees them: physical ids, the NPU topology, each scheduler's CPUs
(re-exported by :mod:`numabind.compat.sglang`; ``docs/howto/sglang.rst`` says how each step follows SGLang).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._fs import ascii_int
from .._vendors import ORDER_VARIABLES, VISIBILITY_VARIABLES
from ..cpulist import format_cpulist, parse_cpulist
from ..errors import NumabindError, PlanError
from . import current_topology, on_live_machine
from ._sglang_base import logger, process_cpus

__all__ = ["NpuAffinityAssignment", "NpuAffinityError", "NpuTopology", "NpuTopologyEntry", "query_npu_smi_topology",
           "resolve_npu_affinity_assignment", "resolve_physical_npu_id"]

#: The variables SGLang reads, in its order, for the physical id of a runtime NPU id.
_ASCEND_VISIBILITY = VISIBILITY_VARIABLES["ascend"] + ORDER_VARIABLES["ascend"]


class NpuAffinityError(NumabindError, RuntimeError):
    """An NPU's topology or CPU share cannot be found, or ``--numa-node`` contradicts it (SGLang's
    ``NpuAffinityError``, a RuntimeError). ``stage`` names the step; the ids are set where known."""

    def __init__(self, message: str, *, stage: str, logical_npu_id: int | None = None,
                 physical_npu_id: int | None = None) -> None:
        super().__init__(message)
        self.stage = stage
        self.logical_npu_id = logical_npu_id
        self.physical_npu_id = physical_npu_id


@dataclass(frozen=True)
class NpuTopologyEntry:
    """One physical NPU: its CPU affinity (as its source wrote it, and as CPU ids) and the NUMA node
    holding all those CPUs (None when no single node does)."""

    physical_npu_id: int
    raw_cpu_affinity: str
    local_cpu_ids: frozenset[int]
    numa_node: int | None


@dataclass(frozen=True)
class NpuTopology:
    """The physical NPUs of the machine by physical id, and where that came from."""

    source: str
    entries: Mapping[int, NpuTopologyEntry]
    online_cpu_ids: frozenset[int]

    def listing(self) -> str:
        """Where the NPUs come from and which physical ids it lists."""
        return f"{self.source} lists {sorted(self.entries) or 'none'}"


@dataclass(frozen=True)
class NpuAffinityAssignment:
    """The CPUs a scheduler of runtime NPU ``logical_npu_id`` owns: its fixed share
    (``slot_index`` of ``slots_on_node``) of the whole cores of its NPU's CPU affinity."""

    logical_npu_id: int
    physical_npu_id: int
    numa_node: int
    slot_index: int
    slots_on_node: int
    requested_pcores: int
    effective_pcores: int
    physical_core_keys: tuple[tuple[int, int], ...]
    logical_cpu_ids: tuple[int, ...]
    topology_source: str

    @property
    def runtime_npu_id(self) -> int:
        return self.logical_npu_id


def _npu_visibility() -> tuple[str | None, str | None]:
    """The first of ``ASCEND_RT_VISIBLE_DEVICES``, ``ASCEND_VISIBLE_DEVICES`` set to something: (name, value)."""
    for name in _ASCEND_VISIBILITY:
        value = os.environ.get(name)
        if value is not None and value.strip():
            return name, value.strip()
    return None, None


def resolve_physical_npu_id(logical_npu_id: int) -> int:
    """The physical id (N of ``/dev/davinci<N>``) of runtime NPU ``logical_npu_id``: discovery's (the NPU's
    ``minor``), else the visibility variable's entry, else the id. A negative id, or one the variable (checked
    as SGLang checks it) does not list, raises :class:`NpuAffinityError`.
    """
    if logical_npu_id < 0:
        raise NpuAffinityError(f"NPU id {logical_npu_id} is negative; runtime NPU ids start at 0",
                               stage="resolve_visible_device", logical_npu_id=logical_npu_id)
    name, value = _npu_visibility()
    listed: list[int] | None = None
    if value is not None:
        ids = [ascii_int(t.strip(), max_digits=9) for t in value.split(",")]
        if any(i is None for i in ids) or len(set(ids)) != len(ids):
            raise NpuAffinityError(f"{name}={value!r} is not a list of distinct physical NPU ids separated by "
                                   f"commas; fix or unset it", stage="resolve_visible_device",
                                   logical_npu_id=logical_npu_id)
        listed = [int(i) for i in ids if i is not None]
        if logical_npu_id >= len(listed):
            raise NpuAffinityError(f"NPU id {logical_npu_id} is outside {name}={value!r} ({len(listed)} NPUs)",
                                   stage="resolve_visible_device", logical_npu_id=logical_npu_id)
    npu = next((g for g in current_topology().gpus if g.vendor == "ascend" and g.index == logical_npu_id), None)
    if npu is not None and npu.minor is not None:
        return int(npu.minor)
    return listed[logical_npu_id] if listed is not None else logical_npu_id


def _parse_npu_smi_topology(text: str, topology: Any) -> dict[int, NpuTopologyEntry]:
    """The rows of ``npu-smi info -t topo``: ``NPU<id> <link kinds...> <cpulist>``; the header row ends in
    ``CPU Affinity``. A row whose last field is not a cpulist, or a repeated id, raises NpuAffinityError."""
    entries: dict[int, NpuTopologyEntry] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[-2:] == ["CPU", "Affinity"] or not fields[0].startswith("NPU"):
            continue
        digits = fields[0][3:]
        if not (digits.isascii() and digits.isdigit()):
            continue
        npu_id = int(digits)
        try:
            cpus = parse_cpulist(fields[-1])
        except PlanError as e:
            raise NpuAffinityError(f"npu-smi gives NPU{npu_id} the CPU affinity {fields[-1]!r}: {e}",
                                   stage="parse_npu_smi_cpu_affinity", physical_npu_id=npu_id) from None
        if npu_id in entries:
            raise NpuAffinityError(f"npu-smi lists NPU{npu_id} twice", stage="parse_npu_smi_row",
                                   physical_npu_id=npu_id)
        hits = [nid for nid, node in topology.nodes.items() if cpus and cpus <= node.cpus]   # its one node
        entries[npu_id] = NpuTopologyEntry(npu_id, fields[-1], cpus, hits[0] if len(hits) == 1 else None)
    if not entries:
        raise NpuAffinityError("npu-smi info -t topo printed no NPU row", stage="parse_npu_smi_output")
    return entries


def query_npu_smi_topology() -> NpuTopology:
    """Each physical NPU's CPU affinity and NUMA node: from ``npu-smi info -t topo`` on the live machine (SGLang's
    source), else (or when it fails, with a warning) from numabind's discovery."""
    topology = current_topology()
    online = frozenset(topology.online_cpus)
    tool = shutil.which("npu-smi") if on_live_machine() else None
    if tool is not None:
        try:
            done = subprocess.run([tool, "info", "-t", "topo"], capture_output=True, text=True,
                                  timeout=10, check=False)
            if done.returncode != 0:
                raise NpuAffinityError(f"npu-smi info -t topo exited with {done.returncode}: "
                                       f"{(done.stderr or '').strip()[:300]}", stage="query_npu_smi")
            return NpuTopology("npu-smi info -t topo", _parse_npu_smi_topology(done.stdout, topology), online)
        except (OSError, subprocess.TimeoutExpired, NpuAffinityError) as e:
            logger.warning("The NPU topology could not be read from npu-smi (%s); using numabind's discovery", e)
    entries = {}
    for g in topology.gpus:
        if g.vendor != "ascend" or g.minor is None:
            continue
        node = topology.nodes.get(g.numa_node) if g.numa_node is not None else None
        cpus = frozenset(g.local_cpus) or (frozenset(node.cpus) if node is not None else frozenset())
        entries[int(g.minor)] = NpuTopologyEntry(int(g.minor), format_cpulist(cpus), cpus, g.numa_node)
    return NpuTopology("numabind discovery (sysfs)", entries, online)


def _npu_pcores_requested() -> int:
    raw = os.environ.get("SGLANG_NPU_AFFINITY_PCORES_PER_PROC", "0").strip() or "0"
    try:
        value = int(raw)
    except ValueError:
        raise PlanError(f"SGLANG_NPU_AFFINITY_PCORES_PER_PROC={raw!r} is not an integer; give a number of "
                        f"physical cores (0: the whole share)") from None
    if value < 0:
        raise PlanError(f"SGLANG_NPU_AFFINITY_PCORES_PER_PROC must be >= 0 (it is {value}); 0 gives the whole share")
    return value


def resolve_npu_affinity_assignment(*, logical_npu_id: int, emit_topology_log: bool = False
                                    ) -> NpuAffinityAssignment:
    """The CPUs the scheduler of runtime NPU ``logical_npu_id`` owns, as SGLang's NPU affinity gives them.

    The NPUs with the same node and CPU affinity split its whole cores into fixed, disjoint shares in physical-id
    order; the scheduler keeps the cores of its share whose every sibling this process may use, at most
    ``SGLANG_NPU_AFFINITY_PCORES_PER_PROC`` (0: all). An NPU with no usable core raises :class:`NpuAffinityError`.
    """
    requested = _npu_pcores_requested()
    physical, topo = resolve_physical_npu_id(logical_npu_id), query_npu_smi_topology()
    entry = topo.entries.get(physical)
    if entry is None or entry.numa_node is None:
        raise NpuAffinityError(f"physical NPU {physical} has no NUMA node in the NPU topology ({topo.listing()})",
                               stage="select_npu_topology", logical_npu_id=logical_npu_id, physical_npu_id=physical)
    topology = current_topology()
    if emit_topology_log:
        for e in sorted(topo.entries.values(), key=lambda e: e.physical_npu_id):
            logger.info("NPU topology (%s): physical NPU %d, node %s, CPU affinity %s", topo.source,
                        e.physical_npu_id, e.numa_node, e.raw_cpu_affinity)
    group = sorted(e.physical_npu_id for e in topo.entries.values()
                   if e.numa_node == entry.numa_node and e.local_cpu_ids == entry.local_cpu_ids)
    slot, slots = group.index(physical), len(group)
    cores: dict[tuple[int, int], frozenset[int]] = {}
    for cpu in entry.local_cpu_ids & topo.online_cpu_ids:
        info = topology.cpus.get(cpu)
        key = (info.package, info.core) if info is not None and info.core >= 0 else (-1, cpu)
        siblings = (info.siblings if info is not None and info.siblings else frozenset({cpu})) & topo.online_cpu_ids
        cores[key] = cores.get(key, frozenset()) | siblings
    keys = sorted(cores)
    start, end = slot * len(keys) // slots, (slot + 1) * len(keys) // slots
    usable = entry.local_cpu_ids & topo.online_cpu_ids & process_cpus(topology)
    eligible = [k for k in keys[start:end] if cores[k] <= usable]
    if not eligible:
        owned = frozenset().union(*(cores[k] for k in keys[start:end]))
        raise NpuAffinityError(
            f"physical NPU {physical} has no whole core in its share {start}:{end} of the {len(keys)} cores of "
            f"CPU affinity {entry.raw_cpu_affinity} (share: {format_cpulist(owned) or 'empty'}, this process may "
            f"use {format_cpulist(process_cpus(topology))}); widen the process's CPUs or use fewer NPUs per node",
            stage="filter_process_cpuset", logical_npu_id=logical_npu_id, physical_npu_id=physical)
    effective = len(eligible) if requested == 0 else min(requested, len(eligible))
    if requested > len(eligible):
        logger.warning("SGLANG_NPU_AFFINITY_PCORES_PER_PROC=%d is more than the %d whole cores of physical NPU %d's "
                       "share; using %d", requested, len(eligible), physical, effective)
    chosen = eligible[:effective]
    return NpuAffinityAssignment(
        logical_npu_id=logical_npu_id, physical_npu_id=physical, numa_node=entry.numa_node, slot_index=slot,
        slots_on_node=slots, requested_pcores=requested, effective_pcores=effective,
        physical_core_keys=tuple(chosen), logical_cpu_ids=tuple(sorted(c for k in chosen for c in cores[k])),
        topology_source=topo.source)

