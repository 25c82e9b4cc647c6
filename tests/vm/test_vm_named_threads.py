"""Issue 45 section 2 in the 3-node guest (``mem-only``: node 0 = CPUs 0-1, node 1 = CPUs 2-3, node 2 memory
only; one CPU per core): named threads inside a worker's slice, including one born after the placement.

* ``numabind run -C 0-3 -m 0 --thread acl_thread=1 --thread release_thread=cpus:3 --thread '*=rest'``: the
  command's ``acl_thread`` gets core 0, its ``release_thread`` (born 0.5 s after it starts) CPU 3, every other
  thread the rest (CPUs 1-2); the command's own exit status comes back.
* ``numabind move PID -N 1 -m 1 --thread acl_thread=cpus:2 --thread 'release_*=cpus:2' --thread '*=rest' --watch
  20 --json`` on a plain Python process: ``acl_thread`` on CPU 2, the rest on CPU 3, and a ``release_thread``
  born during the watch (on CPU 3, as its creator) moved to CPU 2; the watch ends when the process does.

Each placement is read back by the target itself (``sched_getaffinity`` of each of its threads, by name).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from . import harness

#: Names ``acl_thread`` and ``other`` at once (prctl(PR_SET_NAME)) and prints ``ready`` with their thread ids; then
#: starts ``release_thread`` (``run``: after 0.5 s; ``move``: on the first line of its stdin) and prints ``born``
#: with its id; then (``run``: 1.5 s later; ``move``: on the second line) prints each thread's name and CPUs as one
#: JSON object and exits 7.
CHILD = r"""
import ctypes, json, os, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
done = threading.Event()
def body(name):
    libc.prctl(15, name.encode(), 0, 0, 0)
    done.wait()
def step(seconds):
    if sys.argv[1] == "run":
        time.sleep(seconds)
    else:
        sys.stdin.readline()
named = [threading.Thread(target=body, args=(name,), daemon=True) for name in ("acl_thread", "other")]
for t in named:
    t.start()
time.sleep(0.1)
print("ready", *(t.native_id for t in named), flush=True)
step(0.5)
late = threading.Thread(target=body, args=("release_thread",), daemon=True)
late.start()
print("born", late.native_id, flush=True)
step(1.5)
out = {}
for tid in os.listdir("/proc/self/task"):
    name = open(f"/proc/self/task/{tid}/comm").read().strip()
    out[name] = sorted(os.sched_getaffinity(int(tid)))
print(json.dumps(out), flush=True)
done.set()
sys.exit(7)
"""


def _until(cpus: set[int], tid: int, move: subprocess.Popen, what: str) -> None:
    """Wait until thread ``tid`` holds ``cpus`` (numabind move, still running, placed it)."""
    deadline = time.monotonic() + 120
    while os.sched_getaffinity(tid) != cpus:
        assert time.monotonic() < deadline and move.poll() is None, f"numabind move did not place {what}"
        time.sleep(0.05)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMABIND_BACKEND", "NUMABIND_FSROOT", "NUMABIND_STRICT")}
    env.update(PYTHONPATH=str(harness.REPO_ROOT))
    return env


@pytest.mark.numa_vm(topology="mem-only")
def test_named_threads_and_a_thread_born_later_in_the_guest(vm_topology):
    assert sorted(vm_topology.node_cpus(0)) == [0, 1] and sorted(vm_topology.node_cpus(1)) == [2, 3]
    numabind = [sys.executable, "-m", "numabind"]

    run = subprocess.run([*numabind, "run", "-C", "0-3", "-m", "0", "--thread", "acl_thread=1",
                          "--thread", "release_thread=cpus:3", "--thread", "*=rest", "--json", "--",
                          sys.executable, "-c", CHILD, "run"], capture_output=True, text=True, env=_env(),
                         cwd=harness.REPO_ROOT, timeout=240)
    print(f"issue 45.2 run --thread: {run.stdout.strip()}")
    assert run.returncode == 7, run.stderr
    seen = json.loads(run.stdout.splitlines()[-1])
    assert seen.pop("acl_thread") == [0]
    assert seen.pop("release_thread") == [3]           # born after the start: placed by the watch
    assert seen and all(cpus == [1, 2] for cpus in seen.values()), seen      # other, and the main thread
    report = next(json.loads(line) for line in run.stderr.splitlines() if line.startswith('{"threads"'))
    assert {s["pattern"]: s["cpus"] for s in report["threads"]["shares"]} == {
        "acl_thread": "0", "release_thread": "3", "*": "1-2"}

    target = subprocess.Popen([sys.executable, "-c", CHILD, "move"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=_env())
    move: subprocess.Popen | None = None
    try:
        acl = int(target.stdout.readline().split()[1])
        move = subprocess.Popen([*numabind, "move", str(target.pid), "-N", "1", "-m", "1", "--thread",
                                 "acl_thread=cpus:2", "--thread", "release_*=cpus:2", "--thread", "*=rest",
                                 "--watch", "20", "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                                cwd=harness.REPO_ROOT)
        _until({2}, acl, move, "acl_thread")       # placed: the watch runs from here
        target.stdin.write("go\n")
        target.stdin.flush()
        late = int(target.stdout.readline().split()[1])
        _until({2}, late, move, "release_thread, born during the watch")
        target.stdin.write("report\n")
        target.stdin.flush()
        report_line = target.stdout.readline()
        target.wait(timeout=60)
        out, err = move.communicate(timeout=60)       # the watch ends with the process, long before 20 s
    finally:
        for p in (target, move):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    print(f"issue 45.2 move --thread --watch: {report_line.strip()}")
    assert move.returncode == 0, err
    seen = json.loads(report_line)
    assert seen["acl_thread"] == [2] and seen["other"] == [3] and seen["release_thread"] == [2]
    threads = json.loads(out)[0]["threads"]
    assert threads["ok"] and 0 < threads["watched"] < 20
    assert any(t["tid"] == late and t["pattern"] == "release_*" and (t["before"], t["after"]) == ("3", "2")
               for t in threads["threads"])
