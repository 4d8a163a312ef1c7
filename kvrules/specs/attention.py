"""Attention spec types, with vLLM's field names and page-size formulas (formulas.md §1.2)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, cast

from kvrules.dtypes import dtype_name, dtype_size
from kvrules.errors import SpecError
from kvrules.specs.base import KVCacheSpec, KVQuantMode, cdiv, largest_divisor_at_most, round_up
from kvrules.values import MAX_BYTES, MAX_DIMENSION, MAX_TOKENS, as_optional_int, shown

if TYPE_CHECKING:
    from kvrules.config import EngineConfig

#: bytes per token of DeepSeek-V3.2's fp8_ds_mla cache (512 fp8 + 4 x fp32 scales + 64 bf16 RoPE)
FP8_DS_MLA_V32_TOKEN_BYTES = 656
#: bytes per stored token of DeepSeek-V4's fp8_ds_mla cache (448 fp8 + 64 bf16 RoPE + 7 scales + 1)
FP8_DS_MLA_V4_TOKEN_BYTES = 584
#: bytes of one per-token-head scale (fp32)
SCALE_BYTES = 4


def quantized_head_dim(head_size: int, mode: KVQuantMode) -> int:
    """Elements stored per head for ``mode`` (NVFP4 packs two values a byte plus a scale per 16)."""
    if mode is KVQuantMode.NVFP4:
        return head_size // 2 + head_size // 16
    if mode is KVQuantMode.INT4_PER_TOKEN_HEAD:
        return head_size // 2
    return head_size


@dataclass(frozen=True, eq=False, kw_only=True)
class AttentionSpec(KVCacheSpec):
    """Common fields of attention layers: a page holds ``block_size`` tokens of K and V.

    ``num_head_slots`` and ``state_content_bytes`` are how a vLLM attention backend publishes a
    quantized or packed page (vLLM 0.28 and 0.33): when either is set the page is vLLM's
    ``num_heads x num_states x state_content`` with ``num_heads = num_head_slots or num_kv_heads``
    and ``state_content = state_content_bytes or (head_size + head_size_v) x dtype size``; when
    neither is set the page follows ``kv_quant_mode`` (formulas.md §1.2).
    """

    num_kv_heads: int
    head_size: int
    dtype: Any
    head_size_v: int | None = None
    kv_quant_mode: KVQuantMode = KVQuantMode.NONE
    page_size_padded: int | None = None
    indexes_kv_by_block_stride: bool = False
    num_head_slots: int | None = None
    state_content_bytes: int | None = None

    page_format: ClassVar[str] = "kv"
    default_head_size_v_is_head_size: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        cls = type(self).__name__
        self._set_int("num_kv_heads", maximum=MAX_DIMENSION)
        self._set_int("head_size", maximum=MAX_DIMENSION)
        object.__setattr__(self, "dtype", dtype_name(self.dtype, field=f"{cls}.dtype"))
        object.__setattr__(
            self, "kv_quant_mode", KVQuantMode.parse(self.kv_quant_mode, field=f"{cls}.kv_quant_mode")
        )
        if self.head_size_v is None:
            default = self.head_size if self.default_head_size_v_is_head_size else 0
            object.__setattr__(self, "head_size_v", default)
        self._set_int("head_size_v", minimum=0, maximum=MAX_DIMENSION)
        if not isinstance(self.indexes_kv_by_block_stride, bool):
            raise SpecError(
                f"{cls}.indexes_kv_by_block_stride={shown(self.indexes_kv_by_block_stride)} must be true or false"
            )
        self._set_int("page_size_padded", maximum=MAX_BYTES, optional=True)
        self._check_published_fields()
        self._validate_extra()
        self._derive()
        if self.real_page_size_bytes <= 0:
            raise SpecError(
                f"{cls} with block_size={self.block_size} holds no bytes "
                f"(real page {self.real_page_size_bytes}); increase block_size"
            )
        self._check_page_bytes()
        if self.page_size_padded is not None and self.page_size_padded < self.unpadded_page_size_bytes:
            raise SpecError(
                f"{cls}.page_size_padded={self.page_size_padded} is smaller than the real page "
                f"({self.unpadded_page_size_bytes} bytes); padding can only add bytes"
            )

    def _check_published_fields(self) -> None:
        """``num_head_slots`` (1 to MAX_DIMENSION) and ``state_content_bytes`` (1 to MAX_BYTES),
        each optional, stored as plain ``int``."""
        cls = type(self).__name__
        slots = as_optional_int(
            self.num_head_slots, f"{cls}.num_head_slots", minimum=1, maximum=MAX_DIMENSION
        )
        content = as_optional_int(
            self.state_content_bytes, f"{cls}.state_content_bytes", minimum=1, maximum=MAX_BYTES
        )
        object.__setattr__(self, "num_head_slots", slots)
        object.__setattr__(self, "state_content_bytes", content)

    @property
    def publishes_page(self) -> bool:
        """True when ``num_head_slots`` or ``state_content_bytes`` is set: the page is vLLM's
        published ``num_heads x num_states x state_content`` and ``kv_quant_mode`` does not enter it."""
        return self.num_head_slots is not None or self.state_content_bytes is not None

    @property
    def dense_state_content_bytes(self) -> int:
        """What vLLM derives for ``state_content_bytes`` left unset: ``(head_size + head_size_v) x
        dtype size``."""
        head_v = self.head_size_v if self.head_size_v is not None else self.head_size
        return (self.head_size + head_v) * self.dtype_size

    def _published_page(self) -> int:
        """vLLM's page formula from the two published fields (either may be unset)."""
        heads = self.num_head_slots if self.num_head_slots is not None else self.num_kv_heads
        content = self.state_content_bytes
        if content is None:
            content = self.dense_state_content_bytes
        return heads * self.storage_block_size * content

    def fallback_state_layout(self) -> tuple[int, int] | None:
        """``(num_heads, state_content_bytes)`` whose product with the stored tokens is the page
        the ``kv_quant_mode`` formula gives (the page when neither published field is set);
        ``None`` when that page has no such form."""
        mode = self.kv_quant_mode
        head_v = self.head_size_v if self.head_size_v is not None else self.head_size
        per_head = (
            quantized_head_dim(self.head_size, mode) + quantized_head_dim(head_v, mode)
        ) * self.dtype_size
        scales = 2 * SCALE_BYTES if mode.is_per_token_head else 0
        return (self.num_kv_heads, per_head + scales)

    def state_layout(self) -> tuple[int, int] | None:
        """``(num_heads, state_content_bytes)`` of this page as vLLM's formula reads it: the
        published fields (each defaulting as in vLLM) when set, else :meth:`fallback_state_layout`."""
        if not self.publishes_page:
            return self.fallback_state_layout()
        heads = self.num_head_slots if self.num_head_slots is not None else self.num_kv_heads
        content = self.state_content_bytes
        return (heads, content if content is not None else self.dense_state_content_bytes)

    def page_shape(self) -> tuple[int, int, int]:
        """``(heads, stored tokens, state content bytes)`` as vLLM's formula reads the page
        (:meth:`state_layout`); one head and one state when the page has no such form."""
        layout = self.state_layout()
        if layout is not None:
            heads, content = layout
            if heads * self.storage_block_size * content == self.unpadded_page_size_bytes:
                return (heads, self.storage_block_size, content)
        return super().page_shape()

    def _validate_extra(self) -> None:
        """Subclass hook: validate type-specific fields."""

    def _derive(self) -> None:
        """Subclass hook: set derived fields (runs after validation, before page checks)."""

    @property
    def storage_block_size(self) -> int:
        """Tokens stored per block (MLA with compression stores fewer)."""
        return self.block_size

    @property
    def dtype_size(self) -> int:
        """Bytes per element of :attr:`dtype`."""
        return dtype_size(self.dtype)

    @cached_property
    def real_page_size_bytes(self) -> int:  # type: ignore[override]
        if self.publishes_page:
            return self._published_page()
        mode = self.kv_quant_mode
        head_v = self.head_size_v if self.head_size_v is not None else self.head_size
        per_head = quantized_head_dim(self.head_size, mode) + quantized_head_dim(head_v, mode)
        return self.storage_block_size * self.num_kv_heads * per_head * self.dtype_size

    @cached_property
    def unpadded_page_size_bytes(self) -> int:  # type: ignore[override]
        scales = 0
        if self.kv_quant_mode.is_per_token_head and not self.publishes_page:
            scales = 2 * self.storage_block_size * self.num_kv_heads * SCALE_BYTES
        return self.real_page_size_bytes + scales

    @cached_property
    def page_size_bytes(self) -> int:  # type: ignore[override]
        if self.page_size_padded is not None:
            return self.page_size_padded
        return self.unpadded_page_size_bytes

    def _full_attention_tokens(self, config: EngineConfig) -> int:
        cp = config.context_parallel_size
        return config.max_model_len if cp == 1 else cdiv(config.max_model_len, cp)

    def max_memory_usage_bytes(self, config: EngineConfig) -> int:
        return cdiv(self._full_attention_tokens(config), self.block_size) * self.page_size_bytes

    def _stored_as_full(
        self,
        block_size: int | None,
        *,
        sliding_window: int | None = None,
        attention_chunk_size: int | None = None,
    ) -> FullAttentionSpec:
        """This layer as full attention at ``block_size`` (default: its own), padding scaled with
        the block; ``sliding_window`` / ``attention_chunk_size`` are kept as hints."""
        block = self.block_size if block_size is None else block_size
        padded = self.page_size_padded
        if padded is not None and block != self.block_size:
            padded = padded * block // self.block_size
        return FullAttentionSpec(
            block,
            num_kv_heads=self.num_kv_heads,
            head_size=self.head_size,
            head_size_v=self.head_size_v,
            dtype=self.dtype,
            kv_quant_mode=self.kv_quant_mode,
            page_size_padded=padded,
            indexes_kv_by_block_stride=self.indexes_kv_by_block_stride,
            num_head_slots=self.num_head_slots,
            state_content_bytes=self.state_content_bytes,
            sliding_window=sliding_window,
            attention_chunk_size=attention_chunk_size,
        )

    def unification_hint(self, target: int) -> str:
        """Attention pages may be padded when the backend reads them by block stride."""
        return (
            "set indexes_kv_by_block_stride=true if this layer's attention backend reads KV pages by "
            f"block stride (then the page is padded), or choose block sizes so that {target} is a "
            f"whole multiple of this layer's page ({self.page_size_bytes} bytes)"
        )


