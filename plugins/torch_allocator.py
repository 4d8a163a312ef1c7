"""Built-in plugin ``torch-allocator``: the ``torch`` allocator and the built-in view layouts.

The allocator makes one zero-initialised ``torch.int8`` buffer per allocation with
``torch.zeros`` on ``cuda``, ``cuda:N``, ``cpu`` or ``meta`` (a dry run: tensors with shapes
and strides but no memory, for plans of any size). Importing this module imports neither torch
nor CUDA; CUDA availability is checked only when a CUDA device is asked for.

The view layouts say how engines see a layer's pages as typed tensors (formulas.md §7.2). Every
layout keeps each block's bytes inside that block's page, so layers of different groups (and
Mamba states) can alias one buffer: the page of block ``b`` starts at ``offset + b *
block_stride`` and its views cover the unpadded page; the padding tail is never viewed. Which
layouts apply follows the spec's ``page_format`` (``kv``, ``latent``, ``state``):

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
offset in the page), so building a layer's views costs one ``as_strided`` per piece; while the
allocator builds one allocation's views, each buffer is reinterpreted as a dtype once and each
spec's geometry is computed once. Torch is imported lazily, inside :meth:`PieceLayout.build`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from kvrules import AllocationError, AttentionSpec, KVCacheSpec, KVQuantMode, MambaSpec, hookimpl
from kvrules.dtypes import dtype_size, to_torch
from kvrules.plugin import (
    AllocationRequest,
    Allocator,
    AllocatorRegistry,
    Check,
    Placement,
    ViewLayout,
    applies,
    declines,
)
from kvrules.specs import quantized_head_dim

# -- the view layouts ----------------------------------------------------------------------------
SCALE_DTYPE = "float32"
T = TypeVar("T")

_CACHE: ContextVar[dict[tuple[Any, ...], Any] | None] = ContextVar("kvrules_view_cache", default=None)


@contextmanager
def _view_cache() -> Iterator[None]:
    """Within the block, each buffer is reinterpreted as a dtype once and each spec's geometry is
    computed once (keys are object ids, valid while the plan and buffers are alive)."""
    token = _CACHE.set({})
    try:
        yield
    finally:
        _CACHE.reset(token)


def _cached(key: tuple[Any, ...], make: Callable[[], T]) -> T:
    """``make()``, made once per ``key`` inside :func:`_view_cache` (each time outside it)."""
    cache = _CACHE.get()
    if cache is None:
        return make()
    if key not in cache:
        cache[key] = make()
    found: T = cache[key]
    return found


def _typed(raw: Any, dtype: str, size: int) -> Any:
    def view() -> Any:
        elements = int(raw.numel())
        return (raw if elements % size == 0 else raw[: elements - elements % size]).view(to_torch(dtype))

    return _cached(("typed", id(raw), dtype), view)


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

        key = ("geometry", id(self), id(place.spec), place.block_stride, place.num_blocks)
        geometry = _cached(key, lambda: _geometry(self, place.spec, place.block_stride, place.num_blocks))
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


def _attention(layout: ViewLayout, spec: KVCacheSpec, what: str) -> AttentionSpec:
    """``spec`` as an attention spec (K/V or latent), else the layout's :class:`AllocationError`."""
    if not spec.is_attention:
        raise AllocationError(f"{layout.name} needs {what}, not {spec.type_name}")
    return cast(AttentionSpec, spec)


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
        if spec.page_format != "kv":
            return declines(f"{spec.type_name} is not a K/V attention spec.")
        spec = cast(AttentionSpec, spec)
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
        return spec.is_attention and cast(AttentionSpec, spec).kv_quant_mode.is_per_token_head

    def pieces(self, spec: KVCacheSpec) -> tuple[Piece, ...]:
        spec = _attention(self, spec, "an attention spec")
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
        if spec.page_format != "kv":
            return declines(f"{spec.type_name} is not a K/V attention spec.")
        spec = cast(AttentionSpec, spec)
        return applies(
            f"{spec.type_name} as (k, v) of (num_blocks, block_size, heads, head_size) with head sizes "
            f"{spec.head_size} / {spec.head_size_v}; V follows K inside each page."
        )

    def pieces(self, spec: KVCacheSpec) -> tuple[Piece, ...]:
        spec = _attention(self, spec, "an attention spec")
        if spec.head_size_v is None:
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
        if spec.page_format != "latent":
            return declines(f"{spec.type_name} is not an MLA spec.")
        spec = cast(AttentionSpec, spec)
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
        spec = _attention(self, spec, "an MLA spec")
        tokens, heads = spec.storage_block_size, spec.num_kv_heads
        width = spec.real_page_size_bytes // (tokens * heads * dtype_size(spec.dtype))
        shape = (tokens, width) if heads == 1 else (tokens, heads, width)
        return (Piece(spec.dtype, shape, contiguous_strides(shape), 0, 0),)


