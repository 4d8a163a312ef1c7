"""The building blocks the architecture readers share: a :class:`Builder` that collects
:class:`~kvrules.sizing.weights.Weight` records, and the blocks most decoders are made of (attention,
gated MLP, routed experts, embeddings and ``lm_head``), each split the way vLLM's layer splits it.

Every reader in :mod:`kvrules.sizing.dense`, :mod:`kvrules.sizing.hybrid` and :mod:`kvrules.sizing.vision`
calls these with the checkpoint's names, so the names in a quantisation config's ignore list
(``lm_head``, ``model.layers.0.mlp.gate``) match the records.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvrules.hf.config import HFConfig
from kvrules.sizing.weights import Role, Segment, Split, Stage, Weight, WeightTable


class Builder:
    """Collects the weights of one checkpoint.

    :param config: the config being read (its getters raise ``ModelFileError`` naming the field).

    New records belong to the language model (``Role.MODEL``) until :meth:`set_role` switches
    them to MTP or vision parts.
    """

    def __init__(self, config: HFConfig) -> None:
        self.config = config
        self.weights: list[Weight] = []
        self.notes: list[str] = []
        self._role = Role.MODEL

    # -- records --------------------------------------------------------------------------
    def set_role(self, role: Role) -> None:
        """New records belong to ``role`` from now on."""
        self._role = role

    def add(
        self,
        name: str,
        shape: tuple[int, ...],
        component: str,
        *,
        split: Split = Split.REPLICATED,
        layer: int | None = None,
        stage: Stage = Stage.LAYER,
        linear: bool = False,
        experts: int = 0,
        heads: int = 0,
        segments: tuple[Segment, ...] = (),
    ) -> None:
        """Record one tensor (nothing for a zero-sized one)."""
        if any(d <= 0 for d in shape):
            return
        if self._role is Role.VISION:
            stage = Stage.EVERY
        elif self._role is Role.MTP:
            stage = Stage.LAST  # vLLM runs an MTP drafter beside the last PP stage
        self.weights.append(
            Weight(name, shape, component, split, stage, layer, linear, experts, heads, segments, self._role)
        )

    def linear(
        self,
        name: str,
        out: int,
        inp: int,
        component: str,
        *,
        split: Split,
        layer: int | None,
        bias: bool = False,
        heads: int = 0,
        experts: int = 0,
        quantizable: bool = True,
        segments: tuple[Segment, ...] = (),
    ) -> None:
        """A linear layer ``name`` (``name.weight`` ``[out, in]``, ``name.bias`` ``[out]``).

        A column- or head-split layer's bias is split with it; a row-split layer's bias is whole
        on every rank (vLLM's ``RowParallelLinear`` adds it once, after the reduction).
        """
        self.add(
            f"{name}.weight",
            (out, inp),
            component,
            split=split,
            layer=layer,
            linear=quantizable,
            experts=experts,
            heads=heads,
            segments=segments,
        )
        if bias:
            bias_split = Split.REPLICATED if split in (Split.ROW, Split.REPLICATED) else split
            self.add(
                f"{name}.bias",
                (out,),
                component,
                split=bias_split,
                layer=layer,
                experts=experts,
                heads=heads,
                segments=segments,
            )

    def norm(
        self,
        name: str,
        dim: int,
        layer: int | None,
        *,
        bias: bool = False,
        component: str = "norm",
        stage: Stage = Stage.LAYER,
    ) -> None:
        """A norm's weight (and bias for a LayerNorm with one): replicated."""
        self.add(f"{name}.weight", (dim,), component, layer=layer, stage=stage)
        if bias:
            self.add(f"{name}.bias", (dim,), component, layer=layer, stage=stage)

    def table(self, num_layers: int, vocab: int, hidden: int, tied: bool) -> WeightTable:
        """The collected records as a :class:`WeightTable`."""
        return WeightTable(
            tuple(self.weights),
            self.config.text_model_type,
            num_layers,
            vocab,
            hidden,
            tied,
            tuple(self.notes),
        )


@dataclass(frozen=True)
class Attention:
    """The shape of a standard (GQA) attention block.

    :ivar q_rows_factor: 2 when ``q_proj`` also produces an output gate (Qwen3-Next).
    :ivar qk_norm: ``head`` (one weight of ``head_dim`` each, Qwen3), ``full`` (``heads *
        head_dim``, OLMo 2 and MiniMax-M2), or ``None``.
    """

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: str | None = None
    q_rows_factor: int = 1
    o_name: str = "o_proj"
    q_norm_name: str = "q_norm"
    k_norm_name: str = "k_norm"
    norm_bias: bool = False


def attention(b: Builder, prefix: str, layer: int, a: Attention) -> None:
    """q/k/v/o projections (vLLM's ``QKVParallelLinear`` + ``RowParallelLinear``) and QK norms."""
    q_width, kv_width = a.heads * a.head_dim, a.kv_heads * a.head_dim
    for name, rows, cols, split, bias, heads in (
        ("q_proj", q_width * a.q_rows_factor, a.hidden, Split.COLUMN, a.qkv_bias, a.heads),
        ("k_proj", kv_width, a.hidden, Split.HEADS, a.qkv_bias, a.kv_heads),
        ("v_proj", kv_width, a.hidden, Split.HEADS, a.qkv_bias, a.kv_heads),
        (a.o_name, a.hidden, q_width, Split.ROW, a.o_bias, a.heads),
    ):
        b.linear(
            f"{prefix}.{name}", rows, cols, "attention", split=split, layer=layer, bias=bias, heads=heads
        )
    norms = {"head": (a.head_dim, a.head_dim), "full": (q_width, kv_width)}
    if a.qk_norm in norms:
        for name, width in zip((a.q_norm_name, a.k_norm_name), norms[a.qk_norm], strict=True):
            b.norm(f"{prefix}.{name}", width, layer, bias=a.norm_bias, component="attention")


def gated_mlp(
    b: Builder,
    prefix: str,
    layer: int,
    hidden: int,
    inter: int,
    *,
    component: str = "mlp",
    bias: bool = False,
    names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj"),
) -> None:
    """A SwiGLU MLP: gate and up column-split (vLLM's ``MergedColumnParallelLinear``), down
    row-split."""
    gate, up, down = names
    b.linear(f"{prefix}.{gate}", inter, hidden, component, split=Split.COLUMN, layer=layer, bias=bias)
    b.linear(f"{prefix}.{up}", inter, hidden, component, split=Split.COLUMN, layer=layer, bias=bias)
    b.linear(f"{prefix}.{down}", hidden, inter, component, split=Split.ROW, layer=layer, bias=bias)


def gated_shared_expert(b: Builder, prefix: str, layer: int, hidden: int, inter: int) -> None:
    """The shared expert ``<prefix>.shared_expert`` (a SwiGLU MLP of ``inter``) and its gate
    ``<prefix>.shared_expert_gate`` ``[1, H]`` (replicated, never quantised), as Qwen2-MoE,
    Qwen3-Next and Qwen3.5-MoE store them; nothing when ``inter`` is 0."""
    if inter:
        gated_mlp(b, f"{prefix}.shared_expert", layer, hidden, inter, component="shared_experts")
        b.linear(
            f"{prefix}.shared_expert_gate",
            1,
            hidden,
            "shared_experts",
            split=Split.REPLICATED,
            layer=layer,
            quantizable=False,
        )


def experts(
    b: Builder,
    prefix: str,
    layer: int,
    hidden: int,
    inter: int,
    count: int,
    *,
    names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj"),
    bias: bool = False,
) -> None:
    """``count`` routed experts stacked (vLLM's ``FusedMoE``: under TP every rank holds every
    expert with its intermediate dimension divided; under EP each rank holds whole experts)."""
    gate, up, down = names
    for name, rows, cols, split in (
        (gate, inter, hidden, Split.COLUMN),
        (up, inter, hidden, Split.COLUMN),
        (down, hidden, inter, Split.ROW),
    ):
        b.linear(
            f"{prefix}.*.{name}", rows, cols, "experts", split=split, layer=layer, experts=count, bias=bias
        )


def fused_experts(
    b: Builder, prefix: str, layer: int, hidden: int, inter: int, count: int, *, bias: bool = False
) -> None:
    """``count`` routed experts as checkpoints that fuse them store them (gpt-oss, Qwen3.5-MoE):
    ``gate_up_proj`` ``[E, 2I, H]`` column-split and ``down_proj`` ``[E, H, I]`` row-split, each
    with its ``_bias`` when ``bias`` (``down_proj``'s whole on every rank)."""
    for name, rows, cols, split, bias_split in (
        ("gate_up_proj", 2 * inter, hidden, Split.COLUMN, Split.COLUMN),
        ("down_proj", hidden, inter, Split.ROW, Split.REPLICATED),
    ):
        b.add(
            f"{prefix}.{name}", (rows, cols), "experts", split=split, layer=layer, linear=True, experts=count
        )
        if bias:
            b.add(f"{prefix}.{name}_bias", (rows,), "experts", split=bias_split, layer=layer, experts=count)


def router(b: Builder, name: str, layer: int, hidden: int, count: int, *, bias: bool = False) -> None:
    """A MoE router: a replicated linear vLLM never quantises (its models build it with
    ``quant_config=None``; checkpoints store it in the model dtype)."""
    b.linear(name, count, hidden, "router", split=Split.REPLICATED, layer=layer, bias=bias, quantizable=False)


def embedding(b: Builder, name: str, vocab: int, hidden: int) -> None:
    """The input embedding (vocabulary-parallel, first PP rank)."""
    b.add(name, (vocab, hidden), "embedding", split=Split.VOCAB, stage=Stage.FIRST)


def final(
    b: Builder,
    norm: str | None,
    hidden: int,
    vocab: int,
    tied: bool,
    *,
    norm_bias: bool = False,
    head: str = "lm_head.weight",
) -> None:
    """The final norm and ``lm_head`` (last PP rank); no ``lm_head`` of its own when tied."""
    if norm:
        b.norm(norm, hidden, None, bias=norm_bias, stage=Stage.LAST)
    if not tied:
        b.add(head, (vocab, hidden), "lm_head", split=Split.VOCAB, stage=Stage.LAST)


def head_dim(config: HFConfig, hidden: int, heads: int) -> int:
    """``head_dim`` from the config, else ``hidden_size // num_attention_heads``."""
    value = config.opt_int("head_dim")
    return value if value is not None else hidden // heads


def gqa_attention(
    config: HFConfig, hidden: int, *, derived_head_dim: bool = False, attention_bias: bool = True
) -> Attention:
    """The common GQA block of ``config``, its fields read in this order: ``num_attention_heads``,
    ``num_key_value_heads`` (default: the heads), ``head_dim`` (:func:`head_dim`; with
    ``derived_head_dim`` always ``hidden / heads``), then, with ``attention_bias``, the q/k/v and o
    biases from ``attention_bias``. A reader sets the other fields with ``dataclasses.replace``
    afterwards, so that what they read comes after these (the order of the assumed-field notes)."""
    heads = config.integer("num_attention_heads")
    kv_heads = config.integer("num_key_value_heads", heads)
    dim = hidden // heads if derived_head_dim else head_dim(config, hidden, heads)
    bias = attention_bias and config.flag("attention_bias", False)
    return Attention(hidden, heads, kv_heads, dim, qkv_bias=bias, o_bias=bias)
