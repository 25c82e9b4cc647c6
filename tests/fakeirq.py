"""Fake device interrupts, laid out as the Linux kernel lays them out, on a root that ``tests/fakeio.py`` or
``tests/fakegpu.py`` wrote:

* ``sys/bus/pci/devices/<addr>/msi_irqs/<N>`` (``msi`` or ``msix``) and the legacy ``irq`` file;
* ``proc/irq/<N>/{smp_affinity,smp_affinity_list,effective_affinity,effective_affinity_list}``;
* ``proc/interrupts`` (a ``CPU<n>`` header, per-CPU counts, the chip, the hardware irq and the action names);
* a managed interrupt's ``sys/kernel/debug/irq/irqs/<N>`` (its ``dstate`` holds ``IRQD_AFFINITY_MANAGED``);
* irqbalance: ``proc/<pid>/{comm,cmdline,environ}`` and ``etc/default/irqbalance``.

A plain file cannot refuse a write as the kernel does, so :class:`FakeKernel` stands in for the kernel's
``smp_affinity_list`` write (``monkeypatch.setattr(numabind.irq, "write_affinity", FakeKernel(root))``): EIO for a
managed interrupt, EINVAL for CPUs that are not online, and otherwise both lists rewritten, the effective one to the
first CPU asked for, as x86's vector allocation does.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from numabind.cpulist import format_cpulist, parse_cpulist

__all__ = ["FakeKernel", "add_irq", "add_irqbalance", "add_msi_irqs", "irq_box", "write_interrupts"]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _mask(cpus: frozenset[int]) -> str:
    """The kernel's hex mask: 32-bit groups, comma-separated (``smp_affinity``)."""
    value = sum(1 << c for c in cpus)
    groups = []
    while True:
        groups.append(f"{value & 0xFFFFFFFF:08x}")
        value >>= 32
        if not value:
            break
    return ",".join(reversed(groups))


def add_msi_irqs(root, address: str, numbers, *, kind: str = "msix", legacy: int = 0) -> None:
    """Interrupts ``numbers`` of PCI function ``address`` in its ``msi_irqs/`` (``kind``: msi or msix), and its
    legacy ``irq`` file (``legacy``; 0 is none, as the kernel writes for a function without INTx)."""
    base = Path(root) / "sys/bus/pci/devices" / address
    for n in numbers:
        _write(base / "msi_irqs" / str(n), f"{kind}\n")
    _write(base / "irq", f"{legacy}\n")


def add_irq(root, number: int, affinity: str, *, effective: str | None = None, managed: bool = False,
            old_kernel: bool = False) -> None:
    """``proc/irq/N`` with ``affinity`` (a cpulist) and ``effective`` (default its first CPU); ``old_kernel``
    leaves the effective files out (before Linux 4.13); ``managed`` writes debugfs' state of a managed one."""
    cpus = parse_cpulist(affinity)
    base = Path(root) / "proc/irq" / str(number)
    _write(base / "smp_affinity", _mask(cpus) + "\n")
    _write(base / "smp_affinity_list", format_cpulist(cpus) + "\n")
    if not old_kernel:
        eff = parse_cpulist(effective) if effective is not None else frozenset({min(cpus)})
        _write(base / "effective_affinity", _mask(eff) + "\n")
        _write(base / "effective_affinity_list", format_cpulist(eff) + "\n")
    state = "IRQD_AFFINITY_SET\n             IRQD_AFFINITY_MANAGED\n" if managed else "IRQD_AFFINITY_SET\n"
    _write(Path(root) / "sys/kernel/debug/irq/irqs" / str(number),
           f"handler:  handle_edge_irq\ndevice:   (null)\nstatus:   0x00004100\nistate:   0x00000000\n"
           f"ddepth:   0\nwdepth:   0\ndstate:   0x3640a200\n             {state}")


def write_interrupts(root, cpus, rows) -> None:
    """``proc/interrupts`` for CPUs ``cpus`` (online, in order) and ``rows``: ``(irq, {cpu: count}, chip, hwirq,
    actions)``; NMI and LOC lines follow, as a kernel writes them."""
    cpus = sorted(cpus)
    lines = ["      " + "".join(f"{'CPU' + str(c):>11}" for c in cpus)]
    for number, counts, chip, hwirq, actions in rows:
        values = "".join(f"{counts.get(c, 0):>11}" for c in cpus)
        lines.append(f"{number:>4}:{values}  {chip:<18}{hwirq:>12}  {actions}".rstrip())
    lines.append(" NMI:" + "".join(f"{0:>11}" for _ in cpus) + "   Non-maskable interrupts")
    lines.append(" LOC:" + "".join(f"{100:>11}" for _ in cpus) + "   Local timer interrupts")
    _write(Path(root) / "proc/interrupts", "\n".join(lines) + "\n")


