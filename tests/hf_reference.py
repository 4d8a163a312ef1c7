"""An independent reference for the model zoo: what vLLM builds per layer from a ``config.json``.

Written from the published formulas (vLLM's ``kv_cache_interface.py``, ``mamba_utils.py`` and
``Platform._align_hybrid_block_size``) and the model files' layer rules, not from kvrules' code:
nothing here imports kvrules (:func:`observed` reads built specs by their attributes). :func:`expected` answers, for one config, KV-cache dtype and TP
size, every layer's cache kind, page bytes, block size and window, or raises
:class:`TPRefused` where vLLM does not accept the TP size.

Backend assumptions (docs/hf.md "Options" and "Hybrid alignment"): FlashAttention (kernel blocks
any multiple of 16, cache block 16) for attention models, FlashMLA (block 64) for MLA models,
FlashMLA-sparse (block 64) for DeepSeek-V3.2; ``mamba_cache_mode`` ``align`` (a Mamba block is
the attention block; attention-free models keep the cache block 16); no speculative tokens;
``float32`` configs served as ``bfloat16``. Nothing in the corpus depends on the GPU generation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

FULL = "full_attention"
SLIDING = "sliding_window"
CHUNKED = "chunked_local"
MLA = "mla"
INDEXER = "indexer"
MAMBA = "mamba"

KV_BYTES = {"auto": 2, "fp8": 1}
"""Bytes per element of the KV cache: ``auto`` is the model dtype (every corpus model is 16-bit
or a float32 config served as bfloat16), ``fp8`` is one byte."""

FLASH_BLOCK = 16
MLA_BLOCK = 64
MLA_WIDTH_FP8_DS = 656
INDEXER_WIDTH = 128 + 4  # fp8 K (index_head_dim 128) + one fp32 scale per 128 values
MODEL_BYTES = 2
FP32 = 4

Config = Mapping[str, Any]


class TPRefused(ValueError):
    """vLLM does not accept this TP size for this model (a head count it cannot split)."""


@dataclass(frozen=True)
class Layer:
    """One KV-cache layer as vLLM builds it.

    :ivar index: the decoder layer index (0-based).
    :ivar kind: one of FULL, SLIDING, CHUNKED, MLA, INDEXER, MAMBA.
    :ivar page: page bytes per block (after any hybrid padding).
    :ivar block: block size in tokens.
    :ivar window: the sliding window or the attention chunk (``None`` otherwise).
    """

    index: int
    kind: str
    page: int
    block: int
    window: int | None = None

    @property
    def category(self) -> str:
        """``mamba``, ``indexer`` or ``attention``: which list a layer is compared in."""
        return self.kind if self.kind in (MAMBA, INDEXER) else "attention"


@dataclass(frozen=True)
class Attn:
    """Per-rank attention geometry: KV heads and head size (MLA: one head of the latent width)."""

    heads: int
    head: int
    mla: bool = False

    def per_token(self, kv: str) -> int:
        """Bytes one token takes in one layer (K and V, or one latent vector for MLA)."""
        if self.mla:
            return self.head * KV_BYTES[kv]
        return 2 * self.heads * self.head * KV_BYTES[kv]


def _get(cfg: Config, key: str, default: Any = None) -> Any:
    value = cfg.get(key, default)
    return default if value is None else value


def _split(what: str, value: int, tp: int) -> int:
    """``value / tp``, or :class:`TPRefused` when it does not divide."""
    if value % tp:
        raise TPRefused(f"{what} = {value} is not divisible by TP {tp}")
    return value // tp


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    """vLLM's rule: split when ``kv % tp == 0``, one replicated head when ``tp % kv == 0``."""
    if kv_heads % tp == 0:
        return kv_heads // tp
    if tp % kv_heads == 0:
        return 1
    raise TPRefused(f"num_key_value_heads = {kv_heads} neither divides nor is divided by TP {tp}")


