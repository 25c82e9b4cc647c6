"""Issue 28, section 2, in a 3-node guest: ``numabind move`` moves a running process across nodes.

A worker with 32 threads is started on node 0's CPUs (``numabind run -N 0``, no memory policy: first touch puts
its pages on node 0) and touches 256 MiB in a ``probe.Region``. ``numabind move PID -N 1 -m 1`` (the command
line's own module) then moves it to node 1: every thread must be on node 1's CPUs (``os.sched_getaffinity`` of
each thread, read here) and at least 99 % of the region's pages on node 1, counted by the worker itself with
``move_pages(2)``; the whole process's anonymous pages (``/proc/PID/numa_maps``, read here) are printed beside it.
Topology ``mem-only``: nodes 0 (CPUs 0-1) and 1 (CPUs 2-3) with 512 MiB each, and node 2 (memory only).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from . import harness

SIZE_MIB = 256
THREADS = 32
WORKER = f"""
import json, sys, threading
sys.path.insert(0, '.')
from tests.vm import probe
forever = threading.Event()
for _ in range({THREADS} - 1):
    threading.Thread(target=forever.wait, daemon=True).start()
region = probe.Region({SIZE_MIB} << 20).touch()
print("ready " + json.dumps({{str(k): v for k, v in region.node_counts().items()}}), flush=True)
for line in sys.stdin:
    print(json.dumps({{str(k): v for k, v in region.node_counts().items()}}), flush=True)
"""
MOVE = "import sys; from numabind.cli.move import main; sys.exit(main(sys.argv[1:]))"


def _anon_pages(pid: int) -> dict[int, int]:
    out: dict[int, int] = {}
    with open(f"/proc/{pid}/numa_maps") as f:
        for line in f:
            if " file=" in line or " huge " in line:
                continue
            for m in re.finditer(r"\bN(\d+)=(\d+)", line):
                out[int(m[1])] = out.get(int(m[1]), 0) + int(m[2])
    return out


def _share(counts: dict, node: int) -> float:
    total = sum(v for k, v in counts.items() if int(k) >= 0)
    return 100.0 * counts.get(str(node), counts.get(node, 0)) / total if total else 0.0


@pytest.mark.numa_vm(topology="mem-only")
def test_move_a_32_thread_process_with_256_mib_from_node_0_to_node_1(vm_topology):
    node0 = ",".join(map(str, sorted(vm_topology.node_cpus(0))))
    node1 = frozenset(vm_topology.node_cpus(1))
    worker = subprocess.Popen([sys.executable, "-m", "numabind", "run", "-C", node0, "--", sys.executable, "-c",
                               WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              cwd=str(harness.REPO_ROOT))
    try:
        first = worker.stdout.readline().split(" ", 1)
        assert first[0] == "ready", f"worker {worker.pid} did not start"
        before = json.loads(first[1])
        tids = sorted(int(t) for t in os.listdir(f"/proc/{worker.pid}/task"))
        assert len(tids) == THREADS
        anon_before = _anon_pages(worker.pid)
        cp = subprocess.run([sys.executable, "-c", MOVE, str(worker.pid), "-N", "1", "-m", "1", "--json"],
                            capture_output=True, text=True, timeout=600, cwd=str(harness.REPO_ROOT))
        assert cp.returncode == 0, cp.stderr
        [report] = json.loads(cp.stdout)
        now = {t: frozenset(os.sched_getaffinity(t)) for t in tids}
        worker.stdin.write("where\n")
        worker.stdin.flush()
        after = json.loads(worker.stdout.readline())
        anon_after = _anon_pages(worker.pid)
        print(f"move: {THREADS} threads, {SIZE_MIB} MiB region on N0 before {_share(before, 0):.2f}%, on N1 after "
              f"{_share(after, 1):.2f}% (move_pages: {after}); whole process anon pages on N1 "
              f"{_share(anon_before, 1):.2f}% -> {_share(anon_after, 1):.2f}%; report: "
              f"{report['pages_moved']} moved, {report['pages_left']} left, warnings {report['warnings']}")
        assert _share(before, 0) >= 95.0, before     # the move has something to do
        assert set(now.values()) == {node1}, now      # every thread on node 1's CPUs
        assert report["threads_bound"] == THREADS and report["threads_refused"] == 0
        assert _share(after, 1) >= 99.0, after
        assert report["pages_moved"] >= (SIZE_MIB << 20) // os.sysconf("SC_PAGE_SIZE") * 99 // 100
        assert any("no call that sets another process's memory policy" in n for n in report["notes"])
    finally:
        worker.kill()
        worker.wait(60)
