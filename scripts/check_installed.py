"""Check the numabind that this Python imports: an installed copy (a wheel, an sdist install), not a checkout.

    python scripts/check_installed.py                   # print what was found, as JSON
    python scripts/check_installed.py --require-native  # exit 1 unless numabind._native loads and is abi3

Run from any folder other than the checkout's src/. Used by .ci/run, by tests/test_packaging.py and by
cibuildwheel's test step (pyproject.toml). Prints one JSON object on stdout; problems go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from typing import Any


def inspect_install() -> dict[str, Any]:
    """Where numabind was imported from, whether its native core loads, and what backend_info() says."""
    import numabind

    found: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "numabind": os.path.dirname(numabind.__file__),
        "version": numabind.__version__,
    }
    try:
        from numabind import _native
    except ImportError as e:
        found["native_file"] = None
        found["native_error"] = f"{type(e).__name__}: {e}"
    else:
        found["native_file"] = os.path.basename(_native.__file__ or "")
        found["native_error"] = None
    info = numabind.backend_info()
    found["selected"] = info["selected"]
    found["native"] = info.get("native")
    found["native_ok"] = info.get("native_ok")
    found["available"] = info["available"]
    return found


def problems(found: dict[str, Any], require_native: bool) -> list[str]:
    """What is wrong with ``found`` (empty when nothing is)."""
    out = []
    if require_native:
        if found["native_file"] is None:
            out.append(f"numabind._native does not import: {found['native_error']}")
        elif not found["native_file"].endswith(".abi3.so"):
            out.append(f"numabind._native is {found['native_file']}, not an abi3 module")
        if not found["native_ok"]:
            out.append(f"backend_info()['native'] says the core is missing: {found['native']}")
        if not (found["available"].get("syscall") or found["available"].get("libnuma")):
            out.append(f"no native backend is usable: {found['available']}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--require-native", action="store_true", help="fail unless the abi3 native core loads")
    args = ap.parse_args(argv)
    found = inspect_install()
    print(json.dumps(found, sort_keys=True))
    bad = problems(found, args.require_native)
    for line in bad:
        print(f"check_installed: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
