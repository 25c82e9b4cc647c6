"""Which GPU each visible index is inside containers (sysfs lists every board, the runtime opens a few),
NVML's cross-check, identity uncertainty in plans, and hostile GPU-related input."""

from __future__ import annotations

import logging
import os
import shutil
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numabind._fs import FsReader
from numabind.cpulist import parse_cpulist
from numabind.devices import discover_gpus
from numabind.errors import NumabindError, PlanError
from numabind.plan import Plan
from numabind.strategies import auto_gate, plan_for_gpu, plan_for_gpus, plan_table
from numabind.topology import discover_from

from .fakegpu import (
    AMD_KFD_NODES,
    BOX_ADDRS,
    BOX_CPUS,
    BOX_NODES,
    add_dev_node,
    add_driver_link,
    add_mig_instances,
    add_nvidia_gpu,
    box_gpus,
    box_node,
    container,
    eight_gpu_box,
    fake_pynvml,
    nv_uuid,
    remove_dev_node,
)
from .fakesys import two_sockets

def mapping(found):
    """(visible index, PCI address, NUMA node) of each visible GPU."""
    return [(g.index, g.pci_address, g.numa_node) for g in found]


def box(vendor):
    """The bare-metal mapping of the 8-GPU box in the vendor's runtime order (host index k -> BOX_ADDRS[k])."""
    order = sorted(range(8), key=lambda k: AMD_KFD_NODES[k]) if vendor == "amd" else list(range(8))
    return [(i, BOX_ADDRS[k], box_node(k)) for i, k in enumerate(order)]


