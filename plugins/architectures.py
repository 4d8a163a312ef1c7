"""Built-in plugin ``architectures``: per-layer specs from Hugging Face configs (formulas §2, §5).

Layer names follow vLLM's module paths (``model.layers.3.self_attn.attn``,
``model.layers.0.linear_attn``, ``model.layers.0.mixer``, ...); multimodal wrappers whose
language model sits under ``text_config`` get the ``language_model.`` prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvrules import KVCacheSpec, hookimpl
from kvrules.hf import Architecture, BuildSettings, HFConfig, layers
from kvrules.hf import mamba as mamba_shapes
from kvrules.plugin import ArchitectureRegistry

FULL = "full_attention"
SLIDING = "sliding_attention"


def layer_types(config: HFConfig, count: int, allowed: tuple[str, ...]) -> list[str] | None:
    """The config's ``layer_types`` (one per layer, each in ``allowed``), or ``None`` when absent."""
    values = config.sequence("layer_types", count)
    if values is None:
        return None
    for index, value in enumerate(values[:count]):
        if value not in allowed:
            raise config.error(
                "layer_types", f"entry {index} is {value!r}; this architecture knows {', '.join(allowed)}"
            )
    return [str(v) for v in values[:count]]


def attention_prefix(config: HFConfig, index: int) -> str:
    """``model.layers.{index}.self_attn.attn`` (with ``language_model.`` for multimodal wrappers)."""
    return f"{layers.layer_prefix(config)}.{index}.self_attn.attn"


def _attention(config: HFConfig, settings: BuildSettings) -> tuple[int, int]:
    return layers.kv_heads_per_rank(config, settings.tp), layers.head_size(config)


@dataclass(frozen=True)
class DecoderOnly(Architecture):
    """Llama-style decoders: full attention, or sliding windows where ``layer_types`` says so.

    Qwen2 configs with ``use_sliding_window`` use the window from layer ``max_window_layers`` on.
    """

    name: str = "llama"
    model_types: tuple[str, ...] = ("llama",)

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        n = config.integer("num_hidden_layers")
        heads, head = _attention(config, settings)
        types = layer_types(config, n, (FULL, SLIDING))
        if types is None and config.flag("use_sliding_window", False):
            start = config.integer("max_window_layers", 0, minimum=0)
            types = [SLIDING if i >= start else FULL for i in range(n)]
        full = layers.full_attention(settings, heads, head)
        out: dict[str, KVCacheSpec] = {}
        window_spec: KVCacheSpec | None = None
        for i in range(n):
            if types is not None and types[i] == SLIDING:
                if window_spec is None:
                    window = config.integer("sliding_window", why="layer_types names sliding layers")
                    window_spec = layers.sliding_window(settings, heads, head, window)
                out[attention_prefix(config, i)] = window_spec
            else:
                out[attention_prefix(config, i)] = full
        return out


@dataclass(frozen=True)
class Gemma(Architecture):
    """Gemma 2 / Gemma 3: sliding-window and global layers interleaved.

    ``layer_types`` when present; else Gemma 3's ``sliding_window_pattern`` (default 6: layer
    ``i`` is global iff ``(i + 1) % pattern == 0``); else Gemma 2's alternation (even layers slide).
    """

    name: str = "gemma3"
    model_types: tuple[str, ...] = ("gemma3", "gemma3_text")
    default_pattern: int = 6

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        n = config.integer("num_hidden_layers")
        heads, head = _attention(config, settings)
        window = config.integer("sliding_window", 4096)
        types = layer_types(config, n, (FULL, SLIDING))
        if types is None:
            if self.default_pattern:
                pattern = config.integer("sliding_window_pattern", self.default_pattern)
                types = [FULL if (i + 1) % pattern == 0 else SLIDING for i in range(n)]
            else:
                types = [SLIDING if i % 2 == 0 else FULL for i in range(n)]
        full = layers.full_attention(settings, heads, head)
        sliding = layers.sliding_window(settings, heads, head, window)
        return {attention_prefix(config, i): (sliding if t == SLIDING else full) for i, t in enumerate(types)}


