"""``numabind stat --system``: every node's memory and the kernel's NUMA counters, like ``numastat -m -n``.

Fake machines (tests/fake: each node's ``meminfo`` and ``numastat``) give exact expected output, read
through ``--root`` and ``NUMABIND_FSROOT``; the last tests compare this host's output with numastat's own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from numabind.cli.stat import system_text
from numabind.nodestat import system_memory
from tests.fakesys import FakeMachine
from tests.fake.machines import no_numa_dir
from tests.kernel import ROOT, child_env, numabind_cli, run_main

NODE = "sys/devices/system/node"


def two_nodes(root: Path) -> FakeMachine:
    """8 GiB on node 0; 4 GiB on node 1, of which 512 huge pages of 2 MiB and 2 of 1 GiB are reserved."""
    m = FakeMachine(root).add_node(0, [0, 1], memory_kb=8 << 20).add_node(1, [2, 3], memory_kb=4 << 20)
    m.set_hugepages(1, 2048, 512).set_hugepages(1, 1048576, 2)
    m.write()
    return m


EXPECTED = textwrap.dedent("""
    Per-node system memory usage (in MBs):
                              Node 0          Node 1           Total
                     --------------- --------------- ---------------
    MemTotal                 8192.00         4096.00        12288.00
    MemFree                  4096.00          512.00         4608.00
    MemUsed                  4096.00         3584.00         7680.00
    HugePages_Total             0.00         3072.00         3072.00

    Per-node numastat info (in MBs):
                              Node 0          Node 1           Total
                     --------------- --------------- ---------------
    Numa_Hit                 1024.00         2048.00         3072.00
    Numa_Miss                   0.00            1.00            1.00
    Numa_Foreign                0.00            2.00            2.00
    Interleave_Hit              0.50            0.50            1.00
    Local_Node               1024.00         2048.00         3072.00
    Other_Node                  0.00            1.00            1.00
    """)


def test_text_of_two_nodes_with_huge_pages(tmp_path):
    """The huge pages of both sizes count, from the node's hugepages/ directory (not the meminfo count
    times one size); counters are pages of 4 KiB here."""
    two_nodes(tmp_path)
    assert "\n".join(system_text(system_memory(str(tmp_path), page_size=4096))) + "\n" == EXPECTED


def test_the_cli_prints_it_through_root_and_fsroot(tmp_path, capsys, monkeypatch):
    two_nodes(tmp_path)
    want = "\n".join(system_text(system_memory(str(tmp_path)))) + "\n"   # this host's page size
    for argv in (["stat", "--system", "--root", str(tmp_path)], ["--root", str(tmp_path), "stat", "--system"]):
        rc, out, err = run_main(capsys, *argv)
        assert (rc, out, err) == (0, want, "")
    monkeypatch.setenv("NUMABIND_FSROOT", str(tmp_path))
    assert run_main(capsys, "stat", "--system") == (0, want, "")


def test_json(tmp_path, capsys):
    two_nodes(tmp_path)
    rc, out, err = run_main(capsys, "stat", "--system", "--json", "--root", str(tmp_path))
    assert rc == 0 and err == ""
    gib = 1 << 30
    assert json.loads(out) == {
        "root": str(tmp_path), "page_size": os.sysconf("SC_PAGE_SIZE"),
        "nodes": {
            "0": {"errors": [], "memory_bytes": {"MemTotal": 8 * gib, "MemFree": 4 * gib, "MemUsed": 4 * gib,
                                                 "HugePages_Total": 0},
                  "numastat_pages": {"numa_hit": 262144, "numa_miss": 0, "numa_foreign": 0, "interleave_hit": 128,
                                     "local_node": 262144, "other_node": 0}},
            "1": {"errors": [], "memory_bytes": {"MemTotal": 4 * gib, "MemFree": gib // 2, "MemUsed": 3584 << 20,
                                                 "HugePages_Total": 3 * gib},
                  "numastat_pages": {"numa_hit": 524288, "numa_miss": 256, "numa_foreign": 512, "interleave_hit": 128,
                                     "local_node": 524288, "other_node": 256}},
        }}


def test_every_meminfo_row_in_the_files_order_and_a_row_one_node_lacks(tmp_path):
    m = FakeMachine(tmp_path).add_node(0, [0]).add_node(1, [1])
    m.set_file(f"{NODE}/node0/meminfo", "Node 0 MemTotal:  1024 kB\nNode 0 FileHugePages:  2048 kB\n"
                                        "Node 0 SwapCached:  0 kB\nNode 0 HugePages_Free:  0\n")
    m.set_file(f"{NODE}/node1/meminfo", "Node 1 MemTotal:  3072 kB\nNode 1 SwapCached:  1024 kB\n")
    m.write()
    sm = system_memory(str(tmp_path), page_size=4096)
    assert sm.ok and sm.memory_rows() == ["MemTotal", "FileHugePages", "SwapCached", "HugePages_Free"]
    table = system_text(sm)[4:8]
    assert table == ["MemTotal                    1.00            3.00            4.00",
                     "FileHugePages               2.00               -               -",
                     "SwapCached                  0.00            1.00            1.00",
                     "HugePages_Free              0.00               -               -"]


def test_a_file_that_cannot_be_read_is_a_dash_a_line_on_stderr_and_status_1(tmp_path, capsys):
    two_nodes(tmp_path)
    node0, node1 = tmp_path / NODE / "node0", tmp_path / NODE / "node1"
    os.mkfifo(node0 / "meminfo.fifo")
    os.replace(node0 / "meminfo.fifo", node0 / "meminfo")        # refused before a byte is read: never blocks
    (node1 / "numastat").unlink()
    (node1 / "numastat").mkdir()
    rc, out, err = run_main(capsys, "stat", "--system", "--root", str(tmp_path))
    assert rc == 1
    lines = out.splitlines()
    assert "MemTotal                       -         4096.00               -" in lines
    assert "Numa_Hit                 1024.00               -               -" in lines
    refused = "not a regular file: a sysfs or procfs file (or a dump of one) is always a regular file; check the root"
    assert err.splitlines() == [f"numabind stat: node 0: {node0}/meminfo is a FIFO, {refused}",
                                f"numabind stat: node 1: {node1}/numastat is a directory, {refused}"]


def test_a_dump_without_counters_shows_memory_only(tmp_path, capsys):
    """hwloc-gather-topology's dumps and hwloc XML roots hold no numastat files: no counters, no error."""
    m = two_nodes(tmp_path)
    m.remove_file(f"{NODE}/node0/numastat").remove_file(f"{NODE}/node1/numastat").write()
    rc, out, err = run_main(capsys, "stat", "--system", "--root", str(tmp_path))
    assert (rc, err) == (0, "")
    assert out == EXPECTED.split("\n\nPer-node numastat")[0] + "\n"
    m.set_file(f"{NODE}/node1/numastat", "numa_hit 5\n").write()    # one node has them: the other's are '-'
    rc, out, err = run_main(capsys, "stat", "--system", "--root", str(tmp_path))
    mib = f"{5 * os.sysconf('SC_PAGE_SIZE') / (1 << 20):.2f}"       # 5 pages of this host's size
    assert (rc, err) == (0, "") and f"Numa_Hit                       -{mib:>16}               -" in out


