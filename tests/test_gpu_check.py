"""tools/gpu_check.py: the prepared cross-check of GPU discovery against nvidia-smi and NVML, a thin caller of
numabind.preflight.gpus (tests/test_check_gpus.py tests the cross-check itself)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .fakegpu import BOX_ADDRS, add_nvidia_gpu, container, eight_gpu_box, nv_uuid
from .fakesys import two_sockets

REPO = Path(__file__).resolve().parent.parent
TOOL = REPO / "tools" / "gpu_check.py"


def _machine(tmp_path):
    root = tmp_path / "root"
    two_sockets(root, cpus_per_socket=8)
    for k, addr in enumerate(("0000:18:00.0", "0000:9a:00.0")):
        add_nvidia_gpu(root, addr, numa_node=k, minor=k)
    return root


def _fake_smi(tmp_path, lines, topo=()):
    """A fake nvidia-smi (shell builtins only: PATH holds nothing else): ``lines`` for the query, ``topo`` for
    ``nvidia-smi topo -m``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"

    def printed(rows):
        return "".join(f"printf '%s\\n' '{row}'\n" for row in rows)

    smi.write_text(f"#!/bin/sh\nif [ \"$1\" = topo ]; then\n{printed(topo)}exit 0\nfi\n{printed(lines)}")
    smi.chmod(0o755)
    return bin_dir


#: Fakes the tool's process imports: pynvml built by tests/fakegpu.py from $FAKE_NVML (a JSON list; unset: not
#: importable), and no torch.
PYNVML = """
import json, os, sys
if "FAKE_NVML" not in os.environ:
    raise ImportError("no module named pynvml (fake)")
from tests.fakegpu import fake_pynvml
sys.modules["pynvml"] = fake_pynvml(json.loads(os.environ["FAKE_NVML"]))
"""


def _pylib(tmp_path):
    lib = tmp_path / "pylib"
    (lib / "torch").mkdir(parents=True, exist_ok=True)
    (lib / "torch" / "__init__.py").write_text('raise ImportError("no module named torch (fake)")\n')
    (lib / "pynvml.py").write_text(PYNVML)
    return lib


def _run(tmp_path, root, bin_dir, nvml=None, **extra):
    env = {k: v for k, v in os.environ.items() if k != "NVIDIA_VISIBLE_DEVICES"}   # this runner's own container
    env.update(NUMABIND_FSROOT=str(root), PATH=f"{bin_dir}", PYTHONPATH=f"{_pylib(tmp_path)}:{REPO}", **extra)
    if nvml is not None:
        env["FAKE_NVML"] = json.dumps(nvml)
    return subprocess.run([sys.executable, str(TOOL), "--json"], capture_output=True, text=True, env=env,
                          timeout=120)


def test_agrees_with_nvidia_smi_nvml_and_topo(tmp_path):
    root = _machine(tmp_path)
    bin_dir = _fake_smi(tmp_path, [f"0, 00000000:18:00.0, {nv_uuid(0)}, NVIDIA H100 80GB HBM3",
                                   f"1, 00000000:9A:00.0, {nv_uuid(1)}, NVIDIA H100 80GB HBM3"],
                        topo=["\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity", "GPU0\t X \tNV18\tN/A\t0",
                              "GPU1\tNV18\t X \tN/A\t1"])
    nvml = [{"bus": "00000000:18:00.0", "uuid": nv_uuid(0), "name": "H100", "cpus": "0-3,8-11", "mems": [0]},
            {"bus": "00000000:9A:00.0", "uuid": nv_uuid(1), "name": "H100", "cpus": "4-7,12-15", "mems": [1]}]
    proc = _run(tmp_path, root, bin_dir, nvml=nvml)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["agree"] and out["problems"] == []
    assert out["sources"] == ["sysfs", "nvml", "nvidia-smi", "nvidia-smi topo"]
    assert out["unavailable"]["torch"] == "torch is not importable (ImportError: no module named torch (fake))"
    assert [g["pci_address"] for g in out["gpus"]] == ["0000:18:00.0", "0000:9a:00.0"]
    assert [g["sources"]["nvidia-smi topo"]["numa_node"] for g in out["gpus"]] == ["0", "1"]
    assert [g["sources"]["nvml"]["numa_node"] for g in out["gpus"]] == ["0", "1"]


