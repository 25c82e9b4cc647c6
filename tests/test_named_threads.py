"""Named threads inside a worker's slice (issue 45 section 2): :func:`numabind.named.pin_named_threads`, the watch
of threads born (or named) later, and ``numabind move|run --thread PATTERN=SPEC``.

The targets are child processes whose threads name themselves with ``prctl(PR_SET_NAME)`` (``threading`` passes
names to the kernel only from Python 3.14); each placement is read back with ``os.sched_getaffinity(tid)``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import types

import pytest

import numabind
from numabind.cli.move import main as move_main
from numabind.errors import PlanError
from numabind.named import layout_shares, match, parse_layout_item, pin_named_threads, watch_named_threads

#: A process whose threads name themselves: argv[1] is ``NAME[@DELAY[>RENAME]],...`` (a thread started after DELAY
#: seconds, renamed RENAME 0.3 s later); it prints ``ready`` once the first ones are named, ``NAME TID`` for each
#: thread as it is named, and ends when its stdin closes.
TARGET = r"""
import ctypes, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
out = threading.Lock()
def name(text):
    libc.prctl(15, text.encode(), 0, 0, 0)
    with out:
        print(text, threading.get_native_id(), flush=True)
def body(text, later):
    name(text)
    if later:
        time.sleep(0.3)
        name(later)
    sys.stdin.read()
def start(text, delay, later):
    time.sleep(delay)
    threading.Thread(target=body, args=(text, later), daemon=True).start()
first = []
for spec in sys.argv[1].split(","):
    text, _, rest = spec.partition("@")
    delay, _, later = rest.partition(">")
    if delay:
        threading.Thread(target=start, args=(text, float(delay), later), daemon=True).start()
    else:
        first.append(threading.Thread(target=body, args=(text, later), daemon=True))
for t in first:
    t.start()
time.sleep(0.1)
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def two_cpus() -> tuple[int, int]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip(f"needs two CPUs to share between threads, this process may use {cpus}")
    return cpus[0], cpus[1]


