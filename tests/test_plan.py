"""Tests of numabind.plan: the frozen Plan, its checks, numactl flags and text form (pure)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from numabind._util import FrozenMap
from numabind.errors import PlanError
from numabind.plan import MEM_POLICIES, Plan
from numabind.topology import Node, Topology

FAST = settings(max_examples=150, deadline=None)
GiB = 1 << 30


def make_topology(nodes: dict[int, tuple[set[int], int]], *, allowed_cpus=None, allowed_nodes=None,
                  source="test cpuset") -> Topology:
    """A Topology built directly: ``nodes`` maps id -> (cpus, memory_bytes)."""
    node_objs = {
        n: Node(id=n, cpus=frozenset(cpus), memory_bytes=mem,
                distances=FrozenMap({m: (10 if m == n else 20) for m in nodes}))
        for n, (cpus, mem) in nodes.items()
    }
    online = frozenset().union(*(frozenset(c) for c, _ in nodes.values()))
    with_memory = frozenset(n for n, (_, mem) in nodes.items() if mem)
    return Topology(
        root="/synthetic",
        nodes=FrozenMap(node_objs),
        cpus=FrozenMap(),
        online_cpus=online,
        possible_cpus=online,
        allowed_cpus=frozenset(online if allowed_cpus is None else allowed_cpus),
        online_nodes=frozenset(nodes),
        possible_nodes=frozenset(nodes),
        allowed_nodes=frozenset(with_memory if allowed_nodes is None else allowed_nodes),
        allowed_source=source,
    )


# The machine most tests use:
#   node 0: CPUs 0-3, memory        node 1: CPUs 4-7, memory (CPU 7 outside the cpuset)
#   node 2: memory only (CXL)       node 3: CPUs 8-9, no memory (CPU-only)
#   node 5: CPUs 10-11, memory, but outside the cpuset (CPUs and mems); node 4 does not exist
TOPO = make_topology(
    {0: ({0, 1, 2, 3}, 16 * GiB), 1: ({4, 5, 6, 7}, 16 * GiB), 2: (set(), 64 * GiB),
     3: ({8, 9}, 0), 5: ({10, 11}, 8 * GiB)},
    allowed_cpus={0, 1, 2, 3, 4, 5, 6, 8, 9},
    allowed_nodes={0, 1, 2},
)
ALLOWED = frozenset({0, 1, 2, 3, 4, 5, 6, 8, 9})

SIMPLE = make_topology({0: ({0, 1}, 4 * GiB)})


def fs(*ids: int) -> frozenset[int]:
    return frozenset(ids)


# ==========================================================================
# Construction
# ==========================================================================
def test_defaults_leave_everything_as_is():
    plan = Plan()
    assert plan.cpus is None and plan.mem_policy is None and plan.mem_nodes is None
    assert plan.migrate is False and plan.reason == ""


def test_design_example():
    plan = Plan(cpus=frozenset({0, 1}), mem_policy="bind", mem_nodes=frozenset({0}))
    assert plan.cpus == fs(0, 1) and plan.mem_nodes == fs(0)
    assert plan.to_numactl_args() == "--physcpubind=0-1 --membind=0"


@pytest.mark.parametrize(
    "cpus, expected",
    [("0-3,8", fs(0, 1, 2, 3, 8)), ([3, 1, 1], fs(1, 3)), ({2}, fs(2)), (range(2), fs(0, 1)), ((5,), fs(5)),
     (frozenset({7}), fs(7))],
)
def test_cpus_are_normalised_to_frozenset(cpus, expected):
    plan = Plan(cpus=cpus)
    assert plan.cpus == expected and type(plan.cpus) is frozenset


@pytest.mark.parametrize("kwargs, named, fix", [
    ({"cpus": 3}, "cpus", "cpus={3}"),
    ({"cpus": 0}, "cpus", "cpus={0}"),
    ({"mem_policy": "bind", "mem_nodes": 1}, "mem_nodes", "mem_nodes={1}"),
])
def test_a_bare_int_is_refused_with_the_fix(kwargs, named, fix):
    # issue 30: Plan(cpus=3) was silently CPU 3 (psutil's cpu_affinity(3) raises too)
    with pytest.raises(PlanError, match="iterable of ints") as err:
        Plan(**kwargs)
    assert named in str(err.value) and fix in str(err.value)
    assert isinstance(err.value, ValueError)


def test_mem_nodes_accept_a_nodelist_string():
    plan = Plan(mem_policy="interleave", mem_nodes="0-2")
    assert plan.mem_nodes == fs(0, 1, 2) and type(plan.mem_nodes) is frozenset


@pytest.mark.parametrize("policy", ["local", "default"])
def test_nodeless_policies_get_empty_nodes(policy):
    assert Plan(mem_policy=policy).mem_nodes == frozenset()
    assert Plan(mem_policy=policy, mem_nodes=[]) == Plan(mem_policy=policy)


def test_no_policy_with_empty_nodes_is_none():
    assert Plan(mem_nodes=frozenset()).mem_nodes is None


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(cpus=frozenset()), r"cpus is empty"),
        (dict(cpus=[]), r"cpus is empty"),
        (dict(cpus=""), r"cpus is empty"),
        (dict(cpus="0-3,x"), r"'0-3,x'"),
        (dict(cpus="3-1"), r"'3-1'"),
        (dict(cpus=[-1]), r"non-negative.*-1"),
        (dict(cpus=[1.5]), r"non-negative.*1\.5"),
        (dict(cpus=["0"]), r"non-negative.*'0'"),
        (dict(cpus=[True]), r"non-negative.*True"),
        (dict(cpus=True), r"cpus must be"),
        (dict(cpus=object()), r"cpus must be"),
        (dict(mem_policy="membind", mem_nodes={0}), r"mem_policy 'membind' is not one of"),
        (dict(mem_policy="BIND", mem_nodes={0}), r"'BIND'"),
        (dict(mem_policy="", mem_nodes={0}), r"mem_policy '' is not one of"),
        (dict(mem_policy="preferred", mem_nodes={0, 1}), r"'preferred' takes exactly one node.*'0-1'"),
        (dict(mem_policy="preferred", mem_nodes=set()), r"'preferred' needs at least one node"),
        (dict(mem_policy="preferred"), r"'preferred' needs at least one node"),
        (dict(mem_policy="preferred-many"), r"'preferred-many' needs at least one node"),
        (dict(mem_policy="interleave"), r"'interleave' needs at least one node"),
        (dict(mem_policy="interleave", mem_nodes=frozenset()), r"'interleave' needs at least one node"),
        (dict(mem_policy="bind"), r"'bind' needs at least one node"),
        (dict(mem_policy="bind", mem_nodes=""), r"'bind' needs at least one node"),
        (dict(mem_policy="local", mem_nodes={0}), r"'local' takes no nodes.*'0'"),
        (dict(mem_policy="default", mem_nodes={1, 2}), r"'default' takes no nodes.*'1-2'"),
        (dict(mem_nodes={0}), r"mem_nodes '0' given without a mem_policy"),
        (dict(mem_policy="bind", mem_nodes=[-3]), r"mem_nodes.*-3"),
        (dict(migrate=True), r"migrate=True needs mem_nodes"),
        (dict(cpus={0}, migrate=True), r"migrate=True needs mem_nodes"),
        (dict(mem_policy="local", migrate=True), r"migrate=True needs mem_nodes"),
        (dict(mem_policy="default", migrate=True), r"migrate=True needs mem_nodes"),
        (dict(mem_policy="bind", mem_nodes={0}, migrate=1), r"migrate must be True or False, got 1"),
        (dict(mem_policy="bind", mem_nodes={0}, migrate="yes"), r"migrate must be True or False"),
    ],
)
def test_construction_errors_name_the_problem(kwargs, pattern):
    with pytest.raises(PlanError, match=pattern):
        Plan(**kwargs)


def test_unknown_policy_message_lists_the_valid_ones():
    with pytest.raises(PlanError) as info:
        Plan(mem_policy="spread", mem_nodes={0})
    for policy in MEM_POLICIES:
        assert policy in str(info.value)


@pytest.mark.parametrize("policy", ["bind", "preferred", "preferred-many", "interleave"])
def test_migrate_allowed_with_node_policies(policy):
    assert Plan(mem_policy=policy, mem_nodes={1}, migrate=True).migrate is True


def test_preferred_many_with_one_or_more_nodes():
    assert Plan(mem_policy="preferred-many", mem_nodes={1}).mem_nodes == fs(1)
    assert Plan(mem_policy="preferred-many", mem_nodes={0, 2}).mem_nodes == fs(0, 2)


# ==========================================================================
# Value-object behaviour
# ==========================================================================
def test_frozen():
    plan = Plan(cpus={0})
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.cpus = frozenset({1})
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.reason = "changed"


def test_equality_and_hash_ignore_reason():
    a = Plan(cpus={0, 1}, mem_policy="bind", mem_nodes={0}, reason="one")
    b = Plan(cpus=[1, 0], mem_policy="bind", mem_nodes="0", reason="another")
    assert a == b and hash(a) == hash(b)
    assert len({a, b}) == 1
    assert a != Plan(cpus={0, 1}, mem_policy="bind", mem_nodes={0}, migrate=True)
    assert a != Plan(cpus={0, 1}, mem_policy="preferred", mem_nodes={0})
    assert a != Plan(cpus={0}, mem_policy="bind", mem_nodes={0})
    assert Plan() != Plan(mem_policy="default")
    assert Plan(mem_policy="local") != Plan(mem_policy="default")


def test_pickle_and_copy_keep_everything():
    plan = Plan(cpus={0, 5}, mem_policy="interleave", mem_nodes={0, 1}, migrate=True, reason="why")
    for clone in (pickle.loads(pickle.dumps(plan)), copy.deepcopy(plan), copy.copy(plan)):
        assert clone == plan and hash(clone) == hash(plan)
        assert clone.reason == "why" and clone.migrate is True
        assert type(clone.cpus) is frozenset


def test_replace_revalidates():
    plan = Plan(cpus={0}, mem_policy="bind", mem_nodes={0})
    assert plan.replace(cpus="1-2").cpus == fs(1, 2)
    with pytest.raises(PlanError):
        plan.replace(mem_policy="preferred", mem_nodes={0, 1})


@pytest.mark.parametrize(
    "plan, text",
    [
        (Plan(), "cpus unchanged, memory unchanged"),
        (Plan(cpus="0-3,8"), "cpus 0-3,8, memory unchanged"),
        (Plan(cpus={1}, mem_policy="bind", mem_nodes={0}), "cpus 1, memory bind 0"),
        (Plan(mem_policy="local"), "cpus unchanged, memory local"),
        (Plan(mem_policy="interleave", mem_nodes={0, 1}, migrate=True),
         "cpus unchanged, memory interleave 0-1, migrate"),
    ],
)
def test_describe(plan, text):
    assert plan.describe() == text
    assert str(plan) == f"Plan({text})"


# ==========================================================================
# validate(topology)
# ==========================================================================
@pytest.mark.parametrize(
    "plan",
    [
        Plan(),
        Plan(cpus=ALLOWED),
        Plan(cpus={8, 9}, mem_policy="bind", mem_nodes={0}),  # CPUs of a CPU-only node are fine
        Plan(mem_policy="bind", mem_nodes={2}),  # memory-only node as memory target
        Plan(mem_policy="interleave", mem_nodes={0, 1, 2}),
        Plan(mem_policy="preferred", mem_nodes={1}, migrate=True),
        Plan(mem_policy="preferred-many", mem_nodes={0, 2}),
        Plan(cpus={0}, mem_policy="local"),
        Plan(mem_policy="default"),
    ],
)
def test_validate_accepts_and_returns_self(plan):
    assert plan.validate(TOPO) is plan


@pytest.mark.parametrize(
    "plan, pattern",
    [
        (Plan(cpus={0, 12, 13}), r"CPUs 12-13 are not online.*online: 0-11"),
        (Plan(cpus={99}), r"CPUs 99 are not online"),
        (Plan(cpus={0, 7}), r"CPUs 7 are outside the CPUs this process may use.*0-6,8-9.*test cpuset"),
        (Plan(cpus={10, 11}), r"CPUs 10-11 are outside"),
        (Plan(mem_policy="bind", mem_nodes={0, 4}), r"NUMA nodes 4 do not exist.*nodes: 0-3,5"),
        (Plan(mem_policy="interleave", mem_nodes={6, 7}), r"NUMA nodes 6-7 do not exist"),
        (Plan(mem_policy="bind", mem_nodes={3}), r"NUMA nodes 3 have no memory.*bind"),
        (Plan(mem_policy="preferred", mem_nodes={3}), r"NUMA nodes 3 have no memory.*preferred"),
        (Plan(mem_policy="interleave", mem_nodes={0, 3}), r"NUMA nodes 3 have no memory"),
        (Plan(mem_policy="bind", mem_nodes={5}), r"NUMA nodes 5 are outside the memory nodes.*0-2.*test cpuset"),
        (Plan(mem_policy="preferred-many", mem_nodes={0, 5}), r"NUMA nodes 5 are outside"),
    ],
)
def test_validate_rejects_with_a_message_naming_the_problem(plan, pattern):
    with pytest.raises(PlanError, match=pattern):
        plan.validate(TOPO)


def test_validate_names_only_the_offending_ids():
    with pytest.raises(PlanError) as info:
        Plan(cpus={0, 1, 7}).validate(TOPO)
    assert str(info.value).startswith("CPUs 7 ")


def test_validate_without_a_source_says_the_cpuset():
    topo = make_topology({0: ({0, 1}, GiB)}, allowed_cpus={0}, source="")
    with pytest.raises(PlanError, match=r"its cpuset \(0, from the cpuset\); pick CPUs inside that set or widen"):
        Plan(cpus={1}).validate(topo)


# ==========================================================================
# to_numactl_args
# ==========================================================================
@pytest.mark.parametrize(
    "plan, args",
    [
        (Plan(), ""),
        (Plan(cpus={0, 1}, mem_policy="bind", mem_nodes={0}), "--physcpubind=0-1 --membind=0"),
        (Plan(cpus="0-3,8,10-14:2"), "--physcpubind=0-3,8,10,12,14"),
        (Plan(mem_policy="preferred", mem_nodes={1}), "--preferred=1"),
        (Plan(mem_policy="preferred-many", mem_nodes={0, 2}), "--preferred-many=0,2"),
        (Plan(mem_policy="interleave", mem_nodes={0, 1, 2, 3}), "--interleave=0-3"),
        (Plan(cpus={4}, mem_policy="local"), "--physcpubind=4 --localalloc"),
        (Plan(cpus={2}, mem_policy="bind", mem_nodes={0}, migrate=True), "--physcpubind=2 --membind=0"),
    ],
)
def test_to_numactl_args_exact(plan, args):
    assert plan.to_numactl_args() == args
    assert plan.to_numactl_argv() == args.split()


# ==========================================================================
# from_numactl_args
# ==========================================================================
@pytest.mark.parametrize(
    "spellings, expected",
    [
        (["--physcpubind=0-3", "--physcpubind 0-3", "-C0-3", "-C 0-3", ["-C", "0-3"], ["--physcpubind", "0-3"]],
         Plan(cpus="0-3")),
        (["--membind=0,1", "--membind 0,1", "-m0,1", "-m 0,1", ["-m", "0,1"]],
         Plan(mem_policy="bind", mem_nodes={0, 1})),
        (["--preferred=1", "--preferred 1", "-p1", "-p 1"], Plan(mem_policy="preferred", mem_nodes={1})),
        (["--preferred-many=0,2", "--preferred-many 0,2"], Plan(mem_policy="preferred-many", mem_nodes={0, 2})),
        (["--interleave=0-2", "--interleave 0-2", "-i0-2", "-i 0-2"],
         Plan(mem_policy="interleave", mem_nodes={0, 1, 2})),
        (["--localalloc", "-l", ["-l"]], Plan(mem_policy="local")),
        (["-C 1 -m 0", "--membind=0 --physcpubind=1", "-m0 -C1", ["--physcpubind", "1", "--membind=0"]],
         Plan(cpus={1}, mem_policy="bind", mem_nodes={0})),
        (["-l -C 0-1", "--physcpubind=0,1 --localalloc"], Plan(cpus={0, 1}, mem_policy="local")),
        (["", []], Plan()),
    ],
)
def test_from_numactl_args_all_spellings(spellings, expected):
    for args in spellings:
        assert Plan.from_numactl_args(args) == expected, args
        assert Plan.from_numactl_args(args, topology=TOPO) == expected, args


def test_from_numactl_args_records_a_reason_and_migrate():
    plan = Plan.from_numactl_args("-m 0", migrate=True)
    assert plan.migrate is True
    assert plan.reason == "numactl -m 0"
    given = Plan.from_numactl_args(["-m", "0"], reason="numabind run --membind=0")
    assert given.reason == "numabind run --membind=0" and given == plan.replace(migrate=False)


def test_from_numactl_args_quoted_values():
    assert Plan.from_numactl_args("--physcpubind='0-3,8'") == Plan(cpus="0-3,8")


@pytest.mark.parametrize(
    "args, expected",
    [
        # --cpunodebind: the nodes' CPUs, trimmed to the allowed set
        ("--cpunodebind=0", Plan(cpus="0-3")),
        ("-N 1", Plan(cpus="4-6")),  # CPU 7 is outside the cpuset
        ("-N1", Plan(cpus="4-6")),
        ("--cpunodebind 0,1", Plan(cpus="0-6")),
        ("-N 3", Plan(cpus="8-9")),  # CPU-only node
        ("-N all", Plan(cpus="0-6")),  # Mems_allowed (0-2), as libnuma: CPU-only node 3 is not in it
        ("-N !0", Plan(cpus="4-6")),   # node 2 (memory only) adds no CPU
        ("-N !0,3", Plan(cpus="4-6")),
        ("-N +0", Plan(cpus="0-3")),  # relative to Mems_allowed: 0, 1, 2
        ("-N +1", Plan(cpus="4-6")),
        ("-N +1-2", Plan(cpus="4-6")),
        ("-N !+0", Plan(cpus="4-6")),
        # --physcpubind with all / ! / +
        ("-C all", Plan(cpus=ALLOWED)),
        ("--physcpubind=all", Plan(cpus=ALLOWED)),
        ("-C !0-3", Plan(cpus="4-6,8-9")),
        ("-C !0-6,8", Plan(cpus={9})),
        ("-C +0-1", Plan(cpus="0-1")),
        ("-C +7", Plan(cpus={8})),  # the 8th allowed CPU (7 is not allowed)
        ("-C +8", Plan(cpus={9})),
        ("-C 7", Plan(cpus={7})),  # a plain list is taken as written; validate() refuses it
        # memory policies with all / ! / +
        ("-m all", Plan(mem_policy="bind", mem_nodes="0-2")),
        ("--membind=!0", Plan(mem_policy="bind", mem_nodes="1-2")),
        ("-m +1", Plan(mem_policy="bind", mem_nodes={1})),
        ("-i all", Plan(mem_policy="interleave", mem_nodes="0-2")),
        ("--interleave=!2", Plan(mem_policy="interleave", mem_nodes="0-1")),
        ("-p +2", Plan(mem_policy="preferred", mem_nodes={2})),
        ("-p !0-1", Plan(mem_policy="preferred", mem_nodes={2})),
        ("--preferred-many=all", Plan(mem_policy="preferred-many", mem_nodes="0-2")),
        ("--preferred-many=!1", Plan(mem_policy="preferred-many", mem_nodes="0,2")),
        ("-N 0 -m 0", Plan(cpus="0-3", mem_policy="bind", mem_nodes={0})),
        ("-N 1 -l", Plan(cpus="4-6", mem_policy="local")),
    ],
)
def test_from_numactl_args_with_topology(args, expected):
    assert Plan.from_numactl_args(args, topology=TOPO) == expected


def test_cpunodebind_result_validates():
    # the nodes' CPUs that are allowed (node 1's CPU 7 and node 5 are not): validate() keeps the plan as it is
    for args, cpus in (("-N all", {0, 1, 2, 3, 4, 5, 6}), ("-N 1", {4, 5, 6}), ("-N !0 -m all", {4, 5, 6}),
                       ("-C all -i all", {0, 1, 2, 3, 4, 5, 6, 8, 9})):
        plan = Plan.from_numactl_args(args, topology=TOPO)
        assert plan.cpus == cpus, args
        assert plan.validate(TOPO) == plan, args


@pytest.mark.parametrize(
    "args, pattern",
    [
        # node list for CPUs, all, ! and + need a topology
        ("-N 0", r"--cpunodebind needs a topology"),
        ("-C all", r"--physcpubind needs a topology"),
        ("-C !0", r"--physcpubind needs a topology"),
        ("-C +0", r"--physcpubind needs a topology"),
        ("-m all", r"--membind needs a topology"),
        ("-i !0", r"--interleave needs a topology"),
        ("-p +0", r"--preferred needs a topology"),
    ],
)
def test_from_numactl_args_needs_topology(args, pattern):
    with pytest.raises(PlanError, match=pattern):
        Plan.from_numactl_args(args)


@pytest.mark.parametrize(
    "args, pattern",
    [
        ("-N 2", r"node 2 has no CPUs \(a memory-only node\)"),
        ("--cpunodebind=0,2", r"node 2 has no CPUs"),
        ("-N 4", r"node 4 does not exist.*0-3,5"),
        ("-N 5", r"--cpunodebind=5.*10-11.*outside the CPUs this process may use \(0-6,8-9, from test cpuset\)"),
        ("-N !0,1,3", r"--cpunodebind='!0,1,3': nodes 2 have no CPUs"),
        ("-C !all", r"--physcpubind.*selects nothing"),
        ("-C +9", r"relative ids 9 exceed the 9 allowed entries"),
        ("-C +all", r"'\+all' is not a list"),
        ("-N +3", r"--cpunodebind: relative ids 3 exceed the 3 allowed entries"),
        ("-m +3", r"--membind: relative ids 3 exceed"),
        ("-p all", r"'preferred' takes exactly one node"),
        ("-p 0,1", r"'preferred' takes exactly one node"),
        ("-m !0-2", r"--membind.*selects nothing"),
        ("-C 3-1", r"'3-1'"),
        ("-C 0-4000000000", r"cap"),
        ("-m a", r"--membind 'a'"),
        ("--physcpubind=0;reboot", r"'0;reboot'"),
    ],
)
def test_from_numactl_args_topology_errors(args, pattern):
    with pytest.raises(PlanError, match=pattern):
        Plan.from_numactl_args(args, topology=TOPO)


@pytest.mark.parametrize(
    "args, pattern",
    [
        ("-C 0 -C 1", r"--physcpubind given twice"),
        ("--physcpubind=0 -C 1", r"--physcpubind given twice"),
        ("-m 0 --membind=1", r"--membind given twice"),
        ("-l --localalloc", r"--localalloc given twice"),
        ("-C 0 -N 0", r"either --physcpubind or --cpunodebind, not both"),
        ("-m 0 -i 1", r"one memory policy, got --membind, --interleave"),
        ("-p 0 -l", r"one memory policy, got --preferred, --localalloc"),
        ("--preferred=0 --preferred-many=1", r"one memory policy"),
        ("-m 0 -p 0 -i 0", r"one memory policy"),
        ("--membind=", r"--membind has an empty value"),
        ("-m", r"--membind needs a value"),
        ("-C", r"--physcpubind needs a value"),
        ("--physcpubind", r"--physcpubind needs a value"),
        ("--localalloc=1", r"--localalloc takes no value"),
        ("-l0", r"--localalloc takes no value"),
        ("--all=1", r"--all takes no value"),
        ("-b -m 0", r"NUMA balancing is a flag of the memory policy.*numabind run --balancing"),
        ("--balancing", r"Plan does not carry"),
        ("--cpubind=0 -N 0", r"--cpunodebind given twice"),
        ("-H", r"option '-H' is not supported"),
        ("--hardware", r"option '--hardware' is not supported"),
        ("--physcpu=0", r"option '--physcpu=0' is not supported"),
        ("--", r"option '--' is not supported"),
        ("-", r"unexpected '-'"),
        ("-C 0 python", r"unexpected 'python'.*options only"),
        ("0-3", r"unexpected '0-3'"),
        ("-C 0; rm -rf /", r"unexpected 'rm'"),
        ("-C 0;reboot", r"'0;reboot'"),
        ("-C $(id)", r"'\$\(id\)'"),
        ("-C `id`", r"'`id`'"),
        ("-C 0|cat", r"'0\|cat'"),
        ("-C '0", r"No closing quotation"),
        ("-C 0\\", r"No escaped character"),
        ("-C=0", r"'=0'"),
    ],
)
def test_from_numactl_args_rejects_duplicates_conflicts_and_junk(args, pattern):
    with pytest.raises(PlanError, match=pattern):
        Plan.from_numactl_args(args, topology=TOPO)


@pytest.mark.parametrize("argv", [[None], ["-C", 3], [b"-C0"]])
def test_from_numactl_args_rejects_non_string_tokens(argv):
    with pytest.raises(PlanError, match="must be strings"):
        Plan.from_numactl_args(argv)


def test_from_numactl_args_accepts_any_sequence():
    assert Plan.from_numactl_args(("-C", "1")) == Plan(cpus={1})


# --------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------
id_sets = st.frozensets(st.integers(min_value=0, max_value=2000), min_size=1, max_size=30)


@st.composite
def plans(draw, policies=MEM_POLICIES + (None,)) -> Plan:
    cpus = draw(st.none() | id_sets)
    policy = draw(st.sampled_from(policies))
    if policy is None or policy in ("local", "default"):
        nodes = None
    elif policy == "preferred":
        nodes = frozenset({draw(st.integers(0, 1023))})
    else:
        nodes = draw(st.frozensets(st.integers(0, 1023), min_size=1, max_size=10))
    migrate = policy in ("bind", "preferred", "preferred-many", "interleave") and draw(st.booleans())
    reason = draw(st.text(max_size=20))
    weights = None
    if policy == "weighted-interleave" and draw(st.booleans()):
        keys = draw(st.frozensets(st.sampled_from(sorted(nodes)), min_size=1))
        weights = {n: draw(st.integers(1, 255)) for n in keys}
    return Plan(cpus=cpus, mem_policy=policy, mem_nodes=nodes, migrate=migrate, reason=reason, weights=weights)


# numactl has no flag for MPOL_DEFAULT, so "default" is not part of this round trip.
@FAST
@given(plans(policies=("bind", "preferred", "preferred-many", "interleave", "local", None)))
@example(Plan(cpus={0}, mem_policy="weighted-interleave", mem_nodes={0, 2}))
@example(Plan(cpus={0, 1}, mem_policy="bind", mem_nodes={0}))
@example(Plan(mem_policy="local"))
def test_numactl_args_roundtrip(plan):
    args = plan.to_numactl_args()
    assert Plan.from_numactl_args(args, migrate=plan.migrate) == plan
    assert Plan.from_numactl_args(plan.to_numactl_argv(), migrate=plan.migrate) == plan
    # and the arguments are plain tokens a shell would not change
    assert all(re.fullmatch(r"--[a-z-]+(=[0-9,\-]+)?", tok) for tok in plan.to_numactl_argv())


@FAST
@given(plans())
@example(Plan())
@example(Plan(mem_policy="default"))
@example(Plan(mem_policy="local"))
@example(Plan(cpus={0}, mem_policy="preferred", mem_nodes={1023}, migrate=True))
def test_text_roundtrip(plan):
    text = plan.to_text()
    back = Plan.from_text(text)
    assert back == plan
    assert back.migrate == plan.migrate
    assert back.to_text() == text
    assert re.fullmatch(r"[a-z0-9;=:,\-]+", text)  # nothing a shell or an env parser minds


@pytest.mark.parametrize(
    "plan, text",
    [
        (Plan(), "v1;cpus=-;mem=-;migrate=0"),
        (Plan(cpus="0-3"), "v1;cpus=0-3;mem=-;migrate=0"),
        (Plan(cpus="0-3", mem_policy="bind", mem_nodes={0}), "v1;cpus=0-3;mem=bind:0;migrate=0"),
        (Plan(mem_policy="interleave", mem_nodes="0-1,3", migrate=True), "v1;cpus=-;mem=interleave:0-1,3;migrate=1"),
        (Plan(mem_policy="preferred-many", mem_nodes={2}), "v1;cpus=-;mem=preferred-many:2;migrate=0"),
        (Plan(mem_policy="local"), "v1;cpus=-;mem=local:;migrate=0"),
        (Plan(mem_policy="default"), "v1;cpus=-;mem=default:;migrate=0"),
    ],
)
def test_to_text_exact(plan, text):
    assert plan.to_text() == text
    assert Plan.from_text(text) == plan


def test_from_text_accepts_the_grammar_s_stride_form():
    assert Plan.from_text("v1;cpus=0-15:2/4;mem=-;migrate=0").cpus == fs(0, 1, 4, 5, 8, 9, 12, 13)


VALID = "v1;cpus=0-3;mem=bind:0;migrate=0"
HOSTILE_TEXT = [
    "",
    " ",
    "v1",
    VALID + "\n",
    " " + VALID,
    VALID + ";",
    VALID + ";extra=1",
    VALID + ";migrate=1",
    "v1;cpus=0-3;mem=bind:0",
    "v1;cpus=0-3;migrate=0",
    "v1;mem=bind:0;cpus=0-3;migrate=0",  # fields out of order
    "v2;cpus=0-3;mem=bind:0;migrate=0",
    "v0;cpus=0-3;mem=bind:0;migrate=0",
    "V1;cpus=0-3;mem=bind:0;migrate=0",
    "v1;CPUS=0-3;mem=bind:0;migrate=0",
    "v1;cpus=0-3;mem=bind:0;migrate=2",
    "v1;cpus=0-3;mem=bind:0;migrate=true",
    "v1;cpus=0-3;mem=bind:0;migrate=",
    "v1;cpus=;mem=bind:0;migrate=0",
    "v1;cpus= 0-3;mem=bind:0;migrate=0",
    "v1;cpus=0-3 ;mem=bind:0;migrate=0",
    "v1;cpus=0-3\n;mem=bind:0;migrate=0",
    "v1;cpus=0-3;mem=bind;migrate=0",
    "v1;cpus=0-3;mem=bind:;migrate=0",  # bind needs nodes
    "v1;cpus=0-3;mem=membind:0;migrate=0",
    "v1;cpus=0-3;mem=evil:0;migrate=0",
    "v1;cpus=0-3;mem=local:0;migrate=0",
    "v1;cpus=0-3;mem=preferred:0-1;migrate=0",
    "v1;cpus=-;mem=-;migrate=1",
    "v1;cpus=0-3;mem=local:;migrate=1",
    "v1;cpus=3-1;mem=-;migrate=0",
    "v1;cpus=1,,2;mem=-;migrate=0",
    "v1;cpus=0-4000000000;mem=-;migrate=0",
    "v1;cpus=0-3;mem=bind:0-99999999;migrate=0",
    "v1;cpus=0-3:0/4;mem=-;migrate=0",
    "v1;cpus=,;mem=-;migrate=0",
    "v1;cpus=0-３;mem=-;migrate=0",  # fullwidth digit
    "v1;cpus=٠;mem=-;migrate=0",  # Arabic-Indic digit
    "v1;cpus=$(reboot);mem=-;migrate=0",
    "v1;cpus=`id`;mem=-;migrate=0",
    "v1;cpus=0-3;mem=bind:0;migrate=0 && rm -rf /",
    "v1;cpus=0-3;mem=bind:0;migrate=0|sh",
    "v1;cpus=0-3;mem=bind:0;migrate=0;$(id)",
    "v1;cpus=0-3;mem=bind:0 ;migrate=0",
    "v1;cpus=0-3;mem=bind:0;migrate=0\x00",
    "v1;cpus=0-3';mem=-;migrate=0",
    "__import__('os').system('id')",
    "cos\nsystem\n(S'id'\ntR.",  # a pickle
    "v1;cpus=" + "0," * 40000 + "1;mem=-;migrate=0",  # over the size limit
    "x" * 100_000,
    "v1;cpus=" + "9" * 5000 + ";mem=-;migrate=0",  # more digits than int() takes
]


@pytest.mark.parametrize("text", HOSTILE_TEXT, ids=lambda t: repr(t[:40]))
def test_from_text_rejects_hostile_or_garbled_text(text):
    with pytest.raises(PlanError):
        Plan.from_text(text)


@pytest.mark.parametrize("text", [VALID + ";extra", "v2;cpus=0;mem=-;migrate=0", "v1;cpus=$(reboot);mem=-;migrate=0"])
def test_from_text_error_names_the_text(text):
    with pytest.raises(PlanError) as info:
        Plan.from_text(text)
    assert repr(text) in str(info.value)


def test_from_text_error_on_huge_input_is_short():
    with pytest.raises(PlanError) as info:
        Plan.from_text("x" * 1_000_000)
    assert len(str(info.value)) < 500 and "64 KiB" in str(info.value)


@pytest.mark.parametrize("value", [None, b"v1;cpus=0;mem=-;migrate=0", 1, ["v1"]])
def test_from_text_rejects_non_strings(value):
    with pytest.raises(PlanError):
        Plan.from_text(value)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
@example("v1;cpus=0;mem=-;migrate=0")
def test_from_text_fuzz_only_plan_error(text):
    try:
        plan = Plan.from_text(text)
    except PlanError:
        return
    # anything accepted is a real plan whose text form re-parses to itself
    assert Plan.from_text(plan.to_text()) == plan


@settings(max_examples=300, deadline=None)
@given(plans(), st.data())
def test_from_text_mutations_only_plan_error(plan, data):
    text = plan.to_text()
    pos = data.draw(st.integers(0, len(text)))
    junk = data.draw(st.text(alphabet=";=:,-/0123456789abcdemv $`'\"\n|&()\\", min_size=1, max_size=4))
    mutated = text[:pos] + junk + text[pos:]
    try:
        back = Plan.from_text(mutated)
    except PlanError:
        return
    assert isinstance(back, Plan)
    assert re.fullmatch(r"[a-z0-9;=:,\-/]+", mutated)  # nothing hostile got through


# --------------------------------------------------------------------------- issue 15, item 8: id types
NOT_IDS = [b"1", b"0-1", bytearray(b"1"), memoryview(b"1"), 1.0, 2.5, True, False, [1.0], [True], {2, True},
           (1, "2"), [None], {1: "x", 2.0: "y"}, object()]


@pytest.mark.parametrize("value", NOT_IDS, ids=[repr(v)[:30] for v in NOT_IDS])
@pytest.mark.parametrize("field", ["cpus", "mem_nodes"])
def test_bytes_floats_and_bools_are_not_ids(field, value):
    """``Plan(cpus=b"1")`` once meant CPU 49 (the byte's value): bytes, floats and bools are refused."""
    kwargs = {field: value} if field == "cpus" else {"mem_policy": "bind", field: value}
    with pytest.raises(PlanError, match=field) as exc:
        Plan(**kwargs)
    if isinstance(value, (bytes, bytearray, memoryview)):
        assert "bytes" in str(exc.value) and "decode" in str(exc.value)


@given(st.binary(min_size=1, max_size=8))
@FAST
def test_no_bytes_value_is_a_plan(data):
    with pytest.raises(PlanError):
        Plan(cpus=data)
    with pytest.raises(PlanError):
        Plan(mem_policy="interleave", mem_nodes=data)


def test_ids_above_the_cap_are_refused():
    from numabind.cpulist import MAX_ID

    assert Plan(cpus={MAX_ID}).cpus == {MAX_ID}
    with pytest.raises(PlanError, match="larger than numabind's cap"):
        Plan(cpus={MAX_ID + 1})


def test_plan_for_gpu_with_a_malformed_cpu_list_is_a_plan_error(tmp_path):
    """``plan_for_gpu(0, cpus=[0])`` raised a raw TypeError; now a PlanError that says the expected shape."""
    from numabind import discover, plan_for_gpu
    from tests.fakegpu import add_nvidia_gpu
    from tests.fakesys import two_sockets

    two_sockets(tmp_path, cpus_per_socket=4, smt=False)
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=0, local_cpulist="0-3")
    topo = discover(str(tmp_path))
    assert plan_for_gpu(0, topology=topo, cpus=["1-2"]).cpus == {1, 2}
    assert plan_for_gpu(0, topology=topo, cpus=[{1, 2}]).cpus == {1, 2}
    for cpus in ([0], [b"1"], [1.5], [[1.0]], [{True}], "0-3", b"0-3", 0, [[[0]]]):
        with pytest.raises(PlanError, match=r"cpus|CPU list") as exc:
            plan_for_gpu(0, topology=topo, cpus=cpus)
        assert "cpulist string or a set of ints" in str(exc.value) or "non-negative ints" in str(exc.value), cpus


