"""Everything a kvrules plugin author imports, from one module.

A plugin is a module (or object) with ``@hookimpl`` functions named ``kvrules_register_*`` that
add typed objects to the registry they are given: rules of the kinds in :data:`RULE_KINDS`,
spec types, allocators and view layouts, architectures. Specs, errors, :class:`~kvrules.EngineConfig`
and the plan types come from :mod:`kvrules` itself.
"""

from kvrules.dtypes import dtype_name, dtype_size, to_torch
from kvrules.plugin.allocator import AllocationRequest, Allocator, LayoutChoice, Placement, ViewLayout
from kvrules.plugin.architecture import Architecture
from kvrules.plugin.context import AlignContext, PlanContext
from kvrules.plugin.grouping import (
    Candidate,
    GroupingCost,
    Pool,
    acceptable,
    alternatives,
    bucket_lengths,
    buckets_by_spec,
    buckets_where,
    grouping_cost,
    layer_buckets,
    ratio,
    search,
    shared_pool_blocker,
    split_bucket,
    split_buckets,
    split_cost,
    vllm_group_size,
    vllm_grouping,
    vllm_grouping_cost,
)
from kvrules.plugin.hookspecs import hookimpl
from kvrules.plugin.manager import (
    BUILTIN_PLUGINS,
    KVRulesPluginManager,
    default_manager,
    enable_trace,
    get_plugin_manager,
    reset_default_manager,
    set_default_manager,
)
from kvrules.plugin.presets import DEFAULT_SET, StrategySet, StrategySpec, resolve_strategies
from kvrules.plugin.registry import (
    AllocatorRegistry,
    ArchitectureRegistry,
    NamedPlugin,
    Registries,
    RuleRegistry,
    SpecTypeRegistry,
)
from kvrules.plugin.rules import (
    NAME_PATTERN,
    RULE_KINDS,
    Aligner,
    Check,
    Converter,
    Fallback,
    Grouper,
    LayerStrategy,
    Layout,
    Partitioner,
    Router,
    Rule,
    applies,
    declines,
)
from kvrules.specs import BUILTIN_SPEC_TYPES
from kvrules.specs.asked import blocks_of, evolved, memory_of
from kvrules.specs.attention import quantized_head_dim
from kvrules.specs.base import cdiv, distinct_specs, merged_spec, round_up

__all__ = [
    # helpers a rule shares: spec types and merging, grouping comparison (kvrules.plugin.grouping)
    "BUILTIN_SPEC_TYPES",
    "Candidate",
    "GroupingCost",
    "Pool",
    "acceptable",
    "alternatives",
    "bucket_lengths",
    "buckets_by_spec",
    "buckets_where",
    "distinct_specs",
    "grouping_cost",
    "layer_buckets",
    "merged_spec",
    "quantized_head_dim",
    "ratio",
    "search",
    "shared_pool_blocker",
    "split_bucket",
    "split_buckets",
    "split_cost",
    "vllm_group_size",
    "vllm_grouping",
    "vllm_grouping_cost",
    "dtype_name",
    "dtype_size",
    "to_torch",
    "AlignContext",
    "AllocationRequest",
    "Allocator",
    "Architecture",
    "LayoutChoice",
    "Placement",
    "ViewLayout",
    "cdiv",
    "round_up",
    # a spec's answers checked where a rule uses them (kvrules.specs.asked)
    "blocks_of",
    "evolved",
    "memory_of",
    "BUILTIN_PLUGINS",
    "DEFAULT_SET",
    "NAME_PATTERN",
    "RULE_KINDS",
    "Aligner",
    "AllocatorRegistry",
    "ArchitectureRegistry",
    "Check",
    "Converter",
    "Fallback",
    "Grouper",
    "KVRulesPluginManager",
    "LayerStrategy",
    "Layout",
    "NamedPlugin",
    "Partitioner",
    "PlanContext",
    "Registries",
    "Router",
    "Rule",
    "RuleRegistry",
    "SpecTypeRegistry",
    "StrategySet",
    "StrategySpec",
    "applies",
    "declines",
    "default_manager",
    "enable_trace",
    "get_plugin_manager",
    "hookimpl",
    "reset_default_manager",
    "resolve_strategies",
    "set_default_manager",
]
