"""Placement strategies on synthetic machines: exact plans, errors, the shard invariant, the auto gate."""

from __future__ import annotations

import json
import logging
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numabind.topology as topology_module
from numabind import auto, strategies
from numabind.auto import auto_plan_available
from numabind._util import FrozenMap
from numabind.cpulist import parse_cpulist
from numabind.devices import Gpu
from numabind.errors import PlanError
from numabind.plan import Plan
from numabind.strategies import (
    PCT_SKUS,
    pct_config,
    plan_for_gpu,
    plan_for_gpus,
    plan_table,
)
from numabind.topology import Cache, Cpu, Node, Topology

from .fakegpu import add_amd_gpu, add_kfd_cpu_node, add_nvidia_gpu, nv_uuid
from .fakesys import memory_only_nodes, snc, two_sockets

GiB = 1 << 30
L = parse_cpulist


# ------------------------------------------------------------------ builder
def make_topology(node_cpus, *, memory=None, packages=None, smt_offset=None, distances=None,
                  gpus=(), vendor="nvidia", allowed_cpus=None, allowed_nodes=None, l3=None,
                  model_name=None, cppc=None, siblings=None):
    """A Topology from a few facts.

    node_cpus: {node: cpulist}; memory: {node: bytes} (default 64 GiB each);
    packages: {node: package} (default: node id); smt_offset: CPU c and
    c + offset are hyperthread siblings; distances: {(a, b): d} (symmetric;
    default 10 / 12 same package / 21); gpus: the node of each visible GPU;
    l3: cpulists of the last-level caches (default one per package).
    """
    node_cpus = {n: L(c) if isinstance(c, str) else frozenset(c) for n, c in node_cpus.items()}
    memory = {n: 64 * GiB for n in node_cpus} | dict(memory or {})
    packages = packages if packages is not None else {n: n for n in node_cpus}
    ids = sorted(node_cpus)

    def dist(a, b):
        if a == b:
            return 10
        if distances and ((a, b) in distances or (b, a) in distances):
            return distances.get((a, b), distances.get((b, a)))
        return 12 if packages.get(a) == packages.get(b) else 21

    nodes = FrozenMap({n: Node(id=n, cpus=node_cpus[n], memory_bytes=memory[n],
                               distances=FrozenMap({m: dist(n, m) for m in ids})) for n in ids})
    online = frozenset().union(*node_cpus.values())
    cpus = {}
    for n, cs in node_cpus.items():
        for c in cs:
            if siblings is not None:
                sib = frozenset(siblings(c))
            elif smt_offset:
                sib = frozenset({c, c + smt_offset}) if c < smt_offset else frozenset({c - smt_offset, c})
            else:
                sib = frozenset({c})
            cpus[c] = Cpu(id=c, node=n, package=packages.get(n, -1), core=c, siblings=sib & online)
    if l3 is None:
        by_pkg = {}
        for c, info in cpus.items():
            by_pkg.setdefault(info.package, set()).add(c)
        l3 = [frozenset(v) for _, v in sorted(by_pkg.items())]
    caches = tuple(Cache(level=3, type="Unified", cpus=L(g) if isinstance(g, str) else frozenset(g)) for g in l3)
    gpu_objs = tuple(
        Gpu(index=i, pci_address=f"0000:{0x10 + i:02x}:00.0", vendor=vendor, numa_node=n,
            numa_source="numa_node" if n is not None else "unknown",
            numa_note="" if n is not None else "firmware numa_node is -1 and local_cpulist 0-3 spans nodes 0-1")
        for i, n in enumerate(gpus)
    )
    all_nodes = frozenset(ids)
    return Topology(
        root="/fake", nodes=nodes, cpus=FrozenMap(cpus), online_cpus=online, possible_cpus=online,
        allowed_cpus=online if allowed_cpus is None else frozenset(L(allowed_cpus) if isinstance(allowed_cpus, str)
                                                                  else allowed_cpus),
        online_nodes=all_nodes, possible_nodes=all_nodes,
        allowed_nodes=all_nodes if allowed_nodes is None else frozenset(allowed_nodes),
        caches=caches, model_name=model_name, cppc_highest_perf=cppc, gpus=gpu_objs,
        allowed_source="test",
    )


def dgx(**kw):
    """DGX H100-style: 2 sockets x 56 cores x 2 threads, one node each, 4 GPUs per socket."""
    return make_topology({0: "0-55,112-167", 1: "56-111,168-223"}, smt_offset=112,
                         gpus=[0, 0, 0, 0, 1, 1, 1, 1], **kw)


