"""Other processes through psutil (issue 28, DESIGN.md "the machine": ``_proc``, other processes, through psutil).

:mod:`numabind._proc` reads whether a process exists, its threads, its children and its environment through
psutil, imported inside the functions (never when the module is: a child bound at birth loads it), with
``psutil.PROCFS_PATH`` at ``/proc`` below :func:`numabind.live.reader`'s root for the length of each call and
put back afterwards. The start time stays a read of ``/proc/PID/stat`` in clock ticks (what processes record
of themselves), each thread's name and CPUs a read of its ``status``.

What psutil needs of a replayed ``/proc`` is written by :func:`tests.fake.procfs.fake_procfs` (its module says
what that is); a fake machine that wants other processes read must write it too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil
import pytest

from numabind import _proc, live
from numabind._fs import FsReader
from tests.fakesys import fake_procfs
from tests.kernel import ROOT, child_env, run_json, wait_zombie
from tests.run_path import loaded_by


# ----------------------------------------------------------------------------- a replayed /proc
@pytest.fixture
def replayed(tmp_path, monkeypatch):
    """A replayed machine (the reader ``NUMABIND_FSROOT`` gives) with a process tree: 1 -> 4242 (two threads)
    -> 4243 -> 4244, and 1 -> 4300."""
    fake_procfs(tmp_path, 1, 0, {1: ("init", "0-1")}, start=1)
    fake_procfs(tmp_path, 4242, 1, {4242: ("fake main", "0-1"), 4250: ("fake worker", "1")},
                environ=b"A=1\0NUMABIND_X=yes\xff\0B=2\0")
    fake_procfs(tmp_path, 4243, 4242, {4243: ("fake child", "0")}, start=1001)
    fake_procfs(tmp_path, 4244, 4243, {4244: ("fake grandchild", "0")}, start=1002)
    fake_procfs(tmp_path, 4300, 1, {4300: ("other", "0")})
    monkeypatch.setattr(live, "_reader", FsReader(str(tmp_path)))
    return tmp_path


def test_a_replayed_root_is_read_by_psutil_below_it(replayed):
    assert _proc.process_exists(4242) and _proc.process_exists(4244)
    assert not _proc.process_exists(4299)                      # no such directory there
    tasks = _proc.process_tasks(4242)
    assert tasks is not None and tasks.pid == 4242
    assert tasks.names == {4242: "fake main", 4250: "fake worker"}
    assert tasks.cpus == {4242: frozenset({0, 1}), 4250: frozenset({1})}
    assert _proc.process_tasks(4299) is None
    assert _proc.process_children(4242) == [4243] and _proc.process_children(4244) == []
    assert _proc.process_children(1) == [4242, 4300]
    tree = _proc.process_tree(1)
    assert sorted(tree) == [1, 4242, 4243, 4244, 4300] and tree[0] == 1
    assert tree.index(4242) < tree.index(4243) < tree.index(4244)     # parents before children
    assert _proc.process_tree(4242) == [4242, 4243, 4244]
    assert _proc.process_tree(4299) == [4299]
    assert _proc.environ_value(4242, "NUMABIND_X") == "yes\ufffd"      # not UTF-8: U+FFFD, as before
    assert _proc.environ_value(4242, "B") == "2" and _proc.environ_value(4242, "C") is None
    assert _proc.environ_value(4243, "A") is None                       # an empty environment
    assert _proc.start_time(4243) == 1001                               # still in clock ticks
    assert psutil.PROCFS_PATH == "/proc"                                # put back after every call


def test_a_users_procfs_setting_is_put_back(replayed, monkeypatch):
    """A program that points psutil elsewhere itself keeps its setting, also when psutil raises."""
    monkeypatch.setattr(psutil, "PROCFS_PATH", "/host/proc")
    assert _proc.process_children(4242) == [4243]
    assert psutil.PROCFS_PATH == "/host/proc"
    assert not _proc.process_exists(4299) and _proc.process_tasks(4299) is None   # NoSuchProcess inside
    assert psutil.PROCFS_PATH == "/host/proc"


def test_a_replayed_environ_is_read_only_when_it_is_a_small_regular_file(replayed, monkeypatch):
    env = replayed / "proc" / "4243" / "environ"
    env.unlink()
    os.mkfifo(env)                                      # psutil's read would block on it
    assert _proc.environ_value(4243, "A") is None
    env.unlink()
    env.symlink_to(replayed / "proc" / "4242" / "environ")
    assert _proc.environ_value(4243, "A") is None
    env.unlink()
    assert _proc.environ_value(4243, "A") is None       # none at all
    monkeypatch.setattr(_proc, "ENVIRON_MAX", 8)
    assert _proc.environ_value(4242, "A") is None       # over the cap: not read


def test_each_function_reads_through_psutil(replayed, monkeypatch):
    """The facts psutil has come from psutil.Process, pointed at the replayed root, not from hand reads."""
    seen: list[tuple[int, str]] = []

    class Recording(psutil.Process):
        def __init__(self, pid=None):
            seen.append((pid, psutil.PROCFS_PATH))
            super().__init__(pid)

    monkeypatch.setattr(psutil, "Process", Recording)
    procfs = str(replayed / "proc")
    for call in (lambda: _proc.process_exists(4242), lambda: _proc.process_tasks(4242),
                 lambda: _proc.process_children(4242), lambda: _proc.process_tree(4242),
                 lambda: _proc.environ_value(4242, "A")):
        seen.clear()
        call()
        assert (4242, procfs) in seen


# ----------------------------------------------------------------------------- a real second process
CHILD = r"""
import json, os, subprocess, sys, threading
cpu = int(sys.argv[1])
done, pinned = threading.Event(), threading.Event()
tids = {}
def idle():
    tids["idle"] = threading.get_native_id()
    done.wait()
