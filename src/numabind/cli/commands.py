"""The full command line (argparse): every subcommand, ``--help``, and ``run`` with GPU plans.

``numabind.cli.main`` sends plain ``numabind run`` option lists to its own fast path
(:func:`numabind.cli.fast_run`) and everything else here. The library never prints; this module does.

Global options (``-v``, ``--root``, ``--json``) go before or after the subcommand; every subcommand
takes ``--json``. ``numabind run``'s exit statuses are in :mod:`numabind.cli`; every other
subcommand exits 2 for a usage error or an error it reports, 1 where it says so (``plan``: a GPU that
cannot be placed).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .._base import keep_binding_env, printable
from ..backends import backend_info, get_backend, interleave_next_node
from ..cpulist import format_cpulist
from ..errors import NumabindError, PlanError
from ..plan import Plan
from . import (NOT_APPLIED, USAGE, command_problem, configure_logging, device_node, exec_command, gpu_index,
               gpu_spec, list_syntax_problem, printable_lines, run_strictness, stdout_gone)
from ._parser import ArgumentParser
from .look import (OUTPUT_FORMS, allowed_what, gpu_text, hardware_text, node_free_bytes, of_error, source_words,
                   table, topology_output, topology_text)

if TYPE_CHECKING:  # pragma: no cover
    from .._base import Strictness
    from ..backends import Backend
    from ..verify import Binding
    from ..rank import RankPlan
    from ..strategies import PlanRow
    from ..topology import Topology
    from ..types import Mode, NodePolicy

__all__ = ["main", "ArgumentParser", "UsageError", "CliError"]

from ..backends import BACKEND_NAMES
from ..plan import NODE_POLICIES as POLICIES
from ..strategies import MODE_SUMMARIES, MODES


class CliError(NumabindError):
    """An error the CLI reports with a given exit status (``exit_status``)."""

    def __init__(self, message: str, exit_status: int) -> None:
        super().__init__(message)
        self.exit_status = exit_status


class UsageError(CliError):
    """A command line numabind cannot take (exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, USAGE)


def _message(e: BaseException) -> str:
    """The error's text without a leading ``numabind ...:`` (main prints ``numabind: error:`` before it), each line
    printable: it may quote a replayed machine's files (a GPU's model, a cgroup path)."""
    text = str(e)
    for prefix in ("numabind run: ", "numabind show: ", "numabind plan: ", "numabind: "):
        if text.startswith(prefix):
            return printable_lines(text[len(prefix):])
    return printable_lines(text)


