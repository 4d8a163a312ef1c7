"""Where the bytes go: real state versus padding, for one request of ``max_model_len``.

For every group ``g`` on a worker, one request holds ``B_g`` blocks of the group
(:func:`~kvrules.capacity.blocks_per_request`), and each block reserves ``block_bytes`` bytes
across the worker's tensors (the layout's bytes per block). Of those bytes:

* real state: each layer ``l`` of ``g`` uses ``n_l`` pages (``B_g`` for a shared pool; its own
  page count in a uniform-type group) of ``unpadded_page_size_bytes`` each;
* page padding: the same pages' padding (``page_size_bytes - unpadded_page_size_bytes``);
* slot padding: everything else reserved (padding slots of shorter groups, pages a uniform-type
  member does not need, slack of a packed block).

``real + page padding + slot padding = allocated`` exactly; efficiency is ``real / allocated``;
the ideal capacity is what the same memory would hold with no padding at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kvrules.config import EngineConfig
from kvrules.pipeline.capacity import blocks_per_request
from kvrules.plan import KVCacheGroup, WasteReport, WorkerWaste
from kvrules.specs.base import cdiv
from kvrules.specs.uniform import UniformTypeKVCacheSpecs


def worker_waste(groups: Sequence[KVCacheGroup], block_bytes: int, config: EngineConfig) -> WorkerWaste:
    """Real and padding bytes of one request on a worker whose blocks cost ``block_bytes``."""
    allocated = real = page_padding = 0
    for group in groups:
        spec = group.spec
        if isinstance(spec, UniformTypeKVCacheSpecs):
            if not group.layer_names:
                continue
            blocks = spec.blocks_per_request(config)
            for member in spec.kv_cache_specs.values():
                pages = cdiv(member.max_memory_usage_bytes(config), member.page_size_bytes)
                real += pages * member.unpadded_page_size_bytes
                page_padding += pages * (member.page_size_bytes - member.unpadded_page_size_bytes)
        else:
            blocks = blocks_per_request(spec, config)
            real += blocks * len(group.layer_names) * spec.unpadded_page_size_bytes
            page_padding += blocks * len(group.layer_names) * spec.padding_bytes
        allocated += blocks * block_bytes
    return WorkerWaste(block_bytes, allocated, real, page_padding, allocated - real - page_padding)


def padding_slots(groups: Sequence[KVCacheGroup]) -> int:
    """Empty slots when shared-pool groups are shorter than the longest group."""
    plain = [g for g in groups if not isinstance(g.spec, UniformTypeKVCacheSpecs)]
    if not plain:
        return 0
    size = max(len(g.layer_names) for g in plain)
    return sum(size - len(g.layer_names) for g in plain)


def waste_report(
    workers: Sequence[tuple[Sequence[KVCacheGroup], int, int]],
    groups: Sequence[KVCacheGroup],
    config: EngineConfig,
) -> WasteReport:
    """Build the report from ``(projected groups, block_bytes, memory)`` per worker."""
    per_worker = tuple(worker_waste(g, block, config) for g, block, _ in workers)
    ideal = math.inf
    for (_, _, memory), waste in zip(workers, per_worker, strict=True):
        if waste.real_bytes > 0:
            ideal = min(ideal, memory / waste.real_bytes)
    tokens = 0 if math.isinf(ideal) else math.floor(ideal * config.max_model_len)
    return WasteReport(per_worker, padding_slots(groups), ideal, tokens)
