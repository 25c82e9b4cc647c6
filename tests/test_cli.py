"""The command line: ``numabind`` / ``python -m numabind``.

Read-only commands run in-process through ``numabind.cli.main`` (output
captured); ``numabind run`` execs its command, so it runs in a child. Fake
machines come from tests/fakesys.py and tests/fakegpu.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import numabind
from numabind import Plan, discover, live
from numabind.cli import main
from tests.fakegpu import add_nvidia_gpu, nv_uuid
from tests.fakesys import two_sockets
from tests.kernel import BLOCK_NATIVE, child_env  # noqa: F401
from tests.kernel import (ALLOWED, CPU_A, CPU_B, MEM_NODE, ROOT, numabind_cli, numactl_show,  # noqa: F401
                          run_main, show_fields)
# (CPU_A/CPU_B/MEM_NODE: no test assumes this host's ids; tests/conftest.py puts the process state back)

kernel = pytest.mark.kernel
pytestmark = pytest.mark.usefixtures("no_gpu_env")


@pytest.fixture
def gpu_machine(tmp_path):
    """Two sockets (node 0: CPUs 0-3,8-11; node 1: 4-7,12-15), one NVIDIA GPU per node."""
    two_sockets(tmp_path, cpus_per_socket=8)
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=0, local_cpulist="0-3,8-11")
    add_nvidia_gpu(tmp_path, "0000:9a:00.0", numa_node=1, local_cpulist="4-7,12-15", minor=1, uuid=nv_uuid(1))
    return str(tmp_path)


# --------------------------------------------------------------------------- the main job
@kernel
def test_main_job_on_this_host():
    cp = numabind_cli()
    assert cp.returncode == 0, cp.stderr
    out = cp.stdout
    sections = ["== topology ==", "== GPUs ==", "== plans ==", "== current binding of this process ==",
                "== backends =="]
    assert [out.index(s) for s in sections] == sorted(out.index(s) for s in sections)
    topo = discover()
    # the plan for a node: its CPUs that this process may use now
    cpus = numabind.format_cpulist(topo.nodes[MEM_NODE].cpus & topo.allowed_cpus)   # the cpuset's, not the affinity's
    assert f"online cpus: {numabind.format_cpulist(topo.online_cpus)}" in out
    gpus = out.split("== GPUs ==")[1].split("== plans ==")[0]
    assert "none found" in gpus
    plans = out.split("== plans ==")[1].split("== current binding")[0]
    assert "Plans per NUMA node" in plans
    row = next(line for line in plans.splitlines() if line.startswith(f"{MEM_NODE} "))
    assert f"cpus {cpus}, memory bind {MEM_NODE}" in row and f"--physcpubind={cpus} --membind={MEM_NODE}" in row
    binding = show_fields(out.split("== current binding of this process ==")[1].split("== backends ==")[0])
    assert binding["cpus"] == numabind.format_cpulist(os.sched_getaffinity(0))
    assert binding["policy"] == "default"
    assert binding["backend"] == "libnuma"
    assert "selected: libnuma" in out


def test_main_job_on_a_machine_with_gpus(capsys, gpu_machine):
    rc, out, _ = run_main(capsys, "--root", gpu_machine)
    assert rc == 0
    assert "0000:18:00.0" in out and "0000:9a:00.0" in out
    plans = out.split("== plans ==")[1].split("== current binding")[0]
    assert "Plans per GPU worker" in plans
    assert "--physcpubind=0-3,8-11 --membind=0" in plans
    assert "--physcpubind=4-7,12-15 --membind=1" in plans


# --------------------------------------------------------------------------- hardware / show
@kernel
def test_hardware_matches_numactl_hardware(capsys):
    from tests.numactl_oracle import oracle_or_skip   # numactl 2.0.19: 4-wide distance columns (2.0.16: 3)

    numactl = oracle_or_skip()
    rc, out, _ = run_main(capsys, "hardware")
    assert rc == 0
    theirs = subprocess.run([numactl, "--hardware"], capture_output=True, text=True, check=True).stdout
    keep = lambda text: [line.split() for line in text.splitlines()  # noqa: E731
                         if line.startswith(("available:", "node")) and " free:" not in line
                         or line.strip().split(":")[0].isdigit()]
    assert keep(out) == keep(theirs)
    assert any(line.startswith("node 0 cpus:") for line in out.splitlines())
    # the free lines: at the same places, the same nodes, the same MB give or take what moved in between
    free = lambda text: [(line.split()[1], int(line.split()[3])) for line in text.splitlines()  # noqa: E731
                         if " free: " in line]
    ours_free, theirs_free = free(out), free(theirs)
    assert [n for n, _ in ours_free] == [n for n, _ in theirs_free] == [str(n) for n in sorted(discover().nodes)]
    for (_, a), (_, b) in zip(ours_free, theirs_free):
        assert abs(a - b) <= max(64, b // 20), (ours_free, theirs_free)
    lines = lambda text: [line for line in text.splitlines() if " free: " not in line]  # noqa: E731
    assert lines(out) == lines(theirs)     # the rest byte for byte


def test_hardware_of_a_fake_machine_text_and_json(capsys, gpu_machine):
    rc, out, _ = run_main(capsys, "--root", gpu_machine, "hardware")
    assert rc == 0
    assert "node 0 cpus: 0 1 2 3 8 9 10 11" in out and "node 1 cpus: 4 5 6 7 12 13 14 15" in out
    free = [line for line in out.splitlines() if " free: " in line]
    assert [line.split()[1] for line in free] == ["0", "1"] and all(line.endswith(" MB") for line in free)
    rc, out, _ = run_main(capsys, "hardware", "--root", gpu_machine, "--json")
    assert rc == 0
    d = json.loads(out)
    topo = discover(gpu_machine)
    assert d["available"] == "0-1"
    assert d["nodes"]["1"]["cpus"] == "4-7,12-15" and d["nodes"]["1"]["size_bytes"] == topo.nodes[1].memory_bytes
    assert all(isinstance(d["nodes"][n]["free_bytes"], int) for n in ("0", "1"))
    assert d["distances"]["0"] == {"0": 10, "1": 21}


def _numactl_bindings() -> list[list[str]]:
    """numactl option lists for this machine, derived at run time: CPUs, nodes and policies it has."""
    topo = discover()
    cpu = max(os.sched_getaffinity(0))
    mem = min(n for n in topo.allowed_nodes if topo.nodes[n].memory_bytes)
    cpu_node = min(n for n, node in topo.nodes.items() if node.cpus & topo.allowed_cpus)
    out = [[], ["-C", str(cpu)], ["-m", str(mem)], ["-C", str(cpu), "-m", str(mem)], ["-N", str(cpu_node)],
           ["-p", str(mem)], ["-i", "all"], ["-i", str(mem)], ["-a", "-m", str(mem)]]
    if subprocess.run(["numactl", "-P", str(mem), "true"], capture_output=True).returncode == 0:
        out.append(["-P", str(mem)])    # preferred-many: Linux 5.15 and a numactl that knows it
    return out


def _interleave_next_masked(text: str, nodes: int) -> list[str]:
    """Lines of a --show; with several interleave nodes, the next node (which differs between two
    processes that allocated differently) is masked."""
    lines = text.splitlines()
    if nodes <= 1:
        return lines
    return [("preferred node: N (interleave next)" if line.endswith("(interleave next)") else
             "interleavenode: N" if line.startswith("interleavenode:") else line) for line in lines]


@kernel
@pytest.mark.parametrize("opts", _numactl_bindings() if shutil.which("numactl") else [],
                         ids=lambda o: " ".join(o) or "unbound")
def test_show_is_numactl_show_line_by_line(opts):
    """`numactl OPTS numabind show` prints what `numactl OPTS numactl --show` prints, line for line."""
    ours = subprocess.run(["numactl", *opts, sys.executable, "-m", "numabind", "show"], capture_output=True,
                          text=True, env=child_env(), timeout=60, cwd=ROOT)
    theirs = subprocess.run(["numactl", *opts, "numactl", "--show"], capture_output=True, text=True, timeout=60)
    assert ours.returncode == 0 and theirs.returncode == 0, (ours.stderr, theirs.stderr)
    nodes = len(discover().allowed_nodes)
    assert _interleave_next_masked(ours.stdout, nodes) == _interleave_next_masked(theirs.stdout, nodes)


@kernel
def test_show_where_numactl_prints_a_broken_line():
    """numactl 2.0.16 prints no line end after 'preferred node:' under --localalloc (its physcpubind
    line is glued to it) and '[8194]' for bind with NUMA balancing; numabind keeps every key on its line."""
    mem = str(min(discover().allowed_nodes))
    for opts, policy in ((["-l"], "local"), (["-b", "-m", mem], "bind")):
        cp = subprocess.run(["numactl", *opts, sys.executable, "-m", "numabind", "show"], capture_output=True,
                            text=True, env=child_env(), timeout=60, cwd=ROOT)
        assert cp.returncode == 0, cp.stderr
        keys = [line.split(":")[0] for line in cp.stdout.splitlines()]
        assert keys == ["policy", "preferred node", "physcpubind", "cpubind", "nodebind", "membind", "preferred"]
        fields = show_fields(cp.stdout)
        assert fields["policy"] == policy
        assert fields["physcpubind"].split() == [str(c) for c in sorted(os.sched_getaffinity(0))]


@kernel
def test_show_json_is_the_rich_form(capsys):
    rc, out, _ = run_main(capsys, "show", "--json")
    assert rc == 0
    d = json.loads(out)
    assert numabind.parse_cpulist(d["cpus"]) == os.sched_getaffinity(0)
    assert d["policy"] == "default" and d["backend"] == "libnuma" and d["weights"] == {}
    assert str(threading_tid()) in d["threads"]
    rc, again, _ = run_main(capsys, "--json", "show")      # before or after the subcommand
    assert rc == 0 and json.loads(again)["cpus"] == d["cpus"]


def threading_tid() -> int:
    import threading

    return threading.get_native_id()


@kernel
@pytest.mark.parametrize("opts,policy", [(["--physcpubind=1", "--membind=0"], "bind"),
                                         (["--physcpubind=0", "--interleave=0"], "interleave"),
                                         (["--physcpubind=1", "--preferred=0"], "preferred")])
def test_show_reports_a_binding_made_by_numactl(opts, policy):
    cpu = str(max(os.sched_getaffinity(0)) if opts[0].endswith("1") else min(os.sched_getaffinity(0)))
    mem = str(min(discover().allowed_nodes))
    opts = [f"--physcpubind={cpu}", opts[1].replace("=0", f"={mem}")]
    cp = subprocess.run(["numactl", *opts, sys.executable, "-m", "numabind", "show", "--json"],
                        capture_output=True, text=True, env=child_env(), timeout=60, cwd=ROOT)
    assert cp.returncode == 0, cp.stderr
    d = json.loads(cp.stdout)
    assert (d["cpus"], d["policy"], d["nodes"]) == (cpu, policy, mem)


@kernel
def test_show_json_carries_the_weights_under_weighted_interleave():
    if not os.path.isdir("/sys/kernel/mm/mempolicy/weighted_interleave"):
        pytest.skip("this kernel has no weighted interleave (Linux 6.9+)")
    mem = min(discover().allowed_nodes)
    weight = open(f"/sys/kernel/mm/mempolicy/weighted_interleave/node{mem}").read().strip()
    cp = numabind_cli("run", "--weighted-interleave", str(mem), "--", sys.executable, "-m", "numabind", "show",
                      "--json")
    assert cp.returncode == 0, cp.stderr
    d = json.loads(cp.stdout)
    assert d["policy"] == "weighted-interleave" and d["weights"] == {str(mem): int(weight)}
    text = numabind_cli("run", "-w", str(mem), "--", sys.executable, "-m", "numabind", "show")
    assert show_fields(text.stdout)["policy"] == "weighted-interleave"
    assert show_fields(text.stdout)["interleavemask"] == str(mem)


# --------------------------------------------------------------------------- topology
@kernel
def test_topology_json_is_to_dict(capsys):
    rc, out, _ = run_main(capsys, "topology", "--json")
    assert rc == 0
    assert json.loads(out) == json.loads(json.dumps(discover().to_dict()))


def test_topology_of_a_fake_tree(capsys, gpu_machine):
    rc, out, _ = run_main(capsys, "--root", gpu_machine, "topology", "--json")
    assert rc == 0
    assert json.loads(out) == json.loads(json.dumps(discover(gpu_machine).to_dict()))
    rc, out, _ = run_main(capsys, "--root", gpu_machine, "topology")
    assert rc == 0
    assert f"root: {gpu_machine}" in out
    nodes_part = out.split("GPUs")[0]
    rows = {line.split()[0]: line.split() for line in nodes_part.splitlines() if line[:1].isdigit()}
    assert rows["0"][1] == "0-3,8-11" and rows["1"][1] == "4-7,12-15"
    assert rows["0"][-2:] == ["10", "21"] and rows["1"][-2:] == ["21", "10"]
    assert "Intel(R) Xeon(R) Platinum 8480+" in out
    assert "0000:18:00.0" in out


def test_topology_takes_root_after_the_subcommand(capsys, gpu_machine):
    """DESIGN.md: ``numabind topology [--root R] [--json]``."""
    try:
        rc, out, _ = run_main(capsys, "topology", "--root", gpu_machine, "--json")
    except SystemExit as e:
        pytest.fail(f"`numabind topology --root R --json` is refused (exit {e.code}): {capsys.readouterr().err}")
    assert rc == 0
    assert json.loads(out) == json.loads(json.dumps(discover(gpu_machine).to_dict()))


def test_root_from_the_environment(capsys, gpu_machine, monkeypatch):
    monkeypatch.setenv("NUMABIND_FSROOT", gpu_machine)
    rc, out, _ = run_main(capsys, "topology", "--json")
    assert rc == 0
    assert json.loads(out) == json.loads(json.dumps(discover(gpu_machine).to_dict()))
    assert len(json.loads(out)["nodes"]) == 2


# --------------------------------------------------------------------------- plan
def test_plan_json_on_a_fake_tree_with_gpus(capsys, gpu_machine):
    rc, out, _ = run_main(capsys, "--root", gpu_machine, "plan", "--json")
    assert rc == 0
    rows = json.loads(out)
    # the plans written out, not recomputed by the function the CLI calls
    assert [r["plan"] for r in rows] == [
        {"cpus": "0-3,8-11", "mem_policy": "bind", "mem_nodes": "0", "numactl": "--physcpubind=0-3,8-11 --membind=0"},
        {"cpus": "4-7,12-15", "mem_policy": "bind", "mem_nodes": "1",
         "numactl": "--physcpubind=4-7,12-15 --membind=1"}]
    assert [(r["cpu_node"], r["numa_node"], r["error"]) for r in rows] == [(0, 0, None), (1, 1, None)]
    assert [r["gpu"] for r in rows] == [0, 1]
    assert [r["pci_address"] for r in rows] == ["0000:18:00.0", "0000:9a:00.0"]
    assert [r["mem_nodes"] for r in rows] == ["0", "1"]


def test_plan_one_gpu_other_mode_and_policy(capsys, gpu_machine):
    rc, out, _ = run_main(capsys, "--root", gpu_machine, "plan", "--gpu", "1", "--mode", "socket",
                          "--policy", "interleave", "--json")
    assert rc == 0
    (row,) = json.loads(out)
    assert row["plan"] == {"cpus": "4-7,12-15", "mem_policy": "interleave", "mem_nodes": "1",
                           "numactl": "--physcpubind=4-7,12-15 --interleave=1"}
    assert any("socket: package" in why for why in row["reasons"]), row["reasons"]
    assert row["gpu"] == 1 and row["cpu_node"] == 1


def test_plan_text_on_a_fake_tree(capsys, gpu_machine):
    rc, out, _ = run_main(capsys, "--root", gpu_machine, "plan")
    assert rc == 0
    assert "Plans per GPU worker (mode node, memory bind)" in out
    assert Plan(cpus="0-3,8-11", mem_policy="bind", mem_nodes={0}).to_numactl_args() in out


def test_plan_without_gpus_shows_per_node_plans(capsys, tmp_path):
    two_sockets(tmp_path, cpus_per_socket=4, smt=False)
    rc, out, _ = run_main(capsys, "--root", str(tmp_path), "plan")
    assert rc == 0
    assert "Plans per NUMA node" in out
    assert "--physcpubind=0-3 --membind=0" in out and "--physcpubind=4-7 --membind=1" in out


def test_plan_json_exit_1_when_a_gpu_cannot_be_placed(capsys, tmp_path):
    two_sockets(tmp_path, cpus_per_socket=8)
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=-1, local_cpulist="0-15")
    rc, out, _ = run_main(capsys, "--root", str(tmp_path), "plan", "--json")
    assert rc == 1
    (row,) = json.loads(out)
    assert row["plan"] is None and row["error"]


# --------------------------------------------------------------------------- run
@kernel
def test_run_done_when_command():
    """The issue's acceptance line, verbatim."""
    cp = numabind_cli("run", f"--physcpubind={CPU_B}", f"--membind={MEM_NODE}", "--", "grep", "-E",
                      "Cpus_allowed_list", "/proc/self/status")
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.split() == ["Cpus_allowed_list:", str(CPU_B)]


