"""Stages ``partition`` and ``group``: partitioners set layers aside into their own groups, then
the first active grouper whose guard holds groups the rest (pages already unified)."""

from __future__ import annotations

from collections.abc import Mapping

from kvrules.errors import GroupingError
from kvrules.plan import KVCacheGroup
from kvrules.plugin.ask import Asker
from kvrules.plugin.context import PlanContext
from kvrules.specs.base import KVCacheSpec


def partition(
    specs: Mapping[str, KVCacheSpec], ctx: PlanContext, ask: Asker
) -> tuple[list[KVCacheGroup], Mapping[str, KVCacheSpec]]:
    """Every active partitioner in order on what is left: ``(groups made, specs left)``."""
    groups: list[KVCacheGroup] = []
    remaining: Mapping[str, KVCacheSpec] = specs
    for rule in ctx.strategies.rules("partition"):
        if not remaining:
            break
        check = ask.check(rule.kind, rule, "check", ask.frozen(remaining), ctx)
        if not check.applies:
            ask.record("group", rule.name, "declined", check.reason)
            continue
        made, remaining = ask.partition(rule, remaining, ctx)
        ask.record("group", rule.name, "applied", check.reason)
        groups.extend(made)
    return groups, remaining


def group(specs: Mapping[str, KVCacheSpec], ctx: PlanContext, ask: Asker) -> list[KVCacheGroup]:
    """The first active grouper whose guard holds groups ``specs`` (no groups for no specs).

    :raises GroupingError: no active grouper accepts them.
    """
    if not specs:
        return []
    rule, check, declined = ask.first(ctx.strategies.rules("grouper"), "group", (ask.frozen(specs), ctx))
    if rule is None:
        raise GroupingError(
            f"no active grouper can group {len(specs)} layer(s); asked: "
            f"{'; '.join(declined) or 'none active'}. Activate a grouper such as 'vllm-group-size'."
        )
    seen = ask.decisions.mark()
    groups = ask.group(rule, specs, ctx)
    if not any(d.rule == rule.name for d in ask.decisions.since(seen)):
        # the grouper recorded nothing itself: record that it acted, and why
        ask.record("group", rule.name, "applied", f"{check.reason} {len(groups)} groups.")
    return groups
