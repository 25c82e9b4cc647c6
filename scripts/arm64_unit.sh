#!/usr/bin/env bash
# The unit slice of the test suite on arm64, in one command (issue 35, item 2): for release time, not CI.
#   bash scripts/arm64_unit.sh [PYTEST ARGS...]      # default: the unit slice (below)
# It runs the checkout in an arm64 chroot under qemu-user: the arm64 Debian userland of the arm64 test guest
# (scripts/arm64_userland.sh: python3.11, cffi's backend, libnuma, numactl), numabind's C core cross-compiled for
# arm64 (tests/vm/harness.py builds both, or reuses them), and the host virtualenv's pure-Python packages
# (pytest, hypothesis) at their own paths. qemu-user-static runs the arm64 programs through binfmt_misc (an
# entry "numabind-aarch64" with the flags P and F, so programs keep their argv[0] and the emulator is found
# inside the chroot; it is removed again at the end when this script added it). Everything else happens in a
# private mount namespace (unshare -m): the chroot's tmpfs root (mounted over tests/vm/_cache/arm64/unit-root), its
# /proc, /sys, /dev and /tmp, /usr as a merged /usr has it, and the arm64 core bound over the checkout's x86 one
# are gone when the run ends; the host's files are never changed. Each failure's report is appended, as it
# happens, to tests/vm/_cache/arm64/unit-failures.log ($ARM64_UNIT_LOG).
#
# The unit slice: everything but the VM tests (tests/vm: they boot their own kernels), the packaging tests
# (they build wheels with the host's toolchain) and the few files that need an x86 host tool or a prepared
# host: test_types.py (mypy over the sources, platform-independent), the real launchers (torchrun, Slurm, Ray)
# and the second local user of test_hostile_users.py. qemu-user implements none of the memory-policy calls
# (get_mempolicy, set_mempolicy, mbind, migrate_pages, move_pages return ENOSYS), so the tests that touch
# the kernel's memory policy skip with one reason (tests/kernel.py); the arm64 guest proves those
# (tests/vm/test_vm_arm64.py). Prints pytest's counts and the time taken. Root (or sudo -n) is needed for
# apt-get, binfmt_misc, the mounts and chroot.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd -P)

PY=${PYTHON:-$repo/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3)
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo -n"
QEMU=/usr/bin/qemu-aarch64-static
ENTRY=numabind-aarch64
BINFMT=/proc/sys/fs/binfmt_misc
start=$(date +%s)
# host test dependencies with compiled code (cffi: the same version as its pure-Python half; psutil, a runtime
# dependency: numabind._proc reads other processes through it): arm64 wheels, step 3
ARM64_WHEELS=(hypothesis cffi psutil)

# 1. qemu-user-static (only the emulator binary is used; nothing is registered by the package here)
if [ ! -x "$QEMU" ]; then
    echo "arm64_unit.sh: installing qemu-user-static" >&2
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends qemu-user-static >/dev/null
fi

# 2. the arm64 userland and the arm64 C core (built once, then reused), and what to bind into the chroot
mapfile -t binds < <(cd "$repo" && "$PY" - <<'EOF'
import contextlib, sys
from tests.vm import harness
with contextlib.redirect_stdout(sys.stderr):     # cffi says "generating ..." on stdout
    harness.prepare_arm64_userland(lambda s: print(s, file=sys.stderr))
print(harness.arm64_dir() / "root")
for src, dst in harness.arm64_binds():
    print(f"{src}|{dst}")
EOF
)
userland=${binds[0]}
unset 'binds[0]'
[ -x "$userland/usr/bin/python3.11" ] || { echo "arm64_unit.sh: no arm64 userland in $userland" >&2; exit 1; }

# 3. arm64 builds of the host virtualenv's test dependencies that carry compiled code (hypothesis has a C
#    extension since 6.1xx): the same versions as the host's, as arm64 wheels (pip download, no install), unpacked
#    into tests/vm/_cache/arm64/site, which comes before the host's packages on the chroot's PYTHONPATH
site=$(dirname "$userland")/site
PYTHON="$PY" bash "$repo/scripts/arm64_wheels.sh" "$site" "${ARM64_WHEELS[@]}"

# 4. binfmt_misc: arm64 ELF executables run through qemu-aarch64-static, with the flags P (the program keeps its
#    own argv[0]: busybox's sh runs its applets by re-executing itself under their names, and would otherwise
#    see the path of the program instead) and F (the emulator is opened now, so it is found inside the chroot).
#    qemu takes the P layout when it is called by a name ending in -binfmt-P: a link of that name in the cache.
magic_hex=7f454c460201010000000000000000000200b700
added=0
cleanup() { if [ "$added" = 1 ] && [ -e "$BINFMT/$ENTRY" ]; then echo -1 | $SUDO tee "$BINFMT/$ENTRY" >/dev/null; fi; }
trap cleanup EXIT
[ -e "$BINFMT/register" ] || $SUDO mount -t binfmt_misc binfmt_misc "$BINFMT"
usable_entry() {
    for e in "$BINFMT"/*; do
        case "${e##*/}" in register|status) continue ;; esac   # write-only / not an entry
        [ -f "$e" ] && grep -qx enabled "$e" && grep -qx "magic $magic_hex" "$e" \
            && grep -q "^flags: .*P" "$e" && grep -q "^flags: .*F" "$e" && return 0
    done
    return 1
}
if ! usable_entry; then
    # an entry of this name from an older version of this script (without P) goes first
    if [ -e "$BINFMT/$ENTRY" ]; then echo -1 | $SUDO tee "$BINFMT/$ENTRY" >/dev/null; fi
    interp=$(dirname "$userland")/aarch64-binfmt-P
    ln -sfn "$QEMU" "$interp"
    magic='\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
    mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
    echo ":$ENTRY:M::$magic:$mask:$interp:POF" | $SUDO tee "$BINFMT/register" >/dev/null
    added=1
