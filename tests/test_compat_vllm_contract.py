"""numabind.compat.vllm keeps vLLM's seams and wrapper contract (issue 27).

vLLM's own tests reach into its module: they patch ``subprocess.run``,
``envs``, ``builtins.open`` on its path constants and ``Path.read_text`` on
node CPU lists, and read the two wrapper variables. These cases restate, in
numabind's words, what each of those patches must change, and check that
vLLM's pattern ``_set_numa_wrapper_env`` + ``_mp_set_executable`` starts a
spawned child bound without numactl, and that the wrapper refuses hostile
variable values. The live machine is used (no topology pinned); CPUs and
nodes are derived from this process.
"""

from __future__ import annotations

import io
import logging
import multiprocessing
import multiprocessing.spawn
import os
import pathlib
import subprocess
import sys
import types

import pytest

from numabind import compat
from numabind.compat import vllm

from .fakecompat import vllm_config

pytestmark = pytest.mark.usefixtures("fresh_compat")

ARGS, PYEXE = vllm._NUMACTL_ARGS_ENV, vllm._NUMACTL_PYTHON_EXECUTABLE_ENV


@pytest.fixture(autouse=True)
def no_wrapper_env(monkeypatch):
    monkeypatch.delenv(ARGS, raising=False)
    monkeypatch.delenv(PYEXE, raising=False)
    vllm._pct_sku_config.cache_clear()
    yield
    vllm._pct_sku_config.cache_clear()


def fake_numactl(monkeypatch, refuse=(), stderr=b"numactl: refused"):
    """numactl 'on PATH' whose ``ARGS true`` fails when an option starts with one of ``refuse``."""
    calls = []

    def run(cmd, *args, **kwargs):
        calls.append(list(cmd))
        bad = any(word.startswith(tuple(refuse)) for word in cmd[1:-1]) if refuse else False
        return types.SimpleNamespace(returncode=1 if bad else 0, stderr=stderr if bad else b"", stdout="")

    monkeypatch.setattr(vllm.shutil, "which", lambda name: "/usr/bin/numactl")
    monkeypatch.setattr(vllm.subprocess, "run", run)
    return calls


def live_node() -> int:
    topo = compat.current_topology()
    return min(n for n, node in topo.nodes.items() if node.cpus)


# ----------------------------------------------------------------------------- module attributes
def test_the_attributes_vllm_patches_exist_and_are_the_modules():
    assert vllm.subprocess is subprocess
    assert vllm.multiprocessing is multiprocessing
    assert vllm.Path is pathlib.Path
    assert vllm.envs.VLLM_WORKER_MULTIPROC_METHOD in ("fork", os.environ.get("VLLM_WORKER_MULTIPROC_METHOD"))
    assert hasattr(vllm, "psutil")


def test_envs_reads_the_start_method_at_each_access(monkeypatch):
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    assert vllm.envs.VLLM_WORKER_MULTIPROC_METHOD == "fork"          # vLLM's default
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    assert vllm.envs.VLLM_WORKER_MULTIPROC_METHOD == "spawn"
    with pytest.raises(AttributeError):
        vllm.envs.NOT_A_VLLM_VARIABLE  # noqa: B018


def test_numactl_show_goes_through_the_modules_subprocess(monkeypatch, on_logger):
    seen = on_logger("vllm")
    monkeypatch.setattr(vllm.subprocess, "run", lambda *a, **k: types.SimpleNamespace(
        stdout="policy: default\nphyscpubind: 7 9\n\n", returncode=0))
    assert vllm._log_numactl_show("rank3") is True
    assert seen.at(logging.DEBUG) == ["rank3 affinity: policy: default, physcpubind: 7 9"]


def test_numactl_show_without_numactl_reads_the_binding_itself(monkeypatch, on_logger):
    seen = on_logger("vllm")

    def missing(*a, **k):
        raise FileNotFoundError("numactl")

    monkeypatch.setattr(vllm.subprocess, "run", missing)
    assert vllm._log_numactl_show("rank0") is True
    line = [m for m in seen.at(logging.DEBUG) if m.startswith("rank0 affinity: ")]
    assert len(line) == 1
    assert "physcpubind: " + " ".join(map(str, sorted(os.sched_getaffinity(0)))) in line[0]
    assert seen.at(logging.WARNING) == []