def _dump(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


def _plan_rows(topo: Topology, mode: Mode, policy: NodePolicy, gpus: list[int] | None = None,
               within_affinity: bool = False) -> tuple[PlanRow, ...]:
    from ..strategies import plan_table

    return plan_table(topo, mode=mode, policy=policy, gpus=gpus, within_affinity=within_affinity)


def _node_plans(topo: Topology, policy: NodePolicy = "bind") -> list[tuple[int, Plan]]:
    """Without GPUs: the plan a worker per node would get (its allowed CPUs, its memory when allowed)."""
    out = []
    for n, node in sorted(topo.nodes.items()):
        cpus = node.cpus & topo.allowed_cpus
        if not cpus:
            continue
        mem = frozenset({n}) if node.has_memory and n in topo.allowed_nodes else None
        out.append((n, Plan(cpus=cpus, mem_policy=policy if mem else None, mem_nodes=mem)))
    return out


def _plan_json(plan: Plan) -> dict[str, Any]:
    """A plan as the CLI's JSON says it (``plan --json``, ``run --json``'s ``requested_plan``/``applied_plan``):
    lists in cpulist form; ``numactl`` None for a plan numactl's options cannot say (a read-back default policy)."""
    try:
        numactl: str | None = plan.to_numactl_args()
    except PlanError:
        numactl = None
    return {"cpus": format_cpulist(plan.cpus) if plan.cpus is not None else None, "mem_policy": plan.mem_policy,
            "mem_nodes": format_cpulist(plan.mem_nodes) if plan.mem_nodes is not None else None, "numactl": numactl}


def _plans_text(topo: Topology, mode: Mode = "node", policy: NodePolicy = "bind", gpus: list[int] | None = None,
                plan_rows: Sequence[PlanRow] | None = None) -> str:
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
        text = f"Plans per GPU worker (mode {mode}, memory {policy}):\n" + table(rows)
        return text + ("\n" + "\n".join(notes) if notes else "")
    rows = [["node", "plan", "numactl equivalent"]]
    for n, plan in _node_plans(topo, policy):
        rows.append([str(n), plan.describe(), plan.to_numactl_args()])
    return ("Plans per NUMA node (no GPUs, so a worker per node would get):\n" + table(rows))


def _plans_json(topo: Topology, mode: Mode = "node", policy: NodePolicy = "bind", gpus: list[int] | None = None,
                plan_rows: Sequence[PlanRow] | None = None) -> list[Any]:
    """The rows of :func:`_plans_text` as JSON: PlanRow.to_dict() per GPU, else one per node."""
    if topo.gpus or gpus is not None:
        rows = plan_rows if plan_rows is not None else _plan_rows(topo, mode, policy, gpus)
        return [r.to_dict() for r in rows]
    return [{"node": n, "gpu": None, "plan": _plan_json(plan)} for n, plan in _node_plans(topo, policy)]


def _binding_json(b: Binding) -> dict[str, Any]:
    return {"cpus": format_cpulist(b.cpus), "policy": b.mem_policy, "nodes": format_cpulist(b.mem_nodes),
            "mems_allowed": format_cpulist(b.mems_allowed), "backend": b.backend,
            "weights": {str(n): w for n, w in sorted(b.weights.items())},
            "threads": {str(tid): format_cpulist(c) for tid, c in sorted(b.threads.items())}}


def _gpu_prefix(row: PlanRow) -> str:
    return f"GPU {row.gpu} ({row.vendor} {row.pci_address}): "


def _by_text(items: Iterable[tuple[int, str]]) -> list[tuple[str, str]]:
    """``(gpu, text)`` pairs grouped by text, in first-seen order: ``[("gpus 4-7", text), ("gpu 0", other)]``."""
    groups: dict[str, list[int]] = {}
    for gpu, text in items:
        groups.setdefault(text, []).append(gpu)
    return [(("gpus " if len(ids) > 1 else "gpu ") + format_cpulist(ids), text) for text, ids in groups.items()]


def _main_plans_text(topo: Topology, rows: Sequence[PlanRow]) -> str:
    """The first screen's plan table: one line per GPU worker, nothing but the plan in its cells; a GPU that
    cannot be placed says so in its row and why below the table (GPUs with the same reason on one line).
    ``numabind plan`` gives every reason of every GPU."""
    if not topo.gpus:
        return _plans_text(topo)
    cells = [["gpu", "node", "plan", "numactl equivalent"]]
    errors = []
    for r in rows:
        if r.plan is None:
            cells.append([str(r.gpu), "-", "cannot place (see below)", "-"])
            error = (r.error or "no reason given").replace(f"from {topo.allowed_source}",
                                                           source_words(topo.allowed_source))
            errors.append((r.gpu, error[len(_gpu_prefix(r)):] if error.startswith(_gpu_prefix(r)) else error))
            continue
        cells.append([str(r.gpu), "-" if r.cpu_node is None else str(r.cpu_node), r.plan.describe(),
                      r.plan.to_numactl_args()])
    lines = ["Plans per GPU worker (mode node, memory bind):", table(cells)]
    lines += [f"{who} cannot be placed: {text}" for who, text in _by_text(errors)]
    lines.append("(numabind plan explains each GPU's placement)")
    return "\n".join(lines)


def alignment_warnings(topo: Topology, who: str = "this process") -> list[str]:
    """One line per NUMA node holding GPUs whose CPUs or memory ``who`` may not use, by its cpuset
    (``cpuset.cpus``/``cpuset.mems``, a Kubernetes pod's among them): those GPUs' workers would run on another
    node's CPUs or memory, across the socket interconnect, or could not be placed. Empty when all are aligned."""
    out = []
    for node in sorted({g.numa_node for g in topo.gpus if g.numa_node is not None}):
        held = topo.nodes.get(node)
        no_cpus = held is not None and bool(held.cpus) and not held.cpus & topo.allowed_cpus
        no_mem = held is not None and held.has_memory and node not in topo.allowed_nodes
        if not (no_cpus or no_mem):
            continue
        gpus = [g.index for g in topo.gpus if g.numa_node == node]
        missing = " or ".join(what for what, off in (("CPUs", no_cpus), ("memory", no_mem)) if off)
        out.append(f"{'gpus' if len(gpus) > 1 else 'gpu'} {format_cpulist(gpus)} on node {node}: {who} may use "
                   f"none of node {node}'s {missing}, only {allowed_what(topo)}, so their workers would run "
                   f"off their GPU's node; give the pod node {node}'s CPUs and memory (Kubernetes Topology Manager "
                   f"policy single-numa-node or restricted) or use the GPUs of the allowed nodes")
    return out


def cmd_main(args: argparse.Namespace) -> int:
    from ..verify import current_binding
    from ..topology import discover

    topo = discover(args.root)
    info = backend_info()
    replayed = args.root is not None and os.path.realpath(args.root) != "/"
    who = "the replayed process" if replayed else "this process"
    rows = _plan_rows(topo, "node", "bind") if topo.gpus else ()
    if args.json:
        _dump({"topology": topo.to_dict(), "plans": _plans_json(topo, plan_rows=rows or None),
               "binding": _binding_json(current_binding()), "backends": info})
        return 0
    if replayed:
        print(f"#### the replayed machine, read from {printable(args.root)} (not the host this runs on) ####")
        print()
    print("== topology ==")
    print(topology_text(topo, who))
    print()
    print("== GPUs ==")
    print(gpu_text(topo))
    print()
    print("== plans ==")
    print(printable_lines(_main_plans_text(topo, rows)))     # notes and errors quote the machine's strings
    for line in alignment_warnings(topo, who):
        print(printable_lines(f"WARNING: {line}"))
    print()
    if replayed:
        print("#### this host, live: the process running numabind (not the replayed machine) ####")
        print()
    print("== current binding of this process ==")
    print(current_binding().describe())
    print()
    print("== backends ==")
    native = None if info["native_ok"] else info["native"]
    reason = info["reason"]
    if native:  # said once, in one line, instead of once per native backend
        print(native)
        reason = reason.replace(f"ImportError: {native}", "native core missing (above)")
    else:
        print(f"native core: {info['native']}")
    print(f"selected: {info['selected']} ({reason})")
    for name, why in info["unavailable"].items():
        if not (native and native in why):
            print(f"unavailable: {name}: {why}")
    return 0


# ----------------------------------------------------------------------------- hardware (numactl --hardware)
def cmd_hardware(args: argparse.Namespace) -> int:
    """Like ``numactl --hardware``: available nodes, each node's CPUs, size and free memory, distances."""
    from ..topology import discover

    topo = discover(args.root)
    free = node_free_bytes(args.root, topo)
    if args.json:
        ids = sorted(topo.nodes)
        _dump({"available": format_cpulist(ids),
               "nodes": {str(n): {"cpus": format_cpulist(topo.nodes[n].cpus), "size_bytes": topo.nodes[n].memory_bytes,
                                  "free_bytes": free[n]} for n in ids},
               "distances": {str(n): {str(m): d for m, d in sorted(topo.nodes[n].distances.items())} for n in ids}})
        return 0
    sys.stdout.write(hardware_text(topo, free, cpu_compress=getattr(args, "cpu_compress", False)))
    return 0


# ----------------------------------------------------------------------------- show (numactl --show)
def _mask(ids: Iterable[int]) -> str:
    """numactl's mask text: each id followed by a space."""
    return "".join(f"{i} " for i in sorted(ids))


def show_lines(b: Binding, node_cpus: dict[int, frozenset[int]], memory_nodes: frozenset[int],
               interleave_next: int | None = None) -> list[str]:
    """``numactl --show``'s lines for the binding ``b``: policy, preferred node, (interleave mask and next
    node), physcpubind, cpubind, nodebind, membind, preferred. numactl 2.0.16 prints no line end after
    ``preferred node:`` under the local policy (its physcpubind line is glued to it) and a number such as
    ``[8194]`` for a policy with mode flags; numabind prints ``current`` and the policy's name instead.
    numactl 2.0.19 does the same under weighted interleave (``policy: [6]``, glued line); numabind prints
    the policy's name and the interleave lines with the system's weights (tests/test_show_oracle.py)."""
    policy = b.mem_policy or "unknown"
    nodes = sorted(b.mem_nodes)
    first = nodes[0] if nodes else None
    lines = [f"policy: {policy}"]
    if policy in ("interleave", "weighted-interleave"):
        nxt = interleave_next if interleave_next is not None else first
        lines.append(f"preferred node: {nxt} (interleave next)")
        lines.append(f"interleavemask: {_mask(nodes)}")
        lines.append(f"interleavenode: {nxt}")
        if policy == "weighted-interleave" and b.weights:   # numabind's line (issue 12): the system's weights
            lines.append("weights: " + ",".join(f"{n}:{w}" for n, w in sorted(b.weights.items()))
                         + " (system-wide, /sys/kernel/mm/mempolicy/weighted_interleave)")
    elif policy == "preferred-many":
        lines.append(f"preferred node: {first} (preferred-many)")
    elif policy in ("bind", "preferred") and first is not None:
        lines.append(f"preferred node: {first}")
    else:
        lines.append("preferred node: current")
    run_nodes = [n for n, cpus in sorted(node_cpus.items()) if cpus & b.cpus]
    lines.append(f"physcpubind: {_mask(b.cpus)}")
    lines.append(f"cpubind: {_mask(run_nodes)}")
    lines.append(f"nodebind: {_mask(run_nodes)}")
    lines.append(f"membind: {_mask(nodes if policy == 'bind' else b.mems_allowed & memory_nodes)}")
    lines.append(f"preferred: {_mask(nodes if policy not in ('default', 'local', 'unknown') else ())}")
    return lines


def _balancing_on() -> bool | None:
    """Whether the calling thread's memory policy carries MPOL_F_NUMA_BALANCING (numactl's -b); None when
    the backend cannot read the mode word."""
    from ..backends import MPOL_F_NUMA_BALANCING

    try:
        be, _ = get_backend(None)
        return bool(be.save_mempolicy().mode & MPOL_F_NUMA_BALANCING)
    except NumabindError:
        return None


def cmd_show(args: argparse.Namespace) -> int:
    from .. import live
    from ..verify import current_binding

    if args.root is not None and os.path.realpath(args.root) != "/":
        raise UsageError(f"numabind show reads this process's binding from the kernel; --root {args.root!r} "
                         f"does not apply (drop it; `numabind --root R hardware` shows a replayed machine)")
    b = current_binding()
    if args.json:
        _dump(dict(_binding_json(b), balancing=_balancing_on()))
        return 0
    machine = live.machine()
    memory = frozenset(n for n, node in machine.nodes.items() if node.has_memory)
    nxt = interleave_next_node() if b.mem_policy in ("interleave", "weighted-interleave") else None
    print("\n".join(show_lines(b, {n: node.cpus for n, node in machine.nodes.items()}, memory, nxt)))
    return 0


# ----------------------------------------------------------------------------- topology
def cmd_topology(args: argparse.Namespace) -> int:
    from ..topology import discover

    topo = discover(args.root)
    form = args.of or ("json" if args.json else "text")
    if args.matrix:
        from .matrix import topology_matrix

        if form == "xml":
            raise SystemExit("numabind topology: --matrix prints text or JSON, not --of xml")
        sys.stdout.write(topology_matrix(topo, as_json=form == "json"))
        return 0
    if form == "json":
        _dump(topo.to_dict())
        return 0
    sys.stdout.write(topology_output(topo, form))
    return 0


# ----------------------------------------------------------------------------- plan
def cmd_plan(args: argparse.Namespace) -> int:
    from ..topology import discover

    if getattr(args, "gpu_from_rank", False):
        return _cmd_plan_rank(args)
    if getattr(args, "nic", False):
        raise UsageError("numabind plan: --nic chooses the NICs of the rank's GPU; it goes with --gpu-from-rank")
    topo = discover(args.root)
    if args.all and not topo.gpus:
        message = ("no GPU is visible on this machine, so --all (every visible GPU) has nothing to plan; "
                   "without --all, numabind plan shows the plan a worker per NUMA node would get")
        if args.json:
            _dump([])
            print(f"numabind: error: {message}", file=sys.stderr)
        else:
            print(message)
        return 1
    try:
        gpus = None if args.gpu is None else [gpu_index(args.gpu, topo.gpus)]
    except PlanError as e:      # a UUID or PCI address no visible GPU has: a GPU that cannot be placed
        raise CliError(str(e), NOT_APPLIED) from None
    if args.within_affinity:        # the explicit narrowing: plan inside the affinity this process inherited
        from ..strategies import narrowed_to_affinity

        topo = narrowed_to_affinity(topo)
    rows = _plan_rows(topo, args.mode, args.policy, gpus)
    if args.json:
        _dump(_plans_json(topo, args.mode, args.policy, gpus, plan_rows=rows))
    else:
        print(printable_lines(_plans_text(topo, args.mode, args.policy, gpus, plan_rows=rows)))
    return 0 if all(r.plan is not None for r in rows) else 1   # the same in text and JSON


def _place_rank(args: argparse.Namespace, within: frozenset[int] | None = None) -> RankPlan:
    """--gpu-from-rank: this process's local rank planned on the discovery root (numabind.rank), every limit
    from that root (``within`` None: its own affinity), by numabind.rank.rank_limit's rule."""
    from ..rank import place_rank
    from ..topology import discover

    return place_rank(args.mode or "node", args.policy or "bind", discover(args.root), within=within,
                      strict=getattr(args, "strict", None), migrate=bool(getattr(args, "migrate", False)),
                      nics=bool(getattr(args, "nic", False)),
                      within_affinity=bool(getattr(args, "within_affinity", False)))


def _cmd_plan_rank(args: argparse.Namespace) -> int:
    """``numabind plan --gpu-from-rank [--json]``: the rank's plan, not applied; exit 1 when it was not placed
    (also without a rank in the environment: no plan, as ``numabind run --gpu-from-rank`` says)."""
    try:
        placed = _place_rank(args)
    except UsageError:
        raise
    except NumabindError as e:
        raise CliError(str(e), NOT_APPLIED) from None
    if args.json:
        print(json.dumps(placed.to_dict(), indent=2, sort_keys=True))
    else:
        print(printable_lines(placed.describe()))
        print("numactl equivalent: " + (placed.plan.to_numactl_args() or "(none)"))
        if getattr(args, "nic", False):
            print(printable_lines("environment (--nic): " + (" ".join(f"{k}={v}" for k, v in placed.env.items())
                                                             or "(none)")))
        print(printable_lines("\n".join([f"  {why}" for why in placed.reasons]
                                         + [f"  warning: {w}" for w in placed.warnings])))
    return 0 if placed.to_dict()["placed"] else 1


def _rank_run_plan(args: argparse.Namespace) -> Plan:
    """``numabind run --gpu-from-rank``: the plan ``numabind plan --gpu-from-rank`` prints. Only a run that binds
    this process on a replayed root (--bind-replayed-root, whose CPU ids are this machine's) takes the
    launcher's affinity from this process; a dry run's comes from the root it plans on."""
    within = None
    if getattr(args, "bind_replayed_root", False) and not getattr(args, "dry_run", False):
        from ..verify import current_binding

        within = current_binding(args.backend).cpus
    placed = _place_rank(args, within=within)
    if args.verbose:
        print(printable_lines(placed.describe()), file=sys.stderr)
    for var, value in placed.env.items():      # --nic: the command's environment (the user's own are not here)
        os.environ[var] = value
        if args.verbose:
            print(f"numabind: {var}={value}", file=sys.stderr)
    plan: Plan = placed.plan
    return plan


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


def _given(args: argparse.Namespace, dest: str) -> bool:
    value = getattr(args, dest, None)
    return value is not None and value is not False


def check_run_options(args: argparse.Namespace) -> None:
    """Conflicting or unused ``numabind run`` options are a usage error naming them, never ignored."""
    explicit = [flag for dest, flag in _EXPLICIT_RUN_OPTIONS if _given(args, dest)]
    gpu = [flag for dest, flag in (*_GPU_RUN_OPTIONS, ("gpus", "--gpus")) if _given(args, dest)]
    shaping = [flag for dest, flag in _GPU_PLAN_OPTIONS if _given(args, dest)]
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


def _run_plan(args: argparse.Namespace) -> Plan:
    from ..topology import discover

    if getattr(args, "gpu_from_rank", False):
        return _rank_run_plan(args)
    topo = discover(args.root if getattr(args, "dry_run", False) else "/")   # a dry run plans on any root
    if args.gpu is not None:
        from ..strategies import plan_for_gpu

        policy: NodePolicy = args.policy or "bind"
        within = bool(getattr(args, "within_affinity", False))
        plan = plan_for_gpu(gpu_index(args.gpu, topo.gpus), mode=args.mode or "node", topology=topo, policy=policy,
                            within_affinity=within)
        if args.migrate:
            plan = plan.replace(migrate=True)
        return plan.validate(topo, within_affinity=within)
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
        raise UsageError("give a binding (--physcpubind, --membind, --gpu, ...) before '--'")
    if by_bandwidth and getattr(args, "weighted_interleave", None) is None:
        raise NumabindError("numabind run: --weights goes with --weighted-interleave (-w)")
    if args.all:
        argv.append("--all")
    within = bool(getattr(args, "within_affinity", False))
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


#: ``numabind run`` options that take a CPU or node list (dest, flag).
_LIST_OPTIONS = (("physcpubind", "--physcpubind"), ("cpunodebind", "--cpunodebind"), ("membind", "--membind"),
                 ("preferred", "--preferred"), ("preferred_many", "--preferred-many"),
                 ("interleave", "--interleave"), ("weighted_interleave", "--weighted-interleave"))
#: The memory policy options (dest, flag): a process has one memory policy.
_MEMORY_OPTIONS = (("membind", "--membind"), ("preferred", "--preferred"), ("preferred_many", "--preferred-many"),
                   ("interleave", "--interleave"), ("weighted_interleave", "--weighted-interleave"),
                   ("localalloc", "--localalloc"))
#: numactl's device specifiers: resolved against the machine, so their errors are not usage errors.
_DEVICE_KINDS = ("pci:", "netdev:", "block:", "file:", "ip:")
#: Memory policies MPOL_F_NUMA_BALANCING goes with (bind since Linux 5.12, preferred-many since 6.10).
_BALANCING_POLICIES = ("bind", "preferred-many")


def check_run_syntax(args: argparse.Namespace) -> None:
    """What is wrong with the explicit options whatever the machine: a usage error (exit 2) naming it.
    What depends on the machine (a node it lacks, CPUs outside the cpuset, a device without a node) is
    left to planning, and is exit 1."""
    from ..cpulist import parse_cpulist

    if _given(args, "physcpubind") and _given(args, "cpunodebind"):
        raise UsageError("--physcpubind and --cpunodebind both choose the CPUs: give one of them")
    memory = [flag for dest, flag in _MEMORY_OPTIONS if _given(args, dest)]
    if len(memory) > 1:
        raise UsageError(f"a process has one memory policy, got {', '.join(memory)}: give one of them")
    for dest, flag in _LIST_OPTIONS:
        value = getattr(args, dest, None)
        if value is None:
            continue
        text = value[1:] if value.startswith("!") else value
        text = text[1:] if text.startswith("+") else text
        if text == "all" or text.startswith(_DEVICE_KINDS):
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
    gpu = _given(args, "gpu") or _given(args, "gpu_from_rank") or _given(args, "gpus")
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


def _balance(be: Backend, strict: Strictness | None, warnings: list[str]) -> None:
    """Add MPOL_F_NUMA_BALANCING to the calling thread's memory policy (numactl's -b): what the command
    execs with. Refused: an error when strict, else a warning and the policy is left without it."""
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
        if dry:
            from .launch import run_dry

            return run_dry(args, plan, command, launch)
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
                              requested_plan=_plan_json(report.requested), applied_plan=_plan_json(report.applied)),
                         sort_keys=True), file=sys.stderr)
    return exec_command(command, env)


