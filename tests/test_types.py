"""The package type-checks under ``mypy --strict`` (the settings in pyproject.toml)."""

from __future__ import annotations

import os
import subprocess
import sys

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
