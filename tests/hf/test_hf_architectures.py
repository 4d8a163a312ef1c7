"""Every built-in architecture: layer counts by spec type, page bytes, Mamba shapes, block sizes.

Expected numbers are re-derived here from formulas.md §2, §3.3 and §5 (the comments show the
arithmetic); the ``vllm`` strategy set is used so ``hybrid-align`` is vLLM's rule exactly.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from kvrules import ConfigError, ModelFileError
from kvrules.hf import HFOptions, build_hf_model
from kvrules.hf.examples import hf_example_names, load_hf_example_info
from kvrules.hf.mamba import extra_groups_for_head_shards, gated_delta_net_state_shape, mamba2_state_shape
from kvrules.specs import KVCacheSpec, KVQuantMode, MambaSpec


def build(config: dict[str, Any], draft: Any = None, **options: Any) -> dict[str, KVCacheSpec]:
    return build_hf_model(config, draft, HFOptions(**options), strategies="vllm").specs


def counts(specs: dict[str, KVCacheSpec]) -> dict[str, int]:
    return dict(Counter(s.type_name for s in specs.values()))


def first(specs: dict[str, KVCacheSpec], type_name: str) -> KVCacheSpec:
    return next(s for s in specs.values() if s.type_name == type_name)


def example(name: str, **overrides: Any) -> dict[str, KVCacheSpec]:
    ex = load_hf_example_info(name, overrides)
    return build_hf_model(ex.config, ex.draft, ex.options, strategies="vllm").specs


def qwen3_next(**overrides: Any) -> dict[str, KVCacheSpec]:
    """Qwen3-Coder-Next without its draft."""
    values = {"num_speculative_tokens": 0, "kv_cache_dtype": "auto", **overrides}
    ex = load_hf_example_info("hf-qwen3-coder-next", values)
    return build_hf_model(ex.config, None, ex.options, strategies="vllm").specs


LLAMA_3_1_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}


# -- dense ---------------------------------------------------------------------------------
def test_llama_full_attention_head_from_hidden_size() -> None:
    specs = build(LLAMA_3_1_8B)
    assert counts(specs) == {"full_attention": 32}
    spec = specs["model.layers.0.self_attn.attn"]
    assert (spec.num_kv_heads, spec.head_size, spec.dtype) == (8, 128, "bfloat16")  # type: ignore[attr-defined]
    assert spec.page_size_bytes == 65_536  # 16 * 8 * (128 + 128) * 2
    assert first(build(LLAMA_3_1_8B, kv_cache_dtype="fp8"), "full_attention").page_size_bytes == 32_768


@pytest.mark.parametrize(
    ("kv", "page", "mode"),
    [
        ("fp8_e5m2", 32_768, KVQuantMode.FP8_PER_TENSOR),
        ("fp8_per_token_head", 33_792, KVQuantMode.FP8_PER_TOKEN_HEAD),  # 32768 + 2 * 16 * 8 * 4 scales
        ("int8_per_token_head", 33_792, KVQuantMode.INT8_PER_TOKEN_HEAD),
        ("nvfp4", 18_432, KVQuantMode.NVFP4),  # 16 * 8 * 2 * (64 + 8): 1152 B/token
    ],
)
def test_kv_cache_dtypes(kv: str, page: int, mode: KVQuantMode) -> None:
    spec = first(build(LLAMA_3_1_8B, kv_cache_dtype=kv), "full_attention")
    assert spec.page_size_bytes == page
    assert spec.kv_quant_mode is mode  # type: ignore[attr-defined]


@pytest.mark.parametrize(("tp", "heads"), [(1, 8), (2, 4), (4, 2), (8, 1), (16, 1), (32, 1)])
def test_kv_heads_per_rank(tp: int, heads: int) -> None:
    """max(1, kv_heads // tp); KV heads are replicated when tp > kv_heads."""
    spec = first(build(LLAMA_3_1_8B, tensor_parallel_size=tp), "full_attention")
    assert spec.num_kv_heads == heads  # type: ignore[attr-defined]


def test_qwen3_4b_draft_config() -> None:
    ex = load_hf_example_info("hf-qwen3-coder-next")
    specs = build_hf_model(ex.draft, None, HFOptions(), strategies="vllm").specs  # type: ignore[arg-type]
    assert counts(specs) == {"full_attention": 36}
    assert first(specs, "full_attention").page_size_bytes == 65_536  # 16 * 8 * 256 * 2


def test_qwen2_sliding_window_from_max_window_layers() -> None:
    config = {
        "model_type": "qwen2",
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "hidden_size": 1024,
        "use_sliding_window": True,
        "sliding_window": 4096,
        "max_window_layers": 6,
    }
    specs = build(config)
    assert counts(specs) == {"full_attention": 6, "sliding_window": 2}
    assert specs["model.layers.7.self_attn.attn"].sliding_window == 4096  # type: ignore[attr-defined]
    assert counts(build({**config, "use_sliding_window": False})) == {"full_attention": 8}


def test_mistral_layer_types() -> None:
    config = {
        "model_type": "mistral",
        "num_hidden_layers": 4,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "sliding_window": 4096,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    }
    assert counts(build(config)) == {"sliding_window": 2, "full_attention": 2}


# -- sliding window models ---------------------------------------------------------------------
@pytest.mark.parametrize(("kv", "page"), [("auto", 131_072), ("fp8", 65_536)])
def test_gemma3_27b(kv: str, page: int) -> None:
    specs = example("hf-gemma-3-27b", kv_cache_dtype=kv)
    assert counts(specs) == {"sliding_window": 52, "full_attention": 10}
    assert {s.page_size_bytes for s in specs.values()} == {page}  # 16 * 16 * 256 * e
    assert (
        specs["language_model.model.layers.5.self_attn.attn"].type_name == "full_attention"
    )  # (5 + 1) % 6 == 0
    assert specs["language_model.model.layers.0.self_attn.attn"].sliding_window == 1024  # type: ignore[attr-defined]


def test_gemma2_alternates() -> None:
    config = {
        "model_type": "gemma2",
        "num_hidden_layers": 42,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 256,
        "sliding_window": 4096,
    }
    specs = build(config)
    assert counts(specs) == {"sliding_window": 21, "full_attention": 21}
    assert specs["model.layers.0.self_attn.attn"].type_name == "sliding_window"
    assert specs["model.layers.1.self_attn.attn"].type_name == "full_attention"
    assert first(specs, "sliding_window").page_size_bytes == 131_072  # 16 * 8 * 512 * 2


def test_gpt_oss_20b_with_eagle_draft() -> None:
    specs = example("hf-gpt-oss-20b-eagle")
    assert counts(specs) == {"sliding_window": 12, "full_attention": 13}
    assert specs["model.layers.0.attn.attn"].type_name == "sliding_window"
    assert specs["model.layers.1.attn.attn"].type_name == "full_attention"
    assert {s.page_size_bytes for s in specs.values()} == {32_768}  # 16 * 8 * 128 * 2
    draft = specs["draft.model.layers.0.self_attn.attn"]
    assert draft == specs["model.layers.1.attn.attn"]  # the EAGLE layer has the target's geometry


def test_llama4_chunked_every_fourth_global() -> None:
    config = {
        "architectures": ["Llama4ForConditionalGeneration"],
        "model_type": "llama4",
        "text_config": {
            "model_type": "llama4_text",
            "num_hidden_layers": 48,
            "num_attention_heads": 40,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "attention_chunk_size": 8192,
            "max_position_embeddings": 10485760,
        },
    }
    model = build_hf_model(config, None, HFOptions(), strategies="vllm")
    assert counts(model.specs) == {"chunked_local": 36, "full_attention": 12}
    assert model.specs["language_model.model.layers.3.self_attn.attn"].type_name == "full_attention"
    assert model.specs["language_model.model.layers.0.self_attn.attn"].attention_chunk_size == 8192  # type: ignore[attr-defined]
    assert first(model.specs, "chunked_local").page_size_bytes == 65_536
    assert model.engine["disable_hybrid_kv_cache_manager"] is True
    assert model.engine["max_model_len"] == 10485760


# -- MLA -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kv", "backend", "block", "page"),
    [
        ("auto", "triton-mla", 16, 18_432),  # 16 * 576 * 2
        ("auto", "auto", 64, 73_728),  # FlashMLA needs 64-token blocks
        ("fp8", "auto", 64, 36_864),
        ("fp8_ds_mla", "auto", 64, 41_984),  # 64 * 656
        ("auto", "cutlass-mla", 128, 147_456),
    ],
)
def test_deepseek_v3_mla(kv: str, backend: str, block: int, page: int) -> None:
    specs = example("hf-deepseek-v3", kv_cache_dtype=kv, attention_backend=backend, tensor_parallel_size=1)
    assert counts(specs) == {"mla": 62}  # 61 layers + the MTP layer
    spec = specs["model.layers.0.self_attn.attn"]
    assert (spec.num_kv_heads, spec.head_size, spec.block_size, spec.page_size_bytes) == (1, 576, block, page)  # type: ignore[attr-defined]
    assert specs["draft.model.layers.61.self_attn.attn"] == spec


