"""The page-unification dispatcher.

Every layer's page must equal the target page (the largest page). For each layer that differs,
the active layer strategies are asked in ``(-priority, name)`` order; the first that applies
returns a new spec, which the dispatcher verifies before trusting it. Every rule asked is
recorded as a decision. Layers with equal specs share the answer, so planning stays linear.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kvrules.decisions import Decision
from kvrules.errors import KVRulesError, PluginError, UnificationError
from kvrules.plugin.rules import LayerStrategy
from kvrules.specs.base import KVCacheSpec, field_names

if TYPE_CHECKING:
    from kvrules.plugin.context import PlanContext

DISPATCHER = "dispatcher"


def _call(rule: LayerStrategy, what: str, ctx: PlanContext, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except KVRulesError:
        raise
    except Exception as exc:
        raise PluginError(
            f"rule {rule.name!r} ({ctx.provider(rule.name)}) raised {type(exc).__name__} in {what}: {exc}"
        ) from exc


def verify_result(
    rule: LayerStrategy, layer: str, old: KVCacheSpec, new: Any, target: int, ctx: PlanContext
) -> None:
    """Reject a strategy result that misses the target or changes what it may not touch."""
    who = f"rule {rule.name!r} ({ctx.provider(rule.name)})"
    if not isinstance(new, KVCacheSpec):
        raise PluginError(f"{who} returned {new!r} for layer {layer!r}, not a spec")
    if type(new) is not type(old):
        raise PluginError(
            f"{who} changed layer {layer!r} from {type(old).__name__} to {type(new).__name__}; "
            "a layer strategy must keep the spec type"
        )
    if new.page_size_bytes != target:
        raise PluginError(
            f"{who} returned a page of {new.page_size_bytes} bytes for layer {layer!r}; "
            f"the target is {target} bytes"
        )
    changed = [n for n in field_names(type(old)) if getattr(old, n) != getattr(new, n)]
    illegal = [n for n in changed if n not in rule.touches]
    if illegal:
        raise PluginError(
            f"{who} changed field(s) {', '.join(illegal)} of layer {layer!r}; it may only change "
            f"{', '.join(sorted(rule.touches)) or 'nothing'}"
        )


def _hint(spec: KVCacheSpec, target: int) -> str:
    page = spec.page_size_bytes
    if hasattr(spec, "indexes_kv_by_block_stride") and type(spec).__name__.find("MLA") < 0:
        return (
            "set indexes_kv_by_block_stride=true if this layer's attention backend reads KV pages by "
            f"block stride (then the page is padded), or choose block sizes so that {target} is a "
            f"whole multiple of this layer's page ({page} bytes)"
        )
    return (
        f"choose block sizes so that the largest page ({target} bytes) is a whole multiple of this "
        f"layer's page ({page} bytes), or add a strategy plugin that handles {spec.type_name!r} layers"
    )


def _unify_one(
    layer: str,
    spec: KVCacheSpec,
    target: int,
    target_layer: str,
    rules: tuple[LayerStrategy, ...],
    ctx: PlanContext,
) -> tuple[KVCacheSpec, list[Decision]]:
    decisions: list[Decision] = []
    before = spec.summary()
    declined: list[str] = []
    for rule in rules:
        check = _call(rule, "check", ctx, rule.check, layer, spec, target, ctx)
        if not check.applies:
            decisions.append(Decision("unify", rule.name, "declined", layer, check.reason, before))
            declined.append(f"{rule.name}: {check.reason}")
            continue
        new = _call(rule, "apply", ctx, rule.apply, layer, spec, target, ctx)
        verify_result(rule, layer, spec, new, target, ctx)
        decisions.append(
            Decision(
                "unify",
                rule.name,
                "applied",
                layer,
                check.reason,
                before,
                new.summary(),
                new.page_size_bytes - new.unpadded_page_size_bytes - spec.padding_bytes,
            )
        )
        return new, decisions
    asked = "\n".join(f"  - {line}" for line in declined) or "  (no layer strategy is active)"
    # keep the declines in the log: a fallback route may still produce a plan from it
    ctx.decisions.extend(decisions)
    ctx.decisions.record(
        "unify",
        DISPATCHER,
        "failed",
        f"No active layer strategy brings this page to the target of {target} bytes.",
        layer=layer,
        before=before,
    )
    raise UnificationError(
        f"layer {layer!r} ({spec.type_name}, block_size {spec.block_size}, page {spec.page_size_bytes} "
        f"bytes) cannot be brought to the common page size of {target} bytes (the page of layer "
        f"{target_layer!r}). Rules asked:\n{asked}\nHint: {_hint(spec, target)}."
    )


def unify_pages(specs: Mapping[str, KVCacheSpec], ctx: PlanContext) -> Mapping[str, KVCacheSpec]:
    """Return specs whose pages all equal the largest page; ``specs`` itself if already uniform.

    :raises UnificationError: a layer no active strategy can handle (names layer, values, rules, fix).
    :raises PluginError: a strategy returned an invalid result.
    """
    pages: dict[int, str] = {}
    for name, spec in specs.items():
        pages.setdefault(spec.page_size_bytes, name)
    if len(pages) <= 1:
        ctx.decisions.record(
            "unify", DISPATCHER, "declined", "All layers already have one page size; nothing to unify."
        )
        return specs
    target = max(pages)
    target_layer = pages[target]
    rules = tuple(r for r in ctx.strategies.rules("layer-strategy") if isinstance(r, LayerStrategy))
    ctx.decisions.record(
        "unify",
        DISPATCHER,
        "applied",
        f"Target page is {target} bytes, the largest page (layer {target_layer!r}); "
        f"{len(pages)} distinct page sizes.",
    )
    cache: dict[KVCacheSpec, tuple[KVCacheSpec, list[Decision]]] = {}
    out: dict[str, KVCacheSpec] = {}
    add = ctx.decisions.add
    for layer, spec in specs.items():
        if spec.page_size_bytes == target:
            out[layer] = spec
            continue
        hit = cache.get(spec)
        if hit is None:
            new, template = _unify_one(layer, spec, target, target_layer, rules, ctx)
            cache[spec] = (new, template)
            for decision in template:
                add(decision)
        else:
            new, template = hit
            for d in template:
                add(Decision(d.stage, d.rule, d.outcome, layer, d.reason, d.before, d.after, d.padding_bytes))
        out[layer] = new
    return out
