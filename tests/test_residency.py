"""numabind.locality (numabind.residency) and the numa_maps parser behind it.

* Pure tests of :func:`numabind._proc.parse_numa_maps`: lines built by hypothesis with an independent
  expectation (per node, per kind of mapping, per policy, huge pages scaled to base pages).
* Real-kernel tests on this host: this process and children bound at run time to a CPU and node
  derived here (never assumed), a child of a child, a process that does not exist and one that has
  exited (a zombie).
* What the real kernel of a root test run cannot show is simulated and says so: a process whose
  numa_maps may not be read (another user's; we run as root, so numa_maps_text is made to answer as
  for a refused read), a kernel built without NUMA (a fake procfs/sysfs root without numa_maps,
  through :class:`numabind._fs.FsReader`), and a process exiting while being read.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import numabind
from numabind import _proc, live
from numabind._fs import FsReader
from numabind.errors import AccessDenied, NoSuchProcess, NumabindError
from numabind._proc import NodePages, parse_numa_maps
from numabind.plan import Plan
from numabind.residency import Locality, ThreadPlacement, locality
from tests.fakesys import fake_numa_process
from tests.kernel import NO_SUCH_TID, ROOT, child_env, ids_of, numabind_cli, process_node_pages, run_json, wait_zombie
from tests.workers import WORKER, BirthChild, Worker, node_with_cpus

PAGE = os.sysconf("SC_PAGE_SIZE")


# --------------------------------------------------------------------------- the parser
POLICIES = ("default", "bind:0", "bind=static:0-1", "interleave:0-3", "weighted interleave:0-1",
            "prefer:1", "prefer (many):0-1", "preferred-many=relative:2", "local")
_FILES = st.sampled_from(["/usr/lib/libc.so.6", "/dev/zero", "/tmp/x"])


@st.composite
def mapping_lines(draw):
    """(a numa_maps line, what it should count): the node counts, its kind, whether shared, its policy."""
    policy = draw(st.sampled_from(POLICIES))
    words = [f"{draw(st.integers(0x1000, 2 ** 47)):x}", policy]
    file = draw(st.one_of(st.none(), _FILES))
    tag = draw(st.sampled_from([None, "heap", "stack"])) if file is None else None
    huge_flag = draw(st.booleans()) and tag is None
    if file:
        words.append(f"file={file}")
    if tag:
        words.append(tag)
    if huge_flag:
        words.append("huge")
    if draw(st.booleans()):
        words.append(f"anon={draw(st.integers(0, 999))}")
    if draw(st.booleans()):
        words.append(f"dirty={draw(st.integers(0, 999))}")
    mapmax = draw(st.one_of(st.none(), st.integers(1, 9)))
    if mapmax is not None:
        words.append(f"mapmax={mapmax}")
    nodes = draw(st.dictionaries(st.integers(0, 63), st.integers(1, 10 ** 6), max_size=4))
    words += [f"N{n}={c}" for n, c in nodes.items()]
    kpage = draw(st.sampled_from([PAGE // 1024, PAGE // 1024, 2048, 1048576]))
    words.append(f"kernelpagesize_kB={kpage}")
    scale = max(1, kpage * 1024 // PAGE)
    kind = "huge" if huge_flag or scale > 1 else "file" if file else "anon"
    shared = bool(file) or (mapmax or 0) > 1
    return " ".join(words), {n: c * scale for n, c in nodes.items()}, kind, shared, policy


def _expected(items) -> dict:
    out = {"total": {}, "anon": {}, "file": {}, "huge": {}, "shared": {}, "policies": {}}
    for _, counts, kind, shared, policy in items:
        for n, c in counts.items():
            for key in ("total", kind) + (("shared",) if shared else ()):
                out[key][n] = out[key].get(n, 0) + c
        if counts:
            out["policies"][policy] = out["policies"].get(policy, 0) + sum(counts.values())
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(mapping_lines(), max_size=12))
def test_parse_numa_maps_counts_every_line_by_node_kind_and_policy(items):
    pages = parse_numa_maps("\n".join(line for line, *_ in items) + ("\n" if items else ""), page_size=PAGE)
    want = _expected(items)
    assert pages.total == want["total"]
    assert (pages.anon, pages.file, pages.huge, pages.shared) == (want["anon"], want["file"], want["huge"],
                                                                  want["shared"])
    assert pages.policies == want["policies"]
    # every page is of exactly one kind, and the policies account for all of them
    for n, c in pages.total.items():
        assert pages.anon.get(n, 0) + pages.file.get(n, 0) + pages.huge.get(n, 0) == c
    assert sum(pages.policies.values()) == pages.pages


@settings(max_examples=100, deadline=None)
@given(st.lists(mapping_lines(), max_size=6), st.lists(mapping_lines(), max_size=6))
def test_parse_numa_maps_is_additive_over_lines(a, b):
    def parse(items):
        return parse_numa_maps("\n".join(x[0] for x in items), page_size=PAGE)

    both, left, right = parse(a + b), parse(a), parse(b)
    for key in ("total", "anon", "file", "huge", "shared", "policies"):
        merged = dict(getattr(left, key))
        for k, v in getattr(right, key).items():
            merged[k] = merged.get(k, 0) + v
        assert getattr(both, key) == merged


# words a numa_maps line may hold, whole or broken, mixed with junk
_MAPS_WORDS = st.one_of(st.text(max_size=8), st.sampled_from([
    "N0=3", "N1=12", "N7=0", "N2=x", "N=4", "Nx=1", "N0=", "=", "huge", "file=/a", "mapmax=2", "mapmax=x",
    "kernelpagesize_kB=2048", "kernelpagesize_kB=0", "anon=5", "dirty=1", "bind:0", "default", "7f00"]))


@given(st.one_of(st.text(max_size=300),
                 st.lists(st.lists(_MAPS_WORDS, max_size=8).map(" ".join), max_size=6).map("\n".join)))
def test_parse_numa_maps_never_raises_on_junk(text):
    pages = parse_numa_maps(text, page_size=PAGE)
    # what it counts is consistent: each node's pages are anonymous, file-backed or huge, shared ones are
    # among them, every page is under one policy, and only nodes the text names as N<id>= are counted
    for node, n in pages.total.items():
        assert isinstance(n, int) and n >= 0
        assert sum(getattr(pages, kind).get(node, 0) for kind in ("anon", "file", "huge")) == n, (node, pages)
        assert pages.shared.get(node, 0) <= n
    assert set(pages.shared) <= set(pages.total)
    assert set(pages.anon) | set(pages.file) | set(pages.huge) <= set(pages.total)
    assert sum(pages.policies.values()) == sum(pages.total.values())
    assert set(pages.total) <= {int(m) for m in re.findall(r"N([0-9]+)=", text)}


def test_parse_numa_maps_skips_counts_that_are_not_ascii_digits():
    # str.isdigit() takes a superscript two, and int() refuses it: the word is junk, not a count (nor a node)
    pages = parse_numa_maps("7f00 default anon=1 N0=\u00b2 N\u00b2=5 N1=2 kernelpagesize_kB=4", page_size=4096)
    assert pages.total == {1: 2}


def test_parse_numa_maps_real_lines():
    text = (
        "55d0c0a00000 default file=/usr/bin/python3.11 mapped=2 mapmax=3 N0=2 kernelpagesize_kB=4\n"
        "55d0c1a00000 default heap anon=50 dirty=50 active=0 N0=30 N1=20 kernelpagesize_kB=4\n"
        "7f0000000000 weighted interleave:0-1 anon=512 dirty=512 N0=384 N1=128 kernelpagesize_kB=4\n"
        "7f1000000000 bind:1 anon=1024 dirty=1024 N1=1024 kernelpagesize_kB=4\n"
        "7f2000000000 default anon=512 dirty=512 N0=512 kernelpagesize_kB=4\n"       # a THP region: anon
        "7f3000000000 prefer (many):0-1 file=/dev/hugepages/x huge dirty=2 N1=2 kernelpagesize_kB=2048\n"
        "7f4000000000 default file=/tmp/a\\040b\\012c mapped=1 N0=1 kernelpagesize_kB=4\n"   # escaped name
        "7ffd00000000 default stack anon=33 dirty=33 N0=33 kernelpagesize_kB=4\n"
        "7ffd10000000 default\n"                                                     # nothing resident
    )
    p = parse_numa_maps(text, page_size=4096)
    huge = 2 * 512
    assert p.total == {0: 2 + 30 + 384 + 512 + 1 + 33, 1: 20 + 128 + 1024 + huge}
    assert p.file == {0: 3} and p.huge == {1: huge}
    assert p.anon == {0: 30 + 384 + 512 + 33, 1: 20 + 128 + 1024}
    assert p.shared == {0: 3, 1: huge}
    assert p.policies == {"default": 2 + 50 + 512 + 1 + 33, "weighted interleave:0-1": 512, "bind:1": 1024,
                          "prefer (many):0-1": huge}


# --------------------------------------------------------------------------- Locality as a value
def _loc(**kw) -> Locality:
    pages = NodePages(total={0: 300, 1: 100}, shared={0: 10}, anon={0: 200, 1: 100}, file={0: 100},
                      policies={"default": 400})
    base = dict(pid=77, name="w", pages=pages, page_size=4096, cpus=frozenset({2, 3}), cpu_nodes=frozenset({1}),
                threads=(ThreadPlacement(77, "w", frozenset({2, 3}), frozenset({1})),
                         ThreadPlacement(78, "io", frozenset({0}), frozenset({0}))),
                mems_allowed=frozenset({0, 1}))
    base.update(kw)
    return Locality(**base)


def test_locality_figures():
    loc = _loc()
    assert loc.ok and loc.total_pages == 400 and loc.local_pages == 100 and loc.remote_pages == 300
    assert loc.remote_share == 0.75 and loc.local_share == 0.25
    assert loc.remote_share_of({0}) == 0.25
    assert loc.remote_share_by_kind("anon") == 200 / 300 and loc.remote_share_by_kind("file") == 1.0
    assert loc.remote_share_by_kind("huge") is None
    with pytest.raises(NumabindError, match="kind 'stack' is not one of anon, file, huge"):
        loc.remote_share_by_kind("stack")
    empty = _loc(pages=None, error="exited while being read")
    assert not empty.ok and empty.remote_share is None and empty.total_pages == 0
    assert "exited while being read" in empty.describe()


def test_locality_json_round_trip():
    loc = _loc(bound=numabind.residency.BoundBy("birth report (spawn)", Plan(cpus={2, 3}, mem_policy="bind",
                                                                               mem_nodes={1})))
    data = json.loads(json.dumps(loc.to_dict()))
    assert data["remote_share"] == 0.75 and data["remote_share_by_kind"] == {"anon": 200 / 300, "file": 1.0,
                                                                           "huge": None}
    assert data["threads"][1] == {"tid": 78, "name": "io", "cpus": "0", "nodes": "0", "remote_share": 0.25}
    back = Locality.from_dict(data)
    assert back == loc
    for bad in ({}, {**data, "pid": "77"}, {**data, "threads": {}}, {**data, "pages": {"total": {"x": 1}}}):
        with pytest.raises(ValueError):
            Locality.from_dict(bad)


@pytest.mark.parametrize("pid", [0, -1, True, "1", 1.5])
def test_locality_refuses_what_is_not_a_pid(pid):
    with pytest.raises(NumabindError, match="needs a process id"):
        locality(pid)


def test_locality_pages_apply_to_this_process_only():
    with pytest.raises(NumabindError, match="this process only"):
        locality(1, pages=NodePages({}, {}))


# --------------------------------------------------------------------------- the real kernel
@pytest.mark.kernel
def test_locality_of_this_process():
    loc = locality()
    assert loc.ok, loc.error
    assert loc.pid == os.getpid() and loc.name == open("/proc/self/comm").read().strip()
    assert loc.cpus == frozenset(os.sched_getaffinity(0))
    assert loc.threads[0].tid == os.getpid()
    assert set(loc.node_pages) <= set(ids_of(open("/sys/devices/system/node/online").read()))
    assert loc.total_pages > 0 and loc.mem_policy is not None
    assert loc.mems_allowed == ids_of(next(line.split(":", 1)[1] for line in open("/proc/self/status")
                                           if line.startswith("Mems_allowed_list")))


@pytest.mark.kernel
def test_a_child_bound_by_numabind_run_is_local():
    node, cpu = node_with_cpus()
    with Worker(sys.executable, "-m", "numabind", "run", "-C", str(cpu), "-m", str(node), "--") as w:
        loc = locality(w.pid)
        counted = process_node_pages(w.pid)
    assert loc.ok, loc.error
    assert loc.cpus == {cpu} and loc.cpu_nodes == {node}
    assert loc.remote_share_by_kind("anon") == 0.0          # its own memory is all on the node it runs on
    assert loc.pages.anon.get(node, 0) >= (16 << 20) // PAGE
    assert set(counted) >= set(loc.node_pages)
    assert loc.bound is not None and "numabind run" in loc.bound.source
    assert loc.bound.requested == Plan(cpus={cpu}, mem_policy="bind", mem_nodes={node})
    assert loc.bound.applied.cpus == {cpu} and loc.bound.applied.mem_policy == "bind"
    assert loc.mem_policy is None                            # another process's policy: not readable
    assert any(p.startswith(f"bind:{node}") for p in loc.pages.policies), loc.pages.policies


@pytest.mark.kernel
def test_the_exec_marker_of_a_parent_is_not_its_childs():
    node, cpu = node_with_cpus()
    code = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'], "
            "stdin=subprocess.PIPE); print(p.pid, flush=True); print('ready', flush=True); sys.stdin.read(); "
            "p.stdin.close(); p.wait()")
    w = subprocess.Popen([sys.executable, "-m", "numabind", "run", "-C", str(cpu), "--", sys.executable, "-c", code],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT)
    try:
        grandchild = int(w.stdout.readline())
        assert w.stdout.readline().strip() == "ready"
        parent, child = locality(w.pid), locality(grandchild)
    finally:
        w.stdin.close()
        w.wait(timeout=60)
    assert parent.bound is not None and parent.bound.requested.cpus == {cpu}
    assert child.ok and child.bound is None       # it inherited the variable, not the binding record
    assert child.cpus == {cpu}                    # (it did inherit the affinity)


@pytest.mark.kernel
def test_birth_report_of_this_process_is_its_bound_record(tmp_path):
    node, cpu = node_with_cpus()
    script = tmp_path / "birth.py"       # a file: spawn children re-import the main module
    script.write_text(f'''
import json, multiprocessing, numabind
from numabind.process import configure_subprocess

def child(q):
    import numabind
    q.put(numabind.locality().to_dict())

if __name__ == "__main__":
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    with configure_subprocess(numabind.Plan(cpus={{{cpu}}}, mem_policy="bind", mem_nodes={{{node}}}),
                              spawn="in-child"):
        p = ctx.Process(target=child, args=(q,))
        p.start()
    print(json.dumps(q.get(timeout=60)))
    p.join(60)
''')
    cp = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=child_env(), cwd=ROOT,
                        timeout=120)
    assert cp.returncode == 0, cp.stderr
    loc = Locality.from_dict(json.loads(cp.stdout.strip().splitlines()[-1]))
    assert loc.bound is not None and loc.bound.source == "birth report (spawn)"
    assert loc.bound.requested == Plan(cpus={cpu}, mem_policy="bind", mem_nodes={node})
    assert loc.mem_policy == f"bind {node}"


@pytest.mark.kernel
def test_bind_report_after_migrate_carries_the_locality():
    node, cpu = node_with_cpus()
    out = run_json(f'''
import json, numabind
r = numabind.bind_current(numabind.Plan(cpus={{{cpu}}}, mem_policy="bind", mem_nodes={{{node}}}, migrate=True),
                          strict=True)
print(json.dumps({{"locality": r.locality.to_dict(), "text": r.describe(), "pid": __import__("os").getpid()}}))
''')
    loc = Locality.from_dict(out["locality"])
    assert loc.pid == out["pid"] and loc.cpu_nodes == {node} and loc.total_pages > 0
    assert "locality:" in out["text"]


@pytest.mark.kernel
def test_a_process_that_does_not_exist_raises_no_such_process():
    with pytest.raises(NoSuchProcess) as caught:     # psutil's convention: an error is raised, not returned
        locality(NO_SUCH_TID)
    e = caught.value
    assert isinstance(e, NumabindError) and (e.pid, e.name) == (NO_SUCH_TID, None)
    assert e.reason == f"no such process: /proc/{NO_SUCH_TID} does not exist"
    assert str(e) == f"process {NO_SUCH_TID}: no such process: /proc/{NO_SUCH_TID} does not exist"
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is NoSuchProcess and (again.pid, again.reason, again.name) == (e.pid, e.reason, e.name)


@pytest.mark.kernel
def test_a_process_that_has_exited_but_is_not_reaped():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        wait_zombie(p.pid)    # a zombie once it has exited: /proc/PID/stat says Z
        with pytest.raises(NoSuchProcess, match="exited: a zombie") as caught:
            locality(p.pid)
    finally:
        p.wait()
    assert caught.value.pid == p.pid and caught.value.reason.startswith("exited: a zombie")


# --------------------------------------------------------------------------- simulated: what root cannot see here
@pytest.mark.kernel
def test_permission_denied_raises_access_denied(monkeypatch):
    """Simulated (the tests run as root, who may read any numa_maps): numa_maps_text answers None, as for
    another user's process, while the file exists."""
    with Worker() as w:
        name = _proc.status_fields(w.pid)["Name"]
        monkeypatch.setattr(_proc, "numa_maps_text", lambda pid="self", tid=None: None)
        with pytest.raises(AccessDenied) as caught:
            locality(w.pid)
    e = caught.value
    assert isinstance(e, NumabindError) and not isinstance(e, NoSuchProcess)
    assert e.pid == w.pid and e.name == name and str(e).startswith(f"process {w.pid} ({name}): permission denied")
    assert e.reason.startswith(f"permission denied reading /proc/{w.pid}/numa_maps") and "trace" in e.reason


