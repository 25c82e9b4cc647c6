"""Placement strategies: which CPUs and memory nodes a GPU worker, a shard or a rank should use (pure).

Every function here takes a :class:`~numabind.topology.Topology` and returns values; nothing calls the kernel
(``topology=None`` only means "call :func:`numabind.topology.discover` first"; listing every GPU or NIC of the
machine for a rank reads it). The automatic-binding gate's one live input, the process's current binding, is read
by :func:`numabind.auto.auto_plan_available`, which then calls :func:`auto_gate`. The rooms: :mod:`.gpus` (one GPU,
a shard), :mod:`.table` (every GPU, the gate), :mod:`.ranks` (a launcher's ranks), :mod:`.spread` (interleave
weights, threads), :mod:`.common` (what they all read).

Placement of one GPU:

1. its node: an explicit per-GPU node list, else ``gpu.numa_node``;
2. the CPU node: that node if it has CPUs, else the nearest node (SLIT distance, then id) that has CPUs the
   process may use;
3. the memory node(s): the CPU node if it has memory, else the nearest node with memory the process may use
   (memory-only and CPU-only layouts);
4. the mode picks CPUs of the CPU node (``node``, ``exclusive``, ``core-complex``, ``pct``) or of its whole
   package (``socket``);
5. CPUs are intersected with ``topology.allowed_cpus`` (the cpuset: never the affinity the process inherited,
   unless ``within_affinity=True`` asks for it) and memory nodes with ``topology.allowed_nodes``; an empty result
   is a :class:`PlanError`. A plan that leaves the inherited affinity says so in its reason;
6. on a hybrid CPU (:attr:`~numabind.topology.Topology.performance_cpus`) the mode keeps the allowed performance
   cores of the node or package, and the reason says so (explicit ``cpus`` are kept as given).
"""

from .common import narrowed_to_affinity, prefer_performance, topology_or_discover
from .gpus import (MODE_SUMMARIES, MODES, PCT_SKUS, POLICIES, PctSku, pct_config, pct_priority_cpus, plan_for_gpu,
                   plan_for_gpus)
from .ranks import (SHARED_MODES, UNBIND_FLAGS, RankLimit, RankPlacement, plan_cpu_rank, plan_gpu_share, plan_rank,
                    rank_limit)
from .spread import THREAD_ORDERS, bandwidth_weights, thread_placement, weights_from_bandwidth
from .table import PlanRow, auto_gate, plan_table

__all__ = ["MODES", "MODE_SUMMARIES", "PCT_SKUS", "POLICIES", "SHARED_MODES", "THREAD_ORDERS", "UNBIND_FLAGS",
           "PctSku", "PlanRow", "RankLimit", "RankPlacement", "auto_gate", "bandwidth_weights", "narrowed_to_affinity",
           "pct_config", "pct_priority_cpus", "plan_cpu_rank", "plan_for_gpu", "plan_for_gpus", "plan_gpu_share",
           "plan_rank", "plan_table", "prefer_performance", "rank_limit", "thread_placement",
           "topology_or_discover", "weights_from_bandwidth"]
