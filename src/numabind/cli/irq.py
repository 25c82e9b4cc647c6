"""``numabind irq [--gpu N | --nic DEV | --all] [--json]``: each device's interrupts, where each may run and where it
ran, flagged when off the device's node; ``--apply [--reserve N --gpu N] [--dry-run]`` moves them onto the device's
node (or the last N cores of the GPU's plan), ``--restore`` puts back what ``--apply`` changed (docs/irq.rst).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from .._base import printable
from ..cpulist import format_cpulist
from ..errors import NumabindError
from ._parser import VERBOSE_HELP
from .look import table

if TYPE_CHECKING:
    from ..irq import DeviceIrqs, Irq, IrqChange, Irqbalance

__all__ = ["DESCRIPTION", "add_parser", "cmd_irq"]

#: What ``irq --help`` says.
DESCRIPTION = ("Without an option: every GPU's and NIC's interrupts. Each line says where the interrupt may run "
               "(smp_affinity_list), where it runs (effective_affinity_list) and where it ran (its counts in "
               "/proc/interrupts), flagged OFF-NODE when it may run or runs off the device's node, ran-off-node "
               "when its counts show it ran there. --apply (root) moves them onto the device's node's CPUs, or with "
               "--reserve N --gpu G onto the last N cores of GPU G's plan; --restore puts back what --apply changed. "
               "Kernel-managed interrupts refuse (EIO) and are reported as managed. Exit status: 0 done, 1 an "
               "interrupt not moved or not root, 2 usage.")


def _count(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of cores")
    return int(text)


def _index(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a GPU index (0, 1, ...)")
    return int(text)


def add_parser(sub: Any) -> None:
    """Register ``irq`` on the CLI's subparsers."""
    s = sub.add_parser("irq", help="devices' interrupts: where they run, off-node ones flagged; move and restore them",
                       description=DESCRIPTION)
    which = s.add_mutually_exclusive_group()
    which.add_argument("--gpu", type=_index, metavar="N", help="GPU N's interrupts (its visible index)")
    which.add_argument("--nic", metavar="DEV", help="a NIC's interrupts: an RDMA device (mlx5_0) or an interface")
    which.add_argument("--all", action="store_true", help="every PCI device with interrupts")
    s.add_argument("--json", action="store_true", help="one JSON object: devices, irqbalance (and changes)")
    s.add_argument("--apply", action="store_true",
                   help="move the interrupts onto the device's node's CPUs (root; see --reserve, --dry-run)")
    s.add_argument("--reserve", type=_count, metavar="N",
                   help="with --apply --gpu G: onto the last N cores of GPU G's plan (the worker keeps the rest)")
    s.add_argument("--dry-run", action="store_true",
                   help="with --apply or --restore: print the echo CPUS > /proc/irq/N/smp_affinity_list lines only")
    s.add_argument("--restore", action="store_true", help="put back every interrupt --apply moved (root)")
    s.add_argument("--root", default=argparse.SUPPRESS, help=argparse.SUPPRESS)   # the global options, after irq
    s.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=VERBOSE_HELP)


def _check_usage(args: argparse.Namespace) -> None:
    if args.apply and args.restore:
        raise NumabindError("numabind irq: --apply and --restore go separately: give one")
    if args.reserve is not None and not (args.apply and args.gpu is not None):
        raise NumabindError("numabind irq: --reserve N goes with --apply --gpu G (the last N cores of GPU G's plan)")
    if args.dry_run and not (args.apply or args.restore):
        raise NumabindError("numabind irq: --dry-run goes with --apply or --restore")
    if args.restore and (args.gpu is not None or args.nic or args.all):
        raise NumabindError("numabind irq: --restore puts back every interrupt --apply moved; give no device with it")


def _may_write(args: argparse.Namespace, reader: Any) -> str | None:
    """Why this run may not write /proc/irq (None when it may)."""
    what = "--restore" if args.restore else "--apply"
    if not reader.is_live:
        return (f"numabind irq {what} changes this machine's interrupts, but --root {reader.origin} replays another "
                f"machine: drop --root, or add --dry-run to print the commands")
    if os.geteuid() != 0:
        return (f"numabind irq {what}: writing /proc/irq/N/smp_affinity_list needs root: run it as root (sudo "
                f"numabind irq {what} ...), or add --dry-run to print the commands")
    return None


def _ran(irq: Irq) -> str:
    return ",".join(f"{cpu}:{n}" for cpu, n in sorted(irq.counts.items()) if n) or "-"


def _device_lines(dev: DeviceIrqs) -> list[str]:
    node = "node unknown" if dev.numa_node is None else f"node {dev.numa_node} (CPUs {format_cpulist(dev.node_cpus)})"
    lines = [f"{dev.what}  {dev.address}  {node}"]
    if not dev.irqs:
        return lines + ["  no interrupts (no msi_irqs, legacy irq 0)"]
    rows = [["  IRQ", "kind", "may run", "runs", "ran (cpu:count)", "name", ""]]
    for irq in dev.irqs:
        flags = [w for w, on in (("OFF-NODE", dev.off_node(irq)), ("ran-off-node", dev.ran_off_node(irq)),
                                 ("managed", irq.managed)) if on]
        rows.append([f"  {irq.number}", irq.kind, "?" if irq.affinity is None else format_cpulist(irq.affinity),
                     "?" if irq.effective is None else format_cpulist(irq.effective), _ran(irq),
                     printable(irq.actions or irq.chip or "-"), " ".join(flags)])
    return lines + table(rows).splitlines()


