"""Runtime records that their user wrote to hurt the reader (issue 41).

A record (``<runtime dir>/<pid>.<start time>.json``, :mod:`numabind.records`) is written by the process's
own user, and root's ``numabind stat`` and ``numabind move --restore`` read every user's. Whatever a record
holds (60,000 ``[``, more than the size cap, fields of the wrong type, bytes that are not UTF-8, NaN), the
reader skips it with one line naming it, and reports every other process. The records here are planted by
this user for its own children: what matters is what the file holds, not who wrote it (the unprivileged
user's attacks are in ``tests/test_hostile_records.py``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numabind import _proc, records
from numabind._base import printable
from numabind.cli import main
from numabind.cli.stat import cmd_stat
from numabind.plan import Plan
from tests.helpers import MOVE
from tests.kernel import ROOT, child_env, numabind_cli

CPU = min(os.sched_getaffinity(0))
PLAN = Plan(cpus={CPU})
#: A runtime directory name with an escape sequence and a bidi override: it reaches the warning's path.
HOSTILE_DIR = "run\x1b]0;owned\x07\u202e"


def _good(pid: int, start: int, /, **fields: object) -> dict:
    return {"numabind_record": 1, "pid": pid, "start_time": start, "start_method": "fork",
            "requested": PLAN.to_text(), "applied": PLAN.to_text(), **fields}


#: name -> the bytes of a bad record of ``pid`` started at ``start``.
BAD: dict[str, object] = {
    "deep list": lambda pid, start: b"[" * 60000,
    "deep object": lambda pid, start: b'{"a":' * 10000 + b"1" + b"}" * 10000,
    "deep inside a good record": lambda pid, start: json.dumps(_good(pid, start, x=0)).encode().replace(
        b'"x": 0', b'"x": ' + b"[" * 30000 + b"]" * 30000),
    "nested one level too deep": lambda pid, start: json.dumps(_good(pid, start, x=[[[[1]]]])).encode(),
    "huge": lambda pid, start: json.dumps(_good(pid, start)).encode() + b" " * (70 << 10),
    "not UTF-8": lambda pid, start: json.dumps(_good(pid, start, start_method="f\xffk"),
                                                          ensure_ascii=False).encode("latin-1"),
    "UTF-16": lambda pid, start: json.dumps(_good(pid, start)).encode("utf-16"),
    "a list": lambda pid, start: json.dumps([_good(pid, start)]).encode(),
    "a string": lambda pid, start: b'"record"',
    "a number": lambda pid, start: b"1",
    "null": lambda pid, start: b"null",
    "empty": lambda pid, start: b"",
    "not JSON": lambda pid, start: b"{pid: 1",
    "NaN pid": lambda pid, start: json.dumps(_good(pid, start)).encode().replace(
        f'"pid": {pid}'.encode(), b'"pid": NaN'),
    "Infinity start": lambda pid, start: json.dumps(_good(pid, start)).encode().replace(
        f'"start_time": {start}'.encode(), b'"start_time": Infinity'),
    "1e999 version": lambda pid, start: json.dumps(_good(pid, start)).encode().replace(
        b'"numabind_record": 1', b'"numabind_record": 1e999'),
    "5000-digit pid": lambda pid, start: json.dumps(_good(pid, start)).encode().replace(
        f'"pid": {pid}'.encode(), b'"pid": ' + b"9" * 5000),
    "pid a string": lambda pid, start: json.dumps(_good(pid, start, pid=str(pid))).encode(),
    "pid a float": lambda pid, start: json.dumps(_good(pid, start, pid=float(pid))).encode(),
    "pid true": lambda pid, start: json.dumps(_good(pid, start, pid=True)).encode(),
    "start a list": lambda pid, start: json.dumps(_good(pid, start, start_time=[start])).encode(),
    "version a string": lambda pid, start: json.dumps(_good(pid, start, numabind_record="1")).encode(),
    "method a number": lambda pid, start: json.dumps(_good(pid, start, start_method=5)).encode(),
    "method with escapes": lambda pid, start: json.dumps(_good(pid, start, start_method="fork\x1b[2J")).encode(),
    "method missing": lambda pid, start: json.dumps({k: v for k, v in _good(pid, start).items()
                                                     if k != "start_method"}).encode(),
    "requested a dict": lambda pid, start: json.dumps(_good(pid, start, requested={"cpus": "0"})).encode(),
    "requested not a plan": lambda pid, start: json.dumps(_good(pid, start, requested="\x1b]0;pwn\x07")).encode(),
    "applied a number": lambda pid, start: json.dumps(_good(pid, start, applied=3)).encode(),
}


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A runtime dir of this test (``<it>/numabind``, named with control characters): the only place of the
    chain this process reads and writes (no /run/user, shared or home places); warnings said afresh."""
    base = tmp_path / HOSTILE_DIR
    base.mkdir(mode=0o700)
    (base / "numabind").mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base))
    monkeypatch.setattr(records, "_RUN_USER", str(tmp_path / "no-run-user"))
    monkeypatch.setattr(records, "_SHARED_BASES", (str(tmp_path / "no-shm"), str(tmp_path / "no-tmp")))
    monkeypatch.setattr(records, "_home", lambda uid: None)
    monkeypatch.setattr(records, "_bad_said", set(), raising=False)
    return base


