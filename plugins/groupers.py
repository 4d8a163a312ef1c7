"""Built-in plugin ``groupers``: vLLM 0.28's group-size rule (``vllm-group-size``).

The bucketing and the group-size rule are public helpers (:mod:`kvrules.grouping`:
``buckets_by_spec``, ``vllm_group_size``, ``split_buckets``) that rules comparing groupings share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvrules import KVCacheGroup, KVCacheSpec, hookimpl
from kvrules.grouping import buckets_by_spec, split_buckets, vllm_group_size
from kvrules.plugin import Check, Grouper, PlanContext, RuleRegistry, applies


@dataclass(frozen=True)
class VllmGroupSize(Grouper):
    name: str = "vllm-group-size"
    priority: int = 0
    description: str = (
        "vLLM's rule: group size = smallest bucket, or the largest when below 1.5x the smallest; "
        "bucket i-th layers interleaved."
    )

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        return applies("vLLM's group-size heuristic handles any unified specs.")

    def group(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
        buckets = buckets_by_spec(specs)
        sizes = [len(names) for _, names in buckets]
        smallest, largest = min(sizes), max(sizes)
        group_size = vllm_group_size(sizes)
        groups = list(split_buckets(buckets, group_size))
        padding = sum(group_size - len(g.layer_names) for g in groups)
        ctx.decisions.record(
            "group",
            self.name,
            "applied",
            f"{len(buckets)} spec buckets of {sizes} layers; group size {group_size} "
            f"({'largest, below 1.5x the smallest' if group_size == largest and largest != smallest else 'smallest bucket'}); "
            f"{len(groups)} groups, {padding} padding slots.",
        )
        return groups


@hookimpl
def kvrules_register_rules(registry: RuleRegistry) -> None:
    registry.add(VllmGroupSize())
