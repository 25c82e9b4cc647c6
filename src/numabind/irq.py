"""Device interrupts: which a PCI device raises, where each may run and where it ran, and moving them onto the
device's node or a reserved slice of a worker's plan (``numabind irq``; docs/irq.rst).

Discovery reads through one :class:`~numabind._fs.FsReader` under the discovery root, so a fake tree or a gathered
machine answers like the live one: a function's ``msi_irqs/`` and legacy ``irq`` in sysfs, the names and per-CPU
counts of ``/proc/interrupts``, each interrupt's ``smp_affinity_list`` and ``effective_affinity_list``, and
irqbalance (a process named ``irqbalance``, its ``--banirq`` arguments, ``IRQBALANCE_BANNED_CPULIST`` or
``IRQBALANCE_BANNED_CPUS`` in ``/etc/default/irqbalance`` or ``/etc/sysconfig/irqbalance``).

Applying writes ``/proc/irq/N/smp_affinity_list`` under the root (``/`` is the kernel) and reads both lists back;
what it changed is kept in ``irq.json`` in numabind's runtime directory (:mod:`numabind.records`) for
:func:`restore_irqs`. A kernel-managed interrupt refuses any affinity (EIO): it is reported as managed, the rest go on.
"""

from __future__ import annotations

import dataclasses
import errno
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._base import getLogger
from ._fs import FsReader, RefusedFile, ascii_int, read_bounded, read_in_root
from .cpulist import format_cpulist, parse_cpulist
from .errors import NumabindError, PlanError

__all__ = ["DeviceIrqs", "Irq", "IrqChange", "Irqbalance", "RECORD_NAME", "apply_irqs", "ban_lines", "device_irqs",
           "interrupt_table", "irq_numbers", "read_irqbalance", "reserve_cpus", "restore_irqs", "select_devices",
           "write_affinity"]

log = getLogger(__name__)

_PCI = "sys/bus/pci/devices"
_IRQBALANCE_CONFIGS = ("etc/default/irqbalance", "etc/sysconfig/irqbalance")
#: The file in numabind's runtime directory that holds what ``irq --apply`` changed.
RECORD_NAME = "irq.json"
_RECORD_VERSION = 1
_RECORD_MAX = 1 << 20


# -- values ------------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Irq:
    """One interrupt of a device: its number, how it is signalled (``msi``, ``msix``, ``legacy``), its names in
    ``/proc/interrupts`` (``actions``: the drivers' names; ``chip``: the controller's), the CPUs it may run on
    (``affinity``, ``smp_affinity_list``) and does (``effective``, ``effective_affinity_list``; None when the kernel
    writes none), and how many times it ran on each CPU (``counts``). ``managed``: True when debugfs says the kernel
    manages its affinity, None when unknown."""

    number: int
    kind: str
    actions: str = ""
    chip: str = ""
    affinity: frozenset[int] | None = None
    effective: frozenset[int] | None = None
    counts: Mapping[int, int] = dataclasses.field(default_factory=dict, compare=False, hash=False)
    managed: bool | None = None

    @property
    def ran_on(self) -> frozenset[int]:
        """The CPUs it ran on at least once."""
        return frozenset(cpu for cpu, n in self.counts.items() if n)

    @property
    def where(self) -> frozenset[int] | None:
        """Where it runs: the effective affinity, else the affinity."""
        return self.effective if self.effective is not None else self.affinity

    def to_dict(self) -> dict[str, Any]:
        return {"irq": self.number, "kind": self.kind, "actions": self.actions, "chip": self.chip,
                "affinity": _fmt(self.affinity), "effective": _fmt(self.effective),
                "counts": {str(c): n for c, n in sorted(self.counts.items()) if n}, "total": sum(self.counts.values()),
                "ran_on": format_cpulist(self.ran_on), "managed": self.managed}


