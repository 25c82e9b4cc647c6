"""``numabind instrument -- CMD``: numabind's drop-ins replace the host projects' NUMA modules before their
first import, in the command and in each spawn and forkserver child, with no edit to the host (issue 27).

The hosts are fakes in ``tmp_path`` with the real packages' module paths (``vllm/utils/numa_utils.py``,
``sglang/srt/utils/numa_utils.py``, each marking itself ``HOST_OWN``); everything runs in real child
processes, through ``python -m numabind instrument``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from numabind.cli import instrument
from numabind.compat.bootstrap import sitecustomize as boot

from .fakecompat import COMPAT, HOSTS, make_hosts

# What each process sees: the module its import of each host name gave, whether it is the host's own,
# and whether the parent package's attribute and sys.modules hold that same object.
REPORTER = '''
import builtins, importlib, json, multiprocessing as mp, os, sys

def observe():
    if os.environ.get("HIDE_NUMABIND"):       # this interpreter has no numabind
        sys.path[:] = [p for p in sys.path if not os.path.isdir(os.path.join(p or ".", "numabind"))]
    out = {"chained": getattr(builtins, "CHAINED_SITECUSTOMIZE", False)}
    for host in %r:
        m = importlib.import_module(host)
        parent = importlib.import_module(host.rpartition(".")[0])
        out[host] = {"name": m.__name__, "host_own": getattr(m, "HOST_OWN", False),
                     "spec": m.__spec__.name,
                     "one_object": sys.modules[host] is m and parent.numa_utils is m
                                   and sys.modules.get(m.__name__) is m}
    return out

def child(q):
    q.put(observe())

if __name__ == "__main__":
    result = {"parent": observe()}
    for method in sys.argv[1:]:
        ctx = mp.get_context(method)
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,))
        p.start()
        result[method] = q.get(timeout=300)
        p.join()
    print(json.dumps(result))
''' % (HOSTS,)


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    make_hosts(tmp_path / "site")
    (tmp_path / "reporter.py").write_text(REPORTER)
    return tmp_path


def run(argv: list[str], cwd: Path, pythonpath: list[Path], **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(map(str, pythonpath))
    env.update(extra)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def instrumented(hosts: Path, *methods: str, pythonpath: list[Path] | None = None,
                 **extra: str) -> tuple[dict[str, dict[str, object]], str]:
    proc = run([sys.executable, "-m", "numabind", "instrument", "--", sys.executable, "reporter.py", *methods],
               hosts, pythonpath or [hosts / "site"], **extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1]), proc.stderr


def test_without_instrument_each_host_module_is_its_own(hosts):
    """The control: the same program run plainly imports the hosts' modules."""
    proc = run([sys.executable, "reporter.py", "spawn"], hosts, [hosts / "site"])
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    for where in ("parent", "spawn"):
        for host in HOSTS:
            assert seen[where][host]["host_own"] and seen[where][host]["name"] == host


def test_instrument_replaces_both_modules_in_the_command_and_its_spawn_and_forkserver_children(hosts):
    seen, stderr = instrumented(hosts, "spawn", "forkserver")
    for where in ("parent", "spawn", "forkserver"):
        for host in HOSTS:
            got = seen[where][host]
            # the drop-in itself (one object under both names: patching numa_utils.X patches numabind),
            # its spec its own, the host's file never executed
            assert got == {"name": COMPAT[host], "host_own": False, "spec": COMPAT[host], "one_object": True}, \
                (where, host, got)
    assert "refusing" not in stderr and "stays the host's own" not in stderr


def test_instrument_says_once_at_info_that_numabind_is_in_charge(hosts):
    (hosts / "logs.py").write_text(
        "import logging; logging.basicConfig(level=logging.INFO)\n"
        "import vllm.utils.numa_utils, sglang.srt.utils.numa_utils\n"
        "import vllm.utils.numa_utils as again\n")
    proc = run([sys.executable, "-m", "numabind", "instrument", sys.executable, "logs.py"], hosts, [hosts / "site"])
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "is in charge of" in line]
    assert len(lines) == 2, proc.stderr
    assert lines[0].startswith("INFO:vllm.utils.numa_utils:numabind ")
    assert lines[1].startswith("INFO:sglang.srt.utils.numa_utils:numabind ")
    assert all("binding still happens only where the host's own options ask for it" in line for line in lines)


