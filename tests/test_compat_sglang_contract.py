"""numabind.compat.sglang keeps SGLang's seams (issue 27).

SGLang's own tests patch ``_is_cuda``, ``os.path.isdir``, ``glob.glob``,
``subprocess.run``, a ``pynvml`` module, ``_create_numactl_executable`` and
``_mp_set_executable`` through its module, and assert warning texts. These
cases restate, in numabind's words, what each must change; the live machine
is used, CPUs and nodes are derived from this process.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.spawn
import os
import sys
import types

import pytest

from numabind import compat
from numabind.compat import sglang
from numabind.errors import PlanError

pytestmark = pytest.mark.usefixtures("fresh_compat")


@pytest.fixture(autouse=True)
def sglang_env(monkeypatch):
    for name in ("SGLANG_NUMA_BIND_V2", "SGLANG_AUTO_NUMA_BIND", "SGLANG_CRASH_ON_NUMA_BIND_FAILURE",
                 compat.WRAPPER_ARGS_ENV, compat.WRAPPER_PYTHON_ENV):
        monkeypatch.delenv(name, raising=False)


def probes(monkeypatch, *answers):
    """numactl 'on PATH'; each ``numactl ARGS true`` gets the next (returncode, stderr) of ``answers``."""
    calls = []
    queue = list(answers)

    def run(cmd, *a, **k):
        calls.append(list(cmd))
        code, err = queue.pop(0)
        return types.SimpleNamespace(returncode=code, stderr=err)

    monkeypatch.setattr(sglang.shutil, "which", lambda name: "/usr/bin/numactl")
    monkeypatch.setattr(sglang.subprocess, "run", run)
    return calls


def server_args(nodes=None):
    return types.SimpleNamespace(numa_node=nodes)


# ----------------------------------------------------------------------------- availability
def test_not_cuda_is_not_available(monkeypatch):
    monkeypatch.setattr(sglang, "_is_cuda", False)
    assert sglang._is_numa_available() is False


def test_availability_follows_node1_and_the_mempolicy_check_without_numactl(monkeypatch, on_logger):
    seen = on_logger("sglang")
    asked = []
    monkeypatch.setattr(sglang, "_is_cuda", True)
    monkeypatch.setattr(sglang.shutil, "which", lambda name: None)          # numactl is not needed
    monkeypatch.setattr(os.path, "isdir", lambda p: asked.append(p) or True)
    monkeypatch.setattr(sglang, "_can_set_mempolicy", lambda: True)
    assert sglang._is_numa_available() is True
    assert asked == ["/sys/devices/system/node/node1"]
    monkeypatch.setattr(sglang, "_can_set_mempolicy", lambda: False)
    assert sglang._is_numa_available() is False
    assert any("--cap-add SYS_NICE" in m for m in seen.at(logging.WARNING))
    monkeypatch.setattr(os.path, "isdir", lambda p: False)
    assert sglang._is_numa_available() is False


# ----------------------------------------------------------------------------- NVML memory affinity
class FakeNvml:
    """A pynvml stand-in: one memory-affinity word list for every device."""

    NVML_AFFINITY_SCOPE_NODE = 0

    def __init__(self, words):
        self.words, self.log = words, []

    def nvmlInit(self):
        self.log.append("init")

    def nvmlShutdown(self):
        self.log.append("shutdown")

    def nvmlDeviceGetHandleByIndex(self, index):
        self.log.append(("handle", index))
        return index

    def nvmlDeviceGetMemoryAffinity(self, handle, size, scope):
        self.log.append(("affinity", size, scope))
        return self.words


def test_a_gpu_spanning_several_nodes_keeps_them_all(monkeypatch):
    nvml = FakeNvml([0b10101])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(sglang.glob, "glob", lambda pattern: [f"/sys/devices/system/node/node{i}" for i in range(5)])
    assert sglang._query_numa_node_for_gpu(0) == [0, 2, 4]
    assert nvml.log[0] == "init" and nvml.log[-1] == "shutdown"


def test_no_affinity_bit_is_no_node(monkeypatch):
    nvml = FakeNvml([0])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(sglang.glob, "glob", lambda pattern: ["/sys/devices/system/node/node0"])
    assert sglang._query_numa_node_for_gpu(0) == []
    assert nvml.log[-1] == "shutdown"


def test_several_nodes_pick_the_first_with_a_warning(monkeypatch, on_logger):
    seen = on_logger("sglang")
    monkeypatch.setattr(sglang, "_is_numa_available", lambda: True)
    monkeypatch.setattr(sglang, "_query_numa_node_for_gpu", lambda gpu: [3, 1])
    assert sglang.get_numa_node_if_available(server_args(), 0) == 3
    assert any("Multiple NUMA nodes" in m and "[3, 1]" in m for m in seen.at(logging.WARNING))


# ----------------------------------------------------------------------------- the probe ladder
def test_refused_membind_falls_back_to_preferred_naming_numactls_reason(monkeypatch, on_logger):
    seen = on_logger("sglang")
    calls = probes(monkeypatch, (1, b"set_mempolicy: Invalid argument"), (0, b""))
    assert sglang._probe_numactl_args("--cpunodebind=2 --membind=2") == ("--cpunodebind=2 --preferred=2", "")
    assert calls[1] == ["numactl", "--cpunodebind=2", "--preferred=2", "true"]
    warning = seen.at(logging.WARNING)
    assert len(warning) == 1 and "preferred" in warning[0] and "Invalid argument" in warning[0]


def test_refused_memory_falls_back_to_cpu_only(monkeypatch, on_logger):
    seen = on_logger("sglang")
    calls = probes(monkeypatch, (1, b"a"), (1, b"b"), (0, b""))
    assert sglang._probe_numactl_args("--physcpubind=4,6 --membind=1") == ("--physcpubind=4,6", "")
    assert calls[2] == ["numactl", "--physcpubind=4,6", "true"]
    assert any("CPU-only" in m for m in seen.at(logging.WARNING))


def test_nothing_accepted_returns_the_last_refusal(monkeypatch):
    probes(monkeypatch, (1, b"first"), (1, b"second"), (1, b"numactl: last refusal"))
    assert sglang._probe_numactl_args("--cpunodebind=1 --membind=1") == (None, "numactl: last refusal")


def test_numactl_that_cannot_run_is_a_refusal(monkeypatch):
    monkeypatch.setattr(sglang.shutil, "which", lambda name: "/usr/bin/numactl")

    def broken(*a, **k):
        raise FileNotFoundError("numactl")

    monkeypatch.setattr(sglang.subprocess, "run", broken)
    args, why = sglang._probe_numactl_args("--cpunodebind=0")
    assert args is None and "numactl" in why


# ----------------------------------------------------------------------------- configure_subprocess
def refusing(monkeypatch):
    monkeypatch.setattr(sglang, "get_numa_node_if_available", lambda a, g: 0)
    monkeypatch.setattr(sglang, "_numactl_cpu_mem_args", lambda n, g: "--cpunodebind=0 --membind=0")
    monkeypatch.setattr(sglang, "_probe_numactl_args", lambda a: (None, "set_mempolicy: Operation not permitted"))


def test_a_refused_binding_is_skipped_with_sglangs_words(monkeypatch, on_logger):
    seen = on_logger("sglang")
    refusing(monkeypatch)
    entered = []
    with sglang.configure_subprocess(server_args(), 0):
        entered.append(True)
    assert entered == [True]
    warning = [m for m in seen.at(logging.WARNING) if "could not apply NUMA binding" in m]
    assert len(warning) == 1 and "Operation not permitted" in warning[0]


def test_a_refused_binding_raises_before_the_block_when_asked(monkeypatch):
    refusing(monkeypatch)
    monkeypatch.setenv("SGLANG_CRASH_ON_NUMA_BIND_FAILURE", "1")
    with pytest.raises(RuntimeError, match="could not apply NUMA binding.*Operation not permitted"):
        with sglang.configure_subprocess(server_args(), 0):
            pytest.fail("the block must not run")


def _report(conn):
    conn.send(sorted(os.sched_getaffinity(0)))


def test_mp_set_executable_needs_spawn(monkeypatch):
    monkeypatch.setattr(sglang.multiprocessing, "get_start_method", lambda *a, **k: "fork")
    with pytest.raises(PlanError, match="spawn"):
        with sglang._mp_set_executable("/nowhere", "d"):
            pass


@pytest.mark.kernel
def test_sglangs_executable_pattern_starts_a_bound_child_without_numactl(tmp_path, monkeypatch):
    cpu = sorted(os.sched_getaffinity(0))[-1]
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sglang.multiprocessing, "get_start_method", lambda *a, **k: "spawn")
    before = multiprocessing.spawn.get_executable()
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    executable, debug = sglang._create_numactl_executable(numactl_args=f"--physcpubind={cpu}")
    with sglang._mp_set_executable(executable=executable, debug_str=debug):
        p = ctx.Process(target=_report, args=(send,))
        p.start()
    got = recv.recv()
    p.join(60)
    assert p.exitcode == 0 and got == [cpu]
    assert multiprocessing.spawn.get_executable() == before
    assert compat.WRAPPER_ARGS_ENV not in os.environ
