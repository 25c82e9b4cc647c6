"""``sys/devices/system/cpu`` of a fake machine (the online, possible and offline lists, each CPU's
``online``, its node link and ``topology/``) and ``proc/cpuinfo`` in the formats of x86, POWER, arm64 and ia64."""

from __future__ import annotations

from numabind.cpulist import format_cpulist

from .masks import CPU, kernel_mask

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .machine import FakeMachine, Quirks


def mask_and_list(q: Quirks, out: dict, base: str, name: str, ids: frozenset, nbits: int,
                  list_name: str | None = None) -> None:
    """A mask file ``name`` and its list form (``name_list`` unless given), as the quirks have them."""
    if q.masks:
        out[f"{base}/{name}"] = kernel_mask(ids, nbits) + "\n"
    if q.lists:
        out[f"{base}/{list_name or name + '_list'}"] = format_cpulist(ids) + "\n"


def nr_cpu_ids(m: FakeMachine) -> int:
    """The kernel's nr_cpu_ids: the width of every CPU mask it prints."""
    return max(m.possible() | m.online() | {0}) + 1


def cpu_files(m: FakeMachine, out: dict, links: dict) -> None:
    q = m.quirks
    online, possible = m.online(), m.possible()
    nbits = nr_cpu_ids(m)
    if q.cpu_online_file:
        out[f"{CPU}/online"] = format_cpulist(online) + "\n"
    out[f"{CPU}/possible"] = format_cpulist(possible) + "\n"
    out[f"{CPU}/present"] = format_cpulist(possible) + "\n"
    out[f"{CPU}/offline"] = format_cpulist(possible - online) + "\n"
    out[f"{CPU}/kernel_max"] = "8191\n"
    node_of = {c: n.id for n in m.nodes.values() for c in n.cpus}
    dirs = set(m.node_dirs())
    groups: dict[tuple, set] = {}
    for cpu, spec in ((c, m.spec(c)) for c in m.topology if c in online):
        groups.setdefault(("pkg", spec.package), set()).add(cpu)
        groups.setdefault(("die", spec.package, spec.die), set()).add(cpu)
        cl = spec.cluster if spec.cluster is not None else spec.core
        groups.setdefault(("cl", spec.package, spec.die, cl), set()).add(cpu)
    for cpu in sorted(possible):
        base = f"{CPU}/cpu{cpu}"
        if cpu != 0:
            out[f"{base}/online"] = "1\n" if cpu in online else "0\n"
        elif q.cpu0_online == "empty":
            out[f"{base}/online"] = ""
        elif q.cpu0_online == "file":
            out[f"{base}/online"] = "1\n" if cpu in online else "0\n"
        if cpu not in online:
            continue  # the kernel removes topology/ and cache/ of offline CPUs
        nid = node_of.get(cpu)
        if q.cpu_node_links and nid is not None and nid in dirs:
            links[f"{base}/node{nid}"] = f"../../node/node{nid}"
        if cpu in m.topology:
            spec = m.spec(cpu)
            sibs = m.siblings(cpu)
            pkg = frozenset(groups[("pkg", spec.package)])
            die = frozenset(groups[("die", spec.package, spec.die)])
            cl = spec.cluster if spec.cluster is not None else spec.core
            cluster = frozenset(groups[("cl", spec.package, spec.die, cl)])
            t = f"{base}/topology"
            out[f"{t}/physical_package_id"] = f"{spec.package}\n"
            out[f"{t}/core_id"] = f"{spec.core}\n"
            mask_and_list(q, out, t, "thread_siblings", sibs, nbits)
            mask_and_list(q, out, t, "core_siblings", pkg, nbits)
            if q.new_names:
                out[f"{t}/die_id"] = f"{spec.die}\n"
                out[f"{t}/cluster_id"] = f"{cl}\n"
                mask_and_list(q, out, t, "core_cpus", sibs, nbits)
                mask_and_list(q, out, t, "package_cpus", pkg, nbits)
                mask_and_list(q, out, t, "die_cpus", die, nbits)
                mask_and_list(q, out, t, "cluster_cpus", cluster, nbits)


def cpuinfo(m: FakeMachine) -> str:
    kind = m.quirks.cpuinfo
    blocks = []
    for n in sorted(m.online()):
        if kind == "x86":
            s = m.cpu_specs.get(n)
            blocks.append(
                f"processor\t: {n}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n"
                f"model\t\t: 143\nmodel name\t: {m.model_name}\nstepping\t: 8\n"
                f"physical id\t: {s.package if s else 0}\ncore id\t\t: {s.core if s else n}\n\n")
        elif kind == "power":
            blocks.append(f"processor\t: {n}\ncpu\t\t: {m.model_name}\n"
                          f"clock\t\t: 3800.000000MHz\nrevision\t: 2.3 (pvr 004e 1203)\n\n")
        elif kind == "arm64":
            implementer, variant, part, revision = m.arm_cpu
            blocks.append(f"processor\t: {n}\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\n"
                          f"CPU implementer\t: 0x{implementer:02x}\nCPU architecture: 8\n"
                          f"CPU variant\t: 0x{variant:x}\nCPU part\t: 0x{part:03x}\n"
                          f"CPU revision\t: {revision}\n\n")
        elif kind == "ia64":
            blocks.append(f"processor  : {n}\nvendor     : GenuineIntel\nfamily     : 32\n"
                          f"model name : {m.model_name}\n\n")
        else:
            raise ValueError(f"unknown cpuinfo format {kind!r}")
    text = "".join(blocks)
    if kind == "power":
        text += "timebase\t: 512000000\nplatform\t: PowerNV\nmodel\t\t: 9006-22P\n"
    return text


def cpu_extras(m: FakeMachine, out: dict) -> None:
    """What some machines add: ``proc/cpuinfo`` (when a model is set, or on arm64), CPPC's
    ``highest_perf``, the hybrid PMUs' CPU lists and each online CPU's ``cpu_capacity``."""
    online = m.online()
    if m.model_name is not None or m.quirks.cpuinfo == "arm64":
        out["proc/cpuinfo"] = cpuinfo(m)
    if m.cppc_highest_perf is not None:
        out[f"{CPU}/cpu0/acpi_cppc/highest_perf"] = f"{m.cppc_highest_perf}\n"
    for pmu, cpus in m.cpu_kinds.items():
        out[f"sys/devices/{pmu}/cpus"] = format_cpulist(cpus & online) + "\n"
    for cpu, capacity in m.cpu_capacity.items():
        if cpu in online:     # the kernel removes an offline CPU's attributes with it
            out[f"{CPU}/cpu{cpu}/cpu_capacity"] = f"{capacity}\n"
