"""Issue 35: numabind on an arm64 kernel with two NUMA nodes, not only on x86.

The guest is QEMU's ``virt`` board with ``-cpu max`` under software emulation (TCG), Debian bookworm's
``linux-image-arm64`` (NUMA from the device tree QEMU writes), and an arm64 Debian userland
(``scripts/arm64_userland.sh``) running the checkout with numabind's C core cross-compiled for arm64
(``tests/vm/harness.py``, kernel ``arm64``). The checks are the x86 guest's own, run here unchanged:
the nodes, CPUs and distances QEMU was told to emulate (``test_vm_harness``), discovery against
``numactl --hardware`` (``test_vm_discovery``), and a real bind with read-back through the libnuma and
syscall backends (``test_vm_placement``: every thread's affinity, the policy of a fresh mapping, and its
pages counted on node 1 by ``move_pages(2)`` and ``numa_maps``).

Marker ``arm64_vm`` selects them (``pytest -m arm64_vm``). TCG emulating arm64 on x86 is slower than the
x86 guest; the terminal summary's "numa_vm guests" section gives the boot and run time.
"""

from __future__ import annotations

import os

import pytest

from . import probe
from .test_vm_discovery import numactl_hardware
from .test_vm_harness import test_guest_has_the_nodes_qemu_was_given as _nodes_as_qemu_was_told
from .test_vm_placement import test_bind_current_to_node1_places_threads_and_pages as _bind_to_node1

pytestmark = [pytest.mark.numa_vm(topology="2n", kernel="arm64"), pytest.mark.arm64_vm]

EM_AARCH64 = 183


@pytest.fixture(autouse=True)
def arm64_guest():
    """The guest really is arm64 (tests/vm/probe.py picks arm64's system call numbers by the machine)."""
    assert os.uname().machine == "aarch64", os.uname()
    assert (probe.SYS_MBIND, probe.SYS_SET_MEMPOLICY, probe.SYS_GET_MEMPOLICY, probe.SYS_MOVE_PAGES) == (
        235, 237, 236, 239)


def test_arm64_kernel_runs_the_arm64_core():
    import numabind
    from numabind import _native

    with open(_native.__file__, "rb") as f:
        head = f.read(20)
    assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == EM_AARCH64, _native.__file__
    assert _native.ffi.string(_native.lib.nb_version()).decode() == numabind.__version__
    info = numabind.backend_info()
    assert info["native"] is None, info
    assert info["selected"] == "libnuma" and info["available"]["syscall"], info
    print(f"{os.uname().machine} {os.uname().release}: C core {_native.__file__} (aarch64), "
          f"backend {info['selected']}")


def test_arm64_nodes_cpus_and_distances_are_what_qemu_was_given(vm_topology):
    _nodes_as_qemu_was_told("2n", vm_topology)


def test_arm64_discover_matches_numactl_and_qemu(vm_topology):
    import numabind

    topo = numabind.discover()
    numactl = numactl_hardware()
    ids = list(range(len(vm_topology.nodes)))
    assert sorted(topo.nodes) == ids == sorted(numactl["cpus"])
    for i in ids:
        node = topo.nodes[i]
        assert set(node.cpus) == set(vm_topology.nodes[i].cpus) == numactl["cpus"][i], f"node {i} CPUs"
        row = vm_topology.distance_matrix()[i]
        assert [node.distances[j] for j in ids] == row == numactl["distances"][i], f"node {i} distances"
        assert node.memory_bytes >> 20 == numactl["mb"][i], f"node {i} MiB"
    assert set(topo.online_cpus) == set(range(vm_topology.ncpus))
    print(f"arm64 2n: discover() == numactl --hardware == QEMU: CPUs {[sorted(topo.nodes[i].cpus) for i in ids]}, "
          f"distances {[numactl['distances'][i] for i in ids]}")


@pytest.mark.parametrize("backend", ["libnuma", "syscall"])
def test_arm64_bind_to_node1_places_threads_and_pages(backend, vm_topology):
    _bind_to_node1(backend, vm_topology)
