"""Small stand-ins for vLLM's KV-cache classes: vLLM 0.28's class and field names and defaults
(shared/reference/vllm-0.28-signatures.md), with simple page formulas, so the integration can be
tested without vLLM. ``build_027`` makes an older-looking variant lacking two fields.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import torch


class KVQuantMode(enum.IntEnum):
    NONE = 0
    FP8_PER_TENSOR = 1
    INT8_PER_TOKEN_HEAD = 2
    FP8_PER_TOKEN_HEAD = 3
    INT4_PER_TOKEN_HEAD = 4
    NVFP4 = 5
    TURBOQUANT_K8V4 = 6


class MambaAttentionBackendEnum(enum.Enum):
    MAMBA1 = "mamba1"
    MAMBA2 = "mamba2"
    SHORT_CONV = "short_conv"
    GDN_ATTN = "gdn_attn"


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class KVCacheSpec:
    block_size: int


@dataclass(frozen=True, kw_only=True)
class AttentionSpec(KVCacheSpec):
    num_kv_heads: int
    head_size: int
    dtype: torch.dtype
    head_size_v: int = None  # type: ignore[assignment]
    kv_quant_mode: KVQuantMode = KVQuantMode.NONE
    page_size_padded: int | None = None
    indexes_kv_by_block_stride: bool = False
    num_head_slots: int | None = None
    state_content_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.head_size_v is None:
            object.__setattr__(self, "head_size_v", self.head_size)

    @property
    def storage_block_size(self) -> int:
        return self.block_size

    @property
    def page_size_bytes(self) -> int:
        if self.page_size_padded is not None:
            return self.page_size_padded
        heads = self.num_head_slots or self.num_kv_heads
        cell = self.state_content_bytes or (self.head_size + self.head_size_v) * _itemsize(self.dtype)
        return heads * self.storage_block_size * cell


@dataclass(frozen=True, kw_only=True)
class FullAttentionSpec(AttentionSpec):
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    non_causal: bool = False


@dataclass(frozen=True, kw_only=True)
class MLAAttentionSpec(FullAttentionSpec):
    head_size_v: int = 0
    cache_dtype_str: str | None = None
    alignment: int | None = None
    compress_ratio: int = 1
    model_version: str | None = None
    non_causal_multi_token_decode: bool = False

    @property
    def storage_block_size(self) -> int:
        return self.block_size // self.compress_ratio


@dataclass(frozen=True, kw_only=True)
class SlidingWindowSpec(AttentionSpec):
    sliding_window: int
    extra_retained_tokens: int = 0


@dataclass(frozen=True, kw_only=True)
class SlidingWindowMLASpec(SlidingWindowSpec):
    head_size_v: int = 0
    cache_dtype_str: str | None = None
    alignment: int | None = None
    compress_ratio: int = 1
    model_version: str | None = None

    @property
    def storage_block_size(self) -> int:
        return self.block_size // self.compress_ratio


@dataclass(frozen=True, kw_only=True)
class ChunkedLocalAttentionSpec(AttentionSpec):
    attention_chunk_size: int


@dataclass(frozen=True, kw_only=True)
class CrossAttentionSpec(AttentionSpec):
    pass


@dataclass(frozen=True, kw_only=True)
class EncoderOnlyAttentionSpec(AttentionSpec):
    pass


@dataclass(frozen=True, kw_only=True)
class SinkFullAttentionSpec(FullAttentionSpec):
    sink_len: int | None = None


@dataclass(frozen=True, kw_only=True)
class HiddenStateCacheSpec(MLAAttentionSpec):
    pass


@dataclass(frozen=True, kw_only=True)
class RSWASpec(FullAttentionSpec):
    rswa_window: int


@dataclass(frozen=True)
class MambaSpec(KVCacheSpec):
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[torch.dtype, ...]
    page_size_padded: int | None = None
    mamba_type: MambaAttentionBackendEnum = MambaAttentionBackendEnum.MAMBA2
    mamba_cache_mode: str = "none"
    num_speculative_blocks: int = 0

    @property
    def page_size_bytes(self) -> int:
        if self.page_size_padded is not None:
            return self.page_size_padded
        return sum(prod(s) * _itemsize(d) for s, d in zip(self.shapes, self.dtypes, strict=True))


@dataclass(frozen=True)
class UniformTypeKVCacheSpecs(KVCacheSpec):
    kv_cache_specs: dict[str, Any]

    @property
    def page_size_bytes(self) -> int:
        return sum(s.page_size_bytes for s in self.kv_cache_specs.values())


@dataclass
class KVCacheTensor:
    size: int
    shared_by: list[str]
    offset: int = 0
    block_stride: int = 0


@dataclass
class KVCacheGroupSpec:
    layer_names: list[str]
    kv_cache_spec: Any
    is_eagle_group: bool = False


@dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_tensors: list[Any]
    kv_cache_groups: list[Any] = field(default_factory=list)


def namespace() -> SimpleNamespace:
    """The stand-in classes as a module-like namespace (vLLM 0.28 field names)."""
    return SimpleNamespace(**{k: v for k, v in globals().items() if isinstance(v, type)})


def build_027() -> SimpleNamespace:
    """A vLLM-0.27-like namespace: full attention without ``indexes_kv_by_block_stride``, sliding
    windows without ``extra_retained_tokens``, chunked local attention without ``head_size_v``,
    tensors without ``offset`` / ``block_stride``."""

    @dataclass(frozen=True, kw_only=True)
    class FullAttentionSpec(KVCacheSpec):  # the 0.27-like class of that name
        num_kv_heads: int
        head_size: int
        dtype: torch.dtype
        head_size_v: int = None  # type: ignore[assignment]
        kv_quant_mode: KVQuantMode = KVQuantMode.NONE
        page_size_padded: int | None = None
        sliding_window: int | None = None
        attention_chunk_size: int | None = None

        def __post_init__(self) -> None:
            if self.head_size_v is None:
                object.__setattr__(self, "head_size_v", self.head_size)

    @dataclass
    class KVCacheTensor:
        size: int
        shared_by: list[str]

    @dataclass(frozen=True, kw_only=True)
    class SlidingWindowSpec(AttentionSpec):  # no extra_retained_tokens yet
        sliding_window: int

    @dataclass(frozen=True, kw_only=True)
    class ChunkedLocalAttentionSpec(KVCacheSpec):  # no head_size_v yet
        num_kv_heads: int
        head_size: int
        dtype: torch.dtype
        kv_quant_mode: KVQuantMode = KVQuantMode.NONE
        page_size_padded: int | None = None
        indexes_kv_by_block_stride: bool = False
        attention_chunk_size: int

    ns = namespace()
    ns.FullAttentionSpec = FullAttentionSpec
    ns.SlidingWindowSpec = SlidingWindowSpec
    ns.ChunkedLocalAttentionSpec = ChunkedLocalAttentionSpec
    ns.KVCacheTensor = KVCacheTensor
    return ns


def vllm_config(
    *,
    max_model_len: int = 4096,
    original_max_model_len: int | None = None,
    max_num_batched_tokens: int = 2048,
    disable_hybrid: bool = False,
    num_gpu_blocks_override: int | None = None,
    mamba_cache_mode: str = "none",
    dcp: int = 1,
    speculative: Any = None,
    kv_transfer_config: Any = None,
) -> SimpleNamespace:
    """A ``VllmConfig`` stand-in holding the attributes vLLM 0.28's planner reads."""
    return SimpleNamespace(
        model_config=SimpleNamespace(
            max_model_len=max_model_len,
            original_max_model_len=max_model_len
            if original_max_model_len is None
            else original_max_model_len,
        ),
        scheduler_config=SimpleNamespace(
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_encoder_input_tokens=max_num_batched_tokens,
            disable_hybrid_kv_cache_manager=disable_hybrid,
        ),
        cache_config=SimpleNamespace(
            num_gpu_blocks_override=num_gpu_blocks_override, mamba_cache_mode=mamba_cache_mode
        ),
        parallel_config=SimpleNamespace(decode_context_parallel_size=dcp, prefill_context_parallel_size=1),
        speculative_config=speculative,
        kv_transfer_config=kv_transfer_config,
        max_in_flight_tokens=max_num_batched_tokens,
    )


