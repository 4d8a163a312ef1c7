"""The align stage: choose block sizes once the target's (and the draft's) specs are built.

Engines pick the attention block size at config time so that one attention page covers a Mamba
state page (vLLM's ``_align_hybrid_block_size``, formulas §3.1). kvrules runs that choice as a
rule set of kind ``align`` (:class:`kvrules.rules.Aligner`): the first active aligner whose
``check`` applies rewrites the specs; the dispatcher here verifies the result and records every
answer as a decision at stage ``align``.

An aligner reads the situation from :class:`AlignContext` and the helpers below
(:func:`attention_page_per_token`, :func:`mamba_page`, :func:`hybrid_block_size`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from math import lcm
from typing import Any

from kvrules.decisions import DecisionLog
from kvrules.errors import KVRulesError, PluginError
from kvrules.hf.backends import AttentionBackend
from kvrules.hf.settings import BuildSettings
from kvrules.plugin.presets import StrategySet
from kvrules.plugin.registry import Registries
from kvrules.plugin.rules import Aligner, Check
from kvrules.specs import AttentionSpec, FullAttentionSpec, KVCacheSpec, MambaSpec, cdiv
from kvrules.specs.base import field_names

STAGE = "align"


@dataclass
class AlignContext:
    """What an aligner may read.

    :ivar settings: the target model's resolved settings (cache block size before alignment,
        whether the user fixed it, backend, Mamba cache mode and block size, TP, dtypes).
    :ivar draft_layers: names of the draft model's layers (all other layers are the target's).
    :ivar decisions: the decision log (the dispatcher records; aligners may add notes).
    :ivar registries: everything plugins registered.
    :ivar mamba_chunk_size: the target's Mamba chunk size (``mamba_cache_mode='all'``), if known.
    :ivar draft_settings: the draft model's settings (its own KV dtype), when there is a draft.
    """

    settings: BuildSettings
    draft_layers: frozenset[str] = frozenset()
    decisions: DecisionLog = field(default_factory=DecisionLog)
    registries: Registries = field(default_factory=Registries)
    mamba_chunk_size: int | None = None
    draft_settings: BuildSettings | None = None

    @property
    def block_size(self) -> int:
        """The cache block size before alignment (the user's, or the backend's preferred size)."""
        return self.settings.block_size

    @property
    def backend(self) -> AttentionBackend:
        """The target's attention backend."""
        return self.settings.backend

    @property
    def kernel_block_alignment(self) -> int:
        """``max(smallest kernel block of the backend, cache block size)``: block sizes are multiples of it."""
        return max(self.backend.min_kernel_block, self.block_size)

    def is_draft(self, layer: str) -> bool:
        """True when ``layer`` belongs to the draft model."""
        return layer in self.draft_layers

    def target(self, specs: Mapping[str, KVCacheSpec]) -> dict[str, KVCacheSpec]:
        """The target model's layers of ``specs``."""
        return {n: s for n, s in specs.items() if n not in self.draft_layers}

    def draft(self, specs: Mapping[str, KVCacheSpec]) -> dict[str, KVCacheSpec]:
        """The draft model's layers of ``specs``."""
        return {n: s for n, s in specs.items() if n in self.draft_layers}


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


def _call(rule: Aligner, what: str, registries: Registries, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except KVRulesError:
        raise
    except Exception as exc:
        raise PluginError(
            f"rule {rule.name!r} ({registries.provider_of(rule.name)}) raised {type(exc).__name__} in {what}: {exc}"
        ) from exc


def verify_alignment(
    rule: Aligner, old: Mapping[str, KVCacheSpec], new: Any, registries: Registries
) -> dict[str, KVCacheSpec]:
    """Reject an aligner result that changes the layers, their order, types or untouchable fields."""
    who = f"rule {rule.name!r} ({registries.provider_of(rule.name)})"
    if not isinstance(new, Mapping):
        raise PluginError(f"{who} returned {type(new).__name__} from align(), not a mapping of specs")
    if list(new) != list(old):
        raise PluginError(f"{who} changed the set or order of layers")
    for name, spec in new.items():
        before = old[name]
        if type(spec) is not type(before):
            raise PluginError(
                f"{who} changed layer {name!r} from {type(before).__name__} to {type(spec).__name__}"
            )
        changed = [f for f in field_names(type(before)) if getattr(before, f) != getattr(spec, f)]
        illegal = [f for f in changed if f not in rule.touches]
        if illegal:
            raise PluginError(
                f"{who} changed field(s) {', '.join(illegal)} of layer {name!r}; it may only change "
                f"{', '.join(sorted(rule.touches))}"
            )
    return dict(new)


def align_specs(
    specs: Mapping[str, KVCacheSpec], ctx: AlignContext, strategies: StrategySet
) -> dict[str, KVCacheSpec]:
    """Run the active aligners on ``specs``: the first that applies acts (see the module docstring)."""
    rules = [r for r in strategies.rules("align") if isinstance(r, Aligner)]
    if not rules:
        ctx.decisions.record(STAGE, "align", "declined", "No aligner is active in this strategy set.")
        return dict(specs)
    for index, rule in enumerate(rules):
        check = _call(rule, "check", ctx.registries, rule.check, specs, ctx)
        if not isinstance(check, Check):
            raise PluginError(f"rule {rule.name!r} returned {check!r} from check(), not a Check")
        if not check.applies:
            ctx.decisions.record(STAGE, rule.name, "declined", check.reason)
            continue
        ctx.decisions.record(STAGE, rule.name, "applied", check.reason)
        new = verify_alignment(
            rule, specs, _call(rule, "align", ctx.registries, rule.align, specs, ctx), ctx.registries
        )
        for name, spec in new.items():
            before = specs[name]
            if spec == before:
                continue
            ctx.decisions.record(
                STAGE,
                rule.name,
                "applied",
                _call(rule, "explain", ctx.registries, rule.explain, name, before, spec, ctx),
                layer=name,
                before=before.summary(),
                after=spec.summary(),
                padding_bytes=spec.padding_bytes - before.padding_bytes,
            )
        for later in rules[index + 1 :]:
            ctx.decisions.record(STAGE, later.name, "declined", f"{rule.name} already aligned the specs.")
        return new
    return dict(specs)
