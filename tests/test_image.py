"""numabind into an image (docker/Dockerfile): the builder stage makes the abi3 wheel, the runtime stage installs
it with no compiler.

docker may not run here, so the stages' own ``RUN`` lines are run outside it, read from the Dockerfile (one
list: change the Dockerfile and the test runs the change): the builder's in a fresh virtual environment over a
copy of the checkout, the runtime's in another fresh virtual environment whose ``PATH`` holds no C compiler, with
``CC=/bin/false``. Like tests/test_packaging.py these need PyPI (or pip's cache) for the build dependencies and
numabind's two dependencies, and are marked ``packaging``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
#: Where the Dockerfile keeps the wheel between its stages; the test puts its own folder there.
WHEELS = "/wheels"
COMPILERS = ("gcc", "cc", "c99", "clang", "x86_64-linux-gnu-gcc", "aarch64-linux-gnu-gcc")


def _stages(text: str) -> dict[str, list[tuple[str, str]]]:
    """Each ``FROM … AS name`` stage's instructions, as (INSTRUCTION, arguments), continuation lines joined."""
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for line in re.sub(r"\\\n", " ", text).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            m = re.fullmatch(r"(\S+)\s+AS\s+(\S+)", rest.strip(), re.I)
            assert m, f"every stage is named: {line}"
            current = stages.setdefault(m.group(2), [])
        elif current is not None:
            current.append((word.upper(), rest.strip()))
    return stages


def _dockerfile() -> dict[str, list[tuple[str, str]]]:
    """The Dockerfile's stages, read when a test asks (collecting this file needs no Dockerfile)."""
    assert DOCKERFILE.is_file(), f"{DOCKERFILE} is missing (an sdist carries it through MANIFEST.in)"
    return _stages(DOCKERFILE.read_text())


def _runs(stage: str) -> list[str]:
    return [args for word, args in _dockerfile()[stage] if word == "RUN"]


def test_the_dockerfile_has_a_builder_with_a_compiler_and_a_runtime_without():
    stages = _dockerfile()
    assert list(stages) == ["builder", "runtime"]
    builder = " ".join(_runs("builder"))
    assert "apt-get install" in builder and re.search(r"\bgcc\b", builder)
    assert re.search(r"python -m build --wheel --outdir /wheels \.", builder)
    runtime = stages["runtime"]
    assert ("COPY", f"--from=builder {WHEELS} {WHEELS}") in runtime
    words = " ".join(args for _, args in runtime)
    assert "apt-get" not in words and not [c for c in COMPILERS if re.search(rf"\b{re.escape(c)}\b", words)]
    assert "numabind" in " ".join(_runs("runtime")) and "import numabind._native" in " ".join(_runs("runtime"))
    ignore = (ROOT / "docker" / "Dockerfile.dockerignore").read_text().split()
    assert {".venv", "build", "dist", "tests/vm/_cache"} <= set(ignore)   # the builder copies no build products


def _source_files() -> list[str]:
    """The checkout as git sees it (tracked, and new files not ignored): what ``COPY . .`` gives the builder."""
    if not ((ROOT / ".git").exists() and shutil.which("git")):
        pytest.skip("the checkout is not a git working tree")
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [p for p in out.split("\0") if p and (ROOT / p).is_file()]


def _env(path: list[Path], **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CC", "NUMABIND_ALLOW_NO_NATIVE")}
    env["PATH"] = os.pathsep.join(str(p) for p in path)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.update(extra)
    return env


def _sh(line: str, *, cwd: Path, env: dict[str, str], timeout: int = 900) -> str:
    cp = subprocess.run(["/bin/sh", "-ec", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert cp.returncode == 0, f"{line}\nexited {cp.returncode}:\n{cp.stdout[-4000:]}\n{cp.stderr[-4000:]}"
    return cp.stdout + cp.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The builder stage outside docker: its last RUN line in a fresh venv, on a copy of the checkout."""
    base = tmp_path_factory.mktemp("image")
    tree = base / "src"
    for rel in _source_files():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, tree / rel)
    subprocess.run([sys.executable, "-m", "venv", str(base / "builder")], check=True, timeout=300)
    wheels = base / "wheels"
    build_line = _runs("builder")[-1]
    _sh(build_line.replace(WHEELS, str(wheels)), cwd=tree,
        env=_env([base / "builder" / "bin", Path("/usr/local/bin"), Path("/usr/bin"), Path("/bin")]))
    found = sorted(wheels.glob("numabind-*.whl"))
    assert len(found) == 1, found
    return found[0]


@pytest.mark.packaging
def test_the_wheel_is_abi3_and_requires_no_framework(wheel: Path):
    assert re.fullmatch(r"numabind-[\d.]+-cp310-abi3-linux_\w+\.whl", wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    named = {re.split(r"[\s\[<>=!;~(]", r, maxsplit=1)[0].lower() for r in requires}
    assert not named & {"vllm", "ray", "torch"}, requires   # installing any extra never re-resolves them
    assert "numabind = numabind.integrations.vllm_plugin:register" in entry_points


@pytest.mark.packaging
def test_the_runtime_stage_installs_and_runs_without_a_compiler(wheel: Path, tmp_path: Path):
    venv = tmp_path / "runtime"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    bin_dir = venv / "bin"
    assert not [c for c in COMPILERS if shutil.which(c, path=str(bin_dir))]
    env = _env([bin_dir], CC="/bin/false", CXX="/bin/false")
    lines = _runs("runtime")
    assert lines, "the runtime stage has RUN lines"
    outputs = [_sh(line.replace(WHEELS, str(wheel.parent)), cwd=tmp_path, env=env) for line in lines]
    assert "Successfully installed" in outputs[0] and "numabind-" in outputs[0]
    installed = subprocess.run([str(bin_dir / "python"), "-c", "import numabind, numabind._native; "
                                "print(numabind.__file__); print(numabind.backend_info()['native'])"],
                               cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stderr
    where, native = installed.stdout.splitlines()
    assert Path(where).resolve().is_relative_to(venv.resolve()), where   # the wheel's copy, not the checkout
    assert native.startswith("numabind._native ") and "loaded from" in native, native