def test_lines_that_are_not_meminfo_are_named_and_left_out(tmp_path):
    m = FakeMachine(tmp_path).add_node(0, [0])
    m.set_file(f"{NODE}/node0/meminfo", "Node 0 MemTotal:  1024 kB\nNode 1 MemFree:  5 kB\n"
                                        "Node 0 MemUsed:  ²² kB\nNode 0 Dirty:  4 MB\n")
    m.set_file(f"{NODE}/node0/numastat", "numa_hit 7\nnuma_miss -1\n")
    m.write()
    sm = system_memory(str(tmp_path))
    [node] = sm.nodes
    assert node.memory == {"MemTotal": 1 << 20} and node.numastat == {"numa_hit": 7}
    assert len(node.errors) == 4 and not sm.ok
    assert "'Node 1 MemFree:  5 kB'" in node.errors[0] and "is not 'Key: number [kB]'" in node.errors[1]


def test_a_kernel_without_numa_is_one_node_from_proc_meminfo(tmp_path):
    no_numa_dir(tmp_path, memtotal_kb=8 << 20)
    sm = system_memory(str(tmp_path))
    assert sm.ok and [n.node for n in sm.nodes] == [0] and sm.nodes[0].numastat == {}
    assert system_text(sm) == [
        "", "Per-node system memory usage (in MBs):",
        "                          Node 0           Total",
        "                 --------------- ---------------",
        "MemTotal                 8192.00         8192.00",
        "MemFree                  4096.00         4096.00",
        "MemAvailable             4096.00         4096.00"]


