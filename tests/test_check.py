"""``numabind check`` and ``numabind.check()``: the kernel calls tried in a child, placement proven per node, the
causes of refusals (a seccomp filter in a child, a capability dropped with setpriv, synthetic status values), the
JSON shape, usage errors, and pod alignment and ``--root`` on fake trees.

The nodes and CPUs are this machine's, derived at run time; the seccomp filter is installed in a child (a filter
cannot be removed), and the check's own child inherits it, as a container's does.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap

import pytest

from numabind.preflight import CheckReport, check, quick
from numabind.preflight.pods import cgroup_path, qos_class
from numabind.preflight.probes import classify, run_child, status_facts
from numabind.plan import Plan
from tests.fakegpu import eight_gpu_box
from tests.fakesys import cgroup_restricted, two_sockets
from tests.kernel import ROOT, SECCOMP, child_env, numabind_cli, run_python
from tests.workers import node_with_cpus

#: A /proc/self/status of a container: CapEff without CAP_SYS_NICE (Docker's default set), a seccomp filter.
DOCKER_STATUS = "Name:\tpython\nCapEff:\t00000000a80425fb\nSeccomp:\t2\nMems_allowed_list:\t0\nCpus_allowed_list:\t0-3\n"
#: The same with CAP_SYS_NICE (bit 23) added.
NICE_STATUS = DOCKER_STATUS.replace("00000000a80425fb", "00000000a88425fb")


def _memory_nodes_with_cpus() -> list[int]:
    allowed = os.sched_getaffinity(0)
    out = []
    for name in sorted(os.listdir("/sys/devices/system/node")):
        if not (name.startswith("node") and name[4:].isdigit()):
            continue
        base = f"/sys/devices/system/node/{name}"
        cpus = open(f"{base}/cpulist").read().strip()
        total = next(line.split()[3] for line in open(f"{base}/meminfo") if "MemTotal:" in line)
        if cpus and total != "0" and _ids(cpus) & allowed:
            out.append(int(name[4:]))
    return out


def _ids(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


# ----------------------------------------------------------------------------- this host's kernel
@pytest.mark.kernel
@pytest.mark.mempolicy
def test_check_holds_on_this_host_with_placement_per_node(no_gpu_env):
    report = check(mib=16)
    assert isinstance(report, CheckReport)
    assert report.exit_status == 0, report.describe()
    assert report.ok and not report.problems
    nodes = _memory_nodes_with_cpus()
    assert sorted(n for p in report.placement for n in p.nodes) == nodes
    for p in report.placement:
        [node] = p.nodes
        assert p.pages == (16 << 20) // os.sysconf("SC_PAGE_SIZE")
        assert p.share == 1.0 and p.by_node == {node: p.pages}
        assert p.late_share == 1.0 and p.late_cpus_held is True, p.describe()
    calls = {t.call for t in report.trials}
    assert calls == {"sched_setaffinity", "set_mempolicy", "mbind", "move_pages", "migrate_pages"}
    assert report.verdict().startswith("ok: ") and "placement held on node" in report.verdict()


@pytest.mark.kernel
@pytest.mark.mempolicy
def test_the_caller_is_never_bound(no_gpu_env):
    before = (os.sched_getaffinity(0), open("/proc/self/status").read().split("Mems_allowed_list:")[1].split()[0])
    check(mib=1)
    after = (os.sched_getaffinity(0), open("/proc/self/status").read().split("Mems_allowed_list:")[1].split()[0])
    assert before == after


@pytest.mark.kernel
@pytest.mark.mempolicy
def test_quick_tries_the_calls_without_placement(no_gpu_env):
    report = quick()
    assert report.ok and report.trials and report.placement == ()
    assert any(s.startswith("placement: not asked") for s in report.skipped)
    assert "\n" not in report.verdict()


@pytest.mark.kernel
@pytest.mark.mempolicy
def test_explicit_plans_are_the_ones_checked(no_gpu_env):
    node, cpu = node_with_cpus()
    report = check(plans=[Plan(cpus={cpu}, mem_policy="interleave", mem_nodes={node})], mib=4)
    assert report.ok, report.describe()
    assert [p.mem_policy for _, p in report.plans] == ["interleave"]
    assert {t.what for t in report.trials if t.call == "set_mempolicy"} == {f"interleave {node}"}
    [placed] = report.placement
    assert placed.share == 1.0 and placed.late_cpus_held is True


@pytest.mark.kernel
def test_a_child_that_runs_past_its_time_is_reported_not_raised(no_gpu_env):
    report = check(timeout=0.001)
    assert report.exit_status == 1
    assert any("did not finish within" in p and "killed" in p for p in report.problems), report.problems
    assert report.verdict() == report.problems[0]


def test_a_child_killed_by_a_signal_is_reported():
    from numabind.preflight.probes import _answer

    out = _answer(-9, b"", b"some last words\n")
    assert out == {"error": "the check's child was killed by SIGKILL: some last words"}
    assert "without an answer" in _answer(1, b"not json", b"")["error"]


def test_run_child_with_a_request_it_cannot_take_reports_the_error():
    out = run_child([Plan(cpus={65000})], placement=False, mib=1, timeout=60)
    [trial] = out["trials"]
    assert trial["call"] == "sched_setaffinity" and not trial["ok"] and trial["error"]


# ----------------------------------------------------------------------------- refusals, for real
@pytest.mark.kernel
def test_cli_under_a_seccomp_filter_refusing_set_mempolicy_exits_1_naming_it():
    cp = run_python(SECCOMP + textwrap.dedent('''
        import sys
        deny("set_mempolicy")
        from numabind.cli import main
        sys.exit(main(["check", "--mib", "4"]))
    '''))
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "set_mempolicy (bind" in cp.stdout and "refused (EPERM), cause: seccomp" in cp.stdout
    assert "a seccomp profile that allows set_mempolicy" in cp.stdout       # refusal_fix's words, as run says them
    assert "skipped: placement: not measured, since a call it needs was refused" in cp.stdout
    verdict = cp.stdout.strip().splitlines()[-1]
    assert verdict == "verdict: memory policy: refused (EPERM): a seccomp profile that allows set_mempolicy"


@pytest.mark.kernel
def test_json_under_a_seccomp_filter_names_the_cause_and_fix():
    cp = run_python(SECCOMP + textwrap.dedent('''
        import sys
        deny("set_mempolicy", "mbind")
        from numabind.cli import main
        sys.exit(main(["check", "--json", "--no-placement"]))
    '''))
    assert cp.returncode == 1, cp.stderr
    out = json.loads(cp.stdout)
    refused = {t["call"]: t for t in out["trials"] if not t["ok"]}
    assert set(refused) == {"set_mempolicy", "mbind"}
    for t in refused.values():
        assert t["errno"] == "EPERM" and t["cause"] == "seccomp" and "seccomp profile" in t["detail"]
    assert out["exit_status"] == 1 and out["ok"] is False and len(out["failures"]) == 2


@pytest.mark.kernel
def test_a_missing_capability_under_a_profile_says_add_sys_nice():
    """Docker's case: a seccomp profile that allows the memory calls only with CAP_SYS_NICE, and no CAP_SYS_NICE
    (setpriv drops it from the bounding set: a root process then lacks it after exec)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to drop CAP_SYS_NICE")
    script = SECCOMP + textwrap.dedent('''
        import sys
        deny("set_mempolicy")
        from numabind.cli import main
        sys.exit(main(["check", "--no-placement"]))
    ''')
    import subprocess
    import sys

    cp = subprocess.run(["setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice", sys.executable, "-c", script],
                        capture_output=True, text=True, env=child_env(), cwd=ROOT, timeout=120)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "cause: capability: no CAP_SYS_NICE (under a seccomp profile" in cp.stdout
    assert cp.stdout.strip().splitlines()[-1] == "verdict: memory policy: refused (EPERM): add SYS_NICE"


