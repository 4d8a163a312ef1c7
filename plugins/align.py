"""Built-in plugin ``align``: the aligner ``hybrid-align`` (vLLM's config-time hybrid block size).

For a target model with Mamba (or linear-attention) layers beside attention layers, vLLM grows
the attention block size until one attention page covers the Mamba state page, then pads the
Mamba page to the attention page (``Platform._align_hybrid_block_size``, formulas §3.1):

* ``per_token`` = one token of the target's full-attention layer (its KV dtype, heads per rank);
* ``alignment`` = ``max(smallest kernel block of the backend, cache block size)``;
* ``none``/``align``: ``block = alignment * cdiv(mamba_page, alignment * per_token)``;
  ``all``: ``c = lcm(chunk, alignment)``, ``block = c * cdiv(cdiv(mamba_page, per_token), c)``;
* the cache block size becomes ``block`` when it is smaller; every attention layer (draft
  included: it reads the same cache config) takes it; Mamba layers take it in ``align`` mode
  (``all``: the computed block; ``none``: their block stays ``max_model_len``);
* Mamba pages are padded to ``block_size * per_token`` when that differs.

Only the target's geometry is used, as in vLLM; a draft whose page is larger is reconciled later
by page unification (``mamba-pad``, ``block-scale``). The computation is public
(:func:`kvrules.hf.vllm_hybrid_alignment`, :func:`kvrules.hf.apply_hybrid_alignment`), so other
aligners (``draft-aware-align``) compare against the same choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvrules import KVCacheSpec, hookimpl
from kvrules.hf import apply_hybrid_alignment, vllm_hybrid_alignment
from kvrules.plugin import AlignContext, Aligner, Check, RuleRegistry, applies, declines


@dataclass(frozen=True)
class HybridAlign(Aligner):
    """vLLM's hybrid attention/Mamba block-size alignment (see the module docstring)."""

    name: str = "hybrid-align"
    priority: int = 100
    description: str = "Grow the attention block size so one attention page covers the target's Mamba page; pad the Mamba page."

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: AlignContext) -> Check:
        alignment = vllm_hybrid_alignment(specs, ctx)
        if isinstance(alignment, str):
            return declines(alignment)
        return applies(alignment.reason)

    def align(self, specs: Mapping[str, KVCacheSpec], ctx: AlignContext) -> dict[str, KVCacheSpec]:
        alignment = vllm_hybrid_alignment(specs, ctx)
        if isinstance(alignment, str):
            return dict(specs)
        return apply_hybrid_alignment(specs, ctx, alignment)

    def explain(self, layer: str, before: KVCacheSpec, after: KVCacheSpec, ctx: AlignContext) -> str:
        role = "draft" if ctx.is_draft(layer) else "target"
        state = after.page_format == "state"
        parts = []
        if before.block_size != after.block_size:
            parts.append(f"block_size {before.block_size} -> {after.block_size}")
        if state and after.page_size_bytes != before.page_size_bytes:
            parts.append(
                f"state page {after.real_page_size_bytes} bytes padded to the attention page "
                f"{after.page_size_bytes} (+{after.page_size_bytes - after.real_page_size_bytes})"
            )
        what = "; ".join(parts) or "unchanged"
        if state:
            return f"{role} Mamba layer: {what}."
        return f"{role} attention layer follows the aligned cache block size: {what}."


@hookimpl
def kvrules_register_rules(registry: RuleRegistry) -> None:
    registry.add(HybridAlign())
