"""``numabind run`` beyond the fast path (:func:`numabind.cli.fast_run`): ``--help``, the GPU plans, ``--dry-run``
and every usage error; both read :data:`numabind.cli.RUN_OPTIONS`."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from .._base import keep_binding_env, printable
from ..backends import BACKEND_NAMES, get_backend
from ..errors import NumabindError, PlanError
from ..plan import NODE_POLICIES, Plan
from ..strategies import MODES
from . import (NOT_APPLIED, RUN_OPTIONS, command_problem, device_node, exec_command, gpu_index, gpu_spec, list_body,
               list_syntax_problem, printable_lines, run_spellings, run_strictness)
from ._parser import CliError, Once, UsageError, global_options
from .plan import MODES_EPILOG, place_rank, plan_json

if TYPE_CHECKING:  # pragma: no cover
    from .._base import Strictness
    from ..backends import Backend
    from ..types import NodePolicy

__all__ = ["add_parser", "check_run_options", "check_run_syntax", "cmd_run"]

#: The argparse settings of each option of :data:`numabind.cli.RUN_OPTIONS`.
_ARGUMENTS: dict[str, dict[str, Any]] = {
    "physcpubind": {"metavar": "CPUS", "help": "run on these CPUs"},
    "cpunodebind": {"metavar": "NODES", "help": "run on the CPUs of these nodes (--cpubind: numactl's old spelling)"},
    "membind": {"metavar": "NODES", "help": "allocate memory only on these nodes"},
    "preferred": {"metavar": "NODE", "help": "allocate on this node first, others when it is full"},
    "preferred-many": {"metavar": "NODES", "help": "allocate on these nodes first (Linux 5.15+)"},
    "interleave": {"metavar": "NODES", "help": "interleave pages over these nodes"},
    "weighted-interleave": {"metavar": "NODES", "help": "interleave by weight (Linux 6.9+; numactl 2.0.19's -w); the "
                            "weights are the system's unless --weights is given"},
    "weights": {"metavar": "NODE:W,...", "help": "with -w: the weight of each node (1-255), e.g. 0:3,1:1, or "
                "'bandwidth' to take them from the firmware's bandwidth figures (HMAT); weights are system-wide, so "
                "they hold only if the system's are the same (else a warning; --strict fails) unless --set-weights"},
    "set-weights": {"help": "write --weights into /sys/kernel/mm/mempolicy/weighted_interleave (system-wide, root)"},
    "localalloc": {"help": "allocate on the node the thread runs on"},
    "all": {"help": "lists are over every online CPU and node, not only this process's (as numactl's -a)"},
    "within-affinity": {"help": "bind inside the CPU affinity this process inherited (default: the cpuset is the "
                        "limit, so -N and --gpu bind the node's CPUs whatever affinity a parent left; -C without -a is "
                        "checked against the affinity, as numactl does)"},
    "balancing": {"help": "with --membind (or --preferred-many): NUMA balancing within those nodes "
                  "(MPOL_F_NUMA_BALANCING, Linux 5.12+)"},
    "gpu": {"type": gpu_spec, "metavar": "GPU", "help": "bind for this GPU: its visible index, UUID or PCI address, as "
            "--gpus names them (see numabind plan); unlike --gpus it leaves the GPUs the command sees as they are"},
    "gpus": {"metavar": "LIST", "help": "bind for these GPUs (the union of their plans) and let the command see only "
             "them: visible indices, UUIDs or PCI addresses, e.g. 4,5; sets CUDA_VISIBLE_DEVICES (NVIDIA), "
             "ROCR_VISIBLE_DEVICES (AMD), ZE_AFFINITY_MASK (Intel) or ASCEND_RT_VISIBLE_DEVICES (Ascend), composed "
             "with the one already set"},
    "dry-run": {"help": "print the plan, the variables as export lines and the equivalent numactl command; run "
                "nothing (exit 0); with --json one object"},
    "gpu-from-rank": {"help": "bind for the GPU of this process's local rank (LOCAL_RANK, SLURM_LOCALID, ...), within "
                      "the cpuset: the CPUs the launcher bound it to are replaced, as numactl does (--within-affinity "
                      "keeps it inside them); without a visible GPU: the rank's share of the nodes (cores), by the "
                      "local world size"},
    "nic": {"help": "with --gpu-from-rank: export NCCL_IB_HCA, UCX_NET_DEVICES and NCCL_SOCKET_IFNAME for the rank's "
            "nearest NICs into the command (those already set are kept)"},
    "bind-replayed-root": {"help": "with --gpu-from-rank or --gpus: bind this process although the discovery root is "
                           "a replayed machine whose CPU ids are this machine's (tests of launchers on fake GPU "
                           "machines)"},
    "mode": {"choices": MODES, "help": "placement mode of --gpu (default node; see below)"},
    "policy": {"choices": NODE_POLICIES, "help": "memory policy of --gpu (default bind)"},
    "migrate": {"help": "also move pages already allocated (no effect at exec)"},
    "strict": {"default": None, "help": "exit 1 instead of degrading (the default, unless NUMABIND_STRICT says "
               "otherwise)"},
    "lenient": {"help": "degrade step by step with a warning per step and run the command anyway "
                "(--gpu-from-rank's default)"},
    "backend": {"choices": BACKEND_NAMES,
                "help": "force a backend (default: $NUMABIND_BACKEND, else the first usable)"},
    "thread": {"metavar": "PATTERN=SPEC", "default": None,
               "help": "give the command's threads whose name (comm) matches the glob PATTERN a share of the "
                       "binding's CPUs: SPEC is N (whole cores, in order), cpus:LIST (inside the binding) or rest "
                       "(what no other share took); repeat it; the first pattern a name matches wins. numabind then "
                       "starts the command as its child and places each thread as it appears or renames itself, "
                       "for the command's whole life (docs/named-threads.rst)"},
}
#: Options given more than once, each adding to a list (the others may be given once).
_REPEATED = ("thread",)


def add_parser(sub: Any) -> None:
    """Register ``run`` on the CLI's subparsers: one option per row of :data:`numabind.cli.RUN_OPTIONS`."""
    r = sub.add_parser("run", parents=global_options(), help="run a command bound (a numactl replacement)",
                       raw_epilog=MODES_EPILOG, usage="numabind run [binding options] -- command [args...]",
                       description="Bind this process, then exec the command. Lists: 1,3-5, all, !LIST (all "
                                   "but), +LIST (relative to the cpuset), or a device: pci:BUS, netdev:IF, "
                                   "block:DEV, file:PATH. Exit: the command's status; 1 when the binding cannot "
                                   "be applied (the command does not run unless --lenient); 2 usage; 126 not "
                                   "executable; 127 not found.")
    for name in RUN_OPTIONS:
        flags, takes = run_spellings(name)
        action = "append" if name in _REPEATED else Once if takes else "store_true"
        r.add_argument(*flags, action=action, **_ARGUMENTS[name])
    r.add_argument("command", nargs=argparse.REMAINDER, help="the command and its arguments, after --")


