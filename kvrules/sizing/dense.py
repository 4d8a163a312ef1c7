"""Readers for the attention-only decoders: the Llama-like families, their MoE variants, MLA
(DeepSeek V2 / V3 / V3.2, Kimi K2) and gpt-oss.

Each reader lists the checkpoint's tensors with the names and shapes of the Hugging Face
checkpoint (``modeling_<type>.py`` in transformers) and the TP split of vLLM's implementation
(``vllm/model_executor/models/<type>.py``). A :class:`Family` describes a Llama-like decoder by
its differences: biases, QK norms, the norms of a layer, tied embeddings, and the MoE block.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from kvrules.hf.config import HFConfig
from kvrules.sizing.build import (
    Attention,
    Builder,
    attention,
    embedding,
    experts,
    final,
    fused_experts,
    gated_mlp,
    gated_shared_expert,
    gqa_attention,
    head_dim,
    router,
)
from kvrules.sizing.weights import Role, Split

#: builds a layer's MoE block when the layer has one: ``(builder, prefix, layer) -> built?``
MoEBlock = Callable[[Builder, str, int], bool]


def _flag(config: HFConfig, value: bool | str, default: bool = False) -> bool:
    """``value`` itself, or the config's boolean field named ``value``."""
    if isinstance(value, bool):
        return value
    return config.flag(value, default)


@dataclass(frozen=True)
class Family:
    """How one Llama-like family differs from Llama.

    :ivar tie_default: ``tie_word_embeddings`` when the config gives none (the class default).
    :ivar qkv_bias, o_bias, mlp_bias: a fixed answer, or the config field that gives it.
    :ivar qk_norm: ``head`` / ``full`` QK norms (:class:`~kvrules.sizing.build.Attention`).
    :ivar qk_norm_flag: the field that switches the QK norm on (``use_qk_norm``), if any.
    :ivar norms: the per-layer norms, by name.
    :ivar norm_bias: LayerNorms with a bias (StarCoder 2's ``use_bias``).
    :ivar plain_mlp: a two-matrix MLP ``(up, down)`` instead of SwiGLU.
    :ivar moe: the MoE block builder, for the layers that have one.
    :ivar attn: the attention module's name in a layer; ``mlp`` the MLP's.
    """

    tie_default: bool = False
    qkv_bias: bool | str = False
    o_bias: bool | str = False
    mlp_bias: bool | str = False
    qk_norm: str | None = None
    qk_norm_flag: str | None = None
    norms: tuple[str, ...] = ("input_layernorm", "post_attention_layernorm")
    norm_bias: bool | str = False
    plain_mlp: tuple[str, str] | None = None
    moe: MoEBlock | None = None
    attn: str = "self_attn"
    mlp: str = "mlp"
    o_name: str = "o_proj"
    q_norm_name: str = "q_norm"
    k_norm_name: str = "k_norm"
    final_norm: str = "model.norm"


def build_family(b: Builder, family: Family, *, prefix: str = "model") -> tuple[int, int, int, bool]:
    """Every tensor of a Llama-like decoder; returns ``(layers, vocab, hidden, tied)``."""
    c = b.config
    hidden = c.integer("hidden_size")
    layers = c.integer("num_hidden_layers")
    heads = c.integer("num_attention_heads")
    kv = c.integer("num_key_value_heads", heads)
    vocab = c.integer("vocab_size")
    tied = c.flag("tie_word_embeddings", family.tie_default)
    norm_bias = _flag(c, family.norm_bias)
    qk = family.qk_norm if family.qk_norm_flag is None or c.flag(family.qk_norm_flag, False) else None
    att = Attention(
        hidden,
        heads,
        kv,
        head_dim(c, hidden, heads),
        qkv_bias=_flag(c, family.qkv_bias),
        o_bias=_flag(c, family.o_bias),
        qk_norm=qk,
        o_name=family.o_name,
        q_norm_name=family.q_norm_name,
        k_norm_name=family.k_norm_name,
    )
    mlp_bias = _flag(c, family.mlp_bias)
    embedding(b, f"{prefix}.embed_tokens.weight", vocab, hidden)
    for i in range(layers):
        p = f"{prefix}.layers.{i}"
        for norm in family.norms:
            b.norm(f"{p}.{norm}", hidden, i, bias=norm_bias)
        attention(b, f"{p}.{family.attn}", i, att)
        if family.moe is not None and family.moe(b, f"{p}.{family.mlp}", i):
            continue
        inter = c.integer("intermediate_size")
        if family.plain_mlp:
            up, down = family.plain_mlp
            b.linear(
                f"{p}.{family.mlp}.{up}", inter, hidden, "mlp", split=Split.COLUMN, layer=i, bias=mlp_bias
            )
            b.linear(
                f"{p}.{family.mlp}.{down}", hidden, inter, "mlp", split=Split.ROW, layer=i, bias=mlp_bias
            )
        else:
            gated_mlp(b, f"{p}.{family.mlp}", i, hidden, inter, bias=mlp_bias)
    final(b, family.final_norm, hidden, vocab, tied, norm_bias=norm_bias)
    return layers, vocab, hidden, tied


