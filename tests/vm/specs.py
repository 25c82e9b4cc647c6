"""What the QEMU guests are (tests/vm/harness.py is the face): the kernels they boot (:data:`KERNELS`), the
machines they emulate (:data:`TOPOLOGIES`), where the harness keeps what it downloads and builds (:func:`cache_dir`),
and the small helpers every part of the harness uses. Imported in the guest too: nothing heavy here."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
DEFAULT_CACHE = HERE / "_cache"


# ----------------------------------------------------------------------------- kernels
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


def quiet(msg: str) -> None:
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
            for lo, hi in cpu_ranges(node.cpus):
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


def cpu_ranges(ids: Iterable[int]) -> list[tuple[int, int]]:
    """``ids`` as (first, last) runs, in order: QEMU's ``cpus=`` ranges and the kernel's cpulist."""
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


# ----------------------------------------------------------------------------- the cache, files, commands
def cache_dir() -> Path:
    return Path(os.environ.get("NUMABIND_VM_CACHE") or DEFAULT_CACHE).resolve()


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def run_logged(argv: Sequence[str], progress: ProgressFn, **kw) -> subprocess.CompletedProcess:
    """Run ``argv`` (said to ``progress`` first); a failure is a HarnessError with the end of its output."""
    progress("$ " + shlex.join(argv))
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if proc.returncode != 0:
        raise HarnessError(f"{shlex.join(argv)} exited with {proc.returncode}:\n{proc.stdout[-4000:]}")
    return proc
