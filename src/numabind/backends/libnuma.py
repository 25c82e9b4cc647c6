"""The ``libnuma`` backend: libnuma.so.1 opened at run time with dlopen()."""

from __future__ import annotations

import os

from ..errors import NumabindError

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any
from ._native import NativeBackend

__all__ = ["LibnumaBackend", "LIBNUMA_SONAME"]

#: The soname opened; ``_NUMABIND_LIBNUMA`` overrides it (tests use it to
#: simulate a machine without libnuma). Only a bare library file name is
#: accepted: a path would let the environment choose code to load.
LIBNUMA_SONAME = "libnuma.so.1"
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+-")


def _bare_soname(name: str) -> bool:
    """``lib<name>.so`` with optional ``.<digits>`` version parts, nothing else (no path, no space)."""
    stem, dot_so, version = name.partition(".so")
    if not (dot_so and stem.startswith("lib") and len(stem) > 3 and all(c in _NAME_CHARS for c in stem[3:])):
        return False
    return version == "" or (version.startswith(".") and all(p.isascii() and p.isdigit()
                                                             for p in version[1:].split(".")))


class LibnumaBackend(NativeBackend):
    name = "libnuma"
    prefix = "nb_numa_"

    def __init__(self) -> None:
        super().__init__()
        soname = os.environ.get("_NUMABIND_LIBNUMA", LIBNUMA_SONAME)
        if not _bare_soname(soname):
            raise NumabindError(
                f"_NUMABIND_LIBNUMA={soname[:100]!r} is not a bare shared-library name like "
                f"'libnuma.so.1'; refusing to load it (unset the variable)"
            )
        err = self.ffi.new("char[]", 512)
        if self.lib.nb_numa_load(soname.encode(), err, 512) != 0:
            raise NumabindError(f"cannot load {soname}: {self.ffi.string(err).decode(errors='replace')}")
        if self.lib.nb_numa_available() < 0:
            raise NumabindError(f"{soname} loaded, but numa_available() says this kernel has no NUMA support")

    def _setaff(self, tid: int, bits: int, mask: Any) -> int:
        return self.lib.nb_numa_sched_setaffinity(tid, bits, mask)  # type: ignore[no-any-return]

    def _getaff(self, tid: int, bits: int, mask: Any) -> int:
        return self.lib.nb_numa_sched_getaffinity(tid, bits, mask)  # type: ignore[no-any-return]
