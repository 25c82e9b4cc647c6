"""What a new user meets in the first hour (issue 30): refusals that name their fix, ``backend_info()`` saying
what the native core is, global options before every subcommand, and a first screen (``numabind``) in words:
the replayed machine apart from the live process, a plan table without reasons or errors in its cells, and a
WARNING for the GPUs a pod's cpuset keeps away from. The second pass (issue 42): an impossible plan is never
silent, a replayed machine is planned as itself with the cpuset as a rank's limit, and numabind's own XML export
replays with its GPUs.

Refusals are faked at the backend boundary (the C functions a :class:`~numabind.backends.SyscallBackend`
calls return ``-errno``) and one is real: a seccomp filter in a child (tests/kernel.py's ``SECCOMP``).
"""

from __future__ import annotations

import errno
import json
import subprocess
import types

import pytest

import numabind
from numabind.backends import SyscallBackend, refused
from numabind.errors import BindError, refusal_fix
from tests.fakegpu import eight_gpu_box
from tests.fakesys import two_sockets
from tests.kernel import CPU_A, MEM_NODE, SECCOMP, child_env, mempolicy_refusal, numabind_cli, run_json
from tests.kernel import run_main

kernel = pytest.mark.kernel
pytestmark = pytest.mark.usefixtures("no_gpu_env")


# --------------------------------------------------------------------------- refusals name their fix
def _faked(monkeypatch, name: str, err: int) -> SyscallBackend:
    """A syscall backend whose C function ``name`` returns ``-err`` (the kernel's refusal, without the kernel)."""
    be = SyscallBackend()
    if name == "sched_setaffinity":
        monkeypatch.setattr(be, "_setaff", lambda tid, bits, mask: -err)
    else:
        monkeypatch.setitem(be._fn, name, lambda *args: -err)
    return be


def _fixes_once(text: str) -> None:
    assert text.count("likely cause:") == 1 and text.count("fix:") == 1, text
    assert text.count("--lenient") == 1, text


@pytest.mark.parametrize("call", ["set_mempolicy", "migrate_pages"])
def test_a_memory_call_refused_with_eperm_names_cap_sys_nice_seccomp_and_lenient(monkeypatch, call):
    be = _faked(monkeypatch, call, errno.EPERM)
    with pytest.raises(BindError) as exc:
        if call == "set_mempolicy":
            be.set_mempolicy("bind", frozenset({MEM_NODE}))
        else:
            be.migrate_pages(0, frozenset({MEM_NODE}), frozenset({MEM_NODE}))
    text = str(exc.value)
    assert text.startswith(f"{call} failed with EPERM (Operation not permitted): ")
    for words in ("CAP_SYS_NICE", "--cap-add SYS_NICE", "securityContext.capabilities.add", "seccomp profile",
                  f"allows {call}", "--lenient"):
        assert words in text, (words, text)
    _fixes_once(text)
    assert exc.value.fix and exc.value.brief + "; " + exc.value.fix == text


def test_mbind_refused_with_eperm_names_the_fix(monkeypatch):
    from numabind.backends.range import mbind_range

    be = SyscallBackend()
    monkeypatch.setattr(be, "lib", types.SimpleNamespace(**{be.prefix + "mbind": lambda *args: -errno.EPERM}))
    with pytest.raises(BindError) as exc:
        mbind_range(be, 4096, 4096, "bind", frozenset({MEM_NODE}), 0)
    assert exc.value.syscall == "mbind" and "--cap-add SYS_NICE" in str(exc.value)
    assert "seccomp profile that allows mbind" in str(exc.value)
    _fixes_once(str(exc.value))


def test_sched_setaffinity_refused_with_eperm_names_seccomp_and_the_capability(monkeypatch):
    be = _faked(monkeypatch, "sched_setaffinity", errno.EPERM)
    with pytest.raises(BindError) as exc:
        be.set_affinity(0, frozenset({CPU_A}))
    text = str(exc.value)
    assert text.startswith("sched_setaffinity failed with EPERM (Operation not permitted): thread 0; likely cause")
    assert "seccomp profile that allows sched_setaffinity" in text and "CAP_SYS_NICE" in text
    _fixes_once(text)


def test_sched_setaffinity_refused_with_einval_names_the_cpusets_cpus(monkeypatch):
    allowed = numabind.format_cpulist(numabind.live.limits().allowed_cpus)
    be = _faked(monkeypatch, "sched_setaffinity", errno.EINVAL)
    with pytest.raises(BindError) as exc:
        be.set_affinity(0, frozenset({CPU_A}))
    text = str(exc.value)
    assert f"outside the thread's cpuset (the cpuset allows CPUs {allowed})" in text, text
    assert "widen it" in text and "--cpuset-cpus" in text
    _fixes_once(text)
    assert exc.value.cpuset == allowed


