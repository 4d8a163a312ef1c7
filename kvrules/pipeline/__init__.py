"""The planner: merge -> convert -> route -> project -> layout -> capacity (architecture §2)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from kvrules.config import EngineConfig
from kvrules.errors import (
    CapacityError,
    ConfigError,
    GroupingError,
    KVRulesError,
    PluginError,
    SpecError,
    UnificationError,
)
from kvrules.pipeline.capacity import (
    gib,
    largest_fitting_length,
    max_concurrency,
    with_length,
)
from kvrules.pipeline.group import check_groups
from kvrules.pipeline.waste import waste_report
from kvrules.plan import KVCacheGroup, KVCacheTensor, Plan, UnifyResult, WorkerPlan, project_group
from kvrules.plugin.context import PlanContext
from kvrules.plugin.manager import KVRulesPluginManager, default_plugin_manager
from kvrules.plugin.presets import StrategySpec, resolve_strategies
from kvrules.plugin.rules import Converter, Fallback, Layout, Router
from kvrules.specs.base import KVCacheSpec
from kvrules.specs.uniform import UniformTypeKVCacheSpecs

log = structlog.get_logger("kvrules")

SpecsInput = Mapping[str, KVCacheSpec] | Sequence[Mapping[str, KVCacheSpec]]
MemoryInput = int | Sequence[int]


def _rule_call(ctx: PlanContext, rule_name: str, what: str, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except KVRulesError:
        raise
    except Exception as exc:
        raise PluginError(
            f"rule {rule_name!r} ({ctx.provider(rule_name)}) raised {type(exc).__name__} in {what}: {exc}"
        ) from exc


@dataclass
class _WorkerState:
    index: int
    groups: tuple[KVCacheGroup, ...]
    layout: Layout | None
    memory: int
    block_bytes: int


class Planner:
    """Plans KV-cache layouts with a chosen strategy set.

    :param strategies: ``None`` (the default set), a preset name such as ``"vllm"``, or a list
        of rule names (see :func:`kvrules.strategies.resolve_strategies`).
    :param plugin_manager: a manager from :func:`kvrules.get_plugin_manager`; the process-wide
        default when omitted.
    """

    def __init__(
        self, strategies: StrategySpec = None, *, plugin_manager: KVRulesPluginManager | None = None
    ) -> None:
        self.plugin_manager = plugin_manager or default_plugin_manager()
        self.registries = self.plugin_manager.registries
        self.strategies = resolve_strategies(strategies, self.registries.rules)

    def _context(self, config: EngineConfig) -> PlanContext:
        return PlanContext(config=config, strategies=self.strategies, registries=self.registries)

    # -- public API -------------------------------------------------------------------------
    def unify(self, specs: Mapping[str, KVCacheSpec], config: EngineConfig | None = None) -> UnifyResult:
        """Unify page sizes only (vLLM's ``unify_kv_cache_spec_page_size``).

        Returns ``specs`` itself when all pages are already equal.
        """
        _check_specs(specs, 0)
        ctx = self._context(config or EngineConfig(max_model_len=1))
        unified = ctx.unify(specs)
        return UnifyResult(specs=unified, decisions=tuple(ctx.decisions.items))

    def plan(
        self,
        specs: SpecsInput,
        available_memory: MemoryInput,
        config: EngineConfig | None = None,
    ) -> Plan:
        """Plan one worker (a spec mapping) or several (a list of mappings, one per stage).

        :param available_memory: bytes for the KV cache, one int or one per worker.
        :param config: engine settings; required (``max_model_len``).
        :raises KVRulesError: a subclass naming what is wrong and how to fix it.
        """
        if config is None:
            raise ConfigError("plan() needs config=EngineConfig(max_model_len=...)")
        if not isinstance(config, EngineConfig):
            raise ConfigError(f"config must be an EngineConfig, got {type(config).__name__}")
        workers_specs = _as_worker_list(specs)
        memories = _as_memory_list(available_memory, len(workers_specs))
        ctx = self._context(config)
        ctx.workers = tuple(frozenset(ws) for ws in workers_specs)
        ctx.memory = tuple(memories)
        merged = self._merge(workers_specs, ctx)
        converted = self._convert(merged, ctx)
        route_name, groups = self._route(converted, ctx)
        final_specs = dict(converted)
        if ctx.unified is not None:
            final_specs.update(ctx.unified)
        for group in groups:
            if isinstance(group.spec, UniformTypeKVCacheSpecs):
                final_specs.update(group.spec.kv_cache_specs)
        states = [
            self._prepare_worker(i, groups, ws, mem, ctx)
            for i, (ws, mem) in enumerate(zip(workers_specs, memories, strict=True))
        ]
        length = self._check_memory(states, groups, ctx)
        config = ctx.config if length == config.max_model_len else with_length(config, length)
        workers = self._layout(states, ctx)
        agreed = workers[0].num_blocks if workers else 1
        concurrency = max_concurrency(groups, agreed, config)
        capacity = 0 if math.isinf(concurrency) else math.floor(concurrency * length)
        waste = waste_report(
            [(s.groups, s.block_bytes, s.memory) for s in states if s.layout is not None], groups, config
        )
        ctx.decisions.record(
            "capacity",
            "capacity",
            "applied",
            f"{agreed} blocks hold {concurrency:.4g} requests of {length} tokens ({capacity} tokens); "
            f"layout efficiency {waste.efficiency:.1%}, {waste.padding_slots} padding slots.",
        )
        plan = Plan(
            groups=tuple(groups),
            workers=tuple(workers),
            num_blocks=agreed,
            specs=final_specs,
            decisions=tuple(ctx.decisions.items),
            max_concurrency=concurrency,
            capacity_tokens=capacity,
            max_model_len=length,
            config=config,
            strategy_set=self.strategies.name,
            rules=tuple(self.strategies.names()),
            route=route_name,
            waste=waste,
        )
        log.info(
            "kvrules.plan.finished",
            layers=len(final_specs),
            groups=len(groups),
            workers=len(workers),
            num_blocks=agreed,
            max_concurrency=None if math.isinf(concurrency) else round(concurrency, 4),
            capacity_tokens=capacity,
            max_model_len=length,
            route=route_name,
            strategy_set=self.strategies.name,
        )
        return plan

    # -- stages -----------------------------------------------------------------------------
    def _merge(
        self, workers_specs: list[Mapping[str, KVCacheSpec]], ctx: PlanContext
    ) -> Mapping[str, KVCacheSpec]:
        for index, ws in enumerate(workers_specs):
            _check_specs(ws, index)
        if len(workers_specs) == 1:
            return workers_specs[0]
        merged: dict[str, KVCacheSpec] = {}
        owner: dict[str, int] = {}
        for index, ws in enumerate(workers_specs):
            for name, spec in ws.items():
                seen = merged.get(name)
                if seen is None:
                    merged[name] = spec
                    owner[name] = index
                elif seen != spec:
                    raise GroupingError(
                        f"layer {name!r} has different specs on worker {owner[name]} ({seen.to_dict()}) "
                        f"and worker {index} ({spec.to_dict()}); every worker must report the same spec "
                        "for a layer it shares"
                    )
        ctx.decisions.record(
            "merge",
            "merge",
            "applied",
            f"Merged the specs of {len(workers_specs)} workers into {len(merged)} layers.",
        )
        return merged

    def _convert(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Mapping[str, KVCacheSpec]:
        for rule in ctx.strategies.rules("convert"):
            if not isinstance(rule, Converter):
                continue
            check = _rule_call(ctx, rule.name, "check", rule.check, specs, ctx)
            if not check.applies:
                ctx.decisions.record("convert", rule.name, "declined", check.reason)
                continue
            new = _rule_call(ctx, rule.name, "convert", rule.convert, specs, ctx)
            if list(new) != list(specs):
                raise PluginError(
                    f"rule {rule.name!r} ({ctx.provider(rule.name)}) changed the set or order of layers"
                )
            ctx.decisions.record("convert", rule.name, "applied", check.reason)
            specs = new
        return specs

    def _route(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> tuple[str, list[KVCacheGroup]]:
        reasons = []
        for rule in ctx.strategies.rules("router"):
            if not isinstance(rule, Router):
                continue
            check = _rule_call(ctx, rule.name, "check", rule.check, specs, ctx)
            if not check.applies:
                ctx.decisions.record("route", rule.name, "declined", check.reason)
                reasons.append(f"{rule.name}: {check.reason}")
                continue
            ctx.decisions.record("route", rule.name, "applied", check.reason)
            try:
                groups = _rule_call(ctx, rule.name, "route", rule.route, specs, ctx)
            except UnificationError as error:
                name, groups = self._fallback(specs, ctx, error)
                check_groups(groups, specs, f"fallback {name!r}")
                return name, groups
            check_groups(groups, specs, f"router {rule.name!r}")
            return rule.name, groups
        raise GroupingError(
            "no active router accepts this model; asked: "
            f"{'; '.join(reasons) or 'none active'}. Activate a router such as 'unified-page'."
        )

    def _fallback(
        self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext, error: UnificationError
    ) -> tuple[str, list[KVCacheGroup]]:
        ctx.unified = None
        notes = []
        for rule in ctx.strategies.rules("fallback"):
            if not isinstance(rule, Fallback):
                continue
            check = _rule_call(ctx, rule.name, "check", rule.check, specs, ctx)
            if not check.applies:
                ctx.decisions.record("route", rule.name, "declined", check.reason)
                notes.append(f"{rule.name}: {check.reason}")
                continue
            ctx.decisions.record("route", rule.name, "applied", check.reason)
            return rule.name, _rule_call(ctx, rule.name, "route", rule.route, specs, ctx)
        if notes:
            raise UnificationError(f"{error}\nFallbacks declined: {'; '.join(notes)}") from error
        raise error

    def _prepare_worker(
        self,
        index: int,
        groups: list[KVCacheGroup],
        worker_specs: Mapping[str, KVCacheSpec],
        memory: int,
        ctx: PlanContext,
    ) -> _WorkerState:
        projected = tuple(project_group(g, worker_specs) for g in groups)
        if not any(g.layer_names for g in projected):
            ctx.decisions.record(
                "layout", "layout", "declined", f"Worker {index} holds no KV-cache layer; no tensors."
            )
            return _WorkerState(index, projected, None, memory, 0)
        reasons = []
        for rule in ctx.strategies.rules("layout"):
            if not isinstance(rule, Layout):
                continue
            check = _rule_call(ctx, rule.name, "check", rule.check, projected, ctx)
            if not check.applies:
                ctx.decisions.record("layout", rule.name, "declined", f"Worker {index}: {check.reason}")
                reasons.append(f"{rule.name}: {check.reason}")
                continue
            block = _rule_call(ctx, rule.name, "block_bytes", rule.block_bytes, projected)
            if not isinstance(block, int) or block <= 0:
                raise PluginError(
                    f"layout {rule.name!r} ({ctx.provider(rule.name)}) gave {block!r} bytes per block"
                )
            override = ctx.config.num_gpu_blocks_override
            if override is not None:
                ctx.decisions.record(
                    "capacity",
                    "num-gpu-blocks-override",
                    "applied",
                    f"Worker {index}: memory {memory} bytes replaced by {override} blocks x {block} "
                    f"bytes = {override * block} bytes.",
                )
                memory = override * block
            ctx.decisions.record(
                "layout",
                rule.name,
                "applied",
                f"Worker {index}: {check.reason} One block costs {block} bytes.",
            )
            return _WorkerState(index, projected, rule, memory, block)
        raise GroupingError(
            f"no active layout can hold worker {index}'s groups; asked: {'; '.join(reasons) or 'none active'}"
        )

    def _check_memory(self, states: list[_WorkerState], groups: list[KVCacheGroup], ctx: PlanContext) -> int:
        config = ctx.config

        def need(state: _WorkerState, length: int) -> int:
            if state.layout is None:
                return 0
            cfg = config if length == config.max_model_len else with_length(config, length)
            return int(state.layout.request_bytes(state.groups, cfg))

        def fits(length: int) -> bool:
            return all(need(s, length) <= s.memory for s in states)

        target = config.max_model_len
        if fits(target):
            return target
        best = largest_fitting_length(target, fits)
        if config.auto_fit_max_model_len and best > 0:
            ctx.decisions.record(
                "capacity",
                "auto-fit",
                "applied",
                f"max_model_len {target} does not fit; {best} is the largest length that fits on every worker.",
            )
            return best
        failing = next(s for s in states if need(s, target) > s.memory)
        needed = need(failing, target)
        hint = (
            f"The largest max_model_len that fits is {best}; lower max_model_len to it, give the KV "
            "cache more memory, or set auto_fit_max_model_len=True."
            if best > 0
            else "Not even a 1-token request fits; give the KV cache more memory."
        )
        ctx.decisions.record(
            "capacity", "memory-check", "failed", f"Worker {failing.index} needs {needed} bytes."
        )
        raise CapacityError(
            f"To serve one request of max_model_len {target}, worker {failing.index} needs "
            f"{gib(needed)} ({needed} bytes) of KV cache but has {gib(failing.memory)} "
            f"({failing.memory} bytes). {hint}",
            needed_bytes=needed,
            available_bytes=failing.memory,
            max_fitting_len=best,
        )

    def _layout(self, states: list[_WorkerState], ctx: PlanContext) -> list[WorkerPlan]:
        own: list[int] = []
        for state in states:
            if state.layout is None:
                continue
            blocks = state.memory // state.block_bytes
            if blocks <= 0:
                raise CapacityError(
                    f"worker {state.index} has {state.memory} bytes, less than one block "
                    f"({state.block_bytes} bytes); give the KV cache more memory",
                    needed_bytes=state.block_bytes,
                    available_bytes=state.memory,
                )
            own.append(blocks)
        if not own:
            return [WorkerPlan(1, (), s.groups, "", s.memory, 1) for s in states]
        agreed = min(own)
        workers = []
        for state in states:
            if state.layout is None:
                workers.append(WorkerPlan(agreed, (), state.groups, "", state.memory, 0))
                continue
            blocks = state.memory // state.block_bytes
            layout = state.layout
            tensors = _rule_call(ctx, layout.name, "tensors", layout.tensors, state.groups, blocks)
            if blocks != agreed:
                tensors = tuple(
                    KVCacheTensor(t.size // blocks * agreed, t.shared_by, t.offset, t.block_stride)
                    for t in tensors
                )
            workers.append(
                WorkerPlan(agreed, tuple(tensors), state.groups, layout.name, state.memory, blocks)
            )
        if len(states) > 1:
            ctx.decisions.record(
                "layout",
                "agree-num-blocks",
                "applied",
                f"Workers give {', '.join(map(str, own))} blocks; all use the smallest, {agreed}.",
            )
        return workers


def _as_worker_list(specs: SpecsInput) -> list[Mapping[str, KVCacheSpec]]:
    if isinstance(specs, Mapping):
        return [specs]
    if isinstance(specs, (list, tuple)) and specs and all(isinstance(s, Mapping) for s in specs):
        return list(specs)
    raise SpecError(
        "specs must be a mapping of layer name to spec, or a non-empty list of such mappings (one per worker)"
    )


def _as_memory_list(memory: MemoryInput, workers: int) -> list[int]:
    values = [memory] if isinstance(memory, int) else list(memory)
    if len(values) == 1 and workers > 1:
        values = values * workers
    if len(values) != workers:
        raise ConfigError(
            f"available_memory has {len(values)} values for {workers} workers; give one per worker"
        )
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"available_memory value {value!r} must be a non-negative number of bytes")
    return values


def _check_specs(specs: Mapping[str, KVCacheSpec], worker: int) -> None:
    for name, spec in specs.items():
        if not isinstance(spec, KVCacheSpec):
            raise SpecError(f"worker {worker}, layer {name!r}: {spec!r} is not a KV-cache spec")


def plan(
    specs: SpecsInput,
    available_memory: MemoryInput,
    config: EngineConfig | None = None,
    strategies: StrategySpec = None,
) -> Plan:
    """Shorthand for ``Planner(strategies).plan(specs, available_memory, config)``."""
    return Planner(strategies).plan(specs, available_memory, config)
