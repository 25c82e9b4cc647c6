"""Every parser of ids bounds its work by the text it is given (issue 25, item 2).

Texts here may come from another user's process (the exec marker ``numabind stat`` reads), so the
work a parser does must be linear in the text and what it builds capped. Work is counted, not
timed: a :class:`Budget` (tests/helpers.py) counts the Python lines run in numabind's value modules
(``cpulist``, ``plan``) and stops the parse with :class:`OverBudget` as soon as it is spent, so a parser that
loops once per id of ``0-65535:1/1`` fails fast instead of running for a long time. Work done in C
on objects already built (a ``set.update(range(...))``) is bounded separately: what is built is
counted by wrapping ``range`` in :mod:`numabind.cpulist`, and has to stay under the caps.
"""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from numabind import cpulist
from numabind.cpulist import MAX_ID, MAX_LIST_TEXT, MAX_LISTED, parse_cpulist, parse_mask
from numabind.errors import PlanError
from numabind.plan import Plan, parse_weights
from tests.helpers import ONCE, PER_CHAR, Budget, OverBudget
from tests.kernel import ROOT, child_env


def budget_for(text: str) -> Budget:
    return Budget(PER_CHAR * len(text) + ONCE)


def within_budget(fn, text: str, *args, **kwargs):
    """``fn(text, ...)`` under the budget of ``text``: its result, or the PlanError it raised."""
    with budget_for(text):
        try:
            return fn(text, *args, **kwargs)
        except PlanError as exc:
            return exc


def test_the_budget_counts_and_stops_a_loop_per_id():
    """The counter itself: a loop over ids in a watched module runs out of budget."""
    with pytest.raises(OverBudget), Budget(1000):
        cpulist.format_cpulist(range(0, 4000, 2))        # one step per id: over 1000 lines


# ----------------------------------------------------------------------------- adversarial texts
big = st.integers(min_value=0, max_value=MAX_ID)
near_cap = st.integers(min_value=MAX_ID - 64, max_value=MAX_ID)
small = st.integers(min_value=1, max_value=8)


@st.composite
def groups(draw) -> str:
    lo = draw(st.one_of(st.just(0), small, big))
    hi = draw(st.one_of(near_cap, big, st.just(lo)))
    kind = draw(st.sampled_from(["one", "range", "step", "used"]))
    if kind == "one":
        return str(lo)
    if kind == "range":
        return f"{lo}-{hi}"
    size = draw(st.one_of(small, big.map(lambda n: n or 1)))
    if kind == "step":
        return f"{lo}-{hi}:{size}"
    return f"{lo}-{hi}:{draw(st.integers(min_value=1, max_value=size))}/{size}"


junk = st.sampled_from(["", "-", ":", "/", "9" * 30, "0" * 40 + "1", "1-", "-1", "3-1", "0-7:0/2", "0-7:3/2",
                        " ", "x", "\u0661", "0-65536", "0-9" * 5])


@st.composite
def adversarial_lists(draw) -> str:
    """Lists of large ranges and strides, repeated (the cost of repeats is the attack), with junk."""
    parts = draw(st.lists(st.one_of(groups(), junk), min_size=1, max_size=12))
    repeat = draw(st.sampled_from([1, 1, 2, 50, 4000]))
    return ",".join(parts * repeat)


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(adversarial_lists())
@example(f"0-{MAX_ID}:1/1")                        # one start at a time: 65536 steps in the old parser
@example(f"0-{MAX_ID}:2/3")
@example(",".join([f"0-{MAX_ID}:1/1"] * 5000))    # the 64 KiB of them
@example(",".join([f"0-{MAX_ID}"] * 8000))
@example("0," * 300000 + "0")
@example("9" * 100000)
def test_parse_cpulist_work_is_linear_in_the_text(text):
    got = within_budget(parse_cpulist, text)
    if not isinstance(got, PlanError):
        assert all(0 <= i <= MAX_ID for i in got)


def test_strides_expand_as_the_kernel_grammar_says():
    """The arithmetic expansion equals block-by-block expansion (the definition)."""
    def by_blocks(lo: int, hi: int, used: int, size: int) -> set[int]:
        out: set[int] = set()
        for start in range(lo, hi + 1, size):
            out.update(range(start, min(start + used, hi + 1)))
        return out

    for lo in (0, 1, 5, 31):
        for hi in (lo, lo + 1, lo + 6, lo + 33, 100):
            for size in (1, 2, 3, 4, 7, 32, 200):
                for used in sorted({1, 2, size - 1, size} - {0}):
                    if used <= size and hi >= lo:
                        assert parse_cpulist(f"{lo}-{hi}:{used}/{size}") == by_blocks(lo, hi, used, size)


