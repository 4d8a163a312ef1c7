"""Built-in plugin ``layouts``: ``shared-pool``, ``per-layer`` and ``packed`` (vLLM 0.28, formulas §4.4),
and vLLM 0.33's one backing allocation per worker, ``backing-layer-outer`` and
``backing-block-outer`` (chosen by ``EngineConfig.kv_cache_layout``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import zip_longest
from typing import ClassVar, cast

from kvrules import (
    EngineConfig,
    GroupingError,
    KVCacheGroup,
    KVCacheSpec,
    KVCacheTensor,
    UniformTypeKVCacheSpecs,
    hookimpl,
)
from kvrules.plan import backing_tensors, tensors_of_backing
from kvrules.plugin import (
    BackingTensor,
    Check,
    Layout,
    PlanContext,
    RuleRegistry,
    applies,
    blocks_of,
    declines,
    memory_of,
)


def _uniform_groups(groups: Sequence[KVCacheGroup]) -> list[UniformTypeKVCacheSpecs]:
    return [cast(UniformTypeKVCacheSpecs, g.spec) for g in groups if g.layer_names and g.spec.has_members]


@dataclass(frozen=True)
class SharedPool(Layout):
    name: str = "shared-pool"
    priority: int = 100
    description: str = (
        "group_size tensors of page x num_blocks; tensor i is shared by the i-th layer of every group."
    )

    def _page(self, groups: Sequence[KVCacheGroup]) -> int:
        pages = {g.spec.page_size_bytes for g in groups}
        if len(pages) != 1:
            raise GroupingError(f"shared-pool layout needs one page size across groups, got {sorted(pages)}")
        return pages.pop()

    def check(self, groups: Sequence[KVCacheGroup], ctx: PlanContext) -> Check:
        if any(g.spec.has_members for g in groups):
            return declines("uniform-type groups keep one tensor per layer.")
        pages = {g.spec.page_size_bytes for g in groups}
        if len(pages) != 1:
            return declines(f"groups have {len(pages)} page sizes; a shared pool needs one.")
        size = max(len(g.layer_names) for g in groups)
        return applies(
            f"{len(groups)} groups of up to {size} layers share {size} tensors of {pages.pop()}-byte pages."
        )

    def block_bytes(self, groups: Sequence[KVCacheGroup]) -> int:
        return max(len(g.layer_names) for g in groups) * self._page(groups)

    def request_bytes(self, groups: Sequence[KVCacheGroup], config: EngineConfig) -> int:
        return self.block_bytes(groups) * sum(blocks_of(g.spec, config) for g in groups)

    def tensors(self, groups: Sequence[KVCacheGroup], num_blocks: int) -> tuple[KVCacheTensor, ...]:
        page = self._page(groups)
        # tensor i holds layer i of every group that has one: a transposition of the groups
        names = [g.layer_names for g in groups]
        if len({len(n) for n in names}) == 1:
            slots: Iterable[tuple[str, ...]] = zip(*names, strict=True)
        else:
            slots = map(tuple, map(partial(filter, None), zip_longest(*names)))  # names are never empty
        return tuple(KVCacheTensor(page * num_blocks, row) for row in slots)


@dataclass(frozen=True)
class PerLayer(Layout):
    name: str = "per-layer"
    priority: int = 200
    description: str = "One uniform-type group: one tensor of page_i x num_blocks per layer."

    def check(self, groups: Sequence[KVCacheGroup], ctx: PlanContext) -> Check:
        live = [g for g in groups if g.layer_names]
        if len(live) != 1 or not live[0].spec.has_members:
            return declines("needs exactly one uniform-type group.")
        return applies(f"one uniform-type group of {len(live[0].layer_names)} layers, one tensor each.")

    def _spec(self, groups: Sequence[KVCacheGroup]) -> UniformTypeKVCacheSpecs:
        (spec,) = _uniform_groups(groups)
        return spec

    def block_bytes(self, groups: Sequence[KVCacheGroup]) -> int:
        return self._spec(groups).page_size_bytes

    def request_bytes(self, groups: Sequence[KVCacheGroup], config: EngineConfig) -> int:
        """vLLM 0.28's sum of the members' ``max_memory_usage_bytes``, but never less than the
        blocks one request takes (the group's block table, plus the groups that have no layer on
        this worker but draw on the same block pool) times what a block costs (every member's
        page): those are the blocks ``max_concurrency`` counts against the block count."""
        own = sum(memory_of(s, config) for s in self._spec(groups).kv_cache_specs.values())
        blocks = sum(blocks_of(g.spec, config) for g in groups)
        return max(own, self.block_bytes(groups) * blocks)

    def tensors(self, groups: Sequence[KVCacheGroup], num_blocks: int) -> tuple[KVCacheTensor, ...]:
        return tuple(
            KVCacheTensor(spec.page_size_bytes * num_blocks, (name,))
            for name, spec in self._spec(groups).kv_cache_specs.items()
        )


@dataclass(frozen=True)
class Packed(Layout):
    name: str = "packed"
    priority: int = 300
    description: str = (
        "Several uniform-type groups packed into one slab: each block holds every group's pages "
        "back to back (DeepSeek-V4, vLLM 0.28)."
    )

    def check(self, groups: Sequence[KVCacheGroup], ctx: PlanContext) -> Check:
        live = [g for g in groups if g.layer_names]
        if len(live) < 2 or not all(g.spec.has_members for g in live):
            return declines("needs two or more uniform-type groups.")
        return applies(f"{len(live)} uniform-type groups packed into one backing allocation.")

    def block_bytes(self, groups: Sequence[KVCacheGroup]) -> int:
        return max(s.page_size_bytes for s in _uniform_groups(groups))

    def request_bytes(self, groups: Sequence[KVCacheGroup], config: EngineConfig) -> int:
        """The blocks one request takes, summed over every group (those without a layer on this
        worker too: the scheduler's one block pool serves all of them, as ``max_concurrency``
        counts), times what a block costs.

        A block costs ``block_bytes`` (the largest group's page on this worker), the price the
        block count is computed at; vLLM 0.28 prices it as the most layer tuples x the first
        group's layer-tuple bytes, which is what its ``_max_memory_usage_bytes_from_groups``
        assumes every group's page to be. The larger of the two is used: where vLLM 0.28's
        figure is larger, its verdict (and auto-fit length) is kept; where it is smaller (groups
        whose pages are not that many tuples of the first group's, e.g. hidden-state or other
        MLA layers beside DeepSeek-V4 sliding-window MLA), vLLM 0.28 accepts plans whose blocks
        cannot hold one request, and the real cost refuses them (vLLM 0.33 prices a request as
        ``bytes_per_block x total_blocks``)."""
        uniform = [cast(UniformTypeKVCacheSpecs, g.spec) for g in groups if g.spec.has_members]
        tuples = max(s.num_layer_tuples() for s in uniform)
        tuple_bytes = sum(uniform[0].page_sizes())
        pages = sum(blocks_of(g.spec, config) for g in groups)
        return max(tuples * tuple_bytes, self.block_bytes(groups)) * pages

    def tensors(self, groups: Sequence[KVCacheGroup], num_blocks: int) -> tuple[KVCacheTensor, ...]:
        stride = self.block_bytes(groups)
        at: dict[int, list[str]] = {}
        for spec in _uniform_groups(groups):
            offset = 0
            for name, member in spec.kv_cache_specs.items():
                at.setdefault(offset, []).append(name)
                offset += member.page_size_bytes
        return tuple(
            KVCacheTensor(num_blocks * stride, tuple(at[offset]), offset, stride) for offset in sorted(at)
        )


def _group_specs(groups: Sequence[KVCacheGroup]) -> list[KVCacheSpec]:
    return [s for g in groups for s in g.spec.members(g.layer_names).values()]


def group_page_sum(group: KVCacheGroup) -> int:
    """Bytes one block of ``group`` takes: the sum of its layers' pages."""
    members = group.spec.members(group.layer_names)
    return sum(members[name].page_size_bytes for name in group.layer_names)


@dataclass(frozen=True)
class BackingLayerOuter(Layout):
    """vLLM 0.33 with a layer-outermost layout: one backing of ``bytes_per_block x num_blocks``
    per worker; the groups overlay it from byte 0, each layer of a group owning a region of
    ``page x num_blocks`` bytes; one block costs the largest group's page sum. The block pool's
    null block is held back from the memory check (``reserves_null_block``)."""

    reserves_null_block: ClassVar[bool] = True
    block_outermost: ClassVar[bool] = False

    name: str = "backing-layer-outer"
    priority: int = 50
    description: str = (
        "vLLM 0.33, layer-outermost layout: one backing per worker, groups overlaid from byte 0, "
        "a region of page x num_blocks per layer."
    )
    default: bool = False

    def check(self, groups: Sequence[KVCacheGroup], ctx: PlanContext) -> Check:
        specs = _group_specs(groups)
        layout, source = ctx.config.layout_for(specs)
        if layout.startswith("B") != self.block_outermost:
            return declines(f"the KV-cache layout is {layout} ({source}).")
        live = [g for g in groups if g.layer_names]
        pages = {s.page_size_bytes for s in specs}
        if not self.block_outermost and len(live) > 1 and len(pages) > 1:
            return declines(
                f"layout {layout} ({source}) is layer-outermost and {len(live)} groups hold "
                f"{len(pages)} page sizes; vLLM 0.33 refuses that (validate_kv_cache_layout): "
                "set a block-outermost kv_cache_layout"
            )
        return applies(
            f"layout {layout} ({source}): {len(live)} groups in one backing allocation, one block = "
            "the largest group's page sum."
        )

    def block_bytes(self, groups: Sequence[KVCacheGroup]) -> int:
        return max((group_page_sum(g) for g in groups if g.layer_names), default=0)

    def request_bytes(self, groups: Sequence[KVCacheGroup], config: EngineConfig) -> int:
        return self.block_bytes(groups) * sum(blocks_of(g.spec, config) for g in groups)

    def backing(
        self, groups: Sequence[KVCacheGroup], num_blocks: int, layout: str | None = None
    ) -> tuple[BackingTensor, ...]:
        """The placement in vLLM 0.33's ``KVCacheTensor`` form, strided as the KV-cache ``layout``
        orders the axes (the engine's resolved layout; ``None``: this layout's default order)."""
        live = [g for g in groups if g.layer_names]
        return backing_tensors(
            live, num_blocks, self.block_bytes(live), block_outermost=self.block_outermost, layout=layout
        )

    def tensors(self, groups: Sequence[KVCacheGroup], num_blocks: int) -> tuple[KVCacheTensor, ...]:
        return tensors_of_backing(self.backing(groups, num_blocks), block_outermost=self.block_outermost)


@dataclass(frozen=True)
class BackingBlockOuter(BackingLayerOuter):
    """vLLM 0.33 with a block-outermost layout: every block holds each group's pages back to
    back (distinct-spec runs in order), ``block_stride`` = the largest group's page sum."""

    block_outermost: ClassVar[bool] = True

    name: str = "backing-block-outer"
    description: str = (
        "vLLM 0.33, block-outermost layout: one backing per worker, each block holding every "
        "layer's page of a group back to back."
    )


@hookimpl
def kvrules_register_rules(registry: RuleRegistry) -> None:
    registry.add(SharedPool())
    registry.add(PerLayer())
    registry.add(Packed())
    registry.add(BackingLayerOuter())
    registry.add(BackingBlockOuter())


__all__ = [
    "BackingBlockOuter",
    "BackingLayerOuter",
    "Packed",
    "PerLayer",
    "SharedPool",
    "group_page_sum",
]
