"""The plumbing below every layer of numabind, in one module so that a bind loads it once: :class:`Value` (frozen
values without :mod:`dataclasses` or :mod:`typing`), numabind's environment settings, and :func:`getLogger`, which
does not import :mod:`logging` until a record could reach a handler (until then it is dropped, as logging would).
"""

import os
import sys

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping
    from typing import Any, ClassVar, TypeVar

    from typing_extensions import dataclass_transform

    _T = TypeVar("_T")
    _V = TypeVar("_V", bound="Value")

from .errors import NumabindError

__all__ = ["BOUND_ENV", "DEBUG", "ERROR", "EXCERPT", "EXIT_NOT_APPLIED", "EXIT_NOT_EXECUTABLE", "EXIT_NOT_FOUND",
           "EXIT_USAGE", "INFO", "Logger", "STRICT_FALSE", "STRICT_PARTIAL", "STRICT_TRUE", "Strictness",
           "TLLM_AFFINITY_ENV", "Value", "WARNING", "bind_settings", "environ_copy", "environ_get", "excerpt", "field",
           "getLogger", "keep_binding_env", "printable", "real_logger", "strict_from_env", "warn_through"]

#: Exit statuses of ``numabind run`` and of a command started bound (numactl's and a shell's): the binding
#: could not be applied, a usage error, a command found but not executable, a command not found.
EXIT_NOT_APPLIED, EXIT_USAGE, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND = 1, 2, 126, 127

#: The variable a command started bound carries: ``<pid>:<start time>|<requested plan>|<applied plan>``
#: (written by :func:`numabind.bind.bound_environ`, read back by :mod:`numabind.residency`).
BOUND_ENV = "_NUMABIND_BOUND"


def printable(text: str) -> str:
    """``text`` as ``ps`` shows another process's name: each non-printable character (C0 and C1 controls,
    DEL, format characters such as U+202E, lone surrogates, unassigned code points) and each U+FFFD (a
    byte that was not UTF-8, as numabind's readers decode it) as ``?``: for every text someone else controls."""
    if text.isprintable() and "\ufffd" not in text:
        return text
    return "".join(c if c.isprintable() and c != "\ufffd" else "?" for c in text)


#: The most characters of someone else's text an error message quotes: what a parse error needs to show,
#: never a whole file.
EXCERPT = 40


def excerpt(text: str, width: int = EXCERPT, *, escape: bool = False) -> str:
    """The start of ``text`` (whitespace trimmed) for an error message: at most ``width`` characters, through
    :func:`printable`, quoted, and the length said when cut. With ``escape`` (a value the user typed) it is not
    trimmed and non-printable characters are escaped as ``repr`` does instead of ``?``."""
    body = text if escape else text.strip()
    cut = len(body) > width
    shown = body[:width] if cut else body
    quoted = repr(shown if escape else printable(shown))
    return f"{quoted}... ({len(body)} characters)" if cut else quoted


# ----------------------------------------------------------------------------- frozen values
if not TYPE_CHECKING:
    def dataclass_transform(**_: object) -> "Any":   # for type checkers: Value's subclasses read as dataclasses
        return lambda cls: cls


class _Field(tuple[object, bool]):   # (default, compare), as field() gives it to _Frozen
    __slots__ = ()


def field(*, default: "_T", compare: bool = True) -> "_T":
    """A :class:`Value` field's default, and whether the field takes part in equality and hashing (as in
    :func:`dataclasses.field`)."""
    return _Field((default, compare))  # type: ignore[return-value]   # read once, by _Frozen