def test_deepseek_v2_lite_tp_keeps_latent() -> None:
    config = {
        "model_type": "deepseek_v2",
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
    }
    specs = build(config, tensor_parallel_size=4)
    assert counts(specs) == {"mla": 27}
    assert first(specs, "mla").page_size_bytes == 73_728  # MLA's latent is not split over TP


# -- hybrids: Qwen3-Next / Qwen3.5 -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("tp", "conv", "ssm", "page"),
    [
        (1, (3, 8192), (32, 128, 128), 1_097_728),  # 3*8192*2 + 32*128*128*2
        (2, (3, 4096), (16, 128, 128), 548_864),
        (4, (3, 2048), (8, 128, 128), 274_432),
        (8, (3, 1024), (4, 128, 128), 137_216),
    ],
)
def test_qwen3_next_gdn_state_per_tp(tp: int, conv: tuple[int, ...], ssm: tuple[int, ...], page: int) -> None:
    specs = qwen3_next(tensor_parallel_size=tp)
    assert counts(specs) == {"mamba": 36, "full_attention": 12}
    mamba = specs["model.layers.0.linear_attn"]
    assert isinstance(mamba, MambaSpec)
    assert mamba.shapes == (conv, ssm)
    assert mamba.dtypes == ("bfloat16", "bfloat16")
    assert mamba.mamba_type == "gdn_attention"
    assert mamba.real_page_size_bytes == page
    assert specs["model.layers.3.self_attn.attn"].num_kv_heads == max(1, 2 // tp)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("tp", "kv", "block", "attn_page"),
    [
        (1, "auto", 544, 1_114_112),  # 16 * cdiv(1097728, 16 * 2048) = 544; Mamba padded +1.49 %
        (1, "fp8", 1072, 1_097_728),  # 16 * cdiv(1097728, 16 * 1024) = 1072; no padding
        (2, "auto", 544, 557_056),  # 1 KV head/rank: 1024 B/token
        (2, "fp8", 1072, 548_864),
        (4, "auto", 272, 278_528),  # KV heads replicated (1/rank), GDN halved again
        (4, "fp8", 544, 278_528),
        (8, "auto", 144, 147_456),
        (8, "fp8", 272, 139_264),
    ],
)
def test_qwen3_next_hybrid_block_size(tp: int, kv: str, block: int, attn_page: int) -> None:
    specs = qwen3_next(tensor_parallel_size=tp, kv_cache_dtype=kv)
    attn = specs["model.layers.3.self_attn.attn"]
    mamba = specs["model.layers.0.linear_attn"]
    assert attn.block_size == block and mamba.block_size == block  # 'align' mode
    assert attn.page_size_bytes == attn_page == mamba.page_size_bytes