class _Once(argparse.Action):
    """Store an option's value, refusing a second one (argparse would silently keep the last)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        old = getattr(namespace, self.dest, None)
        if old is not None:
            parser.error(f"{option_string} given twice (first {old!r}, then {values!r}; "
                         f"{'/'.join(self.option_strings)} is one option): give it once")
        setattr(namespace, self.dest, values)


def _common() -> ArgumentParser:
    """The global options, also taken after the subcommand (defaults suppressed: those given before stay)."""
    c = ArgumentParser(add_help=False)
    c.add_argument("--root", default=argparse.SUPPRESS, help="discovery root (default $NUMABIND_FSROOT or /)")
    c.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help="log INFO (-v) or DEBUG (-vv)")
    c.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON instead of text")
    return c


def _output_form(value: str) -> str:
    """``topology --of``'s type: a form numabind writes, else the error that says how to get a picture."""
    if value not in OUTPUT_FORMS:
        raise argparse.ArgumentTypeError(of_error(value).removeprefix("argument --of: "))
    return value


#: What ``numabind --help`` says below the options: numactl's form and what ``--root`` reads.
_EPILOG = """\
numactl's own form works too: numabind -N 0 -m 0 CMD, numabind -C 0-3 -m 0 -- CMD, numabind -H,
numabind -s (a link named numactl runs existing scripts unchanged).

--root R (or $NUMABIND_FSROOT) reads another machine instead of this one:
  a directory holding sys/ and proc/      numabind --root /tmp/dump plan --all
  an hwloc-gather-topology tarball        numabind --root host.tar.bz2 hardware
  an hwloc XML file (lstopo --of xml)     numabind --root nvidiaDGX2.xml plan --all

Shell completion: numabind completion bash|zsh."""

