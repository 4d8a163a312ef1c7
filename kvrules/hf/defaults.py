"""The built-in reader's class defaults: what transformers' config classes fill in when a
``config.json`` leaves a cache field out, per model type, without importing transformers.

:data:`CLASS_DEFAULTS` holds, for every model type kvrules names, the class's defaults of the
fields that change the cache (:data:`CACHE_FIELDS`), the class's renamed keys (its
``attribute_map``) and the rules its ``__post_init__`` applies (``num_key_value_heads`` defaulting
to ``num_attention_heads``, ``head_dim`` to ``hidden_size // num_attention_heads``, ``layer_types``
from a window pattern, Llama 4's ``no_rope_layers: []`` meaning the default pattern, ...). The
values are those of transformers 5.20 (the pinned ``kvrules[hf]`` extra); ``tests/hf/test_hf_readers.py``
checks them against transformers' classes whenever transformers is installed.

:func:`resolve_defaults` applies one model type's entry to the fields a file gives.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: the transformers release whose config classes :data:`CLASS_DEFAULTS` mirrors
DEFAULTS_VERSION = "5.20"

#: the fields whose value changes a layer's cache spec or the layer list: what the architectures
#: ask :class:`~kvrules.hf.config.HFConfig` for, and what both readers must agree on
CACHE_FIELDS: tuple[str, ...] = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "sliding_window",
    "use_sliding_window",
    "max_window_layers",
    "sliding_window_pattern",
    "layer_types",
    "attention_chunk_size",
    "no_rope_layers",
    "no_rope_layer_interval",
    "full_attention_interval",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "index_head_dim",
    "index_n_heads",
    "index_topk",
    "num_nextn_predict_layers",
    "mtp_num_hidden_layers",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "linear_head_dim",
    "linear_num_heads",
    "hybrid_override_pattern",
    "layers_block_type",
    "mamba_num_heads",
    "mamba_head_dim",
    "ssm_state_size",
    "state_size",
    "conv_kernel",
    "n_groups",
    "expand",
    "chunk_size",
    "attn_layer_period",
    "attn_layer_offset",
    "mamba_d_state",
    "mamba_d_conv",
    "mamba_expand",
    "mamba_d_ssm",
    "mamba_n_heads",
    "mamba_d_head",
    "mamba_n_groups",
    "mamba_chunk_size",
    "mamba_headdim",
    "mamba_ngroups",
    "conv_L_cache",
    "full_attn_idxs",
    "mamba_ssm_dtype",
    "mamba_ssm_cache_dtype",
    "n_mamba_heads",
    "attention_head_dim",
    "hybrid_layer_ids",
    "use_long_context",
    "intermediate_size",
    "num_mem_blocks",
    "attn_type_list",
    "use_cla",
    "num_kv_shared_layers",
    "num_mtp_modules",
    "conv_dim",
)

#: cache fields that are true/false, text, per-layer lists, or fractional numbers; every other
#: field of :data:`CACHE_FIELDS` is an integer (what the raw-file check before any reader expects)
BOOL_FIELDS = frozenset({"use_sliding_window", "use_long_context", "use_cla"})
TEXT_FIELDS = frozenset(
    {"hybrid_override_pattern", "mamba_ssm_dtype", "mamba_ssm_cache_dtype", "mamba_d_head"}
)
LIST_FIELDS = frozenset(
    {
        "layer_types",
        "layers_block_type",
        "no_rope_layers",
        "full_attn_idxs",
        "hybrid_layer_ids",
        "attn_type_list",
    }
)
NUMBER_FIELDS = frozenset({"mamba_expand", "expand"})


#: wrapper model types whose language model sits in a sub-config, and that sub-config's model type
TEXT_MODEL_TYPES: dict[str, str] = {
    "gemma3": "gemma3_text",
    "llama4": "llama4_text",
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "qwen2_5_vl": "qwen2_5_vl_text",
}

#: the keys under which a wrapper keeps its language model's fields, in the order looked for
TEXT_CONFIG_KEYS: tuple[str, ...] = ("text_config", "llm_config", "language_config")

Values = dict[str, Any]
Rule = Callable[[Values], None]


@dataclass(frozen=True)
class ClassDefaults:
    """One config class's defaults: ``values`` for absent fields, ``aliases`` (its
    ``attribute_map``: a file spelling -> the field it sets, both names readable), ``renames``
    (older spellings the class moves to a field, only the field readable), ``rules`` run after
    (each derives a field), in order."""

    class_name: str
    values: Mapping[str, Any]
    aliases: Mapping[str, str] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()
    renames: Mapping[str, str] = field(default_factory=dict)

    def spellings(self) -> dict[str, str]:
        """Every other spelling of a field in a file (aliases and renames) -> the field."""
        return {**self.aliases, **self.renames}


def _count(values: Values, key: str) -> int | None:
    """``values[key]`` when it is a non-negative integer (a rule skips anything else, leaving the
    architecture's own check to name the bad field)."""
    value = values.get(key)
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = operator.index(value)
    except TypeError:
        return None
    return number if number >= 0 else None


# -- rules (each mirrors one ``__post_init__`` step of the class) -------------------------------
def kv_heads_from_heads(values: Values) -> None:
    """``num_key_value_heads`` defaults to ``num_attention_heads`` (multi-head attention)."""
    if values.get("num_key_value_heads") is None:
        values["num_key_value_heads"] = values.get("num_attention_heads")


def head_dim_from_hidden(values: Values) -> None:
    """``head_dim`` defaults to ``hidden_size // num_attention_heads``."""
    hidden, heads = _count(values, "hidden_size"), _count(values, "num_attention_heads")
    if values.get("head_dim") is None and hidden is not None and heads:
        values["head_dim"] = hidden // heads


def head_dim_always_from_hidden(values: Values) -> None:
    """Cohere 2 sets ``head_dim = hidden_size // num_attention_heads`` whatever the file says."""
    values["head_dim"] = None
    head_dim_from_hidden(values)


def head_dim_is_rope(values: Values) -> None:
    """MLA classes (DeepSeek V2/V3, Kimi-Linear) set ``head_dim`` to ``qk_rope_head_dim``."""
    values["head_dim"] = values.get("qk_rope_head_dim")


def head_dim_rope_unless_given(values: Values) -> None:
    """DeepSeek V3 / Kimi-Linear: ``head_dim`` is ``qk_rope_head_dim`` unless the file gives one
    (the class keeps an undeclared key the file sets)."""
    if values.get("head_dim") is None:
        values["head_dim"] = values.get("qk_rope_head_dim")


def window_if_enabled(values: Values) -> None:
    """Qwen2/Qwen3: ``sliding_window`` is ``None`` unless ``use_sliding_window`` is true."""
    if values.get("use_sliding_window") is not True:
        values["sliding_window"] = None


def _set_layer_types(values: Values, kind: Callable[[int], str]) -> None:
    layers = _count(values, "num_hidden_layers")
    if values.get("layer_types") is None and layers is not None:
        values["layer_types"] = [kind(i) for i in range(layers)]


def layer_types_from_max_window(values: Values) -> None:
    """Qwen2/Qwen3: layers from ``max_window_layers`` on slide when a window is set."""
    start = _count(values, "max_window_layers")
    window = values.get("sliding_window") is not None
    if start is not None:
        _set_layer_types(values, lambda i: "sliding_attention" if window and i >= start else "full_attention")


def _every(period_key: str | None, default: int, other: str) -> Rule:
    """``layer_types``: layer ``i`` is full attention iff ``(i + 1) % period == 0``, else ``other``;
    the period is ``period_key``'s value (``default`` when absent, or always without a key)."""

    def rule(values: Values) -> None:
        given = values.get(period_key) if period_key else None
        period = default if given is None else _count(values, str(period_key))
        if period:
            _set_layer_types(values, lambda i: "full_attention" if (i + 1) % period == 0 else other)

    rule.__doc__ = (
        f"``layer_types`` from ``{period_key}`` (default {default}): full every period, else {other}."
    )
    return rule


def no_rope_default(values: Values) -> None:
    """Llama 4: an absent or empty ``no_rope_layers`` means the default pattern (every
    ``no_rope_layer_interval``-th layer is global), and ``layer_types`` follows it."""
    layers, interval = _count(values, "num_hidden_layers"), _count(values, "no_rope_layer_interval")
    if layers is None or not interval:
        return
    if not values.get("no_rope_layers"):
        values["no_rope_layers"] = [int((i + 1) % interval != 0) for i in range(layers)]
    rope = values["no_rope_layers"]
    if values.get("layer_types") is None and isinstance(rope, list):
        values["layer_types"] = ["chunked_attention" if r else "full_attention" for r in rope]


def qwen2_moe_window(values: Values) -> None:
    """Qwen2-MoE: ``sliding_window`` is 0 unless ``use_sliding_window``; then even layers below
    ``max_window_layers`` slide."""
    use = values.get("use_sliding_window") is True
    if not use:
        values["sliding_window"] = 0
    start = _count(values, "max_window_layers")
    if start is not None:
        _set_layer_types(
            values, lambda i: "sliding_attention" if use and (i + 1) % 2 and i < start else "full_attention"
        )


def _layer_index(value: Any, layers: int) -> int | None:
    """A 1-based layer number as a 0-based index, ``None`` when it is not one."""
    number = _count({"n": value}, "n")
    return number - 1 if number is not None and 1 <= number <= layers else None


def kimi_linear_layers(values: Values) -> None:
    """Kimi-Linear: ``linear_attn_config`` (``head_dim``, ``num_heads``, ``short_conv_kernel_size``,
    1-based ``full_attn_layers`` / ``kda_layers``) overrides the flat fields; without layer lists,
    layer ``i`` is full attention iff ``i`` is a non-zero multiple of 4."""
    nested = values.get("linear_attn_config")
    nested = nested if isinstance(nested, Mapping) else {}
    for inner, key in (("head_dim", "linear_head_dim"), ("num_heads", "linear_num_heads")):
        if inner in nested:
            values[key] = nested[inner]
    if "short_conv_kernel_size" in nested:
        values["linear_conv_kernel_dim"] = nested["short_conv_kernel_size"]
    layers = _count(values, "num_hidden_layers")
    if values.get("layer_types") is not None or layers is None:
        return
    full, kda = nested.get("full_attn_layers"), nested.get("kda_layers")
    if not (isinstance(full, list) and isinstance(kda, list)):
        _set_layer_types(values, lambda i: "full_attention" if i and i % 4 == 0 else "linear_attention")
        return
    types: list[Any] = [None] * layers
    for kind, members in (("full_attention", full), ("linear_attention", kda)):
        for index in (_layer_index(m, layers) for m in members):
            if index is not None:
                types[index] = kind
    values["layer_types"] = types


def smollm3_layers(values: Values) -> None:
    """SmolLM3: ``no_rope_layers`` defaults to every ``no_rope_layer_interval``-th layer without
    RoPE; with ``use_sliding_window`` and a window, the NoPE layers slide."""
    layers, interval = _count(values, "num_hidden_layers"), _count(values, "no_rope_layer_interval")
    if values.get("no_rope_layers") is None and layers is not None and interval:
        values["no_rope_layers"] = [int((i + 1) % interval != 0) for i in range(layers)]
    rope = values.get("no_rope_layers")
    slide = values.get("use_sliding_window") is True and values.get("sliding_window") is not None
    if isinstance(rope, list) and layers is not None and len(rope) >= layers:
        _set_layer_types(values, lambda i: "sliding_attention" if slide and not rope[i] else "full_attention")


#: Zamba2's layers when the file names none
ZAMBA2_DEFAULT_BLOCKS = (
    ["linear_attention"]
    + (["linear_attention"] * 5 + ["hybrid"]) * 7
    + ["linear_attention"] * 4
    + ["hybrid"]
    + ["linear_attention"] * 3
    + ["hybrid"]
    + ["linear_attention"] * 2
)


def zamba2_layers(values: Values) -> None:
    """Zamba2: the shared attention's head is ``2 * hidden_size / num_attention_heads`` wide, the
    Mamba head ``mamba_expand * hidden_size / n_mamba_heads`` (both unless the file gives them, a
    null included: the class sets an undeclared key the file gives after its own derivation); ``layers_block_type``
    defaults to Zamba2-2.7B's 54 layers and names the hybrid layers; ``use_long_context`` means
    16,384 positions."""
    hidden, heads, mheads = (
        _count(values, k) for k in ("hidden_size", "num_attention_heads", "n_mamba_heads")
    )
    expand = values.get("mamba_expand")
    if hidden is not None and heads and not {"attention_head_dim", "head_dim"} & set(values):
        values["attention_head_dim"] = 2 * hidden // heads
    if "mamba_headdim" not in values and hidden is not None and mheads:
        if isinstance(expand, (int, float)) and not isinstance(expand, bool):
            values["mamba_headdim"] = int(expand * hidden) // mheads
    if values.get("use_long_context") is True:
        values["max_position_embeddings"] = 16384
    if not values.get("intermediate_size") and hidden is not None:
        values["intermediate_size"] = 4 * hidden
    blocks = values.get("layers_block_type")
    blocks = list(ZAMBA2_DEFAULT_BLOCKS) if blocks is None else blocks
    if isinstance(blocks, list):
        blocks = remap_legacy(blocks)
        values["layers_block_type"] = blocks
        values["hybrid_layer_ids"] = [i for i, b in enumerate(blocks) if b == "hybrid"]


def mamba_intermediate(values: Values) -> None:
    """Mamba1 classes: ``intermediate_size = expand * hidden_size`` unless the file gives one (the
    class keeps an undeclared key the file sets)."""
    expand, hidden = values.get("expand"), _count(values, "hidden_size")
    if values.get("intermediate_size") is not None:
        return
    if isinstance(expand, (int, float)) and not isinstance(expand, bool) and hidden is not None:
        values["intermediate_size"] = int(expand * hidden)


def _all_layers(kind: str) -> Rule:
    def rule(values: Values) -> None:
        _set_layer_types(values, lambda i: kind)

    rule.__doc__ = f"``layer_types``: every layer {kind}."
    return rule


def jamba_layers(values: Values) -> None:
    """Jamba: attention where ``i % attn_layer_period == attn_layer_offset``, else Mamba."""
    layers = _count(values, "num_hidden_layers")
    period, offset = _count(values, "attn_layer_period"), _count(values, "attn_layer_offset")
    if layers is None or not period or offset is None:
        return
    blocks = ["attention" if i % period == offset else "mamba" for i in range(layers)]
    values["layers_block_type"] = blocks
    values["layer_types"] = ["full_attention" if b == "attention" else "linear_attention" for b in blocks]


def d_head_auto(values: Values) -> None:
    """Falcon-H1 / Granite-4.0-H: ``mamba_d_head: "auto"`` is the Mamba width over its heads."""
    if values.get("mamba_d_head") != "auto":
        return
    heads, hidden = _count(values, "mamba_n_heads"), _count(values, "hidden_size")
    width = _count(values, "mamba_d_ssm")
    expand = values.get("mamba_expand")
    if width is None and hidden is not None and isinstance(expand, int) and not isinstance(expand, bool):
        width = expand * hidden
    if heads and width is not None:
        values["mamba_d_head"] = width // heads


#: Nemotron-H's pattern characters and the ``layers_block_type`` entries they stand for
NEMOTRON_BLOCKS = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
#: the older names of layer kinds, as every transformers 5 config class renames them
LEGACY_BLOCKS = {
    "mamba": "linear_attention",
    "attention": "full_attention",
    "deepseek_sparse_attention": "indexed_attention",
    "qwen_sparse_attention": "indexed_attention",
}


def remap_legacy(kinds: list[Any]) -> list[Any]:
    """``kinds`` with the older names of :data:`LEGACY_BLOCKS` renamed."""
    return [LEGACY_BLOCKS.get(k, k) if isinstance(k, str) else k for k in kinds]


#: NemotronHConfig's layers when the file gives neither a pattern nor ``layers_block_type``
NEMOTRON_DEFAULT_BLOCKS = ("linear_attention", "moe", "full_attention", "mlp")


def nemotron_layers(values: Values) -> None:
    """Nemotron-H (transformers 5): ``layers_block_type`` (else the ``hybrid_override_pattern``,
    else four default layers) decides the layers; ``num_hidden_layers`` is its length whatever
    the file says, and the pattern is written back from it."""
    pattern, blocks = values.get("hybrid_override_pattern"), values.get("layers_block_type")
    if isinstance(blocks, list):
        blocks = remap_legacy(blocks)
    elif isinstance(pattern, str):
        blocks = [NEMOTRON_BLOCKS.get(c, c) for c in pattern]
    elif blocks is None:
        blocks = list(NEMOTRON_DEFAULT_BLOCKS)
    if not isinstance(blocks, list):
        return
    values["layers_block_type"] = blocks
    values["num_hidden_layers"] = len(blocks)
    codes = {v: k for k, v in NEMOTRON_BLOCKS.items()}
    values["hybrid_override_pattern"] = "".join(codes.get(b, str(b)) for b in blocks)


def lfm2_layers(values: Values) -> None:
    """LFM2: ``full_attn_idxs`` (default: every layer) are attention, the rest short convolutions."""
    layers = _count(values, "num_hidden_layers")
    if values.get("layer_types") is not None or layers is None:
        return
    if values.get("full_attn_idxs") is None:
        values["full_attn_idxs"] = list(range(layers))
    full = values["full_attn_idxs"]
    if isinstance(full, list):
        values["layer_types"] = ["full_attention" if i in full else "conv" for i in range(layers)]


def _defaults(
    class_name: str,
    values: Mapping[str, Any],
    *rules: Rule,
    aliases: Mapping[str, str] | None = None,
    renames: Mapping[str, str] | None = None,
) -> ClassDefaults:
    return ClassDefaults(class_name, dict(values), dict(aliases or {}), tuple(rules), dict(renames or {}))


_GQA = (kv_heads_from_heads,)
_LLAMA = (kv_heads_from_heads, head_dim_from_hidden)
_QWEN = (window_if_enabled, kv_heads_from_heads, layer_types_from_max_window)
_QWEN_WINDOW = {"use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 28}
_LINEAR = (_every("full_attention_interval", 4, "linear_attention"),)
_GDN = {
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "head_dim": 256,
}
_MLA = {
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
}
_MTP = {"num_mtp_layers": "num_nextn_predict_layers"}
_MAMBA1 = {"hidden_size": 768, "state_size": 16, "num_hidden_layers": 32, "expand": 2, "conv_kernel": 4}


def _dims(layers: int, hidden: int, heads: int, positions: int, **more: Any) -> dict[str, Any]:
    return {
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "max_position_embeddings": positions,
        **more,
    }


#: per model type, the defaults of its transformers 5.20 config class (its text config for wrappers)
CLASS_DEFAULTS: dict[str, ClassDefaults] = {
    "llama": _defaults("LlamaConfig", _dims(32, 4096, 32, 2048), *_LLAMA),
    "mistral": _defaults(
        "MistralConfig",
        _dims(32, 4096, 32, 131072, num_key_value_heads=8, sliding_window=4096),
        head_dim_from_hidden,
        kv_heads_from_heads,
    ),
    "mixtral": _defaults("MixtralConfig", _dims(32, 4096, 32, 131072, num_key_value_heads=8), *_GQA),
    "qwen2": _defaults(
        "Qwen2Config", _dims(32, 4096, 32, 32768, num_key_value_heads=32, **_QWEN_WINDOW), *_QWEN
    ),
    "qwen2_moe": _defaults(
        "Qwen2MoeConfig", _dims(24, 2048, 16, 32768, num_key_value_heads=16, **_QWEN_WINDOW), qwen2_moe_window
    ),
    "qwen3": _defaults(
        "Qwen3Config",
        _dims(32, 4096, 32, 32768, num_key_value_heads=32, head_dim=128, **_QWEN_WINDOW),
        *_QWEN,
    ),
    "qwen3_moe": _defaults(
        "Qwen3MoeConfig",
        _dims(24, 2048, 32, 32768, num_key_value_heads=4, use_sliding_window=False, sliding_window=4096),
        window_if_enabled,
    ),
    "qwen2_5_vl_text": _defaults(
        "Qwen2_5_VLTextConfig",
        _dims(80, 8192, 64, 32768, num_key_value_heads=8, **{**_QWEN_WINDOW, "max_window_layers": 80}),
        *_QWEN,
    ),
    "gemma2": _defaults(
        "Gemma2Config",
        _dims(26, 2304, 8, 8192, num_key_value_heads=4, head_dim=256, sliding_window=4096),
        _every(None, 2, "sliding_attention"),
    ),
    "gemma3_text": _defaults(
        "Gemma3TextConfig",
        _dims(26, 2304, 8, 131072, num_key_value_heads=4, head_dim=256, sliding_window=4096),
        _every("sliding_window_pattern", 6, "sliding_attention"),
    ),
    "cohere2": _defaults(
        "Cohere2Config",
        _dims(40, 8192, 64, 8192, sliding_window=4096),
        kv_heads_from_heads,
        head_dim_always_from_hidden,
        _every("sliding_window_pattern", 4, "sliding_attention"),
    ),
    "gpt_oss": _defaults(
        "GptOssConfig",
        _dims(36, 2880, 64, 131072, num_key_value_heads=8, head_dim=64, sliding_window=128),
        *_LLAMA,
        _every(None, 2, "sliding_attention"),
    ),
    "llama4_text": _defaults(
        "Llama4TextConfig",
        _dims(
            48,
            5120,
            40,
            131072,
            num_key_value_heads=8,
            head_dim=128,
            no_rope_layer_interval=4,
            attention_chunk_size=8192,
        ),
        *_LLAMA,
        no_rope_default,
    ),
    "deepseek_v2": _defaults(
        "DeepseekV2Config", _dims(32, 4096, 32, 2048, **_MLA), head_dim_is_rope, *_LLAMA
    ),
    "deepseek_v3": _defaults(
        "DeepseekV3Config",
        _dims(61, 7168, 128, 4096, num_key_value_heads=128, num_nextn_predict_layers=1, **_MLA),
        kv_heads_from_heads,
        head_dim_rope_unless_given,
        aliases=_MTP,
    ),
    "deepseek_v32": _defaults(
        "DeepseekV32Config",
        _dims(
            61,
            7168,
            128,
            163840,
            num_key_value_heads=128,
            index_topk=2048,
            index_head_dim=128,
            index_n_heads=64,
            **_MLA,
        ),
        head_dim_is_rope,
        _all_layers("indexed_attention"),
    ),
    "glm4_moe": _defaults(
        "Glm4MoeConfig",
        _dims(46, 4096, 96, 131072, num_key_value_heads=8, num_nextn_predict_layers=1),
        aliases=_MTP,
    ),
    "minimax_m2": _defaults(
        "MiniMaxM2Config", _dims(62, 3072, 48, 196608, num_key_value_heads=8, head_dim=128)
    ),
    "phi3": _defaults("Phi3Config", _dims(32, 3072, 32, 4096), *_GQA),
    "olmo2": _defaults("Olmo2Config", _dims(32, 4096, 32, 2048), *_GQA),
    "cohere": _defaults("CohereConfig", _dims(40, 8192, 64, 8192), *_GQA),
    "granite": _defaults("GraniteConfig", _dims(32, 4096, 32, 2048), *_GQA),
    "ernie4_5": _defaults(
        "Ernie4_5Config", _dims(18, 1024, 16, 131072, num_key_value_heads=2, head_dim=128), *_GQA
    ),
    "ernie4_5_moe": _defaults("Ernie4_5_MoeConfig", _dims(28, 2560, 20, 131072, num_key_value_heads=4)),
    "hunyuan_v1_moe": _defaults("HunYuanMoEV1Config", _dims(32, 4096, 32, 2048), *_GQA),
    "qwen3_next": _defaults(
        "Qwen3NextConfig", _dims(48, 2048, 16, 32768, num_key_value_heads=2, **_GDN), *_LINEAR
    ),
    "qwen3_5_text": _defaults(
        "Qwen3_5TextConfig", _dims(32, 4096, 16, 32768, num_key_value_heads=4, **_GDN), *_LINEAR
    ),
    "qwen3_5_moe_text": _defaults(
        "Qwen3_5MoeTextConfig", _dims(40, 2048, 16, 32768, num_key_value_heads=2, **_GDN), *_LINEAR
    ),
    "nemotron_h": _defaults(
        "NemotronHConfig",
        {
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "max_position_embeddings": 4096,
            "ssm_state_size": 128,
            "mamba_num_heads": 128,
            "mamba_head_dim": 64,
            "n_groups": 8,
            "conv_kernel": 4,
            "expand": 2,
            "chunk_size": 128,
            "mamba_ssm_cache_dtype": "float32",
            "num_nextn_predict_layers": 0,
        },
        nemotron_layers,
        kv_heads_from_heads,
        aliases={"layer_types": "layers_block_type"},
        renames={
            "mamba_n_groups": "n_groups",
            "mamba_d_conv": "conv_kernel",
            "mamba_expand": "expand",
            "mamba_chunk_size": "chunk_size",
        },
    ),
    "jamba": _defaults(
        "JambaConfig",
        _dims(
            32,
            4096,
            32,
            262144,
            num_key_value_heads=8,
            attn_layer_period=8,
            attn_layer_offset=4,
            mamba_d_state=16,
            mamba_d_conv=4,
            mamba_expand=2,
        ),
        kv_heads_from_heads,
        jamba_layers,
    ),
    "falcon_h1": _defaults(
        "FalconH1Config",
        _dims(
            32,
            4096,
            32,
            8192,
            num_key_value_heads=8,
            mamba_d_ssm=1024,
            mamba_n_heads=128,
            mamba_d_head="auto",
            mamba_n_groups=1,
            mamba_d_state=256,
            mamba_d_conv=4,
            mamba_expand=2,
            mamba_chunk_size=256,
        ),
        kv_heads_from_heads,
        d_head_auto,
        _all_layers("hybrid"),
        aliases={"layer_types": "layers_block_type"},
    ),
    "granitemoehybrid": _defaults(
        "GraniteMoeHybridConfig",
        _dims(
            32,
            4096,
            32,
            2048,
            mamba_n_heads=128,
            mamba_n_groups=1,
            mamba_d_state=256,
            mamba_d_head="auto",
            mamba_d_conv=4,
            mamba_expand=2,
            mamba_chunk_size=256,
        ),
        kv_heads_from_heads,
        d_head_auto,
        _all_layers("linear_attention"),
        aliases={"layers_block_type": "layer_types"},
    ),
    "mamba": _defaults("MambaConfig", _MAMBA1, mamba_intermediate, _all_layers("linear_attention")),
    "falcon_mamba": _defaults(
        "FalconMambaConfig", _MAMBA1, mamba_intermediate, _all_layers("linear_attention")
    ),
    "mamba2": _defaults(
        "Mamba2Config",
        {
            "head_dim": 64,
            "hidden_size": 4096,
            "state_size": 128,
            "num_hidden_layers": 64,
            "expand": 2,
            "conv_kernel": 4,
            "n_groups": 8,
            "chunk_size": 256,
        },
        _all_layers("linear_attention"),
    ),
    # no __post_init__: num_key_value_heads must be given or take the class's 2; no head_dim field
    "starcoder2": _defaults(
        "Starcoder2Config", _dims(30, 3072, 24, 4096, num_key_value_heads=2, intermediate_size=12288)
    ),
    "smollm3": _defaults(
        "SmolLM3Config",
        _dims(36, 2048, 16, 32768, num_key_value_heads=4, use_sliding_window=False, no_rope_layer_interval=4),
        kv_heads_from_heads,
        smollm3_layers,
    ),
    "zamba2": _defaults(
        "Zamba2Config",
        _dims(
            54,
            2560,
            32,
            4096,
            mamba_d_state=64,
            mamba_d_conv=4,
            mamba_expand=2,
            mamba_ngroups=1,
            n_mamba_heads=8,
            chunk_size=256,
            use_long_context=False,
        ),
        kv_heads_from_heads,
        zamba2_layers,
        aliases={"layer_types": "layers_block_type", "head_dim": "attention_head_dim"},
    ),
    "lfm2": _defaults(
        "Lfm2Config",
        _dims(32, 2560, 32, 128000, num_key_value_heads=8, conv_L_cache=3),
        lfm2_layers,
        renames={"block_ff_dim": "intermediate_size"},
    ),
    "kimi_linear": _defaults(
        "KimiLinearConfig",
        _dims(
            27,
            2304,
            32,
            1048576,
            num_key_value_heads=32,
            linear_conv_kernel_dim=4,
            linear_head_dim=128,
            linear_num_heads=32,
            **{**_MLA, "q_lora_rank": None},
        ),
        kv_heads_from_heads,
        head_dim_rope_unless_given,
        kimi_linear_layers,
        aliases={"max_position_embeddings": "model_max_length"},
    ),
}

#: the MLP width each class defaults to (Mamba1 classes derive theirs: ``expand * hidden_size``;
#: Zamba2: ``4 * hidden_size``; Mamba2 and Qwen3.5-MoE have none)
_INTERMEDIATE = {
    "cohere": 22528, "cohere2": 22528, "deepseek_v2": 11008, "deepseek_v3": 18432, "deepseek_v32": 18432,
    "ernie4_5": 3072, "ernie4_5_moe": 12288, "falcon_h1": 14336, "gemma2": 9216, "gemma3_text": 9216,
    "glm4_moe": 10944, "gpt_oss": 2880, "granite": 11008, "granitemoehybrid": 11008, "hunyuan_v1_moe": 11008,
    "jamba": 14336, "kimi_linear": 9216, "lfm2": 12288, "llama": 11008, "llama4_text": 8192,
    "minimax_m2": 1536, "mistral": 14336, "mixtral": 14336, "nemotron_h": 21504, "olmo2": 11008,
    "phi3": 8192, "qwen2": 22016, "qwen2_5_vl_text": 29568, "qwen2_moe": 5632, "qwen3": 22016,
    "qwen3_5_text": 12288, "qwen3_moe": 6144, "qwen3_next": 5632, "smollm3": 11008,
}  # fmt: skip
for _type, _width in _INTERMEDIATE.items():
    _entry = CLASS_DEFAULTS[_type]
    CLASS_DEFAULTS[_type] = dataclasses.replace(_entry, values={**_entry.values, "intermediate_size": _width})
#: other class defaults the parameter count reads (kvrules.sizing), where a stored config leaves
#: them out: expert widths and counts, vocabularies of multimodal text configs, bias switches
_SIZING: dict[str, dict[str, Any]] = {
    "glm4_moe": {"moe_intermediate_size": 1408, "n_shared_experts": 1},
    "ernie4_5_moe": {
        "moe_intermediate_size": 1536,
        "moe_num_shared_experts": 2,
        "moe_layer_start_index": 1,
        "moe_layer_end_index": 27,
        "moe_layer_interval": 1,
    },
    "gemma3_text": {"vocab_size": 262208},
    "llama4_text": {"vocab_size": 202048, "intermediate_size_mlp": 16384},
    "starcoder2": {"use_bias": True},
    "granitemoehybrid": {
        "shared_intermediate_size": 1024,
        "mamba_conv_bias": True,
        "tie_word_embeddings": False,
    },
    "zamba2": {"num_mem_blocks": 1},
}
for _type, _values in _SIZING.items():
    _entry = CLASS_DEFAULTS[_type]
    CLASS_DEFAULTS[_type] = dataclasses.replace(_entry, values={**_entry.values, **_values})

#: model types transformers 5.20 cannot read offline (their config class is remote code, which
#: kvrules never runs): the built-in reader reads them, with the defaults of the class they copy
REMOTE_CODE_MODEL_TYPES: tuple[str, ...] = ("internlm3", "kimi_k2", "plamo2", "minimax_m1", "step3_text")

CLASS_DEFAULTS["kimi_k2"] = CLASS_DEFAULTS["deepseek_v3"]  # Kimi K2 ships DeepSeek V3's config class
# InternLM3 (remote code): only its Llama-style rules; its sizes are not defaulted (the file gives them)
CLASS_DEFAULTS["internlm3"] = _defaults("InternLM3Config", {}, *_LLAMA)


#: what every transformers config class inherits (``PretrainedConfig``) among the fields the
#: architectures read besides the cache fields
BASE_DEFAULTS: Mapping[str, Any] = {"is_encoder_decoder": False}


def text_model_type(model_type: str, text: Mapping[str, Any] | None) -> str:
    """The model type whose defaults apply: the sub-config's own ``model_type``, else the wrapper's
    text model type (:data:`TEXT_MODEL_TYPES`), else ``model_type``."""
    if text is not None and isinstance(text.get("model_type"), str):
        return str(text["model_type"])
    return TEXT_MODEL_TYPES.get(model_type, model_type)


def apply_aliases(values: Values, aliases: Mapping[str, str]) -> None:
    """Make both spellings of every renamed key readable (the file's spelling wins when only one
    is given, as the class's ``attribute_map`` does)."""
    for alias, name in aliases.items():
        if values.get(name) is None and values.get(alias) is not None:
            values[name] = values[alias]
        if name in values:
            values[alias] = values[name]


def _remap_layer_types(values: Values, entry: ClassDefaults) -> None:
    """Older layer-kind names renamed in ``layer_types`` (and the field it is another name for)."""
    keys = {"layer_types", *(n for a, n in entry.aliases.items() if a == "layer_types")}
    keys |= {a for a, n in entry.aliases.items() if n == "layer_types"}
    for key in keys:
        if isinstance(values.get(key), list):
            values[key] = remap_legacy(values[key])


def resolve_defaults(model_type: str, given: Mapping[str, Any]) -> tuple[Values, ClassDefaults | None]:
    """The fields of ``given`` (the text level of a file) with ``model_type``'s class defaults
    filled in where a field is absent, and its rules applied; ``None`` as the entry when kvrules
    knows no defaults for ``model_type`` (the fields are then returned as given).

    A field given as ``null`` keeps ``None`` (as a class does for an explicit ``None``) unless a
    rule derives it.
    """
    values: Values = dict(given)
    entry = CLASS_DEFAULTS.get(model_type)
    if entry is None:
        return values, None
    for key, default in BASE_DEFAULTS.items():
        values.setdefault(key, default)
    apply_aliases(values, {a: n for a, n in entry.spellings().items() if a in given and n not in given})
    for old in entry.renames:
        values.pop(old, None)
    for key, default in entry.values.items():
        if key not in values:
            values[key] = default
    for rule in entry.rules:
        rule(values)
    _remap_layer_types(values, entry)
    apply_aliases(values, entry.aliases)
    return values, entry


__all__ = [
    "CACHE_FIELDS",
    "CLASS_DEFAULTS",
    "DEFAULTS_VERSION",
    "REMOTE_CODE_MODEL_TYPES",
    "TEXT_CONFIG_KEYS",
    "TEXT_MODEL_TYPES",
    "ClassDefaults",
    "apply_aliases",
    "resolve_defaults",
    "text_model_type",
]
