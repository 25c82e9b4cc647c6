#!/usr/bin/env bash
# Install numabind into ./.venv on a Debian/Ubuntu machine.
#   bash scripts/setup.sh          # the library, its CLI and numactl (for the numactl backend)
#   bash scripts/setup.sh --test   # + test extras and the multi-NUMA VM (QEMU, kernel, initramfs)
set -euo pipefail
cd "$(dirname "$0")/.."

with_tests=0
[ "${1:-}" = "--test" ] && with_tests=1

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

apt_packages=(gcc python3-dev python3-venv numactl)
if [ "$with_tests" -eq 1 ]; then
    apt_packages+=(qemu-system-x86 busybox-static cpio hwloc-nox curl)
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
    # editable: the tests import the checkout, so the C extension is built in place
    .venv/bin/python -m pip install -q -e '.[test]'
    # launcher tests: Ray's local cluster and torchrun (torch 2.13.0 is a CPU build on this kind of machine)
    .venv/bin/python -m pip install -q 'ray>=2.10' torch==2.13.0
    .venv/bin/python -m tests.vm.harness prepare
    # tests/test_show_oracle.py: numactl 2.0.19 (weighted interleave) built from Debian's source as the oracle
    # of `numabind show` and `numabind run`; without it those tests skip (CI requires it)
    bash scripts/numactl_oracle.sh >/dev/null || echo "setup.sh: the numactl 2.0.19 oracle could not be built;" \
        "tests/test_show_oracle.py will skip" >&2
else
    .venv/bin/python -m pip install -q .
fi
