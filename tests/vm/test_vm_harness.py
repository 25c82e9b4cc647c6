"""The harness checks itself: the guest really has several nodes (inside), and the host
turns guest results into its own (fast host tests, with a stand-in for QEMU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from . import arm64, guest, harness, image, plugin
from .cases import nodes as cases_nodes

TOPOLOGY_PARAMS = [pytest.param(name, marks=pytest.mark.numa_vm(topology=name), id=name)
                   for name in harness.TOPOLOGIES]


@pytest.mark.parametrize("name", TOPOLOGY_PARAMS)
def test_guest_has_the_nodes_qemu_was_given(name, vm_topology):
    cases_nodes.guest_has_the_nodes_qemu_was_given(name, vm_topology)


# ----------------------------------------------------------------------------- host: pure helpers
def test_qemu_args_describe_each_node():
    args = harness.topology("mem-only").qemu_args()
    joined = " ".join(args)
    assert "-smp 4,sockets=2,cores=2,threads=1" in joined
    assert "-m 1280M" in joined
    assert "node,nodeid=0,memdev=mem0,cpus=0-1" in args
    assert "node,nodeid=2,memdev=mem2" in args  # memory-only: no cpus=
    assert "dist,src=2,dst=0,val=30" in args
    asym = harness.topology("asym")
    assert asym.distance(0, 1) == 16 and asym.distance(1, 0) == 26
    assert harness.topology("2n").distance_matrix() == [[10, 20], [20, 10]]
    with pytest.raises(harness.HarnessError, match="unknown VM topology"):
        harness.topology("nope")


def test_guest_script_refuses_paths_the_guest_cannot_see():
    script = harness.guest_script(["/usr/bin/python3", "-c", "print('a b')"], cwd="/work/x", env={"K": "v w"})
    assert "cd /work/x || exit 125" in script and "export K='v w'" in script
    assert script.rstrip().endswith("""exec /usr/bin/python3 -c 'print('"'"'a b'"'"')'""")
    with pytest.raises(harness.HarnessError, match="under /tmp"):
        harness.guest_script(["/tmp/venv/bin/python"], cwd="/work/x")
    with pytest.raises(harness.HarnessError, match="under /tmp"):
        harness.guest_script(["/usr/bin/python3"], cwd="/tmp/checkout")
    assert harness.hidden_in_guest("/tmpfoo") is None and harness.hidden_in_guest("/run") == "/run"


def test_a_checkout_under_tmp_is_bound_back_into_the_guest(monkeypatch):
    monkeypatch.setattr(guest, "REPO_ROOT", Path("/tmp/ci/clone"))
    assert "/tmp/ci/clone" in harness.paths_to_bind()
    assert harness.hidden_in_guest("/tmp/ci/clone/tests") is None
    assert harness.hidden_in_guest("/tmp/elsewhere") == "/tmp"
    assert "cd /tmp/ci/clone" in harness.guest_script(["/usr/bin/python3"], cwd="/tmp/ci/clone")


def test_a_stale_initramfs_is_rebuilt_without_network(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMABIND_VM_CACHE", str(tmp_path))
    monkeypatch.setattr(image, "_busybox_bytes", lambda arch="amd64": b"busybox stand-in")
    monkeypatch.setattr(image, "qemu_binary", lambda arch="amd64": "/usr/bin/qemu-system-x86_64")
    kdir = tmp_path / "kernel"
    (kdir / "modules").mkdir(parents=True)
    for mod in harness.MODULES:
        (kdir / "modules" / f"{mod}.ko").write_bytes(b"module " + mod.encode())
    (kdir / "vmlinux").write_bytes(b"\x7fELF stand-in")
    (kdir / "manifest.json").write_text(json.dumps({"package": "linux-image-test", "release": "test",
                                                    "image": "vmlinux", "modules": list(harness.MODULES)}))
    assert harness.cached_artifacts() is None
    assert harness.problems() == []
    arts = harness.cached_artifacts()
    assert arts is not None and b"busybox stand-in" in arts.initramfs.read_bytes()
    (tmp_path / "initramfs.json").write_text('{"digest": "from an older init script"}')
    assert harness.cached_artifacts() is None
    assert harness.problems() == [] and harness.cached_artifacts() == arts
    (kdir / "vmlinux").unlink()
    assert harness.problems() == [f"no prepared kernel/initramfs in {tmp_path}"]


def test_the_harness_fetches_through_tools_vm_kernel(tmp_path, monkeypatch):
    """Kernel fetching lives in tools/vm_kernel.py: the harness hands it each kernel's folder, architecture,
    suite, modules and release series, and turns its errors into HarnessError."""
    monkeypatch.setenv("NUMABIND_VM_CACHE", str(tmp_path))
    seen = []

    def fake_fetch(dest, arch, **kw):
        seen.append((Path(dest), arch, kw["suites"], tuple(kw["modules"]), kw["release_prefix"], Path(kw["apt_root"])))
        if arch == "arm64":
            raise harness.vm_kernel.FetchError("no arm64 mirror here")
        return {"fetched": str(dest)}

    monkeypatch.setattr(harness.vm_kernel, "fetch", fake_fetch)
    assert harness.fetch_kernel(kernel="6.1") == {"fetched": str(tmp_path / "kernel")}
    assert harness.fetch_kernel(kernel="6.12") == {"fetched": str(tmp_path / "kernel-6.12")}
    with pytest.raises(harness.HarnessError, match="no arm64 mirror here"):
        harness.fetch_kernel(kernel="arm64")
    assert seen == [
        (tmp_path / "kernel", "amd64", (), harness.MODULES, "6.1.", tmp_path / "apt" / "amd64-bookworm"),
        (tmp_path / "kernel-6.12", "amd64", ("bookworm-backports",), ("netfs", "9pnet", "9pnet_virtio", "9p"),
         "6.12.", tmp_path / "apt" / "bookworm-backports"),
        (tmp_path / "kernel-arm64", "arm64", (), harness.vm_kernel.ARCHES["arm64"].modules, "6.1.",
         tmp_path / "apt" / "arm64-bookworm"),
    ]
    assert not hasattr(harness, "_module_order") and not hasattr(harness, "_find_payload")   # not copied back
    # what setup.sh fetches with the tool's defaults is what the harness's guests load
    assert harness.MODULES == harness.vm_kernel.ARCHES["amd64"].modules
    assert harness.MODULES_ARM64 == harness.kernel_spec("arm64").modules == harness.vm_kernel.ARCHES["arm64"].modules


def test_the_guest_does_not_load_the_kernel_tool():
    """The guest imports the harness (tests/conftest.py) with no bytecode cache: the tool stays unloaded."""
    code = ("import sys; import tests.vm.harness, tests.vm.plugin; "
            "print(sorted(m for m in sys.modules if 'vm_kernel' in m))")
    out = subprocess.run([sys.executable, "-c", code], cwd=harness.REPO_ROOT, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_cpio_newc_layout():
    data = image._cpio_newc([("init", 0o100755, b"#!/bin/sh\n"), ("bin", 0o040755, b"")])
    pos, names = 0, []
    while True:
        assert data[pos:pos + 6] == b"070701"
        fields = [int(data[pos + 6 + 8 * k:pos + 14 + 8 * k], 16) for k in range(13)]
        size, namesize = fields[6], fields[11]
        name = data[pos + 110:pos + 110 + namesize - 1].decode()
        names.append((name, fields[1], size))
        pos += 110 + namesize
        pos += -pos % 4
        assert data[pos:pos + size] == (b"#!/bin/sh\n" if name == "init" else b"")
        pos += size + (-size % 4)
        if name == "TRAILER!!!":
            break
    assert names == [("init", 0o100755, 10), ("bin", 0o040755, 0), ("TRAILER!!!", 0, 0)]
    assert pos == len(data)


# ----------------------------------------------------------------------------- host: results file
def _report(nodeid, when, outcome, longrepr=None, sections=()):
    from _pytest.reports import TestReport

    return TestReport(nodeid=nodeid, location=("tests/x.py", 1, nodeid.split("::")[-1]), keywords={},
                      outcome=outcome, longrepr=longrepr, when=when, sections=list(sections), duration=0.25)


def test_results_file_round_trip(pytestconfig):
    ser = lambda rep: pytestconfig.hook.pytest_report_to_serializable(config=pytestconfig, report=rep)  # noqa: E731
    lines = [{"event": "sessionstart", "uptime": 10.0}]
    for nid, outcome in (("t.py::ok", "passed"), ("t.py::bad", "failed")):
        lines.append({"event": "start", "nodeid": nid, "uptime": 11.0})
        lines.append({"event": "report", "nodeid": nid, "report": ser(_report(nid, "setup", "passed"))})
        call = _report(nid, "call", outcome, longrepr="assert 4 == 5" if outcome == "failed" else None,
                       sections=[("Captured stdout call", "N1=100.0%\n")])
        lines.append({"event": "report", "nodeid": nid, "report": ser(call)})
        lines.append({"event": "report", "nodeid": nid, "report": ser(_report(nid, "teardown", "passed"))})
    lines.append({"event": "start", "nodeid": "t.py::hung", "uptime": 12.0})
    text = "\n".join(json.dumps(x) for x in lines) + '\n{"event": "report", "nodeid": "t.py::hu'  # cut short
    res = plugin.GuestResults.parse(text, pytestconfig)
    assert res.report("t.py::ok", "call").passed
    bad = res.report("t.py::bad", "call")
    assert bad.failed and "assert 4 == 5" in str(bad.longrepr)
    assert bad.sections == [("Captured stdout call", "N1=100.0%\n")]
    assert res.report("t.py::hung", "call") is None
    assert res.started[-1] == "t.py::hung"
    assert res.bad_lines == 1
    assert res.exitstatus is None and res.session_uptime == (10.0, None)


# ----------------------------------------------------------------------------- host: the plugin, QEMU stood in for
INNER_CONFTEST = """
from tests.vm import plugin
def pytest_configure(config):
    plugin.configure(config)
