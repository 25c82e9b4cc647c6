"""numabind.devices' value classes, its bounded string parsers, and what GPU discovery leaves unloaded.

:class:`~numabind.devices.Gpu` and :class:`~numabind.devices.PciGpu` are frozen values (:class:`numabind._base.Value`,
the looks' start-up idiom: a frozen dataclass with slots, without :mod:`dataclasses`): positional and
keyword construction, defaults, equality over every field, hashing, pickling, ``repr``, the frozen error, and
``Gpu.replace``. The plain string tests that replaced the regular expressions accept exactly what those did.
Importing :mod:`numabind.devices`, and discovering GPUs on this machine or on fake NVIDIA, AMD, Intel and Ascend
machines, loads neither NVML nor :mod:`logging` (``numabind._base.getLogger``); what the look costs at start-up
is guarded by ``python -m bench`` (P9).
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from numabind._base import Value
from numabind.devices import Gpu, PciGpu, gpu_list_entries
from numabind.devices.sysfs import bdf, hex_attr, numbered
from tests.fakegpu import (
    add_nvidia_gpu,
    ascend_box,
    container,
    eight_gpu_box,
)
from tests.run_path import loaded_by

#: What importing the devices and discovering GPUs leave unloaded: NVML unless it is asked for, and logging until
#: a program configures it.
LAZY = {"logging", "pynvml", "numabind.devices.nvml"}

ADDR = "0000:1b:00.0"
GPU_FIELDS = dict(index=0, pci_address=ADDR, vendor="nvidia", numa_node=0, local_cpus=frozenset({0, 1}),
                  uuid="GPU-1", name="H100", minor=3, integrated=False, numa_source="numa_node", numa_note="",
                  device_id=0x2330, physical_index=2, mig_uuid=None, identity="certain", identity_note="")
PCI_FIELDS = dict(pci_address=ADDR, vendor="nvidia", pci_class=0x030200, device_id=0x2330, firmware_node=0,
                  local_cpus=frozenset({0, 1}), integrated=False, uuid="GPU-1", name="H100", minor=3,
                  kfd_node=None, mig_uuids=("MIG-a",), nvml_memory_nodes=frozenset({0}), driver="nvidia",
                  render_minor=None, mig_slices=1)
#: A value per field that differs from the ones above.
OTHER = dict(index=1, pci_address="0000:1c:00.0", vendor="amd", numa_node=1, local_cpus=frozenset({2}),
             uuid="GPU-2", name="A100", minor=4, integrated=True, numa_source="single-node", numa_note="n",
             device_id=0x20B0, physical_index=3, mig_uuid="MIG-b", identity="uncertain", identity_note="why",
             pci_class=0x120000, firmware_node=-1, kfd_node=2, mig_uuids=(), nvml_memory_nodes=None,
             driver="vfio-pci", render_minor=128, mig_slices=0)


def test_gpu_positional_and_keyword_calls_and_defaults_are_as_in_a_dataclass():
    by_name = Gpu(**GPU_FIELDS)
    assert Gpu(*GPU_FIELDS.values()) == by_name and hash(Gpu(*GPU_FIELDS.values())) == hash(by_name)
    bare = Gpu(0, ADDR, "nvidia", None)
    assert (bare.local_cpus, bare.uuid, bare.name, bare.minor, bare.integrated, bare.numa_source, bare.numa_note,
            bare.device_id, bare.physical_index, bare.mig_uuid, bare.identity, bare.identity_note) == \
        (frozenset(), None, None, None, False, "numa_node", "", None, None, None, "certain", "")
    pci = PciGpu(ADDR, "nvidia", 0x030200, None, None, frozenset())
    assert (pci.integrated, pci.uuid, pci.name, pci.minor, pci.kfd_node, pci.mig_uuids, pci.nvml_memory_nodes,
            pci.driver, pci.render_minor, pci.mig_slices) == (False, None, None, None, None, (), None, None, None, 0)
    assert PciGpu(*PCI_FIELDS.values()) == PciGpu(**PCI_FIELDS)
    with pytest.raises(TypeError):
        Gpu(0, ADDR, "nvidia")          # numa_node has no default, as in the dataclass
    with pytest.raises(TypeError):
        PciGpu(ADDR, "nvidia", 0x030200, None, None)


@pytest.mark.parametrize("cls, fields", [(Gpu, GPU_FIELDS), (PciGpu, PCI_FIELDS)], ids=["Gpu", "PciGpu"])
def test_every_field_takes_part_in_equality_and_hash(cls, fields):
    value = cls(**fields)
    assert cls._fields() == tuple(fields)
    for name in fields:
        changed = value.replace(**{name: OTHER[name]})
        assert changed != value and getattr(changed, name) == OTHER[name], name
        assert all(getattr(changed, n) == getattr(value, n) for n in fields if n != name)
    assert value.replace() == value and hash(value.replace()) == hash(value)
    other = type(cls.__name__, (Value,), {"__annotations__": {"pci_address": "str"}})
    assert value != other(ADDR) and other(ADDR) != value     # another class: never equal
    assert len({value, cls(**fields)}) == 1


@pytest.mark.parametrize("cls, fields", [(Gpu, GPU_FIELDS), (PciGpu, PCI_FIELDS)], ids=["Gpu", "PciGpu"])
def test_values_are_frozen_pickle_and_keep_their_annotations(cls, fields):
    value = cls(**fields)
    copy = pickle.loads(pickle.dumps(value))
    assert copy == value and repr(copy) == repr(value) and type(copy) is cls and hash(copy) == hash(value)
    assert repr(value) == f"{cls.__name__}(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.numa_source = "x"
    with pytest.raises(dataclasses.FrozenInstanceError):
        del value.pci_address
    with pytest.raises(TypeError, match="colour"):
        value.replace(colour="red")
    # the attribute types stay in the class body for type checkers, one per attribute, in order
    assert tuple(cls.__annotations__) == tuple(fields)


def test_sets_become_frozen_so_a_value_always_hashes():
    gpu = Gpu(0, ADDR, "nvidia", 0, local_cpus={0, 1})
    pci = PciGpu(ADDR, "nvidia", 0x030200, None, None, {2}, mig_uuids=["MIG-a"], nvml_memory_nodes={0})
    assert gpu.local_cpus == frozenset({0, 1}) and type(gpu.local_cpus) is frozenset
    assert (pci.local_cpus, pci.mig_uuids, pci.nvml_memory_nodes) == (frozenset({2}), ("MIG-a",), frozenset({0}))
    assert hash(gpu) == hash(Gpu(0, ADDR, "nvidia", 0, local_cpus=frozenset({0, 1}))) and hash(pci) is not None


def test_gpu_keeps_its_methods():
    gpu = Gpu(**GPU_FIELDS).replace(identity="uncertain", identity_note="why", mig_uuid="MIG-x")
    assert gpu == Gpu(**{**GPU_FIELDS, "identity": "uncertain", "identity_note": "why", "mig_uuid": "MIG-x"})
    assert not gpu.identity_certain and Gpu(**GPU_FIELDS).identity_certain
    assert gpu.describe() == "GPU 0 nvidia 0000:1b:00.0 (MIG-x) node 0 [identity uncertain]"
    d = gpu.to_dict()
    assert d["local_cpus"] == "0-1" and d["device_id"] == "0x2330" and d["identity_note"] == "why"
    assert json.loads(json.dumps(d)) == d
    assert list(d) == ["index", "pci_address", "vendor", "numa_node", "numa_source", "numa_note", "local_cpus", "uuid",
                       "name", "minor", "integrated", "device_id", "physical_index", "mig_uuid", "identity",
                       "identity_note"]     # the JSON's order, as plans print it


# -- the plain string tests accept exactly what the regular expressions did ----------------
_OLD_BDF = re.compile(r"([0-9a-f]{4,8}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])")
_OLD_HEX = re.compile(r"(?:0[xX])?([0-9a-fA-F]{1,16})")
_OLD_NODE = re.compile(r"renderD([0-9]{1,6})")
_OLD_SHORT_BDF = re.compile(r"([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])")
_TEXT = st.text(alphabet="0123456789abcdefABFxX:. \n²٣", max_size=20)


@given(_TEXT)
@example("0000:1b:00.0")
@example("00000000:af:1f.7")
@example("000000000:af:1f.7")
@example("0000:1b:00.8")
@example("0000:1B:00.0")
@example("1b:00.0")
@example("0x10de")
@example("0X" + "f" * 16)
@example("0x" + "f" * 17)
@example("0x")
@example(" 0x10de\n")
@example("٣")
def test_string_parsers_match_the_regular_expressions(text):
    m = _OLD_BDF.fullmatch(text)
    assert bdf(text) == (m.groups() if m else None)
    m = _OLD_HEX.fullmatch(text.strip())
    assert hex_attr(text) == (int(m.group(1), 16) if m else None)
    name = "renderD" + text[:8]
    m = _OLD_NODE.fullmatch(name)
    assert numbered(name, "renderD") == (int(m.group(1)) if m else None)
    if _OLD_SHORT_BDF.fullmatch(text.lower()) and "," not in text:
        assert gpu_list_entries(text.strip()) == ["0000:" + text.lower()]


def test_short_and_long_pci_addresses_in_a_gpu_list():
    assert gpu_list_entries("1b:00.0,00000000:1C:00.0, 3") == ["0000:1b:00.0", "0000:1c:00.0", 3]


# -- what discovery leaves unloaded ----------------------------------------------------------
def test_the_measure_sees_every_lazy_module():
    assert loaded_by("import logging, numabind.devices.nvml") >= LAZY - {"pynvml"}


def test_importing_the_devices_loads_neither_nvml_nor_logging():
    loaded = loaded_by("import numabind.devices")
    assert "numabind.devices" in loaded
    assert not loaded & LAZY, f"importing numabind.devices loads {sorted(loaded & LAZY)}"


#: The reader of a replayed root (numabind._fs, numabind._dump) is made before measuring, and numabind._hwloc_xml
#: (the order note of an hwloc XML root, imported for a replayed root with several GPUs) is stood in for: their
#: imports are their modules' business; these tests measure GPU discovery's.
_READER = """
import types
from numabind._fs import FsReader
reader = FsReader({root!r})
xml = sys.modules["numabind._hwloc_xml"] = types.ModuleType("numabind._hwloc_xml")
xml.gpu_order_note = lambda reader, vendor=None: ""
"""
_DISCOVER = """
from numabind.devices import discover_gpus
gpus = discover_gpus(reader, {{}}, {env!r}, use_nvml=False)
assert [g.physical_index for g in gpus] == {want!r}, gpus
"""


def _nvidia(root):
    eight_gpu_box(root, "nvidia")
    return {**container(root, "nvidia", [1, 3, 5]), "CUDA_VISIBLE_DEVICES": "2,0,9"}, [2, 0]   # 9: a warning


def _amd(root):
    eight_gpu_box(root, "amd")
    return {"ROCR_VISIBLE_DEVICES": "1,2,3", "HIP_VISIBLE_DEVICES": "2"}, [3]


def _intel(root):
    eight_gpu_box(root, "intel")
    add_nvidia_gpu(root, "0000:e0:00.0", proc=False)     # another vendor, ignored under NUMABIND_GPU_VENDOR
    return {"NUMABIND_GPU_VENDOR": "intel", "ZE_AFFINITY_MASK": "1,0.1,99"}, [0, 1]


def _ascend(root):
    ascend_box(root)
    return {"ASCEND_RT_VISIBLE_DEVICES": "1,3"}, [1, 3]


@pytest.mark.parametrize("machine", [_nvidia, _amd, _intel, _ascend], ids=lambda f: f.__name__.strip("_"))
def test_discovering_fake_gpus_loads_neither_nvml_nor_logging(tmp_path, machine):
    env, want = machine(tmp_path)
    loaded = loaded_by(_DISCOVER.format(env=env, want=want), setup=_READER.format(root=str(tmp_path)))
    assert "numabind.devices" in loaded
    assert not loaded & LAZY, f"GPU discovery loads {sorted(loaded & LAZY)}"


def test_discovering_this_machines_gpus_loads_neither_nvml_nor_logging():
    loaded = loaded_by("from numabind._fs import FsReader\nfrom numabind.devices import discover_gpus\n"
                       "discover_gpus(FsReader('/'), {}, use_nvml=False)")
    assert not loaded & LAZY, f"GPU discovery loads {sorted(loaded & LAZY)}"


# -- the docs say what the vendors' table holds ------------------------------------------------
def test_the_gpus_page_shows_the_vendors_table():
    from pathlib import Path

    from numabind import _vendors as v

    text = (Path(__file__).resolve().parents[1] / "docs" / "gpus.rst").read_text()
    table = text[text.index(".. list-table::"):].split("\n\n", 2)[1]
    rows = [[re.findall(r"``([^`]+)``", cell) for cell in row.split("\n     - ")] for row in table.split("   * - ")[2:]]
    assert [row[0] for row in rows] == [[name] for name in v.NAMES]
    for (name,), pci, classes, drivers, visibility, order, tool, osdevs in rows:
        assert int(pci[0], 16) == v.PCI_IDS[name] and tuple(int(c, 16) for c in classes) == v.BASE_CLASSES[name]
        assert tuple(drivers) == v.DRIVERS[name] and tuple(visibility) == v.VISIBILITY_VARIABLES[name]
        assert tuple(order) == v.ORDER_VARIABLES[name] and tuple(osdevs) == v.HWLOC_OSDEVS[name]
        assert tool == ([v.UUID_TOOLS[name]] if v.UUID_TOOLS[name] else [])
