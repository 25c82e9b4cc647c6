"""The kernel calls ``numabind check`` tries, in a short-lived child, and the cause of each refusal.

:func:`run_child` starts ``python -m numabind.preflight.probes``, hands it the plans (pickled, on its stdin) and reads
one JSON object from its stdout; the caller's own threads, memory policy and pages are never touched. The child
(:func:`child_main`) tries every call the plans need for real, through the chosen backend (the compiled core):
per-thread ``sched_setaffinity``, ``set_mempolicy`` in each mode, ``mbind``, ``migrate_pages`` and ``move_pages``
(query). With placement it then binds each plan (:func:`numabind.bind_current`), touches memory, counts where the
pages are (``move_pages``) and has a thread started after the bind do the same.

:func:`classify` names the cause of a refused call from the child's ``/proc/self/status`` (``CapEff``, ``Seccomp``,
``Mems_allowed``) and the call's errno: a missing capability, a seccomp profile, the cpuset, a kernel too old for a
mode, or an emulator that has none of the calls. The fix a refusal ends with is :func:`numabind.errors.refusal_fix`'s,
the words ``numabind run`` says it in.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._fs import ascii_int
from ..cpulist import format_cpulist, parse_cpulist
from ..errors import MEMORY_CALLS, NumabindError, refusal_fix

if TYPE_CHECKING:  # pragma: no cover
    from ..backends import NativeBackend
    from ..plan import Plan

__all__ = ["CAP_SYS_NICE", "CAUSES", "MODE_KERNELS", "Refusal", "child_env", "child_main", "classify", "last_line", "run_module",
           "run_child", "status_facts"]

#: The capability bit of CAP_SYS_NICE in ``CapEff`` (<linux/capability.h>).
CAP_SYS_NICE = 23
#: The causes a refusal is put down to, in the words the report uses.
CAUSES = ("capability", "seccomp", "cpuset", "kernel", "emulator", "backend", "unknown")
#: The memory-policy modes newer than the rest, and the Linux release that brought each.
MODE_KERNELS = {"preferred-many": "5.15", "weighted-interleave": "6.9"}
#: The calls the child makes, by the name a refusal gives them.
_AFFINITY = "sched_setaffinity"


@dataclass(frozen=True)
class Refusal:
    """Why a call was refused: ``cause`` (one of :data:`CAUSES`), ``fix`` in a few words for the one-line verdict,
    and ``detail``: the full cause and fix, as ``numabind run``'s error ends."""

    cause: str
    fix: str
    detail: str


# ----------------------------------------------------------------------------- the parent's side
def run_child(plans: Sequence[Plan], *, placement: bool, mib: int, timeout: float,
              backend: str | None = None) -> dict[str, Any]:
    """Run the trials (and, with ``placement``, the placement proof) in a child; its JSON answer, or
    ``{"error": ...}`` when it died, hung past ``timeout`` seconds (then killed) or answered nothing readable.
    Never raises for the child's sake."""
    return run_module("numabind.preflight.probes",
                      {"plans": list(plans), "placement": placement, "mib": mib, "backend": backend},
                      timeout=timeout, who="the check's child",
                      hint="raise the timeout, or --no-placement / a smaller --mib on a slow machine")


def run_module(module: str, request: Mapping[str, Any], *, timeout: float, who: str, hint: str,
               show_stderr: bool = False) -> dict[str, Any]:
    """``python -m module`` with ``request`` pickled on its stdin: its JSON answer (its last line on stdout), or
    ``{"error": ...}`` naming ``who`` when it could not start, ran past ``timeout`` seconds (then killed, the error
    ending with ``hint``), died or answered nothing readable. ``show_stderr``: the child's stderr (a progress line)
    goes to this process's."""
    try:
        done = subprocess.run([sys.executable, "-m", module], input=pickle.dumps(dict(request)),
                              stdout=subprocess.PIPE, stderr=None if show_stderr else subprocess.PIPE,
                              timeout=timeout, check=False, env=child_env())
    except subprocess.TimeoutExpired:
        return {"error": f"{who} did not finish within {timeout:g} s and was killed ({hint})"}
    except OSError as e:
        return {"error": f"{who} could not start ({sys.executable}): {e}"}
    return _answer(done.returncode, done.stdout, done.stderr or b"", who)


