"""The machine an hwloc XML file describes, as a kernel would show it: the :class:`~numabind._facts.Facts` of its
CPUs, cores, packages, caches, NUMA nodes, distances, memory attributes, CPU kinds and allowed sets
(docs/discovery.rst, "hwloc XML")."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .._base import getLogger
from .._facts import Facts, NodeFacts
from ..cpulist import format_cpulist
from ..plan import Allowed
from .parse import REEXPORT, Extra, Obj, Reader, bitmap, fail, int_attr, obj_bitmap, shown

log = getLogger("numabind._hwloc_xml")     # the package's logger: the name a warning is printed with

_BITMAPS = ("cpuset", "complete_cpuset", "online_cpuset", "allowed_cpuset", "nodeset", "complete_nodeset",
            "allowed_nodeset")
_CACHE_TYPES = {"0": "Unified", "1": "Data", "2": "Instruction"}
_V2_CACHES = {f"L{n}Cache": n for n in range(1, 6)} | {f"L{n}iCache": n for n in range(1, 4)}
#: hwloc subtypes of NUMA nodes that are memory tiers (never a CPU's home node when another node holds it).
_TIERS = ("MCDRAM", "HBM", "GPUMemory", "NVM", "SPM", "CXL")
_NONE: frozenset[int] = frozenset()


def _by_os_index(path: str, objs: list[Obj], kind: str) -> dict[int, int]:
    """os_index -> position of each object of type ``kind`` (a second one of an index is refused)."""
    found: dict[int, int] = {}
    for pos, obj in enumerate(objs):
        if obj.type == kind:
            index = int_attr(path, obj, "os_index", required=True)
            assert index is not None
            if index in found:
                raise fail(path, obj.line, f"a second {kind} with os_index {index} (the first is on line "
                           f"{objs[found[index]].line})", REEXPORT)
            found[index] = pos
    return found


def read_machine(path: str, r: Reader) -> tuple[Facts, bool]:
    """The facts of the file ``path`` that ``r`` parsed, and whether it has NUMANode objects."""
    objs = r.objects
    root = objs[0]
    for obj in objs:                # every bitmap is checked, those numabind does not use too
        for name in _BITMAPS:
            if name in obj.attrs:
                obj_bitmap(path, obj, name)

    pus = _by_os_index(path, objs, "PU")            # os index -> object position
    if not pus:
        raise fail(path, root.line, "no PU object: numabind needs the machine's CPUs", REEXPORT)
    online = frozenset(pus)
    complete = obj_bitmap(path, root, "complete_cpuset")
    pu_at = {pos: cpu for cpu, pos in pus.items()}

    # every set below is made once (per object, or per bitmap text) and shared: else reading is quadratic
    of_text: dict[str, frozenset[int]] = {}         # cpuset text -> its PUs
    held: dict[int, frozenset[int]] = {}            # object position -> below(it)
    under: dict[int, frozenset[int]] = {}           # object position -> the PU objects in its subtree

    def pus_under(pos: int) -> frozenset[int]:
        """The PU objects in the subtree of ``pos`` (one post-order pass)."""
        if pos in under:
            return under[pos]
        order: list[int] = []
        todo = [pos]
        while todo:
            p = todo.pop()
            if p not in under:
                order.append(p)
                todo.extend(objs[p].children)
        for p in reversed(order):                   # descendants before their ancestors
            parts = [under[c] for c in objs[p].children if under[c]]
            if p in pu_at:
                parts.append(frozenset({pu_at[p]}))
            under[p] = (_NONE if not parts else parts[0] if len(parts) == 1 else frozenset().union(*parts))
        return under[pos]

    def below(pos: int) -> frozenset[int]:
        """The PUs an object holds: its cpuset within the PUs (the PU objects below it where it has none)."""
        found = held.get(pos)
        if found is None:
            obj = objs[pos]
            text = obj.attrs.get("cpuset")
            if text is None:
                found = pus_under(pos)
            else:
                found = of_text.get(text)
                if found is None:
                    found = of_text[text] = bitmap(path, obj.line, "cpuset", text).within(online)
            held[pos] = found
        return found

    cores, caches = _cores_and_caches(path, objs, pus, below)
    node_objs = _by_os_index(path, objs, "NUMANode")
    nodes = _nodes(path, objs, node_objs, online, below)
    node_ids = frozenset(nodes)
    complete_nodes = obj_bitmap(path, root, "complete_nodeset")
    possible_nodes = node_ids | (complete_nodes.ids if complete_nodes is not None and node_objs else frozenset())
    distances = _distances(path, r, node_objs, node_ids)
    access = _memory_access(path, r, nodes, online, below) if r.memattrs else {}
    info = _cpu_info(objs, pus)
    x86 = bool(info.get("CPUVendor") and info.get("CPUFamilyNumber"))
    hybrid, capacities = _cpu_kinds(path, r, online, cores, x86) if r.cpukinds else (None, {})

    allowed = obj_bitmap(path, root, "allowed_cpuset")
    allowed_nodes = obj_bitmap(path, root, "allowed_nodeset") if node_objs else None
    facts = Facts(
        online_cpus=online,
        possible_cpus=online | (complete.ids if complete is not None else frozenset()),
        online_nodes=node_ids,
        possible_nodes=possible_nodes,
        nodes={nid: NodeFacts(cpus, memory >> 10 << 10,     # the kernel says kB
                              {o: distances[nid][o] for o in sorted(nodes)} if distances else {}, access.get(nid))
               for nid, (cpus, memory) in sorted(nodes.items())},
        cores=cores,
        allowed=_allowed(online, online if allowed is None else allowed.within(online), nodes,
                         node_ids if allowed_nodes is None else allowed_nodes.within(node_ids)),
        capacities=capacities,
        hybrid_pmus=hybrid,
        caches=caches,
        model_name=info.get("CPUModel", "").strip() or None)
    return facts, bool(node_objs)


def _cores_and_caches(path: str, objs: list[Obj], pus: Mapping[int, int], below: Callable[[int], frozenset[int]]
                      ) -> tuple[dict[int, tuple[int, int, frozenset[int]]],
                                 dict[tuple[int, str, frozenset[int]], int | None]]:
    """Each PU's (package, core, the core's PUs) and the distinct caches, by each PU's ancestors (an object's PUs:
    its cpuset and the PUs below it that the cpuset misses)."""
    ids: dict[int, int | None] = {}                                 # core/package position -> os_index
    cache_of: dict[int, tuple[int, str, int | None]] = {}            # cache position -> (level, type, size)
    missed: dict[int, list[int]] = {}                               # position -> PUs below it, not in its cpuset
    chains: list[tuple[int, int, int, list[int]]] = []              # (PU, core or -1, package or -1, caches)
    for cpu, pos in pus.items():
        core_pos = package_pos = -1
        above: list[int] = []
        up = objs[pos].parent
        while up >= 0:
            o = objs[up]
            if o.type == "Core" and core_pos < 0:
                core_pos = up
                ids[up] = int_attr(path, o, "os_index", cap=None)
            elif o.type in ("Package", "Socket") and package_pos < 0:
                package_pos = up
                ids[up] = int_attr(path, o, "os_index", cap=None)
            elif o.type in _V2_CACHES or o.type == "Cache":
                if up not in cache_of:
                    level = int_attr(path, o, "depth", cap=None) if "depth" in o.attrs else _V2_CACHES.get(o.type)
                    kind = _CACHE_TYPES.get(o.attrs.get("cache_type", "0"))
                    if o.type.endswith("iCache"):
                        kind = "Instruction"
                    if level is None or kind is None:
                        raise fail(path, o.line, f"a {o.type} without a level (depth) or with cache_type="
                                   f"{shown(o.attrs.get('cache_type', ''))}", REEXPORT)
                    cache_of[up] = (level, kind, int_attr(path, o, "cache_size", cap=None))
                above.append(up)
            else:
                up = o.parent
                continue
            if cpu not in below(up):
                missed.setdefault(up, []).append(cpu)
            up = o.parent
        chains.append((cpu, core_pos, package_pos, above))
    spans: dict[int, frozenset[int]] = {}

    def span(up: int) -> frozenset[int]:
        found = spans.get(up)
        if found is None:
            more = missed.get(up)
            found = spans[up] = below(up) | frozenset(more) if more else below(up)
        return found

    caches: dict[tuple[int, str, frozenset[int]], int | None] = {}
    of_pu: dict[int, tuple[int, int]] = {}                         # PU -> (its core, its package) or -1
    for cpu, core_pos, package_pos, above in chains:
        of_pu[cpu] = (core_pos, package_pos)
        for up in above:
            level, kind, size = cache_of[up]
            caches.setdefault((level, kind, span(up)), size)
    # as the kernel shows them: the threads of a core (and the PUs of a package) say the same, the first's
    cores: dict[int, tuple[int, int, frozenset[int]]] = {}
    package_of: dict[int, int] = {}
    for cpu in sorted(of_pu):
        if cpu in cores:
            continue
        core_pos, package_pos = of_pu[cpu]
        package = package_of.get(cpu)
        if package is None:
            found = ids[package_pos] if package_pos >= 0 else None
            package = -1 if found is None else found
            for pu in span(package_pos) if package_pos >= 0 else ():
                package_of.setdefault(pu, package)
        core = ids[core_pos] if core_pos >= 0 else None
        info = (package, -1 if core is None else core, span(core_pos) if core_pos >= 0 else frozenset({cpu}))
        for pu in info[2]:
            cores.setdefault(pu, info)
    return cores, caches


def _nodes(path: str, objs: list[Obj], node_objs: Mapping[int, int], online: frozenset[int],
           below: Callable[[int], frozenset[int]]) -> dict[int, tuple[frozenset[int], int]]:
    """Each NUMA node's home PUs and memory. hwloc gives a CPU-less node the cpuset of its locality: a CPU's home is
    the best node holding it (not a tier, then the most local, then the lowest id)."""
    if not node_objs:
        memory = int_attr(path, objs[0], "local_memory", cap=None) or 0
        log.debug("hwloc XML %s has no NUMANode: one node 0 with every PU and %d bytes", path, memory)
        return {0: (online, memory)}
    locality = {nid: below(pos) for nid, pos in node_objs.items()}
    # the nodes best first, each giving the CPUs no better one took, until every CPU has one
    best_first = sorted(locality, key=lambda n: (_is_tier(objs[node_objs[n]]), len(locality[n]), n))
    homes: dict[int, int] = {}
    done: set[int] = set()                  # localities (by identity) already given out
    for nid in best_first:
        cpus = locality[nid]
        if id(cpus) in done:
            continue                        # a node after another of the same set: none left for it
        done.add(id(cpus))
        for cpu in cpus:
            homes.setdefault(cpu, nid)
        if len(homes) == len(online):
            break
    mine_of: dict[int, list[int]] = {}
    for cpu, nid in homes.items():
        mine_of.setdefault(nid, []).append(cpu)
    unhomed = online - frozenset(homes)
    if unhomed:
        log.warning("hwloc XML %s: no NUMA node holds PUs %s; they are in no node", path, format_cpulist(unhomed))
    return {nid: (frozenset(mine_of.get(nid, ())), int_attr(path, objs[pos], "local_memory", cap=None) or 0)
            for nid, pos in sorted(node_objs.items())}


def _is_tier(obj: Obj) -> bool:
    subtype = obj.attrs.get("subtype") or obj.infos.get("Type") or ""
    return subtype.startswith(_TIERS)


def _allowed(online: frozenset[int], cpus: frozenset[int], nodes: Mapping[int, tuple[frozenset[int], int]],
             mems: frozenset[int]) -> Allowed:
    """What the exported process could use: its status's, and a root cgroup v2 cpuset where that is not the whole
    machine (an XML exported inside a cpuset)."""
    ids = frozenset(nodes)
    cpus_source, nodes_source = "online", "status"
    if cpus != online or mems != ids:
        cpus_source, nodes_source = "cgroup2:/", "status+cgroup2:/"
        if not cpus:      # a cpuset of no online CPU: the kernel would refuse all
            cpus_source = f"online (the cpuset {cpus_source} holds no online CPU)"
    return Allowed(online_cpus=online, allowed_cpus=cpus or online, cpus_source=cpus_source, nodes=ids,
                   memory_nodes=frozenset(n for n, (_c, memory) in nodes.items() if memory >> 10),
                   allowed_nodes=mems, nodes_source=nodes_source, affinity=cpus)


def _cpu_info(objs: list[Obj], pus: Mapping[int, int]) -> dict[str, str]:
    """The CPU's vendor, family and model: the infos of the first PU's package, over the root's."""
    up = objs[min(pus.values())].parent
    while up >= 0 and objs[up].type not in ("Package", "Socket"):
        up = objs[up].parent
    infos = dict(objs[0].infos)
    if up >= 0:
        infos.update(objs[up].infos)
    return {k: infos[k] for k in ("CPUVendor", "CPUFamilyNumber", "CPUModel") if infos.get(k)}


