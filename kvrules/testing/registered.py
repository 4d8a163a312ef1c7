"""What a plugin manager has registered, by kind and name, with the plugin that provided each.

``registered(kvrules_pm)`` is the listing a plugin's tests compare against (the ``kvrules
strategies`` command prints the same registries as tables)::

    >>> registered(kvrules_pm, plugin="acme")["rules"]
    {'acme-pad': "plugin 'acme' (kvrules-acme 1.0)"}
"""

from __future__ import annotations

from kvrules.errors import PluginError
from kvrules.plugin.manager import KVRulesPluginManager
from kvrules.plugin.registry import Registries

#: the kinds :func:`registered` lists, in the order of ``kvrules strategies``
KINDS: tuple[str, ...] = ("spec types", "rules", "presets", "allocators", "view layouts", "architectures")


def _providers(registries: Registries) -> dict[str, dict[str, str]]:
    rules = registries.rules
    return {
        "spec types": dict(registries.spec_types.providers),
        "rules": dict(rules.providers),
        "presets": dict(rules.preset_providers),
        "allocators": dict(registries.allocators.providers),
        "view layouts": dict(registries.allocators.view_layout_providers),
        "architectures": dict(registries.architectures.providers),
    }


def registered(pm: KVRulesPluginManager, *, plugin: str | None = None) -> dict[str, dict[str, str]]:
    """Every kind of :data:`KINDS` -> ``{name: provider}``, names sorted.

    A provider reads ``plugin 'NAME' (DISTRIBUTION VERSION)`` or ``plugin 'NAME' (registered
    in-process)``. The ``default`` set is not a registered preset (it is every rule whose
    ``default`` flag is set) and is not listed.

    :param plugin: only what the plugin of that name (its entry-point or registration name)
        registered.
    :raises PluginError: ``plugin`` is not registered in ``pm`` (naming the registered plugins).
    """
    names = sorted(name for name, _ in pm.list_name_plugin())
    if plugin is not None and plugin not in names:
        raise PluginError(
            f"registered(plugin={plugin!r}): no such plugin; registered plugins: {', '.join(names)}"
        )
    listing = _providers(pm.registries)
    prefix = None if plugin is None else f"plugin {plugin!r} ("
    return {
        kind: {
            name: listing[kind][name]
            for name in sorted(listing[kind])
            if prefix is None or listing[kind][name].startswith(prefix)
        }
        for kind in KINDS
    }


__all__ = ["KINDS", "registered"]
