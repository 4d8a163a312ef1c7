"""What a kvrules plugin author writes against, from one module.

A plugin is a module (or object) with ``@hookimpl`` functions named ``kvrules_register_*`` that
add typed objects to the registry they are given: rules of the kinds in :data:`RULE_KINDS`,
spec types, allocators and view layouts, architectures. Specs, errors, :class:`~kvrules.EngineConfig`
and the plan types come from :mod:`kvrules` itself; the grouping cost model is
:mod:`kvrules.grouping`.

Names this module exported in 0.2 that are not for plugin authors moved (see ``_MOVED``): they
still resolve here in 0.3 with a :class:`DeprecationWarning` naming their new module, and go in
0.4. ``__all__`` and ``dir()`` list only the author API.
"""

import warnings
from types import ModuleType

from kvrules import dtypes as _dtypes
from kvrules import grouping as _grouping
from kvrules import specs as _specs
from kvrules.plan import BackingTensor
from kvrules.plugin import allocator as _allocator
from kvrules.plugin import manager as _manager
from kvrules.plugin import presets as _presets
from kvrules.plugin import registry as _registry
from kvrules.plugin import rules as _rules
from kvrules.plugin.allocator import AllocationRequest, Allocator, Placement, ViewLayout
from kvrules.plugin.architecture import Architecture
from kvrules.plugin.context import AlignContext, PlanContext
from kvrules.plugin.hookspecs import hookimpl
from kvrules.plugin.registry import AllocatorRegistry, ArchitectureRegistry, RuleRegistry, SpecTypeRegistry
from kvrules.plugin.rules import (
    RULE_KINDS,
    Aligner,
    Check,
    Converter,
    Fallback,
    Grouper,
    LayerStrategy,
    Layout,
    NamedPlugin,
    Partitioner,
    Router,
    Rule,
    applies,
    declines,
)
from kvrules.specs.asked import blocks_of, evolved, memory_of
from kvrules.specs.base import cdiv, distinct_specs, merged_spec

__all__ = [
    # the hook marker and the registries the hooks are handed
    "hookimpl",
    "AllocatorRegistry",
    "ArchitectureRegistry",
    "RuleRegistry",
    "SpecTypeRegistry",
    # rules: the bases, their answers, what they are handed
    "RULE_KINDS",
    "Aligner",
    "Converter",
    "Fallback",
    "Grouper",
    "LayerStrategy",
    "Layout",
    "Partitioner",
    "Router",
    "Rule",
    "Check",
    "applies",
    "declines",
    "AlignContext",
    "PlanContext",
    # allocators, view layouts and architectures
    "NamedPlugin",
    "AllocationRequest",
    "Allocator",
    "BackingTensor",
    "Placement",
    "ViewLayout",
    "Architecture",
    # what a rule computes with: a spec's checked answers, merging, ceiling division
    "blocks_of",
    "evolved",
    "memory_of",
    "distinct_specs",
    "merged_spec",
    "cdiv",
]


def _moved(home: str, module: ModuleType, *names: str) -> dict[str, tuple[str, ModuleType]]:
    return dict.fromkeys(names, (home, module))


#: 0.2 names that left the author API: name -> (the module to import it from now, where it lives)
_MOVED: dict[str, tuple[str, ModuleType]] = {
    # every public name of the grouping cost model but Bucket, which 0.3 added
    **_moved("kvrules.grouping", _grouping, *(n for n in _grouping.__all__ if n != "Bucket")),
    **_moved(
        "kvrules",
        _manager,
        "BUILTIN_PLUGINS",
        "KVRulesPluginManager",
        "default_manager",
        "enable_trace",
        "get_plugin_manager",
        "reset_default_manager",
        "set_default_manager",
    ),
    **_moved("kvrules", _presets, "DEFAULT_SET", "StrategySet", "StrategySpec", "resolve_strategies"),
    **_moved("kvrules", _registry, "Registries"),
    **_moved("kvrules.allocation", _allocator, "LayoutChoice"),
    **_moved("kvrules.dtypes", _dtypes, "dtype_name", "dtype_size", "to_torch"),
    **_moved("kvrules.specs", _specs, "BUILTIN_SPEC_TYPES", "quantized_head_dim", "round_up"),
    **_moved("kvrules.plugin.rules", _rules, "NAME_PATTERN"),
}
del _moved


def __getattr__(name: str) -> object:
    """A moved 0.2 name, with a :class:`DeprecationWarning` naming its new module (PEP 562)."""
    moved = _MOVED.get(name)
    if moved is None:
        raise AttributeError(f"module 'kvrules.plugin' has no attribute {name!r}")
    home, module = moved
    warnings.warn(
        f"kvrules.plugin.{name} is deprecated since kvrules 0.3 and goes in 0.4: "
        f"import it from {home} (`from {home} import {name}`)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(module, name)


def __dir__() -> list[str]:
    return sorted(__all__)