def snc4(**kw):
    """2 sockets x 4 nodes (SNC4/NPS4) x 14 cores x 2 threads, one GPU per node."""
    nodes = {k: f"{14 * k}-{14 * k + 13},{112 + 14 * k}-{112 + 14 * k + 13}" for k in range(8)}
    return make_topology(nodes, packages={k: k // 4 for k in range(8)}, smt_offset=112,
                         gpus=list(range(8)), **kw)


def P(cpus, policy="bind", nodes=None):
    return Plan(cpus=L(cpus), mem_policy=policy, mem_nodes=L(nodes) if isinstance(nodes, str) else nodes)


# ------------------------------------------------------------------- node
def test_dgx_node_mode():
    t = dgx()
    assert plan_for_gpu(0, topology=t) == P("0-55,112-167", "bind", "0")
    assert plan_for_gpu(5, topology=t) == P("56-111,168-223", "bind", "1")
    assert plan_for_gpu(5, topology=t, policy="preferred") == P("56-111,168-223", "preferred", "1")
    assert plan_for_gpu(5, topology=t, policy="preferred-many") == P("56-111,168-223", "preferred-many", "1")
    assert plan_for_gpu(5, topology=t, policy=None) == Plan(cpus=L("56-111,168-223"))
    reason = plan_for_gpu(5, topology=t).reason
    assert reason.startswith("node: GPU 5 (nvidia 0000:15:00.0) is on node 1 (its numa_node)")
    assert "memory bind 1 (distance 10 from node 1)" in reason


def test_plans_validate_and_render_numactl():
    t = dgx()
    plan = plan_for_gpu(7, topology=t, migrate=True)
    assert plan.validate(t) is plan
    assert plan.migrate
    assert plan.to_numactl_args() == "--physcpubind=56-111,168-223 --membind=1"


def test_dgx_socket_equals_node():
    t = dgx()
    assert plan_for_gpu(2, "socket", t) == P("0-55,112-167", "bind", "0")


def test_snc4_node_and_socket():
    t = snc4()
    assert plan_for_gpu(2, "node", t) == P("28-41,140-153", "bind", "2")
    assert plan_for_gpu(2, "socket", t) == P("0-55,112-167", "bind", "0-3")
    assert plan_for_gpu(6, "socket", t, policy="preferred") == P("56-111,168-223", "preferred-many", "4-7")
    assert "package 1 spans nodes 4-7" in plan_for_gpu(6, "socket", t).reason


def test_socket_with_unknown_package_falls_back_to_node():
    t = make_topology({0: "0-3", 1: "4-7"}, packages={0: -1, 1: -1}, gpus=[1])
    plan = plan_for_gpu(0, "socket", t)
    assert plan == P("4-7", "bind", "1")
    assert "package of node 1 is unknown" in plan.reason


# -------------------------------------------------------------- exclusive
def test_dgx_exclusive_splits_cores_keeping_siblings():
    t = dgx()
    assert plan_for_gpu(0, "exclusive", t) == P("0-13,112-125", "bind", "0")
    assert plan_for_gpu(1, "exclusive", t) == P("14-27,126-139", "bind", "0")
    assert plan_for_gpu(7, "exclusive", t) == P("98-111,210-223", "bind", "1")


def test_exclusive_leftover_cores_go_to_lowest_indices():
    # 10 cores, 4 GPUs: 3, 3, 2, 2
    t = make_topology({0: "0-9,10-19", 1: "20-29"}, smt_offset=10, gpus=[0, 0, 0, 0])
    got = [plan_for_gpu(i, "exclusive", t).cpus for i in range(4)]
    assert got == [L("0-2,10-12"), L("3-5,13-15"), L("6-7,16-17"), L("8-9,18-19")]


def test_exclusive_counts_only_allowed_cores_and_errors_with_numbers():
    t = make_topology({0: "0-2", 1: "3-5"}, gpus=[0, 0, 0, 0])
    with pytest.raises(PlanError, match=r"node 0 has 3 allowed cores \(0-2\) for 4 GPUs \(0-3\)"):
        plan_for_gpu(0, "exclusive", t)


# ----------------------------------------------------------- core-complex
def genoa_like(**kw):
    """One node, 4 CCXs of 8 cores (no SMT), the last one half hidden by the cpuset; 3 GPUs on it."""
    return make_topology({0: "0-31", 1: "32-63"}, gpus=[0, 0, 0, 1],
                         l3=["0-7", "8-15", "16-23", "24-31", "32-63"], **kw)


def test_core_complex_largest_groups_first_distinct_where_possible():
    t = genoa_like(allowed_cpus="0-5,8-31,32-63")
    assert [plan_for_gpu(i, "core-complex", t).cpus for i in range(3)] == [L("8-15"), L("16-23"), L("24-31")]
    assert plan_for_gpu(3, "core-complex", t) == P("32-63", "bind", "1")


def test_core_complex_more_gpus_than_groups_share():
    t = make_topology({0: "0-15"}, gpus=[0, 0, 0], l3=["0-7", "8-15"])
    plans = [plan_for_gpu(i, "core-complex", t) for i in range(3)]
    assert [p.cpus for p in plans] == [L("0-7"), L("8-15"), L("0-7")]
    assert "shared: fewer groups than GPUs" in plans[2].reason


def test_core_complex_without_caches_uses_the_node():
    t = make_topology({0: "0-15"}, gpus=[0], l3=[])
    plan = plan_for_gpu(0, "core-complex", t)
    assert plan == P("0-15", "bind", "0")
    assert "no cache information" in plan.reason


# ------------------------------------------------------------ memory-less
def test_grace_gpu_memory_nodes_are_not_cpu_targets():
    # node 0: 72 Grace cores + LPDDR; node 1: the GPU's HBM (no CPUs); 2-9: empty MIG placeholders
    nodes = {0: "0-71", 1: ""} | {k: "" for k in range(2, 10)}
    memory = {0: 480 * GiB, 1: 96 * GiB} | {k: 0 for k in range(2, 10)}
    dist = {(0, 1): 80} | {(0, k): 255 for k in range(2, 10)} | {(1, k): 255 for k in range(2, 10)}
    t = make_topology(nodes, memory=memory, distances=dist, packages={k: 0 for k in nodes}, gpus=[0, 1])
    assert plan_for_gpu(0, topology=t) == P("0-71", "bind", "0")
    # firmware that reports the GPU on its own memory node: CPUs and memory from the Grace node
    plan = plan_for_gpu(1, topology=t)
    assert plan == P("0-71", "bind", "0")
    assert "node 1 has no CPUs; CPUs from node 0, the nearest node with CPUs (distance 80)" in plan.reason
    assert "memory bind 0 (distance 80 from node 1)" in plan.reason


def test_cpu_only_node_gets_nearest_memory_by_slit():
    t = make_topology({0: "0-7", 1: "8-15", 2: "16-23"}, memory={1: 0},
                      distances={(0, 1): 21, (1, 2): 12, (0, 2): 21}, gpus=[1])
    plan = plan_for_gpu(0, topology=t)
    assert plan == P("8-15", "bind", "2")
    assert "node 1 has no memory; memory on node 2, the nearest node with memory (distance 12)" in plan.reason
    assert plan.validate(t)


def test_nearest_memory_respects_allowed_nodes():
    t = make_topology({0: "0-7", 1: "8-15", 2: "16-23"}, memory={1: 0},
                      distances={(0, 1): 21, (1, 2): 12, (0, 2): 21}, gpus=[1], allowed_nodes={0, 1})
    assert plan_for_gpu(0, topology=t) == P("8-15", "bind", "0")


# ----------------------------------------------------------- firmware -1
def test_unplaced_gpu_says_why_and_explicit_nodes_place_it():
    t = make_topology({0: "0-3", 1: "4-7"}, gpus=[0, None])
    with pytest.raises(PlanError, match=r"GPU 1 \(nvidia 0000:11:00.0\): cannot place it, its NUMA node is unknown "
                                        r"\(firmware numa_node is -1 and local_cpulist 0-3 spans nodes 0-1\)"):
        plan_for_gpu(1, topology=t)
    plan = plan_for_gpu(1, topology=t, nodes=[0, 1])
    assert plan == P("4-7", "bind", "1")
    assert "node 1 from the explicit per-GPU node list" in plan.reason


def test_invisible_gpu_index():
    with pytest.raises(PlanError, match=r"GPU 9 is not visible \(visible GPUs: 0, 1, 2"):
        plan_for_gpu(9, topology=dgx())
    with pytest.raises(PlanError, match="non-negative int"):
        plan_for_gpu(-1, topology=dgx())


# ------------------------------------------------------------- cpuset
def test_cpuset_hiding_half_a_socket_trims_and_says_so():
    t = dgx(allowed_cpus="0-27,112-139,56-111,168-223")
    plan = plan_for_gpu(0, topology=t)
    assert plan == P("0-27,112-139", "bind", "0")
    assert ("node 0 CPUs 0-55,112-167 trimmed to 0-27,112-139 by the allowed CPUs "
            "0-27,56-139,168-223 (from test)") in plan.reason
    # exclusive splits what is left: 28 cores among 4 GPUs
    assert plan_for_gpu(3, "exclusive", t) == P("21-27,133-139", "bind", "0")
    assert plan_for_gpu(4, topology=t) == P("56-111,168-223", "bind", "1")


def test_cpuset_hiding_a_whole_node_is_an_error_naming_everything():
    t = dgx(allowed_cpus="0-55,112-167")
    with pytest.raises(PlanError) as err:
        plan_for_gpu(5, topology=t)
    assert str(err.value) == (
        "GPU 5 (nvidia 0000:15:00.0): node 1 has CPUs 56-111,168-223 but none of them is in the allowed "
        "CPUs 0-55,112-167 (from test); widen the cpuset or choose another GPU/node"
    )


def test_mems_outside_allowed_nodes_is_an_error():
    t = dgx(allowed_nodes={0})
    with pytest.raises(PlanError, match=r"GPU 4 .*memory node 1 is outside the allowed memory nodes 0"):
        plan_for_gpu(4, topology=t)


# ------------------------------------------------------------ explicit
def test_explicit_node_and_cpu_lists():
    t = dgx()
    assert plan_for_gpu(0, topology=t, nodes=[1, 1, 0, 0]) == P("56-111,168-223", "bind", "1")
    with pytest.raises(PlanError, match=r"GPU index 4 is not covered by the per-GPU node list of 4 entries"):
        plan_for_gpu(4, topology=t, nodes=[1, 1, 0, 0])
    cpus = ["0-3", "4-7", {8, 9}]
    assert plan_for_gpu(2, topology=t, cpus=cpus) == P("8-9", "bind", "0")
    assert plan_for_gpu(1, topology=t, cpus=cpus, nodes=[0, 1, 0]) == P("4-7", "bind", "1")
    with pytest.raises(PlanError, match=r"GPU index 3 is not covered by the per-GPU CPU list of 3 entries"):
        plan_for_gpu(3, topology=t, cpus=cpus)
    with pytest.raises(PlanError, match="does not exist"):
        plan_for_gpu(0, topology=t, nodes=[5])


def test_explicit_cpus_are_trimmed_to_the_allowed_set():
    t = dgx(allowed_cpus="0-55,112-167")
    plan = plan_for_gpu(0, topology=t, cpus=["54-57"])
    assert plan.cpus == L("54-55")
    assert "explicit CPUs 54-57 trimmed to 54-55" in plan.reason
    with pytest.raises(PlanError, match=r"explicit CPUs 60-61 \(node 0\) are all outside the allowed CPUs"):
        plan_for_gpu(0, topology=t, cpus=["60-61"])


def test_unknown_mode_and_policy():
    with pytest.raises(PlanError, match="mode 'numa' is not one of node, socket"):
        plan_for_gpu(0, "numa", dgx())
    with pytest.raises(PlanError, match="policy 'local' is not one of"):
        plan_for_gpu(0, topology=dgx(), policy="local")


# ------------------------------------------------------------------ shards
def test_shard_plans():
    t = dgx()
    assert plan_for_gpus([0, 1, 2, 3], t) == P("0-55,112-167", "bind", "0")
    assert plan_for_gpus([3, 4], t) == P("0-223", "bind", "0-1")
    assert plan_for_gpus([3, 4], t, policy="preferred") == P("0-223", "preferred-many", "0-1")
    assert plan_for_gpus([2], t, policy="preferred") == P("0-55,112-167", "preferred", "0")
    # exclusive members, node-wide shard
    assert plan_for_gpus([0, 1], t, mode="exclusive") == P("0-55,112-167", "bind", "0")
    with pytest.raises(PlanError, match="at least one GPU"):
        plan_for_gpus([], t)


def test_shard_with_explicit_cpus_stays_a_superset():
    t = dgx()
    shard = plan_for_gpus([0, 1], t, cpus=["0-3", "60-63"])
    assert shard == P("0-55,60-63,112-167", "bind", "0")


def test_topology_none_discovers(monkeypatch):
    t = dgx()
    monkeypatch.setattr(topology_module, "discover", lambda root=None: t)
    assert plan_for_gpu(4) == P("56-111,168-223", "bind", "1")
    assert plan_for_gpus([0, 4]) == P("0-223", "bind", "0-1")
    assert len(plan_table()) == 8


# ------------------------------------------------------------------- PCT
def gnr(sku, perf, **kw):
    """DGX B300-style Granite Rapids: 2 sockets, one node each, SMT."""
    cores = {"6776P": 64, "6774P": 64, "6962P": 72}.get(sku, 64)
    n = 2 * cores
    nodes = {0: f"0-{cores - 1},{n}-{n + cores - 1}", 1: f"{cores}-{n - 1},{n + cores}-{2 * n - 1}"}
    return make_topology(nodes, smt_offset=n, gpus=[0, 0, 0, 0, 1, 1, 1, 1],
                         model_name=f"Intel(R) Xeon(R) {sku}" if sku else None, cppc=perf, **kw)


@pytest.mark.parametrize("sku,perf,node0", [
    ("6776P", 46, "0-1,16-17,32-33,48-49,128-129,144-145,160-161,176-177"),
    ("6774P", 46, "0-1,16-17,32-33,48-49,128-129,144-145,160-161,176-177"),
    ("6962P", 44, "0-1,18-19,36-37,54-55,144-145,162-163,180-181,198-199"),
])
def test_pct_per_sku(sku, perf, node0):
    t = gnr(sku, perf)
    assert PCT_SKUS[sku].highest_perf == perf
    plan = plan_for_gpu(1, "pct", t)
    assert plan == P(node0, "bind", "0")
    assert f"{sku} with CPPC highest_perf {perf}" in plan.reason
    assert plan_for_gpu(1, "pct", t, policy="preferred").mem_policy == "preferred"


def test_pct_node1_and_shard_union():
    t = gnr("6776P", 46)
    node1 = "64-65,80-81,96-97,112-113,192-193,208-209,224-225,240-241"
    assert plan_for_gpu(6, "pct", t) == P(node1, "bind", "1")
    shard = plan_for_gpus(range(8), t, mode="pct")
    assert shard == P("0-1,16-17,32-33,48-49,128-129,144-145,160-161,176-177," + node1, "bind", "0-1")


@pytest.mark.parametrize("sku,perf,why", [
    (None, 46, "CPU model name is unknown"),
    ("6767P", 46, "not a known PCT-capable Granite Rapids SKU"),
    ("16776P", 46, "not a known PCT-capable Granite Rapids SKU"),   # no substring match
    ("6776P", None, "6776P: cpu0 acpi_cppc/highest_perf is unreadable"),
    ("6776P", 38, "6776P: cpu0 CPPC highest_perf is 38, not 46; PCT looks disabled"),
    ("6962P", 46, "6962P: cpu0 CPPC highest_perf is 46, not 44"),
])
def test_pct_fails_closed_to_the_node_plan(sku, perf, why):
    t = gnr(sku, perf)
    sku_cfg, reason = pct_config(t)
    assert sku_cfg is None and why in reason
    plan = plan_for_gpu(1, "pct", t)
    assert plan == plan_for_gpu(1, "node", t)
    assert f"pct not engaged ({reason}); using node 0" in plan.reason


def test_pct_without_allowed_priority_cpus_fails_closed():
    t = gnr("6776P", 46, allowed_cpus="2-15,66-79")
    plan = plan_for_gpu(1, "pct", t)
    assert plan == P("2-15", "bind", "0")
    assert "have no allowed priority CPUs" in plan.reason


# ------------------------------------------------------------- plan_table
def test_plan_table_rows():
    t = dgx(allowed_cpus="0-27,112-139")
    rows = plan_table(t, "node", "preferred")
    assert len(rows) == 8
    r0, r5 = rows[0], rows[5]
    assert (r0.gpu, r0.pci_address, r0.vendor, r0.numa_node, r0.cpu_node, r0.distance) == (
        0, "0000:10:00.0", "nvidia", 0, 0, 10)
    assert r0.plan == P("0-27,112-139", "preferred", "0")
    assert r0.trimmed_cpus == L("28-55,140-167")
    assert r0.node_cpus == L("0-55,112-167")
    assert r0.error is None
    assert r0.reasons[0] == "GPU 0 (nvidia 0000:10:00.0) is on node 0 (its numa_node)"
    assert r5.plan is None and "none of them is in the allowed CPUs 0-27,112-139" in r5.error
    d = r0.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["plan"] == {"cpus": "0-27,112-139", "mem_policy": "preferred", "mem_nodes": "0",
                         "numactl": "--physcpubind=0-27,112-139 --preferred=0"}
    assert d["trimmed_cpus"] == "28-55,140-167"
    assert [r.gpu for r in plan_table(t, gpus=[1, 3])] == [1, 3]
    with pytest.raises(PlanError):
        plan_table(t, "bogus")


def test_plan_table_amd_and_intel_gpus_and_memory_distance():
    t = make_topology({0: "0-7", 1: "8-15"}, memory={1: 0}, gpus=[1, 0], vendor="amd",
                      distances={(0, 1): 32})
    rows = plan_table(t)
    assert [(r.vendor, r.cpu_node, r.mem_nodes, r.distance) for r in rows] == [
        ("amd", 1, frozenset({0}), 32), ("amd", 0, frozenset({0}), 10)]
    ti = make_topology({0: "0-7", 1: "8-15"}, gpus=[1], vendor="intel")
    assert plan_table(ti)[0].plan == P("8-15", "bind", "1")
    assert plan_table(ti)[0].vendor == "intel"


# ----------------------------------------------------------------- gate
def test_auto_gate():
    t = dgx()
    ok, why = auto_plan_available(t, affinity=t.online_cpus, mem_policy="default")
    assert ok and "2 nodes with CPUs" in why and "GPU 7->node 1" in why
    # a dump (root != "/") defaults to its own allowed set and the default policy
    assert auto_plan_available(t)[0]


@pytest.mark.parametrize("topo,kw,why", [
    (make_topology({0: "0-7"}, gpus=[0]), {}, "only 1 NUMA node with CPUs"),
    (make_topology({0: "0-7", 1: "8-15"}), {}, "no visible GPU"),
    (dgx(), {"affinity": L("0-55")}, "CPU affinity 0-55 does not cover 0-223: the launcher already bound"),
    (dgx(), {"mem_policy": "bind"}, "memory policy is already 'bind'"),
    (make_topology({0: "0-3", 1: "4-7"}, gpus=[0, None]), {}, "GPU 1 cannot be placed"),
    (dgx(allowed_cpus="0-55,112-167"), {"unbound_cpus": L("0-55,112-167")}, "GPU 4 cannot be placed"),
    (object(), {}, "gate failed"),
])
def test_auto_gate_refuses(topo, kw, why, caplog):
    caplog.set_level(logging.DEBUG, logger="numabind.auto")
    ok, reason = auto_plan_available(topo, **kw)
    assert not ok and why in reason
    assert reason in caplog.text


def test_auto_gate_on_live_root_reads_the_kernel(monkeypatch):
    t = dgx()
    live = t.replace(root="/")

    def binding(cpus, policy):
        return lambda: types.SimpleNamespace(cpus=cpus, mem_policy=policy)

    monkeypatch.setattr(auto, "_live_binding", binding(L("0-3"), "default"))
    ok, why = auto_plan_available(live)
    assert not ok and "CPU affinity 0-3 does not cover 0-223" in why
    monkeypatch.setattr(auto, "_live_binding", binding(t.online_cpus, None))
    ok, why = auto_plan_available(live)
    assert not ok and "memory policy is unreadable" in why
    monkeypatch.setattr(auto, "_live_binding", binding(t.online_cpus, "preferred"))
    assert auto_plan_available(live) == (False, "memory policy is already 'preferred'; pass explicit nodes to override")
    monkeypatch.setattr(auto, "_live_binding", binding(t.online_cpus, "default"))
    assert auto_plan_available(live)[0]
    monkeypatch.setattr(auto, "_live_binding", lambda: None)
    assert auto_plan_available(live) == (False, "the process CPU affinity is unreadable")


def test_auto_gate_in_a_cpuset_container():
    t = dgx(allowed_cpus="0-27,56-83")
    affinity = L("0-27,56-83")
    # against all online CPUs a cpuset container looks bound ...
    assert not auto_plan_available(t, affinity=affinity)[0]
    # ... but not against the cpuset's own CPUs
    assert auto_plan_available(t, affinity=affinity, unbound_cpus=affinity)[0]


def test_auto_gate_never_raises_when_discovery_fails(monkeypatch):
    def boom(root=None):
        raise OSError("no sysfs")

    monkeypatch.setattr(topology_module, "discover", boom)
    assert auto_plan_available() == (False, "topology discovery failed: no sysfs")


# ------------------------------------------------ property: shard superset
@st.composite
def machines(draw):
    n_nodes = draw(st.integers(1, 5))
    next_cpu = 0
    node_cpus, memory, packages = {}, {}, {}
    for n in range(n_nodes):
        k = draw(st.integers(0, 6))
        node_cpus[n] = frozenset(range(next_cpu, next_cpu + k))
        next_cpu += k
        memory[n] = draw(st.sampled_from([0, GiB, 8 * GiB]))
        packages[n] = draw(st.integers(-1, 2))
    if not any(node_cpus.values()):
        node_cpus[0] = frozenset({next_cpu})
        next_cpu += 1
    if not any(memory.values()):
        memory[draw(st.integers(0, n_nodes - 1))] = GiB
    distances = {(a, b): draw(st.integers(11, 40)) for a in range(n_nodes) for b in range(a + 1, n_nodes)}
    online = sorted(frozenset().union(*node_cpus.values()))
    pair = draw(st.booleans())
    # mostly unrestricted, sometimes a cpuset / mems restriction
    allowed = draw(st.one_of(st.just(set(online)), st.just(set(online)),
                             st.sets(st.sampled_from(online), min_size=1)))
    allowed_nodes = draw(st.one_of(st.just(set(range(n_nodes))), st.just(set(range(n_nodes))),
                                   st.sets(st.sampled_from(range(n_nodes)), min_size=1)))
    cpu_nodes = [n for n in range(n_nodes) if node_cpus[n]]
    # GPUs mostly on nodes with CPUs; some on memory-only nodes, a few unplaced (firmware -1)
    node_choice = st.sampled_from([*cpu_nodes * 4, *range(n_nodes), None])
    gpus = draw(st.lists(node_choice, min_size=1, max_size=6))
    l3 = draw(st.lists(st.sets(st.sampled_from(online), min_size=1), max_size=3))
    sku = draw(st.sampled_from([None, "6776P", "6962P"]))
    return make_topology(
        node_cpus, memory=memory, packages=packages, distances=distances, gpus=gpus,
        siblings=(lambda c: {c, c ^ 1}) if pair else None, allowed_cpus=allowed,
        allowed_nodes=allowed_nodes, l3=l3, model_name=f"Xeon {sku}" if sku else None,
        cppc=PCT_SKUS[sku].highest_perf if sku else None,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(t=machines(), data=st.data())
def test_shard_plan_is_superset_of_every_member(t, data):
    mode = data.draw(st.sampled_from(strategies.MODES))
    policy = data.draw(st.sampled_from(["bind", "preferred", "preferred-many", None]))
    shard = data.draw(st.lists(st.sampled_from([g.index for g in t.gpus]), min_size=1, unique=True))
    members = {}
    failed = False
    for i in shard:
        try:
            members[i] = plan_for_gpu(i, mode, t, policy=policy)
        except PlanError:
            failed = True
    if failed:
        with pytest.raises(PlanError):
            plan_for_gpus(shard, t, mode=mode, policy=policy)
        return
    whole = plan_for_gpus(shard, t, mode=mode, policy=policy)
    assert whole.validate(t) is whole
    for i, member in members.items():
        assert member.validate(t) is member
        assert member.cpus <= whole.cpus, (i, member, whole)
        if policy is not None:
            assert member.mem_nodes <= whole.mem_nodes
        else:
            assert member.mem_nodes is None and whole.mem_nodes is None


def test_socket_mode_names_memory_nodes_outside_the_allowed_set():
    t = snc4(allowed_nodes={0, 1, 2, 4, 5, 6, 7})
    plan = plan_for_gpu(1, "socket", t)
    assert plan == P("0-55,112-167", "bind", "0-2")
    assert "memory nodes 3 of package 0 are outside the allowed memory nodes 0-2,4-7" in plan.reason


# ------------------------------------------- end to end: fake tree -> discover() -> plan
def _discover(root, monkeypatch, **env):
    for var in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                "ZE_AFFINITY_MASK", "NUMABIND_GPU_VENDOR"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    return topology_module.discover(root)


def test_e2e_dgx_tree(tmp_path, monkeypatch):
    two_sockets(tmp_path, cpus_per_socket=16)          # node 0: 0-7,16-23; node 1: 8-15,24-31
    for k in range(8):
        add_nvidia_gpu(tmp_path, f"0000:{0x18 + 0x10 * k:02x}:00.0", numa_node=k // 4,
                       local_cpulist="0-7,16-23" if k < 4 else "8-15,24-31", uuid=nv_uuid(k), minor=k)
    t = _discover(tmp_path, monkeypatch, CUDA_VISIBLE_DEVICES="4,5,0,1")
    assert [(g.index, g.physical_index, g.numa_node) for g in t.gpus] == [(0, 4, 1), (1, 5, 1), (2, 0, 0), (3, 1, 0)]
    assert plan_for_gpu(0, topology=t) == P("8-15,24-31", "bind", "1")
    assert plan_for_gpu(2, topology=t) == P("0-7,16-23", "bind", "0")
    # exclusive: node 1 has 8 cores for visible GPUs 0 and 1
    assert plan_for_gpu(1, "exclusive", t) == P("12-15,28-31", "bind", "1")
    assert plan_for_gpus([0, 1, 2, 3], t, policy="preferred") == P("0-31", "preferred-many", "0-1")
    ok, why = auto_plan_available(t)
    assert ok, why


def test_e2e_nps4_amd_core_complex(tmp_path, monkeypatch):
    # 2 sockets x 4 nodes x 4 cores x 2 threads, L3 per 2 cores; one MI300-like GPU per node
    snc(tmp_path, sockets=2, nodes_per_socket=4, cores_per_node=4, ccx_cores=2)
    add_kfd_cpu_node(tmp_path, 0)
    for k in range(8):
        node_cpus = f"{4 * k}-{4 * k + 3},{32 + 4 * k}-{32 + 4 * k + 3}"
        add_amd_gpu(tmp_path, f"0000:{0x10 + 0x10 * k:02x}:00.0", kfd_node=8 - k, numa_node=k,
                    local_cpulist=node_cpus)
    t = _discover(tmp_path, monkeypatch, ROCR_VISIBLE_DEVICES="0,1,2,3,4,5,6,7")
    # KFD numbers them in reverse PCI order: visible GPU 0 is the one on node 7
    assert [g.numa_node for g in t.gpus] == [7, 6, 5, 4, 3, 2, 1, 0]
    assert {g.vendor for g in t.gpus} == {"amd"}
    assert plan_for_gpu(0, topology=t) == P("28-31,60-63", "bind", "7")
    assert plan_for_gpu(0, "core-complex", t) == P("28-29,60-61", "bind", "7")
    assert plan_for_gpu(0, "socket", t) == P("16-31,48-63", "bind", "4-7")


def test_e2e_memory_only_nodes_and_firmware_minus_one(tmp_path, monkeypatch):
    memory_only_nodes(tmp_path)                          # HBM node 3, CXL node 2, empty node 4
    add_nvidia_gpu(tmp_path, "0000:01:00.0", numa_node=3, local_cpulist="", minor=0)
    add_nvidia_gpu(tmp_path, "0000:02:00.0", numa_node=-1, local_cpulist="8-15", minor=1, uuid=nv_uuid(1))
    add_nvidia_gpu(tmp_path, "0000:03:00.0", numa_node=-1, local_cpulist="0-15", minor=2, uuid=nv_uuid(2))
    t = _discover(tmp_path, monkeypatch)
    assert [(g.numa_node, g.numa_source) for g in t.gpus] == [(3, "numa_node"), (1, "local_cpulist"),
                                                              (None, "unknown")]
    plan = plan_for_gpu(0, topology=t)
    assert plan == P("0-7", "bind", "0")
    assert "node 3 has no CPUs; CPUs from node 0, the nearest node with CPUs (distance 80)" in plan.reason
    assert plan_for_gpu(1, topology=t) == P("8-15", "bind", "1")
    rows = plan_table(t)
    assert rows[2].plan is None and "local_cpulist 0-15 spans nodes 0-1" in rows[2].error
    assert auto_plan_available(t) == (False, f"GPU 2 cannot be placed: {rows[2].error}")


def test_e2e_cpuset_hiding_half_a_socket(tmp_path, monkeypatch):
    m = two_sockets(tmp_path, cpus_per_socket=8)        # node 0: 0-3,8-11; node 1: 4-7,12-15
    m.set_cgroup2("/kubepods/pod1/ctr", (0, 1, 8, 9, 4, 5, 6, 7, 12, 13, 14, 15), (0, 1))
    m.write()
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=0, local_cpulist="0-3,8-11")
    add_nvidia_gpu(tmp_path, "0000:9a:00.0", numa_node=1, local_cpulist="4-7,12-15", minor=1, uuid=nv_uuid(1))
    t = _discover(tmp_path, monkeypatch)
    assert t.allowed_cpus == L("0-1,4-9,12-15")
    (r0, r1) = plan_table(t)
    assert r0.plan == P("0-1,8-9", "bind", "0") and r0.trimmed_cpus == L("2-3,10-11")
    assert r1.plan == P("4-7,12-15", "bind", "1") and r1.trimmed_cpus == frozenset()
    assert plan_for_gpu(0, "exclusive", t) == P("0-1,8-9", "bind", "0")


@pytest.mark.parametrize("perf,expected", [
    (46, "0-1,16-17,32-33,48-49,128-129,144-145,160-161,176-177"),
    (None, "0-63,128-191"),       # no CPPC file: fail closed to the node
    (40, "0-63,128-191"),
])
def test_e2e_granite_rapids_pct(tmp_path, monkeypatch, perf, expected):
    m = two_sockets(tmp_path, cpus_per_socket=128)     # 64 cores x 2 threads per socket
    m.set_model_name("Intel(R) Xeon(R) 6776P")
    if perf is not None:
        m.set_cppc(perf)
    m.write()
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=0, local_cpulist="0-63,128-191")
    t = _discover(tmp_path, monkeypatch)
    assert (t.model_name, t.cppc_highest_perf) == ("Intel(R) Xeon(R) 6776P", perf)
    assert plan_for_gpu(0, "pct", t) == P(expected, "bind", "0")