@dataclass(frozen=True)
class MambaStatesLayout(PieceLayout):
    """One view per state tensor, back to back inside each page; the block stride is the page."""

    def supports(self, spec: KVCacheSpec) -> Check:
        if spec.page_format != "state":
            return declines(f"{spec.type_name} is not a Mamba spec.")
        pieces = self.pieces(spec)
        for piece in pieces:
            if piece.offset % dtype_size(piece.dtype):
                return declines(
                    f"state {list(piece.shape)} ({piece.dtype}) would start at byte {piece.offset}, not a "
                    f"multiple of {dtype_size(piece.dtype)}; reorder the states."
                )
        return applies(
            f"{len(pieces)} state views (num_blocks, *shape) at byte offsets "
            f"{[p.offset for p in pieces]} of each {spec.page_size_bytes}-byte page."
        )

    def pieces(self, spec: KVCacheSpec) -> tuple[Piece, ...]:
        if spec.page_format != "state":
            raise AllocationError(f"{self.name} needs a Mamba spec, not {spec.type_name}")
        spec = cast(MambaSpec, spec)
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


# -- the allocator -------------------------------------------------------------------------------
DEVICE_PATTERN = re.compile(r"^(?:(cpu|meta)|cuda(?::(\d+))?)$")

#: phrases of torch's out-of-memory errors that are plain RuntimeErrors (CPU allocator)
OOM_PHRASES = ("out of memory", "can't allocate memory", "not enough memory", "cannot allocate memory")


#: where :func:`host_memory` reads the kernel's figures (tests point these at a fake tree)
PROC = "/proc"
CGROUP_ROOT = "/sys/fs/cgroup"


def _read(path: str) -> str | None:
    """A small kernel file's text, or ``None`` when it cannot be read."""
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read(1 << 16)
    except (OSError, UnicodeDecodeError):
        return None


def _number(text: str | None) -> int | None:
    """The integer in ``text``; ``None`` for none, ``max`` (no limit) or anything unreadable."""
    value = (text or "").strip()
    return int(value) if value.isdigit() else None