# ----------------------------------------------------------------------------- the cause classifier
def test_status_facts_reads_the_capability_seccomp_and_cpuset():
    facts = status_facts(DOCKER_STATUS)
    assert facts == {"cap_sys_nice": False, "seccomp": 2, "mems_allowed": [0], "cpus_allowed": [0, 1, 2, 3]}
    assert status_facts(NICE_STATUS)["cap_sys_nice"] is True
    assert status_facts("Name:\tx\n") == {"cap_sys_nice": None, "seccomp": None, "mems_allowed": None,
                                          "cpus_allowed": None}


@pytest.mark.parametrize(("call", "err", "status", "extra", "cause", "fix"), [
    ("set_mempolicy", "EPERM", DOCKER_STATUS, {}, "capability", "add SYS_NICE"),
    ("set_mempolicy", "EPERM", NICE_STATUS, {}, "seccomp", "a seccomp profile that allows set_mempolicy"),
    ("mbind", "EPERM", DOCKER_STATUS.replace("Seccomp:\t2", "Seccomp:\t0"), {}, "capability", "add SYS_NICE"),
    ("sched_setaffinity", "EINVAL", NICE_STATUS, {"cpus": [8, 9]}, "cpuset",
     "pick CPUs inside the cpuset or widen it"),
    ("set_mempolicy", "EINVAL", NICE_STATUS, {"policy": "bind", "nodes": [1]}, "cpuset",
     "pick nodes inside cpuset.mems or widen it"),
    ("set_mempolicy", "EINVAL", NICE_STATUS, {"policy": "preferred-many", "nodes": [0]}, "kernel",
     "Linux 5.15+ for preferred-many"),
    ("mbind", "EINVAL", NICE_STATUS, {"policy": "weighted-interleave", "nodes": [0]}, "kernel",
     "Linux 6.9+ for weighted-interleave"),
    ("set_mempolicy", "ENOSYS", NICE_STATUS, {"every_call_enosys": True}, "emulator",
     "run on a Linux kernel (a full-system VM, not qemu-user)"),
    ("migrate_pages", "ENOSYS", NICE_STATUS, {}, "kernel", "a kernel with migrate_pages"),
])
def test_classify_names_the_cause_and_fix(call, err, status, extra, cause, fix):
    import errno

    refusal = classify(call, getattr(errno, err), status_facts(status), **extra)
    assert (refusal.cause, refusal.fix) == (cause, fix)
    assert refusal.detail


