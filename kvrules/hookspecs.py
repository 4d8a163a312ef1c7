"""Deprecated 0.1 import path: use ``kvrules.plugin.hookspecs`` (removed in kvrules 0.3)."""

import warnings

from kvrules.plugin.hookspecs import *  # noqa: F403
from kvrules.plugin.hookspecs import __all__ as __all__

warnings.warn(
    "kvrules.hookspecs is deprecated since kvrules 0.2 and is removed in 0.3; import from kvrules.plugin.hookspecs instead",
    DeprecationWarning,
    stacklevel=2,
)
