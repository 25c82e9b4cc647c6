"""A guest's kernel and initramfs, prepared once into the cache (``python3 -m tests.vm.harness prepare``): the
apt packages the harness needs, the Debian kernels (fetched by ``tools/vm_kernel.py``), the busybox initramfs
whose init script mounts the host's root over 9p and runs the command, and :func:`problems`: why a guest
cannot run here."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import shutil
import struct
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .arm64 import arm64_dir, arm64_problems, prepare_arm64_userland
from .specs import (BOOT_MARKER, DEFAULT_KERNEL, DONE_MARKER, GUEST_SHARE, KERNELS, REPO_ROOT, HarnessError,
                    ProgressFn, cache_dir, kernel_spec, quiet, read_json, run_logged)


def load_vm_kernel():
    """``tools/vm_kernel.py`` (tools/ is not a package), loaded once by its path, on the host only: the guest
    imports this file too, and compiling the tool there would cost seconds of emulated start-up."""
    name = "numabind_tools_vm_kernel"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "tools" / "vm_kernel.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod     # one module (one FetchError) however often the harness is imported
        spec.loader.exec_module(mod)
    return sys.modules[name]


# ----------------------------------------------------------------------------- apt packages and QEMU
#: Debian packages the harness needs, each with the file that shows it is installed.
APT_PACKAGES: tuple[tuple[str, str], ...] = (
    ("qemu-system-x86", "qemu-system-x86_64"),
    ("busybox-static", "/bin/busybox"),
    ("numactl", "numactl"),              # the numactl backend and the discovery cross-check
    ("hwloc-nox", "lstopo-no-graphics"),  # the discovery cross-check
    # the arm64 guest: its QEMU, and the cross compiler of numabind's C core
    ("qemu-system-arm", "qemu-system-aarch64"),
    ("gcc-aarch64-linux-gnu", "aarch64-linux-gnu-gcc"),
    ("libc6-dev-arm64-cross", "/usr/aarch64-linux-gnu/include/stdio.h"),
)


def qemu_name(arch: str = "amd64") -> str:
    if arch == "arm64":
        return os.environ.get("NUMABIND_VM_QEMU_ARM64") or "qemu-system-aarch64"
    return os.environ.get("NUMABIND_VM_QEMU") or "qemu-system-x86_64"


def qemu_binary(arch: str = "amd64") -> str | None:
    return shutil.which(qemu_name(arch))


def _is_static_elf(path: str) -> bool:
    """True for an ELF executable without a program interpreter (usable in an initramfs)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:
                return False
            phoff, = struct.unpack_from("<Q", head, 0x20)
            phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return False
    return all(struct.unpack_from("<I", table, k * phentsize)[0] != 3 for k in range(phnum))  # PT_INTERP


def _package_present(package: str, probe: str) -> bool:
    if package == "busybox-static":
        return _is_static_elf(probe)
    if probe.startswith("/"):
        return os.path.exists(probe)
    if package == "qemu-system-x86":
        return qemu_binary() is not None
    if package == "qemu-system-arm":
        return qemu_binary("arm64") is not None
    return shutil.which(probe) is not None


def missing_packages() -> list[str]:
    return [pkg for pkg, probe in APT_PACKAGES if not _package_present(pkg, probe)]


# ----------------------------------------------------------------------------- the cache
@dataclass(frozen=True)
class Artifacts:
    """What a prepared cache holds: the kernel image, the initramfs and their origin."""

    kernel: Path          # uncompressed vmlinux (PVH ELF) when possible, else the bzImage
    initramfs: Path
    release: str          # e.g. "6.1.0-57-amd64"
    package: str

    def describe(self) -> str:
        return f"kernel {self.release} ({self.kernel.name}) from {self.package}, initramfs {self.initramfs}"


def _kernel_dir(kernel: str | None = None) -> Path:
    return cache_dir() / kernel_spec(kernel).cache_name


def _initramfs_path(kernel: str | None = None) -> Path:
    return cache_dir() / kernel_spec(kernel).initramfs_name


def cached_artifacts(kernel: str | None = None) -> Artifacts | None:
    """The prepared kernel and initramfs, or None when ``prepare`` has not run (or is stale)."""
    kdir = _kernel_dir(kernel)
    kman = read_json(kdir / "manifest.json")
    initramfs = _initramfs_path(kernel)
    iman = read_json(initramfs.with_suffix(".json"))
    if not kman or not iman:
        return None
    image = kdir / kman["image"]
    if not image.is_file() or not initramfs.is_file():
        return None
    if iman.get("digest") != _initramfs_digest(kman, kernel):
        return None
    return Artifacts(image, initramfs, kman["release"], kman["package"])


