"""numabind._fs: roots (directories, hwloc-gather-topology tarballs, unpacked safely),
bounded reads that never hang, NUL padding, ASCII-only integers, the one ``key: value`` parser."""

from __future__ import annotations

import errno
import io
import os
import stat
import subprocess
import sys
import tarfile
import textwrap
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from numabind import _dump, _fs
from numabind._fs import FsReader, ascii_int, key_values, resolve_root
from numabind.errors import NumabindError
from numabind.topology import discover

from .fakesys import two_sockets

REPO = Path(__file__).resolve().parent.parent
CPU = "sys/devices/system/cpu"


def tar_of(root: Path, dest: Path, top: str = "dump") -> Path:
    """``root``'s tree as hwloc-gather-topology packs it: one top directory ``top``."""
    with tarfile.open(dest, "w:bz2") as tf:
        tf.add(root, arcname=top)
    return dest


def add_member(tf: tarfile.TarFile, name: str, data: bytes = b"", **attrs) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in attrs.items():
        setattr(info, key, value)
    tf.addfile(info, io.BytesIO(data) if data else None)


# -- ascii_int -------------------------------------------------------------------------


@pytest.mark.parametrize("text,expected", [
    ("0", 0), (" 42\n", 42), ("007", 7), ("-1", None), ("+5", None), ("1_000", None),
    ("²", None), ("١٢", None), ("", None), ("1 2", None), ("9" * 21, None), ("0x10", None),
])
def test_ascii_int(text, expected):
    assert ascii_int(text) == expected


def test_ascii_int_signed():
    assert ascii_int("-1", signed=True) == -1
    assert ascii_int("--1", signed=True) is None
    assert ascii_int("-²", signed=True) is None


# -- reads -----------------------------------------------------------------------------


