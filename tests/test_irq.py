"""``numabind irq``: device interrupts discovered on fake trees (tests/fakeirq.py), moved and put back against a fake
``/proc/irq`` whose writes a fake kernel answers (EIO for managed interrupts), irqbalance present and absent."""

from __future__ import annotations

import json
import os

import pytest

import numabind
from numabind import irq
from numabind._fs import FsReader
from numabind.cli import commands
from numabind.cli import irq as cli_irq
from numabind.cpulist import format_cpulist
from numabind.errors import NumabindError, PlanError

from .fakeirq import FakeKernel, add_irq, add_irqbalance, add_msi_irqs, irq_box, write_interrupts
from .fakesys import two_sockets


@pytest.fixture
def box(tmp_path):
    root = tmp_path / "root"
    where = irq_box(root)
    return root, where


@pytest.fixture
def kernel(box, monkeypatch):
    fake = FakeKernel(box[0])
    monkeypatch.setattr(irq, "write_affinity", fake)
    return fake


@pytest.fixture
def record_dir(tmp_path):
    path = tmp_path / "records"
    path.mkdir(mode=0o700)
    return str(path)


@pytest.fixture
def cli(monkeypatch):
    """``numabind ARGS`` with ``irq`` registered (as cli/commands.py registers it)."""
    monkeypatch.setitem(commands.COMMANDS, "irq", (cli_irq.add_parser, cli_irq.cmd_irq))
    return commands.main


def _devices(root, **kw):
    topo = numabind.discover(root)
    return {d.what: d for d in irq.device_irqs(topo, irq.select_devices(topo, root, **kw), root)}


def _read(root, number, name="smp_affinity_list"):
    return (root / "proc/irq" / str(number) / name).read_text().strip()


# -- discovery -----------------------------------------------------------------------------------------------------

def test_each_gpus_and_nics_interrupts_with_names_counts_and_affinity(box):
    root, _ = box
    devs = _devices(root)
    gpu0 = devs["GPU 0"]
    assert (gpu0.address, gpu0.numa_node, gpu0.node_cpus) == ("0000:03:00.0", 0, frozenset(range(4)))
    assert [(i.number, i.kind) for i in gpu0.irqs] == [(40, "msix"), (41, "msix"), (42, "msix"), (43, "msix")]
    i42 = gpu0.irqs[2]
    assert (i42.affinity, i42.effective, dict(i42.counts)[4], i42.actions, i42.chip) == (
        frozenset(range(4, 8)), frozenset({4}), 900, "nvidia", "IR-PCI-MSIX-0000:03:00.0")
    assert [gpu0.off_node(i) for i in gpu0.irqs] == [False, False, True, False]
    assert [gpu0.ran_off_node(i) for i in gpu0.irqs] == [False, False, True, True]   # 43: ran on CPU 5 before
    assert gpu0.irqs[3].ran_on == frozenset({0, 5})
    # MSI vectors beside a legacy line: the legacy one (11) is left out
    assert [(i.number, i.kind) for i in devs["GPU 1"].irqs] == [(50, "msi"), (51, "msi")]
    eth2 = devs["eth2"].irqs
    assert [(i.number, i.kind, i.effective, i.affinity) for i in eth2] == [(70, "legacy", None, frozenset(range(8)))]
    assert [i.managed for i in devs["mlx5_0"].irqs] == [True, True, True]
    assert devs["eth0"].irqs == ()


def test_select_devices_by_gpu_nic_and_all_and_errors_name_the_choices(box):
    root, where = box
    topo = numabind.discover(root)
    assert irq.select_devices(topo, root, gpu=1) == [(where["gpu1"], "GPU 1", 1)]
    assert irq.select_devices(topo, root, nic="ib0") == [(where["mlx5_0"], "mlx5_0", 1)]   # by its interface
    assert [a for a, _, _ in irq.select_devices(topo, root, nic="bond0")] == [where["eth1"], where["eth2"]]
    every = irq.select_devices(topo, root, every=True)
    assert sorted(w for _, w, _ in every) == ["GPU 0", "GPU 1", "eth2", "mlx5_0"]   # only those with interrupts
    with pytest.raises(PlanError, match=r"--gpu 5: no such GPU \(visible GPUs: 0, 1\)"):
        irq.select_devices(topo, root, gpu=5)
    with pytest.raises(PlanError, match=r"--nic nope: .*mlx5_0"):
        irq.select_devices(topo, root, nic="nope")


