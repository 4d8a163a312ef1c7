"""Built-in view layouts: how engines see a layer's pages as typed tensors (formulas.md §7.2).

Every layout keeps each block's bytes inside that block's page, so layers of different groups
(and Mamba states) can alias one buffer: the page of block ``b`` starts at ``offset + b *
block_stride`` and its views cover the unpadded page; the padding tail is never viewed.

* ``flash-attn-nhd`` / ``flash-attn-hnd``: ``(2, num_blocks, block_size, heads, head_size)``;
  physically ``[K | V]`` inside each page (vLLM's hybrid re-striding), so K and V of a block lie
  in its page for every model, Mamba or not;
* ``flashinfer-nhd`` / ``flashinfer-hnd``: ``(num_blocks, 2, block_size, heads, head_size)``;
* ``split-kv``: ``(k, v)`` of ``(num_blocks, block_size, heads, head_size[_v])`` when K and V
  head sizes differ;
* ``mla``: ``(num_blocks, stored tokens, head_size)`` (bytes per token for ``fp8_ds_mla``);
* ``mamba-states``: one view ``(num_blocks, *shape)`` per state, at running byte offsets.

Per-token-head quantised attention adds a float32 scale view ``[K scales | V scales]`` after
the K/V bytes of each page; the layer's value is then ``(kv, scales)``.

Each layout describes its views once per spec as :class:`Piece` s (dtype, shape, strides, byte
offset in the page; cached), so building a layer's views costs one ``as_strided`` per piece.
Torch is imported lazily, inside :meth:`PieceLayout.build`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from kvrules.allocation import Placement, ViewLayout
from kvrules.dtypes import dtype_size, to_torch
from kvrules.errors import AllocationError
from kvrules.plugin.rules import Check, applies, declines
from kvrules.specs.attention import AttentionSpec, MLAAttentionSpec, SlidingWindowMLASpec, quantized_head_dim
from kvrules.specs.base import KVCacheSpec, KVQuantMode
from kvrules.specs.mamba import MambaSpec

SCALE_DTYPE = "float32"

_CACHE: ContextVar[dict[tuple[Any, ...], Any] | None] = ContextVar("kvrules_view_cache", default=None)


@contextmanager
def view_cache() -> Iterator[None]:
    """Within the block, each buffer is reinterpreted as a dtype once and each spec's geometry is
    computed once (keys are object ids, valid while the plan and buffers are alive)."""
    token = _CACHE.set({})
    try:
        yield
    finally:
        _CACHE.reset(token)


def _typed(raw: Any, dtype: str, size: int) -> Any:
    cache = _CACHE.get()
    key = ("typed", id(raw), dtype)
    if cache is not None and key in cache:
        return cache[key]
    elements = int(raw.numel())
    typed = (raw if elements % size == 0 else raw[: elements - elements % size]).view(to_torch(dtype))
    if cache is not None:
        cache[key] = typed
    return typed


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major element strides of ``shape``."""
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


@dataclass(frozen=True, slots=True)
class Piece:
    """One typed view of a page: ``shape`` / ``stride`` (elements) without the block dimension,
    which is inserted at ``block_dim`` with the layer's block stride; ``offset`` is in bytes from
    the start of the layer's page."""

    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    block_dim: int
    offset: int


@dataclass(frozen=True, slots=True)
class _Geometry:
    pieces: tuple[tuple[str, int, tuple[int, ...], tuple[int, ...], int], ...]
    many: bool


def _geometry(layout: PieceLayout, spec: KVCacheSpec, block_stride: int, num_blocks: int) -> _Geometry:
    cache = _CACHE.get()
    key = ("geometry", id(layout), id(spec), block_stride, num_blocks)
    if cache is not None and key in cache:
        found: _Geometry = cache[key]
        return found
    geometry = _make_geometry(layout, spec, block_stride, num_blocks)
    if cache is not None:
        cache[key] = geometry
    return geometry


