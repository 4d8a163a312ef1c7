"""The architecture dispatcher: which registered architecture builds a config (stage ``arch``).

Architectures are asked through :class:`kvrules.plugin.ask.Asker` in ``(-priority, name)``
order; the first whose ``recognises`` applies builds the specs. Every answer is recorded as a
decision; the built specs are checked before they are trusted (a faulty plugin is reported by
name as a :class:`~kvrules.PluginError`).

No silent drop: the chosen architecture builds from a :func:`tracked` copy of the config, and
:func:`check_no_silent_drop` fails the build when the file sets a field of :data:`CACHE_KEYS`
(or, for ``--draft mtp``, :data:`MTP_KEYS`) that the architecture never asked for.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from kvrules.errors import ModelFileError
from kvrules.hf.architecture import Architecture
from kvrules.hf.config import HFConfig
from kvrules.plugin.ask import Asker
from kvrules.plugin.registry import ArchitectureRegistry
from kvrules.plugin.rules import Check
from kvrules.specs import KVCacheSpec

STAGE = "arch"


def supported(registry: ArchitectureRegistry) -> str:
    """``name (model types), ...`` for error messages."""
    parts = []
    for arch in registry.ordered():
        types = ", ".join(getattr(arch, "model_types", ()) or ())
        parts.append(f"{arch.name} ({types})" if types else arch.name)
    return "; ".join(parts) or "none (no architecture plugin is loaded)"


def select_architecture(config: HFConfig, ask: Asker, *, role: str = "target") -> tuple[Architecture, Check]:
    """The first registered architecture that recognises ``config``, and its answer.

    Declined answers are recorded at once; the caller records the applied one after building.

    :raises ModelFileError: no architecture recognises the config (lists the supported ones and
        how to add one).
    """
    registry = ask.registries.architectures
    asked = ask.first(
        registry.ordered(),
        STAGE,
        (config,),
        kind="architecture",
        method="recognises",
        note=f"{role} {config.title}: ".__add__,
    )
    if asked.found is not None:
        return asked.found, asked.check
    classes = ", ".join(config.architectures) or "none"
    raise ModelFileError(
        f"{config.source}: no registered architecture recognises this {role} model (model_type "
        f"{config.text_model_type or '(missing)'!r}, architectures {classes}). Supported: "
        f"{supported(registry)}. To add one, ship a plugin whose kvrules_register_architectures(registry) "
        "registers a kvrules.plugin.Architecture subclass (see docs/hf.md)."
    )


def layer_summary(specs: dict[str, KVCacheSpec]) -> str:
    """``12 full_attention, 36 mamba``."""
    counts = Counter(s.type_name for s in specs.values())
    return ", ".join(f"{n} {t}" for t, n in counts.items()) or "no KV-cache layers"


def record_built(
    config: HFConfig,
    arch: Architecture,
    check: Check,
    specs: dict[str, KVCacheSpec],
    ask: Asker,
    *,
    role: str,
    notes: str = "",
    details: dict[str, Any] | None = None,
) -> None:
    """Record the applied ``arch`` decision once the architecture has built ``specs``; its reason
    ends with how the config was read (:meth:`HFConfig.reading_note`: the reader, and every value
    the architecture used that did not come from the file)."""
    said = "; ".join(part for part in (notes, config.reading_note()) if part)
    ask.record(
        STAGE,
        arch.name,
        "applied",
        f"{role} {config.title}: {check.reason} Built {len(specs)} KV-cache layers "
        f"({layer_summary(specs)}){'; ' + said if said else ''}.",
        details=details,
    )


# -- no silent drop -------------------------------------------------------------------------------

#: config fields that change the KV cache (a window, a chunk, a latent width, a state shape,
#: which layers keep which cache); a field present in the file (not null, false, 0 or empty) that
#: the architecture never read makes the build fail naming it (:func:`check_no_silent_drop`)
CACHE_KEYS: dict[str, str] = {
    "sliding_window": "a sliding-window size",
    "sliding_window_pattern": "which layers slide",
    "layer_types": "each layer's attention kind",
    "attention_chunk_size": "a chunked-attention size",
    "attn_type_list": "each layer's attention kind",
    "kv_lora_rank": "an MLA latent width",
    "qk_rope_head_dim": "the RoPE part of an MLA latent",
    "index_head_dim": "a sparse-attention indexer's key width",
    "index_n_heads": "a sparse-attention indexer",
    "index_topk": "a sparse-attention indexer",
    "use_cla": "cross-layer KV sharing",
    "num_kv_shared_layers": "cross-layer KV sharing",
    "hybrid_override_pattern": "which layers are Mamba",
    "layers_block_type": "which layers are Mamba",
    "attn_layer_period": "which layers are attention",
    "attn_layer_offset": "which layers are attention",
    "full_attention_interval": "which layers are full attention",
    "ssm_state_size": "a state shape",
    "state_size": "a state shape",
    "mamba_d_state": "a state shape",
    "mamba_d_conv": "a state shape",
    "conv_kernel": "a state shape",
    "conv_L_cache": "a state shape",
    "linear_conv_kernel_dim": "a state shape",
    "mamba_expand": "a state shape",
    "expand": "a state shape",
    "mamba_d_ssm": "a state shape",
    "mamba_n_heads": "a state shape",
    "mamba_num_heads": "a state shape",
    "mamba_head_dim": "a state shape",
    "mamba_d_head": "a state shape",
    "n_groups": "a state shape",
    "mamba_n_groups": "a state shape",
    "linear_num_key_heads": "a state shape",
    "linear_num_value_heads": "a state shape",
    "linear_key_head_dim": "a state shape",
    "linear_value_head_dim": "a state shape",
}

#: fields that count multi-token-prediction layers: cache-changing only with ``draft="mtp"``
MTP_KEYS: dict[str, str] = {
    "num_nextn_predict_layers": "an MTP layer count",
    "mtp_num_hidden_layers": "an MTP layer count",
    "num_mtp_modules": "an MTP layer count",
}


def tracked(config: HFConfig) -> HFConfig:
    """A shallow copy of ``config`` that records in ``reads`` (a set, empty at first) every field
    an architecture asks it for (:data:`kvrules.hf.config.ACCESSORS`). ``config`` itself is not
    changed; the copy is of the same class (so it pickles as one), reads the same data, and
    shares :attr:`HFConfig.used`, the reader's own record."""
    copy_ = copy.copy(config)
    copy_.reads = set()
    return copy_


