"""numabind.preflight.gpus: GPU identity cross-checked from every source present (issue 44 section 1), against fake
tools on PATH (nvidia-smi, amd-smi, rocm-smi, xpu-smi, npu-smi), a fake pynvml, a fake torch in a child and
fake sysfs trees."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from numabind._fs import FsReader
from numabind.preflight.gpus import Disagreement, cross_check_gpus, parse_npu_smi, parse_topo_matrix
from numabind._util import FrozenMap
from numabind.topology import discover_from

from .fakegpu import (BOX_ADDRS, add_amd_gpu, add_ascend_npu, add_intel_gpu, add_nvidia_gpu, container,
                      eight_gpu_box, fake_pynvml, nv_uuid)
from .fakesys import two_sockets

REPO = Path(__file__).resolve().parent.parent
CPUS = {0: "0-3,8-11", 1: "4-7,12-15"}
ADDRS = ("0000:18:00.0", "0000:9a:00.0")

#: A fake torch package for the child: tests/faketorch.py's module, given CUDA device properties from
#: $FAKE_TORCH_GPUS (a JSON list), or absent when that variable is unset.
TORCH_INIT = """
import json, os, sys, types
spec = os.environ.get("FAKE_TORCH_GPUS")
if spec is None:
    raise ImportError("no module named torch (fake)")
from tests.faketorch import fake_torch
torch = fake_torch()
gpus = json.loads(spec)
torch.version = types.SimpleNamespace(cuda="12.4", hip=None)
torch.cuda.is_available = lambda: bool(gpus)
torch.cuda.device_count = lambda: len(gpus)
torch.cuda.get_device_properties = lambda i: types.SimpleNamespace(**gpus[i])
sys.modules["torch"] = torch
"""


# ------------------------------------------------------------------------------------------------ builders
def _machine(tmp_path, *, nodes=(0, 1)):
    root = tmp_path / "root"
    two_sockets(root, cpus_per_socket=8)
    for k, addr in enumerate(ADDRS):
        add_nvidia_gpu(root, addr, numa_node=nodes[k], local_cpulist=CPUS[nodes[k]], minor=k)
    return root


def _tool(bin_dir: Path, name: str, outputs: dict[str, str]) -> None:
    """A fake ``name`` printing ``outputs[first argument]`` (key "" for any other), with shell builtins only."""
    lines = ["#!/bin/sh", 'case "$1" in']
    for arg, text in outputs.items():
        body = "".join(f"printf '%s\\n' '{line}'\n" for line in text.splitlines())
        lines.append(f"{arg or '*'}) {body};;")
    lines.append("esac")
    path = bin_dir / name
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)


def _smi_query(rows):
    return "\n".join(f"{i}, 00000000:{addr[5:].upper()}, {uuid}, NVIDIA H100 80GB HBM3" for i, addr, uuid in rows)


def _smi_topo(rows):
    head = "\t" + "\t".join(f"GPU{k}" for k in range(len(rows))) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    body = []
    for k, (cpus, node) in enumerate(rows):
        links = "\t".join(" X " if j == k else "NV18" for j in range(len(rows)))
        body.append(f"\x1b[4mGPU{k}\x1b[0m\t{links}\t{cpus}\t{node}\t\tN/A")
    return "\n".join([head, *body, "", "Legend:", "  X    = Self"])


def _nvidia_smi(bin_dir, rows, topo=None):
    """rows: (index, address, uuid); topo: (cpus, node) per nvidia-smi index (default: the machine's)."""
    topo = topo if topo is not None else [(CPUS[k], str(k)) for k in range(len(rows))]
    _tool(bin_dir, "nvidia-smi", {"topo": _smi_topo(topo), "": _smi_query(rows)})


def _agreeing_smi(bin_dir):
    _nvidia_smi(bin_dir, [(k, a, nv_uuid(k)) for k, a in enumerate(ADDRS)])


@pytest.fixture
def bin_dir(tmp_path):
    d = tmp_path / "bin"
    d.mkdir()
    return d


@pytest.fixture
def no_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)


def _nvml(monkeypatch, devices):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(devices))


