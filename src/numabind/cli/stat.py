"""``numabind stat PID|PATTERN... [--all-children PID] [--json] [--watch S [--count N]]``: where processes' pages
are; ``numabind stat [--system]``: every node's memory, like ``numastat -m -n`` (docs/cli.rst).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from .._base import printable
from ..cpulist import format_cpulist
from ..errors import NumabindError
from ._parser import VERBOSE_HELP, pid_arg
from .look import table

__all__ = ["DESCRIPTION", "add_parser", "binding_changed", "cmd_stat", "system_text"]

#: What ``stat --help`` says of the targets.
DESCRIPTION = ("A target that is all digits is a process id; any other is a pattern, as ``numastat -p PATTERN`` takes "
               "one: every process whose name or command line holds it (numabind itself left out; with ``--watch`` "
               "looked up again each round). A pattern that matches no process is an error naming it (exit 1).")

_CLEAR = "\x1b[H\x1b[2J"       # cursor home, clear the screen: a refresh in place on a terminal


def _target(text: str) -> int | str:
    """A process id when ``text`` is all digits, else a pattern (:func:`numabind._proc.processes_matching`)."""
    if text.isascii() and text.isdigit():
        return pid_arg(text)
    if not text:
        raise argparse.ArgumentTypeError("'' is neither a process id nor a pattern: give a PID or a process name")
    return text


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
                       description=DESCRIPTION)
    s.add_argument("pids", nargs="*", type=_target, metavar="PID|PATTERN",
                   help="processes to show: a process id, or a pattern matched as numastat matches it (every process "
                        "whose name or command line holds it, e.g. python3); none: the system, as --system")
    s.add_argument("--all-children", action="append", type=pid_arg, default=[], metavar="PID",
                   help="this process and all its descendants (a worker tree); may be given more than once")
    s.add_argument("--json", action="store_true", help="one JSON list of numabind.residency.Locality.to_dict()")
    s.add_argument("--watch", type=_seconds, metavar="SECONDS",
                   help="refresh every SECONDS (in place on a terminal, appended lines otherwise; JSON: one list "
                        "per line) until interrupted or every process has exited")
    s.add_argument("--count", type=_count, metavar="N", help="with --watch: stop after N refreshes")
    s.add_argument("--system", action="store_true",
                   help="no PID: every node's memory use and NUMA hits and misses, like numastat -m -n "
                        "(under --root / $NUMABIND_FSROOT)")
    s.add_argument("--root", default=argparse.SUPPRESS, help=argparse.SUPPRESS)   # the global options, after stat
    s.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=VERBOSE_HELP)


def _targets(args: argparse.Namespace) -> list[int]:
    from .. import _proc

    pids: dict[int, None] = {}      # in order, once each
    for target in args.pids:
        found = [target] if isinstance(target, int) else [pid for pid, _ in _proc.processes_matching(target)]
        pids.update(dict.fromkeys(found))
    for root in args.all_children:
        pids.update(dict.fromkeys(_proc.process_tree(root)))
    return list(pids)


def _still_in_tree(locs: list[Any], listed: list[int], args: argparse.Namespace) -> list[Any]:
    """``locs`` without the descendants of ``--all-children`` whose parent is no longer in the tree ``listed``
    (their pid was reused)."""
    if not args.all_children:
        return locs
    from .. import _proc

    tree, named = set(listed), {p for p in args.pids if isinstance(p, int)} | set(args.all_children)
    out = []
    for loc in locs:
        if loc.pid not in named:
            ppid = (_proc.status_fields(loc.pid) or {}).get("PPid", "")
            if not (ppid.isascii() and ppid.isdigit() and int(ppid) in tree):
                continue
        out.append(loc)
    return out


def _mib(pages: int, page_size: int) -> str:
    return f"{pages * page_size / (1 << 20):.1f}"


def binding_changed(loc: Any) -> dict[str, Any] | None:
    """The threads of ``loc`` (a :class:`numabind.residency.Locality`) off the CPUs numabind's verified record
    bound: ``{"was_cpus": "2-3", "threads": [{"tid": 7, "cpus": "0-3"}], "unchanged_threads": 1}``, else None."""
    b = loc.bound
    if b is None or not b.verified or b.requested.cpus is None or not loc.threads:
        return None
    was = b.applied.cpus if b.applied is not None and b.applied.cpus is not None else b.requested.cpus
    moved = [t for t in loc.threads if t.cpus != was]
    if not moved:
        return None
    return {"was_cpus": format_cpulist(was), "threads": [{"tid": t.tid, "cpus": format_cpulist(t.cpus)} for t in moved],
            "unchanged_threads": len(loc.threads) - len(moved)}


def _changed_line(changed: dict[str, Any], threads: int) -> str:
    groups: dict[str, list[int]] = {}
    for t in changed["threads"]:
        groups.setdefault(t["cpus"], []).append(t["tid"])
    parts = []
    for cpus, tids in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0])):
        who = (f"all {threads} threads" if len(tids) == threads > 1 else
               "its thread" if len(tids) == threads else
               f"{len(tids)} thread(s): " + ", ".join(str(t) for t in tids[:6]) + (" ..." if len(tids) > 6 else ""))
        parts.append(f"{cpus or 'none'} ({who})")
    tail = f"; {changed['unchanged_threads']} thread(s) unchanged" if changed["unchanged_threads"] else ""
    return f"  changed since numabind bound it: was CPUs {changed['was_cpus']}, now " + ", ".join(parts) + tail


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
        if b.applied is not None and (b.applied.cpus != b.requested.cpus or (
                b.requested.mem_policy is not None and b.applied.mem_policy != b.requested.mem_policy)):
            head += f"; applied then: {b.applied.describe()}"
    lines = [head]
    mems = format_cpulist(loc.mems_allowed) if loc.mems_allowed is not None else "?"
    lines.append(f"  cpus {format_cpulist(loc.cpus) or '?'} (nodes {format_cpulist(loc.cpu_nodes) or 'none'}), "
                 f"mems allowed {mems}")
    changed = binding_changed(loc)
    if changed is not None:
        lines.append(_changed_line(changed, len(loc.threads)))
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
    lines += ["  " + line for line in table(rows, figures=True).split("\n")]
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


def _locality(pid: int) -> Any:
    """:func:`numabind.residency.locality` of ``pid``, else a Locality whose ``error`` says why (another user's
    process still with its threads' CPUs, which anyone may read)."""
    from ..errors import AccessDenied, NoSuchProcess
    from ..residency import Locality, ThreadPlacement, locality

    try:
        return locality(pid)
    except NoSuchProcess as e:
        return Locality(pid, name=e.name or "?", error=e.reason)
    except AccessDenied as e:
        from .. import _proc, live
        from ..cpulist import parse_cpulist

        node_cpus = {n: node.cpus for n, node in live.machine().nodes.items()}
        tasks = _proc.process_tasks(pid)
        threads = [] if tasks is None else [
            ThreadPlacement(tid, tasks.names.get(tid, "?"), tasks.cpus[tid],
                            frozenset(n for n, c in node_cpus.items() if c & tasks.cpus[tid]))
            for tid in sorted(tasks.cpus, key=lambda t: (t != pid, t))]   # the main thread first
        cpus = frozenset().union(*(t.cpus for t in threads))
        try:
            mems = parse_cpulist((_proc.status_fields(pid) or {}).get("Mems_allowed_list", ""),
                                 what="Mems_allowed_list")
        except ValueError:
            mems = None
        return Locality(pid, name=e.name or "?", error=e.reason, cpus=cpus, threads=tuple(threads),
                        cpu_nodes=frozenset(n for n, c in node_cpus.items() if c & cpus), mems_allowed=mems or None)


def _show(locs: list[Any], args: argparse.Namespace, refresh: bool) -> None:
    if args.json:
        sys.stdout.write(_json([dict(loc.to_dict(), binding_changed=binding_changed(loc)) for loc in locs], args))
    else:
        from .. import live

        nodes = sorted(live.machine().nodes)
        out = [_heading("numabind stat", args, refresh)] if args.watch else []
        for loc in locs:
            out += [printable(line) for line in _block(loc, nodes)]   # every line: names and plans are the process's
        text = "\n".join(out) + "\n"
        encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
        try:     # a character this terminal's encoding cannot show is a '?' too, not an error
            text = text.encode(encoding, "replace").decode(encoding)
        except LookupError:
            pass
        sys.stdout.write(text)
    sys.stdout.flush()


# ----------------------------------------------------------------------------- --watch
def _heading(title: str, args: argparse.Namespace, clear: bool) -> str:
    """The line above each round of ``--watch``: what, how often, when (after clearing the screen when ``clear``)."""
    return f"{_CLEAR if clear else ''}{title}, every {args.watch:g} s: {time.strftime('%Y-%m-%d %H:%M:%S')}"


def _json(value: Any, args: argparse.Namespace) -> str:
    """``--json``'s text of a round: indented, or one line per round with ``--watch``."""
    return json.dumps(value, sort_keys=True, indent=None if args.watch else 2) + "\n"


def _rounds(args: argparse.Namespace, step: Callable[[int], tuple[bool, bool]]) -> int:
    """``step(round)`` once, or every ``--watch`` seconds until ``--count`` rounds, an interrupt, or all is gone
    (exit 1). ``step`` returns (read everything, all gone); exit 0 when the last round read everything."""
    rounds, ok = 0, True
    try:
        while True:
            ok, gone = step(rounds)
            rounds += 1
            if args.watch is None or (args.count is not None and rounds >= args.count):
                return 0 if ok else 1
            if gone:
                return 1       # every process is gone: nothing left to watch
            time.sleep(args.watch)
    except KeyboardInterrupt:      # the way a --watch ends
        return 0 if ok else 1


# ----------------------------------------------------------------------------- --system
_COL = 16      # numastat's column width: the labels left-justified, the figures right-justified


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / (1 << 20):.2f}"