# ----------------------------------------------------------------------------- PCT seams
def test_pct_gate_reads_vllms_paths_with_open(monkeypatch):
    """The two gates are read with open() on the module's path constants; the node CPU lists with
    Path.read_text; a 72-core SKU keeps the CPUs whose id modulo 18 is 0 or 1."""
    topo = compat.current_topology()
    if topo.allowed_cpus != topo.online_cpus:
        pytest.skip("this process's cpuset is narrower than the online CPUs (PCT CPUs are then narrowed too)")
    real_open, real_read = open, pathlib.Path.read_text
    opened = []

    def fake_open(path, *a, **k):
        if path in (vllm._PROC_CPUINFO_PATH, vllm._PCT_HIGHEST_PERF_PATH):
            opened.append(path)
            return io.StringIO("model name\t: Intel(R) Xeon(R) 6962P\n" if path == vllm._PROC_CPUINFO_PATH
                               else "44\n")
        return real_open(path, *a, **k)

    def fake_read(self, *a, **k):
        if str(self) == "/sys/devices/system/node/node5/cpulist":
            return "0-40\n"
        return real_read(self, *a, **k)

    monkeypatch.setattr("builtins.open", fake_open)
    monkeypatch.setattr("pathlib.Path.read_text", fake_read)
    assert vllm._pct_sku_config() == vllm._PCT_CAPABLE_SKUS["6962P"]
    assert opened == [vllm._PROC_CPUINFO_PATH, vllm._PCT_HIGHEST_PERF_PATH]
    assert vllm._maybe_get_pct_cpu_binding([5]) == [0, 1, 18, 19, 36, 37]
    vllm._pct_sku_config.cache_clear()

    def cppc_off(path, *a, **k):
        if path == vllm._PCT_HIGHEST_PERF_PATH:
            return io.StringIO("39\n")
        return fake_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", cppc_off)
    assert vllm._pct_sku_config() is None            # the SKU matches, PCT is off: fail closed


# ----------------------------------------------------------------------------- the wrapper variables
def test_wrapper_variables_are_set_for_the_block_and_restored(monkeypatch):
    monkeypatch.setenv(ARGS, "before")
    with vllm._set_numa_wrapper_env("--cpunodebind=0", "/usr/bin/python3"):
        assert (os.environ[ARGS], os.environ[PYEXE]) == ("--cpunodebind=0", "/usr/bin/python3")
    assert os.environ[ARGS] == "before" and PYEXE not in os.environ


def test_configure_subprocess_publishes_the_resolved_options(monkeypatch):
    node = live_node()
    fake_numactl(monkeypatch, refuse=("--membind",))
    cfg = vllm_config(numa_bind=True, numa_bind_nodes=[node])
    with vllm.configure_subprocess(cfg, 0):
        assert os.environ[ARGS] == f"--cpunodebind={node}"       # the memory policy was refused
        assert os.environ[PYEXE] == os.fsdecode(multiprocessing.spawn.get_executable())
    assert ARGS not in os.environ and PYEXE not in os.environ


def test_configure_subprocess_publishes_nothing_when_nothing_applies(monkeypatch):
    node = live_node()
    fake_numactl(monkeypatch, refuse=("--membind", "--cpunodebind"))
    before = multiprocessing.spawn.get_executable()
    with vllm.configure_subprocess(vllm_config(numa_bind=True, numa_bind_nodes=[node]), 0):
        assert ARGS not in os.environ
        assert multiprocessing.spawn.get_executable() == before


def test_executable_is_swapped_only_under_spawn(monkeypatch, on_logger):
    seen = on_logger("vllm")
    before = multiprocessing.spawn.get_executable()
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "fork")
    with vllm._mp_set_executable("/nowhere/w.sh", "d"):
        assert multiprocessing.spawn.get_executable() == before
    assert any("VLLM_WORKER_MULTIPROC_METHOD=fork" in m for m in seen.at(logging.WARNING))
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    with vllm._mp_set_executable("/nowhere/w.sh", "d"):
        assert os.fsdecode(multiprocessing.spawn.get_executable()) == "/nowhere/w.sh"
    assert multiprocessing.spawn.get_executable() == before


def _report(conn):
    import numabind

    conn.send((sorted(os.sched_getaffinity(0)), numabind.current_binding().mem_policy))