def _plant(run, pid: int, start: int, data: bytes) -> str:
    path = run / "numabind" / f"{pid}.{start}.json"
    path.write_bytes(data)
    return str(path)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "numabind.records" and r.levelname == "WARNING"]


def _terminal_safe(text: str) -> bool:
    return all(c.isprintable() for line in text.split("\n") for c in line)


# ----------------------------------------------------------------------------- records.read_record
@pytest.mark.parametrize("bad", sorted(BAD))
def test_a_bad_record_is_skipped_with_one_warning_naming_it(bad, run, caplog):
    me = os.getpid()
    start = _proc.start_time(me)
    path = _plant(run, me, start, BAD[bad](me, start))
    caplog.set_level(logging.WARNING, logger="numabind.records")
    for _ in range(3):                      # numabind stat --watch reads it each round: said once
        assert records.read_record(me, start) is None
    said = _warnings(caplog)
    assert len(said) == 1 and printable(path) in said[0], said
    assert _terminal_safe(said[0]) and "\x1b" not in said[0], ascii(said[0])


def test_a_good_record_is_read_with_exactly_its_checked_fields_and_no_warning(run, caplog):
    me = os.getpid()
    start = _proc.start_time(me)
    _plant(run, me, start, json.dumps(_good(me, start, applied=None, extra={"a": [1]})).encode())
    caplog.set_level(logging.WARNING, logger="numabind.records")
    assert records.read_record(me, start) == {"numabind_record": 1, "pid": me, "start_time": start,
                                              "start_method": "fork", "requested": PLAN.to_text(), "applied": None}
    assert _warnings(caplog) == []


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_what_is_not_a_regular_file_is_skipped_with_one_warning(kind, run, tmp_path, caplog):
    """Never followed, never blocked on: a link to a file of secrets, a FIFO nobody writes, a directory."""
    me = os.getpid()
    start = _proc.start_time(me)
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps(_good(me, start, start_method="secret")))
    path = run / "numabind" / f"{me}.{start}.json"
    {"symlink": lambda: path.symlink_to(secret), "fifo": lambda: os.mkfifo(path),
     "directory": lambda: path.mkdir()}[kind]()
    caplog.set_level(logging.WARNING, logger="numabind.records")
    assert records.read_record(me, start) is None
    said = _warnings(caplog)
    assert len(said) == 1 and printable(str(path)) in said[0] and "secret" not in said[0], said


# ----------------------------------------------------------------------------- records.load_json
def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


_TEXT = st.text(alphabet=st.sampled_from('[]{}"\\:,ab\x1b\u202e'), max_size=8)
_JSON = st.recursive(st.none() | st.booleans() | st.integers(-(10 ** 18), 10 ** 18) | _TEXT
                     | st.floats(allow_nan=False, allow_infinity=False),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
                     max_leaves=24)


@settings(max_examples=300, deadline=None)
@given(_JSON, st.integers(0, 6), st.booleans())
def test_load_json_parses_what_nests_at_most_depth_and_refuses_the_rest(value, depth, ascii_only):
    """Brackets and escaped quotes inside strings do not count; the answer is the parser's own."""
    data = json.dumps(value, ensure_ascii=ascii_only).encode()
    if _depth(value) > depth:
        with pytest.raises(ValueError, match="nest deeper"):
            records.load_json(data, depth=depth)
    else:
        assert records.load_json(data, depth=depth) == value


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(alphabet=st.sampled_from('[]{}"\\:,0123456789.eE-+ NaInfty'),
                                         max_size=300).map(str.encode),
       st.integers(1, 40000))
