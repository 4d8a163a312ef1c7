"""kvrules' block-size choice at vLLM engine start: wrapping ``Platform.update_block_size_for_backend``.

vLLM fixes the cache block sizes at config time, in the worker process, before any planner runs
(``Platform.update_block_size_for_backend``, on both lines; CPU and XPU platforms override it).
An aligner that vLLM does not have (``draft-aware-align`` in ``default``) can only act there.
:func:`wrap_platform` wraps that classmethod on a platform class; the wrapper

1. calls the platform's own method first (preferred block sizes, hybrid alignment, sibling checks);
2. reads the target and draft configs vLLM holds (``model_config.hf_config``,
   ``speculative_config.draft_model_config.hf_config``; the cache dtype, TP, ``mamba_cache_mode``,
   the speculative tokens and ``max_model_len``) and builds their specs through the kvrules HF
   front door twice: with the line's preset (vLLM's own rule, :func:`kvrules.hf.build_hf_model`)
   and with the active set;
3. checks that kvrules' reading of vLLM's rule lands on the values vLLM just chose (else kvrules
   misreads this model and declines);
4. expresses the active set's choice in the three values vLLM has, ``cache_config.block_size``
   (the smallest block), ``mamba_block_size`` (``align`` mode) and ``mamba_page_size_padded``,
   and accepts them only when the specs vLLM will build from them, unified by the active set's
   page unification (``block-scale`` raises the smaller pages) as the builder will do, equal the
   active set's specs layer by layer; then checks every block size against every attention
   backend's kernel block sizes (``supports_block_size``, vLLM's own test, as
   ``_check_aligned_block_size`` does);
5. sets the three values, or declines and leaves vLLM's choice.

Every outcome is one :class:`~kvrules.decisions.Decision` at stage ``align`` (:func:`last_decision`),
logged as ``kvrules.vllm.engine_start`` and repeated on vLLM's log. The wrapper never raises where
vLLM's own method did not: a fault of kvrules' side is recorded as a ``failed`` decision.
Importing this module never imports vLLM.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kvrules import logs
from kvrules.decisions import Decision
from kvrules.errors import KVRulesError
from kvrules.hf import HFModel, HFOptions, build_hf_model
from kvrules.integrations import vllm_log as vllm_log_lines
from kvrules.integrations.vllm_config import config_value
from kvrules.integrations.vllm_lines import LINES
from kvrules.pipeline import Planner
from kvrules.plugin.presets import BUILTIN_PRESETS
from kvrules.specs import AttentionSpec, KVCacheSpec, MambaSpec

#: the platform classmethod the wrapper wraps (both lines)
HOOK_NAME = "update_block_size_for_backend"
#: the decision's stage and the rule name of decisions no aligner made
STAGE = "align"
RULE = "engine-start"
#: vLLM's ``CacheConfig.DEFAULT_BLOCK_SIZE``
DEFAULT_BLOCK_SIZE = 16
#: the smallest block vLLM gives a hybrid MLA model (``_align_hybrid_block_size``)
MLA_HYBRID_BLOCK = 128
#: the base block of vLLM's CPU platform (0.29-0.32: ``CpuPlatform.check_and_update_config``
#: sets it before ``update_block_size_for_backend`` runs; 0.33: that method prefers it)
CPU_BASE_BLOCK = 128
#: the line -> the preset that reproduces it (its aligners are vLLM's own rule)
LINE_PRESETS: dict[str, str] = {name: line.preset for name, line in LINES.items()}
#: speculative methods whose draft is the target's own MTP layers
MTP_METHODS = ("mtp",)

vllm_log = vllm_log_lines.vllm_log
PlannerSource = Callable[[], Planner]


class Declined(KVRulesError):
    """kvrules' choice cannot be used here; vLLM's stands (the message is the decision's reason)."""


@dataclass(frozen=True)
class BlockValues:
    """The three cache values vLLM's layers build their specs from.

    :ivar block_size: ``cache_config.block_size`` (every attention layer that follows it).
    :ivar mamba_block_size: ``cache_config.mamba_block_size`` (``None``: not set).
    :ivar mamba_page_size_padded: ``cache_config.mamba_page_size_padded`` (``None``: no padding).
    """

    block_size: int
    mamba_block_size: int | None
    mamba_page_size_padded: int | None

    def as_dict(self) -> dict[str, int | None]:
        """The values by their ``cache_config`` names."""
        return asdict(self)


@dataclass(frozen=True)
class EngineView:
    """How the wrapper reads vLLM's attention backends (injectable: tests pass stand-ins).

    :ivar backends: ``vllm_config`` -> the model's non-SSM attention backend classes, in layer
        order (vLLM's ``_find_non_ssm_backend(s)``).
    :ivar checkpoint_alignment: ``vllm_config`` -> vLLM 0.33's Mamba prefill checkpoint
        alignment (``get_mamba_prefill_checkpoint_alignment``; ``None`` on 0.28 or without one).
    :ivar device_type: the platform's ``device_type`` (``"cpu"`` picks the CPU platform's own
        block-size rule, :func:`phase_one_block`); ``None``: vLLM's generic rule.
    """

    backends: Callable[[Any], list[Any]]
    checkpoint_alignment: Callable[[Any], int | None]
    device_type: str | None = None


@dataclass(frozen=True)
class EngineModel:
    """What the front door builds from: the configs and options vLLM holds.

    :ivar target: the target's Hugging Face config as a dict.
    :ivar draft: the draft's config dict, ``"mtp"``, or ``None`` (no draft layers).
    :ivar options: the engine options (``block_size`` is the kernel alignment, see :func:`kernel_alignment`).
    """

    target: dict[str, Any]
    draft: dict[str, Any] | str | None
    options: HFOptions


@dataclass
class _Wrapped:
    saved: Any
    planner: PlannerSource
    line: str
    view: EngineView | None = field(default=None)


_lock = threading.RLock()
_wrapped: dict[type, _Wrapped] = {}
_last: Decision | None = None


# -- reading vLLM's config -------------------------------------------------------------------
def _attr(root: Any, path: str, default: Any = None) -> Any:
    value = config_value(root, path)
    return default if value is None else value


def config_dict(hf_config: Any, what: str) -> dict[str, Any]:
    """``hf_config`` (a transformers ``PretrainedConfig`` or a mapping) as a plain dict.

    :raises Declined: it is neither.
    """
    if isinstance(hf_config, Mapping):
        return dict(hf_config)
    to_dict = getattr(hf_config, "to_dict", None)
    if callable(to_dict):
        data = to_dict()
        if isinstance(data, Mapping):
            return dict(data)
    raise Declined(f"vllm_config.{what} is {type(hf_config).__name__}, not a config kvrules can read")


def draft_config(vllm_config: Any) -> dict[str, Any] | str | None:
    """The draft as the front door takes it: ``"mtp"`` for MTP methods, the draft model's config
    dict, or ``None`` without a draft model (no speculation, n-gram)."""
    spec = _attr(vllm_config, "speculative_config")
    if spec is None or not _attr(spec, "num_speculative_tokens", 0):
        return None
    method = str(_attr(spec, "method", ""))
    if method in MTP_METHODS or method.endswith("_mtp"):
        return "mtp"
    hf = _attr(spec, "draft_model_config.hf_config")
    if hf is None:
        return None
    return config_dict(hf, "speculative_config.draft_model_config.hf_config")


def engine_options(vllm_config: Any, alignment: int) -> HFOptions:
    """The front door's options from vLLM's cache, parallel, model and speculative configs.

    :raises Declined: a value the front door does not take (e.g. a ``turboquant`` cache dtype).
    """
    cache = vllm_config.cache_config
    try:
        return HFOptions(
            kv_cache_dtype=str(_attr(cache, "cache_dtype", "auto")),
            tensor_parallel_size=_attr(vllm_config, "parallel_config.tensor_parallel_size", 1),
            block_size=alignment,
            mamba_cache_dtype=str(_attr(cache, "mamba_cache_dtype", "auto")),
            mamba_ssm_cache_dtype=str(_attr(cache, "mamba_ssm_cache_dtype", "auto")),
            mamba_cache_mode=str(_attr(cache, "mamba_cache_mode", "none")),
            num_speculative_tokens=_attr(vllm_config, "speculative_config.num_speculative_tokens", 0),
            dtype=_attr(vllm_config, "model_config.dtype", "auto"),
            max_model_len=_attr(vllm_config, "model_config.max_model_len"),
        )
    except KVRulesError as exc:
        raise Declined(f"vLLM's settings do not map onto kvrules' options: {exc}") from None


def read_engine_model(vllm_config: Any, alignment: int) -> EngineModel:
    """The configs and options vLLM holds (see :class:`EngineModel`).

    :raises Declined: a user-given ``--block-size``, or a config kvrules cannot read.
    """
    if _attr(vllm_config, "cache_config.user_specified_block_size", False):
        block = _attr(vllm_config, "cache_config.block_size")
        raise Declined(f"the block size is the user's (--block-size {block}); kvrules keeps it")
    target = config_dict(_attr(vllm_config, "model_config.hf_config"), "model_config.hf_config")
    return EngineModel(target, draft_config(vllm_config), engine_options(vllm_config, alignment))


def vllm_values(vllm_config: Any) -> BlockValues:
    """The three values as ``vllm_config.cache_config`` holds them now."""
    cache = vllm_config.cache_config
    return BlockValues(
        int(cache.block_size),
        _attr(cache, "mamba_block_size"),
        _attr(cache, "mamba_page_size_padded"),
    )


# -- the backends ----------------------------------------------------------------------------
@contextlib.contextmanager
def _current(vllm_config: Any) -> Iterator[None]:
    """vLLM's ``set_current_vllm_config`` (backends may read it), or nothing without vLLM."""
    try:
        module = importlib.import_module("vllm.config.vllm")
    except ImportError:
        yield
        return
    with module.set_current_vllm_config(vllm_config):
        yield


def kernel_sizes(backend: Any) -> list[int]:
    """A backend's kernel block sizes as integers (``MultipleOf(n)`` counts as ``n``)."""
    return [int(getattr(s, "base", s)) for s in backend.get_supported_kernel_block_sizes()]


def _min_kernel(backend: Any) -> int:
    sizes = kernel_sizes(backend)
    return min(sizes) if sizes else 1


def _preferred_block(backends: Sequence[Any], line: str, default: int = DEFAULT_BLOCK_SIZE) -> int:
    """vLLM's phase 1: the first backend's preferred size (0.28, or one backend), else ``default``
    when every backend takes it, else the lcm of their smallest kernel blocks."""
    if line == "0.28" or len(backends) == 1:
        return int(backends[0].get_preferred_block_size(default))
    if all(b.supports_block_size(default) for b in backends):
        return default
    return math.lcm(*(_min_kernel(b) for b in backends))


def phase_one_block(backends: Sequence[Any], line: str, view: EngineView, before: int | None) -> int:
    """The block size the platform's rule starts hybrid alignment from.

    vLLM's generic rule (GPU platforms): the backends' preferred size (:func:`_preferred_block`).
    vLLM's CPU platform: 0.29-0.32 skips that phase and starts from the block size its
    ``check_and_update_config`` set (:data:`CPU_BASE_BLOCK`, or the user's), ``before`` the method
    ran; 0.33 prefers :data:`CPU_BASE_BLOCK` through the backends.
    """
    if view.device_type == "cpu":
        if line == "0.33":
            return _preferred_block(backends, line, CPU_BASE_BLOCK)
        return before if before is not None else CPU_BASE_BLOCK
    return _preferred_block(backends, line)


def kernel_alignment(
    vllm_config: Any, backends: Sequence[Any], line: str, view: EngineView, before: int | None = None
) -> int:
    """The multiple every aligned block size is made of, as ``_align_hybrid_block_size`` takes it:
    ``max(smallest kernel block of the first backend, the phase-1 block size)`` (the platform's
    own phase 1, :func:`phase_one_block`; ``before``: ``cache_config.block_size`` before the
    platform's method ran), at least 128 for MLA; after 0.28 also a multiple of every backend's
    smallest kernel block and, in ``align`` mode, of the Mamba prefill checkpoint alignment. A
    documented equivalent of vLLM's private computation: where it differs from vLLM's, the
    consistency check of :func:`align_engine_start` declines."""
    with _current(vllm_config):
        alignment = max(_min_kernel(backends[0]), phase_one_block(backends, line, view, before))
        if _attr(vllm_config, "model_config.use_mla", False):
            alignment = max(alignment, MLA_HYBRID_BLOCK)
        if line != "0.28":
            alignment = math.lcm(alignment, *(_min_kernel(b) for b in backends))
            if _attr(vllm_config, "cache_config.mamba_cache_mode") == "align":
                alignment = math.lcm(alignment, view.checkpoint_alignment(vllm_config) or 1)
    return alignment


def check_kernels(vllm_config: Any, backends: Sequence[Any], blocks: Sequence[int]) -> None:
    """Every backend supports every block size (``supports_block_size``, vLLM's own test).

    :raises Declined: naming the backend and the size it rejects.
    """
    with _current(vllm_config):
        for block in sorted(set(blocks)):
            for backend in backends:
                if not backend.supports_block_size(block):
                    name = backend.get_name() if hasattr(backend, "get_name") else backend.__name__
                    raise Declined(
                        f"block size {block} is not supported by attention backend {name} "
                        f"(kernel block sizes {kernel_sizes(backend)})"
                    )


# -- kvrules' choice -------------------------------------------------------------------------
def _build(model: EngineModel, strategies: str | list[str], planner: Planner) -> HFModel:
    try:
        return build_hf_model(
            model.target,
            model.draft,
            model.options,
            strategies=strategies,
            plugin_manager=planner.plugin_manager,
        )
    except KVRulesError as exc:
        raise Declined(f"kvrules cannot build this model from vLLM's configs: {exc}") from None


def _one(values: set[int | None], what: str) -> int | None:
    if len(values) > 1:
        raise Declined(f"the layers need different {what}s {sorted(map(str, values))}; vLLM has one")
    return next(iter(values), None)


def values_of(specs: Mapping[str, KVCacheSpec], followers: Sequence[str]) -> BlockValues:
    """The three values that ``specs`` imply: the smallest block of the ``followers`` (attention
    layers that take the cache block size) and the Mamba layers' common block and padded page.

    :raises Declined: Mamba layers that disagree.
    """
    mamba = [s for s in specs.values() if isinstance(s, MambaSpec)]
    padded = {s.page_size_bytes if s.page_size_bytes != s.real_page_size_bytes else None for s in mamba}
    return BlockValues(
        min(specs[n].block_size for n in followers),
        _one({s.block_size for s in mamba}, "Mamba block size"),
        _one(padded, "Mamba padded page"),
    )


def followers(specs: Mapping[str, KVCacheSpec], block_size: int) -> list[str]:
    """The attention layers at the cache block size ``block_size`` (vLLM builds them from it)."""
    return [n for n, s in specs.items() if isinstance(s, AttentionSpec) and s.block_size == block_size]


def express(
    specs: Mapping[str, KVCacheSpec], names: Sequence[str], values: BlockValues, mode: str
) -> dict[str, KVCacheSpec]:
    """The specs vLLM builds from ``values``: ``specs`` (vLLM's own choice) with the followers at
    ``values.block_size`` and the Mamba layers at its block (``align`` mode) and padded page."""
    out = dict(specs)
    for name in names:
        out[name] = specs[name].evolve(block_size=values.block_size)
    for name, spec in specs.items():
        if isinstance(spec, MambaSpec):
            changes: dict[str, Any] = {"page_size_padded": values.mamba_page_size_padded}
            if mode == "align" and values.mamba_block_size is not None:
                changes["block_size"] = values.mamba_block_size
            out[name] = spec.evolve(**changes)
    return out


def _unified(planner: Planner, specs: Mapping[str, KVCacheSpec]) -> dict[str, tuple[int, int]]:
    try:
        result = planner.unify(specs)
    except KVRulesError as exc:
        raise Declined(f"the active set cannot unify the pages: {exc}") from None
    return {n: (s.block_size, s.page_size_bytes) for n, s in result.specs.items()}


def check_expressible(
    planner: Planner, expressed: Mapping[str, KVCacheSpec], chosen: Mapping[str, KVCacheSpec]
) -> None:
    """The specs vLLM will build, unified as the builder will, equal kvrules' (block and page).

    :raises Declined: naming the first layer that differs.
    """
    mine, theirs = _unified(planner, chosen), _unified(planner, expressed)
    for name, want in mine.items():
        got = theirs.get(name)
        if got != want:
            raise Declined(
                f"layer {name!r} would get block {got[0] if got else None} / page {got[1] if got else None} "
                f"from the three cache values, but kvrules chose block {want[0]} / page {want[1]}: "
                "per-layer block sizes beyond what block-scale reaches"
            )


def _effective_page(values: BlockValues, real: int | None) -> int | None:
    """The page Mamba layers get: the padded page, else their own."""
    return values.mamba_page_size_padded if values.mamba_page_size_padded is not None else real


def agree(a: BlockValues, b: BlockValues, mode: str, mamba_real: int | None) -> bool:
    """Whether ``a`` and ``b`` build the same specs: block size, Mamba page, Mamba block (``align``)."""
    same = a.block_size == b.block_size and _effective_page(a, mamba_real) == _effective_page(b, mamba_real)
    return same and (mode != "align" or a.mamba_block_size == b.mamba_block_size)


def check_reading(ours: BlockValues, theirs: BlockValues, mode: str, mamba_real: int | None) -> None:
    """kvrules' reading of vLLM's own rule (the line preset's ``hybrid-align``) lands on the values
    vLLM chose: the block size, the Mamba page and, in ``align`` mode, the Mamba block.

    :raises Declined: it does not (kvrules misreads this model or these backends).
    """
    if not agree(ours, theirs, mode, mamba_real):
        raise Declined(
            f"kvrules' reading of vLLM's rule gives {ours.as_dict()} but vLLM chose {theirs.as_dict()}; "
            "kvrules reads this model differently from vLLM"
        )


def extra_aligners(planner: Planner, line: str) -> list[str]:
    """The active aligners that vLLM's line does not have (its preset's are vLLM's own rule)."""
    own = set(BUILTIN_PRESETS[LINE_PRESETS[line]])
    return [r.name for r in planner.strategies.rules("align") if r.name not in own]


def _applied_aligner(model: HFModel) -> tuple[str, str]:
    applied = (d for d in model.decisions if d.stage == STAGE and d.outcome == "applied" and d.layer is None)
    return next(((d.rule, d.reason) for d in applied), (RULE, "no aligner applied"))


@dataclass(frozen=True)
class Choice:
    """kvrules' engine-start choice: the values, the aligner that made it and why."""

    values: BlockValues
    vllm: BlockValues
    aligner: str
    reason: str


@dataclass(frozen=True)
class VllmSide:
    """vLLM's own choice as kvrules reproduces it (the line preset's specs).

    :ivar specs: every layer's spec at vLLM's values.
    :ivar followers: the attention layers at vLLM's cache block size.
    :ivar mamba_page: the largest unpadded Mamba page (``None`` without Mamba layers).
    """

    specs: dict[str, KVCacheSpec]
    followers: list[str]
    mamba_page: int | None


def reproduce_vllm(model: EngineModel, planner: Planner, line: str, theirs: BlockValues) -> VllmSide:
    """The line preset's specs for ``model``, checked to land on vLLM's values ``theirs``.

    :raises Declined: they do not (kvrules reads this model differently from vLLM).
    """
    specs = _build(model, LINE_PRESETS[line], planner).specs
    names = followers(specs, theirs.block_size)
    real = max((s.real_page_size_bytes for s in specs.values() if isinstance(s, MambaSpec)), default=None)
    if not names:
        blocks = sorted({s.block_size for s in specs.values() if isinstance(s, AttentionSpec)})
        raise Declined(
            f"kvrules' reading of vLLM's rule puts the attention layers at blocks {blocks}, but vLLM "
            f"chose {theirs.block_size}; kvrules reads this model differently from vLLM"
        )
    check_reading(values_of(specs, names), theirs, model.options.mamba_cache_mode, real)
    return VllmSide(specs, names, real)


def choose(
    vllm_config: Any, planner: Planner, line: str, view: EngineView, before: BlockValues | None = None
) -> Choice:
    """kvrules' three values for ``vllm_config`` after vLLM's own method ran (module docstring;
    ``before``: the values before it ran).

    :raises Declined: where kvrules' choice cannot be expressed or checked.
    """
    backends = view.backends(vllm_config)
    if not backends:
        raise Declined("the model has no attention backend; there is no block size to choose")
    base = before.block_size if before is not None else None
    model = read_engine_model(vllm_config, kernel_alignment(vllm_config, backends, line, view, base))
    mode, theirs = model.options.mamba_cache_mode, vllm_values(vllm_config)
    side = reproduce_vllm(model, planner, line, theirs)
    built = _build(model, planner.strategies.names(), planner)
    chosen = built.specs
    values = values_of(chosen, side.followers)
    aligner, reason = _applied_aligner(built)
    if agree(values, theirs, mode, side.mamba_page) or aligner not in extra_aligners(planner, line):
        raise Declined(f"kvrules' choice is vLLM's ({aligner}: {reason})")
    check_expressible(planner, express(side.specs, side.followers, values, mode), chosen)
    check_kernels(vllm_config, backends, [values.block_size, *(chosen[n].block_size for n in side.followers)])
    return Choice(values, theirs, aligner, reason)


def apply(vllm_config: Any, choice: Choice) -> None:
    """Write ``choice.values`` into ``vllm_config.cache_config`` (the Mamba block in ``align`` mode)."""
    cache = vllm_config.cache_config
    cache.block_size = choice.values.block_size
    if _attr(cache, "mamba_cache_mode") == "align":
        cache.mamba_block_size = choice.values.mamba_block_size
    cache.mamba_page_size_padded = choice.values.mamba_page_size_padded


# -- the decision ----------------------------------------------------------------------------
def _record(decision: Decision) -> Decision:
    global _last
    with _lock:
        _last = decision
    logs.info("kvrules.vllm.engine_start", **decision.to_dict())
    level = logging.INFO if decision.outcome != "failed" else logging.WARNING
    vllm_log.log(level, "kvrules engine start (%s, %s): %s", decision.rule, decision.outcome, decision.reason)
    return decision


def _stands(outcome: str, why: str) -> Decision:
    """Record that vLLM's block sizes stand (``outcome``: ``declined`` or ``failed``), and why."""
    return _record(Decision(STAGE, RULE, outcome, None, f"{why}; vLLM's block sizes stand."))


def last_decision() -> Decision | None:
    """The decision of the latest engine-start alignment in this process (``None``: none yet)."""
    with _lock:
        return _last


def align_engine_start(
    vllm_config: Any,
    planner: Planner,
    line: str,
    view: EngineView | None = None,
    *,
    before: BlockValues | None = None,
) -> Decision:
    """Set kvrules' block sizes on ``vllm_config`` after vLLM's own method ran, or decline.

    :param before: the cache values before vLLM's method ran (the CPU platform's rule starts from
        them, :func:`phase_one_block`).

    Never raises: a declined or failed alignment leaves vLLM's values and says why.
    """
    resolved = view or real_view()
    if not extra_aligners(planner, line):
        return _stands(
            "declined", f"the active set {planner.strategies.name!r} has no aligner beyond vLLM's own"
        )
    try:
        choice = choose(vllm_config, planner, line, resolved, before)
    except Declined as why:
        return _stands("declined", str(why))
    except Exception as exc:  # never stop an engine vLLM would start: record and keep vLLM's choice
        return _stands("failed", f"{type(exc).__name__}: {exc}")
    apply(vllm_config, choice)
    return _record(
        Decision(
            STAGE,
            choice.aligner,
            "applied",
            None,
            f"vLLM engine start: cache values {choice.vllm.as_dict()} -> {choice.values.as_dict()} ({choice.reason})",
            details={"vllm": choice.vllm.as_dict(), "chosen": choice.values.as_dict()},
        )
    )


# -- vLLM's backends, the real way -------------------------------------------------------------
def _real_backends(vllm_config: Any) -> list[Any]:
    """The model's non-SSM attention backends in layer order (vLLM's ``_find_non_ssm_backends``)."""
    config = importlib.import_module("vllm.config.vllm")
    base = importlib.import_module("vllm.model_executor.layers.attention_layer_base").AttentionLayerBase
    out: list[Any] = []
    for layer in config.get_layers_from_vllm_config(vllm_config, base).values():
        backend = layer.get_attn_backend()
        if not backend.is_ssm() and backend not in out:
            out.append(backend)
    return out


def _real_checkpoint_alignment(vllm_config: Any) -> int | None:
    """vLLM 0.33's ``get_mamba_prefill_checkpoint_alignment`` (``None`` where it does not exist)."""
    try:
        module = importlib.import_module("vllm.model_executor.layers.mamba.abstract")
    except ImportError:
        return None
    find = getattr(module, "get_mamba_prefill_checkpoint_alignment", None)
    return None if find is None else find(vllm_config)


def real_view(device_type: str | None = None) -> EngineView:
    """The installed vLLM's backends (imported when called), on a platform of ``device_type``."""
    return EngineView(_real_backends, _real_checkpoint_alignment, device_type)


# -- wrapping --------------------------------------------------------------------------------
def _values_or_none(vllm_config: Any) -> BlockValues | None:
    """:func:`vllm_values`, or ``None`` where ``vllm_config`` has no readable cache values."""
    try:
        return vllm_values(vllm_config)
    except (AttributeError, TypeError, ValueError):
        return None


def _raw(platform_cls: type) -> Any:
    """The hook's descriptor as ``platform_cls`` resolves it (``None``: no class has one)."""
    for klass in platform_cls.__mro__:
        if HOOK_NAME in klass.__dict__:
            return klass.__dict__[HOOK_NAME]
    return None


def is_kvrules_hook(raw: Any) -> bool:
    """Whether ``raw`` (a hook descriptor) is kvrules' wrapper or the mixin's method."""
    return bool(getattr(getattr(raw, "__func__", raw), "_kvrules_engine_start", False))


def _wrapper(platform_cls: type, original: Any) -> classmethod[Any, Any, None]:
    def update_block_size_for_backend(cls: type, vllm_config: Any) -> None:
        before = _values_or_none(vllm_config)
        original.__get__(None, cls)(vllm_config)
        entry = _wrapped.get(platform_cls)
        if entry is not None:
            view = entry.view or real_view(getattr(cls, "device_type", None))
            align_engine_start(vllm_config, entry.planner(), entry.line, view, before=before)

    update_block_size_for_backend._kvrules_engine_start = True  # type: ignore[attr-defined]
    update_block_size_for_backend.__doc__ = getattr(original, "__doc__", None)
    return classmethod(update_block_size_for_backend)


def wrap_platform(
    platform_cls: type, planner: PlannerSource, line: str, view: EngineView | None = None
) -> bool:
    """Wrap ``platform_cls.update_block_size_for_backend`` (see the module docstring).

    Idempotent: a class already wrapped (or whose hook is the mixin's) is not wrapped again, only
    told the new ``planner``. Returns whether the class's hook is now kvrules'. Silent: the
    callers' events say what they wrapped (``kvrules.vllm.installed``, ``kvrules.vllm.platform_hook``).
    :param planner: called at every engine start: the planner of the active set.
    """
    with _lock:
        entry = _wrapped.get(platform_cls)
        if entry is not None:
            entry.planner, entry.line, entry.view = planner, line, view
            return True
        raw = _raw(platform_cls)
        if raw is None or is_kvrules_hook(raw):
            return raw is not None
        _wrapped[platform_cls] = _Wrapped(platform_cls.__dict__.get(HOOK_NAME), planner, line, view)
        setattr(platform_cls, HOOK_NAME, _wrapper(platform_cls, raw))
    return True


def unwrap_platform(platform_cls: type) -> None:
    """Give ``platform_cls`` its own hook back (a no-op when it is not wrapped)."""
    with _lock:
        entry = _wrapped.pop(platform_cls, None)
        if entry is None:
            return
        if entry.saved is None:
            delattr(platform_cls, HOOK_NAME)
        else:
            setattr(platform_cls, HOOK_NAME, entry.saved)


def is_wrapped(platform_cls: type) -> bool:
    """Whether :func:`wrap_platform` wrapped ``platform_cls``."""
    with _lock:
        return platform_cls in _wrapped


__all__ = [
    "HOOK_NAME",
    "BlockValues",
    "Choice",
    "VllmSide",
    "Declined",
    "EngineModel",
    "EngineView",
    "CPU_BASE_BLOCK",
    "align_engine_start",
    "check_expressible",
    "check_kernels",
    "choose",
    "express",
    "extra_aligners",
    "is_kvrules_hook",
    "is_wrapped",
    "kernel_alignment",
    "phase_one_block",
    "last_decision",
    "read_engine_model",
    "real_view",
    "reproduce_vllm",
    "unwrap_platform",
    "values_of",
    "vllm_values",
    "wrap_platform",
]
