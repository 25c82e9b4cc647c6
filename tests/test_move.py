"""Issue 28, section 2: ``numabind.move`` and ``numabind move`` on processes that are already running.

Every target is a real child process of the test (a Python interpreter with threads, some started while the move
runs); what the move did is read back here with ``os.sched_getaffinity`` of every thread, never through numabind.
The CPUs are taken from this machine's cpuset, so the tests pass on one CPU (``taskset -c 0``) and on many; the
page migration across nodes is proved in the 3-node guest (tests/vm/test_vm_move.py).
"""

from __future__ import annotations

import errno
import json
import logging
import multiprocessing
import os
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

import numabind
from numabind import live
from numabind.cli.move import main as move_main
from numabind.errors import BindError, NumabindError, PlanError, refusal_fix
from numabind.relocate import AFFINITY_FIX, MEMORY_POLICY_NOTE, MIGRATE_FIX, MoveReport, move, recorded_plan

REPO = Path(__file__).resolve().parent.parent

#: A target: 8 threads (main + 7 sleepers); on "chain N" each new thread starts the next one, N in all, so
#: threads keep appearing, started by the newest (not yet moved) thread, while the move runs; "stop" ends the
#: chain and answers with the number of threads alive; stdin closing ends the process.
TARGET = r"""
import sys, threading, time
stop = threading.Event()
done = threading.Event()
forever = threading.Event()
def sleeper():
    forever.wait()
def link(left):
    if left and not stop.is_set():
        time.sleep(0.0005)
        threading.Thread(target=link, args=(left - 1,), daemon=True).start()
    else:
        done.set()
    forever.wait()
for _ in range(7):
    threading.Thread(target=sleeper, daemon=True).start()
print("ready", flush=True)
for line in sys.stdin:
    word = line.split()
    if word[0] == "chain":
        done.clear()
        threading.Thread(target=link, args=(int(word[1]),), daemon=True).start()
        print("chaining", flush=True)
    elif word[0] == "spawn":
        for _ in range(int(word[1])):
            threading.Thread(target=sleeper, daemon=True).start()
        print("spawned", flush=True)
    elif word[0] == "stop":
        stop.set()
        done.wait(30)
        print("stopped", threading.active_count(), flush=True)
    elif word[0] == "child":
        import subprocess
        c = subprocess.Popen([sys.executable, "-c", "import sys, threading; "
                              "[threading.Thread(target=sys.stdin.read, daemon=True).start() for _ in range(3)]; "
                              "print('ready', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        c.stdout.readline()
        print("child", c.pid, flush=True)
"""


class Target:
    """A running target process (``with Target() as t``), killed on exit."""

    def __init__(self, *prefix: str) -> None:
        self.proc = subprocess.Popen([*prefix, sys.executable, "-c", TARGET], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=str(REPO))
        assert self.proc.stdout.readline().strip() == "ready", "the target did not start"
        self.pid = self.proc.pid

    def say(self, line: str) -> str:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def __enter__(self) -> Target:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait(30)


def tids(pid: int) -> list[int]:
    return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))


def affinities(pid: int) -> dict[int, frozenset[int]]:
    out = {}
    for tid in tids(pid):
        try:
            out[tid] = frozenset(os.sched_getaffinity(tid))
        except ProcessLookupError:
            pass
    return out


def cpuset() -> list[int]:
    """The CPUs this machine's cpuset lets a process use (not only this test's affinity: taskset -c 0)."""
    return sorted(live.limits().allowed_cpus)


def one_cpu() -> int:
    """A CPU to move to: the last of the cpuset, which differs from CPU 0 (``taskset -c 0``) when there are two."""
    return cpuset()[-1]


def memory_node() -> int:
    return min(n for n, node in live.machine().nodes.items() if node.has_memory)


# ----------------------------------------------------------------------------- every thread
def test_every_thread_moves_to_one_cpu_with_threads_born_meanwhile():
    cpu = one_cpu()
    with Target() as t:
        assert t.say("chain 60") == "chaining"
        report = move(t.pid, numabind.Plan(cpus={cpu}), strict=True)
        words = t.say("stop").split()
        assert words[0] == "stopped" and int(words[1]) >= 8
        now = affinities(t.pid)
        assert len(now) >= 8
        assert set(now.values()) == {frozenset({cpu})}, now     # every thread, those born meanwhile too
        # threads started after the move came from moved threads: the report lists at least the first 8
        assert isinstance(report, MoveReport) and report.pids == (t.pid,)
        assert report.threads_bound >= 8 and report.threads_refused == 0 and report.ok
        assert all(r.after == frozenset({cpu}) for r in report.threads if r.status == "bound")
        assert report.threads[0].tid == t.pid      # main thread first
        assert not report.notes                    # no memory policy asked: nothing to say about it


