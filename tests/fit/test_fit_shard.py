"""Weights per GPU under TP 2 and 8 for one dense, one MoE and one MLA model, under TP 2 for one
hybrid with shared blocks (Zamba2), and gpt-oss's mxfp4 experts as each vLLM MoE backend pads and stores them.

Every expected figure is worked out by hand in the comments from the config's numbers and vLLM's
sharding rules (column/row-parallel linears divided by TP, norms and routers and
``ReplicatedLinear`` whole, the vocabulary padded to a multiple of 64 then divided); none comes
from kvrules' code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvrules.errors import ConfigError
from kvrules.sizing.shard import MXFP4_BACKENDS, MXFP4_BIAS_BYTES, mxfp4_backend_for, shard_weights

HF = Path(__file__).parent.parent / "data" / "hf"

# Llama-3.1-8B: hidden 4096, 32 layers, 32 heads, 8 KV heads, head_dim 128, intermediate 14336,
# vocab 128256 (= 2004 * 64, no padding), untied, bf16.
#   per layer, divided by TP: q 4096*4096 = 16,777,216; k, v 1024*4096 = 4,194,304 each;
#   o 16,777,216; gate, up, down 14336*4096 = 58,720,256 each  -> 218,103,808
#   per layer, whole: two RMSNorms 2*4096 = 8,192
#   embedding and lm_head 128256*4096 = 525,336,576 each, divided; final norm 4,096 whole
#   divided: 32*218,103,808 + 2*525,336,576 = 8,029,995,008; whole: 32*8,192 + 4,096 = 266,240
#   TP 2: 8,029,995,008/2 + 266,240 = 4,015,263,744;  TP 8: /8 + 266,240 = 1,004,015,616
# MoE, Mixtral-8x7B: as above but vocab 32000 (= 500 * 64), 8 experts, router 8*4096 whole.
#   per layer divided: attention 2*16,777,216 + 2*4,194,304 = 41,943,040;
#   experts 8*3*58,720,256 = 1,409,286,144  -> 1,451,229,184; whole: 8,192 + 32,768 = 40,960
#   divided: 32*1,451,229,184 + 2*32000*4096 = 46,701,477,888; whole: 32*40,960 + 4,096 = 1,314,816
#   TP 2: 23,350,738,944 + 1,314,816 = 23,352,053,760;  TP 8: 5,837,684,736 + 1,314,816 = 5,838,999,552
# MLA, DeepSeek-V2-Lite: hidden 2048, 27 layers, 16 heads, no q LoRA, kv_lora 512, nope 128,
# rope 64, v 128, layer 0 dense (intermediate 10944), 26 MoE layers (64 experts of 1408,
# 2 shared), vocab 102400 (= 1600 * 64).
#   attention divided: q 16*192*2048 = 6,291,456; kv_b 16*256*512 = 2,097,152; o 2048*2048
#   = 4,194,304 -> 12,582,912; whole: kv_a_proj_with_mqa 576*2048 = 1,179,648, kv_a_layernorm
#   512, two norms 4,096 -> 1,184,256
#   dense MLP 3*10944*2048 = 67,239,936; experts 64*3*1408*2048 = 553,648,128 and shared
#   3*2816*2048 = 17,301,504 per MoE layer, divided; router 64*2048 = 131,072 whole
#   divided: 27*12,582,912 + 67,239,936 + 26*570,949,632 + 2*102400*2048 = 15,671,099,392
#   whole: 27*1,184,256 + 26*131,072 + 2,048 = 35,384,832
#   TP 2: 7,835,549,696 + 35,384,832 = 7,870,934,528;  TP 8: 1,958,887,424 + 35,384,832 = 1,994,272,256
# Hybrid, Zamba2-2.7B (class defaults where the stored config is trimmed): hidden 2560, 54 Mamba 2
# mixers (inner 5120, 80 heads, 1 group of state 64, conv 4), 9 hybrid uses of 2 shared blocks, vocab
# 32000 (= 500 * 64), tied. vLLM's MambaMixer2 divides z, x and dt by TP and, with 1 group for 2
# ranks, gives each rank the whole group's B and C.
#   per mixer on a rank: input_layernorm 2560; in_proj (2560 + 2560 + 64 + 64 + 40 = 5288) x 2560 =
#   13,537,280; conv1d (2560 + 64 + 64 = 2688) x 4 = 10,752 and its bias 2,688; dt_bias, A_log, D
#   3*40 = 120; norm 2560; out_proj 2560 x 2560 = 6,553,600 -> 20,109,560, x54 = 1,085,916,240
#   hybrid linear (replicated) 2560*2560, x9 = 58,982,400
#   shared block: norms 5120 + 2560 whole; q, k, v (32 heads of 160 / 2) 3 * 2560*5120 =
#   39,321,600; o 2560*2560 = 6,553,600; gate_up 10240*2560 = 26,214,400; down 2560*5120 =
#   13,107,200 -> 85,204,480, x2 = 170,408,960
#   MLP adapter per use (A and B column-parallel): 64*2560 + 10240*128 = 1,474,560, x9 = 13,271,040
#   embedding 16000*2560 = 40,960,000; final norm 2560
#   TP 2: 1,085,916,240 + 58,982,400 + 170,408,960 + 13,271,040 + 40,960,000 + 2,560 = 1,369,541,200
EXPECTED = {
    ("meta-llama__Llama-3.1-8B", 2): 4_015_263_744,
    ("meta-llama__Llama-3.1-8B", 8): 1_004_015_616,
    ("mistralai__Mixtral-8x7B-v0.1", 2): 23_352_053_760,
    ("mistralai__Mixtral-8x7B-v0.1", 8): 5_838_999_552,
    ("deepseek-ai__DeepSeek-V2-Lite", 2): 7_870_934_528,
    ("deepseek-ai__DeepSeek-V2-Lite", 8): 1_994_272_256,
    ("Zyphra__Zamba2-2.7B", 2): 1_369_541_200,
}


def _config(name: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((HF / name / "config.json").read_text(encoding="utf-8"))
    if name == "deepseek-ai__DeepSeek-V2-Lite":
        # the stored file keeps only the KV fields; the checkpoint's dense MLP width is 10944
        config["intermediate_size"] = 10944
    return config


@pytest.mark.parametrize(("name", "tp"), sorted(EXPECTED))
def test_params_per_gpu(name: str, tp: int) -> None:
    sharded = shard_weights(_config(name), tp=tp)
    assert len(sharded.ranks) == tp
    for rank in sharded.ranks:
        assert rank.params == EXPECTED[name, tp]
        assert rank.weight_bytes == 2 * EXPECTED[name, tp]  # bf16 checkpoints


def test_llama_rope_cache_counted_with_the_weights() -> None:
    # cos_sin_cache: max_position_embeddings 131072 * rotary dim 128 * 2 bytes = 33,554,432
    rank = shard_weights(_config("meta-llama__Llama-3.1-8B"), tp=2).rank(0, 0)
    assert rank.buffer_bytes == 33_554_432


# gpt-oss-120b's mxfp4 experts: hidden H 2880, intermediate I 2880, 36 layers of 128 experts.
# Per expert and rank, with I' = I / tp rounded up to the backend's multiple and H' = H rounded up
# to its own: gate_up blocks 2I' x H'/2 bytes (two fp4 values a byte) and scales 2I' x H'/32 (one
# e8m0 byte per 32 values); down blocks H' x I'/2 and scales H' x I'/32; biases 2I' and H', in
# bf16 (Marlin, CUTLASS) or float32 (triton, TRT-LLM: process_weights_after_loading converts them).
# triton also keeps each scale tensor twice: the checkpoint's stays on the layer beside
# triton_kernels' swizzled copy, whose rows are padded to 256 and columns to 2 (its blocks, in the
# Hopper value layout, pad rows to 16 and bytes to 32: nothing for these sizes).
#   triton (I' to 64, H whole), TP 1: I' 2880 (45 * 64), H' 2880
#     gate_up 5760*1440 + 5760*90 + 5888*90 (5760 -> 23 * 256) + 5760*4
#     down    2880*1440 + 2880*90 + 3072*90 (2880 -> 12 * 256) + 2880*4 = 14,060,160 per expert
#   marlin (I' to 128, H' to 256), TP 1: I' 2944, H' 3072
#     5888*1536 + 5888*96 + 5888*2 + 3072*1472 + 3072*92 + 3072*2 = 14,431,744 per expert
#   triton, TP 2: I' 1440 -> 1472 (23 * 64), H' 2880
#     gate_up 2944*1440 + 2944*90 + 3072*90 (2944 -> 12 * 256) + 2944*4
#     down    2880*736 + 2880*46 + 3072*46 + 2880*4 = 7,197,568 per expert
#   marlin, TP 2: I' 1440 -> 1536 (12 * 128), H' 3072
#     3072*1536 + 3072*96 + 3072*2 + 3072*768 + 3072*48 + 3072*2 = 7,532,544 per expert
#   flashinfer-trtllm (I' and H' to 256), TP 1: I' 3072, H' 3072
#     6144*1536 + 6144*96 + 6144*4 + 3072*1536 + 3072*96 + 3072*4 = 15,077,376 per expert
# times 36 * 128 = 4,608 experts per rank (every rank holds every expert under TP).
GPT_OSS_EXPERTS = {
    ("triton", 1): 4608 * 14_060_160,
    ("marlin", 1): 4608 * 14_431_744,
    ("triton", 2): 4608 * 7_197_568,
    ("marlin", 2): 4608 * 7_532_544,
    ("flashinfer-trtllm", 1): 4608 * 15_077_376,
}


def _gpt_oss() -> dict[str, Any]:
    config = _config("openai__gpt-oss-120b")
    # the stored file keeps only the KV fields; the published config.json has intermediate_size 2880
    config["intermediate_size"] = 2880
    return config


@pytest.mark.parametrize(("backend", "tp"), sorted(GPT_OSS_EXPERTS))
def test_mxfp4_experts_padded_as_the_backend_pads_them(backend: str, tp: int) -> None:
    sharded = shard_weights(_gpt_oss(), tp=tp, mxfp4_backend=backend)
    for rank in sharded.ranks:
        assert rank.by_component["experts"] == GPT_OSS_EXPERTS[backend, tp]


def test_triton_holds_the_scales_twice_and_the_biases_in_float32() -> None:
    # against the checkpoint's bytes (blocks, one scale tensor, bf16 biases) at TP 1, per expert:
    # the swizzled scales 5888*90 + 3072*90 = 806,400 and the biases' two more bytes
    # (5760 + 2880) * 2 = 17,280; 4,608 experts: 3,795,517,440 bytes (3.53 GiB)
    triton = shard_weights(_gpt_oss(), mxfp4_backend="triton").rank()
    checkpoint = 4608 * (5760 * 1440 + 5760 * 90 + 5760 * 2 + 2880 * 1440 + 2880 * 90 + 2880 * 2)
    assert triton.by_component["experts"] - checkpoint == 4608 * (806_400 + 17_280) == 3_795_517_440
    # the whole GPU, worked out by hand in tests/fit/test_runtime_logs.py against vllm#33155
    assert triton.total_bytes == 69_077_887_616


def test_every_mxfp4_backend_says_how_it_keeps_the_biases() -> None:
    assert set(MXFP4_BIAS_BYTES) == set(MXFP4_BACKENDS)


def test_gpt_oss_rope_cache_is_float32() -> None:
    # vLLM's gpt_oss.py builds its yarn rope with dtype=torch.float32: 131072 positions * 64 * 4 bytes
    assert shard_weights(_gpt_oss()).rank().by_component["rope_cache"] == 33_554_432


def test_unknown_mxfp4_backend_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"mxfp4_backend='cutlass' must be one of triton, marlin"):
        shard_weights(_gpt_oss(), mxfp4_backend="cutlass")


@pytest.mark.parametrize(
    ("arch", "backend"),
    [
        ("sm80", "marlin"),
        ("sm86", "marlin"),
        ("sm89", "marlin"),
        ("sm90", "triton"),
        ("sm100", "flashinfer-trtllm"),
        ("gfx942", "rocm"),
        ("gfx950", "rocm-gfx950"),
        (None, "triton"),
    ],
)
def test_the_backend_vllm_picks_on_each_architecture(arch: str | None, backend: str) -> None:
    assert mxfp4_backend_for(arch) == backend


def test_an_unreadable_architecture_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"'hopper' must be smNN"):
        mxfp4_backend_for("hopper")
