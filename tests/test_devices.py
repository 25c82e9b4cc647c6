"""GPU discovery from fake sysfs/procfs trees, visible-device mapping, NVML (mocked at pynvml)."""

from __future__ import annotations

import json
import logging
import os
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numabind._fs import FsReader
from numabind._util import FrozenMap
from numabind.cpulist import parse_cpulist
from numabind.devices import (
    Gpu,
    PciGpu,
    discover_gpus,
    parse_nvidia_information,
    scan_pci_gpus,
    select_visible,
)
from numabind.errors import PlanError
from numabind.topology import Node

from .fakegpu import add_amd_gpu, add_intel_gpu, add_kfd_cpu_node, add_nvidia_gpu, add_pci_device, fake_pynvml, nv_uuid

# ------------------------------------------------------------------ helpers
GiB = 1 << 30


def nodes_of(spec: dict[int, str], memory: dict[int, int] | None = None) -> FrozenMap:
    """{id: cpulist} -> {id: Node}; every node has 64 GiB unless ``memory`` says otherwise."""
    memory = memory or {}
    ids = sorted(spec)
    return FrozenMap({
        n: Node(id=n, cpus=parse_cpulist(spec[n]), memory_bytes=memory.get(n, 64 * GiB),
                distances=FrozenMap({m: 10 if m == n else 21 for m in ids}))
        for n in ids
    })


TWO_NODES = nodes_of({0: "0-55,112-167", 1: "56-111,168-223"})
DGX_ADDRS = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
             "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]


def dgx(root, **kw):
    """DGX-style: 2 sockets x 4 NVIDIA GPUs, created in shuffled order."""
    for minor in (5, 0, 7, 2, 1, 6, 3, 4):
        addr = DGX_ADDRS[minor]
        node = 0 if minor < 4 else 1
        add_nvidia_gpu(root, addr, numa_node=node,
                       local_cpulist="0-55,112-167" if node == 0 else "56-111,168-223",
                       uuid=nv_uuid(minor), minor=minor, **kw)
    return root


def gpus(root, env=None, nodes=TWO_NODES, **kw):
    return discover_gpus(FsReader(root), nodes, env=env or {}, **kw)


def addrs(found):
    return [g.pci_address for g in found]


# ---------------------------------------------------------------- scanning
def test_scan_keeps_gpu_classes_of_known_vendors_only(tmp_path):
    add_nvidia_gpu(tmp_path, "0000:18:00.0")
    add_pci_device(tmp_path, "0000:18:00.1", vendor="nvidia", pci_class=0x040300)     # HDMI audio
    add_pci_device(tmp_path, "0000:05:00.0", vendor="nvidia", pci_class=0x068000)     # NVSwitch bridge
    add_pci_device(tmp_path, "0000:00:0b.0", vendor="intel", pci_class=0x120000)      # Intel NPU
    add_pci_device(tmp_path, "0000:07:00.0", vendor=0x1A03, pci_class=0x030000)      # ASPEED BMC VGA
    add_amd_gpu(tmp_path, "0000:c1:00.0", kfd_node=None)                              # class 0x1200
    add_intel_gpu(tmp_path, "0000:00:02.0", pci_class=0x030000)
    found = scan_pci_gpus(FsReader(tmp_path))
    assert [(g.pci_address, g.vendor, g.integrated) for g in found] == [
        ("0000:00:02.0", "intel", True),
        ("0000:18:00.0", "nvidia", False),
        ("0000:c1:00.0", "amd", False),
    ]


def test_parse_nvidia_information():
    info = parse_nvidia_information("Model: \t\t NVIDIA H100\nGPU UUID: \t GPU-abc\nDevice Minor: \t 3\n")
    assert info == {"Model": "NVIDIA H100", "GPU UUID": "GPU-abc", "Device Minor": "3"}


def test_dgx_two_sockets_four_gpus_each(tmp_path):
    found = gpus(dgx(tmp_path))
    assert addrs(found) == DGX_ADDRS
    assert [g.index for g in found] == list(range(8))
    assert [g.numa_node for g in found] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [g.uuid for g in found] == [nv_uuid(k) for k in range(8)]
    assert [g.minor for g in found] == list(range(8))
    assert {g.numa_source for g in found} == {"numa_node"}
    assert found[4].local_cpus == parse_cpulist("56-111,168-223")
    assert found[0].name == "NVIDIA H100 80GB HBM3"
    assert found[0].device_id == 0x2330
    assert found[0] == Gpu(index=0, pci_address="0000:18:00.0", vendor="nvidia", numa_node=0,
                           local_cpus=parse_cpulist("0-55,112-167"), uuid=nv_uuid(0),
                           name="NVIDIA H100 80GB HBM3", minor=0, device_id=0x2330, physical_index=0)


