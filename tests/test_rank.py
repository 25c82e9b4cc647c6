"""Local ranks: launcher variables, the rank's GPU, its plan, the CLI's --gpu-from-rank.

Pure tests plan on fake machines from tests/fakesys.py and tests/fakegpu.py
with an explicit environment; the kernel tests bind this process (or a
child) on a fake machine built from this host's CPUs (tests/launchers.py).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numabind
from numabind import rank as rank_module
from numabind._fs import FsReader
from numabind.cli import main
from numabind.errors import NumabindError, PlanError
from numabind.rank import LAUNCHERS, local_rank, local_world_size, place_rank, plan_for_rank, rank_gpu
from numabind.strategies import plan_for_gpu
from numabind.topology import discover_from
from tests.fakegpu import add_nvidia_gpu, nv_uuid
from tests.fakesys import FakeMachine, snc, two_sockets
from tests.launchers import TWO_CPUS, host_gpu_machine, json_lines, numabind_command, report_command
from tests.kernel import ROOT, run_main

kernel = pytest.mark.kernel

RANK_VARS = [lch.rank_var for lch in LAUNCHERS]
SIZE_VARS = [v for lch in LAUNCHERS for v in lch.size_vars]
LAUNCH_ENV = RANK_VARS + SIZE_VARS + ["SLURM_NODEID", "NUMABIND_LOCAL_RANK", "NUMABIND_LOCAL_WORLD_SIZE",
                                      "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                                      "ZE_AFFINITY_MASK", "CUDA_DEVICE_ORDER", "NUMABIND_GPU_VENDOR"]


@pytest.fixture(autouse=True)
def clean_launch_env(monkeypatch):
    """This process's own launcher variables (a CI job under Slurm) must not leak into the tests."""
    for var in LAUNCH_ENV:
        monkeypatch.delenv(var, raising=False)


# ------------------------------------------------------------------ machines
def eight_gpus(root, *, by_node=(0, 0, 1, 1, 2, 2, 3, 3)):
    """SNC: 2 sockets x 2 nodes x 4 cores x 2 threads (node n: CPUs 4n-4n+3 and 16+4n-16+4n+3); 8 GPUs."""
    m = snc(root, sockets=2, nodes_per_socket=2, cores_per_node=4, smt=True)
    for i, node in enumerate(by_node):
        add_nvidia_gpu(root, f"0000:{0x10 + i:02x}:00.0", numa_node=node, minor=i, uuid=nv_uuid(i))
    return m


def topo_of(root, env):
    return discover_from(FsReader(str(root)), env=env)


def env_of(**values) -> dict[str, str]:
    return {k: str(v) for k, v in values.items()}


def node_cpus(topo, node):
    return topo.nodes[node].cpus


def cores_of(topo, cpus):
    """``cpus`` grouped by physical core, ordered by lowest CPU."""
    groups = {frozenset(topo.cpus[c].siblings) & cpus for c in cpus}
    return sorted(groups, key=min)


# ------------------------------------------------------------------ local rank
@pytest.mark.parametrize("var", RANK_VARS)
def test_each_launchers_rank_variable(var):
    assert local_rank({var: "3"}) == (3, var)


def test_rank_variables_are_read_in_the_documented_order():
    env = {var: str(i + 1) for i, var in enumerate(RANK_VARS)}
    for i, var in enumerate(RANK_VARS):
        assert local_rank(env) == (i + 1, var)
        del env[var]


def test_numabind_local_rank_overrides_the_launcher():
    assert local_rank({"LOCAL_RANK": "1", "NUMABIND_LOCAL_RANK": "5"}) == (5, "NUMABIND_LOCAL_RANK")


def test_no_rank_is_an_error_never_rank_0():
    with pytest.raises(NumabindError) as exc:
        local_rank({"RANK": "0", "WORLD_SIZE": "2"})   # global ranks are not local ranks
    msg = str(exc.value)
    for var in RANK_VARS + ["NUMABIND_LOCAL_RANK"]:
        assert var in msg


@pytest.mark.parametrize("value", ["", "-1", "+1", "1.0", " 1", "1 ", "0x1", "1e3", "\u0661", "\u00b2",
                                   "1234567", "one"])
def test_malformed_rank_is_an_error_naming_it(value):
    with pytest.raises(NumabindError) as exc:
        local_rank({"SLURM_LOCALID": value})
    assert "SLURM_LOCALID" in str(exc.value)
    assert "ASCII digits" in str(exc.value)


def test_a_malformed_first_variable_is_not_skipped_for_a_later_one():
    with pytest.raises(NumabindError, match="LOCAL_RANK"):
        local_rank({"LOCAL_RANK": "x", "SLURM_LOCALID": "1"})


# ------------------------------------------------------------------ local world size
@pytest.mark.parametrize("rank_var,size_var", [(lch.rank_var, lch.size_vars[-1]) for lch in LAUNCHERS])
def test_each_launchers_size_variable(rank_var, size_var):
    assert local_world_size({rank_var: "0", size_var: "4"}) == (4, size_var)


@pytest.mark.parametrize("value,node,expected", [
    ("2(x3),1", 0, 2), ("2(x3),1", 2, 2), ("2(x3),1", 3, 1),
    ("1,4(x2),2", 0, 1), ("1,4(x2),2", 2, 4), ("1,4(x2),2", 3, 2),
    ("8", 5, 8), ("4(x2)", 1, 4),
])
def test_slurm_compressed_tasks_per_node(value, node, expected):
    env = {"SLURM_LOCALID": "0", "SLURM_STEP_TASKS_PER_NODE": value, "SLURM_NODEID": str(node)}
    size, source = local_world_size(env)
    assert size == expected
    assert "SLURM_STEP_TASKS_PER_NODE" in source


def test_slurm_uniform_list_needs_no_node_id():
    assert local_world_size({"SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": "4(x16)"}) == (4, "SLURM_TASKS_PER_NODE")


def test_slurm_step_layout_wins_over_the_jobs():
    env = {"SLURM_LOCALID": "0", "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "8",
           "SLURM_NTASKS_PER_NODE": "8"}
    assert local_world_size(env) == (2, "SLURM_STEP_TASKS_PER_NODE")


def test_slurm_uneven_list_without_node_id_falls_to_ntasks_per_node_or_unknown():
    env = {"SLURM_LOCALID": "0", "SLURM_STEP_TASKS_PER_NODE": "2(x3),1"}
    size, why = local_world_size(env)
    assert size is None and "SLURM_NODEID" in why
    env["SLURM_NTASKS_PER_NODE"] = "2"
    assert local_world_size(env) == (2, "SLURM_NTASKS_PER_NODE")