@kernel
def test_run_console_script():
    beside = os.path.join(os.path.dirname(sys.executable), "numabind")
    exe = beside if os.access(beside, os.X_OK) else shutil.which("numabind")
    assert exe is not None, "pip install provides the numabind console script"
    cp = subprocess.run([exe, "run", f"--physcpubind={CPU_B}", f"--membind={MEM_NODE}", "--", "grep", "-E",
                         "Cpus_allowed_list", "/proc/self/status"], capture_output=True, text=True, env=child_env(),
                        timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.split() == ["Cpus_allowed_list:", str(CPU_B)]


from tests.run_path import CPUSET_MODULES, RUN_PATH_MODULES  # noqa: E402 - pinned there, once (test_layers too)


@kernel
def test_run_fast_path_loads_only_what_a_bind_needs():
    cpu = min(os.sched_getaffinity(0))
    code = ("import os, sys\n"
            "before = set(sys.modules)\n"
            "def exec_instead(path, argv, env):\n"
            "    print(' '.join(sorted(set(sys.modules) - before)), flush=True)\n"
            "    os._exit(0)\n"
            "os.execvpe = exec_instead\n"
            "from numabind.cli import main\n"
            f"main(['run', '--physcpubind={cpu}', '--membind={MEM_NODE}', '--', 'true'])\n"
            "raise SystemExit('the fast path did not exec')\n")
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=60,
                        cwd=ROOT)
    assert cp.returncode == 0, cp.stderr
    loaded = set(cp.stdout.split())
    online = live.machine().online_cpus
    # the cpuset is read only when the affinity leaves out an online CPU (a one-CPU runner: taskset -c 0)
    expected = RUN_PATH_MODULES | (CPUSET_MODULES if not os.sched_getaffinity(0) >= online else set())
    assert loaded == expected, f"more: {sorted(loaded - expected)}; fewer: {sorted(expected - loaded)}"


