"""The look commands' own path (``numabind hardware``, ``numabind topology``, numactl's ``-H``): the same text as
the full command line, its errors and warnings, and what it keeps off its start (issue 34 §3)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from numabind.cli import main
from numabind.cli.look import _look_form, fast_look
from tests.fake.machines import cgroup_restricted, memory_only_nodes, offline_cpus, one_node, snc, sparse_nodes, \
    two_sockets
from tests.kernel import ROOT, child_env
from tests.run_path import gpu_box, loaded_by, look_modules

MACHINES = {"one_node": one_node, "two_sockets": two_sockets, "snc": snc, "memory_only_nodes": memory_only_nodes,
            "sparse_nodes": sparse_nodes, "offline_cpus": offline_cpus, "cgroup_restricted": cgroup_restricted}
FORMS = (["hardware"], ["topology"], ["topology", "--of", "xml"],
         ["topology", "--of=text"])
#: What a plain look must not import: the full command line's (the looks are plain Python otherwise, guarded by
#: ``python -m bench``'s P9 at <= 2.0x ``python -c pass``).
HEAVY = ("argparse", "logging", "json")


@pytest.mark.parametrize("form", FORMS, ids=" ".join)
@pytest.mark.parametrize("name", sorted(MACHINES))
def test_a_plain_look_prints_what_the_full_command_line_prints(tmp_path, monkeypatch, capsys, name, form):
    MACHINES[name](tmp_path / "m").write()
    monkeypatch.setenv("NUMABIND_FSROOT", str(tmp_path / "m"))
    assert fast_look(form) == 0                      # the look's own path took it
    fast = capsys.readouterr()
    from numabind.cli.commands import main as full_main

    assert full_main(list(form)) == 0
    full = capsys.readouterr()
    assert fast.out == full.out and fast.out.strip()
    assert fast.err == full.err == ""


def test_a_look_with_gpus_prints_what_the_full_command_line_prints(tmp_path, monkeypatch, capsys):
    gpu_box(tmp_path)
    monkeypatch.setenv("NUMABIND_FSROOT", str(tmp_path))
    for form in (["topology"], ["topology", "--of", "xml"]):
        assert fast_look(form) == 0
        fast = capsys.readouterr().out
        from numabind.cli.commands import main as full_main

        assert full_main(form) == 0
        assert fast == capsys.readouterr().out
    assert 'pci_busid="0000:18:00.0"' in fast and 'pci_busid="0000:9a:00.0"' in fast   # the GPUs are in the XML


@pytest.mark.parametrize("args", [["hardware", "--json"], ["hardware", "-v"], ["topology", "--matrix"],
                                  ["topology", "--of", "json"], ["topology", "--of"], ["topology", "--json"],
                                  ["topology", "--of", "xml", "--of", "xml"], ["hardware", "--cpu-compress"],
                                  ["--root", "/", "hardware"], ["show"], [], ["topology", "--of=bad"]])
def test_every_other_form_is_left_to_the_full_command_line(args):
    assert _look_form(args) is None


def test_the_looks_usage_line_is_the_topology_parsers(capsys):
    """The look's own path says a form numabind does not write with ``topology``'s usage line: the full command
    line's parser's, without the global options."""
    from numabind.cli.commands import build_parser, subcommand
    from numabind.cli.look import USAGE

    usage = " ".join(subcommand(build_parser(), "topology").format_usage().split())
    assert usage.replace("[-h] [--root ROOT] [-v] [--json] ", "") == USAGE
    assert fast_look(["topology", "--of", "svg"]) == 2
    assert capsys.readouterr().err.startswith(USAGE + "\nnumabind topology: error: argument --of: ")


def test_the_plain_forms_are_the_looks_own(capsys):
    assert _look_form(["hardware"]) == ("hardware", "")
    assert _look_form(["topology"]) == ("topology", "text")
    assert _look_form(["topology", "--of=xml"]) == ("topology", "xml")
    assert _look_form(["topology", "--of", "text"]) == ("topology", "text")


def test_an_error_is_said_by_the_full_command_line(tmp_path, monkeypatch, capsys):
    missing = tmp_path / "no-such-root"
    monkeypatch.setenv("NUMABIND_FSROOT", str(missing))
    assert fast_look(["hardware"]) is None           # not said here: left to the full command line
    assert capsys.readouterr().out == ""
    rc = main(["hardware"])
    got = capsys.readouterr()
    from numabind.cli.commands import main as full_main

    rc_full = full_main(["hardware"])
    full = capsys.readouterr()
    assert rc == rc_full == 2
    assert got.out == full.out == ""
    assert got.err == full.err and "$NUMABIND_FSROOT=" in got.err and got.err.startswith("numabind: error: ")


def _numabind(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "numabind", *args], capture_output=True, text=True,
                          env=child_env(**env), timeout=120, cwd=ROOT)


def test_a_discovery_warning_is_printed_as_the_full_command_line_prints_it(tmp_path):
    m = one_node(tmp_path)
    m.set_file("proc/cpuinfo", "processor\t: 0\nCPU implementer\t: zz\nCPU part\t: 0xd4f\n\n")
    m.write()
    fast = _numabind("hardware", NUMABIND_FSROOT=str(tmp_path))
    full = _numabind("--root", str(tmp_path), "hardware")
    assert fast.returncode == full.returncode == 0
    assert fast.stdout == full.stdout
    assert fast.stderr == full.stderr
    assert fast.stderr.startswith("numabind.topology: WARNING: proc/cpuinfo under ")
    assert "not hex ids" in fast.stderr


@pytest.mark.parametrize("where", ["this machine", "a replayed machine with GPUs"])
def test_a_look_keeps_the_heavy_modules_off_its_start(tmp_path, where):
    env = {}
    if where != "this machine":
        gpu_box(tmp_path)
        env["NUMABIND_FSROOT"] = str(tmp_path)
    loaded = look_modules(**env)
    assert "numabind.topology" in loaded and "numabind.cli.look" in loaded
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    assert "numabind.cli.commands" not in loaded and "numabind.strategies" not in loaded


def test_a_look_stops_quietly_when_its_reader_is_gone():
    code = ("import os, sys\nr, w = os.pipe()\nos.close(r)\nos.dup2(w, 1)\n"
            "from numabind.cli import main\nsys.exit(main(['hardware']))\n")
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=120,
                        cwd=ROOT)
    assert cp.returncode == 128 + 13, cp.stderr      # as a process ended by SIGPIPE
    assert cp.stderr == ""


_HOOK = """
import sys
from numabind._base import getLogger, warn_through
called = []

