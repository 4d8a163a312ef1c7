"""Quantized KV exactly as vLLM 0.28 publishes it: ``num_head_slots`` / ``state_content_bytes``
on every attention spec (architecture §7), their round trips, and conversion both ways."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import vllm_standins as vs
from case_loader import CASES_DIR, case_names, expected_layer_specs, kv_triple, load_case

import kvrules
from kvrules import (
    EngineConfig,
    FullAttentionSpec,
    KVCacheSpec,
    MLAAttentionSpec,
    Planner,
    SlidingWindowMLASpec,
    SlidingWindowSpec,
    SpecError,
)
from kvrules.integrations import vllm_specs as kv_vllm
from kvrules.integrations.vllm_specs import VllmClasses
from kvrules.model import load_model_file

CLASSES = VllmClasses.from_namespace(vs.namespace(), version="stand-in 0.28")
QUANTIZED = [name for name in case_names() if name.startswith("quantized/")]


def test_the_quantized_cases_are_picked_up() -> None:
    assert len(QUANTIZED) == 5, f"expected c10a-c10e in {CASES_DIR / 'quantized'}"


# -- the page formula ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "page"),
    [
        # fp8 per-token-head (Triton): 16 x 6 x (2 x 96 + 8)
        ({"state_content_bytes": 200, "kv_quant_mode": "FP8_PER_TOKEN_HEAD"}, 19_200),
        # NVFP4 (FlashInfer): 12 head slots of 48 + 6 bytes
        ({"num_head_slots": 12, "state_content_bytes": 54, "kv_quant_mode": "NVFP4"}, 10_368),
        # the published fields win: kv_quant_mode alone would give 19,200
        ({"state_content_bytes": 192, "kv_quant_mode": "FP8_PER_TOKEN_HEAD"}, 18_432),
        # num_head_slots alone: the state content stays the dense (96 + 96) x 1
        ({"num_head_slots": 3}, 16 * 3 * 192),
    ],
)
def test_published_fields_give_vllms_page(fields: dict[str, Any], page: int) -> None:
    spec = FullAttentionSpec(16, num_kv_heads=6, head_size=96, dtype="uint8", **fields)
    assert spec.page_size_bytes == spec.unpadded_page_size_bytes == page


def test_without_the_fields_the_kv_quant_mode_formula_gives_the_page() -> None:
    spec = FullAttentionSpec(16, num_kv_heads=6, head_size=96, dtype="uint8", kv_quant_mode="NVFP4")
    assert spec.page_size_bytes == 16 * 6 * 2 * (48 + 6)
    assert spec.fallback_state_layout() == (6, 108)
    assert not spec.publishes_page


def test_mla_pages_from_published_fields_are_aligned() -> None:
    v32 = MLAAttentionSpec(64, num_kv_heads=1, head_size=576, dtype="uint8", state_content_bytes=656)
    assert v32.page_size_bytes == 41_984
    v4 = SlidingWindowMLASpec(
        64,
        num_kv_heads=1,
        head_size=512,
        dtype="uint8",
        sliding_window=128,
        alignment=576,
        state_content_bytes=584,
    )
    assert (v4.unpadded_page_size_bytes, v4.page_size_bytes) == (37_376, 37_440)
    compressed = MLAAttentionSpec(
        256,
        num_kv_heads=1,
        head_size=512,
        dtype="uint8",
        compress_ratio=4,
        alignment=576,
        state_content_bytes=584,
    )
    assert compressed.page_size_bytes == 37_440


@pytest.mark.parametrize("field", ["num_head_slots", "state_content_bytes"])
@pytest.mark.parametrize("value", [0, -3, 1.5, True, "8", 2**70])
def test_invalid_published_fields_are_refused_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(SpecError, match=rf"FullAttentionSpec\.{field} = "):
        FullAttentionSpec(16, num_kv_heads=2, head_size=64, dtype="bfloat16", **{field: value})


def test_published_fields_are_normalised_to_int() -> None:
    numpy = pytest.importorskip("numpy")
    spec = FullAttentionSpec(
        16, num_kv_heads=2, head_size=64, dtype="bfloat16", state_content_bytes=numpy.int64(9)
    )
    assert type(spec.state_content_bytes) is int
    assert spec == FullAttentionSpec(
        16, num_kv_heads=2, head_size=64, dtype="bfloat16", state_content_bytes=9
    )


def test_a_published_page_too_large_for_a_tensor_is_refused() -> None:
    with pytest.raises(SpecError, match="more than 9223372036854775807"):
        FullAttentionSpec(
            1 << 20, num_kv_heads=1 << 20, head_size=64, dtype="bfloat16", state_content_bytes=1 << 40
        )


def test_local_attention_stored_as_full_keeps_the_published_page() -> None:
    swa = SlidingWindowSpec(
        16, num_kv_heads=6, head_size=96, dtype="uint8", sliding_window=64, state_content_bytes=200
    )
    full = swa.full_attention_form(32)
    assert (full.state_content_bytes, full.page_size_bytes) == (200, 2 * swa.page_size_bytes)


# -- round trips -----------------------------------------------------------------------------
SPECS: list[KVCacheSpec] = [
    FullAttentionSpec(16, num_kv_heads=6, head_size=96, dtype="uint8", kv_quant_mode="NVFP4", num_head_slots=12, state_content_bytes=54),
    SlidingWindowSpec(16, num_kv_heads=6, head_size=96, dtype="uint8", sliding_window=64, state_content_bytes=200),
    SlidingWindowMLASpec(
        64, num_kv_heads=1, head_size=512, dtype="uint8", sliding_window=128, alignment=576,
        cache_dtype_str="fp8_ds_mla", model_version="deepseek_v4", state_content_bytes=584,
    ),
]  # fmt: skip


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.type_name)
def test_spec_round_trips_through_its_dict(spec: KVCacheSpec) -> None:
    data = spec.to_dict()
    assert data.get("state_content_bytes") == spec.state_content_bytes
    again = kvrules.spec_from_dict(json.loads(json.dumps(data)))
    assert again == spec
    assert again.page_size_bytes == spec.page_size_bytes


def test_model_file_carries_the_fields(tmp_path: Path) -> None:
    layers = {f"model.layers.{i}": spec.to_dict() for i, spec in enumerate(SPECS)}
    path = tmp_path / "quantized.json"
    path.write_text(json.dumps({"layers": layers}))
    model = load_model_file(path)
    assert list(model.specs.values()) == SPECS


def test_a_plan_records_the_fields_and_round_trips() -> None:
    case = load_case("quantized/c10c_nvfp4_draft_bf16")
    plan = Planner("vllm").plan(case.workers, case.memory, case.config)
    data = json.loads(plan.to_json())
    assert any(s.get("num_head_slots") for s in data["specs"].values())
    assert kvrules.Plan.from_dict(data).to_dict() == plan.to_dict()


# -- the shared quantized cases ----------------------------------------------------------------
@pytest.mark.parametrize("name", QUANTIZED)
def test_the_kv_quant_mode_formula_plans_the_quantized_cases_alike(name: str) -> None:
    """Without the published fields kvrules' ``kv_quant_mode`` formula gives the same pages and
    the same plan (cases/README.md)."""
    case = load_case(name, published=False)
    assert not any(getattr(s, "publishes_page", False) for s in case.all_specs.values())
    plan = Planner("vllm").plan(case.workers, case.memory, case.config)
    for layer, triple in expected_layer_specs(case.answer).items():
        assert kv_triple(plan.specs[layer]) == triple, layer
    assert plan.num_blocks == case.answer["scheduler_num_blocks"]
    assert math.isclose(plan.max_concurrency, case.answer["max_concurrency"], rel_tol=1e-9)


# -- conversion to and from vLLM 0.28 ---------------------------------------------------------
def _full(**kw: Any) -> Any:
    args = {"block_size": 16, "num_kv_heads": 6, "head_size": 96, "dtype": torch.uint8} | kw
    return vs.FullAttentionSpec(**args)


Q = vs.KVQuantMode
CUSTOMISED = {
    "dense-bf16": _full(dtype=torch.bfloat16),
    "fp8-per-token-head (Triton)": _full(kv_quant_mode=Q.FP8_PER_TOKEN_HEAD, state_content_bytes=200),
    "int8-per-token-head (Triton)": vs.FullAttentionSpec(
        block_size=16, num_kv_heads=6, head_size=96, dtype=torch.int8,
        kv_quant_mode=Q.INT8_PER_TOKEN_HEAD, state_content_bytes=200,
    ),
    "nvfp4 (FlashInfer)": _full(kv_quant_mode=Q.NVFP4, num_head_slots=12, state_content_bytes=54),
    "nvfp4 not customised": _full(kv_quant_mode=Q.NVFP4),
    "swa fp8-per-token-head": vs.SlidingWindowSpec(
        block_size=16, num_kv_heads=6, head_size=96, dtype=torch.uint8, sliding_window=64,
        kv_quant_mode=Q.FP8_PER_TOKEN_HEAD, state_content_bytes=200,
    ),
    "dsv32 fp8_ds_mla": vs.MLAAttentionSpec(
        block_size=64, num_kv_heads=1, head_size=576, dtype=torch.uint8, cache_dtype_str="fp8_ds_mla",
        state_content_bytes=656,
    ),
    "dsv4 fp8_ds_mla aligned": vs.SlidingWindowMLASpec(
        block_size=64, num_kv_heads=1, head_size=512, dtype=torch.uint8, sliding_window=128,
        cache_dtype_str="fp8_ds_mla", model_version="deepseek_v4", alignment=576,
        state_content_bytes=584, page_size_padded=37_440,
    ),
    # the issue's 1,000-layer DeepSeek-V4-like model: bf16 pages, cache_dtype_str not published
    "dsv4-like bf16 (issue 15)": vs.MLAAttentionSpec(
        block_size=256, num_kv_heads=1, head_size=512, dtype=torch.bfloat16, compress_ratio=4,
        cache_dtype_str="fp8_ds_mla", model_version="deepseek_v4",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CUSTOMISED))
def test_a_customised_vllm_spec_converts_both_ways_without_loss(name: str) -> None:
    spec = CUSTOMISED[name]
    kv = kv_vllm.from_vllm_spec(spec, layer="model.layers.0")
    assert kv.page_size_bytes == spec.page_size_bytes
    back = kv_vllm.to_vllm_spec(kv, classes=CLASSES)
    assert back == spec
    assert kv_vllm.from_vllm_spec(back) == kv


def test_the_issue_dsv4_page_is_vllms_65536_bytes() -> None:
    kv = kv_vllm.from_vllm_spec(CUSTOMISED["dsv4-like bf16 (issue 15)"])
    assert kv.page_size_bytes == 65_536
    assert kv.to_dict()["state_content_bytes"] == 1024  # the dense bf16 latent, written out


KVRULES_SPECS: list[KVCacheSpec] = [
    FullAttentionSpec(16, num_kv_heads=6, head_size=96, dtype="uint8", kv_quant_mode="FP8_PER_TOKEN_HEAD"),
    FullAttentionSpec(16, num_kv_heads=6, head_size=96, dtype="uint8", kv_quant_mode="NVFP4"),
    FullAttentionSpec(16, num_kv_heads=6, head_size=96, dtype="uint8", kv_quant_mode="INT4_PER_TOKEN_HEAD"),
    MLAAttentionSpec(64, num_kv_heads=1, head_size=576, dtype="uint8", cache_dtype_str="fp8_ds_mla"),
    MLAAttentionSpec(
        256, num_kv_heads=1, head_size=512, dtype="uint8", compress_ratio=4, cache_dtype_str="fp8_ds_mla",
        model_version="deepseek_v4",
    ),
    *SPECS,
]  # fmt: skip


@pytest.mark.parametrize("spec", KVRULES_SPECS, ids=lambda s: f"{s.type_name}")
def test_a_kvrules_quantized_spec_reaches_vllm_with_its_page(spec: KVCacheSpec) -> None:
    """kvrules emits the page through the published fields, so vLLM 0.28 (which ignores
    ``kv_quant_mode``) computes the same page, and the way back restores the spec (published
    values that the ``kv_quant_mode`` formula gives anyway come back unset)."""
    assert isinstance(spec, kvrules.AttentionSpec)
    out = kv_vllm.to_vllm_spec(spec, layer="model.layers.0", classes=CLASSES)
    assert out.page_size_padded is not None or out.page_size_bytes == spec.unpadded_page_size_bytes
    expected = spec
    if spec.publishes_page and spec.state_layout() == spec.fallback_state_layout():
        expected = spec.evolve(num_head_slots=None, state_content_bytes=None)
    assert kv_vllm.from_vllm_spec(out) == expected
    assert expected.page_size_bytes == spec.page_size_bytes


def test_a_page_vllm_cannot_express_is_refused_naming_the_layer() -> None:
    spec = MLAAttentionSpec(
        64, num_kv_heads=1, head_size=576, dtype="uint8", cache_dtype_str="fp8_ds_mla", compress_ratio=4
    )  # DeepSeek-V3.2's 656 B per token of the whole block, but a quarter of the tokens stored
    with pytest.raises(SpecError, match=r"layer 'model.layers.7'.*num_head_slots"):
        kv_vllm.to_vllm_spec(spec, layer="model.layers.7", classes=CLASSES)


def _dsv4_like_vllm(layers: int) -> dict[str, Any]:
    """The c5c DeepSeek-V4-like pattern (C4 attention + its indexer, C128 attention), as vLLM
    stand-in specs with ``fp8_ds_mla`` named but not published (the issue's benchmark model)."""
    c5c = json.loads((CASES_DIR / "c5c_dsv4_like.json").read_text())["layers"]
    pattern = [
        (name.split(".", 3)[3], data) for name, data in c5c.items() if name.startswith("model.layers.0.")
    ]
    out: dict[str, Any] = {}
    for index in range(layers // len(pattern)):
        for suffix, data in pattern:
            fields = {k: v for k, v in data.items() if k not in ("type", "dtype", "model_version")}
            cls = vs.SlidingWindowMLASpec if data["type"] == "sliding_window_mla" else vs.MLAAttentionSpec
            out[f"model.layers.{index}.{suffix}"] = cls(
                **fields, dtype=torch.bfloat16, cache_dtype_str="fp8_ds_mla", model_version="deepseek_v4"
            )
    return out


def test_the_1000_layer_dsv4_like_model_converts_and_plans() -> None:
    vllm_specs = _dsv4_like_vllm(1000)
    assert len(vllm_specs) == 1000
    specs = kv_vllm.from_vllm_specs(vllm_specs)
    for name, spec in specs.items():
        assert spec.page_size_bytes == vllm_specs[name].page_size_bytes, name
    plan = Planner("vllm").plan(specs, 64 << 30, EngineConfig(max_model_len=4096))
    assert sorted(n for g in plan.groups for n in g.layer_names) == sorted(specs)
    assert plan.num_blocks > 0


def test_equal_vllm_specs_are_converted_once_and_shared() -> None:
    vllm_specs = _dsv4_like_vllm(1000)
    specs = kv_vllm.from_vllm_specs(vllm_specs)
    assert specs["model.layers.0.c4.attn"] is specs["model.layers.249.c4.attn"]
    assert len({id(s) for s in specs.values()}) == 4
    back = kv_vllm.to_vllm_specs(specs, classes=CLASSES)
    assert back == vllm_specs


def test_a_field_outside_equality_still_tells_specs_apart() -> None:
    """A field with ``compare=False`` (vLLM 0.33's ``is_draft``) takes part in the conversion
    memo: a non-default value is still refused, naming its own layer."""
    import dataclasses

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class FullAttentionSpec(vs.FullAttentionSpec):
        is_draft: bool = dataclasses.field(default=False, compare=False)

    target = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.bfloat16)
    draft = dataclasses.replace(target, is_draft=True)
    assert target == draft
    with pytest.raises(SpecError, match=r"layer 'draft.layers.0'.*is_draft"):
        kv_vllm.from_vllm_specs({"model.layers.0": target, "draft.layers.0": draft})
