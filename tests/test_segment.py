"""numactl's shared-memory options in numactl's form: ``--shm``, ``--file``, ``--offset``, ``--length``,
``--shmmode``, ``--shmid``, ``--huge``, ``--touch``, ``--dump``, ``--dump-nodes``, ``--verify`` and ``-t/--strict``
(issues 28 and 32; numabind.cli.numactl's segment_main over numabind.backends.segment).

Parsing and order need no machine; the rest makes real System V segments (keyed by files under tmp_path,
removed after each test) and tmpfs files on /dev/shm, sets policies on node ``MEM_NODE`` and reads them back with
``get_mempolicy(MPOL_F_ADDR)`` (the range API) and ``move_pages`` (``numabind.page_placement``). Against numactl
2.0.19 (tests/test_show_oracle.py's oracle) the same invocations give the same exit status and the same
``--dump``/``--dump-nodes`` output, on segments either of them set up; without the oracle those skip.
"""

from __future__ import annotations

import mmap
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from numabind import page_placement
from numabind.backends.range import range_policy
from numabind.backends.segment import attach_sysv, ftok, segment_backend
from numabind.cli.numactl import NumactlUsage, memsize, numactl_main, parse
from numabind.errors import BindError
from tests.kernel import CPU_A, MEM_NODE, ROOT, child_env
from tests.numactl_oracle import oracle_or_skip

NUMABIND = (sys.executable, "-m", "numabind")
M = str(MEM_NODE)
MIB = 1 << 20


def _remove_segments(folder) -> None:
    """ipcrm the System V segments keyed by the files of ``folder`` (ids 0 to 3)."""
    if shutil.which("ipcrm") is None:
        return
    for name in os.listdir(folder):
        for proj in range(4):
            key = ftok(os.path.join(folder, name), proj)
            if key >= 0:
                subprocess.run(["ipcrm", "-M", str(key)], capture_output=True)


@pytest.fixture
def keys(tmp_path):
    """A folder for key files; their segments are removed afterwards."""
    yield tmp_path
    _remove_segments(tmp_path)


