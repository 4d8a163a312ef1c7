"""Strategy sets: which registered rules are active, chosen by preset name or rule names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvrules.errors import PluginError
from kvrules.plan import PRESET_ALIASES, canonical_set_name
from kvrules.plugin.registry import RuleRegistry
from kvrules.plugin.rules import RULE_KINDS, Rule
from kvrules.values import shown

DEFAULT_SET = "default"

#: vLLM 0.28.0's planner, rule for rule
VLLM_028_RULES: tuple[str, ...] = (
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
)

#: vLLM 0.33.0's planner (``kv_cache_planning.py``): 0.28's rules with every non-MLA attention
#: page padded (``attention-pad``), packing driven by a block-outermost KV-cache layout
#: (``layout-packing``), one backing allocation per worker with 0.33's tensor strides and the
#: null block held back from the memory check (``backing-layer-outer`` / ``backing-block-outer``,
#: chosen by ``EngineConfig.kv_cache_layout``)
VLLM_033_RULES: tuple[str, ...] = (
    "hybrid-disabled",
    "attention-free",
    "uniform-spec",
    "uniform-type",
    "layout-packing",
    "unified-page",
    "full-allocation-fallback",
    "mamba-pad",
    "block-scale",
    "attention-pad",
    "vllm-group-size",
    "backing-layer-outer",
    "backing-block-outer",
    "hybrid-align",
)

#: the presets that ship with kvrules, by name: the rules each activates (rules of several
#: built-in plugins; a preset naming a rule whose plugin is blocked fails when it is chosen)
BUILTIN_PRESETS: dict[str, tuple[str, ...]] = {
    "vllm-0.28": VLLM_028_RULES,
    "vllm-0.33": VLLM_033_RULES,
    "vllm": VLLM_028_RULES,  # alias of vllm-0.28 (PRESET_ALIASES)
}


StrategySpec = str | Sequence[str] | None


@dataclass(frozen=True)
class StrategySet:
    """The active rules of each kind, in the order the core asks them.

    ``name`` records the set as resolved; a leading preset alias becomes the preset it stands
    for (:func:`canonical_set_name`: ``vllm`` is recorded as ``vllm-0.28``), and ``requested``
    keeps the name as given (``""`` when it was already canonical).
    """

    name: str
    active: Mapping[str, tuple[Rule, ...]]
    requested: str = ""

    def __post_init__(self) -> None:
        canonical = canonical_set_name(self.name)
        if canonical != self.name and not self.requested:
            object.__setattr__(self, "requested", self.name)
        object.__setattr__(self, "name", canonical)

    @property
    def alias_note(self) -> str | None:
        """A sentence for users when the set was chosen through a preset alias, else ``None``."""
        if not self.requested:
            return None
        alias = self.requested.partition("+")[0]
        return (
            f"preset {alias!r} is an alias of {PRESET_ALIASES[alias]!r} (deprecated in kvrules 0.2, "
            f"kept through 0.3, removed in 0.4); the set is recorded as {self.name!r}."
        )

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
            "name ('vllm'), a rule name, or a list of rule names (optionally a preset name first; "
            "'-name' removes a rule)"
        )


#: the mark of a removal in a strategy set (``"default,-min-padding"``); no rule name starts with it
REMOVE = "-"


def split_names(strategies: str | Sequence[str]) -> list[str]:
    """The names of a checked strategy spec: each string split at commas, blanks dropped.

    :raises PluginError: no name is left (``" , "``).
    """
    items = [strategies] if isinstance(strategies, str) else strategies
    names = [name.strip() for item in items for name in item.split(",") if name.strip()]
    if not names:
        raise PluginError(f"strategies = {shown(strategies)} names no preset and no rule")
    return names


def _removed(registry: RuleRegistry, name: str) -> Rule:
    """The rule ``-name`` removes.

    :raises PluginError: ``name`` is a preset or no registered rule (listing the names).
    """
    rule_name = name[len(REMOVE) :]
    if is_preset(registry, rule_name):
        raise PluginError(
            f"{name!r} in the strategy list: only rules can be removed, and {rule_name!r} is a preset"
        )
    return _lookup(registry, [rule_name], f"the removal {name!r}")[0]


def _remove(active: dict[str, tuple[Rule, ...]], rule: Rule, label: str) -> None:
    """Drop ``rule`` from ``active``.

    :raises PluginError: ``rule`` is not active (naming the set and its rules of that kind).
    """
    rules = active.get(rule.kind, ())
    if rule not in rules:
        have = ", ".join(r.name for r in rules) or "none"
        raise PluginError(
            f"cannot remove {rule.name!r}: it is not in the strategy set {label!r} "
            f"(its {rule.kind} rules: {have})"
        )
    active[rule.kind] = tuple(r for r in rules if r is not rule)


def _single(registry: RuleRegistry, name: str) -> StrategySet | None:
    """The set one bare name means: a preset (``None`` for a rule or a removal).

    :raises PluginError: ``name`` is neither a preset, a rule nor a removal.
    """
    if is_preset(registry, name):
        return StrategySet(name, _by_kind(preset_rules(registry, name)))
    if name in registry.rules or name.startswith(REMOVE):
        return None
    raise PluginError(f"unknown strategy set {name!r}; available {_available(registry)}")


def resolve_strategies(strategies: StrategySpec, registry: RuleRegistry) -> StrategySet:
    """Resolve ``None`` (default set), a preset name, or rule names (a list, or one string
    separated by commas: ``"default,-min-padding"``).

    The names start from the preset named first, else the default set. A rule name replaces the
    active rules of its kind by the rules named of that kind; ``-name`` removes that rule from
    the set and does not count as naming its kind. ``StrategySet.name`` records the set as
    resolved: the preset, then ``+`` and the other names as given (``default+-min-padding``).

    :raises PluginError: an unknown name or a removed preset (listing the names), a removal of a
        rule not in the set, a rule both named and removed, a preset not first, or
        ``strategies`` of another type.
    """
    if strategies is None:
        return StrategySet(DEFAULT_SET, _by_kind(preset_rules(registry, DEFAULT_SET)))
    _check_spec(strategies)
    names = split_names(strategies)
    if len(names) == 1 and (preset := _single(registry, names[0])) is not None:
        return preset
    base = names.pop(0) if is_preset(registry, names[0]) else DEFAULT_SET
    for name in names:
        if is_preset(registry, name):
            raise PluginError(f"preset {name!r} may only come first in a strategy list")
    label = base if not names else f"{base}+{','.join(names)}"
    added = [n for n in names if not n.startswith(REMOVE)]
    removed = [_removed(registry, n) for n in names if n.startswith(REMOVE)]
    both = sorted({r.name for r in removed} & set(added))
    if both:
        raise PluginError(f"strategy list {label!r} both names and removes {', '.join(both)}")
    active = _by_kind(preset_rules(registry, base))
    for kind, rules in _by_kind(_lookup(registry, added, "the strategy list")).items():
        if rules:
            active[kind] = rules
    named = base if not added else f"{base}+{','.join(added)}"
    for rule in removed:
        _remove(active, rule, named)
    return StrategySet(label, active)


__all__ = [
    "BUILTIN_PRESETS",
    "PRESET_ALIASES",
    "VLLM_028_RULES",
    "VLLM_033_RULES",
    "canonical_set_name",
    "presets_of",
    "DEFAULT_SET",
    "StrategySet",
    "StrategySpec",
    "is_preset",
    "preset_rules",
    "resolve_strategies",
    "split_names",
    "REMOVE",
]
