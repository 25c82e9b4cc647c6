"""Drop-in replacements for other projects' NUMA helpers, bound in-process by numabind.

* :mod:`numabind.compat.vllm` — ``vllm.utils.numa_utils``
* :mod:`numabind.compat.sglang` — ``sglang.srt.utils.numa_utils``

What both adapters share lives here:

* **One discovery per process.** :func:`current_topology` discovers the
  machine (sysfs, and NVML for NVIDIA GPUs) the first time it is needed in a
  process and keeps the result. Later calls reuse it; only these changes make
  it look again:

  - a new process: a forked child never reuses its parent's cache (its
    affinity, cpuset or environment may differ), it discovers once for itself;
  - a different CPU affinity of the calling thread (``topology.affinity``; the
    hosts' own helpers read the affinity, while ``allowed_cpus`` is the cpuset);
  - a different ``NUMABIND_FSROOT``;
  - different GPU-visibility variables (``CUDA_VISIBLE_DEVICES`` & co.). When
    only ``CUDA_VISIBLE_DEVICES`` changed and each of its new entries names,
    verbatim, a device the cached discovery already numbered (an entry of the
    old value, an index when the old value was unset, or a full UUID), the
    GPUs are renumbered from the cache without reading anything: that is how
    SGLang's ``SGLANG_ONE_VISIBLE_DEVICE_PER_PROCESS`` narrows the variable to
    one entry per child. Anything else is discovered again (and cached too).

  :func:`refresh_topology` forgets everything, or pins a given topology.
* **Logs that show.** The adapters log through the host project's logger, and
  :func:`forward_warnings` passes numabind's own WARNING records (each
  degradation of a binding) on to it while a child is being started, because
  vLLM configures only its ``vllm`` logger and would drop them.
* **Probing in the parent.** :func:`probe_plan` says whether a plan can be
  applied in this process: it checks the plan against the machine, then tries
  it strictly in a short-lived thread (CPU affinity and memory policy are per
  thread, so the thread's binding ends with it and nothing else changes).
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
    "current_topology",
    "forward_warnings",
    "numactl_probe",
    "on_live_machine",
    "open_libnuma",
    "plan_from_numactl_args",
    "probe_plan",
    "refresh_topology",
    "wrapper_environment",
    "wrapper_executable",
]

log = logging.getLogger(__name__)

#: Environment variables that change which GPUs discovery numbers, and how.
VISIBILITY_VARS = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL",
    "ZE_AFFINITY_MASK", "ZE_ENABLE_PCI_ID_DEVICE_ORDER", "ZE_FLAT_DEVICE_HIERARCHY",
    "ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES",
    "NUMABIND_GPU_VENDOR",
)


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


def _affinity() -> frozenset[int]:
    return frozenset(os.sched_getaffinity(0))


@dataclasses.dataclass
class _Entry:
    topology: Any
    visibility: tuple[tuple[str, str | None], ...]


class _Cache:
    """Topologies of this process, keyed by what changes them (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.entries: dict[tuple[Any, ...], _Entry] = {}
        self.pinned: _Entry | None = None
        self.discoveries = 0          # full discoveries in this process (tests and logs)

    def get(self) -> Any:
        env = os.environ
        vis = _visibility(env)
        with self.lock:
            if self.pid != os.getpid():        # a forked child: the parent's entries are not ours
                self.pid = os.getpid()
                self.entries.clear()
                self.discoveries = 0
            if self.pinned is not None:
                key: tuple[Any, ...] = ("pinned", vis)
                bases = [self.pinned]
            else:
                root = _root(env)
                place = (root, _affinity() if root == "/" else None)
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
            self.discoveries += 1
            self.entries[key] = _Entry(topology, vis)
            log.debug("discovered %s for pid %d (discovery %d of this process): %d nodes, %d GPUs",
                      topology.root, os.getpid(), self.discoveries, len(topology.nodes), len(topology.gpus))
            return topology


def _canonical_index(token: str) -> int | None:
    return int(token) if token.isdigit() and str(int(token)) == token else None


def _renumber(base: _Entry, vis: tuple[tuple[str, str | None], ...]) -> Any | None:
    """``base.topology`` with its GPUs renumbered for a new CUDA_VISIBLE_DEVICES, or None.

    Only exact identities are used: an entry equal to an entry of the old value
    is the same device; with no old value, a canonical index is the device of
    that index; a full GPU or MIG UUID is the device that has it. Anything
    else (other variables changed, a prefix, a duplicate) returns None.
    """
    old, new = dict(base.visibility), dict(vis)
    if {k: v for k, v in old.items() if k != "CUDA_VISIBLE_DEVICES"} != \
            {k: v for k, v in new.items() if k != "CUDA_VISIBLE_DEVICES"}:
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
        elif old_tokens is None and _canonical_index(token) is not None:
            found = next((g for g in gpus if g.index == _canonical_index(token)), None)
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
    """Forget the cached discovery; with ``topology``, use it from now on (in this process and its forks).

    Call it after the machine or this process's cpuset changed (CPU hotplug, a
    container resize). A pinned topology is taken as seen under the current
    GPU-visibility variables; a later change of ``CUDA_VISIBLE_DEVICES`` is
    renumbered from it, or discovered when it cannot be.
    """
    with _cache.lock:
        _cache.entries.clear()
        _cache.discoveries = 0
        _cache.pinned = None if topology is None else _Entry(topology, _visibility(os.environ))
    for hook in list(REFRESH_HOOKS):
        hook()


#: Called by :func:`refresh_topology` (adapters register the caches they derive from the topology).
REFRESH_HOOKS: list[Callable[[], Any]] = []


# ----------------------------------------------------------------------------- numactl-syntax plans
def plan_from_numactl_args(args: str, topology: Any) -> Plan:
    """A plan from numactl options, refusing what numactl itself refuses.

    :meth:`Plan.from_numactl_args` resolves ``all``, ``!list`` and ``+list``
    against ``topology`` as numactl does, and refuses the ``N-M:step`` stride
    form numactl has not.
    """
    return Plan.from_numactl_args(args, topology=topology)


def probe_plan(plan: Plan, topology: Any) -> str | None:
    """None when ``plan`` can be applied in this process as it is, else why not.

    The plan is checked against ``topology`` (CPUs online and allowed, nodes
    existing, with memory and allowed), then, with an in-process backend,
    applied strictly in a thread that exits right after: a seccomp profile that
    refuses ``set_mempolicy`` or a cpuset that refuses the CPUs is found here,
    before a child is started. With the numactl backend the memory policy is
    only applied when a child is exec'd, so only the check is made.
    """
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
        if record.thread != self.thread:
            return
        if not self.target.isEnabledFor(record.levelno):
            return
        shown = _reachable(logging.getLogger(record.name))
        wanted = _reachable(self.target)
        if wanted and wanted <= shown:
            return  # the record already reaches every handler the host's logger would
        self.target.log(record.levelno, "%s", record.getMessage())


@contextlib.contextmanager
def forward_warnings(target: logging.Logger) -> Iterator[None]:
    """Inside the block, numabind's WARNING records from this thread are also logged through ``target``.

    numabind's loggers are left as they are (no level, no handler of the
    application's is changed); a record that would reach the host's handlers
    anyway (an application that configured the root logger) is not repeated.
    A child forked inside the block inherits the forwarding for its birth.
    """
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
    """numabind's environment-driven wrapper (``numa_wrapper.sh`` beside this module).

    Used as multiprocessing's spawn executable, it checks ``WRAPPER_ARGS_ENV``
    (numactl binding options only: ``--physcpubind``, ``--cpunodebind``,
    ``--membind``, ``--preferred``, ``--preferred-many``, ``--interleave``,
    ``--localalloc``, with CPU/node lists of digits and ``,-!+``) and
    ``WRAPPER_PYTHON_ENV`` (an absolute path to an executable file), then runs
    ``numabind run OPTIONS -- python ARGS``: the child starts bound, without
    numactl. numabind itself starts isolated, as
    :func:`numabind.process.commands.numabind_command` starts it (its working
    directory and ``PYTHONPATH`` cannot put another numabind in its place);
    ``python ARGS`` gets the environment unchanged. Anything else is refused
    (exit 127, the reason on stderr); nothing is ever evaluated.
    """
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "numa_wrapper.sh")


