"""A replayed machine is planned as that machine (issue 42 §2).

With ``--root`` (or ``NUMABIND_FSROOT``) naming another machine, ``numabind plan``, ``numabind plan
--gpu-from-rank`` and ``numabind run --gpu-from-rank --dry-run`` give one plan for a rank: every limit comes
from the replayed tree (its cpuset, its ``proc/self/status``, or an hwloc XML's allowed sets), never from the
process running the test. Checked on every file of the hwloc XML corpus that holds a GPU, on every dump (their
ranks have no GPU: a CPU rank's share), and on fake GPU boxes whose replayed affinity is narrower than their
cpuset (issue 42 §3: the cpuset is the limit; ``--within-affinity`` keeps the rank inside that affinity).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from numabind.cpulist import format_cpulist, parse_cpulist
from numabind.rank import LAUNCHERS
from numabind.strategies import plan_cpu_rank
from numabind.topology import discover
from tests.fakegpu import eight_gpu_box
from tests.fakesys import two_sockets
from tests.hwloc_corpus import gpu_files
from tests.kernel import run_main

DUMPS = sorted((Path(__file__).parent / "dumps").glob("*.tar.bz2"))
LAUNCH_ENV = [lch.rank_var for lch in LAUNCHERS] + [v for lch in LAUNCHERS for v in lch.size_vars] + [
    "SLURM_NODEID", "NUMABIND_LOCAL_RANK", "NUMABIND_LOCAL_WORLD_SIZE", "NUMABIND_FSROOT", "NUMABIND_STRICT",
    "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK",
    "ASCEND_RT_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NUMABIND_GPU_VENDOR"]




GPU_FILES = gpu_files()


@pytest.fixture(autouse=True)
def clean_launch_env(monkeypatch):
    """This process's own launcher and visibility variables (a CI job under Slurm) must not leak in."""
    for var in LAUNCH_ENV:
        monkeypatch.delenv(var, raising=False)


def _find(corpus: Path, name: str) -> Path:
    return next(corpus.rglob(name))


def _rank(monkeypatch, rank: int, size: int) -> None:
    monkeypatch.setenv("SLURM_LOCALID", str(rank))
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", str(size))


def _plan_of(doc: dict) -> tuple:
    plan = doc["plan"]
    return plan["cpus"], plan["mem_policy"], plan["mem_nodes"]


def rank_plans(capsys, root: str, *extra: str) -> tuple[dict | str, dict | str, str]:
    """``(numabind plan --gpu-from-rank --json, numabind run --gpu-from-rank --dry-run --json, run's stderr)`` on
    ``root``; each is its error message instead when it refused (exit 1)."""
    rc, out, err = run_main(capsys, "--root", root, "plan", "--gpu-from-rank", "--json", *extra)
    assert rc in (0, 1), err
    placed: dict | str = json.loads(out) if out else _error(err)
    if isinstance(placed, dict):
        assert rc == (0 if placed["placed"] else 1)
    rc, out, err = run_main(capsys, "--root", root, "run", "--gpu-from-rank", "--dry-run", "--json", *extra,
                            "--", "true")
    assert rc in (0, 1), err
    return placed, (json.loads(out) if rc == 0 else _error(err)), err


def _error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("numabind: error: ")]
    assert len(lines) == 1, err
    return lines[0]


def assert_agree(placed: dict | str, dry: dict | str, err: str) -> None:
    """The same plan, or the same refusal; no limit from the process running the test."""
    if isinstance(placed, str):
        assert dry == placed
        return
    assert isinstance(dry, dict), err
    assert _plan_of(dry) == _plan_of(placed), (dry["plan"], placed["plan"], err)
    assert "outside the CPUs this process may use" not in err, err