def _refresh_initramfs(kernel: str | None = None) -> None:
    """Rebuild a stale initramfs (this file's init script changed) when the kernel is cached: no network."""
    kman = load_vm_kernel().cached_manifest(_kernel_dir(kernel))
    if kman:
        build_initramfs(kman, kernel=kernel)


def problems(kernel: str | None = None) -> list[str]:
    """Why a guest with ``kernel`` (default: :data:`DEFAULT_KERNEL`) cannot run here (empty when it can)."""
    out = []
    arch = kernel_spec(kernel).arch
    if qemu_binary(arch) is None:
        out.append(f"{qemu_name(arch)} not found (apt package "
                   f"{'qemu-system-arm' if arch == 'arm64' else 'qemu-system-x86'})")
    if arch == "arm64":
        out += arm64_problems()
    try:
        arts = cached_artifacts(kernel)
        if arts is None:
            _refresh_initramfs(kernel)
            arts = cached_artifacts(kernel)
    except HarnessError as exc:
        out.append(str(exc))
    else:
        if arts is None:
            name = kernel_spec(kernel).name
            out.append(f"no prepared kernel/initramfs in {cache_dir()}"
                       + ("" if name == DEFAULT_KERNEL else f" for kernel {name}"))
    return out


# ----------------------------------------------------------------------------- prepare
def install_packages(progress: ProgressFn = quiet) -> list[str]:
    """apt-get install what is missing; returns the packages installed."""
    missing = missing_packages()
    if not missing:
        return []
    if shutil.which("apt-get") is None:
        raise HarnessError(f"packages {', '.join(missing)} are missing and there is no apt-get to install them")
    sudo = [] if os.geteuid() == 0 else (["sudo", "-n"] if shutil.which("sudo") else None)
    if sudo is None:
        raise HarnessError(f"packages {', '.join(missing)} are missing; install them as root: "
                           f"apt-get install -y {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        run_logged(sudo + ["apt-get", "install", "-y", "--no-install-recommends", *missing], progress, env=env)
    except HarnessError:
        run_logged(sudo + ["apt-get", "update"], progress, env=env)
        run_logged(sudo + ["apt-get", "install", "-y", "--no-install-recommends", *missing], progress, env=env)
    still = missing_packages()
    if still:
        raise HarnessError(f"apt-get install did not provide {', '.join(still)}")
    return missing


def fetch_kernel(progress: ProgressFn = quiet, refresh: bool = False, kernel: str | None = None) -> dict:
    """Download the Debian kernel package and keep only the image and the modules the guest needs
    (``tools/vm_kernel.py``, into the kernel's cache folder)."""
    spec = kernel_spec(kernel)
    vm_kernel = load_vm_kernel()
    cache_dir().mkdir(parents=True, exist_ok=True)
    suites = (spec.suite,) if spec.suite else ()
    # the backports configuration keeps the folder it always had
    apt_root = cache_dir() / "apt" / (spec.suite if spec.arch == "amd64" and spec.suite
                                      else f"{spec.arch}-{'+'.join(suites or (vm_kernel.DEFAULT_SUITE,))}")
    try:
        return vm_kernel.fetch(_kernel_dir(kernel), spec.arch, suites=suites, modules=spec.modules,
                               release_prefix=spec.release_prefix, apt_root=apt_root, refresh=refresh,
                               progress=progress, extra={"kernel": spec.name, "suite": spec.suite})
    except vm_kernel.FetchError as exc:
        raise HarnessError(str(exc)) from exc


#: The start of both init scripts: busybox, the kernel's file systems, the 9p modules and the host's root.
INIT_START = r"""#!/bin/busybox sh
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
say() { echo "numavm: $*" > /dev/console; }
die() { say "FATAL: $*"; poweroff -f; }
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in @MODULES@; do insmod /modules/$m.ko || say "insmod $m failed"; done
o="trans=virtio,version=9p2000.L,msize=262144"
mount -t 9p -o "$o,ro,cache=loose" hostroot /host || die "cannot mount the host root (9p tag hostroot)"
"""


INIT_SCRIPT = INIT_START + r"""# Keep the host's /tmp and /run reachable: the guest covers them with its own tmpfs below.
mkdir -p /hidden/tmp /hidden/run && mount --bind /host/tmp /hidden/tmp && mount --bind /host/run /hidden/run \
  || die "cannot keep the host's /tmp and /run reachable"
mount -t proc proc /host/proc && mount -t sysfs sysfs /host/sys && mount -t devtmpfs devtmpfs /host/dev \
  && mount -t tmpfs -o mode=1777 tmpfs /host/tmp && mount -t tmpfs tmpfs /host/run \
  || die "cannot mount proc/sys/dev/tmp inside the host root"
mkdir -p /host/dev/shm /host/dev/pts && mount -t tmpfs -o mode=1777 tmpfs /host/dev/shm
mount -t cgroup2 cgroup2 /host/sys/fs/cgroup || say "no cgroup2"
mkdir -p /host@SHARE@ && mount -t 9p -o "$o" results /host@SHARE@ || die "cannot mount the results share"
# Host folders under /tmp or /run the run needs (a checkout or a venv there) are bound back in.
if [ -f /host@SHARE@/binds ]; then
  while read -r p; do
    case "$p" in /tmp/*|/run/*) ;; *) continue ;; esac
    mkdir -p "/host$p" && mount --bind "/hidden$p" "/host$p" || die "cannot bind the host's $p into the guest"
  done < /host@SHARE@/binds
fi
echo "@BOOTED@ uptime=$(cut -d' ' -f1 /proc/uptime)" > /dev/console
chroot /host /bin/sh @SHARE@/run.sh > /host@SHARE@/output.log 2>&1 < /dev/null
rc=$?
echo $rc > /host@SHARE@/exit_code
dmesg > /host@SHARE@/dmesg.log
echo "@DONE@ rc=$rc uptime=$(cut -d' ' -f1 /proc/uptime)" > /dev/console
sync
umount /host@SHARE@
poweroff -f
"""


INIT_SCRIPT_ARM64 = INIT_START + r"""mkdir -p /results && mount -t 9p -o "$o" results /results || die "cannot mount the results share"
# The command runs in the arm64 userland: a tmpfs root holding its folders (bound from the host's copy,
# named in the share's file "root"), the guest's own proc/sys/dev/tmp/run, and the host folders it needs.
read -r userland < /results/root || die "the results share names no arm64 userland"
r=/newroot
mkdir -p $r && mount -t tmpfs -o mode=755 tmpfs $r || die "cannot mount the new root's tmpfs"
for d in /host$userland/*; do
  n=${d##*/}
  if [ -L "$d" ]; then cp -a "$d" "$r/$n"
  elif [ -d "$d" ]; then mkdir "$r/$n" && mount --bind "$d" "$r/$n" || die "cannot bind $userland/$n"
  fi
done
mkdir -p $r/proc $r/sys $r/dev $r/tmp $r/run
mount -t proc proc $r/proc && mount -t sysfs sysfs $r/sys && mount -t devtmpfs devtmpfs $r/dev \
  && mount -t tmpfs -o mode=1777 tmpfs $r/tmp && mount -t tmpfs tmpfs $r/run \
  || die "cannot mount proc/sys/dev/tmp inside the new root"
mkdir -p $r/dev/shm $r/dev/pts && mount -t tmpfs -o mode=1777 tmpfs $r/dev/shm
mount -t cgroup2 cgroup2 $r/sys/fs/cgroup || say "no cgroup2"
mkdir -p $r@SHARE@ && mount --bind /results $r@SHARE@ || die "cannot bind the results share"
# A folder at TARGET inside the new root. Where a folder on the way is one of the userland's, bound read-only
# (a checkout under /var/tmp, say), that folder becomes a tmpfs holding binds of what it held, so the rest of
# the way can be made.
mkpoint() {
  mkdir -p "$r$1" 2>/dev/null && return 0
  p=""
  for c in $(echo "$1" | tr '/' ' '); do
    if [ -d "$r$p/$c" ]; then p="$p/$c"; continue; fi
    [ -d "/host$userland$p" ] || return 1
    mount -t tmpfs -o mode=755 tmpfs "$r$p" || return 1
    for d in "/host$userland$p"/* "/host$userland$p"/.[!.]*; do
      [ -e "$d" ] || [ -L "$d" ] || continue
      n=${d##*/}
      if [ -L "$d" ]; then cp -a "$d" "$r$p/$n"
      elif [ -d "$d" ]; then mkdir "$r$p/$n" && mount --bind "$d" "$r$p/$n"
      else touch "$r$p/$n" && mount --bind "$d" "$r$p/$n"
      fi
    done
    break
  done
  mkdir -p "$r$1"
}
# Host folders (the checkout, pure-Python packages) and files (the arm64 C core over the x86 one), each
# "SOURCE|TARGET": the host's SOURCE appears at TARGET.
while IFS='|' read -r src dst; do
  [ -n "$src" ] || continue
  if [ -d "/host$src" ]; then mkpoint "$dst" || die "cannot make $dst in the guest's root"
  elif [ ! -e "$r$dst" ]; then die "cannot bind the file $src over $dst: $dst is missing"
  fi
  mount --bind "/host$src" "$r$dst" || die "cannot bind the host's $src into the guest at $dst"
done < /results/binds
echo "@BOOTED@ uptime=$(cut -d' ' -f1 /proc/uptime)" > /dev/console
chroot $r /bin/sh @SHARE@/run.sh > /results/output.log 2>&1 < /dev/null
rc=$?
echo $rc > /results/exit_code
dmesg > /results/dmesg.log
echo "@DONE@ rc=$rc uptime=$(cut -d' ' -f1 /proc/uptime)" > /dev/console
sync
umount $r@SHARE@
umount /results
poweroff -f
"""


def _init_script(modules: Sequence[str], arch: str = "amd64") -> str:
    text = INIT_SCRIPT_ARM64 if arch == "arm64" else INIT_SCRIPT
    return (text.replace("@MODULES@", " ".join(modules)).replace("@SHARE@", GUEST_SHARE)
            .replace("@BOOTED@", BOOT_MARKER).replace("@DONE@", DONE_MARKER))


def _busybox_bytes(arch: str = "amd64") -> bytes:
    if arch == "arm64":   # busybox-static:arm64 of the arm64 userland
        path = arm64_dir() / "root" / "bin" / "busybox"
        if not path.is_file():
            raise HarnessError(f"{path} is missing: the arm64 userland is not built "
                               f"(python3 -m tests.vm.harness prepare, or bash scripts/arm64_userland.sh)")
        return path.read_bytes()
    if not _is_static_elf("/bin/busybox"):
        raise HarnessError("/bin/busybox is missing or not static; install busybox-static "
                           "(python3 -m tests.vm.harness prepare)")
    return Path("/bin/busybox").read_bytes()


def _initramfs_digest(kman: Mapping, kernel: str | None = None) -> str:
    arch = kernel_spec(kernel).arch
    h = hashlib.sha256()
    h.update(_init_script(kman["modules"], arch).encode())
    h.update(_busybox_bytes(arch))
    for mod in kman["modules"]:
        h.update((_kernel_dir(kernel) / "modules" / f"{mod}.ko").read_bytes())
    return h.hexdigest()


def _cpio_newc(entries: Iterable[tuple[str, int, bytes]]) -> bytes:
    """An uncompressed cpio archive in the "newc" format the kernel unpacks; entries: (path, mode, data)."""
    out = io.BytesIO()

    def pad() -> None:
        out.write(b"\x00" * (-out.tell() % 4))

    ino = 1
    for path, mode, data in [*entries, ("TRAILER!!!", 0, b"")]:
        name = path.encode() + b"\x00"
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name), 0)
        out.write(b"070701" + b"".join(b"%08X" % v for v in fields))
        out.write(name)
        pad()
        out.write(data)
        pad()
        ino += 1
    return out.getvalue()


