"""What a newcomer trips on (issue 42 §5): a CPU the machine lacks called "outside the affinity"; list errors
offering a stride form the command line refuses; ``--gpu`` that takes only an integer (and two exit statuses for
its usage errors); ``stat NAME``; ``run -v`` saying the TensorRT-LLM note twice and ``run --json``'s plan as text
only; ``numabind move``'s own error prefix and a restore note that contradicted itself.

Every CPU and node used is derived from the machine the tests run on (an absent CPU is max(online) + 1000), so
they pass on a one-CPU runner and in the multi-node guest.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numabind.cpulist import parse_cpulist
from numabind.plan import Plan
from numabind.relocate import recorded_plan

from .fakegpu import add_nvidia_gpu, nv_uuid
from .fakesys import two_sockets
from .kernel import CPU_A, GPU_ENV, MEM_NODE, ONLINE_CPUS, ONLINE_NODES, ROOT, child_env, numabind_cli, run_main

ABSENT_CPU = max(ONLINE_CPUS) + 1000        # no machine these tests run on has it
ABSENT_NODE = max(ONLINE_NODES) + 1000
TLLM = "TLLM_NUMA_AWARE_WORKER_AFFINITY"


@pytest.fixture
def clean_env(monkeypatch):
    for name in (*GPU_ENV, "NUMABIND_FSROOT", "NUMABIND_STRICT", TLLM):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


# ------------------------------------------------------------------ 1. a CPU the machine lacks is "not online"
@pytest.mark.parametrize("argv", [
    ["run", "-C", str(ABSENT_CPU), "--", "true"],
    ["run", "--physcpubind", f"{CPU_A},{ABSENT_CPU}", "--", "true"],
    ["-C", str(ABSENT_CPU), "true"],                       # numactl's form
    ["run", "-a", "-C", str(ABSENT_CPU), "--", "true"],
], ids=["run", "run-with-an-online-cpu", "numactl-form", "run-all"])
def test_an_absent_cpu_is_not_online_and_no_a_is_suggested(argv):
    cp = numabind_cli(*argv)
    assert cp.returncode == 1, cp.stderr
    assert f"CPUs {ABSENT_CPU} are not online on this machine" in cp.stderr, cp.stderr
    assert "-a/--all" not in cp.stderr and "affinity" not in cp.stderr, cp.stderr


def test_plan_from_numactl_args_says_not_online_before_the_affinity():
    from numabind import live

    machine = live.machine()
    with pytest.raises(ValueError, match="not online") as exc:
        Plan.from_numactl_args([f"--physcpubind={ABSENT_CPU}"], topology=machine)
    assert "affinity" not in str(exc.value)


@pytest.mark.parametrize("argv", [
    ["run", "-N", str(ABSENT_NODE), "--", "true"],
    ["-N", str(ABSENT_NODE), "true"],
])
def test_an_absent_node_does_not_exist(argv):
    """A regression guard (this one was right already): -N of a node the machine lacks names it, no -a."""
    cp = numabind_cli(*argv)
    assert cp.returncode == 1, cp.stderr
    assert f"node {ABSENT_NODE} does not exist" in cp.stderr and "-a/--all" not in cp.stderr, cp.stderr


# ------------------------------------------------------------------ 2. list errors offer only what is taken
@pytest.mark.parametrize("argv, status", [
    (["run", "-C", "0-1:/2", "--", "true"], 2),
    (["run", "-C", "abc", "--", "true"], 2),
    (["run", "-m", "0,x", "--", "true"], 2),
    (["run", "-C", "0-3:1/2", "--", "true"], 2),            # a stride that parses: a usage error too, not 1
    (["-C", "zz", "true"], 1),                              # numactl's form: numactl's status
    (["-m", "0-1:2", "true"], 1),
])
def test_list_errors_offer_only_numactls_forms(argv, status):
    cp = numabind_cli(*argv)
    assert cp.returncode == status, cp.stderr
    assert "used/group" not in cp.stderr.replace("the kernel's 'N-M:used/group'", ""), cp.stderr
    assert "N or N-M" in cp.stderr or "uses a stride" in cp.stderr, cp.stderr


def test_move_list_errors_offer_only_numactls_forms(capsys):
    from numabind.cli.move import main as move_main

    assert move_main(["1", "-C", "a-b"]) == 2
    err = capsys.readouterr().err
    assert "N or N-M" in err and "used/group" not in err, err


_GROUP = st.one_of(st.integers(0, 99).map(str), st.tuples(st.integers(0, 50), st.integers(50, 99)).map(
    lambda t: f"{t[0]}-{t[1]}"))


@given(st.lists(_GROUP, min_size=1, max_size=6))
@settings(max_examples=200, deadline=None)
def test_numactl_lists_pass_the_syntax_check_and_parse(groups):
    from numabind.cli import list_syntax_problem

    text = ",".join(groups)
    assert list_syntax_problem("--membind", text) is None
    assert list_syntax_problem("--membind", "!" + text) is None and list_syntax_problem("--membind", "+" + text) is None
    assert parse_cpulist(text)


@given(st.text(alphabet="0123456789-,:/!+ a\u0663\n", max_size=16))
@settings(max_examples=300, deadline=None)
def test_whatever_the_syntax_check_refuses_never_offers_a_stride(text):
    from numabind.cli import list_syntax_problem

    problem = list_syntax_problem("-C", text)
    if problem is not None:
        assert "expected N or N-M" in problem or "uses a stride" in problem
        assert "used/group separated" not in problem
        return
    body = text[1:] if text.startswith("!") else text
    body = body[1:] if body.startswith("+") else body
    try:                     # what passes is the kernel's grammar without strides: it parses, or is out of range
        parse_cpulist(body)
    except ValueError as e:
        assert "used/group" not in str(e) and "cannot parse" not in str(e), (text, e)


# ------------------------------------------------------------------ 3. --gpu takes what --gpus takes
def _gpu_server(root):
    two_sockets(root)
    cpus = {0: "0-3,8-11", 1: "4-7,12-15"}
    for k, addr in enumerate(("0000:18:00.0", "0000:2a:00.0", "0000:9a:00.0", "0000:ab:00.0")):
        add_nvidia_gpu(root, addr, numa_node=k // 2, local_cpulist=cpus[k // 2], uuid=nv_uuid(k), minor=k)
    return root


@pytest.mark.parametrize("spec", [nv_uuid(2), nv_uuid(2)[:12], "0000:9a:00.0", "9a:00.0"])
def test_plan_gpu_takes_a_uuid_or_a_pci_address(tmp_path, capsys, clean_env, spec):
    root = str(_gpu_server(tmp_path))
    rc, want, err = run_main(capsys, "--root", root, "plan", "--gpu", "2", "--json")
    assert rc == 0, err
    rc, out, err = run_main(capsys, "--root", root, "plan", "--gpu", spec, "--json")
    assert rc == 0, err
    assert json.loads(out) == json.loads(want)


@pytest.mark.parametrize("spec", [nv_uuid(3), "0000:ab:00.0"])
def test_run_gpu_takes_a_uuid_or_a_pci_address(tmp_path, capsys, clean_env, spec):
    root = str(_gpu_server(tmp_path))
    rc, want, err = run_main(capsys, "--root", root, "run", "--gpu", "3", "--dry-run", "--json", "--", "true")
    assert rc == 0, err
    rc, out, err = run_main(capsys, "--root", root, "run", "--gpu", spec, "--dry-run", "--json", "--", "true")
    assert rc == 0, err
    assert json.loads(out)["plan"] == json.loads(want)["plan"]


@pytest.mark.parametrize("sub", [["run"], ["plan"], ["move", "1"]], ids=["run", "plan", "move"])
@pytest.mark.parametrize("value", ["-1", "abc", "0,1"])
def test_gpu_usage_errors_have_one_status(capsys, clean_env, sub, value):
    tail = ["--", "true"] if sub == ["run"] else []
    rc, out, err = run_main(capsys, *sub, "--gpu", value, *tail)
    assert rc == 2, err
    assert "--gpu" in err and ("--gpus" in err), err


def test_a_uuid_no_gpu_has_exits_1_naming_it(tmp_path, capsys, clean_env):
    root = str(_gpu_server(tmp_path))
    rc, out, err = run_main(capsys, "--root", root, "plan", "--gpu", "GPU-ffffffff")
    assert rc == 1 and "GPU-ffffffff" in err, err


# ------------------------------------------------------------------ 4. stat NAME, bare stat
class _Sleeper:
    """A process with a name of its own (``argv[0]`` is what the pattern finds), killed on exit."""

    def __init__(self, tag: str, comm: str | None = None) -> None:
        name = "" if comm is None else f"open('/proc/self/comm', 'w').write({comm!r}); "
        self.proc = subprocess.Popen([sys.executable, "-c", f"import sys; {name}print('ready', flush=True); "
                                      f"sys.stdin.read()", tag], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"
        self.pid = self.proc.pid

    def __enter__(self) -> _Sleeper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait(30)


def test_stat_takes_a_pattern_as_numastat_does(capsys):
    tag = f"nbtrip{ABSENT_CPU}x{id(capsys)}"
    with _Sleeper(tag) as s:
        rc, out, err = run_main(capsys, "stat", "--json", tag)
        assert rc == 0, err
        assert [p["pid"] for p in json.loads(out)] == [s.pid]
        rc, out, err = run_main(capsys, "stat", tag[:-3])        # a fragment of it
        assert rc == 0 and f"pid {s.pid} " in out, err


def test_stat_pattern_that_matches_nothing_is_an_error_naming_it(capsys):
    pattern = "no-such-process-\x1b[31m-zz"
    rc, out, err = run_main(capsys, "stat", pattern)
    assert rc == 1 and out == ""
    assert "no process matches" in err and "\x1b" not in err and "no-such-process-" in err, err


def test_stat_names_go_through_printable(capsys):
    tag = f"nbname{id(capsys)}"
    with _Sleeper(tag, comm="evil\x1b[2Jname") as s:      # the process's own name, which it controls
        rc, out, err = run_main(capsys, "stat", tag)
        assert rc in (0, 1) and f"pid {s.pid} (evil?[2Jname)" in out and "\x1b" not in out, (out, err)


def test_bare_stat_shows_the_system(capsys):
    rc, out, err = run_main(capsys, "stat")
    assert rc in (0, 1), err          # 1 only when a figure could not be read
    assert "Per-node system memory usage (in MBs):" in out
    assert "give at least one PID" not in err


# ------------------------------------------------------------------ 5. run -v, run --json
def test_run_verbose_says_the_tensorrt_llm_note_once():
    env = child_env()
    env.pop(TLLM, None)
    cp = subprocess.run([sys.executable, "-m", "numabind", "run", "-v", "-C", str(CPU_A), "--", "true"],
                        capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert cp.returncode == 0, cp.stderr
    assert cp.stderr.count(f"{TLLM}=0 set") == 1, cp.stderr


def test_run_verbose_says_the_users_tensorrt_llm_switch_once():
    cp = subprocess.run([sys.executable, "-m", "numabind", "run", "-v", "-C", str(CPU_A), "--", "true"],
                        capture_output=True, text=True, env=child_env(**{TLLM: "1"}), timeout=120, cwd=ROOT)
    assert cp.returncode == 0, cp.stderr
    assert cp.stderr.count(f"{TLLM}=1 is set") == 1, cp.stderr


@pytest.mark.parametrize("argv", [["-C", str(CPU_A)], ["-C", str(CPU_A), "-m", str(MEM_NODE)]])
def test_run_json_gives_the_plans_as_plan_json_shapes_them(argv):
    from numabind.cli.plan import plan_json

    cp = numabind_cli("run", "--json", *argv, "--", "true")
    assert cp.returncode == 0, cp.stderr
    report = json.loads(cp.stderr.strip().splitlines()[-1])
    applied = Plan.from_text(report["applied"])
    assert report["applied_plan"] == plan_json(applied)
    assert report["applied_plan"]["cpus"] == str(CPU_A)
    assert report["requested_plan"] == plan_json(Plan.from_text(report["requested"]))
    if "-m" in argv:
        assert report["applied_plan"]["mem_policy"] == "bind"
        assert report["applied_plan"]["mem_nodes"] == str(MEM_NODE)


# ------------------------------------------------------------------ 6. numabind move's errors, the restore note
@pytest.mark.parametrize("argv", [["--restore", "999999999"], ["1", "--gpu", "abc"], [], ["1", "--bogus"],
                                  ["1", "-C", str(ABSENT_CPU)]])
def test_every_move_error_says_numabind_error(argv):
    cp = numabind_cli("move", *argv)
    assert cp.returncode in (1, 2), cp.stderr
    errors = [line for line in cp.stderr.splitlines() if "error:" in line]
    assert errors and all(line.startswith("numabind: error: ") for line in errors), cp.stderr


def test_a_restore_whose_policy_agrees_says_so(capsys):
    from numabind.cli.move import main as move_main

    cpu = CPU_A
    target = subprocess.Popen([sys.executable, "-m", "numabind", "run", "-a", "-C", str(cpu), "-m", str(MEM_NODE),
                               "--", sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT)
    try:
        assert target.stdout.readline().strip() == "ready"
        plan = recorded_plan(target.pid)
        assert (plan.mem_policy, plan.mem_nodes) == ("bind", frozenset({MEM_NODE}))
        assert move_main(["--restore", str(target.pid)]) == 0
        out = capsys.readouterr().out
        note = next(line for line in out.splitlines() if "memory policy" in line)
        assert "already is the plan's" in note and f"follow bind {MEM_NODE} too" in note, note
        assert "not bind" not in note, note      # it does not contradict itself
    finally:
        target.kill()
        target.wait(30)


def test_instrument_says_once_when_neither_vllm_nor_sglang_is_there(tmp_path):
    """Issue 42 §5: instrumenting a program whose Python has neither vLLM nor SGLang replaces nothing: one line
    says so (the command still runs); with either importable, nothing is said."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cp = subprocess.run([sys.executable, "-m", "numabind", "instrument", "--", "true"], capture_output=True,
                        text=True, timeout=120, env=env)
    assert cp.returncode == 0, cp.stderr
    notes = [line for line in cp.stderr.splitlines() if "nothing will be replaced" in line]
    assert len(notes) == 1 and notes[0].startswith("numabind instrument: note: neither vllm nor sglang"), cp.stderr
    for host in ("vllm", "sglang"):
        (tmp_path / host).mkdir()
        (tmp_path / host / "__init__.py").write_text("")
        cp = subprocess.run([sys.executable, "-m", "numabind", "instrument", "--", "true"], capture_output=True,
                            text=True, timeout=120, env=dict(env, PYTHONPATH=str(tmp_path)))
        assert cp.returncode == 0 and "nothing will be replaced" not in cp.stderr, (host, cp.stderr)
        (tmp_path / host / "__init__.py").unlink()
        (tmp_path / host).rmdir()
