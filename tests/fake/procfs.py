"""The process's view of a fake machine: ``proc/self/status`` (its affinity and allowed nodes), its
cpuset (cgroup v2, cgroup v1 with or without ``noprefix``, the legacy cpuset filesystem) with
``proc/self/cgroup`` and ``proc/self/cpuset``, and ``proc/mounts``; and other processes below
``proc/PID`` (:func:`fake_procfs`), as psutil and :mod:`numabind._proc` read them.

What psutil needs of a replayed ``/proc``: ``proc/stat`` with a ``btime`` line (``children()`` compares start
times since the epoch), and per process ``proc/PID/stat`` with every field a kernel writes (52: psutil reads the
39th), ``proc/PID/status`` (``Tgid``), ``proc/PID/task/TID/stat`` per thread (psutil lists threads from them;
their ``status`` gives the names and ``Cpus_allowed_list``) and ``proc/PID/environ``."""

from __future__ import annotations

from numabind.cpulist import format_cpulist

from .masks import format_mask, kernel_mask

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .machine import FakeMachine


def process_files(m: FakeMachine, out: dict) -> None:
    online = m.online()
    mems_all = frozenset(m.node_dirs()) if (m.numa_dir and m.nodes) else frozenset({0})
    if m.status is not None:
        cpus, mems = m.status
        cpus = online if cpus == "default" else cpus
        mems = mems_all if mems == "default" else mems
        lines = ["Name:\tpython3", "State:\tR (running)", "Pid:\t4242"]
        if cpus is not None:
            lines += [f"Cpus_allowed:\t{kernel_mask(cpus, max(m.possible() | {0}) + 1)}",
                      f"Cpus_allowed_list:\t{format_cpulist(cpus)}"]
        if mems is not None:
            lines += [f"Mems_allowed:\t{format_mask(mems, 1024)}",
                      f"Mems_allowed_list:\t{format_cpulist(mems)}"]
        lines.append("voluntary_ctxt_switches:\t3")
        out["proc/self/status"] = "\n".join(lines) + "\n"
    mounts = ["sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0",
              "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0"]
    cgroup_lines = []
    if m.cgroup2 is not None:
        cg = m.cgroup2
        cgroup_lines.append(f"0::{cg.path}")
        mounts.append(f"cgroup2 /{cg.mount} cgroup2 rw,nosuid,nodev,noexec,relatime 0 0")
        out[f"{cg.mount}/cgroup.controllers"] = "cpuset cpu io memory pids\n"
        out[f"{cg.mount}/cpuset.cpus.effective"] = format_cpulist(online) + "\n"
        out[f"{cg.mount}/cpuset.mems.effective"] = format_cpulist(mems_all) + "\n"
        at = cg.path if cg.at is None else cg.at
        d = cg.mount + ("" if at == "/" else at)
        out[f"{d}/cgroup.procs"] = "4242\n"
        if cg.cpus is not None:
            out[f"{d}/cpuset.cpus.effective"] = format_cpulist(cg.cpus) + "\n"
        if cg.mems is not None:
            out[f"{d}/cpuset.mems.effective"] = format_cpulist(cg.mems) + "\n"
        if at != cg.path:
            out[f"{cg.mount}{cg.path}/cgroup.procs"] = "4242\n"
    for cg in (m.cgroup1, m.cpuset_fs):
        if cg is None:
            continue
        legacy = cg.kind == "cpuset"
        prefix = "" if (legacy or cg.noprefix) else "cpuset."
        if legacy:
            mounts.append(f"none /{cg.mount} cpuset rw,relatime 0 0")
        else:
            opts = "rw,nosuid,nodev,noexec,relatime,cpuset" + (",noprefix" if cg.noprefix else "")
            mounts.append(f"cgroup /{cg.mount} cgroup {opts} 0 0")
            cgroup_lines.insert(0, f"4:memory:{cg.path}")
        cgroup_lines.insert(0, f"3:cpuset:{cg.path}")
        out["proc/self/cpuset"] = cg.path + "\n"
        out[f"{cg.mount}/{prefix}cpus"] = format_cpulist(online) + "\n"
        out[f"{cg.mount}/{prefix}mems"] = format_cpulist(mems_all) + "\n"
        d = cg.mount + ("" if cg.path == "/" else cg.path)
        out[f"{d}/{prefix}cpus"] = format_cpulist(cg.cpus) + "\n"
        out[f"{d}/{prefix}mems"] = format_cpulist(cg.mems) + "\n"
        out[f"{d}/tasks"] = "4242\n"
        if cg.effective_cpus is not None:
            out[f"{d}/{prefix}effective_cpus"] = format_cpulist(cg.effective_cpus) + "\n"
        if cg.effective_mems is not None:
            out[f"{d}/{prefix}effective_mems"] = format_cpulist(cg.effective_mems) + "\n"
    if cgroup_lines:
        out["proc/self/cgroup"] = "\n".join(cgroup_lines) + "\n"
    if m.quirks.proc_mounts:
        out["proc/mounts"] = "\n".join(mounts) + "\n"


# ----------------------------------------------------------------------------- other processes
BTIME = 1_700_000_000


def stat_line(pid: int, name: str, ppid: int, start: int) -> str:
    """``/proc/PID/stat`` as a kernel writes it: pid, ``(comm)`` and 50 more fields, the start time 22nd."""
    fields = ["S", str(ppid)] + ["0"] * 48
    fields[19] = str(start)
    return f"{pid} ({name}) " + " ".join(fields) + "\n"


def fake_procfs(root, pid: int, ppid: int, threads: dict[int, tuple[str, str]], environ: bytes | None = b"",
                start: int = 1000) -> None:
    """Process ``pid`` (child of ``ppid``) below ``root/proc``: per thread id its name and Cpus_allowed_list
    (the first is the process's own), and its environment (None: no environ file)."""
    proc = root / "proc"
    proc.mkdir(exist_ok=True)
    (proc / "stat").write_text(f"cpu  1 0 1 100 0 0 0 0 0 0\nbtime {BTIME}\n")
    d = proc / str(pid)
    for n, (tid, (name, cpus)) in enumerate(threads.items()):
        status = (f"Name:\t{name}\nTgid:\t{pid}\nPid:\t{tid}\nPPid:\t{ppid}\nCpus_allowed_list:\t{cpus}\n"
                  f"Mems_allowed_list:\t0\n")
        task = d / "task" / str(tid)
        task.mkdir(parents=True)
        (task / "stat").write_text(stat_line(tid, name, ppid, start))
        (task / "status").write_text(status)
        if n == 0:
            (d / "stat").write_text(stat_line(pid, name, ppid, start))
            (d / "status").write_text(status)
    if environ is not None:
        (d / "environ").write_bytes(environ)


def fake_numa_process(root, pid: int, numa_maps: str | None) -> None:
    """A procfs/sysfs ``root`` with one process ``pid`` ("fake worker": two CPUs, one thread), its ``numa_maps``
    (None: a kernel without them) and no NUMA directory."""
    fake_procfs(root, pid, 1, {pid: ("fake worker", "0-1")}, environ=None, start=12345)
    if numa_maps is not None:
        (root / "proc" / str(pid) / "numa_maps").write_text(numa_maps)
    cpu = root / "sys" / "devices" / "system" / "cpu"
    cpu.mkdir(parents=True)
    (cpu / "online").write_text("0-1\n")
