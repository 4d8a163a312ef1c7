"""``kvrules fit``: does a model (and its draft) fit on a GPU, and how well?

:func:`fit` answers in four steps, each one a module of this package:

1. **weights per GPU** (:mod:`kvrules.sizing.shard`): the checkpoint's tensors divided the way
   vLLM divides them under TP and PP, the draft's (or the MTP layers') beside them on the last
   PP rank;
2. **runtime memory** (:mod:`kvrules.sizing.runtime`): an estimate, per component, of what vLLM's
   profile holds besides weights and KV cache (or the user's ``overhead``);
3. **the exact KV plan** of what remains of ``total x gpu_memory_utilization``: the front door
   builds the KV-cache specs of one GPU and ``Planner.plan`` plans them, for each strategy set
   asked (``default`` and ``vllm-0.33`` unless told otherwise), at the requested length and
   with auto-fit for the largest length one request can have;
4. **the nearest settings that fit** when the first set's plan does not: the smallest TP of
   1/2/4/8 (where none fits, PP 2 or 4 at TP 8: more than one node), an fp8 checkpoint of the model (at the smallest TP where it fits), an fp8 KV cache,
   the largest length that fits, no draft; each planned for real.

Parameter counts that rest on a size field the config leaves out (a trimmed config) are refused
unless ``allow_assumed_sizes``: the weights would be a guess.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec

from kvrules.config import DEFAULT_DRAFT_PREFIXES, EngineConfig
from kvrules.errors import CapacityError, ConfigError
from kvrules.hf.build import MTP, HFModelFile, model_from_hf
from kvrules.hf.config import HFConfig
from kvrules.hf.options import KV_CACHE_DTYPES, HFOptions
from kvrules.pipeline import Planner
from kvrules.plan import Plan
from kvrules.plugin.manager import KVRulesPluginManager
from kvrules.sizing.gpus import find_gpu
from kvrules.sizing.params import ParamCount, as_config, count_params
from kvrules.sizing.runtime import RuntimeEstimate, ServingSettings, estimate_runtime, serve_defaults
from kvrules.sizing.shard import (
    MXFP4_BACKENDS,
    ShardedWeights,
    ShardOptions,
    mxfp4_backend_for,
    pp_indices,
    shard_weights,
)
from kvrules.units import format_size, parse_size
from kvrules.values import shown

SCHEMA = "kvrules.fit/v1"
#: the strategy sets compared when none are named: kvrules' own and the newest vLLM line's
DEFAULT_SETS = ("default", "vllm-0.33")
#: tensor-parallel sizes tried for "the smallest TP that fits"
TP_SIZES = (1, 2, 4, 8)
#: pipeline-parallel sizes tried at the largest TP when no TP alone fits (8 GPUs a node)
PP_SIZES = (2, 4)
#: config fields that set a tensor's shape; a count resting on their class default is a guess
SIZE_FIELDS = frozenset(
    {
        "hidden_size",
        "intermediate_size",
        "moe_intermediate_size",
        "shared_expert_intermediate_size",
        "shared_intermediate_size",
        "n_shared_experts",
        "num_shared_experts",
        "adapter_rank",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "vocab_size",
        "num_experts",
        "n_routed_experts",
        "num_local_experts",
    }
)
_LAYER_INDEX = re.compile(r"\.(\d+)(?:\.|$)")


@dataclass(frozen=True)
class FitOptions:
    """How the model is to be served (vLLM's flags of the same names).

    :ivar gpu: a catalog name (:func:`kvrules.sizing.gpus.find_gpu`); or
    :ivar gpu_memory: the GPU's total memory (bytes or a size such as ``80GiB``).
    :ivar tp, pp: tensor- and pipeline-parallel sizes.
    :ivar gpu_memory_utilization: the share of the GPU vLLM may use (0.9 as in vLLM).
    :ivar max_model_len: the longest request (``None``: the config's ``max_position_embeddings``).
    :ivar max_num_seqs, max_num_batched_tokens: ``None``: ``vllm serve``'s defaults for the GPU.
    :ivar kv_cache_dtype: ``auto`` or one of ``--kv-cache-dtype``'s values.
    :ivar enforce_eager: no CUDA graphs.
    :ivar overhead: the runtime memory per GPU instead of kvrules' estimate (bytes or a size).
    :ivar strategies: the strategy sets planned side by side (the first one decides "fits").
    :ivar allow_assumed_sizes: go on when a size field is not in the config (see the module).
    :ivar reader: how a config file is read (:data:`kvrules.hf.config.READERS`: ``auto``, the
        built-in reader for the model types it knows, ``builtin`` or ``transformers``).
    :ivar mxfp4_backend: the MoE backend that holds mxfp4 experts (gpt-oss), one of
        :data:`kvrules.sizing.shard.MXFP4_BACKENDS`; ``auto``: the one current vLLM picks on the
        named GPU (:func:`kvrules.sizing.shard.mxfp4_backend_for`; ``triton``, Hopper's, for a
        GPU given by its memory). It pads the experts, so it changes their bytes.
    """

    gpu: str | None = None
    gpu_memory: int | str | None = None
    tp: int = 1
    pp: int = 1
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str = "auto"
    enforce_eager: bool = False
    overhead: int | str | None = None
    strategies: tuple[str, ...] = DEFAULT_SETS
    allow_assumed_sizes: bool = False
    reader: str = "auto"
    mxfp4_backend: str = "auto"

    def __post_init__(self) -> None:
        if (self.gpu is None) == (self.gpu_memory is None):
            raise ConfigError("fit: give the GPU, either gpu=NAME (--gpu) or gpu_memory=SIZE (--gpu-memory)")
        for name in ("tp", "pp"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"fit: {name}={shown(value)} must be a positive integer")
        util = self.gpu_memory_utilization
        if isinstance(util, bool) or not isinstance(util, (int, float)) or not 0 < util <= 1:
            raise ConfigError(
                f"fit: gpu_memory_utilization={shown(util)} must be in (0, 1] (vLLM's default 0.9)"
            )
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ConfigError(
                f"fit: kv_cache_dtype={shown(self.kv_cache_dtype)} must be one of {', '.join(KV_CACHE_DTYPES)}"
            )
        if not self.strategies or any(not isinstance(s, str) or not s for s in self.strategies):
            raise ConfigError(f"fit: strategies={shown(self.strategies)} must name at least one strategy set")
        if self.mxfp4_backend not in ("auto", *MXFP4_BACKENDS):
            raise ConfigError(
                f"fit: mxfp4_backend={shown(self.mxfp4_backend)} must be auto or one of {', '.join(MXFP4_BACKENDS)}"
            )


@dataclass(frozen=True)
class GPUMemory:
    """The GPU planned for: its name (``None`` when given by size), total bytes and which figure
    that is (``driver``, ``nominal`` or ``given``)."""

    name: str | None
    total_bytes: int
    kind: str


@dataclass(frozen=True)
class SetAnswer:
    """One strategy set's answer.

    :ivar strategy_set: the set planned with.
    :ivar fits: one request of the requested length fits on every GPU.
    :ivar plan: the plan at the requested length (``None`` when it does not fit).
    :ivar max_concurrency: requests of the requested length served at once (0 when it does not fit).
    :ivar max_model_len_fits: the largest length one request can have (up to the model's maximum;
        0 when not even one block fits).
    :ivar reason: why it does not fit (``None`` when it does).
    """

    strategy_set: str
    fits: bool
    plan: Plan | None
    max_concurrency: float
    max_model_len_fits: int
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, the plan in schema ``kvrules.plan/v2``."""
        return {
            "strategy_set": self.strategy_set,
            "fits": self.fits,
            "max_concurrency": self.max_concurrency,
            "max_model_len_fits": self.max_model_len_fits,
            "capacity_tokens": self.plan.capacity_tokens if self.plan is not None else 0,
            "reason": self.reason,
            "plan": self.plan.to_dict() if self.plan is not None else None,
        }


@dataclass(frozen=True)
class Alternative:
    """A nearby setting and its answers (``change`` in words, ``report`` planned for real)."""

    change: str
    report: FitReport


@dataclass(frozen=True)
class FitReport:
    """The answer of :func:`fit`.

    :ivar model, draft: what was fitted (the draft ``None`` without one, ``mtp`` for MTP).
    :ivar options: the options, defaults resolved (length, batch sizes).
    :ivar gpu: the GPU memory planned for.
    :ivar params: the target's parameter count; :ivar draft_params: the draft's (or ``None``).
    :ivar weights: per PP stage, the fullest TP rank's weight bytes (draft included).
    :ivar runtime: the runtime memory per GPU (estimated unless ``overhead`` was given).
    :ivar kv_cache_bytes: per PP stage, what remains for the KV cache (may be negative).
    :ivar answers: one per strategy set, in the order asked.
    :ivar nearest: settings that fit when the first set's answer does not.
    :ivar notes: what was assumed or left out.
    """

    model: str
    draft: str | None
    options: FitOptions
    gpu: GPUMemory
    params: ParamCount
    draft_params: ParamCount | None
    weights: tuple[int, ...]
    runtime: RuntimeEstimate
    kv_cache_bytes: tuple[int, ...]
    answers: tuple[SetAnswer, ...]
    nearest: tuple[Alternative, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def fits(self) -> bool:
        """The first strategy set's answer."""
        return self.answers[0].fits

    @property
    def loaded_params(self) -> int:
        """Parameters the engine loads for the target: the language model, its vision tower
        (vLLM loads it, as the weights per GPU count it), and its MTP layers when they are the draft."""
        mtp = self.params.by_role.get("mtp", 0) if self.draft == MTP else 0
        return self.params.language_model + self.params.by_role.get("vision", 0) + mtp

    @property
    def usable_bytes(self) -> int:
        """``total x gpu_memory_utilization``: what vLLM may use on each GPU."""
        return int(self.gpu.total_bytes * self.options.gpu_memory_utilization)

    @property
    def weights_bytes_per_gpu(self) -> int:
        """The fullest GPU's weights."""
        return max(self.weights)

    @property
    def kv_cache_bytes_per_gpu(self) -> int:
        """The smallest KV budget of any GPU (what limits the plan)."""
        return min(self.kv_cache_bytes)

    def to_dict(self) -> dict[str, Any]:
        """The report in schema ``kvrules.fit/v1`` (kvrules/schemas/fit-v1.json)."""
        first = self.answers[0]
        return {
            "schema": SCHEMA,
            "model": self.model,
            "draft": self.draft,
            "gpu": {"name": self.gpu.name, "total_bytes": self.gpu.total_bytes, "kind": self.gpu.kind},
            "settings": _settings_dict(self.options),
            "parameters": self.params.total,
            "parameters_served": self.loaded_params,
            "draft_parameters": self.draft_params.total if self.draft_params is not None else None,
            "usable_bytes_per_gpu": self.usable_bytes,
            "weights_bytes_per_gpu": self.weights_bytes_per_gpu,
            "weights_bytes_per_stage": list(self.weights),
            "runtime_bytes_per_gpu": self.runtime.total_bytes,
            "runtime": self.runtime.to_dict(),
            "kv_cache_bytes_per_gpu": self.kv_cache_bytes_per_gpu,
            "fits": first.fits,
            "max_concurrency": first.max_concurrency,
            "max_model_len_fits": first.max_model_len_fits,
            "answers": [a.to_dict() for a in self.answers],
            "nearest": [{"change": a.change, **_brief(a.report)} for a in self.nearest],
            "notes": list(self.notes),
        }


def fit_json_schema() -> dict[str, Any]:
    """The JSON Schema of :meth:`FitReport.to_dict` (``kvrules/schemas/fit-v1.json``); its
    answers' plans refer to ``kvrules.plan/v2`` (:func:`kvrules.plan.plan_json_schema`)."""
    text = resources.files("kvrules.schemas").joinpath("fit-v1.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def _settings_dict(o: FitOptions) -> dict[str, Any]:
    return {
        "tp": o.tp,
        "pp": o.pp,
        "gpu_memory_utilization": o.gpu_memory_utilization,
        "max_model_len": o.max_model_len,
        "max_num_seqs": o.max_num_seqs,
        "max_num_batched_tokens": o.max_num_batched_tokens,
        "kv_cache_dtype": o.kv_cache_dtype,
        "enforce_eager": o.enforce_eager,
        "strategies": list(o.strategies),
        "mxfp4_backend": o.mxfp4_backend,
    }


def _brief(report: FitReport) -> dict[str, Any]:
    """An alternative's figures without its plans."""
    return {
        "settings": _settings_dict(report.options),
        "draft": report.draft,
        "weights_bytes_per_gpu": report.weights_bytes_per_gpu,
        "kv_cache_bytes_per_gpu": report.kv_cache_bytes_per_gpu,
        "answers": [{k: v for k, v in a.to_dict().items() if k != "plan"} for a in report.answers],
    }


def _read(config: str | Path | Mapping[str, Any] | HFConfig, reader: str) -> HFConfig:
    """``config`` as an :class:`HFConfig`, a file read with ``reader``."""
    if isinstance(config, (str, Path)):
        return HFConfig.load(config, reader=reader)
    return as_config(config)


def _gpu(options: FitOptions) -> GPUMemory:
    """The GPU ``options`` name, or the memory they give (:class:`FitOptions` holds one of them)."""
    if options.gpu is not None:
        entry = find_gpu(options.gpu)
        return GPUMemory(entry.name, entry.memory_bytes, entry.memory_kind)
    total = 0 if options.gpu_memory is None else parse_size(options.gpu_memory)
    if total <= 0:
        raise ConfigError(f"fit: gpu_memory={shown(options.gpu_memory)} must be more than 0 bytes")
    return GPUMemory(None, total, "given")


def _mxfp4_backend(
    options: FitOptions, gpu: GPUMemory, counts: Sequence[ParamCount | None]
) -> tuple[str, tuple[str, ...]]:
    """The mxfp4 MoE backend to size for (the one asked, else the named GPU's default) and, when
    a checkpoint of ``counts`` has mxfp4 experts, the note saying which it is."""
    if options.mxfp4_backend != "auto":
        backend, why = options.mxfp4_backend, "as asked"
    elif options.gpu is None:
        backend, why = mxfp4_backend_for(None), "Hopper's default; the GPU is given by its memory"
    else:
        backend, why = mxfp4_backend_for(find_gpu(options.gpu).arch), f"current vLLM's default on {gpu.name}"
    if not any(c is not None and c.scheme.layout == "mxfp4" for c in counts):
        return backend, ()
    return backend, (
        f"mxfp4 experts padded and stored as vLLM's {backend} MoE backend keeps them ({why}); "
        "give mxfp4_backend (--mxfp4-backend) for another",
    )


def _refuse_assumed(params: ParamCount, role: str, config: HFConfig) -> None:
    guessed = sorted(SIZE_FIELDS.intersection(params.assumed))
    if guessed:
        raise ConfigError(
            f"fit: the {role} config {config.source} leaves out {', '.join(guessed)}; kvrules would count "
            "its weights from the model class's defaults, a guess. Use the checkpoint's full config.json, "
            "or pass allow_assumed_sizes=True (--allow-assumed-sizes) to go on with the defaults"
        )


def _stage_of(name: str, stages: Sequence[tuple[int, int]], draft_prefixes: Sequence[str]) -> int:
    """The PP stage holding KV layer ``name``: draft layers on the last, a target layer by its
    decoder index (the first number in its name), as vLLM's ``get_pp_indices`` places it."""
    if name.startswith(tuple(draft_prefixes)):
        return len(stages) - 1
    found = _LAYER_INDEX.search(name)
    index = int(found.group(1)) if found else 0
    for stage, (start, end) in enumerate(stages):
        if start <= index < end:
            return stage
    return len(stages) - 1


@dataclass(frozen=True)
class _Inputs:
    """What one evaluation reads: configs, their counts and the plugin manager."""

    config: HFConfig
    draft: HFConfig | str | None
    params: ParamCount
    draft_params: ParamCount | None
    title: str
    draft_title: str | None
    plugin_manager: KVRulesPluginManager | None


def _weights(inputs: _Inputs, options: FitOptions) -> tuple[ShardedWeights, tuple[int, ...]]:
    mtp = inputs.draft == MTP
    backend = options.mxfp4_backend
    target = shard_weights(
        inputs.config,
        ShardOptions(tp=options.tp, pp=options.pp, include_mtp=mtp, mxfp4_backend=backend),
    )
    per_stage = [max(target.rank(s, t).total_bytes for t in range(options.tp)) for s in range(options.pp)]
    if isinstance(inputs.draft, HFConfig):
        draft = shard_weights(inputs.draft, ShardOptions(tp=options.tp, mxfp4_backend=backend))
        per_stage[-1] += draft.max_bytes
    return target, tuple(per_stage)


def _model(inputs: _Inputs, options: FitOptions, strategy_set: str, length: int | None) -> HFModelFile:
    hf_options = HFOptions(
        kv_cache_dtype=options.kv_cache_dtype,
        tensor_parallel_size=options.tp,
        max_model_len=length,
    )
    return model_from_hf(
        inputs.config,
        inputs.draft,
        hf_options,
        strategies=strategy_set,
        plugin_manager=inputs.plugin_manager,
    )


def _stage_specs(
    model: HFModelFile, options: FitOptions, config: EngineConfig, layers: int
) -> list[dict[str, Any]]:
    if options.pp == 1:
        return [dict(model.specs)]
    stages = [pp_indices(layers, s, options.pp) for s in range(options.pp)]
    out: list[dict[str, Any]] = [{} for _ in stages]
    for name, spec in model.specs.items():
        out[_stage_of(name, stages, config.draft_layer_prefixes or DEFAULT_DRAFT_PREFIXES)][name] = spec
    return [s for s in out if s]


def _answer(
    inputs: _Inputs,
    options: FitOptions,
    strategy_set: str,
    budgets: tuple[int, ...],
    layers: int,
    no_room: str,
) -> SetAnswer:
    if min(budgets) <= 0:
        return SetAnswer(strategy_set, False, None, 0.0, 0, no_room)
    model = _model(inputs, options, strategy_set, options.max_model_len)
    engine = dict(model.engine)
    engine["max_num_batched_tokens"] = options.max_num_batched_tokens
    config = EngineConfig.from_dict(engine)
    specs = _stage_specs(model, options, config, layers)
    memories = list(budgets)[: len(specs)] if len(specs) == len(budgets) else [min(budgets)] * len(specs)
    planner = Planner(strategy_set, plugin_manager=inputs.plugin_manager)
    longest = _longest(planner, specs, memories, config, inputs)
    try:
        plan = planner.plan(specs, memories, config)
    except CapacityError as exc:
        return SetAnswer(strategy_set, False, None, 0.0, longest, exc.reason)
    if (
        model.hf is not None
    ):  # the front door's decisions (architecture, alignment) first, as `plan` shows them
        plan = msgspec.structs.replace(plan, decisions=model.hf.decisions + plan.decisions)
    return SetAnswer(strategy_set, True, plan, plan.max_concurrency, longest)


def _longest(
    planner: Planner, specs: list[dict[str, Any]], memories: list[int], config: EngineConfig, inputs: _Inputs
) -> int:
    """The largest length one request can have, up to the model's own maximum."""
    top = inputs.config.opt_int("max_position_embeddings") or config.max_model_len
    bound = replace(config, max_model_len=max(top, config.max_model_len), auto_fit_max_model_len=True)
    try:
        return planner.plan(specs, memories, bound).max_model_len
    except CapacityError as exc:
        return exc.max_fitting_len


def _report(inputs: _Inputs, options: FitOptions, gpu: GPUMemory, notes: tuple[str, ...]) -> FitReport:
    target, weights = _weights(inputs, options)
    runtime = estimate_runtime(
        inputs.config,
        inputs.params.table,
        target,
        ServingSettings(
            options.max_num_batched_tokens or 1, options.max_num_seqs or 1, options.enforce_eager
        ),
        overhead_bytes=None if options.overhead is None else parse_size(options.overhead),
    )
    usable = int(gpu.total_bytes * options.gpu_memory_utilization)
    budgets = tuple(usable - w - runtime.total_bytes for w in weights)
    no_room = (
        f"weights {format_size(max(weights))} + runtime {format_size(runtime.total_bytes)} per GPU leave no "
        f"room for the KV cache in the {format_size(usable)} vLLM may use "
        f"({options.gpu_memory_utilization:g} x {format_size(gpu.total_bytes)})"
    )
    layers = inputs.params.table.num_layers
    answers = tuple(_answer(inputs, options, s, budgets, layers, no_room) for s in options.strategies)
    return FitReport(
        inputs.title,
        inputs.draft_title,
        options,
        gpu,
        inputs.params,
        inputs.draft_params,
        weights,
        runtime,
        budgets,
        answers,
        notes=notes,
    )


#: the quantisation of an fp8 checkpoint as Qwen, DeepSeek and others publish them
FP8_CHECKPOINT = {
    "quant_method": "fp8",
    "fmt": "e4m3",
    "activation_scheme": "dynamic",
    "weight_block_size": [128, 128],
}


def _fp8_weights(inputs: _Inputs) -> _Inputs:
    """``inputs`` with the target's linear layers in fp8 with 128 x 128 block scales (an fp8
    checkpoint of the same model; a published one may keep a few more layers at 16 bits)."""
    data = {**inputs.config.data, "quantization_config": FP8_CHECKPOINT}
    config = HFConfig(data, f"{inputs.config.source} with fp8 weights", reader=inputs.config.reader)
    return replace(inputs, config=config, params=count_params(config))


def _smallest_tp(
    inputs: _Inputs, options: FitOptions, gpu: GPUMemory, notes: tuple[str, ...], sizes: Sequence[int]
) -> FitReport | None:
    """The report at the first TP of ``sizes`` that fits, or ``None``."""
    return _first_fit(inputs, [replace(options, tp=tp) for tp in sizes], gpu, notes)


def _first_fit(
    inputs: _Inputs, tries: Sequence[FitOptions], gpu: GPUMemory, notes: tuple[str, ...]
) -> FitReport | None:
    """The report of the first of ``tries`` that fits (a TP the heads cannot be divided by, or a
    PP larger than the layers, is skipped: vLLM refuses it too), or ``None``."""
    for tried_options in tries:
        try:
            tried = _report(inputs, tried_options, gpu, notes)
        except ConfigError:
            continue
        if tried.fits:
            return tried
    return None


def _deeper(inputs: _Inputs, options: FitOptions, gpu: GPUMemory, notes: tuple[str, ...]) -> FitReport | None:
    """Where no TP up to 8 fits: the first PP of :data:`PP_SIZES` at TP 8 that fits, or ``None``."""
    tp = max(options.tp, TP_SIZES[-1])
    tries = [replace(options, tp=tp, pp=pp) for pp in PP_SIZES if pp > options.pp]
    return _first_fit(inputs, tries, gpu, notes)


def _nearest(inputs: _Inputs, report: FitReport) -> tuple[Alternative, ...]:
    """The settings nearest to ``report``'s that fit, each planned (see the module docstring)."""
    options, gpu, notes = report.options, report.gpu, report.notes
    found: list[tuple[str, FitReport | None]] = []
    wider = _smallest_tp(inputs, options, gpu, notes, [t for t in TP_SIZES if t > options.tp])
    found.append((f"tensor-parallel size {wider.options.tp}" if wider else "", wider))
    if wider is None:
        deeper = _deeper(inputs, options, gpu, notes)
        change = (
            f"tensor-parallel size {deeper.options.tp}, pipeline-parallel size {deeper.options.pp} "
            f"({deeper.options.tp * deeper.options.pp} GPUs)"
            if deeper
            else ""
        )
        found.append((change, deeper))
    if options.kv_cache_dtype not in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        found.append(("fp8 KV cache", _report(inputs, replace(options, kv_cache_dtype="fp8"), gpu, notes)))
    if not inputs.params.scheme.quantized:
        tps = [t for t in TP_SIZES if t >= options.tp]
        fp8 = _smallest_tp(_fp8_weights(inputs), options, gpu, notes, tps)
        at = (
            ""
            if fp8 is None or fp8.options.tp == options.tp
            else f" at tensor-parallel size {fp8.options.tp}"
        )
        found.append((f"fp8 weights{at}", fp8))
    longest = report.answers[0].max_model_len_fits
    if 0 < longest < (options.max_model_len or 0):
        found.append(
            (
                f"max_model_len {longest:,}",
                _report(inputs, replace(options, max_model_len=longest), gpu, notes),
            )
        )
    if inputs.draft is not None:
        alone = replace(inputs, draft=None, draft_params=None, draft_title=None)
        found.append(("no draft", _report(alone, options, gpu, notes)))
    return tuple(Alternative(change, tried) for change, tried in found if tried is not None and tried.fits)


def fit(
    config: str | Path | Mapping[str, Any] | HFConfig,
    draft: str | Path | Mapping[str, Any] | HFConfig | None = None,
    options: FitOptions | None = None,
    *,
    plugin_manager: KVRulesPluginManager | None = None,
    **kwargs: Any,
) -> FitReport:
    """Does ``config`` (with ``draft``: a config, or ``"mtp"`` for its MTP layers) fit on the
    GPU ``options`` names, and how well? ``options`` or its fields as keywords
    (``fit(cfg, gpu="H100", tp=2)``).

    :raises ConfigError: bad options, an unknown GPU, a size field left out of a config.
    :raises ModelFileError: a config kvrules cannot read.
    """
    if options is not None and kwargs:
        raise ConfigError("fit: give either options or keyword arguments, not both")
    opts = options if options is not None else FitOptions(**kwargs)
    gpu = _gpu(opts)
    cfg = _read(config, opts.reader)
    params = count_params(cfg)
    draft_cfg: HFConfig | str | None = None
    draft_params = None
    if draft == MTP:
        draft_cfg = MTP
    elif draft is not None:
        draft_cfg = _read(draft, opts.reader)
        draft_params = count_params(draft_cfg)
    notes: list[str] = []
    for role, count, source in (("target", params, cfg), ("draft", draft_params, draft_cfg)):
        if count is None or not isinstance(source, HFConfig):
            continue
        if not opts.allow_assumed_sizes:
            _refuse_assumed(count, role, source)
        if count.assumed:
            notes.append(
                f"{role}: not in the config, the model class's default used: {', '.join(count.assumed)}"
            )
        if not count.complete:
            notes.append(f"{role}: part of the checkpoint is not counted ({'; '.join(count.notes)})")
    backend, said = _mxfp4_backend(opts, gpu, (params, draft_params))
    notes.extend(said)
    tokens, seqs = serve_defaults(gpu.total_bytes, gpu.name or "")
    length = opts.max_model_len or cfg.opt_int("max_position_embeddings")
    if length is None:
        raise ConfigError(
            f"fit: {cfg.source} has no max_position_embeddings; give max_model_len (--max-model-len)"
        )
    opts = replace(
        opts,
        max_model_len=length,
        max_num_batched_tokens=opts.max_num_batched_tokens or tokens,
        max_num_seqs=opts.max_num_seqs or seqs,
        mxfp4_backend=backend,
    )
    if opts.overhead is None:
        notes.append(
            "runtime memory is an estimate (docs/fit.md); give overhead (--overhead) to use your own figure"
        )
    inputs = _Inputs(
        cfg,
        draft_cfg,
        params,
        draft_params,
        cfg.title,
        draft_cfg.title if isinstance(draft_cfg, HFConfig) else draft_cfg,
        plugin_manager,
    )
    report = _report(inputs, opts, gpu, tuple(notes))
    if report.fits:
        return report
    return replace(report, nearest=_nearest(inputs, report))


__all__ = [
    "DEFAULT_SETS",
    "SCHEMA",
    "Alternative",
    "FitOptions",
    "FitReport",
    "GPUMemory",
    "SetAnswer",
    "fit",
    "fit_json_schema",
]
