"""The hooks a kvrules plugin may implement.

Plugins contribute named, typed objects through registration hooks; the core owns the order in
which rules are asked (``(-priority, name)``) and records which rule decided. Mark
implementations with :data:`kvrules.hookimpl`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from kvrules.plugin.registry import (
        AllocatorRegistry,
        ArchitectureRegistry,
        RuleRegistry,
        SpecTypeRegistry,
    )

hookspec = pluggy.HookspecMarker("kvrules")
"""The hookspec marker: kvrules' own, never exported to plugin authors."""

hookimpl = pluggy.HookimplMarker("kvrules")
"""Marker for plugin hook implementations (``@kvrules.plugin.hookimpl``, also ``kvrules.hookimpl``)."""


@hookspec
def kvrules_register_spec_types(registry: SpecTypeRegistry) -> None:
    """Register spec classes (subclasses of :class:`kvrules.KVCacheSpec`) by their ``type_name``.

    :param registry: call ``registry.add(SpecClass)`` for every spec type the plugin provides.
        A type name already registered by another plugin raises :class:`kvrules.PluginError`.
    :return: nothing; the return value is ignored.

    All implementations are called; return values are ignored.
    """


@hookspec
def kvrules_register_rules(registry: RuleRegistry) -> None:
    """Register rules (routers, layer strategies, groupers, layouts, converters, fallbacks) and presets.

    :param registry: call ``registry.add(rule)`` for each rule object (a frozen dataclass deriving
        from one of the rule bases in :mod:`kvrules.plugin.rules`), and ``registry.add_preset(name, names)``
        for a named strategy set. A duplicate rule name raises :class:`kvrules.PluginError`
        naming both providers.
    :return: nothing; the return value is ignored.

    All implementations are called; return values are ignored.
    """


@hookspec
def kvrules_register_allocators(registry: AllocatorRegistry) -> None:
    """Register allocators that turn a plan into buffers and per-layer views.

    :param registry: call ``registry.add(allocator)`` for each allocator (a
        :class:`kvrules.allocation.Allocator`) and ``registry.add_view_layout(layout)`` for each
        view layout (a :class:`kvrules.allocation.ViewLayout`; see docs/allocation.md).
        Importing the plugin must not touch a GPU.
    :return: nothing; the return value is ignored.

    All implementations are called; return values are ignored.
    """


@hookspec
def kvrules_register_architectures(registry: ArchitectureRegistry) -> None:
    """Register model architectures that build per-layer specs from a Hugging Face config.

    :param registry: call ``registry.add(architecture)`` for each architecture object (an
        instance of a :class:`kvrules.hf.Architecture` subclass; see docs/hf.md). A duplicate
        name raises :class:`kvrules.PluginError` naming both providers.
    :return: nothing; the return value is ignored.

    All implementations are called; return values are ignored.
    """


__all__ = [
    "hookimpl",
    "kvrules_register_allocators",
    "kvrules_register_architectures",
    "kvrules_register_rules",
    "kvrules_register_spec_types",
]
