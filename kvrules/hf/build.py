"""From a Hugging Face config (+ a draft) to per-layer specs and a model file: stages ``arch`` and ``align``.

1. ``arch``: the registered architectures are asked which one builds the target config; it
   builds the target's specs with settings resolved from :class:`HFOptions`.
2. The draft: another config (its layers prefixed ``draft.``, its own KV dtype when
   ``draft_kv_cache_dtype`` is set, the target's cache block size) or ``"mtp"`` (the target's
   ``num_nextn_predict_layers`` multi-token-prediction layers).
3. ``align``: the active aligners choose block sizes (``hybrid-align`` is vLLM's rule).

Every model is built from a tracked copy of its config: a cache field the architecture never read
fails the build (:func:`kvrules.hf.select.check_no_silent_drop`). The applied ``arch`` decision
carries ``details`` ``{"architecture", "generic", "assumptions"}``; the MTP one
``{"mtp_layers", "source"}``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvrules.decisions import Decision, DecisionLog
from kvrules.errors import ModelFileError
from kvrules.hf.align import AlignContext, align_specs
from kvrules.hf.architecture import Architecture
from kvrules.hf.backends import AUTO, BACKENDS
from kvrules.hf.config import MAX_HF_LAYERS, HFConfig, check_reader
from kvrules.hf.options import KV_CACHE_DTYPES, HFOptions
from kvrules.hf.select import (
    MTP_KEYS,
    STAGE,
    check_no_silent_drop,
    reads,
    record_built,
    select_architecture,
    tracked,
)
from kvrules.hf.settings import BuildSettings, resolve_settings
from kvrules.model import ModelFile
from kvrules.pipeline import grouping_with
from kvrules.pipeline.aligned import AlignedSpecs
from kvrules.plugin.ask import Asker
from kvrules.plugin.manager import KVRulesPluginManager, default_manager
from kvrules.plugin.presets import StrategySet, StrategySpec, resolve_strategies
from kvrules.plugin.rules import Check
from kvrules.specs import KVCacheSpec

DRAFT_PREFIX = "draft."
"""Prefix of the draft model's layer names (one of ``EngineConfig.draft_layer_prefixes``)."""

MTP = "mtp"
"""``draft="mtp"``: the target's own multi-token-prediction layers are the draft."""

ConfigInput = str | Path | Mapping[str, Any] | HFConfig


def as_config(value: ConfigInput, role: str = "target", *, reader: str = "auto") -> HFConfig:
    """An :class:`HFConfig` from a path (file or directory) or a decoded dict, read by ``reader``
    (:data:`~kvrules.hf.config.READERS`); an ``HFConfig`` as it is (its own reader stands)."""
    if isinstance(value, HFConfig):
        return value
    if isinstance(value, Mapping):
        return HFConfig(dict(value), f"<{role} config>", reader=reader)
    return HFConfig.load(value, reader=reader)


@dataclass(frozen=True)
class BuiltModel:
    """One model (target or draft) as built: its config, architecture, settings and layer names."""

    config: HFConfig
    architecture: str
    settings: BuildSettings
    layers: tuple[str, ...]

    @property
    def title(self) -> str:
        """The config's class name (or model type)."""
        return self.config.title


