#!/usr/bin/env bash
# Everything worth running once on a machine with NVIDIA GPUs, into one folder:
#
#   bash tools/gpu_machine_check.sh OUTDIR
#
# numabind must be importable (installed, or PYTHONPATH=src after an in-place build). Writes OUTDIR/log.txt
# (nvidia-smi's views, tools/gpu_check.py against nvidia-smi and NVML, the main job, plans, a bound run and the
# real-kernel tests on this machine's CPUs), OUTDIR/gpu_check.json and OUTDIR/machine.tar.bz2 (a capture that
# `numabind topology --root` and tests/test_real_dumps.py replay: add it under tests/dumps/captures/ with a
# NAME.json of what nvidia-smi said, as for h200-vm). Exit status: that of tools/gpu_check.py.
set -u
out=${1:?usage: bash tools/gpu_machine_check.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
log=$out/log.txt
section() { printf '\n=== %s\n' "$*"; }
{
    section machine; uname -r; nproc; $py --version
    section nvidia-smi; nvidia-smi --query-gpu=index,pci.bus_id,uuid,name --format=csv 2>&1
    section "nvidia-smi topo -m"; nvidia-smi topo -m 2>&1
    section "PCI GPUs in sysfs"
    for d in /sys/bus/pci/devices/*; do
        case $(cat "$d/class") in 0x03*|0x12*)
            echo "$d vendor=$(cat "$d/vendor") numa_node=$(cat "$d/numa_node" 2>&1) local_cpulist=$(cat "$d/local_cpulist" 2>&1)";;
        esac
    done
    section "gpu_check"; timeout 300 $py tools/gpu_check.py 2>&1; echo "gpu_check: exit $?"
    section capture; timeout 300 $py tools/capture_machine.py "$out/machine.tar.bz2" --check 2>&1
    section numabind; timeout 120 $py -m numabind 2>&1
    section "plan --all"; timeout 120 $py -m numabind plan --all --json 2>&1
    section "run --gpu 0"; timeout 120 $py -m numabind run --gpu 0 -- grep -E '_allowed_list' /proc/self/status 2>&1
    section "kernel tests"
    timeout 1200 $py -m pytest -q -rs -p no:cacheprovider tests/test_bind.py tests/test_native.py \
        tests/test_backends.py tests/test_process.py tests/test_cli.py tests/test_residency.py 2>&1 | tail -40
} >"$log" 2>&1
timeout 300 $py tools/gpu_check.py --json >"$out/gpu_check.json" 2>/dev/null
rc=$?
cat "$log"
exit $rc
