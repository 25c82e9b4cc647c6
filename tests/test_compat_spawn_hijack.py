"""numabind's own start in a child cannot be hijacked (issue 41 §1).

The compat spawn wrapper (vLLM's and SGLang's pattern) and :func:`numabind.process.commands.numabind_command`
start numabind isolated, importing the copy that started them: a ``numabind/`` package in the working
directory or on ``PYTHONPATH`` never runs. The command started bound still sees the user's environment.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from numabind import compat
from numabind.process import commands

from .fakecompat import bare_env, evil_tree

ARGS, PYEXE = compat.WRAPPER_ARGS_ENV, compat.WRAPPER_PYTHON_ENV

#: What the started child reports: its affinity and the PYTHONPATH it was given (never importing numabind).
CHILD = ("import json, os, sys; json.dump({'cpus': sorted(os.sched_getaffinity(0)), "
         "'pythonpath': os.environ.get('PYTHONPATH')}, open(sys.argv[1], 'w'))")


def _run_wrapper(cwd, env, out):
    return subprocess.run([compat.wrapper_executable(), "-c", CHILD, str(out)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.kernel
@pytest.mark.parametrize("how", ["cwd", "PYTHONPATH"])
def test_wrapper_starts_numabind_that_cwd_and_pythonpath_cannot_replace(tmp_path, how):
    cpu = sorted(os.sched_getaffinity(0))[-1]
    evil, marker, out = tmp_path / "evil", tmp_path / "marker", tmp_path / "child.json"
    evil_tree(evil, marker, site=how == "cwd")
    extra = {ARGS: f"--physcpubind={cpu}", PYEXE: sys.executable}
    if how == "PYTHONPATH":
        extra["PYTHONPATH"] = str(evil)
    result = _run_wrapper(evil if how == "cwd" else tmp_path, bare_env(**extra), out)
    assert result.returncode == 0, result.stderr
    assert not marker.exists(), marker.read_text()
    child = json.loads(out.read_text())
    assert child["cpus"] == [cpu]                      # started bound
    # the child itself runs with the user's environment: PYTHONPATH is vLLM's, untouched
    assert child["pythonpath"] == (str(evil) if how == "PYTHONPATH" else None)


def test_wrapper_holds_main_code_word_for_word():
    text = open(compat.wrapper_executable(), encoding="utf-8").read()
    found = re.findall(r"^code='([^']*)'$", text, re.M)
    assert found == [commands.MAIN_CODE]
    assert "-m numabind" not in text.replace("`", "").split("set -eu", 1)[1]


@pytest.mark.parametrize("how", ["cwd", "PYTHONPATH"])
def test_numabind_command_ignores_cwd_and_pythonpath(tmp_path, how):
    evil, marker = tmp_path / "evil", tmp_path / "marker"
    evil_tree(evil, marker, site=how == "cwd")
    env = bare_env(PYTHONPATH=str(evil)) if how == "PYTHONPATH" else bare_env()
    argv = commands.numabind_command(["show"])
    assert argv[:3] == [sys.executable, "-I", "-c"]
    result = subprocess.run(argv, cwd=evil if how == "cwd" else tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "physcpubind" in result.stdout
    assert not marker.exists()


@pytest.mark.kernel
def test_numabind_command_run_passes_the_environment_on(tmp_path):
    cpu = sorted(os.sched_getaffinity(0))[0]
    evil, marker, out = tmp_path / "evil", tmp_path / "marker", tmp_path / "child.json"
    evil_tree(evil, marker, site=False)
    argv = commands.numabind_command(["run", f"--physcpubind={cpu}", "--", sys.executable, "-c", CHILD, str(out)])
    result = subprocess.run(argv, cwd=evil, env=bare_env(PYTHONPATH=str(evil)), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    assert json.loads(out.read_text()) == {"cpus": [cpu], "pythonpath": str(evil)}
