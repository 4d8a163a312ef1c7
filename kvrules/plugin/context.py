"""What a rule is handed: :class:`PlanContext` while planning, :class:`AlignContext` while specs
are built from a model config. Both are data, plus callables the caller injects; neither reaches
back into the pipeline (a stage's result is returned by the stage, never stored here)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from kvrules.config import EngineConfig
from kvrules.decisions import DecisionLog
from kvrules.plan import KVCacheGroup
from kvrules.plugin.presets import StrategySet
from kvrules.plugin.registry import Registries
from kvrules.plugin.rules import Check
from kvrules.specs.base import KVCacheSpec

if TYPE_CHECKING:
    from kvrules.hf.backends import AttentionBackend
    from kvrules.hf.settings import BuildSettings


T = TypeVar("T")


def _handed(check: Check | None, kind: type[T]) -> T | None:
    work = check.work if check is not None else None
    return work if isinstance(work, kind) else None


@dataclass
class PlanContext:
    """What a rule may read while a plan is being made.

    :ivar config: the engine settings.
    :ivar strategies: the active rules by kind.
    :ivar decisions: the decision log (``record`` appends to it).
    :ivar registries: everything plugins registered (spec types, rules, allocators).
    :ivar workers: each worker's (pipeline stage's) layer names (a set, or a view of the worker's
        spec mapping's keys: read it, do not keep it); empty when not planning.
    :ivar memory: each worker's KV-cache bytes, in the order of ``workers``.
    :ivar cache: scratch space for rules during one plan (key by rule name; dropped with the context).
    :ivar check: while a rule acts, the answer its guard gave (``ctx.check.work`` is what the
        guard handed over); ``None`` while guards are asked.
    """

    config: EngineConfig
    strategies: StrategySet
    registries: Registries
    decisions: DecisionLog = field(default_factory=DecisionLog)
    workers: tuple[AbstractSet[str], ...] = ()
    memory: tuple[int, ...] = ()
    cache: dict[Any, Any] = field(default_factory=dict)
    check: Check | None = None

    def handed(self, kind: type[T]) -> T | None:
        """The work the acting rule's guard handed over (``check.work``) when it is a ``kind``;
        ``None`` when the action is called directly (then work it out again)."""
        return _handed(self.check, kind)

    def provider(self, rule_name: str) -> str:
        """Which plugin registered ``rule_name``."""
        return self.registries.provider_of(rule_name)


@dataclass
class AlignContext:
    """What an aligner may read.

    :ivar settings: the target model's resolved settings (cache block size before alignment,
        whether the user fixed it, backend, Mamba cache mode and block size, TP, dtypes).
    :ivar draft_layers: names of the draft model's layers (all other layers are the target's).
    :ivar decisions: the decision log (the dispatcher records; aligners may add notes).
    :ivar registries: everything plugins registered.
    :ivar mamba_chunk_size: the target's Mamba chunk size (``mamba_cache_mode='all'``), if known.
    :ivar draft_settings: the draft model's settings (its own KV dtype), when there is a draft.
    :ivar group_with: injected by the builder: ``group_with(specs, config, strategy_set)`` gives
        the KV-cache groups the named strategy set's page unification and grouping make of
        ``specs`` (an aligner compares its choice with another set's this way).
    :ivar check: while an aligner acts, the answer its guard gave (``ctx.check.work`` is what the
        guard handed over); ``None`` while guards are asked.
    """

    settings: BuildSettings
    draft_layers: frozenset[str] = frozenset()
    decisions: DecisionLog = field(default_factory=DecisionLog)
    registries: Registries = field(default_factory=Registries)
    mamba_chunk_size: int | None = None
    draft_settings: BuildSettings | None = None
    group_with: Callable[[Mapping[str, KVCacheSpec], EngineConfig, str], list[KVCacheGroup]] | None = None
    check: Check | None = None

    def handed(self, kind: type[T]) -> T | None:
        """The work the acting aligner's guard handed over (``check.work``) when it is a ``kind``;
        ``None`` when the action is called directly (then work it out again)."""
        return _handed(self.check, kind)

    @property
    def block_size(self) -> int:
        """The cache block size before alignment (the user's, or the backend's preferred size)."""
        return self.settings.block_size

    @property
    def backend(self) -> AttentionBackend:
        """The target's attention backend."""
        return self.settings.backend

    @property
    def kernel_block_alignment(self) -> int:
        """``max(smallest kernel block of the backend, cache block size)``: block sizes are multiples of it."""
        return max(self.backend.min_kernel_block, self.block_size)

    def is_draft(self, layer: str) -> bool:
        """True when ``layer`` belongs to the draft model."""
        return layer in self.draft_layers

    def target(self, specs: Mapping[str, KVCacheSpec]) -> dict[str, KVCacheSpec]:
        """The target model's layers of ``specs``."""
        return {n: s for n, s in specs.items() if n not in self.draft_layers}

    def draft(self, specs: Mapping[str, KVCacheSpec]) -> dict[str, KVCacheSpec]:
        """The draft model's layers of ``specs``."""
        return {n: s for n, s in specs.items() if n in self.draft_layers}


__all__ = ["AlignContext", "PlanContext"]