def _make_geometry(layout: PieceLayout, spec: KVCacheSpec, block_stride: int, num_blocks: int) -> _Geometry:
    pieces = layout.pieces(spec)
    out = []
    for piece in pieces:
        size = dtype_size(piece.dtype)
        if block_stride % size or piece.offset % size:
            raise AllocationError(
                f"{layout.name}: a {piece.dtype} view of a {spec.type_name} page needs its offset "
                f"({piece.offset}) and block stride ({block_stride}) in bytes to be multiples of {size}"
            )
        d = piece.block_dim
        shape = (*piece.shape[:d], num_blocks, *piece.shape[d:])
        stride = (*piece.stride[:d], block_stride // size, *piece.stride[d:])
        out.append((piece.dtype, size, shape, stride, piece.offset))
    return _Geometry(tuple(out), layout.returns_tuple(spec))


@dataclass(frozen=True)
class PieceLayout(ViewLayout):
    """A view layout described by :meth:`pieces`; :meth:`build` strides them over the buffer."""

    def pieces(self, spec: KVCacheSpec) -> tuple[Piece, ...]:
        """The typed views of one page of ``spec``, in the order they are returned."""
        raise NotImplementedError

    def returns_tuple(self, spec: KVCacheSpec) -> bool:
        """Whether the layer's value is a tuple of views (else the single piece itself)."""
        return True

    def build(self, raw: Any, place: Placement) -> Any:
        import torch

        geometry = _geometry(self, place.spec, place.block_stride, place.num_blocks)
        end = place.page_start(place.num_blocks - 1) + place.content_bytes
        if end > int(raw.numel()):
            raise AllocationError(
                f"layer {place.layer!r}: {place.num_blocks} blocks end at byte {end}, past buffer "
                f"{place.tensor} of {int(raw.numel())} bytes; the plan is inconsistent"
            )
        views = []
        for dtype, size, shape, stride, offset in geometry.pieces:
            start = place.offset + offset
            if start % size:
                raise AllocationError(
                    f"layer {place.layer!r}: a {dtype} view cannot start at byte {start}, not a multiple of {size}"
                )
            views.append(torch.as_strided(_typed(raw, dtype, size), shape, stride, start // size))
        return tuple(views) if geometry.many else views[0]


def _is_mla(spec: KVCacheSpec) -> bool:
    return isinstance(spec, (MLAAttentionSpec, SlidingWindowMLASpec))


def _scales(spec: AttentionSpec, kv_first: bool, heads_first: bool) -> Piece:
    """float32 ``[K scales | V scales]`` after the K/V bytes of each page."""
    bs, heads = spec.storage_block_size, spec.num_kv_heads
    token, head = (1, bs) if heads_first else (heads, 1)
    return Piece(
        SCALE_DTYPE,
        (2, bs, heads),
        (bs * heads, token, head),
        1 if kv_first else 0,
        spec.real_page_size_bytes,
    )


@dataclass(frozen=True)
class AttentionLayout(PieceLayout):
    """A K/V attention cache: FlashAttention (``kv_first``) or FlashInfer shape, NHD or HND order."""

    kv_first: bool = True
    heads_first: bool = False
    nvfp4: bool = False

    def supports(self, spec: KVCacheSpec) -> Check:
        if not isinstance(spec, AttentionSpec) or _is_mla(spec):
            return declines(f"{spec.type_name} is not a K/V attention spec.")
        if spec.head_size_v != spec.head_size:
            return declines(
                f"K and V head sizes differ ({spec.head_size} vs {spec.head_size_v}); use 'split-kv'."
            )
        if spec.kv_quant_mode is KVQuantMode.NVFP4 and not self.nvfp4:
            return declines("this backend has no NVFP4 KV cache; use 'flashinfer-nhd'.")
        shape = (
            "(2, num_blocks, block_size, heads, head_size)"
            if self.kv_first
            else "(num_blocks, 2, block_size, heads, head_size)"
        )
        order = "HND" if self.heads_first else "NHD"
        return applies(f"{spec.type_name} as {shape}, {order}; K and V of each block inside its page.")

    def returns_tuple(self, spec: KVCacheSpec) -> bool:
        return isinstance(spec, AttentionSpec) and spec.kv_quant_mode.is_per_token_head

    def pieces(self, spec: KVCacheSpec) -> tuple[Piece, ...]:
        if not isinstance(spec, AttentionSpec):
            raise AllocationError(f"{self.name} needs an attention spec, not {spec.type_name}")
        bs, heads = spec.storage_block_size, spec.num_kv_heads
        dim = quantized_head_dim(spec.head_size, spec.kv_quant_mode)
        token, head = (dim, bs * dim) if self.heads_first else (heads * dim, dim)
        kv = Piece(
            spec.dtype, (2, bs, heads, dim), (bs * heads * dim, token, head, 1), 1 if self.kv_first else 0, 0
        )
        if not spec.kv_quant_mode.is_per_token_head:
            return (kv,)
        return kv, _scales(spec, self.kv_first, self.heads_first)


@dataclass(frozen=True)
class SplitKVLayout(PieceLayout):
    """Separate K and V views, for attention whose K and V head sizes differ (DiffKV, openPangu)."""

    def supports(self, spec: KVCacheSpec) -> Check:
        if not isinstance(spec, AttentionSpec) or _is_mla(spec):
            return declines(f"{spec.type_name} is not a K/V attention spec.")
        return applies(
            f"{spec.type_name} as (k, v) of (num_blocks, block_size, heads, head_size) with head sizes "
            f"{spec.head_size} / {spec.head_size_v}; V follows K inside each page."
        )

    def pieces(self, spec: KVCacheSpec) -> tuple[Piece, ...]:
        if not isinstance(spec, AttentionSpec) or spec.head_size_v is None:
            raise AllocationError(f"{self.name} needs an attention spec, not {spec.type_name}")
        bs, heads = spec.storage_block_size, spec.num_kv_heads
        out = []
        offset = 0
        for head_size in (spec.head_size, spec.head_size_v):
            dim = quantized_head_dim(head_size, spec.kv_quant_mode)
            out.append(Piece(spec.dtype, (bs, heads, dim), (heads * dim, dim, 1), 0, offset))
            offset += bs * heads * dim * dtype_size(spec.dtype)
        if spec.kv_quant_mode.is_per_token_head:
            out.append(_scales(spec, False, False))
        return tuple(out)


@dataclass(frozen=True)
class MLALayout(PieceLayout):
    """One latent vector per stored token: ``(num_blocks, block_size // compress_ratio, width)``."""

    def supports(self, spec: KVCacheSpec) -> Check:
        if not isinstance(spec, AttentionSpec) or not _is_mla(spec):
            return declines(f"{spec.type_name} is not an MLA spec.")
        tokens = spec.storage_block_size
        unit = tokens * spec.num_kv_heads * dtype_size(spec.dtype)
        if spec.real_page_size_bytes % unit:
            return declines(
                f"its page of {spec.real_page_size_bytes} bytes is not a whole number of {spec.dtype} "
                f"elements per stored token and head ({tokens} tokens, {spec.num_kv_heads} heads)."
            )
        return applies(
            f"{spec.type_name} as (num_blocks, {tokens}, {spec.real_page_size_bytes // unit}) {spec.dtype}"
            + (f" per head ({spec.num_kv_heads} heads)." if spec.num_kv_heads > 1 else ".")
        )

    def returns_tuple(self, spec: KVCacheSpec) -> bool:
        return False

    def pieces(self, spec: KVCacheSpec) -> tuple[Piece, ...]:
        if not isinstance(spec, AttentionSpec):
            raise AllocationError(f"{self.name} needs an MLA spec, not {spec.type_name}")
        tokens, heads = spec.storage_block_size, spec.num_kv_heads
        width = spec.real_page_size_bytes // (tokens * heads * dtype_size(spec.dtype))
        if heads == 1:
            return (Piece(spec.dtype, (tokens, width), (width, 1), 0, 0),)
        return (Piece(spec.dtype, (tokens, heads, width), (heads * width, width, 1), 0, 0),)


@dataclass(frozen=True)
class MambaStatesLayout(PieceLayout):
    """One view per state tensor, back to back inside each page; the block stride is the page."""

    def supports(self, spec: KVCacheSpec) -> Check:
        if not isinstance(spec, MambaSpec):
            return declines(f"{spec.type_name} is not a Mamba spec.")
        offset = 0
        for shape, dtype, nbytes in zip(spec.shapes, spec.dtypes, spec.state_bytes, strict=True):
            if offset % dtype_size(dtype):
                return declines(
                    f"state {list(shape)} ({dtype}) would start at byte {offset}, not a multiple of "
                    f"{dtype_size(dtype)}; reorder the states."
                )
            offset += nbytes
        return applies(
            f"{len(spec.shapes)} state views (num_blocks, *shape) at byte offsets "
            f"{[p.offset for p in self.pieces(spec)]} of each {spec.page_size_bytes}-byte page."
        )

    def pieces(self, spec: KVCacheSpec) -> tuple[Piece, ...]:
        if not isinstance(spec, MambaSpec):
            raise AllocationError(f"{self.name} needs a Mamba spec, not {spec.type_name}")
        out = []
        offset = 0
        for shape, dtype, nbytes in zip(spec.shapes, spec.dtypes, spec.state_bytes, strict=True):
            out.append(Piece(dtype, shape, contiguous_strides(shape), 0, offset))
            offset += nbytes
        return tuple(out)


BUILTIN_VIEW_LAYOUTS: tuple[ViewLayout, ...] = (
    AttentionLayout(
        name="flash-attn-nhd",
        priority=100,
        description="FlashAttention (2, num_blocks, block_size, heads, head_size), NHD; the default.",
    ),
    AttentionLayout(
        name="flash-attn-hnd",
        priority=80,
        description="FlashAttention (2, num_blocks, block_size, heads, head_size), HND memory order.",
        heads_first=True,
    ),
    AttentionLayout(
        name="flashinfer-nhd",
        priority=90,
        description="FlashInfer (num_blocks, 2, block_size, heads, head_size), NHD; NVFP4 too.",
        kv_first=False,
        nvfp4=True,
    ),
    AttentionLayout(
        name="flashinfer-hnd",
        priority=70,
        description="FlashInfer (num_blocks, 2, block_size, heads, head_size), HND memory order.",
        kv_first=False,
        heads_first=True,
        nvfp4=True,
    ),
    SplitKVLayout(
        name="split-kv",
        priority=10,
        description="(k, v) views of (num_blocks, block_size, heads, head_size); K and V head sizes may differ.",
    ),
    MLALayout(
        name="mla",
        priority=100,
        description="MLA (num_blocks, block_size // compress_ratio, head_size), also DeepSeek fp8_ds_mla bytes.",
    ),
    MambaStatesLayout(
        name="mamba-states",
        priority=100,
        description="Mamba: one (num_blocks, *shape) view per state at running offsets inside each page.",
    ),
)

__all__ = [
    "BUILTIN_VIEW_LAYOUTS",
    "AttentionLayout",
    "MLALayout",
    "MambaStatesLayout",
    "Piece",
    "PieceLayout",
    "SplitKVLayout",
    "contiguous_strides",
    "view_cache",
]