@kernel
def test_run_fast_path_reads_the_cpuset_only_when_the_affinity_leaves_out_a_cpu():
    online = sorted(live.machine().online_cpus)
    if len(online) < 2 or not live.limits().allowed_cpus >= set(online):
        pytest.skip("needs two online CPUs, both in this process's cpuset")
    code = ("import os, sys\n"
            "os.execvpe = lambda path, argv, env: (print('cgroup', 'numabind._cgroup' in sys.modules, flush=True), "
            "os._exit(0))\n"
            "from numabind.cli import main\n"
            f"main(['run', '--physcpubind={online[0]}', '--membind={MEM_NODE}', '--', 'true'])\n"
            "raise SystemExit('the fast path did not exec')\n")
    seen = {}
    for affinity in ({online[0]}, set(online)):
        cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(),
                            timeout=60, cwd=ROOT, preexec_fn=lambda cpus=affinity: os.sched_setaffinity(0, cpus))
        assert cp.returncode == 0, cp.stderr
        seen[len(affinity)] = cp.stdout.split()
    assert seen == {1: ["cgroup", "True"], len(online): ["cgroup", "False"]}


@kernel
@pytest.mark.parametrize("how", ("--backend", "NUMABIND_BACKEND"))
@pytest.mark.parametrize("backend", ("libnuma", "syscall", "numactl"))
def test_run_with_each_backend_binds_cpus_and_memory(backend, how):
    args, env = ["run"], child_env()
    if how == "--backend":
        args += ["--backend", backend]
    else:
        env["NUMABIND_BACKEND"] = backend
    cp = numabind_cli(*args, f"--physcpubind={CPU_B}", f"--membind={MEM_NODE}", "--", "numactl", "--show", env=env)
    assert cp.returncode == 0, cp.stderr
    fields = show_fields(cp.stdout)
    assert fields["physcpubind"].split() == [str(CPU_B)]
    assert fields["policy"] == "bind" and fields["membind"].split() == [str(MEM_NODE)]
    assert cp.stderr == ""


