"""numactl's own command line: ``numabind [numactl options] command ...`` and a ``numactl`` link to numabind, read
as numactl 2.0.19's getopt_long reads it; every refusal exits 1, as numactl does (docs/numactl.rst).
"""

from __future__ import annotations

import errno
import os
import sys

from .._numactl import ALIASES, CPU, MODIFIER, OPTIONS, POLICIES, POLICY, SEGMENT, SHORT, expand, policy_of

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the looks' start)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

__all__ = ["numactl_main", "is_numactl_form", "NumactlUsage", "NumactlFailure", "segment_main", "memsize"]

#: numabind's own option numactl's form takes (spelled in full: never an abbreviation of numactl's).
OWN = ("within-affinity",)
USAGE_LINE = ("usage: numactl [-a] [-b] [-i|-w|-p|-P|-m NODES | -l] [-C CPUS | -N NODES] command args ...;  "
              "numactl -s;  numactl -H [--cpu-compress]")
_NO_COMMAND = "no command given (numactl runs the command that follows its options)"
_STRICT_IGNORED = ("numabind: warning: -t/--strict (numactl's strict flag for shared memory) is ignored for a "
                   "process, as numactl ignores it\n")
#: numabind's own top-level options, which keep ``numabind -v run ...`` and the like numabind's.
_NUMABIND_GLOBALS = ("-h", "--help", "--root", "--json", "--version", "--verbose")


def _kind(name: str) -> str:
    """What option ``name`` sets (:mod:`numabind._numactl`'s kinds; numabind's own: a modifier)."""
    return MODIFIER if name in OWN else OPTIONS[name][2]


class NumactlUsage(Exception):
    """A numactl command line numabind refuses (exit 1, as numactl)."""


def is_numactl_form(args: list[str], subcommands: tuple[str, ...]) -> bool:
    """Whether ``numabind ARGS`` is numactl's command line: it starts with a numactl option (not one of
    numabind's own) or with a word that is not a subcommand."""
    if not args:
        return False
    first = args[0]
    if not first.startswith("-") or first == "-":
        return first not in subcommands
    if first == "--":
        return True
    if first.startswith("--"):
        name = first.partition("=")[0]      # "--=x" names no option of numabind's: numactl's usage error
        return name == "--" or not any(g.startswith(name) for g in _NUMABIND_GLOBALS if g.startswith("--"))
    return first[1] not in ("h", "v")


def _long(tok: str) -> tuple[str, str | None]:
    """(option, value given with '=') of ``--name[=value]``, an abbreviation resolved as getopt_long does."""
    name, eq, value = tok[2:].partition("=")
    found = [name] if name in OWN else expand(name)
    if not found:
        raise NumactlUsage(f"unrecognized option '{'--' + name if name else tok}'")
    if len(found) > 1:
        raise NumactlUsage(f"option '--{name}' is ambiguous; possibilities: " + " ".join(f"'--{o}'" for o in found))
    return found[0], (value if eq else None)


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
            takes = name not in OWN and OPTIONS[name][1]
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
            if not OPTIONS[name][1]:
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
        if name == "all" and lists:
            raise NumactlUsage(f"--all/-a option must be before all cpu/node specifications (here after --{lists})")
        if name in ("balancing", "hardware", "version") and policy:
            raise NumactlUsage(f"--{name} must come before the memory policy --{policy} (numactl: specify policy "
                               f"after --shm/--file)")
        if _kind(name) == POLICY:
            if policy:
                raise NumactlUsage(f"Conflicting policies: --{policy} and --{name} (a process has one memory "
                                   f"policy: give one of them)")
            policy = name
        if _kind(name) in (CPU, POLICY) and OPTIONS[name][1]:     # a list: every one but --localalloc
            lists = name


def run_args(opts: list[tuple[str, str | None]]) -> list[str]:
    """``numabind run``'s options for numactl's that shape a process's binding (the rest shape a segment, or
    print): the last CPU option wins, ``--cpubind`` is ``--cpunodebind``."""
    last = max((k for k, (n, _) in enumerate(opts) if _kind(n) == CPU), default=-1)
    out: list[str] = []
    for k, (name, value) in enumerate(opts):
        if _kind(name) not in (CPU, POLICY, MODIFIER) or (_kind(name) == CPU and k != last):
            continue
        name = ALIASES.get(name, name)
        out.append(f"--{name}" if value is None else f"--{name}={value}")
    return out


