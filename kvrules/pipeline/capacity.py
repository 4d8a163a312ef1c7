"""Stage ``capacity`` arithmetic: blocks per request, max concurrency, the largest length that fits.

Bounds that keep every figure here finite: a worker's memory is at most
:data:`~kvrules.values.MAX_BYTES` (``plan()``'s argument, and the ``num_gpu_blocks_override``
memory, are checked), so ``num_blocks <= MAX_BYTES``; ``max_model_len <= MAX_TOKENS``
(``EngineConfig``). Concurrency is then below ``2**63`` and capacity below ``2**104``, far inside
a float. Byte counts (which may be far larger: one request of a huge model) stay Python ints and
are printed with exact arithmetic (:func:`gib`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from fractions import Fraction

from kvrules.config import EngineConfig
from kvrules.errors import CapacityError, Fix
from kvrules.pipeline.layout import WorkerLayout
from kvrules.plan import KVCacheGroup
from kvrules.plugin.ask import Asker
from kvrules.specs.asked import blocks_of

GiB = 1 << 30


def total_blocks_per_request(groups: Sequence[KVCacheGroup], config: EngineConfig) -> int:
    """Blocks one request of ``config.max_model_len`` needs, summed over ``groups``."""
    return sum(blocks_of(g.spec, config) for g in groups)


def max_concurrency(
    groups: Sequence[KVCacheGroup], num_blocks: int, config: EngineConfig, ask: Asker | None = None
) -> float:
    """Requests of ``max_model_len`` that ``num_blocks`` blocks hold at once (inf without groups);
    ``num_blocks / needed`` is correctly rounded for any ints and at most ``num_blocks``. With
    ``ask``, every group spec's answer is asked through it and checked."""
    needed = (
        sum(ask.blocks(g.spec, config) for g in groups)
        if ask is not None
        else total_blocks_per_request(groups, config)
    )
    return float("inf") if needed == 0 else num_blocks / needed


def capacity_tokens(concurrency: float, length: int) -> int:
    """``floor(concurrency * length)``: tokens the blocks hold at once (0 without groups, where
    ``concurrency`` is infinite). With the module's bounds the product is below ``2**104``."""
    return 0 if math.isinf(concurrency) else math.floor(concurrency * length)


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
    """Bytes as GiB with two decimals, rounded half to even like ``f"{value / GiB:.2f}"`` but
    exact for any int (a float would overflow beyond ``2**1024`` bytes)."""
    hundredths = round(Fraction(value, GiB) * 100)
    sign = "-" if hundredths < 0 else ""
    whole, cents = divmod(abs(hundredths), 100)
    return f"{sign}{whole}.{cents:02d} GiB"


def reserves_null_block(worker: WorkerLayout, config: EngineConfig) -> bool:
    """``config.reserve_null_block`` when set, else what the worker's layout says (its
    ``reserves_null_block`` class attribute; vLLM 0.33's one-backing layouts reserve)."""
    if config.reserve_null_block is not None:
        return config.reserve_null_block
    return bool(getattr(worker.layout, "reserves_null_block", False))


def checked_memory(worker: WorkerLayout, config: EngineConfig) -> int:
    """Bytes the memory check and auto-fit may use on ``worker``: its memory, less one block's
    bytes when the null block is reserved (vLLM 0.33, ``kv_cache_planning.py:1533-1559``); the
    allocation still uses all of it."""
    if worker.layout is not None and reserves_null_block(worker, config):
        return max(worker.memory - worker.block_bytes, 0)
    return worker.memory


def fit_length(workers: Sequence[WorkerLayout], config: EngineConfig, ask: Asker) -> int:
    """The memory check: ``config.max_model_len`` when one request of it fits on every worker;
    with auto-fit, the largest length that does.

    :raises CapacityError: it does not fit (and auto-fit is off, or not even 1 token fits),
        naming the worker, the bytes needed and available, and the largest length that fits.
    """

    asked: dict[tuple[int, int], int] = {}  # each question asked once, so the answers agree

    def need(worker: WorkerLayout, length: int) -> int:
        if worker.layout is None:
            return 0
        key = (worker.index, length)
        if key not in asked:
            cfg = config if length == config.max_model_len else with_length(config, length)
            asked[key] = ask.request_bytes(worker.layout, worker.groups, cfg)
        return asked[key]

    memory = {w.index: checked_memory(w, config) for w in workers}
    for w in workers:
        if memory[w.index] != w.memory:
            ask.record(
                "capacity",
                "null-block",
                "applied",
                f"Worker {w.index}: one block ({w.block_bytes} bytes) is held back for the null "
                f"block; the memory check uses {memory[w.index]} of {w.memory} bytes.",
            )

    def fits(length: int) -> bool:
        return all(need(w, length) <= memory[w.index] for w in workers)

    target = config.max_model_len
    if fits(target):
        return target
    best = largest_fitting_length(target, fits)
    if config.auto_fit_max_model_len and best > 0:
        ask.record(
            "capacity",
            "auto-fit",
            "applied",
            f"max_model_len {target} does not fit; {best} is the largest length that fits on every worker.",
        )
        return best
    failing = next(w for w in workers if need(w, target) > memory[w.index])
    needed = need(failing, target)
    hint = (
        f"The largest max_model_len that fits is {best}." if best > 0 else "Not even a 1-token request fits."
    )
    more_memory = Fix("available_memory")
    fixes = (
        (Fix("max_model_len", best), more_memory, Fix("auto_fit_max_model_len", True))
        if best > 0
        else (more_memory,)
    )
    blocks = sum(ask.blocks(g.spec, config) for g in failing.groups)
    held = memory[failing.index] // failing.block_bytes
    ask.record("capacity", "memory-check", "failed", f"Worker {failing.index} needs {needed} bytes.")
    raise CapacityError(
        f"To serve one request of max_model_len {target}, worker {failing.index} needs "
        f"{gib(needed)} ({needed} bytes) of KV cache but has {gib(memory[failing.index])} "
        f"({memory[failing.index]} bytes): one request needs {blocks} blocks of "
        f"{failing.block_bytes} bytes, the memory holds {held}. {hint}",
        needed_bytes=needed,
        available_bytes=memory[failing.index],
        max_fitting_len=best,
        fixes=fixes,
    )