class _Frozen(type):
    """:class:`Value`'s metaclass: a subclass's annotated fields become its ``__slots__``, their defaults and
    whether they compare kept aside. A subclass that lists ``__slots__`` itself writes its own ``__init__``."""

    def __new__(mcls, name: str, bases: "tuple[type, ...]", ns: "dict[str, Any]") -> "Any":
        parent = bases[0] if bases else object     # the fields of the class a value class extends come first
        fields, compare = getattr(parent, "_names", ()), getattr(parent, "_compare", None)
        uncompared = set() if compare is None else set(fields) - set(compare)
        defaults = dict(getattr(parent, "_defaults", {}))
        hand_written = "__slots__" in ns
        if not hand_written:
            ns["__slots__"] = tuple(ns.get("__annotations__", ()))
            for n in ns["__slots__"]:
                value = ns.pop(n, defaults)   # (defaults: no default)
                if isinstance(value, _Field):
                    value, compared = value
                    uncompared.update(() if compared else (n,))
                if value is not defaults:
                    defaults[n] = value
        cls: Any = super().__new__(mcls, name, bases, ns)
        cls._names, cls._defaults = fields + tuple(ns["__slots__"]), defaults
        if not hand_written:
            cls._compare = tuple(n for n in cls._names if n not in uncompared) if uncompared else None
        return cls


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
class Value(metaclass=_Frozen):
    """A frozen dataclass with slots, without :mod:`dataclasses`: a subclass declares its fields as one does
    (annotations in order, defaults, :func:`field`); ``__init__`` takes them by position or name, then calls
    ``__post_init__``. A subclass may instead list ``__slots__``, write its ``__init__`` and name the fields that
    compare in ``_compare``. Setting or deleting a field raises :class:`dataclasses.FrozenInstanceError`;
    ``replace(**changes)`` (and ``copy.replace``) builds a new value through ``__init__``."""

    __slots__ = ()
    if TYPE_CHECKING:  # pragma: no cover
        _compare: ClassVar[tuple[str, ...] | None] = None   # the fields of equality and hashing (None: all)
        _names: ClassVar[tuple[str, ...]]                   # every field, in order
        _defaults: ClassVar[dict[str, object]]
    else:
        _compare = None

    @classmethod
    def _fields(cls) -> "tuple[str, ...]":
        return cls._names

    def __init__(self, *args: "Any", **kwargs: "Any") -> None:
        names = self._names
        values = {**self._defaults, **dict(zip(names, args)), **kwargs}
        if (len(values) != len(names) or len(args) > len(names) or values.keys() != set(names)
                or (args and kwargs and not kwargs.keys().isdisjoint(names[:len(args)]))):
            required = ", ".join(n for n in names if n not in self._defaults)
            raise TypeError(f"{type(self).__name__}() takes the fields {', '.join(names)} once each, by position or "
                            f"name ({required} required), not {len(args)} by position and {list(kwargs)} by name")
        for name, value in values.items():
            object.__setattr__(self, name, value)
        self.__post_init__()

    def __post_init__(self) -> None:
        """Checks or normalises the fields (with ``object.__setattr__``) after ``__init__``."""

    def _key(self) -> "tuple[object, ...]":
        return tuple(getattr(self, n) for n in (self._fields() if self._compare is None else self._compare))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash((self.__class__.__name__, self._key()))

    def __setattr__(self, name: str, value: object) -> None:
        from dataclasses import FrozenInstanceError   # only on the error path

        raise FrozenInstanceError(f"cannot assign to field {name!r} of a frozen {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot delete field {name!r} of a frozen {type(self).__name__}")

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields())
        return f"{type(self).__name__}({inner})"

    def __reduce__(self) -> "tuple[object, ...]":
        return (_rebuild, (type(self), tuple(getattr(self, n) for n in self._fields())))

    def replace(self: "_V", **changes: object) -> "_V":
        """A copy with ``changes`` applied, validated like a new value."""
        names = self._fields()
        unknown = set(changes) - set(names)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        return type(self)(**{n: changes[n] if n in changes else getattr(self, n) for n in names})

    __replace__ = replace


def _rebuild(cls: "type[Value]", values: "tuple[object, ...]") -> object:
    """Unpickle a :class:`Value` through its ``__init__`` (a pickle is checked like any new value)."""
    return cls(**dict(zip(cls._fields(), values)))


# ----------------------------------------------------------------------------- environment settings
#: How a binding that cannot be applied in full is handled: ``True`` raises (and rolls back), ``False`` degrades
#: with a warning per step, ``"partial"`` degrades but raises when nothing of the plan is in force.
if TYPE_CHECKING:  # pragma: no cover
    from .types import Strictness as Strictness   # defined once, in numabind.types
else:
    Strictness = object   # a stand-in for annotations: where they are evaluated, this one reads as object

#: Spellings of NUMABIND_STRICT that mean "raise instead of degrading".
STRICT_TRUE = ("1", "true", "yes", "on")
#: Spellings that mean "degrade, with a warning per step" (unset is the same).
STRICT_FALSE = ("0", "false", "no", "off", "")
#: The spelling that means "degrade, but raise when nothing of the plan could be applied".
STRICT_PARTIAL = ("partial",)


