"""An hwloc XML topology as a discovery root, checked against hwloc itself (issue 34, section 1).

The contract is hwloc's own XML test corpus (``tests/data/hwloc-xml``: the 40 files of ``tests/hwloc/xml`` at
hwloc-2.14.0, BSD-3-Clause, COPYING beside them). For each file numabind's discovery of it must agree with what
``lstopo --input FILE --whole-system --of xml`` says about the same file: the nodes and their memory, each CPU's
home node, the distances, the allowed CPUs and nodes, each GPU's node and local CPUs (and the cores and caches).
The file hwloc 2.x cannot read (the v3 one) is checked against what the file itself says. numabind's own
``topology --of xml`` read back gives the same machine. Hostile files are refused with the file and the line.
Memory attributes become the kernel's HMAT files (checked against hwloc's values and against hwloc reading the
written tree back), CPU kinds the hybrid PMU lists or ``cpu_capacity``, which discovery's core kinds read; Ascend
NPUs are found as on a live machine, and GPUs without the runtimes' OS devices say their order is PCI bus order.

Skips only the lstopo comparison when lstopo is not installed (Debian package hwloc-nox; CI installs it).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tarfile
import tempfile
import tracemalloc
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from numabind._fs import FsReader
from numabind._hwloc_xml import MAX_XML_BYTES, gpu_order_note, xml_of, xml_root
from numabind.cpulist import format_cpulist
from numabind.errors import NumabindError
from numabind.topology import discover, discover_from

from .hwloc_corpus import ARCHIVE, HEAD, SYNTHETIC_MEMATTRS, machine_xml, names
from .lstopo import LSTOPO, hwloc_bitmap

#: Files of the corpus hwloc 2.x cannot read (format v3): checked against the file itself.
V3_FILES = {"cxlmem+dax.v3.xml"}
GPU_VENDORS = {0x10DE: "nvidia", 0x1002: "amd", 0x8086: "intel"}
GPU_CLASSES = {"nvidia": (0x03, 0x12), "amd": (0x03, 0x12), "intel": (0x03,)}
IO_TYPES = {"Bridge", "PCIDev", "OSDev", "Misc"}
TIERS = ("MCDRAM", "HBM", "GPUMemory", "NVM", "SPM", "CXL")
CACHE_TYPES = {"0": "Unified", "1": "Data", "2": "Instruction"}
FIELDS = ("online CPUs", "node ids", "node CPUs", "node memory", "home nodes", "distances", "allowed CPUs",
          "allowed nodes", "cores", "caches", "GPUs", "GPU nodes", "GPU local CPUs")


CORPUS = names()


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
    own = tmp_path / "tmp"      # the temporary directory, this test's own: another numabind may run beside it
    own.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as mp, pytest.raises(NumabindError) as err:
        mp.setattr(tempfile, "tempdir", str(own))
        mp.setenv("TMPDIR", str(own))
        discover(path)
    assert list(own.iterdir()) == [], "a refused file leaves nothing in the temporary directory"
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
    assert xml_of(FsReader(str(path))) is xml_of(FsReader(str(path))) is not None     # the file read once


@pytest.mark.parametrize("name", ["16intel64-manyVFs.xml", "24em64t-2n6c2t-pci.xml", "nvidiaDGX2.xml"])
def test_the_files_in_memory_read_as_written_ones(name, corpus, tmp_path):
    """The files of an XML root's devices and nodes (what numabind's readers other than the topology's read) are
    served from memory as a directory holding them is read: every file, listing, link and kind."""
    tree = xml_root(str(corpus / name), (corpus / name).read_bytes).tree
    for rel, text in tree.files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    for rel, target in tree.links.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).symlink_to(target)
    disk = FsReader(str(tmp_path))
    def kind(st):
        return None if st is None else stat.S_IFMT(st.st_mode)

    for rel in sorted({*tree.files, *tree.links, *tree.dirs, *(f"{link}/device" for link in tree.links)}):
        assert (tree.realpath(rel), tree.listdir(rel)) == (disk.realpath(rel), disk.listdir(rel)), rel
        assert (kind(tree.stat(rel)), kind(tree.stat(rel, follow=False))) == (kind(disk.stat(rel)),
                                                                              kind(disk.lstat(rel))), rel
        if kind(tree.stat(rel)) == stat.S_IFREG:
            assert tree.read(rel) == disk.read(rel), rel


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


# ------------------------------------------------------------------------------- memory attributes, CPU kinds

def _corpus_text(name: str) -> str:
    with tarfile.open(ARCHIVE) as tf:
        member = next(m for m in tf.getmembers() if os.path.basename(m.name) == name)
        handle = tf.extractfile(member)
        assert handle is not None
        return handle.read().decode()


#: The corpus files with memory attributes (hwloc 2.3+ ``<memattr>``) and with CPU kinds (``<cpukind>``).
MEMATTR_FILES = [n for n in CORPUS if "<memattr " in _corpus_text(n)]
CPUKIND_FILES = [n for n in CORPUS if "<cpukind " in _corpus_text(n)]
FIGURES = ("read_bandwidth", "write_bandwidth", "read_latency", "write_latency")
#: hwloc's attribute -> the kernel's figures it gives (a Read/Write attribute overrides the plain one).
MEMATTR_FIGURES = {"Bandwidth": ("read_bandwidth", "write_bandwidth"), "ReadBandwidth": ("read_bandwidth",),
                   "WriteBandwidth": ("write_bandwidth",), "Latency": ("read_latency", "write_latency"),
                   "ReadLatency": ("read_latency",), "WriteLatency": ("write_latency",)}


def _access(topo) -> dict[int, tuple[dict[str, int], frozenset[int]]]:
    out = {}
    for nid, node in topo.nodes.items():
        if node.access is not None:
            figures = {f: getattr(node.access, f) for f in FIGURES if getattr(node.access, f) is not None}
            out[nid] = (figures, node.access.initiators)
    return out


def test_corpus_memory_attributes_are_the_kernels_hmat_files(corpus):
    """KNL in SNC-4 with MCDRAM (hwloc's Bandwidth from each cluster's CPUs to its DRAM and MCDRAM node) and
    hwloc's memattrs test (a Bandwidth of the whole machine's CPUs to node 1, and user attributes)."""
    assert MEMATTR_FILES == ["64intel64-fakeKNL-SNC4-hybrid.xml", "8intel64-4n2t-memattrs.xml"]
    knl = discover(corpus / "64intel64-fakeKNL-SNC4-hybrid.xml")
    dram = {n: 22500 for n in range(4)}
    mcdram = {7: 0, 4: 1, 5: 2, 6: 3}             # the MCDRAM node of each cluster's DRAM node
    assert _access(knl) == {
        **{n: ({"read_bandwidth": bw, "write_bandwidth": bw}, frozenset({n})) for n, bw in dram.items()},
        **{n: ({"read_bandwidth": 90000, "write_bandwidth": 90000}, frozenset({c})) for n, c in mcdram.items()}}
    from numabind.strategies import bandwidth_weights
    assert bandwidth_weights([0, 7], knl) == {0: 1, 7: 4}
    memattrs = discover(corpus / "8intel64-4n2t-memattrs.xml")
    assert _access(memattrs) == {1: ({"read_bandwidth": 20, "write_bandwidth": 20}, frozenset({0, 1, 2, 3}))}


def test_synthetic_memory_attributes_narrow_as_the_kernel_does(tmp_path):
    path = tmp_path / "memattrs.xml"
    path.write_text(machine_xml(SYNTHETIC_MEMATTRS + '  <memattr name="Latency" flags="6">\n    <memattr_value '
                             'target_obj_type="NUMANode" target_obj_gp_index="2" value="5" '
                             'initiator_cpuset="0x00000003"/>\n  </memattr>\n'))
    assert _access(discover(path)) == {
        0: ({"read_bandwidth": 1000, "write_bandwidth": 1000, "read_latency": 80, "write_latency": 80},
            frozenset({0})),
        1: ({"read_bandwidth": 400, "write_bandwidth": 300, "read_latency": 150, "write_latency": 150},
            frozenset({1}))}


def test_memory_attribute_value_that_is_no_number_is_refused(tmp_path):
    text = machine_xml(SYNTHETIC_MEMATTRS.replace('value="900"', 'value="fast"'))
    message = _refused(tmp_path, text)
    line = text.split('value="fast"')[0].count("\n") + 1
    assert f"line {line}" in message and "Bandwidth value='fast'" in message
    text = machine_xml(SYNTHETIC_MEMATTRS.replace('initiator_cpuset="0x0000000f"', 'initiator_cpuset="0xqq"'))
    assert "initiator_cpuset='0xqq' is not an hwloc bitmap" in _refused(tmp_path, text, name="b.xml")


def _hwloc_memattrs(xml: str) -> dict[int, dict[str, dict[frozenset[int], int]]]:
    """hwloc's memory attribute values in its XML (as lstopo writes it): {node: {figure: {initiator CPUs:
    value}}}, the kernel's figures only, a Read/Write attribute over the plain one."""
    tree = ET.fromstring(xml)
    by_gp = {o.get("gp_index"): o for o in tree.iter("object")}
    pus = frozenset(int(o.get("os_index")) for o in tree.iter("object") if o.get("type") == "PU")
    found: dict[tuple[int, str, bool], dict[frozenset[int], int]] = {}
    for attr in tree.iter("memattr"):
        figures = MEMATTR_FIGURES.get(attr.get("name"))
        for v in attr.iter("memattr_value") if figures else ():
            target = by_gp[v.get("target_obj_gp_index")]
            if target.get("type") != "NUMANode":
                continue
            ini = v.get("initiator_cpuset") or by_gp[v.get("initiator_obj_gp_index")].get("cpuset")
            for figure in figures:
                found.setdefault((int(target.get("os_index")), figure, len(figures) == 1), {})[
                    hwloc_bitmap(ini) & pus] = int(v.get("value"))
    out: dict[int, dict[str, dict[frozenset[int], int]]] = {}
    for (node, figure, specific), values in found.items():
        if specific or (node, figure, True) not in found:
            out.setdefault(node, {})[figure] = values
    return out


