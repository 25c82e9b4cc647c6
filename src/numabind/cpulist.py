"""Parsing and formatting of kernel CPU and node lists (``bitmap_parselist``'s grammar) and hex bitmasks (pure).
Parsing is bounded whatever the text: over :data:`MAX_LIST_TEXT` characters, an id above :data:`MAX_ID` or more
than :data:`MAX_LISTED` ids is a :class:`~numabind.errors.PlanError` before anything is expanded.
"""

TYPE_CHECKING = False   # annotations only: collections.abc stays off the import path
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable

from ._base import excerpt
from .errors import PlanError

__all__ = [
    "MAX_ID",
    "MAX_LISTED",
    "MAX_LIST_TEXT",
    "parse_cpulist",
    "syntax_problem",
    "NUMACTL_FORMS",
    "format_cpulist",
    "parse_mask",
    "ids_to_words",
    "words_to_ids",
]

#: Largest CPU or node id accepted (the kernel's NR_CPUS is at most 8192).
MAX_ID = 65535
#: Most ids one list may name, counting repeats (``0-3,2-5`` names 8); also the most groups a list has.
MAX_LISTED = 4 * (MAX_ID + 1)
#: Longest cpulist, nodelist or mask text parsed (every id up to MAX_ID written out is about 382 000).
MAX_LIST_TEXT = 1 << 20


#: The most characters of a list an error quotes (its start, escaped).
QUOTED = 48


def _shown(text: str) -> str:
    """``text`` as an error message quotes it: its first :data:`QUOTED` characters, escaped as ``repr`` does."""
    return excerpt(text, QUOTED, escape=True)


#: What a list without strides (numactl's syntax) holds, as its errors offer it.
NUMACTL_FORMS = "N or N-M separated by commas (e.g. '0-3,8')"
_KERNEL_FORMS = "N, N-M or N-M:used/group separated by commas (e.g. '0-3,8')"


def _bad_group(text: str, group: str, what: str, strides: bool, forms: "str | None" = None) -> str:
    """The error for ``group`` of ``text``, which the grammar refuses; ``forms``: what it offers."""
    if not strides and (":" in group or "/" in group):
        return (f"{what} {_shown(text)} uses a stride ({_shown(group)}: the kernel's 'N-M:used/group'), which "
                f"numactl's list syntax (the one numabind takes) does not have; write the ids out (e.g. '0,2,4')")
    offered = forms or (_KERNEL_FORMS if strides else NUMACTL_FORMS)
    return f"{what} {_shown(text)}: cannot parse {_shown(group)}; expected {offered}"


def syntax_problem(text: str, *, what: str = "cpulist", strides: bool = True, forms: "str | None" = None
                   ) -> "str | None":
    """The error :func:`parse_cpulist` gives for the first group of ``text`` it refuses, or None."""
    if len(text) > MAX_LIST_TEXT:
        return _length_error(text, what)
    body = text.strip()
    if not body:
        return None
    for group in body.split(","):
        if _short_id(group) is None:
            m = _match_group(group)
            if m is None or (not strides and m[2] is not None):
                return _bad_group(text, group, what, strides, forms)
    return None


def _length_error(text: str, what: str) -> str:
    return (f"{what} {_shown(text)} is longer than numabind's cap of {MAX_LIST_TEXT} characters (every id up "
            f"to {MAX_ID} written out one by one is shorter); check where the text came from")


def _checked_body(text: str, what: str) -> str:
    """``text`` stripped, once it is a string of at most :data:`MAX_LIST_TEXT` characters."""
    if not isinstance(text, str):
        raise PlanError(f"{what} must be a string, got {type(text).__name__}: {text!r}"[:300])
    if len(text) > MAX_LIST_TEXT:
        raise PlanError(_length_error(text, what))
    return text.strip()


def _group_count(lo: int, hi: int, used: int, size: int) -> int:
    """How many ids ``lo-hi:used/size`` names, by arithmetic (``lo <= hi``, ``0 < used <= size``)."""
    full, rest = divmod(hi - lo + 1, size)
    return full * used + min(rest, used)


