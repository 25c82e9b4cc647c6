"""``numabind gather``: a replayable capture of this machine, to attach to a bug report (issue 44 §2).

:func:`gather` runs numabind's own discovery (CPUs, nodes, caches, cpusets, GPUs, PCI functions, NICs and disks)
through a reader (:class:`CopyingReader`) that copies every file it reads, every directory it lists and every link
it follows into a tree, adds what hwloc's ``lstopo`` reads besides (the CPUs' and nodes' hex masks, the bus links),
and packs the tree as ``hwloc-gather-topology`` does: ``NAME.tar.bz2`` holding one folder ``NAME/`` with ``sys/``
and ``proc/``. ``numabind --root NAME.tar.bz2`` replays it (:mod:`numabind._dump` unpacks it) and ``lstopo --input
NAME.tar.bz2`` reads it where hwloc was built with archive support (else ``lstopo --input`` on the unpacked
``NAME/``). The folder also holds ``numabind/``: ``topology.xml`` (``numabind topology --of xml``), ``check.json``
(``numabind check --json``, or ``check-error.txt`` saying why there is none) and ``gather.json`` (what was
gathered, what was left out and why).

Nothing private goes in (:data:`PRIVATE`): no host name unless asked for (``proc/sys/kernel/hostname`` and
``domainname`` are left out, and the host's name is taken out of the texts numabind writes), no environment but the
variables that change which GPUs discovery numbers (:data:`numabind._vendors.DISCOVERY_VARIABLES`), no process's
command line or environment, no kernel command line; of ``/proc/mounts`` only the cgroup and cpuset mounts, of
``/proc/self/status`` only the allowed CPUs and nodes and the ``Seccomp`` and ``CapEff`` lines (what ``numabind
check`` reads). Archive members carry no owner's name. The size is capped (:data:`MAX_BYTES` in all,
:data:`MAX_FILE_BYTES` a file) and so is the time spent copying (:data:`MAX_SECONDS`); what a cap left out is
listed. The archive is replayed once written and discovery compared with the machine's
(:attr:`GatherResult.differences`). docs/report-machine.rst is the user's page.
"""

from __future__ import annotations

import glob
import json
import os
import re
import stat
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._fs import FsReader
from ._vendors import DISCOVERY_VARIABLES
from .errors import NumabindError
from .iodevices import scan_nics, scan_pci
from .irq import device_irqs, select_devices
from .topology import discover_from

__all__ = ["MAX_BYTES", "MAX_FILE_BYTES", "MAX_SECONDS", "PRIVATE", "SUFFIX", "CopyingReader", "GatherResult",
           "LeftOut", "archive_name", "default_name", "gather", "replay_differences"]

#: The most bytes of files (unpacked) one archive holds: a machine of a thousand CPUs copies a few MiB.
MAX_BYTES = 64 << 20
#: The largest file copied (``proc/cpuinfo`` of 1152 CPUs is about 1.3 MiB); a larger one is left out.
MAX_FILE_BYTES = 4 << 20
#: Seconds spent copying files; past it discovery finishes but nothing more is copied (and that is said).
MAX_SECONDS = 120.0
#: The archive's suffix: hwloc's ``lstopo --input`` takes a file by it for an archive.
SUFFIX = ".tar.bz2"
#: Where numabind's own files sit inside the archive's folder.
NUMABIND_DIR = "numabind"

#: Read besides what discovery reads: what hwloc and a person looking at the archive want.
EXTRA = ("proc/cpuinfo", "proc/meminfo", "proc/mounts", "proc/self/status", "proc/self/cgroup", "proc/self/cpuset",
         "proc/hwloc-nofile-info", "sys/devices/system/cpu/possible", "sys/devices/system/cpu/present",
         "sys/devices/system/node/possible")
