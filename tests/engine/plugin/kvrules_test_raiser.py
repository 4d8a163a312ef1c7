"""A test-only kvrules plugin whose router always raises: installed through its entry point
(``kvrules.plugins``: ``test-raiser``) into the engine run that shows kvrules declining."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import kvrules
from kvrules.plugin import Check, PlanContext, Router, RuleRegistry, applies, hookimpl


@dataclass(frozen=True)
class RaisingRouter(Router):
    name: str = "test-raise"
    priority: int = 10_000
    description: str = "Always applies, then raises (a faulty third-party rule)."

    def check(self, specs: Mapping[str, kvrules.KVCacheSpec], ctx: PlanContext) -> Check:
        return applies("the test router always applies.")

    def route(self, specs: Mapping[str, kvrules.KVCacheSpec], ctx: PlanContext) -> list[kvrules.KVCacheGroup]:
        raise RuntimeError("the test-only router always fails")


@hookimpl
def kvrules_register_rules(registry: RuleRegistry) -> None:
    registry.add(RaisingRouter())
