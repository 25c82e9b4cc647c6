"""TensorRT-LLM must not undo a binding numabind gives (issue 34 §4).

TensorRT-LLM's workers call ``configure_cpu_affinity()`` once they run: with ``TLLM_NUMA_AWARE_WORKER_AFFINITY``
unset they reset an affinity someone else constrained to all CPUs, with ``1`` they replace it with NVML's choice,
and only ``0`` keeps it. Wherever numabind binds a command or a child, the variable is ``0`` in its environment
unless the user set it, and the user's ``1`` is warned about once (:func:`numabind._base.keep_binding_env`).
Commands run on this host's kernel; children of every start method are started by a fresh interpreter.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from numabind._base import TLLM_AFFINITY_ENV, keep_binding_env
from tests.kernel import MEM_NODE, ROOT, child_env, numabind_cli

pytestmark = pytest.mark.kernel

WARNING_TEXT = f"{TLLM_AFFINITY_ENV}=1 is set: TensorRT-LLM's workers will replace numabind's CPUs"


def env_value(stdout: str) -> str | None:
    """The variable's value in the output of ``env`` (None when it is not set)."""
    found = [line.partition("=")[2] for line in stdout.splitlines() if line.startswith(TLLM_AFFINITY_ENV + "=")]
    assert len(found) <= 1, found
    return found[0] if found else None


# ----------------------------------------------------------------------------- the rule
@pytest.mark.parametrize("given,kept,level", [
    (None, "0", "INFO"), ("", "0", "INFO"), ("1", "1", "WARNING"), (" 1 ", " 1 ", "WARNING"),
    ("0", "0", None), ("2", "2", None), ("false", "false", None),
])
def test_the_rule(given, kept, level):
    env = {"OTHER": "x"} if given is None else {"OTHER": "x", TLLM_AFFINITY_ENV: given}
    found = keep_binding_env(env, say=False)
    assert env == {"OTHER": "x", TLLM_AFFINITY_ENV: kept}
    if level is None:
        assert found is None
    else:
        assert found is not None and found[0] == {"INFO": 20, "WARNING": 30}[level]
        assert (WARNING_TEXT in found[1]) == (level == "WARNING")


# ----------------------------------------------------------------------------- numabind run
@pytest.mark.parametrize("extra", [(), ("--backend", "numactl")], ids=["in-process", "numactl"])
def test_run_sets_it_to_zero(extra):
    if extra and shutil.which("numactl") is None:
        pytest.skip("numactl is not installed (Debian package numactl): the numactl backend cannot run")
    cp = numabind_cli("run", *extra, "-N", str(MEM_NODE), "--", "env")
    assert cp.returncode == 0, cp.stderr
    assert env_value(cp.stdout) == "0"
    assert cp.stderr == ""                       # said at INFO only (numabind run -v shows it)


@pytest.mark.parametrize("extra", [(), ("--backend", "numactl"), ("-v",), ("-v", "--backend", "numactl")],
                         ids=["fast", "numactl", "full-cli", "full-cli-numactl"])
def test_run_keeps_the_users_one_and_warns_once(extra):
    if "numactl" in extra and shutil.which("numactl") is None:
        pytest.skip("numactl is not installed (Debian package numactl): the numactl backend cannot run")
    cp = numabind_cli("run", *extra, "-N", str(MEM_NODE), "--", "env", env=child_env(**{TLLM_AFFINITY_ENV: "1"}))
    assert cp.returncode == 0, cp.stderr
    assert env_value(cp.stdout) == "1"
    warnings = [line for line in cp.stderr.splitlines() if line.startswith("numabind.bind: WARNING: " + WARNING_TEXT)]
    assert len(warnings) == 1, cp.stderr
    assert "set it to 0 to keep numabind's binding" in warnings[0]
    if extra == ("-v",):                           # the report (-v) does not say it again (issue 42 §5)
        assert cp.stderr.count(WARNING_TEXT) == 1, cp.stderr


@pytest.mark.parametrize("value", ["0", "no"])
def test_run_leaves_the_users_other_values_alone(value):
    cp = numabind_cli("run", "-N", str(MEM_NODE), "--", "env", env=child_env(**{TLLM_AFFINITY_ENV: value}))
    assert cp.returncode == 0, cp.stderr
    assert env_value(cp.stdout) == value and cp.stderr == ""


def test_run_says_it_in_the_report():
    """The full CLI (-v, --json): INFO says it, once (the -v report does not repeat it, issue 42 §5), and the
    JSON report carries the note."""
    cp = numabind_cli("run", "-v", "-N", str(MEM_NODE), "--", "env")
    assert cp.returncode == 0, cp.stderr
    assert env_value(cp.stdout) == "0"
    assert f"numabind.bind: INFO: {TLLM_AFFINITY_ENV}=0 set" in cp.stderr
    assert cp.stderr.count(f"{TLLM_AFFINITY_ENV}=0 set") == 1, cp.stderr
    cj = numabind_cli("run", "--json", "-N", str(MEM_NODE), "--", "true")
    assert cj.returncode == 0, cj.stderr
    report = json.loads(cj.stderr.strip().splitlines()[-1])
    assert any(n.startswith(f"{TLLM_AFFINITY_ENV}=0 set") for n in report["notes"]), report["notes"]


