"""The arm64 guest's own parts (kernel ``arm64``): the arm64 Debian userland it chroots into
(``scripts/arm64_userland.sh``), numabind's C core cross-compiled for it, the arm64 wheels of numabind's
dependencies with compiled code, and what the guest binds in and runs its Python with."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import runpy
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

from .specs import (ARM64_PYTHON, REPO_ROOT, HarnessError, ProgressFn, cache_dir, kernel_spec, quiet, read_json,
                    run_logged)


def arm64_dir() -> Path:
    """Where scripts/arm64_userland.sh puts the arm64 userland (``root/``, ``headers/``) and the harness the
    cross-compiled C core (``native/``)."""
    return cache_dir() / "arm64"


def arm64_cc() -> str:
    return os.environ.get("NUMABIND_VM_ARM64_CC") or "aarch64-linux-gnu-gcc"


def _native_sources() -> list[Path]:
    return [REPO_ROOT / "csrc" / "numabind.c", REPO_ROOT / "csrc" / "numabind.h", REPO_ROOT / "build_ffi.py"]


def _load_build_ffi():
    """The project's cffi builder (build_ffi.py), for the C source of numabind._native and the version."""
    spec = importlib.util.spec_from_file_location("numabind_build_ffi", REPO_ROOT / "build_ffi.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _native_digest(version: str) -> str:
    h = hashlib.sha256(f"{arm64_cc()}\0{version}\0".encode())
    for path in _native_sources():
        h.update(path.read_bytes())
    h.update((arm64_dir() / "userland.txt").read_bytes() if (arm64_dir() / "userland.txt").is_file() else b"")
    return h.hexdigest()


def arm64_native(build: bool = False, progress: ProgressFn = quiet) -> Path | None:
    """numabind's C core cross-compiled for arm64 (``native/_native.abi3.so``), the same way
    build_ffi.py compiles it for the host (cffi's generated C, ``-O2 -Wall -Wextra``, NB_VERSION, -ldl),
    against the arm64 Python headers. ``build``: compile it when it is missing or its sources changed
    (about 2 s, no network); else None when it is not up to date."""
    version = _read_version()
    out = arm64_dir() / "native" / "_native.abi3.so"
    stamp = out.with_suffix(".json")
    digest = _native_digest(version)
    old = read_json(stamp)
    if old and old.get("digest") == digest and out.is_file():
        return out
    if not build:
        return None
    cc = shutil.which(arm64_cc())
    if cc is None:
        raise HarnessError(f"{arm64_cc()} not found: the arm64 C core cannot be compiled (apt packages "
                           f"gcc-aarch64-linux-gnu libc6-dev-arm64-cross)")
    inc = arm64_dir() / "headers" / "usr" / "include"
    if not (inc / "python3.11" / "Python.h").is_file():
        raise HarnessError(f"no arm64 Python headers in {inc} (bash scripts/arm64_userland.sh)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="native-", dir=out.parent) as tmp:
        csource = Path(tmp) / "_native.c"
        _load_build_ffi().ffibuilder.emit_c_code(str(csource))
        target = Path(tmp) / out.name
        argv = [cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter",
                "-I", str(REPO_ROOT / "csrc"), "-I", str(inc), "-I", str(inc / "python3.11"),
                "-I", str(inc / "aarch64-linux-gnu" / "python3.11"), f'-DNB_VERSION="{version}"',
                str(csource), str(REPO_ROOT / "csrc" / "numabind.c"), "-ldl", "-o", str(target)]
        run_logged(argv, progress)
        target.replace(out)
    stamp.write_text(json.dumps({"digest": digest, "version": version}) + "\n")
    progress(f"arm64 C core built: {out}")
    return out


def _read_version() -> str:
    """numabind's version from its one home, src/numabind/_version.py (run by path: the package is not imported)."""
    return runpy.run_path(str(REPO_ROOT / "src" / "numabind" / "_version.py"))["__version__"]


def _arm64_python_ok() -> bool:
    return (arm64_dir() / "root" / ARM64_PYTHON.lstrip("/")).is_file()


def arm64_problems() -> list[str]:
    """Why the arm64 guest's userland or C core is not ready (rebuilding a stale C core when it can)."""
    if not _arm64_python_ok():
        return [f"no arm64 userland in {arm64_dir()} (python3 -m tests.vm.harness prepare, or "
                f"bash scripts/arm64_userland.sh)"]
    if not (REPO_ROOT / "src" / "numabind" / "_native.abi3.so").is_file():
        return [f"{REPO_ROOT / 'src/numabind/_native.abi3.so'} is missing: the arm64 C core is bound over the "
                f"checkout's own, built in place (pip install -e .)"]
    try:
        arm64_native(build=True)
        arm64_wheels()
    except HarnessError as exc:
        return [str(exc)]
    return []


#: numabind's runtime dependencies with compiled code: their arm64 wheels, unpacked into :func:`arm64_site`
ARM64_WHEELS = ("psutil",)


def arm64_site() -> Path:
    """arm64 builds of numabind's dependencies with compiled code (scripts/arm64_wheels.sh), before the host's
    own on the arm64 guest's PYTHONPATH (its own folder: scripts/arm64_unit.sh's ``site`` holds more)."""
    return arm64_dir() / "guest-site"


def arm64_wheels(progress: ProgressFn = quiet) -> None:
    """The arm64 wheels of :data:`ARM64_WHEELS` at the host's versions in :func:`arm64_site`
    (scripts/arm64_wheels.sh: a download only when one is missing or of another version)."""
    from importlib.metadata import version

    if all((arm64_site() / f"{pkg}-{version(pkg)}.dist-info").is_dir() for pkg in ARM64_WHEELS):
        return
    run_logged(["bash", str(REPO_ROOT / "scripts" / "arm64_wheels.sh"), str(arm64_site()), *ARM64_WHEELS], progress,
         env=dict(os.environ, PYTHON=sys.executable))


def prepare_arm64_userland(progress: ProgressFn = quiet) -> None:
    """scripts/arm64_userland.sh (idempotent), the arm64 wheels of :data:`ARM64_WHEELS`, then the arm64 C core."""
    env = dict(os.environ, NUMABIND_VM_CACHE=str(cache_dir()), PYTHON=sys.executable)
    proc = run_logged(["bash", str(REPO_ROOT / "scripts" / "arm64_userland.sh"), str(arm64_dir())], progress, env=env)
    progress(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "arm64 userland ready")
    arm64_wheels(progress)
    arm64_native(build=True, progress=progress)


def arm64_binds() -> list[tuple[str, str]]:
    """(host path, guest path) pairs the arm64 guest binds into its userland: the checkout, the cache (for the
    C core), the host interpreter's pure-Python packages (pytest and its plugins) where they are outside the
    checkout, and the arm64 C core over the checkout's x86 one."""
    wanted = [str(REPO_ROOT), str(cache_dir()), sysconfig.get_paths()["purelib"]]
    dirs: list[str] = []
    for p in sorted({os.path.realpath(w) for w in wanted}):
        if not any(p == q or p.startswith(q + "/") for q in dirs):
            dirs.append(p)
    core = arm64_native()
    if core is None:
        raise HarnessError("the arm64 C core is not built or out of date (python3 -m tests.vm.harness prepare)")
    out = [(d, d) for d in dirs]
    out.append((str(core), str(REPO_ROOT / "src" / "numabind" / "_native.abi3.so")))
    return out


def guest_python(kernel: str | None = None) -> str:
    """The interpreter a guest runs Python with: the host's own, or the arm64 userland's."""
    return ARM64_PYTHON if kernel_spec(kernel).arch == "arm64" else sys.executable


def guest_env(kernel: str | None = None) -> dict[str, str]:
    """Environment a guest command needs on top of :func:`guest_script`'s: in the arm64 userland, the
    checkout's package, the arm64 wheels (:func:`arm64_site`: psutil) and the host's pure-Python packages on
    PYTHONPATH, in that order (no .pth file is read there, so the host's editable install of numabind does not
    apply; the host's psutil carries an x86 extension module)."""
    if kernel_spec(kernel).arch != "arm64":
        return {}
    return {"PYTHONPATH": ":".join([str(REPO_ROOT / "src"), str(REPO_ROOT), str(arm64_site()),
                                    sysconfig.get_paths()["purelib"]])}


