"""``numabind stat`` of workers bound to node 1 at their start or late (their CPUs only), compared with their
``/proc/PID/numa_maps`` read without numabind (tests/vm/test_vm_stat.py; test_vm_arm64.py in the arm64 guest)."""

from __future__ import annotations

import json
import subprocess
import sys

from .. import probe
from ..specs import REPO_ROOT

SIZE_MIB = 32
WORKER = f"""
import sys
sys.path.insert(0, '.')
from tests.vm import probe
region = probe.Region({SIZE_MIB} << 20).touch()
print("ready", flush=True)
for line in sys.stdin:
    if line.startswith("bind "):
        import numabind
        cpus = {{int(c) for c in line.split()[1].split(",")}}
        numabind.bind_current(numabind.Plan(cpus=cpus), strict=True)   # CPUs only, late: pages stay
        print("bound", flush=True)
"""


def _start(*run_opts: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "numabind", "run", *run_opts, "--", sys.executable, "-c", WORKER]
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=str(REPO_ROOT))
    assert p.stdout.readline().strip() == "ready", f"worker {p.pid} did not start"
    return p


def _stop(p: subprocess.Popen) -> None:
    p.stdin.close()
    p.wait(timeout=120)


def _stat(*pids: int) -> list[dict]:
    cp = subprocess.run([sys.executable, "-m", "numabind", "stat", "--json", *map(str, pids)],
                        capture_output=True, text=True, timeout=240, cwd=str(REPO_ROOT))
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout)


def stat_of_a_worker_bound_to_node_1_is_local(vm_topology):
    cpus = ",".join(map(str, sorted(vm_topology.node_cpus(1))))
    p = _start("-C", cpus, "-m", "1")
    try:
        before = probe.process_node_pages(p.pid, private_only=True)
        [s] = _stat(p.pid)
        after = probe.process_node_pages(p.pid, private_only=True)
    finally:
        _stop(p)
    anon = s["remote_share_by_kind"]["anon"]
    print(f"worker bound to node 1: numabind stat remote {100 * s['remote_share']:.2f}% in all, anon "
          f"{100 * anon:.2f}% (anon pages per node from numa_maps: {before}); bound: {s['bound']}")
    assert s["error"] is None and s["cpu_nodes"] == "1" and s["cpus"] == cpus.replace(",", "-")
    assert s["bound"]["requested"].startswith(f"v1;cpus={cpus.replace(',', '-')};mem=bind:1")
    assert "numabind run" in s["bound"]["source"]
    assert s["pages"]["anon"].get("1", 0) >= SIZE_MIB * 256      # the 32 MiB region, at least
    assert 1.0 - anon >= 0.99                                      # >= 99 % of its own memory is local
    assert before.get(0, 0) / sum(before.values()) <= 0.01 and after.get(0, 0) / sum(after.values()) <= 0.01


def stat_of_a_late_cpu_only_bound_worker_shows_its_remote_share(vm_topology):
    p = _start("-C", ",".join(map(str, sorted(vm_topology.node_cpus(0)))), "-m", "0")
    try:
        p.stdin.write("bind " + ",".join(map(str, sorted(vm_topology.node_cpus(1)))) + "\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "bound"
        before = probe.process_node_pages(p.pid)
        [s] = _stat(p.pid)
        after = probe.process_node_pages(p.pid)
    finally:
        _stop(p)
    total = sum(s["pages"]["total"].values())
    share = s["remote_share"]
    print(f"worker moved to node 1's CPUs after touching {SIZE_MIB} MiB on node 0: numabind stat remote "
          f"{100 * share:.2f}% ({s['remote_pages']} of {total} pages; anon "
          f"{100 * s['remote_share_by_kind']['anon']:.2f}%); numa_maps N0 {before.get(0, 0)} -> {after.get(0, 0)}")
    assert s["cpu_nodes"] == "1"
    assert share > 0 and s["remote_share_by_kind"]["anon"] > 0.5
    assert s["remote_pages"] >= SIZE_MIB * 256
    # what numa_maps shows here (node 0 is remote to CPUs on node 1), read just before and after
    lo, hi = sorted((before.get(0, 0), after.get(0, 0)))
    assert lo - 64 <= s["remote_pages"] <= hi + 64
    assert abs(share - before.get(0, 0) / sum(before.values())) <= 0.01
