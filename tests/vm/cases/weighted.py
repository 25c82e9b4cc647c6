"""Weighted interleave measured in the guest: the system's weights, a plan bound and its pages counted per node
without transparent huge pages (tests/vm/test_vm_weighted.py; test_vm_arm64.py in the arm64 guest)."""

from __future__ import annotations

import ctypes
import os

import pytest

from .. import probe

MIB = probe.MIB
SIZE = 64 * MIB
WEIGHTS_DIR = "/sys/kernel/mm/mempolicy/weighted_interleave"
MADV_NOHUGEPAGE = 15
_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def system_weights() -> dict[int, int]:
    """The system-wide interleave weights of nodes 0 and 1."""
    return {n: int(open(f"{WEIGHTS_DIR}/node{n}").read()) for n in (0, 1)}


def write_weights(weights: dict[int, int]) -> None:
    """Write the system-wide interleave weights (root in the guest; the tests put them back)."""
    for n, w in weights.items():
        with open(f"{WEIGHTS_DIR}/node{n}", "w") as f:
            f.write(f"{w}\n")


def measure_small_pages(size: int) -> dict:
    """Allocate ``size`` bytes without THP, touch them, count per node (move_pages and numa_maps)."""
    with probe.Region(size) as r:
        if _libc.madvise(r.addr, r.size, MADV_NOHUGEPAGE) != 0:
            raise OSError(ctypes.get_errno(), "madvise(MADV_NOHUGEPAGE)")
        r.touch()
        maps = r.numa_maps()
        return {"move_pages": dict(r.node_counts()), "numa_maps": maps["nodes"], "line": maps["line"]}


def bind_weighted_and_measure(weights: dict[int, int], set_weights: bool, strict) -> dict:
    import numabind

    plan = numabind.Plan(mem_policy="weighted-interleave", mem_nodes={0, 1}, weights=weights)
    report = numabind.bind_current(plan, strict=strict, set_weights=set_weights)
    out = measure_small_pages(SIZE)
    b = numabind.current_binding()
    loc = numabind.locality()
    out.update(warnings=list(report.warnings), notes=list(report.notes), applied=report.applied.to_text(),
               binding_weights={str(k): v for k, v in b.weights.items()}, binding_policy=b.mem_policy,
               policies=dict(loc.pages.policies) if loc.pages is not None else None)
    return out


def share0(counts: dict) -> float:
    return probe.shares({int(k): v for k, v in counts.items() if int(k) >= 0}).get(0, 0.0)


def a_kernel_without_weighted_interleave_degrades_to_interleave():
    assert not os.path.isdir(WEIGHTS_DIR), f"{os.uname().release} has {WEIGHTS_DIR}"
    with pytest.raises(probe.ChildFailed, match=r"BindError: .*no MPOL_WEIGHTED_INTERLEAVE"):
        probe.in_child(bind_weighted_and_measure, {0: 3, 1: 1}, False, True)
    m = probe.in_child(bind_weighted_and_measure, {0: 3, 1: 1}, False, False)
    share = share0(m["numa_maps"])
    print(f"Linux {os.uname().release}: weighted plan -> {m['applied']}; numa_maps N0={share:.2f}%; "
          f"warnings: {m['warnings']}")
    assert any("no MPOL_WEIGHTED_INTERLEAVE (Linux 6.9 and newer have it" in w for w in m["warnings"])
    assert any("memory policy degraded to interleave 0-1 (the weights 0:3,1:1 do not apply to it)" in w
               for w in m["warnings"])
    assert m["applied"].endswith("mem=interleave:0-1;migrate=0")
    assert 45.0 <= share <= 55.0