def _inactive_file(directory: str, key: str) -> int:
    """Bytes of inactive page cache the kernel reclaims before the cgroup runs out (0 if unknown)."""
    for line in (_read(os.path.join(directory, "memory.stat")) or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return _number(value) or 0
    return 0


def _cgroup_dirs(base: str, path: str) -> Iterator[str]:
    """``base/path`` and each of its parents up to ``base`` itself (the limit may sit on any)."""
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    for depth in range(len(parts), -1, -1):
        yield os.path.join(base, *parts[:depth])


def cgroup_memory(proc: str = PROC, root: str = CGROUP_ROOT) -> tuple[int, int] | None:
    """``(headroom, limit)`` bytes of the tightest memory limit on this process's cgroups
    (v2 ``memory.max`` / ``memory.current``, v1 ``memory.limit_in_bytes`` /
    ``memory.usage_in_bytes``, at its cgroup and every parent), or ``None`` without a limit.

    Headroom is the limit minus the usage, less the inactive page cache (``inactive_file``,
    which the kernel reclaims before the cgroup's OOM killer acts, as ``docker stats`` counts);
    ``max`` means no limit.
    """
    paths: dict[str, str] = {}
    for line in (_read(os.path.join(proc, "self", "cgroup")) or "0::/").splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            paths.setdefault("v2", path)
        elif "memory" in controllers.split(","):
            paths.setdefault("v1", path)
    files = {
        "v2": ([root, os.path.join(root, "unified")], "memory.max", "memory.current", "inactive_file"),
        "v1": (
            [os.path.join(root, "memory")],
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
            "total_inactive_file",
        ),
    }
    found: list[tuple[int, int]] = []
    for version, path in paths.items():
        bases, limit_file, usage_file, inactive = files[version]
        for directory in (d for base in bases for d in _cgroup_dirs(base, path)):
            limit = _number(_read(os.path.join(directory, limit_file)))
            usage = _number(_read(os.path.join(directory, usage_file)))
            if limit is not None and usage is not None:
                working = max(usage - _inactive_file(directory, inactive), 0)
                found.append((max(limit - working, 0), limit))
    if not found:
        return None
    return min(h for h, _ in found), min(limit for _, limit in found)


def host_memory(proc: str | None = None, root: str | None = None) -> tuple[int, int] | None:
    """``(available, total)`` bytes of host memory for this process: ``MemAvailable`` and
    ``MemTotal`` of ``/proc/meminfo`` (else ``sysconf``), or the cgroup's limit minus its usage
    (:func:`cgroup_memory`) and its limit where those are lower."""
    proc = PROC if proc is None else proc
    root = CGROUP_ROOT if root is None else root
    found: tuple[int, int] | None = None
    try:
        info = {}
        for line in (_read(os.path.join(proc, "meminfo")) or "").splitlines():
            name, _, value = line.partition(":")
            info[name] = value.split()[0]
        found = int(info["MemAvailable"]) * 1024, int(info["MemTotal"]) * 1024
    except (KeyError, ValueError, IndexError):
        try:
            page = os.sysconf("SC_PAGE_SIZE")
            found = os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page
        except (ValueError, OSError, AttributeError):
            found = None
    limited = cgroup_memory(proc, root)
    if limited is None:
        return found
    if found is None:
        return limited
    return min(found[0], limited[0]), min(found[1], limited[1])


def cuda_memory(device: str) -> tuple[int, int]:
    """``(free, total)`` bytes of a CUDA device: the driver's free memory
    (``torch.cuda.mem_get_info``) plus what torch's caching allocator holds unused on it (it
    hands that out first, and empties its cache and retries before failing)."""
    import torch

    free, total = torch.cuda.mem_get_info(device)
    cached = int(torch.cuda.memory_reserved(device)) - int(torch.cuda.memory_allocated(device))
    return int(free) + max(cached, 0), int(total)


def free_memory(device: str) -> tuple[int, int] | None:
    """The probe behind :meth:`TorchAllocator.device_memory`: ``(free, total)`` bytes of
    ``device`` (``cpu``: :func:`host_memory`; ``cuda``, ``cuda:N``: :func:`cuda_memory`), or
    ``None`` for ``meta`` and any other name. Allocation compares a plan with its answer
    before the first buffer; tests replace this function instead of depending on the machine."""
    match = DEVICE_PATTERN.match(device)
    if match is None or match.group(1) == "meta":
        return None
    if match.group(1) == "cpu":
        return host_memory()
    return cuda_memory(device)


def cuda_index(device: str) -> int | None:
    """The index in ``cuda:N`` (``None`` for plain ``cuda``, the current device)."""
    match = DEVICE_PATTERN.match(device)
    return int(match.group(2)) if match and match.group(2) is not None else None


@dataclass(frozen=True)
class TorchAllocator(Allocator):
    """``torch.zeros(size, dtype=torch.int8, device=...)`` per buffer; see the module docstring."""

    name: str = "torch"
    priority: int = 0
    description: str = (
        "torch.zeros int8 buffers on cuda, cuda:N or cpu; meta for a dry run that allocates nothing."
    )

    def supports(self, device: str) -> Check:
        match = DEVICE_PATTERN.match(device)
        if match is None:
            return declines(f"device {device!r} is not one of cuda, cuda:N, cpu, meta.")
        if match.group(1) == "meta":
            return applies("meta is a dry run: views get shapes and strides, nothing is allocated.")
        if match.group(1) == "cpu":
            return applies("cpu: zero-initialised host memory.")
        import torch

        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
            return declines(
                f"CUDA is not available (torch {torch.__version__}, {build}, no visible GPU); "
                "use device='cpu', or 'meta' for a dry run."
            )
        count = torch.cuda.device_count()
        index = cuda_index(device)
        if index is not None and index >= count:
            return declines(f"{device} does not exist: this process sees {count} CUDA device(s).")
        return applies(f"{device}: CUDA device {index if index is not None else 'current'} of {count}.")

    def device_memory(self, device: str) -> tuple[int, int] | None:
        return free_memory(device)  # looked up at each call, so a test can replace the probe

    def buffer(self, nbytes: int, device: str) -> object:
        import torch

        return torch.zeros(nbytes, dtype=torch.int8, device=device)

    def build_views(self, request: AllocationRequest, buffers: Sequence[Any]) -> dict[str, Any]:
        with _view_cache():
            return super().build_views(request, buffers)

    def is_out_of_memory(self, error: BaseException) -> bool:
        import torch

        if isinstance(error, torch.OutOfMemoryError):
            return True
        text = str(error).lower()
        return isinstance(error, RuntimeError) and any(phrase in text for phrase in OOM_PHRASES)


@hookimpl
def kvrules_register_allocators(registry: AllocatorRegistry) -> None:
    registry.add(TorchAllocator())
    for layout in BUILTIN_VIEW_LAYOUTS:
        registry.add_view_layout(layout)


__all__ = [
    "BUILTIN_VIEW_LAYOUTS",
    "AttentionLayout",
    "MLALayout",
    "MambaStatesLayout",
    "Piece",
    "PieceLayout",
    "SplitKVLayout",
    "TorchAllocator",
    "cgroup_memory",
    "contiguous_strides",
    "cuda_index",
    "cuda_memory",
    "free_memory",
    "host_memory",
]