def _bind_with(monkeypatch, be: SyscallBackend, plan: numabind.Plan, strict) -> numabind.BindReport:
    """bind_current step by step (no one-call bind) through the faked backend ``be``."""
    monkeypatch.setattr(be, "apply_all", lambda *args, **kwargs: None)
    import numabind.bind

    monkeypatch.setattr(numabind.bind, "get_backend", lambda name=None: (be, "faked"))
    return numabind.bind_current(plan, strict=strict, threads="current", backend="syscall")


def test_a_lenient_bind_says_the_fix_of_a_refused_memory_policy_once_for_every_step(monkeypatch):
    """set_mempolicy refused (EPERM) at every step of the ladder (bind, then preferred): each step is a warning,
    the fix is said in the first one only."""
    be = _faked(monkeypatch, "set_mempolicy", errno.EPERM)

    def swap(mode, mask, bits, need_old, ints, masks, now, now_masks, errors):   # the old policy read, the set refused
        ints[2], ints[3], ints[4] = 0, -errno.EPERM, 0

    monkeypatch.setitem(be._fn, "swap_mempolicy", swap)
    report = _bind_with(monkeypatch, be, numabind.Plan(mem_policy="bind", mem_nodes={MEM_NODE}), False)
    refusals = [w for w in report.warnings if "set_mempolicy failed with EPERM" in w]
    assert len(refusals) == 2 and "memory policy bind" in refusals[0] and "preferred" in refusals[1], report.warnings
    _fixes_once("\n".join(report.warnings))
    assert refusals[0].count("likely cause:") == 1, refusals


@pytest.mark.parametrize("strict", [True, False])
def test_a_bind_refused_by_the_cpuset_names_its_cpus(monkeypatch, strict):
    """sched_setaffinity refused with EINVAL for the calling thread: the message names the cpuset's CPUs."""
    allowed = numabind.format_cpulist(numabind.live.limits().allowed_cpus)
    be = SyscallBackend()

    def walk(ints, n, mask, words, flags, before, after, status):   # every thread refused
        for i in range(n):
            status[i] = -errno.EINVAL
        return n

    monkeypatch.setitem(be._fn, "affinity_many", walk)
    plan = numabind.Plan(cpus={CPU_A})
    if strict:
        with pytest.raises(BindError) as exc:
            _bind_with(monkeypatch, be, plan, True)
        text = str(exc.value)
    else:
        text = "\n".join(_bind_with(monkeypatch, be, plan, False).warnings)
    assert f"outside the thread's cpuset (the cpuset allows CPUs {allowed})" in text, text
    _fixes_once(text)


def test_a_refusal_quoted_in_another_error_is_said_once():
    inner = BindError(errno.EPERM, "get_mempolicy", "calling thread")
    outer = BindError(errno.EPERM, "get_mempolicy", f"the calling thread's memory policy cannot be read ({inner}), "
                                                    f"so a strict bind could not be rolled back")
    text = str(outer)
    assert text.count("get_mempolicy failed with EPERM") == 1, text
    _fixes_once(text)
    again = BindError(inner.errno, inner.syscall, f"{inner.detail}; nothing was changed")
    _fixes_once(str(again))


def test_the_fix_survives_pickling_and_a_caller_may_give_its_own():
    import pickle

    e = refused(errno.EINVAL, "sched_setaffinity", "thread 1")
    assert str(pickle.loads(pickle.dumps(e))) == str(e)
    own = BindError(errno.EPERM, "sched_setaffinity", "thread 7 of pid 9", fix="run numabind move as its owner")
    assert str(own).endswith("thread 7 of pid 9; run numabind move as its owner") and "seccomp" not in str(own)
    assert str(pickle.loads(pickle.dumps(own))) == str(own)
    assert refusal_fix(errno.ENOMEM, "set_mempolicy") == "" and refusal_fix(errno.EPERM, "open") == ""


@kernel
def test_a_real_seccomp_refusal_names_the_fix_once():
    if mempolicy_refusal():
        pytest.skip(mempolicy_refusal())
    out = run_json(SECCOMP + f'''
import json, numabind
deny("set_mempolicy", "mbind")
try:
    numabind.bind_current(numabind.Plan(cpus={{{CPU_A}}}, mem_policy="bind", mem_nodes={{{MEM_NODE}}}), strict=True,
                          backend="syscall")
    print(json.dumps(None))
except numabind.BindError as e:
    print(json.dumps(str(e)))
''')
    assert out is not None and out.startswith("set_mempolicy failed with EPERM"), out
    assert "--cap-add SYS_NICE" in out and "seccomp profile that allows set_mempolicy" in out
    _fixes_once(out)


