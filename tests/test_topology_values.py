"""The topology's value classes (Cpu, Cache, MemoryAccess, InterleaveWeights, Node, Topology): frozen values
(:class:`numabind._base.Value`, issue 43: the looks' start-up idiom, a frozen dataclass with slots without
:mod:`dataclasses`), equal, hashable, picklable; and what importing the topology leaves unloaded."""

from __future__ import annotations

import collections.abc
import copy
import dataclasses
import pickle
import typing

import pytest

from numabind._base import Value
from numabind._util import FrozenMap
from numabind.cpulist import parse_cpulist
from numabind.topology import Cache, Cpu, InterleaveWeights, MemoryAccess, Node, Topology, discover

from .fakesys import arm_clusters, snc
from .run_path import loaded_by

L = parse_cpulist
CLASSES = (Cpu, Cache, MemoryAccess, InterleaveWeights, Node, Topology)

#: What importing the topology leaves for later: the hwloc XML reader (an XML root only) and the NIC scan
#: (``Topology.nics``, when asked).
LATER = {"numabind._hwloc_xml", "numabind.iodevices"}


@pytest.fixture(autouse=True)
def _no_fsroot_env(monkeypatch):
    monkeypatch.delenv("NUMABIND_FSROOT", raising=False)


def _fields(value) -> dict:
    return {name: getattr(value, name) for name in type(value)._fields()}


def _names(cls) -> tuple[str, ...]:
    return cls._fields()


def _node() -> Node:
    return Node(0, L("0-3"), 1024, FrozenMap({0: 10, 1: 21}), MemoryAccess(100, 90, 80, 85, frozenset({0})))


def _topology() -> Topology:
    cpus = FrozenMap({c: Cpu(c, 0, 0, c, frozenset({c})) for c in range(4)})
    return Topology("/x", FrozenMap({0: _node()}), cpus, L("0-3"), L("0-7"), L("0-3"), frozenset({0}),
                    frozenset({0, 1}), frozenset({0}), caches=(Cache(3, "Unified", L("0-3"), 1 << 20),),
                    model_name="m", interleave_weights=InterleaveWeights(FrozenMap({0: 2}), True, "auto"),
                    affinity=L("0-1"))


def _one_of_each() -> list:
    topo = _topology()
    return [topo.cpus[0], topo.caches[0], topo.nodes[0].access, topo.interleave_weights, topo.nodes[0], topo]


# -- what is loaded -----------------------------------------------------------------


def test_discovery_of_this_machine_loads_neither_the_xml_reader_nor_the_nic_scan():
    assert loaded_by("import numabind\nnumabind.discover()") & LATER == set()


# -- construction ------------------------------------------------------------------


def test_positional_and_keyword_calls_and_defaults_are_as_in_a_dataclass():
    node = Node(0, frozenset({0}), 1024)
    assert node == Node(id=0, cpus=frozenset({0}), memory_bytes=1024, distances=FrozenMap(), access=None)
    assert node.distances == {} and isinstance(node.distances, FrozenMap) and node.access is None
    cpu = Cpu(1, 0, 0, 1, frozenset({1}))
    assert (cpu.cluster, cpu.cluster_cpus, cpu.capacity, cpu.kind) == (-1, frozenset(), None, None)
    assert Cache(1, "Data", frozenset({0})).size_bytes is None
    assert _fields(MemoryAccess()) == {"read_bandwidth": None, "write_bandwidth": None, "read_latency": None,
                                       "write_latency": None, "initiators": frozenset()}
    assert (InterleaveWeights(FrozenMap({0: 1})).auto, InterleaveWeights(FrozenMap()).auto_name) == (None, None)
    t = Topology("/", FrozenMap(), FrozenMap(), *(frozenset(),) * 6)
    assert (t.caches, t.model_name, t.cppc_highest_perf, t.gpus, t.allowed_source, t.interleave_weights,
            t.affinity, t.kinds_source) == ((), None, None, (), "", None, None, "")
    fields = r"Node\(\) takes the fields id, cpus, memory_bytes, distances, access once each, by position or name "
    with pytest.raises(TypeError, match=fields + r"\(id, cpus, memory_bytes required\), not 2 by position and \[\]"):
        Node(0, frozenset({0}))                       # memory_bytes is required, as it was
    with pytest.raises(TypeError, match=r"not 3 by position and \['colour'\] by name"):
        Node(0, frozenset({0}), 1, colour="red")
    with pytest.raises(TypeError, match=r"not 3 by position and \['id'\] by name"):
        Node(0, frozenset({0}), 1, id=1)
    with pytest.raises(TypeError, match=r"Cache\(\) takes the fields level, type, cpus, size_bytes .* not 5 by"):
        Cache(1, "Data", frozenset({0}), 1, 2)


def test_fields_are_in_the_dataclasses_order():
    assert _names(Cpu) == ("id", "node", "package", "core", "siblings", "cluster", "cluster_cpus", "capacity",
                           "kind")
    assert _names(Cache) == ("level", "type", "cpus", "size_bytes")
    assert _names(Node) == ("id", "cpus", "memory_bytes", "distances", "access")
    assert _names(Topology)[:3] == ("root", "nodes", "cpus") and _names(Topology)[-1] == "kinds_source"
    assert len(_names(Topology)) == 17
    assert all(issubclass(cls, Value) and cls.__slots__ == _names(cls) for cls in CLASSES)


