"""``numabind gather`` on real multi-node kernels (issue 44 §2): gathered in a guest, replayed on the host.

The 3-node guest (``mem-only``: node 2 memory only) gathers itself into its writable share (the run's folder on the
host), with what ``numabind``, ``plan --all``, ``hardware`` and ``topology`` printed there
(:func:`tests.vm.cases.gather.guest_gathers`); the host then replays the archive and the four must print the same
(tests/vm/cases/gather.py says what is compared). The arm64 guest does the same inside its own session
(test_vm_arm64.py's ``test_arm64_gather_writes_an_archive_the_host_replays``), and the host replays that archive
here as well: an arm64 machine read on x86.

The host's tests read the folder of the guest run this pytest session made. When the guest test was not selected
(``-m "not numa_vm"``), there is nothing to replay and they skip saying so; when it was and left no archive, they
fail (its own failure says why).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import harness, plugin
from .cases import gather as gathering

TOPOLOGY = "mem-only"
NAME = "gather-mem-only"
#: The arm64 guest's archive (test_vm_arm64.py writes it in its session).
ARM64 = ("mem-only", "arm64", "gather-arm64", "tests/vm/test_vm_arm64.py::test_arm64_gather_writes_an_archive_the_"
                                               "host_replays")


@pytest.mark.numa_vm(topology=TOPOLOGY)
def test_gather_in_the_3_node_guest(vm_topology):
    gathering.guest_gathers(NAME, vm_topology)


def _guest_folder(request: pytest.FixtureRequest, topology: str, kernel: str, name: str, nodeid: str) -> Path:
    """The run folder where the guest test ``nodeid`` left ``name``.tar.bz2 in this session."""
    host = request.config.pluginmanager.get_plugin("numabind-vm-host")
    selected = host is not None and any(item.nodeid == nodeid for item in host.items)
    if not selected:
        pytest.skip(f"{nodeid} was not selected in this session, so there is no archive of that guest to replay "
                    f"(run it with this test: pytest {nodeid} {request.node.nodeid})")
    sess = host.sessions.get((topology, kernel))
    if sess is None or sess.run is None:
        reason = f"the {topology} guest (kernel {kernel}) did not run: " + (
            sess.error if sess is not None and sess.error else "see the failure or skip of " + nodeid)
        if plugin.vm_required():
            pytest.fail(reason)
        pytest.skip(reason)
    archive = sess.run.run_dir / f"{name}.tar.bz2"
    assert archive.is_file(), f"the guest left no {archive.name} in {sess.run.run_dir}: see {nodeid}'s failure"
    return sess.run.run_dir


def test_the_3_node_guests_archive_replays_on_the_host(request):
    nodeid = f"tests/vm/test_vm_gather.py::{test_gather_in_the_3_node_guest.__name__}"
    folder = _guest_folder(request, TOPOLOGY, harness.DEFAULT_KERNEL, NAME, nodeid)
    counts = gathering.replay_matches(folder, NAME)
    print(f"{NAME}: replayed on the host as the guest printed it: {counts} lines")


def test_the_arm64_guests_archive_replays_on_the_host(request):
    topology, kernel, name, nodeid = ARM64
    folder = _guest_folder(request, topology, kernel, name, nodeid)
    counts = gathering.replay_matches(folder, name)
    print(f"{name}: an arm64 machine replayed on the host as the guest printed it: {counts} lines")
