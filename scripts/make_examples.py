"""Regenerate the built-in example model files in kvrules/examples/ (numbers: formulas.md §3-§6)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "kvrules" / "examples"


def issue_43626() -> dict[str, Any]:
    """Qwen3-Coder-Next-80B-A3B (fp8 KV, TP1, 4 speculative tokens) + a Qwen3-4B draft (vLLM #43626)."""
    k = 4
    block = 16 * (67 + k)  # hybrid alignment: attention page == GDN page (formulas §3.3)
    layers: dict[str, Any] = {}
    for i in range(48):
        if (i + 1) % 4 == 0:
            layers[f"model.layers.{i}.self_attn.attn"] = {
                "type": "full_attention",
                "block_size": block,
                "num_kv_heads": 2,
                "head_size": 256,
                "dtype": "uint8",
                "kv_quant_mode": "FP8_PER_TENSOR",
            }
        else:
            layers[f"model.layers.{i}.linear_attn"] = {
                "type": "mamba",
                "block_size": block,
                "shapes": [[3 + k, 8192], [32, 128, 128]],
                "dtypes": ["bfloat16", "bfloat16"],
                "mamba_type": "gdn_attention",
                "mamba_cache_mode": "align",
                "num_speculative_blocks": k,
            }
    for i in range(36):
        layers[f"draft.model.layers.{i}.self_attn.attn"] = {
            "type": "full_attention",
            "block_size": block,
            "num_kv_heads": 8,
            "head_size": 128,
            "dtype": "uint8",
            "kv_quant_mode": "FP8_PER_TENSOR",
        }
    return {
        "description": "vLLM issue #43626: Qwen3-Coder-Next-80B-A3B (12 full attention + 36 gated-delta-net "
        "layers, fp8 KV, TP1, 4 speculative tokens) with a dense Qwen3-4B-class draft whose page is 2x.",
        "layers": layers,
        "engine": {"max_model_len": 32768, "max_num_batched_tokens": 8192},
        "available_memory": ["40GiB"],
    }


def gemma3_27b() -> dict[str, Any]:
    """Gemma-3-27B: 52 sliding-window (1024) + 10 full attention layers, bf16, block 16."""
    layers = {}
    for i in range(62):
        spec: dict[str, Any] = {"block_size": 16, "num_kv_heads": 16, "head_size": 128, "dtype": "bfloat16"}
        if (i + 1) % 6 == 0:
            spec = {"type": "full_attention", **spec}
        else:
            spec = {"type": "sliding_window", **spec, "sliding_window": 1024}
        layers[f"language_model.model.layers.{i}.self_attn.attn"] = spec
    return {
        "description": "Gemma-3-27B: 5 sliding-window : 1 full attention, bf16 KV, TP1.",
        "layers": layers,
        "engine": {"max_model_len": 131072, "max_num_batched_tokens": 8192},
        "available_memory": ["20GiB"],
    }


def llama3_8b() -> dict[str, Any]:
    """Llama-3.1-8B: 32 identical full-attention layers."""
    layers = {
        f"model.layers.{i}.self_attn.attn": {
            "type": "full_attention",
            "block_size": 16,
            "num_kv_heads": 8,
            "head_size": 128,
            "dtype": "bfloat16",
        }
        for i in range(32)
    }
    return {
        "description": "Llama-3.1-8B: 32 full-attention layers, bf16 KV, TP1.",
        "layers": layers,
        "engine": {"max_model_len": 131072},
        "available_memory": ["16GiB"],
    }


def deepseek_v4_flash() -> dict[str, Any]:
    """DeepSeek-V4-Flash as vLLM decomposes it (formulas §5.3): SWA, C4 and C128 caches."""
    v4 = {"dtype": "uint8", "cache_dtype_str": "fp8_ds_mla", "alignment": 576, "model_version": "deepseek_v4"}
    ratios = [0, 0] + [4 if (i % 2 == 0) else 128 for i in range(2, 43)]
    layers: dict[str, Any] = {}
    for i, ratio in enumerate([*ratios, 1]):
        p = f"model.layers.{i}.self_attn"
        if ratio == 4:
            layers[f"{p}.attn"] = {
                "type": "mla",
                "block_size": 256,
                "num_kv_heads": 1,
                "head_size": 512,
                "compress_ratio": 4,
                **v4,
            }
            layers[f"{p}.indexer.k_cache"] = {
                "type": "mla",
                "block_size": 256,
                "num_kv_heads": 1,
                "head_size": 132,
                "dtype": "uint8",
                "compress_ratio": 4,
                "alignment": 576,
            }
            layers[f"{p}.compressor.state"] = {
                "type": "sliding_window_mla",
                "block_size": 4,
                "num_kv_heads": 1,
                "head_size": 2048,
                "dtype": "float32",
                "sliding_window": 8,
                "alignment": 576,
            }
            layers[f"{p}.indexer.compressor.state"] = {
                "type": "sliding_window_mla",
                "block_size": 4,
                "num_kv_heads": 1,
                "head_size": 512,
                "dtype": "float32",
                "sliding_window": 8,
                "alignment": 576,
            }
        elif ratio == 128:
            layers[f"{p}.attn"] = {
                "type": "mla",
                "block_size": 256,
                "num_kv_heads": 1,
                "head_size": 512,
                "compress_ratio": 128,
                **v4,
            }
            layers[f"{p}.compressor.state"] = {
                "type": "sliding_window_mla",
                "block_size": 8,
                "num_kv_heads": 1,
                "head_size": 1024,
                "dtype": "float32",
                "sliding_window": 128,
                "alignment": 576,
            }
        layers[f"{p}.swa_cache"] = {
            "type": "sliding_window_mla",
            "block_size": 64,
            "num_kv_heads": 1,
            "head_size": 512,
            "sliding_window": 128,
            **v4,
        }
    return {
        "description": "DeepSeek-V4-Flash (43 layers + MTP) as vLLM 0.28 decomposes it: fp8_ds_mla, block 256.",
        "layers": layers,
        "engine": {"max_model_len": 65536, "max_num_batched_tokens": 8192},
        "available_memory": ["40GiB"],
    }


def main() -> None:
    for name, build in {
        "issue-43626": issue_43626,
        "gemma3-27b": gemma3_27b,
        "llama3-8b": llama3_8b,
        "deepseek-v4-flash": deepseek_v4_flash,
    }.items():
        (OUT / f"{name}.json").write_text(json.dumps(build(), indent=1) + "\n")
        print("wrote", OUT / f"{name}.json")


if __name__ == "__main__":
    main()
