"""The plumbing below every layer of numabind, in one module so that a bind loads it once.

* :class:`Value`: the base of numabind's frozen value classes, without :mod:`dataclasses` or
  :mod:`typing` at import.
* numabind's own environment settings (``NUMABIND_STRICT``, :func:`environ_get`), parsed in one place
  (pure apart from reading the environment).
* :func:`getLogger`: ``logging.getLogger(__name__)`` without importing :mod:`logging` until a record
  can be seen. Importing :mod:`logging` costs more than the rest of ``numabind run`` together (it
  brings ``re``, ``traceback``, ``string`` and ``weakref`` along). A record can only reach a handler
  once the program (or a test framework, or the CLI) has imported :mod:`logging` to configure one, so
  until then a record is dropped, which is what logging itself would do with numabind's
  ``NullHandler`` and no handler configured. From the moment :mod:`logging` is in ``sys.modules``
  every call goes to the real ``logging.getLogger(name)``, unchanged.
"""

import os
import sys

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping
    from typing import Any, TypeVar

    _V = TypeVar("_V", bound="Value")

from .errors import NumabindError

__all__ = ["BOUND_ENV", "DEBUG", "ERROR", "EXIT_NOT_APPLIED", "EXIT_NOT_EXECUTABLE", "EXIT_NOT_FOUND", "EXIT_USAGE", "INFO", "WARNING",
           "Logger", "STRICT_FALSE", "STRICT_PARTIAL", "STRICT_TRUE", "Strictness",
           "TLLM_AFFINITY_ENV", "Value", "bind_settings", "environ_copy", "environ_get", "getLogger", "keep_binding_env",
           "EXCERPT", "excerpt", "printable", "real_logger", "strict_from_env", "warn_through"]

#: Exit statuses of ``numabind run`` and of a command started bound (numactl's and a shell's): the binding
#: could not be applied, a usage error, a command found but not executable, a command not found.
EXIT_NOT_APPLIED, EXIT_USAGE, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND = 1, 2, 126, 127

#: The variable a command started bound carries: ``<pid>:<start time>|<requested plan>|<applied plan>``
#: (written by :func:`numabind.bind.bound_environ`, read back by :mod:`numabind.residency`).
BOUND_ENV = "_NUMABIND_BOUND"


def printable(text: str) -> str:
    """``text`` as ``ps`` shows another process's name: each non-printable character (C0 and C1 controls,
    DEL, format characters such as U+202E, lone surrogates, unassigned code points) and each U+FFFD (a
    byte that was not UTF-8, as numabind's readers decode it) as ``?``.

    The one rule for everything numabind prints that someone else controls: process names and command
    lines, record fields, strings read from a replayed machine (an hwloc XML file's attributes, a dump's
    files) and the kernel's own text about them."""
    if text.isprintable() and "\ufffd" not in text:
        return text
    return "".join(c if c.isprintable() and c != "\ufffd" else "?" for c in text)


#: The most characters of someone else's text an error message quotes: what a parse error needs to show,
#: never a whole file.
EXCERPT = 40


def excerpt(text: str, width: int = EXCERPT, *, escape: bool = False) -> str:
    """The start of ``text`` (whitespace trimmed) for an error message: at most ``width`` characters,
    through :func:`printable`, quoted, and the length said when cut. The text may be another user's (a
    replayed machine's file, a list a process wrote), so an error never carries more of it than that.

    With ``escape`` the text is quoted as typed (not trimmed), each non-printable character as Python's
    ``repr`` escapes it (``\\n``, ``\\x1b``, ``\\u202e``) instead of ``?``: for a value the user typed (a
    cpulist), whose error should say which character is wrong. Neither form prints a control character."""
    body = text if escape else text.strip()
    cut = len(body) > width
    shown = body[:width] if cut else body
    quoted = repr(shown if escape else printable(shown))
    return f"{quoted}... ({len(body)} characters)" if cut else quoted


