"""Boot a QEMU guest with several emulated NUMA nodes and run a command in it.

The guest runs a stock Debian kernel under QEMU's software emulation (TCG), a
tiny busybox initramfs, and then ``chroot``s into the host's own root file
system, shared read-only over 9p: the guest sees the same Python, the same
site-packages and the same checkout as the host. A second, writable 9p share
(one folder per run) carries the command script in and the results out.

Command line::

    python3 -m tests.vm.harness prepare            # apt packages, kernels, initramfs (idempotent)
    python3 -m tests.vm.harness status             # what is ready, what is missing
    python3 -m tests.vm.harness run [-t TOPO] [-k KERNEL] -- CMD ARGS...   # boot, run CMD inside, power off

Three Debian kernels are prepared (:data:`KERNELS`): ``6.1``, bookworm's own ``linux-image-amd64``
(the default: every test that does not ask for another), ``6.12`` from bookworm-backports, which
has weighted interleave (``MPOL_WEIGHTED_INTERLEAVE``, Linux 6.9+), and ``arm64``, bookworm's
``linux-image-arm64`` under ``qemu-system-aarch64 -M virt -cpu max``. ``tools/vm_kernel.py`` fetches
them; a suite or an architecture other than the system's goes through a private apt configuration in
the cache (its own sources list, package lists and archive folder: the system's apt sources are never
changed), so apt checks the signed index and the package's SHA256 as it does for any download.

The arm64 guest cannot run the host's x86 Python: it chroots into an arm64 Debian userland
(``scripts/arm64_userland.sh``: python3.11, cffi's backend, libnuma, numactl, busybox) and sees the
checkout and the host's pure-Python packages (pytest) bound in at their own paths, with numabind's C
core cross-compiled for arm64 (``aarch64-linux-gnu-gcc``) bound over the checkout's x86 one.

Everything downloaded or built lives in the cache folder (``tests/vm/_cache``,
or ``$NUMABIND_VM_CACHE``), which git ignores.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
DEFAULT_CACHE = HERE / "_cache"


def _load_vm_kernel():
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


def __getattr__(name: str):
    if name == "vm_kernel":     # harness.vm_kernel: the tool, loaded when first asked for
        return _load_vm_kernel()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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

#: Kernel modules the amd64 guest needs for the 9p shares (the Debian kernel builds them as modules); the
#: same as tools/vm_kernel.py's default for amd64, which setup.sh fetches with (a test holds them equal).
MODULES = ("virtio", "virtio_ring", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci",
           "netfs", "fscache", "9pnet", "9pnet_virtio", "9p")
#: The arm64 guest's (Debian's arm64 6.1 builds virtio and virtio_ring in), as tools/vm_kernel.py's for arm64.
MODULES_ARM64 = ("virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci", "netfs", "fscache", "9pnet",
                 "9pnet_virtio", "9p")


@dataclass(frozen=True)
class KernelSpec:
    """A Debian kernel the guest can boot: ``suite`` None takes ``linux-image-amd64`` from the system's
    own apt sources; a suite name (``bookworm-backports``) fetches it from that suite of ``mirror``
    through a private apt configuration. ``modules``: those the guest loads for its 9p shares (the
    rest are built into that kernel); ``release_prefix``: what the kernel release must start with."""

    name: str
    description: str
    modules: tuple[str, ...]
    release_prefix: str
    suite: str | None = None
    cache_name: str = "kernel"          # folder under the cache
    arch: str = "amd64"                 # Debian's name of the guest's architecture (tools/vm_kernel.ARCHES)

    @property
    def initramfs_name(self) -> str:
        return "initramfs.cpio" if self.cache_name == "kernel" else f"initramfs-{self.name}.cpio"


KERNELS: Mapping[str, KernelSpec] = {
    k.name: k
    for k in (
        KernelSpec("6.1", "Debian bookworm's linux-image-amd64 (Linux 6.1: no weighted interleave)", MODULES, "6.1."),
        # Debian's 6.12 builds virtio, virtio_ring and virtio_pci in, and fscache into netfs
        KernelSpec("6.12", "Debian bookworm-backports' linux-image-amd64 (Linux 6.12: weighted interleave)",
                   ("netfs", "9pnet", "9pnet_virtio", "9p"), "6.12.", suite="bookworm-backports",
                   cache_name="kernel-6.12"),
        # arm64 (Grace, Kunpeng, Graviton): the same topologies on QEMU's virt board, NUMA from its device tree
        KernelSpec("arm64", "Debian bookworm's linux-image-arm64 (Linux 6.1) under qemu-system-aarch64 -M virt "
                   "-cpu max (TCG), chrooted into an arm64 userland", MODULES_ARM64, "6.1.",
                   cache_name="kernel-arm64", arch="arm64"),
    )
}
DEFAULT_KERNEL = "6.1"
GUEST_SHARE = "/tmp/numavm"          # where the writable share appears inside the guest (after chroot)
BOOT_MARKER = "numavm-booted"
DONE_MARKER = "numavm-done"
KERNEL_CMDLINE = ("console=ttyS0 panic=-1 loglevel=4 numa_balancing=disable mitigations=off lpj=10000000 "
                  "rdinit=/init")
#: arm64: the virt board's PL011 console; no lpj= (the generic timer needs no delay-loop calibration)
KERNEL_CMDLINE_ARM64 = "console=ttyAMA0 panic=-1 loglevel=4 numa_balancing=disable mitigations=off rdinit=/init"
#: arm64: the CPU QEMU emulates ($NUMABIND_VM_CPU_ARM64); impdef pointer authentication is much cheaper under TCG
ARM64_CPU = "max,pauth-impdef=on"
#: the interpreter of the arm64 userland (scripts/arm64_userland.sh)
ARM64_PYTHON = "/usr/bin/python3.11"

ProgressFn = Callable[[str], None]


class HarnessError(RuntimeError):
    """The guest cannot be prepared or started; the message says why and what to do."""


def _quiet(msg: str) -> None:
    return None


# ----------------------------------------------------------------------------- topologies
@dataclass(frozen=True)
class NodeSpec:
    """One emulated NUMA node: its CPUs (empty: a memory-only node) and its memory."""

    cpus: tuple[int, ...]
    mem_mib: int


@dataclass(frozen=True)
class TopologySpec:
    """A guest machine: nodes, and SLIT distances given to QEMU (``-numa dist``).

    ``distances`` lists (src, dst, value) for every ordered pair of distinct
    nodes, or is empty: then QEMU builds no SLIT and Linux reports 10 locally
    and 20 remotely.
    """

    name: str
    description: str
    nodes: tuple[NodeSpec, ...]
    distances: tuple[tuple[int, int, int], ...] = ()
    sockets: int = 1                 # CPUs are split evenly into this many packages
    timeout_s: float = 600           # a whole guest run, unless $NUMABIND_VM_TIMEOUT says otherwise
    #: ACPI HMAT figures (QEMU ``-machine hmat=on``): (initiator node, target node, latency in ns,
    #: bandwidth in MB/s) for every pair; Linux shows the best initiator's as nodeN/access0/initiators
    hmat: tuple[tuple[int, int, int, int], ...] = ()

    @property
    def ncpus(self) -> int:
        return sum(len(n.cpus) for n in self.nodes)

    @property
    def mem_mib(self) -> int:
        return sum(n.mem_mib for n in self.nodes)

    def node_cpus(self, node: int) -> frozenset[int]:
        return frozenset(self.nodes[node].cpus)

    @property
    def cpu_nodes(self) -> tuple[int, ...]:
        return tuple(i for i, n in enumerate(self.nodes) if n.cpus)

    @property
    def memory_only_nodes(self) -> tuple[int, ...]:
        return tuple(i for i, n in enumerate(self.nodes) if not n.cpus)

    def distance(self, src: int, dst: int) -> int:
        if src == dst:
            return 10
        for s, d, v in self.distances:
            if (s, d) == (src, dst):
                return v
        return 20

    def distance_matrix(self) -> list[list[int]]:
        n = len(self.nodes)
        return [[self.distance(a, b) for b in range(n)] for a in range(n)]

    def qemu_args(self) -> list[str]:
        cores = self.ncpus // self.sockets
        args = ["-smp", f"{self.ncpus},sockets={self.sockets},cores={cores},threads=1", "-m", f"{self.mem_mib}M"]
        for i, node in enumerate(self.nodes):
            args += ["-object", f"memory-backend-ram,id=mem{i},size={node.mem_mib}M"]
            spec = f"node,nodeid={i},memdev=mem{i}"
            for lo, hi in _ranges(node.cpus):
                spec += f",cpus={lo}" if lo == hi else f",cpus={lo}-{hi}"
            args += ["-numa", spec]
        for src, dst, val in self.distances:
            args += ["-numa", f"dist,src={src},dst={dst},val={val}"]
        for init, target, latency, bandwidth in self.hmat:
            common = f"hmat-lb,initiator={init},target={target},hierarchy=memory"
            args += ["-numa", f"{common},data-type=access-latency,latency={latency}",
                     "-numa", f"{common},data-type=access-bandwidth,bandwidth={bandwidth}M"]
        return args

    @property
    def machine(self) -> str:
        """QEMU's ``-machine`` value."""
        return "pc,hmat=on" if self.hmat else "pc"


