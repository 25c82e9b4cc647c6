"""The vLLM adapter takes vLLM's decisions from a parallel_config, with numabind's planning."""

from __future__ import annotations

import types

import pytest

from numabind.compat import vllm
from numabind.cpulist import parse_cpulist as L
from numabind.topology import discover

from .fakegpu import add_nvidia_gpu
from .fakesys import two_sockets


def dgx_topology(tmp_path, **kw):
    """2 sockets x 16 CPUs (node 0: 0-7,16-23; node 1: 8-15,24-31), 4 GPUs per socket."""
    two_sockets(tmp_path, cpus_per_socket=16)
    for k in range(8):
        add_nvidia_gpu(tmp_path, f"0000:{0x18 + 0x10 * k:02x}:00.0", numa_node=k // 4, minor=k)
    return discover(tmp_path)


def parallel_config(**overrides):
    """The attributes of vLLM's ParallelConfig that the adapter reads."""
    pc = types.SimpleNamespace(
        numa_bind=True, numa_bind_nodes=None, numa_bind_cpus=None, _numa_bind_auto=False,
        distributed_executor_backend="mp", data_parallel_backend="mp", nnodes_within_dp=1,
        world_size=4, local_world_size=4, data_parallel_rank_local=0, data_parallel_size_local=2,
        assigned_physical_gpu_ids=None,
    )
    for k, v in overrides.items():
        setattr(pc, k, v)
    pc.get_local_gpu_index = lambda local_rank, dp_local_rank=None: (dp_local_rank or 0) * pc.world_size + local_rank
    return pc


def test_auto_nodes_follow_the_gpus(tmp_path):
    assert vllm.get_auto_numa_nodes(dgx_topology(tmp_path)) == [0, 0, 0, 0, 1, 1, 1, 1]


def test_worker_binds_to_its_gpus_node(tmp_path):
    topo = dgx_topology(tmp_path)
    pc = parallel_config()
    plan = vllm.worker_plan(pc, local_rank=1, dp_local_rank=1, topology=topo)   # GPU 5
    assert plan.cpus == L("8-15,24-31")
    assert (plan.mem_policy, plan.mem_nodes) == ("bind", frozenset({1}))
    assert pc.numa_bind_nodes == [0, 0, 0, 0, 1, 1, 1, 1]      # cached like vLLM does


def test_automatic_binding_prefers_instead_of_binding(tmp_path):
    plan = vllm.worker_plan(parallel_config(_numa_bind_auto=True), 0, topology=dgx_topology(tmp_path))
    assert (plan.mem_policy, plan.mem_nodes) == ("preferred", frozenset({0}))


def test_explicit_nodes_and_cpus(tmp_path):
    topo = dgx_topology(tmp_path)
    pc = parallel_config(numa_bind_nodes=[1, 1, 0, 0, 0, 0, 1, 1], numa_bind_cpus=["8-9", "10-11", "0-1", "2-3",
                                                                                     "4-5", "6-7", "12-13", "14-15"])
    plan = vllm.worker_plan(pc, local_rank=2, topology=topo)
    assert plan.cpus == L("0-1")
    assert plan.mem_nodes == frozenset({0})
    plan = vllm.worker_plan(pc, local_rank=0, topology=topo)
    assert (plan.cpus, plan.mem_nodes) == (L("8-9"), frozenset({1}))


def test_cpu_list_that_misses_a_gpu_is_an_error(tmp_path):
    from numabind import PlanError

    pc = parallel_config(numa_bind_cpus=["0-1"])
    with pytest.raises(PlanError):
        vllm.worker_plan(pc, local_rank=3, topology=dgx_topology(tmp_path))


def test_enginecore_covers_its_dp_shard(tmp_path):
    topo = dgx_topology(tmp_path)
    pc = parallel_config()
    plan = vllm.enginecore_plan(pc, 0, dp_local_rank=1, topology=topo)       # GPUs 4-7: node 1
    assert plan.cpus == L("8-15,24-31")
    assert (plan.mem_policy, plan.mem_nodes) == ("bind", frozenset({1}))
    for rank in range(4):
        assert vllm.worker_plan(pc, rank, 1, topo).cpus <= plan.cpus


def test_enginecore_over_both_sockets_prefers_many_when_automatic(tmp_path):
    topo = dgx_topology(tmp_path)
    pc = parallel_config(world_size=8, _numa_bind_auto=True)
    plan = vllm.enginecore_plan(pc, 0, topology=topo)
    assert plan.cpus == L("0-31")
    assert (plan.mem_policy, plan.mem_nodes) == ("preferred-many", frozenset({0, 1}))


def test_enginecore_ignores_worker_cpu_lists(tmp_path):
    topo = dgx_topology(tmp_path)
    pc = parallel_config(numa_bind_cpus=["0"] * 8)
    plan = vllm.enginecore_plan(pc, 0, topology=topo)
    assert plan.cpus == L("0-7,16-23")           # the whole node, a superset of every worker's "0"


def test_ray_enginecore_spans_every_gpu(tmp_path):
    topo = dgx_topology(tmp_path)
    plan = vllm.enginecore_plan(parallel_config(distributed_executor_backend="ray"), 0, topology=topo)
    assert plan.mem_nodes == frozenset({0, 1})


@pytest.mark.parametrize("overrides, env, expect", [
    ({}, {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}, True),
    ({}, {}, False),                                               # vLLM's default is fork
    ({"distributed_executor_backend": "ray"}, {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}, False),
    ({"assigned_physical_gpu_ids": [3, 2]}, {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}, False),
    ({"local_world_size": 16}, {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}, False),
])
def test_auto_gate(tmp_path, overrides, env, expect):
    topo = dgx_topology(tmp_path)
    pc = parallel_config(**overrides)
    ok, why = vllm.can_auto_bind(pc, 0, topology=topo, env=env)
    assert ok is expect, why
    assert why
    if ok:
        assert pc.numa_bind_nodes == [0, 0, 0, 0, 1, 1, 1, 1]


def test_auto_gate_needs_no_numactl(tmp_path, monkeypatch):
    topo = dgx_topology(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))      # no numactl anywhere
    ok, why = vllm.can_auto_bind(parallel_config(), 0, topology=topo, env={"VLLM_WORKER_MULTIPROC_METHOD": "spawn"})
    assert ok, why