@pytest.mark.parametrize("value", ["2(x", "2(x)", "2(xa)", "a", "2(x3)1", "", "2,,1", "2(x3),-1"])
def test_slurm_malformed_lists_are_errors(value):
    with pytest.raises(NumabindError, match="SLURM_TASKS_PER_NODE"):
        local_world_size({"SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": value, "SLURM_NODEID": "0"})


def test_slurm_node_id_past_the_list_is_an_error():
    with pytest.raises(NumabindError, match="SLURM_NODEID=4"):
        local_world_size({"SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "4"})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 64), st.integers(1, 5)), min_size=1, max_size=6), st.data())
def test_slurm_list_entry_matches_its_expansion(entries, data):
    text = ",".join(f"{t}(x{r})" if r > 1 else str(t) for t, r in entries)
    expanded = [t for t, r in entries for _ in range(r)]
    node = data.draw(st.integers(0, len(expanded) - 1))
    size, _ = local_world_size({"SLURM_LOCALID": "0", "SLURM_STEP_TASKS_PER_NODE": text,
                                "SLURM_NODEID": str(node)})
    assert size == expanded[node]


def test_size_comes_from_the_launcher_that_gave_the_rank():
    # torchrun started by srun with one task per node: torchrun's workers are 8 per node, not Slurm's 1
    env = {"LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "8", "SLURM_LOCALID": "0", "SLURM_STEP_TASKS_PER_NODE": "1"}
    assert local_world_size(env) == (8, "LOCAL_WORLD_SIZE")
    del env["LOCAL_WORLD_SIZE"]
    size, why = local_world_size(env)
    assert size is None and "LOCAL_WORLD_SIZE" in why


def test_size_override_and_zero():
    assert local_world_size({"LOCAL_RANK": "0", "NUMABIND_LOCAL_WORLD_SIZE": "3"}) == (3, "NUMABIND_LOCAL_WORLD_SIZE")
    with pytest.raises(NumabindError, match="0 ranks"):
        local_world_size({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "0"})


# ------------------------------------------------------------------ the rank's GPU and plan
def test_node_mode_each_rank_gets_its_gpus_plan(tmp_path):
    eight_gpus(tmp_path)
    env = env_of(LOCAL_WORLD_SIZE=8)
    topo = topo_of(tmp_path, env)
    for r in range(8):
        placed = place_rank(topology=topo, env={**env, "LOCAL_RANK": str(r)})
        assert placed.gpu == r and placed.rank == r and placed.rank_source == "LOCAL_RANK"
        assert placed.plan == plan_for_gpu(r, topology=topo)
        assert placed.plan.cpus == node_cpus(topo, r // 2)
        assert placed.plan.mem_nodes == {r // 2}
        assert placed.warnings == ()
        assert "local rank %d (LOCAL_RANK)" % r in placed.plan.reason
        assert placed.to_dict()["local_world_size_source"] == "LOCAL_WORLD_SIZE"


def test_rank_without_a_gpu_and_no_gpu_are_errors(tmp_path):
    eight_gpus(tmp_path, by_node=(0, 1))
    topo = topo_of(tmp_path, {})
    with pytest.raises(PlanError, match=r"local rank 2 \(from LOCAL_RANK\) has no GPU: 2 GPUs are visible"):
        place_rank(topology=topo, env={"LOCAL_RANK": "2"})
    none = topo_of(tmp_path, {"CUDA_VISIBLE_DEVICES": ""})
    with pytest.raises(PlanError, match="no GPU is visible"):
        rank_gpu(none, 0, "LOCAL_RANK")


def test_rank_not_below_the_local_world_size_is_an_error(tmp_path):
    eight_gpus(tmp_path)
    with pytest.raises(NumabindError, match="not below the local world size 2"):
        place_rank(topology=topo_of(tmp_path, {}), env={"LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "2"})


def test_ranks_index_the_visible_gpus(tmp_path):
    eight_gpus(tmp_path)
    env = {"CUDA_VISIBLE_DEVICES": "6,7,0,1"}
    topo = topo_of(tmp_path, env)
    placed = place_rank(topology=topo, env={**env, "LOCAL_RANK": "1"})
    assert placed.gpu == 1 and placed.numa_node == 3            # visible 1 is physical GPU 7
    assert placed.plan.cpus == node_cpus(topo, 3)
    assert "indexes the 4 visible GPUs" in placed.gpu_rule


def test_one_visible_gpu_per_rank_is_that_gpu(tmp_path):
    eight_gpus(tmp_path)
    env = {"CUDA_VISIBLE_DEVICES": "5", "SLURM_LOCALID": "5", "SLURM_STEP_TASKS_PER_NODE": "8"}
    topo = topo_of(tmp_path, env)
    placed = place_rank(topology=topo, env=env)
    assert placed.gpu == 0 and placed.numa_node == 2
    assert placed.plan.cpus == node_cpus(topo, 2)
    assert placed.gpu_rule == "the launcher gave this rank one visible GPU"
    assert placed.rank_source == "SLURM_LOCALID"


def test_exclusive_splits_the_node_between_the_ranks_that_share_it(tmp_path):
    eight_gpus(tmp_path, by_node=(0, 0, 0, 0, 1, 1, 1, 1))
    topo = topo_of(tmp_path, {})
    cores = cores_of(topo, node_cpus(topo, 0))                  # 4 cores of 2 threads
    two = [place_rank("exclusive", topology=topo, env=env_of(LOCAL_RANK=r, LOCAL_WORLD_SIZE=2)).plan
           for r in range(2)]
    assert [p.cpus for p in two] == [cores[0] | cores[1], cores[2] | cores[3]]
    # with no local world size the node is shared among its four visible GPUs, as plan_for_gpu does
    unknown = place_rank("exclusive", topology=topo, env=env_of(LOCAL_RANK=1))
    assert unknown.plan.cpus == cores[1] == plan_for_gpu(1, "exclusive", topo).cpus
    assert "local world size is unknown" in unknown.plan.reason


_MACHINES: dict = {}   # GPU layout -> topology, shared by the examples below


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(by_node=st.lists(st.integers(0, 3), min_size=1, max_size=8), data=st.data())
def test_exclusive_ranks_never_share_a_cpu_and_cover_their_nodes(tmp_path_factory, by_node, data):
    # exclusive needs a core per rank: at most 4 ranks on a node of 4 cores
    by_node = [n for i, n in enumerate(by_node) if by_node[:i].count(n) < 4]
    key = tuple(by_node)
    if key not in _MACHINES:
        root = tmp_path_factory.mktemp("excl")
        eight_gpus(root, by_node=key)
        _MACHINES[key] = topo_of(root, {})
    topo = _MACHINES[key]
    size = data.draw(st.integers(1, len(by_node)))
    plans = [place_rank("exclusive", topology=topo, env=env_of(LOCAL_RANK=r, LOCAL_WORLD_SIZE=size)).plan
             for r in range(size)]
    for r, p in enumerate(plans):
        assert p.cpus <= node_cpus(topo, by_node[r])
        for q in plans[r + 1:]:
            assert not p.cpus & q.cpus
    for node in set(by_node[:size]):
        assert frozenset().union(*(p.cpus for r, p in enumerate(plans) if by_node[r] == node)) == \
            node_cpus(topo, node)


def test_exclusive_with_one_gpu_per_rank_shares_among_the_machines_gpus(tmp_path):
    eight_gpus(tmp_path, by_node=(0, 0, 0, 0, 1, 1, 1, 1))
    every = topo_of(tmp_path, {})
    for physical in (2, 5):
        env = {"CUDA_VISIBLE_DEVICES": str(physical), "SLURM_LOCALID": "0", "SLURM_STEP_TASKS_PER_NODE": "8"}
        placed = place_rank("exclusive", topology=topo_of(tmp_path, env), env=env)
        assert placed.plan.cpus == plan_for_gpu(physical, "exclusive", every).cpus
        assert len(placed.plan.cpus) == 2                        # one core of the node's four
        assert "this process has its own GPU(s)" in placed.plan.reason


def test_exclusive_refuses_ranks_that_share_gpus(tmp_path):
    eight_gpus(tmp_path, by_node=(0, 1))
    env = {"CUDA_VISIBLE_DEVICES": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "3"}
    topo = topo_of(tmp_path, env)
    with pytest.raises(PlanError, match="3 local ranks .* share the machine's 2 GPUs"):
        place_rank("exclusive", topology=topo, env=env)
    assert place_rank("node", topology=topo, env=env).plan.cpus == node_cpus(topo, 0)


def test_core_complex_and_socket_follow_plan_for_gpu(tmp_path):
    eight_gpus(tmp_path)
    topo = topo_of(tmp_path, {})
    for mode in ("socket", "core-complex", "pct"):
        for r in (0, 5):
            placed = place_rank(mode, "preferred", topology=topo, env=env_of(LOCAL_RANK=r, LOCAL_WORLD_SIZE=8))
            assert placed.plan == plan_for_gpu(r, mode, topo, policy="preferred")


# ------------------------------------------------------------------ one rule for a launcher's binding (issue 42 §3)
UNBIND = ("srun --cpu-bind=none", "mpirun --bind-to none")


def test_the_cpuset_is_the_limit_and_the_plan_replaces_the_launchers_affinity(tmp_path, caplog):
    """srun's default task binding or mpirun --bind-to core: the launcher's CPUs are where the rank starts;
    the plan replaces them, as numactl does, with no warning, and the reasons say which rule applied."""
    eight_gpus(tmp_path)
    topo = topo_of(tmp_path, {})
    launcher = frozenset(sorted(node_cpus(topo, 1))[:2])      # the launcher bound rank 0 to node 1's CPUs
    with caplog.at_level(logging.WARNING, logger="numabind.rank"):
        placed = place_rank(topology=topo, env=env_of(LOCAL_RANK=0), within=launcher, strict=True)
    assert placed.plan.cpus == node_cpus(topo, 0) and placed.plan.mem_nodes == {0}
    assert placed.warnings == () and not caplog.records
    assert placed.launcher_cpus == launcher and placed.limit_cpus == topo.allowed_cpus
    assert placed.within_affinity is False
    assert placed.cpu_rule.startswith("the cpuset is the limit") and "replaces it as numactl does" in placed.cpu_rule
    assert placed.cpu_rule in placed.reasons and placed.cpu_rule in placed.plan.reason
    got = placed.to_dict()
    assert (got["within_affinity"], got["cpu_rule"], got["launcher_cpus"]) == \
        (False, placed.cpu_rule, numabind.format_cpulist(launcher))
    # the same plan as the GPU's own (numabind plan --gpu 0), and as without a launcher binding
    assert placed.plan.cpus == plan_for_gpu(0, topology=topo).cpus
    assert place_rank(topology=topo, env=env_of(LOCAL_RANK=0)).plan.cpus == placed.plan.cpus


def test_within_affinity_narrows_to_the_launchers_cpus_with_a_warning(tmp_path, caplog):
    eight_gpus(tmp_path)
    topo = topo_of(tmp_path, {})
    node0 = sorted(node_cpus(topo, 0))
    launcher = {node0[0], node0[1], min(node_cpus(topo, 2))}     # two of node 0's CPUs and one of node 2's
    with caplog.at_level(logging.WARNING, logger="numabind.rank"):
        placed = place_rank(topology=topo, env=env_of(LOCAL_RANK=0), within=launcher, strict=False,
                            within_affinity=True)
    assert placed.plan.cpus == {node0[0], node0[1]}
    assert placed.plan.mem_nodes == {0}
    assert placed.launcher_cpus == placed.limit_cpus == frozenset(launcher)
    assert placed.within_affinity and placed.cpu_rule.startswith("--within-affinity: the plan stays inside")
    assert len(placed.warnings) == 1 and "outside the CPUs this process may use" in placed.warnings[0]
    assert any("narrowed to" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    with pytest.raises(PlanError, match="outside the CPUs this process may use") as exc:
        place_rank(topology=topo, env=env_of(LOCAL_RANK=0), within=launcher, strict=True, within_affinity=True)
    assert all(flag in str(exc.value) for flag in UNBIND) and "drop --within-affinity" in str(exc.value)
    with pytest.raises(PlanError):
        place_rank(topology=topo, env=env_of(LOCAL_RANK=0, NUMABIND_STRICT=1), within=launcher, within_affinity=True)


@pytest.mark.parametrize("strict", [True, "partial"])
def test_within_affinity_with_no_cpu_left_is_refused_in_strict_mode_naming_the_launcher_flag(tmp_path, strict):
    eight_gpus(tmp_path)
    topo = topo_of(tmp_path, {})
    with pytest.raises(PlanError) as exc:
        place_rank(topology=topo, env=env_of(LOCAL_RANK=0), within=node_cpus(topo, 1), strict=strict,
                   within_affinity=True)
    assert all(flag in str(exc.value) for flag in UNBIND), str(exc.value)


def test_within_affinity_with_no_cpu_left_never_binds_memory_to_a_node_it_cannot_run_on(tmp_path):
    """Lenient: the launcher's CPUs (node 1) are kept, so memory is preferred on node 1, not bound to the
    GPU's node 0 where the rank never runs (every page remote), and the warnings say so."""
    eight_gpus(tmp_path)
    topo = topo_of(tmp_path, {})
    placed = place_rank(topology=topo, env=env_of(LOCAL_RANK=0), within=node_cpus(topo, 1), strict=False,
                        within_affinity=True)
    assert placed.plan.cpus is None
    assert placed.plan.mem_policy == "preferred" and placed.plan.mem_nodes == {1}
    assert "left as the launcher set it" in placed.warnings[0]
    assert "memory not bind on node(s) 0" in placed.warnings[1] and "memory preferred on node(s) 1" in \
        placed.warnings[1]
    # launcher CPUs on two nodes: preferred-many over both; memory-policy None stays None
    two = place_rank(topology=topo, env=env_of(LOCAL_RANK=0), within=node_cpus(topo, 1) | node_cpus(topo, 2),
                     within_affinity=True)
    assert (two.plan.mem_policy, two.plan.mem_nodes) == ("preferred-many", {1, 2})
    none = place_rank(policy=None, topology=topo, env=env_of(LOCAL_RANK=0), within=node_cpus(topo, 1),
                      within_affinity=True)
    assert none.plan.cpus is None and none.plan.mem_policy is None


def test_within_affinity_narrowed_socket_plan_keeps_memory_where_the_rank_runs(tmp_path):
    eight_gpus(tmp_path)                          # GPU 2 on node 1; socket 0 = nodes 0-1
    topo = topo_of(tmp_path, {})
    placed = place_rank("socket", topology=topo, env=env_of(LOCAL_RANK=2), within=node_cpus(topo, 0),
                        within_affinity=True)
    assert placed.plan.cpus == node_cpus(topo, 0)
    assert placed.plan.mem_policy == "bind" and placed.plan.mem_nodes == {0}     # the package's nodes 0-1, less 1
    assert "memory not bind on node(s) 1" in placed.warnings[1]


def test_within_affinity_on_a_machine_whose_affinity_is_unknown_is_an_error(tmp_path):
    eight_gpus(tmp_path)
    topo = topo_of(tmp_path, {}).replace(affinity=None)
    with pytest.raises(PlanError, match="affinity is unknown"):
        place_rank(topology=topo, env=env_of(LOCAL_RANK=0), within_affinity=True)
    assert place_rank(topology=topo, env=env_of(LOCAL_RANK=0)).plan.cpus == node_cpus(topo, 0)


def test_exclusive_share_is_cut_before_the_launchers_narrowing(tmp_path):
    # Slurm gave this rank exactly its share: the share is not split again
    eight_gpus(tmp_path, by_node=(0, 0, 0, 0, 1, 1, 1, 1))
    topo = topo_of(tmp_path, {})
    share = plan_for_gpu(1, "exclusive", topo).cpus
    for within_affinity in (False, True):
        placed = place_rank("exclusive", topology=topo, env=env_of(LOCAL_RANK=1, LOCAL_WORLD_SIZE=4), within=share,
                            within_affinity=within_affinity)
        assert placed.plan.cpus == share and placed.warnings == ()


def test_a_replayed_cpuset_limits_the_shares(tmp_path):
    m = eight_gpus(tmp_path, by_node=(0, 0))
    node0 = sorted(m.nodes[0].cpus)
    m.set_cgroup2("/job", node0[:4], None).write()            # the dump's process may use 4 CPUs of node 0
    topo = topo_of(tmp_path, {})
    plans = [place_rank("exclusive", topology=topo, env=env_of(LOCAL_RANK=r, LOCAL_WORLD_SIZE=2)).plan
             for r in range(2)]
    assert frozenset().union(*(p.cpus for p in plans)) == frozenset(node0[:4])
    assert not plans[0].cpus & plans[1].cpus


def test_a_replayed_affinity_is_where_the_rank_starts_not_its_limit(tmp_path):
    """A dump's Cpus_allowed is the affinity its process was started with: replaced by the plan, as on the
    live machine; --within-affinity narrows the shares (cut from the cpuset) to it."""
    m = eight_gpus(tmp_path, by_node=(0, 0))
    node0 = sorted(m.nodes[0].cpus)
    m.set_status(node0[:4], None).write()                     # the dump's process was started on 4 CPUs of node 0
    topo = topo_of(tmp_path, {})
    assert topo.affinity == frozenset(node0[:4]) and topo.allowed_cpus > topo.affinity
    wide = [place_rank("exclusive", topology=topo, env=env_of(LOCAL_RANK=r, LOCAL_WORLD_SIZE=2)).plan
            for r in range(2)]
    assert frozenset().union(*(p.cpus for p in wide)) == frozenset(node0)
    inside = [place_rank("exclusive", topology=topo, env=env_of(LOCAL_RANK=r, LOCAL_WORLD_SIZE=2),
                         within_affinity=True).plan for r in range(2)]
    assert frozenset().union(*(p.cpus for p in inside)) == frozenset(node0[:4])
    assert not inside[0].cpus & inside[1].cpus


# ------------------------------------------------------------------ a GPU with no node
def no_node_machine(root):
    m = FakeMachine(root)
    m.add_node(0, range(0, 4)).add_node(1, range(4, 8))
    m.write()
    add_nvidia_gpu(root, "0000:1b:00.0", numa_node=-1, local_cpulist="")
    add_nvidia_gpu(root, "0000:9a:00.0", numa_node=1, minor=1, uuid=nv_uuid(1))


def test_gpu_without_a_node_leaves_the_rank_unbound_or_raises_in_strict_mode(tmp_path, caplog):
    no_node_machine(tmp_path)
    topo = topo_of(tmp_path, {})
    assert topo.gpus[0].numa_node is None
    with caplog.at_level(logging.WARNING, logger="numabind.rank"):
        placed = place_rank(topology=topo, env=env_of(LOCAL_RANK=0))
    assert placed.plan == numabind.Plan()
    assert placed.to_dict()["placed"] is False
    assert "has no NUMA node" in placed.warnings[0] and "left as the launcher started it" in placed.warnings[0]
    assert any("has no NUMA node" in r.getMessage() for r in caplog.records)
    with pytest.raises(PlanError, match="has no NUMA node"):
        place_rank(topology=topo, env=env_of(LOCAL_RANK=0), strict=True)
    assert place_rank(topology=topo, env=env_of(LOCAL_RANK=1)).plan.cpus == frozenset(range(4, 8))


def test_plan_for_rank_is_place_ranks_plan_and_public(tmp_path):
    eight_gpus(tmp_path)
    topo = topo_of(tmp_path, {})
    env = env_of(OMPI_COMM_WORLD_LOCAL_RANK=3, OMPI_COMM_WORLD_LOCAL_SIZE=8)
    assert numabind.plan_for_rank("exclusive", topology=topo, env=env) == \
        place_rank("exclusive", topology=topo, env=env).plan
    assert numabind.local_rank(env) == (3, "OMPI_COMM_WORLD_LOCAL_RANK")
    assert numabind.plan_for_rank is plan_for_rank


def test_discovery_follows_the_given_environment(tmp_path):
    eight_gpus(tmp_path)
    env = {"NUMABIND_FSROOT": str(tmp_path), "CUDA_VISIBLE_DEVICES": "7", "PMI_LOCAL_RANK": "0"}
    placed = place_rank(env=env)
    assert placed.numa_node == 3 and placed.pci_address == "0000:17:00.0"


# ------------------------------------------------------------------ optional dependencies
def test_importing_numabind_imports_neither_torch_nor_ray():
    code = ("import sys, numabind, numabind.rank, numabind.integrations, numabind.integrations.ray, "
            "numabind.cli; print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'ray'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------ the command line
def test_cli_plan_gpu_from_rank_json(capsys, monkeypatch, tmp_path):
    eight_gpus(tmp_path)
    monkeypatch.setenv("NUMABIND_FSROOT", str(tmp_path))
    monkeypatch.setenv("SLURM_LOCALID", "2")
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", "4(x2)")
    rc, out, _ = run_main(capsys, "plan", "--gpu-from-rank", "--mode", "exclusive", "--json")
    assert rc == 0
    got = json.loads(out)
    topo = topo_of(tmp_path, {})
    expected = place_rank("exclusive", topology=topo, env={"SLURM_LOCALID": "2", "SLURM_STEP_TASKS_PER_NODE": "4"})
    assert got["plan"]["cpus"] == numabind.format_cpulist(expected.plan.cpus)
    assert (got["local_rank"], got["local_rank_source"], got["local_world_size"], got["gpu"], got["numa_node"]) == \
        (2, "SLURM_LOCALID", 4, 2, 1)
    rc, out, _ = run_main(capsys, "plan", "--gpu-from-rank")
    assert rc == 0 and out.startswith("local rank 2 (SLURM_LOCALID) -> GPU 2 on node 1")


def test_cli_plan_gpu_from_rank_exit_1_when_not_placed(capsys, monkeypatch, tmp_path):
    no_node_machine(tmp_path)
    monkeypatch.setenv("NUMABIND_FSROOT", str(tmp_path))
    monkeypatch.setenv("LOCAL_RANK", "0")
    rc, out, _ = run_main(capsys, "plan", "--gpu-from-rank", "--json")
    assert rc == 1 and json.loads(out)["placed"] is False


def test_cli_plan_gpu_from_rank_excludes_gpu(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--gpu-from-rank", "--gpu", "0"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("extra,message", [
    (["--gpu", "0"], "--gpu and --gpu-from-rank both choose the GPU"),
    (["--membind", "0"], "--gpu-from-rank plans the CPUs and memory for the GPU"),
    (["--physcpubind", "0"], "cannot be combined with --physcpubind"),
])
def test_cli_run_gpu_from_rank_conflicts(capsys, extra, message):
    rc, _, err = run_main(capsys, "run", "--gpu-from-rank", *extra, "--", "true")
    assert rc == 2 and message in err


def test_cli_run_gpu_from_rank_without_a_rank(capsys):
    rc, _, err = run_main(capsys, "run", "--gpu-from-rank", "--", "true")
    assert rc == 1 and "no local rank in the environment" in err     # no plan: numabind run's exit 1
    for extra in ((), ("--json",)):                                   # plan says the same, with the same status
        rc, _, err = run_main(capsys, "plan", "--gpu-from-rank", *extra)
        assert rc == 1 and "no local rank in the environment" in err and err.count("numabind: error:") == 1


def test_cli_run_refuses_a_replayed_root_unless_asked(capsys, monkeypatch, tmp_path):
    eight_gpus(tmp_path)
    monkeypatch.setenv("NUMABIND_FSROOT", str(tmp_path))
    monkeypatch.setenv("LOCAL_RANK", "0")
    rc, _, err = run_main(capsys, "run", "--gpu-from-rank", "--", "true")
    assert rc == 2 and "replayed machine" in err
    rc, _, err = run_main(capsys, "run", "--gpu", "0", "--bind-replayed-root", "--", "true")
    assert rc == 2 and "replayed machine" in err              # the opt-in is for --gpu-from-rank only


# not a launcher test: a plain skip, NUMABIND_REQUIRE_LAUNCHERS aside
needs_two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason=TWO_CPUS)


@kernel
@needs_two_cpus
def test_cli_run_gpu_from_rank_binds_the_command(tmp_path):
    """Each rank bound for real to its GPU's CPUs, memory on a node this host has (issue 42 §1 refuses others)."""
    m = host_gpu_machine(tmp_path, on_host_nodes=True)
    for r in (0, 1):
        env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV}
        env.update(NUMABIND_FSROOT=str(tmp_path), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2", PYTHONPATH=ROOT)
        out = subprocess.run([*numabind_command(), "run", "--gpu-from-rank", "--bind-replayed-root", *m.mode_args,
                              "--json", "--", *report_command()], capture_output=True, text=True, env=env,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        assert json_lines(out.stdout)[0]["cpus"] == sorted(m.node_cpus[r])
        (report,) = json_lines(out.stderr)                    # read back from the kernel before the exec
        applied = numabind.Plan.from_text(report["applied"])
        assert (applied.mem_policy, applied.mem_nodes) == ("bind", {m.gpu_nodes[r]})


@kernel
@needs_two_cpus
def test_cli_run_gpu_from_rank_refuses_a_gpu_node_this_host_lacks(tmp_path):
    """A replayed rank whose GPU's node does not exist here is a PlanError naming the node (exit 1, the command
    never runs), lenient or strict (issue 42 §1); rank 0, on a node this host has, is bound."""
    from tests.kernel import MISSING_NODE
    from tests.launchers import host_nodes

    here = next(iter(host_nodes()))
    m = host_gpu_machine(tmp_path, node_ids=(here, MISSING_NODE))     # GPU 1 on a node this host lacks
    for r, extra in ((0, ["--lenient"]), (1, ["--lenient"]), (1, ["--strict"]), (1, [])):
        env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV}
        env.update(NUMABIND_FSROOT=str(tmp_path), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2", PYTHONPATH=ROOT)
        out = subprocess.run([*numabind_command(), "run", "--gpu-from-rank", "--bind-replayed-root", *extra, "--",
                              *report_command()], capture_output=True, text=True, env=env, timeout=60)
        if r == 0:
            assert out.returncode == 0, out.stderr
            assert json_lines(out.stdout)[0]["cpus"] == sorted(m.node_cpus[0])
            continue
        assert out.returncode == 1 and json_lines(out.stdout) == [], out.stderr
        assert f"NUMA nodes {MISSING_NODE} do not exist" in out.stderr and "numabind hardware" in out.stderr


@kernel
@needs_two_cpus
def test_bind_current_plan_for_rank_in_a_script(tmp_path, monkeypatch):
    m = host_gpu_machine(tmp_path)
    topo = discover_from(FsReader(str(tmp_path)), env={})
    report = numabind.bind_current(plan_for_rank(policy=None, topology=topo, env={"LOCAL_RANK": "1"}))
    assert os.sched_getaffinity(0) == m.node_cpus[1]
    assert report.applied.cpus == m.node_cpus[1]
    assert "local rank 1 (LOCAL_RANK)" in report.requested.reason


def test_module_docs_name_every_launcher_variable():
    doc = rank_module.__doc__
    for var in RANK_VARS + SIZE_VARS + ["NUMABIND_LOCAL_RANK", "NUMABIND_LOCAL_WORLD_SIZE", "SLURM_NODEID"]:
        assert f"``{var}``" in doc


def test_partial_strictness_narrows_but_refuses_an_empty_cpu_plan(tmp_path):
    eight_gpus(tmp_path)
    topo = topo_of(tmp_path, {})
    node0 = sorted(node_cpus(topo, 0))
    some = place_rank(topology=topo, env=env_of(LOCAL_RANK=0, NUMABIND_STRICT="partial"), within=node0[:2],
                      within_affinity=True)
    assert some.plan.cpus == frozenset(node0[:2]) and "narrowed to" in some.warnings[0]
    with pytest.raises(PlanError, match="srun --cpu-bind=none, mpirun --bind-to none"):
        place_rank(topology=topo, env=env_of(LOCAL_RANK=0), within=node_cpus(topo, 1), strict="partial",
                   within_affinity=True)


def test_cli_run_with_a_gpu_without_a_node_runs_unbound_or_not_at_all_when_strict(tmp_path):
    no_node_machine(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV and not k.startswith("NUMABIND_")}
    env.update(NUMABIND_FSROOT=str(tmp_path), LOCAL_RANK="0", PYTHONPATH=ROOT)
    argv = [*numabind_command(), "run", "--gpu-from-rank", "--bind-replayed-root"]
    out = subprocess.run([*argv, "--", *report_command()], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json_lines(out.stdout)[0]["cpus"] == sorted(os.sched_getaffinity(0))     # as it was started
    assert "has no NUMA node" in out.stderr and "left as the launcher started it" in out.stderr
    out = subprocess.run([*argv, "--strict", "--", *report_command()], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.returncode == 1 and json_lines(out.stdout) == []     # a binding that cannot be applied
    assert "has no NUMA node" in out.stderr


# ------------------------------------------------------------------ ranks without a GPU (issue 29 §2)
def _two_nodes(root):
    """2 nodes x 4 cores x 2 threads: node 0 CPUs 0-3,8-11, node 1 CPUs 4-7,12-15."""
    return two_sockets(root)


def _four_nodes(root):
    """SNC: 2 sockets x 2 nodes x 4 cores x 2 threads: node n CPUs 4n-4n+3,16+4n-16+4n+3."""
    return snc(root, sockets=2, nodes_per_socket=2, cores_per_node=4, smt=True)


def _eight_nodes(root):
    """SNC/NPS4: 2 sockets x 4 nodes x 2 cores x 2 threads: node n CPUs 2n-2n+1,16+2n-16+2n+1."""
    return snc(root, sockets=2, nodes_per_socket=4, cores_per_node=2, smt=True)


#: machine -> ranks -> [(cpus, memory nodes) of rank 0, 1, ...]: every plan written out.
CPU_RANK_PLANS = {
    _two_nodes: {
        1: [("0-15", "0-1")],
        2: [("0-3,8-11", "0"), ("4-7,12-15", "1")],
        4: [("0-1,8-9", "0"), ("2-3,10-11", "0"), ("4-5,12-13", "1"), ("6-7,14-15", "1")],
        8: [(f"{k},{k + 8}", str(k // 4)) for k in range(8)],
    },
    _four_nodes: {
        1: [("0-31", "0-3")],
        2: [("0-7,16-23", "0-1"), ("8-15,24-31", "2-3")],            # a socket each: memory on both its nodes
        4: [(f"{4 * n}-{4 * n + 3},{16 + 4 * n}-{19 + 4 * n}", str(n)) for n in range(4)],
        8: [(f"{2 * k}-{2 * k + 1},{16 + 2 * k}-{17 + 2 * k}", str(k // 2)) for k in range(8)],
    },
    _eight_nodes: {
        1: [("0-31", "0-7")],
        2: [("0-7,16-23", "0-3"), ("8-15,24-31", "4-7")],
        4: [(f"{4 * r}-{4 * r + 3},{16 + 4 * r}-{19 + 4 * r}", f"{2 * r}-{2 * r + 1}") for r in range(4)],
        8: [(f"{2 * n}-{2 * n + 1},{16 + 2 * n}-{17 + 2 * n}", str(n)) for n in range(8)],
    },
}


@pytest.mark.parametrize("machine", list(CPU_RANK_PLANS), ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_cpu_ranks_get_their_share_of_the_machine(tmp_path, machine, ranks):
    machine(tmp_path)
    topo = topo_of(tmp_path, {})
    assert topo.gpus == ()
    plans = []
    for r in range(ranks):
        placed = place_rank(topology=topo, env=env_of(LOCAL_RANK=r, LOCAL_WORLD_SIZE=ranks))
        assert placed.device == "cpu" and placed.gpu is None and placed.warnings == ()
        assert placed.gpu_rule == "no GPU is visible: a CPU rank"
        assert placed.cpu_nodes == tuple(sorted(placed.plan.mem_nodes))
        plans.append((numabind.format_cpulist(placed.plan.cpus), numabind.format_cpulist(placed.plan.mem_nodes)))
        assert placed.plan.mem_policy == "bind" and placed.plan.migrate is False
        assert placed.describe().startswith(f"local rank {r} (LOCAL_RANK) -> CPU rank on node")
    assert plans == CPU_RANK_PLANS[machine][ranks]
    # the same plans by plan_for_rank(device="cpu"), and every core whole (SMT siblings together)
    for r, (cpus, _) in enumerate(plans):
        plan = plan_for_rank(topology=topo, env=env_of(LOCAL_RANK=r, LOCAL_WORLD_SIZE=ranks), device="cpu")
        assert numabind.format_cpulist(plan.cpus) == cpus
        assert all(topo.cpus[c].siblings <= plan.cpus for c in plan.cpus)


@pytest.mark.parametrize("ranks, expected", [
    (1, ["0-11"]),                                  # the node's performance CPUs, not its efficiency cores
    (2, ["0-5", "6-11"]),                           # 6 performance cores split in two
    (6, [f"{2 * r}-{2 * r + 1}" for r in range(6)]),  # one performance core (both threads) each
    (8, ["0-1", "2-3", "4-5", "6-7", "8-9", "10-11", "12", "13"]),   # too few for one each: every core split
])
def test_cpu_ranks_of_a_hybrid_cpu_keep_its_performance_cores(tmp_path, ranks, expected):
    from tests.fake.machines import hybrid_laptop

    hybrid_laptop(tmp_path)      # 6 P-cores with SMT (CPUs 0-11) + 8 E-cores (12-19), one node
    topo = topo_of(tmp_path, {})
    placed = [place_rank(topology=topo, env=env_of(LOCAL_RANK=r, LOCAL_WORLD_SIZE=ranks)) for r in range(ranks)]
    assert [numabind.format_cpulist(p.plan.cpus) for p in placed] == expected
    assert all(p.device == "cpu" and p.plan.mem_nodes == {0} for p in placed)
    said = "not the efficiency cores (CPUs 12-19; core kinds from cpu_core/cpu_atom)"
    assert all((said in p.plan.reason) == (ranks <= 6) for p in placed), placed[0].plan.reason


def test_device_cpu_ignores_visible_gpus_and_device_gpu_needs_one(tmp_path):
    eight_gpus(tmp_path)                           # 4 SNC nodes with two GPUs each
    topo = topo_of(tmp_path, {})
    env = env_of(LOCAL_RANK=1, LOCAL_WORLD_SIZE=2)
    cpu = place_rank(topology=topo, env=env, device="cpu")
    assert cpu.device == "cpu" and cpu.gpu is None and cpu.gpu_rule == "device='cpu': a CPU rank"
    assert cpu.plan.cpus == node_cpus(topo, 2) | node_cpus(topo, 3) and cpu.plan.mem_nodes == {2, 3}
    assert place_rank(topology=topo, env=env).gpu == 1           # a visible GPU: a GPU rank
    with pytest.raises(PlanError, match="no GPU is visible"):
        place_rank(topology=topo_of(tmp_path, {"CUDA_VISIBLE_DEVICES": ""}), env=env, device="gpu")
    with pytest.raises(PlanError, match="device 'tpu' is not one of gpu, cpu"):
        place_rank(topology=topo, env=env, device="tpu")


def test_cpu_rank_remainder_cores_go_to_no_rank_and_say_so(tmp_path):
    _two_nodes(tmp_path)                           # 8 cores, 3 ranks: blocks of 2, 2 cores left over
    topo = topo_of(tmp_path, {})
    placed = [place_rank(topology=topo, env=env_of(LOCAL_RANK=r, LOCAL_WORLD_SIZE=3)) for r in range(3)]
    assert [numabind.format_cpulist(p.plan.cpus) for p in placed] == ["0-1,8-9", "2-3,10-11", "4-5,12-13"]
    for p in placed:
        assert "2 core(s) left to no rank (8 cores do not split into 3 equal blocks): CPUs 6-7,14-15" in p.plan.reason


def test_cpu_rank_block_across_two_snc_nodes_binds_memory_to_both(tmp_path):
    _four_nodes(tmp_path)                          # 16 cores of 4 nodes, 5 ranks: blocks of 3 cores
    topo = topo_of(tmp_path, {})
    placed = [place_rank(topology=topo, env=env_of(LOCAL_RANK=r, LOCAL_WORLD_SIZE=5), policy="preferred")
              for r in range(5)]
    assert [(numabind.format_cpulist(p.plan.cpus), p.plan.mem_policy, numabind.format_cpulist(p.plan.mem_nodes))
            for p in placed] == [("0-2,16-18", "preferred", "0"), ("3-5,19-21", "preferred-many", "0-1"),
                                 ("6-8,22-24", "preferred-many", "1-2"), ("9-11,25-27", "preferred", "2"),
                                 ("12-14,28-30", "preferred", "3")]
    assert placed[1].cpu_nodes == (0, 1) and placed[1].numa_node is None
    assert "every node the CPUs span" in placed[1].plan.reason
    assert "1 core(s) left to no rank" in placed[0].plan.reason


def test_cpu_ranks_respect_the_cpuset(tmp_path):
    m = _four_nodes(tmp_path)
    # a container on node 0's cores 0-3 (both threads) and one thread of node 1's cores 4-5; memory on 0-1
    m.set_cgroup2("/job", [0, 1, 2, 3, 16, 17, 18, 19, 4, 5], [0, 1]).write()
    topo = topo_of(tmp_path, {})
    assert topo.allowed_cpus == frozenset({0, 1, 2, 3, 4, 5, 16, 17, 18, 19})
    two = [place_rank(topology=topo, env=env_of(LOCAL_RANK=r, LOCAL_WORLD_SIZE=2), within=topo.allowed_cpus).plan
           for r in range(2)]
    assert [(numabind.format_cpulist(p.cpus), numabind.format_cpulist(p.mem_nodes)) for p in two] == \
        [("0-3,16-19", "0"), ("4-5", "1")]                    # one node each: only nodes with cpuset CPUs
    three = [place_rank(topology=topo, env=env_of(LOCAL_RANK=r, LOCAL_WORLD_SIZE=3), within=topo.allowed_cpus).plan
             for r in range(3)]                               # 6 cores (4 whole, 2 single threads) in blocks of 2
    assert [numabind.format_cpulist(p.cpus) for p in three] == ["0-1,16-17", "2-3,18-19", "4-5"]
    with pytest.raises(PlanError, match="7 local ranks .* only 6 cores in the cpuset"):
        place_rank(topology=topo, env=env_of(LOCAL_RANK=0, LOCAL_WORLD_SIZE=7))


def test_cpu_rank_memory_only_on_nodes_the_process_may_use(tmp_path):
    m = _two_nodes(tmp_path)
    m.set_cgroup2("/job", range(16), [0]).write()              # every CPU, memory on node 0 only
    topo = topo_of(tmp_path, {})
    placed = place_rank(topology=topo, env=env_of(LOCAL_RANK=1, LOCAL_WORLD_SIZE=2), within=topo.allowed_cpus)
    assert placed.plan.cpus == node_cpus(topo, 1) and placed.plan.mem_policy is None
    assert "no node of 1 has memory this process may use" in placed.plan.reason
    whole = place_rank(topology=topo, env=env_of(LOCAL_RANK=0, LOCAL_WORLD_SIZE=1), within=topo.allowed_cpus)
    assert whole.plan.mem_nodes == {0} and "node(s) 1 left out" in whole.plan.reason


def test_cpu_rank_replaces_the_launchers_affinity_unless_within_affinity(tmp_path):
    _two_nodes(tmp_path)
    topo = topo_of(tmp_path, {})
    env = env_of(LOCAL_RANK=1, LOCAL_WORLD_SIZE=2)
    placed = place_rank(topology=topo, env=env, within=range(6))          # the launcher left CPUs 0-5
    assert placed.plan.cpus == node_cpus(topo, 1) and placed.warnings == ()
    assert "replaces it as numactl does" in placed.cpu_rule and placed.cpu_rule in placed.plan.reason
    placed = place_rank(topology=topo, env=env, within=range(6), within_affinity=True)
    assert placed.plan.cpus == {4, 5} and "narrowed to 4-5" in placed.warnings[0]
    assert placed.plan.mem_policy == "bind" and placed.plan.mem_nodes == {1}     # CPUs 4-5 are node 1's
    with pytest.raises(PlanError, match="srun --cpu-bind=none"):
        place_rank(topology=topo, env=env, within=range(4), strict=True, within_affinity=True)
    # none left (taskset -c 0 for the rank of node 1): memory preferred on node 0, where CPU 0 is
    lenient = place_rank(topology=topo, env=env, within=[0], within_affinity=True)
    assert lenient.plan.cpus is None and (lenient.plan.mem_policy, lenient.plan.mem_nodes) == ("preferred", {0})
    assert "where the CPUs it keeps are" in lenient.plan.reason


def test_cpu_rank_without_a_local_world_size(tmp_path):
    _four_nodes(tmp_path)
    topo = topo_of(tmp_path, {})
    placed = place_rank(topology=topo, env=env_of(LOCAL_RANK=2))
    assert placed.plan.cpus == node_cpus(topo, 2) and "one rank per node assumed (4 nodes)" in placed.plan.reason
    with pytest.raises(PlanError, match="rank 4 is past the 4 node.*NUMABIND_LOCAL_WORLD_SIZE"):
        place_rank(topology=topo, env=env_of(LOCAL_RANK=4))
    policy_none = place_rank(topology=topo, env=env_of(LOCAL_RANK=0), policy=None, nics=True)
    assert policy_none.plan.mem_policy is None and policy_none.env == {}
    assert "--nic: no RDMA device: NCCL_IB_HCA and UCX_NET_DEVICES are not set for local rank 0 (node 0)" \
        in policy_none.plan.reason


def test_cli_plan_gpu_from_rank_without_gpus(capsys, monkeypatch, tmp_path):
    _four_nodes(tmp_path)
    monkeypatch.setenv("NUMABIND_FSROOT", str(tmp_path))
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
    rc, out, _ = run_main(capsys, "plan", "--gpu-from-rank", "--json")
    got = json.loads(out)
    assert rc == 0 and got["device"] == "cpu" and got["gpu"] is None and got["cpu_nodes"] == [2, 3]
    assert got["plan"]["cpus"] == "8-15,24-31" and got["plan"]["mem_nodes"] == "2-3"
    rc, out, _ = run_main(capsys, "plan", "--gpu-from-rank")
    assert rc == 0 and out.startswith("local rank 1 (OMPI_COMM_WORLD_LOCAL_RANK) -> CPU rank on nodes 2-3: ")


@kernel
def test_cli_run_gpu_from_rank_without_gpus_binds_the_command_on_this_host():
    """The real kernel: no GPU visible, LOCAL_RANK=0 and no local world size: one rank per node, rank 0 on the
    first node; the child reads back its affinity and memory policy."""
    from tests.kernel import MPOL, child_env

    topo = numabind.discover("/")
    first = min(n for n in topo.nodes if topo.nodes[n].cpus & topo.allowed_cpus)
    want_cpus = topo.nodes[first].cpus & topo.allowed_cpus        # the cpuset is the limit, not the affinity
    env = {k: v for k, v in child_env().items() if k not in LAUNCH_ENV}
    env.update(LOCAL_RANK="0", CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="", ROCR_VISIBLE_DEVICES="")
    code = ("import json, os; from tests.kernel import raw_mempolicy; mode, nodes = raw_mempolicy(); "
            "print(json.dumps({'cpus': sorted(os.sched_getaffinity(0)), 'mode': mode, 'nodes': sorted(nodes)}))")
    out = subprocess.run([*numabind_command(), "run", "--gpu-from-rank", "-v", "--", sys.executable, "-c", code],
                         capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    got = json_lines(out.stdout)[0]
    assert got["cpus"] == sorted(want_cpus)
    if topo.nodes[first].has_memory:
        assert (got["mode"], got["nodes"]) == (MPOL["bind"], [first])
    assert "CPU rank on node" in out.stderr


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sockets=st.integers(1, 2), per_socket=st.integers(1, 4), cores=st.integers(1, 3), smt=st.booleans(),
       data=st.data())
def test_cpu_ranks_are_disjoint_whole_cores_of_equal_size(tmp_path_factory, sockets, per_socket, cores, smt, data):
    root = tmp_path_factory.mktemp("cpu-ranks")
    snc(root, sockets=sockets, nodes_per_socket=per_socket, cores_per_node=cores, smt=smt)
    topo = topo_of(root, {})
    nodes, total = sockets * per_socket, sockets * per_socket * cores
    ranks = data.draw(st.integers(1, total), label="ranks")
    plans = [place_rank(topology=topo, env=env_of(LOCAL_RANK=r, LOCAL_WORLD_SIZE=ranks)).plan for r in range(ranks)]
    used = [p.cpus for p in plans]
    assert all(not (a & b) for i, a in enumerate(used) for b in used[i + 1:])          # disjoint
    for p in plans:
        assert all(topo.cpus[c].siblings <= p.cpus for c in p.cpus)                      # whole cores
        assert p.mem_nodes == {topo.cpus[c].node for c in p.cpus}                        # every node spanned
    sizes = {len(cores_of(topo, p.cpus)) for p in plans}
    if ranks > nodes:
        assert sizes == {total // ranks}                                                 # equal blocks
    else:
        assert frozenset().union(*used) == topo.allowed_cpus                             # whole nodes, all used
        assert all(p.cpus == frozenset().union(*(node_cpus(topo, n) for n in p.mem_nodes)) for p in plans)
