"""vLLM's general plugin (``vllm.general_plugins``): numabind implements ``vllm.utils.numa_utils`` in every vLLM
process (``docs/howto/vllm.rst``).

Where vLLM's module is not imported yet, a finder answers its import with :mod:`numabind.compat.vllm`; where it
is, the compat module takes its place in ``sys.modules`` and on ``vllm.utils``, and each function and class of
the old module that numabind also defines is replaced on it, so modules that already hold it call numabind.
"""

from __future__ import annotations

import logging
import sys
from types import ModuleType

from ..compat.bootstrap.sitecustomize import ROUTES, announce, install

__all__ = ["HOST", "register"]

#: the module of vLLM's that numabind implements
HOST = "vllm.utils.numa_utils"
log = logging.getLogger(__name__)


def _own_names(compat: ModuleType) -> dict[str, object]:
    """The functions and classes ``compat`` or its ``_vllm_*`` parts define (not those it imports)."""
    package, _, name = compat.__name__.rpartition(".")
    parts = f"{package}._{name}_"
    return {key: value for key, value in vars(compat).items()
            if not key.startswith("__") and callable(value)
            and (getattr(value, "__module__", None) == compat.__name__
                 or str(getattr(value, "__module__", "")).startswith(parts))}


def _adopt(old: ModuleType, compat: ModuleType) -> list[str]:
    """Make ``compat`` vLLM's module from now on, and ``old`` (already imported) call it; the names replaced."""
    replaced = []
    for name, value in _own_names(compat).items():
        if hasattr(old, name):
            setattr(old, name, value)
            replaced.append(name)
    sys.modules[HOST] = compat
    parent = sys.modules.get(HOST.rpartition(".")[0])
    if parent is not None:
        setattr(parent, HOST.rpartition(".")[2], compat)
    return replaced


def register() -> None:
    """The ``vllm.general_plugins`` entry point: route ``vllm.utils.numa_utils`` to numabind (idempotent)."""
    from ..compat import vllm as compat   # the drop-in: loaded only in processes vLLM runs the plugin in

    how = "vLLM plugin numabind, VLLM_PLUGINS may leave it out"
    install({HOST: ROUTES[HOST]}, how, check_path=False)   # numabind is running already: nothing to check
    old = sys.modules.get(HOST)
    if old is not None and old is not compat:
        replaced = _adopt(old, compat)
        log.debug("vLLM's %s was imported before the plugin ran: %d of its names now call numabind (%s)",
                  HOST, len(replaced), ", ".join(sorted(replaced)))
    announce(HOST, compat, how)