# --------------------------------------------------------------------------- backend_info()["native"]
def test_backend_info_says_what_the_native_core_is():
    from numabind import _native

    info = numabind.backend_info()
    assert info["native_ok"] is True
    built = _native.ffi.string(_native.lib.nb_version()).decode()
    assert info["native"] == f"numabind._native {built} loaded from {_native.__file__}"
    assert built == numabind.__version__


# --------------------------------------------------------------------------- global options before the subcommand
@pytest.fixture(scope="module")
def sleeper():
    proc = subprocess.Popen(["sleep", "60"])
    yield proc.pid
    proc.kill()
    proc.wait()


#: Every subcommand that prints: its arguments, and whether it reads this host's kernel (marker kernel).
SUBCOMMANDS = [
    pytest.param("hardware", [], id="hardware"),
    pytest.param("topology", [], id="topology"),
    pytest.param("plan", [], id="plan"),
    pytest.param("show", [], id="show", marks=kernel),
    pytest.param("stat", ["{pid}"], id="stat", marks=kernel),
    pytest.param("move", ["{pid}", "--node", str(MEM_NODE)], id="move", marks=kernel),
    pytest.param("run", ["-C", str(CPU_A), "--", "true"], id="run", marks=kernel),
]


def _keys(value):
    """The shape of a JSON document: its keys (of its first item, for a list), not values that move."""
    if isinstance(value, list):
        return ["list", len(value), _keys(value[0]) if value else None]
    return sorted(value) if isinstance(value, dict) else type(value).__name__


def _json_of(cp: subprocess.CompletedProcess, sub: str):
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stderr if sub == "run" else cp.stdout)   # run's report goes to stderr, before the exec


@pytest.mark.parametrize("sub, rest", SUBCOMMANDS)
def test_json_before_the_subcommand_is_the_same_as_after_it(sub, rest, sleeper):
    rest = [a.format(pid=sleeper) for a in rest]
    before = numabind_cli("--json", sub, *rest)
    after = numabind_cli(sub, "--json", *rest)
    plain = numabind_cli(sub, *rest)
    first, second = _json_of(before, sub), _json_of(after, sub)
    assert first and _keys(first) == _keys(second), (before.stdout, after.stdout)   # free memory may move
    assert plain.returncode == 0, plain.stderr
    with pytest.raises(json.JSONDecodeError):
        json.loads(plain.stdout if sub != "run" else plain.stderr or "not json")


@pytest.mark.parametrize("sub", ["", "hardware", "topology", "plan"])
def test_root_before_the_subcommand_is_the_same_as_after_it(tmp_path, sub):
    two_sockets(tmp_path, 8)
    args = [sub] if sub else []
    before = numabind_cli("--root", str(tmp_path), "--json", *args)
    after = numabind_cli(*args, "--root", str(tmp_path), "--json") if sub else before
    assert before.returncode == after.returncode == 0, before.stderr + after.stderr
    text = before.stdout
    assert "0-3,8-11" in text and "4-7,12-15" in text          # the fake machine's nodes, not this host's
    if sub in ("hardware", "topology", "plan"):
        assert json.loads(before.stdout) == json.loads(after.stdout)


# --------------------------------------------------------------------------- the first screen
def _pod(root, cpus, mems):
    """An 8-GPU two-socket box (GPUs 0-3 on node 0, 4-7 on node 1; node 0: CPUs 0-3,8-11) seen from a pod
    whose cgroup v2 cpuset (``cpuset.cpus.effective``/``cpuset.mems.effective``) is ``cpus``/``mems``."""
    m = two_sockets(root, 8)
    if cpus is not None:
        m.set_cgroup2("/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope", cpus, mems)
    m.write()
    eight_gpu_box(root, "nvidia")
    return str(root)


NODE0_CPUS, NODE1_CPUS = (0, 1, 2, 3, 8, 9, 10, 11), (4, 5, 6, 7, 12, 13, 14, 15)


def _section(out: str, name: str) -> str:
    return out.split(f"== {name} ==")[1].split("\n== ")[0].split("\n####")[0]