#: What hwloc-gather-topology writes of the machine that no file under ``/proc`` says (a dump gathered of a dump keeps
#: its lines but the host's name and the kernel's version); :func:`gather` writes it for the live machine.
NOFILE_INFO = "proc/hwloc-nofile-info"
#: Listed besides: the CPU and node device links hwloc's ``lstopo --input DIR`` looks for.
EXTRA_DIRS = ("sys/bus/cpu/devices", "sys/bus/node/devices")
#: Every file of these folders is copied besides: hwloc reads the hex masks (``core_cpus``, ``thread_siblings``,
#: ``cpumap``) where discovery reads the ``_list`` forms, so the archive serves both.
EXTRA_FILES_IN = ("sys/devices/system/cpu/cpu[0-9]*/topology", "sys/devices/system/cpu/cpu[0-9]*/cache/index[0-9]*",
                  "sys/devices/system/node/node[0-9]*")

#: Of these files the archive keeps only the lines discovery and ``numabind check`` read: the cgroup and cpuset
#: mounts (not every mount point of the machine); of the process's status its allowed CPUs and nodes, its seccomp
#: mode and its effective capabilities (not its name, ids or limits).
KEPT_LINES: dict[str, Callable[[str], bool]] = {
    "proc/mounts": lambda line: len(line.split()) > 2 and line.split()[2] in ("cgroup", "cgroup2", "cpuset"),
    "proc/self/status": lambda line: line.startswith(("Cpus_allowed", "Mems_allowed", "Seccomp", "CapEff")),
    NOFILE_INFO: lambda line: line.startswith(("OSName:", "Architecture:")),
}

#: The host's name: left out unless ``hostname=True`` (``numabind gather --hostname``).
HOSTNAME_FILES = ("proc/sys/kernel/hostname", "proc/sys/kernel/domainname")
_HOSTNAME_WHY = "the host's name (numabind gather --hostname puts it in)"
#: Paths (relative to the root, as copied) that never go in, whoever reads them, and why.
PRIVATE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"proc/sys/kernel/(hostname|domainname)"), _HOSTNAME_WHY),
    (re.compile(r"(.*/)?environ"), "a process's environment"),
    (re.compile(r"(.*/)?cmdline"), "a command line (a process's, or the kernel's boot arguments)"),
    (re.compile(r"proc/[0-9]+(/.*)?"), "another process's files"),
    (re.compile(r"proc/self/(task|fd|map_files|mem|maps|smaps|pagemap|root|cwd|exe)(/.*)?"),
     "this process's memory, files or threads"),
)

#: A link into one process's procfs directory (``proc/self``, ``proc/thread-self``) is copied as what it leads to,
#: under its own name: a process id has no place in a capture.
PROCESS_DIR = re.compile(r"proc/[0-9]+(/.*)?")
#: The device files GPU discovery looks at (``dev/nvidiaN``, ``dev/dri/renderDN``, ``dev/kfd``, Ascend's
#: ``davinci``); other entries of ``/dev`` stay out.
GPU_DEVICE_FILE = re.compile(r"nvidia[0-9]+|nvidiactl|renderD[0-9]+|kfd|davinci[0-9]+|davinci_manager")


@dataclass(frozen=True)
class LeftOut:
    """A file the archive does not hold although something read it: its path under the root and why."""

    path: str
    why: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "why": self.why}


