"""``numabind run`` with numactl's own options, parsed by hand: the fast path.

It takes ``[-C|--physcpubind|--cpus L] [-N|--cpunodebind N] [-m|--membind N] [-p|--preferred N]
[--preferred-many N] [-i|--interleave N] [-w|--weighted-interleave N [--weights 0:3,1:1] [--set-weights]]
[-l|--localalloc] [--migrate] [--strict] [--backend B] -- command ...``, each option once, in the
``--opt=V``, ``--opt V``, ``-oV`` and ``-o V`` forms, and the command after ``--``. The plan is built by :meth:`Plan.from_numactl_args` against
:func:`numabind.live.machine` (a few sysfs files) and validated like the full CLI's, bound through one
backend, and the command is exec'd. Anything else, or any error, is left to the full CLI
(:mod:`numabind.cli.commands`), which gives the usage errors, messages and exit codes; so does
``--weights bandwidth`` (it reads the firmware's bandwidth figures through a whole discovery).
"""

from __future__ import annotations

import os
import sys

__all__ = ["fast_run"]

#: option -> (numactl option it stands for, whether it takes a value)
_OPTIONS = {
    "-C": ("--physcpubind", True), "--physcpubind": ("--physcpubind", True), "--cpus": ("--physcpubind", True),
    "-N": ("--cpunodebind", True), "--cpunodebind": ("--cpunodebind", True),
    "-m": ("--membind", True), "--membind": ("--membind", True),
    "-p": ("--preferred", True), "--preferred": ("--preferred", True),
    "--preferred-many": ("--preferred-many", True),
    "-i": ("--interleave", True), "--interleave": ("--interleave", True),
    "-w": ("--weighted-interleave", True), "--weighted-interleave": ("--weighted-interleave", True),
    "--weights": ("--weights", True), "--set-weights": ("set_weights", False),
    "-l": ("--localalloc", False), "--localalloc": ("--localalloc", False),
    "--migrate": ("migrate", False), "--strict": ("strict", False), "--backend": ("backend", True),
}


def _parse(args: list[str]) -> tuple[list[str], dict[str, str], list[str]] | None:
    """(numactl argv, other settings, command), or None when the full CLI must handle ``args``."""
    numactl: list[str] = []
    seen: set[str] = set()
    other: dict[str, str] = {}
    k = 0
    while k < len(args):
        tok = args[k]
        k += 1
        if tok == "--":
            command = args[k:]
            return (numactl, other, command) if command and numactl else None
        name, eq, value = tok.partition("=") if tok.startswith("--") else (tok[:2], "", tok[2:])
        if not tok.startswith("--") and value:
            eq = "="
        spec = _OPTIONS.get(name)
        if spec is None or spec[0] in seen:
            return None
        key, takes = spec
        seen.add(key)
        if not takes:
            if eq:
                return None
            if key.startswith("--"):
                numactl.append(key)
            else:
                other[key] = "1"
            continue
        if not eq:
            if k >= len(args) or args[k] == "--" or args[k].startswith("-"):
                return None
            value = args[k]
            k += 1
        if not value or (key == "--weights" and value == "bandwidth"):
            return None
        if key.startswith("--"):
            numactl.append(f"{key}={value}")
        else:
            other[key] = value
    return None


def fast_run(args: list[str]) -> int | None:
    """Bind and exec for plain numactl options; None when the full CLI must handle ``args``."""
    parsed = _parse(args)
    root = os.environ.get("NUMABIND_FSROOT")
    if parsed is None or (root and os.path.realpath(root) != "/"):
        return None
    numactl, other, command = parsed
    from ..backends import BACKEND_NAMES, get_backend
    from ..errors import NumabindError

    backend = other.get("backend")
    if backend is not None and backend not in BACKEND_NAMES:
        return None
    try:
        from .. import live
        from ..bind import bind_current, bound_environ
        from ..plan import Plan

        machine = live.machine()
        plan = Plan.from_numactl_args(numactl, topology=machine, migrate="migrate" in other).validate(machine)
        if "set_weights" in other and not plan.weights:
            return None       # the full CLI says what --set-weights needs
        be, _ = get_backend(backend)
        prefix = be.command_prefix(plan)
        if prefix is not None:
            os.execv(prefix[0], prefix + command)
        report = bind_current(plan, strict=True if "strict" in other else None, backend=backend,
                              set_weights="set_weights" in other)
    except NumabindError as e:
        sys.stderr.write(f"numabind: error: {e}\n")
        return 2
    for w in report.warnings:   # what the full CLI's logging shows (WARNING, numabind.bind)
        sys.stderr.write(f"numabind.bind: WARNING: {w}\n")
    try:
        os.execvpe(command[0], command, bound_environ(report))   # _NUMABIND_BOUND: for numabind stat
    except OSError as e:
        sys.stderr.write(f"numabind: error: numabind run: cannot execute {command[0]!r}: {e.strerror}\n")
        return 2
    return 2   # not reached: exec replaced the process