def _distances(path: str, r: Reader, node_objs: Mapping[int, int], node_ids: frozenset[int]
               ) -> dict[int, dict[int, int]]:
    """The NUMA latency matrix (docs/discovery.rst), as {node: {node: distance}}; {} when the file has none."""
    objs = r.objects
    gp_to_node = {objs[pos].attrs.get("gp_index"): nid for nid, pos in node_objs.items()}
    found: list[tuple[str | None, int, list[int], list[int]]] = []   # (name, line, node ids, values)
    for m in r.matrices:
        a = m.attrs
        if a["element"] == "distances2":
            if a.get("type") != "NUMANode":
                continue
            kind = a.get("kind", "")
            if kind.isascii() and kind.isdigit() and len(kind) < 6 and int(kind) & 8:
                continue                                 # HWLOC_DISTANCES_KIND_MEANS_BANDWIDTH
            n = _count(path, m.line, a.get("nbobjs"))
            if len(m.indexes) != n or len(m.values) != n * n:
                raise fail(path, m.line, f"distances2 of {n} objects lists {len(m.indexes)} indexes and "
                           f"{len(m.values)} values (expected {n} and {n * n})", REEXPORT)
            ids: list[int] = []
            for text in m.indexes:
                if a.get("indexing", "os") == "gp":
                    nid = gp_to_node.get(text)
                else:
                    nid = int(text) if text.isascii() and text.isdigit() and len(text) <= 6 else None
                if nid is None or nid not in node_ids:
                    raise fail(path, m.line, f"distances2 names NUMA node {shown(text)}, which the file does "
                               f"not hold", REEXPORT)
                ids.append(nid)
            values = [_distance(path, m.line, v) for v in m.values]
            found.append((a.get("name"), m.line, ids, values))
        else:
            # v1: hwloc 2 takes a matrix of as many objects as there are NUMA nodes for the nodes, in their
            # logical (document) order, whatever its relative_depth says (hwloc 2's own v1 export writes the
            # node matrix at the depth of the level below the nodes).
            n = _count(path, m.line, a.get("nbobjs"))
            if n != len(node_objs) or not n:
                continue
            if len(m.latencies) != n * n:
                raise fail(path, m.line, f"distances of {n} objects lists {len(m.latencies)} latencies "
                           f"(expected {n * n})", REEXPORT)
            at = sorted(node_objs.values())
            base = _float(path, m.line, a.get("latency_base", "1"))
            ids = [int(objs[p].attrs["os_index"]) for p in at]
            values = [_distance(path, line, str(round(_float(path, line, v) * base))) for v, line in m.latencies]
            found.append((None, m.line, ids, values))
    if not found:
        return {}
    slit = [f for f in found if all(f[3][i * len(f[2]) + i] == 10 for i in range(len(f[2])))]
    chosen = next((f for f in found if f[0] == "NUMALatency"), None) or (slit or found)[0]
    _name, line, ids, values = chosen
    n = len(ids)
    if set(ids) != node_ids or len(set(ids)) != n:
        log.warning("hwloc XML %s, line %d: the latency matrix covers nodes %s, not every node (%s); the nodes "
                    "get no distances", path, line, format_cpulist(ids), format_cpulist(node_ids))
        return {}
    return {a: {b: values[i * n + j] for j, b in enumerate(ids)} for i, a in enumerate(ids)}


