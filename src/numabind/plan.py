"""The frozen :class:`Plan` (which CPUs and memory policy a process gets) and :class:`Allowed` (what a process may
use). Pure: no file, no kernel. :func:`narrow_cpus` and :func:`narrow_nodes` are the one place that says which CPUs
and nodes of a request fit, and why the others do not. The long forms: ``docs/plans.rst``.
"""

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)

from ._base import EXCERPT, Value, excerpt
from ._numactl import ALIASES, BINDING, OPTIONS, POLICY_OPTION, SHORT, policy_of
from .cpulist import MAX_ID, MAX_LIST_TEXT, MAX_LISTED, format_cpulist, parse_cpulist
from .errors import PlanError

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import Any, Protocol

    from .types import MemPolicy, NodePolicy

    class NodeView(Protocol):
        """A node as a plan reads it: its online CPUs and whether it has memory."""

        @property
        def cpus(self) -> frozenset[int]: ...
        @property
        def has_memory(self) -> bool: ...

    class CpuView(Protocol):
        """A CPU as :func:`core_groups` reads it: its hyperthread siblings and its node."""

        @property
        def siblings(self) -> frozenset[int]: ...
        @property
        def node(self) -> int | None: ...

    class CoresView(Protocol):
        """What :func:`core_groups` reads of a machine: its CPUs by id (a :class:`~numabind.topology.Topology`)."""

        @property
        def cpus(self) -> Mapping[int, CpuView]: ...

    class MachineView(Protocol):
        """What a plan reads of a machine: a Topology or a :class:`~numabind.live.LiveMachine`."""

        @property
        def nodes(self) -> Mapping[int, NodeView]: ...
        @property
        def online_cpus(self) -> frozenset[int]: ...
        @property
        def allowed_cpus(self) -> frozenset[int]: ...
        @property
        def allowed_nodes(self) -> frozenset[int]: ...

__all__ = ["Allowed", "DEVICE_SPECIFIERS", "Limits", "MAX_WEIGHT", "MEM_POLICIES", "MIN_WEIGHT", "NODE_POLICIES",
           "PROC_BINDS", "Plan", "absent_from_machine", "check_affinity", "check_plan", "core_groups", "cpus_not_online",
           "format_weights", "narrow_cpus", "narrow_nodes", "nodes_not_there", "parse_weights", "plannable_policy",
           "read_back_plan"]

#: Memory policies a plan may carry (``None`` means "leave as is").
MEM_POLICIES: "tuple[MemPolicy, ...]" = ("bind", "preferred", "preferred-many", "interleave", "weighted-interleave",
                                         "local", "default")
#: The policies that take nodes (what a placement strategy or ``numabind plan --policy`` may choose).
NODE_POLICIES: "tuple[NodePolicy, ...]" = ("bind", "preferred", "preferred-many", "interleave")
_NODELESS = ("local", "default")
#: numactl's option for each memory policy that takes nodes, and the policy each memory option means.
_NUMACTL_MEM_FLAG = {policy: f"--{option}" for policy, option in POLICY_OPTION.items() if policy != "local"}
_NUMACTL_MEM_OPTION: "dict[str, MemPolicy]" = {   # the table holds MEM_POLICIES names only (tests/test_plan.py)
    o: policy_of(o) for o in BINDING if policy_of(o)}   # type: ignore[misc]
#: The range of one node's weighted-interleave weight, as the kernel accepts it.
MIN_WEIGHT, MAX_WEIGHT = 1, 255
_TEXT_VERSION = "v1"
_TEXT_MAX = 65536


# ----------------------------------------------------------------------------- what a process may use
class Allowed(Value):
    """What a process may use, the one answer: ``allowed_cpus``, the online CPUs of its cpuset (from
    ``cpus_source``); ``allowed_nodes``, the memory nodes of ``Mems_allowed`` (from ``nodes_source``); ``nodes``
    that exist, ``memory_nodes`` with memory. The inherited ``affinity`` (None: unknown) is never a silent limit.
    """

    __slots__ = ("online_cpus", "allowed_cpus", "cpus_source", "nodes", "memory_nodes", "allowed_nodes",
                 "nodes_source", "affinity")

    def __init__(self, online_cpus: frozenset[int], allowed_cpus: frozenset[int], cpus_source: str,
                 nodes: frozenset[int], memory_nodes: frozenset[int], allowed_nodes: frozenset[int],
                 nodes_source: str, affinity: "frozenset[int] | None" = None) -> None:
        for name, value in (("online_cpus", online_cpus), ("allowed_cpus", allowed_cpus), ("nodes", nodes),
                            ("memory_nodes", memory_nodes), ("allowed_nodes", allowed_nodes)):
            object.__setattr__(self, name, frozenset(value))
        object.__setattr__(self, "cpus_source", cpus_source)
        object.__setattr__(self, "nodes_source", nodes_source)
        object.__setattr__(self, "affinity", None if affinity is None else frozenset(affinity))

    online_cpus: frozenset[int]
    allowed_cpus: frozenset[int]
    cpus_source: str
    nodes: frozenset[int]
    memory_nodes: frozenset[int]
    allowed_nodes: frozenset[int]
    nodes_source: str
    affinity: "frozenset[int] | None"

    @classmethod
    def of(cls, machine: "MachineView | Allowed") -> "Allowed":
        """The :class:`Allowed` of a :class:`~numabind.topology.Topology` or the live machine."""
        if isinstance(machine, Allowed):
            return machine
        own = getattr(machine, "allowed", None)
        if isinstance(own, Allowed):
            return own
        source = getattr(machine, "allowed_source", "") or ""
        return cls(online_cpus=machine.online_cpus, allowed_cpus=machine.allowed_cpus,
                   cpus_source=source or "the cpuset", nodes=frozenset(machine.nodes),
                   memory_nodes=frozenset(n for n, node in machine.nodes.items() if node.has_memory),
                   allowed_nodes=machine.allowed_nodes, nodes_source=source or "Mems_allowed",
                   affinity=getattr(machine, "affinity", None))

    @property
    def inherited(self) -> bool:
        """Whether the affinity is known and narrower than the cpuset (a parent or launcher bound the process)."""
        return self.affinity is not None and not self.allowed_cpus <= self.affinity

    def within_affinity(self) -> "Allowed":
        """These limits narrowed to the inherited affinity; a :class:`PlanError` when unknown or disjoint."""
        if self.affinity is None:
            raise PlanError("within_affinity: this machine's affinity is unknown (a dump without "
                            "Cpus_allowed in proc/self/status); plan without within_affinity")
        kept = self.allowed_cpus & self.affinity
        if not kept:
            raise PlanError(f"within_affinity: the inherited affinity (CPUs {format_cpulist(self.affinity)}) "
                            f"shares no CPU with the cpuset (CPUs {format_cpulist(self.allowed_cpus)}, from "
                            f"{self.cpus_source}); plan without within_affinity")
        return self.replace(allowed_cpus=kept, cpus_source=f"{self.cpus_source}, within the inherited affinity")


