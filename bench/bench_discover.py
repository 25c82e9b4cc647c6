"""P4: numabind.discover() against hwloc's lstopo on the same sysfs tree, at 4 / 512 / 4096 CPUs.

For each size a synthetic machine is written to a temporary directory
(tests/fakesys.py writes what Linux writes, so lstopo reads it like a dump):

* 4 CPUs: one package, one node;
* 512 CPUs: 2 packages x 4 SNC nodes x 32 cores x 2 threads;
* 4096 CPUs: 16 packages x 4 nodes x 32 cores x 2 threads.

Then ``discover(root)`` and ``lstopo-no-graphics --input root --of xml -`` run
interleaved (A/B/A/B, after one warm-up of each) and the figure is the ratio of
their medians, side by side in one run: no absolute time is compared with a
budget. The scaling exponent is the least-squares slope of log(discover time)
against log(CPUs) over the sizes measured (1.0 = linear); the slope between the
two largest sizes alone is printed next to it, with lstopo's for comparison.

Targets (issue 10): ratio <= 0.5 at every size, exponent <= 1.0.

Usage: python3 bench/bench_discover.py [--sizes 4,512,4096] [-n RUNS] [--json] [--report-only]
Exit status 1 when a target is missed (never with --report-only).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from numabind.topology import discover, discover_from  # noqa: E402
from tests.fakesys import RecordingReader, big, one_node, snc  # noqa: E402

LSTOPO = shutil.which("lstopo-no-graphics") or shutil.which("lstopo")
MAX_RATIO = 0.5
MAX_EXPONENT = 1.0

SHAPES = {
    4: lambda root: one_node(root, ncpus=4),
    512: lambda root: snc(root, sockets=2, nodes_per_socket=4, cores_per_node=32, smt=True),
    4096: lambda root: big(root, packages=16, nodes_per_package=4, cores_per_node=32, smt=True),
}


def _lstopo(root: str) -> None:
    subprocess.run([LSTOPO, "--input", root, "--of", "xml", "-"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(sizes: list[int], runs: int) -> list[dict]:
    """One row per size: medians of interleaved discover()/lstopo runs and their ratio."""
    rows = []
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix=f"numabind-bench-{size}-") as root:
            SHAPES[size](root)
            topo = discover(root)
            assert len(topo.cpus) == size, (size, len(topo.cpus))
            recorder = RecordingReader(root)
            discover_from(recorder)
            t_disc: list[float] = []
            t_hw: list[float] = []
            if LSTOPO is not None:
                _lstopo(root)                               # warm the dentry cache for both
            for _ in range(runs):
                t_disc.append(_timed(lambda: discover(root)))
                if LSTOPO is not None:
                    t_hw.append(_timed(lambda: _lstopo(root)))
            row = {"cpus": size, "nodes": len(topo.nodes), "caches": len(topo.caches),
                   "files_read": len(recorder.reads), "runs": runs,
                   "discover_ms": statistics.median(t_disc) * 1e3}
            if t_hw:
                row["lstopo_ms"] = statistics.median(t_hw) * 1e3
                row["ratio"] = row["discover_ms"] / row["lstopo_ms"]
            rows.append(row)
    return rows


def exponent(rows: list[dict], key: str = "discover_ms") -> float | None:
    """The scaling exponent: least-squares slope of log(time) against log(CPUs)
    over every size measured (1.0 = linear)."""
    if len(rows) < 2:
        return None
    xs = [math.log(r["cpus"]) for r in rows]
    ys = [math.log(r[key]) for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return (sum((x - mx) * (y - my) for x, y in zip(xs, ys))
            / sum((x - mx) ** 2 for x in xs))


def local_slope(rows: list[dict], key: str = "discover_ms") -> float | None:
    """Slope of log(time) against log(CPUs) between the two largest sizes only."""
    if len(rows) < 2:
        return None
    a, b = sorted(rows, key=lambda r: r["cpus"])[-2:]
    return math.log(b[key] / a[key]) / math.log(b["cpus"] / a["cpus"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4,512,4096",
                    help=f"comma-separated CPU counts among {sorted(SHAPES)}")
    ap.add_argument("-n", "--runs", type=int, default=11, help="interleaved repetitions per size")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--report-only", action="store_true", help="never exit 1 for a missed target")
    args = ap.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes {args.sizes!r}: expected comma-separated integers")
    unknown = [s for s in sizes if s not in SHAPES]
    if unknown or args.runs < 1:
        ap.error(f"--sizes takes {sorted(SHAPES)} and --runs at least 1 (got {args.sizes}, {args.runs})")

    rows = measure(sizes, args.runs)
    exp = exponent(rows)
    exp_hw = exponent(rows, "lstopo_ms") if LSTOPO and len(rows) > 1 else None
    top = local_slope(rows)
    top_hw = local_slope(rows, "lstopo_ms") if LSTOPO and len(rows) > 1 else None
    ok_ratio = all(r.get("ratio", 0.0) <= MAX_RATIO for r in rows)
    ok_exp = exp is None or exp <= MAX_EXPONENT
    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "lstopo": LSTOPO, "rows": rows, "exponent": exp, "lstopo_exponent": exp_hw,
        "slope_largest": top, "lstopo_slope_largest": top_hw,
        "targets": {"max_ratio": MAX_RATIO, "max_exponent": MAX_EXPONENT},
        "ok": bool(LSTOPO) and ok_ratio and ok_exp,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"P4 discover() / lstopo --input on the same tree ({result['machine']}), "
              f"median of {args.runs} interleaved runs")
        print(f"{'CPUs':>6} {'nodes':>5} {'files':>6} {'discover ms':>12} {'lstopo ms':>10} "
              f"{'ratio':>6}")
        for r in rows:
            hw = f"{r['lstopo_ms']:10.1f} {r['ratio']:6.2f}" if "ratio" in r else \
                f"{'-':>10} {'-':>6}"
            print(f"{r['cpus']:>6} {r['nodes']:>5} {r['files_read']:>6} {r['discover_ms']:12.2f} {hw}")
        if LSTOPO is None:
            print("ratio: not measured, lstopo-no-graphics is not installed (Debian package hwloc-nox)")
        if exp is not None:
            hw_exp = "" if exp_hw is None else f" (lstopo {exp_hw:.2f})"
            print(f"scaling exponent (log-log fit over {args.sizes} CPUs): {exp:.2f}{hw_exp}")
            big2 = sorted(sizes)[-2:]
            hw_top = "" if top_hw is None else f" (lstopo {top_hw:.2f})"
            print(f"slope between {big2[0]} and {big2[1]} CPUs alone: {top:.2f}{hw_top}")
        print(f"targets: ratio <= {MAX_RATIO} at every size, exponent <= {MAX_EXPONENT}: "
              f"{'ok' if result['ok'] else 'MISSED'}")
    return 0 if (result["ok"] or args.report_only) else 1


if __name__ == "__main__":
    sys.exit(main())
