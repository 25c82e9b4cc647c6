"""``numabind show``: this process's binding, as ``numactl --show`` prints it (``--json``: the whole binding, every
thread and the weights); also numactl's ``-s`` (:mod:`numabind.cli.numactl`)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..backends import get_backend, interleave_next_node
from ..cpulist import format_cpulist
from ..errors import NumabindError
from ._parser import UsageError, global_options, print_json

if TYPE_CHECKING:  # pragma: no cover
    from ..verify import Binding

__all__ = ["add_parser", "binding_json", "cmd_show", "show_lines"]


def add_parser(sub: Any) -> None:
    """Register ``show`` on the CLI's subparsers."""
    sub.add_parser("show", parents=global_options(), help="this process's binding (like numactl --show)",
                   description="Like numactl --show: policy, preferred node, physcpubind, cpubind, nodebind, "
                               "membind, preferred; --json for the whole binding (every thread, weights).")


def binding_json(b: Binding) -> dict[str, Any]:
    """A binding as ``show --json`` and the first screen's ``--json`` say it (lists in cpulist form)."""
    return {"cpus": format_cpulist(b.cpus), "policy": b.mem_policy, "nodes": format_cpulist(b.mem_nodes),
            "mems_allowed": format_cpulist(b.mems_allowed), "backend": b.backend,
            "weights": {str(n): w for n, w in sorted(b.weights.items())},
            "threads": {str(tid): format_cpulist(c) for tid, c in sorted(b.threads.items())}}


def _mask(ids: Iterable[int]) -> str:
    """numactl's mask text: each id followed by a space."""
    return "".join(f"{i} " for i in sorted(ids))


def show_lines(b: Binding, node_cpus: dict[int, frozenset[int]], memory_nodes: frozenset[int],
               interleave_next: int | None = None) -> list[str]:
    """``numactl --show``'s lines for the binding ``b``, without numactl's glued lines and numbered policies
    (numabind prints the policy's name; tests/test_show_oracle.py)."""
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
    """Whether the calling thread's memory policy carries MPOL_F_NUMA_BALANCING; None when unreadable."""
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
        print_json(dict(binding_json(b), balancing=_balancing_on()))
        return 0
    machine = live.machine()
    memory = frozenset(n for n, node in machine.nodes.items() if node.has_memory)
    nxt = interleave_next_node() if b.mem_policy in ("interleave", "weighted-interleave") else None
    print("\n".join(show_lines(b, {n: node.cpus for n, node in machine.nodes.items()}, memory, nxt)))
    return 0
