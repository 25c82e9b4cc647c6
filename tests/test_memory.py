"""numabind.bind_memory: the memory policy of one range (mbind), read back per page (move_pages).

The kernel tests bind private mmaps of their own (nothing of the process's policy changes) and read the result
back without numabind: the raw get_mempolicy(MPOL_F_ADDR) and move_pages system calls of the compiled core's
``nb_sys_*`` wrappers, and the mapping's line of /proc/self/numa_maps. Nodes are derived from this machine
(tests/kernel.py); the multi-node claims are proven in the guest (tests/vm/test_vm_memory.py).
"""

from __future__ import annotations

import array
import ctypes
import dataclasses
import errno
import logging
import mmap
import pickle
import re

import pytest

import numabind
from numabind import memory
from numabind.backends import range as door
from numabind.memory import MemoryReport, PagePlacement, bind_memory, page_placement

from .kernel import MEM_NODE, MISSING_NODE, MPOL, NATIVE

PAGE = mmap.PAGESIZE
MPOL_F_ADDR = 2


#: every test here sets or reads a range's policy: conftest skips them with the reason where the calls are refused
pytestmark = pytest.mark.mempolicy


@pytest.fixture(params=NATIVE)
def backend(request):
    info = numabind.backend_info()
    if not info["available"][request.param]:
        pytest.skip(f"backend {request.param} unavailable here: {info['unavailable'][request.param]}")
    return request.param


@pytest.fixture
def region():
    m = mmap.mmap(-1, 8 * PAGE)
    yield m
    m.close()


def address_of(m: mmap.mmap) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(m))


def raw_range_policy(address: int) -> tuple[int, frozenset[int]]:
    """get_mempolicy(MPOL_F_ADDR) straight through the raw system call."""
    from numabind import _native

    ffi, lib = _native.ffi, _native.lib
    mode = ffi.new("int *")
    mask = ffi.new("unsigned long[]", 16)
    rc = lib.nb_sys_get_mempolicy(mode, mask, 16 * 64, ffi.cast("void *", address), MPOL_F_ADDR)
    assert rc == 0, f"get_mempolicy(MPOL_F_ADDR) returned {rc}"
    return mode[0] & 0xFF, frozenset(w * 64 + b for w in range(16) for b in range(64) if mask[w] >> b & 1)


def raw_page_nodes(address: int, pages: int) -> list[int]:
    """move_pages(2) in query mode straight through the raw system call."""
    from numabind import _native

    ffi, lib = _native.ffi, _native.lib
    ptrs = ffi.new("void *[]", [ffi.cast("void *", address + k * PAGE) for k in range(pages)])
    status = ffi.new("int[]", pages)
    assert lib.nb_sys_move_pages(0, pages, ptrs, ffi.NULL, status, 0) == 0
    return list(status)


def numa_maps_line(address: int) -> str:
    with open("/proc/self/numa_maps") as f:
        for line in f:
            if line.startswith(f"{address:x} "):
                return line.strip()
    raise LookupError(f"no numa_maps line at {address:#x}")


# ----------------------------------------------------------------------------- policies on the real kernel
@pytest.mark.kernel
@pytest.mark.parametrize("policy", ["bind", "preferred", "interleave", "preferred-many"])
def test_policy_is_set_on_the_range_and_pages_land_there(region, backend, policy):
    base = address_of(region)
    report = bind_memory(region, mode=policy, nodes={MEM_NODE}, backend=backend, strict=True)
    assert raw_range_policy(base) == (MPOL[policy], frozenset({MEM_NODE}))
    assert report.applied and report.ok and report.warnings == ()
    assert report.backend == backend
    assert (report.address, report.length, report.pages) == (base, 8 * PAGE, 8)
    assert report.read_back == (policy, frozenset({MEM_NODE}))
    assert report.placement == PagePlacement(8, {}, not_faulted=8)   # nothing touched yet
    region[:] = b"\x5a" * len(region)                                 # first touch places the pages
    assert raw_page_nodes(base, 8) == [MEM_NODE] * 8
    assert page_placement(region, backend=backend) == PagePlacement(8, {MEM_NODE: 8})
    shown = {"bind": "bind", "preferred": "prefer", "interleave": "interleave", "preferred-many": "prefer (many)"}
    line = numa_maps_line(base)
    assert f" {shown[policy]}:{MEM_NODE} " in line and f"N{MEM_NODE}=8" in line, line