def _options(*kinds: str) -> list[tuple[str, str]]:
    """(dest, flag) of ``numabind run``'s options of these kinds (:data:`numabind.cli.RUN_OPTIONS`), in its order."""
    return [(name.replace("-", "_"), f"--{name}") for name, kind in RUN_OPTIONS.items() if kind in kinds]


def _given(args: argparse.Namespace, dest: str) -> bool:
    value = getattr(args, dest, None)
    return value is not None and value is not False


def check_run_options(args: argparse.Namespace) -> None:
    """Conflicting or unused ``numabind run`` options are a usage error naming them, never ignored."""
    explicit = [flag for dest, flag in _options("cpus", "memory", "weights") if _given(args, dest)]
    gpu = [flag for dest, flag in _options("gpu") + _options("gpus") if _given(args, dest)]
    shaping = [flag for dest, flag in _options("shape") if _given(args, dest)]
    if len(gpu) > 1:
        raise UsageError(f"numabind run: {' and '.join(gpu)} both choose the GPU; give one of them")
    if gpu and explicit:
        raise UsageError(
            f"numabind run: {gpu[0]} plans the CPUs and memory for the GPU, so it cannot be combined with "
            f"{', '.join(explicit)}; drop {gpu[0]} to bind explicitly, or drop {', '.join(explicit)}")
    if _given(args, "bind_replayed_root") and not (_given(args, "gpu_from_rank") or _given(args, "gpus")):
        raise UsageError("numabind run: --bind-replayed-root applies only with --gpu-from-rank or --gpus")
    if _given(args, "nic") and not _given(args, "gpu_from_rank"):
        raise UsageError("numabind run: --nic chooses the NICs of the rank's GPU; it goes with --gpu-from-rank")
    if shaping and not gpu:
        raise UsageError(
            f"numabind run: {' and '.join(shaping)} only {'shapes' if len(shaping) == 1 else 'shape'} the plan "
            f"of --gpu N (or --gpu-from-rank); "
            f"without a GPU give the binding explicitly (--membind, --preferred, --interleave, ...)")


