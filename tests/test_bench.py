"""The benchmarks in bench/ still run (one short round each; their numbers are not asserted here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("argv", [
    ["bench/bench_discover.py", "--sizes", "4", "--runs", "1", "--report-only"],
    ["bench/bench_spawn.py", "--rounds", "2"],
])
def test_benchmark_runs(argv):
    proc = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ratio" in proc.stdout or "bound/unbound" in proc.stdout, proc.stdout