# ----------------------------------------------------------------------------- frozen values
class Value:
    """Base of numabind's hand-written frozen value classes (no :mod:`dataclasses` on the import path).

    A subclass lists its attributes in ``__slots__`` (also the order of ``repr`` and pickling) and the
    ones that take part in equality and hashing in ``_compare`` (default: all). Its ``__init__`` sets
    them with ``object.__setattr__``; afterwards they cannot be set or deleted (the error is
    :class:`dataclasses.FrozenInstanceError`, as for a frozen dataclass). ``replace(**changes)``
    (also ``copy.replace`` from Python 3.13) builds a new value through ``__init__``, so every
    change is validated again.
    """

    __slots__: tuple[str, ...] = ()
    _compare: tuple[str, ...] | None = None

    @classmethod
    def _fields(cls) -> tuple[str, ...]:
        out: list[str] = []
        for klass in reversed(cls.__mro__):
            out.extend(klass.__dict__.get("__slots__", ()))
        return tuple(out)

    def _key(self) -> tuple[object, ...]:
        names = self._compare if self._compare is not None else self._fields()
        return tuple(getattr(self, n) for n in names)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

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

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), tuple(getattr(self, n) for n in self._fields())))

    def replace(self: "_V", **changes: object) -> "_V":
        """A copy with ``changes`` applied, validated like a new value."""
        names = self._fields()
        unknown = set(changes) - set(names)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        kwargs = {n: changes[n] if n in changes else getattr(self, n) for n in names}
        return type(self)(**kwargs)

    __replace__ = replace


def _rebuild(cls: type, values: tuple[object, ...]) -> object:
    """Unpickle a :class:`Value` through its ``__init__`` (a pickle is checked like any new value)."""
    return cls(**dict(zip(cls._fields(), values)))  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- environment settings
#: How a binding that cannot be applied in full is handled: ``True`` raises (and rolls back) on any
#: weakening, ``False`` degrades with a warning per step, ``"partial"`` degrades like ``False`` but
#: raises when in the end nothing of the plan is in force.
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
    """``os.environ.get(name)``, read straight from the mapping's own bytes.

    ``bind_current`` reads two settings on every call, and ``os.environ.get`` (the Mapping machinery,
    then encoding the key and decoding the value in Python) costs as much as a system call. The value
    is the same: ``os.environ`` keeps its items encoded with the file-system encoding. When
    ``os.environ`` was replaced by another mapping (or off POSIX), its own ``get`` answers.
    """
    data = _environ_bytes()
    if data is None:
        return os.environ.get(name)
    key = _KEYS.get(name)
    if key is None:
        key = _KEYS[name] = os.fsencode(name)
    raw = data.get(key)
    return None if raw is None else os.fsdecode(raw)


def environ_copy() -> dict[str, str]:
    """``dict(os.environ)``, decoded straight from the mapping's own bytes.

    ``dict(os.environ)`` goes through the Mapping machinery for every variable (four Python calls
    each); ``numabind run`` copies the environment once to exec with it, and that copy cost as much
    as the bind. The result is the same: ``os.environ`` keeps its items encoded with the file-system
    encoding and error handler, which :func:`os.fsdecode` undoes. When ``os.environ`` was replaced by
    another mapping (or off POSIX), its own items are copied.
    """
    data = _environ_bytes()
    if data is None:
        return dict(os.environ)
    enc, err = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
    return {k.decode(enc, err): v.decode(enc, err) for k, v in data.items()}


def strict_from_env(env: "Mapping[str, str] | None" = None) -> "Strictness":
    """``NUMABIND_STRICT`` as True, False or ``"partial"``; any other value is an error listing the accepted ones.

    A typo such as ``NUMABIND_STRICT=enabled`` must not silently mean lenient.
    """
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
#: TensorRT-LLM's switch for its workers' own CPU pinning (``configure_cpu_affinity``, once a worker runs):
#: unset, a mask that someone else constrained is reset to all CPUs ("Removing CPU affinity constraints");
#: ``1`` replaces it with NVML's choice for the worker's GPU; ``0`` (or any other value) keeps it.
TLLM_AFFINITY_ENV = "TLLM_NUMA_AWARE_WORKER_AFFINITY"
_env_said: set[int] = set()    # the levels already logged in this process (a forked child inherits it)
_env_log = Logger("numabind.bind")


def keep_binding_env(env: "Any" = None, *, say: bool = True) -> "tuple[int, str] | None":
    """Keep the binding numabind gives a command or a child from being undone by the program it runs.

    The one rule, applied wherever numabind binds a command or a child (``numabind run``, ``wrap_command``,
    ``popen_kwargs``, ``configure_subprocess``'s children, ``bound``, ``pool_plans``): in ``env`` (a mutable
    mapping; default ``os.environ``, this process's own), :data:`TLLM_AFFINITY_ENV` is set to ``0`` unless
    the user set it (an empty value counts as unset). Returns ``(level, note)`` for the report: INFO and
    what was set, or WARNING when the user's value is ``1`` (TensorRT-LLM will replace numabind's CPUs);
    None when the user's own value stands and keeps the binding. With ``say`` the note is logged (logger
    ``numabind.bind``) once per process and level.
    """
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