#: The placement modes, one line each, below ``plan --help`` and ``run --help``.
_MODES_EPILOG = "placement modes (--mode):\n" + "\n".join(f"  {m:<13} {MODE_SUMMARIES[m]}" for m in MODES)


def build_parser() -> argparse.ArgumentParser:
    from .._version import __version__

    p = ArgumentParser(
        prog="numabind", raw_epilog=_EPILOG,
        description="Bind CPU affinity and NUMA memory policy without numactl. "
                    "Without a command: show the topology, GPUs, plans and the current binding.")
    p.add_argument("--version", action="version", version=f"numabind {__version__}")
    p.add_argument("--root", help="discovery root (default $NUMABIND_FSROOT or /)")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log INFO (-v) or DEBUG (-vv)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text (every subcommand)")
    common = [_common()]
    sub = p.add_subparsers(dest="cmd")
    sub.add_parser("hardware", parents=common, help="nodes, CPUs, memory, distances (like numactl --hardware)",
                   description="Like numactl --hardware: available nodes, each node's CPUs, size and free "
                               "memory, and the distance matrix.")
    sub.add_parser("show", parents=common, help="this process's binding (like numactl --show)",
                   description="Like numactl --show: policy, preferred node, physcpubind, cpubind, nodebind, "
                               "membind, preferred; --json for the whole binding (every thread, weights).")
    t = sub.add_parser("topology", parents=common, help="discovered topology: nodes, packages, caches, cores, "
                                                        "PCI devices (like lstopo)")
    t.add_argument("--of", type=_output_form, metavar="{" + ",".join(OUTPUT_FORMS) + "}", default=None,
                   help="output format: text (default), json (Topology.to_dict(), as --json) or xml (hwloc 2 XML: "
                        "lstopo --input m.xml m.svg draws it, numabind --root m.xml replays it)")
    t.add_argument("--matrix", action="store_true",
                   help="GPU x NIC PCI link classes (PIX/PXB/PHB/NODE/SYS) and nodes, like nvidia-smi topo -m")
    pl = sub.add_parser("plan", parents=common, help="what each GPU's worker would be bound to",
                        raw_epilog=_MODES_EPILOG)
    g = pl.add_mutually_exclusive_group()
    g.add_argument("--gpu", type=gpu_spec, metavar="GPU",
                   help="one GPU: its visible index, UUID or PCI address (as --gpus names them)")
    g.add_argument("--all", action="store_true",
                   help="every visible GPU; exit 1 when none is (without --gpu/--all: every GPU, else per node)")
    g.add_argument("--gpu-from-rank", action="store_true",
                   help="the GPU of this process's local rank (LOCAL_RANK, SLURM_LOCALID, ...); without a visible "
                        "GPU: the rank's share of the nodes (cores), by the local world size")
    pl.add_argument("--nic", action="store_true", help="with --gpu-from-rank: also the rank's nearest NICs and the "
                    "NCCL_IB_HCA, UCX_NET_DEVICES, NCCL_SOCKET_IFNAME for them (those already set are kept)")
    pl.add_argument("--mode", choices=MODES, default="node", help="placement mode (default node; see below)")
    pl.add_argument("--policy", choices=POLICIES, default="bind", help="memory policy (default bind)")
    pl.add_argument("--within-affinity", action="store_true",
                    help="plan inside the CPU affinity this process inherited (default: the cpuset is the limit, "
                         "whatever affinity a parent left behind)")
    r = sub.add_parser("run", parents=common, help="run a command bound (a numactl replacement)",
                       raw_epilog=_MODES_EPILOG,
                       usage="numabind run [binding options] -- command [args...]",
                       description="Bind this process, then exec the command. Lists: 1,3-5, all, !LIST (all "
                                   "but), +LIST (relative to the cpuset), or a device: pci:BUS, netdev:IF, "
                                   "block:DEV, file:PATH. Exit: the command's status; 1 when the binding cannot "
                                   "be applied (the command does not run unless --lenient); 2 usage; 126 not "
                                   "executable; 127 not found.")
    r.add_argument("-C", "--physcpubind", "--cpus", dest="physcpubind", metavar="CPUS", action=_Once,
                   help="run on these CPUs")
    r.add_argument("-N", "--cpunodebind", "--cpubind", dest="cpunodebind", metavar="NODES", action=_Once,
                   help="run on the CPUs of these nodes (--cpubind: numactl's old spelling)")
    r.add_argument("-m", "--membind", metavar="NODES", action=_Once, help="allocate memory only on these nodes")
    r.add_argument("-p", "--preferred", metavar="NODE", action=_Once,
                   help="allocate on this node first, others when it is full")
    r.add_argument("-P", "--preferred-many", dest="preferred_many", metavar="NODES", action=_Once,
                   help="allocate on these nodes first (Linux 5.15+)")
    r.add_argument("-i", "--interleave", metavar="NODES", action=_Once, help="interleave pages over these nodes")
    r.add_argument("-w", "--weighted-interleave", dest="weighted_interleave", metavar="NODES", action=_Once,
                   help="interleave by weight (Linux 6.9+; numactl 2.0.19's -w); the weights are the system's "
                        "unless --weights is given")
    r.add_argument("--weights", metavar="NODE:W,...", action=_Once,
                   help="with -w: the weight of each node (1-255), e.g. 0:3,1:1, or 'bandwidth' to take them from "
                        "the firmware's bandwidth figures (HMAT); weights are system-wide, so they hold only if the "
                        "system's are the same (else a warning; --strict fails) unless --set-weights")
    r.add_argument("--set-weights", action="store_true",
                   help="write --weights into /sys/kernel/mm/mempolicy/weighted_interleave (system-wide, root)")
    r.add_argument("-l", "--localalloc", action="store_true", help="allocate on the node the thread runs on")
    r.add_argument("-a", "--all", action="store_true",
                   help="lists are over every online CPU and node, not only this process's (as numactl's -a)")
    r.add_argument("--within-affinity", action="store_true",
                   help="bind inside the CPU affinity this process inherited (default: the cpuset is the limit, so "
                        "-N and --gpu bind the node's CPUs whatever affinity a parent left; -C without -a is "
                        "checked against the affinity, as numactl does)")
    r.add_argument("-b", "--balancing", action="store_true",
                   help="with --membind (or --preferred-many): NUMA balancing within those nodes "
                        "(MPOL_F_NUMA_BALANCING, Linux 5.12+)")
    r.add_argument("--gpu", type=gpu_spec, metavar="GPU", action=_Once,
                   help="bind for this GPU: its visible index, UUID or PCI address, as --gpus names them (see "
                        "numabind plan); unlike --gpus it leaves the GPUs the command sees as they are")
    r.add_argument("--gpus", metavar="LIST", action=_Once,
                   help="bind for these GPUs (the union of their plans) and let the command see only them: visible "
                        "indices, UUIDs or PCI addresses, e.g. 4,5; sets CUDA_VISIBLE_DEVICES (NVIDIA), "
                        "ROCR_VISIBLE_DEVICES (AMD), ZE_AFFINITY_MASK (Intel) or ASCEND_RT_VISIBLE_DEVICES (Ascend), "
                        "composed with the one already set")
    r.add_argument("--dry-run", action="store_true",
                   help="print the plan, the variables as export lines and the equivalent numactl command; run "
                        "nothing (exit 0); with --json one object")
    r.add_argument("--gpu-from-rank", action="store_true",
                   help="bind for the GPU of this process's local rank (LOCAL_RANK, SLURM_LOCALID, ...), within "
                        "the cpuset: the CPUs the launcher bound it to are replaced, as numactl does "
                        "(--within-affinity keeps it inside them); without a visible GPU: the rank's share of the "
                        "nodes (cores), by the local world size")
    r.add_argument("--nic", action="store_true", help="with --gpu-from-rank: export NCCL_IB_HCA, UCX_NET_DEVICES and "
                   "NCCL_SOCKET_IFNAME for the rank's nearest NICs into the command (those already set are kept)")
    r.add_argument("--bind-replayed-root", action="store_true",
                   help="with --gpu-from-rank or --gpus: bind this process although the discovery root is a replayed "
                        "machine whose CPU ids are this machine's (tests of launchers on fake GPU machines)")
    r.add_argument("--mode", choices=MODES, default=None, action=_Once,
                   help="placement mode of --gpu (default node; see below)")
    r.add_argument("--policy", choices=POLICIES, default=None, action=_Once,
                   help="memory policy of --gpu (default bind)")
    r.add_argument("--migrate", action="store_true", help="also move pages already allocated (no effect at exec)")
    r.add_argument("--strict", action="store_true", default=None,
                   help="exit 1 instead of degrading (the default, unless NUMABIND_STRICT says otherwise)")
    r.add_argument("--lenient", action="store_true",
                   help="degrade step by step with a warning per step and run the command anyway "
                        "(--gpu-from-rank's default)")
    r.add_argument("--backend", choices=BACKEND_NAMES, action=_Once,
                   help="force a backend (default: $NUMABIND_BACKEND, else the first usable)")
    r.add_argument("command", nargs=argparse.REMAINDER, help="the command and its arguments, after --")
    from .stat import add_parser as add_stat

    add_stat(sub)
    st = sub.choices["stat"]
    st.add_argument("--root", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    st.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help="log INFO (-v) or DEBUG (-vv)")
    from .move import add_parser as add_move

    add_move(sub)
    ins = sub.add_parser("instrument", help="run a Python program with numabind in place of vLLM's and SGLang's "
                                            "numa_utils, in every process (no source edit)")
    ins.add_argument("command", nargs=argparse.REMAINDER, help="the command and its arguments, after --")
    cmp = sub.add_parser("completion", help="print the bash or zsh completion script (needs shtab)",
                         description="Print the shell completion script, generated from this parser by shtab "
                                     "(pip install shtab, the completion extra).")
    cmp.add_argument("shell", choices=COMPLETION_SHELLS, help="the shell to print the completion script for")
    _keep_global_options(sub)
    return p