def test_a_program_that_imports_no_host_module_never_loads_numabind(hosts):
    """The bootstrap runs in every Python process of the program: it costs a finder, not numabind."""
    (hosts / "plain.py").write_text("import sys\nprint(sorted(m for m in sys.modules if m.startswith('numabind')))\n")
    proc = run([sys.executable, "-m", "numabind", "instrument", "--", sys.executable, "plain.py"], hosts,
               [hosts / "site"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_sitecustomize_it_shadows_still_runs(hosts):
    other = hosts / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins\nbuiltins.CHAINED_SITECUSTOMIZE = True\n")
    plain = run([sys.executable, "reporter.py"], hosts, [hosts / "site", other])
    assert json.loads(plain.stdout.splitlines()[-1])["parent"]["chained"] is True   # the control
    seen, _ = instrumented(hosts, "spawn", pythonpath=[hosts / "site", other])
    for where in ("parent", "spawn"):
        assert seen[where]["chained"] is True
        assert seen[where]["vllm.utils.numa_utils"]["name"] == "numabind.compat.vllm"


def test_a_python_without_numabind_keeps_the_host_module_and_says_why(hosts):
    seen, stderr = instrumented(hosts, HIDE_NUMABIND="1")
    for host in HOSTS:
        assert seen["parent"][host]["host_own"] is True
        assert f"{host} stays the host's own: this Python ({sys.executable}) has no numabind" in stderr


def test_the_bootstrap_refuses_to_run_from_a_directory_others_can_write(hosts):
    bad = hosts / "shared"
    bad.mkdir()
    shutil.copy(boot.__file__, bad / "sitecustomize.py")
    bad.chmod(0o777)
    proc = run([sys.executable, "reporter.py", "spawn"], hosts, [bad, hosts / "site"])
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    for where in ("parent", "spawn"):
        for host in HOSTS:
            assert seen[where][host]["host_own"] is True
    assert f"refusing to run from a path another user can write: {bad} is writable by its group and others" \
        in proc.stderr
    bad.chmod(0o755)   # the same copy, now only ours: it routes (so the refusal above is the mode's doing)
    proc = run([sys.executable, "reporter.py"], hosts, [bad, hosts / "site"])
    assert json.loads(proc.stdout.splitlines()[-1])["parent"]["vllm.utils.numa_utils"]["host_own"] is False


def test_the_command_refuses_an_unsafe_bootstrap_and_runs_nothing(hosts, monkeypatch, capsys):
    bad = hosts / "shared"
    bad.mkdir()
    shutil.copy(boot.__file__, bad / "sitecustomize.py")
    bad.chmod(0o757)
    monkeypatch.setattr(instrument, "bootstrap_dir", lambda: str(bad))
    marker = hosts / "ran"
    assert instrument.main(["--", "touch", str(marker)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("numabind instrument: error: refusing to instrument from a path another user can write: ")
    assert f"{bad} is writable by others (mode 757): run chmod go-w {bad}" in err
    assert not marker.exists()


def test_instrumented_environ_puts_the_bootstrap_first_once_and_keeps_the_rest(tmp_path):
    here = instrument.bootstrap_dir()
    assert os.path.isfile(os.path.join(here, "sitecustomize.py"))
    env = instrument.instrumented_environ({"PYTHONPATH": f"/a{os.pathsep}{here}{os.pathsep}/b", "X": "1"})
    assert env["PYTHONPATH"] == os.pathsep.join([here, "/a", "/b"]) and env["X"] == "1"
    assert instrument.instrumented_environ({})["PYTHONPATH"] == here


@pytest.mark.parametrize("argv, status, text", [
    ([], 2, "a command to run is required"),
    (["--"], 2, "a command to run is required"),
    (["--bogus", "python"], 2, "unknown option '--bogus' (put the command after --)"),
    (["--", "numabind-no-such-command-x"], 127, "numabind-no-such-command-x"),
])
def test_usage_errors_and_a_missing_command(argv, status, text, capsys):
    assert instrument.main(argv) == status
    assert text in capsys.readouterr().err


def test_the_cli_dispatches_instrument_and_its_help(capsys):
    from numabind.cli import main

    assert main(["instrument", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: numabind instrument [--] COMMAND [ARGS...]")


# ----------------------------------------------------------------------------- path_problem
def test_path_problem_accepts_a_private_tree_and_a_sticky_directory_above_it(tmp_path):
    private = tmp_path / "p"
    private.mkdir(mode=0o755)
    (private / "f.py").write_text("")
    assert boot.path_problem(str(private / "f.py")) is None
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (sticky / "mine").mkdir(mode=0o700)
    assert boot.path_problem(str(sticky / "mine")) is None
    # the sticky directory itself is what others can write into
    assert "writable by its group and others (mode 1777)" in (boot.path_problem(str(sticky)) or "")


@pytest.mark.parametrize("mode, who", [(0o775, "its group"), (0o757, "others"), (0o777, "its group and others")])
def test_path_problem_names_a_directory_on_the_way_that_others_can_write(tmp_path, mode, who):
    shared = tmp_path / "shared"
    (shared / "deep").mkdir(parents=True)
    shared.chmod(mode)
    assert boot.path_problem(str(shared / "deep")) == (
        f"{shared} is writable by {who} (mode {mode:o}): run chmod go-w {shared}, "
        "or install numabind where only you or root can write")


def test_path_problem_checks_both_the_link_and_where_it_leads(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "target").mkdir()
    shared.chmod(0o777)
    link = tmp_path / "link"
    link.symlink_to(shared / "target")
    assert str(shared) in (boot.path_problem(str(link)) or "")


def test_path_problem_names_an_entry_of_another_user(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    if os.geteuid() == 0:   # root can hand a directory to someone else, and must then refuse it
        os.chown(theirs, 65534, 65534)
        assert boot.path_problem(str(theirs)) == f"{theirs} belongs to uid 65534, not to root or uid 0"
    else:                   # for another user than us, our directory is someone else's
        other = os.geteuid() + 1
        assert boot.path_problem(str(theirs), uid=other) == (
            f"{theirs} belongs to uid {os.geteuid()}, not to root or uid {other}")
