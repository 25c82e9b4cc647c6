"""Test-suite wiring shared by all tests.

Tests marked ``numa_vm`` run inside a QEMU guest with several NUMA nodes; see
``tests/vm/plugin.py`` and ``python3 -m tests.vm.harness prepare``.
"""

import pytest

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