#: The earlier name of :class:`Allowed` (the same class).
Limits = Allowed


def narrow_cpus(cpus: frozenset[int], limits: Allowed) -> tuple[frozenset[int], str | None]:
    """``(the CPUs of cpus the process may use, None)``, or the kept ones and why the others do not fit."""
    kept = cpus & limits.allowed_cpus
    outside = cpus - kept
    if not outside:
        return kept, None
    why = []
    offline = outside - limits.online_cpus
    if offline:
        why.append(cpus_not_online(offline, limits.online_cpus))
    fenced = outside - offline
    if fenced:
        if "within the inherited affinity" in limits.cpus_source:
            why.append(f"CPUs {format_cpulist(fenced)} are outside the CPUs this process may use within its "
                       f"inherited affinity ({format_cpulist(limits.allowed_cpus) or 'none'}, from "
                       f"{limits.cpus_source}); drop within_affinity (--within-affinity) to bind any CPU of "
                       f"the cpuset, or pick CPUs inside that set")
        else:
            why.append(f"CPUs {format_cpulist(fenced)} are outside the CPUs this process may use: its cpuset "
                       f"({format_cpulist(limits.allowed_cpus) or 'none'}, from {limits.cpus_source}); pick "
                       f"CPUs inside that set or widen the cpuset")
    return kept, "; ".join(why)


def cpus_not_online(cpus: frozenset[int], online: frozenset[int], present: "frozenset[int] | None" = None) -> str:
    """Why ``cpus`` (none online) cannot be bound; ``present`` tells the absent from the offline."""
    text = f"CPUs {format_cpulist(cpus)} are not online on this machine (online: {format_cpulist(online)})"
    if present is None:
        return text + "; pick online CPUs"
    offline, absent = cpus & present, cpus - present
    if absent:
        text += f": CPUs {format_cpulist(absent)} do not exist (present: {format_cpulist(present)})"
    if offline:
        text += (f"{',' if absent else ':'} CPUs {format_cpulist(offline)} are offline (as root, "
                 f"echo 1 > /sys/devices/system/cpu/cpu{min(offline)}/online brings one online)")
    return text + "; pick online CPUs"


def nodes_not_there(nodes: frozenset[int], existing: frozenset[int], possible: "frozenset[int] | None" = None) -> str:
    """Why ``nodes`` (none ``existing``) cannot be used; ``possible`` tells the offline from the absent."""
    text = f"NUMA nodes {format_cpulist(nodes)} do not exist (nodes: {format_cpulist(existing)})"
    offline = nodes & possible if possible is not None else frozenset()
    if offline:
        text += (f"; nodes {format_cpulist(offline)} are possible but offline (no memory or CPU of theirs is "
                 f"online)")
    return text


def absent_from_machine(cpus: "frozenset[int] | None", nodes: "frozenset[int] | None", online_cpus: frozenset[int],
                        node_ids: frozenset[int], present_cpus: "frozenset[int] | None" = None,
                        possible_nodes: "frozenset[int] | None" = None) -> "str | None":
    """Why a plan's ``cpus`` and ``nodes`` are not this machine's (CPUs not online, nodes that do not exist), or
    None. The cpuset and memory-less nodes are not checked here (the kernel refuses them at apply time)."""
    why = []
    gone = cpus - online_cpus if cpus else frozenset()
    if gone:
        why.append(cpus_not_online(gone, online_cpus, present_cpus))
    missing = nodes - node_ids if nodes else frozenset()
    if missing:
        why.append(nodes_not_there(missing, node_ids, possible_nodes))
    return "; ".join(why) or None


def check_affinity(cpus: frozenset[int], limits: Allowed, flag: str = "--physcpubind") -> None:
    """numactl's ``-C`` without ``-a``: a :class:`PlanError` when ``cpus`` leave the inherited affinity
    (libnuma checks ``-C`` against ``Cpus_allowed``); nothing when the affinity is unknown."""
    if limits.affinity is None:
        return
    outside = cpus - limits.affinity
    if outside:
        raise PlanError(f"{flag}: CPUs {format_cpulist(outside)} are outside this process's affinity (CPUs "
                        f"{format_cpulist(limits.affinity)}, inherited from its parent), which numactl checks "
                        f"{flag} against: add -a/--all to bind any CPU of the cpuset "
                        f"({format_cpulist(limits.allowed_cpus)}), or start the process with a wider affinity")


