"""Stage ``route``: the first router whose guard holds decides how layers become groups; when
page unification fails, the fallbacks may re-route."""

from __future__ import annotations

from collections.abc import Mapping

from kvrules.errors import GroupingError, UnificationError
from kvrules.plan import KVCacheGroup
from kvrules.plugin.ask import Asker
from kvrules.plugin.context import PlanContext
from kvrules.plugin.rules import Rule
from kvrules.specs.base import KVCacheSpec


def choose_route(
    specs: Mapping[str, KVCacheSpec], ctx: PlanContext, ask: Asker
) -> tuple[Rule, list[KVCacheGroup] | None]:
    """The first active router whose guard holds, and its groups; ``None`` for the groups when
    the router :attr:`~kvrules.plugin.Router.unifies` (the pipeline then unifies and groups).

    :raises UnificationError: raised by the router itself (the caller may fall back).
    :raises GroupingError: no active router accepts the model.
    """
    asked = ask.first(ctx.strategies.rules("router"), "route", (ask.frozen(specs), ctx))
    rule = asked.found
    if rule is None:
        raise GroupingError(
            f"no active router accepts this model; asked: {asked.said}. Activate a router such as 'unified-page'."
        )
    ask.record("route", rule.name, "applied", asked.check.reason, details=asked.check.details)
    if getattr(rule, "unifies", False):
        return rule, None
    return rule, ask.route(rule, specs, ctx, asked.check)


def fall_back(
    specs: Mapping[str, KVCacheSpec], ctx: PlanContext, ask: Asker, error: UnificationError
) -> tuple[Rule, list[KVCacheGroup]]:
    """The first active fallback whose guard holds, and its groups.

    :raises UnificationError: ``error`` again (with the fallbacks' reasons) when none applies.
    """
    asked = ask.first(ctx.strategies.rules("fallback"), "route", (ask.frozen(specs), ctx))
    rule = asked.found
    if rule is None:
        if asked.declined:
            raise UnificationError(f"{error}\nFallbacks declined: {asked.said}") from error
        raise error
    ask.record("route", rule.name, "applied", asked.check.reason, details=asked.check.details)
    return rule, ask.route(rule, specs, ctx, asked.check)
