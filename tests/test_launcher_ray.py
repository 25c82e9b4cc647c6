"""Ray: workers bound to the node of the GPUs Ray assigned them (numabind.integrations.ray).

A real local cluster (``ray.init(num_cpus=2, num_gpus=2)``) is started for
this module and shut down after it. Its workers discover a fake two-node GPU
machine whose CPU ids are this host's (tests/launchers.py), passed in the
runtime environment as ``NUMABIND_FSROOT``, so their bindings are real.
"""

from __future__ import annotations

import os
import types

import pytest

from numabind.errors import PlanError
from tests.launchers import host_gpu_machine, usable_cpus
from tests.test_bind import ROOT, restore_process  # noqa: F401  (autouse: process state put back)

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'numabind[ray]'; scripts/setup.sh --test)")

from numabind.integrations import ray as numa_ray  # noqa: E402

kernel = pytest.mark.kernel
pytestmark = pytest.mark.skipif(len(usable_cpus()) < 2, reason="a two-node fake machine needs two usable CPUs")
TIMEOUT = 180


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    return host_gpu_machine(tmp_path_factory.mktemp("gpu-machine"))


@pytest.fixture(scope="module")
def cluster(machine):
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "CUDA_VISIBLE_DEVICES", "NUMABIND_FSROOT")}
    os.environ["RAY_AUTH_MODE"] = "disabled"         # a throwaway local cluster: no token written to $HOME
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    env = numa_ray.runtime_env(mode="node", policy=None,
                               env_vars={"NUMABIND_FSROOT": machine.root, "PYTHONPATH": ROOT})
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, runtime_env=env, logging_level="ERROR")
    try:
        yield ray
    finally:
        ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _probe() -> dict:
    report = numa_ray.last_report()
    return {"gpus": [str(g) for g in ray.get_gpu_ids()], "cpus": sorted(os.sched_getaffinity(0)),
            "bound": None if report is None else sorted(report.applied.cpus), "pid": os.getpid()}


@ray.remote(num_gpus=1)
class Plain:
    """No decorator: only the setup hook binds it."""

    def probe(self) -> dict:
        return _probe()


@ray.remote(num_gpus=1)
@numa_ray.bind_actor(mode="socket", policy=None)
class Socketed:
    """Its own plan: the package of its GPU (both fake nodes), wider than the hook's node plan."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def probe(self) -> dict:
        report = self.numabind_report()
        return {**_probe(), "tag": self.tag, "actor_bound": None if report is None else sorted(report.applied.cpus)}


@ray.remote(num_gpus=1)
def gpu_task() -> dict:
    return _probe()


@kernel
def test_setup_hook_binds_each_gpu_actor_to_its_gpus_node(cluster, machine):
    actors = [Plain.remote() for _ in range(2)]             # alive together: one GPU each
    got = ray.get([a.probe.remote() for a in actors], timeout=TIMEOUT)
    by_gpu = {tuple(r["gpus"]): r for r in got}
    assert sorted(by_gpu) == [("0",), ("1",)]
    for (gpu,), r in by_gpu.items():
        assert r["cpus"] == sorted(machine.node_cpus[int(gpu)])
        assert r["bound"] == r["cpus"]
    for a in actors:
        ray.kill(a)


@kernel
def test_setup_hook_binds_gpu_tasks(cluster, machine):
    got = ray.get([gpu_task.remote() for _ in range(3)], timeout=TIMEOUT)
    for r in got:
        assert len(r["gpus"]) == 1
        assert r["cpus"] == sorted(machine.node_cpus[int(r["gpus"][0])])


@kernel
def test_bind_actor_applies_the_actors_own_plan(cluster, machine):
    actors = [Socketed.remote(f"a{i}") for i in range(2)]
    got = ray.get([a.probe.remote() for a in actors], timeout=TIMEOUT)
    assert sorted(r["tag"] for r in got) == ["a0", "a1"]
    for r in got:
        # socket: the whole package, not narrowed to the node the hook bound the worker to first
        assert r["cpus"] == r["actor_bound"] == sorted(machine.all_cpus)
    for a in actors:
        ray.kill(a)


# ------------------------------------------------------------------ the worker binder, in this process
@kernel
def test_worker_binder_follows_ray_assignments_and_restores_the_birth_binding(machine, monkeypatch):
    ids: list[list[str]] = [[]]
    monkeypatch.setattr(numa_ray, "_ray", lambda: types.SimpleNamespace(get_gpu_ids=lambda: ids[0]))
    monkeypatch.setenv("NUMABIND_FSROOT", machine.root)
    monkeypatch.delenv("NUMABIND_STRICT", raising=False)
    birth = os.sched_getaffinity(0)
    binder = numa_ray._WorkerBinder("node", None, strict=False)
    for gpu in ("1", "0"):
        ids[0] = [gpu]
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", gpu)     # what Ray sets with the ids
        binder.update()
        assert os.sched_getaffinity(0) == machine.node_cpus[int(gpu)]
        assert binder.report.applied.cpus == machine.node_cpus[int(gpu)]
    ids[0] = []
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    binder.update()
    assert os.sched_getaffinity(0) == birth


def test_plan_for_worker_uses_the_visible_gpus(machine, monkeypatch):
    monkeypatch.setenv("NUMABIND_FSROOT", machine.root)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    plan = numa_ray.plan_for_worker("node", "bind", gpu_ids=["1"], env=dict(os.environ))
    assert plan.cpus == machine.node_cpus[1] and plan.mem_nodes == {1}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    both = numa_ray.plan_for_worker("node", "preferred", gpu_ids=["0", "1"], env=dict(os.environ))
    assert both.cpus == machine.all_cpus
    assert (both.mem_policy, both.mem_nodes) == ("preferred-many", {0, 1})
    with pytest.raises(PlanError, match="assigned no GPU"):
        numa_ray.plan_for_worker(gpu_ids=[], env=dict(os.environ))
    with pytest.raises(PlanError, match="Ray assigned 1 GPU"):
        numa_ray.plan_for_worker(gpu_ids=["0"], env=dict(os.environ))


def test_runtime_env_names_the_hook_and_checks_its_arguments():
    env = numa_ray.runtime_env("exclusive", "preferred", strict=True, env_vars={"A": "1"}, pip=["x"])
    assert env["worker_process_setup_hook"] == "numabind.integrations.ray.setup_hook"
    assert env["env_vars"] == {"A": "1", "_NUMABIND_RAY_MODE": "exclusive", "_NUMABIND_RAY_POLICY": "preferred",
                               "NUMABIND_STRICT": "1"}
    assert env["pip"] == ["x"]
    with pytest.raises(PlanError, match="mode 'nodes'"):
        numa_ray.runtime_env("nodes")
    with pytest.raises(PlanError):
        numa_ray.bind_actor(policy="membind")
