"""Command line: ``numabind`` (also ``python -m numabind``).

``main`` dispatches: ``numabind run`` with plain numactl options goes to :mod:`numabind.cli.run`,
which parses them by hand, reads the few sysfs files it needs, binds and execs (no argparse,
logging, discovery or multiprocessing is imported: it starts at about the cost of Python itself);
everything else, and any ``run`` the fast path does not take (``--gpu``, ``--help``, an error
to report), goes to the full argparse CLI in :mod:`numabind.cli.commands`, with the same
options, messages and exit codes. The library never prints; this package does.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] == "run":
        import gc

        # The fast path builds a few hundred objects and execs within milliseconds: the cyclic
        # collector has nothing to find there, and its passes over the modules being imported cost
        # about 6 % of the path. It is on again before anything else runs.
        enabled = gc.isenabled()
        gc.disable()
        try:
            from .run import fast_run

            rc = fast_run(args[1:])       # execs, returns an exit status, or None: "not mine"
        finally:
            if enabled:
                gc.enable()
        if rc is not None:
            return rc
    from .commands import main as full_main

    return full_main(args)
