"""The architecture contract, as the front door names it: :class:`kvrules.plugin.Architecture`
(defined in :mod:`kvrules.plugin.architecture`, whose docstring has a minimal plugin)."""

from kvrules.plugin.architecture import Architecture

__all__ = ["Architecture"]
