"""``live.machine(cpuset_if_narrowed=True)`` (``numabind run``'s fast path): the cpuset is read only when the
affinity leaves out an online CPU, and the answer is the one a full read gives."""

from __future__ import annotations

import os

import pytest

from numabind import _cgroup, live

kernel = pytest.mark.kernel


def _limits(allowed):
    return allowed.online_cpus, allowed.allowed_cpus, allowed.allowed_nodes, allowed.affinity


@kernel
def test_an_affinity_holding_every_online_cpu_skips_the_cpuset_with_the_same_answer(monkeypatch):
    full = live.machine()
    if not os.sched_getaffinity(0) >= full.online_cpus:
        os.sched_setaffinity(0, full.allowed_cpus)       # restore_process puts the affinity back
    if not os.sched_getaffinity(0) >= full.online_cpus:
        pytest.skip("the cpuset leaves out an online CPU: the cpuset must be read")
    full = live.machine()

    def refused(*args, **kwargs):
        raise AssertionError("the cpuset was read")

    monkeypatch.setattr(_cgroup, "read_allowed", refused)
    quick = live.machine(cpuset_if_narrowed=True)
    assert _limits(quick.allowed) == _limits(full.allowed)
    assert quick.nodes == full.nodes and quick.allowed_source == live.AFFINITY_HOLDS_ONLINE
    with pytest.raises(AssertionError, match="the cpuset was read"):
        live.machine()                                   # the default reads it, always


@kernel
def test_a_narrowed_affinity_reads_the_cpuset():
    online = live.machine().online_cpus
    if len(online) < 2 or not os.sched_getaffinity(0) >= {min(online)}:
        pytest.skip("needs two online CPUs")
    os.sched_setaffinity(0, {min(online)})               # restore_process puts the affinity back
    quick, full = live.machine(cpuset_if_narrowed=True), live.machine()
    assert quick.allowed == full.allowed and quick.allowed_source != live.AFFINITY_HOLDS_ONLINE
    assert quick.affinity == {min(online)} and quick.allowed_cpus >= {min(online)}


@pytest.mark.parametrize("status, expected", [
    ("Name:\tx\nMems_allowed:\t3\nMems_allowed_list:\t0-1\n", {0, 1}),
    ("Mems_allowed_list:\t2\nName:\tx", {2}),                          # the first line, no newline at the end
    ("Name:\tx\nMems_allowed_list:\t4\nMems_allowed_list:\t5\n", {4}),   # the first of two, as key_values
    ("Name:\tx\nXMems_allowed_list:\t4\n", None),                         # a whole key only
    ("Name:\tx\n", None),
    ("Name:\tx\nMems_allowed_list:\tgarbage\n", None),
])
def test_mems_allowed_reads_the_one_line(tmp_path, monkeypatch, status, expected):
    from numabind._fs import FsReader

    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "status").write_text(status)
    monkeypatch.setattr(live, "_reader", FsReader(str(tmp_path)))
    assert live.mems_allowed() == expected


def test_mems_allowed_agrees_with_the_status_parser():
    from numabind._fs import key_values

    listed = key_values(open("/proc/self/status").read())["Mems_allowed_list"]
    assert live.mems_allowed() == {n for part in listed.split(",") for n in
                                   range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)}
