"""Issue 29, part 2, in the 3-node guest (``mem-only``: node 0 = CPUs 0-1, node 1 = CPUs 2-3, node 2 memory
only; one CPU per core, no SMT): one thread per core, split budgets, an OpenMP child, CPU-only ranks.

* ``numabind.pin_threads`` puts 4 Python threads on the 4 cores of a plan over nodes 0 and 1, ``compact``
  (node 0's cores first) and ``scatter`` (alternating nodes); each thread's affinity is read back by its
  native id and by the thread itself, with the CPU it runs on (``sched_getcpu``).
* ``Plan.split`` parts stay on one node (``[1, 1]``: both on node 0, the node with the fewest free cores
  that holds a part; ``[2, 2]``: one node each, memory narrowed), and ``Plan.thread_env`` gives an OpenMP
  child (libgomp, through ctypes) the places its runtime keeps whole inside what ``numabind run`` bound:
  each thread of its team on its own place's CPU.
* ``numabind run --gpu-from-rank`` with no GPU: 2 local ranks get one node each, 4 ranks one core each,
  memory bound to the rank's node, and 32 MiB the rank touches lands there (``move_pages`` and numa_maps).

Every binding happens in a forked child (``probe.in_child``) or a fresh process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from . import harness, probe

MIB = probe.MIB
PLAN_CPUS = (0, 1, 2, 3)      # nodes 0 and 1 of the mem-only guest

#: What strategies.thread_placement gives 4 threads on CPUs 0-3 (one CPU per core; node 0 = 0-1, node 1 = 2-3).
EXPECTED_PINS = {"compact": [[0], [1], [2], [3]], "scatter": [[0], [2], [1], [3]]}


def _check_guest(topo, vm_topology) -> None:
    """The guest is the machine the expected values were worked out for."""
    assert {n: sorted(topo.nodes[n].cpus) for n in topo.nodes} == {0: [0, 1], 1: [2, 3], 2: []}
    assert sorted(vm_topology.node_cpus(0)) == [0, 1] and sorted(vm_topology.node_cpus(1)) == [2, 3]
    assert all(topo.cpus[c].siblings in (frozenset(), frozenset({c})) for c in PLAN_CPUS), "the guest has SMT"
    assert not topo.gpus


# ----------------------------------------------------------------------------- pin_threads
def _pin_four_threads(order: str) -> dict:
    """In the child: start 4 threads, pin them with ``order``, read each back three ways."""
    import ctypes
    import threading

    import numabind

    libc = ctypes.CDLL(None, use_errno=True)
    topo = numabind.discover()
    plan = numabind.Plan(cpus=frozenset(PLAN_CPUS), mem_policy="bind", mem_nodes=frozenset({0, 1}))
    main_before = sorted(os.sched_getaffinity(0))
    pinned, stop = threading.Event(), threading.Event()
    seen: dict[int, dict] = {}

    def worker(k: int) -> None:
        pinned.wait(120)
        own = sorted(os.sched_getaffinity(0))
        ran_on = set()
        for _ in range(200):       # the CPU it runs on, sampled while it works
            sum(range(200))
            ran_on.add(libc.sched_getcpu())
        seen[k] = {"own": own, "ran_on": sorted(ran_on)}
        stop.wait(120)

    threads = [threading.Thread(target=worker, args=(k,), name=f"pool{k}", daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    try:
        report = numabind.pin_threads(plan, threads=threads, order=order, topology=topo, strict=True)
        by_tid = [sorted(os.sched_getaffinity(t.native_id)) for t in threads]
        pinned.set()
        for _ in range(600):
            if len(seen) == 4:
                break
            stop.wait(0.2)
    finally:
        pinned.set()
        stop.set()
    return {"order": report.order, "backend": report.backend, "ok": report.ok, "warnings": list(report.warnings),
            "tids": [t.tid for t in report.threads], "native_ids": [t.native_id for t in threads],
            "given": [sorted(t.cpus) for t in report.threads], "status": [t.status for t in report.threads],
            "by_tid": by_tid, "seen": [seen.get(k) for k in range(4)], "main_before": main_before,
            "main_after": sorted(os.sched_getaffinity(0)), "describe": report.describe()}


@pytest.mark.numa_vm(topology="mem-only")
@pytest.mark.parametrize("order", ["compact", "scatter"])
def test_pin_threads_one_thread_per_core(order, vm_topology):
    import numabind

    _check_guest(numabind.discover(), vm_topology)
    r = probe.in_child(_pin_four_threads, order)
    expected = EXPECTED_PINS[order]
    print(f"issue 29, pin_threads {order} on CPUs 0-3 (nodes 0, 1): {r['describe']!r}; threads saw "
          f"{[s and s['own'] for s in r['seen']]}, ran on {[s and s['ran_on'] for s in r['seen']]}")
    assert r["order"] == order and r["ok"] and r["warnings"] == [], r
    assert r["tids"] == r["native_ids"]              # in the order given
    assert r["status"] == ["pinned"] * 4
    assert r["given"] == expected
    assert r["by_tid"] == expected                    # os.sched_getaffinity(native_id), from the main thread
    assert [s["own"] for s in r["seen"]] == expected  # each thread's own view
    assert [s["ran_on"] for s in r["seen"]] == expected
    assert r["main_after"] == r["main_before"] == [0, 1, 2, 3]   # the caller keeps its CPUs


# ----------------------------------------------------------------------------- split and thread_env
OMP_CHILD = r"""
import ctypes, json, os, threading
import numabind
from tests.vm import probe
before = sorted(os.sched_getaffinity(0))
binding = numabind.current_binding()
m = probe.measure(32 << 20)
gomp = ctypes.CDLL("libgomp.so.1")
places = []
for i in range(gomp.omp_get_num_places()):
    ids = (ctypes.c_int * gomp.omp_get_place_num_procs(i))()
    gomp.omp_get_place_proc_ids(i, ids)
    places.append(sorted(ids))
