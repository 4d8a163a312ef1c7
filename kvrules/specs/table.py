"""A table of every layer's spec that a stage answering once per spec object returns.

Building a new ``dict`` of a million layers costs a hash probe per layer, and at that size each
probe misses the caches; :class:`ReplacedSpecs` instead keeps the table it was given and the few
replaced spec objects.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import Any

from kvrules.specs.base import KnownDistinct, KVCacheSpec, distinct_specs


class ReplacedSpecs(Mapping[str, KVCacheSpec]):
    """Each layer of ``base`` with its spec, replaced by ``replacements[id(spec)]`` where that
    has one (a read-only mapping, in ``base``'s order).

    Neither argument is copied: give a ``base`` no one else holds or changes (``base`` keeps
    the replaced spec objects alive, so their identities stay theirs). Iterating the values or
    items costs no Python call per layer. Pickled or deep-copied, it becomes a plain ``dict``.
    """

    __slots__ = ("_base", "_distinct", "_new", "_values")

    def __init__(self, base: Mapping[str, KVCacheSpec], replacements: Mapping[int, KVCacheSpec]) -> None:
        self._base = base
        self._new = replacements
        self._values: list[KVCacheSpec] | None = None  # made on the first read of every value
        self._distinct: list[KVCacheSpec] | None = None  # found on the first ask

    def __getitem__(self, name: str) -> KVCacheSpec:
        spec = self._base[name]
        return self._new.get(id(spec), spec)

    def __iter__(self) -> Iterator[str]:
        return iter(self._base)

    def __len__(self) -> int:
        return len(self._base)

    def __contains__(self, name: object) -> bool:
        return name in self._base

    def keys(self) -> KeysView[str]:
        return self._base.keys()

    def values(self) -> ValuesView[KVCacheSpec]:
        return _Values(self)

    def items(self) -> ItemsView[str, KVCacheSpec]:
        return _Items(self)

    def copy_given(self) -> dict[str, KVCacheSpec]:
        """A new ``dict`` of the table given, before replacement (a copy without hashing)."""
        return dict(self._base)

    def replaced(self, spec: KVCacheSpec) -> KVCacheSpec:
        """What ``spec`` of the table given reads as here (itself when it is not replaced)."""
        return self._new.get(id(spec), spec)

    def over(self, given: Mapping[str, KVCacheSpec]) -> ReplacedSpecs:
        """The same replacements over ``given``, a part of the table given (not copied)."""
        return ReplacedSpecs(given, self._new)

    def iter_values(self) -> Iterator[KVCacheSpec]:
        """The specs in layer order (looked up by identity at C speed once, then kept)."""
        if self._values is None:
            given = list(self._base.values())
            self._values = list(map(self._new.get, map(id, given), given))
        return iter(self._values)

    def distinct(self) -> list[KVCacheSpec]:
        """One of each spec object, in the order of each one's first layer (found once, then
        kept: the table does not change); what :func:`~kvrules.specs.base.distinct_specs` of
        its values gives."""
        if self._distinct is None:
            self._distinct = distinct_specs(map(self.replaced, distinct_specs(self._base.values())))
        return self._distinct

    def __reduce__(self) -> tuple[type[dict[str, KVCacheSpec]], tuple[Any, ...]]:
        return (dict, (as_dict(self),))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({as_dict(self)!r})"


class _Values(ValuesView[KVCacheSpec], KnownDistinct):
    _mapping: ReplacedSpecs

    def __iter__(self) -> Iterator[KVCacheSpec]:
        return self._mapping.iter_values()

    def known_distinct(self) -> list[KVCacheSpec]:
        return self._mapping.distinct()


class _Items(ItemsView[str, KVCacheSpec]):
    _mapping: ReplacedSpecs

    def __iter__(self) -> Iterator[tuple[str, KVCacheSpec]]:
        return zip(self._mapping.keys(), self._mapping.iter_values(), strict=True)


def as_dict(specs: Mapping[str, KVCacheSpec]) -> dict[str, KVCacheSpec]:
    """A new ``dict`` of ``specs``, made without a Python call per layer."""
    if type(specs) is dict:
        return specs.copy()
    return dict(zip(specs.keys(), specs.values(), strict=True))


__all__ = ["ReplacedSpecs", "as_dict"]
