"""Noticing third-party plugins that patch kvrules at import (issue 25 R9).

Before and after each third-party entry point loads, the ``__dict__`` entries of every class
that ``kvrules``, ``kvrules.plugin``, ``kvrules.grouping`` and ``kvrules.specs`` export (spec types included) and kvrules' public module
functions are compared by identity; an entry added, replaced or deleted is a patch, named with
the plugin and its distribution. The plugin manager warns with :class:`PluginPatchWarning`, or
raises :class:`~kvrules.PluginError` when ``KVRULES_STRICT_PLUGINS`` is on.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

STRICT_ENV = "KVRULES_STRICT_PLUGINS"

Snapshot = dict[str, int]

#: the modules whose exported classes and functions are watched
_MODULES = ("kvrules", "kvrules.plugin", "kvrules.grouping", "kvrules.specs")


class PluginPatchWarning(UserWarning):
    """A third-party plugin changed kvrules' own classes or functions when it was loaded."""


def _classes() -> dict[str, type]:
    from kvrules.specs.base import KVCacheSpec

    found: dict[str, type] = {}
    for module_name in _MODULES:
        module = sys.modules.get(module_name)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name, None)
            if isinstance(value, type):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    todo = [KVCacheSpec]
    while todo:
        cls = todo.pop()
        found[f"{cls.__module__}.{cls.__qualname__}"] = cls
        todo.extend(cls.__subclasses__())
    return found


def snapshot() -> Snapshot:
    """Identity of each class ``__dict__`` entry and public module function (see the module doc)."""
    shot: Snapshot = {}
    for where, cls in _classes().items():
        for name, value in list(vars(cls).items()):
            shot[f"{where}.{name}"] = id(value)
    for module_name in _MODULES:
        module = sys.modules.get(module_name)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name, None)
            if callable(value) and not isinstance(value, type):
                shot[f"{module_name}.{name}"] = id(value)
    return shot


def _owner(key: str) -> str:
    return key.rpartition(".")[0]


def changes(before: Mapping[str, int], after: Mapping[str, int]) -> list[str]:
    """``"<entry> added|replaced|deleted"`` for each difference, sorted. The entries of a class
    that did not exist before (a plugin's own spec type, a subclass of kvrules' spec base) are
    that plugin's code, not a change to kvrules: only classes and modules seen before count."""
    owners = {_owner(key) for key in before}
    out = [f"{key} deleted" for key in before if key not in after]
    out += [f"{key} added" for key in after if key not in before and _owner(key) in owners]
    out += [f"{key} replaced" for key in before if key in after and before[key] != after[key]]
    return sorted(out)


def describe(plugin: str, distribution: str | None, found: list[str]) -> str:
    """One line naming the plugin, its distribution and what it changed."""
    dist = distribution or "an unknown distribution"
    return f"plugin {plugin!r} ({dist}) patched kvrules when loaded: {'; '.join(found)}"


def report(plugin: str, distribution: str | None, found: list[str], *, strict: bool) -> str:
    """Warn (or raise, when ``strict``) about ``found`` changes; returns the message."""
    import warnings

    from kvrules.errors import PluginError

    message = describe(plugin, distribution, found)
    if strict:
        raise PluginError(f"{message} ({STRICT_ENV} is on: block it with --block {plugin})")
    warnings.warn(message, PluginPatchWarning, stacklevel=3)
    return message


__all__ = ["STRICT_ENV", "PluginPatchWarning", "Snapshot", "changes", "describe", "report", "snapshot"]
