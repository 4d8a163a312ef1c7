"""The planner: the walk of architecture §5, one stage per module, each a function from data to data.

``Planner.plan`` is the whole walk: merge -> convert -> (``Planner.group``: route -> unify, or a
fallback when unification fails -> partition -> group -> hidden states) -> project -> layout
choice -> num_gpu_blocks_override -> memory check / auto-fit -> tensors and the agreed block
count -> capacity and waste. Two stages are public for integrations that decide the number of blocks themselves (vLLM
0.29+ does): :meth:`Planner.groups_of` (the groups of one worker's specs) and
:meth:`Planner.place` (given groups placed in ``num_blocks`` blocks), with
:meth:`Planner.block_bytes` (what one block costs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from kvrules import logs
from kvrules.config import EngineConfig
from kvrules.decisions import Decision
from kvrules.errors import ConfigError, SpecError, UnificationError
from kvrules.pipeline.aligned import check_alignment
from kvrules.pipeline.capacity import capacity_tokens, fit_length, max_concurrency, with_length
from kvrules.pipeline.convert import convert
from kvrules.pipeline.group import group, partition
from kvrules.pipeline.hidden import readd_hidden_states, split_hidden_states
from kvrules.pipeline.layout import apply_override, choose_layouts, lay_out
from kvrules.pipeline.merge import (
    MemoryInput,
    SpecsInput,
    as_memories,
    as_workers,
    check_config,
    check_names,
    merge,
)
from kvrules.pipeline.project import project
from kvrules.pipeline.route import choose_route, fall_back
from kvrules.pipeline.unify import unify_pages
from kvrules.pipeline.waste import waste_report
from kvrules.plan import KVCacheGroup, Plan, UnifyResult, WorkerPlan, mark_planned
from kvrules.plugin.ask import Asker
from kvrules.plugin.context import PlanContext
from kvrules.plugin.manager import KVRulesPluginManager, default_manager
from kvrules.plugin.presets import StrategySpec, resolve_strategies
from kvrules.plugin.registry import Registries
from kvrules.specs.base import KVCacheSpec


@dataclass(frozen=True)
class Grouping:
    """The first half of a plan: the route taken, the KV-cache groups, every layer's final spec
    (and, from :meth:`Planner.groups_of`, the decisions taken)."""

    route: str
    groups: tuple[KVCacheGroup, ...]
    specs: dict[str, KVCacheSpec]
    decisions: tuple[Decision, ...] = ()


@dataclass(frozen=True)
class Placed:
    """Groups placed in a given number of blocks on one worker (:meth:`Planner.place`).

    :ivar worker: the worker's plan: its tensors (or vLLM 0.33's backing) for ``num_blocks``.
    :ivar block_bytes: what one block costs on the worker (0 without KV-cache layers).
    :ivar decisions: the layout choice and the tensors' decisions.
    """

    worker: WorkerPlan
    block_bytes: int
    decisions: tuple[Decision, ...]


def final_specs(
    layer_specs: Mapping[str, KVCacheSpec], groups: Sequence[KVCacheGroup], *, owned: bool = False
) -> dict[str, KVCacheSpec]:
    """Each layer's spec as planned: its own spec, or its member spec in a group with members.

    ``owned``: ``layer_specs`` is a table the pipeline made (no caller holds it), returned
    itself when no group has members: a million-layer plan then keeps one table of every layer
    fewer."""
    if owned and isinstance(layer_specs, dict) and not any(g.spec.has_members for g in groups):
        return layer_specs
    out = dict(layer_specs)
    for g in groups:
        if g.spec.has_members:
            out.update(g.spec.members(g.layer_names))
    return out


class Planner:
    """Plans KV-cache layouts with a chosen strategy set.

    :param strategies: ``None`` (the default set), a preset name such as ``"vllm"``, or a list
        of rule names (see :func:`kvrules.resolve_strategies`).
    :param plugin_manager: where rules come from; :func:`kvrules.default_manager` when omitted.
    """

    def __init__(
        self, strategies: StrategySpec = None, *, plugin_manager: KVRulesPluginManager | None = None
    ) -> None:
        self.plugin_manager = plugin_manager or default_manager()
        self.registries = self.plugin_manager.registries
        self.strategies = resolve_strategies(strategies, self.registries.rules)

    def context(
        self,
        config: EngineConfig,
        workers: Sequence[Mapping[str, KVCacheSpec]] = (),
        memory: Sequence[int] = (),
    ) -> tuple[PlanContext, Asker]:
        """A fresh context for one plan, and the asker that records into its decision log."""
        ctx = PlanContext(
            config=config,
            strategies=self.strategies,
            registries=self.registries,
            workers=tuple(w.keys() for w in workers),
            memory=tuple(memory),
        )
        ask = Asker(self.registries, ctx.decisions)
        for plugin, message in getattr(self.plugin_manager, "patches", {}).items():  # plugin.patches
            ask.record("load", plugin, "applied", message)
        return ctx, ask

    # -- public API ---------------------------------------------------------------------------
    def unify(self, specs: Mapping[str, KVCacheSpec], config: EngineConfig | None = None) -> UnifyResult:
        """Unify page sizes only (vLLM's ``unify_kv_cache_spec_page_size``); ``specs`` itself
        when all pages are already equal."""
        if not isinstance(specs, Mapping):
            raise SpecError("specs must be a mapping of layer name to spec")
        check_names(specs, "")
        config = config or EngineConfig(max_model_len=1)
        ctx, ask = self.context(config)
        ask.specs(specs, config)
        unified = unify_pages(specs, ctx, ask)
        return UnifyResult(specs=unified, decisions=ctx.decisions.decisions())

    def groups_of(self, specs: Mapping[str, KVCacheSpec], config: EngineConfig) -> Grouping:
        """Stage function: the KV-cache groups :meth:`plan` makes of one worker's ``specs``
        (converted, routed, unified, partitioned and grouped), with the decisions taken. For an
        integration that chooses the number of blocks itself, then calls :meth:`place`.

        :raises KVRulesError: as :meth:`plan` does for these stages.
        """
        if not isinstance(specs, Mapping):
            raise SpecError("specs must be a mapping of layer name to spec")
        check_names(specs, "")
        ctx, ask = self.context(check_config(config))
        grouping = self.group(convert(specs, ctx, ask), ctx, ask)
        return Grouping(grouping.route, grouping.groups, grouping.specs, ctx.decisions.decisions())

    def block_bytes(self, groups: Sequence[KVCacheGroup], config: EngineConfig) -> int | None:
        """Stage function: what one block of ``groups`` costs on one worker, under the first
        active layout that can hold them (``None`` without KV-cache layers)."""
        ctx, ask = self.context(check_config(config))
        (worker,) = choose_layouts([tuple(groups)], [0], ctx, ask)
        return worker.block_bytes if worker.layout is not None else None

    def place(self, groups: Sequence[KVCacheGroup], num_blocks: int, config: EngineConfig) -> Placed:
        """Stage function: ``groups`` (from :meth:`groups_of`, or an engine's own) placed in
        exactly ``num_blocks`` blocks on one worker: the layout choice and the tensors.

        :raises ConfigError: ``num_blocks`` is not a whole number >= 1.
        :raises GroupingError: no active layout can hold the groups.
        """
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
            raise ConfigError(f"num_blocks={num_blocks!r}: place a whole number of blocks >= 1")
        ctx, ask = self.context(check_config(config))
        (worker,) = choose_layouts([tuple(groups)], [0], ctx, ask)
        if worker.layout is None:
            empty = WorkerPlan(num_blocks, (), tuple(groups), "", 0, num_blocks)
            return Placed(empty, 0, ctx.decisions.decisions())
        sized = replace(worker, memory=worker.block_bytes * num_blocks)
        (plan,) = lay_out([sized], ctx, ask)
        return Placed(plan, worker.block_bytes, ctx.decisions.decisions())

    def group(self, converted: Mapping[str, KVCacheSpec], ctx: PlanContext, ask: Asker) -> Grouping:
        """Route the converted specs; for a unifying route unify them (falling back on failure),
        partition, group and re-add the hidden-state layers."""
        try:
            router, groups = choose_route(converted, ctx, ask)
            if groups is not None:
                return Grouping(router.name, tuple(groups), final_specs(converted, groups))
            hidden, others = split_hidden_states(converted)
            unified = unify_pages(others, ctx, ask)
        except UnificationError as error:
            fallback, groups = fall_back(converted, ctx, ask, error)
            return Grouping(fallback.name, tuple(groups), final_specs(converted, groups))
        kept, rest = partition(unified, ctx, ask)
        groups = kept + group(rest, ctx, ask)
        groups, resized = readd_hidden_states(hidden, groups, ask)
        if not hidden and len(unified) == len(converted):
            planned, owned = unified, unified is not others  # unification made a new table
        else:
            merged = dict(converted)
            merged.update(unified)
            merged.update(resized)
            planned, owned = merged, True
        return Grouping(router.name, tuple(groups), final_specs(planned, groups, owned=owned))

    def plan(
        self, specs: SpecsInput, available_memory: MemoryInput, config: EngineConfig | None = None
    ) -> Plan:
        """Plan one worker (a spec mapping) or several (a list of mappings, one per stage).

        :param available_memory: bytes for the KV cache, one int or one per worker.
        :param config: engine settings; required (``max_model_len``).
        :raises KVRulesError: a subclass naming what is wrong and how to fix it.
        """
        config = check_config(config)
        workers = as_workers(specs)
        memories = as_memories(available_memory, len(workers))
        ctx, ask = self.context(config, workers, memories)
        check_alignment(workers, self.strategies, ask)  # front-door specs aligned for another set
        merged = merge(workers, config, ask)
        converted = convert(merged, ctx, ask)
        grouping = self.group(converted, ctx, ask)
        projected = project(grouping.groups, workers)
        chosen = apply_override(choose_layouts(projected, memories, ctx, ask), ctx, ask)
        length = fit_length(chosen, config, ask)
        config = config if length == config.max_model_len else with_length(config, length)
        worker_plans = lay_out(chosen, ctx, ask)
        return self._finish(
            grouping,
            worker_plans,
            [(w.groups, w.block_bytes, w.memory) for w in chosen if w.layout],
            config,
            ask,
        )

    def _finish(
        self,
        grouping: Grouping,
        workers: list[WorkerPlan],
        laid_out: list[tuple[tuple[KVCacheGroup, ...], int, int]],
        config: EngineConfig,
        ask: Asker,
    ) -> Plan:
        """Capacity and waste from the agreed block count, and the plan."""
        agreed = workers[0].num_blocks if workers else 1
        concurrency = max_concurrency(grouping.groups, agreed, config, ask)
        length = config.max_model_len
        capacity = capacity_tokens(concurrency, length)
        waste = waste_report(laid_out, grouping.groups, config, ask)
        ask.record(
            "capacity",
            "capacity",
            "applied",
            f"{agreed} blocks hold {concurrency:.4g} requests of {length} tokens ({capacity} tokens); "
            f"layout efficiency {waste.efficiency:.1%}, {waste.padding_slots} padding slots.",
        )
        plan = Plan(
            groups=grouping.groups,
            workers=tuple(workers),
            num_blocks=agreed,
            specs=grouping.specs,
            decisions=ask.decisions.decisions(),
            max_concurrency=concurrency,
            capacity_tokens=capacity,
            max_model_len=length,
            config=config,
            strategy_set=self.strategies.name,
            rules=tuple(self.strategies.names()),
            route=grouping.route,
            waste=waste,
        )
        mark_planned(plan)
        logs.info(
            "kvrules.plan.finished",
            layers=len(plan.specs),
            groups=len(plan.groups),
            workers=len(workers),
            num_blocks=agreed,
            max_concurrency=None if math.isinf(concurrency) else round(concurrency, 4),
            capacity_tokens=capacity,
            max_model_len=length,
            route=grouping.route,
            strategy_set=self.strategies.name,
        )
        return plan


def grouping_with(
    registries: Registries,
) -> Callable[[Mapping[str, KVCacheSpec], EngineConfig, str], list[KVCacheGroup]]:
    """``group_with(specs, config, strategy_set)``: the groups that set's page unification,
    partitioners and grouper make of ``specs`` (for :class:`~kvrules.plugin.AlignContext`)."""

    def group_with(
        specs: Mapping[str, KVCacheSpec], config: EngineConfig, strategies: str
    ) -> list[KVCacheGroup]:
        ctx = PlanContext(
            config=config, strategies=resolve_strategies(strategies, registries.rules), registries=registries
        )
        ask = Asker(registries, ctx.decisions)
        kept, rest = partition(unify_pages(specs, ctx, ask), ctx, ask)
        return kept + group(rest, ctx, ask)

    return group_with


def plan(
    specs: SpecsInput,
    available_memory: MemoryInput,
    config: EngineConfig | None = None,
    strategies: StrategySpec = None,
) -> Plan:
    """Shorthand for ``Planner(strategies).plan(specs, available_memory, config)``."""
    return Planner(strategies).plan(specs, available_memory, config)


__all__ = ["Grouping", "Placed", "Planner", "final_specs", "grouping_with", "plan"]
