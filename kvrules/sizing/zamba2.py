"""Reader for Zyphra's Zamba2 (``zamba2``): a Mamba 2 backbone with ``num_mem_blocks`` shared
transformer blocks, used in turn by the ``hybrid`` layers of ``layers_block_type``.

Every layer has a Mamba 2 mixer (``model.layers.N.mamba``, or ``model.layers.N.mamba_decoder.mamba``
in a hybrid layer) and its ``input_layernorm``. A hybrid layer also runs a shared block on the
concatenation of its input and the embeddings (``2 x hidden_size`` wide), then its own
``linear`` ``[H, H]``. The checkpoint stores each shared block once, under the hybrid layer that
uses it first (transformers' ``Zamba2Model.get_layers`` ties the later uses to it): its
``input_layernorm`` ``[2H]``, ``self_attn`` (``q_proj`` / ``k_proj`` / ``v_proj`` from ``2H``,
``o_proj`` to ``H``), ``pre_ff_layernorm`` and ``feed_forward`` (``gate_up_proj`` ``[2I, H]``,
``down_proj``), plus the per-use LoRA adapters of the uses it serves: hybrid use ``j`` runs block
``j % num_mem_blocks`` and adds ``feed_forward.gate_up_proj_adapter_list.j.{0,1}`` (``[r, H]``,
``[2I, r]``), and with ``use_shared_attention_adapter`` ``self_attn.linear_{q,k,v}_adapter_list.j``
(``[r, 2H]``, ``[2H, r]``). The MLP adapters exist whatever ``use_shared_mlp_adapter`` says
(transformers and vLLM both build them unconditionally).

TP splits are vLLM's ``zamba2.py``: the Mamba 2 mixer as ``MambaMixer2``, ``q/k/v_proj`` a
``QKVParallelLinear``, ``o_proj`` and ``down_proj`` row-parallel, ``gate_up_proj`` column-parallel,
each adapter's ``A`` (``.0``) and ``B`` (``.1``) column-parallel, the hybrid ``linear`` replicated.
"""

from __future__ import annotations

from kvrules.sizing.build import Builder, embedding, final
from kvrules.sizing.hybrid import mamba2_mixer
from kvrules.sizing.weights import Split


def _kinds(b: Builder) -> list[str]:
    """``layers_block_type`` with transformers 5's ``linear_attention`` read as ``mamba``."""
    c = b.config
    listed = c.sequence("layers_block_type", c.integer("num_hidden_layers"))
    if listed is None:
        raise c.missing("layers_block_type", "it says which layers run a shared block")
    kinds = ["mamba" if k in ("mamba", "linear_attention") else str(k) for k in listed]
    for kind in kinds:
        if kind not in ("mamba", "hybrid"):
            raise c.error("layers_block_type", f"has {kind!r}; Zamba2 layers are mamba or hybrid")
    return kinds


def _mamba_layer(b: Builder, p: str, i: int) -> None:
    """``p.input_layernorm`` and the Mamba 2 mixer ``p.mamba`` (its ``conv1d`` always biased:
    transformers' ``Zamba2MambaMixer`` builds the bias whatever ``use_conv_bias`` says)."""
    c = b.config
    hidden = c.integer("hidden_size")
    inner = int(c.number("mamba_expand", 2) * hidden)
    heads = c.integer("n_mamba_heads", 8)
    b.norm(f"{p}.input_layernorm", hidden, i)
    mamba2_mixer(
        b,
        f"{p}.mamba",
        i,
        hidden=hidden,
        heads=heads,
        head=inner // heads,
        groups=c.integer("mamba_ngroups", 1),
        state=c.integer("mamba_d_state", 64),
        conv=c.integer("mamba_d_conv", 4),
        bias=c.flag("add_bias_linear", False),
        conv_bias=True,
        inner=inner,
    )


