"""The rest of issue 41's chroot-style reading of a replayed root, and its short quotes.

A device node of a fake root (``dev/nvidiaN``) and SGLang's ``node1`` check are read inside the root, never
through a link that leaves it; a cpulist error (which discovery passes on from a replayed machine's files)
quotes only the start of the list, with no control character.
"""

from __future__ import annotations

import os

import pytest

import numabind
from numabind.compat import sglang
from numabind.cpulist import parse_cpulist, parse_mask
from numabind.errors import NumabindError, PlanError
from numabind.topology import discover

from .fakecompat import use
from .fakegpu import BOX_ADDRS, add_nvidia_gpu, box_gpus, container, eight_gpu_box
from .fakesys import one_node

pytestmark = pytest.mark.usefixtures("fresh_compat")     # the compat cache reset around each test

NODE0 = "sys/devices/system/node/node0/cpulist"
QUOTED = 48   # numabind.cpulist.QUOTED: the most characters of a list its error quotes
#: A terminal escape (clear screen, set the window title) and a bidi override, then thousands of characters.
HOSTILE = "\x1b[2J\x1b]0;owned\x07\u202e" + "1," * 2500


def _no_control(text: str) -> bool:
    return all(c.isprintable() for c in text)


# ----------------------------------------------------------------------------- cpulist quotes
@pytest.mark.parametrize("parse", [parse_cpulist, parse_mask])
def test_a_long_hostile_list_is_quoted_short_and_printable(parse):
    assert len(HOSTILE) > 5000
    with pytest.raises(PlanError) as got:
        parse(HOSTILE)
    message = str(got.value)
    assert _no_control(message)
    assert "1," * (QUOTED // 2 + 1) not in message          # at most QUOTED characters of the list
    assert len(message) < 400
    assert f"... ({len(HOSTILE)} characters)" in message
    assert message.count("'\\x1b[2J\\x1b]0;owned\\x07\\u202e") >= 1   # its start, escaped as repr escapes it


def test_a_hostile_cpulist_of_a_replayed_machine_is_quoted_short(tmp_path):
    one_node(tmp_path)
    (tmp_path / NODE0).write_text(HOSTILE + "\n")
    with pytest.raises(NumabindError) as got:
        numabind.discover(root=str(tmp_path))
    message = str(got.value)
    assert _no_control(message)
    assert "1," * (QUOTED // 2 + 1) not in message
    assert len(message) < 600


def test_a_short_list_is_still_quoted_whole():
    with pytest.raises(PlanError, match=r"^cpulist '0-3\\n8': cannot parse '0-3\\n8'"):
        parse_cpulist("0-3\n8")


# ----------------------------------------------------------------------------- device nodes
def _link_out(root, rel: str, outside, mode: int) -> None:
    """``root/rel`` becomes a link to the absolute path ``outside/<name>``, a file of ``mode``; the same path
    inside the root (what a chroot at the root would reach) holds a file of mode 000."""
    name = os.path.basename(rel)
    target = os.path.join(outside, name)
    os.makedirs(outside, exist_ok=True)
    with open(target, "w"):
        pass
    os.chmod(target, mode)
    mirror = os.path.join(root, target.lstrip("/"))
    os.makedirs(os.path.dirname(mirror), exist_ok=True)
    with open(mirror, "w"):
        pass
    os.chmod(mirror, 0o000)
    path = os.path.join(root, rel)
    os.remove(path)
    os.symlink(target, path)


@pytest.mark.parametrize("how", ["absolute", "climbing"])
def test_a_device_node_linking_out_of_the_root_is_judged_inside_it(tmp_path, how):
    root, outside = tmp_path / "root", str(tmp_path / "outside")
    eight_gpu_box(root, "nvidia")
    container(root, "nvidia", [0, 1, 2, 3], style="cdi")      # device nodes decide: nvidia0-3
    (root / "dev/nvidia5").touch()
    _link_out(str(root), "dev/nvidia5", outside, 0o666)      # open to all outside the root
    if how == "climbing":                                    # ../../outside/nvidia5: above the root
        os.remove(root / "dev/nvidia5")
        os.symlink(os.path.relpath(os.path.join(outside, "nvidia5"), root / "dev"), root / "dev/nvidia5")
    assert [g.pci_address for g in box_gpus(str(root))] == list(BOX_ADDRS[:4])


def test_a_device_node_linked_inside_the_root_still_counts(tmp_path):
    root = tmp_path / "root"
    eight_gpu_box(root, "nvidia")
    container(root, "nvidia", [0, 1, 2, 3], style="cdi")
    os.makedirs(root / "dev/real")
    (root / "dev/real/nvidia5").touch()
    os.chmod(root / "dev/real/nvidia5", 0o666)
    os.symlink("real/nvidia5", root / "dev/nvidia5")
    assert [g.pci_address for g in box_gpus(str(root))] == [*BOX_ADDRS[:4], BOX_ADDRS[5]]


# ----------------------------------------------------------------------------- SGLang's node1
@pytest.mark.parametrize("how", ["absolute", "climbing"])
def test_sglangs_node1_check_never_follows_a_link_out_of_the_root(tmp_path, monkeypatch, how):
    monkeypatch.setattr(sglang, "_can_set_mempolicy", lambda: True)
    root, outside = tmp_path / "root", tmp_path / "outside"
    one_node(root, ncpus=4)
    add_nvidia_gpu(root, "0000:18:00.0", numa_node=0)
    use(discover(str(root)))
    assert sglang._is_numa_available() is False             # one node: the control
    elsewhere = outside / "sys/devices/system/node/node1"
    elsewhere.mkdir(parents=True)                            # a node1 directory outside the root
    link = root / "sys/devices/system/node/node1"
    os.symlink(str(elsewhere) if how == "absolute" else os.path.relpath(elsewhere, link.parent), link)
    assert os.path.isdir(link)                               # what the old check followed
    assert sglang._is_numa_available() is False


# ----------------------------------------------------------------------------- one discover(): each directory once
def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_discovery_resolves_each_directory_once_and_closes_them(tmp_path, monkeypatch):
    """discover() of a replayed root walks from the root only where a link is on the way, not once per file
    (the cost that made P4 three times slower), reads what a walk per file reads, and keeps no descriptor."""
    from numabind import _fs

    from .fakesys import RecordingReader, snc

    snc(tmp_path, sockets=2, nodes_per_socket=2, cores_per_node=4, smt=True)
    os.symlink("node0", tmp_path / "sys/devices/system/node/alias")   # a link inside the root: still followed
    walks = []
    real_walk = _fs._walk
    monkeypatch.setattr(_fs, "_walk", lambda root, rel: walks.append(rel) or real_walk(root, rel))
    before = _open_fds()
    recorder = RecordingReader(str(tmp_path))
    held = numabind.topology.discover_from(recorder).to_dict()
    assert _open_fds() == before
    assert len(recorder.reads) > 100 and len(walks) < 10, walks[:20]
    # the same answers as reading every file through a walk of its own (no directory held)
    walks.clear()
    monkeypatch.setattr(_fs.FsReader, "hold_dirs", lambda self: None)
    assert numabind.topology.discover_from(RecordingReader(str(tmp_path))).to_dict() == held
    assert len(walks) > 100


def test_a_held_reader_never_leaves_the_root(tmp_path):
    from numabind._fs import FsReader

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "d/real").mkdir(parents=True)
    (root / "d/real/f").write_text("inside\n")
    outside.mkdir()
    (outside / "f").write_text("SECRET\n")
    os.symlink(str(outside), root / "d/out")                          # a directory linking out
    os.symlink(str(outside / "f"), root / "d/real/g")                 # a file linking out
    os.symlink("real", root / "d/in")                                 # a directory linking in
    reader = FsReader(str(root))
    reader.hold_dirs()
    try:
        assert reader.read("d/out/f") is None and reader.read("d/real/g") is None
        assert reader.read("d/in/f") == "inside\n" and reader.read("d/real/f") == "inside\n"
        assert reader.listdir("d/out") == [] and reader.listdir("d/in") == ["f", "g"]
        assert reader.stat("d/real/g") is None and reader.isdir("d/in") and not reader.isdir("d/out")
        assert reader.numbered("d", "re") == []
    finally:
        reader.release_dirs()
    assert reader._dirs is None