def test_no_gpus_and_empty_root(tmp_path):
    assert gpus(tmp_path) == ()


def test_to_dict_is_json(tmp_path):
    d = gpus(dgx(tmp_path))[5].to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["local_cpus"] == "56-111,168-223"
    assert d["device_id"] == "0x2330"
    assert d["pci_address"] == "0000:ab:00.0"


# ------------------------------------------------------ CUDA_VISIBLE_DEVICES
@pytest.mark.parametrize("value,expected", [
    ("3,1", [3, 1]),
    (" 2 , 0 ", [2, 0]),
    ("", []),
    ("-1", []),
    ("1,9,2", [1]),          # out of range ends the list
    ("1,x,2", [1]),          # not an index or UUID ends the list
    ("1,1,2", [1]),          # a repeat ends the list
    ("7,6,5,4,3,2,1,0", [7, 6, 5, 4, 3, 2, 1, 0]),
])
def test_cuda_visible_devices_indices(tmp_path, value, expected):
    found = gpus(dgx(tmp_path), {"CUDA_VISIBLE_DEVICES": value})
    assert [g.physical_index for g in found] == expected
    assert [g.index for g in found] == list(range(len(expected)))
    assert addrs(found) == [DGX_ADDRS[k] for k in expected]


def test_cuda_visible_devices_uuids_and_prefixes(tmp_path):
    dgx(tmp_path)
    full = gpus(tmp_path, {"CUDA_VISIBLE_DEVICES": f"{nv_uuid(6)},{nv_uuid(2)}"})
    assert [g.physical_index for g in full] == [6, 2]
    # "GPU-00000005" is a unique prefix of GPU 5's UUID; upper case is accepted
    prefix = gpus(tmp_path, {"CUDA_VISIBLE_DEVICES": "GPU-00000005,gpu-00000003-1111"})
    assert [g.physical_index for g in prefix] == [5, 3]
    # "GPU-0000000" prefixes every UUID: ambiguous, the list ends there
    ambiguous = gpus(tmp_path, {"CUDA_VISIBLE_DEVICES": "1,GPU-0000000,2"})
    assert [g.physical_index for g in ambiguous] == [1]
    unknown = gpus(tmp_path, {"CUDA_VISIBLE_DEVICES": "GPU-ffff,0"})
    assert unknown == ()


def test_cuda_visible_devices_invalid_entry_is_logged(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    gpus(dgx(tmp_path), {"CUDA_VISIBLE_DEVICES": "0,12"})
    assert "entry '12' index 12 is out of range (8 devices)" in caplog.text


def test_mig_without_nvml(tmp_path, caplog):
    dgx(tmp_path)
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    # new-style MIG UUIDs cannot be resolved from sysfs: the list ends there
    assert gpus(tmp_path, {"CUDA_VISIBLE_DEVICES": "MIG-8a0c47ff-aaaa-bbbb-cccc-000000000001"}) == ()
    assert "MIG UUIDs need NVML" in caplog.text
    # old-style names carry the parent GPU's UUID
    old = f"MIG-{nv_uuid(4)}/1/0"
    found = gpus(tmp_path, {"CUDA_VISIBLE_DEVICES": old})
    assert [(g.index, g.physical_index, g.numa_node, g.mig_uuid) for g in found] == [(0, 4, 1, old)]


def test_cuda_device_order_warning_for_mixed_models(tmp_path, caplog):
    add_nvidia_gpu(tmp_path, "0000:18:00.0", model="NVIDIA A100", minor=0, device=0x20B0)
    add_nvidia_gpu(tmp_path, "0000:3b:00.0", model="NVIDIA H100", minor=1)
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    found = gpus(tmp_path, {})
    assert addrs(found) == ["0000:18:00.0", "0000:3b:00.0"]   # PCI order either way
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in caplog.text
    caplog.clear()
    gpus(tmp_path, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert caplog.text == ""


def test_same_models_need_no_order_warning(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    gpus(dgx(tmp_path), {})
    assert caplog.text == ""


# ---------------------------------------------------------- firmware -1
def test_firmware_minus_one_placed_by_local_cpulist(tmp_path):
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=-1, local_cpulist="56-111,168-223")
    (g,) = gpus(tmp_path)
    assert (g.numa_node, g.numa_source) == (1, "local_cpulist")
    assert "lies in node 1" in g.numa_note


def test_firmware_minus_one_spanning_both_nodes_is_unplaced(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=-1, local_cpulist="0-223")
    (g,) = gpus(tmp_path)
    assert (g.numa_node, g.numa_source) == (None, "unknown")
    assert g.numa_note == "firmware numa_node is -1 and local_cpulist 0-223 spans nodes 0-1"
    assert "NUMA node unknown" in caplog.text


def test_firmware_minus_one_without_cpulist(tmp_path):
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=-1, local_cpulist=None)
    (g,) = gpus(tmp_path)
    assert g.numa_node is None
    assert "there is no local_cpulist" in g.numa_note


def test_firmware_minus_one_on_one_node_machine(tmp_path):
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=-1, local_cpulist="0-7")
    (g,) = gpus(tmp_path, nodes=nodes_of({0: "0-7"}))
    assert (g.numa_node, g.numa_source) == (0, "single-node")


