#!/usr/bin/env bash
# Install numabind into ./.venv on a Debian/Ubuntu machine.
#   bash scripts/setup.sh          # the library and its CLI (libnuma is used when present; no numactl needed)
#   bash scripts/setup.sh --test   # + the whole suite's extras (test, docs: Sphinx, release: build, auditwheel),
#                                  #   numactl (the numactl backend's tests and the oracle) and the multi-NUMA VM
#                                  #   (QEMU, kernel, initramfs)
set -euo pipefail
cd "$(dirname "$0")/.."

with_tests=0
[ "${1:-}" = "--test" ] && with_tests=1

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

apt_packages=(gcc python3-dev python3-venv libnuma1)
if [ "$with_tests" -eq 1 ]; then
    apt_packages+=(numactl)   # the numactl backend's tests, and numactl's output as a reference
    apt_packages+=(qemu-system-x86 busybox-static cpio hwloc-nox curl)
    # the arm64 guest (tests/vm/test_vm_arm64.py): its QEMU, and the cross compiler of numabind's C core
    apt_packages+=(qemu-system-arm gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
    apt_packages+=(slurm-wlm munge)   # tests/test_launcher_slurm.py: a real single-machine Slurm
fi
missing=()
for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
if [ "$with_tests" -eq 1 ] && ! getent passwd numabind-neighbour >/dev/null; then
    # tests/test_hostile_users.py: a second, unprivileged local user races numabind's files (tests/hostile.py)
    $SUDO useradd --system --no-create-home --shell /usr/sbin/nologin numabind-neighbour
fi

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
if [ "$with_tests" -eq 1 ]; then
    # editable: the tests import the checkout, so the C extension is built in place. The suite needs all three
    # extras: test (pytest, hypothesis, mypy, pyright), docs (tests/test_packaging.py builds the docs with
    # Sphinx) and release (it builds the sdist and the wheel, and repairs the wheel with auditwheel)
    .venv/bin/python -m pip install -q -e '.[test,docs,release]'
    # launcher tests: Ray's local cluster and torchrun (torch 2.13.0 is a CPU build on this kind of machine)
    .venv/bin/python -m pip install -q 'ray>=2.10' torch==2.13.0
    # tests/test_docs_newcomer.py: `numabind completion` needs shtab (the completion extra)
    .venv/bin/python -m pip install -q 'shtab>=1.7'
    # the multi-NUMA guests: Debian's amd64 and arm64 kernels (tools/vm_kernel.py keeps the image and the 9p
    # modules), the arm64 userland with python3.11 (scripts/arm64_userland.sh), then the harness's own steps
    # (the bookworm-backports kernel, the arm64 C core, the initramfs images); all cached in tests/vm/_cache
    vmcache=${NUMABIND_VM_CACHE:-tests/vm/_cache}
    .venv/bin/python tools/vm_kernel.py fetch --arch amd64 --release-prefix 6.1. "$vmcache/kernel" >/dev/null
    .venv/bin/python tools/vm_kernel.py fetch --arch arm64 --release-prefix 6.1. "$vmcache/kernel-arm64" >/dev/null
    PYTHON=.venv/bin/python bash scripts/arm64_userland.sh "$vmcache/arm64"
    .venv/bin/python -m tests.vm.harness prepare
    # tests/test_show_oracle.py: numactl 2.0.19 (weighted interleave) built from Debian's source as the oracle
    # of `numabind show` and `numabind run`; without it those tests skip (CI requires it)
    bash scripts/numactl_oracle.sh >/dev/null || echo "setup.sh: the numactl 2.0.19 oracle could not be built;" \
        "tests/test_show_oracle.py will skip" >&2
else
    .venv/bin/python -m pip install -q .
fi
