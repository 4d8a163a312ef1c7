"""Readers for the recurrent and hybrid decoders: Mamba 1 (``mamba``, ``falcon_mamba``), Mamba 2
(``mamba2``), Jamba, Nemotron-H, Granite-4.0-H (``granitemoehybrid``), Falcon-H1 and Qwen3-Next
(gated delta net); LFM2's short convolutions are in :mod:`kvrules.sizing.lfm2`.

TP splits follow vLLM's mixers: ``vllm/model_executor/layers/mamba/mamba_mixer.py`` (Mamba 1:
``in_proj`` and ``conv1d`` column-parallel, ``x_proj`` row-parallel, ``dt_proj`` column-parallel,
``A`` and ``D`` divided by channels), ``mamba_mixer2.py`` (Mamba 2: ``in_proj`` and ``conv1d``
divided per part, with ``n_groups`` extended to ``tp`` when one group must serve several ranks;
``A``, ``D``, ``dt_bias`` divided by heads, the gated norm by channels), and the gated delta net
of ``qwen3_next.py`` (projections column-parallel by heads, ``out_proj`` row-parallel, its norm of
``head_v_dim`` replicated).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from kvrules.hf.config import HFConfig
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
from kvrules.sizing.dense import qwen_moe
from kvrules.sizing.weights import Role, Segment, Split


def mamba1_mixer(
    b: Builder,
    m: str,
    i: int,
    *,
    hidden: int,
    inner: int,
    state: int,
    conv: int,
    dt_rank: int,
    bias: bool,
    conv_bias: bool,
    inner_norms: bool = False,
) -> None:
    """A Mamba 1 mixer; ``inner_norms``: Jamba's ``dt_layernorm`` / ``b_layernorm`` / ``c_layernorm``."""
    b.linear(f"{m}.in_proj", 2 * inner, hidden, "mamba", split=Split.COLUMN, layer=i, bias=bias)
    b.add(f"{m}.conv1d.weight", (inner, 1, conv), "mamba", split=Split.COLUMN, layer=i)
    if conv_bias:
        b.add(f"{m}.conv1d.bias", (inner,), "mamba", split=Split.COLUMN, layer=i)
    b.linear(f"{m}.x_proj", dt_rank + 2 * state, inner, "mamba", split=Split.ROW, layer=i)
    b.linear(f"{m}.dt_proj", inner, dt_rank, "mamba", split=Split.COLUMN, layer=i, bias=True)
    b.add(f"{m}.A_log", (inner, state), "mamba", split=Split.COLUMN, layer=i)
    b.add(f"{m}.D", (inner,), "mamba", split=Split.COLUMN, layer=i)
    b.linear(f"{m}.out_proj", hidden, inner, "mamba", split=Split.ROW, layer=i, bias=bias)
    if inner_norms:
        b.norm(f"{m}.dt_layernorm", dt_rank, i, component="mamba")
        b.norm(f"{m}.b_layernorm", state, i, component="mamba")
        b.norm(f"{m}.c_layernorm", state, i, component="mamba")


def _mamba2_fields(c: HFConfig) -> dict[str, Any]:
    """The ``mamba_*`` fields Granite-4.0-H and Falcon-H1 configs both give a Mamba 2 mixer."""
    return {
        "head": c.integer("mamba_d_head"),
        "groups": c.integer("mamba_n_groups", 1),
        "state": c.integer("mamba_d_state"),
        "conv": c.integer("mamba_d_conv", 4),
        "bias": c.flag("mamba_proj_bias", False),
        "conv_bias": c.flag("mamba_conv_bias", True),
    }