def test_interrupt_table_reads_old_kernels_lines_and_skips_offline_columns(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/interrupts").write_text(
        "           CPU0       CPU2\n"
        "  0:         36          1   IO-APIC-edge      timer\n"
        " 24:          0          5   PCI-MSI 65536-edge\n"
        " 25:         10          0   PCI-MSIX-0000:00:04.0   0-edge      nvme0q0, nvme1q0\n"
        "NMI:          0          0   Non-maskable interrupts\n")
    table = irq.interrupt_table(FsReader(tmp_path))
    assert table == {0: ({0: 36, 2: 1}, "IO-APIC-edge", "timer"), 24: ({0: 0, 2: 5}, "PCI-MSI", ""),
                     25: ({0: 10, 2: 0}, "PCI-MSIX-0000:00:04.0", "nvme0q0, nvme1q0")}


def test_a_malformed_interrupts_header_names_the_file(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/interrupts").write_text("           CPUx\n  0: 1 IO-APIC timer\n")
    with pytest.raises(NumabindError, match=r"malformed .*proc/interrupts"):
        irq.interrupt_table(FsReader(tmp_path))


# -- irqbalance ------------------------------------------------------------------------------------------------------

def test_irqbalance_absent(box):
    balance = irq.read_irqbalance(box[0])
    assert not balance.running and balance.banned_cpus == frozenset() and balance.banned_irqs == frozenset()


def test_irqbalance_bans_from_config_mask_arguments_and_environment(box):
    root, _ = box
    add_irqbalance(root, 812, args=("--banirq=99", "-i", "98"), config='# managed by ops\nIRQBALANCE_BANNED_CPUS="f0"\n'
                   'IRQBALANCE_ARGS="--banirq 97"\n')
    balance = irq.read_irqbalance(root)
    assert balance.pids == (812,)
    assert balance.banned_cpus == frozenset(range(4, 8))
    assert balance.banned_irqs == frozenset({97, 98, 99})
    assert balance.sources == ("/etc/default/irqbalance", "/proc/812/cmdline")
    assert irq.ban_lines(balance, {2, 3}, [40, 41]) == [
        "IRQBALANCE_BANNED_CPULIST=2-7",
        'IRQBALANCE_ARGS="--banirq=40 --banirq=41 --banirq=97 --banirq=98 --banirq=99"']


def test_irqbalance_cpulist_wins_over_the_mask_and_sysconfig_and_environ_are_read(tmp_path):
    add_irqbalance(tmp_path, 9, config="IRQBALANCE_BANNED_CPULIST=0-1\nIRQBALANCE_BANNED_CPUS=ff\n",
                   config_path="etc/sysconfig/irqbalance", environ={"IRQBALANCE_BANNED_CPULIST": "6"})
    balance = irq.read_irqbalance(tmp_path)
    assert balance.banned_cpus == frozenset({0, 1, 6})
    assert balance.sources == ("/etc/sysconfig/irqbalance", "/proc/9/environ")


# -- apply and restore -----------------------------------------------------------------------------------------------

def test_apply_moves_onto_the_node_reads_back_and_restore_puts_back(box, kernel, record_dir):
    root, _ = box
    gpu0 = _devices(root, gpu=0)["GPU 0"]
    changes = irq.apply_irqs([(gpu0, gpu0.node_cpus)], root=root, record_dir=record_dir)
    assert [(c.irq, c.status) for c in changes] == [(40, "unchanged"), (41, "moved"), (42, "moved"), (43, "unchanged")]
    c42 = changes[2]
    assert (c42.was, c42.asked, c42.affinity, c42.effective) == (
        frozenset(range(4, 8)), frozenset(range(4)), frozenset(range(4)), frozenset({0}))
    assert kernel.writes == [(41, "0-3"), (42, "0-3")]
    assert _read(root, 42) == "0-3" and _read(root, 42, "effective_affinity_list") == "0"
    after = _devices(root, gpu=0)["GPU 0"]
    assert not after.off_node(after.irqs[2]) and after.ran_off_node(after.irqs[2])   # its counts keep its past
    restored = irq.restore_irqs(root=root, record_dir=record_dir)
    assert [(c.irq, c.status, c.affinity) for c in restored] == [
        (41, "moved", frozenset({1})), (42, "moved", frozenset(range(4, 8)))]
    assert _read(root, 41) == "1" and _read(root, 42) == "4-7"
    with pytest.raises(NumabindError, match="recorded no interrupt it moved"):
        irq.restore_irqs(root=root, record_dir=record_dir)


def test_a_dry_run_restore_writes_nothing_and_keeps_the_record(box, kernel, record_dir):
    root, _ = box
    irq.apply_irqs([(_devices(root, gpu=0)["GPU 0"], frozenset({3}))], root=root, record_dir=record_dir)
    writes = len(kernel.writes)
    dry = irq.restore_irqs(root=root, dry_run=True, record_dir=record_dir)
    assert [(c.irq, c.status, c.command) for c in dry][:1] == [
        (40, "dry-run", "echo 0-3 > /proc/irq/40/smp_affinity_list")]
    assert len(kernel.writes) == writes and _read(root, 40) == "3"
    assert {c.status for c in irq.restore_irqs(root=root, record_dir=record_dir)} == {"moved"}
    assert _read(root, 40) == "0-3"


def test_a_record_that_cannot_be_written_says_how_to_put_them_back(box, kernel, tmp_path):
    root, _ = box
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)               # writable by others: records.open_private_dir refuses it
    with pytest.raises(NumabindError, match=r"41, 42 were moved, but .*echo 1 > /proc/irq/41/smp_affinity_list; "
                                            r"echo 4-7 > /proc/irq/42/smp_affinity_list"):
        irq.apply_irqs([(_devices(root, gpu=0)["GPU 0"], frozenset(range(4)))], root=root, record_dir=str(shared))


