"""P9: a look at the machine, started fresh, against the tools it stands beside, as ratios.

    python bench/bench_look.py [--reps N] [--json]

Three measures, each a command started fresh and waited for, output thrown away, each guarded at <= 2.0 (issue
43's guard; issue 34 §3's goals of 1.0 and 1.3 are retired):

* P9-topology: ``numabind topology`` / ``lstopo-no-graphics --of xml -`` (``python -c pass`` /
  ``lstopo-no-graphics`` is shown for scale: the part that Python's own start takes);
* P9-hardware: ``numabind hardware`` / ``python -c pass`` (``numactl -H`` is shown for scale, and so is importing
  as many empty modules as the look imports of numabind's own: the cost of their number alone);
* P9-discover: ``python -c "import numabind; numabind.discover()"`` / ``python -c pass``.

Each repetition runs A and B back to back (A, B, then B, A, ...) and gives one ratio A/B; the figure is the
median of those ratios, and the spread is their minimum and maximum, so a busy spell on a shared machine moves
the spread, not the median. ``numabind`` is the ``numabind`` script beside the interpreter (as a user starts it),
else ``python -m numabind``; the interpreter and the environment are the same on both sides (bytecode caches
written and warm, ``PYTHONPATH`` leading to this checkout's ``src``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

TARGETS = {"P9-topology": 2.0, "P9-hardware": 2.0, "P9-discover": 2.0}   # issue 43's guard
LSTOPO = shutil.which("lstopo-no-graphics")


def environ() -> dict[str, str]:
    """This process's environment with this checkout's ``src`` first on the path and nothing that changes
    what numabind reads or whether the bytecode cache is written."""
    env = dict(os.environ)
    src = os.path.join(REPO, "src")
    env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                 if p and p != src])
    for var in ("NUMABIND_BACKEND", "NUMABIND_STRICT", "NUMABIND_FSROOT", "PYTHONDONTWRITEBYTECODE"):
        env.pop(var, None)
    return env


def numabind_command() -> list[str]:
    script = shutil.which("numabind", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-m", "numabind"]


def wall(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True, cwd="/")
    return time.perf_counter() - t0


def pair_ratios(a: list[str], b: list[str], reps: int, env: dict[str, str]) -> dict:
    """``reps`` back-to-back runs of a and b (the order flips each time): the per-pair ratios a/b, with the
    median times of each side."""
    for argv in (a, b):        # warm: the bytecode caches are written, the files are in the page cache
        wall(argv, env)
    ta: list[float] = []
    tb: list[float] = []
    ratios: list[float] = []
    for k in range(reps):
        if k % 2 == 0:
            x = wall(a, env)
            y = wall(b, env)
        else:
            y = wall(b, env)
            x = wall(a, env)
        ta.append(x)
        tb.append(y)
        ratios.append(x / y)
    return {"a_s": statistics.median(ta), "b_s": statistics.median(tb), "ratios": ratios}


def look_row(pid: str, what: str, m: dict, target: float | None) -> dict:
    """bench/run.py's row: the median of the per-pair ratios, and their spread (min, max)."""
    ratios = m["ratios"]
    med = statistics.median(ratios)
    lo, hi = min(ratios), max(ratios)
    out = {"id": pid, "what": what, "a_s": m["a_s"], "b_s": m["b_s"], "ratio": med, "spread": [lo, hi],
           "runs": len(ratios), "target": target,
           "detail": f"median of {len(ratios)} pair ratios, spread {lo:.2f}-{hi:.2f}"}
    if target is not None:
        out["ok"] = med <= target
    return out


def modules_loaded(argv: list[str], env: dict[str, str]) -> list[str]:
    """The numabind modules that ``argv`` imports (Python's own ``-X importtime`` report, through
    ``PYTHONPROFILEIMPORTTIME``)."""
    proc = subprocess.run(argv, env={**env, "PYTHONPROFILEIMPORTTIME": "1"}, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True, cwd="/")
    names = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    return sorted({name for name in names if name == "numabind" or name.startswith("numabind.")})


