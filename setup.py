import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Build numabind._native if possible; without a C compiler the package still
    installs and falls back to the numactl/none backends (numabind.backend_info()
    says why)."""

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # compiler missing or failing: degrade, loudly
            print(f"WARNING: numabind: building {ext.name} failed ({exc}); the libnuma and syscall "
                  f"backends will be unavailable", file=sys.stderr)


# The C core is compiled by cffi (out-of-line API mode); see build_ffi.py.
setup(cffi_modules=["build_ffi.py:ffibuilder"], cmdclass={"build_ext": OptionalBuildExt})
