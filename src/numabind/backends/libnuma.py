"""The ``libnuma`` backend: the calls of the compiled core that go through libnuma.so.1 (``nb_numa_*``), opened at
run time with dlopen(); and ``numabind show``'s one question only libnuma answers, the next node of an interleave.
"""

import os
TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)

from ..errors import NumabindError
from .base import MPOL_F_NODE
from .native import NativeBackend

if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

__all__ = ["LIBNUMA_SONAME", "LibnumaBackend", "interleave_next_node"]


#: The soname opened; ``_NUMABIND_LIBNUMA`` overrides it (tests use it to simulate a machine without
#: libnuma, users to pick one libnuma): only libnuma's own names, or an absolute path no other user can
#: write (:func:`_libnuma_to_load`), since the environment must not choose code to load.
LIBNUMA_SONAME = "libnuma.so.1"


def _libnuma_to_load(name: str) -> tuple[str | None, str]:
    """What ``_NUMABIND_LIBNUMA=name`` makes numabind load: (the name or path for dlopen, "") or (None, why it is
    refused). Accepted: libnuma's own names, or an absolute path whose real path and every directory above it
    belong to root or this user and are writable by no one else."""
    stem, dot_so, version = name.partition(".so")
    if stem == "libnuma" and dot_so and (version == "" or (
            version.startswith(".") and all(p.isascii() and p.isdigit() for p in version[1:].split(".")))):
        return name, ""
    if not name.startswith("/") or "\0" in name or any(p in (".", "..") for p in name.split("/")):
        return None, "is neither one of libnuma's names (like 'libnuma.so.1') nor a plain absolute path"
    import stat as _stat   # only when the variable names a path: off the import path of numabind run

    uid = os.geteuid()
    real = path = os.path.realpath(name)
    while True:
        try:
            st = os.lstat(path)
        except OSError:
            st = None            # missing: only whoever may write the directory above can create it
        if st is not None:
            if path == real and not _stat.S_ISREG(st.st_mode):
                return None, f"names {real}, which is not a regular file"
            if st.st_uid not in (0, uid):
                return None, f"names {real}, and {path} belongs to uid {st.st_uid}, neither root nor this user"
            if st.st_mode & 0o022:
                return None, f"names {real}, and {path} is writable by its group or others"
        if path == "/":
            return real, ""
        path = os.path.dirname(path)


class LibnumaBackend(NativeBackend):
    name = "libnuma"
    prefix = "nb_numa_"

    def __init__(self) -> None:
        super().__init__()
        soname = os.environ.get("_NUMABIND_LIBNUMA", LIBNUMA_SONAME)
        target, refusal = _libnuma_to_load(soname)
        if target is None:
            raise NumabindError(
                f"_NUMABIND_LIBNUMA={soname[:100]!r} {refusal[:300]}; refusing to load it (unset the variable, "
                f"or name libnuma or an absolute path that only root or you can write)"
            )
        soname = target
        err = self.ffi.new("char[]", 512)
        if self.lib.nb_numa_load(soname.encode(), err, 512) != 0:
            raise NumabindError(f"cannot load {soname}: {self.ffi.string(err).decode(errors='replace')}")
        if self.lib.nb_numa_available() < 0:
            raise NumabindError(f"{soname} loaded, but numa_available() says this kernel has no NUMA support")

    def _setaff(self, tid: int, bits: int, mask: "Any") -> int:
        return self.lib.nb_numa_sched_setaffinity(tid, bits, mask)  # type: ignore[no-any-return]

    def _getaff(self, tid: int, bits: int, mask: "Any") -> int:
        return self.lib.nb_numa_sched_getaffinity(tid, bits, mask)  # type: ignore[no-any-return]


def interleave_next_node() -> int | None:
    """The node the calling thread's next interleaved page goes to (``get_mempolicy(MPOL_F_NODE)``), read
    through libnuma's ``get_mempolicy`` (``numabind show``, as ``numactl --show``); None when libnuma is not
    there or refuses (or the compiled core, which numbers MPOL_F_NODE, is not)."""
    import ctypes   # numabind show only: off numabind run's path

    if not MPOL_F_NODE:
        return None
    try:
        lib = ctypes.CDLL(LIBNUMA_SONAME, use_errno=True)
        mode = ctypes.c_int(0)
        if lib.get_mempolicy(ctypes.byref(mode), None, ctypes.c_ulong(0), None, ctypes.c_ulong(MPOL_F_NODE)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return mode.value
