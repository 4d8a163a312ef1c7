"""Stage ``hidden``: layers sized after unification (vLLM 0.28's hidden-state cache) are kept out
of page unification and grouping, then re-sized to the other groups' common page, each in a
group of its own."""

from __future__ import annotations

import math
from collections.abc import Mapping

from kvrules.errors import GroupingError, SpecError
from kvrules.plan import KVCacheGroup
from kvrules.plugin.ask import Asker
from kvrules.specs.base import KVCacheSpec, distinct_specs

RULE = "unified-page"


def split_hidden_states(
    specs: Mapping[str, KVCacheSpec],
) -> tuple[dict[str, KVCacheSpec], Mapping[str, KVCacheSpec]]:
    """``(layers sized after unification, the others)``; the others are ``specs`` itself when
    there is none."""
    if not any(s.sized_after_unification for s in distinct_specs(specs.values())):
        return {}, specs
    hidden = {n: s for n, s in specs.items() if s.sized_after_unification}
    return hidden, {n: s for n, s in specs.items() if n not in hidden}


def aligned_specs(hidden: Mapping[str, KVCacheSpec], page: int, block: int) -> dict[str, KVCacheSpec]:
    """Every hidden-state layer's spec re-sized with :meth:`~kvrules.KVCacheSpec.aligned_to`,
    asked once per distinct spec (layers with equal specs share the answer)."""
    answers: dict[KVCacheSpec, KVCacheSpec] = {}
    out = {}
    for name, spec in hidden.items():
        new = answers.get(spec)
        if new is None:
            new = answers[spec] = spec.aligned_to(page, block)
        out[name] = new
    return out


def readd_hidden_states(
    hidden: Mapping[str, KVCacheSpec], groups: list[KVCacheGroup], ask: Asker
) -> tuple[list[KVCacheGroup], dict[str, KVCacheSpec]]:
    """``groups`` followed by one group per hidden-state layer, re-sized to the groups' common
    page and the gcd of their block sizes; and the re-sized specs.

    :raises GroupingError: there is no other group, or the other groups' pages differ.
    """
    if not hidden:
        return groups, {}
    pages = sorted({g.spec.page_size_bytes for g in groups})
    if len(pages) != 1:
        raise GroupingError(
            f"{RULE}: hidden-state layers {', '.join(hidden)} need the other groups to share one "
            f"page size, got {pages or 'no other group'}; add a KV-cache layer the hidden states can follow"
        )
    block = math.gcd(*(g.spec.block_size for g in groups))
    try:
        aligned = aligned_specs(hidden, pages[0], block)
    except SpecError as exc:
        raise GroupingError(f"{RULE}: {exc}") from None
    for name, spec in aligned.items():
        before = hidden[name]
        ask.record(
            "group",
            RULE,
            "applied",
            f"hidden-state layer kept out of page unification; block size {before.block_size} -> "
            f"{spec.block_size} so its page fits the common {spec.page_size_bytes}-byte page "
            f"({spec.padding_bytes} bytes of padding per block); its own group.",
            layer=name,
            before=before.summary(),
            after=spec.summary(),
            padding_bytes=spec.padding_bytes,
        )
    return [*groups, *(KVCacheGroup((name,), spec) for name, spec in aligned.items())], aligned