@pytest.fixture
def shmfile():
    """A path on /dev/shm (tmpfs), removed afterwards."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm (tmpfs) on this machine")
    path = f"/dev/shm/numabind-test-{uuid.uuid4().hex}"
    yield path
    if os.path.exists(path):
        os.unlink(path)


def _run(argv, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, env=child_env(), timeout=120, cwd=cwd)


def _numabind(args, cwd):
    return _run([*NUMABIND, *args], cwd)


# --------------------------------------------------------------------------- parsing (no machine)
@pytest.mark.parametrize("text, size", [
    ("20m", 20 * MIB), ("2M", 2 * MIB), ("4k", 4096), ("1g", 1 << 30), ("4096", 4096), ("0x1000", 4096),
    ("010", 8), ("3x", 3), ("", 0), ("m", 0),
])
def test_sizes_are_read_as_numactl_reads_them(text, size):
    assert memsize(text) == size


def test_segment_options_are_parsed_in_order():
    opts, command = parse(["--offset=2m", "--length", "2m", "--shm=A", "-t", "-i", "0,1", "-V", "-d", "-D", "-T"])
    assert opts == [("offset", "2m"), ("length", "2m"), ("shm", "A"), ("strict", None), ("interleave", "0,1"),
                    ("verify", None), ("dump", None), ("dump-nodes", None), ("touch", None)]
    assert command == []
    assert parse(["-L1m", "-u", "-M", "0640", "-I", "3", "-f", "/dev/shm/x", "--dump"])[0] == [
        ("length", "1m"), ("huge", None), ("shmmode", "0640"), ("shmid", "3"), ("file", "/dev/shm/x"),
        ("dump", None)]
    with pytest.raises(NumactlUsage, match="ambiguous"):
        parse(["--sh=A"])     # --shm, --shmmode, --shmid, --show
    with pytest.raises(NumactlUsage, match="ambiguous"):
        parse(["--dum"])      # --dump, --dump-nodes


@pytest.mark.parametrize("argv, said", [
    (["-m", M, "--shm", "K"], "specify policy after --shm/--file"),
    (["-C", str(CPU_A), "--shm", "K"], "cannot do --cpubind on shared memory"),
    (["--length", "1m", "-C", str(CPU_A), "true"], "--length shm option is not allowed before -C/--physcpubind"),
    (["--touch"], "--touch must be after shared memory specification"),
    (["--verify"], "--verify must be after shared memory specification"),
    (["--dump"], "Cannot do --dump without shared memory."),
    (["--dump-nodes"], "Cannot do --dump-nodes without shared memory."),
    (["--length", "1m", "true"], "shm related option --length for process"),
    (["--huge", "true"], "shm related option --huge for process"),
    (["--shmmode", "9", "--shm", "K"], "not a number"),
    (["--shmid", "x", "--shm", "K"], "not a number"),
])
def test_order_and_misuse_refused_before_any_segment(argv, said, capsys, keys, monkeypatch):
    monkeypatch.chdir(keys)
    assert numactl_main(argv) == 1
    out, err = capsys.readouterr()
    assert said in err
    assert not os.path.exists(keys / "K")      # refused before anything was created


def test_shmid_and_strict_alone_leave_a_process_line(capsys):
    """numactl runs the command for ``--shmid N`` (ignored) and ``-t`` (a warning), as for a process."""
    cp = _numabind(["--shmid", "3", "-t", sys.executable, "-c", "print('ran')"], ROOT)
    assert (cp.returncode, cp.stdout) == (0, "ran\n"), cp.stderr
    assert "-t/--strict" in cp.stderr and "ignored" in cp.stderr


# --------------------------------------------------------------------------- real segments on MEM_NODE
@pytest.mark.kernel
def test_shm_created_with_its_policy_read_back(keys, capsys, monkeypatch):
    monkeypatch.chdir(keys)
    assert numactl_main(["--length=1m", "--shm=K", "--strict", f"--membind={M}", "--verify"]) == 0
    err = capsys.readouterr().err
    assert "Creating shm key file K mode 0600" in err and "Creating shared memory segment K id 0 mode 0600" in err
    # a process of its own (this one) attaches it: the policy is the segment's, set by the command above
    be = segment_backend()
    seg = attach_sysv(str(keys / "K"), length=0, offset=0, mode=0o600, shmid=0, huge=False,
                      say=lambda _: None, need_length=lambda: None)
    try:
        assert seg.length == MIB
        assert range_policy(be, seg.address) == ("bind", frozenset({MEM_NODE}))
        assert range_policy(be, seg.address + MIB - 4096) == ("bind", frozenset({MEM_NODE}))
    finally:
        seg.close()


@pytest.mark.kernel
def test_offset_and_length_bound_the_range(keys, capsys, monkeypatch):
    monkeypatch.chdir(keys)
    assert numactl_main(["--length=1m", "--shm=K"]) == 0
    assert numactl_main(["--offset=512k", "--length=256k", "--shm=K", "--interleave", M, "--dump"]) == 0
    assert capsys.readouterr().out == f"0000000000080000-00000000000c0000: interleave : {M} \n"
    assert numactl_main(["--shm=K", "--dump"]) == 0       # the whole segment: only that quarter has a policy
    assert capsys.readouterr().out == f"0000000000080000-00000000000c0000: interleave : {M} \n"
    be = segment_backend()
    seg = attach_sysv(str(keys / "K"), length=0, offset=0, mode=0o600, shmid=0, huge=False,
                      say=lambda _: None, need_length=lambda: None)
    try:
        assert range_policy(be, seg.address) == ("default", frozenset())
        assert range_policy(be, seg.address + 512 * 1024) == ("interleave", frozenset({MEM_NODE}))
        assert range_policy(be, seg.address + 768 * 1024) == ("default", frozenset())
    finally:
        seg.close()


@pytest.mark.kernel
def test_numactls_offset_check_is_kept(keys, capsys, monkeypatch):
    """numactl 2.0.19 refuses --touch/--verify when the offset is not below the length (shmtest's failure)."""
    monkeypatch.chdir(keys)
    assert numactl_main(["--length=4m", "--shm=K"]) == 0
    rc = numactl_main(["--offset=2m", "--length=2m", "--shm=K", "--strict", f"--interleave={M}", "--verify"])
    assert rc == 1
    assert "region offset 0x200000 beyond its length 0x200000 at --verify" in capsys.readouterr().err
    assert numactl_main(["--offset=2m", "--length=2m", "--shm=K", "--touch"]) == 1
    assert "at --touch" in capsys.readouterr().err


@pytest.mark.kernel
def test_file_mapped_shared_touched_on_its_node(shmfile, capsys):
    rc = numactl_main(["--length", "1m", "--file", shmfile, f"--membind={M}", "--touch", "--dump-nodes"])
    assert rc == 0, capsys.readouterr().err
    assert capsys.readouterr().out == f"0000000000000000-0000000000100000: {M}\n"
    assert os.path.getsize(shmfile) == MIB
    assert os.stat(shmfile).st_blocks * 512 == MIB       # --touch allocated every page of the file
    be = segment_backend()
    with open(shmfile, "r+b") as f, mmap.mmap(f.fileno(), MIB, mmap.MAP_SHARED) as m:
        sum(m[k] for k in range(0, MIB, mmap.PAGESIZE))   # map the file's pages here, for move_pages to see
        placed = page_placement(m)
        assert placed.pages == MIB // mmap.PAGESIZE and dict(placed.by_node) == {MEM_NODE: placed.pages}
        from numabind.backends.range import buffer_address, release

        address, _, keep = buffer_address(m)
        try:
            assert range_policy(be, address) == ("bind", frozenset({MEM_NODE}))  # the file's shared policy
        finally:
            release(keep)


@pytest.mark.kernel
def test_shmmode_is_the_new_files_mode(shmfile, capsys):
    old = os.umask(0o022)
    try:
        assert numactl_main(["--shmmode", "0640", "--length", "64k", "--file", shmfile]) == 0
    finally:
        os.umask(old)
    assert os.stat(shmfile).st_mode & 0o777 == 0o640


@pytest.mark.kernel
def test_file_needs_a_length_and_page_alignment(shmfile, capsys):
    assert numactl_main(["--file", shmfile, "--dump"]) == 1
    assert "need a --length to create a shared file" in capsys.readouterr().err
    assert not os.path.exists(shmfile)
    assert numactl_main(["--length", "1000", "--file", shmfile]) == 1
    assert "policy region not page aligned" in capsys.readouterr().err
    assert numactl_main(["--length", "1m", "--file", shmfile]) == 0
    assert numactl_main(["--file", shmfile, "--dump"]) == 1        # exists, but no --length: as numactl
    assert "policy region length not specified before --file" in capsys.readouterr().err


@pytest.mark.kernel
def test_policy_conflicts_and_no_command_beside_a_segment(keys, capsys, monkeypatch):
    monkeypatch.chdir(keys)
    assert numactl_main(["--length=1m", "--shm=K", "-m", M, "-i", M]) == 1
    assert "Conflicting policies" in capsys.readouterr().err
    assert numactl_main(["--shm=K", "-l", "--verify"]) == 1
    assert "Need a mask to verify" in capsys.readouterr().err
    assert numactl_main(["--shm=K", "--verify"]) == 1
    assert "Need a policy first to verify" in capsys.readouterr().err
    assert numactl_main(["--shm=K", "--length=1m"]) == 1
    assert "--length must be before shared memory specification" in capsys.readouterr().err
    assert numactl_main(["--shm=K", "-m", M, "true"]) == 1
    assert "no command runs with --shm/--file" in capsys.readouterr().err


@pytest.mark.kernel
def test_a_missing_segment_without_length_is_refused(keys, capsys, monkeypatch):
    monkeypatch.chdir(keys)
    assert numactl_main(["--shm=K", "--dump"]) == 1
    assert "need a --length to create a sysv shared memory segment" in capsys.readouterr().err
    assert os.path.exists(keys / "K")          # the key file is made first, as numactl makes it


@pytest.mark.kernel
def test_kernel_refusals_are_bind_errors(keys, monkeypatch):
    monkeypatch.chdir(keys)
    assert numactl_main(["--length=1m", "--shm=K"]) == 0
    with pytest.raises(BindError, match="shmat"):   # a segment smaller than asked: shmget refuses, shmat fails
        attach_sysv(str(keys / "K"), length=4 * MIB, offset=0, mode=0o600, shmid=0, huge=False,
                    say=lambda _: None, need_length=lambda: None)


# --------------------------------------------------------------------------- against numactl 2.0.19
def _sequences(shmfile: str) -> list[list[list[str]]]:
    """Command lines run one after another on the same key file or tmpfs file."""
    return [
        [["--length=1m", "--shm=K", "--dump"], ["--shm=K", f"--interleave={M}", "--dump", "--dump-nodes"],
         ["--shm=K", "--dump"]],
        [["--length=1m", "--shm=K"], ["--offset=256k", "--length=256k", "--shm=K", "-t", f"--membind={M}",
                                      "--dump"], ["--shm=K", "--dump"], ["--shm=K", f"-p{M}", "--dump"]],
        [["--length=1m", "--shm=K", "-t", f"--membind={M}", "--verify", "--dump"], ["--shm=K", "-l", "--dump"]],
        [["--offset=2m", "--length=2m", "--shm=K", "--strict", f"--interleave={M}", "--verify", "--dump"]],
        [["--length", "1m", "--file", shmfile, f"-m{M}", "--dump", "--touch", "--dump-nodes"],
         ["--file", shmfile, "--dump"], ["--length", "1m", "--file", shmfile, "--dump"]],
        [["--shm=K", "--dump"], ["--dump"], ["--touch"], ["--length=1m", "true"], ["-m", M, "--shm=K"],
         ["--length=1m", "--shm=K", "-m", M, "true"], ["--shmid=3", "--length=1m", "--shm=K", "--dump"]],
        [["--huge", "--length=2m", "--shm=H", "--dump"], ["--length=1m", "--offset=100", "--shm=U"],
         ["--length", "1m", "--offset", "1000", "--file", shmfile], ["--length=1m", "--shm=K", "-m", "nonsense"],
         ["--length=1m", "--shm=K", "-t", "-w", M, "--verify"], ["--shm=K", f"-P{M}", "--verify", "--dump"]],
    ]


def _lines(text: str) -> list[str]:
    """The lines of an output, without empty ones, each --verify warning's address (another process's mapping)
    and numactl's or numabind's name before it."""
    import re

    return [re.sub(r"^numa(ctl|bind) verify [0-9a-f]+\(", "verify ADDRESS(", line)
            for line in text.splitlines() if line]


def _say(cp: subprocess.CompletedProcess) -> str:
    return f"exit {cp.returncode}\nstdout:\n{cp.stdout}\nstderr:\n{cp.stderr}"


@pytest.mark.kernel
@pytest.mark.parametrize("k", range(7))
def test_same_statuses_and_dumps_as_numactl(k, tmp_path, shmfile):
    oracle = oracle_or_skip()
    outs = {}
    for impl, cmd in (("numactl", [oracle]), ("numabind", list(NUMABIND))):
        folder = tmp_path / impl
        folder.mkdir()
        got = []
        try:
            for argv in _sequences(shmfile)[k]:
                cp = _run([*cmd, *argv], folder)
                got.append((argv, cp))
        finally:
            _remove_segments(folder)
            if os.path.exists(shmfile):
                os.unlink(shmfile)
        outs[impl] = got
    for (argv, theirs), (_, ours) in zip(outs["numactl"], outs["numabind"]):
        # (numactl's usage_msg also writes an empty line to stdout; numabind's refusals write nothing there)
        assert (ours.returncode, _lines(ours.stdout)) == (theirs.returncode, _lines(theirs.stdout)), (
            f"numactl {' '.join(argv)}\n--- numactl 2.0.19: {_say(theirs)}\n--- numabind: {_say(ours)}")
        # the same notices and refusals, in numabind's words where numactl's are its usage text
        for line in theirs.stderr.splitlines():
            if line.startswith("numactl: "):
                said = line[len("numactl: "):].partition("usage: ")[0].rstrip()   # usage_msg ends without \n
                for part in said.split(": "):      # numactl's words, and the errno's where it names one
                    assert part in ours.stderr, (line, ours.stderr)


@pytest.mark.kernel
def test_each_reads_the_segment_the_other_set(keys):
    """``--dump`` of a segment numactl set up, by numabind, and the other way round: the same lines."""
    oracle = oracle_or_skip()
    for setter, reader in (([oracle], list(NUMABIND)), (list(NUMABIND), [oracle])):
        _remove_segments(keys)
        for name in os.listdir(keys):
            os.unlink(keys / name)
        assert _run([*setter, "--length=1m", "--shm=K"], keys).returncode == 0
        assert _run([*setter, "--offset=512k", "--length=256k", "--shm=K", f"-i{M}"], keys).returncode == 0
        assert _run([*setter, "--length=256k", "--shm=K", f"-m{M}"], keys).returncode == 0
        theirs = _run([*setter, "--shm=K", "--dump"], keys)
        ours = _run([*reader, "--shm=K", "--dump"], keys)
        assert ours.stdout == theirs.stdout == (f"0000000000000000-0000000000040000: bind : {M} \n"
                                                f"0000000000080000-00000000000c0000: interleave : {M} \n"), (
            theirs.stdout, ours.stdout, ours.stderr)
