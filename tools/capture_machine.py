"""Capture what numabind's discovery reads on this machine into a dump that replays it.

    python3 tools/capture_machine.py OUT.tar.bz2 [--root ROOT]

hwloc-gather-topology keeps CPUs, nodes, caches and cpusets, but not the PCI
devices numabind places GPUs by (``numa_node``, ``local_cpulist``, the
NVIDIA driver's ``/proc/driver/nvidia/gpus/*/information``), and it is rarely
installed on a GPU server or inside its container. This tool runs numabind's
own discovery (CPUs, nodes, cpusets, GPUs, PCI I/O devices) through a reader
that copies every file it reads, every directory it lists and every symbolic
link it follows into a tree, then packs the tree. ``numabind topology --root
OUT.tar.bz2`` (or ``NUMABIND_FSROOT``) then shows that machine anywhere, and
``--check`` proves the dump is complete: discovery of the dump must equal
discovery of the machine.

Only topology files are copied (what discovery reads): no environment, no
kernel command line, no process list; of ``/proc/mounts`` only the cgroup and
cpuset mounts, of the process's status only its allowed CPUs and nodes. The discovery runs as it would on a
dump (``is_live`` off), so it reads ``/proc/self/status`` and the cpuset files
rather than asking the kernel, and the dump holds them.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import stat
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

from numabind._fs import FsReader  # noqa: E402
from numabind.iodevices import scan_pci  # noqa: E402
from numabind.topology import discover_from  # noqa: E402

#: Read besides what discovery reads: what a person looking at the dump wants to see.
EXTRA = ("proc/cpuinfo", "proc/meminfo", "proc/mounts", "proc/self/status", "proc/self/cgroup",
         "sys/devices/system/cpu/possible", "sys/devices/system/cpu/present", "sys/devices/system/node/possible")
#: Listed besides: the CPU and node device links hwloc's ``lstopo --input DIR`` looks for.
EXTRA_DIRS = ("sys/bus/cpu/devices", "sys/bus/node/devices")
#: Every file of these folders is copied besides: hwloc reads the hex masks (``core_cpus``,
#: ``thread_siblings``, ``cpumap``) where discovery reads the ``_list`` forms, so the dump serves both.
EXTRA_FILES_IN = ("sys/devices/system/cpu/cpu[0-9]*/topology", "sys/devices/system/cpu/cpu[0-9]*/cache/index[0-9]*",
                  "sys/devices/system/node/node[0-9]*")
#: Of these files the dump keeps only the lines discovery reads: the cgroup and cpuset mounts (not every
#: mount point of the machine) and the allowed CPUs and nodes of the process (not its name, ids or limits).
KEPT_LINES = {
    "proc/mounts": lambda line: len(line.split()) > 2 and line.split()[2] in ("cgroup", "cgroup2", "cpuset"),
    "proc/self/status": lambda line: line.startswith(("Cpus_allowed", "Mems_allowed")),
}

#: A link into one process's procfs directory (``proc/self``, ``proc/mounts``) is copied as what it leads
#: to, under its own name: a process id has no place in a dump.
PROCESS_DIR = re.compile(r"proc/[0-9]+(/.*)?")

#: The device files GPU discovery looks at (``dev/nvidiaN``, ``dev/dri/renderDN``, ``dev/kfd``); other
#: entries of ``/dev`` stay out of the dump.
GPU_DEVICE_FILE = re.compile(r"nvidia[0-9]+|nvidiactl|renderD[0-9]+|kfd")


class CopyingReader(FsReader):
    """An FsReader over a live root that copies what it reads, lists and resolves into ``dest``.

    Paths through symbolic links are copied as the links plus the files they lead to, so
    ``realpath`` and ``listdir`` in the copy answer as they did on the machine."""

    def __init__(self, dest: str | os.PathLike[str], root: str | os.PathLike[str] | None = "/") -> None:
        super().__init__(root)
        self.is_live = False        # read the files a dump has, not the running process's state
        self.dest = Path(dest)

    # -- mirroring ------------------------------------------------------------------------
    def _mirror(self, rel: str) -> Path:
        """Recreate the links along ``rel`` in the copy; the copy's path of where ``rel`` really is."""
        real = ""
        for part in rel.strip("/").split("/"):
            if part in ("", "."):
                continue
            here = f"{real}/{part}" if real else part
            full = self.path(here)
            if os.path.islink(full):
                target = os.path.realpath(full)
                inside = os.path.relpath(target, self.root)
                if inside.startswith("..") or PROCESS_DIR.fullmatch(inside):
                    real = here      # out of the root, or a process's own: copy what it shows instead
                    continue
                link = self.dest / here
                link.parent.mkdir(parents=True, exist_ok=True)
                if not os.path.lexists(link):
                    os.symlink(os.path.relpath(inside, os.path.dirname(here) or "."), link)
                here = inside
            real = here
        return self.dest / real

    def _copy_entry(self, rel: str) -> None:
        """A listed name: links and directories are made, device files become placeholders; other
        files are copied when they are read."""
        full = self.path(rel)
        if os.path.islink(full):
            self._mirror(rel)
        elif os.path.isdir(full):
            self._mirror(rel).mkdir(parents=True, exist_ok=True)
        elif rel.startswith("dev/") and GPU_DEVICE_FILE.fullmatch(os.path.basename(rel)):
            self._device_file(rel)

    def _device_file(self, rel: str) -> None:
        """``dev/nvidia0`` & co. as a dump holds them: an empty file, mode 0o666 when this process could
        open the device read-write (the GPU runtime can use it), 0o000 when not."""
        full = self.path(rel)
        try:
            st = os.stat(full)
        except OSError:
            return
        usable = os.access(full, os.R_OK | os.W_OK)
        if stat.S_ISREG(st.st_mode):           # a dump's placeholder already (capturing a dump)
            usable = st.st_mode & 0o600 == 0o600
        elif not stat.S_ISCHR(st.st_mode):
            usable = False
        out = self._mirror(rel)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.touch()
        out.chmod(0o666 if usable else 0)

    # -- FsReader -------------------------------------------------------------------------
    def read(self, rel: str, limit: int | None = None) -> str | None:
        text = super().read(rel, limit)
        if text is not None:
            out = self._mirror(rel)
            out.parent.mkdir(parents=True, exist_ok=True)
            if not out.exists() or limit is None:
                keep = KEPT_LINES.get(os.path.relpath(out, self.dest))
                kept = text if keep is None else "".join(ln for ln in text.splitlines(True) if keep(ln))
                out.write_text(kept, errors="replace")
        return text

    def listdir(self, rel: str) -> list[str]:
        names = super().listdir(rel)
        if names or self.isdir(rel):
            self._mirror(rel).mkdir(parents=True, exist_ok=True)
            for name in names:
                self._copy_entry(f"{rel.rstrip('/')}/{name}")
        return names

    def numbered(self, rel: str, prefix: str) -> list[int]:
        self.listdir(rel)
        return super().numbered(rel, prefix)

    def exists(self, rel: str) -> bool:
        found = super().exists(rel)
        if found:
            if os.path.isdir(self.path(rel)):
                self._mirror(rel).mkdir(parents=True, exist_ok=True)
            elif rel.startswith("dev/"):
                self._device_file(rel)
            else:
                self.read(rel)
        return found

    def isdir(self, rel: str) -> bool:
        found = super().isdir(rel)
        if found:
            self._mirror(rel).mkdir(parents=True, exist_ok=True)
        return found

    def realpath(self, rel: str) -> str | None:
        self._mirror(rel)
        return super().realpath(rel)