@pytest.mark.parametrize(
    ("k", "fp8_block", "bf16_block"),
    [(0, 1072, 544), (1, 1088, 544), (2, 1104, 560), (3, 1120, 560), (4, 1136, 576)],
)
def test_speculative_tokens_add_conv_rows(k: int, fp8_block: int, bf16_block: int) -> None:
    fp8 = qwen3_next(kv_cache_dtype="fp8", num_speculative_tokens=k)
    mamba = fp8["model.layers.0.linear_attn"]
    assert isinstance(mamba, MambaSpec)
    assert mamba.shapes[0] == (3 + k, 8192)  # one conv row per speculative token: +16,384 B
    assert mamba.num_speculative_blocks == k
    assert fp8["model.layers.3.self_attn.attn"].block_size == fp8_block
    bf16 = qwen3_next(kv_cache_dtype="auto", num_speculative_tokens=k)
    assert bf16["model.layers.3.self_attn.attn"].block_size == bf16_block


def test_qwen3_next_fp32_ssm_state() -> None:
    mamba = qwen3_next(mamba_ssm_cache_dtype="float32")["model.layers.0.linear_attn"]
    assert isinstance(mamba, MambaSpec)
    assert mamba.dtypes == ("bfloat16", "float32")
    assert mamba.real_page_size_bytes == 2_146_304  # 49152 + 32*128*128*4


