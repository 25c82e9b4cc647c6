"""Placement strategies: which CPUs and memory nodes a GPU worker, a shard or a rank should use (pure: each takes
a :class:`~numabind.topology.Topology` and returns values). The rooms: :mod:`.gpus` (one GPU, a shard),
:mod:`.table` (every GPU, the gate), :mod:`.ranks` (a launcher's ranks), :mod:`.spread` (interleave weights,
threads), :mod:`.common` (what they all read).

Placement of one GPU: its node (an explicit per-GPU list, else ``gpu.numa_node``); the CPU node (that node if it
has CPUs, else the nearest by SLIT distance, then id, with CPUs the process may use); the memory node(s) (the CPU
node if it has memory, else the nearest with memory); the mode's CPUs of the CPU node or (``socket``) its package,
a hybrid CPU's performance cores kept; all within ``allowed_cpus`` and ``allowed_nodes``, an empty result a
:class:`PlanError`.
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