#: hwloc's memory attributes that the kernel's HMAT figures are (hwloc's Linux backend reads them from there):
#: name -> (the figures it gives, whether higher is better). A ``Read``/``Write`` one overrides the plain one.
_MEMATTRS = {"Bandwidth": (("read_bandwidth", "write_bandwidth"), True),
             "ReadBandwidth": (("read_bandwidth",), True), "WriteBandwidth": (("write_bandwidth",), True),
             "Latency": (("read_latency", "write_latency"), False),
             "ReadLatency": (("read_latency",), False), "WriteLatency": (("write_latency",), False)}
#: The order in which the kernel narrows a target's best initiators (drivers/acpi/numa/hmat.c).
_FIGURES = ("write_latency", "read_latency", "write_bandwidth", "read_bandwidth")


def _memory_access(path: str, r: Reader, nodes: Mapping[int, tuple[frozenset[int], int]], online: frozenset[int],
                   below: Callable[[int], frozenset[int]]) -> dict[int, tuple[dict[str, int | None], frozenset[int]]]:
    """The HMAT view of the XML's memory attributes: per target node, its best figures and the initiator nodes
    that reach them (docs/discovery.rst)."""
    objs = r.objects
    gp_of = {o.attrs["gp_index"]: pos for pos, o in enumerate(objs) if "gp_index" in o.attrs}
    home = {cpu: nid for nid, (cpus, _m) in nodes.items() for cpu in cpus}
    # initiator (its cpuset text, or its object) -> the nodes whose CPUs it holds some of: once each
    nodes_of: dict[str | int, list[int]] = {}
    # figure -> target -> initiator node -> value, from the plain attribute and from the Read/Write one
    found: dict[tuple[str, bool], dict[int, dict[int, int]]] = {}
    for attr in r.memattrs:
        kind = _MEMATTRS.get(attr.attrs.get("name", ""))
        if kind is None:
            continue                    # Capacity, Locality and user attributes: no kernel file
        figures, higher = kind
        specific = len(figures) == 1
        for values, line in attr.values:
            if values.get("target_obj_type") != "NUMANode":
                continue
            target_pos = gp_of.get(values.get("target_obj_gp_index", ""))
            if target_pos is None or objs[target_pos].type != "NUMANode":
                log.warning("hwloc XML %s, line %d: a %s value for target gp_index %s, which is no NUMA node of "
                            "the file; ignored", path, line, attr.attrs["name"],
                            shown(values.get("target_obj_gp_index", "")))
                continue
            target = int(objs[target_pos].attrs["os_index"])
            text = values.get("value", "")
            if not text.isascii() or not text.isdigit() or len(text) > 19:
                raise fail(path, line, f"{attr.attrs['name']} value={shown(text)} is not a non-negative "
                           f"integer", REEXPORT)
            value = int(text)
            key: str | int | None = values.get("initiator_cpuset")
            if key is None:
                key = gp_of.get(values.get("initiator_obj_gp_index", ""))
                if key is None:
                    log.debug("hwloc XML %s, line %d: a %s value without an initiator the file holds; ignored",
                              path, line, attr.attrs["name"])
                    continue
            initiators = nodes_of.get(key)
            if initiators is None:
                cpus = (below(key) if isinstance(key, int)
                        else bitmap(path, line, "initiator_cpuset", key).within(online))
                initiators = nodes_of[key] = sorted({home[c] for c in cpus if c in home})
            if not value or not initiators:
                continue                # the kernel shows no 0, and only nodes as initiators
            for figure in figures:
                per = found.setdefault((figure, specific), {}).setdefault(target, {})
                for n in initiators:
                    old = per.get(n)
                    per[n] = value if old is None else (max if higher else min)(old, value)
    out: dict[int, tuple[dict[str, int | None], frozenset[int]]] = {}
    for target in sorted({t for per in found.values() for t in per}):
        by_figure = {f: found.get((f, True), {}).get(target) or found.get((f, False), {}).get(target) or {}
                     for f in _FIGURES}
        candidates = set().union(*by_figure.values())
        best_of: dict[str, int | None] = {}
        for figure in _FIGURES:          # as the kernel: each figure narrows the initiators to its best
            values_of = {n: v for n, v in by_figure[figure].items() if n in candidates}
            if not values_of:
                continue
            best = (max if figure.endswith("bandwidth") else min)(values_of.values())
            best_of[figure] = best
            candidates = {n for n, v in values_of.items() if v == best}
        if best_of:
            out[target] = (best_of, frozenset(candidates))
    return out