def test_the_first_screen_says_the_cpuset_in_words(capsys, tmp_path):
    rc, out, _ = run_main(capsys, "--root", _pod(tmp_path, NODE0_CPUS, (0,)))
    assert rc == 0
    assert ("the replayed process may use CPUs 0-3,8-11 and memory of node 0 (cpuset: cgroup v2 "
            "/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope)") in out
    for jargon in ("status+", "cgroup2:", "sched_getaffinity", "allowed cpus:"):
        assert jargon not in out, jargon


@pytest.mark.parametrize("source, words", [
    ("sched_getaffinity+status+cgroup1:/", "cpuset: cgroup v1 /"),
    ("status+cgroup2:/a/b", "cpuset: cgroup v2 /a/b"),
    ("status+cpuset:/x", "cpuset: the legacy cpuset filesystem /x"),
    ("status", "no cpuset: every online CPU"),
    ("online", "no cpuset: every online CPU"),
])
def test_where_the_limits_come_from_in_words(source, words):
    from numabind.cli.look import source_words as _source_words

    assert _source_words(source) == words


def test_under_root_the_replayed_machine_and_the_live_process_are_apart(capsys, tmp_path):
    root = _pod(tmp_path, None, None)
    rc, out, _ = run_main(capsys, "--root", root)
    assert rc == 0
    replayed = out.index(f"the replayed machine, read from {root} (not the host this runs on)")
    live = out.index("this host, live: the process running numabind (not the replayed machine)")
    assert replayed < out.index("== topology ==") < out.index("== plans ==") < live
    assert live < out.index("== current binding of this process ==") < out.index("== backends ==")
    rc, here, _ = run_main(capsys)     # the live machine: no such headings
    assert rc == 0 and "replayed" not in here and "this process may use CPUs" in here


def test_eight_gpus_plan_table_has_one_line_per_gpu_and_errors_below(capsys, tmp_path):
    rc, out, _ = run_main(capsys, "--root", _pod(tmp_path, NODE0_CPUS, (0,)))
    assert rc == 0
    plans = _section(out, "plans")
    lines = plans.strip().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("gpu "))
    rows = lines[header + 1:header + 9]
    assert [r.split()[0] for r in rows] == [str(k) for k in range(8)]
    for r in rows[:4]:
        assert "cpus 0-3,8-11, memory bind 0" in r and "--physcpubind=0-3,8-11 --membind=0" in r
    for r in rows[4:]:   # no error text inside the table
        assert r.split()[1:] == ["-", "cannot", "place", "(see", "below)", "-"], r
    below = lines[header + 9:]
    errors = [line for line in below if "cannot be placed" in line]
    assert len(errors) == 1 and errors[0].startswith("gpus 4-7 cannot be placed: node 1 has CPUs 4-7,12-15"), below
    for k in range(8):   # no reason lines per GPU
        assert not any(line.lstrip().startswith(f"gpu {k}:") for line in below), below
    assert len(below) <= 4, below


def test_a_gpu_outside_the_pods_nodes_gets_a_warning(capsys, tmp_path):
    rc, out, _ = run_main(capsys, "--root", _pod(tmp_path, NODE0_CPUS, (0,)))
    assert rc == 0
    warnings = [line for line in out.splitlines() if line.startswith("WARNING:")]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("WARNING: gpus 4-7 on node 1: the replayed process may use none of node 1's "
                                  "CPUs or memory, only CPUs 0-3,8-11 and memory of node 0 (cpuset: cgroup v2 ")
    assert "single-numa-node" in warnings[0]


@pytest.mark.parametrize("cpus, mems, expected", [
    (NODE1_CPUS, (1,), ["gpus 0-3 on node 0: the replayed process may use none of node 0's CPUs or memory"]),
    (NODE0_CPUS + NODE1_CPUS, (0,), ["gpus 4-7 on node 1: the replayed process may use none of node 1's memory"]),
    (NODE0_CPUS + NODE1_CPUS, (0, 1), []),
    (None, None, []),                                    # no cpuset at all
    ((0, 1, 4, 5), (0, 1), []),                          # a CPU or two of each node: aligned enough
])
def test_alignment_warnings_of_pods(tmp_path, cpus, mems, expected):
    from numabind.cli.overview import alignment_warnings

    topo = numabind.discover(_pod(tmp_path, cpus, mems))
    got = alignment_warnings(topo, "the replayed process")
    assert [w.split(", only")[0] for w in got] == expected, got


@kernel
def test_the_live_first_screen_names_the_native_core():
    cp = numabind_cli(env=child_env())
    assert cp.returncode == 0, cp.stderr
    assert f"native core: numabind._native {numabind.__version__} loaded from " in cp.stdout
    assert "WARNING:" not in cp.stdout      # no GPU here: nothing to misalign


