"""Processes for ``numabind stat``, ``locality`` and the runtime records to look at (tests/test_residency.py,
tests/test_cli_stat.py, tests/test_stat_hostile.py): a worker that touched 16 MiB and waits on stdin, a child
bound at birth by a parent that reports it, the node and CPU they bind to (derived from this machine), and
``numabind stat``'s output split per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from numabind._base import TLLM_AFFINITY_ENV
from numabind.plan import Plan
from tests.kernel import MEMORY_NODES, ROOT, child_env, ids_of, numabind_cli


def node_with_cpus() -> tuple[int, int]:
    """A node with memory and a CPU this process may use, and that CPU (derived here)."""
    allowed = os.sched_getaffinity(0)
    for n in sorted(MEMORY_NODES):
        cpus = ids_of(open(f"/sys/devices/system/node/node{n}/cpulist").read()) & allowed
        if cpus:
            return n, min(cpus)
    pytest.skip("no node here has both memory and a CPU this process may use")


WORKER = ("import sys; b = bytearray(16 << 20); b[::4096] = b'x' * len(b[::4096]); "
          "print('ready', flush=True); sys.stdin.read()")


class Worker:
    """A child that touched 16 MiB and waits on stdin; ``argv`` prefixes its interpreter (e.g. numabind run)."""

    def __init__(self, *prefix: str, code: str = WORKER) -> None:
        self.proc = subprocess.Popen([*prefix, sys.executable, "-c", code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT)
        assert self.proc.stdout.readline().strip() == "ready"
        self.pid = self.proc.pid

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


# A parent that starts one child bound at birth in the way named by argv[1] (the child's own
# pid-reporting target, then waiting), prints the child's pid and its birth report's notes as JSON, then
# waits on stdin. The plan comes in as plan text (argv[2]).
BIRTH_PARENT = '''
import json, multiprocessing, os, sys
from concurrent.futures import ProcessPoolExecutor
import numabind
from numabind.process import configure_subprocess

def child(q, ev):
    birth = numabind.birth_report()      # None in a spawn child bound by inheritance: its parent knows
    q.put((os.getpid(), None if birth is None else list(birth.report.notes)))
    ev.wait(300)

def pool_pid():
    return os.getpid(), list(numabind.birth_report().report.notes)

if __name__ == "__main__":
    how, plan = sys.argv[1], numabind.Plan.from_text(sys.argv[2])
    if how == "pool":
        ex = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), **numabind.pool_plans([plan], 1))
        pid, notes = ex.submit(pool_pid).result(timeout=120)
        print(json.dumps({"pid": pid, "notes": notes}), flush=True)
        sys.stdin.read()
        ex.shutdown()
        sys.exit(0)
    ctx = multiprocessing.get_context("spawn" if how == "call" else how)
    q, ev = ctx.Queue(), ctx.Event()
    if how == "call":
        p = ctx.Process(target=numabind.bound(plan, child), args=(q, ev))
        p.start()
    else:
        with configure_subprocess(plan) as handle:
            p = ctx.Process(target=child, args=(q, ev))
            p.start()
    pid, notes = q.get(timeout=120)
    if how != "call":
        notes = list(handle.report(pid).report.notes)
    print(json.dumps({"pid": pid, "notes": notes}), flush=True)
    sys.stdin.read()
    ev.set()
    p.join(60)
'''


class BirthChild:
    """A parent (BIRTH_PARENT) holding one child bound at birth ``how``; ``pid`` is the child's."""

    def __init__(self, tmp_path, how: str, plan: Plan, **env: str) -> None:
        script = tmp_path / "birth_parent.py"       # a file: spawn children re-import the main module
        script.write_text(BIRTH_PARENT)
        self.env = child_env(**env)
        self.proc = subprocess.Popen([sys.executable, str(script), how, plan.to_text()], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=self.env, cwd=ROOT)
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=60)
            pytest.fail(f"the {how} parent exited with {self.proc.returncode} before reporting its child")
        out = json.loads(line)
        # a birth report may say that TLLM_NUMA_AWARE_WORKER_AFFINITY was set for the child (tests/test_tllm.py);
        # the tests here are about the record, so that note is left out
        self.pid, self.notes = out["pid"], [n for n in out["notes"] if not n.startswith(TLLM_AFFINITY_ENV)]

    def __enter__(self) -> BirthChild:
        return self

    def __exit__(self, *exc) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


# ----------------------------------------------------------------------------- numabind stat of them
def stat(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return numabind_cli("stat", *args, env=env, timeout=timeout)


def blocks(text: str) -> dict[int, list[str]]:
    """The text output split per process: pid -> its lines (the first one is 'pid N (name)...')."""
    out: dict[int, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("pid "):
            current = int(line.split()[1])
            out[current] = []
        if current is not None:
            out[current].append(line)
    return out
