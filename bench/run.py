"""numabind's benchmarks in one command: P1-P10 as ratios measured side by side, with the machine.

    python -m bench [--quick] [--only P1,P2,...] [--json] [--extras DIR]
    python bench/run.py ...

Every figure is a ratio of medians of interleaved repetitions (A, B, A, B, ...) of two things run in
the same process or pair by pair, never an absolute time compared with a budget:

* P1: ``bind_current(Plan(cpus, "bind", {node}))`` with one thread / the raw floor
  (``os.sched_setaffinity`` + a bare ``set_mempolicy`` system call). Also, where they are importable,
  psutil's ``Process().cpu_affinity(cpus)`` and py-libnuma's ``run_on_cpus`` + ``set_membind_nodes``
  over the same floor (psutil is a numabind dependency, for other processes only; ``--extras DIR`` adds a
  folder holding py-libnuma, e.g. ``pip install --target DIR py-libnuma``).
* P2: the same plan with 32 live threads / a per-thread ``os.sched_setaffinity`` loop over
  ``/proc/self/task`` (what ``torch.numa`` does), while numabind also sets the memory policy and
  reads every thread back (once, before its set, when it held the plan's CPUs already: the set leaves them).
* P3: spawn start-to-ready, bound at birth / unbound, and bound / through a numactl wrapper
  (bench/bench_spawn.py).
* P4: ``discover()`` / ``lstopo-no-graphics --input DIR --of xml -`` at 4 / 512 / 4096 CPUs and the
  scaling exponent (bench/bench_discover.py).
* P5: pages on the plan's node, in a QEMU guest with two nodes (tests/vm/harness.py), when it can start.
* P6: ``import numabind`` / ``import psutil`` (``-X importtime``, bytecode cache warm).
* P7: ``numabind run -N N -m N -- /bin/true`` / ``python -c pass`` (same interpreter), the median of per-pair
  ratios with its spread; beside it, for scale, numactl's and the floor (``python -c`` exec'ing /bin/true).
* P8: ``numabind move`` / (``taskset -a -p`` + ``migratepages``) on the same running process (bench/bench_move.py):
  CPUs only on a one-node machine (P8-affinity), the whole move in the 3-node guest (P8-guest, one run of 9
  pairs), each the median of per-pair ratios with its spread; beside it the library call, the floor of any
  Python command (``python -c pass`` + the library call) and psutil's import, for scale.
* P9: a look started fresh (bench/bench_look.py): ``numabind topology`` / ``lstopo-no-graphics --of xml -``,
  ``numabind hardware`` / ``python -c pass`` and ``python -c "import numabind; numabind.discover()"`` /
  ``python -c pass``, each the median of per-pair ratios with its spread (min-max).
* P10: the hwloc XML reader per MB of file (bench/bench_xml.py): seconds and peak memory (tracemalloc) per MB for
  generated files of ~1, ~4 and ~10 MB (thousands of PUs and PCI devices), and the largest size's per-MB figure
  over the smallest's (linear in the file's size: about 1). Not a ratio of two programs: a row's A/B column is
  its per-MB figure.

``--quick`` runs every part at its smallest size (the test suite does, so the runner cannot rot).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:
    sys.path.insert(0, REPO)

TARGETS = {"P1": 5.0, "P2": 1.15, "P3": 1.03, "P3-numactl": 1.0, "P4": 0.5, "P6": 2.0, "P7": 1.45, "P8": 1.0}


# ----------------------------------------------------------------------------- timing
def interleaved(a: Callable[[], object], b: Callable[[], object], reps: int, inner: int) -> tuple[float, float]:
    """Medians (seconds per call) of ``reps`` interleaved rounds, each timing ``inner`` calls of a then of b."""
    ta: list[float] = []
    tb: list[float] = []
    for k in range(reps):
        for fn, out in ((a, ta), (b, tb)) if k % 2 == 0 else ((b, tb), (a, ta)):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            out.append((time.perf_counter() - t0) / inner)
    return statistics.median(ta), statistics.median(tb)


def machine() -> dict:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    import numabind

    from numabind.backends import get_backend

    return {"cpu": model or platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "allowed_cpus": len(os.sched_getaffinity(0)), "kernel": platform.release(),
            "python": platform.python_version(), "backend": get_backend()[0].name,
            "numabind": getattr(numabind, "__version__", "?"), "load_1min": load}


# ----------------------------------------------------------------------------- P1 and P2
def _floor_fns(cpus: frozenset[int], node: int) -> Callable[[], None]:
    from numabind import _native

    ffi, lib = _native.ffi, _native.lib
    mask = ffi.new("unsigned long[]", [1 << node] + [0] * 15)

    def floor() -> None:
        os.sched_setaffinity(0, cpus)
        lib.nb_sys_set_mempolicy(2, mask, 16 * 64 + 1)

    return floor


class _Threads:
    """n idle threads, alive for the block."""

    def __init__(self, n: int) -> None:
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.stop.wait, daemon=True) for _ in range(n)]

    def __enter__(self) -> _Threads:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


def p1_p2(quick: bool) -> list[dict]:
    import numabind

    allowed = frozenset(os.sched_getaffinity(0))
    node = min(numabind.current_binding().mems_allowed)
    plan = numabind.Plan(cpus=allowed, mem_policy="bind", mem_nodes={node})
    saved = numabind.current_binding()
    reps, inner = (5, 20) if quick else (41, 200)
    rows = []
    try:
        floor = _floor_fns(allowed, node)
        bind = lambda: numabind.bind_current(plan)  # noqa: E731
        a, b = interleaved(bind, floor, reps, inner)
        rows.append(row("P1", "bind_current, 1 thread / os.sched_setaffinity + set_mempolicy", a, b))
        for label, fn in _p1_extras(allowed, node):
            x, y = interleaved(fn, floor, reps, inner)
            rows.append(row("P1", f"{label} / the same floor", x, y, target=False))
        n = 4 if quick else 32
        with _Threads(n):
            def loop() -> None:   # what torch.numa does for every thread of the process
                for t in os.listdir("/proc/self/task"):
                    os.sched_setaffinity(int(t), allowed)
            a, b = interleaved(bind, loop, reps, max(1, inner // 4))
            report = numabind.bind_current(plan)
            bound = sum(t.status == "bound" for t in report.threads)
        rows.append(row("P2", f"bind_current, {n + 1} threads ({bound} bound, memory set, all read back) / "
                              f"os.sched_setaffinity per /proc/self/task entry", a, b))
    finally:
        numabind.bind_current(saved.plan if saved.mem_policy else numabind.Plan(cpus=saved.cpus))
    return rows


def _p1_extras(cpus: frozenset[int], node: int) -> list[tuple[str, Callable[[], object]]]:
    out: list[tuple[str, Callable[[], object]]] = []
    try:
        import psutil  # type: ignore[import-not-found]

        proc = psutil.Process()
        listed = sorted(cpus)
        out.append(("psutil.Process().cpu_affinity (CPUs only)", lambda: proc.cpu_affinity(listed)))
    except ImportError:
        pass
    try:
        from numa import memory as nmem  # type: ignore[import-not-found]  # py-libnuma
        from numa import schedule as nsched  # type: ignore[import-not-found]

        def pylibnuma() -> None:
            nsched.run_on_cpus(0, *cpus)
            nmem.set_membind_nodes(node)

        out.append(("py-libnuma run_on_cpus + set_membind_nodes", pylibnuma))
    except (ImportError, OSError, AttributeError):
        pass
    return out


def missing_extras() -> list[str]:
    out = []
    for mod, pkg in (("psutil", "psutil"), ("numa.schedule", "py-libnuma")):
        try:
            __import__(mod)
        except (ImportError, OSError):
            out.append(pkg)
    return out


# ----------------------------------------------------------------------------- P6 and P7
def _import_us(module: str, env: dict) -> float | None:
    """Cumulative import time of ``module`` in a fresh interpreter (-X importtime), in microseconds."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True,
                          text=True, env=env, cwd="/")
    if proc.returncode != 0:
        return None
    for line in proc.stderr.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[2] == module:
            return float(parts[1])
    return None


