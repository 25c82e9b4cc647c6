"""Issue 35: numabind on an arm64 kernel with three NUMA nodes (one of them memory-only), not only on x86.

The guest is QEMU's ``virt`` board with ``-cpu max`` under software emulation (TCG), Debian bookworm's
``linux-image-arm64`` (NUMA from the device tree QEMU writes), and an arm64 Debian userland
(``scripts/arm64_userland.sh``) running the checkout with numabind's C core cross-compiled for arm64
(``tests/vm/harness.py``, kernel ``arm64``). The checks are the x86 guest's own, run here unchanged:
the nodes, CPUs and distances QEMU was told to emulate (``test_vm_harness``), discovery against
``numactl --hardware`` (``test_vm_discovery``), and a real bind with read-back through the libnuma and
syscall backends (``test_vm_placement``: every thread's affinity, the policy of a fresh mapping, and its
pages counted on node 1 by ``move_pages(2)`` and ``numa_maps``).

The guest's machine is ``mem-only``: nodes 0 (CPUs 0-1) and 1 (CPUs 2-3) with 512 MiB each and node 2 with 256
MiB and no CPUs (as CXL memory, or Grace's GPU memory seen as a CPU-less node). Beyond the bind, the x86 guest's
memory-placement proofs run here as well, again unchanged where they can be (each is the x86 guest's check of
tests/vm/cases, called): preferred (with room, and falling back from a full node without OOM), interleave (pages
per node from ``move_pages(2)`` and ``numa_maps``), migration (``migrate=True``, ``bind_memory(move=True)`` and
``numabind move`` of a 32-thread process: pages touched on node 0 counted on node 1), birth binding of spawn,
forkserver and fork children (each child's affinity and policy read back in the child), ``numabind run`` (a
command bound, read back in it), ``numabind stat`` of bound processes, a bind to the memory-only node,
``numabind check``, a ``numabind gather`` that the host replays (tests/vm/test_vm_gather.py), and weighted
interleave where the guest kernel has it (Debian's arm64 6.1 has not: the test says so from sysfs, and
the plan's degradation to plain interleave is proven instead).

Marker ``arm64_vm`` selects them (``pytest -m arm64_vm``). All of them share one guest (one topology, one
kernel: the harness boots one guest per pair), so the whole set costs one boot; it runs in CI with the rest of
the numa_vm tests. The terminal summary's "numa_vm guests" section gives the boot and run time;
docs/machines.rst lists the measured times.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from . import harness, probe
# the x86 guest's checks (tests/vm/cases/: each test_vm_* module runs its own the same way)
from .cases import gather as gathering
from .cases import memory, move, nodes, placement, process, stat, weighted

TOPOLOGY = "mem-only"
pytestmark = [pytest.mark.numa_vm(topology=TOPOLOGY, kernel="arm64"), pytest.mark.arm64_vm]

EM_AARCH64 = 183


@pytest.fixture(autouse=True)
def arm64_guest():
    """The guest really is arm64 (tests/vm/probe.py picks arm64's system call numbers by the machine)."""
    assert os.uname().machine == "aarch64", os.uname()
    assert (probe.SYS_MBIND, probe.SYS_SET_MEMPOLICY, probe.SYS_GET_MEMPOLICY, probe.SYS_MOVE_PAGES) == (
        235, 237, 236, 239)


def test_arm64_kernel_runs_the_arm64_core():
    import numabind
    from numabind import _native

    with open(_native.__file__, "rb") as f:
        head = f.read(20)
    assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == EM_AARCH64, _native.__file__
    assert _native.ffi.string(_native.lib.nb_version()).decode() == numabind.__version__
    info = numabind.backend_info()
    # "native": what the compiled core is ("numabind._native V loaded from PATH"), native_ok whether it loaded
    assert info["native_ok"] and f"loaded from {_native.__file__}" in info["native"], info
    assert info["selected"] == "libnuma" and info["available"]["syscall"], info
    print(f"{os.uname().machine} {os.uname().release}: C core {_native.__file__} (aarch64), "
          f"backend {info['selected']}")


def test_arm64_nodes_cpus_and_distances_are_what_qemu_was_given(vm_topology):
    nodes.guest_has_the_nodes_qemu_was_given(TOPOLOGY, vm_topology)
    assert vm_topology.memory_only_nodes == (2,)


def test_arm64_discover_matches_numactl_and_qemu(vm_topology):
    import numabind

    topo = numabind.discover()
    numactl = nodes.numactl_hardware()
    ids = list(range(len(vm_topology.nodes)))
    assert sorted(topo.nodes) == ids == sorted(numactl["cpus"])
    for i in ids:
        node = topo.nodes[i]
        assert set(node.cpus) == set(vm_topology.nodes[i].cpus) == numactl["cpus"][i], f"node {i} CPUs"
        row = vm_topology.distance_matrix()[i]
        assert [node.distances[j] for j in ids] == row == numactl["distances"][i], f"node {i} distances"
        assert node.memory_bytes >> 20 == numactl["mb"][i], f"node {i} MiB"
    assert set(topo.online_cpus) == set(range(vm_topology.ncpus))
    assert topo.nodes[2].cpus == frozenset() and topo.nodes[2].memory_bytes > 0    # the memory-only node
    print(f"arm64 {TOPOLOGY}: discover() == numactl --hardware == QEMU: CPUs {[sorted(topo.nodes[i].cpus) for i in ids]}, "
          f"distances {[numactl['distances'][i] for i in ids]}")


@pytest.mark.parametrize("backend", ["libnuma", "syscall"])
def test_arm64_bind_to_node1_places_threads_and_pages(backend, vm_topology):
    placement.bind_current_to_node1_places_threads_and_pages(backend, vm_topology)


# ----------------------------------------------------------------------------- preferred, interleave
def test_arm64_preferred_with_room_puts_the_pages_on_the_node(vm_topology):
    m = probe.in_child(placement.preferred_measure, 1, 64 * probe.MIB)
    share = probe.shares(m["move_pages"]).get(1, 0.0)
    print(f"arm64 preferred 1, 64 MiB: move_pages {probe.fmt_shares(m['move_pages'])}; numa_maps "
          f"{probe.fmt_shares(m['numa_maps'])} ({m['policy']})")
    assert m["applied_policy"] == "preferred" and m["policy"] == "prefer:1"
    assert share >= 99.0 and probe.shares(m["numa_maps"]).get(1, 0.0) >= 99.0


def test_arm64_preferred_to_a_full_node_falls_back_without_oom(vm_topology):
    placement.preferred_to_a_full_node_falls_back_without_oom(vm_topology)


def test_arm64_interleave_spreads_pages_evenly(vm_topology):
    placement.interleave_spreads_pages_evenly(vm_topology)


def test_arm64_bind_memory_interleave_puts_pages_on_both_nodes(vm_topology):
    memory.interleave_over_nodes_0_and_1_puts_pages_on_both(vm_topology)


# ----------------------------------------------------------------------------- weighted interleave
def test_arm64_weighted_interleave_3_to_1_where_the_kernel_has_it(vm_topology):
    if not os.path.isdir(weighted.WEIGHTS_DIR):
        pytest.skip(f"arm64 guest kernel {os.uname().release} has no weighted interleave (no "
                    f"{weighted.WEIGHTS_DIR}: MPOL_WEIGHTED_INTERLEAVE is Linux 6.9+)")
    before = weighted.system_weights()
    try:
        m = probe.in_child(weighted.bind_weighted_and_measure, {0: 3, 1: 1}, True, True)
    finally:
        weighted.write_weights(before)
    share = weighted.share0(m["move_pages"])
    print(f"arm64 weighted interleave 3:1 over 64 MiB: move_pages {probe.fmt_shares(m['move_pages'])}")
    assert m["warnings"] == [] and 70.0 <= share <= 80.0 and 70.0 <= weighted.share0(m["numa_maps"]) <= 80.0


def test_arm64_weighted_plan_degrades_to_interleave_where_the_kernel_lacks_it(vm_topology):
    if os.path.isdir(weighted.WEIGHTS_DIR):
        pytest.skip(f"{os.uname().release} has weighted interleave ({weighted.WEIGHTS_DIR})")
    weighted.a_kernel_without_weighted_interleave_degrades_to_interleave()


# ----------------------------------------------------------------------------- migration
def test_arm64_bind_memory_move_moves_pages_from_node_0_to_node_1(vm_topology):
    memory.move_moves_pages_touched_before_from_node_0_to_node_1(vm_topology)


def test_arm64_migrate_reports_pages_moved_and_left(vm_topology):
    process.migrate_reports_pages_moved_and_left(vm_topology)


def test_arm64_numabind_move_of_a_32_thread_process(vm_topology):
    move.move_a_32_thread_process_with_256_mib_from_node_0_to_node_1(vm_topology)


# ----------------------------------------------------------------------------- birth binding of children
@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_arm64_birth_binding_of_children(method, vm_topology):
    process.birth_time_binding_beats_late_cpu_only_binding(method, vm_topology)


# ----------------------------------------------------------------------------- numabind run, numabind stat
@pytest.mark.parametrize("backend", ["numactl", "syscall"])
def test_arm64_numabind_run_binds_the_command(backend, vm_topology, tmp_path):
    """test_vm_placement's ``numabind run`` check, with the guest's PYTHONPATH kept (the arm64 userland finds the
    checkout's package through it: it reads no .pth file of the host's editable install)."""
    cpus = sorted(vm_topology.node_cpus(1))
    real = shutil.which("numactl")
    assert real, "numactl is not in the arm64 userland (scripts/arm64_userland.sh installs it)"
    calls = tmp_path / "numactl-calls"
    (tmp_path / "numactl").write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {real} "$@"\n')
    (tmp_path / "numactl").chmod(0o755)
    env = dict(os.environ, NUMABIND_BACKEND=backend, PATH=f"{tmp_path}:{os.environ['PATH']}")
    argv = [sys.executable, "-m", "numabind", "run", f"--physcpubind={cpus[0]}-{cpus[-1]}", "--membind=1", "--",
            sys.executable, "-c", placement.CHILD_REPORT]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=harness.REPO_ROOT, timeout=480)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, proc.stdout + proc.stderr
    m = json.loads(line[-1][len("RESULT "):])
    numactl_calls = calls.read_text().splitlines() if calls.exists() else []
    if backend == "numactl":
        assert numactl_calls and numactl_calls[0].startswith(f"--physcpubind={cpus[0]}-{cpus[-1]} --membind=1 --")
    else:
        assert numactl_calls == []
    share_mp = probe.shares({int(k): v for k, v in m["move_pages"].items()}).get(1, 0.0)
    share_maps = probe.shares({int(k): v for k, v in m["numa_maps"].items()}).get(1, 0.0)
    threads = sorted({tuple(c) for c in m["threads"].values()})
    print(f"arm64 numabind run via {backend}: {len(m['threads'])} threads on CPUs {threads}; "
          f"64 MiB in the command: move_pages {probe.fmt_shares(m['move_pages'])}; numa_maps N1={share_maps:.2f}% "
          f"({m['policy']})")
    assert all(c == cpus for c in m["threads"].values()), m["threads"]
    assert m["policy"] == "bind:1" and share_mp >= 99.0 and share_maps >= 99.0