# -- MoE blocks -------------------------------------------------------------------------------


def qwen_moe(b: Builder, p: str, i: int) -> bool:
    """Qwen2-MoE / Qwen3-MoE: ``mlp.gate`` + experts (+ Qwen2-MoE's shared expert and its gate),
    on layers not in ``mlp_only_layers`` with ``(i + 1) % decoder_sparse_step == 0``."""
    c = b.config
    count = c.integer("num_experts", 0, minimum=0)
    step = c.integer("decoder_sparse_step", 1)
    only = c.sequence("mlp_only_layers") or []
    if count == 0 or i in only or (i + 1) % step != 0:
        return False
    hidden = c.integer("hidden_size")
    router(b, f"{p}.gate", i, hidden, count)
    experts(b, f"{p}.experts", i, hidden, c.integer("moe_intermediate_size"), count)
    shared = c.integer("shared_expert_intermediate_size", 0, minimum=0)
    gated_shared_expert(b, p, i, hidden, shared)
    return True


def mixtral_moe(b: Builder, p: str, i: int) -> bool:
    """Mixtral: ``block_sparse_moe.gate`` + experts ``w1`` / ``w3`` / ``w2`` on every layer."""
    c = b.config
    hidden, count = c.integer("hidden_size"), c.integer("num_local_experts")
    router(b, f"{p}.gate", i, hidden, count)
    experts(b, f"{p}.experts", i, hidden, c.integer("intermediate_size"), count, names=("w1", "w3", "w2"))
    return True


def minimax_moe(b: Builder, p: str, i: int) -> bool:
    """MiniMax-M2: Mixtral's block plus the router's ``e_score_correction_bias``."""
    mixtral_moe(b, p, i)
    b.add(f"{p}.e_score_correction_bias", (b.config.integer("num_local_experts"),), "router", layer=i)
    return True


def _shared_and_routed(
    b: Builder, p: str, i: int, count: int, inter: int, shared: int, *, correction: str | None
) -> None:
    hidden = b.config.integer("hidden_size")
    router(b, f"{p}.gate", i, hidden, count)
    if correction:
        b.add(correction, (count,), "router", layer=i)
    experts(b, f"{p}.experts", i, hidden, inter, count)
    if shared:
        gated_mlp(b, f"{p}.shared_experts", i, hidden, shared, component="shared_experts")


def glm4_moe(b: Builder, p: str, i: int) -> bool:
    """GLM-4.5/4.6 (``glm4_moe``): dense below ``first_k_dense_replace``; then router with
    ``e_score_correction_bias``, routed and shared experts (DeepSeek-V3's block)."""
    c = b.config
    if i < c.integer("first_k_dense_replace", 1, minimum=0):
        return False
    inter = c.integer("moe_intermediate_size")
    shared = inter * c.integer("n_shared_experts", 1, minimum=0)
    _shared_and_routed(
        b, p, i, c.integer("n_routed_experts"), inter, shared, correction=f"{p}.gate.e_score_correction_bias"
    )
    return True


