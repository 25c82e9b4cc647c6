"""numactl's own command line: ``numabind [numactl options] command ...`` and a ``numactl`` link to numabind.

numactl 2.0.19's ``main`` is the reference. Its options are read as getopt_long reads them (``+``: the
options end at the first word that is not one, or at ``--``; short options group, ``-lC0``; a long option
may be abbreviated while it stays unambiguous) and applied in the order given:

* ``-s/--show`` shows the binding made by the options before it, and exits 0; ``-H/--hardware`` prints the
  nodes (``--cpu-compress``: CPU ranges and counts) and exits 0, whatever follows.
* ``-a/--all`` after a CPU or node list, ``-b/--balancing``, ``-H`` or ``--version`` after a memory policy,
  and a second memory policy are refused; a later ``-C``/``-N``/``-c`` replaces an earlier one.
* numactl reads the CPU lists of ``-C`` (without ``-a``) against the affinity the process inherited and
  node lists against ``Mems_allowed``; ``-N`` binds every CPU of the nodes in the cpuset, whatever affinity
  a parent left. numabind's own ``--within-affinity`` (spelled in full) narrows the binding to that
  affinity instead.
* ``-t/--strict`` (numactl's strict flag for shared memory) is ignored for a process with a warning, as
  numactl ignores it; numabind's own ``--strict`` (``numabind run``) is another option.
* The shared-memory options (``--shm``, ``--file``, ...) are not supported: refused, naming them.

Every refusal exits 1, as numactl does, a command that cannot be executed too; once the command runs the
status is its own. The binding itself is ``numabind run``'s (the options are handed to it).
"""

from __future__ import annotations

import os
import sys

__all__ = ["numactl_main", "is_numactl_form", "NumactlUsage"]

#: numactl's options: long name -> (short letter or None, takes a value)
LONG = {
    "all": ("a", False), "interleave": ("i", True), "weighted-interleave": ("w", True),
    "preferred": ("p", True), "preferred-many": ("P", True), "cpubind": ("c", True),
    "cpunodebind": ("N", True), "physcpubind": ("C", True), "membind": ("m", True), "show": ("s", False),
    "localalloc": ("l", False), "balancing": ("b", False), "hardware": ("H", False),
    "shm": ("S", True), "file": ("f", True), "offset": ("o", True), "length": ("L", True),
    "strict": ("t", False), "shmmode": ("M", True), "dump": ("d", False), "dump-nodes": ("D", False),
    "shmid": ("I", True), "huge": ("u", False), "touch": ("T", False), "cpu-compress": (None, False),
    "verify": ("V", False), "version": (None, False),
}
#: numabind's own options in numactl's form (spelled in full: they never take an abbreviation of numactl's).
OWN = {"within-affinity": (None, False)}
SHORT = {short: long for long, (short, _) in LONG.items() if short}
#: Options numabind does not implement: numactl's shared-memory policy (and its debugging --verify).
SHM = ("shm", "file", "offset", "length", "shmmode", "shmid", "huge", "touch", "dump", "dump-nodes", "verify")
CPU_OPTIONS = ("physcpubind", "cpunodebind", "cpubind")
POLICIES = ("membind", "preferred", "preferred-many", "interleave", "weighted-interleave", "localalloc")
USAGE_LINE = ("usage: numactl [-a] [-b] [-i|-w|-p|-P|-m NODES | -l] [-C CPUS | -N NODES] command args ...;  "
              "numactl -s;  numactl -H [--cpu-compress]")
#: numabind's own top-level options, which keep ``numabind -v run ...`` and the like numabind's.
_NUMABIND_GLOBALS = ("-h", "--help", "--root", "--json", "--version", "--verbose")


class NumactlUsage(Exception):
    """A numactl command line numabind refuses (exit 1, as numactl)."""


def is_numactl_form(args: list[str], subcommands: tuple[str, ...]) -> bool:
    """Whether ``numabind ARGS`` is numactl's command line rather than a subcommand: it starts with a numactl
    option (not one of numabind's own: ``-h``, ``-v``, ``--root``, ``--json``, ``--version``) or with a word that
    is not a subcommand (the command, which numactl runs)."""
    if not args:
        return False
    first = args[0]
    if not first.startswith("-") or first == "-":
        return first not in subcommands
    if first == "--":
        return True
    if first.startswith("--"):
        name = first.partition("=")[0]
        return not any(g.startswith(name) for g in _NUMABIND_GLOBALS if g.startswith("--")) and name != "--"
    return first[1] not in ("h", "v")


def _long(tok: str) -> tuple[str, str | None]:
    """(option, value given with '=') of ``--name[=value]``, an abbreviation resolved as getopt_long does."""
    name, eq, value = tok[2:].partition("=")
    if name in OWN:
        return name, (value if eq else None)
    if name in LONG:
        full = name
    else:
        found = [o for o in LONG if o.startswith(name)] if name else []
        if not found:
            raise NumactlUsage(f"unrecognized option '--{name}'")
        if len(found) > 1:
            raise NumactlUsage(f"option '--{name}' is ambiguous; possibilities: "
                               + " ".join(f"'--{o}'" for o in found))
        full = found[0]
    return full, (value if eq else None)