# ----------------------------------------------------------------------------- children numabind binds
CHILDREN = '''
import json, logging, multiprocessing as mp, os, subprocess, sys
import numabind
from numabind.process import bound, configure_subprocess, pool_plans, popen_kwargs, wrap_command

NAME = "TLLM_NUMA_AWARE_WORKER_AFFINITY"
SHOW = [sys.executable, "-c", "import os; print(os.environ.get('TLLM_NUMA_AWARE_WORKER_AFFINITY'))"]


def put(q):
    q.put(os.environ.get(NAME))


def value(_=None):
    return os.environ.get(NAME)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(levelname)s: %(message)s", stream=sys.stderr)
    plan = numabind.Plan(cpus={min(os.sched_getaffinity(0))})
    out = {}
    for method, spawn in (("spawn", "inherit"), ("spawn", "in-child"), ("forkserver", "inherit"),
                          ("fork", "inherit")):
        ctx = mp.get_context(method)
        q = ctx.Queue()
        with configure_subprocess(plan, spawn=spawn):
            p = ctx.Process(target=put, args=(q,))
            p.start()
        out[f"{method}/{spawn}"] = q.get(timeout=60)
        p.join(60)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=bound(plan, put), args=(q,))
    p.start()
    out["bound"] = q.get(timeout=60)
    p.join(60)
    with mp.get_context("forkserver").Pool(1, **pool_plans([plan], 1)) as pool:
        out["pool_plans"] = pool.apply(value)
    out["popen_kwargs"] = subprocess.run(SHOW, **popen_kwargs(plan), capture_output=True, text=True).stdout.strip()
    out["wrap_command"] = subprocess.run(wrap_command(plan, SHOW), capture_output=True, text=True).stdout.strip()
    out["parent"] = os.environ.get(NAME)
    print("RESULT " + json.dumps(out), flush=True)
'''

KINDS = ["spawn/inherit", "spawn/in-child", "forkserver/inherit", "fork/inherit", "bound", "pool_plans",
         "popen_kwargs", "wrap_command"]


def _children(tmp_path, **env: str) -> tuple[dict, str]:
    script = tmp_path / "children.py"
    script.write_text(textwrap.dedent(CHILDREN))
    cp = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT,
                        env=child_env(**env), timeout=300)
    lines = [x for x in cp.stdout.splitlines() if x.startswith("RESULT ")]
    assert cp.returncode == 0 and lines, cp.stdout + cp.stderr
    return json.loads(lines[-1][len("RESULT "):]), cp.stderr


def test_every_child_numabind_binds_gets_zero(tmp_path):
    out, err = _children(tmp_path)
    assert {k: out[k] for k in KINDS} == {k: "0" for k in KINDS}
    assert out["parent"] is None                  # the parent's own environment is left alone
    said = [line for line in err.splitlines() if f"{TLLM_AFFINITY_ENV}=0 set" in line]
    assert len(said) == 1 and said[0].startswith("numabind.bind: INFO: "), err     # once per process


def test_the_users_one_reaches_every_child_with_one_warning(tmp_path):
    out, err = _children(tmp_path, **{TLLM_AFFINITY_ENV: "1"})
    assert {k: out[k] for k in [*KINDS, "parent"]} == {k: "1" for k in [*KINDS, "parent"]}
    warned = [line for line in err.splitlines() if WARNING_TEXT in line]
    assert len(warned) == 1 and warned[0].startswith("numabind.bind: WARNING: "), err


def test_the_users_zero_is_left_alone_and_not_said(tmp_path):
    out, err = _children(tmp_path, **{TLLM_AFFINITY_ENV: "0"})
    assert {k: out[k] for k in KINDS} == {k: "0" for k in KINDS}
    assert TLLM_AFFINITY_ENV not in err


def test_a_child_bound_at_birth_says_it_in_its_report(tmp_path):
    """configure_subprocess's fork child: its birth report carries the note (ChildBindings.report)."""
    code = textwrap.dedent('''
        import multiprocessing as mp, os, json
        import numabind
        from numabind.process import configure_subprocess
        plan = numabind.Plan(cpus={min(os.sched_getaffinity(0))})
        ctx = mp.get_context("fork")
        with configure_subprocess(plan) as births:
            p = ctx.Process(target=int)
            p.start()
        p.join(60)
        print(json.dumps(list(births.report(p.pid).report.notes)))
    ''')
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=child_env(),
                        timeout=120)
    assert cp.returncode == 0, cp.stderr
    notes = json.loads(cp.stdout.strip().splitlines()[-1])
    assert any(n.startswith(f"{TLLM_AFFINITY_ENV}=0 set") for n in notes), notes
