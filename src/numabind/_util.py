"""Small value helpers shared by the value objects."""

from __future__ import annotations

from _collections_abc import Iterator, Mapping   # collections.abc's own source, loaded by os: no collections import

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (off the looks' start)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, TypeVar

    K = TypeVar("K")
    V = TypeVar("V")
else:
    K = V = object   # Mapping[K, V] is then Mapping[object, object]: the same base class

__all__ = ["FrozenMap"]


def _key(item: tuple[Any, Any]) -> Any:
    return item[0]


class FrozenMap(Mapping[K, V]):
    """An immutable, hashable, picklable mapping (keys kept in sorted order)."""

    __slots__ = ("_items", "_dict", "_hash")
    _items: tuple[tuple[K, V], ...]
    _dict: dict[K, V]
    _hash: int | None

    def __init__(self, data: Mapping[K, V] | None = None) -> None:
        items = tuple(sorted(dict(data or {}).items(), key=_key))
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
        return self._hash  # type: ignore[return-value]  # set just above

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._items == other._items
        if isinstance(other, Mapping):
            return self._dict == dict(other)
        return NotImplemented

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("FrozenMap is immutable")

    def __reduce__(self) -> tuple[type[FrozenMap[K, V]], tuple[dict[K, V]]]:
        return (FrozenMap, (self._dict,))

    def __repr__(self) -> str:
        return f"FrozenMap({self._dict!r})"

