"""The ``libnuma`` backend: libnuma.so.1 opened at run time with dlopen()."""

from __future__ import annotations

import os

from ..errors import NumabindError
from ._native import NativeBackend

__all__ = ["LibnumaBackend", "LIBNUMA_SONAME"]

#: The soname opened; ``_NUMABIND_LIBNUMA`` overrides it (tests use it to
#: simulate a machine without libnuma).
LIBNUMA_SONAME = "libnuma.so.1"


class LibnumaBackend(NativeBackend):
    name = "libnuma"
    prefix = "nb_numa_"

    def __init__(self) -> None:
        super().__init__()
        soname = os.environ.get("_NUMABIND_LIBNUMA", LIBNUMA_SONAME)
        err = self.ffi.new("char[]", 512)
        if self.lib.nb_numa_load(soname.encode(), err, 512) != 0:
            raise NumabindError(f"cannot load {soname}: {self.ffi.string(err).decode(errors='replace')}")
        if self.lib.nb_numa_available() < 0:
            raise NumabindError(f"{soname} loaded, but numa_available() says this kernel has no NUMA support")

    def _setaff(self, tid, bits, mask):
        return self.lib.nb_numa_sched_setaffinity(tid, bits, mask)

    def _getaff(self, tid, bits, mask):
        return self.lib.nb_numa_sched_getaffinity(tid, bits, mask)