@pytest.fixture
def fake_root(tmp_path, monkeypatch):
    monkeypatch.setattr(live, "_reader", FsReader(str(tmp_path)))
    return tmp_path


def test_a_kernel_without_numa_maps(fake_root):
    """A fake root (FsReader) whose process has no numa_maps: a kernel built with CONFIG_NUMA=n."""
    fake_numa_process(fake_root, NO_SUCH_TID, numa_maps=None)
    loc = locality(NO_SUCH_TID)
    assert not loc.ok and "no /proc/PID/numa_maps" in loc.error and "CONFIG_NUMA=n" in loc.error
    assert loc.name == "fake worker" and loc.cpus == {0, 1} and loc.cpu_nodes == {0}   # one node 0: no NUMA


def test_a_fake_process_with_numa_maps(fake_root):
    fake_numa_process(fake_root, NO_SUCH_TID,
                      numa_maps="7f0000000000 default anon=4 dirty=4 N0=4 kernelpagesize_kB=4\n")
    loc = locality(NO_SUCH_TID)
    assert loc.ok, loc.error
    assert loc.node_pages == {0: 4} and loc.remote_share == 0.0


def test_a_process_exiting_while_being_read(fake_root, monkeypatch):
    """Simulated: the fake process disappears between the first look and the numa_maps read."""
    import shutil

    fake_numa_process(fake_root, NO_SUCH_TID, numa_maps="7f0000000000 default N0=4 kernelpagesize_kB=4\n")

    def gone(pid="self", tid=None):
        shutil.rmtree(fake_root / "proc" / str(NO_SUCH_TID))
        return None

    monkeypatch.setattr(_proc, "numa_maps_text", gone)
    with pytest.raises(NoSuchProcess) as caught:
        locality(NO_SUCH_TID)
    assert (caught.value.pid, caught.value.reason, caught.value.name) == (NO_SUCH_TID, "exited while being read",
                                                                          "fake worker")


