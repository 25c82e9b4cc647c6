"""Backends: selection, the common interface, fault injection, the numactl wrapper.

Selection follows ``libnuma > syscall > numactl > none``; ``NUMABIND_BACKEND``
or ``backend=`` forces one. Faults are simulated in child processes so that
this process keeps its loaded backends: libnuma absent
(``_NUMABIND_LIBNUMA`` names a library that does not exist), numactl absent
(``PATH`` without it), ``numabind._native`` not importable (an import hook
refuses it). The binding tests shared by every backend live in test_bind.py;
here are the parts that differ between backends.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import threading

import pytest

import numabind
from numabind import BindError, NumabindError, Plan, PlanError
from numabind.backends import BACKEND_NAMES, backend_info, get_backend, reset_backends
from numabind.backends import numactl as numactl_mod
from numabind import live
from numabind.backends.numactl import WRAPPER, NumactlBackend, parse_numactl_show
from numabind.live import cpu_mask_bits, node_mask_bits
from tests.kernel import (
    BLOCK_NATIVE,
    CPU_A,
    CPU_B,
    MEM_NODE,
    MEMORY_NODES,
    MISSING_NODE,
    MPOL,
    ONLINE_CPUS,
    ONLINE_NODES,
    OUTSIDE_CPU,
    ROOT,
    Parked,
    child_env,
    ids_of,
    raw_mempolicy,
    raw_set_mempolicy,
    run_json,
    run_python,
)

NATIVE = ("libnuma", "syscall")
CHILD = f"A, B, N = {CPU_A}, {CPU_B}, {MEM_NODE}\n"   # the CPUs and node of this machine, in a child

kernel = pytest.mark.kernel

NUMACTL = shutil.which("numactl")
POLICY_CASES = [  # (plan policy, nodes, numactl option)
    ("bind", {MEM_NODE}, f"--membind={MEM_NODE}"),
    ("preferred", {MEM_NODE}, f"--preferred={MEM_NODE}"),
    ("preferred-many", {MEM_NODE}, f"--preferred-many={MEM_NODE}"),
    ("interleave", {MEM_NODE}, f"--interleave={MEM_NODE}"),
    ("local", None, "--localalloc"),
]

# A child that reports what it was born with.
REPORT = (
    "import json, os\n"
    "from numabind.backends import get_backend\n"
    "p, n = get_backend('syscall')[0].get_mempolicy()\n"
    "print(json.dumps({'cpus': sorted(os.sched_getaffinity(0)), 'policy': p, 'nodes': sorted(n),"
    " 'env': sorted(k for k in os.environ if k.startswith('_NUMABIND_'))}))\n"
)


@pytest.fixture
def empty_path(tmp_path):
    """A PATH with no numactl (and nothing else) on it."""
    d = tmp_path / "bin"
    d.mkdir()
    return str(d)


@pytest.fixture
def fresh_backends():
    reset_backends()
    yield
    reset_backends()


# --------------------------------------------------------------------------- selection
def test_numactl_is_installed_here():
    """CI installs numactl; the numactl-backend tests below depend on it."""
    assert NUMACTL is not None


@kernel   # libnuma's numa_available() asks the kernel (get_mempolicy)
def test_default_selection_is_libnuma_with_a_reason(fresh_backends):
    be, why = get_backend()
    assert be.name == "libnuma"
    assert why.startswith("libnuma: first usable in the order libnuma > syscall > numactl > none")
    info = backend_info()
    assert info["selected"] == "libnuma"
    assert info["available"] == {n: True for n in BACKEND_NAMES}
    assert info["unavailable"] == {}


@pytest.mark.mempolicy
@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_force_by_argument_and_by_environment(name, monkeypatch):
    be, why = get_backend(name)
    assert (be.name, why) == (name, f"{name} forced by argument")
    monkeypatch.setenv("NUMABIND_BACKEND", name)
    be, why = get_backend()
    assert (be.name, why) == (name, f"{name} forced by NUMABIND_BACKEND")
    assert backend_info()["selected"] == name


def test_argument_wins_over_environment(monkeypatch):
    monkeypatch.setenv("NUMABIND_BACKEND", "none")
    assert get_backend("syscall")[0].name == "syscall"


def test_unknown_backend_is_an_error(monkeypatch):
    with pytest.raises(NumabindError, match="'bogus' is not a backend; choose one of libnuma, syscall"):
        get_backend("bogus")
    monkeypatch.setenv("NUMABIND_BACKEND", "bogus")
    with pytest.raises(NumabindError, match="bogus"):
        numabind.bind_current(Plan(cpus={0}))


def test_reset_backends_forgets_instances():
    first = get_backend("syscall")[0]
    assert get_backend("syscall")[0] is first
    reset_backends()
    assert get_backend("syscall")[0] is not first


def test_mask_sizes_follow_the_possible_ids():
    nodes = ids_of(open("/sys/devices/system/node/possible").read())
    cpus = ids_of(open("/sys/devices/system/cpu/possible").read())
    assert node_mask_bits() == max(64, (max(nodes) + 64) // 64 * 64)
    assert cpu_mask_bits() == max(64, (max(cpus) + 64) // 64 * 64)


@pytest.fixture
def wide_kernel(monkeypatch):
    """Pretend the kernel's possible ids are nodes 0-127 and CPUs 0-2047 (as on the largest machines)."""
    real = live._ids
    monkeypatch.setattr(live, "_ids", lambda rel: frozenset(range(128)) if rel.endswith("node/possible")
                        else frozenset(range(2048)) if rel.endswith("cpu/possible") else real(rel))
    live.forget_mask_bits()
    for be in (get_backend(n)[0] for n in NATIVE):   # masks already made for the real sizes
        be._cpu_masks.clear()
        be._node_masks.clear()
    yield
    live.forget_mask_bits()
    for be in (get_backend(n)[0] for n in NATIVE):
        be._cpu_masks.clear()
        be._node_masks.clear()


