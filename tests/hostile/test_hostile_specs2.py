"""Contradictory spec fields are the user's input: the spec's constructor refuses them (issue 25, R8).

Before, ``FullAttentionSpec(..., sliding_window=1024, attention_chunk_size=1024)`` was built and
planning then blamed the ``spec-types`` plugin (a ``PluginError`` about "the sizes of layer 'a'").
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import kvrules
from kvrules import (
    ChunkedLocalAttentionSpec,
    EngineConfig,
    FullAttentionSpec,
    HiddenStateCacheSpec,
    MLAAttentionSpec,
    SinkFullAttentionSpec,
    SlidingWindowMLASpec,
    SlidingWindowSpec,
    SpecError,
    spec_from_dict,
)
from kvrules.model import parse_model

GQA: dict[str, Any] = {"num_kv_heads": 2, "head_size": 128, "dtype": "bfloat16"}
LATENT: dict[str, Any] = {"num_kv_heads": 1, "head_size": 576, "dtype": "bfloat16"}
BOTH: dict[str, Any] = {"sliding_window": 1024, "attention_chunk_size": 1024}

#: every class with both hint fields (full attention and what derives from it)
WITH_BOTH_HINTS = [
    (FullAttentionSpec, GQA),
    (SinkFullAttentionSpec, GQA),
    (MLAAttentionSpec, LATENT),
    (HiddenStateCacheSpec, {"num_kv_heads": 1, "head_size": 2048, "dtype": "bfloat16"}),
]


@pytest.mark.parametrize(("cls", "fields"), WITH_BOTH_HINTS, ids=lambda v: getattr(v, "__name__", ""))
def test_a_window_and_a_chunk_together_are_refused_by_the_constructor(
    cls: type, fields: dict[str, Any]
) -> None:
    with pytest.raises(SpecError) as info:
        cls(16, **fields, **BOTH)
    text = str(info.value)
    assert text.startswith(f"{cls.__name__} sets both sliding_window=1024 and attention_chunk_size=1024")
    assert "set only the one this layer uses" in text


@pytest.mark.parametrize(("cls", "fields"), WITH_BOTH_HINTS, ids=lambda v: getattr(v, "__name__", ""))
def test_either_hint_alone_is_still_a_spec(cls: type, fields: dict[str, Any]) -> None:
    assert cls(16, **fields, sliding_window=1024).sliding_window == 1024
    assert cls(16, **fields, attention_chunk_size=8192).attention_chunk_size == 8192


def test_the_reproducer_is_a_spec_error_not_a_fault_of_a_built_in() -> None:
    with pytest.raises(SpecError, match="sets both sliding_window"):
        FullAttentionSpec(16, **GQA, **BOTH)
    with pytest.raises(SpecError, match="sets both sliding_window"):  # through evolve too
        FullAttentionSpec(16, **GQA, sliding_window=1024).evolve(attention_chunk_size=1024)


def test_a_model_file_layer_with_both_is_refused_naming_the_layer() -> None:
    data = {"type": "full_attention", "block_size": 16, **GQA, **BOTH}
    with pytest.raises(SpecError, match=r"layer 'model.layers.3.self_attn'.*sets both sliding_window"):
        spec_from_dict(data, layer="model.layers.3.self_attn")
    model = {"layers": {"a": data}, "engine": {"max_model_len": 4096}}
    with pytest.raises(kvrules.KVRulesError, match="sets both sliding_window") as info:
        parse_model(json.loads(json.dumps(model)), "m.json")
    assert not isinstance(info.value, kvrules.PluginError)


def test_layers_that_are_promoted_to_full_attention_keep_one_hint() -> None:
    window = SlidingWindowSpec(16, **GQA, sliding_window=1024).full_attention_form()
    chunk = ChunkedLocalAttentionSpec(16, **GQA, attention_chunk_size=8192).full_attention_form()
    assert (window.sliding_window, window.attention_chunk_size) == (1024, None)
    assert (chunk.sliding_window, chunk.attention_chunk_size) == (None, 8192)
    mla = SlidingWindowMLASpec(64, **LATENT, sliding_window=128).full_attention_form()
    assert (mla.sliding_window, mla.head_size_v) == (128, 0)
    config = EngineConfig(max_model_len=4096, disable_hybrid_kv_cache_manager=True)
    specs = {"a": SlidingWindowSpec(16, **GQA, sliding_window=1024), "b": FullAttentionSpec(16, **GQA)}
    assert kvrules.plan(specs, available_memory=1 << 30, config=config).num_blocks > 0


# -- MLA: one latent vector per token, no separate V ---------------------------------------------

MLA_CLASSES: list[tuple[type, dict[str, Any]]] = [
    (MLAAttentionSpec, {}),
    (SlidingWindowMLASpec, {"sliding_window": 128}),
    (HiddenStateCacheSpec, {}),
]


@pytest.mark.parametrize(("cls", "extra"), MLA_CLASSES, ids=lambda v: getattr(v, "__name__", ""))
def test_an_mla_page_with_a_v_head_is_refused(cls: type, extra: dict[str, Any]) -> None:
    with pytest.raises(SpecError) as info:
        cls(64, **LATENT, head_size_v=512, **extra)
    text = str(info.value)
    assert text.startswith(f"{cls.__name__}.head_size_v=512 with head_size=576")
    assert "leave head_size_v unset (0)" in text


@pytest.mark.parametrize(("cls", "extra"), MLA_CLASSES, ids=lambda v: getattr(v, "__name__", ""))
def test_an_mla_page_without_a_v_head_is_unchanged(cls: type, extra: dict[str, Any]) -> None:
    unset = cls(64, **LATENT, **extra)
    zero = cls(64, **LATENT, head_size_v=0, **extra)
    assert unset.head_size_v == zero.head_size_v == 0
    assert unset.page_size_bytes == zero.page_size_bytes == 64 * 576 * 2


def test_a_non_mla_layer_may_still_have_its_own_v_head() -> None:
    spec = FullAttentionSpec(16, num_kv_heads=4, head_size=192, head_size_v=128, dtype="bfloat16")
    assert spec.page_size_bytes == 16 * 4 * (192 + 128) * 2
