"""Slurm: ``srun -n 2 numabind run --gpu-from-rank -- CMD`` on a real single-machine Slurm.

tests/slurm.py starts munged, slurmctld and slurmd (Debian's slurm-wlm and
munge, installed by ``scripts/setup.sh --test``) for this module and stops
them after it. The tasks run on a fake two-node GPU machine whose CPU ids are
this host's (tests/launchers.py), so every binding is real: each task prints
the affinity it ended up with. The tasks that bind run on a fake machine made
of this host's own nodes (``bound_machine``), since a plan whose memory node
this host lacks is refused (issue 42 §1); ``machine``, whose node 1 need not
exist here, is only planned on. Slurm's ``task/affinity`` plugin binds tasks
itself when asked (``--cpu-bind``): that binding is where a task starts, and
numabind replaces it within the cpuset, as numactl does (issue 42 §3); with
``--within-affinity`` it stays inside it, and memory never goes to a node the
task cannot run on.
"""

from __future__ import annotations

import os

import pytest

from numabind.cpulist import format_cpulist
from numabind.plan import Plan
from tests import slurm as slurm_fixture
from tests.launchers import (host_gpu_machine, json_documents, json_lines, needs_two_cpus, numabind_command,
                             report_command, unavailable)
from tests.kernel import ROOT

