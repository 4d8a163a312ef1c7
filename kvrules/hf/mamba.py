"""Mamba / linear-attention state shapes per tensor-parallel rank (formulas §2.1), and the
config readers the state-space families share.

Conv states use vLLM's default "SD" orientation ``(state_len, dim)``; the byte totals are the
same in every orientation. Mamba2, gated-delta-net and KDA conv states keep ``num_spec`` extra
rows for speculative decoding. Every ``*_state_shape`` function takes integers that the caller
has validated (see :func:`split`, which raises a :class:`~kvrules.ModelFileError` naming the
config field); :func:`mamba2_mixer_shapes`, :func:`layer_kinds`, :func:`nested_int`,
:func:`consistent` and :func:`nemotron_h_pattern` read the config and name the field they refuse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvrules.errors import KVRulesError, ModelFileError, SpecError
from kvrules.hf.config import MAX_HF_LAYERS, HFConfig
from kvrules.hf.settings import BuildSettings
from kvrules.values import MAX_DIMENSION, as_int, shown

Shape = tuple[int, ...]


def split(config: HFConfig, key: str, value: int, tp: int, *, what: str = "") -> int:
    """``value // tp`` for the config field ``key``; a field that ``tp`` does not divide is an error."""
    if value % tp:
        label = f" ({what})" if what else ""
        raise config.error(
            key,
            f"= {value}{label} cannot be split over tensor_parallel_size {tp}: {value} is not a "
            f"multiple of {tp}; choose a tensor-parallel size that divides {value}",
        )
    return value // tp


def _div(value: int, tp: int, what: str) -> int:
    if value % tp:
        raise SpecError(f"{what} = {value} is not divisible by tensor_parallel_size {tp}")
    return value // tp


def extra_groups_for_head_shards(n_groups: int, tp: int) -> int:
    """Groups to add so that every rank holds the groups its heads need (0 when ``tp`` divides)."""
    return 0 if n_groups % tp == 0 else tp - n_groups


def mamba1_state_shape(tp: int, intermediate: int, state_size: int, conv_kernel: int) -> tuple[Shape, Shape]:
    """Mamba1 (Jamba): conv ``(k - 1, intermediate / tp)``, temporal ``(intermediate / tp, state)``."""
    dim = _div(intermediate, tp, "mamba intermediate size")
    return (conv_kernel - 1, dim), (dim, state_size)


def mamba2_state_shape(
    tp: int,
    intermediate: int,
    n_groups: int,
    num_heads: int,
    head_dim: int,
    state_size: int,
    conv_kernel: int,
    num_spec: int = 0,
) -> tuple[Shape, Shape]:
    """Mamba2: conv ``(k - 1 + spec, conv_dim / tp)``, temporal ``(heads / tp, head_dim, state)``.

    ``conv_dim = intermediate + 2 * groups * state``, groups extended so every rank holds whole groups.
    """
    groups = n_groups + extra_groups_for_head_shards(n_groups, tp)
    conv_dim = intermediate + 2 * groups * state_size
    conv = (conv_kernel - 1 + num_spec, _div(conv_dim, tp, "mamba2 conv dim"))
    return conv, (_div(num_heads, tp, "mamba2 heads"), head_dim, state_size)


def gated_delta_net_state_shape(
    tp: int,
    num_k_heads: int,
    num_v_heads: int,
    head_k_dim: int,
    head_v_dim: int,
    conv_kernel: int,
    num_spec: int = 0,
) -> tuple[Shape, Shape]:
    """Gated delta net (Qwen3-Next, Qwen3.5): conv ``(k - 1 + spec, conv_dim / tp)``, temporal ``(nv / tp, dv, dk)``.

    ``conv_dim = dk * nk * 2 + dv * nv``.
    """
    conv_dim = head_k_dim * num_k_heads * 2 + head_v_dim * num_v_heads
    conv = (conv_kernel - 1 + num_spec, _div(conv_dim, tp, "gated delta net conv dim"))
    return conv, (_div(num_v_heads, tp, "gated delta net value heads"), head_v_dim, head_k_dim)


def short_conv_state_shape(tp: int, intermediate: int, conv_kernel: int) -> tuple[Shape]:
    """Short convolution (LFM2): conv ``(k - 1, intermediate / tp)``."""
    return ((conv_kernel - 1, _div(intermediate, tp, "short conv dim")),)


def kda_state_shape(
    tp: int, num_heads: int, head_dim: int, conv_kernel: int, num_spec: int = 0
) -> tuple[Shape, Shape]:
    """Kimi delta attention: conv ``(k - 1 + spec, 3 * heads * head_dim / tp)``, recurrent
    ``(heads / tp, head_dim, head_dim)`` (q, k and v convolve together; keys are as wide as values)."""
    conv_dim = 3 * num_heads * head_dim
    conv = (conv_kernel - 1 + num_spec, _div(conv_dim, tp, "KDA conv dim"))
    return conv, (_div(num_heads, tp, "KDA heads"), head_dim, head_dim)


# -- reading the fields the state-space families share --------------------------------------------