def test_a_refusal_ends_with_runs_own_fix():
    import errno

    from numabind.errors import refusal_fix

    refusal = classify("set_mempolicy", errno.EPERM, status_facts(DOCKER_STATUS))
    assert refusal.detail.endswith(refusal_fix(errno.EPERM, "set_mempolicy"))


# ----------------------------------------------------------------------------- the command line
@pytest.mark.kernel
@pytest.mark.mempolicy
def test_cli_json_shape():
    cp = numabind_cli("check", "--json", "--mib", "4")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    out = json.loads(cp.stdout)
    assert set(out) == {"ok", "exit_status", "verdict", "root", "seconds", "backend", "plans", "trials",
                        "placement", "gpus", "pods", "measure", "skipped", "problems", "failures"}
    assert out["measure"] is None                   # not asked (--measure: tests/test_measure.py)
    assert out["ok"] is True and out["exit_status"] == 0 and out["failures"] == []
    for t in out["trials"]:
        assert set(t) == {"call", "what", "ok", "errno", "error", "cause", "fix", "detail"} and t["ok"]
    for p in out["placement"]:
        assert set(p) == {"who", "plan", "nodes", "pages", "by_node", "share", "late_thread", "warnings", "error",
                          "ok"}
        assert p["share"] == 1.0 and p["by_node"] == {p["nodes"]: p["pages"]}
        assert p["late_thread"] == {"share": 1.0, "cpus_held": True}
    assert set(out["pods"]) == {"cgroup", "qos", "exclusive_cpus", "problems", "ok"}


@pytest.mark.kernel
@pytest.mark.mempolicy
def test_cli_takes_numactl_options_as_run_does():
    node, cpu = node_with_cpus()
    cp = numabind_cli("check", "--json", "--no-placement", "-C", str(cpu), "-m", str(node))
    assert cp.returncode == 0, cp.stderr
    [plan] = json.loads(cp.stdout)["plans"]
    assert (plan["cpus"], plan["mem_policy"], plan["mem_nodes"]) == (str(cpu), "bind", str(node))


@pytest.mark.parametrize("argv", [
    ("--mib", "0"),
    ("--mib", "lots"),
    ("--mode", "socket"),
    ("--gpu", "0", "--membind", "0"),
    ("--membind", "0", "--interleave", "0"),
    ("--no-such-option",),
])
def test_usage_errors_exit_2(argv):
    cp = numabind_cli("check", *argv)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "error" in cp.stderr and "Traceback" not in cp.stderr


def test_a_plan_the_machine_cannot_take_exits_1(tmp_path):
    cp = numabind_cli("check", "--membind", "63")
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert "numabind check:" in cp.stderr and "Traceback" not in cp.stderr