def test_missing_numa_node_file_and_unknown_node_fall_back(tmp_path):
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=None, local_cpulist="0-55")
    add_nvidia_gpu(tmp_path, "0000:3b:00.0", numa_node=7, local_cpulist="56-60", minor=1)
    a, b = gpus(tmp_path)
    assert (a.numa_node, a.numa_source) == (0, "local_cpulist")
    assert (b.numa_node, b.numa_source) == (1, "local_cpulist")
    assert "numa_node is 7 (no such node)" in b.numa_note


# ------------------------------------------------------------------- AMD
def mi300(root):
    """4 AMD GPUs whose KFD order differs from PCI order."""
    add_kfd_cpu_node(root, 0)
    add_kfd_cpu_node(root, 1)
    layout = [("0000:05:00.0", 4, 0), ("0000:26:00.0", 2, 0), ("0000:86:00.0", 3, 1), ("0000:a6:00.0", 5, 1)]
    for addr, kfd, node in layout:
        add_amd_gpu(root, addr, kfd_node=kfd, numa_node=node,
                    local_cpulist="0-55,112-167" if node == 0 else "56-111,168-223",
                    unique_id=0xABC000 + kfd)
    return root


def test_amd_kfd_order_and_uuids(tmp_path):
    found = gpus(mi300(tmp_path))
    assert addrs(found) == ["0000:26:00.0", "0000:86:00.0", "0000:05:00.0", "0000:a6:00.0"]
    assert [g.uuid for g in found] == [f"GPU-{0xABC000 + k:016x}" for k in (2, 3, 4, 5)]
    assert [g.numa_node for g in found] == [0, 1, 0, 1]
    assert {g.vendor for g in found} == {"amd"}
    assert found[0].name == "gfx942"
    assert not any(g.integrated for g in found)


def test_amd_without_kfd_uses_pci_order(tmp_path):
    add_amd_gpu(tmp_path, "0000:86:00.0", kfd_node=None, numa_node=1)
    add_amd_gpu(tmp_path, "0000:05:00.0", kfd_node=None, numa_node=0)
    assert addrs(gpus(tmp_path)) == ["0000:05:00.0", "0000:86:00.0"]


def test_rocr_then_hip_visible_devices(tmp_path):
    mi300(tmp_path)
    # ROCR keeps physical 3,0,1 (in that order); HIP then picks the 2nd of those
    found = gpus(tmp_path, {"ROCR_VISIBLE_DEVICES": "3,0,1", "HIP_VISIBLE_DEVICES": "1"})
    assert [(g.index, g.physical_index, g.pci_address) for g in found] == [(0, 0, "0000:26:00.0")]
    # HIP_VISIBLE_DEVICES beats CUDA_VISIBLE_DEVICES; without HIP, CUDA's is honoured
    assert [g.physical_index for g in gpus(tmp_path, {"HIP_VISIBLE_DEVICES": "2", "CUDA_VISIBLE_DEVICES": "1"})] == [2]
    assert [g.physical_index for g in gpus(tmp_path, {"CUDA_VISIBLE_DEVICES": "3,1"})] == [3, 1]
    # UUIDs work in ROCR_VISIBLE_DEVICES; an index past the ROCR subset ends HIP's list
    uuid = f"GPU-{0xABC000 + 5:016x}"
    assert [g.physical_index for g in gpus(tmp_path, {"ROCR_VISIBLE_DEVICES": f"{uuid},0"})] == [3, 0]
    assert [g.physical_index for g in gpus(tmp_path, {"ROCR_VISIBLE_DEVICES": "2,3",
                                                      "HIP_VISIBLE_DEVICES": "1,2"})] == [3]
    assert gpus(tmp_path, {"ROCR_VISIBLE_DEVICES": ""}) == ()


