"""State-space and linear-attention families (plugin ``ssm-architectures``; Nemotron-H as
transformers 5 saves it): layer names and kinds, state shapes and dtypes, pages, block sizes, TP
rules, refusals, and attention-free plans.

Every expected number is computed here by hand from vLLM's ``MambaStateShapeCalculator`` (conv
``(k - 1 [+ spec], dim / tp)``, dtypes bf16 = 2 bytes, fp32 = 4) and the hybrid block rule
``16 x cdiv(mamba_page, 16 x attention_bytes_per_token)`` (64 for MLA); the comments show the sums.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from fuzz.invariants import check_plan_invariants

from kvrules import ConfigError, EngineConfig, ModelFileError, Plan, Planner
from kvrules.hf import HFConfig, HFOptions, build_hf_model
from kvrules.hf.mamba import kda_state_shape, nemotron_h_pattern
from kvrules.specs import KVCacheSpec, MambaSpec
from kvrules_plugins.ssm_architectures import Mamba1, Mamba2, attention_indexes

GiB = 1 << 30


def build(
    config: dict[str, Any], draft: Any = None, *, reader: str = "auto", **options: Any
) -> dict[str, KVCacheSpec]:
    """The specs of ``config`` read by ``reader`` (``builtin`` where a test needs a field exactly
    as written, e.g. one transformers would reject before kvrules sees it)."""
    hf = HFConfig(config, "<test config>", reader=reader)
    return build_hf_model(hf, draft, HFOptions(**options), strategies="vllm").specs


def counts(specs: dict[str, KVCacheSpec]) -> dict[str, int]:
    return dict(Counter(s.type_name for s in specs.values()))


def state(specs: dict[str, KVCacheSpec], name: str) -> MambaSpec:
    spec = specs[name]
    assert isinstance(spec, MambaSpec)
    return spec


def plan(specs: dict[str, KVCacheSpec], memory: int = 8 * GiB, max_model_len: int = 4096) -> Plan:
    config = EngineConfig(max_model_len=max_model_len)
    result = Planner("vllm").plan(specs, memory, config)
    check_plan_invariants(result, specs, memory)
    return result


# -- Mamba1: Mamba-2.8B, Falcon-Mamba-7B (attention-free) -----------------------------------------
MAMBA_2_8B = {
    "architectures": ["MambaForCausalLM"],
    "model_type": "mamba",
    "hidden_size": 2560,
    "num_hidden_layers": 64,
    "state_size": 16,
    "conv_kernel": 4,
    "expand": 2,
    "torch_dtype": "bfloat16",
}

FALCON_MAMBA_7B = {
    "architectures": ["FalconMambaForCausalLM"],
    "model_type": "falcon_mamba",
    "hidden_size": 4096,
    "num_hidden_layers": 64,
    "state_size": 16,
    "conv_kernel": 4,
    "expand": 16,
    "intermediate_size": 8192,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    ("tp", "conv", "ssm", "page"),
    [
        (1, (3, 5120), (5120, 16), 194_560),  # 3*5120*2 = 30,720 + 5120*16*2 = 163,840
        (2, (3, 2560), (2560, 16), 97_280),
        (8, (3, 640), (640, 16), 24_320),  # 3*640*2 = 3,840 + 640*16*2 = 20,480
    ],
)
def test_mamba1_state_per_tp(tp: int, conv: tuple[int, ...], ssm: tuple[int, ...], page: int) -> None:
    specs = build(MAMBA_2_8B, tensor_parallel_size=tp)
    assert counts(specs) == {"mamba": 64}
    spec = state(specs, "backbone.layers.63.mixer")
    assert spec.shapes == (conv, ssm)
    assert spec.dtypes == ("bfloat16", "bfloat16")
    assert spec.mamba_type == "mamba1"
    assert spec.page_size_bytes == page


def test_falcon_mamba_intermediate_size_wins_over_expand() -> None:
    # transformers keeps the file's intermediate_size 8192 (not 16 x 4096) and vLLM reads it
    specs = build(FALCON_MAMBA_7B)
    spec = state(specs, "backbone.layers.0.mixer")
    assert spec.shapes == ((3, 8192), (8192, 16))
    assert spec.page_size_bytes == 311_296  # 3*8192*2 = 49,152 + 8192*16*2 = 262,144


def test_mamba1_ssm_dtype_option() -> None:
    spec = state(build(MAMBA_2_8B, mamba_ssm_cache_dtype="float32"), "backbone.layers.0.mixer")
    assert spec.dtypes == ("bfloat16", "float32")
    assert spec.page_size_bytes == 30_720 + 5120 * 16 * 4


def test_mamba1_tp_must_split_the_intermediate_size() -> None:
    with pytest.raises(ModelFileError, match=r"'intermediate_size'.*tensor_parallel_size 3"):
        build({**MAMBA_2_8B, "intermediate_size": 5120}, tensor_parallel_size=3)


def test_attention_free_plan_align_mode() -> None:
    # no attention layer: no hybrid alignment, block size stays 16; 64 layers of 194,560 B in one
    # group -> num_blocks = 8 GiB // 194,560 // 64 = 689; 'align' keeps 2 blocks per request
    specs = build(MAMBA_2_8B)
    assert {s.block_size for s in specs.values()} == {16}
    result = plan(specs)
    assert result.num_blocks == 8 * GiB // 194_560 // 64 == 689
    assert result.max_concurrency == 689 / 2
    assert len(result.workers[0].tensors) == 64


def test_attention_free_plan_none_mode() -> None:
    # 'none': one block of max_model_len tokens per request
    specs = build(MAMBA_2_8B, mamba_cache_mode="none", max_model_len=4096)
    assert {s.block_size for s in specs.values()} == {4096}
    result = plan(specs, max_model_len=4096)
    assert result.num_blocks == 689
    assert result.max_concurrency == 689
    assert result.capacity_tokens == 689 * 4096


def test_attention_free_model_has_no_mtp_layers() -> None:
    assert Mamba1().mtp_layer_count(HFConfig(MAMBA_2_8B, "x", reader="builtin")) == 0
    # a count in the file cannot be honoured: there is no attention layer to copy
    with pytest.raises(ModelFileError, match=r"'num_nextn_predict_layers' asks for MTP layers, but mamba"):
        build({**MAMBA_2_8B, "num_nextn_predict_layers": 1}, "mtp", reader="builtin")


def test_attention_free_layer_types_must_be_mamba() -> None:
    types = ["linear_attention"] * 63 + ["full_attention"]
    with pytest.raises(ModelFileError, match=r"'layer_types'.*entry 63 is 'full_attention'"):
        build({**MAMBA_2_8B, "layer_types": types}, reader="builtin")


# -- Mamba2: Mamba-Codestral-7B, Mamba2-2.7B (attention-free) ----------------------------------
CODESTRAL = {
    "architectures": ["Mamba2ForCausalLM"],
    "model_type": "mamba2",
    "hidden_size": 4096,
    "num_hidden_layers": 64,
    "num_heads": 128,
    "head_dim": 64,
    "state_size": 128,
    "n_groups": 8,
    "conv_kernel": 4,
    "expand": 2,
    "chunk_size": 256,
    "torch_dtype": "bfloat16",
}

MAMBA2_2_7B = {**CODESTRAL, "hidden_size": 2560, "num_heads": 80, "n_groups": 1}


@pytest.mark.parametrize(
    ("config", "tp", "conv", "ssm", "page"),
    [
        # conv dim 8192 + 2*8*128 = 10,240: 3*10240*2 = 61,440 + 128*64*128*2 = 2,097,152
        (CODESTRAL, 1, (3, 10240), (128, 64, 128), 2_158_592),
        (CODESTRAL, 8, (3, 1280), (16, 64, 128), 269_824),  # 7,680 + 262,144
        # one group, TP 2: groups extended to 2 -> 5120 + 2*2*128 = 5632 / 2 = 2816
        (MAMBA2_2_7B, 2, (3, 2816), (40, 64, 128), 672_256),  # 16,896 + 655,360
        # TP 8: groups extended to 8 -> 5120 + 2*8*128 = 7168 / 8 = 896
        (MAMBA2_2_7B, 8, (3, 896), (10, 64, 128), 169_216),  # 5,376 + 163,840
    ],
)
def test_mamba2_state_per_tp(
    config: dict[str, Any], tp: int, conv: tuple[int, ...], ssm: tuple[int, ...], page: int
) -> None:
    specs = build(config, tensor_parallel_size=tp)
    assert counts(specs) == {"mamba": 64}
    spec = state(specs, "backbone.layers.0.mixer")
    assert spec.shapes == (conv, ssm)
    assert spec.page_size_bytes == page


def test_mamba2_speculative_tokens_add_conv_rows() -> None:
    spec = state(build(CODESTRAL, num_speculative_tokens=2), "backbone.layers.0.mixer")
    assert spec.shapes[0] == (5, 10240)  # k - 1 + 2
    assert spec.page_size_bytes == 5 * 10240 * 2 + 2_097_152


@pytest.mark.parametrize(
    ("changes", "tp", "match"),
    [
        ({"num_heads": 100}, 1, r"'num_heads'.*100 heads of 64 make 6400.*8192"),
        ({}, 3, r"'num_heads' = 128 .*tensor_parallel_size 3"),
        ({}, 16, r"'n_groups' = 8 .*groups must be 1 or a multiple of 16"),
    ],
)
def test_mamba2_refusals_name_the_field(changes: dict[str, Any], tp: int, match: str) -> None:
    with pytest.raises(ModelFileError, match=match):
        build({**CODESTRAL, **changes}, tensor_parallel_size=tp, reader="builtin")


def test_mamba2_chunk_size_defaults_to_the_class_default() -> None:
    # mamba_cache_mode 'all' aligns to the chunk size: the file's, else Mamba2Config's 256
    arch = Mamba2()
    assert arch.mamba_chunk_size(HFConfig(CODESTRAL, "x", reader="builtin")) == 256
    assert arch.mamba_chunk_size(HFConfig({**CODESTRAL, "chunk_size": 128}, "x", reader="builtin")) == 128
    without = {k: v for k, v in CODESTRAL.items() if k != "chunk_size"}
    assert arch.mamba_chunk_size(HFConfig(without, "x", reader="builtin")) == 256


# -- Zamba2-2.7B: Mamba2 everywhere + a KV cache per hybrid layer -------------------------------
ZAMBA2_BLOCKS = ["mamba"] * 54
for _i in (6, 11, 17, 23, 28, 33, 38, 43, 49):
    ZAMBA2_BLOCKS[_i] = "hybrid"

ZAMBA2 = {
    "architectures": ["Zamba2ForCausalLM"],
    "model_type": "zamba2",
    "hidden_size": 2560,
    "num_hidden_layers": 54,
    "layers_block_type": ZAMBA2_BLOCKS,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "mamba_d_state": 64,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_ngroups": 1,
    "n_mamba_heads": 80,
    "num_mem_blocks": 2,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}


def test_zamba2_layers_and_pages() -> None:
    specs = build(ZAMBA2)
    assert counts(specs) == {"full_attention": 9, "mamba": 54}
    # vLLM names: attention model.attn.{j}; Mamba mixers {9 + i}.mixer
    assert {f"model.attn.{j}" for j in range(9)} <= set(specs)
    assert {f"{9 + i}.mixer" for i in range(54)} <= set(specs)
    attention = specs["model.attn.0"]
    # multi-head over 2 x 2560 channels: 32 KV heads of 5120 / 32 = 160
    assert (attention.num_kv_heads, attention.head_size) == (32, 160)  # type: ignore[attr-defined]
    mamba = state(specs, "9.mixer")
    # conv 5120 + 2*1*64 = 5248: 3*5248*2 = 31,488; ssm (80, 5120/80 = 64, 64): 655,360
    assert mamba.shapes == ((3, 5248), (80, 64, 64))
    assert mamba.real_page_size_bytes == 686_848
    # attention 32*160*2*2 = 20,480 B/token: block 16*cdiv(686,848, 327,680) = 48
    assert attention.block_size == mamba.block_size == 48
    assert attention.page_size_bytes == mamba.page_size_bytes == 48 * 20_480


def test_zamba2_tp_splits_query_and_kv_heads_alike() -> None:
    attention = build(ZAMBA2, tensor_parallel_size=8)["model.attn.0"]
    assert attention.num_kv_heads == 4  # type: ignore[attr-defined]


def test_zamba2_attention_indexes_follow_the_shared_blocks() -> None:
    # hybrid k uses block k % M; block b numbers from b * (H + M - 1) // M
    assert attention_indexes(9, 2) == [0, 5, 1, 6, 2, 7, 3, 8, 4]
    assert attention_indexes(9, 3) == [0, 3, 7, 1, 4, 8, 2, 5, 9]
    assert attention_indexes(4, 1) == [0, 1, 2, 3]


def test_zamba2_hybrid_layer_ids_must_agree() -> None:
    ids = [6, 11, 17, 23, 28, 33, 38, 43, 49]
    assert build({**ZAMBA2, "hybrid_layer_ids": ids}) == build(ZAMBA2)


def test_zamba2_hybrid_layer_ids_against_the_default_pattern() -> None:
    pytest.importorskip("transformers")
    ids = [6, 11, 17, 23, 28, 33, 38, 43, 49]
    # without layers_block_type transformers fills its default pattern (hybrid at 6, 12, ...) and
    # keeps the file's ids: vLLM would look up layer 11 in a map without it, so the file is refused
    without = {k: v for k, v in ZAMBA2.items() if k != "layers_block_type"}
    with pytest.raises(ModelFileError, match=r"'hybrid_layer_ids' is \[6, 11, .* must list the same layers"):
        build({**without, "hybrid_layer_ids": ids}, reader="transformers")


@pytest.mark.parametrize(
    ("changes", "reader", "match"),
    [
        ({"num_key_value_heads": 8}, "auto", r"'num_key_value_heads' is 8.*one KV head per query head"),
        ({"mamba_headdim": 32}, "auto", r"'mamba_headdim' is 32 but .* is 64"),
        ({"n_mamba_heads": 3}, "auto", r"'n_mamba_heads' = 3 does not divide"),
        # transformers refuses an unknown entry itself; the built-in reader leaves it to zamba2
        ({"layers_block_type": ["mamba"] * 53 + ["sliding"]}, "builtin", r"entry 53 is 'sliding'"),
    ],
)
def test_zamba2_refusals_name_the_field(changes: dict[str, Any], reader: str, match: str) -> None:
    with pytest.raises(ModelFileError, match=match):
        build({**ZAMBA2, **changes}, reader=reader)


# -- Granite 4.0-H Small -------------------------------------------------------------------------
GRANITE_TYPES = ["mamba"] * 40
for _i in (5, 15, 25, 35):
    GRANITE_TYPES[_i] = "attention"

GRANITE_4_H = {
    "architectures": ["GraniteMoeHybridForCausalLM"],
    "model_type": "granitemoehybrid",
    "hidden_size": 4096,
    "num_hidden_layers": 40,
    "layer_types": GRANITE_TYPES,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "mamba_n_heads": 128,
    "mamba_d_head": 64,
    "mamba_d_state": 128,
    "mamba_n_groups": 1,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_chunk_size": 256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    ("kv", "tp", "mamba_page", "block", "per_token"),
    [
        # conv 8192 + 2*128 = 8448: 50,688 + 128*64*128*2 = 2,097,152; attention 8*128*2*2
        ("auto", 1, 2_147_840, 528, 4096),  # 16*cdiv(2,147,840, 65,536) = 16*33
        ("fp8", 1, 2_147_840, 1056, 2048),  # 16*cdiv(2,147,840, 32,768) = 16*66
        # TP 8: group extended to 8 -> (8192 + 2048) / 8 = 1280: 7,680 + 16*64*128*2 = 262,144;
        # one KV head per rank: 512 B/token -> 16*cdiv(269,824, 8,192) = 16*33
        ("auto", 8, 269_824, 528, 512),
    ],
)
def test_granite_4_h(kv: str, tp: int, mamba_page: int, block: int, per_token: int) -> None:
    specs = build(GRANITE_4_H, kv_cache_dtype=kv, tensor_parallel_size=tp)
    assert counts(specs) == {"mamba": 36, "full_attention": 4}
    assert [n for n, s in specs.items() if s.type_name == "full_attention"] == [
        f"model.layers.{i}.self_attn.attn" for i in (5, 15, 25, 35)
    ]
    mamba = state(specs, "model.layers.0.mixer")
    attention = specs["model.layers.5.self_attn.attn"]
    assert mamba.real_page_size_bytes == mamba_page
    assert attention.block_size == mamba.block_size == block
    assert attention.page_size_bytes == mamba.page_size_bytes == block * per_token


def test_granite_new_and_old_spellings_agree() -> None:
    new = ["full_attention" if t == "attention" else "linear_attention" for t in GRANITE_TYPES]
    assert build({**GRANITE_4_H, "layer_types": new}) == build(GRANITE_4_H)
    with pytest.raises(ModelFileError, match=r"'layer_types' entry 0 is 'conv'"):
        build({**GRANITE_4_H, "layer_types": ["conv", *GRANITE_TYPES[1:]]}, reader="builtin")


def test_granite_head_size_is_hidden_over_heads() -> None:
    # vLLM's GraniteMoeHybridAttention uses hidden_size / num_attention_heads = 128
    assert build({**GRANITE_4_H, "head_dim": 128}) == build(GRANITE_4_H)
    with pytest.raises(ModelFileError, match=r"'head_dim' is 64 but hidden_size / num_attention_heads"):
        build({**GRANITE_4_H, "head_dim": 64}, reader="builtin")


def test_granite_d_head_auto() -> None:
    specs = build({**GRANITE_4_H, "mamba_d_head": "auto"})
    assert state(specs, "model.layers.0.mixer").shapes[1] == (128, 64, 128)  # 8192 / 128


def test_granite_hybrid_plan() -> None:
    specs = build(GRANITE_4_H)
    result = plan(specs, memory=40 * GiB)
    # every page 2,162,688 B; 4 attention + 36 Mamba layers -> groups of 4: 1 + 9 groups, 4 tensors
    assert len(result.groups) == 10
    assert result.num_blocks == 40 * GiB // 2_162_688 // 4


# -- LFM2-1.2B: short convolutions ----------------------------------------------------------------
LFM2_TYPES = ["conv"] * 16
for _i in (2, 5, 8, 10, 12, 14):
    LFM2_TYPES[_i] = "full_attention"

LFM2 = {
    "architectures": ["Lfm2ForCausalLM"],
    "model_type": "lfm2",
    "hidden_size": 2048,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "conv_L_cache": 3,
    "layer_types": LFM2_TYPES,
    "max_position_embeddings": 128000,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    ("tp", "kv", "conv", "page"),
    [
        # conv (3 - 1, 2048) bf16 = 8,192; attention 8*64*2*2 = 2,048 B/token -> block 16
        (1, "auto", (2, 2048), 32_768),
        (2, "auto", (2, 1024), 16_384),  # 4 KV heads: 1,024 B/token
        (1, "fp8", (2, 2048), 16_384),
    ],
)
def test_lfm2_short_conv(tp: int, kv: str, conv: tuple[int, ...], page: int) -> None:
    specs = build(LFM2, tensor_parallel_size=tp, kv_cache_dtype=kv)
    assert counts(specs) == {"mamba": 10, "full_attention": 6}
    spec = state(specs, "model.layers.0.short_conv")
    assert spec.shapes == (conv,)  # a conv state only
    assert spec.dtypes == ("bfloat16",)
    assert spec.mamba_type == "short_conv"
    assert spec.real_page_size_bytes == conv[0] * conv[1] * 2
    assert spec.page_size_bytes == specs["model.layers.2.self_attn.attn"].page_size_bytes == page
    assert spec.block_size == 16


def test_lfm2_conv_dim_and_full_attn_idxs() -> None:
    config = {k: v for k, v in LFM2.items() if k != "layer_types"}
    specs = build({**config, "full_attn_idxs": [2, 5], "conv_dim": 1024}, reader="builtin")
    assert counts(specs) == {"mamba": 14, "full_attention": 2}
    assert state(specs, "model.layers.0.short_conv").shapes == ((2, 1024),)


def test_lfm2_refuses_all_mode() -> None:
    with pytest.raises(ConfigError, match="mamba_cache_mode 'all' is not supported for LFM2"):
        build(LFM2, mamba_cache_mode="all", mamba_block_size=256)


# -- Kimi-Linear-48B-A3B: KDA + MLA --------------------------------------------------------------
KIMI_LINEAR = {
    "architectures": ["KimiLinearForCausalLM"],
    "model_type": "kimi_linear",
    "hidden_size": 2304,
    "num_hidden_layers": 27,
    "num_attention_heads": 32,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "linear_attn_config": {
        "full_attn_layers": [4, 8, 12, 16, 20, 24, 27],
        "kda_layers": [n for n in range(1, 28) if n not in (4, 8, 12, 16, 20, 24, 27)],
        "num_heads": 32,
        "head_dim": 128,
        "short_conv_kernel_size": 4,
    },
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    ("tp", "kv", "conv", "heads", "block", "per_token"),
    [
        # KDA conv 3*32*128 = 12,288: 3*12288*2 = 73,728; recurrent 32*128*128*4 = 2,097,152
        # MLA 576 * 2 = 1,152 B/token: 64*cdiv(2,170,880, 73,728) = 64*30
        (1, "auto", (3, 12288), 32, 1920, 1152),
        (1, "fp8", (3, 12288), 32, 3776, 576),  # 64*cdiv(2,170,880, 36,864) = 64*59
        # TP 8: 9,216 + 4*128*128*4 = 262,144 = 271,360; the latent is not split
        (8, "auto", (3, 1536), 4, 256, 1152),  # 64*cdiv(271,360, 73,728) = 64*4
    ],
)
def test_kimi_linear(tp: int, kv: str, conv: tuple[int, ...], heads: int, block: int, per_token: int) -> None:
    specs = build(KIMI_LINEAR, tensor_parallel_size=tp, kv_cache_dtype=kv)
    assert counts(specs) == {"mamba": 20, "mla": 7}
    assert [n for n, s in specs.items() if s.type_name == "mla"] == [
        f"model.layers.{i}.self_attn.attn" for i in (3, 7, 11, 15, 19, 23, 26)
    ]
    kda = state(specs, "model.layers.0.self_attn")
    assert kda.shapes == (conv, (heads, 128, 128))
    assert kda.real_page_size_bytes == conv[0] * conv[1] * 2 + heads * 128 * 128 * 4
    mla = specs["model.layers.3.self_attn.attn"]
    assert mla.head_size == 576  # type: ignore[attr-defined]
    assert mla.block_size == kda.block_size == block
    assert mla.page_size_bytes == kda.page_size_bytes == block * per_token


def test_kimi_linear_recurrent_state_is_always_float32() -> None:
    kda = state(build(KIMI_LINEAR, mamba_ssm_cache_dtype="bfloat16"), "model.layers.0.self_attn")
    assert kda.dtypes == ("bfloat16", "float32")


def test_kimi_linear_speculative_tokens_add_conv_rows() -> None:
    kda = state(build(KIMI_LINEAR, num_speculative_tokens=2), "model.layers.0.self_attn")
    assert kda.shapes[0] == (5, 12288)


def test_kimi_linear_mtp_copies_the_mla_layer() -> None:
    specs = build({**KIMI_LINEAR, "num_nextn_predict_layers": 1}, "mtp")
    draft = specs["draft.model.layers.27.self_attn.attn"]
    assert draft.type_name == "mla"
    assert draft.page_size_bytes == specs["model.layers.3.self_attn.attn"].page_size_bytes


def _kimi(**linear: Any) -> dict[str, Any]:
    return {**KIMI_LINEAR, "linear_attn_config": {**KIMI_LINEAR["linear_attn_config"], **linear}}  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("config", "tp", "match"),
    [
        (
            _kimi(kda_layers=list(range(0, 20))),
            1,
            r"'linear_attn_config.kda_layers' must list layer numbers from 1",
        ),
        (_kimi(kda_layers=[1, 2, 3, 4]), 1, r"kda_layers and full_attn_layers must split layers 1 to 27"),
        (
            {k: v for k, v in KIMI_LINEAR.items() if k != "linear_attn_config"},
            1,
            r"'linear_attn_config' is missing",
        ),
        (_kimi(head_dim=None), 1, r"'linear_attn_config.head_dim' is missing"),
        (_kimi(num_heads=30), 4, r"'linear_attn_config.num_heads' = 30 .*tensor_parallel_size 4"),
    ],
)
def test_kimi_linear_refusals_name_the_field(config: dict[str, Any], tp: int, match: str) -> None:
    with pytest.raises(ModelFileError, match=match):
        build(config, tensor_parallel_size=tp, reader="builtin")


def test_kda_state_shape() -> None:
    assert kda_state_shape(2, 32, 128, 4, 1) == ((4, 6144), (16, 128, 128))


# -- Nemotron-H as transformers 5 saves it -------------------------------------------------------
NEMOTRON_BLOCKS = (["mamba", "mlp"] * 3 + ["mamba", "attention", "mlp"]) * 2
NEMOTRON_H_T5 = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "hidden_size": 4096,
    "layers_block_type": NEMOTRON_BLOCKS,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "mamba_num_heads": 128,
    "mamba_head_dim": 64,
    "ssm_state_size": 128,
    "n_groups": 8,
    "conv_kernel": 4,
    "max_position_embeddings": 8192,
    "torch_dtype": "bfloat16",
}


def test_nemotron_h_layers_block_type_without_num_hidden_layers() -> None:
    specs = build(NEMOTRON_H_T5)
    assert counts(specs) == {"mamba": 8, "full_attention": 2}
    assert "model.layers.7.mixer.attn" in specs and "model.layers.16.mixer.attn" in specs
    mamba = state(specs, "model.layers.0.mixer")
    # conv 8192 + 2*8*128 = 10,240: 61,440 + 128*64*128*4 (fp32 SSM default) = 4,194,304
    assert mamba.real_page_size_bytes == 4_255_744
    assert mamba.block_size == 16 * -(-4_255_744 // (16 * 4096)) == 1040


def test_nemotron_h_pattern_forms_agree() -> None:
    # transformers 4's hybrid_override_pattern (with num_hidden_layers) builds the same model
    old = {k: v for k, v in NEMOTRON_H_T5.items() if k != "layers_block_type"}
    old.update(hybrid_override_pattern="M-M-M-M*-" * 2, num_hidden_layers=18)
    assert build(old) == build(NEMOTRON_H_T5)
    assert build(old, reader="builtin") == build(NEMOTRON_H_T5, reader="builtin")


def test_nemotron_h_pattern_helper_errors() -> None:
    with pytest.raises(ModelFileError, match=r"'layers_block_type' has 2 entries.*num_hidden_layers"):
        nemotron_h_pattern(
            HFConfig({"layers_block_type": ["mamba", "mlp"], "num_hidden_layers": 3}, "x", reader="builtin")
        )
    with pytest.raises(ModelFileError, match=r"'layers_block_type' entry 1 is 'conv'"):
        nemotron_h_pattern(HFConfig({"layers_block_type": ["mamba", "conv"]}, "x", reader="builtin"))
    with pytest.raises(ModelFileError, match="hybrid_override_pattern"):
        nemotron_h_pattern(HFConfig({}, "x", reader="builtin"))


def test_nemotron_h_mtp_layer() -> None:
    # vLLM builds one MTP layer of mtp_layers_block_type blocks (default attention + MoE): one KV cache
    specs = build({**NEMOTRON_H_T5, "num_nextn_predict_layers": 1}, "mtp")
    drafts = [n for n in specs if n.startswith("draft.")]
    assert drafts == ["draft.mtp.layers.0.mixer.attn"]
    assert specs[drafts[0]].page_size_bytes == specs["model.layers.7.mixer.attn"].page_size_bytes
    two = build(
        {**NEMOTRON_H_T5, "num_nextn_predict_layers": 1, "mtp_layers_block_type": ["full_attention"] * 2},
        "mtp",
    )
    assert [n for n in two if n.startswith("draft.")] == [
        "draft.mtp.layers.0.mixer.attn",
        "draft.mtp.layers.1.mixer.attn",
    ]


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        (
            {"num_nextn_predict_layers": 2},
            r"'num_nextn_predict_layers' is 2; vLLM's Nemotron-H MTP supports exactly 1",
        ),
        (
            {"num_nextn_predict_layers": 1, "mtp_layers_block_type": ["linear_attention", "moe"]},
            r"'mtp_layers_block_type' contains 'linear_attention'",
        ),
    ],
)
def test_nemotron_h_mtp_refusals(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(ModelFileError, match=match):
        build({**NEMOTRON_H_T5, **changes}, "mtp")
