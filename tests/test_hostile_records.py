"""Runtime records written by an unprivileged local user to crash or fool root's ``numabind stat`` and
``numabind move --restore`` (issue 41).

The neighbour (``numabind-neighbour``, :mod:`tests.hostile`) starts processes of its own, with an
``XDG_RUNTIME_DIR`` of its own whose name holds escape sequences, and writes a record for each in ITS runtime
dir (``<XDG_RUNTIME_DIR>/numabind/<pid>.<start time>.json``, where :func:`numabind.records.read_record` looks
for a process of that user): 60,000 ``[``; escape sequences in the fields; a file of 1 MiB; a symlink named
like the record that points at a root-only file holding a record for that process; and one good record.
Root then runs ``numabind stat`` (those processes, one of them, ``--json``) and ``numabind move --restore``:
no crash, every process reported, each bad record named once, no control character in the output, and the
root-only file never read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from numabind import _proc
from numabind._base import printable
from numabind.plan import Plan
from tests.helpers import MOVE
from tests.hostile import neighbour, shared_dirs  # noqa: F401 - fixtures
from tests.kernel import ROOT, child_env, numabind_cli

pytestmark = pytest.mark.kernel

#: The neighbour's XDG_RUNTIME_DIR, under a shared directory: an OSC title sequence, BEL, a bidi override.
XDG = "xdg\x1b]0;owned\x07\u202e"
BAD = ("deep", "escapes", "huge", "link")
SECRET = "rootsecret"      # the start method in the root-only file the link points at


# ----------------------------------------------------------------------------- the attack (as the neighbour)
def hostile_records(chan) -> dict:
    """Start a process per kind, each waiting on its stdin with our XDG_RUNTIME_DIR, and write its record."""
    msg = chan.recv()
    xdg = os.path.join(msg["base"], XDG)
    os.mkdir(xdg, 0o700)
    run = os.path.join(xdg, "numabind")
    os.mkdir(run, 0o700)
    procs, pids = [], {}
    try:
        for kind in (*BAD, "good"):
            p = subprocess.Popen(["/usr/bin/cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 env={"XDG_RUNTIME_DIR": xdg})
            procs.append(p)
            with open(f"/proc/{p.pid}/stat") as f:
                start = int(f.read().rpartition(")")[2].split()[19])
            good = {"numabind_record": 1, "pid": p.pid, "start_time": start, "start_method": "fork",
                    "requested": msg["plan"], "applied": msg["plan"]}
            path = os.path.join(run, f"{p.pid}.{start}.json")
            if kind == "link":
                os.symlink(msg["secret"], path)
            else:
                data = {"deep": lambda: b"[" * 60000,
                        "escapes": lambda: json.dumps(dict(good, start_method="fork\x1b]0;pwned\x07",
                                                           requested=msg["plan"] + "\x1b[2J\u202e"),
                                                      ensure_ascii=False).encode(),
                        "huge": lambda: json.dumps(good).encode() + b" " * (1 << 20),
                        "good": lambda: json.dumps(good).encode()}[kind]()
                with open(path, "wb") as f:
                    f.write(data)
            pids[kind] = [p.pid, path]
        chan.send({"pids": pids})
        assert chan.recv() == "stop"
    finally:
        for p in procs:
            p.stdin.close()
            p.wait()
    return {"started": len(procs)}


# ----------------------------------------------------------------------------- root, the victim
@pytest.fixture
def attack(neighbour, shared_dirs, tmp_path):
    """The neighbour's processes and records: ``{kind: (pid, record path)}``; the root-only file the link
    points at holds a good record of the link's process (with start method ``rootsecret``)."""
    vault = tmp_path / "vault"
    vault.mkdir(mode=0o700)
    secret = vault / "record.json"
    plan = Plan(cpus={min(os.sched_getaffinity(0))}).to_text()
    a = neighbour.start(hostile_records)
    try:
        a.send({"base": shared_dirs[0], "plan": plan, "secret": str(secret)})
        got = {kind: tuple(v) for kind, v in a.recv()["pids"].items()}
        pid = got["link"][0]
        secret.write_text(json.dumps({"numabind_record": 1, "pid": pid, "start_time": _proc.start_time(pid),
                                      "start_method": SECRET, "requested": plan, "applied": plan}))
        secret.chmod(0o600)
        yield got
    finally:
        a.send("stop")
        assert a.result() == {"started": len(BAD) + 1}


