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
)
from kvrules.specs.base import KVCacheSpec, KVQuantMode, cdiv, round_up
from kvrules.specs.io import spec_from_dict, spec_to_dict
from kvrules.specs.mamba import MambaSpec
from kvrules.specs.uniform import UniformTypeKVCacheSpecs

#: every built-in spec class (registered by the built-in plugin ``spec-types``)
BUILTIN_SPEC_TYPES: tuple[type[KVCacheSpec], ...] = (
    FullAttentionSpec,
    SlidingWindowSpec,
    ChunkedLocalAttentionSpec,
    MLAAttentionSpec,
    SlidingWindowMLASpec,
    HiddenStateCacheSpec,
    MambaSpec,
    CrossAttentionSpec,
    EncoderOnlyAttentionSpec,
    SinkFullAttentionSpec,
    UniformTypeKVCacheSpecs,
)

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
    "round_up",
    "spec_from_dict",
    "spec_to_dict",
]