def test_watch_with_count(tmp_path):
    two_nodes(tmp_path)
    cp = numabind_cli("stat", "--system", "--watch", "0.05", "--count", "2", "--root", str(tmp_path))
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.count("numabind stat --system, every 0.05 s: ") == 2 and "\x1b" not in cp.stdout
    assert cp.stdout.count("Per-node numastat info (in MBs):") == 2


@pytest.mark.parametrize("args,message", [
    (["--system", "1"], "--system shows the whole machine; give no PID"),
    (["--system", "--all-children", "1"], "--system shows the whole machine; give no PID"),
    (["--system", "--count", "2"], "--count goes with --watch"),
])
def test_usage_errors(args, message):
    cp = numabind_cli("stat", *args)
    assert cp.returncode == 2 and message in cp.stderr, (cp.returncode, cp.stderr)


def test_a_root_that_does_not_exist(tmp_path):
    cp = numabind_cli("stat", "--system", "--root", str(tmp_path / "nope"))
    assert cp.returncode != 0 and "does not exist" in cp.stderr


# ----------------------------------------------------------------------------- this host, against numastat
def _numastat() -> str:
    found = shutil.which("numastat")
    oracle = Path(ROOT) / "tests" / "_cache" / "numactl-2.0.19" / "helpers" / "numastat"
    if found is None and os.access(oracle, os.X_OK):
        found = str(oracle)
    if found is None:
        pytest.skip("numastat is not installed (Debian package numactl) and the numactl oracle is not built")
    if not os.path.exists("/sys/devices/system/node/node0/numastat"):
        pytest.skip("this kernel has no per-node numastat (CONFIG_NUMA=n)")
    return found


def _tables(text: str) -> dict[str, dict[str, list[str]]]:
    """title -> row label -> cells, of numastat's output (its 'Token ... not in hash table.' lines left out)."""
    out: dict[str, dict[str, list[str]]] = {}
    title = None
    for line in text.splitlines():
        if line.endswith("(in MBs):"):
            title = line
            out[title] = {}
        elif title and line.strip() and not line.startswith(("Token ", " ")):
            label, *cells = line.split()
            out[title][label] = cells
    return out


def test_this_host_against_numastat():
    """The same titles, column heads and dashes, byte for byte; every row numastat shows, in the same
    relative order (numastat 2.0.19 moves KReclaimable to the end), with the figures that do not move while
    both run (MemTotal, huge pages, misses) equal and the others close."""
    numastat = _numastat()
    theirs = subprocess.run([numastat, "-m", "-n"], capture_output=True, text=True, timeout=60, env=child_env())
    assert theirs.returncode == 0, theirs.stderr
    cp = numabind_cli("stat", "--system")
    assert cp.returncode == 0, cp.stderr
    # numastat once more after numabind: the counters only grow, so numabind's lie between the two readings,
    # and memory in use moves by about as much as it moved between them
    after = subprocess.run([numastat, "-m", "-n"], capture_output=True, text=True, timeout=60, env=child_env())
    assert after.returncode == 0, after.stderr
    later = _tables(after.stdout)
    our_lines, their_lines = cp.stdout.splitlines(), [x for x in theirs.stdout.splitlines()
                                                      if not x.startswith("Token ")]
    heads = [i for i, x in enumerate(their_lines) if x.endswith("(in MBs):")]
    assert len(heads) == 2
    for i in heads:
        j = our_lines.index(their_lines[i])
        assert our_lines[j - 1:j + 3] == their_lines[i - 1:i + 3]      # blank line, title, heads, dashes
    numastat_rows, our_rows = _tables(theirs.stdout), _tables(cp.stdout)
    assert list(numastat_rows) == list(our_rows)
    for title, rows in numastat_rows.items():
        labels = [x for x in rows if x != "KReclaimable"]
        assert [x for x in our_rows[title] if x in labels] == labels   # every row numastat shows, in its order
        for label, cells in rows.items():
            got = [float(x) for x in our_rows[title][label]]
            want = [float(x) for x in cells]
            then = [float(x) for x in later[title][label]]
            if label in ("MemTotal", "HugePages_Total"):
                assert got == want, (label, got, want)
            elif title.startswith("Per-node numastat"):   # counters: never smaller than before, nor larger than after
                assert all(w - 0.01 <= g <= t + 0.01 for g, w, t in zip(got, want, then)), (label, want, got, then)
            else:                           # memory in use moves between the reads
                assert all(abs(g - w) <= max(64.0, 0.05 * w, 2 * abs(t - w)) for g, w, t in zip(got, want, then)), \
                    (label, want, got, then)
