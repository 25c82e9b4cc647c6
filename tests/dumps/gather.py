"""Gather the real-machine dumps in tests/dumps/ (and strip them to topology files).

Each dump is what ``hwloc-gather-topology NAME`` writes, run on a real kernel:
inside the QEMU guests of ``tests/vm`` (several NUMA nodes, a memory-only
node, asymmetric distances, a cgroup v2 cpuset, a cgroup v1 cpuset, the legacy
cpuset filesystem, an offline CPU) and on the machine running this script.
The tarballs are then sanitized (:func:`sanitize`): only the files discovery
and hwloc read about CPUs, NUMA nodes, caches and cpusets are kept; the
kernel command line, kernel version, host name, CPUID dumps, DMI, statistics
and per-process ids are dropped.

Usage::

    python3 -m tests.dumps.gather                 # every dump (boots one guest per VM dump)
    python3 -m tests.dumps.gather vm-2n host      # some of them
    python3 -m tests.dumps.gather --sanitize IN.tar.bz2 OUT.tar.bz2 NAME
"""

from __future__ import annotations

import argparse
import io
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

# -- what a dump keeps -------------------------------------------------------------------

_CPU_KEEP = re.compile(
    r"sys/devices/system/cpu/(online|possible|present|offline|kernel_max|isolated"
    r"|cpu\d+(/online|/node\d+|/cpu_capacity|/acpi_cppc/highest_perf|/topology/[a-z_]+"
    r"|/cache/index\d+/(level|type|size|id|shared_cpu_map|shared_cpu_list|coherency_line_size"
    r"|ways_of_associativity|number_of_sets|physical_line_partition))?)$")
_NODE_KEEP = re.compile(
    r"sys/devices/system/node/(online|possible|has_cpu|has_memory|has_normal_memory"
    r"|has_generic_initiator"
    r"|node\d+(/cpumap|/cpulist|/meminfo|/distance|/cpu\d+"
    r"|/hugepages(/hugepages-\d+kB(/(nr|free|surplus)_hugepages)?)?"
    r"|/access\d+(/initiators(/[a-z_]+)?)?)?)$")
_OTHER_KEEP = re.compile(
    r"(sys/bus/(cpu|node)/devices(/(cpu|node)\d+)?|sys/kernel/mm/hugepages(/hugepages-\d+kB"
    r"(/nr_hugepages)?)?|sys/devices/(cpu_core|cpu_atom)/cpus"
    r"|proc/(cpuinfo|meminfo|mounts|self/cgroup|self/cpuset|hwloc-nofile-info)"
    r"|sys|sys/bus|sys/bus/(cpu|node)|sys/kernel|sys/kernel/mm|sys/devices|sys/devices/system"
    r"|sys/devices/system/(cpu|node)|proc|proc/self)$")
_CPUSET_FILES = re.compile(r"(cpuset\.[a-z_.]+|cpus|mems|effective_cpus|effective_mems"
                           r"|cgroup\.controllers|cgroup\.subtree_control)$")


def _cpuset_mounts(mounts: str) -> list[str]:
    out = []
    for line in mounts.splitlines():
        f = line.split()
        if len(f) >= 4 and (f[2] in ("cgroup2", "cpuset")
                            or (f[2] == "cgroup" and "cpuset" in f[3].split(","))):
            out.append(f[1].replace("\\040", " ").strip("/"))
    return out


def _keep(rel: str, is_dir: bool, mounts: list[str]) -> bool:
    if _CPU_KEEP.match(rel) or _NODE_KEEP.match(rel) or _OTHER_KEEP.match(rel):
        return True
    for mnt in mounts:
        if rel == mnt or mnt.startswith(rel + "/"):
            return True                     # a parent directory of the mount point
        if rel.startswith(mnt + "/"):
            return is_dir or bool(_CPUSET_FILES.match(posixpath.basename(rel)))
    return False


def _clean_text(rel: str, data: bytes) -> bytes:
    text = data.decode("utf-8", "replace")
    if rel == "proc/mounts":
        lines = []
        for line in text.splitlines():
            f = line.split()
            if len(f) >= 4 and (f[2] in ("proc", "sysfs", "cgroup2", "cpuset")
                                or (f[2] == "cgroup" and "cpuset" in f[3].split(","))):
                lines.append(" ".join(["none", *f[1:]]))
        return ("\n".join(lines) + "\n").encode()
    if rel == "proc/self/cgroup":
        keep = []
        for ln in text.splitlines():
            fields = ln.split(":", 2)
            if len(fields) == 3 and (fields[1] == "" or "cpuset" in fields[1].split(",")):
                keep.append(ln)             # the cgroup v2 line and the cpuset hierarchy's
        return ("\n".join(keep) + "\n").encode()
    if rel == "proc/hwloc-nofile-info":
        keep = [ln for ln in text.splitlines() if ln.startswith(("OSName:", "Architecture:",
                                                                 "PageSize:"))]
        return ("\n".join(keep) + "\n").encode()
    return data


