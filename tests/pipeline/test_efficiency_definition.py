"""Efficiency has one definition everywhere: real state over allocated bytes; quantisation scales
are not state (``KVCacheSpec.real_page_size_bytes``), though a request's pages need them."""

from __future__ import annotations

from kvrules import EngineConfig, FullAttentionSpec, KVQuantMode, Planner
from kvrules.report.summary import efficiency, render_summary

# int4 per-token-head, 8 KV heads of 128, block 16: state 16 x 8 x (64 + 64) x 1 B = 16,384 B a page;
# the scales one fp32 per token and head for K and for V: 16 x 8 x 2 x 4 B = 1,024 B more
INT4 = FullAttentionSpec(
    16, num_kv_heads=8, head_size=128, dtype="uint8", kv_quant_mode=KVQuantMode.INT4_PER_TOKEN_HEAD
)


def test_scales_are_not_counted_as_state() -> None:
    plan = Planner("vllm-0.33").plan({"l0": INT4, "l1": INT4}, 1 << 30, EngineConfig(max_model_len=4096))
    waste = plan.waste
    assert waste is not None
    blocks = 4096 // 16
    assert waste.real_bytes == 2 * blocks * 17408  # the pages hold state and scales
    assert waste.scale_bytes == 2 * blocks * 1024
    assert waste.efficiency == 16384 / 17408  # 94.1 %, not 100 %
    assert efficiency(plan) == waste.efficiency
    assert "efficiency 94.1%" in render_summary(plan)
    assert plan.to_dict()["waste"]["efficiency"] == waste.efficiency


def test_unquantised_pages_are_all_state() -> None:
    spec = FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16")
    plan = Planner("vllm-0.33").plan({"l0": spec}, 1 << 30, EngineConfig(max_model_len=4096))
    assert plan.waste is not None and plan.waste.scale_bytes == 0 and plan.waste.efficiency == 1.0
