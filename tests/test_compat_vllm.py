"""numabind.compat.vllm as a drop-in for vllm.utils.numa_utils.

The cases restate the facts of vLLM's own numa_utils tests (option strings,
PCT priority cores, EngineCore shards, exception types, the automatic gate,
the numactl fallback ladder) against duck-typed configs and fake machines;
vLLM, torch and numactl are never imported or run. Tests that bind for real
derive their CPUs and nodes from this process at run time.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.spawn
import os
import threading
import types

import pytest

import numabind
from numabind import compat
from numabind.backends import MPOL_MODES
from numabind.compat import vllm
from numabind.cpulist import parse_cpulist as L
from numabind.topology import discover

from .fakecompat import absent_node, dgx, host_cpus, host_shaped, machine, pc_config, use, vllm_config
from .fakegpu import add_nvidia_gpu, nv_uuid
from .fakesys import one_node

pytestmark = pytest.mark.usefixtures("fresh_compat")


# ----------------------------------------------------------------------------- configs
def gate_config(**overrides):
    """A config for the automatic gate: a newer vLLM, with world sizes and get_local_gpu_index."""
    fields = dict(numa_bind=None, world_size=4, local_world_size=4, data_parallel_size_local=2,
                  assigned_physical_gpu_ids=None)
    fields.update(overrides)
    pc = pc_config(**fields)
    pc.get_local_gpu_index = lambda local_rank, dp_local_rank=None: (dp_local_rank or 0) * pc.world_size + local_rank
    return pc


# ----------------------------------------------------------------------------- the module's surface
VLLM_NAMES = [
    "configure_subprocess", "get_auto_numa_nodes", "log_current_affinity_state", "get_libnuma",
    "_can_auto_bind", "_get_cpu_binding", "_get_enginecore_numa_nodes", "_get_mempolicy",
    "_get_numactl_enginecore_args", "_get_numactl_executable", "_get_numactl_worker_args",
    "_is_auto_numa_available", "_maybe_get_pct_cpu_binding", "_pct_sku_config", "_pct_sku_from_cpuinfo",
    "_probe_numactl_args", "_resolve_numactl_args", "_get_numa_node", "_log_numactl_show",
    "_set_numa_wrapper_env", "_mp_set_executable", "_get_numactl_args", "_get_gpu_index", "_can_set_mempolicy",
]


@pytest.mark.parametrize("name", VLLM_NAMES)
def test_every_name_vllm_code_uses_is_a_function(name):
    assert callable(getattr(vllm, name))


def test_module_constants_and_logger():
    assert vllm.logger.name == "vllm.utils.numa_utils"
    assert vllm._NUMACTL_ARGS_ENV == "_VLLM_INTERNAL_NUMACTL_ARGS"
    assert vllm._NUMACTL_PYTHON_EXECUTABLE_ENV == "_VLLM_INTERNAL_NUMACTL_PYTHON_EXECUTABLE"
    assert callable(vllm._pct_sku_config.cache_clear)


def test_pct_sku_table_has_vllm_field_names():
    from numabind.strategies import PCT_SKUS

    assert vllm._PCT_CAPABLE_SKUS["6776P"] == vllm._PctSku(highest_perf=46, priority_stride=16)
    assert vllm._PCT_CAPABLE_SKUS["6962P"].priority_stride == 18
    assert {k: (v.highest_perf, v.priority_stride) for k, v in vllm._PCT_CAPABLE_SKUS.items()} == \
        {k: (v.highest_perf, v.stride) for k, v in PCT_SKUS.items()}


# ----------------------------------------------------------------------------- option strings
def test_worker_bound_to_its_nodes_cpus(tmp_path):
    use(dgx(tmp_path))
    pc = pc_config(numa_bind=True, numa_bind_nodes=[0, 1])
    assert vllm._get_numactl_worker_args(pc, local_rank=1) == "--cpunodebind=1 --membind=1"


def test_worker_with_explicit_cpus(tmp_path):
    use(dgx(tmp_path))
    pc = pc_config(numa_bind=True, numa_bind_nodes=[0, 1], numa_bind_cpus=["0-3", "4-7"])
    assert vllm._get_numactl_worker_args(pc, local_rank=1) == "--physcpubind=4-7 --membind=1"


def test_dp_offset_without_get_local_gpu_index(tmp_path):
    """Older vLLM: no ParallelConfig.get_local_gpu_index, vLLM's formula local_rank + dp * tp * pp."""
    use(dgx(tmp_path))
    pc = pc_config(numa_bind=True, numa_bind_nodes=[0, 0, 1, 1], data_parallel_rank_local=1, tensor_parallel_size=2)
    assert not hasattr(pc, "get_local_gpu_index")
    assert vllm._get_numactl_worker_args(pc, local_rank=1) == "--cpunodebind=1 --membind=1"
    assert vllm._get_gpu_index(pc, 1) == 3
    assert vllm._get_gpu_index(pc, 0, dp_local_rank=0) == 0