@dataclasses.dataclass(frozen=True)
class DeviceIrqs:
    """A PCI function's interrupts, with its node and that node's CPUs (``what``: ``GPU 0``, ``eth0``, ``pci``)."""

    address: str
    what: str
    numa_node: int | None
    node_cpus: frozenset[int]
    irqs: tuple[Irq, ...]

    def off_node(self, irq: Irq) -> bool:
        """Whether ``irq`` may run or runs off the device's node (False when the node is unknown)."""
        if self.numa_node is None or not self.node_cpus:
            return False
        return bool(irq.affinity is not None and irq.affinity - self.node_cpus
                    or irq.effective is not None and irq.effective - self.node_cpus)

    def ran_off_node(self, irq: Irq) -> bool:
        """Whether ``irq`` ran off the device's node since boot (its counts: a moved interrupt keeps its past)."""
        return bool(self.numa_node is not None and self.node_cpus and irq.ran_on - self.node_cpus)

    def to_dict(self) -> dict[str, Any]:
        return {"pci_address": self.address, "device": self.what, "numa_node": self.numa_node,
                "node_cpus": format_cpulist(self.node_cpus),
                "irqs": [{**irq.to_dict(), "off_node": self.off_node(irq), "ran_off_node": self.ran_off_node(irq)}
                         for irq in self.irqs]}


@dataclasses.dataclass(frozen=True)
class Irqbalance:
    """Whether irqbalance runs (its pids), and what it is told to leave alone: CPUs (``banned_cpus``) and
    interrupts (``banned_irqs``), with where each was read (``sources``)."""

    pids: tuple[int, ...] = ()
    banned_cpus: frozenset[int] = frozenset()
    banned_irqs: frozenset[int] = frozenset()
    sources: tuple[str, ...] = ()

    @property
    def running(self) -> bool:
        return bool(self.pids)

    def to_dict(self) -> dict[str, Any]:
        return {"running": self.running, "pids": list(self.pids), "banned_cpus": format_cpulist(self.banned_cpus),
                "banned_irqs": sorted(self.banned_irqs), "sources": list(self.sources)}


@dataclasses.dataclass(frozen=True)
class IrqChange:
    """What applying (or restoring) did to one interrupt: ``status`` is ``"moved"``, ``"pending"`` (set and read
    back, but its effective CPU is still the old one: the kernel moves an interrupt when it next fires),
    ``"unchanged"`` (already there), ``"managed"`` (the kernel refused with EIO), ``"failed"`` (another error,
    ``reason`` says) or ``"dry-run"``; ``was``/``asked`` the lists before and asked for, ``affinity``/``effective``
    read back after."""

    irq: int
    device: str
    status: str
    was: frozenset[int] | None
    asked: frozenset[int]
    affinity: frozenset[int] | None = None
    effective: frozenset[int] | None = None
    reason: str = ""

    @property
    def command(self) -> str:
        """The shell line that does the same: ``echo 4-7 > /proc/irq/N/smp_affinity_list``."""
        return f"echo {format_cpulist(self.asked)} > /proc/irq/{self.irq}/smp_affinity_list"

    def to_dict(self) -> dict[str, Any]:
        return {"irq": self.irq, "device": self.device, "status": self.status, "was": _fmt(self.was),
                "asked": format_cpulist(self.asked), "affinity": _fmt(self.affinity),
                "effective": _fmt(self.effective), "reason": self.reason, "command": self.command}


def _fmt(cpus: frozenset[int] | None) -> str | None:
    return None if cpus is None else format_cpulist(cpus)


# -- discovery ---------------------------------------------------------------------------------------------------

def _cpus_file(reader: FsReader, rel: str) -> frozenset[int] | None:
    text = reader.read_strip(rel)
    if text is None:
        return None
    try:
        return parse_cpulist(text) if text else frozenset()
    except PlanError:
        log.warning("%s is not a CPU list (%r); read as unknown", reader.path(rel), text[:40])
        return None


def irq_numbers(reader: FsReader, address: str) -> list[tuple[int, str]]:
    """``(irq, kind)`` of PCI function ``address``: its ``msi_irqs/`` (``msi``/``msix``), else its legacy ``irq``
    (``legacy``; 0 is none). A legacy line beside MSI vectors is left out: it is unused, and often shared."""
    base = f"{_PCI}/{address}"
    found = []
    for name in reader.listdir(f"{base}/msi_irqs"):
        number = ascii_int(name, max_digits=9)
        if number is not None:
            mode = (reader.read_strip(f"{base}/msi_irqs/{name}") or "msi").lower()
            found.append((number, "msix" if mode == "msix" else "msi"))
    if not found:
        legacy = ascii_int(reader.read_strip(f"{base}/irq") or "", max_digits=9)
        if legacy:
            found.append((legacy, "legacy"))
    return sorted(found)


