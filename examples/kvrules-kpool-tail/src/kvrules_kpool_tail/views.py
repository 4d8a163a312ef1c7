"""The ``kpool-ring`` view layout: how the kpool indexer kernel sees a tail page.

Keys are ``(num_blocks, block_size, num_kv_heads, head_size)``: token ``t`` of a request lives
in ring slot ``t % block_size`` of the request's one block. With ``head_size_v > 0`` the values
follow the keys inside the page and the view is ``(keys, values)``. Torch is imported lazily.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvrules import AllocationError, KVCacheSpec, KVQuantMode
from kvrules.plugin import Check, Placement, ViewLayout, applies, declines

from kvrules_kpool_tail.spec import KpoolTailSpec


@dataclass(frozen=True)
class KpoolRingView(ViewLayout):
    """Ring views of kpool-tail layers (see the module docstring)."""

    name: str = "kpool-ring"
    priority: int = 200
    description: str = (
        "kpool indexer ring: keys (num_blocks, block_size, heads, head_size), slot = token % block_size."
    )

    def supports(self, spec: KVCacheSpec) -> Check:
        if not isinstance(spec, KpoolTailSpec):
            return declines(f"{spec.type_name} is not a kpool-tail spec.")
        if spec.kv_quant_mode is not KVQuantMode.NONE:
            return declines(
                f"the kpool indexer kernel reads unquantised keys, not {spec.kv_quant_mode.name}."
            )
        return applies(
            f"a ring of {spec.block_size} slots x {spec.num_kv_heads} heads x {spec.head_size} {spec.dtype}."
        )

    def build(self, raw: Any, place: Placement) -> Any:
        import torch

        spec = place.spec
        if not isinstance(spec, KpoolTailSpec):
            raise AllocationError(f"layer {place.layer!r}: kpool-ring views only kpool-tail layers")
        dtype = getattr(torch, spec.dtype)
        item = spec.dtype_size
        if place.offset % item or place.block_stride % item:
            raise AllocationError(
                f"layer {place.layer!r}: offset {place.offset} and block stride {place.block_stride} "
                f"must be multiples of {item} bytes ({spec.dtype})"
            )
        usable = int(raw.numel()) - int(raw.numel()) % item
        typed = raw[:usable].view(dtype)
        bs, heads, stride = spec.block_size, spec.num_kv_heads, place.block_stride // item
        views = []
        start = place.offset // item
        for width in (spec.head_size, spec.head_size_v or 0):
            if width:
                shape = (place.num_blocks, bs, heads, width)
                views.append(torch.as_strided(typed, shape, (stride, heads * width, width, 1), start))
                start += bs * heads * width
        return views[0] if len(views) == 1 else tuple(views)
