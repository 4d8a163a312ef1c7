"""Helpers architectures use to turn config fields into specs (heads per rank, spec factories).

Attention heads follow vLLM's tensor-parallel rule: the query heads must split evenly; KV heads
are split when there are at least as many as ranks (``heads % tp == 0``) and replicated
otherwise (``tp % heads == 0``); each rank holds ``max(1, heads // tp)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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
from kvrules.values import shown


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


# -- layer kinds from standard fields (the generic architecture) --------------------------------

FULL = "full_attention"
SLIDING = "sliding_attention"
CHUNKED = "chunked_attention"

#: ``layer_types`` entries that are KV-cache attention (what :func:`attention_kinds` builds)
ATTENTION_KINDS = (FULL, SLIDING, CHUNKED)

#: ``layer_types`` entries that keep a recurrent state instead of a KV cache: a named
#: architecture must say which state (``kvrules_plugins.ssm_architectures``)
STATE_KINDS = ("linear_attention", "mamba", "mamba2", "conv", "short_conv", "hybrid", "recurrent")


@dataclass(frozen=True)
class LayerKinds:
    """Each layer's attention kind, and the sentences saying how they were read.

    :ivar kinds: one of :data:`ATTENTION_KINDS` per layer.
    :ivar window: the sliding window in tokens (``None`` when no layer slides).
    :ivar chunk: the attention chunk in tokens (``None`` when no layer is chunked).
    :ivar assumptions: what was read or assumed, one sentence each (for the ``arch`` decision).
    """

    kinds: tuple[str, ...]
    window: int | None
    chunk: int | None
    assumptions: tuple[str, ...]


def _from_layer_types(config: HFConfig, n: int) -> LayerKinds | None:
    """``layer_types``: one entry per layer, each an attention kind (a state kind is refused)."""
    values = config.sequence("layer_types", n)
    if values is None:
        return None
    for index, value in enumerate(values):
        if value in STATE_KINDS:
            raise config.error(
                "layer_types",
                f"entry {index} is {value!r}, a recurrent state and not a KV cache; the generic "
                "architecture builds only attention layers: a named architecture must build this model "
                "(see docs/hf.md, 'Built-in architectures')",
            )
        if value not in ATTENTION_KINDS:
            raise config.error(
                "layer_types",
                f"entry {index} is {shown(value)}; the generic architecture knows "
                f"{', '.join(ATTENTION_KINDS)}",
            )
    if SLIDING in values and config.get("use_sliding_window") is False:
        raise config.error(
            "use_sliding_window",
            "is false but layer_types names sliding layers; which one holds is ambiguous: make them agree",
        )
    window = chunk = None
    if SLIDING in values:
        window = config.integer("sliding_window", why="layer_types names sliding layers")
    if CHUNKED in values:
        chunk = config.integer("attention_chunk_size", why="layer_types names chunked layers")
    notes = [f"layer kinds from {_origin(config, 'layer_types')}"]
    for key, used in (("sliding_window", window), ("attention_chunk_size", chunk)):
        value = config.get(key)  # layer_types decides: a size no layer uses is read, and said so
        if used is None and value is not None:
            notes.append(f"{config.where(key)} {shown(value)} unused: no layer_types entry needs it")
    return LayerKinds(tuple(values), window, chunk, tuple(notes))


def _from_pattern(config: HFConfig, n: int) -> LayerKinds | None:
    """``sliding_window_pattern`` P: layer ``i`` is global iff ``(i + 1) % P == 0`` (Gemma 3, Cohere 2)."""
    if not config.has("sliding_window_pattern"):
        return None
    pattern = config.integer("sliding_window_pattern")
    window = config.integer("sliding_window", why="sliding_window_pattern interleaves sliding layers")
    kinds = tuple(FULL if (i + 1) % pattern == 0 else SLIDING for i in range(n))
    note = (
        f"{config.where('sliding_window_pattern')} {pattern}: layer i is global iff (i + 1) % {pattern} == 0, "
        f"the others slide over {window} tokens"
    )
    return LayerKinds(kinds, window, None, (note,))


def _from_use_sliding_window(config: HFConfig, n: int) -> LayerKinds | None:
    """Qwen2's ``use_sliding_window``: layers from ``max_window_layers`` on slide (all full when false)."""
    if config.get("use_sliding_window") is None:
        return None
    if not config.flag("use_sliding_window", False):
        window = config.get("sliding_window")
        note = f"{config.where('use_sliding_window')} is false: every layer is full attention"
        return LayerKinds(
            (FULL,) * n,
            None,
            None,
            (note + (f" (sliding_window {shown(window)} unused)" if window is not None else ""),),
        )
    window = config.integer("sliding_window", why="use_sliding_window is true")
    start = config.integer("max_window_layers", 0, minimum=0)
    kinds = tuple(SLIDING if i >= start else FULL for i in range(n))
    note = f"use_sliding_window: layers {start} and up slide over {window} tokens (max_window_layers {start})"
    return LayerKinds(kinds, window, None, (note,))