@kernel
def test_run_with_the_none_backend_binds_cpus_and_warns_only_when_lenient(tmp_path):
    cp = numabind_cli("run", "--backend", "none", "--lenient", f"--physcpubind={CPU_B}", f"--membind={MEM_NODE}",
                      "--", "numactl", "--show")
    assert cp.returncode == 0, cp.stderr
    fields = show_fields(cp.stdout)
    assert fields["physcpubind"].split() == [str(CPU_B)] and fields["policy"] == "default"
    assert "WARNING" in cp.stderr and "set_mempolicy" in cp.stderr and "ENOTSUP" in cp.stderr
    command, marker = _marker_command(tmp_path)
    for strict in ([], ["--strict"]):   # scripts are safe by default: the memory binding was asked for
        cp = numabind_cli("run", "--backend", "none", *strict, f"--physcpubind={CPU_B}", f"--membind={MEM_NODE}",
                          "--", *command)
        assert cp.returncode == 1, (strict, cp.returncode, cp.stderr)
        assert "numabind: error:" in cp.stderr and "set_mempolicy" in cp.stderr
        assert not marker.exists()
    both = numabind_cli("run", "--strict", "--lenient", "-C", str(CPU_A), "--", *command)
    assert both.returncode == 2 and "--strict and --lenient" in both.stderr