def child_env() -> dict[str, str]:
    """This environment, with the directory this numabind was imported from first on ``PYTHONPATH``: the child
    runs the same numabind as the caller."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=here + (os.pathsep + path if path else ""))


def last_line(stderr: bytes) -> str:
    """The last line a child wrote on stderr (at most 300 characters)."""
    return (stderr.decode("utf-8", "replace").strip().splitlines() or [""])[-1][:300]


def _answer(returncode: int, stdout: bytes, stderr: bytes, who: str = "the check's child") -> dict[str, Any]:
    """The child's JSON object, or an ``error`` that says how ``who`` ended and the last line it wrote on stderr."""
    last = last_line(stderr)
    if returncode < 0:
        try:
            how = signal.Signals(-returncode).name
        except ValueError:
            how = f"signal {-returncode}"
        return {"error": f"{who} was killed by {how}" + (f": {last}" if last else "")}
    try:
        out = json.loads(stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError, RecursionError):
        out = None
    if returncode != 0 or not isinstance(out, dict):
        return {"error": f"{who} exited with status {returncode} without an answer"
                         + (f": {last}" if last else "")}
    return out


def status_facts(text: str) -> dict[str, Any]:
    """What a ``/proc/<pid>/status`` says about the limits of the calls: ``cap_sys_nice`` (None: no ``CapEff``
    line), ``seccomp`` (0 none, 1 strict, 2 a filter; None: no line), ``mems_allowed`` and ``cpus_allowed`` (id
    lists; None when absent)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    cap = _hex(fields.get("CapEff"))
    seccomp = ascii_int(fields.get("Seccomp") or "", max_digits=3)
    out: dict[str, Any] = {
        "cap_sys_nice": None if cap is None else bool(cap >> CAP_SYS_NICE & 1),
        "seccomp": seccomp,
    }
    for name, key in (("Mems_allowed_list", "mems_allowed"), ("Cpus_allowed_list", "cpus_allowed")):
        out[key] = _id_list(fields.get(name), name)
    return out


def _hex(text: str | None) -> int | None:
    """A status line's hexadecimal mask (``CapEff``), None when absent or not 1 to 16 hex digits."""
    if text is None or not 0 < len(text) <= 16 or any(c not in "0123456789abcdefABCDEF" for c in text):
        return None
    return int(text, 16)


def _id_list(text: str | None, name: str) -> list[int] | None:
    """A status line's id list (``Mems_allowed_list``), None when absent or not a list."""
    if text is None:
        return None
    try:
        return sorted(parse_cpulist(text, what=name))
    except (NumabindError, ValueError):
        return None   # a status that is not the kernel's: the limit is unknown


def classify(call: str, err: int, facts: Mapping[str, Any], *, policy: str | None = None,
             nodes: Sequence[int] = (), cpus: Sequence[int] = (), every_call_enosys: bool = False) -> Refusal:
    """The cause of ``call`` (with memory ``policy`` on ``nodes``, or ``cpus``) refused with ``err``, in a process
    whose status says ``facts`` (:func:`status_facts`); ``every_call_enosys``: every call the child tried was
    refused with ENOSYS (an emulator such as qemu-user, which implements none of them)."""
    name = errno.errorcode.get(err, f"errno {err}")
    full = refusal_fix(err, call, format_cpulist(cpus) if cpus else None)
    if err == errno.ENOSYS and every_call_enosys:
        return Refusal("emulator", "run on a Linux kernel (a full-system VM, not qemu-user)",
                       f"every NUMA call failed with ENOSYS: an emulator (such as qemu-user) or a kernel built "
                       f"without NUMA (CONFIG_NUMA) implements none of them; run it on a Linux kernel with NUMA")
    if err in (errno.ENOSYS, errno.EINVAL) and policy in MODE_KERNELS and call in ("set_mempolicy", "mbind"):
        release = MODE_KERNELS[policy]
        return Refusal("kernel", f"Linux {release}+ for {policy}",
                       f"{call} refused the {policy} mode ({name}): the kernel is older than Linux {release}, "
                       f"which brought it; use another memory policy (--membind, --interleave) or a newer kernel")
    if err == errno.EPERM:
        return _eperm(call, facts, full)
    if err == errno.EINVAL:
        return _einval(call, facts, nodes, cpus, full)
    if err == errno.ENOSYS:
        return Refusal("kernel", f"a kernel with {call}",
                       f"{call} is not implemented by this kernel (ENOSYS): a kernel built without NUMA, or a "
                       f"sandbox (gVisor) that lacks it")
    return Refusal("unknown", f"see {call}'s {name}", full or f"{call} failed with {name}")


