"""Plain helpers that several test modules share and that have no home by concern of their own (fake machines
live in tests/fake*, kernel readers and children in tests/kernel.py, workers in tests/workers.py, the numactl
oracle in tests/numactl_oracle.py; fixtures in conftest.py). A test module never imports another test module.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from numabind import cpulist, plan
from tests.kernel import ROOT


# ----------------------------------------------------------------------------- logging
class Records(logging.Handler):
    """Collects the records that reach the logger it is attached to (the ``on_logger`` fixture)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def at(self, level: int) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno == level]


# ----------------------------------------------------------------------------- work counted, not timed
#: Python lines a parser may run per character of its text, and once per call: generous for
#: numabind's own parsers (a few lines per character of a group), far below one line per id.
PER_CHAR, ONCE = 25, 400
WATCHED = frozenset({cpulist.__file__, plan.__file__})


class OverBudget(BaseException):
    """Raised inside the parser when its budget is spent (a BaseException: no parser catches it)."""


class Budget:
    """Counts line events in numabind.cpulist and numabind.plan while active; raises OverBudget past ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit, self.lines = limit, 0

    def _local(self, frame: types.FrameType, event: str, arg: object) -> object:
        if event == "line":
            self.lines += 1
            if self.lines > self.limit:
                raise OverBudget(f"more than {self.limit} lines run")
        return self._local

    def _global(self, frame: types.FrameType, event: str, arg: object) -> object:
        return self._local if frame.f_code.co_filename in WATCHED else None

    def __enter__(self) -> Budget:
        self._old = sys.gettrace()
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(self._old)


# ----------------------------------------------------------------------------- the project's metadata
def read_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # the test extras install tomli on 3.10
        import tomli as tomllib
    with open(path, "rb") as f:
        return tomllib.load(f)


def requirement_names(requirements: list[str]) -> set[str]:
    """The distribution names of requirement strings (``torch>=2; sys_platform=='linux'`` -> ``torch``)."""
    return {re.split(r"[\s\[<>=!;~]", r, maxsplit=1)[0].lower() for r in requirements}


# ----------------------------------------------------------------------------- type checkers
def mypy_strict(tmp_path, name: str, text: str) -> subprocess.CompletedProcess:
    """``text`` written to ``tmp_path/name`` and checked by ``mypy --strict``."""
    (tmp_path / name).write_text(text)
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir",
                           str(tmp_path / ".mypy_cache"), name], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)


def pyright_strict(tmp_path, name: str, text: str) -> subprocess.CompletedProcess:
    """``text`` written to ``tmp_path/name`` and checked by pyright in strict mode (a skip without pyright)."""
    exe = shutil.which("pyright", path=os.path.dirname(sys.executable))
    if exe is None:   # a test extra (pip install -e '.[test]'): without it the pyright half cannot run
        pytest.skip("pyright is not installed (pip install -e '.[test]' installs it)")
    (tmp_path / name).write_text(text)
    (tmp_path / "pyrightconfig.json").write_text(json.dumps({
        "typeCheckingMode": "strict", "pythonVersion": "3.10",
        "extraPaths": [os.path.join(ROOT, "src")], "reportMissingModuleSource": False}))
    # the pyright wheel bundles pyright itself; no check for a newer version over the network
    env = {**os.environ, "PYRIGHT_PYTHON_IGNORE_WARNINGS": "1"}
    return subprocess.run([exe, "--pythonpath", sys.executable, name], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env=env)


# ----------------------------------------------------------------------------- the docs build
def sphinx_build(source: Path, out: Path, builder: str) -> tuple[int, str]:
    """Sphinx over ``source`` into ``out`` with warnings as errors (a skip without the docs extra), in a child:
    autodoc writes the annotations it reads (those under ``if TYPE_CHECKING:`` too) into the classes it documents,
    which would leak into the tests that run after it in this process. The exit status and what it printed."""
    pytest.importorskip("sphinx", reason="the docs extra: pip install -e '.[docs]'")
    cp = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-E", "-b", builder,
                         str(source), str(out)], capture_output=True, text=True, timeout=600)
    return cp.returncode, cp.stdout + cp.stderr


# ----------------------------------------------------------------------------- numabind move in a child
#: ``python -c MOVE HOW ARGS...``: ``numabind move ARGS`` run by a program (HOW ``logging``: one that configured
#: logging first).
MOVE = """
import sys
if sys.argv[1] == "logging":     # as numabind's other fast paths do (cli/look.py): a WARNING is printed, not lost
    from numabind._base import warn_through
    from numabind.cli import configure_logging

    warn_through(configure_logging)
from numabind.cli.move import main

sys.exit(main(sys.argv[2:]))
"""
