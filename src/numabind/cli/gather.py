"""``numabind gather [-o FILE] [--hostname] [--json]``: write a replayable capture of this machine (or of ``--root``'s)
to attach to a bug report (:func:`numabind.gather.gather`; docs/report-machine.rst). Exit 0 when the archive is
written, 2 when it cannot be (the message names the input and the fix); a capture that replays differently is
written and said (a WARNING line), not refused."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..gather import SUFFIX, gather
from ._parser import global_options, print_json

__all__ = ["DESCRIPTION", "add_parser", "cmd_gather"]

#: What ``gather --help`` says.
DESCRIPTION = ("Write NAME.tar.bz2: the sysfs and procfs files numabind's discovery and check read on this machine "
               "(in hwloc-gather-topology's layout, so numabind --root NAME.tar.bz2 and lstopo --input NAME.tar.bz2 "
               "replay it), with numabind topology --of xml and numabind check --json. No host name (unless "
               "--hostname), no environment but the GPU visibility variables, no process's command line; size and "
               "time are capped and what was left out is listed. Attach the archive to a bug report.")


def add_parser(sub: Any) -> None:
    """Register ``gather`` on the CLI's subparsers."""
    g = sub.add_parser("gather", parents=global_options(), description=DESCRIPTION,
                       help="write a capture of this machine to attach to a bug report (replayable with --root)")
    g.add_argument("-o", "--output", metavar="FILE", default=None,
                   help=f"the archive to write, named NAME{SUFFIX} (default numabind-gather-YYYYmmdd-HHMMSS{SUFFIX}, "
                        f"UTC, in this folder)")
    g.add_argument("--hostname", action="store_true", help="put the host's name in the archive (left out by default)")


def cmd_gather(args: argparse.Namespace) -> int:
    """Write the archive and say what it holds (``--json``: :meth:`numabind.gather.GatherResult.to_dict`)."""
    result = gather(args.output, root=getattr(args, "root", None), hostname=args.hostname)
    if getattr(args, "json", False):
        print_json(result.to_dict())
    else:
        sys.stdout.write(result.describe() + "\n")
    return 0
