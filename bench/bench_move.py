"""P8: ``numabind move`` / (``taskset -a -p`` + ``migratepages``) on the same running process, as ratios.

    python bench/bench_move.py [--reps N] [--size-mib M] [--threads T] [--affinity-only] [--json]

The target is one process with ``--threads`` threads (default 32) and ``--size-mib`` MiB of memory it touched
(default 128). Each repetition moves it to the other of two places, so every move has the same work to do: A is
``numabind move PID -N X -m X`` (every thread's CPUs, then ``migrate_pages`` of its pages, then everything read
back), B is ``taskset -a -p -c CPUS(X) PID`` followed by ``migratepages PID OTHERS X``; A and B alternate
(A, B, then B, A, ...), and the figure is the median of the per-pair ratios A/B with their spread (smallest and
largest), so a busy spell on a shared machine (or an emulated guest) moves the spread rather than the figure.
With one node with memory (or ``--affinity-only``) only the CPUs move: A is ``numabind move PID -C CPUS`` and B ``taskset -a -p -c CPUS PID``, between two CPU sets of this
machine. A third figure, not a target, is the library call ``numabind.move(pid, plan)`` in this process over B.

Where more than one node has memory P8 is the whole move; the runner (``python -m bench``) also measures it in the
3-node guest (tests/vm/harness.py), where the figure is the ratio of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:
    sys.path.insert(0, REPO)

#: The target: THREADS threads, SIZE MiB touched, then it waits until its stdin closes.
TARGET = r"""
import mmap, sys, threading
forever = threading.Event()
for _ in range(int(sys.argv[1]) - 1):
    threading.Thread(target=forever.wait, daemon=True).start()
buf = mmap.mmap(-1, int(sys.argv[2]) << 20)
page = mmap.PAGESIZE
for off in range(0, len(buf), page):
    buf[off] = 1
print("ready", flush=True)
sys.stdin.read()
"""


def move_command() -> list[str]:
    """``numabind move`` as a user runs it: the ``numabind`` script once its dispatcher knows ``move``, else the
    command line's own module."""
    from numabind import cli

    if "move" in getattr(cli, "SUBCOMMANDS", ()):
        script = shutil.which("numabind", path=os.path.dirname(sys.executable))
        return [script, "move"] if script else [sys.executable, "-m", "numabind", "move"]
    return [sys.executable, "-m", "numabind.cli.move"]