@dataclass(frozen=True)
class HFModel:
    """Specs built from a Hugging Face config, with the decisions that built them.

    :ivar specs: every layer's spec (target, then draft), after alignment (as
        :class:`~kvrules.pipeline.aligned.AlignedSpecs`: :attr:`strategy_set` aligned them).
    :ivar decisions: the ``arch`` and ``align`` decisions, in order.
    :ivar target: the target model as built.
    :ivar draft: the draft model (``None`` without one); for MTP its config is the target's.
    :ivar draft_kind: ``"model"``, ``"mtp"`` or ``None``.
    :ivar engine: engine settings implied by the model (``max_model_len`` from
        ``max_position_embeddings``, vLLM's per-model defaults).
    :ivar options: the options used.
    """

    specs: dict[str, KVCacheSpec]
    decisions: tuple[Decision, ...]
    target: BuiltModel
    draft: BuiltModel | None
    draft_kind: str | None
    engine: dict[str, Any]
    options: HFOptions

    @property
    def block_size(self) -> int:
        """The cache block size after alignment (the first attention layer's, else the configured one)."""
        for spec in self.specs.values():
            if spec.type_name != "mamba":
                return spec.block_size
        return self.target.settings.block_size

    def description(self) -> str:
        """One line: model, draft, KV dtype, TP, block size."""
        t = self.target
        text = f"{t.title} ({t.architecture}, {len(t.layers)} layers)"
        if self.draft is not None:
            what = "MTP" if self.draft_kind == MTP else f"{self.draft.title} ({self.draft.architecture})"
            text += f" + draft {what}, {len(self.draft.layers)} layers"
        s = t.settings
        text += f"; kv {s.kv.option}, TP {s.tp}, block {self.block_size}"
        if s.num_speculative_tokens:
            text += f", {s.num_speculative_tokens} speculative tokens"
        return text

    def to_dict(self) -> dict[str, Any]:
        """The model-file form (``description``, ``layers``, ``engine``), as ``kvrules plan FILE`` reads it."""
        return {
            "description": self.description(),
            "layers": {name: spec.to_dict() for name, spec in self.specs.items()},
            "engine": dict(self.engine),
        }

    @property
    def strategy_set(self) -> str | None:
        """The strategy set whose aligners chose the block sizes (``None``: specs made otherwise)."""
        return self.specs.alignment.strategy_set if isinstance(self.specs, AlignedSpecs) else None

    def to_model_file(self, available_memory: list[int] | None = None) -> HFModelFile:
        """A :class:`~kvrules.model.ModelFile` the planner and CLI can plan (its specs keep the
        alignment record, so planning them with another set warns)."""
        specs = self.specs
        return HFModelFile(
            source=self.target.config.source,
            specs=AlignedSpecs(specs, specs.alignment) if isinstance(specs, AlignedSpecs) else dict(specs),
            workers=None,
            engine=dict(self.engine),
            available_memory=available_memory,
            description=self.description(),
            hf=self,
        )


@dataclass
class HFModelFile(ModelFile):
    """A model file built from a Hugging Face config; ``hf`` keeps how (decisions included)."""

    hf: HFModel | None = field(default=None)

    def worker_specs(self) -> list[dict[str, KVCacheSpec]]:
        """As :meth:`ModelFile.worker_specs`; each worker's specs keep the alignment record."""
        workers = super().worker_specs()
        if not isinstance(self.specs, AlignedSpecs):
            return workers
        alignment = self.specs.alignment
        return [w if isinstance(w, AlignedSpecs) else AlignedSpecs(w, alignment) for w in workers]


def _engine_kv_dtype(config: HFConfig, arch: Architecture, ask: Asker, option: str) -> tuple[str, str]:
    """The KV dtype the engine uses for ``option`` (an architecture's optional
    ``engine_kv_cache_dtype(config, option) -> (dtype, why)``; ``(option, "")`` without one).

    :raises PluginError: the answer is not a known ``--kv-cache-dtype`` and a reason.
    """
    if not callable(getattr(arch, "engine_kv_cache_dtype", None)):
        return option, ""
    answer = ask.call("architecture", arch, "engine_kv_cache_dtype", config, option)
    ok = isinstance(answer, tuple) and len(answer) == 2 and all(isinstance(a, str) for a in answer)
    if not ok or answer[0] not in KV_CACHE_DTYPES:
        raise ask.fault(
            "architecture",
            arch,
            f"answered engine_kv_cache_dtype() with {answer!r}; it must be "
            "(a --kv-cache-dtype value, a reason)",
        )
    return answer[0], answer[1]


def _settings(
    config: HFConfig, arch: Architecture, options: HFOptions, ask: Asker, kv: str | None = None
) -> BuildSettings:
    mla = bool(ask.call("architecture", arch, "uses_mla", config))
    ssm = ask.call("architecture", arch, "mamba_ssm_dtype_default", config)
    option = kv or options.kv_cache_dtype
    engine_kv, why = _engine_kv_dtype(config, arch, ask, option)
    settings = resolve_settings(
        config, options, mla=mla, ssm_dtype_default=str(ssm), kv_cache_dtype=engine_kv
    )
    if engine_kv == option:
        return settings
    note = f"kv cache dtype {option} served as {engine_kv} ({why})"
    return dataclasses.replace(settings, notes=(*settings.notes, note))


