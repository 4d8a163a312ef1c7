"""Weight quantisation: what a checkpoint's ``quantization_config`` does to each linear weight.

A :class:`Scheme` answers two questions for one ``[out, in]`` linear weight:

* :meth:`Scheme.checkpoint_elements`: how many tensor elements the checkpoint stores for it
  (packed weights, scales, zero points, group indices), which is what a model card's
  "safetensors total" counts (Hugging Face counts elements, whatever their dtype);
* :meth:`Scheme.memory_bytes`: the bytes vLLM holds for it on one rank, given that rank's
  ``out`` and ``in`` (:mod:`kvrules.sizing.shard` divides them first).

What each scheme leaves unquantised follows vLLM: embeddings, ``lm_head``, norms, routers, convs
and every tensor that is not a linear weight stay in the model dtype; a module the config names
in its ignore list (``modules_to_not_convert``, ``ignored_layers``, ``ignore``,
``exclude_modules``) too; ``mxfp4`` (gpt-oss) quantises the routed experts only.

Layouts (sources: each method's ``create_weights`` in ``vllm/model_executor/layers/quantization/``):

======================  ====================================================================
scheme                  tensors of one ``[out, in]`` linear (``g`` = groups along ``in``)
======================  ====================================================================
fp8, block ``bn x bk``  weight fp8 ``out*in`` + ``weight_scale_inv`` fp32
                        ``ceil(out/bn) * ceil(in/bk)`` (``fp8.py``, DeepSeek-V3's format)
fp8, per tensor         weight fp8 + one fp32 scale (+ an ``input_scale`` if static)
fp8, per channel        weight fp8 + ``out`` fp32 scales (compressed-tensors ``channel``)
awq (int4)              ``qweight`` int32 ``in x out/8``, ``qzeros`` int32 ``g x out/8``,
                        ``scales`` fp16 ``g x out`` (``awq.py``)
gptq (int4/int8)        ``qweight`` int32 ``in*b/32 x out``, ``qzeros`` int32 ``g x out*b/32``,
                        ``scales`` fp16 ``g x out``, ``g_idx`` int32 ``in`` (``gptq.py``)
compressed-tensors int  ``weight_packed`` int32 ``out x in*b/32``, ``weight_scale`` ``out x g``,
                        ``weight_shape`` int64 ``2`` (+ ``weight_zero_point`` if asymmetric)
mxfp4                   blocks uint8 ``out*in/2`` + scales uint8 ``out*in/32`` (``mxfp4.py``)
nvfp4                   weight uint8 ``out*in/2`` + fp8 scales ``out*in/16`` + two fp32 scalars
======================  ====================================================================
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvrules.errors import ModelFileError
from kvrules.hf.config import HFConfig
from kvrules.sizing.weights import Weight

#: the ``quant_method`` values kvrules reads
METHODS = ("fp8", "mxfp4", "awq", "gptq", "compressed-tensors", "modelopt")

#: the layouts :class:`Scheme` knows
LAYOUTS = (
    "none",
    "fp8-block",
    "fp8-tensor",
    "fp8-channel",
    "awq",
    "gptq",
    "int-packed",
    "int8",
    "mxfp4",
    "nvfp4",
)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Scheme:
    """A checkpoint's weight quantisation.

    :ivar layout: one of :data:`LAYOUTS` (``none``: every weight in the model dtype).
    :ivar bits: bits per quantised weight element (8 for fp8 and int8, 4 for int4 / fp4).
    :ivar block: fp8's ``weight_block_size`` ``(bn, bk)``.
    :ivar group_size: elements along ``in`` that share a scale (int schemes, mxfp4 32, nvfp4 16);
        0: one group per row (per-channel).
    :ivar zero_points: asymmetric int schemes store zero points.
    :ivar g_idx: GPTQ stores ``g_idx`` (always in the checkpoint; vLLM keeps it).
    :ivar static_input_scale: fp8 per-tensor with ``activation_scheme: static``.
    :ivar scale_bytes: bytes of one group scale as stored (fp16/bf16: 2).
    :ivar experts_only: only routed-expert weights are quantised (``mxfp4``).
    :ivar ignore: module names or patterns kept unquantised (``re:`` regular expressions, ``*``
        globs, else a substring of the module name, as vLLM's ``is_layer_skipped`` matches).
    :ivar source: the config field it was read from, for messages.
    """

    layout: str = "none"
    bits: int = 16
    block: tuple[int, int] | None = None
    group_size: int = 0
    zero_points: bool = False
    g_idx: bool = False
    static_input_scale: bool = False
    scale_bytes: int = 2
    experts_only: bool = False
    ignore: tuple[str, ...] = ()
    source: str = ""

    @property
    def quantized(self) -> bool:
        """True unless the layout is ``none``."""
        return self.layout != "none"

    def describe(self) -> str:
        """``fp8 block 128x128``, ``awq int4 group 128``, ``mxfp4 (experts)``, ``none``."""
        if self.layout == "fp8-block" and self.block:
            return f"fp8 block {self.block[0]}x{self.block[1]}"
        if self.layout in ("awq", "gptq", "int-packed"):
            group = f"group {self.group_size}" if self.group_size else "per channel"
            return f"{self.layout} int{self.bits} {group}"
        if self.layout == "mxfp4":
            return "mxfp4" + (" (experts)" if self.experts_only else "")
        return self.layout.replace("-", " ")

    # -- which weights --------------------------------------------------------------------
    def applies(self, weight: Weight) -> bool:
        """Whether ``weight`` is stored quantised."""
        if not self.quantized or not weight.linear or len(weight.shape) != 2:
            return False
        if self.experts_only and not weight.experts:
            return False
        return not self.ignored(weight.module)

    def ignored(self, module: str) -> bool:
        """Whether the ignore list names ``module``."""
        for entry in self.ignore:
            if entry.startswith("re:"):
                if re.match(entry[3:], module):
                    return True
            elif "*" in entry:
                if fnmatch.fnmatchcase(module, entry) or fnmatch.fnmatchcase(module, entry + ".*"):
                    return True
            elif entry == module or entry in module:
                return True
        return False

    # -- sizes ----------------------------------------------------------------------------
    def _groups(self, inp: int) -> int:
        return _cdiv(inp, self.group_size) if self.group_size else 1

    def checkpoint_elements(self, out: int, inp: int) -> int:
        """Tensor elements the checkpoint stores for one quantised ``[out, in]`` linear."""
        n = out * inp
        layout = self.layout
        if layout == "fp8-block":
            bn, bk = self.block or (128, 128)
            return n + _cdiv(out, bn) * _cdiv(inp, bk)
        if layout == "fp8-tensor":
            return n + 1 + (1 if self.static_input_scale else 0)
        if layout == "fp8-channel":
            return n + out
        if layout == "int8":
            return n + out
        g = self._groups(inp)
        if layout == "awq":
            return n * self.bits // 32 + g * out * self.bits // 32 + g * out
        if layout == "gptq":
            return n * self.bits // 32 + g * out * self.bits // 32 + g * out + inp
        if layout == "int-packed":
            zeros = _cdiv(out * self.bits, 32) * g if self.zero_points else 0
            return n * self.bits // 32 + out * g + 2 + zeros
        if layout == "mxfp4":
            # Hugging Face reports gpt-oss's safetensors total as its parameter count: each fp4
            # value counts once, the uint8 block scales not at all (openai/gpt-oss-20b:
            # 20,914,757,184)
            return n
        if layout == "nvfp4":
            return n // 2 + n // 16 + 2
        return n

    def memory_bytes(self, out: int, inp: int, dtype_bytes: int) -> int:
        """Bytes vLLM holds for one quantised ``[out, in]`` linear on one rank (``out`` and
        ``in`` already divided); scales vLLM keeps in fp32 are counted at 4 bytes."""
        n = out * inp
        layout = self.layout
        if layout == "fp8-block":
            bn, bk = self.block or (128, 128)
            return n + 4 * _cdiv(out, bn) * _cdiv(inp, bk)
        if layout == "fp8-tensor":
            return n + 4 * (2 if self.static_input_scale else 1)
        if layout in ("fp8-channel", "int8"):
            return n + 4 * out
        g = self._groups(inp)
        packed = _cdiv(n * self.bits, 8)
        if layout == "awq":
            return packed + _cdiv(g * out * self.bits, 8) + 2 * g * out
        if layout == "gptq":
            return packed + _cdiv(g * out * self.bits, 8) + 2 * g * out + 4 * inp
        if layout == "int-packed":
            zeros = 4 * _cdiv(out * self.bits, 32) * g if self.zero_points else 0
            return packed + self.scale_bytes * out * g + 16 + zeros
        if layout == "mxfp4":
            return n // 2 + _cdiv(n, 32)
        if layout == "nvfp4":
            return n // 2 + _cdiv(n, 16) + 8
        return n * dtype_bytes


NONE = Scheme()


def _ints(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, Sequence) and not isinstance(value, str):
        if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
            return tuple(int(v) for v in value)
    return None


def _names(q: Mapping[str, Any], *keys: str) -> tuple[str, ...]:
    out: list[str] = []
    for key in keys:
        value = q.get(key)
        if isinstance(value, Sequence) and not isinstance(value, str):
            out.extend(v for v in value if isinstance(v, str))
    return tuple(out)


def _bad(config: HFConfig, field: str, problem: str) -> ModelFileError:
    return ModelFileError(
        f"{config.source}: field 'quantization_config.{field}' {problem}; "
        "kvrules reads quant_method "
        + ", ".join(METHODS)
        + " (give the checkpoint's own quantization_config)"
    )


def _positive(config: HFConfig, q: Mapping[str, Any], keys: Sequence[str], default: int) -> int:
    for key in keys:
        if key in q and q[key] is not None:
            value = q[key]
            if isinstance(value, bool) or not isinstance(value, int):
                raise _bad(config, key, f"is {value!r}; it must be an integer")
            return value
    return default


def _fp8(config: HFConfig, q: Mapping[str, Any]) -> Scheme:
    ignore = _names(q, "ignored_layers", "modules_to_not_convert")
    if "weight_block_size" in q and q["weight_block_size"] is not None:
        block = _ints(q["weight_block_size"])
        if block is None or len(block) != 2:
            raise _bad(config, "weight_block_size", f"is {q['weight_block_size']!r}; it must be [n, k]")
        return Scheme("fp8-block", 8, block=(block[0], block[1]), ignore=ignore, source="fp8")
    static = q.get("activation_scheme") == "static"
    return Scheme("fp8-tensor", 8, static_input_scale=static, ignore=ignore, source="fp8")


def _awq_gptq(config: HFConfig, q: Mapping[str, Any], method: str) -> Scheme:
    bits = _positive(config, q, ("bits", "w_bit"), 4)
    if bits not in (2, 3, 4, 8):
        raise _bad(config, "bits", f"is {bits}; it must be 2, 3, 4 or 8")
    group = _positive(config, q, ("group_size", "q_group_size"), 128)
    group = 0 if group < 0 else group
    ignore = _names(q, "modules_to_not_convert", "ignored_layers")
    if method == "awq":
        return Scheme("awq", bits, group_size=group, zero_points=True, ignore=ignore, source="awq")
    return Scheme("gptq", bits, group_size=group, zero_points=True, g_idx=True, ignore=ignore, source="gptq")


def _compressed(config: HFConfig, q: Mapping[str, Any]) -> Scheme:
    groups = q.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise _bad(config, "config_groups", "is missing or empty")
    first = next(iter(groups.values()))
    weights = first.get("weights") if isinstance(first, Mapping) else None
    if not isinstance(weights, Mapping):
        raise _bad(config, "config_groups.*.weights", "is missing")
    bits = weights.get("num_bits", 8)
    kind = weights.get("type", "int")
    strategy = weights.get("strategy", "tensor")
    group = weights.get("group_size") or 0
    ignore = _names(q, "ignore")
    fmt = str(first.get("format") or q.get("format") or "")
    if not isinstance(bits, int) or isinstance(bits, bool) or bits not in (4, 8):
        raise _bad(config, "config_groups.*.weights.num_bits", f"is {bits!r}; kvrules reads 4 or 8")
    if kind == "float" and bits == 4:
        return Scheme("nvfp4", 4, group_size=16, ignore=ignore, source="compressed-tensors")
    if kind == "float":
        if strategy == "block":
            block = _ints(weights.get("block_structure")) or (128, 128)
            return Scheme(
                "fp8-block", 8, block=(block[0], block[-1]), ignore=ignore, source="compressed-tensors"
            )
        layout = "fp8-channel" if strategy == "channel" else "fp8-tensor"
        return Scheme(layout, 8, ignore=ignore, source="compressed-tensors")
    if bits == 8 and "pack" not in fmt:
        return Scheme("int8", 8, ignore=ignore, source="compressed-tensors")
    return Scheme(
        "int-packed",
        bits,
        group_size=int(group) if strategy == "group" else 0,
        zero_points=weights.get("symmetric") is False,
        ignore=ignore,
        source="compressed-tensors",
    )


def _modelopt(config: HFConfig, q: Mapping[str, Any]) -> Scheme:
    nested = q.get("quantization")
    inner: Mapping[str, Any] = nested if isinstance(nested, Mapping) else q
    algo = str(inner.get("quant_algo") or "").upper()
    ignore = _names(inner, "exclude_modules", "ignore")
    if algo == "FP8":
        return Scheme("fp8-tensor", 8, static_input_scale=True, ignore=ignore, source="modelopt")
    if algo == "NVFP4":
        return Scheme("nvfp4", 4, group_size=16, ignore=ignore, source="modelopt")
    raise _bad(config, "quant_algo", f"is {algo!r}; kvrules reads FP8 and NVFP4")


def scheme_of(config: HFConfig) -> Scheme:
    """The checkpoint's :class:`Scheme`, from ``quantization_config`` (none: :data:`NONE`).

    :raises ModelFileError: a ``quant_method`` kvrules does not read, or a malformed field,
        naming the field.
    """
    q = config.get("quantization_config")
    if q is None:
        return NONE
    if not isinstance(q, Mapping):
        raise config.error("quantization_config", "must be an object")
    method = q.get("quant_method")
    if method == "fp8":
        return _fp8(config, q)
    if method == "mxfp4":
        return Scheme(
            "mxfp4",
            4,
            group_size=32,
            experts_only=True,
            ignore=_names(q, "modules_to_not_convert"),
            source="mxfp4",
        )
    if method in ("awq", "gptq"):
        return _awq_gptq(config, q, str(method))
    if method == "compressed-tensors":
        return _compressed(config, q)
    if method == "modelopt":
        return _modelopt(config, q)
    raise _bad(config, "quant_method", f"is {method!r}, which kvrules cannot size")


def linear_parts(weight: Weight) -> tuple[int, int]:
    """``(out, in)`` of one copy of a 2-D weight."""
    out, inp = weight.shape
    return out, inp


def stored_elements(weight: Weight, scheme: Scheme) -> int:
    """The checkpoint's tensor elements for ``weight`` (all copies) under ``scheme``."""
    if scheme.applies(weight):
        out, inp = linear_parts(weight)
        return scheme.checkpoint_elements(out, inp) * weight.copies
    return weight.numel


__all__ = ["LAYOUTS", "METHODS", "NONE", "Scheme", "scheme_of", "stored_elements"]
