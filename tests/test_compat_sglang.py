"""numabind.compat.sglang as a drop-in for sglang.srt.utils.numa_utils.

The cases restate the facts of SGLang's own numa_utils tests (availability,
GPU-to-node queries, explicit --numa-node lists, the constrained-CPU rule,
the membind -> preferred -> CPU-only ladder, crash-on-failure, the CPU
backend's thread lists) against duck-typed server args and fake machines;
SGLang, torch, pynvml and numactl are never imported or run. Tests that bind
for real derive their CPUs and nodes from this process at run time and
restore what they change.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import sys
import tempfile
import threading
import types

import pytest

import numabind
from numabind import compat
from numabind.compat import _sglang_base as sglang_base
from numabind.compat import _sglang_npu as sglang_npu
from numabind.compat import _sglang_xpu as sglang_xpu
from numabind.compat import sglang
from numabind.cpulist import format_cpulist
from numabind.cpulist import parse_cpulist as L
from numabind.topology import discover

from .fakecompat import absent_node, dgx, host_cpus, host_shaped, machine, use
from .fakegpu import add_amd_gpu, add_dev_node, add_intel_gpu, add_nvidia_gpu, box_node, eight_gpu_box
from .fakesys import one_node, two_sockets

pytestmark = pytest.mark.usefixtures("fresh_compat")

SGLANG_VARS = ("SGLANG_NUMA_BIND_V2", "SGLANG_AUTO_NUMA_BIND", "SGLANG_CRASH_ON_NUMA_BIND_FAILURE",
               "SGLANG_CPU_OMP_THREADS_BIND", "SGLANG_ONE_VISIBLE_DEVICE_PER_PROCESS")


@pytest.fixture(autouse=True)
def clean_sglang_env(monkeypatch):
    for name in SGLANG_VARS:
        monkeypatch.delenv(name, raising=False)


def args(numa_node=None):
    """The one ServerArgs field numa_utils reads."""
    return types.SimpleNamespace(numa_node=numa_node)


@pytest.fixture
def mempolicy_ok(monkeypatch):
    """The process may use memory policies (SGLang's tests patch _can_set_mempolicy the same way)."""
    monkeypatch.setattr(sglang, "_can_set_mempolicy", lambda: True)


@pytest.fixture
def children(monkeypatch):
    """Replaces the birth binding with a recorder of (plan, strict)."""
    plans = []

    @contextlib.contextmanager
    def record(plan, target, strict=False):
        plans.append((plan, strict))
        yield

    monkeypatch.setattr(sglang, "bind_children", record)
    return plans


def refuse(*policies):
    """A stand-in for the in-process probe that refuses plans with these memory policies."""
    def probe(plan, topology):
        return f"set_mempolicy failed with EPERM for {plan.mem_policy}" if plan.mem_policy in policies else None
    return probe


def wide(root, **kw):
    """2 nodes x 72 CPUs (node 0: 0-71, node 1: 72-143), one NVIDIA GPU per node."""
    return machine(root, {0: "0-71", 1: "72-143"}, gpus=[0, 1], **kw)


# ----------------------------------------------------------------------------- surface and environment
@pytest.mark.parametrize("name", [
    "configure_subprocess", "get_numa_node_if_available", "numa_bind_to_node", "init_threads_binding",
    "get_libnuma", "_is_numa_available", "_query_numa_node_for_gpu", "_node_cpus", "_numactl_cpu_mem_args",
    "_strip_memory_args", "_probe_numactl_args", "_handle_numa_bind_failure", "_can_set_mempolicy",
    "_get_nvml_device_index",
])
def test_every_name_sglang_code_uses_is_a_function(name):
    assert callable(getattr(sglang, name))
    assert sglang.logger.name == "sglang.srt.utils.numa_utils"


@pytest.mark.parametrize("value, expect", [("1", True), ("true", True), ("YES", True), ("y", True),
                                           ("0", False), ("False", False), ("no", False), ("N", False)])
def test_environment_booleans_are_sglangs(monkeypatch, value, expect):
    monkeypatch.setenv("SGLANG_CRASH_ON_NUMA_BIND_FAILURE", value)
    assert sglang_base.crash_on_failure() is expect


def test_a_malformed_boolean_is_an_error(monkeypatch):
    monkeypatch.setenv("SGLANG_NUMA_BIND_V2", "maybe")
    with pytest.raises(ValueError, match="SGLANG_NUMA_BIND_V2"):
        with sglang.configure_subprocess(args(), 0):
            pass


# ----------------------------------------------------------------------------- availability
def test_not_available_without_an_nvidia_gpu(tmp_path, mempolicy_ok):
    two_sockets(tmp_path)
    add_amd_gpu(tmp_path, "0000:18:00.0", kfd_node=None, numa_node=0)
    use(discover(tmp_path))
    assert sglang._is_numa_available() is False


def test_not_available_on_one_node(tmp_path, mempolicy_ok):
    one_node(tmp_path, ncpus=4)
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=0)
    use(discover(tmp_path))
    assert sglang._is_numa_available() is False


def test_available_on_a_numa_machine_with_nvidia_gpus(tmp_path, mempolicy_ok):
    use(wide(tmp_path))
    assert sglang._is_numa_available() is True


def test_not_available_when_memory_policies_are_forbidden(tmp_path, monkeypatch, on_logger):
    use(wide(tmp_path))
    monkeypatch.setattr(sglang, "_can_set_mempolicy", lambda: False)
    seen = on_logger("sglang")
    assert sglang._is_numa_available() is False
    assert any("SYS_NICE" in m for m in seen.at(logging.WARNING))


# ----------------------------------------------------------------------------- the node of a GPU
def test_query_gives_each_gpus_node(tmp_path):
    use(wide(tmp_path))
    assert sglang._query_numa_node_for_gpu(0) == [0]
    assert sglang._query_numa_node_for_gpu(1) == [1]


def test_query_of_an_unknown_or_invisible_gpu_is_empty(tmp_path, on_logger):
    machine(tmp_path, {0: "0-7", 1: "8-15"})
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=-1, local_cpulist="")
    use(discover(tmp_path))
    seen = on_logger("sglang")
    assert sglang._query_numa_node_for_gpu(0) == []
    assert sglang._query_numa_node_for_gpu(3) == []
    assert len(seen.at(logging.WARNING)) == 2


