"""One answer to "what may this process use" (issue 26 item 3) and its rule (issue 32 cause 1 and 2).

:class:`numabind.plan.Allowed` is what discovery (``topo.allowed``), planning (strategies, ranks,
``Plan.from_numactl_args``, ``Plan.validate``) and the live process (``numabind.live.limits()``) read. The
limit is the cpuset (``cpuset.cpus.effective``, online CPUs without one); the affinity a parent left behind
is reported beside it and never narrows a plan silently: only numactl's ``-C`` without ``-a`` is checked
against it (as libnuma does), and ``within_affinity=True`` / ``--within-affinity`` narrows on request.

Fake machines decide what a file says; the kernel tests run children under a narrowed affinity.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest

from numabind import Plan, PlanError, discover, format_cpulist, live, plan_for_gpu, plan_for_gpus
from numabind._cgroup import read_allowed, read_cpuset
from numabind._fs import FsReader
from numabind.plan import Allowed
from numabind.strategies import plan_table
from tests.fakegpu import add_nvidia_gpu
from tests.fakesys import FakeMachine
from tests.kernel import ROOT, child_env

GPU1 = "0000:41:00.0"


def four_cpus(root, *, status=((0, 1), (0, 1)), cgroup=None, gpu_node=1) -> str:
    """Two nodes (node 0 = CPUs 0-1, node 1 = CPUs 2-3), a GPU on ``gpu_node``; ``status`` is the process's
    (Cpus_allowed, Mems_allowed), ``cgroup`` its cgroup v2 cpuset (cpus, mems) or None."""
    m = FakeMachine(root)
    m.add_node(0, (0, 1), distances={1: 21})
    m.add_node(1, (2, 3), distances={0: 21})
    if status is None:
        m.remove_status()
    else:
        m.set_status(*status)
    if cgroup is not None:
        m.set_cgroup2("/job", *cgroup)
    m.write()
    add_nvidia_gpu(root, GPU1, numa_node=gpu_node, local_cpulist="2-3" if gpu_node == 1 else "0-1")
    return str(root)


def topo_of(root):
    return discover(root)


# --------------------------------------------------------------------------- one type
def test_discovery_and_the_live_process_answer_with_one_type(tmp_path):
    topo = topo_of(four_cpus(tmp_path))
    assert isinstance(topo.allowed, Allowed) and isinstance(live.limits(), Allowed)
    machine = live.machine()
    assert isinstance(machine.allowed, Allowed) and Allowed.of(machine) is machine.allowed
    assert Allowed.of(topo) == topo.allowed
    assert (topo.allowed.allowed_cpus, topo.allowed.allowed_nodes) == (topo.allowed_cpus, topo.allowed_nodes)
    allowed = topo.allowed
    assert pickle.loads(pickle.dumps(allowed)) == allowed
    read = read_allowed(FsReader(str(tmp_path)), topo.online_cpus, frozenset(topo.nodes), topo.nodes_with_memory)
    assert (read.allowed_cpus, read.allowed_nodes, read.affinity) == (allowed.allowed_cpus, allowed.allowed_nodes,
                                                                      allowed.affinity)


def test_the_parent_s_affinity_is_reported_beside_not_as_the_limit(tmp_path):
    topo = topo_of(four_cpus(tmp_path))                       # the parent bound the process to node 0
    assert topo.allowed_cpus == {0, 1, 2, 3}                   # no cpuset: every online CPU
    assert topo.affinity == {0, 1}
    assert topo.allowed.inherited
    assert topo.to_dict()["affinity"] == "0-1"


def test_a_cpuset_narrower_than_online_is_the_limit(tmp_path):
    topo = topo_of(four_cpus(tmp_path, status=((0, 1, 2), (0, 1)), cgroup=((0, 1, 2), (0, 1))))
    assert topo.allowed_cpus == {0, 1, 2} and topo.affinity == {0, 1, 2}
    assert topo.allowed.cpus_source == "cgroup2:/job" and "cgroup2:/job" in topo.allowed_source
    assert read_cpuset(FsReader(str(tmp_path))).cpus == {0, 1, 2}
    plan = plan_for_gpu(0, topology=topo)
    assert plan.cpus == {2}
    assert "trimmed to 2 by the allowed CPUs 0-2" in plan.reason
    with pytest.raises(PlanError, match=r"CPUs 3 are outside the CPUs this process may use: its cpuset "
                                        r"\(0-2, from cgroup2:/job\); pick CPUs inside that set or widen"):
        Plan(cpus={2, 3}).validate(topo)


def test_an_affinity_narrower_than_the_cpuset_is_no_limit(tmp_path):
    topo = topo_of(four_cpus(tmp_path, status=((0, 1), (0, 1)), cgroup=((0, 1, 2, 3), (0, 1))))
    assert topo.allowed_cpus == {0, 1, 2, 3} and topo.affinity == {0, 1}
    assert Plan(cpus={2, 3}).validate(topo).cpus == {2, 3}


# --------------------------------------------------------------------------- the library case
def test_plan_for_node_1s_gpu_in_a_worker_whose_parent_bound_it_to_node_0(tmp_path):
    topo = topo_of(four_cpus(tmp_path))
    plan = plan_for_gpu(0, topology=topo)
    assert plan.cpus == {2, 3} and plan.mem_nodes == {1}
    assert "inherited CPUs 0-1 from the parent; binding node 1's CPUs 2-3" in plan.reason
    assert plan_for_gpus([0], topology=topo).cpus == {2, 3}
    (row,) = plan_table(topo)
    assert row.plan is not None and row.plan.cpus == {2, 3} and row.trimmed_cpus == frozenset()


def test_within_affinity_is_the_explicit_narrowing(tmp_path):
    topo = topo_of(four_cpus(tmp_path))
    with pytest.raises(PlanError, match=r"none of them is in the allowed CPUs 0-1 .*within the inherited "
                                        r"affinity.*drop within_affinity"):
        plan_for_gpu(0, topology=topo, within_affinity=True)
    (row,) = plan_table(topo, within_affinity=True)
    assert row.plan is None and "drop within_affinity" in row.error
    ok = topo_of(four_cpus(tmp_path / "b", status=((1, 2), (0, 1))))
    assert plan_for_gpu(0, topology=ok, within_affinity=True).cpus == {2}
    assert "inherited CPUs" not in plan_for_gpu(0, topology=ok, within_affinity=True).reason
    with pytest.raises(PlanError, match=r"CPUs 3 are outside the CPUs this process may use within its inherited "
                                        r"affinity \(1-2, .*drop within_affinity"):
        Plan(cpus={2, 3}).validate(ok, within_affinity=True)


def test_within_affinity_needs_a_known_affinity(tmp_path):
    topo = topo_of(four_cpus(tmp_path, status=None))
    assert topo.affinity is None and not topo.allowed.inherited
    assert plan_for_gpu(0, topology=topo).cpus == {2, 3}
    with pytest.raises(PlanError, match="affinity is unknown"):
        plan_for_gpu(0, topology=topo, within_affinity=True)


# --------------------------------------------------------------------------- numactl's lists (issue 32 cause 1, 2)
def test_cpunodebind_binds_the_node_s_cpus_whatever_the_parent_left(tmp_path):
    topo = topo_of(four_cpus(tmp_path, status=((0, 2), (0, 1))))      # taskset -c 0,2
    plan = Plan.from_numactl_args("-N 1", topology=topo)
    assert plan.cpus == {2, 3}                                           # numactl: 2-3 (was 2, silently)
    assert "inherited CPUs 0,2 from the parent; binding node 1's CPUs 2-3" in plan.reason
    assert Plan.from_numactl_args("-N 1", topology=topo, within_affinity=True).cpus == {2}


def test_physcpubind_without_all_is_checked_against_the_affinity(tmp_path):
    topo = topo_of(four_cpus(tmp_path, status=((0,), (0, 1))))           # taskset -c 0
    with pytest.raises(PlanError, match=r"--physcpubind: CPUs 3 are outside this process's affinity \(CPUs 0, "
                                        r"inherited from its parent\).*add -a/--all"):
        Plan.from_numactl_args("-C 3", topology=topo)
    assert Plan.from_numactl_args("-a -C 3", topology=topo).cpus == {3}
    assert Plan.from_numactl_args("-a -N 1", topology=topo).cpus == {2, 3}
    assert Plan.from_numactl_args("-C all", topology=topo).cpus == {0}
    assert Plan.from_numactl_args("-a -C all", topology=topo).cpus == {0, 1, 2, 3}


def test_node_all_and_relative_nodes_use_mems_allowed(tmp_path):
    topo = topo_of(four_cpus(tmp_path, status=((2,), (0, 1))))           # taskset -c 2
    assert Plan.from_numactl_args("-N +0", topology=topo).cpus == {0, 1}   # node 0, as numactl (was node 1)
    assert Plan.from_numactl_args("-N all", topology=topo).cpus == {0, 1, 2, 3}
    only1 = topo_of(four_cpus(tmp_path / "b", status=((0, 1, 2, 3), (1,))))
    assert Plan.from_numactl_args("-N all", topology=only1).cpus == {2, 3}
    assert Plan.from_numactl_args("-N +0", topology=only1).cpus == {2, 3}
    assert Plan.from_numactl_args("-a -N all", topology=only1).cpus == {0, 1, 2, 3}


def test_cpunodebind_outside_the_cpuset_names_the_cpuset(tmp_path):
    topo = topo_of(four_cpus(tmp_path, status=((0, 1), (0, 1)), cgroup=((0, 1), (0, 1))))
    with pytest.raises(PlanError, match=r"--cpunodebind=1: the nodes' CPUs 2-3 are all outside the CPUs this "
                                        r"process may use \(0-1, from cgroup2:/job\).*widen the cpuset"):
        Plan.from_numactl_args("-N 1", topology=topo)


# --------------------------------------------------------------------------- the live kernel
@pytest.mark.kernel
def test_live_limits_are_the_cpuset_with_the_affinity_beside():
    before = os.sched_getaffinity(0)
    one = {min(before)}
    os.sched_setaffinity(0, one)
    try:
        limits, machine = live.limits(), live.machine()
    finally:
        os.sched_setaffinity(0, before)
    assert limits.affinity == one and machine.affinity == one
    assert limits.allowed_cpus >= before and machine.allowed_cpus == limits.allowed_cpus
    assert discover().allowed_cpus == limits.allowed_cpus


def _in_child(argv: list[str], cpus: set[int]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=child_env(), timeout=120, cwd=ROOT,
                          preexec_fn=lambda: os.sched_setaffinity(0, cpus))


def _status_cpus(text: str) -> str:
    return next(line.split()[1] for line in text.splitlines() if line.startswith("Cpus_allowed_list:"))


@pytest.mark.kernel
def test_run_binds_the_whole_node_in_a_child_bound_to_one_cpu():
    limits = live.limits()
    node, cpus = next(((n, node.cpus & limits.allowed_cpus) for n, node in sorted(live.machine().nodes.items())
                       if len(node.cpus & limits.allowed_cpus) >= 2), (None, None))
    if node is None:
        pytest.skip("needs a node with two CPUs in this process's cpuset")
    one = {min(cpus)}
    status = ["grep", "Cpus_allowed_list", "/proc/self/status"]
    numabind = [sys.executable, "-m", "numabind"]
    out = _in_child([*numabind, "run", "-N", str(node), "--", *status], one)
    assert out.returncode == 0 and _status_cpus(out.stdout) == format_cpulist(cpus), out.stderr
    out = _in_child([*numabind, "run", "--within-affinity", "-N", str(node), "--", *status], one)
    assert out.returncode == 0 and _status_cpus(out.stdout) == format_cpulist(one), out.stderr
    other = str(max(cpus))
    out = _in_child([*numabind, "run", "-C", other, "--", *status], one)
    assert out.returncode == 1 and "outside this process's affinity" in out.stderr and "-a/--all" in out.stderr
    out = _in_child([*numabind, "run", "-a", "-C", other, "--", *status], one)
    assert out.returncode == 0 and _status_cpus(out.stdout) == other, out.stderr
    out = _in_child([*numabind, "-N", str(node), "--within-affinity", *status], one)      # numactl's form
    assert out.returncode == 0 and _status_cpus(out.stdout) == format_cpulist(one), out.stderr
