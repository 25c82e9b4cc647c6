"""Reports of children bound at birth: :class:`ChildReport`, the :class:`ChildBindings` handle, and
:func:`birth_report` (what this process itself was bound to when it was born)."""

from __future__ import annotations

import json
import os
import shutil
import time
import weakref
from typing import Any

from .. import _proc, records
from .._base import Value, getLogger, keep_binding_env, printable   # Value: a child bound at birth loads this module
from ..bind import BindReport
from ..errors import BirthBindError, NumabindError, PlanError
from ..plan import Plan

__all__ = ["BirthBindError", "ChildBindings", "ChildReport", "birth_report"]

log = getLogger(__name__)

_REPORT_MAX = 1 << 20
_REPORT_DEPTH = 8     # a report nests 5 deep (it, its bind report, the locality, pages, per node): deeper is not one


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
        if (not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(method, str)
                or not (error is None or isinstance(error, str))):
            raise ValueError("pid, start_method or error malformed")
        report = BindReport.from_dict(rec["report"]) if "report" in rec else None
        return cls(pid=pid, start_method=method, report=report, error=error)


def _write_report(directory: str | None, child: ChildReport) -> None:
    """Child side: write ``<dir>/<pid>.json`` into the parent's private directory; a failure only logs."""
    if not directory:
        return
    pid = child.pid
    try:
        fd = records.open_private_dir(directory, os.geteuid())
        try:
            records.write_private_file(fd, f"{pid}.json", json.dumps(child.to_dict()).encode(), str(pid))
        finally:
            os.close(fd)
    except records.UnsafeDirError as e:
        log.warning("birth report of pid %d not written: the report directory is not safe (%s)", pid, e)
    except OSError as e:  # the parent closed its ChildBindings meanwhile
        log.debug("cannot write the birth report of pid %d to %s: %s", pid, directory, e)


_birth: ChildReport | None = None


def birth_report() -> ChildReport | None:
    """In a child bound at birth (configure_subprocess, bound, pool_plans): what happened; else None."""
    return _birth


def _set_birth(report: ChildReport) -> ChildReport:
    """Keep what this child was bound to at birth (:func:`birth_report`) and write its runtime record for
    ``numabind stat``; the report, with a note when the record could not be written."""
    global _birth
    kept = keep_binding_env(say=False)   # this child's own environment: TensorRT-LLM must not undo its binding
    if kept is not None and report.report is not None:
        report = report.replace(report=report.report.replace(notes=(*report.report.notes, kept[1])))
    report = _with_record(report)
    _birth = report
    if report.report is not None:   # numabind stat of this process reads it there (residency is below process)
        records.keep_own_birth(report.start_method, report.report.requested, report.report.applied)
    return report


def _with_record(report: ChildReport) -> ChildReport:
    """Write the runtime record of ``report``'s process; a failure is a note in the returned report."""
    bind = report.report
    if bind is None:
        return report
    why = records.write_record(report.pid, report.start_method, bind.requested.to_text(), bind.applied.to_text())
    if why is None:
        return report
    return report.replace(report=bind.replace(notes=(*bind.notes, why)))


class ChildBindings:
    """The handle ``configure_subprocess`` yields: the plan, and the children's reports.

    A child that binds itself writes its report into a private directory of this user's runtime directory
    (:mod:`numabind.records`), read through a descriptor held from its creation, that lives until
    :meth:`close` or garbage collection; a spawn child bound by inheritance has its report kept in memory.
    """

    def __init__(self, plan: Plan, mode: str, backend: str, report: bool) -> None:
        self.plan = plan
        self.mode = mode                  # "in-process" | "numactl-wrapper"
        self.backend = backend
        self.directory: str | None = None
        self._fd = -1
        self.known: dict[int, ChildReport] = {}   # reports made in this process (spawn by inheritance)
        self._finalizer: weakref.finalize[Any, ChildBindings] | None = None
        if report:
            self.directory, self._fd = _make_report_dir()
            self._finalizer = weakref.finalize(self, _remove_dir, self.directory, self._fd, os.getpid())

    def _dir_fd(self) -> int:
        if self._finalizer is None or not self._finalizer.alive:
            raise NumabindError("this configure_subprocess was entered with report=False" if self._finalizer is None
                                else f"the birth reports in {self.directory} were removed by close()")
        return self._fd

    def reports(self) -> dict[int, ChildReport]:
        """Every report written so far, by pid."""
        out: dict[int, ChildReport] = dict(self.known)
        if not self.directory:
            return out
        for name in os.listdir(self._dir_fd()):
            if name.endswith(".json") and name[:-5].isdigit():
                rep = self._read(int(name[:-5]))
                if rep is not None:
                    out[rep.pid] = rep
        return out

    def _read(self, pid: int) -> ChildReport | None:
        name = f"{pid}.json"
        path = os.path.join(self.directory or "", name)
        try:
            data = records.read_private_file(self._dir_fd(), name, os.geteuid(), _REPORT_MAX)
        except OSError as e:
            raise NumabindError(f"birth report {path} is not one a child wrote: {e.strerror or e}") from None
        if data is None:
            return None
        try:
            rep = ChildReport.from_dict(records.load_json(data, depth=_REPORT_DEPTH))
        except (ValueError, PlanError) as e:
            raise NumabindError(f"birth report {printable(path)} is malformed: {printable(str(e))}") from None
        if rep.pid != pid:
            raise NumabindError(f"birth report {path} names pid {rep.pid}, not {pid}")
        return rep

    def report(self, pid: int, timeout: float = 30.0) -> ChildReport:
        """The report of child ``pid``, waiting up to ``timeout`` seconds for it."""
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


_BIRTHS = "births-"
_BIRTHS_PRUNE = 16      # stale report directories (of parents that are gone) removed per new one, at most


def _make_report_dir() -> tuple[str, int]:
    """(path, descriptor) of a new private birth-report directory in this user's runtime directory."""
    try:
        base, run_fd = records.open_runtime_dir()
    except OSError as e:
        raise NumabindError(f"configure_subprocess: no private directory for the children's birth reports "
                            f"({e.strerror or e}); make one of {', '.join(records.record_dirs())} this user's "
                            f"(mode 0700), or pass report=False") from None
    try:
        _prune_report_dirs(base, run_fd)
        me = os.getpid()
        name = f"{_BIRTHS}{me}.{_proc.start_time(me)}.{os.urandom(6).hex()}"
        os.mkdir(name, 0o700, dir_fd=run_fd)
        return os.path.join(base, name), records.open_private_dir(name, os.geteuid(), dir_fd=run_fd)
    except OSError as e:
        raise NumabindError(f"configure_subprocess: cannot make a birth report directory in {base}: {e}; "
                            f"pass report=False to go without reports") from None
    finally:
        os.close(run_fd)


def _prune_report_dirs(base: str, run_fd: int) -> None:
    """Remove up to _BIRTHS_PRUNE report directories whose parent process is gone."""
    removed = 0
    for name in os.listdir(run_fd):
        if not name.startswith(_BIRTHS):
            continue
        parts = name[len(_BIRTHS):].split(".")
        if len(parts) != 3 or not (parts[0].isdigit() and parts[1].isdigit()):
            continue
        if _proc.start_time(int(parts[0])) == int(parts[1]):
            continue      # its parent lives
        shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        removed += 1
        if removed >= _BIRTHS_PRUNE:
            break


def _remove_dir(path: str, fd: int, owner: int) -> None:
    if os.getpid() == owner:  # a forked child's copy of the handle must not delete it
        os.close(fd)
        shutil.rmtree(path, ignore_errors=True)