@kernel
@pytest.mark.parametrize("opts,expect", [
    (["-C", "{B}", "-m", "{N}"], ("{B}", "bind")),
    (["--cpus={A}", "--interleave={N}"], ("{A}", "interleave")),
    (["--cpunodebind={N}", "--preferred={N}"], ("{NODE}", "preferred")),
    (["--physcpubind={B}", "--preferred-many={N}"], ("{B}", "preferred-many")),
    (["--physcpubind={A}", "--localalloc"], ("{A}", "local")),
    (["--membind={N}"], ("{ALL}", "bind")),
])
def test_run_numactl_like_options(opts, expect):
    ids = {"A": CPU_A, "B": CPU_B, "N": MEM_NODE, "ALL": " ".join(map(str, ALLOWED)),
           "NODE": " ".join(map(str, sorted(discover().nodes[MEM_NODE].cpus & discover().allowed_cpus)))}  # cpuset
    opts = [o.format(**ids) for o in opts]
    expect = (expect[0].format(**ids), expect[1])
    cp = numabind_cli("run", *opts, "--", "numactl", "--show")
    assert cp.returncode == 0, cp.stderr
    fields = show_fields(cp.stdout)
    if expect[1] != "local":   # numactl --show prints no physcpubind line under --localalloc
        assert fields["physcpubind"] == expect[0]
    assert fields["policy"] == expect[1]


@kernel
def test_run_verbose_prints_the_report():
    cp = numabind_cli("-v", "run", "--physcpubind=0", "--", "true")
    assert cp.returncode == 0
    assert "requested: cpus 0" in cp.stderr and "backend:" in cp.stderr


@kernel
def test_run_with_libnuma_absent_uses_syscall():
    cp = numabind_cli("-v", "run", f"--physcpubind={CPU_B}", f"--membind={MEM_NODE}", "--", "numactl", "--show",
                      env=child_env(_NUMABIND_LIBNUMA="/nonexistent-numabind/libnuma.so.1"))
    assert cp.returncode == 0, cp.stderr
    assert show_fields(cp.stdout)["policy"] == "bind"
    # the report gives the real reason for the choice, not "forced"
    assert "backend:   syscall (syscall: first usable in the order" in cp.stderr, cp.stderr
    assert "libnuma unavailable" in cp.stderr and "/nonexistent-numabind/libnuma.so.1" in cp.stderr


