"""What the tests of numabind.compat share (tests/test_compat_*.py, test_hijack_more.py, test_instrument.py,
test_root_links_more.py): fake machines made the compat layer's own, vLLM's config duck types, and fake host
packages (``vllm``, ``sglang``) or a hijacking ``numabind`` for a child to find on its path (a fake torch is
tests/faketorch.py). The fixtures
(``fresh_compat``, ``on_logger``, ``discoveries``) are in conftest.py.
"""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest

from numabind import compat
from numabind.cpulist import parse_cpulist
from numabind.topology import discover

from .fakegpu import add_nvidia_gpu
from .fakesys import FakeMachine, two_sockets


# ----------------------------------------------------------------------------- machines
def use(topology):
    """Make ``topology`` the machine of the compat layer (as if discovered in this process)."""
    compat.refresh_topology(topology)
    return topology


def dgx(root, **kw):
    """2 sockets x 16 CPUs (node 0: 0-7,16-23; node 1: 8-15,24-31), 4 GPUs per socket; a non-PCT CPU."""
    two_sockets(root, cpus_per_socket=16)
    for k in range(8):
        add_nvidia_gpu(root, f"0000:{0x18 + 0x10 * k:02x}:00.0", numa_node=k // 4, minor=k)
    return discover(root)


def machine(root, nodes: dict, *, allowed=None, mems=None, gpus=(), model="Fake CPU @ 2.00GHz", cppc=None):
    """A fake machine: ``nodes`` maps node id -> CPUs (a cpulist or ids); ``gpus`` lists each GPU's node;
    ``allowed``: the CPUs the process may use (its cpuset and its affinity)."""
    m = FakeMachine(root)
    every = set()
    for nid, cpus in nodes.items():
        ids = parse_cpulist(cpus) if isinstance(cpus, str) else frozenset(cpus)
        m.add_node(nid, ids)
        every |= ids
    for cpu in sorted(every):
        m.set_cpu_topology(cpu, 0, cpu)
    m.set_status(every if allowed is None else allowed, set(nodes) if mems is None else mems)
    if allowed is not None:   # the CPUs it may use are its cpuset's too (the limit), not only its affinity
        m.set_cgroup2("/numabind-test", allowed, set(nodes) if mems is None else mems)
    m.set_model_name(model)
    if cppc is not None:
        m.set_cppc(cppc)
    m.write()
    for k, node in enumerate(gpus):
        add_nvidia_gpu(root, f"0000:{0x18 + 0x10 * k:02x}:00.0", numa_node=node, minor=k)
    return discover(root)


def host_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def host_node_of(cpu: int) -> int:
    node = discover().node_of_cpu(cpu)
    if node is None:
        pytest.skip(f"this kernel lists CPU {cpu} in no NUMA node")
    return node


def absent_node() -> int:
    """A node id this kernel does not have: binding memory there is always refused."""
    real = discover()
    return max(set(real.nodes) | set(real.online_nodes) | set(real.possible_nodes)) + 1


def host_shaped(root, *, gpus=1):
    """A fake machine made of this process's real CPUs on their real node (every GPU on it)."""
    cpu = host_cpus()[-1]
    node = host_node_of(cpu)
    cpus = [c for c in host_cpus() if host_node_of(c) == node]
    return machine(root, {node: cpus}, gpus=[node] * gpus), node, cpus


# ----------------------------------------------------------------------------- vLLM's configs
def pc_config(**overrides):
    """The ParallelConfig fields vLLM's numa_utils reads (vLLM's own tests use the same duck type)."""
    fields = dict(
        numa_bind=False, numa_bind_nodes=None, numa_bind_cpus=None, _numa_bind_auto=False,
        distributed_executor_backend="mp", data_parallel_backend="mp", nnodes_within_dp=1,
        data_parallel_rank_local=0, data_parallel_index=0, pipeline_parallel_size=1, tensor_parallel_size=1,
    )
    fields.update(overrides)
    return types.SimpleNamespace(**fields)


def vllm_config(**overrides):
    return types.SimpleNamespace(parallel_config=pc_config(**overrides))


# ----------------------------------------------------------------------------- what a child finds on its path
#: The host modules numabind stands in for, and the compat module of each.
HOSTS = ("vllm.utils.numa_utils", "sglang.srt.utils.numa_utils")
COMPAT = {"vllm.utils.numa_utils": "numabind.compat.vllm", "sglang.srt.utils.numa_utils": "numabind.compat.sglang"}


def make_hosts(root: Path) -> Path:
    """Fake ``vllm`` and ``sglang`` packages with their NUMA modules at the real paths."""
    for host in HOSTS:
        parts = host.split(".")
        for depth in range(1, len(parts)):
            pkg = root.joinpath(*parts[:depth])
            pkg.mkdir(parents=True, exist_ok=True)
            (pkg / "__init__.py").touch()
        root.joinpath(*parts[:-1], parts[-1] + ".py").write_text("HOST_OWN = True\n")
    return root


def evil_tree(where, marker, site: bool = True) -> None:
    """A ``numabind`` package (and, with ``site``, a ``sitecustomize``) in ``where`` that writes ``marker``
    when imported. (A ``sitecustomize`` on PYTHONPATH is the user's own: the child runs it, by design.)"""
    pkg = where / "numabind"
    pkg.mkdir(parents=True)
    code = f"open({str(marker)!r}, 'a').write('hijacked\\n')\n"
    (pkg / "__init__.py").write_text(code + "def main(*a, **k):\n    return 0\n")
    (pkg / "__main__.py").write_text(code)
    if site:
        (where / "sitecustomize.py").write_text(code)


def bare_env(**extra: str) -> dict[str, str]:
    """This process's environment without Python's or numabind's variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "NUMABIND_", "_NUMABIND_"))}
    env.update(extra)
    return env