def test_get_local_gpu_index_is_used_when_vllm_has_it(tmp_path):
    use(dgx(tmp_path))
    pc = pc_config(numa_bind=True, numa_bind_nodes=[0, 0, 1, 1], data_parallel_rank_local=1, tensor_parallel_size=2)
    asked = []
    pc.get_local_gpu_index = lambda local_rank, dp_local_rank=None: asked.append((local_rank, dp_local_rank)) or 0
    assert vllm._get_numactl_worker_args(pc, local_rank=1) == "--cpunodebind=0 --membind=0"
    assert asked == [(1, None)]


def test_ray_worker_index_is_its_local_rank(tmp_path):
    pc = pc_config(distributed_executor_backend="ray", data_parallel_rank_local=1, tensor_parallel_size=2)
    assert vllm._get_gpu_index(pc, 1) == 1


def test_old_get_numactl_args_entry_point(tmp_path):
    use(dgx(tmp_path))
    assert vllm._get_numactl_args(vllm_config(numa_bind=True, numa_bind_nodes=[0, 1]), local_rank=1) == \
        "--cpunodebind=1 --membind=1"
    assert vllm._get_numactl_args(vllm_config(numa_bind=False, numa_bind_nodes=[0, 1]), local_rank=1) is None
    with pytest.raises(ValueError, match="process_kind"):
        vllm._get_numactl_args(vllm_config(numa_bind=True, numa_bind_nodes=[0]), 0, process_kind="scheduler")


def test_automatic_binding_prefers_memory(tmp_path):
    use(dgx(tmp_path))
    pc = pc_config(numa_bind=True, numa_bind_nodes=[0, 0, 1, 1], _numa_bind_auto=True, tensor_parallel_size=4)
    assert vllm._get_numactl_worker_args(pc, 2) == "--cpunodebind=1 --preferred=1"
    assert vllm._get_numactl_enginecore_args(pc, 0) == "--cpunodebind=0,1 --preferred-many=0,1"
    one = pc_config(numa_bind=True, numa_bind_nodes=[1, 1], _numa_bind_auto=True, tensor_parallel_size=2)
    assert vllm._get_numactl_enginecore_args(one, 0) == "--cpunodebind=1 --preferred=1"


def test_enginecore_single_node_shard(tmp_path):
    use(dgx(tmp_path))
    pc = pc_config(numa_bind=True, numa_bind_nodes=[0, 1])
    assert vllm._get_numactl_enginecore_args(pc, local_rank=0) == "--cpunodebind=0 --membind=0"


def test_enginecore_shard_spanning_both_nodes(tmp_path):
    use(dgx(tmp_path))
    pc = pc_config(numa_bind=True, numa_bind_nodes=[0, 0, 1, 1], tensor_parallel_size=4)
    assert vllm._get_numactl_enginecore_args(pc, local_rank=0) == "--cpunodebind=0,1 --membind=0,1"


def test_enginecore_dp_shard_takes_its_own_nodes(tmp_path):
    use(dgx(tmp_path))
    pc = pc_config(numa_bind=True, numa_bind_nodes=[0, 0, 1, 1], tensor_parallel_size=2, data_parallel_rank_local=1)
    assert vllm._get_enginecore_numa_nodes(pc) == [1]
    assert vllm._get_numactl_enginecore_args(pc, 0) == "--cpunodebind=1 --membind=1"
    assert vllm._get_numactl_enginecore_args(pc, 0, dp_local_rank=0) == "--cpunodebind=0 --membind=0"


@pytest.mark.parametrize("overrides", [
    {"distributed_executor_backend": "external_launcher"},
    {"distributed_executor_backend": "ray"},
    {"data_parallel_backend": "ray"},
    {"nnodes_within_dp": 2},
])
def test_enginecore_outside_local_launch_spans_every_local_node(tmp_path, overrides):
    use(dgx(tmp_path))
    pc = pc_config(numa_bind=True, numa_bind_nodes=[0, 0, 0, 0, 1, 1, 1, 1], tensor_parallel_size=2, **overrides)
    assert vllm._get_numactl_enginecore_args(pc, 0) == "--cpunodebind=0,1 --membind=0,1"