def mamba2_mixer(
    b: Builder,
    m: str,
    i: int,
    *,
    hidden: int,
    heads: int,
    head: int,
    groups: int,
    state: int,
    conv: int,
    bias: bool,
    conv_bias: bool,
    norm: bool = True,
    inner: int | None = None,
) -> None:
    """A Mamba 2 mixer: ``in_proj`` ``[z, x, B, C, dt]``, ``conv1d`` over ``[x, B, C]``,
    ``dt_bias``, ``A_log``, ``D``, the gated RMS norm and ``out_proj``."""
    inner = inner if inner is not None else heads * head
    gn = groups * state
    xbc = (Segment(inner, Split.COLUMN), Segment(gn, Split.HEADS, groups), Segment(gn, Split.HEADS, groups))
    proj = (Segment(inner, Split.COLUMN), *xbc, Segment(heads, Split.COLUMN))
    b.linear(
        f"{m}.in_proj",
        2 * inner + 2 * gn + heads,
        hidden,
        "mamba",
        split=Split.COLUMN,
        layer=i,
        bias=bias,
        segments=proj,
    )
    b.add(f"{m}.conv1d.weight", (inner + 2 * gn, 1, conv), "mamba", layer=i, segments=xbc)
    if conv_bias:
        b.add(f"{m}.conv1d.bias", (inner + 2 * gn,), "mamba", layer=i, segments=xbc)
    for name in ("dt_bias", "A_log", "D"):
        b.add(f"{m}.{name}", (heads,), "mamba", split=Split.COLUMN, layer=i, heads=heads)
    if norm:
        b.add(f"{m}.norm.weight", (inner,), "mamba", split=Split.COLUMN, layer=i)
    b.linear(f"{m}.out_proj", hidden, inner, "mamba", split=Split.ROW, layer=i, bias=bias)


def _dt_rank(value: object, hidden: int) -> int:
    return math.ceil(hidden / 16) if value in (None, "auto") else int(str(value))


def build_mamba1(b: Builder) -> tuple[int, int, int, bool]:
    """``mamba`` / ``falcon_mamba`` (``backbone.*``; tied embeddings by default)."""
    c = b.config
    hidden, layers, vocab = c.integer("hidden_size"), c.integer("num_hidden_layers"), c.integer("vocab_size")
    inner = c.integer("intermediate_size", c.integer("expand", 2) * hidden)
    tied = c.flag("tie_word_embeddings", True)
    dt_rank = _dt_rank(c.get("time_step_rank"), hidden)
    embedding(b, "backbone.embeddings.weight", vocab, hidden)
    for i in range(layers):
        p = f"backbone.layers.{i}"
        b.norm(f"{p}.norm", hidden, i)
        mamba1_mixer(
            b,
            f"{p}.mixer",
            i,
            hidden=hidden,
            inner=inner,
            state=c.integer("state_size", 16),
            conv=c.integer("conv_kernel", 4),
            dt_rank=dt_rank,
            bias=c.flag("use_bias", False),
            conv_bias=c.flag("use_conv_bias", True),
        )
    final(b, "backbone.norm_f", hidden, vocab, tied)
    return layers, vocab, hidden, tied


def build_mamba2(b: Builder) -> tuple[int, int, int, bool]:
    """``mamba2`` (``backbone.*``)."""
    c = b.config
    hidden, layers, vocab = c.integer("hidden_size"), c.integer("num_hidden_layers"), c.integer("vocab_size")
    tied = c.flag("tie_word_embeddings", False)
    heads, head = c.integer("num_heads"), c.integer("head_dim")
    embedding(b, "backbone.embeddings.weight", vocab, hidden)
    for i in range(layers):
        p = f"backbone.layers.{i}"
        b.norm(f"{p}.norm", hidden, i)
        mamba2_mixer(
            b,
            f"{p}.mixer",
            i,
            hidden=hidden,
            heads=heads,
            head=head,
            groups=c.integer("n_groups", 1),
            state=c.integer("state_size"),
            conv=c.integer("conv_kernel", 4),
            bias=c.flag("use_bias", False),
            conv_bias=c.flag("use_conv_bias", True),
            inner=c.integer("expand", 2) * hidden,
        )
    final(b, "backbone.norm_f", hidden, vocab, tied)
    return layers, vocab, hidden, tied


def _nemotron_kinds(b: Builder) -> list[str]:
    c = b.config
    pattern = c.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        names = {"M": "mamba", "-": "mlp", "*": "attention", "E": "moe"}
        kinds = []
        for ch in pattern:
            if ch not in names:
                raise c.error("hybrid_override_pattern", f"has {ch!r}; kvrules reads M, -, * and E")
            kinds.append(names[ch])
        return kinds
    listed = c.sequence("layers_block_type")
    if listed is None:
        raise c.missing("hybrid_override_pattern", "or layers_block_type")
    return [str(k) for k in listed]


