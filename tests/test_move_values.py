"""numabind move's value classes, and what ``numabind move`` loads at start-up (issue 28, P8; issue 43).

:class:`~numabind.relocate.ProcessMove`, :class:`~numabind.relocate.MoveReport`,
:class:`~numabind.residency.ThreadPlacement`, :class:`~numabind.residency.BoundBy` and
:class:`~numabind.residency.Locality` are frozen dataclasses with slots (``numabind move`` is not the run path):
the same parameters, order and defaults, lists kept as tuples and sets as frozensets, equality over the compared
fields, hashing, pickling, ``repr``, the frozen error. Their JSON stays what it was. Importing
:mod:`numabind.relocate` and :mod:`numabind.residency`, and running ``numabind move PID -C CPUS``, loads neither
``json`` nor ``logging`` (only ``--json`` and ``-v`` need them).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import pickle

import pytest

from numabind._proc import NodePages
from numabind.bind import ThreadResult
from numabind.plan import Plan
from numabind.relocate import MoveReport, ProcessMove
from numabind.residency import BoundBy, Locality, ThreadPlacement
from tests.run_path import loaded_by, move_modules

#: Standard library modules ``numabind move`` keeps off its start (psutil and argparse stay: the issue wants them).
HEAVY = {"json", "shutil", "logging"}
PAGE = os.sysconf("SC_PAGE_SIZE")

THREAD = ThreadResult(10, "w", frozenset({0, 1}), frozenset({1}), "bound")
PAGES = NodePages({0: 5, 1: 7}, {1: 2}, anon={0: 5, 1: 5}, file={1: 2}, policies={"default": 12})
LOC = Locality(10, name="w", pages=PAGES, page_size=4096, cpus=frozenset({1}), cpu_nodes=frozenset({0}),
               threads=(ThreadPlacement(10, "w", frozenset({1}), frozenset({0})),), mems_allowed=frozenset({0, 1}),
               bound=BoundBy("runtime record (fork)", Plan(cpus={1}), Plan(cpus={1})))
MOVE = dict(pid=10, name="w", threads=(THREAD,), pages_moved=3, pages_left=2, pages_left_shared=1, pages_refused=0,
            locality=LOC, error=None, warnings=("w1",), notes=("n1",))
REPORT = dict(requested=Plan(cpus={1}), backend="syscall", backend_reason="forced", processes=(ProcessMove(**MOVE),),
              warnings=("w1",), notes=("n1",))
PLACEMENT = dict(tid=11, name="io", cpus=frozenset({0}), nodes=frozenset({0}))
BOUND = dict(source="birth report (spawn)", requested=Plan(cpus={2}), applied=Plan(cpus={2}))
LOCALITY = dict(pid=10, name="w", error=None, pages=PAGES, page_size=4096, cpus=frozenset({1}),
                cpu_nodes=frozenset({0}), threads=LOC.threads, mems_allowed=frozenset({0, 1}), mem_policy="bind 1",
                bound=LOC.bound)
#: A value per field that differs from the ones above.
OTHER = dict(pid=11, name="x", threads=(), pages_moved=4, pages_left=0, pages_left_shared=0, pages_refused=None,
             locality=None, error="gone", warnings=(), notes=("n2",), requested=Plan(cpus={0}), backend="libnuma",
             backend_reason="first", processes=(), tid=12, cpus=frozenset({2}), nodes=frozenset({1}),
             source="runtime record (fork)", applied=None, pages=None, page_size=8192, cpu_nodes=frozenset({1}),
             mems_allowed=None, mem_policy=None, bound=None)
VALUES = [(ProcessMove, MOVE), (MoveReport, REPORT), (ThreadPlacement, PLACEMENT), (BoundBy, BOUND),
          (Locality, LOCALITY)]
IDS = [cls.__name__ for cls, _ in VALUES]

#: The dataclasses' parameters: name and default (``REQUIRED`` for none), in order.
REQUIRED = object()
SIGNATURES = {
    ProcessMove: [("pid", REQUIRED), ("name", "?"), ("threads", ()), ("pages_moved", None), ("pages_left", None),
                  ("pages_left_shared", None), ("pages_refused", None), ("locality", None), ("error", None),
                  ("warnings", ()), ("notes", ())],
    MoveReport: [("requested", REQUIRED), ("backend", REQUIRED), ("backend_reason", REQUIRED), ("processes", ()),
                 ("warnings", ()), ("notes", ())],
    ThreadPlacement: [("tid", REQUIRED), ("name", REQUIRED), ("cpus", REQUIRED), ("nodes", REQUIRED)],
    BoundBy: [("source", REQUIRED), ("requested", REQUIRED), ("applied", None)],
    Locality: [("pid", REQUIRED), ("name", "?"), ("error", None), ("pages", None), ("page_size", 0),
               ("cpus", frozenset()), ("cpu_nodes", frozenset()), ("threads", ()), ("mems_allowed", None),
               ("mem_policy", None), ("bound", None)],
}


@pytest.mark.parametrize("cls", list(SIGNATURES), ids=[c.__name__ for c in SIGNATURES])
def test_the_parameters_are_the_dataclasses(cls):
    params = list(inspect.signature(cls).parameters.values())
    assert [p.name for p in params] == [n for n, _ in SIGNATURES[cls]] == [f.name for f in dataclasses.fields(cls)]
    for p, (name, default) in zip(params, SIGNATURES[cls]):
        assert p.default is inspect.Parameter.empty if default is REQUIRED else p.default == default, name
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, name


def test_defaults_and_conversions():
    bare = ProcessMove(7)
    assert (bare.name, bare.threads, bare.pages_moved, bare.pages_left, bare.pages_left_shared, bare.pages_refused,
            bare.locality, bare.error, bare.warnings, bare.notes) == ("?", (), None, None, None, None, None, None,
                                                                       (), ())
    listed = ProcessMove(7, threads=[THREAD], warnings=["w"], notes=["n"])
    assert (listed.threads, listed.warnings, listed.notes) == ((THREAD,), ("w",), ("n",))
    report = MoveReport(Plan(cpus={1}), "syscall", "forced", [listed], ["w"], ["n"])
    assert (report.processes, report.warnings, report.notes) == ((listed,), ("w",), ("n",))
    assert MoveReport(Plan(cpus={1}), "syscall", "forced").processes == ()
    placement = ThreadPlacement(1, "w", {0, 1}, [0])
    assert (placement.cpus, placement.nodes) == (frozenset({0, 1}), frozenset({0}))
    assert type(placement.cpus) is frozenset and type(placement.nodes) is frozenset
    assert BoundBy("s", Plan(cpus={0})).applied is None
    loc = Locality(3, cpus={1}, cpu_nodes=[0], threads=[placement], mems_allowed={0})
    assert (loc.name, loc.error, loc.pages, loc.page_size, loc.cpus, loc.cpu_nodes, loc.threads, loc.mems_allowed,
            loc.mem_policy, loc.bound) == ("?", None, None, PAGE, frozenset({1}), frozenset({0}), (placement,),
                                           frozenset({0}), None, None)
    assert type(loc.mems_allowed) is frozenset and Locality(3).cpus == frozenset() == Locality(3).cpu_nodes
    for cls in (ProcessMove, MoveReport, ThreadPlacement, BoundBy, Locality):
        with pytest.raises(TypeError):
            cls()                      # a field without a default, as in the dataclass


@pytest.mark.parametrize("cls, fields", VALUES, ids=IDS)
def test_positional_and_keyword_calls_agree(cls, fields):
    assert cls(*fields.values()) == cls(**fields)


@pytest.mark.parametrize("cls, fields", VALUES, ids=IDS)
def test_equality_is_over_the_compared_fields(cls, fields):
    value = cls(**fields)
    hashable = cls is not Locality
    if hashable:
        assert hash(value) == hash(cls(**fields)) and len({value, cls(**fields)}) == 1
    for name in fields:
        changed = dataclasses.replace(value, **{name: OTHER[name]})
        assert getattr(changed, name) == OTHER[name] or (name == "page_size" and changed.page_size == 8192), name
        assert all(getattr(changed, n) == getattr(value, n) for n in fields if n != name), name
        if (cls, name) == (ProcessMove, "locality"):   # a snapshot: not part of equality, as compare=False was
            assert changed == value and hash(changed) == hash(value)
        else:
            assert changed != value, name
    assert dataclasses.replace(value) == value
    assert value != dataclasses.make_dataclass(cls.__name__, ["pid"])(10)    # another class: never equal


def test_a_locality_holds_dicts_and_does_not_hash():
    with pytest.raises(TypeError, match="unhashable"):
        hash(Locality(**LOCALITY))
    with pytest.raises(TypeError, match="unhashable"):
        hash(ProcessMove(**MOVE).locality)
    assert isinstance(hash(ProcessMove(**MOVE)), int)     # a move's locality is left out, as it was


@pytest.mark.parametrize("cls, fields", VALUES, ids=IDS)
def test_values_are_frozen_pickle_and_keep_their_annotations(cls, fields):
    value = cls(**fields)
    copy = pickle.loads(pickle.dumps(value))
    assert copy == value and repr(copy) == repr(value) and type(copy) is cls
    assert repr(value) == f"{cls.__name__}(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"
    first = next(iter(fields))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, first, fields[first])
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(value, first)
    with pytest.raises(TypeError, match="colour"):
        dataclasses.replace(value, colour="red")
    assert not hasattr(value, "__dict__")
    # the attribute types stay in the class body for type checkers, one per attribute, in order
    assert tuple(cls.__annotations__) == cls.__slots__ == tuple(fields)


def test_the_methods_stay():
    move = ProcessMove(**MOVE)
    assert (move.threads_bound, move.threads_exited, move.threads_refused) == (1, 0, 0)
    assert move.describe() == ("pid 10 (w): 1 thread(s) bound, on CPUs 1; pages: 3 moved, 2 left on other nodes "
                               "(1 shared or file-backed); now node 0: 0.0 MiB, node 1: 0.0 MiB")
    report = MoveReport(**REPORT)
    assert (report.ok, report.pids, report.threads, report.threads_bound, report.pages_moved, report.pages_left) == \
        (False, (10,), (THREAD,), 1, 3, 2)
    assert report.describe().splitlines()[1:] == ["backend:   syscall (forced)", f"moved:     {move.describe()}",
                                                  "warning:   w1", "note:      n1"]
    assert BoundBy(**BOUND).verified and Locality(**LOCALITY).remote_share == 7 / 12
    assert Locality.from_dict(LOC.to_dict()) == LOC


def test_the_json_is_what_it_was():
    """The dataclasses' ``to_dict`` output, byte for byte (sorted keys, as ``numabind move --json`` prints)."""
    got = json.dumps(MoveReport(**REPORT).to_dict(), sort_keys=True)
    assert got == (
        '{"backend": "syscall", "backend_reason": "forced", "notes": ["n1"], "ok": false, "pages_left": 2, '
        '"pages_moved": 3, "processes": [{"error": null, "name": "w", "node_pages": {"0": 5, "1": 7}, '
        '"notes": ["n1"], "pages_left": 2, "pages_left_shared": 1, "pages_moved": 3, "pages_refused": 0, "pid": 10, '
        '"threads": [' + json.dumps(THREAD.to_dict(), sort_keys=True) + '], "threads_bound": 1, '
        '"threads_exited": 0, "threads_refused": 0, "warnings": ["w1"]}], "requested": "' + Plan(cpus={1}).to_text()
        + '", "threads_bound": 1, "threads_exited": 0, "threads_refused": 0, "warnings": ["w1"]}')
    loc = json.dumps(Locality(**LOCALITY).to_dict(), sort_keys=True)
    assert loc == (
        '{"bound": {"applied": "' + Plan(cpus={1}).to_text() + '", "requested": "' + Plan(cpus={1}).to_text()
        + '", "source": "runtime record (fork)", "verified": true}, "cpu_nodes": "0", "cpus": "1", "error": null, '
        '"local_pages": 5, "mem_policy": "bind 1", "mems_allowed": "0-1", "name": "w", "page_size": 4096, '
        '"pages": {"anon": {"0": 5, "1": 5}, "file": {"1": 2}, "huge": {}, "policies": {"default": 12}, '
        '"shared": {"1": 2}, "total": {"0": 5, "1": 7}}, "pid": 10, "remote_pages": 7, '
        '"remote_share": 0.5833333333333334, "remote_share_by_kind": {"anon": 0.5, "file": 1.0, "huge": null}, '
        '"threads": [{"cpus": "1", "name": "w", "nodes": "0", "remote_share": 0.5833333333333334, "tid": 10}]}')


# -- what numabind move loads at start-up -------------------------------------------------------
def test_importing_the_move_modules_loads_no_heavy_module():
    loaded = loaded_by("import numabind.relocate, numabind.residency, numabind._proc, numabind.cli.move")
    assert {"numabind.relocate", "numabind.residency", "numabind.cli.move"} <= loaded
    assert not loaded & HEAVY, sorted(loaded & HEAVY)


def test_numabind_move_loads_no_heavy_module_but_argparses_shutil():
    """``numabind move PID -C CPUS`` on a running process: psutil and argparse are loaded (the issue keeps them);
    ``shutil`` only by argparse itself (its help formatter asks for the terminal's width)."""
    loaded = move_modules()
    assert {"numabind.relocate", "psutil", "argparse"} <= loaded
    assert not loaded & (HEAVY - {"shutil"}), sorted(loaded & HEAVY)
