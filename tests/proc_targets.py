"""Child-side helpers for tests/test_process.py: light imports, and kernel state read without numabind.

Affinity comes from ``/proc/.../status`` (``Cpus_allowed_list``) and the memory policy from
``get_mempolicy(2)`` called through ctypes, so the tests check numabind with code that does not
share its implementation.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading

_SYS_GET_MEMPOLICY = {"x86_64": 239, "aarch64": 236}.get(platform.machine(), 239)
_MODES = {0: "default", 1: "preferred", 2: "bind", 3: "interleave", 4: "local", 5: "preferred-many"}
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def parse_list(text: str) -> list[int]:
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def mempolicy() -> tuple[str, list[int]]:
    """(policy, nodes) of the calling thread, straight from get_mempolicy(2)."""
    mode = ctypes.c_int()
    words = 16
    mask = (ctypes.c_ulong * words)()
    rc = _libc.syscall(_SYS_GET_MEMPOLICY, ctypes.byref(mode), mask, ctypes.c_ulong(words * 64), None,
                       ctypes.c_ulong(0))
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"get_mempolicy: {os.strerror(err)}")
    nodes = [i for i in range(words * 64) if mask[i // 64] >> (i % 64) & 1]
    name = _MODES.get(mode.value & 0xFF, f"mode{mode.value}")
    return name, nodes if name not in ("default", "local") else []


def status_cpus(pid: int | str = "self", tid: int | None = None) -> list[int]:
    """Cpus_allowed_list of a process (or one of its threads) from procfs."""
    path = f"/proc/{pid}/status" if tid is None else f"/proc/{pid}/task/{tid}/status"
    with open(path) as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                return parse_list(line.split(":", 1)[1])
    raise LookupError(f"no Cpus_allowed_list in {path}")


def numa_maps_policy(pid: int | str = "self") -> str:
    """The policy field of the first numa_maps line (the task policy for mappings without their own)."""
    with open(f"/proc/{pid}/numa_maps") as f:
        return f.readline().split()[1]


def state(where: str) -> dict:
    policy, nodes = mempolicy()
    return {"where": where, "pid": os.getpid(), "cpus": status_cpus(), "sched": sorted(os.sched_getaffinity(0)),
            "policy": policy, "nodes": nodes}


# ----------------------------------------------------------------------------- targets
def report_state(conn) -> None:
    """Process target: send this process's binding back."""
    conn.send(state("target"))
    conn.close()


def task_state(_=None) -> dict:
    """Pool task: this worker's binding, and its slot when pool_plans set it up."""
    from numabind.process import worker_slot

    out = state("task")
    slot = worker_slot()
    out["slot"] = None if slot is None else slot[0]
    return out


def threads_then_bind(conn, plan, n_before: int, n_after: int) -> None:
    """Start n_before idle threads, bind the process, then start n_after threads; report every thread."""
    import numabind

    stop = threading.Event()
    before = [threading.Thread(target=stop.wait, daemon=True) for _ in range(n_before)]
    for t in before:
        t.start()
    report = numabind.bind_current(plan)
    existing = {tid: status_cpus("self", int(tid)) for tid in os.listdir("/proc/self/task")}
    later: list[dict] = []
    lock = threading.Lock()

    def record():
        s = state("new thread")
        with lock:
            later.append(s)

    after = [threading.Thread(target=record) for _ in range(n_after)]
    for t in after:
        t.start()
    for t in after:
        t.join()
    stop.set()
    conn.send({"existing": existing, "later": later, "bound": sum(r.status == "bound" for r in report.threads),
               "notes": list(report.notes), "warnings": list(report.warnings)})
    conn.close()


def touch_then_migrate(conn, plan, size: int) -> None:
    """Touch ``size`` bytes, then bind with the plan (migrate=True); report pages per node around it."""
    import numabind

    buf = bytearray(size)
    for k in range(0, size, 4096):
        buf[k] = 1
    from tests.vm.probe import process_node_pages

    before = process_node_pages()
    report = numabind.bind_current(plan)
    after = process_node_pages()
    conn.send({"before": before, "after": after, "moved": report.pages_migrated,
               "left": report.pages_not_migrated, "warnings": list(report.warnings),
               "describe": report.describe()})
    conn.close()
    del buf