def test_threads_started_between_the_listing_and_the_walk_are_found_by_listing_again(monkeypatch):
    """The target starts 5 threads (from its main thread, not moved yet) right after the move listed its threads:
    they inherit the old CPUs and only a listing after the walk finds them."""
    import importlib

    mv = importlib.import_module("numabind.relocate")
    cpus = cpuset()
    cpu = one_cpu()
    real = mv._proc.task_ids
    with Target() as t:
        for tid in tids(t.pid):
            os.sched_setaffinity(tid, cpus)
        calls = []

        def listed_then_spawn(pid: int) -> list[int]:
            out = real(pid)
            calls.append(len(out))
            if len(calls) == 1:
                assert t.say("spawn 5") == "spawned"
            return out

        monkeypatch.setattr(mv._proc, "task_ids", listed_then_spawn)
        report = move(t.pid, numabind.Plan(cpus={cpu}), strict=True)
        now = affinities(t.pid)
        assert len(now) == 13 and calls[0] == 8
        assert set(now.values()) == {frozenset({cpu})}, now
        assert report.threads_bound == 13 and report.ok


def test_numabind_move_is_the_function_even_after_its_module_is_imported():
    """The function lives in ``numabind.relocate``: importing that module leaves ``numabind.move`` the function."""
    import importlib

    importlib.import_module("numabind.relocate")
    assert numabind.move is move
    cpu = one_cpu()
    with Target() as t:
        report = numabind.move(t.pid, numabind.Plan(cpus={cpu}), strict=True)
        assert isinstance(report, MoveReport) and set(affinities(t.pid).values()) == {frozenset({cpu})}


def test_all_children_moves_the_process_tree():
    cpu = one_cpu()
    with Target() as t:
        child = int(t.say("child").split()[1])
        try:
            report = move(t.pid, numabind.Plan(cpus={cpu}), strict=True, all_children=True)
            assert report.pids[0] == t.pid and child in report.pids
            for pid in (t.pid, child):
                assert set(affinities(pid).values()) == {frozenset({cpu})}, pid
            alone = move(t.pid, numabind.Plan(cpus={cpuset()[0]}), strict=True)
            assert alone.pids == (t.pid,)          # without all_children the child stays where it was
            assert set(affinities(child).values()) == {frozenset({cpu})}
        finally:
            os.kill(child, 9)


def test_the_report_says_once_that_the_memory_policy_cannot_be_set_from_outside():
    node = memory_node()
    with Target() as t:
        t.say("child")
        report = move(t.pid, numabind.Plan(cpus={one_cpu()}, mem_policy="bind", mem_nodes={node}), strict=False,
                      all_children=True)
        assert len(report.pids) == 2
        said = [n for n in report.notes if "no call that sets another process's memory policy" in n]
        assert len(said) == 1, report.notes
        assert "allocates from now on follow that policy" in said[0] and f"bind {node}" in said[0]
        assert said[0] in report.describe() and said[0] in report.to_dict()["notes"]
        assert MEMORY_POLICY_NOTE.split(":")[0] in said[0]
        for p in report.processes:      # the pages were counted after the move
            assert p.locality is not None and p.pages_left is not None and p.pages_moved is not None
        json.dumps(report.to_dict())


# ----------------------------------------------------------------------------- processes that are not there
def test_a_pid_that_does_not_exist_is_a_numabind_error():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(30)      # reaped: the pid names no process now
    with pytest.raises(NumabindError, match=f"no process {p.pid}") as info:
        move(p.pid, numabind.Plan(cpus={one_cpu()}))
    assert not isinstance(info.value, OSError)


def test_a_process_that_exited_is_a_numabind_error():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)     # exited, not reaped: a zombie
        with pytest.raises(NumabindError, match="has exited") as info:
            move(p.pid, numabind.Plan(cpus={one_cpu()}), strict=False)
        assert not isinstance(info.value, OSError)
    finally:
        p.wait(30)


@pytest.mark.parametrize("pid", [0, -1, True, "1", 1.5, None])
def test_a_bad_pid_is_a_plan_error(pid):
    with pytest.raises(PlanError, match="process id"):
        move(pid, numabind.Plan(cpus={one_cpu()}))


