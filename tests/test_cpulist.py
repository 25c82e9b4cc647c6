"""Tests of numabind.cpulist: kernel cpulists/nodelists and hex masks (pure)."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from numabind.cpulist import (
    MAX_ID,
    format_cpulist,
    ids_to_words,
    parse_cpulist,
    parse_mask,
    words_to_ids,
)
from numabind.errors import PlanError

from .fakesys import format_mask

FAST = settings(max_examples=150, deadline=None)


# --------------------------------------------------------------------------
# A slow, obviously-correct reference parser for the list grammar.
# Returns None where the input must be rejected.
# --------------------------------------------------------------------------
def _ref_number(s: str) -> int | None:
    if s == "" or any(c not in "0123456789" for c in s):
        return None
    n = int(s)
    return n if n <= MAX_ID else None


def reference_parse(text: str) -> frozenset[int] | None:
    body = text.strip(" \t\n")
    if body == "":
        return frozenset()
    out: set[int] = set()
    for group in body.split(","):
        if ":" in group:
            span, _, stride = group.partition(":")
            if "/" in stride:
                used_s, _, size_s = stride.partition("/")
                used, size = _ref_number(used_s), _ref_number(size_s)
            else:
                used, size = 1, _ref_number(stride)
            if used is None or size is None or used == 0 or size == 0 or used > size:
                return None
            if "-" not in span:  # a stride needs a range
                return None
        else:
            span, used, size = group, 1, 1
        if "-" in span:
            lo_s, _, hi_s = span.partition("-")
            lo, hi = _ref_number(lo_s), _ref_number(hi_s)
        else:
            lo = hi = _ref_number(span)
        if lo is None or hi is None or hi < lo:
            return None
        for i in range(lo, hi + 1):
            if (i - lo) % size < used:  # position inside its block of `size`
                out.add(i)
    return frozenset(out)


def reference_mask(text: str) -> frozenset[int]:
    bits = bin(int(text.strip().replace(",", ""), 16))[2:]
    return frozenset(i for i, bit in enumerate(reversed(bits)) if bit == "1")


# --------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------
small_ids = st.frozensets(st.integers(min_value=0, max_value=300), max_size=60)
any_ids = st.frozensets(st.integers(min_value=0, max_value=MAX_ID), max_size=40)


@st.composite
def valid_group(draw) -> str:
    """One group of the kernel grammar, with leading zeros now and then."""

    def num(n: int) -> str:
        return "0" * draw(st.integers(0, 2)) + str(n)

    lo = draw(st.integers(0, 200))
    kind = draw(st.sampled_from(["single", "range", "stride", "shorthand"]))
    if kind == "single":
        return num(lo)
    hi = lo + draw(st.integers(0, 60))
    if kind == "range":
        return f"{num(lo)}-{num(hi)}"
    size = draw(st.integers(1, 12))
    if kind == "shorthand":
        return f"{num(lo)}-{num(hi)}:{num(size)}"
    used = draw(st.integers(1, size))
    return f"{num(lo)}-{num(hi)}:{num(used)}/{num(size)}"


@st.composite
def valid_cpulist(draw) -> str:
    groups = draw(st.lists(valid_group(), min_size=1, max_size=6))
    lead = draw(st.sampled_from(["", " ", "\t", "\n"]))
    trail = draw(st.sampled_from(["", "\n", " \n", "  "]))
    return lead + ",".join(groups) + trail


@st.composite
def spelling_of(draw, ids: frozenset[int]) -> str:
    """A random non-canonical spelling of ``ids``: ranges, singletons, duplicates, any order."""
    items = sorted(ids)
    pieces: list[str] = []
    k = 0
    while k < len(items):
        # take a random-length run of consecutive ids starting at items[k]
        end = k
        while end + 1 < len(items) and items[end + 1] == items[end] + 1 and draw(st.booleans()):
            end += 1
        lo, hi = items[k], items[end]
        if lo == hi and draw(st.booleans()):
            pieces.append(str(lo))
        else:
            pieces.append(f"{lo}-{hi}")
        k = end + 1
    if pieces:
        dups = draw(st.lists(st.sampled_from(pieces), max_size=3))
        pieces += dups
        pieces += [str(i) for i in draw(st.lists(st.sampled_from(items), max_size=3))]
    draw(st.randoms(use_true_random=False)).shuffle(pieces)
    return ",".join(pieces)


# --------------------------------------------------------------------------
# parse_cpulist: accepted forms
# --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, expected",
    [
        ("0", {0}),
        ("0-3,8", {0, 1, 2, 3, 8}),
        ("0-3,8\n", {0, 1, 2, 3, 8}),  # as read from sysfs
        ("  0-3,8  \n", {0, 1, 2, 3, 8}),
        ("\t7\n", {7}),
        ("", set()),
        ("\n", set()),
        ("   ", set()),
        ("5-5", {5}),
        ("3,1,2,1", {1, 2, 3}),
        ("0-3,2-5", {0, 1, 2, 3, 4, 5}),
        ("007", {7}),
        ("00-03", {0, 1, 2, 3}),
        ("0-15:2/4", {0, 1, 4, 5, 8, 9, 12, 13}),
        ("0-1023:2/256", {0, 1, 256, 257, 512, 513, 768, 769}),
        ("0-9:3/3", set(range(10))),  # used == group size is the whole range
        ("1-10:1/4", {1, 5, 9}),  # blocks start at the range start, not at 0
        ("0-6:3/4", {0, 1, 2, 4, 5, 6}),  # the last block is cut at the range end
        ("10-14:2", {10, 12, 14}),  # shorthand N-M:step
        ("10-15:2", {10, 12, 14}),
        ("0-3,8,10-14:2", {0, 1, 2, 3, 8, 10, 12, 14}),
        ("0-3:10", {0}),  # stride larger than the range
        (f"{MAX_ID}", {MAX_ID}),
        (f"{MAX_ID - 1}-{MAX_ID}", {MAX_ID - 1, MAX_ID}),
    ],
)
def test_parse_accepts(text, expected):
    result = parse_cpulist(text)
    assert result == frozenset(expected)
    assert isinstance(result, frozenset)


def test_parse_full_cap_range_is_allowed():
    assert parse_cpulist(f"0-{MAX_ID}") == frozenset(range(MAX_ID + 1))


def test_parse_what_appears_in_errors():
    with pytest.raises(PlanError, match=r"^nodelist 'x'"):
        parse_cpulist("x", what="nodelist")


def test_plan_error_is_a_value_error():
    with pytest.raises(ValueError):
        parse_cpulist("a")


# --------------------------------------------------------------------------
# parse_cpulist: rejections, each naming the offending text
# --------------------------------------------------------------------------
BAD_LISTS = [
    "3-1",
    "1,,2",
    "-1",
    "a",
    "0-",
    "-",
    ",",
    "0,",
    ",0",
    "1-2-3",
    "0x3",
    "0 - 3",
    "0, 1",
    "1 2",
    "0-3\n8",  # embedded newline
    "0\n,1",
    "0-3:0/4",  # used 0
    "0-3:5/4",  # used > group size
    "0-3:1/0",  # group size 0
    "0-3:0",  # shorthand step 0
    "0-3:",
    "0-3:/4",
    "0-3:1/",
    "0-3:1/2/3",
    "3:1/2",  # stride without a range
    "0-3:a/4",
    "+1",
    "!1",
    "all",
    "1.0",
    "0-3;8",
    "٣",  # ARABIC-INDIC DIGIT THREE
    "0-３",  # FULLWIDTH DIGIT THREE
    "𝟙",  # MATHEMATICAL BOLD DIGIT ONE
    "²",  # SUPERSCRIPT TWO (str.isdigit() is True)
    "1\x00",
]


@pytest.mark.parametrize("text", BAD_LISTS)
def test_parse_rejects_and_names_the_text(text):
    with pytest.raises(PlanError) as info:
        parse_cpulist(text)
    assert repr(text) in str(info.value)


def test_reject_reversed_range_says_why():
    with pytest.raises(PlanError, match=r"'3-1'.*ends before it starts"):
        parse_cpulist("0,3-1")


def test_reject_bad_group_names_the_group():
    with pytest.raises(PlanError) as info:
        parse_cpulist("0-3,x7,8")
    assert "'x7'" in str(info.value)
    assert "'0-3,x7,8'" in str(info.value)


@pytest.mark.parametrize("text", ["0-3:0/4", "0-3:5/4", "0-3:1/0"])
def test_reject_bad_stride_says_why(text):
    with pytest.raises(PlanError, match="group size"):
        parse_cpulist(text)


@pytest.mark.parametrize(
    "text",
    [
        f"{MAX_ID + 1}",
        f"0-{MAX_ID + 1}",
        "0-4000000000",
        "4294967295",
        "0-18446744073709551616",
        "0-3:1/100000000",
        f"0-{'9' * 40}",
    ],
)
def test_absurd_upper_bounds_are_capped(text):
    with pytest.raises(PlanError) as info:
        parse_cpulist(text)
    msg = str(info.value)
    assert "cap" in msg and str(MAX_ID) in msg
    assert repr(text) in msg


@pytest.mark.parametrize("digits", [5000, 100_000])
def test_thousands_of_digits_are_a_plan_error(digits):
    # Python refuses int() of more than 4300 digits with a bare ValueError; the
    # parser must turn it into a PlanError that mentions the cap.
    for text in ("1" * digits, "0-" + "9" * digits, "0-3:1/" + "7" * digits):
        with pytest.raises(PlanError, match="cap"):
            parse_cpulist(text)


def test_leading_zeros_do_not_trip_the_cap():
    assert parse_cpulist("0" * 50 + "12") == frozenset({12})
    assert parse_cpulist("0" * 5000 + "1") == frozenset({1})


@pytest.mark.parametrize("value", [None, 3, b"0-3", ["0"], 1.5])
def test_parse_rejects_non_strings(value):
    with pytest.raises(PlanError, match="must be a string"):
        parse_cpulist(value)


# --------------------------------------------------------------------------
# format_cpulist
# --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "ids, text",
    [
        (set(), ""),
        ({0}, "0"),
        ({0, 1}, "0-1"),
        ({0, 1, 2, 3, 8}, "0-3,8"),
        ([8, 3, 2, 1, 0, 8, 3], "0-3,8"),
        ({1, 3, 5}, "1,3,5"),
        ({0, 1, 3, 4, 6}, "0-1,3-4,6"),
        (range(0, 1024), "0-1023"),
        (iter([5, 6, 7]), "5-7"),
        (frozenset({MAX_ID, 0}), f"0,{MAX_ID}"),
    ],
)
def test_format_exact(ids, text):
    assert format_cpulist(ids) == text


@pytest.mark.parametrize("bad", [{-1}, {1, "a"}, {1.0, 2.5}, {True}, {None}, {"0"}])
def test_format_rejects_non_ids(bad):
    with pytest.raises(PlanError, match="non-negative integers"):
        format_cpulist(bad)


# --------------------------------------------------------------------------
# Properties of the list form
# --------------------------------------------------------------------------
@FAST
@given(any_ids)
def test_roundtrip_parse_format(ids):
    assert parse_cpulist(format_cpulist(ids)) == ids


@FAST
@given(valid_cpulist())
def test_roundtrip_format_parse(text):
    ids = parse_cpulist(text)
    canonical = format_cpulist(ids)
    assert parse_cpulist(canonical) == ids
    assert format_cpulist(parse_cpulist(canonical)) == canonical  # idempotent


@FAST
@given(any_ids)
def test_canonical_form_shape(ids):
    text = format_cpulist(ids)
    assert re.fullmatch(r"(\d+(-\d+)?(,\d+(-\d+)?)*)?", text)
    bounds = []
    for group in filter(None, text.split(",")):
        lo_s, dash, hi_s = group.partition("-")
        lo, hi = int(lo_s), int(hi_s or lo_s)
        if dash:
            assert lo < hi  # "a-b" only for runs of two or more
        assert lo_s == str(lo) and (not dash or hi_s == str(hi))  # no leading zeros
        bounds.append((lo, hi))
    assert sum(hi - lo + 1 for lo, hi in bounds) == len(ids)
    # sorted, disjoint, and not adjacent (else they would be one run)
    for (_, hi1), (lo2, _) in zip(bounds, bounds[1:]):
        assert lo2 > hi1 + 1


@FAST
@given(st.data(), small_ids)
def test_canonical_form_is_unique(data, ids):
    spelling = data.draw(spelling_of(ids))
    assert parse_cpulist(spelling) == ids
    assert format_cpulist(parse_cpulist(spelling)) == format_cpulist(ids)


def test_canonical_form_is_unique_examples():
    spellings = ["0-3,8", "8,0-3", "0,1,2,3,8", "3,2,1,0,8,8", "0-1,2-3,8-8", "0-2,1-3,8", "0-3:1/1,8"]
    assert {format_cpulist(parse_cpulist(s)) for s in spellings} == {"0-3,8"}


@FAST
@given(valid_cpulist())
@example("0-15:2/4")
@example("10-14:2")
@example("0-3:4/4,100-120:3/7")
def test_agrees_with_reference_on_valid_lists(text):
    expected = reference_parse(text)
    assert expected is not None
    assert parse_cpulist(text) == expected


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="0123456789,-:/ \n", max_size=14))
@example("3-1")
@example("1,,2")
@example("0-3:0/4")
@example("0-3:5/4")
@example("3:1/2")
@example("0-3:2")
@example(" ")
def test_agrees_with_reference_on_arbitrary_text(text):
    expected = reference_parse(text)
    if expected is None:
        with pytest.raises(PlanError):
            parse_cpulist(text)
    else:
        assert parse_cpulist(text) == expected


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30))
def test_arbitrary_unicode_is_parsed_or_plan_error(text):
    try:
        ids = parse_cpulist(text)
    except PlanError as exc:
        assert repr(text) in str(exc) or "cap" in str(exc)
    else:
        assert all(isinstance(i, int) and 0 <= i <= MAX_ID for i in ids)
        # whatever was accepted was plain ASCII grammar
        assert re.fullmatch(r"[0-9,:/\-]*", text.strip())


@FAST
@given(valid_cpulist())
def test_reference_agrees_on_stride_expansion_by_blocks(text):
    # An independent third formulation of "N-M:used/group" (block by block) for
    # stride groups, so the reference itself is cross-checked.
    total: set[int] = set()
    for group in text.strip().split(","):
        span, _, stride = group.partition(":")
        lo_s, _, hi_s = span.partition("-")
        lo, hi = int(lo_s), int(hi_s or lo_s)
        if not stride:
            total.update(range(lo, hi + 1))
            continue
        used_s, slash, size_s = stride.partition("/")
        used, size = (int(used_s), int(size_s)) if slash else (1, int(used_s))
        block = lo
        while block <= hi:
            total.update(i for i in range(block, block + used) if i <= hi)
            block += size
    assert reference_parse(text) == frozenset(total)


# --------------------------------------------------------------------------
# Masks (kernel hex form, as in /proc/<pid>/status Cpus_allowed)
# --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, expected",
    [
        ("00000000,0000000f", {0, 1, 2, 3}),
        ("00000000,0000000f\n", {0, 1, 2, 3}),
        ("0000000f", {0, 1, 2, 3}),
        ("3", {0, 1}),  # the kernel prints a short first word when nr_cpu_ids < 32
        ("f,ffffffff", set(range(36))),
        ("80000000,00000000", {63}),
        ("00000001,00000000,00000000", {64}),
        ("ffffffff,ffffffff,ffffffff,ffffffff", set(range(128))),
        ("00000000,00000000", set()),
        ("", set()),
        ("DEADBEEF", {i for i in range(32) if 0xDEADBEEF >> i & 1}),
        ("00000100,00000000,00000000,00000000,00000000,00000000,00000000,00000000,"
         "00000000,00000000,00000000,00000000,00000000,00000000,00000000,00000000,"
         "00000000,00000000,00000000,00000000,00000000,00000000,00000000,00000000,"
         "00000000,00000000,00000000,00000000,00000000,00000000,00000000,00000000,"
         "00000000", {1032}),  # > 1024 CPUs
    ],
)
def test_parse_mask_exact(text, expected):
    assert parse_mask(text) == frozenset(expected)


@pytest.mark.parametrize(
    "text",
    ["0x0f", "g", "123456789", ",0f", "0f,", "0f,,0f", "0f ,0f", "-1", "0-3", "١", "ｆ", "0f\n0f"],
)
def test_parse_mask_rejects_and_names_the_text(text):
    with pytest.raises(PlanError) as info:
        parse_mask(text)
    assert repr(text) in str(info.value)


def test_parse_mask_caps_the_highest_bit():
    words = MAX_ID // 32 + 1  # exactly enough for MAX_ID
    ok = "80000000" + ",00000000" * (words - 1)
    assert parse_mask(ok) == frozenset({(32 * words) - 1}) == frozenset({MAX_ID})
    too_big = "00000001" + ",00000000" * words
    with pytest.raises(PlanError, match="cap"):
        parse_mask(too_big)


def test_parse_mask_rejects_non_strings():
    with pytest.raises(PlanError, match="must be a string"):
        parse_mask(15)


@pytest.mark.parametrize(
    "ids, nbits, text",
    [
        (set(), None, "00000000"),
        ({0, 1, 2, 3}, None, "0000000f"),
        ({0, 1, 2, 3}, 64, "00000000,0000000f"),
        ({0, 1, 2, 3}, 33, "00000000,0000000f"),
        ({0, 1, 2, 3}, 32, "0000000f"),
        ({32}, None, "00000001,00000000"),
        ({31}, None, "80000000"),
        ({0, 63}, None, "80000000,00000001"),
        ({0}, 1, "00000001"),
        ({40}, 8, "00000100,00000000"),  # nbits too small widens, never truncates
    ],
)
def test_format_mask_exact(ids, nbits, text):
    assert format_mask(ids, nbits) == text


@pytest.mark.parametrize("bad", [{-1}, {"3"}, {None}])
def test_format_mask_rejects_non_ids(bad):
    with pytest.raises(PlanError):
        format_mask(bad)


@FAST
@given(any_ids, st.integers(0, 200))
def test_mask_roundtrip_and_agrees_with_list_form(ids, extra_bits):
    nbits = (max(ids) + 1 if ids else 0) + extra_bits
    mask = format_mask(ids, nbits)
    words = mask.split(",")
    assert all(re.fullmatch(r"[0-9a-f]{8}", w) for w in words)
    assert len(words) == max(1, -(-max(nbits, max(ids, default=0) + 1) // 32))
    assert parse_mask(mask) == ids
    assert reference_mask(mask) == ids
    # the mask and the list describe the same set
    assert parse_mask(mask) == parse_cpulist(format_cpulist(ids))
    assert format_cpulist(parse_mask(mask)) == format_cpulist(ids)


@FAST
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=12), st.sampled_from(["", "\n"]))
def test_parse_mask_agrees_with_reference(words, trail):
    text = ",".join(f"{w:08x}" for w in words) + trail
    assert parse_mask(text) == reference_mask(text)
    assert parse_mask(text.upper()) == reference_mask(text)


@FAST
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=8))
def test_parse_mask_of_kernel_text_reformats_identically(words):
    text = ",".join(f"{w:08x}" for w in words)
    assert format_mask(parse_mask(text), nbits=32 * len(words)) == text


# --------------------------------------------------------------------------
# Word arrays for the syscalls
# --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "ids, nbits, word_bits, words",
    [
        ({0, 1, 2, 3}, 64, 64, [0xF]),
        ({0, 1, 2, 3}, 8, 64, [0xF]),
        ({63, 64}, 128, 64, [1 << 63, 1]),
        ({0, 32}, 64, 32, [1, 1]),
        (set(), 0, 64, [0]),
        (set(), 1025, 64, [0] * 17),
        ({1024}, 1025, 64, [0] * 16 + [1]),
    ],
)
def test_ids_to_words_exact(ids, nbits, word_bits, words):
    assert ids_to_words(ids, nbits, word_bits) == words
    assert words_to_ids(words, word_bits) == frozenset(ids)


@pytest.mark.parametrize("ids, nbits", [({64}, 64), ({5}, 5), ({70}, 65), ({0}, 0), ({-1}, 64)])
def test_ids_to_words_rejects_ids_outside_the_mask(ids, nbits):
    with pytest.raises(PlanError):
        ids_to_words(ids, nbits)


@pytest.mark.parametrize("words", [[-1], [0, -2], [1 << 64], [0.5], ["1"]])
def test_words_to_ids_rejects_bad_words(words):
    # a negative word (a signed C array) used to loop forever
    with pytest.raises(PlanError, match="mask word"):
        words_to_ids(words, 64)


def test_words_to_ids_32_bit_limit():
    assert words_to_ids([0xFFFFFFFF], 32) == frozenset(range(32))
    with pytest.raises(PlanError):
        words_to_ids([1 << 32], 32)


@FAST
@given(any_ids, st.sampled_from([8, 32, 64]), st.integers(0, 130))
def test_words_roundtrip(ids, word_bits, extra_bits):
    nbits = (max(ids) + 1 if ids else 0) + extra_bits
    words = ids_to_words(ids, nbits, word_bits)
    assert len(words) == max(1, -(-nbits // word_bits))
    assert all(0 <= w < 2**word_bits for w in words)
    assert words_to_ids(words, word_bits) == ids


@FAST
@given(any_ids, st.integers(0, 70))
def test_words_agree_with_hex_mask(ids, extra_bits):
    nbits = (max(ids) + 1 if ids else 0) + extra_bits
    words = ids_to_words(ids, nbits, 32)
    if nbits:
        assert ",".join(f"{w:08x}" for w in reversed(words)) == format_mask(ids, nbits)


def test_words_to_ids_reads_what_a_c_array_holds():
    # words as they come back from get_mempolicy / sched_getaffinity buffers
    rng = random.Random(1234)
    ids = frozenset(rng.sample(range(4096), 300))
    words = ids_to_words(ids, 4096)
    packed = b"".join(w.to_bytes(8, "little") for w in words)
    unpacked = [int.from_bytes(packed[k:k + 8], "little") for k in range(0, len(packed), 8)]
    assert words_to_ids(unpacked) == ids
    # the same bytes read as 32-bit words give the same ids
    unpacked32 = [int.from_bytes(packed[k:k + 4], "little") for k in range(0, len(packed), 4)]
    assert words_to_ids(unpacked32, 32) == ids


def test_doc_examples():
    assert parse_cpulist("0-3,8,10-14:2") == frozenset({0, 1, 2, 3, 8, 10, 12, 14})
    assert format_cpulist({0, 1, 2, 3, 8}) == "0-3,8"
    assert sorted(parse_cpulist("0-15:2/4")) == [0, 1, 4, 5, 8, 9, 12, 13]