@dataclass(frozen=True, eq=False, kw_only=True)
class FullAttentionSpec(AttentionSpec):
    """Full (causal) attention: every token of the request stays in the cache."""

    type_name: ClassVar[str] = "full_attention"
    is_full_attention: ClassVar[bool] = True
    mergeable_fields: ClassVar[tuple[str, ...]] = ("sliding_window", "attention_chunk_size")

    sliding_window: int | None = None
    attention_chunk_size: int | None = None

    def _validate_extra(self) -> None:
        self._set_int("sliding_window", optional=True)
        self._set_int("attention_chunk_size", optional=True)
        if self.sliding_window is not None and self.attention_chunk_size is not None:
            cls = type(self).__name__
            raise SpecError(
                f"{cls} sets both sliding_window={self.sliding_window} and "
                f"attention_chunk_size={self.attention_chunk_size}: a layer computes either "
                "sliding-window or chunked-local attention, not both (vLLM refuses a group with "
                "both); set only the one this layer uses (or neither for plain full attention)"
            )

    def uniform_type_key(self) -> Hashable | None:
        return ("full",)

    @classmethod
    def merge(cls, specs: Any) -> Any:
        merged = super().merge(specs)
        if merged.sliding_window is not None and merged.attention_chunk_size is not None:
            raise ValueError("a group cannot mix sliding-window and chunked-local full attention")
        return merged


