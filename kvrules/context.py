"""Deprecated 0.1 import path: use ``kvrules.plugin`` (removed in kvrules 0.3)."""

import warnings

from kvrules.plugin.context import *  # noqa: F403
from kvrules.plugin.context import __all__ as __all__

warnings.warn(
    "kvrules.context is deprecated since kvrules 0.2 and is removed in 0.3; import from kvrules.plugin instead",
    DeprecationWarning,
    stacklevel=2,
)