class RangeCount:
    """Wraps ``range`` in numabind.cpulist and adds up the ids of every range it makes."""

    def __init__(self, monkeypatch) -> None:
        self.ids = 0
        real = range

        def counting(*args):
            r = real(*args)
            self.ids += len(r)
            return r

        monkeypatch.setattr(cpulist, "range", counting, raising=False)


@pytest.mark.parametrize("text", [
    ",".join([f"0-{MAX_ID}"] * 100),
    ",".join([f"0-{MAX_ID}:1/1"] * 100),
    ",".join([f"0-{MAX_ID}:3/4"] * 100),
    "0," * MAX_LISTED + "0",
], ids=["ranges", "strides of 1", "strides 3/4", "single ids"])
def test_a_list_naming_more_than_the_cap_is_refused_before_it_is_built(text, monkeypatch):
    counted = RangeCount(monkeypatch)
    with pytest.raises(PlanError, match=f"more than numabind's cap of {MAX_LISTED}"):
        parse_cpulist(text)
    assert counted.ids <= 2 * MAX_LISTED       # a range is made per group below the cap, never past it


def test_lists_within_the_caps_still_parse():
    every = ",".join(str(i) for i in range(MAX_ID + 1))     # each id written out: the longest honest list
    assert len(every) <= MAX_LIST_TEXT and parse_cpulist(every) == frozenset(range(MAX_ID + 1))
    assert parse_cpulist(",".join([f"0-{MAX_ID}"] * 4)) == frozenset(range(MAX_ID + 1))   # repeats up to the cap
    assert parse_cpulist("0-3,2-5") == frozenset(range(6))


def test_a_text_over_the_length_cap_is_refused_naming_the_cap():
    for parse in (parse_cpulist, parse_mask, parse_weights):
        with pytest.raises(PlanError, match=f"cap of {MAX_LIST_TEXT} characters"):
            parse(" " * (MAX_LIST_TEXT + 1))


# ----------------------------------------------------------------------------- masks and weights
@st.composite
def masks(draw) -> str:
    word = st.one_of(st.just("00000000"), st.just("ffffffff"), st.text("0123456789abcdefABCDEF", min_size=1,
                                                                        max_size=8), st.sampled_from(["", "g", "123456789"]))
    words = draw(st.lists(word, min_size=1, max_size=8))
    return ",".join(words * draw(st.sampled_from([1, 3, 300, 3000])))


@SETTINGS
@given(masks())
@example(",".join(["ffffffff"] * 2048))             # every bit up to MAX_ID
@example(",".join(["00000000"] * 100000))
def test_parse_mask_work_is_linear_in_the_text(text):
    got = within_budget(parse_mask, text)
    if not isinstance(got, PlanError):
        assert all(0 <= i <= MAX_ID for i in got)


@st.composite
def weight_texts(draw) -> str:
    pair = st.one_of(st.builds("{}:{}".format, st.one_of(big, st.just("9" * 5000)),
                               st.one_of(st.integers(0, 300), st.just("1" * 5000))),
                     st.sampled_from(["", ":", "1:", ":1", "x:1", "0:3"]))
    return ",".join(draw(st.lists(pair, min_size=1, max_size=6)) * draw(st.sampled_from([1, 10, 1000])))


@SETTINGS
@given(weight_texts())
@example("0:" + "9" * 5000)                          # int() of 5000 digits: Python's own limit, not a PlanError
@example("9" * 5000 + ":1")
def test_parse_weights_is_linear_and_refuses_numbers_past_the_caps(text):
    got = within_budget(parse_weights, text)
    if not isinstance(got, PlanError):
        assert all(0 <= n <= MAX_ID and 0 <= w <= 255 for n, w in got.items())


# ----------------------------------------------------------------------------- plan text and numactl values
@st.composite
def plan_texts(draw) -> str:
    cpus = draw(st.one_of(st.just("-"), adversarial_lists()))
    mem = draw(st.one_of(st.just("-"), st.builds("bind:{}".format, adversarial_lists()),
                         st.builds("weighted-interleave:{}".format, adversarial_lists())))
    tail = draw(st.one_of(st.just(""), st.builds(";weights={}".format, weight_texts())))
    return f"v1;cpus={cpus};mem={mem};migrate=0{tail}"


@SETTINGS
@given(plan_texts())
@example("v1;cpus=" + ",".join([f"0-{MAX_ID}:1/1"] * 5000) + ";mem=-;migrate=0")     # a 64 KiB marker
@example("v1;cpus=-;mem=bind:" + ",".join([f"0-{MAX_ID}"] * 8000) + ";migrate=0")
def test_plan_from_text_work_is_linear_in_the_text(text):
    got = within_budget(Plan.from_text, text)
    assert isinstance(got, (Plan, PlanError))


