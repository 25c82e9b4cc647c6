"""The full command line (argparse): every subcommand, ``--help``, and ``run`` with GPU plans.

``numabind.cli.main`` sends plain ``numabind run`` option lists to the fast path in
:mod:`numabind.cli.run` and everything else here. The library never prints; this module does.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys

from ..backends import backend_info, get_backend
from ..cpulist import format_cpulist
from ..errors import NumabindError, PlanError
from ..plan import Plan

__all__ = ["main"]

from ..backends import BACKEND_NAMES
from ..plan import NODE_POLICIES as POLICIES
from ..strategies import MODES


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes // 2**20} MiB"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _topology_text(topo) -> str:
    ids = sorted(topo.nodes)
    rows = [["node", "cpus", "memory", "distances (" + " ".join(map(str, ids)) + ")"]]
    for n in ids:
        node = topo.nodes[n]
        kind = "" if node.cpus and node.memory_bytes else (" (memory-only)" if node.memory_bytes else " (cpu-only)")
        rows.append([str(n), (format_cpulist(node.cpus) or "-") + kind, _size(node.memory_bytes),
                     " ".join(str(node.distances.get(m, "-")) for m in ids)])
    lines = [
        f"root: {topo.root}",
        f"cpu model: {topo.model_name or 'unknown'}",
        f"online cpus: {format_cpulist(topo.online_cpus)}   allowed cpus: {format_cpulist(topo.allowed_cpus)}   "
        f"allowed memory nodes: {format_cpulist(topo.allowed_nodes)}   ({topo.allowed_source})",
        "",
        _table(rows),
    ]
    return "\n".join(lines)


def _gpu_text(topo) -> str:
    if not topo.gpus:
        return "none found (no NVIDIA, AMD or Intel display/accelerator PCI device is visible)"
    rows = [["gpu", "pci", "vendor", "numa node", "local cpus"]]
    for g in topo.gpus:
        rows.append([str(g.index), g.pci_address, g.vendor, "-" if g.numa_node is None else str(g.numa_node),
                     format_cpulist(g.local_cpus) or "-"])
    return _table(rows)


def _plan_rows(topo, mode: str, policy: str, gpus=None):
    from ..strategies import plan_table

    return plan_table(topo, mode=mode, policy=policy, gpus=gpus)


def _plans_text(topo, mode: str = "node", policy: str = "bind", gpus=None, plan_rows=None) -> str:
    if topo.gpus or gpus is not None:
        rows = [["gpu", "node", "plan", "numactl equivalent"]]
        notes = []
        for r in plan_rows if plan_rows is not None else _plan_rows(topo, mode, policy, gpus):
            if r.plan is None:
                rows.append([str(r.gpu), "-", "cannot place: " + (r.error or ""), "-"])
                continue
            rows.append([str(r.gpu), "-" if r.cpu_node is None else str(r.cpu_node), r.plan.describe(),
                         r.plan.to_numactl_args()])
            notes += [f"  gpu {r.gpu}: {why}" for why in r.reasons]
        text = f"Plans per GPU worker (mode {mode}, memory {policy}):\n" + _table(rows)
        return text + ("\n" + "\n".join(notes) if notes else "")
    rows = [["node", "plan", "numactl equivalent"]]
    for n, node in sorted(topo.nodes.items()):
        cpus = node.cpus & topo.allowed_cpus
        if not cpus:
            continue
        mem = frozenset({n}) if node.has_memory and n in topo.allowed_nodes else None
        plan = Plan(cpus=cpus, mem_policy=policy if mem else None, mem_nodes=mem)
        rows.append([str(n), plan.describe(), plan.to_numactl_args()])
    return ("Plans per NUMA node (no GPUs, so a worker per node would get):\n" + _table(rows))


def cmd_main(args) -> int:
    from ..bind import current_binding
    from ..topology import discover

    topo = discover(args.root)
    print("== topology ==")
    print(_topology_text(topo))
    print()
    print("== GPUs ==")
    print(_gpu_text(topo))
    print()
    print("== plans ==")
    print(_plans_text(topo))
    print()
    print("== current binding of this process ==")
    print(current_binding().describe())
    info = backend_info()
    print()
    print("== backends ==")
    native = info.get("native")
    reason = info["reason"]
    if native:  # said once, in one line, instead of once per native backend
        print(native)
        reason = reason.replace(f"ImportError: {native}", "native core missing (above)")
    print(f"selected: {info['selected']} ({reason})")
    for name, why in info["unavailable"].items():
        if not (native and native in why):
            print(f"unavailable: {name}: {why}")
    return 0


def cmd_hardware(args) -> int:
    from ..topology import discover

    topo = discover(args.root)
    ids = sorted(topo.nodes)
    print(f"available: {len(ids)} nodes ({format_cpulist(ids)})")
    for n in ids:
        node = topo.nodes[n]
        print(f"node {n} cpus: {' '.join(map(str, sorted(node.cpus)))}")
        print(f"node {n} size: {node.memory_bytes // 2**20} MB")
    print("node distances:")
    print("node " + " ".join(f"{n:>3}" for n in ids))
    for n in ids:
        print(f"{n:>3}: " + " ".join(f"{topo.nodes[n].distances.get(m, 0):>3}" for m in ids))
    return 0


def cmd_show(args) -> int:
    from ..bind import current_binding

    if args.root is not None and os.path.realpath(args.root) != "/":
        raise NumabindError(f"numabind show reads this process's binding from the kernel; --root {args.root!r} "
                            f"does not apply (drop it; `numabind --root R hardware` shows a replayed machine)")
    print(current_binding().describe())
    return 0


def cmd_topology(args) -> int:
    from ..topology import discover

    topo = discover(args.root)
    if args.json:
        print(json.dumps(topo.to_dict(), indent=2, sort_keys=True))
    else:
        print(_topology_text(topo))
        print()
        print("GPUs: " + _gpu_text(topo) if not topo.gpus else "GPUs:\n" + _gpu_text(topo))
    return 0


def cmd_plan(args) -> int:
    from ..topology import discover

    if getattr(args, "gpu_from_rank", False):
        return _cmd_plan_rank(args)
    topo = discover(args.root)
    gpus = None if args.gpu is None else [args.gpu]
    rows = _plan_rows(topo, args.mode, args.policy, gpus)
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], indent=2, sort_keys=True))
    else:
        print(_plans_text(topo, args.mode, args.policy, gpus, plan_rows=rows))
    return 0 if all(r.plan is not None for r in rows) else 1   # the same in text and JSON


def _place_rank(args, within=None):
    """--gpu-from-rank: this process's local rank planned on the discovery root (numabind.rank)."""
    from ..rank import place_rank
    from ..topology import discover

    return place_rank(args.mode or "node", args.policy or "bind", discover(args.root), within=within,
                      strict=getattr(args, "strict", None), migrate=bool(getattr(args, "migrate", False)))


