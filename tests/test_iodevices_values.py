"""numabind.iodevices' value classes, and what ``numabind topology``'s device and tree modules load at start-up
(issue 34 §3, issue 43).

:class:`~numabind.iodevices.PciDevice`, :class:`~numabind.iodevices.PciPlace`, :class:`~numabind.iodevices.Nic`
and :class:`~numabind.iodevices.NicChoice` are frozen values with slots (:class:`numabind._base.Value`, the looks'
start-up idiom):
positional and keyword construction, equality, hashing, pickling, ``repr``, the frozen error. Importing
:mod:`numabind.iodevices` and :mod:`numabind.cli.tree`, and scanning a machine's PCI functions and printing its
tree, loads no ``logging``.
"""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from numabind.iodevices import Nic, NicChoice, PciDevice, PciPlace
from tests.fakeio import add_block, add_net, add_pci_function
from tests.fakesys import two_sockets
from tests.run_path import loaded_by

#: Standard library modules ``numabind topology``'s device scan and tree do not need (the look's start is guarded
#: as a ratio to ``python -c pass``: ``python -m bench``, P9).
HEAVY = {"logging"}

GPU, NIC = "0000:18:00.0", "0000:19:00.0"


def _device(**changes) -> PciDevice:
    fields = dict(address=NIC, vendor_id=0x15B3, device_id=0x1021, pci_class=0x020000, numa_node=0,
                  local_cpus=frozenset({0, 1}), nets=("ens1",), blocks=(), extra=(("driver", "mlx5_core"),))
    return PciDevice(**{**fields, **changes})


def _nic() -> Nic:
    return Nic("mlx5_0", "ib", PciPlace(NIC, ("pci0000:17", "0000:17:01.0", NIC), 0), (1,), ("ens1",))


def test_pci_device_is_a_frozen_value_whose_extra_is_not_compared():
    dev = _device()
    positional = PciDevice(NIC, 0x15B3, 0x1021, 0x020000, 0, frozenset({0, 1}), ("ens1",), (),
                           (("driver", "mlx5_core"),))
    assert positional == dev and hash(positional) == hash(dev)
    assert PciDevice(NIC, None, None, None, None, frozenset()).nets == () and _device().blocks == ()
    other = dev.replace(extra=())
    assert other == dev and hash(other) == hash(dev) and other.extra == () and other == _device(extra=())
    assert _device(numa_node=1) != dev and _device(nets=()) != dev
    assert dev != dataclasses.make_dataclass("PciDevice", ["address"])(NIC)   # another class is never equal
    assert repr(dev) == ("PciDevice(address='0000:19:00.0', vendor_id=5555, device_id=4129, pci_class=131072, "
                         "numa_node=0, local_cpus=frozenset({0, 1}), nets=('ens1',), blocks=(), "
                         "extra=(('driver', 'mlx5_core'),))")
    assert dev.kind == "Ethernet" and dev.important and dev.describe() == "PCI 0000:19:00.0 (Ethernet) net ens1"
    with pytest.raises(dataclasses.FrozenInstanceError):
        dev.numa_node = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        del dev.address


@pytest.mark.parametrize("value", [_device(), PciPlace(GPU, ("pci0000:17", GPU), None), _nic(),
                                   NicChoice(GPU, (_nic(),), (), (("NCCL_IB_HCA", "=mlx5_0:1"),), ("why",))],
                         ids=lambda v: type(v).__name__)
def test_values_pickle_replace_and_keep_their_annotations(value):
    copy = pickle.loads(pickle.dumps(value))
    assert copy == value and repr(copy) == repr(value) and type(copy) is type(value)
    first = type(value).__slots__[0]
    changed = value.replace(**{first: "0000:00:00.0"})
    assert getattr(changed, first) == "0000:00:00.0" and changed != value and value.replace() == value
    assert all(getattr(changed, n) == getattr(value, n) for n in type(value).__slots__[1:])
    with pytest.raises(TypeError, match="colour"):
        value.replace(colour="red")
    # the attribute types stay in the class body for type checkers, one per attribute, in order
    assert tuple(type(value).__annotations__) == type(value).__slots__
    assert not hasattr(value, "__dict__")


def test_nic_and_choice_keep_their_properties():
    nic = _nic()
    assert (nic.address, nic.numa_node, nic.ifnames, nic.physfn, nic.uppers) == (NIC, 0, ("ens1",), None, ())
    assert nic.to_dict()["pci_path"] == ["pci0000:17", "0000:17:01.0", NIC]
    choice = NicChoice(gpu=GPU, rdma=(nic,), sockets=(nic,), env_items=(("NCCL_IB_HCA", "=mlx5_0:1"),),
                       reasons=("why",))
    assert choice.env == {"NCCL_IB_HCA": "=mlx5_0:1"} and choice.to_dict()["rdma"] == ["mlx5_0"]
    assert hash(choice) == hash(pickle.loads(pickle.dumps(choice)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        nic.place = nic.place.replace(numa_node=1)


def _machine(root) -> None:
    two_sockets(root, cpus_per_socket=2, smt=False)
    add_pci_function(root, NIC, pci_class=0x020000, numa_node=0, local_cpulist="0-1")
    add_net(root, "ens1", NIC)
    add_pci_function(root, "0000:9a:00.0", pci_class=0x010802, numa_node=1, local_cpulist="2-3")
    add_block(root, "nvme0n1", "0000:9a:00.0", "259:0", partitions={"nvme0n1p1": "259:1"})


def test_importing_the_device_and_tree_modules_loads_nothing_heavy():
    loaded = loaded_by("import numabind.iodevices, numabind.cli.tree")
    assert {"numabind.iodevices", "numabind.cli.tree"} <= loaded
    assert not loaded & HEAVY, f"importing numabind.iodevices and numabind.cli.tree loads {sorted(loaded & HEAVY)}"


_SETUP = "from numabind.topology import discover\ntopo = discover({root!r})"
_SCAN = """
from numabind.iodevices import scan_pci
from numabind.cli.tree import build_tree, hwloc_xml, tree_text
devices = scan_pci({root!r})
tree = build_tree(topo, [d for d in devices if d.important])
text, xml = tree_text(topo, tree), hwloc_xml(topo, tree)
assert "net ens1" in text and "block nvme0n1" in text and 'name="nvme0n1"' in xml, text
"""


def test_scanning_and_printing_the_tree_load_nothing_heavy(tmp_path):
    """What ``numabind topology`` adds to discovery for its text and XML: the scan of the PCI functions, the
    tree, its text and its XML (discovery itself is measured with the topology module)."""
    _machine(tmp_path)
    loaded = loaded_by(_SCAN.format(root=str(tmp_path)), setup=_SETUP.format(root=str(tmp_path)))
    assert not loaded & HEAVY, f"scan_pci, build_tree, tree_text and hwloc_xml load {sorted(loaded & HEAVY)}"