def test_reports_a_different_order_or_uuid(tmp_path):
    root = _machine(tmp_path)
    bin_dir = _fake_smi(tmp_path, [f"0, 00000000:9A:00.0, {nv_uuid(1)}, NVIDIA H100 80GB HBM3",
                                   f"1, 00000000:18:00.0, {nv_uuid(7)}, NVIDIA H100 80GB HBM3"])
    proc = _run(tmp_path, root, bin_dir)
    assert proc.returncode == 1
    problems = json.loads(proc.stdout)["problems"]
    order = ("numabind numbers GPUs in PCI bus order (as CUDA does under CUDA_DEVICE_ORDER=PCI_BUS_ID); name GPUs "
             "by UUID (nvidia-smi -L) to be sure which board an index is")
    assert problems == [
        f"GPU 0000:18:00.0 (numabind GPU 0): UUID differs: sysfs says {nv_uuid(0)}, nvidia-smi says {nv_uuid(7)}; "
        f"a GPU named by UUID in CUDA_VISIBLE_DEVICES lands where nvidia-smi's UUID says",
        f"GPU 0000:18:00.0 (numabind GPU 0): index differs: sysfs says 0, nvidia-smi says 1; {order}",
        f"GPU 0000:9a:00.0 (numabind GPU 1): index differs: sysfs says 1, nvidia-smi says 0; {order}"]


def test_nothing_to_compare_without_nvidia_smi(tmp_path):
    root = _machine(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _run(tmp_path, root, empty)
    assert proc.returncode == 2 and proc.stdout == "nothing to compare: nvidia-smi is not on PATH\n"


def test_nothing_to_compare_without_a_gpu(tmp_path):
    root = tmp_path / "root"
    two_sockets(root, cpus_per_socket=8)
    proc = _run(tmp_path, root, _fake_smi(tmp_path, []))
    assert proc.returncode == 2 and proc.stdout == "nothing to compare: no NVIDIA GPU\n"


def test_nvml_memory_and_cpu_affinity_are_compared(tmp_path):
    root = _machine(tmp_path)
    bin_dir = _fake_smi(tmp_path, [f"0, 00000000:18:00.0, {nv_uuid(0)}, NVIDIA H100 80GB HBM3",
                                   f"1, 00000000:9A:00.0, {nv_uuid(1)}, NVIDIA H100 80GB HBM3"])
    nvml = [{"bus": "00000000:18:00.0", "uuid": nv_uuid(0), "name": "H100", "cpus": "0-3,8-11", "mems": [0]},
            {"bus": "00000000:9A:00.0", "uuid": nv_uuid(1), "name": "H100", "cpus": "0-3", "mems": [0]}]
    proc = _run(tmp_path, root, bin_dir, nvml=nvml)
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert out["gpus"][0]["sources"]["nvml"]["numa_node"] == "0"
    # the fake's GPUs have no local_cpulist: only NVML says CPUs, so they compare with nothing
    assert out["problems"] == ["GPU 0000:9a:00.0 (numabind GPU 1): NUMA node differs: sysfs says 1, nvml says 0; "
                               "numabind places the GPU by sysfs numa_node (the firmware's); check the BIOS's "
                               "NUMA/SRAT settings"]


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
    assert [(g["gpu"], g["sources"]["sysfs"]["numa_node"]) for g in out["gpus"]] == [
        ("GPU 0000:9a:00.0 (numabind GPU 0)", "1"), ("GPU 0000:ab:00.0 (numabind GPU 1)", "1")]
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
    assert out["problems"][0] == ("nvidia GPUs: count differs: sysfs says 8, nvidia-smi says 2, visibility says 2 "
                                  "(NVIDIA_VISIBLE_DEVICES='4,5'); the container exposes other GPUs than it was "
                                  "asked for")
    assert "GPU 0000:9a:00.0 (numabind GPU 4): index differs: sysfs says 4, nvidia-smi says 0" in out["problems"][-4]
    assert len(out["uncertain"]) == 8 and "NVIDIA_VISIBLE_DEVICES='4,5'" in out["uncertain"][0]