def _cmd_plan_rank(args) -> int:
    """``numabind plan --gpu-from-rank [--json]``: the rank's plan, not applied; exit 1 when it was not placed."""
    placed = _place_rank(args)
    if args.json:
        print(json.dumps(placed.to_dict(), indent=2, sort_keys=True))
    else:
        print(placed.describe())
        print("numactl equivalent: " + (placed.plan.to_numactl_args() or "(none)"))
        print("\n".join([f"  {why}" for why in placed.reasons] + [f"  warning: {w}" for w in placed.warnings]))
    return 0 if placed.to_dict()["placed"] else 1


def _rank_run_plan(args) -> Plan:
    """``numabind run --gpu-from-rank``: never wider than the affinity the launcher gave this process."""
    from ..bind import current_binding

    placed = _place_rank(args, within=current_binding(args.backend).cpus)
    if args.verbose:
        print(placed.describe(), file=sys.stderr)
    return placed.plan


#: ``numabind run`` options that choose CPUs or memory explicitly (dest, flag).
_EXPLICIT_RUN_OPTIONS = (("physcpubind", "--physcpubind"), ("cpunodebind", "--cpunodebind"),
                         ("membind", "--membind"), ("preferred", "--preferred"),
                         ("preferred_many", "--preferred-many"), ("interleave", "--interleave"),
                         ("weighted_interleave", "--weighted-interleave"), ("weights", "--weights"),
                         ("localalloc", "--localalloc"))
