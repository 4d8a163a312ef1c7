"""Where each layer's pages lie in a worker's buffers, read from the plan's tensors."""

from __future__ import annotations

from kvrules.errors import AllocationError
from kvrules.plan import KVCacheTensor, Plan
from kvrules.plugin.allocator import Placement
from kvrules.specs.base import KVCacheSpec
from kvrules.values import as_bytes


def placements_for(plan: Plan, worker: int) -> tuple[tuple[Placement, ...], tuple[int, ...], tuple[int, ...]]:
    """Where every layer of ``worker`` lies: ``(placements, allocation sizes, backing)``.

    :raises AllocationError: the worker does not exist, a tensor's size, offset or stride is not
        an int from 0 to :data:`~kvrules.values.MAX_BYTES` (a plan edited by hand: checked here,
        before any allocator is asked), or its tensors contradict its specs.
    """
    if isinstance(worker, bool) or not isinstance(worker, int) or not 0 <= worker < len(plan.workers):
        raise AllocationError(
            f"worker={worker!r} is not a worker of this plan; it has workers 0..{len(plan.workers) - 1}"
        )
    wplan = plan.workers[worker]
    tensors = wplan.tensors
    # every block takes at least one byte of a buffer: no more blocks than bytes
    as_bytes(wplan.num_blocks, f"worker {worker}: num_blocks", error=AllocationError)
    for index, tensor in enumerate(tensors):
        for name in ("size", "offset", "block_stride"):
            as_bytes(
                getattr(tensor, name), f"tensor {index} of worker {worker}: {name}", error=AllocationError
            )
    packed = [t for t in tensors if t.block_stride > 0]
    if packed and len(packed) != len(tensors):
        raise AllocationError(
            f"worker {worker} mixes packed (block_stride > 0) and plain tensors; a packed layout "
            "must pack every tensor of the worker"
        )
    if packed and len({(t.size, t.block_stride) for t in packed}) != 1:
        raise AllocationError(
            f"worker {worker}'s packed tensors disagree on size or block_stride "
            f"{sorted({(t.size, t.block_stride) for t in packed})}; they must alias one allocation"
        )
    sizes = (packed[0].size,) if packed else tuple(t.size for t in tensors)
    backing = tuple(0 if packed else i for i in range(len(tensors)))
    found: dict[str, Placement] = {}
    for index, tensor in enumerate(tensors):
        for layer in tensor.shared_by:
            spec = plan.specs.get(layer)
            if spec is None:
                raise AllocationError(
                    f"tensor {index} of worker {worker} names layer {layer!r}, which has no spec"
                )
            if layer in found:
                raise AllocationError(
                    f"layer {layer!r} is in tensors {found[layer].tensor} and {index} of worker {worker}; "
                    "a layer's pages live in one tensor"
                )
            found[layer] = _placement(layer, spec, index, tensor, wplan.num_blocks)
    missing = [n for n in wplan.layer_names() if n not in found]
    if missing:
        raise AllocationError(
            f"layer(s) {', '.join(missing[:3])} of worker {worker}'s groups are in no tensor; the plan is inconsistent"
        )
    order = {name: i for i, name in enumerate(plan.specs)}
    placements = tuple(sorted(found.values(), key=lambda p: order.get(p.layer, len(order))))
    return placements, sizes, backing


def _placement(
    layer: str, spec: KVCacheSpec, index: int, tensor: KVCacheTensor, num_blocks: int
) -> Placement:
    page, size, offset, block_stride = spec.page_size_bytes, tensor.size, tensor.offset, tensor.block_stride
    if block_stride > 0:
        blocks = size // block_stride
        if offset + page > block_stride:
            raise AllocationError(
                f"layer {layer!r}: its page ({page} bytes at offset {offset}) does not fit in the packed "
                f"block stride of {block_stride} bytes"
            )
        return Placement(layer, spec, index, offset, block_stride, blocks)
    if page * num_blocks > size:
        raise AllocationError(
            f"layer {layer!r}: tensor {index} has {size} bytes, less than num_blocks {num_blocks} x page "
            f"{page} bytes = {num_blocks * page}; the plan is inconsistent"
        )
    return Placement(layer, spec, index, 0, page, num_blocks)


__all__ = ["placements_for"]