def _eperm(call: str, facts: Mapping[str, Any], full: str) -> Refusal:
    """EPERM: Docker's default seccomp profile (and containerd's, CRI-O's RuntimeDefault) refuses the memory
    calls to a process without CAP_SYS_NICE; a profile may refuse them whatever the capabilities."""
    filtered = facts.get("seccomp") == 2
    nice = facts.get("cap_sys_nice")
    if nice is False:
        where = "under a seccomp profile that allows it only with CAP_SYS_NICE" if filtered else "without it"
        return Refusal("capability", "add SYS_NICE", f"no CAP_SYS_NICE ({where}): {full}")
    if filtered:
        return Refusal("seccomp", f"a seccomp profile that allows {call}",
                       f"the seccomp profile forbids {call} (Seccomp: 2 in /proc/self/status; CAP_SYS_NICE is "
                       f"held): {full}")
    return Refusal("unknown", "see the refusal", full or f"{call} failed with EPERM")


def _einval(call: str, facts: Mapping[str, Any], nodes: Sequence[int], cpus: Sequence[int], full: str) -> Refusal:
    if call == _AFFINITY:
        allowed = facts.get("cpus_allowed")
        outside = sorted(set(cpus) - set(allowed)) if allowed is not None else []
        return Refusal("cpuset", "pick CPUs inside the cpuset or widen it",
                       f"CPUs {format_cpulist(outside or cpus)} are outside this process's cpuset: {full}")
    mems = facts.get("mems_allowed")
    if mems is not None and set(nodes) - set(mems):
        return Refusal("cpuset", "pick nodes inside cpuset.mems or widen it",
                       f"nodes {format_cpulist(set(nodes) - set(mems))} are outside this process's memory nodes "
                       f"(Mems_allowed {format_cpulist(mems) or 'none'}): pick nodes inside them, or widen the "
                       f"cpuset (docker --cpuset-mems; Kubernetes: the Topology Manager's NUMA alignment)")
    return Refusal("unknown", f"see {call}'s EINVAL", full or f"{call} failed with EINVAL")


# ----------------------------------------------------------------------------- the child's side
def _trial(call: str, what: str, fn: Any, **context: Any) -> dict[str, Any]:
    """Make one call (``fn()``); its outcome as the report keeps it."""
    out: dict[str, Any] = {"call": call, "what": what, "ok": True, "errno": None, "error": None, **context}
    try:
        fn()
    except NumabindError as e:   # BindError (the kernel refused) or PlanError (the machine lacks a node)
        out.update(ok=False, errno=getattr(e, "errno", None), error=str(e))
    return out


def _affinity_trial(be: NativeBackend, cpus: frozenset[int]) -> None:
    """Set the affinity of a second thread of this process (not the caller) to ``cpus``, and read it back."""
    started = threading.Event()
    done = threading.Event()
    tid: list[int] = []

    def park() -> None:
        tid.append(threading.get_native_id())
        started.set()
        done.wait(10)

    thread = threading.Thread(target=park, name="numabind-check-affinity")
    thread.start()
    try:
        started.wait(10)
        be.set_affinity(tid[0], cpus)
        got = be.get_affinity(tid[0])
        if got != cpus:
            raise NumabindError(f"sched_setaffinity left thread {tid[0]} on CPUs {format_cpulist(got)}, not "
                                f"{format_cpulist(cpus)}")
    finally:
        done.set()
        thread.join()


def _policy_trial(be: NativeBackend, policy: str, nodes: frozenset[int]) -> None:
    """set_mempolicy(policy, nodes), read back, then the default policy again."""
    be.set_mempolicy(policy, nodes)
    try:
        got = be.get_mempolicy()
        if got[0] != policy:
            raise NumabindError(f"set_mempolicy({policy}) read back as {got[0]}")
    finally:
        be.set_mempolicy("default", frozenset())


def _range_trials(be: NativeBackend, policy: str, nodes: frozenset[int]) -> list[dict[str, Any]]:
    """mbind on one page of its own, then move_pages (query) on it."""
    import mmap

    from ..backends.range import PAGE_SIZE, buffer_address, mbind_range, page_status, release

    area = mmap.mmap(-1, PAGE_SIZE)
    address, _, keep = buffer_address(area)
    try:
        what = f"{policy} {format_cpulist(nodes)}".strip()
        out = [_trial("mbind", f"{what} on one page", lambda: mbind_range(be, address, PAGE_SIZE, policy, nodes, 0),
                      policy=policy, nodes=sorted(nodes))]
        area[0] = 1
        out.append(_trial("move_pages", "where one page is (query)", lambda: list(page_status(be, address, 1))))
        return out
    finally:
        release(keep)
        area.close()


