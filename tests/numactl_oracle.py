"""numactl 2.0.19, the oracle that numabind's numactl forms are compared with (tests/test_show_oracle.py,
tests/test_numactl_form.py, tests/test_segment.py, tests/test_cli.py).

``bash scripts/numactl_oracle.sh`` builds it from Debian's source into tests/_cache/numactl-2.0.19/numactl;
``NUMABIND_NUMACTL_ORACLE=/path/to/numactl`` names another build. Without one the comparisons skip, unless
``NUMABIND_REQUIRE_ORACLE=1`` (CI), where they fail. The ``oracle`` fixture (registered in conftest.py) is its
path.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

VERSION = "2.0.19"
ORACLE_ENV = "NUMABIND_NUMACTL_ORACLE"
REQUIRE_ENV = "NUMABIND_REQUIRE_ORACLE"
CACHED = Path(__file__).resolve().parent / "_cache" / f"numactl-{VERSION}" / "numactl"


def oracle_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip() not in ("", "0", "no", "false")


def find_oracle() -> tuple[str | None, str]:
    """(path, "") of a numactl that says it is 2.0.19, else (None, why not)."""
    given = os.environ.get(ORACLE_ENV, "").strip()
    path = given or str(CACHED)
    where = f"{ORACLE_ENV}={given}" if given else str(CACHED)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return None, f"no executable at {where}"
    try:
        cp = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except OSError as e:
        return None, f"{where} does not run ({e})"
    said = (cp.stdout + cp.stderr).strip()
    if said != VERSION:
        said = said.splitlines()[0] if said else said
        return None, f"{where} says {said!r}, not {VERSION!r}"
    return path, ""


def oracle_or_skip() -> str:
    """The oracle's path; a skip saying how to build it, or a failure under NUMABIND_REQUIRE_ORACLE=1."""
    path, problem = find_oracle()
    if path is None:
        how = f"build it with `bash scripts/numactl_oracle.sh` (or set {ORACLE_ENV} to a numactl {VERSION})"
        if oracle_required():
            pytest.fail(f"numactl {VERSION} oracle: {problem}; {how} ({REQUIRE_ENV}=1)", pytrace=False)
        pytest.skip(f"numactl {VERSION} oracle: {problem}; {how} (with {REQUIRE_ENV}=1 this fails)")
    return path


@pytest.fixture(scope="module")
def oracle() -> str:
    return oracle_or_skip()
