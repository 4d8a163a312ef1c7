"""Selecting kvrules inside vLLM without replacing private functions.

Two public seams, both ending at vLLM 0.33's ``Platform.get_kv_cache_config_builder_cls``:

* :class:`KVRulesPlatformMixin`: a vendor platform plugin (``vllm.platform_plugins``) subclasses
  it before its platform class (``class MyPlatform(KVRulesPlatformMixin, CudaPlatform)``); the
  hook then returns :data:`~kvrules.integrations.vllm033.BUILDER_QUALNAME`;
* :func:`set_platform_hook`: what the general plugin (``KVRULES_VLLM_STRATEGIES``) does in every
  vLLM process that resolves a builder (the engine core and every worker): it sets the public
  classmethod on the active platform class. :func:`restore_platform_hook` undoes it.

Both also choose block sizes at engine start when the active set has an aligner vLLM lacks
(``draft-aware-align``): the mixin's ``update_block_size_for_backend`` and, for the general
plugin, :func:`wrap_engine_start` run :mod:`kvrules.integrations.vllm_align` after the platform's
own method (in the worker process, where vLLM runs it). The 0.28 line's ``install()`` uses
:func:`wrap_engine_start` too.

:func:`vllm_line` tells the installed line (``"0.33"`` when the builder seam exists, else
``"0.28"``) and :func:`line_preset` its preset. Nothing here imports vLLM at import time.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from kvrules import logs
from kvrules.integrations import vllm_align
from kvrules.integrations.vllm033 import BUILDER_QUALNAME, remember_vllm_hook, select, state
from kvrules.integrations.vllm_lines import detect
from kvrules.integrations.vllm_specs import VllmNotInstalledError
from kvrules.pipeline import Planner
from kvrules.plugin.manager import KVRulesPluginManager
from kvrules.plugin.presets import StrategySpec

#: the platform classmethod that names the builder (vLLM 0.33)
HOOK_NAME = "get_kv_cache_config_builder_cls"
#: the presets reproducing each vLLM line
LINE_PRESETS = vllm_align.LINE_PRESETS

_lock = threading.RLock()
#: platform class -> the hook it had before :func:`set_platform_hook` (in its own ``__dict__``)
_saved: dict[type, Any] = {}


def vllm_line() -> str:
    """The installed vLLM's line, ``"0.28"``, ``"0.32"`` or ``"0.33"``, told by its planning seam
    (:func:`kvrules.integrations.vllm_lines.detect`).

    :raises VllmNotInstalledError: vLLM is not importable at all.
    :raises UnknownVllmSeamError: its seam is none kvrules knows.
    """
    return detect().name


def line_preset(line: str | None = None) -> str:
    """The preset that reproduces ``line`` (the installed one when ``None``)."""
    return LINE_PRESETS[line if line is not None else vllm_line()]


def _kvrules_hook(cls: Any, vllm_config: Any) -> str:
    """``get_kv_cache_config_builder_cls`` answering kvrules' builder."""
    return BUILDER_QUALNAME


def _planner_033() -> Planner:
    """The planner of the set vLLM 0.33's builder plans with (:func:`vllm033.active_strategies`)."""
    return state().planner


def _mixin_update_block_size(cls: Any, vllm_config: Any) -> None:
    """The mixin's ``update_block_size_for_backend``: the platform's own, then kvrules' choice."""
    before = vllm_align.vllm_values(vllm_config)
    parent = getattr(super(KVRulesPlatformMixin, cls), vllm_align.HOOK_NAME, None)
    if parent is not None:
        parent(vllm_config)
    if cls.kvrules_strategies is not None:
        select(cls.kvrules_strategies)
    view = vllm_align.real_view(getattr(cls, "device_type", None))
    vllm_align.align_engine_start(vllm_config, _planner_033(), "0.33", view, before=before)


_mixin_update_block_size._kvrules_engine_start = True  # type: ignore[attr-defined]


class KVRulesPlatformMixin:
    """Put before a vLLM ``Platform`` subclass to plan its KV cache with kvrules.

    The strategy set is ``KVRULES_VLLM_STRATEGIES`` (unset or ``auto``: ``vllm-0.33``), or what
    a subclass names in :attr:`kvrules_strategies` (read when a hook is first asked). Its
    ``update_block_size_for_backend`` runs the platform's own method, then kvrules' engine-start
    choice (:func:`kvrules.integrations.vllm_align.align_engine_start`; nothing changes without
    an aligner beyond vLLM's own).
    """

    #: the set this platform plans with; ``None`` defers to ``KVRULES_VLLM_STRATEGIES``
    kvrules_strategies: StrategySpec = None

    @classmethod
    def get_kv_cache_config_builder_cls(cls, vllm_config: Any) -> str:
        """The qualified name of kvrules' ``KVCacheConfigBuilder`` (the platform's own builder,
        the next class's answer, is where a fallback hands layers)."""
        if cls.kvrules_strategies is not None:
            select(cls.kvrules_strategies)
        parent = getattr(super(), HOOK_NAME, None)
        remember_vllm_hook(parent if callable(parent) else None)
        return BUILDER_QUALNAME

    update_block_size_for_backend = classmethod(_mixin_update_block_size)


