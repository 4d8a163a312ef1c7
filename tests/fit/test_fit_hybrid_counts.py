"""Parameter counts of Zamba2, Kimi-Linear, LFM2-MoE and Qwen3.5 / Qwen3.5-MoE, tensor by tensor.

Every expected figure is worked out by hand in the comments from the config's numbers and the
tensor list of the model's code (transformers' ``modeling_zamba2.py``, ``modeling_lfm2_moe.py``,
``modeling_qwen3_5.py``, ``modeling_qwen3_5_moe.py``; Moonshot's ``modeling_kimi.py``); none comes
from kvrules' formulas. The stored Zamba2-2.7B and Kimi-Linear configs are trimmed
(``tests/data/hf/uncertain.json``): the fields they leave out take the config class's defaults,
which the derivations below use too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvrules.sizing.params import count_params

HF = Path(__file__).parent.parent / "data" / "hf"


def test_lfm2_moe() -> None:
    # H 64, 4 layers (conv, attention, conv, conv), 4 heads of 16, 2 KV heads, vocab 100 (tied),
    # layer 0 dense (96), 3 MoE layers of 4 experts of 32 with the expert bias; conv kernel 3.
    #   conv layer: in_proj 192*64 = 12,288; conv 64*3 = 192; out_proj 64*64 = 4,096 -> 16,576, x3
    #   attention: q 4,096; k, v 2 * 32*64 = 4,096; out_proj 4,096; q/k norms 32 -> 12,320
    #   dense MLP 3*96*64 = 18,432; MoE: router 4*64 = 256, bias 4, experts 4*3*32*64 = 24,576
    #   -> 24,836, x3 = 74,508; norms 4 * 2*64 = 512; embedding 100*64 = 6,400; final norm 64
    #   6,400 + 512 + 49,728 + 12,320 + 18,432 + 74,508 + 64 = 161,964
    config: dict[str, Any] = {
        "model_type": "lfm2_moe",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "layer_types": ["conv", "full_attention", "conv", "conv"],
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 100,
        "intermediate_size": 96,
        "moe_intermediate_size": 32,
        "num_experts": 4,
        "num_dense_layers": 1,
    }
    count = count_params(config)
    assert count.total == 161_964
    names = {w.name for w in count.table.weights}
    assert "model.layers.1.feed_forward.expert_bias" in names
    assert "model.layers.0.feed_forward.w1.weight" in names
