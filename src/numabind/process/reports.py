"""Reports of children bound at birth: :class:`ChildReport`, the :class:`ChildBindings` handle, and
:func:`birth_report` (what this process itself was bound to when it was born)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import weakref
TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

from .._base import Value, getLogger
from ..bind import BindReport
from ..errors import BirthBindError, NumabindError, PlanError
from ..plan import Plan

__all__ = ["BirthBindError", "ChildBindings", "ChildReport", "birth_report"]

log = getLogger(__name__)

_REPORT_MAX = 1 << 20


class ChildReport(Value):
    """What a child said about its own binding at birth."""

    __slots__ = ("pid", "start_method", "report", "error")
    pid: int
    start_method: str                 # "spawn" | "forkserver" | "fork" ("call"/"pool": bound/pool_plans)
    report: BindReport | None         # None when binding failed (strict)
    error: str | None                 # the exception, when binding failed

    def __init__(self, pid: int, start_method: str, report: BindReport | None, error: str | None = None) -> None:
        for k, v in (("pid", pid), ("start_method", start_method), ("report", report), ("error", error)):
            object.__setattr__(self, k, v)

    @property
    def ok(self) -> bool:
        return self.error is None and self.report is not None and self.report.ok

    def to_dict(self) -> dict[str, Any]:
        rec: dict[str, Any] = {"pid": self.pid, "start_method": self.start_method, "error": self.error}
        if self.report is not None:
            rec["report"] = self.report.to_dict()
        return rec

    @classmethod
    def from_dict(cls, rec: object) -> ChildReport:
        """Parse a child's JSON record strictly (its report through :meth:`BindReport.from_dict`)."""
        if not isinstance(rec, dict):
            raise ValueError("not an object")
        pid, method, error = rec.get("pid"), rec.get("start_method"), rec.get("error")
        if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(method, str) or \
                not (error is None or isinstance(error, str)):
            raise ValueError("pid, start_method or error malformed")
        report = BindReport.from_dict(rec["report"]) if "report" in rec else None
        return cls(pid=pid, start_method=method, report=report, error=error)


def _record(pid: int, method: str, report: BindReport | None, error: str | None) -> dict[str, Any]:
    return ChildReport(pid, method, report, error).to_dict()


def _write_report(directory: str | None, rec: dict[str, Any]) -> None:
    """Child side: write ``<dir>/<pid>.json`` atomically; a failure only logs."""
    if not directory:
        return
    pid = rec["pid"]
    tmp = os.path.join(directory, f".{pid}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, json.dumps(rec).encode())
        finally:
            os.close(fd)
        os.replace(tmp, os.path.join(directory, f"{pid}.json"))
    except OSError as e:  # the parent closed its ChildBindings meanwhile
        log.debug("cannot write the birth report of pid %d to %s: %s", pid, directory, e)



_birth: ChildReport | None = None


def birth_report() -> ChildReport | None:
    """In a child bound at birth (configure_subprocess, bound, pool_plans): what happened; else None."""
    return _birth


def _set_birth(report: ChildReport) -> ChildReport:
    """Keep what this child was bound to at birth (:func:`birth_report`) and write its runtime record
    (:mod:`numabind.records`), so that ``numabind stat`` in other processes sees it too. Returns the
    report, with a note when the record could not be written (the binding stands)."""
    global _birth
    report = _with_record(report)
    _birth = report
    return report


def _with_record(report: ChildReport) -> ChildReport:
    """Write the runtime record of ``report`` (of process ``report.pid``); a failure is a note in the
    returned report, never an error."""
    bind = report.report
    if bind is None:
        return report
    from ..records import write_record

    why = write_record(report.pid, report.start_method, bind.requested.to_text(), bind.applied.to_text())
    if why is None:
        return report
    return report.replace(report=bind.replace(notes=(*bind.notes, why)))


class ChildBindings:
    """The handle ``configure_subprocess`` yields: the plan, and the children's reports.

    A child that binds itself (fork, forkserver, ``spawn="in-child"``, the
    numactl wrapper) writes its report into a private directory (mode 0700)
    that lives until :meth:`close` or until this handle is garbage collected,
    so reports can be read after the ``with`` block; a spawn child bound by
    inheritance gets its report from the parent, kept in memory.
    """

    def __init__(self, plan: Plan, mode: str, backend: str, report: bool) -> None:
        self.plan = plan
        self.mode = mode                  # "in-process" | "numactl-wrapper"
        self.backend = backend
        self.directory = tempfile.mkdtemp(prefix="numabind-births-") if report else None
        self.known: dict[int, ChildReport] = {}   # reports made in this process (spawn by inheritance)
        self._finalizer = (weakref.finalize(self, _remove_dir, self.directory, os.getpid())
                           if self.directory else None)

    def reports(self) -> dict[int, ChildReport]:
        """Every report written so far, by pid."""
        out: dict[int, ChildReport] = dict(self.known)
        if not self.directory:
            return out
        for name in os.listdir(self.directory):
            if name.endswith(".json") and name[:-5].isdigit():
                rep = self._read(int(name[:-5]))
                if rep is not None:
                    out[rep.pid] = rep
        return out

    def _read(self, pid: int) -> ChildReport | None:
        path = os.path.join(self.directory or "", f"{pid}.json")
        try:
            with open(path, "rb") as f:
                data = f.read(_REPORT_MAX + 1)
        except FileNotFoundError:
            return None
        if len(data) > _REPORT_MAX:
            raise NumabindError(f"birth report {path} is larger than {_REPORT_MAX} bytes")
        try:
            return ChildReport.from_dict(json.loads(data))
        except (ValueError, PlanError) as e:
            raise NumabindError(f"birth report {path} is malformed: {e}") from None

    def report(self, pid: int, timeout: float = 30.0) -> ChildReport:
        """The report of child ``pid``, waiting up to ``timeout`` seconds for it."""
        if not self.directory:
            raise NumabindError("this configure_subprocess was entered with report=False")
        deadline = time.monotonic() + timeout
        delay = 0.001
        while True:
            rep = self.known.get(pid) or self._read(pid)
            if rep is not None:
                return rep
            if time.monotonic() >= deadline:
                raise TimeoutError(f"child {pid} wrote no birth report within {timeout} s "
                                   f"(it was not started inside configure_subprocess, or it died before binding)")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def close(self) -> None:
        """Remove the report directory (children that write later only log at DEBUG)."""
        if self._finalizer is not None:
            self._finalizer()

    def __repr__(self) -> str:
        return f"ChildBindings({self.plan}, mode={self.mode}, backend={self.backend})"


def _remove_dir(path: str, owner: int) -> None:
    if os.getpid() == owner:  # a forked child's copy of the handle must not delete it
        shutil.rmtree(path, ignore_errors=True)

