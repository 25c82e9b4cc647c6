"""Time numabind.discover() on a synthetic 512-CPU, 8-node machine.

Builds the tree in a temporary directory (2 packages x 4 SNC nodes x 32 cores
x 2 threads, L1/L2 per core, L3 per package), then reports the median of N
discoveries next to baselines measured in the same run on the same files:

* ``raw open()``: reading exactly the files discovery read (recorded through
  an FsReader subclass), with plain ``open().read()`` and nothing else;
* ``raw os.read``: the same files with ``os.open``/``os.read``;
* ``all files``: every file of the tree with ``open().read()`` (what a
  discovery that skipped nothing would at least cost).

Usage: python3 bench/bench_discover.py [-n RUNS] [--budget-ms 50]
Exit status 1 when the median discovery time is over the budget.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from numabind.topology import discover, discover_from  # noqa: E402
from tests.fakesys import RecordingReader, snc  # noqa: E402




def _median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _read_open(paths):
    for p in paths:
        try:
            with open(p, encoding="utf-8", errors="replace") as f:
                f.read()
        except OSError:
            pass


def _read_os(paths):
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.read(fd, 65536).decode("utf-8", "replace")
        finally:
            os.close(fd)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--runs", type=int, default=31)
    ap.add_argument("--budget-ms", type=float, default=50.0)
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="numabind-bench-") as root:
        machine = snc(root, sockets=2, nodes_per_socket=4, cores_per_node=32, smt=True)
        topo = discover(root)
        assert len(topo.cpus) == 512 and len(topo.nodes) == 8, (len(topo.cpus), len(topo.nodes))
        recorder = RecordingReader(root)
        discover_from(recorder)
        read_paths = [recorder.path(r) for r in recorder.reads]
        all_paths = [os.path.join(root, r) for r in machine.files()]

        discover(root)  # warm the dentry cache like every run after it
        t_disc = _median_ms(lambda: discover(root), args.runs)
        t_open = _median_ms(lambda: _read_open(read_paths), args.runs)
        t_os = _median_ms(lambda: _read_os(read_paths), args.runs)
        t_all = _median_ms(lambda: _read_open(all_paths), args.runs)

    print(f"tree: {len(topo.cpus)} CPUs, {len(topo.nodes)} nodes, {len(topo.caches)} caches, "
          f"{len(all_paths)} files; discovery reads {len(read_paths)} of them")
    print(f"discover()             median {t_disc:7.2f} ms over {args.runs} runs")
    print(f"raw open() same files  median {t_open:7.2f} ms   ratio discover/raw = "
          f"{t_disc / t_open:5.2f}")
    print(f"raw os.read same files median {t_os:7.2f} ms   ratio discover/os.read = "
          f"{t_disc / t_os:5.2f}")
    print(f"raw open() all files   median {t_all:7.2f} ms   ratio discover/all = "
          f"{t_disc / t_all:5.2f}")
    ok = t_disc <= args.budget_ms
    print(f"budget {args.budget_ms:.0f} ms: {'ok' if ok else 'OVER'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