def test_amd_apu_is_flagged_integrated(tmp_path):
    add_amd_gpu(tmp_path, "0000:02:00.0", kfd_node=1, cpu_cores=24, numa_node=0, local_cpulist="0-47")
    (g,) = gpus(tmp_path, nodes=nodes_of({0: "0-47"}))
    assert g.integrated and g.vendor == "amd"


# ----------------------------------------------------------------- Intel
def intel_box(root):
    add_intel_gpu(root, "0000:00:02.0", numa_node=-1, local_cpulist="0-223", pci_class=0x030000, device=0x46A6)
    add_intel_gpu(root, "0000:29:00.0", numa_node=0, local_cpulist="0-55,112-167")
    add_intel_gpu(root, "0000:9a:00.0", numa_node=1, local_cpulist="56-111,168-223")
    return root


def test_intel_integrated_flagged_and_pci_order(tmp_path):
    # ZE_ENABLE_PCI_ID_DEVICE_ORDER=1: the driver reports PCI bus order, the iGPU on bus 0 first
    found = gpus(intel_box(tmp_path), {"ZE_ENABLE_PCI_ID_DEVICE_ORDER": "1"})
    assert [(g.index, g.pci_address, g.integrated, g.numa_node) for g in found] == [
        (0, "0000:00:02.0", True, None), (1, "0000:29:00.0", False, 0), (2, "0000:9a:00.0", False, 1),
    ]
    assert {g.identity for g in found} == {"certain"}


def test_intel_integrated_last_by_default_and_uncertain(tmp_path, caplog):
    # without it, discrete cards come first (the loader's discrete-first rule): the order is the driver's choice
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    found = gpus(intel_box(tmp_path))
    assert [(g.index, g.pci_address, g.integrated) for g in found] == [
        (0, "0000:29:00.0", False), (1, "0000:9a:00.0", False), (2, "0000:00:02.0", True),
    ]
    assert {g.identity for g in found} == {"uncertain"}
    assert "ZE_ENABLE_PCI_ID_DEVICE_ORDER=1" in found[0].identity_note
    assert "integrated and discrete Intel GPUs are visible" in caplog.text
    # a value Intel's driver would read as 0 is reported, not silently taken as on
    caplog.clear()
    odd = gpus(tmp_path, {"ZE_ENABLE_PCI_ID_DEVICE_ORDER": "true"})
    assert odd[2].integrated and "'true' is not a number" in caplog.text
    # ZE_AFFINITY_MASK indexes that order: 0 and 1 are the discrete cards
    only = gpus(tmp_path, {"ZE_AFFINITY_MASK": "0,1"})
    assert [g.pci_address for g in only] == ["0000:29:00.0", "0000:9a:00.0"]


@pytest.mark.parametrize("mask,expected", [
    ("2,1", [1, 2]),          # filters, does not permute
    ("2.0,2.1", [2]),         # sub-devices select their card
    ("1,5,0", [0, 1]),        # an index past the end is skipped, not fatal
    ("", [0, 1, 2]),          # empty means everything
])
def test_ze_affinity_mask(tmp_path, mask, expected):
    found = gpus(intel_box(tmp_path), {"ZE_AFFINITY_MASK": mask})
    assert [g.physical_index for g in found] == expected
    assert [g.index for g in found] == list(range(len(expected)))


# ------------------------------------------------------ vendor selection
def test_nvidia_runtime_wins_over_intel_igpu(tmp_path):
    add_intel_gpu(tmp_path, "0000:00:02.0", pci_class=0x030000)
    add_nvidia_gpu(tmp_path, "0000:01:00.0", numa_node=0, local_cpulist="0-55")
    (g,) = gpus(tmp_path)
    assert g.vendor == "nvidia"
    (i,) = gpus(tmp_path, {"NUMABIND_GPU_VENDOR": "intel"})
    assert (i.vendor, i.integrated) == ("intel", True)
    (i2,) = gpus(tmp_path, vendor="intel")
    assert i2 == i
    with pytest.raises(PlanError, match="'arm' is not one of nvidia, amd, intel"):
        gpus(tmp_path, vendor="arm")
    # a typo in the variable must not break discovery
    (n,) = gpus(tmp_path, {"NUMABIND_GPU_VENDOR": "arm"})
    assert n.vendor == "nvidia"