@pytest.mark.kernel
def test_a_command_started_by_wrap_command_is_recognised():
    node, cpu = node_with_cpus()
    plan = Plan(cpus={cpu}, mem_policy="preferred", mem_nodes={node})
    argv = numabind.wrap_command(plan, [sys.executable, "-c", WORKER])
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT)
    try:
        assert p.stdout.readline().strip() == "ready"
        loc = locality(p.pid)
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    assert loc.ok and loc.bound is not None and loc.bound.requested == plan
    assert loc.cpus == {cpu}


# ----------------------------------------------------------------------------- runtime records (numabind.records)
@pytest.fixture
def runtime_dir(tmp_path):
    """A private XDG_RUNTIME_DIR: the children's records go to <it>/numabind."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    return run


def _stat_json(pid: int, env: dict) -> dict:
    cp = numabind_cli("stat", "--json", str(pid), env=env)
    assert cp.returncode == 0, cp.stderr
    [d] = json.loads(cp.stdout)
    return d


@pytest.mark.kernel
@pytest.mark.parametrize("how", ["spawn", "forkserver", "fork", "call", "pool"])
def test_a_child_bound_at_birth_is_shown_from_another_process(how, tmp_path, runtime_dir):
    """configure_subprocess's spawn/forkserver/fork children, a bound() call and a pool_plans worker each
    leave a runtime record: locality() here (another process) and numabind stat --json show their plan."""
    node, cpu = node_with_cpus()
    plan = Plan(cpus={cpu}, mem_policy="bind", mem_nodes={node})
    with BirthChild(tmp_path, how, plan, XDG_RUNTIME_DIR=str(runtime_dir)) as c:
        loc = locality(c.pid)
        d = _stat_json(c.pid, c.env)
        start = _proc.start_time(c.pid)
    assert c.notes == []                                   # the record was written: no note about it
    assert (runtime_dir / "numabind" / f"{c.pid}.{start}.json").is_file()
    assert oct((runtime_dir / "numabind").stat().st_mode & 0o777) == oct(0o700)
    assert loc.bound is not None, loc
    assert loc.bound.source == f"runtime record ({how})"
    assert loc.bound.requested == plan
    assert loc.bound.applied is not None and loc.bound.applied.cpus == {cpu}
    assert loc.cpus == {cpu}
    assert d["pid"] == c.pid and d["bound"]["source"] == f"runtime record ({how})"
    assert d["bound"]["requested"] == plan.to_text()


@pytest.mark.kernel
def test_the_exec_marker_wins_over_a_record(tmp_path, runtime_dir):
    """A process with both (here: a record planted for a numabind run child) is shown by its marker."""
    node, cpu = node_with_cpus()
    with Worker(sys.executable, "-m", "numabind", "run", "-C", str(cpu), "--") as w:
        _plant(runtime_dir, w.pid, _proc.start_time(w.pid), Plan(cpus={cpu}, mem_policy="bind", mem_nodes={node}))
        loc = locality(w.pid)
    assert loc.bound is not None and loc.bound.source.startswith("numabind run")
    assert loc.bound.requested == Plan(cpus={cpu})


def _plant(runtime_dir, pid: int, start: int, plan: Plan, inside: dict | None = None) -> None:
    """Write a record by hand, as numabind.records would (``inside`` changes fields of its content)."""
    d = runtime_dir / "numabind"
    d.mkdir(mode=0o700, exist_ok=True)
    rec = {"numabind_record": 1, "pid": pid, "start_time": start, "start_method": "fork",
           "requested": plan.to_text(), "applied": plan.to_text(), **(inside or {})}
    (d / f"{pid}.{start}.json").write_text(json.dumps(rec))


@pytest.mark.kernel
def test_a_stale_record_is_ignored(runtime_dir, monkeypatch):
    """Records of another start time of the same pid (a reused pid), or naming another pid, are not this
    process's binding."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime_dir))
    plan = Plan(cpus={min(os.sched_getaffinity(0))})
    with Worker() as w:
        start = _proc.start_time(w.pid)
        _plant(runtime_dir, w.pid, start + 1, plan)                        # its pid, an older process's start
        assert locality(w.pid).bound is None
        _plant(runtime_dir, w.pid, start, plan, {"pid": w.pid + 1})           # its name, another pid inside
        assert locality(w.pid).bound is None
        _plant(runtime_dir, w.pid, start, plan, {"start_time": start + 1})    # its name, another start inside
        assert locality(w.pid).bound is None
        _plant(runtime_dir, w.pid, start, plan)                            # the real thing is read
        assert locality(w.pid).bound is not None


