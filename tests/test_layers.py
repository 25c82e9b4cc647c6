"""The package reads as floors and every import goes down them (STYLE.md "Floors", DESIGN.md "Layers").

The graph is built with ``ast`` from every ``import`` in ``src/numabind``: module level, inside functions and under
``TYPE_CHECKING`` alike, plus ``importlib.import_module``/``sys.modules`` look-ups by name. It fails on a cycle, on an
import that runs up the floors and on an import of a ``_private`` name another module defines.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

import numabind

ROOT = Path(numabind.__file__).resolve().parent

# Bottom to top. A module of a package not listed by name sits on its package's floor. The top-level
# ``numabind/__init__`` re-exports the public API and sits above everything.
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("values", ("_version", "_vendors", "_numactl", "errors", "_util", "_base", "types", "cpulist", "plan", "_native")),
    ("readers", ("_fs", "_dump", "_cgroup", "_hwloc_xml", "_facts")),
    ("the machine", ("devices", "iodevices", "topology", "live", "_proc", "nodestat")),
    ("planning", ("strategies", "rank")),
    ("the kernel door", ("backends",)),
    ("apply / verify", ("records", "residency", "weights", "_transaction", "bind", "verify", "auto", "memory", "relocate",
                        "threads", "preflight", "irq", "named")),
    ("process integration", ("process",)),
    ("adapters", ("compat", "integrations")),
    ("CLI", ("cli", "__main__", "gather")),
    ("public API", ("",)),
)


def _module_files() -> dict[str, Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(["numabind", *parts])] = path
    return mods


MODULES = _module_files()


def floor_of(module: str) -> int:
    rel = module.split(".")[1:]
    for depth in range(len(rel), -1, -1):
        name = ".".join(rel[:depth])
        for level, (_, names) in enumerate(FLOORS):
            if name in names:
                return level
    raise AssertionError(f"{module} sits on no floor: add it to FLOORS in tests/test_layers.py")


def room_of(module: str) -> str:
    """A package's ``__init__`` and its children are one room; the top-level package is a room of its own."""
    if module == "numabind" or MODULES.get(module, Path()).name == "__init__.py":
        return module
    return module.rpartition(".")[0] if module.count(".") > 1 else module


def _defined_names(module: str) -> set[str]:
    """Names a module binds at its top level (what ``from module import name`` can take from it)."""
    tree = ast.parse(MODULES[module].read_text())
    names = set()
    for node in tree.body:
        for sub in ast.walk(node) if isinstance(node, ast.If | ast.Try) else (node,):
            if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(sub.name)
            elif isinstance(sub, ast.Assign | ast.AnnAssign | ast.AugAssign):
                for target in sub.targets if isinstance(sub, ast.Assign) else (sub.target,):
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def _const_module_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in MODULES:
        return node.value
    return None


def imports_of(module: str) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import in ``module``, wherever it is."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, str | None, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] == "numabind"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "numabind":
                continue
            for alias in node.names:
                child = f"{target}.{alias.name}"
                if child in MODULES or child == "numabind._native":
                    found.append((child, None, node.lineno))
                else:
                    found.append((target, alias.name, node.lineno))
        elif isinstance(node, ast.Call) and node.args:
            # importlib.import_module("numabind.x"), sys.modules.get("numabind.x")
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in {"import_module", "get", "pop"}:
                name = _const_module_name(node.args[0])
                if name:
                    found.append((name, None, node.lineno))
        elif isinstance(node, ast.Subscript):  # sys.modules["numabind.x"]
            name = _const_module_name(node.slice)
            if name:
                found.append((name, None, node.lineno))
    return [(target, name, line) for target, name, line in found if target != module]


GRAPH = {module: imports_of(module) for module in MODULES}


def test_every_module_sits_on_a_floor():
    for module in MODULES:
        floor_of(module)


def test_imports_go_down_the_floors_only():
    upward = []
    for module, imports in GRAPH.items():
        for target, _, line in imports:
            if room_of(target) == room_of(module):
                continue
            if floor_of(target) > floor_of(module):
                upward.append(f"{module}:{line} imports {target} "
                              f"({FLOORS[floor_of(module)][0]} -> {FLOORS[floor_of(target)][0]})")
    assert not upward, "imports running up the floors:\n" + "\n".join(sorted(upward))


def test_no_module_imports_another_modules_private_names():
    private = []
    for module, imports in GRAPH.items():
        for target, name, line in imports:
            if name is None or not name.startswith("_") or name.startswith("__"):
                continue
            if target not in MODULES or room_of(target) == room_of(module):
                continue
            if name in _defined_names(target):
                private.append(f"{module}:{line} imports {target}.{name}")
    assert not private, "private names imported across modules:\n" + "\n".join(sorted(private))


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_cycle():
    edges: dict[str, set[str]] = {}
    for module, imports in GRAPH.items():
        # A package's __init__ re-exporting its children, and a child taking a name from its __init__, is one room.
        edges[module] = {target for target, _, _ in imports
                         if target in MODULES and not (room_of(target) == room_of(module)
                                                       and (MODULES[target].name == "__init__.py"
                                                            or MODULES[module].name == "__init__.py"))}
    assert _cycles(edges) == []