def test_a_second_apply_keeps_the_first_ones_before(box, kernel, record_dir):
    root, _ = box
    gpu0 = _devices(root, gpu=0)["GPU 0"]
    irq.apply_irqs([(gpu0, frozenset({2, 3}))], root=root, record_dir=record_dir)
    irq.apply_irqs([(_devices(root, gpu=0)["GPU 0"], frozenset({3}))], root=root, record_dir=record_dir)
    irq.restore_irqs(root=root, record_dir=record_dir)
    assert [_read(root, n) for n in (40, 41, 42, 43)] == ["0-3", "1", "4-7", "0-3"]


def test_managed_interrupts_are_reported_with_the_reason_and_the_rest_move(box, kernel, record_dir):
    root, _ = box
    devs = _devices(root)
    changes = irq.apply_irqs([(devs["mlx5_0"], frozenset({7})), (devs["GPU 1"], frozenset({6}))], root=root,
                             record_dir=record_dir)
    assert [(c.irq, c.status) for c in changes] == [(60, "managed"), (61, "managed"), (62, "managed"),
                                                    (50, "moved"), (51, "moved")]
    assert "manages IRQ 60's affinity (EIO" in changes[0].reason
    assert _read(root, 60) == "4" and _read(root, 50) == "6"


def test_a_quiet_interrupt_whose_effective_cpu_moves_later_is_pending_and_restored(box, monkeypatch, record_dir):
    """x86 moves an interrupt when it next fires: right after the write, smp_affinity_list reads back what was asked
    but effective_affinity_list still names the old CPU (seen in the 3-node guest). That is ``pending``, not a
    failure: recorded, exit 0, and ``--restore`` puts it back."""
    root, _ = box
    fake = FakeKernel(root)

    def quiet(path, cpus):     # the list is taken, the effective CPU stays where the interrupt last ran
        number = int(os.path.basename(os.path.dirname(path)))
        old = _read(root, number, "effective_affinity_list")
        fake(path, cpus)
        add_irq(root, number, format_cpulist(cpus), effective=old)

    monkeypatch.setattr(irq, "write_affinity", quiet)
    gpu1 = _devices(root, gpu=1)["GPU 1"]
    changes = irq.apply_irqs([(gpu1, frozenset({0, 1}))], root=root, record_dir=record_dir)
    assert [c.status for c in changes] == ["pending", "pending"]
    assert all(c.affinity == frozenset({0, 1}) and "when the interrupt next fires" in c.reason for c in changes)
    assert _read(root, 50) == "0-1"
    restored = irq.restore_irqs(root=root, record_dir=record_dir)
    assert [c.irq for c in restored] == [50, 51] and _read(root, 50) == "4-7"


