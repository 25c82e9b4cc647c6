"""An impossible plan is never silent (issue 42 §1).

A plan that names CPUs or NUMA nodes this machine does not have (absent, or offline) is a PlanError at every
entry point, in every strictness mode, before anything is changed; birth-time binding raises in the parent, so no
child starts unbound. Lenient mode is for what the kernel or the cpuset refuses at apply time, and a degradation
is said on stderr once per distinct cause even where no logging is configured (``numabind.BindWarning``), which
the usual means (warnings filters, logging configuration) silence.

The CPUs and nodes are derived from the machine the tests run on: an absent CPU is ``max(online) + 1000``, an
absent node ``max(nodes) + 1000``; an offline CPU is a real one where the machine has one, else one that a
replayed ``/sys`` (live's reader pointed at a fake root) lists as present but not online.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import subprocess
import sys
import textwrap

import pytest

import numabind
from numabind import Plan, PlanError, live
from numabind._fs import FsReader
from numabind.cpulist import format_cpulist
from tests.kernel import (ROOT, SECCOMP, child_env, ids_of, mempolicy_refusal, numabind_cli, raw_word, run_python,
                          thread_affinities)

STRICT_MODES = (True, False, "partial", None)   # None: NUMABIND_STRICT, unset here (lenient)
ONLINE = ids_of(open("/sys/devices/system/cpu/online").read())
NODES = ids_of(open("/sys/devices/system/node/online").read()) if os.path.exists(
    "/sys/devices/system/node/online") else frozenset({0})
ABSENT_CPU = max(ONLINE) + 1000
ABSENT_NODE = max(NODES) + 1000
_present = "/sys/devices/system/cpu/present"
REAL_OFFLINE = sorted((ids_of(open(_present).read()) if os.path.exists(_present) else ONLINE) - ONLINE)


@pytest.fixture
def offline_cpu(tmp_path, monkeypatch):
    """A CPU this machine has but not online: a real one, else one a replayed /sys lists as present only."""
    if REAL_OFFLINE:
        return REAL_OFFLINE[0]
    cpu = max(ONLINE) + 1000
    sysdir = tmp_path / "sys" / "devices" / "system"
    (sysdir / "cpu").mkdir(parents=True)
    (sysdir / "node").mkdir(parents=True)
    (sysdir / "cpu" / "online").write_text(format_cpulist(ONLINE) + "\n")
    (sysdir / "cpu" / "present").write_text(format_cpulist(ONLINE | {cpu}) + "\n")
    (sysdir / "node" / "online").write_text(format_cpulist(NODES) + "\n")
    monkeypatch.setattr(live, "_reader", FsReader(tmp_path))
    live.forget_mask_bits()
    yield cpu
    live.forget_mask_bits()


def _plan(case: str, offline: int | None = None) -> Plan:
    node = min(NODES)
    if case == "absent CPU":
        return Plan(cpus={min(ONLINE), ABSENT_CPU}, mem_policy="bind", mem_nodes={node})
    if case == "absent node":
        return Plan(cpus={min(ONLINE)}, mem_policy="interleave", mem_nodes={node, ABSENT_NODE})
    assert offline is not None
    return Plan(cpus={min(ONLINE), offline})


def _said(case: str, message: str, offline: int | None = None) -> None:
    """The message names what is missing, absent or offline, what the machine has, and the fix."""
    if case == "absent CPU":
        assert f"CPUs {ABSENT_CPU} do not exist" in message and f"online: {format_cpulist(ONLINE)}" in message
    elif case == "absent node":
        assert f"NUMA nodes {ABSENT_NODE} do not exist (nodes: {format_cpulist(NODES)})" in message
    else:
        assert f"CPUs {offline} are offline" in message and f"online: {format_cpulist(ONLINE)}" in message
    assert "no strictness mode binds" in message and "numabind hardware" in message


@pytest.fixture(params=("absent CPU", "absent node", "offline CPU"))
def impossible(request):
    """(case, plan, offline CPU or None) for each kind of plan the machine cannot hold."""
    offline = request.getfixturevalue("offline_cpu") if request.param == "offline CPU" else None
    return request.param, _plan(request.param, offline), offline


def _state() -> tuple[object, object]:
    return thread_affinities(), (raw_word() if mempolicy_refusal() is None else None)


# ----------------------------------------------------------------------------- in this process
@pytest.mark.kernel
@pytest.mark.parametrize("strict", STRICT_MODES)
def test_bind_current_refuses_before_changing_anything(impossible, strict):
    case, plan, offline = impossible
    before = _state()
    with pytest.raises(PlanError) as exc:
        numabind.bind_current(plan, strict=strict)
    assert _state() == before
    assert str(exc.value).startswith("bind_current: ")
    _said(case, str(exc.value), offline)


@pytest.mark.kernel
@pytest.mark.parametrize("strict", STRICT_MODES)
def test_bind_thread_refuses_before_changing_anything(impossible, strict):
    case, plan, offline = impossible
    before = _state()
    with pytest.raises(PlanError) as exc:
        with numabind.bind_thread(plan, strict=strict):
            raise AssertionError("the block ran under an impossible plan")
    assert _state() == before
    _said(case, str(exc.value), offline)


@pytest.mark.kernel
@pytest.mark.parametrize("strict", STRICT_MODES)
def test_pin_threads_refuses_before_touching_a_thread(impossible, strict):
    case, plan, offline = impossible
    if plan.cpus is None:
        pytest.skip("pin_threads places CPUs")
    before = _state()
    with pytest.raises(PlanError) as exc:
        numabind.pin_threads(plan, [os.getpid()], strict=strict)
    assert _state() == before
    _said(case, str(exc.value), offline)


@pytest.mark.parametrize("strict", STRICT_MODES)
def test_configure_subprocess_refuses_in_the_parent_and_starts_no_child(impossible, strict):
    import multiprocessing.spawn as mp_spawn
    import multiprocessing.util as mp_util

    case, plan, offline = impossible
    hooks = (mp_spawn.get_preparation_data, mp_util.spawnv_passfds)
    before = _state()
    with pytest.raises(PlanError) as exc:
        with numabind.configure_subprocess(plan, strict=strict):
            raise AssertionError("the block ran: a child could have started unbound")
    assert (mp_spawn.get_preparation_data, mp_util.spawnv_passfds) == hooks     # nothing was installed
    assert _state() == before
    assert str(exc.value).startswith("configure_subprocess: ")
    _said(case, str(exc.value), offline)


def test_a_plan_the_machine_has_passes_the_check():
    here = Plan(cpus=os.sched_getaffinity(0), mem_policy="bind", mem_nodes={min(NODES)})
    assert live.check_present(here, "here") is None and live.check_present(Plan(), "here") is None
    with pytest.raises(PlanError, match="^here: "):      # the same check refuses what the machine lacks
        live.check_present(Plan(cpus=set(here.cpus) | {ABSENT_CPU}), "here")


def test_bind_warning_is_exported_as_a_runtime_warning():
    assert numabind.BindWarning is numabind.errors.BindWarning
    assert issubclass(numabind.BindWarning, RuntimeWarning) and "BindWarning" in numabind.__all__


# ----------------------------------------------------------------------------- in children
_INITIALIZER = """
import multiprocessing, sys, numabind
plan = numabind.Plan(cpus={{{cpu}}})
ctx = multiprocessing.get_context("fork")
for strict in (True, False, "partial", None):
    p = ctx.Process(target=numabind.bind_current, args=(plan,), kwargs={{"strict": strict}})
    p.start()
    p.join()
    print("exit", p.exitcode)
