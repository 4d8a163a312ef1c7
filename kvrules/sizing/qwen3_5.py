"""Reader for Qwen3.5 (``qwen3_5_text``) and Qwen3.5-MoE (``qwen3_5_moe_text``): Qwen3-Next's
layout (gated delta net layers and gated full attention by ``layer_types``, an MTP module
``mtp.*``) with the delta net's projections stored apart, a dense MLP (Qwen3.5) or a MoE block
with a shared expert on every layer (Qwen3.5-MoE).

The tensors are those of transformers' ``modeling_qwen3_5.py`` / ``modeling_qwen3_5_moe.py`` as the
checkpoints name them: in a multimodal checkpoint (``Qwen3_5ForConditionalGeneration``, a
``text_config``) the language model sits under ``model.language_model`` and the vision tower
under ``model.visual`` (:mod:`kvrules.sizing.vision`), else under ``model``; ``lm_head`` and
``mtp`` at the top. A delta net layer's ``linear_attn`` holds ``in_proj_qkv`` ``[2 x K + V, H]``
(``K = linear_num_key_heads x linear_key_head_dim``, ``V`` likewise for values), ``in_proj_z``
``[V, H]``, ``in_proj_b`` / ``in_proj_a`` ``[value heads, H]``, the depthwise ``conv1d``
``[2 x K + V, 1, kernel]``, ``dt_bias`` and ``A_log`` (one per value head), the gated ``norm``
``[linear_value_head_dim]`` and ``out_proj``; a full attention layer's ``q_proj`` also produces the
output gate (``attn_output_gate``). The MoE's routed experts are stored fused, as 3-D
``experts.gate_up_proj`` ``[E, 2I, H]`` and ``experts.down_proj`` ``[E, H, I]``.

TP splits are vLLM's ``qwen3_5.py`` (through ``qwen3_next.py``): ``in_proj_qkv`` + ``in_proj_z``
and ``in_proj_b`` + ``in_proj_a`` column-parallel (vLLM's fused ``in_proj_qkvz`` / ``in_proj_ba``),
``conv1d``, ``dt_bias`` and ``A_log`` divided by heads, the norm replicated, ``out_proj``
row-parallel; the MTP ``fc`` column-parallel (``qwen3_5_mtp.py``).
"""

from __future__ import annotations

from dataclasses import replace

from kvrules.sizing.build import (
    Attention,
    Builder,
    attention,
    embedding,
    final,
    fused_experts,
    gated_mlp,
    gated_shared_expert,
    gqa_attention,
    router,
)
from kvrules.sizing.weights import Role, Split


def _gdn(b: Builder, a: str, i: int) -> None:
    """The gated delta net ``a`` (``...linear_attn``)."""
    c = b.config
    hidden = c.integer("hidden_size")
    nk, dk = c.integer("linear_num_key_heads", 16), c.integer("linear_key_head_dim", 128)
    nv, dv = c.integer("linear_num_value_heads", 32), c.integer("linear_value_head_dim", 128)
    conv = c.integer("linear_conv_kernel_dim", 4)
    qkv = 2 * nk * dk + nv * dv
    gdn = "linear_attention"
    b.linear(f"{a}.in_proj_qkv", qkv, hidden, gdn, split=Split.COLUMN, layer=i, heads=nk)
    b.linear(f"{a}.in_proj_z", nv * dv, hidden, gdn, split=Split.COLUMN, layer=i, heads=nv)
    b.linear(f"{a}.in_proj_b", nv, hidden, gdn, split=Split.COLUMN, layer=i, heads=nv)
    b.linear(f"{a}.in_proj_a", nv, hidden, gdn, split=Split.COLUMN, layer=i, heads=nv)
    b.add(f"{a}.conv1d.weight", (qkv, 1, conv), gdn, split=Split.COLUMN, layer=i, heads=nk)
    b.add(f"{a}.dt_bias", (nv,), gdn, split=Split.COLUMN, layer=i, heads=nv)
    b.add(f"{a}.A_log", (nv,), gdn, split=Split.COLUMN, layer=i, heads=nv)
    b.norm(f"{a}.norm", dv, i, component=gdn)
    b.linear(f"{a}.out_proj", hidden, nv * dv, gdn, split=Split.ROW, layer=i, heads=nv)


