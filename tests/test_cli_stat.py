"""``numabind stat``: where processes' pages are, on this host's kernel.

Workers are children that touch 16 MiB and wait on stdin, bound (or not) by ``numabind run`` to a CPU
and node derived at run time. ``numabind stat`` runs as its own process (its stdout is a pipe, not a
terminal) except where a test simulates what a root test run cannot show here (another user's process,
a kernel without numa_maps): those call the CLI in-process with ``numabind.live`` patched, and say so.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import textwrap

import pytest

from numabind import _proc, live
from numabind._fs import FsReader
from numabind.cli import main
from numabind.cpulist import format_cpulist
from numabind.residency import Locality
from tests.fakesys import fake_numa_process
from tests.kernel import NO_SUCH_TID, ROOT, child_env, ids_of, process_node_pages, wait_zombie
from tests.workers import BirthChild, Worker, blocks, node_with_cpus, stat

pytestmark = pytest.mark.kernel


@pytest.fixture
def bound_worker():
    node, cpu = node_with_cpus()
    with Worker(sys.executable, "-m", "numabind", "run", "-C", str(cpu), "-m", str(node), "--") as w:
        w.node, w.cpu = node, cpu
        yield w


def test_text_of_a_bound_worker(bound_worker):
    w = bound_worker
    cp = stat(str(w.pid))
    assert cp.returncode == 0, cp.stderr
    [lines] = blocks(cp.stdout).values()
    head = lines[0]
    assert head.startswith(f"pid {w.pid} (python")
    assert f"bound by numabind: cpus {w.cpu}, memory bind {w.node}" in head
    assert "[numabind run / wrap_command (its environment at exec)]" in head
    assert f"  cpus {w.cpu} (nodes {w.node}), mems allowed" in lines[1]
    assert any(line.startswith("  mapping policies: ") and f"bind:{w.node}" in line for line in lines)
    table = [line.split() for line in lines if line.split()[:1] in (["MiB"], ["anon"], ["file"], ["huge"], ["total"])]
    assert table[0][:1] == ["MiB"] and f"{w.node}" in table[0] and table[-1][0] == "total"
    columns = [int(x) for x in table[0][1:] if x.isdigit()]    # "MiB node 0 node 1 ... total"
    anon = float(table[1][1 + columns.index(w.node)])
    assert anon >= 16.0                    # the 16 MiB it touched are on its node
    remote = next(line for line in lines if line.startswith("  remote: "))
    assert "by kind: anon 0.0%" in remote
    assert any(line.startswith("  1 thread(s), all on these cpus") for line in lines)


def test_json_shape(bound_worker):
    w = bound_worker
    cp = stat("--json", str(w.pid))
    assert cp.returncode == 0, cp.stderr
    data = json.loads(cp.stdout)
    assert isinstance(data, list) and len(data) == 1
    d = data[0]
    assert set(d) >= {"pid", "name", "error", "page_size", "pages", "cpus", "cpu_nodes", "mems_allowed", "mem_policy",
                      "local_pages", "remote_pages", "remote_share", "remote_share_by_kind", "threads", "bound"}
    assert d["pid"] == w.pid and d["error"] is None and d["cpus"] == str(w.cpu) and d["cpu_nodes"] == str(w.node)
    assert set(d["pages"]) == {"total", "anon", "file", "huge", "shared", "policies"}
    assert d["remote_share_by_kind"]["anon"] == 0.0
    assert d["threads"][0]["tid"] == w.pid and d["threads"][0]["cpus"] == str(w.cpu)
    assert d["bound"]["requested"] == f"v1;cpus={w.cpu};mem=bind:{w.node};migrate=0"
    assert d["mem_policy"] is None        # another process's policy is not readable (numa_maps shows it)
    loc = Locality.from_dict(d)
    assert loc.pid == w.pid and loc.remote_share_by_kind("anon") == 0.0


def test_several_pids_in_the_order_given_once_each(bound_worker):
    with Worker() as other:
        cp = stat("--json", str(other.pid), str(bound_worker.pid), str(other.pid))
    assert cp.returncode == 0, cp.stderr
    assert [d["pid"] for d in json.loads(cp.stdout)] == [other.pid, bound_worker.pid]


TREE = """
import subprocess, sys
code = "import sys; print('ready', flush=True); sys.stdin.read()"
kids = [subprocess.Popen([sys.executable, "-c", sys.argv[1] if len(sys.argv) > 1 else code], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True) for _ in range(2)]
for k in kids:
    k.stdout.readline()