def add_irqbalance(root, pid: int = 812, *, args=(), config: str | None = None,
                   config_path: str = "etc/default/irqbalance", environ: dict[str, str] | None = None) -> None:
    """A running irqbalance (``pid``, command line ``irqbalance --foreground ARGS``) and its ``config`` file."""
    base = Path(root) / "proc" / str(pid)
    _write(base / "comm", "irqbalance\n")
    _write(base / "cmdline", "\0".join(["/usr/sbin/irqbalance", "--foreground", *args]) + "\0")
    _write(base / "environ", "".join(f"{k}={v}\0" for k, v in (environ or {}).items()))
    if config is not None:
        _write(Path(root) / config_path, config)


class FakeKernel:
    """The kernel's side of a write to ``proc/irq/N/smp_affinity_list`` under ``root`` (see the module docstring);
    ``writes`` lists ``(irq, cpulist)`` of each write accepted."""

    def __init__(self, root, online: str = "0-7") -> None:
        self.root = Path(os.path.realpath(root))
        self.online = parse_cpulist(online)
        self.writes: list[tuple[int, str]] = []

    def __call__(self, path: str, cpus: frozenset[int]) -> None:
        base = Path(path).parent
        number = int(base.name)
        debug = self.root / "sys/kernel/debug/irq/irqs" / str(number)
        if debug.exists() and "AFFINITY_MANAGED" in debug.read_text():
            raise OSError(errno.EIO, os.strerror(errno.EIO), path)
        if not cpus & self.online:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), path)
        add_irq(self.root, number, format_cpulist(cpus & self.online),
                old_kernel=not (base / "effective_affinity_list").exists())
        self.writes.append((number, format_cpulist(cpus)))


#: :func:`irq_box`'s interrupts: device -> numbers.
BOX_IRQS = {"gpu0": (40, 41, 42, 43), "gpu1": (50, 51), "mlx5_0": (60, 61, 62), "eth2": (70,)}


def irq_box(root) -> dict[str, str]:
    """``tests/fakeio.py``'s mixed box (CPUs 0-3 node 0, 4-7 node 1; GPU 0 ``0000:03:00.0`` node 0, GPU 1 node 1,
    ``mlx5_0`` node 1, ``eth2`` node 0) with interrupts:

    * GPU 0: MSI-X 40-43. 40 and 41 on node 0; 42 may run on 4-7 (off node 0), 43 ran on CPU 5 before.
    * GPU 1: MSI 50-51 on node 1.
    * ``mlx5_0``: MSI-X 60-62, managed (spread one per CPU: 4, 5, 6-7).
    * ``eth2``: legacy INTx 70 only (no MSI), all CPUs, an old kernel's files (no effective affinity).

    No irqbalance: add it with :func:`add_irqbalance`. Returns the mixed box's addresses."""
    from tests.fakeio import mixed_box

    where = mixed_box(root)
    add_msi_irqs(root, where["gpu0"], BOX_IRQS["gpu0"])
    add_msi_irqs(root, where["gpu1"], BOX_IRQS["gpu1"], kind="msi", legacy=11)
    add_msi_irqs(root, where["mlx5_0"], BOX_IRQS["mlx5_0"])
    add_msi_irqs(root, where["eth2"], (), legacy=70)
    for n, aff in ((40, "0-3"), (41, "1"), (42, "4-7"), (43, "0-3")):
        add_irq(root, n, aff)
    for n in (50, 51):
        add_irq(root, n, "4-7")
    for n, aff in ((60, "4"), (61, "5"), (62, "6-7")):
        add_irq(root, n, aff, managed=True)
    add_irq(root, 70, "0-7", old_kernel=True)
    write_interrupts(root, range(8), [
        (40, {0: 1200}, "IR-PCI-MSIX-0000:03:00.0", "0-edge", "nvidia"),
        (41, {1: 33}, "IR-PCI-MSIX-0000:03:00.0", "1-edge", "nvidia"),
        (42, {4: 900}, "IR-PCI-MSIX-0000:03:00.0", "2-edge", "nvidia"),
        (43, {0: 7, 5: 80}, "IR-PCI-MSIX-0000:03:00.0", "3-edge", "nvidia"),
        (50, {4: 10}, "IR-PCI-MSI-0000:83:00.0", "0-edge", "nvidia"),
        (51, {}, "IR-PCI-MSI-0000:83:00.0", "1-edge", "nvidia"),
        (60, {4: 5}, "IR-PCI-MSIX-0000:81:00.0", "0-edge", "mlx5_async0@pci:0000:81:00.0"),
        (61, {5: 6}, "IR-PCI-MSIX-0000:81:00.0", "1-edge", "mlx5_comp0@pci:0000:81:00.0"),
        (62, {6: 7}, "IR-PCI-MSIX-0000:81:00.0", "2-edge", "mlx5_comp1@pci:0000:81:00.0"),
        (70, {2: 3}, "IO-APIC", "19-fasteoi", "eth2"),
    ])
    return where
