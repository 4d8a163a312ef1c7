"""Vision towers of multimodal checkpoints, counted when kvrules knows the tower.

A multimodal checkpoint holds the language model, a vision encoder and a projector; vLLM loads
all three (the encoder runs on the rank's own GPU, split over TP like the language model's
layers). Known towers:

* Gemma 3 (``siglip_vision_model``): SigLIP with a ``[patch, patch]`` convolution and learned
  positions, LayerNorms and biased projections, then ``multi_modal_projector``
  (``mm_input_projection_weight`` ``[vision hidden, text hidden]`` and ``mm_soft_emb_norm``);
* Qwen2.5-VL (``qwen2_5_vl``): a 3-D patch convolution (``temporal_patch_size``), RMS-normed
  blocks with a fused biased ``qkv``, a biased SwiGLU MLP, and the ``merger``
  (``ln_q`` + two biased linears over ``spatial_merge_size ** 2`` patches);
* Mistral 3 (``pixtral``): Pixtral's unbiased patch convolution, ``ln_pre``, RMS-normed blocks
  with unbiased attention and SwiGLU, then ``multi_modal_projector`` (a norm, the
  ``patch_merger.merging_layer`` over ``spatial_merge_size ** 2`` patches, ``linear_1`` and
  ``linear_2``, biased only with ``multimodal_projector_bias``);
* Qwen3.5 / Qwen3.5-MoE (``qwen3_5`` / ``qwen3_5_vision``, ``qwen3_5_moe`` /
  ``qwen3_5_moe_vision``): a biased 3-D patch convolution, learned positions
  (``num_position_embeddings``), LayerNorm blocks with a biased fused ``qkv`` and a biased
  two-matrix MLP (``linear_fc1`` / ``linear_fc2``), then the ``merger`` (a LayerNorm and two biased
  linears over ``spatial_merge_size ** 2`` patches), all under ``model.visual``;
* Llama 4 (``llama4_vision_model``): an unfold-convolution ``linear``, a class embedding,
  learned positions for ``(image_size / patch_size) ** 2 + 1`` patches, LayerNorms before and
  after, biased attention and MLP blocks, the pixel-shuffle adapter (``fc1``
  ``[projector_input_dim, intermediate_size]``, ``fc2``) and ``multi_modal_projector.linear_1``.

(The shapes are those of transformers' ``modeling_siglip.py``, ``modeling_qwen2_5_vl.py``,
``modeling_pixtral.py`` / ``modeling_mistral3.py``, ``modeling_qwen3_5.py`` and ``modeling_llama4.py``;
the Qwen3.5 tower's TP split is vLLM's ``Qwen3_VisionTransformer``.)

Any other ``vision_config`` is left out: the count covers the language model, and a note says
the vision tower is not counted (:attr:`~kvrules.sizing.params.ParamCount.complete` is ``False``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvrules.errors import ModelFileError
from kvrules.sizing.build import Builder
from kvrules.sizing.weights import Role, Split

#: the class defaults of the fields a tower's shapes need, where the file may leave them out
#: (transformers' ``SiglipVisionConfig``, ``Qwen2_5_VLVisionConfig`` and ``Qwen3_5VisionConfig``)
DEFAULTS: dict[str, dict[str, int]] = {
    "siglip_vision_model": {"num_channels": 3},
    "qwen2_5_vl": {"in_channels": 3, "temporal_patch_size": 2, "spatial_merge_size": 2, "in_chans": 3},
    "pixtral": {"num_channels": 3},
    "llama4_vision_model": {"num_channels": 3},
    **{
        kind: {
            "in_channels": 3,
            "temporal_patch_size": 2,
            "spatial_merge_size": 2,
            "num_position_embeddings": 2304,
        }
        for kind in ("qwen3_5", "qwen3_5_vision", "qwen3_5_moe", "qwen3_5_moe_vision")
    },
}


#: the ``vision_config.model_type`` spellings of Qwen3.5's tower
QWEN3_5_TOWERS = frozenset({"qwen3_5", "qwen3_5_vision", "qwen3_5_moe", "qwen3_5_moe_vision"})


class _Fields:
    """Typed access to ``vision_config``, with errors naming ``vision_config.<field>``."""

    def __init__(self, data: Mapping[str, Any], source: str, kind: str) -> None:
        self.data, self.source, self.defaults = data, source, DEFAULTS.get(kind, {})

    def int(self, key: str) -> int:
        value = self.data.get(key)
        if value is None and key == "in_channels":
            value = self.data.get("in_chans")
        if value is None:
            value = self.defaults.get(key)
        if value is None:
            raise ModelFileError(
                f"{self.source}: required field 'vision_config.{key}' is missing (the vision tower's shapes "
                "need it); add it from the checkpoint's config.json"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ModelFileError(
                f"{self.source}: field 'vision_config.{key}' is {value!r}; it must be a positive integer"
            )
        return value


def _siglip(b: Builder, v: _Fields, text_hidden: int) -> None:
    hidden, inter = v.int("hidden_size"), v.int("intermediate_size")
    patch, image = v.int("patch_size"), v.int("image_size")
    t = "vision_tower.vision_model"
    b.add(f"{t}.embeddings.patch_embedding.weight", (hidden, v.int("num_channels"), patch, patch), "vision")
    b.add(f"{t}.embeddings.patch_embedding.bias", (hidden,), "vision")
    b.add(f"{t}.embeddings.position_embedding.weight", ((image // patch) ** 2, hidden), "vision")
    for i in range(v.int("num_hidden_layers")):
        p = f"{t}.encoder.layers.{i}"
        b.norm(f"{p}.layer_norm1", hidden, None, bias=True, component="vision")
        b.norm(f"{p}.layer_norm2", hidden, None, bias=True, component="vision")
        for name in ("q_proj", "k_proj", "v_proj"):
            b.linear(
                f"{p}.self_attn.{name}", hidden, hidden, "vision", split=Split.COLUMN, layer=None, bias=True
            )
        b.linear(f"{p}.self_attn.out_proj", hidden, hidden, "vision", split=Split.ROW, layer=None, bias=True)
        b.linear(f"{p}.mlp.fc1", inter, hidden, "vision", split=Split.COLUMN, layer=None, bias=True)
        b.linear(f"{p}.mlp.fc2", hidden, inter, "vision", split=Split.ROW, layer=None, bias=True)
    b.norm(f"{t}.post_layernorm", hidden, None, bias=True, component="vision")
    b.add("multi_modal_projector.mm_input_projection_weight", (hidden, text_hidden), "vision")
    b.norm("multi_modal_projector.mm_soft_emb_norm", hidden, None, component="vision")


def _qwen25_vl(b: Builder, v: _Fields) -> None:
    hidden, inter, out = v.int("hidden_size"), v.int("intermediate_size"), v.int("out_hidden_size")
    patch, temporal = v.int("patch_size"), v.int("temporal_patch_size")
    merged = hidden * v.int("spatial_merge_size") ** 2
    b.add("visual.patch_embed.proj.weight", (hidden, v.int("in_channels"), temporal, patch, patch), "vision")
    for i in range(v.int("depth")):
        p = f"visual.blocks.{i}"
        b.norm(f"{p}.norm1", hidden, None, component="vision")
        b.norm(f"{p}.norm2", hidden, None, component="vision")
        b.linear(f"{p}.attn.qkv", 3 * hidden, hidden, "vision", split=Split.COLUMN, layer=None, bias=True)
        b.linear(f"{p}.attn.proj", hidden, hidden, "vision", split=Split.ROW, layer=None, bias=True)
        b.linear(f"{p}.mlp.gate_proj", inter, hidden, "vision", split=Split.COLUMN, layer=None, bias=True)
        b.linear(f"{p}.mlp.up_proj", inter, hidden, "vision", split=Split.COLUMN, layer=None, bias=True)
        b.linear(f"{p}.mlp.down_proj", hidden, inter, "vision", split=Split.ROW, layer=None, bias=True)
    b.norm("visual.merger.ln_q", hidden, None, component="vision")
    b.linear("visual.merger.mlp.0", merged, merged, "vision", split=Split.COLUMN, layer=None, bias=True)
    b.linear("visual.merger.mlp.2", out, merged, "vision", split=Split.ROW, layer=None, bias=True)


def _qwen3_5_vl(b: Builder, v: _Fields) -> None:
    hidden, inter, out = v.int("hidden_size"), v.int("intermediate_size"), v.int("out_hidden_size")
    patch, temporal = v.int("patch_size"), v.int("temporal_patch_size")
    merged = hidden * v.int("spatial_merge_size") ** 2
    t = "model.visual"
    b.add(f"{t}.patch_embed.proj.weight", (hidden, v.int("in_channels"), temporal, patch, patch), "vision")
    b.add(f"{t}.patch_embed.proj.bias", (hidden,), "vision")
    b.add(f"{t}.pos_embed.weight", (v.int("num_position_embeddings"), hidden), "vision")
    for i in range(v.int("depth")):
        p = f"{t}.blocks.{i}"
        b.norm(f"{p}.norm1", hidden, None, bias=True, component="vision")
        b.norm(f"{p}.norm2", hidden, None, bias=True, component="vision")
        b.linear(f"{p}.attn.qkv", 3 * hidden, hidden, "vision", split=Split.COLUMN, layer=None, bias=True)
        b.linear(f"{p}.attn.proj", hidden, hidden, "vision", split=Split.ROW, layer=None, bias=True)
        b.linear(f"{p}.mlp.linear_fc1", inter, hidden, "vision", split=Split.COLUMN, layer=None, bias=True)
        b.linear(f"{p}.mlp.linear_fc2", hidden, inter, "vision", split=Split.ROW, layer=None, bias=True)
    b.norm(f"{t}.merger.norm", hidden, None, bias=True, component="vision")
    b.linear(f"{t}.merger.linear_fc1", merged, merged, "vision", split=Split.COLUMN, layer=None, bias=True)
    b.linear(f"{t}.merger.linear_fc2", out, merged, "vision", split=Split.ROW, layer=None, bias=True)


def _pixtral(b: Builder, v: _Fields, text_hidden: int) -> None:
    hidden, inter, patch = v.int("hidden_size"), v.int("intermediate_size"), v.int("patch_size")
    t = "vision_tower"
    b.add(f"{t}.patch_conv.weight", (hidden, v.int("num_channels"), patch, patch), "vision")
    b.norm(f"{t}.ln_pre", hidden, None, component="vision")
    for i in range(v.int("num_hidden_layers")):
        p = f"{t}.transformer.layers.{i}"
        b.norm(f"{p}.attention_norm", hidden, None, component="vision")
        b.norm(f"{p}.ffn_norm", hidden, None, component="vision")
        for name in ("q_proj", "k_proj", "v_proj"):
            b.linear(f"{p}.attention.{name}", hidden, hidden, "vision", split=Split.COLUMN, layer=None)
        b.linear(f"{p}.attention.o_proj", hidden, hidden, "vision", split=Split.ROW, layer=None)
        for name in ("gate_proj", "up_proj"):
            b.linear(f"{p}.feed_forward.{name}", inter, hidden, "vision", split=Split.COLUMN, layer=None)
        b.linear(f"{p}.feed_forward.down_proj", hidden, inter, "vision", split=Split.ROW, layer=None)
    top = b.config.data
    merge = top.get("spatial_merge_size", 2)
    merge = merge if isinstance(merge, int) and not isinstance(merge, bool) and merge > 0 else 2
    bias = top.get("multimodal_projector_bias") is True
    m = "multi_modal_projector"
    b.norm(f"{m}.norm", hidden, None, component="vision")
    b.linear(
        f"{m}.patch_merger.merging_layer",
        hidden,
        hidden * merge**2,
        "vision",
        split=Split.REPLICATED,
        layer=None,
    )
    b.linear(f"{m}.linear_1", text_hidden, hidden, "vision", split=Split.REPLICATED, layer=None, bias=bias)
    b.linear(
        f"{m}.linear_2", text_hidden, text_hidden, "vision", split=Split.REPLICATED, layer=None, bias=bias
    )


def _llama4(b: Builder, v: _Fields, text_hidden: int) -> None:
    hidden, inter, patch = v.int("hidden_size"), v.int("intermediate_size"), v.int("patch_size")
    t = "vision_model"
    b.linear(
        f"{t}.patch_embedding.linear",
        hidden,
        v.int("num_channels") * patch * patch,
        "vision",
        split=Split.REPLICATED,
        layer=None,
    )
    b.add(f"{t}.class_embedding", (hidden,), "vision")
    b.add(f"{t}.positional_embedding_vlm", ((v.int("image_size") // patch) ** 2 + 1, hidden), "vision")
    b.norm(f"{t}.layernorm_pre", hidden, None, bias=True, component="vision")
    b.norm(f"{t}.layernorm_post", hidden, None, bias=True, component="vision")
    for i in range(v.int("num_hidden_layers")):
        p = f"{t}.model.layers.{i}"
        b.norm(f"{p}.input_layernorm", hidden, None, bias=True, component="vision")
        b.norm(f"{p}.post_attention_layernorm", hidden, None, bias=True, component="vision")
        for name in ("q_proj", "k_proj", "v_proj"):
            b.linear(
                f"{p}.self_attn.{name}", hidden, hidden, "vision", split=Split.COLUMN, layer=None, bias=True
            )
        b.linear(f"{p}.self_attn.o_proj", hidden, hidden, "vision", split=Split.ROW, layer=None, bias=True)
        b.linear(f"{p}.mlp.fc1", inter, hidden, "vision", split=Split.COLUMN, layer=None, bias=True)
        b.linear(f"{p}.mlp.fc2", hidden, inter, "vision", split=Split.ROW, layer=None, bias=True)
    a = f"{t}.vision_adapter.mlp"
    b.linear(f"{a}.fc1", v.int("projector_input_dim"), inter, "vision", split=Split.REPLICATED, layer=None)
    out = v.int("projector_output_dim")
    b.linear(f"{a}.fc2", out, out, "vision", split=Split.REPLICATED, layer=None)
    b.linear(
        "multi_modal_projector.linear_1",
        text_hidden,
        v.int("vision_output_dim"),
        "vision",
        split=Split.REPLICATED,
        layer=None,
    )


def build_vision(b: Builder, text_hidden: int) -> None:
    """Add the vision tower of ``b.config`` (nothing for a text-only config; a note for a tower
    kvrules does not know)."""
    data = b.config.data.get("vision_config")
    if not isinstance(data, Mapping):
        return
    kind = str(data.get("model_type") or "")
    fields = _Fields(data, b.config.source, kind)
    b.set_role(Role.VISION)
    try:
        if kind == "siglip_vision_model" and b.config.model_type == "gemma3":
            _siglip(b, fields, text_hidden)
        elif kind == "qwen2_5_vl":
            _qwen25_vl(b, fields)
        elif kind in QWEN3_5_TOWERS and b.config.model_type in ("qwen3_5", "qwen3_5_moe"):
            _qwen3_5_vl(b, fields)
        elif kind == "pixtral":
            _pixtral(b, fields, text_hidden)
        elif kind == "llama4_vision_model":
            _llama4(b, fields, text_hidden)
        else:
            b.notes.append(
                f"vision tower {kind or 'of unknown type'!r} not counted: the count covers the language model only"
            )
    finally:
        b.set_role(Role.MODEL)
