"""Fuzz of ``numabind run``'s option combinations: it applies exactly what was asked, or exits naming why:
2 for a usage error (whatever the machine), 1 for a binding this machine cannot give.

Hypothesis draws binding options in every spelling (``-C 1``, ``--physcpubind=1``, ``--cpus 1`` ...),
conflicting ones (``--gpu`` with explicit options, two memory policies, an option given twice,
``--mode``/``--policy`` without a GPU), values this machine does not have, and shuffles their order.
Each combination runs through ``numabind.cli.main`` in this process with ``exec`` intercepted: the
command it would have exec'd (the command itself, or the numactl wrapper's argv) is started from the
thread ``main`` bound, so it inherits exactly what an exec'd command would, and it reports its CPUs and
memory policy read from procfs and ``get_mempolicy(2)`` (tests/proc_targets.py, not numabind). The
expected outcome comes from a small model of numactl's options written here, not from numabind.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numabind import live
from numabind.cli import main
from tests.kernel import ROOT, ids_of, raw_set_word, raw_word, thread_affinities

pytestmark = pytest.mark.kernel

ALLOWED = sorted(os.sched_getaffinity(0))
#: What -N binds: the node's CPUs in the cpuset (numactl's rule), which under ``taskset -c 0`` is wider than the
#: affinity (the cpuset reader itself is tested against fake cgroup trees in tests/test_allowed.py).
CPUSET = live.limits().allowed_cpus
MEM_NODES = sorted(ids_of(open("/sys/devices/system/node/has_memory").read()))
NODE_CPUS = {n: ids_of(open(f"/sys/devices/system/node/node{n}/cpulist").read())
             for n in ids_of(open("/sys/devices/system/node/online").read())}
CPU_NODES = sorted(n for n, cpus in NODE_CPUS.items() if cpus & set(ALLOWED))
OUTSIDE_CPU = max(ids_of(open("/sys/devices/system/cpu/online").read())) + 1
MISSING_NODE = max(ids_of(open("/sys/devices/system/node/possible").read())) + 1

SPELLINGS = {  # option -> the ways to write it
    "physcpubind": ["-C", "--physcpubind", "--cpus"],
    "cpunodebind": ["-N", "--cpunodebind"],
    "membind": ["-m", "--membind"],
    "preferred": ["-p", "--preferred"],
    "preferred-many": ["--preferred-many"],
    "interleave": ["-i", "--interleave"],
}
MEMORY = ("membind", "preferred", "preferred-many", "interleave", "localalloc")
POLICY_OF = {"membind": "bind", "preferred": "preferred", "preferred-many": "preferred-many",
             "interleave": "interleave", "localalloc": "local"}
REPORT = ("import json, sys; sys.path.insert(0, sys.argv[1]); from tests import proc_targets as p; "
          "print(json.dumps(p.state('exec')))")


def _list(ids) -> str:
    return ",".join(str(i) for i in sorted(ids))


@st.composite
def option(draw, name: str, values) -> tuple[str, list[str], object]:
    """(option name, its argv words in a random spelling, the value's ids)."""
    ids = draw(values)
    flag = draw(st.sampled_from(SPELLINGS[name]))
    text = _list(ids)
    words = [f"{flag}={text}"] if flag.startswith("--") and draw(st.booleans()) else [flag, text]
    return name, words, frozenset(ids)


def subsets(pool, extra) -> st.SearchStrategy:
    """Non-empty subsets of ``pool``; one in ten with an id this machine lacks."""
    good = st.sets(st.sampled_from(pool), min_size=1, max_size=len(pool))
    return st.tuples(good, st.integers(0, 9)).map(lambda t: t[0] | {extra} if t[1] == 0 else t[0])


@st.composite
def run_options(draw):
    chosen: list[tuple[str, list[str], object]] = []
    cpu = draw(st.sampled_from(["none"] * 2 + ["physcpubind"] * 3 + ["cpunodebind"] * 2 + ["both"]))
    if cpu in ("physcpubind", "both"):
        chosen.append(draw(option("physcpubind", subsets(ALLOWED, OUTSIDE_CPU))))
    if cpu in ("cpunodebind", "both"):
        chosen.append(draw(option("cpunodebind", subsets(CPU_NODES, MISSING_NODE))))
    how_many = draw(st.sampled_from([0, 0, 0, 1, 1, 1, 1, 1, 2]))
    for name in draw(st.lists(st.sampled_from(MEMORY), min_size=how_many, max_size=how_many, unique=True)):
        if name == "localalloc":
            chosen.append((name, [draw(st.sampled_from(["-l", "--localalloc"]))], frozenset()))
        else:
            chosen.append(draw(option(name, subsets(MEM_NODES, MISSING_NODE))))
    valued = [c for c in chosen if c[0] != "localalloc"]
    if valued and draw(st.integers(0, 9)) == 0:   # an option given twice, maybe spelled another way
        chosen.append(draw(option(draw(st.sampled_from(valued))[0], subsets(ALLOWED, OUTSIDE_CPU))))
    extra: list[tuple[str, list[str], object]] = []
    if draw(st.integers(0, 7)) == 0:
        extra.append(("gpu", ["--gpu", "0"], None))
    if draw(st.integers(0, 9)) == 0:
        extra.append(("mode", ["--mode", draw(st.sampled_from(["node", "socket"]))], None))
    if draw(st.integers(0, 9)) == 0:
        extra.append(("policy", ["--policy", draw(st.sampled_from(["bind", "interleave"]))], None))
    if draw(st.booleans()):
        extra.append(("strict", ["--strict"], None))
    if draw(st.integers(0, 7)) == 0:
        extra.append(("migrate", ["--migrate"], None))
    backend = draw(st.sampled_from([None, "libnuma", "syscall", "numactl"]))
    if backend:
        extra.append(("backend", ["--backend", backend], None))
    return draw(st.permutations(chosen + extra))


def _names(*words: str):
    return lambda err: all(w in err for w in words)


def _node(n: int):
    return lambda err: re.search(rf"\bnodes? {n}\b", err) is not None


def expected(items) -> tuple[str, object]:
    """A model of the options, in the order the CLI checks them:

    ("exit2", [predicates on stderr, any one of which must hold]) — a usage error names what is wrong;
    ("exit1", [predicates]) — a binding this machine cannot give (a CPU or node it lacks) names it;
    ("gpu", None) — a GPU plan, compared with plan_for_gpu; ("bound", (cpus, policy, nodes)).
    """
    names = [name for name, _, _ in items]
    values = {name: ids for name, _, ids in items}
    explicit = [n for n in names if n in SPELLINGS or n == "localalloc"]
    if any(names.count(n) > 1 for n in names):                 # argparse, while parsing
        return "exit2", [_names("given twice")]
    if "gpu" in names and explicit:                            # then the combination of options
        return "exit2", [_names("--gpu", *("--" + n for n in explicit))]
    shaping = [n for n in ("mode", "policy") if n in names]
    if shaping and "gpu" not in names:
        return "exit2", [_names(*("--" + n for n in shaping))]
    if "gpu" in names:
        return "gpu", None
    if not explicit:     # --migrate alone may be refused first for wanting a memory policy
        alone = [_names("--migrate", "memory policy")] if "migrate" in names else []
        return "exit2", [_names("give a binding"), *alone]
    usage, misfit = [], []                       # then the command line, whatever the machine; then the machine
    if "physcpubind" in names and "cpunodebind" in names:
        usage.append(_names("--physcpubind", "--cpunodebind"))
    mem = [n for n in names if n in MEMORY]
    if len(mem) > 1:
        usage.append(_names(*("--" + n for n in mem)))
    if any(m == "preferred" and len(values[m]) > 1 for m in mem):
        usage.append(_names("preferred"))
    if "migrate" in names and (not mem or "localalloc" in mem):
        usage.append(_names("migrate"))
    if usage:
        return "exit2", usage
    cpus: frozenset[int] = frozenset(ALLOWED)
    if "physcpubind" in names:
        cpus = values["physcpubind"]
        if OUTSIDE_CPU in cpus:
            misfit.append(lambda err: re.search(rf"\bCPUs {OUTSIDE_CPU}\b", err) is not None)
    if "cpunodebind" in names:
        if MISSING_NODE in values["cpunodebind"]:
            misfit.append(_node(MISSING_NODE))
        cpus = frozenset().union(*(NODE_CPUS.get(n, frozenset()) for n in values["cpunodebind"])) & CPUSET
    policy, nodes = "default", frozenset()
    if mem:
        policy, nodes = POLICY_OF[mem[0]], values[mem[0]]
        if MISSING_NODE in nodes:
            misfit.append(_node(MISSING_NODE))
    if misfit:
        return "exit1", misfit
    return "bound", (sorted(cpus), policy, sorted(nodes))


class Executed(Exception):
    pass


def _refuse_exec(path, argv):
    raise Executed(list(argv))


def _put_back(affinities: dict, word) -> None:
    """Every thread's affinity and the memory policy as they were before an example (threads gone are skipped)."""
    for tid, cpus in affinities.items():
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass
    raw_set_word(*word)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=run_options())
