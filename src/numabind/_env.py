"""numabind's own environment settings, parsed in one place (pure apart from reading the environment)."""

from __future__ import annotations

import os
TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the import path)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping
    from typing import Literal, Union

from .errors import NumabindError

__all__ = ["STRICT_TRUE", "STRICT_FALSE", "STRICT_PARTIAL", "Strictness", "environ_get", "strict_from_env"]

#: How a binding that cannot be applied in full is handled: ``True`` raises (and rolls back) on any
#: weakening, ``False`` degrades with a warning per step, ``"partial"`` degrades like ``False`` but
#: raises when in the end nothing of the plan is in force.
if TYPE_CHECKING:  # pragma: no cover
    Strictness = Union[bool, Literal["partial"]]
else:
    Strictness = object   # used in annotations only (strings at run time)

#: Spellings of NUMABIND_STRICT that mean "raise instead of degrading".
STRICT_TRUE = ("1", "true", "yes", "on")
#: Spellings that mean "degrade, with a warning per step" (unset is the same).
STRICT_FALSE = ("0", "false", "no", "off", "")
#: The spelling that means "degrade, but raise when nothing of the plan could be applied".
STRICT_PARTIAL = ("partial",)


_ENVIRON_TYPE = type(os.environ)
_POSIX = os.name == "posix"
_KEYS: dict[str, bytes] = {}


def environ_get(name: str) -> str | None:
    """``os.environ.get(name)``, read straight from the mapping's own bytes.

    ``bind_current`` reads two settings on every call, and ``os.environ.get`` (the Mapping machinery,
    then encoding the key and decoding the value in Python) costs as much as a system call. The value
    is the same: ``os.environ`` keeps its items encoded with the file-system encoding. When
    ``os.environ`` was replaced by another mapping (or off POSIX), its own ``get`` answers.
    """
    env = os.environ
    data = getattr(env, "_data", None)
    if type(env) is not _ENVIRON_TYPE or not _POSIX or type(data) is not dict:
        return env.get(name)
    key = _KEYS.get(name)
    if key is None:
        key = _KEYS[name] = os.fsencode(name)
    raw = data.get(key)
    return None if raw is None else os.fsdecode(raw)


def strict_from_env(env: Mapping[str, str] | None = None) -> Strictness:
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
