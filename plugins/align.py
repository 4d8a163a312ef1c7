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
by page unification (``mamba-pad``, ``block-scale``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvrules import hookimpl
from kvrules.errors import ConfigError
from kvrules.hf.align import AlignContext, attention_geometry, hybrid_block_size, mamba_page
from kvrules.plugin.registry import RuleRegistry
from kvrules.plugin.rules import Aligner, Check, applies, declines
from kvrules.specs import AttentionSpec, KVCacheSpec, MambaSpec


@dataclass(frozen=True)
class _Plan:
    block: int
    mamba_block: int | None
    padded_page: int | None
    reason: str


@dataclass(frozen=True)
class HybridAlign(Aligner):
    """vLLM's hybrid attention/Mamba block-size alignment (see the module docstring)."""

    name: str = "hybrid-align"
    priority: int = 100
    description: str = "Grow the attention block size so one attention page covers the target's Mamba page; pad the Mamba page."

    def _plan(self, specs: Mapping[str, KVCacheSpec], ctx: AlignContext) -> _Plan | str:
        target = ctx.target(specs)
        mamba = mamba_page(target)
        if mamba is None:
            return "the target model has no Mamba or linear-attention layer; block sizes stay as configured."
        geometry = attention_geometry(target)
        if geometry is None:
            return "the target model has no attention layer whose page could cover the Mamba page."
        mamba_layer, page = mamba
        attn_layer, per_token = geometry
        mode = ctx.settings.mamba_cache_mode
        align = ctx.kernel_block_alignment
        chunk = None
        if mode == "all":
            chunk = ctx.settings.options.mamba_block_size or ctx.mamba_chunk_size
            if chunk is None:
                raise ConfigError(
                    "mamba_cache_mode 'all' needs the model's Mamba chunk size, and the config has no "
                    "mamba_chunk_size or chunk_size; pass --mamba-block-size"
                )
        computed = hybrid_block_size(page, per_token, align, mode=mode, chunk=chunk)
        block = max(ctx.block_size, computed)
        attn_page = block * per_token
        formula = (
            f"{align} x cdiv({page}, {align} x {per_token})"
            if mode != "all"
            else f"lcm({chunk}, {align}) x cdiv(cdiv({page}, {per_token}), lcm({chunk}, {align}))"
        )
        how = (
            f"block size {ctx.block_size} -> {block} tokens ({formula} = {computed})"
            if block != ctx.block_size
            else f"block size {block} already covers it ({formula} = {computed})"
        )
        if attn_page == page:
            padding = "no Mamba padding"
            padded = None
        else:
            padding = f"Mamba page padded by {100 * (attn_page - page) / page:.2f}% to {attn_page}"
            padded = attn_page
        mamba_block = {"align": block, "all": computed}.get(mode)
        reason = (
            f"target attention {per_token} bytes/token ({attn_layer}), Mamba page {page} bytes "
            f"({mamba_layer}), kernel alignment {align}, mamba_cache_mode {mode}: {how}; attention page "
            f"{attn_page} bytes, {padding}."
        )
        return _Plan(block, mamba_block, padded, reason)

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: AlignContext) -> Check:
        plan = self._plan(specs, ctx)
        if isinstance(plan, str):
            return declines(plan)
        return applies(plan.reason)

    def align(self, specs: Mapping[str, KVCacheSpec], ctx: AlignContext) -> dict[str, KVCacheSpec]:
        plan = self._plan(specs, ctx)
        if isinstance(plan, str):
            return dict(specs)
        out: dict[str, KVCacheSpec] = {}
        for name, spec in specs.items():
            if isinstance(spec, AttentionSpec) and spec.block_size == ctx.block_size:
                spec = spec.evolve(block_size=plan.block)
            elif isinstance(spec, MambaSpec):
                changes: dict[str, int] = {}
                if plan.mamba_block is not None:
                    changes["block_size"] = plan.mamba_block
                if plan.padded_page is not None and spec.real_page_size_bytes <= plan.padded_page:
                    changes["page_size_padded"] = plan.padded_page
                if changes:
                    spec = spec.evolve(**changes)
            out[name] = spec
        return out

    def explain(self, layer: str, before: KVCacheSpec, after: KVCacheSpec, ctx: AlignContext) -> str:
        role = "draft" if ctx.is_draft(layer) else "target"
        parts = []
        if before.block_size != after.block_size:
            parts.append(f"block_size {before.block_size} -> {after.block_size}")
        if isinstance(after, MambaSpec) and after.page_size_bytes != before.page_size_bytes:
            parts.append(
                f"state page {after.real_page_size_bytes} bytes padded to the attention page "
                f"{after.page_size_bytes} (+{after.page_size_bytes - after.real_page_size_bytes})"
            )
        what = "; ".join(parts) or "unchanged"
        if isinstance(after, MambaSpec):
            return f"{role} Mamba layer: {what}."
        return f"{role} attention layer follows the aligned cache block size: {what}."


@hookimpl
def kvrules_register_rules(registry: RuleRegistry) -> None:
    registry.add(HybridAlign())