def narrow_nodes(nodes: frozenset[int], limits: Allowed, policy: str | None = None) -> tuple[frozenset[int], str | None]:
    """``(the memory nodes of nodes the process may allocate from, None)`` or the kept ones and why."""
    kept = nodes & limits.nodes & limits.memory_nodes & limits.allowed_nodes
    if kept == nodes:
        return kept, None
    why = []
    missing = nodes - limits.nodes
    if missing:
        why.append(nodes_not_there(missing, limits.nodes))
    memless = nodes - missing - limits.memory_nodes
    if memless:
        what = f"a {policy} policy" if policy else "a memory policy"
        why.append(f"NUMA nodes {format_cpulist(memless)} have no memory; {what} cannot place pages there")
    outside = nodes - missing - memless - limits.allowed_nodes
    if outside:
        why.append(f"NUMA nodes {format_cpulist(outside)} are outside the memory nodes this process may use: its "
                   f"cpuset's ({format_cpulist(limits.allowed_nodes) or 'none'}, from {limits.nodes_source}); "
                   f"pick nodes inside that set or widen the cpuset's mems")
    return kept, "; ".join(why)


# ----------------------------------------------------------------------------- plans
def _as_ids(value: "Any", what: str) -> frozenset[int] | None:
    """``value`` (a cpulist string or an iterable of ints) as a frozenset of ids. A bare int, bytes, floats and
    bools are refused; nothing larger than the caps is built (an iterator is consumed only up to them)."""
    if value is None:
        return None
    if isinstance(value, str):
        return parse_cpulist(value, what=what)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise PlanError(f"{what} must be a cpulist string or an iterable of ints, got bytes {bytes(value[:100])!r}; "
                        f"decode it first (e.g. {what}=value.decode())")
    if isinstance(value, int) and not isinstance(value, bool):
        # Refused like psutil's cpu_affinity(3): a bare int reads as "3 CPUs" as easily as "CPU 3".
        one = "node" if what == "mem_nodes" else "CPU"
        raise PlanError(f"{what} must be an iterable of ints or a cpulist string, got the int {value}; for {one} "
                        f"{value} alone write {what}={{{value}}} (or {what}=\"{value}\")")
    if isinstance(value, range):
        if value:     # the bounds by arithmetic: bool() and indexing never build (nor overflow on) a huge range
            low, high = min(value[0], value[-1]), max(value[0], value[-1])
            if low < 0:
                raise PlanError(f"{what} must hold non-negative ints, got {low} (in {value!r})")
            if high > MAX_ID:
                raise PlanError(_above_cap(what, high))
    elif isinstance(value, (set, frozenset, list, tuple)):
        if len(value) > MAX_LISTED:
            raise PlanError(_too_many(what, len(value)))
    else:
        value = _consume(value, what)
    try:
        ids: frozenset[int] = frozenset(value)
    except TypeError:
        raise PlanError(f"{what} must be a cpulist string or an iterable of ints, got "
                        f"{type(value).__name__}: {value!r}"[:300]) from None
    if ids and (set(map(type, ids)) != {int} or min(ids) < 0 or max(ids) > MAX_ID):
        for i in ids:     # not plain ids in range: the loop finds which (an int subclass other than bool passes)
            _check_item(i, what)
    return ids


def _check_item(i: object, what: str) -> None:
    if not isinstance(i, int) or isinstance(i, bool) or i < 0:
        raise PlanError(f"{what} must hold non-negative ints, got {type(i).__name__}: {i!r}"[:300])
    if i > MAX_ID:
        raise PlanError(_above_cap(what, i))


def _above_cap(what: str, i: int) -> str:
    return f"{what}: id {i} is larger than numabind's cap of {MAX_ID} (no kernel has that many CPUs or nodes)"


def _too_many(what: str, n: int) -> str:
    return (f"{what}: {n} or more ids (counting repeats) is more than numabind's cap of {MAX_LISTED} "
            f"(there are {MAX_ID + 1} possible ids); give each id once")


def _consume(value: "Any", what: str) -> list[int]:
    """The items of an iterable, each checked as it comes, up to MAX_LISTED (a generator may never end)."""
    try:
        items = iter(value)
    except TypeError:
        raise PlanError(f"{what} must be a cpulist string or an iterable of ints, got "
                        f"{type(value).__name__}: {value!r}"[:300]) from None
    out: list[int] = []
    for i in items:
        _check_item(i, what)
        out.append(i)
        if len(out) > MAX_LISTED:
            raise PlanError(_too_many(what, len(out)))
    return out


def _small_int(digits: str, cap: int) -> int | None:
    """ASCII ``digits`` as an int when not above ``cap``, else None (checked before ``int()``)."""
    significant = digits.lstrip("0") or "0"
    if len(significant) > len(str(cap)):
        return None
    value = int(significant)
    return value if value <= cap else None


def parse_weights(text: str, what: str = "weights") -> dict[int, int]:
    """``"0:3,1:1"`` (node:weight pairs) as ``{0: 3, 1: 1}``; anything else, or over the caps of a cpulist and
    :data:`MAX_WEIGHT`, is a :class:`PlanError`."""
    if not isinstance(text, str):
        raise PlanError(f"{what} must be a string like '0:3,1:1', got {type(text).__name__}")
    shown = f"{what} {excerpt(text, escape=True)}"     # its start, escaped as typed: never the whole text
    if len(text) > MAX_LIST_TEXT:
        raise PlanError(f"{shown} is longer than numabind's cap of {MAX_LIST_TEXT} characters "
                        f"(one NODE:WEIGHT pair per node); check where it came from")
    out: dict[int, int] = {}
    for item in text.split(","):
        node, colon, weight = item.strip().partition(":")
        if not (colon and node.isascii() and node.isdigit() and weight.isascii() and weight.isdigit()):
            raise PlanError(f"{shown}: {excerpt(item.strip(), escape=True)} is not NODE:WEIGHT; write e.g. '0:3,1:1'")
        n = _small_int(node, MAX_ID)
        if n is None:
            raise PlanError(f"{shown}: node {excerpt(node, 20)} is larger than numabind's cap of {MAX_ID}")
        w = _small_int(weight, MAX_WEIGHT)
        if w is None:
            raise PlanError(f"{shown}: node {n} has weight {excerpt(weight, 20)}; the kernel takes whole "
                            f"numbers from {MIN_WEIGHT} to {MAX_WEIGHT}")
        if n in out:
            raise PlanError(f"{shown}: node {n} is given twice")
        out[n] = w
    return out