def test_arm64_numabind_stat_of_a_process_bound_to_node_1(vm_topology):
    stat.stat_of_a_worker_bound_to_node_1_is_local(vm_topology)


def test_arm64_numabind_stat_of_a_late_cpu_only_bound_process(vm_topology):
    stat.stat_of_a_late_cpu_only_bound_worker_shows_its_remote_share(vm_topology)


# ----------------------------------------------------------------------------- the memory-only node
def test_arm64_bind_to_the_memory_only_node_puts_the_pages_there(vm_topology):
    """test_vm_placement's memory-only check, with the CLI's refusal run under the guest's PYTHONPATH."""
    import numabind

    (mem_node,) = vm_topology.memory_only_nodes
    m = probe.in_child(placement.bind_memory_only, mem_node, 32 * probe.MIB)
    share = probe.shares(m["move_pages"]).get(mem_node, 0.0)
    print(f"arm64 bind to memory-only node {mem_node}: 32 MiB {probe.fmt_shares(m['move_pages'])}; "
          f"numa_maps {probe.fmt_shares(m['numa_maps'])} ({m['policy']})")
    assert m["warnings"] == [] and m["applied_policy"] == "bind" and m["applied_nodes"] == [mem_node]
    assert m["policy"] == f"bind:{mem_node}"
    assert share >= 99.0 and probe.shares(m["numa_maps"]).get(mem_node, 0.0) >= 99.0
    topo = numabind.discover()
    with pytest.raises(numabind.PlanError, match="no CPUs"):
        numabind.Plan.from_numactl_args(f"--cpunodebind={mem_node}", topology=topo)
    proc = subprocess.run([sys.executable, "-m", "numabind", "run", f"--cpunodebind={mem_node}", "--", "true"],
                          capture_output=True, text=True, cwd=harness.REPO_ROOT, timeout=240)
    assert proc.returncode != 0 and "no CPUs" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_arm64_bind_memory_to_the_memory_only_node(vm_topology):
    memory.bind_puts_the_pages_on_the_node(vm_topology, 2)