# ------------------------------------------------- GPU identity uncertain
def _uncertain(t, index, note="NVML lists 2 GPUs, /dev/nvidiaN says 8; set CUDA_VISIBLE_DEVICES to GPU UUIDs"):
    gpus = tuple(g if g.index != index else g.replace(identity="uncertain", identity_note=note) for g in t.gpus)
    return t.replace(gpus=gpus)


def test_uncertain_gpu_identity_is_said_in_the_plan_and_refused_when_strict(monkeypatch):
    monkeypatch.delenv("NUMABIND_STRICT", raising=False)
    t = _uncertain(dgx(), 5)
    plan = plan_for_gpu(5, topology=t)
    assert plan == P("56-111,168-223", "bind", "1")
    assert "GPU 5 (nvidia 0000:15:00.0): identity uncertain (NVML lists 2 GPUs, /dev/nvidiaN says 8" in plan.reason
    assert "identity" not in plan_for_gpu(4, topology=t).reason
    with pytest.raises(PlanError, match=r"GPU 5 \(nvidia 0000:15:00.0\): which board this index is, is uncertain: "
                                        r"NVML lists 2 GPUs.*CUDA_VISIBLE_DEVICES to GPU UUIDs; strict mode"):
        plan_for_gpu(5, topology=t, strict=True)
    monkeypatch.setenv("NUMABIND_STRICT", "1")
    with pytest.raises(PlanError, match="strict mode"):
        plan_for_gpus([4, 5], topology=t)
    assert plan_for_gpu(5, topology=t, strict=False).mem_nodes == frozenset({1})
    assert plan_for_gpu(5, topology=t, nodes=[0] * 8) == P("0-55,112-167", "bind", "0")   # no guess needed
    rows = plan_table(t)
    assert rows[5].plan is None and "uncertain" in rows[5].error and rows[4].plan is not None
    ok, why = strategies.auto_gate(t)
    assert not ok and why.startswith("GPU 5 cannot be placed: GPU 5 (nvidia 0000:15:00.0): which board")
    monkeypatch.delenv("NUMABIND_STRICT")
    assert not strategies.auto_gate(t)[0]       # automatic binding refuses an uncertain board even when lenient