def _safe(cp: subprocess.CompletedProcess) -> None:
    """Nothing a terminal would act on, no traceback, nothing of the root-only file."""
    for text in (cp.stdout, cp.stderr):
        assert all(c.isprintable() for line in text.split("\n") for c in line), ascii(text)
        assert SECRET not in text
    assert "Traceback" not in cp.stderr, cp.stderr


def _named_once(cp: subprocess.CompletedProcess, attack: dict, kinds) -> None:
    """Each bad record of ``kinds`` named on exactly one line of stderr."""
    lines = cp.stderr.splitlines()
    for kind in kinds:
        path = printable(attack[kind][1])
        named = [line for line in lines if path in line]
        assert len(named) == 1, (kind, cp.stderr)
    good = printable(attack["good"][1])
    assert not any(good in line for line in lines), cp.stderr


def _heads(out: str) -> dict[int, str]:
    return {int(line.split()[1]): line for line in out.splitlines() if line.startswith("pid ")}


def test_stat_of_all_the_neighbours_processes(attack):
    pids = [attack[k][0] for k in (*BAD, "good")]
    cp = numabind_cli("stat", *map(str, pids))
    assert cp.returncode == 0, cp.stderr
    _safe(cp)
    _named_once(cp, attack, BAD)
    heads = _heads(cp.stdout)
    assert sorted(heads) == sorted(pids), cp.stdout
    assert "bound by numabind: " in heads[attack["good"][0]] and "[runtime record (fork)]" in heads[attack["good"][0]]
    for kind in BAD:
        assert "numabind" not in heads[attack[kind][0]], heads


def test_stat_json_of_all_the_neighbours_processes(attack):
    pids = [attack[k][0] for k in (*BAD, "good")]
    cp = numabind_cli("stat", "--json", *map(str, pids))
    assert cp.returncode == 0, cp.stderr
    _safe(cp)
    assert cp.stdout.isascii()
    _named_once(cp, attack, BAD)
    got = {d["pid"]: d for d in json.loads(cp.stdout)}
    assert sorted(got) == sorted(pids)
    assert got[attack["good"][0]]["bound"]["source"] == "runtime record (fork)"
    assert all(got[attack[k][0]]["bound"] is None and got[attack[k][0]]["error"] is None for k in BAD)


@pytest.mark.parametrize("kind", BAD)
def test_stat_of_one_neighbours_process(kind, attack):
    cp = numabind_cli("stat", "--watch", "0.01", "--count", "2", str(attack[kind][0]))
    assert cp.returncode == 0, cp.stderr
    _safe(cp)
    _named_once(cp, attack, [kind])
    assert cp.stdout.count(f"pid {attack[kind][0]} (cat)") == 2, cp.stdout


@pytest.mark.parametrize(("kind", "how"), [*((kind, "command") for kind in BAD), ("deep", "logging")])
def test_move_restore_of_a_neighbours_process(kind, how, attack):
    """numabind's one-line error, and the bad record named exactly once: ``command`` (``numabind move`` as it is,
    which configures logging at the first WARNING) and ``logging`` (a program that configured logging)."""
    pid = attack[kind][0]
    before = os.sched_getaffinity(pid)
    args = ["-m", "numabind", "move"] if how == "command" else ["-c", MOVE, how]
    cp = subprocess.run([sys.executable, *args, "--restore", str(pid)], capture_output=True, text=True,
                        timeout=120, cwd=ROOT, env=child_env())
    assert cp.returncode == 1, (cp.stdout, cp.stderr)
    _safe(cp)
    errors = [line for line in cp.stderr.splitlines() if line.startswith("numabind: error: ")]
    assert len(errors) == 1 and f"no binding for process {pid}" in errors[0], cp.stderr
    _named_once(cp, attack, [kind])
    assert os.sched_getaffinity(pid) == before
