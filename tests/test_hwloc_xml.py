"""An hwloc XML topology as a discovery root, checked against hwloc itself (issue 34, section 1).

The contract is hwloc's own XML test corpus (``tests/data/hwloc-xml``: the 40 files of ``tests/hwloc/xml`` at
hwloc-2.14.0, BSD-3-Clause, COPYING beside them). For each file numabind's discovery of it must agree with what
``lstopo --input FILE --whole-system --of xml`` says about the same file: the nodes and their memory, each CPU's
home node, the distances, the allowed CPUs and nodes, each GPU's node and local CPUs (and the cores and caches).
The file hwloc 2.x cannot read (the v3 one) is checked against what the file itself says. numabind's own
``topology --of xml`` read back gives the same machine. Hostile files are refused with the file and the line.

Skips only the lstopo comparison when lstopo is not installed (Debian package hwloc-nox; CI installs it).
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tarfile
import tempfile
import tracemalloc
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from numabind import _dump
from numabind._fs import FsReader
from numabind._hwloc_xml import MAX_XML_BYTES, gpu_order_note
from numabind.cpulist import format_cpulist
from numabind.errors import NumabindError
from numabind.topology import discover, discover_from

from .lstopo import LSTOPO, hwloc_bitmap

ARCHIVE = Path(__file__).parent / "data" / "hwloc-xml" / "hwloc-2.14.0-tests-xml.tar.xz"
#: Files of the corpus hwloc 2.x cannot read (format v3): checked against the file itself.
V3_FILES = {"cxlmem+dax.v3.xml"}
GPU_VENDORS = {0x10DE: "nvidia", 0x1002: "amd", 0x8086: "intel"}
GPU_CLASSES = {"nvidia": (0x03, 0x12), "amd": (0x03, 0x12), "intel": (0x03,)}
IO_TYPES = {"Bridge", "PCIDev", "OSDev", "Misc"}
TIERS = ("MCDRAM", "HBM", "GPUMemory", "NVM", "SPM", "CXL")
CACHE_TYPES = {"0": "Unified", "1": "Data", "2": "Instruction"}
FIELDS = ("online CPUs", "node ids", "node CPUs", "node memory", "home nodes", "distances", "allowed CPUs",
          "allowed nodes", "cores", "caches", "GPUs", "GPU nodes", "GPU local CPUs")


def _names() -> list[str]:
    with tarfile.open(ARCHIVE) as tf:
        return sorted(os.path.basename(m.name) for m in tf.getmembers() if m.name.endswith(".xml"))


CORPUS = _names()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The corpus unpacked (tarfile's data filter: plain files only, nothing outside the folder)."""
    dest = tmp_path_factory.mktemp("hwloc-xml")
    with tarfile.open(ARCHIVE) as tf:
        tf.extractall(dest, filter="data")
    return dest


# ------------------------------------------------------------------------------- the oracle

