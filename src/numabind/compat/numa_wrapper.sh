#!/bin/sh
# numabind's environment-driven spawn wrapper, for vLLM's pattern: the parent sets
# _VLLM_INTERNAL_NUMACTL_ARGS (numactl binding options) and _VLLM_INTERNAL_NUMACTL_PYTHON_EXECUTABLE
# (the interpreter), and makes this script multiprocessing's spawn executable. The child is bound by
# `numabind run OPTIONS -- python ARGS` (numabind binds itself, then execs Python): no numactl is
# needed. numabind starts as numabind.process.commands.numabind_command starts it: `python -I -c
# MAIN_CODE DIR run ...`, isolated (neither the working directory nor PYTHONPATH, PYTHONSTARTUP,
# PYTHONHOME or a sitecustomize there can put another numabind in its place), importing the copy
# this script belongs to (DIR, two levels above it). The command it execs, `python ARGS`, gets the
# environment unchanged.
#
# Nothing is evaluated: the options must be numactl binding options whose values hold only the
# characters of a CPU or node list (digits and , - ! +); the interpreter must be an absolute path
# to an executable file. Anything else stops here (exit 127, the reason on stderr).
set -eu

fail() {
    echo "numabind numa wrapper: $*" >&2
    exit 127
}

args=${_VLLM_INTERNAL_NUMACTL_ARGS-}
python=${_VLLM_INTERNAL_NUMACTL_PYTHON_EXECUTABLE-}
[ -n "$python" ] || fail "_VLLM_INTERNAL_NUMACTL_PYTHON_EXECUTABLE is not set (the parent sets it with the options)"
case "$python" in
    /*) ;;
    *) fail "refusing _VLLM_INTERNAL_NUMACTL_PYTHON_EXECUTABLE (expected an absolute path)" ;;
esac
case "$python" in
    *[!A-Za-z0-9/._+-]*) fail "refusing _VLLM_INTERNAL_NUMACTL_PYTHON_EXECUTABLE (a character a path to Python does not need)" ;;
esac
[ -f "$python" ] && [ -x "$python" ] || fail "_VLLM_INTERNAL_NUMACTL_PYTHON_EXECUTABLE is not an executable file"
case "$args" in
    *[!a-z0-9=,!+\ -]*) fail "refusing _VLLM_INTERNAL_NUMACTL_ARGS (a character numactl binding options do not hold)" ;;
esac

set -f
opts=""
IFS=' '
for word in $args; do
    case "$word" in
        --localalloc) opts="$opts $word"; continue ;;
        --physcpubind=*|--cpunodebind=*|--membind=*|--preferred=*|--preferred-many=*|--interleave=*)
            value=${word#*=} ;;
        *) fail "refusing option '$word' in _VLLM_INTERNAL_NUMACTL_ARGS (only numactl binding options)" ;;
    esac
    case "$value" in
        ""|*[!0-9,!+-]*) fail "refusing value in '$word' (expected a cpu or node list)" ;;
    esac
    opts="$opts $word"
done
[ -n "$opts" ] || fail "_VLLM_INTERNAL_NUMACTL_ARGS holds no binding option"
case "$0" in
    */*) here=${0%/*} ;;
    *) here=. ;;
esac
# the directory above the numabind package this script is part of (DIR/numabind/compat/numa_wrapper.sh)
pkg_parent=$(cd -P -- "$here/../.." && pwd -P) || fail "cannot find the numabind package around $0"
[ -f "$pkg_parent/numabind/__init__.py" ] || fail "$0 is not inside a numabind package"
# numabind.process.commands.MAIN_CODE, word for word (tests/test_compat_spawn_hijack.py compares them)
code='import sys; sys.path.insert(0, sys.argv.pop(1)); import runpy; runpy.run_module("numabind", run_name="__main__", alter_sys=True)'
# shellcheck disable=SC2086  # opts holds checked words only, split on purpose
exec "$python" -I -c "$code" "$pkg_parent" run $opts -- "$python" "$@"