def test_uncertain_gpu_identity_under_partial_strictness_plans_with_the_note(monkeypatch):
    # strict="partial" raises only when nothing can be applied: a plan with a stated doubt is not nothing
    t = _uncertain(dgx(), 5)
    monkeypatch.setenv("NUMABIND_STRICT", "partial")
    plan = plan_for_gpu(5, topology=t)
    assert plan == P("56-111,168-223", "bind", "1")
    assert "identity uncertain (NVML lists 2 GPUs" in plan.reason
    monkeypatch.delenv("NUMABIND_STRICT")
    assert "identity uncertain" in plan_for_gpu(5, topology=t, strict="partial").reason
    assert plan_for_gpus([4, 5], topology=t, strict="partial").mem_nodes == frozenset({1})
    with pytest.raises(PlanError, match="strict mode"):
        plan_for_gpu(5, topology=t, strict=True)


# ----------------------------------------------------------------------------- weighted interleave by bandwidth
@pytest.mark.parametrize("bandwidths, weights", [
    ({0: 30000, 2: 10000}, {0: 3, 2: 1}),           # DRAM : CXL = 3 : 1
    ({0: 100, 1: 50, 2: 33}, {0: 6, 1: 3, 2: 2}),     # within 2 % of 100 : 50 : 33
    ({0: 51200, 1: 51200}, {0: 1, 1: 1}),
    ({5: 7.0, 9: 5.0}, {5: 7, 9: 5}),
    ({0: 1000, 1: 1}, {0: 255, 1: 1}),                # wider than the kernel's range: clamped
    ({3: 64000}, {3: 1}),
])
def test_weights_from_bandwidth(bandwidths, weights):
    assert strategies.weights_from_bandwidth(bandwidths) == weights


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(0, 64), st.integers(1, 10**6), min_size=1, max_size=8))
def test_weights_from_bandwidth_invariants(bandwidths):
    w = strategies.weights_from_bandwidth(bandwidths)
    assert set(w) == set(bandwidths)
    assert all(1 <= v <= 255 for v in w.values())
    import math
    assert math.gcd(*w.values()) == 1
    # more bandwidth never gets a smaller weight
    order = sorted(bandwidths, key=bandwidths.get)
    assert all(w[a] <= w[b] for a, b in zip(order, order[1:]))
    # when the ratios fit the kernel's range, they are kept to within the tolerance (or the rounding of 1)
    lo, hi = min(bandwidths.values()), max(bandwidths.values())
    if hi / lo <= 50:
        scale = w[order[0]] / bandwidths[order[0]]
        assert all(abs(w[n] - bandwidths[n] * scale) <= max(0.02 * bandwidths[n] * scale, 0.5) + 1e-9 for n in w)


