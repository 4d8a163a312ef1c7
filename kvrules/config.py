"""Engine settings that planning depends on (:class:`EngineConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from kvrules.errors import ConfigError

DEFAULT_DRAFT_PREFIXES: tuple[str, ...] = ("draft.", "drafter.", "draft_model.")
#: speculative methods whose drafter reads the target's hidden states (vLLM 0.28's ``use_eagle()``)
EAGLE_STYLE_METHODS: frozenset[str] = frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"EngineConfig.{name}={value!r} must be an integer")
    if value < minimum:
        raise ConfigError(f"EngineConfig.{name}={value} must be >= {minimum}")


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

    def __post_init__(self) -> None:
        _check_int("max_model_len", self.max_model_len, 1)
        _check_int("max_num_batched_tokens", self.max_num_batched_tokens, 0)
        if self.max_num_encoder_input_tokens is not None:
            _check_int("max_num_encoder_input_tokens", self.max_num_encoder_input_tokens, 0)
        if self.num_gpu_blocks_override is not None:
            _check_int("num_gpu_blocks_override", self.num_gpu_blocks_override, 1)
        _check_int("decode_context_parallel_size", self.decode_context_parallel_size, 1)
        _check_int("prefill_context_parallel_size", self.prefill_context_parallel_size, 1)
        _check_int("extra_retained_tokens", self.extra_retained_tokens, 0)
        for name in ("disable_hybrid_kv_cache_manager", "auto_fit_max_model_len"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"EngineConfig.{name}={getattr(self, name)!r} must be true or false")
        prefixes = self.draft_layer_prefixes
        if isinstance(prefixes, str) or not all(isinstance(p, str) and p for p in prefixes):
            raise ConfigError(
                f"EngineConfig.draft_layer_prefixes={prefixes!r} must be a sequence of non-empty strings"
            )
        object.__setattr__(self, "draft_layer_prefixes", tuple(prefixes))
        method = self.speculative_method
        if method is not None and (not isinstance(method, str) or not method.strip()):
            raise ConfigError(
                f"EngineConfig.speculative_method={method!r} must be a method name such as 'mtp' or "
                "'eagle3', or null for no speculative decoding"
            )

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

    def is_draft_layer(self, layer_name: str) -> bool:
        """True when ``layer_name`` starts with one of :attr:`draft_layer_prefixes`."""
        return layer_name.startswith(self.draft_layer_prefixes)

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON values."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["draft_layer_prefixes"] = list(self.draft_layer_prefixes)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineConfig:
        """Build a config from :meth:`to_dict` output; unknown keys raise :class:`ConfigError`."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"unknown engine setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        if "max_model_len" not in data:
            raise ConfigError("engine setting max_model_len is required")
        values = dict(data)
        if "draft_layer_prefixes" in values:
            values["draft_layer_prefixes"] = tuple(values["draft_layer_prefixes"])
        return cls(**values)