def test_enginecore_ignores_per_worker_cpu_lists(tmp_path):
    use(dgx(tmp_path))
    pc = pc_config(numa_bind=True, numa_bind_nodes=[0, 0, 1, 1], numa_bind_cpus=["0-3", "4-7", "8-9", "10-11"],
                   tensor_parallel_size=4)
    assert vllm._get_numactl_enginecore_args(pc, 0) == "--cpunodebind=0,1 --membind=0,1"
    plan = vllm.enginecore_plan(pc, 0)
    for rank in range(4):
        assert vllm.worker_plan(pc, rank).cpus <= plan.cpus      # workers can narrow from it


def test_worker_and_enginecore_plans_resolve_on_the_machine(tmp_path):
    use(dgx(tmp_path))
    pc = pc_config(numa_bind=True, numa_bind_nodes=[0, 0, 0, 0, 1, 1, 1, 1], tensor_parallel_size=4,
                   data_parallel_rank_local=1)
    plan = vllm.worker_plan(pc, 1)                               # GPU 5
    assert plan.cpus == L("8-15,24-31")
    assert (plan.mem_policy, plan.mem_nodes) == ("bind", frozenset({1}))
    assert vllm.enginecore_plan(pc, 0).cpus == L("8-15,24-31")


# ----------------------------------------------------------------------------- exception types
def test_node_list_too_short_is_a_value_error(tmp_path):
    use(dgx(tmp_path))
    pc = pc_config(numa_bind=True, numa_bind_nodes=[0])
    with pytest.raises(ValueError, match="numa_bind_nodes"):
        vllm._get_numactl_worker_args(pc, local_rank=1)
    with pytest.raises(numabind.PlanError):
        vllm._get_numa_node(pc, 3)


def test_cpu_list_too_short_is_a_value_error(tmp_path):
    use(dgx(tmp_path))
    pc = pc_config(numa_bind=True, numa_bind_nodes=[0, 0, 1, 1], numa_bind_cpus=["0-1"])
    with pytest.raises(ValueError, match="numa_bind_cpus"):
        vllm._get_numactl_worker_args(pc, local_rank=3)


def test_no_detectable_nodes_is_a_runtime_error(tmp_path, monkeypatch):
    use(dgx(tmp_path))
    monkeypatch.setattr(vllm, "get_auto_numa_nodes", lambda: None)
    with pytest.raises(RuntimeError, match="numa-bind-nodes"):
        vllm._get_numactl_worker_args(pc_config(numa_bind=True), local_rank=0)


def test_one_node_machine_says_why_at_warning(tmp_path, on_logger):
    """The user asked for binding (--numa-bind without nodes): the reason is a WARNING."""
    one_node(tmp_path, ncpus=4)
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=0)
    use(discover(tmp_path))
    seen = on_logger("vllm")
    with pytest.raises(RuntimeError):
        vllm._get_numactl_worker_args(pc_config(numa_bind=True), local_rank=0)
    assert any("NUMA node" in m for m in seen.at(logging.WARNING))


def test_detected_nodes_are_stored_in_the_config(tmp_path, on_logger):
    use(dgx(tmp_path))
    seen = on_logger("vllm")
    pc = pc_config(numa_bind=True)
    assert vllm._get_numactl_worker_args(pc, local_rank=5) == "--cpunodebind=1 --membind=1"
    assert pc.numa_bind_nodes == [0, 0, 0, 0, 1, 1, 1, 1]
    assert any("[0, 0, 0, 0, 1, 1, 1, 1]" in m for m in seen.at(logging.INFO))


# ----------------------------------------------------------------------------- PCT priority cores
def pct_machine(root, sku="6776P", perf=46, node_cpus=("0-31,64-95", "32-63,96-127"), model=None):
    return use(machine(root, dict(enumerate(node_cpus)), gpus=[0, 1],
                       model=model or f"Intel(R) Xeon(R) 6 {sku} CPU @ 2.40GHz", cppc=perf))