def attention(cfg: Config, tp: int, *, heads_key: str = "num_attention_heads") -> Attn:
    """Standard GQA geometry; ``head_dim`` when present, else ``hidden_size / heads``."""
    heads = int(cfg[heads_key])
    _split(heads_key, heads, tp)
    kv = int(_get(cfg, "num_key_value_heads", heads))
    head = int(_get(cfg, "head_dim", 0)) or int(cfg["hidden_size"]) // heads
    return Attn(kv_heads_per_rank(kv, tp), head)


def mla_geometry(cfg: Config, tp: int) -> Attn:
    """MLA: one latent head of ``kv_lora_rank + qk_rope_head_dim``, not split over TP."""
    _split("num_attention_heads", int(cfg["num_attention_heads"]), tp)
    return Attn(1, int(cfg["kv_lora_rank"]) + int(cfg["qk_rope_head_dim"]), mla=True)


# ---------------------------------------------------------------- attention layer kinds


def _layer_types(cfg: Config) -> list[str] | None:
    types = cfg.get("layer_types")
    return list(types) if types else None


def _kind_of(layer_type: str) -> str:
    return SLIDING if layer_type == "sliding_attention" else FULL


def window_kinds(cfg: Config, n: int) -> list[str]:
    """Llama-style models: ``layer_types``; else Qwen2's ``use_sliding_window`` with
    ``max_window_layers``; else a ``sliding_window`` applies to every layer (vLLM's cache
    config window, e.g. Mistral-7B-v0.1, Phi-3, StarCoder2)."""
    types = _layer_types(cfg)
    if types is not None:
        return [_kind_of(t) for t in types]
    use = cfg.get("use_sliding_window")
    if use is False or cfg.get("sliding_window") is None:
        return [FULL] * n
    if use is True:
        first = int(_get(cfg, "max_window_layers", 0))
        return [SLIDING if i >= first else FULL for i in range(n)]
    return [SLIDING] * n


def pattern_kinds(cfg: Config, n: int, default_pattern: int) -> list[str]:
    """``layer_types``, else ``sliding_window_pattern`` P: global iff ``(i + 1) % P == 0``."""
    types = _layer_types(cfg)
    if types is not None:
        return [_kind_of(t) for t in types]
    p = int(_get(cfg, "sliding_window_pattern", default_pattern))
    return [FULL if (i + 1) % p == 0 else SLIDING for i in range(n)]


def attention_layers(kinds: Sequence[str], geo: Attn, kv: str, window: int | None, block: int) -> list[Layer]:
    """One Layer per decoder layer of ``kinds`` with the same geometry."""
    page = block * geo.per_token(kv)
    return [Layer(i, k, page, block, None if k == FULL else window) for i, k in enumerate(kinds)]


