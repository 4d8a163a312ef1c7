"""Built-in plugin ``beyond-vllm``: grouping rules that waste less than vLLM 0.28 (off in ``vllm``).

* ``min-padding`` (grouper, priority 100, asked before ``vllm-group-size``): the group size with
  the fewest padded bytes per max-length request, then the fewest groups, with at most
  ``max_groups`` groups.
* ``speculator-group`` (partitioner): the draft model's layers (``EngineConfig.draft_layer_prefixes``)
  in groups of their own; it places every layer, so the pool's group size is chosen with the
  draft's groups in view.

Each rule also works out what ``vllm-group-size`` would make of the same layers and acts only when
its own grouping gives no lower max concurrency for the plan's workers and memory (one worker:
one request costs no more bytes), then has no more groups, then no more padding slots. Both
figures go into the decision's ``details`` (``vllm``: vLLM's, ``chosen``: the rule's, with the
``alternatives`` considered and ``over_cap``; docs/plan-schema.md); ``before`` / ``after`` stay
``None``, as they are reserved for spec summaries. Per-request cost and the search over group
sizes: :mod:`kvrules.grouping`. The aligner ``draft-aware-align`` is the built-in plugin
``draft-align`` of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from itertools import repeat
from operator import not_

from kvrules import KVCacheGroup, KVCacheSpec, PluginError, hookimpl
from kvrules.grouping import (
    Candidate,
    GroupingCost,
    Pool,
    acceptable,
    alternatives,
    buckets_by_spec,
    buckets_where,
    ratio,
    search,
    shared_pool_blocker,
    vllm_grouping_cost,
)
from kvrules.plugin import Check, Grouper, Partitioner, PlanContext, RuleRegistry, applies, cdiv, declines

DEFAULT_MAX_GROUPS = 8


@dataclass(frozen=True)
class _Choice:
    """A rule's pick next to vLLM's, with what else was tried."""

    chosen: Candidate
    vllm: GroupingCost
    considered: list[Candidate]
    over_cap: int
    #: the layer count of each draft bucket (split as the others: their groups are the draft's)
    drafts: tuple[int, ...] = ()

    def answer(self, ctx: PlanContext, lead: str, max_groups: int) -> Check:
        """The guard's answer: the choice as a sentence and figures, and itself as the work."""
        mine, theirs = self.chosen.cost, self.vllm
        where = f" on worker {mine.worker}" if len(ctx.workers) > 1 else ""
        reason = (
            f"{lead}group {mine.brief()}; vLLM's rule: {theirs.brief()}; one request costs "
            f"{mine.request_bytes:,} B{where} instead of {theirs.request_bytes:,} B (max concurrency "
            f"x{ratio(theirs, mine):.4f}); {len(self.considered)} group sizes with at most {max_groups} "
            f"groups considered, {self.over_cap} more with over {max_groups} KV-cache groups left out (the rule's "
            "max_groups cap)."
        )
        details = {
            "vllm": theirs.as_dict(),
            "chosen": mine.as_dict(),
            "alternatives": alternatives(self.considered, self.chosen),
            "over_cap": self.over_cap,
        }
        return applies(reason, details=details, work=self)


def _check_limits(name: str, max_groups: int, max_capacity_loss: float = 0.0) -> None:
    if isinstance(max_groups, bool) or not isinstance(max_groups, int) or max_groups < 1:
        raise PluginError(f"rule {name!r}: max_groups={max_groups!r} must be an integer >= 1")
    if not isinstance(max_capacity_loss, int | float) or not 0.0 <= max_capacity_loss < 1.0:
        raise PluginError(
            f"rule {name!r}: max_capacity_loss={max_capacity_loss!r} must be a fraction in [0, 1); "
            "0 keeps vLLM's capacity"
        )


def _not_better(vllm: GroupingCost, best: Candidate | None, max_groups: int) -> str:
    if best is None:
        return f"every group size makes more than {max_groups} groups; vLLM's rule ({vllm.brief()}) keeps its place."
    return (
        f"its best grouping ({best.cost.brief()}, {best.cost.request_bytes:,} B per request) is not "
        f"better than vLLM's ({vllm.brief()}, {vllm.request_bytes:,} B per request)."
    )