def test_run_applies_exactly_what_was_asked_or_exits_1_or_2(items, capsys, monkeypatch):
    monkeypatch.setattr(os, "execv", _refuse_exec)
    monkeypatch.setattr(os, "execvp", _refuse_exec)
    monkeypatch.setattr(os, "execvpe", lambda path, argv, env: _refuse_exec(path, argv))   # numabind run's exec
    monkeypatch.setattr(os, "execve", lambda path, argv, env: _refuse_exec(path, argv))    # the numactl backend's
    argv = ["run", *(w for _, words, _ in items for w in words), "--", sys.executable, "-c", REPORT, ROOT]
    affinities, word = thread_affinities(), raw_word()
    capsys.readouterr()
    try:
        try:
            rc: object = main(argv)
        except SystemExit as e:
            rc = e.code
        except Executed as e:
            # what exec would have run, started from the thread main() bound: it inherits the binding
            cp = subprocess.run(e.args[0], capture_output=True, text=True, timeout=60, env={
                k: v for k, v in os.environ.items() if not k.startswith(("NUMABIND_", "_NUMABIND_"))})
            assert cp.returncode == 0, (argv, cp.stderr)
            rc = json.loads(cp.stdout)
    finally:
        _put_back(affinities, word)
    err = capsys.readouterr().err
    kind, want = expected(items)
    if kind == "gpu":
        from numabind import PlanError, plan_for_gpu

        mode = next((w[1] for n, w, _ in items if n == "mode"), "node")
        policy = next((w[1] for n, w, _ in items if n == "policy"), "bind")
        try:
            plan = plan_for_gpu(0, mode=mode, policy=policy)
        except PlanError:
            assert rc == 1 and "numabind: error:" in err, (argv, rc, err)
            return
        kind, want = "bound", (sorted(plan.cpus), plan.mem_policy, sorted(plan.mem_nodes or ()))
    if kind in ("exit1", "exit2"):
        assert rc == int(kind[-1]), (argv, rc, err)
        assert any(named(err) for named in want), (argv, err)
        return
    assert isinstance(rc, dict), (argv, rc, err)
    cpus, policy, nodes = want
    assert rc["cpus"] == cpus, (argv, rc)
    if policy == "local":  # kernels before 5.x store MPOL_LOCAL as preferred with no node
        assert (rc["policy"], rc["nodes"]) in (("local", []), ("preferred", [])), (argv, rc)
    else:
        assert (rc["policy"], rc["nodes"]) == (policy, nodes), (argv, rc)