def test_only_integrated_gpu_is_listed(tmp_path):
    add_intel_gpu(tmp_path, "0000:00:02.0", pci_class=0x030000, numa_node=0, local_cpulist="0-7")
    (g,) = gpus(tmp_path, nodes=nodes_of({0: "0-7"}))
    assert (g.vendor, g.integrated, g.numa_node) == ("intel", True, 0)


# ------------------------------------------------------------------ NVML
def nvml_view_of_dgx():
    return [
        {"bus": f"00000000:{a[5:].upper()}", "uuid": nv_uuid(k), "name": "NVIDIA H100 80GB HBM3",
         "cpus": "0-55,112-167" if k < 4 else "56-111,168-223", "mems": [0] if k < 4 else [1]}
        for k, a in enumerate(DGX_ADDRS)
    ]


def test_nvml_agrees_with_sysfs(tmp_path, monkeypatch, caplog):
    dgx(tmp_path)
    mod = fake_pynvml(nvml_view_of_dgx())
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    caplog.set_level(logging.WARNING)
    with_nvml = gpus(tmp_path, use_nvml=True)
    without = gpus(tmp_path, use_nvml=False)
    assert with_nvml == without
    assert caplog.text == ""                   # no disagreement reported
    assert mod.calls == ["init", "shutdown"]


def test_nvml_places_firmware_minus_one_and_resolves_mig(tmp_path, monkeypatch):
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=0, local_cpulist="0-55,112-167", uuid=nv_uuid(0))
    add_nvidia_gpu(tmp_path, "0000:9a:00.0", numa_node=-1, local_cpulist="0-223", uuid=nv_uuid(1), minor=1,
                   proc=False)
    view = [
        {"bus": "00000000:18:00.0", "uuid": nv_uuid(0), "name": "H100", "cpus": "0-55,112-167", "mems": [0]},
        {"bus": "00000000:9A:00.0", "uuid": nv_uuid(1), "name": "H100", "cpus": "56-111,168-223", "mems": [1],
         "mig": ["MIG-aaaa0001-0000-0000-0000-000000000001", None, "MIG-bbbb0002-0000-0000-0000-000000000002"]},
    ]
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(view))
    env = {"CUDA_VISIBLE_DEVICES": "MIG-bbbb,0,MIG-aaaa0001-0000-0000-0000-000000000001"}
    found = gpus(tmp_path, env, use_nvml=True)
    assert [(g.index, g.physical_index, g.numa_node, g.numa_source, g.mig_uuid) for g in found] == [
        (0, 1, 1, "nvml", "MIG-bbbb0002-0000-0000-0000-000000000002"),
        (1, 0, 0, "numa_node", None),
        (2, 1, 1, "nvml", "MIG-aaaa0001-0000-0000-0000-000000000001"),
    ]
    assert found[0].uuid == nv_uuid(1)          # UUID from NVML when procfs has none
    assert found[0].name == "H100"


def test_nvml_disagreement_is_reported_and_sysfs_wins(tmp_path, monkeypatch, caplog):
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=0, local_cpulist="0-55,112-167", uuid=nv_uuid(0))
    view = [{"bus": "00000000:18:00.0", "uuid": nv_uuid(0), "name": "H100", "cpus": "56-111", "mems": [1]}]
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(view))
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    (g,) = gpus(tmp_path, use_nvml=True)
    assert (g.numa_node, g.local_cpus) == (0, parse_cpulist("0-55,112-167"))
    assert "NVML CPU affinity 56-111; using sysfs" in caplog.text
    assert "NVML memory affinity nodes 1; using sysfs" in caplog.text


@pytest.mark.parametrize("module", ["broken-init", "missing"])
def test_nvml_unavailable_degrades_to_sysfs(tmp_path, monkeypatch, module):
    dgx(tmp_path)
    if module == "missing":
        monkeypatch.setitem(sys.modules, "pynvml", None)    # import raises ImportError
    else:
        monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(nvml_view_of_dgx(), init_fails=True))
    assert gpus(tmp_path, use_nvml=True) == gpus(tmp_path, use_nvml=False)
    # a new-style MIG id still cannot be resolved
    assert gpus(tmp_path, {"CUDA_VISIBLE_DEVICES": "MIG-aaaa"}, use_nvml=True) == ()


def test_nvml_is_not_used_for_a_dump_by_default(tmp_path, monkeypatch):
    dgx(tmp_path)
    mod = fake_pynvml(nvml_view_of_dgx())
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    gpus(tmp_path)
    assert mod.calls == []