@kernel
@pytest.mark.parametrize("name", ["libnuma", "syscall"])
def test_masks_wider_than_64_nodes_and_1024_cpus_work(wide_kernel, name):
    """Masks are sized from the possible ids, not fixed at 64 nodes / 1024 CPUs; the kernel takes them."""
    assert (node_mask_bits(), cpu_mask_bits()) == (128, 2048)
    be = get_backend(name)[0]
    old_policy, old_cpus = be.get_mempolicy(), be.get_affinity(0)
    try:
        be.set_mempolicy("interleave", frozenset({MEM_NODE}))
        be.set_affinity(0, frozenset({CPU_B}))
        assert be.get_mempolicy() == ("interleave", frozenset({MEM_NODE}))
        assert be.get_affinity(0) == frozenset({CPU_B}) == frozenset(os.sched_getaffinity(0))
        walk = be.affinity_many([threading.get_native_id()], frozenset({CPU_A}))
        assert walk.status[0] == 0 and walk.after(0) == {CPU_A} == frozenset(os.sched_getaffinity(0))
    finally:
        be.set_affinity(0, old_cpus)
        be.set_mempolicy(*old_policy)


# --------------------------------------------------------------------------- the common interface
@kernel
@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_affinity_of_another_thread(name):
    be, _ = get_backend(name)
    with Parked(1) as parked:
        tid = parked.tids[0]
        assert tid in live.thread_ids()
        assert live.thread_ids(live.gettid())[0] == live.gettid()
        before = be.get_affinity(tid)
        assert before == os.sched_getaffinity(tid)
        be.set_affinity(tid, frozenset({CPU_A}))
        assert be.get_affinity(tid) == {CPU_A} == os.sched_getaffinity(tid)
        assert be.get_affinity(0) == before      # the caller is untouched
        with open(f"/proc/self/task/{tid}/comm") as f:
            assert live.thread_name(tid) == f.read().strip()
    assert parked.seen[tid] == {CPU_A}