def _ascii_digits(text: str) -> bool:
    return bool(text) and text.isascii() and text.isdigit()


def _match_group(group: str) -> tuple[str, str | None, str | None, str | None] | None:
    """``N``, ``N-M``, ``N-M:used`` or ``N-M:used/group`` split into its numbers, else None (no ``re``)."""
    lo, dash, rest = group.partition("-")
    if not _ascii_digits(lo):
        return None
    if not dash:
        return lo, None, None, None
    hi, colon, stride = rest.partition(":")
    if not _ascii_digits(hi):
        return None
    if not colon:
        return lo, hi, None, None
    used, slash, size = stride.partition("/")
    if not _ascii_digits(used):
        return None
    if not slash:
        return lo, hi, used, None
    if not _ascii_digits(size):
        return None
    return lo, hi, used, size


_MAX_ID_DIGITS = len(str(MAX_ID))


def _short_id(digits: str) -> int | None:
    """``digits`` as an id when they are few ASCII digits not above MAX_ID, else None (the grammar decides)."""
    if len(digits) <= _MAX_ID_DIGITS and _ascii_digits(digits):
        value = int(digits)
        if value <= MAX_ID:
            return value
    return None


def _check_id(digits: str, text: str, what: str) -> int:
    """``digits`` (ASCII, from the grammar) as an int; a PlanError above MAX_ID (length checked before ``int()``)."""
    value = _short_id(digits)
    if value is not None:
        return value
    significant = digits.lstrip("0") or "0"     # leading zeros do not count against the length
    if len(significant) <= _MAX_ID_DIGITS and int(significant) <= MAX_ID:
        return int(significant)
    shown = digits if len(digits) <= 20 else f"{digits[:20]}... ({len(digits)} digits)"
    raise PlanError(f"{what} {_shown(text)}: number {shown} is larger than numabind's cap of {MAX_ID} "
                    f"(no kernel has that many CPUs or nodes); check the list for a typo")


def parse_cpulist(text: str, *, what: str = "cpulist", strides: bool = True) -> frozenset[int]:
    """Parse a kernel cpulist or nodelist into a frozenset of ids (``strides=False``: numactl's syntax, without
    ``N-M:used/group``).

    >>> sorted(parse_cpulist("0-3,8,10-14:2"))
    [0, 1, 2, 3, 8, 10, 12, 14]
    >>> sorted(parse_cpulist("0-15:2/4"))
    [0, 1, 4, 5, 8, 9, 12, 13]
    >>> parse_cpulist("  \\n")
    frozenset()
    """
    body = _checked_body(text, what)
    if not body:
        return frozenset()
    first, dash, last = body.partition("-")
    if dash:
        lo, hi = _short_id(first), _short_id(last)
        if lo is not None and hi is not None and lo <= hi:
            return frozenset(range(lo, hi + 1))           # one plain range: what most sysfs lists hold
    groups = body.split(",")
    listed = len(groups)          # each group names at least one id; a range adds the rest of its ids
    if listed > MAX_LISTED:
        raise PlanError(_too_many(text, what, listed))
    out: set[int] = set()
    for group in groups:
        single = _short_id(group)
        if single is not None:
            out.add(single)                               # one id: the rest of the grammar is not needed
            continue
        m = _match_group(group)
        if m is None or (not strides and m[2] is not None):
            raise PlanError(_bad_group(text, group, what, strides))
        lo = _check_id(m[0], text, what)
        if m[1] is None:
            out.add(lo)
            continue
        hi = _check_id(m[1], text, what)
        if hi < lo:
            raise PlanError(f"{what} {_shown(text)}: range {_shown(group)} ends before it starts")
        if m[2] is None:
            used = size = 1
        elif m[3] is None:
            used, size = 1, _check_id(m[2], text, what)
        else:
            used, size = _check_id(m[2], text, what), _check_id(m[3], text, what)
        if size == 0 or used == 0 or used > size:
            raise PlanError(f"{what} {_shown(text)}: in {_shown(group)} the group size must be > 0 and "
                            f"0 < used <= group size")
        listed += _group_count(lo, hi, used, size) - 1
        if listed > MAX_LISTED:                           # before anything of the group is built
            raise PlanError(_too_many(text, what, listed))
        if used == size:
            out.update(range(lo, hi + 1))
        elif used == 1:
            out.update(range(lo, hi + 1, size))
        else:
            # each block's run of ids as a range, made and consumed in C: no Python step per block
            from itertools import chain, repeat

            stops = map(min, range(lo + used, hi + 1 + used, size), repeat(hi + 1))
            out.update(chain.from_iterable(map(range, range(lo, hi + 1, size), stops)))
    return frozenset(out)


