"""Helpers shared by the tests that touch the real kernel of this host (test_bind, test_backends,
test_native, test_process, test_cli, ...): independent readers of what the kernel holds, threads
parked for a test (:class:`Parked`) or started during one (:class:`Spawner`), children run with the
checkout's numabind, a seccomp filter, and what the autouse fixture ``restore_process`` of
tests/conftest.py (every test's) uses to put the process's binding back.

Nothing here assumes this host's CPU ids or node count: ``CPU_A``/``CPU_B`` are two CPUs this
process may use (the same one on a one-CPU machine), ``MEM_NODE`` a node with memory, and
``OUTSIDE_CPU``/``MISSING_NODE`` ids this machine does not have.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKENDS = ("libnuma", "syscall", "numactl", "none")
NATIVE = ("libnuma", "syscall")           # the backends that set a memory policy in-process
POLICIES = ("bind", "preferred", "preferred-many", "interleave", "local", "default")
# <linux/mempolicy.h>: numbers the kernel returns from get_mempolicy
MPOL = {"default": 0, "preferred": 1, "bind": 2, "interleave": 3, "local": 4, "preferred-many": 5}
NO_SUCH_TID = 4194304 + 1000              # above PID_MAX_LIMIT: never a thread


# --------------------------------------------------------------------------- helpers
def ids_of(text: str) -> frozenset[int]:
    """A kernel cpulist ("0-1,4") parsed without numabind's parser."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(out)


def status_cpus(tid: int | None = None) -> frozenset[int]:
    """Cpus_allowed_list of the process (its main thread) or of one thread."""
    path = "/proc/self/status" if tid is None else f"/proc/self/task/{tid}/status"
    with open(path) as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                return ids_of(line.split(":", 1)[1])
    raise AssertionError(f"no Cpus_allowed_list in {path}")


def raw_mempolicy() -> tuple[int, frozenset[int]]:
    """(mode number, nodes) of the calling thread from the raw get_mempolicy syscall."""
    word, nodes = raw_word()
    return word & 0xFF, nodes


def raw_word() -> tuple[int, frozenset[int]]:
    """(the whole mode word, MPOL_F_* flags included, nodes) of the calling thread, from raw get_mempolicy."""
    from numabind import _native

    ffi, lib = _native.ffi, _native.lib
    mode = ffi.new("int *")
    mask = ffi.new("unsigned long[]", 16)
    rc = lib.nb_sys_get_mempolicy(mode, mask, 16 * 64, ffi.NULL, 0)
    assert rc == 0, f"get_mempolicy returned {rc}"
    return mode[0], frozenset(w * 64 + b for w in range(16) for b in range(64) if mask[w] >> b & 1)


def raw_set_word(word: int, nodes=()) -> None:
    """set_mempolicy with a raw mode word (a mode or-ed with MPOL_F_* flags)."""
    from numabind import _native

    ffi, lib = _native.ffi, _native.lib
    bits = sum(1 << n for n in nodes)
    rc = lib.nb_sys_set_mempolicy(word, ffi.new("unsigned long[]", [bits]) if nodes else ffi.NULL,
                                  65 if nodes else 0)
    assert rc == 0, f"set_mempolicy({word:#x}, {sorted(nodes)}) returned {rc}"


# <linux/mempolicy.h> mode flags
MPOL_F_STATIC_NODES, MPOL_F_RELATIVE_NODES, MPOL_F_NUMA_BALANCING = 1 << 15, 1 << 14, 1 << 13


def raw_set_mempolicy(policy: str, nodes=()) -> None:
    from numabind import _native

    ffi, lib = _native.ffi, _native.lib
    word = sum(1 << n for n in nodes)
    rc = lib.nb_sys_set_mempolicy(MPOL[policy], ffi.new("unsigned long[]", [word]) if nodes else ffi.NULL,
                                  65 if nodes else 0)
    assert rc == 0, f"set_mempolicy({policy}, {nodes}) returned {rc}"


def expected_raw(policy: str) -> set[tuple[int, frozenset[int]]]:
    """What get_mempolicy may return after ``policy`` on MEM_NODE."""
    if policy == "default":
        return {(0, frozenset())}
    if policy == "local":  # kernels before 5.x store MPOL_LOCAL as preferred with no node
        return {(4, frozenset()), (1, frozenset())}
    return {(MPOL[policy], frozenset({MEM_NODE}))}


