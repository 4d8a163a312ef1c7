"""The plugin module named by the entry point ``kpool-tail`` (group ``kvrules.plugins``).

Importing it imports neither torch nor CUDA; kvrules calls the hooks when it builds its
registries.
"""

from __future__ import annotations

from kvrules import hookimpl
from kvrules.plugin import AllocatorRegistry, RuleRegistry, SpecTypeRegistry

from kvrules_kpool_tail.rules import KpoolDedicated, KpoolTailPad
from kvrules_kpool_tail.spec import KpoolTailSpec
from kvrules_kpool_tail.views import KpoolRingView


@hookimpl
def kvrules_register_spec_types(registry: SpecTypeRegistry) -> None:
    registry.add(KpoolTailSpec)


@hookimpl
def kvrules_register_rules(registry: RuleRegistry) -> None:
    registry.add(KpoolTailPad())
    registry.add(KpoolDedicated())


@hookimpl
def kvrules_register_allocators(registry: AllocatorRegistry) -> None:
    registry.add_view_layout(KpoolRingView())
