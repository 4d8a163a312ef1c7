"""Stage ``layout``: per worker, the first active tensor layout that holds its groups, the
``num_gpu_blocks_override``, the tensors for its blocks, and the agreement on one block count."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from kvrules.config import EngineConfig
from kvrules.errors import CapacityError, GroupingError
from kvrules.plan import BackingTensor, KVCacheGroup, KVCacheTensor, WorkerPlan
from kvrules.plugin.ask import Asker
from kvrules.plugin.context import PlanContext
from kvrules.plugin.rules import Rule
from kvrules.values import MAX_BLOCKS, MAX_BYTES, shown


@dataclass(frozen=True)
class WorkerLayout:
    """One worker between choosing its layout and making its tensors.

    :ivar layout: the layout rule, or ``None`` when the worker holds no KV-cache layer.
    :ivar memory: bytes the worker plans against (after the override).
    :ivar block_bytes: bytes one block costs on the worker across its tensors.
    """

    index: int
    groups: tuple[KVCacheGroup, ...]
    layout: Rule | None
    memory: int
    block_bytes: int


def choose_layouts(
    projected: Sequence[tuple[KVCacheGroup, ...]], memories: Sequence[int], ctx: PlanContext, ask: Asker
) -> list[WorkerLayout]:
    """For each worker the first active layout whose guard holds, and what one block costs.

    :raises GroupingError: no active layout can hold a worker's groups.
    """
    out = []
    for index, (groups, memory) in enumerate(zip(projected, memories, strict=True)):
        if not any(g.layer_names for g in groups):
            ask.record("layout", "layout", "declined", f"Worker {index} holds no KV-cache layer; no tensors.")
            out.append(WorkerLayout(index, groups, None, memory, 0))
            continue
        asked = ask.first(
            ctx.strategies.rules("layout"), "layout", (groups, ctx), note=f"Worker {index}: ".__add__
        )
        rule = asked.found
        if rule is None:
            raise GroupingError(f"no active layout can hold worker {index}'s groups; asked: {asked.said}")
        block = ask.block_bytes(rule, groups)
        ask.record(
            "layout",
            rule.name,
            "applied",
            f"Worker {index}: {asked.check.reason} One block costs {block} bytes.",
        )
        out.append(WorkerLayout(index, groups, rule, memory, block))
    return out


def apply_override(workers: Sequence[WorkerLayout], ctx: PlanContext, ask: Asker) -> list[WorkerLayout]:
    """With ``num_gpu_blocks_override = N``, each worker's memory becomes N blocks' bytes.

    :raises CapacityError: N blocks take more than :data:`~kvrules.values.MAX_BYTES` on a worker
        (its tensors could not be made), naming the worker, N, the block's bytes and the product.
    """
    override = ctx.config.num_gpu_blocks_override
    if override is None:
        return list(workers)
    out = []
    for worker in workers:
        if worker.layout is None:
            out.append(worker)
            continue
        memory = override * worker.block_bytes
        if memory > MAX_BYTES:
            raise CapacityError(
                f"num_gpu_blocks_override={shown(override)} blocks x {worker.block_bytes} bytes per block "
                f"= {shown(memory)} bytes on worker {worker.index}, more than {MAX_BYTES} bytes (the "
                f"largest tensor torch can hold); use at most {MAX_BYTES // worker.block_bytes} blocks",
                needed_bytes=memory,
                available_bytes=MAX_BYTES,
            )
        ask.record(
            "capacity",
            "num-gpu-blocks-override",
            "applied",
            f"Worker {worker.index}: memory {worker.memory} bytes replaced by {override} blocks x "
            f"{worker.block_bytes} bytes = {memory} bytes.",
        )
        out.append(replace(worker, memory=memory))
    return out


def own_blocks(worker: WorkerLayout, ask: Asker) -> int:
    """Blocks the worker's memory alone gives, at most :data:`~kvrules.values.MAX_BLOCKS` (the
    most blocks a pool may have; capping is recorded as a decision).

    :raises CapacityError: less than one block fits.
    """
    blocks = worker.memory // worker.block_bytes
    if blocks <= 0:
        raise CapacityError(
            f"worker {worker.index} has {worker.memory} bytes, less than one block "
            f"({worker.block_bytes} bytes); give the KV cache more memory",
            needed_bytes=worker.block_bytes,
            available_bytes=worker.memory,
        )
    if blocks > MAX_BLOCKS:
        ask.record(
            "layout",
            "max-blocks",
            "applied",
            f"Worker {worker.index}: {worker.memory} bytes give {blocks} blocks of {worker.block_bytes} "
            f"bytes; a pool holds at most {MAX_BLOCKS} blocks, so {MAX_BLOCKS} are used.",
        )
        return MAX_BLOCKS
    return blocks


def backing_of(
    worker: WorkerLayout, num_blocks: int, config: EngineConfig, ask: Asker
) -> tuple[BackingTensor, ...]:
    """vLLM 0.33's form of the worker's placement, from a layout that places one backing
    allocation (it has a ``backing(groups, num_blocks, layout)`` method, ``layout`` being the
    KV-cache layout these groups are planned against, :meth:`EngineConfig.layout_for`); empty
    for any other layout.

    :raises PluginError: the layout's ``backing`` raised, or did not return a tuple of
        :class:`BackingTensor` (naming the layout).
    """
    if worker.layout is None or not callable(getattr(worker.layout, "backing", None)):
        return ()
    specs = (s for g in worker.groups for s in g.spec.members(g.layer_names).values())
    return ask.backing(worker.layout, worker.groups, num_blocks, config.layout_for(specs)[0])


def lay_out(
    workers: Sequence[WorkerLayout],
    ctx: PlanContext,
    ask: Asker,
) -> list[WorkerPlan]:
    """Every worker's tensors, all sized for the smallest block count any worker gives."""
    own = {w.index: own_blocks(w, ask) for w in workers if w.layout is not None}
    if not own:
        return [WorkerPlan(1, (), w.groups, "", w.memory, 1) for w in workers]
    agreed = min(own.values())
    plans = []
    for worker in workers:
        if worker.layout is None:
            plans.append(WorkerPlan(agreed, (), worker.groups, "", worker.memory, 0))
            continue
        blocks = own[worker.index]
        tensors = ask.tensors(worker.layout, worker.groups, blocks, worker.memory)
        if blocks != agreed:
            tensors = tuple(
                KVCacheTensor(t.size // blocks * agreed, t.shared_by, t.offset, t.block_stride)
                for t in tensors
            )
        plans.append(
            WorkerPlan(
                agreed,
                tensors,
                worker.groups,
                worker.layout.name,
                worker.memory,
                blocks,
                backing_of(worker, agreed, ctx.config, ask),
            )
        )
    if len(workers) > 1:
        ask.record(
            "layout",
            "agree-num-blocks",
            "applied",
            f"Workers give {', '.join(map(str, own.values()))} blocks; all use the smallest, {agreed}.",
        )
    return plans
