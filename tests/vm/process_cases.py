"""Issue 3, item 2: birth-time binding through ``numabind.configure_subprocess``.

WAITING FOR PROCESS INTEGRATION: this module is not collected (no ``test_`` prefix) until
``numabind.configure_subprocess`` lands; then rename it to ``test_vm_process.py``.

A launcher pinned to node 0's CPUs (default memory policy, as an unbound launcher on node 0)
starts a child under spawn, forkserver and fork. The child touches 256 MiB. Bound at birth
through configure_subprocess (plan: node 1's CPUs, memory bound to node 1), >= 99.5 % of those
pages must be on node 1. The same child under CPU-only late binding (``sched_setaffinity`` from
inside the child, what ``torch.numa`` does) is measured too, and the difference over the
child's whole address space is printed.

The late child of each method is started first. For forkserver, that means the server is
already running, unbound, when configure_subprocess is entered, which is the common case
in real programs.
"""

from __future__ import annotations

import multiprocessing
import os

import pytest

from . import probe

MIB = probe.MIB
SIZE = 256 * MIB


def _child_touch(size: int, conn) -> None:
    """In the started child: where do ``size`` freshly touched bytes go, and the whole process?"""
    m = probe.measure(size)
    m["cpus"] = sorted(os.sched_getaffinity(0))
    m["process"] = probe.process_node_pages()
    m["policy_line"] = m.pop("line")
    conn.send(m)
    conn.close()


def _late_cpu_only(size: int, cpus: list[int], conn) -> None:
    os.sched_setaffinity(0, cpus)
    _child_touch(size, conn)


def _start(ctx, target, args) -> dict:
    r, w = ctx.Pipe(duplex=False)
    p = ctx.Process(target=target, args=(*args, w))
    p.start()
    w.close()
    if not r.poll(240):
        p.kill()
        raise AssertionError(f"{ctx.get_start_method()} child gave no result (exit code {p.exitcode})")
    result = r.recv()
    p.join(60)
    assert p.exitcode == 0, f"{ctx.get_start_method()} child exited with {p.exitcode}"
    return result


def _scenario(method: str, node0_cpus: list[int], node1_cpus: list[int]) -> dict:
    """In a forked child of the test process: a launcher on node 0 starting both kinds of child."""
    import numabind

    os.sched_setaffinity(0, node0_cpus)
    ctx = multiprocessing.get_context(method)
    late = _start(ctx, _late_cpu_only, (SIZE, node1_cpus))
    plan = numabind.Plan(cpus=frozenset(node1_cpus), mem_policy="bind", mem_nodes=frozenset({1}))
    with numabind.configure_subprocess(plan):
        birth = _start(ctx, _child_touch, (SIZE,))
    return {"late": late, "birth": birth, "launcher_cpus": sorted(os.sched_getaffinity(0)),
            "launcher_policy": numabind.current_binding().mem_policy}


@pytest.mark.numa_vm(topology="2n")
@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_birth_time_binding_beats_late_cpu_only_binding(method, vm_topology):
    node0, node1 = sorted(vm_topology.node_cpus(0)), sorted(vm_topology.node_cpus(1))
    r = probe.in_child(_scenario, method, node0, node1, timeout=480)
    birth, late = r["birth"], r["late"]
    # the launcher itself is left as it was
    assert r["launcher_cpus"] == node0 and r["launcher_policy"] in ("default", None)
    # born bound: CPUs and >= 99.5 % of the 256 MiB on node 1
    assert birth["cpus"] == node1 and late["cpus"] == node1
    region_birth = probe.shares(birth["move_pages"]).get(1, 0.0)
    region_late = probe.shares(late["move_pages"]).get(1, 0.0)
    whole_birth = probe.shares(birth["process"]).get(1, 0.0)
    whole_late = probe.shares(late["process"]).get(1, 0.0)
    print(f"item 2, {method}: 256 MiB touched by the child on N1: birth-time {region_birth:.2f}% "
          f"(numa_maps {probe.shares(birth['numa_maps']).get(1, 0.0):.2f}%, {birth['policy']}) vs late CPU-only "
          f"{region_late:.2f}% ({late['policy']}); whole child on N1: birth-time {whole_birth:.2f}% vs late "
          f"{whole_late:.2f}% (difference {whole_birth - whole_late:+.2f} points)")
    assert region_birth >= 99.5 and probe.shares(birth["numa_maps"]).get(1, 0.0) >= 99.5
    assert birth["policy"] == "bind:1"
