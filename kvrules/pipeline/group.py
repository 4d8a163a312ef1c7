"""Grouping of unified specs: partitioners first, then the first grouper that applies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from kvrules.errors import GroupingError, KVRulesError, PluginError
from kvrules.plan import KVCacheGroup
from kvrules.plugin.rules import Grouper, Partitioner
from kvrules.specs.base import KVCacheSpec

if TYPE_CHECKING:
    from kvrules.plugin.context import PlanContext


def _wrap(ctx: PlanContext, name: str, what: str, exc: Exception) -> PluginError:
    return PluginError(f"rule {name!r} ({ctx.provider(name)}) raised {type(exc).__name__} in {what}: {exc}")


def check_groups(groups: list[KVCacheGroup], specs: Mapping[str, KVCacheSpec], who: str) -> None:
    """Every layer of ``specs`` in exactly one group, nothing else; else a :class:`PluginError`."""
    seen: dict[str, int] = {}
    for index, group in enumerate(groups):
        for layer in group.layer_names:
            if layer in seen:
                raise PluginError(f"{who} placed layer {layer!r} in groups {seen[layer]} and {index}")
            if layer not in specs:
                raise PluginError(f"{who} placed unknown layer {layer!r} in group {index}")
            seen[layer] = index
    if len(seen) != len(specs):
        missing = [name for name in specs if name not in seen]
        raise PluginError(
            f"{who} left {len(missing)} layer(s) out of every group, e.g. {', '.join(missing[:3])}"
        )


def group_specs(specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
    """Run the active partitioners, then the first active grouper whose guard holds."""
    groups: list[KVCacheGroup] = []
    remaining: Mapping[str, KVCacheSpec] = specs
    for rule in ctx.strategies.rules("partition"):
        if not isinstance(rule, Partitioner) or not remaining:
            continue
        try:
            check = rule.check(remaining, ctx)
            if not check.applies:
                ctx.decisions.record("group", rule.name, "declined", check.reason)
                continue
            made, remaining = rule.partition(remaining, ctx)
        except KVRulesError:
            raise
        except Exception as exc:
            raise _wrap(ctx, rule.name, "partition", exc) from exc
        ctx.decisions.record("group", rule.name, "applied", check.reason)
        groups.extend(made)
    if remaining:
        reasons = []
        for rule in ctx.strategies.rules("grouper"):
            if not isinstance(rule, Grouper):
                continue
            try:
                check = rule.check(remaining, ctx)
                if not check.applies:
                    ctx.decisions.record("group", rule.name, "declined", check.reason)
                    reasons.append(f"{rule.name}: {check.reason}")
                    continue
                seen = len(ctx.decisions.items)
                made = rule.group(remaining, ctx)
            except KVRulesError:
                raise
            except Exception as exc:
                raise _wrap(ctx, rule.name, "group", exc) from exc
            if not any(d.rule == rule.name for d in ctx.decisions.items[seen:]):
                # the grouper recorded nothing itself: record that it acted, and why
                ctx.decisions.record("group", rule.name, "applied", f"{check.reason} {len(made)} groups.")
            groups.extend(made)
            break
        else:
            raise GroupingError(
                f"no active grouper can group {len(remaining)} layer(s); asked: "
                f"{'; '.join(reasons) or 'none active'}. Activate a grouper such as 'vllm-group-size'."
            )
    check_groups(groups, specs, "grouping")
    return groups
