"""A main module for tests/test_process.py: records the binding at the first line of its import.

    python tests/proc_main_probe.py METHOD PLAN_TEXT OUTDIR [--spawn inherit|in-child] [--strict]
        [--backend NAME]

In the parent (``__main__``) it starts one child with ``METHOD`` inside
``numabind.configure_subprocess`` and prints one JSON line: the parent's binding before and
after, whether multiprocessing was restored, the child's report, the child's exit code and the
forkserver's binding. Every import of this module (the spawn child re-imports it as
``__mp_main__``) first writes the binding in force at that moment to OUTDIR, before any other
import of user code.
"""

import os
import sys

if len(sys.argv) > 3 and os.path.isdir(sys.argv[3]):  # the very first thing of every import
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests import proc_targets as _pt

    _rec = _pt.state("import as " + __name__)
    _rec["numabind_imported"] = "numabind" in sys.modules
    with open(os.path.join(sys.argv[3], f"{os.getpid()}-{__name__}.json"), "w") as _f:
        import json as _json

        _json.dump(_rec, _f)


def target(outdir: str) -> None:
    import json

    from tests import proc_targets

    with open(os.path.join(outdir, f"{os.getpid()}-target.json"), "w") as f:
        json.dump(proc_targets.state("target"), f)


def main() -> int:
    import argparse
    import json
    import multiprocessing
    import multiprocessing.spawn
    import multiprocessing.util

    import numabind
    from numabind.process import configure_subprocess
    from tests import proc_targets

    ap = argparse.ArgumentParser()
    ap.add_argument("method")
    ap.add_argument("plan")
    ap.add_argument("outdir")
    ap.add_argument("--spawn", default="inherit")
    ap.add_argument("--strict", action="store_true")
    ap.add_argument("--backend", default=None)
    args = ap.parse_args()

    plan = numabind.Plan.from_text(args.plan)
    ctx = multiprocessing.get_context(args.method)
    originals = (multiprocessing.spawn.get_preparation_data, multiprocessing.util.spawnv_passfds)
    out = {"parent_before": proc_targets.state("parent before")}
    start_error = None
    try:
        with configure_subprocess(plan, strict=args.strict, backend=args.backend, spawn=args.spawn) as births:
            p = ctx.Process(target=target, args=(args.outdir,))
            p.start()
    except numabind.NumabindError as e:
        start_error = f"{type(e).__name__}: {e}"
        p = None
    if p is not None:
        p.join(60)
        out["exitcode"] = p.exitcode
        try:
            rep = births.report(p.pid, timeout=5)
            out["report"] = {"start_method": rep.start_method, "error": rep.error,
                             "applied": rep.report.applied.to_text() if rep.report else None,
                             "backend": rep.report.backend if rep.report else None,
                             "warnings": list(rep.report.warnings) if rep.report else None}
        except TimeoutError as e:
            out["report"] = {"missing": str(e)}
        out["child_pid"] = p.pid
    out["start_error"] = start_error
    out["parent_after"] = proc_targets.state("parent after")
    out["restored"] = (multiprocessing.spawn.get_preparation_data, multiprocessing.util.spawnv_passfds) == originals
    if args.method == "forkserver" and p is not None:
        from multiprocessing import forkserver

        pid = forkserver._forkserver._forkserver_pid
        out["forkserver"] = {"pid": pid, "cpus": proc_targets.status_cpus(pid),
                             "policy": proc_targets.numa_maps_policy(pid)}
    print("RESULT " + json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
