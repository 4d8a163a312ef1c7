"""Reader for Moonshot AI's Kimi-Linear (``kimi_linear``): KDA (Kimi delta attention) layers and
MLA layers, by ``linear_attn_config`` (1-based ``kda_layers`` / ``full_attn_layers``), each
followed by a dense MLP (the first ``first_k_dense_replace`` layers) or a MoE block.

The tensors are those of Moonshot's ``modeling_kimi.py`` (the checkpoint's own remote code), as
the checkpoint names them:

* a KDA layer's ``self_attn``: ``q_proj`` / ``k_proj`` / ``v_proj`` ``[heads x head_dim, H]``, their
  depthwise ``q_conv1d`` / ``k_conv1d`` / ``v_conv1d`` ``[heads x head_dim, 1, kernel]`` (no
  bias), the forget gate ``f_a_proj`` ``[head_dim, H]`` / ``f_b_proj`` ``[heads x head_dim,
  head_dim]`` with ``dt_bias`` ``[heads x head_dim]`` and ``A_log`` ``[1, 1, heads, 1]``, the beta
  projection ``b_proj`` ``[heads, H]``, the output gate ``g_a_proj`` / ``g_b_proj``, ``o_norm``
  ``[head_dim]`` and ``o_proj``;
* an MLA layer's ``self_attn``: DeepSeek's MLA (:func:`kvrules.sizing.dense.mla_attention`);
* the MoE block ``block_sparse_moe``: the router ``gate`` ``[E, H]`` with its
  ``e_score_correction_bias``, ``num_experts`` experts ``w1`` / ``w3`` / ``w2`` of
  ``moe_intermediate_size`` and a shared MLP of ``moe_intermediate_size x num_shared_experts``.

TP splits are vLLM's ``kimi_linear.py`` and ``layers/kda.py``: the KDA projections, convolutions,
``f_b_proj``, ``g_b_proj``, ``b_proj`` and ``dt_bias`` column-parallel, ``f_a_proj`` / ``g_a_proj``
and ``o_norm`` replicated, ``o_proj`` row-parallel. vLLM divides ``A_log`` on its heads axis (dim
2); the record keeps it whole (its ``heads`` values per layer are counted on every rank).
"""

from __future__ import annotations

from kvrules.sizing.build import Builder, embedding, experts, final, gated_mlp, router
from kvrules.sizing.dense import mla_attention
from kvrules.sizing.weights import Split


def _kda(b: Builder, a: str, i: int) -> None:
    """A KDA mixer ``a`` (see the module's description)."""
    c = b.config
    hidden = c.integer("hidden_size")
    heads, dim = c.integer("linear_num_heads", 32), c.integer("linear_head_dim", 128)
    kernel = c.integer("linear_conv_kernel_dim", 4)
    width = heads * dim
    kda = "linear_attention"
    for name in ("q", "k", "v"):
        b.linear(f"{a}.{name}_proj", width, hidden, kda, split=Split.COLUMN, layer=i, heads=heads)
        b.add(f"{a}.{name}_conv1d.weight", (width, 1, kernel), kda, split=Split.COLUMN, layer=i, heads=heads)
    b.add(f"{a}.A_log", (1, 1, heads, 1), kda, layer=i)
    b.linear(f"{a}.f_a_proj", dim, hidden, kda, split=Split.REPLICATED, layer=i)
    b.linear(f"{a}.f_b_proj", width, dim, kda, split=Split.COLUMN, layer=i, heads=heads)
    b.add(f"{a}.dt_bias", (width,), kda, split=Split.COLUMN, layer=i, heads=heads)
    b.linear(f"{a}.b_proj", heads, hidden, kda, split=Split.COLUMN, layer=i, heads=heads)
    b.linear(f"{a}.g_a_proj", dim, hidden, kda, split=Split.REPLICATED, layer=i)
    b.linear(f"{a}.g_b_proj", width, dim, kda, split=Split.COLUMN, layer=i, heads=heads)
    b.norm(f"{a}.o_norm", dim, i, component=kda)
    b.linear(f"{a}.o_proj", hidden, width, kda, split=Split.ROW, layer=i, heads=heads)


def _kda_layers(b: Builder, layers: int) -> set[int]:
    """The 0-based indices of the KDA layers (``linear_attn_config.kda_layers`` is 1-based)."""
    c = b.config
    kinds = c.sequence("layer_types", layers)
    if kinds is not None:
        return {i for i, kind in enumerate(kinds) if kind == "linear_attention"}
    nested = c.get("linear_attn_config")
    listed = nested.get("kda_layers") if isinstance(nested, dict) else None
    if not isinstance(listed, list):
        raise c.missing("linear_attn_config", "its kda_layers name the KDA layers")
    return {int(n) - 1 for n in listed if isinstance(n, int) and not isinstance(n, bool)}


def _moe(b: Builder, m: str, i: int) -> None:
    """The MoE block ``m`` (``...block_sparse_moe``)."""
    c = b.config
    hidden = c.integer("hidden_size")
    count = c.integer("num_experts", 256)
    inter = c.integer("moe_intermediate_size", 1024)
    router(b, f"{m}.gate", i, hidden, count)
    b.add(f"{m}.gate.e_score_correction_bias", (count,), "router", layer=i)
    experts(b, f"{m}.experts", i, hidden, inter, count, names=("w1", "w3", "w2"))
    shared = inter * c.integer("num_shared_experts", 1, minimum=0)
    if shared:
        gated_mlp(b, f"{m}.shared_experts", i, hidden, shared, component="shared_experts")


def build_kimi_linear(b: Builder) -> tuple[int, int, int, bool]:
    """Kimi-Linear (see the module's description); the defaults are ``KimiLinearConfig``'s. MTP
    layers (``num_nextn_predict_layers``, none in the published checkpoints) are not counted, and
    a note says so."""
    c = b.config
    hidden, layers, vocab = c.integer("hidden_size"), c.integer("num_hidden_layers"), c.integer("vocab_size")
    tied = c.flag("tie_word_embeddings", False)
    kda = _kda_layers(b, layers)
    dense = c.integer("first_k_dense_replace", 1, minimum=0)
    freq = c.integer("moe_layer_freq", 1)
    embedding(b, "model.embed_tokens.weight", vocab, hidden)
    for i in range(layers):
        p = f"model.layers.{i}"
        b.norm(f"{p}.input_layernorm", hidden, i)
        b.norm(f"{p}.post_attention_layernorm", hidden, i)
        if i in kda:
            _kda(b, f"{p}.self_attn", i)
        else:
            mla_attention(b, f"{p}.self_attn", i)
        if i >= dense and i % freq == 0:
            _moe(b, f"{p}.block_sparse_moe", i)
        else:
            gated_mlp(b, f"{p}.mlp", i, hidden, c.integer("intermediate_size", 9216))
    final(b, "model.norm", hidden, vocab, tied)
    mtp = c.integer("num_nextn_predict_layers", 0, minimum=0)
    if mtp:
        b.notes.append(f"{mtp} Kimi-Linear MTP layer(s) (num_nextn_predict_layers) not counted")
    return layers, vocab, hidden, tied
