"""KV-cache spec types (field names and page formulas as in vLLM 0.28)."""

from kvrules.specs.attention import (
    AttentionSpec,
    ChunkedLocalAttentionSpec,
    CrossAttentionSpec,
    EncoderOnlyAttentionSpec,
    FullAttentionSpec,
    HiddenStateCacheSpec,
    MLAAttentionSpec,
    SinkFullAttentionSpec,
    SlidingWindowMLASpec,
    SlidingWindowSpec,
    quantized_head_dim,
)
from kvrules.specs.base import KVCacheSpec, KVQuantMode, cdiv, merged_spec, round_up
from kvrules.specs.builtin import BUILTIN_SPEC_TYPES
from kvrules.specs.io import spec_from_dict, spec_to_dict
from kvrules.specs.mamba import MambaSpec
from kvrules.specs.uniform import UniformTypeKVCacheSpecs

__all__ = [
    "BUILTIN_SPEC_TYPES",
    "AttentionSpec",
    "ChunkedLocalAttentionSpec",
    "CrossAttentionSpec",
    "EncoderOnlyAttentionSpec",
    "FullAttentionSpec",
    "HiddenStateCacheSpec",
    "KVCacheSpec",
    "KVQuantMode",
    "MLAAttentionSpec",
    "MambaSpec",
    "SinkFullAttentionSpec",
    "SlidingWindowMLASpec",
    "SlidingWindowSpec",
    "UniformTypeKVCacheSpecs",
    "cdiv",
    "merged_spec",
    "quantized_head_dim",
    "round_up",
    "spec_from_dict",
    "spec_to_dict",
]
