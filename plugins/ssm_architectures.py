"""Built-in plugin ``ssm-architectures``: state-space and linear-attention families from HF configs.

Each family is named as vLLM serves it; state shapes and dtypes follow vLLM's
``MambaStateShapeCalculator`` / ``MambaStateDtypeCalculator`` (formulas §2), layer names follow
vLLM's module paths:

* ``mamba`` / ``falcon-mamba`` (attention-free Mamba1): ``backbone.layers.{i}.mixer``;
* ``mamba2`` (attention-free, Mamba-Codestral too): ``backbone.layers.{i}.mixer``;
* ``zamba2``: a Mamba2 mixer in every layer (``{H + i}.mixer``, ``H`` hybrid layers), and one KV
  cache per ``hybrid`` layer (``model.attn.{j}``) although the attention weights are shared;
* ``granite-hybrid`` (Granite 4.0-H, ``granitemoehybrid``): Mamba2 ``model.layers.{i}.mixer``
  and attention ``model.layers.{i}.self_attn.attn`` by ``layer_types``;
* ``lfm2``: short convolutions (a conv-only state) ``model.layers.{i}.short_conv`` and attention;
* ``kimi-linear``: KDA linear attention ``model.layers.{i}.self_attn`` and MLA
  ``model.layers.{i}.self_attn.attn`` by ``linear_attn_config.kda_layers`` (1-based).

Defaults for absent fields are transformers' class defaults. None of these families carries
multi-token-prediction layers except Kimi-Linear (``num_nextn_predict_layers``, copies of its MLA
layer); ``draft="mtp"`` on the others is refused naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kvrules import ConfigError, KVCacheSpec, hookimpl
from kvrules.hf import Architecture, BuildSettings, HFConfig, layers
from kvrules.hf import mamba as ssm
from kvrules.plugin import ArchitectureRegistry
from kvrules.values import shown

Shapes = tuple[tuple[int, ...], ...]


def _attention(config: HFConfig, settings: BuildSettings) -> KVCacheSpec:
    """Full attention with vLLM's head size for these families, ``hidden_size / num_attention_heads``
    (a ``head_dim`` in the config must agree), and the usual KV-head split."""
    heads = layers.kv_heads_per_rank(config, settings.tp)
    hidden = config.integer("hidden_size", why="the attention head size is hidden_size / num_attention_heads")
    total = config.integer("num_attention_heads")
    if hidden % total:
        raise config.error("hidden_size", f"= {hidden} is not a multiple of num_attention_heads {total}")
    head = ssm.consistent(
        config, "head_dim", hidden // total, "hidden_size / num_attention_heads (vLLM's head size)"
    )
    return layers.full_attention(settings, heads, head)


def _by_kind(
    kinds: list[str], table: Mapping[str, tuple[str, Callable[[], KVCacheSpec]]]
) -> dict[str, KVCacheSpec]:
    """Layer ``i`` named ``table[kinds[i]][0].format(i)``; one spec per kind present, built once
    by ``table[kind][1]``."""
    specs = {kind: table[kind][1]() for kind in dict.fromkeys(kinds)}
    return {table[kind][0].format(i): specs[kind] for i, kind in enumerate(kinds)}


MAMBA_ONLY = {"mamba": ssm.MAMBA, "linear_attention": ssm.MAMBA}


def _mamba_layers(config: HFConfig) -> int:
    """The layer count of an attention-free model; its ``layer_types``, when given (transformers'
    property), must name only Mamba layers."""
    kinds = ssm.layer_kinds(config, ("layer_types",), MAMBA_ONLY)
    return len(kinds) if kinds is not None else config.integer("num_hidden_layers")


@dataclass(frozen=True)
class Mamba1(Architecture):
    """Attention-free Mamba1 (``MambaForCausalLM``; Falcon-Mamba): every layer a Mamba1 mixer with
    conv ``(d_conv - 1, intermediate / tp)`` and SSM ``(intermediate / tp, state_size)``."""

    name: str = "mamba"
    model_types: tuple[str, ...] = ("mamba",)

    def shapes(self, config: HFConfig, settings: BuildSettings) -> Shapes:
        """The per-rank state shapes; TP must divide the intermediate size: ``intermediate_size``,
        else ``expand x hidden_size`` (transformers' MambaConfig lets the file's
        ``intermediate_size`` win over ``expand``, Falcon-Mamba-7B: 8192 with ``expand`` 16, and
        vLLM reads ``intermediate_size``)."""
        expand = config.integer("expand", 2)
        if config.has("intermediate_size"):
            key, intermediate = "intermediate_size", config.integer("intermediate_size")
        else:
            key, intermediate = "expand", expand * config.integer("hidden_size")
        ssm.split(config, key, intermediate, settings.tp, what="the Mamba intermediate size")
        return ssm.mamba1_state_shape(
            settings.tp, intermediate, config.integer("state_size", 16), config.integer("conv_kernel", 4)
        )

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        spec = layers.mamba(settings, self.shapes(config, settings), "mamba1")
        return {f"backbone.layers.{i}.mixer": spec for i in range(_mamba_layers(config))}


MAMBA2_FIELDS = ssm.Mamba2Fields(
    heads="num_heads",
    groups="n_groups",
    state="state_size",
    conv="conv_kernel",
    heads_default=128,
    groups_default=8,
    state_default=128,
)


@dataclass(frozen=True)
class Mamba2(Architecture):
    """Attention-free Mamba2 (``Mamba2ForCausalLM``, Mamba-Codestral): every layer a Mamba2 mixer
    of ``expand x hidden_size`` channels in ``num_heads`` heads of ``head_dim``."""

    name: str = "mamba2"
    model_types: tuple[str, ...] = ("mamba2",)

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        intermediate = config.integer("expand", 2) * config.integer("hidden_size")
        head_dim = config.integer("head_dim", 64)
        shapes = ssm.mamba2_mixer_shapes(config, settings, MAMBA2_FIELDS, intermediate, head_dim)
        spec = layers.mamba(settings, shapes, "mamba2")
        return {f"backbone.layers.{i}.mixer": spec for i in range(_mamba_layers(config))}

    def mamba_chunk_size(self, config: HFConfig) -> int | None:
        return config.integer("chunk_size", 256)


ZAMBA2_FIELDS = ssm.Mamba2Fields(
    heads="n_mamba_heads",
    groups="mamba_ngroups",
    state="mamba_d_state",
    conv="mamba_d_conv",
    heads_default=8,
    state_default=64,
)

ZAMBA2_KINDS = {"mamba": ssm.MAMBA, "linear_attention": ssm.MAMBA, "hybrid": "hybrid"}


@dataclass(frozen=True)
class Zamba2(Architecture):
    """Zamba2: a Mamba2 mixer in every layer; each ``hybrid`` layer also runs one of
    ``num_mem_blocks`` shared attention blocks, with a KV cache of its own.

    The attention is multi-head (one KV head per query head) over ``2 x hidden_size`` channels:
    head size ``attention_head_dim`` (``2 x hidden_size / num_attention_heads``).
    """

    name: str = "zamba2"
    model_types: tuple[str, ...] = ("zamba2",)

    def kinds(self, config: HFConfig) -> list[str]:
        """``mamba`` or ``hybrid`` per layer, from ``layers_block_type`` (transformers fills its
        default pattern when absent); ``hybrid_layer_ids``, when given, must list the same layers
        (vLLM maps each hybrid layer to its shared block through it)."""
        kinds = ssm.layer_kinds(config, ("layers_block_type", "layer_types"), ZAMBA2_KINDS)
        if kinds is None:
            raise config.missing("layers_block_type", "it says which layers hold attention")
        ids = config.sequence("hybrid_layer_ids")
        hybrid = [i for i, kind in enumerate(kinds) if kind == "hybrid"]
        if ids is not None and ids != hybrid:
            raise config.error(
                "hybrid_layer_ids",
                f"is {shown(ids)} but {config.where('layers_block_type')!r} puts the hybrid layers at "
                f"{shown(hybrid)}; they must list the same layers",
            )
        return kinds

    def attention(self, config: HFConfig, settings: BuildSettings) -> KVCacheSpec:
        """The hybrid layers' attention spec (vLLM's ``Zamba2Attention``)."""
        heads = config.integer("num_attention_heads")
        ssm.split(config, "num_attention_heads", heads, settings.tp, what="attention heads")
        if config.has("num_key_value_heads") and config.integer("num_key_value_heads") != heads:
            raise config.error(
                "num_key_value_heads",
                f"is {config.integer('num_key_value_heads')}, but Zamba2's attention keeps one KV head per "
                f"query head (num_attention_heads {heads}) in vLLM; correct the config",
            )
        width = 2 * config.integer("hidden_size")
        head = config.integer("attention_head_dim", width // heads)
        if head * heads != width:
            raise config.error(
                "attention_head_dim",
                f"= {head} x {heads} heads is not the attention width 2 x hidden_size = {width}",
            )
        return layers.full_attention(settings, heads // settings.tp, head)

    def mamba(self, config: HFConfig, settings: BuildSettings) -> KVCacheSpec:
        """The Mamba2 mixer's spec: ``mamba_expand x hidden_size`` channels, head size
        ``intermediate / n_mamba_heads``."""
        intermediate = config.integer("mamba_expand", 2) * config.integer("hidden_size")
        heads = ZAMBA2_FIELDS.num_heads(config)
        if intermediate % heads:
            raise config.error(
                "n_mamba_heads", f"= {heads} does not divide mamba_expand x hidden_size = {intermediate}"
            )
        head_dim = ssm.consistent(
            config, "mamba_headdim", intermediate // heads, "mamba_expand x hidden_size / n_mamba_heads"
        )
        shapes = ssm.mamba2_mixer_shapes(config, settings, ZAMBA2_FIELDS, intermediate, head_dim)
        return layers.mamba(settings, shapes, "mamba2")

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        kinds = self.kinds(config)
        hybrid = kinds.count("hybrid")
        mamba = self.mamba(config, settings)
        out: dict[str, KVCacheSpec] = {}
        if hybrid:
            attention = self.attention(config, settings)
            # in vLLM's registration order: the shared blocks (and their attention) come first
            for j in sorted(attention_indexes(hybrid, config.integer("num_mem_blocks", 1))):
                out[f"model.attn.{j}"] = attention
        for i in range(len(kinds)):
            out[f"{hybrid + i}.mixer"] = mamba
        return out

    def mamba_chunk_size(self, config: HFConfig) -> int | None:
        return config.integer("chunk_size", 256)


def attention_indexes(hybrid: int, blocks: int) -> list[int]:
    """vLLM's index ``j`` of each hybrid layer's attention (``model.attn.{j}``), in layer order:
    hybrid layer ``k`` uses shared block ``b = k % blocks``, whose indexes start at
    ``b * (hybrid + blocks - 1) // blocks``."""
    return [(k % blocks) * (hybrid + blocks - 1) // blocks + k // blocks for k in range(hybrid)]


GRANITE_FIELDS = ssm.Mamba2Fields(
    heads="mamba_n_heads",
    groups="mamba_n_groups",
    state="mamba_d_state",
    conv="mamba_d_conv",
    heads_default=128,
    state_default=256,
)


@dataclass(frozen=True)
class GraniteMoeHybrid(Architecture):
    """Granite 4.0-H: Mamba2 and attention layers as ``layer_types`` (``layers_block_type``) says
    (``mamba`` / ``attention``, or transformers 5's ``linear_attention`` / ``full_attention``;
    all Mamba when absent, as transformers defaults)."""

    name: str = "granite-hybrid"
    model_types: tuple[str, ...] = ("granitemoehybrid",)

    def mamba(self, config: HFConfig, settings: BuildSettings) -> KVCacheSpec:
        """The Mamba2 spec: ``mamba_expand x hidden_size`` channels, ``mamba_d_head`` per head
        (``auto``: intermediate / ``mamba_n_heads``)."""
        intermediate = config.integer("mamba_expand", 2) * config.integer("hidden_size")
        if config.get("mamba_d_head", "auto") == "auto":
            head_dim = intermediate // GRANITE_FIELDS.num_heads(config)
        else:
            head_dim = config.integer("mamba_d_head")
        shapes = ssm.mamba2_mixer_shapes(config, settings, GRANITE_FIELDS, intermediate, head_dim)
        return layers.mamba(settings, shapes, "mamba2")

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        kinds = ssm.layer_kinds(config, ("layer_types", "layers_block_type"), ssm.LEGACY_KINDS)
        if kinds is None:
            kinds = [ssm.MAMBA] * config.integer("num_hidden_layers")
        return _by_kind(
            kinds,
            {
                ssm.MAMBA: ("model.layers.{}.mixer", lambda: self.mamba(config, settings)),
                ssm.ATTENTION: ("model.layers.{}.self_attn.attn", lambda: _attention(config, settings)),
            },
        )

    def mamba_chunk_size(self, config: HFConfig) -> int | None:
        return config.integer("mamba_chunk_size", 256)


LFM2_KINDS = {"conv": "conv", "full_attention": ssm.ATTENTION}


@dataclass(frozen=True)
class Lfm2(Architecture):
    """LFM2 / LFM2-MoE: short-convolution layers (one conv state ``(conv_L_cache - 1,
    conv_dim / tp)``, ``conv_dim`` defaulting to ``hidden_size``) and attention layers, by
    ``layer_types`` (else ``full_attn_idxs``; every layer attention when neither, as transformers).

    vLLM refuses ``mamba_cache_mode='all'`` for LFM2; so does this architecture.
    """

    name: str = "lfm2"
    model_types: tuple[str, ...] = ("lfm2", "lfm2_moe")

    def kinds(self, config: HFConfig) -> list[str]:
        """``conv`` or ``attention`` per layer."""
        kinds = ssm.layer_kinds(config, ("layer_types",), LFM2_KINDS)
        if kinds is not None:
            return kinds
        n = config.integer("num_hidden_layers")
        idxs = config.sequence("full_attn_idxs")
        if idxs is None:
            return [ssm.ATTENTION] * n
        if any(not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n for i in idxs):
            raise config.error("full_attn_idxs", f"must list layer indices from 0 to {n - 1}")
        attention = set(idxs)
        return [ssm.ATTENTION if i in attention else "conv" for i in range(n)]

    def conv(self, config: HFConfig, settings: BuildSettings) -> KVCacheSpec:
        """The short-conv spec (its only state in the conv dtype)."""
        if settings.mamba_cache_mode == "all":
            raise ConfigError(
                f"{config.source}: mamba_cache_mode 'all' is not supported for LFM2 (vLLM refuses "
                "it: LFM2 does not support 'all' prefix caching); use 'align' or 'none'"
            )
        key = "conv_dim" if config.has("conv_dim") else "hidden_size"
        dim = config.integer(key)
        ssm.split(config, key, dim, settings.tp, what="the short-convolution width")
        shapes = ssm.short_conv_state_shape(settings.tp, dim, config.integer("conv_L_cache", 3))
        return layers.mamba(settings, shapes, "short_conv")

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        return _by_kind(
            self.kinds(config),
            {
                "conv": ("model.layers.{}.short_conv", lambda: self.conv(config, settings)),
                ssm.ATTENTION: ("model.layers.{}.self_attn.attn", lambda: _attention(config, settings)),
            },
        )


LINEAR = "linear_attn_config"

#: ``linear_attn_config`` entries, and the flat fields transformers' KimiLinearConfig copies them to
KDA_FIELDS = {
    "num_heads": "linear_num_heads",
    "head_dim": "linear_head_dim",
    "short_conv_kernel_size": "linear_conv_kernel_dim",
}


@dataclass(frozen=True)
class KimiLinear(Architecture):
    """Kimi-Linear: KDA linear-attention layers (``linear_attn_config.kda_layers``, 1-based, as
    vLLM's ``is_kda_layer`` reads them) and MLA layers (latent ``kv_lora_rank + qk_rope_head_dim``).

    A KDA state is a conv ``(k - 1 + spec, 3 x num_heads x head_dim / tp)`` in the Mamba conv dtype
    and a recurrent state ``(num_heads / tp, head_dim, head_dim)`` that vLLM always keeps in
    float32. ``layer_types`` and the flat ``linear_*`` fields (transformers' reading of the same
    section), when present, must agree with ``linear_attn_config``.
    """

    name: str = "kimi-linear"
    model_types: tuple[str, ...] = ("kimi_linear",)

    def uses_mla(self, config: HFConfig) -> bool:
        return True

    def kda_field(self, config: HFConfig, key: str) -> int:
        """``linear_attn_config[key]``; its flat copy, when present, must say the same."""
        value = ssm.nested_int(config, LINEAR, key)
        return ssm.consistent(config, KDA_FIELDS[key], value, f"{LINEAR}.{key}")

    def kinds(self, config: HFConfig, n: int) -> list[str]:
        """``mamba`` (KDA) or ``attention`` (MLA) per layer, from ``linear_attn_config``."""
        kda = self._numbers(config, "kda_layers", n)
        if kda is None:
            raise config.missing(f"{LINEAR}.kda_layers", "it says which layers are KDA")
        full = self._numbers(config, "full_attn_layers", n)
        if full is not None and (full & kda or len(full | kda) != n):
            raise config.error(
                LINEAR,
                f"kda_layers and full_attn_layers must split layers 1 to {n} between them (1-based, "
                "each layer in exactly one list)",
            )
        kinds = [ssm.MAMBA if i + 1 in kda else ssm.ATTENTION for i in range(n)]
        types = ssm.layer_kinds(config, ("layer_types",), ssm.LEGACY_KINDS)
        if types is not None and types != kinds:
            raise config.error("layer_types", f"disagrees with {LINEAR}.kda_layers; give one of them")
        return kinds

    def _numbers(self, config: HFConfig, key: str, n: int) -> set[int] | None:
        """``linear_attn_config[key]``: 1-based layer numbers (``None`` when absent)."""
        values = ssm.section(config, LINEAR).get(key)
        if values is None:
            return None
        if not isinstance(values, list) or any(
            not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= n for v in values
        ):
            raise config.error(f"{LINEAR}.{key}", f"must list layer numbers from 1 to {n} (1-based)")
        return set(values)

    def kda(self, config: HFConfig, settings: BuildSettings) -> KVCacheSpec:
        """The KDA spec."""
        heads = self.kda_field(config, "num_heads")
        ssm.split(config, f"{LINEAR}.num_heads", heads, settings.tp, what="KDA heads")
        shapes = ssm.kda_state_shape(
            settings.tp,
            heads,
            self.kda_field(config, "head_dim"),
            self.kda_field(config, "short_conv_kernel_size"),
            settings.num_speculative_tokens,
        )
        return layers.mamba(settings, shapes, "kda", [settings.mamba_conv_dtype, "float32"])

    def mla(self, config: HFConfig, settings: BuildSettings) -> KVCacheSpec:
        """The MLA spec (one latent of ``kv_lora_rank + qk_rope_head_dim`` per token)."""
        heads = config.integer("num_attention_heads")
        ssm.split(config, "num_attention_heads", heads, settings.tp, what="attention heads")
        latent = config.integer("kv_lora_rank", why="the MLA latent size")
        return layers.mla(settings, latent + config.integer("qk_rope_head_dim", why="the MLA RoPE part"))

    def build(self, config: HFConfig, settings: BuildSettings) -> dict[str, KVCacheSpec]:
        kinds = self.kinds(config, config.integer("num_hidden_layers"))
        return _by_kind(
            kinds,
            {
                ssm.MAMBA: ("model.layers.{}.self_attn", lambda: self.kda(config, settings)),
                ssm.ATTENTION: ("model.layers.{}.self_attn.attn", lambda: self.mla(config, settings)),
            },
        )


BUILTIN_SSM_ARCHITECTURES: tuple[Architecture, ...] = (
    Mamba1(description="Mamba (attention-free): Mamba1 mixer in every layer."),
    Mamba1(
        name="falcon-mamba",
        model_types=("falcon_mamba",),
        description="Falcon-Mamba (attention-free): Mamba1 mixer in every layer.",
    ),
    Mamba2(description="Mamba2 / Mamba-Codestral (attention-free): Mamba2 mixer in every layer."),
    Zamba2(description="Zamba2: Mamba2 in every layer, a KV cache per hybrid (shared-attention) layer."),
    GraniteMoeHybrid(description="Granite 4.0-H: Mamba2 + attention by layer_types."),
    Lfm2(description="LFM2: short convolutions (conv state only) + attention by layer_types."),
    KimiLinear(description="Kimi-Linear: KDA linear attention + MLA by linear_attn_config.kda_layers."),
)


@hookimpl
def kvrules_register_architectures(registry: ArchitectureRegistry) -> None:
    """Register the state-space and linear-attention families."""
    for arch in BUILTIN_SSM_ARCHITECTURES:
        registry.add(arch)
