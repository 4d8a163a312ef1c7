"""Weights per GPU: a checkpoint's tensors divided the way vLLM divides them under tensor,
pipeline and expert parallelism, at the served dtype or the checkpoint's quantisation.

:func:`shard_weights` answers, for every (PP rank, TP rank), the bytes vLLM holds for weights
after loading, which is what its ``Model loading took X GiB`` line measures. The rules, each
from vLLM's source:

* **Tensor parallelism** (``vllm/model_executor/layers/linear.py``): column-parallel layers
  divide their output features, row-parallel layers their input features (their bias stays whole);
  ``QKVParallelLinear`` gives each rank ``num_kv_heads // tp`` KV heads, or one replicated head
  when ``tp`` is a multiple of ``num_kv_heads``; a head count ``tp`` does not divide is an error
  there and a :class:`~kvrules.errors.ConfigError` here. Norms, routers and
  ``ReplicatedLinear`` (DeepSeek's ``q_a_proj`` / ``kv_a_proj_with_mqa``) are whole on every rank.
* **Vocabulary** (``vocab_parallel_embedding.py``): padded to a multiple of 64
  (``DEFAULT_VOCAB_PADDING_SIZE``), then divided (``divide`` asserts it divides).
* **Routed experts** (``fused_moe/layer.py``): under TP every rank holds every expert with the
  intermediate dimension divided; with ``expert_parallel`` the experts are divided over
  ``tp * dp`` ranks (``determine_expert_map``: ``E // ep`` each, the first ``E % ep`` ranks one
  more) and each is whole.
* **mxfp4 experts** (gpt-oss) are padded as the MoE backend needs (:data:`MXFP4_BACKENDS`,
  :attr:`ShardOptions.mxfp4_backend`; ``fused_moe/oracle/mxfp4.py``
  ``mxfp4_round_up_hidden_size_and_intermediate_size``, ``Mxfp4MoEMethod.create_weights`` in
  ``quantization/mxfp4.py`` before it): the per-rank intermediate size rounded up to 64 on the
  triton path; Marlin's kernel wants ``n % 256 == 0`` and ``k % 128 == 0`` on both expert
  matrices, so it rounds the intermediate size to 128 and the hidden size to 256 (gpt-oss-120b:
  2880 -> 2944 and 3072, 9 % more expert bytes). The padded tensors are what stays: Marlin's
  repack (``prepare_moe_fp4_layer_for_marlin`` in ``marlin_utils_fp4.py``) replaces each weight
  with a repacked one of the same bytes, its e8m0 block scales with a ``float8_e8m0fnu`` copy
  (1 byte each, permuted through a transient bf16 one) and its biases with a bf16 copy; the
  originals are freed. Its per-layer workspace (an int32 per SM, four times) is not counted.
  The triton path (``Mxfp4MoEMethod.process_weights_after_loading``, ``_swizzle_mxfp4`` in
  ``utils/mxfp4_utils.py``, vLLM 0.14) keeps more than it pads (:data:`MXFP4_TRITON_PADS`): it
  turns the biases to float32; it replaces each weight with ``triton_kernels``' Hopper value
  layout (``HopperMXValueLayout``: rows padded to 16 and packed bytes to 32, then bit-twiddled
  in place of as many bytes) and frees the original; but it leaves the uint8 block scales
  registered on the layer while their swizzled copy (``HopperMXScaleLayout``: rows padded to
  ``2 * num_warps * 2 * 8`` = 256, scale columns to 2) lives in the method's
  ``PrecisionConfig``, so the scales are held twice (gpt-oss-120b on one GPU: 3.46 GiB for the
  copy, 0.07 GiB for the float32 biases). Blackwell's triton layouts are not modelled.
  FlashInfer's TRT-LLM path and the ROCm triton path keep the biases in float32 too
  (:data:`MXFP4_BIAS_BYTES`); ROCm's strided layouts are views of the originals, and gfx950's
  scale copy is not counted.
  :func:`mxfp4_backend_for` names the backend vLLM picks on a GPU.
* **Pipeline parallelism** (``vllm/distributed/utils.py`` ``get_pp_indices``, as its tests in
  ``tests/distributed/test_pipeline_partition.py`` pin it): ``L // pp`` layers each, the
  remainder given one each to the ranks before the last, from the second-to-last backwards;
  ``VLLM_PP_LAYER_PARTITION`` is :attr:`ShardOptions.pp_partition`. The embedding lives on the
  first rank, the final norm and ``lm_head`` on the last; a tied embedding is also built on the
  last rank when ``pp > 1`` (``models/llama.py``: ``is_first_rank or (tie_word_embeddings and
  is_last_rank)``).
* **MTP layers** are not loaded by the target model (vLLM skips their weights); with
  ``include_mtp`` they are counted on the last PP rank as vLLM's MTP drafter loads them, sharing
  the target's embedding and head.
* **Buffers** counted with the weights, because vLLM allocates them while loading: the rotary
  ``cos_sin_cache`` (``max_position_embeddings x rotary_dim`` in the model dtype, one per distinct
  rope; Llama-3.1-8B's 32 MiB is why its log says 14.99 GiB for 14.96 GiB of weights; gpt-oss
  builds its rope in float32, ``models/gpt_oss.py`` ``OAIAttention``), and MLA's
  ``W_UK_T`` / ``W_UV`` (a dequantised model-dtype copy of a quantised ``kv_b_proj``,
  ``mla_attention.py`` ``process_weights_after_loading``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kvrules.errors import ConfigError
from kvrules.hf.config import HFConfig
from kvrules.hf.settings import resolve_model_dtype
from kvrules.sizing.params import as_config, weight_table
from kvrules.sizing.quant import Scheme, scheme_of
from kvrules.sizing.weights import VOCAB_PADDING, Role, Split, Stage, Weight, WeightTable
from kvrules.values import shown

_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}

#: vLLM's mxfp4 MoE backends: the multiples each rounds the routed experts' per-rank intermediate
#: size and their hidden size up to (``mxfp4_round_up_hidden_size_and_intermediate_size`` in
#: ``fused_moe/oracle/mxfp4.py``; ``rocm`` is ``get_padding_alignment``'s 128 on gfx942,
#: ``rocm-gfx950`` its 256 on gfx950)
MXFP4_BACKENDS: Mapping[str, tuple[int, int]] = MappingProxyType(
    {
        "triton": (64, 1),
        "marlin": (128, 256),
        "flashinfer-trtllm": (256, 256),
        "flashinfer-cutlass": (128, 128),
        "rocm": (128, 128),
        "rocm-gfx950": (256, 256),
    }
)


#: bytes per element of the mxfp4 experts' biases as each backend keeps them: float32 where
#: ``process_weights_after_loading`` (``quantization/mxfp4.py``, vLLM 0.14) converts them
#: (``triton``; ``flashinfer-trtllm``; ROCm, which takes the triton path), the checkpoint's bf16
#: otherwise (Marlin's ``prepare_moe_fp4_layer_for_marlin``, the CUTLASS path's ``.to(torch.bfloat16)``)
MXFP4_BIAS_BYTES: Mapping[str, int] = MappingProxyType(
    {
        "triton": 4,
        "marlin": 2,
        "flashinfer-trtllm": 4,
        "flashinfer-cutlass": 2,
        "rocm": 4,
        "rocm-gfx950": 4,
    }
)

#: the ``triton`` backend's stored layouts, as ``(rows, columns)`` multiples of one expert's
#: ``[out, in]`` matrix: ``value`` the packed fp4 bytes (``in / 2`` columns) in ``triton_kernels``'
#: ``HopperMXValueLayout`` (its pack of 2 * 4 * 2 rows and 4 * 2 * 4 bytes for mma v3), ``scale``
#: the swizzled e8m0 copy (``in / 32`` columns) in ``HopperMXScaleLayout`` with vLLM's
#: ``num_warps`` 8 (4 only under the batched pplx / DeepEP low-latency kernels, not modelled)
MXFP4_TRITON_PADS: Mapping[str, tuple[int, int]] = MappingProxyType({"value": (16, 32), "scale": (256, 2)})


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def mxfp4_backend_for(arch: str | None) -> str:
    """The mxfp4 MoE backend vLLM picks by default on a GPU of architecture ``arch`` (``sm90``,
    ``sm100``, ``gfx942``, ...; ``None``: unknown, taken as Hopper), as ``select_mxfp4_moe_backend``
    (``fused_moe/oracle/mxfp4.py``) picks it with no backend variable set: FlashInfer's TRT-LLM
    kernels on the SM100 family, the triton kernels from SM90 (Hopper), Marlin below (Ampere, Ada),
    the triton kernels on ROCm with its own padding.

    Before vLLM PR #28788 (Nov 2025; 0.10.1 among them) Hopper took Marlin too wherever
    ``triton_kernels`` (not a dependency then) or torch 2.8 was missing: pass ``marlin`` for those.
    """
    if arch is None:
        return "triton"
    if arch.startswith("gfx"):
        return "rocm-gfx950" if arch == "gfx950" else "rocm"
    digits = arch.removeprefix("sm")
    if not digits.isdigit():
        raise ConfigError(f"GPU architecture {arch!r} must be smNN (NVIDIA) or gfxNNN (AMD)")
    major = int(digits) // 10
    if major == 10:
        return "flashinfer-trtllm"
    return "triton" if major >= 9 else "marlin"


def pad_vocab(vocab: int, to: int = VOCAB_PADDING) -> int:
    """vLLM's ``pad_vocab_size``: ``vocab`` rounded up to a multiple of ``to``."""
    return -(-vocab // to) * to


def pp_indices(
    num_layers: int, pp_rank: int, pp_size: int, partition: tuple[int, ...] | None = None
) -> tuple[int, int]:
    """The ``[start, end)`` decoder layers of ``pp_rank``, as vLLM's ``get_pp_indices``.

    :raises ConfigError: a ``partition`` of the wrong length or total.
    """
    if partition is not None:
        if len(partition) != pp_size or sum(partition) != num_layers or min(partition) < 0:
            raise ConfigError(
                f"pp_partition {list(partition)} must have {pp_size} entries summing to {num_layers} layers "
                "(vLLM's VLLM_PP_LAYER_PARTITION)"
            )
        parts = list(partition)
    else:
        parts = [num_layers // pp_size] * pp_size
        for i in range(2, num_layers % pp_size + 2):
            parts[-i] += 1
    start = sum(parts[:pp_rank])
    return start, start + parts[pp_rank]


@dataclass(frozen=True)
class ShardOptions:
    """How the model is served.

    :ivar tp: tensor-parallel size; :ivar pp: pipeline-parallel size; :ivar dp: data-parallel
        size (it matters only with ``expert_parallel``: experts are divided over ``tp * dp``).
    :ivar expert_parallel: vLLM's ``--enable-expert-parallel``.
    :ivar dtype: ``auto`` (the config's, float32 served as bfloat16) or a model dtype.
    :ivar include_mtp: count the checkpoint's MTP layers (``--speculative-config`` method
        ``mtp``); off: the target model alone, as vLLM loads it.
    :ivar include_vision: count the vision tower (vLLM loads it unless the model is served
        text-only).
    :ivar mxfp4_backend: the MoE backend of mxfp4 experts, one of :data:`MXFP4_BACKENDS`
        (``triton``: Hopper's in current vLLM; :func:`mxfp4_backend_for` names a GPU's).
    :ivar pp_partition: layers per PP rank (``VLLM_PP_LAYER_PARTITION``), or ``None``.
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    expert_parallel: bool = False
    dtype: str = "auto"
    include_mtp: bool = False
    include_vision: bool = True
    mxfp4_backend: str = "triton"
    pp_partition: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}={shown(value)} must be a positive integer")
        if self.dtype not in ("auto", *_BYTES):
            raise ConfigError(f"dtype={shown(self.dtype)} must be auto or one of {', '.join(_BYTES)}")
        if self.mxfp4_backend not in MXFP4_BACKENDS:
            raise ConfigError(
                f"mxfp4_backend={shown(self.mxfp4_backend)} must be one of {', '.join(MXFP4_BACKENDS)}"
            )


@dataclass(frozen=True)
class RankWeights:
    """What one GPU holds.

    :ivar pp_rank, tp_rank: the rank.
    :ivar layers: its decoder layers ``[start, end)``.
    :ivar params: parameters it holds (padding included, buffers excluded).
    :ivar weight_bytes: bytes of its weights (quantised ones as vLLM stores them).
    :ivar buffer_bytes: bytes of the buffers allocated with the weights (rope cache, MLA copies).
    :ivar by_component: bytes per component, buffers included (``rope_cache``, ``mla_absorbed``).
    """

    pp_rank: int
    tp_rank: int
    layers: tuple[int, int]
    params: int
    weight_bytes: int
    buffer_bytes: int
    by_component: Mapping[str, int]

    @property
    def total_bytes(self) -> int:
        """Weights and buffers: what ``Model loading took`` measures on this rank."""
        return self.weight_bytes + self.buffer_bytes


@dataclass(frozen=True)
class ShardedWeights:
    """Weights per GPU for one way of serving a checkpoint.

    :ivar options: the serving options.
    :ivar dtype: the served dtype of unquantised tensors.
    :ivar scheme: the checkpoint's quantisation.
    :ivar ranks: one record per GPU, PP rank outer, TP rank inner.
    :ivar notes: what was assumed.
    """

    options: ShardOptions
    dtype: str
    scheme: Scheme
    ranks: tuple[RankWeights, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def max_bytes(self) -> int:
        """The fullest GPU's bytes (weights and buffers): what must fit on every GPU."""
        return max(r.total_bytes for r in self.ranks)

    def rank(self, pp_rank: int = 0, tp_rank: int = 0) -> RankWeights:
        """The record of one rank."""
        return self.ranks[pp_rank * self.options.tp + tp_rank]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "tp": self.options.tp,
            "pp": self.options.pp,
            "expert_parallel": self.options.expert_parallel,
            "dtype": self.dtype,
            "quantization": self.scheme.describe(),
            "max_bytes": self.max_bytes,
            "ranks": [
                {
                    "pp_rank": r.pp_rank,
                    "tp_rank": r.tp_rank,
                    "layers": list(r.layers),
                    "params": r.params,
                    "weight_bytes": r.weight_bytes,
                    "buffer_bytes": r.buffer_bytes,
                    "by_component": dict(r.by_component),
                }
                for r in self.ranks
            ],
            "notes": list(self.notes),
        }


class _Divider:
    """Divides one tensor for one rank."""

    def __init__(self, opts: ShardOptions, scheme: Scheme, tp_rank: int) -> None:
        self.opts, self.scheme, self.tp_rank = opts, scheme, tp_rank
        self.tp = opts.tp

    def _fail(self, w: Weight, what: str, count: int) -> ConfigError:
        return ConfigError(
            f"{w.name}: {what} {count} cannot be split over tensor_parallel_size {self.tp} "
            "(vLLM divides it evenly); choose a tensor_parallel_size that divides it"
        )

    def split_rows(self, w: Weight, rows: int, split: Split, heads: int) -> int:
        tp = self.tp
        if split in (Split.REPLICATED, Split.ROW):
            return rows
        if split is Split.VOCAB:
            padded = pad_vocab(rows)
            if padded % tp:
                raise self._fail(w, "the padded vocabulary", padded)
            return padded // tp
        if split is Split.HEADS:
            if heads % tp == 0:
                return rows // tp
            if tp % heads == 0:
                return rows // heads
            raise self._fail(w, "the head / group count", heads)
        count = heads or rows
        if count % tp:
            raise self._fail(w, "the head count" if heads else "the output size", count)
        return rows // tp

    def shape(self, w: Weight, tp_split: bool) -> tuple[int, ...]:
        """``w``'s per-rank shape (of one expert copy); ``tp_split`` False keeps it whole."""
        if not tp_split:
            return w.shape
        if w.segments:
            rows = sum(self.split_rows(w, s.rows, s.split, s.heads) for s in w.segments)
        else:
            rows = self.split_rows(w, w.shape[0], w.split, w.heads)
        rest = w.shape[1:]
        if w.split is Split.ROW:
            count = w.heads or rest[0]
            if count % self.tp:
                raise self._fail(w, "the input size" if not w.heads else "the head count", count)
            rest = (rest[0] // self.tp, *rest[1:])
        return (rows, *rest)

    def copies(self, w: Weight) -> int:
        """Expert copies on this rank."""
        if not w.experts:
            return 1
        if not self.opts.expert_parallel:
            return w.experts
        ep = self.opts.tp * self.opts.dp
        base, extra = divmod(w.experts, ep)
        return base + (1 if self.tp_rank < extra else 0)

    def mxfp4_pad(self, w: Weight, shape: tuple[int, ...], inter: int) -> tuple[int, ...]:
        """mxfp4 experts: the per-rank intermediate size and the hidden size rounded up as the
        backend pads them (:data:`MXFP4_BACKENDS`); ``gate_up_proj`` is ``[2I, H]``, ``down_proj``
        ``[H, I]``, their biases ``[2I]`` and ``[H]``."""
        if self.scheme.layout != "mxfp4" or not w.experts or inter <= 0:
            return shape
        inter_to, hidden_to = MXFP4_BACKENDS[self.opts.mxfp4_backend]
        per = inter if self.opts.expert_parallel else inter // self.tp
        padded = -(-per // inter_to) * inter_to
        if w.name.endswith("gate_up_proj"):
            return (2 * padded, -(-shape[1] // hidden_to) * hidden_to)
        if w.name.endswith("gate_up_proj_bias"):
            return (2 * padded,)
        hidden = -(-shape[0] // hidden_to) * hidden_to
        if w.name.endswith("down_proj"):
            return (hidden, padded)
        if w.name.endswith("down_proj_bias"):
            return (hidden,)
        return shape

    def mxfp4_stored(self, w: Weight, shape: tuple[int, ...], act: int) -> int | None:
        """Bytes of one copy of an mxfp4 expert tensor (``shape``: padded, per rank) as the
        backend holds it after loading; ``None`` for any other tensor. ``triton``: the weight in
        its Hopper value layout, the checkpoint's scales and their swizzled copy; the biases at
        :data:`MXFP4_BIAS_BYTES`."""
        if self.scheme.layout != "mxfp4" or not w.experts:
            return None
        backend = self.opts.mxfp4_backend
        if not self.scheme.applies(w):
            if w.name.endswith(("gate_up_proj_bias", "down_proj_bias")):
                return shape[0] * MXFP4_BIAS_BYTES[backend]
            return None
        out, inp = shape
        if backend != "triton":
            return self.scheme.memory_bytes(out, inp, act)
        value_rows, value_cols = MXFP4_TRITON_PADS["value"]
        scale_rows, scale_cols = MXFP4_TRITON_PADS["scale"]
        groups = -(-inp // 32)
        value = _round_up(out, value_rows) * _round_up(inp // 2, value_cols)
        swizzled = _round_up(out, scale_rows) * _round_up(groups, scale_cols)
        return value + out * groups + swizzled


def _present(
    w: Weight, table: WeightTable, opts: ShardOptions, pp_rank: int, layers: tuple[int, int]
) -> bool:
    last = pp_rank == opts.pp - 1
    if w.role is Role.MTP:
        return opts.include_mtp and last
    if w.role is Role.VISION:
        return opts.include_vision
    if w.stage is Stage.FIRST:
        return pp_rank == 0 or (table.tied and last)
    if w.stage is Stage.LAST:
        return last
    if w.stage is Stage.EVERY:
        return True
    return w.layer is not None and layers[0] <= w.layer < layers[1]


def _shared_with_target(w: Weight) -> bool:
    """An MTP layer's own embedding / head copy: vLLM's drafter shares the target's."""
    return w.role is Role.MTP and w.name.endswith(("embed_tokens.weight", "shared_head.head.weight"))


def _rope_bytes(config: HFConfig, act: int) -> int:
    """The rotary ``cos_sin_cache``: ``max_position_embeddings x rotary_dim`` per distinct rope, in
    the model dtype (gpt-oss: float32)."""
    c = config
    if (
        c.text_model_type in ("mamba", "mamba2", "falcon_mamba", "jamba")
        or c.get("position_embedding_type") == "nope"
    ):
        return 0
    if c.get("qk_rope_head_dim") is not None:
        dim = int(c.integer("qk_rope_head_dim"))
    else:
        heads = c.opt_int("num_attention_heads")
        if heads is None:
            return 0
        head = c.opt_int("head_dim") or c.integer("hidden_size") // heads
        factor = c.get("partial_rotary_factor")
        dim = (
            int(head * factor) if isinstance(factor, (int, float)) and not isinstance(factor, bool) else head
        )
    positions = c.opt_int("max_position_embeddings") or 0
    caches = 2 if c.get("rope_local_base_freq") is not None or c.text_model_type == "gemma3_text" else 1
    size = 4 if c.text_model_type == "gpt_oss" else act
    return positions * dim * size * caches


def _mla_absorbed(w: Weight, config: HFConfig, shape: tuple[int, ...], scheme: Scheme, act: int) -> int:
    """MLA's dequantised ``W_UK_T`` / ``W_UV`` copy of a quantised ``kv_b_proj`` on this rank."""
    if not w.name.endswith("kv_b_proj.weight") or not scheme.applies(w):
        return 0
    return shape[0] * shape[1] * act


def _dtype(config: HFConfig, option: str) -> str:
    name, _ = resolve_model_dtype(config, option)
    return name


def shard_weights(
    config: HFConfig | Mapping[str, Any] | str | Path, options: ShardOptions | None = None, **kwargs: Any
) -> ShardedWeights:
    """Weights per GPU for ``config`` served with ``options`` (or the same fields as keyword
    arguments: ``shard_weights(cfg, tp=8)``).

    :raises ConfigError: a size that cannot be divided as vLLM divides it, or a bad option.
    :raises ModelFileError: a config kvrules cannot read or count.
    """
    if options is not None and kwargs:
        raise ConfigError("give either options or keyword arguments, not both")
    opts = options if options is not None else ShardOptions(**kwargs)
    cfg = as_config(config)
    table = weight_table(cfg)
    scheme = scheme_of(cfg)
    dtype = _dtype(cfg, opts.dtype)
    act = _BYTES[dtype]
    inter = cfg.opt_int("intermediate_size") or 0
    notes = list(table.notes)
    if opts.include_mtp:
        notes.append(
            "MTP layers counted on the last PP rank; their embedding and head copies are shared with the target"
        )
    rope = _rope_bytes(cfg, act)
    ranks = []
    for pp_rank in range(opts.pp):
        layers = pp_indices(table.num_layers, pp_rank, opts.pp, opts.pp_partition)
        for tp_rank in range(opts.tp):
            ranks.append(_rank(table, cfg, opts, scheme, act, inter, rope, pp_rank, tp_rank, layers))
    return ShardedWeights(opts, dtype, scheme, tuple(ranks), tuple(notes))


def _rank(
    table: WeightTable,
    cfg: HFConfig,
    opts: ShardOptions,
    scheme: Scheme,
    act: int,
    inter: int,
    rope: int,
    pp_rank: int,
    tp_rank: int,
    layers: tuple[int, int],
) -> RankWeights:
    div = _Divider(opts, scheme, tp_rank)
    comp: dict[str, int] = {}
    params = weight_bytes = buffers = 0
    for w in table.weights:
        if not _present(w, table, opts, pp_rank, layers) or _shared_with_target(w):
            continue
        tp_split = not (w.experts and opts.expert_parallel)
        shape = div.mxfp4_pad(w, div.shape(w, tp_split), inter)
        copies = div.copies(w)
        n = 1
        for d in shape:
            n *= d
        stored = div.mxfp4_stored(w, shape, act)
        if stored is not None:
            nbytes = stored * copies
        elif scheme.applies(w):
            nbytes = scheme.memory_bytes(shape[0], shape[1], act) * copies
        else:
            nbytes = n * act * copies
        params += n * copies
        weight_bytes += nbytes
        comp[w.component] = comp.get(w.component, 0) + nbytes
        absorbed = _mla_absorbed(w, cfg, shape, scheme, act)
        if absorbed:
            buffers += absorbed
            comp["mla_absorbed"] = comp.get("mla_absorbed", 0) + absorbed
    if rope and layers[1] > layers[0]:
        buffers += rope
        comp["rope_cache"] = rope
    return RankWeights(pp_rank, tp_rank, layers, params, weight_bytes, buffers, comp)