team, lock = {}, threading.Lock()
def body(_):
    with lock:
        team[gomp.omp_get_thread_num()] = [gomp.omp_get_place_num(), sorted(os.sched_getaffinity(0))]
body_c = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(body)
gomp.GOMP_parallel(body_c, None, 0, 0)   # OMP_NUM_THREADS threads, OMP_PROC_BIND from the environment
m.update(before=before, nb_policy=binding.mem_policy, nb_nodes=sorted(binding.mem_nodes), places=places,
         team=[team[k] for k in sorted(team)], env={k: v for k, v in os.environ.items() if k.startswith("OMP_")})
print("RESULT " + json.dumps(m))
"""


def _result(proc: subprocess.CompletedProcess) -> dict:
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1][len("RESULT "):])


def _clean_env(**extra: str) -> dict[str, str]:
    """The guest's environment without rank, GPU-visibility or OpenMP variables, plus ``extra``."""
    drop = ("LOCAL_", "NUMABIND_LOCAL_", "SLURM_", "OMPI_", "MPI_LOCAL", "PMI_", "PALS_", "OMP_", "GOMP_", "KMP_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)
           and k not in ("CUDA_VISIBLE_DEVICES", "NUMABIND_BACKEND", "NUMABIND_FSROOT", "NUMABIND_STRICT")}
    env.update(PYTHONPATH=str(harness.REPO_ROOT), **extra)
    return env