def _from_model_wide_window(config: HFConfig, n: int) -> LayerKinds | None:
    """A ``sliding_window`` with nothing saying which layers: every layer slides (as vLLM does)."""
    if not config.has("sliding_window"):
        return None
    window = config.integer("sliding_window")
    note = (
        f"{config.where('sliding_window')} {window} with no layer_types: every layer slides "
        "(vLLM applies a model-wide sliding_window to every layer)"
    )
    return LayerKinds((SLIDING,) * n, window, None, (note,))


def attention_kinds(config: HFConfig, n: int) -> LayerKinds:
    """Each of ``n`` layers' attention kind from standard fields, in this order: ``layer_types``,
    ``sliding_window_pattern``, ``use_sliding_window`` (+ ``max_window_layers``), a model-wide
    ``sliding_window``; else every layer is full attention.

    :raises ModelFileError: an ambiguous or missing field, named (``attention_chunk_size``
        without ``layer_types`` saying which layers are chunked; a state kind in ``layer_types``).
    """
    for read in (_from_layer_types, _from_pattern, _from_use_sliding_window, _from_model_wide_window):
        kinds = read(config, n)
        if kinds is not None:
            break
    else:
        kinds = LayerKinds((FULL,) * n, None, None, ("no window field: every layer is full attention",))
    if kinds.chunk is None and config.has("attention_chunk_size"):
        raise config.error(
            "attention_chunk_size",
            f"= {shown(config.get('attention_chunk_size'))} but no layer_types says which layers are "
            "chunked; the generic architecture does not guess: add layer_types (chunked_attention / "
            "full_attention per layer) or use a named architecture",
        )
    return kinds


def _origin(config: HFConfig, key: str) -> str:
    """``head_dim``, or ``head_dim (MistralConfig class default)`` when the file does not give it."""
    where = config.where(key)
    if config.raw(key) is not None:
        return where
    cls = config.reading.class_name or "the config class"
    return f"{where} ({cls} default)"


def head_size_note(config: HFConfig, head: int) -> str:
    """How the head size was found: ``head_dim 128`` or ``hidden_size / num_attention_heads = 96``."""
    if config.has("head_dim"):
        return f"head size {head} from {_origin(config, 'head_dim')}"
    return f"head size {head} = hidden_size / num_attention_heads (the config has no head_dim)"


def mla_latent(config: HFConfig) -> int | None:
    """The MLA latent per token, ``kv_lora_rank + qk_rope_head_dim`` (``None`` without ``kv_lora_rank``).

    :raises ModelFileError: ``kv_lora_rank`` without ``qk_rope_head_dim``.
    """
    if not config.has("kv_lora_rank"):
        return None
    rank = config.integer("kv_lora_rank", why="the MLA latent size")
    return rank + config.integer("qk_rope_head_dim", why="the MLA RoPE part, needed with kv_lora_rank")


def indexer_keys(settings: BuildSettings, head: int) -> MLAAttentionSpec:
    """A sparse-attention indexer's key cache (DeepSeek-V3.2): ``head`` bytes per token in uint8,
    whatever the KV-cache dtype (fp8 keys and their scales), one per layer, the cache block size."""
    return MLAAttentionSpec(block_size=settings.block_size, num_kv_heads=1, head_size=head, dtype="uint8")