def current_platform_class() -> type:
    """The class of vLLM's active platform (``vllm.platforms.current_platform``).

    :raises VllmNotInstalledError: vLLM is not importable.
    """
    try:
        platforms = importlib.import_module("vllm.platforms")
    except ImportError as exc:
        raise VllmNotInstalledError(f"vLLM is not importable ({exc})") from exc
    return type(platforms.current_platform)


def _own_hook(cls: type) -> Any:
    """The hook ``cls`` answered before kvrules took it: a function ``vllm_config -> qualname``."""
    saved = _saved.get(cls)
    if saved is not None:
        return saved.__get__(None, cls)
    for klass in cls.__mro__[1:]:
        raw = klass.__dict__.get(HOOK_NAME)
        if raw is not None:
            return raw.__get__(None, cls)
    return None


def set_platform_hook(
    platform_cls: type | None = None,
    *,
    strategies: StrategySpec = None,
    plugin_manager: KVRulesPluginManager | None = None,
) -> type:
    """Make ``platform_cls`` (the active platform's class by default) answer kvrules' builder.

    Idempotent; the previous hook is kept for :func:`restore_platform_hook`, and its answer is the
    builder a fallback hands layers to (:func:`kvrules.integrations.vllm033.vllm_builder`).
    Returns the class.
    :param strategies: the set every builder of this process plans with (``None``: the env var).
    :param plugin_manager: the manager its planner uses (``None``: ``default_manager()``).
    """
    cls = platform_cls if platform_cls is not None else current_platform_class()
    with _lock:
        select(strategies, plugin_manager)
        if cls not in _saved:
            _saved[cls] = cls.__dict__.get(HOOK_NAME)
            own = _own_hook(cls)
            setattr(cls, HOOK_NAME, classmethod(_kvrules_hook))
            remember_vllm_hook(own)
    wrapped = wrap_engine_start(_planner_033, "0.33", cls)
    logs.info(
        "kvrules.vllm.platform_hook",
        platform=cls.__qualname__,
        builder=BUILDER_QUALNAME,
        engine_start=wrapped is not None,
    )
    return cls


def wrap_engine_start(
    planner: vllm_align.PlannerSource, line: str, platform_cls: type | None = None
) -> type | None:
    """Wrap ``platform_cls``'s (the active platform's) ``update_block_size_for_backend`` when
    ``planner()``'s set has an aligner vLLM's ``line`` lacks; returns the class wrapped, else
    ``None`` (no such aligner, or no hook to wrap). Idempotent (:func:`vllm_align.wrap_platform`).

    :raises VllmNotInstalledError: no class given and vLLM is not importable.
    """
    if not vllm_align.extra_aligners(planner(), line):
        return None
    cls = platform_cls if platform_cls is not None else current_platform_class()
    return cls if vllm_align.wrap_platform(cls, planner, line) else None


def unwrap_engine_start(platform_cls: type) -> None:
    """Undo :func:`wrap_engine_start` on ``platform_cls`` (a no-op when it is not wrapped)."""
    vllm_align.unwrap_platform(platform_cls)


def restore_platform_hook(platform_cls: type | None = None) -> None:
    """Give ``platform_cls`` its own hooks back, ``update_block_size_for_backend`` included (a
    no-op when :func:`set_platform_hook` did not act)."""
    cls = platform_cls if platform_cls is not None else current_platform_class()
    vllm_align.unwrap_platform(cls)
    with _lock:
        if cls not in _saved:
            return
        own = _saved.pop(cls)
        if own is None:
            delattr(cls, HOOK_NAME)
        else:
            setattr(cls, HOOK_NAME, own)
        select(None)
        remember_vllm_hook(None)


__all__ = [
    "HOOK_NAME",
    "KVRulesPlatformMixin",
    "LINE_PRESETS",
    "current_platform_class",
    "line_preset",
    "restore_platform_hook",
    "set_platform_hook",
    "unwrap_engine_start",
    "vllm_line",
    "wrap_engine_start",
]
