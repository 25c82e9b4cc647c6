"""pytest plugin: tests marked ``numa_vm`` run inside a QEMU guest with several NUMA nodes.

On the host, every ``numa_vm`` test is replaced by a :class:`VmItem` with the same node id.
When the first one of a topology is set up, one guest of that topology boots and runs
pytest on all selected tests of that topology (the host's own interpreter, over the
read-only 9p share of the host root). The guest's :class:`GuestReporter` writes every
test report, serialized the way pytest-xdist does it, into the writable share; the
host then hands those reports on as the items' own, so a guest failure shows its
traceback and captured output like a local one.

A guest that does not boot, hangs or dies fails the tests it did not finish, with its
console log. Without qemu or a prepared kernel the tests skip, unless
``NUMABIND_REQUIRE_VM=1``, where they fail.

    @pytest.mark.numa_vm                        # topology "2n", kernel "6.1"
    @pytest.mark.numa_vm(topology="mem-only")   # or "asym"; see harness.TOPOLOGIES
    @pytest.mark.numa_vm(kernel="6.12")         # another kernel; see harness.KERNELS
    @pytest.mark.numa_vm(kernel="arm64")        # the arm64 guest (its own userland and interpreter)

One guest boots per (topology, kernel) pair. The guest's interpreter and its extra environment come
from the kernel (``harness.guest_python``, ``harness.guest_env``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pytest

from . import harness

MARKER = "numa_vm"
GUEST_ENV = "_NUMABIND_VM_GUEST"        # inside the guest: the topology's name
KERNEL_ENV = "_NUMABIND_VM_KERNEL"      # inside the guest: the kernel's name in harness.KERNELS
RESULTS_ENV = "_NUMABIND_VM_RESULTS"    # inside the guest: where the reports go
REQUIRE_ENV = "NUMABIND_REQUIRE_VM"
RESULTS_FILE = "results.jsonl"


def in_guest() -> bool:
    return bool(os.environ.get(GUEST_ENV))


def vm_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip() not in ("", "0", "no", "false")


def topology_of(item: pytest.Item) -> str:
    """The topology a numa_vm test asks for: ``numa_vm("name")`` or ``numa_vm(topology="name")``."""
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        raise ValueError(f"{item.nodeid} is not marked {MARKER}")
    name = marker.kwargs.get("topology", marker.args[0] if marker.args else harness.DEFAULT_TOPOLOGY)
    return name


def kernel_of(item: pytest.Item) -> str:
    """The kernel a numa_vm test asks for: ``numa_vm(kernel="6.12")``, else ``harness.DEFAULT_KERNEL``."""
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        raise ValueError(f"{item.nodeid} is not marked {MARKER}")
    return str(marker.kwargs.get("kernel", harness.DEFAULT_KERNEL))


# ----------------------------------------------------------------------------- guest side
class GuestReporter:
    """Inside the guest: append one JSON line per event to the results file, flushed at once,
    so whatever finished before a crash or a hang still reaches the host."""

    def __init__(self, config: pytest.Config, path: str) -> None:
        self.config = config
        self.topology = os.environ.get(GUEST_ENV, "")
        self.kernel = os.environ.get(KERNEL_ENV, harness.DEFAULT_KERNEL)
        self.file = open(path, "a", encoding="utf-8")

    def _write(self, record: Mapping) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self._write({"event": "sessionstart", "uptime": _uptime()})

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self._write({"event": "collecterror", "nodeid": report.nodeid, "longrepr": str(report.longrepr)})

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        marker = item.get_closest_marker(MARKER)
        if marker is not None and topology_of(item) != self.topology:
            pytest.fail(f"this guest has topology {self.topology!r}, the test asks for {topology_of(item)!r}",
                        pytrace=False)
        if marker is not None and kernel_of(item) != self.kernel:
            pytest.fail(f"this guest runs kernel {self.kernel!r}, the test asks for {kernel_of(item)!r}",
                        pytrace=False)

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        self._write({"event": "start", "nodeid": nodeid, "uptime": _uptime()})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = self.config.hook.pytest_report_to_serializable(config=self.config, report=report)
        self._write({"event": "report", "nodeid": report.nodeid, "report": data})

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self._write({"event": "sessionfinish", "exitstatus": int(exitstatus), "uptime": _uptime()})
        self.file.close()


def _uptime() -> float | None:
    try:
        with open("/proc/uptime") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


# ----------------------------------------------------------------------------- results parsing
@dataclass
class GuestResults:
    """What one guest's results file says."""

    reports: dict[str, list[pytest.TestReport]] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)
    collect_errors: list[tuple[str, str]] = field(default_factory=list)
    exitstatus: int | None = None
    session_uptime: tuple[float | None, float | None] = (None, None)  # guest uptime at pytest start/end
    bad_lines: int = 0

    @classmethod
    def parse(cls, text: str, config: pytest.Config) -> GuestResults:
        out = cls()
        start = end = None
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                event = rec["event"]
                if event == "report":
                    rep = config.hook.pytest_report_from_serializable(config=config, data=rec["report"])
                    if not isinstance(rep, pytest.TestReport):
                        raise ValueError("not a TestReport")
                    rep.sections = [tuple(sec) for sec in rep.sections]  # JSON made these tuples lists
                    if isinstance(rep.longrepr, list):  # a skip's (path, line, reason)
                        rep.longrepr = tuple(rep.longrepr)
                    out.reports.setdefault(rep.nodeid, []).append(rep)
                elif event == "start":
                    out.started.append(rec["nodeid"])
                elif event == "collecterror":
                    out.collect_errors.append((rec["nodeid"], rec["longrepr"]))
                elif event == "sessionstart":
                    start = rec.get("uptime")
                elif event == "sessionfinish":
                    out.exitstatus = int(rec["exitstatus"])
                    end = rec.get("uptime")
            except (ValueError, KeyError, TypeError):
                out.bad_lines += 1  # a line cut short by a dying guest
        out.session_uptime = (start, end)
        return out

    def report(self, nodeid: str, when: str) -> pytest.TestReport | None:
        for rep in self.reports.get(nodeid, ()):
            if rep.when == when:
                return rep
        return None


