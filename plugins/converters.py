"""Built-in plugin ``converters``: ``hybrid-disabled`` and ``full-allocation-fallback`` (vLLM 0.28)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvrules import (
    GroupingError,
    KVCacheGroup,
    KVCacheSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
    hookimpl,
)
from kvrules.plugin import (
    Check,
    Converter,
    Fallback,
    PlanContext,
    RuleRegistry,
    applies,
    declines,
    merged_spec,
)
from kvrules.values import copied


def _uniform(specs: Mapping[str, KVCacheSpec]) -> bool:
    return merged_spec(specs) is not None or UniformTypeKVCacheSpecs.is_uniform_type(specs)


@dataclass(frozen=True)
class HybridDisabled(Converter):
    name: str = "hybrid-disabled"
    priority: int = 0
    description: str = "With the hybrid KV-cache manager disabled, store sliding-window and chunked layers as full attention."

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        if not ctx.config.disable_hybrid_kv_cache_manager:
            return declines("the hybrid KV-cache manager is enabled.")
        if not specs or _uniform(specs):
            return declines("the specs are already uniform; nothing to convert.")
        return applies("the hybrid KV-cache manager is disabled and the specs are hybrid.")

    def convert(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> dict[str, KVCacheSpec]:
        full = [s for s in specs.values() if s.is_full_attention]
        out = copied(specs)
        if full:
            # local (sliding-window, chunked) layers become full attention at the block size of
            # the first full-attention layer that is not MLA
            full_block = next((s.block_size for s in full if s.page_format != "latent"), full[0].block_size)
            for name, spec in specs.items():
                as_full = spec.full_attention_form(full_block)
                if as_full is not None:
                    out[name] = as_full
        if not _uniform(out):
            kinds = sorted({s.type_name for s in out.values()})
            raise GroupingError(
                "the hybrid KV-cache manager is disabled but the layers cannot be converted to one "
                f"spec type (types after conversion: {', '.join(kinds)}); enable the hybrid manager "
                "(disable_hybrid_kv_cache_manager=False)"
            )
        return out


@dataclass(frozen=True)
class FullAllocationFallback(Fallback):
    name: str = "full-allocation-fallback"
    priority: int = 0
    description: str = (
        "MLA target beside sliding-window layers whose pages cannot be unified: allocate those "
        "layers as full attention in one uniform-type group (vLLM #48776)."
    )

    def _mla_block(self, specs: Mapping[str, KVCacheSpec]) -> int | None:
        sizes = {s.block_size for s in specs.values() if isinstance(s, MLAAttentionSpec)}
        return sizes.pop() if len(sizes) == 1 else None

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Check:
        values = list(specs.values())
        if not any(isinstance(s, MLAAttentionSpec) for s in values):
            return declines("no MLA layer.")
        if any(s.sized_after_unification for s in values):
            return declines("a hidden_state_cache layer is present; vLLM 0.28 has no fallback for it.")
        for spec in values:
            if not isinstance(spec, MLAAttentionSpec) and type(spec) is not SlidingWindowSpec:
                return declines(
                    f"a {spec.type_name} layer is present; only MLA + sliding-window models qualify."
                )
        if not any(type(s) is SlidingWindowSpec for s in values):
            return declines("no regular sliding-window layer.")
        if self._mla_block(specs) is None:
            return declines("the MLA layers do not share one block size.")
        return applies("MLA target with regular sliding-window layers: allocate them as full attention.")

    def route(self, specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> list[KVCacheGroup]:
        block = self._mla_block(specs)
        if block is None:
            raise GroupingError("full-allocation-fallback: the MLA layers do not share one block size")
        out = {
            name: spec.full_attention_form(block) if type(spec) is SlidingWindowSpec else spec
            for name, spec in specs.items()
        }
        if not UniformTypeKVCacheSpecs.is_uniform_type(out):
            raise GroupingError("full-allocation-fallback: the converted layers are not of one type")
        return [KVCacheGroup(tuple(out), UniformTypeKVCacheSpecs(block, out))]

    def explain(self, layer: str, before: KVCacheSpec, after: KVCacheSpec, ctx: PlanContext) -> str:
        """The decision of each sliding-window layer this fallback allocates as full attention."""
        return "treating this sliding-window layer as full attention for cache allocation."


@hookimpl
def kvrules_register_rules(registry: RuleRegistry) -> None:
    registry.add(HybridDisabled())
    registry.add(FullAllocationFallback())


__all__ = ["FullAllocationFallback", "HybridDisabled"]
