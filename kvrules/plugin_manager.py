"""Deprecated 0.1 import path: use ``kvrules.plugin`` (removed in kvrules 0.3)."""

import warnings

from kvrules.plugin.manager import *  # noqa: F403
from kvrules.plugin.manager import __all__ as _names
from kvrules.plugin.manager import default_manager as _default_manager
from kvrules.plugin.manager import default_manager as default_plugin_manager
from kvrules.plugin.registry import Registries as _Registries

__all__ = [*_names, "default_plugin_manager", "default_registries"]


def default_registries() -> _Registries:
    """0.1's name for ``kvrules.plugin.default_manager().registries``."""
    return _default_manager().registries


warnings.warn(
    "kvrules.plugin_manager is deprecated since kvrules 0.2 and is removed in 0.3; import from kvrules.plugin instead",
    DeprecationWarning,
    stacklevel=2,
)
