"""``numabind gather`` (issue 44 §2): a capture of a machine that replays as the machine.

Every machine the suite knows is gathered and replayed from the archive: this host (live, with ``numabind
check``'s report), every ready-made fake machine (but the largest), GPU boxes of each vendor with NICs and disks, a
container's masked view, and the real machines' dumps of tests/dumps. On each, ``numabind``, ``numabind plan
--all``, ``numabind hardware`` and ``numabind topology`` must print the same on the replay as on the source (the
live binding section of the first screen aside: tests/vm/cases/gather.py says what is compared), and discovery of
the archive must equal discovery of the machine (``GatherResult.differences``). hwloc's ``lstopo`` reads the
archive's folder as it reads a dump and agrees with numabind's discovery of it. Nothing private goes in: no host
name, no environment but the GPU visibility variables, no process's command line, nothing of the process's status
but the lines discovery and check read, no owner's name on a member; the caps on size and time say what they left
out. The 3-node and arm64 guests: tests/vm/test_vm_gather.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import types
from pathlib import Path

import pytest

import numabind.gather as gathering
from numabind.errors import NumabindError
from numabind.gather import gather
from numabind.topology import discover

from .fakegpu import ascend_box, container, eight_gpu_box
from .fakeio import add_block, add_net, add_pci_function
from .fakesys import FACTORIES, fake_machine, two_sockets  # noqa: F401  (fixture)
from .kernel import numabind_cli
from .lstopo import LSTOPO, differences, lstopo_view
from .vm.cases.gather import archive_members, comparable, looks
from .vm.cases.gather import differences as look_differences

pytestmark = pytest.mark.usefixtures("no_gpu_env")

DUMPS = Path(__file__).resolve().parent / "dumps"
HOSTNAME_WHY = "the host's name (numabind gather --hostname puts it in)"
needs_lstopo = pytest.mark.skipif(LSTOPO is None, reason="hwloc's lstopo-no-graphics is not installed "
                                                         "(Debian package hwloc-nox)")


@pytest.fixture
def checked(monkeypatch):
    """``numabind.preflight.check`` answering ``answer["value"]`` (a dict, or an exception to raise) without
    starting children: the roots it was called with, and the answer to set."""
    from numabind import preflight

    calls: list = []
    answer: dict = {"value": {"ok": True, "exit_status": 0, "verdict": "check: stubbed by the test"}}

    def check(root=None):
        calls.append(root)
        if isinstance(answer["value"], BaseException):
            raise answer["value"]
        return types.SimpleNamespace(to_dict=lambda: answer["value"])

    monkeypatch.setattr(preflight, "check", check)
    return calls, answer


def _replays(root, archive: Path, *, live: bool = False, env: dict | None = None, **kw) -> gathering.GatherResult:
    """Gather ``root`` into ``archive``; the looks print the same on the replay; discovery agrees."""
    result = gather(archive, root=root, env=env or {}, **kw)
    assert result.differences == (), result.describe()
    source = looks(None if root is None else str(root))
    replay = looks(str(archive))
    found = look_differences(source, replay, live=live)
    assert not found, "\n".join(found)
    assert len(comparable(replay["topology"])) > 3 and comparable(replay["hardware"])[0].startswith("available:")
    assert comparable(replay["topology"])[-1] == comparable(replay["hardware"])[-1] == "exit 0"
    return result


def _layout(archive: Path) -> tuple[str, set[str]]:
    """(the archive's one top folder, the paths below it)."""
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    tops = {n.split("/", 1)[0] for n in names}
    assert len(tops) == 1, tops
    (top,) = tops
    return top, {n.split("/", 1)[1] for n in names if "/" in n}


# ----------------------------------------------------------------------------- replays
#: Every fake machine (``big``, 1152 CPUs, is some 41,000 files: about 40 s of gathering on a 2-CPU machine).
GATHERED = sorted(FACTORIES)


@pytest.mark.parametrize("kind", GATHERED)
def test_every_fake_machine_replays_from_its_archive(fake_machine, tmp_path, kind):
    machine = fake_machine(kind)
    result = _replays(machine.path, tmp_path / f"{kind}.tar.bz2")
    top, paths = _layout(tmp_path / f"{kind}.tar.bz2")
    assert top == kind and {"sys", "proc", "numabind/topology.xml", "numabind/gather.json"} <= paths
    assert result.check_error is None and "numabind/check.json" in paths, result.check_error


@pytest.mark.parametrize("vendor", ["nvidia", "amd", "intel"])
def test_a_gpu_box_replays_with_its_gpus_nics_and_disks(tmp_path, vendor):
    root = tmp_path / "box"
    two_sockets(root, cpus_per_socket=8)
    eight_gpu_box(root, vendor)
    add_pci_function(root, "0000:19:00.0", numa_node=0)
    add_net(root, "ens1", "0000:19:00.0")
    add_pci_function(root, "0000:9b:00.0", pci_class=0x010802, numa_node=1)
    add_block(root, "nvme0n1", "0000:9b:00.0", "259:0", partitions={"nvme0n1p1": "259:1"})
    archive = tmp_path / "box.tar.bz2"
    _replays(root, archive)
    gpus = discover(archive).gpus
    assert [g.vendor for g in gpus] == [vendor] * 8
    assert [g.numa_node for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    text = looks(str(archive))["topology"]
    assert "ens1" in text and "nvme0n1" in text


def test_a_boxs_interrupts_replay_as_numabind_irq_shows_them(tmp_path):
    """Issue 45: numabind irq reads under the discovery root, and gather keeps its files (msi_irqs, the legacy irq,
    /proc/interrupts, /proc/irq/N/*_list, debugfs' managed state), so ``numabind --root ARCHIVE irq`` shows the
    machine's interrupts as the machine did; irqbalance is not gathered (it is read from other processes' files)."""
    from .fakeirq import irq_box

    root = tmp_path / "box"
    irq_box(root)
    archive = tmp_path / "irq.tar.bz2"
    _replays(root, archive)

    def shown(where):
        cp = numabind_cli("--root", str(where), "irq", "--all", "--json")
        assert cp.returncode == 0, cp.stderr
        return json.loads(cp.stdout)["devices"]

    source, replay = shown(root), shown(archive)
    assert replay == source and sum(len(d["irqs"]) for d in replay) >= 10


def test_an_ascend_box_replays(tmp_path):
    root = tmp_path / "box"
    two_sockets(root, cpus_per_socket=8)
    ascend_box(root)
    archive = tmp_path / "ascend.tar.bz2"
    _replays(root, archive)
    assert {g.vendor for g in discover(archive).gpus} == {"ascend"}


def test_a_containers_view_replays_with_its_visibility_variables(tmp_path, monkeypatch):
    """procfs masked to the GPUs exposed, one device file not openable, CUDA_VISIBLE_DEVICES set: the archive
    records the variable (and nothing else of the environment) and replays the same view under it."""
    root = tmp_path / "box"
    two_sockets(root, cpus_per_socket=4)
    eight_gpu_box(root, "nvidia")
    env = container(root, "nvidia", [1, 6], style="legacy")
    os.chmod(root / "dev" / "nvidia6", 0)
    env = {**env, "CUDA_VISIBLE_DEVICES": "0"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    archive = tmp_path / "box.tar.bz2"
    _replays(root, archive, env={**env, "SECRET_TOKEN": "abcdefgh12345678"})
    manifest = json.loads(archive_members(archive)["box/numabind/gather.json"])
    assert manifest["environment"] == env
    assert b"abcdefgh12345678" not in b"".join(v for v in archive_members(archive).values() if v)


@pytest.mark.parametrize("dump", sorted(DUMPS.glob("*.tar.bz2")) + sorted((DUMPS / "captures").glob("*.tar.bz2")),
                         ids=lambda p: p.name.removesuffix(".tar.bz2"))
def test_every_real_dump_replays_from_its_archive(tmp_path, dump):
    """The real machines of tests/dumps (hwloc-gather-topology's, and the GPU machines' captures), gathered as a
    replayed root and replayed again."""
    _replays(dump, tmp_path / f"again-{dump.name}")


def test_this_host_replays_from_its_archive_with_checks_report(tmp_path):
    """The live machine, numabind check run for real: its report is in the archive, and the replay prints what
    this machine printed (the free memory, which changes from one command to the next, aside)."""
    archive = tmp_path / "host.tar.bz2"
    result = _replays(None, archive, live=True, env=dict(os.environ))
    assert result.check_error is None, result.check_error
    members = archive_members(archive)
    report = json.loads(members["host/numabind/check.json"])
    assert isinstance(report, dict) and report, report
    assert members["host/proc/hwloc-nofile-info"] == f"OSName: Linux\nArchitecture: {os.uname().machine}\n".encode()
    assert {item.why for item in result.left_out} <= {HOSTNAME_WHY}, result.describe()
    assert result.size == archive.stat().st_size and result.files == sum(
        1 for name, data in members.items() if data is not None)


def test_the_xml_in_the_archive_replays_as_the_archive(tmp_path):
    machine = tmp_path / "snc"
    FACTORIES["snc"](machine)
    archive = tmp_path / "snc.tar.bz2"
    gather(archive, root=machine, env={})
    xml = tmp_path / "topology.xml"
    xml.write_bytes(archive_members(archive)["snc/numabind/topology.xml"])
    from_xml, from_archive = discover(xml), discover(archive)
    assert {n: node.cpus for n, node in from_xml.nodes.items()} == {
        n: node.cpus for n, node in from_archive.nodes.items()}
    assert ({n: dict(node.distances) for n, node in from_xml.nodes.items()}
            == {n: dict(node.distances) for n, node in from_archive.nodes.items()})


# ----------------------------------------------------------------------------- hwloc reads it
def _unpacked(archive: Path, where: Path) -> Path:
    """The archive unpacked as hwloc's lstopo does (archivemount, then its one folder)."""
    with tarfile.open(archive) as tar:
        tar.extractall(where, filter="tar")
    (folder,) = where.iterdir()
    return folder


@needs_lstopo
@pytest.mark.parametrize("what", ["host", "snc", "gpu-box"])
def test_lstopo_reads_the_archive_and_agrees(tmp_path, what, checked):
    archive = tmp_path / f"{what}.tar.bz2"
    if what == "host":
        gather(archive, env={})
    elif what == "snc":
        FACTORIES["snc"](tmp_path / "m")
        gather(archive, root=tmp_path / "m", env={})
    else:
        two_sockets(tmp_path / "m", cpus_per_socket=8)
        eight_gpu_box(tmp_path / "m", "nvidia")
        gather(archive, root=tmp_path / "m", env={})
    folder = _unpacked(archive, tmp_path / "unpacked")
    assert folder.name == what and (folder / "proc").is_dir() and (folder / "sys").is_dir()
    diffs = differences(discover(archive), lstopo_view(str(folder)))
    assert diffs == [], "\n".join(diffs)


@needs_lstopo
def test_lstopo_reads_the_tarball_itself_where_hwloc_can(tmp_path, checked):
    """hwloc built with archive support (archivemount) reads NAME.tar.bz2 directly; Debian's is built without."""
    archive = tmp_path / "host.tar.bz2"
    gather(archive, env={})
    out = subprocess.run([LSTOPO, "--input", str(archive), "--of", "console"], capture_output=True, text=True,
                         timeout=60)
    if "does not support loading from an archive" in out.stderr:
        pytest.skip(f"this hwloc reads no archive: {out.stderr.strip()} (the unpacked folder is read instead)")
    assert out.returncode == 0, out.stderr
    assert "Machine" in out.stdout and "PU" in out.stdout


# ----------------------------------------------------------------------------- nothing private
def _private_box(tmp_path: Path) -> Path:
    root = tmp_path / "box"
    two_sockets(root, cpus_per_socket=4).set_cgroup2("/job", cpus=range(4), mems=[0]).write()
    eight_gpu_box(root, "nvidia")
    kernel = root / "proc" / "sys" / "kernel"
    kernel.mkdir(parents=True, exist_ok=True)
    (kernel / "hostname").write_text("secret-host-name\n")
    (kernel / "domainname").write_text("secret-domain\n")
    (root / "proc" / "cmdline").write_text("BOOT_IMAGE=/vmlinuz secret=1\n")
    (root / "proc" / "self" / "environ").write_text("TOKEN=abc\0")
    (root / "proc" / "self" / "cmdline").write_text("python\0secret-job.py\0")
    (root / "proc" / "4242").mkdir()
    (root / "proc" / "4242" / "cmdline").write_text("other\0--password=hunter2\0")
    mounts = root / "proc" / "mounts"
    mounts.write_text("/dev/vda / ext4 rw 0 0\ntmpfs /mnt/private/tools tmpfs ro 0 0\n" + mounts.read_text())
    status = root / "proc" / "self" / "status"
    status.write_text("Name:\tsecret-job\nPid:\t4242\nUid:\t1000\t1000\t1000\t1000\n" + status.read_text()
                      + "CapEff:\t0000000000000000\nSeccomp:\t2\nSeccomp_filters:\t1\nVmRSS:\t1234 kB\n")
    return root


def test_nothing_private_goes_in(tmp_path):
    root = _private_box(tmp_path)
    archive = tmp_path / "box.tar.bz2"
    result = gather(archive, root=root, env={"CUDA_VISIBLE_DEVICES": "1", "HOME": "/home/secret-user",
                                             "API_KEY": "sk-secret-0123456789"})
    members = archive_members(archive)
    blob = b"".join(v for v in members.values() if v)
    for secret in (b"secret-host-name", b"secret-domain", b"secret=1", b"TOKEN", b"secret-job", b"hunter2", b"4242",
                   b"/mnt/private", b"secret-user", b"sk-secret", b"VmRSS", b"Uid:"):
        assert secret not in blob, secret
    names = {n.split("/", 1)[1] for n in members if "/" in n}
    assert not {"proc/cmdline", "proc/self/environ", "proc/self/cmdline", "proc/sys/kernel/hostname"} & names
    assert not any(n.startswith("proc/4242") for n in names)
    status = members["box/proc/self/status"].decode()
    assert status and all(line.startswith(("Cpus_allowed", "Mems_allowed", "Seccomp", "CapEff"))
                          for line in status.splitlines()), status
    assert "Seccomp:\t2" in status and "CapEff:\t0000000000000000" in status
    mounts = members["box/proc/mounts"].decode()
    assert mounts and all(line.split()[2] in ("cgroup", "cgroup2", "cpuset") for line in mounts.splitlines())
    assert members["box/proc/driver/nvidia/gpus/0000:18:00.0/information"]
    manifest = json.loads(members["box/numabind/gather.json"])
    assert manifest["environment"] == {"CUDA_VISIBLE_DEVICES": "1"} and manifest["hostname"] is None
    assert {(i.path, i.why) for i in result.left_out} >= {("proc/sys/kernel/hostname", HOSTNAME_WHY),
                                                         ("proc/sys/kernel/domainname", HOSTNAME_WHY)}
    assert discover(archive).allowed_source.endswith("cgroup2:/job")
    with tarfile.open(archive) as tar:
        assert {(m.uid, m.gid, m.uname, m.gname) for m in tar.getmembers()} == {(0, 0, "", "")}


def test_the_hostname_goes_in_when_asked(tmp_path):
    root = _private_box(tmp_path)
    archive = tmp_path / "box.tar.bz2"
    result = gather(archive, root=root, env={}, hostname=True)
    members = archive_members(archive)
    assert members["box/proc/sys/kernel/hostname"] == b"secret-host-name\n"
    assert json.loads(members["box/numabind/gather.json"])["hostname"] == "secret-host-name"
    assert result.hostname and HOSTNAME_WHY not in {i.why for i in result.left_out}


def test_checks_report_goes_in_without_the_hostname_or_the_environment(tmp_path, checked, monkeypatch):
    """Whatever numabind check's report says of the host, its name and the environment's values are taken out."""
    calls, answer = checked
    real = os.uname()
    monkeypatch.setattr(os, "uname", lambda: os.uname_result(
        (real.sysname, "gpu-node-17.example", real.release, real.version, real.machine)))
    monkeypatch.setenv("API_KEY", "sk-secret-0123456789")
    answer["value"] = {"ok": True, "host": "gpu-node-17.example", "note": "ran on gpu-node-17.example as root",
                       "env": dict(os.environ)}
    archive = tmp_path / "host.tar.bz2"
    result = gather(archive)
    assert calls == [None] and result.check_error is None
    members = archive_members(archive)
    report = json.loads(members["host/numabind/check.json"])
    assert report["host"] == "(hostname left out)" and report["note"] == "ran on (hostname left out) as root"
    assert report["env"]["API_KEY"] == "$API_KEY"
    blob = b"".join(v for v in members.values() if v)
    assert b"gpu-node-17" not in blob and b"sk-secret" not in blob


def test_a_failing_check_is_recorded_not_fatal(tmp_path, checked):
    calls, answer = checked
    answer["value"] = OSError(1, "Operation not permitted")
    archive = tmp_path / "host.tar.bz2"
    result = gather(archive, env={})
    assert calls == [None]
    assert result.check_error == "numabind check failed: PermissionError: [Errno 1] Operation not permitted"
    members = archive_members(archive)
    assert members["host/numabind/check-error.txt"] == (result.check_error + "\n").encode()
    assert "host/numabind/check.json" not in members
    assert "numabind check: not in the archive: numabind check failed" in result.describe()


# ----------------------------------------------------------------------------- bounds, names, errors
def test_the_caps_leave_out_and_say_so(fake_machine, tmp_path):
    machine = fake_machine("two_sockets")
    small = gather(tmp_path / "small.tar.bz2", root=machine.path, env={}, max_file_bytes=64)
    why = {i.path: i.why for i in small.left_out}
    assert why["proc/cpuinfo"] == "larger than 64 B, the most one file may take"
    assert all(len(data) <= 64 for name, data in archive_members(tmp_path / "small.tar.bz2").items()
               if data is not None and "/numabind/" not in name)
    capped = gather(tmp_path / "capped.tar.bz2", root=machine.path, env={}, max_bytes=4096)
    assert any(i.why == "the archive reached its cap of 4 KiB" for i in capped.left_out)
    copied = [data for name, data in archive_members(tmp_path / "capped.tar.bz2").items()
              if data is not None and "/numabind/" not in name]     # numabind's own files come on top of the cap
    assert sum(len(data) for data in copied) <= 4096
    late = gather(tmp_path / "late.tar.bz2", root=machine.path, env={}, seconds=0)
    assert late.left_out and all(i.why == "copying stopped after 0 s" for i in late.left_out)
    assert "left out (copying stopped after 0 s)" in late.describe()
    assert "online_cpus" in late.differences and "nodes" in late.differences
    assert "WARNING: the archive replays differently from this machine in: " in late.describe()


def test_an_archive_that_is_no_machine_replays_as_nothing(tmp_path, fake_machine):
    empty = tmp_path / "empty"
    (empty / "sys").mkdir(parents=True)
    with tarfile.open(tmp_path / "empty.tar.bz2", "w:bz2") as tar:
        tar.add(empty, arcname="empty")
    view = discover(fake_machine("one_node").path).to_dict()
    (found,) = gathering.replay_differences(tmp_path / "empty.tar.bz2", view)
    assert found.startswith("everything: ") and "empty" in found


def test_the_archive_must_be_named_tar_bz2(tmp_path):
    with pytest.raises(NumabindError, match=r"must be named NAME\.tar\.bz2 .* give e\.g\. -o numabind-gather-"):
        gather(tmp_path / "machine.zip")
    with pytest.raises(NumabindError, match="does not exist; create it"):
        gather(tmp_path / "missing" / "m.tar.bz2")
    assert gathering.default_name(0) == "numabind-gather-19700101-000000.tar.bz2"


def test_an_hwloc_xml_root_is_refused_with_the_fix(tmp_path):
    machine = tmp_path / "m"
    FACTORIES["one_node"](machine)
    gather(tmp_path / "m.tar.bz2", root=machine, env={})
    xml = tmp_path / "m.xml"
    xml.write_bytes(archive_members(tmp_path / "m.tar.bz2")["m/numabind/topology.xml"])
    with pytest.raises(NumabindError, match="is an hwloc XML file, which holds no sysfs"):
        gather(tmp_path / "again.tar.bz2", root=xml)


def test_a_failed_gather_leaves_no_archive(tmp_path, monkeypatch):
    machine = tmp_path / "m"
    FACTORIES["one_node"](machine)

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tarfile.TarFile, "add", broken)
    with pytest.raises(NumabindError, match="cannot write .*No space left on device; give -o a path"):
        gather(tmp_path / "m.tar.bz2", root=machine, env={})
    assert list(tmp_path.glob("*.tar.bz2")) == [] and list(tmp_path.glob(".numabind-gather-*")) == []


# ----------------------------------------------------------------------------- the command
def test_numabind_gather_writes_the_archive_and_reports_it(tmp_path):
    machine = tmp_path / "m"
    FACTORIES["snc"](machine)
    out = numabind_cli("--root", str(machine), "gather", "-o", str(tmp_path / "snc.tar.bz2"), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["path"] == str(tmp_path / "snc.tar.bz2") and data["differences"] == [] and data["files"] > 10
    text = numabind_cli("gather", "--root", str(machine), "-o", str(tmp_path / "again.tar.bz2"))
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith(f"wrote {tmp_path / 'again.tar.bz2'}: ")
    assert f"replay it: numabind --root {tmp_path / 'again.tar.bz2'}" in text.stdout


def test_numabind_gather_refuses_a_bad_name_with_exit_2(tmp_path):
    out = numabind_cli("gather", "-o", str(tmp_path / "m.zip"))
    assert out.returncode == 2
    assert "must be named NAME.tar.bz2" in out.stderr and "Traceback" not in out.stderr
