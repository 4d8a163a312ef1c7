"""The scenarios of both seed reports (vLLM #43626 / #45207 / #45181 / #48256), each as its own test."""

from __future__ import annotations

import pytest

from kvrules import (
    EngineConfig,
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    Planner,
    SlidingWindowMLASpec,
    SlidingWindowSpec,
    UnificationError,
)

VLLM = Planner("vllm")


def hybrid(mamba: MambaSpec) -> dict[str, object]:
    """Mamba + target full attention (H=2) + a draft (H=4) whose page is twice the target's."""
    return {
        "model.layers.0.linear_attn": mamba,
        "model.layers.1.linear_attn": mamba,
        "model.layers.2.self_attn": FullAttentionSpec(16, num_kv_heads=2, head_size=128, dtype="bfloat16"),
        "drafter.model.layers.0.self_attn": FullAttentionSpec(
            16, num_kv_heads=4, head_size=128, dtype="bfloat16"
        ),
    }


def test_mamba_padded_while_draft_page_is_twice() -> None:
    """#43626: the Mamba page equals the target attention page and the draft page is 2x."""
    mamba = MambaSpec(16, [[3, 768], [4, 32, 32]], ["bfloat16", "bfloat16"], page_size_padded=16_384)
    specs = hybrid(mamba)
    result = VLLM.unify(specs)  # type: ignore[arg-type]
    out = result.specs
    assert out["model.layers.0.linear_attn"].block_size == 16  # Mamba block size unchanged
    assert out["model.layers.0.linear_attn"].page_size_bytes == 32_768
    assert out["model.layers.0.linear_attn"].page_size_padded == 32_768  # type: ignore[attr-defined]
    assert out["model.layers.2.self_attn"].block_size == 32  # attention block size doubled
    assert out["drafter.model.layers.0.self_attn"] is specs["drafter.model.layers.0.self_attn"]
    rules = {(d.layer, d.rule, d.outcome) for d in result.decisions}
    assert ("model.layers.0.linear_attn", "mamba-pad", "applied") in rules
    assert ("model.layers.2.self_attn", "mamba-pad", "declined") in rules
    assert ("model.layers.2.self_attn", "block-scale", "applied") in rules


def test_already_padded_mamba_page_is_repadded() -> None:
    mamba = MambaSpec(16, [[3, 768], [4, 32, 32]], ["bfloat16", "bfloat16"], page_size_padded=16_384)
    out = VLLM.unify(hybrid(mamba)).specs  # type: ignore[arg-type]
    new = out["model.layers.1.linear_attn"]
    assert isinstance(new, MambaSpec)
    assert (new.real_page_size_bytes, new.page_size_padded) == (12_800, 32_768)


def test_non_dividing_mamba_page_is_still_padded() -> None:
    mamba = MambaSpec(16, [[3, 768], [4, 32, 32]], ["bfloat16", "bfloat16"])  # 12,800 bytes
    assert 32_768 % mamba.page_size_bytes != 0
    out = VLLM.unify(hybrid(mamba)).specs  # type: ignore[arg-type]
    assert out["model.layers.0.linear_attn"].page_size_bytes == 32_768
    assert out["model.layers.0.linear_attn"].block_size == 16


def attention_pair(flag: bool) -> dict[str, object]:
    return {
        "full": FullAttentionSpec(
            16, num_kv_heads=3, head_size=128, dtype="bfloat16", indexes_kv_by_block_stride=flag
        ),
        "swa": SlidingWindowSpec(16, num_kv_heads=4, head_size=128, dtype="bfloat16", sliding_window=512),
    }


def test_non_dividing_attention_page_without_block_stride_raises() -> None:
    with pytest.raises(UnificationError) as info:
        VLLM.unify(attention_pair(False))  # type: ignore[arg-type]
    message = str(info.value)
    for needle in (
        "'full'",
        "full_attention",
        "24576",
        "32768",
        "mamba-pad",
        "block-scale",
        "stride-pad",
        "Hint",
    ):
        assert needle in message
    assert isinstance(info.value, NotImplementedError)


def test_non_dividing_attention_page_with_block_stride_is_padded() -> None:
    out = VLLM.unify(attention_pair(True)).specs  # type: ignore[arg-type]
    assert out["full"].page_size_bytes == 32_768
    assert out["full"].page_size_padded == 32_768  # type: ignore[attr-defined]
    assert out["full"].block_size == 16


def test_uniform_pages_returned_unchanged() -> None:
    specs = {
        "a": FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16"),
        "b": SlidingWindowSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16", sliding_window=64),
    }
    assert VLLM.unify(specs).specs is specs  # type: ignore[arg-type]


def mla_model(swa_head: int) -> dict[str, object]:
    specs: dict[str, object] = {}
    for i in range(4):
        specs[f"l{i}.attn"] = MLAAttentionSpec(64, num_kv_heads=1, head_size=576, dtype="bfloat16")
        specs[f"l{i}.swa"] = SlidingWindowMLASpec(
            64, num_kv_heads=1, head_size=swa_head, dtype="bfloat16", sliding_window=128
        )
    return specs


CFG = EngineConfig(max_model_len=4096)


def test_mla_and_swa_mla_with_uniform_page_not_packed() -> None:
    plan = VLLM.plan(mla_model(576), 1 << 30, CFG)  # type: ignore[arg-type]
    assert plan.route == "unified-page"
    assert any(d.rule == "deepseekv4-packing" and d.outcome == "declined" for d in plan.decisions)
    assert all(t.block_stride == 0 for t in plan.workers[0].tensors)


def test_mla_and_swa_mla_with_mixed_pages_packed_each_layer_once() -> None:
    specs = mla_model(512)
    plan = VLLM.plan(specs, 1 << 30, CFG)  # type: ignore[arg-type]
    assert plan.route == "deepseekv4-packing"
    placed = [n for g in plan.groups for n in g.layer_names]
    assert sorted(placed) == sorted(specs)
    in_tensors = [n for t in plan.workers[0].tensors for n in t.shared_by]
    assert sorted(in_tensors) == sorted(specs)
    assert all(t.block_stride == 4 * 73_728 for t in plan.workers[0].tensors)
