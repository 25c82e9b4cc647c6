"""Issue 15, item 5: discovery of hostile trees returns or raises NumabindError — nothing else,
and never hangs or exhausts memory.

hypothesis builds a real machine tree (tests/fakesys.py) and then damages it: files with
non-ASCII digits (``²``, ``١``), 5000-digit numbers, NUL bytes, random bytes, FIFOs where files
belong, symlinks to devices (``/dev/zero``, ``/dev/urandom``), missing files, directories named
like ``node²``. Each example runs discover() in a child process with a wall-clock guard, so a
hang or a crash fails the example instead of the whole test run; the guard is a safety net,
not a speed assertion (it is two orders of magnitude above a normal discovery).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numabind.errors import NumabindError
from numabind.topology import discover

from .fakegpu import add_amd_gpu, add_kfd_cpu_node, add_nvidia_gpu, nv_uuid
from .fakesys import FACTORIES

REPO = Path(__file__).resolve().parent.parent

#: Hostile trees checked per run (one child process each).
EXAMPLES = 40
#: Seconds a child may take before the example counts as a hang.
GUARD_S = 60

_CHILD = r"""
import json, sys, traceback
from numabind.errors import NumabindError
from numabind.topology import discover
try:
    topo = discover(sys.argv[1])
    topo.to_dict()
    print(json.dumps({"outcome": "ok", "nodes": len(topo.nodes)}))
except NumabindError as exc:
    print(json.dumps({"outcome": "error", "type": type(exc).__name__, "msg": str(exc)[:300]}))
except BaseException as exc:
    print(json.dumps({"outcome": "crash", "type": type(exc).__name__,
                      "trace": traceback.format_exc()[-3000:]}))
"""

# What real trees contain, with the hostile versions that replace them.
HOSTILE_TEXT = [
    "²²²\n", "١٢\n", "0-3,٥\n", "9" * 5000 + "\n", "0-" + "9" * 5000 + "\n", "\0", "0-3\0\n",
    "\n\0\0\0", "", " ", "-1\n", "0x" + "f" * 3000 + "\n", "f" * 9000 + "\n",
    ",".join(["ffffffff"] * 3000) + "\n", "0-4294967295\n", "MemTotal: ²²² kB\n",
    "Node 0 MemTotal: " + "9" * 5000 + " kB\n", "0::/a\0b\n", "3:cpuset:/../../..\n",
    "\udcff\n".encode("utf-8", "surrogateescape").decode("utf-8", "replace"),
    "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n" * 3, "10 20 30 40 50 60 70\n", "L1\n",
    "Data\0Unified\n", "0-3:0/0\n", "3-0\n", ",,,\n",
]
SPECIAL = ["fifo", "dev/zero", "dev/urandom", "dev/null", "dir", "missing", "loop"]


def damage(root: Path, rel: str, how) -> None:
    path = root / rel
    if path.is_dir() and not path.is_symlink():
        return
    if os.path.lexists(path):
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(how, bytes):
        path.write_bytes(how)
    elif how == "fifo":
        os.mkfifo(path)
    elif how.startswith("dev/"):       # a link to a device: absolute, so the root's own /dev (a chroot's view)
        device = root / how
        if not os.path.lexists(device):
            device.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.mknod(device, stat.S_IFCHR | 0o600, os.makedev(1, 5 if how == "dev/zero" else 9))
            except PermissionError:    # no CAP_MKNOD (not root): a FIFO is as far from a regular file
                os.mkfifo(device)
        os.symlink("/" + how, path)
    elif how == "dir":
        path.mkdir()
    elif how == "loop":
        os.symlink(path.name, path)
    elif how == "missing":
        pass
    else:
        path.write_text(how, errors="surrogateescape")


@st.composite
def hostile_trees(draw):
    kind = draw(st.sampled_from(["two_sockets", "snc", "memory_only_nodes", "offline_cpus",
                                 "cgroup_restricted", "cgroup_v1_restricted", "legacy_cpuset",
                                 "offline_node0", "padded", "old_kernel", "no_numa_dir"]))
    n = draw(st.integers(1, 6))
    picks = [(draw(st.booleans()), draw(st.integers(0, 10 ** 9))) for _ in range(n)]
    hows = [draw(st.one_of(st.sampled_from(HOSTILE_TEXT), st.sampled_from(SPECIAL),
                           st.binary(max_size=64))) for _ in range(n)]
    gpus = draw(st.booleans())
    env = draw(st.one_of(st.none(), st.sampled_from(HOSTILE_ENV)))
    dirs = draw(st.lists(st.sampled_from([
        "sys/devices/system/node/node²", "sys/devices/system/node/node١", "sys/devices/system/cpu/cpu²",
        "sys/devices/system/cpu/cpu0/cache/index²", "sys/devices/system/node/node" + "9" * 40,
        "sys/devices/system/node/node0/cpu٣", "sys/fs/cgroup/²", "sys/class/kfd/kfd/topology/nodes/²",
        "sys/bus/pci/devices/0000:²1:00.0"]), max_size=2))
    return kind, gpus, env, list(zip(picks, hows)), dirs


def add_gpus(root: Path) -> None:
    """Two NVIDIA and two AMD GPUs (with KFD) on the machine's nodes."""
    add_nvidia_gpu(root, "0000:1b:00.0", numa_node=0, local_cpulist="0-3", uuid=nv_uuid(0), minor=0)
    add_nvidia_gpu(root, "0000:9a:00.0", numa_node=1, local_cpulist="4-7", uuid=nv_uuid(1), minor=1)
    add_kfd_cpu_node(root, 0)
    add_amd_gpu(root, "0000:c1:00.0", kfd_node=2, numa_node=0, local_cpulist="0-3", unique_id=0xABC)
    add_amd_gpu(root, "0000:e1:00.0", kfd_node=3, numa_node=-1, local_cpulist="", unique_id=0xABD)