@pytest.mark.parametrize("bad", [{}, {0: 0}, {0: -5}, {0: float("nan")}, {0: True}, {-1: 5}, {"0": 5}, [5]])
def test_weights_from_bandwidth_refuses_bad_input(bad):
    with pytest.raises(PlanError):
        strategies.weights_from_bandwidth(bad)


def test_bandwidth_weights_from_hmat(tmp_path):
    m = memory_only_nodes(tmp_path)
    m.set_hmat(0, read_bandwidth=30000, initiators={0}).set_hmat(1, read_bandwidth=30000, initiators={1})
    m.set_hmat(2, read_bandwidth=10000, initiators={0, 1}).write()
    topo = topology_module.discover(tmp_path)
    assert strategies.bandwidth_weights({0, 2}, topo) == {0: 3, 2: 1}
    assert strategies.bandwidth_weights([0, 1, 2], topo) == {0: 3, 1: 3, 2: 1}
    plan = Plan(mem_policy="weighted-interleave", mem_nodes={0, 2}, weights=strategies.bandwidth_weights({0, 2}, topo))
    assert plan.describe().endswith("(weights 0:3,2:1)")
    with pytest.raises(PlanError, match=r"no bandwidth figures for node\(s\) 3 .*HMAT"):
        strategies.bandwidth_weights({0, 3}, topo)
    with pytest.raises(PlanError, match="node 9 does not exist"):
        strategies.bandwidth_weights({9}, topo)


