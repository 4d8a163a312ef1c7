"""Built-in plugin ``page-unify``: the layer strategies ``mamba-pad``, ``block-scale``,
``stride-pad`` and ``attention-pad``.

Semantics follow vLLM 0.28 (PRs #45207 and #45181): a Mamba page is padded (its block size is
kept); a page that divides the target and scales with ``block_size`` gets a larger block size;
an attention layer whose backend reads pages by block stride is padded. vLLM 0.33 pads every
attention page but MLA's unconditionally (``attention-pad``, ``kv_cache_planning.py:396-399``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, cast

from kvrules import AttentionSpec, KVCacheSpec, MLAAttentionSpec, hookimpl
from kvrules.plugin import Check, LayerStrategy, PlanContext, RuleRegistry, applies, declines, evolved


@dataclass(frozen=True)
class _Pad(LayerStrategy):
    """A strategy that pads the layer's page to the target (``page_size_padded``)."""

    touches: ClassVar[frozenset[str]] = frozenset({"page_size_padded"})

    def apply(self, layer: str, spec: KVCacheSpec, target: int, ctx: PlanContext) -> KVCacheSpec:
        return evolved(spec, page_size_padded=target)


@dataclass(frozen=True)
class MambaPad(_Pad):
    """Pad a Mamba state page up to the target page; the block size stays."""

    name: str = "mamba-pad"
    priority: int = 300
    description: str = "Pad a Mamba layer's state page to the target page (block_size unchanged)."

    def check(self, layer: str, spec: KVCacheSpec, target: int, ctx: PlanContext) -> Check:
        if spec.page_format != "state":
            return declines(f"not a Mamba layer ({spec.type_name}).")
        return applies(
            f"Mamba page {spec.page_size_bytes} bytes is fixed by its state shapes; pad it to "
            f"{target} bytes (+{target - spec.page_size_bytes} bytes) and keep block_size {spec.block_size}."
        )


@dataclass(frozen=True)
class BlockScale(LayerStrategy):
    """Multiply ``block_size`` when the target is a whole multiple of the page."""

    touches: ClassVar[frozenset[str]] = frozenset({"block_size", "page_size_padded"})

    name: str = "block-scale"
    priority: int = 200
    description: str = "Multiply block_size when the target page is a whole multiple of the layer's page."

    def _scaled(self, spec: KVCacheSpec, target: int) -> KVCacheSpec:
        ratio = target // spec.page_size_bytes
        return evolved(spec, block_size=spec.block_size * ratio)

    def check(self, layer: str, spec: KVCacheSpec, target: int, ctx: PlanContext) -> Check:
        page = spec.page_size_bytes
        if not spec.page_scales_with_block_size:
            return declines(f"the page of a {spec.type_name} layer does not grow with block_size.")
        if target % page:
            return declines(f"target {target} bytes is not a whole multiple of the page ({page} bytes).")
        scaled = self._scaled(spec, target)
        if scaled.page_size_bytes != target:
            return declines(
                f"block_size {scaled.block_size} would give a page of {scaled.page_size_bytes} bytes, "
                f"not {target}."
            )
        return applies(
            f"target {target} bytes = {target // page} x page {page} bytes; block_size "
            f"{spec.block_size} -> {scaled.block_size}."
        )

    def apply(self, layer: str, spec: KVCacheSpec, target: int, ctx: PlanContext) -> KVCacheSpec:
        return self._scaled(spec, target)


@dataclass(frozen=True)
class StridePad(_Pad):
    """Pad an attention page whose backend reads KV pages by block stride."""

    name: str = "stride-pad"
    priority: int = 100
    description: str = "Pad an attention page when its backend indexes KV by block stride."

    def check(self, layer: str, spec: KVCacheSpec, target: int, ctx: PlanContext) -> Check:
        if not spec.is_attention:
            return declines(f"not an attention layer ({spec.type_name}).")
        if not cast(AttentionSpec, spec).indexes_kv_by_block_stride:
            return declines(
                "its attention backend does not read KV pages by block stride "
                "(indexes_kv_by_block_stride is false), so its page cannot be padded."
            )
        return applies(
            f"the backend reads pages by block stride; pad the page from {spec.page_size_bytes} to "
            f"{target} bytes (+{target - spec.page_size_bytes})."
        )


@dataclass(frozen=True)
class AttentionPad(_Pad):
    """Pad any attention page except MLA's (vLLM 0.33: ``indexes_kv_by_block_stride`` is gone)."""

    name: str = "attention-pad"
    priority: int = 100
    description: str = "Pad any non-MLA attention page to the target page (vLLM 0.33, unconditional)."
    default: bool = False

    def check(self, layer: str, spec: KVCacheSpec, target: int, ctx: PlanContext) -> Check:
        if not spec.is_attention:
            return declines(f"not an attention layer ({spec.type_name}).")
        if isinstance(spec, MLAAttentionSpec):
            return declines(f"an MLA page ({spec.type_name}) is never padded.")
        return applies(
            f"vLLM 0.33 pads every non-MLA attention page: {spec.page_size_bytes} -> {target} bytes "
            f"(+{target - spec.page_size_bytes})."
        )


@hookimpl
def kvrules_register_rules(registry: RuleRegistry) -> None:
    registry.add(MambaPad())
    registry.add(BlockScale())
    registry.add(StridePad())
    registry.add(AttentionPad())
