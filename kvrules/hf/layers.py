"""Helpers architectures use to turn config fields into specs (heads per rank, spec factories).

Attention heads follow vLLM's tensor-parallel rule: the query heads must split evenly; KV heads
are split when there are at least as many as ranks (``heads % tp == 0``) and replicated
otherwise (``tp % heads == 0``); each rank holds ``max(1, heads // tp)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvrules.hf.config import HFConfig
from kvrules.hf.settings import BuildSettings
from kvrules.specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)


def layer_prefix(config: HFConfig) -> str:
    """``language_model.model.layers`` for multimodal wrappers, else ``model.layers``."""
    return "language_model.model.layers" if config.has_text_config else "model.layers"


def kv_heads_per_rank(
    config: HFConfig,
    tp: int,
    *,
    heads_key: str = "num_attention_heads",
    kv_key: str = "num_key_value_heads",
) -> int:
    """KV heads one rank holds: ``max(1, kv_heads // tp)`` after checking the split is valid.

    ``kv_key`` defaults to the query head count when absent (multi-head attention).

    :raises ModelFileError: a missing or non-positive head count, or ``tp`` not dividing them.
    """
    heads = config.integer(heads_key, why="the number of attention heads")
    kv = config.integer(kv_key, heads)
    if heads % tp:
        raise config.error(
            heads_key,
            f"= {heads} cannot be split over tensor_parallel_size {tp}; choose a TP size that divides {heads}",
        )
    if kv >= tp and kv % tp:
        raise config.error(
            kv_key,
            f"= {kv} cannot be split over tensor_parallel_size {tp} ({kv} is not a multiple of {tp}); "
            f"choose a TP size that divides {kv}",
        )
    if kv < tp and tp % kv:
        raise config.error(
            kv_key,
            f"= {kv} cannot be replicated over tensor_parallel_size {tp} ({tp} is not a multiple of {kv}); "
            f"choose a TP size that is a multiple of {kv}",
        )
    return max(1, kv // tp)


def head_size(config: HFConfig, *, key: str = "head_dim") -> int:
    """``head_dim``, or ``hidden_size // num_attention_heads`` when the config has none."""
    if config.has(key):
        return config.integer(key)
    hidden = config.integer("hidden_size", why=f"needed for the head size when {key!r} is absent")
    heads = config.integer("num_attention_heads")
    if hidden % heads:
        raise config.error("hidden_size", f"= {hidden} is not a multiple of num_attention_heads {heads}")
    return hidden // heads


def _attention_fields(settings: BuildSettings, kv_heads: int, head: int) -> dict[str, Any]:
    """Fields every non-MLA attention spec takes from the build settings."""
    return {
        "block_size": settings.block_size,
        "num_kv_heads": kv_heads,
        "head_size": head,
        "dtype": settings.kv.dtype,
        "kv_quant_mode": settings.kv.quant_mode,
        "indexes_kv_by_block_stride": settings.backend.indexes_kv_by_block_stride,
    }


def full_attention(settings: BuildSettings, kv_heads: int, head: int) -> FullAttentionSpec:
    """A full-attention spec in the model's KV dtype and the cache block size."""
    return FullAttentionSpec(**_attention_fields(settings, kv_heads, head))


def sliding_window(settings: BuildSettings, kv_heads: int, head: int, window: int) -> SlidingWindowSpec:
    """A sliding-window spec of ``window`` tokens."""
    return SlidingWindowSpec(**_attention_fields(settings, kv_heads, head), sliding_window=window)


def chunked_local(settings: BuildSettings, kv_heads: int, head: int, chunk: int) -> ChunkedLocalAttentionSpec:
    """A chunked-local-attention spec of ``chunk`` tokens."""
    return ChunkedLocalAttentionSpec(
        **_attention_fields(settings, kv_heads, head), attention_chunk_size=chunk
    )


def mla(settings: BuildSettings, head: int) -> MLAAttentionSpec:
    """A multi-head-latent-attention spec: one latent vector of ``head`` elements per token (never padded)."""
    return MLAAttentionSpec(
        block_size=settings.block_size,
        num_kv_heads=1,
        head_size=head,
        dtype=settings.kv.dtype,
        kv_quant_mode=settings.kv.quant_mode,
        cache_dtype_str=settings.kv.cache_dtype_str,
    )


def mamba(
    settings: BuildSettings,
    shapes: Sequence[tuple[int, ...]],
    mamba_type: str,
    dtypes: Sequence[str] | None = None,
) -> MambaSpec:
    """A Mamba spec; ``dtypes`` default to (conv dtype, SSM dtype, SSM dtype, ...)."""
    if dtypes is None:
        dtypes = [settings.mamba_conv_dtype] + [settings.mamba_ssm_dtype] * (len(shapes) - 1)
    return MambaSpec(
        block_size=settings.mamba_block_size,
        shapes=tuple(shapes),
        dtypes=tuple(dtypes),
        mamba_type=mamba_type,
        mamba_cache_mode=settings.mamba_cache_mode,
        num_speculative_blocks=settings.num_speculative_tokens,
    )