def _balance_lines(balance: Irqbalance, bans: list[str]) -> list[str]:
    if not balance.running or not bans:
        return []
    pids = ", ".join(str(p) for p in balance.pids)
    return ([f"irqbalance runs (pid {pids}): it will move these interrupts back. Keep it off them: put these lines "
             f"in /etc/default/irqbalance (or /etc/sysconfig/irqbalance) and restart it:"]
            + [f"  {line}" for line in bans])


def _change_line(c: IrqChange) -> str:
    if c.status == "dry-run":
        return c.command
    head = f"IRQ {c.irq} ({printable(c.device)}): "
    was = "?" if c.was is None else format_cpulist(c.was)
    if c.status not in ("moved", "pending", "unchanged"):
        return head + f"{c.status}: {printable(c.reason)} (stays on {was})"
    verb = "already on" if c.status == "unchanged" else f"{was} ->"
    back = "?" if c.affinity is None else format_cpulist(c.affinity)
    eff = "?" if c.effective is None else format_cpulist(c.effective)
    pending = f" ({c.reason})" if c.status == "pending" else ""
    return head + f"{verb} {format_cpulist(c.asked)}; read back {back}, effective {eff}{pending}"


def _targets(args: argparse.Namespace, topo: Any, devices: Any) -> tuple[list[Any], list[str]]:
    """``(device, cpus)`` to apply, and a note for each device left out."""
    if args.reserve is not None:
        from ..irq import reserve_cpus
        from ..strategies import plan_for_gpu

        plan = plan_for_gpu(args.gpu, topology=topo)
        if plan.cpus is None:
            raise NumabindError(f"numabind irq --reserve: GPU {args.gpu}'s plan names no CPUs; give no --reserve")
        cpus = reserve_cpus(topo, plan.cpus, args.reserve)
        return [(dev, cpus) for dev in devices if dev.irqs], []
    out, notes = [], []
    for dev in devices:
        if not dev.irqs:
            continue
        if dev.numa_node is None or not dev.node_cpus:
            notes.append(f"{dev.what} {dev.address}: its node is unknown (numa_node -1) or has no CPUs; its "
                         f"interrupts are left where they are (give --reserve N --gpu G for a GPU)")
            continue
        out.append((dev, dev.node_cpus))
    return out, notes


def _apply(args: argparse.Namespace, reader: Any, topo: Any, devices: Any, balance: Any) -> int:
    from ..irq import apply_irqs, ban_lines, restore_irqs

    notes: list[str] = []
    if args.restore:
        changes = restore_irqs(root=reader, dry_run=args.dry_run)
    else:
        targets, notes = _targets(args, topo, devices)
        changes = apply_irqs(targets, root=reader, dry_run=args.dry_run)
    moved = [c for c in changes if c.status in ("moved", "pending", "unchanged", "dry-run")]
    # the reserved slice is kept free of every other interrupt too; a node's CPUs are not banned, only these IRQs
    reserved = frozenset().union(*(c.asked for c in moved)) if moved and args.reserve else frozenset()
    wanted = balance.running and moved and not args.restore
    bans = ban_lines(balance, reserved, [c.irq for c in moved]) if wanted else []
    failed = [c for c in changes if c.status == "failed"]
    if args.json:
        sys.stdout.write(json.dumps({"changes": [c.to_dict() for c in changes], "notes": notes,
                                     "irqbalance": balance.to_dict(), "ban_lines": bans},
                                    sort_keys=True, indent=2) + "\n")
    else:
        lines = [_change_line(c) for c in changes] + notes
        if not changes and not notes:
            lines.append("no interrupts to move")
        if any(c.status == "managed" for c in changes):
            lines.append("managed interrupts are placed by the kernel (their driver spreads them over the CPUs); "
                         "numabind leaves them, the others are moved")
        sys.stdout.write("\n".join(lines + _balance_lines(balance, bans)) + "\n")
    return 1 if failed else 0


def cmd_irq(args: argparse.Namespace) -> int:
    """Show the devices' interrupts, or apply / restore. Exit 0 when done, 1 when an interrupt was not moved."""
    _check_usage(args)
    from .._fs import FsReader
    from ..irq import device_irqs, read_irqbalance, select_devices
    from ..topology import discover_from

    reader = FsReader(getattr(args, "root", None))
    if (args.apply or args.restore) and not args.dry_run:
        why = _may_write(args, reader)
        if why:
            sys.stderr.write(f"numabind: error: {printable(why)}\n")
            return 1
    topo = discover_from(reader)
    devices = [] if args.restore else device_irqs(
        topo, select_devices(topo, reader, gpu=args.gpu, nic=args.nic, every=args.all), reader)
    balance = read_irqbalance(reader)
    if args.apply or args.restore:
        return _apply(args, reader, topo, devices, balance)
    if args.json:
        sys.stdout.write(json.dumps({"devices": [d.to_dict() for d in devices], "irqbalance": balance.to_dict()},
                                    sort_keys=True, indent=2) + "\n")
        return 0
    lines: list[str] = []
    for dev in devices:
        lines += _device_lines(dev) + [""]
    if not devices:
        lines.append("no devices: no GPU or NIC found (give --all for every PCI device with interrupts)")
    lines.append(f"irqbalance: running (pid {', '.join(map(str, balance.pids))})" if balance.running
                 else "irqbalance: not running")
    if balance.banned_cpus or balance.banned_irqs:
        lines.append(f"  it leaves alone CPUs {format_cpulist(balance.banned_cpus) or '-'} and IRQs "
                     f"{','.join(map(str, sorted(balance.banned_irqs))) or '-'} ({', '.join(balance.sources)})")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
