"""The parameter count of a Hugging Face config: every tensor of the checkpoint, per component.

:func:`weight_table` reads a config (an :class:`~kvrules.hf.config.HFConfig`, a path, or a
decoded dict) into a :class:`~kvrules.sizing.weights.WeightTable`: one record per checkpoint tensor,
named and shaped as the checkpoint stores it. :func:`count_params` sums it into a
:class:`ParamCount`.

Contract:

* **exact**, not estimated: the count is the sum of the tensors' shapes, for the architectures in
  :data:`ARCHITECTURES` (every model type kvrules' front door plans);
* **what the checkpoint holds**: tied embeddings are counted once; the checkpoint's MTP / draft
  layers (DeepSeek's ``num_nextn_predict_layers``, GLM-4.5's, Qwen3-Next's ``mtp.*``) are counted
  under the role ``mtp``; a multimodal checkpoint's vision tower and projector under ``vision``
  (:mod:`kvrules.sizing.vision`) when kvrules knows the tower, else the count is of the language
  model only and :attr:`ParamCount.complete` is ``False`` with a note saying so;
* **two totals**: :attr:`ParamCount.total` counts logical parameters (a quantised weight counts
  ``out * in``); :attr:`ParamCount.stored_elements` counts the checkpoint's tensor elements as
  Hugging Face's "safetensors total" does (packed int4 words, fp8 scales, mxfp4 blocks and scales
  each count as elements);
* fields the file leaves out take the config class's defaults (through the reader of
  :class:`~kvrules.hf.config.HFConfig`, as vLLM sees them); :attr:`ParamCount.assumed` names them.

:raises ModelFileError: from every function here, for a config it cannot read (naming the field
    and the fix), or a model type it cannot count.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvrules.errors import ModelFileError
from kvrules.hf.config import HFConfig
from kvrules.hf.settings import resolve_model_dtype
from kvrules.sizing import dense, hybrid, kimi_linear, lfm2, qwen3_5, vision, zamba2
from kvrules.sizing.build import Builder
from kvrules.sizing.quant import Scheme, scheme_of, stored_elements
from kvrules.sizing.weights import Role, WeightTable

Reader = Callable[[Builder], tuple[int, int, int, bool]]


def _family(model_type: str) -> Reader:
    family = dense.FAMILIES[model_type]

    def read(b: Builder) -> tuple[int, int, int, bool]:
        result = dense.build_family(b, family)
        if model_type == "glm4_moe":
            layers, vocab, hidden, _ = result
            mtp = b.config.integer("num_nextn_predict_layers", 0, minimum=0)
            dense.glm4_mtp(b, layers, mtp, vocab, hidden, family)
        return result

    return read


#: model type (the text config's) -> the reader that lists its tensors
ARCHITECTURES: dict[str, Reader] = {
    **{t: _family(t) for t in dense.FAMILIES},
    "deepseek_v2": dense.build_mla,
    "deepseek_v3": dense.build_mla,
    "deepseek_v32": dense.build_mla,
    "kimi_k2": dense.build_mla,
    "gpt_oss": dense.build_gpt_oss,
    "mamba": hybrid.build_mamba1,
    "falcon_mamba": hybrid.build_mamba1,
    "mamba2": hybrid.build_mamba2,
    "nemotron_h": hybrid.build_nemotron_h,
    "jamba": hybrid.build_jamba,
    "granitemoehybrid": hybrid.build_granite_hybrid,
    "falcon_h1": hybrid.build_falcon_h1,
    "qwen3_next": hybrid.build_qwen3_next,
    "qwen3_5_text": qwen3_5.build_qwen3_5,
    "qwen3_5_moe_text": qwen3_5.build_qwen3_5,
    "kimi_linear": kimi_linear.build_kimi_linear,
    "lfm2": lfm2.build_lfm2,
    "lfm2_moe": lfm2.build_lfm2_moe,
    "zamba2": zamba2.build_zamba2,
}


@dataclass(frozen=True)
class ParamCount:
    """The parameters of one checkpoint.

    :ivar total: every tensor's elements as logical parameters (model + MTP + vision).
    :ivar by_component: parameters per component (``embedding``, ``attention``, ``mlp``,
        ``experts``, ``shared_experts``, ``router``, ``norm``, ``mamba``, ``lm_head``, ``mtp``,
        ``vision``, ...), all roles together.
    :ivar by_role: parameters of the language model (``model``), its MTP layers (``mtp``) and its
        vision tower (``vision``).
    :ivar stored_elements: the checkpoint's tensor elements (its "safetensors total").
    :ivar checkpoint_bytes: the checkpoint's size: quantised weights as stored, the rest at the
        config's dtype (``torch_dtype``; float32 checkpoints at 4 bytes).
    :ivar dtype: the config's dtype name.
    :ivar scheme: the checkpoint's quantisation.
    :ivar complete: ``False`` when part of the checkpoint is not counted (an unknown vision tower).
    :ivar assumed: fields the file leaves out whose class default was used.
    :ivar notes: sentences on conventions and what was left out.
    :ivar table: the tensors themselves.
    """

    total: int
    by_component: Mapping[str, int]
    by_role: Mapping[str, int]
    stored_elements: int
    checkpoint_bytes: int
    dtype: str
    scheme: Scheme
    complete: bool
    assumed: tuple[str, ...]
    notes: tuple[str, ...]
    table: WeightTable = field(repr=False)

    @property
    def language_model(self) -> int:
        """The parameters the engine loads for text generation: the model without MTP layers
        and without a vision tower."""
        return self.by_role.get(Role.MODEL.value, 0)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (without the tensor table)."""
        return {
            "total": self.total,
            "by_component": dict(self.by_component),
            "by_role": dict(self.by_role),
            "stored_elements": self.stored_elements,
            "checkpoint_bytes": self.checkpoint_bytes,
            "dtype": self.dtype,
            "quantization": self.scheme.describe(),
            "complete": self.complete,
            "assumed": list(self.assumed),
            "notes": list(self.notes),
        }


