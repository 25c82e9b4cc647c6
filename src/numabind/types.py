"""The words numabind's public functions take, as :data:`typing.Literal` types, each defined here once, so that a
type checker catches a misspelt word (``mode="nodes"``). The tuples checked at run time (:data:`numabind.MODES`,
:data:`numabind.MEM_POLICIES`, ...) hold the same words (``tests/test_types.py``).
"""

from typing import Literal, Union

__all__ = ["BackendName", "MemPolicy", "Mode", "NodePolicy", "Strictness", "ThreadMode"]

#: A placement mode of the GPU planners (:data:`numabind.MODES`).
Mode = Literal["node", "socket", "exclusive", "core-complex", "pct"]

#: A memory policy of a :class:`~numabind.Plan` (:data:`numabind.MEM_POLICIES`).
MemPolicy = Literal["bind", "preferred", "preferred-many", "interleave", "weighted-interleave", "local",
                    "default"]

#: A memory policy over a set of nodes, what the planners and ``numabind plan --policy`` take
#: (``numabind.plan.NODE_POLICIES``).
NodePolicy = Literal["bind", "preferred", "preferred-many", "interleave"]

#: How a binding that cannot be applied in full is handled: ``True`` raises (and rolls back), ``False``
#: degrades with a warning per step, ``"partial"`` degrades but raises when nothing of the plan is in force.
#: Every public function that takes ``strict`` takes ``Strictness | None`` (None: ``$NUMABIND_STRICT``).
Strictness = Union[bool, Literal["partial"]]

#: A backend's name (``backend=``, ``$NUMABIND_BACKEND``; ``numabind.backends.BACKEND_NAMES``).
BackendName = Literal["libnuma", "syscall", "numactl", "none"]

#: Which threads a bind or a verify acts on (``threads=``; ``numabind.backends.THREAD_MODES``).
ThreadMode = Literal["matching", "all", "current"]