def test_explicit_nodes_from_server_args(tmp_path):
    use(wide(tmp_path))
    server = args([2, 3, 0, 1])
    assert [sglang.get_numa_node_if_available(server, g) for g in range(4)] == [2, 3, 0, 1]


def test_explicit_nodes_take_precedence_over_detection(tmp_path, monkeypatch):
    def never(*a):
        raise AssertionError("detection must not run when --numa-node is given")

    monkeypatch.setattr(sglang, "_is_numa_available", never)
    monkeypatch.setattr(sglang, "_query_numa_node_for_gpu", never)
    assert sglang.get_numa_node_if_available(args([5, 6]), 0) == 5


def test_explicit_list_without_an_entry_for_the_gpu(tmp_path):
    with pytest.raises(IndexError):
        sglang.get_numa_node_if_available(args([0, 1]), 2)
    with pytest.raises(ValueError, match="--numa-node"):
        sglang.get_numa_node_if_available(args([0, 1]), 2)


def test_automatic_detection_off(tmp_path, monkeypatch, mempolicy_ok):
    use(wide(tmp_path))
    assert sglang.get_numa_node_if_available(args(), 1) == 1
    monkeypatch.setenv("SGLANG_AUTO_NUMA_BIND", "0")
    assert sglang.get_numa_node_if_available(args(), 1) is None


@pytest.mark.parametrize("available, queried, expect", [(False, [1], None), (True, [], None), (True, [1], 1)])
def test_detection_steps(monkeypatch, available, queried, expect):
    monkeypatch.setattr(sglang, "_is_numa_available", lambda: available)
    monkeypatch.setattr(sglang, "_query_numa_node_for_gpu", lambda gpu: queried)
    assert sglang.get_numa_node_if_available(args(), 0) == expect


def test_one_visible_device_per_process_is_looked_up_under_the_narrowed_variable(
        tmp_path, monkeypatch, mempolicy_ok, discoveries):
    """The launcher sets CUDA_VISIBLE_DEVICES to the child's GPU and passes id 0 (no new discovery)."""
    dgx(tmp_path)
    monkeypatch.setenv("NUMABIND_FSROOT", str(tmp_path))
    assert len(compat.current_topology().gpus) == 8
    monkeypatch.setenv("SGLANG_ONE_VISIBLE_DEVICE_PER_PROCESS", "1")
    found = {}
    for physical in (5, 2):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", str(physical))
        found[physical] = sglang.get_numa_node_if_available(args(), 0)
        assert sglang._get_nvml_device_index(0) == physical
    assert found == {5: 1, 2: 0}
    assert len(discoveries) == 1


