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
        """Applies to any unified specs; the groups are made here and handed to :meth:`group`."""
        groups = self._groups(specs)
        sizes = groups.sizes
        smallest, largest = min(sizes), max(sizes)
        size = groups.size
        why = (
            "largest, below 1.5x the smallest"
            if size == largest and largest != smallest
            else "smallest bucket"
        )
        padding = sum(size - len(g.layer_names) for g in groups.groups)
        return applies(
            f"{len(sizes)} spec buckets of {sizes} layers; group size {size} ({why}); "
            f"{len(groups.groups)} groups, {padding} padding slots.",
            work=groups,
        )

    def group(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
        return list((ctx.handed(_Grouped) or self._groups(specs)).groups)

    @staticmethod
    def _groups(specs: Mapping[str, KVCacheSpec]) -> _Grouped:
        buckets = buckets_by_spec(specs)
        sizes = [len(names) for _, names in buckets]
        size = vllm_group_size(sizes)
        return _Grouped(sizes, size, tuple(split_buckets(buckets, size)))


@dataclass(frozen=True)
class _Grouped:
    """vLLM's grouping of some specs: each bucket's layer count, the group size, the groups."""

    sizes: list[int]
    size: int
    groups: tuple[KVCacheGroup, ...]


@hookimpl
def kvrules_register_rules(registry: RuleRegistry) -> None:
    registry.add(VllmGroupSize())
