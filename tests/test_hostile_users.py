"""A second local user (``numabind-neighbour``, see tests/hostile.py) against the files numabind
creates and reads in shared places: the children's birth reports (:class:`numabind.ChildBindings`)
and the runtime records (:mod:`numabind.records`).

The victim is this test process (root, which follows links anywhere); the attacker races it from a
forked child running as the neighbour. A root-only precious file must never be truncated or
overwritten, and the victim's reads must never block on a FIFO nor accept a forged report or record.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.util
import os
import tempfile
import time

import pytest

from numabind import _proc, records
from numabind.errors import NumabindError
from numabind.plan import Plan
from numabind.process import configure_subprocess
from tests.hostile import neighbour, precious, shared_dirs  # noqa: F401 - fixtures

PLAN = Plan(cpus=frozenset(os.sched_getaffinity(0)))
FORGED = "forged by the neighbour"


def _pid_after(last: int, k: int) -> int:
    """The k-th pid the kernel hands out after ``last`` (it wraps to 301 at pid_max)."""
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())
    pid = last + k
    return pid if pid < pid_max else 301 + (pid - pid_max) % (pid_max - 301)


def _last_pid() -> int:
    with open("/proc/sys/kernel/ns_last_pid") as f:
        return int(f.read())


# ----------------------------------------------------------------------------- the attacks (as the neighbour)

def plant_report_links(chan, window: int, rounds: int) -> dict:
    """Recreate the victim's (removed) report directory as ours and plant ``.<pid>.tmp`` symlinks to
    the precious file for the pids the victim's children will get, racing until told to stop."""
    msg = chan.recv()
    d, target = msg["dir"], msg["precious"]
    out = {"recreated": False, "planted": 0, "refused": []}

    def plant(count: int) -> None:
        last = _last_pid()
        for k in range(1, count + 1):
            try:
                os.symlink(target, os.path.join(d, f".{_pid_after(last, k)}.tmp"))
                out["planted"] += 1
            except FileExistsError:
                continue
            except OSError as e:
                out["refused"].append(f"symlink: {e.strerror}")
                return

    try:
        os.mkdir(d, 0o755)
        out["recreated"] = True
    except OSError as e:
        out["refused"].append(f"mkdir: {e.strerror}")
    plant(window)
    chan.send("ready")
    for _ in range(rounds):
        if chan.poll():
            break
        plant(64)
    assert chan.recv() == "stop"
    out["refused"] = sorted(set(out["refused"]))
    return out


def forge_reports(chan, rounds: int) -> dict:
    """Recreate the victim's (removed) report directory as ours with a FIFO as one child's report and
    a forged report of another; a reader that blocks on the FIFO is fed a forged report."""
    msg = chan.recv()
    d, pid, other = msg["dir"], msg["pid"], msg["other"]
    out = {"recreated": False, "unblocked_reader": False, "refused": []}
    fifo = os.path.join(d, f"{pid}.json")
    try:
        os.mkdir(d, 0o755)
        out["recreated"] = True
        os.mkfifo(fifo, 0o644)
        with open(os.path.join(d, f"{other}.json"), "w") as f:
            json.dump({"pid": other, "start_method": "fork", "error": FORGED}, f)
    except OSError as e:
        out["refused"].append(f"{e.strerror}")
    chan.send("ready")
    for _ in range(rounds):
        if chan.poll():
            break
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)   # ENXIO unless a reader is blocked on it
        except OSError:
            time.sleep(0.001)
            continue
        out["unblocked_reader"] = True
        os.write(fd, json.dumps({"pid": pid, "start_method": "fork", "error": FORGED}).encode())
        os.close(fd)
    assert chan.recv() == "stop"
    return out