# --------------------------------------------------------------------------- key: value lines
_KEY = st.text(st.characters(blacklist_characters=":\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
               min_size=1).map(str.strip).filter(bool)
_VALUE = st.text(st.characters(blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"))
_PAD = st.sampled_from(["", " ", "\t", " \t "])


@given(st.lists(st.tuples(_KEY, _VALUE, _PAD, _PAD), max_size=12))
def test_key_values_reads_back_what_was_written(fields):
    """Any keys (no colon, no line break) and values (colons allowed), padded with blanks: the first of
    each key comes back, both sides trimmed."""
    text = "".join(f"{pad_k}{k}{pad_v}:{pad_v}{v}{pad_k}\n" for k, v, pad_k, pad_v in fields)
    expected: dict[str, str] = {}
    for k, v, _, _ in fields:
        expected.setdefault(k, v.strip())
    assert key_values(text) == expected


@given(st.text())
def test_key_values_never_fails_and_keeps_trimmed_keys(text):
    out = key_values(text)
    for key, value in out.items():
        assert key == key.strip() and value == value.strip() and ":" not in key


@given(st.lists(st.tuples(_KEY, _VALUE), min_size=1, max_size=6),
       st.lists(st.tuples(_KEY, _VALUE), max_size=6), st.sampled_from(["", "   ", "\t"]))
def test_key_values_first_block_ends_at_the_first_blank_line(first, rest, blank):
    text = "\n" + "".join(f"{k}: {v}\n" for k, v in first) + blank + "\n" + "".join(f"{k}: {v}\n" for k, v in rest)
    expected: dict[str, str] = {}
    for k, v in first:
        expected.setdefault(k, v.strip())
    assert key_values(text, first_block=True) == expected
    assert key_values(text).items() >= expected.items()


@pytest.mark.parametrize("text,expected", [
    ("Name:\tpython3\nCpus_allowed_list:\t0-3,8\n", {"Name": "python3", "Cpus_allowed_list": "0-3,8"}),
    ("policy: bind\npreferred node: 0\nphyscpubind: 0 1 \n", {"policy": "bind", "preferred node": "0",
                                                                   "physcpubind": "0 1"}),
    ("Model: \t\t NVIDIA H100\nBus Location: \t 0000:18:00.0\n", {"Model": "NVIDIA H100",
                                                                      "Bus Location": "0000:18:00.0"}),
    ("no colon here\n\nkey:\n", {"key": ""}),
    ("a: 1\na: 2\n", {"a": "1"}),
])
def test_key_values_of_real_files(text, expected):
    assert key_values(text) == expected


@pytest.fixture(params=["core", "os.read", "prefetch"])
def read_by(request, monkeypatch):
    """Run a read test three ways: by the compiled core's nb_read_file (files up to SMALL_READ bytes), by
    os.read (larger files, or no compiled core), and by a prefetch of the file (nb_read_tree) before each
    read, which must then answer from what was prefetched (once) just as a read of its own would."""
    if request.param == "os.read":
        monkeypatch.setattr(_fs, "_core", None)
        monkeypatch.setattr(_fs, "_core_tried", True)
        return request.param
    assert _fs._load_core() is not None, "the compiled core is not built"
    if request.param == "prefetch":
        plain = FsReader.read

        def read(self, rel, limit=None):
            base, _, name = rel.rpartition("/")
            self.prefetch_numbered(base, [name], "none", "x", ())
            key = rel
            held = self._pre is not None and key in self._pre
            text = plain(self, rel, limit)
            assert not held or limit is not None or key not in self._pre   # answered from the prefetch
            return text

        monkeypatch.setattr(FsReader, "read", read)
    return request.param


def test_small_files_are_read_by_the_core_and_large_ones_whole(tmp_path, monkeypatch):
    core = _fs._load_core()
    assert core is not None
    calls = []

    def counted(path, buf, cap):
        calls.append(path)
        return core[1](path, buf, cap)

    monkeypatch.setattr(_fs, "_core", (core[0], counted, *core[2:]))
    r = FsReader(tmp_path)
    for size in (0, 1, _fs.SMALL_READ - 1, _fs.SMALL_READ, _fs.SMALL_READ + 1, 3 * _fs.SMALL_READ):
        body = "".join(str(i % 10) for i in range(size))
        (tmp_path / f"f{size}").write_text(body)
        calls.clear()
        assert r.read(f"f{size}") == body, size
        assert calls == [os.fsencode(tmp_path / f"f{size}")]      # the core was asked first, every time
    assert r.read("f1", limit=1) == "0" and len(calls) == 1       # a prefix is read by os.read


def test_read_stops_at_the_first_nul(tmp_path, read_by):
    (tmp_path / "f").write_bytes(b"0-3\n\0\0\0garbage")
    r = FsReader(tmp_path)
    assert r.read("f") == "0-3\n"
    assert r.read_strip("f") == "0-3"
    (tmp_path / "g").write_bytes(b"\0")
    assert r.read("g") == ""


def test_read_int_is_ascii_only(tmp_path, read_by):
    r = FsReader(tmp_path)
    for name, text, value in [("a", "12\n", 12), ("b", "-1\n", -1), ("c", "0x1f\n", 31),
                              ("d", "²\n", None), ("e", "0x\n", None), ("f", "5" * 5000, None),
                              ("g", "0x" + "f" * 100, None)]:
        (tmp_path / name).write_text(text)
        assert r.read_int(name) == value, name


def test_fifo_is_refused_without_blocking(tmp_path, read_by):
    os.mkfifo(tmp_path / "fifo")
    r = FsReader(tmp_path)
    with pytest.raises(NumabindError, match="is a FIFO, not a regular file"):
        r.read("fifo")


def test_link_to_a_device_is_refused(tmp_path, read_by):
    """An absolute link is resolved from the root, as a chroot would: ``/dev/zero`` is ``ROOT/dev/zero``,
    missing here, never this machine's device; a device inside the root is refused."""
    os.symlink("/dev/zero", tmp_path / "zero")
    assert FsReader(tmp_path).read("zero") is None
    (tmp_path / "dev").mkdir()
    try:
        os.mknod(tmp_path / "dev" / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except PermissionError:      # CAP_MKNOD (root has it): the refusal of a device is also covered below
        return
    with pytest.raises(NumabindError, match=r"zero is a character device"):
        FsReader(tmp_path).read("zero")


def test_a_directory_is_refused(tmp_path, read_by):
    (tmp_path / "d").mkdir()
    with pytest.raises(NumabindError, match="is a directory"):
        FsReader(tmp_path).read("d")


def test_reads_are_capped(tmp_path, monkeypatch, read_by):
    monkeypatch.setattr(_fs, "MAX_READ", 1000)
    (tmp_path / "big").write_bytes(b"1" * 5000)
    (tmp_path / "over").write_bytes(b"1" * 1001)      # small enough for one read of the core, but over the cap
    (tmp_path / "ok").write_bytes(b"2" * 1000)
    r = FsReader(tmp_path)
    for name in ("big", "over"):
        with pytest.raises(NumabindError, match="larger than"):
            r.read(name)
    assert r.read("ok") == "2" * 1000
    assert r.read("big", limit=10) == "1" * 10        # a wanted prefix is not an error


def test_read_of_a_long_file_is_whole(tmp_path, read_by):
    body = "".join(f"processor\t: {n}\nmodel name\t: X\n\n" for n in range(20000))
    (tmp_path / "cpuinfo").write_text(body)
    assert FsReader(tmp_path).read("cpuinfo") == body


def test_missing_file_and_bad_names(tmp_path, read_by):
    r = FsReader(tmp_path)
    assert r.read("nope") is None
    assert r.read("a\0b") is None
    assert r.listdir("nope") == [] and r.listdir("a\0b") == []


# -- read_bounded: the one bounded, non-blocking read (FsReader, /proc/PID/environ, records) ----------


@pytest.mark.parametrize("make, kind", [
    (lambda p: os.mkfifo(p), "a FIFO"),
    (lambda p: os.mkdir(p), "a directory"),
    (lambda p: os.symlink("/dev/null", p), "a character device"),
])
def test_read_bounded_refuses_what_is_not_a_regular_file_before_reading(tmp_path, make, kind):
    make(tmp_path / "x")
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for how in ({"path": str(tmp_path / "x")}, {"path": "x", "dir_fd": dir_fd}):
            with pytest.raises(_fs.RefusedFile, match=f"x is {kind}, not a regular file") as got:
                _fs.read_bounded(how["path"], 100, dir_fd=how.get("dir_fd"))
            assert got.value.why == "kind" and isinstance(got.value, NumabindError)
    finally:
        os.close(dir_fd)


def test_read_bounded_follows_a_link_only_when_asked(tmp_path):
    (tmp_path / "real").write_bytes(b"data")
    os.symlink("real", tmp_path / "link")
    assert _fs.read_bounded(str(tmp_path / "link"), 100) == b"data"
    with pytest.raises(OSError) as got:
        _fs.read_bounded(str(tmp_path / "link"), 100, nofollow=True)
    assert got.value.errno == errno.ELOOP
    assert _fs.read_bounded(str(tmp_path / "real"), 100, nofollow=True) == b"data"


def test_read_bounded_refuses_a_file_of_another_owner(tmp_path):
    (tmp_path / "f").write_bytes(b"mine")
    assert _fs.read_bounded(str(tmp_path / "f"), 100, uid=os.geteuid()) == b"mine"
    with pytest.raises(_fs.RefusedFile, match=f"belongs to uid {os.geteuid()}, not {os.geteuid() + 1}") as got:
        _fs.read_bounded(str(tmp_path / "f"), 100, uid=os.geteuid() + 1)
    assert got.value.why == "owner"


def test_read_bounded_caps_files_on_disk_and_in_procfs(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 200_000)
    assert _fs.read_bounded(str(tmp_path / "f"), 200_000) == b"x" * 200_000       # several reads, whole
    with pytest.raises(_fs.RefusedFile, match="is larger than 199999 bytes") as got:
        _fs.read_bounded(str(tmp_path / "f"), 199_999)
    assert got.value.why == "size"
    assert _fs.read_bounded(str(tmp_path / "f"), 7, prefix=True) == b"x" * 7
    with open("/proc/self/status", "rb") as f:           # size 0 in stat: only reading finds the end
        head = f.read(6)
    assert os.stat("/proc/self/status").st_size == 0 and head == b"Name:\t"
    with pytest.raises(_fs.RefusedFile, match="larger than 6 bytes"):
        _fs.read_bounded("/proc/self/status", 6)
    assert _fs.read_bounded("/proc/self/status", 6, prefix=True) == head
    assert _fs.read_bounded("/proc/self/status", 1 << 20).startswith(head)


def test_read_bounded_passes_the_kernels_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        _fs.read_bounded(str(tmp_path / "nope"), 10)
    with pytest.raises(ValueError):
        _fs.read_bounded("a\0b", 10)


def test_environ_value_reads_a_process_environment_through_the_bounded_read(monkeypatch):
    from numabind import _proc

    env = {**os.environ, "NUMABIND_TEST_ENV": "yes=it is", "OTHER": "x"}
    with subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env) as child:
        try:
            # until the child has exec'd, /proc/PID/environ is the forked parent's: wait for its first line
            assert child.stdout.readline() == b"up\n"
            assert _proc.environ_value(child.pid, "NUMABIND_TEST_ENV") == "yes=it is"
            assert _proc.environ_value(child.pid, "NUMABIND_TEST_ENV_MISSING") is None
            assert _proc.environ_value(child.pid, "NUMABIND_TEST") is None       # a prefix of a name is not it
            monkeypatch.setattr(_proc, "ENVIRON_MAX", 16)
            assert _proc.environ_value(child.pid, "NUMABIND_TEST_ENV") is None   # over the cap: not looked in
        finally:
            child.stdin.close()


def test_private_files_are_read_through_the_bounded_read(tmp_path):
    from numabind import records

    os.mkfifo(tmp_path / "fifo")
    os.symlink("ok", tmp_path / "link")
    (tmp_path / "ok").write_bytes(b"{}")
    (tmp_path / "big").write_bytes(b"x" * 101)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    me = os.geteuid()
    try:
        assert records.read_private_file(fd, "ok", me, 100) == b"{}"
        assert records.read_private_file(fd, "missing", me, 100) is None
        for name, uid, err, says in [("fifo", me, errno.EPERM, "is a FIFO"), ("link", me, errno.ELOOP, "symbolic link"),
                                     ("ok", me + 1, errno.EPERM, "belongs to uid"),
                                     ("big", me, errno.EFBIG, "larger than 100 bytes")]:
            with pytest.raises(records.UnsafeFileError, match=says) as got:
                records.read_private_file(fd, name, uid, 100)
            assert got.value.errno == err, name
    finally:
        os.close(fd)


def test_only_fs_reads_files():
    """The bounded read is written once: no module of the package but _fs calls os.read."""
    import ast

    src = REPO / "src" / "numabind"
    readers = set()
    for path in src.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr in ("read", "pread", "readv")
                    and isinstance(node.value, ast.Name) and node.value.id == "os"):
                readers.add(str(path.relative_to(src)))
    # pools: its locked slot table, read and rewritten through one descriptor.
    assert readers <= {"_fs.py", "process/pools.py"}, readers


def test_numbered_takes_ascii_ids_only(tmp_path, read_by):
    for name in ("node0", "node12", "node²", "node٣", "node01", "node00", "nodex", "node", "cpulist",
                 "node-1", "node" + "9" * 30, "node123456789", "node1234567890", "node7 ", "xnode3"):
        (tmp_path / name).mkdir()
    os.mkdir(os.path.join(os.fsencode(tmp_path), b"node\xff4"))      # not UTF-8
    r = FsReader(tmp_path)
    assert r.numbered(".", "node") == [0, 12, 123456789]
    many = tmp_path / "many"
    many.mkdir()
    for i in range(300):                        # more than one buffer's worth
        (many / f"cpu{i}").write_text("")
    assert r.numbered("many", "cpu") == list(range(300))
    (tmp_path / "file").write_text("node1")
    assert r.numbered("file", "node") == [] and r.numbered("missing", "node") == [] and r.numbered("a\0b", "x") == []


# -- prefetching the files of a directory and of its numbered subdirectories (one call of the core) ------


def _tree(root: Path) -> None:
    """d/{f1, f2 (a NUL inside), big, fifo, utf8, latin1}, d/cache/index{0,1,7}/s, d/cache/other."""
    d = root / "d"
    for k in (0, 1, 7):
        (d / "cache" / f"index{k}").mkdir(parents=True)
        (d / "cache" / f"index{k}" / "s").write_text(f"s{k}\n")
    (d / "cache" / "other").mkdir()
    (d / "f1").write_text("a\n")
    (d / "f2").write_bytes(b"x\n\0yz")
    (d / "big").write_text("9" * (_fs.SMALL_READ + 10))
    (d / "utf8").write_text("Ünified ²\n")
    (d / "latin1").write_bytes(b"caf\xe9\n")
    os.mkfifo(d / "fifo")


NAMES = ["f1", "f2", "big", "utf8", "latin1", "missing", "fifo"]


def test_prefetch_lists_like_numbered_and_answers_each_read_once(tmp_path):
    _tree(tmp_path)
    plain, r = FsReader(tmp_path), FsReader(tmp_path)
    expected = {name: plain.read(f"d/{name}") for name in NAMES if name != "fifo"}
    assert r.prefetch_numbered("d", NAMES, "cache", "index", ["s", "t"], skip=1 << 1) == [0, 1, 7] \
        == plain.numbered("d/cache", "index")
    held = set(r._pre)
    for name in NAMES:                      # every file changes on disk after the prefetch
        if name != "fifo":
            (tmp_path / "d" / name).write_text("changed\n")
    for k in (0, 1, 7):
        (tmp_path / f"d/cache/index{k}/s").write_text("changed\n")
    for name in ("f1", "f2", "utf8", "latin1", "missing"):
        assert r.read(f"d/{name}") == expected[name], name          # what was read then, as read() reads it
        assert r.read(f"d/{name}") == "changed\n", name            # once: the next read is the file's own
    assert r.read("d/big") == "changed\n"                         # larger than one small read: left to read()
    with pytest.raises(NumabindError, match="fifo is a FIFO, not a regular file"):
        r.read("d/fifo")
    assert (r.read("d/cache/index0/s"), r.read("d/cache/index7/s")) == ("s0\n", "s7\n")
    assert "d/cache/index1/s" not in held and "d/cache/index7/s" in held   # bit 1 of skip: not read
    assert "d/cache/index0/t" in held                                       # missing, and said so once
    assert r.read("d/cache/index1/s") == "changed\n"


def test_prefetched_files_of_the_subdirectories_in_order(tmp_path):
    _tree(tmp_path)
    r = FsReader(tmp_path)
    r.prefetch_numbered("d", [], "cache", "index", ["s"])
    for k in (0, 1, 7):
        (tmp_path / f"d/cache/index{k}/s").write_text("changed\n")
    assert [r.read(f"d/cache/index{k}/s") for k in (7, 0, 1)] == ["s7\n", "s0\n", "s1\n"]
    assert r._pre == {}


def test_prefetch_is_dropped_by_forget_and_by_the_next_prefetch(tmp_path):
    _tree(tmp_path)
    r = FsReader(tmp_path)
    r.prefetch_numbered("d", ["f1"], "cache", "index", [])
    r.prefetch_numbered("d", ["f2"], "cache", "index", [])
    (tmp_path / "d/f1").write_text("new\n")
    (tmp_path / "d/f2").write_text("new\n")
    assert r.read("d/f1") == "new\n"                    # dropped by the second prefetch
    r.forget()
    assert r.read("d/f2") == "new\n"                    # dropped by forget()


def test_prefetch_of_a_root_directory_and_of_a_missing_one(tmp_path):
    _tree(tmp_path)
    r = FsReader(tmp_path / "d")
    assert r.prefetch_numbered("", ["f1"], "cache", "index", ["s"]) == [0, 1, 7]
    assert r._pre is not None and r._pre["f1"] == "a\n"
    assert r.prefetch_numbered("nope", ["f1"], "cache", "index", ["s"]) == []
    assert r.read("nope/f1") is None
    live = FsReader("/")
    before = {int(t) for t in os.listdir("/proc/self/task")}
    listed = live.prefetch_numbered("proc/self", ["comm"], "task", "", ["comm"])
    after = {int(t) for t in os.listdir("/proc/self/task")}
    assert threading.get_native_id() in listed and before & after <= set(listed) <= before | after
    assert live._pre is not None and "proc/self/comm" in live._pre


def test_prefetch_respects_the_read_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(_fs, "MAX_READ", 1000)
    d = tmp_path / "d"
    (d / "cache").mkdir(parents=True)
    (d / "over").write_bytes(b"1" * 1001 + b"\0")    # one read of the core, the text short, the file over the cap
    (d / "ok").write_bytes(b"2" * 1000)
    r = FsReader(tmp_path)
    r.prefetch_numbered("d", ["over", "ok"], "cache", "index", [])
    with pytest.raises(NumabindError, match="larger than"):
        r.read("d/over")
    assert r.read("d/ok") == "2" * 1000


def test_prefetch_beyond_one_call_is_left_to_read(tmp_path):
    d = tmp_path / "d"
    for k in range(_fs.BATCH_IDS + 36):                 # more entries than one call lists
        (d / "sub" / f"e{k}").mkdir(parents=True)
        (d / "sub" / f"e{k}" / "v").write_text(f"{k}\n")
    r = FsReader(tmp_path)
    assert r.prefetch_numbered("d", [], "sub", "e", ["v"]) == list(range(_fs.BATCH_IDS + 36))
    assert r._pre == {}                                  # none of theirs read, all still readable
    assert [r.read(f"d/sub/e{k}/v") for k in range(3)] == ["0\n", "1\n", "2\n"]
    for k in range(3):
        (d / "few" / f"e{k}").mkdir(parents=True)
        (d / "few" / f"e{k}" / "v").write_text(f"{k}\n")
    wide = [f"n{k}" for k in range(_fs.BATCH_FILES - 1)]
    assert r.prefetch_numbered("d", wide, "few", "e", ["v", "w"]) == [0, 1, 2]   # more files than one call reads
    assert len(r._pre) == _fs.BATCH_FILES and sum(key.endswith("/v") for key in r._pre) == 1
    for k in range(3):
        (d / "few" / f"e{k}" / "v").write_text("new\n")
    first = [r.read(f"d/few/e{k}/v") for k in range(3)]     # the one read in the call (the listing's first)
    assert first.count("new\n") == 2 and set(first) - {"new\n"} <= {"0\n", "1\n", "2\n"}
    assert [r.read(f"d/few/e{k}/v") for k in range(3)] == ["new\n"] * 3


def test_prefetch_without_the_core_or_with_a_nul_only_lists(tmp_path, monkeypatch):
    _tree(tmp_path)
    r = FsReader(tmp_path)
    assert r.prefetch_numbered("d", ["f1", "a\0b"], "cache", "index", ["s"]) == [0, 1, 7]
    assert r._pre is None
    r.prefetch_numbered("d", ["f1"], "cache", "index", ["s"])
    assert r.prefetch_numbered("d", ["f1"], "cache", "index", ["s\0"]) == [0, 1, 7] and r._pre is None
    assert r.prefetch_numbered("d", ["f1"], "cache\0", "index", ["s"]) == [] and r._pre is None
    monkeypatch.setattr(_fs, "_core", None)
    monkeypatch.setattr(_fs, "_core_tried", True)
    assert r.prefetch_numbered("d", ["f1"], "cache", "index", ["s"]) == [0, 1, 7]
    assert r._pre is None and r.read("d/f1") == "a\n"


def test_read_tree_in_the_core(tmp_path):
    """nb_read_tree's own contract: spans, codes, the listing, skip, the caps on files and on entries."""
    from numabind import _native

    ffi, lib = _native.ffi, _native.lib
    _tree(tmp_path)
    buf, out, ids = ffi.new("char[]", 64), ffi.new("long[]", 2 * 8 + 1), ffi.new("int[]", 8)
    names, sub, prefix, each = (ffi.new("char[]", b) for b in (b"f1\0f2\0missing\0fifo\0big\0", b"cache", b"index",
                                                                 b"s\0"))

    def what(count: int = 5):
        return ffi.new("struct nb_tree *", {"names": names, "count": count, "sub": sub, "prefix": prefix,
                                            "each": each, "per": 1})

    def room(idcap: int = 8, files: int = 8):
        return ffi.new("struct nb_tree_room *", {"ids": ids, "idcap": idcap, "buf": buf, "cap": 64, "slot": 32,
                                                 "out": out, "files": files})

    d = os.fsencode(tmp_path / "d")
    listed = lib.nb_read_tree(d, 1 << 1, what(), room())
    assert listed == 3 and sorted(ids[0:3]) == [0, 1, 7]
    spans = [(out[1 + 2 * k], out[2 + 2 * k]) for k in range(7)]
    assert out[0] == 2 + 5 + 3 + 3 and spans[:2] == [(0, 2), (2, 2)]       # f2: 5 bytes read, 2 up to its NUL
    assert spans[2] == (7, -errno.ENOENT) and spans[3] == (7, lib.NB_NOT_REGULAR - 1)   # S_IFIFO >> 12 == 1
    assert spans[4] == (7, lib.NB_RETRY)                                    # filled its 32 bytes: read it alone
    order = [i for i in ids[0:3] if i != 1]
    assert [ffi.string(buf + start, n) for start, n in spans[5:7]] == [f"s{k}\n".encode() for k in order]
    assert lib.nb_read_tree(d, 0, what(1), room(idcap=2)) == 3             # more entries than ids: none read below
    assert out[0] == 2
    assert lib.nb_read_tree(d, 0, what(2), room(files=3)) == 3 and out[0] == 2 + 5 + 3   # three files at most
    assert lib.nb_read_tree(os.fsencode(tmp_path / "nope"), 0, what(1), room()) == -errno.ENOENT
    assert out[2] == -errno.ENOENT


# -- roots -----------------------------------------------------------------------------


def test_missing_root_names_it(tmp_path):
    with pytest.raises(NumabindError, match=r"'.*/typo' does not exist"):
        FsReader(tmp_path / "typo")


def test_live_root():
    assert resolve_root("/") == "/"
    assert FsReader("/").is_live


def test_unpacked_dump_with_one_top_directory(tmp_path):
    two_sockets(tmp_path / "outer" / "mybox", 8)
    assert resolve_root(tmp_path / "outer") == str(tmp_path / "outer" / "mybox")
    outer, inner = discover(tmp_path / "outer"), discover(tmp_path / "outer" / "mybox")
    assert outer.root == str(tmp_path / "outer")
    assert (outer.nodes, outer.cpus, outer.caches) == (inner.nodes, inner.cpus, inner.caches)


def test_tarball_root_is_discovered_like_its_directory(tmp_path, monkeypatch):
    two_sockets(tmp_path / "tree", 8)
    tarball = tar_of(tmp_path / "tree", tmp_path / "box.tar.bz2", top="box")
    a, b = discover(tmp_path / "tree"), discover(tarball)
    assert b.root == str(tarball)                        # what was asked for, shown to users
    assert (b.nodes, b.cpus, b.caches, b.allowed_cpus) == (a.nodes, a.cpus, a.caches, a.allowed_cpus)
    unpacked = resolve_root(tarball)
    assert unpacked.endswith("/box") and resolve_root(tarball) == unpacked   # unpacked once
    assert discover(b.root) == b                         # the root can be discovered again
    monkeypatch.setenv("NUMABIND_FSROOT", str(tarball))
    assert discover().nodes == a.nodes
    assert FsReader(tarball).origin == str(tarball)
    mode = os.stat(os.path.dirname(unpacked)).st_mode & 0o777
    assert mode == 0o700                                 # private


def test_plain_tar_and_gzip_are_accepted(tmp_path):
    two_sockets(tmp_path / "tree", 8)
    for name, mode in (("d.tar", "w"), ("d.tgz", "w:gz")):
        with tarfile.open(tmp_path / name, mode) as tf:
            tf.add(tmp_path / "tree", arcname="d")
        assert discover(tmp_path / name).online_cpus == frozenset(range(16))


def test_corrupt_tarball_is_an_error(tmp_path):
    (tmp_path / "x.tar.bz2").write_bytes(b"BZh91AY&SY not really")
    with pytest.raises(NumabindError, match="cannot (read|unpack) the dump"):
        discover(tmp_path / "x.tar.bz2")


def test_unpacking_never_writes_outside_the_dump(tmp_path):
    two_sockets(tmp_path / "tree", 8)
    outside = tmp_path / "outside"
    outside.mkdir()
    tarball = tmp_path / "evil.tar"
    with tarfile.open(tarball, "w") as tf:
        tf.add(tmp_path / "tree", arcname="box")
        add_member(tf, "../escaped", b"x")
        add_member(tf, f"box/../../{outside.name}/escaped2", b"x")
        add_member(tf, str(outside / "absolute"), b"x")
        add_member(tf, "box/etc-link", type=tarfile.SYMTYPE, linkname="/etc")
        add_member(tf, "box/up-link", type=tarfile.SYMTYPE, linkname="../../../../../../../etc")
        add_member(tf, "box/up-link/passwd-copy", b"x")
        add_member(tf, "box/out", type=tarfile.SYMTYPE, linkname=f"../../{outside.name}")
        add_member(tf, "box/out/through-link", b"x")
        add_member(tf, "box/out/newdir", type=tarfile.DIRTYPE)
        # a chain: each hop looks local, together they leave the dump
        add_member(tf, "box/a/b/c", type=tarfile.DIRTYPE)
        add_member(tf, "box/a/b/c/hop", type=tarfile.SYMTYPE, linkname="../../..")
        add_member(tf, "box/a/b/c/hop2", type=tarfile.SYMTYPE, linkname="hop/../../..")
        add_member(tf, "box/hard", type=tarfile.LNKTYPE, linkname="/etc/passwd")
        add_member(tf, "box/fifo", type=tarfile.FIFOTYPE)
        add_member(tf, "box/zero", type=tarfile.CHRTYPE, devmajor=1, devminor=5)
        add_member(tf, "box/ok-link", type=tarfile.SYMTYPE, linkname="sys/devices/system/cpu")
    root = Path(resolve_root(tarball))
    dump = root.parent
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "escaped").exists()
    for path in dump.rglob("*"):
        assert os.path.realpath(path).startswith(str(dump) + os.sep), path
    names = {p.name for p in root.iterdir()}
    assert {"sys", "proc", "ok-link", "a"} <= names
    assert not names & {"etc-link", "up-link", "out", "hard", "fifo", "zero"}
    assert not (root / "a/b/c/hop2").exists() or os.path.realpath(root / "a/b/c/hop2").startswith(
        str(dump))
    assert discover(tarball).online_cpus == frozenset(range(16))


def test_unpacking_is_size_capped(tmp_path, monkeypatch):
    two_sockets(tmp_path / "tree", 8)
    tarball = tar_of(tmp_path / "tree", tmp_path / "box.tar.bz2")
    monkeypatch.setattr(_dump, "MAX_DUMP_BYTES", 1000)
    with pytest.raises(NumabindError, match="unpacks to more than"):
        resolve_root(tarball)
    monkeypatch.setattr(_dump, "MAX_DUMP_BYTES", 1 << 30)
    monkeypatch.setattr(_dump, "MAX_DUMP_MEMBERS", 10)
    with pytest.raises(NumabindError, match="more than 10 members"):
        resolve_root(tarball)


def test_unpacked_dump_is_removed_at_exit_but_not_by_a_forked_child(tmp_path):
    two_sockets(tmp_path / "tree", 8)
    tarball = tar_of(tmp_path / "tree", tmp_path / "box.tar.bz2")
    script = textwrap.dedent(f"""
        import os, sys
        from numabind._fs import resolve_root
        root = resolve_root({str(tarball)!r})
        pid = os.fork()
        if pid == 0:
            os._exit(0) if False else sys.exit(0)      # the child runs atexit handlers
        os.waitpid(pid, 0)
        print(root, os.path.isdir(root), flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    root, alive = out.stdout.split()
    assert alive == "True"               # the child's exit left the parent's copy alone
    assert not os.path.exists(root)      # the parent's exit removed it


@pytest.mark.kernel
def test_live_seq_files_are_read_to_their_end(read_by):
    """procfs seq_file reads stop at a record that does not fit the kernel's buffer, short of
    the end: a read of a procfs file larger than a page must not stop at the first one."""
    with open("/proc/kallsyms", "rb") as f:
        expected = f.read(300_000)
    if len(expected) < 20_000:
        pytest.skip("/proc/kallsyms is too short on this kernel to span several reads")
    got = FsReader("/").read("proc/kallsyms", limit=300_000)
    assert got.encode() == expected