@dataclass(frozen=True)
class GatherResult:
    """What :func:`gather` wrote: the archive's ``path``, its ``size`` (bytes, compressed), the regular ``files``
    it holds and their ``unpacked`` bytes, what was ``left_out`` and why, the ``seconds`` it took, whether the
    host's name is in it, why ``numabind check``'s report is not (``check_error``, None when it is), and the
    ``differences``: the fields of discovery that the replay of the archive does not give as the machine did
    (empty when it replays to the same machine)."""

    path: str
    size: int
    files: int
    unpacked: int
    left_out: tuple[LeftOut, ...]
    seconds: float
    hostname: bool
    check_error: str | None
    differences: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size_bytes": self.size, "files": self.files, "unpacked_bytes": self.unpacked,
                "left_out": [item.to_dict() for item in self.left_out], "seconds": round(self.seconds, 3),
                "hostname": self.hostname, "check_error": self.check_error, "differences": list(self.differences)}

    def describe(self, shown: int = 5) -> str:
        """The report ``numabind gather`` prints: what was written, what was left out (at most ``shown`` paths a
        reason), whether the check and the replay went in as they should."""
        lines = [f"wrote {self.path}: {self.files} files, {_size(self.size)} ({_size(self.unpacked)} unpacked) "
                 f"in {self.seconds:.1f} s"]
        by_why: dict[str, list[str]] = {}
        for item in self.left_out:
            by_why.setdefault(item.why, []).append(item.path)
        for why, paths in by_why.items():
            more = f" and {len(paths) - shown} more" if len(paths) > shown else ""
            lines.append(f"left out ({why}): {', '.join(paths[:shown])}{more}")
        if self.check_error is not None:
            lines.append(f"numabind check: not in the archive: {self.check_error}")
        if self.differences:
            lines.append(f"WARNING: the archive replays differently from this machine in: "
                         f"{', '.join(self.differences)}; attach it anyway and say so in the report")
        else:
            lines.append(f"replay it: numabind --root {self.path} (lstopo --input reads it too)")
        lines.append("attach it to the bug report (what it holds: numabind/gather.json inside it)")
        return "\n".join(lines)


def _size(nbytes: int) -> str:
    """``512 B``, ``6.1 KiB``, ``64 MiB``."""
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            value = nbytes / (1 << shift)
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{nbytes} B"


def private_reason(rel: str) -> str | None:
    """Why the file ``rel`` (relative to the root, as the archive would hold it) stays out, else None."""
    for pattern, why in PRIVATE:
        if pattern.fullmatch(rel):
            return why
    return None


class _Budget:
    """What the archive may still take: bytes in all, bytes a file, time; and what was left out."""

    def __init__(self, max_bytes: int, max_file_bytes: int, seconds: float) -> None:
        self.max_bytes, self.max_file_bytes = max_bytes, max_file_bytes
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds
        self.sizes: dict[str, int] = {}
        self.total = 0
        self.left_out: dict[str, str] = {}

    def refuse(self, rel: str, size: int) -> str | None:
        """Why ``size`` bytes of ``rel`` cannot be copied now, else None (and they are counted)."""
        if time.monotonic() > self.deadline:
            return f"copying stopped after {self.seconds:g} s"
        if size > self.max_file_bytes:
            return f"larger than {_size(self.max_file_bytes)}, the most one file may take"
        grown = self.total - self.sizes.get(rel, 0) + size
        if grown > self.max_bytes:
            return f"the archive reached its cap of {_size(self.max_bytes)}"
        self.total = grown
        self.sizes[rel] = size
        self.left_out.pop(rel, None)
        return None

    def leave_out(self, rel: str, why: str) -> None:
        if rel not in self.sizes:
            self.left_out.setdefault(rel, why)

    def cut(self, rel: str, why: str) -> None:
        """``rel`` went in cut short (a prefix): listed with ``why`` although the archive holds part of it."""
        self.left_out.setdefault(rel, why)