def check_run_syntax(args: argparse.Namespace) -> None:
    """A UsageError for what is wrong with the explicit options whatever the machine (the rest is planning's)."""
    from ..cpulist import parse_cpulist

    if _given(args, "physcpubind") and _given(args, "cpunodebind"):
        raise UsageError("--physcpubind and --cpunodebind both choose the CPUs: give one of them")
    memory = [flag for dest, flag in _options("memory") if _given(args, dest)]
    if len(memory) > 1:
        raise UsageError(f"a process has one memory policy, got {', '.join(memory)}: give one of them")
    for dest, flag in _options("cpus", "memory"):
        value = getattr(args, dest, None)
        text = list_body(value) if isinstance(value, str) else None
        if value is None or text is None:    # not given, -l, 'all' or a device (planning reads those)
            continue
        if not text:
            raise UsageError(f"{flag}={value!r} names no {'CPUs' if dest == 'physcpubind' else 'nodes'}")
        problem = list_syntax_problem(flag, value)    # the syntax first: its error offers the forms of LIST_FORMS
        if problem is not None:
            raise UsageError(problem)
        try:
            ids = parse_cpulist(text, what=flag, strides=False)
        except NumabindError as e:
            raise UsageError(str(e)) from None
        if dest == "preferred" and len(ids) > 1 and text == value:
            raise UsageError(f"--preferred={value} names several nodes; --preferred takes one "
                             f"(--preferred-many/-P takes several)")
    if _given(args, "gpus"):
        from ..devices import gpu_list_entries

        try:
            gpu_list_entries(args.gpus)
        except NumabindError as e:
            raise UsageError(f"--gpus: {e}") from None
    gpu = any(_given(args, dest) for dest, _ in _options("gpu", "gpus"))
    if args.migrate and not gpu and (not memory or memory == ["--localalloc"]):
        raise UsageError("--migrate moves pages onto the nodes of a memory policy: give --membind, --interleave, "
                         "--preferred or --preferred-many with it")
    if args.balancing and not gpu and memory and memory[0] not in ("--membind", "--preferred-many"):
        raise UsageError(f"--balancing (NUMA balancing within the nodes) goes with --membind or --preferred-many, "
                         f"not {memory[0]}")
    if args.balancing and not gpu and not memory:
        raise UsageError("--balancing enables NUMA balancing within the nodes of --membind (or --preferred-many): "
                         "give one of them")
    if args.all and gpu:
        raise UsageError("--all widens the CPU and node lists of explicit options; a GPU plan has none")
    weights = getattr(args, "weights", None)
    if weights is not None and getattr(args, "weighted_interleave", None) is None:
        raise UsageError("--weights goes with --weighted-interleave (-w)")
    if getattr(args, "set_weights", False) and weights is None:
        raise UsageError("--set-weights writes the weights given with --weights; give them")


