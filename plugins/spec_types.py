"""Built-in plugin ``spec-types``: registers every spec class of :mod:`kvrules.specs`."""

from __future__ import annotations

from kvrules import hookimpl
from kvrules.plugin import SpecTypeRegistry
from kvrules.specs import BUILTIN_SPEC_TYPES


@hookimpl
def kvrules_register_spec_types(registry: SpecTypeRegistry) -> None:
    for cls in BUILTIN_SPEC_TYPES:
        registry.add(cls)
