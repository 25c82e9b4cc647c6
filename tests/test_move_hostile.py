"""Issue 41: ``numabind move`` (the library's :func:`numabind.move` and the CLI) against hostile processes.

1. What the moved process controls (its name) reaches the terminal only through ``numabind._base.printable``.
2. A ``/proc`` of another PID namespace (or a replayed root) is refused before anything is moved.
3. A thread id (or a child's pid) that ends and names another thread between the listing and the call is reported
   as vanished, never counted as bound; a foreign thread the call may have reached is a warning.

Targets are real child processes; what a move did is read back with ``os.sched_getaffinity`` per thread. The CPUs
come from this machine's cpuset, so the tests pass on one CPU (``taskset -c 0``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import numabind
from numabind import _proc, live
from numabind._base import printable
from numabind._fs import FsReader
from numabind.backends import get_backend
from numabind.cli.move import main as move_main
from numabind.errors import NumabindError
from numabind.plan import Plan
from numabind.relocate import ProcessMove
from numabind.residency import locality
from tests.fakesys import fake_procfs
from tests.kernel import ROOT, child_env, wait_gone, wait_zombie

CPUS = sorted(os.sched_getaffinity(0))
PLAN = Plan(cpus=frozenset({CPUS[-1]}))
EVIL = "\x1b]0;pwn\x07\u202e"      # an OSC title sequence and a right-to-left override: 13 bytes, fits comm

#: A target with three parked threads: prints their ids, then on "end I" ends thread I and says "ended".
TARGET = r"""
import sys, threading
name = sys.argv[1] if len(sys.argv) > 1 else ""
if name:
    with open("/proc/self/comm", "wb") as f:
        f.write(name.encode("utf-8"))
events = [threading.Event() for _ in range(3)]
threads = [threading.Thread(target=e.wait, daemon=True) for e in events]
for t in threads:
    t.start()
print(" ".join(str(t.native_id) for t in threads), flush=True)
for line in sys.stdin:
    word = line.split()
    if word[0] == "end":
        i = int(word[1])
        events[i].set()
        threads[i].join()
        print("ended", flush=True)
"""


class Target:
    def __init__(self, name: str = "") -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", TARGET, name], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=child_env())
        self.pid = self.proc.pid
        self.tids = [int(t) for t in self.proc.stdout.readline().split()]

    def end(self, i: int) -> None:
        self.proc.stdin.write(f"end {i}\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ended"
        wait_gone(self.tids[i])

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def target():
    t = Target()
    yield t
    t.close()


def _all_printable(text: str) -> bool:
    return all(line.isprintable() for line in text.split("\n"))


# ----------------------------------------------------------------------------- 1. printing what the process controls
def test_describe_prints_the_process_name_through_printable():
    move = ProcessMove(10, EVIL)
    assert "\x1b" not in move.describe() and printable(EVIL) in move.describe()
    assert ProcessMove(10, EVIL, error=f"process 10 ({EVIL}) exited").describe().isprintable()
    assert move.to_dict()["name"] == EVIL          # JSON keeps it (json escapes it)


def test_the_cli_prints_no_escape_sequence_of_the_moved_process(capsys):
    t = Target(EVIL)
    try:
        assert _proc.status_fields(t.pid)["Name"] != printable(_proc.status_fields(t.pid)["Name"])
        rc = move_main([str(t.pid), "-C", str(CPUS[-1]), "--lenient"])
        out, err = capsys.readouterr()
        assert rc == 0
        assert f"pid {t.pid} (" in out
        assert _all_printable(out) and _all_printable(err), (out, err)
        assert "?]0;pwn??" in out
        rc = move_main([str(t.pid), "-C", str(CPUS[-1]), "--json"])
        out, _ = capsys.readouterr()
        assert rc == 0 and "\\u001b]0;pwn" in out   # JSON: escaped by json itself
    finally:
        t.close()


# ----------------------------------------------------------------------------- 2. a /proc of another namespace
def test_a_replayed_proc_is_refused_and_nothing_is_moved(tmp_path, monkeypatch, target):
    """A replayed root showing the target's pid as another process: the library refuses, the real process's
    threads keep their CPUs (before: they were moved and the replayed process reported as moved)."""
    fake_procfs(tmp_path, target.pid, 1, {target.pid: ("replayed", "0")})
    before = {t: os.sched_getaffinity(t) for t in [target.pid, *target.tids]}
    wide = Plan(cpus=frozenset({CPUS[0]}))
    monkeypatch.setattr(live, "_reader", FsReader(str(tmp_path)))
    with pytest.raises(NumabindError, match="replayed machine"):
        numabind.move(target.pid, wide)
    with pytest.raises(NumabindError, match="replayed machine"):
        numabind.relocate.recorded_plan(target.pid)
    assert {t: os.sched_getaffinity(t) for t in before} == before


def _foreign(monkeypatch) -> None:
    """This process's /proc as one of another PID namespace would show it: /proc/self names another number."""
    real = os.readlink
    monkeypatch.setattr(os, "readlink", lambda p, *a, **k: "999999" if str(p) == "/proc/self" else real(p, *a, **k))


