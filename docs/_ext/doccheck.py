"""Faults that render wrong without a docutils warning, found in the parsed document (a Sphinx extension).

docutils accepts them silently, so ``sphinx -W`` alone lets them through:

- an inline literal that does not close on its own line inside a table cell (a grid table's cell wraps, and
  ````--\\ncpu-compress```` renders as ``-- cpu-compress``);
- single backticks (interpreted text in the default role, rendered in italics): a literal missing a backtick;
- two sections of one document with the same title, and a section whose first paragraph repeats its title.

:func:`faults` works on any docutils document; :func:`setup` reports each fault as a Sphinx warning with the
file and line, so the docs build (``-W``) fails on it.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes


def _line(node: nodes.Node) -> int | None:
    while node is not None:
        if getattr(node, "line", None):
            return node.line   # type: ignore[no-any-return]
        node = node.parent
    return None


def faults(document: nodes.document) -> list[tuple[nodes.Node, str]]:
    """Each fault in ``document``, with the node it is at and what to fix."""
    found: list[tuple[nodes.Node, str]] = []
    for literal in document.findall(nodes.literal):
        raw = literal.rawsource
        if "\n" in raw and _inside(literal, nodes.entry):
            found.append((literal, f"inline literal {raw!r} is split across lines of a table cell: it renders "
                                   "with a space inside; widen the column or use a list table"))
    for ref in document.findall(nodes.title_reference):
        found.append((ref, f"single backticks around {ref.astext()!r} (italic text, not a literal): "
                           "write ``double backticks``"))
    seen: dict[str, int | None] = {}
    for section in document.findall(nodes.section):
        title = section.next_node(nodes.title)
        if title is None:
            continue
        text = " ".join(title.astext().split())
        if text in seen:
            found.append((title, f"section title {text!r} appears twice in this document (first at line "
                                 f"{seen[text]}): rename one or merge them"))
        else:
            seen[text] = _line(title)
        first = next((c for c in section.children if isinstance(c, nodes.paragraph)), None)
        if first is not None and section.index(first) == 1 and \
                " ".join(first.astext().split()).rstrip(":").strip() == text:
            found.append((first, f"the first paragraph repeats the section title {text!r}: drop one"))
    return found


def _inside(node: nodes.Node, kind: type[nodes.Element]) -> bool:
    parent = node.parent
    while parent is not None:
        if isinstance(parent, kind):
            return True
        parent = parent.parent
    return False


def _check(app: Any, doctree: nodes.document) -> None:
    from sphinx.util import logging

    log = logging.getLogger(__name__)
    for node, message in faults(doctree):
        log.warning(message, location=node, type="numabind", subtype="doccheck")


def setup(app: Any) -> dict[str, Any]:
    app.connect("doctree-read", _check)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