def format_weights(weights: "Any") -> str:
    """``{0: 3, 1: 1}`` as ``"0:3,1:1"`` (sorted by node): the form :func:`parse_weights` reads."""
    return ",".join(f"{n}:{w}" for n, w in sorted(dict(weights).items()))


def _as_weights(value: "Any", policy: str | None, nodes: frozenset[int] | None) -> "Any":
    """``value`` (a mapping node -> weight, or ``"0:3,1:1"``) checked against the plan, as a FrozenMap."""
    if value is None:
        return None
    if policy != "weighted-interleave":
        raise PlanError(f"weights are for mem_policy='weighted-interleave', not {policy!r}; drop them or change "
                        f"the policy")
    if isinstance(value, str):
        value = parse_weights(value)
    try:
        items = dict(value).items()
    except (TypeError, ValueError):
        raise PlanError(f"weights must be a mapping node -> weight (or '0:3,1:1'), got "
                        f"{type(value).__name__}: {value!r}"[:300]) from None
    if not items:
        return None     # no weights asked for: the system's apply
    for n, w in items:
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise PlanError(f"weights: node {n!r} is not a non-negative int")
        if not isinstance(w, int) or isinstance(w, bool) or not MIN_WEIGHT <= w <= MAX_WEIGHT:
            raise PlanError(f"weights: node {n} has weight {w!r}; the kernel takes whole numbers from "
                            f"{MIN_WEIGHT} to {MAX_WEIGHT}")
    extra = frozenset(n for n, _ in items) - (nodes or frozenset())
    if extra:
        raise PlanError(f"weights name nodes {format_cpulist(extra)} that are not in mem_nodes "
                        f"{format_cpulist(nodes or ())}; weight only the nodes the policy interleaves over")
    from ._util import FrozenMap   # typing-based: imported only for a weighted plan (start-up speed)

    return FrozenMap(dict(items))


#: ``OMP_PROC_BIND`` values :meth:`Plan.thread_env` writes: threads on neighbouring places, or spread over them.
PROC_BINDS = ("close", "spread")


def core_groups(cpus: "Iterable[int]", machine: "CoresView | None" = None) -> "list[tuple[int | None, frozenset[int]]]":
    """``cpus`` as whole cores: ``(node, the core's CPUs among cpus)`` per physical core, ordered by node (unknown,
    None, last) then lowest CPU. A CPU ``machine`` does not list is a core of its own on an unknown node."""
    known = {} if machine is None else machine.cpus
    seen: dict[int, tuple[int | None, frozenset[int]]] = {}
    wanted = frozenset(cpus)
    for c in sorted(wanted):
        if c in seen:
            continue
        info = known.get(c)
        core = (info.siblings & wanted) | {c} if info is not None and info.siblings else frozenset({c})
        group = (None if info is None else info.node, frozenset(core))
        for sib in core:
            seen.setdefault(sib, group)
    groups = {id(g): g for g in seen.values()}.values()
    return sorted(groups, key=lambda g: (g[0] is None, g[0] if g[0] is not None else 0, min(g[1])))


def _place_parts(sizes: "list[int]", cores: "list[tuple[int | None, frozenset[int]]]") -> "list[list[frozenset[int]]]":
    """Each part's cores, in the order of ``sizes``: the lowest free cores of the node with the fewest free cores
    that holds the part whole, else of the nodes with the most free cores first (ties: lowest node)."""
    free: dict[int | None, list[frozenset[int]]] = {}
    for node, core in cores:
        free.setdefault(node, []).append(core)
    order = {node: i for i, node in enumerate(free)}     # node id order, unknown last (cores come sorted so)
    out: list[list[frozenset[int]]] = []
    for n in sizes:
        fits = [node for node, left in free.items() if len(left) >= n]
        if fits:
            node = min(fits, key=lambda k: (len(free[k]), order[k]))
            taken, free[node] = free[node][:n], free[node][n:]
        else:
            taken = []
            for node in sorted(free, key=lambda k: (-len(free[k]), order[k])):
                want = n - len(taken)
                taken += free[node][:want]
                free[node] = free[node][want:]
                if len(taken) == n:
                    break
        out.append(taken)
    return out


def check_plan(value: object, what: str) -> None:
    """The one guard for "not a Plan": a :class:`PlanError` naming the function that needed one."""
    if not isinstance(value, Plan):
        raise PlanError(f"{what} needs a numabind.Plan, got {type(value).__name__}: {value!r}"[:400])