print(" ".join(str(k.pid) for k in kids), flush=True)
print("ready", flush=True)
sys.stdin.read()
for k in kids:
    k.stdin.close()
    k.wait()
"""


def test_all_children_shows_a_whole_tree():
    """A parent with two children, each with two children of its own: --all-children lists all seven."""
    inner = TREE.replace('sys.argv[1] if len(sys.argv) > 1 else code', 'code')
    p = subprocess.Popen([sys.executable, "-c", TREE, inner], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, env=child_env(), cwd=ROOT)
    try:
        kids = [int(x) for x in p.stdout.readline().split()]
        assert p.stdout.readline().strip() == "ready"
        tree = {}
        for k in kids:
            with open(f"/proc/{k}/task/{k}/children") as f:
                tree[k] = [int(x) for x in f.read().split()]
        grandkids = [g for gs in tree.values() for g in gs]
        cp = stat("--json", "--all-children", str(p.pid))
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    assert cp.returncode == 0, cp.stderr
    pids = [d["pid"] for d in json.loads(cp.stdout)]
    assert pids[0] == p.pid                                         # parents before children
    assert sorted(pids) == sorted([p.pid, *kids, *grandkids]) and len(grandkids) == 4
    assert all(pids.index(k) < pids.index(g) for k, gs in tree.items() for g in gs)


def test_watch_with_count_on_a_pipe_prints_plain_lines(bound_worker):
    cp = stat("--watch", "0.05", "--count", "3", str(bound_worker.pid))
    assert cp.returncode == 0, cp.stderr
    assert "\x1b" not in cp.stdout                                  # no terminal control on a pipe
    heads = [line for line in cp.stdout.splitlines() if line.startswith("numabind stat, every 0.05 s: ")]
    assert len(heads) == 3
    assert len(blocks(cp.stdout)) == 1 and cp.stdout.count(f"pid {bound_worker.pid} (") == 3


def test_watch_json_is_one_list_per_line(bound_worker):
    cp = stat("--json", "--watch", "0.05", "--count", "2", str(bound_worker.pid))
    assert cp.returncode == 0, cp.stderr
    rounds = [json.loads(line) for line in cp.stdout.splitlines()]
    assert len(rounds) == 2 and all(r[0]["pid"] == bound_worker.pid for r in rounds)


def test_watch_on_a_terminal_refreshes_in_place(bound_worker):
    """stdout a pseudo-terminal: each round starts by clearing the screen (cursor home, erase)."""
    try:
        master, slave = pty.openpty()
    except OSError as e:      # e.g. a guest without devpts mounted
        pytest.skip(f"no pseudo-terminal can be opened here ({e})")
    p = subprocess.Popen([sys.executable, "-m", "numabind", "stat", "--watch", "0.05", "--count", "2",
                          str(bound_worker.pid)], stdout=slave, stderr=subprocess.PIPE, env=child_env(), cwd=ROOT)
    os.close(slave)
    out = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 60)
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:        # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
        assert p.wait(timeout=60) == 0, p.stderr.read()
    assert out.count(b"\x1b[H\x1b[2Jnumabind stat, every 0.05 s: ") == 2


def test_watch_ends_when_every_process_has_gone():
    p = subprocess.Popen([sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.read()"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    s = subprocess.Popen([sys.executable, "-m", "numabind", "stat", "--watch", "0.05", str(p.pid)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT)
    assert s.stdout.readline().startswith("numabind stat, every 0.05 s: ")   # it is watching
    p.stdin.close()
    p.wait()                                                                  # gone and reaped
    out, err = s.communicate(timeout=60)
    assert s.returncode == 1, err
    # the last round saw it gone, or exiting while being read (then nothing was left to watch either)
    last = [line for line in out.splitlines() if line.startswith(f"pid {p.pid} (")][-1]
    assert last == f"pid {p.pid} (?): no such process: /proc/{p.pid} does not exist" or (
        last.startswith(f"pid {p.pid} (") and ": exited" in last), out


def test_missing_and_exited_processes_are_reported_and_the_others_shown(bound_worker):
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        wait_zombie(zombie.pid)    # a zombie once it has exited: /proc/PID/stat says Z
        cp = stat(str(NO_SUCH_TID), str(zombie.pid), str(bound_worker.pid))
        data = json.loads(stat("--json", str(NO_SUCH_TID), str(zombie.pid)).stdout)
    finally:
        zombie.wait()
    assert cp.returncode == 1
    b = blocks(cp.stdout)
    assert b[NO_SUCH_TID] == [f"pid {NO_SUCH_TID} (?): no such process: /proc/{NO_SUCH_TID} does not exist"]
    assert len(b[zombie.pid]) == 1 and "exited: a zombie its parent has not reaped yet" in b[zombie.pid][0]
    assert any(line.startswith("  remote: ") for line in b[bound_worker.pid])   # still shown in full
    assert [(d["pid"], d["pages"], bool(d["error"])) for d in data] == [(NO_SUCH_TID, None, True),
                                                                        (zombie.pid, None, True)]


def test_permission_denied_is_one_line_for_that_process(bound_worker, monkeypatch, capsys):
    """Simulated (we run as root): numa_maps of one pid answers as for another user's process."""
    real = _proc.numa_maps_text
    denied = bound_worker.pid

    def numa_maps_text(pid="self", tid=None):
        return None if pid == denied else real(pid, tid)

    monkeypatch.setattr(_proc, "numa_maps_text", numa_maps_text)
    with Worker() as other:
        rc = main(["stat", str(denied), str(other.pid)])
    out = capsys.readouterr().out
    assert rc == 1
    b = blocks(out)
    assert f"permission denied reading /proc/{denied}/numa_maps" in b[denied][0]
    assert b[denied][1].startswith(f"  cpus {bound_worker.cpu} ")     # what could be read is shown
    assert not any(line.startswith("  remote:") for line in b[denied])
    assert any(line.startswith("  remote: ") for line in b[other.pid])


