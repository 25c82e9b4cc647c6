"""Cross-check numabind's GPU discovery against nvidia-smi and NVML on a machine with NVIDIA GPUs.

    python3 tools/gpu_check.py [--json]

Compares, GPU by GPU, in the order CUDA numbers them with no
CUDA_VISIBLE_DEVICES (the check is about the GPUs this process can open:
inside a container, the container's GPUs, while sysfs lists every board):

* numabind's GPU list (sysfs, procfs, device files, NVIDIA_VISIBLE_DEVICES,
  and NVML when importable) with ``nvidia-smi --query-gpu=index,pci.bus_id,
  uuid,name --format=csv,noheader``: same count, same PCI addresses in the
  same order, same UUIDs;
* each GPU's NUMA node with NVML's memory affinity (nvmlDeviceGetMemoryAffinity)
  when nvidia-ml-py is installed, and its local CPUs with NVML's CPU affinity;
* the index mapping through CUDA_VISIBLE_DEVICES: the indices in reverse
  order, and each nvidia-smi UUID alone, must land on nvidia-smi's board;
* hostile CUDA_VISIBLE_DEVICES values (a 5000-digit index, non-ASCII digits)
  give no device and no exception other than numabind's own.

It also reports what the container shows (how many NVIDIA boards sysfs
lists, what /proc/driver/nvidia/gpus and /dev hold, NVIDIA_VISIBLE_DEVICES)
and each GPU's identity (certain or uncertain, and why).

Exit status 0 when everything that could be compared agrees, 1 on any
difference, 2 when there is nothing to compare (no nvidia-smi or no GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from numabind.devices import nvml as _nvml  # noqa: E402
from numabind._fs import FsReader  # noqa: E402
from numabind.cpulist import format_cpulist  # noqa: E402
from numabind.devices import discover_gpus, scan_pci_gpus  # noqa: E402
from numabind.errors import NumabindError  # noqa: E402
from numabind.topology import discover_from  # noqa: E402

#: CUDA_VISIBLE_DEVICES values that must select nothing (CUDA stops at the first invalid entry).
HOSTILE = ("5" * 5000, "\u00b2", "\u0663", "0x1")


def nvidia_smi() -> list[dict[str, Any]] | None:
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
        if len(parts) == 4 and parts[0].isascii() and parts[0].isdigit():
            rows.append({"index": int(parts[0]), "pci_address": _nvml.normalize_bus_id(parts[1]),
                         "uuid": parts[2], "name": parts[3]})
    return rows


def compare(gpus, smi: list[dict[str, Any]], nvml) -> tuple[list[dict[str, Any]], list[str]]:
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
            "identity": getattr(g, "identity", None) if g else None,
            "identity_note": getattr(g, "identity_note", None) if g else None,
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


def container_view(reader: FsReader, env: dict[str, str], visible: int) -> dict[str, Any]:
    """What this process's view of the machine shows: every board in sysfs, what procfs and /dev hold."""
    boards = [g.pci_address for g in scan_pci_gpus(reader) if g.vendor == "nvidia"]
    return {
        "sysfs_boards": boards,
        "procfs_gpus": reader.listdir("proc/driver/nvidia/gpus"),
        "dev_nodes": sorted((n for n in reader.listdir("dev") if re.fullmatch(r"nvidia[0-9]+", n)),
                            key=lambda n: int(n[6:])),
        "NVIDIA_VISIBLE_DEVICES": env.get("NVIDIA_VISIBLE_DEVICES"),
        "container": visible < len(boards),
    }


def mapping_checks(reader: FsReader, nodes, env: dict[str, str], smi: list[dict[str, Any]]) -> list[str]:
    """CUDA_VISIBLE_DEVICES through numabind must land on nvidia-smi's boards; hostile values select nothing."""
    problems: list[str] = []

    def visible(value: str):
        found = discover_gpus(reader, nodes, env={**env, "CUDA_VISIBLE_DEVICES": value})
        return [g for g in found if g.vendor == "nvidia"]

    if len(smi) >= 2:
        order = list(reversed(range(len(smi))))
        value = ",".join(map(str, order))
        got = [g.pci_address for g in visible(value)]
        want = [smi[i]["pci_address"] for i in order]
        if got != want:
            problems.append(f"CUDA_VISIBLE_DEVICES={value}: numabind maps it to {got}, nvidia-smi's boards are {want}")
    for s in smi:
        got = [g.pci_address for g in visible(s["uuid"])]
        if got != [s["pci_address"]]:
            problems.append(f"CUDA_VISIBLE_DEVICES={s['uuid']}: numabind maps it to {got}, nvidia-smi says "
                            f"{s['pci_address']}")
    for value in HOSTILE:
        shown = value if len(value) < 20 else f"<{len(value)} digits>"
        try:
            got = visible(value)
        except NumabindError:
            continue
        except Exception as exc:  # the point of the check: nothing but numabind's own errors
            problems.append(f"CUDA_VISIBLE_DEVICES={shown}: {type(exc).__name__}: {exc}"[:300])
            continue
        if got:
            problems.append(f"CUDA_VISIBLE_DEVICES={shown}: numabind selects {[g.pci_address for g in got]}, "
                            f"CUDA selects no device")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "NUMABIND_GPU_VENDOR")}
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"   # nvidia-smi and NVML number GPUs in PCI bus order
    for var in ("CUDA_VISIBLE_DEVICES", "NUMABIND_GPU_VENDOR"):
        os.environ.pop(var, None)
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    smi = nvidia_smi()
    reader = FsReader()
    topo = discover_from(reader, env=env)       # env given: NVIDIA_VISIBLE_DEVICES counts on a replayed root too
    gpus = [g for g in topo.gpus if g.vendor == "nvidia"]
    nvml = _nvml.probe()
    if smi is None or not (smi or gpus):
        print("nothing to compare: " + ("nvidia-smi is missing or failed" if smi is None else "no NVIDIA GPU"))
        return 2
    rows, problems = compare(gpus, smi, nvml)
    problems += mapping_checks(reader, topo.nodes, env, smi)
    view = container_view(reader, env, len(gpus))
    uncertain = [f"GPU {r['index']}: {r['identity_note']}" for r in rows if r["identity"] == "uncertain"]
    result = {"gpus": rows, "nvml": nvml is not None, "container": view, "uncertain": uncertain,
              "problems": problems, "agree": not problems}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{len(rows)} GPUs; NVML {'used' if nvml is not None else 'not importable (pip install nvidia-ml-py)'}")
        print(f"sysfs lists {len(view['sysfs_boards'])} NVIDIA boards"
              f"{' (a container: this process opens fewer)' if view['container'] else ''}; "
              f"/proc/driver/nvidia/gpus holds {len(view['procfs_gpus'])}; /dev holds "
              f"{', '.join(view['dev_nodes']) or 'no nvidiaN'}; NVIDIA_VISIBLE_DEVICES="
              f"{view['NVIDIA_VISIBLE_DEVICES']}")
        for r in rows:
            print(f"  {r['index']}: numabind {r['numabind_pci']} node {r['numa_node']} ({r['numa_source']}, "
                  f"identity {r['identity']}) cpus {r['local_cpus']} | nvidia-smi {r['smi_pci']} | NVML memory "
                  f"{r['nvml_memory_nodes']} cpus {r['nvml_cpus']}")
        for u in uncertain:
            print(f"  uncertain: {u}")
        print("agree" if not problems else "DIFFER:\n  " + "\n  ".join(problems))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