def test_bad_plans_are_refused_before_anything_changes():
    with Target() as t:
        before = affinities(t.pid)
        with pytest.raises(PlanError, match="not online"):
            move(t.pid, numabind.Plan(cpus={max(live.machine().online_cpus) + 1}), strict=True)
        with pytest.raises(PlanError, match="do not exist"):    # the one check of every entry point
            move(t.pid, numabind.Plan(mem_policy="bind", mem_nodes={max(live.machine().nodes) + 1}))
        with pytest.raises(PlanError):
            move(t.pid, "cpus 0")
        with pytest.raises(PlanError, match="all_children"):
            move(t.pid, numabind.Plan(cpus={one_cpu()}), all_children="yes")
        assert affinities(t.pid) == before


# ----------------------------------------------------------------------------- refused: strict and lenient
def _as_nobody(conn, pid: int, cpu: int, strict: bool) -> None:
    """In a forked child: drop root, then move ``pid`` (a root-owned process): the kernel refuses (EPERM)."""
    try:
        records = []

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                records.append((record.levelname, record.getMessage()))

        logging.getLogger("numabind").addHandler(Keep())
        os.setgroups([])
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
        try:
            report = move(pid, numabind.Plan(cpus={cpu}), strict=strict)
        except BindError as e:
            conn.send(("raised", e.errno, str(e), records))
        else:
            conn.send(("report", report.threads_refused, list(report.warnings), records, report.threads_bound))
    except BaseException:  # noqa: BLE001 - everything goes back to the test
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def _refused_move(pid: int, cpu: int, strict: bool):
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_as_nobody, args=(child, pid, cpu, strict))
    proc.start()
    child.close()
    assert parent.poll(120), "the unprivileged mover gave no answer"
    got = parent.recv()
    proc.join(30)
    assert got[0] != "error", got[1]
    return got


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user (to be refused) needs root")


@needs_root
def test_strict_refusal_names_the_pid_and_the_fix_and_changes_nothing():
    with Target() as t:
        before = affinities(t.pid)
        kind, err, text, records = _refused_move(t.pid, one_cpu(), strict=True)
        assert kind == "raised" and err == errno.EPERM
        assert f"pid {t.pid}" in text and "CAP_SYS_NICE" in text and "sched_setaffinity" in text
        # numabind move's own fix, once; not the fix for binding the calling process (a seccomp profile, --lenient)
        assert text.count(AFFINITY_FIX) == 1, text
        assert refusal_fix(errno.EPERM, "sched_setaffinity") not in text and "--lenient" not in text, text
        assert affinities(t.pid) == before


@needs_root
def test_lenient_refusal_is_reported_and_logged_once():
    with Target() as t:
        before = affinities(t.pid)
        kind, refused, warnings, records, bound = _refused_move(t.pid, one_cpu(), strict=False)
        assert kind == "report" and refused == len(before) and bound == 0     # every thread tried, each refused
        assert len(warnings) == 1 and "CAP_SYS_NICE" in warnings[0] and str(t.pid) in warnings[0], warnings
        assert warnings[0].count(AFFINITY_FIX) == 1 and "--lenient" not in warnings[0], warnings
        assert [level for level, _ in records].count("WARNING") == 1, records
        assert affinities(t.pid) == before


def _refused_migration(monkeypatch) -> None:
    """The kernel refuses migrate_pages (EPERM), faked at the backend boundary, on a machine whose process may
    use two memory nodes (so there are pages to move off the other one)."""
    import types

    from numabind import _proc
    from numabind.backends import get_backend

    real = live.machine()
    two = {0: types.SimpleNamespace(has_memory=True, cpus=real.nodes[min(real.nodes)].cpus),
           1: types.SimpleNamespace(has_memory=True, cpus=frozenset())}

    class TwoNodes:   # the real machine, with a second memory node
        nodes = two

        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

    monkeypatch.setattr(live, "machine", TwoNodes)
    status = _proc.status_fields
    monkeypatch.setattr(_proc, "status_fields",
                        lambda *a, **k: {**(status(*a, **k) or {}), "Mems_allowed_list": "0-1"})

    def refuse(self, pid, source, target):
        raise BindError(errno.EPERM, "migrate_pages", f"pid {pid}")

    monkeypatch.setattr(type(get_backend(None)[0]), "migrate_pages", refuse)


@pytest.mark.parametrize("strict", [True, False])
def test_a_refused_migration_says_the_fix_of_numabind_move_once(monkeypatch, strict):
    _refused_migration(monkeypatch)
    with Target() as t:
        plan = numabind.Plan(cpus={one_cpu()}, mem_policy="bind", mem_nodes={0}, migrate=True)
        if strict:
            with pytest.raises(BindError) as info:
                move(t.pid, plan, strict=True)
            text = str(info.value)
        else:
            text = "\n".join(w for w in move(t.pid, plan, strict=False).warnings if "migrate_pages" in w)
        assert text.count(MIGRATE_FIX) == 1, text
        # not the generic fix for the calling process's memory policy (CAP_SYS_NICE via docker, a seccomp profile)
        assert refusal_fix(errno.EPERM, "migrate_pages") not in text and "--lenient" not in text, text


