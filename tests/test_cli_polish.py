"""CLI polish (issue 16): --version, global options after the subcommand, --json everywhere, help on
every run flag, plan --all, one error prefix, numactl's node specifiers (!, +, all, devices) and
-b/--balancing in ``numabind run``, compared with numactl where it has the same option.

CPU and node ids are derived at run time; the kernel tests run children (``numabind run`` execs).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys

import pytest

import numabind
from numabind import discover
from numabind.cli import main
from numabind.cli.commands import build_parser
from numabind.iodevices import DeviceNodes, scan_pci
from numabind.errors import PlanError
from tests.fakegpu import add_nvidia_gpu
from tests.fakesys import GIB_KB, FakeMachine, two_sockets
from tests.kernel import run_main
from tests.kernel import numabind_cli as cli

kernel = pytest.mark.kernel
needs_numactl = pytest.mark.skipif(shutil.which("numactl") is None, reason="numactl is not installed")
pytestmark = pytest.mark.usefixtures("no_gpu_env")


@pytest.fixture
def machine(tmp_path) -> str:
    two_sockets(tmp_path / "m", cpus_per_socket=4, smt=False)
    return str(tmp_path / "m")


# --------------------------------------------------------------------------- version, global options
def test_version(capsys):
    rc, out, _ = run_main(capsys, "--version")
    assert rc == 0 and out.strip() == f"numabind {numabind.__version__}"


@pytest.mark.parametrize("sub", ["hardware", "topology", "plan"])
def test_root_and_json_before_or_after_the_subcommand(sub, machine, capsys):
    outs = set()
    for argv in (["--root", machine, "--json", sub], [sub, "--root", machine, "--json"],
                 ["--json", sub, "--root", machine], ["--root", machine, sub, "--json"]):
        rc, out, err = run_main(capsys, *argv)
        assert rc == 0, (argv, err)
        json.loads(out)
        outs.add(out)
    assert len(outs) == 1


@pytest.mark.parametrize("argv,level", [(["-v", "topology"], 1), (["topology", "-vv"], 2), (["-vv", "plan"], 2),
                                        (["plan", "-v"], 1), (["show"], 0), (["run", "-v", "--", "true"], 1),
                                        (["stat", "-v", "1"], 1)])
def test_verbose_before_or_after_the_subcommand(argv, level):
    assert build_parser().parse_args(argv).verbose == level


def test_main_json(machine, capsys):
    rc, out, _ = run_main(capsys, "--root", machine, "--json")
    assert rc == 0
    d = json.loads(out)
    assert set(d) == {"topology", "plans", "binding", "backends", "check"}
    assert d["topology"] == json.loads(json.dumps(discover(machine).to_dict()))
    assert [r["node"] for r in d["plans"]] == [0, 1]
    assert d["plans"][1]["plan"]["numactl"] == "--physcpubind=4-7 --membind=1"
    assert d["backends"]["selected"]


@kernel
def test_run_json_reports_the_binding_on_stderr():
    cpu = str(max(os.sched_getaffinity(0)))
    cp = cli("run", "--json", "-C", cpu, "-v", "--", "sh", "-c", "echo out")
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout == "out\n"                  # stdout is the command's
    report = json.loads(next(line for line in cp.stderr.splitlines() if line.startswith("{")))
    assert f"cpus={cpu};" in report["applied"]
    assert report["balancing"] is False


def test_every_subcommand_takes_json():
    """Every subcommand that prints takes --json; `instrument` prints nothing of its own (it execs the command with
    every argument after it), and `completion` prints a shell script, so they have none."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert "instrument" in sub.choices
    for name, p in sub.choices.items():
        if name not in ("instrument", "completion"):
            assert any("--json" in a.option_strings for a in p._actions), name


def test_every_run_flag_has_help():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [a.option_strings or a.dest for a in sub.choices["run"]._actions
               if not a.help or a.help == argparse.SUPPRESS]
    assert missing == []