def test_a_proc_of_another_namespace_reads_no_other_process(monkeypatch, target):
    _foreign(monkeypatch)
    assert "another PID namespace" in _proc.procfs_mismatch()
    assert _proc.start_time(target.pid) == 0 and _proc.status_fields(target.pid) is None
    assert not _proc.process_exists(target.pid) and _proc.process_tasks(target.pid) is None
    assert _proc.task_ids(target.pid) == [] and _proc.process_tree(target.pid) == [target.pid]
    assert _proc.start_time(os.getpid()) > 0           # this process is read through /proc/self
    with pytest.raises(NumabindError, match="another PID namespace"):
        locality(target.pid)


def test_move_refuses_a_proc_of_another_namespace(monkeypatch, target, capsys):
    before = {t: os.sched_getaffinity(t) for t in [target.pid, *target.tids]}
    _foreign(monkeypatch)
    with pytest.raises(NumabindError, match="another PID namespace.*--mount-proc"):
        numabind.move(target.pid, Plan(cpus=frozenset({CPUS[0]})))
    for argv in ([str(target.pid), "-C", str(CPUS[0])], [str(target.pid), "-C", str(CPUS[0]), "--dry-run"],
                 ["--restore", str(target.pid)], ["--restore", "--dry-run", str(target.pid)]):
        assert move_main(argv) == 1, argv
        err = capsys.readouterr().err
        assert "another PID namespace" in err, (argv, err)
    assert {t: os.sched_getaffinity(t) for t in before} == before


NAMESPACE = r"""
import json, os, subprocess, sys
import numabind
from numabind.cli.move import main
out = {"pid": os.getpid()}
try:
    numabind.move(1, numabind.Plan(cpus=[{CPU}]))
    out["library"] = "moved"
except numabind.NumabindError as e:
    out["library"] = str(e)
out["cli"] = main(["1", "-C", str({CPU})])
out["dry"] = main(["1", "-C", str({CPU}), "--dry-run"])
out["affinity"] = sorted(os.sched_getaffinity(0))
print("RESULT " + json.dumps(out), flush=True)
"""


@pytest.mark.parametrize("mount_proc", [False, True])
def test_in_a_real_pid_namespace(mount_proc):
    """``unshare --pid --fork``: without --mount-proc, /proc is the outer namespace's and pid 1 there is not this
    namespace's pid 1 (the caller itself): refused, nothing moved. With --mount-proc it is moved."""
    if os.geteuid() != 0:
        pytest.skip("unshare --pid needs root (CAP_SYS_ADMIN)")
    cmd = ["unshare", "--pid", "--fork"] + (["--mount-proc"] if mount_proc else []) + \
          [sys.executable, "-c", NAMESPACE.replace("{CPU}", str(CPUS[0]))]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=120)
    except FileNotFoundError:
        pytest.skip("no unshare here")
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if not line:
        pytest.skip(f"unshare --pid refused here: {done.stderr.strip()[-300:]}")
    import json

    out = json.loads(line[0][7:])
    assert out["pid"] == 1
    if mount_proc:
        assert out["library"] == "moved" and out["cli"] == 0 and out["affinity"] == [CPUS[0]]
    else:
        assert "another PID namespace" in out["library"]
        assert out["cli"] == 1 and out["dry"] == 1 and "another PID namespace" in done.stderr
        assert out["affinity"] == CPUS         # the caller (pid 1 here) was not moved


# ----------------------------------------------------------------------------- 3. ids reused between list and call
def _wrap_walk(monkeypatch, before_call):
    """Run ``before_call(tids)`` inside the backend's walk, just before its sched_setaffinity calls."""
    be, _ = get_backend()
    real = be.affinity_many

    def walk(tids, cpus, flags=0):
        if cpus is not None:
            before_call(list(tids))
        return real(tids, cpus, flags)

    monkeypatch.setattr(be, "affinity_many", walk)
    return be


@pytest.mark.parametrize("strict", [True, False])
def test_a_thread_whose_start_time_changes_is_vanished_not_bound(monkeypatch, target, strict):
    """The id names another thread after the call (its start time under /proc/PID/task changed): vanished."""
    victim = target.tids[1]
    real = _proc.thread_start_time
    calls = {"n": 0}

    def swapped(pid, tid):
        if tid == victim:
            calls["n"] += 1
            if calls["n"] > 1:    # read once before the call: afterwards the id names a new thread
                return real(pid, tid) + 1
        return real(pid, tid)

    monkeypatch.setattr(_proc, "thread_start_time", swapped, raising=False)
    report = numabind.move(target.pid, PLAN, strict=strict)
    status = {t.tid: t.status for t in report.threads}
    assert status[victim] == "vanished"
    assert report.threads_bound == len(status) - 1 and victim not in {t.tid for t in report.threads
                                                                      if t.status == "bound"}
    assert report.processes[0].threads_vanished == 1
    assert "1 vanished" in report.describe() and report.to_dict()["threads_vanished"] == 1


