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
from kvrules.plugin import ArchitectureRegistry, Check, applies, declines

FULL = layers.FULL
SLIDING = layers.SLIDING

#: the ``generic`` architecture's priority: below every named one (0 unless a plugin says more)
GENERIC_PRIORITY = -1000


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
class Generic(Architecture):
    """Any attention decoder whose cache kinds standard fields say (:func:`kvrules.hf.layers.attention_kinds`).

    MLA when ``kv_lora_rank`` is set (latent ``kv_lora_rank + qk_rope_head_dim``, every layer);
    else per layer full, sliding (``sliding_window``) or chunked (``attention_chunk_size``)
    attention, from ``layer_types``, ``sliding_window_pattern``, ``use_sliding_window`` /
    ``max_window_layers`` or a model-wide ``sliding_window``; head size ``head_dim`` (or its class
    default), else ``hidden_size / num_attention_heads``.

    :ivar catch_all: recognise every decoder no other architecture claims (the ``generic``
        architecture, registered at the lowest priority); else only :attr:`model_types`.
    :ivar multimodal: the language model sits under ``language_model.`` in the engine even when
        the config is flat (Qwen2.5-VL).
    """

    name: str = "generic"
    catch_all: bool = False
    multimodal: bool = False

    @property
    def generic(self) -> bool:
        """True for the catch-all (the ``arch`` decision's ``details.generic``)."""
        return self.catch_all

    def recognises(self, config: HFConfig) -> Check:
        if not self.catch_all:
            return super().recognises(config)
        seen = config.text_model_type or "(none)"
        if config.flag("is_encoder_decoder", False):
            return declines(
                f"model_type {seen!r} is an encoder-decoder; the generic architecture plans decoders."
            )
        if not (config.has("num_hidden_layers") and config.has("num_attention_heads")):
            return declines(
                f"model_type {seen!r} has no num_hidden_layers / num_attention_heads: not an attention decoder."
            )
        return applies(
            f"no named architecture claims model_type {seen!r}; the generic architecture reads its cache "
            "from standard fields."
        )

    def prefix(self, config: HFConfig) -> str:
        """Where the decoder layers sit in the engine's module tree."""
        return "language_model.model.layers" if self.multimodal else layers.layer_prefix(config)

    def kinds(self, config: HFConfig, n: int) -> layers.LayerKinds:
        """Each layer's attention kind (override to read a family's own field first)."""
        return layers.attention_kinds(config, n)

    def uses_mla(self, config: HFConfig) -> bool:
        return layers.mla_latent(config) is not None

    def _mla(self, config: HFConfig, settings: BuildSettings, n: int, latent: int) -> dict[str, KVCacheSpec]:
        kinds = self.kinds(config, n)
        if set(kinds.kinds) != {layers.FULL}:
            key = "layer_types" if config.has("layer_types") else "sliding_window"
            raise config.error(
                key,
                "asks for windowed layers in a multi-head-latent-attention model (kv_lora_rank); "
                "the generic architecture builds MLA only as full attention: use a named architecture",
            )
        heads = config.integer("num_attention_heads")
        mamba_shapes.split(config, "num_attention_heads", heads, settings.tp, what="attention heads")
        spec = layers.mla(settings, latent)
        return {f"{self.prefix(config)}.{i}.self_attn.attn": spec for i in range(n)}

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        n = config.integer("num_hidden_layers")
        latent = layers.mla_latent(config)
        if latent is not None:
            return self._mla(config, settings, n, latent)
        kinds = self.kinds(config, n)
        heads, head = _attention(config, settings)
        specs: dict[str, KVCacheSpec] = {layers.FULL: layers.full_attention(settings, heads, head)}
        if kinds.window is not None:
            specs[layers.SLIDING] = layers.sliding_window(settings, heads, head, kinds.window)
        if kinds.chunk is not None:
            specs[layers.CHUNKED] = layers.chunked_local(settings, heads, head, kinds.chunk)
        prefix = self.prefix(config)
        return {f"{prefix}.{i}.self_attn.attn": specs[kind] for i, kind in enumerate(kinds.kinds)}

    def assumptions(self, config: HFConfig) -> list[str]:
        """What the build read or assumed, one sentence each (the ``arch`` decision shows them)."""
        n = config.integer("num_hidden_layers")
        latent = layers.mla_latent(config)
        if latent is not None:
            return [f"multi-head latent attention, latent {latent} = kv_lora_rank + qk_rope_head_dim"]
        head = layers.head_size(config)
        return [*self.kinds(config, n).assumptions, layers.head_size_note(config, head)]

    def engine_settings(self, config: HFConfig, settings: BuildSettings) -> tuple[dict[str, Any], str]:
        if layers.mla_latent(config) is not None:
            return {}, ""
        chunked = layers.CHUNKED in self.kinds(config, config.integer("num_hidden_layers")).kinds
        return _CHUNKED_ENGINE if chunked else ({}, "")


