"""The directory ``numabind instrument`` puts first on a program's ``PYTHONPATH``.

It holds one module, :mod:`sitecustomize <numabind.compat.bootstrap.sitecustomize>`: Python's ``site``
imports it at start-up in every interpreter that sees the path (the instrumented program and each of
its spawn and forkserver children, which inherit the environment), and it routes the host projects'
NUMA modules to numabind's drop-ins before their first import. This ``__init__`` only makes the
directory a package, so that the wheel carries it and numabind's own code can import the module's
checks by name; it is never imported from the ``PYTHONPATH`` entry.
"""

from __future__ import annotations

__all__: list[str] = []