#: Options that choose a GPU whose plan gives the CPUs and memory (dest, flag).
_GPU_RUN_OPTIONS = (("gpu", "--gpu"), ("gpu_from_rank", "--gpu-from-rank"))
#: Options that only shape a GPU plan (dest, flag).
_GPU_PLAN_OPTIONS = (("mode", "--mode"), ("policy", "--policy"))


def _given(args, dest: str) -> bool:
    value = getattr(args, dest, None)
    return value is not None and value is not False


def check_run_options(args) -> None:
    """Conflicting or unused ``numabind run`` options are a usage error naming them, never ignored."""
    explicit = [flag for dest, flag in _EXPLICIT_RUN_OPTIONS if _given(args, dest)]
    gpu = [flag for dest, flag in _GPU_RUN_OPTIONS if _given(args, dest)]
    shaping = [flag for dest, flag in _GPU_PLAN_OPTIONS if _given(args, dest)]
    if len(gpu) > 1:
        raise NumabindError(f"numabind run: {' and '.join(gpu)} both choose the GPU; give one of them")
    if gpu and explicit:
        raise NumabindError(
            f"numabind run: {gpu[0]} plans the CPUs and memory for the GPU, so it cannot be combined with "
            f"{', '.join(explicit)}; drop {gpu[0]} to bind explicitly, or drop {', '.join(explicit)}")
    if _given(args, "bind_replayed_root") and not _given(args, "gpu_from_rank"):
        raise NumabindError("numabind run: --bind-replayed-root applies only with --gpu-from-rank")
    if shaping and not gpu:
        raise NumabindError(
            f"numabind run: {' and '.join(shaping)} only {'shapes' if len(shaping) == 1 else 'shape'} the plan "
            f"of --gpu N (or --gpu-from-rank); "
            f"without a GPU give the binding explicitly (--membind, --preferred, --interleave, ...)")


def _live_root(args) -> None:
    """``run`` binds processes of this machine: refuse a discovery root that is a replayed one."""
    explicit = getattr(args, "root", None)
    root = explicit if explicit is not None else os.environ.get("NUMABIND_FSROOT") or None
    if root is None or os.path.realpath(root) == "/":
        return
    if getattr(args, "bind_replayed_root", False) and getattr(args, "gpu_from_rank", False):
        return   # asked for: the replayed machine's CPU ids are this machine's (launcher tests)
    source, fix = (("--root", "drop --root") if explicit is not None else
                   ("NUMABIND_FSROOT", "unset NUMABIND_FSROOT"))
    raise NumabindError(
        f"numabind {args.cmd} binds processes of this machine, but {source}={root!r} is another discovery root "
        f"(a replayed machine): its CPUs and nodes are not this machine's. To plan on it use "
        f"`numabind plan --root {root}`; to {args.cmd} here, {fix}")


