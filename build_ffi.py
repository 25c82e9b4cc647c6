"""cffi builder (out-of-line API mode) for numabind._native.

Run at build time only (``cffi_modules`` in setup.py); the runtime imports the
compiled module and never parses C. Needs gcc and the Python headers, nothing
else: libnuma is opened at run time with dlopen().

cffi compiles the module against the stable ABI (it defines ``Py_LIMITED_API``
and sets ``py_limited_api`` on the extension, except on debug and free-threaded
CPython), so the file is ``_native.abi3.so`` and setup.py tags the wheel
``cp310-abi3``: one wheel per platform for every CPython from 3.10 on.
"""

import os
import re

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(HERE, "csrc")


def _declarations() -> str:
    """The prototypes of csrc/numabind.h, without preprocessor lines and comments."""
    with open(os.path.join(CSRC, "numabind.h")) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def package_version() -> str:
    """``__version__`` of src/numabind/_version.py, compiled into the core (nb_version) so that the package
    refuses a core built from another version."""
    with open(os.path.join(HERE, "src", "numabind", "_version.py")) as f:
        found = re.search(r"^__version__\s*=\s*[\"']([^\"'\\]+)[\"']", f.read(), flags=re.M)
    if not found:
        raise RuntimeError("src/numabind/_version.py has no __version__ = '...' line")
    return found.group(1)


ffibuilder = FFI()
ffibuilder.cdef(_declarations())
ffibuilder.set_source(
    "numabind._native",
    '#include "numabind.h"',
    sources=[os.path.relpath(os.path.join(CSRC, "numabind.c"), HERE)],
    include_dirs=[os.path.relpath(CSRC, HERE)],
    libraries=["dl"],
    define_macros=[("NB_VERSION", '"%s"' % package_version())],
    extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
)

if __name__ == "__main__":
    ffibuilder.compile(tmpdir=HERE, verbose=True)
