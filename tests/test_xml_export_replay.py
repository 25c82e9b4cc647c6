"""numabind's own XML export replays as the machine it came from (issue 42 §4).

``numabind --root SRC topology --of xml > x.xml`` carries what a replay needs, as hwloc's backends write it: one
OS device per GPU with its UUID (``nvml0``, ``rsmi0``, ``ze0``), the NICs' ``net`` and ``openfabrics`` OS devices
and the PCI bridges between them and their host bridge, NVSwitches. So ``--root x.xml`` gives the same
``plan --all``, ``run --gpus N --dry-run`` and ``topology --matrix`` as ``--root SRC``, and no GPU whose identity
was certain on SRC is "identity uncertain" on the replay. Checked on every corpus file with a GPU, every dump,
the fake GPU and NIC boxes and this host; ``lstopo --input x.xml`` reads every export (skipped without
``lstopo-no-graphics``, a failure under ``NUMABIND_REQUIRE_ORACLE=1``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from numabind.topology import discover
from tests.fakegpu import eight_gpu_box
from tests.fakeio import dgx_box, mixed_box
from tests.fakesys import two_sockets
from tests.hwloc_corpus import gpu_files
from tests.kernel import run_main
from tests.lstopo import LSTOPO

HERE = Path(__file__).parent
DUMPS = sorted((HERE / "dumps").glob("*.tar.bz2"))
ENV = ["NUMABIND_FSROOT", "NUMABIND_STRICT", "NUMABIND_GPU_VENDOR", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
       "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK", "ZE_ENABLE_PCI_ID_DEVICE_ORDER", "ASCEND_RT_VISIBLE_DEVICES",
       "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES"]




GPU_FILES = gpu_files()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ENV:
        monkeypatch.delenv(var, raising=False)


def export(capsys, src: str, dest: Path) -> Path:
    rc, out, err = run_main(capsys, "--root", src, "topology", "--of", "xml")
    assert rc == 0, err
    dest.write_text(out)
    return dest


def looks(capsys, root: str, gpus: list[int]) -> dict[str, tuple[object, str]]:
    """What the issue compares: ``plan --all --json``, ``topology --matrix --json`` and ``run --gpus N --dry-run
    --json`` of each of ``gpus``, as (exit status, stdout or the error line)."""
    out: dict[str, tuple[object, str]] = {}
    commands = [("plan", "--all", "--json"), ("topology", "--matrix", "--json")] + [
        ("run", "--gpus", str(n), "--dry-run", "--json", "--", "true") for n in gpus]
    for argv in commands:
        rc, text, err = run_main(capsys, "--root", root, *argv)
        lines = [line for line in err.splitlines() if line.startswith("numabind: error")]
        out[" ".join(argv)] = (rc, text if rc == 0 else "\n".join(lines).replace(root, "ROOT"))
    return out


def some_gpus(count: int) -> list[int]:
    return sorted({0, count // 2, count - 1}) if count else [0]


def assert_replays(capsys, src: str, tmp_path: Path) -> Path:
    """Export ``src``, replay it: the same looks, and every certain GPU still certain."""
    # the same file name: a note on the GPUs' order names the file it read
    xml = export(capsys, src, tmp_path / (os.path.basename(src) if src.endswith(".xml") else "x.xml"))
    before = discover(src)
    after = discover(str(xml))
    gpus = some_gpus(len(before.gpus))
    theirs, ours = looks(capsys, src, gpus), looks(capsys, str(xml), gpus)
    for key in theirs:
        assert ours[key] == theirs[key], key
    # as sure of each GPU's identity as the source was: never "uncertain" where it was certain, nor the reverse
    assert [(g.pci_address, g.identity) for g in after.gpus] == [(g.pci_address, g.identity) for g in before.gpus], \
        [g.identity_note for g in after.gpus]
    return xml


def assert_lstopo_reads(xml: Path) -> None:
    if LSTOPO is None:
        if os.environ.get("NUMABIND_REQUIRE_ORACLE") == "1":
            pytest.fail("lstopo-no-graphics is not installed (Debian package hwloc-nox) and NUMABIND_REQUIRE_ORACLE=1")
        pytest.skip("lstopo-no-graphics is not installed (Debian package hwloc-nox)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HWLOC_")}
    proc = subprocess.run([LSTOPO, "--input", str(xml), "--of", "xml", "-"], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0 and "<topology" in proc.stdout, proc.stderr[-2000:]


# ------------------------------------------------------------------------------------------- sources
@pytest.mark.parametrize("name", GPU_FILES)
def test_every_corpus_file_with_gpus_replays_from_its_export(corpus, capsys, tmp_path, name):
    src = str(next(corpus.rglob(name)))
    assert_lstopo_reads(assert_replays(capsys, src, tmp_path))


def test_the_dgx2_export_names_its_gpus_nvswitches_and_bridges(corpus, capsys, tmp_path):
    """The issue's example: 16 V100s, each with its UUID, behind PLX switches; the NVSwitches too."""
    src = next(corpus.rglob("nvidiaDGX2.xml"))
    xml = export(capsys, str(src), tmp_path / "x.xml").read_text()
    for g in discover(str(src)).gpus:
        assert f'value="{g.uuid}"' in xml
    assert xml.count('subtype="NVML"') == 16 and xml.count('subtype="NVSwitch"') >= 5
    assert 'bridge_type="1-1"' in xml and 'bridge_pci="0000:[2b-' in xml
    rc, out, err = run_main(capsys, "--root", str(tmp_path / "x.xml"), "run", "--gpus", "9", "--dry-run", "--",
                            "true")
    assert rc == 0 and "identity uncertain" not in out + err, err


