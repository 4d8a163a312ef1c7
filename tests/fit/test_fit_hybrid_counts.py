"""Parameter counts of Zamba2, Kimi-Linear, LFM2-MoE and Qwen3.5 / Qwen3.5-MoE, tensor by tensor.

Every expected figure is worked out by hand in the comments from the config's numbers and the
tensor list of the model's code (transformers' ``modeling_zamba2.py``, ``modeling_lfm2_moe.py``,
``modeling_qwen3_5.py``, ``modeling_qwen3_5_moe.py``; Moonshot's ``modeling_kimi.py``); none comes
from kvrules' formulas. The stored Zamba2-2.7B and Kimi-Linear configs are trimmed
(``tests/data/hf/uncertain.json``): the fields they leave out take the config class's defaults,
which the derivations below use too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvrules.sizing.params import count_params

HF = Path(__file__).parent.parent / "data" / "hf"


def test_zamba2_2_7b() -> None:
    # hidden H 2560, 54 layers (9 hybrid), vocab 32000 (tied), 32 heads of 160 over the 2H input,
    # intermediate 4H = 10240, 2 shared blocks, adapter rank 128, no attention adapters;
    # Mamba 2: inner 2H = 5120, 80 heads, 1 group of state 64, conv 4.
    #   mixer: in_proj (2*5120 + 2*64 + 80 = 10448) x 2560 = 26,746,880; conv1d (5248 x 4) + bias
    #   5248 = 26,240; dt_bias, A_log, D 3*80 = 240; norm 5120; out_proj 2560*5120 = 13,107,200
    #   -> 39,885,680, + input_layernorm 2560 = 39,888,240 per layer, x54 = 2,153,964,960
    #   hybrid linear 2560*2560 = 6,553,600, x9 = 58,982,400
    #   shared block: norms 5120 + 2560; q/k/v 3 * 5120*5120 = 78,643,200; o 2560*5120 =
    #   13,107,200; gate_up 20480*2560 = 52,428,800; down 2560*10240 = 26,214,400
    #   -> 170,401,280, x2 = 340,802,560
    #   MLP adapter per hybrid use: 128*2560 + 20480*128 = 2,949,120, x9 = 26,542,080
    #   embedding 32000*2560 = 81,920,000; final norm 2560
    #   2,153,964,960 + 58,982,400 + 340,802,560 + 26,542,080 + 81,920,000 + 2,560 = 2,662,214,560
    count = count_params(HF / "Zyphra__Zamba2-2.7B" / "config.json")
    assert count.total == 2_662_214_560
    shared = [w for w in count.table.weights if ".shared_transformer.self_attn.q_proj." in w.name]
    assert [w.name.split(".")[2] for w in shared] == ["6", "11"]  # stored once, under its first use


def test_zamba2_attention_adapters_one_shared_block() -> None:
    # H 32, 4 layers (1 and 2 hybrid), 4 heads of 16 over 2H = 64, intermediate 4H = 128, vocab
    # 50 (tied), 1 shared block serving both uses, adapter rank 4 with attention adapters;
    # Mamba 2: inner 64, 4 heads, 1 group of state 8, conv 4.
    #   mixer: in_proj (128 + 16 + 4 = 148) x 32 = 4,736; conv1d 80*4 + 80 = 400; 3*4 = 12; norm
    #   64; out_proj 32*64 = 2,048 -> 7,260, + norm 32 = 7,292 per layer, x4 = 29,168
    #   hybrid linear 32*32, x2 = 2,048
    #   shared block: norms 64 + 32; q/k/v 3 * 64*64 = 12,288; o 32*64 = 2,048; gate_up 256*32 =
    #   8,192; down 32*128 = 4,096 -> 26,720
    #   adapters per use: MLP 4*32 + 256*4 = 1,152; q/k/v 3 * (4*64 + 64*4) = 1,536 -> 2,688, x2
    #   embedding 50*32 = 1,600; final norm 32
    #   1,600 + 29,168 + 2,048 + 26,720 + 5,376 + 32 = 64,944
    config: dict[str, Any] = {
        "model_type": "zamba2",
        "hidden_size": 32,
        "num_hidden_layers": 4,
        "layers_block_type": ["mamba", "hybrid", "hybrid", "mamba"],
        "num_attention_heads": 4,
        "n_mamba_heads": 4,
        "mamba_d_state": 8,
        "num_mem_blocks": 1,
        "adapter_rank": 4,
        "use_shared_attention_adapter": True,
        "vocab_size": 50,
    }
    count = count_params(config)
    assert count.total == 64_944
    adapters = {w.name for w in count.table.weights if "linear_q_adapter_list" in w.name}
    assert {n.split("shared_transformer.")[0] for n in adapters} == {"model.layers.1."}


def test_kimi_linear_48b() -> None:
    # H 2304, 27 layers: 20 KDA (32 heads of 128: P = 4096, conv 4), 7 MLA (32 heads, no q LoRA,
    # kv_lora 512, nope 128, rope 64, v 128); layer 0 a dense MLP of 9216, 26 MoE layers (256
    # experts of 1024, one shared expert of 1024); vocab 163840, untied.
    #   KDA: q/k/v 3 * 4096*2304 = 28,311,552; convs 3 * 4096*4 = 49,152; A_log 32; f_a 128*2304
    #   = 294,912; f_b 4096*128 = 524,288; dt_bias 4096; b_proj 32*2304 = 73,728; g_a 294,912;
    #   g_b 524,288; o_norm 128; o_proj 2304*4096 = 9,437,184 -> 39,514,272, x20 = 790,285,440
    #   MLA: q 32*192*2304 = 14,155,776; kv_a 576*2304 = 1,327,104; kv_a norm 512; kv_b
    #   32*256*512 = 4,194,304; o 2304*4096 = 9,437,184 -> 29,114,880, x7 = 203,804,160
    #   MoE: gate 256*2304 = 589,824; bias 256; experts 256*3*1024*2304 = 1,811,939,328; shared
    #   3*1024*2304 = 7,077,888 -> 1,819,607,296, x26 = 47,309,789,696
    #   dense MLP 3*9216*2304 = 63,700,992; norms 27*2*2304 = 124,416
    #   embedding + lm_head 2*163840*2304 = 754,974,720; final norm 2304
    #   total 49,122,681,728
    count = count_params(HF / "moonshotai__Kimi-Linear-48B-A3B-Instruct" / "config.json")
    assert count.total == 49_122_681_728
    assert count.complete


def test_lfm2_moe() -> None:
    # H 64, 4 layers (conv, attention, conv, conv), 4 heads of 16, 2 KV heads, vocab 100 (tied),
    # layer 0 dense (96), 3 MoE layers of 4 experts of 32 with the expert bias; conv kernel 3.
    #   conv layer: in_proj 192*64 = 12,288; conv 64*3 = 192; out_proj 64*64 = 4,096 -> 16,576, x3
    #   attention: q 4,096; k, v 2 * 32*64 = 4,096; out_proj 4,096; q/k norms 32 -> 12,320
    #   dense MLP 3*96*64 = 18,432; MoE: router 4*64 = 256, bias 4, experts 4*3*32*64 = 24,576
    #   -> 24,836, x3 = 74,508; norms 4 * 2*64 = 512; embedding 100*64 = 6,400; final norm 64
    #   6,400 + 512 + 49,728 + 12,320 + 18,432 + 74,508 + 64 = 161,964
    config: dict[str, Any] = {
        "model_type": "lfm2_moe",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "layer_types": ["conv", "full_attention", "conv", "conv"],
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 100,
        "intermediate_size": 96,
        "moe_intermediate_size": 32,
        "num_experts": 4,
        "num_dense_layers": 1,
    }
    count = count_params(config)
    assert count.total == 161_964
    names = {w.name for w in count.table.weights}
    assert "model.layers.1.feed_forward.expert_bias" in names
    assert "model.layers.0.feed_forward.w1.weight" in names


def test_qwen3_5_0_8b() -> None:
    # text: H 1024, 24 layers (18 delta net, 6 attention), intermediate 3584, 8 heads of 256 with
    # the output gate, 2 KV heads, delta net 16 key and 16 value heads of 128, conv 4, vocab
    # 248320 (tied); MTP 1 layer; vision 12 blocks of 768 (MLP 3072), patch 16, temporal 2,
    # merge 2, out 1024, 2304 positions.
    #   per layer: norms 2048 + MLP 3*3584*1024 = 11,010,048
    #   delta net: in_proj_qkv (2*2048 + 2048 = 6144) x 1024 = 6,291,456; in_proj_z 2048*1024 =
    #   2,097,152; in_proj_b/a 2*16*1024 = 32,768; conv1d 6144*4 = 24,576; dt_bias + A_log 32;
    #   norm 128; out_proj 1024*2048 = 2,097,152 -> 10,543,264
    #   attention: q 8*256*2 x 1024 = 4,194,304; k, v 2 * 512*1024 = 1,048,576; o 2,097,152;
    #   q/k norms 512 -> 7,340,544
    #   model: 248320*1024 = 254,279,680 + 24*11,012,096 + 18*10,543,264 + 6*7,340,544 + 1024
    #   = 752,393,024
    #   MTP: fc 1024*2048 = 2,097,152; 3 norms 3072; a layer 2048 + 7,340,544 + 11,010,048
    #   -> 20,452,864
    #   vision: patch 768*3*2*16*16 + 768 = 1,180,416; positions 2304*768 = 1,769,472; per block
    #   norms 4*768, qkv 3*768*768 + 2304, proj 768*768 + 768, fc1 3072*768 + 3072, fc2
    #   768*3072 + 768 -> 7,087,872, x12 = 85,054,464; merger norm 1536, fc1 3072*3072 + 3072,
    #   fc2 1024*3072 + 1024 -> 12,588,544; -> 100,592,896
    #   total 752,393,024 + 20,452,864 + 100,592,896 = 873,438,784
    count = count_params(HF / "Qwen__Qwen3.5-0.8B" / "config.json")
    assert dict(count.by_role) == {"model": 752_393_024, "mtp": 20_452_864, "vision": 100_592_896}
    assert count.total == 873_438_784 and count.complete
    names = {w.name for w in count.table.weights}
    assert "model.language_model.layers.0.linear_attn.in_proj_qkv.weight" in names
    assert "model.visual.merger.linear_fc2.weight" in names


def test_qwen3_5_moe() -> None:
    # text-only Qwen3.5-MoE: H 64, 4 layers (3 delta net, 1 attention), 4 heads of 16 with the
    # output gate, 2 KV heads, delta net 2 key heads and 4 value heads of 8, conv 4, 4 experts of
    # 16 (fused), shared expert 32, vocab 100 (untied), 1 MTP layer.
    #   delta net: in_proj_qkv (2*16 + 32 = 64) x 64 = 4,096; z 32*64 = 2,048; b/a 2*4*64 = 512;
    #   conv 64*4 = 256; dt_bias + A_log 8; norm 8; out_proj 64*32 = 2,048 -> 8,976
    #   attention: q 4*16*2 x 64 = 8,192; k, v 2 * 32*64 = 4,096; o 64*64 = 4,096; norms 32
    #   -> 16,416
    #   MoE: router 4*64 = 256; gate_up 4 * 32*64 = 8,192; down 4 * 64*16 = 4,096; shared expert
    #   3*32*64 = 6,144; shared_expert_gate 64 -> 18,752
    #   model: embedding + lm_head 2*6,400 + final norm 64 + 4*128 + 3*8,976 + 16,416 + 4*18,752
    #   = 131,728; MTP: fc 64*128 = 8,192 + 3 norms 192 + a layer 128 + 16,416 + 18,752 = 43,680
    config: dict[str, Any] = {
        "model_type": "qwen3_5_moe_text",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "linear_num_key_heads": 2,
        "linear_key_head_dim": 8,
        "linear_num_value_heads": 4,
        "linear_value_head_dim": 8,
        "linear_conv_kernel_dim": 4,
        "num_experts": 4,
        "moe_intermediate_size": 16,
        "shared_expert_intermediate_size": 32,
        "vocab_size": 100,
        "tie_word_embeddings": False,
        "mtp_num_hidden_layers": 1,
    }
    count = count_params(config)
    assert dict(count.by_role) == {"model": 131_728, "mtp": 43_680}
    fused = [w for w in count.table.weights if w.name == "model.layers.0.mlp.experts.gate_up_proj"]
    assert len(fused) == 1 and fused[0].shape == (32, 64) and fused[0].experts == 4