def _agreeing_nvml(monkeypatch):
    _nvml(monkeypatch, [{"bus": f"0000{a.upper()}", "uuid": nv_uuid(k), "name": "H100", "cpus": CPUS[k],
                         "mems": [k]} for k, a in enumerate(ADDRS)])


def _env(tmp_path, bin_dir, torch=None, **extra):
    """The checked process's environment: PATH holds only the fake tools; torch is the fake (absent: None)."""
    pkg = tmp_path / "pylib" / "torch"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(TORCH_INIT)
    env = {"PATH": str(bin_dir), "PYTHONPATH": f"{pkg.parent}:{REPO}", **extra}
    if torch is not None:
        env["FAKE_TORCH_GPUS"] = json.dumps(torch)
    return env


def _torch_gpu(addr, uuid):
    bus, dev = int(addr[5:7], 16), int(addr[8:10], 16)
    return {"pci_domain_id": 0, "pci_bus_id": bus, "pci_device_id": dev, "uuid": uuid[4:], "name": "H100"}


def _check(root, env):
    """The cross-check of a fake root, asking the fake tools (a replayed root alone would not ask any)."""
    return cross_check_gpus(discover_from(FsReader(root), env=env), env=env, tools=True)


def _described(result):
    return [d.describe() for d in result.disagreements]


# ------------------------------------------------------------------------------------------------ agreement
def test_every_source_agrees(tmp_path, bin_dir, monkeypatch):
    root = _machine(tmp_path)
    _agreeing_smi(bin_dir)
    _agreeing_nvml(monkeypatch)
    env = _env(tmp_path, bin_dir, torch=[_torch_gpu(a, nv_uuid(k)) for k, a in enumerate(ADDRS)],
               CUDA_VISIBLE_DEVICES=f"{nv_uuid(0)},1")
    result = _check(root, env)
    assert _described(result) == [] and result.ok
    assert result.sources == ("sysfs", "nvml", "nvidia-smi", "nvidia-smi topo", "torch", "visibility")
    assert set(result.unavailable) == {"amd-smi", "rocm-smi", "xpu-smi", "npu-smi"}
    assert result.unavailable["xpu-smi"] == "xpu-smi is not on PATH"
    first = result.gpus[0]
    assert first.label == "GPU 0000:18:00.0 (numabind GPU 0)"
    assert {s.source for s in first.sightings} == set(result.sources)
    topo = first.said("nvidia-smi topo")
    assert topo is not None and topo.numa_nodes == {0} and topo.local_cpus == {0, 1, 2, 3, 8, 9, 10, 11}
    torch = first.said("torch")
    assert torch is not None and (torch.uuid, torch.cuda_index) == (nv_uuid(0), 0)
    out = json.loads(json.dumps(result.to_dict()))
    assert out["ok"] is True and out["gpus"][1]["sources"]["nvml"]["numa_node"] == "1"


# ------------------------------------------------------------------------------------------------ disagreements
def test_a_swapped_uuid_is_named(tmp_path, bin_dir, no_nvml):
    root = _machine(tmp_path)
    _nvidia_smi(bin_dir, [(0, ADDRS[0], nv_uuid(1)), (1, ADDRS[1], nv_uuid(0))])
    result = _check(root, _env(tmp_path, bin_dir))
    assert not result.ok
    hint = "a GPU named by UUID in CUDA_VISIBLE_DEVICES lands where nvidia-smi's UUID says"
    assert _described(result) == [
        f"GPU 0000:18:00.0 (numabind GPU 0): UUID differs: sysfs says {nv_uuid(0)}, nvidia-smi says {nv_uuid(1)}; "
        f"{hint}",
        f"GPU 0000:9a:00.0 (numabind GPU 1): UUID differs: sysfs says {nv_uuid(1)}, nvidia-smi says {nv_uuid(0)}; "
        f"{hint}"]
    d = result.disagreements[0]
    assert (d.gpu, d.field, dict(d.values)) == ("GPU 0000:18:00.0 (numabind GPU 0)", "UUID",
                                                {"sysfs": nv_uuid(0), "nvidia-smi": nv_uuid(1)})


