"""Deprecated 0.1 import path: use ``kvrules.plugin`` (removed in kvrules 0.3)."""

import warnings

from kvrules.plugin.manager import *  # noqa: F403
from kvrules.plugin.manager import __all__ as __all__

warnings.warn(
    "kvrules.plugin_manager is deprecated since kvrules 0.2 and is removed in 0.3; import from kvrules.plugin instead",
    DeprecationWarning,
    stacklevel=2,
)
