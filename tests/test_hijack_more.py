"""The rest of issue 41's hijack class: every numabind numabind starts itself is the one that runs.

numactl's form ``numabind -C N -s`` shows from a bound child, started isolated
(:func:`numabind.process.commands.numabind_command`); ``numabind instrument``'s bootstrap imports the numabind
installation it belongs to, never a ``numabind/`` of the program's working directory, script directory or
``PYTHONPATH``, and leaves the program's ``sys.path`` as it is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from numabind.process import commands

from .fakecompat import COMPAT, HOSTS, bare_env, evil_tree, make_hosts

#: The instrumented program: its sys.path before and after importing both host modules, what each import
#: gave, and where numabind came from.
PROGRAM = '''
import importlib, json, sys
before = list(sys.path)
got = {host: importlib.import_module(host).__name__ for host in %r}
numabind = sys.modules.get("numabind")
print(json.dumps({"before": before, "after": list(sys.path), "got": got,
                  "numabind": getattr(numabind, "__file__", None)}))
''' % (HOSTS,)


def _run(argv: list[str], cwd, env) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


# ----------------------------------------------------------------------------- numactl's -s after options
@pytest.mark.kernel
@pytest.mark.parametrize("how", ["cwd", "PYTHONPATH"])
def test_numactls_show_after_options_runs_this_numabind(tmp_path, how):
    """``numabind -C N -s`` shows from a child bound to N: that child is this numabind, whatever the working
    directory or PYTHONPATH hold (numabind itself is started isolated here, as a launcher would)."""
    cpu = sorted(os.sched_getaffinity(0))[-1]
    evil, marker, clean = tmp_path / "evil", tmp_path / "marker", tmp_path / "clean"
    evil_tree(evil, marker, site=False)
    clean.mkdir()
    argv = commands.numabind_command(["-C", str(cpu), "-s"])
    control = _run(argv, clean, bare_env())
    assert control.returncode == 0, control.stderr
    assert f"physcpubind: {cpu} \n" in control.stdout
    env = bare_env(PYTHONPATH=str(evil)) if how == "PYTHONPATH" else bare_env()
    hostile = _run(argv, evil if how == "cwd" else clean, env)
    assert not marker.exists(), marker.read_text()
    assert (hostile.returncode, hostile.stdout) == (0, control.stdout), hostile.stderr


# ----------------------------------------------------------------------------- numabind instrument
@pytest.mark.parametrize("how", ["cwd", "PYTHONPATH"])
def test_instrument_imports_its_own_numabind_not_the_programs(tmp_path, how):
    """``numabind instrument -- python program.py`` from a directory holding a ``numabind/`` (the program's
    own directory, then PYTHONPATH): the drop-ins come from the installation instrument runs from, the
    user's package never runs, and the program's sys.path is what it would be."""
    import numabind

    evil, marker, site = tmp_path / "evil", tmp_path / "marker", tmp_path / "site"
    evil_tree(evil, marker, site=False)
    make_hosts(site)
    where = evil if how == "cwd" else tmp_path / "work"
    where.mkdir(exist_ok=True)
    (where / "program.py").write_text(PROGRAM)
    path = [str(site)] if how == "cwd" else [str(evil), str(site)]
    argv = commands.numabind_command(["instrument", "--", sys.executable, "program.py"])
    proc = _run(argv, where, bare_env(PYTHONPATH=os.pathsep.join(path)))
    assert not marker.exists(), marker.read_text()
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["got"] == {host: COMPAT[host] for host in HOSTS}
    assert seen["numabind"] == numabind.__file__
    assert seen["after"] == seen["before"]
    assert seen["before"][0] == str(where)                      # the program's own directory, first as ever
    assert "stays the host's own" not in proc.stderr


def test_a_numabind_the_program_imported_from_elsewhere_is_never_routed_to(tmp_path):
    """A program that imported a ``numabind`` of its own before a host module keeps the host's module (one
    line says why): the drop-ins are never taken from another copy's ``__path__``."""
    evil, marker, site = tmp_path / "evil", tmp_path / "marker", tmp_path / "site"
    evil_tree(evil, marker, site=False)
    make_hosts(site)
    (evil / "program.py").write_text("import numabind\n" + PROGRAM)
    argv = commands.numabind_command(["instrument", "--", sys.executable, "program.py"])
    proc = _run(argv, evil, bare_env(PYTHONPATH=str(site)))
    assert proc.returncode == 0, proc.stderr
    assert marker.exists()                                       # the program's own import, its own choice
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["got"] == {host: host for host in HOSTS}
    assert f"stays the host's own: this process already imported numabind from {evil / 'numabind'}" in proc.stderr
