"""The memory vLLM holds on each GPU besides weights and KV cache: an estimate, per component.

vLLM (the V1 GPU worker, ``determine_available_memory``) gives the KV cache what is left of
``total_gpu_memory x gpu_memory_utilization`` after it has loaded the weights and profiled one
forward pass: the KV budget is that product minus the weights, the profile's peak of transient
tensors, the memory outside PyTorch's allocator and (vLLM's default since 0.21,
``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``) its estimate of the CUDA-graph pool. kvrules cannot
run the profile, so :func:`estimate_runtime` estimates each of these from the checkpoint's tensors
(:class:`~kvrules.sizing.weights.WeightTable`) and the serving settings:

* ``activation_peak``: the profile's forward pass over ``max_num_batched_tokens`` tokens. Per
  token, the largest decoder layer's live outputs: the residual stream and the normed input
  (``2 x hidden``) plus the larger of its mixer's projections (attention, linear attention or
  Mamba: the output features of its linears on this rank) and its MLP's (dense and shared
  experts; routed experts ``top_k`` times, plus ``top_k x hidden`` for the fused-MoE output),
  at the model dtype.
* ``sampler``: the profile's dummy sampler run, ``min(max_num_seqs, max_num_batched_tokens)``
  rows of logits over the whole vocabulary in float32, twice (the logits and the probabilities
  computed from them). The whole vocabulary on every GPU, not a TP rank's slice: vLLM's
  ``LogitsProcessor._gather_logits`` gathers the lm_head's slices onto rank 0 (V0) or onto every
  rank (V1, where ``Platform.use_all_gather`` is true) before the sampler runs, and
  ``_get_logits`` drops the padding (``logits[..., :org_vocab_size]``), so the KV budget's
  fullest GPU samples over the checkpoint's unpadded ``vocab_size``.
* ``non_torch``: CUDA context, cuBLAS workspaces and, with more than one GPU, NCCL and the custom
  all-reduce buffers: :data:`NON_TORCH_BYTES` plus :data:`COLLECTIVE_BYTES` (fixed figures in the
  range published start logs show: 0.05-0.35 GiB on one GPU (1.79 in vllm#10511), 0.25-2.04 GiB
  per GPU at TP 2-4).
* ``cuda_graphs``: 0 with ``enforce_eager``; else :data:`GRAPH_BYTES_PER_LAYER_AND_SIZE` for each
  decoder layer on the GPU and each captured batch size (vLLM's default capture list up to
  ``min(2 x max_num_seqs, 512)``), a figure from a published capture (Llama-3.2-1B: 16 layers, 35
  sizes, 0.21 GiB, vLLM PR #11349).

Every figure is an estimate and is labelled so; ``overhead_bytes`` replaces all four with the
user's own figure (what ``vllm serve`` logged, for example). docs/fit.md shows each formula and
tests/fit/test_runtime_logs.py compares the result with published vLLM start logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvrules.errors import ConfigError
from kvrules.hf.config import HFConfig
from kvrules.sizing.shard import ShardedWeights
from kvrules.sizing.weights import Role, Split, Weight, WeightTable
from kvrules.values import shown

_GIB = 1 << 30
_MIB = 1 << 20
#: memory outside PyTorch's allocator on every GPU (CUDA context, cuBLAS workspaces)
NON_TORCH_BYTES = int(0.3 * _GIB)
#: added per GPU when the model spans more than one (NCCL buffers, custom all-reduce)
COLLECTIVE_BYTES = int(0.5 * _GIB)
#: CUDA-graph pool per decoder layer and captured batch size (0.21 GiB / (16 layers x 35 sizes))
GRAPH_BYTES_PER_LAYER_AND_SIZE = int(0.21 * _GIB / (16 * 35))
#: the largest batch vLLM captures by default
MAX_CAPTURE_SIZE = 512
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
_MIXERS = frozenset({"attention", "linear_attention", "mamba", "indexer"})
_FFN = frozenset({"mlp", "shared_experts"})
_TOP_K_KEYS = ("num_experts_per_tok", "moe_topk", "top_k", "experts_per_token", "num_experts_per_token")


@dataclass(frozen=True)
class ServingSettings:
    """The vLLM settings the runtime estimate reads.

    :ivar max_num_batched_tokens: tokens of the profile's forward pass.
    :ivar max_num_seqs: requests of the profile's sampler run and the CUDA-graph capture list.
    :ivar enforce_eager: no CUDA graphs.
    """

    max_num_batched_tokens: int
    max_num_seqs: int
    enforce_eager: bool = False

    def __post_init__(self) -> None:
        for name in ("max_num_batched_tokens", "max_num_seqs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}={shown(value)} must be a positive integer")


def serve_defaults(total_bytes: int, gpu_name: str = "") -> tuple[int, int]:
    """``vllm serve``'s defaults ``(max_num_batched_tokens, max_num_seqs)`` for a GPU of
    ``total_bytes``, as vLLM's ``EngineArgs`` chooses them (``_set_default_max_num_seqs_and_batched_tokens_args``):
    16,384 and 1,024 from 160 GiB, 8,192 and 1,024 from 70 GiB (not on an A100), else 2,048 and 256."""
    if total_bytes >= 160 * _GIB:
        return 16384, 1024
    if total_bytes >= 70 * _GIB and "a100" not in gpu_name.lower():
        return 8192, 1024
    return 2048, 256


@dataclass(frozen=True)
class RuntimeEstimate:
    """Non-KV, non-weight bytes on the fullest GPU, per component.

    :ivar components: ``activation_peak``, ``sampler``, ``non_torch``, ``cuda_graphs`` (or
        ``overhead`` alone when the user gave it).
    :ivar formulas: how each component was worked out, in words and figures.
    :ivar estimated: ``False`` when the user's ``overhead`` replaced the estimate.
    """

    components: Mapping[str, int]
    formulas: Mapping[str, str]
    estimated: bool = True

    @property
    def total_bytes(self) -> int:
        """All components together."""
        return sum(self.components.values())

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready form."""
        return {
            "estimated": self.estimated,
            "total_bytes": self.total_bytes,
            "components": dict(self.components),
            "formulas": dict(self.formulas),
        }


