"""``numabind stat`` facing a process whose user is not the one running it (issue 25, items 2, 10, 12).

What such a process controls: its name (``prctl(PR_SET_NAME)``), and the environment it was exec'd
with, where numabind looks for its exec marker (``_NUMABIND_BOUND``). Its name must reach the
terminal as ``ps`` shows it (no control character, no escape sequence), the marker must not make
``stat`` work without bound, and a marker must not make ``stat`` call a process "bound by numabind"
that numabind did not start (pid reuse) or that an older numabind's pid-only marker cannot vouch for.
The processes here are this user's children (what matters is what they control, not who owns
them); every CPU id is derived from this process's affinity.
"""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

import pytest

from numabind import _proc, live
from numabind.cli import main
from numabind._base import printable as _printable
from numabind.plan import Plan
from numabind.residency import SOURCE_EXEC, SOURCE_UNVERIFIED, BoundBy, Locality, ThreadPlacement, locality
from numabind._proc import NodePages
from tests.helpers import PER_CHAR, Budget
from tests.workers import WORKER, Worker, blocks, stat

#: A name with an escape sequence (clear the screen), BEL, a C1 CSI as UTF-8, DEL, a right-to-left
#: override and a byte that is not UTF-8: 12 bytes, within the kernel's 15 for a task name.
HOSTILE_NAME = b"\x1b[2J\x07\xc2\x9b\x7f\xe2\x80\xae\xff"
NAMED = ("import ctypes; ctypes.CDLL(None).prctl(15, ctypes.c_char_p(%r), 0, 0, 0); " % HOSTILE_NAME) + WORKER


def _terminal_safe(text: str) -> bool:
    return all(c.isprintable() for line in text.split("\n") for c in line)


def test_printable_shows_what_a_terminal_would_act_on_as_question_marks():
    assert _printable("python3.11 worker-7") == "python3.11 worker-7"
    assert _printable("café 日本") == "café 日本"                       # printable non-ASCII stays
    assert _printable("\x1b[31mred\x1b[0m") == "?[31mred?[0m"
    assert _printable("a\x00b\tc\nd\x7fe") == "a?b?c?d?e"               # C0 controls and DEL
    assert _printable("\x9b31m\x85") == "?31m?"                          # C1 controls
    assert _printable("\u202eevil\u200b") == "?evil?"                    # bidi override, zero-width space
    assert _printable("bad\ufffdbyte\udcff") == "bad?byte?"              # not UTF-8 (replaced or escaped)


def _hostile_locality(pid: int, cpu: int) -> Locality:
    name = HOSTILE_NAME.decode("utf-8", "replace") + "\n\x1b]0;title\x07"
    pages = NodePages({0: 10}, {}, anon={0: 10}, policies={"bind:0 \x1b[2J": 10})
    return Locality(pid, name=name, pages=pages, page_size=4096, cpus=frozenset({cpu}), cpu_nodes=frozenset({0}),
                    threads=(ThreadPlacement(pid, name, frozenset({cpu}), frozenset({0})),
                             ThreadPlacement(pid + 1, name, frozenset({cpu + 1}), frozenset({0}))),
                    bound=BoundBy(SOURCE_EXEC, Plan(cpus={cpu})))


def test_text_output_escapes_everything_the_process_controls(monkeypatch, capsys):
    """Without the kernel: a Locality whose name, thread names and mapping policy hold control characters."""
    from numabind.cli import stat as stat_cli

    cpu = min(os.sched_getaffinity(0))
    loc = _hostile_locality(4242, cpu)
    monkeypatch.setattr(stat_cli, "_locality", lambda pid: loc)
    monkeypatch.setattr(live, "machine", lambda: SimpleNamespace(nodes={0: None}))    # the nodes the table shows
    assert main(["stat", "4242"]) == 0
    out = capsys.readouterr().out
    assert _terminal_safe(out), ascii(out)
    assert out.startswith("pid 4242 (?[2J???????]0;title?)  bound by numabind: ")
    assert "mapping policies: bind:0 ?[2J" in out

    assert main(["stat", "--json", "4242"]) == 0
    text = capsys.readouterr().out
    assert text.isascii() and _terminal_safe(text)          # JSON escapes every control character
    [d] = json.loads(text)
    assert d["name"] == loc.name and d["threads"][0]["name"] == loc.name      # exact
    assert d["pages"]["policies"] == {"bind:0 \x1b[2J": 10}