def ernie_moe(b: Builder, p: str, i: int) -> bool:
    """ERNIE 4.5 MoE: MoE layers from ``moe_layer_start_index`` every ``moe_layer_interval``;
    shared experts of ``moe_intermediate_size * moe_num_shared_experts``; the correction bias is
    ``moe_statics.e_score_correction_bias`` of shape ``[1, experts]``."""
    c = b.config
    start = c.integer("moe_layer_start_index", 1, minimum=0)
    end = c.integer("moe_layer_end_index", c.integer("num_hidden_layers") - 1, minimum=0)
    interval = c.integer("moe_layer_interval", 1)
    if not (start <= i <= end and (i + 1) % interval == 0):
        return False
    count = c.integer("moe_num_experts")
    inter = c.integer("moe_intermediate_size")
    shared = inter * c.integer("moe_num_shared_experts", 0, minimum=0)
    _shared_and_routed(b, p, i, count, inter, shared, correction=None)
    b.add(f"{p}.moe_statics.e_score_correction_bias", (1, count), "router", layer=i)
    return True


def hunyuan_moe(b: Builder, p: str, i: int) -> bool:
    """Hunyuan-A13B: ``mlp.gate.wg`` router, routed experts of ``moe_intermediate_size`` (an int
    or one per layer) and ``num_shared_expert`` shared MLPs of ``intermediate_size``."""
    c = b.config
    count = c.integer("num_experts")
    hidden = c.integer("hidden_size")
    raw = c.get("moe_intermediate_size")
    inter = raw[i] if isinstance(raw, list) else c.integer("moe_intermediate_size")
    router(b, f"{p}.gate.wg", i, hidden, count)
    experts(b, f"{p}.experts", i, hidden, int(inter), count)
    shared_raw = c.get("num_shared_expert", 1)
    shared = shared_raw[i] if isinstance(shared_raw, list) else int(shared_raw)
    if shared:
        gated_mlp(
            b,
            f"{p}.shared_mlp",
            i,
            hidden,
            c.integer("intermediate_size") * int(shared),
            component="shared_experts",
        )
    return True


def llama4_moe(b: Builder, p: str, i: int) -> bool:
    """Llama 4: MoE every ``interleave_moe_layer_step``-th layer (``feed_forward.router``, stacked
    ``experts.gate_up_proj`` / ``down_proj``, a shared expert); the dense layers use
    ``intermediate_size_mlp``, built here too."""
    c = b.config
    step = c.integer("interleave_moe_layer_step", 1)
    hidden = c.integer("hidden_size")
    moe_layers = c.sequence("moe_layers")
    is_moe = i in moe_layers if moe_layers is not None else (i + 1) % step == 0
    if not is_moe:
        gated_mlp(b, p, i, hidden, c.integer("intermediate_size_mlp"))
        return True
    count = c.integer("num_local_experts")
    inter = c.integer("intermediate_size")
    router(b, f"{p}.router", i, hidden, count)
    b.linear(
        f"{p}.experts.gate_up_proj", 2 * inter, hidden, "experts", split=Split.COLUMN, layer=i, experts=count
    )
    b.linear(f"{p}.experts.down_proj", hidden, inter, "experts", split=Split.ROW, layer=i, experts=count)
    gated_mlp(b, f"{p}.shared_expert", i, hidden, inter, component="shared_experts")
    return True


# -- families ---------------------------------------------------------------------------------