def test_qwen3_5_ssm_dtype_default_from_config() -> None:
    """Qwen3.5-4B-like: 4 KV heads x 256, fp8 KV, fp32 SSM from ``mamba_ssm_dtype`` -> 1056 tokens (log in §3.3)."""
    config = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": {
            "model_type": "qwen3_5_text",
            "num_hidden_layers": 32,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "full_attention_interval": 4,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 32,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "linear_conv_kernel_dim": 4,
            "mamba_ssm_dtype": "float32",
            "dtype": "bfloat16",
        },
    }
    specs = build(config, kv_cache_dtype="fp8")
    assert counts(specs) == {"mamba": 24, "full_attention": 8}
    mamba = specs["language_model.model.layers.0.linear_attn"]
    assert mamba.real_page_size_bytes == 2_146_304  # type: ignore[attr-defined]
    assert (
        specs["language_model.model.layers.3.self_attn.attn"].block_size == 1056
    )  # 16 * cdiv(2146304, 16 * 2048)
    # an explicit --mamba-ssm-cache-dtype wins over the config's default
    bf16 = build(config, kv_cache_dtype="fp8", mamba_ssm_cache_dtype="bfloat16")
    assert bf16["language_model.model.layers.0.linear_attn"].real_page_size_bytes == 1_097_728


# -- hybrids: Mamba2 / Mamba1 -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kv", "ssm", "page", "block"),
    [
        ("auto", "auto", 5_316_608, 1312),  # float32 SSM (NemotronH default): 16 * cdiv(5316608, 16 * 4096)
        ("auto", "bfloat16", 2_695_168, 672),  # matches vLLM #24280's 672 tokens
        ("fp8", "auto", 5_316_608, 2608),
        ("fp8", "bfloat16", 2_695_168, 1328),
    ],
)
def test_nemotron_nano_9b_v2(kv: str, ssm: str, page: int, block: int) -> None:
    specs = example("hf-nemotron-nano-9b-v2", kv_cache_dtype=kv, mamba_ssm_cache_dtype=ssm)
    assert counts(specs) == {"mamba": 27, "full_attention": 4}
    mamba = specs["model.layers.0.mixer"]
    assert isinstance(mamba, MambaSpec)
    assert mamba.shapes == ((3, 12288), (128, 80, 128))  # conv_dim = 128*80 + 2*8*128
    assert mamba.real_page_size_bytes == page
    assert mamba.mamba_type == "mamba2"
    attention = [n for n, s in specs.items() if s.type_name == "full_attention"]
    assert attention == [f"model.layers.{i}.mixer.attn" for i in (14, 21, 30, 39)]  # the '*' positions
    assert specs["model.layers.14.mixer.attn"].block_size == block
    assert mamba.page_size_bytes == specs["model.layers.14.mixer.attn"].page_size_bytes