def sanitize(src: str | os.PathLike, dest: str | os.PathLike, name: str) -> dict:
    """Copy the topology files of the gather tarball ``src`` to ``dest`` (a .tar.bz2
    whose top directory is ``name``); returns counts of kept and dropped members."""
    with tarfile.open(src, "r:*") as tf:
        members = tf.getmembers()
        top = members[0].name.split("/")[0]
        by_rel = {}
        for m in members:
            parts = m.name.split("/", 1)
            if parts[0] != top or len(parts) == 1:
                continue
            by_rel[parts[1].rstrip("/")] = m
        mounts_member = by_rel.get("proc/mounts")
        mounts_text = tf.extractfile(mounts_member).read().decode() if mounts_member else ""
        mounts = _cpuset_mounts(mounts_text)
        kept = dropped = 0
        with tarfile.open(dest, "w:bz2") as out:
            root = tarfile.TarInfo(name)
            root.type, root.mode, root.mtime = tarfile.DIRTYPE, 0o755, 0
            out.addfile(root)
            for rel, m in sorted(by_rel.items()):
                if not (m.isfile() or m.isdir() or m.issym()) or not _keep(rel, m.isdir(), mounts):
                    dropped += 1
                    continue
                info = tarfile.TarInfo(f"{name}/{rel}")
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                if m.isdir():
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    out.addfile(info)
                elif m.issym():
                    info.type, info.linkname, info.mode = tarfile.SYMTYPE, m.linkname, 0o777
                    out.addfile(info)
                else:
                    data = _clean_text(rel, tf.extractfile(m).read())
                    info.size, info.mode = len(data), 0o644
                    out.addfile(info, io.BytesIO(data))
                kept += 1
    return {"kept": kept, "dropped": dropped}


# -- the dumps ---------------------------------------------------------------------------

_GATHER = "hwloc-gather-topology --no-cpuid {out}/{name} >{out}/{name}.log 2>&1"

#: name -> (VM topology, shell run inside the guest before hwloc-gather-topology)
VM_DUMPS: dict[str, tuple[str, str]] = {
    "vm-2n": ("2n", ""),
    "vm-mem-only": ("mem-only", ""),
    "vm-asym": ("asym", ""),
    # cgroup v2 cpuset: CPUs of node 1, memory of node 1 and of the CPU-less node 2
    "vm-cgroup2-cpuset": ("mem-only", "echo +cpuset > /sys/fs/cgroup/cgroup.subtree_control && "
                                      "mkdir /sys/fs/cgroup/job && "
                                      "echo 2-3 > /sys/fs/cgroup/job/cpuset.cpus && "
                                      "echo 1-2 > /sys/fs/cgroup/job/cpuset.mems && "
                                      "echo $$ > /sys/fs/cgroup/job/cgroup.procs && "),
    # cgroup v1 cpuset hierarchy mounted outside /sys/fs/cgroup
    "vm-cgroup1-cpuset": ("2n", "mkdir -p /run/cg1 && mount -t cgroup -o cpuset none /run/cg1 && "
                                "mkdir /run/cg1/batch && echo 1-2 > /run/cg1/batch/cpuset.cpus && "
                                "echo 0-1 > /run/cg1/batch/cpuset.mems && "
                                "echo $$ > /run/cg1/batch/tasks && "),
    # the legacy cpuset filesystem (files without the cpuset. prefix)
    "vm-legacy-cpuset": ("2n", "mkdir -p /dev/cpuset && mount -t cpuset none /dev/cpuset && "
                               "mkdir /dev/cpuset/job && echo 2-3 > /dev/cpuset/job/cpus && "
                               "echo 1 > /dev/cpuset/job/mems && echo $$ > /dev/cpuset/job/tasks && "),
    # CPUs 1 and 3 taken offline: node 0 keeps CPU 0, node 2 keeps only its memory
    "vm-cpu-offline": ("asym", "echo 0 > /sys/devices/system/cpu/cpu3/online && "
                               "echo 0 > /sys/devices/system/cpu/cpu1/online && "),
}


def gather_host(workdir: Path) -> Path:
    subprocess.run(_GATHER.format(out=workdir, name="host"), shell=True, check=True)
    return workdir / "host.tar.bz2"


def gather_vm(name: str, workdir: Path) -> Path:
    from tests.vm import harness

    topology, prelude = VM_DUMPS[name]
    share = harness.GUEST_SHARE
    script = harness.guest_script(["sh", "-c", prelude + _GATHER.format(out=share, name=name)])
    run = harness.run_guest(topology, script, progress=lambda s: print(s, file=sys.stderr))
    produced = run.run_dir / f"{name}.tar.bz2"
    if run.failure or run.exit_code or not produced.exists():
        raise SystemExit(f"{name}: {run.summary()}\n{run.read(name + '.log')[-3000:]}\n"
                         f"{run.console_tail(40)}")
    target = workdir / produced.name
    shutil.copy(produced, target)
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help=f"host and/or {', '.join(VM_DUMPS)} (default: all)")
    ap.add_argument("--sanitize", nargs=3, metavar=("IN", "OUT", "NAME"))
    args = ap.parse_args(argv)
    if args.sanitize:
        print(sanitize(*args.sanitize))
        return 0
    names = args.names or ["host", *VM_DUMPS]
    with tempfile.TemporaryDirectory(prefix="numabind-gather-") as tmp:
        work = Path(tmp)
        for name in names:
            raw = gather_host(work) if name == "host" else gather_vm(name, work)
            dest = HERE / f"{name}.tar.bz2"
            counts = sanitize(raw, dest, name)
            print(f"{dest.relative_to(HERE.parent.parent)}: {dest.stat().st_size} bytes, "
                  f"{counts['kept']} members kept, {counts['dropped']} dropped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