@dataclass(frozen=True)
class GptOss(Architecture):
    """gpt-oss: sliding window on even layers, full attention on odd ones (or ``layer_types``)."""

    name: str = "gpt-oss"
    model_types: tuple[str, ...] = ("gpt_oss",)

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        n = config.integer("num_hidden_layers")
        heads, head = _attention(config, settings)
        window = config.integer("sliding_window", why="gpt-oss slides its even layers")
        types = layer_types(config, n, (FULL, SLIDING)) or [SLIDING if i % 2 == 0 else FULL for i in range(n)]
        full = layers.full_attention(settings, heads, head)
        sliding = layers.sliding_window(settings, heads, head, window)
        return {
            f"model.layers.{i}.attn.attn": (sliding if t == SLIDING else full) for i, t in enumerate(types)
        }


@dataclass(frozen=True)
class Llama4(Architecture):
    """Llama 4: chunked local attention on RoPE layers, global (NoPE) attention every 4th layer.

    ``no_rope_layers[i] == 0`` marks a global layer (default: ``(i + 1) % 4 == 0``). vLLM turns
    the hybrid KV-cache manager off by default for chunked local attention ("latency
    regression"), so every layer is then planned as full attention.
    """

    name: str = "llama4"
    model_types: tuple[str, ...] = ("llama4", "llama4_text")

    def _rope(self, config: HFConfig, n: int) -> list[int]:
        values = config.sequence("no_rope_layers", n)
        if values is None:
            return [int((i + 1) % 4 != 0) for i in range(n)]
        return [int(bool(v)) for v in values[:n]]

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        n = config.integer("num_hidden_layers")
        heads, head = _attention(config, settings)
        chunk = config.opt_int("attention_chunk_size")
        full = layers.full_attention(settings, heads, head)
        if chunk is None:
            return {attention_prefix(config, i): full for i in range(n)}
        local = layers.chunked_local(settings, heads, head, chunk)
        return {
            attention_prefix(config, i): (local if rope else full)
            for i, rope in enumerate(self._rope(config, n))
        }

    def engine_settings(self, config: HFConfig, settings: BuildSettings) -> tuple[dict[str, Any], str]:
        if config.opt_int("attention_chunk_size") is None:
            return {}, ""
        return (
            {"disable_hybrid_kv_cache_manager": True},
            "vLLM disables the hybrid KV-cache manager by default for chunked local attention "
            "(unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1)",
        )


@dataclass(frozen=True)
class DeepSeekMLA(Architecture):
    """DeepSeek V2 / V3: multi-head latent attention, one latent of ``kv_lora_rank + qk_rope_head_dim``."""

    name: str = "deepseek-mla"
    model_types: tuple[str, ...] = ("deepseek_v2", "deepseek_v3", "kimi_k2")

    def uses_mla(self, config: HFConfig) -> bool:
        return True

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        n = config.integer("num_hidden_layers")
        heads = config.integer("num_attention_heads")
        mamba_shapes.split(config, "num_attention_heads", heads, settings.tp, what="attention heads")
        latent = config.integer("kv_lora_rank", why="the MLA latent size") + config.integer(
            "qk_rope_head_dim", why="the MLA RoPE part"
        )
        spec = layers.mla(settings, latent)
        return {f"model.layers.{i}.self_attn.attn": spec for i in range(n)}


@dataclass(frozen=True)
class GatedDeltaNet(Architecture):
    """Qwen3-Next / Qwen3.5: gated delta net (linear attention) with full attention every ``interval`` layers."""

    name: str = "qwen3-next"
    model_types: tuple[str, ...] = (
        "qwen3_next",
        "qwen3_5",
        "qwen3_5_moe",
        "qwen3_5_text",
        "qwen3_5_moe_text",
    )

    def _types(self, config: HFConfig, n: int) -> list[str]:
        types = layer_types(config, n, (FULL, "linear_attention"))
        if types is not None:
            return types
        interval = config.integer("full_attention_interval", 4)
        return [FULL if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]

    def gdn_shapes(self, config: HFConfig, settings: BuildSettings) -> tuple[tuple[int, ...], ...]:
        tp = settings.tp
        nk = config.integer("linear_num_key_heads")
        nv = config.integer("linear_num_value_heads")
        mamba_shapes.split(config, "linear_num_key_heads", nk, tp)
        mamba_shapes.split(config, "linear_num_value_heads", nv, tp)
        return mamba_shapes.gated_delta_net_state_shape(
            tp,
            nk,
            nv,
            config.integer("linear_key_head_dim"),
            config.integer("linear_value_head_dim"),
            config.integer("linear_conv_kernel_dim", 4),
            settings.num_speculative_tokens,
        )

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        n = config.integer("num_hidden_layers")
        heads, head = _attention(config, settings)
        full = layers.full_attention(settings, heads, head)
        gdn = layers.mamba(settings, self.gdn_shapes(config, settings), "gdn_attention")
        prefix = layers.layer_prefix(config)
        out: dict[str, KVCacheSpec] = {}
        for i, kind in enumerate(self._types(config, n)):
            if kind == FULL:
                out[f"{prefix}.{i}.self_attn.attn"] = full
            else:
                out[f"{prefix}.{i}.linear_attn"] = gdn
        return out

    def mamba_ssm_dtype_default(self, config: HFConfig) -> str:
        value = config.get("mamba_ssm_dtype")
        return value if isinstance(value, str) else "auto"

    def mtp_layer_count(self, config: HFConfig) -> int:
        count = super().mtp_layer_count(config)
        return count or 1

    def mtp_layer_name(self, config: HFConfig, index: int) -> str:
        return f"mtp.layers.{index}.self_attn.attn"