def _ranges(ids: Iterable[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for i in sorted(ids):
        if out and out[-1][1] == i - 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def _all_pairs(matrix: Sequence[Sequence[int]]) -> tuple[tuple[int, int, int], ...]:
    return tuple((a, b, matrix[a][b]) for a in range(len(matrix)) for b in range(len(matrix)) if a != b)


TOPOLOGIES: Mapping[str, TopologySpec] = {
    t.name: t
    for t in (
        TopologySpec(
            name="2n",
            description="2 nodes x 2 CPUs, 512 MiB each, no SLIT (distances 10/20)",
            nodes=(NodeSpec((0, 1), 512), NodeSpec((2, 3), 512)),
            sockets=2,
        ),
        TopologySpec(   # weighted interleave by bandwidth (tests/vm/test_vm_weighted.py)
            name="hmat",
            description="like 2n, with ACPI HMAT: node 0 reads at 30000 MB/s, node 1 at 10000 MB/s (as DRAM and "
                        "a slower tier)",
            nodes=(NodeSpec((0, 1), 512), NodeSpec((2, 3), 512)),
            sockets=2,
            hmat=((0, 0, 10, 30000), (0, 1, 20, 10000), (1, 0, 20, 10000), (1, 1, 10, 10000)),
        ),
        TopologySpec(
            name="mem-only",
            description="nodes 0 (CPUs 0-1) and 1 (CPUs 2-3), 512 MiB each, plus node 2: 256 MiB, no CPUs (CXL-like)",
            nodes=(NodeSpec((0, 1), 512), NodeSpec((2, 3), 512), NodeSpec((), 256)),
            distances=_all_pairs([[10, 21, 30], [21, 10, 30], [30, 30, 10]]),
            sockets=2,
        ),
        TopologySpec(
            name="asym",
            description="3 nodes (CPUs 0-1, 2, 3), 384 MiB each, asymmetric SLIT (0->1 is 16, 1->0 is 26)",
            nodes=(NodeSpec((0, 1), 384), NodeSpec((2,), 384), NodeSpec((3,), 384)),
            distances=_all_pairs([[10, 16, 32], [26, 10, 21], [32, 21, 10]]),
            sockets=4,
        ),
        TopologySpec(   # numactl's own test/ scripts, through numactl and numabind (test_vm_numactl_scripts.py)
            name="numactl-scripts",
            description="like mem-only (0: CPUs 0-1, 1: CPUs 2-3, 2: memory only), for numactl's test/ scripts",
            nodes=(NodeSpec((0, 1), 512), NodeSpec((2, 3), 512), NodeSpec((), 256)),
            distances=_all_pairs([[10, 21, 30], [21, 10, 30], [30, 30, 10]]),
            sockets=2,
            timeout_s=2400,
        ),
        TopologySpec(   # the host test suite itself runs here (tests/vm/test_vm_suite.py)
            name="suite",
            description="like asym (3 nodes: CPUs 0-1, 2, 3), 512 MiB each, for the suite's kernel tests",
            nodes=(NodeSpec((0, 1), 512), NodeSpec((2,), 512), NodeSpec((3,), 512)),
            distances=_all_pairs([[10, 16, 32], [26, 10, 21], [32, 21, 10]]),
            sockets=4,
            timeout_s=2400,
        ),
    )
}
DEFAULT_TOPOLOGY = "2n"


def topology(name: str) -> TopologySpec:
    try:
        return TOPOLOGIES[name]
    except KeyError:
        raise HarnessError(f"unknown VM topology {name!r}; known: {', '.join(TOPOLOGIES)}") from None


def kernel_spec(name: str | None = None) -> KernelSpec:
    try:
        return KERNELS[name or DEFAULT_KERNEL]
    except KeyError:
        raise HarnessError(f"unknown VM kernel {name!r}; known: {', '.join(KERNELS)}") from None


# ----------------------------------------------------------------------------- cache
def cache_dir() -> Path:
    return Path(os.environ.get("NUMABIND_VM_CACHE") or DEFAULT_CACHE).resolve()


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


@dataclass(frozen=True)
class Artifacts:
    """What a prepared cache holds: the kernel image, the initramfs and their origin."""

    kernel: Path          # uncompressed vmlinux (PVH ELF) when possible, else the bzImage
    initramfs: Path
    release: str          # e.g. "6.1.0-57-amd64"
    package: str

    def describe(self) -> str:
        return f"kernel {self.release} ({self.kernel.name}) from {self.package}, initramfs {self.initramfs}"


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _kernel_dir(kernel: str | None = None) -> Path:
    return cache_dir() / kernel_spec(kernel).cache_name


def _initramfs_path(kernel: str | None = None) -> Path:
    return cache_dir() / kernel_spec(kernel).initramfs_name


def cached_artifacts(kernel: str | None = None) -> Artifacts | None:
    """The prepared kernel and initramfs, or None when ``prepare`` has not run (or is stale)."""
    kdir = _kernel_dir(kernel)
    kman = _read_json(kdir / "manifest.json")
    initramfs = _initramfs_path(kernel)
    iman = _read_json(initramfs.with_suffix(".json"))
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
    kman = _load_vm_kernel().cached_manifest(_kernel_dir(kernel))
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
def _run(argv: Sequence[str], progress: ProgressFn, **kw) -> subprocess.CompletedProcess:
    progress("$ " + shlex.join(argv))
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if proc.returncode != 0:
        raise HarnessError(f"{shlex.join(argv)} exited with {proc.returncode}:\n{proc.stdout[-4000:]}")
    return proc


def install_packages(progress: ProgressFn = _quiet) -> list[str]:
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
        _run(sudo + ["apt-get", "install", "-y", "--no-install-recommends", *missing], progress, env=env)
    except HarnessError:
        _run(sudo + ["apt-get", "update"], progress, env=env)
        _run(sudo + ["apt-get", "install", "-y", "--no-install-recommends", *missing], progress, env=env)
    still = missing_packages()
    if still:
        raise HarnessError(f"apt-get install did not provide {', '.join(still)}")
    return missing


def fetch_kernel(progress: ProgressFn = _quiet, refresh: bool = False, kernel: str | None = None) -> dict:
    """Download the Debian kernel package and keep only the image and the modules the guest needs
    (``tools/vm_kernel.py``, into the kernel's cache folder)."""
    spec = kernel_spec(kernel)
    vm_kernel = _load_vm_kernel()
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


INIT_SCRIPT = r"""#!/bin/busybox sh
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
# Keep the host's /tmp and /run reachable: the guest covers them with its own tmpfs below.
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


INIT_SCRIPT_ARM64 = r"""#!/bin/busybox sh
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
mkdir -p /results && mount -t 9p -o "$o" results /results || die "cannot mount the results share"
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


def build_initramfs(kman: Mapping, progress: ProgressFn = _quiet, kernel: str | None = None) -> Path:
    target = _initramfs_path(kernel)
    stamp = target.with_suffix(".json")
    digest = _initramfs_digest(kman, kernel)
    old = _read_json(stamp)
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


# ----------------------------------------------------------------------------- the arm64 userland and C core
def arm64_dir() -> Path:
    """Where scripts/arm64_userland.sh puts the arm64 userland (``root/``, ``headers/``) and the harness the
    cross-compiled C core (``native/``)."""
    return cache_dir() / "arm64"


def arm64_cc() -> str:
    return os.environ.get("NUMABIND_VM_ARM64_CC") or "aarch64-linux-gnu-gcc"


def _native_sources() -> list[Path]:
    return [REPO_ROOT / "csrc" / "numabind.c", REPO_ROOT / "csrc" / "numabind.h", REPO_ROOT / "build_ffi.py"]


def _load_build_ffi():
    """The project's cffi builder (build_ffi.py), for the C source of numabind._native and the version."""
    spec = importlib.util.spec_from_file_location("numabind_build_ffi", REPO_ROOT / "build_ffi.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _native_digest(version: str) -> str:
    h = hashlib.sha256(f"{arm64_cc()}\0{version}\0".encode())
    for path in _native_sources():
        h.update(path.read_bytes())
    h.update((arm64_dir() / "userland.txt").read_bytes() if (arm64_dir() / "userland.txt").is_file() else b"")
    return h.hexdigest()


def arm64_native(build: bool = False, progress: ProgressFn = _quiet) -> Path | None:
    """numabind's C core cross-compiled for arm64 (``native/_native.abi3.so``), the same way
    build_ffi.py compiles it for the host (cffi's generated C, ``-O2 -Wall -Wextra``, NB_VERSION, -ldl),
    against the arm64 Python headers. ``build``: compile it when it is missing or its sources changed
    (about 2 s, no network); else None when it is not up to date."""
    version = _read_version()
    out = arm64_dir() / "native" / "_native.abi3.so"
    stamp = out.with_suffix(".json")
    digest = _native_digest(version)
    old = _read_json(stamp)
    if old and old.get("digest") == digest and out.is_file():
        return out
    if not build:
        return None
    cc = shutil.which(arm64_cc())
    if cc is None:
        raise HarnessError(f"{arm64_cc()} not found: the arm64 C core cannot be compiled (apt packages "
                           f"gcc-aarch64-linux-gnu libc6-dev-arm64-cross)")
    inc = arm64_dir() / "headers" / "usr" / "include"
    if not (inc / "python3.11" / "Python.h").is_file():
        raise HarnessError(f"no arm64 Python headers in {inc} (bash scripts/arm64_userland.sh)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="native-", dir=out.parent) as tmp:
        csource = Path(tmp) / "_native.c"
        _load_build_ffi().ffibuilder.emit_c_code(str(csource))
        target = Path(tmp) / out.name
        argv = [cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter",
                "-I", str(REPO_ROOT / "csrc"), "-I", str(inc), "-I", str(inc / "python3.11"),
                "-I", str(inc / "aarch64-linux-gnu" / "python3.11"), f'-DNB_VERSION="{version}"',
                str(csource), str(REPO_ROOT / "csrc" / "numabind.c"), "-ldl", "-o", str(target)]
        _run(argv, progress)
        target.replace(out)
    stamp.write_text(json.dumps({"digest": digest, "version": version}) + "\n")
    progress(f"arm64 C core built: {out}")
    return out


def _read_version() -> str:
    text = (REPO_ROOT / "src" / "numabind" / "__init__.py").read_text()
    m = re.search(r"^__version__\s*=\s*[\"']([^\"'\\]+)[\"']", text, flags=re.M)
    if not m:
        raise HarnessError("src/numabind/__init__.py has no __version__ line")
    return m[1]


def _arm64_python_ok() -> bool:
    return (arm64_dir() / "root" / ARM64_PYTHON.lstrip("/")).is_file()


def arm64_problems() -> list[str]:
    """Why the arm64 guest's userland or C core is not ready (rebuilding a stale C core when it can)."""
    if not _arm64_python_ok():
        return [f"no arm64 userland in {arm64_dir()} (python3 -m tests.vm.harness prepare, or "
                f"bash scripts/arm64_userland.sh)"]
    if not (REPO_ROOT / "src" / "numabind" / "_native.abi3.so").is_file():
        return [f"{REPO_ROOT / 'src/numabind/_native.abi3.so'} is missing: the arm64 C core is bound over the "
                f"checkout's own, built in place (pip install -e .)"]
    try:
        arm64_native(build=True)
        arm64_wheels()
    except HarnessError as exc:
        return [str(exc)]
    return []


#: numabind's runtime dependencies with compiled code: their arm64 wheels, unpacked into :func:`arm64_site`
ARM64_WHEELS = ("psutil",)


def arm64_site() -> Path:
    """arm64 builds of numabind's dependencies with compiled code (scripts/arm64_wheels.sh), before the host's
    own on the arm64 guest's PYTHONPATH (its own folder: scripts/arm64_unit.sh's ``site`` holds more)."""
    return arm64_dir() / "guest-site"


def arm64_wheels(progress: ProgressFn = _quiet) -> None:
    """The arm64 wheels of :data:`ARM64_WHEELS` at the host's versions in :func:`arm64_site`
    (scripts/arm64_wheels.sh: a download only when one is missing or of another version)."""
    from importlib.metadata import version

    if all((arm64_site() / f"{pkg}-{version(pkg)}.dist-info").is_dir() for pkg in ARM64_WHEELS):
        return
    _run(["bash", str(REPO_ROOT / "scripts" / "arm64_wheels.sh"), str(arm64_site()), *ARM64_WHEELS], progress,
         env=dict(os.environ, PYTHON=sys.executable))


def prepare_arm64_userland(progress: ProgressFn = _quiet) -> None:
    """scripts/arm64_userland.sh (idempotent), the arm64 wheels of :data:`ARM64_WHEELS`, then the arm64 C core."""
    env = dict(os.environ, NUMABIND_VM_CACHE=str(cache_dir()), PYTHON=sys.executable)
    proc = _run(["bash", str(REPO_ROOT / "scripts" / "arm64_userland.sh"), str(arm64_dir())], progress, env=env)
    progress(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "arm64 userland ready")
    arm64_wheels(progress)
    arm64_native(build=True, progress=progress)


def arm64_binds() -> list[tuple[str, str]]:
    """(host path, guest path) pairs the arm64 guest binds into its userland: the checkout, the cache (for the
    C core), the host interpreter's pure-Python packages (pytest and its plugins) where they are outside the
    checkout, and the arm64 C core over the checkout's x86 one."""
    wanted = [str(REPO_ROOT), str(cache_dir()), sysconfig.get_paths()["purelib"]]
    dirs: list[str] = []
    for p in sorted({os.path.realpath(w) for w in wanted}):
        if not any(p == q or p.startswith(q + "/") for q in dirs):
            dirs.append(p)
    core = arm64_native()
    if core is None:
        raise HarnessError("the arm64 C core is not built or out of date (python3 -m tests.vm.harness prepare)")
    out = [(d, d) for d in dirs]
    out.append((str(core), str(REPO_ROOT / "src" / "numabind" / "_native.abi3.so")))
    return out


def guest_python(kernel: str | None = None) -> str:
    """The interpreter a guest runs Python with: the host's own, or the arm64 userland's."""
    return ARM64_PYTHON if kernel_spec(kernel).arch == "arm64" else sys.executable


def guest_env(kernel: str | None = None) -> dict[str, str]:
    """Environment a guest command needs on top of :func:`guest_script`'s: in the arm64 userland, the
    checkout's package, the arm64 wheels (:func:`arm64_site`: psutil) and the host's pure-Python packages on
    PYTHONPATH, in that order (no .pth file is read there, so the host's editable install of numabind does not
    apply; the host's psutil carries an x86 extension module)."""
    if kernel_spec(kernel).arch != "arm64":
        return {}
    return {"PYTHONPATH": ":".join([str(REPO_ROOT / "src"), str(REPO_ROOT), str(arm64_site()),
                                    sysconfig.get_paths()["purelib"]])}


# ----------------------------------------------------------------------------- running a guest
@dataclass
class GuestRun:
    """The outcome of one guest: timings, exit status and where its logs are."""

    topology: str
    run_dir: Path
    kernel: str = DEFAULT_KERNEL
    exit_code: int | None = None          # of the command inside; None if it never finished
    qemu_rc: int | None = None
    boot_s: float | None = None           # host wall clock, QEMU start -> guest init ready to run
    guest_uptime_at_boot: float | None = None
    total_s: float = 0.0
    failure: str | None = None            # why the run failed as a whole (no boot, timeout, QEMU error)
    argv: list[str] = field(default_factory=list)

    @property
    def console_path(self) -> Path:
        return self.run_dir / "console.log"

    def read(self, name: str) -> str:
        try:
            return (self.run_dir / name).read_text(errors="replace")
        except OSError:
            return ""

    def console_tail(self, lines: int = 120) -> str:
        text = self.read("console.log").replace("\r", "")
        qemu = self.read("qemu.log").strip()
        tail = "\n".join(text.splitlines()[-lines:])
        out = f"--- guest console ({self.console_path}, last {lines} lines) ---\n{tail}\n"
        if qemu:
            out += f"--- qemu stderr ---\n{qemu[-4000:]}\n"
        return out

    def summary(self) -> str:
        boot = f"booted in {self.boot_s:.1f} s" if self.boot_s is not None else "did not boot"
        if self.guest_uptime_at_boot is not None:
            boot += f" (guest uptime {self.guest_uptime_at_boot:.1f} s)"
        state = self.failure or f"command exit {self.exit_code}"
        name = self.topology if self.kernel == DEFAULT_KERNEL else f"{self.topology} (kernel {self.kernel})"
        return f"{name}: {boot}, whole run {self.total_s:.1f} s, {state}"


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        raise HarnessError(f"${name} must be a number of seconds, got {os.environ[name]!r}") from None


def new_run_dir(topology_name: str) -> Path:
    runs = cache_dir() / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    dated = []
    for p in runs.iterdir():
        try:
            dated.append((p.stat().st_mtime, p))
        except FileNotFoundError:  # pruned meanwhile by a concurrent session
            continue
    for _, stale in sorted(dated)[:-11]:
        shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{time.strftime('%Y%m%d-%H%M%S')}-{topology_name}-", dir=runs))


def run_guest(topology_name: str, script: str, *, run_dir: Path | None = None, artifacts: Artifacts | None = None,
              boot_timeout: float | None = None, timeout: float | None = None,
              progress: ProgressFn = _quiet, kernel: str | None = None) -> GuestRun:
    """Boot a guest of ``topology_name`` with ``kernel`` (a name in :data:`KERNELS`; default
    :data:`DEFAULT_KERNEL`), run the shell ``script`` in it (chrooted into the host root,
    writable folder ``GUEST_SHARE``), power it off; never takes longer than ``timeout`` seconds.

    ``boot_timeout`` bounds QEMU start -> init ready ($NUMABIND_VM_BOOT_TIMEOUT, default 120 s; 300 s for
    arm64); ``timeout`` bounds the whole run ($NUMABIND_VM_TIMEOUT, default 600 s).
    """
    spec = topology(topology_name)
    kspec = kernel_spec(kernel)
    kernel = kspec.name
    arm64 = kspec.arch == "arm64"
    if arm64 and spec.hmat:
        raise HarnessError(f"topology {spec.name} needs ACPI HMAT, which the arm64 guest (device tree boot) "
                           f"does not have")
    arts = artifacts or cached_artifacts(kernel)
    qemu = qemu_binary(kspec.arch)
    if arts is None or qemu is None:
        raise HarnessError("the VM is not ready: " + "; ".join(problems(kernel)) +
                           " (run: python3 -m tests.vm.harness prepare)")
    boot_timeout = boot_timeout if boot_timeout is not None else _env_float("NUMABIND_VM_BOOT_TIMEOUT",
                                                                            300 if arm64 else 120)
    timeout = timeout if timeout is not None else _env_float("NUMABIND_VM_TIMEOUT", spec.timeout_s)
    run_dir = run_dir or new_run_dir(topology_name)
    (run_dir / "run.sh").write_text(script)
    if arm64:
        (run_dir / "root").write_text(f"{arm64_dir() / 'root'}\n")
        (run_dir / "binds").write_text("".join(f"{src}|{dst}\n" for src, dst in arm64_binds()))
        machine, cpu, cmdline = "virt", os.environ.get("NUMABIND_VM_CPU_ARM64") or ARM64_CPU, KERNEL_CMDLINE_ARM64
    else:
        (run_dir / "binds").write_text("".join(f"{p}\n" for p in paths_to_bind()))
        machine, cpu, cmdline = spec.machine, os.environ.get("NUMABIND_VM_CPU") or "max,l3-cache=off", KERNEL_CMDLINE
    console = run_dir / "console.log"
    argv = [qemu, "-nodefaults", "-no-user-config", "-machine", machine, "-accel", "tcg,thread=multi",
            "-cpu", cpu, *spec.qemu_args(),
            "-kernel", str(arts.kernel), "-initrd", str(arts.initramfs), "-append", cmdline,
            "-serial", f"file:{console}", "-display", "none", "-monitor", "none", "-no-reboot",
            "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
            "-virtfs", f"local,path={run_dir},mount_tag=results,security_model=none"]
    guard = shutil.which("timeout")
    if guard:  # a second bound that holds even if this Python process dies
        argv = [guard, "-k", "5", str(int(timeout) + 15), *argv]
    run = GuestRun(topology_name, run_dir, kernel=kernel, argv=argv)
    progress(f"booting {spec.name} with kernel {arts.release}: {spec.description}")
    start = time.monotonic()
    with open(run_dir / "qemu.log", "wb") as qlog:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=qlog, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        seen = ""
        while True:
            rc = proc.poll()
            elapsed = time.monotonic() - start
            if run.boot_s is None:
                seen = _read_text(console)
                m = re.search(BOOT_MARKER + r" uptime=([0-9.]+)", seen)
                if m:
                    run.boot_s = elapsed
                    run.guest_uptime_at_boot = float(m[1])
                    progress(f"booted in {elapsed:.1f} s")
            if rc is not None:
                run.qemu_rc = rc
                break
            if run.boot_s is None and elapsed > boot_timeout:
                run.failure = f"guest did not boot within {boot_timeout:.0f} s"
                break
            if elapsed > timeout:
                run.failure = f"guest timed out after {timeout:.0f} s (booted, the command did not finish)"
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        run.total_s = time.monotonic() - start
    code = run.read("exit_code").strip()
    run.exit_code = int(code) if code.lstrip("-").isdigit() else None
    if run.failure is None:
        if run.boot_s is None:
            run.failure = f"QEMU exited with {run.qemu_rc} before the guest booted"
        elif run.exit_code is None:
            run.failure = f"QEMU exited with {run.qemu_rc} before the command finished"
    progress(run.summary())
    return run


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


#: Host folders the guest covers with its own mounts: files there are invisible inside,
#: except for folders under /tmp and /run that :func:`paths_to_bind` names (bound back in).
GUEST_MOUNTS = ("/tmp", "/run", "/dev", "/proc", "/sys")
REBINDABLE = ("/tmp", "/run")


def _under(path: str, mounts: Sequence[str]) -> str | None:
    for mount in mounts:
        if path == mount or path.startswith(mount + "/"):
            return mount
    return None


def paths_to_bind() -> list[str]:
    """Host folders under /tmp or /run that the guest needs: the checkout and the interpreter's prefixes
    (CI may clone the project anywhere, /tmp included)."""
    wanted = {str(REPO_ROOT), sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    out = []
    for p in sorted(os.path.abspath(w) for w in wanted):
        if _under(p, REBINDABLE) and p not in REBINDABLE and not any(p.startswith(q + "/") for q in out):
            out.append(p)
    return out


def hidden_in_guest(path: str | os.PathLike) -> str | None:
    """The guest mount that hides ``path``, or None when the guest sees it."""
    p = os.path.abspath(os.fspath(path))
    if any(p == b or p.startswith(b + "/") for b in paths_to_bind()):
        return None
    return _under(p, GUEST_MOUNTS)


def guest_script(argv: Sequence[str], *, cwd: Path | str = REPO_ROOT, env: Mapping[str, str] = {}) -> str:
    """A run.sh that runs ``argv`` in ``cwd`` with the host's PATH and HOME plus ``env``."""
    for what, path in (("the working directory", cwd), ("the program", argv[0])):
        mount = hidden_in_guest(path)
        if mount:
            raise HarnessError(f"{what} {path} is under {mount}, which the guest covers with its own "
                               f"mount; use a checkout and Python outside {', '.join(GUEST_MOUNTS)}")
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "_NUMABIND_VM_SHARE": GUEST_SHARE}
    base.update(env)
    lines = ["set -u", f"cd {shlex.quote(str(cwd))} || exit 125"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in base.items()]
    lines.append("exec " + shlex.join(argv))
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m tests.vm.harness", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="install apt packages, fetch the kernel, build the initramfs")
    p.add_argument("--refresh", action="store_true", help="fetch the kernel again even if one is cached")
    sub.add_parser("status", help="say whether the guest can run here")
    r = sub.add_parser("run", help="boot a guest and run a command inside it")
    r.add_argument("-t", "--topology", default=DEFAULT_TOPOLOGY, choices=sorted(TOPOLOGIES))
    r.add_argument("-k", "--kernel", default=DEFAULT_KERNEL, choices=sorted(KERNELS))
    r.add_argument("--timeout", type=float, default=None)
    r.add_argument("command", nargs="+")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "prepare":
            t0 = time.monotonic()
            for arts in prepare(refresh=args.refresh):
                print(f"ready in {time.monotonic() - t0:.1f} s: {arts.describe()}")
            return 0
        if args.cmd == "status":
            missing = False
            for name, kspec in KERNELS.items():
                issues = problems(name)
                missing = missing or bool(issues)
                for line in issues:
                    print(f"missing (kernel {name}):", line)
                if not issues:
                    print(f"ready (kernel {name}):", cached_artifacts(name).describe())
            for name, spec in TOPOLOGIES.items():
                print(f"topology {name}: {spec.description}")
            return 1 if missing else 0
        run = run_guest(args.topology, guest_script(args.command, env=guest_env(args.kernel)), timeout=args.timeout,
                        progress=lambda s: print(s, file=sys.stderr), kernel=args.kernel)
        sys.stdout.write(run.read("output.log"))
        if run.failure:
            sys.stderr.write(run.console_tail())
            return 124
        return run.exit_code or 0
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