LLAMA = Family(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias")

FAMILIES: dict[str, Family] = {
    "llama": LLAMA,
    "mistral": Family(),
    "granite": LLAMA,
    "internlm3": Family(qkv_bias="qkv_bias", o_bias="bias", mlp_bias=False),
    "smollm3": Family(
        tie_default=True, qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias"
    ),
    "qwen2": Family(qkv_bias=True),
    "qwen2_5_vl_text": Family(qkv_bias=True),
    "qwen2_5_vl": Family(qkv_bias=True),
    "qwen2_vl_text": Family(qkv_bias=True),
    "qwen2_moe": Family(qkv_bias=True, moe=qwen_moe),
    "qwen3": Family(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head"),
    "qwen3_moe": Family(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head", moe=qwen_moe),
    "phi3": Family(),
    "olmo2": Family(
        qkv_bias="attention_bias",
        o_bias="attention_bias",
        qk_norm="full",
        norms=("post_attention_layernorm", "post_feedforward_layernorm"),
    ),
    "cohere": Family(
        tie_default=True,
        qkv_bias="attention_bias",
        o_bias="attention_bias",
        qk_norm="full",
        qk_norm_flag="use_qk_norm",
        norms=("input_layernorm",),
    ),
    "cohere2": Family(
        tie_default=True, qkv_bias="attention_bias", o_bias="attention_bias", norms=("input_layernorm",)
    ),
    "starcoder2": Family(
        tie_default=True,
        qkv_bias="use_bias",
        o_bias="use_bias",
        mlp_bias="use_bias",
        norm_bias="use_bias",
        plain_mlp=("c_fc", "c_proj"),
    ),
    "gemma2": Family(
        tie_default=True,
        qkv_bias="attention_bias",
        o_bias="attention_bias",
        norms=(
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ),
    ),
    "gemma3_text": Family(
        tie_default=True,
        qkv_bias="attention_bias",
        o_bias="attention_bias",
        qk_norm="head",
        norms=(
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ),
    ),
    "mixtral": Family(moe=mixtral_moe, mlp="block_sparse_moe"),
    "minimax_m2": Family(qk_norm="full", qk_norm_flag="use_qk_norm", moe=minimax_moe, mlp="block_sparse_moe"),
    "ernie4_5": Family(tie_default=True, qkv_bias="use_bias", o_bias="use_bias", mlp_bias="use_bias"),
    "ernie4_5_moe": Family(
        tie_default=True, qkv_bias="use_bias", o_bias="use_bias", mlp_bias="use_bias", moe=ernie_moe
    ),
    "hunyuan_v1_dense": Family(
        tie_default=True,
        qkv_bias="attention_bias",
        o_bias="attention_bias",
        qk_norm="head",
        qk_norm_flag="use_qk_norm",
        q_norm_name="query_layernorm",
        k_norm_name="key_layernorm",
    ),
    "hunyuan_v1_moe": Family(
        tie_default=True,
        qkv_bias="attention_bias",
        o_bias="attention_bias",
        qk_norm="head",
        qk_norm_flag="use_qk_norm",
        q_norm_name="query_layernorm",
        k_norm_name="key_layernorm",
        moe=hunyuan_moe,
    ),
    "glm4_moe": Family(qkv_bias="attention_bias", qk_norm="head", qk_norm_flag="use_qk_norm", moe=glm4_moe),
    "llama4_text": Family(moe=llama4_moe, mlp="feed_forward"),
}


def mtp_head(b: Builder, p: str, i: int, vocab: int, hidden: int) -> None:
    """The tensors DeepSeek-V3's MTP layer ``p`` adds to a decoder layer: its own copies of the
    embedding (``embed_tokens``) and the head (``shared_head.head``), ``enorm`` / ``hnorm``,
    ``eh_proj`` ``[H, 2H]`` and ``shared_head.norm``. ``eh_proj`` is not a quantised linear:
    DeepSeek-V3's fp8 checkpoint stores it in bf16 (its published safetensors total, with
    every other linear's block scales, matches only so)."""
    b.add(f"{p}.embed_tokens.weight", (vocab, hidden), "mtp", split=Split.VOCAB, layer=i)
    b.norm(f"{p}.enorm", hidden, i)
    b.norm(f"{p}.hnorm", hidden, i)
    b.linear(f"{p}.eh_proj", hidden, 2 * hidden, "mtp", split=Split.REPLICATED, layer=i, quantizable=False)
    b.norm(f"{p}.shared_head.norm", hidden, i)
    b.add(f"{p}.shared_head.head.weight", (vocab, hidden), "mtp", split=Split.VOCAB, layer=i)


def glm4_mtp(b: Builder, start: int, count: int, vocab: int, hidden: int, family: Family) -> None:
    """GLM-4.5's MTP layers (``model.layers.<L + k>``): DeepSeek-V3's MTP block
    (:func:`mtp_head`) around a whole MoE decoder layer."""
    c = b.config
    b.set_role(Role.MTP)
    att = replace(
        gqa_attention(c, hidden, attention_bias=False),
        qkv_bias=_flag(c, family.qkv_bias),
        qk_norm="head" if c.flag("use_qk_norm", False) else None,
    )
    for i in range(start, start + count):
        p = f"model.layers.{i}"
        mtp_head(b, p, i, vocab, hidden)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            b.norm(f"{p}.{norm}", hidden, i)
        attention(b, f"{p}.self_attn", i, att)
        glm4_moe(b, f"{p}.mlp", i)
    b.set_role(Role.MODEL)


# -- MLA: DeepSeek V2 / V3 / V3.2, Kimi K2 ----------------------------------------------------


def mla_attention(b: Builder, a: str, i: int) -> None:
    """An MLA block ``a`` (``...self_attn``): the query path (``q_a_proj`` / ``q_a_layernorm`` /
    ``q_b_proj`` with a ``q_lora_rank``, else ``q_proj``), ``kv_a_proj_with_mqa``,
    ``kv_a_layernorm``, ``kv_b_proj``, ``o_proj``, and DeepSeek-V3.2's indexer when the config
    has one."""
    c = b.config
    hidden = c.integer("hidden_size")
    heads = c.integer("num_attention_heads")
    nope, rope, v = c.integer("qk_nope_head_dim"), c.integer("qk_rope_head_dim"), c.integer("v_head_dim")
    kv_lora = c.integer("kv_lora_rank")
    q_lora = c.opt_int("q_lora_rank")
    # vLLM deepseek_v2.py: q_a_proj and kv_a_proj_with_mqa are replicated (fused_qkv_a_proj),
    # q_b_proj / q_proj and kv_b_proj column-parallel over the heads, o_proj row-parallel
    if q_lora:
        b.linear(f"{a}.q_a_proj", q_lora, hidden, "attention", split=Split.REPLICATED, layer=i)
        b.norm(f"{a}.q_a_layernorm", q_lora, i, component="attention")
        b.linear(
            f"{a}.q_b_proj",
            heads * (nope + rope),
            q_lora,
            "attention",
            split=Split.COLUMN,
            layer=i,
            heads=heads,
        )
    else:
        b.linear(
            f"{a}.q_proj",
            heads * (nope + rope),
            hidden,
            "attention",
            split=Split.COLUMN,
            layer=i,
            heads=heads,
        )
    b.linear(f"{a}.kv_a_proj_with_mqa", kv_lora + rope, hidden, "attention", split=Split.REPLICATED, layer=i)
    b.norm(f"{a}.kv_a_layernorm", kv_lora, i, component="attention")
    b.linear(
        f"{a}.kv_b_proj", heads * (nope + v), kv_lora, "attention", split=Split.COLUMN, layer=i, heads=heads
    )
    b.linear(f"{a}.o_proj", hidden, heads * v, "attention", split=Split.ROW, layer=i, heads=heads)
    if c.text_model_type == "deepseek_v32" or c.get("index_n_heads") is not None:
        _indexer(b, a, i, hidden, q_lora or hidden)


def _mla_layer(b: Builder, p: str, i: int, *, moe: bool) -> None:
    c = b.config
    hidden = c.integer("hidden_size")
    b.norm(f"{p}.input_layernorm", hidden, i)
    b.norm(f"{p}.post_attention_layernorm", hidden, i)
    mla_attention(b, f"{p}.self_attn", i)
    m = f"{p}.mlp"
    if not moe:
        gated_mlp(b, m, i, hidden, c.integer("intermediate_size"))
        return
    inter = c.integer("moe_intermediate_size")
    shared = inter * c.integer("n_shared_experts", 0, minimum=0)
    noaux = c.get("topk_method") == "noaux_tc"
    _shared_and_routed(
        b,
        m,
        i,
        c.integer("n_routed_experts"),
        inter,
        shared,
        correction=f"{m}.gate.e_score_correction_bias" if noaux else None,
    )


def _indexer(b: Builder, a: str, i: int, hidden: int, q_lora: int) -> None:
    """DeepSeek-V3.2's lightning indexer: ``wq_b``, ``wk``, ``k_norm`` (a LayerNorm) and
    ``weights_proj``; vLLM builds them replicated (``ReplicatedLinear``)."""
    c = b.config
    n, d = c.integer("index_n_heads"), c.integer("index_head_dim")
    x = f"{a}.indexer"
    b.linear(f"{x}.wq_b", n * d, q_lora, "indexer", split=Split.REPLICATED, layer=i)
    b.linear(f"{x}.wk", d, hidden, "indexer", split=Split.REPLICATED, layer=i)
    b.norm(f"{x}.k_norm", d, i, bias=True, component="indexer")
    b.linear(f"{x}.weights_proj", n, hidden, "indexer", split=Split.REPLICATED, layer=i, quantizable=False)


def build_mla(b: Builder) -> tuple[int, int, int, bool]:
    """DeepSeek V2 / V3 / V3.2 and Kimi K2, with the checkpoint's MTP layers: each one an
    ``embed_tokens``, ``enorm``, ``hnorm``, ``eh_proj``, ``shared_head.norm``, ``shared_head.head``
    and a MoE decoder layer (DeepSeek-V3's ``model.layers.61``)."""
    c = b.config
    hidden, layers, vocab = c.integer("hidden_size"), c.integer("num_hidden_layers"), c.integer("vocab_size")
    tied = c.flag("tie_word_embeddings", False)
    dense = c.integer("first_k_dense_replace", 0, minimum=0)
    freq = c.integer("moe_layer_freq", 1)
    experts_on = c.opt_int("n_routed_experts") is not None
    embedding(b, "model.embed_tokens.weight", vocab, hidden)
    for i in range(layers):
        _mla_layer(b, f"model.layers.{i}", i, moe=experts_on and i >= dense and i % freq == 0)
    final(b, "model.norm", hidden, vocab, tied)
    mtp = c.integer("num_nextn_predict_layers", 0, minimum=0)
    b.set_role(Role.MTP)
    for i in range(layers, layers + mtp):
        p = f"model.layers.{i}"
        mtp_head(b, p, i, vocab, hidden)
        _mla_layer(b, p, i, moe=experts_on)
    b.set_role(Role.MODEL)
    return layers, vocab, hidden, tied


# -- gpt-oss ----------------------------------------------------------------------------------


def build_gpt_oss(b: Builder) -> tuple[int, int, int, bool]:
    """gpt-oss: biased q/k/v/o and per-head attention sinks, a biased router, and stacked experts
    ``gate_up_proj`` ``[2I, H]`` / ``down_proj`` ``[H, I]`` with biases (the checkpoint stores
    the expert matrices as mxfp4 blocks and scales)."""
    c = b.config
    hidden, layers, vocab = c.integer("hidden_size"), c.integer("num_hidden_layers"), c.integer("vocab_size")
    att = replace(gqa_attention(c, hidden, attention_bias=False), qkv_bias=True, o_bias=True)
    count, inter = c.integer("num_local_experts"), c.integer("intermediate_size")
    tied = c.flag("tie_word_embeddings", False)
    embedding(b, "model.embed_tokens.weight", vocab, hidden)
    for i in range(layers):
        p = f"model.layers.{i}"
        b.norm(f"{p}.input_layernorm", hidden, i)
        b.norm(f"{p}.post_attention_layernorm", hidden, i)
        attention(b, f"{p}.self_attn", i, att)
        b.add(f"{p}.self_attn.sinks", (att.heads,), "attention", split=Split.COLUMN, layer=i, heads=att.heads)
        router(b, f"{p}.mlp.router", i, hidden, count, bias=True)
        fused_experts(b, f"{p}.mlp.experts", i, hidden, inter, count, bias=True)
    final(b, "model.norm", hidden, vocab, tied)
    return layers, vocab, hidden, tied
