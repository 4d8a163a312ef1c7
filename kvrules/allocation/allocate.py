"""Allocation: one worker of a plan as raw buffers and typed per-layer views (architecture §3).

``allocate(plan, device, worker, layout)`` places every layer of the worker in its buffer,
chooses a *view layout* for each layer, asks the registered allocators in ``(-priority, name)``
order which one handles ``device``, and lets that allocator make the buffers and the views.

Allocators and view layouts are plugins registered through the hook
``kvrules_register_allocators(registry)``: ``registry.add(allocator)`` for an :class:`Allocator`
and ``registry.add_view_layout(layout)`` for a :class:`ViewLayout`. This module never imports
torch; the built-in ``torch`` allocator does, lazily.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvrules.allocation.placement import Placement, placements_for
from kvrules.allocation.views import LayoutChoice, ViewLayout, resolve_view_layouts
from kvrules.decisions import Decision, DecisionLog
from kvrules.errors import AllocationError, KVRulesError, PluginError
from kvrules.plan import Plan
from kvrules.plugin.manager import KVRulesPluginManager, default_plugin_manager
from kvrules.plugin.registry import AllocatorRegistry, NamedPlugin
from kvrules.plugin.rules import Check
from kvrules.units import format_size


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
class Allocation:
    """One worker of a plan, allocated (architecture §3).

    :ivar buffers: ``buffers[i]`` backs KVCacheTensor ``i`` (int8); in a packed layout every
        entry is the same single allocation.
    :ivar views: layer name -> typed view, or a tuple of views (Mamba states, scales).
    :ivar placements: layer name -> where its pages lie.
    :ivar layouts: layer name -> the name of its view layout.
    :ivar decisions: what was chosen at stage ``allocate`` (allocator, view layouts).
    """

    plan: Plan
    worker: int
    device: str
    allocator: str
    buffers: tuple[Any, ...]
    views: Mapping[str, Any]
    placements: Mapping[str, Placement]
    layouts: Mapping[str, str]
    decisions: tuple[Decision, ...] = field(default=())

    @property
    def nbytes(self) -> int:
        """Bytes allocated, each distinct allocation counted once."""
        seen: dict[int, int] = {}
        for buf in self.buffers:
            seen[id(buf)] = int(buf.numel()) * int(buf.element_size())
        return sum(seen.values())

    @property
    def num_blocks(self) -> int:
        """The plan's agreed number of blocks."""
        return self.plan.workers[self.worker].num_blocks

    def verify(self) -> None:
        """Check every view against the plan.

        Every view lies inside its buffer, its block dimension steps by the layer's block
        stride, and for every layer the views of block 0 cover exactly the bytes
        ``[offset, offset + unpadded page)`` of the page the plan assigns, each byte once; with
        the stride this holds for every block. Works on ``meta`` tensors (no data is read).

        :raises AllocationError: naming the layer, the view and the bytes that disagree.
        """
        from kvrules.allocation.verify import verify_allocation

        verify_allocation(self)

    def summary(self) -> dict[str, Any]:
        """A plain-JSON report: device, allocator, bytes, buffers, and layers per view layout."""
        per_layout: dict[str, int] = {}
        for name in self.layouts.values():
            per_layout[name] = per_layout.get(name, 0) + 1
        return {
            "worker": self.worker,
            "device": self.device,
            "allocator": self.allocator,
            "num_blocks": self.num_blocks,
            "buffers": len(self.buffers),
            "allocations": len({id(b) for b in self.buffers}),
            "allocated_bytes": self.nbytes,
            "layers": len(self.views),
            "view_layouts": per_layout,
        }


# -- the dispatcher --------------------------------------------------------------------------