#: ``layer_types`` / ``layers_block_type`` spellings, old and new (transformers 5 renames
#: ``mamba`` to ``linear_attention`` and ``attention`` to ``full_attention``), by the kind they mean
MAMBA = "mamba"
ATTENTION = "attention"
LEGACY_KINDS: dict[str, str] = {
    "mamba": MAMBA,
    "linear_attention": MAMBA,
    "attention": ATTENTION,
    "full_attention": ATTENTION,
}


def layer_kinds(config: HFConfig, keys: Sequence[str], spellings: Mapping[str, str]) -> list[str] | None:
    """The kind of every layer, from the fields ``keys`` (lists with one entry per layer: the
    same field under its old and new names), each entry translated by ``spellings``; ``None``
    when none is present. Every present one is read, and they must agree.

    A list gives the layer count when ``num_hidden_layers`` is absent (transformers 5 saves
    Nemotron-H so); when both are present they must agree.

    :raises ModelFileError: not a list, an entry ``spellings`` does not know, a length that is not
        ``num_hidden_layers``, more than :data:`~kvrules.hf.config.MAX_HF_LAYERS` entries, or two
        fields that disagree.
    """
    found = [(key, _kinds(config, key, spellings)) for key in keys if config.has(key)]
    for key, kinds in found[1:]:
        if kinds != found[0][1]:
            raise config.error(key, f"disagrees with {config.where(found[0][0])!r}; give one of them")
    return found[0][1] if found else None


def _kinds(config: HFConfig, key: str, spellings: Mapping[str, str]) -> list[str]:
    """The present list field ``key``, translated by ``spellings`` (see :func:`layer_kinds`)."""
    values = config.sequence(key, config.opt_int("num_hidden_layers")) or []
    if not values or len(values) > MAX_HF_LAYERS:
        raise config.error(key, f"has {len(values):,} entries; a model has 1 to {MAX_HF_LAYERS:,} layers")
    out = []
    for index, value in enumerate(values):
        kind = spellings.get(value) if isinstance(value, str) else None
        if kind is None:
            raise config.error(
                key, f"entry {index} is {shown(value)}; known: {', '.join(map(repr, spellings))}"
            )
        out.append(kind)
    return out


def consistent(config: HFConfig, key: str, derived: int, how: str) -> int:
    """``derived`` (what the engine computes as ``how``), after checking that the config's own
    ``key``, when present, says the same.

    :raises ModelFileError: the config's value differs (the engine would ignore one of them).
    """
    if config.has(key) and config.integer(key) != derived:
        raise config.error(
            key,
            f"is {config.integer(key)} but {how} is {derived}; the engine uses {derived}: correct "
            "the config so both agree",
        )
    return derived


def section(config: HFConfig, parent: str) -> Mapping[str, Any]:
    """The nested object ``parent`` (``linear_attn_config``).

    :raises ModelFileError: it is absent or not an object.
    """
    value = config.get(parent)
    if value is None:
        raise config.missing(parent)
    if not isinstance(value, Mapping):
        raise config.error(parent, f"is {shown(value)}; it must be an object")
    return value


def nested_int(config: HFConfig, parent: str, key: str, default: int | None = None) -> int:
    """The positive integer ``parent[key]`` of a nested object (``linear_attn_config.num_heads``).

    :raises ModelFileError: ``parent`` is not an object, or ``key`` is missing (without a default)
        or is not an integer from 1 to :data:`~kvrules.values.MAX_DIMENSION`.
    """
    field = f"{parent}.{key}"
    value = section(config, parent).get(key)
    if value is None:
        if default is None:
            raise config.missing(field)
        return default
    try:
        return as_int(value, field, minimum=1, maximum=MAX_DIMENSION, error=ModelFileError)
    except KVRulesError:
        raise config.error(
            field, f"is {shown(value)}; it must be an integer from 1 to {MAX_DIMENSION:,}"
        ) from None


def _integer(config: HFConfig, key: str, default: int | None) -> int:
    """The integer field ``key``, ``default`` when absent (``None``: required)."""
    return config.integer(key) if default is None else config.integer(key, default)


@dataclass(frozen=True)
class Mamba2Fields:
    """Where one family keeps its Mamba2 mixer's fields, with transformers' class defaults
    (``*_default``; ``None``: the field is required).

    :ivar heads: the SSM head count's key.
    :ivar groups: the B/C group count's key (TP splits it, or replicates a single group).
    :ivar state: the SSM state size's key.
    :ivar conv: the convolution kernel's key.
    :ivar head_dim: the head size's key, for a family whose mixer takes it as it is, unchecked
        (Falcon-H1: :func:`mamba2_mixer_shapes` reads it after the groups); ``None``: the caller
        gives the head size.
    """

    heads: str
    groups: str
    state: str
    conv: str
    heads_default: int | None = None
    groups_default: int = 1
    state_default: int | None = None
    conv_default: int = 4
    head_dim: str | None = None

    def num_heads(self, config: HFConfig) -> int:
        """The SSM head count."""
        return _integer(config, self.heads, self.heads_default)