"""


@pytest.mark.kernel
def test_the_multiprocessing_initializer_raises_in_every_mode():
    """``Pool(initializer=numabind.bind_current, initargs=(plan,))`` runs bind_current in the worker: it raises
    there (the worker dies with the PlanError on its stderr) instead of returning a report nobody reads."""
    cp = run_python(_INITIALIZER.format(cpu=ABSENT_CPU))
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.split() == ["exit", "1"] * 4, cp.stdout
    assert cp.stderr.count("numabind.errors.PlanError: bind_current: ") == 4, cp.stderr


@pytest.mark.kernel
@pytest.mark.parametrize("mode", ("--strict", "--lenient"))
def test_wrap_command_never_runs_the_command_unbound(tmp_path, mode):
    marker = tmp_path / "ran"
    strict = mode == "--strict"
    argv = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    try:
        wrapped = numabind.wrap_command(Plan(cpus={ABSENT_CPU}), argv, strict=strict)
    except PlanError:
        return     # refused in the parent (the change proposed for process/commands.py): even better
    cp = subprocess.run(wrapped, capture_output=True, text=True, timeout=120, env=child_env())
    assert cp.returncode == 1 and not marker.exists(), (cp.returncode, cp.stderr)
    assert f"CPUs {ABSENT_CPU} do not exist" in cp.stderr


def _touch(path: str) -> None:
    open(path, "w").close()


@pytest.mark.kernel
@pytest.mark.parametrize("strict", (True, False))
def test_bound_never_calls_the_function_unbound(tmp_path, strict):
    marker = tmp_path / "ran"
    try:
        target = numabind.bound(Plan(cpus={ABSENT_CPU}), _touch, strict=strict)
    except PlanError:
        return     # refused in the parent (the change proposed for process/commands.py): even better
    p = multiprocessing.get_context("fork").Process(target=target, args=(str(marker),))
    p.start()
    p.join(60)
    assert p.exitcode == 1 and not marker.exists()


@pytest.mark.parametrize("strict", STRICT_MODES)
def test_wrap_command_refuses_in_the_parent(strict):
    with pytest.raises(PlanError, match="do not exist"):
        numabind.wrap_command(Plan(cpus={ABSENT_CPU}), ["true"], strict=strict)
    with pytest.raises(PlanError, match="do not exist"):
        numabind.popen_kwargs(Plan(cpus={ABSENT_CPU}), strict=strict)


@pytest.mark.parametrize("strict", STRICT_MODES)
def test_bound_refuses_in_the_parent(strict):
    with pytest.raises(PlanError, match="do not exist"):
        numabind.bound(Plan(cpus={ABSENT_CPU}), print, strict=strict)


@pytest.mark.parametrize("strict", STRICT_MODES)
def test_move_refuses_before_touching_the_process(strict):
    """``move`` checks the plan against the machine through numabind.live.check_present, the one home of the
    check and its words, before it touches the process."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        before = os.sched_getaffinity(child.pid)
        with pytest.raises(PlanError, match=f"CPUs {ABSENT_CPU}"):
            numabind.move(child.pid, Plan(cpus={min(ONLINE), ABSENT_CPU}), strict=strict)
        assert os.sched_getaffinity(child.pid) == before
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("mode", ("--strict", "--lenient"))
def test_numabind_run_refuses_an_absent_cpu(tmp_path, mode):
    """``numabind run`` validates the plan against the live machine before it binds (and binds through
    bind_current): the command never runs."""
    marker = tmp_path / "ran"
    cp = numabind_cli("run", mode, f"--physcpubind={min(ONLINE)},{ABSENT_CPU}", "--", sys.executable, "-c",
                      f"open({str(marker)!r}, 'w').close()")
    assert cp.returncode == 1 and not marker.exists(), cp.stderr
    assert f"CPUs {ABSENT_CPU}" in cp.stderr


