"""Strategy sets: which registered rules are active, chosen by preset name or rule names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvrules.errors import PluginError
from kvrules.plugin.registry import RuleRegistry
from kvrules.plugin.rules import RULE_KINDS, Rule
from kvrules.values import shown

DEFAULT_SET = "default"

#: the presets that ship with kvrules, by name: the rules each activates (rules of several
#: built-in plugins; a preset naming a rule whose plugin is blocked fails when it is chosen)
BUILTIN_PRESETS: dict[str, tuple[str, ...]] = {
    # vLLM 0.28.0's planner, rule for rule
    "vllm": (
        "hybrid-disabled",
        "attention-free",
        "uniform-spec",
        "uniform-type",
        "deepseekv4-packing",
        "unified-page",
        "full-allocation-fallback",
        "mamba-pad",
        "block-scale",
        "stride-pad",
        "vllm-group-size",
        "shared-pool",
        "per-layer",
        "packed",
        "hybrid-align",
    ),
}

StrategySpec = str | Sequence[str] | None


@dataclass(frozen=True)
class StrategySet:
    """The active rules of each kind, in the order the core asks them."""

    name: str
    active: Mapping[str, tuple[Rule, ...]]

    def rules(self, kind: str) -> tuple[Rule, ...]:
        """Active rules of ``kind`` in ``(-priority, name)`` order."""
        return self.active.get(kind, ())

    def names(self) -> list[str]:
        """Names of every active rule, kind by kind."""
        return [r.name for kind in RULE_KINDS for r in self.rules(kind)]


def presets_of(registry: RuleRegistry) -> dict[str, tuple[str, ...]]:
    """Every preset by name: the built-in ones, then those plugins registered."""
    return {**BUILTIN_PRESETS, **registry.presets}


def _available(registry: RuleRegistry) -> str:
    presets = sorted({DEFAULT_SET, *presets_of(registry)})
    return f"presets: {', '.join(presets)}; rules: {', '.join(sorted(registry.rules))}"


def _by_kind(rules: list[Rule]) -> dict[str, tuple[Rule, ...]]:
    return {
        kind: tuple(sorted((r for r in rules if r.kind == kind), key=lambda r: r.sort_key))
        for kind in RULE_KINDS
    }


def _lookup(registry: RuleRegistry, names: Sequence[str], where: str) -> list[Rule]:
    rules = []
    for name in names:
        rule = registry.rules.get(name)
        if rule is None:
            raise PluginError(f"unknown rule {name!r} in {where}; available {_available(registry)}")
        rules.append(rule)
    return rules


def preset_rules(registry: RuleRegistry, preset: str) -> list[Rule]:
    """The rules a preset activates (``default``: every rule whose ``default`` flag is set)."""
    if preset == DEFAULT_SET:
        return [r for r in registry.rules.values() if r.default]
    presets = presets_of(registry)
    if preset not in presets:
        raise PluginError(f"unknown strategy set {preset!r}; available {_available(registry)}")
    return _lookup(registry, presets[preset], f"preset {preset!r}")


def is_preset(registry: RuleRegistry, name: str) -> bool:
    """True when ``name`` names a preset rather than a rule."""
    return name == DEFAULT_SET or name in presets_of(registry)


def _check_spec(strategies: object) -> None:
    """``strategies`` is a non-empty name, or a list or tuple of them.

    :raises PluginError: anything else, saying what is accepted.
    """
    names = [strategies] if isinstance(strategies, str) else strategies
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and n for n in names):
        raise PluginError(
            f"strategies = {shown(strategies)} is not allowed: give None (the default set), a preset "
            "name ('vllm'), a rule name, or a list of rule names (optionally a preset name first)"
        )


def resolve_strategies(strategies: StrategySpec, registry: RuleRegistry) -> StrategySet:
    """Resolve ``None`` (default set), a preset name, or a list of rule names.

    A list replaces the active rules only of the kinds it names; when its first element is a
    preset name, it starts from that preset instead of the default set.

    :raises PluginError: an unknown name, a preset not first, or ``strategies`` of another type.
    """
    if strategies is None:
        return StrategySet(DEFAULT_SET, _by_kind(preset_rules(registry, DEFAULT_SET)))
    _check_spec(strategies)
    if isinstance(strategies, str):
        if not is_preset(registry, strategies):
            if strategies in registry.rules:
                return resolve_strategies([strategies], registry)
            raise PluginError(f"unknown strategy set {strategies!r}; available {_available(registry)}")
        return StrategySet(strategies, _by_kind(preset_rules(registry, strategies)))
    names = list(strategies)
    base = DEFAULT_SET
    if names and is_preset(registry, names[0]):
        base = names.pop(0)
    for name in names:
        if is_preset(registry, name):
            raise PluginError(f"preset {name!r} may only come first in a strategy list")
    active = _by_kind(preset_rules(registry, base))
    chosen = _lookup(registry, names, "the strategy list")
    for kind, rules in _by_kind(chosen).items():
        if rules:
            active[kind] = rules
    label = base if not names else f"{base}+{','.join(names)}"
    return StrategySet(label, active)


__all__ = [
    "BUILTIN_PRESETS",
    "presets_of",
    "DEFAULT_SET",
    "StrategySet",
    "StrategySpec",
    "is_preset",
    "preset_rules",
    "resolve_strategies",
]