def _live_root(args: argparse.Namespace) -> None:
    """``run`` binds processes of this machine: refuse a discovery root that is a replayed one."""
    explicit = getattr(args, "root", None)
    root = explicit if explicit is not None else os.environ.get("NUMABIND_FSROOT") or None
    if root is None or os.path.realpath(root) == "/":
        return
    if getattr(args, "bind_replayed_root", False) and getattr(args, "gpu_from_rank", False):
        return   # asked for: the replayed machine's CPU ids are this machine's (launcher tests)
    source, fix = (("--root", "drop --root") if explicit is not None else
                   ("NUMABIND_FSROOT", "unset NUMABIND_FSROOT"))
    raise UsageError(
        f"numabind {args.cmd} binds processes of this machine, but {source}={root!r} is another discovery root "
        f"(a replayed machine): its CPUs and nodes are not this machine's. To plan on it use "
        f"`numabind plan --root {printable(root)}` (or add --dry-run to see what {args.cmd} would do there); "
        f"to {args.cmd} here, {fix}")


def _rank_run_plan(args: argparse.Namespace) -> Plan:
    """``numabind run --gpu-from-rank``'s plan; the launcher's affinity is this process's only when binding here
    on a replayed root (--bind-replayed-root)."""
    within = None
    if getattr(args, "bind_replayed_root", False) and not getattr(args, "dry_run", False):
        from ..verify import current_binding

        within = current_binding(args.backend).cpus
    placed = place_rank(args, within=within)
    if args.verbose:
        print(printable_lines(placed.describe()), file=sys.stderr)
    for var, value in placed.env.items():      # --nic: the command's environment (the user's own are not here)
        os.environ[var] = value
        if args.verbose:
            print(f"numabind: {var}={value}", file=sys.stderr)
    return placed.plan


def _run_plan(args: argparse.Namespace) -> Plan:
    from ..topology import discover

    if getattr(args, "gpu_from_rank", False):
        return _rank_run_plan(args)
    topo = discover(args.root if getattr(args, "dry_run", False) else "/")   # a dry run plans on any root
    within = bool(getattr(args, "within_affinity", False))
    if args.gpu is not None:
        from ..strategies import plan_for_gpu

        policy: NodePolicy = args.policy or "bind"
        plan = plan_for_gpu(gpu_index(args.gpu, topo.gpus), mode=args.mode or "node", topology=topo, policy=policy,
                            within_affinity=within)
        if args.migrate:
            plan = plan.replace(migrate=True)
        return plan.validate(topo, within_affinity=within)
    argv: list[str] = []
    for dest, flag in _options("cpus", "memory"):     # numactl's options, as Plan.from_numactl_args reads them
        value = getattr(args, dest, None)
        if _given(args, dest):
            argv.append(flag if value is True else f"{flag}={value}")
    weights = getattr(args, "weights", None)
    by_bandwidth = weights == "bandwidth"
    if weights is not None and not by_bandwidth:
        argv.append(f"--weights={weights}")
    if not argv:
        raise UsageError("give a binding (--physcpubind, --membind, --gpu, ...) before '--'")
    if args.all:
        argv.append("--all")
    plan = Plan.from_numactl_args(argv, topology=topo, migrate=args.migrate, device_node=device_node,
                                  reason="numabind run " + " ".join(argv), within_affinity=within)
    if by_bandwidth:
        from ..strategies import bandwidth_weights

        try:
            plan = plan.replace(weights=bandwidth_weights(plan.mem_nodes or (), topo))
        except PlanError as e:
            raise PlanError(f"numabind run --weights bandwidth: {e} (here: --weights NODE:W,..., "
                            f"e.g. --weights 0:3,1:1)") from None
    if getattr(args, "set_weights", False) and not plan.weights:
        raise NumabindError("numabind run: --set-weights writes the weights given with --weights; give them")
    return plan.validate(topo, within_affinity=within)