def _too_many(text: str, what: str, listed: int) -> str:
    return (f"{what} {_shown(text)} names at least {listed} ids counting repeats, more than numabind's cap of "
            f"{MAX_LISTED} (there are {MAX_ID + 1} possible ids); write each id once, as ranges")


def _checked_ids(ids: "Iterable[int]") -> set[int]:
    out = set(ids)
    for i in out:
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise PlanError(f"ids must be non-negative integers, got {i!r}")
    return out


def format_cpulist(ids: "Iterable[int]") -> str:
    """Canonical cpulist: sorted, runs of two or more as ``a-b``.

    >>> format_cpulist({0, 1, 2, 3, 8})
    '0-3,8'
    """
    items = sorted(_checked_ids(ids))
    parts: list[str] = []
    k = 0
    while k < len(items):
        start = items[k]
        while k + 1 < len(items) and items[k + 1] == items[k] + 1:
            k += 1
        end = items[k]
        parts.append(str(start) if start == end else f"{start}-{end}")
        k += 1
    return ",".join(parts)


_HEX = frozenset("0123456789abcdefABCDEF")


def parse_mask(text: str, *, what: str = "mask") -> frozenset[int]:
    """Parse a kernel hex bitmask (``"00000000,0000000f"``: 32-bit words, most significant first) into ids.

    >>> sorted(parse_mask("00000000,0000000f"))
    [0, 1, 2, 3]
    """
    body = _checked_body(text, what)
    if not body:
        return frozenset()
    words = body.split(",")
    bad = next((w for w in words if not (0 < len(w) <= 8 and all(c in _HEX for c in w))), None)
    if bad is not None:
        raise PlanError(f"{what} {_shown(text)}: {_shown(bad)} is not a hex word of at most 8 digits "
                        f"(expected e.g. '00000000,0000000f')")
    nwords = len(words)
    out: list[int] = []
    # word by word: bit extraction from one big int would make long masks quadratic
    for k, w in enumerate(words):
        word = int(w, 16)
        if not word:
            continue
        base = 32 * (nwords - 1 - k)
        if base + word.bit_length() - 1 > MAX_ID:
            raise PlanError(f"{what} {_shown(text)}: sets a bit above numabind's cap of {MAX_ID}")
        while word:
            low = word & -word
            out.append(base + low.bit_length() - 1)
            word ^= low
    return frozenset(out)


def ids_to_words(ids: "Iterable[int]", nbits: int, word_bits: int = 64) -> list[int]:
    """The ids as little-endian ``word_bits``-bit words of ``nbits`` bits (PlanError beyond)."""
    nwords = max(1, (nbits + word_bits - 1) // word_bits)
    words = [0] * nwords
    for i in _checked_ids(ids):
        if i >= nbits:
            raise PlanError(f"id {i} does not fit a mask of {nbits} bits")
        words[i // word_bits] |= 1 << (i % word_bits)
    return words


def words_to_ids(words: "Iterable[int]", word_bits: int = 64) -> frozenset[int]:
    """Inverse of :func:`ids_to_words`; a word that is negative or wider than ``word_bits`` is a PlanError."""
    out = set()
    for k, w in enumerate(words):
        if not isinstance(w, int) or isinstance(w, bool) or w < 0 or w >> word_bits:
            raise PlanError(f"mask word {k} is {w!r}; expected an unsigned {word_bits}-bit integer")
        base = k * word_bits
        while w:
            low = w & -w
            out.add(base + low.bit_length() - 1)
            w ^= low
    return frozenset(out)
