"""Run torch's own NUMA binding (``torchrun --numa-binding``) against a fake GPU machine.

torch decides its binding in ``torch.numa.binding`` from two probes: CUDA's
device properties (the GPU's PCI address; a CPU build of torch has no CUDA)
and absolute ``/sys`` paths. :func:`redirect` points both at a fake tree made
by tests/fakesys.py and tests/fakegpu.py (GPU ``i`` is the tree's ``i``-th GPU
in PCI order, as CUDA numbers them with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``);
everything else, torchrun included, is torch's real code.

``python -m tests.torch_numa torchrun ROOT TORCHRUN-ARGS...`` runs
``torch.distributed.run`` redirected that way (its workers are started by
torch through ``numactl --physcpubind``, so the fake machine's CPU ids must be
this host's); ``python -m tests.torch_numa cpus ROOT ALLOWED MODE...`` prints
the CPUs torch would give each local rank. The tests run both in a child, so
torch is never imported into the test process.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import sys
import types
from collections.abc import Iterable, Iterator
from typing import Any


def binding_module() -> Any | None:
    """``torch.numa.binding`` when this torch has the strategy functions the tests call, else None."""
    try:
        from torch.numa import binding
    except ImportError:
        return None
    needed = ("_get_logical_cpus_to_bind_to", "NumaOptions", "AffinityMode")
    return binding if all(hasattr(binding, n) for n in needed) else None


def fake_gpu_addresses(root: str) -> list[str]:
    """The NVIDIA display/3D devices of the fake tree, in PCI order."""
    base = os.path.join(root, "sys/bus/pci/devices")
    out = []
    for addr in sorted(os.listdir(base)):
        with open(os.path.join(base, addr, "vendor")) as f:
            if f.read().strip() == "0x10de":
                out.append(addr)
    return out


@contextlib.contextmanager
def redirect(root: str, allowed: Iterable[int] | None = None) -> Iterator[Any]:
    """Within the block, torch's NUMA binding sees the machine under ``root``.

    ``allowed`` replaces the calling thread's affinity torch reads (for fake
    machines whose CPU ids are not this host's); None keeps the real one.
    """
    import torch

    binding = binding_module()
    if binding is None:
        raise RuntimeError("this torch has no torch.numa.binding strategy functions")
    addresses = fake_gpu_addresses(root)

    def fake_path(path: Any) -> Any:
        return os.path.join(root, path[1:]) if isinstance(path, str) and path.startswith("/sys/") else path

    def fake_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        return builtins.open(fake_path(path), *args, **kwargs)

    fake_os = types.ModuleType("os")
    fake_os.__dict__.update(os.__dict__)
    fake_os.listdir = lambda path=".": os.listdir(fake_path(path))   # type: ignore[attr-defined]
    if allowed is not None:
        cpus = set(allowed)
        fake_os.sched_getaffinity = lambda pid: set(cpus)              # type: ignore[attr-defined]

    def properties(index: Any) -> Any:
        i = index.index if isinstance(index, torch.device) else int(index)
        domain, bus, devfn = addresses[i].split(":")
        return types.SimpleNamespace(pci_domain_id=int(domain, 16), pci_bus_id=int(bus, 16),
                                     pci_device_id=int(devfn.split(".")[0], 16), name=f"fake GPU {i}")

    saved = (binding.__dict__.get("open"), binding.os, torch.cuda.get_device_properties, torch.cuda.device_count)
    binding.open = fake_open
    binding.os = fake_os
    torch.cuda.get_device_properties = properties
    torch.cuda.device_count = lambda: len(addresses)
    try:
        yield binding
    finally:
        if saved[0] is None:
            del binding.open
        else:
            binding.open = saved[0]
        binding.os, torch.cuda.get_device_properties, torch.cuda.device_count = saved[1:]


def torch_cpus(binding: Any, gpu_index: int, mode: str) -> frozenset[int]:
    """The CPUs torch's ``--numa-binding=mode`` gives the worker of local rank ``gpu_index``."""
    options = binding.NumaOptions(affinity_mode=binding.AffinityMode(mode))
    return frozenset(binding._get_logical_cpus_to_bind_to(gpu_index=gpu_index, numa_options=options))


def main(argv: list[str]) -> int:
    """``torchrun ROOT ARGS...``: torchrun redirected; ``cpus ROOT ALLOWED MODE...``: print torch's CPUs as JSON.

    ``cpus`` prints ``{"mode": [[cpus of the worker of local rank 0], ...], ...}`` for every GPU of the
    tree (``ALLOWED`` is the affinity torch reads, a cpulist), or ``{"unavailable": why}``.
    """
    import json

    command, root, rest = argv[0], argv[1], argv[2:]
    if command == "torchrun":
        from torch.distributed.run import main as torchrun

        with redirect(root):
            torchrun(rest)
        return 0
    if command == "cpus":
        import torch

        from numabind.cpulist import parse_cpulist

        if binding_module() is None:
            print(json.dumps({"unavailable": f"torch {torch.__version__} has no torch.numa.binding strategies"}))
            return 0
        allowed, modes = parse_cpulist(rest[0]), rest[1:]
        with redirect(root, allowed=allowed) as binding:
            count = len(fake_gpu_addresses(root))
            print(json.dumps({mode: [sorted(torch_cpus(binding, i, mode)) for i in range(count)]
                              for mode in modes}))
        return 0
    raise SystemExit(f"unknown command {command!r}: torchrun or cpus")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
