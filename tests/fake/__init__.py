"""Synthetic sysfs/procfs trees for discovery tests, written the way Linux writes them.

:class:`~tests.fake.machine.FakeMachine` describes a machine (NUMA nodes, CPUs, caches, cpusets, CPU
model) and :meth:`~tests.fake.machine.FakeMachine.write` lays it out under a root directory as a kernel
does, so ``numabind.discover(root)`` reads it like a live system and hwloc's ``lstopo-no-graphics
--input ROOT`` reads it like a dump. One module per concern:

* :mod:`tests.fake.masks`: the kernel's mask and list formats, the sysfs paths, sizes;
* :mod:`tests.fake.machine`: the description (:class:`FakeMachine`, :class:`Quirks`) and what it derives
  (online and possible CPUs and nodes, siblings, what the process is allowed);
* :mod:`tests.fake.cpus`: ``sys/devices/system/cpu`` (online lists, ``topology/``) and ``proc/cpuinfo``;
* :mod:`tests.fake.caches`: ``cpuN/cache/indexM``;
* :mod:`tests.fake.nodes`: ``sys/devices/system/node`` (lists, distances, meminfo, huge pages, HMAT),
  the weighted-interleave weights and ``proc/meminfo``;
* :mod:`tests.fake.procfs`: the process's view: ``proc/self/status``, its cgroup (v2, v1, the legacy
  cpuset filesystem) and ``proc/mounts``;
* :mod:`tests.fake.writer`: the whole tree as files and links (quirks and overrides applied), and the
  idempotent writer;
* :mod:`tests.fake.machines`: the ready-made machines, the ``fake_machine`` fixture, ``RecordingReader``.

PCI devices and GPUs are added on top of a tree by ``tests/fakegpu.py`` and ``tests/fakeio.py``.
``tests/fakesys.py`` re-exports the names test modules import.
"""
