"""Processes that are bound when they are born (the facade of numabind.process).

* :func:`configure_subprocess` — every ``multiprocessing`` child started by the
  calling thread inside the ``with`` block is bound at birth:

  - ``spawn`` (default ``spawn="inherit"``): CPU affinity and memory policy are
    per-thread attributes that a child inherits from the thread that forks it
    and keeps across ``execve``. numabind binds *only the launching thread*,
    through the cffi backend, for the instant multiprocessing forks and execs
    the child (``multiprocessing.util.spawnv_passfds``), then restores that
    thread. The child is bound from its first instruction: before the
    interpreter starts, before ``__main__`` is re-imported, before any user
    import, and it never needs to import numabind. Strict failures raise from
    ``Process.start()`` in the parent, with the thread already restored.
  - ``spawn`` with ``spawn="in-child"``, and ``forkserver``: the parent adds one
    entry to the *preparation data* multiprocessing pickles for the child
    (``multiprocessing.spawn.get_preparation_data``). The child unpickles that
    dict before ``prepare()`` re-imports the parent's ``__main__``; unpickling
    the entry calls :func:`_child_bind`, which binds the child with
    :func:`~numabind.bind_current`. ``prepare()`` ignores keys it does not
    know. The forkserver process keeps only ``main_path``/``sys_path`` of its
    own preparation data, so it stays unbound; only its children are bound.
    A forkserver child pays the numabind import unless the server preloaded
    it (it preloads ``__main__``, which usually imports numabind).
  - ``fork``: an ``os.register_at_fork(after_in_child=...)`` hook binds the child
    inside ``os.fork()``, before the target runs (any ``os.fork()`` of the
    thread inside the block, including ``subprocess`` with ``preexec_fn``).
  - Only the ``numactl`` backend usable (no native module): ``spawn`` children
    are started through ``numabind/numactl_wrapper.sh`` (put in front of that
    one child's command line, not made the global executable, so the
    forkserver and the resource tracker are never wrapped) and check their
    binding while unpickling; ``fork`` and ``forkserver`` children get CPU
    affinity in-process, and their memory policy cannot be set (a warning, or
    a failure under strict).

* :func:`bound` — a picklable callable that binds, then calls ``fn``.
* :func:`wrap_command` — an argv that starts a command already bound.
* :func:`popen_kwargs` — ``subprocess.Popen`` keyword arguments whose child is
  bound after fork, before ``exec``.
* :func:`pool_plans` — pool ``initializer``/``initargs`` that give each worker
  its own plan from a list, round robin, stable when workers are replaced.
* :func:`node_pages` — pages of a process per NUMA node, from ``numa_maps``.

``Plan(migrate=True)``: a spawn child needs none (its pages are born in
place); a fork or forkserver child moves the pages it inherited, but pages it
still shares with its parent move only with CAP_SYS_NICE, and then they move
for the parent too.
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