@dataclass
class GuestSession:
    """One guest on the host side: the run, its parsed results, the node ids it was given."""

    topology: str
    nodeids: list[str]
    kernel: str = harness.DEFAULT_KERNEL
    run: harness.GuestRun | None = None
    results: GuestResults = field(default_factory=GuestResults)
    error: str | None = None      # the guest could not even be started (harness error)

    def explain_missing(self, nodeid: str) -> str:
        """Why a test has no result from the guest, with the evidence."""
        if self.error:
            return f"numa_vm: the {self.topology} guest could not start: {self.error}"
        run = self.run
        assert run is not None
        lines = [f"numa_vm: no result from the {self.topology} guest for this test."]
        if run.failure:
            lines.append(f"The guest run failed: {run.failure}.")
        if self.results.started and self.results.started[-1] == nodeid and not self.results.report(nodeid, "teardown"):
            lines.append("The guest stopped while running this very test.")
        elif self.results.started:
            lines.append(f"The guest last started {self.results.started[-1]}.")
        if self.results.collect_errors:
            for nid, text in self.results.collect_errors:
                lines.append(f"Guest collection error in {nid or '<session>'}:\n{text}")
        if run.exit_code is not None:
            lines.append(f"Guest pytest exit status: {run.exit_code}.")
        lines.append(f"Host command: {' '.join(run.argv)}")
        out = run.read("output.log")
        if out:
            lines.append(f"--- guest pytest output (last 80 lines of {run.run_dir / 'output.log'}) ---")
            lines.append("\n".join(out.splitlines()[-80:]))
        lines.append(run.console_tail())
        return "\n".join(lines)