"""
INNER_INI = """
[pytest]
markers =
    numa_vm: runs in the guest
"""
INNER_TESTS = """
import os, pytest

@pytest.mark.numa_vm
def test_ok():
    assert os.environ["_NUMABIND_VM_GUEST"] == "2n"
    print("placement: N1=99.9%")

@pytest.mark.numa_vm(topology="2n")
def test_bad():
    print("GUEST-SAYS-HELLO")
    assert 2 + 2 == 5

@pytest.mark.numa_vm
def test_skipped():
    pytest.skip("nothing to see")

def test_host_only():
    assert "_NUMABIND_VM_GUEST" not in os.environ
"""


@pytest.fixture
def inner(pytester, monkeypatch, tmp_path):
    """An inner pytest project wired to the plugin, with the VM cache in a temporary folder."""
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makeini(INNER_INI)
    pytester.makepyfile(test_inner=INNER_TESTS)
    monkeypatch.setenv("NUMABIND_VM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PYTHONPATH", str(harness.REPO_ROOT))
    monkeypatch.delenv(plugin.REQUIRE_ENV, raising=False)
    monkeypatch.setattr(guest, "hidden_in_guest", lambda path: None)  # the stand-in runs on the host
    return pytester


def _fake_guest_runner(calls):
    """Stands in for run_guest: runs the guest script on the host, the share being the run folder."""

    def run_guest(topology, script, *, run_dir, **kw):
        calls.append(topology)
        script = script.replace(harness.GUEST_SHARE, str(run_dir))
        with open(run_dir / "output.log", "wb") as out:
            rc = subprocess.run(["sh", "-c", script], stdout=out, stderr=subprocess.STDOUT, timeout=120).returncode
        (run_dir / "console.log").write_text("fake console\n")
        return harness.GuestRun(topology, run_dir, exit_code=rc, qemu_rc=0, boot_s=0.0, total_s=1.0)

    return run_guest


def test_guest_reports_become_host_reports(inner, monkeypatch):
    calls = []
    monkeypatch.setattr(harness, "problems", lambda kernel=None: [])
    monkeypatch.setattr(harness, "run_guest", _fake_guest_runner(calls))
    result = inner.runpytest_inprocess("-p", "no:cacheprovider", "-rA")
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    assert calls == ["2n"]  # one guest for all three numa_vm tests
    result.stdout.fnmatch_lines(["E       assert (2 + 2) == 5", "*Captured stdout call*", "GUEST-SAYS-HELLO",
                                 "*numa_vm guests*", "2n: booted in 0.0 s*tests: 1 failed, 1 passed, 1 skipped*",
                                 "*placement: N1=99.9%*", "SKIPPED*nothing to see*"])


def test_guest_that_never_boots_fails_with_its_console(inner, monkeypatch):
    def run_guest(topology, script, *, run_dir, **kw):
        (run_dir / "console.log").write_text("FAKE-CONSOLE: Kernel panic - not syncing\n")
        return harness.GuestRun(topology, run_dir, failure="guest did not boot within 1 s", total_s=1.0)

    monkeypatch.setattr(harness, "problems", lambda kernel=None: [])
    monkeypatch.setattr(harness, "run_guest", run_guest)
    result = inner.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines(["*did not boot within 1 s*", "*FAKE-CONSOLE: Kernel panic*"])


def test_without_qemu_numa_vm_tests_skip_unless_required(inner, monkeypatch):
    monkeypatch.setenv("NUMABIND_VM_QEMU", "/nonexistent/qemu-system-x86_64")
    result = inner.runpytest_inprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.fnmatch_lines(["*numa_vm: no VM here*qemu-system-x86_64 not found*prepare*"])
    monkeypatch.setenv(plugin.REQUIRE_ENV, "1")
    result = inner.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines([f"*{plugin.REQUIRE_ENV}=1 but the VM cannot run*"])


FAKE_QEMU = """#!/bin/sh
# Stands in for qemu-system-x86_64: writes to the -serial file, then maybe the boot marker, then hangs.
for a in "$@"; do case "$a" in file:*) console="${a#file:}";; esac; done
echo "SeaBIOS (fake)" > "$console"
[ -n "$FAKE_BOOTS" ] && echo "numavm-booted uptime=1.00" >> "$console"
exec sleep 600
"""


@pytest.mark.parametrize("boots", [False, True], ids=["no-boot", "hang"])
def test_run_guest_kills_a_guest_that_does_not_boot_or_hangs(tmp_path, monkeypatch, boots):
    qemu = tmp_path / "qemu"
    qemu.write_text(FAKE_QEMU)
    qemu.chmod(0o755)
    monkeypatch.setenv("NUMABIND_VM_QEMU", str(qemu))
    monkeypatch.setenv("NUMABIND_VM_CACHE", str(tmp_path / "cache"))
    if boots:
        monkeypatch.setenv("FAKE_BOOTS", "1")
    arts = harness.Artifacts(tmp_path / "vmlinux", tmp_path / "initramfs", "test", "test")
    t0 = time.monotonic()
    run = harness.run_guest("2n", "true\n", artifacts=arts, boot_timeout=1.5, timeout=3)
    assert time.monotonic() - t0 < 10
    assert "SeaBIOS (fake)" in run.console_tail()
    assert run.exit_code is None
    if boots:
        assert run.boot_s is not None and run.guest_uptime_at_boot == 1.0
        assert run.failure.startswith("guest timed out after 3 s")
    else:
        assert run.boot_s is None and run.failure == "guest did not boot within 2 s"


# ----------------------------------------------------------------------------- host + real guest, end to end
def test_real_guest_failure_and_hang_reach_the_host(tmp_path):
    """A failing guest test fails on the host with the guest's output; a hanging one fails with
    the console log once the guest's time is up; the passing one passes."""
    issues = harness.problems()
    if issues:
        if plugin.vm_required():
            pytest.fail(f"{plugin.REQUIRE_ENV}=1 but the VM cannot run: {'; '.join(issues)}", pytrace=False)
        pytest.skip(f"numa_vm: no VM here ({'; '.join(issues)}); run `python3 -m tests.vm.harness prepare`")
    xml = tmp_path / "inner.xml"
    env = dict(os.environ, NUMABIND_VM_TIMEOUT="45")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-o", "addopts=",
                           f"--junitxml={xml}", "tests/vm/selftest_cases.py"],
                          cwd=harness.REPO_ROOT, env=env, capture_output=True, text=True, timeout=180)
    wall = time.monotonic() - t0
    print(proc.stdout[-3000:])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    cases = {tc.get("name"): tc for tc in ET.parse(xml).getroot().iter("testcase")}
    assert set(cases) == {"test_passes_in_guest", "test_fails_in_guest", "test_hangs_in_guest"}
    assert cases["test_passes_in_guest"].find("failure") is None
    failure = cases["test_fails_in_guest"].find("failure")
    assert failure is not None and "assert (2 + 2) == 5" in failure.text
    assert "GUEST-OUTPUT-MARK" in ET.tostring(cases["test_fails_in_guest"], encoding="unicode")
    hang = cases["test_hangs_in_guest"].find("failure")
    assert hang is not None
    assert "guest timed out after 45 s" in hang.text and "stopped while running this very test" in hang.text
    assert "guest console" in hang.text and "numavm-booted" in hang.text
    assert wall < 45 + 60