@pytest.mark.parametrize("strict", [True, False])
def test_a_thread_that_exits_before_the_call_is_not_bound_and_no_failure(monkeypatch, target, strict):
    victim = target.tids[2]
    ended = []

    def end_it(tids):
        if victim in tids and not ended:
            target.end(2)
            ended.append(victim)

    _wrap_walk(monkeypatch, end_it)
    report = numabind.move(target.pid, PLAN, strict=strict)
    assert ended
    bound = {t.tid for t in report.threads if t.status == "bound"}
    assert victim not in bound
    assert {t.tid: t.status for t in report.threads}[victim] in ("exited", "vanished")
    for tid in bound:
        assert os.sched_getaffinity(tid) == PLAN.cpus


def _set_last_pid(value: int) -> bool:
    try:
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(value))
        return True
    except OSError:
        return False


def test_a_thread_id_reused_by_another_process_is_vanished_and_said(monkeypatch, target):
    """A real reuse: the thread exits between the listing and the call, and a new process gets its id (root
    writes ns_last_pid). The call reaches that process: the report says so, never counts it as bound."""
    if os.geteuid() != 0 or not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK):
        pytest.skip("handing out a chosen pid needs root (ns_last_pid)")
    victim = target.tids[0]
    others: list[subprocess.Popen] = []

    def reuse(tids):
        if victim not in tids or others:
            return
        target.end(0)
        for _ in range(20):        # another process may take the pid first: try again
            if not _set_last_pid(victim - 1):
                break
            p = subprocess.Popen(["sleep", "60"])
            if p.pid == victim:
                others.append(p)
                return
            p.kill()
            p.wait()

    _wrap_walk(monkeypatch, reuse)
    try:
        report = numabind.move(target.pid, PLAN, strict=False)
        if not others:
            pytest.skip("the kernel did not hand out the freed thread id to a new process")
        status = {t.tid: t.status for t in report.threads}
        assert status[victim] == "vanished"
        assert victim not in {t.tid for t in report.threads if t.status == "bound"}
        assert any(f"thread id {victim}" in w and f"process {victim}" in w for w in report.warnings), report.warnings
    finally:
        for p in others:
            p.kill()
            p.wait()


def test_a_child_whose_pid_was_taken_by_another_process_is_not_moved(monkeypatch, target):
    """--all-children: a pid listed in the tree that names a process outside it by the time it is moved (here:
    listed wrongly, as a reused pid would be) is left alone, with the reason in the report."""
    other = Target()
    try:
        before = {t: os.sched_getaffinity(t) for t in [other.pid, *other.tids]}
        monkeypatch.setattr(_proc, "process_tree", lambda pid: [pid, other.pid])
        report = numabind.move(target.pid, Plan(cpus=frozenset({CPUS[0]})), all_children=True, strict=False)
        assert [p.pid for p in report.processes] == [target.pid, other.pid]
        assert "no longer in the tree" in report.processes[1].error
        assert {t: os.sched_getaffinity(t) for t in before} == before
    finally:
        other.close()


def test_a_pidfd_sees_the_process_end():
    from numabind.backends import pin_process, process_ended

    p = subprocess.Popen(["sleep", "60"])
    fd = pin_process(p.pid)
    try:
        if fd is None:
            pytest.skip("no pidfd_open here")
        assert not process_ended(fd)
        p.kill()
        wait_zombie(p.pid)
        assert process_ended(fd)
    finally:
        p.wait()
        if fd is not None:
            os.close(fd)
    assert not process_ended(None)


# ----------------------------------------------------------------------------- numabind stat: the same classes
def test_stat_refuses_a_proc_of_another_namespace(monkeypatch, target, capsys):
    """The one check of every reader of other processes: ``numabind stat PID`` under a /proc of another PID
    namespace says so once and shows no process, instead of an error per process."""
    from numabind.cli import main

    _foreign(monkeypatch)
    assert main(["stat", str(target.pid)]) == 1
    err = capsys.readouterr().err
    assert err.count("another PID namespace") == 1 and f"process {target.pid}" not in err, err


def test_stat_all_children_leaves_out_a_pid_that_left_the_tree(monkeypatch, target, capsys):
    """--all-children: a pid listed in the tree whose parent is no longer one of the tree's by the time it is
    read (here: listed wrongly, as a reused pid would be) is not shown as a child."""
    import json

    from numabind.cli import main

    other = Target()
    try:
        monkeypatch.setattr(_proc, "process_tree", lambda pid: [pid, other.pid])
        assert main(["stat", "--json", "--all-children", str(target.pid)]) == 0
        shown = [loc["pid"] for loc in json.loads(capsys.readouterr().out)]
        assert shown == [target.pid]
        assert main(["stat", "--json", str(other.pid), "--all-children", str(target.pid)]) == 0   # named: shown
        assert sorted(loc["pid"] for loc in json.loads(capsys.readouterr().out)) == sorted([target.pid, other.pid])
    finally:
        other.close()
