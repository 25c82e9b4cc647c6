"""Capture what numabind's discovery reads on this machine into a dump that replays it: ``numabind gather``.

    python3 tools/capture_machine.py OUT.tar.bz2 [--root ROOT] [--check]

The capture lives in the package (:mod:`numabind.gather`, the command ``numabind gather -o OUT.tar.bz2``), so a user
with only the wheel can make one; this script is its caller from a checkout (``tools/gpu_machine_check.sh`` runs
it), kept under its old name. ``--check`` exits 1 when the dump replays to another topology than the machine's
(``GatherResult.differences``), naming the fields; gather always compares, the option only sets the status.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

from numabind.errors import NumabindError  # noqa: E402
from numabind.gather import gather  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("out", help="the dump to write, NAME.tar.bz2")
    ap.add_argument("--root", default="/", help="the machine's root (default /)")
    ap.add_argument("--check", action="store_true", help="exit 1 when the dump replays differently from the machine")
    args = ap.parse_args(argv)
    try:
        result = gather(args.out, root=args.root)
    except NumabindError as exc:
        print(f"capture_machine: error: {exc}", file=sys.stderr)
        return 2
    print(result.describe())
    if args.check:
        if result.differences:
            return 1
        print("the dump replays to the same topology")
    return 0


if __name__ == "__main__":
    sys.exit(main())
