"""Built-in plugin ``routers``: how a model's layers become KV-cache groups (vLLM 0.28 order).

``attention-free`` (no layers) -> ``uniform-spec`` (all specs merge into one) -> ``uniform-type``
(one type and block size, pages may differ) -> ``deepseekv4-packing`` (sliding-window MLA
present and mixed page sizes) -> ``unified-page`` (unify pages, then group; hidden-state layers
are kept out of unification and re-sized to the common page afterwards, as vLLM 0.28 does).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from kvrules import (
    GroupingError,
    HiddenStateCacheSpec,
    KVCacheGroup,
    KVCacheSpec,
    MLAAttentionSpec,
    SlidingWindowMLASpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
    hookimpl,
)
from kvrules.plugin import (
    Check,
    PlanContext,
    Router,
    RuleRegistry,
    applies,
    cdiv,
    declines,
    distinct_specs,
    merged_spec,
)
from kvrules.values import copied


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
            kinds = sorted({s.type_name for s in distinct_specs(specs.values())})
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
        return [KVCacheGroup(tuple(specs), UniformTypeKVCacheSpecs(first.block_size, copied(specs)))]


def approximate_gcd(values: list[int], lower_bound: int) -> int:
    """The ``d`` in ``[lower_bound, max(values)]`` minimising ``sum((d - x % d) % d)``; ties to larger ``d``."""
    candidates = range(lower_bound, max(values) + 1)
    # the least padding, ties to the larger d; lower_bound itself when it exceeds every value
    return min(candidates, key=lambda d: (sum((d - x % d) % d for x in values), -d), default=lower_bound)


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
        distinct = distinct_specs(specs.values())
        if not any(isinstance(s, SlidingWindowMLASpec) for s in distinct):
            return declines("no sliding-window MLA layer.")
        pages = {s.page_size_bytes for s in distinct}
        if len(pages) <= 1:
            return declines(
                f"all pages are {pages.pop() if pages else 0} bytes; uniform pages need no packing (vLLM #48256)."
            )
        groups, how = self.tuple_groups(specs)
        groups, eagle = flag_eagle_group(groups, specs, ctx)
        return applies(
            f"sliding-window MLA layers with {len(pages)} distinct page sizes: {how}{eagle}", work=groups
        )

    def route(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
        work = ctx.handed(list)
        return (
            list(work) if work is not None else flag_eagle_group(self.tuple_groups(specs)[0], specs, ctx)[0]
        )

    def tuple_groups(self, specs: Mapping[str, KVCacheSpec]) -> tuple[list[KVCacheGroup], str]:
        """The layer-tuple groups (the MLA layers in one uniform-type group, each sliding-window
        MLA bucket cut into groups of ``n`` layer tuples) and a sentence saying how."""
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
        packs = {key: PackBucket.of(bucket) for key, bucket in buckets.items()}
        values = ([PackBucket.of(mla).repeats] if mla else []) + [p.repeats for p in packs.values()]
        n = approximate_gcd(values, lower_bound=values[0])
        groups: list[KVCacheGroup] = []
        if mla:
            groups.append(KVCacheGroup(tuple(mla), UniformTypeKVCacheSpecs(_one_block_size(mla, "MLA"), mla)))
        for (block_size, window), pack in packs.items():
            if not pack.balanced:
                raise GroupingError(
                    f"deepseekv4-packing: sliding-window MLA layers with block_size {block_size} and window "
                    f"{window} cannot be cut into layer tuples: page sizes occur {pack.counts} times"
                )
            groups += pack.cut(cdiv(pack.repeats, n))
        return groups, f"layer-tuple counts {values} give {n} layer tuples per group; {len(groups)} groups."


@dataclass(frozen=True)
class LayoutPacking(DeepseekV4Packing):
    """vLLM 0.33's layout-driven packing: with a block-outermost KV-cache layout
    (``EngineConfig.kv_cache_layout``) and mixed pages, each block holds every group's pages back
    to back. The groups are vLLM 0.33's ``_get_packed_kv_cache_groups``: greedy uniform-type
    buckets in the order of their first layer (group ids index block tables, so the order is part
    of the answer), 1:1 patterns split by :func:`approximate_gcd`, sliding-window state buckets
    capped at what a block holds. Models other than MLA / sliding-window MLA are declined."""

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
        packed = packable(specs)
        pages = {s.page_size_bytes for s in packed.values()}
        if len(pages) <= 1:
            return declines(
                f"all pages but the hidden-state layers' are {pages.pop() if pages else 0} bytes; "
                "nothing to pack."
            )
        other = sorted(
            {
                s.type_name
                for s in packed.values()
                if not isinstance(s, MLAAttentionSpec | SlidingWindowMLASpec)
            }
        )
        if other:
            # declining would plan these pages another way than vLLM 0.33, which packs any layers
            raise GroupingError(
                f"layout-packing: the KV-cache layout {layout} ({source}) is block-outermost and the "
                f"layers have {len(pages)} page sizes, so vLLM 0.33 packs them into one block; kvrules "
                f"reproduces that packing for mla and sliding_window_mla layers only, not "
                f"{', '.join(other)}. Plan with a layer-outermost kv_cache_layout (LBNHC), or with the "
                "default strategy set"
            )
        groups, how = self.packed_groups(specs)
        return applies(
            f"layout {layout} ({source}) is block-outermost and the layers have {len(pages)} page sizes: {how}",
            work=groups,
        )

    def route(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
        work = ctx.handed(list)
        return list(work) if work is not None else self.packed_groups(specs)[0]

    @staticmethod
    def packed_groups(specs: Mapping[str, KVCacheSpec]) -> tuple[list[KVCacheGroup], str]:
        """vLLM 0.33's ``_get_packed_kv_cache_groups`` and a sentence saying how: the buckets in
        order of their first layer, each emitted whole or cut into groups of ``n`` pattern
        repeats; then each hidden-state layer in a group of its own, its spec unchanged (every
        block is strided by the widest group, so its page needs no alignment)."""
        buckets = [PackBucket.of(b) for b in greedy_buckets(packable(specs))]
        repeats = repeats_per_group(buckets)
        anchor = anchor_bytes(buckets, repeats)
        groups = [g for b in buckets for g in b.groups(bucket_group_count(b, repeats, anchor))]
        hidden = [KVCacheGroup((n,), s) for n, s in specs.items() if isinstance(s, HiddenStateCacheSpec)]
        how = (
            f"{len(buckets)} uniform-type buckets in layer order, {repeats} pattern repeats per "
            f"group, {anchor} bytes per block anchor; {len(groups)} groups"
            + (f", and {len(hidden)} hidden-state layer(s) in groups of their own." if hidden else ".")
        )
        return groups + hidden, how


def packable(specs: Mapping[str, KVCacheSpec]) -> dict[str, KVCacheSpec]:
    """The layers vLLM 0.33 packs: all but the hidden-state layers, which keep block tables of
    their own (vLLM takes them out before packing)."""
    return {n: s for n, s in specs.items() if not isinstance(s, HiddenStateCacheSpec)}


def greedy_buckets(specs: Mapping[str, KVCacheSpec]) -> list[dict[str, KVCacheSpec]]:
    """Each layer joins the first bucket it keeps uniform-type, else opens a new one; buckets
    keep the order of their first layer (vLLM 0.33's greedy bucketing).

    A layer keeps a bucket uniform-type exactly when it has the bucket's block size and its
    non-``None`` ``uniform_type_key()``, so the bucket a layer joins is found by that pair in
    one lookup (a layer whose key is ``None`` opens a bucket no other layer joins)."""
    buckets: list[dict[str, KVCacheSpec]] = []
    joinable: dict[tuple[int, Hashable], dict[str, KVCacheSpec]] = {}
    for name, spec in specs.items():
        key = spec.uniform_type_key()
        home = None if key is None else joinable.get((spec.block_size, key))
        if home is not None:
            home[name] = spec
            continue
        home = {name: spec}
        buckets.append(home)
        if key is not None:
            joinable[(spec.block_size, key)] = home
    return buckets


@dataclass(frozen=True)
class PackBucket:
    """One uniform-type bucket of the packed path, its layers by page size in layer order."""

    specs: dict[str, KVCacheSpec]
    by_page: dict[int, list[str]]

    @classmethod
    def of(cls, specs: dict[str, KVCacheSpec]) -> PackBucket:
        """The bucket over ``specs`` (non-empty, uniform-type)."""
        by_page: dict[int, list[str]] = {}
        for name, spec in specs.items():
            by_page.setdefault(spec.page_size_bytes, []).append(name)
        return cls(specs, by_page)

    @property
    def counts(self) -> dict[int, int]:
        """Page size -> how many layers have it."""
        return {page: len(names) for page, names in self.by_page.items()}

    @property
    def balanced(self) -> bool:
        """Every page size has as many layers (a 1:1 layer pattern)."""
        return len(set(self.counts.values())) == 1

    @property
    def repeats(self) -> int:
        """Layers of the most frequent page size (``get_max_layers_per_page_size``)."""
        return max(self.counts.values())

    @property
    def first_page(self) -> int:
        """Page bytes of the bucket's first layer."""
        return next(iter(self.specs.values())).page_size_bytes

    def widest_group_bytes(self, count: int) -> int:
        """Page bytes of the largest of ``count`` groups this bucket splits into."""
        return sum(cdiv(len(names), count) * page for page, names in self.by_page.items())

    def groups(self, count: int) -> list[KVCacheGroup]:
        """The bucket whole (``count`` 1) or cut into ``count`` groups of pattern repeats."""
        if count == 1:
            block = next(iter(self.specs.values())).block_size
            return [KVCacheGroup(tuple(self.specs), UniformTypeKVCacheSpecs(block, dict(self.specs)))]
        if not self.balanced:
            raise GroupingError(
                f"layout-packing: the bucket of {next(iter(self.specs))!r} must be cut into {count} "
                f"groups but its page sizes occur {self.counts} times (no 1:1 layer pattern)"
            )
        return self.cut(count)

    def cut(self, count: int) -> list[KVCacheGroup]:
        """A balanced bucket in ``count`` groups: group ``i`` holds every ``count``-th pattern
        repeat (one layer of each page size) from repeat ``i``."""
        block = next(iter(self.specs.values())).block_size
        repeats = list(zip(*self.by_page.values(), strict=True))
        out = []
        for i in range(count):
            names = [name for repeat in repeats[i::count] for name in repeat]
            members = {n: self.specs[n] for n in names}
            out.append(KVCacheGroup(tuple(names), UniformTypeKVCacheSpecs(block, members)))
        return out


def repeats_per_group(buckets: list[PackBucket]) -> int | None:
    """Pattern repeats per group: at least the largest balanced mixed-page bucket (it stays
    whole), chosen by :func:`approximate_gcd` over the balanced buckets; None without one."""
    floor = max((b.repeats for b in buckets if b.balanced and len(b.by_page) > 1), default=0)
    if not floor:
        return None
    return approximate_gcd([b.repeats for b in buckets if b.balanced], lower_bound=floor)


def _is_state_bucket(bucket: PackBucket, repeats: int | None) -> bool:
    """A sliding-window bucket with no repeat pattern to follow may go down to one state per group."""
    first = next(iter(bucket.specs.values()))
    return repeats is None and isinstance(first, SlidingWindowSpec)


def _pattern_group_count(bucket: PackBucket, repeats: int | None) -> int:
    return cdiv(bucket.repeats, repeats) if bucket.balanced and repeats is not None else 1


def anchor_bytes(buckets: list[PackBucket], repeats: int | None) -> int:
    """Bytes a block must hold however the state buckets are split (0 without buckets)."""
    return max(
        (
            b.widest_group_bytes(
                len(b.specs) if _is_state_bucket(b, repeats) else _pattern_group_count(b, repeats)
            )
            for b in buckets
        ),
        default=0,
    )


def bucket_group_count(bucket: PackBucket, repeats: int | None, anchor: int) -> int:
    """Groups ``bucket`` is cut into; a state bucket is capped at the states a block already fits."""
    count = _pattern_group_count(bucket, repeats)
    if anchor and _is_state_bucket(bucket, repeats):
        per_block = max(anchor // bucket.first_page, 1)
        count = max(count, cdiv(len(bucket.specs), per_block))
    return count


def flag_eagle_group(
    groups: list[KVCacheGroup], specs: Mapping[str, KVCacheSpec], ctx: PlanContext
) -> tuple[list[KVCacheGroup], str]:
    """vLLM 0.28: with EAGLE-style speculation on a DeepSeek-V4 model, the group holding the
    model's last layer (its MTP layer) is the EAGLE group; other models are left unflagged.

    :returns: the groups, and a sentence naming the EAGLE group (empty when none is flagged)."""
    if not ctx.config.eagle_style_speculation or not specs:
        return groups, ""
    if not any(getattr(s, "model_version", None) == "deepseek_v4" for s in distinct_specs(specs.values())):
        return groups, ""
    last = next(reversed(list(specs)))
    out = list(groups)
    for index, group in enumerate(out):
        if last in group.layer_names:
            out[index] = KVCacheGroup(group.layer_names, group.spec, is_eagle_group=True)
            return out, (
                f" Speculative method {ctx.config.speculative_method!r} reads hidden states: group "
                f"{index}, which holds the last layer {last!r}, is the EAGLE group."
            )
    return out, ""


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