@contextlib.contextmanager
def wrapper_environment(numactl_args: str, python_executable: str) -> Iterator[None]:
    """Inside the block the wrapper's two variables hold ``numactl_args`` and ``python_executable``;
    on exit each is restored to its earlier value, or removed when it had none."""
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


# ----------------------------------------------------------------------------- probing with numactl
def on_live_machine() -> bool:
    """Whether the cached topology is this machine as it runs (no ``NUMABIND_FSROOT``, nothing pinned)."""
    return _cache.pinned is None and _root(os.environ) == "/"


def numactl_probe(numactl_args: str) -> tuple[bool, str] | None:
    """``numactl ARGS true`` run in a child, as vLLM and SGLang probe: ``(accepted, numactl's stderr
    or the error)``; None when numactl is not used here (not on PATH, or a topology that is not this
    machine's), and the caller probes in-process instead."""
    if shutil.which("numactl") is None or not on_live_machine():
        return None
    try:
        result = subprocess.run(["numactl", *numactl_args.split(), "true"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"numactl could not be run: {e}"
    raw = getattr(result, "stderr", b"") or b""
    err = (raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)).strip()
    if result.returncode != 0 and not err:
        err = f"numactl exited with status {result.returncode}"
    return result.returncode == 0, err if result.returncode != 0 else ""


#: The spellings of SGLang's boolean environment variables, any case.
SGLANG_TRUE = ("true", "1", "yes", "y")
SGLANG_FALSE = ("false", "0", "no", "n")


def sglang_env_bool(name: str, default: bool, env: Mapping[str, str] | None = None) -> bool:
    """One of SGLang's boolean environment variables: true/1/yes/y or false/0/no/n, any case; unset: ``default``.
    Anything else is a PlanError naming the variable (a typo must not silently mean the default)."""
    raw = (os.environ if env is None else env).get(name)
    if raw is None:
        return default
    value = raw.lower()
    if value in SGLANG_TRUE:
        return True
    if value in SGLANG_FALSE:
        return False
    raise PlanError(f"{name}={raw!r} is not a boolean; use one of {', '.join(SGLANG_TRUE)} or "
                    f"{', '.join(SGLANG_FALSE)}")