# --------------------------------------------------------------------------- plan
def test_plan_all_without_gpus_says_so_in_text_and_json(machine, capsys):
    rc, out, _ = run_main(capsys, "--root", machine, "plan", "--all")
    assert rc == 1 and "no GPU is visible" in out
    rc, out, err = run_main(capsys, "--root", machine, "plan", "--all", "--json")
    assert rc == 1 and json.loads(out) == [] and "no GPU is visible" in err
    rc, out, _ = run_main(capsys, "--root", machine, "plan")          # without --all: the per-node plans
    assert rc == 0 and "Plans per NUMA node" in out
    rc, out, _ = run_main(capsys, "--root", machine, "plan", "--json")
    assert rc == 0 and [r["plan"]["numactl"] for r in json.loads(out)] == [
        "--physcpubind=0-3 --membind=0", "--physcpubind=4-7 --membind=1"]


def test_plan_all_with_gpus_is_every_gpu(machine, capsys):
    add_nvidia_gpu(machine, "0000:18:00.0", numa_node=0, local_cpulist="0-3")
    add_nvidia_gpu(machine, "0000:9a:00.0", numa_node=1, local_cpulist="4-7", minor=1,
                   uuid="GPU-00000000-0000-0000-0000-000000000001")
    rc, every, _ = run_main(capsys, "--root", machine, "plan", "--all", "--json")
    assert rc == 0
    rc, default, _ = run_main(capsys, "--root", machine, "plan", "--json")
    assert every == default and [r["gpu"] for r in json.loads(every)] == [0, 1]


def test_plan_gpu_without_gpus_fails_the_same_way_in_text_and_json(machine, capsys):
    rc_text, out_text, _ = run_main(capsys, "--root", machine, "plan", "--gpu", "0")
    rc_json, out_json, _ = run_main(capsys, "--root", machine, "plan", "--gpu", "0", "--json")
    assert rc_text == rc_json == 1
    (row,) = json.loads(out_json)
    assert row["plan"] is None and row["error"] in out_text


# --------------------------------------------------------------------------- messages
def test_a_node_with_neither_cpus_nor_memory_is_not_cpu_only(tmp_path, capsys):
    m = FakeMachine(tmp_path)
    m.add_node(0, range(4), 8 * GIB_KB)
    m.add_node(1, (), 0)                # neither CPUs nor memory (a hot-pluggable node not populated)
    m.add_node(2, range(4, 6), 0)       # CPUs only
    for cpu in range(6):
        m.set_cpu_topology(cpu, 0, cpu)
    m.write()
    rc, out, _ = run_main(capsys, "--root", str(tmp_path), "topology")
    assert rc == 0
    rows = {line.split()[0]: line for line in out.split("\n\n")[1].splitlines()[1:]}
    assert "(cpu-only)" not in rows["1"] and "no CPUs, no memory" in rows["1"]
    assert "(cpu-only)" in rows["2"] and "(memory-only)" not in rows["0"]


ERRORS = [["run", "-m", "99999", "--", "true"], ["run", "-C", "x", "--", "true"], ["run", "--", "true"],
          ["run", "-C", "0"], ["run", "--gpu", "0", "--", "true"], ["run", "-C", "0", "--", "/nonexistent"],
          ["--root", "/nonexistent-root", "topology"], ["run", "-C", "0", "-N", "0", "--", "true"]]


@pytest.mark.parametrize("argv", ERRORS, ids=[" ".join(a) for a in ERRORS])
def test_errors_have_one_prefix_and_name_numabind(argv):
    cp = cli(*argv)
    assert cp.returncode in (1, 2, 127), (cp.returncode, cp.stderr)
    assert cp.stderr.count("error:") == 1, cp.stderr
    assert "error: numabind" not in cp.stderr and "numabind: error: numabind" not in cp.stderr
    assert "numactl" not in cp.stderr, cp.stderr


def test_the_plan_is_numabind_runs_not_numactls():
    from numabind.cli.run import _run_plan

    cpu = str(min(os.sched_getaffinity(0)))
    plan = _run_plan(build_parser().parse_args(["run", "-C", cpu, "--", "true"]))
    assert plan.reason == f"numabind run --physcpubind={cpu}"