def _numastat_table(title: str, node_ids: list[int], rows: list[tuple[str, list[int | None]]]) -> list[str]:
    """numastat's table: a blank line, the title, the column heads, dashes, a row per figure (MiB, 2 decimals)."""
    heads = [f"Node {n}" for n in node_ids] + ["Total"]
    out = ["", title, " " * _COL + "".join(h.rjust(_COL) for h in heads),
           " " * _COL + "".join(" " + "-" * (_COL - 1) for _ in heads)]
    for label, values in rows:
        total = None if any(v is None for v in values) else sum(v for v in values if v is not None)
        out.append(label.ljust(_COL) + "".join(_mb(v).rjust(_COL) for v in [*values, total]))
    return out


def _counter_label(name: str) -> str:
    """numastat's label of a counter: each word after an underscore capitalised (numa_hit -> Numa_Hit)."""
    return "_".join(w[:1].upper() + w[1:] for w in name.split("_"))


def system_text(sm: Any) -> list[str]:
    """The lines of ``numastat -m -n`` for a :class:`numabind.nodestat.SystemMemory`."""
    ids = [n.node for n in sm.nodes]
    memory = [(row, [n.memory.get(row) for n in sm.nodes]) for row in sm.memory_rows()]
    counters = [(_counter_label(row), [None if row not in n.numastat else n.numastat[row] * sm.page_size
                                       for n in sm.nodes]) for row in sm.numastat_rows()]
    out = _numastat_table("Per-node system memory usage (in MBs):", ids, memory)
    if counters:
        out += _numastat_table("Per-node numastat info (in MBs):", ids, counters)
    return out


