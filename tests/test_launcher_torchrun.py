"""torchrun: every rank bound by ``numabind run --gpu-from-rank``, compared with torch's own ``--numa-binding``.

The real ``torch.distributed.run`` (torch 2.13.0, a CPU build, installed by
``scripts/setup.sh --test``) starts the ranks on a fake two-node GPU machine
whose CPU ids are this host's (tests/launchers.py), so each rank's binding is
real and read back from the kernel. torch's ``--numa-binding`` runs against
the same fake machine through tests/torch_numa.py (its CUDA and /sys probes
redirected there; its workers bound by numactl). torch runs only in children.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from numabind._fs import FsReader
from numabind.cpulist import format_cpulist
from numabind.rank import place_rank
from numabind.topology import discover_from
from tests.fakegpu import add_nvidia_gpu, nv_uuid
from tests.fakesys import FakeMachine, snc
from tests.launchers import (REPORT_DIR_VAR, host_gpu_machine, json_documents, json_lines, numabind_command,
                             needs, needs_two_cpus, rank_reports, report_command, unavailable)
from tests.kernel import ROOT

# torch is only ever imported by the children (torchrun, tests/torch_numa.py): never into the test process
pytestmark = needs(importlib.util.find_spec("torch") is not None,
                   "torch is not installed (scripts/setup.sh --test installs torch==2.13.0)")

kernel = pytest.mark.kernel
TIMEOUT = 240
NUMA_MODES = ("node", "socket", "exclusive", "core-complex")
LAUNCH_VARS = ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
               "PMI_LOCAL_RANK", "PALS_LOCAL_RANKID", "NUMABIND_LOCAL_RANK", "NUMABIND_LOCAL_WORLD_SIZE",
               "CUDA_VISIBLE_DEVICES", "NUMABIND_STRICT", "NUMABIND_BACKEND")


def torchrun() -> list[str]:
    script = Path(sys.executable).with_name("torchrun")
    return [str(script)] if script.exists() else [sys.executable, "-m", "torch.distributed.run"]


def launch_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS and not k.startswith("NUMABIND_")}
    env["PYTHONPATH"] = ROOT
    env.update(extra)
    return env


def by_rank(stdout: str) -> dict[int, dict]:
    return {int(r["rank"] if "rank" in r else r["local_rank"]): r for r in json_lines(stdout)}


def outputs(out: subprocess.CompletedProcess) -> str:
    """What a failed assertion shows: the launcher's stdout and stderr."""
    return f"\n--- stdout ---\n{out.stdout[-6000:]}\n--- stderr ---\n{out.stderr[-6000:]}"


def reports_by_rank(folder: Path, out: subprocess.CompletedProcess) -> dict[int, dict]:
    """The report each rank wrote under ``folder``: one per rank, 0 and 1, the same as its line on stdout.

    The files are what the ranks ran with; stdout, which the ranks share, must carry the same two lines."""
    reports = rank_reports(folder)
    ranks = sorted(int(r["rank"]) for r in reports)
    assert ranks == [0, 1], f"report files of ranks {ranks}, expected one of rank 0 and one of rank 1" + outputs(out)
    got = {int(r["rank"]): r for r in reports}
    assert len(json_lines(out.stdout)) == 2 and by_rank(out.stdout) == got, \
        f"stdout does not hold the two ranks' reports {got}" + outputs(out)
    return got


def run(argv: list[str], env: dict[str, str], cwd: str) -> subprocess.CompletedProcess:
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=TIMEOUT, cwd=cwd)
    assert out.returncode == 0, f"{argv[:6]}... exited {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


@kernel
@needs_two_cpus
def test_torchrun_binds_each_rank_to_its_gpus_node_like_torchs_numa_binding(tmp_path):
    """On this host's own nodes (a plan's memory node must exist here, issue 42 §1): node mode where the host has
    two nodes with CPUs, else exclusive mode on its one node, so the two ranks still get different CPUs."""
    machine = host_gpu_machine(tmp_path / "machine", on_host_nodes=True)
    ours_dir, theirs_dir = tmp_path / "ours", tmp_path / "theirs"
    ours_dir.mkdir(), theirs_dir.mkdir()
    env = launch_env(NUMABIND_FSROOT=machine.root)
    ours = run([*torchrun(), "--standalone", "--no-python", "--nproc-per-node=2", *numabind_command(), "run",
                "--gpu-from-rank", "--bind-replayed-root", *machine.mode_args, "--", *report_command()],
               dict(env, **{REPORT_DIR_VAR: str(ours_dir)}), str(tmp_path))
    got = {r: sorted(v["cpus"]) for r, v in reports_by_rank(ours_dir, ours).items()}
    assert got == {0: sorted(machine.node_cpus[0]), 1: sorted(machine.node_cpus[1])}, outputs(ours)

    help_text = run([*torchrun(), "--help"], env, str(tmp_path)).stdout
    if "--numa-binding" not in help_text:
        unavailable("numabind part passed; this torch's torchrun has no --numa-binding to compare with")
    if shutil.which("numactl") is None:
        unavailable("numabind part passed; torch's --numa-binding starts workers through numactl, not installed")
    theirs = run([sys.executable, "-m", "tests.torch_numa", "torchrun", machine.root,
                  f"--numa-binding={machine.mode}",
                  "--standalone", "--no-python", "--nproc-per-node=2", *report_command()],
                 dict(env, **{REPORT_DIR_VAR: str(theirs_dir)}), ROOT)
    assert {r: sorted(v["cpus"]) for r, v in reports_by_rank(theirs_dir, theirs).items()} == got, outputs(theirs)


