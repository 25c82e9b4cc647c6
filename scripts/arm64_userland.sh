#!/usr/bin/env bash
# The arm64 userland of the arm64 test guest (tests/vm, kernel "arm64"): Debian bookworm's arm64 python3.11,
# cffi's backend, libnuma and numactl, and busybox as /bin/sh, unpacked (dpkg-deb -x, nothing installed or
# run) into DEST/root, plus the arm64 Python headers in DEST/headers for the cross-compiled C core.
#   bash scripts/arm64_userland.sh [DEST]     # default: ${NUMABIND_VM_CACHE:-tests/vm/_cache}/arm64
# The packages come through the private arm64 apt configuration of tools/vm_kernel.py (the system's /etc/apt is
# never changed; apt checks the signed index and each package's SHA256); apt's own resolver, run against an
# empty dpkg status, names their dependencies. Idempotent: a second run with the same package list does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
cache=${NUMABIND_VM_CACHE:-tests/vm/_cache}
dest=${1:-$cache/arm64}
# what the guest runs: python3.11 and its standard library, _cffi_backend for numabind._native, libnuma for the
# libnuma backend and numactl (the numactl backend, and discovery's cross-check), busybox for /bin/sh
packages=(python3.11-minimal libpython3.11-stdlib python3-cffi-backend libnuma1 numactl busybox-static)
headers=libpython3.11-dev   # Python.h and arm64's pyconfig.h only: unpacked on its own, without its dependencies
layout=2                     # bump when what this script writes changes
want="${packages[*]} $headers layout=$layout"

if [ -f "$dest/userland.txt" ] && [ "$(head -n1 "$dest/userland.txt")" = "$want" ] \
        && [ -x "$dest/root/usr/bin/python3.11" ] && [ -f "$dest/headers/usr/include/python3.11/Python.h" ]; then
    echo "arm64 userland up to date in $dest"
    exit 0
fi
mkdir -p "$dest" "$cache/apt"
mapfile -t opts < <("$PY" tools/vm_kernel.py apt-options --arch arm64 "$cache/apt/arm64-bookworm")
[ "${#opts[@]}" -gt 0 ] || { echo "arm64_userland.sh: no private apt configuration" >&2; exit 1; }
# the dependency closure, as apt would install it on an empty arm64 system (no recommends)
mapfile -t closure < <(apt-get "${opts[@]}" -s -q install --no-install-recommends "${packages[@]}" \
                       | awk '/^Inst /{print $2}')
[ "${#closure[@]}" -gt 0 ] || { echo "arm64_userland.sh: apt resolved no packages for ${packages[*]}" >&2; exit 1; }

tmp=$(mktemp -d "$dest.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
chmod 777 "$tmp"   # apt-get download drops privileges to _apt where it can
(cd "$tmp" && apt-get "${opts[@]}" -q download "${closure[@]}" "$headers" >/dev/null)
mkdir "$tmp/root" "$tmp/headers"
for deb in "$tmp"/*.deb; do
    case "$(basename "$deb")" in
        "$headers"_*) dpkg-deb -x "$deb" "$tmp/headers" ;;
        *) dpkg-deb -x "$deb" "$tmp/root" ;;
    esac
done
[ -x "$tmp/root/bin/busybox" ] || { echo "arm64_userland.sh: busybox-static gave no /bin/busybox" >&2; exit 1; }
# busybox's applets as links (its list as the host's busybox of the same release names it), /bin/sh first
ln -s busybox "$tmp/root/bin/sh"
if [ -x /bin/busybox ]; then
    for applet in $(/bin/busybox --list); do
        [ "$applet" = busybox ] && continue
        [ -e "$tmp/root/bin/$applet" ] || [ -e "$tmp/root/usr/bin/$applet" ] || [ -e "$tmp/root/sbin/$applet" ] \
            || ln -s busybox "$tmp/root/bin/$applet"
    done
fi
{ echo "$want"; printf '%s\n' "${closure[@]}"; } > "$tmp/userland.txt"
rm -f "$tmp"/*.deb
rm -rf "$dest/root" "$dest/headers"
mv "$tmp/root" "$tmp/headers" "$tmp/userland.txt" "$dest/"
echo "arm64 userland ready in $dest: ${#closure[@]} packages, $(du -sm "$dest/root" | cut -f1) MiB"
