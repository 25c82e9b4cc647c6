"""The directory ``numabind instrument`` puts first on a program's ``PYTHONPATH``: its one module,
:mod:`sitecustomize <numabind.compat.bootstrap.sitecustomize>`, routes the host projects' NUMA modules to
numabind's drop-ins. This ``__init__`` only makes it a package (the wheel carries it, numabind imports it by name).
"""

from __future__ import annotations

__all__: list[str] = []
