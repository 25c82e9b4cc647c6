#!/bin/sh
# numabind's fixed numactl launcher, used only when no in-process backend works
# (or when NUMABIND_BACKEND=numactl forces it). It never evaluates its input:
# every option word is checked against a short allow-list before numactl runs.
#
#   numactl_wrapper.sh [numactl options] -- command [args...]
#   _NUMABIND_NUMACTL_ARGS="--physcpubind=0-3 --membind=0" _NUMABIND_PYTHON=/usr/bin/python3 \
#       numactl_wrapper.sh [python args...]        (a multiprocessing executable)
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

command -v numactl >/dev/null 2>&1 ||
    fail "numactl is not installed or not on PATH (install the numactl package, or use the libnuma or syscall backend)"

if [ -n "${_NUMABIND_NUMACTL_ARGS+set}" ]; then
    opts=$_NUMABIND_NUMACTL_ARGS
    py=${_NUMABIND_PYTHON:-}
    unset _NUMABIND_NUMACTL_ARGS _NUMABIND_PYTHON
    [ -n "$py" ] && [ -x "$py" ] || fail "_NUMABIND_PYTHON must name an executable Python interpreter"
    case "$opts" in
        *[!a-z0-9=,!+\ -]*) fail "refusing _NUMABIND_NUMACTL_ARGS with characters outside [a-z0-9=,!+ -]" ;;
    esac
    set -f
    for word in $opts; do check "$word"; done
    # shellcheck disable=SC2086  # opts is validated above and split on purpose
    exec numactl $opts -- "$py" "$@"
fi

opts=""
while [ $# -gt 0 ]; do
    case "$1" in
        --) shift; break ;;
        *) check "$1"; opts="$opts $1"; shift ;;
    esac
done
[ $# -gt 0 ] || fail "no command given after '--'"
set -f
# shellcheck disable=SC2086
exec numactl $opts -- "$@"
