"""Built-in plugin ``groupers``: vLLM 0.28's group-size rule (``vllm-group-size``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvrules import hookimpl
from kvrules.plan import KVCacheGroup
from kvrules.plugin.context import PlanContext
from kvrules.plugin.registry import RuleRegistry
from kvrules.plugin.rules import Check, Grouper, applies
from kvrules.specs import KVCacheSpec, cdiv


def buckets_by_spec(specs: Mapping[str, KVCacheSpec]) -> list[tuple[KVCacheSpec, list[str]]]:
    """Layers bucketed by identical spec, then buckets whose specs merge joined (layer order kept)."""
    exact: dict[KVCacheSpec, list[str]] = {}
    for name, spec in specs.items():
        exact.setdefault(spec, []).append(name)
    order = {name: i for i, name in enumerate(specs)}
    merged: list[tuple[list[KVCacheSpec], KVCacheSpec, list[str]]] = []
    for spec, layers in exact.items():
        for index, (members, _, names) in enumerate(merged):
            try:
                joined = type(members[0]).merge([*members, spec])
            except ValueError:
                continue
            merged[index] = ([*members, spec], joined, sorted([*names, *layers], key=order.__getitem__))
            break
        else:
            merged.append(([spec], spec, list(layers)))
    return [(spec, names) for _, spec, names in merged]


def split_bucket(layers: list[str], group_size: int) -> list[list[str]]:
    """``cdiv(len, group_size)`` groups, group ``i`` = ``layers[i::n]`` (pipeline-friendly)."""
    n = cdiv(len(layers), group_size)
    return [layers[i::n] for i in range(n)]


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
        group_size = largest if largest < 1.5 * smallest else smallest
        groups = [
            KVCacheGroup(tuple(part), spec)
            for spec, names in buckets
            for part in split_bucket(names, group_size)
        ]
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
