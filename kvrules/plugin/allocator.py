"""The allocator extension points: :class:`Allocator` (device buffers) and :class:`ViewLayout`
(typed per-layer views over them), plus the data they are handed (:class:`AllocationRequest`,
:class:`Placement`). Plugins register both through ``kvrules_register_allocators(registry)``:
``registry.add(allocator)`` and ``registry.add_view_layout(layout)``.

What the core checks about their answers (:mod:`kvrules.plugin.ask`): ``supports()`` returns a
:class:`~kvrules.plugin.Check`; ``allocate()`` returns ``(buffers, views)`` with one buffer per
planned tensor, each of the planned size, and one view entry per layer of the worker.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvrules.errors import AllocationError
from kvrules.plan import Plan
from kvrules.plugin.rules import Check, NamedPlugin
from kvrules.specs.base import KVCacheSpec
from kvrules.units import format_size

#: what ``layout=`` accepts: one view-layout name, or a mapping from layer name or spec type
#: name (``"full_attention"``, ``"mamba"``, ...) to a view-layout name
LayoutChoice = str | Mapping[str, str] | None


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one layer's pages lie in its worker's buffers.

    The page of block ``b`` occupies bytes ``[page_start(b), page_start(b) + spec.page_size_bytes)``
    of buffer ``tensor``; a view covers exactly its first ``content_bytes`` (the padding tail of a
    padded page is never part of a view).
    """

    layer: str
    spec: KVCacheSpec
    tensor: int
    offset: int
    block_stride: int
    num_blocks: int

    @property
    def content_bytes(self) -> int:
        """Bytes of one page that the layer's views cover (the unpadded page)."""
        return self.spec.unpadded_page_size_bytes

    def page_start(self, block: int) -> int:
        """Byte offset of block ``block``'s page inside the buffer."""
        return self.offset + block * self.block_stride


@dataclass(frozen=True)
class AllocationRequest:
    """Everything an allocator needs to allocate one worker of a plan.

    :ivar sizes: bytes of each allocation to make, in order.
    :ivar backing: for KVCacheTensor ``i``, the index into ``sizes`` of the allocation backing it
        (in a packed layout every tensor is backed by allocation 0).
    :ivar placements: one per layer of the worker, in plan layer order.
    :ivar layouts: layer name -> the view layout chosen for it.
    """

    plan: Plan
    worker: int
    device: str
    sizes: tuple[int, ...]
    backing: tuple[int, ...]
    placements: tuple[Placement, ...]
    layouts: Mapping[str, ViewLayout]

    @property
    def total_bytes(self) -> int:
        """Bytes of all allocations together."""
        return sum(self.sizes)

    def tensor_layers(self, allocation_index: int) -> list[str]:
        """Layers whose pages live in allocation ``allocation_index`` (for messages)."""
        tensors = self.plan.workers[self.worker].tensors
        return [n for i, t in enumerate(tensors) if self.backing[i] == allocation_index for n in t.shared_by]


@dataclass(frozen=True)
class Allocator(NamedPlugin):
    """Turns a plan's tensors into device buffers and per-layer views.

    Subclasses implement :meth:`supports` and :meth:`buffer`; the default :meth:`allocate` makes
    every buffer with :meth:`buffer`, builds the views with each layer's view layout, and on any
    failure drops everything it made before raising (an out-of-memory error, recognised by
    :meth:`is_out_of_memory`, becomes an :class:`~kvrules.AllocationError` stating what was
    requested and what the device had). Override :meth:`allocate` to take over completely.
    """

    def supports(self, device: str) -> Check:
        """Whether this allocator can allocate on ``device``, with a sentence saying why."""
        raise NotImplementedError

    def device_memory(self, device: str) -> tuple[int, int] | None:
        """``(free, total)`` bytes of ``device``, or ``None`` when it has no such notion."""
        return None

    def buffer(self, nbytes: int, device: str) -> Any:
        """One zero-initialised int8 buffer of ``nbytes`` bytes on ``device``."""
        raise NotImplementedError

    def is_out_of_memory(self, error: BaseException) -> bool:
        """True when ``error`` (raised by :meth:`buffer`) means the device ran out of memory."""
        return False

    def build_views(self, request: AllocationRequest, buffers: Sequence[Any]) -> dict[str, Any]:
        """Layer name -> view(s), built by each layer's view layout over its buffer."""
        return {p.layer: request.layouts[p.layer].build(buffers[p.tensor], p) for p in request.placements}

    def allocate(self, request: AllocationRequest) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(buffers, views)``: ``buffers[i]`` backs KVCacheTensor ``i`` of the worker."""
        made: list[Any] = []
        free = self.device_memory(request.device) if request.sizes else None
        try:
            for nbytes in request.sizes:
                made.append(self.buffer(nbytes, request.device))
            buffers = tuple(made[i] for i in request.backing)
            return buffers, self.build_views(request, buffers)
        except BaseException as error:
            failed = len(made)
            done = sum(request.sizes[:failed])
            made.clear()
            buffers = ()
            traceback.clear_frames(error.__traceback__)
            if isinstance(error, Exception) and self.is_out_of_memory(error):
                raise AllocationError(_oom_message(self, request, failed, done, free, error)) from error
            raise


def _oom_message(
    allocator: Allocator,
    request: AllocationRequest,
    failed: int,
    done: int,
    free: tuple[int, int] | None,
    error: BaseException,
) -> str:
    layers = request.tensor_layers(failed)
    shown = ", ".join(layers[:3]) + (f", ... (+{len(layers) - 3})" if len(layers) > 3 else "")
    had = (
        f"the device had {format_size(free[0])} ({free[0]} bytes) free of {format_size(free[1])} "
        "when allocation started"
        if free is not None
        else "the allocator cannot tell how much memory the device had"
    )
    return (
        f"out of memory on {request.device!r} ({allocator.name} allocator) making buffer {failed + 1} of "
        f"{len(request.sizes)} ({request.sizes[failed]} bytes, for {shown}): worker {request.worker}'s plan "
        f"requests {format_size(request.total_bytes)} ({request.total_bytes} bytes) in "
        f"{len(request.sizes)} buffers; {had}. The {done} bytes already allocated were freed. "
        f"Plan with less memory (e.g. `kvrules allocate --memory 0.9` or a smaller available_memory). "
        f"[{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}]"
    )


@dataclass(frozen=True)
class ViewLayout(NamedPlugin):
    """How a layer's pages are seen as typed tensors (a backend's cache shape and strides).

    ``supports(spec)`` says whether the layout can view ``spec``'s page, and why; ``build(raw,
    place)`` returns the view (a tensor, or a tuple of tensors) over the int8 buffer ``raw``.
    Contract: block ``b`` of every returned tensor lies in bytes ``[place.page_start(b),
    place.page_start(b) + place.content_bytes)`` of ``raw``, and together the tensors cover those
    bytes exactly once (checked by :meth:`Allocation.verify`). With ``default`` set, the layout
    may be chosen automatically: the highest-priority default layout that supports a spec wins.
    """

    default: bool = True

    def supports(self, spec: KVCacheSpec) -> Check:
        """Whether this layout can view ``spec``'s pages, with a sentence saying why."""
        raise NotImplementedError

    def build(self, raw: Any, place: Placement) -> Any:
        """The view(s) of ``place.layer`` over ``raw`` (no copy, no allocation)."""
        raise NotImplementedError


__all__ = ["AllocationRequest", "Allocator", "LayoutChoice", "Placement", "ViewLayout"]
