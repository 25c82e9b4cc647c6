"""Spawn start-to-ready wall time: bound at birth vs unbound vs numactl wrapper, as ratios.

    python bench/bench_spawn.py [--rounds N] [--cpus LIST] [--node N]

Start-to-ready is the time from ``Process.start()`` until the child's target
has sent one message back over a pipe. Each round starts one child of every
mode, in rotating order, so drift hits all modes alike; the medians are
compared. Modes:

* ``unbound``: a plain spawn child.
* ``bound``: the same child started inside ``numabind.configure_subprocess``
  (the default: born bound, inheriting the binding of the launching thread).
* ``bound-in-child``: ``configure_subprocess(plan, spawn="in-child")``: the
  child imports numabind and binds itself while it unpickles its preparation
  data, before it re-imports ``__main__``.
* ``numactl``: what vLLM's ``configure_subprocess`` does: a generated shell
  script that execs ``numactl <plan> -- python "$@"`` as the multiprocessing
  executable, i.e. an extra ``sh`` and ``numactl`` exec before Python starts.

Two scenarios run: the child's main module does not import numabind (the
bound child pays the numabind import), and it does (as any program that calls
``configure_subprocess`` from its main module: every spawn child re-imports it,
so numabind is imported in the unbound child too).
"""

from __future__ import annotations

import importlib
import os

if os.environ.get("_BENCH_MAIN_IMPORTS_NUMABIND") == "1":  # scenario 2: as the main modules of its users do
    importlib.import_module("numabind")

import argparse
import multiprocessing
import multiprocessing.spawn
import shutil
import statistics
import sys
import time


def _ready(conn) -> None:
    conn.send(os.getpid())
    conn.close()


def _start_to_ready(ctx, target=_ready, timeout: float = 120.0) -> float:
    r, w = ctx.Pipe(duplex=False)
    t0 = time.perf_counter()
    p = ctx.Process(target=target, args=(w,))
    p.start()
    w.close()   # the child holds the only write end now: if it dies before it reports, recv() sees EOF
    try:
        if not r.poll(timeout):
            p.kill()
            raise SystemExit(f"a child (pid {p.pid}) did not report within {timeout:g} s")
        r.recv()
    except EOFError:
        p.join()
        raise SystemExit(f"a child (pid {p.pid}) exited with status {p.exitcode} before it reported "
                         f"(a wrapper or a binding that failed in the child?)") from None
    finally:
        r.close()
    t1 = time.perf_counter()
    p.join()
    if p.exitcode != 0:
        raise SystemExit(f"a child exited with status {p.exitcode}")
    return t1 - t0


def _modes(plan, ctx, numactl_ok: bool):
    import contextlib

    import atexit
    import shlex
    import tempfile

    from numabind.process import configure_subprocess

    @contextlib.contextmanager
    def unbound():
        yield

    def bound():
        return configure_subprocess(plan)

    def bound_in_child():
        return configure_subprocess(plan, spawn="in-child")

    python = os.fsdecode(multiprocessing.spawn.get_executable())
    script_dir = tempfile.mkdtemp(prefix="bench-spawn-")
    atexit.register(shutil.rmtree, script_dir, True)
    script = os.path.join(script_dir, "python-under-numactl")
    words = [shutil.which("numactl") or "numactl", *plan.to_numactl_argv(), "--", python]
    with open(script, "w") as f:
        f.write(f'#!/bin/sh\nexec {" ".join(shlex.quote(w) for w in words)} "$@"\n')
    os.chmod(script, 0o700)

    @contextlib.contextmanager
    def numactl():
        multiprocessing.spawn.set_executable(script)
        try:
            yield
        finally:
            multiprocessing.spawn.set_executable(python)

    modes = {"unbound": unbound, "bound": bound, "bound-in-child": bound_in_child}
    if numactl_ok:
        modes["numactl"] = numactl
    return modes


def run_scenario(plan, rounds: int, numactl_ok: bool) -> dict[str, float]:
    ctx = multiprocessing.get_context("spawn")
    modes = _modes(plan, ctx, numactl_ok)
    names = list(modes)
    times: dict[str, list[float]] = {n: [] for n in names}
    for n in names:  # warm-up: page cache, the resource tracker
        with modes[n]():
            _start_to_ready(ctx)
    for k in range(rounds):
        order = names[k % len(names):] + names[:k % len(names)]
        for n in order:
            with modes[n]():
                times[n].append(_start_to_ready(ctx))
    return {n: (statistics.median(v), *statistics.quantiles(v, n=4)[::2]) for n, v in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--cpus", default=None,
                    help="CPUs of the plan (default: every allowed CPU, so that the time measures the binding "
                         "itself, not the child having fewer CPUs)")
    ap.add_argument("--node", type=int, default=0, help="memory node of the plan (bind)")
    args = ap.parse_args(argv)
    if args.rounds < 2:
        ap.error("--rounds must be at least 2 (quartiles need two samples)")

    import numabind

    allowed = sorted(os.sched_getaffinity(0))
    cpus = numabind.parse_cpulist(args.cpus) if args.cpus else allowed
    plan = numabind.Plan(cpus=cpus, mem_policy="bind", mem_nodes={args.node})
    numactl_ok = shutil.which("numactl") is not None
    from numabind.backends import get_backend

    be, _ = get_backend()
    print(f"plan: {plan.describe()}; backend: {be.name}; python {sys.version.split()[0]}; "
          f"{os.cpu_count()} CPUs; {args.rounds} rounds; median start-to-ready")
    for label, flag in (("main module does not import numabind", "0"), ("main module imports numabind", "1")):
        os.environ["_BENCH_MAIN_IMPORTS_NUMABIND"] = flag
        stats = run_scenario(plan, args.rounds, numactl_ok)
        med = {n: v[0] for n, v in stats.items()}
        base = med["unbound"]
        parts = [f"{n} {1000 * t:.1f} ms ({t / base:.3f}x; IQR {1000 * stats[n][1]:.1f}-{1000 * stats[n][2]:.1f})"
                 for n, t in med.items()]
        print(f"[{label}] " + ", ".join(parts))
        line = f"  bound/unbound = {med['bound'] / base:.3f}"
        if "numactl" in med:
            line += f", bound/numactl = {med['bound'] / med['numactl']:.3f}"
        print(line)
    if not numactl_ok:
        print("numactl is not installed: the numactl-wrapper mode was not measured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
