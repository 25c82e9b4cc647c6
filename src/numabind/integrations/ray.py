"""Ray: every worker bound to the NUMA node of the GPUs Ray assigned it (``pip install numabind[ray]``).

:func:`runtime_env` (its ``worker_process_setup_hook`` is :func:`setup_hook`) binds every worker of a job;
:func:`bind_actor` gives an actor class its own plan, bound in its ``__init__``, through public hooks only.
Ray has no public callback for a worker's new accelerators, so :func:`setup_hook` wraps Ray's private
``ray._private.utils.set_visible_accelerator_ids``. Under ``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES`` Ray's
GPU ids are physical. Ray is imported only when a function here runs (``docs/howto/ray.rst``).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .._base import Strictness, strict_from_env
from ..errors import NumabindError, PlanError
from ..plan import Plan

if TYPE_CHECKING:  # pragma: no cover
    from ..types import Mode, NodePolicy

log = logging.getLogger(__name__)

__all__ = ["HOOK", "NOSET_VAR", "bind_actor", "bind_this_actor", "last_report", "plan_for_worker", "runtime_env", "setup_hook"]

#: The ``worker_process_setup_hook`` value that names :func:`setup_hook`.
HOOK = "numabind.integrations.ray.setup_hook"
#: Transport of :func:`runtime_env`'s choices to the workers.
MODE_VAR = "_NUMABIND_RAY_MODE"
POLICY_VAR = "_NUMABIND_RAY_POLICY"
WITHIN_VAR = "_NUMABIND_RAY_WITHIN_AFFINITY"
#: Ray's switch that keeps it from setting ``CUDA_VISIBLE_DEVICES`` (its ids are then physical).
NOSET_VAR = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"

T = TypeVar("T", bound=type)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise NumabindError("numabind.integrations.ray needs Ray: pip install 'numabind[ray]'") from None
    return ray


def _check(mode: str, policy: str | None) -> tuple[Mode, NodePolicy | None]:
    """``(mode, policy)``, each checked against the words the planners take (a PlanError names a wrong one)."""
    from ..strategies import MODES, POLICIES

    if mode not in MODES:
        raise PlanError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    if policy not in POLICIES:
        raise PlanError(f"policy {policy!r} is not one of bind, preferred, preferred-many, interleave (or None)")
    return mode, policy


def runtime_env(mode: Mode = "node", policy: NodePolicy | None = "bind", *, strict: Strictness | None = None,
                env_vars: Mapping[str, str] | None = None, within_affinity: bool = False,
                **extra: Any) -> dict[str, Any]:
    """A Ray ``runtime_env`` whose workers bind themselves (see :func:`setup_hook`).

    ``env_vars`` are passed on; ``strict`` sets ``NUMABIND_STRICT`` in the workers; ``within_affinity=True``
    keeps each worker inside the affinity it was started with; other keywords are more runtime_env fields.
    """
    _check(mode, policy)
    if "worker_process_setup_hook" in extra:
        raise NumabindError("runtime_env() sets worker_process_setup_hook itself; do not pass one")
    variables = dict(env_vars or {})
    variables[MODE_VAR] = mode
    variables[POLICY_VAR] = "none" if policy is None else policy
    if within_affinity:
        variables[WITHIN_VAR] = "1"
    if strict is not None:
        variables["NUMABIND_STRICT"] = "partial" if strict == "partial" else "1" if strict else "0"
    return {**extra, "worker_process_setup_hook": HOOK, "env_vars": variables}


def plan_for_worker(mode: Mode = "node", policy: NodePolicy | None = "bind", topology: Any = None, *,
                    gpu_ids: Sequence[Any] | None = None, env: Mapping[str, str] | None = None,
                    within: Any = None, strict: Strictness | None = None, within_affinity: bool = False) -> Plan:
    """The plan of this Ray worker for the GPUs Ray assigned it (``gpu_ids``, default ``ray.get_gpu_ids()``).

    The GPUs are the visible ones, or under ``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES`` those whose
    physical index or UUID they are; ``topology`` defaults to a discovery with ``env``. A worker with no GPU
    is a PlanError. ``within`` is the affinity the worker was started with (default: the topology's); the plan
    replaces it unless ``within_affinity=True`` (:func:`numabind.rank.rank_limit`).
    """
    from ..rank import discover_for_env, plan_owned_gpus

    env = os.environ if env is None else env
    strict = strict_from_env(env) if strict is None else strict
    ids = [str(i) for i in (_ray().get_gpu_ids() if gpu_ids is None else gpu_ids)]
    if not ids:
        raise PlanError("this Ray worker was assigned no GPU (ray.get_gpu_ids() is empty); give the task or "
                        "actor num_gpus, or bind it explicitly")
    if topology is None:
        topology = discover_for_env(env)
    visible = sorted(g.index for g in topology.gpus)
    label = f"Ray worker {os.getpid()} with GPU ids {','.join(ids)}"
    reasons = [f"{label}: visible GPUs {','.join(map(str, visible)) or 'none'}"]
    if noset(env):
        visible = physical_gpus(topology, ids, label)
        reasons.append(f"{NOSET_VAR} is set: Ray's ids are physical; they are visible GPU(s) "
                       f"{','.join(map(str, visible))}")
    elif len(visible) != len(ids):
        raise PlanError(f"{label}: Ray assigned {len(ids)} GPU(s) but {len(visible)} are visible "
                        f"(CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')!r}); cannot tell which is which")
    warnings: list[str] = []
    plan = plan_owned_gpus(topology, visible, label=label, mode=mode, policy=policy, own_devices=True, env=env,
                           within=within, strict=strict, reasons=reasons, warnings=warnings,
                           within_affinity=within_affinity)
    for w in warnings:
        log.warning("%s", w)
    log.info("%s, mode %s: %s", label, mode, plan.describe())
    return plan


def noset(env: Mapping[str, str]) -> bool:
    """Whether Ray leaves ``CUDA_VISIBLE_DEVICES`` alone (``NOSET_VAR`` is 1 or true, any case, as Ray reads it)."""
    return env.get(NOSET_VAR, "").strip().lower() in ("1", "true")


def physical_gpus(topology: Any, ids: Sequence[str], label: str) -> list[int]:
    """The visible indices of the GPUs Ray's physical ``ids`` name (a physical index or a UUID each)."""
    by_id: dict[str, int] = {}
    for g in topology.gpus:
        if g.physical_index is not None:
            by_id.setdefault(str(g.physical_index), g.index)
        for uuid in (g.uuid, g.mig_uuid):
            if uuid:
                by_id.setdefault(uuid, g.index)
    out: list[int] = []
    for i in ids:
        index = by_id.get(i)
        if index is None:
            shown = ", ".join(f"{g.index} (physical {g.physical_index}, {g.uuid or 'no UUID'})"
                              for g in topology.gpus) or "none"
            raise PlanError(f"{label}: {NOSET_VAR} is set, so Ray's GPU id {i!r} is physical, but no visible GPU "
                            f"has that physical index or UUID (visible: {shown}); start Ray with the "
                            f"CUDA_VISIBLE_DEVICES its workers see")
        if index not in out:
            out.append(index)
    return sorted(out)


# ------------------------------------------------------------------ the worker hook
class _WorkerBinder:
    """Binds this worker whenever Ray changes its GPUs; remembers the binding it was born with."""

    def __init__(self, mode: Mode, policy: NodePolicy | None, strict: Strictness,
                 within_affinity: bool = False) -> None:
        from ..verify import current_binding

        self.mode = mode
        self.policy = policy
        self.strict = strict
        self.within_affinity = within_affinity
        birth = current_binding()
        self.birth = birth.plan
        self.birth_cpus = birth.cpus
        self.bound: tuple[str, ...] | None = None
        self.report: Any = None
        self.lock = threading.Lock()

    def update(self) -> None:
        from ..bind import bind_current

        ids = tuple(str(i) for i in _ray().get_gpu_ids())
        with self.lock:
            if ids == (self.bound or ()):
                return
            # lenient: nothing escapes into Ray's set_visible_accelerator_ids (a BindError is also an OSError)
            try:
                if not ids:
                    self.report = bind_current(self.birth, strict=self.strict)
                    log.info("Ray worker %d: no GPU now; birth binding put back (%s)", os.getpid(),
                             self.report.applied.describe())
                else:
                    plan = plan_for_worker(self.mode, self.policy, gpu_ids=ids, within=self.birth_cpus,
                                           strict=self.strict, within_affinity=self.within_affinity)
                    self.report = bind_current(plan, strict=self.strict)
            except (NumabindError, OSError) as exc:
                if self.strict:
                    raise
                what = (f"with GPU ids {','.join(ids)} left unbound" if ids
                        else "with no GPU now: its birth binding could not be put back")
                log.warning("Ray worker %d %s: %s", os.getpid(), what, exc)
                self.report = None
            self.bound = ids or None


_binder: _WorkerBinder | None = None


def _wrap_assignment(binder: _WorkerBinder) -> bool:
    try:
        from ray._private import utils as ray_utils
    except ImportError:
        return False
    original = getattr(ray_utils, "set_visible_accelerator_ids", None)
    if not callable(original):
        return False
    if getattr(original, "__numabind__", False):
        return True

    @functools.wraps(original)
    def set_visible_accelerator_ids(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        binder.update()
        return out

    set_visible_accelerator_ids.__numabind__ = True  # type: ignore[attr-defined]
    ray_utils.set_visible_accelerator_ids = set_visible_accelerator_ids
    return True


def setup_hook() -> None:
    """Ray ``worker_process_setup_hook``: bind this worker to its GPUs' node each time Ray assigns them (mode,
    policy and ``within_affinity`` from :func:`runtime_env`; ``NUMABIND_STRICT`` makes failures raise)."""
    global _binder
    policy_text = os.environ.get(POLICY_VAR) or "bind"
    mode, policy = _check(os.environ.get(MODE_VAR) or "node", None if policy_text == "none" else policy_text)
    if _binder is None:
        _binder = _WorkerBinder(mode, policy, strict_from_env(), os.environ.get(WITHIN_VAR) == "1")
    if not _wrap_assignment(_binder):
        log.warning("this Ray (%s) has no ray._private.utils.set_visible_accelerator_ids to follow; workers are "
                    "not bound by the setup hook (decorate actor classes with numabind.integrations.ray."
                    "bind_actor instead)", getattr(_ray(), "__version__", "unknown version"))
        return
    _binder.update()


def last_report() -> Any:
    """The :class:`~numabind.BindReport` of this worker's latest binding by the hook (None before one)."""
    return None if _binder is None else _binder.report


# ------------------------------------------------------------------ actors
def bind_this_actor(name: str, mode: Mode, policy: NodePolicy | None, strict: Strictness | None,
                    within_affinity: bool = False) -> Any:
    """Bind the calling actor (see :func:`bind_actor`); the report, or None when left unbound (lenient)."""
    from ..bind import bind_current
    from ..verify import current_binding

    strict = strict_from_env() if strict is None else strict
    # the CPUs the worker was started with, not a binding the hook may already have made
    within = _binder.birth_cpus if _binder is not None else current_binding().cpus
    try:
        return bind_current(plan_for_worker(mode, policy, within=within, strict=strict,
                                            within_affinity=within_affinity), strict=strict)
    except NumabindError as exc:
        if strict:
            raise
        log.warning("actor %s left unbound: %s", name, exc)
        return None


def bind_actor(cls: T | None = None, *, mode: Mode = "node", policy: NodePolicy | None = "bind",
               strict: Strictness | None = None, within_affinity: bool = False) -> Any:
    """Class decorator, under ``@ray.remote(num_gpus=...)``: the actor binds itself to its GPUs' node(s) first
    thing in ``__init__`` and gains ``numabind_report()``, the :class:`~numabind.BindReport` (None when left
    unbound in lenient mode, with a WARNING)."""
    _check(mode, policy)

    def decorate(klass: T) -> T:
        original_init = getattr(klass, "__init__")   # noqa: B009  (the class's, not an instance's)
        # Ray ships this class to the workers by value (cloudpickle), closures included, with a copy of the
        # module globals they name: so the work is looked up in the worker's own numabind at call time.
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            from numabind.integrations import ray as integration

            self._numabind_report = integration.bind_this_actor(klass.__name__, mode, policy, strict,
                                                                within_affinity)
            original_init(self, *args, **kwargs)

        def numabind_report(self: Any) -> Any:
            return self._numabind_report

        bound: Any = type(klass.__name__, (klass,), {
            "__init__": __init__, "numabind_report": numabind_report, "__doc__": klass.__doc__,
            "__module__": klass.__module__, "__qualname__": klass.__qualname__,
        })
        return bound  # type: ignore[no-any-return]

    return decorate(cls) if cls is not None else decorate