@pytest.mark.parametrize(("kv", "block"), [("auto", 80), ("fp8", 160)])
def test_jamba(kv: str, block: int) -> None:
    specs = example("hf-jamba-v0.1", kv_cache_dtype=kv)
    assert counts(specs) == {"mamba": 28, "full_attention": 4}
    assert [n for n, s in specs.items() if s.type_name == "full_attention"] == [
        f"model.layers.{i}.attn" for i in (4, 12, 20, 28)
    ]
    mamba = specs["model.layers.0.mamba"]
    assert isinstance(mamba, MambaSpec)
    assert mamba.shapes == ((3, 8192), (8192, 16))
    assert mamba.real_page_size_bytes == 311_296  # 49152 + 262144
    assert mamba.mamba_type == "mamba1"
    assert specs["model.layers.4.attn"].block_size == block
    assert mamba.page_size_bytes == 327_680  # padded +5.26 % to the attention page


FALCON_H1 = {
    "model_type": "falcon_h1",
    "num_hidden_layers": 24,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "hidden_size": 1024,
    "mamba_d_ssm": 3072,
    "mamba_n_groups": 1,
    "mamba_n_heads": 48,
    "mamba_d_head": 64,
    "mamba_d_state": 256,
    "mamba_d_conv": 4,
}


def test_falcon_h1_attention_and_mamba_in_every_layer() -> None:
    specs = build(FALCON_H1)
    assert counts(specs) == {"full_attention": 24, "mamba": 24}
    assert "model.layers.0.attn" in specs and "model.24.mixer" in specs
    mamba = specs["model.24.mixer"]
    assert isinstance(mamba, MambaSpec)
    assert mamba.shapes == ((3, 3584), (48, 64, 256))  # conv_dim = 3072 + 2*1*256
    assert mamba.real_page_size_bytes == 1_594_368  # 21,504 + 1,572,864
    assert specs["model.layers.0.attn"].block_size == 1568  # 16 * cdiv(1594368, 16 * 1024)