# ==========================================================================
# Weighted interleave (MPOL_WEIGHTED_INTERLEAVE) and its weights
# ==========================================================================
def test_weighted_interleave_plan_with_weights():
    p = Plan(cpus={0}, mem_policy="weighted-interleave", mem_nodes={0, 1}, weights={0: 3, 1: 1})
    assert p.weights == {0: 3, 1: 1} and isinstance(p.weights, FrozenMap)
    assert p == Plan(cpus={0}, mem_policy="weighted-interleave", mem_nodes={0, 1}, weights="0:3,1:1")
    assert p != p.replace(weights={0: 2, 1: 1}) and p != p.replace(weights=None)
    assert hash(p) == hash(Plan(cpus={0}, mem_policy="weighted-interleave", mem_nodes={0, 1}, weights="1:1,0:3"))
    assert p.describe() == "cpus 0, memory weighted-interleave 0-1 (weights 0:3,1:1)"
    assert pickle.loads(pickle.dumps(p)) == p and copy.deepcopy(p) == p


def test_weights_may_cover_some_of_the_nodes_and_empty_means_none():
    assert Plan(mem_policy="weighted-interleave", mem_nodes={0, 1, 2}, weights={2: 7}).weights == {2: 7}
    assert Plan(mem_policy="weighted-interleave", mem_nodes={0, 1}, weights={}).weights is None
    assert Plan(mem_policy="weighted-interleave", mem_nodes={0, 1}).weights is None


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(mem_policy="interleave", mem_nodes={0, 1}, weights={0: 3}), "weighted-interleave.*not 'interleave'"),
        (dict(weights={0: 3}), "not None"),
        (dict(mem_policy="weighted-interleave", mem_nodes={0, 1}, weights={2: 3}), "nodes 2 .*not in mem_nodes 0-1"),
        (dict(mem_policy="weighted-interleave", mem_nodes={0}, weights={0: 0}), "weight 0; .* from 1 to 255"),
        (dict(mem_policy="weighted-interleave", mem_nodes={0}, weights={0: 256}), "weight 256"),
        (dict(mem_policy="weighted-interleave", mem_nodes={0}, weights={0: 1.5}), "weight 1.5"),
        (dict(mem_policy="weighted-interleave", mem_nodes={0}, weights={0: True}), "weight True"),
        (dict(mem_policy="weighted-interleave", mem_nodes={0}, weights={"0": 1}), "node '0'"),
        (dict(mem_policy="weighted-interleave", mem_nodes={0}, weights=[3]), "mapping node -> weight"),
        (dict(mem_policy="weighted-interleave", mem_nodes={0}, weights="0=3"), "'0=3' is not NODE:WEIGHT"),
        (dict(mem_policy="weighted-interleave", mem_nodes={0}, weights="0:1,0:2"), "node 0 is given twice"),
        (dict(mem_policy="weighted-interleave"), "needs at least one node"),
    ],
)
def test_weights_errors_name_the_problem(kwargs, pattern):
    with pytest.raises(PlanError, match=pattern):
        Plan(**kwargs)