def _prefixed(
    specs: Mapping[str, KVCacheSpec], taken: Mapping[str, KVCacheSpec], source: str
) -> dict[str, KVCacheSpec]:
    out = {DRAFT_PREFIX + name: spec for name, spec in specs.items()}
    clash = [n for n in out if n in taken]
    if clash:
        raise ModelFileError(f"{source}: draft layer name {clash[0]!r} is also a target layer name")
    return out


def _draft_options(options: HFOptions, mla: bool) -> HFOptions:
    """The draft reads the target's options, but keeps a backend of its own attention kind."""
    backend = BACKENDS.get(options.attention_backend)
    if backend is not None and backend.mla != mla:
        return options.replace(attention_backend=AUTO, block_size=None)
    return options


@dataclass
class _Build:
    """What one build has made so far (the target first, then the draft)."""

    options: HFOptions
    ask: Asker
    config: HFConfig
    arch: Architecture
    settings: BuildSettings
    specs: dict[str, KVCacheSpec]
    engine: dict[str, Any]
    draft: BuiltModel | None = None
    draft_specs: dict[str, KVCacheSpec] = field(default_factory=dict)
    draft_kind: str | None = None


def _selected(cfg: HFConfig, ask: Asker, role: str) -> tuple[HFConfig, Architecture, Check]:
    """A :func:`tracked` copy of ``cfg`` (no field read yet), the architecture that builds it, its answer."""
    cfg.check_layer_counts()
    cfg = tracked(cfg)
    arch, check = select_architecture(cfg, ask, role=role)
    reads(cfg).clear()  # what the architectures asked to decide is not what the chosen one built from
    return cfg, arch, check


def _assumptions(cfg: HFConfig, arch: Architecture, ask: Asker) -> list[str]:
    """The architecture's ``assumptions(config)`` sentences (``[]`` when it has no such method).

    :raises PluginError: the answer is not a list or tuple of strings.
    """
    if not callable(getattr(arch, "assumptions", None)):
        return []
    answer = ask.call("architecture", arch, "assumptions", cfg)
    if not isinstance(answer, (list, tuple)) or not all(isinstance(a, str) for a in answer):
        raise ask.fault(
            "architecture", arch, f"answered assumptions() with {answer!r}; it must be a list of strings"
        )
    return list(answer)


def _built_details(arch: Architecture, assumed: list[str]) -> dict[str, Any]:
    """The applied ``arch`` decision's details: the architecture, whether generic, what it assumed."""
    return {
        "architecture": arch.name,
        "generic": bool(getattr(arch, "generic", False)),
        "assumptions": assumed,
    }


def _build_target(cfg: HFConfig, options: HFOptions, ask: Asker) -> _Build:
    cfg, arch, check = _selected(cfg, ask, "target")
    settings = _settings(cfg, arch, options, ask)
    specs = ask.build(arch, cfg, settings)
    engine: dict[str, Any] = {}
    if settings.max_model_len is not None:
        engine["max_model_len"] = settings.max_model_len
    arch_engine, engine_note = ask.call("architecture", arch, "engine_settings", cfg, settings)
    engine.update(arch_engine)
    assumed = _assumptions(cfg, arch, ask)
    notes = [*settings.notes, f"tensor_parallel_size {settings.tp}"]
    if engine_note:
        notes.append(f"{engine_note}: {arch_engine}")
    if assumed:
        notes.append("assumed: " + "; ".join(assumed))
    record_built(
        cfg,
        arch,
        check,
        specs,
        ask,
        role="target",
        notes="; ".join(notes),
        details=_built_details(arch, assumed),
    )
    return _Build(options, ask, cfg, arch, settings, specs, engine)


