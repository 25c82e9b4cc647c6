"""Issue 44: ``numabind check`` in the 3-node guest (``mem-only``: nodes 0 and 1 with CPUs, node 2 memory only).

Without GPUs the plans are a worker per node with CPUs (0 and 1): every call is tried in the check's child, each
node's plan is bound there, 16 MiB touched and counted with ``move_pages``, and a thread started after the bind
must hold it. Under a seccomp filter refusing ``set_mempolicy`` (installed in a child, which the check's own child
inherits) it exits 1 naming the cause and the fix. ``check --measure --seconds 2`` gives a 2x3 matrix (the
memory-only node a column only), every cell measured from its node's CPUs over pages on its node, on time; the
figures are TCG's and are not asserted. The tests share the ``mem-only`` guest with the other tests of that topology
(one boot).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from . import harness, probe

pytestmark = pytest.mark.numa_vm(topology="mem-only")


def _check(*args: str, deny: bool = False) -> subprocess.CompletedProcess:
    """``numabind check ARGS`` in a child of the guest's Python; with ``deny``, under a seccomp filter that refuses
    set_mempolicy and mbind (probe.deny_mempolicy, set in that child before numabind starts)."""
    code = ("import sys\n"
            + ("from tests.vm import probe\nprobe.deny_mempolicy()\n" if deny
               else "")
            + f"from numabind.cli import main\nsys.exit(main(['check', *{list(args)!r}]))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=harness.REPO_ROOT,
                          timeout=480, env=dict(os.environ, PYTHONPATH=str(harness.REPO_ROOT)))


def test_check_holds_in_the_guest_with_placement_per_node(vm_topology):
    proc = _check("--json", "--mib", "16")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    with_cpus = sorted(vm_topology.cpu_nodes)
    placed = {p["nodes"]: p for p in out["placement"]}
    print(f"numabind check in the guest: {out['seconds']} s; "
          + "; ".join(f"node {n}: {p['share']:.3f} of {p['pages']} pages, late thread {p['late_thread']}"
                      for n, p in placed.items()))
    assert sorted(int(n) for n in placed) == with_cpus
    for node, p in placed.items():
        assert p["ok"] and p["share"] == 1.0 and p["by_node"] == {node: p["pages"]}, p
        assert p["late_thread"] == {"share": 1.0, "cpus_held": True}, p
    assert out["exit_status"] == 0 and all(t["ok"] for t in out["trials"])
    (mem_only,) = vm_topology.memory_only_nodes
    assert all(str(mem_only) not in (plan["mem_nodes"] or "") for plan in out["plans"])
    text = _check("--no-placement")
    assert text.returncode == 0 and text.stdout.strip().splitlines()[-1].startswith("verdict: ok: "), text.stdout


def test_check_under_seccomp_in_the_guest_names_the_cause(vm_topology):
    proc = _check("--no-placement", deny=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "set_mempolicy (bind 0): refused (EPERM), cause: seccomp" in proc.stdout, proc.stdout
    assert "seccomp profile that allows set_mempolicy" in proc.stdout, proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == (
        "verdict: memory policy: refused (EPERM): a seccomp profile that allows set_mempolicy")


#: Seconds ``check --measure --seconds 2`` may take in the guest past the 2 asked (the child's start under TCG, and
#: setting up and verifying a buffer pair on each node).
MEASURE_SLACK = 20.0


def test_check_measure_in_the_guest_gives_cpu_rows_and_memory_columns(vm_topology):
    started = time.monotonic()
    proc = _check("--measure", "--seconds", "2", "--json")
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)["measure"]
    print(f"numabind check --measure --seconds 2 in the guest: {took:.2f} s in all, the measure {out['seconds']} s; "
          f"latency ns {out['latency_ns']}; read MB/s {out['read_mb_s']}; copy MB/s {out['copy_mb_s']}")
    with_cpus = sorted(vm_topology.cpu_nodes)
    (mem_only,) = vm_topology.memory_only_nodes
    assert out["sources"] == with_cpus and mem_only not in with_cpus
    assert out["targets"] == sorted([*with_cpus, mem_only])
    assert len(out["sources"]) == 2 and len(out["targets"]) == 3
    assert [(c["source"], c["target"]) for c in out["cells"]] == [(s, t) for s in out["sources"]
                                                                  for t in out["targets"]]
    for c in out["cells"]:
        cpus = vm_topology.nodes[c["source"]].cpus
        assert c["measured"] and c["on_target"] and not c["out_of_time"], c
        assert c["by_node"] == {str(c["target"]): c["pages"]} and c["pages"] > 0, c
        assert c["cpus"] == f"{min(cpus)}-{max(cpus)}" and len(cpus) == max(cpus) - min(cpus) + 1, c
        assert c["latency_ns"] > 0 and c["read_mb_s"] > 0 and c["copy_mb_s"] > 0, c
    assert set(out["latency_ns"]) == {str(n) for n in with_cpus}
    assert all(set(row) == {str(t) for t in out["targets"]} for row in out["latency_ns"].values())
    assert out["slit"][str(with_cpus[0])][str(mem_only)] == vm_topology.distance(with_cpus[0], mem_only)
    assert out["seconds"] < 2 + MEASURE_SLACK and out["ok"]
