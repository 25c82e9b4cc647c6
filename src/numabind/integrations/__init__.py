"""Integrations with frameworks that start worker processes themselves (``numabind.integrations.ray``).

Each integration imports its framework only when it is used, so
``import numabind`` never imports Ray (or torch).
"""

from __future__ import annotations

__all__: list[str] = []
