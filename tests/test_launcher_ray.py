"""Ray: workers bound to the node of the GPUs Ray assigned them (numabind.integrations.ray).

tests/ray_driver.py, run as a child (Ray leaves threads and signal handlers in
its driver process), starts a real local cluster (``ray.init(num_cpus=2,
num_gpus=2)``), runs GPU actors, GPU tasks and ``bind_actor`` actors, and shuts
it down. Its workers discover a fake two-node GPU machine whose CPU ids are
this host's (tests/launchers.py), passed in the runtime environment as
``NUMABIND_FSROOT``, so their bindings are real. ``numabind.integrations.ray``
itself never imports Ray until it is used, so the in-process tests below run
with a stand-in for ``ray.get_gpu_ids``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
import types

import pytest

from numabind.errors import BindError, NumabindError, PlanError
from numabind.integrations import ray as numa_ray
from tests.launchers import host_gpu_machine, needs, needs_two_cpus
from tests.kernel import ROOT

kernel = pytest.mark.kernel
pytestmark = needs_two_cpus
needs_ray = needs(importlib.util.find_spec("ray") is not None,
                  "Ray is not installed (pip install 'numabind[ray]'; scripts/setup.sh --test)")
TIMEOUT = 300


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    return host_gpu_machine(tmp_path_factory.mktemp("gpu-machine"))


@pytest.fixture(scope="module")
def cluster_run(machine):
    """What the workers of one real local cluster reported (tests/ray_driver.py)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NUMABIND_", "_NUMABIND_", "RAY_")) and k != "CUDA_VISIBLE_DEVICES"}
    env["PYTHONPATH"] = ROOT
    out = subprocess.run([sys.executable, "-m", "tests.ray_driver", machine.root], capture_output=True, text=True,
                         env=env, timeout=TIMEOUT, cwd=ROOT)
    assert out.returncode == 0, f"ray driver exited {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


@kernel
@needs_ray
def test_setup_hook_binds_each_gpu_actor_to_its_gpus_node(cluster_run, machine):
    by_gpu = {tuple(r["gpus"]): r for r in cluster_run["actors"]}
    assert sorted(by_gpu) == [("0",), ("1",)]                 # alive together: one GPU each
    for (gpu,), r in by_gpu.items():
        assert r["cpus"] == sorted(machine.node_cpus[int(gpu)])
        assert r["bound"] == r["cpus"]


@kernel
@needs_ray
def test_setup_hook_binds_gpu_tasks(cluster_run, machine):
    assert len(cluster_run["tasks"]) == 3
    for r in cluster_run["tasks"]:
        assert len(r["gpus"]) == 1
        assert r["cpus"] == sorted(machine.node_cpus[int(r["gpus"][0])])


@kernel
@needs_ray
def test_bind_actor_applies_the_actors_own_plan(cluster_run, machine):
    got = cluster_run["decorated"]
    assert sorted(r["tag"] for r in got) == ["a0", "a1"]
    for r in got:
        # socket: the whole package, not narrowed to the node the hook bound the worker to first
        assert r["cpus"] == r["actor_bound"] == sorted(machine.all_cpus)


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


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("error", [NumabindError("refused"), BindError(1, "sched_setaffinity refused"),
                                   OSError(5, "I/O error")], ids=["NumabindError", "BindError", "OSError"])
@pytest.mark.parametrize("gpus", [[], ["0"]], ids=["no-gpu-now", "gpu"])
def test_lenient_worker_binder_lets_nothing_escape_into_ray(machine, monkeypatch, caplog, error, gpus, strict):
    """Issue 25 #13: both branches (no GPU now: put the birth binding back; GPUs: bind to them) keep a
    failure inside the hook when lenient (a WARNING, no report), and raise it when strict."""
    import numabind.bind as bind_mod

    ids = ["1"]
    monkeypatch.setattr(numa_ray, "_ray", lambda: types.SimpleNamespace(get_gpu_ids=lambda: ids))
    monkeypatch.setenv("NUMABIND_FSROOT", machine.root)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    binder = numa_ray._WorkerBinder("node", None, strict=strict)
    binder.bound = ("1",)              # bound before: the next assignment differs
    ids[:] = gpus

    def refuse(plan, strict=None, **kw):
        raise error

    monkeypatch.setattr(bind_mod, "bind_current", refuse)
    with caplog.at_level(logging.WARNING, logger="numabind"):
        if strict:
            with pytest.raises(type(error)):
                binder.update()
            return
        binder.update()
    assert binder.report is None and binder.bound == (tuple(gpus) or None)
    assert any(r.levelno == logging.WARNING and str(error) in r.getMessage() for r in caplog.records)


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