def _mamba2_shapes(
    config: HFConfig,
    settings: BuildSettings,
    *,
    heads_key: str,
    head_dim_key: str,
    groups_key: str,
    state_key: str,
    conv_key: str,
    intermediate: int,
) -> tuple[tuple[int, ...], ...]:
    tp = settings.tp
    heads = config.integer(heads_key)
    groups = config.integer(groups_key, 1)
    mamba_shapes.split(config, heads_key, heads, tp, what="Mamba2 heads")
    if groups % tp and groups != 1:
        raise config.error(
            groups_key,
            f"= {groups} cannot be split over tensor_parallel_size {tp}: Mamba2 groups must be 1 or a "
            f"multiple of {tp}; choose a TP size that divides {groups}",
        )
    return mamba_shapes.mamba2_state_shape(
        tp,
        intermediate,
        groups,
        heads,
        config.integer(head_dim_key),
        config.integer(state_key),
        config.integer(conv_key, 4),
        settings.num_speculative_tokens,
    )


@dataclass(frozen=True)
class NemotronH(Architecture):
    """Nemotron-H: Mamba2 (``M``), attention (``*``), MLP/MoE (``-``/``E``, no cache) from ``hybrid_override_pattern``.

    The SSM state defaults to ``mamba_ssm_cache_dtype`` from the config, else float32.
    """

    name: str = "nemotron-h"
    model_types: tuple[str, ...] = ("nemotron_h",)

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        n = config.integer("num_hidden_layers")
        pattern = config.string("hybrid_override_pattern", why="it says which layers are Mamba and attention")
        if len(pattern) != n:
            raise config.error(
                "hybrid_override_pattern", f"has {len(pattern)} characters but num_hidden_layers is {n}"
            )
        unknown = sorted(set(pattern) - set("M*-E"))
        if unknown:
            raise config.error(
                "hybrid_override_pattern", f"contains {', '.join(map(repr, unknown))}; known: M, *, -, E"
            )
        out: dict[str, KVCacheSpec] = {}
        attention: KVCacheSpec | None = None
        mamba: KVCacheSpec | None = None
        for i, kind in enumerate(pattern):
            if kind == "*":
                if attention is None:
                    heads, head = _attention(config, settings)
                    attention = layers.full_attention(settings, heads, head)
                out[f"model.layers.{i}.mixer.attn"] = attention
            elif kind == "M":
                if mamba is None:
                    heads_n = config.integer("mamba_num_heads")
                    shapes = _mamba2_shapes(
                        config,
                        settings,
                        heads_key="mamba_num_heads",
                        head_dim_key="mamba_head_dim",
                        groups_key="n_groups",
                        state_key="ssm_state_size",
                        conv_key="conv_kernel",
                        intermediate=heads_n * config.integer("mamba_head_dim"),
                    )
                    mamba = layers.mamba(settings, shapes, "mamba2")
                out[f"model.layers.{i}.mixer"] = mamba
        return out

    def mamba_ssm_dtype_default(self, config: HFConfig) -> str:
        value = config.get("mamba_ssm_cache_dtype")
        return value if isinstance(value, str) else "float32"