def as_config(config: HFConfig | Mapping[str, Any] | str | Path) -> HFConfig:
    """``config`` as an :class:`HFConfig` (a path is read with :meth:`HFConfig.load`, a dict is
    wrapped with the source ``<dict>``)."""
    if isinstance(config, HFConfig):
        return config
    if isinstance(config, Mapping):
        return HFConfig(config, "<dict>")
    if isinstance(config, (str, Path)):
        return HFConfig.load(config)
    raise ModelFileError(
        f"a Hugging Face config must be a path, a dict or an HFConfig, not {type(config).__name__}"
    )


def reader_for(config: HFConfig) -> Reader:
    """The reader of ``config``'s (text) model type.

    :raises ModelFileError: a model type :data:`ARCHITECTURES` does not list.
    """
    model_type = config.text_model_type
    if model_type in ARCHITECTURES:
        return ARCHITECTURES[model_type]
    known = ", ".join(sorted(ARCHITECTURES))
    raise ModelFileError(
        f"{config.source}: field {config.where('model_type')!r} is {model_type!r}, which kvrules cannot count; "
        f"it counts {known}"
    )


def weight_table(config: HFConfig | Mapping[str, Any] | str | Path) -> WeightTable:
    """Every tensor of the checkpoint ``config`` describes (language model, MTP layers, and the
    vision tower when :mod:`kvrules.sizing.vision` knows it)."""
    cfg = as_config(config)
    read = reader_for(cfg)
    b = Builder(cfg)
    layers, vocab, hidden, tied = read(b)
    vision.build_vision(b, hidden)
    return b.table(layers, vocab, hidden, tied)


_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def checkpoint_dtype(config: HFConfig) -> str:
    """The checkpoint's dtype name (``torch_dtype`` / ``dtype``; bfloat16 when it names none)."""
    for key in ("torch_dtype", "dtype"):
        value = config.get(key)
        if isinstance(value, str) and value.removeprefix("torch.") in _BYTES:
            return value.removeprefix("torch.")
    resolved, _ = resolve_model_dtype(config, "auto")
    return resolved


def count_params(config: HFConfig | Mapping[str, Any] | str | Path) -> ParamCount:
    """Count the checkpoint's parameters (see the module's contract)."""
    cfg = as_config(config)
    table = weight_table(cfg)
    scheme = scheme_of(cfg)
    dtype = checkpoint_dtype(cfg)
    by_role: dict[str, int] = {}
    stored = 0
    nbytes = 0
    for w in table.weights:
        by_role[w.role.value] = by_role.get(w.role.value, 0) + w.numel
        stored += stored_elements(w, scheme)
        if scheme.applies(w):
            out, inp = w.shape
            nbytes += _checkpoint_bytes(scheme, out, inp) * w.copies
        else:
            nbytes += w.numel * _BYTES[dtype]
    notes = list(table.notes)
    complete = not any("not counted" in n for n in notes)
    return ParamCount(
        total=sum(by_role.values()),
        by_component=dict(table.by_component()),
        by_role=by_role,
        stored_elements=stored,
        checkpoint_bytes=nbytes,
        dtype=dtype,
        scheme=scheme,
        complete=complete,
        assumed=tuple(cfg.defaulted()),
        notes=tuple(notes),
        table=table,
    )


def _checkpoint_bytes(scheme: Scheme, out: int, inp: int) -> int:
    """Bytes one quantised linear takes on disk (scales at their stored width: fp8's
    ``weight_scale_inv`` fp32, int schemes' scales fp16)."""
    return scheme.memory_bytes(out, inp, 2)