def _mtp_count(cfg: HFConfig, arch: Architecture, ask: Asker) -> tuple[int, str, str]:
    """The architecture's MTP layer count, the field it came from (the first :data:`MTP_KEYS`
    field it read that has a value; ``"default"`` when none), and a phrase saying so."""
    before = set(reads(cfg))
    reads(cfg).clear()
    count = int(ask.call("architecture", arch, "mtp_layer_count", cfg))
    asked = [k for k in MTP_KEYS if k in reads(cfg)]
    key = next((k for k in asked if cfg.has(k)), None)
    phrase = (
        cfg.describe_value(key) if key else f"no {' / '.join(asked or MTP_KEYS)}: the {arch.name} default"
    )
    reads(cfg).update(before | set(asked))
    return count, cfg.where(key) if key else "default", phrase


def _add_mtp_draft(build: _Build) -> None:
    cfg, arch, ask, options = build.config, build.arch, build.ask, build.options
    count, source, phrase = _mtp_count(cfg, arch, ask)
    if count > MAX_HF_LAYERS:  # the config's own counts are bounded: the architecture made this up
        raise ask.fault(
            "architecture",
            arch,
            f"answered mtp_layer_count() with {count:,} for {cfg.source}; it must be at most "
            f"{MAX_HF_LAYERS:,} (kvrules.hf.config.MAX_HF_LAYERS)",
        )
    if count <= 0:
        check_no_silent_drop(cfg, arch, role="target", mtp=True)  # a count under a key it did not read
        raise ModelFileError(
            f"{cfg.source}: draft 'mtp' needs multi-token-prediction layers, but the config has no "
            f"{cfg.where('num_nextn_predict_layers')!r} > 0 ({phrase}: {count}); give the draft model's "
            "config instead"
        )
    d_settings = build.settings
    if options.draft_kv_cache_dtype is not None:
        d_settings = _settings(cfg, arch, options, ask, kv=options.draft_kv_cache_dtype)
    built = ask.build(arch, cfg, d_settings, "mtp_specs", count)
    build.draft_specs = _prefixed(built, build.specs, cfg.source)
    ask.record(
        STAGE,
        arch.name,
        "applied",
        f"draft: {count} multi-token-prediction layer(s) of {cfg.title} "
        f"({phrase}), kv cache {d_settings.kv.describe()}.",
        details={"mtp_layers": count, "source": source},
    )
    k = options.num_speculative_tokens
    if min(count, k) > 1:
        build.engine["extra_retained_tokens"] = k - 1
        ask.record(
            STAGE,
            arch.name,
            "applied",
            f"multi-module MTP with {k} speculative tokens: sliding-window layers keep {k - 1} extra "
            "tokens (EngineConfig.extra_retained_tokens, as vLLM 0.28).",
        )
    build.draft = BuiltModel(cfg, arch.name, d_settings, tuple(build.draft_specs))
    build.draft_kind = MTP


def _add_model_draft(build: _Build, draft: ConfigInput, reader: str) -> None:
    ask, settings = build.ask, build.settings
    dcfg, darch, dcheck = _selected(as_config(draft, "draft", reader=reader), ask, "draft")
    dmla = bool(ask.call("architecture", darch, "uses_mla", dcfg))
    d_settings = _settings(
        dcfg, darch, _draft_options(build.options, dmla), ask, kv=build.options.draft_kv_cache_dtype
    )
    d_settings = dataclasses.replace(
        d_settings,
        block_size=settings.block_size,
        user_block_size=settings.user_block_size,
        mamba_block_size=settings.mamba_block_size,
        max_model_len=settings.max_model_len,
    )
    build.draft_specs = _prefixed(ask.build(darch, dcfg, d_settings), build.specs, dcfg.source)
    assumed = _assumptions(dcfg, darch, ask)
    check_no_silent_drop(dcfg, darch, role="draft")
    record_built(
        dcfg,
        darch,
        dcheck,
        build.draft_specs,
        ask,
        role="draft",
        notes=f"layers prefixed {DRAFT_PREFIX!r}; kv cache {d_settings.kv.describe()}; "
        f"the target's cache block size {settings.block_size}"
        + ("; assumed: " + "; ".join(assumed) if assumed else ""),
        details=_built_details(darch, assumed),
    )
    build.draft = BuiltModel(dcfg, darch.name, d_settings, tuple(build.draft_specs))
    build.draft_kind = "model"