class CopyingReader(FsReader):
    """An FsReader over a root that copies what it reads, lists and resolves into ``dest``, but for what
    :data:`PRIVATE` names and what the budget refuses (both said in :attr:`left_out`).

    Paths through symbolic links are copied as the links plus the files they lead to, so ``realpath`` and
    ``listdir`` in the copy answer as they did on the machine. The reader reads as it would a replayed root
    (``is_live`` off): the process's cpuset and ``/proc/self/status`` are read as files, so the copy holds them."""

    def __init__(self, dest: str | os.PathLike[str], root: str | os.PathLike[str] | None = "/", *,
                 hostname: bool = False, max_bytes: int = MAX_BYTES, max_file_bytes: int = MAX_FILE_BYTES,
                 seconds: float = MAX_SECONDS) -> None:
        super().__init__(root)
        if self.xml is not None:
            raise NumabindError(f"the root {self.origin} is an hwloc XML file, which holds no "
                                f"sysfs or procfs files to gather; replay it as it is (numabind --root "
                                f"{self.origin}) or attach the XML file itself")
        self.is_live = False        # read the files a dump has, not the running process's state
        self.dest = Path(dest)
        self.hostname = hostname
        self.budget = _Budget(max_bytes, max_file_bytes, seconds)

    @property
    def left_out(self) -> tuple[LeftOut, ...]:
        return tuple(LeftOut(rel, why) for rel, why in sorted(self.budget.left_out.items()))

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
        """A listed name: links and directories are made, device files become placeholders; other files are
        copied when they are read."""
        full = self.path(rel)
        if os.path.islink(full):
            self._mirror(rel)
        elif os.path.isdir(full):
            self._mirror(rel).mkdir(parents=True, exist_ok=True)
        elif rel.startswith("dev/") and GPU_DEVICE_FILE.fullmatch(os.path.basename(rel)):
            self._device_file(rel)

    def _device_file(self, rel: str) -> None:
        """``dev/nvidia0`` & co. as a dump holds them: an empty file, mode 0o666 when this process could open the
        device read-write (the GPU runtime can use it), 0o000 when not."""
        full = self.path(rel)
        try:
            st = os.stat(full)
        except OSError:
            return
        usable = os.access(full, os.R_OK | os.W_OK)
        if stat.S_ISREG(st.st_mode):           # a dump's placeholder already (gathering a dump)
            usable = st.st_mode & 0o600 == 0o600
        elif not stat.S_ISCHR(st.st_mode):
            usable = False
        out = self._mirror(rel)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.touch()
        out.chmod(0o666 if usable else 0)

    def _write(self, rel: str, text: str, whole: bool) -> None:
        """Copy ``text`` read from ``rel`` (``whole``: the whole file, not a prefix), unless it is private or over
        the budget."""
        out = self._mirror(rel)
        inside = os.path.relpath(out, self.dest)
        if self.hostname and inside in HOSTNAME_FILES:
            why = None
        else:
            why = private_reason(inside)
        if why is not None:
            self.budget.leave_out(inside, why)
            return
        if out.exists() and not whole:
            return
        keep = KEPT_LINES.get(inside)
        kept = text if keep is None else "".join(ln for ln in text.splitlines(True) if keep(ln))
        data = kept.encode("utf-8", errors="replace")
        why = self.budget.refuse(inside, len(data))
        if why is not None:
            self.budget.leave_out(inside, why)
            if whole and out.exists():      # a prefix discovery read went in: say the archive holds only that
                self.budget.cut(inside, f"{why}; the archive holds only its first {_size(out.stat().st_size)}")
            return
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)

    # -- FsReader -------------------------------------------------------------------------
    def read(self, rel: str, limit: int | None = None) -> str | None:
        text = super().read(rel, limit)
        if text is not None:
            self._write(rel, text, limit is None)
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

    def prefetch_numbered(self, base: str, names: Sequence[str], sub: str, prefix: str, each: Sequence[str],
                          skip: int = 0) -> list[int]:
        ids = super().prefetch_numbered(base, names, sub, prefix, each, skip)
        self.listdir(f"{base}/{sub}")    # the listing as the machine gave it: a replay lists the same entries
        return ids

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

    def stat(self, rel: str) -> os.stat_result | None:
        found = super().stat(rel)
        if found is not None and rel.startswith("dev/") and not stat.S_ISDIR(found.st_mode):
            self._device_file(rel)
        return found

    def isdir(self, rel: str) -> bool:
        found = super().isdir(rel)
        if found:
            self._mirror(rel).mkdir(parents=True, exist_ok=True)
        return found

    def realpath(self, rel: str) -> str | None:
        self._mirror(rel)
        return super().realpath(rel)

    def read_extra(self) -> None:
        """What hwloc and a person reading the archive want besides what discovery read (:data:`EXTRA`,
        :data:`EXTRA_DIRS`, :data:`EXTRA_FILES_IN`), and the host's name when it was asked for."""
        for rel in EXTRA + HOSTNAME_FILES:
            if self.hostname or rel not in HOSTNAME_FILES:
                self._read_extra(rel)
            elif FsReader.exists(self, rel):
                self.budget.leave_out(rel, _HOSTNAME_WHY)
        for rel in EXTRA_DIRS:
            self.listdir(rel)
        for pattern in EXTRA_FILES_IN:
            for folder in sorted(glob.glob(glob.escape(self.root.rstrip("/") + "/") + pattern)):
                rel = os.path.relpath(folder, self.root)
                for name in sorted(os.listdir(folder)):
                    path = os.path.join(folder, name)
                    if os.path.isfile(path) and not os.path.islink(path):
                        self._read_extra(f"{rel}/{name}")

    def _read_extra(self, rel: str) -> None:
        """Copy ``rel``, which discovery does not need: one it refuses (a FIFO, a device, a file over the reader's
        cap) is left out and said, not fatal."""
        try:
            self.read(rel)
        except NumabindError as exc:
            why = f"not copied: {getattr(exc, 'reason', None) or exc}"
            copied = self.budget.sizes.get(rel)
            if copied is None:
                self.budget.leave_out(rel, why)
            else:      # a prefix discovery read went in
                self.budget.cut(rel, f"{why}; the archive holds only its first {_size(copied)}")