@pytest.mark.parametrize("source, expected", [
    ("from .bind import _walk_all\n", ("numabind.bind", "_walk_all")),
    ("def f():\n    from numabind.process import reports\n", ("numabind.process.reports", None)),
    ("import sys\nx = sys.modules.get('numabind.process.reports')\n", ("numabind.process.reports", None)),
])
def test_the_graph_sees_every_kind_of_import(tmp_path, monkeypatch, source, expected):
    monkeypatch.setitem(MODULES, "numabind.residency", tmp_path / "residency.py")
    (tmp_path / "residency.py").write_text(source)
    assert [(t, n) for t, n, _ in imports_of("numabind.residency")] == [expected]


def test_the_checks_catch_what_they_forbid(monkeypatch):
    monkeypatch.setitem(GRAPH, "numabind.cpulist", [("numabind.topology", None, 1)])
    with pytest.raises(AssertionError, match="cpulist:1 imports numabind.topology"):
        test_imports_go_down_the_floors_only()
    monkeypatch.setitem(GRAPH, "numabind.cpulist", [("numabind.bind", "_private_probe", 1)])
    monkeypatch.setattr(f"{__name__}._defined_names", lambda module: {"_private_probe"})
    with pytest.raises(AssertionError, match="cpulist:1 imports numabind.bind._private_probe"):
        test_no_module_imports_another_modules_private_names()
    monkeypatch.setitem(GRAPH, "numabind.errors", [("numabind.cpulist", None, 1)])
    monkeypatch.setitem(GRAPH, "numabind.cpulist", [("numabind.errors", None, 1)])
    with pytest.raises(AssertionError):
        test_the_import_graph_has_no_cycle()


# --------------------------------------------------------------------------- speed idioms only on the start-up paths
#: A start-up path no subprocess here measures: Python's ``site`` imports this file in every interpreter that
#: ``numabind instrument`` starts, before the program runs (it keeps ``typing`` off that start).
EVERY_INTERPRETER = frozenset({"numabind.compat.bootstrap.sitecustomize"})
#: The run path (STYLE.md "Speed where it pays", issue 43), listed: what ``numabind run``'s fast path, ``bind_current``
#: with each backend and a child bound at birth load (``test_the_run_path_is_what_it_loads`` measures it), and
#: :data:`EVERY_INTERPRETER`. These modules keep the start-up idioms, as do the :data:`LOOK_PATH`'s; every other module
#: is plain Python.
RUN_PATH = frozenset({
    "numabind", "numabind.cli", "numabind._version", "numabind._base", "numabind._numactl", "numabind.errors",
    "numabind.cpulist", "numabind.plan", "numabind._native", "numabind.live", "numabind._fs", "numabind._cgroup",
    "numabind._proc", "numabind.backends", "numabind.backends.base", "numabind.backends.native",
    "numabind.backends.libnuma", "numabind.backends.syscall", "numabind.backends.numactl", "numabind.backends.none",
    "numabind.bind", "numabind.records", "numabind.verify", "numabind.process", "numabind.process.commands",
    "numabind.process.hooks", "numabind.process.payload", "numabind.process.pools", "numabind.process.reports",
}) | EVERY_INTERPRETER
#: The look path (issue 43), listed: what a first ``numabind.discover()`` and the looks' plain forms (``numabind
#: hardware``, ``numabind topology [--of xml]``, numactl's ``-H``) load on this machine, start-up measured commands
#: guarded at 2.0x ``python -c pass`` (``python bench/bench_look.py``, P9; ``test_the_look_path_is_what_it_loads``
#: measures the list). These modules may keep the start-up idioms too; ``numabind move`` is plain Python.
LOOK_PATH = frozenset({
    "numabind", "numabind.cli", "numabind._version", "numabind._base", "numabind._numactl", "numabind.errors",
    "numabind.cpulist", "numabind.plan", "numabind._native", "numabind._fs", "numabind._cgroup", "numabind._util",
    "numabind._vendors", "numabind._facts", "numabind.cli.look", "numabind.cli.numactl", "numabind.cli.tree",
    "numabind.iodevices", "numabind.topology", "numabind.topology.build", "numabind.topology.sysfs",
    "numabind.topology.values", "numabind.devices", "numabind.devices.amd", "numabind.devices.ascend",
    "numabind.devices.intel", "numabind.devices.nvidia", "numabind.devices.sysfs", "numabind.devices.values",
    "numabind.devices.visibility",
})
#: Where the start-up idioms may be.
START_UP = RUN_PATH | LOOK_PATH


def continuation_backslashes(module: str) -> list[str]:
    """Where ``module`` continues a line with a backslash (PEP 8, issue 43: parentheses, never backslashes)."""
    text = MODULES[module].read_text()
    strings = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    inside = set()      # lines a string runs on past, and comments: a backslash there is not a continuation
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in strings and tok.end[0] > tok.start[0]:
            inside.update(range(tok.start[0], tok.end[0]))
        elif tok.type == tokenize.COMMENT:
            inside.add(tok.start[0])
    return [f"{module}:{n} a backslash continues the line (use parentheses)"
            for n, line in enumerate(text.splitlines(), 1) if line.endswith("\\") and n not in inside]


