"""``numabind stat PID... [--all-children PID] [--json] [--watch S [--count N]]``: where processes' pages are.

For each process (:func:`numabind.residency.locality`): resident memory per node, in anonymous,
file-backed and hugetlbfs mappings apart (like ``numastat -p``), the share that is remote to the
nodes of the CPUs it may run on, per group of threads with the same CPUs, the memory policies its
mappings show, and the plan numabind bound it with when numabind started it (``numabind run``,
``wrap_command``, the numactl wrapper: the marker in its exec environment) or bound it at birth
(``configure_subprocess``, ``bound``, ``pool_plans``: its runtime record, :mod:`numabind.records`),
with where that was read in brackets (``source`` in JSON). A process that cannot
be read (gone, exited while being read, another user's, no ``numa_maps`` in this kernel) says why on
its first line (``error`` in JSON) and the others are still shown; the exit status is 0 when every
process was read in full, 1 otherwise (2 for a usage error).

What another process controls (its name, its threads' names, the plans in its marker) reaches the
text output as ``ps`` shows it: every character a terminal could act on (C0 and C1 controls, DEL,
format characters such as bidirectional overrides) and every byte that was not UTF-8 is a ``?``.
JSON output holds the exact strings, escaped as JSON escapes them (ASCII only, so no control
character reaches the terminal raw either).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from ..cpulist import format_cpulist
from ..errors import NumabindError

__all__ = ["add_parser", "cmd_stat"]

_CLEAR = "\x1b[H\x1b[2J"       # cursor home, clear the screen: a refresh in place on a terminal


def _printable(text: str) -> str:
    """``text`` as ``ps`` shows another process's name: each non-printable character (C0 and C1 controls,
    DEL, format characters such as U+202E, lone surrogates, unassigned code points) and each U+FFFD (a
    byte that was not UTF-8, as numabind's readers decode it) as ``?``."""
    if text.isprintable() and "\ufffd" not in text:
        return text
    return "".join(c if c.isprintable() and c != "\ufffd" else "?" for c in text)


def _pid(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id (a positive number)")
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value > 86400:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds between 0 and 86400")
    return value


def _count(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive count")
    return int(text)


def add_parser(sub: Any) -> None:
    """Register ``stat`` on the CLI's subparsers."""
    s = sub.add_parser("stat", help="where processes' pages are: per node, remote share, their binding",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    s.add_argument("pids", nargs="*", type=_pid, metavar="PID", help="processes to show")
    s.add_argument("--all-children", action="append", type=_pid, default=[], metavar="PID",
                   help="this process and all its descendants (a worker tree); may be given more than once")
    s.add_argument("--json", action="store_true", help="one JSON list of numabind.residency.Locality.to_dict()")
    s.add_argument("--watch", type=_seconds, metavar="SECONDS",
                   help="refresh every SECONDS (in place on a terminal, appended lines otherwise; JSON: one list "
                        "per line) until interrupted or every process has exited")
    s.add_argument("--count", type=_count, metavar="N", help="with --watch: stop after N refreshes")


def _targets(args: argparse.Namespace) -> list[int]:
    pids: list[int] = []
    for pid in args.pids:
        if pid not in pids:
            pids.append(pid)
    from .. import _proc

    for root in args.all_children:
        for pid in _proc.process_tree(root):
            if pid not in pids:
                pids.append(pid)
    return pids


def _mib(pages: int, page_size: int) -> str:
    return f"{pages * page_size / (1 << 20):.1f}"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]


def _block(loc: Any, nodes: list[int]) -> list[str]:
    """The text of one process: its error (if any) on the first line, then what could be read."""
    head = f"pid {loc.pid} ({loc.name})" + (f": {loc.error}" if loc.error else "")
    if not loc.threads and loc.pages is None:
        return [head]
    if loc.bound is not None and not loc.bound.verified:
        head += f"  unverified numabind marker: {loc.bound.requested.describe()} [{loc.bound.source}]"
    elif loc.bound is not None:
        b = loc.bound
        head += f"  bound by numabind: {b.requested.describe()} [{b.source}]"
        if b.applied is not None and (b.applied.cpus != b.requested.cpus or
                                      (b.requested.mem_policy is not None and b.applied.mem_policy != b.requested.mem_policy)):
            head += f"; applied then: {b.applied.describe()}"
    lines = [head]
    mems = format_cpulist(loc.mems_allowed) if loc.mems_allowed is not None else "?"
    lines.append(f"  cpus {format_cpulist(loc.cpus) or '?'} (nodes {format_cpulist(loc.cpu_nodes) or 'none'}), "
                 f"mems allowed {mems}")
    if loc.mem_policy is not None:
        lines.append(f"  memory policy: {loc.mem_policy}")
    pages = loc.pages
    if pages is None:
        return lines
    total = loc.total_pages
    if pages.policies:
        shown = sorted(pages.policies.items(), key=lambda kv: (-kv[1], kv[0]))
        lines.append("  mapping policies: " + ", ".join(
            f"{pol} {100 * n / total:.1f}%" if total else pol for pol, n in shown[:6])
            + (f" and {len(shown) - 6} more" if len(shown) > 6 else ""))
    size = loc.page_size
    cols = sorted(set(nodes) | set(pages.total))
    rows = [["MiB"] + [f"node {n}" for n in cols] + ["total"]]
    for label, counts in (("anon", pages.anon), ("file", pages.file), ("huge", pages.huge), ("total", pages.total)):
        rows.append([label] + [_mib(counts.get(n, 0), size) for n in cols] + [_mib(sum(counts.values()), size)])
    lines += _table(rows)
    share = loc.remote_share
    if share is None:
        lines.append("  remote: no resident pages")
    else:
        kinds = [(k, loc.remote_share_by_kind(k)) for k in ("anon", "file", "huge")]
        by_kind = ", ".join(f"{k} {100 * v:.1f}%" for k, v in kinds if v is not None)
        lines.append(f"  remote: {100 * share:.1f}% ({_mib(loc.remote_pages, size)} MiB on nodes other than "
                     f"{format_cpulist(loc.cpu_nodes) or 'none'}, the nodes of the CPUs it may run on"
                     + (f"; by kind: {by_kind}" if by_kind else "") + ")")
    groups: dict[frozenset[int], list[Any]] = {}
    for t in loc.threads:
        groups.setdefault(t.cpus, []).append(t)
    if len(groups) > 1:
        for cpus, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), min(kv[0], default=-1))):
            nodes_of = members[0].nodes
            tids = ", ".join(str(t.tid) for t in members[:6]) + (" ..." if len(members) > 6 else "")
            remote = loc.remote_share_of(nodes_of)
            lines.append(f"  {len(members)} thread(s) ({tids}) on cpus {format_cpulist(cpus)} "
                         f"(nodes {format_cpulist(nodes_of) or 'none'}): remote "
                         + ("-" if remote is None else f"{100 * remote:.1f}%"))
    else:
        lines.append(f"  {len(loc.threads)} thread(s), all on these cpus")
    return lines


