#!/bin/sh
# numabind's fixed numactl launcher, used only when no in-process backend works
# (or when NUMABIND_BACKEND=numactl forces it). It never evaluates its input:
# every option word is checked against a short allow-list before numactl runs,
# and nothing is taken from the environment.
#
#   numactl_wrapper.sh [--numactl=/abs/path/numactl] [numactl options] -- command [args...]
#
# --numactl names the binary the numactl backend checked (it always passes it);
# without it, numactl is looked up on PATH.
set -eu

fail() {
    echo "numabind numactl wrapper: $*" >&2
    exit 127
}

check() {
    case "$1" in
        --localalloc) return 0 ;;
        --physcpubind=*|--cpunodebind=*|--membind=*|--preferred=*|--preferred-many=*|--interleave=*)
            value=${1#*=} ;;
        *) fail "refusing option '$1' (only numactl binding options are passed on)" ;;
    esac
    case "$value" in
        ""|*[!0-9,!+-]*) fail "refusing value in '$1' (expected a cpu or node list)" ;;
    esac
}

numactl=""
case "${1-}" in
    --numactl=*)
        numactl=${1#--numactl=}
        shift
        case "$numactl" in
            /*) ;;
            *) fail "refusing --numactl='$numactl' (expected an absolute path)" ;;
        esac
        [ -f "$numactl" ] && [ -x "$numactl" ] || fail "--numactl='$numactl' is not an executable file"
        ;;
    *)
        numactl=$(command -v numactl 2>/dev/null) ||
            fail "numactl is not installed or not on PATH (install the numactl package, or use the libnuma or syscall backend)"
        ;;
esac

opts=""
while [ $# -gt 0 ]; do
    case "$1" in
        --) shift; break ;;
        *) check "$1"; opts="$opts $1"; shift ;;
    esac
done
[ $# -gt 0 ] || fail "no command given after '--'"
set -f
# shellcheck disable=SC2086  # opts holds checked words only, split on purpose
exec "$numactl" $opts -- "$@"