_ENVIRON_TYPE = type(os.environ)
_POSIX = os.name == "posix"
_KEYS: dict[str, bytes] = {}


def _own_bytes(environ: object) -> "dict[bytes, bytes] | None":
    data = getattr(environ, "_data", None)
    if type(environ) is not _ENVIRON_TYPE or not _POSIX or type(data) is not dict:
        return None
    return data


_ENVIRON = os.environ
_ENVIRON_DATA = _own_bytes(_ENVIRON)   # os._Environ never rebinds its _data: one check at import


def _environ_bytes() -> "dict[bytes, bytes] | None":
    """The bytes ``os.environ`` keeps its items in, or None when ``os.environ`` was replaced by another
    mapping (or off POSIX): then only that mapping's own methods answer."""
    if os.environ is _ENVIRON:
        return _ENVIRON_DATA
    return _own_bytes(os.environ)


def environ_get(name: str) -> str | None:
    """``os.environ.get(name)``, read straight from the mapping's own bytes (``os.environ.get``, through the
    Mapping machinery, costs as much as a system call, and ``bind_current`` reads two settings on every call).
    When ``os.environ`` was replaced by another mapping (or off POSIX), its own ``get`` answers."""
    data = _environ_bytes()
    if data is None:
        return os.environ.get(name)
    key = _KEYS.get(name)
    if key is None:
        key = _KEYS[name] = os.fsencode(name)
    raw = data.get(key)
    return None if raw is None else os.fsdecode(raw)


def environ_copy() -> dict[str, str]:
    """``dict(os.environ)``, decoded straight from the mapping's own bytes (through the Mapping machinery, the
    copy ``numabind run`` execs with cost as much as the bind). When ``os.environ`` was replaced by another
    mapping (or off POSIX), its own items are copied."""
    data = _environ_bytes()
    if data is None:
        return dict(os.environ)
    enc, err = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
    return {k.decode(enc, err): v.decode(enc, err) for k, v in data.items()}


def strict_from_env(env: "Mapping[str, str] | None" = None) -> "Strictness":
    """``NUMABIND_STRICT`` as True, False or ``"partial"``; any other value is an error listing the accepted ones.

    A typo such as ``NUMABIND_STRICT=enabled`` must not silently mean lenient."""
    raw = (environ_get("NUMABIND_STRICT") if env is None else env.get("NUMABIND_STRICT")) or ""
    if raw == "":
        return False
    value = raw.strip().lower()
    if value in STRICT_TRUE:
        return True
    if value in STRICT_FALSE:
        return False
    if value in STRICT_PARTIAL:
        return "partial"
    shown = raw if len(raw) <= 40 else raw[:40] + "..."
    raise NumabindError(
        f"NUMABIND_STRICT={shown!r} is not understood; use one of {', '.join(STRICT_TRUE)} (raise instead of "
        f"degrading), partial (degrade, but raise when nothing of the plan could be applied) or "
        f"{', '.join(v for v in STRICT_FALSE if v)} or unset (degrade with warnings)"
    )


_SETTINGS: "dict[tuple[bytes | None, bytes | None], tuple[Strictness, str | None]]" = {}


def bind_settings() -> "tuple[Strictness, str | None]":
    """``NUMABIND_STRICT`` as :func:`strict_from_env` parses it, and ``NUMABIND_BACKEND`` (None when unset or
    empty): the two settings a ``bind_current`` with neither given reads on every call, in one look at the
    environment, each pair of values parsed once (a bad ``NUMABIND_STRICT`` raises every time)."""
    data = _environ_bytes()
    if data is None:
        return strict_from_env(), os.environ.get("NUMABIND_BACKEND") or None
    raw = (data.get(b"NUMABIND_STRICT"), data.get(b"NUMABIND_BACKEND"))
    found = _SETTINGS.get(raw)
    if found is None:
        found = (strict_from_env(), environ_get("NUMABIND_BACKEND") or None)
        if len(_SETTINGS) >= 16:
            _SETTINGS.clear()
        _SETTINGS[raw] = found
    return found


# ----------------------------------------------------------------------------- logging
DEBUG, INFO, WARNING, ERROR = 10, 20, 30, 40
_modules = sys.modules
_null_added = False


def real_logger(name: str) -> "Any":
    """``logging.getLogger(name)``, with numabind's NullHandler added once (imports :mod:`logging`)."""
    global _null_added
    import logging

    if not _null_added:   # the library's NullHandler, as every library adds it
        root = logging.getLogger("numabind")
        if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
            root.addHandler(logging.NullHandler())
        _null_added = True
    return logging.getLogger(name)