def mamba2_mixer_shapes(
    config: HFConfig,
    settings: BuildSettings,
    fields: Mamba2Fields,
    intermediate: int,
    head_dim: int | None = None,
) -> tuple[Shape, Shape]:
    """A Mamba2 mixer's per-rank state shapes (vLLM's ``MambaMixer2``: the conv state keeps one
    row per speculative token). ``head_dim`` ``None``: the config's ``fields.head_dim``.

    :raises ModelFileError: a given ``head_dim`` whose ``heads x head_dim`` is not
        ``intermediate``, or TP splits neither the heads nor the groups (groups must be 1 or a
        multiple of TP), naming the field.
    """
    tp = settings.tp
    heads = fields.num_heads(config)
    if head_dim is not None and heads * head_dim != intermediate:
        raise config.error(
            fields.heads,
            f"= {heads} heads of {head_dim} make {heads * head_dim}, but the Mamba intermediate size "
            f"is {intermediate}; they must be equal",
        )
    split(config, fields.heads, heads, tp, what="Mamba2 heads")
    groups = config.integer(fields.groups, fields.groups_default)
    if groups % tp and groups != 1:
        raise config.error(
            fields.groups,
            f"= {groups} cannot be split over tensor_parallel_size {tp}: Mamba2 groups must be 1 or a "
            f"multiple of {tp}; choose a TP size that divides {groups}",
        )
    return mamba2_state_shape(
        tp,
        intermediate,
        groups,
        heads,
        config.integer(str(fields.head_dim)) if head_dim is None else head_dim,
        _integer(config, fields.state, fields.state_default),
        config.integer(fields.conv, fields.conv_default),
        settings.num_speculative_tokens,
    )


#: Nemotron-H block kinds: ``hybrid_override_pattern`` characters, and the ``layers_block_type``
#: entries (old and transformers-5 spellings) that mean each of them
NEMOTRON_H_BLOCKS: dict[str, str] = {
    "mamba": "M",
    "linear_attention": "M",
    "attention": "*",
    "full_attention": "*",
    "mlp": "-",
    "moe": "E",
}


def nemotron_h_pattern(config: HFConfig) -> str:
    """Nemotron-H's blocks as ``hybrid_override_pattern`` characters (``M`` Mamba2, ``*``
    attention, ``-`` MLP, ``E`` MoE), from ``hybrid_override_pattern`` and/or, as transformers 5
    saves the config, ``layers_block_type`` (which then also gives the layer count); when both
    are present they must agree.

    :raises ModelFileError: neither field, an unknown block, two fields that disagree, or a count
        that disagrees with ``num_hidden_layers``.
    """
    kinds = layer_kinds(config, ("layers_block_type", "layer_types"), NEMOTRON_H_BLOCKS)
    listed = "".join(kinds) if kinds is not None else None
    if not config.has("hybrid_override_pattern"):
        if listed is None:
            raise config.missing(
                "hybrid_override_pattern",
                "or layers_block_type: they say which layers are Mamba and attention",
            )
        return listed
    pattern = config.string("hybrid_override_pattern")
    n = config.integer("num_hidden_layers", len(pattern))
    if len(pattern) != n:
        raise config.error(
            "hybrid_override_pattern", f"has {len(pattern)} characters but num_hidden_layers is {n}"
        )
    unknown = sorted(set(pattern) - set(NEMOTRON_H_BLOCKS.values()))
    if unknown:
        raise config.error(
            "hybrid_override_pattern", f"contains {', '.join(map(repr, unknown))}; known: M, *, -, E"
        )
    if listed is not None and listed != pattern:
        raise config.error("hybrid_override_pattern", f"disagrees with {config.where('layers_block_type')!r}")
    return pattern


#: Nemotron-H MTP blocks vLLM builds (``NemotronHMultiTokenPredictor``): attention and MoE
NEMOTRON_H_MTP_BLOCKS = {"attention": "*", "full_attention": "*", "moe": "E"}


def nemotron_h_mtp_pattern(config: HFConfig) -> str:
    """The blocks of Nemotron-H's MTP layer as pattern characters (``*`` attention, ``E`` MoE),
    from ``mtp_hybrid_override_pattern`` or transformers 5's ``mtp_layers_block_type`` (default
    ``["full_attention", "moe"]``, transformers' class default).

    :raises ModelFileError: a block vLLM's MTP predictor does not build (it raises
        ``NotImplementedError`` for anything but ``*`` and ``E``), naming the field.
    """
    key = "mtp_hybrid_override_pattern"
    if config.has(key):
        pattern = config.string(key)
    else:
        key = "mtp_layers_block_type"
        blocks = config.sequence(key) or ["full_attention", "moe"]
        unknown = [b for b in blocks if not isinstance(b, str) or b not in NEMOTRON_H_MTP_BLOCKS]
        if unknown:
            raise config.error(
                key, f"contains {shown(unknown[0])}; vLLM's Nemotron-H MTP builds attention and moe"
            )
        pattern = "".join(NEMOTRON_H_MTP_BLOCKS[b] for b in blocks)
    if not pattern or set(pattern) - {"*", "E"}:
        raise config.error(
            key, f"is {shown(pattern)}; vLLM's Nemotron-H MTP builds '*' (attention) and 'E' (MoE)"
        )
    return pattern
