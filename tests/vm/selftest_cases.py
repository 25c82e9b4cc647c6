"""Guest tests for the harness's end-to-end self-check (test_vm_harness.py).

The file name keeps it out of normal collection: one test here fails on purpose and
one hangs, to prove that the host reports a guest failure and survives a guest hang.
Run only as ``pytest tests/vm/selftest_cases.py`` by that self-check.
"""

import os
import time

import pytest


@pytest.mark.numa_vm
def test_passes_in_guest():
    assert os.path.isdir("/sys/devices/system/node/node1")


@pytest.mark.numa_vm
def test_fails_in_guest():
    print("GUEST-OUTPUT-MARK from", os.uname().release)
    assert 2 + 2 == 5


@pytest.mark.numa_vm
def test_hangs_in_guest():
    time.sleep(3600)
