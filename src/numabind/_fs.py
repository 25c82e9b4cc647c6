"""The one place that reads sysfs and procfs files, relative to a root.

A whole machine can be replayed from a directory by pointing the root at it
(like hwloc's ``HWLOC_FSROOT``): discovery code never opens an absolute path.
"""

from __future__ import annotations

import os

__all__ = ["FsReader", "resolve_root"]


def resolve_root(root: str | os.PathLike | None = None) -> str:
    """The discovery root: the argument, else ``$NUMABIND_FSROOT``, else ``/``."""
    if root is None:
        root = os.environ.get("NUMABIND_FSROOT") or "/"
    return os.path.abspath(os.fspath(root))


class FsReader:
    """Reads files below ``root``; missing or unreadable files read as ``None``."""

    __slots__ = ("root", "is_live")

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = resolve_root(root)
        self.is_live = self.root == "/"

    def path(self, rel: str) -> str:
        return os.path.join(self.root, rel.lstrip("/"))

    def read(self, rel: str, limit: int | None = None) -> str | None:
        """The file's text (its first ``limit`` bytes when given), or None.

        Raw ``os.read`` is used instead of text-mode ``open``: discovery reads
        thousands of small sysfs files and the io stack costs more than the read.
        """
        try:
            fd = os.open(self.path(rel), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            chunks = []
            size = 0
            while True:
                want = 65536 if limit is None else min(65536, limit - size)
                if want <= 0:
                    break
                chunk = os.read(fd, want)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except OSError:
            return None
        finally:
            os.close(fd)
        return b"".join(chunks).decode("utf-8", errors="replace")

    def read_strip(self, rel: str) -> str | None:
        text = self.read(rel)
        return None if text is None else text.strip()

    def read_int(self, rel: str) -> int | None:
        text = self.read_strip(rel)
        if text is None:
            return None
        try:
            return int(text, 0) if text.startswith("0x") else int(text)
        except ValueError:
            return None

    def listdir(self, rel: str) -> list[str]:
        try:
            return sorted(os.listdir(self.path(rel)))
        except OSError:
            return []

    def exists(self, rel: str) -> bool:
        return os.path.exists(self.path(rel))

    def realpath(self, rel: str) -> str | None:
        """Resolve a sysfs symlink; the result is relative to the root."""
        full = self.path(rel)
        if not os.path.lexists(full):
            return None
        real = os.path.realpath(full)
        if self.root != "/" and real.startswith(self.root + os.sep):
            real = real[len(self.root):]
        return real
