"""Hostile input to ``numabind gather``: what ``-o`` names (a directory, a symbolic link, a shared folder, a missing
folder) and what a replayed ``--root`` holds (a FIFO, a link out of the root, a file over the caps, many files)."""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path

import pytest

import numabind.gather as gathering
from numabind.errors import NumabindError
from numabind.gather import gather

from .fakesys import FACTORIES
from .vm.cases.gather import archive_members

pytestmark = pytest.mark.usefixtures("no_gpu_env")
SECRET = b"SECRET-MARKER-7f3a"


def _machine(tmp_path: Path, name: str = "m") -> Path:
    machine = tmp_path / name
    FACTORIES["one_node"](machine)
    return machine


def _why(result: gathering.GatherResult) -> dict[str, str]:
    return {item.path: item.why for item in result.left_out}


# ----------------------------------------------------------------------------- what -o names
def test_an_existing_directory_is_refused_before_gathering_with_the_fix(tmp_path, monkeypatch):
    out = tmp_path / "d.tar.bz2"
    out.mkdir()
    monkeypatch.setattr(gathering, "discover_from", lambda *a, **k: pytest.fail("gathered before refusing"))
    with pytest.raises(NumabindError, match=r"'.*d\.tar\.bz2': it is a directory; give -o a file in it, e\.g\. -o "):
        gather(out, root=_machine(tmp_path), env={})
    assert out.is_dir() and list(out.iterdir()) == [] and list(tmp_path.glob(".numabind-gather-*")) == []


def test_a_symlink_is_replaced_never_written_through(tmp_path):
    target = tmp_path / "elsewhere" / "victim.tar.bz2"
    target.parent.mkdir()
    target.write_bytes(b"untouched")
    link = tmp_path / "out.tar.bz2"
    link.symlink_to(target)
    gather(link, root=_machine(tmp_path), env={})
    assert target.read_bytes() == b"untouched"
    assert not link.is_symlink() and tarfile.is_tarfile(link)


def test_a_missing_folder_is_refused_with_the_fix(tmp_path):
    with pytest.raises(NumabindError, match=r"the folder .*'.*nowhere' does not exist; create it or give -o"):
        gather(tmp_path / "nowhere" / "m.tar.bz2", root=_machine(tmp_path), env={})
    assert not (tmp_path / "nowhere").exists()