@kernel
def test_run_without_the_native_module_goes_through_numactl():
    code = BLOCK_NATIVE + (
        "import sys\nfrom numabind.cli import main\n"
        f"sys.exit(main(['run', '--physcpubind={CPU_B}', '--membind={MEM_NODE}', '--', 'numactl', '--show']))\n")
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(),
                        timeout=60, cwd=ROOT)
    assert cp.returncode == 0, cp.stderr
    fields = show_fields(cp.stdout)
    assert fields["physcpubind"].split() == [str(CPU_B)] and fields["policy"] == "bind"


@kernel
def test_run_forced_numactl_when_absent_exits_1(tmp_path):
    cp = numabind_cli("run", "--backend", "numactl", "--physcpubind=0", "--", "/usr/bin/touch",
                      str(tmp_path / "ran"), env=child_env(PATH=str(tmp_path)))
    assert cp.returncode == 1
    assert "numabind: error:" in cp.stderr and "numactl is not installed" in cp.stderr
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("args,message", [
    (["--physcpubind=1-0", "--", "true"], "ends before it starts"),
    (["--physcpubind=x", "--", "true"], "--physcpubind"),
    (["-m", "0-x", "--", "true"], "--membind"),
    (["--physcpubind=1"], "no command given"),
    (["--physcpubind=1", "--"], "no command given"),
    (["--", "true"], "give a binding"),
    (["--membind=0", "--interleave=0", "--", "true"], "one memory policy"),
    (["-C", "0", "-N", "0", "--", "true"], "--physcpubind and --cpunodebind"),
    (["--preferred=0,1", "--", "true"], "--preferred-many"),
    (["--migrate", "-C", "0", "--", "true"], "--migrate"),
    (["-b", "-C", "0", "--", "true"], "--balancing"),
    (["-b", "-i", "0", "--", "true"], "--balancing"),
    (["--all", "--gpu", "0", "--", "true"], "--all"),
    (["--bogus", "-C", "0", "--", "true"], "unrecognized arguments"),
])
def test_run_usage_errors_exit_2(args, message, tmp_path):
    command, marker = _marker_command(tmp_path)
    if args[-1] == "true":
        args = [*args[:-1], *command]
    cp = numabind_cli("run", *args)
    assert cp.returncode == 2, (cp.returncode, cp.stdout, cp.stderr)
    assert "error:" in cp.stderr and message in cp.stderr
    assert not marker.exists()


def _absent_node() -> int:
    return max(discover().nodes) + 1


def _absent_cpu() -> int:
    return max(discover().online_cpus) + 1


@pytest.mark.parametrize("args,message", [
    (lambda: ["--membind", str(_absent_node())], lambda: str(_absent_node())),
    (lambda: ["--interleave", str(_absent_node())], lambda: str(_absent_node())),
    (lambda: ["--cpunodebind", str(_absent_node())], lambda: f"node {_absent_node()} does not exist"),
    (lambda: ["--physcpubind", str(_absent_cpu())], lambda: str(_absent_cpu())),
    (lambda: ["--strict", "--physcpubind", f"0,{_absent_cpu()}"], lambda: f"CPUs {_absent_cpu()}"),
    (lambda: ["--gpu", "0"], lambda: "GPU"),
    (lambda: ["--membind", "netdev:lo"], lambda: "virtual"),
    (lambda: ["--membind", "pci:ffff:ff:1f.7"], lambda: "ffff:ff:1f.7"),
    (lambda: ["-m", "!all"], lambda: "--membind"),
], ids=["membind", "interleave", "cpunodebind", "physcpubind", "strict-cpus", "gpu", "netdev-lo", "pci-absent",
        "none-left"])
def test_run_a_binding_that_cannot_be_applied_exits_1_and_runs_nothing(args, message, tmp_path):
    """As numactl ("<7> is invalid", exit 1): a binding this machine cannot give is exit 1, and the
    command does not run unbound (the fast path defers such errors to the full CLI, which says why)."""
    command, marker = _marker_command(tmp_path)
    cp = numabind_cli("run", *args(), "--", *command)
    assert cp.returncode == 1, (cp.returncode, cp.stderr)
    assert "numabind: error:" in cp.stderr and message() in cp.stderr
    assert "numabind: error: numabind" not in cp.stderr      # one prefix
    assert not marker.exists()