def _machine(ncpus: int, nnodes: int) -> types.SimpleNamespace:
    """A fake machine for node specifiers: ``nnodes`` nodes splitting ``ncpus`` CPUs, all with memory."""
    per = max(1, ncpus // nnodes)
    nodes = {n: types.SimpleNamespace(cpus=frozenset(range(n * per, min(ncpus, (n + 1) * per))), has_memory=True)
             for n in range(nnodes)}
    cpus = frozenset(range(ncpus))
    return types.SimpleNamespace(nodes=nodes, online_cpus=cpus, allowed_cpus=cpus, allowed_nodes=frozenset(nodes))


specifier = st.builds("{}{}".format, st.sampled_from(["", "!", "+", "!+"]), st.one_of(adversarial_lists(),
                                                                                     st.just("all")))


@SETTINGS
@given(st.sampled_from(["-C", "-N", "-m", "-i", "-P"]), specifier)
@example("-C", "+" + ",".join([f"0-{MAX_ID}"] * 8000))
@example("-m", "!" + ",".join([f"0-{MAX_ID}:1/1"] * 5000))
@example("-C", f"+0-{MAX_ID}")                     # relative ids past the machine: refused without a step per id
def test_node_specifiers_work_is_linear_in_the_text(flag, value):
    machine = _machine(16, 4)

    def resolve(text: str) -> Plan:
        return Plan.from_numactl_args([flag, text], topology=machine)

    got = within_budget(resolve, value)
    assert isinstance(got, (Plan, PlanError))


# ----------------------------------------------------------------------------- Plan(cpus=...) of huge iterables
@pytest.mark.parametrize("make, message", [
    (lambda: range(10 ** 10), f"id {10 ** 10 - 1} is larger than numabind's cap"),
    (lambda: range(10 ** 30), "is larger than numabind's cap"),
    (lambda: range(MAX_ID, 10 ** 12, 7), "is larger than numabind's cap"),
    (lambda: range(5, -10 ** 10, -1), "non-negative"),
], ids=["10**10", "10**30", "stepped", "downwards"])
def test_a_huge_range_is_refused_by_its_bounds(make, message):
    with pytest.raises(PlanError, match=message), Budget(ONCE):
        Plan(cpus=make())
    assert Plan(cpus=range(MAX_ID, -1, -1)).cpus == frozenset(range(MAX_ID + 1))
    assert Plan(cpus=range(3)).cpus == {0, 1, 2}


def test_a_huge_range_never_builds_the_set_even_when_memory_is_short():
    """In a child with 1 GiB of address space: building range(10**10) as a set would be a MemoryError."""
    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
            "from numabind import Plan, PlanError\n"
            "try:\n    Plan(cpus=range(10 ** 10))\nexcept PlanError as e:\n    print('refused:', e)\n")
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), cwd=ROOT,
                        timeout=120)
    assert cp.returncode == 0 and cp.stdout.startswith("refused: cpus: id 9999999999 is larger"), cp.stderr[-2000:]


class Endless:
    """An iterable of ids without end, which fails the test if it is asked for much more than the cap."""

    def __init__(self, first_bad: int | None = None) -> None:
        self.given, self.first_bad = 0, first_bad

    def __iter__(self):
        while True:
            self.given += 1
            assert self.given <= MAX_LISTED + 10, "consumed past the cap"
            yield MAX_ID + 1 if self.given == self.first_bad else self.given % 4


def test_an_endless_iterable_is_consumed_only_up_to_the_cap():
    it = Endless()
    with pytest.raises(PlanError, match=f"cap of {MAX_LISTED}"):
        Plan(cpus=it)
    assert it.given == MAX_LISTED + 1


def test_an_iterable_stops_at_its_first_id_above_the_cap():
    it = Endless(first_bad=5)
    with pytest.raises(PlanError, match=f"id {MAX_ID + 1} is larger than numabind's cap of {MAX_ID}"):
        Plan(cpus=it)
    assert it.given == 5
    with pytest.raises(PlanError, match="non-negative ints, got float"):
        Plan(cpus=iter([0, 1.5]))
    assert Plan(cpus=iter([2, 0, 2])).cpus == {0, 2} and Plan(cpus=(i for i in (1,))).cpus == {1}


def test_a_list_longer_than_the_cap_is_refused_at_once():
    with pytest.raises(PlanError, match=f"cap of {MAX_LISTED}"):
        Plan(cpus=[0] * (MAX_LISTED + 1))
    assert Plan(cpus=[0] * MAX_LISTED).cpus == {0}
