"""Stage ``unify``: every layer's page brought to the target page (the largest page).

For each layer whose page differs, the active layer strategies are asked in ``(-priority,
name)`` order; the first that applies returns a new spec, which the asker verifies before it is
trusted. Every rule asked is recorded as a decision. Layers with equal specs share the answer,
so planning stays linear in the number of layers.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from itertools import compress, count, repeat
from operator import is_
from typing import cast

from kvrules.decisions import Body, Decision, Entry, LayerCopies
from kvrules.errors import UnificationError
from kvrules.plugin.ask import Asker
from kvrules.plugin.context import PlanContext
from kvrules.plugin.rules import Rule
from kvrules.specs.base import KVCacheSpec, distinct_specs
from kvrules.specs.table import ReplacedSpecs

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
    decisions: list[Decision] = []
    before = ask.summary(spec)
    declined: list[str] = []
    for rule in rules:
        check = ask.check(rule.kind, rule, "check", layer, spec, target, ctx)
        if not check.applies:
            decisions.append(Decision("unify", rule.name, "declined", layer, check.reason, before))
            declined.append(f"{rule.name}: {check.reason}")
            continue
        new = ask.strategy(rule, layer, spec, target, ctx)
        padding = new.page_size_bytes - new.unpadded_page_size_bytes - spec.padding_bytes
        decisions.append(
            Decision("unify", rule.name, "applied", layer, check.reason, before, ask.summary(new), padding)
        )
        return new, decisions
    asked = "\n".join(f"  - {line}" for line in declined) or "  (no layer strategy is active)"
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
        f"{target_layer!r}). Rules asked:\n{asked}\nHint: {spec.unification_hint(target)}."
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
    if ask.decisions.listening or len(distinct) > _FEW_SPECS:
        return _unified_layer_by_layer(specs, target, target_layer, rules, ctx, ask)
    return _unified(specs, distinct, target, target_layer, rules, ctx, ask)


#: at most this many distinct spec objects take :func:`_unified`'s path
_FEW_SPECS = 64


def _unified(
    specs: Mapping[str, KVCacheSpec],
    distinct: Sequence[KVCacheSpec],
    target: int,
    target_layer: str,
    rules: Sequence[Rule],
    ctx: PlanContext,
    ask: Asker,
) -> Mapping[str, KVCacheSpec]:
    """:func:`_unified_layer_by_layer`'s result and decision log, without a Python call per
    layer: the rules are asked at the first layer of each ``distinct`` spec (in layer order, equal
    specs sharing the answer), then every other layer's copies of its spec's decisions are made
    at once and put between those first layers' records, so the log reads as if each layer had
    been asked in turn. For a model whose layers share a few spec objects (the usual case)."""
    names, values = list(specs), list(specs.values())
    log = ask.decisions.entries  # not listening (see unify_pages): copies may stay unmade
    base = len(log)
    by_equal: dict[KVCacheSpec, Answer] = {}
    answers: dict[int, Answer] = {}
    new: dict[int, KVCacheSpec] = {}
    firsts: list[tuple[int, int, int]] = []  # (first layer, its records' start and end in the log)
    for spec in distinct:
        answer = by_equal.get(spec, UNSEEN)
        if answer is UNSEEN:
            index = next(compress(count(), map(is_, values, repeat(spec))))
            start = len(log)
            try:
                answer = (
                    None
                    if spec.page_size_bytes == target
                    else _first(names[index], spec, target, target_layer, rules, ctx, ask)
                )
            except UnificationError:
                _interleave(log, base, [*firsts, (index, start, len(log))], names, values, answers, index)
                raise
            by_equal[spec] = answer
            firsts.append((index, start, len(log)))
        answers[id(spec)] = answer
        new[id(spec)] = spec if answer is None else answer[0]
    _interleave(log, base, firsts, names, values, answers, len(names))
    # a copy of the table (cheap: no hashing), read through the few replaced spec objects
    replaced = {key: spec for key, spec in new.items() if answers[key] is not None}
    return ReplacedSpecs(dict(specs), replaced)


def _interleave(
    log: list[Entry],
    base: int,
    firsts: Sequence[tuple[int, int, int]],
    names: Sequence[str],
    values: Sequence[KVCacheSpec],
    answers: Mapping[int, Answer],
    end: int,
) -> None:
    """Rewrite ``log[base:]`` (the first layers' records, ``firsts`` in layer order) to hold, up
    to layer ``end``, each other layer's copies of its spec's decisions in layer order."""
    answered = {
        key: () if answer is None else tuple(d.body for d in answer[1]) for key, answer in answers.items()
    }
    table = list(answered.values())  # each spec's answer, by its index among them
    kinds = dict(zip(answered, range(len(table)), strict=True))
    recorded = log[base:]
    del log[base:]
    done = 0
    for index, start, stop in sorted(firsts):
        if done < index:
            log.append(_copies(names, values, kinds, table, done, index))
        log.extend(recorded[start - base : stop - base])
        done = index + 1
    if done < end:
        log.append(_copies(names, values, kinds, table, done, end))


def _copies(
    names: Sequence[str],
    values: Sequence[KVCacheSpec],
    kinds: Mapping[int, int],
    table: Sequence[tuple[Body, ...]],
    start: int,
    stop: int,
) -> LayerCopies:
    """The decisions of layers ``start`` to ``stop`` (none of them a first layer), not made yet:
    ``kinds`` gives the index in ``table`` of each spec object's answer."""
    which = array("I", map(kinds.__getitem__, map(id, values[start:stop])))
    return LayerCopies(tuple(names[start:stop]), which, table)


def _unified_layer_by_layer(
    specs: Mapping[str, KVCacheSpec],
    target: int,
    target_layer: str,
    rules: Sequence[Rule],
    ctx: PlanContext,
    ask: Asker,
) -> dict[str, KVCacheSpec]:
    """Every layer's answer, asked once per distinct spec: a layer whose spec object was seen
    before costs one identity lookup (no spec hash, no page arithmetic) and one decision copy
    per rule asked. A layer already at the target page keeps its own spec object.

    The result starts as a copy of ``specs`` (copying a dict costs about what reading it does)
    in which only the layers whose spec changes get a new value."""
    by_equal: dict[KVCacheSpec, Answer] = {}
    by_id: dict[int, Answer] = {}
    out = dict(specs)
    copy_for = ask.decisions.add_for_layer
    for layer, spec in specs.items():
        hit = by_id.get(id(spec), UNSEEN)
        if hit is UNSEEN:
            hit = by_equal.get(spec, UNSEEN)
            if hit is UNSEEN:
                first = (
                    None
                    if spec.page_size_bytes == target
                    else _first(layer, spec, target, target_layer, rules, ctx, ask)
                )
                by_equal[spec] = by_id[id(spec)] = first
                if first is not None:
                    out[layer] = first[0]
                continue
            by_id[id(spec)] = hit
        if hit is not None:
            copy_for(hit[1], layer)
            out[layer] = hit[0]
    return out


#: a spec's answer: ``None`` (already at the target page) or the new spec and its decisions
Answer = tuple[KVCacheSpec, list[Decision]] | None
UNSEEN: Answer = (cast(KVCacheSpec, None), [])


def _first(
    layer: str,
    spec: KVCacheSpec,
    target: int,
    target_layer: str,
    rules: Sequence[Rule],
    ctx: PlanContext,
    ask: Asker,
) -> tuple[KVCacheSpec, list[Decision]]:
    """The rules asked for the first layer with this spec; its decisions recorded."""
    new, decisions = _unify_one(layer, spec, target, target_layer, rules, ctx, ask)
    for decision in decisions:
        ask.decisions.add(decision)
    return new, decisions