def _adapter(b: Builder, name: str, out: int, inp: int, rank: int, layer: int) -> None:
    """One LoRA adapter: ``name.0`` ``[rank, inp]`` then ``name.1`` ``[out, rank]`` (vLLM's
    ``Zamba2LoRA``: both column-parallel)."""
    b.linear(f"{name}.0", rank, inp, "adapters", split=Split.COLUMN, layer=layer)
    b.linear(f"{name}.1", out, rank, "adapters", split=Split.COLUMN, layer=layer)


def _shared_attention(b: Builder, a: str, layer: int) -> None:
    """The shared block's attention ``a``: ``q_proj`` / ``k_proj`` / ``v_proj`` from the
    ``2 x hidden_size`` input, ``o_proj`` back to ``hidden_size``."""
    c = b.config
    hidden = c.integer("hidden_size")
    heads = c.integer("num_attention_heads", 32)
    kv = c.integer("num_key_value_heads", heads)
    head = c.integer("attention_head_dim", 2 * hidden // heads)
    b.linear(
        f"{a}.q_proj", heads * head, 2 * hidden, "attention", split=Split.COLUMN, layer=layer, heads=heads
    )
    for name in ("k_proj", "v_proj"):
        b.linear(f"{a}.{name}", kv * head, 2 * hidden, "attention", split=Split.HEADS, layer=layer, heads=kv)
    b.linear(f"{a}.o_proj", hidden, heads * head, "attention", split=Split.ROW, layer=layer, heads=heads)


def _shared_block(b: Builder, p: str, layer: int, uses: list[int]) -> None:
    """Shared block ``p`` (``...shared_transformer``) with the adapters of hybrid uses ``uses``."""
    c = b.config
    hidden = c.integer("hidden_size")
    inter = c.integer("intermediate_size", 4 * hidden)
    rank = c.integer("adapter_rank", 128)
    bias = c.flag("add_bias_linear", False)
    b.norm(f"{p}.input_layernorm", 2 * hidden, layer)
    _shared_attention(b, f"{p}.self_attn", layer)
    b.norm(f"{p}.pre_ff_layernorm", hidden, layer)
    f = f"{p}.feed_forward"
    b.linear(f"{f}.gate_up_proj", 2 * inter, hidden, "mlp", split=Split.COLUMN, layer=layer, bias=bias)
    b.linear(f"{f}.down_proj", hidden, inter, "mlp", split=Split.ROW, layer=layer, bias=bias)
    for j in uses:
        _adapter(b, f"{f}.gate_up_proj_adapter_list.{j}", 2 * inter, hidden, rank, layer)
        if c.flag("use_shared_attention_adapter", False):
            for name in ("q", "k", "v"):
                _adapter(
                    b, f"{p}.self_attn.linear_{name}_adapter_list.{j}", 2 * hidden, 2 * hidden, rank, layer
                )


def build_zamba2(b: Builder) -> tuple[int, int, int, bool]:
    """Zamba2 (see the module's description); tied embeddings by default (``Zamba2Config``)."""
    c = b.config
    hidden, vocab = c.integer("hidden_size"), c.integer("vocab_size")
    kinds = _kinds(b)
    tied = c.flag("tie_word_embeddings", True)
    blocks = c.integer("num_mem_blocks", 1)
    hybrids = [i for i, kind in enumerate(kinds) if kind == "hybrid"]
    embedding(b, "model.embed_tokens.weight", vocab, hidden)
    for i, kind in enumerate(kinds):
        p = f"model.layers.{i}"
        if kind == "mamba":
            _mamba_layer(b, p, i)
            continue
        use = hybrids.index(i)
        if use < blocks:
            served = list(range(use, len(hybrids), blocks))
            _shared_block(b, f"{p}.shared_transformer", i, served)
        b.linear(f"{p}.linear", hidden, hidden, "mlp", split=Split.REPLICATED, layer=i)
        _mamba_layer(b, f"{p}.mamba_decoder", i)
    final(b, "model.final_layernorm", hidden, vocab, tied)
    return len(kinds), vocab, hidden, tied