class Target:
    """A running :data:`TARGET`: ``tids`` maps each name it printed to its thread id."""

    def __init__(self, spec: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", TARGET, spec], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.tids: dict[str, int] = {}
        self.wait_for("ready")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_for(self, name: str) -> int:
        assert self.proc.stdout is not None
        while name not in self.tids:
            line = self.proc.stdout.readline()
            assert line, f"the target ended before it printed {name!r}"
            text, _, tid = line.strip().partition(" ")
            self.tids[text] = int(tid) if tid else 0
        return self.tids[name]

    def cpus(self, name: str) -> frozenset[int]:
        return frozenset(os.sched_getaffinity(self.tids[name]))

    def end(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture
def target():
    made: list[Target] = []

    def make(spec: str) -> Target:
        made.append(Target(spec))
        return made[-1]

    yield make
    for t in made:
        if t.proc.poll() is None:
            t.end()


def _by_tid(report: numabind.named.NamedReport) -> dict[int, numabind.named.NamedThread]:
    return {t.tid: t for t in report.threads}


# ----------------------------------------------------------------------------- the layout, pure
def _smt_machine(pairs: list[tuple[int, int]]) -> types.SimpleNamespace:
    """A machine whose cores are ``pairs`` of hyperthreads, all on node 0."""
    cpus = {}
    for a, b in pairs:
        for c in (a, b):
            cpus[c] = types.SimpleNamespace(siblings=frozenset({a, b}), node=0)
    return types.SimpleNamespace(cpus=cpus)


def test_cores_are_taken_whole_and_in_order_and_rest_is_what_is_left():
    machine = _smt_machine([(0, 4), (1, 5), (2, 6), (3, 7)])
    plan = numabind.Plan(cpus=frozenset(range(8)))
    shares = layout_shares({"main": 1, "acl_thread": 1, "release_thread": 1, "*": "rest"}, plan, machine)
    assert [(s.pattern, s.spec, s.cpus) for s in shares] == [
        ("main", "1", {0, 4}), ("acl_thread", "1", {1, 5}), ("release_thread", "1", {2, 6}), ("*", "rest", {3, 7})]


def test_explicit_cpus_are_kept_out_of_the_cores_counted():
    machine = _smt_machine([(0, 4), (1, 5), (2, 6), (3, 7)])
    plan = numabind.Plan(cpus=frozenset(range(8)))
    shares = layout_shares([("loop", 2), ("io", "cpus:0"), ("workers", "*")], plan, machine)
    assert shares[0].cpus == {1, 5, 2, 6}      # core 0-4 holds the explicit CPU 0: not counted
    assert shares[1].cpus == {0}
    assert shares[2].cpus == {3, 4, 7} and shares[2].rest


def test_without_a_topology_each_cpu_is_a_core():
    shares = layout_shares({"a": 2, "b": [7]}, numabind.Plan(cpus=frozenset({4, 5, 6, 7})))
    assert [s.cpus for s in shares] == [{4, 5}, {7}]
    assert [s.spec for s in shares] == ["2", "cpus:7"]


def test_the_first_pattern_matched_wins():
    shares = layout_shares([("acl*", "cpus:0"), ("acl_thread", "cpus:1"), ("*", "rest")],
                           numabind.Plan(cpus=frozenset({0, 1, 2})))
    assert match(shares, "acl_thread").pattern == "acl*"
    assert match(shares, "python3").pattern == "*"
    assert match(shares[:2], "python3") is None
    assert match(shares, "ACL_thread").pattern == "*"     # comm is case-sensitive


@pytest.mark.parametrize(("layout", "words"), [
    ({"a": "cpus:2-3"}, ["CPUs 3", "outside the plan", "0-2"]),
    ({"a": 0}, ["0 cores", "1 or more"]),
    ({"a": 4}, ["4 cores asked", "only 3", "fewer cores"]),
    ({"a": 2, "b": 2}, ["b=2", "only 1"]),
    ({"a": "two"}, ["'two'", "cpus:LIST", "rest"]),
    ({"a": "cpus:x"}, ["layout 'a'"]),
    ({"a": True}, ["True", "rest"]),
    ({"a": 3, "*": "rest"}, ["rest is empty", "fewer"]),
    ({}, ["empty", "PATTERN=SPEC"]),
    ([("a", 1), ("a", "rest")], ["'a'", "twice"]),
    ({"": 1}, ["glob"]),
    ("main=1", ["(pattern, share) pairs"]),
])
def test_bad_layouts_are_refused_naming_the_entry_and_the_fix(layout, words):
    with pytest.raises(PlanError) as e:
        layout_shares(layout, numabind.Plan(cpus=frozenset({0, 1, 2})))
    for word in words:
        assert word in str(e.value), (word, str(e.value))


def test_a_plan_without_cpus_has_nothing_to_share():
    with pytest.raises(PlanError, match="cpus=None"):
        layout_shares({"a": 1}, numabind.Plan(mem_policy="local"))


@pytest.mark.parametrize(("text", "parsed"), [("acl_thread=1", ("acl_thread", "1")), ("*=rest", ("*", "rest")),
                                              ("a=b=cpus:1", ("a=b", "cpus:1"))])
def test_thread_options_split_at_the_last_equals(text, parsed):
    assert parse_layout_item(text) == parsed


@pytest.mark.parametrize("text", ["acl_thread", "=1", "acl="])
def test_malformed_thread_options_name_the_form(text):
    with pytest.raises(PlanError, match="PATTERN=SPEC"):
        parse_layout_item(text)


# ----------------------------------------------------------------------------- placing, on this machine
@pytest.mark.kernel
def test_named_threads_get_their_shares_and_the_rest(two_cpus, target):
    a, b = two_cpus
    t = target("acl_thread,release_thread,other")
    report = pin_named_threads({"acl_thread": 1, "*": "rest"}, numabind.Plan(cpus=frozenset({a, b})), pid=t.pid)
    assert t.cpus("acl_thread") == {a}
    assert t.cpus("release_thread") == {b} and t.cpus("other") == {b}
    rows = _by_tid(report)
    acl = rows[t.tids["acl_thread"]]
    assert (acl.name, acl.pattern, acl.status, acl.after) == ("acl_thread", "acl_thread", "placed", {a})
    assert acl.before == os.sched_getaffinity(0) or acl.before >= {a, b}
    assert rows[t.pid].pattern == "*"          # the main thread too: it matches only the rest
    assert report.ok and report.pid == t.pid


@pytest.mark.kernel
def test_a_thread_no_pattern_matches_keeps_its_cpus(two_cpus, target):
    a, b = two_cpus
    t = target("acl_thread,other")
    before = t.cpus("other")
    report = pin_named_threads([("acl*", f"cpus:{a}"), ("acl_thread", f"cpus:{b}")],
                               numabind.Plan(cpus=frozenset({a, b})), pid=t.pid)
    assert t.cpus("acl_thread") == {a}          # the first pattern matched wins
    assert t.cpus("other") == before
    other = _by_tid(report)[t.tids["other"]]
    assert (other.status, other.pattern, other.after) == ("unmatched", None, before)


@pytest.mark.kernel
def test_a_thread_born_later_is_placed_by_the_watch(two_cpus, target):
    a, b = two_cpus
    t = target("other,late_loop@0.4")
    layout = {"late_*": 1, "*": "rest"}
    plan = numabind.Plan(cpus=frozenset({a, b}))
    first = pin_named_threads(layout, plan, pid=t.pid)
    assert "late_loop" not in {x.name for x in first.threads}
    later = watch_named_threads(layout, plan, pid=t.pid, seconds=1.5, known=[x.tid for x in first.threads])
    tid = t.wait_for("late_loop")
    assert t.cpus("late_loop") == {a}
    row = _by_tid(later)[tid]
    assert (row.status, row.pattern, row.before, row.after) == ("placed", "late_*", {b}, {a})
    assert 1.0 <= later.watched < 5
    assert {x.tid for x in first.then(later).threads} >= {tid, *(x.tid for x in first.threads)}


@pytest.mark.kernel
def test_a_thread_renamed_after_birth_is_placed_again(two_cpus, target):
    a, b = two_cpus
    t = target("x,worker@0.2>acl_thread")
    plan = numabind.Plan(cpus=frozenset({a, b}))
    report = watch_named_threads({"acl_thread": f"cpus:{a}", "*": "rest"}, plan, pid=t.pid, seconds=1.5)
    tid = t.wait_for("acl_thread")
    assert t.cpus("acl_thread") == {a}
    row = _by_tid(report)[tid]
    assert (row.name, row.pattern, row.after) == ("acl_thread", "acl_thread", {a})


@pytest.mark.kernel
def test_the_watch_stops_when_the_process_ends(two_cpus, target):
    t = target("other")
    t.end()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    began = time.monotonic()
    report = watch_named_threads({"*": "rest"}, numabind.Plan(cpus=frozenset(two_cpus)), pid=proc.pid, seconds=20,
                                 stop=lambda: proc.poll() is not None)
    assert time.monotonic() - began < 5
    assert report.watched < 5


def test_a_process_that_is_not_there_is_named():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with pytest.raises(numabind.NumabindError, match=f"no process {proc.pid}"):
        pin_named_threads({"*": "rest"}, numabind.Plan(cpus=frozenset(os.sched_getaffinity(0))), pid=proc.pid)


def test_watch_seconds_must_be_a_duration():
    with pytest.raises(PlanError, match="seconds"):
        watch_named_threads({"*": "rest"}, numabind.Plan(cpus=frozenset({0})), pid=os.getpid(), seconds=-1)


# ----------------------------------------------------------------------------- the command line
@pytest.mark.kernel
def test_move_thread_places_and_prints_json(two_cpus, target, capsys):
    a, b = two_cpus
    t = target("acl_thread,other")
    rc = move_main([str(t.pid), "-C", f"{a},{b}", "--thread", "acl_thread=1", "--thread", "*=rest", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert t.cpus("acl_thread") == {a} and t.cpus("other") == {b}
    threads = out[0]["threads"]
    assert [s["spec"] for s in threads["shares"]] == ["1", "rest"]
    acl = next(x for x in threads["threads"] if x["name"] == "acl_thread")
    assert (acl["pattern"], acl["after"], acl["status"]) == ("acl_thread", str(a), "placed")
    assert threads["ok"] is True and threads["watched"] == 0


@pytest.mark.kernel
def test_move_watch_places_a_thread_born_later(two_cpus, target, capsys):
    a, b = two_cpus
    t = target("other,late_loop@0.3")
    rc = move_main([str(t.pid), "-C", f"{a},{b}", "--thread", "late_*=1", "--thread", "*=rest", "--watch", "1.2"])
    text = capsys.readouterr().out
    assert rc == 0
    t.wait_for("late_loop")
    assert t.cpus("late_loop") == {a} and t.cpus("other") == {b}
    assert "(late_loop) late_*" in text and "watched" in text


@pytest.mark.parametrize(("args", "words"), [
    (["--thread", "acl=two"], ["'two'", "cpus:LIST"]),
    (["--thread", "acl=cpus:0-1", "-C", "0"], ["CPUs 1", "outside the plan"]),
])
def test_move_refuses_a_bad_share_before_moving(args, words, target, capsys):
    t = target("acl")
    before = t.cpus("acl")
    rc = move_main([str(t.pid), *(["-C", "0"] if "-C" not in args else []), *args])
    err = capsys.readouterr().err
    assert rc == 1
    for word in words:
        assert word in err
    assert t.cpus("acl") == before


@pytest.mark.parametrize(("args", "words"), [
    (["-C", "0", "--watch", "3"], ["--watch", "--thread"]),
    (["--restore", "--thread", "a=1"], ["--restore", "--thread"]),
    (["-C", "0", "--all-children", "--thread", "a=1"], ["--all-children"]),
    (["-C", "0", "--thread", "a"], ["PATTERN=SPEC"]),
])
def test_move_thread_usage_errors(args, words, capsys):
    rc = move_main([str(os.getpid()), *args])
    err = capsys.readouterr().err
    assert rc in (1, 2)
    for word in words:
        assert word in err


def test_move_watch_takes_seconds(capsys):
    with pytest.raises(SystemExit) as e:
        move_main([str(os.getpid()), "-C", "0", "--thread", "a=1", "--watch", "soon"])
    assert e.value.code == 2
    assert "not a number of seconds" in capsys.readouterr().err


def test_move_dry_run_shows_the_shares(capsys):
    cpus = sorted(os.sched_getaffinity(0))
    rc = move_main([str(os.getpid()), "-C", str(cpus[0]), "--thread", "main=1", "--dry-run", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["threads"] == [{"pattern": "main", "spec": "1", "cpus": str(cpus[0])}]


RUN_TARGET = ("import ctypes, os, threading, time; libc = ctypes.CDLL(None); "
              "done = threading.Event(); "
              "f = lambda n: (libc.prctl(15, n.encode(), 0, 0, 0), done.wait()); "
              "ts = [threading.Thread(target=f, args=('acl_thread',)), threading.Thread(target=f, args=('other',))]; "
              "[t.start() for t in ts]; time.sleep(0.6); "
              "print(' '.join(f'{t.native_id}:' + ','.join(map(str, sorted(os.sched_getaffinity(t.native_id)))) "
              "for t in ts), flush=True); done.set(); raise SystemExit(3)")


@pytest.mark.kernel
def test_run_thread_watches_the_command_for_its_life(two_cpus):
    a, b = two_cpus
    cp = subprocess.run([sys.executable, "-m", "numabind", "run", "-C", f"{a},{b}", "--thread", "acl_thread=1",
                         "--thread", "*=rest", "--json", "--", sys.executable, "-c", RUN_TARGET],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 3, cp.stderr          # the command's own status
    acl, other = (part.partition(":")[2] for part in cp.stdout.split())
    assert (acl, other) == (str(a), str(b))
    lines = [json.loads(line) for line in cp.stderr.splitlines() if line.startswith('{"threads"')]
    assert len(lines) == 1
    names = {x["name"]: x for x in lines[0]["threads"]["threads"]}
    assert names["acl_thread"]["after"] == str(a) and names["acl_thread"]["pattern"] == "acl_thread"


def test_run_thread_refuses_a_bad_share_before_running(tmp_path):
    marker = tmp_path / "ran"
    cp = subprocess.run([sys.executable, "-m", "numabind", "run", "-C", "0", "--thread", "a=cpus:0-1", "--",
                         sys.executable, "-c", f"open({str(marker)!r}, 'w')"], capture_output=True, text=True,
                        timeout=60)
    assert cp.returncode == 1 and "outside the plan" in cp.stderr, cp.stderr
    assert not marker.exists()
    cp = subprocess.run([sys.executable, "-m", "numabind", "run", "-C", "0", "--thread", "a", "--", "true"],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2 and "PATTERN=SPEC" in cp.stderr, cp.stderr


def test_run_thread_dry_run_shows_the_shares_and_runs_nothing(tmp_path):
    """``run --thread ... --dry-run`` prints each pattern's CPUs (text and JSON) and says run stays the parent."""
    marker = tmp_path / "ran"
    cpu = sorted(os.sched_getaffinity(0))[0]
    argv = [sys.executable, "-m", "numabind", "run", "-C", str(cpu), "--thread", "main=1", "--dry-run"]
    command = ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    text = subprocess.run(argv + command, capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    assert f"# threads named main (1): CPUs {cpu}" in text.stdout.splitlines()
    assert "stays the command's parent" in text.stdout
    out = json.loads(subprocess.run(argv + ["--json"] + command, capture_output=True, text=True, timeout=60).stdout)
    assert out["threads"] == [{"pattern": "main", "spec": "1", "cpus": str(cpu)}]
    assert not marker.exists()