def interrupt_table(reader: FsReader) -> dict[int, tuple[dict[int, int], str, str]]:
    """``/proc/interrupts`` as ``{irq: ({cpu: count}, chip, actions)}`` (the header names each column's CPU;
    lines that are not numbered interrupts, such as ``NMI``, are left out)."""
    text = reader.read("proc/interrupts") or ""
    lines = text.splitlines()
    if not lines:
        return {}
    cpus = [ascii_int(word[3:]) for word in lines[0].split() if word.startswith("CPU")]
    if any(c is None for c in cpus):
        raise NumabindError(f"malformed {reader.path('proc/interrupts')}: its header {lines[0][:80]!r} does not "
                            f"name CPUs as CPU<N>")
    out: dict[int, tuple[dict[int, int], str, str]] = {}
    for line in lines[1:]:
        head, sep, rest = line.partition(":")
        number = ascii_int(head, max_digits=9)
        if not sep or number is None:
            continue
        words = rest.split()
        counts: dict[int, int] = {}
        for cpu, word in zip(cpus, words[:len(cpus)]):
            value = ascii_int(word)
            if value is None or cpu is None:
                break
            counts[cpu] = value
        tail = words[len(counts):]
        chip = tail[0] if tail else ""
        names = tail[2:] if len(tail) > 1 and tail[1][:1].isdigit() else tail[1:]
        out[number] = (counts, chip, " ".join(names))
    return out


def _managed(reader: FsReader, number: int) -> bool | None:
    """Whether debugfs (``sys/kernel/debug/irq/irqs/N``, root only) lists the interrupt as kernel-managed."""
    text = reader.read(f"sys/kernel/debug/irq/irqs/{number}")
    if text is None:
        return None
    return "AFFINITY_MANAGED" in text or "IRQD_MANAGED" in text


def read_irq(reader: FsReader, number: int, kind: str,
             table: Mapping[int, tuple[dict[int, int], str, str]]) -> Irq:
    """One interrupt, from ``/proc/irq/N`` and ``table`` (:func:`interrupt_table`)."""
    counts, chip, actions = table.get(number, ({}, "", ""))
    return Irq(number=number, kind=kind, actions=actions, chip=chip,
               affinity=_cpus_file(reader, f"proc/irq/{number}/smp_affinity_list"),
               effective=_cpus_file(reader, f"proc/irq/{number}/effective_affinity_list"),
               counts=counts, managed=_managed(reader, number))


def _node_cpus(topology: Any, node: int | None) -> frozenset[int]:
    found = topology.nodes.get(node) if node is not None else None
    return frozenset(found.cpus) if found is not None else frozenset()


def device_irqs(topology: Any, devices: Iterable[tuple[str, str, int | None]],
                root: str | os.PathLike[str] | FsReader | None = None) -> tuple[DeviceIrqs, ...]:
    """The interrupts of each ``(pci address, what, numa node)`` of ``devices``, read under ``root``."""
    reader = root if isinstance(root, FsReader) else FsReader(root)
    table = interrupt_table(reader)
    out = []
    for address, what, node in devices:
        irqs = tuple(read_irq(reader, n, kind, table) for n, kind in irq_numbers(reader, address))
        out.append(DeviceIrqs(address=address, what=what, numa_node=node, node_cpus=_node_cpus(topology, node),
                              irqs=irqs))
    return tuple(out)