# ------------------------------------------------------------------ hybrid CPUs (issue 29 §2)
@pytest.fixture(scope="module")
def laptop(tmp_path_factory):
    from .fake.machines import hybrid_laptop

    root = tmp_path_factory.mktemp("laptop")
    hybrid_laptop(root)          # 6 P-cores with SMT (CPUs 0-11) + 8 E-cores (12-19), one node
    return topology_module.discover(root)


@pytest.mark.parametrize("mode", ["node", "socket", "core-complex"])
def test_modes_prefer_the_performance_cores_of_a_hybrid_cpu_and_say_so(laptop, mode):
    plan = plan_for_gpu(0, mode, laptop, nodes=[0])
    assert plan.cpus == L("0-11") and plan.mem_nodes == {0}
    assert "performance cores (CPUs 0-11), not the efficiency cores (CPUs 12-19; core kinds from " \
           "cpu_core/cpu_atom)" in plan.reason


def test_exclusive_splits_only_the_performance_cores(laptop):
    plans = [plan_for_gpu(i, "exclusive", laptop, nodes=[0, 0]) for i in range(2)]
    assert [p.cpus for p in plans] == [L("0-5"), L("6-11")]
    assert "6 cores of node 0 split among GPUs 0-1" in plans[0].reason


def test_explicit_cpus_on_a_hybrid_cpu_are_kept(laptop):
    plan = plan_for_gpu(0, "node", laptop, nodes=[0], cpus=["10-15"])
    assert plan.cpus == L("10-15") and "performance cores" not in plan.reason


def test_a_cpuset_of_efficiency_cores_only_keeps_them(laptop):
    narrowed = laptop.replace(allowed_cpus=L("12-19"))
    plan = plan_for_gpu(0, "node", narrowed, nodes=[0])
    assert plan.cpus == L("12-19") and "performance cores" not in plan.reason
