"""Engine settings that planning depends on (:class:`EngineConfig`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from functools import partial
from typing import Any

from kvrules.errors import ConfigError, KVRulesError
from kvrules.values import (
    MAX_BLOCKS,
    MAX_DIMENSION,
    MAX_TOKENS,
    allowed_range,
    as_bool,
    as_int,
    as_name,
    shown,
)

DEFAULT_DRAFT_PREFIXES: tuple[str, ...] = ("draft.", "drafter.", "draft_model.")
#: speculative methods whose drafter reads the target's hidden states (vLLM 0.28's ``use_eagle()``)
EAGLE_STYLE_METHODS: frozenset[str] = frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})
#: vLLM 0.33's KV-cache layouts (``KVCacheLayout``): the stride order of ``[L, B, H, N, C]``
#: (layers, blocks, heads, states, content); the ``B``-first ones are block-outermost
KV_CACHE_LAYOUTS: tuple[str, ...] = ("LBHNC", "LBNHC", "LHBNC", "BLHNC", "BLNHC", "BHLNC")
#: the layout vLLM 0.33 resolves when no attention backend declares one
DEFAULT_KV_CACHE_LAYOUT = "LBNHC"
#: what vLLM 0.33's DeepSeek-V4 indexer backend declares (``supported_kv_cache_layouts``,
#: ``v1/attention/backends/mla/indexer.py:349``); vLLM resolves the first
DEEPSEEK_V4_LAYOUTS: tuple[str, ...] = ("BLHNC", "BLNHC")


def _integer(value: Any, name: str, *, minimum: int, maximum: int, optional: bool = False) -> int | None:
    """``value`` as an ``int`` in ``[minimum, maximum]`` (numpy integers normalised)."""
    if optional and value is None:
        return None
    try:
        return as_int(value, name, minimum=minimum, maximum=maximum, error=ConfigError)
    except KVRulesError:
        allowed = allowed_range("an integer", minimum, maximum)
        raise ConfigError(f"EngineConfig.{name}={shown(value)} must be {allowed}") from None


def _flag(value: Any, name: str) -> bool:
    try:
        return as_bool(value, name, error=ConfigError)
    except KVRulesError:
        raise ConfigError(f"EngineConfig.{name}={shown(value)} must be true or false") from None


def _prefixes(value: Any, name: str) -> tuple[str, ...]:
    """A tuple of non-empty prefixes from a list or tuple of them (a bare string is refused: it
    would be read as one prefix per character)."""
    problem = ConfigError(
        f"EngineConfig.{name}={shown(value)} must be a list of non-empty layer-name prefixes, "
        "e.g. ['draft.'] (an empty list: no draft layers)"
    )
    if not isinstance(value, (list, tuple)):
        raise problem
    try:
        return tuple(as_name(p, name, error=ConfigError) for p in value)
    except KVRulesError:
        raise problem from None


def _method(value: Any, name: str) -> str | None:
    if value is None:
        return None
    try:
        method = as_name(value, name, error=ConfigError)
    except KVRulesError:
        method = ""
    if not method.strip():
        raise ConfigError(
            f"EngineConfig.{name}={shown(value)} must be a method name such as 'mtp' or "
            "'eagle3', or null for no speculative decoding"
        )
    return method


def _layout(value: Any, name: str) -> str | None:
    """``None`` or one of :data:`KV_CACHE_LAYOUTS` (upper case, as vLLM names them)."""
    if value is None or (isinstance(value, str) and value in KV_CACHE_LAYOUTS):
        return value
    raise ConfigError(
        f"EngineConfig.{name}={shown(value)} must be null or one of vLLM 0.33's KV-cache layouts: "
        f"{', '.join(KV_CACHE_LAYOUTS)}"
    )


def _optional_flag(value: Any, name: str) -> bool | None:
    return None if value is None else _flag(value, name)


_tokens = partial(_integer, maximum=MAX_TOKENS)
_parallel = partial(_integer, minimum=1, maximum=MAX_DIMENSION)

#: field name -> its check: the value as stored, or a :class:`ConfigError` naming the field
FIELD_CHECKS: dict[str, Callable[[Any, str], Any]] = {
    "max_model_len": partial(_tokens, minimum=1),
    "max_num_batched_tokens": partial(_tokens, minimum=0),
    "max_num_encoder_input_tokens": partial(_tokens, minimum=0, optional=True),
    "disable_hybrid_kv_cache_manager": _flag,
    "num_gpu_blocks_override": partial(_integer, minimum=1, maximum=MAX_BLOCKS, optional=True),
    "decode_context_parallel_size": _parallel,
    "prefill_context_parallel_size": _parallel,
    "extra_retained_tokens": partial(_tokens, minimum=0),
    "draft_layer_prefixes": _prefixes,
    "auto_fit_max_model_len": _flag,
    "speculative_method": _method,
    "kv_cache_layout": _layout,
    "reserve_null_block": _optional_flag,
}


def check_settings(data: Any) -> dict[str, Any]:
    """Engine settings (some or all :class:`EngineConfig` fields, e.g. a model file's ``engine``
    section), each checked and normalised (numpy integers to ``int``, a prefix list to a tuple).

    :raises ConfigError: not a mapping, an unknown key, or an invalid value (naming the field).
    """
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"engine settings must be a mapping of EngineConfig fields, got {type(data).__name__} {shown(data)}"
        )
    unknown = sorted(repr(k) if not isinstance(k, str) else k for k in data if k not in FIELD_CHECKS)
    if unknown:
        raise ConfigError(
            f"unknown engine setting(s) {', '.join(unknown)}; known: {', '.join(sorted(FIELD_CHECKS))}"
        )
    return {name: FIELD_CHECKS[name](value, name) for name, value in data.items()}


@dataclass(frozen=True)
class EngineConfig:
    """What the engine is configured to serve; field names and defaults follow vLLM 0.28.

    :param max_model_len: longest request in tokens (> 0); with ``auto_fit_max_model_len`` the upper bound.
    :param max_num_batched_tokens: tokens scheduled per step (sliding-window and chunked memory).
    :param max_num_encoder_input_tokens: encoder tokens for cross attention; ``None`` means
        ``max_num_batched_tokens``.
    :param disable_hybrid_kv_cache_manager: convert hybrid models to one spec type (vLLM's flag).
    :param num_gpu_blocks_override: replace every worker's memory by this many blocks' bytes.
    :param decode_context_parallel_size: DCP size (full attention memory is divided by DCP x PCP).
    :param prefill_context_parallel_size: PCP size.
    :param extra_retained_tokens: tokens every sliding-window layer keeps below its window.
    :param draft_layer_prefixes: layer-name prefixes that mark draft-model layers.
    :param auto_fit_max_model_len: find the largest ``max_model_len`` that fits on every worker.
    :param speculative_method: vLLM's ``speculative_config.method`` (``None``: no speculative
        decoding). With an EAGLE-style method (:data:`EAGLE_STYLE_METHODS`) the
        ``deepseekv4-packing`` route flags the group holding the last layer ``is_eagle_group``.
    :param kv_cache_layout: the KV-cache layout the engine resolved (vLLM 0.33's
        ``cache_config.get_resolved_kv_cache_layout()``, one of :data:`KV_CACHE_LAYOUTS`);
        ``None``: :data:`DEFAULT_KV_CACHE_LAYOUT`, what vLLM 0.33 resolves when no backend declares
        one. Read by the ``vllm-0.33`` preset: a block-outermost layout packs mixed pages into one
        block (``layout-packing``), a layer-outermost one unifies them; it fixes every tensor's
        strides (``one-backing``). The ``vllm-0.28`` rules ignore it.
    :param reserve_null_block: hold one block's bytes back from the memory check and auto-fit
        (vLLM 0.33's null block, which the block pool keeps); the allocation still uses all the
        memory. ``None``: as the tensor layout says (``one-backing`` reserves, the 0.28 layouts
        do not).
    """

    max_model_len: int
    max_num_batched_tokens: int = 2048
    max_num_encoder_input_tokens: int | None = None
    disable_hybrid_kv_cache_manager: bool = False
    num_gpu_blocks_override: int | None = None
    decode_context_parallel_size: int = 1
    prefill_context_parallel_size: int = 1
    extra_retained_tokens: int = 0
    draft_layer_prefixes: tuple[str, ...] = DEFAULT_DRAFT_PREFIXES
    auto_fit_max_model_len: bool = False
    speculative_method: str | None = None
    kv_cache_layout: str | None = None
    reserve_null_block: bool | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, FIELD_CHECKS[f.name](getattr(self, f.name), f.name))

    @property
    def eagle_style_speculation(self) -> bool:
        """True when the drafter reads the target's hidden states (vLLM's ``use_eagle()``)."""
        return self.speculative_method is not None and self.speculative_method in EAGLE_STYLE_METHODS

    @property
    def encoder_input_tokens(self) -> int:
        """Encoder tokens that cross attention must hold for one request."""
        if self.max_num_encoder_input_tokens is None:
            return self.max_num_batched_tokens
        return self.max_num_encoder_input_tokens

    @property
    def context_parallel_size(self) -> int:
        """DCP x PCP: how many ranks share one request's full-attention tokens."""
        return self.decode_context_parallel_size * self.prefill_context_parallel_size

    @property
    def resolved_kv_cache_layout(self) -> str:
        """:attr:`kv_cache_layout`, or :data:`DEFAULT_KV_CACHE_LAYOUT` when unset."""
        return self.kv_cache_layout or DEFAULT_KV_CACHE_LAYOUT

    @property
    def block_outermost(self) -> bool:
        """True when the resolved layout puts blocks outermost (``B...``): every block holds all
        layers' pages back to back (vLLM 0.33's ``KVCacheLayout.is_block_outermost``)."""
        return self.resolved_kv_cache_layout.startswith("B")

    def layout_for(self, specs: Iterable[Any]) -> tuple[str, str]:
        """The KV-cache layout vLLM 0.33 plans ``specs`` against, and where it comes from:
        :attr:`kv_cache_layout` when set; else what vLLM 0.33's CUDA attention backends declare
        for these layers: the DeepSeek-V4 indexer (a layer whose ``model_version`` is
        ``"deepseek_v4"``) :data:`DEEPSEEK_V4_LAYOUTS`, no other backend anything, so
        :data:`DEFAULT_KV_CACHE_LAYOUT`."""
        if self.kv_cache_layout is not None:
            return self.kv_cache_layout, "EngineConfig.kv_cache_layout"
        if any(getattr(s, "model_version", None) == "deepseek_v4" for s in specs):
            return DEEPSEEK_V4_LAYOUTS[0], "declared by the DeepSeek-V4 indexer backend"
        return DEFAULT_KV_CACHE_LAYOUT, "no backend declares one (vLLM 0.33's default)"

    def is_draft_layer(self, layer_name: str) -> bool:
        """True when ``layer_name`` starts with one of :attr:`draft_layer_prefixes`."""
        return layer_name.startswith(self.draft_layer_prefixes)

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON values."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["draft_layer_prefixes"] = list(self.draft_layer_prefixes)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineConfig:
        """Build a config from :meth:`to_dict` output (see :func:`check_settings`).

        :raises ConfigError: not a mapping, an unknown key, a missing ``max_model_len``, or an
            invalid value.
        """
        values = check_settings(data)
        if "max_model_len" not in values:
            raise ConfigError("engine setting max_model_len is required")
        return cls(**values)