#: The shells ``numabind completion`` prints a script for (shtab writes them; numabind.cli.completion).
COMPLETION_SHELLS = ("bash", "zsh")


#: Options the top-level parser takes that a subcommand takes again: given before the subcommand they must stay.
_GLOBAL_DESTS = ("json", "root", "verbose")


def _keep_global_options(sub: Any) -> None:
    """A subcommand's copy of a global option must not reset what was given before the subcommand (argparse
    fills a subparser's defaults over the top-level namespace): ``numabind --json stat PID`` prints JSON as
    ``numabind stat --json PID`` does. Every subcommand, its own parser or not, is checked here, in one place."""
    for parser in sub.choices.values():
        for action in parser._actions:
            if action.dest in _GLOBAL_DESTS:
                action.default = argparse.SUPPRESS


def _cmd_completion(args: argparse.Namespace) -> int:
    from . import completion_main   # numabind.cli.completion imports this module's parser: reached through the package

    return completion_main([args.shell])


def _cmd_instrument(args: argparse.Namespace) -> int:
    from .instrument import main as instrument_main

    return instrument_main(list(args.command))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    from .move import cmd_move
    from .stat import cmd_stat

    handlers = {None: cmd_main, "hardware": cmd_hardware, "show": cmd_show, "topology": cmd_topology,
                "plan": cmd_plan, "run": cmd_run, "stat": cmd_stat, "move": cmd_move, "instrument": _cmd_instrument,
                "completion": _cmd_completion}
    try:
        rc = handlers[args.cmd](args) or 0
        sys.stdout.flush()   # a closed pipe shows here, not at interpreter exit
        return rc
    except BrokenPipeError:
        return stdout_gone()   # the reader went away (`numabind ... --json | head`)
    except NumabindError as e:
        print(f"numabind: error: {_message(e)}", file=sys.stderr)
        return getattr(e, "exit_status", USAGE)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