@kernel
@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_affinity_errors_are_bind_errors(name):
    be, _ = get_backend(name)
    with pytest.raises(BindError) as exc:
        be.set_affinity(0, frozenset({OUTSIDE_CPU}))
    assert (exc.value.errno, exc.value.syscall) == (errno.EINVAL, "sched_setaffinity")
    with pytest.raises(BindError) as exc:
        be.get_affinity(4194304 + 1000)
    assert (exc.value.errno, exc.value.syscall) == (errno.ESRCH, "sched_getaffinity")


@kernel
def test_live_limits_of_this_host():
    """The limits of the running process, against the files read here (every backend sees the same)."""
    limits = live.limits()
    with open("/proc/self/status") as f:
        mems = next(line.split(":", 1)[1] for line in f if line.startswith("Mems_allowed_list"))
    assert limits.online_cpus == ONLINE_CPUS
    assert limits.nodes == ONLINE_NODES
    assert limits.memory_nodes == MEMORY_NODES
    assert limits.allowed_nodes == ids_of(mems)
    assert limits.allowed_cpus >= os.sched_getaffinity(0) and limits.allowed_cpus <= ONLINE_CPUS


@kernel
@pytest.mark.parametrize("policy,nodes,_opt", POLICY_CASES + [("default", None, "")])
def test_every_reader_agrees_on_the_memory_policy(policy, nodes, _opt):
    """Set through the syscall backend; read through libnuma, syscall and numactl --show."""
    raw_set_mempolicy("interleave" if policy != "interleave" else "bind", {MEM_NODE})
    get_backend("syscall")[0].set_mempolicy(policy, frozenset(nodes or ()))
    for name in ("libnuma", "syscall", "numactl"):
        assert get_backend(name)[0].get_mempolicy() == (policy, frozenset(nodes or ())), name


@kernel
@pytest.mark.parametrize("name", NATIVE)
def test_set_mempolicy_refusal_is_a_bind_error(name):
    be, _ = get_backend(name)
    with pytest.raises(BindError) as exc:
        be.set_mempolicy("bind", frozenset({MISSING_NODE}))
    assert (exc.value.errno, exc.value.syscall) == (errno.EINVAL, "set_mempolicy")
    assert "EINVAL" in str(exc.value) and f"bind nodes [{MISSING_NODE}]" in str(exc.value)


@kernel
@pytest.mark.parametrize("name", NATIVE)
def test_migration(name):
    be, _ = get_backend(name)
    assert be.migrate_pages(0, frozenset({MEM_NODE}), frozenset({MEM_NODE})) == 0
    with pytest.raises(BindError) as exc:
        be.migrate_pages(0, frozenset({MEM_NODE}), frozenset({MISSING_NODE}))
    assert exc.value.syscall == "migrate_pages"


@kernel
def test_none_backend_has_no_memory_calls():
    be, _ = get_backend("none")
    assert be.in_process_memory is False
    for call, args in ((be.set_mempolicy, ("bind", frozenset({MEM_NODE}))), (be.get_mempolicy, ()),
                       (be.migrate_pages, (0, frozenset({MEM_NODE}), frozenset({MEM_NODE})))):
        with pytest.raises(BindError) as exc:
            call(*args)
        assert exc.value.errno == errno.ENOTSUP
        assert "backend_info" in str(exc.value)
    assert be.command_prefix(Plan(cpus={0})) is None


@pytest.mark.mempolicy
@pytest.mark.parametrize("name", NATIVE)
def test_native_backends_bind_in_process(name):
    be, _ = get_backend(name)
    assert be.in_process_memory is True
    assert be.command_prefix(Plan(cpus={0})) is None


# --------------------------------------------------------------------------- numactl backend
@kernel
def test_numactl_backend_sets_memory_policy_only_at_birth():
    be, _ = get_backend("numactl")
    assert be.in_process_memory is False
    with pytest.raises(BindError) as exc:
        be.set_mempolicy("bind", frozenset({MEM_NODE}))
    assert (exc.value.errno, exc.value.syscall) == (errno.ENOTSUP, "set_mempolicy")
    assert "numabind run" in str(exc.value)