@pytest.mark.parametrize("name", GPU_FILES)
def test_every_corpus_gpu_rank_is_planned_as_its_machine(corpus, capsys, monkeypatch, name):
    path = str(_find(corpus, name))
    topo = discover(path)
    if not topo.gpus:      # a GPU class the discovery does not count as a GPU: its ranks are CPU ranks
        ranks = len([n for n in topo.nodes if topo.nodes[n].cpus & topo.allowed_cpus])
        for r in sorted({0, ranks - 1}):
            _rank(monkeypatch, r, ranks)
            assert_agree(*rank_plans(capsys, path))
        return
    size = len(topo.gpus)
    for r in sorted({0, size // 2 + 1 if size > 2 else 0, size - 1}):     # nvidiaDGX2.xml: ranks 0, 9, 15
        _rank(monkeypatch, r, size)
        placed, dry, err = rank_plans(capsys, path)
        assert_agree(placed, dry, err)
        rc, out, _ = run_main(capsys, "--root", path, "plan", "--gpu", str(r), "--json")   # rank r: GPU r
        (row,) = json.loads(out)
        if isinstance(placed, str):                  # no plan for the GPU on that machine: the same error
            assert rc == 1 and row["plan"] is None and row["error"] in placed
            continue
        assert placed["gpu"] == r
        if row["plan"] is None:                      # a GPU without a node: the rank is left unbound
            assert rc == 1 and placed["placed"] is False and _plan_of(dry) == (None, None, None)
            continue
        assert (row["plan"]["cpus"], row["plan"]["mem_policy"], row["plan"]["mem_nodes"]) == _plan_of(placed)
        assert placed["limit_cpus"] == format_cpulist(topo.allowed_cpus)      # the replayed cpuset
        assert parse_cpulist(placed["plan"]["cpus"]) <= topo.allowed_cpus


def test_the_issues_example_dgx2_rank_9(corpus, capsys, monkeypatch):
    """The launch line of issue 42 §2, as text: run --dry-run prints the plan that `plan` prints."""
    path = str(_find(corpus, "nvidiaDGX2.xml"))
    _rank(monkeypatch, 9, 16)
    rc, out, err = run_main(capsys, "--root", path, "run", "--gpu-from-rank", "--dry-run", "--", "python",
                            "train.py")
    assert rc == 0, err
    rc2, planned, _ = run_main(capsys, "--root", path, "plan", "--gpu-from-rank")
    assert rc2 == 0 and planned.startswith("local rank 9 (SLURM_LOCALID) -> GPU 9 on node 1: cpus 24-25, "
                                           "memory bind 1")
    assert "# plan: cpus 24-25, memory bind 1" in out and "numactl --physcpubind=24-25 --membind=1" in out
    assert "outside the CPUs" not in err


@pytest.mark.parametrize("dump", DUMPS, ids=lambda p: p.name)
def test_every_dumps_cpu_ranks_are_planned_as_its_machine(capsys, monkeypatch, dump):
    """The dumps hold no GPU: each local rank gets its share of the dump's nodes, within the dump's cpuset."""
    topo = discover(str(dump))
    assert not topo.gpus
    ranks = len([n for n in topo.nodes if topo.nodes[n].cpus & topo.allowed_cpus])
    for r in range(ranks):
        _rank(monkeypatch, r, ranks)
        placed, dry, err = rank_plans(capsys, str(dump))
        assert_agree(placed, dry, err)
        want, _ = plan_cpu_rank(topo, r, ranks)
        assert placed["plan"]["cpus"] == format_cpulist(want.cpus)
        assert placed["plan"]["mem_nodes"] == (None if want.mem_nodes is None else format_cpulist(want.mem_nodes))


def test_numabind_fsroot_is_a_replayed_root_too(capsys, monkeypatch):
    dump = next(d for d in DUMPS if d.name == "vm-2n.tar.bz2")
    monkeypatch.setenv("NUMABIND_FSROOT", str(dump))
    _rank(monkeypatch, 1, 2)                                    # the issue's example: node 1, CPUs 2-3
    rc, out, err = run_main(capsys, "run", "--gpu-from-rank", "--dry-run", "--json", "--", "true")
    assert rc == 0, err
    assert _plan_of(json.loads(out)) == ("2-3", "bind", "1")
    rc, _, err = run_main(capsys, "run", "--gpu-from-rank", "--", "true")   # nothing is bound on it: refused
    assert rc == 2 and "replayed machine" in err


# ------------------------------------------------------------------ a replayed launcher binding (issue 42 §3)
def launcher_box(root: Path, vendor: str) -> Path:
    """A two-socket box with 8 GPUs of ``vendor`` whose replayed process was started on node 0's CPUs."""
    m = two_sockets(root, cpus_per_socket=8)
    m.set_status(sorted(m.nodes[0].cpus), None).write()
    eight_gpu_box(root, vendor)
    return root


@pytest.mark.parametrize("vendor", ["nvidia", "amd", "intel"])
def test_a_replayed_launcher_binding_is_replaced_unless_within_affinity(tmp_path, capsys, monkeypatch, vendor):
    root = str(launcher_box(tmp_path / "box", vendor))
    topo = discover(root)
    node0, node1 = (format_cpulist(topo.nodes[n].cpus) for n in (0, 1))
    assert topo.affinity == topo.nodes[0].cpus and len(topo.gpus) == 8
    _rank(monkeypatch, 5, 8)                                    # GPU 5 is on node 1
    placed, dry, err = rank_plans(capsys, root)
    assert_agree(placed, dry, err)
    assert _plan_of(placed) == (node1, "bind", "1")             # the cpuset is the limit
    assert placed["launcher_cpus"] == node0 and placed["within_affinity"] is False
    assert "replaces it as numactl does" in placed["cpu_rule"]
    # --within-affinity: the replayed affinity (node 0) is the limit, in plan and in the dry run alike
    placed, dry, err = rank_plans(capsys, root, "--within-affinity")
    assert isinstance(dry, dict) and isinstance(placed, dict), err
    assert _plan_of(dry) == _plan_of(placed) == (None, "preferred", "0")
    assert placed["within_affinity"] is True and placed["limit_cpus"] == node0
    rc, _, err = run_main(capsys, "--root", root, "run", "--gpu-from-rank", "--dry-run", "--within-affinity",
                          "--strict", "--", "true")
    assert rc == 1 and "srun --cpu-bind=none" in err and "mpirun --bind-to none" in err


def test_a_replayed_dry_runs_numactl_line_leaves_the_replayed_affinity_with_all(tmp_path, capsys, monkeypatch):
    """numactl checks --physcpubind against the affinity of the process it runs in: on the replayed machine
    that is its own Cpus_allowed (node 0 here), so a plan on node 1 needs --all there, whatever the affinity of
    the process running the test; a plan inside it needs none."""
    root = str(launcher_box(tmp_path / "box", "nvidia"))
    topo = discover(root)
    node0, node1 = (format_cpulist(topo.nodes[n].cpus) for n in (0, 1))
    _rank(monkeypatch, 5, 8)                                    # GPU 5 is on node 1, outside the affinity
    rc, out, err = run_main(capsys, "--root", root, "run", "--gpu-from-rank", "--dry-run", "--", "python",
                            "train.py")
    assert rc == 0, err
    assert f"numactl --all --physcpubind={node1} --membind=1 -- python train.py" in out.splitlines()
    rc, out, err = run_main(capsys, "--root", root, "run", "--gpu-from-rank", "--dry-run", "--json", "--", "true")
    assert rc == 0, err
    assert json.loads(out)["commands"][-1][:2] == ["numactl", "--all"]
    _rank(monkeypatch, 1, 8)                                    # GPU 1 is on node 0, inside it
    rc, out, err = run_main(capsys, "--root", root, "run", "--gpu-from-rank", "--dry-run", "--", "true")
    assert rc == 0, err
    assert f"numactl --physcpubind={node0} --membind=0 -- true" in out.splitlines()
    # numactl's own options on the replayed root, as numabind run --dry-run --root says them
    rc, out, err = run_main(capsys, "--root", root, "run", "--dry-run", "-N", "1", "--", "true")
    assert rc == 0, err
    assert [line for line in out.splitlines() if line.startswith("numactl")][0].startswith("numactl --all ")