class Plan(Value):
    """A binding to apply: CPU affinity and/or a NUMA memory policy.

    ``cpus=None`` and ``mem_policy=None`` leave each as it is. ``migrate=True`` also moves the pages the process
    already has onto ``mem_nodes``. ``reason`` says where the plan came from (not part of equality). ``weights``
    (weighted interleave only) maps nodes to a weight from 1 to 255 (or ``"0:3,1:1"``); the kernel's are
    system-wide (``docs/plans.rst``). Plans are frozen, hashable and picklable; ``plan.replace(**changes)`` is a
    checked copy.
    """

    __slots__ = ("cpus", "mem_policy", "mem_nodes", "migrate", "reason", "weights")
    _compare = ("cpus", "mem_policy", "mem_nodes", "migrate", "weights")
    cpus: frozenset[int] | None
    mem_policy: "MemPolicy | None"
    mem_nodes: frozenset[int] | None
    migrate: bool
    reason: str
    weights: "Any"     # FrozenMap[int, int] | None

    def __init__(self, cpus: "Any" = None, mem_policy: "MemPolicy | None" = None, mem_nodes: "Any" = None,
                 migrate: bool = False, reason: str = "", weights: "Any" = None) -> None:
        cpus = _as_ids(cpus, "cpus")
        nodes = _as_ids(mem_nodes, "mem_nodes")
        policy = mem_policy
        if policy is not None and policy not in MEM_POLICIES:
            raise PlanError(f"mem_policy {policy!r} is not one of {', '.join(MEM_POLICIES)} (or None to leave it)")
        if cpus is not None and not cpus:
            raise PlanError("cpus is empty: a process needs at least one CPU (use cpus=None to leave the affinity)")
        if policy is None:
            if nodes:
                raise PlanError(f"mem_nodes {format_cpulist(nodes)!r} given without a mem_policy; "
                                f"say how to use them, e.g. mem_policy='bind'")
            nodes = None
        elif policy in _NODELESS:
            if nodes:
                raise PlanError(f"mem_policy {policy!r} takes no nodes, got mem_nodes {format_cpulist(nodes)!r}")
            nodes = frozenset()
        elif not nodes:
            raise PlanError(f"mem_policy {policy!r} needs at least one node in mem_nodes")
        elif policy == "preferred" and len(nodes) != 1:
            raise PlanError(f"mem_policy 'preferred' takes exactly one node, got {format_cpulist(nodes)!r}; "
                            f"use 'preferred-many' for several")
        if not isinstance(migrate, bool):
            raise PlanError(f"migrate must be True or False, got {migrate!r}")
        if migrate and policy in (None, "default", "local"):
            raise PlanError("migrate=True needs mem_nodes to move pages to (a bind/preferred/interleave policy)")
        if not isinstance(reason, str):
            raise PlanError(f"reason must be a string, got {type(reason).__name__}")
        object.__setattr__(self, "cpus", cpus)
        object.__setattr__(self, "mem_policy", policy)
        object.__setattr__(self, "mem_nodes", nodes)
        object.__setattr__(self, "migrate", migrate)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "weights", None if weights is None else _as_weights(weights, policy, nodes))

    def __hash__(self) -> int:
        return hash((self.cpus, self.mem_policy, self.mem_nodes, self.migrate, self.weights))

    # ------------------------------------------------------------------ checks
    def validate(self, topology: "MachineView | Allowed", *, within_affinity: bool = False) -> "Plan":
        """Raise :class:`PlanError` unless this plan fits ``topology`` (``within_affinity``: and its affinity)."""
        limits = Allowed.of(topology)
        if within_affinity:
            limits = limits.within_affinity()
        if self.cpus is not None:
            _, why = narrow_cpus(self.cpus, limits)
            if why:
                raise PlanError(why)
        if self.mem_nodes:
            _, why = narrow_nodes(self.mem_nodes, limits, self.mem_policy)
            if why:
                raise PlanError(why)
        return self

    # ------------------------------------------------------- threads and parts
    def thread_env(self, topology: "CoresView | None" = None, *, proc_bind: str = "close") -> dict[str, str]:
        """``OMP_NUM_THREADS``, ``OMP_PLACES`` (one place per core) and ``OMP_PROC_BIND`` that agree with this plan;
        ``{}`` for ``cpus=None``. See ``docs/plans.rst``, "Threads that agree with a plan"."""
        if proc_bind not in PROC_BINDS:
            raise PlanError(f"proc_bind {proc_bind!r} is not one of {', '.join(PROC_BINDS)}")
        if self.cpus is None:
            return {}
        cores = core_groups(self.cpus, topology)
        places = ",".join("{" + ",".join(map(str, sorted(core))) + "}" for _, core in cores)
        return {"OMP_NUM_THREADS": str(len(cores)), "OMP_PLACES": places, "OMP_PROC_BIND": proc_bind}

    def split(self, sizes: "Sequence[int]", topology: "CoresView | None" = None) -> "list[Plan]":
        """Disjoint sub-plans of this plan's CPUs, ``sizes[i]`` whole cores each, in the order of ``sizes``
        (``main, loader = plan.split([6, 2], topo)``): a part stays on one node where one holds it, and a policy
        over nodes is narrowed to the part's nodes. The rules: ``docs/plans.rst``, "Parts of a plan"."""
        if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
            raise PlanError(f"split takes a list of core counts, e.g. split([4, 2]), got "
                            f"{type(sizes).__name__}: {sizes!r}"[:300])
        wanted = list(sizes)
        if not wanted or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in wanted):
            raise PlanError(f"split sizes {wanted!r} must be one or more positive ints (cores per part)"[:300])
        if self.cpus is None:
            raise PlanError(f"split {wanted!r}: the plan leaves the CPUs as they are (cpus=None), so there are "
                            f"no cores to split; plan CPUs first (e.g. numabind.plan_for_gpu or Plan(cpus=...))")
        cores = core_groups(self.cpus, topology)
        if sum(wanted) > len(cores):
            how = "cores" if topology is not None else "CPUs (no topology given: each CPU counts as a core)"
            raise PlanError(f"split {wanted!r} asks for {sum(wanted)} cores, but the plan has {len(cores)} "
                            f"{how}: {format_cpulist(self.cpus)}; ask for fewer cores or split a wider plan")
        node_of = {min(core): node for node, core in cores}
        out = []
        for i, taken in enumerate(_place_parts(wanted, cores)):
            cpus = frozenset().union(*taken)
            nodes = frozenset(n for n in (node_of[min(core)] for core in taken) if n is not None)
            policy, mem, weights = self.mem_policy, self.mem_nodes, self.weights
            if policy in ("bind", "preferred-many", "interleave", "weighted-interleave") and mem and mem & nodes:
                mem = mem & nodes
                if weights is not None:
                    weights = {n: w for n, w in weights.items() if n in mem} or None
            where = f" on node{'s' if len(nodes) > 1 else ''} {format_cpulist(nodes)}" if nodes else ""
            reason = (f"part {i} of split {wanted!r}: {len(taken)} core{'s' if len(taken) != 1 else ''}{where} (CPUs {format_cpulist(cpus)}) of "
                      f"{self.reason or self.describe()}")
            out.append(Plan(cpus=cpus, mem_policy=policy, mem_nodes=mem, migrate=self.migrate, reason=reason,
                            weights=weights))
        return out

    # ------------------------------------------------------------- describing
    def describe(self) -> str:
        """One human line, e.g. ``cpus 0-3, memory bind 0``."""
        parts = [f"cpus {format_cpulist(self.cpus)}" if self.cpus is not None else "cpus unchanged"]
        if self.mem_policy is None:
            parts.append("memory unchanged")
        elif self.mem_nodes:
            parts.append(f"memory {self.mem_policy} {format_cpulist(self.mem_nodes)}"
                         + (f" (weights {format_weights(self.weights)})" if self.weights else ""))
        else:
            parts.append(f"memory {self.mem_policy}")
        if self.migrate:
            parts.append("migrate")
        return ", ".join(parts)

    def __str__(self) -> str:
        return f"Plan({self.describe()})"

    # ---------------------------------------------------------- numactl flags
    def to_numactl_argv(self) -> list[str]:
        """numactl options that apply this plan (``migrate`` has none); a :class:`PlanError` for the ``default``
        policy and for ``weights``, which numactl cannot express."""
        argv: list[str] = []
        if self.weights:
            raise PlanError(
                f"numactl has no option for interleave weights ({format_weights(self.weights)}): its "
                f"--weighted-interleave uses the system-wide weights in /sys/kernel/mm/mempolicy/weighted_interleave; "
                f"set them there (numabind run --set-weights, as root) and use plan.replace(weights=None)")
        if self.cpus is not None:
            argv.append(f"--physcpubind={format_cpulist(self.cpus)}")
        if self.mem_policy == "default":
            raise PlanError("numactl has no option for the default memory policy (a command started by numactl "
                            "inherits the caller's policy); apply this plan in-process with bind_current or "
                            "numabind run")
        if self.mem_policy == "local":
            argv.append("--localalloc")
        elif self.mem_policy in _NUMACTL_MEM_FLAG:
            argv.append(f"{_NUMACTL_MEM_FLAG[self.mem_policy]}={format_cpulist(self.mem_nodes or ())}")
        return argv

    def to_numactl_args(self) -> str:
        """The same as one string: ``"--physcpubind=0-1 --membind=0"``."""
        return " ".join(self.to_numactl_argv())

    @classmethod
    def from_numactl_args(
        cls, args: "str | Sequence[str]", topology: "MachineView | None" = None, *, migrate: bool = False,
        device_node: "Callable[[str], int] | None" = None, reason: str | None = None,
        within_affinity: bool = False,
    ) -> "Plan":
        """Build a plan from numactl options (``-C -N -m -p -P -i -w -l -a``, numabind's ``--weights``), lists read
        as libnuma reads them; ``device_node`` finds a device's node. See ``docs/plans.rst``, "From numactl's
        options"."""
        if isinstance(args, str):
            import shlex

            try:
                argv = shlex.split(args)
            except ValueError as exc:  # unbalanced quotes, a trailing backslash
                raise PlanError(f"numactl args {excerpt(args, escape=True)}: {exc}") from None
        else:
            argv = list(args)
            for tok in argv:
                if not isinstance(tok, str):
                    raise PlanError(f"numactl args must be strings, got {type(tok).__name__}: {tok!r}"[:300])
        opts = _parse_numactl_argv(argv)
        whole = "all" in opts
        limits = None if topology is None else Allowed.of(topology)
        if within_affinity:
            limits = Allowed.of(_need(topology, "within_affinity")).within_affinity()
        cpus = None
        said = ""
        if "physcpubind" in opts and "cpunodebind" in opts:
            raise PlanError("give either --physcpubind or --cpunodebind, not both")
        if "physcpubind" in opts:
            cpus = _resolve_ids(opts["physcpubind"], "--physcpubind", topology, "cpus", whole, device_node, limits)
            if limits is not None and not cpus <= limits.online_cpus:   # first: no -a brings a CPU the machine lacks
                raise PlanError(f"--physcpubind: {cpus_not_online(cpus - limits.online_cpus, limits.online_cpus)}")
            if limits is not None and not whole:
                check_affinity(cpus, limits)      # libnuma checks -C against Cpus_allowed, unless -a
        elif "cpunodebind" in opts:
            value = opts["cpunodebind"]
            nodes = _resolve_ids(value, "--cpunodebind", topology, "cpu-nodes", whole, device_node, limits)
            topo = _need(topology, "--cpunodebind")
            lim = limits if limits is not None else Allowed.of(topo)
            derived = value.startswith(("!", "+", "all"))     # a set numactl computes: memory-only nodes add nothing
            spanned: set[int] = set()
            for n in sorted(nodes):
                if n not in topo.nodes:
                    raise PlanError(f"--cpunodebind: node {n} does not exist (nodes: {format_cpulist(topo.nodes)})")
                if not topo.nodes[n].cpus and not derived:
                    raise PlanError(f"--cpunodebind: node {n} has no CPUs (a memory-only node); "
                                    f"it can only be a memory target")
                spanned |= topo.nodes[n].cpus
            if not spanned:
                raise PlanError(f"--cpunodebind={excerpt(value, escape=True)}: nodes {format_cpulist(nodes)} have no "
                                f"CPUs (memory-only nodes); they can only be a memory target")
            # numactl sets every CPU of the nodes and the kernel keeps those of the cpuset: so does the plan
            allowed = frozenset(spanned) & lim.allowed_cpus
            if not allowed:
                raise PlanError(f"--cpunodebind={format_cpulist(nodes)}: the nodes' CPUs {format_cpulist(spanned)} "
                                f"are all outside the CPUs this process may use ({format_cpulist(lim.allowed_cpus)}, "
                                f"from {lim.cpus_source}); pick another node or widen the cpuset")
            cpus = allowed
            said = f"node{'s' if len(nodes) > 1 else ''} {format_cpulist(nodes)}'s CPUs {format_cpulist(cpus)}"
        if cpus is not None and limits is not None and limits.inherited and not cpus <= (limits.affinity or cpus):
            said = f"inherited CPUs {format_cpulist(limits.affinity or ())} from the parent; binding " + (
                said or f"CPUs {format_cpulist(cpus)}")
        else:
            said = ""
        mem_policy: "MemPolicy | None" = None
        mem_nodes = None
        mem_opts = [k for k in _NUMACTL_MEM_OPTION if k in opts]
        if len(mem_opts) > 1:
            raise PlanError(f"a process has one memory policy, got {', '.join('--' + k for k in mem_opts)}: "
                            f"give one of them")
        if mem_opts:
            key = mem_opts[0]
            mem_policy = _NUMACTL_MEM_OPTION[key]
            if key != "localalloc":
                mem_nodes = _resolve_ids(opts[key], f"--{key}", topology, "mem-nodes", whole, device_node, limits)
        weights = None
        if "weights" in opts:
            if mem_policy != "weighted-interleave":
                raise PlanError("--weights goes with --weighted-interleave (-w)")
            weights = parse_weights(opts["weights"], "--weights")
        reason = f"numactl {' '.join(argv)}" if reason is None else reason
        return cls(cpus=cpus, mem_policy=mem_policy, mem_nodes=mem_nodes, migrate=migrate,
                   reason=f"{reason}; {said}" if said else reason, weights=weights)

    # ------------------------------------------------------------ text form
    def to_text(self) -> str:
        """Compact text form for the environment: ``v1;cpus=0-3;mem=bind:0;migrate=0[;weights=0:3,1:1]``."""
        cpus = format_cpulist(self.cpus) if self.cpus is not None else "-"
        mem = "-" if self.mem_policy is None else f"{self.mem_policy}:{format_cpulist(self.mem_nodes or ())}"
        text = f"{_TEXT_VERSION};cpus={cpus};mem={mem};migrate={int(self.migrate)}"
        return text + f";weights={format_weights(self.weights)}" if self.weights else text

    @classmethod
    def from_text(cls, text: str) -> "Plan":
        """Parse :meth:`to_text` output, strictly; anything else is a PlanError."""
        if not isinstance(text, str) or len(text) > _TEXT_MAX:
            raise PlanError("plan text must be a string of at most 64 KiB")
        m = _text_re().fullmatch(text)
        if m is None:
            raise PlanError(f"plan text {excerpt(text, escape=True)} is not of the form "
                            f"'v1;cpus=LIST|-;mem=POLICY:LIST|-;migrate=0|1[;weights=NODE:WEIGHT,...]'")
        cpus = None if m["cpus"] == "-" else parse_cpulist(m["cpus"], what="plan cpus")
        if m["mem"] == "-":
            policy = nodes = None
        else:
            policy, _, nodelist = m["mem"].partition(":")
            nodes = parse_cpulist(nodelist, what="plan mem nodes")
        weights = None if m["weights"] is None else parse_weights(m["weights"], "plan weights")
        return cls(cpus=cpus, mem_policy=policy, mem_nodes=nodes, migrate=m["migrate"] == "1", weights=weights)