def test_each_kernel_has_its_own_cache_folder_and_initramfs(tmp_path, monkeypatch):
    """The 6.12 guest (weighted interleave) is prepared next to the default 6.1 one, never instead of it."""
    monkeypatch.setenv("NUMABIND_VM_CACHE", str(tmp_path))
    monkeypatch.setattr(image, "_busybox_bytes", lambda arch="amd64": b"busybox stand-in")
    monkeypatch.setattr(image, "qemu_binary", lambda arch="amd64": "/usr/bin/qemu-system-x86_64")
    spec = harness.kernel_spec("6.12")
    assert spec.suite == "bookworm-backports" and "virtio_pci" not in spec.modules   # built into that kernel
    kdir = tmp_path / "kernel-6.12"
    (kdir / "modules").mkdir(parents=True)
    for mod in spec.modules:
        (kdir / "modules" / f"{mod}.ko").write_bytes(b"module " + mod.encode())
    (kdir / "vmlinuz").write_bytes(b"bzImage stand-in")
    (kdir / "manifest.json").write_text(json.dumps({"package": "linux-image-6.12.0-test-amd64",
                                                    "release": "6.12.0-test-amd64", "image": "vmlinuz",
                                                    "modules": list(spec.modules)}))
    assert harness.problems() == [f"no prepared kernel/initramfs in {tmp_path}"]     # 6.1 is not prepared
    assert harness.problems("6.12") == []
    arts = harness.cached_artifacts("6.12")
    assert arts.initramfs == tmp_path / "initramfs-6.12.cpio" and arts.release.startswith("6.12.")
    assert harness.cached_artifacts() is None
    with pytest.raises(harness.HarnessError, match=r"unknown VM kernel '5.4'; known: 6.1, 6.12, arm64"):
        harness.kernel_spec("5.4")