#: The ``--extras`` folder (psutil, py-libnuma), also on the path of the interpreters the benchmarks start.
_EXTRAS: list[str] = []


def _env() -> dict:
    env = dict(os.environ)
    extra = _EXTRAS + [os.path.join(REPO, "src")]
    env["PYTHONPATH"] = os.pathsep.join(extra + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    for var in ("NUMABIND_BACKEND", "NUMABIND_STRICT", "NUMABIND_FSROOT", "PYTHONDONTWRITEBYTECODE"):
        env.pop(var, None)     # the bytecode cache must be written (warm), as on any install
    return env


def p6(quick: bool) -> list[dict]:
    env = _env()
    reps = 5 if quick else 31
    for module in ("numabind", "psutil"):   # warm the bytecode caches
        _import_us(module, env)
    if _import_us("psutil", env) is None:
        return [skipped("P6", "import numabind / import psutil", "psutil is not importable here "
                        "(pip install --target DIR psutil, then --extras DIR)")]
    ta, tb = [], []
    for k in range(reps):
        for module, out in (("numabind", ta), ("psutil", tb)) if k % 2 == 0 else (("psutil", tb), ("numabind", ta)):
            t = _import_us(module, env)
            if t is not None:
                out.append(t / 1e6)
    return [row("P6", "import numabind / import psutil (-X importtime, cumulative)", statistics.median(ta),
                statistics.median(tb))]


#: P7's floor: the same interpreter started and the same command exec'd, with nothing of numabind between.
_EXEC_FLOOR = "import os; os.execv('/bin/true', ['/bin/true'])"


def p7(quick: bool) -> list[dict]:
    """P7 as P8 and P9 measure: the median of per-pair ratios (A and B back to back, the order flipping each
    pair) with its spread, and two rows for scale: numactl's own start, and the floor of any Python command
    that execs /bin/true (Python's start and the exec, without numabind's imports or bind)."""
    import numabind

    from bench.bench_look import look_row, pair_ratios

    env = _env()
    node = min(numabind.current_binding().mems_allowed)
    run = [sys.executable, "-m", "numabind", "run", "-N", str(node), "-m", str(node), "--", "/bin/true"]
    script = shutil.which("numabind", path=os.path.dirname(sys.executable))
    if script:
        run = [script, *run[3:]]
    base = [sys.executable, "-c", "pass"]
    reps = 5 if quick else 41
    rows = [look_row("P7", f"{os.path.basename(run[0])} run -N {node} -m {node} -- /bin/true / python -c pass",
                     pair_ratios(run, base, reps, env), TARGETS["P7"]),
            look_row("P7", "python -c \"exec /bin/true\" / python -c pass (the floor, for scale)",
                     pair_ratios([sys.executable, "-c", _EXEC_FLOOR], base, reps, env), None)]
    numactl = shutil.which("numactl")
    if numactl:
        rows.append(look_row("P7", "numactl -N -m -- /bin/true / python -c pass (for scale)",
                             pair_ratios([numactl, "-N", str(node), "-m", str(node), "--", "/bin/true"], base, reps,
                                         env), None))
    return rows


# ----------------------------------------------------------------------------- P3, P4, P5
def p3(quick: bool) -> list[dict]:
    from bench import bench_spawn

    import numabind

    allowed = sorted(os.sched_getaffinity(0))
    node = min(numabind.current_binding().mems_allowed)
    plan = numabind.Plan(cpus=allowed, mem_policy="bind", mem_nodes={node})
    numactl_ok = shutil.which("numactl") is not None
    os.environ["_BENCH_MAIN_IMPORTS_NUMABIND"] = "0"
    stats = bench_spawn.run_scenario(plan, 2 if quick else 60, numactl_ok)
    med = {n: v[0] for n, v in stats.items()}
    rows = [row("P3", "spawn start-to-ready, bound at birth / unbound", med["bound"], med["unbound"])]
    if "numactl" in med:
        rows.append(row("P3-numactl", "spawn, bound at birth / through a numactl wrapper script", med["bound"],
                        med["numactl"]))
    else:
        rows.append(skipped("P3-numactl", "spawn, bound / numactl wrapper", "numactl is not installed"))
    return rows


def p4(quick: bool) -> list[dict]:
    from bench import bench_discover

    if bench_discover.LSTOPO is None:
        return [skipped("P4", "discover() / lstopo --input", "lstopo-no-graphics is not installed (hwloc-nox)")]
    sizes = [4] if quick else [4, 512, 4096]
    rows_d = bench_discover.measure(sizes, 1 if quick else 11)
    out = [row("P4", f"discover() / lstopo --input --of xml, {r['cpus']} CPUs", r["discover_ms"] / 1e3,
               r["lstopo_ms"] / 1e3) for r in rows_d]
    exp = bench_discover.exponent(rows_d)
    if exp is not None:
        out.append({"id": "P4-exp", "what": f"discover() scaling exponent {sizes[-2]}->{sizes[-1]} CPUs",
                    "ratio": exp, "target": 1.0, "ok": exp <= 1.0})
    return out


P5_CODE = r'''
import json, os, numabind
from tests.vm import probe
plan = numabind.Plan(cpus=numabind.discover().nodes[1].cpus, mem_policy="bind", mem_nodes={1})
r = numabind.bind_current(plan, strict=True)
region = probe.Region(64 << 20).touch()
c = region.node_counts()
print("P5 " + json.dumps({"on": c.get(1, 0), "total": sum(c.values())}))
'''


def p5(quick: bool) -> list[dict]:
    what = "pages on the plan's node (bind node 1, 64 MiB touched, QEMU guest with 2 nodes)"
    if quick:
        return [skipped("P5", what, "--quick: no guest is booted")]
    try:
        from tests.vm import harness
    except ImportError as e:
        return [skipped("P5", what, f"the VM harness cannot be imported ({e})")]
    issues = harness.problems()
    if issues:
        return [skipped("P5", what, "the VM cannot start here: " + "; ".join(issues))]
    script = harness.guest_script([sys.executable, "-c", P5_CODE], cwd=REPO,
                                  env={"PYTHONPATH": os.pathsep.join([REPO, os.path.join(REPO, "src")])})
    run = harness.run_guest("2n", script, timeout=300)
    out = run.read("output.log")
    line = next((x for x in out.splitlines() if x.startswith("P5 ")), None)
    if line is None:
        return [skipped("P5", what, f"the guest gave no result ({run.failure or 'exit ' + str(run.exit_code)})")]
    counts = json.loads(line[3:])
    frac = counts["on"] / counts["total"] if counts["total"] else 0.0
    return [{"id": "P5", "what": what, "ratio": frac, "target": 1.0, "ok": frac >= 0.99,
             "detail": f"{counts['on']} of {counts['total']} pages on node 1"}]


# ----------------------------------------------------------------------------- table
def row(pid: str, what: str, a: float, b: float, target: bool = True) -> dict:
    ratio = a / b if b else float("inf")
    goal = TARGETS.get(pid) if target else None
    out = {"id": pid, "what": what, "a_s": a, "b_s": b, "ratio": ratio, "target": goal}
    if goal is not None:
        out["ok"] = ratio <= goal
    return out


def skipped(pid: str, what: str, why: str) -> dict:
    return {"id": pid, "what": what, "ratio": None, "target": TARGETS.get(pid), "skipped": why}


def p8(quick: bool) -> list[dict]:
    from bench import bench_move

    return bench_move.p8(quick)


def p9(quick: bool) -> list[dict]:
    from bench import bench_look

    return bench_look.p9(quick)


def p10(quick: bool) -> list[dict]:
    from bench import bench_xml

    return bench_xml.p10(quick)


PARTS: dict[str, Callable[[bool], list[dict]]] = {"P1": p1_p2, "P3": p3, "P4": p4, "P5": p5, "P6": p6, "P7": p7,
                                                  "P8": p8, "P9": p9, "P10": p10}


def fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e6:.1f} us" if s < 1e-3 else f"{s * 1e3:.2f} ms"