def _snapshot(pids: list[int]) -> list[Any]:
    from ..residency import locality

    return [locality(pid) for pid in pids]


def _nodes() -> list[int]:
    from .. import live

    return sorted(live.machine().nodes)


def _show(locs: list[Any], args: argparse.Namespace, refresh: bool) -> None:
    if args.json:
        text = json.dumps([loc.to_dict() for loc in locs], sort_keys=True,
                          indent=None if args.watch else 2)
        sys.stdout.write(text + "\n")
    else:
        nodes = _nodes()
        out: list[str] = []
        if args.watch:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            out.append(f"{_CLEAR if refresh else ''}numabind stat, every {args.watch:g} s: {stamp}")
        for loc in locs:
            out += [_printable(line) for line in _block(loc, nodes)]   # every line: names and plans are the process's
        text = "\n".join(out) + "\n"
        encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
        try:     # a character this terminal's encoding cannot show is a '?' too, not an error
            text = text.encode(encoding, "replace").decode(encoding)
        except LookupError:
            pass
        sys.stdout.write(text)
    sys.stdout.flush()


def cmd_stat(args: argparse.Namespace) -> int:
    """Show each process; with ``--watch``, again every interval. Exit 0 when every process was read in full."""
    if not args.pids and not args.all_children:
        raise NumabindError("numabind stat: give at least one PID (or --all-children PID)")
    if args.count is not None and args.watch is None:
        raise NumabindError("numabind stat: --count goes with --watch")
    tty = sys.stdout.isatty()
    rounds = 0
    all_read = True
    try:
        while True:
            pids = _targets(args)      # a tree is listed again each round: workers come and go
            locs = _snapshot(pids)
            _show(locs, args, refresh=tty and not args.json)
            rounds += 1
            all_read = all(loc.ok for loc in locs)
            if args.watch is None or (args.count is not None and rounds >= args.count):
                return 0 if all_read else 1
            if all(loc.error and (loc.error.startswith("no such process") or loc.error.startswith("exited"))
                   for loc in locs):
                return 1       # every process is gone: nothing left to watch
            time.sleep(args.watch)
    except KeyboardInterrupt:      # the way a --watch ends
        return 0 if all_read else 1
