"""Page unification has two paths, chosen by how many distinct spec objects a model has: one
asks the rules and copies decisions layer by layer, the other asks at each distinct spec's
first layer and makes every other layer's records at once. Both give the same plan, decision
log included, for every input: shipped examples, shared cases, spec objects that are equal
but distinct, a failing unification that falls back, and random models."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from case_loader import case_names, load_case
from hypothesis import given, settings
from hypothesis import strategies as st

from kvrules import (
    EngineConfig,
    FullAttentionSpec,
    KVRulesError,
    MambaSpec,
    Planner,
    SlidingWindowSpec,
    UnificationError,
)
from kvrules.examples import example_names, load_example
from kvrules.pipeline import unify

GiB = 1 << 30
PLANNERS = {name: Planner(name) for name in ("vllm", "default")}


def both_paths(monkeypatch: pytest.MonkeyPatch, run: Any) -> tuple[Any, Any]:
    """``run()`` on the grouped path, then on the layer-by-layer path (every model "has many
    spec objects"); an exception counts as the result."""

    def outcome() -> Any:
        try:
            return run()
        except KVRulesError as error:  # a refusal must be the same refusal on both paths
            return ("raised", type(error).__name__, str(error))

    grouped = outcome()
    with monkeypatch.context() as m:
        m.setattr(unify, "_FEW_SPECS", -1)
        by_layer = outcome()
    return grouped, by_layer


def same(a: Any, b: Any) -> None:
    if isinstance(a, tuple):
        assert a == b
        return
    assert a.decisions == b.decisions
    assert [d.layer for d in a.decisions] == [d.layer for d in b.decisions]
    assert dict(a.specs) == dict(b.specs) and list(a.specs) == list(b.specs)
    assert a.groups == b.groups and a.num_blocks == b.num_blocks


@pytest.mark.parametrize("name", example_names())
@pytest.mark.parametrize("strategies", ["vllm", "default"])
def test_every_example_plans_the_same_on_both_paths(
    monkeypatch: pytest.MonkeyPatch, name: str, strategies: str
) -> None:
    model = load_example(name)
    grouped, by_layer = both_paths(
        monkeypatch,
        lambda: PLANNERS[strategies].plan(
            model.worker_specs(), model.available_memory or [GiB], EngineConfig(**model.engine)
        ),
    )
    same(grouped, by_layer)


@pytest.mark.parametrize("name", case_names())
@pytest.mark.parametrize("strategies", ["vllm", "default"])
def test_every_shared_case_plans_the_same_on_both_paths(
    monkeypatch: pytest.MonkeyPatch, name: str, strategies: str
) -> None:
    case = load_case(name)
    grouped, by_layer = both_paths(
        monkeypatch, lambda: PLANNERS[strategies].plan(case.workers, case.memory, case.config)
    )
    same(grouped, by_layer)


MAMBA = MambaSpec(16, [[3, 768], [4, 32, 32]], ["bfloat16", "bfloat16"])
FULL = FullAttentionSpec(16, num_kv_heads=2, head_size=128, dtype="bfloat16")
DRAFT = FullAttentionSpec(16, num_kv_heads=4, head_size=128, dtype="bfloat16")
WINDOW = SlidingWindowSpec(16, num_kv_heads=2, head_size=128, dtype="bfloat16", sliding_window=512)


def test_equal_specs_in_distinct_objects_share_one_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    twin = dataclasses.replace(MAMBA)
    assert twin == MAMBA and twin is not MAMBA
    specs = {f"l.{i}": [FULL, MAMBA, twin, DRAFT][i % 4] for i in range(40)}
    grouped, by_layer = both_paths(
        monkeypatch, lambda: PLANNERS["vllm"].plan(specs, GiB, EngineConfig(max_model_len=4096))
    )
    same(grouped, by_layer)
    asked = [d for d in grouped.decisions if d.stage == "unify" and d.layer in ("l.1", "l.2")]
    assert [d.layer for d in asked] == ["l.1", "l.2"]  # the twin's first layer gets a copy


def test_a_failing_unification_leaves_the_same_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no layer strategy for the Mamba layers the unifying route fails: the records up to
    the failing layer are the same on both paths (and so is the fallback plan)."""
    narrow = SlidingWindowSpec(16, num_kv_heads=1, head_size=128, dtype="bfloat16", sliding_window=512)
    specs = {f"l.{i}": [FULL, narrow, MAMBA, narrow][min(i // 5, 3)] for i in range(20)}
    planner = Planner(
        ["unified-page", "block-scale", "uniform-type", "shared-pool", "per-layer", "vllm-group-size"]
    )

    def run() -> Any:
        ctx, ask = planner.context(EngineConfig(max_model_len=4096), [specs], [GiB])
        try:
            unify.unify_pages(specs, ctx, ask)
        except UnificationError as error:
            return ("raised", str(error), ctx.decisions.items)
        return ("planned", ctx.decisions.items)

    grouped, by_layer = both_paths(monkeypatch, run)
    assert grouped[0] == "raised"
    assert grouped == by_layer
    records = grouped[2]
    assert [d.layer for d in records if d.rule == "block-scale" and d.outcome == "applied"] == [
        f"l.{i}" for i in range(5, 10)
    ]
    assert records[-1].layer == "l.10" and records[-1].outcome == "failed"


KINDS = [FULL, MAMBA, DRAFT, WINDOW, dataclasses.replace(FULL)]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(range(len(KINDS))), min_size=1, max_size=40),
    st.sampled_from(["vllm", "default"]),
)
def test_random_models_plan_the_same_on_both_paths(kinds: list[int], strategies: str) -> None:
    specs = {f"{'draft.' if k == 2 else ''}l.{i}": KINDS[k] for i, k in enumerate(kinds)}
    config = EngineConfig(max_model_len=2048, draft_layer_prefixes=("draft.",))
    results = []
    for few in (64, -1):
        saved = unify._FEW_SPECS
        unify._FEW_SPECS = few
        try:
            results.append(PLANNERS[strategies].plan(specs, 8 * GiB, config))
        except Exception as error:
            results.append(("raised", type(error).__name__, str(error)))
        finally:
            unify._FEW_SPECS = saved
    same(*results)


def test_the_grouped_path_is_taken_for_a_model_sharing_spec_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    original = unify._unified_layer_by_layer
    monkeypatch.setattr(unify, "_unified_layer_by_layer", lambda *a: calls.append("layer") or original(*a))
    specs = {f"l.{i}": [FULL, MAMBA][i % 2] for i in range(100)}
    PLANNERS["vllm"].plan(specs, GiB, EngineConfig(max_model_len=4096))
    assert calls == []


@pytest.mark.parametrize("name", ["vllm", "default"])
def test_a_plan_never_holds_the_callers_table(name: str) -> None:
    """The plan's specs are a table of its own, whether unification made a new one (which the
    plan then keeps without copying it) or left the caller's as it was."""
    full = FullAttentionSpec(16, num_kv_heads=2, head_size=64, dtype="bfloat16")
    wide = FullAttentionSpec(16, num_kv_heads=4, head_size=64, dtype="bfloat16")
    uniform = {f"l.{i}": full for i in range(4)}
    mixed = {f"l.{i}": [full, wide][i % 2] for i in range(4)}
    for specs in (uniform, mixed):
        before = dict(specs)
        plan = PLANNERS[name].plan(specs, GiB, EngineConfig(max_model_len=4096))
        assert plan.specs is not specs and specs == before
        assert set(plan.specs) == set(specs)
