"""A drop-in for vLLM's ``vllm.utils.numa_utils``, bound in-process by numabind.

It takes the same decisions as vLLM (worker and EngineCore plans, explicit
``--numa-bind-nodes`` / ``--numa-bind-cpus``, Priority Core Turbo cores on
Granite Rapids, preferred memory for automatic binding, the automatic-binding
gate) from the same ``parallel_config`` fields, but it needs no ``numactl``:
children are bound at birth by :func:`numabind.configure_subprocess`, and a
refused memory policy degrades inside the child (bind → preferred → CPU only),
each step logged, instead of probing ``numactl ... true`` in the parent.

Only attributes of ``parallel_config`` are read; vLLM itself is not imported.
"""

from __future__ import annotations

import contextlib
import logging
import os

from ..errors import PlanError
from ..plan import Plan
from ..auto import auto_plan_available
from ..strategies import plan_for_gpu, plan_for_gpus

__all__ = [
    "can_auto_bind",
    "configure_subprocess",
    "enginecore_plan",
    "get_auto_numa_nodes",
    "log_current_affinity_state",
    "worker_plan",
]

log = logging.getLogger(__name__)

#: vLLM's default worker start method when VLLM_WORKER_MULTIPROC_METHOD is unset.
_VLLM_DEFAULT_METHOD = "fork"


def _topology(topology):
    if topology is None:
        from ..topology import discover

        topology = discover()
    return topology


def get_auto_numa_nodes(topology=None) -> list[int] | None:
    """The NUMA node of every visible GPU in visible order, or None if any is unknown."""
    topology = _topology(topology)
    gpus = sorted(topology.gpus, key=lambda g: g.index)
    if not gpus or any(g.numa_node is None for g in gpus):
        return None
    nodes = [g.numa_node for g in gpus]
    log.info("auto-detected NUMA nodes for GPUs: %s", nodes)
    return nodes


def _node_list(parallel_config, topology) -> list[int]:
    nodes = parallel_config.numa_bind_nodes
    if nodes is None:
        nodes = get_auto_numa_nodes(topology)
        if nodes is None:
            raise PlanError("no GPU-to-NUMA mapping: pass --numa-bind-nodes (numa_bind_nodes) explicitly")
        parallel_config.numa_bind_nodes = list(nodes)
    return list(nodes)


def _policy(parallel_config) -> str:
    # vLLM binds memory hard when the user asked for binding, and only prefers
    # the node when it decided to bind on its own.
    return "preferred" if getattr(parallel_config, "_numa_bind_auto", False) else "bind"


def worker_plan(parallel_config, local_rank: int, dp_local_rank: int | None = None, topology=None) -> Plan:
    """The plan of one TP/PP worker: its GPU's node (or its explicit CPU list, or PCT cores)."""
    topology = _topology(topology)
    gpu_index = parallel_config.get_local_gpu_index(local_rank, dp_local_rank)
    nodes = _node_list(parallel_config, topology)
    cpus = parallel_config.numa_bind_cpus
    return plan_for_gpu(gpu_index, mode="node" if cpus is not None else "pct", topology=topology,
                        policy=_policy(parallel_config), nodes=nodes, cpus=cpus)


def _shard_indices(parallel_config, dp_local_rank: int | None, count: int) -> list[int]:
    pc = parallel_config
    local_launch = (pc.distributed_executor_backend not in ("ray", "external_launcher")
                    and pc.data_parallel_backend != "ray" and pc.nnodes_within_dp == 1)
    if not local_launch:
        return list(range(count))
    start = pc.get_local_gpu_index(0, dp_local_rank)
    indices = list(range(start, min(start + pc.world_size, count)))
    return indices or [0]