@dataclass(frozen=True)
class MinPadding(Grouper):
    """Group size with the fewest padded bytes per max-length request (see the module docstring).

    :ivar max_groups: the most groups a candidate may make (each group costs metadata work per step).
    """

    name: str = "min-padding"
    priority: int = 100
    description: str = (
        "Group size with the fewest padded bytes per max-length request, then fewer groups "
        "(at most max_groups); only when max concurrency is not lower than vLLM's rule."
    )
    max_groups: int = DEFAULT_MAX_GROUPS

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_limits(self.name, self.max_groups)

    def _search(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> _Choice | str:
        blocker = shared_pool_blocker(specs)
        if blocker:
            return blocker + "."
        pool = Pool.of(ctx)
        vllm = vllm_grouping_cost(specs, ctx.config, pool)
        best, considered, over_cap = search(buckets_by_spec(specs), ctx.config, self.max_groups, pool)
        if best is None or not acceptable(best.cost, vllm):
            return _not_better(vllm, best, self.max_groups)
        return _Choice(best, vllm, considered, over_cap)

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        choice = self._search(specs, ctx)
        if isinstance(choice, str):
            return declines(choice)
        return choice.answer(ctx, "", self.max_groups)

    def group(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
        return list(_searched(self.name, specs, ctx, self._search).chosen.groups)


@dataclass(frozen=True)
class SpeculatorGroup(Partitioner):
    """The draft model's layers in groups of their own; places every layer when it applies.

    Draft layers are recognised by name (``EngineConfig.draft_layer_prefixes``) only. The draft's
    buckets never merge with the target's, and the group size is searched over all buckets
    (target and draft) as ``min-padding`` does, so a lone draft layer never forces group size 1
    on the target and several draft layers never interleave with target layers.

    :ivar max_groups: the most groups a candidate may make.
    :ivar max_capacity_loss: max concurrency that may be given up against vLLM's rule in exchange
        for fewer groups (0, the default, never loses capacity).
    """

    name: str = "speculator-group"
    priority: int = 100
    description: str = (
        "Draft-model layers (by draft_layer_prefixes) in their own groups, group size searched "
        "over target and draft buckets; only when max concurrency is not lower than vLLM's rule."
    )
    max_groups: int = DEFAULT_MAX_GROUPS
    max_capacity_loss: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_limits(self.name, self.max_groups, self.max_capacity_loss)

    def _search(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> _Choice | str:
        marks = list(map(str.startswith, specs, repeat(ctx.config.draft_layer_prefixes)))
        draft = sum(marks)
        prefixes = ", ".join(ctx.config.draft_layer_prefixes)
        if not draft:
            return f"no layer name starts with a draft prefix ({prefixes})."
        if draft == len(specs):
            return f"all {len(specs)} layers are draft layers; there is no target to keep them from."
        blocker = shared_pool_blocker(specs)
        if blocker:
            return blocker + "."
        buckets = buckets_where(specs, list(map(not_, marks)))
        drafts = buckets_where(specs, marks)
        pool = Pool.of(ctx)
        vllm = vllm_grouping_cost(specs, ctx.config, pool)
        best, considered, over_cap = search(buckets + drafts, ctx.config, self.max_groups, pool)
        loss = Fraction(self.max_capacity_loss).limit_denominator(1_000_000)
        if best is None or not acceptable(best.cost, vllm, loss):
            return f"{draft} draft layers in their own groups: " + _not_better(vllm, best, self.max_groups)
        return _Choice(best, vllm, considered, over_cap, tuple(len(names) for _, names in drafts))

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        choice = self._search(specs, ctx)
        if isinstance(choice, str):
            return declines(choice)
        size = choice.chosen.requested_size
        draft_groups = sum(cdiv(length, size) for length in choice.drafts)  # as split_buckets cuts
        return choice.answer(
            ctx,
            f"{sum(choice.drafts)} draft layers in {draft_groups} group(s) of their own; ",
            self.max_groups,
        )

    def partition(
        self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext
    ) -> tuple[list[KVCacheGroup], dict[str, KVCacheSpec]]:
        return list(_searched(self.name, specs, ctx, self._search).chosen.groups), {}


def _searched(
    rule: str,
    specs: Mapping[str, KVCacheSpec],
    ctx: PlanContext,
    search: Callable[[Mapping[str, KVCacheSpec], PlanContext], _Choice | str],
) -> _Choice:
    """The choice the rule's guard handed over (``ctx.handed``); searched again when the
    action is called without it (directly, not through the asker).

    :raises PluginError: the search declines, so the rule should not have been asked to act.
    """
    choice = ctx.handed(_Choice) or search(specs, ctx)
    if isinstance(choice, str):
        raise PluginError(f"rule {rule!r} was asked to act although it declines: {choice}")
    return choice


@hookimpl
def kvrules_register_rules(registry: RuleRegistry) -> None:
    registry.add(MinPadding())
    registry.add(SpeculatorGroup())


__all__ = ["MinPadding", "SpeculatorGroup"]
