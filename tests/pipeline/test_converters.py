"""The vLLM 0.28 conversions: hybrid manager disabled, and the full-allocation fallback."""

from __future__ import annotations

import pytest

from kvrules import (
    EngineConfig,
    FullAttentionSpec,
    GroupingError,
    MambaSpec,
    MLAAttentionSpec,
    Planner,
    SlidingWindowSpec,
)

VLLM = Planner("vllm")
ATTN = {"num_kv_heads": 2, "head_size": 64, "dtype": "float32"}


def test_hybrid_disabled_promotes_local_layers_to_the_full_attention_block_size() -> None:
    specs = {
        "full": FullAttentionSpec(64, **ATTN),  # type: ignore[arg-type]
        "swa": SlidingWindowSpec(16, sliding_window=1024, page_size_padded=16384 + 1024, **ATTN),  # type: ignore[arg-type]
    }
    config = EngineConfig(max_model_len=4096, disable_hybrid_kv_cache_manager=True)
    plan = VLLM.plan(specs, 1 << 28, config)
    swa = plan.specs["swa"]
    assert isinstance(swa, FullAttentionSpec) and swa.sliding_window == 1024
    assert swa.block_size == 64 and swa.page_size_padded == (16384 + 1024) * 4
    assert plan.route == "uniform-type" and len(plan.groups) == 1
    assert any(d.rule == "hybrid-disabled" and d.outcome == "applied" for d in plan.decisions)


def test_hybrid_disabled_fails_clearly_for_mamba_hybrids() -> None:
    specs = {
        "m": MambaSpec(16, [[4, 2048]], ["bfloat16"]),
        "a": FullAttentionSpec(16, num_kv_heads=2, head_size=128, dtype="bfloat16"),
    }
    config = EngineConfig(max_model_len=4096, disable_hybrid_kv_cache_manager=True)
    with pytest.raises(GroupingError, match=r"cannot be converted to one spec type .*mamba"):
        VLLM.plan(specs, 1 << 30, config)


def test_full_allocation_fallback_for_mla_beside_sliding_window() -> None:
    specs = {
        "mla": MLAAttentionSpec(64, num_kv_heads=1, head_size=576, dtype="bfloat16"),
        "draft.swa": SlidingWindowSpec(
            16, num_kv_heads=5, head_size=128, dtype="bfloat16", sliding_window=128
        ),
    }
    plan = VLLM.plan(specs, 1 << 30, EngineConfig(max_model_len=4096))
    assert plan.route == "full-allocation-fallback"
    assert isinstance(plan.specs["draft.swa"], FullAttentionSpec)
    assert plan.specs["draft.swa"].block_size == 64
    assert [len(g.layer_names) for g in plan.groups] == [2]
    unify = [d for d in plan.decisions if d.stage == "unify" and d.outcome in ("declined", "failed")]
    assert unify, "the failed unification stays in the decision log"