#: hwloc's ``CoreType`` of the kinds the kernel lists in ``sys/devices/cpu_core`` and ``cpu_atom``.
_INTEL_TYPES = {"IntelCore": 0, "IntelAtom": 1}
#: The kernel's ``cpu_capacity`` of the most capable CPUs.
_CAPACITY_SCALE = 1024


def _cpu_kinds(path: str, r: Reader, online: frozenset[int], cores: Mapping[int, tuple[int, int, frozenset[int]]],
               x86: bool) -> tuple[tuple[frozenset[int], frozenset[int]] | None, dict[int, int]]:
    """What the kernel shows of the XML's CPU kinds (docs/discovery.rst): an Intel hybrid CPU's PMU lists, or each
    CPU's ``cpu_capacity`` (none on x86; a core's threads take its first thread's)."""
    kinds: list[tuple[frozenset[int], Extra]] = []
    for kind in r.cpukinds:
        text = kind.attrs.get("cpuset")
        if text is None:
            raise fail(path, kind.line, "a cpukind without a cpuset", REEXPORT)
        cpus = bitmap(path, kind.line, "cpuset", text).within(online)
        if cpus:
            kinds.append((cpus, kind))
    if not kinds:
        return None, {}
    types = {k.infos.get("CoreType") for _c, k in kinds}
    if types <= set(_INTEL_TYPES) and len(types) == 2:
        p_cpus = frozenset().union(*(c for c, k in kinds if k.infos["CoreType"] == "IntelCore"))
        return (p_cpus, frozenset().union(*(c for c, k in kinds)) - p_cpus), {}
    capacities = [_kind_number(path, k, "LinuxCapacity", k.infos.get("LinuxCapacity")) for _c, k in kinds]
    if all(c is not None for c in capacities):
        ranks: list[int] = [c for c in capacities if c is not None]
    elif len(kinds) < 2:
        return None, {}                 # one kind, not hybrid: the kernel says nothing of it
    else:
        forced = [_kind_number(path, k, "forced_efficiency", k.attrs.get("forced_efficiency")) for _c, k in kinds]
        order: list[int] = ([f for f in forced if f is not None] if all(f is not None for f in forced)
                            else list(range(len(kinds))))     # hwloc writes the kinds least efficient first
        levels = {o: k for k, o in enumerate(sorted(set(order)))}
        ranks = [_CAPACITY_SCALE * (levels[o] + 1) // len(levels) for o in order]
    if x86:
        return None, {}                 # x86 kernels write no cpu_capacity
    of_cpu: dict[int, int] = {}
    for (cpus, _k), capacity in zip(kinds, ranks):
        for cpu in cpus:
            of_cpu.setdefault(cpu, capacity)
    out: dict[int, int] = {}
    for cpu in sorted(online):          # per core, its first thread's (the kernel writes it for all or none)
        if cpu not in out:
            first = of_cpu.get(cpu)
            if first is None:
                break
            for thread in cores[cpu][2] | {cpu}:
                out.setdefault(thread, first)
    return None, out


def _kind_number(path: str, kind: Extra, name: str, text: str | None) -> int | None:
    if text is None:
        return None
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        raise fail(path, kind.line, f"cpukind {name}={shown(text)} is not a non-negative integer", REEXPORT)
    return int(text)


def _count(path: str, line: int, text: str | None) -> int:
    if text is None or not text.isascii() or not text.isdigit() or len(text) > 6:
        raise fail(path, line, f"a distance matrix size {shown(text or '')} that is not a count", REEXPORT)
    return int(text)


def _float(path: str, line: int, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1e12 or len(text) > 40:
        raise fail(path, line, f"latency {shown(text)} is not a non-negative number", REEXPORT)
    return value


def _distance(path: str, line: int, text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        raise fail(path, line, f"distance {shown(text)} is not an integer of at most 9 digits (the kernel's "
                   f"SLIT distances are below 256)", REEXPORT)
    return int(text)