# ----------------------------------------------------------------------------- the command line
def test_cli_moves_every_listed_process_and_prints_json(capsys):
    cpu = one_cpu()
    with Target() as a, Target() as b:
        rc = move_main([str(a.pid), str(b.pid), "-C", str(cpu), "--json"])
        out = json.loads(capsys.readouterr().out)
        assert rc == 0
        assert [r["pid"] for r in out] == [a.pid, b.pid]
        assert all(r["ok"] and r["threads_bound"] >= 8 for r in out)
        for t in (a, b):
            assert set(affinities(t.pid).values()) == {frozenset({cpu})}


def test_cli_node_and_plan_forms(capsys):
    node = memory_node()
    node_cpus = live.machine().nodes[node].cpus & frozenset(cpuset())
    with Target() as t:
        assert move_main([str(t.pid), "--node", str(node)]) == 0
        assert set(affinities(t.pid).values()) == {node_cpus}
        text = capsys.readouterr().out
        assert f"pid {t.pid}" in text and "no call that sets another process's memory policy" in text
        assert move_main([str(t.pid), "--plan", f"v1;cpus={one_cpu()};mem=-;migrate=0"]) == 0
        assert set(affinities(t.pid).values()) == {frozenset({one_cpu()})}


@pytest.mark.parametrize("argv, message", [
    (["-C", "0"], "at least one PID"),
    (["{pid}"], "give the binding"),
    (["{pid}", "--node", "0", "-C", "0"], "each give the binding"),
    (["{pid}", "--restore", "--node", "0"], "each give the binding"),
    (["{pid}", "-C", "0", "--strict", "--lenient"], "contradict"),
    (["{pid}", "--mode", "node", "-C", "0"], "--gpu"),
])
def test_cli_usage_errors(argv, message, capsys):
    with Target() as t:
        before = affinities(t.pid)
        rc = move_main([a.format(pid=t.pid) for a in argv])
        assert rc == 2
        assert message in capsys.readouterr().err
        assert affinities(t.pid) == before


def test_cli_missing_pid_exits_1_with_a_message(capsys):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(30)
    assert move_main([str(p.pid), "-C", str(one_cpu())]) == 1
    err = capsys.readouterr().err
    assert f"no process {p.pid}" in err and "Traceback" not in err


# ----------------------------------------------------------------------------- --restore
def test_restore_puts_back_the_binding_numabind_run_recorded(capsys):
    cpus = cpuset()
    first = cpus[-1]
    with Target(sys.executable, "-m", "numabind", "run", "-a", "-C", str(first), "--") as t:
        assert set(affinities(t.pid).values()) == {frozenset({first})}
        assert recorded_plan(t.pid).cpus == frozenset({first})
        for tid in tids(t.pid):          # someone re-pins it (an NCCL-like runtime)
            os.sched_setaffinity(tid, cpus)
        assert move_main(["--restore", str(t.pid)]) == 0
        assert set(affinities(t.pid).values()) == {frozenset({first})}
        assert "restored" not in capsys.readouterr().err


def test_restore_without_a_record_says_so_and_exits_1(capsys):
    with Target() as t:
        before = affinities(t.pid)
        assert move_main(["--restore", str(t.pid)]) == 1
        err = capsys.readouterr().err
        assert "recorded no binding" in err and str(t.pid) in err
        assert affinities(t.pid) == before
        with pytest.raises(NumabindError, match="recorded no binding"):
            recorded_plan(t.pid)


def test_the_sub_parser_runs_through_cmd_move(capsys):
    """What the full CLI (``numabind --help``, ``numabind -v move ...``) would use: add_parser and cmd_move."""
    import argparse

    from numabind.cli.move import add_parser, cmd_move

    parser = argparse.ArgumentParser(prog="numabind")
    add_parser(parser.add_subparsers(dest="cmd"))
    cpu = one_cpu()
    with Target() as t:
        args = parser.parse_args(["move", str(t.pid), "-C", str(cpu), "--json"])
        assert cmd_move(args) == 0
        [report] = json.loads(capsys.readouterr().out)
        assert report["pid"] == t.pid and report["threads_bound"] == 8
        assert set(affinities(t.pid).values()) == {frozenset({cpu})}
