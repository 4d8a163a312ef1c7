"""Stages ``partition`` and ``group``: partitioners set layers aside into their own groups, then
the first active grouper whose guard holds groups the rest (pages already unified)."""

from __future__ import annotations

from collections.abc import Mapping

from kvrules.errors import GroupingError
from kvrules.plan import KVCacheGroup
from kvrules.plugin.ask import Asker
from kvrules.plugin.context import PlanContext
from kvrules.plugin.rules import Check, Rule
from kvrules.specs.base import KVCacheSpec

#: the groups partitioners have made so far, and the specs they leave
Partitioned = tuple[list[KVCacheGroup], Mapping[str, KVCacheSpec]]


def partition(
    specs: Mapping[str, KVCacheSpec], ctx: PlanContext, ask: Asker
) -> tuple[list[KVCacheGroup], Mapping[str, KVCacheSpec]]:
    """Every active partitioner in order on what is left: ``(groups made, specs left)``."""

    def partitioned(rule: Rule, check: Check, so_far: Partitioned) -> Partitioned:
        made, left = ask.partition(rule, so_far[1], ctx, check)
        return [*so_far[0], *made], left

    return ask.each(
        ctx.strategies.rules("partition"),
        "group",
        (list[KVCacheGroup](), specs),
        partitioned,
        lambda so_far: (ask.frozen(so_far[1]), ctx),
        until=lambda so_far: not so_far[1],
    )


def group(specs: Mapping[str, KVCacheSpec], ctx: PlanContext, ask: Asker) -> list[KVCacheGroup]:
    """The first active grouper whose guard holds groups ``specs`` (no groups for no specs).

    :raises GroupingError: no active grouper accepts them.
    """
    if not specs:
        return []
    asked = ask.first(ctx.strategies.rules("grouper"), "group", (ask.frozen(specs), ctx))
    rule, check = asked.found, asked.check
    if rule is None:
        raise GroupingError(
            f"no active grouper can group {len(specs)} layer(s); asked: {asked.said}. "
            "Activate a grouper such as 'vllm-group-size'."
        )
    groups = ask.group(rule, specs, ctx, check)
    ask.record("group", rule.name, "applied", check.reason, details=check.details)
    return groups