def dense(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """Llama, Mistral, Qwen2/3, Phi-3, GLM-4.5, ...: full attention or a sliding window."""
    n = int(cfg["num_hidden_layers"])
    return attention_layers(
        window_kinds(cfg, n), attention(cfg, tp), kv, cfg.get("sliding_window"), FLASH_BLOCK
    )


def gemma2(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """Gemma 2: ``layer_types``, else even layers slide."""
    n = int(cfg["num_hidden_layers"])
    kinds = pattern_kinds(cfg, n, 2)
    return attention_layers(kinds, attention(cfg, tp), kv, int(cfg["sliding_window"]), FLASH_BLOCK)


GEMMA3_DEFAULTS = {
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "sliding_window": 4096,
    "sliding_window_pattern": 6,
}
"""Gemma3TextConfig's class defaults (what a ``text_config`` that omits them means)."""


def gemma3(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """Gemma 3: the class defaults fill what the file omits; global iff ``(i + 1) % 6 == 0``."""
    full = {**GEMMA3_DEFAULTS, **{k: v for k, v in cfg.items() if v is not None}}
    n = int(full["num_hidden_layers"])
    return attention_layers(
        pattern_kinds(full, n, 6), attention(full, tp), kv, int(full["sliding_window"]), FLASH_BLOCK
    )


def cohere2(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """Command-R7B: ``sliding_window_pattern`` 4 (every 4th layer global)."""
    n = int(cfg["num_hidden_layers"])
    return attention_layers(
        pattern_kinds(cfg, n, 4), attention(cfg, tp), kv, int(cfg["sliding_window"]), FLASH_BLOCK
    )


def llama4(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """Llama 4: chunked local attention except the NoPE layers (``no_rope_layers[i] == 0``;
    an empty list means transformers' default, NoPE every 4th layer)."""
    n = int(cfg["num_hidden_layers"])
    interval = int(_get(cfg, "no_rope_layer_interval", 4))
    rope = list(cfg.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)])
    chunk = int(_get(cfg, "attention_chunk_size", 8192))
    kinds = [CHUNKED if rope[i] else FULL for i in range(n)]
    return attention_layers(kinds, attention(cfg, tp), kv, chunk, FLASH_BLOCK)


def mla_page(geo: Attn, kv: str, block: int, *, ds_mla: bool = False) -> int:
    """An MLA page: ``block * width * e`` (``fp8_ds_mla``: 656 bytes per token)."""
    return block * MLA_WIDTH_FP8_DS if ds_mla and kv == "fp8" else block * geo.per_token(kv)


def deepseek(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """DeepSeek-V2/V3/R1, Kimi-K2: every layer MLA, FlashMLA block 64."""
    page = mla_page(mla_geometry(cfg, tp), kv, MLA_BLOCK)
    return [Layer(i, MLA, page, MLA_BLOCK) for i in range(int(cfg["num_hidden_layers"]))]


def deepseek_v32(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """DeepSeek-V3.2: MLA (fp8 rewritten to ``fp8_ds_mla``) plus one uint8 indexer K cache per layer."""
    page = mla_page(mla_geometry(cfg, tp), kv, MLA_BLOCK, ds_mla=True)
    n = int(cfg["num_hidden_layers"])
    width = int(cfg["index_head_dim"]) + int(cfg["index_head_dim"]) // 128 * 4
    mla = [Layer(i, MLA, page, MLA_BLOCK) for i in range(n)]
    return mla + [Layer(i, INDEXER, MLA_BLOCK * width, MLA_BLOCK) for i in range(n)]


# ---------------------------------------------------------------- state shapes


def mamba1_page(inter: int, state: int, kernel: int, tp: int) -> int:
    """Mamba1: conv ``(k-1, I/tp)`` + SSM ``(I/tp, N)``, both in the model dtype."""
    per_rank = _split("mamba intermediate size", inter, tp)
    return ((kernel - 1) * per_rank + per_rank * state) * MODEL_BYTES


@dataclass(frozen=True)
class Mamba2:
    """Mamba2 mixer fields (formulas §2.1)."""

    inter: int
    groups: int
    heads: int
    head_dim: int
    state: int
    kernel: int
    ssm_bytes: int = MODEL_BYTES

    def page(self, tp: int) -> int:
        """conv ``(k-1, (I + 2 G' N)/tp)`` + SSM ``(heads/tp, head_dim, N)``; one group is
        extended to ``tp`` groups (``extra_groups_for_head_shards``)."""
        heads = _split("mamba heads", self.heads, tp)
        if self.groups % tp and self.groups != 1:
            raise TPRefused(f"mamba n_groups = {self.groups} is not divisible by TP {tp}")
        groups = self.groups if self.groups % tp == 0 else tp
        conv = (self.kernel - 1) * _split("mamba conv dim", self.inter + 2 * groups * self.state, tp)
        return conv * MODEL_BYTES + heads * self.head_dim * self.state * self.ssm_bytes


def gdn_page(cfg: Config, tp: int, ssm: int = MODEL_BYTES) -> int:
    """Gated delta net: conv ``(k-1, (2 dk nk + dv nv)/tp)`` + SSM ``(nv/tp, dv, dk)`` (``ssm`` bytes
    an element)."""
    nk, nv = int(cfg["linear_num_key_heads"]), int(cfg["linear_num_value_heads"])
    dk, dv = int(cfg["linear_key_head_dim"]), int(cfg["linear_value_head_dim"])
    _split("linear_num_key_heads", nk, tp)
    conv = (int(cfg["linear_conv_kernel_dim"]) - 1) * _split("gdn conv dim", 2 * dk * nk + dv * nv, tp)
    return conv * MODEL_BYTES + _split("linear_num_value_heads", nv, tp) * dv * dk * ssm


def kda_page(cfg: Config, tp: int) -> int:
    """Kimi delta attention: three conv states ``(k-1, heads*head_dim/tp)`` in the model dtype
    and a float32 recurrent state ``(heads/tp, head_dim, head_dim)``."""
    lin = cfg["linear_attn_config"]
    heads, dim = int(lin["num_heads"]), int(lin["head_dim"])
    per_rank = _split("linear_attn_config.num_heads", heads, tp)
    conv = 3 * (int(_get(lin, "short_conv_kernel_size", 4)) - 1) * per_rank * dim
    return conv * MODEL_BYTES + per_rank * dim * dim * FP32


def short_conv_page(cfg: Config, tp: int) -> int:
    """LFM2 short convolution: one conv state ``(L - 1, hidden/tp)``."""
    return (int(cfg["conv_L_cache"]) - 1) * _split("hidden_size", int(cfg["hidden_size"]), tp) * MODEL_BYTES


# ---------------------------------------------------------------- hybrid alignment


def aligned(
    attn: list[Layer], mamba_indices: Sequence[int], mamba_page: int, per_token: int, base: int
) -> list[Layer]:
    """vLLM's ``_align_hybrid_block_size`` in ``align`` mode: the block becomes
    ``base * cdiv(mamba_page, base * per_token)`` when larger; every attention layer takes it,
    every Mamba page is padded to ``block * per_token``."""
    block = max(base, base * math.ceil(mamba_page / (base * per_token)))
    page = block * per_token
    moved = [replace(layer, block=block, page=layer.page // layer.block * block) for layer in attn]
    return moved + [Layer(i, MAMBA, page, block) for i in mamba_indices]


def hybrid(
    attn: list[Layer], mamba_indices: Sequence[int], mamba_page: int, geo: Attn, kv: str
) -> list[Layer]:
    """Attention + state layers: aligned when there is attention, else the cache block 16."""
    if not attn:
        return [Layer(i, MAMBA, mamba_page, FLASH_BLOCK) for i in mamba_indices]
    base = MLA_BLOCK if geo.mla else FLASH_BLOCK
    return aligned(attn, mamba_indices, mamba_page, geo.per_token(kv), base)


def _full_at(indices: Sequence[int], geo: Attn, kv: str) -> list[Layer]:
    block = MLA_BLOCK if geo.mla else FLASH_BLOCK
    kind = MLA if geo.mla else FULL
    return [Layer(i, kind, block * geo.per_token(kv), block) for i in indices]


def _split_layers(kinds: Sequence[str], attention_name: str) -> tuple[list[int], list[int]]:
    """Indices of the attention layers and of the state layers of a per-layer kind list
    (anything else, e.g. an MLP-only layer, has no cache)."""
    attn = [i for i, k in enumerate(kinds) if k == attention_name]
    state = [i for i, k in enumerate(kinds) if k in ("mamba", "linear_attention", "conv", "M", "hybrid")]
    return attn, state


def _nemotron_mamba(cfg: Config) -> Mamba2:
    ssm = FP32 if _get(cfg, "mamba_ssm_cache_dtype", "float32") == "float32" else MODEL_BYTES
    heads, dim = int(cfg["mamba_num_heads"]), int(cfg["mamba_head_dim"])
    return Mamba2(
        heads * dim,
        int(cfg["n_groups"]),
        heads,
        dim,
        int(cfg["ssm_state_size"]),
        int(cfg["conv_kernel"]),
        ssm,
    )


def nemotron_h(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """Nemotron-H: ``hybrid_override_pattern`` (``M``, ``*``) or transformers 5's ``layers_block_type``;
    SSM state float32 unless ``mamba_ssm_cache_dtype`` says otherwise."""
    pattern = cfg.get("hybrid_override_pattern")
    kinds = (
        [{"M": "mamba", "*": "attention"}.get(c, "-") for c in pattern]
        if pattern
        else list(cfg["layers_block_type"])
    )
    attn_idx, state_idx = _split_layers(kinds, "attention")
    geo = attention(cfg, tp)
    return hybrid(_full_at(attn_idx, geo, kv), state_idx, _nemotron_mamba(cfg).page(tp), geo, kv)


def jamba(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """Jamba: attention where ``i % attn_layer_period == attn_layer_offset``, else Mamba1."""
    n, period, offset = (
        int(cfg["num_hidden_layers"]),
        int(cfg["attn_layer_period"]),
        int(cfg["attn_layer_offset"]),
    )
    attn_idx = [i for i in range(n) if i % period == offset]
    geo = attention(cfg, tp)
    inter = int(cfg["mamba_expand"]) * int(cfg["hidden_size"])
    page = mamba1_page(inter, int(cfg["mamba_d_state"]), int(cfg["mamba_d_conv"]), tp)
    return hybrid(_full_at(attn_idx, geo, kv), [i for i in range(n) if i not in attn_idx], page, geo, kv)


def falcon_h1(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """Falcon-H1: every layer has attention and a Mamba2 mixer."""
    n = int(cfg["num_hidden_layers"])
    inter = int(_get(cfg, "mamba_d_ssm", 0)) or int(cfg["mamba_expand"]) * int(cfg["hidden_size"])
    heads = int(cfg["mamba_n_heads"])
    mixer = Mamba2(
        inter,
        int(cfg["mamba_n_groups"]),
        heads,
        int(cfg["mamba_d_head"]),
        int(cfg["mamba_d_state"]),
        int(cfg["mamba_d_conv"]),
    )
    geo = attention(cfg, tp)
    return hybrid(_full_at(range(n), geo, kv), range(n), mixer.page(tp), geo, kv)


def granite_hybrid(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """Granite-4.0-H: ``layer_types`` ``mamba`` (Mamba2, I = expand * hidden) / ``attention``."""
    attn_idx, state_idx = _split_layers(list(cfg["layer_types"]), "attention")
    mixer = Mamba2(
        int(cfg["mamba_expand"]) * int(cfg["hidden_size"]), int(cfg["mamba_n_groups"]), int(cfg["mamba_n_heads"]),
        int(cfg["mamba_d_head"]), int(cfg["mamba_d_state"]), int(cfg["mamba_d_conv"]),
    )  # fmt: skip
    geo = attention(cfg, tp)
    return hybrid(_full_at(attn_idx, geo, kv), state_idx, mixer.page(tp), geo, kv)


def zamba2(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """Zamba2: a Mamba2 mixer in every layer; ``hybrid`` layers also hold the shared attention
    (``attention_head_dim`` wide, default ``2 * hidden / heads``)."""
    kinds = list(cfg["layers_block_type"])
    hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    inter = int(cfg["mamba_expand"]) * hidden
    mixer = Mamba2(inter, int(cfg["mamba_ngroups"]), int(cfg["n_mamba_heads"]), int(cfg["mamba_headdim"]),
                   int(cfg["mamba_d_state"]), int(cfg["mamba_d_conv"]))  # fmt: skip
    _split("num_attention_heads", heads, tp)
    head = int(_get(cfg, "attention_head_dim", 2 * hidden // heads))
    geo = Attn(kv_heads_per_rank(int(_get(cfg, "num_key_value_heads", heads)), tp), head)
    attn_idx = [i for i, k in enumerate(kinds) if k == "hybrid"]
    return hybrid(_full_at(attn_idx, geo, kv), range(len(kinds)), mixer.page(tp), geo, kv)


def qwen3_next(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """Qwen3-Next: gated delta net, full attention every ``full_attention_interval`` (or ``layer_types``)."""
    n = int(cfg["num_hidden_layers"])
    interval = int(_get(cfg, "full_attention_interval", 4))
    kinds = _layer_types(cfg) or [
        "linear_attention" if (i + 1) % interval else "full_attention" for i in range(n)
    ]
    attn_idx, state_idx = _split_layers(kinds, "full_attention")
    geo = attention(cfg, tp)
    return hybrid(_full_at(attn_idx, geo, kv), state_idx, gdn_page(cfg, tp), geo, kv)


def qwen3_5(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """Qwen3.5 / Qwen3.5-MoE: Qwen3-Next's layers; the SSM state float32 when the config's
    ``mamba_ssm_dtype`` says so (the published configs do)."""
    n = int(cfg["num_hidden_layers"])
    interval = int(_get(cfg, "full_attention_interval", 4))
    kinds = _layer_types(cfg) or [
        "linear_attention" if (i + 1) % interval else "full_attention" for i in range(n)
    ]
    attn_idx, state_idx = _split_layers(kinds, "full_attention")
    geo = attention(cfg, tp)
    ssm = FP32 if _get(cfg, "mamba_ssm_dtype", None) == "float32" else MODEL_BYTES
    return hybrid(_full_at(attn_idx, geo, kv), state_idx, gdn_page(cfg, tp, ssm), geo, kv)


def kimi_linear(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """Kimi-Linear: MLA at ``linear_attn_config.full_attn_layers`` (1-based), KDA elsewhere."""
    n = int(cfg["num_hidden_layers"])
    full = {int(i) - 1 for i in cfg["linear_attn_config"]["full_attn_layers"]}
    geo = mla_geometry(cfg, tp)
    state_idx = [i for i in range(n) if i not in full]
    return hybrid(_full_at(sorted(full), geo, kv), state_idx, kda_page(cfg, tp), geo, kv)


def lfm2(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """LFM2: ``layer_types`` ``conv`` (short convolution) / ``full_attention``."""
    attn_idx, state_idx = _split_layers(list(cfg["layer_types"]), "full_attention")
    geo = attention(cfg, tp)
    return hybrid(_full_at(attn_idx, geo, kv), state_idx, short_conv_page(cfg, tp), geo, kv)


def mamba1_only(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """Mamba / Falcon-Mamba: attention-free, Mamba1 (``intermediate_size`` or ``expand * hidden``)."""
    inter = int(_get(cfg, "intermediate_size", 0)) or int(cfg["expand"]) * int(cfg["hidden_size"])
    page = mamba1_page(inter, int(cfg["state_size"]), int(cfg["conv_kernel"]), tp)
    return hybrid([], range(int(cfg["num_hidden_layers"])), page, Attn(1, 1), kv)


def mamba2_only(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """Mamba2 / Mamba-Codestral: attention-free, I = ``expand * hidden_size``."""
    mixer = Mamba2(int(cfg["expand"]) * int(cfg["hidden_size"]), int(cfg["n_groups"]), int(cfg["num_heads"]),
                   int(cfg["head_dim"]), int(cfg["state_size"]), int(cfg["conv_kernel"]))  # fmt: skip
    return hybrid([], range(int(cfg["num_hidden_layers"])), mixer.page(tp), Attn(1, 1), kv)


DENSE_TYPES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_5_vl", "qwen3", "qwen3_moe", "phi3", "olmo2", "cohere",
    "granite", "internlm3", "ernie4_5_moe", "hunyuan_v1_moe", "smollm3", "starcoder2", "glm4_moe", "minimax_m2",
)  # fmt: skip
"""Model types whose layers are all full attention or all (or Qwen2-style some) sliding."""

FAMILIES: dict[str, Callable[[Config, str, int], list[Layer]]] = {
    **dict.fromkeys(DENSE_TYPES, dense),
    "gemma2": gemma2,
    "gemma3_text": gemma3,
    "cohere2": cohere2,
    "gpt_oss": gemma2,
    "llama4_text": llama4,
    **dict.fromkeys(("deepseek_v2", "deepseek_v3", "kimi_k2"), deepseek),
    "deepseek_v32": deepseek_v32,
    "kimi_linear": kimi_linear,
    "qwen3_next": qwen3_next,
    **dict.fromkeys(("qwen3_5_text", "qwen3_5_moe_text"), qwen3_5),
    "nemotron_h": nemotron_h,
    "jamba": jamba,
    "falcon_h1": falcon_h1,
    "granitemoehybrid": granite_hybrid,
    "zamba2": zamba2,
    "lfm2": lfm2,
    **dict.fromkeys(("mamba", "falcon_mamba"), mamba1_only),
    "mamba2": mamba2_only,
}
"""Text model type -> the function that lays out its layers."""

TEXT_TYPES = {
    "gemma3": "gemma3_text",
    "llama4": "llama4_text",
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
}
"""Multimodal wrappers whose layers live in ``text_config``."""


def text_part(cfg: Config) -> tuple[str, Config]:
    """The text model's type and fields (``text_config`` for multimodal wrappers)."""
    text = cfg.get("text_config")
    if isinstance(text, Mapping):
        kind = str(text.get("model_type") or TEXT_TYPES.get(str(cfg["model_type"]), cfg["model_type"]))
        return kind, text
    return str(cfg["model_type"]), cfg


def expected(cfg: Config, kv: str, tp: int) -> list[Layer]:
    """Every KV-cache layer vLLM builds for ``cfg`` with ``--kv-cache-dtype kv`` (``auto`` or
    ``fp8``) and TP ``tp``, sorted by (category, index).

    :raises TPRefused: vLLM does not accept ``tp`` for this model.
    :raises KeyError: a model type this reference does not know.
    """
    kind, text = text_part(cfg)
    layers = FAMILIES[kind](text, kv, tp)
    return sorted(layers, key=lambda layer: (layer.category, layer.index))


# ---------------------------------------------------------------- comparing with what was built


def layer_index(layer_name: str) -> int:
    """The decoder layer index in a layer name (``...layers.7.self_attn.attn`` -> 7)."""
    found = re.search(r"layers\.(\d+)", layer_name) or re.search(r"\.(\d+)\.", layer_name)
    return int(found.group(1)) if found else -1


def window_of(spec: Any) -> int | None:
    window = getattr(spec, "sliding_window", None) or getattr(spec, "attention_chunk_size", None)
    return int(window) if window is not None else None


def observed(specs: Mapping[str, Any]) -> list[Layer]:
    """Built specs (anything with ``type_name``, ``page_size_bytes``, ``block_size``) in this
    module's terms, sorted as :func:`expected` sorts; an ``indexer`` in the name marks an indexer."""
    layers = []
    for name, spec in specs.items():
        kind = INDEXER if "indexer" in name else str(spec.type_name)
        layers.append(
            Layer(layer_index(name), kind, int(spec.page_size_bytes), int(spec.block_size), window_of(spec))
        )
    return sorted(layers, key=lambda layer: (layer.category, layer.index))


def describe(layers: Sequence[Layer]) -> str:
    """A short summary: how many layers of each (kind, page, block, window)."""
    counts: dict[tuple[str, int, int, int | None], int] = {}
    for layer in layers:
        key = (layer.kind, layer.page, layer.block, layer.window)
        counts[key] = counts.get(key, 0) + 1
    return "; ".join(f"{n} x {k[0]} page {k[1]} block {k[2]} window {k[3]}" for k, n in counts.items())


def _key(layer: Layer) -> tuple[object, ...]:
    return (layer.category, layer.kind, layer.page, layer.block, layer.window)


def first_difference(want: Sequence[Layer], got: Sequence[Layer]) -> str | None:
    """``None`` when both agree layer by layer (layer names aside), else a sentence on the first difference."""
    if len(want) != len(got):
        return f"{len(got)} layers built, the reference has {len(want)}: built {describe(got)}; want {describe(want)}"
    for w, g in zip(want, got, strict=True):
        if _key(w) != _key(g):
            return f"{w.category} layer {w.index}: built {g}, want {w}; built {describe(got)}; want {describe(want)}"
    return None


# ---------------------------------------------------------------- the pool: vLLM's groups and capacity


@dataclass(frozen=True)
class Capacity:
    """What vLLM's KV-cache manager makes of the layers on one worker.

    :ivar num_blocks: blocks in the pool.
    :ivar blocks_per_request: blocks one ``max_model_len`` request needs, over every group.
    """

    num_blocks: int
    blocks_per_request: int

    @property
    def max_concurrency(self) -> float:
        """``num_blocks / blocks_per_request``."""
        return self.num_blocks / self.blocks_per_request


GROUP_SIZE_RATIO = 1.5
"""``group_size = max`` when ``max < 1.5 * min`` bucket sizes (vLLM PR #36684)."""


def blocks_needed(layer: Layer, max_model_len: int, max_num_batched_tokens: int) -> int:
    """Blocks one request of ``max_model_len`` tokens needs in one layer of this kind
    (``max_memory_usage_bytes / page``; Mamba in ``align`` mode keeps 2 blocks)."""
    if layer.kind == SLIDING:
        assert layer.window is not None
        return math.ceil(min(layer.window - 1 + max_num_batched_tokens, max_model_len) / layer.block) + 1
    if layer.kind == CHUNKED:
        assert layer.window is not None
        return math.ceil(min(layer.window + max_num_batched_tokens, max_model_len) / layer.block)
    if layer.kind == MAMBA:
        return 2
    return math.ceil(max_model_len / layer.block)


def _buckets(layers: Sequence[Layer]) -> list[list[Layer]]:
    """Layers with the same spec (kind, page, block, window) together, in first-seen order."""
    buckets: dict[tuple[object, ...], list[Layer]] = {}
    for layer in layers:
        buckets.setdefault((layer.kind, layer.page, layer.block, layer.window), []).append(layer)
    return list(buckets.values())


def capacity(
    layers: Sequence[Layer], memory: int, max_model_len: int, max_num_batched_tokens: int
) -> Capacity | None:
    """vLLM's pool for ``layers`` on one worker with ``memory`` bytes (formulas §4.1, §4.3, §4.4):
    chunked layers are promoted to full attention (Llama 4: the hybrid manager is disabled); one
    kind with one block size and different pages is one group of per-layer tensors; otherwise
    every page must be equal and the buckets are split into groups of ``group_size`` layers.

    :returns: ``None`` for different pages with different block sizes or with Mamba layers
        (neither is in the corpus).
    """
    if any(layer.kind == CHUNKED for layer in layers):
        layers = [
            replace(layer, kind=FULL, window=None) if layer.kind == CHUNKED else layer for layer in layers
        ]

    def need(layer: Layer) -> int:
        return blocks_needed(layer, max_model_len, max_num_batched_tokens)

    buckets = _buckets(layers)
    if len({layer.page for layer in layers}) > 1:
        if len({layer.block for layer in layers}) > 1 or any(layer.kind == MAMBA for layer in layers):
            return None
        return Capacity(memory // sum(layer.page for layer in layers), max(need(layer) for layer in layers))
    sizes = [len(b) for b in buckets]
    group_size = max(sizes) if max(sizes) < GROUP_SIZE_RATIO * min(sizes) else min(sizes)
    groups = [(bucket[0], math.ceil(len(bucket) / group_size)) for bucket in buckets]
    return Capacity(memory // layers[0].page // group_size, sum(need(first) * n for first, n in groups))
