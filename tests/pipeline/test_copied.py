"""``kvrules.values.copied``: a new dict of any mapping's items in order, a read-only view
copied through its dict (rules and checkers are handed views, and ``dict(view)`` reads item by
item)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from types import MappingProxyType

import pytest

from kvrules.values import copied

ITEMS = {"b": 2, "a": 1, "c": 3}


class Plain(Mapping[str, int]):
    def __getitem__(self, key: str) -> int:
        return ITEMS[key]

    def __iter__(self) -> Iterator[str]:
        return iter(ITEMS)

    def __len__(self) -> int:
        return len(ITEMS)


@pytest.mark.parametrize(
    "mapping",
    [dict(ITEMS), MappingProxyType(dict(ITEMS)), MappingProxyType(OrderedDict(ITEMS)), Plain()],
    ids=["dict", "view", "view-of-ordereddict", "mapping"],
)
def test_a_copy_is_a_new_dict_in_order(mapping: Mapping[str, int]) -> None:
    made = copied(mapping)
    assert type(made) is dict and list(made.items()) == list(ITEMS.items())
    made["z"] = 9
    assert "z" not in mapping