def test_the_kernel_a_test_asks_for(pytester):
    items = pytester.getitems("""
import pytest
@pytest.mark.numa_vm
def test_a(): pass
@pytest.mark.numa_vm(topology="mem-only", kernel="6.12")
def test_b(): pass
""")
    from tests.vm import plugin

    assert [(plugin.topology_of(i), plugin.kernel_of(i)) for i in items] == [("2n", "6.1"), ("mem-only", "6.12")]


def test_the_hmat_topology_gives_qemu_its_bandwidth_figures():
    spec = harness.topology("hmat")
    args = spec.qemu_args()
    assert spec.machine == "pc,hmat=on" and harness.topology("2n").machine == "pc"
    assert "hmat-lb,initiator=0,target=0,hierarchy=memory,data-type=access-bandwidth,bandwidth=30000M" in args
    assert "hmat-lb,initiator=1,target=1,hierarchy=memory,data-type=access-latency,latency=10" in args
    pairs = {(i, t) for i, t, _, _ in spec.hmat}
    assert pairs == {(i, t) for i in range(2) for t in range(2)}      # QEMU wants every pair


# ----------------------------------------------------------------------------- host: the arm64 guest
FAKE_QEMU_ARGV = """#!/bin/sh
# Stands in for qemu-system-aarch64: writes its argv to the -serial file and exits without booting.
for a in "$@"; do case "$a" in file:*) console="${a#file:}";; esac; done
printf '%s\\n' "$@" > "$console"
"""


