"""Regenerate the "beyond vLLM" public-case examples in kvrules/examples/ (docs/beyond-vllm.md).

Layer counts come from the threads cited in each description (reference/anchors.md, user asks
8-15); head geometry from the models' configs where known, otherwise marked illustrative.
Block sizes are what vLLM 0.28 hands the planner (16, or the hybrid-aligned size).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "kvrules" / "examples"


def attention(kind: str, block: int, heads: int, head: int, **extra: Any) -> dict[str, Any]:
    """One attention layer in model-file form (bf16 unless ``extra`` says otherwise)."""
    return {
        "type": kind,
        "block_size": block,
        "num_kv_heads": heads,
        "head_size": head,
        "dtype": "bfloat16",
        **extra,
    }


def gpt_oss_120b_eagle3() -> dict[str, Any]:
    """gpt-oss-120b (18 sliding-window 128 + 18 full, 8 KV heads x 64) + a 1-layer EAGLE-3 draft."""
    layers: dict[str, Any] = {}
    for i in range(36):
        if i % 2 == 0:
            layers[f"model.layers.{i}.self_attn.attn"] = attention(
                "sliding_window", 16, 8, 64, sliding_window=128
            )
        else:
            layers[f"model.layers.{i}.self_attn.attn"] = attention("full_attention", 16, 8, 64)
    layers["draft.model.layers.0.self_attn.attn"] = attention("full_attention", 16, 8, 64)
    return {
        "description": "vLLM PR #29303: gpt-oss-120b (18 sliding-window + 18 full attention, bf16, TP1) with a "
        "1-layer EAGLE-3 draft of the target's full-attention geometry; before #29303: 17 padding layers.",
        "layers": layers,
        "engine": {"max_model_len": 131072, "max_num_batched_tokens": 8192},
        "available_memory": ["40GiB"],
    }


def swa30_full20() -> dict[str, Any]:
    """50 layers, pattern full, sliding, full, sliding, sliding: 20 full + 30 sliding-window."""
    layers: dict[str, Any] = {}
    for i in range(50):
        if i % 5 in (0, 2):
            layers[f"model.layers.{i}.self_attn.attn"] = attention("full_attention", 16, 8, 128)
        else:
            layers[f"model.layers.{i}.self_attn.attn"] = attention(
                "sliding_window", 16, 8, 128, sliding_window=4096
            )
    return {
        "description": "vLLM #54106: 20 full + 30 sliding-window (4096) attention layers, bf16, 8 KV heads x 128 "
        "(illustrative geometry); the smallest-bucket rule pads the sliding-window groups.",
        "layers": layers,
        "engine": {"max_model_len": 131072, "max_num_batched_tokens": 8192},
        "available_memory": ["40GiB"],
    }


def mimo_v2_flash_mtp() -> dict[str, Any]:
    """MiMo-V2-Flash per TP2 rank: 9 global + 39 sliding-window (128) layers + 5 sliding-window draft layers."""
    layers: dict[str, Any] = {}
    for i in range(48):
        if i == 0 or i % 6 == 5:
            layers[f"model.layers.{i}.self_attn.attn"] = attention(
                "full_attention", 16, 2, 192, head_size_v=128
            )
        else:
            layers[f"model.layers.{i}.self_attn.attn"] = attention(
                "sliding_window", 16, 4, 192, head_size_v=128, sliding_window=128
            )
    for i in range(5):
        layers[f"draft.model.layers.{i}.self_attn.attn"] = attention(
            "sliding_window", 16, 2, 192, head_size_v=128, sliding_window=128
        )
    return {
        "description": "vLLM PR #58175: MiMo-V2-Flash per TP2 rank (9 global attention with 2 KV heads, 39 "
        "sliding-window 128 with 4 KV heads, head 192/128, bf16) + 5 sliding-window MTP draft layers "
        "(draft geometry illustrative); vLLM's width 5 pads the global layers to 10.",
        "layers": layers,
        "engine": {"max_model_len": 262144, "max_num_batched_tokens": 8192},
        "available_memory": ["40GiB"],
    }


def qwen36_dflash() -> dict[str, Any]:
    """Qwen3.6-35B-A3B (30 GDN + 10 full) + a DFlash draft (5 sliding-window + 1 full), block 1056."""
    k = 0
    block = 1056  # 16 * cdiv(GDN page 2,146,304, 16 * 2048): hybrid alignment, bf16 KV, fp32 SSM state
    mamba_page = block * 2048
    layers: dict[str, Any] = {}
    for i in range(40):
        if (i + 1) % 4 == 0:
            layers[f"model.layers.{i}.self_attn.attn"] = attention("full_attention", block, 2, 256)
        else:
            layers[f"model.layers.{i}.linear_attn"] = {
                "type": "mamba",
                "block_size": block,
                "shapes": [[3 + k, 8192], [32, 128, 128]],
                "dtypes": ["bfloat16", "float32"],
                "page_size_padded": mamba_page,
                "mamba_type": "gdn_attention",
                "mamba_cache_mode": "align",
                "num_speculative_blocks": k,
            }
    for i in range(5):
        layers[f"draft.model.layers.{i}.self_attn.attn"] = attention(
            "sliding_window", block, 4, 128, sliding_window=4096
        )
    layers["draft.model.layers.5.self_attn.attn"] = attention("full_attention", block, 4, 128)
    return {
        "description": "vLLM PR #51742: Qwen3.6-35B-A3B (30 gated-delta-net + 10 full attention, bf16 KV, fp32 SSM "
        "state, TP1) + a DFlash draft of 5 sliding-window + 1 full-attention layers (draft geometry "
        "illustrative); the lone draft full-attention layer makes vLLM's group size 1: 46 groups.",
        "layers": layers,
        "engine": {"max_model_len": 32768, "max_num_batched_tokens": 8192},
        "available_memory": ["40GiB"],
    }


def gpt_oss_20b_draft8() -> dict[str, Any]:
    """gpt-oss-20b (12 sliding-window 128 + 12 full) + an 8-layer draft of the target's full geometry."""
    layers: dict[str, Any] = {}
    for i in range(24):
        if i % 2 == 0:
            layers[f"model.layers.{i}.self_attn.attn"] = attention(
                "sliding_window", 16, 8, 64, sliding_window=128
            )
        else:
            layers[f"model.layers.{i}.self_attn.attn"] = attention("full_attention", 16, 8, 64)
    for i in range(8):
        layers[f"draft.model.layers.{i}.self_attn.attn"] = attention("full_attention", 16, 8, 64)
    return {
        "description": "vLLM PR #35062: gpt-oss-20b (12 sliding-window + 12 full attention, bf16, TP1) with an "
        "8-layer draft of the target's full-attention geometry (draft size illustrative); 20 full-attention "
        "layers pass 1.5x the 12 sliding ones, so vLLM interleaves the draft layers over two groups.",
        "layers": layers,
        "engine": {"max_model_len": 131072, "max_num_batched_tokens": 8192},
        "available_memory": ["24GiB"],
    }


EXAMPLES = {
    "gpt-oss-120b-eagle3": gpt_oss_120b_eagle3,
    "swa30-full20": swa30_full20,
    "mimo-v2-flash-mtp": mimo_v2_flash_mtp,
    "qwen3.6-35b-a3b-dflash": qwen36_dflash,
    "gpt-oss-20b-draft8": gpt_oss_20b_draft8,
}


def main() -> None:
    for name, build in EXAMPLES.items():
        path = OUT / f"{name}.json"
        path.write_text(json.dumps(build(), indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
