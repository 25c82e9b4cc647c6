"""numabind._native called directly: thin wrappers returning >= 0 or -errno.

Both families are checked: ``nb_sys_*`` (raw ``syscall()``) and ``nb_numa_*``
(the same calls through the dlopen'd libnuma.so.1). The host has one NUMA node
MEM_NODE, CPU_A/CPU_B and the missing ids come from tests/kernel.py (derived at run time). Every test
touches the kernel and puts back what it changed (memory policy, affinity of the threads it made).
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import threading

import pytest

from numabind import _native
from tests.kernel import CPU_A, CPU_B, MEM_NODE, MISSING_NODE, NO_SUCH_TID, OUTSIDE_CPU, Parked, run_json, run_python

pytestmark = pytest.mark.kernel

ffi, lib = _native.ffi, _native.lib
PREFIXES = ("sys", "numa")
MPOL_DEFAULT, MPOL_PREFERRED, MPOL_BIND, MPOL_INTERLEAVE = 0, 1, 2, 3
MPOL_F_NODE, MPOL_F_ADDR = 1, 2
MPOL_MF_MOVE = 2
PAGE = mmap.PAGESIZE
MAXNODE = 65          # one 64-bit word of nodes (the kernel reads maxnode - 1 bits)
N = MEM_NODE
MISSING = MISSING_NODE if MISSING_NODE < 64 else 63      # a node this machine lacks, in one mask word
OUTSIDE = OUTSIDE_CPU if OUTSIDE_CPU < 64 else 63


def fn(prefix: str, name: str):
    return getattr(lib, f"nb_{prefix}_{name}")


def nodemask(*nodes: int):
    return ffi.new("unsigned long[]", [sum(1 << n for n in nodes)])


def cpumask(*cpus: int):
    return ffi.new("unsigned long[]", [sum(1 << c for c in cpus)])


def bits(mask, words: int = 1) -> set[int]:
    return {w * 64 + b for w in range(words) for b in range(64) if mask[w] >> b & 1}


def get_policy(prefix: str = "sys") -> tuple[int, set[int]]:
    mode = ffi.new("int *")
    mask = ffi.new("unsigned long[]", 1)
    rc = fn(prefix, "get_mempolicy")(mode, mask, MAXNODE, ffi.NULL, 0)
    assert rc == 0, rc
    return mode[0], bits(mask)


@pytest.fixture(autouse=True)
def libnuma_loaded_and_policy_restored():
    from tests.kernel import mempolicy_refusal

    if mempolicy_refusal() is not None:
        pytest.skip(mempolicy_refusal())
    err = ffi.new("char[]", 256)
    assert lib.nb_numa_load(b"libnuma.so.1", err, 256) == 0, ffi.string(err)
    mode = ffi.new("int *")
    mask = ffi.new("unsigned long[]", 1)
    assert lib.nb_sys_get_mempolicy(mode, mask, MAXNODE, ffi.NULL, 0) == 0
    saved = (mode[0], mask[0])
    yield
    rc = lib.nb_sys_set_mempolicy(saved[0], ffi.new("unsigned long[]", [saved[1]]) if saved[1] else ffi.NULL,
                                  MAXNODE if saved[1] else 0)
    assert rc == 0


@pytest.fixture
def region():
    """Two anonymous pages: the first touched under a bind to MEM_NODE (so it is there), the second never."""
    mm = mmap.mmap(-1, 2 * PAGE)
    assert lib.nb_sys_set_mempolicy(MPOL_BIND, nodemask(N), MAXNODE) == 0
    mm[0:1] = b"x"
    assert lib.nb_sys_set_mempolicy(MPOL_DEFAULT, ffi.NULL, 0) == 0
    buf = ffi.from_buffer(mm)
    addr = int(ffi.cast("uintptr_t", buf))
    try:
        yield addr
    finally:
        del buf
        mm.close()


# --------------------------------------------------------------------------- memory policy
@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("mode", (MPOL_BIND, MPOL_PREFERRED, MPOL_INTERLEAVE))
def test_set_and_get_mempolicy_raw(prefix, mode):
    assert fn(prefix, "set_mempolicy")(mode, nodemask(N), MAXNODE) == 0
    assert get_policy(prefix) == (mode, {N})
    assert get_policy("sys" if prefix == "numa" else "numa") == (mode, {N})
    assert fn(prefix, "set_mempolicy")(MPOL_DEFAULT, ffi.NULL, 0) == 0
    assert get_policy(prefix) == (MPOL_DEFAULT, set())


@pytest.mark.parametrize("prefix", PREFIXES)
def test_set_mempolicy_on_a_missing_node_is_minus_einval(prefix):
    assert fn(prefix, "set_mempolicy")(MPOL_INTERLEAVE, nodemask(N), MAXNODE) == 0
    assert fn(prefix, "set_mempolicy")(MPOL_BIND, nodemask(MISSING), MAXNODE) == -errno.EINVAL
    assert get_policy(prefix) == (MPOL_INTERLEAVE, {N})     # unchanged by the refused call


@pytest.mark.parametrize("prefix", PREFIXES)
def test_set_mempolicy_with_an_unknown_mode_is_minus_einval(prefix):
    assert fn(prefix, "set_mempolicy")(99, ffi.NULL, 0) == -errno.EINVAL


@pytest.mark.parametrize("prefix", PREFIXES)
def test_get_mempolicy_with_a_mask_smaller_than_the_nodes_is_minus_einval(prefix):
    mode = ffi.new("int *")
    mask = ffi.new("unsigned long[]", 1)
    assert fn(prefix, "get_mempolicy")(mode, mask, 0, ffi.NULL, 0) == -errno.EINVAL


@pytest.mark.parametrize("prefix", PREFIXES)
def test_get_mempolicy_node_of_a_touched_page(prefix, region):
    mode = ffi.new("int *", -1)
    rc = fn(prefix, "get_mempolicy")(mode, ffi.NULL, 0, ffi.cast("void *", region), MPOL_F_NODE | MPOL_F_ADDR)
    assert rc == 0
    assert mode[0] == N


# --------------------------------------------------------------------------- page placement
@pytest.mark.parametrize("prefix", PREFIXES)
def test_move_pages_query_touched_page_is_on_its_node(prefix, region):
    pages = ffi.new("void *[]", [ffi.cast("void *", region), ffi.cast("void *", region + PAGE)])
    status = ffi.new("int[]", [99, 99])
    assert fn(prefix, "move_pages")(0, 2, pages, ffi.NULL, status, 0) == 0
    assert list(status) == [N, -errno.ENOENT]     # the untouched page has no node yet


@pytest.mark.parametrize("prefix", PREFIXES)
def test_move_pages_to_its_node_and_to_a_missing_node(prefix, region):
    pages = ffi.new("void *[]", [ffi.cast("void *", region)])
    status = ffi.new("int[]", [99])
    assert fn(prefix, "move_pages")(0, 1, pages, ffi.new("int[]", [N]), status, MPOL_MF_MOVE) == 0
    assert list(status) == [N]
    assert fn(prefix, "move_pages")(0, 1, pages, ffi.new("int[]", [MISSING]), status, MPOL_MF_MOVE) == -errno.ENODEV


@pytest.mark.parametrize("prefix", PREFIXES)
def test_migrate_pages(prefix):
    migrate = fn(prefix, "migrate_pages")
    # a node onto itself: nothing to move, nothing left unmoved
    assert migrate(0, MAXNODE, nodemask(MEM_NODE), nodemask(MEM_NODE)) == 0
    assert migrate(os.getpid(), MAXNODE, nodemask(MEM_NODE), nodemask(MEM_NODE)) == 0
    # node 1 does not exist: EINVAL as root; without CAP_SYS_NICE the cpuset check answers EPERM first
    assert migrate(0, MAXNODE, nodemask(N), nodemask(MISSING)) in (-errno.EINVAL, -errno.EPERM)
    assert migrate(NO_SUCH_TID, MAXNODE, nodemask(N), nodemask(N)) == -errno.ESRCH


# --------------------------------------------------------------------------- affinity
def test_sched_getaffinity_raw_returns_bytes_written():
    mask = ffi.new("unsigned long[]", 1)
    rc = lib.nb_sys_sched_getaffinity(0, 8, mask)
    assert rc > 0 and rc % 8 == 0
    assert bits(mask) == os.sched_getaffinity(0)


@pytest.mark.parametrize("prefix", PREFIXES)
def test_sched_affinity_of_another_thread(prefix):
    setaff, getaff = fn(prefix, "sched_setaffinity"), fn(prefix, "sched_getaffinity")
    size = 8 if prefix == "sys" else 64       # bytes for the raw call, bits for libnuma's bitmask
    with Parked(1) as parked:
        tid = parked.tids[0]
        before = os.sched_getaffinity(tid)
        mask = ffi.new("unsigned long[]", 1)
        assert getaff(tid, size, mask) >= 0
        assert bits(mask) == before
        assert setaff(tid, size, cpumask(CPU_B)) == 0
        assert os.sched_getaffinity(tid) == {CPU_B}
        assert os.sched_getaffinity(0) == before       # only that thread changed
        assert getaff(tid, size, mask) >= 0
        assert bits(mask) == {CPU_B}
    assert parked.seen == {tid: frozenset({CPU_B})}


@pytest.mark.parametrize("prefix", PREFIXES)
def test_sched_affinity_errors_are_negative_errno(prefix):
    setaff, getaff = fn(prefix, "sched_setaffinity"), fn(prefix, "sched_getaffinity")
    size = 8 if prefix == "sys" else 64
    mask = ffi.new("unsigned long[]", 1)
    before = os.sched_getaffinity(0)
    assert setaff(0, size, cpumask(OUTSIDE)) == -errno.EINVAL      # no such CPU
    assert os.sched_getaffinity(0) == before
    assert getaff(NO_SUCH_TID, size, mask) == -errno.ESRCH
    assert setaff(NO_SUCH_TID, size, cpumask(0)) == -errno.ESRCH


def test_sched_getaffinity_with_a_short_buffer_is_minus_einval():
    mask = ffi.new("unsigned long[]", 1)
    assert lib.nb_sys_sched_getaffinity(0, 4, mask) == -errno.EINVAL


# --------------------------------------------------------------------------- libnuma loading
def test_libnuma_facts():
    assert lib.nb_numa_available() >= 0


def test_libnuma_load_failure_and_calls_before_loading():
    cp = run_python('''
from numabind import _native
ffi, lib = _native.ffi, _native.lib
err = ffi.new("char[]", 256)
assert lib.nb_numa_available() == -1, "-1 before libnuma is loaded"
assert lib.nb_numa_set_mempolicy(0, ffi.NULL, 0) == -38, "ENOSYS before libnuma is loaded"
assert lib.nb_numa_sched_getaffinity(0, 64, ffi.new("unsigned long[]", 1)) == -38
assert lib.nb_numa_load(b"libdoesnotexist.so.1", err, 256) == -1
assert b"libdoesnotexist.so.1" in ffi.string(err), ffi.string(err)
assert lib.nb_numa_available() == -1 and lib.nb_numa_set_mempolicy(0, ffi.NULL, 0) == -38
assert lib.nb_numa_load(b"libnuma.so.1", err, 256) == 0
assert lib.nb_numa_available() >= 0
assert lib.nb_numa_set_mempolicy(0, ffi.NULL, 0) == 0
print("ok")
''')
    assert cp.returncode == 0 and cp.stdout.strip() == "ok", cp.stderr[-2000:]


def test_libnuma_without_a_needed_symbol_is_refused():
    """A library that loads but is not libnuma (libc has no numa_available)."""
    cp = run_python('''
from numabind import _native
ffi, lib = _native.ffi, _native.lib
err = ffi.new("char[]", 256)
assert lib.nb_numa_load(b"libc.so.6", err, 256) == -1
msg = ffi.string(err).decode()
assert "lacks symbol" in msg and "libc.so.6" in msg, msg
assert lib.nb_numa_available() == -1 and lib.nb_numa_set_mempolicy(0, ffi.NULL, 0) == -38
print("ok")
''')
    assert cp.returncode == 0 and cp.stdout.strip() == "ok", cp.stderr[-2000:]


# --------------------------------------------------------------------------- the fast path (one call for many threads)
def _walk(prefix: str, tids, mask_ids, flags: int = 0, words: int = 16):
    n = len(tids)
    ctids = ffi.new("int[]", tids)
    mask = ffi.NULL if mask_ids is None else ffi.new("unsigned long[]", [sum(1 << c for c in mask_ids if c // 64 == w)
                                                                          for w in range(words)])
    before = ffi.new("unsigned long[]", n * words)
    after = ffi.new("unsigned long[]", n * words)
    status = ffi.new("int[]", n)
    done = fn(prefix, "affinity_many")(ctids, n, mask, words, flags, before, after, status)
    return done, list(status), [bits(before + i * words, words) for i in range(n)], \
        [bits(after + i * words, words) for i in range(n)]


def test_task_list_lists_every_thread_with_the_first_first():
    with Parked(3) as parked:
        me = threading.get_native_id()
        listed = {int(t) for t in os.listdir("/proc/self/task")}
        buf = ffi.new("int[]", 64)
        n = lib.nb_task_list(me, buf, 64)
        assert n == len(listed) and set(buf[0:n]) == listed and buf[0] == me
        assert set(parked.tids) <= set(buf[0:n])
        small = ffi.new("int[]", 1)
        assert lib.nb_task_list(me, small, 1) == n   # too small: says how many there are
        assert small[0] == me


def test_task_list_in_a_forked_child_lists_the_child():
    """The cached /proc/self/task descriptor is the parent's in a fork child: it must list the child's threads."""
    buf = ffi.new("int[]", 64)
    assert lib.nb_task_list(0, buf, 64) >= 1        # cache the parent's descriptor
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        n = lib.nb_task_list(0, buf, 64)
        os.write(w, f"{n} {buf[0]} {os.getpid()}".encode())
        os._exit(0)
    os.close(w)
    out = os.read(r, 100).decode().split()
    os.close(r)
    os.waitpid(pid, 0)
    assert out[0] == "1" and out[1] == out[2] == str(pid), out



def test_task_list_in_a_child_forked_without_atfork_handlers_lists_the_child():
    """glibc's _Fork runs no atfork handler: the child keeps the parent's cached descriptor, whose listing
    lacks the child's thread, so it is reopened (binding the parent's threads from the child would be wrong).

    In a fresh interpreter whose only other threads are the test's two, each asleep on its event before the
    fork: a child of _Fork may only rely on what no other thread held at the fork (glibc's own locks, the
    allocator's), and a pytest process has threads of its own. The parent waits for the child's line with a
    deadline, so a child that never answers fails the test instead of hanging the run."""
    import ctypes

    if not hasattr(ctypes.CDLL(None), "_Fork"):
        pytest.skip("this C library has no _Fork (glibc 2.34 and newer have it)")
    out = run_json("""
        import ctypes, json, os, select, signal, threading, time
        from numabind import _native
        ffi, lib = _native.ffi, _native.lib
        # PyDLL: the GIL stays held across _Fork, so no other thread of this process holds it at the fork; the
        # child then resets the interpreter's own state (the GIL's lock, threading) as os.fork does. That is
        # Python's bookkeeping only: no pthread_atfork handler runs, and numabind's C core must still notice
        # the new process.
        libc = ctypes.PyDLL(None, use_errno=True)
        release = threading.Event()
        threads = [threading.Thread(target=release.wait, daemon=True) for _ in range(2)]
        for t in threads:
            t.start()
        tids = [t.native_id for t in threads]
        deadline = time.monotonic() + 30
        def asleep(tid):
            with open(f"/proc/self/task/{tid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "S"
        while not all(asleep(t) for t in tids):     # both blocked on their event, holding nothing
            assert time.monotonic() < deadline, "the test's threads did not go to sleep"
            time.sleep(0.001)
        buf = ffi.new("int[]", 64)
        me = threading.get_native_id()
        listed = lib.nb_task_list(me, buf, 64)      # caches the parent's descriptor, with 3 threads listed
        r, w = os.pipe()
        pid = libc._Fork()
        if pid == 0:
            ctypes.pythonapi.PyOS_AfterFork_Child()
            n = lib.nb_task_list(threading.get_native_id(), buf, 64)   # gettid(2): the child's own id
            os.write(w, f"{n} {buf[0]} {threading.get_native_id()}".encode())
            os._exit(0)
        assert pid > 0, ctypes.get_errno()
        os.close(w)
        ready, _, _ = select.select([r], [], [], 30)
        line = os.read(r, 100).decode().split() if ready else None
        if line is None:
            os.kill(pid, signal.SIGKILL)
        os.close(r)
        os.waitpid(pid, 0)
        release.set()
        print(json.dumps({"listed": listed, "pid": pid, "line": line}))
    """)
    assert out["listed"] >= 3, out
    assert out["line"] is not None, f"the _Fork child {out['pid']} did not answer within 30 s"
    assert out["line"][0] == "1" and out["line"][1] == out["line"][2] == str(out["pid"]), out


#: A read-only bind (no policy set, no CPUs set) of a subprocess: whether the threads were counted rather than
#: listed (NB_COUNTED), the link count read (NB_BIND_LINKS), and the threads.
_COUNTING_BIND = """
        from numabind import _native
        ffi, lib = _native.ffi, _native.lib
        REQ = ffi.new("struct nb_bind_request *", {"mode": -1, "nodemask": ffi.NULL, "maxnode": 65, "node_words": 1,
                                                   "cpumask": ffi.NULL, "words": 16})
        def bound(flags=lib.NB_COUNT_LINKS):
            ints = ffi.new("int[]", 8192)
            n = lib.nb_sys_bind(REQ, flags, 64, ints)
            lib.nb_bind_release(ints)
            head = lib.NB_BIND_HEADER
            return [bool(ints[lib.NB_BIND_FACTS] & lib.NB_COUNTED), ints[lib.NB_BIND_LINKS], list(ints[head:head + n])]
"""


def test_task_list_lists_a_lone_thread_and_counts_nothing():
    """nb_task_list is a listing: a lone thread is listed, whatever the directory's link count says."""
    out = run_json("""
        import json, threading
        from numabind import _native
        ffi, lib = _native.ffi, _native.lib
        buf = ffi.new("int[]", 64)
        me = threading.get_native_id()
        steps = []
        for _ in range(3):
            n = lib.nb_task_list(me, buf, 64)
            steps.append(list(buf[0:n]))
        print(json.dumps({"me": me, "steps": steps}))
    """)
    assert out["steps"] == [[out["me"]]] * 3


def test_bind_counts_a_lone_thread_only_when_asked_and_follows_threads_starting_and_ending():
    """NB_COUNT_LINKS: a process whose task directory counts one thread (links 2 + 1) lists nothing, the caller is
    that thread (NB_COUNTED). The count is read on every call, so a thread that starts (or ends) is listed (or not)
    at once; without the flag the lone thread is listed, and the link count is said either way."""
    out = run_json(_COUNTING_BIND + """
        import json, os, threading
        me = threading.get_native_id()
        steps = [bound(), bound(), bound(0)]
        go = threading.Event()
        t = threading.Thread(target=go.wait)
        t.start()
        steps.append(bound())
        steps.append(sorted(int(x) for x in os.listdir("/proc/self/task")))
        go.set()
        t.join()
        while len(os.listdir("/proc/self/task")) > 1:   # join() returns before the thread has quite gone
            pass
        steps += [bound(), bound(0)]
        print(json.dumps({"me": me, "other": t.native_id, "steps": steps}))
    """)
    me, other, steps = out["me"], out["other"], out["steps"]
    assert steps[0] == steps[1] == [True, 3, [me]] and steps[2] == [False, 3, [me]]
    counted, links, listed = steps[3]
    assert not counted and links == 4 and listed[0] == me and sorted(listed) == steps[4] == sorted([me, other])
    assert steps[5] == [True, 3, [me]] and steps[6] == [False, 3, [me]]


def test_bind_in_a_child_of_a_lone_thread_forked_without_atfork_handlers_lists_its_threads():
    """After glibc's _Fork the cached descriptor is the parent's, whose directory counts one thread; the
    child's own threads must still be listed: the count stands for the caller only in the process that opened
    the descriptor, whose main thread the caller is."""
    out = run_python(_COUNTING_BIND + """
        import _thread, ctypes, json, os, sys
        libc = ctypes.CDLL(None, use_errno=True)
        if not hasattr(libc, "_Fork"):
            print("no _Fork"); sys.exit(0)
        assert bound()[0] and bound()[0]    # a lone thread, counted (the descriptor cached)
        r, w = os.pipe()
        pid = libc._Fork()
        if pid == 0:
            alone = bound()                 # the child alone: its own directory, counted once reopened
            # a second thread in the child, started by C (the child's Python has not been told it forked)
            tid = ctypes.c_ulong()
            sleep = ctypes.cast(libc.sleep, ctypes.c_void_p)
            assert libc.pthread_create(ctypes.byref(tid), None, sleep, ctypes.c_void_p(30)) == 0
            while len(os.listdir("/proc/self/task")) < 2:
                pass
            os.write(w, json.dumps([_thread.get_native_id(), alone, bound()]).encode())
            os._exit(0)
        os.close(w)
        print(os.read(r, 4000).decode())
        os.waitpid(pid, 0)
    """)
    assert out.returncode == 0, out.stderr
    if out.stdout.strip() == "no _Fork":
        pytest.skip("this C library has no _Fork (glibc 2.34 and newer have it)")
    child, alone, two = json.loads(out.stdout)
    assert alone == [True, 3, [child]]
    counted, links, listed = two
    assert not counted and links == 4 and listed[0] == child and len(set(listed)) == 2, out.stdout


@pytest.mark.parametrize("prefix", PREFIXES)
def test_affinity_many_sets_reads_back_and_reports_each_thread(prefix):
    with Parked(2, pins=[None, {CPU_A}]) as parked:
        me = threading.get_native_id()
        free, pinned = parked.tids if os.sched_getaffinity(parked.tids[1]) == {CPU_A} else parked.tids[::-1]
        before_me = os.sched_getaffinity(0)
        tids = [me, free, pinned, NO_SUCH_TID]
        done, status, before, after = _walk(prefix, tids, {CPU_B}, lib.NB_MATCHING)
        assert done == 4
        assert status[0] == lib.NB_BOUND and after[0] == {CPU_B} == os.sched_getaffinity(0)
        assert before[0] == before_me
        assert status[1] == lib.NB_BOUND and os.sched_getaffinity(free) == {CPU_B}
        if before_me != {CPU_A}:
            assert status[2] == lib.NB_LEFT_ALONE and os.sched_getaffinity(pinned) == {CPU_A} == after[2]
        assert status[3] == lib.NB_EXITED
        done, status, before, after = _walk(prefix, [me, free], {CPU_B})   # held already: set, its read the read-back
        assert status == [lib.NB_BOUND] * 2 and before == after == [{CPU_B}] * 2 == [os.sched_getaffinity(free)] * 2
        os.sched_setaffinity(0, before_me)
        done, status, before, after = _walk(prefix, [me, free], None)   # only read
        assert status == [lib.NB_UNCHANGED] * 2 and after == before == [before_me, {CPU_B}]


@pytest.mark.parametrize("prefix", PREFIXES)
def test_affinity_many_stops_at_a_refusal_of_the_first_thread(prefix):
    me = threading.get_native_id()
    before_me = os.sched_getaffinity(0)
    with Parked(1) as parked:
        outside = max(int(x) for x in open("/sys/devices/system/cpu/possible").read().replace("-", ",").split(",")) + 1
        done, status, _, _ = _walk(prefix, [me, parked.tids[0]], {outside}, words=max(16, outside // 64 + 1))
        assert done == 1 and status[0] == -errno.EINVAL and status[1] == lib.NB_NOT_TRIED
        assert os.sched_getaffinity(0) == before_me
        assert _walk(prefix, [me], {CPU_A}, words=0)[0] == -errno.EINVAL    # no mask words: refused


@pytest.mark.parametrize("prefix", PREFIXES)
def test_swap_mempolicy_saves_sets_and_reads_back(prefix):
    assert fn(prefix, "set_mempolicy")(MPOL_PREFERRED, nodemask(MEM_NODE), MAXNODE) == 0
    ints = ffi.new("int[]", 5)
    masks = ffi.new("unsigned long[]", 2)
    assert fn(prefix, "swap_mempolicy")(MPOL_BIND, nodemask(MEM_NODE), MAXNODE, 1, ints, masks, ints + 1,
                                        masks + 1, ints + 2) == 0
    assert (ints[0], bits(masks)) == (MPOL_PREFERRED, {MEM_NODE})          # before
    assert (ints[1], bits(masks + 1)) == (MPOL_BIND, {MEM_NODE})           # read back
    assert list(ints[2:5]) == [0, 0, 0] and get_policy(prefix) == (MPOL_BIND, {MEM_NODE})
    missing = max(int(x) for x in open("/sys/devices/system/node/possible").read().replace("-", ",").split(",")) + 1
    assert fn(prefix, "swap_mempolicy")(MPOL_BIND, nodemask(missing) if missing < 64 else ffi.NULL, MAXNODE, 1,
                                        ints, masks, ints + 1, masks + 1, ints + 2) == 0
    assert ints[3] == -errno.EINVAL and ints[4] == 1                       # refused; no read-back
    assert get_policy(prefix) == (MPOL_BIND, {MEM_NODE})                   # unchanged


# --------------------------------------------------------------------------- a whole bind in one call
def _request(mode: int, node_ids, cpu_ids, words: int = 16):
    """A struct nb_bind_request with one word of nodes (and the masks it points to, kept alive with it)."""
    nodes = ffi.NULL if node_ids is None else nodemask(*node_ids)
    cpus = ffi.NULL if cpu_ids is None else ffi.new("unsigned long[]", [sum(1 << c for c in cpu_ids if c // 64 == w)
                                                                        for w in range(words)])
    req = ffi.new("struct nb_bind_request *", {"mode": mode, "nodemask": nodes, "maxnode": MAXNODE, "node_words": 1,
                                                "cpumask": cpus, "words": words})
    return req, (nodes, cpus)


#: The facts of a policy set and read back as asked, and of the caller's CPUs likewise.
POLICY_AS_SET = lib.NB_OLD_READ | lib.NB_POLICY_SET | lib.NB_NOW_READ | lib.NB_MODE_AS_SET | lib.NB_NODES_AS_SET
CPUS_AS_SET = lib.NB_WALKED | lib.NB_CALLER_SET | lib.NB_CALLER_AS_SET


def _bind(prefix: str, mode: int, node_ids, cpu_ids, flags: int = 0, cap: int = 64, need_old: int = 0,
          words: int = 16):
    """nb_<prefix>_bind with one word of nodes; returns (rc, header, tids, statuses, old/now nodes, before, after)."""
    req, keep = _request(mode, node_ids, cpu_ids, words)
    head = lib.NB_BIND_HEADER
    at = head + 2 * cap + (head + 2 * cap) % 2          # the masks start at the next even int
    ints = ffi.new("int[]", at + 2 * (2 + 2 * cap * words))
    masks = ffi.cast("unsigned long *", ints + at)
    rc = fn(prefix, "bind")(req, flags | (lib.NB_NEED_OLD if need_old else 0), cap, ints)
    # the bind lock: held whenever something may have changed, whatever happened (releasing it is the caller's)
    assert ints[lib.NB_BIND_HELD] == (0 <= rc <= cap)
    assert lib.nb_bind_release(ints) == 0 and ints[lib.NB_BIND_HELD] == 0
    n = max(0, min(rc, cap))
    return (rc, list(ints[0:head]), list(ints[head:head + n]), list(ints[head + cap:head + cap + n]),
            (bits(masks), bits(masks + 1)),
            [bits(masks + 2 + i * words, words) for i in range(n)],
            [bits(masks + 2 + (cap + i) * words, words) for i in range(n)])


@pytest.mark.parametrize("prefix", PREFIXES)
def test_bind_sets_the_policy_and_every_thread_and_reads_both_back(prefix):
    before_me = os.sched_getaffinity(0)
    assert fn(prefix, "set_mempolicy")(MPOL_PREFERRED, nodemask(N), MAXNODE) == 0
    try:
        with Parked(2) as parked:
            me = threading.get_native_id()
            rc, head, tids, status, (old, now), before, after = _bind(prefix, MPOL_BIND, {N}, {CPU_B})
            listed = {int(t) for t in os.listdir("/proc/self/task")}
            assert rc == len(listed) == len(tids) and set(tids) == listed and tids[0] == me
            assert head[lib.NB_BIND_TID] == me
            assert (head[lib.NB_BIND_OLD_MODE], old) == (MPOL_PREFERRED, {N})
            assert (head[lib.NB_BIND_NOW_MODE], now) == (MPOL_BIND, {N}) == get_policy(prefix)
            assert head[lib.NB_BIND_ERRS:lib.NB_BIND_ERRS + 3] == [0, 0, 0]
            assert head[lib.NB_BIND_FACTS] == POLICY_AS_SET | CPUS_AS_SET and head[lib.NB_BIND_PROCESSED] == rc
            assert head[lib.NB_BIND_EXITED] == 0 and head[lib.NB_BIND_SETTLED] == 1
            assert status == [lib.NB_BOUND] * rc and after == [{CPU_B}] * rc and before[0] == before_me
            for tid in parked.tids:
                assert os.sched_getaffinity(tid) == {CPU_B}
    finally:
        os.sched_setaffinity(0, before_me)


def test_the_bind_lock_is_held_by_one_buffer_and_says_whether_another_took_it_since():
    a, b = ffi.new("int[]", lib.NB_BIND_HEADER), ffi.new("int[]", lib.NB_BIND_HEADER)
    assert lib.nb_bind_hold(a) in (0, 1) and a[lib.NB_BIND_HELD] == 1
    assert lib.nb_bind_hold(a) == 1                       # held by this buffer already: nothing taken again
    assert lib.nb_bind_release(a) == 0 and a[lib.NB_BIND_HELD] == 0
    assert lib.nb_bind_release(a) == 0                    # twice: harmless
    assert lib.nb_bind_hold(a) == 1 and lib.nb_bind_release(a) == 0   # nobody took it in between
    assert lib.nb_bind_hold(b) in (0, 1) and lib.nb_bind_release(b) == 0
    assert lib.nb_bind_hold(a) == 0 and lib.nb_bind_release(a) == 0   # b took it in between
    got = []

    def other():
        got.append(lib.nb_bind_hold(b))      # waits for the main thread's hold
        got.append(b[lib.NB_BIND_HELD])
        got.append(lib.nb_bind_release(b))   # by the thread that holds it

    assert lib.nb_bind_hold(a) == 1
    t = threading.Thread(target=other)
    t.start()
    t.join(0.2)
    assert not got
    assert lib.nb_bind_release(a) == 0
    t.join(30)
    assert got == [0, 1, 0]


@pytest.mark.parametrize("prefix", PREFIXES)
def test_bind_with_too_small_a_buffer_changes_nothing(prefix):
    before_me, policy = os.sched_getaffinity(0), get_policy(prefix)
    with Parked(2) as parked:
        rc, head, *_ = _bind(prefix, MPOL_BIND, {N}, {CPU_B}, cap=1)
        assert rc == len(os.listdir("/proc/self/task")) > 1      # how many there are: call again with more room
        assert get_policy(prefix) == policy
        assert os.sched_getaffinity(0) == before_me and all(os.sched_getaffinity(t) == before_me
                                                            for t in parked.tids)


@pytest.mark.parametrize("prefix", PREFIXES)
def test_bind_stops_before_the_walk_when_the_policy_is_refused(prefix):
    before_me, policy = os.sched_getaffinity(0), get_policy(prefix)
    rc, head, tids, status, *_ = _bind(prefix, MPOL_BIND, {MISSING}, {CPU_B})
    assert rc >= 1 and head[lib.NB_BIND_ERRS + 1] == -errno.EINVAL
    assert head[lib.NB_BIND_FACTS] == lib.NB_OLD_READ          # read the old policy; refused; nothing walked
    assert os.sched_getaffinity(0) == before_me and get_policy(prefix) == policy


@pytest.mark.parametrize("prefix", PREFIXES)
def test_bind_without_a_policy_reads_it_and_with_only_the_caller_leaves_the_others(prefix):
    before_me = os.sched_getaffinity(0)
    assert fn(prefix, "set_mempolicy")(MPOL_INTERLEAVE, nodemask(N), MAXNODE) == 0
    try:
        with Parked(1) as parked:
            rc, head, tids, status, (_, now), _, after = _bind(prefix, -1, None, {CPU_A}, flags=lib.NB_ONLY_CALLER)
            assert rc == 1 and tids == [threading.get_native_id()] and status == [lib.NB_BOUND]
            assert (head[lib.NB_BIND_NOW_MODE], now) == (MPOL_INTERLEAVE, {N}) == get_policy(prefix)
            assert head[lib.NB_BIND_ERRS:lib.NB_BIND_ERRS + 3] == [1, 1, 0]
            assert head[lib.NB_BIND_FACTS] == lib.NB_NOW_READ | CPUS_AS_SET
            assert os.sched_getaffinity(0) == {CPU_A} and os.sched_getaffinity(parked.tids[0]) == before_me
    finally:
        os.sched_setaffinity(0, before_me)


@pytest.mark.parametrize("prefix", PREFIXES)
def test_bind_that_reads_back_other_cpus_says_so(prefix):
    """CPUs partly outside the machine: the kernel keeps the others; the caller was set, but not as asked."""
    before_me = os.sched_getaffinity(0)
    words = max(16, OUTSIDE_CPU // 64 + 1)
    try:
        rc, head, tids, status, _, _, after = _bind(prefix, MPOL_BIND, {N}, {CPU_A, OUTSIDE_CPU}, words=words)
        assert status[0] == lib.NB_BOUND and after[0] == {CPU_A}
        assert head[lib.NB_BIND_FACTS] == POLICY_AS_SET | lib.NB_WALKED | lib.NB_CALLER_SET
        req, keep = _request(MPOL_BIND, {N}, None, words=0)
        assert fn(prefix, "bind")(req, 0, 4, ffi.new("int[]", 28)) == -errno.EINVAL    # no words
        req, keep = _request(MPOL_BIND, {N}, None, words=1)
        misaligned = ffi.new("int[]", 29) + 1
        assert fn(prefix, "bind")(req, 0, 4, misaligned) == -errno.EINVAL           # masks would be unaligned
        assert fn(prefix, "bind")(ffi.NULL, 0, 4, ffi.new("int[]", 28)) == -errno.EINVAL   # no request
    finally:
        os.sched_setaffinity(0, before_me)


# --------------------------------------------------------------------------- listing again after the walk
def _rounds(n: int) -> int:
    return n << lib.NB_SETTLE_SHIFT


@pytest.mark.parametrize("prefix", PREFIXES)
def test_bind_lists_the_threads_again_after_the_walk_and_says_it_settled(prefix):
    before_me = os.sched_getaffinity(0)
    try:
        with Parked(2):
            rc, head, tids, status, *_ = _bind(prefix, MPOL_BIND, {N}, {CPU_B}, flags=_rounds(8))
            assert rc == len(os.listdir("/proc/self/task")) == 3
            assert head[lib.NB_BIND_SETTLED] == 1 and head[lib.NB_BIND_UNSEEN] == 0
            assert head[lib.NB_BIND_FACTS] == POLICY_AS_SET | CPUS_AS_SET
    finally:
        os.sched_setaffinity(0, before_me)


@pytest.mark.parametrize("prefix", PREFIXES)
def test_bind_without_room_to_list_again_binds_and_says_it_did_not_look(prefix):
    """cap == the thread count: the walk binds them all, but a second listing has no room: NB_NO_ROOM (the caller
    lists again itself)."""
    before_me = os.sched_getaffinity(0)
    try:
        with Parked(2) as parked:
            rc, head, tids, status, *_ = _bind(prefix, MPOL_BIND, {N}, {CPU_B}, flags=_rounds(8), cap=3)
            assert rc == 3 and status == [lib.NB_BOUND] * 3
            assert head[lib.NB_BIND_SETTLED] == lib.NB_NO_ROOM
            assert all(os.sched_getaffinity(t) == {CPU_B} for t in parked.tids)
    finally:
        os.sched_setaffinity(0, before_me)


def _spawning_bind(flags: int, tries: int, done) -> tuple[list[int], list[int], list[int], list[set[int]]]:
    """nb_sys_bind (CPUs only) with a thread walked last that keeps starting threads, up to ``tries`` times until
    ``done(head, tids, status, before)``; every thread's CPUs put back after each try. Returns the last (head,
    tids, status, before)."""
    from tests.kernel import Spawner

    wide = os.sched_getaffinity(0)
    for _ in range(tries):
        try:
            with Spawner(parked=16, cap=200) as spawner:
                _, head, tids, status, _, before, _ = _bind("sys", -1, None, {CPU_B}, flags=flags, cap=1024)
                spawner.stop.set()
                spawner.thread.join(timeout=30)
        finally:
            for t in os.listdir("/proc/self/task"):
                try:
                    os.sched_setaffinity(int(t), wide)
                except OSError:
                    pass
        if done(head, tids, status, before):
            break
    return head, tids, status, before


@pytest.mark.skipif(CPU_A == CPU_B, reason="a thread starts threads while the walk runs only with a second CPU "
                                          "to run on (one CPU here)")
def test_bind_says_which_threads_still_appeared_after_its_last_listing():
    """No more rounds (R = 0): threads started during the walk are listed, not walked: NB_BIND_SETTLED 0 and
    their ids after the walked ones."""
    unseen = lambda head, tids, status, before: head[lib.NB_BIND_SETTLED] == 0   # noqa: E731
    head, tids, status, _ = _spawning_bind(_rounds(0), 300, unseen)   # many tries: an emulated guest races slowly
    assert head[lib.NB_BIND_SETTLED] == 0, "in 300 binds no thread started during the walk"
    assert head[lib.NB_BIND_UNSEEN] > 0


def test_bind_walks_the_threads_started_during_the_walk_and_matching_binds_those_already_moved():
    """R rounds: threads found after the walk are walked and appended; under NB_MATCHING one started by a thread
    bound already (it holds the new CPUs, not the caller's old ones) is bound, not left alone."""
    moved = lambda head, tids, status, before: {CPU_B} in before[1:] and before[0] != {CPU_B}   # noqa: E731
    head, tids, status, before = _spawning_bind(lib.NB_MATCHING | _rounds(8), 300, moved)   # an emulated guest
    assert {CPU_B} in before[1:], "in 300 binds no thread was started by a thread bound already"
    assert len(set(tids)) == len(tids)
    assert lib.NB_LEFT_ALONE not in status and set(status) <= {lib.NB_BOUND, lib.NB_EXITED}, status
    assert head[lib.NB_BIND_SETTLED] in (0, 1)


# --------------------------------------------------------------------------- the verdict and the lock, in Python
def _facts_table(policy, cpus, n: int = 1, cap: int = 4, facts: int | None = None, others=(), settled: int = 1):
    """A bind buffer (a plain list) that says ``facts`` for a request of ``policy`` and ``cpus``, ``n`` threads."""
    from numabind import backends

    be = backends.SyscallBackend()
    req = be._request(policy, frozenset({N}) if policy else frozenset(), cpus)
    ints = [0] * (lib.NB_BIND_HEADER + 2 * cap)
    ints[lib.NB_BIND_FACTS] = req.want & ~lib.NB_COUNTED if facts is None else facts
    ints[lib.NB_BIND_PROCESSED], ints[lib.NB_BIND_SETTLED] = n, settled
    first = lib.NB_BIND_HEADER + cap
    ints[first] = lib.NB_UNCHANGED if cpus is None else lib.NB_BOUND
    ints[first + 1:first + n] = list(others) or [ints[first]] * (n - 1)
    return ints, req


@pytest.mark.parametrize("policy, cpus", [("bind", frozenset({CPU_A})), (None, frozenset({CPU_A})), ("bind", None)])
def test_the_verdict_is_made_in_python_from_the_facts(policy, cpus):
    """Clean only when every fact of a bind done exactly as asked is there (the count of threads instead of a
    listing changes nothing), every other thread was bound as the caller or exited, and it settled."""
    from numabind.backends.native import _clean

    ints, req = _facts_table(policy, cpus)
    assert _clean(ints, 1, 4, req)
    ints, req = _facts_table(policy, cpus, facts=req.want)                  # counted, not listed
    assert _clean(ints, 1, 4, req)
    wanted = [bit for bit in (1 << k for k in range(9)) if req.want & bit and bit != lib.NB_COUNTED]
    assert len(wanted) == (5 if policy else 1) + (3 if cpus else 1)
    for bit in wanted:                                                     # any fact missing: not clean
        ints, req = _facts_table(policy, cpus, facts=req.want & ~bit)
        assert not _clean(ints, 1, 4, req), bit
    ints, req = _facts_table(policy, cpus, n=3, others=[lib.NB_EXITED, ints[lib.NB_BIND_HEADER + 4]])
    assert _clean(ints, 3, 4, req)
    for other in (lib.NB_LEFT_ALONE, lib.NB_DIFFERS, lib.NB_NOT_TRIED, -errno.EPERM):
        ints, req = _facts_table(policy, cpus, n=3, others=[other, lib.NB_EXITED])
        assert not _clean(ints, 3, 4, req), other
    for settled in (0, lib.NB_NO_ROOM, -errno.EPERM, lib.NB_CALLER_NOT_LISTED):
        ints, req = _facts_table(policy, cpus, n=2, settled=settled)
        assert not _clean(ints, 2, 4, req), settled
    ints, req = _facts_table(policy, cpus, n=2)
    ints[lib.NB_BIND_PROCESSED] = 1                                        # stopped before the second thread
    assert not _clean(ints, 2, 4, req)


def _lock_is_free() -> bool:
    """Whether another thread can take the bind lock now (the lock is recursive: this thread always could)."""
    got = []

    def other():
        ints = ffi.new("int[]", lib.NB_BIND_HEADER)
        got.append(lib.nb_bind_hold(ints))
        lib.nb_bind_release(ints)

    t = threading.Thread(target=other, daemon=True)
    t.start()
    t.join(0.5)
    return bool(got)


@pytest.mark.parametrize("backend", ["libnuma", "syscall"])
def test_python_releases_the_lock_after_a_clean_bind_of_the_caller_alone_and_only_then(backend):
    from numabind.backends import WALK_ONLY_CALLER, get_backend

    be, _ = get_backend(backend)
    cpus = frozenset(os.sched_getaffinity(0))
    pending = [None]
    call = be.apply_all("bind", frozenset({N}), cpus, WALK_ONLY_CALLER, False, pending)
    assert call.clean and call.released and not call._ints[lib.NB_BIND_HELD] and _lock_is_free()
    call = be.apply_all("bind", frozenset({N}), cpus, WALK_ONLY_CALLER, False, pending, keep_lock=True)
    assert call.clean and not call.released and call._ints[lib.NB_BIND_HELD] and not _lock_is_free()
    be.end_call(pending)
    assert not call._ints[lib.NB_BIND_HELD] and _lock_is_free()
    call = be.apply_all("bind", frozenset({N}), frozenset({CPU_A, OUTSIDE_CPU}), WALK_ONLY_CALLER, False, pending)
    try:
        assert not call.clean and not call.released and call._ints[lib.NB_BIND_HELD] and not _lock_is_free()
    finally:
        be.end_call(pending)
        os.sched_setaffinity(0, cpus)
    assert _lock_is_free()


def test_a_report_kept_keeps_its_own_threads_while_later_binds_reuse_a_buffer():
    """A bind uses the buffer of the plan's last bind again only when nothing refers to it any more: a report
    whose threads were not decoded yet (it keeps the buffer) still says its own bind's CPUs before."""
    import numabind

    wide = frozenset(os.sched_getaffinity(0))
    plan = numabind.Plan(cpus={CPU_A})
    try:
        os.sched_setaffinity(0, wide)
        kept = numabind.bind_current(plan, threads="current")
        for _ in range(3):                    # binds that find the buffer free, and bind it again
            os.sched_setaffinity(0, {CPU_B})
            numabind.bind_current(plan, threads="current")
        os.sched_setaffinity(0, {CPU_B})
        later = numabind.bind_current(plan, threads="current")
        assert kept.threads[0].before == wide and later.threads[0].before == {CPU_B}
        assert kept.threads[0].after == later.threads[0].after == {CPU_A}
    finally:
        os.sched_setaffinity(0, wide)


def test_the_link_count_is_trusted_once_it_agreed_with_a_listing():
    """The backend asks the core to count a lone thread (NB_COUNT_LINKS) only once a listing of this process's
    one thread agreed with the directory's link count; before that, every bind lists."""
    out = run_json("""
        import json, os
        import numabind
        from numabind import _native, backends
        from numabind.backends import native as mechanics
        lib = _native.lib
        be, _ = backends.get_backend("syscall")
        cpus = frozenset(os.sched_getaffinity(0))
        steps = []
        for _ in range(3):
            trusted = mechanics._count_links == lib.NB_COUNT_LINKS
            call = be.apply_all(None, frozenset(), cpus, 0, False)
            steps.append([trusted, bool(call._ints[lib.NB_BIND_FACTS] & lib.NB_COUNTED), call.clean])
        print(json.dumps(steps))
    """)
    assert out == [[False, False, True], [True, True, True], [True, True, True]]
