"""The spec classes that ship with kvrules."""

from __future__ import annotations

from kvrules.specs.attention import (
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
from kvrules.specs.base import KVCacheSpec
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