def show_fields(text: str) -> dict[str, str]:
    """``numactl --show`` (or ``numabind show``) output as {field: value}; the first of a repeated field wins."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def numactl_show() -> dict[str, str]:
    """``numactl --show`` run from the calling thread (the child inherits its policy)."""
    return show_fields(subprocess.run(["numactl", "--show"], capture_output=True, text=True, timeout=30,
                                      check=True).stdout)


def assert_numactl_shows(policy: str) -> None:
    show = numactl_show()
    assert show["policy"] == policy, show
    node = str(MEM_NODE)
    if policy == "bind":
        assert show["membind"].split() == [node]
    elif policy == "interleave":
        assert show["interleavemask"].split() == [node]
    elif policy == "preferred":
        assert show["preferred node"] == node
    elif policy == "preferred-many":
        assert show["preferred"].split() == [node]


def thread_affinities() -> dict[int, frozenset[int]]:
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            out[int(t)] = frozenset(os.sched_getaffinity(int(t)))
        except OSError:
            pass
    return out


def wait_gone(tid: int, timeout: float = 5.0) -> None:
    """Wait until the kernel has reaped thread ``tid`` (join returns slightly earlier)."""
    end = time.monotonic() + timeout
    while os.path.exists(f"/proc/self/task/{tid}"):
        assert time.monotonic() < end, f"thread {tid} did not exit"
        time.sleep(0.001)


class Parked:
    """Threads started before a bind call, parked until the test releases them.

    ``pins`` gives each thread an affinity it sets itself before parking (None:
    inherit). After release, ``seen[tid]`` is the affinity the thread saw itself.
    """

    def __init__(self, n: int = 3, pins=None) -> None:
        self.pins = list(pins) if pins is not None else [None] * n
        self.release = threading.Event()
        self.ready = threading.Barrier(len(self.pins) + 1)
        self.tids: list[int] = []
        self.seen: dict[int, frozenset[int]] = {}
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(p,), daemon=True) for p in self.pins]

    def _run(self, pin) -> None:
        if pin is not None:
            os.sched_setaffinity(0, pin)
        with self._lock:
            self.tids.append(threading.get_native_id())
        self.ready.wait()
        self.release.wait()
        self.seen[threading.get_native_id()] = frozenset(os.sched_getaffinity(0))

    def __enter__(self) -> Parked:
        for t in self._threads:
            t.start()
        self.ready.wait(timeout=10)
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        for t in self._threads:
            t.join(timeout=10)
        # join() returns once Python is done with a thread, a moment before the kernel drops it from
        # /proc/self/task: wait for that too, so the next test does not meet an exiting thread
        deadline = time.monotonic() + 10
        while set(self.tids) & {int(t) for t in os.listdir("/proc/self/task")} and time.monotonic() < deadline:
            time.sleep(0.001)


class Spawner:
    """``parked`` idle threads, then one thread (started last, so walked last) that keeps starting threads which
    park until released, ``cap`` at most, until stopped."""

    def __init__(self, parked: int = 48, cap: int = 400) -> None:
        self.release = threading.Event()
        self.stop = threading.Event()
        self.started = threading.Event()
        self.cap = cap
        self.children: list[threading.Thread] = []
        self.parked = [threading.Thread(target=self.release.wait, daemon=True) for _ in range(parked)]
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set() and len(self.children) < self.cap:
            t = threading.Thread(target=self.release.wait, daemon=True)
            t.start()
            self.children.append(t)
            self.started.set()

    def __enter__(self) -> Spawner:
        for t in self.parked:
            t.start()
        self.thread.start()
        assert self.started.wait(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        self.release.set()
        for t in (*self.parked, *self.children):
            t.join(timeout=30)


def run_python(code: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter that imports numabind from this checkout."""
    full = child_env(**(env or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full, timeout=timeout, cwd=ROOT)


def numabind_cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m numabind ARGS`` in a child (with :func:`child_env` unless ``env`` is given), in the checkout:
    the one CLI runner of the tests (``timeout`` is a deadline against a hang)."""
    return subprocess.run([sys.executable, "-m", "numabind", *args], capture_output=True, text=True,
                          env=env if env is not None else child_env(), timeout=timeout, cwd=ROOT)


def run_main(capsys, *argv: str) -> tuple[object, str, str]:
    """``numabind ARGV`` through ``numabind.cli.main`` in this process: (exit status, stdout, stderr); an
    argparse usage error (SystemExit) gives its exit status."""
    from numabind.cli import main

    try:
        rc: object = main(list(argv))
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def wait_zombie(pid: int, timeout: float = 60) -> None:
    """Wait until child ``pid`` has exited and is not reaped yet (``/proc/PID/stat`` says Z); fail after
    ``timeout`` seconds (a deadline against a hang, not a measurement)."""
    end = time.monotonic() + timeout
    while True:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return
        assert time.monotonic() < end, f"process {pid} did not exit within {timeout} s"
        time.sleep(0.01)


def run_json(code: str, env: dict | None = None):
    """Run ``code`` in a child; it must print one JSON document as its last line."""
    cp = run_python(code, env)
    assert cp.returncode == 0, f"child failed ({cp.returncode}):\n{cp.stdout}\n{cp.stderr}"
    return json.loads(cp.stdout.strip().splitlines()[-1])


# A seccomp filter that makes some system calls fail with an errno: a kernel
# refusal of the kind a container profile gives. Used in children only (a
# filter cannot be removed).
SECCOMP = r'''
import ctypes, errno, platform, struct

_ARCH = {"x86_64": (0xC000003E, {"set_mempolicy": 238, "sched_setaffinity": 203, "mbind": 237,
                                 "migrate_pages": 256, "get_mempolicy": 239}),
         "aarch64": (0xC00000B7, {"set_mempolicy": 237, "sched_setaffinity": 122, "mbind": 235,
                                  "migrate_pages": 238, "get_mempolicy": 236})}

def deny(*names, err=errno.EPERM):
    arch, nrs = _ARCH[platform.machine()]
    code = []
    def op(c, k, jt=0, jf=0):
        code.append(struct.pack("HBBI", c, jt, jf, k))
    n = len(names)
    op(0x20, 4)                        # A = seccomp_data.arch
    op(0x15, arch, 0, n + 2)           # foreign arch: allow
    op(0x20, 0)                        # A = seccomp_data.nr
    for i, name in enumerate(names):
        op(0x15, nrs[name], n - i, 0)  # listed: jump to the errno return
    op(0x06, 0x7FFF0000)               # SECCOMP_RET_ALLOW
    op(0x06, 0x00050000 | err)         # SECCOMP_RET_ERRNO | err
    buf = ctypes.create_string_buffer(b"".join(code))
    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    prog = Prog(len(code), ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:                      # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:     # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")
'''


# --------------------------------------------------------------------------- fixtures
_refusal: list[str | None] = []


def mempolicy_refusal() -> str | None:
    """Why this process cannot use the memory-policy system calls (None when it can): asked once.

    An emulator (qemu-user implements none of them: ENOSYS), a seccomp profile (EPERM) or a kernel built
    without NUMA refuses ``get_mempolicy``; the tests that touch the kernel then skip with this reason."""
    if not _refusal:
        import errno as _errno

        from numabind import _native

        mode = _native.ffi.new("int *")
        mask = _native.ffi.new("unsigned long[]", 16)
        rc = _native.lib.nb_sys_get_mempolicy(mode, mask, 16 * 64, _native.ffi.NULL, 0)
        _refusal.append(None if rc == 0 else (
            f"this process may not use the memory-policy system calls (get_mempolicy: "
            f"{_errno.errorcode.get(-rc, -rc)}; an emulator such as qemu-user, a seccomp profile or a kernel "
            f"without NUMA): the tests that touch the kernel cannot run here"))
    return _refusal[0]


@pytest.fixture
def all_cpus() -> frozenset[int]:
    """Every CPU this process may use now (what an unbound process has)."""
    return frozenset(os.sched_getaffinity(0))


@pytest.fixture
def two_cpus() -> tuple[int, int]:
    """Two different CPUs this process may use (skips on a one-CPU machine)."""
    if CPU_A == CPU_B:
        pytest.skip("needs two CPUs this process may use")
    return CPU_A, CPU_B


@pytest.fixture(params=("argument", "env"))
def forced(request, monkeypatch):
    """Force a backend by the backend= argument or by NUMABIND_BACKEND; returns
    (kwargs for bind_current, expected reason text) given a backend name."""

    def force(name: str):
        if request.param == "argument":
            return {"backend": name}, f"{name} forced by argument"
        monkeypatch.setenv("NUMABIND_BACKEND", name)
        return {}, f"{name} forced by NUMABIND_BACKEND"

    return force


# --------------------------------------------------------------------------- the machine, derived at run time
ONLINE_CPUS = ids_of(open("/sys/devices/system/cpu/online").read())
ALLOWED = sorted(os.sched_getaffinity(0))
CPU_A, CPU_B = ALLOWED[0], ALLOWED[-1]                 # two CPUs this process may use
OUTSIDE_CPU = max(ONLINE_CPUS) + 1                     # a CPU this machine does not have
MEM_NODE = min(ids_of(open("/sys/devices/system/node/has_memory").read()))
MEMORY_NODES = ids_of(open("/sys/devices/system/node/has_memory").read())
ONLINE_NODES = ids_of(open("/sys/devices/system/node/online").read())
MISSING_NODE = max(ids_of(open("/sys/devices/system/node/possible").read())) + 1


#: GPU-visibility variables of the test runner's own environment, which a child must not inherit.
GPU_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
           "ZE_AFFINITY_MASK", "NUMABIND_GPU_VENDOR")


def child_env(**extra: str) -> dict:
    """The environment of a child that imports numabind from this checkout: without numabind's settings
    or the runner's GPU visibility (the one helper for it; ``extra`` is added)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NUMABIND_", "_NUMABIND_")) and k not in GPU_ENV}
    env["PYTHONPATH"] = ROOT
    env.update(extra)
    return env


BLOCK_NATIVE = '''
import sys
class _NoNative:
    """Simulates an install where the C extension was not built."""
    def find_spec(self, name, path=None, target=None):
        if name == "numabind._native":
            raise ImportError("simulated: no numabind._native in this install")
        return None
sys.meta_path.insert(0, _NoNative())
'''


def process_node_pages(pid: int | str = "self") -> dict[int, int]:
    """Pages per node over every mapping of process ``pid`` (the sum of its numa_maps lines), read here."""
    total: collections.Counter = collections.Counter()
    with open(f"/proc/{pid}/numa_maps") as f:
        for line in f:
            for m in re.finditer(r"\bN(\d+)=(\d+)", line):
                total[int(m[1])] += int(m[2])
    return dict(total)


# --------------------------------------------------------------------------- numactl's cpuset against our affinity
