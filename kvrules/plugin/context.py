"""The context object handed to every rule: config, active rules, decision log, core services."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvrules.config import EngineConfig
from kvrules.decisions import DecisionLog
from kvrules.plan import KVCacheGroup
from kvrules.plugin.presets import StrategySet
from kvrules.plugin.registry import Registries
from kvrules.specs.base import KVCacheSpec


@dataclass
class PlanContext:
    """What a rule may read and call while a plan is being made.

    :ivar config: the engine settings.
    :ivar strategies: the active rules by kind.
    :ivar decisions: the decision log (``record`` appends to it).
    :ivar registries: everything plugins registered (spec types, rules, allocators).
    :ivar workers: each worker's (pipeline stage's) layer names; empty when not planning.
    :ivar memory: each worker's KV-cache bytes, in the order of ``workers``.
    """

    config: EngineConfig
    strategies: StrategySet
    registries: Registries
    decisions: DecisionLog = field(default_factory=DecisionLog)
    #: the unified per-layer specs, set by :meth:`unify` (``None`` until a route unifies)
    unified: Mapping[str, KVCacheSpec] | None = None
    workers: tuple[frozenset[str], ...] = ()
    memory: tuple[int, ...] = ()
    #: scratch space for rules during one plan (key by rule name; dropped with the context)
    cache: dict[Any, Any] = field(default_factory=dict)

    def provider(self, rule_name: str) -> str:
        """Which plugin registered ``rule_name``."""
        return self.registries.provider_of(rule_name)

    def unify(self, specs: Mapping[str, KVCacheSpec]) -> Mapping[str, KVCacheSpec]:
        """Bring every layer's page to the largest page with the active layer strategies."""
        from kvrules.pipeline.unify import unify_pages

        self.unified = unify_pages(specs, self)
        return self.unified

    def group(self, specs: Mapping[str, KVCacheSpec]) -> list[KVCacheGroup]:
        """Group unified specs with the active partitioners and grouper."""
        from kvrules.pipeline.group import group_specs

        return group_specs(specs, self)


__all__ = ["PlanContext"]