def guest_pytest_argv(config: pytest.Config, nodeids: Iterable[str], python: str | None = None) -> list[str]:
    """The guest's pytest command line; ``python``: the guest's interpreter (default: the host's own)."""
    argv = [python or sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--color=no",
            "-o", "addopts=", "--rootdir", str(config.rootpath)]
    if config.inipath is not None:
        argv += ["-c", str(config.inipath)]
    return argv + list(nodeids)


# ----------------------------------------------------------------------------- host side
class VmFailure(Exception):
    """A numa_vm test could not be run in the guest (boot failure, hang, lost result)."""


class VmItem(pytest.Item):
    """Stands in on the host for a numa_vm test that runs in the guest."""

    def __init__(self, *, original: pytest.Item, topology: str, host: VmHost,
                 kernel: str = harness.DEFAULT_KERNEL, **kw) -> None:
        super().__init__(**kw)
        self.original = original
        self.topology = topology
        self.kernel = kernel
        self.host = host
        self.own_markers.extend(original.own_markers)
        self.keywords.update(original.keywords)
        self.session_result: GuestSession | None = None

    def reportinfo(self):
        return self.original.reportinfo()

    def setup(self) -> None:
        if self.host.refusal(self) is None:
            self.session_result = self.host.session_for(self)

    def runtest(self) -> None:
        # Reached only when the guest sent no call report for this test.
        refusal = self.host.refusal(self)
        if refusal is not None:
            raise VmFailure(refusal)
        sess = self.session_result
        assert sess is not None
        raise VmFailure(sess.explain_missing(self.nodeid))

    def teardown(self) -> None:
        sess = self.session_result
        if sess is None or sess.error:
            return
        if sess.results.report(self.nodeid, "call") is not None and sess.results.report(self.nodeid, "teardown") is None:
            raise VmFailure(sess.explain_missing(self.nodeid))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, VmFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def guest_report(self, when: str) -> pytest.TestReport | None:
        sess = self.session_result
        if sess is None or sess.error:
            return None
        return sess.results.report(self.nodeid, when)