@pytest.mark.parametrize("make,status,message", [
    (lambda d: str(d / "absent"), 127, "No such file or directory"),
    (lambda d: "numabind-no-such-command", 127, "command not found"),
    (lambda d: _not_executable(d), 126, "Permission denied"),
    (lambda d: str(d), 126, "Permission denied"),                 # a directory
], ids=["absent-path", "absent-on-path", "not-executable", "directory"])
@pytest.mark.parametrize("path", ["fast", "full"])
def test_run_exec_failures_exit_like_a_shell(make, status, message, path, tmp_path):
    cpu = str(min(os.sched_getaffinity(0)))
    opts = ["-C", cpu] if path == "fast" else ["-C", cpu, "-v"]   # -v: not the fast path's
    cp = numabind_cli("run", *opts, "--", make(tmp_path))
    assert cp.returncode == status, (cp.returncode, cp.stderr)
    assert message in cp.stderr and "numabind: error: cannot execute" in cp.stderr
    shell = subprocess.run(["sh", "-c", 'exec "$0"', make(tmp_path)], capture_output=True)
    assert shell.returncode == status      # what a shell gives


def _not_executable(d) -> str:
    path = d / "script"
    path.write_text("#!/bin/sh\necho hi\n")
    path.chmod(0o644)
    return str(path)


@kernel
def test_run_exit_status_is_the_commands():
    cp = numabind_cli("run", "-C", str(min(os.sched_getaffinity(0))), "--", "sh", "-c", "exit 7")
    assert cp.returncode == 7


def test_unknown_backend_in_the_environment_exits_2():
    cp = numabind_cli("run", "--physcpubind=0", "--", "true", env=child_env(NUMABIND_BACKEND="bogus"))
    assert cp.returncode == 2
    assert "numabind: error:" in cp.stderr and "bogus" in cp.stderr


def test_bad_subcommand_option_is_a_usage_error():
    cp = numabind_cli("plan", "--mode", "sideways")
    assert cp.returncode == 2 and "invalid choice" in cp.stderr


# --------------------------------------------------------------------------- issue 15: never the wrong code
def _marker_command(tmp_path) -> tuple[list[str], object]:
    marker = tmp_path / "ran"
    return ["/usr/bin/touch", str(marker)], marker


@pytest.mark.parametrize("how", ["env", "flag"])
def test_run_refuses_a_replayed_root(how, gpu_machine, tmp_path):
    """Issue 15, item 6: with NUMABIND_FSROOT (or --root) naming a dump, `run -N 0` would bind this
    machine's processes to CPUs read from the dump: it is an error that says how to plan on the dump."""
    command, marker = _marker_command(tmp_path)
    if how == "env":
        cp = numabind_cli("run", "-N", "0", "--", *command, env=child_env(NUMABIND_FSROOT=gpu_machine))
        source = "NUMABIND_FSROOT"
    else:
        cp = numabind_cli("--root", gpu_machine, "run", "-N", "0", "--", *command)
        source = "--root"
    assert cp.returncode == 2, (cp.returncode, cp.stderr)
    assert "numabind: error:" in cp.stderr and source in cp.stderr and gpu_machine in cp.stderr
    assert f"numabind plan --root {gpu_machine}" in cp.stderr
    assert not marker.exists()


@kernel
def test_run_accepts_the_live_root_given_explicitly():
    cpu = max(os.sched_getaffinity(0))
    for args, env in ((["--root", "/"], child_env()), ([], child_env(NUMABIND_FSROOT="/"))):
        cp = numabind_cli(*args, "run", "-C", str(cpu), "--", "grep", "Cpus_allowed_list", "/proc/self/status",
                          env=env)
        assert cp.returncode == 0, cp.stderr
        assert cp.stdout.split() == ["Cpus_allowed_list:", str(cpu)]


def test_plan_takes_root_after_the_subcommand(capsys, gpu_machine):
    rc, out, _ = run_main(capsys, "plan", "--root", gpu_machine, "--json")
    assert rc == 0
    assert [r["pci_address"] for r in json.loads(out)] == ["0000:18:00.0", "0000:9a:00.0"]


def test_show_refuses_a_root_it_would_ignore(capsys, gpu_machine):
    rc, _, err = run_main(capsys, "--root", gpu_machine, "show")
    assert rc == 2 and "--root" in err and "does not apply" in err


CONFLICTS = [  # (run options, the options the message must name)
    (["--gpu", "0", "--physcpubind", "1", "--interleave", "0"], ["--gpu", "--physcpubind", "--interleave"]),
    (["--gpu", "0", "-m", "0"], ["--gpu", "--membind"]),
    (["--gpu", "0", "--localalloc"], ["--gpu", "--localalloc"]),
    (["--gpu", "0", "--cpunodebind", "0"], ["--gpu", "--cpunodebind"]),
    (["--policy", "interleave", "-C", "0"], ["--policy"]),
    (["--mode", "socket", "-C", "0"], ["--mode"]),
    (["--mode", "node", "--policy", "bind", "-m", "0"], ["--mode", "--policy"]),
    (["-C", "0", "-C", "1"], ["-C", "given twice"]),
    (["-C", "0", "--cpus", "1"], ["--cpus", "given twice"]),
    (["--membind", "0", "-m", "0"], ["-m", "given twice"]),
    (["--gpu", "0", "--gpu", "1"], ["--gpu", "given twice"]),
    (["-C", "0", "--backend", "syscall", "--backend", "none"], ["--backend", "given twice"]),
]


