"""The compiled core says which numabind version it was built for, and a package of another version refuses it
with a NumabindError naming both versions and the fix (not an AttributeError later). Nothing is built here: the
version the check sees is a fake module's."""

from __future__ import annotations

import os
import sys
import types

import pytest

import numabind
from numabind import backends, live
from numabind.errors import NumabindError

native = pytest.importorskip("numabind._native", reason="the native core is not installed")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _core(version: bytes | None) -> types.SimpleNamespace:
    """A stand-in for numabind._native whose nb_version says ``version`` (None: a core without nb_version)."""
    lib = types.SimpleNamespace(**{n: getattr(native.lib, n) for n in dir(native.lib) if n != "nb_version"})
    if version is not None:
        text = native.ffi.new("char[]", version)
        lib.nb_version = lambda: text
    return types.SimpleNamespace(ffi=native.ffi, lib=lib, __file__="/somewhere/_native.abi3.so")


@pytest.fixture
def stale(monkeypatch):
    def install(version: bytes | None) -> None:
        monkeypatch.setattr(numabind, "_native", _core(version))
        monkeypatch.setitem(sys.modules, "numabind._native", numabind._native)
        monkeypatch.setattr(live, "_native_module", [])
        monkeypatch.setattr(backends.native, "_checked", [])
        backends.reset_backends()
    yield install
    backends.reset_backends()


def test_the_installed_core_is_this_packages_version():
    assert native.ffi.string(native.lib.nb_version()).decode() == numabind.__version__
    live.check_native_version(native)    # no error


def test_the_build_embeds_the_version_the_package_says():
    sys.path.insert(0, ROOT)
    try:
        import build_ffi
    finally:
        sys.path.remove(ROOT)
    assert build_ffi.package_version() == numabind.__version__


@pytest.mark.parametrize("version", [b"0.0.1", None])
def test_a_core_of_another_version_is_refused_at_first_use(stale, version):
    stale(version)
    for use in (live.native_lib, lambda: live.thread_ids(), backends.load_native, backends.SyscallBackend):
        with pytest.raises(NumabindError) as e:
            use()
        message = str(e.value)
        assert repr(numabind.__version__) in message and "/somewhere/_native.abi3.so" in message
        assert ("'0.0.1'" if version else "an older version") in message
        assert "pip install --force-reinstall --no-cache-dir ." in message


def test_a_stale_core_is_said_when_choosing_a_backend(stale):
    stale(b"9.9.9")
    be, why = backends.get_backend()
    assert be.name in ("numactl", "none") and "9.9.9" in why and "force-reinstall" in why
    with pytest.raises(NumabindError, match="9.9.9"):
        backends.get_backend("syscall")


def test_the_type_stub_declares_exactly_what_the_core_exposes():
    import ast

    with open(os.path.join(ROOT, "src", "numabind", "_native.pyi")) as f:
        tree = ast.parse(f.read())
    stub = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "_Lib")
    declared = {n.name for n in stub.body if isinstance(n, ast.FunctionDef)}
    declared |= {n.target.id for n in stub.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    exposed = {n for n in dir(native.lib) if n.startswith(("nb_", "NB_"))}
    assert declared == exposed