@kernel
@pytest.mark.parametrize("policy,nodes,opt", POLICY_CASES)
def test_numactl_backend_command_prefix_binds_the_child(policy, nodes, opt):
    be, _ = get_backend("numactl")
    plan = Plan(cpus={CPU_B}, mem_policy=policy, mem_nodes=nodes)
    prefix = be.command_prefix(plan)
    assert prefix == [WRAPPER, f"--numactl={os.path.abspath(NUMACTL)}", f"--mark={plan.to_text()}",
                      f"--physcpubind={CPU_B}", opt, "--"]
    cp = subprocess.run(prefix + [sys.executable, "-c", REPORT], capture_output=True, text=True,
                        env=child_env(), timeout=60)
    assert cp.returncode == 0, cp.stderr
    out = json.loads(cp.stdout)
    assert out["cpus"] == [CPU_B]
    assert (out["policy"], out["nodes"]) == (policy, sorted(nodes or ()))
    # this process is unchanged
    assert raw_mempolicy() == (MPOL["default"], frozenset())


@kernel
def test_numactl_backend_binds_cpus_of_the_cpuset_outside_the_affinity():
    # numactl checks --physcpubind against the affinity, numabind against the cpuset: from a
    # caller narrowed to one CPU (taskset -c), a plan for another CPU of the cpuset must still reach the child
    be, _ = get_backend("numactl")
    first, second = sorted(live.limits().allowed_cpus)[:2]   # two CPUs of the cpuset, whatever the affinity
    os.sched_setaffinity(0, {first})
    plan = Plan(cpus={second})
    prefix = be.command_prefix(plan)
    assert prefix[3:5] == ["--all", f"--physcpubind={second}"]
    cp = subprocess.run(prefix + [sys.executable, "-c", REPORT], capture_output=True, text=True,
                        env=child_env(), timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout)["cpus"] == [second]
    # inside the affinity numactl's own check holds, and the prefix stays the plain one
    assert "--all" not in be.command_prefix(Plan(cpus={first}))


def test_numactl_backend_cannot_express_the_default_policy():
    with pytest.raises(PlanError, match="default memory policy"):
        get_backend("numactl")[0].command_prefix(Plan(mem_policy="default"))


@kernel
@pytest.mark.parametrize("opt,expected", [(opt, (policy, frozenset(nodes or ()))) for policy, nodes, opt in
                                          POLICY_CASES] + [("--cpunodebind=0", ("default", frozenset()))])
def test_parse_numactl_show_of_real_output(opt, expected):
    out = subprocess.run([NUMACTL, opt, NUMACTL, "--show"], capture_output=True, text=True, check=True).stdout
    assert parse_numactl_show(out) == expected


def test_parse_numactl_show_rejects_garbage():
    with pytest.raises(BindError, match="unexpected numactl --show policy"):
        parse_numactl_show("policy: sideways\n")
    with pytest.raises(BindError):
        parse_numactl_show("")


@kernel
def test_numactl_backend_migrate_pages_uses_migratepages():
    assert get_backend("numactl")[0].migrate_pages(0, frozenset({MEM_NODE}), frozenset({MEM_NODE})) == 0


# --------------------------------------------------------------------------- the wrapper script
def test_wrapper_is_a_fixed_file_in_the_package():
    pkg = os.path.dirname(os.path.abspath(numabind.__file__))
    assert os.path.dirname(WRAPPER) == pkg
    st = os.stat(WRAPPER)
    assert stat.S_ISREG(st.st_mode)
    assert not st.st_mode & stat.S_IWOTH, oct(st.st_mode)
    assert st.st_mode & stat.S_IXUSR and os.access(WRAPPER, os.X_OK)
    with open(WRAPPER) as f:
        assert f.readline().startswith("#!/bin/sh")