@pytest.mark.parametrize("name", [*MEMATTR_FILES, "synthetic"])
def test_memory_attributes_agree_with_hwloc(name, corpus, tmp_path):
    """hwloc's values of each target node, as the kernel would show them (the best value of each figure, and
    of the initiators whose CPUs reach it the nodes with CPUs), are numabind's."""
    if LSTOPO is None:
        pytest.skip("hwloc's lstopo-no-graphics is not installed (Debian package hwloc-nox)")
    path = corpus / name if name != "synthetic" else tmp_path / "memattrs.xml"
    if name == "synthetic":
        path.write_text(machine_xml(SYNTHETIC_MEMATTRS))
    topo = discover(path)
    node_cpus = {n: v.cpus for n, v in topo.nodes.items() if v.cpus}
    ours = _access(topo)
    assert ours, "the file's memory attributes give figures"
    said = _hwloc_memattrs(_lstopo(path))
    assert set(said) == set(ours)
    for node, (figures, initiators) in ours.items():
        assert set(figures) == set(said[node]) - {f for f, v in said[node].items() if not any(v.values())}
        reached = set(node_cpus)
        for figure in ("write_latency", "read_latency", "write_bandwidth", "read_bandwidth"):
            per_node: dict[int, int] = {}
            for cpus, value in said[node].get(figure, {}).items():
                for n in (n for n, mine in node_cpus.items() if mine & cpus and n in reached):
                    best = per_node.get(n, value)
                    per_node[n] = max(best, value) if figure.endswith("bandwidth") else min(best, value)
            if per_node:
                best = (max if figure.endswith("bandwidth") else min)(per_node.values())
                assert figures[figure] == best, f"node {node} {figure}"
                reached = {n for n, v in per_node.items() if v == best}
        assert initiators == reached, f"node {node}'s initiators"


