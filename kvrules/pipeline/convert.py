"""Stage ``convert``: converters rewrite the merged specs before routing (``hybrid-disabled``)."""

from __future__ import annotations

from collections.abc import Mapping

from kvrules.plugin.ask import Asker
from kvrules.plugin.context import PlanContext
from kvrules.specs.base import KVCacheSpec


def convert(specs: Mapping[str, KVCacheSpec], ctx: PlanContext, ask: Asker) -> Mapping[str, KVCacheSpec]:
    """Every active converter in order: each that applies rewrites the specs (same layers, same
    order); the ones that decline are recorded."""
    for rule in ctx.strategies.rules("convert"):
        check = ask.check(rule.kind, rule, "check", ask.frozen(specs), ctx)
        if not check.applies:
            ask.record("convert", rule.name, "declined", check.reason)
            continue
        specs = ask.convert(rule, specs, ctx)
        ask.record("convert", rule.name, "applied", check.reason)
    return specs
