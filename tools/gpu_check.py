"""Cross-check numabind's GPU discovery against nvidia-smi, NVML and every other source on a machine with NVIDIA GPUs.

    python3 tools/gpu_check.py [--json]

A thin caller of ``numabind.preflight.gpus.cross_check_gpus`` (the GPU identity part of ``numabind check``), run
with no CUDA_VISIBLE_DEVICES and with CUDA_DEVICE_ORDER=PCI_BUS_ID (the check is about the GPUs this process
can open: inside a container, the container's GPUs, while sysfs lists every board). Per GPU, keyed by PCI
address, it compares what numabind's discovery (sysfs, procfs, device files, NVIDIA_VISIBLE_DEVICES), NVML
(nvidia-ml-py), ``nvidia-smi --query-gpu``, ``nvidia-smi topo -m`` and torch (when importable) say: the count,
the PCI addresses and their order, the UUIDs, the NUMA node and the local CPUs.

It also reports what the container shows (how many NVIDIA boards sysfs lists, what /proc/driver/nvidia/gpus
and /dev hold, NVIDIA_VISIBLE_DEVICES) and each GPU's identity (certain or uncertain, and why).

Exit status 0 when everything that could be compared agrees, 1 on any difference, 2 when there is nothing to
compare (no nvidia-smi or no GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from numabind._fs import FsReader  # noqa: E402
from numabind.preflight.gpus import cross_check_gpus  # noqa: E402
from numabind.devices import scan_pci_gpus  # noqa: E402
from numabind.topology import discover_from  # noqa: E402


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "NUMABIND_GPU_VENDOR")}
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"   # nvidia-smi and NVML number GPUs in PCI bus order
    reader = FsReader()
    topo = discover_from(reader, env=env)       # env given: NVIDIA_VISIBLE_DEVICES counts on a replayed root too
    gpus = [g for g in topo.gpus if g.vendor == "nvidia"]
    identity = cross_check_gpus(topo, env=env, tools=True)   # this host's tools, even on a replayed root
    listed = any(g.vendor == "nvidia" for g in identity.gpus)
    if "nvidia-smi" not in identity.sources or not listed:
        why = identity.unavailable.get("nvidia-smi", "no NVIDIA GPU")
        print(f"nothing to compare: {why}")
        return 2
    problems = [d.describe() for d in identity.disagreements]
    view = container_view(reader, env, len(gpus))
    uncertain = [f"GPU {g.index}: {g.identity_note}" for g in gpus if not g.identity_certain]
    result = {**identity.to_dict(), "container": view, "uncertain": uncertain, "problems": problems,
              "agree": identity.ok}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{len(identity.gpus)} GPUs; sources: {', '.join(identity.sources)}")
        for source, why in identity.unavailable.items():
            print(f"  {source} unavailable: {why}")
        print(f"sysfs lists {len(view['sysfs_boards'])} NVIDIA boards"
              f"{' (a container: this process opens fewer)' if view['container'] else ''}; "
              f"/proc/driver/nvidia/gpus holds {len(view['procfs_gpus'])}; /dev holds "
              f"{', '.join(view['dev_nodes']) or 'no nvidiaN'}; NVIDIA_VISIBLE_DEVICES="
              f"{view['NVIDIA_VISIBLE_DEVICES']}")
        for g in gpus:
            print(f"  {g.describe()} ({g.numa_source}) cpus {g.to_dict()['local_cpus']}")
        for u in uncertain:
            print(f"  uncertain: {u}")
        for note in identity.notes:
            print(f"  note: {note}")
        print("agree" if identity.ok else "DIFFER:\n  " + "\n  ".join(problems))
    return 0 if identity.ok else 1


if __name__ == "__main__":
    sys.exit(main())