_text_pattern: "list[Any]" = []


def _text_re() -> "Any":
    """The grammar of :meth:`Plan.to_text` (compiled on first use: ``re`` stays off the import path)."""
    if not _text_pattern:
        import re

        lst = r"[0-9,:/\-]+"
        _text_pattern.append(re.compile(
            rf"v1;cpus=(?P<cpus>-|{lst});mem=(?P<mem>-|(?:{'|'.join(map(re.escape, MEM_POLICIES))}):(?:{lst})?)"
            r";migrate=(?P<migrate>[01])(?:;weights=(?P<weights>[0-9]+:[0-9]+(?:,[0-9]+:[0-9]+)*))?"))
    return _text_pattern[0]

_PLAN_OPTIONS = (*BINDING, "all", "balancing", "weights")
_SHORT = {letter: name for letter, name in SHORT.items() if name in _PLAN_OPTIONS}   # not numactl's -c
_ALIASES = {"cpubind": ALIASES["cpubind"]}   # numactl's old spelling, which numactl still accepts
_LONG = set(_PLAN_OPTIONS) | set(_ALIASES)
_FLAGS = {name for name in _PLAN_OPTIONS if name in OPTIONS and not OPTIONS[name][1]}
_OPTIONS_SHOWN = ("--physcpubind, --cpunodebind, --membind, --preferred, --preferred-many, --interleave, "
                  "--weighted-interleave (with numabind's --weights), --localalloc or --all")