def import_floor_rows(look: list[str], base: list[str], reps: int, env: dict[str, str]) -> list[dict]:
    """For scale: importing as many *empty* modules (one package) as the look imports of numabind's own, against
    ``python -c pass``: what the number of modules alone costs before any of their code runs."""
    count = len(modules_loaded(look, env))
    with tempfile.TemporaryDirectory() as tmp:
        pkg = os.path.join(tmp, "emptypkg")
        os.mkdir(pkg)
        with open(os.path.join(pkg, "__init__.py"), "w") as f:
            f.write("")
        for k in range(1, count):
            with open(os.path.join(pkg, f"m{k}.py"), "w") as f:
                f.write("x = 1\n")
        env2 = {**env, "PYTHONPATH": os.pathsep.join([tmp, env.get("PYTHONPATH", "")])}
        names = ", ".join(["emptypkg"] + [f"emptypkg.m{k}" for k in range(1, count)])
        m = pair_ratios([sys.executable, "-c", f"import {names}"], base, reps, env2)
    return [look_row("P9-hardware", f"python -c \"import {count} empty modules\" / python -c pass (as many as "
                                    f"numabind hardware imports of its own: the floor of that many, for scale)", m,
                     None)]


def measure(reps: int) -> list[dict]:
    """The P9 rows (bench/run.py's format); P9-topology is skipped without lstopo-no-graphics."""
    env = environ()
    nb = numabind_command()
    name = os.path.basename(nb[0]) if len(nb) == 1 else "python -m numabind"
    base = [sys.executable, "-c", "pass"]
    rows: list[dict] = []
    what = f"{name} topology / lstopo-no-graphics --of xml -"
    if LSTOPO is None:
        rows.append({"id": "P9-topology", "what": what, "ratio": None, "target": TARGETS["P9-topology"],
                     "skipped": "lstopo-no-graphics is not installed (hwloc-nox)"})
    else:
        lstopo = [LSTOPO, "--of", "xml", "-"]
        rows.append(look_row("P9-topology", what, pair_ratios([*nb, "topology"], lstopo, reps, env),
                             TARGETS["P9-topology"]))
        # for scale: the share of lstopo's time that Python's own start takes before any numabind code runs
        rows.append(look_row("P9-topology", "python -c pass / lstopo-no-graphics --of xml - (the floor, for scale)",
                             pair_ratios(base, lstopo, reps, env), None))
    rows.append(look_row("P9-hardware", f"{name} hardware / python -c pass",
                         pair_ratios([*nb, "hardware"], base, reps, env), TARGETS["P9-hardware"]))
    numactl = shutil.which("numactl")
    # for scale only: numactl -H exits 1 where libnuma finds no NUMA (get_mempolicy refused: qemu-user, seccomp)
    if numactl and subprocess.run([numactl, "-H"], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, cwd="/").returncode == 0:
        rows.append(look_row("P9-hardware", "numactl -H / python -c pass (for scale)",
                             pair_ratios([numactl, "-H"], base, reps, env), None))
    rows.extend(import_floor_rows([*nb, "hardware"], base, reps, env))
    rows.append(look_row("P9-discover", 'fresh python -c "import numabind; numabind.discover()" / python -c pass',
                         pair_ratios([sys.executable, "-c", "import numabind; numabind.discover()"], base, reps, env),
                         TARGETS["P9-discover"]))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=41, help="pairs per measure (default 41)")
    ap.add_argument("--json", action="store_true", help="print the rows as one JSON line, prefixed 'P9 '")
    args = ap.parse_args(argv)
    out = measure(max(1, args.reps))
    if args.json:
        print("P9 " + json.dumps(out), flush=True)
        return 0
    for r in out:
        if r.get("skipped"):
            print(f"{r['id']}: {r['what']}: skipped: {r['skipped']}")
            continue
        lo, hi = r["spread"]
        print(f"{r['id']}: {r['what']}: A {r['a_s'] * 1e3:.2f} ms, B {r['b_s'] * 1e3:.2f} ms, ratio {r['ratio']:.3f} "
              f"(median of {r['runs']}, spread {lo:.3f}-{hi:.3f})" + (f", target <= {r['target']}"
                                                                       if r["target"] else ""))
    return 0


def p9(quick: bool) -> list[dict]:
    """bench/run.py's part."""
    return measure(3 if quick else 41)


if __name__ == "__main__":
    sys.exit(main())
