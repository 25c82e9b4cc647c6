"""Integrations with frameworks that start worker processes themselves; each imports its framework only when
used."""

from __future__ import annotations

__all__: list[str] = []
