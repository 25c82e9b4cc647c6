"""Test-suite wiring shared by all tests.

Tests marked ``numa_vm`` run inside a QEMU guest with several NUMA nodes; see
``tests/vm/plugin.py`` and ``python3 -m tests.vm.harness prepare``.
"""

from tests.vm import plugin as _vm_plugin

pytest_plugins = ["pytester"]


def pytest_configure(config):
    _vm_plugin.configure(config)