@pytest.mark.parametrize("sku, expected", [
    ("6776P", [0, 1, 16, 17, 64, 65, 80, 81]),        # stride 16
    ("6774P", [0, 1, 16, 17, 64, 65, 80, 81]),
    ("6962P", [0, 1, 18, 19, 72, 73, 90, 91]),        # stride 18
])
def test_pct_priority_cores_of_every_known_sku(tmp_path, sku, expected):
    pct_machine(tmp_path, sku=sku, perf=vllm._PCT_CAPABLE_SKUS[sku].highest_perf)
    assert vllm._pct_sku_from_cpuinfo() == vllm._PCT_CAPABLE_SKUS[sku]
    assert vllm._maybe_get_pct_cpu_binding([0]) == expected


@pytest.mark.parametrize("kw", [
    {"sku": "6962P", "perf": 46},                          # another SKU's highest_perf: fails closed
    {"perf": 42},                                          # PCT off in firmware
    {"perf": None},                                        # acpi_cppc missing
    {"model": "Intel(R) Xeon(R) Platinum 8480+"},          # not a PCT SKU
])
def test_pct_gate_fails_closed(tmp_path, kw):
    pct_machine(tmp_path, **kw)
    assert vllm._pct_sku_config() is None
    assert vllm._maybe_get_pct_cpu_binding([0]) is None


def test_pct_none_when_the_node_has_no_priority_cpu(tmp_path):
    pct_machine(tmp_path, node_cpus=("2-15,18-31", "32-47"))
    assert vllm._pct_sku_config() is not None
    assert vllm._maybe_get_pct_cpu_binding([0]) is None
    assert vllm._maybe_get_pct_cpu_binding([7]) is None          # a node the machine does not have


def test_pct_answer_is_cached_until_refresh(tmp_path):
    pct_machine(tmp_path / "a")
    assert vllm._pct_sku_config() is not None
    compat._cache.pinned.topology = machine(tmp_path / "b", {0: "0-3"})   # swapped without a refresh
    assert vllm._pct_sku_config() is not None
    use(machine(tmp_path / "c", {0: "0-3"}))
    assert vllm._pct_sku_config() is None


def test_worker_uses_pct_cores_without_a_cpu_list(tmp_path, on_logger):
    pct_machine(tmp_path)
    seen = on_logger("vllm")
    pc = pc_config(numa_bind=True, numa_bind_nodes=[0, 1])
    assert vllm._get_numactl_worker_args(pc, local_rank=1) == "--physcpubind=32,33,48,49,96,97,112,113 --membind=1"
    assert any("Priority Core Turbo" in m for m in seen.at(logging.INFO))


def test_user_cpus_override_pct(tmp_path):
    pct_machine(tmp_path)
    pc = pc_config(numa_bind=True, numa_bind_nodes=[0, 1], numa_bind_cpus=["0-3", "40-43"])
    assert vllm._get_numactl_worker_args(pc, local_rank=1) == "--physcpubind=40-43 --membind=1"


def test_enginecore_pct_union_spans_its_shard(tmp_path):
    pct_machine(tmp_path, node_cpus=("0-31,128-159", "64-95,192-223"))
    pc = pc_config(numa_bind=True, numa_bind_nodes=[0, 0, 1, 1], tensor_parallel_size=4)
    assert vllm._get_numactl_enginecore_args(pc, 0) == \
        "--physcpubind=0,1,16,17,64,65,80,81,128,129,144,145,192,193,208,209 --membind=0,1"
    shard = pc_config(numa_bind=True, numa_bind_nodes=[0, 0, 1, 1], tensor_parallel_size=2, data_parallel_rank_local=1)
    assert vllm._get_numactl_enginecore_args(shard, 0) == "--physcpubind=64,65,80,81,192,193,208,209 --membind=1"
    launcher = pc_config(numa_bind=True, numa_bind_nodes=[0, 0, 0, 0, 1, 1, 1, 1], tensor_parallel_size=8,
                         distributed_executor_backend="external_launcher")
    assert vllm._get_numactl_enginecore_args(launcher, 0).startswith("--physcpubind=0,1,16,17,64,65,")


def test_enginecore_skips_pct_when_the_user_gave_cpu_lists(tmp_path):
    pct_machine(tmp_path)
    pc = pc_config(numa_bind=True, numa_bind_nodes=[0, 0, 1, 1], numa_bind_cpus=["0-3", "4-7", "64-67", "68-71"],
                   tensor_parallel_size=4)
    assert vllm._get_numactl_enginecore_args(pc, 0) == "--cpunodebind=0,1 --membind=0,1"