# ----------------------------------------------------------------------------- names
def archive_name(out: str | os.PathLike[str]) -> str:
    """The folder inside the archive ``out``: its file name without ``.tar.bz2`` (hwloc-gather-topology's layout).
    An archive not named ``NAME.tar.bz2`` is a NumabindError naming it and the fix."""
    path = os.fspath(out)
    base = os.path.basename(path)
    name = base[:-len(SUFFIX)] if base.endswith(SUFFIX) else ""
    if not name or name.startswith(".") or "\0" in name:
        raise NumabindError(f"the archive {path!r} must be named NAME{SUFFIX} (lstopo --input and "
                            f"numabind --root know it by that suffix, and its folder is NAME); give e.g. "
                            f"-o {default_name()}")
    return name


def default_name(now: float | None = None) -> str:
    """``numabind-gather-YYYYmmdd-HHMMSS.tar.bz2`` (UTC): no host name in it."""
    return time.strftime("numabind-gather-%Y%m%d-%H%M%S", time.gmtime(now)) + SUFFIX


# ----------------------------------------------------------------------------- what numabind writes in it
def _hostname(reader: FsReader, live: bool) -> str | None:
    """The name of the machine gathered: uname's nodename on the live root, else the root's ``hostname`` file."""
    if live:
        return os.uname().nodename or None
    text = FsReader.read(reader, HOSTNAME_FILES[0])      # the machine's, not copied
    return (text.strip() or None) if text else None


def _hostnames(reader: FsReader, live: bool) -> list[str]:
    """The names to take out of what numabind writes: the machine's, and this host's (uname's nodename: the
    check runs here), longest first."""
    names = {os.uname().nodename, _hostname(reader, live) or ""}
    return sorted((n for n in names if n), key=len, reverse=True)