def _moe(b: Builder, m: str, i: int) -> None:
    """The MoE block ``m`` (``...mlp``): router ``gate``, fused routed experts, the shared expert
    and its ``shared_expert_gate`` ``[1, H]``."""
    c = b.config
    hidden = c.integer("hidden_size")
    count, inter = c.integer("num_experts", 256), c.integer("moe_intermediate_size", 512)
    router(b, f"{m}.gate", i, hidden, count)
    fused_experts(b, f"{m}.experts", i, hidden, inter, count)
    shared = c.integer("shared_expert_intermediate_size", 512, minimum=0)
    gated_shared_expert(b, m, i, hidden, shared)


def _layer(b: Builder, p: str, i: int, kind: str, att: Attention) -> None:
    c = b.config
    hidden = c.integer("hidden_size")
    b.norm(f"{p}.input_layernorm", hidden, i)
    b.norm(f"{p}.post_attention_layernorm", hidden, i)
    if c.flag("layer_scale", False):  # vLLM's attn_layer_scale / ffn_layer_scale, [1, 1, H] each
        for name in ("attn_layer_scale", "ffn_layer_scale"):
            b.add(f"{p}.{name}", (1, 1, hidden), "norm", layer=i)
    if kind == "linear_attention":
        _gdn(b, f"{p}.linear_attn", i)
    elif kind == "full_attention":
        attention(b, f"{p}.self_attn", i, att)
    else:
        raise c.error("layer_types", f"has {kind!r}; Qwen3.5 layers are linear_attention or full_attention")
    if c.text_model_type == "qwen3_5_moe_text":
        _moe(b, f"{p}.mlp", i)
    else:
        gated_mlp(b, f"{p}.mlp", i, hidden, c.integer("intermediate_size"))


def build_qwen3_5(b: Builder) -> tuple[int, int, int, bool]:
    """Qwen3.5 / Qwen3.5-MoE (see the module's description), with the checkpoint's MTP module
    (``mtp.fc`` ``[H, 2H]``, ``pre_fc_norm_embedding`` / ``pre_fc_norm_hidden``,
    ``mtp_num_hidden_layers`` full attention layers, ``norm``; it shares the model's embedding and
    head). The defaults are ``Qwen3_5TextConfig``'s / ``Qwen3_5MoeTextConfig``'s."""
    c = b.config
    hidden, layers, vocab = c.integer("hidden_size"), c.integer("num_hidden_layers"), c.integer("vocab_size")
    tied = c.flag("tie_word_embeddings", False)
    att = replace(
        gqa_attention(c, hidden), qk_norm="head", q_rows_factor=2 if c.flag("attn_output_gate", True) else 1
    )
    kinds = c.sequence("layer_types", layers)
    if kinds is None:
        every = c.integer("full_attention_interval", 4)
        kinds = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(layers)]
    model = "model.language_model" if c.has_text_config else "model"
    embedding(b, f"{model}.embed_tokens.weight", vocab, hidden)
    for i, kind in enumerate(kinds):
        _layer(b, f"{model}.layers.{i}", i, str(kind), att)
    final(b, f"{model}.norm", hidden, vocab, tied)
    mtp = c.integer("mtp_num_hidden_layers", 1, minimum=0)
    if mtp:
        b.set_role(Role.MTP)
        b.linear("mtp.fc", hidden, 2 * hidden, "mtp", split=Split.COLUMN, layer=layers)
        for norm in ("mtp.pre_fc_norm_embedding", "mtp.pre_fc_norm_hidden", "mtp.norm"):
            b.norm(norm, hidden, layers)
        for k in range(mtp):
            _layer(b, f"mtp.layers.{k}", layers + k, "full_attention", att)
        b.set_role(Role.MODEL)
    return layers, vocab, hidden, tied
