"""What numabind's drop-ins for ``vllm.utils.numa_utils`` (:mod:`numabind.compat.vllm`) and
``sglang.srt.utils.numa_utils`` (:mod:`numabind.compat.sglang`) share: one discovery per process, warnings through
the host's logger, the probe made in the parent and the wrapper (``docs/howto/compat.rst``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .._numactl import policy_of
from .._vendors import DISCOVERY_VARIABLES as VISIBILITY_VARS   # the variables that change which GPUs discovery numbers
from ..errors import NumabindError, PlanError
from ..plan import Plan
from ..types import Strictness

if TYPE_CHECKING:  # pragma: no cover
    import ctypes

__all__ = [
    "WRAPPER_ARGS_ENV",
    "WRAPPER_PYTHON_ENV",
    "NumaBindingUnavailable",
    "bind_children",
    "cannot_apply",
    "current_topology",
    "forward_warnings",
    "mem_policy",
    "on_live_machine",
    "open_libnuma",
    "probe_plan",
    "refresh_topology",
    "strip_memory_args",
    "wrapper_environment",
    "wrapper_executable",
]

log = logging.getLogger(__name__)


class NumaBindingUnavailable(NumabindError, RuntimeError):
    """Raised where vLLM or SGLang raise RuntimeError: no NUMA node could be found, or
    (SGLang with ``SGLANG_CRASH_ON_NUMA_BIND_FAILURE``) no part of a binding could be applied."""


# ----------------------------------------------------------------------------- the topology cache
def open_libnuma(logger: logging.Logger) -> ctypes.CDLL | None:
    """libnuma opened with ctypes (``libnuma.so``, then ``libnuma.so.1``), or None; the adapters' ``get_libnuma``."""
    import ctypes

    for name in ("libnuma.so", "libnuma.so.1"):
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            logger.debug("%s cannot be opened: %s", name, e)
    return None


def _visibility(env: Mapping[str, str]) -> tuple[tuple[str, str | None], ...]:
    return tuple((name, env.get(name)) for name in VISIBILITY_VARS)


def _root(env: Mapping[str, str]) -> str:
    return env.get("NUMABIND_FSROOT") or "/"


@dataclasses.dataclass
class _Entry:
    topology: Any
    visibility: tuple[tuple[str, str | None], ...]