# --------------------------------------------------------------------------- numactl's specifiers
def _specifier_cases() -> list:
    topo = discover()
    cpus = sorted(os.sched_getaffinity(0))       # numactl reads -C's lists against the affinity (Cpus_allowed)
    mem = sorted(n for n in topo.allowed_nodes if topo.nodes[n].memory_bytes)
    cases = [["-C", "all"], ["-C", "+0"], ["-N", "all"], ["-N", "+0"], ["-m", "all"], ["-m", "+0"],
             ["-i", "all"], ["-p", "+0"], ["-C", f"+0-{len(cpus) - 1}"], ["-a", "-C", "all"], ["-a", "-m", "all"]]
    if len(cpus) > 1:
        cases += [["-C", f"!{cpus[0]}"], ["-C", f"!+{len(cpus) - 1}"]]
    if len(mem) > 1:
        cases += [["-m", f"!{mem[0]}"], ["-i", f"!+0"]]
    # -N all, -N +0 and -a -C all take the cpuset's CPUs, whatever the affinity (issue 32): under taskset -c 0 too
    return cases


@kernel
@needs_numactl
@pytest.mark.parametrize("opts", _specifier_cases(), ids=lambda o: " ".join(o))
def test_node_specifiers_bind_as_numactl_does(opts):
    """`numabind run OPTS -- numactl --show` shows what `numactl OPTS numactl --show` shows."""
    ours = cli("run", *opts, "--", "numactl", "--show")
    theirs = subprocess.run(["numactl", *opts, "numactl", "--show"], capture_output=True, text=True, timeout=60)
    assert (ours.returncode, theirs.returncode) == (0, 0), (ours.stderr, theirs.stderr)
    mask = lambda text: [line for line in text.splitlines() if "interleave" not in line]  # noqa: E731
    assert mask(ours.stdout) == mask(theirs.stdout)


def _device_specs() -> list[str]:
    specs = []
    for dev in scan_pci("/"):
        if dev.important:
            specs.append(f"pci:{dev.address}")
        specs += [f"netdev:{n}" for n in dev.nets] + [f"block:{b}" for b in dev.blocks]
    return specs[:6] + ["netdev:lo"]


@kernel
@needs_numactl
@pytest.mark.parametrize("spec", _device_specs())
def test_device_specifiers_fail_or_bind_as_numactl_does(spec, tmp_path):
    """A device's node, or exit 1 when it has none (numactl: "<pci:...> is invalid", exit 1)."""
    marker = tmp_path / "ran"
    ours = cli("run", "-m", spec, "--", "sh", "-c", f"touch {marker}; numactl --show")
    theirs = subprocess.run(["numactl", "-m", spec, "numactl", "--show"], capture_output=True, text=True,
                            timeout=60)
    try:
        node = DeviceNodes("/").node_of(spec)
    except PlanError:
        node = None
    assert ours.returncode == theirs.returncode == (1 if node is None else 0), (ours.stderr, theirs.stderr)
    assert marker.exists() == (node is not None)
    if node is not None:
        assert ours.stdout == theirs.stdout


@pytest.mark.mempolicy
def test_device_specifiers_go_through_device_nodes(monkeypatch, capsys):
    """Both paths hand pci:/netdev:/block:/file: to iodevices.DeviceNodes, and bind to the node it gives."""
    mem = min(n for n in discover().allowed_nodes if discover().nodes[n].memory_bytes)
    asked = []

    def node_of(self, spec):
        asked.append(spec)
        return mem

    monkeypatch.setattr(DeviceNodes, "node_of", node_of)
    ran = []

    def exec_(path, argv, env):
        ran.append(list(argv))
        raise SystemExit(0)

    monkeypatch.setattr(os, "execvpe", exec_)
    for argv in (["run", "-m", "pci:0000:18:00.0", "--", "true"],              # the fast path
                 ["run", "-v", "--membind", "netdev:ens1", "--", "true"]):     # the full CLI
        with pytest.raises(SystemExit):
            main(argv)
        capsys.readouterr()
        mode = ctypes.c_int(0)
        mask = (ctypes.c_ulong * 16)()
        libnuma = ctypes.CDLL("libnuma.so.1")
        assert libnuma.get_mempolicy(ctypes.byref(mode), mask, ctypes.c_ulong(16 * 64 + 1), None,
                                     ctypes.c_ulong(0)) == 0
        assert (mode.value, mask[0]) == (2, 1 << mem)      # MPOL_BIND on the device's node
    assert asked == ["pci:0000:18:00.0", "netdev:ens1"] and len(ran) == 2


