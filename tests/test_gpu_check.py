"""tools/gpu_check.py: the prepared cross-check of GPU discovery against nvidia-smi and NVML."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from numabind.devices.nvml import NvmlDevice
from numabind.cpulist import parse_cpulist
from numabind.topology import discover

from .fakegpu import BOX_ADDRS, add_nvidia_gpu, container, eight_gpu_box, nv_uuid
from .fakesys import two_sockets
from .tools import load_tool

REPO = Path(__file__).resolve().parent.parent
TOOL = REPO / "tools" / "gpu_check.py"


def _tool():
    return load_tool("gpu_check")


def _machine(tmp_path):
    root = tmp_path / "root"
    two_sockets(root, cpus_per_socket=8)
    for k, addr in enumerate(("0000:18:00.0", "0000:9a:00.0")):
        add_nvidia_gpu(root, addr, numa_node=k, minor=k)
    return root


def _fake_smi(tmp_path, lines):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncat <<'EOF'\n" + "".join(f"{line}\n" for line in lines) + "EOF\n")
    smi.chmod(0o755)
    return bin_dir


def _run(tmp_path, root, bin_dir, **extra):
    env = {k: v for k, v in os.environ.items() if k != "NVIDIA_VISIBLE_DEVICES"}   # this runner's own container
    env.update(NUMABIND_FSROOT=str(root), PATH=f"{bin_dir}:/usr/bin:/bin", **extra)
    return subprocess.run([sys.executable, str(TOOL), "--json"], capture_output=True, text=True, env=env,
                          timeout=120)


def test_agrees_with_nvidia_smi(tmp_path):
    root = _machine(tmp_path)
    bin_dir = _fake_smi(tmp_path, [f"0, 00000000:18:00.0, {nv_uuid(0)}, NVIDIA H100 80GB HBM3",
                                   f"1, 00000000:9A:00.0, {nv_uuid(1)}, NVIDIA H100 80GB HBM3"])
    proc = _run(tmp_path, root, bin_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["agree"] and [r["numa_node"] for r in out["gpus"]] == [0, 1]
    assert [r["smi_pci"] for r in out["gpus"]] == ["0000:18:00.0", "0000:9a:00.0"]


def test_reports_a_different_order_or_uuid(tmp_path):
    root = _machine(tmp_path)
    bin_dir = _fake_smi(tmp_path, [f"0, 00000000:9A:00.0, {nv_uuid(1)}, NVIDIA H100 80GB HBM3",
                                   f"1, 00000000:18:00.0, {nv_uuid(7)}, NVIDIA H100 80GB HBM3"])
    proc = _run(tmp_path, root, bin_dir)
    assert proc.returncode == 1
    problems = json.loads(proc.stdout)["problems"]
    assert "GPU 0: numabind 0000:18:00.0, nvidia-smi 0000:9a:00.0" in problems
    assert any("UUID" in p for p in problems)


def test_nothing_to_compare_without_nvidia_smi(tmp_path):
    root = _machine(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _run(tmp_path, root, empty)
    assert proc.returncode == 2 and "nvidia-smi is missing" in proc.stdout


def test_nvml_memory_and_cpu_affinity_are_compared(tmp_path):
    root = _machine(tmp_path)
    gpus = [g for g in discover(root).gpus]
    smi = [{"index": k, "pci_address": g.pci_address, "uuid": g.uuid, "name": "x"} for k, g in enumerate(gpus)]
    nvml = [NvmlDevice(0, gpus[0].pci_address, memory_nodes=frozenset({0})),
            NvmlDevice(1, gpus[1].pci_address, memory_nodes=frozenset({0}), cpu_affinity=parse_cpulist("0-3"))]
    rows, problems = _tool().compare(gpus, smi, nvml)
    assert rows[0]["nvml_memory_nodes"] == "0"
    assert problems == ["GPU 1: numabind node 1, NVML memory affinity 0"]


def _smi_rows(ks):
    return [f"{i}, 00000000:{BOX_ADDRS[k][5:].upper()}, {nv_uuid(k)}, NVIDIA H100 80GB HBM3" for i, k in enumerate(ks)]


def test_container_mapping_agrees(tmp_path):
    root = tmp_path / "root"
    two_sockets(root, cpus_per_socket=8)
    eight_gpu_box(root, "nvidia")
    env = container(root, "nvidia", [4, 5])
    proc = _run(tmp_path, root, _fake_smi(tmp_path, _smi_rows([4, 5])), **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert [(r["numabind_pci"], r["numa_node"], r["identity"]) for r in out["gpus"]] == [
        ("0000:9a:00.0", 1, "certain"), ("0000:ab:00.0", 1, "certain")]
    view = out["container"]
    assert view["container"] and len(view["sysfs_boards"]) == 8
    assert view["procfs_gpus"] == [BOX_ADDRS[4], BOX_ADDRS[5]] and view["dev_nodes"] == ["nvidia4", "nvidia5"]
    assert view["NVIDIA_VISIBLE_DEVICES"] == "4,5" and out["uncertain"] == []


def test_privileged_container_differs_and_says_why(tmp_path):
    root = tmp_path / "root"
    two_sockets(root, cpus_per_socket=8)
    eight_gpu_box(root, "nvidia")
    env = container(root, "nvidia", [4, 5], style="privileged")
    # this fake nvidia-smi lists the two boards the runtime was asked for; numabind counts the 8 it could open
    proc = _run(tmp_path, root, _fake_smi(tmp_path, _smi_rows([4, 5])), **env)
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert "numabind sees 8 NVIDIA GPUs, nvidia-smi lists 2" in out["problems"]
    assert any("CUDA_VISIBLE_DEVICES=1,0: numabind maps it to" in p for p in out["problems"])
    assert len(out["uncertain"]) == 8 and "NVIDIA_VISIBLE_DEVICES='4,5'" in out["uncertain"][0]


def test_mapping_checks_catch_a_wrong_index(tmp_path):
    from numabind._fs import FsReader

    root = _machine(tmp_path)
    reader = FsReader(root)
    topo = discover(root)
    smi = [{"index": 0, "pci_address": "0000:9a:00.0", "uuid": nv_uuid(1), "name": "x"},
           {"index": 1, "pci_address": "0000:18:00.0", "uuid": nv_uuid(0), "name": "x"}]
    problems = _tool().mapping_checks(reader, topo.nodes, {}, smi)
    assert problems[0].startswith("CUDA_VISIBLE_DEVICES=1,0: numabind maps it to ['0000:9a:00.0', '0000:18:00.0']")
    assert len(problems) == 1          # the UUIDs land right; the hostile values select nothing