# --------------------------------------------------------------------------- never a traceback (issue 41)
# numactl's own command line, the other subcommands and the NUMABIND_* settings, with valid, invalid and empty
# values, odd bytes (a word that was not UTF-8 reaches Python as surrogates) and empty words: whatever comes,
# main() returns a documented status or execs (refused here, as above), and says why without a traceback.
ODD = ["", "--", "-", "\udcff", "\x1b[2J", "x", "-1", "0-", "!", "+", "all"]
CPU_VALUES = st.one_of(st.sets(st.sampled_from(ALLOWED), min_size=1).map(_list), st.just(str(OUTSIDE_CPU)),
                       st.sampled_from(ODD + ["!0", "+0", f"0-{OUTSIDE_CPU}"]))
NODE_VALUES = st.one_of(st.sets(st.sampled_from(MEM_NODES), min_size=1).map(_list), st.just(str(MISSING_NODE)),
                        st.sampled_from(ODD + ["same", "pci:0000:ff:1f.7", "netdev:nonexistent0"]))
#: numactl's options for a process (the shared-memory ones, which create segments and files, are left out):
#: long name -> (short letter, the values it takes, or None)
NUMACTL = {"physcpubind": ("C", CPU_VALUES), "cpunodebind": ("N", NODE_VALUES), "cpubind": ("c", NODE_VALUES),
           "membind": ("m", NODE_VALUES), "preferred": ("p", NODE_VALUES), "preferred-many": ("P", NODE_VALUES),
           "interleave": ("i", NODE_VALUES), "weighted-interleave": ("w", NODE_VALUES),
           "localalloc": ("l", None), "all": ("a", None), "balancing": ("b", None), "strict": ("t", None),
           "show": ("s", None), "hardware": ("H", None), "cpu-compress": (None, None), "version": (None, None),
           "within-affinity": (None, None)}