def test_unknown_process_kind(tmp_path):
    cfg = types.SimpleNamespace(parallel_config=parallel_config())
    with pytest.raises(ValueError, match="process_kind"):
        with vllm.configure_subprocess(cfg, 0, process_kind="scheduler", topology=dgx_topology(tmp_path)):
            pass


def test_unbound_when_the_gate_says_no(tmp_path):
    cfg = types.SimpleNamespace(parallel_config=parallel_config(numa_bind=None))
    with vllm.configure_subprocess(cfg, 0, topology=dgx_topology(tmp_path)):
        pass
    assert cfg.parallel_config.numa_bind is False
    assert cfg.parallel_config._numa_bind_auto is False


def _child_state(conn):
    import os

    from numabind import current_binding

    b = current_binding()
    conn.send((sorted(os.sched_getaffinity(0)), b.mem_policy, sorted(b.mem_nodes)))


@pytest.mark.kernel
def test_worker_is_bound_at_birth_without_numactl(tmp_path, monkeypatch):
    """A one-node machine like this host, with a GPU on node 0: the spawned worker starts on its plan."""
    import multiprocessing
    import os

    from .fakesys import one_node

    one_node(tmp_path, ncpus=2)
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=0)
    topo = discover(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))          # no numactl to fall back on
    cfg = types.SimpleNamespace(parallel_config=parallel_config(numa_bind_cpus=["1"], world_size=1))
    ctx = multiprocessing.get_context("spawn")
    parent_before = os.sched_getaffinity(0)
    recv, send = ctx.Pipe(duplex=False)
    with vllm.configure_subprocess(cfg, 0, topology=topo):
        p = ctx.Process(target=_child_state, args=(send,))
        p.start()
    state = recv.recv()
    p.join(30)
    assert p.exitcode == 0
    assert state == ([1], "bind", [0])
    assert os.sched_getaffinity(0) == parent_before
