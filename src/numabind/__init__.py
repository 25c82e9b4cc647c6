"""numabind: put processes where their hardware is.

Binds CPU affinity and NUMA memory policy for GPU workers (and any process) from Python, through a cffi layer
over libnuma and the kernel's own system calls; no ``numactl`` binary needed. Data flows one way:
discover → plan → apply → verify. Each public name is imported from its module on first use (PEP 562).
"""

from sys import modules as _modules

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing: `import numabind` stays cheap

from ._version import __version__

#: Public names by layer (module that defines them -> names), like psutil's ``__all__`` groups.
_LAYERS: dict[str, tuple[str, ...]] = {
    # values and errors
    "errors": ("NumabindError", "PlanError", "BindError", "BirthBindError", "BindWarning", "NoSuchProcess",
               "AccessDenied"),
    "cpulist": ("parse_cpulist", "format_cpulist"),
    "plan": ("Plan", "MEM_POLICIES", "Allowed"),
    # discovery
    "topology": ("discover", "Topology", "Node", "Cpu", "Cache"),
    "devices": ("Gpu",),
    # planning
    "strategies": ("plan_for_gpu", "plan_for_gpus", "plan_table", "PlanRow", "MODES", "weights_from_bandwidth",
                   "bandwidth_weights"),
    "rank": ("local_rank", "plan_for_rank"),
    "auto": ("auto_plan_available",),
    # applying and verifying
    "bind": ("bind_current", "bind_thread", "BindReport", "ThreadResult", "interleave_weights",
             "set_interleave_weights"),
    "verify": ("verify_current", "current_binding", "Binding"),
    # one thread per core inside this process
    "threads": ("pin_threads", "PinReport", "PinnedThread"),
    # named threads inside a worker's slice
    "named": ("pin_named_threads", "watch_named_threads", "NamedReport", "NamedThread"),
    # the memory policy of one buffer (mbind), read back per page
    "memory": ("bind_memory", "page_placement", "MemoryReport", "PagePlacement"),
    # processes that are already running (taskset -a -p + migratepages)
    "relocate": ("move", "MoveReport", "ProcessMove"),
    # where a process's memory is (numabind stat)
    "residency": ("locality", "Locality"),
    # will the plans hold here (numabind check)
    "preflight": ("check", "CheckReport"),
    "backends": ("backend_info",),
    # processes bound at birth
    "process": ("configure_subprocess", "bound", "wrap_command", "popen_kwargs", "pool_plans", "worker_slot",
                "birth_report", "ChildReport", "ChildBindings", "BoundCall"),
}
_WHERE = {name: module for module, names in _LAYERS.items() for name in names}

__all__ = [name for names in _LAYERS.values() for name in names]


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'numabind' has no attribute {name!r}")
    full = f"{__name__}.{module}"
    __import__(full)      # not importlib.import_module: importing importlib (and warnings) costs ~5 % of a look
    value = getattr(_modules[full], name)
    globals()[name] = value          # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def _add_null_handler() -> None:
    """The library's NullHandler, when logging is in use already (else numabind._base adds it on first use)."""
    import sys

    if "logging" in sys.modules:
        from ._base import real_logger

        real_logger("numabind")


_add_null_handler()

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs: the same names, imported eagerly and re-exported
    # explicitly (`X as X`), so that `mypy --strict` accepts `numabind.X` and `from numabind import X` in users' code
    from .auto import auto_plan_available as auto_plan_available
    from .backends import backend_info as backend_info
    from .bind import (BindReport as BindReport, ThreadResult as ThreadResult, bind_current as bind_current,
                       bind_thread as bind_thread, interleave_weights as interleave_weights,
                       set_interleave_weights as set_interleave_weights)
    from .cpulist import format_cpulist as format_cpulist, parse_cpulist as parse_cpulist
    from .devices import Gpu as Gpu
    from .errors import (AccessDenied as AccessDenied, BindError as BindError, BirthBindError as BirthBindError,
                         BindWarning as BindWarning, NoSuchProcess as NoSuchProcess, NumabindError as NumabindError,
                         PlanError as PlanError)
    from .memory import (MemoryReport as MemoryReport, PagePlacement as PagePlacement, bind_memory as bind_memory,
                         page_placement as page_placement)
    from .plan import MEM_POLICIES as MEM_POLICIES, Allowed as Allowed, Plan as Plan
    from .relocate import MoveReport as MoveReport, ProcessMove as ProcessMove, move as move
    from .process import (BoundCall as BoundCall, ChildBindings as ChildBindings, ChildReport as ChildReport,
                          birth_report as birth_report, bound as bound, configure_subprocess as configure_subprocess,
                          pool_plans as pool_plans, popen_kwargs as popen_kwargs, wrap_command as wrap_command,
                          worker_slot as worker_slot)
    from .rank import local_rank as local_rank, plan_for_rank as plan_for_rank
    from .preflight import CheckReport as CheckReport, check as check
    from .residency import Locality as Locality, locality as locality
    from .strategies import (MODES as MODES, PlanRow as PlanRow, bandwidth_weights as bandwidth_weights,
                             plan_for_gpu as plan_for_gpu, plan_for_gpus as plan_for_gpus, plan_table as plan_table,
                             weights_from_bandwidth as weights_from_bandwidth)
    from .named import (NamedReport as NamedReport, NamedThread as NamedThread, pin_named_threads as pin_named_threads,
                        watch_named_threads as watch_named_threads)
    from .threads import PinnedThread as PinnedThread, PinReport as PinReport, pin_threads as pin_threads
    from .topology import Cache as Cache, Cpu as Cpu, Node as Node, Topology as Topology, discover as discover
    from .verify import Binding as Binding, current_binding as current_binding, verify_current as verify_current
