"""The last "same class elsewhere" leftovers of issue 41 and issue 42 §5.

* A replayed process's ``environ`` is looked at inside the root (:meth:`numabind._fs.FsReader.lstat`): a link in
  the middle of its path never leads psutil out of the root.
* An error quotes at most :data:`numabind._base.EXCERPT` characters of someone else's text
  (:func:`numabind._base.excerpt`): a node's meminfo or numastat, ``--weights``, an hwloc XML bitmap.
* Strings a replayed dump supplies (a GPU's model and UUID, a cgroup path, a meminfo row's name) reach the
  terminal without a control or format character, in every output that prints them.
* numactl's lists (``Plan.from_numactl_args``, the command line) never offer the kernel's stride form:
  ``parse_cpulist(..., strides=False)`` is the one rule.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numabind import _proc, live
from numabind._base import EXCERPT
from numabind._fs import FsReader
from numabind.cpulist import parse_cpulist
from numabind.errors import NumabindError, PlanError
from numabind.nodestat import system_memory
from numabind.plan import Plan, parse_weights

from .fakegpu import BOX_ADDRS, BOX_CPUS, add_nvidia_gpu, box_node, eight_gpu_box
from .fakesys import NODE, FakeMachine, fake_procfs, two_sockets
from .kernel import numabind_cli

#: C0 and C1 controls, a bidi override, a NEL (a line break to str.splitlines) and an escape sequence.
#: What an error about a numactl list offers (numabind.cpulist.NUMACTL_FORMS).
NUMACTL_FORMS = "N or N-M separated by commas (e.g. '0-3,8')"
HOSTILE = "\x1b]0;owned\x07\x9b2J\u202e\x85\x1b[31m"
#: The same without the NEL: a line that stays one line (a meminfo row's name, a cgroup path).
IN_LINE = "\x1b]0;owned\x07\x9b2J\u202e\x1b[31m"


def _controls(text: str) -> list[str]:
    """The characters of ``text`` a terminal would act on (line ends and tabs aside)."""
    return [c for c in text if c not in "\n\t" and (not c.isprintable() or unicodedata.category(c) == "Cf")]


def _quoted(message: str) -> list[str]:
    """The quoted parts of an error (the texts between single quotes)."""
    return message.split("'")[1::2]


# ------------------------------------------------------------------ 1. environ: looked at inside the root
@pytest.fixture
def replayed(tmp_path, monkeypatch):
    root = tmp_path / "root"
    root.mkdir()
    fake_procfs(root, 1, 0, {1: ("init", "0-1")}, start=1)
    fake_procfs(root, 4242, 1, {4242: ("main", "0-1")}, environ=b"A=inside\0")
    monkeypatch.setattr(live, "_reader", FsReader(str(root)))
    return root


def test_a_link_in_the_middle_of_environ_s_path_does_not_lead_out_of_the_root(replayed, tmp_path):
    """proc/PID a link to a directory outside the root (this host's /proc/self, say): psutil would read the file
    out there, so it is not read at all. The old check (os.lstat of the path) followed the middle link."""
    outside = tmp_path / "outside"
    shutil.copytree(replayed / "proc" / "4242", outside)
    (outside / "environ").write_bytes(b"A=outside\0")
    (replayed / "proc" / "4300").symlink_to(outside)                   # absolute: the host's directory
    assert _proc.environ_value(4242, "A") == "inside"
    assert _proc.environ_value(4300, "A") is None
    climbing = replayed / "proc" / "4301"
    climbing.symlink_to(os.path.relpath(outside, replayed / "proc"))     # '..' above the root
    assert _proc.environ_value(4301, "A") is None


def test_a_link_inside_the_root_still_reads(replayed):
    """A relative link that stays in the root (proc/4302 -> 4242) is what psutil reads too: the value comes."""
    (replayed / "proc" / "4302").symlink_to("4242")
    assert _proc.environ_value(4302, "A") == "inside"


def test_lstat_follows_links_before_the_last_component_inside_the_root(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "real").mkdir(parents=True)
    (root / "real" / "f").write_text("in\n")
    (root / "real" / "last").symlink_to("f")
    outside.mkdir()
    (outside / "f").write_text("out, and longer\n")
    (root / "mid").symlink_to("/real")                 # absolute: taken from the root
    (root / "away").symlink_to(outside)                # a directory of this host
    fs = FsReader(str(root))
    st = fs.lstat("mid/f")
    assert st is not None and st.st_size == 3          # root/real/f, not /real/f
    last = fs.lstat("mid/last")
    assert last is not None and stat.S_ISLNK(last.st_mode)      # the last component: not followed
    stat_of_last = fs.stat("mid/last")
    assert stat_of_last is not None and stat_of_last.st_size == 3       # stat follows it, inside
    assert fs.lstat("away/f") is None                  # resolved inside the root, where nothing is
    assert fs.lstat("nothing/here") is None
    live_st = FsReader("/").lstat("proc/self")
    assert live_st is not None and stat.S_ISLNK(live_st.st_mode)


# ------------------------------------------------------------------ 2. error quotes: an excerpt, never more
def _longest_quote(message: str) -> int:
    return max((len(q) for q in _quoted(message)), default=0)


def test_a_node_s_meminfo_error_quotes_an_excerpt(tmp_path):
    m = FakeMachine(tmp_path).add_node(0, [0])
    long_line = "Node 0 MemTotal: 1024 " + "z" * 300
    m.set_file(f"{NODE}/node0/meminfo", f"Node 0 MemFree: 5 kB\n{long_line}\nNode 1 x {'y' * 300}\n")
    m.set_file(f"{NODE}/node0/numastat", f"numa_hit 7\nnuma_miss {'9' * 300} x\n")
    m.write()
    [node] = system_memory(str(tmp_path)).nodes
    assert len(node.errors) == 3, node.errors
    for error in node.errors:
        assert _longest_quote(error) <= EXCERPT and "characters)" in error, error


def test_weights_errors_quote_an_excerpt():
    text = "0:1," + "1:x" * 100
    with pytest.raises(PlanError) as err:
        parse_weights(text, "--weights")
    assert _longest_quote(str(err.value)) <= EXCERPT and f"({len(text)} characters)" in str(err.value)
    with pytest.raises(PlanError) as err:
        parse_weights("0:1,0:2," + "\x1b[2J" * 40, "--weights")
    assert "(168 characters)" in str(err.value) and "\x1b" not in str(err.value)     # escaped, as typed


def test_an_hwloc_bitmap_error_quotes_an_excerpt(tmp_path):
    from .hwloc_corpus import SYNTHETIC_MEMATTRS, machine_xml

    bad = "0x" + "q" * 300
    path = tmp_path / "m.xml"
    path.write_text(machine_xml(SYNTHETIC_MEMATTRS.replace('initiator_cpuset="0x0000000f"',
                                                           f'initiator_cpuset="{bad}"')))
    from numabind.topology import discover

    with pytest.raises(NumabindError) as err:
        discover(path)
    message = str(err.value)
    assert "is not an hwloc bitmap" in message and f"({len(bad)} characters)" in message
    assert _longest_quote(message) <= EXCERPT, message


# ------------------------------------------------------------------ 4. a dump's strings reach no terminal raw
@pytest.fixture(scope="module")
def hostile_dump(tmp_path_factory):
    """An 8-GPU NVIDIA box whose first and sixth GPUs have a model and UUID of control characters (a model of
    another device id, so the 'GPUs of different models' note names it), in a cgroup v2 cpuset of socket 1 whose
    path holds them too (so the plans of socket 0's GPUs cannot be placed, and say why)."""
    root = tmp_path_factory.mktemp("dump")
    m = two_sockets(root, 8)
    m.set_status(range(0, 16), (0, 1))
    m.set_cgroup2(f"/kube{IN_LINE}pod/ctr", (4, 5, 6, 7, 12, 13, 14, 15), (1,))
    m.set_file(f"{NODE}/node0/meminfo", f"Node 0 MemTotal: 1024 kB\nNode 0 Mem{IN_LINE}Free: 5 kB\n")
    m.write()
    eight_gpu_box(root, "nvidia")
    for k in (0, 5):
        node = box_node(k)
        add_nvidia_gpu(root, BOX_ADDRS[k], numa_node=node, local_cpulist=BOX_CPUS[node], minor=k,
                       uuid=f"GPU-{HOSTILE}-{k}", model=f"Evil {HOSTILE} model", device=0x2331 if k == 0 else 0x2330)
    return root


@pytest.mark.parametrize("argv", [
    [], ["plan", "--all"], ["plan"], ["plan", "--gpu", "0"], ["topology"], ["--json"],
    ["run", "--gpu", "0", "--dry-run", "--", "true"], ["stat", "--system"],
])
def test_a_dumps_strings_reach_the_terminal_printable(hostile_dump, argv):
    root = str(hostile_dump)
    args = [argv[0], "--root", root, *argv[1:]] if argv[:1] in (["run"], ["stat"]) else ["--root", root, *argv]
    cp = numabind_cli(*args)
    assert cp.returncode in (0, 1), cp.stderr
    assert not _controls(cp.stdout) and not _controls(cp.stderr), (cp.stdout + cp.stderr)[-3000:]


def test_the_plans_still_say_what_the_dump_holds(hostile_dump):
    """Made printable, not dropped: the model note and the cpuset's path are still there."""
    cp = numabind_cli("--root", str(hostile_dump), "plan", "--all")
    assert "GPUs of different models (Evil ?]0;owned??2J?, NVIDIA H100" in cp.stdout, cp.stdout
    assert "cgroup2:/kube?]0;owned??2J??[31mpod/ctr" in cp.stdout, cp.stdout


def test_discovery_keeps_a_gpu_s_model_and_uuid_printable(hostile_dump):
    from numabind.topology import discover

    gpus = discover(str(hostile_dump)).gpus
    for g in gpus:
        for text in (g.name, g.uuid, g.identity_note, g.numa_note):
            assert text is None or not _controls(text), text
    assert gpus[0].name == "Evil ?]0;owned??2J?"               # a NEL ends the driver's line, as before
    assert gpus[0].uuid is not None and gpus[0].uuid.startswith("GPU-?]0;owned")


def test_gpu_option_quotes_an_excerpt(capsys):
    from numabind.cli import gpu_spec

    with pytest.raises(argparse.ArgumentTypeError) as err:
        gpu_spec("x" * 300)
    assert _longest_quote(str(err.value)) <= EXCERPT and "(300 characters)" in str(err.value)


# ------------------------------------------------------------------ 5. numactl's lists: no stride offered
@pytest.mark.parametrize("args", ["--physcpubind=abc", "--membind=0,x", "-C 0-1:/2", "-N a-b", "--interleave=+zz"])
def test_the_library_s_numactl_list_errors_offer_only_numactl_s_forms(args):
    with pytest.raises(PlanError) as err:
        Plan.from_numactl_args(args)
    message = str(err.value)
    assert "used/group" not in message.replace("the kernel's 'N-M:used/group'", ""), message
    assert NUMACTL_FORMS in message or "uses a stride" in message, message


@pytest.mark.parametrize("text", ["0-7:2", "0-15:2/4", "0-3:1/2,8", "1/2", "0:1"])
def test_a_stride_is_not_numactl_s_syntax(text):
    assert parse_cpulist("0-15:2/4") == frozenset({0, 1, 4, 5, 8, 9, 12, 13})     # the kernel's grammar keeps it
    with pytest.raises(PlanError, match="uses a stride .*write the ids out"):
        parse_cpulist(text, what="--cpus", strides=False)
    with pytest.raises(PlanError, match="uses a stride"):
        Plan.from_numactl_args(f"--physcpubind={text}")


@given(st.text(alphabet="0123456789-,:/ x\n", max_size=20))
@settings(max_examples=300, deadline=None)
def test_without_strides_a_list_parses_as_the_kernel_s_or_is_refused_without_offering_one(text):
    from numabind.cpulist import syntax_problem

    try:
        ids = parse_cpulist(text, strides=False)
    except PlanError as e:
        message = str(e)
        assert "used/group separated" not in message, message
        if "cannot parse" in message or "uses a stride" in message:     # the grammar's error: the check's too
            assert syntax_problem(text, strides=False) == message
        return
    assert ids == parse_cpulist(text) and ":" not in text and "/" not in text
    assert syntax_problem(text, strides=False) is None