def test_weighted_interleave_numactl_spelling_and_parsing():
    p = Plan(cpus={1}, mem_policy="weighted-interleave", mem_nodes={0, 2})
    assert p.to_numactl_args() == "--physcpubind=1 --weighted-interleave=0,2"
    for args in ("-w 0,2 -C 1", "--weighted-interleave=0,2 --physcpubind=1", "-w0,2 -C1", "--weighted-interleave 0,2 -C 1"):
        assert Plan.from_numactl_args(args) == p, args
    with_w = Plan.from_numactl_args("-w 0,2 --weights 0:3,2:1")
    assert with_w.weights == {0: 3, 2: 1} and with_w.mem_nodes == {0, 2}
    assert Plan.from_numactl_args("--weighted-interleave=all", topology=TOPO).mem_nodes == TOPO.allowed_nodes


@pytest.mark.parametrize(
    "args, pattern",
    [
        ("--weights 0:1", "--weights goes with --weighted-interleave"),
        ("-i 0,1 --weights 0:1", "--weights goes with --weighted-interleave"),
        ("-w 0,1 -i 0,1", "one memory policy"),
        ("-w 0,1 --weights 3:1", "not in mem_nodes"),
        ("-w 0,1 --weights 0:3 --weights 1:1", "--weights given twice"),
        ("-w 0,1 --weights=", "empty value"),
    ],
)
def test_weighted_interleave_numactl_errors(args, pattern):
    with pytest.raises(PlanError, match=pattern):
        Plan.from_numactl_args(args)


