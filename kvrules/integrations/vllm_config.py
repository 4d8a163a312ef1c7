"""Reading the settings vLLM 0.28's planner reads from a ``VllmConfig`` into an EngineConfig.

The attributes read are exactly those vLLM's ``get_kv_cache_configs`` and the spec classes'
``max_memory_usage_bytes`` read (the shared cases list them as ``config_fields_read``):

=================================================  ==========================================
vLLM attribute                                     kvrules
=================================================  ==========================================
``model_config.max_model_len``                     ``EngineConfig.max_model_len``
``model_config.original_max_model_len == -1``      ``auto_fit_max_model_len``
``max_in_flight_tokens`` (before 0.28:              ``max_num_batched_tokens``
``scheduler_config.max_num_batched_tokens``)
``scheduler_config.max_num_encoder_input_tokens``  ``max_num_encoder_input_tokens``
``scheduler_config.disable_hybrid_kv_cache_manager``  ``disable_hybrid_kv_cache_manager``
``cache_config.num_gpu_blocks_override``           ``num_gpu_blocks_override``
``parallel_config.decode_context_parallel_size``   ``decode_context_parallel_size``
``speculative_config`` (multi-module MTP)          ``extra_retained_tokens = k - 1``
``speculative_config.method``                      ``speculative_method``
``cache_config.mamba_cache_mode``                  checked against every Mamba layer's own mode
``kv_transfer_config`` (cross-layer blocks)        unsupported opt-in: a ConfigError
=================================================  ==========================================

vLLM 0.28 does not read ``prefill_context_parallel_size`` while planning, so neither does this.
Duck-typed: any object with these attributes works (vLLM's own tests pass ``SimpleNamespace``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kvrules.config import EngineConfig
from kvrules.errors import ConfigError

_MISSING = object()


def _get(root: Any, path: str, default: Any = _MISSING) -> Any:
    """``root.a.b`` for ``path="a.b"``; ``default`` when an attribute is absent or a parent is None."""
    value = root
    for part in path.split("."):
        if value is None:
            return default
        value = getattr(value, part, _MISSING)
        if value is _MISSING:
            return default
    return value


def config_value(root: Any, path: str, default: Any = None) -> Any:
    """``root.a.b`` for ``path="a.b"``, or ``default`` when an attribute is absent or a parent is
    ``None`` (any object with the attributes works: vLLM's own tests pass ``SimpleNamespace``)."""
    return _get(root, path, default)


def _required(root: Any, path: str) -> Any:
    value = _get(root, path)
    if value is _MISSING:
        raise ConfigError(
            f"vllm_config.{path} is missing; kvrules reads it as vLLM's planner does "
            "(pass a complete VllmConfig)"
        )
    return value


def extra_retained_tokens(vllm_config: Any) -> int:
    """Tokens every sliding-window layer keeps below its window (vLLM 0.28: multi-module MTP).

    ``num_speculative_tokens - 1`` when ``speculative_config.use_multi_module_mtp()`` is true
    (a vLLM without that method never retains extra tokens), else 0.
    """
    spec = _get(vllm_config, "speculative_config", None)
    multi = getattr(spec, "use_multi_module_mtp", None)
    if not callable(multi) or not multi():
        return 0
    return max(int(spec.num_speculative_tokens) - 1, 0)


def speculative_method(vllm_config: Any) -> str | None:
    """``speculative_config.method``, or ``None`` without speculative decoding."""
    method = _get(vllm_config, "speculative_config.method", None)
    return None if method is None else str(method)


def cross_layer_blocks(vllm_config: Any) -> bool:
    """Whether the KV connector opted into vLLM's experimental packed cross-layer blocks."""
    extra = _get(vllm_config, "kv_transfer_config.kv_connector_extra_config", None) or {}
    return str(extra.get("enable_cross_layers_blocks", "False")).lower() == "true"


@dataclass(frozen=True)
class VllmSettings:
    """What planning needs from a ``VllmConfig``.

    :ivar engine: the kvrules engine settings.
    :ivar mamba_cache_mode: ``cache_config.mamba_cache_mode`` (``None`` when absent).
    :ivar cross_layer_blocks: the connector asked for packed cross-layer blocks.
    """

    engine: EngineConfig
    mamba_cache_mode: str | None = None
    cross_layer_blocks: bool = False


def read_vllm_config(vllm_config: Any, *, grouping_only: bool = False) -> VllmSettings:
    """Read the planner's settings from ``vllm_config``.

    :param grouping_only: read for ``get_kv_cache_groups``, which needs only the hybrid-manager
        switch; absent length settings then fall back to harmless defaults.
    :raises ConfigError: a required attribute is missing, or a value is invalid.
    """
    if grouping_only:
        length = _get(vllm_config, "model_config.max_model_len", 1)
    else:
        length = _required(vllm_config, "model_config.max_model_len")
    in_flight = _get(vllm_config, "max_in_flight_tokens")
    if in_flight is _MISSING or not isinstance(in_flight, int):
        in_flight = _get(vllm_config, "scheduler_config.max_num_batched_tokens", 2048)
    encoder = _get(vllm_config, "scheduler_config.max_num_encoder_input_tokens", None)
    override = _get(vllm_config, "cache_config.num_gpu_blocks_override", None)
    dcp = _get(vllm_config, "parallel_config.decode_context_parallel_size", 1)
    try:
        engine = EngineConfig(
            max_model_len=int(length),
            max_num_batched_tokens=int(in_flight),
            max_num_encoder_input_tokens=None if encoder is None else int(encoder),
            disable_hybrid_kv_cache_manager=bool(
                _get(vllm_config, "scheduler_config.disable_hybrid_kv_cache_manager", False)
            ),
            num_gpu_blocks_override=None if override is None else int(override),
            decode_context_parallel_size=int(dcp or 1),
            extra_retained_tokens=extra_retained_tokens(vllm_config),
            speculative_method=speculative_method(vllm_config),
            auto_fit_max_model_len=_get(vllm_config, "model_config.original_max_model_len", None) == -1,
        )
    except ConfigError as exc:
        raise ConfigError(f"vllm_config: {exc}") from None
    mode = _get(vllm_config, "cache_config.mamba_cache_mode", None)
    return VllmSettings(
        engine=engine,
        mamba_cache_mode=None if mode is None else str(mode),
        cross_layer_blocks=cross_layer_blocks(vllm_config),
    )


def resolved_kv_cache_layout(vllm_config: Any) -> str | None:
    """vLLM 0.33's ``cache_config.get_resolved_kv_cache_layout()`` as a layout name, or ``None``
    where vLLM has no such method (0.28) or has not resolved a layout yet (the method raises)."""
    resolve = _get(vllm_config, "cache_config.get_resolved_kv_cache_layout", None)
    if not callable(resolve):
        return None
    try:
        layout = resolve()
    except Exception:  # vLLM raises while cache_config.kv_cache_layout is None
        return None
    name = getattr(layout, "name", layout)
    return None if name is None else str(name).upper()


def read_vllm033_config(vllm_config: Any, *, grouping_only: bool = False) -> VllmSettings:
    """:func:`read_vllm_config` plus what vLLM 0.33's builder reads: the resolved KV-cache layout
    (``EngineConfig.kv_cache_layout``). Sliding windows keep the ``extra_retained_tokens`` vLLM
    0.33's Core already wrote on each spec, so the setting is not re-derived here.

    :raises ConfigError: a required attribute is missing, or a value is invalid.
    """
    settings = read_vllm_config(vllm_config, grouping_only=grouping_only)
    try:
        engine = replace(
            settings.engine, kv_cache_layout=resolved_kv_cache_layout(vllm_config), extra_retained_tokens=0
        )
    except ConfigError as exc:
        raise ConfigError(f"vllm_config.cache_config.kv_cache_layout: {exc}") from None
    return replace(settings, engine=engine)


__all__ = [
    "VllmSettings",
    "config_value",
    "read_vllm033_config",
    "resolved_kv_cache_layout",
    "cross_layer_blocks",
    "extra_retained_tokens",
    "read_vllm_config",
    "speculative_method",
]