def select_devices(topology: Any, root: str | os.PathLike[str] | FsReader | None = None, *,
                   gpu: int | None = None, nic: str | None = None,
                   every: bool = False) -> list[tuple[str, str, int | None]]:
    """``(pci address, what, numa node)`` of the devices asked for: GPU ``gpu`` (its visible index), the NIC named
    ``nic`` (an RDMA device or a network interface), every PCI function with interrupts (``every``: ``what`` is its
    class, such as ``NVMExp``, where it is no GPU or NIC), or by default
    every GPU and NIC. PlanError naming the choices when the one asked for is not there."""
    from .iodevices import interface_functions, pci_class_name, scan_nics, scan_pci   # read only when asked

    reader = root if isinstance(root, FsReader) else FsReader(root)
    gpus = [(g.pci_address, f"GPU {g.index}", g.numa_node) for g in topology.gpus]
    if gpu is not None:
        found = [d for d, g in zip(gpus, topology.gpus) if g.index == gpu]
        if not found:
            have = ", ".join(str(g.index) for g in topology.gpus) or "none"
            raise PlanError(f"--gpu {gpu}: no such GPU (visible GPUs: {have}); give one of them, or --all")
        return found
    nics = [(n.address, n.name, n.numa_node) for n in scan_nics(reader)]
    if nic is not None:
        found = [d for d, n in zip(nics, scan_nics(reader)) if nic in (n.name, *n.netdevs)]
        if not found:
            nodes = {d.address: d.numa_node for d in scan_pci(reader)}
            found = [(a, nic, nodes.get(a)) for a in interface_functions(reader, nic)]
        if not found:
            have = ", ".join(sorted({name for n in scan_nics(reader) for name in (n.name, *n.netdevs)})) or "none"
            raise PlanError(f"--nic {nic}: no network or RDMA device of that name on a PCI function (these are: "
                            f"{have}); give one of them")
        return found
    if every:
        named = {a: w for a, w, _ in gpus + nics}
        return [(d.address, named.get(d.address, pci_class_name(d.pci_class)), d.numa_node) for d in scan_pci(reader)
                if irq_numbers(reader, d.address)]
    return list(dict.fromkeys(gpus + nics))


# -- irqbalance --------------------------------------------------------------------------------------------------

def _raw(reader: FsReader, rel: str, cap: int = 1 << 16) -> str | None:
    """The text of a NUL-separated file (``cmdline``, ``environ``) under the root, NULs kept; None when unreadable."""
    if reader.xml is not None:
        return None
    try:
        data = (read_bounded(reader.path(rel), cap, prefix=True) if reader.is_live
                else read_in_root(reader.root, rel, cap, prefix=True))
    except (OSError, ValueError, RefusedFile):
        return None
    return data.decode("utf-8", errors="replace")


def _irqbalance_pids(reader: FsReader) -> list[int]:
    pids = []
    for name in reader.listdir("proc"):
        pid = ascii_int(name, max_digits=10)
        if pid is not None and (reader.read_strip(f"proc/{pid}/comm") or "") == "irqbalance":
            pids.append(pid)
    return sorted(pids)


def _banned_irqs(words: Sequence[str]) -> set[int]:
    """The interrupts of ``--banirq=N``, ``--banirq N``, ``-i N`` and ``-iN`` in ``words``."""
    found: set[int] = set()
    for i, word in enumerate(words):
        value: str | None = None
        if word.startswith("--banirq="):
            value = word[len("--banirq="):]
        elif word in ("--banirq", "-i") and i + 1 < len(words):
            value = words[i + 1]
        elif word.startswith("-i") and len(word) > 2:
            value = word[2:]
        number = ascii_int(value or "", max_digits=9)
        if number is not None:
            found.add(number)
    return found


def _mask_cpus(text: str) -> frozenset[int]:
    """A kernel CPU mask (``ff,00000000``: comma-separated 32-bit hex groups) as CPU ids."""
    digits = text.replace(",", "").strip().lower().removeprefix("0x")
    if not digits or any(c not in "0123456789abcdef" for c in digits):
        raise PlanError(f"{text!r} is not a CPU mask (hexadecimal groups separated by commas, e.g. ff,00000000)")
    value = int(digits, 16)
    return frozenset(i for i in range(value.bit_length()) if value >> i & 1)


def _environ(text: str) -> dict[str, str]:
    """A ``/proc/PID/environ`` (NUL-separated ``KEY=VALUE``) as a dict."""
    out: dict[str, str] = {}
    for item in text.split("\0"):
        key, sep, value = item.partition("=")
        if sep:
            out[key] = value
    return out


