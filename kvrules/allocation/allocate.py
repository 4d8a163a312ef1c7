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
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvrules.allocation.placement import placements_for
from kvrules.allocation.verify import verify_views
from kvrules.allocation.views import resolve_view_layouts
from kvrules.decisions import Decision, DecisionLog
from kvrules.errors import AllocationError, PluginError
from kvrules.plan import Plan, check_plan, was_planned
from kvrules.plugin.allocator import AllocationRequest, Allocator, LayoutChoice, Placement
from kvrules.plugin.ask import Asker
from kvrules.plugin.manager import KVRulesPluginManager, default_manager
from kvrules.plugin.registry import AllocatorRegistry
from kvrules.units import format_size


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
        return sum({id(buf): int(buf.numel()) * int(buf.element_size()) for buf in self.buffers}.values())

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

        :raises AllocationError: naming the layer, the view, the bytes that disagree and the view
            layout that built the views.
        """
        verify_views(self.placements, self.views, self.buffers, self.layouts)

    def summary(self) -> dict[str, Any]:
        """A plain-JSON report: device, allocator, bytes, buffers, and layers per view layout."""
        return {
            "worker": self.worker,
            "device": self.device,
            "allocator": self.allocator,
            "num_blocks": self.num_blocks,
            "buffers": len(self.buffers),
            "allocations": len({id(b) for b in self.buffers}),
            "allocated_bytes": self.nbytes,
            "layers": len(self.views),
            "view_layouts": dict(Counter(self.layouts.values())),
        }


# -- the dispatcher --------------------------------------------------------------------------


def choose_allocator(registry: AllocatorRegistry, device: str, name: str | None, ask: Asker) -> Allocator:
    """The allocator named ``name``, or the first in ``(-priority, name)`` order that supports ``device``."""
    candidates = registry.ordered()
    if name is not None:
        if name not in registry.items:
            raise AllocationError(
                f"unknown allocator {name!r}; available: {', '.join(sorted(registry.items)) or 'none'}"
            )
        candidates = [registry.items[name]]
    asked = ask.first(candidates, "allocate", (device,), kind="allocator", method="supports")
    if asked.found is not None:
        ask.record("allocate", asked.found.name, "applied", asked.check.reason)
        return asked.found  # type: ignore[no-any-return]
    raise AllocationError(
        f"no allocator can allocate on device {device!r}; asked: {'; '.join(asked.declined) or 'none registered'}"
    )


def _memory_answer(answer: object) -> tuple[int, int] | str | None:
    """An allocator's ``device_memory()`` answer as ``(free, total)``, ``None`` (it cannot
    tell), or the sentence saying how it breaks the contract."""
    if answer is None:
        return None
    if (
        isinstance(answer, tuple)
        and len(answer) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in answer)
    ):
        return int(answer[0]), int(answer[1])
    return f"{type(answer).__name__} {answer!r:.80}; it must return (free, total) as two ints >= 0, or None"


def check_free_memory(allocator: Allocator, request: AllocationRequest, ask: Asker) -> None:
    """Before the first buffer: the worker's bytes against the free memory the allocator reports
    for the device (``device_memory()``; the ``torch`` allocator: the CUDA driver's free memory,
    or on ``cpu`` ``MemAvailable`` or the cgroup's limit minus its usage where lower; nothing for
    ``meta``). No check when the allocator cannot tell.

    :raises AllocationError: the plan needs more than is free, with both figures and the fix.
    :raises PluginError: the allocator's answer breaks its contract.
    """
    needed = request.total_bytes
    if not needed:
        return
    memory = _memory_answer(ask.call("allocator", allocator, "device_memory", request.device))
    if isinstance(memory, str):
        raise ask.fault("allocator", allocator, f"answered device_memory({request.device!r}) with {memory}")
    if memory is None or needed <= memory[0]:
        return
    free, total = memory
    raise AllocationError(
        f"worker {request.worker}'s plan needs {format_size(needed)} ({needed} bytes) on "
        f"{request.device!r}, but the device has {format_size(free)} ({free} bytes) free of "
        f"{format_size(total)} ({total} bytes), as the {allocator.name} allocator reports; nothing was "
        f"allocated. Plan with at most the free memory: `kvrules allocate --memory 0.9` (a fraction "
        f"of it) or available_memory of at most {free} bytes, or free memory on the device first."
    )


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
    :raises ModelFileError: ``plan`` is not one ``Planner.plan`` returned in this process (read
        from a document or built by hand) and breaks a plan invariant (``kvrules.plan.plan_problem``).
    :raises AllocationError: no allocator or view layout fits; the plan needs more than the
        device has free (checked before the first buffer, when the allocator can tell); or the
        device runs out of memory (what was already allocated is freed first).
    """
    placements, sizes, backing = placements_for(plan, worker)  # refuses out-of-range values (D17)
    if not was_planned(plan):  # a plan from a document or built by hand: then its invariants
        check_plan(plan)
    registries = (plugin_manager or default_manager()).registries
    registry = registries.allocators
    device_name = str(device)
    ask = Asker(registries, DecisionLog())
    layouts = resolve_view_layouts(placements, registry, layout, ask)
    chosen = choose_allocator(registry, device_name, allocator, ask)
    request = AllocationRequest(plan, worker, device_name, sizes, backing, placements, layouts)
    check_free_memory(chosen, request, ask)
    try:
        buffers, views = ask.allocate(chosen, request)
    except PluginError as exc:
        traceback.clear_frames(exc.__traceback__)
        raise
    ask.record(
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
        decisions=ask.decisions.decisions(),
    )