fi

# 5. the chroot, in a private mount namespace, and pytest in it
if [ "$#" -eq 0 ]; then
    set -- tests -m "not numa_vm and not packaging" --ignore=tests/vm --ignore=tests/test_types.py \
        --ignore=tests/test_launcher_torchrun.py --ignore=tests/test_launcher_slurm.py \
        --ignore=tests/test_launcher_ray.py --ignore=tests/test_hostile_users.py
fi
# every failure's report as it happens (a long run's evidence survives an interruption): a tiny plugin, -p
cat > "$site/numabind_arm64_unit_log.py" <<'EOF'
"""pytest plugin of scripts/arm64_unit.sh: each failed or erroring test's report, appended at once to
$NUMABIND_ARM64_UNIT_LOG."""
import os


def pytest_runtest_logreport(report):
    if report.failed:
        with open(os.environ["NUMABIND_ARM64_UNIT_LOG"], "a") as f:
            f.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext}\n")
EOF
log=${ARM64_UNIT_LOG:-$(dirname "$userland")/unit-failures.log}
: > "$log"
pythonpath="$repo/src:$repo:$site:$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
inner=$(cat <<'EOF'
set -eu
r=$ROOT
mkdir -p "$r"
mount -t tmpfs -o mode=755 tmpfs "$r"
for d in "$USERLAND"/*; do
    n=${d##*/}
    if [ -L "$d" ]; then cp -a "$d" "$r/$n"
    elif [ "$n" = usr ]; then mkdir "$r/usr"
    elif [ -d "$d" ]; then mkdir "$r/$n" && mount --bind "$d" "$r/$n"
    fi
done
# /usr as on an installed system with a merged /usr (the tests name /usr/bin/touch, say): the userland's folders
# bound, except bin, copied (a few MiB), with busybox's applets added where /usr/bin has no program of that name
for d in "$USERLAND"/usr/*; do
    n=${d##*/}
    if [ "$n" = bin ]; then cp -a "$d" "$r/usr/bin"
    elif [ -d "$d" ] && [ ! -L "$d" ]; then mkdir "$r/usr/$n" && mount --bind "$d" "$r/usr/$n"
    else cp -a "$d" "$r/usr/$n"
    fi
done
for a in "$USERLAND"/bin/*; do
    [ -L "$a" ] && [ "$(readlink "$a")" = busybox ] && [ ! -e "$r/usr/bin/${a##*/}" ] \
        && ln -s /bin/busybox "$r/usr/bin/${a##*/}"
done
# the checkout's package, the arm64 wheels and the host's pure-Python packages as a .pth file in the site folder
# for local installs, as the host's editable install has it: a child started with PYTHONPATH=the checkout (the
# tests' child_env) imports numabind too
local="$r/usr/local/lib/python3.11/dist-packages"
mkdir -p "$local"
printf '%s\n' "$PYPATH" | tr ':' '\n' | grep -v "^$REPO\$" > "$local/numabind-checkout.pth"
mkdir -p "$r/proc" "$r/sys" "$r/dev" "$r/tmp" "$r/run"
mount -t proc proc "$r/proc"
mount --rbind /sys "$r/sys"
mount --rbind /dev "$r/dev"
mount -t tmpfs -o mode=1777 tmpfs "$r/tmp"
mount -t tmpfs tmpfs "$r/run"
printf '%s\n' "$BINDS" | while IFS='|' read -r src dst; do
    [ -n "$src" ] || continue
    if [ -d "$src" ]; then mkdir -p "$r$dst"; fi
    mount --bind "$src" "$r$dst"
done
exec env -i PATH=/usr/bin:/bin:/usr/sbin:/sbin HOME=/tmp LANG=C.UTF-8 PYTHONPATH="$PYPATH" \
    PYTHONDONTWRITEBYTECODE=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 NUMABIND_ARM64_UNIT_LOG="$LOG" \
    "$(command -v chroot)" "$r" /bin/sh -c 'cd "$0" && exec /usr/bin/python3.11 -m pytest -p no:cacheprovider -p numabind_arm64_unit_log -o addopts= -rs \
        --color=no "$@"' "$REPO" "$@"
EOF
)
echo "arm64_unit.sh: $(uname -m) host, arm64 chroot $userland under $QEMU; pytest $*" >&2
set +e
$SUDO env USERLAND="$userland" ROOT="$(dirname "$userland")/unit-root" BINDS="$(printf '%s\n' "${binds[@]}")" PYPATH="$pythonpath" REPO="$repo" LOG="$log" \
    unshare -m --propagation private sh -c "$inner" sh "$@"
rc=$?
set -e
echo "arm64_unit.sh: failures and errors, each as it happened: $log"
echo "arm64_unit.sh: pytest exit status $rc after $(( $(date +%s) - start )) s (wall, qemu-user on $(nproc) CPUs)"
exit "$rc"