#: Memory policies MPOL_F_NUMA_BALANCING goes with (bind since Linux 5.12, preferred-many since 6.10).
_BALANCING_POLICIES = ("bind", "preferred-many")


def _balance(be: Backend, strict: Strictness | None, warnings: list[str]) -> None:
    """Add MPOL_F_NUMA_BALANCING to the calling thread's memory policy (numactl's -b); refused: an error when
    strict, else a warning."""
    from ..backends import MPOL_F_NUMA_BALANCING, MemPolicyState

    try:
        state = be.save_mempolicy()
        if state.policy not in _BALANCING_POLICIES:
            raise NumabindError(f"--balancing needs the bind or preferred-many memory policy in force, but the "
                                f"policy is {state.describe()} (degraded: see the warnings above)")
        be.restore_mempolicy(MemPolicyState(state.mode | MPOL_F_NUMA_BALANCING, state.nodes))
    except NumabindError as e:
        if strict is not False:
            raise NumabindError(f"--balancing could not be applied: {e} (NUMA balancing with a memory policy "
                                f"needs Linux 5.12; --lenient runs the command without it)") from None
        warnings.append(f"--balancing left out: {e}")
        logging.getLogger("numabind.bind").warning("--balancing left out: %s", e)


def cmd_run(args: argparse.Namespace) -> int:
    dry = bool(getattr(args, "dry_run", False))
    replayed_gpus = _given(args, "gpus") and _given(args, "bind_replayed_root")
    if not dry and not replayed_gpus:   # a dry run plans on any root; --gpus --bind-replayed-root binds here
        _live_root(args)
    check_run_options(args)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("no command given after '--'")
    problem = command_problem(command)
    if problem is not None:
        raise UsageError(problem)
    forced = os.environ.get("NUMABIND_BACKEND")
    if args.backend is None and forced and forced not in BACKEND_NAMES:
        try:     # a usage error before binding, in the words get_backend says it (one message for it)
            get_backend(None)
        except NumabindError as e:
            raise UsageError(str(e)) from None
    strict: Strictness | None
    try:
        strict = run_strictness(bool(args.strict), bool(args.lenient))
    except ValueError as e:
        raise UsageError(str(e)) from None
    if getattr(args, "gpu_from_rank", False) and not (args.strict or args.lenient):
        strict = None   # a launcher's default: numabind.rank's own (NUMABIND_STRICT, else degrade with warnings)
    else:
        args.strict = strict   # what planning for --gpu reads
    check_run_syntax(args)
    try:
        launch = None
        if _given(args, "gpus"):   # the union of the GPUs' plans, and the command sees only them
            from ..topology import discover
            from .launch import gpu_launch

            launch = gpu_launch(args, discover(args.root if dry or replayed_gpus else "/"))
        plan = launch.plan if launch is not None else _run_plan(args)
        shares = _thread_shares(args, plan)
        if dry:
            from ..named import layout_shares
            from .launch import run_dry

            return run_dry(args, plan, command, launch,
                           threads=() if shares is None else layout_shares(shares[0], plan, shares[1]))
        if launch is not None:
            logging.getLogger("numabind").info("GPUs %s for %s: %s", ",".join(str(g.index) for g in launch.gpus),
                                               command[0], " ".join(f"{k}={v}" for k, v in launch.environ.items()))
        be, why = get_backend(args.backend)
        prefix = be.command_prefix(plan)
        if prefix is not None:
            if args.balancing:
                why_not = (f"--balancing is set in this process's memory policy, which the {be.name} backend "
                           f"cannot do (it starts the command through numactl); use the libnuma or syscall backend")
                if strict is not False:
                    raise NumabindError(why_not + " (--lenient runs the command without it)")
                logging.getLogger("numabind.bind").warning("--balancing left out: %s", why_not)
            logging.getLogger("numabind").info("starting %s through %s (%s)", command[0], be.name, why)
            env = dict(os.environ, **(launch.environ if launch is not None else {}))
            keep_binding_env(env)    # TensorRT-LLM must not undo the binding (INFO / WARNING through logging)
            if shares is not None:
                return _run_watched(prefix + command, env, shares, plan, args)
            os.execve(prefix[0], prefix + command, env)
        from ..bind import bind_current, bound_environ

        report = bind_current(plan, strict=strict, backend=args.backend,
                              set_weights=bool(getattr(args, "set_weights", False)))
        extra: list[str] = []
        if args.balancing:
            _balance(be, strict, extra)
    except UsageError:
        raise
    except NumabindError as e:
        raise CliError(str(e), NOT_APPLIED) from None
    env = bound_environ(report, None if launch is None else dict(os.environ, **launch.environ))
    kept = keep_binding_env(env)     # TensorRT-LLM must not undo the binding: logged (INFO, WARNING) once
    if args.verbose:     # the report as -v prints it: without that note, which the log line above just said
        print(printable_lines(report.describe() + "".join(f"\nwarning: {w}" for w in extra)), file=sys.stderr)
    if kept is not None:         # ... and with it in --json's report
        report = report.replace(notes=(*report.notes, kept[1]))
    if args.json:      # the plans as `plan --json` shapes one too: no consumer parses the text forms
        print(json.dumps(dict(report.to_dict(), balancing=bool(args.balancing and not extra),
                              requested_plan=plan_json(report.requested), applied_plan=plan_json(report.applied)),
                         sort_keys=True), file=sys.stderr)
    if shares is not None:
        return _run_watched(command, env, shares, plan, args)
    return exec_command(command, env)


