"""Where the bytes go: real state versus padding, for one request of ``max_model_len``.

For every group ``g`` on a worker, one request holds ``B_g`` blocks of the group
(its spec's ``blocks_per_request``), and each block reserves ``block_bytes`` bytes
across the worker's tensors (the layout's bytes per block). Of those bytes:

* real: each layer ``l`` of ``g`` uses ``n_l`` pages (``B_g`` for a shared pool; its own
  page count in a uniform-type group) of ``unpadded_page_size_bytes`` each: the state
  (``real_page_size_bytes``) and, for per-token-head quantised modes, its scales;
* page padding: the same pages' padding (``page_size_bytes - unpadded_page_size_bytes``);
* slot padding: everything else reserved (padding slots of shorter groups, pages a uniform-type
  member does not need, slack of a packed block).

``real + page padding + slot padding = allocated`` exactly. Efficiency is real *state* over
allocated, ``(real - scales) / allocated``: quantisation scales are not state, as the spec types
define it (``KVCacheSpec.real_page_size_bytes``). The ideal capacity is what the same memory would
hold with no padding at all (scales included: a request cannot do without them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kvrules.config import EngineConfig
from kvrules.plan import KVCacheGroup, WasteReport, WorkerWaste
from kvrules.plugin.ask import Asker
from kvrules.specs.asked import blocks_of
from kvrules.specs.base import KVCacheSpec


def worker_waste(
    groups: Sequence[KVCacheGroup], block_bytes: int, config: EngineConfig, ask: Asker | None = None
) -> WorkerWaste:
    """Real and padding bytes of one request on a worker whose blocks cost ``block_bytes``.

    With ``ask``, every spec's answers are asked through it: a spec type answering wrongly here
    (a later call) is a :class:`~kvrules.PluginError` naming that spec type's plugin."""

    def value(spec: KVCacheSpec, attribute: str) -> int:
        return int(ask.value("spec-type", spec, attribute) if ask is not None else getattr(spec, attribute))

    # spec object -> (blocks per request, unpadded page, its scales, its padding), asked once each
    # (groups share spec objects: vLLM's split of a draft model makes a thousand groups of three)
    facts: dict[int, tuple[int, int, int, int]] = {}

    def of(spec: KVCacheSpec) -> tuple[int, int, int, int]:
        known = facts.get(id(spec))  # the groups keep every spec alive meanwhile
        if known is None:
            unpadded = value(spec, "unpadded_page_size_bytes")
            known = facts[id(spec)] = (
                ask.blocks(spec, config) if ask is not None else blocks_of(spec, config),
                unpadded,
                unpadded - value(spec, "real_page_size_bytes"),
                value(spec, "padding_bytes"),
            )
        return known

    allocated = real = page_padding = scales = 0
    for group in groups:
        spec = group.spec
        if spec.has_members and not group.layer_names:
            continue
        # a pooled group's layers all hold its spec: count them at once
        members = spec.members(group.layer_names).values() if spec.has_members else (spec,)
        weight = 1 if spec.has_members else len(group.layer_names)
        for member in members:
            blocks, unpadded, scale, padding = of(member)
            pages = blocks * weight
            real += pages * unpadded
            scales += pages * scale
            page_padding += pages * padding
        allocated += of(spec)[0] * block_bytes
    return WorkerWaste(
        block_bytes, allocated, real, page_padding, allocated - real - page_padding, scale_bytes=scales
    )


def padding_slots(groups: Sequence[KVCacheGroup]) -> int:
    """Empty slots when pooled groups are shorter than the longest group."""
    pooled = [g for g in groups if not g.spec.has_members]
    if not pooled:
        return 0
    size = max(len(g.layer_names) for g in pooled)
    return sum(size - len(g.layer_names) for g in pooled)


def waste_report(
    workers: Sequence[tuple[Sequence[KVCacheGroup], int, int]],
    groups: Sequence[KVCacheGroup],
    config: EngineConfig,
    ask: Asker | None = None,
) -> WasteReport:
    """Build the report from ``(projected groups, block_bytes, memory)`` per worker (spec
    answers asked through ``ask`` when given, see :func:`worker_waste`)."""
    per_worker = tuple(worker_waste(g, block, config, ask) for g, block, _ in workers)
    ideal = math.inf
    for (_, _, memory), waste in zip(workers, per_worker, strict=True):
        if waste.real_bytes > 0:
            ideal = min(ideal, memory / waste.real_bytes)
    tokens = 0 if math.isinf(ideal) else math.floor(ideal * config.max_model_len)
    return WasteReport(per_worker, padding_slots(groups), ideal, tokens)
