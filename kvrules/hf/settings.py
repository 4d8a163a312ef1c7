"""Settings resolved for one model: :class:`HFOptions` + its config -> :class:`BuildSettings`.

This is what an architecture's ``build`` receives: concrete dtypes, the KV quantisation, the
block sizes before alignment, the backend, and a note for each choice made on the user's behalf
(the notes become the ``arch`` decision's reason).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvrules.errors import ConfigError
from kvrules.hf.backends import AttentionBackend, resolve_backend
from kvrules.hf.config import HFConfig
from kvrules.hf.options import (
    KV_CACHE_DTYPES,
    MLA_ONLY_KV_CACHE_DTYPES,
    MODEL_DTYPES,
    HFOptions,
    model_dtype_name,
)
from kvrules.specs.base import KVQuantMode
from kvrules.values import shown

DEFAULT_MODEL_DTYPE = "bfloat16"


@dataclass(frozen=True)
class KVCacheDType:
    """A resolved ``--kv-cache-dtype``: storage dtype, quantisation, and the original string."""

    option: str
    dtype: str
    quant_mode: KVQuantMode

    @property
    def cache_dtype_str(self) -> str:
        """The option string, as MLA specs record it (``fp8_ds_mla`` changes the page formula)."""
        return self.option

    def describe(self) -> str:
        """``fp8 (uint8, FP8_PER_TENSOR)``."""
        quant = "" if self.quant_mode is KVQuantMode.NONE else f", {self.quant_mode.name}"
        return f"{self.option} ({self.dtype}{quant})"


@dataclass(frozen=True)
class BuildSettings:
    """Concrete settings for building one model's specs (target or draft).

    :ivar options: the user's options.
    :ivar model_dtype: the model's compute dtype (``auto`` resolved from the config).
    :ivar kv: the KV-cache dtype of this model's attention layers.
    :ivar tensor_parallel_size: TP size.
    :ivar block_size: the cache block size before hybrid alignment.
    :ivar user_block_size: True when the user fixed ``block_size`` (alignment may still grow it).
    :ivar backend: the attention backend.
    :ivar num_speculative_tokens: draft tokens per step.
    :ivar mamba_cache_mode: ``none``, ``align`` or ``all``.
    :ivar mamba_block_size: the Mamba block size before alignment.
    :ivar mamba_conv_dtype: dtype of Mamba conv states.
    :ivar mamba_ssm_dtype: dtype of Mamba SSM (temporal) states.
    :ivar max_model_len: the longest request (``None`` when neither options nor config say).
    :ivar notes: sentences saying how defaults were chosen.
    """

    options: HFOptions
    model_dtype: str
    kv: KVCacheDType
    tensor_parallel_size: int
    block_size: int
    user_block_size: bool
    backend: AttentionBackend
    num_speculative_tokens: int
    mamba_cache_mode: str
    mamba_block_size: int
    mamba_conv_dtype: str
    mamba_ssm_dtype: str
    max_model_len: int | None
    notes: tuple[str, ...] = field(default=())

    @property
    def tp(self) -> int:
        """Short for :attr:`tensor_parallel_size`."""
        return self.tensor_parallel_size


def resolve_model_dtype(config: HFConfig, option: str) -> tuple[str, str]:
    """The model dtype and a note: the option, else the config's ``torch_dtype``/``dtype``.

    A float32 checkpoint is served in bfloat16 (as vLLM does for ``--dtype auto``).

    :raises ModelFileError: the config's dtype is not a model dtype (:data:`MODEL_DTYPES`).
    """
    if option != "auto":
        return option, f"model dtype {option} (given)"
    for key in ("torch_dtype", "dtype"):
        value = config.get(key)
        if value is None:
            continue
        name = model_dtype_name(value, key)
        if name is None:
            raise config.error(
                key,
                f"is {shown(value)}, not a model dtype; a model computes in one of {', '.join(MODEL_DTYPES)}",
            )
        if name == "float32":
            return (
                DEFAULT_MODEL_DTYPE,
                f"model dtype bfloat16 ({config.where(key)} is float32, served as bfloat16)",
            )
        return name, f"model dtype {name} (from {config.where(key)})"
    return DEFAULT_MODEL_DTYPE, "model dtype bfloat16 (the config names none)"


def resolve_kv_dtype(option: str, model_dtype: str, *, mla: bool) -> KVCacheDType:
    """The storage dtype and quant mode of ``--kv-cache-dtype option``.

    :raises ConfigError: ``fp8_ds_mla`` for a model without multi-head latent attention.
    """
    if option in MLA_ONLY_KV_CACHE_DTYPES and not mla:
        raise ConfigError(
            f"kv_cache_dtype {option!r} applies only to models with multi-head latent attention "
            "(DeepSeek V3.2/V4); use fp8 for this model"
        )
    dtype, mode = KV_CACHE_DTYPES[option]
    return KVCacheDType(option, dtype or model_dtype, mode)


def resolve_settings(
    config: HFConfig,
    options: HFOptions,
    *,
    mla: bool,
    ssm_dtype_default: str = "auto",
    kv_cache_dtype: str | None = None,
) -> BuildSettings:
    """Resolve ``options`` for the model in ``config``.

    :param mla: the model uses multi-head latent attention (picks the default backend).
    :param ssm_dtype_default: the architecture's SSM-state dtype when the option is ``auto``.
    :param kv_cache_dtype: overrides ``options.kv_cache_dtype`` (the draft's own dtype).
    :raises ConfigError: a backend or block size that does not fit the model.
    """
    notes: list[str] = []
    model_dtype, note = resolve_model_dtype(config, options.dtype)
    notes.append(note)
    kv = resolve_kv_dtype(kv_cache_dtype or options.kv_cache_dtype, model_dtype, mla=mla)
    notes.append(f"kv cache {kv.describe()}")
    backend = resolve_backend(options.attention_backend, mla=mla)
    if options.block_size is not None:
        if not backend.supports(options.block_size):
            raise ConfigError(
                f"block_size {options.block_size} does not split into kernel blocks of the "
                f"{backend.name} backend ({backend.kernel_sizes_text()}); use a multiple of "
                f"{backend.min_kernel_block}"
            )
        block_size = options.block_size
        notes.append(f"block size {block_size} (given)")
    else:
        block_size = backend.preferred_block_size()
        notes.append(
            f"block size {block_size} ({backend.name} backend, kernel blocks {backend.kernel_sizes_text()})"
        )
    max_model_len = options.max_model_len
    if max_model_len is None:
        max_model_len = config.opt_int("max_position_embeddings")
    conv = model_dtype if options.mamba_cache_dtype == "auto" else options.mamba_cache_dtype
    ssm_option = options.mamba_ssm_cache_dtype
    if ssm_option == "auto" and ssm_dtype_default != "auto":
        ssm_option = ssm_dtype_default
    ssm = conv if ssm_option == "auto" else ssm_option
    mode = options.mamba_cache_mode
    if mode == "none":
        mamba_block = max_model_len or block_size
    elif mode == "all":
        mamba_block = options.mamba_block_size or block_size
    else:
        mamba_block = block_size
    return BuildSettings(
        options=options,
        model_dtype=model_dtype,
        kv=kv,
        tensor_parallel_size=options.tensor_parallel_size,
        block_size=block_size,
        user_block_size=options.block_size is not None,
        backend=backend,
        num_speculative_tokens=options.num_speculative_tokens,
        mamba_cache_mode=mode,
        mamba_block_size=mamba_block,
        mamba_conv_dtype=conv,
        mamba_ssm_dtype=ssm,
        max_model_len=max_model_len,
        notes=tuple(notes),
    )
