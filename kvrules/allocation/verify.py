"""Checks allocated views against the plan from shapes and strides alone (no data is read).

For every layer: each view lies on its buffer's storage and inside the buffer; one dimension of
each view has ``num_blocks`` entries stepping by the layer's block stride; and the bytes the
views of block 0 cover tile ``[offset, offset + unpadded page)`` exactly, each byte once. Since
block ``b`` is block 0 shifted by ``b`` block strides, the same then holds for every block.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import product
from math import prod
from typing import Any

from kvrules.errors import AllocationError
from kvrules.plugin.allocator import Placement

#: most separate byte runs one block of one view may have before the check gives up
MAX_RUNS = 1 << 20


Shape = tuple[int, ...]
RunCache = dict[tuple[Shape, Shape, int, int, int], list[tuple[int, int]]]


def _storage_key(tensor: Any) -> Any:
    storage = tensor.untyped_storage()
    return getattr(storage, "_cdata", None) or storage.data_ptr()


def _block_runs(
    layer: str, label: str, shape: Shape, stride: Shape, itemsize: int, place: Placement
) -> list[tuple[int, int]]:
    """Byte runs ``[start, end)`` of block 0 relative to the view's first byte (``stride`` in bytes)."""
    dims = [d for d, n in enumerate(shape) if n == place.num_blocks and stride[d] == place.block_stride]
    if not dims:
        raise AllocationError(
            f"layer {layer!r}: {label} (shape {shape}, byte strides {stride}) has no dimension of "
            f"{place.num_blocks} blocks stepping {place.block_stride} bytes, the layer's block stride"
        )
    # the other dimensions as (size, byte stride), the innermost first; those contiguous with
    # the element (and each other) make one run
    ordered = sorted(
        ((n, s) for d, (n, s) in enumerate(zip(shape, stride, strict=True)) if d != dims[0] and n > 1),
        key=lambda d: d[1],
    )
    run = itemsize
    while ordered and ordered[0][1] == run:
        size, step = ordered.pop(0)
        run = size * step
    count = prod(size for size, _ in ordered)
    if count > MAX_RUNS:
        raise AllocationError(
            f"layer {layer!r}: {label} covers one block in {count} separate pieces; too many to verify"
        )
    ranges = [range(size) for size, _ in ordered]
    strides = [stride for _, stride in ordered]
    starts = (sum(i * s for i, s in zip(index, strides, strict=True)) for index in product(*ranges))
    return [(start, start + run) for start in starts]


def _view_runs(
    layer: str, k: int, view: Any, buffer: Any, place: Placement, cache: RunCache
) -> list[tuple[int, int]]:
    label = f"view {k}"
    if getattr(view, "device", None) != getattr(buffer, "device", None) or _storage_key(view) != _storage_key(
        buffer
    ):
        raise AllocationError(f"layer {layer!r}: {label} is not a view of buffer {place.tensor}")
    itemsize = int(view.element_size())
    shape = tuple(int(n) for n in view.shape)
    stride = tuple(int(s) * itemsize for s in view.stride())
    if not shape or min(shape) == 0:
        raise AllocationError(f"layer {layer!r}: {label} has shape {shape}; a view must hold the blocks")
    base = int(view.storage_offset()) * itemsize - int(buffer.storage_offset()) * int(buffer.element_size())
    low = base + sum((n - 1) * s for n, s in zip(shape, stride, strict=True) if s < 0)
    high = base + sum((n - 1) * s for n, s in zip(shape, stride, strict=True) if s > 0) + itemsize
    size = int(buffer.numel()) * int(buffer.element_size())
    if low < 0 or high > size:
        raise AllocationError(
            f"layer {layer!r}: {label} (shape {shape}, byte strides {stride}) spans bytes [{low}, {high}) "
            f"outside buffer {place.tensor} of {size} bytes"
        )
    key = (shape, stride, itemsize, place.num_blocks, place.block_stride)
    relative = cache.get(key)
    if relative is None:
        relative = cache[key] = _block_runs(layer, label, shape, stride, itemsize, place)
    return [(base + low_, base + high_) for low_, high_ in relative]


def _check_tiling(layer: str, runs: list[tuple[int, int]], place: Placement) -> None:
    start = place.page_start(0)
    end = start + place.content_bytes
    page = place.spec.page_size_bytes
    where = (
        f"the plan assigns bytes [{start}, {end}) of block 0's {page}-byte page in buffer {place.tensor}"
        + (f" (padding tail [{end}, {start + page}) is never viewed)" if page > place.content_bytes else "")
    )
    cursor = start
    for low, high in sorted(runs):
        if low < cursor:
            raise AllocationError(f"layer {layer!r}: its views cover byte {low} more than once; {where}")
        if low > cursor:
            raise AllocationError(
                f"layer {layer!r}: its views leave bytes [{cursor}, {low}) uncovered or reach outside; {where}"
            )
        cursor = high
    if cursor < end:
        raise AllocationError(f"layer {layer!r}: its views leave bytes [{cursor}, {end}) uncovered; {where}")
    if cursor > end:
        raise AllocationError(
            f"layer {layer!r}: its views reach byte {cursor}, past the page's content; {where}"
        )


def verify_views(
    placements: Mapping[str, Placement],
    views_by_layer: Mapping[str, Any],
    buffers: Sequence[Any],
    layouts: Mapping[str, str] | None = None,
) -> None:
    """Check every layer's views against where the plan places its pages (see the module docstring).

    :param placements: layer name -> where its pages lie; every one of them is checked.
    :param views_by_layer: layer name -> its view, or a tuple of views.
    :param buffers: ``buffers[i]`` backs ``Placement.tensor == i``.
    :param layouts: layer name -> the view layout that built its views (named in the error).
    :raises AllocationError: naming the layer, the view, the bytes that disagree and, with
        ``layouts``, the view layout that built them.
    """
    cache: RunCache = {}
    for layer, place in placements.items():
        views = views_by_layer.get(layer)
        try:
            if views is None:
                raise AllocationError(f"layer {layer!r} has no view")
            buffer = buffers[place.tensor]
            runs: list[tuple[int, int]] = []
            for k, view in enumerate(views if isinstance(views, tuple) else (views,)):
                runs.extend(_view_runs(layer, k, view, buffer, place, cache))
            _check_tiling(layer, runs, place)
        except AllocationError as error:
            if layouts is None or layer not in layouts:
                raise
            raise AllocationError(f"{error} (views built by view layout {layouts[layer]!r})") from None


__all__ = ["MAX_RUNS", "verify_views"]