@dataclass(frozen=True, eq=False, kw_only=True)
class SinkFullAttentionSpec(FullAttentionSpec):
    """Full attention with static sink tokens (openPangu); memory as full attention."""

    type_name: ClassVar[str] = "sink_full_attention"

    sink_len: int | None = None

    def _validate_extra(self) -> None:
        super()._validate_extra()
        self._set_int("sink_len", minimum=0, optional=True)


class _MLAMixin:
    """Page formula shared by MLA and sliding-window MLA (one latent vector per token, no x2)."""

    #: whether an ``fp8_ds_mla`` page takes DeepSeek-V3.2's token layout (MLA; not sliding-window MLA)
    v32_layout: ClassVar[bool] = True
    page_format: ClassVar[str] = "latent"
    default_head_size_v_is_head_size: ClassVar[bool] = False

    def _derive(self) -> None:
        self._apply_alignment()

    @cached_property
    def real_page_size_bytes(self) -> int:
        return self._mla_real_page()

    def fallback_state_layout(self) -> tuple[int, int] | None:
        """:meth:`AttentionSpec.fallback_state_layout` for a latent page."""
        if self.cache_dtype_str == "fp8_ds_mla":
            if self.model_version == "deepseek_v4":
                return (1, FP8_DS_MLA_V4_TOKEN_BYTES)
            if self.v32_layout:
                return (1, FP8_DS_MLA_V32_TOKEN_BYTES) if self.compress_ratio == 1 else None
        head = self.head_size
        if self.kv_quant_mode is KVQuantMode.INT4_PER_TOKEN_HEAD:
            head //= 2
        return (self.num_kv_heads, head * self.dtype_size)

    @cached_property
    def unpadded_page_size_bytes(self) -> int:
        return self.real_page_size_bytes

    def unification_hint(self, target: int) -> str:
        """MLA pages are never stride-padded: only block sizes (or a plugin rule) can help."""
        return KVCacheSpec.unification_hint(cast(KVCacheSpec, self), target)

    block_size: int
    num_kv_heads: int
    head_size: int
    head_size_v: int | None
    dtype: str
    kv_quant_mode: KVQuantMode
    page_size_padded: int | None
    cache_dtype_str: str | None
    alignment: int | None
    compress_ratio: int
    model_version: str | None
    dtype_size: int

    if TYPE_CHECKING:  # provided by KVCacheSpec, which every class using the mixin derives from

        def _set_int(
            self, name: str, *, minimum: int | None = 1, maximum: int = MAX_TOKENS, optional: bool = False
        ) -> None: ...

    def _validate_mla(self) -> None:
        cls = type(self).__name__
        if self.head_size_v != 0:
            raise SpecError(
                f"{cls}.head_size_v={shown(self.head_size_v)} with head_size={self.head_size}: an "
                "MLA page holds one latent vector of head_size per token and no separate V (vLLM "
                "adds head_size_v to every state, so its page would differ from this one); leave "
                "head_size_v unset (0) and put the whole latent width in head_size"
            )
        self._set_int("compress_ratio")
        self._set_int("alignment", maximum=MAX_BYTES, optional=True)
        if self.cache_dtype_str is not None and not isinstance(self.cache_dtype_str, str):
            raise SpecError(f"{cls}.cache_dtype_str={shown(self.cache_dtype_str)} must be a string")
        if self.model_version is not None and not isinstance(self.model_version, str):
            raise SpecError(f"{cls}.model_version={shown(self.model_version)} must be a string")

    @property
    def storage_block_size(self) -> int:
        return self.block_size // self.compress_ratio

    def _mla_real_page(self) -> int:
        sbs = self.storage_block_size
        if cast(AttentionSpec, self).publishes_page:
            return cast(AttentionSpec, self)._published_page()
        if self.cache_dtype_str == "fp8_ds_mla":
            if self.model_version == "deepseek_v4":
                return sbs * FP8_DS_MLA_V4_TOKEN_BYTES
            if self.v32_layout:
                return self.block_size * FP8_DS_MLA_V32_TOKEN_BYTES
        head = self.head_size
        if self.kv_quant_mode is KVQuantMode.INT4_PER_TOKEN_HEAD:
            head //= 2
        return sbs * self.num_kv_heads * head * self.dtype_size

    def aligned_page_size(self) -> int | None:
        """The ``page_size_padded`` that ``alignment`` alone gives this spec (``None``: it gives
        none), as :meth:`_derive` sets it when no larger padding was asked for."""
        if self.alignment is None or self.storage_block_size <= 0:
            return None
        real = self._mla_real_page()
        aligned = round_up(real, self.alignment)
        return aligned if aligned != real else None

    def _apply_alignment(self) -> None:
        """With ``alignment`` set, pad the page up to a multiple of it (unless padded further)."""
        aligned = self.aligned_page_size()
        if aligned is not None and (self.page_size_padded is None or self.page_size_padded < aligned):
            object.__setattr__(self, "page_size_padded", aligned)


