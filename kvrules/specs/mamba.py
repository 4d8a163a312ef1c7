"""Mamba / linear-attention state spec: a page holds one request's recurrent state."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from functools import cached_property
from math import prod
from typing import TYPE_CHECKING, Any, ClassVar

from kvrules.dtypes import dtype_name, dtype_size
from kvrules.errors import SpecError
from kvrules.specs.base import KVCacheSpec, cdiv, check_int
from kvrules.values import MAX_BYTES, MAX_DIMENSION, MAX_TOKENS, shown

if TYPE_CHECKING:
    from kvrules.config import EngineConfig

MAMBA_CACHE_MODES = ("none", "align", "all")


@dataclass(frozen=True, eq=False)
class MambaSpec(KVCacheSpec):
    """State of a Mamba / gated-delta-net / short-conv layer.

    The page is the sum of the state tensors' bytes and does not change with ``block_size``;
    ``page_size_padded`` pads it (state tensors sit back to back at the start of the page).

    ``num_prefill_checkpoint_blocks`` and ``prefill_checkpoint_alignment`` are vLLM 0.32+'s
    prefill checkpoints (its Mamba2 layers set 1 and 1): in ``align`` mode each request keeps that
    many more pages, and layers group together only when both fields agree (vLLM's
    ``is_uniform_with_collection``). They do not change the page.
    """

    type_name: ClassVar[str] = "mamba"
    page_format: ClassVar[str] = "state"
    page_scales_with_block_size: ClassVar[bool] = False

    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[Any, ...]
    page_size_padded: int | None = None
    mamba_type: str = "mamba2"
    mamba_cache_mode: str = "none"
    num_speculative_blocks: int = 0
    num_prefill_checkpoint_blocks: int = 0
    prefill_checkpoint_alignment: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        listed = _items(self.shapes, "MambaSpec.shapes", "a list of shapes (lists of integers)")
        shapes = tuple(_shape(index, shape) for index, shape in enumerate(listed))
        if not shapes:
            raise SpecError("MambaSpec.shapes is empty; a Mamba layer holds at least one state tensor")
        if isinstance(self.dtypes, str) or not isinstance(self.dtypes, (list, tuple)):
            raise SpecError(f"MambaSpec.dtypes={shown(self.dtypes)} must be a list with one dtype per shape")
        dtypes = tuple(dtype_name(d, field="MambaSpec.dtypes") for d in self.dtypes)
        if len(dtypes) != len(shapes):
            raise SpecError(
                f"MambaSpec has {len(shapes)} shapes but {len(dtypes)} dtypes; give one dtype per shape"
            )
        object.__setattr__(self, "shapes", shapes)
        object.__setattr__(self, "dtypes", dtypes)
        if not isinstance(self.mamba_type, str) or not self.mamba_type:
            raise SpecError(f"MambaSpec.mamba_type={shown(self.mamba_type)} must be a non-empty string")
        object.__setattr__(self, "mamba_type", self.mamba_type.lower())
        if self.mamba_cache_mode not in MAMBA_CACHE_MODES:
            raise SpecError(
                f"MambaSpec.mamba_cache_mode={shown(self.mamba_cache_mode)}; use one of {', '.join(MAMBA_CACHE_MODES)}"
            )
        self._set_int("num_speculative_blocks", minimum=0, maximum=MAX_TOKENS)
        self._set_int("num_prefill_checkpoint_blocks", minimum=0, maximum=MAX_TOKENS)
        self._set_int("prefill_checkpoint_alignment", minimum=1, maximum=MAX_TOKENS, optional=True)
        self._set_int("page_size_padded", maximum=MAX_BYTES, optional=True)
        _check_state_bytes(shapes, dtypes)
        if self.page_size_padded is not None and self.page_size_padded < self.real_page_size_bytes:
            raise SpecError(
                f"MambaSpec.page_size_padded={self.page_size_padded} is smaller than the real page "
                f"({self.real_page_size_bytes} bytes of state); padding can only add bytes"
            )

    @cached_property
    def state_bytes(self) -> tuple[int, ...]:
        """Bytes of each state tensor, in order."""
        return tuple(prod(s) * dtype_size(d) for s, d in zip(self.shapes, self.dtypes, strict=True))

    @cached_property
    def real_page_size_bytes(self) -> int:  # type: ignore[override]
        return sum(self.state_bytes)

    @cached_property
    def page_size_bytes(self) -> int:  # type: ignore[override]
        return self.page_size_padded if self.page_size_padded is not None else self.real_page_size_bytes

    def uniform_type_key(self) -> Hashable | None:
        return (
            "mamba",
            self.num_speculative_blocks,
            self.num_prefill_checkpoint_blocks,
            self.prefill_checkpoint_alignment,
        )

    def max_memory_usage_bytes(self, config: EngineConfig) -> int:
        extra = self.num_speculative_blocks
        if self.mamba_cache_mode == "all":
            return (cdiv(config.max_model_len, self.block_size) + extra) * self.page_size_bytes
        if self.mamba_cache_mode == "align":
            return (2 + extra + self.num_prefill_checkpoint_blocks) * self.page_size_bytes
        return (1 + extra) * self.page_size_bytes


def _items(value: Any, field: str, allowed: str) -> tuple[Any, ...]:
    """The entries of a list-like ``value`` (a string or a mapping is not one)."""
    if not isinstance(value, (str, bytes, Mapping)):
        try:
            return tuple(value)
        except TypeError:
            pass
    raise SpecError(f"{field}={shown(value)} must be {allowed}")


def _shape(index: int, shape: Any) -> tuple[int, ...]:
    """Shape ``index`` as a tuple of ints, each from 1 to :data:`~kvrules.values.MAX_DIMENSION`."""
    field = f"MambaSpec.shapes[{index}]"
    dims = tuple(
        check_int(f"{field}[{axis}]", dim, minimum=None, maximum=MAX_DIMENSION)
        for axis, dim in enumerate(_items(shape, field, "a list of integers"))
    )
    if not dims or any(d <= 0 for d in dims):
        raise SpecError(f"MambaSpec.shapes has an invalid shape {list(dims)}: every dim must be > 0")
    return dims


def _check_state_bytes(shapes: tuple[tuple[int, ...], ...], dtypes: tuple[str, ...]) -> None:
    """Raise :class:`SpecError` when the state tensors together exceed :data:`MAX_BYTES`; the
    product stops growing as soon as it passes the bound, so many huge dims cost nothing."""
    total = 0
    for index, (shape, dtype) in enumerate(zip(shapes, dtypes, strict=True)):
        size = dtype_size(dtype)
        for dim in shape:
            size *= dim
            if size > MAX_BYTES:
                break
        total += size
        if total > MAX_BYTES:
            raise SpecError(
                f"MambaSpec(shapes={shown(shapes)}, dtypes={shown(dtypes)}): the state tensors up to "
                f"shapes[{index}] hold more than {MAX_BYTES} bytes (the largest tensor torch can hold); "
                "lower the state dimensions"
            )
