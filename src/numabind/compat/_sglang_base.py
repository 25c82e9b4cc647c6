"""What every part of the SGLang drop-in shares: SGLang's logger, its boolean variables, its failure rule."""

from __future__ import annotations

import logging
import os
from typing import Any

from ..errors import PlanError
from . import NumaBindingUnavailable, on_live_machine

__all__ = ["SGLANG_FALSE", "SGLANG_TRUE", "NumaListError", "crash_on_failure", "env_bool", "fail", "logger",
           "process_cpus"]

#: SGLang's logger name for ``sglang.srt.utils.numa_utils``.
logger = logging.getLogger("sglang.srt.utils.numa_utils")

#: The spellings of SGLang's boolean environment variables, any case.
SGLANG_TRUE = ("true", "1", "yes", "y")
SGLANG_FALSE = ("false", "0", "no", "n")


class NumaListError(PlanError, IndexError):
    """A per-GPU list (``--numa-node``, ``SGLANG_CPU_OMP_THREADS_BIND``) has no entry for a GPU or rank."""


def env_bool(name: str, default: bool) -> bool:
    """One of SGLang's boolean environment variables: true/1/yes/y or false/0/no/n, any case; unset: ``default``.
    Anything else is a PlanError naming the variable (a typo must not silently mean the default)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.lower()
    if value in SGLANG_TRUE:
        return True
    if value in SGLANG_FALSE:
        return False
    raise PlanError(f"{name}={raw!r} is not a boolean; use one of {', '.join(SGLANG_TRUE)} or "
                    f"{', '.join(SGLANG_FALSE)}")


def crash_on_failure() -> bool:
    return env_bool("SGLANG_CRASH_ON_NUMA_BIND_FAILURE", False)


def fail(reason: str) -> None:
    """SGLang's failure: a WARNING, raised as RuntimeError under ``SGLANG_CRASH_ON_NUMA_BIND_FAILURE``."""
    logger.warning("%s", reason)
    if crash_on_failure():
        raise NumaBindingUnavailable(f"{reason} (SGLANG_CRASH_ON_NUMA_BIND_FAILURE is set)")


def process_cpus(topology: Any) -> frozenset[int]:
    """The CPUs this process may use as SGLang means it: on the live machine the calling thread's
    affinity (``os.sched_getaffinity``, SGLang's own source), else the replayed or pinned topology's."""
    if on_live_machine():
        return frozenset(os.sched_getaffinity(0))
    return frozenset(topology.allowed_cpus)