@pytest.mark.kernel
def test_a_plan_gives_the_policy_and_its_cpus_are_not_used(region, backend):
    plan = numabind.Plan(cpus=frozenset({0}), mem_policy="bind", mem_nodes=frozenset({MEM_NODE}))
    before = numabind.current_binding()
    report = bind_memory(region, plan, backend=backend)
    assert (report.mode, report.nodes) == ("bind", frozenset({MEM_NODE}))
    assert raw_range_policy(address_of(region)) == (MPOL["bind"], frozenset({MEM_NODE}))
    assert numabind.current_binding().cpus == before.cpus


@pytest.mark.kernel
def test_local_and_default_take_no_nodes(region):
    base = address_of(region)
    assert bind_memory(region, "interleave", nodes={MEM_NODE}).applied
    report = bind_memory(region, "local")
    assert report.read_back == ("local", frozenset()) and report.nodes == frozenset()
    assert raw_range_policy(base)[0] in (MPOL["local"], MPOL["preferred"])   # older kernels: preferred, no node
    report = bind_memory(region, "default")
    assert raw_range_policy(base) == (MPOL["default"], frozenset())
    assert report.ok


@pytest.mark.kernel
def test_weighted_interleave_where_the_kernel_has_it(region):
    if numabind.interleave_weights() is None:
        pytest.skip("this kernel has no weighted interleave (Linux 6.9+)")
    report = bind_memory(region, "weighted-interleave", nodes={MEM_NODE}, strict=True)
    assert report.read_back == ("weighted-interleave", frozenset({MEM_NODE}))
    assert raw_range_policy(address_of(region)) == (6, frozenset({MEM_NODE}))


@pytest.mark.kernel
def test_range_covers_the_pages_the_buffer_touches(region):
    base = address_of(region)
    view = memoryview(region)[100:100 + PAGE]    # straddles pages 0 and 1
    report = bind_memory(view, "bind", nodes={MEM_NODE})
    view.release()
    assert (report.address, report.length) == (base, 2 * PAGE)
    assert raw_range_policy(base)[0] == MPOL["bind"]
    assert raw_range_policy(base + PAGE)[0] == MPOL["bind"]
    assert raw_range_policy(base + 2 * PAGE)[0] == MPOL["default"]   # the rest of the mapping is left alone


@pytest.mark.kernel
def test_address_length_pair_and_length_keyword(region):
    base = address_of(region)
    report = bind_memory((base + 2 * PAGE, 3 * PAGE), "bind", nodes={MEM_NODE}, length=PAGE + 1)
    assert (report.address, report.length) == (base + 2 * PAGE, 2 * PAGE)
    assert [raw_range_policy(base + k * PAGE)[0] for k in range(5)] == [0, 0, 2, 2, 0]


@pytest.mark.kernel
def test_read_only_buffers_are_bound_too():
    ro = mmap.mmap(-1, 2 * PAGE, prot=mmap.PROT_READ)
    try:
        report = bind_memory(ro, "interleave", nodes={MEM_NODE}, strict=True)
        assert report.ok and report.length == 2 * PAGE
    finally:
        ro.close()
    assert bind_memory(b"immutable bytes", "local").applied   # the heap pages holding them


@pytest.mark.kernel
def test_a_tensor_like_object_is_bound_by_data_ptr_and_nbytes(region):
    base = address_of(region)

    class Storage:   # what torch's untyped_storage() offers: data_ptr() and nbytes(), on the CPU
        device = type("Device", (), {"type": "cpu"})()

        def data_ptr(self):
            return base + PAGE

        def nbytes(self):
            return 2 * PAGE

    report = bind_memory(Storage(), "bind", nodes={MEM_NODE})
    assert (report.address, report.length) == (base + PAGE, 2 * PAGE)

    class GpuTensor(Storage):
        device = type("Device", (), {"type": "cuda"})()

    with pytest.raises(numabind.PlanError, match="cuda, not in host memory"):
        bind_memory(GpuTensor(), "bind", nodes={MEM_NODE})