# --------------------------------------------------------------------------- -b / --balancing
def _mode_word_script() -> str:
    return ("import ctypes; m = ctypes.c_int(0); lib = ctypes.CDLL('libnuma.so.1'); "
            "mask = (ctypes.c_ulong * 16)(); "
            "assert lib.get_mempolicy(ctypes.byref(m), mask, ctypes.c_ulong(1025), None, ctypes.c_ulong(0)) == 0; "
            "print(m.value)")


@kernel
def test_balancing_sets_mpol_f_numa_balancing(tmp_path):
    mem = str(min(n for n in discover().allowed_nodes if discover().nodes[n].memory_bytes))
    ours = cli("run", "-b", "-m", mem, "--", sys.executable, "-c", _mode_word_script())
    if ours.returncode == 1 and "Linux 5.12" in ours.stderr:
        pytest.skip(f"this kernel refuses MPOL_F_NUMA_BALANCING: {ours.stderr.strip()}")
    assert ours.returncode == 0, ours.stderr
    assert int(ours.stdout) == 2 | 1 << 13          # MPOL_BIND | MPOL_F_NUMA_BALANCING
    if shutil.which("numactl"):
        theirs = subprocess.run(["numactl", "-b", "-m", mem, sys.executable, "-c", _mode_word_script()],
                                capture_output=True, text=True, timeout=60)
        assert theirs.stdout == ours.stdout
    plain = cli("run", "-m", mem, "--", sys.executable, "-c", _mode_word_script())
    assert int(plain.stdout) == 2
    for opts, on in ((["-b", "-m", mem], True), (["-m", mem], False)):
        shown = cli("run", *opts, "--", sys.executable, "-m", "numabind", "show", "--json")
        d = json.loads(shown.stdout)
        assert (d["policy"], d["nodes"], d["balancing"]) == ("bind", mem, on)


@kernel
def test_balancing_through_numactl_backend_is_refused_unless_lenient(tmp_path):
    mem = str(min(discover().allowed_nodes))
    marker = tmp_path / "ran"
    cp = cli("run", "--backend", "numactl", "-b", "-m", mem, "--", "touch", str(marker))
    assert cp.returncode == 1 and "--balancing" in cp.stderr and not marker.exists()
    cp = cli("run", "--backend", "numactl", "--lenient", "-b", "-m", mem, "--", "touch", str(marker))
    assert cp.returncode == 0 and "WARNING: --balancing left out" in cp.stderr and marker.exists()


@pytest.mark.kernel
def test_the_first_screen_says_what_check_would_refuse():
    """Issue 44: the overview's first line is ``numabind check``'s fast verdict, so a container that refuses
    ``set_mempolicy`` says so before anything else (the calls tried in a child, never in numabind itself)."""
    import textwrap

    from tests.kernel import SECCOMP, run_python

    cp = run_python(SECCOMP + textwrap.dedent('''
        import sys
        deny("set_mempolicy")
        from numabind.cli import main
        sys.exit(main([]))
    '''))
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines()[0] == ("check: memory policy: refused (EPERM): a seccomp profile that allows "
                                         "set_mempolicy (numabind check: the details)")
    free = run_python("import sys\nfrom numabind.cli import main\nsys.exit(main([]))\n")
    assert free.returncode == 0 and free.stdout.splitlines()[0].startswith("check: ok: "), free.stdout
