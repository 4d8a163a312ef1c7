"""kvrules: a rule engine with plugins that plans KV-cache memory for LLM inference engines.

The public API (architecture §3): spec classes, :class:`EngineConfig`, :class:`Planner`,
:func:`plan`, the plan types, :class:`Decision`, the errors, and :data:`hookimpl` for plugin
authors.
"""

import pluggy

hookimpl = pluggy.HookimplMarker("kvrules")
"""Marker for plugin hook implementations (``@kvrules.hookimpl``)."""

from kvrules.allocation import Allocation, allocate  # noqa: E402
from kvrules.config import EngineConfig  # noqa: E402
from kvrules.decisions import Decision  # noqa: E402
from kvrules.errors import (  # noqa: E402
    AllocationError,
    CapacityError,
    ConfigError,
    GroupingError,
    KVRulesError,
    ModelFileError,
    PluginError,
    SpecError,
    UnificationError,
)
from kvrules.groups import KVCacheGroup, KVCacheTensor  # noqa: E402
from kvrules.plan import Plan, UnifyResult, WorkerPlan  # noqa: E402
from kvrules.planner import Planner, plan  # noqa: E402
from kvrules.plugin_manager import BUILTIN_PLUGINS, get_plugin_manager  # noqa: E402
from kvrules.specs import (  # noqa: E402
    AttentionSpec,
    ChunkedLocalAttentionSpec,
    CrossAttentionSpec,
    EncoderOnlyAttentionSpec,
    FullAttentionSpec,
    HiddenStateCacheSpec,
    KVCacheSpec,
    KVQuantMode,
    MambaSpec,
    MLAAttentionSpec,
    SinkFullAttentionSpec,
    SlidingWindowMLASpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
    spec_from_dict,
    spec_to_dict,
)

__version__ = "0.1.0"

__all__ = [
    "BUILTIN_PLUGINS",
    "Allocation",
    "AllocationError",
    "AttentionSpec",
    "CapacityError",
    "ChunkedLocalAttentionSpec",
    "ConfigError",
    "CrossAttentionSpec",
    "Decision",
    "EncoderOnlyAttentionSpec",
    "EngineConfig",
    "FullAttentionSpec",
    "GroupingError",
    "HiddenStateCacheSpec",
    "KVCacheGroup",
    "KVCacheSpec",
    "KVCacheTensor",
    "KVQuantMode",
    "KVRulesError",
    "MLAAttentionSpec",
    "MambaSpec",
    "ModelFileError",
    "Plan",
    "Planner",
    "PluginError",
    "SinkFullAttentionSpec",
    "SlidingWindowMLASpec",
    "SlidingWindowSpec",
    "SpecError",
    "UnificationError",
    "UniformTypeKVCacheSpecs",
    "UnifyResult",
    "WorkerPlan",
    "allocate",
    "get_plugin_manager",
    "hookimpl",
    "plan",
    "spec_from_dict",
    "spec_to_dict",
]
