"""The architecture dispatcher: which registered architecture builds a config (stage ``arch``).

Architectures are asked in ``(-priority, name)`` order; the first whose ``recognises`` applies
builds the specs. Every answer is recorded as a decision; the builder's result is checked
before it is trusted (a faulty plugin is reported by name as a :class:`~kvrules.PluginError`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from kvrules.decisions import DecisionLog
from kvrules.errors import KVRulesError, ModelFileError, PluginError
from kvrules.hf.architecture import Architecture
from kvrules.hf.config import HFConfig
from kvrules.plugin.registry import ArchitectureRegistry
from kvrules.plugin.rules import Check
from kvrules.specs import KVCacheSpec

STAGE = "arch"


def call_architecture(
    registry: ArchitectureRegistry, arch: Architecture, what: str, fn: Callable[..., Any], *args: Any
) -> Any:
    try:
        return fn(*args)
    except KVRulesError:
        raise
    except Exception as exc:
        provider = registry.providers.get(arch.name, "<direct>")
        raise PluginError(
            f"architecture {arch.name!r} ({provider}) raised {type(exc).__name__} in {what}: {exc}"
        ) from exc


def supported(registry: ArchitectureRegistry) -> str:
    """``name (model types), ...`` for error messages."""
    parts = []
    for arch in registry.ordered():
        types = ", ".join(getattr(arch, "model_types", ()) or ())
        parts.append(f"{arch.name} ({types})" if types else arch.name)
    return "; ".join(parts) or "none (no architecture plugin is loaded)"


def select_architecture(
    config: HFConfig, registry: ArchitectureRegistry, decisions: DecisionLog, *, role: str = "target"
) -> tuple[Architecture, Check]:
    """The first architecture that recognises ``config``, and its answer.

    Declined answers are recorded at once; the caller records the applied one after building.

    :raises ModelFileError: no architecture recognises the config (lists the supported ones and
        how to add one).
    """
    for arch in registry.ordered():
        if not isinstance(arch, Architecture):
            provider = registry.providers.get(getattr(arch, "name", "?"), "<direct>")
            raise PluginError(
                f"{provider} registered {arch!r} as an architecture; it must derive from "
                "kvrules.hf.Architecture"
            )
        check = call_architecture(registry, arch, "recognises", arch.recognises, config)
        if not isinstance(check, Check):
            raise PluginError(f"architecture {arch.name!r} returned {check!r} from recognises(), not a Check")
        if check.applies:
            return arch, check
        decisions.record(STAGE, arch.name, "declined", f"{role} {config.title}: {check.reason}")
    classes = ", ".join(config.architectures) or "none"
    raise ModelFileError(
        f"{config.source}: no registered architecture recognises this {role} model (model_type "
        f"{config.text_model_type or '(missing)'!r}, architectures {classes}). Supported: "
        f"{supported(registry)}. To add one, ship a plugin whose kvrules_register_architectures(registry) "
        "registers a kvrules.hf.Architecture subclass (see docs/hf.md)."
    )


def check_built(arch: Architecture, registry: ArchitectureRegistry, specs: Any) -> dict[str, KVCacheSpec]:
    """``specs`` if it is a mapping of layer name to spec; otherwise a :class:`PluginError`."""
    provider = registry.providers.get(arch.name, "<direct>")
    if not isinstance(specs, dict):
        raise PluginError(f"architecture {arch.name!r} ({provider}) built {type(specs).__name__}, not a dict")
    for name, spec in specs.items():
        if not isinstance(name, str) or not isinstance(spec, KVCacheSpec):
            raise PluginError(
                f"architecture {arch.name!r} ({provider}) built {name!r}: {spec!r}; expected layer name -> spec"
            )
    return specs


def layer_summary(specs: dict[str, KVCacheSpec]) -> str:
    """``12 full_attention, 36 mamba``."""
    counts = Counter(s.type_name for s in specs.values())
    return ", ".join(f"{n} {t}" for t, n in counts.items()) or "no KV-cache layers"


def record_built(
    config: HFConfig,
    arch: Architecture,
    check: Check,
    specs: dict[str, KVCacheSpec],
    decisions: DecisionLog,
    *,
    role: str,
    notes: str = "",
) -> None:
    """Record the applied ``arch`` decision once the architecture has built ``specs``."""
    decisions.record(
        STAGE,
        arch.name,
        "applied",
        f"{role} {config.title}: {check.reason} Built {len(specs)} KV-cache layers "
        f"({layer_summary(specs)}){'; ' + notes if notes else ''}.",
    )