def test_a_different_numa_node_from_nvidia_smi_topo(tmp_path, bin_dir, no_nvml):
    root = _machine(tmp_path)
    _nvidia_smi(bin_dir, [(k, a, nv_uuid(k)) for k, a in enumerate(ADDRS)],
                topo=[(CPUS[0], "0"), (CPUS[1], "0")])
    result = _check(root, _env(tmp_path, bin_dir))
    assert _described(result) == [
        "GPU 0000:9a:00.0 (numabind GPU 1): NUMA node differs: sysfs says 1, nvidia-smi topo says 0; numabind "
        "places the GPU by sysfs numa_node (the firmware's); check the BIOS's NUMA/SRAT settings"]


def test_nvml_memory_and_cpu_affinity(tmp_path, bin_dir, monkeypatch):
    root = _machine(tmp_path)
    _agreeing_smi(bin_dir)
    _nvml(monkeypatch, [{"bus": "00000000:18:00.0", "uuid": nv_uuid(0), "name": "H100", "cpus": CPUS[0],
                         "mems": [0]},
                        {"bus": "00000000:9A:00.0", "uuid": nv_uuid(1), "name": "H100", "cpus": "0-3",
                         "mems": [0, 1]}])
    result = _check(root, _env(tmp_path, bin_dir))
    # NVML's memory affinity 0-1 holds sysfs's node 1; its CPU affinity is not the node's CPUs
    assert _described(result) == [
        "GPU 0000:9a:00.0 (numabind GPU 1): local CPUs differs: sysfs says 4-7,12-15, nvml says 0-3, "
        "nvidia-smi topo says 4-7,12-15"]


def test_a_container_that_shows_fewer_gpus(tmp_path, bin_dir, no_nvml):
    root = tmp_path / "root"
    two_sockets(root, cpus_per_socket=8)
    eight_gpu_box(root, "nvidia")
    env = container(root, "nvidia", [4, 5])                       # NVIDIA_VISIBLE_DEVICES=4,5
    _nvidia_smi(bin_dir, [(0, BOX_ADDRS[4], nv_uuid(4)), (1, BOX_ADDRS[5], nv_uuid(5))],
                topo=[("56-111,168-223", "1")] * 2)
    env = _env(tmp_path, bin_dir, CUDA_VISIBLE_DEVICES="0,1,2,3", **env)
    result = _check(root, env)
    assert _described(result) == [
        "nvidia GPUs: visible count differs: sysfs says 2, visibility says 4 (CUDA_VISIBLE_DEVICES='0,1,2,3')"]
    assert [g.pci_address for g in result.gpus] == [BOX_ADDRS[4], BOX_ADDRS[5]]


def test_a_privileged_container_lists_more_than_nvidia_smi(tmp_path, bin_dir, no_nvml):
    root = tmp_path / "root"
    two_sockets(root, cpus_per_socket=8)
    eight_gpu_box(root, "nvidia")
    env = container(root, "nvidia", [4, 5], style="privileged")  # every /dev/nvidiaN: numabind counts 8
    _nvidia_smi(bin_dir, [(0, BOX_ADDRS[4], nv_uuid(4)), (1, BOX_ADDRS[5], nv_uuid(5))],
                topo=[("56-111,168-223", "1")] * 2)
    result = _check(root, _env(tmp_path, bin_dir, **env))
    described = _described(result)
    assert described[0] == ("nvidia GPUs: count differs: sysfs says 8, nvidia-smi says 2, visibility says 2 "
                            "(NVIDIA_VISIBLE_DEVICES='4,5'); the container exposes other GPUs than it was asked for")
    assert (f"GPU {BOX_ADDRS[0]} (numabind GPU 0): listed differs: sysfs says listed, nvidia-smi says not listed"
            in described)
    assert (f"GPU {BOX_ADDRS[4]} (numabind GPU 4): index differs: sysfs says 4, nvidia-smi says 0, "
            f"nvidia-smi topo says 0; numabind numbers GPUs in PCI bus order (as CUDA does under "
            f"CUDA_DEVICE_ORDER=PCI_BUS_ID); name GPUs by UUID (nvidia-smi -L) to be sure which board an index is"
            in described)


