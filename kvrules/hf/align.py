"""The align stage: choose block sizes once the target's (and the draft's) specs are built.

Engines pick the attention block size at config time so that one attention page covers a Mamba
state page (vLLM's ``_align_hybrid_block_size``, formulas §3.1). kvrules runs that choice as a
rule set of kind ``align`` (:class:`kvrules.plugin.Aligner`): the first active aligner whose
``check`` applies rewrites the specs; the dispatcher here verifies the result and records every
answer as a decision at stage ``align``.

An aligner reads the situation from :class:`AlignContext` and the helpers below
(:func:`attention_page_per_token`, :func:`mamba_page`, :func:`hybrid_block_size`).
:func:`vllm_hybrid_alignment` and :func:`apply_hybrid_alignment` are vLLM's whole choice, as the
built-in ``hybrid-align`` makes it and other aligners compare against it.

The specs come back as :class:`~kvrules.pipeline.aligned.AlignedSpecs`, which remember the set
that aligned them: planning them with a set whose aligners may choose otherwise warns
(:class:`~kvrules.pipeline.aligned.AlignmentWarning`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import lcm

from kvrules.errors import ConfigError
from kvrules.pipeline.aligned import AlignedSpecs, Alignment
from kvrules.plugin.ask import Asker
from kvrules.plugin.context import AlignContext
from kvrules.plugin.presets import StrategySet
from kvrules.specs import AttentionSpec, FullAttentionSpec, KVCacheSpec, MambaSpec, cdiv

STAGE = "align"


def attention_page_per_token(spec: AttentionSpec) -> int:
    """Bytes one token of ``spec`` takes in a page, without padding (quantisation scales included)."""
    return spec.evolve(block_size=1, page_size_padded=None).unpadded_page_size_bytes


def attention_geometry(specs: Mapping[str, KVCacheSpec]) -> tuple[str, int] | None:
    """The first full-attention layer (else any attention layer) and its bytes per token."""
    attention = [(n, s) for n, s in specs.items() if isinstance(s, AttentionSpec)]
    full = [(n, s) for n, s in attention if isinstance(s, FullAttentionSpec)]
    for name, spec in full or attention:
        if getattr(spec, "compress_ratio", 1) == 1:
            return name, attention_page_per_token(spec)
    return None


def mamba_page(specs: Mapping[str, KVCacheSpec]) -> tuple[str, int] | None:
    """The Mamba layer with the largest unpadded state page, and that page in bytes."""
    best: tuple[str, int] | None = None
    for name, spec in specs.items():
        if isinstance(spec, MambaSpec) and (best is None or spec.real_page_size_bytes > best[1]):
            best = (name, spec.real_page_size_bytes)
    return best


def hybrid_block_size(
    mamba_page_bytes: int,
    attention_bytes_per_token: int,
    alignment: int,
    *,
    mode: str = "align",
    chunk: int | None = None,
) -> int:
    """The smallest attention block whose page covers the Mamba page (formulas §3.1).

    ``none``/``align``: ``alignment * cdiv(mamba_page, alignment * per_token)``;
    ``all``: with ``c = lcm(chunk, alignment)``, ``c * cdiv(cdiv(mamba_page, per_token), c)``.
    """
    if mode == "all":
        if chunk is None:
            raise ValueError("mode 'all' needs the Mamba chunk size")
        step = lcm(chunk, alignment)
        return step * cdiv(cdiv(mamba_page_bytes, attention_bytes_per_token), step)
    return alignment * cdiv(mamba_page_bytes, alignment * attention_bytes_per_token)


@dataclass(frozen=True)
class HybridAlignment:
    """vLLM's hybrid block-size choice for one target model (:func:`vllm_hybrid_alignment`).

    :ivar block: the aligned cache block size, taken by every attention layer that follows the
        cache block size (draft included).
    :ivar mamba_block: the Mamba layers' block size (``align``: ``block``; ``all``: the computed
        block), or ``None`` when they keep theirs (``none``).
    :ivar padded_page: the page Mamba pages are padded to, or ``None`` when the attention page
        already equals the Mamba page.
    :ivar reason: the formula and figures, as one decision sentence.
    """

    block: int
    mamba_block: int | None
    padded_page: int | None
    reason: str


def vllm_hybrid_alignment(specs: Mapping[str, KVCacheSpec], ctx: AlignContext) -> HybridAlignment | str:
    """vLLM's config-time hybrid block size (``Platform._align_hybrid_block_size``, formulas §3.1)
    for the target's layers of ``specs``, or why there is none to choose (a sentence).

    Only the target's geometry counts: its first full-attention layer's bytes per token
    (:func:`attention_geometry`) and its largest Mamba page (:func:`mamba_page`), with the
    backend's kernel alignment, the cache block size as a floor and ``mamba_cache_mode``.

    :raises ConfigError: ``mamba_cache_mode`` is ``all`` and neither the options nor the model
        give a Mamba chunk size.
    """
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
    return HybridAlignment(block, mamba_block, padded, reason)


def apply_hybrid_alignment(
    specs: Mapping[str, KVCacheSpec], ctx: AlignContext, alignment: HybridAlignment
) -> dict[str, KVCacheSpec]:
    """``specs`` with ``alignment`` applied: attention layers at the cache block size take
    ``alignment.block``; Mamba layers take ``mamba_block`` and, when their state fits,
    ``padded_page``. Other layers are unchanged."""
    out: dict[str, KVCacheSpec] = {}
    for name, spec in specs.items():
        if isinstance(spec, AttentionSpec) and spec.block_size == ctx.block_size:
            spec = spec.evolve(block_size=alignment.block)
        elif isinstance(spec, MambaSpec):
            changes: dict[str, int] = {}
            if alignment.mamba_block is not None:
                changes["block_size"] = alignment.mamba_block
            if alignment.padded_page is not None and spec.real_page_size_bytes <= alignment.padded_page:
                changes["page_size_padded"] = alignment.padded_page
            if changes:
                spec = spec.evolve(**changes)
        out[name] = spec
    return out


def align_specs(
    specs: Mapping[str, KVCacheSpec], ctx: AlignContext, strategies: StrategySet, ask: Asker | None = None
) -> AlignedSpecs:
    """Run the active aligners on ``specs``: the first that applies acts (see the module docstring).

    :returns: the specs, as :class:`~kvrules.pipeline.aligned.AlignedSpecs` recording the set and
        what its aligners answered (the planner warns when another set plans them).
    """
    ask = ask or Asker(ctx.registries, ctx.decisions)
    rules = strategies.rules("align")
    if not rules:
        ask.record(STAGE, "align", "declined", "No aligner is active in this strategy set.")
        return AlignedSpecs(specs, Alignment(strategies.name, (), None))
    first = ask.first(rules, STAGE, (ask.frozen(specs), ctx))
    rule, check = first.found, first.check
    if rule is None:
        return AlignedSpecs(specs, Alignment(strategies.name, tuple(r.name for r in rules), None))
    asked = tuple(r.name for r in rules[: rules.index(rule) + 1])
    ask.record(STAGE, rule.name, "applied", check.reason, details=check.details)
    new = ask.align(rule, specs, ctx, check)
    for name, spec in new.items():
        before = specs[name]
        if spec == before:
            continue
        ask.record(
            STAGE,
            rule.name,
            "applied",
            ask.sentence(rule.kind, rule, "explain", name, before, spec, ctx),
            layer=name,
            before=before.summary(),
            after=spec.summary(),
            padding_bytes=spec.padding_bytes - before.padding_bytes,
        )
    for later in rules[rules.index(rule) + 1 :]:
        ask.record(STAGE, later.name, "declined", f"{rule.name} already aligned the specs.")
    return AlignedSpecs(new, Alignment(strategies.name, asked, rule.name))


__all__ = [
    "STAGE",
    "AlignContext",
    "attention_page_per_token",
    "attention_geometry",
    "mamba_page",
    "hybrid_block_size",
    "align_specs",
]