@pytest.mark.kernel
def test_a_process_named_with_escape_sequences_cannot_reach_the_terminal():
    with Worker(code=NAMED) as w:
        name = _proc.status_fields(w.pid)["Name"]
        cp = stat(str(w.pid))
        js = stat("--json", str(w.pid))
    assert name != "python3" and "\ufffd" in name              # the kernel kept what the process set
    assert cp.returncode == 0, cp.stderr
    assert _terminal_safe(cp.stdout), ascii(cp.stdout)
    assert cp.stdout.startswith(f"pid {w.pid} ({_printable(name)})")
    assert js.returncode == 0 and js.stdout.isascii() and _terminal_safe(js.stdout)
    assert json.loads(js.stdout)[0]["name"] == name             # JSON: the exact name, escaped


# ----------------------------------------------------------------------------- exec markers
#: Execs argv[4:] with an exec marker for itself: ``own`` (its pid and start time), ``reused`` (its
#: pid with another start time: what a process given a reused pid carries), ``old`` (its pid only, as
#: numabind before the start time wrote), ``parent`` (its parent's pid). exec keeps pid and start time.
MARK = r"""
import os, sys
how, requested, applied = sys.argv[1:4]
pid = os.getpid()
start = int(open("/proc/self/stat").read().rpartition(")")[2].split()[19])
owner = {"own": f"{pid}:{start}", "reused": f"{pid}:{start + 1}", "old": str(pid),
         "parent": f"{os.getppid()}:{start}"}[how]
os.execve(sys.argv[4], sys.argv[4:], dict(os.environ, _NUMABIND_BOUND=f"{owner}|{requested}|{applied}"))
"""


def marked(how: str, requested: str, applied: str = "") -> Worker:
    return Worker(sys.executable, "-c", MARK, how, requested, applied)


@pytest.mark.kernel
def test_a_marker_with_the_process_own_pid_and_start_time_is_trusted():
    cpu = min(os.sched_getaffinity(0))
    text = Plan(cpus={cpu}).to_text()
    with marked("own", text, text) as w:
        loc = locality(w.pid)
        cp = stat(str(w.pid))
    assert loc.bound == BoundBy(SOURCE_EXEC, Plan(cpus={cpu}), Plan(cpus={cpu})) and loc.bound.verified
    assert f"bound by numabind: cpus {cpu}" in blocks(cp.stdout)[w.pid][0]
    assert loc.to_dict()["bound"]["verified"] is True


@pytest.mark.kernel
@pytest.mark.parametrize("how", ["reused", "parent"])
def test_a_marker_of_another_process_is_ignored(how):
    """``reused``: the marker names this pid but another start time, as an unrelated process that was given
    the pid of an exited numabind-started one (and inherited its environment through a child) would."""
    cpu = min(os.sched_getaffinity(0))
    with marked(how, Plan(cpus={cpu}).to_text()) as w:
        loc = locality(w.pid)
        cp = stat(str(w.pid))
    assert loc.ok and loc.bound is None
    assert "numabind" not in blocks(cp.stdout)[w.pid][0]


@pytest.mark.kernel
def test_an_older_marker_without_a_start_time_is_shown_unverified_never_as_bound():
    cpu = min(os.sched_getaffinity(0))
    text = Plan(cpus={cpu}).to_text()
    with marked("old", text, text) as w:
        loc = locality(w.pid)
        cp = stat(str(w.pid))
        js = stat("--json", str(w.pid))
    assert loc.bound is not None and loc.bound.source == SOURCE_UNVERIFIED and not loc.bound.verified
    assert loc.bound.requested == Plan(cpus={cpu})
    head = blocks(cp.stdout)[w.pid][0]
    assert "bound by numabind" not in head and f"unverified numabind marker: cpus {cpu}" in head
    assert "bound by numabind" not in loc.describe() and "unverified" in loc.describe()
    d = json.loads(js.stdout)[0]["bound"]
    assert d["verified"] is False and d["source"] == SOURCE_UNVERIFIED
    assert Locality.from_dict(json.loads(js.stdout)[0]).bound.verified is False     # read back the same


@pytest.mark.kernel
def test_a_hostile_marker_costs_work_linear_in_its_size():
    """64 KiB of ``0-65535:1/1`` (each one 65536 ids) in the process's own, timed marker: refused by the caps,
    with the Python lines run in numabind's parsers counted against the marker's length."""
    text = "v1;cpus=" + ",".join(["0-65535:1/1"] * 5000) + ";mem=-;migrate=0"
    with marked("own", text) as w:
        with Budget(2 * PER_CHAR * len(text) + 20000):
            loc = locality(w.pid)
    assert loc.ok and loc.bound is None