@pytest.mark.kernel
def test_a_write_prunes_records_of_processes_that_are_gone(tmp_path, runtime_dir):
    plan = Plan(cpus={min(os.sched_getaffinity(0))})
    for k in range(5):
        _plant(runtime_dir, NO_SUCH_TID, 1000 + k, plan)
    (runtime_dir / "numabind" / f".{NO_SUCH_TID}.7.abcdef.tmp").write_text("{")   # a writer that died
    (runtime_dir / "numabind" / "not-a-record").write_text("kept")
    with BirthChild(tmp_path, "fork", plan, XDG_RUNTIME_DIR=str(runtime_dir)) as c:
        # the parent's birth report directory (births-…, see ChildBindings) shares the runtime dir
        names = sorted(p.name for p in (runtime_dir / "numabind").iterdir() if not p.name.startswith("births-"))
        start = _proc.start_time(c.pid)
    assert names == sorted([f"{c.pid}.{start}.json", "not-a-record"]), names


@pytest.mark.kernel
@pytest.mark.parametrize("unsafe", ["symlink", "group-writable", "world-writable", "a file"])
def test_an_unsafe_runtime_dir_is_refused_and_the_bind_stands(unsafe, tmp_path, runtime_dir):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    target = runtime_dir / "numabind"
    if unsafe == "symlink":
        target.symlink_to(elsewhere)
    elif unsafe == "a file":
        target.write_text("")
    else:
        target.mkdir()
        target.chmod(0o770 if unsafe == "group-writable" else 0o777)
    cpu = min(os.sched_getaffinity(0))
    with BirthChild(tmp_path, "fork", Plan(cpus={cpu}), XDG_RUNTIME_DIR=str(runtime_dir)) as c:
        loc = locality(c.pid)
        start = _proc.start_time(c.pid)
    assert loc.cpus == {cpu}                               # bound all the same
    # refused, never written into or through: the record went to the next place of the chain
    # (numabind.records), where readers look too
    assert c.notes == [] and loc.bound is not None and loc.bound.source == "runtime record (fork)", (c.notes, loc)
    assert not list(elsewhere.iterdir())
    if unsafe in ("group-writable", "world-writable"):
        assert not list(target.iterdir())
    from numabind import records

    for d in records.record_dirs():
        if os.path.isfile(os.path.join(d, f"{c.pid}.{start}.json")):
            os.unlink(os.path.join(d, f"{c.pid}.{start}.json"))


