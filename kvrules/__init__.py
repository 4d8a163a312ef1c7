"""kvrules: a rule engine with plugins that plans KV-cache memory for LLM inference engines.

The public API (architecture §3): spec classes, :class:`EngineConfig`, :class:`Planner`,
:func:`plan`, the plan types, :class:`Decision`, the errors, :data:`hookimpl` for plugin
authors, and what a host uses to choose plugins and rules: the plugin managers
(:func:`get_plugin_manager`, the process-level :func:`default_manager`) and strategy sets
(:func:`resolve_strategies`).
"""

from typing import Any

from kvrules.allocation import Allocation, allocate
from kvrules.config import EngineConfig
from kvrules.decisions import Decision
from kvrules.errors import (
    AllocationError,
    CapacityError,
    ConfigError,
    GroupingError,
    KVRulesError,
    ModelFileError,
    PluginError,
    SpecAnswerError,
    SpecError,
    UnificationError,
)
from kvrules.model import spec_from_dict
from kvrules.pipeline import Planner, plan
from kvrules.plan import KVCacheGroup, KVCacheTensor, Plan, UnifyResult, WorkerPlan
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
from kvrules.plugin.registry import Registries
from kvrules.specs import (
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
    spec_to_dict,
)

__version__ = "0.2.0"

__all__ = [
    # plugin managers and strategy sets, for hosts (authors import from kvrules.plugin)
    "BUILTIN_PLUGINS",
    "DEFAULT_SET",
    "KVRulesPluginManager",
    "Registries",
    "StrategySet",
    "StrategySpec",
    "enable_trace",
    "reset_default_manager",
    "resolve_strategies",
    "set_default_manager",
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
    "SpecAnswerError",
    "SpecError",
    "UnificationError",
    "UniformTypeKVCacheSpecs",
    "UnifyResult",
    "WorkerPlan",
    "allocate",
    "default_manager",
    "get_plugin_manager",
    "hookimpl",
    "fit",
    "plan",
    "spec_from_dict",
    "spec_to_dict",
]

#: submodules reachable as attributes of ``kvrules`` without an import of their own, loaded on
#: first access (PEP 562) so that ``import kvrules`` stays light and never imports torch
_LAZY_SUBMODULES = ("distributed", "hf", "integrations", "sizing", "testing")


def fit(config: Any, draft: Any = None, options: Any = None, **kwargs: Any) -> Any:
    """Does a model (and its draft) fit on a GPU, and how well? :func:`kvrules.sizing.fit.fit`
    (imported on first call, so ``import kvrules`` stays light): weights per GPU, runtime memory,
    the exact KV plan of what remains, the nearest settings that fit; a
    :class:`~kvrules.sizing.fit.FitReport`."""
    from kvrules.sizing.fit import fit as fit_model

    return fit_model(config, draft, options, **kwargs)


def __getattr__(name: str) -> object:
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"kvrules.{name}")
    raise AttributeError(f"module 'kvrules' has no attribute {name!r}")
