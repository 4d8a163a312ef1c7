"""kvrules as vLLM 0.33's ``KVCacheConfigBuilder`` (the official planning seam).

vLLM 0.33's Core asks the builder for the KV-cache groups of the whole model
(``get_kv_cache_groups``), then for the placement of a given number of blocks
(``get_kv_cache_config_from_groups``); Core itself keeps the exact-partition check, the
``num_gpu_blocks_override``, the null block, auto-fit, admission and worker convergence. This
module answers both with the kvrules pipeline's public stages (``Planner.groups_of``, then
``Planner.place`` for exactly ``num_blocks`` blocks) and emits 0.33's placement: one backing allocation per worker, one
strided ``KVCacheTensor`` per (group, distinct spec), layer-outermost or block-outermost as the
engine resolved (``cache_config.get_resolved_kv_cache_layout()``).

vLLM builds a fresh builder on every call, several times per plan; the planner (over
``default_manager()``) and the spec conversions live in :class:`BuilderState`, owned by this
module across calls. The strategy set is the one :func:`select` chose, else
``KVRULES_VLLM_STRATEGIES``, else (unset or ``auto``) ``vllm-0.33``.

Importing this module never imports vLLM: :data:`BUILDER_QUALNAME` names a class that is made on
first access (module ``__getattr__``), subclassing vLLM's ``KVCacheConfigBuilder`` then.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvrules import logs
from kvrules.errors import ConfigError
from kvrules.integrations import vllm_fallback as fallback
from kvrules.integrations import vllm_log as vllm_log_lines
from kvrules.integrations.vllm033_specs import carried_fields, from_vllm033_spec, to_vllm033_spec
from kvrules.integrations.vllm_config import config_value, read_vllm033_config
from kvrules.integrations.vllm_lines import BUILDER_MODULE
from kvrules.integrations.vllm_specs import ConversionCache, VllmClasses, VllmNotInstalledError, vllm_classes
from kvrules.pipeline import Planner
from kvrules.plan import BackingTensor, KVCacheGroup, WorkerPlan, backing_tensors
from kvrules.plugin.manager import KVRulesPluginManager, default_manager
from kvrules.plugin.presets import StrategySpec
from kvrules.specs.base import KVCacheSpec

#: the qualified name vLLM's platform hook returns to select kvrules
BUILDER_QUALNAME = "kvrules.integrations.vllm033.KVRulesKVCacheConfigBuilder"
#: vLLM 0.33's module holding the abstract builder
BUILDER_BASE_MODULE = BUILDER_MODULE
#: environment variable naming the strategy set (shared with the 0.28 line)
STRATEGIES_ENV = "KVRULES_VLLM_STRATEGIES"
#: the line this module answers
LINE = "0.33"
#: vLLM's operators read vLLM's log: what kvrules did inside the engine is said there too
vllm_log = vllm_log_lines.vllm_log
#: the preset that reproduces vLLM 0.33 (``auto`` / unset on this line)
LINE_PRESET = "vllm-0.33"
#: the ``CacheConfig`` field vLLM copies into every ``KVCacheConfig`` it places
RETENTION = "prefix_cache_retention_interval"
#: vLLM 0.33's own builder (what its platform hook names by default)
DEFAULT_BUILDER_QUALNAME = "vllm.v1.core.kv_cache_planning.DefaultKVCacheConfigBuilder"


def parse_strategies(text: str | None, line_preset: str) -> StrategySpec:
    """``None`` / ``""`` / ``"auto"`` -> ``line_preset``; ``"default"`` -> ``"default"``;
    ``"vllm-0.33,min-padding"`` -> ``["vllm-0.33", "min-padding"]``."""
    names = [part.strip() for part in (text or "").split(",") if part.strip()]
    if not names or names == ["auto"]:
        return line_preset
    names = [line_preset if n == "auto" else n for n in names]
    return names[0] if len(names) == 1 else names


def strategy_key(strategies: StrategySpec) -> tuple[str, ...]:
    """A strategy setting as a hashable key (``None``: ``("",)``)."""
    if strategies is None:
        return ("",)
    return (strategies,) if isinstance(strategies, str) else tuple(strategies)


@dataclass
class BuilderState:
    """What outlives a builder instance: the planner of one strategy set and the conversions.

    :ivar planner: the kvrules planner (over ``default_manager()`` unless given).
    :ivar classes: the vLLM classes results are built from (the installed vLLM's by default).
    :ivar cache: the conversions both ways (by object, then by value; an unchanged spec comes
        back as the very vLLM object).
    """

    planner: Planner
    classes_: VllmClasses | None = None
    cache: ConversionCache = field(default_factory=lambda: ConversionCache(back_key=_back_key))
    decisions: tuple[Any, ...] = ()

    @property
    def classes(self) -> VllmClasses:
        """The vLLM classes (imported on first use)."""
        if self.classes_ is None:
            self.classes_ = vllm_classes()
        return self.classes_

    @property
    def strategy_set(self) -> str:
        """The resolved name of the active set (``vllm-0.33``, ``default``, ...)."""
        return self.planner.strategies.name

    def to_kvrules(self, spec: Any, layer: str) -> KVCacheSpec:
        """kvrules' spec for vLLM's ``spec`` (a group spec's members each through the cache)."""
        return self.cache.to_kvrules(spec, layer, self._convert_in)

    def _convert_in(self, spec: Any, layer: str) -> KVCacheSpec:
        return from_vllm033_spec(
            spec, layer=layer, spec_types=self.planner.registries.spec_types.classes, member=self.to_kvrules
        )

    def to_vllm(self, spec: KVCacheSpec, layer: str, carried: dict[str, Any]) -> Any:
        """vLLM's spec for kvrules' ``spec`` with vLLM's Core fields ``carried`` back: the very
        object it came from when unchanged."""
        return self.cache.to_vllm(
            spec,
            layer,
            lambda kv, name: to_vllm033_spec(kv, classes=self.classes, layer=name, carried=carried),
            target=self.classes.specs.get(type(spec).__name__),
            key=_carried_key(carried),
        )


def _carried_key(carried: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(carried.items()))


def _back_key(spec: Any, layer: str) -> tuple[tuple[str, Any], ...]:
    """The way back to a vLLM spec is keyed by the Core fields it carries."""
    return _carried_key(carried_fields([spec], layer))


_lock = threading.RLock()
_states: dict[tuple[Any, ...], BuilderState] = {}
_selected: StrategySpec = None
_manager: KVRulesPluginManager | None = None


def select(strategies: StrategySpec, plugin_manager: KVRulesPluginManager | None = None) -> None:
    """Make ``strategies`` the set every builder of this process plans with (``None``: back to
    ``KVRULES_VLLM_STRATEGIES`` / ``auto``), over ``plugin_manager`` (``None``:
    ``default_manager()``)."""
    global _selected, _manager
    with _lock:
        _selected = strategies
        _manager = plugin_manager


def active_strategies() -> StrategySpec:
    """The set :func:`select` chose, else ``KVRULES_VLLM_STRATEGIES``, else ``vllm-0.33``."""
    with _lock:
        chosen = _selected
    if chosen is not None:
        return parse_strategies(chosen, LINE_PRESET) if isinstance(chosen, str) else chosen
    return parse_strategies(os.environ.get(STRATEGIES_ENV), LINE_PRESET)


def state(strategies: StrategySpec = None, *, classes: VllmClasses | None = None) -> BuilderState:
    """The shared state of ``strategies`` (the active set when ``None``) over the selected plugin
    manager (else ``default_manager()``), made on first use and again when ``default_manager()``
    was replaced since."""
    resolved = strategies if strategies is not None else active_strategies()
    with _lock:
        manager = _manager if _manager is not None else default_manager()
        key = (*strategy_key(resolved), id(manager))
        found = _states.get(key)
        if found is None or found.planner.plugin_manager is not manager:
            found = BuilderState(Planner(resolved, plugin_manager=manager), classes)
            _states[key] = found
            logs.info("kvrules.vllm.builder", strategy_set=found.strategy_set)
        elif classes is not None:
            found.classes_ = classes
        return found


def reset() -> None:
    """Forget every shared state and the selection (tests; a changed plugin set)."""
    global _selected, _manager
    with _lock:
        _states.clear()
        _announced.clear()
        _selected = None
        _manager = None


# -- grouping ------------------------------------------------------------------------------------
def _to_vllm_group(st: BuilderState, group: KVCacheGroup, originals: Mapping[str, Any]) -> Any:
    names = list(group.layer_names)
    first = names[0] if names else "<empty group>"
    if group.spec.has_members:
        return st.classes.KVCacheGroupSpec(names, _uniform_to_vllm(st, group, originals))
    carried = carried_fields((originals[n] for n in names if n in originals), first)
    return st.classes.KVCacheGroupSpec(names, st.to_vllm(group.spec, first, carried))


def _uniform_to_vllm(st: BuilderState, group: KVCacheGroup, originals: Mapping[str, Any]) -> Any:
    """vLLM's ``UniformTypeKVCacheSpecs`` for a group with members, each member carrying its
    own layer's Core fields (vLLM reads ``max_tp_shards`` member by member)."""
    members = {
        name: st.to_vllm(spec, name, carried_fields([originals[name]] if name in originals else [], name))
        for name, spec in group.spec.members(group.layer_names).items()
    }
    cls = st.classes.specs["UniformTypeKVCacheSpecs"]
    out = cls(block_size=group.spec.block_size, kv_cache_specs=members)
    st.cache.remember(out, group.spec)
    return out


def refuse_unplanned(vllm_config: Any) -> None:
    """Refuse the engine settings kvrules does not plan (the integration then hands the layers to
    vLLM): HiSparse, and a model that declares its own grouping (``SupportsKVCacheGrouping``).

    :raises ConfigError: naming the setting.
    """
    if config_value(vllm_config, "attention_config.hisparse_config") is not None:
        raise ConfigError(
            "vllm_config.attention_config.hisparse_config is set: HiSparse owns its KV-cache grouping "
            "and host pool, which kvrules does not plan"
        )
    if config_value(vllm_config, "model_config.supports_kv_cache_grouping") is True:
        raise ConfigError(
            "the model declares its own KV-cache grouping (SupportsKVCacheGrouping), which kvrules "
            "does not replace"
        )


@dataclass(frozen=True)
class GroupsAnswer:
    """kvrules' answer to ``get_kv_cache_groups``, before any side effect on vLLM's dict.

    :ivar groups: vLLM's ``KVCacheGroupSpec`` list.
    :ivar replaced: layer -> the vLLM spec ``get_kv_cache_groups`` writes into ``kv_cache_spec``
        in place: with ``disable_hybrid_kv_cache_manager``, the layers converted to full attention,
        as vLLM converts them; nothing otherwise (a fallback route's promoted specs live in its
        groups only, and the caller's dict is left as vLLM leaves it).
    :ivar route: the router that grouped the layers (``unified-page``, ``uniform-spec``, ...).
    """

    groups: list[Any]
    replaced: dict[str, Any]
    route: str | None


def answer_groups(st: BuilderState, vllm_config: Any, kv_cache_spec: Mapping[str, Any]) -> GroupsAnswer:
    """kvrules' groups of vLLM's specs, checked to be placeable (bytes per block and one block),
    with nothing changed yet: a failure at any step leaves vLLM's inputs as they were.

    :raises KVRulesError: kvrules cannot plan these specs or these settings.
    """
    refuse_unplanned(vllm_config)
    with _lock:
        _announced.clear()  # a new grouping: its placement is announced again
    originals = dict(kv_cache_spec)
    settings = read_vllm033_config(vllm_config, grouping_only=True)
    given = {name: st.to_kvrules(spec, name) for name, spec in kv_cache_spec.items()}
    grouping = st.planner.groups_of(given, settings.engine)
    st.decisions = decisions = grouping.decisions
    replaced = {}
    if config_value(vllm_config, "scheduler_config.disable_hybrid_kv_cache_manager"):
        replaced = {  # vLLM converts these in place; other routes' promotions stay in the groups
            name: st.to_vllm(spec, name, carried_fields([originals[name]], name))
            for name, spec in grouping.specs.items()
            if name in originals
            and spec is not given[name]
            and type(spec).__name__ != type(originals[name]).__name__
        }
    groups = [_to_vllm_group(st, g, originals) for g in grouping.groups]
    if groups:
        pool_bytes_per_block(st, vllm_config, groups)
        _worker_plan(st, vllm_config, groups, 1)
    st.decisions = decisions
    vllm_log_lines.forward(decisions)
    return GroupsAnswer(groups, replaced, _applied_route(decisions))


def _applied_route(decisions: Sequence[Any]) -> str | None:
    return next((str(d.rule) for d in decisions if d.stage == "route" and d.outcome == "applied"), None)


def get_kv_cache_groups(st: BuilderState, vllm_config: Any, kv_cache_spec: dict[str, Any]) -> list[Any]:
    """vLLM 0.33's ``get_kv_cache_groups`` through kvrules.

    As vLLM does, with ``disable_hybrid_kv_cache_manager`` the layers converted to full attention
    are replaced in ``kv_cache_spec`` in place (only once kvrules' whole answer is ready).
    """
    answer = answer_groups(st, vllm_config, kv_cache_spec)
    kv_cache_spec.update(answer.replaced)
    return answer.groups


# -- placement -----------------------------------------------------------------------------------
def _kvrules_groups(st: BuilderState, kv_cache_groups: Sequence[Any]) -> tuple[KVCacheGroup, ...]:
    out = []
    for g in kv_cache_groups:
        names = tuple(g.layer_names)
        spec = st.to_kvrules(g.kv_cache_spec, names[0] if names else "<empty group>")
        out.append(KVCacheGroup(layer_names=names, spec=spec))
    return tuple(out)


def _worker_plan(
    st: BuilderState, vllm_config: Any, kv_cache_groups: Sequence[Any], num_blocks: int
) -> WorkerPlan:
    """The kvrules layout stage for exactly ``num_blocks`` blocks of these groups."""
    if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
        raise ConfigError(f"num_blocks={num_blocks!r}: the builder places a whole number of blocks >= 1")
    settings = read_vllm033_config(vllm_config, grouping_only=True)
    placed = st.planner.place(_kvrules_groups(st, kv_cache_groups), num_blocks, settings.engine)
    if placed.block_bytes:
        st.decisions = placed.decisions
    return placed.worker


def pool_bytes_per_block(st: BuilderState, vllm_config: Any, kv_cache_groups: Sequence[Any]) -> int | None:
    """Bytes one block costs in the backing (``None`` for a model without KV-cache layers)."""
    settings = read_vllm033_config(vllm_config, grouping_only=True)
    return st.planner.block_bytes(_kvrules_groups(st, kv_cache_groups), settings.engine)


def backing_of_plan(
    plan: WorkerPlan, *, block_outermost: bool, layout: str | None = None
) -> tuple[BackingTensor, ...]:
    """The worker's placement as one backing: the layout's own ``backing`` when it places one,
    else its tensors re-expressed over one backing of ``bytes per block x num_blocks``, strided
    as the KV-cache ``layout`` orders the axes.

    :raises ConfigError: the layout's tensors mix packed and plain tensors (no one-backing form).
    """
    if plan.backing:
        return plan.backing
    if not plan.tensors:
        return ()
    packed = {t.block_stride > 0 for t in plan.tensors}
    if len(packed) > 1:
        raise ConfigError(
            f"layout {plan.layout!r} mixes packed and plain tensors; vLLM 0.33 needs one backing "
            "allocation per worker: choose a strategy set whose layout places one (vllm-0.33, default)"
        )
    block_bytes = sum(t.size for t in plan.tensors) // plan.num_blocks
    if packed == {True}:
        block_bytes = max(t.block_stride for t in plan.tensors)
    return backing_tensors(
        plan.groups, plan.num_blocks, block_bytes, block_outermost=block_outermost, layout=layout
    )


def _vllm_tensor(classes: VllmClasses, t: BackingTensor) -> Any:
    return classes.KVCacheTensor(
        size=t.size,
        layers=list(t.layers),
        layer_stride=t.layer_stride,
        block_stride=t.block_stride,
        offset=t.offset,
        host_resident=t.host_resident,
    )


def get_kv_cache_config_from_groups(
    st: BuilderState, vllm_config: Any, kv_cache_groups: list[Any], num_blocks: int
) -> Any:
    """vLLM 0.33's ``get_kv_cache_config_from_groups`` through kvrules: exactly ``num_blocks``
    blocks, one backing of ``bytes per block x num_blocks``, vLLM's groups kept as given."""
    refuse_unplanned(vllm_config)
    if not kv_cache_groups:  # an attention-free model: BlockPool still needs its null block
        return _kv_cache_config(st, vllm_config, 1, [], [])
    settings = read_vllm033_config(vllm_config, grouping_only=True)
    plan = _worker_plan(st, vllm_config, kv_cache_groups, num_blocks)
    backing = backing_of_plan(
        plan, block_outermost=settings.engine.block_outermost, layout=settings.engine.kv_cache_layout
    )
    announce(st, plan)
    return _kv_cache_config(
        st, vllm_config, num_blocks, [_vllm_tensor(st.classes, t) for t in backing], list(kv_cache_groups)
    )


_announced: set[tuple[Any, ...]] = set()


def announce(st: BuilderState, plan: WorkerPlan) -> None:
    """Say that kvrules placed ``plan`` inside the engine: the event ``kvrules.vllm.planned`` and
    one line on vLLM's log (``vllm.kvrules``), once per distinct placement after each grouping
    (vLLM places the same groups several times: per worker, after converging, for profiling)."""
    layers = sum(len(g.layer_names) for g in plan.groups)
    fields = {
        "strategy_set": st.strategy_set,
        "layers": layers,
        "groups": len(plan.groups),
        "num_blocks": plan.num_blocks,
        "layout": plan.layout,
        "block_bytes": plan.allocated_bytes // plan.num_blocks if plan.num_blocks else 0,
    }
    key = tuple(fields.values())
    with _lock:
        if key in _announced:
            return
        _announced.add(key)
    logs.info("kvrules.vllm.planned", **fields)
    vllm_log.info(
        "kvrules planned the KV cache (strategy set %(strategy_set)s): %(layers)d layers in %(groups)d "
        "groups, %(num_blocks)d blocks of %(block_bytes)d bytes (%(layout)s)",
        fields,
    )


def _kv_cache_config(
    st: BuilderState, vllm_config: Any, num_blocks: int, tensors: list[Any], groups: list[Any]
) -> Any:
    """vLLM's ``KVCacheConfig``, with ``prefix_cache_retention_interval`` copied from the cache
    config as vLLM copies it (where both have the field)."""
    extra: dict[str, Any] = {}
    names = {f.name for f in dataclasses.fields(st.classes.KVCacheConfig)}
    cache = getattr(vllm_config, "cache_config", None)
    if RETENTION in names and hasattr(cache, RETENTION):
        extra[RETENTION] = getattr(cache, RETENTION)
    return st.classes.KVCacheConfig(
        num_blocks=num_blocks, kv_cache_tensors=tensors, kv_cache_groups=groups, **extra
    )


_vllm_hook: Callable[[Any], str] | None = None


def remember_vllm_hook(hook: Callable[[Any], str] | None) -> None:
    """What the platform's own ``get_kv_cache_config_builder_cls`` answered before kvrules took it
    (``hook(vllm_config)`` -> a qualified name): the builder a fallback hands the layers to.
    ``None``: vLLM's default builder."""
    global _vllm_hook
    with _lock:
        _vllm_hook = hook


def vllm_builder(vllm_config: Any) -> Any:
    """A new instance of the builder vLLM would use without kvrules (the platform's own choice,
    else :data:`DEFAULT_BUILDER_QUALNAME`).

    :raises VllmNotInstalledError: that class cannot be imported.
    """
    with _lock:
        hook = _vllm_hook
    qualname = hook(vllm_config) if hook is not None else DEFAULT_BUILDER_QUALNAME
    if qualname == BUILDER_QUALNAME:
        qualname = DEFAULT_BUILDER_QUALNAME
    module, _, name = qualname.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)()
    except (ImportError, AttributeError) as exc:
        raise VllmNotInstalledError(
            f"vLLM's own KV-cache config builder {qualname} is not importable ({exc})"
        ) from exc


def group_layers(kv_cache_groups: Sequence[Any]) -> list[str]:
    """Every layer of vLLM's groups, group by group."""
    return [name for g in kv_cache_groups for name in g.layer_names]


class KVRulesBuilderMethods:
    """The builder's methods, without vLLM's base class (mixed into it on first access).

    Each answers through :func:`kvrules.integrations.vllm_fallback.answer`: kvrules plans, and
    where it cannot, vLLM's own builder (:func:`vllm_builder`) answers for those layers.
    """

    def get_kv_cache_groups(self, vllm_config: Any, kv_cache_spec: dict[str, Any]) -> list[Any]:
        """The KV-cache groups of the whole model (see module docstring)."""
        return fallback.answer(
            fallback.GROUPING,
            "KVCacheConfigBuilder.get_kv_cache_groups",
            LINE,
            kv_cache_spec,
            lambda: get_kv_cache_groups(state(), vllm_config, kv_cache_spec),
            lambda: vllm_builder(vllm_config).get_kv_cache_groups(vllm_config, kv_cache_spec),
        )

    def get_kv_cache_config_from_groups(
        self, vllm_config: Any, kv_cache_groups: list[Any], num_blocks: int
    ) -> Any:
        """The placement of exactly ``num_blocks`` blocks of ``kv_cache_groups``."""
        return fallback.answer(
            fallback.PLACEMENT,
            "KVCacheConfigBuilder.get_kv_cache_config_from_groups",
            LINE,
            group_layers(kv_cache_groups),
            lambda: get_kv_cache_config_from_groups(state(), vllm_config, kv_cache_groups, num_blocks),
            lambda: vllm_builder(vllm_config).get_kv_cache_config_from_groups(
                vllm_config, kv_cache_groups, num_blocks
            ),
        )

    def _get_pool_bytes_per_block(self, vllm_config: Any, kv_cache_groups: list[Any]) -> int | None:
        """Bytes per block, declared so Core need not probe a one-block placement."""
        found: int | None = fallback.answer(
            fallback.PLACEMENT,
            "KVCacheConfigBuilder._get_pool_bytes_per_block",
            LINE,
            group_layers(kv_cache_groups),
            lambda: pool_bytes_per_block(state(), vllm_config, kv_cache_groups),
            lambda: vllm_builder(vllm_config)._get_pool_bytes_per_block(vllm_config, kv_cache_groups),
        )
        return found


_made: dict[type, type] = {}


def builder_class() -> type:
    """``KVRulesKVCacheConfigBuilder``: :class:`KVRulesBuilderMethods` over vLLM's abstract
    ``KVCacheConfigBuilder`` (imported now; one class per base class).

    :raises VllmNotInstalledError: vLLM 0.33's builder module is not importable.
    """
    base = _builder_base()
    with _lock:
        made = _made.get(base)
        if made is None:
            made = type(
                "KVRulesKVCacheConfigBuilder", (KVRulesBuilderMethods, base), {"__module__": __name__}
            )
            _made[base] = made
        return made


def _builder_base() -> type:
    try:
        module = importlib.import_module(BUILDER_BASE_MODULE)
    except ImportError as exc:
        raise VllmNotInstalledError(
            f"{BUILDER_QUALNAME} needs vLLM 0.33's {BUILDER_BASE_MODULE} ({exc}); install vllm>=0.33"
        ) from exc
    base = getattr(module, "KVCacheConfigBuilder", None)
    if not isinstance(base, type):
        raise VllmNotInstalledError(
            f"{BUILDER_QUALNAME} needs the class KVCacheConfigBuilder in {BUILDER_BASE_MODULE}, found "
            f"{base!r}: this vLLM is not a 0.33 line; install vllm>=0.33"
        )
    return base


def __getattr__(name: str) -> Any:
    if name == "KVRulesKVCacheConfigBuilder":
        return builder_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BUILDER_QUALNAME",
    "BuilderState",
    "KVRulesBuilderMethods",
    "LINE_PRESET",
    "DEFAULT_BUILDER_QUALNAME",
    "GroupsAnswer",
    "active_strategies",
    "answer_groups",
    "backing_of_plan",
    "builder_class",
    "get_kv_cache_config_from_groups",
    "get_kv_cache_groups",
    "parse_strategies",
    "pool_bytes_per_block",
    "refuse_unplanned",
    "remember_vllm_hook",
    "reset",
    "select",
    "state",
    "vllm_builder",
]