# ------------------------------------------------------------- bare metal
@pytest.mark.parametrize("vendor", ["nvidia", "amd", "intel"])
def test_bare_metal_box_is_numbered_as_before(tmp_path, vendor, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    eight_gpu_box(tmp_path, vendor)
    found = box_gpus(tmp_path)
    assert mapping(found) == box(vendor)
    assert {g.identity for g in found} == {"certain"} and caplog.text == ""
    if vendor == "amd":
        # KFD order: node 2 is the 2nd board, node 3 the 1st, ...
        assert [g.pci_address for g in found[:2]] == ["0000:2a:00.0", "0000:18:00.0"]


@pytest.mark.parametrize("vendor", ["nvidia", "amd", "intel"])
def test_device_files_absent_from_a_dump_change_nothing(tmp_path, vendor):
    eight_gpu_box(tmp_path / "with", vendor)
    eight_gpu_box(tmp_path / "without", vendor)
    shutil.rmtree(tmp_path / "without" / "dev")
    assert box_gpus(tmp_path / "with") == box_gpus(tmp_path / "without")


# ------------------------------------------------ 8 GPUs, a container with 2
@pytest.mark.parametrize("vendor,expected", [
    # NVIDIA: CUDA numbers the exposed boards in PCI order
    ("nvidia", [(0, "0000:9a:00.0", 1), (1, "0000:ab:00.0", 1)]),
    # AMD: ROCm numbers them in KFD node order: board 5 is KFD node 6, board 4 is node 7
    ("amd", [(0, "0000:ab:00.0", 1), (1, "0000:9a:00.0", 1)]),
    ("intel", [(0, "0000:9a:00.0", 1), (1, "0000:ab:00.0", 1)]),
])
def test_container_given_boards_4_and_5(tmp_path, vendor, expected):
    eight_gpu_box(tmp_path, vendor)
    env = container(tmp_path, vendor, [4, 5])
    found = box_gpus(tmp_path, env)
    # before: visible GPU 0 was the box's first board 0000:18:00.0, on node 0
    assert mapping(found) == expected
    assert [g.physical_index for g in found] == [0, 1]
    assert {g.identity for g in found} == {"certain"}


@pytest.mark.parametrize("vendor,var", [("nvidia", "CUDA_VISIBLE_DEVICES"), ("amd", "HIP_VISIBLE_DEVICES"),
                                        ("intel", "ZE_AFFINITY_MASK")])
def test_visibility_variables_index_the_containers_gpus(tmp_path, vendor, var):
    eight_gpu_box(tmp_path, vendor)
    env = container(tmp_path, vendor, [1, 6])
    # the container's GPUs are boards 1 and 6 (in KFD order too: KFD nodes 2 and 9); "1" is board 6
    assert mapping(box_gpus(tmp_path, {**env, var: "1"})) == [(0, "0000:ba:00.0", 1)]
    # an index the container does not have is out of range, not the host's GPU 6
    assert box_gpus(tmp_path, {**env, var: "6"}) == ()


def test_nvidia_container_by_uuid_and_plan_lands_on_the_boards_node(tmp_path):
    two_sockets(tmp_path, cpus_per_socket=16)             # node 0: 0-7,16-23; node 1: 8-15,24-31
    eight_gpu_box(tmp_path, "nvidia")
    container(tmp_path, "nvidia", [4, 5])
    env = {"NVIDIA_VISIBLE_DEVICES": f"{nv_uuid(4)},{nv_uuid(5)}"}   # what Kubernetes' device plugin sets
    topo = discover_from(FsReader(tmp_path), env=env)
    assert mapping(topo.gpus) == [(0, "0000:9a:00.0", 1), (1, "0000:ab:00.0", 1)]
    plan = plan_for_gpu(0, topology=topo)
    assert plan == Plan(cpus=parse_cpulist("8-15,24-31"), mem_policy="bind", mem_nodes=frozenset({1}))
    assert "identity" not in plan.reason


def test_nvidia_cdi_container_narrows_by_device_node(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    eight_gpu_box(tmp_path, "nvidia")
    env = container(tmp_path, "nvidia", [2, 7], style="cdi")   # procfs unmasked, NVIDIA_VISIBLE_DEVICES=void
    found = box_gpus(tmp_path, env)
    assert mapping(found) == [(0, "0000:3a:00.0", 0), (1, "0000:db:00.0", 1)]
    assert {g.identity for g in found} == {"certain"} and caplog.text == ""


def test_nvidia_gpus_all_is_the_whole_box(tmp_path):
    eight_gpu_box(tmp_path, "nvidia")
    env = {"NVIDIA_VISIBLE_DEVICES": "all"}                   # docker run --gpus all: every board, unmasked
    found = box_gpus(tmp_path, env)
    assert mapping(found) == box("nvidia") and {g.identity for g in found} == {"certain"}
    # "all" in a container given two boards (the CUDA images' default value) says nothing: the files decide
    container(tmp_path, "nvidia", [4, 5])
    assert mapping(box_gpus(tmp_path, env)) == [(0, "0000:9a:00.0", 1), (1, "0000:ab:00.0", 1)]


def test_nvidia_privileged_container_is_uncertain_and_strict_refuses(tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    two_sockets(tmp_path, cpus_per_socket=16)
    eight_gpu_box(tmp_path, "nvidia")
    env = container(tmp_path, "nvidia", [4, 5], style="privileged")
    found = box_gpus(tmp_path, env)
    # every /dev/nvidiaN can be opened, so CUDA numbers all eight; the runtime was asked for 4 and 5
    assert mapping(found) == box("nvidia")
    assert {g.identity for g in found} == {"uncertain"}
    assert "NVIDIA_VISIBLE_DEVICES='4,5' names 2 (0000:9a:00.0, 0000:ab:00.0)" in caplog.text
    assert "/dev holds accessible NVIDIA device nodes nvidia0" in caplog.text
    assert "CUDA_VISIBLE_DEVICES to GPU UUIDs" in found[0].identity_note
    topo = discover_from(FsReader(tmp_path), env=env)
    monkeypatch.delenv("NUMABIND_STRICT", raising=False)
    lenient = plan_for_gpu(0, topology=topo)
    assert "identity uncertain (NVIDIA_VISIBLE_DEVICES='4,5' names" in lenient.reason
    with pytest.raises(PlanError, match=r"GPU 0 \(nvidia 0000:18:00.0\): which board .* uncertain: "
                                        r"NVIDIA_VISIBLE_DEVICES='4,5'.*CUDA_VISIBLE_DEVICES to GPU UUIDs"):
        plan_for_gpu(0, topology=topo, strict=True)
    monkeypatch.setenv("NUMABIND_STRICT", "1")
    with pytest.raises(PlanError, match="strict mode"):
        plan_for_gpu(0, topology=topo)
    with pytest.raises(PlanError, match="strict mode"):
        plan_for_gpus([0, 1], topology=topo)
    assert all(r.plan is None and "uncertain" in r.error for r in plan_table(topo))
    # explicit nodes do not depend on which board it is
    assert plan_for_gpu(0, topology=topo, nodes=[1] * 8).mem_nodes == frozenset({1})
    # a device named by UUID is certain whatever the numbering
    named = discover_from(FsReader(tmp_path), env={**env, "CUDA_VISIBLE_DEVICES": nv_uuid(5)})
    assert mapping(named.gpus) == [(0, "0000:ab:00.0", 1)] and named.gpus[0].identity == "certain"
    assert plan_for_gpu(0, topology=named).mem_nodes == frozenset({1})


def test_automatic_binding_never_guesses_a_board(tmp_path):
    two_sockets(tmp_path, cpus_per_socket=16)
    eight_gpu_box(tmp_path, "nvidia")
    env = container(tmp_path, "nvidia", [4, 5], style="privileged")
    topo = discover_from(FsReader(tmp_path), env=env)
    ok, why = auto_gate(topo)
    assert not ok and why.startswith("GPU 0 cannot be placed: GPU 0 (nvidia 0000:18:00.0): which board")
    certain = discover_from(FsReader(tmp_path), env={"CUDA_VISIBLE_DEVICES": nv_uuid(4)})
    assert auto_gate(certain)[0]


def test_nvidia_device_file_denied_hides_the_gpu(tmp_path):
    eight_gpu_box(tmp_path, "nvidia")
    env = container(tmp_path, "nvidia", [4, 5])
    add_dev_node(tmp_path, "nvidia5", mode=0o000)            # chmod 000: this process may not open it
    assert mapping(box_gpus(tmp_path, env)) == [(0, "0000:9a:00.0", 1)]


def test_nvidia_visible_devices_alone_on_a_dump(tmp_path, monkeypatch):
    # a dump with neither the driver's procfs nor /dev: the variable, passed explicitly, decides
    for k, addr in enumerate(BOX_ADDRS):
        add_nvidia_gpu(tmp_path, addr, numa_node=box_node(k), proc=False)
    assert mapping(box_gpus(tmp_path, {"NVIDIA_VISIBLE_DEVICES": "6,1"})) == [(0, "0000:2a:00.0", 0),
                                                                         (1, "0000:ba:00.0", 1)]
    assert box_gpus(tmp_path, {"NVIDIA_VISIBLE_DEVICES": "none"}) == ()
    assert box_gpus(tmp_path, {"NVIDIA_VISIBLE_DEVICES": "void"}) == ()
    unresolved = box_gpus(tmp_path, {"NVIDIA_VISIBLE_DEVICES": nv_uuid(3)})     # no UUIDs without the driver
    assert len(unresolved) == 8 and {g.identity for g in unresolved} == {"uncertain"}
    # the calling process's own variable describes its container, not a replayed machine
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "6,1")
    assert len(discover_gpus(FsReader(tmp_path), BOX_NODES)) == 8


def test_nvidia_visible_devices_volume_mounts_strategy(tmp_path):
    eight_gpu_box(tmp_path, "nvidia")
    container(tmp_path, "nvidia", [3, 4], style="privileged")
    devices = tmp_path / "var/run/nvidia-container-devices"
    for k in (3, 4):
        (devices / nv_uuid(k)).mkdir(parents=True)
    found = box_gpus(tmp_path, {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"})
    # the device plugin's list (3, 4) disagrees with the host /dev of a privileged container: said so
    assert len(found) == 8 and {g.identity for g in found} == {"uncertain"}
    assert "lists GPU-00000003" in found[0].identity_note


def test_gpu_bound_to_vfio_is_not_numbered(tmp_path):
    eight_gpu_box(tmp_path, "nvidia")
    add_driver_link(tmp_path, BOX_ADDRS[0], "vfio-pci")        # passed through to a VM
    for addr in BOX_ADDRS[1:]:
        add_driver_link(tmp_path, addr, "nvidia")
    found = box_gpus(tmp_path)
    assert [g.pci_address for g in found] == BOX_ADDRS[1:]
    # NVIDIA_VISIBLE_DEVICES host indices count only the boards the host driver has
    shutil.rmtree(tmp_path / "dev")
    shutil.rmtree(tmp_path / "proc")
    assert mapping(box_gpus(tmp_path, {"NVIDIA_VISIBLE_DEVICES": "0"})) == [(0, "0000:2a:00.0", 0)]


# -------------------------------------------------------------------- MIG
def test_container_with_one_mig_slice(tmp_path):
    eight_gpu_box(tmp_path, "nvidia")
    container(tmp_path, "nvidia", [4])
    add_mig_instances(tmp_path, 4, gpu_instances=(3,))
    env = {"NVIDIA_VISIBLE_DEVICES": "4:0"}
    (g,) = box_gpus(tmp_path, env)
    assert (g.index, g.pci_address, g.numa_node, g.identity) == (0, "0000:9a:00.0", 1, "certain")


def test_mig_on_one_of_several_gpus_is_uncertain_unless_named(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    eight_gpu_box(tmp_path, "nvidia")
    add_mig_instances(tmp_path, 0, gpu_instances=(1, 2))
    found = box_gpus(tmp_path)
    assert len(found) == 8 and {g.identity for g in found} == {"uncertain"}
    assert "MIG is enabled on 1 (0000:18:00.0)" in caplog.text
    named = box_gpus(tmp_path, {"CUDA_VISIBLE_DEVICES": f"MIG-{nv_uuid(0)}/1/0"})
    assert mapping(named) == [(0, "0000:18:00.0", 0)] and named[0].identity == "certain"


def test_mig_slices_resolved_by_nvml_in_a_container(tmp_path, monkeypatch):
    eight_gpu_box(tmp_path, "nvidia")
    container(tmp_path, "nvidia", [6])
    add_mig_instances(tmp_path, 6)
    mig = "MIG-aaaa0006-0000-0000-0000-000000000001"
    view = [{"bus": "00000000:BA:00.0", "uuid": nv_uuid(6), "name": "H100", "cpus": BOX_CPUS[1], "mems": [1],
             "mig": [mig], "minor": 6}]
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(view))
    env = {"NVIDIA_VISIBLE_DEVICES": mig, "CUDA_VISIBLE_DEVICES": mig}
    (g,) = box_gpus(tmp_path, env, use_nvml=True)
    assert (g.pci_address, g.numa_node, g.mig_uuid, g.identity) == ("0000:ba:00.0", 1, mig, "certain")


# ------------------------------------------------------------------ NVML
def _nvml_view(ks):
    return [{"bus": f"00000000:{BOX_ADDRS[k][5:].upper()}", "uuid": nv_uuid(k), "name": "NVIDIA H100 80GB HBM3",
             "cpus": BOX_CPUS[box_node(k)], "mems": [box_node(k)], "minor": k} for k in ks]


def test_nvml_confirms_the_container_mapping(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    eight_gpu_box(tmp_path, "nvidia")
    env = container(tmp_path, "nvidia", [4, 5])
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(_nvml_view([4, 5])))
    found = box_gpus(tmp_path, env, use_nvml=True)
    assert mapping(found) == [(0, "0000:9a:00.0", 1), (1, "0000:ab:00.0", 1)]
    assert {g.identity for g in found} == {"certain"} and caplog.text == ""


def test_nvml_resolves_a_privileged_container(tmp_path, monkeypatch):
    eight_gpu_box(tmp_path, "nvidia")
    env = container(tmp_path, "nvidia", [4, 5], style="privileged")
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(_nvml_view(range(8))))
    found = box_gpus(tmp_path, env, use_nvml=True)
    assert mapping(found) == box("nvidia") and {g.identity for g in found} == {"certain"}


def test_nvml_disagreeing_with_the_files_wins_and_is_reported(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    eight_gpu_box(tmp_path, "nvidia")                       # the files look like bare metal
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(_nvml_view([2, 7])))
    found = box_gpus(tmp_path, use_nvml=True)
    assert mapping(found) == [(0, "0000:3a:00.0", 0), (1, "0000:db:00.0", 1)]
    assert {g.identity for g in found} == {"uncertain"}
    assert ("NVML lists 2 (0000:3a:00.0, 0000:db:00.0), but /dev holds accessible NVIDIA device nodes "
            "nvidia0, nvidia1") in caplog.text
    assert "(8 (0000:18:00.0," in caplog.text


def test_nvml_order_differing_from_pci_order_is_reported(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    eight_gpu_box(tmp_path, "nvidia")
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(_nvml_view([1, 0, 2, 3, 4, 5, 6, 7])))
    found = box_gpus(tmp_path, use_nvml=True)
    assert mapping(found) == box("nvidia") and {g.identity for g in found} == {"uncertain"}
    assert "CUDA numbers them in PCI bus order" in caplog.text


def test_nvml_seeing_no_gpu_means_none(tmp_path, monkeypatch):
    eight_gpu_box(tmp_path, "nvidia")
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([]))
    assert box_gpus(tmp_path, use_nvml=True) == ()


# ------------------------------------------------------------ AMD, Intel
def test_amd_without_dev_kfd_sees_no_gpu(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    eight_gpu_box(tmp_path, "amd")
    container(tmp_path, "amd", [0, 1])
    remove_dev_node(tmp_path, "kfd")
    assert box_gpus(tmp_path) == ()
    assert "/dev/kfd is missing: ROCm sees no GPU" in caplog.text
    add_dev_node(tmp_path, "kfd", mode=0o000)
    assert box_gpus(tmp_path) == ()


def test_amd_visible_in_kfd_without_its_render_node(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    eight_gpu_box(tmp_path, "amd")
    container(tmp_path, "amd", [4, 5])
    remove_dev_node(tmp_path, "dri/renderD132")               # board 4's render node
    found = box_gpus(tmp_path)
    assert mapping(found) == [(0, "0000:ab:00.0", 1)] and found[0].identity == "uncertain"
    assert "0000:9a:00.0) cannot be opened" in caplog.text
    assert "ROCR_VISIBLE_DEVICES" in found[0].identity_note
    uuid = f"GPU-{0xA000 + 5:016x}"
    (named,) = box_gpus(tmp_path, {"ROCR_VISIBLE_DEVICES": uuid})
    assert (named.pci_address, named.identity) == ("0000:ab:00.0", "certain")


def test_intel_container_with_integrated_gpu(tmp_path):
    from .fakegpu import add_intel_gpu, add_render_node
    eight_gpu_box(tmp_path, "intel")
    add_intel_gpu(tmp_path, "0000:00:02.0", numa_node=0, local_cpulist=BOX_CPUS[0], pci_class=0x030000)
    add_render_node(tmp_path, "0000:00:02.0", 136)
    container(tmp_path, "intel", [3, 4])                      # the iGPU's node was not passed in either
    found = box_gpus(tmp_path)
    assert mapping(found) == [(0, "0000:5d:00.0", 0), (1, "0000:9a:00.0", 1)]
    assert {g.identity for g in found} == {"certain"}
    add_dev_node(tmp_path, "dri/renderD136")
    found = box_gpus(tmp_path)
    assert [g.pci_address for g in found] == ["0000:5d:00.0", "0000:9a:00.0", "0000:00:02.0"]
    assert {g.identity for g in found} == {"uncertain"}
    pci = box_gpus(tmp_path, {"ZE_ENABLE_PCI_ID_DEVICE_ORDER": "1"})
    assert [g.pci_address for g in pci] == ["0000:00:02.0", "0000:5d:00.0", "0000:9a:00.0"]
    assert {g.identity for g in pci} == {"certain"}


def test_identity_in_to_dict_and_describe(tmp_path):
    eight_gpu_box(tmp_path, "nvidia")
    add_mig_instances(tmp_path, 0)
    g = box_gpus(tmp_path)[0]
    d = g.to_dict()
    assert d["identity"] == "uncertain" and "MIG is enabled" in d["identity_note"]
    assert g.describe().endswith("[identity uncertain]")


# ------------------------------------------------------- hostile input
HOSTILE = ["²", "٣", "３", "5" * 5000, "0x1", "+1", "1_0", "-0"]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_device_minor_is_ignored(tmp_path, value, caplog):
    caplog.set_level(logging.DEBUG, logger="numabind.devices")
    eight_gpu_box(tmp_path, "nvidia")
    info = tmp_path / f"proc/driver/nvidia/gpus/{BOX_ADDRS[3]}/information"
    info.write_text(info.read_text().replace("Device Minor: \t 3", f"Device Minor: \t {value}"))
    found = box_gpus(tmp_path)
    # board 3's minor is unknown; /dev/nvidia3 is the one spare node, so it still counts
    assert [g.pci_address for g in found] == BOX_ADDRS and found[3].minor is None
    assert "unparsable Device Minor" in caplog.text


@pytest.mark.parametrize("value", HOSTILE[:4])
def test_hostile_kfd_node_names_and_properties(tmp_path, value):
    eight_gpu_box(tmp_path, "amd")
    kfd = tmp_path / "sys/class/kfd/kfd/topology/nodes"
    (kfd / value[:200]).mkdir()
    (kfd / value[:200] / "properties").write_text("simd_count 304\nlocation_id 1\n")
    props = kfd / "2" / "properties"
    props.write_text(props.read_text().replace("unique_id ", f"unique_id {value}") + f"drm_render_minor {value}\n")
    found = box_gpus(tmp_path)
    assert mapping(found) == box("amd")
    assert found[0].uuid is None                                # its unique_id is unparsable


@pytest.mark.parametrize("value", HOSTILE[:4])
def test_hostile_numa_node_is_missing(tmp_path, value):
    eight_gpu_box(tmp_path, "nvidia")
    (tmp_path / f"sys/bus/pci/devices/{BOX_ADDRS[0]}/numa_node").write_text(value + "\n")
    g = box_gpus(tmp_path)[0]
    assert (g.numa_node, g.numa_source) == (0, "local_cpulist")


@pytest.mark.parametrize("var,vendor", [("CUDA_VISIBLE_DEVICES", "nvidia"), ("HIP_VISIBLE_DEVICES", "amd"),
                                        ("ROCR_VISIBLE_DEVICES", "amd"), ("ZE_AFFINITY_MASK", "intel"),
                                        ("NVIDIA_VISIBLE_DEVICES", "nvidia")])
@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_visibility_entries(tmp_path, var, vendor, value, caplog):
    caplog.set_level(logging.WARNING, logger="numabind.devices")
    eight_gpu_box(tmp_path, vendor)
    found = box_gpus(tmp_path, {var: f"1,{value},2"})
    got = [g.physical_index for g in found]
    if var == "ZE_AFFINITY_MASK":
        assert got == [1, 2] and "names no device (8 devices); skipped" in caplog.text   # skipped, never permuted
    elif var == "NVIDIA_VISIBLE_DEVICES":
        assert got == list(range(8))                            # the device files decide; the list is a cross-check
    else:
        assert got == [1]                                       # the bad entry ends the list, as CUDA does
        assert "it and the entries after it are ignored" in caplog.text
    assert len(caplog.text) < 20000                             # a 5000-digit value is not echoed whole


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_cuda_visible_devices_with_nvml(tmp_path, monkeypatch, value):
    eight_gpu_box(tmp_path, "nvidia")
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(_nvml_view(range(8))))
    assert [g.physical_index for g in box_gpus(tmp_path, {"CUDA_VISIBLE_DEVICES": value}, use_nvml=True)] == []


def test_hostile_zero_padded_index_is_bounded_not_misread(tmp_path):
    eight_gpu_box(tmp_path, "nvidia")
    assert [g.physical_index for g in box_gpus(tmp_path, {"CUDA_VISIBLE_DEVICES": "0003,1"})] == [3, 1]
    assert box_gpus(tmp_path, {"CUDA_VISIBLE_DEVICES": "0" * 20 + "3"}) == ()


def test_fifo_in_the_driver_procfs_is_an_error_not_a_hang(tmp_path):
    eight_gpu_box(tmp_path, "nvidia")
    info = tmp_path / f"proc/driver/nvidia/gpus/{BOX_ADDRS[0]}/information"
    info.unlink()
    os.mkfifo(info)
    with pytest.raises(NumabindError, match="a FIFO"):
        box_gpus(tmp_path)


# ------------------------------------------- random visibility values (hypothesis)
VARS = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
        "ZE_AFFINITY_MASK", "ZE_ENABLE_PCI_ID_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "NUMABIND_GPU_VENDOR")
_ENTRY = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
    st.from_regex(r"[0-9]{1,12}(\.[0-9]{1,3})?", fullmatch=True),
    st.sampled_from(["²", "٣", "３", "5" * 5000, "-1", "all", "none", "void", "GPU-0000000", f"MIG-{nv_uuid(2)}/1/0",
                     "4:0", "nvidia.com/gpu=3", "/var/run/nvidia-container-devices", "/../../etc", nv_uuid(5)]),
)


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    out = {}
    for vendor in ("nvidia", "amd", "intel"):
        root = tmp_path_factory.mktemp(vendor)
        eight_gpu_box(root, vendor)
        container(root, vendor, [1, 4, 6], style="privileged" if vendor == "nvidia" else "legacy")
        out[vendor] = root
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(vendor=st.sampled_from(["nvidia", "amd", "intel"]),
       env=st.dictionaries(st.sampled_from(VARS), st.lists(_ENTRY, max_size=4).map(",".join), max_size=4))
def test_random_visibility_values_select_or_warn_never_crash(roots, vendor, env):
    logging.getLogger("numabind.devices").setLevel(logging.CRITICAL)   # the warnings are the point elsewhere
    try:
        found = box_gpus(roots[vendor], env)
    finally:
        logging.getLogger("numabind.devices").setLevel(logging.NOTSET)
    assert [g.index for g in found] == list(range(len(found)))
    assert all(g.pci_address in BOX_ADDRS and g.identity in ("certain", "uncertain") for g in found)
    assert len({(g.pci_address, g.mig_uuid) for g in found}) == len(found)     # no device twice