def tree_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and not p.is_symlink())


#: Files every discovery reads (half of the damage goes to them).
KEY_FILES = ("/online", "/possible", "/cpulist", "/cpumap", "/meminfo", "/distance", "status",
             "cgroup", "cpuset", "mounts", "cpuinfo", "cpus", "mems", ".effective",
             "thread_siblings_list", "core_id", "physical_package_id", "shared_cpu_list", "level",
             "numa_node", "local_cpulist", "properties", "information", "class", "vendor",
             "unique_id", "/name")

HOSTILE_ENV = [
    {"CUDA_VISIBLE_DEVICES": "9" * 5000}, {"CUDA_VISIBLE_DEVICES": "²,0"},
    {"CUDA_VISIBLE_DEVICES": "GPU-\udcff"}, {"HIP_VISIBLE_DEVICES": "0," + "1" * 5000},
    {"ROCR_VISIBLE_DEVICES": "١"}, {"ZE_AFFINITY_MASK": "0.²"}, {"ZE_AFFINITY_MASK": "9" * 5000},
    {"CUDA_VISIBLE_DEVICES": "-1"}, {"CUDA_VISIBLE_DEVICES": ",,,"},
]


def _run_child(root: str, extra_env: dict | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for var in ("NUMABIND_FSROOT", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK", "CUDA_DEVICE_ORDER"):
        env.pop(var, None)
    for key, value in (extra_env or {}).items():
        env[key] = value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, root], capture_output=True, text=True,
                              timeout=GUARD_S, env=env)
    except subprocess.TimeoutExpired:
        return {"outcome": "hang"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"outcome": "died", "rc": proc.returncode, "stderr": proc.stderr[-3000:]}
    return json.loads(lines[-1])


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(hostile_trees())
def test_hostile_tree_returns_or_raises_numabind_error(case):
    kind, gpus, env, damages, dirs = case
    with tempfile.TemporaryDirectory(prefix="numabind-hostile-") as tmp:
        root = Path(tmp)
        FACTORIES[kind](root)
        if gpus:
            add_gpus(root)
        files = tree_files(root)
        key = [f for f in files if f.endswith(KEY_FILES)] or files
        for (keyed, pick), how in damages:
            pool = key if keyed else files
            damage(root, pool[pick % len(pool)], how)
        for d in dirs:
            (root / d).mkdir(parents=True, exist_ok=True)
        result = _run_child(str(root), env)
    assert result["outcome"] in ("ok", "error"), (kind, gpus, env, damages, dirs, result)


@pytest.mark.parametrize("rel,how", [
    ("sys/devices/system/cpu/online", "fifo"),
    ("sys/devices/system/node/node0/meminfo", "dev/zero"),
    ("proc/self/status", "dev/urandom"),
    ("proc/self/cgroup", "fifo"),
    ("proc/mounts", "dev/zero"),
    # read by one call per core (nb_read_tree), refused when discovery reads them
    ("sys/devices/system/cpu/cpu0/topology/core_id", "fifo"),
    ("sys/devices/system/cpu/cpu2/topology/thread_siblings_list", "dev/zero"),
    ("sys/devices/system/cpu/cpu0/cache/index0/shared_cpu_list", "dev/urandom"),
    ("sys/devices/system/cpu/cpu2/cache/index2/size", "fifo"),
])
def test_fifo_or_device_where_a_file_belongs_is_an_error_naming_it(tmp_path, rel, how):
    FACTORIES["two_sockets"](tmp_path)
    damage(tmp_path, rel, how)
    result = _run_child(str(tmp_path))              # in a child: a hang fails, not blocks
    assert result["outcome"] == "error", result
    assert rel in result["msg"] and "not a regular file" in result["msg"]


@pytest.mark.parametrize("rel,text,match", [
    ("sys/devices/system/node/node0/meminfo", "Node 0 MemTotal:  ²²² kB\n", "MemTotal"),
    ("sys/devices/system/cpu/online", "0-" + "9" * 5000 + "\n", "cap"),
    ("sys/devices/system/node/node1/distance", "21 " + "1" * 5000 + "\n", "integers"),
    ("proc/self/cgroup", "0::/kubepods\0/evil\n", None),
])
def test_hostile_numbers_in_process(tmp_path, rel, text, match):
    m = FACTORIES["cgroup_restricted"](tmp_path)
    m.set_file(rel, text).write()
    if match is None:
        discover(tmp_path)                           # the NUL ends the text: a valid file
        return
    with pytest.raises(NumabindError, match=match):
        discover(tmp_path)
