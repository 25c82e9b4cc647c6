"""``numabind run --gpus LIST`` (bind for those GPUs and let the command see only them) and ``--dry-run``
(``run`` in every form, and ``move``): what the command sees, composed with the visibility already set, for
each vendor; the usage errors; the dry run's exact text and JSON on fake machines; the printed numactl and
taskset lines run under the oracles on this host do what numabind does; a replayed GPU machine whose CPU ids are
this host's is bound for real; the DGX-2 of hwloc's XML corpus."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from numabind._fs import FsReader
from numabind._util import FrozenMap
from numabind.cli.launch import move_lines, run_lines
from numabind.cpulist import format_cpulist, parse_cpulist
from numabind.devices import PciGpu, discover_gpus, gpu_list_entries, pick_gpus, visibility_environ
from numabind.errors import PlanError
from numabind.plan import Plan
from numabind.topology import Node, discover

from .fakegpu import (BOX_ADDRS, BOX_CPUS, add_amd_gpu, add_dev_node, add_nvidia_gpu, ascend_box, eight_gpu_box,
                      nv_uuid)
from .fakesys import FakeMachine, two_sockets
from .kernel import CPU_A, GPU_ENV, MEM_NODE, ONLINE_NODES, ROOT, child_env, numabind_cli, run_main

GiB = 1 << 30
NODES = FrozenMap({
    n: Node(id=n, cpus=parse_cpulist(BOX_CPUS[n]), memory_bytes=64 * GiB,
            distances=FrozenMap({m: 10 if m == n else 21 for m in BOX_CPUS}))
    for n in BOX_CPUS
})
TLLM = "TLLM_NUMA_AWARE_WORKER_AFFINITY"
ORACLES = [p for p in (os.path.join(ROOT, "tests", "_cache", "numactl-2.0.19", "numactl"), "/usr/bin/numactl")
           if os.access(p, os.X_OK)]
#: A child that reports what it was started with: its CPUs, its memory policy, the GPU variables.
REPORT = (
    "import json, os; from numabind.backends import get_backend; p, n = get_backend('syscall')[0].get_mempolicy(); "
    "print(json.dumps({'cpus': sorted(os.sched_getaffinity(0)), 'policy': p, 'nodes': sorted(n), "
    "'cvd': os.environ.get('CUDA_VISIBLE_DEVICES')}))"
)


def gpus(root, env):
    return discover_gpus(FsReader(str(root)), NODES, env=env)


def command_sees(root, env: dict, spec: str) -> tuple[dict, list[str], list[str]]:
    """(variables set, PCI addresses asked for, PCI addresses the command's runtime numbers under them)."""
    chosen, named = pick_gpus(spec, gpus(root, env))
    added = visibility_environ(chosen, env, named)
    return added, [g.pci_address for g in chosen], [g.pci_address for g in gpus(root, {**env, **added})]


@pytest.fixture
def clean_env(monkeypatch):
    """No GPU visibility, numabind setting or TensorRT-LLM switch inherited from the runner."""
    for name in (*GPU_ENV, "ASCEND_RT_VISIBLE_DEVICES", "NUMABIND_FSROOT", "NUMABIND_STRICT", TLLM):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


# ------------------------------------------------------------------ what the command sees, per vendor
@pytest.mark.parametrize("env, spec, want", [
    ({}, "1,2", "1,2"),
    ({}, "2,1", "2,1"),                                            # the command's GPU 0 is the first listed
    ({}, "3-5", "3,4,5"),
    ({"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, "1,2", "5,6"),          # composed: visible 1, 2 are 5, 6
    ({"CUDA_VISIBLE_DEVICES": "7,6,5"}, "2,0", "5,7"),
    ({"CUDA_VISIBLE_DEVICES": f"{nv_uuid(6)},{nv_uuid(3)}"}, "1", nv_uuid(3)),   # the parent's UUIDs stay
    ({}, f"{nv_uuid(5)[:12]},0000:18:00.0", f"{nv_uuid(5)},0"),    # a UUID is passed as the GPU's UUID
    ({}, "2a:00.0", "1"),                                          # a PCI address without its domain
    ({"CUDA_VISIBLE_DEVICES": "6,2"}, "0000:3a:00.0", "2"),
])
def test_nvidia_visibility_composes(tmp_path, env, spec, want):
    eight_gpu_box(tmp_path, "nvidia")
    added, asked, seen = command_sees(tmp_path, env, spec)
    assert added == {"CUDA_VISIBLE_DEVICES": want}
    assert seen == asked


def _amd_physical(root) -> list[str]:
    """The AMD box's GPUs in ROCm's own order (KFD order), by PCI address."""
    return [g.pci_address for g in gpus(root, {})]


@pytest.mark.parametrize("env, spec, want", [
    ({}, "1,2", {"ROCR_VISIBLE_DEVICES": "1,2"}),
    ({"ROCR_VISIBLE_DEVICES": "4,5,6,7"}, "1", {"ROCR_VISIBLE_DEVICES": "5"}),
    # HIP indexes into what ROCr left: once ROCR narrows, HIP's old indices would point elsewhere
    ({"HIP_VISIBLE_DEVICES": "3,2"}, "1", {"ROCR_VISIBLE_DEVICES": "2", "HIP_VISIBLE_DEVICES": "0"}),
    ({"ROCR_VISIBLE_DEVICES": "2,3,4", "HIP_VISIBLE_DEVICES": "2,0"}, "0,1",
     {"ROCR_VISIBLE_DEVICES": "4,2", "HIP_VISIBLE_DEVICES": "0,1"}),
    ({"CUDA_VISIBLE_DEVICES": "1"}, "0", {"ROCR_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "0"}),  # HIP's fallback
])
def test_amd_visibility_sets_rocr_first(tmp_path, env, spec, want):
    eight_gpu_box(tmp_path, "amd")
    added, asked, seen = command_sees(tmp_path, env, spec)
    assert added == want
    assert seen == asked


def test_amd_uuids_in_the_parents_rocr_stay_uuids(tmp_path):
    eight_gpu_box(tmp_path, "amd")
    uuids = [g.uuid for g in gpus(tmp_path, {})]
    assert all(u and u.upper().startswith("GPU-") for u in uuids)
    env = {"ROCR_VISIBLE_DEVICES": f"{uuids[3]},{uuids[5]}"}
    added, asked, seen = command_sees(tmp_path, env, "1")
    assert added == {"ROCR_VISIBLE_DEVICES": uuids[5]} and seen == asked == [_amd_physical(tmp_path)[5]]


@pytest.mark.parametrize("env, spec, want", [
    ({}, "2,0", "0,2"),                                       # Level Zero keeps device order
    ({"ZE_AFFINITY_MASK": "1,3.0,3.1,6"}, "1", "3.0,3.1"),     # the parent's sub-devices stay
    ({"ZE_AFFINITY_MASK": "1,3,6"}, "2,0", "1,6"),
])
def test_intel_visibility_composes_in_device_order(tmp_path, env, spec, want):
    eight_gpu_box(tmp_path, "intel")
    added, asked, seen = command_sees(tmp_path, env, spec)
    assert added == {"ZE_AFFINITY_MASK": want}
    assert seen == sorted(asked, key=BOX_ADDRS.index)


@pytest.mark.parametrize("env, spec, want", [
    ({}, "7", "7"),
    ({"ASCEND_RT_VISIBLE_DEVICES": "1,3,5"}, "2,0", "1,5"),   # CANN reads ascending lists only
])
def test_ascend_visibility_composes_ascending(tmp_path, env, spec, want):
    ascend_box(tmp_path)
    chosen, named = pick_gpus(spec, gpus(tmp_path, env))
    added = visibility_environ(chosen, env, named)
    assert added == {"ASCEND_RT_VISIBLE_DEVICES": want}
    seen = [g.pci_address for g in gpus(tmp_path, {**env, **added})]
    order = [g.pci_address for g in gpus(tmp_path, {})]        # CANN's logical order
    assert seen == sorted((g.pci_address for g in chosen), key=order.index)


# ------------------------------------------------------------------ lists numabind refuses
@pytest.mark.parametrize("spec, words", [
    ("", "empty entry"), ("1,,2", "empty entry"), ("x", "'x' is not a visible index"), ("3-1", "range '3-1'"),
    ("0-99999", "range '0-99999'"), ("1234567890", "more than 9 digits"), ("0000:18:00", "is not a visible index"),
])
def test_list_syntax_errors(spec, words):
    with pytest.raises(PlanError, match="GPU list") as e:
        gpu_list_entries(spec)
    assert words in str(e.value)


@pytest.mark.parametrize("spec, words", [
    ("8", "visible GPU index 8 is out of range (8 visible: 0-7)"),
    ("0,0000:18:00.0", "names GPU 0 (0000:18:00.0) twice"),
    ("GPU-nope", "matches no visible GPU's UUID"),
    ("GPU-0000000", "matches no visible GPU's UUID, or more than one"),   # a prefix of every UUID
    ("0000:77:00.0", "is not the PCI address of a visible GPU"),
])
def test_list_names_no_visible_gpu(tmp_path, spec, words):
    eight_gpu_box(tmp_path, "nvidia")
    with pytest.raises(PlanError) as e:
        pick_gpus(spec, gpus(tmp_path, {}))
    assert words in str(e.value)


def test_mixed_vendors_refused(tmp_path):
    eight_gpu_box(tmp_path, "nvidia")
    amd = PciGpu("0000:77:00.0", "amd", 0x120000, 0x74A1, 0, frozenset())
    with pytest.raises(PlanError, match="mixes vendors: 0000:77:00.0 is an amd GPU, the visible GPUs are nvidia's"):
        pick_gpus("0,0000:77:00.0", gpus(tmp_path, {}), [amd])
    with pytest.raises(PlanError, match="of one vendor, got amd, nvidia"):
        visibility_environ([*gpus(tmp_path, {})[:1], *gpus(_amd_box(tmp_path / "amd"), {})[:1]], {})


def _amd_box(root):
    eight_gpu_box(root, "amd")
    return root


# ------------------------------------------------------------------ the command line
def fake_gpu_server(root) -> Path:
    """Two sockets (node 0: CPUs 0-3,8-11; node 1: 4-7,12-15) and four NVIDIA GPUs, two per node."""
    two_sockets(root)
    cpus = {0: "0-3,8-11", 1: "4-7,12-15"}
    for k, addr in enumerate(("0000:18:00.0", "0000:2a:00.0", "0000:9a:00.0", "0000:ab:00.0")):
        add_nvidia_gpu(root, addr, numa_node=k // 2, local_cpulist=cpus[k // 2], uuid=nv_uuid(k), minor=k)
    return Path(root)


@pytest.mark.parametrize("argv, words", [
    (["--gpus", "0", "--gpu", "1"], "--gpu and --gpus both choose the GPU"),
    (["--gpus", "0", "--gpu-from-rank"], "--gpu-from-rank and --gpus both choose the GPU"),
    (["--gpus", "0", "-N", "0"], "--gpus plans the CPUs and memory for the GPU, so it cannot be combined with "
                                 "--cpunodebind"),
    (["--gpus", "0", "--membind", "0"], "cannot be combined with --membind"),
    (["--gpus", "0,,1"], "--gpus: GPU list '0,,1' has an empty entry"),
    (["--gpus", "0", "--all"], "--all widens the CPU and node lists of explicit options"),
    (["--gpus", "zero"], "'zero' is not a visible index"),
])
def test_usage_errors_exit_2_naming_both(tmp_path, capsys, clean_env, argv, words):
    root = fake_gpu_server(tmp_path)
    rc, out, err = run_main(capsys, "--root", str(root), "run", *argv, "--dry-run", "--", "true")
    assert rc == 2, err
    assert words in err and out == ""


@pytest.mark.parametrize("spec, words", [
    ("4", "visible GPU index 4 is out of range (4 visible: 0-3)"),
    ("1,0000:2a:00.0", "names GPU 1 (0000:2a:00.0) twice"),
])
def test_a_list_the_machine_cannot_hold_exits_1(tmp_path, capsys, clean_env, spec, words):
    root = fake_gpu_server(tmp_path)
    rc, out, err = run_main(capsys, "--root", str(root), "run", "--gpus", spec, "--dry-run", "--", "true")
    assert (rc, out) == (1, "") and words in err


def test_mixed_vendors_on_the_command_line(tmp_path, capsys, clean_env):
    root = fake_gpu_server(tmp_path)
    add_amd_gpu(root, "0000:c1:00.0", kfd_node=None, numa_node=1, local_cpulist="4-7,12-15")
    rc, out, err = run_main(capsys, "--root", str(root), "run", "--gpus", "0,0000:c1:00.0", "--dry-run", "--", "true")
    assert (rc, out) == (1, "")
    assert "mixes vendors: 0000:c1:00.0 is an amd GPU, the visible GPUs are nvidia's" in err


def test_dry_run_text_is_exact(tmp_path, capsys, clean_env):
    root = fake_gpu_server(tmp_path)
    rc, out, err = run_main(capsys, "--root", str(root), "run", "--gpus", "2,3", "--dry-run", "--", "cmd", "a b")
    assert (rc, err) == (0, "")
    assert out == (
        "# plan: cpus 4-7,12-15, memory bind 1\n"
        "# GPU 2 nvidia 0000:9a:00.0 node 1\n"
        "# GPU 3 nvidia 0000:ab:00.0 node 1\n"
        "export CUDA_VISIBLE_DEVICES=2,3\n"
        f"export {TLLM}=0\n"
        "numactl --physcpubind=4-7,12-15 --membind=1 -- cmd 'a b'\n")


def test_dry_run_composes_with_the_parents_variable(tmp_path, capsys, clean_env):
    root = fake_gpu_server(tmp_path)
    clean_env.setenv("CUDA_VISIBLE_DEVICES", f"3,{nv_uuid(0)},1")
    clean_env.setenv(TLLM, "0")    # the user's own value: nothing to export for it
    rc, out, err = run_main(capsys, "--root", str(root), "run", "--gpus", "1,0", "--dry-run", "--", "cmd")
    assert (rc, err) == (0, "")
    assert out == (
        "# plan: cpus 0-15, memory bind 0-1\n"
        "# GPU 1 nvidia 0000:18:00.0 node 0\n"
        "# GPU 0 nvidia 0000:ab:00.0 node 1\n"
        f"export CUDA_VISIBLE_DEVICES={nv_uuid(0)},3\n"
        "numactl --physcpubind=0-15 --membind=0-1 -- cmd\n")


def test_dry_run_json_is_the_same_as_one_object(tmp_path, capsys, clean_env):
    root = fake_gpu_server(tmp_path)
    rc, out, err = run_main(capsys, "--root", str(root), "run", "--gpus", "0", "--policy", "interleave",
                            "--dry-run", "--json", "--", "cmd", "x y")
    assert (rc, err) == (0, "")
    got = json.loads(out)
    assert {k: got[k] for k in ("dry_run", "environ", "exports", "commands", "lines", "command", "notes")} == {
        "dry_run": True,
        "environ": {"CUDA_VISIBLE_DEVICES": "0", TLLM: "0"},
        "exports": ["export CUDA_VISIBLE_DEVICES=0", f"export {TLLM}=0"],
        "commands": [["numactl", "--physcpubind=0-3,8-11", "--interleave=0", "--", "cmd", "x y"]],
        "lines": ["numactl --physcpubind=0-3,8-11 --interleave=0 -- cmd 'x y'"],
        "command": ["cmd", "x y"],
        "notes": [],
    }
    assert {k: got["plan"][k] for k in ("cpus", "mem_policy", "mem_nodes", "weights", "migrate")} == {
        "cpus": "0-3,8-11", "mem_policy": "interleave", "mem_nodes": "0", "weights": None, "migrate": False}
    assert [(g["index"], g["pci_address"], g["uuid"]) for g in got["gpus"]] == [(0, "0000:18:00.0", nv_uuid(0))]


@pytest.mark.parametrize("argv, line", [
    (["--gpu", "3"], "numactl --physcpubind=4-7,12-15 --membind=1 -- cmd"),            # bind only: no visibility
    (["-N", "1", "-m", "1"], "numactl --physcpubind=4-7,12-15 --membind=1 -- cmd"),
    (["-C", "0-2", "-i", "all"], "numactl --physcpubind=0-2 --interleave=0-1 -- cmd"),
    (["-N", "0", "-m", "0", "--balancing"], "numactl --physcpubind=0-3,8-11 --balancing --membind=0 -- cmd"),
    (["-l"], "numactl --localalloc -- cmd"),
])
def test_dry_run_of_every_form_on_a_replayed_machine(tmp_path, capsys, clean_env, argv, line):
    root = fake_gpu_server(tmp_path)
    rc, out, err = run_main(capsys, "--root", str(root), "run", *argv, "--dry-run", "--", "cmd")
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    assert lines[-1] == line
    assert [x for x in lines if x.startswith("export ")] == [f"export {TLLM}=0"]


def test_dry_run_of_gpu_from_rank(tmp_path, capsys, clean_env):
    root = fake_gpu_server(tmp_path)
    clean_env.setenv("LOCAL_RANK", "2")
    rc, out, err = run_main(capsys, "--root", str(root), "run", "--gpu-from-rank", "--dry-run", "--", "cmd")
    assert rc == 0, err
    assert "--membind=1 -- cmd" in out.splitlines()[-1] and "CUDA_VISIBLE_DEVICES" not in out


def test_run_lines_say_what_numactl_cannot():
    weighted = Plan(cpus={0}, mem_policy="weighted-interleave", mem_nodes={0, 1}, weights="0:3,1:1")
    assert run_lines(weighted, ["cmd"], live=False, set_weights=True) == [
        ["sh", "-c", "echo 3 > /sys/kernel/mm/mempolicy/weighted_interleave/node0"],
        ["sh", "-c", "echo 1 > /sys/kernel/mm/mempolicy/weighted_interleave/node1"],
        ["numactl", "--physcpubind=0", "--weighted-interleave=0-1", "--", "cmd"]]
    assert run_lines(Plan(cpus={0, 1}, mem_policy="default"), ["cmd"], live=False) == [["taskset", "-c", "0-1", "cmd"]]
    outside = frozenset({max(os.sched_getaffinity(0)) + 1})
    assert run_lines(Plan(cpus=outside), ["cmd"], live=True)[0][:2] == ["numactl", "--all"]
    assert run_lines(Plan(cpus=outside), ["cmd"], live=False)[0][1] != "--all"
    # a replayed machine: its own affinity (Cpus_allowed) is what numactl would check there, not this process's
    inside = frozenset(os.sched_getaffinity(0))
    assert run_lines(Plan(cpus=inside), ["cmd"], live=False, affinity=outside)[0][:2] == ["numactl", "--all"]
    assert run_lines(Plan(cpus=outside), ["cmd"], live=False, affinity=outside)[0][1] != "--all"


def test_move_lines():
    plan = Plan(cpus={2, 3}, mem_policy="bind", mem_nodes={1})
    assert move_lines(plan, 42, frozenset({0, 1, 2})) == [["taskset", "-a", "-p", "-c", "2-3", "42"],
                                                          ["migratepages", "42", "0,2", "1"]]
    assert move_lines(Plan(mem_policy="local"), 42, frozenset({0, 1})) == []


# ------------------------------------------------------------------ the DGX-2 of hwloc's corpus
@pytest.fixture(scope="module")
def dgx2(tmp_path_factory) -> Path:
    archive = Path(ROOT) / "tests" / "data" / "hwloc-xml" / "hwloc-2.14.0-tests-xml.tar.xz"
    dest = tmp_path_factory.mktemp("dgx2")
    with tarfile.open(archive) as tf:
        member = next(m for m in tf.getmembers() if os.path.basename(m.name) == "nvidiaDGX2.xml")
        member.name = "nvidiaDGX2.xml"
        tf.extract(member, dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return dest / "nvidiaDGX2.xml"


def test_dgx2_launch_dry_run(dgx2, tmp_path):
    node1 = format_cpulist(discover(str(dgx2)).nodes[1].cpus)
    marker = tmp_path / "ran"
    cp = numabind_cli("--root", str(dgx2), "run", "--gpus", "9,10", "--dry-run", "--", "touch", str(marker))
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    assert "export CUDA_VISIBLE_DEVICES=9,10" in lines
    assert lines[-1] == f"numactl --physcpubind={node1} --membind=1 -- touch {marker}"
    assert not marker.exists()


# ------------------------------------------------------------------ the printed lines under the oracles, here
def _child(argv: list[str], env: dict | None = None) -> dict:
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env or child_env(), cwd=ROOT)
    assert cp.returncode == 0, (argv, cp.stderr)
    return json.loads(cp.stdout.splitlines()[-1])


def _node_with_cpus() -> int:
    topo = discover("/")
    return next(n for n in sorted(topo.nodes) if topo.nodes[n].cpus & topo.allowed_cpus)


OPTION_SETS = [
    lambda: ["-N", str(_node_with_cpus()), "-m", str(MEM_NODE)],
    lambda: ["-C", str(CPU_A), "-p", str(MEM_NODE)],
    lambda: ["-i", format_cpulist(ONLINE_NODES)],
    lambda: ["-C", str(CPU_A), "-l"],
    lambda: ["-N", str(_node_with_cpus())],
]


@pytest.mark.skipif(not ORACLES, reason="no numactl to run the printed line")
@pytest.mark.parametrize("options", range(len(OPTION_SETS)))
@pytest.mark.parametrize("narrow", [False, True], ids=["affinity", "taskset-one-cpu"])
@pytest.mark.mempolicy
def test_printed_numactl_line_does_what_numabind_does(options, narrow):
    """The dry run's numactl line, run by the numactl oracle, gives the child the affinity and memory policy
    ``numabind run`` gives it (also from a parent confined to one CPU, where numabind's limit is the cpuset)."""
    argv = OPTION_SETS[options]()
    pre = ["taskset", "-c", str(CPU_A)] if narrow else []
    child = [sys.executable, "-c", REPORT]
    numabind = [*pre, sys.executable, "-m", "numabind", "run"]
    cp = subprocess.run([*numabind, *argv, "--dry-run", "--", *child], capture_output=True, text=True, timeout=120,
                        env=child_env(), cwd=ROOT)
    assert cp.returncode == 0, cp.stderr
    line = shlex.split(cp.stdout.splitlines()[-1])
    assert line[0] == "numactl" and line[-len(child):] == child
    bound = _child([*numabind, *argv, "--", *child])
    for oracle in ORACLES:
        assert _child([*pre, oracle, *line[1:]]) == bound, (oracle, line)


def _host_gpu_root(root) -> tuple[Path, frozenset[int], int]:
    """This host's nodes with a GPU on each node with CPUs (CPU ids and node ids are this host's)."""
    topo = discover("/")
    m = FakeMachine(root)
    for n, node in sorted(topo.nodes.items()):
        m.add_node(n, node.cpus, node.memory_bytes // 1024, {k: d for k, d in node.distances.items() if k != n})
    for core, cpu in enumerate(sorted(topo.online_cpus)):
        m.set_cpu_topology(cpu, 0, core)
    m.write()
    homes = [n for n in sorted(topo.nodes) if topo.nodes[n].cpus & topo.allowed_cpus]
    for k, n in enumerate([homes[0], homes[-1]]):
        add_nvidia_gpu(root, f"0000:{0x18 + k:02x}:00.0", numa_node=n, local_cpulist=format_cpulist(topo.nodes[n].cpus),
                       uuid=nv_uuid(k), minor=k)
        add_dev_node(root, f"nvidia{k}")
    last = homes[-1]
    return Path(root), topo.nodes[last].cpus & topo.allowed_cpus, last


@pytest.mark.parametrize("backend", [[], ["--backend", "numactl"]], ids=["in-process", "numactl"])
@pytest.mark.parametrize("parent", [None, "1,0"])
@pytest.mark.mempolicy
def test_run_gpus_binds_on_a_replayed_machine_and_sets_visibility(tmp_path, parent, backend):
    """``--gpus`` with ``--bind-replayed-root``: planned on a fake GPU machine whose CPU ids are this host's,
    bound here for real (in-process, or through the numactl backend's exec); the child sees the GPU's variable,
    and the dry run's lines do the same under numactl."""
    if backend and not ORACLES:
        pytest.skip("no numactl for the numactl backend")
    root, cpus, node = _host_gpu_root(tmp_path)
    want_gpu = "1" if parent is None else "0"          # visible 1 (no variable), or visible 0 of "1,0": GPU 1
    env = child_env(**({"CUDA_VISIBLE_DEVICES": parent} if parent else {}))
    base = [sys.executable, "-m", "numabind", "--root", str(root), "run", *backend, "--gpus", want_gpu,
            "--bind-replayed-root"]
    child = [sys.executable, "-c", REPORT]
    got = _child([*base, "--", *child], env)
    memory = discover(str(root)).nodes[node].has_memory
    assert got["cpus"] == sorted(cpus) and got["cvd"] == "1"
    if memory:
        assert (got["policy"], got["nodes"]) == ("bind", [node])
    cp = subprocess.run([*base, "--dry-run", "--", *child], capture_output=True, text=True, timeout=120, env=env,
                        cwd=ROOT)
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    assert "export CUDA_VISIBLE_DEVICES=1" in lines
    if ORACLES:
        exports = dict(x[len("export "):].split("=", 1) for x in lines if x.startswith("export "))
        assert _child([ORACLES[0], *shlex.split(lines[-1])[1:]], {**env, **exports}) == got


def test_run_gpus_refuses_a_replayed_root_without_the_flag(tmp_path, capsys, clean_env):
    root = fake_gpu_server(tmp_path)
    rc, _, err = run_main(capsys, "--root", str(root), "run", "--gpus", "0", "--", "true")
    assert rc == 2 and "is another discovery root" in err


# ------------------------------------------------------------------ move --dry-run
def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"])


def test_move_dry_run_moves_nothing_and_its_taskset_line_does_what_move_does():
    a, b = _sleeper(), _sleeper()
    try:
        before = os.sched_getaffinity(a.pid)
        cp = numabind_cli("move", "--dry-run", "-C", str(CPU_A), str(a.pid))
        assert cp.returncode == 0, cp.stderr
        assert cp.stdout == f"# plan: cpus {CPU_A}, memory unchanged\ntaskset -a -p -c {CPU_A} {a.pid}\n"
        time.sleep(0.05)
        assert os.sched_getaffinity(a.pid) == before          # nothing moved
        js = numabind_cli("move", "--dry-run", "--json", "-C", str(CPU_A), str(a.pid))
        assert js.returncode == 0, js.stderr
        got = json.loads(js.stdout)
        assert got["dry_run"] is True and [p["pid"] for p in got["processes"]] == [a.pid]
        assert got["processes"][0]["commands"] == [["taskset", "-a", "-p", "-c", str(CPU_A), str(a.pid)]]
        subprocess.run(shlex.split(cp.stdout.splitlines()[-1]), check=True, capture_output=True, timeout=60)
        moved = numabind_cli("move", "-C", str(CPU_A), str(b.pid))
        assert moved.returncode == 0, moved.stderr
        assert os.sched_getaffinity(a.pid) == os.sched_getaffinity(b.pid) == {CPU_A}
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


def test_move_dry_run_of_restore_without_a_record_exits_1():
    a = _sleeper()
    try:
        cp = numabind_cli("move", "--dry-run", "--restore", str(a.pid))
        assert cp.returncode == 1 and "recorded no binding" in cp.stderr and cp.stdout == ""
    finally:
        a.kill()
        a.wait()