class _Cache:
    """Topologies of this process, keyed by what changes them (docs/howto/compat.rst)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.entries: dict[tuple[Any, ...], _Entry] = {}
        self.pinned: _Entry | None = None

    def get(self) -> Any:
        env = os.environ
        vis = _visibility(env)
        with self.lock:
            if self.pid != os.getpid():        # a forked child: the parent's entries are not ours
                self.pid = os.getpid()
                self.entries.clear()
            if self.pinned is not None:
                key: tuple[Any, ...] = ("pinned", vis)
                bases = [self.pinned]
            else:
                root = _root(env)
                place = (root, frozenset(os.sched_getaffinity(0)) if root == "/" else None)
                key = (place, vis)
                bases = [e for k, e in self.entries.items() if k[0] == place]
            hit = self.entries.get(key)
            if hit is not None:
                return hit.topology
            for base in bases:
                if base.visibility == vis:
                    self.entries[key] = base
                    return base.topology
                renumbered = _renumber(base, vis)
                if renumbered is not None:
                    self.entries[key] = _Entry(renumbered, vis)
                    log.debug("GPUs renumbered from the cached discovery for CUDA_VISIBLE_DEVICES=%s",
                              dict(vis)["CUDA_VISIBLE_DEVICES"])
                    return renumbered
            from ..topology import discover

            topology = discover()
            self.entries[key] = _Entry(topology, vis)
            log.debug("discovered %s for pid %d: %d nodes, %d GPUs", topology.root, os.getpid(), len(topology.nodes),
                      len(topology.gpus))
            return topology


def _renumber(base: _Entry, vis: tuple[tuple[str, str | None], ...]) -> Any | None:
    """``base.topology`` with its GPUs renumbered for a new CUDA_VISIBLE_DEVICES, or None when an entry is
    not an exact identity (an entry of the old value, a canonical index when it was unset, a full UUID)."""
    old, new = dict(base.visibility), dict(vis)
    if any(old[k] != new[k] for k in old if k != "CUDA_VISIBLE_DEVICES"):
        return None
    value = new["CUDA_VISIBLE_DEVICES"]
    gpus = base.topology.gpus
    if value is None or not gpus or any(g.vendor != "nvidia" for g in gpus):
        return None
    tokens = [t.strip() for t in value.split(",")]
    if any(not t for t in tokens) or len(set(tokens)) != len(tokens):
        return None
    previous = old["CUDA_VISIBLE_DEVICES"]
    old_tokens = [t.strip() for t in previous.split(",")] if previous is not None else None
    chosen = []
    for token in tokens:
        found = None
        if old_tokens is not None and token in old_tokens:
            pos = old_tokens.index(token)
            found = gpus[pos] if pos < len(gpus) else None
        elif old_tokens is None and token.isdigit() and str(int(token)) == token:   # a canonical index
            found = next((g for g in gpus if g.index == int(token)), None)
        else:
            found = next((g for g in gpus if token in (g.uuid, g.mig_uuid) and token), None)
        if found is None:
            return None
        chosen.append(found)
    return base.topology.replace(gpus=tuple(g.replace(index=i) for i, g in enumerate(chosen)))


_cache = _Cache()


def current_topology() -> Any:
    """The machine as this process sees it now, discovered at most once per process and visibility."""
    return _cache.get()


def refresh_topology(topology: Any = None) -> None:
    """Forget the cached discovery; with ``topology``, use it from now on (in this process and its forks)."""
    with _cache.lock:
        _cache.entries.clear()
        _cache.pinned = None if topology is None else _Entry(topology, _visibility(os.environ))
    for hook in list(REFRESH_HOOKS):
        hook()


#: Called by :func:`refresh_topology` (adapters register the caches they derive from the topology).
REFRESH_HOOKS: list[Callable[[], Any]] = []


# ----------------------------------------------------------------------------- probing
def probe_plan(plan: Plan, topology: Any) -> str | None:
    """None when ``plan`` can be applied in this process as it is, else why not: checked against ``topology``,
    then (not with the numactl backend) applied strictly in a thread that exits right after."""
    try:
        plan.validate(topology)
    except PlanError as e:
        return str(e)
    from ..backends import backend_info
    from ..bind import bind_current

    if backend_info()["selected"] == "numactl":
        return None
    failure: list[str] = []

    def trial() -> None:
        try:
            bind_current(plan, strict=True, threads="current")
        except NumabindError as e:
            failure.append(str(e))
        except Exception as e:  # noqa: BLE001 - a probe reports, it never raises
            failure.append(f"{type(e).__name__}: {e}")

    thread = threading.Thread(target=trial, name="numabind-probe", daemon=True)
    thread.start()
    thread.join()
    return failure[0] if failure else None


# ----------------------------------------------------------------------------- logging
def _reachable(logger: logging.Logger) -> set[logging.Handler]:
    out: set[logging.Handler] = set()
    current: logging.Logger | None = logger
    while current is not None:
        out.update(h for h in current.handlers if not isinstance(h, (logging.NullHandler, _Forward)))
        if not current.propagate:
            break
        current = current.parent
    return out


class _Forward(logging.Handler):
    """Re-logs numabind's WARNING records of one thread through the host's logger."""

    def __init__(self, target: logging.Logger, thread: int) -> None:
        super().__init__(logging.WARNING)
        self.target, self.thread = target, thread

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread != self.thread or not self.target.isEnabledFor(record.levelno):
            return
        shown = _reachable(logging.getLogger(record.name))
        wanted = _reachable(self.target)
        if wanted and wanted <= shown:
            return  # the record already reaches every handler the host's logger would
        self.target.log(record.levelno, "%s", record.getMessage())


@contextlib.contextmanager
def forward_warnings(target: logging.Logger) -> Iterator[None]:
    """Inside the block, numabind's WARNING records from this thread are also logged through ``target``, unless
    they reach the host's handlers anyway; no logger's level or handlers change."""
    handler = _Forward(target, threading.get_ident())
    source = logging.getLogger("numabind")
    source.addHandler(handler)
    try:
        yield
    finally:
        source.removeHandler(handler)


@contextlib.contextmanager
def bind_children(plan: Plan, target: logging.Logger, strict: Strictness = False) -> Iterator[None]:
    """numabind's :func:`~numabind.configure_subprocess` for an adapter: no report files (nothing is
    written anywhere), degradations shown through ``target``, ``strict`` given by the host's rules
    (not ``NUMABIND_STRICT``)."""
    from ..process import configure_subprocess

    with forward_warnings(target), configure_subprocess(plan, strict=strict, report=False):
        yield


# ----------------------------------------------------------------------------- the environment-driven wrapper
#: The variables the wrapper reads: the numactl options of the child, and the Python it runs
#: (vLLM's names, so that vLLM's own ``_set_numa_wrapper_env`` drives it unchanged).
WRAPPER_ARGS_ENV = "_VLLM_INTERNAL_NUMACTL_ARGS"
WRAPPER_PYTHON_ENV = "_VLLM_INTERNAL_NUMACTL_PYTHON_EXECUTABLE"


def wrapper_executable() -> str:
    """numabind's spawn executable (``numa_wrapper.sh`` beside this module), driven by the wrapper variables."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "numa_wrapper.sh")