def test_fastest_first_order_differs_from_pci_order(tmp_path, bin_dir, no_nvml):
    root = _machine(tmp_path)
    _agreeing_smi(bin_dir)
    # the runtime puts the second board first (a faster model under CUDA_DEVICE_ORDER's default)
    env = _env(tmp_path, bin_dir, torch=[_torch_gpu(ADDRS[1], nv_uuid(1)), _torch_gpu(ADDRS[0], nv_uuid(0))])
    result = _check(root, env)
    hint = ("CUDA_DEVICE_ORDER is unset, so FASTEST_FIRST: the CUDA runtime numbers the fastest GPU first, "
            "numabind in PCI bus order; set CUDA_DEVICE_ORDER=PCI_BUS_ID")
    assert _described(result) == [
        f"GPU 0000:18:00.0 (numabind GPU 0): CUDA index differs: sysfs says 0, torch says 1; {hint}",
        f"GPU 0000:9a:00.0 (numabind GPU 1): CUDA index differs: sysfs says 1, torch says 0; {hint}"]
    assert result.notes == ("torch: the runtime numbers the GPUs 0000:9a:00.0, 0000:18:00.0, not in PCI bus order "
                            "(CUDA_DEVICE_ORDER=FASTEST_FIRST (unset))",)


def test_pci_bus_id_order_agrees_with_numabind(tmp_path, bin_dir, no_nvml):
    root = _machine(tmp_path)
    _agreeing_smi(bin_dir)
    env = _env(tmp_path, bin_dir, torch=[_torch_gpu(a, nv_uuid(k)) for k, a in enumerate(ADDRS)],
               CUDA_DEVICE_ORDER="PCI_BUS_ID")
    result = _check(root, env)
    assert result.ok and result.notes == () and "torch" in result.sources


def test_a_visible_uuid_names_the_board_torch_opens(tmp_path, bin_dir, no_nvml):
    root = _machine(tmp_path)
    _agreeing_smi(bin_dir)
    # CUDA_VISIBLE_DEVICES names the second board by UUID prefix; the runtime opened the first one
    env = _env(tmp_path, bin_dir, torch=[_torch_gpu(ADDRS[0], nv_uuid(0))], CUDA_VISIBLE_DEVICES=nv_uuid(1)[:12],
               CUDA_DEVICE_ORDER="PCI_BUS_ID")
    result = _check(root, env)
    assert _described(result) == [
        "GPU 0000:18:00.0: CUDA index differs: sysfs says not visible, torch says 0",
        "GPU 0000:9a:00.0 (numabind GPU 0): CUDA index differs: sysfs says 0, torch says not visible, "
        "visibility says 0"]


# ------------------------------------------------------------------------------------------------ absent sources
def test_absent_sources_are_said_not_errors(tmp_path, bin_dir, no_nvml):
    root = _machine(tmp_path)
    result = _check(root, _env(tmp_path, bin_dir))
    assert result.ok and result.sources == ("sysfs",)
    assert dict(result.unavailable) == {
        "nvml": "pynvml is not importable (pip install nvidia-ml-py)",
        "nvidia-smi": "nvidia-smi is not on PATH",
        "nvidia-smi topo": "nvidia-smi is not on PATH",
        "amd-smi": "amd-smi is not on PATH",
        "rocm-smi": "rocm-smi is not on PATH",
        "xpu-smi": "xpu-smi is not on PATH",
        "npu-smi": "npu-smi is not on PATH",
        "torch": "torch is not importable (ImportError: no module named torch (fake))",
        "visibility": "none of CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES is set",
    }
    assert json.loads(json.dumps(result.to_dict()))["unavailable"]["nvml"].startswith("pynvml")


def test_failing_tools_become_unavailable_with_why(tmp_path, bin_dir, monkeypatch):
    root = _machine(tmp_path)
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed: no driver' >&2\nexit 9\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    (bin_dir / "xpu-smi").write_text("#!/bin/sh\nwhile :; do :; done\n")
    (bin_dir / "xpu-smi").chmod(0o755)
    monkeypatch.setattr("numabind.preflight.gpus.TOOL_TIMEOUT", 0.5)
    _nvml(monkeypatch, [])
    monkeypatch.setattr(sys.modules["pynvml"], "nvmlInit", lambda: (_ for _ in ()).throw(RuntimeError("no driver")))
    result = _check(root, _env(tmp_path, bin_dir, torch=[]))
    assert result.ok and result.sources == ("sysfs",)
    assert result.unavailable["nvidia-smi"] == ("nvidia-smi --query-gpu=index,pci.bus_id,uuid,name "
                                                "--format=csv,noheader exited with status 9: "
                                                "'NVIDIA-SMI has failed: no driver'")
    assert result.unavailable["xpu-smi"] == "xpu-smi discovery -j did not answer in 0.5 s"
    assert result.unavailable["nvml"] == "NVML did not start (nvmlInit failed: is the NVIDIA driver loaded?)"
    assert result.unavailable["torch"] == "torch sees no GPU (torch.cuda.is_available() is False)"