#: vLLM's default for chunked local attention (Llama 4 and the generic architecture)
_CHUNKED_ENGINE: tuple[dict[str, Any], str] = (
    {"disable_hybrid_kv_cache_manager": True},
    "vLLM disables the hybrid KV-cache manager by default for chunked local attention "
    "(unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1)",
)


@dataclass(frozen=True)
class MiniMax(Generic):
    """MiniMax-M2: full attention in every layer; ``attn_type_list`` (1 = softmax attention,
    0 = MiniMax-01's lightning linear attention) must say so."""

    name: str = "minimax-m2"
    model_types: tuple[str, ...] = ("minimax_m2",)

    def kinds(self, config: HFConfig, n: int) -> layers.LayerKinds:
        values = config.sequence("attn_type_list", n)
        if values is not None and any(v != 1 for v in values):
            index = next(i for i, v in enumerate(values) if v != 1)
            raise config.error(
                "attn_type_list",
                f"entry {index} is {values[index]!r}; {self.name} builds softmax attention (1) only: "
                "linear (lightning) attention keeps a state this architecture does not build",
            )
        return super().kinds(config, n)


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
        """1 for a RoPE (chunked) layer; ``no_rope_layers`` absent or ``[]`` is transformers' default
        pattern: every ``no_rope_layer_interval``-th layer (4) is global."""
        values = None if config.get("no_rope_layers") == [] else config.sequence("no_rope_layers", n)
        if values is None:
            interval = config.integer("no_rope_layer_interval", 4)
            return [int((i + 1) % interval != 0) for i in range(n)]
        return [int(bool(v)) for v in values]

    def _chunked(self, config: HFConfig, n: int) -> list[bool]:
        """Which layers are chunked: ``layer_types`` when set, else the RoPE layers."""
        types = layer_types(config, n, (FULL, layers.CHUNKED))
        if types is not None:
            return [t == layers.CHUNKED for t in types]
        return [bool(rope) for rope in self._rope(config, n)]

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        n = config.integer("num_hidden_layers")
        heads, head = _attention(config, settings)
        chunk = config.opt_int("attention_chunk_size")
        full = layers.full_attention(settings, heads, head)
        chunked = self._chunked(config, n)
        if chunk is None:
            return {attention_prefix(config, i): full for i in range(n)}
        local = layers.chunked_local(settings, heads, head, chunk)
        return {attention_prefix(config, i): (local if c else full) for i, c in enumerate(chunked)}

    def engine_settings(self, config: HFConfig, settings: BuildSettings) -> tuple[dict[str, Any], str]:
        if config.opt_int("attention_chunk_size") is None:
            return {}, ""
        return _CHUNKED_ENGINE


