"""The spec model: page formulas against hand-computed numbers (formulas.md 1.2, 5.1-5.4), validation, JSON."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvrules import (
    ChunkedLocalAttentionSpec,
    CrossAttentionSpec,
    EncoderOnlyAttentionSpec,
    EngineConfig,
    FullAttentionSpec,
    KVQuantMode,
    MambaSpec,
    MLAAttentionSpec,
    SinkFullAttentionSpec,
    SlidingWindowMLASpec,
    SlidingWindowSpec,
    SpecError,
    UniformTypeKVCacheSpecs,
    spec_from_dict,
)
from kvrules.specs.base import distinct_specs

FP8 = {"dtype": "uint8", "kv_quant_mode": KVQuantMode.FP8_PER_TENSOR}
BF16 = {"dtype": "bfloat16"}


@pytest.mark.parametrize(
    ("heads", "head", "dtype", "page"),
    [
        (8, 128, BF16, 65_536),  # Llama-3.1-8B / Qwen3-4B bf16 @16
        (8, 128, FP8, 32_768),  # fp8
        (16, 128, BF16, 131_072),  # Gemma-3-27B
        (16, 128, FP8, 65_536),
        (8, 64, BF16, 32_768),  # gpt-oss-20b
        (8, 64, FP8, 16_384),
        (2, 256, BF16, 32_768),  # Qwen3-Next attention
        (2, 256, FP8, 16_384),
    ],
)
def test_dense_attention_pages(heads: int, head: int, dtype: dict[str, object], page: int) -> None:
    spec = FullAttentionSpec(16, num_kv_heads=heads, head_size=head, **dtype)  # type: ignore[arg-type]
    assert spec.page_size_bytes == page
    sliding = SlidingWindowSpec(16, num_kv_heads=heads, head_size=head, sliding_window=128, **dtype)  # type: ignore[arg-type]
    assert sliding.page_size_bytes == page


def test_head_size_v_and_torch_dtype() -> None:
    spec = FullAttentionSpec(16, num_kv_heads=4, head_size=192, head_size_v=128, dtype=torch.float16)
    assert spec.dtype == "float16"
    assert spec.page_size_bytes == 16 * 4 * (192 + 128) * 2


def test_quantised_pages() -> None:
    nvfp4 = FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="uint8", kv_quant_mode="nvfp4")
    assert nvfp4.page_size_bytes == 16 * 8 * 2 * (64 + 8)
    int8 = FullAttentionSpec(
        16, num_kv_heads=8, head_size=128, dtype="int8", kv_quant_mode="INT8_PER_TOKEN_HEAD"
    )
    assert int8.real_page_size_bytes == 32_768
    assert int8.page_size_bytes == 32_768 + 2 * 16 * 8 * 4
    int4 = FullAttentionSpec(
        16, num_kv_heads=8, head_size=128, dtype="int8", kv_quant_mode="int4_per_token_head"
    )
    assert int4.page_size_bytes == 16 * 8 * 128 + 2 * 16 * 8 * 4


@pytest.mark.parametrize(
    ("block", "dtype", "page"),
    [(16, BF16, 18_432), (64, BF16, 73_728), (64, FP8, 36_864)],
)
def test_deepseek_v3_mla(block: int, dtype: dict[str, object], page: int) -> None:
    spec = MLAAttentionSpec(block, num_kv_heads=1, head_size=512 + 64, **dtype)  # type: ignore[arg-type]
    assert spec.page_size_bytes == page
    assert spec.head_size_v == 0


def test_deepseek_v32_fp8_ds_mla_and_indexer() -> None:
    mla = MLAAttentionSpec(64, num_kv_heads=1, head_size=576, dtype="uint8", cache_dtype_str="fp8_ds_mla")
    assert mla.page_size_bytes == 64 * 656 == 41_984
    indexer = MLAAttentionSpec(64, num_kv_heads=1, head_size=132, dtype="uint8")
    assert indexer.page_size_bytes == 8_448


V4 = {"dtype": "uint8", "cache_dtype_str": "fp8_ds_mla", "alignment": 576, "model_version": "deepseek_v4"}


def test_deepseek_v4_pages_table_5_3() -> None:
    swa = SlidingWindowMLASpec(64, num_kv_heads=1, head_size=512, sliding_window=128, **V4)  # type: ignore[arg-type]
    assert (swa.real_page_size_bytes, swa.page_size_bytes) == (37_376, 37_440)
    c4 = MLAAttentionSpec(256, num_kv_heads=1, head_size=512, compress_ratio=4, **V4)  # type: ignore[arg-type]
    assert (c4.storage_block_size, c4.page_size_bytes) == (64, 37_440)
    c128 = MLAAttentionSpec(256, num_kv_heads=1, head_size=512, compress_ratio=128, **V4)  # type: ignore[arg-type]
    assert (c128.real_page_size_bytes, c128.page_size_bytes) == (1_168, 1_728)
    indexer = MLAAttentionSpec(
        256, num_kv_heads=1, head_size=132, dtype="uint8", compress_ratio=4, alignment=576
    )
    assert indexer.page_size_bytes == 8_640
    state4 = SlidingWindowMLASpec(
        4, num_kv_heads=1, head_size=2048, dtype="float32", sliding_window=8, alignment=576
    )
    state128 = SlidingWindowMLASpec(
        8, num_kv_heads=1, head_size=1024, dtype="float32", sliding_window=128, alignment=576
    )
    assert state4.page_size_bytes == state128.page_size_bytes == 32_832
    index_state = SlidingWindowMLASpec(
        4, num_kv_heads=1, head_size=512, dtype="float32", sliding_window=8, alignment=576
    )
    assert index_state.page_size_bytes == 8_640


def gdn_page(tp: int, ssm: str = "bfloat16", spec_tokens: int = 0) -> MambaSpec:
    conv_dim = 128 * 16 * 2 + 128 * 32
    return MambaSpec(16, [[3 + spec_tokens, conv_dim // tp], [32 // tp, 128, 128]], ["bfloat16", ssm])


@pytest.mark.parametrize(
    ("tp", "bf16", "fp32"),
    [(1, 1_097_728, 2_146_304), (2, 548_864, 1_073_152), (4, 274_432, 536_576), (8, 137_216, 268_288)],
)
def test_qwen3_next_gdn_pages(tp: int, bf16: int, fp32: int) -> None:
    assert gdn_page(tp).page_size_bytes == bf16
    assert gdn_page(tp, "float32").page_size_bytes == fp32


def test_speculative_tokens_add_conv_rows() -> None:
    assert gdn_page(1, spec_tokens=4).page_size_bytes == 16_384 * (67 + 4) == 1_163_264


def test_nemotron_jamba_falcon_pages() -> None:
    nemotron = MambaSpec(16, [[3, 10_240 + 2 * 8 * 128], [128, 80, 128]], ["bfloat16", "float32"])
    assert nemotron.state_bytes == (73_728, 5_242_880)
    assert nemotron.page_size_bytes == 5_316_608
    assert MambaSpec(16, [[3, 12_288], [128, 80, 128]], ["bfloat16", "bfloat16"]).page_size_bytes == 2_695_168
    jamba = MambaSpec(16, [[3, 8192], [8192, 16]], ["bfloat16", "bfloat16"], mamba_type="mamba1")
    assert jamba.page_size_bytes == 311_296
    falcon = MambaSpec(16, [[3, 3072 + 2 * 256], [48, 64, 256]], ["bfloat16", "bfloat16"])
    assert falcon.page_size_bytes == 1_594_368


def test_mamba_page_ignores_block_size_and_pads() -> None:
    a = MambaSpec(16, [[3, 768], [4, 32, 32]], ["bfloat16", "bfloat16"])
    b = a.evolve(block_size=1024)
    assert a.page_size_bytes == b.page_size_bytes == 12_800
    assert a.evolve(page_size_padded=16_384).page_size_bytes == 16_384


CFG = EngineConfig(max_model_len=4096, max_num_batched_tokens=2048)


def test_memory_per_request_formulas() -> None:
    full = FullAttentionSpec(16, num_kv_heads=4, head_size=256, dtype="bfloat16")
    assert full.max_memory_usage_bytes(CFG) == 256 * 65_536
    cp = EngineConfig(max_model_len=4096, decode_context_parallel_size=2, prefill_context_parallel_size=2)
    assert full.max_memory_usage_bytes(cp) == 64 * 65_536
    sw = SlidingWindowSpec(16, num_kv_heads=4, head_size=256, dtype="bfloat16", sliding_window=1024)
    assert sw.max_memory_usage_bytes(CFG) == (192 + 1) * 65_536
    retained = EngineConfig(max_model_len=4096, extra_retained_tokens=2)
    assert sw.max_memory_usage_bytes(retained) == (193 + 1) * 65_536
    chunk = ChunkedLocalAttentionSpec(
        16, num_kv_heads=8, head_size=128, dtype="bfloat16", attention_chunk_size=1024
    )
    assert chunk.max_memory_usage_bytes(CFG) == 192 * 65_536
    cross = CrossAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16")
    enc = EngineConfig(max_model_len=4096, max_num_encoder_input_tokens=1500)
    assert cross.max_memory_usage_bytes(enc) == 94 * 65_536
    assert cross.max_memory_usage_bytes(CFG) == 128 * 65_536
    only = EncoderOnlyAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16")
    assert only.max_memory_usage_bytes(CFG) == 0
    sink = SinkFullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16", sink_len=4)
    assert sink.max_memory_usage_bytes(CFG) == 256 * 65_536


@pytest.mark.parametrize(("mode", "pages"), [("none", 1 + 2), ("align", 2 + 2), ("all", 256 + 2)])
def test_mamba_memory_modes(mode: str, pages: int) -> None:
    spec = MambaSpec(16, [[3, 768]], ["bfloat16"], mamba_cache_mode=mode, num_speculative_blocks=2)
    assert spec.max_memory_usage_bytes(CFG) == pages * spec.page_size_bytes


def test_uniform_type_spec() -> None:
    a = FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16")
    b = FullAttentionSpec(16, num_kv_heads=4, head_size=128, dtype="bfloat16")
    group = UniformTypeKVCacheSpecs(16, {"a": a, "b": b})
    assert group.page_size_bytes == 65_536 + 32_768
    assert group.max_memory_usage_bytes(CFG) == 256 * group.page_size_bytes
    assert UniformTypeKVCacheSpecs.is_uniform_type({"a": a, "b": b})
    sw = SlidingWindowSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16", sliding_window=64)
    assert not UniformTypeKVCacheSpecs.is_uniform_type({"a": a, "s": sw})
    assert not UniformTypeKVCacheSpecs.is_uniform_type({"a": a, "c": b.evolve(block_size=32)})


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: FullAttentionSpec(0, num_kv_heads=8, head_size=128, dtype="bfloat16"), "block_size=0"),
        (lambda: FullAttentionSpec(16, num_kv_heads=-1, head_size=128, dtype="bfloat16"), "num_kv_heads=-1"),
        (lambda: FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat17"), "dtype='bfloat17'"),
        (
            lambda: FullAttentionSpec(
                16, num_kv_heads=8, head_size=128, dtype="bfloat16", page_size_padded=100
            ),
            "page_size_padded=100",
        ),
        (lambda: MambaSpec(16, [[3, 768]], ["bfloat16"], page_size_padded=10), "page_size_padded=10"),
        (lambda: MambaSpec(16, [[3, 768]], ["bfloat16", "bfloat16"]), "1 shapes but 2 dtypes"),
        (lambda: MambaSpec(16, [[3, 0]], ["bfloat16"]), "invalid shape"),
        (lambda: MambaSpec(16, [[3, 8]], ["bfloat16"], mamba_cache_mode="some"), "mamba_cache_mode='some'"),
        (
            lambda: SlidingWindowSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16", sliding_window=0),
            "sliding_window=0",
        ),
        (
            lambda: FullAttentionSpec(
                16, num_kv_heads=8, head_size=128, dtype="bfloat16", kv_quant_mode="fp9"
            ),
            "kv_quant_mode='fp9'",
        ),
        (
            lambda: SlidingWindowMLASpec(
                16, num_kv_heads=1, head_size=64, dtype="bfloat16", sliding_window=8, model_version="v9"
            ),
            "model_version='v9'",
        ),
        (
            lambda: MLAAttentionSpec(2, num_kv_heads=1, head_size=64, dtype="bfloat16", compress_ratio=4),
            "holds no bytes",
        ),
    ],
)
def test_bad_values_raise_spec_error(build: object, field: str) -> None:
    with pytest.raises(SpecError, match=field.replace("[", r"\[").replace("(", r"\(")):
        build()  # type: ignore[operator]


def test_specs_are_frozen_and_hashable() -> None:
    spec = FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16")
    with pytest.raises(AttributeError):
        spec.block_size = 32  # type: ignore[misc]
    assert spec == FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype=torch.bfloat16)
    assert len({spec, FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16")}) == 1


ROUND_TRIP = [
    FullAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16", sliding_window=64),
    FullAttentionSpec(
        16,
        num_kv_heads=3,
        head_size=128,
        dtype="bfloat16",
        page_size_padded=32_768,
        indexes_kv_by_block_stride=True,
    ),
    SlidingWindowSpec(
        16, num_kv_heads=8, head_size=128, dtype="uint8", sliding_window=1024, kv_quant_mode="FP8_PER_TENSOR"
    ),
    ChunkedLocalAttentionSpec(16, num_kv_heads=8, head_size=128, dtype="bfloat16", attention_chunk_size=8192),
    MLAAttentionSpec(256, num_kv_heads=1, head_size=512, compress_ratio=128, **V4),  # type: ignore[arg-type]
    SlidingWindowMLASpec(64, num_kv_heads=1, head_size=512, sliding_window=128, **V4),  # type: ignore[arg-type]
    MambaSpec(
        16,
        [[3, 768], [4, 32, 32]],
        ["bfloat16", "float32"],
        page_size_padded=65_536,
        mamba_type="gdn_attention",
        mamba_cache_mode="align",
        num_speculative_blocks=2,
    ),
    CrossAttentionSpec(16, num_kv_heads=8, head_size=64, dtype="float16"),
    EncoderOnlyAttentionSpec(16, num_kv_heads=8, head_size=64, dtype="float16"),
    SinkFullAttentionSpec(16, num_kv_heads=8, head_size=64, dtype="float16", sink_len=128),
    UniformTypeKVCacheSpecs(16, {"x": FullAttentionSpec(16, num_kv_heads=8, head_size=64, dtype="float16")}),
]


@pytest.mark.parametrize("spec", ROUND_TRIP, ids=lambda s: s.type_name)
def test_json_round_trip(spec: object) -> None:
    data = spec.to_dict()  # type: ignore[attr-defined]
    assert spec_from_dict(data) == spec
    assert data["type"] == spec.type_name  # type: ignore[attr-defined]


def test_quant_mode_json_is_member_name_read_case_insensitively() -> None:
    spec = FullAttentionSpec(
        16, num_kv_heads=8, head_size=128, dtype="uint8", kv_quant_mode=KVQuantMode.FP8_PER_TENSOR
    )
    assert spec.to_dict()["kv_quant_mode"] == "FP8_PER_TENSOR"
    back = spec_from_dict({**spec.to_dict(), "kv_quant_mode": "fp8_per_tensor"})
    assert back.kv_quant_mode is KVQuantMode.FP8_PER_TENSOR  # type: ignore[attr-defined]


def test_model_file_errors_name_layer_and_key() -> None:
    with pytest.raises(SpecError, match=r"layer 'l0'.*unknown key 'heads'"):
        spec_from_dict({"type": "full_attention", "block_size": 16, "heads": 8}, layer="l0")
    with pytest.raises(SpecError, match=r"layer 'l1'.*unknown spec type 'fancy'"):
        spec_from_dict({"type": "fancy"}, layer="l1")
    with pytest.raises(SpecError, match=r"layer 'l2'.*needs field\(s\) num_kv_heads"):
        spec_from_dict(
            {"type": "full_attention", "block_size": 16, "head_size": 8, "dtype": "bfloat16"}, layer="l2"
        )


def test_from_cache_dtype() -> None:
    assert KVQuantMode.from_cache_dtype("auto") is KVQuantMode.NONE
    assert KVQuantMode.from_cache_dtype("fp8_e5m2") is KVQuantMode.FP8_PER_TENSOR
    assert KVQuantMode.from_cache_dtype("fp8_per_token_head") is KVQuantMode.FP8_PER_TOKEN_HEAD
    assert KVQuantMode.from_cache_dtype("nvfp4") is KVQuantMode.NVFP4


@pytest.mark.parametrize(
    "value", [10**5000, 5, None, 1.5, b"bfloat16"], ids=["huge-int", "int", "none", "float", "bytes"]
)
def test_a_dtype_that_is_not_a_name_or_torch_dtype_is_a_spec_error(value: object) -> None:
    with pytest.raises(SpecError, match=r"dtype=.* is not a dtype; give a torch.dtype or one of"):
        FullAttentionSpec(16, num_kv_heads=1, head_size=64, dtype=value)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(["mla", "sliding_window_mla"]),
    block=st.integers(1, 64),
    compress=st.sampled_from([1, 4, 128]),
    head=st.sampled_from([8, 32, 512, 576]),
    alignment=st.sampled_from([None, 64, 576, 1000]),
    extra=st.sampled_from([None, 0, 1, 4096]),
)
def test_an_aligned_page_is_written_only_beyond_the_alignment(
    kind: str, block: int, compress: int, head: int, alignment: int | None, extra: int | None
) -> None:
    """``to_dict`` leaves ``page_size_padded`` out exactly when alignment alone gives it: the
    arithmetic answer equals rebuilding the spec without it."""
    fields: dict[str, object] = {
        "block_size": block * compress,
        "num_kv_heads": 1,
        "head_size": head,
        "dtype": "bfloat16",
        "compress_ratio": compress,
        "alignment": alignment,
    }
    cls = MLAAttentionSpec if kind == "mla" else SlidingWindowMLASpec
    if kind == "sliding_window_mla":
        fields["sliding_window"] = 128
    base = cls(**fields)  # type: ignore[arg-type]
    spec = base if extra is None else base.evolve(page_size_padded=base.page_size_bytes + extra)
    rebuilt = spec.evolve(page_size_padded=None)
    if alignment is not None:  # without one, a padded page is always the user's and written
        assert ("page_size_padded" not in spec.to_dict()) == (rebuilt.page_size_bytes == spec.page_size_bytes)
    again = spec_from_dict(spec.to_dict())  # a padding of 0 bytes may come back as none
    assert again.page_size_bytes == spec.page_size_bytes and again.to_dict() == spec.to_dict()


#: spec objects to draw layers from: two equal but distinct objects among them
_POOL = [FullAttentionSpec(16, num_kv_heads=h, head_size=64, dtype="bfloat16") for h in (1, 2, 4, 8, 1)] + [
    SlidingWindowSpec(16, num_kv_heads=1, head_size=64, dtype="bfloat16", sliding_window=w)
    for w in range(1, 30)
]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, len(_POOL) - 1), max_size=400),
    st.sampled_from([list, tuple, lambda xs: iter(list(xs)), lambda xs: dict(enumerate(xs)).values()]),
)
def test_distinct_specs_are_the_objects_in_first_seen_order(picks: list[int], kind: object) -> None:
    """One of each object, by identity (equal objects stay apart), in first-seen order, from a
    few objects or many, whatever the iterable."""
    layers = [_POOL[i] for i in picks]
    expected = list({id(s): s for s in layers}.values())
    found = distinct_specs(kind(layers))  # type: ignore[operator]
    assert len(found) == len(expected) and all(a is b for a, b in zip(found, expected, strict=True))
