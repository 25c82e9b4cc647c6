"""Issue 3, item 2: the scenario behind ``test_vm_process.py``'s birth-time placement tests.

A launcher pinned to node 0's CPUs (default memory policy, as an unbound launcher on node 0)
starts a child under a given start method; the child touches 256 MiB. Once it is bound at birth
through ``configure_subprocess`` (plan: node 1's CPUs, memory bound to node 1), once with
CPU-only late binding (``sched_setaffinity`` from inside the child, what ``torch.numa`` does).

The late child is started first. For forkserver that means the server is already running,
unbound, when configure_subprocess is entered, which is the common case in real programs.
(Not a test module itself: the tests live in ``test_vm_process.py``.)
"""

from __future__ import annotations

import multiprocessing
import os

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
