"""Test-suite wiring shared by all tests.

Tests marked ``numa_vm`` run inside a QEMU guest with several NUMA nodes; see
``tests/vm/plugin.py`` and ``python3 -m tests.vm.harness prepare``. Every test runs under the autouse
fixture :func:`restore_process`, which puts the process's binding back after it.

The fixtures test modules share live here, once (a test module never imports another: plain helpers are in
tests/helpers.py and the modules named by their concern); a module asks for one by name, or for all its tests
with ``pytestmark = pytest.mark.usefixtures("no_gpu_env")``.
"""

import os

import pytest

from tests.numactl_oracle import oracle  # noqa: F401 - the fixture: numactl 2.0.19's path, or a skip
from tests.vm import plugin as _vm_plugin

pytest_plugins = ["pytester"]


def pytest_configure(config):
    _vm_plugin.configure(config)
    config.addinivalue_line("markers", "launcher_needs(ok, reason): a launcher test's requirement "
                                       "(tests/launchers.py: skips, or fails under NUMABIND_REQUIRE_LAUNCHERS=1)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    from tests.launchers import unavailable

    for mark in item.iter_markers("launcher_needs"):
        if not mark.kwargs["ok"]:
            unavailable(mark.kwargs["reason"])


@pytest.fixture(autouse=True)
def restore_process(request, monkeypatch):
    """Every test: save every thread's affinity and the memory policy, restore them after the test,
    and run without numabind's settings from the runner's environment (``NUMABIND_BACKEND``, ...).

    Where the memory-policy calls are refused (:func:`tests.kernel.mempolicy_refusal`) a test marked
    ``kernel`` skips with that reason, and any other test runs with only the affinity saved and restored."""
    from tests.kernel import mempolicy_refusal, raw_set_word, raw_word, thread_affinities

    for var in ("NUMABIND_BACKEND", "NUMABIND_STRICT", "NUMABIND_FSROOT", "_NUMABIND_LIBNUMA"):
        monkeypatch.delenv(var, raising=False)
    refusal = mempolicy_refusal()
    if refusal is not None and (request.node.get_closest_marker("kernel") is not None
                                or request.node.get_closest_marker("mempolicy") is not None):
        pytest.skip(refusal)
    affinity = thread_affinities()
    word = None if refusal is not None else raw_word()
    yield
    for tid, cpus in affinity.items():
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:  # a thread that exited
            pass
    if word is not None:
        raw_set_word(*word)
        assert raw_word() == word


@pytest.fixture
def apply_time(monkeypatch):
    """The plan's absent CPU or node reaches the kernel, as when the machine changes between the check and the
    apply (a CPU taken offline, a node gone; otherwise such a plan is a PlanError before anything is applied,
    tests/test_impossible_plans.py): the kernel's refusal, handled by strictness as one of the cpuset."""
    from numabind import live

    monkeypatch.setattr(live, "check_present", lambda plan, what: None)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """hwloc's XML test files unpacked (tests/hwloc_corpus.py)."""
    from tests.hwloc_corpus import unpack

    return unpack(tmp_path_factory.mktemp("hwloc-xml"))


@pytest.fixture
def no_gpu_env(monkeypatch):
    """No GPU-visibility variable of the runner's environment (tests/kernel.py ``GPU_ENV``) reaches the test."""
    from tests.kernel import GPU_ENV

    for var in GPU_ENV:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def fresh_compat(monkeypatch):
    """numabind.compat's tests: no GPU-visibility variable, fake root or start method of the runner leaks in,
    and the compat layer's cached machine is dropped before and after the test."""
    from numabind import compat

    for name in compat.VISIBILITY_VARS + ("NUMABIND_FSROOT", "VLLM_WORKER_MULTIPROC_METHOD", "NUMABIND_STRICT",
                                          "SGLANG_ONE_VISIBLE_DEVICE_PER_PROCESS"):
        monkeypatch.delenv(name, raising=False)
    compat.refresh_topology()
    yield
    compat.refresh_topology()


@pytest.fixture
def on_logger():
    """``on_logger("vllm")``: a :class:`tests.helpers.Records` handler on that logger (level DEBUG), removed
    afterwards."""
    import logging

    from tests.helpers import Records

    attached = []

    def attach(name: str) -> Records:
        lg = logging.getLogger(name)
        handler = Records()
        attached.append((lg, handler, lg.level))
        lg.setLevel(logging.DEBUG)
        lg.addHandler(handler)
        return handler

    yield attach
    for lg, handler, level in attached:
        lg.removeHandler(handler)
        lg.setLevel(level)


@pytest.fixture
def discoveries(monkeypatch):
    """The roots ``numabind.topology.discover`` is called with during the test, in order (it still discovers)."""
    import numabind.topology as topology_module

    calls = []
    real = topology_module.discover

    def counting(root=None):
        calls.append(root)
        return real(root)

    monkeypatch.setattr(topology_module, "discover", counting)
    return calls
