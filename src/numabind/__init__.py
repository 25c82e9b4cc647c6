"""numabind: put processes where their hardware is.

Binds CPU affinity and NUMA memory policy for GPU workers (and any process)
from Python, through a cffi layer over libnuma and the kernel's own system
calls; no ``numactl`` binary needed. Data flows one way:
discover → plan → apply → verify.
"""

from __future__ import annotations

import logging

from .backends import backend_info
from .bind import BindReport, Binding, ThreadResult, bind_current, current_binding
from .cpulist import format_cpulist, parse_cpulist
from .devices import Gpu
from .errors import BindError, NumabindError, PlanError
from .plan import MEM_POLICIES, Plan
from .process import (
    BirthBindError,
    ChildReport,
    birth_report,
    bound,
    configure_subprocess,
    pool_plans,
    popen_kwargs,
    wrap_command,
    worker_slot,
)
from .auto import auto_plan_available
from .rank import local_rank, plan_for_rank
from .strategies import MODES, PlanRow, plan_for_gpu, plan_for_gpus, plan_table
from .topology import Cache, Cpu, Node, Topology, discover

__version__ = "0.1.0"

__all__ = [
    "BindError",
    "BirthBindError",
    "ChildReport",
    "BindReport",
    "Binding",
    "Cache",
    "Cpu",
    "Gpu",
    "MEM_POLICIES",
    "MODES",
    "Node",
    "NumabindError",
    "Plan",
    "PlanError",
    "PlanRow",
    "ThreadResult",
    "Topology",
    "auto_plan_available",
    "backend_info",
    "bind_current",
    "birth_report",
    "bound",
    "configure_subprocess",
    "current_binding",
    "discover",
    "format_cpulist",
    "local_rank",
    "parse_cpulist",
    "plan_for_gpu",
    "plan_for_gpus",
    "plan_for_rank",
    "plan_table",
    "pool_plans",
    "popen_kwargs",
    "worker_slot",
    "wrap_command",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())
