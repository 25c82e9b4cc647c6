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
    from tests.kernel import process_node_pages

    before = process_node_pages()
    report = numabind.bind_current(plan)
    after = process_node_pages()
    conn.send({"before": before, "after": after, "moved": report.pages_migrated,
               "left": report.pages_not_migrated, "warnings": list(report.warnings),
               "describe": report.describe()})
    conn.close()
    del buf


# ----------------------------------------------------------------------------- raw mode words
_SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237}.get(platform.machine(), 238)


def mode_word() -> list:
    """(the whole get_mempolicy mode word, MPOL_F_* flags included, nodes) of the calling thread."""
    mode = ctypes.c_int()
    mask = (ctypes.c_ulong * 16)()
    rc = _libc.syscall(_SYS_GET_MEMPOLICY, ctypes.byref(mode), mask, ctypes.c_ulong(16 * 64), None, ctypes.c_ulong(0))
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"get_mempolicy: {os.strerror(err)}")
    return [mode.value, [i for i in range(16 * 64) if mask[i // 64] >> (i % 64) & 1]]


def set_mode_word(word: int, nodes: list[int]) -> int:
    """Raw set_mempolicy(word, nodes); 0 or the errno."""
    mask = (ctypes.c_ulong * 16)()
    for n in nodes:
        mask[n // 64] |= 1 << (n % 64)
    rc = _libc.syscall(_SYS_SET_MEMPOLICY, ctypes.c_int(word), mask if nodes else None,
                       ctypes.c_ulong(16 * 64 + 1 if nodes else 0))
    return 0 if rc == 0 else ctypes.get_errno()


def spawn_keeps_mode_word(conn, word: int, node: int, plan_text: str, bad_plan_text: str) -> None:
    """Fork-child target: put this thread on ``word``, spawn inside configure_subprocess (a plan that
    binds, then one that fails strict); report the word after each and what the children got."""
    import multiprocessing

    import numabind

    out: dict = {"set": set_mode_word(word, [node])}
    out["before"] = mode_word()
    ctx = multiprocessing.get_context("spawn")
    r, w = ctx.Pipe(duplex=False)
    with numabind.configure_subprocess(numabind.Plan.from_text(plan_text)):
        p = ctx.Process(target=report_state, args=(w,))
        p.start()
    out["child"] = r.recv() if r.poll(60) else None
    p.join(30)
    out["after_spawn"] = mode_word()
    try:
        with numabind.configure_subprocess(numabind.Plan.from_text(bad_plan_text), strict=True):
            ctx.Process(target=report_state, args=(w,)).start()
        out["strict_error"] = None
    except numabind.NumabindError as e:
        out["strict_error"] = f"{type(e).__name__}: {e}"
    out["after_strict"] = mode_word()
    conn.send(out)
    conn.close()


def spawn_with_unreadable_policy(conn, plan_text: str, strict: bool) -> None:
    """Fork-child target: the backend cannot read the old memory policy; spawn inside configure_subprocess."""
    import errno
    import multiprocessing

    import numabind
    from numabind.backends import get_backend

    plan = numabind.Plan.from_text(plan_text)
    set_mode_word(1, [min(plan.mem_nodes)])   # preferred: a policy to keep, other than the plan's
    out: dict = {"before": mode_word()}

    def unreadable(*_args):
        raise numabind.BindError(errno.EPERM, "get_mempolicy", "calling thread")

    be = get_backend()[0]
    be.get_mempolicy = unreadable
    be.save_mempolicy = unreadable
    ctx = multiprocessing.get_context("spawn")
    r, w = ctx.Pipe(duplex=False)
    try:
        with numabind.configure_subprocess(plan, strict=strict) as births:
            p = ctx.Process(target=report_state, args=(w,))
            p.start()
        out["child"] = r.recv() if r.poll(60) else None
        p.join(30)
        rep = births.report(p.pid, timeout=10)
        out["warnings"] = list(rep.report.warnings)
        out["error"] = None
    except numabind.NumabindError as e:
        out["error"] = f"{type(e).__name__}: {e}"
    out["after"] = mode_word()
    out["cpus_after"] = status_cpus()
    conn.send(out)
    conn.close()