class Executed(Exception):
    """Raised instead of exec'ing: ``numabind run`` in-process must never replace the test process."""


@pytest.fixture
def no_exec(monkeypatch):
    def refuse(path, argv):
        raise Executed(list(argv))

    monkeypatch.setattr(os, "execv", refuse)
    monkeypatch.setattr(os, "execvp", refuse)
    monkeypatch.setattr(os, "execvpe", lambda path, argv, env: refuse(path, argv))   # numabind run's exec


def run_in_process(capsys, *argv: str) -> tuple[object, str]:
    """``numabind ARGV`` through cli.main: (exit status, or the argv it would have exec'd; stderr)."""
    try:
        rc: object = main(list(argv))
    except SystemExit as e:  # argparse's own usage errors
        rc = e.code
    except Executed as e:
        rc = e.args[0]
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("opts,named", CONFLICTS, ids=[" ".join(o) for o, _ in CONFLICTS])
def test_run_conflicting_or_unused_options_are_a_usage_error(opts, named, capsys, no_exec):
    """Issue 15, item 7: nothing is silently ignored; exit 2 naming the options, the command never runs."""
    rc, err = run_in_process(capsys, "run", *opts, "--", "true")
    assert rc == 2, (rc, err)
    for name in named:
        assert name in err, (name, err)


def test_plan_of_a_gpu_that_cannot_be_placed_exits_1_in_text_and_json(capsys, gpu_machine, tmp_path):
    """Issue 15, item 10: `plan --gpu 99` had exit 0 in text mode but 1 with --json."""
    for extra in ([], ["--json"]):
        rc, out, _ = run_main(capsys, "--root", gpu_machine, "plan", "--gpu", "99", *extra)
        assert rc == 1, extra
        assert "GPU 99 is not visible" in out
    no_gpus = tmp_path / "no-gpus"
    two_sockets(no_gpus, cpus_per_socket=4, smt=False)
    for extra in ([], ["--json"]):  # a machine without GPUs: --gpu is not silently replaced by node plans
        rc, out, _ = run_main(capsys, "--root", str(no_gpus), "plan", "--gpu", "0", *extra)
        assert rc == 1 and "GPU 0 is not visible" in out, (extra, out)
    rc, _, _ = run_main(capsys, "--root", gpu_machine, "plan", "--gpu", "1")
    assert rc == 0


@pytest.mark.parametrize("args", [["topology", "--json"], ["plan", "--json"], ["hardware"]])
def test_a_closed_pipe_ends_quietly(args, gpu_machine):
    """Issue 15, item 10: `numabind ... --json | head` ended in a BrokenPipeError traceback."""
    r, w = os.pipe()
    os.close(r)  # the reader is gone before numabind writes a byte
    try:
        cp = subprocess.run([sys.executable, "-m", "numabind", "--root", gpu_machine, *args], stdout=w,
                            stderr=subprocess.PIPE, text=True, env=child_env(), timeout=60, cwd=ROOT)
    finally:
        os.close(w)
    assert cp.stderr == "", cp.stderr
    assert cp.returncode == 128 + 13  # as a process ended by SIGPIPE


# --------------------------------------------------------------------------- one parser per command
def test_every_subcommand_is_registered_once_and_dispatched():
    """``numabind.cli.SUBCOMMANDS`` (what the dispatch and numactl's form read) names what commands registers."""
    from numabind.cli import SUBCOMMANDS
    from numabind.cli.commands import COMMANDS, build_parser

    assert set(COMMANDS) == set(SUBCOMMANDS)
    parser_words = next(a for a in build_parser()._actions if a.dest == "cmd").choices
    assert list(parser_words) == list(COMMANDS)


def test_run_fast_path_and_argparse_read_one_table():
    """Every option string of ``numabind run``'s parser comes from ``RUN_OPTIONS``; the fast path takes exactly the
    strings of its handed and ``own`` options, each as the full command line names it."""
    from numabind.cli import _FAST, HANDED, RUN_OPTIONS, run_spellings
    from numabind.cli.commands import build_parser, subcommand

    run = subcommand(build_parser(), "run")
    own = {s for a in run._actions for s in a.option_strings} - {"-h", "--help", "--root", "-v", "--verbose", "--json"}
    assert own == {s for name in RUN_OPTIONS for s in run_spellings(name)[0]}
    fast = {name for name, kind in RUN_OPTIONS.items() if kind == "own" or kind in HANDED}
    assert set(_FAST) == {s for name in fast for s in run_spellings(name)[0]}
    for action in run._actions:
        for s in action.option_strings:
            if s in _FAST:
                assert action.dest == _FAST[s][0].replace("-", "_")
                assert (action.nargs != 0) == _FAST[s][1], s
    assert "-t" not in own     # numabind's --strict is not numactl's -t/--strict (shared memory)