def test_numactl_cannot_carry_weights():
    p = Plan(mem_policy="weighted-interleave", mem_nodes={0, 1}, weights={0: 3})
    with pytest.raises(PlanError, match="no option for interleave weights .*--set-weights"):
        p.to_numactl_argv()
    assert p.replace(weights=None).to_numactl_argv() == ["--weighted-interleave=0-1"]


@pytest.mark.parametrize(
    "plan, text",
    [
        (Plan(mem_policy="weighted-interleave", mem_nodes={0, 1}), "v1;cpus=-;mem=weighted-interleave:0-1;migrate=0"),
        (Plan(cpus={3}, mem_policy="weighted-interleave", mem_nodes={0, 1}, weights={1: 1, 0: 3}, migrate=True),
         "v1;cpus=3;mem=weighted-interleave:0-1;migrate=1;weights=0:3,1:1"),
    ],
)
def test_weighted_text_exact(plan, text):
    assert plan.to_text() == text
    assert Plan.from_text(text) == plan


@pytest.mark.parametrize("text", [
    "v1;cpus=-;mem=bind:0;migrate=0;weights=0:3",                        # weights need the weighted policy
    "v1;cpus=-;mem=weighted-interleave:0;migrate=0;weights=",             # empty
    "v1;cpus=-;mem=weighted-interleave:0;migrate=0;weights=0:999",        # out of range
    "v1;cpus=-;mem=weighted-interleave:0;migrate=0;weights=1:3",          # not one of the nodes
    "v1;cpus=-;mem=weighted-interleave:0;migrate=0;weights=0:3;x",        # trailing junk
    "v1;cpus=-;mem=weighted-interleave:0;weights=0:3;migrate=0",          # out of order
])
def test_weighted_text_rejects_bad_weights(text):
    with pytest.raises(PlanError):
        Plan.from_text(text)


