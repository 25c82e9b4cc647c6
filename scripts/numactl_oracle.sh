#!/usr/bin/env bash
# Build numactl 2.0.19 (the first numactl with weighted interleave, -w) as a test oracle for
# tests/test_show_oracle.py. Debian 12 ships numactl 2.0.16 and bookworm-backports has no numactl, so this
# takes Debian trixie's source tarball (sha256 checked) and compiles the numactl binary with gcc alone:
# libnuma's sources are linked in statically, so the binary never picks up the system's older libnuma.
#
#   bash scripts/numactl_oracle.sh     # prints the binary's path on stdout (progress goes to stderr)
#
# It also keeps, for tests/vm/test_vm_numactl_scripts.py (numactl's own test/ scripts run in the 3-node guest), the
# source tree in tests/_cache/numactl-2.0.19/src (the scripts are run from there, never copied into the repository;
# the tree's *.md files are removed, as MANIFEST.in takes tests/**/*.md) and the helpers those scripts call, built
# from the same tree in tests/_cache/numactl-2.0.19/helpers: memhog, numastat and test/{pagesize,distance,nodemap,
# tbitmap,ftok}.
#
# Idempotent: when the binary is already built (and says 2.0.19) and the helpers are there, it only prints the path.
# Needs gcc and the C library's headers (scripts/setup.sh installs gcc) and, on the first run, the network
# (or NUMACTL_ORACLE_TARBALL=/path/to/numactl_2.0.19.orig.tar.gz, e.g. from a CI cache).
#
# Why not ./configure: the orig tarball carries configure but no Makefile.in or config.h.in, so its build
# needs autoreconf (autoconf, automake, libtool). The numactl binary is numactl.c util.c shm.c plus the
# libnuma sources (Makefile.am's numactl_SOURCES and libnuma_la_SOURCES); config.h only says which TLS
# keyword and symbol-version syntax gcc takes. Checked once: this binary's --show, under every policy the
# test uses, and --hardware are byte for byte those of an autoreconf/configure/make build of the same tarball.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=2.0.19
TARBALL=numactl_${VERSION}.orig.tar.gz
SHA256=8b84ffdebfa0d730fb2fc71bb7ec96bb2d38bf76fb67246fde416a68e04125e4   # trixie's Sources (2.0.19-1)
SHA1=661a2cf7ad9f3f8e31e52ecf5017e521e7b97028                              # snapshot.debian.org's file id
URLS=(
    "https://deb.debian.org/debian/pool/main/n/numactl/${TARBALL}"
    "https://snapshot.debian.org/file/${SHA1}"      # once trixie's pool has moved on to a newer numactl
)
CACHE=tests/_cache
DEST=$CACHE/numactl-$VERSION
BIN=$DEST/numactl
CC=${CC:-gcc}

say() { echo "numactl_oracle: $*" >&2; }

SRC=$DEST/src                   # the source tree, for its test/ scripts
HELPERS=$DEST/helpers           # memhog, numastat, test/*: what the test/ scripts call, from the same tree
HELPER_PROGRAMS=(memhog numastat test/pagesize test/distance test/nodemap test/tbitmap test/ftok)

bin_ok() { [ -x "$BIN" ] && [ "$("$BIN" --version 2>/dev/null)" = "$VERSION" ]; }
helpers_ok() { [ "$(cat "$HELPERS/.complete" 2>/dev/null)" = "$VERSION" ] && [ -f "$SRC/test/regress" ]; }
if bin_ok && helpers_ok; then
    echo "$PWD/$BIN"
    exit 0
fi

command -v "$CC" >/dev/null || { say "no C compiler ($CC): apt-get install gcc"; exit 1; }
mkdir -p "$DEST"

# the tarball: a given file, else the one already downloaded, else the first URL that answers
tar_path=$CACHE/$TARBALL
sha_ok() { [ -f "$1" ] && echo "$SHA256  $1" | sha256sum -c --quiet - >/dev/null 2>&1; }
if [ -n "${NUMACTL_ORACLE_TARBALL:-}" ]; then
    sha_ok "$NUMACTL_ORACLE_TARBALL" || { say "$NUMACTL_ORACLE_TARBALL: not a file with sha256 $SHA256"; exit 1; }
    cp "$NUMACTL_ORACLE_TARBALL" "$tar_path.part"
    mv "$tar_path.part" "$tar_path"
fi
if ! sha_ok "$tar_path"; then
    rm -f "$tar_path"
    for url in "${URLS[@]}"; do
        say "downloading $url"
        if curl -fsSL --retry 3 --connect-timeout 20 -o "$tar_path.part" "$url"; then
            if sha_ok "$tar_path.part"; then
                mv "$tar_path.part" "$tar_path"
                break
            fi
            say "$url: sha256 $(sha256sum "$tar_path.part" | cut -d' ' -f1), expected $SHA256"
        fi
        rm -f "$tar_path.part"
    done
    [ -f "$tar_path" ] || { say "no $TARBALL with sha256 $SHA256 could be downloaded"; exit 1; }
fi

# build in a scratch folder; only the binary stays (the sources' *.md must not reach the sdist:
# MANIFEST.in takes tests/**/*.md)
work=$(mktemp -d "$DEST/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar -xzf "$tar_path" -C "$work"
src=$work/numactl-$VERSION
[ "$(cat "$src/VERSION")" = "$VERSION" ] || { say "the tarball is not numactl $VERSION"; exit 1; }
cat >"$src/config.h" <<'EOF'
/* what configure would find with gcc on glibc/Linux */
#define TLS __thread
#define HAVE_ATTRIBUTE_SYMVER 1
EOF
LIBNUMA=(libnuma.c syscall.c distance.c affinity.c sysfs.c rtnetlink.c)   # Makefile.am's libnuma_la_SOURCES
if ! bin_ok; then
    say "compiling numactl $VERSION with $CC"
    (cd "$src" && "$CC" -O2 -DVERSION="\"$VERSION\"" -I. -o numactl numactl.c util.c shm.c "${LIBNUMA[@]}")
    [ "$("$src/numactl" --version)" = "$VERSION" ] || { say "the built numactl does not say $VERSION"; exit 1; }
    mv "$src/numactl" "$BIN.part"
    mv "$BIN.part" "$BIN"
    say "built $BIN"
fi

if ! helpers_ok; then
    # the helpers, each as Makefile.am builds it (its *_SOURCES, libnuma linked in as for the binary)
    say "compiling the test/ scripts' helpers (${HELPER_PROGRAMS[*]}) with $CC"
    mkdir -p "$src/out/test"
    for prog in "${HELPER_PROGRAMS[@]}"; do
        case $prog in
            memhog)      srcs=(memhog.c util.c "${LIBNUMA[@]}") ;;
            numastat)    srcs=(-std=gnu99 numastat.c) ;;
            test/tbitmap) srcs=(test/tbitmap.c util.c "${LIBNUMA[@]}") ;;
            *)           srcs=("$prog.c" "${LIBNUMA[@]}") ;;
        esac
        (cd "$src" && "$CC" -O2 -DVERSION="\"$VERSION\"" -I. -o "out/$prog" "${srcs[@]}")
    done
    rm -rf "$HELPERS" "$SRC"
    mv "$src/out" "$HELPERS"
    # the tree itself, for its scripts: no *.md (MANIFEST.in takes tests/**/*.md into the sdist)
    find "$src" -name '*.md' -delete
    mv "$src" "$SRC"
    echo "$VERSION" >"$HELPERS/.complete"
    say "built the helpers in $HELPERS; the source tree is $SRC"
fi
echo "$PWD/$BIN"
