"""HiddenStateCacheSpec: spec type, unified-page handling (vLLM 0.28 #39949), vLLM conversion."""

from __future__ import annotations

import pytest
import vllm_standins as vs

import kvrules
from kvrules import (
    EngineConfig,
    FullAttentionSpec,
    GroupingError,
    HiddenStateCacheSpec,
    MambaSpec,
    MLAAttentionSpec,
    Planner,
    SlidingWindowSpec,
    UnificationError,
    spec_from_dict,
)
from kvrules.integrations import vllm as kv_vllm
from kvrules.integrations.vllm_specs import VllmClasses
from kvrules.specs import BUILTIN_SPEC_TYPES

CONFIG = EngineConfig(max_model_len=4096)
GIB = 1 << 30


def hidden(block_size: int = 544, heads: int = 3, size: int = 1024) -> HiddenStateCacheSpec:
    return HiddenStateCacheSpec(block_size, num_kv_heads=heads, head_size=size, dtype="bfloat16")


def vllm_test_specs() -> dict[str, kvrules.KVCacheSpec]:
    """The layers of vLLM's test_hidden_state_group_preserves_hybrid_prefix_cache_granularity."""
    return {
        # 544 tokens x 1 head x (512 K + 512 V) x 2 bytes = 1,114,112 bytes
        "model.full_attn": FullAttentionSpec(544, num_kv_heads=1, head_size=512, dtype="bfloat16"),
        # 557,056 bf16 values = 1,114,112 bytes
        "model.mamba": MambaSpec(544, shapes=((557056,),), dtypes=("bfloat16",), mamba_cache_mode="align"),
        # 544 x 3 x 1024 x 2 = 3,342,336 bytes before alignment
        "cache_only_layers.0": hidden(),
    }


def test_spec_type_is_a_registered_mla_subclass() -> None:
    spec = hidden()
    assert isinstance(spec, MLAAttentionSpec)
    assert HiddenStateCacheSpec in BUILTIN_SPEC_TYPES
    assert kvrules.HiddenStateCacheSpec is kvrules.specs.HiddenStateCacheSpec
    assert spec.page_size_bytes == 544 * 3 * 1024 * 2 == 3_342_336
    assert spec.token_bytes == 3 * 1024 * 2
    data = spec.to_dict()
    assert data["type"] == "hidden_state_cache"
    assert spec_from_dict(data) == spec


def test_aligned_to_picks_largest_divisor_of_group_block_size() -> None:
    # 1,114,112 // 6,144 = 181 tokens fit; divisors of 544 = 2^5 x 17 up to 181: 136 is largest
    aligned = hidden().aligned_to(1_114_112, 544)
    assert aligned.block_size == 136
    assert aligned.page_size_bytes == 1_114_112
    assert aligned.real_page_size_bytes == 136 * 6_144 == 835_584
    assert aligned.padding_bytes == 278_528


def test_aligned_to_rejects_a_token_larger_than_the_page() -> None:
    with pytest.raises(kvrules.SpecError, match="6144 bytes, more than the common page of 4096"):
        hidden().aligned_to(4096, 16)


def test_vllm_case_gets_its_own_group_with_block_136() -> None:
    plan = Planner("vllm").plan(vllm_test_specs(), GIB, CONFIG)
    assert plan.route == "unified-page"
    assert [g.layer_names for g in plan.groups] == [
        ("model.full_attn",),
        ("model.mamba",),
        ("cache_only_layers.0",),
    ]
    last = plan.groups[-1].spec
    assert isinstance(last, HiddenStateCacheSpec)
    assert (last.block_size, last.page_size_bytes, last.page_size_padded) == (136, 1_114_112, 1_114_112)
    assert plan.specs["cache_only_layers.0"] == last
    assert [g.spec.block_size for g in plan.groups] == [544, 544, 136]
    decision = next(
        d for d in plan.decisions if d.layer == "cache_only_layers.0" and d.rule == "unified-page"
    )
    assert decision.padding_bytes == 278_528
    assert "block size 544 -> 136" in decision.reason


def test_hidden_state_layer_takes_no_part_in_page_unification() -> None:
    # 3,342,336 would otherwise be the largest page and every other layer would be padded to it
    plan = Planner("vllm").plan(vllm_test_specs(), GIB, CONFIG)
    assert plan.specs["model.full_attn"].page_size_bytes == 1_114_112
    assert plan.specs["model.mamba"].page_size_bytes == 1_114_112


def test_block_size_follows_gcd_of_group_block_sizes() -> None:
    specs: dict[str, kvrules.KVCacheSpec] = {
        # 32 x 1 x (64 + 64) x 2 = 8192 bytes
        "full": FullAttentionSpec(32, num_kv_heads=1, head_size=64, dtype="bfloat16"),
        # 16 x 1 x (128 + 128) x 2 = 8192 bytes
        "swa": SlidingWindowSpec(16, num_kv_heads=1, head_size=128, dtype="bfloat16", sliding_window=64),
        # 800 bytes a token: 8192 // 800 = 10 fit; gcd(32, 16) = 16; largest divisor <= 10 is 8
        "hidden": hidden(block_size=16, heads=1, size=400),
    }
    plan = Planner("vllm").plan(specs, GIB, CONFIG)
    spec = plan.groups[-1].spec
    assert plan.groups[-1].layer_names == ("hidden",)
    assert (spec.block_size, spec.page_size_bytes, spec.real_page_size_bytes) == (8, 8192, 6400)


def test_uniform_type_models_keep_the_hidden_state_layer_unchanged() -> None:
    # vLLM routes full attention + hidden state of one block size through uniform-type
    specs = {
        "full": FullAttentionSpec(16, num_kv_heads=1, head_size=64, dtype="bfloat16"),
        "hidden": hidden(block_size=16),
    }
    plan = Planner("vllm").plan(specs, GIB, CONFIG)
    assert plan.route == "uniform-type"
    assert plan.specs["hidden"] == specs["hidden"]


def test_only_hidden_state_layers_of_two_block_sizes_is_a_grouping_error() -> None:
    specs = {"h0": hidden(block_size=16), "h1": hidden(block_size=32)}
    with pytest.raises(GroupingError, match="h0, h1 need the other groups"):
        Planner("vllm").plan(specs, GIB, CONFIG)


def test_full_allocation_fallback_declines_with_a_hidden_state_layer() -> None:
    # MLA + regular sliding window whose pages cannot be unified (576 x 2 vs 3 x 2 x 64 x 2 per token)
    specs: dict[str, kvrules.KVCacheSpec] = {
        "mla": MLAAttentionSpec(64, num_kv_heads=1, head_size=576, dtype="bfloat16"),
        "swa": SlidingWindowSpec(64, num_kv_heads=3, head_size=64, dtype="bfloat16", sliding_window=128),
    }
    without = Planner("vllm").plan(specs, GIB, CONFIG)
    assert without.route == "full-allocation-fallback"
    with pytest.raises(UnificationError, match="a hidden_state_cache layer is present"):
        Planner("vllm").plan({**specs, "hidden": hidden(block_size=64)}, GIB, CONFIG)


def test_round_trips_through_vllm_classes() -> None:
    classes = VllmClasses.from_namespace(vs.namespace(), version="stand-in 0.28")
    spec = hidden().aligned_to(1_114_112, 544)
    theirs = kv_vllm.to_vllm_spec(spec, layer="h", classes=classes)
    assert type(theirs).__name__ == "HiddenStateCacheSpec"
    assert theirs.page_size_bytes == spec.page_size_bytes
    assert kv_vllm.from_vllm_spec(theirs, layer="h") == spec