@pytest.mark.parametrize("mode", (0o777, 0o644))
def test_numactl_backend_refuses_an_unsafe_wrapper(mode, tmp_path, monkeypatch):
    copy = tmp_path / "numactl_wrapper.sh"
    shutil.copy(WRAPPER, copy)
    os.chmod(copy, mode)
    monkeypatch.setattr(numactl_mod, "WRAPPER", str(copy))
    with pytest.raises(NumabindError, match="executable and not world-writable"):
        NumactlBackend()


def run_wrapper(args, env=None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([WRAPPER, *args], capture_output=True, text=True, timeout=60,
                          env=env if env is not None else child_env(), **kw)


@kernel
def test_wrapper_argv_mode_binds_the_command():
    cp = run_wrapper([f"--physcpubind={CPU_B}", f"--membind={MEM_NODE}", "--", sys.executable, "-c", REPORT])
    assert cp.returncode == 0, cp.stderr
    out = json.loads(cp.stdout)
    assert out["cpus"] == [CPU_B] and (out["policy"], out["nodes"]) == ("bind", [MEM_NODE])


# Variables an older wrapper read from the environment: an inherited value (even empty) took over every
# launch, ran _NUMABIND_PYTHON unbound and never the command (issue 15, item 2). The wrapper reads none now.
INHERITED = {"_NUMABIND_NUMACTL_ARGS": "", "_NUMABIND_PYTHON": "/bin/echo"}


@kernel
def test_wrapper_ignores_inherited_transport_variables():
    cpu = max(os.sched_getaffinity(0))
    cp = run_wrapper([f"--physcpubind={cpu}", "--", sys.executable, "-c", REPORT], env=child_env(**INHERITED))
    assert cp.returncode == 0, cp.stderr
    out = json.loads(cp.stdout)
    assert out["cpus"] == [cpu]
    assert sorted(out["env"]) == sorted(INHERITED)   # passed on to the command untouched, never interpreted


@kernel
def test_run_through_numactl_runs_the_command_despite_inherited_variables():
    """``numabind run --backend numactl -C N -- id -u`` runs id, bound, whatever the environment holds."""
    cpu = max(os.sched_getaffinity(0))
    code = "import sys; from numabind.cli import main; sys.exit(main(sys.argv[1:]))"
    cp = subprocess.run([sys.executable, "-c", code, "run", "--backend", "numactl", "-C", str(cpu), "--",
                         "sh", "-c", "id -u; grep Cpus_allowed_list /proc/self/status"],
                        capture_output=True, text=True, timeout=60, env=child_env(**INHERITED), cwd=ROOT)
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    assert lines[0] == str(os.getuid()), cp.stdout
    assert lines[1].split() == ["Cpus_allowed_list:", str(cpu)]


def _fake_numactl(directory, marker) -> str:
    """A ``numactl`` that only leaves a marker: what a different PATH could put first."""
    directory.mkdir(exist_ok=True)
    fake = directory / "numactl"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\nexit 0\n")
    fake.chmod(0o755)
    return str(directory)


@kernel
def test_wrapper_execs_the_numactl_the_backend_checked(tmp_path):
    """A child started with another PATH still runs the numactl found when the backend was chosen."""
    marker = tmp_path / "fake-numactl-ran"
    fake_dir = _fake_numactl(tmp_path / "bin", marker)
    cpu = max(os.sched_getaffinity(0))
    argv = numabind.wrap_command(Plan(cpus={cpu}, mem_policy="bind", mem_nodes={MEM_NODE}), [sys.executable, "-c", REPORT],
                                 backend="numactl")
    env = child_env(PATH=fake_dir + os.pathsep + os.environ.get("PATH", ""))
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert cp.returncode == 0, cp.stderr
    assert not marker.exists(), "the wrapper looked numactl up on the child's PATH"
    out = json.loads(cp.stdout)
    assert out["cpus"] == [cpu] and (out["policy"], out["nodes"]) == ("bind", [MEM_NODE])


@pytest.mark.parametrize("value", ["numactl", "./numactl", "/nonexistent/numactl", "/etc/passwd", ""])
def test_wrapper_refuses_a_numactl_that_is_not_an_absolute_executable(value, tmp_path):
    marker = tmp_path / "ran"
    cp = run_wrapper([f"--numactl={value}", "--physcpubind=0", "--", "/usr/bin/touch", str(marker)])
    assert cp.returncode == 127, (cp.returncode, cp.stderr)
    assert "--numactl=" in cp.stderr
    assert not marker.exists()


HOSTILE_ARGV = [
    ["--physcpubind=0;touch {m}"],
    ["--membind=$(touch {m})"],
    ["--physcpubind=`touch {m}`"],
    ["--physcpubind=0|touch {m}"],
    ["--physcpubind=0 1"],
    ["--physcpubind=0\ntouch {m}"],
    ["--physcpubind="],
    ["--all=1"],   # --all itself is passed on (a plan outside the caller's affinity), never with a value
    ["--shm={m}"],
    ["--file={m}"],
    ["-C", "0"],
    ["-C0"],
    ["--localalloc=1"],
    ["--membind=all"],
    [""],
]


@pytest.mark.parametrize("opts", HOSTILE_ARGV, ids=[repr(o)[:40] for o in HOSTILE_ARGV])
def test_wrapper_refuses_hostile_options(opts, tmp_path):
    marker = tmp_path / "ran"
    args = [o.format(m=marker) for o in opts] + ["--", "/usr/bin/touch", str(marker)]
    cp = run_wrapper(args)
    assert cp.returncode == 127, (cp.returncode, cp.stderr)
    assert "numabind numactl wrapper: refusing" in cp.stderr
    assert not marker.exists()


def test_wrapper_refuses_a_command_without_separator(tmp_path):
    marker = tmp_path / "ran"
    cp = run_wrapper(["--physcpubind=0", "/usr/bin/touch", str(marker)])
    assert cp.returncode == 127 and "refusing option '/usr/bin/touch'" in cp.stderr
    assert not marker.exists()


def test_wrapper_needs_a_command():
    cp = run_wrapper(["--physcpubind=0", "--"])
    assert cp.returncode == 127 and "no command given" in cp.stderr


def test_wrapper_without_numactl_fails_loudly(empty_path, tmp_path):
    marker = tmp_path / "ran"
    env = child_env(PATH=empty_path)
    args = ["--physcpubind=0", "--", "/usr/bin/touch", str(marker)]
    cp = run_wrapper(args, env=env)
    assert cp.returncode == 127
    assert "numactl is not installed or not on PATH" in cp.stderr
    assert not marker.exists()


# --------------------------------------------------------------------------- fault injection in children
@kernel
def test_libnuma_absent_falls_back_to_syscall():
    out = run_json(CHILD + '''
import json, os, numabind
from numabind.backends import get_backend
info = numabind.backend_info()
r = numabind.bind_current(numabind.Plan(cpus={A}, mem_policy="bind", mem_nodes={N}))
p, n = get_backend("syscall")[0].get_mempolicy()
try:
    get_backend("libnuma")
    forced = None
except numabind.NumabindError as e:
    forced = str(e)
print(json.dumps({"info": info, "backend": r.backend, "reason": r.backend_reason, "ok": r.ok,
                  "cpus": sorted(os.sched_getaffinity(0)), "policy": [p, sorted(n)], "forced": forced}))
''', env={"_NUMABIND_LIBNUMA": "/nonexistent-numabind/libnuma.so.1"})
    info = out["info"]
    assert info["selected"] == "syscall"
    assert info["available"]["libnuma"] is False and info["available"]["syscall"] is True
    assert "cannot load /nonexistent-numabind/libnuma.so.1" in info["unavailable"]["libnuma"]
    assert "libnuma unavailable" in info["reason"] and "/nonexistent-numabind/libnuma.so.1" in info["reason"]
    assert out["backend"] == "syscall" and "libnuma unavailable" in out["reason"]
    assert out["ok"] and out["cpus"] == [CPU_A] and out["policy"] == ["bind", [MEM_NODE]]
    assert out["forced"] and "'libnuma' was forced but cannot be used" in out["forced"]


@pytest.mark.parametrize("value", ["/tmp/evil.so", "../libnuma.so.1", "libnuma.so.1; id", "libx.so\n", "",
                                   "libc.so.6", "libevil.so.1", "/usr/lib/../tmp/libnuma.so.1"])
def test_hostile_libnuma_soname_is_refused_not_loaded(value):
    out = run_json(CHILD + '''
import json, numabind
info = numabind.backend_info()
print(json.dumps({"selected": info["selected"], "why": info["unavailable"].get("libnuma", "")}))
''', env={"_NUMABIND_LIBNUMA": value})
    assert out["selected"] == "syscall"
    assert "refusing to load" in out["why"] and "_NUMABIND_LIBNUMA" in out["why"]


def _libnuma_path():
    import ctypes.util

    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib64"):
        path = os.path.join(d, "libnuma.so.1")
        if os.path.isfile(path):
            return os.path.realpath(path)
    pytest.skip(f"no libnuma.so.1 in the usual directories ({ctypes.util.find_library('numa')})")


def test_libnuma_path_only_where_no_other_user_can_write(tmp_path):
    from numabind.backends.libnuma import _libnuma_to_load

    real = _libnuma_path()
    assert _libnuma_to_load(real) == (real, "")
    assert _libnuma_to_load("libnuma.so") == ("libnuma.so", "")
    # a copy in a directory its group or others may write: refused, whoever owns it
    shared = tmp_path / "shared"
    shared.mkdir()
    lib = shared / "libnuma.so.1"
    lib.write_bytes(b"not a library")
    shared.chmod(0o777)
    target, why = _libnuma_to_load(str(lib))
    assert target is None and str(shared) in why and "writable by its group or others" in why
    # the same through a symlink from a safe place: the real path is what is checked
    shared.chmod(0o755)
    lib.chmod(0o666)
    link = tmp_path / "link.so"
    link.symlink_to(lib)
    target, why = _libnuma_to_load(str(link))
    assert target is None and str(lib) in why
    # not a regular file
    target, why = _libnuma_to_load(str(shared))
    assert target is None and "not a regular file" in why


def test_libnuma_path_of_another_user_is_refused(tmp_path):
    from numabind.backends.libnuma import _libnuma_to_load

    if os.geteuid() != 0:
        pytest.skip("making a file of another user needs root")
    d = tmp_path / "theirs"
    d.mkdir(mode=0o755)
    lib = d / "libnuma.so.1"
    lib.write_bytes(b"x")
    os.chown(lib, 65534, 65534)
    target, why = _libnuma_to_load(str(lib))
    assert target is None and "belongs to uid 65534" in why


@pytest.mark.mempolicy
def test_libnuma_by_path_is_loaded():
    out = run_json(CHILD + '''
import json, numabind
info = numabind.backend_info()
print(json.dumps({"available": info["available"]["libnuma"], "why": info["unavailable"].get("libnuma", "")}))
''', env={"_NUMABIND_LIBNUMA": _libnuma_path()})
    assert out["available"] is True, out["why"]


@kernel
def test_libnuma_forced_when_absent_is_an_error():
    cp = run_python(CHILD + '''
import numabind
numabind.bind_current(numabind.Plan(cpus={A}))
''', env={"_NUMABIND_LIBNUMA": "/nonexistent-numabind/libnuma.so.1", "NUMABIND_BACKEND": "libnuma"})
    assert cp.returncode != 0
    assert "NumabindError" in cp.stderr and "/nonexistent-numabind/libnuma.so.1" in cp.stderr


@kernel
def test_numactl_absent(empty_path):
    out = run_json(CHILD + '''
import json, numabind
from numabind.backends import get_backend
info = numabind.backend_info()
try:
    numabind.bind_current(numabind.Plan(cpus={A}), backend="numactl")
    forced = None
except numabind.NumabindError as e:
    forced = str(e)
print(json.dumps({"info": info, "forced": forced}))
''', env={"PATH": empty_path})
    info = out["info"]
    assert info["selected"] == "libnuma"
    assert info["available"]["numactl"] is False
    assert "numactl is not installed or not on PATH" in info["unavailable"]["numactl"]
    assert out["forced"] and "'numactl' was forced but cannot be used" in out["forced"]
    assert "install the numactl package" in out["forced"]


@kernel
@pytest.mark.parametrize("how", ("finder", "sys.modules"))
def test_native_module_not_importable(how):
    block = BLOCK_NATIVE if how == "finder" else "import sys; sys.modules['numabind._native'] = None\n"
    cp = run_python(block + CHILD + '''
import json, logging, os
logging.basicConfig(level=logging.DEBUG, format="%(name)s %(levelname)s %(message)s")
import numabind
info = numabind.backend_info()
r = numabind.bind_current(numabind.Plan(cpus={B}))
print(json.dumps({"info": info, "backend": r.backend, "cpus": sorted(os.sched_getaffinity(0)),
                  "reason": r.backend_reason}))
''')
    assert cp.returncode == 0, cp.stderr
    out = json.loads(cp.stdout.strip().splitlines()[-1])
    info = out["info"]
    assert info["available"] == {"libnuma": False, "syscall": False, "numactl": True, "none": True}
    for name in NATIVE:
        assert "numabind._native is not available" in info["unavailable"][name]
        assert "gcc" in info["unavailable"][name]
    assert info["selected"] == "numactl"
    assert out["backend"] == "numactl" and out["cpus"] == [CPU_B]
    assert "libnuma unavailable" in out["reason"] and "syscall unavailable" in out["reason"]
    # and it is said at DEBUG when the backends are probed
    assert "backend libnuma unavailable" in cp.stderr and "numabind._native is not available" in cp.stderr


@kernel
def test_native_and_numactl_absent_leaves_affinity_only(empty_path):
    out = run_json(BLOCK_NATIVE + CHILD + '''
import json, os, numabind
r = numabind.bind_current(numabind.Plan(cpus={A}, mem_policy="bind", mem_nodes={N}))
print(json.dumps({"info": numabind.backend_info(), "backend": r.backend, "warnings": r.warnings,
                  "cpus": sorted(os.sched_getaffinity(0))}))
''', env={"PATH": empty_path})
    assert out["info"]["selected"] == "none"
    assert set(out["info"]["unavailable"]) == {"libnuma", "syscall", "numactl"}
    assert out["backend"] == "none" and out["cpus"] == [CPU_A]
    assert any("ENOTSUP" in w and "set_mempolicy" in w for w in out["warnings"])


@kernel
def test_backend_failures_are_logged_at_debug(caplog, fresh_backends, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with caplog.at_level(logging.DEBUG, logger="numabind"):
        info = backend_info()
    assert info["available"]["numactl"] is False
    assert any("backend numactl unavailable" in r.getMessage() for r in caplog.records
               if r.levelno == logging.DEBUG)


@kernel
def test_node_pages_reads_all_of_numa_maps():
    """numa_maps is a seq file: each read(2) returns one batch, short of a page; the count covers every line."""
    from numabind._proc import node_pages

    big = [bytearray(1 << 16) for _ in range(300)]   # many mappings: numa_maps far larger than one read
    for b in big:
        b[0] = 1
    with open("/proc/self/numa_maps") as f:
        text = f.read()
    assert len(text) > 8192
    counts = node_pages()
    assert counts is not None
    independent = sum(int(n) for line in text.splitlines() for n in
                      (w.split("=", 1)[1] for w in line.split() if w[:1] == "N" and "=" in w and w[1:2].isdigit()))
    assert abs(sum(counts.total.values()) - independent) < 256, (sum(counts.total.values()), independent)
    for bad in ("../self", "1/../../self", -1, True, "1 "):
        assert node_pages(bad) is None
    del big