# ------------------------------------------------------------------------------------------------ other vendors
def test_amd_smi_and_rocm_smi(tmp_path, bin_dir, no_nvml):
    root = tmp_path / "root"
    two_sockets(root, cpus_per_socket=8)
    add_amd_gpu(root, "0000:0c:00.0", kfd_node=2, numa_node=0, local_cpulist=CPUS[0])
    add_amd_gpu(root, "0000:8c:00.0", kfd_node=3, numa_node=1, local_cpulist=CPUS[1])
    static = [{"gpu": 0, "bus": {"bdf": "0000:0c:00.0"}, "numa": {"node": 0, "affinity": 0}},
              {"gpu": 1, "bus": {"bdf": "0000:8c:00.0"}, "numa": {"node": 0, "affinity": 0}}]
    _tool(bin_dir, "amd-smi", {"static": json.dumps({"gpu_data": static})})
    result = _check(root, _env(tmp_path, bin_dir, HIP_VISIBLE_DEVICES="0"))
    assert "amd-smi" in result.sources and result.unavailable["rocm-smi"] == "not asked: amd-smi answered"
    assert _described(result) == ["GPU 0000:8c:00.0: NUMA node differs: sysfs says 1, amd-smi says 0; numabind "
                                  "places the GPU by sysfs numa_node (the firmware's); check the BIOS's NUMA/SRAT "
                                  "settings"]
    (bin_dir / "amd-smi").unlink()
    rocm = {"card0": {"PCI Bus": "0000:0C:00.0", "(Topology) Numa Node": "0"},
            "card1": {"PCI Bus": "0000:8C:00.0", "(Topology) Numa Node": "1"}}
    _tool(bin_dir, "rocm-smi", {"": json.dumps(rocm)})
    result = _check(root, _env(tmp_path, bin_dir, HIP_VISIBLE_DEVICES="0,1,2"))
    assert "rocm-smi" in result.sources
    assert _described(result) == ["amd GPUs: visible count differs: sysfs says 2, visibility says 3 "
                                  "(HIP_VISIBLE_DEVICES='0,1,2')"]


def test_xpu_smi_lists_a_gpu_sysfs_does_not(tmp_path, bin_dir, no_nvml):
    root = tmp_path / "root"
    two_sockets(root, cpus_per_socket=8)
    add_intel_gpu(root, "0000:4d:00.0", numa_node=0, local_cpulist=CPUS[0])
    found = {"device_list": [{"device_id": 0, "pci_bdf_address": "0000:4d:00.0"},
                             {"device_id": 1, "pci_bdf_address": "0000:9a:00.0"}]}
    _tool(bin_dir, "xpu-smi", {"discovery": json.dumps(found)})
    result = _check(root, _env(tmp_path, bin_dir))
    assert _described(result) == ["intel GPUs: count differs: sysfs says 1, xpu-smi says 2",
                                  "GPU 0000:9a:00.0: listed differs: sysfs says not listed, xpu-smi says listed"]


NPU_SMI = """+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.rc2                 Version: 23.0.rc2                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 97.4        37                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3165 / 65536         |
+===========================+===============+====================================================+
| 1     910B3               | OK            | 92.1        36                0    / 0             |
| 0                         | 0000:01:00.0  | 0           0    / 0          3164 / 65536         |
+===========================+===============+====================================================+"""