def test_uuid_entry_without_any_known_uuid_says_where_uuids_come_from(tmp_path, caplog):
    add_nvidia_gpu(tmp_path, "0000:18:00.0", proc=False)
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    assert gpus(tmp_path, {"CUDA_VISIBLE_DEVICES": nv_uuid(0)}, use_nvml=False) == ()
    assert "/proc/driver/nvidia or NVML" in caplog.text


# ------------------------------------------------- visibility properties
def _records(n):
    return [PciGpu(pci_address=f"0000:{k + 1:02x}:00.0", vendor="nvidia", pci_class=0x030200, device_id=1,
                   firmware_node=0, local_cpus=frozenset(), uuid=nv_uuid(k)) for k in range(n)]


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 8), data=st.data())
def test_cuda_list_of_distinct_valid_entries_is_taken_in_order(n, data):
    order = data.draw(st.permutations(range(n)))
    picks = order[:data.draw(st.integers(1, n))]
    as_uuid = data.draw(st.lists(st.booleans(), min_size=len(picks), max_size=len(picks)))
    value = ",".join(nv_uuid(k) if u else str(k) for k, u in zip(picks, as_uuid))
    chosen, notes = select_visible("nvidia", _records(n), {"CUDA_VISIBLE_DEVICES": value})
    assert [k for k, _ in chosen] == list(picks) and notes == []
    # anything invalid appended after them changes nothing before it, and drops what follows
    chosen2, notes2 = select_visible("nvidia", _records(n), {"CUDA_VISIBLE_DEVICES": value + f",{n},0"})
    assert [k for k, _ in chosen2] == list(picks) and len(notes2) == 1


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 8), entries=st.lists(st.integers(0, 10), min_size=1, max_size=10))
def test_ze_affinity_mask_filters_and_never_permutes(n, entries):
    chosen, _ = select_visible("intel", _records(n), {"ZE_AFFINITY_MASK": ",".join(map(str, entries))})
    ks = [k for k, _ in chosen]
    assert ks == sorted({e for e in entries if e < n})


# ------------------------------------------------------ Huawei Ascend NPUs
from .fakegpu import (  # noqa: E402  (the Ascend helpers, kept with their section)
    ASCEND_ADDRS, BOX_CPUS, HUAWEI, add_ascend_control_nodes, add_ascend_npu, add_dev_node, ascend_box,
    ascend_container,
)


def one_node_ascend(root, n=4):
    """A 1-socket box: ``n`` 910B NPUs on node 0, all with the same CPU list."""
    for k in range(n):
        add_ascend_npu(root, ASCEND_ADDRS[k], numa_node=0, local_cpulist="0-7")
        add_dev_node(root, f"davinci{k}")
    add_ascend_control_nodes(root)
    return root


ONE_NODE = nodes_of({0: "0-7"})


def test_scan_keeps_ascend_npus_only(tmp_path):
    add_ascend_npu(tmp_path, "0000:01:00.0")                                      # 910B (0xd802)
    add_ascend_npu(tmp_path, "0000:02:00.0", device=0xD803)                      # 910_93 / A3
    add_ascend_npu(tmp_path, "0000:03:00.0", device=0xD500)                      # 310P
    add_ascend_npu(tmp_path, "0000:04:00.0", device=0xA250)                      # a Kunpeng SoC engine
    add_ascend_npu(tmp_path, "0000:05:00.0", device=0xD802, pci_class=0x020000)  # not an accelerator class
    add_pci_device(tmp_path, "0000:06:00.0", vendor=HUAWEI, device=0xD802, pci_class=0x030000)
    found = scan_pci_gpus(FsReader(tmp_path))
    assert [(g.pci_address, g.vendor, g.name, g.device_id) for g in found] == [
        ("0000:01:00.0", "ascend", "Ascend 910B", 0xD802),
        ("0000:02:00.0", "ascend", "Ascend 910_93", 0xD803),
        ("0000:03:00.0", "ascend", "Ascend 310P", 0xD500),
    ]
    assert {g.render_minor for g in found} == {None}