def _parse_numactl_argv(argv: list[str]) -> dict[str, str]:
    opts: dict[str, str] = {}
    k = 0
    while k < len(argv):
        tok = argv[k]
        k += 1
        if tok.startswith("--"):
            name, eq, value = tok[2:].partition("=")
        elif tok.startswith("-") and len(tok) >= 2:
            name, value, eq = _SHORT.get(tok[1], "?" + tok), tok[2:], ""
            if value:
                eq = "="
        else:
            raise PlanError(f"unexpected {excerpt(tok, escape=True)} among numactl-style options; a plan takes "
                            f"options only, not a command")
        if name not in _LONG:
            raise PlanError(f"option {excerpt(tok, escape=True)} is not supported; use {_OPTIONS_SHOWN}")
        name = _ALIASES.get(name, name)
        if name == "balancing":
            raise PlanError(
                f"{excerpt(tok, escape=True)}: NUMA balancing is a flag of the memory policy, which a Plan does not "
                f"carry; `numabind run --balancing --membind N -- command` applies it")
        if name in opts:
            raise PlanError(f"--{name} given twice")
        if name in _FLAGS:
            if eq:
                raise PlanError(f"--{name} takes no value")
            opts[name] = ""
            continue
        if not eq:
            if k >= len(argv):
                raise PlanError(f"--{name} needs a value")
            value = argv[k]
            k += 1
        if not value:
            raise PlanError(f"--{name} has an empty value")
        opts[name] = value
    return opts


