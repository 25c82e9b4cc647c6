"""Weighted interleave (MPOL_WEIGHTED_INTERLEAVE, Linux 6.9+) on the real kernel of this host.

Every binding happens in a child process (``run_python``), so the test process keeps its own policy.
The kernel's own view is read without numabind: ``get_mempolicy`` through ctypes (mode 6 is
MPOL_WEIGHTED_INTERLEAVE, which tests/proc_targets.py names ``mode6``), ``/proc/PID/numa_maps`` and the
weight files under ``/sys/kernel/mm/mempolicy/weighted_interleave``.

A kernel *without* weighted interleave is simulated honestly in a child: a seccomp filter makes
``set_mempolicy`` fail with EINVAL when the mode is MPOL_WEIGHTED_INTERLEAVE (what a pre-6.9 kernel
answers for an unknown mode), and ``numabind.live.interleave_weights`` answers None (the weights
directory of such a kernel is absent). The multi-node proof (pages split 3:1) runs in the VM
(tests/vm/test_vm_weighted.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import proc_targets
from tests.kernel import MEM_NODE, ROOT, child_env, numabind_cli, run_json, run_python

pytestmark = pytest.mark.kernel

WEIGHTS_DIR = Path("/sys/kernel/mm/mempolicy/weighted_interleave")
N = MEM_NODE
HAS_WEIGHTED = (WEIGHTS_DIR / f"node{N}").is_file()
needs_weighted = pytest.mark.skipif(not HAS_WEIGHTED, reason=f"this kernel has no weighted interleave "
                                                              f"({WEIGHTS_DIR}/node{N} is absent: Linux 6.9+)")
MODE6 = "mode6"     # proc_targets' name for MPOL_WEIGHTED_INTERLEAVE (6) read by ctypes get_mempolicy


def system_weight(node: int = N) -> int:
    return int((WEIGHTS_DIR / f"node{node}").read_text())


def auto_switch() -> tuple[Path, bool] | None:
    """The kernel's auto-weights switch (Linux 6.16+; its file name varies) and whether it is on."""
    for p in WEIGHTS_DIR.iterdir():
        if not p.name.startswith("node"):
            return p, p.read_text().strip() in ("true", "1", "Y")
    return None


def put_back(weight: int, auto: tuple[Path, bool] | None) -> None:
    """Restore node N's weight and the auto switch. Writing a weight turns auto off; the kernel refuses to
    turn it back on (ENODEV) where the firmware gives no bandwidth figures, and the weights then stay
    the same numbers auto mode gave (all 1), so that refusal is left as it is."""
    (WEIGHTS_DIR / f"node{N}").write_text(f"{weight}\n")
    if auto is not None and auto[1]:
        try:
            auto[0].write_text("true\n")
        except OSError:
            pass