class MTPConfig:
    """A ``speculative_config`` stand-in for multi-module MTP."""

    def __init__(self, num_speculative_tokens: int, multi_module: bool = True) -> None:
        self.method = "mtp"
        self.num_speculative_tokens = num_speculative_tokens
        self._multi = multi_module

    def use_multi_module_mtp(self) -> bool:
        return self._multi

    def use_eagle(self) -> bool:
        return True


# -- vLLM 0.33 ---------------------------------------------------------------------------------
class _MultipleOf(int):
    """Stand-in for vLLM 0.33's ``MultipleOf`` alignment marker (only its identity matters)."""


def namespace_033() -> SimpleNamespace:
    """vLLM 0.33's spec, tensor, group and config classes (shared/reference/vllm-0.33-seam.md c):
    ``tokens_per_state`` instead of ``compress_ratio``, no ``indexes_kv_by_block_stride``,
    ``is_draft`` (``compare=False``), ``block_stride_alignment``, ``CircularBufferSpec``, Mamba
    prefill checkpoints, and the strided ``KVCacheTensor`` over one backing."""

    @dataclass(frozen=True)
    class KVCacheSpec:
        block_size: int
        _: dataclasses.KW_ONLY
        dcp_sharded: bool = False
        block_stride_alignment: Any = None
        is_draft: bool = field(default=False, compare=False)

    @dataclass(frozen=True, kw_only=True)
    class AttentionSpec(KVCacheSpec):
        dcp_sharded: bool = True
        max_tp_shards: int | None = None
        num_kv_heads: int
        head_size: int
        dtype: torch.dtype
        head_size_v: int = None  # type: ignore[assignment]
        kv_quant_mode: KVQuantMode = KVQuantMode.NONE
        page_size_padded: int | None = None
        num_head_slots: int | None = None
        state_content_bytes: int | None = None
        tokens_per_state: Any = 1

        def __post_init__(self) -> None:
            if self.head_size_v is None:
                object.__setattr__(self, "head_size_v", self.head_size)

        @property
        def num_states(self) -> int:
            return self.block_size // self.tokens_per_state if self.tokens_per_state > 0 else 1

        @property
        def page_size_bytes(self) -> int:
            heads = self.num_head_slots or self.num_kv_heads
            cell = self.state_content_bytes or (self.head_size + self.head_size_v) * _itemsize(self.dtype)
            unpadded = heads * self.num_states * cell
            if self.page_size_padded is not None:
                assert self.page_size_padded >= unpadded
                return self.page_size_padded
            return unpadded

    @dataclass(frozen=True, kw_only=True)
    class FullAttentionSpec(AttentionSpec):
        sliding_window: int | None = None
        attention_chunk_size: int | None = None
        non_causal: bool = False

    @dataclass(frozen=True, kw_only=True)
    class MLAAttentionSpec(FullAttentionSpec):
        head_size_v: int = 0
        cache_dtype_str: str | None = None
        topk_buffer_width: int | None = None
        alignment: int | None = None
        model_version: str | None = None
        is_index_group_leader: bool = False
        non_causal_multi_token_decode: bool = False

        def __post_init__(self) -> None:
            if self.alignment and self.page_size_padded is None:
                heads = self.num_head_slots or self.num_kv_heads
                cell = self.state_content_bytes or (self.head_size + self.head_size_v) * _itemsize(self.dtype)
                unpadded = heads * self.num_states * cell
                padded = -(-unpadded // self.alignment) * self.alignment
                if padded != unpadded:
                    object.__setattr__(self, "page_size_padded", padded)

    @dataclass(frozen=True, kw_only=True)
    class SlidingWindowSpec(AttentionSpec):
        sliding_window: int
        extra_retained_tokens: int = 0

    @dataclass(frozen=True, kw_only=True)
    class SlidingWindowMLASpec(SlidingWindowSpec):
        head_size_v: int = 0
        cache_dtype_str: str | None = None
        alignment: int | None = None
        model_version: str | None = None
        bounded_replay: bool = False

    @dataclass(frozen=True, kw_only=True)
    class HiddenStateCacheSpec(MLAAttentionSpec):
        pass

    @dataclass(frozen=True, kw_only=True)
    class CircularBufferSpec(AttentionSpec):
        pass

    @dataclass(frozen=True)
    class MambaSpec(KVCacheSpec):
        shapes: tuple[tuple[int, ...], ...] = ()
        dtypes: tuple[torch.dtype, ...] = ()
        page_size_padded: int | None = None
        mamba_type: MambaAttentionBackendEnum = MambaAttentionBackendEnum.MAMBA2
        mamba_cache_mode: str = "none"
        num_speculative_blocks: int = 0
        num_prefill_checkpoint_blocks: int = 0
        prefill_checkpoint_alignment: int | None = None
        num_heads: int = 1
        tokens_per_state: int = -1
        tp_replicated: bool = False

        @property
        def page_size_bytes(self) -> int:
            if self.page_size_padded is not None:
                return self.page_size_padded
            return sum(prod(s) * _itemsize(d) for s, d in zip(self.shapes, self.dtypes, strict=True))

    @dataclass(frozen=True)
    class UniformTypeKVCacheSpecs(KVCacheSpec):
        kv_cache_specs: dict[str, Any] = field(default_factory=dict)

        @property
        def page_size_bytes(self) -> int:
            return sum(s.page_size_bytes for s in self.kv_cache_specs.values())

    @dataclass
    class KVCacheTensor:
        size: int
        layers: list[str]
        layer_stride: int
        block_stride: int
        offset: int = 0
        host_resident: bool = False

    @dataclass
    class KVCacheGroupSpec:
        layer_names: list[str]
        kv_cache_spec: Any
        is_eagle_group: bool = False
        host_resident: bool = False
        enable_kv_transfer: bool = True

    @dataclass
    class KVCacheConfig:
        num_blocks: int
        kv_cache_tensors: list[Any]
        kv_cache_groups: list[Any] = field(default_factory=list)
        prefix_cache_retention_interval: int | None = None
        kv_cache_layout: str | None = None

    return SimpleNamespace(
        **{k: v for k, v in locals().items() if isinstance(v, type)}, MultipleOf=_MultipleOf
    )


class _Layout(enum.Enum):
    LBHNC = "LBHNC"
    LBNHC = "LBNHC"
    LHBNC = "LHBNC"
    BLHNC = "BLHNC"
    BLNHC = "BLNHC"
    BHLNC = "BHLNC"


def vllm_config_033(*, kv_cache_layout: str | None = "LBNHC", **kwargs: Any) -> SimpleNamespace:
    """A vLLM 0.33 ``VllmConfig`` stand-in: :func:`vllm_config` plus a resolved KV-cache layout
    (``cache_config.get_resolved_kv_cache_layout()`` raises while it is ``None``, as vLLM's does)."""
    cfg = vllm_config(**kwargs)
    cfg.cache_config.kv_cache_layout = kv_cache_layout

    def resolved() -> _Layout:
        if cfg.cache_config.kv_cache_layout is None:
            raise ValueError("kv_cache_layout is not resolved yet")
        return _Layout[cfg.cache_config.kv_cache_layout]

    cfg.cache_config.get_resolved_kv_cache_layout = resolved
    return cfg


# -- engine start (update_block_size_for_backend) ----------------------------------------------
#: the #43626 pair's configs (Qwen3-Coder-Next + a Qwen3-4B-class draft), shipped as an example
PAIR = Path(__file__).resolve().parent.parent / "kvrules" / "examples" / "hf" / "qwen3-coder-next"
#: vLLM 0.28.0's and 0.33.0's own values for the pair after ``update_block_size_for_backend``
#: (fp8, k=4, align mode, FlashAttention's MultipleOf(16), no prefill checkpoint alignment),
#: recorded with benchmarks/vllm_engine_start.py: (block_size, mamba_block_size, mamba_page_size_padded)
VLLM_PAIR_VALUES = (1136, 1136, None)


class Backend:
    """An attention backend stand-in: ``MultipleOf(kernel)`` or the fixed ``sizes``."""

    def __init__(self, name: str = "STANDIN_ATTN", kernel: int = 16, sizes: tuple[int, ...] = ()) -> None:
        self.name, self.kernel, self.sizes = name, kernel, sizes

    def get_name(self) -> str:
        return self.name

    def get_supported_kernel_block_sizes(self) -> list[int]:
        return list(self.sizes) or [self.kernel]

    def supports_block_size(self, block_size: int) -> bool:
        return any(block_size % s == 0 for s in self.get_supported_kernel_block_sizes())

    def get_preferred_block_size(self, default: int) -> int:
        return default if self.supports_block_size(default) else min(self.get_supported_kernel_block_sizes())

    def is_ssm(self) -> bool:
        return False


def pair_config(
    *,
    draft: dict[str, Any] | None = None,
    user_block_size: bool = False,
    values: tuple[int, int | None, int | None] = (16, None, None),
    max_model_len: int = 4096,
) -> SimpleNamespace:
    """A ``VllmConfig`` stand-in for the #43626 pair (fp8, TP1, 4 speculative tokens, align mode)
    with ``cache_config`` holding ``values`` (block, Mamba block, Mamba padded page)."""
    target = json.loads((PAIR / "config.json").read_text())
    draft_hf = draft if draft is not None else json.loads((PAIR / "draft.json").read_text())
    return SimpleNamespace(
        model_config=SimpleNamespace(
            hf_config=target, dtype=torch.bfloat16, max_model_len=max_model_len, use_mla=False, is_hybrid=True
        ),
        cache_config=SimpleNamespace(
            block_size=values[0],
            mamba_block_size=values[1],
            mamba_page_size_padded=values[2],
            user_specified_block_size=user_block_size,
            cache_dtype="fp8",
            mamba_cache_mode="align",
            mamba_cache_dtype="auto",
            mamba_ssm_cache_dtype="auto",
        ),
        parallel_config=SimpleNamespace(tensor_parallel_size=1),
        speculative_config=SimpleNamespace(
            method="draft_model",
            num_speculative_tokens=4,
            draft_model_config=SimpleNamespace(hf_config=draft_hf),
        ),
    )


def vllm_platform_class(values: tuple[int, int | None, int | None] = VLLM_PAIR_VALUES) -> type:
    """A platform stand-in whose ``update_block_size_for_backend`` writes vLLM's ``values`` and
    records every call (``calls``: the block size it found on entry)."""

    class Platform:
        calls: ClassVar[list[int]] = []

        @classmethod
        def update_block_size_for_backend(cls, vllm_config: Any) -> None:
            cls.calls.append(vllm_config.cache_config.block_size)
            cache = vllm_config.cache_config
            cache.block_size, cache.mamba_block_size, cache.mamba_page_size_padded = values

    return Platform


# -- a whole vLLM line's planning seam, as modules ---------------------------------------------
def seam_function(name: str, params: tuple[str, ...], calls: list[tuple[str, tuple[Any, ...]]]) -> Any:
    """A function that records its calls and answers ``("vllm", name)``, with vLLM's parameter
    names as its signature (what kvrules' seam detection reads)."""

    def seam(*args: Any) -> Any:
        calls.append((name, args))
        return ("vllm", name)

    seam.__name__ = seam.__qualname__ = name
    seam.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in params]
    )
    return seam