def test_a_worker_born_on_the_other_node_is_planned_by_the_ranks_rule(machine, monkeypatch):
    """Issue 42 §3: the CPUs a worker was born on are replaced (the cpuset is the limit);
    within_affinity=True keeps it inside them, and then never binds memory where it cannot run."""
    monkeypatch.setenv("NUMABIND_FSROOT", machine.root)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    born = machine.node_cpus[0]                                  # the raylet left the worker on node 0
    plan = numa_ray.plan_for_worker("node", "bind", gpu_ids=["1"], env=dict(os.environ), within=born)
    assert plan.cpus == machine.node_cpus[1] and plan.mem_nodes == {1}
    assert "replaces it as numactl does" in plan.reason
    inside = numa_ray.plan_for_worker("node", "bind", gpu_ids=["1"], env=dict(os.environ), within=born,
                                      within_affinity=True)
    assert inside.cpus is None and (inside.mem_policy, inside.mem_nodes) == ("preferred", {0})
    with pytest.raises(PlanError, match="srun --cpu-bind=none"):
        numa_ray.plan_for_worker("node", "bind", gpu_ids=["1"], env=dict(os.environ), within=born,
                                 within_affinity=True, strict=True)
    env = numa_ray.runtime_env(within_affinity=True)
    assert env["env_vars"]["_NUMABIND_RAY_WITHIN_AFFINITY"] == "1"
    assert "_NUMABIND_RAY_WITHIN_AFFINITY" not in numa_ray.runtime_env()["env_vars"]


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


# -- RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES (issue 29 §3) ----------------------------------------------------


@pytest.mark.parametrize("value", ["1", "true", "TRUE"])
def test_plan_for_worker_under_noset_uses_the_physical_ids_ray_assigned(machine, monkeypatch, value):
    """Ray leaves CUDA_VISIBLE_DEVICES alone, so both GPUs stay visible and Ray's id is the physical one: the
    worker with id 1 is planned on GPU 1's node (not refused as "cannot tell which is which")."""
    monkeypatch.setenv("NUMABIND_FSROOT", machine.root)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv(numa_ray.NOSET_VAR, value)
    for gpu in (1, 0):
        plan = numa_ray.plan_for_worker("node", "bind", gpu_ids=[gpu], env=dict(os.environ))
        assert plan.cpus == machine.node_cpus[gpu] and plan.mem_nodes == {gpu}


def test_plan_for_worker_under_noset_maps_ids_through_the_nodes_visible_list(machine, monkeypatch):
    """Ray started under CUDA_VISIBLE_DEVICES=1: its id "1" names physical GPU 1, which the worker sees as
    visible GPU 0; a UUID id works too; an id no visible GPU has is a PlanError naming them."""
    from tests.fakegpu import nv_uuid

    monkeypatch.setenv("NUMABIND_FSROOT", machine.root)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv(numa_ray.NOSET_VAR, "1")
    plan = numa_ray.plan_for_worker("node", "bind", gpu_ids=["1"], env=dict(os.environ))
    assert plan.cpus == machine.node_cpus[1] and plan.mem_nodes == {1}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", nv_uuid(1))
    by_uuid = numa_ray.plan_for_worker("node", "bind", gpu_ids=[nv_uuid(1)], env=dict(os.environ))
    assert by_uuid.cpus == machine.node_cpus[1]
    with pytest.raises(PlanError, match=r"Ray's GPU id '0' is physical.*visible: 0 \(physical 1"):
        numa_ray.plan_for_worker(gpu_ids=["0"], env=dict(os.environ))


def test_noset_off_keeps_the_refusal(machine, monkeypatch):
    """Only "1"/"true" switch Ray's behaviour (as Ray reads the variable): "0" still means Ray set the devices."""
    monkeypatch.setenv("NUMABIND_FSROOT", machine.root)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv(numa_ray.NOSET_VAR, "0")
    with pytest.raises(PlanError, match="cannot tell which is which"):
        numa_ray.plan_for_worker(gpu_ids=["1"], env=dict(os.environ))


@kernel
def test_worker_binder_under_noset_binds_to_the_physical_gpus_node(machine, monkeypatch):
    """The hook path: CUDA_VISIBLE_DEVICES never set, Ray's ids 1 then 0 rebind the worker to each node."""
    ids: list[list[str]] = [[]]
    monkeypatch.setattr(numa_ray, "_ray", lambda: types.SimpleNamespace(get_gpu_ids=lambda: ids[0]))
    monkeypatch.setenv("NUMABIND_FSROOT", machine.root)
    monkeypatch.delenv("NUMABIND_STRICT", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv(numa_ray.NOSET_VAR, "1")
    birth = os.sched_getaffinity(0)
    binder = numa_ray._WorkerBinder("node", None, strict=True)
    try:
        for gpu in ("1", "0"):
            ids[0] = [gpu]
            binder.update()
            assert os.sched_getaffinity(0) == machine.node_cpus[int(gpu)]
    finally:
        ids[0] = []
        binder.update()
    assert os.sched_getaffinity(0) == birth


def test_ray_module_names_the_hooks_it_depends_on():
    doc = numa_ray.__doc__
    assert "ray._private.utils.set_visible_accelerator_ids" in doc and "no public callback" in doc
    assert "worker_process_setup_hook" in doc and numa_ray.NOSET_VAR in doc
