"""A directory root is read as a chroot would read it: no link leads out of it (issue 41 §2).

Links out of the tree, at every depth, absolute or climbing with ``..``, never reach a file outside it;
links inside it (sysfs's own relative links, absolute ones taken from the root) read as before; and an
error quotes a short, printable excerpt of a file, never 200 characters of it.
"""

from __future__ import annotations

import os
import shutil

import pytest

import numabind
from numabind._fs import FsReader
from numabind.errors import NumabindError

from .fake.machines import two_sockets

SECRET = "SECRET" + "x" * 300
EXCERPT = 40   # numabind._base.EXCERPT: the most characters of a file an error quotes (pinned here)
NODE0 = "sys/devices/system/node/node0/cpulist"


def _discovered(root) -> str:
    """What discovery of ``root`` gives: the topology as text, or the error's message."""
    try:
        return repr(numabind.discover(root=str(root)).to_dict())
    except NumabindError as e:
        return f"error: {e}"


@pytest.fixture
def trees(tmp_path):
    """(root, outside): a two-socket machine, and a copy of it outside the root whose node0 cpulist,
    process status and meminfo hold the secret."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    two_sockets(root)
    shutil.copytree(root, outside, symlinks=True)
    for rel in (NODE0, "proc/self/status", "sys/devices/system/node/node0/meminfo"):
        (outside / rel).write_text(SECRET + "\n")
    return root, outside


def _link(root, rel, target) -> None:
    path = root / rel
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    os.symlink(target, path)


@pytest.mark.parametrize("rel", [NODE0, "proc/self/status", "sys/devices/system/node/node0",
                                 "sys/devices/system/node", "sys/devices", "sys", "proc/self", "proc"])
@pytest.mark.parametrize("how", ["absolute", "climbing"])
def test_links_out_of_the_root_are_never_read(trees, rel, how):
    root, outside = trees
    depth = rel.count("/")
    target = str(outside / rel) if how == "absolute" else "../" * (depth + 1) + "outside/" + rel
    _link(root, rel, target)
    assert os.path.exists(root / rel)                 # the link works for anyone following it
    seen = _discovered(root)
    assert "SECRET" not in seen
    reader = FsReader(root)
    for file in (NODE0, "proc/self/status"):
        assert "SECRET" not in (reader.read(file) or "")
    assert "SECRET" not in repr(reader.listdir(os.path.dirname(NODE0)))


def test_listing_and_realpath_stay_inside(trees):
    root, outside = trees
    (outside / "sys/devices/system/node/node7").mkdir()
    _link(root, "sys/devices/system/node", str(outside / "sys/devices/system/node"))
    reader = FsReader(root)
    assert "node7" not in reader.listdir("sys/devices/system")  + reader.listdir("sys/devices/system/node")
    assert reader.numbered("sys/devices/system/node", "node") == []
    assert not reader.exists("sys/devices/system/node/node7")
    _link(root, "sys/bus", "../../outside/sys")
    assert reader.realpath("sys/bus") is None or not reader.realpath("sys/bus").startswith(str(outside))


def test_links_inside_the_root_still_work(trees):
    root, _ = trees
    before = _discovered(root)
    # sysfs's kind of relative link, and an absolute one read from the root as a chroot would
    (root / "x").mkdir()
    shutil.move(root / NODE0, root / "x/cpulist0")
    _link(root, NODE0, "../../../../../x/cpulist0")
    status = root / "proc/self/status"
    shutil.move(status, root / "x/status")
    _link(root, "proc/self/status", "/x/status")
    node = root / "sys/devices/system/node/node1"
    shutil.move(node, root / "x/node1")
    _link(root, "sys/devices/system/node/node1", "../../../../x/./node1/../node1")
    assert _discovered(root) == before
    reader = FsReader(root)
    assert reader.realpath("sys/devices/system/node/node1") == "/x/node1"
    assert reader.isdir("sys/devices/system/node/node1") and "cpulist" in reader.listdir(
        "sys/devices/system/node/node1")


def test_dot_dot_above_the_root_and_loops_are_refused(trees):
    root, _ = trees
    reader = FsReader(root)
    assert reader.read("../outside/" + NODE0) is None
    assert reader.read("sys/../../outside/" + NODE0) is None
    _link(root, "loop", "loop")
    assert reader.read("loop") is None and reader.listdir("loop") == []


def test_a_parse_error_quotes_a_short_printable_excerpt(trees):
    root, _ = trees
    hostile = "\x1b[2J\u202e" + "y" * 300
    (root / NODE0).write_text(hostile + "\n")
    with pytest.raises(NumabindError) as got:
        numabind.discover(root=str(root))
    message = str(got.value)
    assert "\x1b" not in message and "\u202e" not in message
    quoted = message.rpartition("(content: ")[2]        # what the reader quotes of the file
    assert quoted.startswith("'?[2J?" + "y" * (EXCERPT - 5) + "'... (305 characters)")
    assert "y" * (EXCERPT + 1) not in quoted


def test_a_link_to_a_missing_target_resolves_as_realpath_does_inside_the_root(tmp_path):
    """A dump keeps a class link whose target directory it did not capture (sys/class/net/X ->
    ../../devices/.../net/X): the device is still found by the path, as os.path.realpath finds it; what climbs
    above the root stays inside it, and a path missing before any link is None."""
    (tmp_path / "sys" / "class" / "net").mkdir(parents=True)
    (tmp_path / "sys" / "devices" / "pci0000:19" / "0000:19:00.0").mkdir(parents=True)
    os.symlink("../../devices/pci0000:19/0000:19:00.0/net/ens1", tmp_path / "sys" / "class" / "net" / "ens1")
    os.symlink("../../../../../../../etc/x", tmp_path / "sys" / "class" / "net" / "up")
    r = FsReader(tmp_path)
    assert r.realpath("sys/class/net/ens1") == "/sys/devices/pci0000:19/0000:19:00.0/net/ens1"
    assert r.realpath("sys/class/net/up") is None               # '..' above the root: refused, never followed
    assert r.realpath("sys/class/block/nvme0n1") is None        # missing before any link