def pin():
    os.sched_setaffinity(0, {cpu})            # 0: the calling thread
    me = threading.get_native_id()
    with open(f"/proc/self/task/{me}/comm", "w") as f:
        f.write("nb-pinned")
    tids["pinned"] = me
    pinned.set()
    done.wait()
threads = [threading.Thread(target=idle), threading.Thread(target=pin)]
for t in threads:
    t.start()
assert pinned.wait(60)
g = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
with open("/proc/self/stat") as f:
    start = int(f.read().rsplit(")", 1)[1].split()[19])
print(json.dumps({"tids": tids, "grandchild": g.pid, "start": start}), flush=True)
sys.stdin.read()
g.stdin.close()
g.wait(60)
done.set()
for t in threads:
    t.join(60)
"""


def test_a_real_process_read_through_psutil():
    cpus = sorted(os.sched_getaffinity(0))
    cpu = cpus[-1]
    env = {**child_env(), "NUMABIND_PSUTIL_TEST": "a=b c"}
    with subprocess.Popen([sys.executable, "-c", CHILD, str(cpu)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          env=env, cwd=ROOT) as child:
        try:
            line = child.stdout.readline()
            assert line, "the child did not start"
            facts = json.loads(line)
            pid, grandchild, pinned = child.pid, facts["grandchild"], facts["tids"]["pinned"]
            assert _proc.process_exists(pid) and _proc.process_exists(grandchild)
            assert _proc.start_time(pid) == facts["start"]             # what the process reads of itself
            tasks = _proc.process_tasks(pid)
            assert tasks is not None and tasks.pid == pid
            assert set(tasks.cpus) == {pid, pinned, facts["tids"]["idle"]}
            assert tasks.names[pinned] == "nb-pinned"
            assert tasks.cpus[pinned] == {cpu} and tasks.cpus[pid] == set(cpus)
            assert _proc.process_children(pid) == [grandchild]
            assert pid in _proc.process_children(os.getpid())
            assert _proc.process_tree(pid) == [pid, grandchild]
            tree = _proc.process_tree(os.getpid())
            assert tree[0] == os.getpid() and tree.index(pid) < tree.index(grandchild)   # parents first
            assert _proc.environ_value(pid, "NUMABIND_PSUTIL_TEST") == "a=b c"
            assert _proc.environ_value(pid, "NUMABIND_PSUTIL_TEST_MISSING") is None
        finally:
            child.stdin.close()
        assert child.wait(60) == 0
    assert not _proc.process_exists(pid) and _proc.start_time(pid) == 0
    assert _proc.process_tasks(pid) is None and _proc.process_children(pid) == []
    assert _proc.process_tree(pid) == [pid] and _proc.environ_value(pid, "NUMABIND_PSUTIL_TEST") is None
    assert psutil.PROCFS_PATH == "/proc"


def test_a_zombie_exists_without_a_start_time_or_environment():
    p = subprocess.Popen([sys.executable, "-c", "pass"], env=child_env())
    try:
        wait_zombie(p.pid)
        assert _proc.process_exists(p.pid)                   # not reaped yet
        assert _proc.start_time(p.pid) == 0
        assert _proc.environ_value(p.pid, "PATH") is None
    finally:
        p.wait()
    assert not _proc.process_exists(p.pid)


def test_importing_the_module_does_not_import_psutil():
    """A child bound at birth loads numabind._proc: psutil comes only with the first read of another process."""
    loaded = loaded_by("import os, numabind, numabind._proc as p\np.start_time(os.getpid())\np.node_pages()")
    assert "numabind._proc" in loaded and "psutil" not in loaded
    assert "psutil" in loaded_by("import os, numabind._proc as p\np.process_exists(os.getpid())")


def test_a_child_forked_while_another_thread_reads_through_psutil_can_read():
    """The lock that serialises psutil's PROCFS_PATH is made anew in a forked child: a child forked while
    another thread of the parent held it would otherwise wait forever on its first read of a process."""
    out = run_json("""
        import json, os, select, signal, threading
        from numabind import _proc
        held, release = threading.Event(), threading.Event()
        def holder():
            with _proc._PSUTIL_LOCK:
                held.set()
                release.wait(60)
        t = threading.Thread(target=holder, daemon=True)
        t.start()
        assert held.wait(60)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, b"1" if _proc.process_exists(os.getpid()) else b"0")
            os._exit(0)
        os.close(w)
        ready, _, _ = select.select([r], [], [], 30)
        answer = os.read(r, 1).decode() if ready else None
        if answer is None:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        release.set()
        print(json.dumps({"answer": answer}))
    """)
    assert out["answer"] == "1", "the forked child did not read within 30 s (the lock it inherited was held)"