@pytest.mark.numa_vm(topology="mem-only")
def test_split_parts_and_thread_env_in_a_bound_openmp_child(vm_topology):
    import numabind

    topo = numabind.discover()
    _check_guest(topo, vm_topology)
    plan = numabind.Plan(cpus=frozenset(PLAN_CPUS), mem_policy="bind", mem_nodes=frozenset({0, 1}))

    small = plan.split([1, 1], topo)     # both fit node 0, the node with the fewest free cores after the first
    assert [(sorted(p.cpus), p.mem_policy, sorted(p.mem_nodes)) for p in small] == [([0], "bind", [0]),
                                                                                    ([1], "bind", [0])]
    halves = plan.split([2, 2], topo)    # one node each, memory narrowed to the part's node
    assert [(sorted(p.cpus), p.mem_policy, sorted(p.mem_nodes)) for p in halves] == [([0, 1], "bind", [0]),
                                                                                     ([2, 3], "bind", [1])]
    (wide,) = plan.split([3], topo)      # no node holds 3 cores: node 0's then node 1's lowest
    assert (sorted(wide.cpus), sorted(wide.mem_nodes)) == ([0, 1, 2], [0, 1])
    with pytest.raises(numabind.PlanError, match="asks for 5 cores"):
        plan.split([3, 2], topo)

    assert plan.thread_env(topo) == {"OMP_NUM_THREADS": "4", "OMP_PLACES": "{0},{1},{2},{3}", "OMP_PROC_BIND": "close"}
    part = halves[1]
    omp = part.thread_env(topo)
    assert omp == {"OMP_NUM_THREADS": "2", "OMP_PLACES": "{2},{3}", "OMP_PROC_BIND": "close"}

    argv = [sys.executable, "-m", "numabind", "run", *part.to_numactl_argv(), "--", sys.executable, "-c", OMP_CHILD]
    proc = subprocess.run(argv, capture_output=True, text=True, env=_clean_env(**omp), cwd=harness.REPO_ROOT,
                          timeout=240)
    m = _result(proc)
    share = probe.shares({int(k): v for k, v in m["move_pages"].items()}).get(1, 0.0)
    print(f"issue 29, split [2, 2] part 1 ({part.describe()}) run with {omp}: child CPUs {m['before']}, "
          f"libgomp places {m['places']}, team (place, CPUs) {m['team']}; 32 MiB {probe.fmt_shares(m['move_pages'])}"
          f" ({m['policy']})")
    assert part.to_numactl_argv() == ["--physcpubind=2-3", "--membind=1"]
    assert m["env"] == omp
    assert m["before"] == [2, 3]                                     # numabind run bound the child
    assert "reduced" not in proc.stderr, proc.stderr                 # libgomp dropped no place
    assert m["places"] == [[2], [3]]                                 # the runtime's places are the plan's cores
    assert m["team"] == [[0, [2]], [1, [3]]]                         # one thread per place, bound there
    assert m["nb_policy"] == "bind" and m["nb_nodes"] == [1] and m["policy"] == "bind:1"
    assert share >= 99.0


# ----------------------------------------------------------------------------- CPU-only ranks
RANK_CHILD = r"""
import json, os
import numabind
from tests.vm import probe
b = numabind.current_binding()
m = probe.measure(32 << 20)
m.update(cpus=sorted(b.cpus), nb_policy=b.mem_policy, nb_nodes=sorted(b.mem_nodes),
         threads=sorted({tuple(sorted(c)) for c in b.threads.values()}))
print("RESULT " + json.dumps(m))
"""

#: local world size -> each rank's (CPUs, memory node), as rank.plan_cpu_rank plans the mem-only guest:
#: ranks <= the 2 nodes with CPUs: one node each; more ranks: the 4 cores in equal blocks, in node order.
#: Node 2 has no CPUs, so it is never a rank's node.
EXPECTED_RANKS = {2: [([0, 1], 0), ([2, 3], 1)], 4: [([0], 0), ([1], 0), ([2], 1), ([3], 1)]}


@pytest.mark.numa_vm(topology="mem-only")
@pytest.mark.parametrize("size", [2, 4])
def test_cpu_only_ranks_bind_their_share_and_memory(size, vm_topology):
    import numabind

    _check_guest(numabind.discover(), vm_topology)
    procs = []
    for rank in range(size):     # started together, as a launcher starts them
        env = _clean_env(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(size))
        argv = [sys.executable, "-m", "numabind", "-v", "run", "--gpu-from-rank", "--", sys.executable, "-c",
                RANK_CHILD]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                      cwd=harness.REPO_ROOT))
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        results.append((subprocess.CompletedProcess(p.args, p.returncode, out, err)))
    lines = []
    for rank, (proc, (cpus, node)) in enumerate(zip(results, EXPECTED_RANKS[size])):
        m = _result(proc)
        counts = {int(k): v for k, v in m["move_pages"].items()}
        maps = {int(k): v for k, v in m["numa_maps"].items()}
        lines.append(f"rank {rank}/{size}: CPUs {m['cpus']}, {m['nb_policy']} {m['nb_nodes']}, 32 MiB "
                     f"{probe.fmt_shares(counts)}")
        assert f"local rank {rank} (LOCAL_RANK) -> CPU rank on nodes {node}" in proc.stderr, proc.stderr
        assert m["cpus"] == cpus and m["threads"] == [cpus]
        assert (m["nb_policy"], m["nb_nodes"], m["policy"]) == ("bind", [node], f"bind:{node}")
        assert probe.shares(counts).get(node, 0.0) >= 99.0 and probe.shares(maps).get(node, 0.0) >= 99.0, lines
    print(f"issue 29, numabind run --gpu-from-rank without a GPU, LOCAL_WORLD_SIZE={size}: " + "; ".join(lines))