def test_pct_cores_stay_inside_the_allowed_cpus(tmp_path):
    use(machine(tmp_path, {0: "0-31,64-95", 1: "32-63,96-127"}, allowed=L("0-15,64-127"), gpus=[0, 1],
                model="Intel(R) Xeon(R) 6 6776P", cppc=46))
    assert vllm._maybe_get_pct_cpu_binding([0]) == [0, 1, 64, 65, 80, 81]


# ----------------------------------------------------------------------------- the automatic gate
@pytest.mark.parametrize("overrides, method, expect", [
    ({}, "spawn", True),
    ({}, None, False),                                            # vLLM's default start method is fork
    ({"distributed_executor_backend": "ray"}, "spawn", False),
    ({"data_parallel_backend": "ray"}, "spawn", False),
    ({"assigned_physical_gpu_ids": [3, 2]}, "spawn", False),     # --device-ids remaps the order
    ({"local_world_size": 16}, "spawn", False),                   # workers beyond the visible GPUs
])
def test_can_auto_bind_returns_a_bool(tmp_path, monkeypatch, overrides, method, expect):
    use(dgx(tmp_path))
    if method:
        monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", method)
    pc = gate_config(**overrides)
    got = vllm._can_auto_bind(pc, 0)
    assert got is expect                       # a bool: a (False, why) tuple would be truthy
    ok, why = vllm.auto_bind_decision(gate_config(**overrides), 0)
    assert ok is expect and why
    assert pc.numa_bind_nodes == ([0, 0, 0, 0, 1, 1, 1, 1] if expect else None)


def test_gate_needs_no_numactl(tmp_path, monkeypatch):
    use(dgx(tmp_path))
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert vllm.can_auto_bind(gate_config(), 0) is True


def test_gate_refuses_a_constrained_process_quietly(tmp_path, monkeypatch, on_logger):
    """Default mode: skipping is expected, so the reason is DEBUG, with one INFO line from configure_subprocess."""
    use(machine(tmp_path, {0: "0-7", 1: "8-15"}, allowed=L("0-7"), gpus=[0, 0, 1, 1]))
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    seen = on_logger("vllm")
    cfg = types.SimpleNamespace(parallel_config=gate_config())
    ok, why = vllm.auto_bind_decision(cfg.parallel_config, 0)
    assert ok is False and "affinity" in why
    with vllm.configure_subprocess(cfg, 0):
        pass
    assert (cfg.parallel_config.numa_bind, cfg.parallel_config._numa_bind_auto) == (False, False)
    assert not seen.at(logging.WARNING)
    assert len(seen.at(logging.INFO)) == 1
    assert any("affinity" in m for m in seen.at(logging.DEBUG))


def test_gate_refuses_a_one_node_machine(tmp_path, monkeypatch):
    one_node(tmp_path, ncpus=4)
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=0)
    use(discover(tmp_path))
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    pc = gate_config(world_size=1, local_world_size=1, data_parallel_size_local=1)
    assert vllm.can_auto_bind(pc, 0) is False


def test_gate_refuses_nodes_that_do_not_match_the_gpus(tmp_path, monkeypatch):
    use(dgx(tmp_path))
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    monkeypatch.setattr(vllm, "get_auto_numa_nodes", lambda: [0, 1])          # 2 nodes for 8 GPUs
    assert vllm.auto_bind_decision(gate_config(), 0)[0] is False
    monkeypatch.setattr(vllm, "get_auto_numa_nodes", lambda: [0, 0, 0, 0, 1, 1, 1, -1])
    assert vllm.auto_bind_decision(gate_config(), 0)[0] is False


def test_is_auto_numa_available_levels(tmp_path, on_logger):
    one_node(tmp_path, ncpus=2)
    use(discover(tmp_path))
    seen = on_logger("vllm")
    assert vllm._is_auto_numa_available(verbose=False) is False
    assert not seen.at(logging.WARNING) and seen.at(logging.DEBUG)
    assert vllm._is_auto_numa_available() is False
    assert seen.at(logging.WARNING)


# ----------------------------------------------------------------------------- configure_subprocess decisions
def test_unknown_process_kind_raises_only_when_binding_is_on(tmp_path):
    use(dgx(tmp_path))
    with pytest.raises(ValueError, match="process_kind"):
        with vllm.configure_subprocess(vllm_config(numa_bind=True, numa_bind_nodes=[0]), 0, process_kind="bogus"):
            pass
    entered = []
    with vllm.configure_subprocess(vllm_config(numa_bind=False), 0, process_kind="bogus"):
        entered.append(True)
    assert entered == [True]