@pytest.mark.kernel
def test_move_asks_the_kernel_to_move_and_strict_adds_mpol_mf_strict(region, monkeypatch):
    calls = []
    real = memory.mbind_range

    def spy(be, address, length, policy, nodes, flags):
        calls.append(flags)
        return real(be, address, length, policy, nodes, flags)

    monkeypatch.setattr(memory, "mbind_range", spy)
    region[:] = b"\1" * len(region)
    report = bind_memory(region, "bind", nodes={MEM_NODE}, move=True, strict=False)
    assert report.move and report.placement == PagePlacement(8, {MEM_NODE: 8})
    bind_memory(region, "bind", nodes={MEM_NODE}, move=True, strict=True)
    bind_memory(region, numabind.Plan(mem_policy="bind", mem_nodes={MEM_NODE}, migrate=True))
    bind_memory(region, "bind", nodes={MEM_NODE})
    assert calls == [door.MPOL_MF_MOVE, door.MPOL_MF_MOVE | door.MPOL_MF_STRICT, door.MPOL_MF_MOVE, 0]


# ----------------------------------------------------------------------------- refusals and strictness
@pytest.mark.kernel
def test_kernel_refusal_raises_under_strict_and_is_reported_otherwise(caplog):
    unmapped = (PAGE, PAGE)       # below mmap_min_addr: never mapped
    with pytest.raises(numabind.BindError) as info:
        bind_memory(unmapped, "bind", nodes={MEM_NODE}, strict=True)
    assert info.value.syscall == "mbind" and info.value.errno in (errno.EFAULT, errno.ENOMEM)
    with pytest.raises(numabind.BindError):
        bind_memory(unmapped, "bind", nodes={MEM_NODE}, strict="partial")
    with caplog.at_level(logging.WARNING, logger="numabind.memory"):
        report = bind_memory(unmapped, "bind", nodes={MEM_NODE}, strict=False)
    assert not report.applied and not report.ok and "mbind failed" in report.error
    assert report.warnings and "not set" in report.warnings[0]
    assert any("not set" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


@pytest.mark.kernel
def test_strict_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("NUMABIND_STRICT", "1")
    with pytest.raises(numabind.BindError):
        bind_memory((PAGE, PAGE), "bind", nodes={MEM_NODE})


@pytest.mark.kernel
def test_a_backend_without_mbind_is_a_refusal(region, caplog):
    with pytest.raises(numabind.BindError, match="none backend cannot set the memory policy of a range") as info:
        bind_memory(region, "bind", nodes={MEM_NODE}, backend="none", strict=True)
    assert info.value.errno == errno.ENOTSUP
    with caplog.at_level(logging.WARNING, logger="numabind.memory"):
        report = bind_memory(region, "bind", nodes={MEM_NODE}, backend="none")
    assert not report.applied and report.backend == "none" and report.placement is None
    assert caplog.records


@pytest.mark.kernel
def test_pages_left_on_other_nodes_raise_under_strict(region, monkeypatch, caplog):
    other = MISSING_NODE      # the kernel's answer is faked: one page elsewhere, one untouched, one EACCES

    def statuses(be, start, pages):
        yield [MEM_NODE] * (pages - 3) + [other, -errno.ENOENT, -errno.EACCES]

    monkeypatch.setattr(memory, "page_status", statuses)
    with pytest.raises(numabind.BindError, match=r"1 of 8 pages are on nodes .*move=True") as info:
        bind_memory(region, "bind", nodes={MEM_NODE}, strict=True)
    assert info.value.errno == errno.EIO
    report = bind_memory(region, "bind", nodes={MEM_NODE}, strict="partial")   # partial: the policy is in force
    assert report.applied and report.off_nodes == 1 and not report.ok
    assert report.placement == PagePlacement(8, {MEM_NODE: 5, other: 1}, not_faulted=1, errors={errno.EACCES: 1})
    with caplog.at_level(logging.WARNING, logger="numabind.memory"):
        report = bind_memory(region, "bind", nodes={MEM_NODE}, move=True, strict=False)
    assert "could not move them" in report.warnings[0]
    assert any("outside" in r.getMessage() for r in caplog.records)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs, match", [
    (dict(mode="bind", nodes={MEM_NODE}, length=9 * PAGE), "does not fit the buffer"),
    (dict(mode="bind", nodes={MEM_NODE}, length=0), "empty"),
    (dict(mode="bind", nodes={MISSING_NODE}), f"NUMA nodes {MISSING_NODE} do not exist"),
    (dict(mode="bind"), "needs at least one node"),
    (dict(mode="local", nodes={MEM_NODE}), "takes no nodes"),
    (dict(mode="bogus", nodes={MEM_NODE}), "is not one of"),
    (dict(), "needs a memory policy"),
    (dict(plan=numabind.Plan(cpus=frozenset({0}))), "has no memory policy"),
    (dict(plan="bind", mode="bind", nodes={MEM_NODE}), "mode twice"),
    (dict(plan=numabind.Plan(mem_policy="bind", mem_nodes={MEM_NODE}), nodes={MEM_NODE}), "one way"),
    (dict(mode="local", move=True), "move=True needs nodes"),
    (dict(mode="bind", nodes={MEM_NODE}, move="yes"), "move must be True or False"),
    (dict(mode="bind", nodes={MEM_NODE}, strict="maybe"), "strict='maybe'"),
])
def test_bad_input_is_a_plan_error_naming_the_fix(region, kwargs, match):
    plan = kwargs.pop("plan", None)
    with pytest.raises(numabind.PlanError, match=match):
        bind_memory(region, plan, **kwargs)