def _run_plan(args) -> Plan:
    from ..topology import discover

    if getattr(args, "gpu_from_rank", False):
        return _rank_run_plan(args)
    topo = discover("/")
    if args.gpu is not None:
        from ..strategies import plan_for_gpu

        policy = args.policy or "bind"
        plan = plan_for_gpu(args.gpu, mode=args.mode or "node", topology=topo, policy=policy)
        if args.migrate:
            plan = plan.replace(migrate=True)
        return plan.validate(topo)
    argv: list[str] = []
    for flag in ("physcpubind", "cpunodebind", "membind", "preferred", "preferred_many", "interleave",
                 "weighted_interleave"):
        value = getattr(args, flag, None)
        if value is not None:
            argv.append(f"--{flag.replace('_', '-')}={value}")
    if args.localalloc:
        argv.append("--localalloc")
    weights = getattr(args, "weights", None)
    by_bandwidth = weights == "bandwidth"
    if weights is not None and not by_bandwidth:
        argv.append(f"--weights={weights}")
    if not argv:
        raise NumabindError("numabind run: give a binding (--physcpubind, --membind, --gpu, ...) before '--'")
    if by_bandwidth and getattr(args, "weighted_interleave", None) is None:
        raise NumabindError("numabind run: --weights goes with --weighted-interleave (-w)")
    plan = Plan.from_numactl_args(argv, topology=topo, migrate=args.migrate)
    if by_bandwidth:
        from ..strategies import bandwidth_weights

        try:
            plan = plan.replace(weights=bandwidth_weights(plan.mem_nodes or (), topo))
        except PlanError as e:
            raise PlanError(f"numabind run --weights bandwidth: {e} (here: --weights NODE:W,..., "
                            f"e.g. --weights 0:3,1:1)") from None
    if getattr(args, "set_weights", False) and not plan.weights:
        raise NumabindError("numabind run: --set-weights writes the weights given with --weights; give them")
    return plan.validate(topo)


def cmd_run(args) -> int:
    _live_root(args)
    check_run_options(args)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise NumabindError("numabind run: no command given after '--'")
    plan = _run_plan(args)
    be, why = get_backend(args.backend)
    prefix = be.command_prefix(plan)
    if prefix is not None:
        logging.getLogger("numabind").info("starting %s through %s (%s)", command[0], be.name, why)
        os.execv(prefix[0], prefix + command)
    from ..bind import bind_current, bound_environ

    report = bind_current(plan, strict=args.strict, backend=args.backend,
                          set_weights=bool(getattr(args, "set_weights", False)))
    if args.verbose:
        print(report.describe(), file=sys.stderr)
    try:
        os.execvpe(command[0], command, bound_environ(report))
    except OSError as e:
        raise NumabindError(f"numabind run: cannot execute {command[0]!r}: {e.strerror}") from None


