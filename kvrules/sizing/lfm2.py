"""Readers for Liquid AI's LFM2 (``lfm2``) and LFM2-MoE (``lfm2_moe``): gated short convolutions
and a few attention layers, each followed by a feed-forward block.

The tensors are those of transformers' ``modeling_lfm2.py`` / ``modeling_lfm2_moe.py`` as the
checkpoints name them (routed experts one module each, ``experts.<e>.w1`` / ``w3`` / ``w2``); the
TP splits are vLLM's ``lfm2.py`` / ``lfm2_moe.py``: ``conv.in_proj`` column-parallel, the depthwise
``conv.conv`` divided by channels, ``conv.out_proj`` row-parallel, attention as
``QKVParallelLinear`` with ``out_proj`` row-parallel, the MoE router ``gate`` and its
``expert_bias`` (vLLM's ``e_score_correction_bias``) whole on every rank, the experts
``FusedMoE``.
"""

from __future__ import annotations

from dataclasses import replace

from kvrules.sizing.build import (
    Attention,
    Builder,
    attention,
    embedding,
    experts,
    final,
    gated_mlp,
    gqa_attention,
    router,
)
from kvrules.sizing.weights import Split


def lfm2_ff_dim(b: Builder) -> int:
    """LFM2's feed-forward width: ``block_ff_dim``, cut to 2/3 and scaled by
    ``block_ffn_dim_multiplier`` when ``block_auto_adjust_ff_dim``, rounded up to
    ``block_multiple_of`` (transformers' ``Lfm2MLP``)."""
    c = b.config
    ff = c.integer("block_ff_dim", c.get("intermediate_size") or 12288)
    if c.flag("block_auto_adjust_ff_dim", True):
        ff = int(2 * ff / 3)
        mult = c.get("block_ffn_dim_multiplier")
        if isinstance(mult, (int, float)) and not isinstance(mult, bool):
            ff = int(mult * ff)
        multiple = c.integer("block_multiple_of", 256)
        ff = multiple * ((ff + multiple - 1) // multiple)
    return ff


def lfm2_attention(b: Builder) -> Attention:
    """LFM2's attention block: ``out_proj`` and per-head ``q_layernorm`` / ``k_layernorm``."""
    c = b.config
    return replace(
        gqa_attention(c, c.integer("hidden_size"), derived_head_dim=True, attention_bias=False),
        qk_norm="head",
        o_name="out_proj",
        q_norm_name="q_layernorm",
        k_norm_name="k_layernorm",
    )


def lfm2_mixer(b: Builder, p: str, i: int, kind: str, att: Attention) -> None:
    """Layer ``p``'s ``operator_norm`` / ``ffn_norm`` and its mixer: a short convolution
    (``conv.in_proj`` ``[3H, H]``, a depthwise ``conv.conv``, ``conv.out_proj``) for ``conv``,
    else attention."""
    c = b.config
    hidden = c.integer("hidden_size")
    bias = c.flag("conv_bias", False)
    b.norm(f"{p}.operator_norm", hidden, i)
    b.norm(f"{p}.ffn_norm", hidden, i)
    if kind != "conv":
        attention(b, f"{p}.self_attn", i, att)
        return
    b.linear(f"{p}.conv.in_proj", 3 * hidden, hidden, "conv", split=Split.COLUMN, layer=i, bias=bias)
    kernel = c.integer("conv_L_cache", 3)
    b.add(f"{p}.conv.conv.weight", (hidden, 1, kernel), "conv", split=Split.COLUMN, layer=i)
    if bias:
        b.add(f"{p}.conv.conv.bias", (hidden,), "conv", split=Split.COLUMN, layer=i)
    b.linear(f"{p}.conv.out_proj", hidden, hidden, "conv", split=Split.ROW, layer=i, bias=bias)


def _layer_kinds(b: Builder, layers: int) -> list[str]:
    kinds = b.config.sequence("layer_types", layers)
    if kinds is None:
        raise b.config.missing("layer_types", "LFM2-MoE's layers are listed there, conv or full_attention")
    return [str(k) for k in kinds]


def build_lfm2(b: Builder) -> tuple[int, int, int, bool]:
    """LFM2: short-convolution and attention layers (:func:`lfm2_mixer`), each with a SwiGLU
    ``feed_forward`` (``w1``/``w3``/``w2``); the final norm is ``embedding_norm``."""
    c = b.config
    hidden, layers, vocab = c.integer("hidden_size"), c.integer("num_hidden_layers"), c.integer("vocab_size")
    tied = c.flag("tie_word_embeddings", True)
    att = lfm2_attention(b)
    kinds = c.sequence("layer_types", layers) or []
    ff = lfm2_ff_dim(b)
    embedding(b, "model.embed_tokens.weight", vocab, hidden)
    for i, kind in enumerate(kinds):
        p = f"model.layers.{i}"
        lfm2_mixer(b, p, i, str(kind), att)
        gated_mlp(b, f"{p}.feed_forward", i, hidden, ff, names=("w1", "w3", "w2"))
    final(b, "model.embedding_norm", hidden, vocab, tied)
    return layers, vocab, hidden, tied


def build_lfm2_moe(b: Builder) -> tuple[int, int, int, bool]:
    """LFM2-MoE: LFM2's layers (:func:`lfm2_mixer`, by ``layer_types``); the first
    ``num_dense_layers`` feed-forward blocks are SwiGLU MLPs of ``intermediate_size`` (no LFM2
    width adjustment), the others a MoE block: the router ``gate`` ``[E, H]``, its ``expert_bias``
    ``[E]`` when ``use_expert_bias``, and ``num_experts`` experts of ``moe_intermediate_size``.
    The defaults are ``Lfm2MoeConfig``'s; ``tie_embedding`` is the file's older name for
    ``tie_word_embeddings``."""
    c = b.config
    hidden, layers, vocab = c.integer("hidden_size"), c.integer("num_hidden_layers"), c.integer("vocab_size")
    tied = c.flag("tie_word_embeddings", c.flag("tie_embedding", True))
    att = lfm2_attention(b)
    kinds = _layer_kinds(b, layers)
    dense = c.integer("num_dense_layers", 2, minimum=0)
    count = c.integer("num_experts", 32)
    bias = c.flag("use_expert_bias", True)
    embedding(b, "model.embed_tokens.weight", vocab, hidden)
    for i, kind in enumerate(kinds):
        p = f"model.layers.{i}"
        f = f"{p}.feed_forward"
        lfm2_mixer(b, p, i, kind, att)
        if i < dense:
            gated_mlp(b, f, i, hidden, c.integer("intermediate_size", 7168), names=("w1", "w3", "w2"))
            continue
        router(b, f"{f}.gate", i, hidden, count)
        if bias:
            b.add(f"{f}.expert_bias", (count,), "router", layer=i)
        inter = c.integer("moe_intermediate_size", 1792)
        experts(b, f"{f}.experts", i, hidden, inter, count, names=("w1", "w3", "w2"))
    final(b, "model.embedding_norm", hidden, vocab, tied)
    return layers, vocab, hidden, tied