def _kinds_said(text: str) -> list[tuple[frozenset[int], int]]:
    """``lstopo --cpukinds``: [(cpuset, efficiency)] in hwloc's order."""
    out = []
    for line in text.splitlines():
        if line.startswith("CPU kind #"):
            words = line.split()
            out.append((hwloc_bitmap(words[words.index("cpuset") + 1]), int(words[words.index("efficiency") + 1])))
    return out


def _lstopo_kinds(path: Path) -> list[tuple[frozenset[int], int]]:
    proc = subprocess.run([LSTOPO, "--input", str(path), "--cpukinds"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, LC_ALL="C"))
    assert proc.returncode == 0, proc.stderr
    return _kinds_said(proc.stdout)


def test_corpus_cpu_kinds_as_capacities(corpus):
    """hwloc's fake kinds (efficiencies 0, 7 and 10 forced, no Intel pair): capacities 341, 682 and 1024 in
    their order, which split each core's threads, so each core takes its first thread's (the kernel writes one
    per core): CPUs 0 and 1 first, all 341, no hybrid CPU. The DGX-2 and POWER8 have one kind each (the CPUs of
    one maximum frequency): not hybrid, no capacity."""
    assert CPUKIND_FILES == ["fakecpukinds.xml", "nvidiaDGX2.xml", "power8gpudistances.xml"]
    for name in ("nvidiaDGX2.xml", "power8gpudistances.xml"):
        one = discover(corpus / name)
        assert one.kinds_source == "" and _capacities(one) == {} and one.performance_cpus == frozenset()
    fake = discover(corpus / "fakecpukinds.xml")
    assert _capacities(fake) == {0: 341, 1: 341, 2: 341, 3: 341} and fake.kinds_source == ""
    if LSTOPO is not None:
        said = _lstopo_kinds(corpus / "fakecpukinds.xml")
        assert [cpus for cpus, _e in sorted(said, key=lambda k: k[1])] == [{0, 1}, {2}, {3}]


