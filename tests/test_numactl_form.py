"""numactl's own command line: ``numabind [numactl options] command``, and a link named ``numactl`` to numabind.

numactl 2.0.19 (tests/test_show_oracle.py's oracle) is the reference: for every invocation below, the numactl
form gives numactl's exit status and binds what numactl binds; ``numabind run`` keeps its own statuses (2, 126,
127). Without the oracle the comparisons skip, and fail under NUMABIND_REQUIRE_ORACLE=1. CPUs and nodes come
from this machine (tests.kernel), so the tests also pass under ``taskset -c 0``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from numabind import discover
from numabind.cli.look import compressed as _compressed
from numabind.cli.numactl import NumactlUsage, check_order, is_numactl_form, parse, run_args
from tests.fakesys import two_sockets
from tests.kernel import CPU_A, CPU_B, MEM_NODE, ROOT, child_env, run_main
from tests.numactl_oracle import oracle_or_skip

NUMABIND = (sys.executable, "-m", "numabind")
STATUS = ["grep", "-E", "^(Cpus_allowed_list|Mems_allowed_list)", "/proc/self/status"]
NOT_EXEC = os.path.join(ROOT, "README.md")      # exists, not executable


def _node_of(cpu: int) -> int:
    return next(n for n, node in discover().nodes.items() if cpu in node.cpus)


def _run(argv: list[str] | tuple[str, ...]) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, env=child_env(), timeout=120, cwd=ROOT)


@pytest.fixture(scope="module")
def numactl_link(tmp_path_factory) -> str:
    """A link named ``numactl`` to the ``numabind`` console script beside this interpreter."""
    script = os.path.join(os.path.dirname(sys.executable), "numabind")
    if not os.path.exists(script):
        pytest.skip(f"no numabind console script at {script} (install the package with pip)")
    link = tmp_path_factory.mktemp("bin") / "numactl"
    link.symlink_to(script)
    return str(link)


# --------------------------------------------------------------------------- parsing (no machine)
def test_parse_stops_at_the_first_word_that_is_not_an_option():
    assert parse(["-C", "0", "ls", "-l"]) == ([("physcpubind", "0")], ["ls", "-l"])
    assert parse(["-l", "--", "-x"]) == ([("localalloc", None)], ["-x"])
    assert parse(["-lC0", "true"]) == ([("localalloc", None), ("physcpubind", "0")], ["true"])
    assert parse(["--phys=1", "--mem", "0", "x"]) == ([("physcpubind", "1"), ("membind", "0")], ["x"])
    assert parse(["-c", "0", "x"]) == ([("cpubind", "0")], ["x"])
    # numactl shows and exits at -s: what follows is never read, a bad option included
    assert parse(["-C", "0", "-s", "--bogus"]) == ([("physcpubind", "0"), ("show", None)], [])


@pytest.mark.parametrize("argv, said", [
    (["--bogus"], "unrecognized option '--bogus'"), (["--=x"], "unrecognized option '--=x'"),
    (["-Z"], "invalid option -- 'Z'"),
    (["--cpu", "0"], "'--cpu' is ambiguous"), (["--pref=0"], "'--pref' is ambiguous"),
    (["--localalloc=1"], "doesn't allow an argument"), (["-C"], "requires an argument"),
    (["--membind"], "requires an argument"),
])
def test_parse_refuses_what_getopt_refuses(argv, said):
    with pytest.raises(NumactlUsage, match=said):
        parse(argv)


@pytest.mark.parametrize("argv, said", [
    ("-C 0 -a", "--all/-a option must be before"), ("-N 0 -a", "--all/-a"), ("-m 0 -a", "--all/-a"),
    ("-m 0 -b", "--balancing must come before"), ("-i 0 -H", "--hardware must come before"),
    ("-m 0 -m 0", "Conflicting policies"), ("-l -p 0", "Conflicting policies"),
])
def test_order_is_refused_as_numactl_refuses_it(argv, said):
    # (the shared-memory options, refused here until issues 28/32, are tests/test_segment.py's)
    with pytest.raises(NumactlUsage, match=said):
        check_order(parse(argv.split())[0])


def test_order_that_numactl_takes():
    for argv in ("-a -C 0", "-l -a -C 0", "-b -m 0", "-C 0 -C 1", "-C 0 -N 0", "-H -m 0"):
        check_order(parse(argv.split())[0])
    assert run_args(parse("-C 0 -C 1 -m 0".split())[0]) == ["--physcpubind=1", "--membind=0"]
    assert run_args(parse("-C 0 -c 1".split())[0]) == ["--cpunodebind=1"]
    assert run_args(parse("-C 0 -C 0".split())[0]) == ["--physcpubind=0"]     # the same value twice: once
    assert run_args(parse("-N 1 -a -l -C 2".split())[0]) == ["--all", "--localalloc", "--physcpubind=2"]


def test_which_command_lines_are_numactls():
    subs = ("run", "show", "hardware", "topology", "plan", "stat")
    for args in (["-H"], ["--hardware"], ["-s"], ["--show"], ["-C", "0", "x"], ["ls"], ["--", "ls"], ["-t", "x"],
                 ["--=x"]):
        assert is_numactl_form(args, subs), args
    for args in ([], ["run"], ["show"], ["-v", "run"], ["--root", "/", "hardware"], ["--json"], ["-h"],
                 ["--version"], ["--verbose", "plan"]):
        assert not is_numactl_form(args, subs), args


# --------------------------------------------------------------------------- --hardware's text
def test_hardware_distance_columns_are_numactl_2_0_19s(capsys, tmp_path):
    two_sockets(tmp_path, cpus_per_socket=8)
    rc, out, _ = run_main(capsys, "--root", str(tmp_path), "hardware")
    assert rc == 0
    lines = out.splitlines()
    k = lines.index("node distances:")
    assert lines[k + 1] == "node     0    1 "     # numactl 2.0.16 printed "node   0   1 "
    assert lines[k + 2] == "   0:   10   21 "


def test_cpu_compress_ranges():
    assert _compressed({0, 1, 2, 3, 8, 9, 10, 11}) == " 0-3, 8-11 (8)"
    assert _compressed({5}) == " 5 (1)"
    assert _compressed(()) == " (0)"
    assert _compressed({0, 2, 3}) == " 0, 2-3 (3)"


# --------------------------------------------------------------------------- against numactl 2.0.19
def _refused_cases() -> list[list[str]]:
    a, m = str(CPU_A), str(MEM_NODE)
    return [["-C", a, "-a", "true"], ["-m", m, "-b", "true"], ["-m", m, "-i", m, "true"], ["-m", m, "-m", m, "true"],
            ["--bogus", "true"], ["-Z", "true"], ["-C"], ["--cpu", a, "true"], ["--localalloc=1", "true"],
            ["-C", a], [], ["nosuch-command-numabind"], ["-C", a, "nosuch-command-numabind"], [NOT_EXEC],
            ["-m", m, "-H"], ["--length", "1M", "true"], ["-C", "not-a-list", "true"]]


@pytest.mark.kernel
@pytest.mark.parametrize("argv", _refused_cases(), ids=" ".join)
def test_refusals_exit_as_numactl_does(argv, numactl_link):
    oracle = oracle_or_skip()
    theirs = _run([oracle, *argv])
    assert theirs.returncode == 1, theirs.stderr
    link = _run([numactl_link, *argv])
    assert (link.returncode, link.stdout) == (1, ""), link.stderr
    assert "numabind: error:" in link.stderr
    if argv:      # `numabind` alone is numabind's overview, not numactl's usage
        top = _run([*NUMABIND, *argv])
        assert (top.returncode, top.stdout) == (1, ""), top.stderr


@pytest.mark.kernel
def test_run_keeps_the_shells_statuses():
    """The difference the README states: numabind run says 127/126/2 where numactl's form says 1."""
    assert _run([*NUMABIND, "run", "-C", str(CPU_A), "--", "nosuch-command-numabind"]).returncode == 127
    assert _run([*NUMABIND, "run", "-C", str(CPU_A), "--", NOT_EXEC]).returncode == 126
    assert _run([*NUMABIND, "run", "-C", str(CPU_A), "-C", str(CPU_A), "--", "true"]).returncode == 2