def plannable_policy(policy: str | None) -> "MemPolicy | None":
    """``policy`` if a Plan can carry it (kernels newer than numabind have more modes), else None."""
    return next((known for known in MEM_POLICIES if known == policy), None)


def read_back_plan(cpus: frozenset[int] | None, policy: str | None, nodes: frozenset[int] | None,
                   weights: "Any" = None) -> Plan:
    """A Plan of what the kernel returned (already valid ids: built without checking them again)."""
    plan = object.__new__(Plan)
    s = object.__setattr__
    s(plan, "cpus", cpus)
    s(plan, "mem_policy", policy)
    s(plan, "mem_nodes", None if policy is None else (frozenset() if policy in _NODELESS else nodes))
    s(plan, "migrate", False)
    s(plan, "reason", "read back from the kernel")
    s(plan, "weights", weights if policy == "weighted-interleave" else None)
    return plan


def _need(topology: "MachineView | None", what: str) -> "MachineView":
    if topology is None:
        raise PlanError(f"{what} needs a topology to resolve node ids, 'all', '!' or '+'; pass topology=discover()")
    return topology


#: numactl's device specifiers in node lists (its ``ip:HOST`` needs a route lookup numabind does not do).
DEVICE_SPECIFIERS = ("pci:", "netdev:", "block:", "file:")


def _device(value: str, flag: str, kind: str, device_node: "Callable[[str], int] | None") -> frozenset[int] | None:
    """The node of a device specifier (``pci:``, ``netdev:``, ``block:``, ``file:``), or None for a plain list."""
    if value.startswith("ip:"):
        raise PlanError(f"{flag}={excerpt(value, escape=True)}: numabind does not look up routes (numactl's ip:HOST); "
                        f"name the interface instead, e.g. {flag}=netdev:eth0")
    if not value.startswith(DEVICE_SPECIFIERS):
        return None
    if kind == "cpus":
        use = value if len(value) <= EXCERPT and value.isprintable() else "<the device>"
        raise PlanError(f"{flag}={excerpt(value, escape=True)}: a device sits on a node, not on CPUs; use "
                        f"--cpunodebind={use} for the CPUs of its node")
    if device_node is None:
        raise PlanError(f"{flag}={excerpt(value, escape=True)} names a device, and finding its node reads sysfs; pass "
                        f"device_node=numabind.iodevices.DeviceNodes().node_of (numabind run does)")
    return frozenset({device_node(value)})


def _resolve_ids(value: str, flag: str, topology: "MachineView | None", kind: str, whole: bool = False,
                 device_node: "Callable[[str], int] | None" = None,
                 limits: "Allowed | None" = None) -> frozenset[int]:
    """Resolve a numactl list value ('all', '!list', '+list', a plain list or a device specifier) in libnuma's
    sets: the affinity within the cpuset, ``Mems_allowed``; the whole machine with ``whole`` (``--all``)."""
    shown = value
    negate = value.startswith("!")
    if negate:
        value = value[1:]
    device = _device(value, flag, kind, device_node)
    relative = device is None and value.startswith("+")
    if relative:
        value = value[1:]
    def universe_of(t: "MachineView") -> frozenset[int]:
        lim = limits if limits is not None else Allowed.of(t)
        if kind == "cpus":
            if whole:
                return lim.online_cpus
            return lim.allowed_cpus & lim.affinity if lim.affinity is not None else lim.allowed_cpus
        if kind == "cpu-nodes":
            # libnuma's numa_parse_nodestring: Mems_allowed (so a CPU-only node is not in 'all' or '+N'),
            # every node under --all
            return frozenset(t.nodes) if whole else lim.allowed_nodes
        if whole:
            return frozenset(n for n, node in t.nodes.items() if node.has_memory)
        return lim.allowed_nodes

    if device is not None:
        ids = device
    elif value == "all":
        if relative:
            raise PlanError(f"{flag}: '+all' is not a list")
        ids = universe_of(_need(topology, flag))
    else:
        ids = parse_cpulist(value, what=flag, strides=False)    # numactl's lists: no 'N-M:used/group'
        if relative:
            universe = sorted(universe_of(_need(topology, flag)))
            if ids and max(ids) >= len(universe):      # set operations in C: the work is not one step per id
                beyond = ids - frozenset(range(len(universe)))
                raise PlanError(
                    f"{flag}: relative ids {min(beyond)}" + (f" and {len(beyond) - 1} more" if len(beyond) > 1 else "")
                    + f" exceed the {len(universe)} allowed entries ({format_cpulist(universe)})"
                )
            ids = frozenset(map(universe.__getitem__, ids))
    if negate:
        ids = universe_of(_need(topology, flag)) - ids
    if kind == "cpus" and whole and device is None and (negate or relative or value == "all"):
        ids = ids & (limits or Allowed.of(_need(topology, flag))).allowed_cpus    # what the kernel keeps of them
    if not ids:
        raise PlanError(f"{flag}={excerpt(shown, escape=True)} selects nothing")
    return frozenset(ids)