@pytest.mark.kernel
def test_no_record_opt_out_writes_nothing(tmp_path, runtime_dir):
    cpu = min(os.sched_getaffinity(0))
    with BirthChild(tmp_path, "fork", Plan(cpus={cpu}), XDG_RUNTIME_DIR=str(runtime_dir),
                    NUMABIND_NO_RECORD="1") as c:
        loc = locality(c.pid)
    assert loc.cpus == {cpu} and loc.bound is None and c.notes == []
    # the parent's birth report directory lived there, and went with it
    assert not (runtime_dir / "numabind").exists() or not list((runtime_dir / "numabind").iterdir())


def test_the_runtime_dir_follows_xdg_runtime_dir_when_usable(tmp_path, monkeypatch):
    from numabind import records

    monkeypatch.setattr(records, "_RUN_USER", str(tmp_path / "no-run-user"))   # whatever this host has
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert records.record_dir() == str(tmp_path / "numabind")
    for unusable in (str(tmp_path / "missing"), "relative/dir", ""):
        monkeypatch.setenv("XDG_RUNTIME_DIR", unusable)
        assert records.record_dir() == f"/dev/shm/numabind-{os.geteuid()}"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert records.record_dir() == f"/dev/shm/numabind-{os.geteuid()}"


def test_bind_current_in_this_process_writes_no_record(tmp_path, monkeypatch):
    """Only birth bindings of children write records: a plain bind_current is left without I/O."""
    from numabind import records

    calls = []
    monkeypatch.setattr(records, "write_record", lambda *a: calls.append(a))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    with numabind.bind_thread(Plan(cpus={min(os.sched_getaffinity(0))})):
        pass
    numabind.bind_current(Plan(cpus=frozenset(os.sched_getaffinity(0))))
    assert calls == [] and not (tmp_path / "numabind").exists()
