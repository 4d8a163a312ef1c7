"""The architecture dispatcher: which registered architecture builds a config (stage ``arch``).

Architectures are asked through :class:`kvrules.plugin.ask.Asker` in ``(-priority, name)``
order; the first whose ``recognises`` applies builds the specs. Every answer is recorded as a
decision; the built specs are checked before they are trusted (a faulty plugin is reported by
name as a :class:`~kvrules.PluginError`).
"""

from __future__ import annotations

from collections import Counter

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
    for arch in registry.ordered():
        check = ask.check("architecture", arch, "recognises", config)
        if check.applies:
            return arch, check
        ask.record(STAGE, arch.name, "declined", f"{role} {config.title}: {check.reason}")
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
) -> None:
    """Record the applied ``arch`` decision once the architecture has built ``specs``."""
    ask.record(
        STAGE,
        arch.name,
        "applied",
        f"{role} {config.title}: {check.reason} Built {len(specs)} KV-cache layers "
        f"({layer_summary(specs)}){'; ' + notes if notes else ''}.",
    )
