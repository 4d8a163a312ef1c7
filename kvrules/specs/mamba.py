"""Mamba / linear-attention state spec: a page holds one request's recurrent state."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from functools import cached_property
from math import prod
from typing import TYPE_CHECKING, Any, ClassVar

from kvrules.dtypes import dtype_name, dtype_size
from kvrules.errors import SpecError
from kvrules.specs.base import KVCacheSpec, cdiv, check_int

if TYPE_CHECKING:
    from kvrules.config import EngineConfig

MAMBA_CACHE_MODES = ("none", "align", "all")


@dataclass(frozen=True, eq=False)
class MambaSpec(KVCacheSpec):
    """State of a Mamba / gated-delta-net / short-conv layer.

    The page is the sum of the state tensors' bytes and does not change with ``block_size``;
    ``page_size_padded`` pads it (state tensors sit back to back at the start of the page).
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

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            shapes = tuple(tuple(int(d) for d in shape) for shape in self.shapes)
        except (TypeError, ValueError):
            raise SpecError(
                f"MambaSpec.shapes={self.shapes!r} must be a list of shapes (lists of integers)"
            ) from None
        if not shapes:
            raise SpecError("MambaSpec.shapes is empty; a Mamba layer holds at least one state tensor")
        for shape in shapes:
            if not shape or any(d <= 0 for d in shape):
                raise SpecError(f"MambaSpec.shapes has an invalid shape {list(shape)}: every dim must be > 0")
        if isinstance(self.dtypes, str) or not isinstance(self.dtypes, (list, tuple)):
            raise SpecError(f"MambaSpec.dtypes={self.dtypes!r} must be a list with one dtype per shape")
        dtypes = tuple(dtype_name(d, field="MambaSpec.dtypes") for d in self.dtypes)
        if len(dtypes) != len(shapes):
            raise SpecError(
                f"MambaSpec has {len(shapes)} shapes but {len(dtypes)} dtypes; give one dtype per shape"
            )
        object.__setattr__(self, "shapes", shapes)
        object.__setattr__(self, "dtypes", dtypes)
        if not isinstance(self.mamba_type, str) or not self.mamba_type:
            raise SpecError(f"MambaSpec.mamba_type={self.mamba_type!r} must be a non-empty string")
        object.__setattr__(self, "mamba_type", self.mamba_type.lower())
        if self.mamba_cache_mode not in MAMBA_CACHE_MODES:
            raise SpecError(
                f"MambaSpec.mamba_cache_mode={self.mamba_cache_mode!r}; use one of {', '.join(MAMBA_CACHE_MODES)}"
            )
        check_int("MambaSpec.num_speculative_blocks", self.num_speculative_blocks, minimum=0)
        check_int("MambaSpec.page_size_padded", self.page_size_padded, optional=True)
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
        return ("mamba", self.num_speculative_blocks)

    def max_memory_usage_bytes(self, config: EngineConfig) -> int:
        extra = self.num_speculative_blocks
        if self.mamba_cache_mode == "all":
            return (cdiv(config.max_model_len, self.block_size) + extra) * self.page_size_bytes
        if self.mamba_cache_mode == "align":
            return (2 + extra) * self.page_size_bytes
        return (1 + extra) * self.page_size_bytes
