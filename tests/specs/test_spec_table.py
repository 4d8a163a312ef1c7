"""``ReplacedSpecs``: the table page unification returns without building a new table of every
layer. It reads like the dict it stands for, in every way a caller or a plugin can read it."""

from __future__ import annotations

import copy
import pickle
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvrules import EngineConfig, FullAttentionSpec, MambaSpec, Planner
from kvrules.specs.base import KVCacheSpec, distinct_specs
from kvrules.specs.table import ReplacedSpecs, as_dict

A = FullAttentionSpec(16, num_kv_heads=2, head_size=64, dtype="bfloat16")
B = FullAttentionSpec(16, num_kv_heads=4, head_size=64, dtype="bfloat16")
C = FullAttentionSpec(32, num_kv_heads=4, head_size=64, dtype="bfloat16")
SPECS = (A, B, C)


def expected(base: dict[str, KVCacheSpec], new: dict[int, KVCacheSpec]) -> dict[str, KVCacheSpec]:
    return {name: new.get(id(spec), spec) for name, spec in base.items()}


@given(
    st.lists(st.integers(0, 2), max_size=30),
    st.dictionaries(st.integers(0, 2), st.integers(0, 2), max_size=3),
)
def test_it_reads_as_the_dict_it_stands_for(kinds: list[int], swaps: dict[int, int]) -> None:
    base = {f"layer.{i}": SPECS[k] for i, k in enumerate(kinds)}
    new = {id(SPECS[a]): SPECS[b] for a, b in swaps.items()}
    table = ReplacedSpecs(dict(base), new)
    want = expected(base, new)
    assert dict(table) == want and table == want and want == table
    assert list(table) == list(want) and list(table.keys()) == list(want)
    assert list(table.values()) == list(want.values()) and list(table.items()) == list(want.items())
    assert len(table) == len(want) and len(table.values()) == len(want)
    assert all(table[name] is spec for name, spec in want.items())
    assert all(name in table for name in want) and "no.such.layer" not in table
    assert table.get("no.such.layer") is None
    assert as_dict(table) == want and type(as_dict(table)) is dict
    proxy = MappingProxyType(table)  # what plugins are given
    assert list(proxy.items()) == list(want.items()) and dict(proxy) == want
    for again in (pickle.loads(pickle.dumps(table)), copy.deepcopy(table)):
        assert type(again) is dict and again == want
    assert table.copy_given() == base and table.copy_given() is not table.copy_given()
    assert all(table.replaced(spec) is want[name] for name, spec in base.items())
    half = dict(list(base.items())[::2])
    assert dict(table.over(half)) == expected(half, new)
    assert repr(table).startswith("ReplacedSpecs({")
    # the distinct objects, found once and kept, are what a look at every value finds
    found = distinct_specs(list(want.values()))
    assert distinct_specs(table.values()) == found and distinct_specs(proxy.values()) == found
    assert all(a is b for a, b in zip(table.distinct(), found, strict=True))
    assert table.distinct() is table.distinct()


def test_a_missing_layer_raises_key_error() -> None:
    table = ReplacedSpecs({"a": A}, {id(A): B})
    assert table["a"] is B
    with pytest.raises(KeyError):
        table["b"]


def test_a_unified_plan_reads_its_specs_through_the_replacements() -> None:
    """A hybrid model whose Mamba layers are padded: the plan's specs are the unified ones, the
    caller's table is neither changed nor held, and the plan pickles with a plain dict."""
    mamba = MambaSpec(16, [[7, 64], [2, 8, 8]], ["bfloat16", "bfloat16"])  # a page below A's
    given = {f"m.{i}": (mamba if i % 4 else A) for i in range(40)}
    before = dict(given)
    plan = Planner("vllm").plan(given, 1 << 30, EngineConfig(max_model_len=4096))
    assert given == before
    assert type(plan.specs) is ReplacedSpecs
    pages = {spec.page_size_bytes for spec in plan.specs.values()}
    assert len(pages) == 1  # every layer at the one page
    assert all(plan.specs[name] is not mamba for name in given)  # padded Mamba specs
    assert plan.specs["m.0"] is A
    given["m.1"] = A  # the caller changes its table afterwards: the plan does not see it
    assert plan.specs["m.1"] is not A
    again = pickle.loads(pickle.dumps(plan))
    assert type(again.specs) is dict and again == plan
