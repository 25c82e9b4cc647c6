#!/bin/sh
# numabind's fixed numactl launcher, used only when no in-process backend works
# (or when NUMABIND_BACKEND=numactl forces it). It never evaluates its input:
# every option word is checked against a short allow-list before numactl runs,
# and nothing is taken from the environment.
#
#   numactl_wrapper.sh [--numactl=/abs/path/numactl] [--mark=PLAN] [numactl options] -- command [args...]
#
# --numactl names the binary the numactl backend checked (it always passes it);
# without it, numactl is looked up on PATH. --mark (numabind's plan text,
# v1;cpus=...;mem=...) sets _NUMABIND_BOUND=<pid>:<start time>|PLAN|numactl in the
# command's environment, so numabind stat knows numabind bound it (exec keeps the pid and start time;
# "numactl": what numactl applied is not known here). The value is checked
# against the plan text's few characters and only ever assigned, never evaluated.
set -eu

fail() {
    echo "numabind numactl wrapper: $*" >&2
    exit 127
}

check() {
    case "$1" in
        --localalloc|--all) return 0 ;;
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

mark=""
case "${1-}" in
    --mark=*)
        mark=${1#--mark=}
        shift
        case "$mark" in
            v1\;cpus=*\;mem=*) ;;
            *) fail "refusing --mark (expected numabind's plan text, v1;cpus=...;mem=...)" ;;
        esac
        case "$mark" in
            *[!abcdefghijklmnopqrstuvwxyz0123456789=:,\;-]*)
                fail "refusing --mark (a character numabind's plan text does not hold)" ;;
        esac
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
if [ -n "$mark" ]; then
    # this shell's start time (field 22 of /proc/$$/stat, after the ") " that ends its name): exec keeps
    # it with the pid, so numabind stat can tell the command from a later process given the same pid
    start=0
    field22() { [ $# -ge 20 ] && shift 19 && start=$1; }
    if read -r stat < "/proc/$$/stat"; then
        field22 ${stat##*) } || :
    fi
    case "$start" in ""|*[!0-9]*) start=0 ;; esac
    _NUMABIND_BOUND="$$:$start|$mark|numactl"
    export _NUMABIND_BOUND
fi
# shellcheck disable=SC2086  # opts holds checked words only, split on purpose
exec "$numactl" $opts -- "$@"