@dataclass(frozen=True)
class DeepSeekMLA(Architecture):
    """DeepSeek V2 / V3: multi-head latent attention, one latent of ``kv_lora_rank + qk_rope_head_dim``."""

    name: str = "deepseek-mla"
    model_types: tuple[str, ...] = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2")

    def uses_mla(self, config: HFConfig) -> bool:
        return True

    def engine_kv_cache_dtype(self, config: HFConfig, option: str) -> tuple[str, str]:
        """DeepSeek-V3.2 (sparse attention: ``index_topk``) stores an fp8 cache as ``fp8_ds_mla``."""
        if option.startswith("fp8") and option != "fp8_ds_mla" and config.has("index_topk"):
            return "fp8_ds_mla", "vLLM's DeepSeek-V3.2 stores an fp8 MLA cache as fp8_ds_mla"
        return option, ""

    def _layer(
        self, config: HFConfig, settings: BuildSettings, index: int, indexed: bool = True
    ) -> dict[str, KVCacheSpec]:
        """One layer's caches: the MLA latent, and DeepSeek-V3.2's indexer keys when ``index_head_dim``
        is set (and ``indexed``: the layer's ``layer_types`` entry is ``indexed_attention``)."""
        latent = config.integer("kv_lora_rank", why="the MLA latent size") + config.integer(
            "qk_rope_head_dim", why="the MLA RoPE part"
        )
        out: dict[str, KVCacheSpec] = {f"model.layers.{index}.self_attn.attn": layers.mla(settings, latent)}
        indexer = self._indexer(config, settings) if indexed else None
        if indexer is not None:
            out[f"model.layers.{index}.self_attn.indexer.k_cache"] = indexer
        return out

    def _indexed(self, config: HFConfig, n: int) -> list[bool]:
        """Which layers keep indexer keys: transformers 5's ``layer_types`` (``indexed_attention``
        / ``full_attention``) when set, else every layer."""
        types = layer_types(config, n, (FULL, INDEXED))
        if types is None:
            return [True] * n
        if INDEXED in types and not config.has("index_head_dim"):
            raise config.missing("index_head_dim", "layer_types names indexed_attention layers")
        return [t == INDEXED for t in types]

    def _indexer(self, config: HFConfig, settings: BuildSettings) -> KVCacheSpec | None:
        """DeepSeek-V3.2's sparse-attention indexer cache: fp8 keys of ``index_head_dim`` plus one
        fp32 scale per 128 (vLLM's ``DeepseekV32IndexerCache``), in uint8, whatever the KV dtype."""
        if not config.has("index_head_dim"):
            return None
        config.get("index_n_heads")  # the indexer's query heads: they keep no cache
        config.get("index_topk")
        dim = config.integer("index_head_dim")
        return layers.indexer_keys(settings, dim + dim // INDEXER_QUANT_BLOCK * 4)

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        n = config.integer("num_hidden_layers")
        heads = config.integer("num_attention_heads")
        mamba_shapes.split(config, "num_attention_heads", heads, settings.tp, what="attention heads")
        out: dict[str, KVCacheSpec] = {}
        for i, indexed in enumerate(self._indexed(config, n)):
            out.update(self._layer(config, settings, i, indexed))
        return out

    def mtp_specs(self, config: HFConfig, settings: BuildSettings, count: int) -> dict[str, KVCacheSpec]:
        """MTP layers are decoder layers after the last one, indexer included."""
        n = config.integer("num_hidden_layers")
        out: dict[str, KVCacheSpec] = {}
        for i in range(count):
            out.update(self._layer(config, settings, n + i))
        return out


#: fp8 indexer keys carry one float32 scale per this many elements (vLLM's ``quant_block_size``)
INDEXER_QUANT_BLOCK = 128

#: transformers 5's ``layer_types`` entry of a DeepSeek-V3.2 layer with an indexer
INDEXED = "indexed_attention"


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
        """``layer_types`` when set (it wins over ``full_attention_interval``, as in transformers)."""
        interval = config.integer("full_attention_interval", 4)
        types = layer_types(config, n, (FULL, "linear_attention"))
        if types is not None:
            return types
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
        return super().mtp_layer_count(config) or 1

    def mtp_layer_name(self, config: HFConfig, index: int) -> str:
        return f"mtp.layers.{index}.self_attn.attn"


#: Nemotron-H's and Falcon-H1's Mamba2 fields (heads and state required, one group by default)
NEMOTRON_H_FIELDS = mamba_shapes.Mamba2Fields(
    heads="mamba_num_heads", groups="n_groups", state="ssm_state_size", conv="conv_kernel"
)
FALCON_H1_FIELDS = mamba_shapes.Mamba2Fields(
    heads="mamba_n_heads",
    groups="mamba_n_groups",
    state="mamba_d_state",
    conv="mamba_d_conv",
    head_dim="mamba_d_head",
)


@dataclass(frozen=True)
class NemotronH(Architecture):
    """Nemotron-H: Mamba2 (``M``), attention (``*``), MLP/MoE (``-``/``E``, no cache) from ``hybrid_override_pattern`` or ``layers_block_type``.

    The SSM state defaults to ``mamba_ssm_cache_dtype`` from the config, else float32.
    """

    name: str = "nemotron-h"
    model_types: tuple[str, ...] = ("nemotron_h",)

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        # hybrid_override_pattern, or transformers 5's layers_block_type (no num_hidden_layers)
        pattern = mamba_shapes.nemotron_h_pattern(config)
        config.get("expand")  # not vLLM's: the mixer is mamba_num_heads x mamba_head_dim wide
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
                    heads_n, head_dim = config.integer("mamba_num_heads"), config.integer("mamba_head_dim")
                    shapes = mamba_shapes.mamba2_mixer_shapes(
                        config, settings, NEMOTRON_H_FIELDS, heads_n * head_dim, head_dim
                    )
                    mamba = layers.mamba(settings, shapes, "mamba2")
                out[f"model.layers.{i}.mixer"] = mamba
        return out

    def mamba_ssm_dtype_default(self, config: HFConfig) -> str:
        value = config.get("mamba_ssm_cache_dtype")
        return value if isinstance(value, str) else "float32"

    def mtp_specs(self, config: HFConfig, settings: BuildSettings, count: int) -> dict[str, KVCacheSpec]:
        """vLLM's one MTP layer: a KV cache per attention block of ``mtp_layers_block_type``
        (``mtp_hybrid_override_pattern``), named ``mtp.layers.N.mixer.attn``."""
        if count != 1:
            raise config.error(
                "num_nextn_predict_layers", f"is {count}; vLLM's Nemotron-H MTP supports exactly 1"
            )
        # a copy of the target's attention spec (as the base class copies it)
        attention = next(
            (s for s in self.build(config, settings).values() if s.type_name == "full_attention"), None
        )
        if attention is None:
            attention = layers.full_attention(settings, *_attention(config, settings))
        pattern = mamba_shapes.nemotron_h_mtp_pattern(config)
        return {f"mtp.layers.{i}.mixer.attn": attention for i, block in enumerate(pattern) if block == "*"}


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
        expand = config.number("mamba_expand", 2)  # read either way: mamba_d_ssm, when set, wins
        if config.has("mamba_d_ssm"):
            intermediate = config.integer("mamba_d_ssm")
        else:
            intermediate = int(expand * config.integer("hidden_size"))
        shapes = mamba_shapes.mamba2_mixer_shapes(config, settings, FALCON_H1_FIELDS, intermediate)
        mamba = layers.mamba(settings, shapes, "mamba2")
        out: dict[str, KVCacheSpec] = {}
        for i in range(n):
            out[f"model.layers.{i}.attn"] = attention
            out[f"model.{n + i}.mixer"] = mamba
        return out


BUILTIN_ARCHITECTURES: tuple[Architecture, ...] = (
    Generic(
        name="llama",
        model_types=("llama",),
        class_names=(
            "LlamaForCausalLM",
            "LlamaForCausalLMEagle3",
            "Eagle3LlamaForCausalLM",
            "LlamaForCausalLMEagle",
        ),
        description="Llama and EAGLE draft heads (generic fields).",
    ),
    Generic(
        name="mistral",
        model_types=("mistral", "mixtral"),
        description="Mistral / Mixtral (generic fields: a sliding_window applies to every layer).",
    ),
    Generic(
        name="qwen2",
        model_types=("qwen2", "qwen2_moe"),
        description="Qwen2 (generic fields: sliding from max_window_layers with use_sliding_window).",
    ),
    Generic(name="qwen3", model_types=("qwen3", "qwen3_moe"), description="Qwen3 (generic fields)."),
    Generic(
        name="qwen2-vl",
        model_types=("qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text"),
        multimodal=True,
        description="Qwen2-VL / Qwen2.5-VL: the text decoder (generic fields), under language_model.",
    ),
    Generic(name="phi3", model_types=("phi3",), description="Phi-3 / Phi-4 (generic fields)."),
    Generic(name="olmo2", model_types=("olmo2",), description="OLMo 2 (generic fields)."),
    Generic(name="cohere", model_types=("cohere",), description="Command-R (generic fields)."),
    Generic(
        name="cohere2",
        model_types=("cohere2",),
        description="Command-R7B: sliding_window_pattern (every 4th layer global).",
    ),
    Generic(name="granite", model_types=("granite",), description="Granite 3 (generic fields)."),
    Generic(name="internlm3", model_types=("internlm3",), description="InternLM3 (generic fields)."),
    Generic(
        name="ernie4-5",
        model_types=("ernie4_5", "ernie4_5_moe"),
        description="ERNIE 4.5 (generic fields, MTP).",
    ),
    Generic(
        name="hunyuan",
        model_types=("hunyuan_v1_dense", "hunyuan_v1_moe"),
        description="Hunyuan (generic fields; use_cla is refused as cross-layer KV sharing).",
    ),
    Generic(
        name="glm4-moe",
        model_types=("glm4_moe",),
        description="GLM-4.5 / 4.5-Air / 4.6 (generic fields; MTP from num_nextn_predict_layers).",
    ),
    MiniMax(description="MiniMax-M2: full attention (attn_type_list all 1)."),
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
    DeepSeekMLA(
        description="DeepSeek V2 / V3 / V3.2: MLA, head size kv_lora_rank + qk_rope_head_dim (+ V3.2 indexer keys)."
    ),
    GatedDeltaNet(description="Qwen3-Next / Qwen3.5: gated delta net + full attention every 4th layer."),
    NemotronH(description="Nemotron-H: Mamba2 + attention from hybrid_override_pattern."),
    Jamba(description="Jamba: Mamba1 + attention every attn_layer_period layers."),
    FalconH1(description="Falcon-H1: attention and Mamba2 in every layer."),
    Generic(
        name="generic",
        priority=GENERIC_PRIORITY,
        catch_all=True,
        description="Any attention decoder no named architecture claims, from standard fields.",
    ),
)


@hookimpl
def kvrules_register_architectures(registry: ArchitectureRegistry) -> None:
    for arch in BUILTIN_ARCHITECTURES:
        registry.add(arch)