def test_one_visible_device_per_process_indexes_numa_node_by_the_launchers_id(monkeypatch):
    monkeypatch.setenv("SGLANG_ONE_VISIBLE_DEVICE_PER_PROCESS", "true")
    monkeypatch.setattr(sglang, "_LAUNCH_CUDA_VISIBLE_DEVICES", "4,5,6,7")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6")                  # launcher's GPU 2
    assert sglang.get_numa_node_if_available(args([0, 0, 1, 1]), 0) == 1
    monkeypatch.setattr(sglang, "_LAUNCH_CUDA_VISIBLE_DEVICES", None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")                  # launcher's GPU 3
    assert sglang.get_numa_node_if_available(args([0, 0, 1, 1]), 0) == 1
    monkeypatch.delenv("SGLANG_ONE_VISIBLE_DEVICE_PER_PROCESS")
    assert sglang.get_numa_node_if_available(args([0, 0, 1, 1]), 0) == 0


# ----------------------------------------------------------------------------- constrained processes
def test_unconstrained_process_binds_the_whole_node(tmp_path):
    use(wide(tmp_path))
    assert sglang._numactl_cpu_mem_args(0, 0) == "--cpunodebind=0 --membind=0"


def test_constrained_process_binds_within_its_cpus(tmp_path):
    use(wide(tmp_path, allowed={0} | set(range(21, 144))))
    expected = ",".join(str(c) for c in [0] + list(range(21, 72)))
    assert sglang._numactl_cpu_mem_args(0, 0) == f"--physcpubind={expected} --membind=0"


def test_no_allowed_cpu_on_the_node_skips_or_crashes(tmp_path, monkeypatch, on_logger):
    use(wide(tmp_path, allowed=set(range(72, 144))))
    seen = on_logger("sglang")
    assert sglang._numactl_cpu_mem_args(0, 0) is None
    assert any("NUMA node 0" in m and "72-143" in m for m in seen.at(logging.WARNING))
    monkeypatch.setenv("SGLANG_CRASH_ON_NUMA_BIND_FAILURE", "1")
    with pytest.raises(RuntimeError, match="NUMA node 0"):
        sglang._numactl_cpu_mem_args(0, 0)


def test_memory_only_node_is_given_as_numactl_would_take_it(tmp_path):
    use(machine(tmp_path, {0: "0-7", 2: ()}, gpus=[0]))
    assert sglang._node_cpus(2) == set()
    assert sglang._numactl_cpu_mem_args(2, 0) == "--cpunodebind=2 --membind=2"


def test_failure_handler_warns_or_raises(monkeypatch, on_logger):
    seen = on_logger("sglang")
    monkeypatch.setenv("SGLANG_CRASH_ON_NUMA_BIND_FAILURE", "0")
    sglang._handle_numa_bind_failure(0, {72, 73})
    assert len(seen.at(logging.WARNING)) == 1
    monkeypatch.setenv("SGLANG_CRASH_ON_NUMA_BIND_FAILURE", "1")
    with pytest.raises(RuntimeError):
        sglang._handle_numa_bind_failure(0, {72, 73})
    with pytest.raises(RuntimeError, match="custom reason"):
        sglang._handle_numa_bind_failure(reason="custom reason")


# ----------------------------------------------------------------------------- the ladder
def test_accepted_binding_is_kept(tmp_path, monkeypatch):
    use(wide(tmp_path))
    monkeypatch.setattr(compat, "probe_plan", refuse())
    assert sglang._probe_numactl_args("--cpunodebind=0 --membind=0") == ("--cpunodebind=0 --membind=0", "")


def test_refused_hard_binding_falls_back_to_preferred_on_the_same_node(tmp_path, monkeypatch, on_logger):
    use(wide(tmp_path))
    monkeypatch.setattr(compat, "probe_plan", refuse("bind"))
    seen = on_logger("sglang")
    assert sglang._probe_numactl_args("--cpunodebind=1 --membind=1") == ("--cpunodebind=1 --preferred=1", "")
    [warning] = seen.at(logging.WARNING)
    assert "preferred" in warning and "EPERM" in warning


def test_refused_memory_falls_back_to_cpus_only(tmp_path, monkeypatch, on_logger):
    use(wide(tmp_path, allowed={0} | set(range(21, 144))))
    monkeypatch.setattr(compat, "probe_plan", refuse("bind", "preferred"))
    seen = on_logger("sglang")
    assert sglang._probe_numactl_args("--physcpubind=0,21,22 --membind=0") == ("--physcpubind=0,21,22", "")
    [warning] = seen.at(logging.WARNING)
    assert "CPU-only" in warning and "EPERM" in warning


def test_nothing_accepted(tmp_path, monkeypatch):
    use(wide(tmp_path))
    monkeypatch.setattr(compat, "probe_plan", lambda plan, topology: "sched_setaffinity failed with EINVAL")
    resolved, why = sglang._probe_numactl_args("--cpunodebind=0 --membind=0")
    assert resolved is None and "EINVAL" in why


@pytest.mark.kernel
def test_ladder_with_the_real_kernel(tmp_path, on_logger):
    """Memory on a node this kernel does not have is refused: the CPUs are kept."""
    cpus = host_cpus()
    node = absent_node()
    use(machine(tmp_path, {node: cpus}, gpus=[node]))
    seen = on_logger("sglang")
    assert sglang._probe_numactl_args(f"--cpunodebind={node} --membind={node}") == (f"--cpunodebind={node}", "")
    assert seen.at(logging.WARNING)


# ----------------------------------------------------------------------------- configure_subprocess
def test_bind_v2_off_does_nothing(tmp_path, monkeypatch, children):
    monkeypatch.setenv("SGLANG_NUMA_BIND_V2", "false")
    monkeypatch.setattr(sglang, "get_numa_node_if_available", lambda *a: pytest.fail("looked up a node"))
    with sglang.configure_subprocess(args([0]), 0):
        pass
    assert children == []


def test_children_get_the_resolved_plan(tmp_path, monkeypatch, children, on_logger):
    use(wide(tmp_path))
    monkeypatch.setattr(compat, "probe_plan", refuse("bind"))
    seen = on_logger("sglang")
    with sglang.configure_subprocess(args([0, 1]), 1):
        pass
    [(plan, strict)] = children
    assert (plan.cpus, plan.mem_policy, plan.mem_nodes, strict) == (L("72-143"), "preferred", frozenset({1}), False)
    assert len(seen.at(logging.INFO)) == 1
    monkeypatch.setenv("SGLANG_CRASH_ON_NUMA_BIND_FAILURE", "1")
    with sglang.configure_subprocess(args([0, 1]), 0):
        pass
    assert children[1][1] == "partial"


def test_probe_failure_starts_unbound_with_a_warning(tmp_path, monkeypatch, children, on_logger):
    use(wide(tmp_path))
    monkeypatch.setattr(compat, "probe_plan", lambda plan, topology: "set_mempolicy failed with EPERM")
    seen = on_logger("sglang")
    entered = []
    with sglang.configure_subprocess(args([0, 1]), 0):
        entered.append(True)
    assert entered == [True] and children == []
    assert any("GPU 0" in m and "EPERM" in m for m in seen.at(logging.WARNING))


def test_probe_failure_raises_before_the_child_starts_when_asked(tmp_path, monkeypatch, children):
    use(wide(tmp_path))
    monkeypatch.setattr(compat, "probe_plan", lambda plan, topology: "set_mempolicy failed with EPERM")
    monkeypatch.setenv("SGLANG_CRASH_ON_NUMA_BIND_FAILURE", "1")
    entered = []
    with pytest.raises(RuntimeError, match="EPERM"):
        with sglang.configure_subprocess(args([0, 1]), 0):
            entered.append(True)
    assert entered == [] and children == []


def _child_cpus(conn):
    conn.send(sorted(os.sched_getaffinity(0)))


@pytest.mark.kernel
def test_scheduler_child_is_bound_and_nothing_is_written(tmp_path, monkeypatch, on_logger):
    """No script per call, no report directory: the temporary directory stays empty."""
    topo, node, cpus = host_shaped(tmp_path / "machine")
    use(topo)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setenv("PATH", str(scratch))               # no numactl
    seen = on_logger("sglang")
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    with sglang.configure_subprocess(args([node]), 0):
        p = ctx.Process(target=_child_cpus, args=(send,))
        p.start()
    got = recv.recv()
    p.join(60)
    assert p.exitcode == 0
    assert got == cpus
    assert list(scratch.iterdir()) == []
    assert len(seen.at(logging.INFO)) == 1


@pytest.mark.kernel
def test_launcher_threads_bind_their_own_children_without_a_lock(tmp_path, on_logger):
    """One launcher thread per DP rank, each starting its scheduler at the same moment: each child gets
    the CPUs of its own GPU's node (memory on these fake nodes is refused by the kernel: CPUs only)."""
    cpus = host_cpus()
    if len(cpus) < 2:
        pytest.skip("needs two CPUs this process may use")
    a, b = absent_node(), absent_node() + 1
    use(machine(tmp_path, {a: [cpus[0]], b: cpus[1:]}, gpus=[a, b]))
    on_logger("sglang")
    ctx = multiprocessing.get_context("spawn")
    barrier = threading.Barrier(2)
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def launch(gpu_id):
        try:
            recv, send = ctx.Pipe(duplex=False)
            with sglang.configure_subprocess(args([a, b]), gpu_id):
                barrier.wait(30)
                p = ctx.Process(target=_child_cpus, args=(send,))
                p.start()
            results[gpu_id] = recv.recv()
            p.join(60)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=launch, args=(g,)) for g in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert results == {0: [cpus[0]], 1: cpus[1:]}
    assert sorted(os.sched_getaffinity(0)) == cpus


