"""Built-in plugin ``routers``: how a model's layers become KV-cache groups (vLLM 0.28 order).

``attention-free`` (no layers) -> ``uniform-spec`` (all specs merge into one) -> ``uniform-type``
(one type and block size, pages may differ) -> ``deepseekv4-packing`` (sliding-window MLA
present and mixed page sizes) -> ``unified-page`` (unify pages, then group; hidden-state layers
are kept out of unification and re-sized to the common page afterwards, as vLLM 0.28 does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import ClassVar

from kvrules import (
    GroupingError,
    KVCacheGroup,
    KVCacheSpec,
    MLAAttentionSpec,
    SlidingWindowMLASpec,
    UniformTypeKVCacheSpecs,
    hookimpl,
)
from kvrules.plugin import Check, PlanContext, Router, RuleRegistry, applies, cdiv, declines, merged_spec


@dataclass(frozen=True)
class AttentionFree(Router):
    name: str = "attention-free"
    priority: int = 500
    description: str = "A model without KV-cache layers gets no groups and no tensors."

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        if specs:
            return declines(f"the model has {len(specs)} KV-cache layers.")
        return applies("no layer needs a KV cache.")

    def route(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
        return []


@dataclass(frozen=True)
class UniformSpec(Router):
    name: str = "uniform-spec"
    priority: int = 400
    description: str = "All layers have one (mergeable) spec: one group with every layer."

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        if merged_spec(specs) is None:
            kinds = sorted({s.type_name for s in specs.values()})
            return declines(f"layer specs differ ({', '.join(kinds)}) and do not merge into one.")
        return applies(f"all {len(specs)} layers share one spec.")

    def route(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
        spec = merged_spec(specs)
        if spec is None:  # check() said otherwise; keep the contract explicit
            raise GroupingError("uniform-spec: the layer specs do not merge")
        return [KVCacheGroup(tuple(specs), spec)]


@dataclass(frozen=True)
class UniformType(Router):
    name: str = "uniform-type"
    priority: int = 300
    description: str = "One spec type and block size, pages may differ: one group, one tensor per layer."

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        if not UniformTypeKVCacheSpecs.is_uniform_type(specs):
            return declines("layers differ in spec type, window, chunk or block size.")
        return applies(f"all {len(specs)} layers hold the same token slots with one block size.")

    def route(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
        first = next(iter(specs.values()))
        return [KVCacheGroup(tuple(specs), UniformTypeKVCacheSpecs(first.block_size, dict(specs)))]


def approximate_gcd(values: list[int], lower_bound: int) -> int:
    """The ``d`` in ``[lower_bound, max(values)]`` minimising ``sum((d - x % d) % d)``; ties to larger ``d``."""
    top = max(values)
    if lower_bound > top:
        return lower_bound
    best, best_cost = lower_bound, None
    for d in range(lower_bound, top + 1):
        cost = sum((d - x % d) % d for x in values)
        if best_cost is None or cost <= best_cost:
            best, best_cost = d, cost
    return best


def layer_tuple_count(specs: Mapping[str, KVCacheSpec]) -> int:
    """How many layers have the most frequent page size."""
    counts: dict[int, int] = {}
    for spec in specs.values():
        counts[spec.page_size_bytes] = counts.get(spec.page_size_bytes, 0) + 1
    return max(counts.values())


def _one_block_size(specs: Mapping[str, KVCacheSpec], what: str) -> int:
    sizes = sorted({s.block_size for s in specs.values()})
    if len(sizes) != 1:
        raise GroupingError(f"deepseekv4-packing: the {what} layers have several block sizes {sizes}")
    return sizes[0]


@dataclass(frozen=True)
class DeepseekV4Packing(Router):
    name: str = "deepseekv4-packing"
    priority: int = 200
    description: str = (
        "DeepSeek-V4 layer-tuple packing: sliding-window MLA with mixed pages, packed into one slab."
    )

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        if not any(isinstance(s, SlidingWindowMLASpec) for s in specs.values()):
            return declines("no sliding-window MLA layer.")
        pages = {s.page_size_bytes for s in specs.values()}
        if len(pages) <= 1:
            return declines(
                f"all pages are {pages.pop() if pages else 0} bytes; uniform pages need no packing (vLLM #48256)."
            )
        return applies(f"sliding-window MLA layers with {len(pages)} distinct page sizes.")

    def route(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
        return flag_eagle_group(self.tuple_groups(specs, ctx), specs, ctx)

    def tuple_groups(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
        """The layer-tuple groups: the MLA layers in one uniform-type group, each
        sliding-window MLA bucket cut into groups of ``n`` layer tuples."""
        mla: dict[str, KVCacheSpec] = {}
        buckets: dict[tuple[int, int], dict[str, KVCacheSpec]] = {}
        for name, spec in specs.items():
            if isinstance(spec, SlidingWindowMLASpec):
                buckets.setdefault((spec.block_size, spec.sliding_window), {})[name] = spec
            elif isinstance(spec, MLAAttentionSpec):
                mla[name] = spec
            else:
                raise GroupingError(
                    f"deepseekv4-packing: layer {name!r} is {spec.type_name}; this packing holds only "
                    "mla and sliding_window_mla layers"
                )
        values = ([layer_tuple_count(mla)] if mla else []) + [layer_tuple_count(b) for b in buckets.values()]
        n = approximate_gcd(values, lower_bound=values[0])
        groups: list[KVCacheGroup] = []
        if mla:
            groups.append(KVCacheGroup(tuple(mla), UniformTypeKVCacheSpecs(_one_block_size(mla, "MLA"), mla)))
        for (block_size, window), bucket in buckets.items():
            by_page: dict[int, list[str]] = {}
            for name, spec in bucket.items():
                by_page.setdefault(spec.page_size_bytes, []).append(name)
            counts = {page: len(names) for page, names in by_page.items()}
            if len(set(counts.values())) != 1:
                raise GroupingError(
                    f"deepseekv4-packing: sliding-window MLA layers with block_size {block_size} and window "
                    f"{window} cannot be cut into layer tuples: page sizes occur {counts} times"
                )
            tuples = list(zip(*by_page.values(), strict=True))
            k = cdiv(len(tuples), n)
            for i in range(k):
                names = [name for tup in tuples[i::k] for name in tup]
                groups.append(
                    KVCacheGroup(
                        tuple(names),
                        UniformTypeKVCacheSpecs(block_size, {m: bucket[m] for m in names}),
                    )
                )
        ctx.decisions.record(
            "group",
            self.name,
            "applied",
            f"layer-tuple counts {values} give {n} layer tuples per group; {len(groups)} groups.",
        )
        return groups


@dataclass(frozen=True)
class LayoutPacking(DeepseekV4Packing):
    """vLLM 0.33's layout-driven packing: with a block-outermost KV-cache layout
    (``EngineConfig.kv_cache_layout``) and mixed pages, each block holds every group's pages back
    to back. The groups are those of DeepSeek-V4's layer-tuple packing (the same groups vLLM
    0.33 forms on the shared cases); models other than MLA / sliding-window MLA are declined."""

    name: str = "layout-packing"
    priority: int = 200
    description: str = (
        "vLLM 0.33: a block-outermost layout packs mixed pages into one block (MLA and sliding-window MLA)."
    )
    default: bool = False

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        layout, source = ctx.config.layout_for(specs.values())
        if not layout.startswith("B"):
            return declines(
                f"the KV-cache layout {layout} ({source}) is layer-outermost; pages are unified instead."
            )
        pages = {s.page_size_bytes for s in specs.values()}
        if len(pages) <= 1:
            return declines(f"all pages are {pages.pop() if pages else 0} bytes; nothing to pack.")
        other = sorted(
            {
                s.type_name
                for s in specs.values()
                if not isinstance(s, MLAAttentionSpec | SlidingWindowMLASpec)
            }
        )
        if other:
            return declines(
                f"kvrules packs only mla and sliding_window_mla layers this way, not {', '.join(other)}."
            )
        return applies(
            f"layout {layout} ({source}) is block-outermost and the layers have {len(pages)} page sizes."
        )

    def route(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
        return self.tuple_groups(specs, ctx)


def flag_eagle_group(
    groups: list[KVCacheGroup], specs: Mapping[str, KVCacheSpec], ctx: PlanContext
) -> list[KVCacheGroup]:
    """vLLM 0.28: with EAGLE-style speculation on a DeepSeek-V4 model, the group holding the
    model's last layer (its MTP layer) is the EAGLE group; other models are left unflagged."""
    if not ctx.config.eagle_style_speculation or not specs:
        return groups
    if not any(getattr(s, "model_version", None) == "deepseek_v4" for s in specs.values()):
        return groups
    last = next(reversed(list(specs)))
    out = list(groups)
    for index, group in enumerate(out):
        if last in group.layer_names:
            out[index] = replace(group, is_eagle_group=True)
            ctx.decisions.record(
                "group",
                "deepseekv4-packing",
                "applied",
                f"speculative method {ctx.config.speculative_method!r} reads hidden states: group {index}, "
                f"which holds the last layer {last!r}, is the EAGLE group.",
            )
            break
    return out


@dataclass(frozen=True)
class UnifiedPage(Router):
    """The general hybrid route: the pipeline unifies every page to the largest page (layer
    strategies), partitions and groups the layers into shared pools; hidden-state layers are kept
    out of unification and re-sized to the common page afterwards, as vLLM 0.28 does."""

    unifies: ClassVar[bool] = True
    name: str = "unified-page"
    priority: int = 0
    description: str = "Unify every page to the largest page, then group layers into shared pools."

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        return applies("the general hybrid route: unify page sizes, then group.")


@hookimpl
def kvrules_register_rules(registry: RuleRegistry) -> None:
    for rule in (
        AttentionFree(),
        UniformSpec(),
        UniformType(),
        DeepseekV4Packing(),
        LayoutPacking(),
        UnifiedPage(),
    ):
        registry.add(rule)
