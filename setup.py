"""Build configuration that pyproject.toml cannot express: the cffi module, its abi3 tag, and a loud C build.

pip shows a build's output only when the build fails (or with ``pip install -v``): a warning printed by a
build that goes on is not seen (pip 26.3 and newer show a build's Python warnings, but only when installing a
local directory, not an sdist). A C core that cannot be compiled therefore stops the install with a short
message saying what to install; ``NUMABIND_ALLOW_NO_NATIVE=1`` installs without it on purpose, and then
``numabind`` and ``numabind.backend_info()`` say in one line that it is missing and how to get it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import warnings
from collections.abc import Mapping

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import SetupError

#: Environment variable that lets the install go on without the native core.
ALLOW_NO_NATIVE = "NUMABIND_ALLOW_NO_NATIVE"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")

#: The oldest CPython the abi3 wheel is for (requires-python in pyproject.toml says the same).
LIMITED_API_TAG = "cp310"


def allow_no_native(env: Mapping[str, str] = os.environ) -> bool:
    """``NUMABIND_ALLOW_NO_NATIVE`` as a bool; any other value stops the build with the accepted ones."""
    raw = env.get(ALLOW_NO_NATIVE, "")
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SetupError(f"{ALLOW_NO_NATIVE}={raw[:40]!r} is not understood; use 1 (install without the native "
                     f"core) or 0 / unset (the native core is required)")


def _short_cause(exc: BaseException) -> str:
    """The compiler that failed and how, not the whole command line setuptools puts in the error."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, subprocess.CalledProcessError):
            argv = seen.cmd if isinstance(seen.cmd, (list, tuple)) else str(seen.cmd).split()
            return f"{argv[0] if argv else 'the compiler'} exited with status {seen.returncode}"
        seen = seen.__cause__ or seen.__context__
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def failure_message(ext_name: str, exc: BaseException) -> str:
    """What a user reads at the bottom of pip's output when the C core cannot be compiled."""
    cause = _short_cause(exc)
    return (
        f"numabind's native core ({ext_name}) could not be compiled: {cause}\n"
        f"  Install a C compiler and the Python headers (Debian/Ubuntu: apt-get install gcc python3-dev;\n"
        f"  Fedora: dnf install gcc python3-devel) and install again, or set {ALLOW_NO_NATIVE}=1 to install\n"
        f"  without it (memory policy then needs the numactl binary; `numabind` says what is missing)."
    )


class LoudBuildExt(build_ext):
    """build_ext whose failure stops the install with :func:`failure_message`, unless opted out."""

    _allow = False

    def run(self) -> None:
        self._allow = allow_no_native()  # a bad value stops the build before any compiling
        super().run()

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # CompileError, LinkError, a missing compiler (OSError), ...
            if not self._allow:
                raise SetupError(failure_message(ext.name, exc)) from exc
            # A UserWarning from a build hook: pip >= 26.3 shows it for `pip install DIR` (else only with -v);
            # the opt-out was explicit, and numabind says at run time that the core is missing.
            warnings.warn(f"{ALLOW_NO_NATIVE} is set: numabind is installed without its native core "
                          f"{ext.name} ({_short_cause(exc)}); libnuma and syscall backends unavailable",
                          stacklevel=1)


def _bdist_wheel_options() -> dict[str, dict[str, str]]:
    """Tag the wheel abi3 where cffi compiles with Py_LIMITED_API (not on debug or free-threaded builds)."""
    if hasattr(sys, "gettotalrefcount") or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return {}
    return {"bdist_wheel": {"py_limited_api": LIMITED_API_TAG}}


if __name__ == "__main__":  # setuptools runs this file as __main__; tests import the helpers above
    # The C core is compiled by cffi (out-of-line API mode); see build_ffi.py and csrc/.
    setup(
        cffi_modules=["build_ffi.py:ffibuilder"],
        cmdclass={"build_ext": LoudBuildExt},
        options=_bdist_wheel_options(),
    )