# ----------------------------------------------------------------------------- the CPU backend
def four_nodes(root, **kw):
    return use(machine(root, {0: "0-3", 1: "4-7", 2: "8-11", 3: "12-15"}, **kw))


def test_dp_ranks_get_distinct_nodes(tmp_path):
    four_nodes(tmp_path)
    assert [sglang.init_threads_binding(numa_index=i, world_size=4) for i in range(4)] == \
        ["0-3", "4-7", "8-11", "12-15"]


def test_only_physical_cores_are_given(tmp_path):
    two_sockets(tmp_path, cpus_per_socket=8)               # node 0: cores 0-3, their siblings 8-11
    use(discover(tmp_path))
    assert sglang.init_threads_binding(numa_index=0, world_size=2) == "0-3"
    assert sglang.init_threads_binding(numa_index=1, world_size=2) == "4-7"


def test_only_allowed_cpus_are_given(tmp_path):
    four_nodes(tmp_path, allowed=L("1-3,4-15"))
    assert sglang.init_threads_binding(numa_index=0, world_size=4) == "1-3"


def test_fewer_ranks_than_nodes_warns(tmp_path, on_logger):
    four_nodes(tmp_path)
    seen = on_logger("sglang")
    assert sglang.init_threads_binding(numa_index=1, world_size=2) == "4-7"
    assert seen.at(logging.WARNING)


def test_more_ranks_than_nodes_needs_explicit_lists(tmp_path):
    four_nodes(tmp_path)
    with pytest.raises(ValueError, match="SGLANG_CPU_OMP_THREADS_BIND"):
        sglang.init_threads_binding(numa_index=0, world_size=8)


def test_explicit_lists_indexed_by_rank(tmp_path, monkeypatch):
    four_nodes(tmp_path)
    monkeypatch.setenv("SGLANG_CPU_OMP_THREADS_BIND", "0-1|4-5")
    assert sglang.init_threads_binding(numa_index=0, world_size=2) == "0-1"
    assert sglang.init_threads_binding(numa_index=1, world_size=2) == "4-5"


def test_router_worker_picks_its_list_by_global_index(tmp_path, monkeypatch):
    """Each router worker is a world of one, yet its global index selects any list."""
    four_nodes(tmp_path)
    monkeypatch.setenv("SGLANG_CPU_OMP_THREADS_BIND", "0-1|2-3|4-5")
    assert sglang.init_threads_binding(numa_index=2, world_size=1) == "4-5"


@pytest.mark.parametrize("value, index, world, error", [
    ("0-1|4-5", 0, 4, IndexError),                 # fewer lists than ranks
    ("0-1|4-5", 2, 2, IndexError),                 # no list for this rank
    ("0-1|4-x", 1, 2, ValueError),                 # not a CPU list
    ("0-1|40-41", 1, 2, ValueError),               # CPUs the machine does not have
    ("0-1|4-7:2", 1, 2, ValueError),               # a stride numactl would refuse
])
def test_bad_explicit_lists(tmp_path, monkeypatch, value, index, world, error):
    four_nodes(tmp_path)
    monkeypatch.setenv("SGLANG_CPU_OMP_THREADS_BIND", value)
    with pytest.raises(error, match="SGLANG_CPU_OMP_THREADS_BIND"):
        sglang.init_threads_binding(numa_index=index, world_size=world)


# ----------------------------------------------------------------------------- binding this process
@pytest.fixture
def restore_binding():
    """Puts this process's threads and memory policy back as they were."""
    before = {t.native_id: os.sched_getaffinity(t.native_id) for t in threading.enumerate() if t.native_id}
    memory = numabind.current_binding().plan
    yield
    for tid, cpus in before.items():
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, cpus)
    if memory.mem_policy is not None:
        numabind.bind_current(numabind.Plan(mem_policy=memory.mem_policy, mem_nodes=memory.mem_nodes),
                              threads="current")


@pytest.mark.kernel
def test_bind_to_node_binds_every_thread_within_the_allowed_cpus(tmp_path, restore_binding):
    topo, node, cpus = host_shaped(tmp_path)
    chosen = cpus[-1:]
    use(machine(tmp_path / "narrow", {node: cpus}, allowed=chosen, gpus=[node]))
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait, daemon=True)
    helper.start()
    try:
        report = sglang.numa_bind_to_node(node)
        assert sorted(os.sched_getaffinity(0)) == chosen
        assert sorted(os.sched_getaffinity(helper.native_id)) == chosen       # not only the caller
        now = numabind.current_binding()
        if not report.warnings:
            assert (now.mem_policy, now.mem_nodes) == ("preferred", frozenset({node}))
    finally:
        stop.set()
        helper.join()


# ----------------------------------------------------------------------------- Intel GPUs (XPU)
def intel_box(root):
    """A 2-socket server with 8 Intel GPUs (4 per socket, render nodes 128-135), with the links of
    ``sys/class/drm`` SGLang's live lookup follows."""
    two_sockets(root, cpus_per_socket=8)
    addresses = eight_gpu_box(root, "intel")
    for k, address in enumerate(addresses):
        drm = root / f"sys/class/drm/renderD{128 + k}"
        drm.mkdir(parents=True)
        (drm / "device").symlink_to(root / f"sys/bus/pci/devices/{address}")
    return addresses


@pytest.fixture
def live_xpu_paths(tmp_path, monkeypatch):
    """SGLang's live Intel GPU lookup pointed at an :func:`intel_box` (its paths are module constants), with
    a host that has imported torch whose runtime counts ``runtime[0]`` XPUs."""
    root = tmp_path / "box"
    addresses = intel_box(root)
    monkeypatch.setattr(sglang_xpu, "DRI_RENDER_GLOB", f"{root}/dev/dri/renderD*")
    monkeypatch.setattr(sglang_xpu, "DRM_DEVICE", f"{root}/sys/class/drm/{{}}/device")
    monkeypatch.setattr(sglang, "_PCI_NUMA_NODE", f"{root}/sys/bus/pci/devices/{{}}/numa_node")
    runtime = [len(addresses)]
    xpu = types.SimpleNamespace(device_count=lambda: runtime[0])
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(xpu=xpu))
    return root, addresses, runtime


