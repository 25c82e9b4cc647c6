"""Small value helpers shared by the value objects."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

__all__ = ["FrozenMap"]


class FrozenMap(Mapping[K, V], Generic[K, V]):
    """An immutable, hashable, picklable mapping (keys kept in sorted order)."""

    __slots__ = ("_items", "_dict", "_hash")

    def __init__(self, data: Mapping[K, V] | None = None) -> None:
        items = tuple(sorted(dict(data or {}).items(), key=lambda kv: kv[0]))
        object.__setattr__(self, "_items", items)
        object.__setattr__(self, "_dict", dict(items))
        object.__setattr__(self, "_hash", None)

    def __getitem__(self, key: K) -> V:
        return self._dict[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._dict)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            object.__setattr__(self, "_hash", hash(self._items))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._items == other._items
        if isinstance(other, Mapping):
            return self._dict == dict(other)
        return NotImplemented

    def __setattr__(self, name, value):
        raise AttributeError("FrozenMap is immutable")

    def __reduce__(self):
        return (FrozenMap, (self._dict,))

    def __repr__(self) -> str:
        return f"FrozenMap({self._dict!r})"

