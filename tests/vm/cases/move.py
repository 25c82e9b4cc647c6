"""``numabind move`` of a running 32-thread process from node 0 to node 1, checked without numabind
(tests/vm/test_vm_move.py; test_vm_arm64.py in the arm64 guest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .. import probe
from ..specs import REPO_ROOT

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


def _share(counts: dict, node: int) -> float:
    total = sum(v for k, v in counts.items() if int(k) >= 0)
    return 100.0 * counts.get(str(node), counts.get(node, 0)) / total if total else 0.0


def move_a_32_thread_process_with_256_mib_from_node_0_to_node_1(vm_topology):
    node0 = ",".join(map(str, sorted(vm_topology.node_cpus(0))))
    node1 = frozenset(vm_topology.node_cpus(1))
    worker = subprocess.Popen([sys.executable, "-m", "numabind", "run", "-C", node0, "--", sys.executable, "-c",
                               WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              cwd=str(REPO_ROOT))
    try:
        first = worker.stdout.readline().split(" ", 1)
        assert first[0] == "ready", f"worker {worker.pid} did not start"
        before = json.loads(first[1])
        tids = sorted(int(t) for t in os.listdir(f"/proc/{worker.pid}/task"))
        assert len(tids) == THREADS
        anon_before = probe.process_node_pages(worker.pid, private_only=True)
        cp = subprocess.run([sys.executable, "-c", MOVE, str(worker.pid), "-N", "1", "-m", "1", "--json"],
                            capture_output=True, text=True, timeout=600, cwd=str(REPO_ROOT))
        assert cp.returncode == 0, cp.stderr
        [report] = json.loads(cp.stdout)
        now = {t: frozenset(os.sched_getaffinity(t)) for t in tids}
        worker.stdin.write("where\n")
        worker.stdin.flush()
        after = json.loads(worker.stdout.readline())
        anon_after = probe.process_node_pages(worker.pid, private_only=True)
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
