"""Registries that plugins fill through the ``kvrules_register_*`` hooks.

One generic :class:`Registry` does the bookkeeping for every kind: it validates what it is given
once (its base class, a valid ``name``, an integer ``priority``), attributes every object to the
plugin that registered it (``providers``; the module it was defined in, for blame), rejects a
duplicate name naming both providers, and hands objects out in the core's order
``(-priority, name)``. The per-kind registries below only add what their kind needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kvrules.errors import PluginError
from kvrules.plugin.allocator import Allocator, ViewLayout
from kvrules.plugin.architecture import Architecture
from kvrules.plugin.rules import (
    NAME_PATTERN,
    RULE_KINDS,
    NamedPlugin,
    Rule,
    name_problem,
    priority_problem,
)
from kvrules.specs.base import KVCacheSpec

T = TypeVar("T")

#: preset names plugins may not register (kvrules' own)
RESERVED_PRESETS = ("default", "vllm")

#: how an object added outside any plugin's hook (directly, in-process) is attributed
IN_PROCESS = "registered in-process"


def _module_of(obj: Any) -> str:
    return str(obj.__module__ if isinstance(obj, type) else type(obj).__module__)


class Registry(Generic[T]):
    """Named objects of one kind (see the module docstring).

    :param what: the kind's name in messages (``"rule"``, ``"allocator"``, ...).
    :param base: the class every object must derive from (a class object for spec types).
    :param key: the object's name (``obj.name`` by default).
    """

    def __init__(self, what: str, base: type, key: Callable[[Any], object] | None = None) -> None:
        self.what = what
        self.base = base
        self._key = key or (lambda obj: getattr(obj, "name", None))
        #: the plugin whose hook is running (set by the manager while it collects)
        self.provider = IN_PROCESS
        self.providers: dict[str, str] = {}
        self.items: dict[str, T] = {}
        #: module name -> provider of the objects defined there (to blame a plugin's code)
        self.modules: dict[str, str] = {}

    @property
    def article(self) -> str:
        """``a`` or ``an``, for :attr:`what` in messages."""
        return "an" if self.what[0] in "aeiou" else "a"

    def _problem(self, obj: Any) -> str | None:
        if not isinstance(obj, self.base):
            name = getattr(obj, "name", None)
            shown = f"{name!r} ({type(obj).__name__})" if isinstance(name, str) else repr(obj)
            return f"registered {shown} as {self.article} {self.what}, but it does not derive from kvrules.plugin.{self.base.__name__}"
        problem = name_problem(self._key(obj)) or priority_problem(getattr(obj, "priority", None))
        return f"registered {self.what} {obj!r}: {problem}" if problem else None

    def add(self, obj: T) -> None:
        """Register ``obj`` under its name.

        :raises PluginError: naming the provider, when ``obj`` is of the wrong type, has an
            invalid name or priority, or its name is taken (naming both providers).
        """
        problem = self._problem(obj)
        name = self._key(obj)
        if problem is None and (not isinstance(name, str) or not name):
            problem = f"registered {obj!r} without a name"
        if problem is not None:
            raise PluginError(f"{self.provider} {problem}")
        key = str(name)
        if key in self.providers:
            raise PluginError(
                f"{self.what} {key!r} is registered twice: by {self.providers[key]} and by "
                f"{self.provider}; block one of them (get_plugin_manager(blocked=...) or --block)"
            )
        self.providers[key] = self.provider
        self.items[key] = obj
        self.modules.setdefault(_module_of(obj), self.provider)

    def recheck(self) -> None:
        """Validate again every object the running plugin (:attr:`provider`) registered: one it
        changed after ``add`` (an ``object.__setattr__`` on its frozen name or priority) is
        refused like an invalid one, before anything sorts or looks it up.

        :raises PluginError: naming the provider and the object.
        """
        for key, obj in self.items.items():
            if self.providers[key] != self.provider:
                continue
            problem = self._problem(obj)
            if problem is None and self._key(obj) != key:
                problem = f"renamed it to {self._key(obj)!r}"
            if problem is not None:
                raise PluginError(
                    f"{self.provider} changed {self.what} {key!r} after registering it: {problem}"
                )

    def get(self, name: str) -> T | None:
        """The object registered as ``name``, or ``None``."""
        return self.items.get(name)

    def ordered(self) -> list[T]:
        """Registered objects in ``(-priority, name)`` order."""
        return sorted(self.items.values(), key=lambda o: (-getattr(o, "priority", 0), str(self._key(o))))

    def __contains__(self, name: object) -> bool:
        return name in self.items

    def __len__(self) -> int:
        return len(self.items)


class SpecTypeRegistry(Registry[type[KVCacheSpec]]):
    """Spec classes by model-file type name (``cls.type_name``)."""

    def __init__(self) -> None:
        super().__init__("spec type", type, key=lambda cls: getattr(cls, "type_name", None))

    def _problem(self, obj: Any) -> str | None:
        if not (isinstance(obj, type) and issubclass(obj, KVCacheSpec)):
            return f"registered {obj!r}, which is not a KVCacheSpec subclass"
        if not obj.type_name or not isinstance(obj.type_name, str):
            return f"registered spec class {obj.__name__}, which has no type_name"
        return None

    @property
    def classes(self) -> Mapping[str, type[KVCacheSpec]]:
        """Type name -> spec class."""
        return self.items


class RuleRegistry(Registry[Rule]):
    """Rules by name, plus named presets (strategy sets)."""

    def __init__(self) -> None:
        super().__init__("rule", Rule)
        self.presets: dict[str, tuple[str, ...]] = {}
        self.preset_providers: dict[str, str] = {}

    @property
    def rules(self) -> Mapping[str, Rule]:
        """Rule name -> rule."""
        return self.items

    def _problem(self, obj: Any) -> str | None:
        problem = super()._problem(obj)
        if problem is None and obj.kind not in RULE_KINDS:
            problem = (
                f"registered rule {obj.name!r} of unknown kind {obj.kind!r}; kinds: {', '.join(RULE_KINDS)}"
            )
        return problem

    def add_preset(self, name: str, rule_names: Iterable[str]) -> None:
        """Register a named strategy set (the rules it activates, by name)."""
        if not isinstance(name, str) or not NAME_PATTERN.match(name) or name in RESERVED_PRESETS:
            raise PluginError(
                f"{self.provider}: preset name {name!r} is invalid or reserved ({', '.join(RESERVED_PRESETS)})"
            )
        if name in self.presets:
            raise PluginError(
                f"preset {name!r} is registered twice: by {self.preset_providers[name]} and by {self.provider}"
            )
        self.presets[name] = tuple(rule_names)
        self.preset_providers[name] = self.provider

    def of_kind(self, kind: str) -> list[Rule]:
        """Every registered rule of ``kind`` in the core's order."""
        return [r for r in self.ordered() if r.kind == kind]