def _wall(*argvs: list[str]) -> float:
    t0 = time.perf_counter()
    for argv in argvs:
        subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def places() -> tuple[list[tuple[str, frozenset[int], int | None]], frozenset[int]]:
    """Two places to move between: (name, CPUs, node or None for CPUs only), and the nodes with memory."""
    from numabind import live

    machine = live.machine()
    allowed = machine.allowed_cpus
    memory = frozenset(n for n, node in machine.nodes.items() if node.has_memory)
    with_cpus = [n for n, node in sorted(machine.nodes.items()) if node.has_memory and node.cpus & allowed]
    if len(with_cpus) >= 2:
        a, b = with_cpus[:2]
        return [(f"node {n}", machine.nodes[n].cpus & allowed, n) for n in (a, b)], memory
    cpus = sorted(allowed)
    halves = [frozenset(cpus[:max(1, len(cpus) // 2)]), frozenset(cpus[len(cpus) // 2:] or cpus)]
    return [(f"CPUs {sorted(h)}", h, None) for h in halves], memory


def measure(reps: int, size_mib: int, threads: int, affinity_only: bool = False) -> dict:
    """Medians of A (numabind move), B (taskset + migratepages) and C (numabind.move() in process), seconds."""
    import numabind
    from numabind.cpulist import format_cpulist
    from numabind.relocate import move

    spots, memory = places()
    if affinity_only:
        spots = [(name, cpus, None) for name, cpus, _ in spots]
    taskset, migratepages = shutil.which("taskset"), shutil.which("migratepages")
    if taskset is None:
        raise SystemExit("taskset is not installed (util-linux)")
    whole = spots[0][2] is not None
    if whole and migratepages is None:
        raise SystemExit("migratepages is not installed (numactl)")
    target = subprocess.Popen([sys.executable, "-c", TARGET, str(threads), str(size_mib)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout.readline().strip() == "ready", "the target did not start"
        pid = str(target.pid)
        mover = move_command()

        def a_argv(spot: tuple[str, frozenset[int], int | None]) -> list[list[str]]:
            _, cpus, node = spot
            if node is None:
                return [[*mover, pid, "-C", format_cpulist(cpus)]]
            return [[*mover, pid, "-N", str(node), "-m", str(node)]]

        def b_argv(spot: tuple[str, frozenset[int], int | None]) -> list[list[str]]:
            _, cpus, node = spot
            out = [[taskset, "-a", "-p", "-c", format_cpulist(cpus), pid]]
            if node is not None:
                out.append([migratepages, pid, format_cpulist(memory - {node}), str(node)])
            return out

        def c_plan(spot: tuple[str, frozenset[int], int | None]) -> numabind.Plan:
            _, cpus, node = spot
            if node is None:
                return numabind.Plan(cpus=cpus)
            return numabind.Plan(cpus=cpus, mem_policy="bind", mem_nodes={node})

        ta: list[float] = []
        tb: list[float] = []
        tc: list[float] = []
        tp: list[float] = []      # python -c pass: the start every Python command pays
        tq: list[float] = []      # python -c "import psutil": what reading other processes through psutil adds
        flip = 0
        _wall(*a_argv(spots[1]))     # warm: the target starts on spot 1, the first timed move goes to spot 0
        for k in range(reps):
            order = (("a", ta), ("b", tb), ("c", tc)) if k % 2 == 0 else (("b", tb), ("a", ta), ("c", tc))
            for kind, out in order:
                spot = spots[flip % 2]
                flip += 1
                if kind == "a":
                    out.append(_wall(*a_argv(spot)))
                elif kind == "b":
                    out.append(_wall(*b_argv(spot)))
                else:
                    t0 = time.perf_counter()
                    move(target.pid, c_plan(spot), strict=False)
                    out.append(time.perf_counter() - t0)
            tp.append(_wall([sys.executable, "-c", "pass"]))
            tq.append(_wall([sys.executable, "-c", "import psutil"]))
    finally:
        target.kill()
        target.wait(60)
    pairs = [x / y for x, y in zip(ta, tb)]     # A and B ran back to back in each repetition
    return {"a_s": statistics.median(ta), "b_s": statistics.median(tb), "c_s": statistics.median(tc),
            "ratio": statistics.median(pairs), "spread": [min(pairs), max(pairs)],
            "pass_s": statistics.median(tp), "psutil_s": statistics.median(tq),
            "whole": whole, "places": [s[0] for s in spots], "reps": reps, "size_mib": size_mib, "threads": threads,
            "mover": " ".join(os.path.basename(x) for x in mover[:3])}


def rows(result: dict) -> list[dict]:
    """The runner's rows (bench/run.py's format): P8 and the library call beside it."""
    what = (f"numabind move / taskset -a -p + migratepages, {result['threads']} threads, {result['size_mib']} MiB, "
            f"between {' and '.join(result['places'])}" if result["whole"] else
            f"numabind move -C / taskset -a -p -c (CPUs only), {result['threads']} threads, between "
            f"{' and '.join(result['places'])}")
    a, b, c = result["a_s"], result["b_s"], result["c_s"]
    lo, hi = result["spread"]
    return [{"id": "P8" if result["whole"] else "P8-affinity", "what": what, "a_s": a, "b_s": b,
             "ratio": result["ratio"], "spread": [lo, hi], "runs": result["reps"], "target": 1.0,
             "ok": result["ratio"] <= 1.0,
             "detail": f"median of {result['reps']} pair ratios, spread {lo:.2f}-{hi:.2f}"},
            {"id": "P8-api", "what": "numabind.move() in process / the same commands (for scale)", "a_s": c,
             "b_s": b, "ratio": c / b, "target": None},
            {"id": "P8-floor", "what": "python -c pass + numabind.move() in process / the same commands: the least any "
             "Python command doing this move takes (for scale)", "a_s": result["pass_s"] + c, "b_s": b,
             "ratio": (result["pass_s"] + c) / b, "target": None},
            {"id": "P8-psutil", "what": "python -c 'import psutil' - python -c pass / the same commands: what importing "
             "psutil adds (for scale)", "a_s": result["psutil_s"] - result["pass_s"], "b_s": b,
             "ratio": (result["psutil_s"] - result["pass_s"]) / b, "target": None}]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--size-mib", type=int, default=128)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--affinity-only", action="store_true", help="move the CPUs only, even with several nodes")
    ap.add_argument("--json", action="store_true", help="print the rows as one JSON line, prefixed 'P8 '")
    args = ap.parse_args(argv)
    result = measure(args.reps, args.size_mib, args.threads, args.affinity_only)
    out = rows(result)
    if args.json:
        print("P8 " + json.dumps(out), flush=True)
        return 0
    for r in out:
        print(f"{r['id']}: {r['what']}: A {r['a_s'] * 1e3:.2f} ms, B {r['b_s'] * 1e3:.2f} ms, ratio {r['ratio']:.3f}"
              + (f" (target <= {r['target']})" if r["target"] else ""))
    return 0


# ----------------------------------------------------------------------------- the runner's part
def p8(quick: bool) -> list[dict]:
    """bench/run.py's part: this machine (CPUs only where it has one node with memory) and, unless ``quick``,
    the whole move in the 3-node guest (one run: a ratio)."""
    out = rows(measure(3 if quick else 21, 16 if quick else 128, 32))
    what = "numabind move / taskset -a -p + migratepages in the 3-node guest (32 threads, 128 MiB, 9 pairs)"
    if quick:
        return out + [{"id": "P8-guest", "what": what, "ratio": None, "target": 1.0,
                       "skipped": "--quick: no guest is booted"}]
    try:
        from tests.vm import harness
    except ImportError as e:
        return out + [{"id": "P8-guest", "what": what, "ratio": None, "target": 1.0,
                       "skipped": f"the VM harness cannot be imported ({e})"}]
    issues = harness.problems()
    if issues:
        return out + [{"id": "P8-guest", "what": what, "ratio": None, "target": 1.0,
                       "skipped": "the VM cannot start here: " + "; ".join(issues)}]
    script = harness.guest_script([sys.executable, os.path.join(HERE, "bench_move.py"), "--reps", "9", "--json"],
                                  cwd=REPO, env={"PYTHONPATH": os.pathsep.join([REPO, os.path.join(REPO, "src")])})
    run = harness.run_guest("mem-only", script, timeout=900)
    line = next((x for x in run.read("output.log").splitlines() if x.startswith("P8 ")), None)
    if line is None:
        return out + [{"id": "P8-guest", "what": what, "ratio": None, "target": 1.0,
                       "skipped": f"the guest gave no result ({run.failure or 'exit ' + str(run.exit_code)})"}]
    return out + [dict(r, id=r["id"] + "-guest") for r in json.loads(line[3:])]


if __name__ == "__main__":
    sys.exit(main())