@contextlib.contextmanager
def wrapper_environment(numactl_args: str, python_executable: str) -> Iterator[None]:
    """The wrapper's two variables hold ``numactl_args`` and ``python_executable`` inside the block."""
    saved = {name: os.environ.get(name) for name in (WRAPPER_ARGS_ENV, WRAPPER_PYTHON_ENV)}
    os.environ[WRAPPER_ARGS_ENV] = numactl_args
    os.environ[WRAPPER_PYTHON_ENV] = python_executable
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def on_live_machine() -> bool:
    """Whether the cached topology is this machine as it runs (no ``NUMABIND_FSROOT``, nothing pinned)."""
    return _cache.pinned is None and _root(os.environ) == "/"


def cannot_apply(numactl_args: str, logger: logging.Logger | None = None) -> str | None:
    """None when ``numactl_args`` can be applied in this process, else why not: ``numactl ARGS true`` (its
    stderr, logged at DEBUG through ``logger``) on the live machine with numactl on PATH, as vLLM and SGLang
    probe; else the plan is checked against the machine and tried in a short-lived thread (:func:`probe_plan`)."""
    if not numactl_args:
        return None
    if shutil.which("numactl") is None or not on_live_machine():
        topology = current_topology()
        try:
            plan = Plan.from_numactl_args(numactl_args, topology=topology)
        except PlanError as e:
            return str(e)
        return probe_plan(plan, topology)
    try:
        result = subprocess.run(["numactl", *numactl_args.split(), "true"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        err = f"numactl could not be run: {e}"
    else:
        if result.returncode == 0:
            return None
        raw = getattr(result, "stderr", b"") or b""
        err = (raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)).strip()
        err = err or f"numactl exited with status {result.returncode}"
    if logger is not None:
        logger.debug("numactl probe for %r rejected: %r", numactl_args, err)
    return err


def strip_memory_args(numactl_args: str) -> str:
    """``numactl_args`` (long options, as the adapters write them) without the memory policy."""
    return " ".join(t for t in numactl_args.split() if not policy_of(t.partition("=")[0].removeprefix("--")))


def mem_policy(logger: logging.Logger) -> str | None:
    """The calling thread's memory policy (``"bind"``, ...), or None when unreadable (logged at DEBUG)."""
    from ..verify import current_binding

    try:
        return current_binding().mem_policy
    except Exception as e:  # noqa: BLE001 - no usable backend, or the kernel refused the read
        logger.debug("the memory policy cannot be read: %s", e)
        return None