def test_npu_smi_bus_ids(tmp_path, bin_dir, no_nvml):
    assert parse_npu_smi(NPU_SMI) == ["0000:c1:00.0", "0000:01:00.0"]
    root = tmp_path / "root"
    two_sockets(root, cpus_per_socket=8)
    add_ascend_npu(root, "0000:01:00.0", numa_node=0, local_cpulist=CPUS[0])
    add_ascend_npu(root, "0000:c1:00.0", numa_node=1, local_cpulist=CPUS[1])
    _tool(bin_dir, "npu-smi", {"info": NPU_SMI})
    result = _check(root, _env(tmp_path, bin_dir))
    assert result.ok and "npu-smi" in result.sources
    assert [g.pci_address for g in result.gpus] == ["0000:01:00.0", "0000:c1:00.0"]


# ------------------------------------------------------------------------------------------------ parsers, values
def test_topo_matrix_parser_reads_real_shapes():
    text = ("\t\x1b[4mGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
            "GPU0\t X \tNV18\tNV18\tSYS\t0-47,96-143\t0\t\tN/A\n"
            "GPU1\tNV18\t X \tNV18\tSYS\t48-95,144-191\t1\t\tN/A\n"
            "GPU2\tNV18\tNV18\t X \tSYS\tN/A\tN/A\t\tN/A\n"
            "NIC0\tSYS\tSYS\tSYS\t X \n\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe\n")
    assert parse_topo_matrix(text) == [(0, frozenset(range(0, 48)) | frozenset(range(96, 144)), frozenset({0})),
                                       (1, frozenset(range(48, 96)) | frozenset(range(144, 192)), frozenset({1})),
                                       (2, None, None)]
    old = "\tGPU0\tCPU Affinity\nGPU0\t X \t0-15\n"
    assert parse_topo_matrix(old) == [(0, frozenset(range(16)), None)]
    assert parse_topo_matrix("No devices were found\n") == []


def test_a_disagreement_describes_itself():
    d = Disagreement("GPU 0000:18:00.0 (numabind GPU 0)", "NUMA node",
                     FrozenMap({"nvidia-smi topo": "0", "sysfs": "1", "nvml": "0"}))
    assert d.describe() == ("GPU 0000:18:00.0 (numabind GPU 0): NUMA node differs: sysfs says 1, nvml says 0, "
                            "nvidia-smi topo says 0")
    assert d.to_dict()["values"] == {"sysfs": "1", "nvml": "0", "nvidia-smi topo": "0"}


def test_mig_slices_of_one_gpu_count_once(tmp_path, bin_dir, no_nvml):
    root = tmp_path / "root"
    two_sockets(root, cpus_per_socket=8)
    eight_gpu_box(root, "nvidia")
    container(root, "nvidia", [4, 5])
    _nvidia_smi(bin_dir, [(0, BOX_ADDRS[4], nv_uuid(4)), (1, BOX_ADDRS[5], nv_uuid(5))],
                topo=[("56-111,168-223", "1")] * 2)
    result = _check(root, _env(tmp_path, bin_dir, NVIDIA_VISIBLE_DEVICES="4:0,4:1,5"))
    assert result.ok and "visibility" in result.sources
    result = _check(root, _env(tmp_path, bin_dir, NVIDIA_VISIBLE_DEVICES="4,5,6"))
    assert _described(result) == [
        "nvidia GPUs: count differs: sysfs says 2, nvidia-smi says 2, visibility says 3 (NVIDIA_VISIBLE_DEVICES="
        "'4,5,6'); the container exposes other GPUs than it was asked for"]


def test_a_replayed_machine_asks_no_tool_of_this_host(tmp_path, bin_dir, monkeypatch):
    root = _machine(tmp_path)
    _nvidia_smi(bin_dir, [(0, ADDRS[0], nv_uuid(5))])     # this host's nvidia-smi: another machine's GPU
    _agreeing_nvml(monkeypatch)
    env = _env(tmp_path, bin_dir, CUDA_VISIBLE_DEVICES="1")
    result = cross_check_gpus(discover_from(FsReader(root), env=env), env=env)
    assert result.ok and result.sources == ("sysfs", "visibility")
    assert result.unavailable["nvidia-smi"] == (f"not asked: the topology is a replayed machine ({root}); this "
                                                f"host's tools would describe this host")
    assert set(result.unavailable) == {"nvml", "nvidia-smi", "nvidia-smi topo", "amd-smi", "rocm-smi", "xpu-smi",
                                       "npu-smi", "torch"}