def test_a_node_without_memory_is_refused(region, monkeypatch):
    from numabind import live
    from numabind.plan import Limits

    real = live.limits()
    fake = Limits(real.online_cpus, real.allowed_cpus, real.cpus_source, real.nodes | {MISSING_NODE},
                  real.memory_nodes, real.allowed_nodes, real.nodes_source)
    monkeypatch.setattr(live, "limits", lambda: fake)
    with pytest.raises(numabind.PlanError, match=f"NUMA nodes {MISSING_NODE} have no memory.*pick nodes from"):
        bind_memory(region, "interleave", nodes={MEM_NODE, MISSING_NODE})


@pytest.mark.parametrize("buf, match", [
    (object(), "buffer protocol"),
    ("text", "buffer protocol"),
    (memoryview(bytearray(64))[::2], "not one contiguous range"),
    ((0, PAGE), "not a range of this address space"),
    ((PAGE, -1), "not a range of this address space"),
    ((PAGE,), r"\(address, length\) pair"),
    ((PAGE, 1.5), r"\(address, length\) pair"),
    (bytearray(), "empty"),
    (array.array("d"), "empty"),
])
def test_what_is_not_a_range_is_a_plan_error(buf, match):
    with pytest.raises(numabind.PlanError, match=match):
        bind_memory(buf, "bind", nodes={MEM_NODE})


# ----------------------------------------------------------------------------- the report
@pytest.mark.kernel
def test_the_report_is_a_frozen_picklable_value(region):
    region[:PAGE] = b"x" * PAGE
    report = bind_memory(region, "interleave", nodes={MEM_NODE})
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.mode = "bind"
    assert pickle.loads(pickle.dumps(report)) == report and hash(report) == hash(pickle.loads(pickle.dumps(report)))
    d = report.to_dict()
    assert d["mode"] == "interleave" and d["nodes"] == str(MEM_NODE) and d["pages"] == 8
    assert d["placement"] == {"pages": 8, "by_node": {str(MEM_NODE): 1}, "not_faulted": 7, "errors": {}}
    assert re.search(rf"interleave {MEM_NODE} on {8 * PAGE} bytes at 0x[0-9a-f]+ set; 8 pages: N{MEM_NODE}=1, "
                     r"7 not faulted in", report.describe())
    assert isinstance(report, MemoryReport) and report.off_nodes == 0
    unverified = bind_memory(region, "interleave", nodes={MEM_NODE}, verify=False)
    assert unverified.placement is None and unverified.read_back == ("interleave", frozenset({MEM_NODE}))


def test_placement_counts_in_chunks(monkeypatch, region):
    monkeypatch.setattr(door, "QUERY_CHUNK", 3)
    region[:] = b"y" * len(region)
    assert page_placement(region) == PagePlacement(8, {MEM_NODE: 8})
    assert page_placement(region, length=PAGE + 1) == PagePlacement(2, {MEM_NODE: 2})
