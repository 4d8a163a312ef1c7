"""Registries that plugins fill through the ``kvrules_register_*`` hooks.

Each registry remembers which plugin provided each object (``providers``), rejects duplicate
names naming both providers, and hands objects out in the core's order ``(-priority, name)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kvrules.errors import PluginError
from kvrules.plugin.rules import NAME_PATTERN, RULE_KINDS, Rule
from kvrules.specs.base import KVCacheSpec


class _Registry:
    """Shared bookkeeping: the plugin currently registering, and who provided what."""

    what = "object"

    def __init__(self) -> None:
        self.provider = "<direct>"
        self.providers: dict[str, str] = {}

    def _claim(self, name: str) -> None:
        if name in self.providers:
            raise PluginError(
                f"{self.what} {name!r} is registered twice: by {self.providers[name]} and by "
                f"{self.provider}; block one of them (get_plugin_manager(blocked=...) or --block)"
            )
        self.providers[name] = self.provider


class SpecTypeRegistry(_Registry):
    """Spec classes by model-file type name."""

    what = "spec type"

    def __init__(self) -> None:
        super().__init__()
        self.classes: dict[str, type[KVCacheSpec]] = {}

    def add(self, cls: type[KVCacheSpec]) -> None:
        """Register ``cls`` under ``cls.type_name``."""
        if not (isinstance(cls, type) and issubclass(cls, KVCacheSpec)):
            raise PluginError(f"{self.provider} registered {cls!r}, which is not a KVCacheSpec subclass")
        name = cls.type_name
        if not name or not isinstance(name, str):
            raise PluginError(f"{self.provider}: spec class {cls.__name__} has no type_name")
        self._claim(name)
        self.classes[name] = cls

    def name_of(self, cls: type[KVCacheSpec]) -> str:
        """The registered type name of ``cls``."""
        return cls.type_name


class RuleRegistry(_Registry):
    """Rules by name, plus named presets (strategy sets)."""

    what = "rule"

    def __init__(self) -> None:
        super().__init__()
        self.rules: dict[str, Rule] = {}
        self.presets: dict[str, tuple[str, ...]] = {}
        self.preset_providers: dict[str, str] = {}

    def add(self, rule: Rule) -> None:
        """Register one rule object."""
        if not isinstance(rule, Rule):
            raise PluginError(
                f"{self.provider} registered {rule!r}, which does not derive from a rule base in kvrules.plugin.rules"
            )
        if rule.kind not in RULE_KINDS:
            raise PluginError(f"{self.provider}: rule {rule.name!r} has unknown kind {rule.kind!r}")
        self._claim(rule.name)
        self.rules[rule.name] = rule

    def add_preset(self, name: str, rule_names: Iterable[str]) -> None:
        """Register a named strategy set (the rules it activates, by name)."""
        if not NAME_PATTERN.match(name) or name == "default":
            raise PluginError(f"{self.provider}: preset name {name!r} is invalid or reserved")
        if name in self.presets:
            raise PluginError(
                f"preset {name!r} is registered twice: by {self.preset_providers[name]} and by {self.provider}"
            )
        self.presets[name] = tuple(rule_names)
        self.preset_providers[name] = self.provider

    def of_kind(self, kind: str) -> list[Rule]:
        """Every registered rule of ``kind`` in the core's order."""
        return sorted((r for r in self.rules.values() if r.kind == kind), key=lambda r: r.sort_key)


@dataclass(frozen=True)
class NamedPlugin:
    """Fields shared by allocators and architectures: a name, a priority, a description."""

    name: str
    priority: int = 0
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_PATTERN.match(self.name):
            raise PluginError(f"name {self.name!r} is invalid: use lower-case words separated by dashes")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise PluginError(f"{self.name!r}: priority {self.priority!r} must be an integer")


class _NamedRegistry(_Registry):
    def __init__(self) -> None:
        super().__init__()
        self.items: dict[str, Any] = {}

    def add(self, obj: Any) -> None:
        """Register ``obj`` (must have a valid ``name`` and integer ``priority``)."""
        name = getattr(obj, "name", None)
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise PluginError(f"{self.provider} registered {obj!r} without a valid name")
        priority = getattr(obj, "priority", None)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise PluginError(f"{self.provider}: {name!r} needs an integer priority")
        self._claim(name)
        self.items[name] = obj

    def ordered(self) -> list[Any]:
        """Registered objects in ``(-priority, name)`` order."""
        return sorted(self.items.values(), key=lambda o: (-o.priority, o.name))


class AllocatorRegistry(_NamedRegistry):
    """Allocators by name, plus the view layouts they build per-layer tensors with.

    ``add(allocator)`` registers an allocator (a :class:`kvrules.allocation.Allocator`);
    ``add_view_layout(layout)`` a view layout (a :class:`kvrules.allocation.ViewLayout`). The two
    kinds have separate name spaces.
    """

    what = "allocator"

    def __init__(self) -> None:
        super().__init__()
        self.view_layouts: dict[str, Any] = {}
        self.view_layout_providers: dict[str, str] = {}

    def add_view_layout(self, layout: Any) -> None:
        """Register a view layout (must have a valid ``name`` and an integer ``priority``)."""
        name = getattr(layout, "name", None)
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise PluginError(f"{self.provider} registered view layout {layout!r} without a valid name")
        priority = getattr(layout, "priority", None)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise PluginError(f"{self.provider}: view layout {name!r} needs an integer priority")
        if name in self.view_layout_providers:
            raise PluginError(
                f"view layout {name!r} is registered twice: by {self.view_layout_providers[name]} and "
                f"by {self.provider}; block one of them (get_plugin_manager(blocked=...) or --block)"
            )
        self.view_layout_providers[name] = self.provider
        self.view_layouts[name] = layout

    def ordered_view_layouts(self) -> list[Any]:
        """Registered view layouts in ``(-priority, name)`` order."""
        return sorted(self.view_layouts.values(), key=lambda o: (-o.priority, o.name))


class ArchitectureRegistry(_NamedRegistry):
    """Model architectures by name."""

    what = "architecture"


@dataclass
class Registries:
    """Everything the plugins registered, filled once per plugin manager."""

    spec_types: SpecTypeRegistry = field(default_factory=SpecTypeRegistry)
    rules: RuleRegistry = field(default_factory=RuleRegistry)
    allocators: AllocatorRegistry = field(default_factory=AllocatorRegistry)
    architectures: ArchitectureRegistry = field(default_factory=ArchitectureRegistry)

    def provider_of(self, name: str) -> str:
        """Who registered the rule, allocator or architecture ``name``."""
        for reg in (self.rules, self.allocators, self.architectures, self.spec_types):
            if name in reg.providers:
                return reg.providers[name]
        return "<unknown>"

    def spec_classes(self) -> Mapping[str, type[KVCacheSpec]]:
        """Type name -> spec class."""
        return self.spec_types.classes


__all__ = [
    "AllocatorRegistry",
    "ArchitectureRegistry",
    "NamedPlugin",
    "Registries",
    "RuleRegistry",
    "SpecTypeRegistry",
]