def reads(config: HFConfig) -> set[str]:
    """The fields a :func:`tracked` config has been asked for (empty for an untracked one)."""
    value = getattr(config, "reads", None)
    return value if isinstance(value, set) else set()


def _active(value: Any) -> bool:
    """A field that is set: not null, false, zero or empty."""
    return value is not None and value is not False and value != 0 and value != [] and value != ""


#: per-layer fields a config class derives from others: an architecture that read one of them
#: (with a value) used the fields it is derived from (transformers' ``layer_types`` from
#: ``sliding_window_pattern``, ``use_sliding_window`` + ``max_window_layers``, ...)
DERIVED_FROM: dict[str, tuple[str, ...]] = {
    "layer_types": (
        "sliding_window_pattern",
        "use_sliding_window",
        "max_window_layers",
        "full_attention_interval",
        "attn_layer_period",
        "attn_layer_offset",
        "hybrid_override_pattern",
        "layers_block_type",
        "attn_type_list",
    ),
    "layers_block_type": ("hybrid_override_pattern", "attn_layer_period", "attn_layer_offset"),
}


def used_keys(config: HFConfig) -> set[str]:
    """The fields a :func:`tracked` config was asked for, with those a per-layer field it was
    asked for is derived from (:data:`DERIVED_FROM`)."""
    seen = set(reads(config))
    derived = [k for k in DERIVED_FROM if k in seen]
    values = {k: config.get(k) for k in derived}
    reads(config).intersection_update(seen)  # looking is not a read
    for key in derived:
        if values[key] is not None:
            seen.update(DERIVED_FROM[key])
    return seen


def unread_cache_keys(config: HFConfig, *, mtp: bool) -> list[tuple[str, str]]:
    """``(field, what it changes)`` for every :data:`CACHE_KEYS` field (and :data:`MTP_KEYS` with
    ``mtp``) that the file sets (not null, false, 0 or empty; a class default does not count)
    and a :func:`tracked` config was never asked for (:func:`used_keys`), unless the config class
    cleared it (transformers' Qwen2 drops ``sliding_window`` without ``use_sliding_window``:
    the engine does not see it either)."""
    table = {**CACHE_KEYS, **MTP_KEYS} if mtp else CACHE_KEYS
    seen = used_keys(config)
    unread = [k for k in table if k not in seen and _active(config.raw(k))]
    resolved = {k: config.get(k) for k in unread}  # a value the config class cleared is no field
    reads(config).intersection_update(seen)
    return [(k, table[k]) for k in unread if _active(resolved[k])]


def check_no_silent_drop(config: HFConfig, arch: Architecture, *, role: str, mtp: bool = False) -> None:
    """Fail when ``config`` sets a field that changes the cache and ``arch`` never read it.

    :raises ModelFileError: naming the file, the field(s), and what each changes.
    """
    unread = unread_cache_keys(config, mtp=mtp)
    if not unread:
        return
    spelled = {config.where(k): what for k, what in reversed(unread)}  # one entry per field in the file
    fields = ", ".join(f"{where!r} ({what})" for where, what in reversed(spelled.items()))
    raise ModelFileError(
        f"{config.source}: {role} field(s) {fields} change the KV cache, but architecture "
        f"{arch.name!r} does not use them; kvrules plans no cache with a field silently dropped. "
        "Do not remove the field (the plan would then not be the cache the engine builds): use "
        "(or write) an architecture that reads it (docs/hf.md, 'No silent drop')"
    )