def test_load_json_raises_only_value_error(data, repeat):
    """Whatever the bytes (repeated to thousands of brackets), a value or ValueError: never RecursionError. The
    value is what :func:`json.loads` reads from the same text (the bounds refuse, they never change a value)."""
    for blob in (data, data[:4] * repeat):
        try:
            value = records.load_json(blob, depth=4)
        except ValueError:
            continue
        assert value == json.loads(blob.decode("utf-8")), blob


@pytest.mark.parametrize("text", ["NaN", "-Infinity", "Infinity", "1e999", "-1e400", "[1e999]", "9" * 30,
                                  "0." + "1" * 40])
def test_load_json_refuses_what_is_not_a_finite_short_number(text):
    with pytest.raises(ValueError):
        records.load_json(text.encode(), depth=4)


def test_load_json_keeps_floats_as_python_writes_them():
    for x in (0.1, -2.2250738585072014e-308, 1.7976931348623157e308, 5e-324):
        assert records.load_json(json.dumps([x]).encode(), depth=1) == [x] and math.isfinite(x)


# ----------------------------------------------------------------------------- numabind stat over several processes
WAIT = "import sys; print('ready', flush=True); sys.stdin.read()"


class _Workers:
    """``n`` children of this user waiting on stdin, each with ``run`` as its XDG_RUNTIME_DIR."""

    def __init__(self, run, n: int) -> None:
        self.procs = []
        for _ in range(n):
            p = subprocess.Popen([sys.executable, "-c", WAIT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, env=child_env(XDG_RUNTIME_DIR=str(run)), cwd=ROOT)
            self.procs.append(p)
            assert p.stdout.readline().strip() == "ready"
        self.pids = [p.pid for p in self.procs]

    def __enter__(self) -> _Workers:
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.stdin.close()
            p.wait(timeout=60)
            p.stdout.close()


@pytest.fixture
def three(run):
    """Three children: the first and the last with a good record, the middle one with 60,000 ``[``."""
    with _Workers(run, 3) as w:
        starts = [_proc.start_time(pid) for pid in w.pids]
        for pid, start in zip(w.pids, starts):
            _plant(run, pid, start, json.dumps(_good(pid, start)).encode())
        w.bad = _plant(run, w.pids[1], starts[1], b"[" * 60000)
        yield w


def _check_text(out: str, w) -> None:
    heads = {int(line.split()[1]): line for line in out.splitlines() if line.startswith("pid ")}
    assert sorted(heads) == sorted(w.pids), out
    for pid in (w.pids[0], w.pids[2]):
        assert f"bound by numabind: cpus {CPU}" in heads[pid] and "[runtime record (fork)]" in heads[pid], heads[pid]
    assert "numabind" not in heads[w.pids[1]] and ": " not in heads[w.pids[1]], heads[w.pids[1]]


def _check_json(out: str, w) -> None:
    got = {d["pid"]: d for d in json.loads(out)}
    assert sorted(got) == sorted(w.pids)
    for pid in (w.pids[0], w.pids[2]):
        assert got[pid]["bound"]["source"] == "runtime record (fork)" and got[pid]["error"] is None
    assert got[w.pids[1]]["bound"] is None and got[w.pids[1]]["error"] is None


def _named_once(err: str, path: str) -> None:
    lines = [line for line in err.splitlines() if printable(path) in line]
    assert len(lines) == 1, err
    assert "Traceback" not in err and _terminal_safe(err), ascii(err)


@pytest.mark.kernel
@pytest.mark.parametrize("as_json", [False, True])
def test_stat_as_a_command_reports_the_others_and_names_the_bad_record_once(as_json, three):
    cp = numabind_cli("stat", *(["--json"] if as_json else []), *map(str, three.pids),
                      env=child_env(XDG_RUNTIME_DIR=os.environ["XDG_RUNTIME_DIR"]))
    assert cp.returncode == 0, cp.stderr
    (_check_json if as_json else _check_text)(cp.stdout, three)
    _named_once(cp.stderr, three.bad)
    assert "numabind.records: WARNING: " in cp.stderr


@pytest.mark.kernel
def test_stat_watch_as_a_command_names_the_bad_record_once(three):
    cp = numabind_cli("stat", "--watch", "0.01", "--count", "3", *map(str, three.pids),
                      env=child_env(XDG_RUNTIME_DIR=os.environ["XDG_RUNTIME_DIR"]))
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.count(f"pid {three.pids[0]} ") == 3
    _named_once(cp.stderr, three.bad)


@pytest.mark.kernel
@pytest.mark.parametrize("as_json", [False, True])
def test_stat_in_process_through_main_reports_the_others(as_json, three, capsys, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.records")
    assert main(["stat", *(["--json"] if as_json else []), *map(str, three.pids)]) == 0
    out = capsys.readouterr().out
    (_check_json if as_json else _check_text)(out, three)
    said = _warnings(caplog)
    assert len(said) == 1 and printable(three.bad) in said[0], said


@pytest.mark.kernel
def test_stat_in_process_through_cmd_stat_with_watch(three, capsys, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.records")
    args = argparse.Namespace(pids=three.pids, all_children=[], json=False, watch=0.01, count=2, system=False)
    assert cmd_stat(args) == 0
    out = capsys.readouterr().out
    _check_text(out.split("numabind stat, every")[-1], three)
    said = _warnings(caplog)
    assert len(said) == 1 and printable(three.bad) in said[0], said


def _restore(pid: int, how: str) -> subprocess.CompletedProcess:
    if how == "command":
        args = [sys.executable, "-m", "numabind", "move", "--restore", str(pid)]
    else:
        args = [sys.executable, "-c", MOVE, how, "--restore", str(pid)]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=child_env(XDG_RUNTIME_DIR=os.environ["XDG_RUNTIME_DIR"]))


@pytest.mark.kernel
@pytest.mark.parametrize("how", ["command", "logging"])
def test_move_restore_of_a_process_with_a_bad_record_is_one_error_line(how, three):
    """No traceback: numabind's one-line error (no binding recorded), and the records' WARNING naming the bad
    record once: ``numabind move`` starts without logging and configures it at the first WARNING (``command``),
    as a program that configured logging itself shows it (``logging``)."""
    before = os.sched_getaffinity(three.pids[1])
    cp = _restore(three.pids[1], how)
    assert cp.returncode == 1, (cp.stdout, cp.stderr)
    assert "Traceback" not in cp.stderr and _terminal_safe(cp.stderr), ascii(cp.stderr)
    errors = [line for line in cp.stderr.splitlines() if line.startswith("numabind: error: ")]
    assert len(errors) == 1 and "recorded no binding" in errors[0], cp.stderr
    named = [line for line in cp.stderr.splitlines() if printable(three.bad) in line]
    assert len(named) == 1, cp.stderr
    assert os.sched_getaffinity(three.pids[1]) == before


@pytest.mark.kernel
def test_move_restore_in_process_names_the_bad_record_once(three, capsys, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.records")
    assert main(["move", "--restore", str(three.pids[1])]) == 1
    err = capsys.readouterr().err
    assert err.startswith("numabind: error: ") and len(err.splitlines()) == 1, err
    said = _warnings(caplog)
    assert len(said) == 1 and printable(three.bad) in said[0], said


# ----------------------------------------------------------------------------- the same class elsewhere
@pytest.mark.kernel
def test_a_deeply_nested_birth_report_is_a_numabind_error(tmp_path, monkeypatch):
    """A child's birth report (process/reports.py) is JSON another process wrote, parsed with the same bounds."""
    from numabind.errors import NumabindError
    from numabind.process import configure_subprocess

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    with configure_subprocess(Plan(cpus=frozenset(os.sched_getaffinity(0)))) as births:
        fd = os.open("4242.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=births._dir_fd())
        os.write(fd, b"[" * 60000)
        os.close(fd)
        with pytest.raises(NumabindError, match="malformed"):
            births.reports()
        births.close()


def test_a_deeply_nested_pool_slot_table_is_a_numabind_error():
    """A pool's slot table (process/pools.py) is parsed with bounds too: a NumabindError, not RecursionError."""
    from numabind.errors import NumabindError
    from numabind.process.pools import _SlotTable

    table = _SlotTable([PLAN], 2, None, None)
    with open(table.path, "r+b") as f:       # the same file (its identity is checked), rewritten
        f.truncate(0)
        f.write(b"[" * 60000)
    with pytest.raises(NumabindError, match="malformed"):
        table._claim_once(extra=False)