def _numactl_status(rc: int) -> int:
    """numactl's exit status for numabind run's: 1 for usage, 126 and 127, else the status as it is."""
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


def _version() -> int:
    from .._version import __version__

    print(__version__)
    return 0


def _hardware(cpu_compress: bool) -> int:
    from . import write_out
    from .look import look_output   # the look's own path: no argparse (numactl's scripts call -H in loops)

    return write_out(look_output("hardware", "compressed" if cpu_compress else ""))


def numactl_main(args: list[str]) -> int:
    """numactl's command line; the exit status (1 for a numabind error, printed as the full command line does)."""
    from ..errors import NumabindError

    try:
        return _numactl_main(args)
    except NumabindError as e:
        sys.stderr.write(f"numabind: error: {e}\n")
        return 1


def _numactl_main(args: list[str]) -> int:
    try:
        opts, command = parse(args)
        names = [n for n, _ in opts]
        if any(_kind(n) == SEGMENT for n in names):
            return segment_main(opts, command)
        check_order(opts)
        if "show" in names:
            return _show(run_args(opts[:names.index("show")]))
        if "hardware" in names:
            return _hardware("cpu-compress" in names)
        if "version" in names:
            return _version()
        if not command:
            raise NumactlUsage(_NO_COMMAND)
    except NumactlUsage as e:
        sys.stderr.write(f"numabind: error: {e}\n{USAGE_LINE}\n")
        return 1
    if "strict" in names:
        sys.stderr.write(_STRICT_IGNORED)
    if "cpu-compress" in names:
        sys.stderr.write("numabind: warning: --cpu-compress only shapes --hardware's CPU lists; ignored here\n")
    return _run(run_args(opts), command)


# --------------------------------------------------------------------------- shared-memory segments
class NumactlFailure(Exception):
    """A numactl command line that fails without a usage message (exit 1, as numactl's ``complain``)."""


def _mode_name(mode: int) -> str:
    """A kernel mode number as numactl's --dump and --verify print it: its word (util.c's), else ``[N]``."""
    from ..backends import MPOL_NAMES

    return POLICIES.get(MPOL_NAMES.get(mode, ""), ("",))[0] or f"[{mode}]"


def _runs(pages: Any, size: int) -> list[list[Any]]:
    """``[start, end, what]`` of each run of pages (``(offset, what)``, in order) that hold the same ``what``."""
    rows: list[list[Any]] = []
    for at, what in pages:
        if rows and rows[-1][2] == what:
            rows[-1][1] = at + size
        else:
            rows.append([at, at + size, what])
    return rows


def _strtoul(text: str, base: int) -> tuple[int, str]:
    """C's ``strtoul(text, &end, base)``: the number and what follows it (base 0: ``0x`` hex, ``0`` octal)."""
    s = text.lstrip(" \t\n\r\f\v")
    sign = 1
    if s[:1] in "+-" and s:
        sign, s = (-1 if s[0] == "-" else 1), s[1:]
    if base in (0, 16) and s[:2].lower() == "0x" and s[2:3].lower() in tuple("0123456789abcdef"):
        s, base = s[2:], 16
    elif base == 0:
        base = 8 if s[:1] == "0" else 10
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"[:base]
    k = 0
    while k < len(s) and s[k].lower() in digits:
        k += 1
    if k == 0:
        return 0, text
    value = int(s[:k], base)
    return (value if sign > 0 else (-value) % (1 << 64)), s[k:]


def memsize(text: str) -> int:
    """numactl's size: a C integer (``0x`` hex, ``0`` octal) with an optional k, m or g (KiB, MiB, GiB)."""
    value, rest = _strtoul(text, 0)
    scale = {"G": 1 << 30, "M": 1 << 20, "K": 1 << 10}.get(rest[:1].upper(), 1)
    return (value * scale) % (1 << 64)


def _number(text: str, base: int) -> int:
    """A whole C integer (``--shmmode`` in octal, ``--shmid``): usage error when anything else."""
    value, rest = _strtoul(text, base)
    if rest or rest is text or not text:
        raise NumactlUsage(f"{text!r} is not a number")
    return value