# ----------------------------------------------------------------------------- a lenient degradation is said
_DEGRADE = """
import json, sys
{setup}
import numabind
deny("set_mempolicy")             # the kernel refuses every memory policy: a degradation at apply time
node = {node}
seen = []
for plan in [numabind.Plan(mem_policy="bind", mem_nodes={{node}})] * 2 + [numabind.Plan(mem_policy="preferred",
                                                                                        mem_nodes={{node}})]:
    seen.append(list(numabind.bind_current(plan, strict=False).warnings))
    sys.stderr.flush()
    print("--- bind", file=sys.stderr, flush=True)
print(json.dumps(seen))
"""


def _degrade(setup: str = "", args: tuple[str, ...] = (), env: dict | None = None) -> tuple[list, list[str]]:
    """Run three lenient binds in a child whose memory-policy calls are refused (the same plan twice, then
    another): (the warnings of each report, the child's stderr split at each bind)."""
    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip(f"the seccomp filter of tests/kernel.py knows no {platform.machine()}")
    if mempolicy_refusal() is not None:
        pytest.skip(mempolicy_refusal())
    code = SECCOMP + textwrap.dedent(_DEGRADE.format(setup=setup, node=min(NODES)))
    cp = subprocess.run([sys.executable, *args, "-c", code], capture_output=True, text=True, timeout=120,
                        env=child_env(**(env or {})), cwd=ROOT)
    assert cp.returncode == 0, cp.stderr
    import json

    parts = cp.stderr.split("--- bind\n")
    return json.loads(cp.stdout.strip().splitlines()[-1]), [p.splitlines() for p in parts[:3]]


