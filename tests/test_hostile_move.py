"""A second local user (``numabind-neighbour``, see tests/hostile.py) against ``numabind move`` run by root (issue 41).

The neighbour runs a process named with escape sequences whose threads exit and start again all the time, and a
second, quiet process. Root moves the first one (the CLI, then the library): nothing unprintable reaches the output,
every thread reported bound holds the plan (read back with ``os.sched_getaffinity`` per thread), a thread that
vanished is reported as such and never as bound, and no thread of the other process had its CPUs changed. The CPUs
come from this machine's cpuset, so the tests pass on one CPU (``taskset -c 0``).
"""

from __future__ import annotations

import ctypes   # here, not in the attack: the neighbour may not read the interpreter's modules
import os
import threading

import numabind
from numabind import _proc
from numabind.cli.move import main as move_main
from numabind.plan import Plan
from tests.hostile import neighbour  # noqa: F401 - fixture

CPUS = sorted(os.sched_getaffinity(0))
PLAN = Plan(cpus=frozenset({CPUS[-1]}))
EVIL = "\x1b]0;pwn\x07\u202e"      # an OSC title sequence and a right-to-left override (11 bytes: fits comm)


# ----------------------------------------------------------------------------- the attacks (as the neighbour)
def churn(chan, name: str, rounds: int) -> dict:
    """Name this process ``name``, park two threads, then start threads that exit at once until told to stop."""
    libc = ctypes.CDLL(None, use_errno=True)   # prctl(PR_SET_NAME): /proc/self/comm is root's after setresuid
    assert libc.prctl(15, ctypes.c_char_p(name.encode("utf-8")), 0, 0, 0) == 0, os.strerror(ctypes.get_errno())
    stop = threading.Event()
    parked = [threading.Thread(target=stop.wait, daemon=True) for _ in range(2)]
    for t in parked:
        t.start()
    chan.send({"pid": os.getpid(), "parked": [t.native_id for t in parked]})
    started = 0
    for i in range(rounds):
        if i % 64 == 0 and chan.poll():
            break
        t = threading.Thread(target=lambda: None)
        t.start()
        t.join()
        started += 1
    assert chan.recv() == "stop"
    stop.set()
    return {"started": started}


def quiet(chan) -> dict:
    """Park three threads; report their ids; wait to be told to stop."""
    stop = threading.Event()
    parked = [threading.Thread(target=stop.wait, daemon=True) for _ in range(3)]
    for t in parked:
        t.start()
    chan.send({"pid": os.getpid(), "tids": [os.getpid()] + [t.native_id for t in parked]})
    assert chan.recv() == "stop"
    stop.set()
    return {}


# ----------------------------------------------------------------------------- the victim (root)
def _affinities(tids: list[int]) -> dict[int, frozenset[int]]:
    return {t: frozenset(os.sched_getaffinity(t)) for t in tids}


def _check_bound_threads(pid: int, report) -> None:
    """Every thread reported bound that is still that thread of ``pid`` holds the plan; vanished ones are not
    bound."""
    for t in report.threads:
        if t.status == "vanished":
            assert t.after is None and "not counted as bound" in t.detail
        if t.status != "bound" or _proc.thread_owner(t.tid) != pid:
            continue     # a churning thread that has exited since (its id is no thread of pid now)
        try:
            held = frozenset(os.sched_getaffinity(t.tid))
        except ProcessLookupError:
            continue
        if _proc.thread_owner(t.tid) == pid:
            assert held == PLAN.cpus, (t, held)


def test_root_moves_a_hostile_neighbour_process(neighbour, capsys):  # noqa: F811 - fixture
    bystander = neighbour.start(quiet)
    target = neighbour.start(churn, EVIL, 2_000_000)
    try:
        other = bystander.recv()
        info = target.recv()
        assert "pid" in info, info
        pid = info["pid"]
        assert _proc.status_fields(pid)["Name"] == EVIL
        untouched = _affinities(other["tids"])

        rc = move_main([str(pid), "-C", ",".join(map(str, sorted(PLAN.cpus))), "--lenient"])
        out, err = capsys.readouterr()
        assert rc == 0, err
        for text in (out, err):
            assert all(line.isprintable() for line in text.split("\n")), text
        assert f"pid {pid} (?]0;pwn??)" in out

        report = numabind.move(pid, PLAN, strict=False)
        assert report.processes[0].name == EVIL                        # the field keeps the kernel's text
        assert all(line.isprintable() for line in report.describe().split("\n"))
        assert {t.tid for t in report.threads if t.status == "bound"} >= set(info["parked"]) | {pid}
        _check_bound_threads(pid, report)
        vanished = [t for t in report.threads if t.status == "vanished"]
        assert report.threads_vanished == len(vanished)
        if vanished:
            assert f"{len(vanished)} vanished" in report.describe()
        for tid in info["parked"] + [pid]:
            assert frozenset(os.sched_getaffinity(tid)) == PLAN.cpus

        assert _affinities(other["tids"]) == untouched               # no thread of another process was changed
    finally:
        target.send("stop")
        bystander.send("stop")
        result = target.result()
        bystander.result()
    assert result["started"] > 0
