"""The checks a test of the x86 guests and the same test in the arm64 guest (test_vm_arm64.py) both run, one
module per test module (``placement`` for test_vm_placement.py, ...): plain functions named as the tests, without
``test_``, and the measuring helpers they share. Test modules call them; no test module imports another."""