class Logger:
    """The part of :class:`logging.Logger` numabind uses, resolved on first use after logging is imported."""

    __slots__ = ("name", "_logger")

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger: Any = None

    def _get(self) -> "Any":
        logger = self._logger
        if logger is None:
            logger = self._logger = real_logger(self.name)
        return logger

    # stacklevel=2: the record names numabind's caller of this method, as logging's own would
    def isEnabledFor(self, level: int) -> bool:
        return "logging" in _modules and self._get().isEnabledFor(level)

    def log(self, level: int, msg: str, *args: "Any", **kwargs: "Any") -> None:
        if "logging" in _modules or _woken(level):
            self._get().log(level, msg, *args, stacklevel=2, **kwargs)

    def debug(self, msg: str, *args: "Any", **kwargs: "Any") -> None:
        if "logging" in _modules:
            self._get().debug(msg, *args, stacklevel=2, **kwargs)

    def info(self, msg: str, *args: "Any", **kwargs: "Any") -> None:
        if "logging" in _modules:
            self._get().info(msg, *args, stacklevel=2, **kwargs)

    def warning(self, msg: str, *args: "Any", **kwargs: "Any") -> None:
        if "logging" in _modules or _woken(WARNING):
            self._get().warning(msg, *args, stacklevel=2, **kwargs)

    def error(self, msg: str, *args: "Any", **kwargs: "Any") -> None:
        if "logging" in _modules or _woken(ERROR):
            self._get().error(msg, *args, stacklevel=2, **kwargs)


_before_warning: "Any" = None   # warn_through's hook, until the first record at WARNING or above


def warn_through(hook: "Any") -> None:
    """Have ``hook()`` called once, before the first record at WARNING or above that would otherwise be dropped
    because :mod:`logging` is not imported yet; the record then goes through logging if ``hook`` imported it.
    numabind's command line uses it on its fast paths: the hook configures logging as the full command line
    does, so a warning found while discovering is printed, not lost, without importing logging on every start."""
    global _before_warning
    _before_warning = hook


def _woken(level: int) -> bool:
    """Whether logging is there after calling :func:`warn_through`'s hook for a record at ``level``."""
    global _before_warning
    hook = _before_warning
    if hook is None or level < WARNING:
        return False
    _before_warning = None
    hook()
    return "logging" in _modules


def getLogger(name: str) -> Logger:  # noqa: N802 - the name of the function it stands for
    return Logger(name)


# ----------------------------------------------------------------------------- what a bound command inherits
#: TensorRT-LLM's switch for its workers' CPU pinning: unset, a constrained mask is reset to all CPUs; ``1``
#: replaces it with NVML's choice; ``0`` keeps it.
TLLM_AFFINITY_ENV = "TLLM_NUMA_AWARE_WORKER_AFFINITY"
_env_said: set[int] = set()    # the levels already logged in this process (a forked child inherits it)
_env_log = Logger("numabind.bind")


def keep_binding_env(env: "Any" = None, *, say: bool = True) -> "tuple[int, str] | None":
    """Set :data:`TLLM_AFFINITY_ENV` to ``0`` in ``env`` (default ``os.environ``) unless the user set it, so the
    program keeps numabind's binding. Returns ``(level, note)``: INFO and what was set, WARNING when the user's
    value is ``1``; None when the user's value stands. With ``say`` the note is logged once per process and level."""
    target = os.environ if env is None else env
    value = target.get(TLLM_AFFINITY_ENV)
    if not value:
        target[TLLM_AFFINITY_ENV] = "0"
        found = (INFO, f"{TLLM_AFFINITY_ENV}=0 set in the bound process's environment, so that TensorRT-LLM "
                       f"keeps numabind's CPUs (unset, TensorRT-LLM resets an affinity someone else constrained "
                       f"to all CPUs)")
    elif value.strip() == "1":
        found = (WARNING, f"{TLLM_AFFINITY_ENV}=1 is set: TensorRT-LLM's workers will replace numabind's CPUs "
                          f"with the ones NVML names for their GPU once they start; set it to 0 to keep "
                          f"numabind's binding")
    else:
        return None
    if say and found[0] not in _env_said:
        _env_said.add(found[0])
        _env_log.log(found[0], "%s", found[1])
    return found