def _memory_trials(be: NativeBackend, plans: Sequence[Plan]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, frozenset[int]]] = set()
    for plan in plans:
        if plan.mem_policy is None:
            continue
        nodes = plan.mem_nodes or frozenset()
        key = (plan.mem_policy, nodes)
        if key in seen:
            continue
        seen.add(key)
        what = f"{plan.mem_policy} {format_cpulist(nodes)}".strip()
        out.append(_trial("set_mempolicy", what, lambda: _policy_trial(be, key[0], key[1]),
                          policy=plan.mem_policy, nodes=sorted(nodes)))
        out += _range_trials(be, plan.mem_policy, nodes)
        if nodes:
            out.append(_trial("migrate_pages", f"this process's pages onto {format_cpulist(nodes)}",
                              lambda: be.migrate_pages(os.getpid(), key[1], key[1]), nodes=sorted(nodes)))
    return out


def _trials(be: NativeBackend, plans: Sequence[Plan]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for cpus in dict.fromkeys(p.cpus for p in plans if p.cpus is not None):
        out.append(_trial(_AFFINITY, f"a second thread to CPUs {format_cpulist(cpus)}",
                          lambda: _affinity_trial(be, cpus), cpus=sorted(cpus)))
    return out + _memory_trials(be, plans)


def _touch(mib: int) -> dict[str, Any]:
    """Map ``mib`` MiB, write every page, and count where the pages are (``move_pages``)."""
    import mmap

    from ..memory import page_placement
    from ..backends.range import PAGE_SIZE

    size = max(1, mib) << 20
    area = mmap.mmap(-1, size)
    try:
        for offset in range(0, size, PAGE_SIZE):
            area[offset] = 1
        placed = page_placement(area)
        return {"pages": placed.pages, "by_node": {str(n): c for n, c in placed.by_node.items()},
                "not_faulted": placed.not_faulted}
    finally:
        area.close()


def _late_thread(mib: int) -> dict[str, Any]:
    """What a thread started after the bind holds: its CPUs, and where the memory it touches goes."""
    out: dict[str, Any] = {}

    def work() -> None:
        try:
            out["cpus"] = sorted(os.sched_getaffinity(0))
            out.update(_touch(mib))
        except (OSError, NumabindError) as e:
            out["error"] = str(e)

    thread = threading.Thread(target=work, name="numabind-check-late")
    thread.start()
    thread.join()
    return out


def _place(plan: Plan, mib: int) -> dict[str, Any]:
    from ..bind import bind_current

    out: dict[str, Any] = {"plan": plan.describe()}
    try:
        report = bind_current(plan, strict=False)
    except NumabindError as e:
        return dict(out, error=str(e))
    out["warnings"] = list(report.warnings)
    try:
        out.update(_touch(mib))
    except NumabindError as e:
        return dict(out, error=str(e))
    out["late_thread"] = _late_thread(max(1, mib // 4))
    return out


def _own_status() -> dict[str, Any]:
    try:
        with open("/proc/self/status") as f:
            return status_facts(f.read())
    except (OSError, ValueError, NumabindError):
        return {"cap_sys_nice": None, "seccomp": None, "mems_allowed": None, "cpus_allowed": None}


def _answer_for(request: Mapping[str, Any]) -> dict[str, Any]:
    from ..backends import NativeBackend, get_backend

    plans: list[Plan] = request["plans"]
    answer: dict[str, Any] = {"status": _own_status(), "trials": [], "placement": []}
    try:
        be, why = get_backend(request.get("backend"))
    except NumabindError as e:
        return dict(answer, backend=None, backend_error=str(e))
    answer.update(backend=be.name, backend_reason=why)
    if not isinstance(be, NativeBackend):
        return dict(answer, backend_error=(f"the {be.name} backend makes no memory-policy call in this process "
                                           f"(the backends section of numabind's overview says why it was "
                                           f"chosen); install numabind's native core (gcc and python3-dev, then "
                                           f"reinstall) or set NUMABIND_BACKEND to libnuma or syscall"))
    answer["trials"] = _trials(be, plans)
    if request.get("placement") and all(t["ok"] for t in answer["trials"]):
        answer["placement"] = [_place(p, int(request["mib"])) for p in plans if p.mem_policy is not None]
    return answer


def child_main() -> int:
    """The child: the request (pickled by :func:`run_child`) on stdin, one JSON object on stdout."""
    request = pickle.loads(sys.stdin.buffer.read())
    print(json.dumps(_answer_for(request)))
    return 0


if __name__ == "__main__":  # pragma: no cover - run by run_child in a child
    sys.exit(child_main())
