"""Sphinx configuration: the API reference is generated from numabind's docstrings (autodoc).

Build offline, warnings as errors: ``python -m sphinx -W --keep-going -b html docs build/docs``.
It documents the numabind that Python imports (install it first); no extension fetches anything.
"""

from __future__ import annotations

from typing import Any

import numabind

project = "numabind"
author = "the numabind authors"
copyright = "the numabind authors; Apache-2.0"
release = numabind.__version__
version = release

extensions = ["sphinx.ext.autodoc"]
exclude_patterns: list[str] = []
root_doc = "index"

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autoclass_content = "both"

html_theme = "alabaster"
html_static_path: list[str] = []


def _drop_type_docstrings(app: Any, what: str, name: str, obj: object, options: Any, lines: list[str]) -> None:
    """A constant such as MEM_POLICIES has no docstring of its own: do not show tuple's or str's."""
    if what in ("data", "attribute") and getattr(obj, "__doc__", None) == getattr(type(obj), "__doc__", 0):
        lines.clear()


def setup(app: Any) -> None:
    app.connect("autodoc-process-docstring", _drop_type_docstrings)