# ----------------------------------------------------------------------------- numabind check (issue 44)
def test_arm64_numabind_check_proves_placement_per_node(vm_topology):
    """``numabind check --json`` on the arm64 kernel: every call allowed, and each node's plan (nodes 0 and 1: the
    memory-only node has no CPUs, so no worker) holds all its pages and those of a thread started after the bind."""
    proc = subprocess.run([sys.executable, "-m", "numabind", "check", "--json", "--mib", "8"], capture_output=True,
                          text=True, cwd=harness.REPO_ROOT, timeout=480)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    placed = {int(p["nodes"]): p for p in out["placement"]}
    print(f"arm64 numabind check: {out['seconds']} s, backend {out['backend']}; "
          + "; ".join(f"node {n}: {p['share']} of {p['pages']} pages" for n, p in placed.items()))
    assert sorted(placed) == sorted(vm_topology.cpu_nodes)
    assert all(t["ok"] for t in out["trials"]) and out["exit_status"] == 0
    for p in placed.values():
        assert p["share"] == 1.0 and p["late_thread"] == {"share": 1.0, "cpus_held": True}, p


# ----------------------------------------------------------------------------- numabind gather (issue 44)
def test_arm64_gather_writes_an_archive_the_host_replays(vm_topology):
    gathering.guest_gathers("gather-arm64", vm_topology)
