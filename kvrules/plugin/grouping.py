"""Deprecated since 0.3, goes in 0.4: the grouping cost model is :mod:`kvrules.grouping`.

Every name of that module still resolves here, with a :class:`DeprecationWarning` (PEP 562).
"""

import warnings

from kvrules import grouping as _grouping


def __getattr__(name: str) -> object:
    """``kvrules.grouping``'s ``name``, with a :class:`DeprecationWarning`."""
    if name.startswith("__") or not hasattr(_grouping, name):
        raise AttributeError(f"module 'kvrules.plugin.grouping' has no attribute {name!r}")
    warnings.warn(
        f"kvrules.plugin.grouping is deprecated since kvrules 0.3 and goes in 0.4: "
        f"import {name} from kvrules.grouping (`from kvrules.grouping import {name}`)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(_grouping, name)