# --------------------------------------------------------------------------- the second pass (issue 42 items 1-4)
# End to end, as a newcomer meets them; each item's full coverage: tests/test_impossible_plans.py (1),
# tests/test_replayed_plans.py (2, 3), tests/vm/test_vm_rank_rule.py (3, in the 3-node guest),
# tests/test_xml_export_replay.py (4).
def test_an_impossible_plan_is_never_silent(capsys):
    """Item 1: CPUs or nodes the machine lacks are a PlanError at the README's entry points, and numabind run
    says so before it runs anything; nothing changed."""
    import os

    cpus, absent_cpu = os.sched_getaffinity(0), max(numabind.discover().online_cpus) + 1000
    absent_node = max(numabind.discover().nodes) + 1000
    plan = numabind.Plan(cpus={absent_cpu}, mem_policy="bind", mem_nodes={absent_node})
    for call in (lambda: numabind.bind_current(plan), lambda: numabind.bind_current(plan, strict=False),
                 lambda: numabind.configure_subprocess(numabind.Plan(cpus={absent_cpu})).__enter__(),
                 lambda: numabind.pool_plans([plan])):
        with pytest.raises(numabind.PlanError, match=f"CPUs {absent_cpu}"):
            call()
    assert os.sched_getaffinity(0) == cpus
    rc, out, err = run_main(capsys, "run", "-C", str(absent_cpu), "--", "true")
    assert rc == 1 and out == "" and "not online" in err and " -a" not in err, err


def _launcher_box(root):
    """Two sockets, eight GPUs, and a replayed process the launcher started on node 0's CPUs."""
    m = two_sockets(root, cpus_per_socket=8)
    m.set_status(sorted(m.nodes[0].cpus), None).write()
    eight_gpu_box(root, "nvidia")
    return str(root)


def test_a_replayed_rank_is_planned_as_that_machine_and_the_cpuset_is_the_limit(tmp_path, capsys, monkeypatch):
    """Items 2 and 3: on a replayed root, plan --gpu-from-rank and run --gpu-from-rank --dry-run give the same
    plan, from the replayed machine alone (not this host's affinity); the launcher's CPUs are replaced unless
    --within-affinity, which refuses under --strict naming the launcher flags."""
    root = _launcher_box(tmp_path / "box")
    topo = numabind.discover(root)
    node1 = numabind.format_cpulist(topo.nodes[1].cpus)
    monkeypatch.setenv("SLURM_LOCALID", "5")             # GPU 5: node 1, outside the replayed affinity
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", "8")
    rc, out, err = run_main(capsys, "--root", root, "plan", "--gpu-from-rank", "--json")
    assert rc == 0, err
    planned = json.loads(out)["plan"]
    rc, out, err = run_main(capsys, "--root", root, "run", "--gpu-from-rank", "--dry-run", "--json", "--", "true")
    assert rc == 0, err
    dry = json.loads(out)["plan"]
    assert (planned["cpus"], planned["mem_nodes"]) == (dry["cpus"], dry["mem_nodes"]) == (node1, "1")
    rc, _, err = run_main(capsys, "--root", root, "run", "--gpu-from-rank", "--dry-run", "--within-affinity",
                          "--strict", "--", "true")
    assert rc == 1 and "srun --cpu-bind=none" in err and "mpirun --bind-to none" in err, err


def test_numabinds_own_export_replays_with_its_gpus(tmp_path, capsys):
    """Item 4: "send me your numabind topology --of xml" works: the replay plans every GPU as the machine does,
    and run --gpus N --dry-run gives the same lines."""
    root = tmp_path / "box"
    two_sockets(root, cpus_per_socket=112)     # the CPUs the box's GPUs name as local (tests/fakegpu.py)
    eight_gpu_box(root, "nvidia")
    rc, xml, err = run_main(capsys, "--root", str(root), "topology", "--of", "xml")
    assert rc == 0, err
    export = tmp_path / "box.xml"
    export.write_text(xml)
    for argv in (["plan", "--all", "--json"], ["run", "--gpus", "5", "--dry-run", "--json", "--", "true"]):
        rc, source, err = run_main(capsys, "--root", str(root), *argv)
        assert rc == 0, err
        rc, replay, err = run_main(capsys, "--root", str(export), *argv)
        assert rc == 0 and replay == source, err
    assert "uncertain" not in json.dumps(numabind.discover(str(export)).to_dict()).lower()
