"""Capacity arithmetic: blocks per request, max concurrency, the largest length that fits."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from kvrules.config import EngineConfig
from kvrules.plan import KVCacheGroup
from kvrules.specs.base import KVCacheSpec, cdiv
from kvrules.specs.uniform import UniformTypeKVCacheSpecs

GiB = 1 << 30


def blocks_per_request(spec: KVCacheSpec, config: EngineConfig) -> int:
    """Blocks of its group one request of ``config.max_model_len`` needs."""
    if isinstance(spec, UniformTypeKVCacheSpecs):
        return spec.blocks_per_request(config)
    return cdiv(spec.max_memory_usage_bytes(config), spec.page_size_bytes)


def total_blocks_per_request(groups: Sequence[KVCacheGroup], config: EngineConfig) -> int:
    """Sum over groups of :func:`blocks_per_request`."""
    return sum(blocks_per_request(g.spec, config) for g in groups)


def max_concurrency(groups: Sequence[KVCacheGroup], num_blocks: int, config: EngineConfig) -> float:
    """Requests of ``max_model_len`` that ``num_blocks`` blocks hold at once (inf without groups)."""
    needed = total_blocks_per_request(groups, config)
    return float("inf") if needed == 0 else num_blocks / needed


def with_length(config: EngineConfig, length: int) -> EngineConfig:
    """``config`` with ``max_model_len`` replaced."""
    return dataclasses.replace(config, max_model_len=length)


def largest_fitting_length(upper: int, fits: Callable[[int], bool]) -> int:
    """The largest ``L`` in ``1..upper`` with ``fits(L)`` (``fits`` monotone), or 0 if none."""
    if fits(upper):
        return upper
    low, high = 0, upper  # fits(low) holds (vacuously for 0), fits(high) does not
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    return low


def gib(value: int) -> str:
    """Bytes as GiB with two decimals."""
    return f"{value / GiB:.2f} GiB"