@dataclass(frozen=True)
class Jamba(Architecture):
    """Jamba: Mamba1 layers with attention at ``i % attn_layer_period == attn_layer_offset``."""

    name: str = "jamba"
    model_types: tuple[str, ...] = ("jamba",)

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        n = config.integer("num_hidden_layers")
        period = config.integer("attn_layer_period", 8)
        offset = config.integer("attn_layer_offset", 4, minimum=0)
        if offset >= period:
            raise config.error(
                "attn_layer_offset", f"= {offset} must be smaller than attn_layer_period {period}"
            )
        heads, head = _attention(config, settings)
        attention = layers.full_attention(settings, heads, head)
        intermediate = config.integer("mamba_expand", 2) * config.integer("hidden_size")
        mamba_shapes.split(
            config, "hidden_size", intermediate, settings.tp, what="mamba_expand x hidden_size"
        )
        shapes = mamba_shapes.mamba1_state_shape(
            settings.tp, intermediate, config.integer("mamba_d_state", 16), config.integer("mamba_d_conv", 4)
        )
        mamba = layers.mamba(settings, shapes, "mamba1")
        return {
            (f"model.layers.{i}.attn" if i % period == offset else f"model.layers.{i}.mamba"): (
                attention if i % period == offset else mamba
            )
            for i in range(n)
        }


@dataclass(frozen=True)
class FalconH1(Architecture):
    """Falcon-H1: every decoder layer has an attention branch and a Mamba2 branch (two caches per layer).

    vLLM names the Mamba branch of layer ``i`` ``model.{num_hidden_layers + i}.mixer`` so every
    cache layer has its own index.
    """

    name: str = "falcon-h1"
    model_types: tuple[str, ...] = ("falcon_h1",)

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        n = config.integer("num_hidden_layers")
        heads, head = _attention(config, settings)
        attention = layers.full_attention(settings, heads, head)
        if config.has("mamba_d_ssm"):
            intermediate = config.integer("mamba_d_ssm")
        else:
            intermediate = int(config.number("mamba_expand", 2) * config.integer("hidden_size"))
        shapes = _mamba2_shapes(
            config,
            settings,
            heads_key="mamba_n_heads",
            head_dim_key="mamba_d_head",
            groups_key="mamba_n_groups",
            state_key="mamba_d_state",
            conv_key="mamba_d_conv",
            intermediate=intermediate,
        )
        mamba = layers.mamba(settings, shapes, "mamba2")
        out: dict[str, KVCacheSpec] = {}
        for i in range(n):
            out[f"model.layers.{i}.attn"] = attention
            out[f"model.{n + i}.mixer"] = mamba
        return out


BUILTIN_ARCHITECTURES: tuple[Architecture, ...] = (
    DecoderOnly(
        name="llama",
        model_types=("llama",),
        class_names=(
            "LlamaForCausalLM",
            "LlamaForCausalLMEagle3",
            "Eagle3LlamaForCausalLM",
            "LlamaForCausalLMEagle",
        ),
        description="Llama and EAGLE draft heads: full attention (sliding where layer_types says).",
    ),
    DecoderOnly(
        name="mistral",
        model_types=("mistral", "mixtral"),
        description="Mistral / Mixtral: full attention (sliding where layer_types says).",
    ),
    DecoderOnly(
        name="qwen2",
        model_types=("qwen2", "qwen2_moe"),
        description="Qwen2: full attention (sliding from max_window_layers with use_sliding_window).",
    ),
    DecoderOnly(
        name="qwen3",
        model_types=("qwen3", "qwen3_moe"),
        description="Qwen3: full attention (sliding where layer_types says).",
    ),
    Gemma(
        name="gemma2",
        model_types=("gemma2",),
        default_pattern=0,
        description="Gemma 2: sliding window on even layers (or layer_types).",
    ),
    Gemma(
        name="gemma3",
        model_types=("gemma3", "gemma3_text"),
        description="Gemma 3: 5 sliding-window : 1 global (sliding_window_pattern or layer_types).",
    ),
    GptOss(description="gpt-oss: alternating sliding-window (even) and full attention."),
    Llama4(description="Llama 4: chunked local attention, global attention every 4th layer."),
    DeepSeekMLA(description="DeepSeek V2 / V3: MLA, head size kv_lora_rank + qk_rope_head_dim."),
    GatedDeltaNet(description="Qwen3-Next / Qwen3.5: gated delta net + full attention every 4th layer."),
    NemotronH(description="Nemotron-H: Mamba2 + attention from hybrid_override_pattern."),
    Jamba(description="Jamba: Mamba1 + attention every attn_layer_period layers."),
    FalconH1(description="Falcon-H1: attention and Mamba2 in every layer."),
)


@hookimpl
def kvrules_register_architectures(registry: ArchitectureRegistry) -> None:
    for arch in BUILTIN_ARCHITECTURES:
        registry.add(arch)