def _bound_cases() -> list[list[str]]:
    a, b, m = str(CPU_A), str(CPU_B), str(MEM_NODE)
    na, nb = str(_node_of(CPU_A)), str(_node_of(CPU_B))
    return [["-C", a, "-C", b], ["-C", b, "-C", a], ["-N", na, "-C", b], ["-C", a, "-N", nb], ["-a", "-C", a],
            ["-l", "-C", b], [f"-lC{a}"], [f"--phys={b}"], ["-c", na], ["-m", m, "-C", a], ["-b", "-m", m],
            ["-t", "-C", a], [], ["-N", na, "-N", nb], ["-N", "all"], ["-N", "+0"]]


@pytest.mark.kernel
@pytest.mark.parametrize("opts", _bound_cases(), ids=" ".join)
def test_binds_what_numactl_binds_in_the_order_given(opts, numactl_link):
    oracle = oracle_or_skip()
    theirs = _run([oracle, *opts, *STATUS])
    if theirs.returncode != 0:
        pytest.skip(f"numactl 2.0.19 itself refuses {opts} here: {theirs.stderr.strip()[:200]}")
    for ours in (_run([numactl_link, *opts, *STATUS]), _run([*NUMABIND, *opts, "--", *STATUS])):
        assert (ours.returncode, ours.stdout) == (0, theirs.stdout), ours.stderr
        assert ("-t" in opts) == ("ignored" in ours.stderr), ours.stderr


