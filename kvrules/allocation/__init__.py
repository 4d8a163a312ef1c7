"""Allocation: turn one worker of a plan into buffers and per-layer views through an allocator plugin.

``allocate()`` asks the registered allocators, ``placement`` says where each layer's pages lie,
``views`` resolves the per-backend view layouts, ``verify`` checks views against placements.
"""

from kvrules.allocation.allocate import Allocation, allocate, choose_allocator
from kvrules.allocation.placement import placements_for
from kvrules.allocation.views import resolve_view_layouts
from kvrules.plugin.allocator import AllocationRequest, Allocator, LayoutChoice, Placement, ViewLayout

__all__ = [
    "Allocation",
    "AllocationRequest",
    "Allocator",
    "LayoutChoice",
    "Placement",
    "ViewLayout",
    "allocate",
    "choose_allocator",
    "placements_for",
    "resolve_view_layouts",
]