def test_a_kernel_without_numa_maps(tmp_path, monkeypatch, capsys):
    """A fake procfs/sysfs root (FsReader) whose process has no numa_maps: CONFIG_NUMA=n."""
    fake_numa_process(tmp_path, NO_SUCH_TID, numa_maps=None)
    monkeypatch.setattr(live, "_reader", FsReader(str(tmp_path)))
    rc = main(["stat", str(NO_SUCH_TID)])
    out = capsys.readouterr().out
    assert rc == 1
    assert out.splitlines()[0] == (f"pid {NO_SUCH_TID} (fake worker): this kernel has no /proc/PID/numa_maps "
                                   f"(built without NUMA: CONFIG_NUMA=n); pages per node unknown")
    assert out.splitlines()[1] == "  cpus 0-1 (nodes 0), mems allowed 0"


@pytest.mark.parametrize("args,message", [      # a bare stat and a name are no usage errors (issue 42 §5)
    (["--count", "2", "1"], "--count goes with --watch"),
    (["0"], "'0' is not a process id"),
    ([""], "neither a process id nor a pattern"),
    (["--watch", "0", "1"], "is not a number of seconds"),
    (["--watch", "nan", "1"], "is not a number of seconds"),
    (["--watch", "1", "--count", "0", "1"], "is not a positive count"),
])
def test_usage_errors(args, message):
    cp = stat(*args)
    assert cp.returncode == 2 and message in cp.stderr, (cp.returncode, cp.stderr)


