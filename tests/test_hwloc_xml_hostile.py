"""Issue 41: the hwloc XML reader under hostile-but-valid files.

* Cost: reading a file is linear in its size, in time and in memory. The generator below writes big files
  hwloc could have written (thousands of PUs, cores with their caches, many NUMA nodes, PCI devices behind
  chains of bridges, OS devices with infos); the tests bound the reader's peak memory by a multiple of the file's
  size and check that a file four times bigger costs about four times as much (tracemalloc: no timed assertion;
  ``python -m bench``, P10, gives the times and the memory per MB).
* Text: every string a replayed file supplies that numabind prints (the CPU model, GPU and OS device names, PCI
  strings, infos) reaches the terminal without a control or format character.
* Encodings: whatever the XML declaration says, and whatever the bytes are, discovery gives numabind's one-line
  error naming the file and the line, never a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numabind import _hwloc_xml
from numabind.errors import NumabindError
from numabind.topology import discover

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------- the generator

def _bitmap(ids: list[int] | range, *, short: bool = False) -> str:
    """hwloc's bitmap text of ``ids`` (32-bit words, most significant first: ``0x00000001,0x00000000``);
    ``short`` writes zero words empty (``0x1,,``), which hwloc reads too."""
    values = sorted(ids)
    if not values:
        return "0x0"
    words = [0] * (values[-1] // 32 + 1)
    for i in values:
        words[i // 32] |= 1 << (i % 32)
    out = [f"0x{words[-1]:x}"]
    for w in reversed(words[:-1]):
        out.append("" if short and not w else f"0x{w:08x}")
    return ",".join(out)


def hostile_xml(*, packages: int = 2, nodes_per_package: int = 2, cores_per_node: int = 16, threads: int = 2,
                gpus_per_node: int = 1, nics_per_node: int = 1, bridge_depth: int = 3, spread: int = 1,
                short: bool = True, bare: bool = False, text: str = "") -> str:
    """hwloc 2 XML of a big machine, valid and read by hwloc, built to cost the most per byte: packages of
    sub-NUMA groups, each with an L3, and cores with L2/L1d/L1i and ``threads`` PUs; every object with its
    cpusets and nodesets; behind each group, ``gpus_per_node`` NVIDIA GPUs (with cuda/nvml OS devices) and
    ``nics_per_node`` NICs (with net/OpenFabrics OS devices), each under a chain of ``bridge_depth`` bridges.
    PU ids are spread ``spread`` apart (sparse ids make every bitmap and list longer); ``short`` writes zero
    words of bitmaps empty; ``bare`` leaves the sets out below the L3 (cores, their caches and PUs: numabind
    takes the PU objects below, so every PU costs a few dozen bytes); ``text`` is put into every string numabind
    keeps (CPU model, GPU names, infos)."""
    gp = [0]

    def gpi() -> int:
        gp[0] += 1
        return gp[0]

    nodes = packages * nodes_per_package
    per_node = cores_per_node * threads
    all_pus = [k * spread for k in range(nodes * per_node)]

    def sets(cpus: list[int] | range, nids: list[int] | range, inner: bool = False) -> str:
        if inner and bare:
            return ""
        c, n = _bitmap(cpus, short=short), _bitmap(nids, short=short)
        return f'cpuset="{c}" complete_cpuset="{c}" nodeset="{n}" complete_nodeset="{n}"'

    out = ['<?xml version="1.0" encoding="UTF-8"?>', '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
           '<topology version="2.0">',
           f'<object type="Machine" os_index="0" {sets(all_pus, range(nodes))} '
           f'allowed_cpuset="{_bitmap(all_pus, short=short)}" allowed_nodeset="{_bitmap(range(nodes), short=short)}" '
           f'gp_index="{gpi()}">',
           f'<info name="DMIProductName" value="Hostile{text}"/><info name="OSName" value="Linux{text}"/>']
    bus = 0
    for p in range(packages):
        pnodes = list(range(p * nodes_per_package, (p + 1) * nodes_per_package))
        ppus = [c for c in all_pus if c // spread // per_node in pnodes]
        out.append(f'<object type="Package" os_index="{p}" {sets(ppus, pnodes)} gp_index="{gpi()}">')
        out.append(f'<info name="CPUVendor" value="GenuineIntel"/><info name="CPUFamilyNumber" value="6"/>'
                   f'<info name="CPUModel" value="Hostile(R) CPU {text}"/>')
        for n in pnodes:
            npus = all_pus[n * per_node:(n + 1) * per_node]
            out.append(f'<object type="Group" {sets(npus, [n])} gp_index="{gpi()}" kind="1001" subkind="0">')
            out.append(f'<object type="NUMANode" os_index="{n}" {sets(npus, [n])} gp_index="{gpi()}" '
                       f'local_memory="{(n + 1) << 30}"/>')
            out.append(f'<object type="L3Cache" {sets(npus, [n])} gp_index="{gpi()}" cache_size="33554432" '
                       f'depth="3" cache_linesize="64" cache_associativity="16" cache_type="0">')
            for c in range(cores_per_node):
                cpus = npus[c * threads:(c + 1) * threads]
                core = n * cores_per_node + c
                for level, kind, ctype in ((2, "L2Cache", 0), (1, "L1Cache", 1), (1, "L1iCache", 2)):
                    out.append(f'<object type="{kind}" {sets(cpus, [n], True)} gp_index="{gpi()}" cache_size="65536" '
                               f'depth="{level}" cache_linesize="64" cache_associativity="8" '
                               f'cache_type="{ctype}">')
                out.append(f'<object type="Core" os_index="{core}" {sets(cpus, [n], True)} gp_index="{gpi()}">')
                for cpu in cpus:
                    out.append(f'<object type="PU" os_index="{cpu}" {sets([cpu], [n], True)} gp_index="{gpi()}"/>')
                out.append("</object></object></object></object>")
            out.append("</object>")                         # the L3
            for d in range(gpus_per_node + nics_per_node):
                bus += 1
                for k in range(bridge_depth):
                    out.append(f'<object type="Bridge" gp_index="{gpi()}" bridge_type="{1 if k else 0}-1" '
                               f'depth="{k}" bridge_pci="0000:[{bus:02x}-{bus:02x}]"'
                               + (f' pci_busid="0000:{bus:02x}:{k:02x}.0" pci_type="0604 [8086:2030] '
                                  f'[0000:0000] 04" pci_link_speed="8.0"' if k else "") + ">")
                if d < gpus_per_node:
                    address = f"{bus // 256:04x}:{bus % 256:02x}:00.0"
                    index = n * gpus_per_node + d
                    out.append(f'<object type="PCIDev" gp_index="{gpi()}" pci_busid="{address}" '
                               f'pci_type="0302 [10de:20b0] [10de:134f] a1" pci_link_speed="31.5">'
                               f'<info name="PCIVendor" value="NVIDIA Corporation{text}"/>'
                               f'<info name="PCIDevice" value="GA100 [A100 SXM4 40GB]{text}"/>')
                    for kind, osdev in (("cuda", 5), ("nvml", 5)):
                        out.append(f'<object type="OSDev" gp_index="{gpi()}" name="{kind}{index}{text}" '
                                   f'subtype="{kind.upper()}" osdev_type="{osdev}">'
                                   f'<info name="Backend" value="{kind.upper()}"/>'
                                   f'<info name="GPUVendor" value="NVIDIA Corporation{text}"/>'
                                   f'<info name="GPUModel" value="NVIDIA A100-SXM4-40GB{text}"/>'
                                   f'<info name="NVIDIAUUID" value="GPU-{index:08x}-0000-0000-0000-000000000000"/>'
                                   f'</object>')
                else:
                    address = f"{bus // 256:04x}:{bus % 256:02x}:00.1"
                    out.append(f'<object type="PCIDev" gp_index="{gpi()}" pci_busid="{address}" '
                               f'pci_type="0207 [15b3:101b] [15b3:0007] 00" pci_link_speed="31.5">'
                               f'<info name="PCIVendor" value="Mellanox Technologies{text}"/>'
                               f'<info name="PCIDevice" value="MT28908 Family [ConnectX-6]{text}"/>'
                               f'<object type="OSDev" gp_index="{gpi()}" name="ib{bus}{text}" osdev_type="2">'
                               f'<info name="Address" value="00:11:22:33:44:55{text}"/></object>'
                               f'<object type="OSDev" gp_index="{gpi()}" name="mlx5_{bus}{text}" osdev_type="3">'
                               f'<info name="NodeGUID" value="0011:2233:4455:6677{text}"/></object>')
                out.append("</object>" * (bridge_depth + 1))
            out.append("</object>")                         # the group
        out.append("</object>")                             # the package
    out.append("</object>")                                 # the machine
    out.append('<distances2 type="NUMANode" nbobjs="%d" kind="5" name="NUMALatency" indexing="os">' % nodes)
    index_text = "".join(f"{n} " for n in range(nodes))
    out.append(f'<indexes length="{len(index_text)}">{index_text}</indexes>')
    values = [10 if a == b else 20 + 11 * (a // nodes_per_package != b // nodes_per_package)
              for a in range(nodes) for b in range(nodes)]
    for k in range(0, len(values), 10):
        chunk = "".join(f"{v} " for v in values[k:k + 10])
        out.append(f'<u64values length="{len(chunk)}">{chunk}</u64values>')
    out.append("</distances2>")
    out.append("</topology>")
    return "\n".join(out) + "\n"


def sized_xml(target_bytes: int, **shape) -> str:
    """:func:`hostile_xml` of about ``target_bytes``: as many NUMA nodes (of one package each) as it takes. A
    file of n nodes is about a*n + b*n*n bytes (the bitmaps' words grow with the ids): two small ones give a, b."""
    s2, s4 = (len(hostile_xml(packages=n, nodes_per_package=1, **shape)) for n in (2, 4))
    b = max(0.0, (s4 - 2 * s2) / 8)
    a = (s2 - 4 * b) / 2
    n = (-a + (a * a + 4 * b * target_bytes) ** 0.5) / (2 * b) if b else target_bytes / a
    return hostile_xml(packages=max(1, round(n)), nodes_per_package=1, **shape)


# ------------------------------------------------------------------------------- cost: linear in the file's size

def _peak(text: str) -> int:
    """tracemalloc's peak while the reader reads ``text`` into its facts and makes the files of its devices and
    nodes (held together, as a root holds them), beyond the file's bytes themselves."""
    data = text.encode()
    tracemalloc.start()
    try:
        topo = _hwloc_xml.read_topology("hostile.xml", data)
        assert topo.facts.online_cpus and topo.tree.files["proc/meminfo"]
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("shape", [
    dict(packages=1, nodes_per_package=1, cores_per_node=500, bare=True),       # one package of 1000 PUs
    dict(packages=6, nodes_per_package=4, cores_per_node=8, gpus_per_node=2, nics_per_node=2, spread=3),
], ids=["one-package", "many-nodes-and-devices"])
def test_reading_takes_memory_in_proportion_to_the_file(shape):
    """A set per PU of its package's and its caches' PUs made reading quadratic: a 280 KiB file took 33 s and
    1.5 GB before it failed. The peak is now a small multiple of the file's size."""
    text = hostile_xml(**shape)
    assert 150_000 < len(text) < 800_000, len(text)
    peak = _peak(text)
    assert peak < 50 * len(text), f"{peak} bytes for a file of {len(text)}"


def test_a_file_four_times_bigger_takes_four_times_the_memory():
    small = hostile_xml(packages=1, nodes_per_package=1, cores_per_node=150, bare=True)
    big = hostile_xml(packages=1, nodes_per_package=1, cores_per_node=600, bare=True)
    grew, peaks = len(big) / len(small), (_peak(small), _peak(big))
    assert peaks[1] / peaks[0] < 1.5 * grew, f"{grew:.1f} times the bytes, {peaks[1] / peaks[0]:.1f} times the peak"


def test_each_set_is_made_once():
    """The facts hold one set per core and per cache, shared by the PUs below it, not one per PU (a set per PU
    of its package's or its caches' PUs made reading quadratic)."""
    text = hostile_xml(packages=1, nodes_per_package=1, cores_per_node=1000, bare=True)
    facts = _hwloc_xml.read_topology("hostile.xml", text.encode()).facts
    assert len(facts.cores) == 2000 and facts.cores[1999] == (0, 999, frozenset({1998, 1999}))
    assert len({id(threads) for _p, _c, threads in facts.cores.values()}) == 1000
    assert len(facts.caches) == 3 * 1000 + 1 and frozenset(range(2000)) in {c for _l, _t, c in facts.caches}


def test_a_big_hostile_file_is_read_as_hwloc_would(tmp_path):
    """The generator's machine, through discovery: every node, CPU, cache and GPU where the file puts it."""
    path = tmp_path / "big.xml"
    path.write_text(hostile_xml(packages=2, nodes_per_package=2, cores_per_node=4, spread=2))
    topo = discover(path)
    assert sorted(topo.nodes) == [0, 1, 2, 3]
    assert topo.nodes[1].cpus == {16, 18, 20, 22, 24, 26, 28, 30} and topo.nodes[1].memory_bytes == 2 << 30
    assert topo.nodes[0].distances == {0: 10, 1: 20, 2: 31, 3: 31}
    assert [(g.pci_address, g.numa_node) for g in topo.gpus] == [
        ("0000:01:00.0", 0), ("0000:03:00.0", 1), ("0000:05:00.0", 2), ("0000:07:00.0", 3)]
    assert topo.gpus[2].local_cpus == topo.nodes[2].cpus
    assert topo.cpus[18].siblings == frozenset({16, 18})


# ------------------------------------------------------------------------------- text: nothing that drives a terminal

#: What a hostile file puts into every string: C1 controls (CSI, OSC, NEL), a bidi override, U+FFFD, and C0 ones
#: as XML character references (a tab, a line end: which would start a line of the tree's files of their own).
HOSTILE_TEXT = "\u009b2J\u009d0;owned\u202e\ufffd\u0085&#9;&#10;&#13;x"


@pytest.fixture(scope="module")
def hostile_root(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("c1") / "hostile.xml"
    path.write_text(hostile_xml(packages=2, nodes_per_package=1, cores_per_node=2, text=HOSTILE_TEXT),
                    encoding="utf-8")
    return path


def _shown_clean(out: str) -> bool:
    return all(c.isprintable() or c == "\n" for c in out)


def test_strings_a_file_supplies_are_kept_printable(hostile_root):
    topo = discover(hostile_root)
    assert topo.model_name and topo.model_name.startswith("Hostile(R) CPU ?2J?0;owned")
    for text in (topo.model_name, *(g.name or "" for g in topo.gpus), *(g.uuid or "" for g in topo.gpus)):
        assert text.isprintable() and "\ufffd" not in text, repr(text)
    assert [g.numa_node for g in topo.gpus] == [0, 1]


@pytest.mark.parametrize("argv", [[], ["topology"], ["hardware"], ["topology", "--of", "xml"], ["plan"]],
                         ids=["main", "topology", "hardware", "topology-xml", "plan"])
def test_no_control_character_reaches_the_terminal(hostile_root, argv):
    proc = subprocess.run([sys.executable, "-m", "numabind", "--root", str(hostile_root), *argv],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    bad = sorted({c for c in proc.stdout + proc.stderr if not (c.isprintable() or c == "\n")})
    assert not bad, f"{bad!r} reached the terminal"
    if argv in ([], ["topology"]):
        assert "cpu model: Hostile(R) CPU ?2J?0;owned" in proc.stdout


@pytest.mark.parametrize("argv", [["--json"], ["topology", "--json"]])
def test_json_stays_json(hostile_root, argv):
    proc = subprocess.run([sys.executable, "-m", "numabind", "--root", str(hostile_root), *argv],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)


# ------------------------------------------------------------------------------- encodings: numabind's error only

SMALL = ('<topology version="2.0">\n'
         '  <object type="Machine" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" '
         'allowed_cpuset="0x00000003" nodeset="0x00000001" allowed_nodeset="0x00000001">\n'
         '    <info name="CPUModel" value="Caf\u00e9 CPU"/>\n'
         '    <object type="NUMANode" os_index="0" cpuset="0x00000003" nodeset="0x00000001" local_memory="1048576"/>\n'
         '    <object type="PU" os_index="0" cpuset="0x00000001"/>\n'
         '    <object type="PU" os_index="1" cpuset="0x00000002"/>\n'
         '  </object>\n'
         '</topology>\n')
ENCODINGS = ["UTF-8", "nonexistent", "utf-16", "UTF-16LE", "utf-32", "utf-7", "latin-1", "ascii", "cp500", "idna",
             "rot13", "base64", "hex", "zip", "punycode", "undefined", "mbcs", "big5", "shift_jis", "unicode_escape",
             "raw_unicode_escape", "utf-8-sig", "x" * 300, "", " ", "\u00e9"]
BOMS = [b"", b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff", b"\xff\xfe\x00\x00", b"+/v8-"]


def _header(encoding: str) -> str:
    return f'<?xml version="1.0" encoding="{encoding}"?>\n'


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_every_declared_encoding_gives_numabinds_error_or_a_machine(tmp_path, encoding):
    path = tmp_path / "enc.xml"
    path.write_bytes(_header(encoding).encode("utf-8") + SMALL.encode("utf-8"))
    try:
        topo = discover(path)
    except NumabindError as exc:
        message = str(exc)
        assert str(path) in message and ", line " in message and "\n" not in message, message
    else:
        assert topo.online_cpus == {0, 1}


_counter = [0]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(encoding=st.sampled_from(ENCODINGS) | st.text(max_size=12), bom=st.sampled_from(BOMS),
       body_codec=st.sampled_from(["utf-8", "utf-16-le", "utf-16-be", "latin-1", "utf-32"]),
       flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
       cut=st.none() | st.integers(0, 600))
def test_mutated_headers_and_bytes_give_numabinds_error_only(tmp_path, encoding, bom, body_codec, flips, cut):
    """Whatever the declaration, the byte order mark, the bytes' own encoding, a few bytes changed or the file
    cut short: a machine, or NumabindError naming the file, never LookupError, ValueError or UnicodeError."""
    try:
        data = bytearray(bom + (_header(encoding) + SMALL).encode(body_codec))
    except UnicodeEncodeError:
        data = bytearray(bom + (_header("UTF-8") + SMALL).encode("utf-8"))
    for at, value in flips:
        if data:
            data[at % len(data)] = value
    if cut is not None:
        data = data[:cut]
    _counter[0] += 1
    path = tmp_path / f"m{_counter[0]}.xml"          # a name of its own: discovery makes a tree once per file
    path.write_bytes(bytes(data))
    try:
        discover(path)
    except NumabindError as exc:
        assert str(path) in str(exc) or "discovery root" in str(exc), str(exc)


@pytest.mark.parametrize("encoding", ["nonexistent", "utf-7", "rot13"])
def test_the_command_line_says_a_bad_encoding_in_one_line(tmp_path, encoding):
    path = tmp_path / "f.xml"
    path.write_bytes(_header(encoding).encode() + SMALL.encode())
    proc = subprocess.run([sys.executable, "-m", "numabind", "--root", str(path), "topology"], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("numabind: error:") and str(path) in lines[0], proc.stderr
    assert "encoding" in lines[0], lines[0]


def test_a_memory_attribute_value_outside_a_memory_attribute_is_ignored(tmp_path):
    """A ``memattr_value`` under a ``memattr`` that is not the root's (or an ``info`` under such a ``cpukind``)
    belongs to none: it was given to the last kept one, or raised IndexError where there was none."""
    stray = ('<memattr name="Latency"><memattr_value target_obj_type="NUMANode" target_obj_gp_index="1" '
             'value="5" initiator_cpuset="0x1"/></memattr><cpukind cpuset="0x1"><info name="CoreType" '
             'value="IntelCore"/></cpukind>')
    path = tmp_path / "stray.xml"
    path.write_text('<?xml version="1.0" encoding="UTF-8"?>\n' + SMALL.replace(
        '    <object type="PU" os_index="0"', "    " + stray + '\n    <object type="PU" os_index="0"'))
    topo = discover(path)
    assert topo.online_cpus == {0, 1} and not topo.nodes[0].access
