"""Fixtures for the tests that run inside the NUMA guest."""

from __future__ import annotations

import os

import pytest

from . import harness, plugin


@pytest.fixture(scope="session")
def vm_topology() -> harness.TopologySpec:
    """The layout of the guest this test runs in (what QEMU was told to emulate)."""
    name = os.environ.get(plugin.GUEST_ENV)
    if not name:
        pytest.fail("vm_topology is only available inside the numa_vm guest", pytrace=False)
    return harness.topology(name)
