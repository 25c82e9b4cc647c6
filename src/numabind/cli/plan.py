"""``numabind plan``: what each GPU's worker would be bound to (or a worker per node, without GPUs), and the plan
tables the first screen (:mod:`numabind.cli.overview`) and ``run --json`` share. Exit 1 when a GPU cannot be
placed (in text and JSON alike), 2 for a usage error."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..cpulist import format_cpulist
from ..errors import NumabindError, PlanError
from ..plan import NODE_POLICIES, Plan
from ..strategies import MODE_SUMMARIES, MODES, plan_table
from . import NOT_APPLIED, gpu_index, gpu_spec, printable_lines
from ._parser import CliError, UsageError, global_options, print_json
from .look import table

if TYPE_CHECKING:  # pragma: no cover
    from ..rank import RankPlan
    from ..strategies import PlanRow
    from ..topology import Topology
    from ..types import Mode, NodePolicy

__all__ = ["GPU_HEAD", "MODES_EPILOG", "add_parser", "cmd_plan", "gpu_cells", "node_plans", "place_rank", "plan_json",
           "plans_json", "plans_text"]

#: The placement modes, one line each, below ``plan --help`` and ``run --help``.
MODES_EPILOG = "placement modes (--mode):\n" + "\n".join(f"  {m:<13} {MODE_SUMMARIES[m]}" for m in MODES)


def add_parser(sub: Any) -> None:
    """Register ``plan`` on the CLI's subparsers."""
    pl = sub.add_parser("plan", parents=global_options(), help="what each GPU's worker would be bound to",
                        raw_epilog=MODES_EPILOG)
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
    pl.add_argument("--policy", choices=NODE_POLICIES, default="bind", help="memory policy (default bind)")
    pl.add_argument("--within-affinity", action="store_true",
                    help="plan inside the CPU affinity this process inherited (default: the cpuset is the limit, "
                         "whatever affinity a parent left behind)")


# ----------------------------------------------------------------------------- the plan tables
#: The head of a table of plans per GPU worker (``plan``, the first screen).
GPU_HEAD = ("gpu", "node", "plan", "numactl equivalent")


def gpu_cells(row: PlanRow) -> list[str]:
    """A placed GPU's row of that table: the GPU, its node, its plan, numactl's options for it."""
    assert row.plan is not None
    return [str(row.gpu), "-" if row.cpu_node is None else str(row.cpu_node), row.plan.describe(),
            row.plan.to_numactl_args()]


def node_plans(topo: Topology, policy: NodePolicy = "bind") -> list[tuple[int, Plan]]:
    """Without GPUs: the plan a worker per node would get (its allowed CPUs, its memory when allowed)."""
    out = []
    for n, node in sorted(topo.nodes.items()):
        cpus = node.cpus & topo.allowed_cpus
        if not cpus:
            continue
        mem = frozenset({n}) if node.has_memory and n in topo.allowed_nodes else None
        out.append((n, Plan(cpus=cpus, mem_policy=policy if mem else None, mem_nodes=mem)))
    return out


def plan_json(plan: Plan) -> dict[str, Any]:
    """A plan as ``plan --json`` and ``run --json`` say it; ``numactl`` None when numactl's options cannot."""
    try:
        numactl: str | None = plan.to_numactl_args()
    except PlanError:
        numactl = None
    return {"cpus": format_cpulist(plan.cpus) if plan.cpus is not None else None, "mem_policy": plan.mem_policy,
            "mem_nodes": format_cpulist(plan.mem_nodes) if plan.mem_nodes is not None else None, "numactl": numactl}


def plans_text(topo: Topology, mode: Mode = "node", policy: NodePolicy = "bind", gpus: list[int] | None = None,
               rows: Sequence[PlanRow] | None = None) -> str:
    """The plan per GPU worker (``rows``, else planned here), or per node without GPUs, as a table."""
    if topo.gpus or gpus is not None:
        cells = [list(GPU_HEAD)]
        notes = []
        for r in rows if rows is not None else plan_table(topo, mode=mode, policy=policy, gpus=gpus):
            if r.plan is None:
                cells.append([str(r.gpu), "-", "cannot place: " + (r.error or ""), "-"])
                continue
            cells.append(gpu_cells(r))
            notes += [f"  gpu {r.gpu}: {why}" for why in r.reasons]
        text = f"Plans per GPU worker (mode {mode}, memory {policy}):\n" + table(cells)
        return text + ("\n" + "\n".join(notes) if notes else "")
    cells = [["node", "plan", "numactl equivalent"]]
    for n, plan in node_plans(topo, policy):
        cells.append([str(n), plan.describe(), plan.to_numactl_args()])
    return "Plans per NUMA node (no GPUs, so a worker per node would get):\n" + table(cells)


def plans_json(topo: Topology, mode: Mode = "node", policy: NodePolicy = "bind", gpus: list[int] | None = None,
               rows: Sequence[PlanRow] | None = None) -> list[Any]:
    """The rows of :func:`plans_text` as JSON: PlanRow.to_dict() per GPU, else one per node."""
    if topo.gpus or gpus is not None:
        rows = rows if rows is not None else plan_table(topo, mode=mode, policy=policy, gpus=gpus)
        return [r.to_dict() for r in rows]
    return [{"node": n, "gpu": None, "plan": plan_json(plan)} for n, plan in node_plans(topo, policy)]


# ----------------------------------------------------------------------------- numabind plan
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
            print_json([])
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
    rows = plan_table(topo, mode=args.mode, policy=args.policy, gpus=gpus)
    if args.json:
        print_json(plans_json(topo, args.mode, args.policy, gpus, rows=rows))
    else:
        print(printable_lines(plans_text(topo, args.mode, args.policy, gpus, rows=rows)))
    return 0 if all(r.plan is not None for r in rows) else 1   # the same in text and JSON


def place_rank(args: argparse.Namespace, within: frozenset[int] | None = None) -> RankPlan:
    """--gpu-from-rank: this process's local rank planned on the discovery root (``within`` None: the root's
    affinity)."""
    from ..rank import place_rank as place
    from ..topology import discover

    return place(args.mode or "node", args.policy or "bind", discover(args.root), within=within,
                 strict=getattr(args, "strict", None), migrate=bool(getattr(args, "migrate", False)),
                 nics=bool(getattr(args, "nic", False)), within_affinity=bool(getattr(args, "within_affinity", False)))


def _cmd_plan_rank(args: argparse.Namespace) -> int:
    """``numabind plan --gpu-from-rank``: the rank's plan, not applied; exit 1 when it was not placed."""
    try:
        placed = place_rank(args)
    except UsageError:
        raise
    except NumabindError as e:
        raise CliError(str(e), NOT_APPLIED) from None
    if args.json:
        print_json(placed.to_dict())
    else:
        print(printable_lines(placed.describe()))
        print("numactl equivalent: " + (placed.plan.to_numactl_args() or "(none)"))
        if getattr(args, "nic", False):
            print(printable_lines("environment (--nic): " + (" ".join(f"{k}={v}" for k, v in placed.env.items())
                                                             or "(none)")))
        print(printable_lines("\n".join([f"  {why}" for why in placed.reasons]
                                         + [f"  warning: {w}" for w in placed.warnings])))
    return 0 if placed.to_dict()["placed"] else 1
