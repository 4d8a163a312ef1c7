"""vLLM #43626 from the configs: Qwen3-Coder-Next + a Qwen3-4B-class draft, fp8 KV, TP1, 4 speculative tokens.

vLLM crashed at engine start (a bare assert in page unification); kvrules must plan it, and the
decision log must show the Mamba page padded to the draft's page (formulas §6.1).
"""

from __future__ import annotations

from typing import Any

import pytest

from kvrules import EngineConfig, Planner
from kvrules.hf import HFOptions, model_from_hf
from kvrules.hf.examples import load_hf_example_info
from kvrules.specs import MambaSpec

GiB = 1 << 30


def plan_pair(tp: int = 1, k: int = 4, kv: str = "fp8", memory: int = 70 * GiB) -> Any:
    ex = load_hf_example_info("hf-qwen3-coder-next")
    options = HFOptions(kv_cache_dtype=kv, tensor_parallel_size=tp, num_speculative_tokens=k)
    model = model_from_hf(ex.config, ex.draft, options, strategies="vllm")
    config = EngineConfig(max_model_len=262144, max_num_batched_tokens=8192)
    return model, Planner("vllm").plan(model.specs, memory, config)


def test_the_pair_plans() -> None:
    model, plan = plan_pair()
    assert len(model.specs) == 48 + 36
    # hybrid alignment (target only): block 16 * (67 + 4) = 1136, attention page = GDN page
    assert model.specs["model.layers.0.linear_attn"].page_size_bytes == 1_163_264
    assert model.specs["draft.model.layers.0.self_attn.attn"].page_size_bytes == 2_326_528  # 2x
    # the plan: Mamba padded to the draft page, target attention block doubled, draft kept
    assert plan.specs["model.layers.0.linear_attn"].page_size_bytes == 2_326_528
    assert plan.specs["model.layers.0.linear_attn"].block_size == 1136
    assert plan.specs["model.layers.3.self_attn.attn"].block_size == 2272
    assert plan.specs["draft.model.layers.0.self_attn.attn"].block_size == 1136
    # buckets: 12 target full, 36 GDN, 36 draft full -> group size 12 -> 1 + 3 + 3 groups
    assert len(plan.groups) == 7
    assert {len(g.layer_names) for g in plan.groups} == {12}
    assert len(plan.workers[0].tensors) == 12
    assert all(len(t.shared_by) == 7 for t in plan.workers[0].tensors)
    assert plan.num_blocks > 0 and plan.max_concurrency > 1


def test_the_decision_log_shows_the_mamba_page_padded_to_the_draft_page() -> None:
    _, plan = plan_pair()
    padded = [d for d in plan.decisions if d.rule == "mamba-pad" and d.outcome == "applied"]
    assert len(padded) == 36
    first = padded[0]
    assert first.stage == "unify"
    assert first.layer == "model.layers.0.linear_attn"
    assert first.before["page_size_bytes"] == 1_163_264  # type: ignore[index]
    assert first.after["page_size_bytes"] == 2_326_528  # type: ignore[index]
    assert first.padding_bytes == 1_163_264
    target = next(d for d in plan.decisions if d.stage == "unify" and d.rule == "dispatcher")
    assert "draft.model.layers.0.self_attn.attn" in target.reason  # the draft sets the target page


@pytest.mark.parametrize(
    ("tp", "k", "kv", "block", "mamba_page", "draft_page"),
    [
        (1, 0, "fp8", 1072, 1_097_728, 2_195_456),
        (1, 7, "fp8", 1184, 1_212_416, 2_424_832),
        (2, 4, "fp8", 1136, 581_632, 1_163_264),
        (4, 4, "fp8", 576, 290_816, 294_912),  # target KV heads replicated: pages already equal
        (1, 4, "auto", 576, 1_163_264, 2_359_296),
    ],
)
def test_the_table_of_formulas_6_1(
    tp: int, k: int, kv: str, block: int, mamba_page: int, draft_page: int
) -> None:
    model, plan = plan_pair(tp=tp, k=k, kv=kv)
    mamba = model.specs["model.layers.0.linear_attn"]
    assert isinstance(mamba, MambaSpec)
    assert mamba.block_size == block
    assert mamba.real_page_size_bytes == mamba_page
    assert model.specs["draft.model.layers.0.self_attn.attn"].page_size_bytes == draft_page
    assert plan.specs["model.layers.0.linear_attn"].page_size_bytes == max(draft_page, mamba.page_size_bytes)
