"""Small plans for the allocation tests: every view layout, padding, Mamba, packing."""

from __future__ import annotations

from collections.abc import Mapping

import kvrules
from kvrules import (
    EngineConfig,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    MLAAttentionSpec,
    Plan,
    SlidingWindowMLASpec,
    SlidingWindowSpec,
)

CONFIG = EngineConfig(max_model_len=64, max_num_batched_tokens=16, auto_fit_max_model_len=True)


def plan_of(specs: Mapping[str, KVCacheSpec] | list[dict[str, KVCacheSpec]], memory: int) -> Plan:
    """The ``vllm`` preset's plan of ``specs`` with ``memory`` bytes per worker."""
    return kvrules.Planner("vllm").plan(specs if isinstance(specs, list) else dict(specs), memory, CONFIG)


def attention(**kw: object) -> FullAttentionSpec:
    values: dict[str, object] = {"block_size": 4, "num_kv_heads": 2, "head_size": 8, "dtype": "bfloat16"}
    values.update(kw)
    return FullAttentionSpec(**values)  # type: ignore[arg-type]


def dense(layers: int = 2, blocks: int = 6, **kw: object) -> Plan:
    """``layers`` full-attention layers, ``blocks`` blocks."""
    spec = attention(**kw)
    return plan_of({f"layers.{i}.attn": spec for i in range(layers)}, blocks * layers * spec.page_size_bytes)


def padded_attention(blocks: int = 5) -> Plan:
    """3-head full attention padded (stride-pad) to the 4-head sliding-window page; 2 shared tensors."""
    full = attention(num_kv_heads=3, indexes_kv_by_block_stride=True)
    swa = SlidingWindowSpec(block_size=4, num_kv_heads=4, head_size=8, dtype="bfloat16", sliding_window=8)
    specs = {"layers.0.full": full, "layers.0.swa": swa, "layers.1.full": full, "layers.1.swa": swa}
    return plan_of(specs, blocks * 2 * swa.page_size_bytes)


MAMBA = MambaSpec(block_size=16, shapes=((3, 16), (2, 4, 8)), dtypes=("bfloat16", "float32"))


def hybrid(blocks: int = 5) -> Plan:
    """2 Mamba layers (352-byte state, padded to 512) and 2 attention layers sharing 2 tensors."""
    att = attention(block_size=16, num_kv_heads=1)
    specs = {"layers.0.mamba": MAMBA, "layers.1.attn": att, "layers.2.mamba": MAMBA, "layers.3.attn": att}
    return plan_of(specs, blocks * 2 * att.page_size_bytes)


def mla(blocks: int = 5) -> Plan:
    """Two MLA layers (one latent vector of 32 per token)."""
    spec = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=32, dtype="bfloat16")
    return plan_of({"layers.0.mla": spec, "layers.1.mla": spec}, blocks * 2 * spec.page_size_bytes)


def packed(blocks: int = 4) -> Plan:
    """A DeepSeek-V4-like model: compressed MLA, indexer, fp8_ds_mla, sliding-window MLA, packed."""
    c4 = MLAAttentionSpec(
        block_size=16,
        num_kv_heads=1,
        head_size=32,
        dtype="bfloat16",
        compress_ratio=4,
        model_version="deepseek_v4",
    )
    indexer = MLAAttentionSpec(
        block_size=16,
        num_kv_heads=1,
        head_size=8,
        dtype="bfloat16",
        compress_ratio=4,
        model_version="deepseek_v4",
    )
    ds = MLAAttentionSpec(
        block_size=16,
        num_kv_heads=1,
        head_size=512,
        dtype="uint8",
        compress_ratio=4,
        cache_dtype_str="fp8_ds_mla",
        alignment=576,
        model_version="deepseek_v4",
    )
    swa = SlidingWindowMLASpec(
        block_size=4,
        num_kv_heads=1,
        head_size=32,
        dtype="bfloat16",
        sliding_window=8,
        model_version="deepseek_v4",
    )
    specs: dict[str, KVCacheSpec] = {}
    for i in range(2):
        specs[f"layers.{i}.c4"] = c4
        specs[f"layers.{i}.indexer"] = indexer
        specs[f"layers.{i}.ds"] = ds
        specs[f"layers.{i}.swa"] = swa
    plan = plan_of(specs, 1 << 20)
    stride = plan.workers[0].tensors[0].block_stride
    return plan_of(specs, blocks * stride)


def split_kv(blocks: int = 4) -> Plan:
    """Attention whose V head size (4) differs from its K head size (8)."""
    return dense(blocks=blocks, head_size_v=4)


def per_token_head(blocks: int = 4) -> Plan:
    """int8 attention with per-token-head fp32 scales in the page."""
    return dense(blocks=blocks, dtype="int8", kv_quant_mode="INT8_PER_TOKEN_HEAD")


def nvfp4(blocks: int = 4) -> Plan:
    """NVFP4 attention: head dim 32 stored as 16 + 2 bytes."""
    return dense(blocks=blocks, dtype="uint8", head_size=32, kv_quant_mode="NVFP4")


def pipeline(blocks: int = 4) -> Plan:
    """Two workers (pipeline stages) of two attention layers each."""
    spec: KVCacheSpec = attention()
    workers = [{f"layers.{i}.attn": spec for i in (0, 1)}, {f"layers.{i}.attn": spec for i in (2, 3)}]
    return plan_of(workers, blocks * 2 * spec.page_size_bytes)