def test_an_offline_cpu_is_refused_with_einval_named(box, monkeypatch, record_dir):
    root, _ = box
    monkeypatch.setattr(irq, "write_affinity", FakeKernel(root, online="0-3"))
    gpu1 = _devices(root, gpu=1)["GPU 1"]
    changes = irq.apply_irqs([(gpu1, frozenset({6}))], root=root, record_dir=record_dir)
    assert {c.status for c in changes} == {"failed"}
    assert "refused CPUs 6 for IRQ 50 (EINVAL" in changes[0].reason


def test_dry_run_writes_nothing_and_prints_the_echo_lines(box, kernel, record_dir):
    root, _ = box
    gpu0 = _devices(root, gpu=0)["GPU 0"]
    changes = irq.apply_irqs([(gpu0, frozenset({2, 3}))], root=root, dry_run=True, record_dir=record_dir)
    assert [c.command for c in changes] == [f"echo 2-3 > /proc/irq/{n}/smp_affinity_list" for n in (40, 41, 42, 43)]
    assert kernel.writes == [] and _read(root, 42) == "4-7"


def test_restore_of_another_boots_record_is_refused_and_dropped(box, kernel, record_dir):
    root, _ = box
    boot = root / "proc/sys/kernel/random/boot_id"
    boot.parent.mkdir(parents=True)
    boot.write_text("aaaa\n")
    irq.apply_irqs([(_devices(root, gpu=0)["GPU 0"], frozenset({3}))], root=root, record_dir=record_dir)
    boot.write_text("bbbb\n")
    with pytest.raises(NumabindError, match="from another boot"):
        irq.restore_irqs(root=root, record_dir=record_dir)
    with pytest.raises(NumabindError, match="recorded no interrupt"):
        irq.restore_irqs(root=root, record_dir=record_dir)


def test_write_affinity_writes_the_list(tmp_path):
    path = tmp_path / "smp_affinity_list"
    path.write_text("0-7\n")
    irq.write_affinity(str(path), frozenset({1, 2, 3, 9}))
    assert path.read_text() == "1-3,9\n"


def test_reserve_takes_the_last_whole_cores_of_the_plan(tmp_path):
    two_sockets(tmp_path, cpus_per_socket=8, smt=True)       # socket 0: cores 0/8, 1/9, 2/10, 3/11
    topo = numabind.discover(tmp_path)
    node0 = topo.nodes[0].cpus
    assert irq.reserve_cpus(topo, node0, 1) == frozenset({3, 11})
    assert irq.reserve_cpus(topo, node0, 2) == frozenset({2, 3, 10, 11})
    with pytest.raises(PlanError, match=r"--reserve 5: .* hold 4 core\(s\); give a number from 1 to 4"):
        irq.reserve_cpus(topo, node0, 5)


# -- the command line ------------------------------------------------------------------------------------------------

def test_cli_shows_each_device_and_flags_off_node(box, cli, capsys):
    root, _ = box
    assert cli(["--root", str(root), "irq", "--gpu", "0"]) == 0
    out = capsys.readouterr().out
    assert "GPU 0  0000:03:00.0  node 0 (CPUs 0-3)" in out
    line42 = next(ln for ln in out.splitlines() if ln.strip().startswith("42"))
    assert line42.split() == ["42", "msix", "4-7", "4", "4:900", "nvidia", "OFF-NODE", "ran-off-node"]
    assert "irqbalance: not running" in out