def _rank_share(w: Weight, tp: int) -> int:
    """Output features of linear ``w`` one TP rank computes per token (a row-parallel layer's
    output is whole after its all-reduce)."""
    rows = w.shape[0]
    if w.split in (Split.REPLICATED, Split.ROW):
        return rows
    return -(-rows // tp)


def _top_k(config: HFConfig) -> int:
    for key in _TOP_K_KEYS:
        if config.get(key) is not None:
            return config.integer(key)
    return 1


def per_token_elements(table: WeightTable, config: HFConfig, tp: int) -> int:
    """Live activation elements per token of the largest decoder layer on one TP rank (see the
    module docstring)."""
    top_k = _top_k(config)
    mixers: dict[int, int] = {}
    ffns: dict[int, int] = {}
    for w in table.weights:
        if w.role is not Role.MODEL or w.layer is None or not w.linear:
            continue
        share = _rank_share(w, tp)
        if w.component in _MIXERS:
            mixers[w.layer] = mixers.get(w.layer, 0) + share
        elif w.component in _FFN:
            ffns[w.layer] = ffns.get(w.layer, 0) + share
        elif w.component == "experts":
            ffns[w.layer] = ffns.get(w.layer, 0) + top_k * share
    moe_layers = {w.layer for w in table.weights if w.component == "experts" and w.layer is not None}
    for layer in moe_layers:
        ffns[layer] = ffns.get(layer, 0) + top_k * table.hidden_size
    layers = set(mixers) | set(ffns)
    widest = max((max(mixers.get(n, 0), ffns.get(n, 0)) for n in layers), default=0)
    return 2 * table.hidden_size + widest


def capture_sizes(max_num_seqs: int) -> int:
    """How many batch sizes vLLM captures by default: 1, 2, 4, then every 8 to 256, then every
    16, up to ``min(2 x max_num_seqs, 512)``."""
    top = min(2 * max_num_seqs, MAX_CAPTURE_SIZE)
    sizes = [s for s in (1, 2, 4) if s <= top]
    sizes += list(range(8, min(top, 255) + 1, 8))
    sizes += list(range(256, top + 1, 16))
    return len(sizes)


def estimate_runtime(
    config: HFConfig,
    table: WeightTable,
    weights: ShardedWeights,
    settings: ServingSettings,
    *,
    overhead_bytes: int | None = None,
) -> RuntimeEstimate:
    """The runtime memory of the fullest GPU serving ``weights`` with ``settings``; the user's
    ``overhead_bytes`` instead when given."""
    if overhead_bytes is not None:
        if isinstance(overhead_bytes, bool) or not isinstance(overhead_bytes, int) or overhead_bytes < 0:
            raise ConfigError(f"overhead={shown(overhead_bytes)} must be a non-negative number of bytes")
        return RuntimeEstimate(
            {"overhead": overhead_bytes}, {"overhead": "given by the user"}, estimated=False
        )
    opts = weights.options
    act = _DTYPE_BYTES[weights.dtype]
    per_token = per_token_elements(table, config, opts.tp)
    tokens = settings.max_num_batched_tokens
    rows = min(settings.max_num_seqs, tokens)
    vocab = table.vocab_size
    layers = max(r.layers[1] - r.layers[0] for r in weights.ranks)
    sizes = 0 if settings.enforce_eager else capture_sizes(settings.max_num_seqs)
    world = opts.tp * opts.pp
    components = {
        "activation_peak": tokens * per_token * act,
        "sampler": rows * vocab * 4 * 2,
        "non_torch": NON_TORCH_BYTES + (COLLECTIVE_BYTES if world > 1 else 0),
        "cuda_graphs": layers * sizes * GRAPH_BYTES_PER_LAYER_AND_SIZE,
    }
    formulas = {
        "activation_peak": f"{tokens:,} batched tokens x {per_token:,} live elements per token x {act} B",
        "sampler": f"{rows:,} rows x {vocab:,} vocabulary entries (gathered) x 4 B (float32) x 2",
        "non_torch": (
            f"{NON_TORCH_BYTES / _GIB:.2f} GiB CUDA context and workspaces"
            + (f" + {COLLECTIVE_BYTES / _GIB:.2f} GiB collectives ({world} GPUs)" if world > 1 else "")
        ),
        "cuda_graphs": (
            "none (enforce_eager)"
            if settings.enforce_eager
            else f"{layers} layers x {sizes} captured sizes x {GRAPH_BYTES_PER_LAYER_AND_SIZE / _MIB:.2f} MiB"
        ),
    }
    return RuntimeEstimate(components, formulas)