class AllocatorRegistry(Registry[Allocator]):
    """Allocators by name (``add``), plus the view layouts they build per-layer tensors with
    (``add_view_layout``); the two kinds have separate name spaces."""

    def __init__(self) -> None:
        super().__init__("allocator", Allocator)
        self.layouts: Registry[ViewLayout] = Registry("view layout", ViewLayout)

    def add_view_layout(self, layout: ViewLayout) -> None:
        """Register a view layout (a :class:`kvrules.plugin.ViewLayout`)."""
        self.layouts.provider = self.provider
        self.layouts.add(layout)

    def recheck(self) -> None:
        """:meth:`Registry.recheck` for the allocators and the view layouts."""
        super().recheck()
        self.layouts.provider = self.provider
        self.layouts.recheck()

    @property
    def view_layouts(self) -> Mapping[str, ViewLayout]:
        """View-layout name -> view layout."""
        return self.layouts.items

    @property
    def view_layout_providers(self) -> Mapping[str, str]:
        """View-layout name -> the plugin that registered it."""
        return self.layouts.providers

    def ordered_view_layouts(self) -> list[ViewLayout]:
        """Registered view layouts in ``(-priority, name)`` order."""
        return self.layouts.ordered()


class ArchitectureRegistry(Registry[Architecture]):
    """Model architectures by name."""

    def __init__(self) -> None:
        super().__init__("architecture", Architecture)


@dataclass
class Registries:
    """Everything the plugins registered, filled once per plugin manager."""

    spec_types: SpecTypeRegistry = field(default_factory=SpecTypeRegistry)
    rules: RuleRegistry = field(default_factory=RuleRegistry)
    allocators: AllocatorRegistry = field(default_factory=AllocatorRegistry)
    architectures: ArchitectureRegistry = field(default_factory=ArchitectureRegistry)
    #: the provider strings of kvrules' own built-in plugins
    builtin: set[str] = field(default_factory=set)

    def all(self) -> tuple[Registry[Any], ...]:
        """Every registry, view layouts included."""
        return (self.rules, self.spec_types, self.allocators, self.allocators.layouts, self.architectures)

    def provider_of(self, name: str) -> str:
        """Who registered the rule, allocator, architecture, view layout or spec type ``name``."""
        for reg in self.all():
            if name in reg.providers:
                return reg.providers[name]
        return IN_PROCESS

    def provider_of_module(self, module: str) -> str | None:
        """Who registered objects defined in ``module`` (``None``: no registered object is)."""
        for reg in self.all():
            if module in reg.modules:
                return reg.modules[module]
        return None

    def spec_classes(self) -> Mapping[str, type[KVCacheSpec]]:
        """Type name -> spec class."""
        return self.spec_types.classes


__all__ = [
    "IN_PROCESS",
    "AllocatorRegistry",
    "ArchitectureRegistry",
    "NamedPlugin",
    "Registries",
    "Registry",
    "RuleRegistry",
    "SpecTypeRegistry",
]