@pytest.fixture
def children(monkeypatch):
    """Replaces the birth binding with a recorder: the plans configure_subprocess would give children."""
    plans = []

    import contextlib

    @contextlib.contextmanager
    def record(plan, target, strict=False):
        plans.append(plan)
        yield

    monkeypatch.setattr(vllm, "bind_children", record)
    return plans


@pytest.mark.kernel
def test_missing_memory_node_drops_the_memory_policy(tmp_path, children, on_logger):
    topo, node, cpus = host_shaped(tmp_path)
    seen = on_logger("vllm")
    missing = absent_node()
    args = f"--cpunodebind={node} --membind={missing}"
    assert vllm._probe_numactl_args(args) is False
    assert vllm._resolve_numactl_args(args) == f"--cpunodebind={node}"
    assert len(seen.at(logging.WARNING)) == 1
    with vllm.configure_subprocess(vllm_config(numa_bind=True, numa_bind_nodes=[missing]), 0):
        pass
    assert children == []            # --cpunodebind of a missing node: nothing is left to apply


@pytest.mark.kernel
def test_nothing_applicable_starts_unbound_and_resets_automatic_binding(tmp_path, children, on_logger):
    use(host_shaped(tmp_path)[0])
    seen = on_logger("vllm")
    missing = absent_node()
    assert vllm._resolve_numactl_args(f"--cpunodebind={missing} --membind={missing}") == ""
    warnings = seen.at(logging.WARNING)                        # one record: the cause, the outcome, the hint
    assert len(warnings) == 1 and "no NUMA binding" in warnings[0] and "--cap-add SYS_NICE" in warnings[0]
    auto = vllm_config(numa_bind=True, numa_bind_nodes=[missing], _numa_bind_auto=True)
    with vllm.configure_subprocess(auto, 0):
        pass
    assert (auto.parallel_config.numa_bind, auto.parallel_config.numa_bind_nodes,
            auto.parallel_config._numa_bind_auto) == (False, None, False)
    explicit = vllm_config(numa_bind=True, numa_bind_nodes=[missing])
    with vllm.configure_subprocess(explicit, 0):
        pass
    assert explicit.parallel_config.numa_bind is True and explicit.parallel_config.numa_bind_nodes == [missing]
    assert children == []


@pytest.mark.kernel
def test_enginecore_over_two_nodes_drops_memory_rather_than_piling_it_on_one(tmp_path, children, on_logger):
    """The memory policy over both nodes is refused by the kernel: the EngineCore keeps its CPUs and the
    default memory policy, not a preferred policy on the lowest node."""
    cpus = host_cpus()
    a, b = absent_node(), absent_node() + 1
    use(machine(tmp_path, {a: cpus, b: [max(cpus) + 1]}, allowed=cpus, mems={a, b}, gpus=[a, b]))
    seen = on_logger("vllm")
    pc = pc_config(numa_bind=True, numa_bind_nodes=[a, b], tensor_parallel_size=2)
    with vllm.configure_subprocess(types.SimpleNamespace(parallel_config=pc), 0, process_kind="EngineCore"):
        pass
    assert len(children) == 1
    assert children[0].cpus == frozenset(cpus)
    assert children[0].mem_policy is None
    assert any("falling back to '--cpunodebind=" in m for m in seen.at(logging.WARNING))


def test_a_binding_the_probe_accepted_but_that_cannot_be_planned_starts_unbound(tmp_path, children, on_logger,
                                                                               monkeypatch):
    """Between the probe and the child's plan the machine may change (its affinity, a CPU going offline):
    vLLM's launcher is not crashed, the child starts unbound and a WARNING says why."""
    use(machine(tmp_path, {0: "0-3"}, allowed=L("0-1"), gpus=[0]))
    monkeypatch.setattr(vllm, "_resolve_numactl_args", lambda args: args)      # "numactl accepted it"
    seen = on_logger("vllm")
    config = vllm_config(numa_bind=True, numa_bind_nodes=[0], numa_bind_cpus=["0-3"])
    with vllm.configure_subprocess(config, 0):
        assert vllm._NUMACTL_ARGS_ENV not in os.environ      # no binding to read: none is applied
    assert children == []
    warning = seen.at(logging.WARNING)[-1]
    assert "'--physcpubind=0-3 --membind=0' was accepted by the probe but cannot be bound now" in warning
    assert "the worker subprocess (local_rank=0) starts unbound" in warning