def numabind(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return numabind_cli(*args, env=env)


#: A command that prints what the kernel says about the process it runs in (no numabind involved).
REPORT = ("import json, os, sys; sys.path.insert(0, os.environ['PYTHONPATH']); from tests import proc_targets; "
          "p, n = proc_targets.mempolicy(); "
          "print(json.dumps({'policy': p, 'nodes': n, 'maps': open('/proc/self/numa_maps').readline(), "
          "'marker': os.environ.get('_NUMABIND_BOUND')}))")


# A seccomp filter: set_mempolicy(MPOL_WEIGHTED_INTERLEAVE | flags, ...) fails with EINVAL, as on Linux < 6.9.
OLD_KERNEL = r'''
import ctypes, errno, platform, struct
import numabind.live
numabind.live.interleave_weights = lambda: None    # such a kernel has no weighted_interleave directory

def old_kernel():
    arch, nr = {"x86_64": (0xC000003E, 238), "aarch64": (0xC00000B7, 237)}[platform.machine()]
    code = b"".join(struct.pack("HBBI", *i) for i in (
        (0x20, 0, 0, 4),                 # A = arch
        (0x15, 0, 5, arch),              # foreign arch: allow
        (0x20, 0, 0, 0),                 # A = nr
        (0x15, 0, 3, nr),                # not set_mempolicy: allow
        (0x20, 0, 0, 16),                # A = low word of args[0] (the mode and its flags)
        (0x54, 0, 0, 0x1FFF),            # A &= the mode bits (MPOL_F_* flags are bits 13-15)
        (0x15, 1, 0, 6),                 # MPOL_WEIGHTED_INTERLEAVE: EINVAL
        (0x06, 0, 0, 0x7FFF0000),        # allow
        (0x06, 0, 0, 0x00050000 | errno.EINVAL)))
    buf = ctypes.create_string_buffer(code)
    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    prog = Prog(len(code) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(38, 1, 0, 0, 0) == 0                          # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0         # PR_SET_SECCOMP, filter
old_kernel()
'''


# --------------------------------------------------------------------------- the library
@needs_weighted
@pytest.mark.parametrize("backend", ("libnuma", "syscall"))
def test_bind_current_weighted_interleave_is_what_the_kernel_holds(backend):
    w = system_weight()
    out = run_json(f'''
import json, numabind
from tests import proc_targets
r = numabind.bind_current(numabind.Plan(mem_policy="weighted-interleave", mem_nodes={{{N}}}, weights={{{N}: {w}}}),
                          strict=True, backend="{backend}")
b = numabind.current_binding("{backend}")
print(json.dumps({{"kernel": proc_targets.mempolicy(), "maps": open("/proc/self/numa_maps").readline(),
                  "applied": r.applied.to_text(), "warnings": list(r.warnings), "weights": b.weights,
                  "show": b.describe(), "plan": b.plan.to_text()}}))
''')
    assert out["kernel"] == [MODE6, [N]]
    assert out["maps"].split(" ", 1)[1].startswith(f"weighted interleave:{N} ")   # numa_maps' words for it
    assert out["warnings"] == []
    assert out["applied"].endswith(f"mem=weighted-interleave:{N};migrate=0;weights={N}:{w}")
    assert out["weights"] == {str(N): w}
    assert "policy:       weighted-interleave" in out["show"]
    assert f"weights:      {N}:{w} (system-wide, /sys/kernel/mm/mempolicy/weighted_interleave)" in out["show"]


@needs_weighted
def test_weights_that_differ_from_the_system_are_a_warning_and_strict_refuses():
    other = system_weight() % 255 + 1
    out = run_json(f'''
import json, numabind
from tests import proc_targets
plan = numabind.Plan(mem_policy="weighted-interleave", mem_nodes={{{N}}}, weights={{{N}: {other}}})
try:
    numabind.bind_current(plan, strict=True)
    strict = None
except numabind.PlanError as e:
    strict = str(e)
after_strict = proc_targets.mempolicy()
r = numabind.bind_current(plan, strict=False)
print(json.dumps({{"strict": strict, "after_strict": after_strict, "warnings": list(r.warnings),
                  "kernel": proc_targets.mempolicy()}}))
''')
    assert out["strict"] and f"interleave weights {N}:{other} asked for" in out["strict"]
    assert "--set-weights" in out["strict"]
    assert out["after_strict"] == ["default", []]          # rolled back: nothing changed
    assert any(f"interleave weights {N}:{other} asked for" in w for w in out["warnings"])
    assert out["kernel"] == [MODE6, [N]]                    # the policy is in force, by the system's weights
    assert system_weight() != other                         # and the system's weights were not touched


@needs_weighted
@pytest.mark.skipif(os.geteuid() != 0, reason="writing the system-wide weights needs root")
def test_set_weights_writes_them_and_a_strict_rollback_puts_them_back():
    before, auto = system_weight(), auto_switch()
    other = before % 255 + 1
    try:
        out = run_json(f'''
import json, numabind
from tests.kernel import SECCOMP
plan = numabind.Plan(cpus={{{min(os.sched_getaffinity(0))}}}, mem_policy="weighted-interleave", mem_nodes={{{N}}},
                     weights={{{N}: {other}}})
r = numabind.bind_current(plan, strict=True, set_weights=True)
written = open("/sys/kernel/mm/mempolicy/weighted_interleave/node{N}").read().strip()
numabind.set_interleave_weights({{{N}: {before}}})
exec(SECCOMP)
deny("sched_setaffinity")
try:
    numabind.bind_current(plan, strict=True, set_weights=True)
    err = None
except numabind.BindError as e:
    err = e.syscall
back = open("/sys/kernel/mm/mempolicy/weighted_interleave/node{N}").read().strip()
print(json.dumps({{"written": written, "notes": list(r.notes), "weights": r.applied.weights and dict(r.applied.weights),
                  "err": err, "back": back}}))
''')
    finally:
        put_back(before, auto)
    assert out["written"] == str(other)
    assert any(f"set the system-wide interleave weights {N}:{other} (were {N}:{before})" in n for n in out["notes"])
    assert out["weights"] == {str(N): other}
    assert out["err"] == "sched_setaffinity"
    assert out["back"] == str(before)      # the strict failure undid the weights it had written


def test_a_kernel_without_weighted_interleave_degrades_to_interleave_and_strict_raises():
    """Simulated pre-6.9 kernel (see the module docstring): EINVAL from set_mempolicy for mode 6."""
    out = run_json(OLD_KERNEL + f'''
import json, numabind
from tests import proc_targets
plan = numabind.Plan(mem_policy="weighted-interleave", mem_nodes={{{N}}}, weights={{{N}: 3}})
try:
    numabind.bind_current(plan, strict=True)
    strict = None
except numabind.BindError as e:
    strict = {{"errno": e.errno, "syscall": e.syscall, "text": str(e)}}
after_strict = proc_targets.mempolicy()
r = numabind.bind_current(plan, strict=False)
print(json.dumps({{"strict": strict, "after_strict": after_strict, "warnings": list(r.warnings),
                  "applied": r.applied.to_text(), "kernel": proc_targets.mempolicy()}}))
''')
    import errno

    assert out["strict"]["errno"] == errno.EINVAL and "no MPOL_WEIGHTED_INTERLEAVE" in out["strict"]["text"]
    assert out["after_strict"] == ["default", []]
    assert any("no MPOL_WEIGHTED_INTERLEAVE (Linux 6.9 and newer have it" in w for w in out["warnings"])
    assert any(f"memory policy degraded to interleave {N} (the weights {N}:3 do not apply to it)" in w
               for w in out["warnings"])
    assert out["kernel"] == ["interleave", [N]]
    assert f"mem=interleave:{N}" in out["applied"]


# --------------------------------------------------------------------------- numabind run, both paths
@needs_weighted
@pytest.mark.parametrize("path", ("fast", "argparse"))
@pytest.mark.parametrize("opts", (["-w", "{N}"], ["--weighted-interleave={N}", "--weights", "{N}:{W}"],
                                  ["-w{N}", "--weights={N}:{W}"]), ids=("-w", "--weighted-interleave", "-wN"))
def test_run_weighted_interleave(path, opts):
    w = system_weight()
    args = [o.format(N=N, W=w) for o in opts]
    entry = ("from numabind.cli import fast_run; rc = fast_run(ARGS); print('NOT TAKEN'); raise SystemExit(3)"
             if path == "fast" else
             "from numabind.cli.commands import main; raise SystemExit(main(['run'] + ARGS))")
    cmd = [sys.executable, "-c", REPORT]
    cp = run_python(f"ARGS = {args + ['--'] + cmd!r}\n{entry}")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    out = json.loads(cp.stdout.strip().splitlines()[-1])
    assert out["policy"] == MODE6 and out["nodes"] == [N]
    assert out["maps"].split(" ", 1)[1].startswith(f"weighted interleave:{N} ")
    owner, requested, applied = out["marker"].split("|")
    assert owner.partition(":")[0].isdigit() and requested.startswith("v1;cpus=-;mem=weighted-interleave:")
    if any(a.startswith("--weights") for a in args):
        assert requested.endswith(f"weights={N}:{w}") and applied.endswith(f"weights={N}:{w}")
    else:     # the system's weights apply, whatever they are: the plans carry none
        assert "weights=" not in requested and applied.endswith(f"mem=weighted-interleave:{N};migrate=0")
    assert cp.stderr == ""


@needs_weighted
def test_show_reports_the_weights():
    w = system_weight()
    cp = numabind("run", "-w", str(N), "--", sys.executable, "-m", "numabind", "show")
    assert cp.returncode == 0, cp.stderr
    import re

    assert re.search(r"^policy:\s+weighted-interleave$", cp.stdout, re.M), cp.stdout
    assert re.search(rf"^weights:\s+{N}:{w} \(system-wide", cp.stdout, re.M), cp.stdout


@needs_weighted
def test_run_weights_that_differ_warn_and_strict_does_not_run_the_command(tmp_path):
    other = system_weight() % 255 + 1
    marker = tmp_path / "ran"
    lenient = child_env(NUMABIND_STRICT="0")
    cp = numabind("run", "-w", str(N), "--weights", f"{N}:{other}", "--", "touch", str(marker), env=lenient)
    assert cp.returncode == 0 and marker.exists(), cp.stderr
    assert f"interleave weights {N}:{other} asked for" in cp.stderr and "WARNING" in cp.stderr
    marker.unlink()
    cp = numabind("run", "--strict", "-w", str(N), "--weights", f"{N}:{other}", "--", "touch", str(marker))
    assert cp.returncode != 0 and not marker.exists()
    assert f"interleave weights {N}:{other} asked for" in cp.stderr


@needs_weighted
@pytest.mark.skipif(os.geteuid() != 0, reason="--set-weights writes the system-wide weights: needs root")
@pytest.mark.parametrize("path", ("fast", "argparse"))
def test_run_set_weights(path):
    before, auto = system_weight(), auto_switch()
    other = before % 255 + 1
    argv = ["run", "-w", str(N), "--weights", f"{N}:{other}", "--set-weights", "--",
            "cat", str(WEIGHTS_DIR / f"node{N}")]
    if path == "argparse":
        argv = ["-v", *argv]       # a global option first: the fast path leaves it to the argparse CLI
    try:
        cp = numabind(*argv)
    finally:
        put_back(before, auto)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.strip() == str(other)
    if path == "argparse":
        assert f"set the system-wide interleave weights {N}:{other}" in cp.stderr   # the report (-v)


@pytest.mark.parametrize("args,message", [
    (["--weights", "0:1"], "--weights goes with --weighted-interleave"),
    (["-i", "0", "--weights", "bandwidth"], "--weights goes with --weighted-interleave"),
    (["-w", "0", "--set-weights"], "--set-weights writes the weights given with --weights"),
    (["-w", "0", "--weights", "0:0"], "weight"),
    (["-w", "0", "--weights", "0:3,x"], "--weights"),
])
def test_run_weight_options_are_checked(args, message, tmp_path):
    marker = tmp_path / "ran"
    cp = numabind("run", *args, "--", "touch", str(marker))
    assert cp.returncode != 0 and message in cp.stderr, cp.stderr
    assert not marker.exists()


def test_run_weights_bandwidth_without_hmat_names_the_fix(tmp_path):
    """No firmware bandwidth figures on this machine's nodes (checked): the error says to give weights."""
    if Path(f"/sys/devices/system/node/node{N}/access0/initiators/read_bandwidth").exists():
        pytest.skip("this machine has HMAT bandwidth figures: 'bandwidth' works here (tested in test_strategies)")
    cp = numabind("run", "-w", str(N), "--weights", "bandwidth", "--", "true")
    assert cp.returncode != 0
    assert "no bandwidth figures" in cp.stderr and "--weights 0:3,1:1" in cp.stderr


def test_run_on_a_kernel_without_weighted_interleave_warns_and_strict_fails(tmp_path):
    """The simulated pre-6.9 kernel of the library test, through numabind run (argparse path, in-process exec)."""
    marker = tmp_path / "ran"
    code = OLD_KERNEL + f'''
from numabind.cli import main
raise SystemExit(main(STRICT + ["run", "-w", "{N}", "--", "touch", "{marker}"]))
'''
    cp = run_python("STRICT = []\n" + code, env={"NUMABIND_STRICT": "0"})
    assert cp.returncode == 0 and marker.exists(), cp.stderr
    assert "no MPOL_WEIGHTED_INTERLEAVE" in cp.stderr and f"degraded to interleave {N}" in cp.stderr
    marker.unlink()
    cp = run_python("STRICT = []\n" + code.replace('"run", "-w"', '"run", "--strict", "-w"'))
    assert cp.returncode != 0 and not marker.exists()
    assert "no MPOL_WEIGHTED_INTERLEAVE" in cp.stderr


# --------------------------------------------------------------------------- children bound at birth
PROBE = Path(ROOT) / "tests" / "proc_main_probe.py"


@needs_weighted
@pytest.mark.parametrize("method,flags", [
    ("spawn", ()), ("spawn", ("--spawn", "in-child")), ("forkserver", ()), ("fork", ()),
], ids=["spawn-inherit", "spawn-in-child", "forkserver", "fork"])
def test_child_is_born_with_weighted_interleave(method, flags, tmp_path):
    import numabind as nb

    w = system_weight()
    plan = nb.Plan(cpus={max(os.sched_getaffinity(0))}, mem_policy="weighted-interleave", mem_nodes={N},
                   weights={N: w})      # the weights travel in the plan's text to the child
    proc = subprocess.run([sys.executable, str(PROBE), method, plan.to_text(), str(tmp_path), *flags],
                          capture_output=True, text=True, cwd=ROOT, env=child_env(), timeout=120)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr
    result = json.loads(lines[-1][len("RESULT "):])
    child = result["child_pid"]
    assert result["exitcode"] == 0, proc.stderr
    records = {r["where"]: r for r in (json.loads(p.read_text()) for p in tmp_path.glob("*.json"))
               if r["pid"] == child}
    target = records["target"]
    assert target["policy"] == MODE6 and target["nodes"] == [N], target
    assert target["cpus"] == sorted(plan.cpus)
    if method == "spawn":      # bound before the child re-imported __main__
        assert records["import as __mp_main__"]["policy"] == MODE6
    rep = result["report"]
    assert rep["error"] is None and rep["warnings"] == [], rep
    applied = nb.Plan.from_text(rep["applied"])
    assert applied.mem_policy == "weighted-interleave" and applied.mem_nodes == {N} and applied.weights == {N: w}
    assert result["parent_before"]["policy"] == result["parent_after"]["policy"] == "default"
    assert proc_targets.mempolicy()[0] == "default"


def test_run_weights_bandwidth_takes_the_firmware_figures(tmp_path, monkeypatch, capsys):
    """``--weights bandwidth`` on a fake machine with HMAT figures (30000 and 10000 MB/s): the plan handed to
    bind_current has weights 3:1. Discovery is pointed at the fake root and bind_current is intercepted, so
    nothing is bound here (the fake machine's nodes are not this host's)."""
    import numabind.bind
    import numabind.topology
    from numabind.cli import main
    from numabind.plan import Plan
    from tests.fakesys import memory_only_nodes

    m = memory_only_nodes(tmp_path)
    m.set_hmat(0, read_bandwidth=30000, initiators={0}).set_hmat(1, read_bandwidth=30000, initiators={1})
    m.set_hmat(2, read_bandwidth=10000, initiators={0, 1}).write()
    fake = numabind.topology.discover(tmp_path)
    real_discover = numabind.topology.discover
    monkeypatch.setattr(numabind.topology, "discover", lambda root=None, **kw: fake if root in (None, "/")
                        else real_discover(root, **kw))
    seen = []

    class Stop(Exception):
        pass

    def fake_bind(plan, strict=None, *, backend=None, set_weights=False, **kw):
        seen.append((plan, set_weights))
        raise Stop

    monkeypatch.setattr(numabind.bind, "bind_current", fake_bind)
    with pytest.raises(Stop):
        main(["run", "-w", "0,2", "--weights", "bandwidth", "--set-weights", "--", "true"])
    [(plan, set_weights)] = seen
    assert plan == Plan(mem_policy="weighted-interleave", mem_nodes={0, 2}, weights={0: 3, 2: 1})
    assert set_weights is True
