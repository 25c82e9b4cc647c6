"""Processes that are bound when they are born (the facade of numabind.process): multiprocessing children
(:func:`configure_subprocess`; spawn by inheritance from the launching thread, forkserver and
``spawn="in-child"`` through the preparation data, fork by an at-fork hook), callables (:func:`bound`), commands
(:func:`wrap_command`, :func:`popen_kwargs`) and pool workers (:func:`pool_plans`). :doc:`/guide` says how.
"""

from ..errors import BirthBindError
from .._proc import NodePages, node_pages
from .commands import BoundCall, _exec_main, bound, exec_bound, popen_kwargs, wrap_command
from .hooks import configure_subprocess
from .pools import _claim_and_bind, pool_plans, worker_slot
from .reports import ChildBindings, ChildReport, birth_report

__all__ = [
    "BirthBindError",
    "BoundCall",
    "ChildBindings",
    "ChildReport",
    "NodePages",
    "birth_report",
    "bound",
    "configure_subprocess",
    "exec_bound",
    "node_pages",
    "pool_plans",
    "popen_kwargs",
    "worker_slot",
    "wrap_command",
]