def test_numactl_cpu_forms_resolve_on_the_machine(tmp_path):
    use(machine(tmp_path, {0: "0-7", 1: "8-15"}, allowed=L("2-15"), gpus=[0, 1]))
    forms = {"all": L("2-15"), "!2-9": L("10-15"), "+0-1": L("2-3"), "!+0": L("3-15"), "12,14": L("12,14")}
    for text, cpus in forms.items():
        pc = pc_config(numa_bind=True, numa_bind_nodes=[0, 1], numa_bind_cpus=[text, text])
        assert vllm.worker_plan(pc, 1).cpus == cpus, text


@pytest.mark.parametrize("text", ["8-15:2", "8-15:1/2", "8,,9", "8-"])
def test_cpu_lists_numactl_refuses_are_refused(tmp_path, text):
    use(machine(tmp_path, {0: "0-7", 1: "8-15"}, gpus=[0, 1]))
    assert vllm._probe_numactl_args(f"--physcpubind={text} --membind=1") is False
    assert vllm._resolve_numactl_args(f"--physcpubind={text} --membind=1") == ""


# ----------------------------------------------------------------------------- logging
def test_affinity_state_is_logged_at_debug_on_the_vllm_logger(on_logger):
    seen = on_logger("vllm")
    assert vllm._log_numactl_show("Worker_0") is True
    vllm.log_current_affinity_state("EngineCore")
    debug = seen.at(logging.DEBUG)
    physcpubind = "physcpubind: " + " ".join(map(str, host_cpus()))
    assert [m for m in debug if m.startswith("Worker_0 affinity: policy: ")][0].count(physcpubind) == 1
    assert any(m.startswith("EngineCore affinity: ") for m in debug)
    assert not seen.at(logging.INFO)


def test_numabind_warnings_are_forwarded_while_starting_children(on_logger):
    seen = on_logger("vllm")
    source = logging.getLogger("numabind.bind")
    with compat.forward_warnings(vllm.logger):
        source.warning("memory policy degraded to preferred 1")
        other = threading.Thread(target=source.warning, args=("from another thread",))
        other.start()
        other.join()
        source.info("pid 1 bound")
    source.warning("after the block")
    assert seen.at(logging.WARNING) == ["memory policy degraded to preferred 1"]
    assert not seen.at(logging.INFO)


def test_forwarding_does_not_repeat_what_the_host_already_shows(on_logger):
    """An application that configured the root logger sees numabind's records once."""
    seen = on_logger("")                      # the root logger
    source = logging.getLogger("numabind.bind")
    with compat.forward_warnings(vllm.logger):
        source.warning("once")
    assert seen.at(logging.WARNING) == ["once"]


# ----------------------------------------------------------------------------- vLLM's numactl plumbing
def test_wrapper_environment_is_set_and_restored(monkeypatch, on_logger):
    monkeypatch.setenv(vllm._NUMACTL_ARGS_ENV, "old-args")
    monkeypatch.delenv(vllm._NUMACTL_PYTHON_EXECUTABLE_ENV, raising=False)
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    before = multiprocessing.spawn.get_executable()
    with vllm._set_numa_wrapper_env("new-args", "new-python"), vllm._mp_set_executable("/x/wrapper.sh", "dbg"):
        assert os.environ[vllm._NUMACTL_ARGS_ENV] == "new-args"
        assert os.environ[vllm._NUMACTL_PYTHON_EXECUTABLE_ENV] == "new-python"
        assert os.fsdecode(multiprocessing.spawn.get_executable()) == "/x/wrapper.sh"
    assert os.environ[vllm._NUMACTL_ARGS_ENV] == "old-args"
    assert vllm._NUMACTL_PYTHON_EXECUTABLE_ENV not in os.environ
    assert multiprocessing.spawn.get_executable() == before


def test_numactl_executable_is_numabinds_environment_wrapper(monkeypatch):
    monkeypatch.setattr(vllm.shutil, "which", lambda name: None)     # numactl is not needed
    path, debug = vllm._get_numactl_executable()
    assert path.endswith("/numabind/compat/numa_wrapper.sh") and os.access(path, os.X_OK)
    assert vllm._NUMACTL_ARGS_ENV in debug


def test_get_libnuma_is_opened_once():
    first = vllm.get_libnuma()
    assert first is vllm.get_libnuma()
    assert first is None or hasattr(first, "numa_available")