class _Segments:
    """numactl's option loop when a shared-memory option is given: the options are applied one by one, in the
    order given, to the segment the last ``--shm``/``--file`` attached (numactl.c's main and shm.c)."""

    def __init__(self) -> None:
        self.length = self.offset = self.shmid = 0
        self.mode = 0o600
        self.huge = self.strict = self.whole = self.node_cpu = self.cpubind = False
        self.policy: str | None = None        # the kernel mode name set on the segment (numactl's set_policy)
        self.option: str | None = None        # numactl's shmoption: the last of --length, --offset, ...
        self.nodes: frozenset[int] | None = None   # numactl's `mask`: the last node list read
        self.last: str | None = None          # the node list "same" repeats
        self.segment: Any = None
        self.status = 0
        self._be: Any = None

    def no_policy(self, what: str) -> None:
        if self.policy is not None:
            raise NumactlUsage(f"specify policy after --shm/--file (--{what} after --{self.policy})")

    def no_segment_yet(self, opt: str) -> None:
        if self.segment is not None:
            raise NumactlUsage(f"{opt} must be before shared memory specification")
        self.option = opt

    def need_segment(self, opt: str) -> None:
        if self.segment is None:
            raise NumactlUsage(f"{opt} must be after shared memory specification")

    def check_beyond(self, opt: str) -> None:
        # numactl 2.0.19 compares the offset with the length (not with the segment): kept, as numactl does
        if self.offset >= self.length:
            raise NumactlFailure(f"region offset {self.offset:#x} beyond its length {self.length:#x} at {opt}")

    def backend(self) -> Any:
        if self._be is None:
            from ..backends.segment import segment_backend

            self._be = segment_backend()
        return self._be

    def same(self, value: str) -> str:
        """numactl's ``same``: the node list given last on this line; any other list becomes the last one."""
        if value == "same":
            if self.last is None:
                raise NumactlUsage("same needs previous node specification")
            return self.last
        self.last = value
        return value

    def plan_of(self, name: str, value: str) -> Any:
        """The plan of a list given on this line, read as numactl reads it (the affinity, Mems_allowed; everything
        after -a); a usage error when it is invalid."""
        from .. import live
        from ..errors import NumabindError
        from ..plan import Plan
        from . import device_node, write_out

        flag = "membind" if name in ("preferred", "preferred-many") else name   # a segment's -p takes a list
        try:
            machine = live.machine()
            return Plan.from_numactl_args([*(["--all"] if self.whole else []), f"--{flag}={value}"],
                                          topology=machine, device_node=device_node).validate(machine)
        except (NumabindError, ValueError) as e:
            write_out(f"<{value}> is invalid\n")   # numactl's line, the value's bytes as given
            raise NumactlUsage(f"--{name}={value}: {e}") from None

    def attach(self, name: str, path: str) -> None:
        from ..backends import segment as door

        if self.cpubind:
            raise NumactlUsage("cannot do --cpubind on shared memory")
        self.no_policy(name)

        def need_length() -> None:
            what = "a sysv shared memory segment" if name == "shm" else "a shared file"
            raise NumactlFailure(f"need a --length to create {what}")

        def say(text: str) -> None:
            sys.stderr.write(f"numabind: {text}\n")

        if self.segment is not None:
            self.segment.close()
            self.segment = None
        if name == "shm":
            seg = door.attach_sysv(path, length=self.length, offset=self.offset, mode=self.mode, shmid=self.shmid,
                                   huge=self.huge, need_length=need_length, say=say)
            self.length = seg.length
            self.check_region(seg.address, seg.length, seg.page_size, "--shm")
        else:
            fd, page = door.open_file(path, length=self.length, offset=self.offset, mode=self.mode,
                                      need_length=need_length)
            try:
                self.check_region(0, self.length, page, "--file")
            except NumactlFailure:
                os.close(fd)
                raise
            seg = door.map_file(fd, path, length=self.length, offset=self.offset, page_size=page)
        self.segment = seg

    @staticmethod
    def check_region(address: int, length: int, page: int, opt: str) -> None:
        if address % page or length % page:
            raise NumactlFailure(f"policy region not page aligned ({length:#x} bytes at offset-adjusted address "
                                 f"{address:#x}; the page is {page:#x} bytes)")
        if not length:
            raise NumactlFailure(f"policy region length not specified before {opt}")

    def set_policy(self, name: str, value: str | None) -> None:
        from ..backends.range import MPOL_MF_STRICT
        from ..errors import BindError

        nodes: frozenset[int] = frozenset()
        mode = policy_of(name)
        if mode != "local":
            nodes = self.plan_of(name, self.same(value or "")).mem_nodes or frozenset()
            self.node_cpu = True
            mode = "preferred-many" if mode == "preferred" else mode   # numactl: -p on a segment, of its first node
        if self.policy is not None:
            raise NumactlUsage(f"Conflicting policies: --{self.policy} and --{name} (a segment has one memory "
                               f"policy: give one of them)")
        self.policy, self.nodes = mode, (None if mode == "local" else nodes)
        if self.segment is None:
            return           # a process's policy: numactl refuses the line at its end (shm option for process)
        from ..backends.segment import set_policy

        be, flags = self.backend(), MPOL_MF_STRICT if self.strict else 0
        if mode == "weighted-interleave":      # numactl sets interleave on a segment for -w too
            set_policy(be, self.segment, "interleave", nodes, flags)
        elif mode == "preferred-many":         # numactl: the first node, preferred-many where the kernel has it
            first = frozenset(sorted(nodes)[:1])
            try:
                set_policy(be, self.segment, "preferred-many", first, flags)
            except BindError as e:
                if e.errno != errno.EINVAL:     # a kernel without MPOL_PREFERRED_MANY (before 5.15)
                    raise
                set_policy(be, self.segment, "preferred", first, flags)
                self.policy = "preferred"
        else:
            set_policy(be, self.segment, mode, nodes, flags)

    def dump(self) -> None:
        from ..backends.segment import page_policies

        seg = self.segment
        pages = ((at, (mode, nodes)) for at, mode, nodes in page_policies(self.backend(), seg))
        for start, end, (mode, nodes) in _runs(pages, seg.page_size):
            if mode != 0:
                print(f"{seg.offset + start:016x}-{seg.offset + end:016x}: {_mode_name(mode)} : "
                      + "".join(f"{n} " for n in sorted(nodes)))

    def dump_nodes(self) -> None:
        from ..backends.segment import page_nodes

        seg = self.segment
        for start, end, node in _runs(page_nodes(self.backend(), seg), seg.page_size):
            print(f"{seg.offset + start:016x}-{seg.offset + end:016x}: {node}")

    def verify(self) -> None:
        """Each page of the segment has the policy and nodes set, and sits on one of them (interleave: in turn)."""
        from ..backends import MPOL_MODES, MPOL_NAMES
        from ..backends.range import page_node
        from ..backends.segment import page_policies

        be, seg = self.backend(), self.segment
        expected = MPOL_MODES.get(self.policy or "", -1)
        want = self.nodes or frozenset()
        turn = page_node(be, seg.address) if self.policy == "interleave" else None

        def warn(at: int, text: str) -> None:
            print(f"numabind verify {seg.address + at:x}({at:x}): {text}")
            self.status = 1

        for at, mode, nodes in page_policies(be, seg):
            if mode != expected:
                warn(at, f"wrong policy {_mode_name(mode)}, expected {_mode_name(expected)}")
                return
            if nodes != want:
                warn(at, "mismatched node mask")
                print("expected: " + "".join(f"{n} " for n in sorted(want)))
                print("real: " + "".join(f"{n} " for n in sorted(nodes)))
            node = page_node(be, seg.address + at)
            if turn is not None:
                if node not in nodes:
                    warn(at, f"interleave node out of range {node}")
                if node != turn:
                    warn(at, f"expected interleave node {turn}, got {node}")
                    return
                ring = sorted(nodes)
                turn = next((n for n in ring if n > turn), ring[0]) if ring else turn
            elif MPOL_NAMES.get(mode) in ("preferred", "bind", "preferred-many") and node not in nodes:
                warn(at, f"unexpected node {node}")
                print("expected: " + "".join(f"{n} " for n in sorted(nodes)))

    def run(self, opts: list[tuple[str, str | None]], command: list[str]) -> int:
        from ..backends.segment import touch

        hardware = False
        for name, value in opts:
            if name == "show":
                return _show(run_args(opts[:opts.index((name, value))]))
            if name in ("hardware", "balancing"):
                self.no_policy(name)
                hardware = hardware or name == "hardware"
            elif name == "version":
                self.no_policy(name)
                return _version()
            elif name == "all":
                if self.node_cpu:
                    raise NumactlUsage("--all/-a option must be before all cpu/node specifications")
                self.whole = True
            elif _kind(name) == CPU:
                if self.option:
                    short = "-C/--physcpubind" if name == "physcpubind" else "-c/--cpubind/--cpunodebind"
                    raise NumactlUsage(f"{self.option} shm option is not allowed before {short}")
                value = value or ""     # checked only: numactl refuses to run a command beside a segment
                self.plan_of(name, value if name == "physcpubind" else self.same(value))
                self.cpubind = self.node_cpu = True
            elif _kind(name) == POLICY:
                self.set_policy(name, value)
            elif name in ("shm", "file"):
                self.attach(name, value or "")
            elif name == "length":
                self.no_segment_yet("--length")
                self.length = memsize(value or "")
            elif name == "offset":
                self.no_segment_yet("--offset")
                self.offset = memsize(value or "")
            elif name == "shmmode":
                self.no_segment_yet("--shmmode")
                self.mode = _number(value or "", 8)
            elif name == "huge":
                self.no_segment_yet("--huge")
                self.huge = True
            elif name == "shmid":
                self.shmid = _number(value or "", 0)
            elif name == "strict":
                self.strict = True
            elif name in ("dump", "dump-nodes"):
                if self.segment is None:
                    raise NumactlFailure(f"Cannot do --{name} without shared memory.")
                self.dump() if name == "dump" else self.dump_nodes()
            elif name == "touch":
                self.need_segment("--touch")
                self.check_beyond("--touch")
                touch(self.segment)
            elif name == "verify":
                self.need_segment("--verify")
                if self.policy is None:
                    raise NumactlFailure("Need a policy first to verify")
                self.check_beyond("--verify")
                touch(self.segment)
                if self.nodes is None:
                    raise NumactlFailure("Need a mask to verify")
                self.verify()
        if hardware:
            return _hardware(any(n == "cpu-compress" for n, _ in opts))
        if self.segment is not None:
            if command:
                raise NumactlUsage(f"no command runs with --shm/--file (numactl sets the segment's policy and "
                                   f"exits); drop {command[0]!r}")
            return self.status
        if self.strict:
            sys.stderr.write(_STRICT_IGNORED)
        if self.option:
            raise NumactlUsage(f"shm related option {self.option} for process (give --shm or --file)")
        if not command:
            raise NumactlUsage(_NO_COMMAND)
        return _run(run_args(opts), command)


def _show(before: list[str]) -> int:
    """numactl's --show of the binding the options ``before`` it make."""
    if before:     # numactl shows what the options before -s set: show from a bound child
        from ..process.commands import numabind_command

        return _run(before, numabind_command(["show"]))
    import argparse

    from .show import cmd_show

    return cmd_show(argparse.Namespace(root=None, json=False))


def segment_main(opts: list[tuple[str, str | None]], command: list[str]) -> int:
    """numactl's command line with shared-memory options (``--shm``, ``--file``, ...): applied in order; the
    exit status (1 for every refusal, as numactl)."""
    from ..errors import BindError, NumabindError

    state = _Segments()
    try:
        return state.run(opts, command)
    except NumactlUsage as e:
        sys.stderr.write(f"numabind: error: {e}\n{USAGE_LINE}\n")
    except (NumactlFailure, BindError) as e:
        sys.stderr.write(f"numabind: {e}\n")
    except NumabindError as e:   # not the kernel's refusal: the settings' (NUMABIND_BACKEND), as the CLI says them
        sys.stderr.write(f"numabind: error: {e}\n")
    finally:
        sys.stdout.flush()
        if state.segment is not None:
            state.segment.close()
    return 1