def test_the_arm64_guest_is_a_virt_board_chrooted_into_the_arm64_userland(tmp_path, monkeypatch):
    qemu = tmp_path / "qemu-system-aarch64"
    qemu.write_text(FAKE_QEMU_ARGV)
    qemu.chmod(0o755)
    monkeypatch.setenv("NUMABIND_VM_QEMU_ARM64", str(qemu))
    monkeypatch.setenv("NUMABIND_VM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("NUMABIND_VM_CPU_ARM64", raising=False)
    core = tmp_path / "cache" / "arm64" / "native" / "_native.abi3.so"
    monkeypatch.setattr(guest, "arm64_binds", lambda: [("/work/x", "/work/x"),
                                                         (str(core), "/work/x/src/numabind/_native.abi3.so")])
    arts = harness.Artifacts(tmp_path / "Image", tmp_path / "initramfs-arm64.cpio", "6.1.0-50-arm64", "test")
    run = harness.run_guest("mem-only", "true\n", artifacts=arts, boot_timeout=5, timeout=10, kernel="arm64")
    argv = run.read("console.log").splitlines()
    joined = " ".join(argv)
    assert "-machine virt -accel tcg,thread=multi -cpu max,pauth-impdef=on" in joined
    assert "-smp 4,sockets=2,cores=2,threads=1" in joined and "node,nodeid=2,memdev=mem2" in argv
    assert argv[argv.index("-append") + 1].startswith("console=ttyAMA0 ")
    assert argv[argv.index("-kernel") + 1] == str(tmp_path / "Image")
    assert run.read("root") == f"{tmp_path / 'cache' / 'arm64' / 'root'}\n"
    assert run.read("binds") == f"/work/x|/work/x\n{core}|/work/x/src/numabind/_native.abi3.so\n"
    assert run.failure == "QEMU exited with 0 before the guest booted"
    with pytest.raises(harness.HarnessError, match="HMAT"):
        harness.run_guest("hmat", "true\n", artifacts=arts, kernel="arm64")


def test_the_arm64_guest_runs_its_own_python_with_the_checkout_on_its_path():
    assert harness.guest_python("arm64") == harness.ARM64_PYTHON and harness.guest_python() == sys.executable
    assert harness.guest_env() == {}
    path = harness.guest_env("arm64")["PYTHONPATH"].split(":")
    assert path[:2] == [str(harness.REPO_ROOT / "src"), str(harness.REPO_ROOT)]
    import _pytest

    assert str(Path(_pytest.__file__).parent.parent) in path       # pytest itself: pure Python, from the host
    init = image._init_script(("9p",), "arm64")
    assert "for m in 9p; do insmod" in init and "chroot $r /bin/sh /tmp/numavm/run.sh" in init
    assert image._init_script(("9p",)) != init and "chroot /host " in image._init_script(("9p",))


def test_the_arm64_c_core_is_rebuilt_when_its_sources_change(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMABIND_VM_CACHE", str(tmp_path / "cache"))
    inc = tmp_path / "cache" / "arm64" / "headers" / "usr" / "include" / "python3.11"
    inc.mkdir(parents=True)
    (inc / "Python.h").write_text("/* stand-in */\n")
    log = tmp_path / "cc.log"
    cc = tmp_path / "aarch64-linux-gnu-gcc"
    cc.write_text(f'#!/bin/sh\necho "$*" >> {log}\nwhile [ "$1" != -o ]; do shift; done; echo core > "$2"\n')
    cc.chmod(0o755)
    monkeypatch.setenv("NUMABIND_VM_ARM64_CC", str(cc))
    source = tmp_path / "numabind.c"
    source.write_text("int a;\n")
    monkeypatch.setattr(arm64, "_native_sources", lambda: [source])

    class FakeBuilder:
        @staticmethod
        def emit_c_code(path):
            Path(path).write_text("/* cffi */\n")

    monkeypatch.setattr(arm64, "_load_build_ffi", lambda: type("M", (), {"ffibuilder": FakeBuilder}))
    assert harness.arm64_native() is None                          # not built yet, and not asked to
    out = harness.arm64_native(build=True)
    assert out.read_text() == "core\n" and len(log.read_text().splitlines()) == 1
    assert f'-DNB_VERSION="{arm64._read_version()}"' in log.read_text() and "-ldl" in log.read_text()
    assert harness.arm64_native(build=True) == out and len(log.read_text().splitlines()) == 1   # up to date
    source.write_text("int b;\n")
    assert harness.arm64_native() is None                          # stale
    assert harness.arm64_native(build=True) == out and len(log.read_text().splitlines()) == 2
    monkeypatch.setenv("NUMABIND_VM_ARM64_CC", str(tmp_path / "no-such-gcc"))
    with pytest.raises(harness.HarnessError, match="gcc-aarch64-linux-gnu"):
        harness.arm64_native(build=True)
