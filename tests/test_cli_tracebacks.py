"""Issue 41: command lines that ended in a raw Python traceback instead of numabind's one-line error.

Each test runs the real command line (``python -m numabind``, or a script named ``numactl``) in a child with a
clean environment and the ``NUMABIND_*`` value under test, and checks that the child says ``numabind: error:``
(naming what is wrong) with the documented status: 2 for a usage error of ``numabind run`` and
``numabind instrument``, 1 in numactl's form (numactl's status for every refusal), and never a traceback.
The four cases of the issue: numactl's form under a bad ``NUMABIND_BACKEND`` and a bad ``NUMABIND_FSROOT``,
``numabind -C -- CMD`` (an option's value ``--``, which argparse turned into a list), and an empty command name.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

#: A CPU this process may use (numactl's -C checks the affinity), and a command that exits 0 if it ever runs.
CPU = str(min(os.sched_getaffinity(0)))
OK = [sys.executable, "-c", "pass"]


def _env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMABIND_", "_NUMABIND_"))}
    env.update(settings)
    return env


def cli(args: list[str], prog: str | None = None, **settings: str) -> subprocess.CompletedProcess[str]:
    """``numabind ARGS`` (or ``PROG ARGS``, a script of that path running numabind's main) with ``settings``."""
    argv = [sys.executable, "-m", "numabind", *args] if prog is None else [prog, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=_env(**settings),
                          stdin=subprocess.DEVNULL)


def refused(cp: subprocess.CompletedProcess[str], status: int, *named: str) -> None:
    """``cp`` exited ``status`` with numabind's one-line error naming each of ``named``, and no traceback."""
    assert "Traceback" not in cp.stderr, cp.stderr
    assert cp.returncode == status, (cp.returncode, cp.stderr)
    assert "numabind: error:" in cp.stderr or "numabind instrument: error:" in cp.stderr, cp.stderr
    for word in named:
        assert word in cp.stderr, (word, cp.stderr)


@pytest.fixture
def numactl_link(tmp_path):
    """A script named ``numactl`` that runs numabind's main: numabind's command line under numactl's name."""
    path = tmp_path / "numactl"
    path.write_text(f"#!{sys.executable}\nimport sys\nfrom numabind.cli import main\nsys.exit(main())\n")
    path.chmod(0o755)
    return str(path)


def test_numactl_form_with_a_bad_backend_says_so_and_exits_1(numactl_link):
    for args in (["-s"], ["--show"], ["-C", CPU, *OK]):
        refused(cli(args, NUMABIND_BACKEND="bogus"), 1, "NUMABIND_BACKEND='bogus'", "libnuma, syscall")
        refused(cli(args, NUMABIND_BACKEND="\udcff\x1b[2J"), 1, "NUMABIND_BACKEND=", "is not a backend")
        # a valid backend that cannot be used here (libnuma refused to load): named, with the reason
        refused(cli(args, NUMABIND_BACKEND="libnuma", _NUMABIND_LIBNUMA="libnope.so.1"), 1,
                "'libnuma' was forced but cannot be used")
    refused(cli(["-s"], numactl_link, NUMABIND_BACKEND="bogus"), 1, "NUMABIND_BACKEND='bogus'")
    for prog in (None, numactl_link):       # empty is unset: the first usable backend
        cp = cli(["-s"], prog, NUMABIND_BACKEND="")
        assert (cp.returncode, cp.stderr) == (0, ""), cp.stderr
        assert "physcpubind:" in cp.stdout


def test_numactl_form_with_a_bad_fsroot_says_so_and_exits_1(numactl_link, tmp_path):
    not_a_root = tmp_path / "notes.txt"
    not_a_root.write_text("not a machine\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    for prog in (None, numactl_link):
        for args in (["-H"], ["--hardware"], ["--hardware", "--cpu-compress"]):
            refused(cli(args, prog, NUMABIND_FSROOT="/nonexistent"), 1, "NUMABIND_FSROOT='/nonexistent'",
                    "does not exist")
            refused(cli(args, prog, NUMABIND_FSROOT=str(not_a_root)), 1, str(not_a_root))
            refused(cli(args, prog, NUMABIND_FSROOT=str(empty)), 1, str(empty), "holds no sysfs")
        cp = cli(["-H"], prog, NUMABIND_FSROOT="")      # empty is unset: this machine
        assert (cp.returncode, cp.stderr) == (0, ""), cp.stderr
        assert cp.stdout.startswith("available:")


def test_an_option_value_of_double_dash_is_a_usage_error_not_a_traceback():
    # numactl's getopt takes `--` as -C's value, as numabind's numactl form does: an invalid CPU list
    refused(cli(["-C", "--", *OK]), 1, "--physcpubind", "'--'")
    refused(cli(["--physcpubind=--", *OK]), 1, "'--'")
    # argparse stored [] for --OPT=-- (no type, no choices check): each is now that value, refused by name
    refused(cli(["run", "--physcpubind=--", "--", *OK]), 2, "'--'")
    refused(cli(["--root=--", "hardware"]), 2, "'--'")
    cp = cli(["run", "--backend=--", "-C", CPU, "--", *OK])     # was silently the default backend, exit 0
    assert "Traceback" not in cp.stderr and cp.returncode == 2, cp.stderr
    assert "--backend" in cp.stderr and "invalid choice: '--'" in cp.stderr, cp.stderr
    cp = cli(["run", "--gpu=--", "--", *OK])
    assert "Traceback" not in cp.stderr and cp.returncode == 2, cp.stderr
    assert "--gpu" in cp.stderr and "'--'" in cp.stderr, cp.stderr
    # numabind move builds its own parser (it starts without the rest of the CLI): the same class
    for move in (["move"], []):
        cp = cli([*move, str(os.getpid()), "--backend=--", "-C", CPU]) if move else subprocess.run(
            [sys.executable, "-m", "numabind.cli.move", str(os.getpid()), "--backend=--", "-C", CPU],
            capture_output=True, text=True, timeout=120, env=_env())
        assert "Traceback" not in cp.stderr and cp.returncode == 1, cp.stderr
        assert "backend='--' is not a backend" in cp.stderr, cp.stderr      # the value given, named


def test_an_empty_command_name_is_refused_before_binding(numactl_link):
    refused(cli(["run", "-C", CPU, "--", ""]), 2, "command name is empty")
    refused(cli(["run", "-C", CPU, "--", "", "x"]), 2, "command name is empty")
    refused(cli(["run", "--dry-run", "-C", CPU, "--", ""]), 2, "command name is empty")
    refused(cli(["-C", CPU, ""]), 1, "command name is empty")
    refused(cli([""]), 1, "command name is empty")
    refused(cli(["--", ""]), 1, "command name is empty")
    refused(cli(["-C", CPU, ""], numactl_link), 1, "command name is empty")
    refused(cli(["instrument", ""]), 2, "command name is empty")
    refused(cli(["instrument", "--", ""]), 2, "command name is empty")
    # a NUL byte cannot come from argv, but main() takes a list from Python callers
    for args in (["run", "-C", CPU, "--", "a\0b"], ["run", "-C", CPU, "--", sys.executable, "a\0b"],
                 ["-C", CPU, "a\0b"], ["instrument", "--", "a\0b"]):
        code = f"import sys; from numabind.cli import main; sys.exit(main({args!r}))"
        cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=_env())
        refused(cp, 1 if args[0] == "-C" else 2, "NUL byte")


def test_a_word_that_was_not_utf8_is_printed_as_given_under_a_strict_stdout():
    # a locale other than C/POSIX gives stdout strict errors: the dry run's command line held a surrogate
    env = _env(PYTHONIOENCODING="utf-8")
    cp = subprocess.run([os.fsencode(sys.executable), b"-m", b"numabind", b"run", b"--dry-run", b"-C", CPU.encode(),
                         b"--", b"\xff"], capture_output=True, timeout=120, env=env)
    assert b"Traceback" not in cp.stderr and cp.returncode == 0, cp.stderr
    assert cp.stdout.rstrip().endswith(b"-- '\xff'"), cp.stdout