# ----------------------------------------------------------------------------- pods and --root on fake trees
def test_qos_class_from_the_cgroup_path():
    assert qos_class("/kubepods.slice/kubepods-pod1.slice/cri-containerd-a.scope") == "Guaranteed"
    assert qos_class("/kubepods/pod7/ctr") == "Guaranteed"
    assert qos_class("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/x") == "Burstable"
    assert qos_class("/kubepods/besteffort/pod1/ctr") == "BestEffort"
    assert qos_class("/system.slice/docker-abc.scope") is None
    assert qos_class("/") is None and qos_class(None) is None


def test_root_skips_the_calls_with_the_reason_and_reads_the_replayed_cpuset(tmp_path, no_gpu_env):
    cgroup_restricted(tmp_path)
    report = check(tmp_path)
    assert report.trials == () and report.placement == ()
    assert any("replayed machine" in s for s in report.skipped), report.skipped
    assert report.pods.cgroup == "/kubepods/pod7/ctr" and report.pods.qos == "Guaranteed"
    assert report.pods.exclusive_cpus and report.pods.ok
    assert [who for who, _ in report.plans] == ["node 1"]    # the cpuset allows node 1's CPUs only
    assert report.exit_status == 0


def test_gpus_outside_the_cpuset_are_misaligned(tmp_path, no_gpu_env):
    cgroup_restricted(tmp_path)                 # cpuset: socket 1's CPUs, memory node 1
    eight_gpu_box(tmp_path, "nvidia")          # GPUs 0-3 on node 0, 4-7 on node 1
    report = check(tmp_path)
    assert report.exit_status == 1
    [problem] = report.pods.problems
    assert problem.startswith("gpu 0-3 on node 0: the cpuset (") and "allows none of node 0's CPUs or memory" in problem
    assert "Topology Manager" in problem
    assert report.verdict().startswith("gpu 0 cannot be placed") or report.verdict().startswith("pod alignment: ")


def test_a_guaranteed_pod_without_exclusive_cpus(tmp_path, no_gpu_env):
    m = two_sockets(tmp_path, 4)
    m.set_cgroup2("/kubepods.slice/kubepods-pod9.slice/cri-containerd-c.scope", range(8), (0, 1))
    m.write()
    report = check(tmp_path)
    assert report.pods.qos == "Guaranteed" and not report.pods.exclusive_cpus
    [problem] = report.pods.problems
    assert "a Guaranteed pod without exclusive CPUs: its cpuset is every online CPU (0-7)" in problem
    assert "--cpu-manager-policy=static" in problem
    assert report.exit_status == 1 and report.verdict() == f"pod alignment: {problem}"


def test_a_burstable_pod_sharing_cpus_is_fine(tmp_path, no_gpu_env):
    m = two_sockets(tmp_path, 4)
    m.set_cgroup2("/kubepods/burstable/pod3/ctr", range(8), (0, 1))
    m.write()
    report = check(tmp_path)
    assert report.pods.qos == "Burstable" and report.pods.ok and report.exit_status == 0


def test_cgroup_path_prefers_v2_then_the_v1_cpuset(tmp_path):
    from numabind._fs import FsReader

    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text("12:cpu,cpuacct:/a\n4:cpuset:/docker/x\n")
    assert cgroup_path(FsReader(str(tmp_path))) == "/docker/x"
    (tmp_path / "proc" / "self" / "cgroup").write_text("4:cpuset:/docker/x\n0::/kubepods/pod1/c\n")
    assert cgroup_path(FsReader(str(tmp_path))) == "/kubepods/pod1/c"


def test_cli_root_json(tmp_path, no_gpu_env):
    m = two_sockets(tmp_path, 4)
    m.set_cgroup2("/kubepods/pod2/ctr", range(8), (0, 1))
    m.write()
    cp = numabind_cli("--root", str(tmp_path), "check", "--json")
    assert cp.returncode == 1, cp.stderr
    out = json.loads(cp.stdout)
    assert out["trials"] == [] and out["placement"] == []
    assert out["pods"]["qos"] == "Guaranteed" and out["pods"]["ok"] is False
    assert [p["who"] for p in out["plans"]] == ["node 0", "node 1"]
    assert any("replayed machine" in s for s in out["skipped"])


@pytest.mark.kernel
def test_numabind_check_is_the_function(no_gpu_env):
    """``numabind.check(...)`` on numabind's face is :func:`numabind.preflight.check`, also once the CLI's module
    ``numabind.cli.check`` and the preflight package are imported."""
    import numabind
    import numabind.cli.check  # noqa: F401
    import numabind.preflight.probes  # noqa: F401

    assert numabind.check is check
    report = numabind.check(placement=False)
    assert isinstance(report, CheckReport) and report.trials
