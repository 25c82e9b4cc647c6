"""``numabind run --gpus`` (bind for some GPUs, the command sees only them) and ``--dry-run`` of ``run`` and
``move``: the plan as a comment, ``export`` lines and the equivalent shell commands (``--json``: one object).
"""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING, Any, NamedTuple

from ..cpulist import format_cpulist
from .._base import printable
from ..plan import format_weights

if TYPE_CHECKING:  # pragma: no cover
    import argparse
    from collections.abc import Mapping, Sequence

    from ..devices import Gpu
    from ..plan import Plan
    from ..topology import Topology

__all__ = ["GpuLaunch", "gpu_launch", "move_lines", "plan_json", "render", "run_dry", "run_lines", "weights_note"]

#: Where the kernel keeps the weights of weighted interleave (one file per node).
WEIGHTS_DIR = "/sys/kernel/mm/mempolicy/weighted_interleave"


class GpuLaunch(NamedTuple):
    """What ``numabind run --gpus`` does: the plan, the GPUs (in the list's order), the variables it sets."""

    plan: Plan
    gpus: tuple[Gpu, ...]
    environ: dict[str, str]


def gpu_launch(args: argparse.Namespace, topo: Topology) -> GpuLaunch:
    """The plan and visibility of ``--gpus LIST`` on ``topo``; a PlanError for a list that names no visible GPU,
    mixes vendors, or a GPU that cannot be placed."""
    from .._fs import FsReader
    from ..devices import pick_gpus, scan_pci_gpus, visibility_environ
    from ..strategies import plan_for_gpus

    try:
        others = scan_pci_gpus(FsReader(topo.root))
    except (OSError, ValueError):   # only for naming another vendor's GPU in an error
        others = []
    chosen, named = pick_gpus(args.gpus, topo.gpus, others)
    within = bool(getattr(args, "within_affinity", False))
    plan = plan_for_gpus([g.index for g in chosen], topo, mode=args.mode or "node", policy=args.policy or "bind",
                         migrate=bool(args.migrate), strict=getattr(args, "strict", None), within_affinity=within)
    plan = plan.validate(topo, within_affinity=within)
    return GpuLaunch(plan, tuple(chosen), visibility_environ(chosen, os.environ, named))


def plan_json(plan: Plan) -> dict[str, Any]:
    """A plan as the dry run's JSON says it."""
    return {"cpus": None if plan.cpus is None else format_cpulist(plan.cpus), "mem_policy": plan.mem_policy,
            "mem_nodes": None if plan.mem_nodes is None else format_cpulist(plan.mem_nodes),
            "weights": format_weights(plan.weights) if plan.weights else None, "migrate": plan.migrate,
            "describe": plan.describe(), "text": plan.to_text(), "reason": plan.reason}


def run_lines(plan: Plan, command: Sequence[str], *, live: bool = True, affinity: frozenset[int] | None = None,
              balancing: bool = False, set_weights: bool = False) -> list[list[str]]:
    """The commands that do what ``numabind run`` does with ``plan`` (the last one runs ``command``): numactl,
    with ``--all`` when the CPUs leave the affinity (this process's when ``live``, else ``affinity``); weights
    written first with ``set_weights``; ``taskset -c`` for the ``default`` policy."""
    pre: list[list[str]] = []
    if plan.weights:
        if set_weights:
            pre = [["sh", "-c", f"echo {w} > {WEIGHTS_DIR}/node{n}"] for n, w in sorted(plan.weights.items())]
        plan = plan.replace(weights=None)
    if plan.mem_policy == "default":
        cpus = ["taskset", "-c", format_cpulist(plan.cpus)] if plan.cpus is not None else []
        return [*pre, [*cpus, *command]]
    argv = plan.to_numactl_argv()
    limit = frozenset(os.sched_getaffinity(0)) if live else affinity
    whole = ["--all"] if limit is not None and plan.cpus is not None and not plan.cpus <= limit else []
    if balancing:
        k = 1 if argv and argv[0].startswith("--physcpubind=") else 0
        argv.insert(k, "--balancing")
    return [*pre, ["numactl", *whole, *argv, "--", *command]]


