"""Packaging: what a user gets from an sdist or a wheel, and what they are told when the C core is missing.

The slow checks (building the sdist and the wheel, installing them into fresh virtual environments,
``auditwheel repair``, importing the abi3 wheel under other Python versions, a build with no C compiler)
are marked ``packaging``; ``-m "not packaging"`` leaves them out of a quick run. They need PyPI (or a pip
cache) for the build dependencies, as any ``pip install .`` does.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.test_backends import BLOCK_NATIVE


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


# --------------------------------------------------------------------------- the native core missing
def test_missing_native_core_is_one_line_in_backend_info():
    cp = _run(BLOCK_NATIVE + "import json, numabind; print(json.dumps(numabind.backend_info()))")
    assert cp.returncode == 0, cp.stderr
    info = json.loads(cp.stdout.strip().splitlines()[-1])
    native = info["native"]
    assert native and "\n" not in native and len(native) <= 200, native
    assert "numabind._native" in native and "gcc" in native and "python3-dev" in native and "reinstall" in native
    # each native backend names the cause once, one line each; the selection reason says it once
    for name in ("libnuma", "syscall"):
        assert native in info["unavailable"][name] and "\n" not in info["unavailable"][name]
    assert info["reason"].count(native) == 1, info["reason"]
    assert "syscall unavailable: same as libnuma" in info["reason"]
    assert "\n" not in info["reason"] and len(info["reason"]) <= len(native) + 200, info["reason"]


def test_native_core_present_reports_none():
    cp = _run("import json, numabind, numabind._native; print(json.dumps(numabind.backend_info()))")
    assert cp.returncode == 0, "the test environment must have the compiled core: " + cp.stderr
    info = json.loads(cp.stdout)
    assert info["native"] is None
    assert info["available"]["syscall"] is True


def test_main_command_says_the_native_core_is_missing_once():
    cp = _run(BLOCK_NATIVE + "from numabind.cli import main; raise SystemExit(main([]))")
    assert cp.returncode == 0, cp.stderr
    lines = [line for line in cp.stdout.splitlines() if "numabind._native" in line]
    assert len(lines) == 1, cp.stdout
    assert lines[0].startswith("native core numabind._native is not available") and "gcc" in lines[0]
    selected = [line for line in cp.stdout.splitlines() if line.startswith("selected: ")]
    assert selected == [selected[0]] and selected[0].startswith("selected: numactl ")
    assert "native core missing (above)" in selected[0] and "unavailable: libnuma" not in cp.stdout