def table(result: dict) -> str:
    m = result["machine"]
    lines = [f"machine: {m['cpu']}, {m['cpus']} CPUs ({m['allowed_cpus']} allowed), Linux {m['kernel']}, "
             f"Python {m['python']}, backend {m['backend']}, load {m['load_1min']}",
             "", "| # | measure | A | B | A/B | target |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if r.get("skipped"):
            lines.append(f"| {r['id']} | {r['what']} | - | - | skipped: {r['skipped']} | |")
            continue
        goal = "" if r.get("target") is None else (f"<= {r['target']}" if r["id"] != "P5" else ">= 0.99")
        mark = "" if "ok" not in r else (" ok" if r["ok"] else " MISSED")
        detail = f" ({r['detail']})" if r.get("detail") else ""
        lines.append(f"| {r['id']} | {r['what']}{detail} | {fmt_time(r.get('a_s'))} | {fmt_time(r.get('b_s'))} | "
                     f"{r['ratio']:.3f} | {goal}{mark} |")
    if result.get("missing_extras"):
        lines.append("")
        lines.append("not compared (not importable): " + ", ".join(result["missing_extras"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="every part once at its smallest size")
    ap.add_argument("--only", default="", help="comma-separated parts among " + ",".join(PARTS))
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--extras", default=None, help="a folder with psutil / py-libnuma to compare with")
    args = ap.parse_args(argv)
    if args.extras:
        _EXTRAS[:] = [os.path.abspath(args.extras)]
        sys.path.insert(0, _EXTRAS[0])
    wanted = [p.strip().upper() for p in args.only.split(",") if p.strip()] or list(PARTS)
    wanted = ["P1" if p == "P2" else p for p in wanted]
    unknown = [p for p in wanted if p not in PARTS]
    if unknown:
        ap.error(f"--only: unknown parts {', '.join(unknown)}; choose among {', '.join(PARTS)} (P2 runs with P1)")
    rows: list[dict] = []
    for part in dict.fromkeys(wanted):
        rows += PARTS[part](args.quick)
    result = {"machine": machine(), "quick": args.quick, "rows": rows, "missing_extras": missing_extras()}
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