def _config_values(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines of a shell-style config file, quotes taken off, comments skipped."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.removeprefix("export ").partition("=")
        if sep:
            out[key.strip()] = value.strip().strip("\"'")
    return out


def read_irqbalance(root: str | os.PathLike[str] | FsReader | None = None) -> Irqbalance:
    """Whether irqbalance runs under ``root`` and what its configuration, arguments and (when readable) environment
    ban."""
    reader = root if isinstance(root, FsReader) else FsReader(root)
    pids = _irqbalance_pids(reader)
    cpus: set[int] = set()
    irqs: set[int] = set()
    sources: list[str] = []
    settings: list[tuple[str, dict[str, str]]] = []
    for rel in _IRQBALANCE_CONFIGS:
        text = reader.read(rel)
        if text is not None:
            settings.append(("/" + rel, _config_values(text)))
    for pid in pids:
        environ = _raw(reader, f"proc/{pid}/environ")
        if environ:
            settings.append((f"/proc/{pid}/environ", _environ(environ)))
        cmdline = (_raw(reader, f"proc/{pid}/cmdline") or "").split("\0")
        if _banned_irqs(cmdline):
            irqs |= _banned_irqs(cmdline)
            settings.append((f"/proc/{pid}/cmdline", {}))
    for where, values in settings:
        try:
            if values.get("IRQBALANCE_BANNED_CPULIST"):
                cpus |= parse_cpulist(values["IRQBALANCE_BANNED_CPULIST"])
            elif values.get("IRQBALANCE_BANNED_CPUS"):
                cpus |= _mask_cpus(values["IRQBALANCE_BANNED_CPUS"])
        except PlanError as e:
            log.warning("%s: irqbalance's banned CPUs do not parse (%s); left out", where, e)
        banned = _banned_irqs(values.get("IRQBALANCE_ARGS", "").split() + values.get("OPTIONS", "").split())
        irqs |= banned
        if banned or where.endswith("cmdline") or set(values) & {"IRQBALANCE_BANNED_CPULIST", "IRQBALANCE_BANNED_CPUS"}:
            sources.append(where)
    return Irqbalance(pids=tuple(pids), banned_cpus=frozenset(cpus), banned_irqs=frozenset(irqs),
                      sources=tuple(dict.fromkeys(sources)))


def ban_lines(balance: Irqbalance, cpus: Iterable[int], irqs: Iterable[int]) -> list[str]:
    """The lines that keep irqbalance off ``cpus`` and ``irqs`` (what it already bans kept): the
    ``IRQBALANCE_BANNED_CPULIST=`` line for its configuration file and the ``--banirq`` arguments."""
    banned = balance.banned_cpus | frozenset(cpus)
    numbers = sorted(balance.banned_irqs | frozenset(irqs))
    lines = []
    if banned:
        lines.append(f"IRQBALANCE_BANNED_CPULIST={format_cpulist(banned)}")
    if numbers:
        lines.append('IRQBALANCE_ARGS="' + " ".join(f"--banirq={n}" for n in numbers) + '"')
    return lines


# -- targets -----------------------------------------------------------------------------------------------------

def reserve_cpus(topology: Any, cpus: Iterable[int], cores: int) -> frozenset[int]:
    """The last ``cores`` whole cores of ``cpus`` (a core: a CPU and its hyperthread siblings inside ``cpus``);
    PlanError when ``cpus`` holds fewer."""
    pool = frozenset(cpus)
    groups: dict[frozenset[int], None] = {}
    for cpu in sorted(pool):
        info = topology.cpus.get(cpu)
        siblings = frozenset(info.siblings) & pool if info is not None and info.siblings else frozenset({cpu})
        groups[siblings or frozenset({cpu})] = None
    ordered = sorted(groups, key=min)
    if cores <= 0 or cores > len(ordered):
        raise PlanError(f"--reserve {cores}: the plan's CPUs {format_cpulist(pool)} hold {len(ordered)} core(s); "
                        f"give a number from 1 to {len(ordered)}")
    return frozenset().union(*ordered[-cores:])


# -- writing -----------------------------------------------------------------------------------------------------

def write_affinity(path: str, cpus: frozenset[int]) -> None:
    """Write ``cpus`` to the ``smp_affinity_list`` file ``path`` (OSError as the kernel gives it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        os.write(fd, (format_cpulist(cpus) + "\n").encode())
    finally:
        os.close(fd)


def _refusal(number: int, exc: OSError, cpus: frozenset[int]) -> tuple[str, str]:
    if exc.errno == errno.EIO:
        return "managed", (f"the kernel manages IRQ {number}'s affinity (EIO on write: a managed interrupt, spread "
                           f"by its driver over the CPUs and moved only by the kernel); leave it, or change the "
                           f"driver's queue count")
    if exc.errno in (errno.EPERM, errno.EACCES):
        return "failed", f"writing /proc/irq/{number}/smp_affinity_list needs root ({exc.strerror}): run as root"
    if exc.errno == errno.EINVAL:
        return "failed", (f"the kernel refused CPUs {format_cpulist(cpus)} for IRQ {number} (EINVAL: offline CPUs, "
                          f"or none its controller can reach); give online CPUs")
    return "failed", f"writing /proc/irq/{number}/smp_affinity_list failed: {exc.strerror or exc}"


def _set_one(reader: FsReader, number: int, device: str, cpus: frozenset[int], dry_run: bool) -> IrqChange:
    rel = f"proc/irq/{number}/smp_affinity_list"
    was = _cpus_file(reader, rel)
    if dry_run:
        return IrqChange(irq=number, device=device, status="dry-run", was=was, asked=cpus)
    if was == cpus:
        return IrqChange(irq=number, device=device, status="unchanged", was=was, asked=cpus, affinity=was,
                         effective=_cpus_file(reader, f"proc/irq/{number}/effective_affinity_list"))
    try:
        write_affinity(reader.path(rel), cpus)
    except OSError as e:
        status, reason = _refusal(number, e, cpus)
        return IrqChange(irq=number, device=device, status=status, was=was, asked=cpus, affinity=was, reason=reason)
    after = _cpus_file(reader, rel)
    effective = _cpus_file(reader, f"proc/irq/{number}/effective_affinity_list")
    status, reason = "moved", ""
    if after is not None and after != cpus:
        status, reason = "failed", f"read back {format_cpulist(after)}, not {format_cpulist(cpus)}"
    elif effective is not None and not effective <= cpus:     # x86 moves a quiet interrupt when it next fires
        status, reason = "pending", (f"effective CPU still {format_cpulist(effective)}: the kernel moves it when the "
                                     f"interrupt next fires")
    log.info("IRQ %d (%s): %s -> %s, effective %s", number, device, _fmt(was), format_cpulist(cpus), _fmt(effective))
    return IrqChange(irq=number, device=device, status=status, was=was, asked=cpus, affinity=after,
                     effective=effective, reason=reason)


# -- the record --------------------------------------------------------------------------------------------------

def _boot_id(reader: FsReader) -> str:
    return reader.read_strip("proc/sys/kernel/random/boot_id") or ""


def _open_dir(record_dir: str | None) -> int:
    from . import records   # the record is read or written only when applying or restoring

    if record_dir is None:
        return records.open_runtime_dir()[1]
    return records.open_private_dir(record_dir, os.geteuid())


def _load(fd: int) -> dict[str, Any]:
    from . import records

    try:
        data = records.read_private_file(fd, RECORD_NAME, os.geteuid(), _RECORD_MAX)
    except records.UnsafeFileError as e:
        raise NumabindError(f"numabind irq: the record {RECORD_NAME} is not one numabind wrote ({e.strerror}: a "
                            f"link, another user's file or too large); remove it and set the interrupts by "
                            f"hand") from None
    if data is None:
        return {}
    try:
        rec = records.load_json(data, depth=4)
    except ValueError as e:
        raise NumabindError(f"numabind irq: the record {RECORD_NAME} is not one numabind wrote ({e}); remove it "
                            f"and set the interrupts by hand") from None
    if not isinstance(rec, dict) or rec.get("numabind_irq_record") != _RECORD_VERSION or not isinstance(
            rec.get("irqs"), dict):
        raise NumabindError(f"numabind irq: the record {RECORD_NAME} is not one this numabind wrote; remove it")
    return rec


def _save(fd: int, boot_id: str, irqs: Mapping[str, Any]) -> None:
    import json

    from . import records

    if not irqs:
        try:
            os.unlink(RECORD_NAME, dir_fd=fd)
        except FileNotFoundError:
            pass
        return
    data = json.dumps({"numabind_irq_record": _RECORD_VERSION, "boot_id": boot_id, "irqs": dict(irqs)}, indent=1)
    records.write_private_file(fd, RECORD_NAME, data.encode(), "irq")


# -- apply and restore -------------------------------------------------------------------------------------------

def apply_irqs(targets: Sequence[tuple[DeviceIrqs, frozenset[int]]], *,
               root: str | os.PathLike[str] | FsReader | None = None, dry_run: bool = False,
               record_dir: str | None = None) -> list[IrqChange]:
    """Move each device's interrupts onto its CPUs (``targets``: ``(device, cpus)``) by writing
    ``proc/irq/N/smp_affinity_list`` under ``root`` and reading it back with ``effective_affinity_list``; what
    changed is recorded (in ``record_dir``, default numabind's runtime directory) so :func:`restore_irqs` puts it
    back. A managed interrupt (EIO) or another refusal is reported in its :class:`IrqChange`, never raised."""
    reader = root if isinstance(root, FsReader) else FsReader(root)
    changes = [_set_one(reader, irq.number, dev.what, cpus, dry_run)
               for dev, cpus in targets for irq in dev.irqs]
    moved = [c for c in changes if c.status in ("moved", "pending") and c.was is not None]
    if moved and not dry_run:
        try:
            _record(reader, moved, record_dir)
        except (OSError, NumabindError) as e:   # NumabindError: a record numabind did not write is in the way
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            back = "; ".join(f"echo {format_cpulist(c.was or frozenset())} > /proc/irq/{c.irq}/smp_affinity_list"
                             for c in moved)
            raise NumabindError(f"numabind irq: interrupts {', '.join(str(c.irq) for c in moved)} were moved, but "
                                f"what they had before could not be recorded ({why}), so --restore will "
                                f"not know it; put them back by hand: {back}") from None
    return changes


def _record(reader: FsReader, moved: Sequence[IrqChange], record_dir: str | None) -> None:
    """Add ``moved`` to the record (OSError when its directory or file cannot be used)."""
    if moved:
        fd = _open_dir(record_dir)
        try:
            rec = _load(fd)
            boot = _boot_id(reader)
            kept = rec.get("irqs", {}) if rec.get("boot_id", boot) == boot else {}
            kept = {k: v for k, v in kept.items() if isinstance(v, dict)}   # an entry that is no object is unusable
            for c in moved:   # a second apply keeps the first one's "was": restore goes back to before numabind
                kept.setdefault(str(c.irq), {"was": format_cpulist(c.was or frozenset()), "device": c.device})
                kept[str(c.irq)]["set"] = format_cpulist(c.asked)
            _save(fd, boot, kept)
        finally:
            os.close(fd)


def _record_order(item: tuple[str, Any]) -> int:
    """A record entry's interrupt number, for sorting (-1 for a key that is none)."""
    number = ascii_int(item[0], max_digits=9)
    return -1 if number is None else number


def restore_irqs(*, root: str | os.PathLike[str] | FsReader | None = None, dry_run: bool = False,
                 record_dir: str | None = None) -> list[IrqChange]:
    """Put back every interrupt :func:`apply_irqs` recorded, read back; NumabindError when there is no record or it
    is from another boot. Entries restored (or gone) leave the record; those that failed stay in it."""
    reader = root if isinstance(root, FsReader) else FsReader(root)
    fd = _open_dir(record_dir)
    try:
        rec = _load(fd)
        if not rec or not rec["irqs"]:
            raise NumabindError("numabind irq --restore: numabind recorded no interrupt it moved (run "
                                "numabind irq --apply first, as the same user)")
        boot = _boot_id(reader)
        if rec.get("boot_id") and boot and rec["boot_id"] != boot:
            _save(fd, boot, {})
            raise NumabindError("numabind irq --restore: the record is from another boot; the interrupts are as "
                                "this boot set them, nothing to restore (the stale record is removed)")
        changes = []
        left: dict[str, Any] = {}
        for key, entry in sorted(rec["irqs"].items(), key=_record_order):
            number = ascii_int(key, max_digits=9)
            try:
                was = parse_cpulist(str(entry.get("was", "")))
            except (PlanError, AttributeError):
                continue
            if number is None or not was:
                continue
            if reader.read_strip(f"proc/irq/{number}/smp_affinity_list") is None:
                continue      # the interrupt is gone (the device was removed, the driver unloaded)
            change = _set_one(reader, number, str(entry.get("device", "")), was, dry_run)
            if change.status not in ("moved", "pending", "unchanged"):
                left[key] = entry
            changes.append(change)
        if not dry_run:
            _save(fd, boot, left)
        return changes
    finally:
        os.close(fd)