def _in_one_cpu(argv: list[str], cpu: int) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=child_env(), timeout=120, cwd=ROOT,
                          preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))


@pytest.mark.kernel
def test_under_a_parents_affinity_numactl_and_numabind_agree(numactl_link):
    """A child whose parent bound it to one CPU (issue 32 causes 1 and 2): -N, -N all, -N +0 and -a -C take the
    cpuset's CPUs, -C without -a is checked against the affinity; same exit status, same binding."""
    oracle = oracle_or_skip()
    a, b = CPU_A, CPU_B
    cases = [["-N", str(_node_of(b))], ["-N", "all"], ["-N", "+0"], ["-a", "-C", str(b)], ["-a", "-N", "all"],
             ["-C", str(b)], ["-C", "all"], ["-C", "+0"], ["-a", "-C", "all"], ["-m", str(MEM_NODE), "-N", "+0"]]
    for opts in cases:
        theirs = _in_one_cpu([oracle, *opts, *STATUS], a)
        for ours in (_in_one_cpu([numactl_link, *opts, *STATUS], a),
                     _in_one_cpu([*NUMABIND, "run", *opts, "--", *STATUS], a)):
            assert ours.returncode == theirs.returncode, (opts, ours.stderr, theirs.stdout)
            if theirs.returncode == 0:        # numactl prints its refusals ("<1> is invalid") on stdout
                assert ours.stdout == theirs.stdout, (opts, ours.stderr)
    if a != b:   # the refusal names the set that refused, and the fix
        ours = _in_one_cpu([numactl_link, "-C", str(b), *STATUS], a)
        assert "outside this process's affinity" in ours.stderr and "-a/--all" in ours.stderr


@pytest.mark.kernel
def test_the_commands_status_is_its_own(numactl_link):
    oracle = oracle_or_skip()
    for argv in ([oracle], [numactl_link], list(NUMABIND)):
        assert _run([*argv, "-C", str(CPU_A), "sh", "-c", "exit 3"]).returncode == 3


@pytest.mark.kernel
@pytest.mark.parametrize("opts", [["-s"], ["--show"], ["-C", str(CPU_B), "-s"], ["-s", "--ignored-after-s"]],
                         ids=" ".join)
def test_show_as_an_action_shows_what_the_options_before_it_set(opts, numactl_link):
    oracle = oracle_or_skip()
    theirs = _run([oracle, *opts])
    assert theirs.returncode == 0, theirs.stderr
    for ours in (_run([numactl_link, *opts]), _run([*NUMABIND, *opts])):
        assert (ours.returncode, ours.stdout) == (0, theirs.stdout), ours.stderr


def _free_masked(text: str) -> list[str]:
    return [line for line in text.splitlines() if " free: " not in line]


@pytest.mark.kernel
@pytest.mark.parametrize("opts", [["-H"], ["--hardware"], ["-H", "--cpu-compress"], ["--cpu-compress", "-H"],
                                  ["-H", "true"]], ids=" ".join)
def test_hardware_as_an_action_is_numactls(opts, numactl_link):
    oracle = oracle_or_skip()
    theirs = _run([oracle, *opts])
    assert theirs.returncode == 0, theirs.stderr
    for ours in (_run([numactl_link, *opts]), _run([*NUMABIND, *opts])):
        assert ours.returncode == 0, ours.stderr
        assert _free_masked(ours.stdout) == _free_masked(theirs.stdout)


@pytest.mark.kernel
def test_a_numactl_link_has_no_subcommands(numactl_link):
    """Invoked as numactl, `run` is a command to run (there is none), and no arguments is numactl's usage."""
    cp = _run([numactl_link, "run", "-C", str(CPU_A), "--", "true"])
    assert cp.returncode == 1 and "cannot execute 'run'" in cp.stderr, cp.stderr
    cp = _run([numactl_link])
    assert cp.returncode == 1 and "no command given" in cp.stderr, cp.stderr


@pytest.mark.kernel
def test_numabinds_subcommands_and_globals_stay():
    assert _run([*NUMABIND, "--json", "hardware"]).returncode == 0
    cp = _run([*NUMABIND, "-v", "run", "-C", str(CPU_A), "--", *STATUS])
    assert cp.returncode == 0, cp.stderr