def capture(out: str | os.PathLike[str], root: str | os.PathLike[str] | None = "/",
            env: dict[str, str] | None = None) -> dict:
    """Write the dump ``out`` (.tar.bz2) of ``root``; returns discovery's view of the machine (to_dict)."""
    env = {} if env is None else env      # no CUDA_VISIBLE_DEVICES & co.: every GPU the machine shows
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "machine"
        tree.mkdir()
        reader = CopyingReader(tree, root)
        topo = discover_from(reader, env=env)
        scan_pci(reader)
        for rel in EXTRA:
            reader.read(rel)
        for rel in EXTRA_DIRS:
            reader.listdir(rel)
        for pattern in EXTRA_FILES_IN:
            for folder in sorted(glob.glob(reader.path(pattern))):
                rel = os.path.relpath(folder, reader.root)
                for name in sorted(os.listdir(folder)):
                    if os.path.isfile(os.path.join(folder, name)) and not os.path.islink(os.path.join(folder, name)):
                        reader.read(f"{rel}/{name}")
        with tarfile.open(out, "w:bz2") as tar:
            tar.add(tree, arcname="machine")
    return topo.to_dict()


def replayed(dump: str | os.PathLike[str], env: dict[str, str] | None = None) -> dict:
    """Discovery's view of a dump written by :func:`capture`."""
    return discover_from(FsReader(dump), env={} if env is None else env).to_dict()


def comparable(view: dict) -> dict:
    """A topology's dict without what names where it was read from."""
    return {k: v for k, v in view.items() if k not in ("root", "origin")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the dump to write, a .tar.bz2")
    ap.add_argument("--root", default="/", help="the machine's root (default /)")
    ap.add_argument("--check", action="store_true", help="replay the dump and compare it with the machine")
    args = ap.parse_args(argv)
    view = capture(args.out, args.root)
    print(f"wrote {args.out}: nodes {[n['id'] for n in view['nodes']]}, online CPUs {view['online_cpus']}, "
          f"{len(view['gpus'])} GPUs")
    if args.check:
        again = replayed(args.out)
        if comparable(again) != comparable(view):
            keys = sorted(k for k in set(view) | set(again) if view.get(k) != again.get(k))
            print(f"the dump replays differently in: {', '.join(keys)}")
            print(json.dumps({"machine": {k: view.get(k) for k in keys}, "dump": {k: again.get(k) for k in keys}},
                             indent=1, default=str)[:20000])
            return 1
        print("the dump replays to the same topology")
    return 0


if __name__ == "__main__":
    sys.exit(main())