def test_annotations_name_every_field_and_evaluate():
    """Type checkers (and ``typing.get_type_hints``) see each attribute's type; ``FrozenMap[int, Node]`` means
    something at run time."""
    for cls in CLASSES:
        assert set(typing.get_type_hints(cls)) == set(_names(cls)), cls
    assert typing.get_type_hints(Topology)["nodes"] == FrozenMap[int, Node]


def test_frozenmap_is_a_mapping():
    m = FrozenMap({2: "b", 1: "a"})
    assert isinstance(m, collections.abc.Mapping) and issubclass(FrozenMap, collections.abc.Mapping)
    assert list(m) == [1, 2] and m == {1: "a", 2: "b"} and pickle.loads(pickle.dumps(m)) == m
    assert FrozenMap[int, str].__origin__ is FrozenMap


# -- value semantics ---------------------------------------------------------------


def test_equality_and_hash_ignore_the_fields_that_did_not_compare():
    a = Cpu(0, 0, 0, 0, frozenset({0}))
    b = Cpu(0, 0, 0, 0, frozenset({0}), cluster=3, cluster_cpus=L("0-3"), capacity=446, kind="efficiency")
    assert a == b and hash(a) == hash(b) and not a != b
    assert a != Cpu(0, 1, 0, 0, frozenset({0}))
    assert Cache(2, "Unified", L("0-1"), 1 << 20) == Cache(2, "Unified", L("0-1"))
    assert hash(Cache(2, "Unified", L("0-1"), 1 << 20)) == hash(Cache(2, "Unified", L("0-1")))
    assert Cache(2, "Unified", L("0-1")) != Cache(2, "Data", L("0-1"))
    # the other classes compare every field
    assert Node(0, L("0"), 1) != Node(0, L("0"), 1, FrozenMap({0: 10}))
    assert Node(0, L("0"), 1) != Node(0, L("0"), 1, access=MemoryAccess())
    assert MemoryAccess(1) != MemoryAccess(1, initiators=frozenset({0}))
    assert InterleaveWeights(FrozenMap({0: 1})) != InterleaveWeights(FrozenMap({0: 1}), auto_name="auto")
    t = _topology()
    assert t == _topology() and hash(t) == hash(_topology())
    assert t != t.replace(kinds_source="cpu_capacity") and t != t.replace(affinity=None)
    assert Cpu(0, 0, 0, 0, frozenset({0})) != (0, 0, 0, 0, frozenset({0}))   # another class is never equal


@pytest.mark.parametrize("value", _one_of_each(), ids=lambda v: type(v).__name__)
def test_pickle_and_deepcopy_keep_every_field(value):
    for again in (pickle.loads(pickle.dumps(value)), copy.deepcopy(value), copy.copy(value)):
        assert type(again) is type(value) and again == value and hash(again) == hash(value)
        assert _fields(again) == _fields(value)


@pytest.mark.parametrize("value", _one_of_each(), ids=lambda v: type(v).__name__)
def test_frozen(value):
    name = _names(type(value))[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, name, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(value, name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.not_a_field = 1


def test_repr_lists_every_field_in_order():
    cpu = Cpu(2, 0, 1, 3, frozenset({2}), capacity=1024)
    assert repr(cpu) == ("Cpu(id=2, node=0, package=1, core=3, siblings=frozenset({2}), cluster=-1, "
                         "cluster_cpus=frozenset(), capacity=1024, kind=None)")
    assert repr(Cache(1, "Data", frozenset({0}), 32768)) == ("Cache(level=1, type='Data', cpus=frozenset({0}), "
                                                             "size_bytes=32768)")
    text = repr(_topology())
    assert text.startswith("Topology(root='/x', nodes=FrozenMap({0: Node(id=0, ")
    assert text.index("allowed_source=") < text.index("interleave_weights=") < text.index("kinds_source=")


def test_replace_builds_a_new_value():
    t = _topology()
    narrowed = t.replace(allowed_cpus=L("0-1"), allowed_source="cgroup")
    assert (narrowed.allowed_cpus, narrowed.allowed_source) == (L("0-1"), "cgroup")
    assert _fields(narrowed) == {**_fields(t), "allowed_cpus": L("0-1"), "allowed_source": "cgroup"}
    assert t.allowed_cpus == L("0-3")                 # the original is unchanged
    cpu = t.cpus[1].replace(kind="performance")
    assert cpu.kind == "performance" and cpu == t.cpus[1]
    with pytest.raises(TypeError, match="not_a_field"):
        t.replace(not_a_field=1)


@pytest.mark.parametrize("build", [snc, arm_clusters], ids=["snc", "arm_clusters"])
def test_discovered_values_pickle_and_rebuild_field_for_field(tmp_path, build):
    """The values discovery makes equal, hash and pickle as ``cls(**fields)``."""
    build(tmp_path)
    t = discover(tmp_path)
    for value in (*t.cpus.values(), *t.caches, *t.nodes.values(), t):
        rebuilt = type(value)(**_fields(value))
        assert rebuilt == value and hash(rebuilt) == hash(value) and _fields(rebuilt) == _fields(value)
    again = pickle.loads(pickle.dumps(t))
    assert again == t and hash(again) == hash(t)
    assert [_fields(c) for c in again.cpus.values()] == [_fields(c) for c in t.cpus.values()]
    assert [_fields(c) for c in again.caches] == [_fields(c) for c in t.caches]
