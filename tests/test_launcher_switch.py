"""NUMABIND_REQUIRE_LAUNCHERS: a launcher test that cannot run skips, saying why, or fails in CI.

The torchrun, Slurm and Ray tests (tests/test_launcher_*.py) state what they need with
``tests.launchers.needs`` (a mark read by tests/conftest.py before any fixture) or call
``tests.launchers.unavailable`` where they find out late (a fixture that cannot start Slurm).
"""

from __future__ import annotations

import pytest

from tests.launchers import REQUIRE_ENV

EXAMPLE = '''
from tests.launchers import needs, unavailable


@needs(False, "no such launcher here")
def test_marked():
    pass


def test_found_out_late():
    unavailable("no such cluster here")


@needs(True, "present")
def test_runs():
    pass
'''


@pytest.mark.parametrize("required", ["", "0", "1"])
def test_a_launcher_that_cannot_run_skips_or_fails_when_required(pytester, monkeypatch, required):
    monkeypatch.setenv(REQUIRE_ENV, required)
    pytester.makeconftest("from tests.conftest import pytest_configure, pytest_runtest_setup  # noqa: F401\n")
    pytester.makepyfile(test_example=EXAMPLE)
    result = pytester.runpytest("-rsfE")
    if required == "1":
        result.assert_outcomes(passed=1, failed=1, errors=1)
        result.stdout.fnmatch_lines([f"*{REQUIRE_ENV}=1 and this launcher test cannot run: no such launcher here*",
                                     f"*{REQUIRE_ENV}=1 and this launcher test cannot run: no such cluster here*"],
                                    consecutive=False)
    else:
        result.assert_outcomes(passed=1, skipped=2)
        result.stdout.fnmatch_lines(["*no such launcher here*"])
        result.stdout.fnmatch_lines(["*no such cluster here*"])