def _capacities(topo) -> dict[int, int]:
    return {c: cpu.capacity for c, cpu in topo.cpus.items() if cpu.capacity is not None}


def _kinds(*kinds: tuple[int, str, str]) -> str:
    return "".join(f'  <cpukind cpuset="0x{cpus:08x}"{attrs}>\n' + "".join(
        f'    <info name="{k}" value="{v}"/>\n' for k, v in (i.split("=") for i in infos.split(",") if i))
        + "  </cpukind>\n" for cpus, attrs, infos in kinds)


X86 = '    <info name="CPUVendor" value="GenuineIntel"/>\n    <info name="CPUFamilyNumber" value="6"/>\n'


@pytest.mark.parametrize("kinds, infos, performance, efficiency, source, capacities", [
    # arm64 big.LITTLE: the kernel's capacities, as hwloc's Linux backend keeps them
    (_kinds((0b0101, "", "LinuxCapacity=446"), (0b1010, "", "LinuxCapacity=1024")), "",
     {1, 3}, {0, 2}, "cpu_capacity", {0: 446, 1: 1024, 2: 446, 3: 1024}),
    # Intel hybrid on x86: the PMU lists (x86 kernels write no cpu_capacity)
    (_kinds((0b1100, "", "CoreType=IntelAtom,FrequencyMaxMHz=3800"), (0b0011, "", "CoreType=IntelCore")), X86,
     {0, 1}, {2, 3}, "cpu_core/cpu_atom", {}),
    # efficiencies forced, written out of order: the most efficient kind gets the full capacity
    (_kinds((0b0011, ' forced_efficiency="9"', ""), (0b1100, ' forced_efficiency="2"', "")), "",
     {0, 1}, {2, 3}, "cpu_capacity", {0: 1024, 1: 1024, 2: 512, 3: 512}),
    # one kind: not hybrid, the kernel says nothing
    (_kinds((0b1111, "", "CoreType=IntelCore")), X86, set(), set(), "", {}),
], ids=["arm64-capacities", "intel-hybrid", "forced-efficiency", "one-kind"])
def test_cpu_kinds_reach_the_topology(tmp_path, kinds, infos, performance, efficiency, source, capacities):
    path = tmp_path / "kinds.xml"
    path.write_text(machine_xml(kinds, infos=infos))
    topo = discover(path)
    assert (topo.performance_cpus, topo.efficiency_cpus, topo.kinds_source) == (performance, efficiency, source)
    assert _capacities(topo) == capacities
    if LSTOPO is not None and capacities and "LinuxCapacity" in kinds:
        assert [c for c, _e in sorted(_lstopo_kinds(path), key=lambda k: k[1])] == [{0, 2}, {1, 3}]


