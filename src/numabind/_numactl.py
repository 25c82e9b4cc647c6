"""numactl's vocabulary, one table: its options (long name, short letter, whether it takes a value, what it sets),
the memory policy each policy option names (as :data:`numabind.plan.MEM_POLICIES` names it), and the words
numactl and the kernel print for each policy. On the run path: plain tuples and dicts, nothing imported.
"""

__all__ = ["ALIASES", "BINDING", "CPU", "LOOK", "MODIFIER", "OPTIONS", "OWN", "POLICIES", "POLICY", "POLICY_OPTION",
           "SEGMENT", "SETTING", "SHORT", "expand", "policy_of", "spellings"]

#: What an option sets: the CPUs; the memory policy; a modifier of the binding (``-a``, ``-b``, numabind's own);
#: a shared-memory segment (any of these makes the line a segment's); a setting of segments that leaves the line a
#: process's (``--shmid``, ``-t/--strict``); a look (prints and exits).
CPU, POLICY, MODIFIER, SEGMENT, SETTING, LOOK = "cpu", "policy", "modifier", "segment", "setting", "look"

#: numactl 2.0.19's options, in its getopt_long order: long name -> (short letter or "", takes a value, what it
#: sets, the memory policy of a policy option or "").
OPTIONS = {
    "all": ("a", False, MODIFIER, ""), "interleave": ("i", True, POLICY, "interleave"),
    "weighted-interleave": ("w", True, POLICY, "weighted-interleave"),
    "preferred": ("p", True, POLICY, "preferred"), "preferred-many": ("P", True, POLICY, "preferred-many"),
    "cpubind": ("c", True, CPU, ""), "cpunodebind": ("N", True, CPU, ""), "physcpubind": ("C", True, CPU, ""),
    "membind": ("m", True, POLICY, "bind"), "show": ("s", False, LOOK, ""),
    "localalloc": ("l", False, POLICY, "local"), "balancing": ("b", False, MODIFIER, ""),
    "hardware": ("H", False, LOOK, ""), "shm": ("S", True, SEGMENT, ""), "file": ("f", True, SEGMENT, ""),
    "offset": ("o", True, SEGMENT, ""), "length": ("L", True, SEGMENT, ""), "strict": ("t", False, SETTING, ""),
    "shmmode": ("M", True, SEGMENT, ""), "dump": ("d", False, SEGMENT, ""), "dump-nodes": ("D", False, SEGMENT, ""),
    "shmid": ("I", True, SETTING, ""), "huge": ("u", False, SEGMENT, ""), "touch": ("T", False, SEGMENT, ""),
    "cpu-compress": ("", False, LOOK, ""), "verify": ("V", False, SEGMENT, ""), "version": ("", False, LOOK, ""),
}
#: The options of a process's binding in numabind's order (its parsers, their help and their checks list them so).
BINDING = ("physcpubind", "cpunodebind", "membind", "preferred", "preferred-many", "interleave", "weighted-interleave",
           "localalloc")
#: numabind's own options in numactl's vocabulary (never numactl's, so always spelled in full): ``--weights``
#: (``-w``'s weights: ``numabind run``, :meth:`~numabind.plan.Plan.from_numactl_args`) and ``--within-affinity``
#: (``numabind run`` and numactl's form).
OWN = {"weights": ("", True, MODIFIER, ""), "within-affinity": ("", False, MODIFIER, "")}
#: Other spellings of an option: numactl's old ``--cpubind`` (its ``-c``), numabind's ``--cpus`` (run, move).
ALIASES = {"cpubind": "cpunodebind", "cpus": "physcpubind"}
#: numactl's short letters: letter -> long name.
SHORT = {short: name for name, (short, *_) in OPTIONS.items() if short}
#: Each memory policy's option (``bind`` -> ``membind``); ``default`` has none.
POLICY_OPTION = {row[3]: name for name, row in OPTIONS.items() if row[3]}
#: Each memory policy (numabind's name, the kernel's mode ``MPOL_<NAME>``, in the kernel's order) -> (the word
#: numactl's ``--dump`` prints, "" where it prints the mode's number; the word of ``/proc/PID/numa_maps``, the
#: kernel's ``mpol_to_str``).
POLICIES = {
    "default": ("default", "default"), "preferred": ("preferred", "prefer"), "bind": ("bind", "bind"),
    "interleave": ("interleave", "interleave"), "local": ("local", "local"),
    "preferred-many": ("preferred-many", "prefer (many)"), "weighted-interleave": ("", "weighted interleave"),
}


def policy_of(option: str) -> str:
    """The memory policy a policy option sets (``membind`` -> ``bind``); "" for any other option."""
    return OPTIONS[option][3] if option in OPTIONS else ""


def expand(name: str) -> list[str]:
    """The long options ``--name`` may mean as getopt_long reads it: itself, else those it abbreviates."""
    if name in OPTIONS:
        return [name]
    return [option for option in OPTIONS if option.startswith(name)] if name else []


def spellings(name: str) -> tuple[str, ...]:
    """numabind's option strings for option ``name``: its short letter, itself, its aliases."""
    short = (OPTIONS.get(name) or OWN[name])[0]
    aliases = tuple(f"--{alias}" for alias, of in ALIASES.items() if of == name)
    return ((f"-{short}",) if short else ()) + (f"--{name}", *aliases)