def enginecore_plan(parallel_config, local_rank: int, dp_local_rank: int | None = None, topology=None) -> Plan:
    """The plan of an EngineCore: every node of its DP shard's GPUs.

    Per-worker CPU lists are ignored on purpose: the EngineCore's CPUs must be
    a superset of each worker's so that workers spawned from it can narrow
    their affinity; numabind's shard plans guarantee that by construction.
    """
    topology = _topology(topology)
    nodes = _node_list(parallel_config, topology)
    indices = _shard_indices(parallel_config, dp_local_rank, len(nodes))
    mode = "node" if parallel_config.numa_bind_cpus is not None else "pct"
    return plan_for_gpus(indices, topology, mode=mode, policy=_policy(parallel_config), nodes=nodes)


def can_auto_bind(parallel_config, local_rank: int, dp_local_rank: int | None = None, topology=None,
                  env=None) -> tuple[bool, str]:
    """Whether vLLM-style automatic binding should happen here, and why (never raises).

    Unlike vLLM's gate it does not require numactl on PATH.
    """
    env = os.environ if env is None else env
    pc = parallel_config
    try:
        method = env.get("VLLM_WORKER_MULTIPROC_METHOD", _VLLM_DEFAULT_METHOD)
        if method != "spawn":
            return False, f"automatic binding needs the spawn start method (VLLM_WORKER_MULTIPROC_METHOD={method})"
        if pc.distributed_executor_backend not in ("mp", "uni") or pc.data_parallel_backend != "mp":
            return False, "automatic binding needs local mp/uni launchers"
        if getattr(pc, "assigned_physical_gpu_ids", None) is not None:
            return False, "automatic binding does not support --device-ids remapping"
        topology = _topology(topology)
        ok, why = auto_plan_available(topology)
        if not ok:
            return False, why
        nodes = get_auto_numa_nodes(topology)
        if not nodes:
            return False, "no GPU-to-NUMA topology"
        last_rank = max(local_rank, pc.local_world_size - 1)
        last_dp = (pc.data_parallel_rank_local or 0) + max(pc.data_parallel_size_local - 1, 0)
        last_gpu = max(pc.get_local_gpu_index(last_rank, dp_local_rank),
                       pc.get_local_gpu_index(last_rank, last_dp))
        if last_gpu >= len(nodes):
            return False, f"GPU index {last_gpu} is beyond the {len(nodes)} visible GPUs"
        empty = sorted(n for n in set(nodes) if not topology.nodes[n].cpus)
        if empty:
            return False, f"NUMA nodes {empty} have no CPUs"
        pc.numa_bind_nodes = list(nodes)
        return True, why
    except Exception as exc:  # the gate never fails startup
        log.debug("automatic NUMA binding gate failed", exc_info=True)
        return False, f"gate failed: {exc}"


@contextlib.contextmanager
def configure_subprocess(vllm_config, local_rank: int, dp_local_rank: int | None = None,
                         process_kind: str = "worker", topology=None):
    """Bind every process started inside at birth, as vLLM's helper does with numactl."""
    pc = vllm_config.parallel_config
    if process_kind not in ("worker", "EngineCore"):
        raise ValueError(f"Unknown process_kind {process_kind!r}; expected 'worker' or 'EngineCore'.")
    if pc.numa_bind is None:
        ok, why = can_auto_bind(pc, local_rank, dp_local_rank, topology)
        pc.numa_bind = ok
        pc._numa_bind_auto = ok
        (log.info if ok else log.debug)("automatic NUMA binding %s: %s", "on" if ok else "off", why)
    if not pc.numa_bind:
        yield
        return
    make = enginecore_plan if process_kind == "EngineCore" else worker_plan
    plan = make(pc, local_rank, dp_local_rank, topology)
    log.info("launching %s subprocess (local_rank=%s, dp_local_rank=%s) bound to %s",
             process_kind, local_rank, dp_local_rank, plan.describe())
    from ..process import configure_subprocess as bind_children

    with bind_children(plan):
        yield


def log_current_affinity_state(label: str) -> None:
    """Log this process's binding (what vLLM logs with ``numactl --show``)."""
    from ..bind import current_binding

    log.info("%s: %s", label, current_binding().describe().replace("\n", "; "))