COMMANDS = st.sampled_from([[], [sys.executable, "-c", "pass"], [""], ["", "x"], ["-"], ["/nonexistent/cmd"],
                            ["\udcff"], [sys.executable, "", "\udcff"]])


@st.composite
def numactl_option(draw) -> list[str]:
    name = draw(st.sampled_from(sorted(NUMACTL)))
    short, values = NUMACTL[name]
    if draw(st.integers(0, 19)) == 0:          # unknown, ambiguous or cut short
        return [draw(st.sampled_from(["--bogus", "-z", "--pre", "--p", "--=x", "--physcpubind", "-C"]))]
    spelled = f"--{name[:draw(st.integers(3, len(name)))]}" if draw(st.booleans()) or short is None else f"-{short}"
    if values is None:
        return [spelled + ("=x" if spelled.startswith("--") and draw(st.integers(0, 19)) == 0 else "")]
    value = draw(values)
    if spelled.startswith("--"):
        return [f"{spelled}={value}"] if draw(st.booleans()) else [spelled, value]
    return [spelled + value] if value and draw(st.booleans()) else [spelled, value]


#: numactl's looks, which print and exit (a quarter of the command lines end in one)
LOOKS = [["-s"], ["--show"], ["-H"], ["--hardware"], ["--hard"], ["-H", "--cpu-compress"], ["-sH"], ["--version"]]


@st.composite
def numactl_argv(draw) -> list[str]:
    words = [w for option in draw(st.lists(numactl_option(), max_size=4)) for w in option]
    if draw(st.integers(0, 3)) == 0:
        return (words if draw(st.booleans()) else []) + draw(st.sampled_from(LOOKS))
    command = draw(COMMANDS)
    if command and draw(st.booleans()):
        command = ["--", *command]
    return words + command


VALUES = st.sampled_from(ODD + ["0", "1", "node", "bind", "libnuma", "none", "/", "/nonexistent"])


@st.composite
def subcommand_argv(draw) -> list[str]:
    """numabind's own subcommands (not ``move`` or ``stat``: other processes), their values odd or empty."""
    sub = draw(st.sampled_from(["run", "run", "run", "hardware", "topology", "plan", "show", "instrument", ""]))
    if sub == "instrument":
        return ["instrument", *(["--"] if draw(st.booleans()) else []), *draw(COMMANDS)]
    flags = {"run": ["-C", "--physcpubind", "-N", "-m", "--membind", "-p", "-i", "-w", "--weights", "--gpu",
                     "--gpus", "--mode", "--policy", "--backend", "--root", "-l", "--strict", "--lenient",
                     "--dry-run", "--migrate", "-a", "--within-affinity"],
             "hardware": ["--root", "--json"], "topology": ["--root", "--json", "--of", "--matrix"],
             "plan": ["--root", "--json", "--gpu", "--mode", "--policy", "--all", "--within-affinity"],
             "show": ["--root", "--json"], "": ["--root", "--json"]}[sub]
    takes = {"--json", "-l", "--strict", "--lenient", "--dry-run", "--migrate", "-a", "--within-affinity",
             "--matrix", "--all"}
    words: list[str] = [sub] if sub else []
    for flag in draw(st.lists(st.sampled_from(flags), max_size=3)):
        if flag in takes:
            words.append(flag)
            continue
        value = draw(st.one_of(VALUES, CPU_VALUES))
        words += [f"{flag}={value}"] if flag.startswith("--") and draw(st.booleans()) else [flag, value]
    if sub == "run":
        words += [f"--thread={draw(THREADS)}"] * draw(st.integers(0, 1))
        words += ["--", *draw(COMMANDS)]
    return words