def test_mamba2_group_extension_over_tp() -> None:
    """One group replicated so every rank holds the groups its heads need."""
    assert extra_groups_for_head_shards(1, 4) == 3
    assert extra_groups_for_head_shards(8, 4) == 0
    conv, ssm = mamba2_state_shape(4, 3072, 1, 48, 64, 256, 4)
    assert conv == (3, (3072 + 2 * 4 * 256) // 4)
    assert ssm == (12, 64, 256)
    mamba = build(FALCON_H1, tensor_parallel_size=4)["model.24.mixer"]
    assert mamba.shapes == (conv, ssm)  # type: ignore[attr-defined]


def test_gated_delta_net_shape_function() -> None:
    assert gated_delta_net_state_shape(1, 16, 32, 128, 128, 4, 2) == ((5, 8192), (32, 128, 128))


# -- MTP drafts -----------------------------------------------------------------------------------
def test_qwen3_next_mtp_draft() -> None:
    ex = load_hf_example_info("hf-qwen3-coder-next")
    model = build_hf_model(ex.config, "mtp", ex.options, strategies="vllm")
    assert counts(model.specs) == {"mamba": 36, "full_attention": 13}
    assert model.specs["draft.mtp.layers.0.self_attn.attn"] == model.specs["model.layers.3.self_attn.attn"]
    assert "extra_retained_tokens" not in model.engine  # one MTP module


def test_multi_module_mtp_retains_extra_tokens() -> None:
    config = {**LLAMA_3_1_8B, "num_nextn_predict_layers": 3}
    model = build_hf_model(config, "mtp", HFOptions(num_speculative_tokens=3), strategies="vllm")
    assert [n for n in model.specs if n.startswith("draft.")] == [
        f"draft.model.layers.{i}.self_attn.attn" for i in (32, 33, 34)
    ]
    assert model.engine["extra_retained_tokens"] == 2  # k - 1, as vLLM 0.28


def test_mtp_without_layers_is_an_error() -> None:
    with pytest.raises(ModelFileError, match="num_nextn_predict_layers"):
        build_hf_model(LLAMA_3_1_8B, "mtp", HFOptions())


def test_draft_kv_dtype_of_its_own() -> None:
    ex = load_hf_example_info("hf-qwen3-coder-next", {"draft_kv_cache_dtype": "auto"})
    specs = build_hf_model(ex.config, ex.draft, ex.options, strategies="vllm").specs
    assert specs["model.layers.3.self_attn.attn"].dtype == "uint8"  # type: ignore[attr-defined]
    assert specs["draft.model.layers.0.self_attn.attn"].dtype == "bfloat16"  # type: ignore[attr-defined]


# -- options --------------------------------------------------------------------------------------
def test_float32_checkpoint_served_in_bfloat16() -> None:
    spec = first(build({**LLAMA_3_1_8B, "torch_dtype": "float32"}), "full_attention")
    assert spec.dtype == "bfloat16"  # type: ignore[attr-defined]


def test_fp8_ds_mla_only_for_mla() -> None:
    with pytest.raises(ConfigError, match="fp8_ds_mla"):
        build(LLAMA_3_1_8B, kv_cache_dtype="fp8_ds_mla")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"kv_cache_dtype": "fp4"}, "kv_cache_dtype"),
        ({"tensor_parallel_size": 0}, "tensor_parallel_size"),
        ({"mamba_cache_mode": "some"}, "mamba_cache_mode"),
        ({"mamba_block_size": 64}, "mamba_cache_mode 'all'"),
        ({"attention_backend": "nope"}, "attention_backend"),
        ({"dtype": "float7"}, "dtype"),
    ],
)
def test_invalid_options(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        HFOptions(**options)


def test_backend_kind_must_match_model() -> None:
    with pytest.raises(ConfigError, match="MLA backend"):
        build(LLAMA_3_1_8B, attention_backend="flashmla")
    with pytest.raises(ConfigError, match="multiple of 64"):
        example("hf-deepseek-v3", block_size=32)


def test_user_block_size_is_kept_for_non_hybrid() -> None:
    assert first(build(LLAMA_3_1_8B, block_size=32), "full_attention").block_size == 32


def test_every_example_builds() -> None:
    assert len(hf_example_names()) >= 6
    for name in hf_example_names():
        assert example(name)


def test_architectures_are_asked_in_priority_then_name_order() -> None:
    model = build_hf_model(LLAMA_3_1_8B, None, HFOptions(), strategies="vllm")
    arch = [(d.rule, d.outcome) for d in model.decisions if d.stage == "arch"]
    declined = [name for name, outcome in arch if outcome == "declined"]
    assert declined == sorted(declined)  # the same priority (0): by name
    assert arch[-1] == ("llama", "applied")
    assert {"deepseek-mla", "gemma3", "glm4-moe", "jamba"} <= set(declined)
    assert "generic" not in declined  # the lowest priority: never asked once a named one applies
    applied = model.decisions[len(arch) - 1]
    assert applied.layer is None and "Built 32 KV-cache layers (32 full_attention)" in applied.reason
