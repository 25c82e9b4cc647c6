"""A fake machine's whole tree: :func:`layout` gathers every file and link from the modules of each
concern, then applies the padding quirk and the overrides (:meth:`FakeMachine.set_file`,
:meth:`FakeMachine.remove_file`); :func:`write_tree` writes it under a root, idempotently."""

from __future__ import annotations

import os
from pathlib import Path

from . import caches, cpus, nodes, procfs

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .machine import FakeMachine


def layout(m: FakeMachine) -> tuple[dict[str, str], dict[str, str]]:
    """(every regular file: relative path -> content, every symlink: relative path -> target)."""
    out: dict[str, str] = {}
    links: dict[str, str] = {}
    cpus.cpu_files(m, out, links)
    caches.cache_files(m, out)
    if m.numa_dir and m.nodes:
        nodes.node_files(m, out, links)
    nodes.meminfo(m, out)
    procfs.process_files(m, out)
    cpus.cpu_extras(m, out)
    nodes.hmat_files(m, out, links)
    nodes.weights_files(m, out)
    if m.quirks.padding:
        for rel, text in out.items():
            if rel.startswith("sys/") and text:
                out[rel] = text + "\0"
    for rel, text in m.overrides.items():
        if text is None:
            prefix = rel.rstrip("/") + "/"
            for table in (out, links):
                for key in [k for k in table if k == rel or k.startswith(prefix)]:
                    del table[key]
        else:
            links.pop(rel, None)
            out[rel] = text
    return out, links


def write_tree(root: Path, files: dict[str, str], links: dict[str, str], written: dict[str, str]) -> dict[str, str]:
    """Write ``files`` and ``links`` under ``root``, removing what an earlier write (``written``: relative
    path -> "file" | "link") made and these no longer hold, and the directories that leaves empty;
    returns what this write made (for the next). Nothing else under ``root`` is touched."""
    wanted = {**{k: "file" for k in files}, **{k: "link" for k in links}}
    for rel in sorted(set(written) - set(wanted), reverse=True):
        path = root / rel
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        # Prune directories this left empty, so a removed node or CPU is gone.
        parent = path.parent
        while parent != root:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent
    made: set[Path] = set()
    for rel, text in files.items():
        path = root / rel
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        if written.get(rel) == "link" or path.is_symlink():
            path.unlink()
        path.write_text(text)
    for rel, target in links.items():
        path = root / rel
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        if os.path.lexists(path):
            if path.is_symlink() and os.readlink(path) == target:
                continue
            path.unlink()
        os.symlink(target, path)
    return wanted