def choose_allocator(
    registry: AllocatorRegistry, device: str, name: str | None, log: DecisionLog
) -> Allocator:
    """The allocator named ``name``, or the first in ``(-priority, name)`` order that supports ``device``."""
    candidates = registry.ordered()
    if name is not None:
        if name not in registry.items:
            raise AllocationError(
                f"unknown allocator {name!r}; available: {', '.join(sorted(registry.items)) or 'none'}"
            )
        candidates = [registry.items[name]]
    reasons = []
    for allocator in candidates:
        if not isinstance(allocator, Allocator):
            raise PluginError(
                f"allocator {allocator.name!r} ({registry.providers.get(allocator.name)}) does not derive "
                "from kvrules.allocation.Allocator"
            )
        try:
            check = allocator.supports(device)
        except KVRulesError:
            raise
        except Exception as exc:
            raise PluginError(
                f"allocator {allocator.name!r} ({registry.providers.get(allocator.name)}) raised "
                f"{type(exc).__name__} in supports({device!r}): {exc}"
            ) from exc
        if check.applies:
            log.record("allocate", allocator.name, "applied", check.reason)
            return allocator
        log.record("allocate", allocator.name, "declined", check.reason)
        reasons.append(f"{allocator.name}: {check.reason}")
    raise AllocationError(
        f"no allocator can allocate on device {device!r}; asked: {'; '.join(reasons) or 'none registered'}"
    )


def _check_result(
    allocator: Allocator, request: AllocationRequest, result: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    problem = ""
    if not (isinstance(result, tuple) and len(result) == 2):
        problem = f"returned {type(result).__name__}, not (buffers, views)"
    else:
        buffers, views = result
        if len(buffers) != len(request.backing):
            problem = f"returned {len(buffers)} buffers for {len(request.backing)} tensors"
        elif not isinstance(views, dict) or set(views) != {p.layer for p in request.placements}:
            problem = "returned views that do not match the worker's layers"
    if problem:
        raise PluginError(f"allocator {allocator.name!r} {problem}")
    return tuple(result[0]), dict(result[1])


def allocate(
    plan: Plan,
    device: Any,
    worker: int = 0,
    layout: LayoutChoice = None,
    *,
    allocator: str | None = None,
    plugin_manager: KVRulesPluginManager | None = None,
) -> Allocation:
    """Allocate worker ``worker`` of ``plan`` on ``device`` and build every layer's views.

    :param device: ``"cuda"``, ``"cuda:N"``, ``"cpu"``, ``"meta"`` (a dry run that allocates
        nothing), or whatever a registered allocator supports; a ``torch.device`` works too.
    :param layout: a view-layout name, or a mapping from layer or spec type name to one;
        ``None`` picks the default per spec (FlashAttention NHD for attention).
    :param allocator: force an allocator by name instead of the first that supports ``device``.
    :param plugin_manager: where allocators and view layouts come from (the default manager if omitted).
    :raises AllocationError: no allocator or view layout fits, or the device runs out of memory
        (what was already allocated is freed first).
    """
    pm = plugin_manager or default_plugin_manager()
    registry = pm.registries.allocators
    device_name = str(device)
    log = DecisionLog()
    placements, sizes, backing = placements_for(plan, worker)
    layouts = resolve_view_layouts(placements, registry, layout, log)
    chosen = choose_allocator(registry, device_name, allocator, log)
    request = AllocationRequest(plan, worker, device_name, sizes, backing, placements, layouts)
    try:
        result = chosen.allocate(request)
    except KVRulesError:
        raise
    except Exception as exc:
        traceback.clear_frames(exc.__traceback__)
        raise PluginError(
            f"allocator {chosen.name!r} ({registry.providers.get(chosen.name)}) raised "
            f"{type(exc).__name__} on {device_name!r}: {exc}"
        ) from exc
    try:
        buffers, views = _check_result(chosen, request, result)
    except PluginError as exc:
        del result
        traceback.clear_frames(exc.__traceback__)
        raise
    del result
    log.record(
        "allocate",
        chosen.name,
        "applied",
        f"Worker {worker} on {device_name!r}: {len(buffers)} buffers in {len(sizes)} allocation(s), "
        f"{sum(sizes)} bytes; {len(views)} layers viewed.",
    )
    return Allocation(
        plan=plan,
        worker=worker,
        device=device_name,
        allocator=chosen.name,
        buffers=buffers,
        views={p.layer: views[p.layer] for p in placements},
        placements={p.layer: p for p in placements},
        layouts={name: lay.name for name, lay in layouts.items()},
        decisions=tuple(log.items),
    )