#: ``--thread PATTERN=SPEC`` values: odd patterns (empty, regex-looking, unbalanced) and specs of every kind
THREADS = st.tuples(st.sampled_from(["", "*", "worker*", "[", "a=b", "\udcff", "x" * 300, "?", "**", "ncclProxy"]),
                    st.sampled_from(["", "0", "node0", "node:0", "cpus:0", "-1", "!", "0-", "\udcff", "="]),
                    st.booleans()).map(lambda t: f"{t[0]}={t[1]}" if t[2] else t[0] + t[1])


@st.composite
def check_argv(draw) -> list[str]:
    """``numabind check --no-placement`` (one child Python each, ~0.2 s) with odd values of its own options and
    run's; ``--measure`` only with a ``--seconds`` that is refused or tiny."""
    words = ["check", "--no-placement"]
    flags = ["--mib", "--timeout", "--gpu", "--gpus", "-C", "-N", "-m", "-p", "-i", "--backend", "--mode"]
    for flag in draw(st.lists(st.sampled_from(flags + ["--json", "-l", "--migrate", "--measure"]), max_size=3)):
        if flag == "--measure":
            words += [flag, "--seconds", draw(st.sampled_from(["0", "-1", "abc", "0.05", "", "nan", "inf"]))]
        elif flag in ("--json", "-l", "--migrate"):
            words.append(flag)
        else:
            value = draw(st.one_of(VALUES, CPU_VALUES, st.sampled_from(["0.5", "-3", "1e9", "nan", "99999"])))
            words += [f"{flag}={value}"] if flag.startswith("--") and draw(st.booleans()) else [flag, value]
    return words


@st.composite
def irq_argv(draw) -> list[str]:
    """``numabind irq``: a device, --reserve and --json; --apply and --restore only with --dry-run (this machine's
    interrupts are never touched)."""
    words = ["irq"]
    for flag in draw(st.lists(st.sampled_from(["--gpu", "--nic", "--all", "--json", "--reserve"]), max_size=3)):
        if flag in ("--all", "--json"):
            words.append(flag)
        else:
            value = draw(st.one_of(VALUES, st.sampled_from(["mlx5_0", "eth0", "lo", "-2", "999", "1.5"])))
            words += [f"{flag}={value}"] if draw(st.booleans()) else [flag, value]
    change = draw(st.sampled_from([[], [], ["--apply"], ["--restore"], ["--apply", "--restore"]]))
    return words + change + ["--dry-run"] if change else words


DUMP = os.path.join(ROOT, "tests", "dumps", "vm-2n.tar.bz2")
SETTINGS = {   # NUMABIND_* -> what it may be (None: unset)
    "NUMABIND_BACKEND": [None, "", "libnuma", "syscall", "numactl", "none", "bogus", "\udcff\x1b[2J", " none"],
    "NUMABIND_FSROOT": [None, "", "/", "/nonexistent/root", os.path.abspath(__file__), os.path.dirname(DUMP),
                        DUMP, "\udcff"],
    "NUMABIND_STRICT": [None, "", "1", "0", "partial", "bogus", "\udcff"],
    "NUMABIND_GPU_VENDOR": [None, "", "nvidia", "bogus", "\udcff"],
    "NUMABIND_LOCAL_RANK": [None, "", "0", "-1", "x", "99999999999999999999"],
    "NUMABIND_LOCAL_WORLD_SIZE": [None, "", "1", "0", "x"],
    "NUMABIND_NO_RECORD": [None, "", "1", "\udcff"],
}