@dataclass(frozen=True, eq=False, kw_only=True)
class MLAAttentionSpec(_MLAMixin, FullAttentionSpec):  # type: ignore[misc]
    """Multi-head latent attention: one latent vector of ``head_size`` per stored token."""

    type_name: ClassVar[str] = "mla"

    cache_dtype_str: str | None = None
    alignment: int | None = None
    compress_ratio: int = 1
    model_version: str | None = None

    def _validate_extra(self) -> None:
        super()._validate_extra()
        self._validate_mla()


@dataclass(frozen=True, eq=False, kw_only=True)
class HiddenStateCacheSpec(MLAAttentionSpec):
    """Hidden states kept for an ``extract_hidden_states`` drafter (vLLM #39949).

    Stored like MLA: ``num_kv_heads`` is the number of hidden states kept per token and
    ``head_size`` the hidden size. The general (``unified-page``) route keeps these layers out of
    page unification and gives each its own group sized to the common page (:meth:`aligned_to`).
    """

    type_name: ClassVar[str] = "hidden_state_cache"
    sized_after_unification: ClassVar[bool] = True

    @property
    def token_bytes(self) -> int:
        """Bytes one token's hidden states take (``num_kv_heads * head_size * dtype_size``)."""
        return self.num_kv_heads * self.head_size * self.dtype_size

    def aligned_to(self, common_page: int, group_block_size: int) -> HiddenStateCacheSpec:
        """This layer re-sized to share the pool of groups with ``common_page``-byte pages.

        The block size becomes the largest divisor of ``group_block_size`` that is at most
        ``common_page // token_bytes`` (1 when nothing fits), so every group's blocks split into
        whole hidden-state blocks; the page is padded to ``common_page``.

        :raises SpecError: one token's hidden states exceed ``common_page``.
        """
        limit = max(common_page // self.token_bytes, 1)
        block = largest_divisor_at_most(group_block_size, limit)
        if block * self.token_bytes > common_page:
            raise SpecError(
                f"HiddenStateCacheSpec: one token takes {self.token_bytes} bytes, more than the common "
                f"page of {common_page} bytes; raise the other layers' block size or store fewer "
                "hidden states"
            )
        return self.evolve(block_size=block, page_size_padded=common_page)


@dataclass(frozen=True, eq=False, kw_only=True)
class SlidingWindowSpec(AttentionSpec):
    """Sliding-window attention: only the last ``sliding_window`` tokens are kept."""

    type_name: ClassVar[str] = "sliding_window"

    sliding_window: int
    extra_retained_tokens: int = 0

    def _validate_extra(self) -> None:
        self._set_int("sliding_window")
        self._set_int("extra_retained_tokens", minimum=0)

    def uniform_type_key(self) -> Hashable | None:
        return ("sliding_window", self.sliding_window)

    def full_attention_form(self, block_size: int | None = None) -> FullAttentionSpec:
        """Full attention with this layer's geometry, the window kept as a hint; a padded page
        is scaled with the block size."""
        return self._stored_as_full(block_size, sliding_window=self.sliding_window)

    def max_memory_usage_bytes(self, config: EngineConfig) -> int:
        if config.context_parallel_size != 1:
            raise SpecError(
                "sliding-window layers do not support decode/prefill context parallelism "
                f"(DCP x PCP = {config.context_parallel_size}); set both to 1"
            )
        extra = max(self.extra_retained_tokens, config.extra_retained_tokens)
        tokens = min(self.sliding_window - 1 + extra + config.max_num_batched_tokens, config.max_model_len)
        return (cdiv(tokens, self.block_size) + 1) * self.page_size_bytes


@dataclass(frozen=True, eq=False, kw_only=True)
class SlidingWindowMLASpec(_MLAMixin, SlidingWindowSpec):  # type: ignore[misc]
    """Sliding-window MLA (DeepSeek-V4's SWA and compressor-state caches)."""

    type_name: ClassVar[str] = "sliding_window_mla"
    v32_layout: ClassVar[bool] = False

    cache_dtype_str: str | None = None
    alignment: int | None = None
    compress_ratio: int = 1
    model_version: str | None = None

    def _validate_extra(self) -> None:
        super()._validate_extra()
        self._validate_mla()
        if self.model_version not in (None, "deepseek_v4"):
            raise SpecError(
                f"SlidingWindowMLASpec.model_version={shown(self.model_version)} is not supported; "
                "use null or 'deepseek_v4'"
            )

    def full_attention_form(self, block_size: int | None = None) -> MLAAttentionSpec:
        """MLA with this layer's latent geometry, the window kept as a hint; a padded page is kept
        only when the block size stays."""
        block = self.block_size if block_size is None else block_size
        return MLAAttentionSpec(
            block,
            num_kv_heads=self.num_kv_heads,
            head_size=self.head_size,
            head_size_v=self.head_size_v,
            dtype=self.dtype,
            kv_quant_mode=self.kv_quant_mode,
            page_size_padded=self.page_size_padded if block == self.block_size else None,
            indexes_kv_by_block_stride=self.indexes_kv_by_block_stride,
            num_head_slots=self.num_head_slots,
            state_content_bytes=self.state_content_bytes,
            sliding_window=self.sliding_window,
            cache_dtype_str=self.cache_dtype_str,
            alignment=self.alignment,
            compress_ratio=self.compress_ratio,
            model_version=self.model_version,
        )


@dataclass(frozen=True, eq=False, kw_only=True)
class ChunkedLocalAttentionSpec(AttentionSpec):
    """Chunked local attention (Llama 4): tokens of the current chunk only."""

    type_name: ClassVar[str] = "chunked_local"

    attention_chunk_size: int

    def _validate_extra(self) -> None:
        self._set_int("attention_chunk_size")

    def uniform_type_key(self) -> Hashable | None:
        return ("chunked_local", self.attention_chunk_size)

    def full_attention_form(self, block_size: int | None = None) -> FullAttentionSpec:
        """Full attention with this layer's geometry, the chunk kept as a hint; a padded page is
        scaled with the block size."""
        return self._stored_as_full(block_size, attention_chunk_size=self.attention_chunk_size)

    def max_memory_usage_bytes(self, config: EngineConfig) -> int:
        tokens = min(self.attention_chunk_size + config.max_num_batched_tokens, config.max_model_len)
        return cdiv(tokens, self.block_size) * self.page_size_bytes


@dataclass(frozen=True, eq=False, kw_only=True)
class CrossAttentionSpec(AttentionSpec):
    """Cross attention of an encoder-decoder model: holds the encoder's tokens."""

    type_name: ClassVar[str] = "cross_attention"

    def uniform_type_key(self) -> Hashable | None:
        return ("cross_attention",)

    def max_memory_usage_bytes(self, config: EngineConfig) -> int:
        return cdiv(config.encoder_input_tokens, self.block_size) * self.page_size_bytes


@dataclass(frozen=True, eq=False, kw_only=True)
class EncoderOnlyAttentionSpec(AttentionSpec):
    """Encoder-only attention: nothing is cached between steps."""

    type_name: ClassVar[str] = "encoder_only"

    def max_memory_usage_bytes(self, config: EngineConfig) -> int:
        return 0
