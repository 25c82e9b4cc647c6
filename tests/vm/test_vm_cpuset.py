"""Issue 3, item 6: a cgroup v2 cpuset in the guest that allows only CPUs 2-3 and memory node 1.

Discovery reports the cpuset; a plan for node 0 is a PlanError in strict mode and, otherwise,
a degradation that says why (and keeps the process inside its cpuset); a plan for node 1 works.
The test process itself stays outside the cgroup: a forked child moves into it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from . import probe

CGROUP_ROOT = Path("/sys/fs/cgroup")
MIB = probe.MIB


@pytest.fixture
def cpuset_cgroup(vm_topology):
    """A child cgroup with cpuset.cpus = node 1's CPUs and cpuset.mems = 1; removed afterwards."""
    controllers = (CGROUP_ROOT / "cgroup.controllers").read_text().split()
    assert "cpuset" in controllers, f"cgroup2 at {CGROUP_ROOT} offers {controllers}"
    (CGROUP_ROOT / "cgroup.subtree_control").write_text("+cpuset")
    cg = CGROUP_ROOT / f"numabind-test-{os.getpid()}"
    cg.mkdir()
    try:
        cpus = sorted(vm_topology.node_cpus(1))
        (cg / "cpuset.cpus").write_text(f"{cpus[0]}-{cpus[-1]}")
        (cg / "cpuset.mems").write_text("1")
        yield cg
    finally:
        cg.rmdir()


def _inside_cpuset(cg: str) -> dict:
    """Child: join the cgroup, then look at discovery and try plans for node 0 and node 1."""
    Path(cg, "cgroup.procs").write_text(str(os.getpid()))
    import numabind

    collect = probe.LogCollector()
    logging.getLogger("numabind").addHandler(collect)
    logging.getLogger("numabind").setLevel(logging.DEBUG)
    out: dict = {}
    status = Path("/proc/self/status").read_text()
    out["status"] = [line for line in status.splitlines() if line.startswith(("Cpus_allowed_list", "Mems_allowed_list"))]
    topo = numabind.discover()
    out["allowed_cpus"], out["allowed_nodes"] = sorted(topo.allowed_cpus), sorted(topo.allowed_nodes)
    out["allowed_source"] = topo.allowed_source

    node0 = numabind.Plan(cpus=topo.nodes[0].cpus, mem_policy="bind", mem_nodes=frozenset({0}))
    before = (sorted(os.sched_getaffinity(0)), numabind.current_binding().mem_policy)
    try:
        numabind.bind_current(node0, strict=True)
    except numabind.PlanError as e:
        out["strict_error"] = f"{type(e).__name__}: {e}"
    else:
        out["strict_error"] = None
    out["after_strict"] = (sorted(os.sched_getaffinity(0)), numabind.current_binding().mem_policy)
    out["before"] = before
    try:
        numabind.Plan.from_numactl_args("--cpunodebind=0 --membind=0", topology=topo)
    except numabind.PlanError as e:
        out["numactl_error"] = str(e)
    else:
        out["numactl_error"] = None

    del collect.records[:]
    report = numabind.bind_current(node0)
    out["degraded"] = {"warnings": list(report.warnings), "cpus": sorted(report.applied.cpus),
                       "policy": report.applied.mem_policy, "logged": [m for lvl, m in collect.records
                                                                       if lvl == "WARNING"]}
    out["degraded_memory"] = probe.measure(32 * MIB)["move_pages"]

    node1 = numabind.Plan(cpus=topo.nodes[1].cpus, mem_policy="bind", mem_nodes=frozenset({1}))
    report = numabind.bind_current(node1, strict=True)
    out["node1"] = {"warnings": list(report.warnings), "cpus": sorted(report.applied.cpus),
                    "policy": report.applied.mem_policy, "memory": probe.measure(32 * MIB)["move_pages"]}
    return out


@pytest.mark.numa_vm(topology="2n")
def test_cpuset_cgroup_narrows_discovery_and_plans(cpuset_cgroup, vm_topology):
    cpus = sorted(vm_topology.node_cpus(1))
    r = probe.in_child(_inside_cpuset, str(cpuset_cgroup))
    assert r["status"] == [f"Cpus_allowed_list:\t{cpus[0]}-{cpus[-1]}", "Mems_allowed_list:\t1"]
    # discovery reports the cpuset
    assert r["allowed_cpus"] == cpus and r["allowed_nodes"] == [1]
    # strict: PlanError, nothing changed
    assert r["strict_error"] is not None and r["strict_error"].startswith("PlanError"), r
    assert r["after_strict"] == r["before"]
    assert r["numactl_error"] is not None
    # default: a degradation that says why, and the process stays in its cpuset
    d = r["degraded"]
    assert d["warnings"], "binding to node 0 from a node-1 cpuset must not succeed silently"
    assert any("cpuset" in w for w in d["warnings"]), d["warnings"]
    assert set(d["cpus"]) <= set(cpus) and d["policy"] != "bind"
    assert d["logged"] and all(any(w in m for m in d["logged"]) for w in d["warnings"]), d
    node1_share = probe.shares(r["degraded_memory"]).get(1, 0.0)
    ok = r["node1"]
    share = probe.shares(ok["memory"]).get(1, 0.0)
    print(f"item 6, cpuset {cpus[0]}-{cpus[-1]} mems 1: discover() allowed CPUs {r['allowed_cpus']} nodes "
          f"{r['allowed_nodes']} ({r['allowed_source']}); strict node-0 plan -> {r['strict_error']}; "
          f"default -> {len(d['warnings'])} warning(s): {' | '.join(d['warnings'])}; memory then "
          f"{probe.fmt_shares(r['degraded_memory'])}; node-1 plan: {probe.fmt_shares(ok['memory'])}")
    assert node1_share >= 99.0  # the cpuset's mems hold, whatever the plan said
    assert ok["warnings"] == [] and ok["cpus"] == cpus and ok["policy"] == "bind" and share >= 99.0