def test_an_intel_gpu_box_is_a_numa_platform_and_each_xpu_gets_its_gpus_node(tmp_path, monkeypatch, mempolicy_ok):
    """numabind's discovery (a replayed machine) finds the Intel GPUs: SGLang's XPU platform applies and
    each XPU id is its GPU's node."""
    intel_box(tmp_path)
    monkeypatch.setenv("NUMABIND_FSROOT", str(tmp_path))
    compat.refresh_topology()
    assert sglang._is_numa_available() is True
    assert [sglang.get_numa_node_if_available(args(), k) for k in range(8)] == [box_node(k) for k in range(8)]
    monkeypatch.setattr(sglang, "_is_xpu", False)    # SGLang's flag, set from torch, still decides
    assert sglang._is_numa_available() is False


def test_the_live_xpu_lookup_orders_filters_and_cross_checks_like_level_zero(live_xpu_paths, monkeypatch):
    root, addresses, runtime = live_xpu_paths
    monkeypatch.delenv("ZE_AFFINITY_MASK", raising=False)
    monkeypatch.delenv("ZE_ENABLE_PCI_ID_DEVICE_ORDER", raising=False)
    assert sglang._list_xpu_pci_addresses() == addresses
    assert [sglang._query_numa_node_for_xpu(k) for k in range(8)] == [[box_node(k)] for k in range(8)]
    monkeypatch.setenv("ZE_AFFINITY_MASK", "6,1")           # a filter: xpu:0 is GPU 1, xpu:1 is GPU 6
    runtime[0] = 2
    assert [sglang._xpu_pci_address(k) for k in (0, 1, 2)] == [addresses[1], addresses[6], None]
    assert [sglang._query_numa_node_for_xpu(k) for k in (0, 1)] == [[0], [1]]
    runtime[0] = 3                                           # the runtime disagrees: no guess
    assert sglang._query_numa_node_for_xpu(0) == []


def test_an_integrated_gpu_comes_last_and_is_left_out_when_the_runtime_does_not_count_it(live_xpu_paths,
                                                                                          monkeypatch):
    root, addresses, runtime = live_xpu_paths
    monkeypatch.delenv("ZE_AFFINITY_MASK", raising=False)
    monkeypatch.delenv("ZE_ENABLE_PCI_ID_DEVICE_ORDER", raising=False)
    add_intel_gpu(root, "0000:00:02.0", numa_node=0)
    add_dev_node(root, "dri/renderD136")
    (root / "sys/class/drm/renderD136").mkdir(parents=True)
    (root / "sys/class/drm/renderD136/device").symlink_to(root / "sys/bus/pci/devices/0000:00:02.0")
    assert sglang._list_xpu_pci_addresses() == [*addresses, "0000:00:02.0"]
    monkeypatch.setenv("ZE_ENABLE_PCI_ID_DEVICE_ORDER", "1")
    assert sglang._list_xpu_pci_addresses() == ["0000:00:02.0", *addresses]
    monkeypatch.delenv("ZE_ENABLE_PCI_ID_DEVICE_ORDER")
    runtime[0] = 8                                           # the runtime enumerates the discrete GPUs only
    assert sglang._xpu_pci_address(7) == addresses[7]
    runtime[0] = 9
    assert sglang._xpu_pci_address(8) == "0000:00:02.0"


def test_a_render_node_this_process_cannot_open_is_not_one_of_its_xpus(live_xpu_paths, monkeypatch):
    root, addresses, _ = live_xpu_paths
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: not str(path).endswith("renderD128")
                        and real_access(path, mode))
    assert sglang._list_xpu_pci_addresses() == addresses[1:]


def test_without_torch_the_xpu_order_cannot_be_checked_and_nothing_is_guessed(live_xpu_paths, monkeypatch,
                                                                              on_logger):
    monkeypatch.delitem(sys.modules, "torch")
    seen = on_logger("sglang")
    assert sglang._query_numa_node_for_xpu(0) == []
    assert "torch is not imported" in seen.at(logging.WARNING)[-1]


@pytest.mark.parametrize("mask, expected", [
    (None, [0, 1, 2, 3]), ("", [0, 1, 2, 3]), ("default", [0, 1, 2, 3]), ("3,0", [0, 3]),
    ("3,3,0", [0, 3]), ("1,99,-1", [1]), ("1.0,3.1", [1, 3]), (" 2 , 1 ", [1, 2]), ("1,abc,2", [1, 2]),
])
def test_ze_affinity_mask_filters_the_devices_and_never_reorders_them(monkeypatch, mask, expected):
    if mask is None:
        monkeypatch.delenv("ZE_AFFINITY_MASK", raising=False)
    else:
        monkeypatch.setenv("ZE_AFFINITY_MASK", mask)
    assert sglang._xpu_visible_device_indices(4) == expected


def test_gpu_ids_are_xpu_ids_on_sglangs_xpu_platform(monkeypatch):
    monkeypatch.setattr(sglang, "_is_xpu", True)
    monkeypatch.setattr(sglang, "_query_numa_node_for_xpu", lambda device_id: [device_id + 1])
    assert sglang._query_numa_node_for_gpu(4) == [5]


@pytest.mark.kernel
def test_bind_to_node_without_allowed_cpus_changes_nothing(tmp_path, monkeypatch, restore_binding, on_logger):
    cpus = host_cpus()
    node = absent_node()
    use(machine(tmp_path, {0: cpus, node: [max(cpus) + 1]}, allowed=cpus, gpus=[0]))
    seen = on_logger("sglang")
    before = os.sched_getaffinity(0)
    assert sglang.numa_bind_to_node(node) is None
    assert os.sched_getaffinity(0) == before
    assert seen.at(logging.WARNING)
    monkeypatch.setenv("SGLANG_CRASH_ON_NUMA_BIND_FAILURE", "1")
    with pytest.raises(RuntimeError):
        sglang.numa_bind_to_node(node)
    assert os.sched_getaffinity(0) == before