def build_nemotron_h(b: Builder) -> tuple[int, int, int, bool]:
    """Nemotron-H: one mixer per layer, ``M`` Mamba 2, ``*`` attention, ``-`` a squared-ReLU MLP
    (``up_proj`` / ``down_proj``), each with its ``norm`` (``backbone.*``)."""
    c = b.config
    hidden, vocab = c.integer("hidden_size"), c.integer("vocab_size")
    kinds = _nemotron_kinds(b)
    tied = c.flag("tie_word_embeddings", False)
    att = gqa_attention(c, hidden)
    embedding(b, "backbone.embeddings.weight", vocab, hidden)
    for i, kind in enumerate(kinds):
        p = f"backbone.layers.{i}"
        b.norm(f"{p}.norm", hidden, i)
        m = f"{p}.mixer"
        if kind == "mamba":
            mamba2_mixer(
                b,
                m,
                i,
                hidden=hidden,
                heads=c.integer("mamba_num_heads"),
                head=c.integer("mamba_head_dim"),
                groups=c.integer("n_groups", 1),
                state=c.integer("ssm_state_size"),
                conv=c.integer("conv_kernel", 4),
                bias=c.flag("use_bias", False),
                conv_bias=c.flag("use_conv_bias", True),
            )
        elif kind == "attention":
            attention(b, m, i, att)
        elif kind == "mlp":
            inter = c.integer("intermediate_size")
            bias = c.flag("mlp_bias", False)
            b.linear(f"{m}.up_proj", inter, hidden, "mlp", split=Split.COLUMN, layer=i, bias=bias)
            b.linear(f"{m}.down_proj", hidden, inter, "mlp", split=Split.ROW, layer=i, bias=bias)
        else:
            raise c.error("hybrid_override_pattern", f"has a {kind!r} layer, which kvrules cannot count yet")
    final(b, "backbone.norm_f", hidden, vocab, tied)
    return len(kinds), vocab, hidden, tied


def build_jamba(b: Builder) -> tuple[int, int, int, bool]:
    """Jamba: attention every ``attn_layer_period`` from ``attn_layer_offset``, Mamba 1 (with its
    inner norms) elsewhere; MoE every ``expert_layer_period`` from ``expert_layer_offset``."""
    c = b.config
    hidden, layers, vocab = c.integer("hidden_size"), c.integer("num_hidden_layers"), c.integer("vocab_size")
    tied = c.flag("tie_word_embeddings", False)
    att = gqa_attention(c, hidden, derived_head_dim=True, attention_bias=False)
    a_period, a_offset = c.integer("attn_layer_period", 8), c.integer("attn_layer_offset", 4, minimum=0)
    e_period, e_offset = c.integer("expert_layer_period", 2), c.integer("expert_layer_offset", 1, minimum=0)
    count = c.integer("num_experts", 16)
    inter = c.integer("intermediate_size")
    inner = c.integer("mamba_expand", 2) * hidden
    embedding(b, "model.embed_tokens.weight", vocab, hidden)
    for i in range(layers):
        p = f"model.layers.{i}"
        b.norm(f"{p}.input_layernorm", hidden, i)
        b.norm(f"{p}.pre_ff_layernorm", hidden, i)
        if i % a_period == a_offset:
            attention(b, f"{p}.self_attn", i, att)
        else:
            mamba1_mixer(
                b,
                f"{p}.mamba",
                i,
                hidden=hidden,
                inner=inner,
                state=c.integer("mamba_d_state", 16),
                conv=c.integer("mamba_d_conv", 4),
                dt_rank=_dt_rank(c.get("mamba_dt_rank"), hidden),
                bias=c.flag("mamba_proj_bias", False),
                conv_bias=c.flag("mamba_conv_bias", True),
                inner_norms=True,
            )
        f = f"{p}.feed_forward"
        if count > 1 and i % e_period == e_offset:
            router(b, f"{f}.router", i, hidden, count)
            experts(b, f"{f}.experts", i, hidden, inter, count)
        else:
            gated_mlp(b, f, i, hidden, inter)
    final(b, "model.final_layernorm", hidden, vocab, tied)
    return layers, vocab, hidden, tied


