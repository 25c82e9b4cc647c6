"""Issue 12: weighted interleave across two nodes, measured, on a kernel that has it (Debian's 6.12)
and on one that has not (bookworm's 6.1: the plan degrades to plain interleave).

The 6.12 guest has topology ``hmat``: two nodes like ``2n`` whose ACPI HMAT says node 0 reads at
30000 MB/s and node 1 at 10000 MB/s, so ``--weights bandwidth`` has real firmware figures to read.

Each binding happens in a forked child (``probe.in_child``) or a fresh process. The measured mapping
is a ``probe.Region`` (a VMA of its own) with transparent huge pages switched off for it
(``MADV_NOHUGEPAGE``), so its pages are interleaved one 4 KiB page at a time and counted both by
``move_pages(2)`` and on its own ``numa_maps`` line. The guest's weights are system-wide: the tests
write them (root in the guest) and put them back.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from . import harness, probe
from .cases import weighted
from .cases.weighted import SIZE, bind_weighted_and_measure, measure_small_pages, share0, system_weights, write_weights


# ----------------------------------------------------------------------------- Linux 6.12
@pytest.mark.numa_vm(topology="hmat", kernel="6.12")
def test_weights_3_to_1_put_three_quarters_of_the_pages_on_node_0():
    before = system_weights()
    try:
        m = probe.in_child(bind_weighted_and_measure, {0: 3, 1: 1}, True, True)
        after_bind = system_weights()
    finally:
        write_weights(before)
    mp, maps = share0(m["move_pages"]), share0(m["numa_maps"])
    print(f"weights 3:1 over nodes 0-1, 64 MiB without THP: move_pages {probe.fmt_shares(m['move_pages'])}; "
          f"numa_maps N0={maps:.2f}% ({m['line'][:80]}...)")
    assert after_bind == {0: 3, 1: 1}                 # set_weights wrote them (system-wide)
    assert m["warnings"] == [], m["warnings"]
    assert any("set the system-wide interleave weights 0:3" in n for n in m["notes"]), m["notes"]
    assert m["applied"].endswith("mem=weighted-interleave:0-1;migrate=0;weights=0:3,1:1")
    assert m["binding_policy"] == "weighted-interleave" and m["binding_weights"] == {"0": 3, "1": 1}
    assert " weighted interleave:0-1 " in f" {m['line']} "
    assert any(p.startswith("weighted interleave:0-1") for p in m["policies"]), m["policies"]
    assert sum(m["numa_maps"].values()) == SIZE // probe.PAGE
    assert 70.0 <= mp <= 80.0 and 70.0 <= maps <= 80.0


@pytest.mark.numa_vm(topology="hmat", kernel="6.12")
def test_weights_that_differ_from_the_system_warn_and_strict_refuses():
    before = system_weights()
    write_weights({0: 1, 1: 1})
    try:
        with pytest.raises(probe.ChildFailed, match=r"PlanError: interleave weights 0:3 asked for"):
            probe.in_child(bind_weighted_and_measure, {0: 3, 1: 1}, False, True)
        m = probe.in_child(bind_weighted_and_measure, {0: 3, 1: 1}, False, False)
        assert system_weights() == {0: 1, 1: 1}             # never written without set_weights
    finally:
        write_weights(before)
    share = share0(m["numa_maps"])
    print(f"weights 3:1 asked, system 1:1, not set: numa_maps N0={share:.2f}%")
    assert any("interleave weights 0:3 asked for" in w and "--set-weights" in w for w in m["warnings"])
    assert 45.0 <= share <= 55.0                      # the system's 1:1 applies, as the warning says


@pytest.mark.numa_vm(topology="hmat", kernel="6.12")
def test_numabind_run_weights_through_the_cli(tmp_path):
    """``numabind run -w 0,1 --weights 0:3,1:1 --set-weights`` (the fast path) on a fresh process."""
    before = system_weights()
    code = ("import json, sys; sys.path.insert(0, '.'); from tests.vm.cases import weighted as t; "
            "print('RESULT ' + json.dumps(t.measure_small_pages(64 << 20)))")
    try:
        cp = subprocess.run([sys.executable, "-m", "numabind", "run", "-w", "0,1", "--weights", "0:3,1:1",
                             "--set-weights", "--", sys.executable, "-c", code],
                            capture_output=True, text=True, timeout=240, cwd=str(harness.REPO_ROOT))
    finally:
        write_weights(before)
    assert cp.returncode == 0, cp.stderr
    m = json.loads(next(x for x in cp.stdout.splitlines() if x.startswith("RESULT "))[7:])
    share = share0(m["numa_maps"])
    print(f"numabind run -w 0,1 --weights 0:3,1:1 --set-weights: numa_maps N0={share:.2f}% "
          f"(move_pages {probe.fmt_shares(m['move_pages'])})")
    assert 70.0 <= share <= 80.0


@pytest.mark.numa_vm(topology="hmat", kernel="6.12")
def test_weights_from_the_firmware_bandwidth_figures():
    """``numabind run -w 0,1 --weights bandwidth --set-weights``: HMAT's 30000 and 10000 MB/s give 3:1."""
    import numabind

    topo = numabind.discover()
    assert {n: topo.nodes[n].access.read_bandwidth for n in (0, 1)} == {0: 30000, 1: 10000}
    assert numabind.bandwidth_weights({0, 1}, topo) == {0: 3, 1: 1}
    before = system_weights()
    code = ("import json, sys; sys.path.insert(0, '.'); from tests.vm.cases import weighted as t; "
            "print('RESULT ' + json.dumps(t.measure_small_pages(64 << 20)))")
    try:
        cp = subprocess.run([sys.executable, "-m", "numabind", "-v", "run", "-w", "0,1", "--weights", "bandwidth",
                             "--set-weights", "--", sys.executable, "-c", code],
                            capture_output=True, text=True, timeout=240, cwd=str(harness.REPO_ROOT))
        written = system_weights()
    finally:
        write_weights(before)
    assert cp.returncode == 0, cp.stderr
    assert written == {0: 3, 1: 1}
    m = json.loads(next(x for x in cp.stdout.splitlines() if x.startswith("RESULT "))[7:])
    share = share0(m["numa_maps"])
    print(f"HMAT 30000/10000 MB/s -> weights {written}; numabind run --weights bandwidth: numa_maps N0={share:.2f}%")
    assert 70.0 <= share <= 80.0