@pytest.mark.kernel
def test_crash_on_failure_raises_only_when_nothing_applied(tmp_path, monkeypatch, restore_binding, on_logger):
    """Kept last: SGLANG_CRASH_ON_NUMA_BIND_FAILURE maps to numabind's strict='partial'. The memory of a
    node this kernel does not have is refused, the CPUs are applied: a warning, not an error."""
    cpus = host_cpus()
    node = absent_node()
    use(machine(tmp_path, {node: cpus}, gpus=[node]))
    # the kernel refuses the node at apply time, as when it goes away between numabind's check and the bind
    # (issue 42 §1: a node the machine lacks is otherwise a PlanError before anything is applied)
    monkeypatch.setattr("numabind.live.check_present", lambda plan, what: None)
    monkeypatch.setenv("SGLANG_CRASH_ON_NUMA_BIND_FAILURE", "1")
    seen = on_logger("sglang")
    report = sglang.numa_bind_to_node(node)
    assert report.warnings
    assert sorted(os.sched_getaffinity(0)) == cpus
    assert format_cpulist(cpus) in seen.at(logging.INFO)[-1]
    assert seen.at(logging.WARNING)          # numabind's degradation, shown on SGLang's logger


# ----------------------------------------------------------------------------- Huawei Ascend NPUs
# SGLang's NPU path (server_args.device == "npu"), restated from the facts of its own NPU tests: an NPU whose
# V2 binding gives nothing gets --preferred=<its node>; an explicit --numa-node that contradicts the NPU's node
# is a RuntimeError even with V2 off; SGLANG_SET_CPU_AFFINITY alone makes the parent look nothing up.
from .fakegpu import ascend_box, ascend_container  # noqa: E402  (the NPU machine builders, kept with their section)

NPU_VARS = ("SGLANG_SET_CPU_AFFINITY", "SGLANG_NPU_MEMORY_PREFERRED_BIND", "SGLANG_NPU_AFFINITY_PCORES_PER_PROC",
            "ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES")
NPU_CPUS = {0: "0-7,16-23", 1: "8-15,24-31"}
NPU_TOPO = """\
        NPU0  NPU1  NPU2  NPU3  NPU4  NPU5  NPU6  NPU7  CPU Affinity
NPU0    X     HCCS  HCCS  HCCS  SYS   SYS   SYS   SYS   8-15,24-31
NPU1    HCCS  X     HCCS  HCCS  SYS   SYS   SYS   SYS   8-15,24-31
NPU2    HCCS  HCCS  X     HCCS  SYS   SYS   SYS   SYS   8-15,24-31
NPU3    HCCS  HCCS  HCCS  X     SYS   SYS   SYS   SYS   8-15,24-31
NPU4    SYS   SYS   SYS   SYS   X     HCCS  HCCS  HCCS  0-7,16-23
NPU5    SYS   SYS   SYS   SYS   HCCS  X     HCCS  HCCS  0-7,16-23
NPU6    SYS   SYS   SYS   SYS   HCCS  HCCS  X     HCCS  0-7,16-23
NPU7    SYS   SYS   SYS   SYS   HCCS  HCCS  HCCS  X     0-7,16-23

Legend:
  X    = Self
  SYS  = Path traversing PCIe and NUMA nodes. Nodes are connected through SMP, such as QPI, UPI.
"""


@pytest.fixture(autouse=True)
def clean_npu_env(monkeypatch):
    for name in NPU_VARS:
        monkeypatch.delenv(name, raising=False)


def npu_args(numa_node=None, device="npu"):
    return types.SimpleNamespace(numa_node=numa_node, device=device)


def npu_box(root, env=None, *, expose=None):
    """2 sockets x 16 CPUs with 8 Ascend 910B NPUs (physical ids 0-3 on node 0, 4-7 on node 1), discovered
    under ``env`` (a container given the physical ids ``expose``) and made the compat layer's machine."""
    two_sockets(root, cpus_per_socket=16)
    ascend_box(root, cpus=NPU_CPUS)
    if expose is not None:
        ascend_container(root, expose)
    with pytest.MonkeyPatch.context() as mp:
        for name, value in (env or {}).items():
            mp.setenv(name, value)
        return use(discover(root))


