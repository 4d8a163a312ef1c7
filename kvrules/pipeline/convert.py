"""Stage ``convert``: converters rewrite the merged specs before routing (``hybrid-disabled``)."""

from __future__ import annotations

from collections.abc import Mapping

from kvrules.plugin.ask import Asker
from kvrules.plugin.context import PlanContext
from kvrules.specs.base import KVCacheSpec


def convert(specs: Mapping[str, KVCacheSpec], ctx: PlanContext, ask: Asker) -> Mapping[str, KVCacheSpec]:
    """Every active converter in order: each that applies rewrites the specs (same layers, same
    order); the ones that decline are recorded."""
    return ask.each(
        ctx.strategies.rules("convert"),
        "convert",
        specs,
        lambda rule, check, now: ask.convert(rule, now, ctx, check),
        lambda now: (ask.frozen(now), ctx),
    )
