"""Engine options that decide per-layer specs: :class:`HFOptions` (vLLM's flag names and defaults)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvrules.dtypes import dtype_name
from kvrules.errors import ConfigError, KVRulesError
from kvrules.hf.backends import AUTO, BACKENDS
from kvrules.specs.base import KVQuantMode
from kvrules.specs.mamba import MAMBA_CACHE_MODES
from kvrules.values import MAX_DIMENSION, MAX_TOKENS, allowed_range, as_int, shown

#: ``--kv-cache-dtype`` value -> (storage dtype or None for the model dtype, quant mode); formulas §1.1
KV_CACHE_DTYPES: dict[str, tuple[str | None, KVQuantMode]] = {
    "auto": (None, KVQuantMode.NONE),
    "bfloat16": ("bfloat16", KVQuantMode.NONE),
    "float16": ("float16", KVQuantMode.NONE),
    "fp8": ("uint8", KVQuantMode.FP8_PER_TENSOR),
    "fp8_e4m3": ("uint8", KVQuantMode.FP8_PER_TENSOR),
    "fp8_e5m2": ("uint8", KVQuantMode.FP8_PER_TENSOR),
    "fp8_per_token_head": ("uint8", KVQuantMode.FP8_PER_TOKEN_HEAD),
    "int8_per_token_head": ("int8", KVQuantMode.INT8_PER_TOKEN_HEAD),
    "nvfp4": ("uint8", KVQuantMode.NVFP4),
    "fp8_ds_mla": ("uint8", KVQuantMode.FP8_PER_TENSOR),
}

#: kv cache dtypes that only multi-head latent attention can use
MLA_ONLY_KV_CACHE_DTYPES = frozenset({"fp8_ds_mla"})

#: ``--mamba-cache-dtype`` / ``--mamba-ssm-cache-dtype`` values
MAMBA_DTYPES = ("auto", "float32", "bfloat16", "float16")

#: what a model's activation dtype (``--dtype``, the config's ``torch_dtype``) may be: a float type
MODEL_DTYPES = ("bfloat16", "float16", "float32")


def model_dtype_name(value: Any, what: str) -> str | None:
    """The canonical name of ``value`` (aliases such as ``bf16`` and ``half`` resolved) when it is
    one of :data:`MODEL_DTYPES`, else ``None`` (also for anything but a name or a ``torch.dtype``)."""
    if not isinstance(value, str) and type(value).__module__ != "torch":
        return None
    try:
        name = dtype_name(value, field=what)
    except KVRulesError:
        return None
    return name if name in MODEL_DTYPES else None


def _check_choice(name: str, value: Any, choices: Any) -> None:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"{name}={shown(value)} is not supported; use one of {', '.join(choices)}")


def _checked_int(name: str, value: Any, minimum: int, maximum: int) -> int | None:
    """``None``, or ``value`` as an ``int`` in ``[minimum, maximum]`` (numpy integers normalised)."""
    if value is None:
        return None
    try:
        return as_int(value, name, minimum=minimum, maximum=maximum, error=ConfigError)
    except KVRulesError:
        raise ConfigError(
            f"{name}={shown(value)} must be {allowed_range('an integer', minimum, maximum)}"
        ) from None


#: integer option -> (minimum, maximum, optional)
INT_OPTIONS: dict[str, tuple[int, int, bool]] = {
    "tensor_parallel_size": (1, MAX_DIMENSION, False),
    "block_size": (1, MAX_TOKENS, True),
    "mamba_block_size": (8, MAX_TOKENS, True),
    "num_speculative_tokens": (0, MAX_TOKENS, False),
    "max_model_len": (1, MAX_TOKENS, True),
}


@dataclass(frozen=True)
class HFOptions:
    """How the engine will serve the model; everything that changes a layer's spec.

    :param kv_cache_dtype: ``auto`` (the model dtype), ``bfloat16``, ``float16``, ``fp8``,
        ``fp8_e4m3``, ``fp8_e5m2``, ``fp8_per_token_head``, ``int8_per_token_head``, ``nvfp4``,
        ``fp8_ds_mla`` (MLA models only).
    :param draft_kv_cache_dtype: the draft model's KV dtype (``None``: same as the target's).
    :param tensor_parallel_size: ranks the attention heads and Mamba states are split over.
    :param block_size: cache block size in tokens (``None``: the backend's preferred size, 16).
    :param mamba_cache_dtype: Mamba conv-state dtype (``auto``: the model dtype).
    :param mamba_ssm_cache_dtype: Mamba SSM-state dtype (``auto``: the model's own default,
        else the conv-state dtype).
    :param mamba_cache_mode: ``none``, ``align`` (vLLM's default with prefix caching) or ``all``.
    :param mamba_block_size: Mamba block size for ``all`` mode (``None``: the model's chunk size).
    :param num_speculative_tokens: draft tokens per step (extra conv rows, speculative blocks).
    :param attention_backend: ``auto`` or a name from :data:`kvrules.hf.backends.BACKENDS`.
    :param dtype: the model dtype (``auto``: the config's ``torch_dtype``/``dtype``).
    :param max_model_len: the longest request (``None``: the config's ``max_position_embeddings``).
    :raises ConfigError: an invalid value, naming the option and the allowed values.
    """

    kv_cache_dtype: str = "auto"
    draft_kv_cache_dtype: str | None = None
    tensor_parallel_size: int = 1
    block_size: int | None = None
    mamba_cache_dtype: str = "auto"
    mamba_ssm_cache_dtype: str = "auto"
    mamba_cache_mode: str = "align"
    mamba_block_size: int | None = None
    num_speculative_tokens: int = 0
    attention_backend: str = AUTO
    dtype: str = "auto"
    max_model_len: int | None = None

    def __post_init__(self) -> None:
        for name, (minimum, maximum, optional) in INT_OPTIONS.items():
            value = getattr(self, name)
            if value is None and not optional:
                raise ConfigError(f"{name}=None must be {allowed_range('an integer', minimum, maximum)}")
            object.__setattr__(self, name, _checked_int(name, value, minimum, maximum))
        _check_choice("kv_cache_dtype", self.kv_cache_dtype, KV_CACHE_DTYPES)
        if self.draft_kv_cache_dtype is not None:
            _check_choice("draft_kv_cache_dtype", self.draft_kv_cache_dtype, KV_CACHE_DTYPES)
        _check_choice("mamba_cache_dtype", self.mamba_cache_dtype, MAMBA_DTYPES)
        _check_choice("mamba_ssm_cache_dtype", self.mamba_ssm_cache_dtype, MAMBA_DTYPES)
        _check_choice("mamba_cache_mode", self.mamba_cache_mode, MAMBA_CACHE_MODES)
        _check_choice("attention_backend", self.attention_backend, (AUTO, *BACKENDS))
        self._check_mamba_block_size()
        object.__setattr__(self, "dtype", self._model_dtype())

    def _check_mamba_block_size(self) -> None:
        if self.mamba_block_size is None:
            return
        if self.mamba_block_size % 8:
            raise ConfigError(f"mamba_block_size={self.mamba_block_size} must be a multiple of 8")
        if self.mamba_cache_mode != "all":
            raise ConfigError(
                f"mamba_block_size applies only with mamba_cache_mode 'all' (got {self.mamba_cache_mode!r}); "
                "in 'align' mode the Mamba block follows the attention block"
            )

    def _model_dtype(self) -> str:
        """``auto``, or the canonical name of a model dtype (:data:`MODEL_DTYPES`)."""
        if self.dtype == "auto":
            return "auto"
        name = model_dtype_name(self.dtype, "dtype")
        if name is None:
            raise ConfigError(
                f"dtype={shown(self.dtype)} is not a model dtype; use auto or one of {', '.join(MODEL_DTYPES)} "
                "(the KV cache's dtype is kv_cache_dtype)"
            )
        return name

    def replace(self, **changes: Any) -> HFOptions:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Every option as a plain JSON value."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HFOptions:
        """Build options from :meth:`to_dict` output; unknown keys raise :class:`ConfigError`."""
        known = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(data, Mapping):
            raise ConfigError(f"options must be a mapping of HFOptions fields, got {type(data).__name__}")
        unknown = sorted(map(str, set(data) - known))
        if unknown:
            raise ConfigError(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)
