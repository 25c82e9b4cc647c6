"""The base of numabind's frozen value classes, without :mod:`dataclasses` or :mod:`typing` at import."""

from __future__ import annotations

__all__ = ["Value"]

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:  # pragma: no cover
    from typing import TypeVar

    _V = TypeVar("_V", bound="Value")


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

    def replace(self: _V, **changes: object) -> _V:
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