def _measure_into(q) -> None:
    q.put(measure_small_pages(SIZE))


@pytest.mark.numa_vm(topology="hmat", kernel="6.12")
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_child_born_with_weights_3_to_1(method):
    """configure_subprocess with a weighted plan: the child's own pages come out 3:1 (the system's weights,
    set here beforehand, are the plan's: no warning)."""
    import multiprocessing

    import numabind
    from numabind.process import configure_subprocess

    before = system_weights()
    write_weights({0: 3, 1: 1})
    try:
        ctx = multiprocessing.get_context(method)
        q = ctx.Queue()
        plan = numabind.Plan(mem_policy="weighted-interleave", mem_nodes={0, 1}, weights={0: 3, 1: 1})
        with configure_subprocess(plan, strict=True) as births:
            p = ctx.Process(target=_measure_into, args=(q,))
            p.start()
        m = q.get(timeout=240)
        p.join(60)
        rep = births.report(p.pid, timeout=30)
    finally:
        write_weights(before)
    share = share0(m["numa_maps"])
    print(f"{method} child born weighted 3:1: numa_maps N0={share:.2f}% (move_pages {probe.fmt_shares(m['move_pages'])})")
    assert p.exitcode == 0 and rep.error is None and list(rep.report.warnings) == []
    assert rep.report.applied.weights == {0: 3, 1: 1}
    assert 70.0 <= share <= 80.0 and 70.0 <= share0(m["move_pages"]) <= 80.0


# ----------------------------------------------------------------------------- Linux 6.1
@pytest.mark.numa_vm(topology="2n")
def test_a_kernel_without_weighted_interleave_degrades_to_interleave():
    weighted.a_kernel_without_weighted_interleave_degrades_to_interleave()