def squat_runtime_dirs(chan, rounds: int) -> dict:
    """Take the shared runtime directory names first: one as a directory of ours holding a forged
    record and a FIFO, one as a symlink to the victim's root-only vault; keep them squatted."""
    msg = chan.recv()
    own, linked, vault, name = msg["own"], msg["linked"], msg["vault"], msg["record"]
    out = {"squatted": 0}

    def squat() -> None:
        try:
            os.mkdir(own, 0o777)
            os.chmod(own, 0o777)
            rec = dict(msg["forged"], requested=PLAN.to_text())
            with open(os.path.join(own, name), "w") as f:
                json.dump(rec, f)
            os.mkfifo(os.path.join(own, "fifo.json"))
            out["squatted"] += 1
        except FileExistsError:
            pass
        try:
            os.symlink(vault, linked)
            out["squatted"] += 1
        except FileExistsError:
            pass

    squat()
    chan.send("ready")
    for _ in range(rounds):
        if chan.poll():
            break
        squat()
        time.sleep(0.001)
    assert chan.recv() == "stop"
    out["own_entries"] = sorted(os.listdir(own))
    return out


# ----------------------------------------------------------------------------- the victim (this process)

def _private_chain(monkeypatch, shared, home) -> None:
    """Shared places of this test's own (the neighbour reaches them, the real /dev/shm and /tmp stay
    untouched): the runtime directory chain and tempfile's directory point there."""
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(records, "_RUN_USER", str(home / "no-run-user"), raising=False)
    monkeypatch.setattr(records, "_SHARED_BASES", tuple(shared), raising=False)
    monkeypatch.setattr(records, "_home", lambda uid: str(home), raising=False)
    multiprocessing.util.get_temp_dir()     # multiprocessing's own (the forkserver's socket) stays where it was
    monkeypatch.setattr(tempfile, "tempdir", shared[0])      # where numabind put its report directory before


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "home"
    h.mkdir(mode=0o755)
    return h