@st.composite
def settings_env(draw) -> dict[str, str | None]:
    """Each setting unset or one of its values: NUMABIND_BACKEND and NUMABIND_FSROOT given one time in two (an
    invalid one often), the others one time in four."""
    often = ("NUMABIND_BACKEND", "NUMABIND_FSROOT")
    return {name: draw(st.sampled_from(values)) for name, values in SETTINGS.items()
            if draw(st.integers(0, 1 if name in often else 3)) == 0}


def _never_a_traceback(argv: list[str], prog: str, env: dict[str, str | None], statuses: tuple[int, ...],
                       capsys, monkeypatch) -> None:
    """main(argv, prog) under ``env``: a status in ``statuses`` (or an exec, refused), no exception, no traceback."""
    affinities, word, saved = thread_affinities(), raw_word(), dict(os.environ)
    capsys.readouterr()
    try:
        with monkeypatch.context() as m:
            for name in ("execv", "execvp"):
                m.setattr(os, name, _refuse_exec)
            m.setattr(os, "execvpe", lambda path, argv, env: _refuse_exec(path, argv))
            m.setattr(os, "execve", lambda path, argv, env: _refuse_exec(path, argv))
            for name in SETTINGS:
                m.delenv(name, raising=False)
            for name, value in env.items():
                if value is not None:
                    m.setenv(name, value)
            try:
                rc: object = main(argv, prog=prog)
            except SystemExit as e:      # argparse's own usage errors
                rc = e.code
            except Executed:
                rc = "exec"
    finally:
        _put_back(affinities, word)
        os.environ.clear()
        os.environ.update(saved)
    out = capsys.readouterr()
    assert "Traceback" not in out.err, (argv, env, out.err)
    assert rc == "exec" or rc in statuses, (argv, env, rc, out.err)
    if rc not in ("exec", 0):
        assert out.err.strip() or out.out.strip(), (argv, env, rc)   # a refusal says why


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=numactl_argv(), as_link=st.booleans(), env=settings_env())
def test_numactl_form_never_gives_a_traceback(argv, as_link, env, capsys, monkeypatch):
    """numactl's form (``numabind -N 0 CMD``, ``-H``, ``-s``, a link named numactl): 0 or numactl's 1 (2 only
    where nothing, or numabind's own option, ``--ver`` for ``--version``/``--verbose``, makes it numabind's)."""
    first = argv[0].partition("=")[0] if argv else ""
    own = not as_link and (not argv or first.startswith("--") and len(first) > 2 and any(
        g.startswith(first) for g in ("--help", "--root", "--json", "--version", "--verbose")))
    _never_a_traceback(argv, "numactl" if as_link else "numabind", env, (0, 1, 2) if own else (0, 1), capsys,
                       monkeypatch)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=subcommand_argv(), env=settings_env())
def test_subcommands_never_give_a_traceback(argv, env, capsys, monkeypatch):
    """numabind's subcommands: 0, 1 where a subcommand says so, 2 for a usage error."""
    _never_a_traceback(argv, "numabind", env, (0, 1, 2), capsys, monkeypatch)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=st.one_of(check_argv(), irq_argv()))
def test_check_and_irq_never_give_a_traceback(argv, capsys, monkeypatch):
    """``check`` (without placement) and ``irq`` (changes only with --dry-run): 0, 1 or 2, never a traceback."""
    assert "--dry-run" in argv or not {"--apply", "--restore"} & set(argv)
    _never_a_traceback(argv, "numabind", {}, (0, 1, 2), capsys, monkeypatch)


@pytest.mark.parametrize("seconds", ["0", "-1", "abc", ""])
def test_check_measure_refuses_a_bad_seconds_with_exit_2(seconds, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["check", "--no-placement", "--measure", "--seconds", seconds])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "--seconds" in err and "Traceback" not in err, err
