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

One module per concern: :mod:`tests.vm.specs` (what the guests are: kernels, topologies, the cache),
:mod:`tests.vm.image` (apt packages, kernels and the initramfs: ``prepare``, ``problems``), :mod:`tests.vm.arm64`
(the arm64 userland and C core) and :mod:`tests.vm.guest` (booting a guest and running a command in it). This
one is their face (the names other files use are importable from here) and the command line. Patch a name in
the module that defines it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from . import image
from .arm64 import arm64_binds, arm64_dir, arm64_native, guest_env, guest_python, prepare_arm64_userland  # noqa: F401
from .guest import GuestRun, guest_script, hidden_in_guest, new_run_dir, paths_to_bind, run_guest  # noqa: F401
from .image import Artifacts, cached_artifacts, fetch_kernel, prepare, problems  # noqa: F401
from .specs import (ARM64_PYTHON, DEFAULT_KERNEL, DEFAULT_TOPOLOGY, GUEST_SHARE, KERNELS, MODULES,  # noqa: F401
                    MODULES_ARM64, REPO_ROOT, TOPOLOGIES, HarnessError, TopologySpec, cpu_ranges, kernel_spec,
                    read_text, topology)


def __getattr__(name: str):
    if name == "vm_kernel":     # harness.vm_kernel: the tool, loaded when first asked for
        return image.load_vm_kernel()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
