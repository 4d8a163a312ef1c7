"""Built-in plugin ``draft-align``: the aligner ``draft-aware-align`` (priority 200, asked before
``hybrid-align``; off in ``vllm``): one common page for every attention geometry and the Mamba state.

vLLM (``hybrid-align``) sizes the attention block from the target's geometry alone; a draft whose
tokens are larger then gets a larger page, page unification makes that the pool page, and every
Mamba page is padded up to it (vLLM #43626 after #45207: about half of each Mamba page empty).
This rule takes every attention geometry that follows the cache block size (target and draft,
``t_i`` bytes per token) and the largest Mamba state page ``M``, with the backend's kernel
alignment ``A``:

* every block must be a multiple of ``A`` and every page the common page ``P``, so ``P`` is a
  multiple of ``L = lcm(A x t_i)``; the smallest that covers the Mamba page is
  ``P = L x cdiv(M, L)``;
* each attention layer gets ``block_size = P / t_i`` (no attention padding); Mamba pages are
  padded to ``P``; in ``align`` mode the Mamba block follows the target's attention block.

It acts only when, after vLLM's page unification and grouping, its page is not larger than the
one ``hybrid-align`` leads to, one request of ``max_model_len`` costs no more bytes (then no
more groups, no more padding slots), and no request of a shorter power-of-two length costs more
either; both figures go into its decision's ``details`` (``vllm`` and ``chosen``,
docs/plan-schema.md). What ``hybrid-align`` would do comes from
:func:`kvrules.hf.vllm_hybrid_alignment`, the costs from :mod:`kvrules.grouping`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import lcm
from typing import cast

from kvrules import AttentionSpec, EngineConfig, KVCacheGroup, KVCacheSpec, KVRulesError, hookimpl
from kvrules.grouping import GroupingCost, acceptable, grouping_cost, ratio
from kvrules.hf import (
    apply_hybrid_alignment,
    attention_geometry,
    attention_page_per_token,
    mamba_page,
    vllm_hybrid_alignment,
)
from kvrules.plugin import AlignContext, Aligner, Check, RuleRegistry, applies, cdiv, declines, evolved

STAGE = "align"
VLLM_SET = "vllm"


@dataclass(frozen=True)
class _Alignment:
    specs: dict[str, KVCacheSpec]
    mine: GroupingCost
    vllm: GroupingCost | None
    reason: str


def _planned_groups(
    specs: Mapping[str, KVCacheSpec], ctx: AlignContext, config: EngineConfig
) -> list[KVCacheGroup] | None:
    """``specs`` after vLLM's page unification and grouping (``None``: they fail there)."""
    if ctx.group_with is None:
        return None
    try:
        groups = ctx.group_with(specs, config, VLLM_SET)
        grouping_cost(groups, config)  # a shared pool: one page size
    except KVRulesError:
        return None
    return groups


def check_lengths(max_model_len: int) -> list[int]:
    """Request lengths the comparison is made at: powers of two from 16 up, and ``max_model_len``."""
    lengths = {max_model_len}
    length = 16
    while length < max_model_len:
        lengths.add(length)
        length *= 2
    return sorted(lengths)


def _worse_at(
    mine: list[KVCacheGroup], vllm: list[KVCacheGroup], lengths: list[int]
) -> tuple[int, int, int] | None:
    """The first length at which ``mine`` costs a request more bytes than ``vllm``: (length, mine, vllm)."""
    for length in lengths:
        config = EngineConfig(max_model_len=length)
        a, b = grouping_cost(mine, config).request_bytes, grouping_cost(vllm, config).request_bytes
        if a > b:
            return length, a, b
    return None


def _followers(specs: Mapping[str, KVCacheSpec], ctx: AlignContext) -> dict[str, AttentionSpec]:
    """Attention layers that take the cache block size (as ``hybrid-align`` moves them)."""
    return {
        n: cast(AttentionSpec, s)
        for n, s in specs.items()
        if s.is_attention and s.block_size == ctx.block_size
    }