def test_cli_json(box, cli, capsys):
    root, _ = box
    add_irqbalance(root, 5)
    assert cli(["--root", str(root), "irq", "--nic", "mlx5_0", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["irqbalance"]["running"] is True
    (dev,) = got["devices"]
    assert dev["device"] == "mlx5_0" and dev["numa_node"] == 1
    assert [(i["irq"], i["managed"], i["off_node"], i["ran_off_node"], i["counts"]) for i in dev["irqs"]] == [
        (60, True, False, False, {"4": 5}), (61, True, False, False, {"5": 6}), (62, True, False, False, {"6": 7})]


def test_cli_json_before_the_subcommand_is_the_same_as_after_it(box, cli, capsys):
    root = str(box[0])
    assert cli(["--json", "--root", root, "irq", "--gpu", "0"]) == 0
    before = json.loads(capsys.readouterr().out)
    assert cli(["irq", "--gpu", "0", "--root", root, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == before and before["devices"][0]["device"] == "GPU 0"


def test_cli_dry_run_with_reserve_and_irqbalance_ban_lines(box, cli, capsys):
    root, _ = box
    add_irqbalance(root, 812)
    assert cli(["--root", str(root), "irq", "--apply", "--reserve", "1", "--gpu", "1", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "echo 7 > /proc/irq/50/smp_affinity_list",
        "echo 7 > /proc/irq/51/smp_affinity_list",
        "irqbalance runs (pid 812): it will move these interrupts back. Keep it off them: put these lines in "
        "/etc/default/irqbalance (or /etc/sysconfig/irqbalance) and restart it:",
        "  IRQBALANCE_BANNED_CPULIST=7",
        '  IRQBALANCE_ARGS="--banirq=50 --banirq=51"']


def test_cli_dry_run_onto_the_node_without_irqbalance_prints_no_ban_lines(box, cli, capsys):
    root, _ = box
    assert cli(["--root", str(root), "irq", "--apply", "--gpu", "0", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [f"echo 0-3 > /proc/irq/{n}/smp_affinity_list" for n in (40, 41, 42, 43)]


def test_cli_apply_refuses_a_replayed_root_and_a_user_without_root(box, cli, capsys, monkeypatch):
    root, _ = box
    assert cli(["--root", str(root), "irq", "--apply"]) == 1
    assert "replays another machine: drop --root, or add --dry-run" in capsys.readouterr().err
    monkeypatch.delenv("NUMABIND_FSROOT", raising=False)
    monkeypatch.setattr(cli_irq.os, "geteuid", lambda: 1000)
    assert cli(["irq", "--restore"]) == 1
    assert "needs root: run it as root (sudo numabind irq --restore ...)" in capsys.readouterr().err


@pytest.mark.parametrize("argv, said", [
    (["--reserve", "2"], "--reserve N goes with --apply --gpu G"),
    (["--apply", "--restore"], "--apply and --restore go separately"),
    (["--dry-run"], "--dry-run goes with --apply or --restore"),
    (["--restore", "--gpu", "0"], "give no device with it"),
])
def test_cli_usage_errors(box, cli, capsys, argv, said):
    assert cli(["--root", str(box[0]), "irq", *argv]) == 2
    assert said in capsys.readouterr().err


def test_a_device_without_msi_and_an_old_kernels_files(tmp_path):
    two_sockets(tmp_path, cpus_per_socket=2, smt=False)
    from .fakeio import add_pci_function

    add_pci_function(tmp_path, "0000:05:00.0", numa_node=1)
    add_msi_irqs(tmp_path, "0000:05:00.0", (), legacy=16)
    add_irq(tmp_path, 16, "0-3", old_kernel=True)
    write_interrupts(tmp_path, range(4), [(16, {0: 2, 1: 3}, "IO-APIC", "16-fasteoi", "ehci_hcd:usb1")])
    topo = numabind.discover(tmp_path)
    (dev,) = irq.device_irqs(topo, irq.select_devices(topo, tmp_path, every=True), tmp_path)
    (one,) = dev.irqs
    assert (one.number, one.kind, one.effective, one.actions, one.managed) == (16, "legacy", None, "ehci_hcd:usb1",
                                                                              False)
    assert dev.off_node(one)     # may run on node 0's CPUs and ran on 0 and 1