@pytest.mark.kernel
@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_child_never_writes_its_birth_report_through_a_neighbours_link(method, neighbour, shared_dirs,
                                                                          precious, home, monkeypatch):
    """The report directory removed (close(), or the handle collected) while children still start: the
    neighbour recreates its name and plants links for the next pids. No child writes through them."""
    _private_chain(monkeypatch, shared_dirs, home)
    attack = neighbour.start(plant_report_links, 2000, 5000)
    ctx = multiprocessing.get_context(method)
    with configure_subprocess(PLAN) as births:
        births.close()
        attack.send({"dir": births.directory, "precious": precious})
        assert attack.recv() == "ready"
        procs = [ctx.Process(target=os.getpid) for _ in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
    attack.send("stop")
    out = attack.result()
    assert [p.exitcode for p in procs] == [0, 0, 0]            # bound and ran all the same
    with open(precious, "rb") as f:
        assert f.read() == b"precious: must never change\n", out
    assert not out["recreated"] and out["planted"] == 0, out    # the directory lies in a private one


@pytest.mark.kernel
def test_the_parent_never_reads_a_neighbours_fifo_or_forged_report(neighbour, shared_dirs, home, monkeypatch):
    """After the report directory is removed, the neighbour puts a FIFO and a forged report under its
    name: the parent's reads neither block nor return them."""
    _private_chain(monkeypatch, shared_dirs, home)
    attack = neighbour.start(forge_reports, 20000)
    with configure_subprocess(PLAN) as births:
        p = multiprocessing.get_context("fork").Process(target=os.getpid)
        p.start()
        p.join(120)
        assert births.report(p.pid).ok
    births.close()
    attack.send({"dir": births.directory, "pid": p.pid, "other": p.pid + 1})
    assert attack.recv() == "ready"
    got = []
    for read in (lambda: births.report(p.pid, timeout=0), births.reports):
        try:
            got.append(read())
        except (NumabindError, TimeoutError) as e:
            got.append(str(e))
    attack.send("stop")
    out = attack.result()
    assert not out["unblocked_reader"], (out, got)
    assert FORGED not in repr(got), got


@pytest.mark.kernel
def test_squatted_runtime_dirs_are_skipped_and_the_record_still_found(neighbour, shared_dirs, home, precious,
                                                                     monkeypatch, caplog):
    """The neighbour takes both shared names first (a directory of its own with a forged record and a
    FIFO; a symlink to the victim's vault): the record goes to the next place of the chain (the home),
    readers find it there and never the forged one, and birth reports still work."""
    _private_chain(monkeypatch, shared_dirs, home)
    monkeypatch.setattr(records, "_warned", set(), raising=False)
    uid, me = os.geteuid(), os.getpid()
    start = _proc.start_time(me)
    vault = os.path.dirname(precious)
    attack = neighbour.start(squat_runtime_dirs, 20000)
    own, linked = (os.path.join(d, f"numabind-{uid}") for d in shared_dirs)
    attack.send({"own": own, "linked": linked, "vault": vault, "record": f"{me}.{start}.json",
                 "forged": {"numabind_record": 1, "pid": me, "start_time": start, "start_method": FORGED,
                            "applied": None}})
    assert attack.recv() == "ready"
    requested = Plan(cpus=frozenset({min(os.sched_getaffinity(0))})).to_text()
    assert records.write_record(me, "fork", requested, requested) is None
    rec = records.read_record(me, start)
    with configure_subprocess(PLAN) as births:
        p = multiprocessing.get_context("fork").Process(target=os.getpid)
        p.start()
        p.join(120)
        rep = births.report(p.pid)
        where = births.directory
    attack.send("stop")
    out = attack.result()
    assert out["squatted"] >= 2
    assert rec is not None and rec["start_method"] == "fork" and rec["requested"] == requested, rec
    fallback = str(home / ".cache" / "numabind" / "run")
    assert os.path.isfile(os.path.join(fallback, f"{me}.{start}.json"))
    assert rep.ok and where is not None and where.startswith(fallback + "/births-")
    assert os.listdir(vault) == ["precious"]                       # nothing written through the link
    assert out["own_entries"] == sorted([f"{me}.{start}.json", "fifo.json"])   # nor into its directory
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(own in m for m in warned) and any(linked in m for m in warned), warned
    os.unlink(os.path.join(fallback, f"{me}.{start}.json"))


def test_the_chain_of_runtime_dirs(tmp_path, monkeypatch):
    """Writers and readers share one chain: XDG_RUNTIME_DIR, /run/user/<uid> (when it is the user's),
    the shared places, then the home."""
    uid = os.geteuid()
    monkeypatch.setattr(records, "_RUN_USER", str(tmp_path / "run"))
    monkeypatch.setattr(records, "_SHARED_BASES", ("/shm", "/tmpx"))
    monkeypatch.setattr(records, "_home", lambda u: f"/home/u{u}")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    chain = [str(tmp_path / "numabind"), f"{tmp_path}/run/{uid}/numabind", f"/shm/numabind-{uid}",
             f"/tmpx/numabind-{uid}", f"/home/u{uid}/.cache/numabind/run"]
    assert records.record_dirs(uid, str(tmp_path)) == chain
    assert records.record_dir() == chain[0]
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert records.record_dir() == chain[2]                 # no /run/user/<uid>: never made by numabind
    (tmp_path / "run" / str(uid)).mkdir(parents=True, mode=0o700)
    assert records.record_dir() == chain[1]
    assert records.record_dirs(12345)[-1] == "/home/u12345/.cache/numabind/run"


def plant_slot_table(chan) -> dict:
    """Put a symlink to the precious file where the victim's removed pool slot table was."""
    msg = chan.recv()
    try:
        os.symlink(msg["precious"], msg["path"])
        planted = True
    except OSError:
        planted = False
    chan.send("ready")
    assert chan.recv() == "stop"
    return {"planted": planted}


@pytest.mark.kernel
def test_a_pool_worker_never_claims_a_slot_through_a_neighbours_link(neighbour, precious):
    """pool_plans' slot table (a mkstemp file in /tmp) removed while a worker still starts: the
    neighbour's link at its name is refused, never opened for writing."""
    import numabind

    table = numabind.pool_plans([PLAN], 1)["initargs"][0]
    os.unlink(table.path)
    attack = neighbour.start(plant_slot_table)
    attack.send({"path": table.path, "precious": precious})
    assert attack.recv() == "ready"
    try:
        with pytest.raises((NumabindError, OSError)):
            table.claim()
    finally:
        attack.send("stop")
        out = attack.result()
        if os.path.islink(table.path):
            os.unlink(table.path)
    assert out["planted"]
