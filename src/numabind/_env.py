"""numabind's own environment settings, parsed in one place (pure apart from reading the environment)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from .errors import NumabindError

__all__ = ["STRICT_TRUE", "STRICT_FALSE", "strict_from_env"]

#: Spellings of NUMABIND_STRICT that mean "raise instead of degrading".
STRICT_TRUE = ("1", "true", "yes", "on")
#: Spellings that mean "degrade, with a warning per step" (unset is the same).
STRICT_FALSE = ("0", "false", "no", "off", "")


def strict_from_env(env: Mapping[str, str] | None = None) -> bool:
    """``NUMABIND_STRICT`` as a bool; any other value is an error listing the accepted ones.

    A typo such as ``NUMABIND_STRICT=enabled`` must not silently mean lenient.
    """
    raw = (os.environ if env is None else env).get("NUMABIND_STRICT", "")
    value = raw.strip().lower()
    if value in STRICT_TRUE:
        return True
    if value in STRICT_FALSE:
        return False
    shown = raw if len(raw) <= 40 else raw[:40] + "..."
    raise NumabindError(
        f"NUMABIND_STRICT={shown!r} is not understood; use one of {', '.join(STRICT_TRUE)} (raise instead of "
        f"degrading) or {', '.join(v for v in STRICT_FALSE if v)} or unset (degrade with warnings)"
    )