def test_in_a_shared_folder_the_temp_file_is_private_unguessable_and_beside_the_archive(tmp_path, monkeypatch):
    """A folder anyone may write (like /tmp): the archive is written to a file mkstemp made there (O_EXCL, mode
    0o600, a random name, so no one can plant it first), then moved over the name; a planted link is replaced."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    planted = tmp_path / "planted"
    planted.write_bytes(b"someone else's")
    (shared / "m.tar.bz2").symlink_to(planted)
    seen: list[tuple[str, int]] = []
    real_open = tarfile.open

    def watching(name, *args, **kwargs):
        if str(name).endswith(gathering.SUFFIX) and "numabind-gather-" in os.path.basename(str(name)):
            seen.append((str(name), stat.S_IMODE(os.lstat(name).st_mode)))
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr(tarfile, "open", watching)
    gather(shared / "m.tar.bz2", root=_machine(tmp_path), env={})
    (tmp, mode), *_ = seen
    assert os.path.dirname(tmp) == str(shared) and os.path.basename(tmp).startswith(".numabind-gather-")
    assert mode == 0o600 and not os.path.exists(tmp)
    assert planted.read_bytes() == b"someone else's" and not (shared / "m.tar.bz2").is_symlink()
    assert stat.S_IMODE(os.stat(shared / "m.tar.bz2").st_mode) == 0o644


def test_the_temp_file_is_removed_when_the_move_fails(tmp_path, monkeypatch):
    def refused(src, dst):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(NumabindError, match=r"cannot write the archive .*m\.tar\.bz2.*Operation not permitted; give -o"):
        gather(tmp_path / "m.tar.bz2", root=_machine(tmp_path), env={})
    assert list(tmp_path.glob("*.tar.bz2")) == [] and list(tmp_path.glob(".numabind-gather-*")) == []


# ----------------------------------------------------------------------------- what a replayed root holds
def test_a_fifo_in_the_root_is_left_out_and_said_not_opened(tmp_path):
    machine = _machine(tmp_path)
    os.mkfifo(machine / "proc" / "hwloc-nofile-info")          # read for hwloc only: not needed to replay
    os.mkfifo(machine / "sys" / "devices" / "system" / "node" / "node0" / "fifo")   # in a folder copied whole
    result = gather(tmp_path / "m.tar.bz2", root=machine, env={})     # a FIFO opened would block here forever
    assert "is a FIFO, not a regular file" in _why(result)["proc/hwloc-nofile-info"]
    assert not any(name.endswith(("hwloc-nofile-info", "/fifo")) for name in archive_members(tmp_path / "m.tar.bz2"))
    assert result.differences == ()


def test_a_fifo_discovery_needs_is_refused_naming_it(tmp_path):
    machine = _machine(tmp_path)
    cpulist = machine / "sys" / "devices" / "system" / "node" / "node0" / "cpulist"
    cpulist.unlink()
    os.mkfifo(cpulist)
    with pytest.raises(NumabindError, match=r"node0/cpulist is a FIFO, not a regular file.*check the root"):
        gather(tmp_path / "m.tar.bz2", root=machine, env={})
    assert list(tmp_path.glob("*.tar.bz2")) == []


def test_a_link_out_of_the_root_never_brings_its_target_in(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_bytes(SECRET + b"\n")
    machine = _machine(tmp_path)
    (machine / "proc" / "meminfo").unlink(missing_ok=True)
    (machine / "proc" / "meminfo").symlink_to(secret)                       # absolute
    node0 = machine / "sys" / "devices" / "system" / "node" / "node0"
    (node0 / "leak").symlink_to(os.path.relpath(secret, node0))             # relative, climbing out
    (machine / "proc" / "self" / "cgroup").unlink(missing_ok=True)
    (machine / "proc" / "self" / "cgroup").symlink_to("../../../secret.txt")
    gather(tmp_path / "m.tar.bz2", root=machine, env={})
    members = archive_members(tmp_path / "m.tar.bz2")
    assert not [name for name, data in members.items() if data is not None and SECRET in data]
    with tarfile.open(tmp_path / "m.tar.bz2") as tar:
        links = [(m.name, m.linkname) for m in tar.getmembers() if m.issym() or m.islnk()]
    assert not [link for link in links if "secret" in link[1] or link[1].startswith("/")], links


@pytest.mark.parametrize("size, said", [
    (5 << 20, "larger than 4 MiB, the most one file may take; the archive holds only its first 8 KiB"),
    (9 << 20, "not copied: is larger than 8388608 bytes; no sysfs or procfs file discovery reads is that large; "
              "the archive holds only its first 8 KiB"),
])
def test_a_huge_file_is_left_out_and_said(tmp_path, size, said):
    machine = _machine(tmp_path)
    (machine / "proc" / "cpuinfo").write_bytes(b"processor\t: 0\n" + b"x" * size)
    result = gather(tmp_path / "m.tar.bz2", root=machine, env={})
    assert _why(result)["proc/cpuinfo"] == said
    assert len(archive_members(tmp_path / "m.tar.bz2")["m/proc/cpuinfo"]) <= 8192
    assert "left out (" + said in result.describe()


def test_many_files_stop_at_the_total_cap_and_say_so(tmp_path):
    machine = _machine(tmp_path)
    node0 = machine / "sys" / "devices" / "system" / "node" / "node0"
    for i in range(400):
        (node0 / f"extra{i:03}").write_bytes(b"y" * 1000)
    result = gather(tmp_path / "m.tar.bz2", root=machine, env={}, max_bytes=64 << 10)
    capped = [path for path, why in _why(result).items() if why == "the archive reached its cap of 64 KiB"]
    assert len(capped) > 300
    copied = [data for name, data in archive_members(tmp_path / "m.tar.bz2").items()
              if data is not None and "/numabind/" not in name]
    assert sum(len(data) for data in copied) <= 64 << 10
    assert result.differences == ()
