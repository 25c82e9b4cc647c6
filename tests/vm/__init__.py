"""A QEMU guest with several NUMA nodes, for tests that need a real multi-node kernel.

``harness`` prepares and boots the guest (``python3 -m tests.vm.harness prepare``),
``plugin`` runs the tests marked ``numa_vm`` inside it and reports their results
on the host, and the ``test_vm_*`` modules hold the tests themselves.
"""
