"""Pools whose workers each get their own plan: :func:`pool_plans`, round robin over slots that a
replacement worker takes over from the one it replaces, and :func:`worker_slot`."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import _proc, live, records
from .._base import Strictness, getLogger, keep_binding_env
from ..bind import bind_current
from ..errors import NumabindError, PlanError
from ..plan import Plan
from . import reports

if TYPE_CHECKING:  # pragma: no cover
    from ..types import BackendName

__all__ = ["pool_plans", "worker_slot"]

log = getLogger(__name__)

_TABLE_MAX = 1 << 20     # bytes of a slot table: ~25 per slot


class _SlotTable:
    """A file of pool slots claimed by worker pids (fcntl-locked); slot k gets plans[k % len(plans)]. A worker
    claims the lowest slot whose owner is gone: a replacement gets the plan of the worker it replaces."""

    def __init__(self, plans: Sequence[Plan], slots: int, strict: Strictness | None,
                 backend: BackendName | None) -> None:
        fd, self.path = tempfile.mkstemp(prefix="numabind-pool-", suffix=".json")
        st = os.fstat(fd)
        self.ident = (st.st_dev, st.st_ino)   # workers open exactly this file, not one planted at its name later
        os.write(fd, json.dumps([[0, 0]] * slots).encode())
        os.close(fd)
        self.texts = [p.to_text() for p in plans]
        self.slots = slots
        self.strict, self.backend = strict, backend
        self._owner = os.getpid()
        weakref.finalize(self, _remove_file, self.path, self._owner)

    #: How long a replacement waits for the worker it replaces to exit (ProcessPoolExecutor starts it as soon as
    #: the old one reported its last result) before it takes an extra slot.
    CLAIM_WAIT_S = 2.0

    def claim(self) -> int:
        deadline = time.monotonic() + self.CLAIM_WAIT_S
        while True:
            slot = self._claim_once(extra=time.monotonic() >= deadline)
            if slot is not None:
                return slot
            time.sleep(0.01)

    def _claim_once(self, extra: bool) -> int | None:
        import fcntl

        me = (os.getpid(), _proc.start_time(os.getpid()))
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != self.ident:
                raise NumabindError(f"pool slot table {self.path} was replaced (removed when the pool's "
                                    f"pool_plans() result was collected?); refusing another file at its name")
            fcntl.lockf(fd, fcntl.LOCK_EX)
            data = os.pread(fd, _TABLE_MAX + 1, 0)
            try:
                if len(data) > _TABLE_MAX:
                    raise ValueError(f"it is larger than {_TABLE_MAX} bytes")
                table = records.load_json(data or b"[]", depth=2)    # a list of [pid, start time]
            except ValueError as e:
                raise NumabindError(f"pool slot table {self.path} is malformed: {e}") from None
            if (not isinstance(table, list) or len(table) < self.slots
                    or not all(isinstance(e, list) and len(e) == 2 for e in table)):
                raise NumabindError(f"pool slot table {self.path} is malformed")
            free = [k for k, (pid, start) in enumerate(table) if not _alive(pid, start)]
            if free:
                slot = free[0]
                table[slot] = list(me)
            elif not extra:
                return None
            else:  # more live workers than slots: keep going round robin, and say why
                slot = len(table)
                table.append(list(me))
                log.warning("all %d pool slots are held by live workers; worker %d takes extra slot %d "
                            "(give pool_plans processes= the pool's size)", self.slots, me[0], slot)
            data = json.dumps(table).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)
        return slot


def _remove_file(path: str, owner: int) -> None:
    if os.getpid() == owner:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _alive(pid: object, start: object) -> bool:
    return isinstance(pid, int) and pid > 0 and start != 0 and _proc.start_time(pid) == start


_slot: tuple[int, Plan] | None = None


def worker_slot() -> tuple[int, Plan] | None:
    """In a pool worker set up by :func:`pool_plans`: ``(slot, plan)``; else None."""
    return _slot


def _claim_and_bind(table: _SlotTable) -> None:
    global _slot
    slot = table.claim()
    plan = Plan.from_text(table.texts[slot % len(table.texts)])
    report = bind_current(plan, strict=table.strict, backend=table.backend)
    _slot = (slot, plan)
    reports._set_birth(reports.ChildReport(os.getpid(), "pool", report))   # and its runtime record
    log.info("pool worker %d took slot %d: %s", os.getpid(), slot, plan.describe())


def pool_plans(plans: Sequence[Plan], processes: int | None = None, *, strict: Strictness | None = None,
               backend: BackendName | None = None) -> dict[str, Any]:
    """``initializer``/``initargs`` giving each pool worker its own plan, round robin.

    ``Pool(n, **pool_plans(plans, n))`` or ``ProcessPoolExecutor(n, **pool_plans(plans, n))``: the workers take
    slots 0..n-1 (``processes`` defaults to ``len(plans)``), slot k binds to ``plans[k % len(plans)]``, and a
    worker that replaces an exited one takes its slot. :func:`worker_slot` says which slot and plan it got.
    """
    plans = list(plans)
    if not plans or not all(isinstance(p, Plan) for p in plans):
        raise PlanError(f"pool_plans needs a non-empty list of numabind.Plan, got {plans!r}")
    slots = len(plans) if processes is None else processes
    if not isinstance(slots, int) or slots < 1:
        raise PlanError(f"processes must be a positive int, got {processes!r}")
    for i, plan in enumerate(plans):     # in the parent: a Pool would restart a worker whose initializer raised
        live.check_present(plan, f"pool_plans (plan {i})")
    keep_binding_env(dict(os.environ))   # said here (INFO, or WARNING for the user's 1); each worker sets it
    return {"initializer": _claim_and_bind, "initargs": (_SlotTable(plans, slots, strict, backend),)}