def _hybrid_aligned(specs: Mapping[str, KVCacheSpec], ctx: AlignContext) -> dict[str, KVCacheSpec]:
    """``specs`` as ``hybrid-align`` (vLLM) aligns them."""
    alignment = vllm_hybrid_alignment(specs, ctx)
    if isinstance(alignment, str):
        return dict(specs)
    return apply_hybrid_alignment(specs, ctx, alignment)


@dataclass(frozen=True)
class DraftAwareAlign(Aligner):
    """Hybrid alignment over every attention geometry, target and draft (see the module docstring)."""

    name: str = "draft-aware-align"
    priority: int = 200
    description: str = (
        "Choose attention block sizes so one common page, the smallest multiple of every geometry's "
        "page unit, covers the Mamba page (draft included); only when capacity is not lower than hybrid-align's."
    )

    def _plan(self, specs: Mapping[str, KVCacheSpec], ctx: AlignContext) -> _Alignment | str:
        mamba = mamba_page(specs)
        if mamba is None:
            return "no Mamba or linear-attention layer; nothing to align."
        mode = ctx.settings.mamba_cache_mode
        if mode == "all":
            return "mamba_cache_mode 'all' ties the attention block to the Mamba chunk size; hybrid-align decides."
        target = attention_geometry(ctx.target(specs))
        if target is None:
            return "the target has no attention layer whose page could cover the Mamba page."
        length = ctx.settings.max_model_len
        if length is None:
            return "max_model_len is unknown, so the cost cannot be compared with hybrid-align's."
        followers = _followers(specs, ctx)
        compressed = [n for n, s in followers.items() if getattr(s, "compress_ratio", 1) != 1]
        if compressed:
            return f"layer {compressed[0]!r} stores compressed tokens; its page is not block_size x bytes per token."
        per_token = {n: attention_page_per_token(s) for n, s in followers.items()}
        geometries = sorted(set(per_token.values()))
        if len(geometries) < 2:
            return "one attention geometry: hybrid-align's block already gives the smallest common page."
        align = ctx.kernel_block_alignment
        unit = lcm(*(align * t for t in geometries))
        page = unit * cdiv(mamba[1], unit)
        blocks = {t: page // t for t in geometries}
        mamba_block = blocks[target[1]] if mode == "align" and target[1] in blocks else None
        aligned = self._apply(specs, per_token, blocks, mamba_block, page)
        config = EngineConfig(max_model_len=length)
        mine_groups = _planned_groups(aligned, ctx, config)
        if mine_groups is None:
            return f"the common page {page} bytes does not plan under vLLM's unification and grouping."
        mine = grouping_cost(mine_groups, config)
        vllm_groups = _planned_groups(_hybrid_aligned(specs, ctx), ctx, config)
        vllm = grouping_cost(vllm_groups, config) if vllm_groups is not None else None
        if vllm_groups is not None and vllm is not None:
            if mine.page_size_bytes > vllm.page_size_bytes:
                return (
                    f"its common page ({page} bytes: lcm {unit} x cdiv({mamba[1]}, {unit})) is larger than "
                    f"hybrid-align's unified page ({vllm.page_size_bytes} bytes); hybrid-align decides."
                )
            if not acceptable(mine, vllm):
                return (
                    f"it would cost {mine.request_bytes:,} B per request of {length} tokens against "
                    f"hybrid-align's {vllm.request_bytes:,} B; hybrid-align decides."
                )
            worse = _worse_at(mine_groups, vllm_groups, check_lengths(length))
            if worse is not None:
                return (
                    f"it would cost {worse[1]:,} B per request of {worse[0]} tokens against hybrid-align's "
                    f"{worse[2]:,} B; hybrid-align decides."
                )
        roles = ", ".join(
            f"{t} B/token: {sum(1 for v in per_token.values() if v == t)} layers ("
            + ("draft" if all(ctx.is_draft(n) for n, v in per_token.items() if v == t) else "target")
            + f") block {blocks[t]}"
            for t in geometries
        )
        versus = (
            "hybrid-align's specs do not plan under vLLM's rules"
            if vllm is None
            else f"hybrid-align + vLLM unification: page {vllm.page_size_bytes:,} B (Mamba "
            f"+{100 * (vllm.page_size_bytes - mamba[1]) / mamba[1]:.2f}%), {vllm.request_bytes:,} B per "
            f"request (max concurrency x{ratio(vllm, mine):.4f} here)"
        )
        reason = (
            f"{roles}; L = lcm({', '.join(f'{align}x{t}' for t in geometries)}) = {unit}, common page "
            f"{unit} x cdiv({mamba[1]}, {unit}) = {page:,} B (Mamba page {mamba[1]:,} B, "
            f"+{100 * (page - mamba[1]) / mamba[1]:.2f}%), "
            f"{mine.request_bytes:,} B per request of {length} tokens; {versus}."
        )
        return _Alignment(aligned, mine, vllm, reason)

    @staticmethod
    def _apply(
        specs: Mapping[str, KVCacheSpec],
        per_token: Mapping[str, int],
        blocks: Mapping[int, int],
        mamba_block: int | None,
        page: int,
    ) -> dict[str, KVCacheSpec]:
        out: dict[str, KVCacheSpec] = {}
        for name, spec in specs.items():
            if name in per_token:
                spec = evolved(spec, block_size=blocks[per_token[name]], page_size_padded=None)
            elif spec.page_format == "state":
                changes: dict[str, int | None] = {}
                if mamba_block is not None:
                    changes["block_size"] = mamba_block
                if spec.real_page_size_bytes <= page:
                    changes["page_size_padded"] = page if spec.real_page_size_bytes < page else None
                if changes:
                    spec = evolved(spec, **changes)
            out[name] = spec
        return out

    def check(self, specs: Mapping[str, KVCacheSpec], ctx: AlignContext) -> Check:
        """Applies when its alignment costs no more than hybrid-align's; the decision's
        ``details`` compare both at ``max_model_len`` (``vllm``: hybrid-align + vLLM unification
        and grouping, ``chosen``: this alignment + the same rules)."""
        plan = self._plan(specs, ctx)
        if isinstance(plan, str):
            return declines(plan)
        details = {
            "vllm": plan.vllm.as_dict() if plan.vllm is not None else None,
            "chosen": plan.mine.as_dict(),
        }
        return applies(
            f"{plan.reason} Compared at max_model_len {ctx.settings.max_model_len}: details.vllm = "
            "hybrid-align + vLLM unification and grouping, details.chosen = this alignment + the same rules.",
            details=details,
            work=plan,
        )

    def align(self, specs: Mapping[str, KVCacheSpec], ctx: AlignContext) -> dict[str, KVCacheSpec]:
        plan = ctx.handed(_Alignment) or self._plan(specs, ctx)
        return dict(specs) if isinstance(plan, str) else plan.specs

    def explain(self, layer: str, before: KVCacheSpec, after: KVCacheSpec, ctx: AlignContext) -> str:
        role = "draft" if ctx.is_draft(layer) else "target"
        if after.page_format == "state":
            return (
                f"{role} Mamba layer: state page {after.real_page_size_bytes} bytes padded to the common page "
                f"{after.page_size_bytes} (+{after.page_size_bytes - after.real_page_size_bytes}); "
                f"block_size {before.block_size} -> {after.block_size}."
            )
        return (
            f"{role} attention layer: block_size {before.block_size} -> {after.block_size}, page "
            f"{after.page_size_bytes} bytes = the common page."
        )


@hookimpl
def kvrules_register_rules(registry: RuleRegistry) -> None:
    registry.add(DraftAwareAlign())


__all__ = ["DraftAwareAlign", "check_lengths"]