def speed_idioms(module: str) -> list[str]:
    """Where ``module`` uses a start-up idiom: ``TYPE_CHECKING = False`` (instead of ``typing``'s) or a class
    built on :class:`numabind._base.Value` (instead of a frozen dataclass); and its backslash continuations."""
    tree = ast.parse(MODULES[module].read_text())
    value_names = {"Value"} if module == "numabind._base" else {
        alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        and (node.module or "").rpartition(".")[2] == "_base" for alias in node.names if alias.name == "Value"}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value is False
                and any(isinstance(t, ast.Name) and t.id == "TYPE_CHECKING" for t in node.targets)):
            found.append(f"{module}:{node.lineno} TYPE_CHECKING = False (use typing.TYPE_CHECKING)")
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                named = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
                if named in value_names or (isinstance(base, ast.Attribute) and named == "Value"
                                            and isinstance(base.value, ast.Name) and base.value.id == "_base"):
                    found.append(f"{module}:{node.lineno} class {node.name}(Value) (use @dataclass(frozen=True))")
    return found + continuation_backslashes(module)


def off_the_run_path_with_speed_idioms(run_path: set[str] | frozenset[str]) -> list[str]:
    """The start-up idioms of the modules off ``run_path``, and the backslash continuations of every module."""
    return [line for module in sorted(MODULES)
            for line in (speed_idioms(module) if module not in run_path else continuation_backslashes(module))]


def test_speed_idioms_only_on_the_start_up_paths():
    """STYLE.md "Speed where it pays": the modules of :data:`RUN_PATH` and :data:`LOOK_PATH` keep ``typing`` and
    ``dataclasses`` off their start; every other module is plain Python. And no module continues a line with a
    backslash."""
    found = off_the_run_path_with_speed_idioms(START_UP)
    assert not found, "speed idioms off the start-up paths, or backslash continuations:\n" + "\n".join(found)


@pytest.mark.kernel
def test_the_run_path_is_what_it_loads():
    """:data:`RUN_PATH` is what those paths load, measured in fresh interpreters (tests/run_path.py): a module listed
    and not loaded, or loaded and not listed, fails. The cpuset's reader counts as loaded: the fast path reads it
    when the affinity leaves out an online CPU."""
    from tests.run_path import CPUSET_MODULES, bind_current_modules, birth_modules, run_modules

    ours = set(MODULES) | {"numabind._native"}      # and the compiled core
    loaded = ours & (run_modules() | CPUSET_MODULES | bind_current_modules() | birth_modules())
    assert {"numabind.bind", "numabind.live", "numabind.plan"} <= loaded      # the measurement saw a bind
    listed = RUN_PATH - EVERY_INTERPRETER
    assert loaded == listed, (f"loaded, not listed in RUN_PATH: {sorted(loaded - listed)}; "
                              f"listed, not loaded: {sorted(listed - loaded)}")


def test_the_look_path_is_what_it_loads():
    """:data:`LOOK_PATH` is what a first ``discover()`` and the looks load on this machine, measured in a fresh
    interpreter (tests/run_path.py): a module listed and not loaded, or loaded and not listed, fails."""
    from tests.run_path import look_modules

    loaded = (set(MODULES) | {"numabind._native"}) & look_modules()
    assert {"numabind.topology", "numabind.cli.look", "numabind.cli.tree"} <= loaded   # the measurement saw a look
    assert loaded == LOOK_PATH, (f"loaded, not listed in LOOK_PATH: {sorted(loaded - LOOK_PATH)}; "
                                 f"listed, not loaded: {sorted(LOOK_PATH - loaded)}")


def test_the_idiom_check_sees_both_idioms_and_backslashes(tmp_path, monkeypatch):
    source = ("from ._base import Value as V\nfrom . import _base\nTYPE_CHECKING = False\n"
              "class A(V):\n    pass\nclass B(_base.Value):\n    pass\nclass C:\n    TYPE_CHECKING = True\n"
              "x = 1 + \\\n    2\ny = '''a \\\nb'''  # c \\\n")
    monkeypatch.setitem(MODULES, "numabind.residency", tmp_path / "residency.py")
    (tmp_path / "residency.py").write_text(source)
    assert [line.split(" (")[0] for line in speed_idioms("numabind.residency")] == [
        "numabind.residency:3 TYPE_CHECKING = False", "numabind.residency:4 class A(Value)",
        "numabind.residency:6 class B(Value)", "numabind.residency:10 a backslash continues the line"]
    assert any(line.startswith("numabind.residency:") for line in off_the_run_path_with_speed_idioms(set()))
    assert [line.split(" (")[0] for line in off_the_run_path_with_speed_idioms({"numabind.residency"})
            if line.startswith("numabind.residency:")] == ["numabind.residency:10 a backslash continues the line"]