SEAMS: dict[str, dict[str, tuple[str, ...]]] = {
    "0.28": {
        "unify_kv_cache_spec_page_size": ("kv_cache_spec",),
        "get_kv_cache_groups": ("vllm_config", "kv_cache_spec"),
        "get_kv_cache_config_from_groups": ("vllm_config", "kv_cache_groups", "available_memory"),
        "get_kv_cache_configs": ("vllm_config", "kv_cache_specs", "available_memory"),
    },
    "0.32": {
        "get_kv_cache_groups": ("vllm_config", "kv_cache_spec"),
        "_pool_bytes_per_block": ("vllm_config", "kv_cache_groups"),
        "get_kv_cache_config_from_groups": ("vllm_config", "kv_cache_groups", "available_memory"),
        "get_kv_cache_configs": ("vllm_config", "kv_cache_specs", "available_memory"),
    },
    "0.33": {"get_kv_cache_capacity": ("vllm_config", "kv_cache_config")},
}


def fake_vllm_modules(line: str) -> tuple[dict[str, Any], list[tuple[str, tuple[Any, ...]]]]:
    """The modules of a stand-in vLLM of ``line`` (``"0.28"``, ``"0.32"``, ``"0.33"``) by name,
    for ``sys.modules``: ``kv_cache_utils`` with that line's seam functions (each records its
    calls in the returned list), ``kv_cache_interface`` with that line's classes and, on 0.33,
    the builder module."""
    import types

    calls: list[tuple[str, tuple[Any, ...]]] = []
    utils = types.ModuleType("vllm.v1.core.kv_cache_utils")
    for name, params in SEAMS[line].items():
        setattr(utils, name, seam_function(name, params, calls))
    interface = types.ModuleType("vllm.v1.kv_cache_interface")
    for name, value in vars(namespace() if line == "0.28" else namespace_033()).items():
        setattr(interface, name, value)
    modules: dict[str, Any] = {utils.__name__: utils, interface.__name__: interface}
    if line == "0.33":
        builder = types.ModuleType("vllm.v1.core.kv_cache_config_builder")

        class KVCacheConfigBuilder:
            def get_kv_cache_groups(self, vllm_config: Any, kv_cache_spec: Any) -> Any:
                raise NotImplementedError

            def get_kv_cache_config_from_groups(
                self, vllm_config: Any, kv_cache_groups: Any, num_blocks: int
            ) -> Any:
                raise NotImplementedError

        builder.KVCacheConfigBuilder = KVCacheConfigBuilder  # type: ignore[attr-defined]
        modules[builder.__name__] = builder
    return modules, calls