def build_granite_hybrid(b: Builder) -> tuple[int, int, int, bool]:
    """Granite-4.0-H (``granitemoehybrid``): Mamba 2 or attention per ``layer_types``, then a MoE
    (``block_sparse_moe``: ``router.layer``, stacked ``input_linear`` ``[2I, H]`` and
    ``output_linear`` ``[H, I]``) and a shared MLP (``shared_mlp``)."""
    c = b.config
    hidden, layers, vocab = c.integer("hidden_size"), c.integer("num_hidden_layers"), c.integer("vocab_size")
    tied = c.flag("tie_word_embeddings", True)
    kinds = c.sequence("layer_types", layers) or ["mamba"] * layers
    att = gqa_attention(c, hidden, derived_head_dim=True)
    count = c.integer("num_local_experts", 0, minimum=0)
    shared = c.integer("shared_intermediate_size", 0, minimum=0)
    embedding(b, "model.embed_tokens.weight", vocab, hidden)
    for i, kind in enumerate(kinds):
        p = f"model.layers.{i}"
        b.norm(f"{p}.input_layernorm", hidden, i)
        b.norm(f"{p}.post_attention_layernorm", hidden, i)
        if kind in ("mamba", "linear_attention"):  # transformers 5 renames "mamba" to "linear_attention"
            heads_m = c.integer("mamba_n_heads")
            mamba2_mixer(
                b,
                f"{p}.mamba",
                i,
                hidden=hidden,
                heads=heads_m,
                **_mamba2_fields(c),
            )
        else:
            attention(b, f"{p}.self_attn", i, att)
        if count:
            inter = c.integer("intermediate_size")
            m = f"{p}.block_sparse_moe"
            router(b, f"{m}.router.layer", i, hidden, count)
            b.linear(
                f"{m}.input_linear", 2 * inter, hidden, "experts", split=Split.COLUMN, layer=i, experts=count
            )
            b.linear(f"{m}.output_linear", hidden, inter, "experts", split=Split.ROW, layer=i, experts=count)
        if shared:
            s = f"{p}.shared_mlp"
            b.linear(f"{s}.input_linear", 2 * shared, hidden, "shared_experts", split=Split.COLUMN, layer=i)
            b.linear(f"{s}.output_linear", hidden, shared, "shared_experts", split=Split.ROW, layer=i)
    final(b, "model.norm", hidden, vocab, tied)
    return layers, vocab, hidden, tied


def build_falcon_h1(b: Builder) -> tuple[int, int, int, bool]:
    """Falcon-H1: every layer runs attention and a Mamba 2 mixer in parallel, then an MLP."""
    c = b.config
    hidden, layers, vocab = c.integer("hidden_size"), c.integer("num_hidden_layers"), c.integer("vocab_size")
    tied = c.flag("tie_word_embeddings", False)
    att = gqa_attention(c, hidden)
    m_heads = c.integer("mamba_n_heads")
    d_ssm = c.integer("mamba_d_ssm", c.integer("mamba_expand", 2) * hidden)
    embedding(b, "model.embed_tokens.weight", vocab, hidden)
    for i in range(layers):
        p = f"model.layers.{i}"
        b.norm(f"{p}.input_layernorm", hidden, i)
        b.norm(f"{p}.pre_ff_layernorm", hidden, i)
        attention(b, f"{p}.self_attn", i, att)
        mamba2_mixer(
            b,
            f"{p}.mamba",
            i,
            hidden=hidden,
            heads=m_heads,
            **_mamba2_fields(c),
            norm=c.flag("mamba_rms_norm", False),
            inner=d_ssm,
        )
        gated_mlp(
            b, f"{p}.feed_forward", i, hidden, c.integer("intermediate_size"), bias=c.flag("mlp_bias", False)
        )
    final(b, "model.final_layernorm", hidden, vocab, tied)
    return layers, vocab, hidden, tied