@pytest.mark.kernel
def test_a_lenient_degradation_is_said_once_per_cause_without_logging():
    reports, said = _degrade()
    first, again, other = reports
    assert first and first == again and other           # the kernel refused: every bind degraded
    assert all(line.startswith("numabind.bind:0: BindWarning: ") for part in said for line in part), said
    # the first bind: one line per cause
    assert [line.split(": BindWarning: ", 1)[1] for line in said[0]] == first
    assert said[1] == []                                 # the same causes again: nothing more
    # another plan: only its causes not said before (its preferred step was the first plan's too)
    new = [w for w in other if w not in first]
    assert new and [line.split(": BindWarning: ", 1)[1] for line in said[2]] == new


@pytest.mark.kernel
@pytest.mark.parametrize("how", ("-W ignore:::numabind", "-W ignore::numabind.BindWarning", "filterwarnings",
                                 "logging filter", "logging level"))
def test_the_usual_means_silence_it(how):
    setup, args, env = "", (), None
    if how.startswith("-W"):
        args = tuple(how.split(" "))
        # Python reads -W before site-packages is on sys.path: a category by name needs numabind importable then
        env = {"PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "src"), ROOT])}
    elif how == "filterwarnings":
        setup = "import warnings, numabind\nwarnings.filterwarnings('ignore', category=numabind.BindWarning)"
    elif how == "logging filter":
        setup = ("import logging\nlogging.basicConfig()\n"
                 "logging.getLogger().handlers[0].addFilter(lambda r: not r.name.startswith('numabind'))")
    else:
        setup = "import logging\nlogging.getLogger('numabind').setLevel(logging.ERROR)"
    reports, said = _degrade(setup, args, env)
    assert reports[0] and said == [[], [], []], said


@pytest.mark.kernel
def test_configured_logging_says_it_once_not_twice():
    """A program that configured logging gets the WARNING records, and no BindWarning beside them."""
    reports, said = _degrade("import logging\nlogging.basicConfig(format='%(name)s: %(levelname)s: %(message)s')")
    lines = [line for part in said for line in part]
    assert not any("BindWarning" in line for line in lines), lines
    assert [line for line in said[0]] == [f"numabind.bind: WARNING: {w}" for w in reports[0]]


def test_pool_plans_refuses_in_the_parent():
    """A Pool restarts a worker whose initializer raised, forever: an absent CPU is refused before any starts."""
    with pytest.raises(PlanError, match=r"pool_plans \(plan 1\).*do not exist"):
        numabind.pool_plans([Plan(cpus=frozenset(os.sched_getaffinity(0))), Plan(cpus={ABSENT_CPU})])
