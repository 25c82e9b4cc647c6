"""tools/capture_machine.py: the developer's name for ``numabind gather`` (tools/gpu_machine_check.sh runs it).

The capture itself lives in the package (:mod:`numabind.gather`) and is tested in tests/test_gather.py on every
machine the suite knows; here only the script: it writes the archive through the package, ``--check`` exits 0 when
the archive replays to the machine's topology, and a bad name is a usage error (exit 2) naming the fix.
"""

from __future__ import annotations

import subprocess
import sys

from numabind.topology import discover

from .fakesys import FACTORIES
from .tools import TOOLS

TOOL = TOOLS / "capture_machine.py"


def _tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=120)


def test_the_tool_writes_the_archive_through_the_package(tmp_path):
    machine = tmp_path / "m"
    FACTORIES["sparse_nodes"](machine)
    out = _tool(str(tmp_path / "m.tar.bz2"), "--root", str(machine), "--check")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith(f"wrote {tmp_path / 'm.tar.bz2'}: ")
    assert out.stdout.rstrip().endswith("the dump replays to the same topology")
    assert discover(tmp_path / "m.tar.bz2").to_dict()["nodes"] == discover(machine).to_dict()["nodes"]


def test_the_tool_refuses_a_bad_name_with_the_fix(tmp_path):
    out = _tool(str(tmp_path / "m.zip"))
    assert out.returncode == 2
    assert "must be named NAME.tar.bz2" in out.stderr and "give e.g. -o numabind-gather-" in out.stderr
    assert not (tmp_path / "m.zip").exists()
