"""One rule for a launcher's binding (issue 42 §3), on the real kernel of the 3-node guest (``mem-only``: node 0
CPUs 0-1, node 1 CPUs 2-3, node 2 memory only).

A launcher binds local rank 1 of 2 (a CPU-only rank whose plan is node 1) to CPU 0, as ``taskset -c 0``, srun's
default task binding or ``mpirun --bind-to core`` would:

* ``numabind run --gpu-from-rank``: the cpuset is the limit, so the rank runs on node 1's CPUs 2-3 with its
  memory bound to node 1 (the launcher's CPU is where it started; numabind replaces it, as numactl does);
* with ``--within-affinity --strict``: refused before the command runs, naming ``srun --cpu-bind=none`` and
  ``mpirun --bind-to none``;
* with ``--within-affinity`` (lenient, the rank's default): it stays on CPU 0 and its memory is preferred on
  node 0, where that CPU is, never bound to node 1, where it cannot run; 32 MiB it touches lands on node 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from . import harness, probe

CHILD = r"""
import json, os
import numabind
from tests.vm import probe
b = numabind.current_binding()
m = probe.measure(32 << 20)
m.update(cpus=sorted(b.cpus), nb_policy=b.mem_policy, nb_nodes=sorted(b.mem_nodes))
print("RESULT " + json.dumps(m))
"""


def _env() -> dict[str, str]:
    drop = ("LOCAL_", "NUMABIND_LOCAL_", "SLURM_", "OMPI_", "MPI_LOCAL", "PMI_", "PALS_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)
           and k not in ("CUDA_VISIBLE_DEVICES", "NUMABIND_BACKEND", "NUMABIND_FSROOT", "NUMABIND_STRICT")}
    # this checkout's src first (the host's editable install may name another), then the checkout for tests.vm
    env.update(PYTHONPATH=f"{harness.REPO_ROOT / 'src'}:{harness.REPO_ROOT}", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
    return env


def _run(*options: str) -> subprocess.CompletedProcess:
    argv = ["taskset", "-c", "0", sys.executable, "-m", "numabind", "-v", "run", "--gpu-from-rank", *options, "--",
            sys.executable, "-c", CHILD]
    return subprocess.run(argv, capture_output=True, text=True, env=_env(), cwd=harness.REPO_ROOT, timeout=300)


def _result(proc: subprocess.CompletedProcess) -> dict:
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1][len("RESULT "):])


@pytest.mark.numa_vm(topology="mem-only")
def test_a_launchers_binding_is_replaced_kept_or_refused(vm_topology):
    import numabind

    topo = numabind.discover()
    assert {n: sorted(topo.nodes[n].cpus) for n in topo.nodes} == {0: [0, 1], 1: [2, 3], 2: []}
    assert sorted(vm_topology.node_cpus(1)) == [2, 3]

    replaced = _result(_run())
    counts = {int(k): v for k, v in replaced["move_pages"].items()}
    print(f"issue 42 §3, taskset -c 0 numabind run --gpu-from-rank (rank 1 of 2): CPUs {replaced['cpus']}, "
          f"{replaced['nb_policy']} {replaced['nb_nodes']}, 32 MiB {probe.fmt_shares(counts)}")
    assert replaced["cpus"] == [2, 3]
    assert (replaced["nb_policy"], replaced["nb_nodes"]) == ("bind", [1])
    assert probe.shares(counts).get(1, 0.0) >= 99.0

    strict = _run("--within-affinity", "--strict")
    assert strict.returncode == 1 and "RESULT " not in strict.stdout, strict.stdout
    assert "srun --cpu-bind=none" in strict.stderr and "mpirun --bind-to none" in strict.stderr, strict.stderr

    lenient = _run("--within-affinity")
    kept = _result(lenient)
    counts = {int(k): v for k, v in kept["move_pages"].items()}
    print(f"issue 42 §3, taskset -c 0 numabind run --gpu-from-rank --within-affinity: CPUs {kept['cpus']}, "
          f"{kept['nb_policy']} {kept['nb_nodes']}, 32 MiB {probe.fmt_shares(counts)}")
    assert kept["cpus"] == [0]
    assert (kept["nb_policy"], kept["nb_nodes"]) == ("preferred", [0])
    assert "memory preferred on node(s) 0" in lenient.stderr, lenient.stderr
    assert probe.shares(counts).get(0, 0.0) >= 99.0
