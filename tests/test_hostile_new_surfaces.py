"""Hostile input on today's surfaces (``numabind irq``, ``numabind check``, named threads, ``numabind gather``):
every parser answers numabind's own error or a sane value, never another exception, and its work stays bounded."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numabind import irq, named
from numabind._base import printable
from numabind._fs import FsReader
from numabind.errors import NumabindError, PlanError
from numabind.preflight import gpus, pods, probes
from tests.fakeirq import add_irq, add_irqbalance, add_msi_irqs

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Text someone else wrote: controls, escapes, non-ASCII digits, NULs, surrogates, long runs.
HOSTILE = st.one_of(
    st.text(max_size=200),
    st.text(alphabet="0123456789abcdefx,-:; \t\n\x00\x1b[]{}\"'=", max_size=200),
    st.sampled_from(["", "\x00", "\x1b[2J\x1b]0;pwned\x07", "\u202e", "\udcff", "²", "٣", "1" * 5000,
                     "f" * 70000, "-1", "0x", "9" * 30, "[" * 5000, "{\"a\":" * 3000, "CPU" + "9" * 40]),
)


def _root() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="nb-hostile-")


def _write(root: str, rel: str, text: str) -> None:
    path = Path(root, rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8", errors="surrogateescape")


def _cpus_ok(cpus: frozenset[int] | None) -> bool:
    return cpus is None or all(isinstance(c, int) and c >= 0 for c in cpus)


# -------------------------------------------------------------------------------------------------- irq
@FAST
@given(header=HOSTILE, rows=st.lists(HOSTILE, max_size=5))
def test_interrupt_table_answers_a_table_or_numabinds_error(header, rows):
    with _root() as root:
        _write(root, "proc/interrupts", "\n".join([header, *rows]))
        try:
            table = irq.interrupt_table(FsReader(root))
        except NumabindError as e:
            assert "proc/interrupts" in str(e)
            return
        for number, (counts, chip, actions) in table.items():
            assert isinstance(number, int) and number >= 0
            assert all(isinstance(c, int) and isinstance(n, int) for c, n in counts.items())
            assert isinstance(chip, str) and isinstance(actions, str)


def test_interrupt_table_of_a_very_long_line_is_bounded():
    with _root() as root:
        _write(root, "proc/interrupts", "           CPU0       CPU1\n  5: " + "1 " * 400000 + " chip x\n")
        start = time.monotonic()
        table = irq.interrupt_table(FsReader(root))
        assert time.monotonic() - start < 5
        assert all(len(counts) <= 2 for counts, _, _ in table.values())


@FAST
@given(affinity=HOSTILE, effective=HOSTILE, msi=st.lists(HOSTILE, max_size=4), legacy=HOSTILE)
def test_an_irqs_files_are_read_as_cpus_or_unknown(affinity, effective, msi, legacy):
    address = "0000:03:00.0"
    with _root() as root:
        base = f"sys/bus/pci/devices/{address}"
        for i, name in enumerate(msi):
            safe = "".join(c for c in name if c not in "/\x00")[:200] or "x"
            if safe in (".", ".."):
                continue
            _write(root, f"{base}/msi_irqs/{safe}", "msix" if i % 2 else name)
        _write(root, f"{base}/irq", legacy)
        _write(root, "proc/irq/30/smp_affinity_list", affinity)
        _write(root, "proc/irq/30/effective_affinity_list", effective)
        reader = FsReader(root)
        numbers = irq.irq_numbers(reader, address)
        assert all(isinstance(n, int) and 0 <= n < 10 ** 9 and kind in ("msi", "msix", "legacy")
                   for n, kind in numbers)
        one = irq.read_irq(reader, 30, "msix", {})
        assert _cpus_ok(one.affinity) and _cpus_ok(one.effective)


@FAST
@given(words=st.lists(HOSTILE, max_size=6))
def test_banned_irqs_takes_only_plain_numbers(words):
    found = irq._banned_irqs(words)
    assert all(isinstance(n, int) and 0 <= n < 10 ** 9 for n in found)


@FAST
@given(text=HOSTILE)
def test_a_cpu_mask_is_cpus_or_a_plan_error(text):
    try:
        cpus = irq._mask_cpus(text)
    except PlanError as e:
        assert "CPU mask" in str(e)
        return
    assert all(c >= 0 for c in cpus)


@FAST
@given(text=HOSTILE)
def test_environ_and_config_parse_to_string_dicts(text):
    for parsed in (irq._environ(text), irq._config_values(text)):
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in parsed.items())


@FAST
@given(config=HOSTILE, args=st.lists(HOSTILE, max_size=4), env_value=HOSTILE)
def test_read_irqbalance_of_hostile_files_never_raises(config, args, env_value):
    with _root() as root:
        add_irqbalance(root, args=[_bytes_safe(a) for a in args], config=_bytes_safe(config),
                       environ={"IRQBALANCE_BANNED_CPUS": _bytes_safe(env_value)})
        balance = irq.read_irqbalance(root)
        assert balance.running
        assert all(c >= 0 for c in balance.banned_cpus)
        assert irq.ban_lines(balance, (), ()) is not None


def _bytes_safe(text: str) -> str:
    """``text`` as a file can hold it through a text write: no NUL (it separates), no lone surrogate."""
    return text.replace("\x00", "").encode("utf-8", "replace").decode()


def _apply_one(root: str, record_dir: str) -> None:
    add_msi_irqs(root, "0000:03:00.0", [30])
    add_irq(root, 30, "0-3")
    dev = irq.device_irqs(None, [("0000:03:00.0", "GPU 0", None)], root)[0]
    irq.apply_irqs([(dev, frozenset({1}))], root=root, record_dir=record_dir)


RECORDS = st.one_of(
    st.builds(json.dumps, st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                                       lambda inner: st.lists(inner, max_size=3)
                                       | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=10)),
    st.builds(lambda irqs: json.dumps({"numabind_irq_record": 1, "boot_id": "", "irqs": irqs}),
              st.dictionaries(st.sampled_from(["30", "²", "٣", "-1", "x", "9" * 30, ""]),
                              st.one_of(st.none(), st.integers(), st.text(max_size=8), st.lists(st.integers()),
                                        st.fixed_dictionaries({"was": st.one_of(st.text(max_size=8), st.integers(),
                                                                                st.none())})), max_size=4)),
    HOSTILE,
)


@FAST
@given(record=RECORDS)
def test_a_hostile_irq_record_is_refused_or_restored_never_a_traceback(record):
    with _root() as root, _root() as record_dir:
        add_msi_irqs(root, "0000:03:00.0", [30])
        add_irq(root, 30, "0-3")
        os.chmod(record_dir, 0o700)
        Path(record_dir, irq.RECORD_NAME).write_text(record, errors="surrogateescape")
        os.chmod(Path(record_dir, irq.RECORD_NAME), 0o600)
        for act in (lambda: irq.restore_irqs(root=root, dry_run=True, record_dir=record_dir),
                    lambda: _apply_one(root, record_dir)):
            try:
                act()
            except NumabindError as e:
                assert irq.RECORD_NAME in str(e) or "--restore" in str(e) or "by hand" in str(e)


def test_an_irq_record_that_is_a_symlink_is_refused():
    with _root() as root, _root() as record_dir, _root() as elsewhere:
        os.chmod(record_dir, 0o700)
        target = Path(elsewhere, "x.json")
        target.write_text(json.dumps({"numabind_irq_record": 1, "boot_id": "", "irqs": {"30": {"was": "0"}}}))
        os.symlink(target, Path(record_dir, irq.RECORD_NAME))
        add_irq(root, 30, "1")
        with pytest.raises(NumabindError):
            irq.restore_irqs(root=root, dry_run=True, record_dir=record_dir)


# -------------------------------------------------------------------------------------------------- gpus
@FAST
@given(text=st.one_of(HOSTILE, st.lists(HOSTILE, max_size=6).map("\n".join)))
def test_tool_text_parsers_answer_rows(text):
    header = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
    for body in (text, header + text, header + "GPU0\tX\tNV1\t" + text + "\t" + text):
        for k, cpus, nodes in gpus.parse_topo_matrix(body):
            assert 0 <= k < 10 ** 6 and _cpus_ok(cpus) and _cpus_ok(nodes)
    assert all(isinstance(p, str) for p in gpus.parse_npu_smi(text))


JSONS = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                         st.sampled_from(["gpu", "bus", "bdf", "numa", "node", "card0", "PCI Bus", "device_list",
                                          "pci_bdf_address", "(Topology) Numa Node", "x"]), inner, max_size=4),
                     max_leaves=12)


@FAST
@given(value=st.one_of(JSONS.map(json.dumps), HOSTILE))
def test_vendor_json_of_any_shape_is_sightings_or_unavailable(value):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gpus, "_run", lambda argv, env, timeout: value)
        _every_tool_answers()


def _every_tool_answers() -> None:
    for ask in (gpus._amd_smi, gpus._rocm_smi, gpus._xpu_smi, gpus._nvidia_smi, gpus._npu_smi, gpus._nvidia_topo):
        try:
            said = ask({})
        except gpus._Unavailable as e:
            assert str(e)
            continue
        assert all(isinstance(s, gpus.Sighting) for s in said.sightings)


def _tool(tmp: str, name: str, body: str) -> dict[str, str]:
    path = Path(tmp, name)
    path.write_text(f"#!{sys.executable}\n{body}\n")
    path.chmod(0o755)
    return {"PATH": tmp}


def test_a_tool_that_prints_megabytes_is_cut_off_unavailable():
    with _root() as tmp:
        env = _tool(tmp, "nvidia-smi", "import sys\nwhile True:\n    sys.stdout.write('0, x, y, z\\n' * 4096)")
        start = time.monotonic()
        with pytest.raises(gpus._Unavailable, match="more than 1 MiB"):
            gpus._run(["nvidia-smi"], env, 20)
        assert time.monotonic() - start < 10


def test_a_tool_that_never_ends_is_unavailable_after_its_timeout():
    with _root() as tmp:
        env = _tool(tmp, "npu-smi", "import time\nprint('x', flush=True)\ntime.sleep(60)")
        start = time.monotonic()
        with pytest.raises(gpus._Unavailable, match="did not answer in 0.5 s"):
            gpus._run(["npu-smi"], env, 0.5)
        assert time.monotonic() - start < 5


def test_a_tool_that_fails_says_its_status_and_stderr():
    with _root() as tmp:
        env = _tool(tmp, "xpu-smi", "import sys\nsys.stderr.write('no \\x1b[2Jdevice\\n')\nsys.exit(3)")
        with pytest.raises(gpus._Unavailable, match="status 3") as e:
            gpus._run(["xpu-smi"], env, 5)
        assert "\x1b" not in str(e.value)
        env = _tool(tmp, "amd-smi", "print('[' * 100000)")
        with pytest.raises(gpus._Unavailable, match="no JSON"):
            gpus._amd_smi(env)


# -------------------------------------------------------------------------------------------------- probes, pods
@FAST
@given(cap=HOSTILE, seccomp=HOSTILE, mems=HOSTILE, extra=HOSTILE)
def test_status_facts_reads_garbage_as_unknown(cap, seccomp, mems, extra):
    text = f"Name:\tx\nCapEff:\t{cap}\nSeccomp:\t{seccomp}\nMems_allowed_list:\t{mems}\n{extra}"
    facts = probes.status_facts(text)
    assert facts["cap_sys_nice"] in (None, True, False)
    assert facts["seccomp"] is None or 0 <= facts["seccomp"] < 1000
    assert facts["mems_allowed"] is None or all(n >= 0 for n in facts["mems_allowed"])


@FAST
@given(stdout=st.one_of(HOSTILE, JSONS.map(json.dumps)), code=st.integers(-70, 300), stderr=HOSTILE)
def test_the_childs_answer_is_a_dict_or_an_error(stdout, code, stderr):
    out = probes._answer(code, stdout.encode("utf-8", "surrogateescape"), stderr.encode("utf-8", "surrogateescape"))
    assert isinstance(out, dict)
    if "error" in out and code != 0:
        assert isinstance(out["error"], str)


@FAST
@given(lines=st.lists(HOSTILE, max_size=4))
def test_hostile_cgroup_paths_are_printable_in_the_report(lines):
    with _root() as root:
        _write(root, "proc/self/cgroup", "\n".join(["0::" + (lines[0] if lines else ""), *lines]))
        path = pods.cgroup_path(FsReader(root))
        qos = pods.qos_class(path)
        assert qos in (None, "BestEffort", "Burstable", "Guaranteed")
        shown = pods.PodAlignment(cgroup=path, qos=qos, exclusive_cpus=False, problems=()).describe()
        assert shown == printable(shown)


# -------------------------------------------------------------------------------------------------- named threads
PLAN_CPUS = frozenset(range(8))


def _plan():
    from numabind.plan import Plan

    return Plan(cpus=PLAN_CPUS)


@FAST
@given(text=HOSTILE)
def test_a_thread_word_is_a_pair_or_a_plan_error_naming_it(text):
    try:
        pattern, spec = named.parse_layout_item(text)
    except PlanError as e:
        assert "PATTERN=SPEC" in str(e)
        return
    try:
        shares = named.layout_shares([(pattern, spec)], _plan())
    except PlanError as e:
        assert "layout" in str(e)
        return
    assert all(s.cpus <= PLAN_CPUS for s in shares)


SPECS = st.one_of(HOSTILE, st.integers(-10, 10), st.integers(min_value=10 ** 9), st.just(10 ** 5000),
                  st.floats(), st.none(), st.booleans(), st.lists(st.one_of(st.integers(-5, 70000), st.text()),
                                                                   max_size=4),
                  st.sampled_from(["cpus:", "cpus:x", "cpus:0-99999999", "cpus:" + "9" * 5000, "9" * 5000, "rest",
                                   "*", " 2 ", "²", {1: 2}, b"1", frozenset({1, 2})]))


@FAST
@given(layout=st.dictionaries(st.one_of(HOSTILE, st.sampled_from(["", "*", "[", "[!]", "a?b", "**"]),
                                        st.integers()), SPECS, max_size=3))
def test_odd_layouts_are_shares_or_a_plan_error(layout):
    try:
        shares = named.layout_shares(layout, _plan())
    except PlanError as e:
        assert str(e)
        return
    assert all(s.cpus <= PLAN_CPUS for s in shares)
    named.match(shares, "worker")


@FAST
@given(name=HOSTILE, pattern=HOSTILE)
def test_thread_names_are_shown_printable(name, pattern):
    thread = named.NamedThread(tid=4711, name=name, pattern=pattern or None, cpus=frozenset({1}),
                               before=None, after=frozenset({1}), status="placed", detail=name)
    report = named.NamedReport(pid=4711, shares=(named.Share(pattern or "*", "rest", frozenset({1})),),
                               backend="syscall", threads=(thread,))
    for line in report.describe().splitlines():
        assert line == printable(line)