def build_initramfs(kman: Mapping, progress: ProgressFn = quiet, kernel: str | None = None) -> Path:
    target = _initramfs_path(kernel)
    stamp = target.with_suffix(".json")
    digest = _initramfs_digest(kman, kernel)
    old = read_json(stamp)
    if old and old.get("digest") == digest and target.is_file():
        progress(f"initramfs up to date: {target}")
        return target
    arch = kernel_spec(kernel).arch
    d, x, r = 0o040755, 0o100755, 0o100644
    entries = [(p, d, b"") for p in ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "proc", "sys", "dev",
                                     "host", "modules", "tmp")]
    entries.append(("bin/busybox", x, _busybox_bytes(arch)))
    entries.append(("init", x, _init_script(kman["modules"], arch).encode()))
    for mod in kman["modules"]:
        entries.append((f"modules/{mod}.ko", r, (_kernel_dir(kernel) / "modules" / f"{mod}.ko").read_bytes()))
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")  # concurrent sessions may rebuild at once
    tmp.write_bytes(_cpio_newc(entries))
    tmp.replace(target)
    stamp.write_text(json.dumps({"digest": digest}) + "\n")
    progress(f"initramfs built: {target} ({target.stat().st_size >> 10} KiB)")
    return target


def prepare(progress: ProgressFn = print, refresh: bool = False,
            kernels: Sequence[str] | None = None) -> list[Artifacts]:
    """Install what is missing and build the cache for ``kernels`` (default: all of :data:`KERNELS`);
    fast when everything is there already."""
    installed = install_packages(progress)
    if installed:
        progress(f"installed {', '.join(installed)}")
    out = []
    for name in kernels or list(KERNELS):
        kman = fetch_kernel(progress, refresh=refresh, kernel=name)
        if kernel_spec(name).arch == "arm64":
            prepare_arm64_userland(progress)
        build_initramfs(kman, progress, kernel=name)
        arts = cached_artifacts(name)
        if arts is None:
            raise HarnessError(f"prepare finished but the cache in {cache_dir()} is not usable for kernel {name}")
        out.append(arts)
    return out


