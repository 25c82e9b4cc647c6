"""Cross-check numabind's GPU discovery against nvidia-smi and NVML on a machine with NVIDIA GPUs.

    python3 tools/gpu_check.py [--json]

Compares, GPU by GPU, in visible order (CUDA_VISIBLE_DEVICES is ignored: the
check is about the physical GPUs):

* numabind.discover().gpus (sysfs, procfs, and NVML when importable) with
  ``nvidia-smi --query-gpu=index,pci.bus_id,uuid,name --format=csv,noheader``:
  same count, same PCI addresses in the same order, same UUIDs;
* each GPU's NUMA node with NVML's memory affinity (nvmlDeviceGetMemoryAffinity)
  when nvidia-ml-py is installed, and its local CPUs with NVML's CPU affinity.

Exit status 0 when everything that could be compared agrees, 1 on any
difference, 2 when there is nothing to compare (no nvidia-smi or no GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from numabind import _nvml, discover  # noqa: E402
from numabind.cpulist import format_cpulist  # noqa: E402


def nvidia_smi() -> list[dict] | None:
    """The GPUs nvidia-smi lists, or None when it is missing or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    out = subprocess.run([exe, "--query-gpu=index,pci.bus_id,uuid,name", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        return None
    rows = []
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",", 3)]
        if len(parts) == 4:
            rows.append({"index": int(parts[0]), "pci_address": _nvml.normalize_bus_id(parts[1]),
                         "uuid": parts[2], "name": parts[3]})
    return rows


def compare(gpus, smi: list[dict], nvml) -> tuple[list[dict], list[str]]:
    """Rows of the comparison and the differences found."""
    problems: list[str] = []
    if len(gpus) != len(smi):
        problems.append(f"numabind sees {len(gpus)} NVIDIA GPUs, nvidia-smi lists {len(smi)}")
    by_addr = {d.pci_address: d for d in (nvml or ())}
    rows = []
    for k in range(max(len(gpus), len(smi))):
        g = gpus[k] if k < len(gpus) else None
        s = smi[k] if k < len(smi) else None
        d = by_addr.get(g.pci_address) if g is not None else None
        row = {
            "index": k,
            "numabind_pci": g.pci_address if g else None,
            "smi_pci": s["pci_address"] if s else None,
            "numabind_uuid": g.uuid if g else None,
            "smi_uuid": s["uuid"] if s else None,
            "numa_node": g.numa_node if g else None,
            "numa_source": g.numa_source if g else None,
            "nvml_memory_nodes": None if d is None or d.memory_nodes is None else format_cpulist(d.memory_nodes),
            "local_cpus": format_cpulist(g.local_cpus) if g else None,
            "nvml_cpus": None if d is None or d.cpu_affinity is None else format_cpulist(d.cpu_affinity),
        }
        rows.append(row)
        if g is None or s is None:
            continue
        if g.pci_address != s["pci_address"]:
            problems.append(f"GPU {k}: numabind {g.pci_address}, nvidia-smi {s['pci_address']}")
        if g.uuid and g.uuid != s["uuid"]:
            problems.append(f"GPU {k}: numabind UUID {g.uuid}, nvidia-smi {s['uuid']}")
        if d is not None and d.memory_nodes:
            if g.numa_node not in d.memory_nodes:
                problems.append(f"GPU {k}: numabind node {g.numa_node}, NVML memory affinity "
                                f"{format_cpulist(d.memory_nodes)}")
        if d is not None and d.cpu_affinity and g.local_cpus and d.cpu_affinity != g.local_cpus:
            problems.append(f"GPU {k}: sysfs local CPUs {format_cpulist(g.local_cpus)}, NVML CPU affinity "
                            f"{format_cpulist(d.cpu_affinity)}")
    return rows, problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    for var in ("CUDA_VISIBLE_DEVICES", "NUMABIND_GPU_VENDOR"):
        os.environ.pop(var, None)
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"   # nvidia-smi and NVML number GPUs in PCI bus order
    smi = nvidia_smi()
    gpus = [g for g in discover().gpus if g.vendor == "nvidia"]
    nvml = _nvml.probe()
    if smi is None or not (smi or gpus):
        print("nothing to compare: " + ("nvidia-smi is missing or failed" if smi is None else "no NVIDIA GPU"))
        return 2
    rows, problems = compare(gpus, smi, nvml)
    result = {"gpus": rows, "nvml": nvml is not None, "problems": problems, "agree": not problems}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{len(rows)} GPUs; NVML {'used' if nvml is not None else 'not importable (pip install nvidia-ml-py)'}")
        for r in rows:
            print(f"  {r['index']}: numabind {r['numabind_pci']} node {r['numa_node']} ({r['numa_source']}) "
                  f"cpus {r['local_cpus']} | nvidia-smi {r['smi_pci']} | NVML memory {r['nvml_memory_nodes']} "
                  f"cpus {r['nvml_cpus']}")
        print("agree" if not problems else "DIFFER:\n  " + "\n  ".join(problems))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
