"""Sphinx configuration: the API reference is generated from numabind's docstrings (autodoc).

Build offline, warnings as errors: ``python -m sphinx -W --keep-going -b html docs build/docs``.
It documents the numabind that Python imports (install it first); no extension fetches anything.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numabind

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext"))

project = "numabind"
author = "the numabind authors"
copyright = "the numabind authors; Apache-2.0"
release = numabind.__version__
version = release

# doccheck: faults docutils renders silently (a literal split in a table cell, single backticks, a section title
# twice in one document) become warnings, so the build with -W fails on them (docs/_ext/doccheck.py)
extensions = ["sphinx.ext.autodoc", "doccheck"]
# _include/: pieces written once and included by cli.rst and the man page
exclude_patterns: list[str] = ["_include", "_ext"]
root_doc = "index"

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autoclass_content = "both"

# the manual page: python -m sphinx -b man docs build/man -> build/man/numabind.1 (man -l build/man/numabind.1)
man_pages = [("manpage", "numabind", "bind CPU affinity and NUMA memory policy, without numactl",
              [author], 1)]
man_show_urls = False

html_theme = "alabaster"
html_static_path: list[str] = []


def _drop_type_docstrings(app: Any, what: str, name: str, obj: object, options: Any, lines: list[str]) -> None:
    """A constant such as MEM_POLICIES has no docstring of its own: do not show tuple's or str's."""
    if what in ("data", "attribute") and getattr(obj, "__doc__", None) == getattr(type(obj), "__doc__", 0):
        lines.clear()


def setup(app: Any) -> None:
    app.connect("autodoc-process-docstring", _drop_type_docstrings)