def _gdn(b: Builder, a: str, i: int, hidden: int) -> None:
    """Qwen3-Next's gated delta net."""
    c = b.config
    nk, dk = c.integer("linear_num_key_heads"), c.integer("linear_key_head_dim")
    nv, dv = c.integer("linear_num_value_heads"), c.integer("linear_value_head_dim")
    conv = c.integer("linear_conv_kernel_dim", 4)
    b.linear(
        f"{a}.in_proj_qkvz",
        2 * nk * dk + 2 * nv * dv,
        hidden,
        "linear_attention",
        split=Split.COLUMN,
        layer=i,
        heads=nk,
    )
    b.linear(f"{a}.in_proj_ba", 2 * nv, hidden, "linear_attention", split=Split.COLUMN, layer=i, heads=nk)
    b.add(
        f"{a}.conv1d.weight",
        (2 * nk * dk + nv * dv, 1, conv),
        "linear_attention",
        split=Split.COLUMN,
        layer=i,
        heads=nk,
    )
    b.add(f"{a}.dt_bias", (nv,), "linear_attention", split=Split.COLUMN, layer=i, heads=nv)
    b.add(f"{a}.A_log", (nv,), "linear_attention", split=Split.COLUMN, layer=i, heads=nv)
    b.norm(f"{a}.norm", dv, i, component="linear_attention")
    b.linear(f"{a}.out_proj", hidden, nv * dv, "linear_attention", split=Split.ROW, layer=i, heads=nv)


def _qwen3_next_layer(b: Builder, p: str, i: int, kind: str, hidden: int, att: Attention) -> None:
    b.norm(f"{p}.input_layernorm", hidden, i)
    b.norm(f"{p}.post_attention_layernorm", hidden, i)
    if kind == "linear_attention":
        _gdn(b, f"{p}.linear_attn", i, hidden)
    else:
        attention(b, f"{p}.self_attn", i, att)
    if not qwen_moe(b, f"{p}.mlp", i):
        gated_mlp(b, f"{p}.mlp", i, hidden, b.config.integer("intermediate_size"))


def build_qwen3_next(b: Builder) -> tuple[int, int, int, bool]:
    """Qwen3-Next / Qwen3-Coder-Next: gated delta net or gated full attention (``q_proj`` holds
    the output gate too) per ``layer_types``, Qwen2-MoE's block on every layer, and the
    checkpoint's MTP module ``mtp.*`` (``fc``, two pre-norms, ``mtp_num_hidden_layers`` full
    attention layers, ``norm``)."""
    c = b.config
    hidden, layers, vocab = c.integer("hidden_size"), c.integer("num_hidden_layers"), c.integer("vocab_size")
    tied = c.flag("tie_word_embeddings", False)
    # Qwen3-Next's o_proj has no bias, whatever attention_bias says of q/k/v
    att = replace(gqa_attention(c, hidden), o_bias=False, qk_norm="head", q_rows_factor=2)
    kinds = c.sequence("layer_types", layers)
    if kinds is None:
        every = c.integer("full_attention_interval", 4)
        kinds = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(layers)]
    embedding(b, "model.embed_tokens.weight", vocab, hidden)
    for i, kind in enumerate(kinds):
        _qwen3_next_layer(b, f"model.layers.{i}", i, str(kind), hidden, att)
    final(b, "model.norm", hidden, vocab, tied)
    mtp = c.integer("mtp_num_hidden_layers", 1, minimum=0)
    if mtp:
        b.set_role(Role.MTP)
        b.linear("mtp.fc", hidden, 2 * hidden, "mtp", split=Split.REPLICATED, layer=layers)
        for norm in ("mtp.pre_fc_norm_embedding", "mtp.pre_fc_norm_hidden", "mtp.norm"):
            b.norm(norm, hidden, layers)
        for k in range(mtp):
            _qwen3_next_layer(b, f"mtp.layers.{k}", layers + k, "full_attention", hidden, att)
        b.set_role(Role.MODEL)
    return layers, vocab, hidden, tied