def test_threads_on_different_cpus_are_grouped():
    """A worker whose main thread runs on one CPU and a second thread on another: one line per group."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs this process may use (a thread pinned apart from the main one)")
    a, b = allowed[0], allowed[-1]
    code = (f"import os, sys, threading\n"
            f"os.sched_setaffinity(0, {{{a}}})\n"
            f"ev, started = threading.Event(), threading.Event()\n"
            f"def pinned():\n"
            f"    os.sched_setaffinity(0, {{{b}}})\n"
            f"    print(threading.get_native_id(), flush=True)\n"
            f"    started.set()\n"
            f"    ev.wait()\n"
            f"t = threading.Thread(target=pinned, daemon=True)\n"
            f"t.start()\n"
            f"started.wait()\n")
    p = subprocess.Popen([sys.executable, "-c", code + "print('ready', flush=True); sys.stdin.read()"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT)
    try:
        tid = int(p.stdout.readline())
        assert p.stdout.readline().strip() == "ready"
        cp = stat(str(p.pid))
        data = json.loads(stat("--json", str(p.pid)).stdout)[0]
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    assert cp.returncode == 0, cp.stderr
    [lines] = blocks(cp.stdout).values()
    assert lines[1].startswith(f"  cpus {a},{b} " if b != a + 1 else f"  cpus {a}-{b} ")   # the union
    groups = [line for line in lines if " thread(s) (" in line]
    assert len(groups) == 2
    assert any(f"1 thread(s) ({tid}) on cpus {b} " in line for line in groups), groups
    assert any(f"({p.pid}) on cpus {a} " in line for line in groups), groups
    assert {t["tid"]: t["cpus"] for t in data["threads"]} == {p.pid: str(a), tid: str(b)}


def _numastat_totals(pid: int) -> dict[int, float]:
    out = subprocess.run(["numastat", "-p", str(pid)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    header = next(line for line in lines if line.strip().startswith("Node "))
    nodes = [int(w) for w in header.split()[1::2] if w.isdigit()]
    total = next(line for line in lines if line.startswith("Total")).split()[1:1 + len(nodes)]
    return {n: float(v) for n, v in zip(nodes, total)}


def test_per_node_totals_match_numastat(bound_worker):
    """numastat -p (numactl's package) reads the same numa_maps: its per-node Total row and numabind stat's agree.

    A worker that has just said "ready" may still fault in pages of the interpreter's code on its way into
    the blocking read (seconds under emulation), so the comparison is made on a round where the worker's
    numa_maps read the same before numastat and after numabind stat (a few rounds at most)."""
    import shutil

    if shutil.which("numastat") is None:
        pytest.skip("numastat is not installed (Debian package numactl)")
    for _ in range(10):
        before = process_node_pages(bound_worker.pid)
        theirs = _numastat_totals(bound_worker.pid)
        d = json.loads(stat("--json", str(bound_worker.pid)).stdout)[0]
        if process_node_pages(bound_worker.pid) == before:
            break
    else:
        pytest.fail(f"the worker's numa_maps kept changing: {before}")
    ours = {int(n): c * d["page_size"] / (1 << 20) for n, c in d["pages"]["total"].items()}
    for n, mib in theirs.items():      # the same pages, to numastat's two decimals
        assert abs(mib - ours.get(n, 0.0)) <= 0.01, (n, theirs, ours)


# ----------------------------------------------------------------------------- how numabind bound it
def test_a_command_started_through_numactl_shows_its_requested_plan():
    """numabind run --backend numactl execs the numactl wrapper, which marks the command with the plan asked
    for; what numactl applied is not known there, and stat says so (and shows the affinity it reads)."""
    import shutil

    if shutil.which("numactl") is None:
        pytest.skip("numactl is not installed (Debian package numactl): the numactl backend cannot run")
    _, cpu = node_with_cpus()
    with Worker(sys.executable, "-m", "numabind", "run", "--backend", "numactl", "-C", str(cpu), "--") as w:
        cp = stat(str(w.pid))
        cj = stat("--json", str(w.pid))
    assert cp.returncode == 0 and cj.returncode == 0, cp.stderr + cj.stderr
    [lines] = blocks(cp.stdout).values()
    assert f"bound by numabind: cpus {cpu}, memory unchanged" in lines[0]
    assert "through numactl" in lines[0] and "applied by numactl, not read back" in lines[0]
    assert f"  cpus {cpu} (nodes" in lines[1]
    [d] = json.loads(cj.stdout)
    assert d["bound"]["requested"] == f"v1;cpus={cpu};mem=-;migrate=0" and d["bound"]["applied"] is None
    assert "through numactl" in d["bound"]["source"] and d["cpus"] == str(cpu)


def test_a_fork_child_bound_at_birth_shows_its_runtime_record(tmp_path):
    """A child bound at birth in-process (configure_subprocess, fork) is shown with its plan and the source."""
    from numabind.plan import Plan

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    node, cpu = node_with_cpus()
    with BirthChild(tmp_path, "fork", Plan(cpus={cpu}, mem_policy="bind", mem_nodes={node}),
                    XDG_RUNTIME_DIR=str(run)) as c:
        cp = stat(str(c.pid), env=c.env)
    assert cp.returncode == 0, cp.stderr
    [lines] = blocks(cp.stdout).values()
    assert f"bound by numabind: cpus {cpu}, memory bind {node} [runtime record (fork)]" in lines[0]


HOSTILE_MARKS = ["v1;cpus=0;mem=-;migrate=0$(touch {m})", "v1;cpus=0;mem=-;migrate=0`touch {m}`",
                 "v1;cpus=0;mem=-;migrate=0|touch {m}", "v1;cpus=0;mem=-;migrate=0\ntouch {m}",
                 "v1;cpus=0;mem=-;migrate=0 {m}", "v1;cpus=0;mem=-;migrate=0;\"{m}\"", "touch {m}", ""]


@pytest.mark.parametrize("mark", HOSTILE_MARKS, ids=[repr(m)[:40] for m in HOSTILE_MARKS])
def test_the_numactl_wrapper_refuses_a_mark_that_is_not_plan_text(mark, tmp_path):
    """The wrapper's --mark value only ever lands in _NUMABIND_BOUND, and anything but plan text is refused."""
    import shutil

    from numabind.backends.numactl import WRAPPER

    numactl = shutil.which("numactl")
    if numactl is None:
        pytest.skip("numactl is not installed (Debian package numactl): the wrapper cannot run")
    ran = tmp_path / "ran"
    cp = subprocess.run([WRAPPER, f"--numactl={numactl}", "--mark=" + mark.format(m=ran),
                         f"--physcpubind={min(os.sched_getaffinity(0))}", "--", "/usr/bin/touch", str(ran)],
                        capture_output=True, text=True, env=child_env(), timeout=60)
    assert cp.returncode == 127, (cp.returncode, cp.stderr)
    assert "numabind numactl wrapper: refusing --mark" in cp.stderr
    assert not ran.exists()


def test_the_numactl_wrapper_marks_the_command_with_its_own_pid_and_start_time():
    import shutil

    from numabind.backends.numactl import WRAPPER

    numactl = shutil.which("numactl")
    if numactl is None:
        pytest.skip("numactl is not installed (Debian package numactl): the wrapper cannot run")
    text = f"v1;cpus={min(os.sched_getaffinity(0))};mem=-;migrate=0"
    code = ("import os; print(os.getpid(), os.environ['_NUMABIND_BOUND'], "
            "open('/proc/self/stat').read().rpartition(')')[2].split()[19])")
    cp = subprocess.run([WRAPPER, f"--numactl={numactl}", f"--mark={text}", "--", sys.executable, "-c", code],
                        capture_output=True, text=True, env=child_env(_NUMABIND_BOUND="1|inherited|x"), timeout=60)
    assert cp.returncode == 0, cp.stderr
    pid, marker, start = cp.stdout.split()
    assert marker == f"{pid}:{start}|{text}|numactl"     # the shell's start time, which exec kept


# ----------------------------------------------------------------------------- a binding someone overwrote
#: What TensorRT-LLM's configure_cpu_affinity does once its worker runs (TLLM_NUMA_AWARE_WORKER_AFFINITY unset,
#: a constrained mask): every thread's affinity set to all online CPUs. A second thread is started first, so
#: the reset covers a thread numabind's bind did not see born.
REPIN = textwrap.dedent("""
    import os, sys, threading
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    def online():
        out = set()
        for part in open("/sys/devices/system/cpu/online").read().strip().split(","):
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
        return out
    if sys.argv[1] == "reset":
        for tid in os.listdir("/proc/self/task"):
            os.sched_setaffinity(int(tid), online())
    print(t.native_id, flush=True)
    print("ready", flush=True)
    sys.stdin.read()
""")


def _repinned_worker(mode: str, cpu: int) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen([sys.executable, "-m", "numabind", "run", "-C", str(cpu), "--", sys.executable, "-c",
                          REPIN, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env(),
                         cwd=ROOT)
    tid = int(p.stdout.readline())
    assert p.stdout.readline().strip() == "ready"
    return p, tid


def test_a_binding_reset_to_all_cpus_is_shown_as_changed():
    online = ids_of(open("/sys/devices/system/cpu/online").read())
    if len(online) < 2:
        pytest.skip("needs two online CPUs (a reset to all CPUs changes nothing on one)")
    cpu = min(os.sched_getaffinity(0))
    p, tid = _repinned_worker("reset", cpu)
    try:
        cp = stat(str(p.pid))
        cj = stat("--json", str(p.pid))
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    assert cp.returncode == 0 and cj.returncode == 0, cp.stderr + cj.stderr
    [lines] = blocks(cp.stdout).values()
    assert f"bound by numabind: cpus {cpu}, memory unchanged" in lines[0]
    now = format_cpulist(online)
    assert lines[2] == f"  changed since numabind bound it: was CPUs {cpu}, now {now} (all 2 threads)"
    [d] = json.loads(cj.stdout)
    assert d["binding_changed"] == {"was_cpus": str(cpu), "unchanged_threads": 0,
                                    "threads": [{"tid": p.pid, "cpus": now}, {"tid": tid, "cpus": now}]}


def test_a_binding_left_alone_is_not_changed():
    cpu = min(os.sched_getaffinity(0))
    p, _ = _repinned_worker("keep", cpu)
    try:
        cp = stat(str(p.pid))
        cj = stat("--json", str(p.pid))
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    assert cp.returncode == 0 and cj.returncode == 0, cp.stderr + cj.stderr
    [lines] = blocks(cp.stdout).values()
    assert f"bound by numabind: cpus {cpu}" in lines[0]
    assert not any("changed since numabind bound it" in line for line in lines)
    assert json.loads(cj.stdout)[0]["binding_changed"] is None


def test_one_thread_of_several_repinned():
    """Only the threads whose CPUs differ are named; the others are counted as unchanged."""
    from numabind.plan import Plan
    from numabind.residency import BoundBy, Locality, ThreadPlacement

    from numabind.cli.stat import _block, binding_changed

    loc = Locality(4242, name="w", cpus=frozenset({2, 3, 0, 1}), cpu_nodes=frozenset({0}),
                   threads=(ThreadPlacement(4242, "w", frozenset({2, 3}), frozenset({0})),
                            ThreadPlacement(4243, "w", frozenset({0, 1, 2, 3}), frozenset({0})),
                            ThreadPlacement(4244, "w", frozenset({2, 3}), frozenset({0}))),
                   bound=BoundBy("numabind run / wrap_command (its environment at exec)", Plan(cpus={2, 3})))
    assert binding_changed(loc) == {"was_cpus": "2-3", "threads": [{"tid": 4243, "cpus": "0-3"}],
                                    "unchanged_threads": 2}
    assert _block(loc, [0])[2] == ("  changed since numabind bound it: was CPUs 2-3, now 0-3 (1 thread(s): 4243); "
                                   "2 thread(s) unchanged")
    memory_only = Locality(4242, name="w", cpus=loc.cpus, cpu_nodes=loc.cpu_nodes, threads=loc.threads,
                           bound=BoundBy("runtime record (fork)", Plan(mem_policy="bind", mem_nodes={0})))
    assert binding_changed(memory_only) is None         # numabind bound no CPUs: none can have changed