def move_lines(plan: Plan, pid: int, memory_nodes: frozenset[int]) -> list[list[str]]:
    """``taskset -a -p -c`` and ``migratepages`` lines that move ``pid`` as ``numabind move`` does."""
    out: list[list[str]] = []
    if plan.cpus is not None:
        out.append(["taskset", "-a", "-p", "-c", format_cpulist(plan.cpus), str(pid)])
    if plan.mem_nodes:
        source = memory_nodes - plan.mem_nodes
        if source:
            out.append(["migratepages", str(pid), format_cpulist(source), format_cpulist(plan.mem_nodes)])
    return out


def render(plan: Plan, lines: Sequence[Sequence[str]], *, environ: Mapping[str, str] | None = None,
           gpus: Sequence[Gpu] = (), as_json: bool = False, extra: Mapping[str, Any] | None = None,
           notes: Sequence[str] = ()) -> str:
    """The dry run's text (a comment with the plan, ``export`` lines, the command lines) or JSON object."""
    import json

    environ = dict(environ or {})
    exports = [f"export {name}={shlex.quote(value)}" for name, value in environ.items()]
    text_lines = [shlex.join(argv) for argv in lines]
    if as_json:
        return json.dumps(dict(extra or {}, dry_run=True, plan=plan_json(plan), environ=environ, exports=exports,
                               gpus=[g.to_dict() for g in gpus], commands=[list(a) for a in lines],
                               lines=text_lines, notes=list(notes)), indent=2, sort_keys=True)
    out = [f"# plan: {plan.describe()}"]
    out += [f"# {g.describe()}" for g in gpus]
    out += [f"# {n}" for n in notes]
    return "\n".join(out + exports + text_lines)


def weights_note(plan: Plan, set_weights: bool) -> list[str]:
    """What the numactl line cannot say about the plan's weights."""
    if not plan.weights or set_weights:
        return []
    return [f"numactl -w interleaves by the system's weights ({WEIGHTS_DIR}); numabind checks they are "
            f"{format_weights(plan.weights)} (--set-weights writes them)"]


def run_dry(args: argparse.Namespace, plan: Plan, command: Sequence[str], launch: GpuLaunch | None,
            threads: Sequence[Any] = ()) -> int:
    """``numabind run --dry-run``: print what the run would do, the variables it would add or change, and
    ``--thread``'s shares (``threads``: :class:`numabind.named.Share`); on a replayed root, ``--all`` follows that
    machine's affinity. Exit 0."""
    from .._base import keep_binding_env

    root = getattr(args, "root", None) or os.environ.get("NUMABIND_FSROOT") or "/"
    before = dict(os.environ)
    env = dict(before, **(launch.environ if launch is not None else {}))
    keep_binding_env(env, say=False)
    added = {name: value for name, value in env.items() if before.get(name) != value}
    set_weights = bool(getattr(args, "set_weights", False))
    live = os.path.realpath(root) == "/" or bool(getattr(args, "bind_replayed_root", False))   # binds here
    affinity = None
    if not live:
        from ..topology import discover   # only a dry run on a replayed root reads that root again

        affinity = discover(root).affinity
    lines = run_lines(plan, command, live=live, affinity=affinity, balancing=bool(args.balancing),
                      set_weights=set_weights)
    from . import write_out   # the command's words as given, whatever the locale's encoding

    extra: dict[str, Any] = {"command": list(command)}
    notes = weights_note(plan, set_weights)
    if threads:    # not a numactl line: run stays the command's parent and places them as they are named
        extra["threads"] = [s.to_dict() for s in threads]
        notes += [f"threads named {printable(s.pattern)} ({s.spec}): CPUs {format_cpulist(s.cpus)}" for s in threads]
        notes.append("--thread: numabind run stays the command's parent and places each thread as it is named")
    return write_out(render(plan, lines, environ=added, gpus=launch.gpus if launch is not None else (),
                            as_json=bool(args.json), extra=extra, notes=notes) + "\n")