@needs_two_cpus
def test_torchrun_plan_json_names_the_rank_and_its_source(tmp_path):
    machine = host_gpu_machine(tmp_path / "machine")
    out = run([*torchrun(), "--standalone", "--no-python", "--nproc-per-node=2",
               *numabind_command(), "plan", "--gpu-from-rank", "--json"],
              launch_env(NUMABIND_FSROOT=machine.root), str(tmp_path))
    plans = {d["local_rank"]: d for d in json_documents(out.stdout)}
    assert sorted(plans) == [0, 1]
    for r, d in plans.items():
        assert (d["local_rank_source"], d["local_world_size"], d["local_world_size_source"]) == \
            ("LOCAL_RANK", 2, "LOCAL_WORLD_SIZE")
        assert (d["gpu"], d["numa_node"], d["placed"]) == (r, r, True)
        assert d["plan"]["cpus"] == format_cpulist(machine.node_cpus[r])
        assert (d["plan"]["mem_policy"], d["plan"]["mem_nodes"]) == ("bind", str(r))


# ------------------------------------------------------------------ the strategies, side by side
def eight_gpu_machine(root, status_cpus=None):
    """2 sockets x 2 nodes x 4 cores x 2 threads, an L3 per 2 cores, 2 GPUs per node; ``status_cpus``: a
    container's cpuset (cgroup v2), which is also the affinity its processes start with."""
    m = snc(root, sockets=2, nodes_per_socket=2, cores_per_node=4, smt=True, ccx_cores=2)
    if status_cpus is not None:
        m.set_status(status_cpus, None).set_cgroup2("/pod", status_cpus, None).write()
    for i in range(8):
        add_nvidia_gpu(root, f"0000:{0x10 + 0x10 * i:02x}:00.0", numa_node=i // 2, minor=i, uuid=nv_uuid(i))
    return discover_from(FsReader(str(root)), env={})


def torch_choices(root, allowed, *modes) -> dict[str, list[frozenset[int]]]:
    """What torch's --numa-binding gives each local rank on the machine under ``root`` (run in a child)."""
    out = run([sys.executable, "-m", "tests.torch_numa", "cpus", str(root), format_cpulist(allowed), *modes],
              launch_env(), ROOT)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if "unavailable" in got:
        unavailable(got["unavailable"])
    return {mode: [frozenset(c) for c in cpus] for mode, cpus in got.items()}


def test_every_mode_matches_torchs_numa_binding(tmp_path):
    topo = eight_gpu_machine(tmp_path)
    theirs = torch_choices(tmp_path, topo.allowed_cpus, *NUMA_MODES)
    for mode in NUMA_MODES:
        ours = [place_rank(mode, topology=topo, env={"LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "8"}).plan.cpus
                for r in range(8)]
        assert ours == theirs[mode], mode
        if mode in ("exclusive", "core-complex"):
            assert len(set(ours)) == 8           # the modes really split the nodes


def test_exclusive_within_a_cpuset_matches_torch(tmp_path):
    allowed = set(range(0, 32)) - {1, 5, 17, 21}          # one hyperthread pair out of nodes 0 and 1
    topo = eight_gpu_machine(tmp_path, status_cpus=allowed)
    theirs = torch_choices(tmp_path, topo.allowed_cpus, "exclusive")["exclusive"]
    ours = [place_rank("exclusive", topology=topo, env={"LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "8"}).plan.cpus
            for r in range(8)]
    assert ours == theirs


def test_a_gpu_with_no_node_torch_takes_node_0_numabind_leaves_the_rank_unbound(tmp_path):
    m = FakeMachine(tmp_path)
    m.add_node(0, range(0, 4)).add_node(1, range(4, 8))
    for cpu in range(8):
        m.set_cpu_topology(cpu, cpu // 4, cpu % 4)
    m.write()
    add_nvidia_gpu(tmp_path, "0000:1b:00.0", numa_node=-1, local_cpulist="")
    add_nvidia_gpu(tmp_path, "0000:9a:00.0", numa_node=1, minor=1, uuid=nv_uuid(1))
    topo = discover_from(FsReader(str(tmp_path)), env={})
    assert torch_choices(tmp_path, topo.allowed_cpus, "node")["node"] == [topo.nodes[0].cpus, topo.nodes[1].cpus]
    placed = place_rank("node", topology=topo, env={"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"})
    assert placed.plan.cpus is None and placed.plan.mem_policy is None
    assert "has no NUMA node" in placed.warnings[0]
    assert place_rank("node", topology=topo, env={"LOCAL_RANK": "1"}).plan.cpus == topo.nodes[1].cpus


def test_json_lines_reads_reports_glued_on_one_line():
    """Two ranks sharing torchrun's stdout once wrote ``{...}{...}`` then an empty line (print under
    PYTHONUNBUFFERED=1 writes a line and its newline in two calls): both reports are still read."""
    text = 'I1204 torchrun: x\n{"rank": "1", "cpus": [1]}{"rank": "0", "cpus": [0]}\n\n[rank0]: {"rank": "2"}\n{"bad'
    assert json_lines(text) == [{"rank": "1", "cpus": [1]}, {"rank": "0", "cpus": [0]}, {"rank": "2"}]


def test_the_report_command_prints_one_line_and_writes_the_same_report_file(tmp_path):
    """Under PYTHONUNBUFFERED=1 too (its line is one write(2), checked by hand with strace: see REPORT_CODE)."""
    env = dict(launch_env(PYTHONUNBUFFERED="1", LOCAL_RANK="3"), **{REPORT_DIR_VAR: str(tmp_path)})
    out = run(report_command(), env, str(tmp_path))
    assert out.stdout.count("\n") == 1 and json_lines(out.stdout) == rank_reports(tmp_path)
    assert rank_reports(tmp_path)[0]["rank"] == "3"