class VmHost:
    """On the host: turns numa_vm tests into VmItems and runs one guest per topology."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.items: list[VmItem] = []
        self.sessions: dict[tuple[str, str], GuestSession] = {}
        self._problems: dict[str, list[str]] = {}

    # -- collection
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        for k, item in enumerate(items):
            if item.get_closest_marker(MARKER) is None or isinstance(item, VmItem):
                continue
            vm = VmItem.from_parent(item.parent, name=item.name, original=item,
                                    topology=topology_of(item), kernel=kernel_of(item), host=self)
            items[k] = vm
            self.items.append(vm)
        if vm_required():
            return
        for vm in self.items:
            issues = self.problems(vm.kernel) if vm.kernel in harness.KERNELS else []
            if issues:
                vm.add_marker(pytest.mark.skip(
                    reason=f"numa_vm: no VM here ({'; '.join(issues)}); run `python3 -m tests.vm.harness prepare` "
                           f"(with {REQUIRE_ENV}=1 this fails)"))

    # -- running
    def problems(self, kernel: str = harness.DEFAULT_KERNEL) -> list[str]:
        if kernel not in self._problems:
            self._problems[kernel] = harness.problems(kernel)
        return self._problems[kernel]

    def refusal(self, item: VmItem) -> str | None:
        """Why this item cannot go to a guest at all (it then fails), or None."""
        if item.topology not in harness.TOPOLOGIES:
            return f"numa_vm: unknown topology {item.topology!r}; known: {', '.join(harness.TOPOLOGIES)}"
        if item.kernel not in harness.KERNELS:
            return f"numa_vm: unknown kernel {item.kernel!r}; known: {', '.join(harness.KERNELS)}"
        issues = self.problems(item.kernel)
        if issues:
            return (f"numa_vm: {REQUIRE_ENV}=1 but the VM cannot run: {'; '.join(issues)}. "
                    f"Run: python3 -m tests.vm.harness prepare")
        return None

    def session_for(self, item: VmItem) -> GuestSession:
        key = (item.topology, item.kernel)
        sess = self.sessions.get(key)
        if sess is None:
            sess = self._run(*key)
            self.sessions[key] = sess
        return sess

    def _run(self, topology: str, kernel: str = harness.DEFAULT_KERNEL) -> GuestSession:
        nodeids = [i.nodeid for i in self.items if (i.topology, i.kernel) == (topology, kernel)]
        sess = GuestSession(topology, nodeids, kernel)
        try:
            run_dir = harness.new_run_dir(topology if kernel == harness.DEFAULT_KERNEL else f"{topology}-{kernel}")
            results = run_dir / RESULTS_FILE
            script = harness.guest_script(
                guest_pytest_argv(self.config, nodeids, harness.guest_python(kernel)),
                cwd=self.config.rootpath,
                env={**harness.guest_env(kernel),
                     GUEST_ENV: topology, KERNEL_ENV: kernel, RESULTS_ENV: f"{harness.GUEST_SHARE}/{RESULTS_FILE}",
                     # Entry-point plugins (hypothesis's alone costs ~12 s under emulation) stay out.
                     "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
                     # what tests/vm/test_vm_suite.py runs in the guest, when asked for other paths
                     **({"NUMABIND_VM_SUITE": os.environ["NUMABIND_VM_SUITE"]}
                        if os.environ.get("NUMABIND_VM_SUITE") else {})},
            )
            sess.run = harness.run_guest(topology, script, run_dir=run_dir, kernel=kernel)
            sess.results = GuestResults.parse(harness.read_text(results), self.config)
        except harness.HarnessError as exc:
            sess.error = str(exc)
        return sess

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        if isinstance(item, VmItem):
            rep = item.guest_report(call.when)
            if rep is not None:
                outcome.force_result(rep)

    # -- summary
    def pytest_terminal_summary(self, terminalreporter, exitstatus, config) -> None:
        if not self.items:
            return
        tr = terminalreporter
        tr.section("numa_vm guests")
        if not self.sessions:
            issues = self.problems()
            tr.write_line("no guest was started" + (f": {'; '.join(issues)}" if issues else ""))
            return
        for (topo, kernel), sess in self.sessions.items():
            if sess.error:
                tr.write_line(f"{topo} (kernel {kernel}): could not start: {sess.error}")
                continue
            run = sess.run
            assert run is not None
            counts: dict[str, int] = {}
            for nid in sess.nodeids:
                rep = sess.results.report(nid, "call")
                outcome = rep.outcome if rep is not None else "no result"
                counts[outcome] = counts.get(outcome, 0) + 1
            t0, t1 = sess.results.session_uptime
            pytest_s = f", guest pytest {t1 - t0:.1f} s" if t0 is not None and t1 is not None else ""
            tally = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
            tr.write_line(f"{run.summary()}{pytest_s}; tests: {tally}; logs: {run.run_dir}")
            for nid in sess.nodeids:
                rep = sess.results.report(nid, "call")
                if rep is None or not rep.passed:
                    continue
                out = "".join(content for name, content in rep.sections if name == "Captured stdout call").strip()
                if out:
                    tr.write_line(f"  {nid}:")
                    for line in out.splitlines()[:40]:
                        tr.write_line(f"    {line}")


def configure(config: pytest.Config) -> None:
    """Register the guest reporter (inside the guest) or the host side (everywhere else)."""
    if in_guest():
        path = os.environ.get(RESULTS_ENV)
        if path:
            config.pluginmanager.register(GuestReporter(config, path), "numabind-vm-guest")
    else:
        config.pluginmanager.register(VmHost(config), "numabind-vm-host")