def hook():
    called.append(1)
    import logging
    logging.basicConfig(format="%(name)s: %(levelname)s: %(message)s", stream=sys.stderr)

log = getLogger("numabind.x")
warn_through(hook)
log.debug("quiet %d", 1)
log.info("quiet %d", 2)
assert not called and "logging" not in sys.modules
log.warning("said %d", 3)
log.error("said %d", 4)
log.log(30, "said %d", 5)
print(len(called), file=sys.stderr)
"""


def test_warn_through_calls_its_hook_once_before_the_first_warning():
    cp = subprocess.run([sys.executable, "-c", _HOOK], capture_output=True, text=True, env=child_env(), timeout=120,
                        cwd=ROOT)
    assert cp.returncode == 0, cp.stderr
    assert cp.stderr.splitlines() == ["numabind.x: WARNING: said 3", "numabind.x: ERROR: said 4",
                                      "numabind.x: WARNING: said 5", "1"]


def test_without_a_hook_a_record_before_logging_is_dropped_as_before():
    code = ("import sys\nfrom numabind._base import getLogger\ngetLogger('numabind.x').warning('w')\n"
            "assert 'logging' not in sys.modules\n")
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=120,
                        cwd=ROOT)
    assert cp.returncode == 0 and cp.stderr == "", cp.stderr


def test_numactl_hardware_prints_the_same_as_the_look(tmp_path, monkeypatch, capsys):
    two_sockets(tmp_path).write()
    monkeypatch.setenv("NUMABIND_FSROOT", str(tmp_path))
    assert main(["-H"]) == 0
    numactl = capsys.readouterr().out
    assert main(["hardware"]) == 0
    assert numactl == capsys.readouterr().out
    assert main(["--hardware", "--cpu-compress"]) == 0
    compressed = capsys.readouterr().out
    assert " 0-3, 8-11 (8)" in compressed and compressed.replace(" 0-3, 8-11 (8)", "") != compressed
    assert os.environ["NUMABIND_FSROOT"] == str(tmp_path)


def test_a_public_name_comes_without_importlib():
    """A public name (PEP 562) imports its module without importlib, which brings warnings along: the run path's
    ``numabind.bind_current`` loads neither (the looks' modules are plain Python and may)."""
    loaded = loaded_by("import numabind\nnumabind.bind_current\nfrom numabind import Plan")
    assert {"numabind.plan", "numabind.bind"} <= loaded and "numabind.topology" not in loaded
    assert not loaded & {"importlib", "warnings"}, sorted(loaded & {"importlib", "warnings"})


@pytest.mark.parametrize("enabled", [True, False], ids=["collector-on", "collector-off"])
@pytest.mark.parametrize("args,step", [(["hardware"], "look"), (["topology", "--of", "xml"], "look"),
                                       (["run", "-N", "0", "--", "true"], "run"), (["-H"], "numactl")])
def test_a_fast_path_runs_without_the_collector_and_gives_it_back(monkeypatch, args, step, enabled):
    """The fast paths (a plain look, ``numabind run``, numactl's command line) build objects that all live until
    the process ends or execs, so the cyclic collector is off while they run (~4 % of a look's start, measured
    side by side); it is on again afterwards when it was on, and stays off when the caller had turned it off."""
    import gc

    import numabind.cli
    import numabind.cli.look

    seen = []

    def step_fn(rest):
        seen.append(gc.isenabled())
        return 0

    if step == "look":
        monkeypatch.setattr(numabind.cli.look, "fast_look", step_fn)
    elif step == "numactl":       # numactl's -H prints the look's text
        def text(*form):
            seen.append(gc.isenabled())
            return ""

        monkeypatch.setattr(numabind.cli.look, "look_output", text)
    else:
        monkeypatch.setattr(numabind.cli, "fast_run", step_fn)
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        assert main(list(args)) == 0
        assert seen == [False]
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