def test_cpu_kind_bad_efficiency_refused(tmp_path):
    text = machine_xml(_kinds((0b0011, ' forced_efficiency="high"', ""), (0b1100, ' forced_efficiency="2"', "")))
    message = _refused(tmp_path, text)
    assert "forced_efficiency='high'" in message and f"line {text.split('high')[0].count(chr(10)) + 1}" in message


# ------------------------------------------------------------------------------- Ascend NPUs, the order note

def _pcidev(bus: str, pci_type: str, gp: int) -> str:
    return (f'      <object type="Bridge" gp_index="{gp}" bridge_type="0-1" depth="0" bridge_pci="0000:[{bus[5:7]}-'
            f'{bus[5:7]}]">\n        <object type="PCIDev" gp_index="{gp + 1}" pci_busid="{bus}" '
            f'pci_type="{pci_type}" pci_link_speed="0.000000"/>\n      </object>\n')


def test_ascend_npus_from_xml(tmp_path):
    """Two Ascend 910B NPUs (19e5:d802, class 1200), one per node, and a Huawei function of the accelerator
    class that is no NPU (a Kunpeng engine): the NPUs with their nodes, CPUs and model, in PCI bus order."""
    path = tmp_path / "ascend.xml"
    path.write_text(machine_xml(io=(
        _pcidev("0000:c1:00.0", "1200 [19e5:d802] [19e5:0100] 00", 100)
        + _pcidev("0000:79:00.0", "1200 [19e5:a258] [19e5:0000] 21", 102),
        _pcidev("0000:01:00.0", "1200 [19e5:d802] [19e5:0100] 00", 104))))
    topo = discover_from(FsReader(str(path)), env={})
    assert [(g.index, g.vendor, g.pci_address, g.numa_node, g.local_cpus, g.name) for g in topo.gpus] == [
        (0, "ascend", "0000:01:00.0", 1, {2, 3}, "Ascend 910B"),
        (1, "ascend", "0000:c1:00.0", 0, {0, 1}, "Ascend 910B")]
    assert gpu_order_note(FsReader(str(path)), "ascend") == ""
    only = discover_from(FsReader(str(path)), env={"ASCEND_RT_VISIBLE_DEVICES": "1"})
    assert [(g.index, g.pci_address) for g in only.gpus] == [(0, "0000:c1:00.0")]


def test_identity_note_says_pci_bus_order_per_gpu(corpus):
    """An XML without the runtimes' OS devices: each GPU's identity note says the order is PCI bus order, in
    ``topology --json`` and in the plan of every GPU; the DGX-2's cuda/nvml devices say nothing."""
    import json

    path = str(corpus / "24em64t-2n6c2t-pci.xml")
    reader = FsReader(path)
    note = gpu_order_note(reader, "nvidia")
    assert note == ("24em64t-2n6c2t-pci.xml carries no nvml/cuda OS devices for its nvidia GPUs (exported without "
                    "them, or with I/O filtered): numabind numbers them in PCI bus order")
    assert gpu_order_note(reader, "amd") == "" and gpu_order_note(reader) == note
    topo = discover_from(reader, env={})
    assert [(g.identity, g.identity_note.split("; ")[0]) for g in topo.gpus] == [("uncertain", note)] * 3
    dgx2 = discover_from(FsReader(str(corpus / "nvidiaDGX2.xml")), env={})
    assert {(g.identity, g.identity_note) for g in dgx2.gpus} == {("certain", "")}
    out = subprocess.run([sys.executable, "-m", "numabind", "--root", path, "topology", "--json"],
                         capture_output=True, text=True, timeout=120, env=_clean_env())
    assert out.returncode == 0, out.stderr
    assert [g["identity_note"].split("; ")[0] for g in json.loads(out.stdout)["gpus"]] == [note] * 3
    plan = subprocess.run([sys.executable, "-m", "numabind", "--root", path, "plan"], capture_output=True,
                          text=True, timeout=120, env=_clean_env())
    assert plan.returncode == 0, plan.stderr
    lines = [line for line in plan.stdout.splitlines() if "PCI bus order" in line]
    assert [line.split(":")[0].strip() for line in lines] == ["gpu 0", "gpu 1", "gpu 2"]