@pytest.mark.kernel
def test_vllms_wrapper_pattern_starts_a_bound_child_without_numactl(tmp_path, monkeypatch):
    cpu = sorted(os.sched_getaffinity(0))[-1]
    monkeypatch.setenv("PATH", str(tmp_path))                          # no numactl anywhere
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    executable, debug = vllm._get_numactl_executable()
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    with vllm._set_numa_wrapper_env(f"--physcpubind={cpu}", sys.executable), \
            vllm._mp_set_executable(executable, debug):
        p = ctx.Process(target=_report, args=(send,))
        p.start()
    state = recv.recv()
    p.join(60)
    assert p.exitcode == 0
    assert state[0] == [cpu]
    assert ARGS not in os.environ


@pytest.mark.parametrize("args, python", [
    ("--physcpubind=0;touch {marker}", None),
    ("--physcpubind=$(touch {marker})", None),
    ("--physcpubind=`touch {marker}`", None),
    ("--physcpubind=0\ntouch {marker}", None),
    ("--cpunodebind=0 --all", None),
    ("--physcpubind=0 -- /bin/sh -c touch", None),
    ("--membind=", None),
    ("", None),
    ("--physcpubind=0", "python3"),
    ("--physcpubind=0", "/bin/sh -c touch {marker}"),
    ("--physcpubind=0", "/nonexistent/python"),
])
def test_wrapper_refuses_hostile_variables(tmp_path, args, python):
    marker = tmp_path / "ran"
    env = dict(os.environ, PATH=os.environ.get("PATH", "/usr/bin:/bin"))
    env[ARGS] = args.format(marker=marker)
    env[PYEXE] = sys.executable if python is None else python.format(marker=marker)
    script = f"open({str(marker)!r}, 'w').close()"
    result = subprocess.run([vllm._get_numactl_executable()[0], "-c", script], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 127
    assert result.stderr.startswith("numabind numa wrapper: ")
    assert not marker.exists()


# ----------------------------------------------------------------------------- logging
def test_everything_refused_is_one_warning_with_the_cause_and_the_hint(monkeypatch, on_logger):
    seen = on_logger("vllm")
    fake_numactl(monkeypatch, refuse=("--",), stderr=b"numactl: sched_setaffinity: Operation not permitted")
    assert vllm._resolve_numactl_args("--cpunodebind=0 --membind=0") == ""
    warnings = seen.at(logging.WARNING)
    assert len(warnings) == 1
    assert "Operation not permitted" in warnings[0] and "--cap-add SYS_NICE" in warnings[0]
    assert "no NUMA binding" in warnings[0]


def test_memory_refused_is_one_warning_naming_the_fallback(monkeypatch, on_logger):
    seen = on_logger("vllm")
    fake_numactl(monkeypatch, refuse=("--membind",))
    assert vllm._resolve_numactl_args("--physcpubind=0 --membind=0") == "--physcpubind=0"
    warnings = seen.at(logging.WARNING)
    assert len(warnings) == 1 and "'--physcpubind=0'" in warnings[0] and "--cap-add SYS_NICE" in warnings[0]


def test_option_strings_are_logged_as_vllm_logs_them(on_logger):
    seen = on_logger("vllm")
    pc = vllm_config(numa_bind=True, numa_bind_nodes=[3, 4], numa_bind_cpus=["1-2", "5-6"]).parallel_config
    vllm._get_numactl_worker_args(pc, local_rank=1)
    pc.numa_bind_cpus = None
    vllm._get_numactl_worker_args(pc, local_rank=0)
    pc.tensor_parallel_size = 2
    vllm._get_numactl_enginecore_args(pc, local_rank=0)
    assert seen.at(logging.INFO) == [
        "Binding worker subprocess (local_rank=1, gpu_index=1) to CPUs 5-6 and NUMA node 4",
        "Binding worker subprocess (local_rank=0, gpu_index=0) to NUMA node 3",
        "Binding EngineCore subprocess (local_rank=0) to NUMA nodes 3,4",
    ]


def test_binding_under_fork_is_said_once(monkeypatch, on_logger):
    seen = on_logger("vllm")
    node = live_node()
    fake_numactl(monkeypatch)
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "fork")
    vllm._method_noted.clear()
    for _ in range(2):
        with vllm.configure_subprocess(vllm_config(numa_bind=True, numa_bind_nodes=[node]), 0):
            pass
    notes = [m for m in seen.at(logging.INFO) if "VLLM_WORKER_MULTIPROC_METHOD=fork" in m]
    assert len(notes) == 1 and "vLLM itself binds only spawned children" in notes[0]