@pytest.fixture
def npu_smi(tmp_path, monkeypatch):
    """A live-looking machine (the pinned NPU box) with an ``npu-smi`` on PATH printing ``output[0]`` and
    exiting with ``output[1]``."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "topo.txt").write_text(NPU_TOPO)
    tool = bindir / "npu-smi"
    tool.write_text(f'#!/bin/sh\n[ "$*" = "info -t topo" ] || exit 9\ncat "{bindir}/topo.txt"\n'
                    f'exit $(cat "{bindir}/rc" 2>/dev/null || echo 0)\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(sglang_npu, "on_live_machine", lambda: True)
    return bindir


def test_the_npu_names_sglang_code_uses():
    for name in ("resolve_npu_affinity_assignment", "resolve_physical_npu_id", "query_npu_smi_topology"):
        assert callable(getattr(sglang, name)) and name in sglang.__all__
    assert issubclass(sglang.NpuAffinityError, RuntimeError)


def test_physical_npu_ids_follow_the_visibility_variables(tmp_path, monkeypatch):
    npu_box(tmp_path, {"ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"})
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "4,5,6,7")
    assert [sglang.resolve_physical_npu_id(k) for k in range(4)] == [4, 5, 6, 7]
    with pytest.raises(sglang.NpuAffinityError, match="outside ASCEND_RT_VISIBLE_DEVICES") as raised:
        sglang.resolve_physical_npu_id(4)
    assert raised.value.stage == "resolve_visible_device" and raised.value.logical_npu_id == 4
    for bad in ("4,x", "4,4", "4,,5", "²"):
        monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", bad)
        with pytest.raises(sglang.NpuAffinityError, match="distinct physical NPU ids"):
            sglang.resolve_physical_npu_id(0)
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", " ")        # blank: the next variable, as in SGLang
    monkeypatch.setenv("ASCEND_VISIBLE_DEVICES", "6,7")
    with pytest.raises(sglang.NpuAffinityError, match="outside ASCEND_VISIBLE_DEVICES"):
        sglang.resolve_physical_npu_id(2)
    with pytest.raises(sglang.NpuAffinityError, match="negative"):
        sglang.resolve_physical_npu_id(-1)


def test_a_containers_own_numbering_gives_the_host_physical_ids(tmp_path):
    # a container given physical NPUs 2 and 5 (its /dev holds davinci2 and davinci5): runtime ids 0 and 1
    npu_box(tmp_path, expose=[5, 2])
    assert [sglang.resolve_physical_npu_id(k) for k in range(2)] == [2, 5]
    assert [sglang._npu_numa_node(k)[0] for k in range(2)] == [0, 1]


def test_the_npu_topology_from_numabinds_discovery(tmp_path):
    npu_box(tmp_path)
    topo = sglang.query_npu_smi_topology()
    assert topo.source.startswith("numabind discovery")
    assert sorted(topo.entries) == list(range(8))
    assert [topo.entries[k].numa_node for k in range(8)] == [box_node(k) for k in range(8)]
    assert topo.entries[5].local_cpu_ids == L(NPU_CPUS[1]) and topo.entries[5].raw_cpu_affinity == NPU_CPUS[1]


def test_the_live_npu_topology_is_npu_smis(tmp_path, npu_smi, on_logger):
    # npu-smi (SGLang's source) numbers the NPUs its own way: here NPU0-3 are on node 1, unlike sysfs's guess
    npu_box(tmp_path / "box")
    topo = sglang.query_npu_smi_topology()
    assert topo.source == "npu-smi info -t topo"
    assert [topo.entries[k].numa_node for k in range(8)] == [1, 1, 1, 1, 0, 0, 0, 0]
    assert topo.entries[0].raw_cpu_affinity == "8-15,24-31"
    # npu-smi failing: a warning, and numabind's discovery answers
    (npu_smi / "rc").write_text("3")
    seen = on_logger("sglang")
    assert sglang.query_npu_smi_topology().source.startswith("numabind discovery")
    assert any("exited with 3" in m for m in seen.at(logging.WARNING))
    # a row whose CPU affinity lies in no single node has no node
    (npu_smi / "rc").unlink()
    (npu_smi / "topo.txt").write_text("NPU0 CPU Affinity\nNPU0 X 7-8\n")
    assert sglang.query_npu_smi_topology().entries[0].numa_node is None
    (npu_smi / "topo.txt").write_text("NPU0 CPU Affinity\nNPU0 X 0-3\nNPU0 X 0-3\n")
    assert sglang.query_npu_smi_topology().source.startswith("numabind discovery")
    assert any("twice" in m for m in seen.at(logging.WARNING))


def test_an_npu_box_without_v2_node_gets_its_npus_node_preferred(tmp_path, monkeypatch, children, on_logger):
    npu_box(tmp_path)
    monkeypatch.setattr(compat, "probe_plan", lambda plan, topology: None)
    with sglang.configure_subprocess(npu_args(), 5):     # automatic V2 finds no NVIDIA/Intel GPU: no node
        pass
    assert children == []                               # SGLANG_NPU_MEMORY_PREFERRED_BIND is off by default
    monkeypatch.setenv("SGLANG_NPU_MEMORY_PREFERRED_BIND", "1")
    seen = on_logger("sglang")
    with sglang.configure_subprocess(npu_args(), 5):
        pass
    [(plan, strict)] = children
    assert (plan.cpus, plan.mem_policy, plan.mem_nodes, strict) == (None, "preferred", frozenset({1}), False)
    assert any("NPU 5" in m and "--preferred=1" in m for m in seen.at(logging.INFO))
    # the same with V2 off: the preference is SGLang's NPU path, not V2's; it reads the NPU's node only,
    # never the parent's CPUs or a scheduler's CPU share (with SGLANG_SET_CPU_AFFINITY on as well)
    monkeypatch.setenv("SGLANG_NUMA_BIND_V2", "0")
    monkeypatch.setenv("SGLANG_SET_CPU_AFFINITY", "1")
    for module in (sglang, sglang_npu):
        for name in ("resolve_npu_affinity_assignment", "process_cpus"):
            monkeypatch.setattr(module, name, lambda *a, **k: pytest.fail("computed a CPU share in the parent"))
    with sglang.configure_subprocess(npu_args(), 2):
        pass
    assert children[1][0].mem_nodes == frozenset({0})


def test_a_successful_v2_binding_adds_no_preference(tmp_path, monkeypatch, children):
    npu_box(tmp_path)
    monkeypatch.setattr(compat, "probe_plan", lambda plan, topology: None)
    monkeypatch.setenv("SGLANG_NPU_MEMORY_PREFERRED_BIND", "1")
    with sglang.configure_subprocess(npu_args([0, 0, 0, 0, 1, 1, 1, 1]), 5):
        pass
    [(plan, _)] = children
    assert (plan.cpus, plan.mem_policy, plan.mem_nodes) == (L(NPU_CPUS[1]), "bind", frozenset({1}))


def test_a_failed_v2_binding_falls_through_to_the_npu_preference(tmp_path, monkeypatch, children, on_logger):
    npu_box(tmp_path)
    # the kernel refuses every CPU binding: V2's whole ladder fails, a bare memory preference does not
    monkeypatch.setattr(compat, "probe_plan",
                        lambda plan, topology: "sched_setaffinity failed with EPERM" if plan.cpus else None)
    monkeypatch.setenv("SGLANG_NPU_MEMORY_PREFERRED_BIND", "1")
    seen = on_logger("sglang")
    with sglang.configure_subprocess(npu_args([0, 0, 0, 0, 1, 1, 1, 1]), 6):
        pass
    [(plan, _)] = children
    assert (plan.cpus, plan.mem_policy, plan.mem_nodes) == (None, "preferred", frozenset({1}))
    assert any("skipping NUMA binding for GPU 6" in m for m in seen.at(logging.WARNING))


def test_a_refused_npu_preference_starts_the_child_unbound(tmp_path, monkeypatch, children, on_logger):
    npu_box(tmp_path)
    monkeypatch.setattr(compat, "probe_plan", lambda plan, topology: "set_mempolicy failed with EPERM")
    monkeypatch.setenv("SGLANG_NPU_MEMORY_PREFERRED_BIND", "1")
    monkeypatch.setenv("SGLANG_NUMA_BIND_V2", "0")
    seen = on_logger("sglang")
    entered = []
    with sglang.configure_subprocess(npu_args(), 0):
        entered.append(True)
    assert entered == [True] and children == []
    assert any("'--preferred=0'" in m and "EPERM" in m for m in seen.at(logging.WARNING))


@pytest.mark.parametrize("flag", ["SGLANG_SET_CPU_AFFINITY", "SGLANG_NPU_MEMORY_PREFERRED_BIND"])
def test_an_explicit_node_that_contradicts_the_npu_is_refused_even_without_v2(tmp_path, monkeypatch, children,
                                                                               flag):
    npu_box(tmp_path)
    monkeypatch.setenv(flag, "1")
    monkeypatch.setenv("SGLANG_NUMA_BIND_V2", "0")
    entered = []
    with pytest.raises(RuntimeError, match="conflicts with NPU topology") as raised:
        with sglang.configure_subprocess(npu_args([1, 0]), 0):
            entered.append(True)
    assert entered == [] and children == []
    assert isinstance(raised.value, sglang.NpuAffinityError) and "give it node 0" in str(raised.value)
    # an agreeing node passes; without either NPU switch, or on a GPU, nothing is checked
    with sglang.configure_subprocess(npu_args([0, 0]), 1):
        entered.append(True)
    monkeypatch.delenv(flag)
    with sglang.configure_subprocess(npu_args([1, 0]), 0):
        entered.append(True)
    monkeypatch.setenv(flag, "1")
    with sglang.configure_subprocess(npu_args([1, 0], device="cuda"), 0):
        entered.append(True)
    assert entered == [True, True, True]


def test_the_live_check_uses_npu_smis_topology(tmp_path, npu_smi, monkeypatch):
    npu_box(tmp_path / "box")
    monkeypatch.setenv("SGLANG_SET_CPU_AFFINITY", "1")
    monkeypatch.setenv("SGLANG_NUMA_BIND_V2", "0")
    with pytest.raises(RuntimeError, match=r"conflicts with .*NPU.* topology.*npu-smi"):
        with sglang.configure_subprocess(npu_args([0]), 0):    # npu-smi puts NPU0 on node 1
            pass


def test_cpu_affinity_alone_looks_nothing_up_in_the_parent(tmp_path, monkeypatch, children):
    npu_box(tmp_path)
    monkeypatch.setenv("SGLANG_SET_CPU_AFFINITY", "1")
    monkeypatch.setenv("SGLANG_NUMA_BIND_V2", "0")
    for name in ("query_npu_smi_topology", "resolve_physical_npu_id", "resolve_npu_affinity_assignment"):
        monkeypatch.setattr(sglang, name, lambda *a, **k: pytest.fail("looked the NPU up"))
    with sglang.configure_subprocess(npu_args(), 0):
        pass
    assert children == []


def test_an_npu_of_unknown_node_gets_no_preference(tmp_path, monkeypatch, children, on_logger):
    npu_box(tmp_path)
    monkeypatch.setenv("SGLANG_NPU_MEMORY_PREFERRED_BIND", "1")
    monkeypatch.setattr(sglang, "query_npu_smi_topology",
                        lambda: sglang.NpuTopology("test", {0: sglang.NpuTopologyEntry(0, "7-8", L("7-8"), None)},
                                                   L("0-31")))
    seen = on_logger("sglang")
    with sglang.configure_subprocess(npu_args(), 0):
        pass
    with sglang.configure_subprocess(npu_args(), 1):
        pass
    assert children == []
    warned = seen.at(logging.WARNING)
    assert any("no single NUMA node" in m for m in warned) and any("not in the NPU topology" in m for m in warned)


def test_each_npu_scheduler_owns_a_fixed_share_of_whole_cores(tmp_path, monkeypatch, on_logger):
    npu_box(tmp_path)
    shares = [sglang.resolve_npu_affinity_assignment(logical_npu_id=k) for k in range(8)]
    assert [a.logical_cpu_ids for a in shares[:2]] == [(0, 1, 16, 17), (2, 3, 18, 19)]
    assert (shares[5].numa_node, shares[5].slot_index, shares[5].slots_on_node) == (1, 1, 4)
    assert shares[5].logical_cpu_ids == (10, 11, 26, 27) and shares[5].physical_core_keys == ((1, 2), (1, 3))
    owned = [set(a.logical_cpu_ids) for a in shares]
    assert set().union(*owned) == set(range(32)) and sum(map(len, owned)) == 32
    # a process missing one sibling of a core loses that core, not its neighbour's
    monkeypatch.setattr(sglang_npu, "process_cpus", lambda topology: L("0-31") - {16})
    assert sglang.resolve_npu_affinity_assignment(logical_npu_id=0).logical_cpu_ids == (1, 17)
    assert sglang.resolve_npu_affinity_assignment(logical_npu_id=1).logical_cpu_ids == (2, 3, 18, 19)
    monkeypatch.setattr(sglang_npu, "process_cpus", lambda topology: L("0-7"))
    with pytest.raises(sglang.NpuAffinityError, match="no whole core in its share") as raised:
        sglang.resolve_npu_affinity_assignment(logical_npu_id=0)
    assert raised.value.stage == "filter_process_cpuset"


def test_the_core_budget_caps_the_share(tmp_path, monkeypatch, on_logger):
    npu_box(tmp_path)
    monkeypatch.setenv("SGLANG_NPU_AFFINITY_PCORES_PER_PROC", "1")
    one = sglang.resolve_npu_affinity_assignment(logical_npu_id=1)
    assert (one.requested_pcores, one.effective_pcores, one.logical_cpu_ids) == (1, 1, (2, 18))
    monkeypatch.setenv("SGLANG_NPU_AFFINITY_PCORES_PER_PROC", "99")
    seen = on_logger("sglang")
    assert sglang.resolve_npu_affinity_assignment(logical_npu_id=1).effective_pcores == 2
    assert any("more than the 2 whole cores" in m for m in seen.at(logging.WARNING))
    monkeypatch.setenv("SGLANG_NPU_AFFINITY_PCORES_PER_PROC", "-1")
    with pytest.raises(ValueError, match="must be >= 0"):
        sglang.resolve_npu_affinity_assignment(logical_npu_id=0)