def _align(build: _Build, strategy_set: StrategySet) -> dict[str, KVCacheSpec]:
    ask = build.ask
    ctx = AlignContext(
        settings=build.settings,
        draft_layers=frozenset(build.draft_specs),
        decisions=ask.decisions,
        registries=ask.registries,
        mamba_chunk_size=ask.call("architecture", build.arch, "mamba_chunk_size", build.config),
        draft_settings=build.draft.settings if build.draft else None,
        group_with=grouping_with(ask.registries),
    )
    return align_specs({**build.specs, **build.draft_specs}, ctx, strategy_set, ask)


def build_hf_model(
    config: ConfigInput,
    draft: ConfigInput | None = None,
    options: HFOptions | None = None,
    *,
    strategies: StrategySpec = None,
    plugin_manager: KVRulesPluginManager | None = None,
    reader: str = "auto",
) -> HFModel:
    """Build every layer's spec from ``config`` (and ``draft``), then align block sizes.

    :param config: the target's ``config.json`` (a path, its directory, a dict or an :class:`HFConfig`).
    :param draft: the draft model's config, ``"mtp"`` for the target's MTP layers, or ``None``.
    :param options: engine options (:class:`HFOptions`); defaults when omitted.
    :param strategies: the strategy set whose ``align`` rules run (as :class:`kvrules.Planner` takes it).
    :param plugin_manager: where architectures and aligners come from
        (:func:`kvrules.default_manager` when omitted).
    :param reader: how a config given as a path or a dict is read (:data:`~kvrules.hf.config.READERS`:
        ``auto``, the built-in reader for every model type it knows, else transformers;
        ``builtin``; ``transformers``); an :class:`HFConfig` keeps its own.
    :raises ModelFileError: unreadable config, missing/invalid field, unknown architecture.
    :raises ConfigError: an option that does not fit the model, or an unknown ``reader``.
    """
    check_reader(reader)
    options = options or HFOptions()
    registries = (plugin_manager or default_manager()).registries
    strategy_set = resolve_strategies(strategies, registries.rules)
    target = as_config(config, "target", reader=reader)
    build = _build_target(target, options, Asker(registries, DecisionLog()))
    mtp = isinstance(draft, str) and draft == MTP
    if mtp:
        _add_mtp_draft(build)
    elif draft is not None:
        _add_model_draft(build, draft, reader)
    check_no_silent_drop(build.config, build.arch, role="target", mtp=mtp)
    aligned = _align(build, strategy_set)
    return HFModel(
        specs=aligned,
        decisions=build.ask.decisions.decisions(),
        target=BuiltModel(build.config, build.arch.name, build.settings, tuple(build.specs)),
        draft=build.draft,
        draft_kind=build.draft_kind,
        engine=build.engine,
        options=options,
    )


def specs_from_hf(
    config: ConfigInput,
    draft: ConfigInput | None = None,
    options: HFOptions | None = None,
    *,
    strategies: StrategySpec = None,
    plugin_manager: KVRulesPluginManager | None = None,
    reader: str = "auto",
) -> tuple[dict[str, KVCacheSpec], tuple[Decision, ...]]:
    """Per-layer specs and the ``arch``/``align`` decisions (see :func:`build_hf_model`)."""
    model = build_hf_model(
        config, draft, options, strategies=strategies, plugin_manager=plugin_manager, reader=reader
    )
    return model.specs, model.decisions


def model_from_hf(
    config: ConfigInput,
    draft: ConfigInput | None = None,
    options: HFOptions | None = None,
    *,
    available_memory: list[int] | None = None,
    strategies: StrategySpec = None,
    plugin_manager: KVRulesPluginManager | None = None,
    reader: str = "auto",
) -> HFModelFile:
    """A model file ready to plan (see :func:`build_hf_model`)."""
    model = build_hf_model(
        config, draft, options, strategies=strategies, plugin_manager=plugin_manager, reader=reader
    )
    return model.to_model_file(available_memory)
