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
