"""Parsing and formatting of kernel CPU and node lists and bitmasks (pure).

The list grammar is the kernel's ``bitmap_parselist`` one: comma-separated
groups ``N``, ``N-M`` and ``N-M:used/group`` ("in each block of *group* ids,
take the first *used*"), plus the shorthand ``N-M:step`` for ``N-M:1/step``.
Masks are the kernel's hex form: 32-bit words, most significant first,
separated by commas (``Cpus_allowed: 00000000,0000000f``).

Parsing is bounded, whatever the text (it may come from another user's
process): a text longer than :data:`MAX_LIST_TEXT` characters, an id above
:data:`MAX_ID`, or a list naming more than :data:`MAX_LISTED` ids counting
repeats is a :class:`~numabind.errors.PlanError` before anything is expanded.
The Python work is linear in the text (a ``N-M:used/group`` group is expanded
arithmetically, by ``range`` objects, never one block at a time in Python),
and the ids built are at most :data:`MAX_LISTED`.
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

#: Largest CPU or node id accepted. The kernel's NR_CPUS is at most 8192 and
#: MAX_NUMNODES at most 1024; the cap stops a typo such as ``0-4000000000``
#: from building a set of billions of ids.
MAX_ID = 65535
#: Most ids one list may name, counting repeats (``0-3,2-5`` names 8): every id once is
#: ``MAX_ID + 1``; the headroom lets a hand-written list overlap. Also the most groups a list has.
MAX_LISTED = 4 * (MAX_ID + 1)
#: Longest cpulist, nodelist or mask text parsed: every id up to MAX_ID written one by one
#: (``0,1,2,...,65535``) is about 382 000 characters; a mask of MAX_ID bits about 18 000.
MAX_LIST_TEXT = 1 << 20


#: The most characters of a list an error quotes (with :func:`numabind._base.excerpt`): its start, never a
#: whole file; a few more than a file's excerpt, so that a range of two numbers at the digit cap shows whole.
QUOTED = 48


def _shown(text: str) -> str:
    """``text`` as an error message quotes it: its first :data:`QUOTED` characters, each non-printable one
    escaped as ``repr`` escapes it. The text may be another user's: a file of a replayed machine (whose
    error discovery passes on) or a list another process wrote."""
    return excerpt(text, QUOTED, escape=True)


#: What a list without strides (numactl's syntax, ``parse_cpulist(..., strides=False)``) holds: what its errors
#: offer. The kernel's grammar adds ``N-M:used/group``.
NUMACTL_FORMS = "N or N-M separated by commas (e.g. '0-3,8')"
_KERNEL_FORMS = "N, N-M or N-M:used/group separated by commas (e.g. '0-3,8')"


def _bad_group(text: str, group: str, what: str, strides: bool, forms: "str | None" = None) -> str:
    """The error for ``group`` of ``text``, which the grammar refuses (without ``strides``: also any ``:`` or
    ``/``, numactl's list syntax having no stride form). ``forms``: what the error offers instead of the
    grammar's own forms (a caller whose lists take more, such as numactl's ``all`` and ``!LIST``)."""
    if not strides and (":" in group or "/" in group):
        return (f"{what} {_shown(text)} uses a stride ({_shown(group)}: the kernel's 'N-M:used/group'), which "
                f"numactl's list syntax (the one numabind takes) does not have; write the ids out (e.g. '0,2,4')")
    offered = forms or (_KERNEL_FORMS if strides else NUMACTL_FORMS)
    return f"{what} {_shown(text)}: cannot parse {_shown(group)}; expected {offered}"


def syntax_problem(text: str, *, what: str = "cpulist", strides: bool = True, forms: "str | None" = None
                   ) -> "str | None":
    """The error :func:`parse_cpulist` gives for the first group of ``text`` its grammar refuses (a stride too,
    without ``strides``), or None when every group is of the grammar: ids and ranges are not checked here
    (their errors are :func:`parse_cpulist`'s). For a check of the syntax alone, before the list is parsed
    against a machine (the command line's usage errors); ``forms`` as for the error of a group."""
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
    """``text`` stripped, after the checks every list parser makes first: a string, not longer than
    :data:`MAX_LIST_TEXT`."""
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
    """``N``, ``N-M``, ``N-M:used`` or ``N-M:used/group`` split into its numbers (ASCII digits), else None.

    Written out rather than a regular expression: ``re`` stays off the import path of ``numabind run``.
    """
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
    """``digits`` as an id when they are at most as many ASCII digits as MAX_ID has and not above it, else None
    (then the full grammar decides)."""
    if len(digits) <= _MAX_ID_DIGITS and _ascii_digits(digits):
        value = int(digits)
        if value <= MAX_ID:
            return value
    return None


def _check_id(digits: str, text: str, what: str) -> int:
    """``digits`` (ASCII, from the grammar) as an int, refusing anything above MAX_ID.

    The length is checked before ``int()`` so that a number of thousands of
    digits is a PlanError too, not Python's int-conversion limit error.
    """
    value = _short_id(digits)
    if value is not None:
        return value
    significant = digits.lstrip("0") or "0"     # leading zeros do not count against the length
    if len(significant) <= _MAX_ID_DIGITS and int(significant) <= MAX_ID:
        return int(significant)
    shown = digits if len(digits) <= 20 else f"{digits[:20]}... ({len(digits)} digits)"
    raise PlanError(
        f"{what} {_shown(text)}: number {shown} is larger than numabind's cap of {MAX_ID} "
        f"(no kernel has that many CPUs or nodes); check the list for a typo"
    )


def parse_cpulist(text: str, *, what: str = "cpulist", strides: bool = True) -> frozenset[int]:
    """Parse a kernel cpulist or nodelist into a frozenset of ids.

    ``strides=False`` takes numactl's list syntax, the kernel's without ``N-M:used/group``: a group holding
    ``:`` or ``/`` is a :class:`~numabind.errors.PlanError` saying so, and an error offers only
    :data:`NUMACTL_FORMS` (a list for numactl's options, ``Plan.from_numactl_args``).

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
            raise PlanError(
                f"{what} {_shown(text)}: in {_shown(group)} the group size must be > 0 and "
                f"0 < used <= group size"
            )
        listed += _group_count(lo, hi, used, size) - 1
        if listed > MAX_LISTED:                           # before anything of the group is built
            raise PlanError(_too_many(text, what, listed))
        if used == size:
            out.update(range(lo, hi + 1))
        elif used == 1:
            out.update(range(lo, hi + 1, size))
        else:
            # every block's run of `used` ids as a range object, all made and consumed in C (map, chain):
            # no Python step per block, so the work is the ids themselves, which the cap above bounds.
            # Imported here: itertools is not loaded on numabind run's path, and strides are rare.
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


def _is_mask(body: str) -> bool:
    """Comma-separated groups of 1-8 hex digits (the kernel's mask text)."""
    return all(0 < len(word) <= 8 and all(c in _HEX for c in word) for word in body.split(","))


def parse_mask(text: str, *, what: str = "mask") -> frozenset[int]:
    """Parse a kernel hex bitmask (``"00000000,0000000f"``) into ids.

    Words are 32 bits, most significant first; the first word may be shorter
    (the kernel prints ``"3"`` for CPUs 0-1 of a 2-CPU machine) and leading
    all-zero words are allowed (masks are printed as wide as the kernel's
    ``nr_cpu_ids``).

    >>> sorted(parse_mask("00000000,0000000f"))
    [0, 1, 2, 3]
    """
    body = _checked_body(text, what)
    if not body:
        return frozenset()
    if not _is_mask(body):
        bad = next((w for w in body.split(",") if not (0 < len(w) <= 8 and w.isascii()
                    and all(c in "0123456789abcdefABCDEF" for c in w))), body)
        raise PlanError(
            f"{what} {_shown(text)}: {_shown(bad)} is not a hex word of at most 8 digits "
            f"(expected e.g. '00000000,0000000f')"
        )
    words = body.split(",")
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
    """The ids as a little-endian array of ``word_bits``-bit words covering ``nbits`` bits.

    An id ``>= nbits`` is a PlanError (the kernel would ignore that bit).
    """
    nwords = max(1, (nbits + word_bits - 1) // word_bits)
    words = [0] * nwords
    for i in _checked_ids(ids):
        if i >= nbits:
            raise PlanError(f"id {i} does not fit a mask of {nbits} bits")
        words[i // word_bits] |= 1 << (i % word_bits)
    return words


def words_to_ids(words: "Iterable[int]", word_bits: int = 64) -> frozenset[int]:
    """Inverse of :func:`ids_to_words`.

    Words must be unsigned and fit ``word_bits`` (a negative word, e.g. from a
    signed C array, is a PlanError rather than a silent misreading).
    """
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
