"""Rules for kpool-tail layers: page unification (``kpool-tail-pad``) and a tensor layout
(``kpool-dedicated``) for backends that cannot alias the ring with attention pages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from kvrules import (
    EngineConfig,
    GroupingError,
    KVCacheGroup,
    KVCacheSpec,
    KVCacheTensor,
    UniformTypeKVCacheSpecs,
)
from kvrules.plugin import Check, LayerStrategy, Layout, PlanContext, applies, cdiv, declines

from kvrules_kpool_tail.spec import KpoolTailSpec


@dataclass(frozen=True)
class KpoolTailPad(LayerStrategy):
    """Pad a kpool-tail page to the target page; never change its block size.

    ``block_size`` is the ring length the indexer kernel writes modulo, so ``block-scale``
    (priority 200) must not get the layer: this rule runs first (priority 250). Padding costs
    ``target - page`` bytes once per request, since a request holds exactly one tail block.
    """

    touches: ClassVar[frozenset[str]] = frozenset({"page_size_padded"})

    name: str = "kpool-tail-pad"
    priority: int = 250
    description: str = "Pad a kpool-tail ring page to the target page; its block_size (ring length) stays."

    def check(self, layer: str, spec: KVCacheSpec, target: int, ctx: PlanContext) -> Check:
        if not isinstance(spec, KpoolTailSpec):
            return declines(f"not a kpool-tail layer ({spec.type_name}).")
        extra = target - spec.page_size_bytes
        return applies(
            f"the kpool tail is a ring of block_size {spec.block_size} tokens (one block per request); "
            f"pad its page from {spec.page_size_bytes} to {target} bytes (+{extra} bytes per request)."
        )

    def apply(self, layer: str, spec: KVCacheSpec, target: int, ctx: PlanContext) -> KVCacheSpec:
        return spec.evolve(page_size_padded=target)


def _split(groups: Sequence[KVCacheGroup]) -> tuple[list[KVCacheGroup], list[KVCacheGroup]]:
    live = [g for g in groups if g.layer_names]
    tails = [g for g in live if isinstance(g.spec, KpoolTailSpec)]
    return [g for g in live if not isinstance(g.spec, KpoolTailSpec)], tails


def _slots(groups: Sequence[KVCacheGroup]) -> int:
    return max((len(g.layer_names) for g in groups), default=0)


def _page(groups: Sequence[KVCacheGroup]) -> int:
    pages = {g.spec.page_size_bytes for g in groups if g.layer_names}
    if len(pages) != 1:
        raise GroupingError(f"kpool-dedicated needs one page size across groups, got {sorted(pages)}")
    return pages.pop()


@dataclass(frozen=True)
class KpoolDedicated(Layout):
    """A shared pool whose kpool-tail layers get tensors of their own.

    Attention groups share ``n`` tensors as in ``shared-pool`` (tensor ``i``: the ``i``-th layer
    of every attention group); kpool-tail groups share ``m`` separate tensors the same way. A
    block costs ``(n + m) x page`` instead of ``max(n, m) x page``: the price of a backend whose
    indexer kernel cannot alias its ring with attention pages. Opt in with
    ``--strategies kpool-dedicated``; without kpool-tail layers it is exactly ``shared-pool``.
    """

    name: str = "kpool-dedicated"
    priority: int = 150
    description: str = "Shared pool with separate tensors for kpool-tail layers (backends that cannot alias)."
    default: bool = False

    def check(self, groups: Sequence[KVCacheGroup], ctx: PlanContext) -> Check:
        live = [g for g in groups if g.layer_names]
        if any(isinstance(g.spec, UniformTypeKVCacheSpecs) for g in live):
            return declines("uniform-type groups keep one tensor per layer.")
        pages = {g.spec.page_size_bytes for g in live}
        if len(pages) != 1:
            return declines(f"groups have {len(pages)} page sizes; a pool needs one.")
        pool, tails = _split(groups)
        return applies(
            f"{_slots(pool)} attention tensors and {_slots(tails)} kpool-tail tensors of "
            f"{pages.pop()}-byte pages."
        )

    def block_bytes(self, groups: Sequence[KVCacheGroup]) -> int:
        pool, tails = _split(groups)
        return (_slots(pool) + _slots(tails)) * _page(groups)

    def request_bytes(self, groups: Sequence[KVCacheGroup], config: EngineConfig) -> int:
        # every group of the plan, as shared-pool counts them (a projected group may be empty here)
        blocks = sum(cdiv(g.spec.max_memory_usage_bytes(config), g.spec.page_size_bytes) for g in groups)
        return self.block_bytes(groups) * blocks

    def tensors(self, groups: Sequence[KVCacheGroup], num_blocks: int) -> tuple[KVCacheTensor, ...]:
        page = _page(groups)
        out: list[KVCacheTensor] = []
        for part in _split(groups):
            for i in range(_slots(part)):
                layers = tuple(g.layer_names[i] for g in part if i < len(g.layer_names))
                out.append(KVCacheTensor(page * num_blocks, layers))
        return tuple(out)