def _lstopo(path: Path) -> str:
    env = dict(os.environ, LC_ALL="C")
    for var in ("HWLOC_FSROOT", "HWLOC_XMLFILE", "HWLOC_SYNTHETIC", "HWLOC_COMPONENTS", "HWLOC_THISSYSTEM"):
        env.pop(var, None)
    proc = subprocess.run([LSTOPO, "--input", str(path), "--whole-system", "--of", "xml", "-"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and "<topology" in proc.stdout, f"lstopo failed on {path}: {proc.stderr[-2000:]}"
    return proc.stdout


def hwloc_says(xml: str) -> dict:
    """What an hwloc XML text says, reduced to what numabind reports (the same reduction for lstopo's output and
    for a file lstopo cannot read)."""
    tree = ET.fromstring(xml)
    parent: dict[ET.Element, ET.Element] = {c: p for p in tree.iter() for c in p}
    machine = tree.find("object")
    assert machine is not None
    pus = frozenset(int(o.get("os_index")) for o in tree.iter("object") if o.get("type") == "PU")
    nodes, tiers = {}, set()
    for o in tree.iter("object"):
        if o.get("type") == "NUMANode":
            nid = int(o.get("os_index"))
            nodes[nid] = (hwloc_bitmap(o.get("cpuset")) & pus, int(o.get("local_memory", "0")))
            if (o.get("subtype") or "").startswith(TIERS):
                tiers.add(nid)
    cores = {hwloc_bitmap(o.get("cpuset")) & pus for o in tree.iter("object") if o.get("type") == "Core"}
    caches = set()
    for o in tree.iter("object"):
        kind = o.get("type", "")
        if kind.endswith("Cache") and kind[:1] == "L":
            ctype = "Instruction" if kind.endswith("iCache") else CACHE_TYPES[o.get("cache_type", "0")]
            caches.add((int(o.get("depth")), ctype, hwloc_bitmap(o.get("cpuset")) & pus))
    matrices = []
    for d in tree.iter("distances2"):
        if d.get("type") != "NUMANode" or int(d.get("kind", "0")) & 8:
            continue
        ids = [int(v) for el in d.findall("indexes") for v in (el.text or "").split()]
        values = [int(v) for el in d.findall("u64values") for v in (el.text or "").split()]
        n = len(ids)
        matrix = {a: dict(zip(ids, values[i * n:(i + 1) * n])) for i, a in enumerate(ids)}
        matrices.append((d.get("name"), matrix))
    slit = [m for m in matrices if all(m[1][a][a] == 10 for a in m[1])]
    chosen = next((m for m in matrices if m[0] == "NUMALatency"), None) or (slit or matrices or [(None, {})])[0]
    pci = {}
    for o in tree.iter("object"):
        if o.get("type") != "PCIDev":
            continue
        cls, ids = o.get("pci_type").split()[:2]
        up = parent[o]
        while up.get("type") in IO_TYPES:
            up = parent[up]
        pci.setdefault(o.get("pci_busid"), (int(cls, 16), int(ids[1:5], 16), hwloc_bitmap(up.get("cpuset")) & pus,
                                            hwloc_bitmap(up.get("nodeset")) & frozenset(nodes)))
    return {"pus": pus, "nodes": nodes, "tiers": tiers, "distances": chosen[1], "cores": cores, "caches": caches,
            "allowed_cpus": hwloc_bitmap(machine.get("allowed_cpuset")) & pus,
            "allowed_nodes": hwloc_bitmap(machine.get("allowed_nodeset")) & frozenset(nodes), "pci": pci}


def field_differences(topo, h: dict) -> dict[str, list[str]]:
    """Where numabind's ``topo`` and hwloc's view ``h`` disagree, by field; every field has a list."""
    out: dict[str, list[str]] = {f: [] for f in FIELDS}

    def check(field: str, ours, theirs, what: str = "") -> None:
        if ours != theirs:
            out[field].append(f"{what or field}: numabind {_show(ours)} != hwloc {_show(theirs)}")

    check("online CPUs", topo.online_cpus, h["pus"])
    check("node ids", sorted(topo.nodes), sorted(h["nodes"]))
    cpu_nodes = {n.cpus for n in topo.nodes.values() if n.cpus}
    for nid in sorted(set(topo.nodes) & set(h["nodes"])):
        node, (h_cpus, h_bytes) = topo.nodes[nid], h["nodes"][nid]
        if node.cpus or not h_cpus:
            check("node CPUs", node.cpus, h_cpus, f"node {nid} CPUs")
        elif h_cpus != frozenset().union(*(s for s in cpu_nodes if s <= h_cpus)):
            out["node CPUs"].append(f"node {nid}: CPU-less in numabind, hwloc places it at {_show(h_cpus)}, "
                                    f"which is not a union of CPU nodes")
        check("node memory", node.memory_bytes, h_bytes, f"node {nid} memory")
    for cpu in sorted(h["pus"]):
        holders = [n for n, (cpus, _b) in h["nodes"].items() if cpu in cpus]
        home = topo.node_of_cpu(cpu)
        if not holders:
            check("home nodes", home, None, f"CPU {cpu}'s node")
            continue
        best = min((n in h["tiers"], len(h["nodes"][n][0])) for n in holders)
        fitting = {n for n in holders if (n in h["tiers"], len(h["nodes"][n][0])) == best}
        if home not in fitting:
            out["home nodes"].append(f"CPU {cpu}: numabind's node {home}, hwloc's most local nodes "
                                     f"{sorted(fitting)}")
    check("distances", {n: dict(node.distances) for n, node in topo.nodes.items() if node.distances},
          h["distances"])
    check("allowed CPUs", topo.allowed_cpus, h["allowed_cpus"])
    check("allowed nodes", topo.allowed_nodes, h["allowed_nodes"])
    if h["cores"]:
        check("cores", {c.siblings for c in topo.cpus.values()}, h["cores"])
    check("caches", {(c.level, c.type, c.cpus) for c in topo.caches}, h["caches"])
    vendor = topo.gpus[0].vendor if topo.gpus else None
    gpus_h = sorted(bus for bus, (cls, ven, _c, _n) in h["pci"].items()
                    if ven in GPU_VENDORS and cls >> 8 in GPU_CLASSES[GPU_VENDORS[ven]]
                    and (vendor is None or GPU_VENDORS[ven] == vendor))
    check("GPUs", [g.pci_address for g in topo.gpus], gpus_h)
    for g in topo.gpus:
        if g.pci_address not in h["pci"]:
            continue
        _cls, _ven, cpus, nodes = h["pci"][g.pci_address]
        with_cpus = {n for n in nodes if h["nodes"][n][0]}
        want = min(nodes) if len(nodes) == 1 else min(with_cpus) if len(with_cpus) == 1 else None
        if want is None and topo.gpus and len({n for n, node in topo.nodes.items() if node.cpus}) == 1:
            want = next(n for n, node in topo.nodes.items() if node.cpus)     # numabind's single-node rule
        check("GPU nodes", g.numa_node, want, f"GPU {g.index} ({g.pci_address}) node")
        check("GPU local CPUs", g.local_cpus, cpus, f"GPU {g.index} ({g.pci_address}) local CPUs")
    return out


def _show(value) -> str:
    if isinstance(value, frozenset) and all(isinstance(v, int) for v in value):
        return "{" + format_cpulist(value) + "}"
    return repr(value)


# ------------------------------------------------------------------------------- the corpus

def test_corpus_is_hwlocs_forty_files():
    assert len(CORPUS) == 40
    assert V3_FILES <= set(CORPUS)
    assert (ARCHIVE.parent / "COPYING").is_file() and (ARCHIVE.parent / "README.md").is_file()


@pytest.mark.parametrize("name", CORPUS)
def test_corpus_file_agrees_with_hwloc(name, corpus):
    path = corpus / name
    topo = discover(path)
    if name in V3_FILES:
        says = hwloc_says(path.read_text())           # hwloc 2.x cannot read it: what the file says
    else:
        if LSTOPO is None:
            pytest.skip("hwloc's lstopo-no-graphics is not installed (Debian package hwloc-nox)")
        says = hwloc_says(_lstopo(path))
    diffs = [d for field in FIELDS for d in field_differences(topo, says)[field]]
    assert diffs == [], f"{name}: numabind and hwloc disagree:\n" + "\n".join(diffs)
    assert topo.root == str(path)


@pytest.mark.parametrize("name", CORPUS)
def test_corpus_round_trip_through_numabinds_own_xml(name, corpus, tmp_path):
    """numabind's ``topology --of xml`` of a corpus file, read back by numabind, is the same machine."""
    from numabind.cli.tree import build_tree, hwloc_xml
    from numabind.iodevices import scan_pci

    topo = discover(corpus / name)
    written = tmp_path / "again.xml"
    written.write_text(hwloc_xml(topo, build_tree(topo, [d for d in scan_pci(topo.root) if d.important])))
    again = discover(written)
    assert again.online_cpus == topo.online_cpus
    assert {n: (v.cpus, v.memory_bytes, dict(v.distances)) for n, v in again.nodes.items()} == \
        {n: (v.cpus, v.memory_bytes, dict(v.distances)) for n, v in topo.nodes.items()}
    assert (again.allowed_cpus, again.allowed_nodes) == (topo.allowed_cpus, topo.allowed_nodes)
    assert [(g.pci_address, g.vendor, g.numa_node) for g in again.gpus] == \
        [(g.pci_address, g.vendor, g.numa_node) for g in topo.gpus]
    for g, h in zip(again.gpus, topo.gpus):
        assert g.local_cpus == (topo.nodes[h.numa_node].cpus if h.numa_node is not None else topo.online_cpus), \
            "numabind's XML hangs a device from its node"


# ------------------------------------------------------------------------------- as a user tries it

def test_dgx2_gpus_by_node_with_uuids_and_no_nvswitch(corpus):
    topo = discover(str(corpus / "nvidiaDGX2.xml"))
    assert [g.numa_node for g in topo.gpus] == [0] * 8 + [1] * 8
    assert all(g.vendor == "nvidia" and g.uuid and g.uuid.startswith("GPU-") for g in topo.gpus)
    assert topo.gpus[0].uuid == "GPU-d3977428-7a30-086b-2e20-5c1eeed647c6"
    assert topo.gpus[15].uuid == "GPU-bb4648d3-e72b-4bac-a32f-4c9f3e4eb547"
    nvswitches = {bus for bus in _pci_of(corpus / "nvidiaDGX2.xml") if _pci_of(corpus / "nvidiaDGX2.xml")[bus] ==
                  (0x0680, 0x10DE)}
    assert len(nvswitches) == 11 and not nvswitches & {g.pci_address for g in topo.gpus}
    assert gpu_order_note(FsReader(str(corpus / "nvidiaDGX2.xml"))) == ""


def _pci_of(path: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for o in ET.parse(path).iter("object"):
        if o.get("type") == "PCIDev":
            cls, ids = o.get("pci_type").split()[:2]
            out[o.get("pci_busid")] = (int(cls, 16), int(ids[1:5], 16))
    return out


def test_dgx2_plan_from_the_command_line(corpus):
    """``numabind --root nvidiaDGX2.xml plan``: GPUs 0-7 on node 0, 8-15 on node 1; the UUIDs through
    ``$NUMABIND_FSROOT`` and ``topology --json``."""
    import json

    out = subprocess.run([sys.executable, "-m", "numabind", "--root", str(corpus / "nvidiaDGX2.xml"), "plan",
                          "--json"], capture_output=True, text=True, timeout=120, env=_clean_env())
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [(r["gpu"], r["numa_node"], r["plan"]["mem_nodes"]) for r in rows] == \
        [(k, k // 8, str(k // 8)) for k in range(16)]
    topo = subprocess.run([sys.executable, "-m", "numabind", "topology", "--json"], capture_output=True, text=True,
                          timeout=120, env=dict(_clean_env(), NUMABIND_FSROOT=str(corpus / "nvidiaDGX2.xml")))
    assert topo.returncode == 0, topo.stderr
    gpus = json.loads(topo.stdout)["gpus"]
    assert len(gpus) == 16 and all(g["uuid"].startswith("GPU-") for g in gpus)
    assert gpus[9]["uuid"] == "GPU-2273aee2-5e2e-6111-598f-936241f55b3a"


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("VISIBLE_DEVICES") and k != "NUMABIND_FSROOT"}
    return dict(env, PYTHONPATH=str(Path(__file__).parents[1] / "src"))


def test_every_way_to_name_the_root(corpus, monkeypatch):
    path = str(corpus / "power8gpudistances.xml")
    direct = discover(path)
    monkeypatch.setenv("NUMABIND_FSROOT", path)
    assert discover() == direct
    assert len(direct.gpus) == 4 and direct.gpus[0].uuid == "GPU-77bf6b9a-6906-5a93-d28b-b77d2c23d1d2"


def test_visibility_variables_apply(corpus):
    reader = FsReader(str(corpus / "nvidiaDGX2.xml"))
    topo = discover_from(reader, env={"CUDA_VISIBLE_DEVICES": "9,10"})
    assert [(g.index, g.pci_address, g.numa_node) for g in topo.gpus] == [
        (0, "0000:b9:00.0", 1), (1, "0000:bc:00.0", 1)]


def test_gpus_without_os_devices_say_pci_bus_order(corpus):
    note = gpu_order_note(FsReader(str(corpus / "24em64t-2n6c2t-pci.xml")))
    assert "PCI bus order" in note and "no nvml/cuda OS devices" in note
    topo = discover(corpus / "24em64t-2n6c2t-pci.xml")
    assert [g.pci_address for g in topo.gpus] == ["0000:06:00.0", "0000:11:00.0", "0000:14:00.0"]


def test_no_gpu_for_another_vendors_vga_or_qemu(corpus):
    for name in ("192em64t-24n8c2t.xml", "cxlmem+dax.v2.xml"):     # a Matrox BMC VGA; QEMU's display
        assert discover(corpus / name).gpus == ()


def test_memory_tiers_and_memory_only_nodes(corpus):
    knl = discover(corpus / "64intel64-fakeKNL-SNC4-hybrid.xml")
    assert [n for n, node in knl.nodes.items() if node.cpus] == [0, 1, 2, 3]      # DRAM, not MCDRAM
    assert all(knl.nodes[n].memory_bytes == 2 << 30 and not knl.nodes[n].cpus for n in (4, 5, 6, 7))
    ia64 = discover(corpus / "8ia64-2n2s2c+1n.v1.xml")
    assert not ia64.nodes[16].cpus and ia64.nodes[16].memory_bytes == 1044660224 and set(ia64.nodes) == {0, 2, 16}
    restricted = discover(corpus / "64intel64-3g2n+2n-irregulargroups+pci.xml")
    assert restricted.allowed_cpus < restricted.online_cpus


# ------------------------------------------------------------------------------- hostile files

HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n'
SMALL = ('<topology version="2.0">\n'
         '  <object type="Machine" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" '
         'allowed_cpuset="0x00000003" nodeset="0x00000001" allowed_nodeset="0x00000001">\n'
         '    <object type="NUMANode" os_index="0" cpuset="0x00000003" nodeset="0x00000001" local_memory="1048576"/>\n'
         '    <object type="PU" os_index="0" cpuset="0x00000001"/>\n'
         '    <object type="PU" os_index="1" cpuset="0x00000002"/>\n'
         '  </object>\n'
         '</topology>\n')


def _refused(tmp_path: Path, text: str | bytes, *, name: str = "t.xml") -> str:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "numabind-xml-*")))
    with pytest.raises(NumabindError) as err:
        discover(path)
    after = set(glob.glob(os.path.join(tempfile.gettempdir(), "numabind-xml-*")))
    assert after == before, "a refused file leaves no half-written tree"
    assert str(path) in str(err.value)
    return str(err.value)


def test_the_small_machine_reads(tmp_path):
    path = tmp_path / "t.xml"
    path.write_text(HEAD + SMALL)
    topo = discover(path)
    assert topo.online_cpus == {0, 1} and topo.nodes[0].memory_bytes == 1 << 20


def test_billion_laughs_refused_in_bounded_memory(tmp_path):
    lol = ['<!ENTITY lol0 "lol">'] + [f'<!ENTITY lol{k} "{f"&lol{k - 1};" * 10}">' for k in range(1, 10)]
    text = HEAD + "<!DOCTYPE topology [\n" + "\n".join(lol) + "\n]>\n" + SMALL.replace(
        'os_index="0" cpuset="0x00000003" c', 'os_index="0" name="&lol9;" cpuset="0x00000003" c', 1)
    tracemalloc.start()
    try:
        message = _refused(tmp_path, text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "line 2" in message and "internal subset" in message
    assert peak < 8 << 20, f"refusing the file took {peak} bytes"


def test_external_entity_refused(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("SECRET")
    text = HEAD + f'<!DOCTYPE topology [<!ENTITY x SYSTEM "file://{secret}">]>\n' + SMALL.replace(
        "<object type=\"PU\" os_index=\"1\"", "<info name=\"x\" value=\"y\"/>&x;<object type=\"PU\" os_index=\"1\"")
    message = _refused(tmp_path, text)
    assert "SECRET" not in message and "line 2" in message
    undeclared = HEAD + '<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n' + SMALL.replace(
        '<object type="PU" os_index="1"', '&x;<object type="PU" os_index="1"')
    assert "line 7" in _refused(tmp_path, undeclared, name="u.xml")


def test_truncated_file_refused_with_its_line(tmp_path, corpus):
    whole = (corpus / "nvidiaDGX2.xml").read_bytes()
    message = _refused(tmp_path, whole[:len(whole) // 2])
    line = whole[:len(whole) // 2].count(b"\n") + 1
    assert f"line {line}" in message and "truncated" in message


def test_oversized_file_refused_unread(tmp_path):
    path = tmp_path / "big.xml"
    with open(path, "wb") as f:
        f.write(HEAD.encode())
        f.truncate(100 * 1000 * 1000)            # sparse: 100 MB without writing them
    assert MAX_XML_BYTES < 100 * 1000 * 1000
    tracemalloc.start()
    try:
        with pytest.raises(NumabindError, match="more than numabind's cap") as err:
            discover(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(path) in str(err.value) and peak < 1 << 20


@pytest.mark.parametrize("old, new, said", [
    ('cpuset="0x00000001"', 'cpuset="0xzz"', "not an hwloc bitmap"),
    ('cpuset="0x00000001"', 'cpuset="0x1,' + ",".join(["0x0"] * 2100) + '"', "cap"),
    ('cpuset="0x00000001"', 'cpuset="0x00000001' + ",0x00000000" * 2048 + '"', "above numabind's cap"),
    ('type="PU" os_index="0"', 'type="PU" os_index="70000"', "above numabind's cap"),
    ('type="PU" os_index="0"', 'type="PU" os_index="-1"', "not a non-negative integer"),
    ('os_index="0" cpuset="0x00000003" nodeset', 'os_index="x" cpuset="0x00000003" nodeset', "NUMANode"),
])
def test_bad_values_refused_with_the_line(tmp_path, old, new, said):
    assert old in SMALL
    message = _refused(tmp_path, HEAD + SMALL.replace(old, new, 1))
    assert said in message
    line = (HEAD + SMALL.replace(old, new, 1)).split(new)[0].count("\n") + 1
    assert f"line {line}" in message


def test_wrong_root_element_and_not_xml(tmp_path):
    assert "not <topology>" in _refused(tmp_path, HEAD + "<html><body/></html>\n")
    assert "line 1" in _refused(tmp_path, "this is not XML at all\n", name="n.xml")
    assert "version '4.0'" in _refused(tmp_path, HEAD + SMALL.replace('version="2.0"', 'version="4.0"'),
                                       name="v.xml")
    assert "no PU" in _refused(tmp_path, HEAD + '<topology version="2.0"><object type="Machine"/></topology>',
                               name="p.xml")


def test_a_file_named_otherwise_is_sniffed(tmp_path):
    path = tmp_path / "topology.out"
    path.write_text(HEAD + SMALL)
    assert discover(path).online_cpus == {0, 1}
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    with pytest.raises(NumabindError, match="neither an hwloc XML topology nor a tar archive"):
        discover(other)


def test_the_tree_is_made_once_per_file(tmp_path):
    path = tmp_path / "t.xml"
    path.write_text(HEAD + SMALL)
    assert FsReader(str(path)).root == FsReader(str(path)).root
    assert _dump.materialise_xml(str(path), path.read_bytes) == FsReader(str(path)).root


def _amd_machine(osdevs: bool) -> str:
    def gpu(bus: str, index: int) -> str:
        inner = (f'<object type="OSDev" name="rsmi{index}" osdev_type="5"><info name="AMDUUID" '
                 f'value="GPU-{index + 10:016x}"/><info name="GPUModel" value="MI300X"/></object>') if osdevs else ""
        return f'<object type="PCIDev" pci_busid="{bus}" pci_type="1200 [1002:74a1] [1002:74a1] 00">{inner}</object>'
    return (HEAD + '<topology version="2.0"><object type="Machine" cpuset="0x00000003" allowed_cpuset="0x00000003" '
            'nodeset="0x00000003" allowed_nodeset="0x00000003">'
            '<object type="Package" os_index="0" cpuset="0x00000001" nodeset="0x00000001">'
            '<object type="NUMANode" os_index="0" cpuset="0x00000001" nodeset="0x00000001" local_memory="1048576"/>'
            '<object type="PU" os_index="0" cpuset="0x00000001"/>' + gpu("0000:05:00.0", 1) + '</object>'
            '<object type="Package" os_index="1" cpuset="0x00000002" nodeset="0x00000002">'
            '<object type="NUMANode" os_index="1" cpuset="0x00000002" nodeset="0x00000002" local_memory="1048576"/>'
            '<object type="PU" os_index="1" cpuset="0x00000002"/>' + gpu("0000:85:00.0", 0) + '</object>'
            '<object type="Bridge"><object type="PCIDev" pci_busid="0000:00:02.0" '
            'pci_type="0300 [1234:1111] [1af4:1100] 02"/></object>'
            '</object></topology>\n')


def test_amd_gpus_take_rsmi_order_and_uuid(tmp_path):
    path = tmp_path / "amd.xml"
    path.write_text(_amd_machine(osdevs=True))
    topo = discover(path)
    assert [(g.pci_address, g.vendor, g.numa_node, g.uuid) for g in topo.gpus] == [
        ("0000:85:00.0", "amd", 1, f"GPU-{10:016x}"), ("0000:05:00.0", "amd", 0, f"GPU-{11:016x}")]
    assert topo.gpus[0].local_cpus == {1}
    bare = tmp_path / "bare.xml"
    bare.write_text(_amd_machine(osdevs=False))
    assert [g.pci_address for g in discover(bare).gpus] == ["0000:05:00.0", "0000:85:00.0"]
    assert "PCI bus order" in gpu_order_note(FsReader(str(bare)))
