"""Which plugins ship with kvrules: the ``kvrules.plugins`` entry points of kvrules' own
distribution, read from its installed metadata (never a list kept by hand, which drifted:
issue 25 R7, ``ssm-architectures`` was missing and ``--no-autoload`` dropped it)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distribution

ENTRY_POINT_GROUP = "kvrules.plugins"
DISTRIBUTION = "kvrules"


def builtin_plugin_names(dist_name: str = DISTRIBUTION) -> tuple[str, ...]:
    """The entry-point names in :data:`ENTRY_POINT_GROUP` that distribution ``dist_name``
    provides, in its metadata's order; ``()`` when it is not installed (the plugin manager
    then says how to install it)."""
    try:
        dist = distribution(dist_name)
    except PackageNotFoundError:
        return ()
    return tuple(ep.name for ep in dist.entry_points.select(group=ENTRY_POINT_GROUP))


__all__ = ["DISTRIBUTION", "ENTRY_POINT_GROUP", "builtin_plugin_names"]
