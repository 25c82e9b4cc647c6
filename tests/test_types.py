"""The package type-checks under ``mypy --strict`` (the settings in pyproject.toml), and so does users' code
that names it, under ``mypy --strict`` and pyright's strict mode: misspelt words (``mode="nodes"``) are errors
there (numabind.types)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import mypy_strict, pyright_strict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_mypy_strict_is_clean():
    # mypy is a test extra (pip install -e '.[test]'); without it this fails, it does not skip
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-2000:]
    assert "Success: no issues found" in proc.stdout


CONSUMER = '''
import numabind
from numabind import BindError, NumabindError, Plan, PlanError, bind_current, discover

plan: numabind.Plan = Plan(cpus=frozenset({0}), mem_policy="bind", mem_nodes=frozenset({0}))
report: numabind.BindReport = bind_current(plan, strict=False)
topo: numabind.Topology = discover()
errors: tuple[type[Exception], ...] = (NumabindError, PlanError, BindError, numabind.BirthBindError)
text: str = numabind.format_cpulist(numabind.parse_cpulist("0-3"))
'''


def test_a_consumer_type_checks_under_mypy_strict(tmp_path):
    """Users' code that names the public API through ``numabind.X`` and ``from numabind import X`` passes
    ``mypy --strict``: the names are re-exported explicitly, not only listed in a computed ``__all__``."""
    (tmp_path / "consumer.py").write_text(CONSUMER)
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir",
                           str(tmp_path / ".mypy_cache"), "consumer.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_every_public_name_is_re_exported_for_type_checkers():
    import ast

    import numabind

    tree = ast.parse(open(numabind.__file__).read())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING"
                 and any(isinstance(s, ast.ImportFrom) for s in n.body))
    exported = {a.asname for s in block.body if isinstance(s, ast.ImportFrom) for a in s.names if a.asname == a.name}
    assert exported == set(numabind.__all__)


# --------------------------------------------------------------------------- the words as Literal types
def test_each_literal_type_holds_the_words_the_code_checks():
    """numabind.types defines each word list once as a Literal; the tuples checked at run time are the same."""
    from typing import get_args

    from numabind import MEM_POLICIES, MODES, types
    from numabind.backends import BACKEND_NAMES, THREAD_MODES
    from numabind.plan import NODE_POLICIES

    assert get_args(types.Mode) == MODES
    assert get_args(types.MemPolicy) == MEM_POLICIES
    assert get_args(types.NodePolicy) == NODE_POLICIES
    assert get_args(types.BackendName) == BACKEND_NAMES
    assert get_args(types.ThreadMode) == THREAD_MODES
    assert set(get_args(types.Strictness)) == {bool} | {get_args(types.Strictness)[1]}
    assert get_args(get_args(types.Strictness)[1]) == ("partial",)


TYPED_CONSUMER = '''
import numabind
from numabind.types import BackendName, MemPolicy, Mode, NodePolicy, Strictness, ThreadMode

mode: Mode = "core-complex"
policy: MemPolicy = "weighted-interleave"
node_policy: NodePolicy = "preferred-many"
strict: Strictness = "partial"
backend: BackendName = "syscall"
threads: ThreadMode = "all"
ok, why = numabind.auto_plan_available(mode=mode, mem_policy=policy)
answer: tuple[bool, str] = (ok, why)
'''

#: Lines of a consumer that misspell a word: each must be an error (its line number is checked).
WRONG_WORDS = '''
import numabind
from numabind.types import Mode, Strictness

bad_mode: Mode = "nodes"
bad_strict: Strictness = "yes"
numabind.auto_plan_available(mode="nodes")
numabind.auto_plan_available(mem_policy="binds")
'''

#: The same through the planners, bind_current and the other public functions: their signatures name the
#: Literal types.
WRONG_WORDS_EVERYWHERE = '''
import numabind

plan = numabind.plan_for_gpu(0, mode="nodes")
numabind.plan_table(mode="socket", policy="binds")
numabind.Plan(cpus=frozenset({0}), mem_policy="binds", mem_nodes=frozenset({0}))
numabind.bind_current(plan, strict="yes")
numabind.bind_current(plan, threads="some")
numabind.bind_current(plan, backend="libnum")
numabind.plan_for_rank(mode="nodes")
numabind.bind_memory(bytearray(4096), mode="binds", nodes={0})
numabind.verify_current(plan, strict="yes")
'''


def _error_lines(output: str, name: str) -> set[int]:
    import re

    return {int(m.group(1)) for m in re.finditer(rf"{re.escape(name)}:(\d+)(?::\d+)?:? -? ?error", output)}


def _wrong_lines(text: str) -> set[int]:
    return {n for n, line in enumerate(text.splitlines(), 1) if '"nodes"' in line or '"binds"' in line
            or '"yes"' in line or '"some"' in line or '"libnum"' in line}


def test_the_literal_types_type_check_under_mypy_strict(tmp_path):
    good = mypy_strict(tmp_path, "good.py", TYPED_CONSUMER)
    assert good.returncode == 0, good.stdout[-4000:] + good.stderr[-2000:]
    bad = mypy_strict(tmp_path, "bad.py", WRONG_WORDS)
    assert bad.returncode == 1, bad.stdout
    assert _error_lines(bad.stdout, "bad.py") == _wrong_lines(WRONG_WORDS), bad.stdout
    assert 'Incompatible types in assignment (expression has type "Literal[\'nodes\']"' in bad.stdout


def test_a_consumer_and_the_literal_types_type_check_under_pyright(tmp_path):
    proc = pyright_strict(tmp_path, "consumer.py", CONSUMER + TYPED_CONSUMER.replace("import numabind\n", "", 1))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 errors" in proc.stdout, proc.stdout[-2000:]
    bad = pyright_strict(tmp_path, "bad.py", WRONG_WORDS)
    assert bad.returncode == 1, bad.stdout
    assert _error_lines(bad.stdout, "bad.py") == _wrong_lines(WRONG_WORDS), bad.stdout
    assert "\"Literal['nodes']\" is not assignable to" in bad.stdout


def test_a_misspelt_word_is_an_error_at_every_public_function(tmp_path):
    bad = mypy_strict(tmp_path, "everywhere.py", WRONG_WORDS_EVERYWHERE)
    assert _error_lines(bad.stdout, "everywhere.py") == _wrong_lines(WRONG_WORDS_EVERYWHERE), bad.stdout