def _system(args: argparse.Namespace) -> int:
    """``numabind stat --system``: one snapshot, or one per interval with ``--watch``."""
    from ..nodestat import system_memory

    tty = sys.stdout.isatty()

    def step(rounds: int) -> tuple[bool, bool]:
        sm = system_memory(getattr(args, "root", None))
        if args.json:
            sys.stdout.write(_json(sm.to_dict(), args))
        else:
            heading = [_heading("numabind stat --system", args, tty and rounds > 0)] if args.watch else []
            sys.stdout.write("\n".join(heading + system_text(sm)) + "\n")
        sys.stdout.flush()
        for n in sm.nodes:
            for why in n.errors:
                sys.stderr.write(f"numabind stat: node {n.node}: {printable(why)}\n")
        return sm.ok, False

    return _rounds(args, step)


def cmd_stat(args: argparse.Namespace) -> int:
    """Show each process; with ``--watch``, again every interval. Exit 0 when every process was read in full."""
    if args.count is not None and args.watch is None:
        raise NumabindError("numabind stat: --count goes with --watch")
    if getattr(args, "system", False):
        if args.pids or args.all_children:
            raise NumabindError("numabind stat: --system shows the whole machine; give no PID with it")
        return _system(args)
    if not args.pids and not args.all_children:
        return _system(args)          # a bare numabind stat, as a bare numastat, shows the system
    from .. import _proc

    try:
        _proc.check_procfs("numabind stat")    # pids read from a /proc of another PID namespace are not these
    except NumabindError as e:     # not a usage error: the machine's /proc is not this namespace's
        sys.stderr.write(f"numabind: error: {printable(str(e))}\n")
        return 1
    for pattern in [p for p in args.pids if isinstance(p, str)]:
        if not _proc.processes_matching(pattern):     # numastat's "Can't find process": an error naming it
            sys.stderr.write(f"numabind: error: no process matches {printable(repr(pattern))} (numabind stat "
                             f"matches a pattern against each process's name and command line; numabind itself "
                             f"is left out): check the name, or give a PID\n")
            return 1
    refresh = sys.stdout.isatty() and not args.json

    def step(rounds: int) -> tuple[bool, bool]:
        pids = _targets(args)      # a tree is listed again each round: workers come and go
        locs = _still_in_tree([_locality(pid) for pid in pids], pids, args)
        _show(locs, args, refresh=refresh)
        return all(loc.ok for loc in locs), all(
            loc.error and (loc.error.startswith("no such process") or loc.error.startswith("exited")) for loc in locs)

    return _rounds(args, step)