def test_parse_and_format_weights():
    from numabind.plan import format_weights, parse_weights

    assert parse_weights("0:3, 1:1") == {0: 3, 1: 1}
    assert format_weights({1: 1, 0: 3}) == "0:3,1:1"
    assert parse_weights(format_weights({5: 200, 0: 1})) == {5: 200, 0: 1}
    with pytest.raises(PlanError, match="weights"):
        parse_weights(None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# numactl's other spellings, --all and device specifiers (issue 16)
# --------------------------------------------------------------------------
def test_from_numactl_args_short_preferred_many_and_old_cpubind():
    assert Plan.from_numactl_args("-P 0,2") == Plan(mem_policy="preferred-many", mem_nodes={0, 2})
    assert Plan.from_numactl_args("-P0,2") == Plan.from_numactl_args("--preferred-many=0,2")
    assert Plan.from_numactl_args("--cpubind=1", topology=TOPO) == Plan.from_numactl_args("-N 1", topology=TOPO)
    assert Plan.from_numactl_args(["--cpubind", "0"], topology=TOPO).cpus == frozenset(range(4))


@pytest.mark.parametrize("args, cpuset_aware, whole", [
    # CPUs: the lists count every online CPU, and the kernel keeps those of the cpuset (CPU 7, 10-11 are not)
    ("-C !0,9", Plan(cpus="1-6,8"), Plan(cpus="1-6,8")),
    ("-C +8", Plan(cpus={9}), Plan(cpus={8})),                         # the 9th online CPU
    ("-N 1", Plan(cpus="4-6"), Plan(cpus="4-6")),                      # CPU 7 is outside the cpuset
    ("-N !0", Plan(cpus="4-6"), Plan(cpus="4-6,8-9")),                 # nodes: every node, not Mems_allowed
    ("-N all", Plan(cpus="0-6"), Plan(cpus="0-6,8-9")),
    ("-m all", Plan(mem_policy="bind", mem_nodes="0-2"), Plan(mem_policy="bind", mem_nodes="0-2,5")),
    ("-i !0", Plan(mem_policy="interleave", mem_nodes="1-2"), Plan(mem_policy="interleave", mem_nodes="1-2,5")),
])
def test_all_widens_every_list_to_the_whole_machine(args, cpuset_aware, whole):
    """numactl's -a/--all: 'all', '!' and '+' count the whole machine, not the process's sets, on the whole
    line; the CPUs the kernel would keep are those of the cpuset."""
    assert Plan.from_numactl_args(args, topology=TOPO) == cpuset_aware
    for flag in ("-a", "--all"):
        assert Plan.from_numactl_args(f"{flag} {args}", topology=TOPO) == whole
        assert Plan.from_numactl_args(f"{args} {flag}", topology=TOPO) == whole


def test_all_given_twice_or_with_a_value_is_refused():
    with pytest.raises(PlanError, match="--all given twice"):
        Plan.from_numactl_args("-a --all -m 0")
    with pytest.raises(PlanError, match="--all takes no value"):
        Plan.from_numactl_args("-a1 -m 0")


class _Devices:
    """A stand-in for numabind.iodevices.DeviceNodes: specifier -> node, recording what was asked."""

    def __init__(self, nodes):
        self.nodes, self.asked = nodes, []

    def node_of(self, spec):
        self.asked.append(spec)
        if spec not in self.nodes:
            raise PlanError(f"{spec!r}: no such device")
        return self.nodes[spec]


@pytest.mark.parametrize("args, expected, asked", [
    ("-m pci:0000:18:00.0", Plan(mem_policy="bind", mem_nodes={1}), "pci:0000:18:00.0"),
    ("--membind=netdev:eth0", Plan(mem_policy="bind", mem_nodes={0}), "netdev:eth0"),
    ("-N netdev:eth0", Plan(cpus="0-3"), "netdev:eth0"),
    ("--cpunodebind=pci:0000:18:00.0 --preferred=pci:0000:18:00.0",
     Plan(cpus="4-6", mem_policy="preferred", mem_nodes={1}), "pci:0000:18:00.0"),
    ("-i !block:nvme0n1", Plan(mem_policy="interleave", mem_nodes="0-1"), "block:nvme0n1"),
    ("-P file:/data/x", Plan(mem_policy="preferred-many", mem_nodes={2}), "file:/data/x"),
])
def test_device_specifiers_are_resolved_by_the_given_function(args, expected, asked):
    devices = _Devices({"pci:0000:18:00.0": 1, "netdev:eth0": 0, "block:nvme0n1": 2, "file:/data/x": 2})
    assert Plan.from_numactl_args(args, topology=TOPO, device_node=devices.node_of) == expected
    assert set(devices.asked) == {asked}


@pytest.mark.parametrize("args, pattern", [
    ("-m pci:0000:18:00.0", r"names a device.*device_node="),                       # planning reads nothing
    ("-C pci:0000:18:00.0", r"a device sits on a node, not on CPUs; use --cpunodebind=pci:0000:18:00.0"),
    ("-m ip:example.com", r"does not look up routes.*netdev:"),
    ("-m 0-3:2", r"stride"),
    ("-m pci:0000:99:00.0", r"no such device"),                                     # the resolver's own error
    ("-N block:nvme0n1", r"node 2 has no CPUs"),                                   # then the usual checks
])
def test_device_specifier_errors(args, pattern):
    devices = _Devices({"block:nvme0n1": 2}) if "99" in args or "nvme" in args else None
    with pytest.raises(PlanError, match=pattern):
        Plan.from_numactl_args(args, topology=TOPO, device_node=None if devices is None else devices.node_of)


def test_numactls_vocabulary_names_numabinds_policies_only():
    """plan.py types the table's policy words as MemPolicy: each is one of MEM_POLICIES, and every policy that
    takes nodes has its numactl option (what Plan.to_numactl_args writes and from_numactl_args reads back)."""
    from numabind import _numactl, plan

    named = {row[3] for row in _numactl.OPTIONS.values() if row[3]}
    assert named <= set(MEM_POLICIES) and set(_numactl.POLICIES) == set(MEM_POLICIES)
    assert set(plan._NUMACTL_MEM_OPTION.values()) == named
    assert set(plan._NUMACTL_MEM_FLAG) == named - {"local"}
    for policy, flag in plan._NUMACTL_MEM_FLAG.items():
        assert Plan.from_numactl_args([f"{flag}=0"]).mem_policy == policy