kernel = pytest.mark.kernel
pytestmark = needs_two_cpus


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    missing = slurm_fixture.missing_programs()
    if missing:
        unavailable(f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge "
                    f"(scripts/setup.sh --test does)")
    if os.geteuid() != 0:
        unavailable("slurmd must run as root to start tasks as the submitting user")
    cluster = slurm_fixture.start_slurm(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    return host_gpu_machine(tmp_path_factory.mktemp("gpu-machine"))


@pytest.fixture(scope="module")
def bound_machine(tmp_path_factory):
    """This host's nodes, a GPU on each of two (or both on its one node, split by exclusive mode)."""
    return host_gpu_machine(tmp_path_factory.mktemp("host-gpu-machine"), on_host_nodes=True)


def task_env(machine) -> dict[str, str]:
    """This environment without any launcher's or numabind's variables (a CI job may itself run under Slurm)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "NUMABIND_", "_NUMABIND_")) and k not in
           ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "CUDA_VISIBLE_DEVICES", "OMPI_COMM_WORLD_LOCAL_RANK")}
    env.update(NUMABIND_FSROOT=machine.root, PYTHONPATH=ROOT)
    return env


def srun(slurm, machine, *args: str, ok: bool = True):
    out = slurm.srun(list(args), task_env(machine))
    if ok:
        assert out.returncode == 0, f"srun {' '.join(args[:8])} exited {out.returncode}\n{out.stdout}\n{out.stderr}" \
                                    f"\n{slurm.logs()}"
    return out


def by_task(stdout: str) -> dict[int, dict]:
    return {int(r["rank"]): r for r in json_lines(stdout)}


def task_documents(out) -> dict[int, dict]:
    """The JSON document each task printed, from ``srun --label`` output: srun forwards the tasks' stdout as
    it arrives, so two tasks' pretty-printed documents can interleave line by line; each line carries its
    task's label (``0: ``), and each task's lines are read on their own."""
    lines: dict[int, list[str]] = {}
    for line in out.stdout.splitlines():
        label, sep, text = line.partition(": ")
        if sep and label.strip().isdigit():
            lines.setdefault(int(label), []).append(text)
    docs = {task: json_documents("\n".join(text)) for task, text in lines.items()}
    assert all(len(d) == 1 for d in docs.values()), f"not one JSON document per task:\n{out.stdout}\n{out.stderr}"
    return {task: d[0] for task, d in docs.items()}


def swapped(machine) -> tuple[int, int]:
    """Slurm's CPU for task 0 and task 1: each on the other GPU's node."""
    return min(machine.node_cpus[1]), min(machine.node_cpus[0])


RUN = ("run", "--gpu-from-rank", "--bind-replayed-root")


def run_args(machine) -> tuple[str, ...]:
    """``numabind run --gpu-from-rank`` in the mode that gives each of ``machine``'s GPUs its own CPUs."""
    return (*numabind_command(), *RUN, *machine.mode_args)


def test_srun_plan_json_names_slurm_localid(slurm, machine):
    out = srun(slurm, machine, "-n", "2", "--label", "--cpu-bind=none", *numabind_command(), "plan",
               "--gpu-from-rank", "--json")
    docs = task_documents(out)
    assert sorted(docs) == [0, 1]
    plans = {d["local_rank"]: d for d in docs.values()}
    assert plans == docs                                     # task N's document says local rank N
    for r, d in plans.items():
        assert (d["local_rank_source"], d["local_world_size"]) == ("SLURM_LOCALID", 2)
        assert d["local_world_size_source"] == "SLURM_STEP_TASKS_PER_NODE"
        assert (d["gpu"], d["numa_node"]) == (r, r)
        assert d["plan"]["cpus"] == format_cpulist(machine.node_cpus[r])
        assert d["launcher_cpus"] == format_cpulist(machine.all_cpus)


@kernel
def test_srun_binds_each_task_to_its_gpus_node(slurm, bound_machine):
    machine = bound_machine
    out = srun(slurm, machine, "-n", "2", "--cpu-bind=none", *run_args(machine), "--", *report_command())
    got = {r: v["cpus"] for r, v in by_task(out.stdout).items()}
    assert got == {0: sorted(machine.node_cpus[0]), 1: sorted(machine.node_cpus[1])}


@kernel
def test_srun_binding_is_replaced_by_the_plan_as_numactl_does(slurm, bound_machine):
    """srun --cpu-bind=map_cpu puts each task on the other GPU's CPUs: the plan replaces it."""
    machine = bound_machine
    cpu0, cpu1 = swapped(machine)
    out = srun(slurm, machine, "-n", "2", f"--cpu-bind=map_cpu:{cpu0},{cpu1}", *run_args(machine), "--",
               *report_command())
    got = {r: v["cpus"] for r, v in by_task(out.stdout).items()}
    assert got == {0: sorted(machine.node_cpus[0]), 1: sorted(machine.node_cpus[1])}
    assert "outside the CPUs this process may use" not in out.stderr


@kernel
def test_srun_binding_is_kept_with_within_affinity(slurm, bound_machine):
    machine = bound_machine
    cpu0, cpu1 = swapped(machine)
    bind = f"--cpu-bind=map_cpu:{cpu0},{cpu1}"
    # the GPU's CPUs are entirely outside what Slurm gave the task: the affinity stays Slurm's
    out = srun(slurm, machine, "-n", "2", bind, *run_args(machine), "--within-affinity", "--json", "--",
               *report_command())
    assert {r: v["cpus"] for r, v in by_task(out.stdout).items()} == {0: [cpu0], 1: [cpu1]}
    assert out.stderr.count("CPU affinity left as the launcher set it") == 2
    # memory never on a node the task cannot run on: the node of the CPU Slurm gave it (each task's bind report,
    # read back from the kernel, is a JSON line on stderr)
    applied = sorted((p.mem_policy, sorted(p.mem_nodes or ())) for p in
                     (Plan.from_text(r["applied"]) for r in json_lines(out.stderr)))
    if machine.gpu_nodes[0] != machine.gpu_nodes[1]:       # each GPU's node is the other task's: preferred there
        assert out.stderr.count("memory preferred on node(s)") == 2
        assert applied == sorted(("preferred", [n]) for n in machine.gpu_nodes)
    else:                                                  # one node: the GPU's node is the one it runs on
        assert "memory preferred on node(s)" not in out.stderr
        assert applied == [("bind", [machine.gpu_nodes[0]])] * 2
    # socket mode: the plan (every CPU) is narrowed to Slurm's CPU
    out = srun(slurm, machine, "-n", "2", bind, *numabind_command(), *RUN, "--within-affinity", "--mode", "socket",
               "--", *report_command())
    assert {r: v["cpus"] for r, v in by_task(out.stdout).items()} == {0: [cpu0], 1: [cpu1]}
    assert out.stderr.count("CPUs narrowed to") == 2


@kernel
def test_srun_strict_errors_when_the_plan_falls_outside_slurms_cpus(slurm, bound_machine):
    machine = bound_machine
    cpu0, cpu1 = swapped(machine)
    out = srun(slurm, machine, "-n", "2", f"--cpu-bind=map_cpu:{cpu0},{cpu1}", *run_args(machine),
               "--within-affinity", "--strict", "--", *report_command(), ok=False)
    assert out.returncode != 0
    assert by_task(out.stdout) == {}                        # the command never ran
    assert out.stderr.count("are outside the CPUs this process may use") == 2
    assert out.stderr.count("srun --cpu-bind=none") == 2    # the message names the launcher flag


@kernel
def test_srun_gpus_per_task_binds_each_task_to_its_own_gpu(slurm, bound_machine):
    machine = bound_machine
    if slurm.gpus < 2:
        unavailable("Slurm's GPU gres needs device files, and mknod was refused here")
    out = srun(slurm, machine, "-n", "2", "--gpus-per-task=1", "--cpu-bind=none", *run_args(machine), "--",
               *report_command())
    tasks = by_task(out.stdout)
    assert sorted(t["cvd"] for t in tasks.values()) == ["0", "1"]       # Slurm gave each task one device
    for t in tasks.values():
        assert t["cpus"] == sorted(machine.node_cpus[int(t["cvd"])])
    out = srun(slurm, machine, "-n", "2", "--label", "--gpus-per-task=1", "--cpu-bind=none", *numabind_command(),
               "plan", "--gpu-from-rank", "--json")
    docs = task_documents(out)
    assert sorted(docs) == [0, 1]
    for d in docs.values():
        assert d["gpu"] == 0 and d["gpu_rule"] == "the launcher gave this rank one visible GPU"