class _Once(argparse.Action):
    """Store an option's value, refusing a second one (argparse would silently keep the last)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        old = getattr(namespace, self.dest, None)
        if old is not None:
            parser.error(f"{option_string} given twice (first {old!r}, then {values!r}; "
                         f"{'/'.join(self.option_strings)} is one option): give it once")
        setattr(namespace, self.dest, values)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="numabind",
        description="Bind CPU affinity and NUMA memory policy without numactl. "
                    "Without a command: show the topology, GPUs, plans and the current binding.")
    p.add_argument("--root", help="discovery root (default $NUMABIND_FSROOT or /)")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log INFO (-v) or DEBUG (-vv)")
    sub = p.add_subparsers(dest="cmd")
    sub.add_parser("hardware", help="nodes, CPUs, memory, distances (like numactl --hardware)")
    sub.add_parser("show", help="this process's binding (like numactl --show)")
    t = sub.add_parser("topology", help="discovered topology")
    t.add_argument("--root", default=argparse.SUPPRESS, help="discovery root (default $NUMABIND_FSROOT or /)")
    t.add_argument("--json", action="store_true", help="print Topology.to_dict() as JSON")
    pl = sub.add_parser("plan", help="what each GPU's worker would be bound to")
    pl.add_argument("--root", default=argparse.SUPPRESS,
                    help="plan on this machine dump (default $NUMABIND_FSROOT or /)")
    g = pl.add_mutually_exclusive_group()
    g.add_argument("--gpu", type=int, help="one visible GPU index")
    g.add_argument("--all", action="store_true", help="every visible GPU (the default)")
    g.add_argument("--gpu-from-rank", action="store_true",
                   help="the GPU of this process's local rank (LOCAL_RANK, SLURM_LOCALID, ...)")
    pl.add_argument("--mode", choices=MODES, default="node")
    pl.add_argument("--policy", choices=POLICIES, default="bind")
    pl.add_argument("--json", action="store_true")
    r = sub.add_parser("run", help="run a command bound (a numactl replacement)",
                       usage="numabind run [binding options] -- command [args...]")
    r.add_argument("-C", "--physcpubind", "--cpus", dest="physcpubind", metavar="CPUS", action=_Once)
    r.add_argument("-N", "--cpunodebind", metavar="NODES", action=_Once)
    r.add_argument("-m", "--membind", metavar="NODES", action=_Once)
    r.add_argument("-p", "--preferred", metavar="NODE", action=_Once)
    r.add_argument("--preferred-many", dest="preferred_many", metavar="NODES", action=_Once)
    r.add_argument("-i", "--interleave", metavar="NODES", action=_Once)
    r.add_argument("-w", "--weighted-interleave", dest="weighted_interleave", metavar="NODES", action=_Once,
                   help="interleave by weight (Linux 6.9+; numactl 2.0.19's -w); the weights are the system's "
                        "unless --weights is given")
    r.add_argument("--weights", metavar="NODE:W,...", action=_Once,
                   help="with -w: the weight of each node (1-255), e.g. 0:3,1:1, or 'bandwidth' to take them from "
                        "the firmware's bandwidth figures (HMAT); weights are system-wide, so they hold only if the "
                        "system's are the same (else a warning; --strict fails) unless --set-weights")
    r.add_argument("--set-weights", action="store_true",
                   help="write --weights into /sys/kernel/mm/mempolicy/weighted_interleave (system-wide, root)")
    r.add_argument("-l", "--localalloc", action="store_true")
    r.add_argument("--gpu", type=int, action=_Once, help="bind for this visible GPU (see numabind plan)")
    r.add_argument("--gpu-from-rank", action="store_true",
                   help="bind for the GPU of this process's local rank (LOCAL_RANK, SLURM_LOCALID, ...), "
                        "within the CPUs the launcher gave it")
    r.add_argument("--bind-replayed-root", action="store_true",
                   help="with --gpu-from-rank: bind this process although the discovery root is a replayed "
                        "machine whose CPU ids are this machine's (tests of launchers on fake GPU machines)")
    r.add_argument("--mode", choices=MODES, default=None, action=_Once, help="placement mode of --gpu (default node)")
    r.add_argument("--policy", choices=POLICIES, default=None, action=_Once,
                   help="memory policy of --gpu (default bind)")
    r.add_argument("--migrate", action="store_true", help="also move pages already allocated (no effect at exec)")
    r.add_argument("--strict", action="store_true", default=None, help="fail instead of degrading")
    r.add_argument("--backend", choices=BACKEND_NAMES, action=_Once)
    r.add_argument("command", nargs=argparse.REMAINDER)
    from .stat import add_parser as add_stat

    add_stat(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(name)s: %(levelname)s: %(message)s", stream=sys.stderr)
    from .stat import cmd_stat

    handlers = {None: cmd_main, "hardware": cmd_hardware, "show": cmd_show, "topology": cmd_topology,
                "plan": cmd_plan, "run": cmd_run, "stat": cmd_stat}
    try:
        rc = handlers[args.cmd](args) or 0
        sys.stdout.flush()   # a closed pipe shows here, not at interpreter exit
        return rc
    except BrokenPipeError:
        # The reader went away (`numabind ... --json | head`): stop quietly, as other command-line tools
        # do, with the status of a process ended by SIGPIPE; stdout is pointed at /dev/null so that the
        # interpreter's final flush cannot raise again.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):  # stdout is not a file (captured in tests)
            pass
        return 128 + signal.SIGPIPE
    except NumabindError as e:
        print(f"numabind: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