@pytest.mark.kernel
def test_mempolicy_mode_is_the_kernels():
    b = numabind.current_binding()
    if b.mem_policy is None:
        assert vllm._get_mempolicy() is None and vllm._can_set_mempolicy() is False
    else:
        assert vllm._get_mempolicy() == MPOL_MODES[b.mem_policy]
        assert vllm._can_set_mempolicy() is True


# ----------------------------------------------------------------------------- one discovery per process
def test_the_machine_is_discovered_once(tmp_path, monkeypatch, discoveries):
    dgx(tmp_path)
    monkeypatch.setenv("NUMABIND_FSROOT", str(tmp_path))
    compat.refresh_topology()
    pc = pc_config(numa_bind=True)
    for rank in range(8):
        vllm._get_numactl_worker_args(pc, rank)
    vllm._get_numactl_enginecore_args(pc, 0)
    vllm.get_auto_numa_nodes()
    assert len(discoveries) == 1
    compat.refresh_topology()
    vllm.get_auto_numa_nodes()
    assert len(discoveries) == 2


def test_narrowed_cuda_visible_devices_are_renumbered_without_discovery(tmp_path, monkeypatch, discoveries):
    dgx(tmp_path)
    monkeypatch.setenv("NUMABIND_FSROOT", str(tmp_path))
    assert [g.numa_node for g in compat.current_topology().gpus] == [0] * 4 + [1] * 4
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,2")
    gpus = compat.current_topology().gpus
    assert [(g.index, g.minor, g.numa_node) for g in gpus] == [(0, 5, 1), (1, 2, 0)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")                 # an entry of the previous value
    assert [(g.index, g.minor) for g in compat.current_topology().gpus] == [(0, 2)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", nv_uuid(6))          # a full UUID
    assert [(g.index, g.minor) for g in compat.current_topology().gpus] == [(0, 6)]
    assert len(discoveries) == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", nv_uuid(6)[:12])     # a prefix: numabind's discovery decides
    assert [g.minor for g in compat.current_topology().gpus] == [6]
    assert len(discoveries) == 2
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert len(compat.current_topology().gpus) == 8
    assert len(discoveries) == 2                                    # the first one again


def test_a_forked_child_discovers_for_itself(tmp_path, monkeypatch, discoveries):
    dgx(tmp_path)
    monkeypatch.setenv("NUMABIND_FSROOT", str(tmp_path))
    compat.current_topology()
    assert len(discoveries) == 1
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            compat.current_topology()
            compat.current_topology()
            os.write(write, str(len(discoveries)).encode())
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 16).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == "2"                     # one discovery of its own, then its own cache
    compat.current_topology()
    assert len(discoveries) == 1             # the parent's cache is untouched


# ----------------------------------------------------------------------------- real children
def _child_state(conn):
    from numabind import current_binding

    b = current_binding()
    conn.send((sorted(os.sched_getaffinity(0)), b.mem_policy, sorted(b.mem_nodes)))


@pytest.mark.kernel
def test_worker_is_bound_at_birth_without_numactl(tmp_path, monkeypatch, on_logger):
    """A spawned worker starts on the CPU from --numa-bind-cpus and its GPU's node; the parent is unchanged."""
    topo, node, cpus = host_shaped(tmp_path)
    use(topo)
    cpu = cpus[-1]
    monkeypatch.setenv("PATH", str(tmp_path))          # no numactl anywhere
    seen = on_logger("vllm")
    cfg = vllm_config(numa_bind=True, numa_bind_nodes=[node], numa_bind_cpus=[str(cpu)])
    ctx = multiprocessing.get_context("spawn")
    parent_before = (os.sched_getaffinity(0), numabind.current_binding().mem_policy)
    recv, send = ctx.Pipe(duplex=False)
    with vllm.configure_subprocess(cfg, 0):
        p = ctx.Process(target=_child_state, args=(send,))
        p.start()
    state = recv.recv()
    p.join(60)
    assert p.exitcode == 0
    if seen.at(logging.WARNING):                        # this kernel refuses the memory policy
        assert state[0] == [cpu]
    else:
        assert state == ([cpu], "bind", [node])
    assert (os.sched_getaffinity(0), numabind.current_binding().mem_policy) == parent_before
    info = seen.at(logging.INFO)
    assert len(info) == 1 and "Binding worker subprocess" in info[0] and f"to CPUs {cpu} and NUMA node {node}" in info[0]
    assert str(os.getpid()) not in info[0]
