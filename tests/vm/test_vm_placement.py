"""Issue 3, items 1 and 4: where the kernel really puts memory after numabind binds.

Each binding happens in a forked child (see ``probe.in_child``) or a fresh process, so the
guest's pytest process keeps its own affinity and policy. Pages are counted twice: by
``move_pages(2)`` in query mode and on the mapping's own line of ``/proc/self/numa_maps``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from . import harness, probe
from .cases import placement
from .cases.placement import CHILD_REPORT, MIB, bind_memory_only, node_share


# ----------------------------------------------------------------------------- item 1
@pytest.mark.numa_vm(topology="2n")
@pytest.mark.parametrize("backend", ["libnuma", "syscall"])
def test_bind_current_to_node1_places_threads_and_pages(backend, vm_topology):
    placement.bind_current_to_node1_places_threads_and_pages(backend, vm_topology)


@pytest.mark.numa_vm(topology="2n")
@pytest.mark.parametrize("backend", ["numactl", "syscall"])
def test_numabind_run_binds_the_command(backend, vm_topology, tmp_path):
    """``python -m numabind run`` (numactl: through the numactl wrapper at exec).

    A ``numactl`` shim first on PATH records its calls: the numactl backend must go through
    it, the syscall backend must not.
    """
    cpus = sorted(vm_topology.node_cpus(1))
    real = shutil.which("numactl")
    assert real, "numactl is not installed in the guest's root (python3 -m tests.vm.harness prepare installs it)"
    calls = tmp_path / "numactl-calls"
    (tmp_path / "numactl").write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {real} "$@"\n')
    (tmp_path / "numactl").chmod(0o755)
    env = dict(os.environ, NUMABIND_BACKEND=backend, PYTHONPATH=str(harness.REPO_ROOT),
               PATH=f"{tmp_path}:{os.environ['PATH']}")
    argv = [sys.executable, "-m", "numabind", "run", f"--physcpubind={cpus[0]}-{cpus[-1]}", "--membind=1", "--",
            sys.executable, "-c", CHILD_REPORT]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=harness.REPO_ROOT, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, proc.stdout + proc.stderr
    m = json.loads(line[-1][len("RESULT "):])
    numactl_calls = calls.read_text().splitlines() if calls.exists() else []
    if backend == "numactl":
        expected = f"--physcpubind={cpus[0]}-{cpus[-1]} --membind=1 -- {sys.executable} -c"
        assert numactl_calls and numactl_calls[0].startswith(expected), numactl_calls
    else:
        assert numactl_calls == []
    assert all(c == cpus for c in m["threads"].values()), m["threads"]
    share_mp, share_maps = node_share(m, 1, "move_pages"), node_share(m, 1, "numa_maps")
    print(f"item 1, numabind run via {backend}: threads on CPUs {cpus}; 64 MiB in the command: "
          f"move_pages {probe.fmt_shares(m['move_pages'])}; numa_maps N1={share_maps:.2f}% ({m['policy']})")
    assert m["policy"] == "bind:1"
    assert share_mp >= 99.0 and share_maps >= 99.0


# ----------------------------------------------------------------------------- item 4
@pytest.mark.numa_vm(topology="mem-only")
def test_interleave_spreads_pages_evenly(vm_topology):
    placement.interleave_spreads_pages_evenly(vm_topology)


@pytest.mark.numa_vm(topology="mem-only")
def test_preferred_to_a_full_node_falls_back_without_oom(vm_topology):
    placement.preferred_to_a_full_node_falls_back_without_oom(vm_topology)


@pytest.mark.numa_vm(topology="mem-only")
def test_memory_only_node_is_a_memory_target_not_a_cpu_target(vm_topology):
    import numabind

    (mem_node,) = vm_topology.memory_only_nodes
    m = probe.in_child(bind_memory_only, mem_node, 32 * MIB)
    assert m["warnings"] == [] and m["applied_policy"] == "bind" and m["applied_nodes"] == [mem_node]
    share = node_share(m, mem_node, "move_pages")
    print(f"item 4, bind to memory-only node {mem_node}: 32 MiB {probe.fmt_shares(m['move_pages'])}; "
          f"numa_maps {probe.fmt_shares(m['numa_maps'])}")
    assert share >= 99.0 and node_share(m, mem_node, "numa_maps") >= 99.0

    topo = numabind.discover()
    assert topo.nodes[mem_node].cpus == frozenset() and topo.nodes[mem_node].memory_bytes > 0
    with pytest.raises(numabind.PlanError, match="no CPUs"):
        numabind.Plan.from_numactl_args(f"--cpunodebind={mem_node}", topology=topo)
    proc = subprocess.run([sys.executable, "-m", "numabind", "run", f"--cpunodebind={mem_node}", "--", "true"],
                          capture_output=True, text=True, cwd=harness.REPO_ROOT, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(harness.REPO_ROOT)))
    assert proc.returncode != 0
    assert "no CPUs" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
