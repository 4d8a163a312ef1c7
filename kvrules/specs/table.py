"""Spec tables: a copy of a layer -> spec mapping as a plain ``dict``."""

from __future__ import annotations

from collections.abc import Mapping

from kvrules.specs.base import KVCacheSpec


def as_dict(specs: Mapping[str, KVCacheSpec]) -> dict[str, KVCacheSpec]:
    """A new ``dict`` of ``specs``, made without a Python call per layer."""
    if type(specs) is dict:
        return specs.copy()
    return dict(zip(specs.keys(), specs.values(), strict=True))


__all__ = ["as_dict"]