def scrubbed(value: Any, hostnames: Iterable[str], env: Mapping[str, str]) -> Any:
    """``value`` (JSON data) with the host's names taken out of its strings (a string that is one becomes
    ``"(hostname left out)"``; one of 4 characters or more is replaced wherever it appears) and the values of
    ``env``'s variables (8 characters or more, the discovery variables excepted) replaced by ``$NAME``."""
    names = [n for n in hostnames if n]
    values = sorted(((v, k) for k, v in env.items() if len(v) >= 8 and k not in DISCOVERY_VARIABLES),
                    key=lambda item: len(item[0]), reverse=True)

    def clean(text: str) -> str:
        if text in names:
            return "(hostname left out)"
        for name in names:
            if len(name) >= 4:
                text = text.replace(name, "(hostname left out)")
        for secret, key in values:
            text = text.replace(secret, f"${key}")
        return text

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return clean(item)
        if isinstance(item, dict):
            return {clean(str(k)): walk(v) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [walk(v) for v in item]
        return item

    return walk(value)


def _check_report(root: str | os.PathLike[str] | None) -> tuple[dict[str, Any] | None, str | None]:
    """``numabind check --json``'s object for ``root``, or None and why there is none: a failing check never fails
    the gather (its error goes in the archive instead). On a replayed root the check reads the plans, the GPUs and
    the pod and skips the kernel calls (they would be this host's)."""
    try:
        from .preflight import check     # it starts children: kept off the rest of gather's work

        report = check(root).to_dict()
    except Exception as exc:     # noqa: BLE001 - whatever it is, it is recorded, and the gather goes on
        return None, f"numabind check failed: {type(exc).__name__}: {exc}"
    return report, None


def _xml(topo: Any) -> str:
    """``numabind topology --of xml`` of the gathered machine."""
    from .cli.look import topology_output     # the XML export (numabind.cli.tree), as the command writes it

    return topology_output(topo, "xml")


# ----------------------------------------------------------------------------- the archive
def _owner_free(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """A member without its owner's ids and names (tarfile records the user's name otherwise)."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _pack(tree: Path, name: str, out: str) -> None:
    """``tree`` as ``out`` (bzip2), its top folder named ``name``, written beside ``out`` and moved into place:
    a failed gather leaves no half-written archive."""
    folder = os.path.dirname(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(prefix=".numabind-gather-", suffix=SUFFIX, dir=folder)
    os.close(fd)
    try:
        with tarfile.open(tmp, "w:bz2") as tar:
            tar.add(tree, arcname=name, filter=_owner_free)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise


def _counted(tree: Path) -> tuple[int, int]:
    """(regular files, their bytes) under ``tree``."""
    files = size = 0
    for folder, _, names in os.walk(tree):
        for n in names:
            st = os.lstat(os.path.join(folder, n))
            if stat.S_ISREG(st.st_mode):
                files += 1
                size += st.st_size
    return files, size


def comparable(view: Mapping[str, Any]) -> dict[str, Any]:
    """A topology's dict without what names where it was read from."""
    return {k: v for k, v in view.items() if k not in ("root", "origin")}


def replay_differences(archive: str | os.PathLike[str], view: Mapping[str, Any],
                       env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The keys of ``view`` (a topology's ``to_dict()``) that discovery of ``archive`` gives otherwise; one
    ``"everything: WHY"`` when the archive is no machine discovery can read (a capture cut short by a cap)."""
    try:
        again = comparable(discover_from(FsReader(archive), env={} if env is None else env).to_dict())
    except NumabindError as exc:     # a capture cut short by a cap may not be a machine at all
        return (f"everything: {exc}",)
    mine = comparable(view)
    return tuple(sorted(k for k in set(mine) | set(again) if mine.get(k) != again.get(k)))


def gather(out: str | os.PathLike[str] | None = None, *, root: str | os.PathLike[str] | None = None,
           hostname: bool = False, env: Mapping[str, str] | None = None, max_bytes: int = MAX_BYTES,
           max_file_bytes: int = MAX_FILE_BYTES, seconds: float = MAX_SECONDS) -> GatherResult:
    """Write the archive ``out`` (default :func:`default_name` in the working directory) of the machine under
    ``root`` (else ``$NUMABIND_FSROOT``, else ``/``): see the module docstring for what it holds.

    ``hostname`` puts the host's name in. ``env`` (default ``os.environ``) is the environment whose GPU
    visibility variables are recorded (and applied to one more discovery, so the files of that view are copied
    too); every GPU the machine shows is copied whatever it says. The caps: ``max_bytes``, ``max_file_bytes``,
    ``seconds``. ``numabind check`` runs for ``root`` too (:func:`numabind.preflight.check`: on a replayed root
    without the kernel calls, which would be this host's). Errors (a root that is not a machine, an archive name
    or folder that cannot be written) are NumabindError naming the input and the fix."""
    start = time.monotonic()
    env = os.environ if env is None else env
    out = os.fspath(out) if out is not None else default_name()
    name = archive_name(out)
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        raise NumabindError(f"cannot write the archive {out!r}: the folder {folder!r} does not exist; "
                            f"create it or give -o a path in an existing folder")
    if os.path.isdir(out) and not os.path.islink(out):
        raise NumabindError(f"cannot write the archive {out!r}: it is a directory; give -o a file in it, e.g. "
                            f"-o {os.path.join(out, default_name())}")
    visible = {k: env[k] for k in DISCOVERY_VARIABLES if k in env}
    with tempfile.TemporaryDirectory(prefix="numabind-gather-") as tmp:
        tree = Path(tmp) / name
        tree.mkdir()
        reader = CopyingReader(tree, root, hostname=hostname, max_bytes=max_bytes,
                               max_file_bytes=max_file_bytes, seconds=seconds)
        live = reader.root == "/"
        topo = discover_from(reader, env={})      # every GPU the machine shows
        if visible:
            discover_from(reader, env=visible)    # and the files of the view the caller's variables give
        scan_pci(reader)
        scan_nics(reader)
        device_irqs(topo, select_devices(topo, reader, every=True), reader)   # numabind irq's files (not irqbalance's:
        reader.read_extra()                                                   # other processes' command lines)
        view = topo.to_dict()
        names = [] if hostname else _hostnames(reader, live)
        check_report, check_error = _check_report(root)
        if live:      # hwloc's layout: lstopo --input names the architecture from it
            (tree / NOFILE_INFO).write_text(f"OSName: Linux\nArchitecture: {os.uname().machine}\n")
        own = tree / NUMABIND_DIR
        own.mkdir()
        (own / "topology.xml").write_text(_xml(topo))
        if check_report is not None:
            (own / "check.json").write_text(json.dumps(scrubbed(check_report, names, env), indent=1) + "\n")
        else:
            (own / "check-error.txt").write_text(str(scrubbed(check_error, names, env)) + "\n")
        left_out = reader.left_out
        manifest = _manifest(name, live, hostname, visible, left_out, check_error, reader)
        (own / "gather.json").write_text(json.dumps(scrubbed(manifest, names, env), indent=1) + "\n")
        files, unpacked = _counted(tree)
        try:
            _pack(tree, name, out)
        except OSError as exc:
            raise NumabindError(f"cannot write the archive {out!r}: {exc.strerror or exc}; give -o a path "
                                f"you may write") from None
    differences = replay_differences(out, view)
    return GatherResult(path=out, size=os.path.getsize(out), files=files, unpacked=unpacked, left_out=left_out,
                        seconds=time.monotonic() - start, hostname=hostname, check_error=check_error,
                        differences=differences)


#: What ``gather.json`` says is never gathered, whoever reads it.
NEVER_GATHERED = (
    "the host's name (proc/sys/kernel/hostname, domainname, uname's nodename), unless --hostname",
    "the environment, but for the variables that change which GPUs discovery numbers",
    "any process's command line, environment, memory, files or threads; the kernel's command line",
    "of proc/mounts every mount but the cgroup and cpuset ones; of proc/self/status every line but "
    "Cpus_allowed*, Mems_allowed*, Seccomp* and CapEff",
)


def _manifest(name: str, live: bool, hostname: bool, visible: Mapping[str, str], left_out: tuple[LeftOut, ...],
              check_error: str | None, reader: CopyingReader) -> dict[str, Any]:
    """``numabind/gather.json``: what the archive is and what it left out."""
    from ._version import __version__

    data: dict[str, Any] = {
        "numabind": __version__, "name": name, "gathered_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": "this machine (root /)" if live else "a replayed root",
        "hostname": _hostname(reader, live) if hostname else None,
        "environment": dict(visible), "check_error": check_error,
        "caps": {"bytes": reader.budget.max_bytes, "file_bytes": reader.budget.max_file_bytes,
                 "seconds": reader.budget.seconds},
        "never_gathered": list(NEVER_GATHERED),
        "left_out": [item.to_dict() for item in left_out],
    }
    if live:
        uname = os.uname()
        data["kernel"] = {"release": uname.release, "machine": uname.machine}
    return data
