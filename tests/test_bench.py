"""The benchmarks still run: the one runner (``python -m bench``) once at its smallest size, and its parts.

No timed assertion: the figures are only checked to be there, as ratios of two positive times.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.mempolicy
def test_runner_gives_every_row_at_the_smallest_size():
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--json"], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    ids = {r["id"] for r in result["rows"]}
    assert {"P1", "P2", "P3", "P4", "P5", "P6", "P7", "P9-topology", "P9-hardware", "P9-discover", "P10-time",
            "P10-memory", "P10-linear"} <= ids
    # measured or skipped, every one has its row
    for r in result["rows"]:
        if "skipped" in r:         # a skipped row says why, and gives no figure
            assert isinstance(r["skipped"], str) and r["skipped"].strip() and r["ratio"] is None, r
            continue
        assert r["ratio"] > 0, r
        if "a_s" in r:
            assert r["a_s"] > 0 and r["b_s"] > 0, r
    assert result["machine"]["cpus"] >= 1 and result["machine"]["backend"]
    table = subprocess.run([sys.executable, "bench/run.py", "--quick", "--only", "P1"], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert table.returncode == 0 and "| P1 |" in table.stdout and "machine:" in table.stdout, table.stderr


@pytest.mark.parametrize("argv", [
    ["bench/bench_discover.py", "--sizes", "4", "--runs", "1", "--report-only"],
    ["bench/bench_spawn.py", "--rounds", "2"],
    ["bench/bench_move.py", "--reps", "1", "--size-mib", "8", "--threads", "4"],
])
@pytest.mark.mempolicy
def test_parts_run_alone(argv):
    proc = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ratio" in proc.stdout or "bound/unbound" in proc.stdout, proc.stdout


def test_look_rows_give_the_median_of_pair_ratios_and_its_spread():
    """P9 (issue 43's guard of 2.0): the three start-up measures of a look, each with its goal, the median of the per-pair
    ratios and their spread, from the part alone and through the runner."""
    proc = subprocess.run([sys.executable, "bench/bench_look.py", "--reps", "3", "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("P9 ")]
    rows = json.loads(line[3:])
    goals = {r["id"]: r["target"] for r in rows if r["target"] is not None}
    assert goals == {"P9-topology": 2.0, "P9-hardware": 2.0, "P9-discover": 2.0}, rows
    # for scale, never a goal: as many empty modules as the look imports of numabind's own (more than a few)
    (floor,) = [r for r in rows if "empty modules" in r["what"]]
    assert floor["target"] is None and int(floor["what"].split('"import ')[1].split()[0]) >= 5, floor
    for r in rows:
        if r.get("skipped"):
            assert r["id"] == "P9-topology" and "lstopo" in r["skipped"], r
            continue
        lo, hi = r["spread"]
        assert r["runs"] == 3 and 0 < lo <= r["ratio"] <= hi, r
        assert r["a_s"] > 0 and r["b_s"] > 0, r
    table = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "P9"], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert table.returncode == 0, table.stdout + table.stderr
    assert "| P9-hardware | " in table.stdout and "pair ratios, spread " in table.stdout, table.stdout


@pytest.mark.mempolicy
def test_run_start_gives_the_median_of_pair_ratios_and_its_floor():
    """P7 is measured as P8 and P9 are (the median of per-pair ratios with its spread), and beside it, for scale,
    the floor of any Python command that execs the same program: Python's start and the exec alone."""
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "P7", "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [r for r in json.loads(proc.stdout)["rows"] if r["id"] == "P7"]
    (measured,) = [r for r in rows if r["target"] is not None]
    assert measured["target"] == 1.45 and "/bin/true / python -c pass" in measured["what"], measured
    (floor,) = [r for r in rows if "floor" in r["what"]]
    assert floor["target"] is None and "ok" not in floor, floor
    for r in rows:
        lo, hi = r["spread"]
        assert r["runs"] == 5 and 0 < lo <= r["ratio"] <= hi and r["a_s"] > 0 and r["b_s"] > 0, r


def test_xml_reader_rows_give_time_and_memory_per_mb():
    """P10 (issue 41): the hwloc XML reader's seconds and peak memory per MB of file, for a generated file of
    thousands of PUs and hundreds of PCI devices; ``--quick`` reads the ~1 MB one only (its linear rows say
    why they compare nothing); the part alone, at two sizes, compares them."""
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "P10", "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(proc.stdout)["rows"]
    (t,) = [r for r in rows if r["id"] == "P10-time"]
    (m,) = [r for r in rows if r["id"] == "P10-memory"]
    assert 0.7 < t["mb"] < 1.3 and t["pus"] >= 500 and t["pci"] >= 200, t
    assert t["ratio"] > 0 and t["read_s"] > 0 and m["ratio"] > 0 and m["maxrss_bytes"] > m["peak_bytes"] > 0, (t, m)
    linear = [r for r in rows if r["id"] == "P10-linear"]
    assert len(linear) == 2 and all(r["skipped"] and r["ratio"] is None for r in linear), linear
    alone = subprocess.run([sys.executable, "bench/bench_xml.py", "--sizes", "0.2,0.4", "--reps", "1", "--json"],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert alone.returncode == 0, alone.stdout + alone.stderr
    (line,) = [x for x in alone.stdout.splitlines() if x.startswith("P10 ")]
    rows = json.loads(line[4:])
    assert [r["id"] for r in rows].count("P10-time") == 2, rows
    linear = [r for r in rows if r["id"] == "P10-linear"]
    assert sorted(r["what"].split(",")[0] for r in linear) == ["memory per MB", "time per MB"], linear
    assert all(r["ratio"] > 0 and r["target"] == 1.5 and "ok" in r for r in linear), linear


def test_a_numactl_that_refuses_leaves_out_its_scale_row_only(tmp_path):
    """numactl -H exits 1 where libnuma finds no NUMA support (get_mempolicy refused: qemu-user, a seccomp
    filter): P9's scale row is left out, and the measured rows stand (it stopped the whole part before)."""
    import os

    fake = tmp_path / "numactl"
    fake.write_text("#!/bin/sh\necho 'No NUMA available on this system' >&2\nexit 1\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([sys.executable, "bench/bench_look.py", "--reps", "1", "--json"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("P9 ")]
    rows = json.loads(line[3:])
    whats = [r["what"] for r in rows]
    assert not any(w.startswith("numactl") for w in whats), whats
    assert sorted(r["id"] for r in rows if r["target"] is not None) == ["P9-discover", "P9-hardware", "P9-topology"]


def test_a_look_at_the_topology_loads_no_web_client():
    """P9-topology's start-up: ``numabind topology`` (text and hwloc XML) escapes XML attributes itself;
    ``xml.sax.saxutils`` brought ``urllib.request`` with http, email and ssl, most of the command's start."""
    code = ("import sys\nfrom numabind.cli import main\nfor form in ([], ['--of', 'xml']):\n"
            "    assert main(['topology', *form]) == 0\n"
            "web = ('urllib', 'http', 'email', 'ssl', 'xml.sax')\n"
            "print('LOADED', sorted(m for m in sys.modules if m.startswith(web)))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "<topology version=" in proc.stdout and "LOADED []" in proc.stdout, proc.stdout[-2000:]


def test_extras_reach_the_interpreters_the_benchmarks_start(tmp_path):
    """``--extras DIR`` (any folder name) is on the path of P6's fresh interpreters too, not only of the runner."""
    extras = tmp_path / "my extras"
    (extras / "psutil").mkdir(parents=True)
    (extras / "psutil" / "__init__.py").write_text("version_info = (0, 0, 0)\n")
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--json", "--only", "P6", "--extras", str(extras)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = json.loads(proc.stdout)["rows"]
    assert not row.get("skipped") and row["ratio"] > 0, row


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_spawn_bench_stops_when_a_child_dies_before_it_reports(method):
    """A child that dies before it reports (a wrapper that cannot bind, say) ends the benchmark with a message
    naming it; the parent kept the pipe's write end open before, so recv() waited for ever."""
    code = f"""
import multiprocessing, os, sys
sys.path.insert(0, "bench")
import bench_spawn
try:
    bench_spawn._start_to_ready(multiprocessing.get_context({method!r}), target=os._exit)
except SystemExit as e:
    print("stopped:", e)
"""
    # os._exit(conn) fails in the child (a Connection is no exit status): it dies without sending
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "stopped: a child (pid" in proc.stdout and "before it reported" in proc.stdout, proc.stdout + proc.stderr