@pytest.mark.parametrize("dump", DUMPS, ids=lambda p: p.name.removesuffix(".tar.bz2"))
def test_every_dump_replays_from_its_export(capsys, tmp_path, dump):
    assert_lstopo_reads(assert_replays(capsys, str(dump), tmp_path))


def _gpu_box(vendor: str):
    def make(root: Path) -> None:
        two_sockets(root, cpus_per_socket=112)          # the box's GPUs' local CPUs are these
        eight_gpu_box(root, vendor)
    return make


FAKES = {"nvidia-box": _gpu_box("nvidia"), "amd-box": _gpu_box("amd"), "intel-box": _gpu_box("intel"),
         "dgx-nics": dgx_box, "mixed-nics": mixed_box}


@pytest.mark.parametrize("name", sorted(FAKES))
def test_every_fake_gpu_and_nic_box_replays_from_its_export(capsys, tmp_path, name):
    FAKES[name](tmp_path / "m")
    assert_lstopo_reads(assert_replays(capsys, str(tmp_path / "m"), tmp_path))


def test_the_nics_bonds_vfs_and_link_classes_come_back(capsys, tmp_path):
    """The mixed box has every link class, a RoCE VF and a bond: the replay's matrix is the source's."""
    mixed_box(tmp_path / "m")
    xml = export(capsys, str(tmp_path / "m"), tmp_path / "x.xml")
    rc, out, err = run_main(capsys, "--root", str(xml), "topology", "--matrix", "--json")
    assert rc == 0, err
    data = json.loads(out)
    gpu0 = next(g for g in data["gpus"] if g["pci_address"] == "0000:03:00.0")
    assert gpu0["links"] == {"eth0": "PXB", "eth1": "PIX", "eth2": "PHB", "eth3": "NODE", "mlx5_0": "SYS",
                             "mlx5_1": "SYS"}
    nics = {n["name"]: n for n in data["nics"]}
    assert nics["mlx5_1"]["physfn"] == "0000:81:00.0" and nics["eth1"]["uppers"] == ["bond0"]


def test_this_host_replays_from_its_export(capsys, tmp_path):
    assert_lstopo_reads(assert_replays(capsys, "/", tmp_path))


# ------------------------------------------------------------------------------------------- a picture
@pytest.mark.parametrize("args", [("topology", "--of", "svg"), ("--root", "/", "topology", "--of", "svg"),
                                  ("--json", "topology", "--of=png")])
def test_of_svg_says_how_to_draw_one(capsys, args):
    """The fast look and the full command line (options first: argparse's type check) say the same."""
    rc, out, err = run_main(capsys, *args)
    assert rc == 2 and out == ""
    assert "lstopo --input m.xml m.svg" in err and "numabind topology --of xml > m.xml" in err
