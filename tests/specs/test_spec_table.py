"""The plan's spec table is a plain ``dict`` (issue 24: ``ReplacedSpecs`` went), copied from
the caller's table with :func:`~kvrules.specs.table.as_dict`."""

from __future__ import annotations

import pickle
from types import MappingProxyType

from kvrules import EngineConfig, FullAttentionSpec, MambaSpec, Planner
from kvrules.specs.table import as_dict

A = FullAttentionSpec(16, num_kv_heads=2, head_size=64, dtype="bfloat16")
B = FullAttentionSpec(16, num_kv_heads=4, head_size=64, dtype="bfloat16")
C = FullAttentionSpec(32, num_kv_heads=4, head_size=64, dtype="bfloat16")
SPECS = (A, B, C)


def test_a_unified_plan_has_a_dict_of_the_unified_specs() -> None:
    """A hybrid model whose Mamba layers are padded: the plan's specs are the unified ones, the
    caller's table is neither changed nor held, and the plan pickles."""
    mamba = MambaSpec(16, [[7, 64], [2, 8, 8]], ["bfloat16", "bfloat16"])  # a page below A's
    given = {f"m.{i}": (mamba if i % 4 else A) for i in range(40)}
    before = dict(given)
    plan = Planner("vllm").plan(given, 1 << 30, EngineConfig(max_model_len=4096))
    assert given == before
    assert type(plan.specs) is dict
    pages = {spec.page_size_bytes for spec in plan.specs.values()}
    assert len(pages) == 1  # every layer at the one page
    assert all(plan.specs[name] is not mamba for name in given)  # padded Mamba specs
    assert plan.specs["m.0"] is A
    given["m.1"] = A  # the caller changes its table afterwards: the plan does not see it
    assert plan.specs["m.1"] is not A
    again = pickle.loads(pickle.dumps(plan))
    assert type(again.specs) is dict and again == plan


def test_as_dict_copies_any_mapping() -> None:
    given = {"a": A, "b": B}
    for table in (given, MappingProxyType(given)):
        copied = as_dict(table)
        assert type(copied) is dict and copied == given and copied is not given
