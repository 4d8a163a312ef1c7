"""Stage ``unify``: every layer's page brought to the target page (the largest page).

For each layer whose page differs, the active layer strategies are asked in ``(-priority,
name)`` order; the first that applies returns a new spec, which the asker verifies before it is
trusted. Every rule asked is recorded as a decision. Layers with equal specs share the answer,
so planning stays linear in the number of layers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import compress, repeat
from operator import is_
from typing import Any

from msgspec.structs import replace

from kvrules.decisions import Decision
from kvrules.errors import UnificationError
from kvrules.plugin.ask import Asker
from kvrules.plugin.context import PlanContext
from kvrules.plugin.rules import Rule
from kvrules.specs.base import KVCacheSpec, distinct_specs
from kvrules.values import copied

DISPATCHER = "dispatcher"


def _unify_one(
    layer: str,
    spec: KVCacheSpec,
    target: int,
    target_layer: str,
    rules: Sequence[Rule],
    ctx: PlanContext,
    ask: Asker,
) -> tuple[KVCacheSpec, list[Decision]]:
    before = ask.summary(spec)
    asked = ask.first(rules, "unify", (layer, spec, target, ctx), layer=layer, before=before, record=False)
    decisions = asked.declines
    rule = asked.found
    if rule is not None:
        check = asked.check
        new = ask.strategy(rule, layer, spec, target, ctx, check)
        padding = new.page_size_bytes - new.unpadded_page_size_bytes - spec.padding_bytes
        after = ask.summary(new)
        decisions.append(
            Decision(
                "unify", rule.name, "applied", layer, check.reason, before, after, padding, check.details
            )
        )
        return new, decisions
    listed = "\n".join(f"  - {line}" for line in asked.declined) or "  (no layer strategy is active)"
    # keep the declines in the log: a fallback route may still produce a plan from it
    ask.decisions.extend(decisions)
    ask.record(
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
        f"{target_layer!r}). Rules asked:\n{listed}\nHint: {spec.unification_hint(target)}."
    )


def unify_pages(specs: Mapping[str, KVCacheSpec], ctx: PlanContext, ask: Asker) -> Mapping[str, KVCacheSpec]:
    """Specs whose pages all equal the largest page; ``specs`` itself when already uniform.

    :raises UnificationError: a layer no active strategy can handle (names layer, values, rules, fix).
    :raises PluginError: a strategy answered wrongly (names the strategy and its plugin).
    """
    distinct = distinct_specs(specs.values())  # in the order of each one's first layer
    pages: dict[int, KVCacheSpec] = {}
    for spec in distinct:
        pages.setdefault(spec.page_size_bytes, spec)
    if len(pages) <= 1:
        ask.record(
            "unify", DISPATCHER, "declined", "All layers already have one page size; nothing to unify."
        )
        return specs
    target = max(pages)
    target_layer = next(compress(specs, map(is_, specs.values(), repeat(pages[target]))))
    rules = ctx.strategies.rules("layer-strategy")
    ask.record(
        "unify",
        DISPATCHER,
        "applied",
        f"Target page is {target} bytes, the largest page (layer {target_layer!r}); "
        f"{len(pages)} distinct page sizes.",
    )
    return _unified_layer_by_layer(specs, target, target_layer, rules, ctx, ask)


def _unified_layer_by_layer(
    specs: Mapping[str, KVCacheSpec],
    target: int,
    target_layer: str,
    rules: Sequence[Rule],
    ctx: PlanContext,
    ask: Asker,
) -> dict[str, KVCacheSpec]:
    """Every layer's answer, the rules asked once per distinct spec (found by identity, then by
    equality); a later layer with that spec gets a copy of each decision. A layer already at the
    target page keeps its own spec object."""
    by_equal: dict[KVCacheSpec, Answer] = {}
    by_id: dict[int, Answer] = {}  # the spec objects stay alive in ``specs`` meanwhile
    out = copied(specs)
    made: list[Decision] = []  # the decisions since the rules were last asked, in layer order
    for layer, spec in specs.items():
        answer = by_id.get(id(spec), _UNSEEN)
        if answer is _UNSEEN:
            answer = by_equal.get(spec, _UNSEEN)
            if answer is _UNSEEN:
                answer = None
                if spec.page_size_bytes != target:
                    ask.decisions.extend(made)  # the earlier layers' answers come first
                    made = []
                    answer = _unify_one(layer, spec, target, target_layer, rules, ctx, ask)
                    made.extend(answer[1])  # recorded for this very layer
                    out[layer] = answer[0]
                by_id[id(spec)] = by_equal[spec] = answer
                continue
            by_id[id(spec)] = answer
        if answer is not None:
            new, decisions = answer
            if len(decisions) == 1:  # the usual answer: one strategy, asked first, applied
                made.append(replace(decisions[0], layer=layer))
            else:
                made.extend([replace(decision, layer=layer) for decision in decisions])
            out[layer] = new
    ask.decisions.extend(made)
    return out


#: a spec not met yet (``None`` is an answer: already at the target page)
_UNSEEN: Any = object()


#: a spec's answer: ``None`` (already at the target page) or the new spec and its decisions
Answer = tuple[KVCacheSpec, list[Decision]] | None