def parse(args: list[str]) -> tuple[list[tuple[str, str | None]], list[str]]:
    """numactl's options in the order given, as (long name, value), and the command after them."""
    opts: list[tuple[str, str | None]] = []
    k = 0
    while k < len(args):
        tok = args[k]
        if tok == "--":
            return opts, args[k + 1:]
        if not tok.startswith("-") or tok == "-":
            return opts, args[k:]
        k += 1
        if tok.startswith("--"):
            name, value = _long(tok)
            takes = {**LONG, **OWN}[name][1]
            if value is not None and not takes:
                raise NumactlUsage(f"option '--{name}' doesn't allow an argument")
            if takes and value is None:
                if k >= len(args):
                    raise NumactlUsage(f"option '--{name}' requires an argument")
                value = args[k]
                k += 1
            opts.append((name, value))
            if name == "show":
                return opts, []     # numactl shows and exits here: what follows is never read
            continue
        j = 1
        while j < len(tok):       # grouped short options: -lC0, -la
            letter = tok[j]
            j += 1
            if letter not in SHORT:
                raise NumactlUsage(f"invalid option -- '{letter}'")
            name = SHORT[letter]
            if not LONG[name][1]:
                opts.append((name, None))
                if name == "show":
                    return opts, []
                continue
            value = tok[j:]
            if not value:
                if k >= len(args):
                    raise NumactlUsage(f"option requires an argument -- '{letter}'")
                value = args[k]
                k += 1
            opts.append((name, value))
            break
    return opts, []


def check_order(opts: list[tuple[str, str | None]]) -> None:
    """What numactl refuses because of the order or the repetition of its options."""
    lists = policy = None
    for name, _ in opts:
        if name in SHM:
            raise NumactlUsage(
                f"--{name}: numactl's shared-memory options (--shm, --file, --offset, --length, --shmmode, "
                f"--shmid, --huge, --touch, --dump, --dump-nodes, --verify) are not supported by numabind; "
                f"run numactl itself for them")
        if name == "all" and lists:
            raise NumactlUsage(f"--all/-a option must be before all cpu/node specifications (here after --{lists})")
        if name in ("balancing", "hardware", "version") and policy:
            raise NumactlUsage(f"--{name} must come before the memory policy --{policy} (numactl: specify policy "
                               f"after --shm/--file)")
        if name in POLICIES:
            if policy:
                raise NumactlUsage(f"Conflicting policies: --{policy} and --{name} (a process has one memory "
                                   f"policy: give one of them)")
            policy = name
        if name in CPU_OPTIONS + POLICIES and name != "localalloc":
            lists = name


def run_args(opts: list[tuple[str, str | None]]) -> list[str]:
    """``numabind run``'s options for numactl's: the last CPU option wins, ``--cpubind`` is ``--cpunodebind``."""
    last = max((k for k, (n, _) in enumerate(opts) if n in CPU_OPTIONS), default=-1)
    out: list[str] = []
    for k, (name, value) in enumerate(opts):
        if name in CPU_OPTIONS and k != last:
            continue
        if name == "cpubind":
            name = "cpunodebind"
        if name in CPU_OPTIONS + POLICIES + ("all", "balancing", "within-affinity") and name != "localalloc":
            out.append(f"--{name}" if value is None else f"--{name}={value}")
        elif name == "localalloc":
            out.append("--localalloc")
    return out


def _numactl_status(rc: int) -> int:
    """numactl's exit status for numabind run's: 1 for everything refused (usage 2, not executable 126,
    not found 127), else the status as it is."""
    from . import NOT_EXECUTABLE, NOT_FOUND, USAGE

    return 1 if rc in (USAGE, NOT_EXECUTABLE, NOT_FOUND) else rc


def _run(argv: list[str], command: list[str]) -> int:
    """Bind with numabind run's options ``argv`` and exec ``command``; numactl's status when that fails."""
    from . import exec_command, fast_run

    if not argv:
        return _numactl_status(exec_command(command, dict(os.environ)))
    rc = fast_run(argv + ["--", *command])
    if rc is None:
        from .commands import main as full_main

        try:
            rc = full_main(["run", *argv, "--", *command])
        except SystemExit as e:   # argparse's own usage errors
            rc = e.code if isinstance(e.code, int) else 1
    return _numactl_status(rc)


def _hardware(cpu_compress: bool) -> int:
    import argparse

    from .commands import cmd_hardware

    return cmd_hardware(argparse.Namespace(root=None, json=False, cpu_compress=cpu_compress))


def numactl_main(args: list[str]) -> int:
    """numactl's command line (see the module docstring); the exit status."""
    try:
        opts, command = parse(args)
        check_order(opts)
        names = [n for n, _ in opts]
        if "show" in names:
            before = run_args(opts[:names.index("show")])
            if before:     # numactl shows what the options before -s set: show from a bound child
                return _run(before, [sys.executable, "-m", "numabind", "show"])
            import argparse

            from .commands import cmd_show

            return cmd_show(argparse.Namespace(root=None, json=False))
        if "hardware" in names:
            return _hardware("cpu-compress" in names)
        if "version" in names:
            from .. import __version__

            print(__version__)
            return 0
        if not command:
            raise NumactlUsage("no command given (numactl runs the command that follows its options)")
    except NumactlUsage as e:
        sys.stderr.write(f"numabind: error: {e}\n{USAGE_LINE}\n")
        return 1
    if "strict" in names:
        sys.stderr.write("numabind: warning: -t/--strict (numactl's strict flag for shared memory) is ignored for "
                         "a process, as numactl ignores it\n")
    if "cpu-compress" in names:
        sys.stderr.write("numabind: warning: --cpu-compress only shapes --hardware's CPU lists; ignored here\n")
    return _run(run_args(opts), command)