def _thread_shares(args: argparse.Namespace, plan: Plan) -> tuple[list[tuple[str, str]], Any] | None:
    """``--thread``'s layout and the machine it is shared on (None without it), checked against ``plan`` before
    anything is bound: a UsageError for a malformed PATTERN=SPEC, a PlanError for a share that does not fit."""
    given = getattr(args, "thread", None)
    if not given:
        return None
    from ..named import layout_shares, parse_layout_item
    from ..topology import discover

    try:
        layout = [parse_layout_item(text) for text in given]
    except PlanError as e:
        raise UsageError(str(e)) from None
    topo = discover(args.root if getattr(args, "dry_run", False) else "/")   # a dry run plans on any root
    layout_shares(layout, plan, topo)
    return layout, topo


def _run_watched(command: list[str], env: dict[str, str], shares: tuple[list[tuple[str, str]], Any], plan: Plan,
                 args: argparse.Namespace) -> int:
    """``--thread``: start ``command`` as a child (bound as this process is), place its named threads as they
    appear until it ends, and return its status (128 + N when signal N ended it). SIGTERM, SIGHUP, SIGUSR1 and
    SIGUSR2 are passed on to it; SIGINT and SIGQUIT, which a terminal sends to both, are left to it."""
    import signal
    import subprocess

    from ..named import watch_named_threads
    from . import NOT_EXECUTABLE, NOT_FOUND

    try:
        child = subprocess.Popen(command, env=env)
    except OSError as e:
        missing = isinstance(e, FileNotFoundError)
        print(f"numabind: error: cannot execute {command[0]!r}: "
              f"{'command not found' if missing and '/' not in command[0] else e.strerror}", file=sys.stderr)
        return NOT_FOUND if missing else NOT_EXECUTABLE
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, lambda number, _frame: child.send_signal(number))
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, lambda _number, _frame: None)
    layout, topo = shares
    try:
        report = watch_named_threads(layout, plan, pid=child.pid, seconds=None, topology=topo,
                                     backend=args.backend, stop=lambda: child.poll() is not None)
    except NumabindError as e:     # the child ended before it could be watched: its status says how
        logging.getLogger("numabind.named").warning("the threads of %s were not placed: %s", command[0], e)
        report = None
    status = child.wait()
    if report is not None and args.verbose:
        print(printable_lines(report.describe()), file=sys.stderr)
    if report is not None and args.json:
        print(json.dumps({"threads": report.to_dict()}, sort_keys=True), file=sys.stderr)
    return 128 - status if status < 0 else status
