"""bind_current under races, signals and faults (issue 25, items 3-9 and the read-back decision).

Threads that start threads while a bind walks them, a strict rollback of the system-wide interleave weights, a
rollback step that fails, an unlistable or foreign ``/proc/self/task``, a signal handler's exception right after
the native call, two binds at once in one process, a memory policy that cannot be read back, and the caps of
``BindReport.from_dict``. Every test touches the kernel of this host; the autouse fixture ``restore_process``
puts every thread's CPUs and the memory policy back; faults that cannot be undone (seccomp, a PID namespace) run
in a child. Nothing assumes this host's CPU ids or node count.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import json
import logging
import os
import sys
import threading
import time

import pytest

import numabind
from numabind import BindError, Plan, PlanError, live
from numabind import _transaction
from numabind.backends import Backend, MemPolicySwap, get_backend
from numabind.bind import MAX_REPORT_LINES, MAX_REPORT_NAME, MAX_REPORT_THREADS, BindReport
from tests.kernel import (  # noqa: F401  (all_cpus, two_cpus: fixtures)
    all_cpus,
    CPU_A,
    CPU_B,
    MEM_NODE,
    MPOL,
    NO_SUCH_TID,
    OUTSIDE_CPU,
    Parked,
    Spawner,
    raw_mempolicy,
    raw_set_mempolicy,
    run_json,
    thread_affinities,
    two_cpus,
)

pytestmark = pytest.mark.kernel

NATIVE = ("libnuma", "syscall")
N = MEM_NODE


def stepwise(be, monkeypatch) -> None:
    """No one-call bind: the thread list, the walk and the memory policy step by step."""
    monkeypatch.setattr(be, "apply_all", functools.partial(Backend.apply_all, be))


# --------------------------------------------------------------------------- item 3: threads started meanwhile
class Churner(Spawner):
    """A :class:`Spawner` whose every other thread ends at once: threads the walk listed are gone when the bind
    looks for new ones, so their places in /proc/self/task move (the bind then lists it again from its start)."""

    def _run(self) -> None:
        while not self.stop.is_set() and len(self.children) < self.cap:
            t = threading.Thread(target=self.release.wait if len(self.children) % 2 else int, daemon=True)
            t.start()
            self.children.append(t)
            self.started.set()


@pytest.mark.parametrize("backend", ["libnuma", "none"])
@pytest.mark.parametrize("spawner", [Spawner, Churner])
def test_threads_started_during_the_walk_are_bound_too(spawner, backend, two_cpus):
    """A thread that keeps starting threads while bind_current(strict=True, threads="all") walks: afterwards
    every live thread holds the plan's CPUs (a strict bind that could not settle raises, rolled back). Each
    round's spawner is walked last, behind 48 parked threads: it starts threads for the whole walk. The native
    call reads /proc/self/task on from the last thread it listed, or lists it again once threads ended (Churner);
    the Python walk (backend none) lists it again."""
    a, b = two_cpus
    wide = frozenset(os.sched_getaffinity(0))
    plan = Plan(cpus=frozenset({b}))
    for _ in range(20):
        with spawner() as spawning:
            try:
                report = numabind.bind_current(plan, strict=True, threads="all", backend=backend)
            except BindError as e:      # it could not settle: said so, and rolled back
                assert e.errno == errno.EAGAIN and "threads kept starting threads" in str(e)
                report = None
            spawning.stop.set()
            spawning.thread.join(timeout=30)
            if report is not None:
                assert report.ok, report.warnings
                wrong = {tid: cpus for tid, cpus in thread_affinities().items() if cpus != plan.cpus}
                assert not wrong, f"{len(wrong)} threads keep other CPUs than {set(plan.cpus)}: {wrong}"
        for tid in thread_affinities():     # the next round starts from the wide CPUs again
            try:
                os.sched_setaffinity(tid, wide)
            except OSError:
                pass


@pytest.mark.parametrize("strict", [True, False])
def test_a_thread_list_that_never_settles_is_a_warning_and_strict_raises(strict, monkeypatch, all_cpus):
    """Every listing shows one more new thread (gone before it is read): after the rounds it gives up."""
    be, _ = get_backend("syscall")
    stepwise(be, monkeypatch)
    real_ids = live.thread_ids
    calls = []

    def growing(first=0):
        calls.append(1)
        return real_ids(first) + [NO_SUCH_TID + k for k in range(len(calls))]

    monkeypatch.setattr(live, "thread_ids", growing)
    with Parked(1):
        before = thread_affinities()
        plan = Plan(cpus=frozenset({CPU_A}))
        if strict:
            with pytest.raises(BindError, match="threads kept starting threads") as exc:
                numabind.bind_current(plan, strict=True, backend="syscall")
            assert exc.value.errno == errno.EAGAIN
            assert thread_affinities() == before          # rolled back
        else:
            report = numabind.bind_current(plan, strict=False, backend="syscall")
            assert any(f"after {_transaction.SETTLE_ROUNDS} more listings" in w for w in report.warnings)
            assert all(cpus == {CPU_A} for cpus in thread_affinities().values())
    assert len(calls) == 1 + _transaction.SETTLE_ROUNDS + 1    # the walk's list, the rounds, the last look


# --------------------------------------------------------------------------- item 4: weights rolled back
def _fake_weights(tmp_path, monkeypatch, be, node: int, weight: int):
    """A weighted_interleave directory under tmp_path with auto mode on; the backend writes there as the kernel
    does (a weight written switches auto off)."""
    from numabind._fs import FsReader
    from numabind.backends import WEIGHTS_DIR
    from numabind.topology import read_interleave_weights

    d = tmp_path / WEIGHTS_DIR
    d.mkdir(parents=True)
    (d / f"node{node}").write_text(f"{weight}\n")
    (d / "auto").write_text("true\n")
    monkeypatch.setattr(live, "interleave_weights", lambda: read_interleave_weights(FsReader(str(tmp_path))))

    def set_weights(weights, root="/"):
        for n, w in weights.items():
            (d / f"node{n}").write_text(f"{w}\n")
            (d / "auto").write_text("false\n")

    def set_auto(name, on, root="/"):
        (d / name).write_text("true\n" if on else "false\n")

    monkeypatch.setattr(be, "set_interleave_weights", set_weights)
    monkeypatch.setattr(be, "set_interleave_auto", set_auto)
    return d


def _refuse_memory(be, monkeypatch) -> None:
    """Every set_mempolicy refused (EPERM), the old policy still read: a strict bind fails after the weights."""
    def swap(policy, nodes, need_old=False):
        return MemPolicySwap(old=be.save_mempolicy(), set_error=BindError(errno.EPERM, "set_mempolicy", policy))

    def refuse(policy, nodes):
        raise BindError(errno.EPERM, "set_mempolicy", policy)

    monkeypatch.setattr(be, "swap_mempolicy", swap)
    monkeypatch.setattr(be, "set_mempolicy", refuse)


@pytest.mark.parametrize("backend", NATIVE)
def test_a_strict_rollback_of_set_weights_switches_auto_back_on_last(backend, tmp_path, monkeypatch):
    be, _ = get_backend(backend)
    d = _fake_weights(tmp_path, monkeypatch, be, N, 1)
    _refuse_memory(be, monkeypatch)
    plan = Plan(mem_policy="weighted-interleave", mem_nodes={N}, weights={N: 3})
    with pytest.raises(BindError, match="set_mempolicy"):
        numabind.bind_current(plan, strict=True, set_weights=True, backend=backend)
    assert (d / f"node{N}").read_text() == "1\n"
    assert (d / "auto").read_text() == "true\n"       # as it was: the old weights written first, auto then


# --------------------------------------------------------------------------- item 5: a rollback step that fails
@pytest.mark.parametrize("backend", NATIVE)
def test_a_rollback_step_that_fails_is_a_warning_and_a_note(backend, monkeypatch, caplog, apply_time):
    be, _ = get_backend(backend)
    raw_set_mempolicy("preferred", {N})

    def refuse_set(tid, cpus):
        raise BindError(errno.EPERM, "sched_setaffinity", f"thread {tid}")

    def refuse_restore(state):
        raise BindError(errno.EPERM, "set_mempolicy", "restoring")

    monkeypatch.setattr(be, "set_affinity", refuse_set)
    monkeypatch.setattr(be, "restore_mempolicy", refuse_restore)
    caplog.set_level(logging.WARNING, logger="numabind")
    with pytest.raises(PlanError, match="not online") as exc:
        numabind.bind_current(Plan(cpus={CPU_A, OUTSIDE_CPU}, mem_policy="bind", mem_nodes={N}), strict=True,
                              backend=backend)
    stayed = exc.value.not_undone
    assert any(f"thread {threading.get_native_id()} keeps CPUs {CPU_A} instead of" in s for s in stayed), stayed
    assert any("memory policy preferred" in s and "was not put back" in s for s in stayed), stayed
    if sys.version_info >= (3, 11):
        assert ([n for n in exc.value.__notes__ if n.startswith("rollback incomplete: ")]
                == [f"rollback incomplete: {s}" for s in stayed])
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert all(any(s in m for m in logged) for s in stayed), logged


def test_note_not_undone_on_an_exception_without_add_note():
    """Python 3.10 has no add_note: the lines are on ``not_undone`` and in ``__notes__`` all the same."""
    class Old(Exception):
        def __getattribute__(self, name):
            if name == "add_note":
                raise AttributeError(name)
            return super().__getattribute__(name)

    e = Old("x")
    _transaction.note_not_undone(e, ["a", "b", "a"])
    _transaction.note_not_undone(e, ["b"])
    assert e.not_undone == ("a", "b")
    assert e.__notes__ == ["rollback incomplete: a", "rollback incomplete: b"]


# --------------------------------------------------------------------------- items 6 and 8: cannot list
GETDENTS = r'''
import ctypes, errno, platform, struct

def deny_getdents(err=errno.EPERM):
    arch, nr = {"x86_64": (0xC000003E, 217), "aarch64": (0xC00000B7, 61)}[platform.machine()]
    code = b"".join(struct.pack("HBBI", *i) for i in (
        (0x20, 0, 0, 4), (0x15, 0, 3, arch), (0x20, 0, 0, 0), (0x15, 0, 1, nr),
        (0x06, 0, 0, 0x00050000 | err), (0x06, 0, 0, 0x7FFF0000)))
    buf = ctypes.create_string_buffer(code)
    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    prog = Prog(len(code) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(38, 1, 0, 0, 0) == 0
    assert libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0
'''


@pytest.mark.parametrize("backend", NATIVE + ("none",))
def test_an_unlistable_task_directory_is_a_bind_error_and_lenient_binds_the_caller(backend):
    """getdents64 refused (a seccomp profile): strict raises a BindError and changes nothing; lenient and
    partial bind the calling thread with a warning; the other thread keeps its CPUs."""
    out = run_json(GETDENTS + f'''
import json, os, threading, numabind, numabind._transaction, numabind.backends, logging
from numabind import Plan
stop = threading.Event()
other = threading.Thread(target=stop.wait, daemon=True)
other.start()
wide = sorted(os.sched_getaffinity(0))
numabind.backends.get_backend("{backend}")    # loaded before the filter: no import once listing is refused
deny_getdents()
plan = Plan(cpus={{{CPU_A}}}, mem_policy="bind", mem_nodes={{{N}}}) if "{backend}" != "none" else Plan(cpus={{{CPU_A}}})
try:
    numabind.bind_current(plan, strict=True, backend="{backend}")
    strict = None
except numabind.BindError as e:
    strict = [e.errno, e.syscall, str(e)]
after_strict = sorted(os.sched_getaffinity(0))
out = {{"strict": strict, "after_strict": after_strict, "wide": wide}}
for mode in (False, "partial"):
    r = numabind.bind_current(plan, strict=mode, backend="{backend}")
    out[str(mode)] = {{"warnings": list(r.warnings), "threads": [t.tid for t in r.threads],
                      "me": sorted(os.sched_getaffinity(0)), "other": sorted(os.sched_getaffinity(other.native_id))}}
    os.sched_setaffinity(0, wide)
print(json.dumps(out))
''')
    import errno as e

    assert out["strict"][0] == e.EPERM and out["strict"][1] == "getdents64"
    assert "cannot list /proc/self/task" in out["strict"][2] and "nothing was changed" in out["strict"][2]
    assert out["after_strict"] == out["wide"]
    for mode in ("False", "partial"):
        got = out[mode]
        assert any("cannot list /proc/self/task" in w and "only the calling thread was bound" in w
                   for w in got["warnings"]), got
        assert got["me"] == [CPU_A] and got["other"] == out["wide"] and len(got["threads"]) == 1


def test_run_lenient_runs_the_command_when_the_threads_cannot_be_listed(tmp_path):
    """numabind run --lenient: a warning, then the command (no traceback); --strict: exit 1, not run."""
    out = run_json(GETDENTS + f'''
import json, logging, os, threading
import numabind.bind, numabind._transaction, numabind.cli, numabind.cli.commands   # no import once refused
from numabind.cli import main
results = {{}}
for flag in ("--lenient", "--strict"):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(w, 2); os.dup2(w, 1)
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True).start()   # two threads: the list is read
        deny_getdents()
        try:
            code = main(["run", flag, "--physcpubind={CPU_A}", "--", "/bin/echo", "ran"])
        except SystemExit as e:
            code = e.code
        os._exit(code if isinstance(code, int) else 1)
    os.close(w)
    chunks = []
    while True:
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    text = b"".join(chunks).decode()
    _, status = os.waitpid(pid, 0)
    results[flag] = [os.waitstatus_to_exitcode(status), text]
print(json.dumps(results))
''')
    code, text = out["--lenient"]
    assert code == 0 and "ran" in text and "Traceback" not in text, text
    code, text = out["--strict"]
    assert code == 1 and "ran" not in text and "Traceback" not in text and "/proc/self/task" in text, text


def test_a_listing_without_the_caller_is_one_that_cannot_be_read(monkeypatch):
    """The Python listing (no native core) that lacks the caller: a BindError, never a guess."""
    monkeypatch.setattr(live, "_native", lambda: None)
    real = os.listdir
    monkeypatch.setattr(os, "listdir", lambda p: ["123456", "123457"] if p == "/proc/self/task" else real(p))
    with pytest.raises(BindError, match="does not list the calling thread") as exc:
        live.thread_ids()
    assert exc.value.errno == errno.ESRCH


@pytest.mark.skipif(os.geteuid() != 0, reason="a PID namespace needs root (CAP_SYS_ADMIN)")
def test_in_a_pid_namespace_with_a_foreign_proc_only_the_caller_is_bound_with_a_warning():
    """unshare(CLONE_NEWPID) then fork: the child is pid 1 in its namespace while /proc is the parent's, whose
    /proc/self/task lists ids of the outer namespace. Strict raises; lenient binds the caller and says why."""
    out = run_json(f'''
import ctypes, json, os, threading
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x20000000) != 0:
    print(json.dumps({{"skip": os.strerror(ctypes.get_errno())}}))
    raise SystemExit(0)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    import numabind
    from numabind import Plan
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    wide = sorted(os.sched_getaffinity(0))
    plan = Plan(cpus={{{CPU_A}}})
    res = {{"pid": os.getpid(), "wide": wide}}
    for backend in ("libnuma", "syscall"):
        try:
            numabind.bind_current(plan, strict=True, backend=backend)
            res[backend + "-strict"] = None
        except numabind.BindError as e:
            res[backend + "-strict"] = [e.errno, str(e)]
        rep = numabind.bind_current(plan, strict=False, backend=backend)
        res[backend] = [list(rep.warnings), len(rep.threads), sorted(os.sched_getaffinity(0)),
                        sorted(os.sched_getaffinity(other.native_id))]
        os.sched_setaffinity(0, wide)
    os.write(w, json.dumps(res).encode())
    os._exit(0)
os.close(w)
text = os.read(r, 1 << 20).decode()
os.waitpid(pid, 0)
print(text)
''')
    if "skip" in out:
        pytest.skip(f"unshare(CLONE_NEWPID) refused here: {out['skip']}")
    assert out["pid"] == 1
    for backend in NATIVE:
        assert out[backend + "-strict"][0] == errno.ESRCH
        assert "does not list the calling thread" in out[backend + "-strict"][1]
        warnings, count, me, other = out[backend]
        assert any("does not list the calling thread" in w for w in warnings), warnings
        assert count == 1 and me == [CPU_A] and other == out["wide"]


# --------------------------------------------------------------------------- item 7: a signal's exception
class Interrupt(BaseException):
    pass


@pytest.mark.parametrize("backend", NATIVE)
@pytest.mark.parametrize("strict", [True, False])
def test_an_exception_right_after_the_native_call_rolls_the_bind_back(backend, strict, monkeypatch, two_cpus):
    """What a signal handler raises the moment the native call returns (before apply_all sees its result):
    the exception escapes, and the CPUs of every thread and the memory policy are as before, in any mode."""
    a, b = two_cpus
    be, _ = get_backend(backend)
    real = be._bind

    def then_raise(*args):
        real(*args)
        raise Interrupt

    raw_set_mempolicy("preferred", {N})
    with Parked(2):
        before = thread_affinities()
        monkeypatch.setattr(be, "_bind", then_raise)
        with pytest.raises(Interrupt):
            numabind.bind_current(Plan(cpus={b}, mem_policy="bind", mem_nodes={N}), strict=strict,
                                  threads="all", backend=backend)
        assert thread_affinities() == before
        assert raw_mempolicy() == (MPOL["preferred"], frozenset({N}))


@pytest.mark.parametrize("where", ["bind._clean_report", "backends.native._clean"])
def test_an_exception_later_in_the_fast_path_rolls_the_bind_back(where, monkeypatch, two_cpus):
    a, b = two_cpus
    import importlib

    module, _, where = f"numabind.{where}".rpartition(".")
    bind_mod = importlib.import_module(module)
    real = getattr(bind_mod, where)

    def then_raise(*args, **kw):
        real(*args, **kw)
        raise Interrupt

    raw_set_mempolicy("preferred", {N})
    with Parked(1):
        before = thread_affinities()
        monkeypatch.setattr(bind_mod, where, then_raise)
        with pytest.raises(Interrupt):
            numabind.bind_current(Plan(cpus={b}, mem_policy="bind", mem_nodes={N}), strict=True, threads="all")
        assert thread_affinities() == before
        assert raw_mempolicy() == (MPOL["preferred"], frozenset({N}))


# --------------------------------------------------------------------------- item 9: two binds at once
@pytest.mark.parametrize("backend", NATIVE)
def test_a_strict_rollback_never_undoes_another_threads_bind(backend, monkeypatch, two_cpus, apply_time):
    """The main thread's strict bind fails and rolls back while another thread binds cleanly: binds are one at
    a time, so the other thread's bind comes after the rollback and stays. (The failing bind waits, while it
    explains its failure, until the other bind is done or a budget of polls ran out.)"""
    a, b = two_cpus
    done = threading.Event()
    asked = threading.Event()
    reports = []

    def other():
        asked.set()
        reports.append(numabind.bind_current(Plan(cpus={b}), strict=True, threads="all", backend=backend))
        done.set()

    real = _transaction.narrow_cpus

    def explain_slowly(*args):
        if not asked.is_set():
            worker.start()
        asked.wait(timeout=30)
        for _ in range(200):         # the other bind gets every chance to run meanwhile
            if done.wait(0.005):
                break
        return real(*args)

    worker = threading.Thread(target=other, daemon=True)
    monkeypatch.setattr(_transaction, "narrow_cpus", explain_slowly)
    with Parked(1):
        with pytest.raises(PlanError, match="not online"):
            numabind.bind_current(Plan(cpus={a, OUTSIDE_CPU}), strict=True, threads="all", backend=backend)
        worker.join(timeout=60)
        assert reports and reports[0].ok
        wrong = {tid: cpus for tid, cpus in thread_affinities().items() if cpus != {b}}
        assert not wrong, wrong


def test_a_forked_child_binds_while_a_thread_of_its_parent_is_binding(monkeypatch, all_cpus, apply_time):
    """The bind lock is free in a child forked while another thread holds it (that thread is not there)."""
    inside, leave = threading.Event(), threading.Event()
    real = _transaction.narrow_cpus

    def hold(*args):
        inside.set()
        leave.wait(timeout=60)
        return real(*args)

    monkeypatch.setattr(_transaction, "narrow_cpus", hold)
    t = threading.Thread(target=lambda: pytest.raises(
        PlanError, numabind.bind_current, Plan(cpus={CPU_A, OUTSIDE_CPU}), strict=True), daemon=True)
    t.start()
    try:
        assert inside.wait(timeout=30)
        pid = os.fork()
        if pid == 0:
            import signal

            signal.alarm(30)     # a deadlock would end the child here
            try:
                ok = numabind.bind_current(Plan(cpus={CPU_A}), strict=True).ok
            except BaseException:
                ok = False
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        leave.set()
        t.join(timeout=60)


# --------------------------------------------------------------------------- the memory policy read back
@pytest.mark.parametrize("backend", NATIVE)
@pytest.mark.parametrize("strict", [True, False])
def test_a_policy_set_but_unreadable_is_a_strict_failure(backend, strict, monkeypatch):
    be, _ = get_backend(backend)
    stepwise(be, monkeypatch)
    real = be.swap_mempolicy

    def unreadable_after(policy, nodes, need_old=False):
        out = real(policy, nodes, need_old)
        out.now, out.now_error = None, BindError(errno.EPERM, "get_mempolicy", "calling thread")
        return out

    monkeypatch.setattr(be, "swap_mempolicy", unreadable_after)
    raw_set_mempolicy("preferred", {N})
    plan = Plan(cpus={CPU_A}, mem_policy="bind", mem_nodes={N})
    if strict:
        with pytest.raises(BindError) as exc:
            numabind.bind_current(plan, strict=True, backend=backend)
        assert (exc.value.errno, exc.value.syscall) == (errno.EPERM, "get_mempolicy")
        assert "was set but cannot be read back" in str(exc.value)
        assert raw_mempolicy() == (MPOL["preferred"], frozenset({N}))     # rolled back
    else:
        report = numabind.bind_current(plan, strict=False, backend=backend)
        assert any("cannot verify the memory policy" in w for w in report.warnings)
        assert raw_mempolicy() == (MPOL["bind"], frozenset({N}))


# --------------------------------------------------------------------------- BindReport.from_dict's caps
def _report(**change):
    data = numabind.bind_current(Plan(cpus=frozenset(os.sched_getaffinity(0)))).to_dict()
    data.update(change)
    return data


def test_from_dict_caps_the_threads_and_every_string_and_list():
    thread = {"tid": 1, "name": "x", "before": "0", "after": "0", "status": "bound", "detail": ""}
    assert BindReport.from_dict(_report(threads=[thread] * 3)).threads[0].name == "x"
    with pytest.raises(ValueError, match=f"threads has {MAX_REPORT_THREADS + 1} entries, more than the cap"):
        BindReport.from_dict(_report(threads=[thread] * (MAX_REPORT_THREADS + 1)))
    with pytest.raises(ValueError, match=f"name has {MAX_REPORT_NAME + 1} characters, more than the cap"):
        BindReport.from_dict(_report(threads=[dict(thread, name="n" * (MAX_REPORT_NAME + 1))]))
    with pytest.raises(ValueError, match="detail has .* more than the cap"):
        BindReport.from_dict(_report(threads=[dict(thread, detail="d" * (1 << 17))]))
    with pytest.raises(ValueError, match="thread before has .* more than the cap"):
        BindReport.from_dict(_report(threads=[dict(thread, before="0," * (1 << 16))]))
    with pytest.raises(ValueError, match=f"warnings has {MAX_REPORT_LINES + 1} entries, more than the cap"):
        BindReport.from_dict(_report(warnings=["w"] * (MAX_REPORT_LINES + 1)))
    with pytest.raises(ValueError, match="an entry of notes has .* more than the cap"):
        BindReport.from_dict(_report(notes=["n" * (1 << 17)]))
    with pytest.raises(ValueError, match="backend has .* more than the cap"):
        BindReport.from_dict(_report(backend="b" * (MAX_REPORT_NAME + 1)))
    with pytest.raises(ValueError, match="requested has .* more than the cap"):
        BindReport.from_dict(_report(requested="v1;" + "x" * (1 << 17)))