def test_ascend_box_numbers_physical_ids_with_uncertain_identity(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    ascend_box(tmp_path)
    found = gpus(tmp_path)
    assert [(g.index, g.minor, g.physical_index, g.pci_address, g.numa_node, g.vendor) for g in found] == [
        (k, k, k, ASCEND_ADDRS[k], box_node_of(k), "ascend") for k in range(8)
    ]
    assert found[5].local_cpus == parse_cpulist(BOX_CPUS[1])
    assert found[0].name == "Ascend 910B" and found[0].to_dict()["device_id"] == "0xd802"
    # which PCI function /dev/davinciN is cannot be read, and it decides the node here: uncertain, with the fix
    assert {g.identity for g in found} == {"uncertain"}
    assert "npu-smi info -t topo" in found[0].identity_note
    assert "/dev/davinci<N>" in found[0].identity_note and "not all on one NUMA node" in caplog.text
    assert "GPU 3 ascend 0000:42:00.0 node 0 [identity uncertain]" == found[3].describe()


def box_node_of(k):
    return 0 if k < 4 else 1


def test_ascend_npus_sharing_one_node_are_certain(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    found = gpus(one_node_ascend(tmp_path), nodes=ONE_NODE)
    assert [(g.index, g.minor, g.numa_node) for g in found] == [(k, k, 0) for k in range(4)]
    assert {g.identity for g in found} == {"certain"} and caplog.text == ""


@pytest.mark.parametrize("value,expected,warned", [
    ("4,5,6,7", [4, 5, 6, 7], ""),
    ("6", [6], ""),
    ("", list(range(8)), ""),                 # empty: every NPU (as SGLang reads it)
    ("1, 2,3", [1], "' 2' is not a device id"),   # CANN's own example: only 1 is read
    ("1,3,8", [1, 3], "names no device"),          # CANN's own example: 8 is invalid, 1 and 3 are read
    ("2,x,3", [2], "'x' is not a device id"),
    ("0,²", [0], "is not a device id"),            # not an ASCII digit
    ("1" * 12, [], "is not a device id"),          # too many digits to be an id
])
def test_ascend_rt_visible_devices(tmp_path, caplog, value, expected, warned):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    ascend_box(tmp_path)
    found = gpus(tmp_path, {"ASCEND_RT_VISIBLE_DEVICES": value})
    assert [g.minor for g in found] == expected
    assert [g.index for g in found] == list(range(len(expected)))
    assert [g.physical_index for g in found] == expected
    if warned:
        assert warned in caplog.text and "CANN reads only the ids before it" in caplog.text
    if expected and expected[0] >= 4:
        assert {g.numa_node for g in found} == {1}


def test_ascend_rt_visible_devices_out_of_order_is_cut_and_uncertain(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    found = gpus(one_node_ascend(tmp_path), {"ASCEND_RT_VISIBLE_DEVICES": "2,1,3"}, nodes=ONE_NODE)
    assert [g.minor for g in found] == [2]
    assert found[0].identity == "uncertain" and "ascending lists only" in found[0].identity_note
    assert "ascending lists only" in caplog.text


@pytest.mark.parametrize("denied", [False, True])
def test_ascend_container_with_two_of_eight_nodes(tmp_path, denied):
    ascend_box(tmp_path)
    ascend_container(tmp_path, expose=[5, 2], denied=denied)
    found = gpus(tmp_path)
    # the container's logical ids 0 and 1 are the physical ids 2 and 5, ascending; sysfs still lists 8 NPUs
    assert [(g.index, g.physical_index, g.minor, g.pci_address, g.numa_node) for g in found] == [
        (0, 0, 2, ASCEND_ADDRS[2], 0), (1, 1, 5, ASCEND_ADDRS[5], 1),
    ]
    # ASCEND_RT_VISIBLE_DEVICES indexes the container's logical ids, not the host's physical ones
    (g,) = gpus(tmp_path, {"ASCEND_RT_VISIBLE_DEVICES": "1"})
    assert (g.index, g.minor, g.numa_node) == (0, 5, 1)
    assert gpus(tmp_path, {"ASCEND_RT_VISIBLE_DEVICES": "2"}) == ()


def test_ascend_visible_devices_decides_only_without_device_nodes(tmp_path):
    for k, addr in enumerate(ASCEND_ADDRS):     # a dump: sysfs only, no /dev
        add_ascend_npu(tmp_path, addr, numa_node=box_node_of(k), local_cpulist=BOX_CPUS[box_node_of(k)])
    assert [g.minor for g in gpus(tmp_path, {"ASCEND_VISIBLE_DEVICES": "0-2,6"})] == [0, 1, 2, 6]
    assert gpus(tmp_path, {"ASCEND_VISIBLE_DEVICES": "void"}) == ()
    # a processor name cannot be resolved from files: every NPU, said and uncertain
    named = gpus(tmp_path, {"ASCEND_VISIBLE_DEVICES": "Ascend910-3"})
    assert len(named) == 8 and "cannot resolve" in named[0].identity_note
    # with device nodes, the nodes decide and the variable (what the runtime was asked) is not needed
    for k in (1, 4):
        add_dev_node(tmp_path, f"davinci{k}")
    add_ascend_control_nodes(tmp_path)
    assert [g.minor for g in gpus(tmp_path, {"ASCEND_VISIBLE_DEVICES": "0-2,6"})] == [1, 4]
    # the variable describes the calling process's container: a replayed root without env= ignores it
    assert len(discover_gpus(FsReader(tmp_path), TWO_NODES)) == 2


def test_ascend_without_davinci_manager_is_reported(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    one_node_ascend(tmp_path, n=2)
    os.remove(tmp_path / "dev" / "davinci_manager")
    found = gpus(tmp_path, nodes=ONE_NODE)
    assert len(found) == 2 and found[0].identity == "uncertain"
    assert "/dev/davinci_manager is missing" in caplog.text and "--device /dev/davinci_manager" in caplog.text


def test_ascend_device_node_without_npu_in_sysfs_is_dropped(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    one_node_ascend(tmp_path, n=2)
    add_dev_node(tmp_path, "davinci7")
    found = gpus(tmp_path, nodes=ONE_NODE)
    assert [g.minor for g in found] == [0, 1] and "davinci7" in caplog.text


def test_ascend_firmware_minus_one(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    add_ascend_npu(tmp_path, ASCEND_ADDRS[0], numa_node=-1, local_cpulist="56-60")
    add_ascend_npu(tmp_path, ASCEND_ADDRS[1], numa_node=-1, local_cpulist="0-223")
    add_ascend_npu(tmp_path, ASCEND_ADDRS[2], numa_node=-1, local_cpulist=None)
    found = gpus(tmp_path)
    assert [(g.numa_node, g.numa_source) for g in found] == [(1, "local_cpulist"), (None, "unknown"),
                                                             (None, "unknown")]
    assert "spans nodes 0-1" in found[1].numa_note and "no local_cpulist" in found[2].numa_note
    # on a machine with one node with CPUs, that node
    assert {g.numa_node for g in gpus(tmp_path, nodes=nodes_of({0: "0-223"}))} == {0}


def test_ascend_passthrough_npu_is_not_counted(tmp_path):
    from .fakegpu import add_driver_link

    one_node_ascend(tmp_path, n=2)
    add_driver_link(tmp_path, ASCEND_ADDRS[1], "vfio-pci")
    add_driver_link(tmp_path, ASCEND_ADDRS[0], "some_ascend_driver")
    assert [g.pci_address for g in gpus(tmp_path, nodes=ONE_NODE)] == [ASCEND_ADDRS[0]]


def test_ascend_vendor_selection(tmp_path):
    add_intel_gpu(tmp_path, "0000:00:02.0", pci_class=0x030000)
    one_node_ascend(tmp_path, n=1)
    (g,) = gpus(tmp_path, nodes=ONE_NODE)
    assert g.vendor == "ascend"             # a discrete NPU wins over an integrated GPU
    (i,) = gpus(tmp_path, {"NUMABIND_GPU_VENDOR": "intel"}, nodes=ONE_NODE)
    assert i.vendor == "intel"
    add_nvidia_gpu(tmp_path, "0000:18:00.0", numa_node=0, local_cpulist="0-7")
    assert gpus(tmp_path, nodes=ONE_NODE)[0].vendor == "nvidia"
    assert gpus(tmp_path, {"NUMABIND_GPU_VENDOR": "ascend"}, nodes=ONE_NODE)[0].vendor == "ascend"
    assert gpus(tmp_path, nodes=ONE_NODE, vendor="ascend")[0].minor == 0


def test_select_visible_for_ascend(tmp_path):
    ascend_box(tmp_path)
    devices = [g for g in scan_pci_gpus(FsReader(tmp_path))]
    assert select_visible("ascend", devices, {"ASCEND_RT_VISIBLE_DEVICES": "3,5"}) == ([(3, None), (5, None)], [])
    picks, notes = select_visible("ascend", devices, {"ASCEND_RT_VISIBLE_DEVICES": "3,9"})
    assert picks == [(3, None)] and "names no device" in notes[0]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 8), data=st.data())
def test_ascend_ascending_list_of_valid_ids_is_taken_whole(n, data):
    ids = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1)))
    devices = [PciGpu(pci_address=f"0000:{k + 1:02x}:00.0", vendor="ascend", pci_class=0x120000, device_id=0xD802,
                      firmware_node=0, local_cpus=frozenset()) for k in range(n)]
    picks, notes = select_visible("ascend", devices, {"ASCEND_RT_VISIBLE_DEVICES": ",".join(map(str, ids))})
    assert [p for p, _ in picks] == ids and notes == []
