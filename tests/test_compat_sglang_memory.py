"""SGLang's memory helpers over numabind.bind_memory (numabind.compat._sglang_memory).

Kernel tests bind mappings of their own and read back without numabind (raw get_mempolicy, numa_maps). torch
is replaced by a small fake (:func:`fake_torch`) that records what the helpers ask of it: ``torch.empty``
with ``pin_memory``, ``torch.frombuffer`` and ``cudaHostRegister``/``cudaHostUnregister``. The spread over
several nodes is proven in the guest (tests/vm/test_vm_memory.py).
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import sys

import pytest

from numabind.compat import _sglang_memory as sm

from .faketorch import fake_torch
from .kernel import MEM_NODE, MISSING_NODE, MPOL, ids_of, mempolicy_refusal, raw_mempolicy

PAGE = mmap.PAGESIZE
LOGGER = "sglang.srt.utils.numa_utils"


@pytest.fixture(autouse=True)
def _kernel_may_be_used(monkeypatch):
    why = mempolicy_refusal()
    if why:
        pytest.skip(why)
    for name in ("SGLANG_CRASH_ON_NUMA_BIND_FAILURE", "SGLANG_PLE_OFFLOAD_NUMA_INTERLEAVE"):
        monkeypatch.delenv(name, raising=False)


def range_mode(address: int) -> tuple[int, frozenset[int]]:
    from numabind import _native

    ffi, lib = _native.ffi, _native.lib
    mode = ffi.new("int *")
    mask = ffi.new("unsigned long[]", 16)
    assert lib.nb_sys_get_mempolicy(mode, mask, 16 * 64, ffi.cast("void *", address), 2) == 0
    return mode[0] & 0xFF, frozenset(w * 64 + b for w in range(16) for b in range(64) if mask[w] >> b & 1)


def address_of(m: mmap.mmap) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(m))


# ----------------------------------------------------------------------------- a fake torch
@pytest.fixture
def torch(monkeypatch):
    fake = fake_torch()
    monkeypatch.setitem(sys.modules, "torch", fake)
    return fake


@pytest.fixture
def two_names_one_node(monkeypatch):
    """A memory-node list of two entries that are both this machine's node: the interleave path runs on one
    node (the spread over real nodes is the guest's test)."""
    monkeypatch.setattr(sm, "numa_memory_nodes", lambda: [MEM_NODE, MEM_NODE])


# ----------------------------------------------------------------------------- nodes and pages
def test_memory_nodes_are_the_nodes_with_memory_this_process_may_use():
    with open("/proc/self/status") as f:
        mems = next(line.split(":", 1)[1] for line in f if line.startswith("Mems_allowed_list:"))
    with open("/sys/devices/system/node/has_memory") as f:
        expected = sorted(ids_of(f.read()) & ids_of(mems))
    assert sm.numa_memory_nodes() == expected


@pytest.mark.kernel
def test_page_counts_are_the_pages_of_exactly_the_range():
    m = mmap.mmap(-1, 8 * PAGE)
    try:
        base = address_of(m)
        assert sm.numa_page_counts(base, 8 * PAGE) == {}          # nothing faulted in yet
        m[PAGE:4 * PAGE] = b"z" * (3 * PAGE)
        assert sm.numa_page_counts(base, 8 * PAGE) == {MEM_NODE: 3}
        assert sm.numa_page_counts(base + 2 * PAGE, PAGE) == {MEM_NODE: 1}   # inside the mapping
    finally:
        m.close()
    assert sm.numa_page_counts(0, PAGE) == {}                      # not a range: nothing to count


@pytest.mark.kernel
def test_shm_distribution_counts_the_files_mapped_pages(tmp_path):
    folder = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else str(tmp_path)
    path = os.path.join(folder, f"numabind-test-{os.getpid()}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, 4 * PAGE)
        m = mmap.mmap(fd, 4 * PAGE, flags=mmap.MAP_SHARED)
        try:
            m[:2 * PAGE] = b"s" * (2 * PAGE)
            assert sm.get_shm_numa_distribution(path) == {MEM_NODE: 2}
            assert sm.get_shm_numa_distribution(path + "-other") == {}
        finally:
            m.close()
    finally:
        os.close(fd)
        os.unlink(path)


def test_shm_distribution_sums_the_files_lines(tmp_path, monkeypatch):
    maps = tmp_path / "numa_maps"
    maps.write_text(
        "7f0000000000 default file=/dev/shm/pool dirty=8 N0=3 N1=5 kernelpagesize_kB=4\n"
        "7f0000100000 default file=/dev/shm/pool N1=2 kernelpagesize_kB=4\n"
        "7f0000200000 default file=/dev/shm/pool-2 N0=9 kernelpagesize_kB=4\n"
        "7f0000300000 bind:1 file=/dev/shm/gone (deleted) N1=4 kernelpagesize_kB=4\n"
        "7f0000400000 default anon=2 N0=2 kernelpagesize_kB=4\n")
    monkeypatch.setattr(sm, "_NUMA_MAPS_PATH", str(maps))
    assert sm.get_shm_numa_distribution("/dev/shm/pool") == {0: 3, 1: 7}
    assert sm.get_shm_numa_distribution("/dev/shm/gone") == {1: 4}
    monkeypatch.setattr(sm, "_NUMA_MAPS_PATH", str(tmp_path / "missing"))
    assert sm.get_shm_numa_distribution("/dev/shm/pool") == {}


# ----------------------------------------------------------------------------- policies
@pytest.mark.kernel
def test_interleave_memory_sets_the_policy_on_the_range(two_names_one_node):
    m = mmap.mmap(-1, 4 * PAGE)
    try:
        base = address_of(m)
        assert sm.numa_interleave_memory(base + 10, 2 * PAGE) == (MEM_NODE, MEM_NODE)
        assert [range_mode(base + k * PAGE) for k in range(4)] == \
            [(MPOL["interleave"], frozenset({MEM_NODE}))] * 3 + [(MPOL["default"], frozenset())]
    finally:
        m.close()


@pytest.mark.kernel
def test_interleave_memory_with_one_node_does_nothing(monkeypatch):
    monkeypatch.setattr(sm, "numa_memory_nodes", lambda: [MEM_NODE])
    m = mmap.mmap(-1, 2 * PAGE)
    try:
        assert sm.numa_interleave_memory(address_of(m), 2 * PAGE) == ()
        assert range_mode(address_of(m)) == (MPOL["default"], frozenset())
    finally:
        m.close()


@pytest.mark.kernel
def test_interleave_memory_refused_by_the_kernel_raises_oserror(two_names_one_node):
    with pytest.raises(OSError, match="mbind failed"):
        sm.numa_interleave_memory(PAGE, PAGE)      # below mmap_min_addr: never mapped


@pytest.mark.kernel
def test_temp_membind_binds_the_thread_for_the_block_only():
    before = raw_mempolicy()
    with sm.temp_membind(MEM_NODE):
        assert raw_mempolicy() == (MPOL["bind"], frozenset({MEM_NODE}))
        m = mmap.mmap(-1, 2 * PAGE)
        m[:] = b"t" * (2 * PAGE)
        assert sm.numa_page_counts(address_of(m), 2 * PAGE) == {MEM_NODE: 2}
        m.close()
    assert raw_mempolicy() == before


@pytest.mark.kernel
def test_temp_membind_to_a_missing_node_warns_or_raises(caplog, monkeypatch):
    before = raw_mempolicy()
    ran = []
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        with sm.temp_membind(MISSING_NODE):
            ran.append(raw_mempolicy())
    assert ran == [before] and raw_mempolicy() == before
    assert any(f"NUMA node {MISSING_NODE}" in r.getMessage() and "do not exist" in r.getMessage()
               for r in caplog.records)
    monkeypatch.setenv("SGLANG_CRASH_ON_NUMA_BIND_FAILURE", "1")
    with pytest.raises(RuntimeError, match=f"NUMA node {MISSING_NODE}"):
        with sm.temp_membind(MISSING_NODE):
            pass


# ----------------------------------------------------------------------------- pinned host memory
def test_pinned_buffer_needs_two_nodes(monkeypatch):
    monkeypatch.setattr(sm, "numa_memory_nodes", lambda: [MEM_NODE])
    with pytest.raises(RuntimeError, match="at least two NUMA nodes"):
        sm.InterleavedPinnedBuffer(PAGE)


@pytest.mark.kernel
def test_pinned_buffer_interleaves_touches_pins_and_releases(torch, two_names_one_node):
    buf = sm.InterleavedPinnedBuffer(3 * PAGE - 5)
    ptr = buf.ptr
    assert buf.nbytes == 3 * PAGE and ptr % PAGE == 0
    assert range_mode(ptr) == (MPOL["interleave"], frozenset({MEM_NODE}))
    assert buf.report.applied and buf.report.length == 3 * PAGE
    assert sm.numa_page_counts(ptr, buf.nbytes) == {MEM_NODE: 3}     # every page faulted in before pinning
    assert torch.calls == [("register", ptr, 3 * PAGE, 0)]
    tensor = buf.as_tensor((2, 3), torch.float32)
    assert (tensor.shape, tensor.dtype, tensor.data_ptr()) == ((2, 3), "float32", ptr)
    buf.release()
    assert buf.ptr is None and torch.calls[-1] == ("unregister", ptr)
    with open("/proc/self/numa_maps") as f:
        assert not any(line.startswith(f"{ptr:x} ") for line in f)      # unmapped
    buf.release()                                                      # twice is harmless
    with pytest.raises(RuntimeError, match="released"):
        buf.as_tensor((1,), torch.uint8)


@pytest.mark.kernel
def test_pinned_buffer_that_cannot_be_registered_is_unmapped(monkeypatch, two_names_one_node):
    fake = fake_torch(register_rc=2)
    monkeypatch.setitem(sys.modules, "torch", fake)
    with pytest.raises(RuntimeError, match="cudaHostRegister of 4096 bytes failed: 2"):
        sm.InterleavedPinnedBuffer(PAGE)
    (ptr,) = [c[1] for c in fake.calls if c[0] == "register"]
    with open("/proc/self/numa_maps") as f:
        assert not any(line.startswith(f"{ptr:x} ") for line in f)


@pytest.mark.kernel
def test_pinned_buffer_whose_unregister_fails_keeps_the_mapping(monkeypatch, two_names_one_node, caplog):
    fake = fake_torch(unregister_rc=1)
    monkeypatch.setitem(sys.modules, "torch", fake)
    buf = sm.InterleavedPinnedBuffer(PAGE)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        buf.release()
    assert buf.ptr is not None and "leaving the mapping" in caplog.text
    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    buf.release()
    assert buf.ptr is None


def test_table_is_plain_pinned_memory_on_one_node(torch, monkeypatch):
    monkeypatch.setattr(sm, "numa_memory_nodes", lambda: [MEM_NODE])
    tensor, buffer = sm.allocate_interleaved_pinned_table((4, 8), torch.float16)
    assert buffer is None and tensor.pinned and tensor.shape == (4, 8)
    assert torch.calls == [("empty", (4, 8), "float16", "cpu", True)]


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_table_interleave_can_be_turned_off(torch, two_names_one_node, monkeypatch, how):
    if how == "environment":
        monkeypatch.setenv("SGLANG_PLE_OFFLOAD_NUMA_INTERLEAVE", "0")
    tensor, buffer = sm.allocate_interleaved_pinned_table((2,), torch.uint8, interleave=how == "environment")
    assert buffer is None and [c[0] for c in torch.calls] == ["empty"]


def test_memory_helpers_read_sglangs_booleans_as_the_launcher_does(torch, two_names_one_node, monkeypatch):
    """One reading of SGLang's boolean variables for the launcher and the memory helpers: a typo is an error
    naming the variable, never a silent default."""
    from numabind.compat import sglang

    monkeypatch.setenv("SGLANG_PLE_OFFLOAD_NUMA_INTERLEAVE", "nope")
    with pytest.raises(ValueError, match="SGLANG_PLE_OFFLOAD_NUMA_INTERLEAVE='nope' is not a boolean"):
        sm.allocate_interleaved_pinned_table((2,), torch.uint8)
    monkeypatch.setenv("SGLANG_CRASH_ON_NUMA_BIND_FAILURE", "nope")
    with pytest.raises(ValueError, match="SGLANG_CRASH_ON_NUMA_BIND_FAILURE='nope' is not a boolean"):
        sglang._handle_numa_bind_failure(0, {72})


@pytest.mark.kernel
def test_table_that_does_not_spread_is_a_failure(torch, two_names_one_node, caplog, monkeypatch):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        tensor, buffer = sm.allocate_interleaved_pinned_table((PAGE // 2,), torch.float16)
    assert buffer is not None and tensor.data_ptr() == buffer.ptr and tensor.shape == (PAGE // 2,)
    assert "did not spread the pinned table" in caplog.text and f"{{{MEM_NODE}: 1}}" in caplog.text
    buffer.release()
    monkeypatch.setenv("SGLANG_CRASH_ON_NUMA_BIND_FAILURE", "true")
    with pytest.raises(RuntimeError, match="did not spread"):
        sm.allocate_interleaved_pinned_table((PAGE,), torch.uint8)
    ptr = [c[1] for c in torch.calls if c[0] == "register"][-1]
    assert ("unregister", ptr) in torch.calls                         # released before raising


@pytest.mark.kernel
def test_table_whose_policy_is_refused_falls_back_to_plain(torch, monkeypatch, caplog):
    monkeypatch.setattr(sm, "numa_memory_nodes", lambda: [MEM_NODE, MISSING_NODE])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        tensor, buffer = sm.allocate_interleaved_pinned_table((8,), torch.uint8)
    assert buffer is None and tensor.pinned
    assert "NUMA-interleaved pinned allocation failed; using regular pinned memory" in caplog.text
    assert not any(c[0] == "register" for c in torch.calls)


def test_table_without_memory_policy_calls_is_plain(torch, two_names_one_node, monkeypatch, caplog):
    monkeypatch.setattr(sm, "_policy_readable", lambda: False)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        tensor, buffer = sm.allocate_interleaved_pinned_table((8,), torch.uint8)
    assert buffer is None and "cannot query its memory policy" in caplog.text
