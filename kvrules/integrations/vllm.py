"""kvrules as a drop-in KV-cache planner for vLLM (``pip install 'kvrules[vllm]'``).

Three layers, each usable on its own:

* conversion: :func:`from_vllm_specs` / :func:`to_vllm_specs` (vLLM spec objects <-> kvrules
  specs, by field introspection, :mod:`kvrules.integrations.vllm_specs`) and
  :func:`to_kv_cache_configs` (a :class:`kvrules.Plan` -> vLLM ``KVCacheConfig`` per worker);
* drop-in functions with vLLM 0.28's signatures and side effects:
  :func:`unify_kv_cache_spec_page_size`, :func:`get_kv_cache_groups`, :func:`get_kv_cache_configs`;
* :func:`install` / :func:`uninstall`: route vLLM's own planning through kvrules. This is the
  interim seam until vLLM offers a planner hook: it replaces those three attributes of
  ``vllm.v1.core.kv_cache_utils`` (and of every loaded ``vllm.*`` module that imported them).

Importing this module never imports vLLM. Errors derive from :class:`kvrules.KVRulesError` and
also from the built-in types vLLM raises at the same place (``NotImplementedError`` for page
unification, ``ValueError`` for memory and conversion, ``AssertionError`` for workers that
disagree about a layer), so callers written against vLLM keep working.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from kvrules import logs
from kvrules.config import EngineConfig
from kvrules.decisions import Decision
from kvrules.errors import CapacityError, ConfigError, GroupingError, PluginError
from kvrules.integrations import vllm032, vllm033, vllm_lines, vllm_platform
from kvrules.integrations import vllm_fallback as fallback
from kvrules.integrations import vllm_log as vllm_log_lines
from kvrules.integrations.vllm_config import VllmSettings, read_vllm_config
from kvrules.integrations.vllm_lines import UnknownVllmSeamError, VllmLine
from kvrules.integrations.vllm_patches import Patches
from kvrules.integrations.vllm_specs import (
    ConversionCache,
    VllmClasses,
    VllmNotInstalledError,
    from_vllm_spec,
    from_vllm_specs,
    to_vllm_spec,
    to_vllm_specs,
    vllm_classes,
    vllm_version,
)
from kvrules.pipeline import Planner
from kvrules.pipeline.convert import convert
from kvrules.plan import KVCacheGroup, Plan, WorkerPlan
from kvrules.plugin.manager import KVRulesPluginManager, default_manager
from kvrules.plugin.presets import StrategySpec
from kvrules.specs import MambaSpec, SlidingWindowSpec
from kvrules.specs.base import KVCacheSpec

#: vLLM's operators read vLLM's log: the decisions vLLM itself reports there are repeated here
vllm_log = vllm_log_lines.vllm_log

#: the module whose functions :func:`install` replaces (0.27-0.32)
UTILS_MODULE = vllm_lines.UTILS_MODULE
#: environment variable read by the vLLM general plugin (see :func:`vllm_general_plugin`)
STRATEGIES_ENV = "KVRULES_VLLM_STRATEGIES"
DEFAULT_STRATEGIES = "vllm"


class WorkerSpecMismatchError(GroupingError, AssertionError):
    """Two workers report different specs for the same layer (vLLM asserts here)."""


class VllmCapacityError(CapacityError):
    """Not enough KV-cache memory for one request of ``max_model_len`` (vLLM's ``ValueError``)."""


# -- plan -> vLLM ----------------------------------------------------------------------------
#: builds vLLM's spec for a kvrules spec (the spec, the layer it stands for in error messages)
SpecBuilder = Callable[[KVCacheSpec, str], Any]


def _spec_builder(classes: VllmClasses, cache: ConversionCache | None) -> SpecBuilder:
    """``to_vllm_spec`` for ``classes``, through ``cache`` when given (an unchanged spec, a group
    spec's members included, is then the very vLLM object it came from), else once per spec
    object of one call."""
    made = cache if cache is not None else ConversionCache()

    def build(spec: KVCacheSpec, layer: str) -> Any:
        return made.to_vllm(
            spec,
            layer,
            lambda kv, name: to_vllm_spec(kv, layer=name, classes=classes, member=build),
            target=classes.specs.get(type(spec).__name__),
        )

    return build


def _tensor(tensor: Any, classes: VllmClasses) -> Any:
    names = set(getattr(classes.KVCacheTensor, "__dataclass_fields__", {}))
    kwargs: dict[str, Any] = {"size": tensor.size, "shared_by": list(tensor.shared_by)}
    for field in ("offset", "block_stride"):
        value = getattr(tensor, field)
        if field in names:
            kwargs[field] = value
        elif value:
            raise ConfigError(
                f"the plan packs tensor {list(tensor.shared_by)} at {field}={value}, but vLLM "
                f"{classes.version}'s KVCacheTensor has no {field!r} field; use a vLLM with the packed "
                "layout (0.28+) or a strategy set without the 'packed' layout"
            )
    return classes.KVCacheTensor(**kwargs)


def to_kv_cache_config(
    worker: WorkerPlan, *, classes: VllmClasses | None = None, cache: ConversionCache | None = None
) -> Any:
    """vLLM's ``KVCacheConfig`` for one worker of a plan (groups projected onto the worker).

    :param cache: the conversions to reuse and extend (an adapter's); one for this call when omitted.
    """
    resolved = classes if classes is not None else vllm_classes()
    return resolved.KVCacheConfig(
        num_blocks=worker.num_blocks,
        kv_cache_tensors=[_tensor(t, resolved) for t in worker.tensors],
        kv_cache_groups=to_kv_cache_groups(worker.groups, classes=resolved, cache=cache),
    )


def to_kv_cache_configs(
    plan: Plan, *, classes: VllmClasses | None = None, cache: ConversionCache | None = None
) -> list[Any]:
    """vLLM's ``KVCacheConfig`` for every worker of ``plan``, in worker order (``cache``: as
    :func:`to_kv_cache_config`; one for all workers when omitted)."""
    resolved = classes if classes is not None else vllm_classes()
    shared = cache if cache is not None else ConversionCache()
    return [to_kv_cache_config(w, classes=resolved, cache=shared) for w in plan.workers]


def to_kv_cache_groups(
    groups: Sequence[KVCacheGroup],
    *,
    classes: VllmClasses | None = None,
    cache: ConversionCache | None = None,
) -> list[Any]:
    """vLLM's ``KVCacheGroupSpec`` list for kvrules groups (``cache``: as :func:`to_kv_cache_config`)."""
    resolved = classes if classes is not None else vllm_classes()
    build = _spec_builder(resolved, cache)
    return [
        resolved.KVCacheGroupSpec(
            list(g.layer_names),
            build(g.spec, g.layer_names[0] if g.layer_names else "<empty group>"),
            is_eagle_group=g.is_eagle_group and bool(g.layer_names),
        )
        for g in groups
    ]


# -- the adapter -----------------------------------------------------------------------------
def _route(
    planner: Planner, specs: Mapping[str, KVCacheSpec], config: EngineConfig
) -> tuple[list[KVCacheGroup], Mapping[str, KVCacheSpec], tuple[Decision, ...]]:
    """Convert and route ``specs`` with ``planner``'s rules, as ``Planner.plan`` does before layout."""
    ctx, ask = planner.context(config)
    converted = convert(specs, ctx, ask)
    grouping = planner.group(converted, ctx, ask)
    return list(grouping.groups), converted, ctx.decisions.decisions()


def _check_same_across_workers(kv_cache_specs: Sequence[Mapping[str, Any]]) -> None:
    if len(kv_cache_specs) < 2:
        return
    seen: dict[str, tuple[int, Any]] = {}
    for index, worker in enumerate(kv_cache_specs):
        for name, spec in worker.items():
            first = seen.setdefault(name, (index, spec))
            if first[1] != spec:
                raise WorkerSpecMismatchError(
                    f"layer {name!r} has different specs on worker {first[0]} ({first[1]!r}) and worker "
                    f"{index} ({spec!r}); every worker must report the same spec for a layer it shares"
                )


def _with_extra_retained(workers: list[dict[str, KVCacheSpec]], tokens: int) -> list[dict[str, KVCacheSpec]]:
    """Set ``extra_retained_tokens`` on every sliding-window layer, as vLLM 0.28 does before grouping
    (once per spec object: layers that shared a spec share the new one)."""
    out = []
    done: dict[int, KVCacheSpec] = {}
    for worker in workers:
        fixed = dict(worker)
        for name, spec in worker.items():
            if isinstance(spec, SlidingWindowSpec) and spec.extra_retained_tokens != tokens:
                new = done.get(id(spec))
                if new is None:
                    new = done[id(spec)] = spec.evolve(extra_retained_tokens=tokens)
                fixed[name] = new
        out.append(fixed)
    return out


def _check_mamba_mode(workers: Sequence[Mapping[str, KVCacheSpec]], mode: str | None) -> None:
    if mode is None:
        return
    for worker in workers:
        for name, spec in worker.items():
            if isinstance(spec, MambaSpec) and spec.mamba_cache_mode != mode:
                raise ConfigError(
                    f"layer {name!r}: MambaSpec.mamba_cache_mode={spec.mamba_cache_mode!r} but "
                    f"vllm_config.cache_config.mamba_cache_mode={mode!r}; vLLM sizes Mamba memory by the "
                    "config and kvrules by the spec, so they must agree: build the spec from the same config"
                )


@dataclass
class AdapterState:
    """What outlives an adapter (``install()`` makes a new one each time): the planner of one
    strategy set over ``default_manager()`` and the conversions both ways."""

    planner: Planner
    cache: ConversionCache = dataclasses.field(default_factory=ConversionCache)


_states: dict[tuple[str, ...], AdapterState] = {}


def adapter_state(strategies: StrategySpec = DEFAULT_STRATEGIES) -> AdapterState:
    """The process's shared state of ``strategies`` (made on first use, and again when
    ``default_manager()`` was replaced since).

    :raises PluginError: an unknown strategy name.
    """
    key = vllm033.strategy_key(strategies)
    with _lock:
        found = _states.get(key)
        if found is None or found.planner.plugin_manager is not default_manager():
            found = _states[key] = AdapterState(Planner(strategies))
        return found


def reset() -> None:
    """Forget every shared adapter state and the default adapter (tests; a changed plugin set)."""
    global _default_adapter
    with _lock:
        _states.clear()
        _default_adapter = None


class VllmAdapter:
    """The three drop-in functions, planning with one kvrules strategy set.

    Without ``plugin_manager`` the adapter plans with the process's shared state of its set
    (:func:`adapter_state`), so adapters made one after another (``install()`` makes one each
    time) keep one planner and one conversion cache: an unchanged vLLM spec object converts
    once, and an unchanged spec comes back as the very vLLM object.

    :param strategies: a preset name (``"vllm"`` reproduces vLLM 0.28; ``"default"``), or a list
        of rule names, as :class:`kvrules.Planner` takes.
    :param plugin_manager: a manager from :func:`kvrules.get_plugin_manager` (a planner and a
        cache of this adapter's own).
    :param classes: the vLLM classes to build (the installed vLLM's, imported on first use).
    """

    def __init__(
        self,
        strategies: StrategySpec = DEFAULT_STRATEGIES,
        *,
        plugin_manager: KVRulesPluginManager | None = None,
        classes: VllmClasses | None = None,
    ) -> None:
        if plugin_manager is None:
            state = adapter_state(strategies)
        else:
            state = AdapterState(Planner(strategies, plugin_manager=plugin_manager))
        self.planner = state.planner
        self.cache = state.cache
        self._classes = classes

    @property
    def classes(self) -> VllmClasses:
        """The vLLM classes results are built from."""
        if self._classes is None:
            self._classes = vllm_classes()
        return self._classes

    @property
    def strategy_key(self) -> tuple[str, ...]:
        """The active rule names, kind by kind (two adapters with equal keys plan alike)."""
        return (self.planner.strategies.name, *self.planner.strategies.names())

    def _from_vllm(self, specs: Mapping[str, Any]) -> dict[str, KVCacheSpec]:
        return {name: self.cache.to_kvrules(spec, name, self._convert_in) for name, spec in specs.items()}

    def _convert_in(self, spec: Any, layer: str) -> KVCacheSpec:
        return from_vllm_spec(spec, layer=layer, spec_types=self.planner.registries.spec_types.classes)

    def unify_kv_cache_spec_page_size(self, kv_cache_spec: dict[str, Any]) -> dict[str, Any]:
        """vLLM's ``unify_kv_cache_spec_page_size``: every page brought to the largest.

        Returns ``kv_cache_spec`` itself when the pages are already equal; layers that keep
        their spec keep the very object they came with.

        :raises UnificationError: (a ``NotImplementedError``) a page no active rule can unify.
        """
        specs = self._from_vllm(kv_cache_spec)
        result = self.planner.unify(specs)
        if result.specs is specs:
            return kv_cache_spec
        return {
            name: kv_cache_spec[name]
            if new == specs[name]
            else to_vllm_spec(new, layer=name, classes=self.classes)
            for name, new in result.specs.items()
        }

    def get_kv_cache_groups(self, vllm_config: Any, kv_cache_spec: dict[str, Any]) -> list[Any]:
        """vLLM's ``get_kv_cache_groups``: the KV-cache groups of the whole model.

        As in vLLM, with ``scheduler_config.disable_hybrid_kv_cache_manager`` set, the layers
        converted to full attention are replaced in ``kv_cache_spec`` in place.
        """
        settings = read_vllm_config(vllm_config, grouping_only=True)
        specs = self._from_vllm(kv_cache_spec)
        groups, converted, decisions = _route(self.planner, specs, settings.engine)
        if settings.engine.disable_hybrid_kv_cache_manager:
            for name, new in converted.items():
                if new is not specs[name]:
                    kv_cache_spec[name] = to_vllm_spec(new, layer=name, classes=self.classes)
        vllm_log_lines.forward(decisions)
        return to_kv_cache_groups(groups, classes=self.classes, cache=self.cache)

    def plan(
        self, vllm_config: Any, kv_cache_specs: Sequence[Mapping[str, Any]], available_memory: Sequence[int]
    ) -> Plan:
        """The kvrules plan, decisions included, for vLLM's inputs (what :meth:`get_kv_cache_configs`
        converts); no side effect on ``vllm_config``."""
        return self._plan(read_vllm_config(vllm_config), kv_cache_specs, available_memory)

    def _retains_extra_tokens(self) -> bool:
        """vLLM sizes sliding windows by ``extra_retained_tokens`` only where its spec has the field (0.28+)."""
        cls = self.classes.specs.get("SlidingWindowSpec")
        return cls is not None and "extra_retained_tokens" in {f.name for f in dataclasses.fields(cls)}

    def _plan(
        self,
        settings: VllmSettings,
        kv_cache_specs: Sequence[Mapping[str, Any]],
        available_memory: Sequence[int],
    ) -> Plan:
        if settings.engine.extra_retained_tokens and not self._retains_extra_tokens():
            settings = dataclasses.replace(
                settings, engine=dataclasses.replace(settings.engine, extra_retained_tokens=0)
            )
        _check_same_across_workers(kv_cache_specs)
        workers = [self._from_vllm(worker) for worker in kv_cache_specs]
        workers = _with_extra_retained(workers, settings.engine.extra_retained_tokens)
        _check_mamba_mode(workers, settings.mamba_cache_mode)
        memory = [int(m) for m in available_memory]
        try:
            plan = self.planner.plan(list(workers), memory, settings.engine)
        except CapacityError as exc:
            raise VllmCapacityError(
                f"{exc} (vLLM: one request of the model's max seq len ({settings.engine.max_model_len}) "
                "does not fit in the KV cache memory.)",
                needed_bytes=exc.needed_bytes,
                available_bytes=exc.available_bytes,
                max_fitting_len=exc.max_fitting_len,
            ) from exc
        if settings.cross_layer_blocks and sum(1 for g in plan.groups if g.layer_names) > 1:
            raise ConfigError(
                "vllm_config.kv_transfer_config asks for packed cross-layer blocks "
                "(enable_cross_layers_blocks), which the kvrules integration does not plan; unset it "
                "or plan with vLLM's own planner (kvrules.integrations.vllm.uninstall())"
            )
        return plan

    def get_kv_cache_configs(
        self, vllm_config: Any, kv_cache_specs: list[dict[str, Any]], available_memory: list[int]
    ) -> list[Any]:
        """vLLM's ``get_kv_cache_configs``: one ``KVCacheConfig`` per worker, equal ``num_blocks``.

        Side effect as in vLLM: with auto-fit (``model_config.original_max_model_len == -1``)
        a shorter fitting length is written to ``vllm_config.model_config.max_model_len``.

        :raises VllmCapacityError: (a ``ValueError``) one request of ``max_model_len`` does not fit.
        :raises WorkerSpecMismatchError: (an ``AssertionError``) workers disagree about a layer.
        """
        settings = read_vllm_config(vllm_config)
        plan = self._plan(settings, kv_cache_specs, available_memory)
        if settings.engine.auto_fit_max_model_len and plan.max_model_len < settings.engine.max_model_len:
            vllm_config.model_config.max_model_len = plan.max_model_len
        vllm_log_lines.forward(plan.decisions)
        return to_kv_cache_configs(plan, classes=self.classes, cache=self.cache)


# -- module-level drop-ins (the 0.28 line) -----------------------------------------------------
_lock = threading.RLock()
_default_adapter: VllmAdapter | None = None


@dataclass
class _Installation:
    """What :func:`install` put in place: the line, the replacements, and on the 0.28 line the
    adapter that answers them."""

    line: VllmLine
    patches: Patches | None
    adapter: VllmAdapter | None
    key: tuple[Any, ...]
    strategy_set: str


_installation: _Installation | None = None


def _adapter() -> VllmAdapter:
    global _default_adapter
    with _lock:
        if _installation is not None and _installation.adapter is not None:
            return _installation.adapter
        if _default_adapter is None:
            _default_adapter = VllmAdapter(DEFAULT_STRATEGIES)
        return _default_adapter


def _answer(seam: str, layers: Iterable[str], *args: Any) -> Any:
    """The adapter's method ``seam`` on ``args``, through the fallback when :func:`install`
    replaced vLLM's ``seam`` (vLLM's own function answers where kvrules cannot); called
    directly, kvrules' answer or its error."""
    with _lock:
        inst = _installation
    patches = inst.patches if inst is not None and inst.line.name == "0.28" else None

    def ours() -> Any:
        return getattr(_adapter(), seam)(*args)

    if patches is None:
        return ours()
    return fallback.answer(
        fallback.GROUPING, seam, "0.28", layers, ours, lambda: patches.original(seam)(*args)
    )


def unify_kv_cache_spec_page_size(kv_cache_spec: dict[str, Any]) -> dict[str, Any]:
    """Drop-in for vLLM 0.28's function of that name (the installed strategy set, else ``vllm``)."""
    return _answer(  # type: ignore[no-any-return]
        "unify_kv_cache_spec_page_size", kv_cache_spec, kv_cache_spec
    )


def get_kv_cache_groups(vllm_config: Any, kv_cache_spec: dict[str, Any]) -> list[Any]:
    """Drop-in for vLLM 0.28's function of that name (the installed strategy set, else ``vllm``)."""
    return _answer(  # type: ignore[no-any-return]
        "get_kv_cache_groups", kv_cache_spec, vllm_config, kv_cache_spec
    )


def get_kv_cache_configs(
    vllm_config: Any, kv_cache_specs: list[dict[str, Any]], available_memory: list[int]
) -> list[Any]:
    """Drop-in for vLLM 0.28's function of that name (the installed strategy set, else ``vllm``)."""
    layers = [name for worker in kv_cache_specs for name in worker]
    return _answer(  # type: ignore[no-any-return]
        "get_kv_cache_configs", layers, vllm_config, kv_cache_specs, available_memory
    )


_DROP_INS: dict[str, Callable[..., Any]] = {
    "unify_kv_cache_spec_page_size": unify_kv_cache_spec_page_size,
    "get_kv_cache_groups": get_kv_cache_groups,
    "get_kv_cache_configs": get_kv_cache_configs,
}
#: the functions :func:`install` replaces (0.28 line), by name
DROP_IN_NAMES: tuple[str, ...] = tuple(_DROP_INS)


# -- install / uninstall ---------------------------------------------------------------------
def _import_utils() -> ModuleType:
    try:
        return importlib.import_module(UTILS_MODULE)
    except ImportError as exc:
        raise VllmNotInstalledError(
            f"cannot route vLLM's planning through kvrules: {UTILS_MODULE} is not importable ({exc}); "
            "install vLLM with `pip install 'kvrules[vllm]'`"
        ) from exc


def resolve_strategies(strategies: StrategySpec, line: VllmLine) -> StrategySpec:
    """``None`` or ``"auto"`` -> the line's preset; ``auto`` inside a list likewise."""
    if strategies is None:
        return line.preset
    if isinstance(strategies, str):
        return vllm033.parse_strategies(strategies, line.preset)
    return [line.preset if n == "auto" else n for n in strategies]


def install(strategies: StrategySpec = None, *, plugin_manager: KVRulesPluginManager | None = None) -> None:
    """Route the installed vLLM's KV-cache planning through kvrules, on whichever line it is.

    The line is told by its planning seam (:mod:`kvrules.integrations.vllm_lines`):

    * 0.27-0.28: replaces ``unify_kv_cache_spec_page_size``, ``get_kv_cache_groups`` and
      ``get_kv_cache_configs`` in ``vllm.v1.core.kv_cache_utils`` and in every loaded ``vllm.*``
      module that imported them;
    * 0.29-0.32: replaces ``get_kv_cache_groups``, ``_pool_bytes_per_block`` and
      ``get_kv_cache_config_from_groups`` there (:mod:`kvrules.integrations.vllm032`);
    * 0.33+: sets the platform hook to kvrules' builder (:func:`vllm_platform.set_platform_hook`).

    Where kvrules cannot plan an engine's specs, vLLM's own functions answer for them
    (:mod:`kvrules.integrations.vllm_fallback`). When the set has an aligner vLLM lacks
    (``default``), the active platform's ``update_block_size_for_backend`` is wrapped too
    (:mod:`kvrules.integrations.vllm_align`). :func:`uninstall` undoes all of it. Idempotent:
    installing the same set again only re-applies replacements that were undone (e.g. by
    ``importlib.reload`` of vLLM's module); another set replaces the active one. Logs one
    ``kvrules.vllm.installed`` event when it acts.

    :param strategies: ``None`` or ``"auto"``: the line's preset (``vllm-0.28`` / ``vllm-0.33``);
        ``"default"``, another preset, or a list of rule names.
    :raises VllmNotInstalledError: vLLM is not importable.
    :raises UnknownVllmSeamError: the installed vLLM's seam is none kvrules knows (naming it).
    :raises PluginError: an unknown strategy name.
    """
    line = vllm_lines.detect()
    resolved = resolve_strategies(strategies, line)
    if line.name == "0.33":
        _install_033(line, resolved, plugin_manager)
        return
    utils = _import_utils()
    adapter: VllmAdapter | None = None
    if line.name == "0.28":
        adapter = made = VllmAdapter(resolved, plugin_manager=plugin_manager)
        set_name = made.planner.strategies.name
        key: tuple[Any, ...] = (*made.strategy_key, id(made.planner.plugin_manager))
        ours = _DROP_INS
    else:
        vllm033.select(resolved, plugin_manager)
        set_name = vllm033.state().strategy_set
        key, ours = (set_name, id(vllm033.state().planner.plugin_manager)), vllm032.DROP_INS
    _patch_line(line, utils, ours, adapter, key, set_name)


def _patch_line(
    line: VllmLine,
    utils: ModuleType,
    ours: Mapping[str, Callable[..., Any]],
    adapter: VllmAdapter | None,
    key: tuple[Any, ...],
    set_name: str,
) -> None:
    global _installation
    with _lock:
        current = _installation
        same = current is not None and current.line == line and current.key == key
        if current is not None and not same:
            _undo(current)
            current = None
        patches = current.patches if current is not None and current.patches is not None else Patches(ours)
        fresh = patches.apply(utils)
        if current is not None and not fresh:
            _wrap_engine_start(line)
            return
        _installation = _Installation(
            line, patches, adapter if current is None else current.adapter, key, set_name
        )
        if line.name == "0.32":
            vllm032.bind(patches)
    wrapped = _wrap_engine_start(line)
    _log_installed(set_name, line, patches.names(), wrapped)


def _log_installed(set_name: str, line: VllmLine, replaced: list[str], engine_start: str | None) -> None:
    logs.info(
        "kvrules.vllm.installed",
        strategy_set=set_name,
        vllm_version=vllm_version(),
        vllm_line=line.releases,
        replaced=replaced,
        engine_start=engine_start,
    )


def _install_033(
    line: VllmLine, strategies: StrategySpec, plugin_manager: KVRulesPluginManager | None
) -> None:
    global _installation
    with _lock:
        if _installation is not None and _installation.line != line:
            _undo(_installation)
        vllm033.select(strategies, plugin_manager)
        set_name = vllm033.state().strategy_set
        _installation = _Installation(line, None, None, (set_name,), set_name)
    vllm_platform.set_platform_hook(strategies=strategies, plugin_manager=plugin_manager)
    hook = f"{vllm_platform.current_platform_class().__qualname__}.{vllm_platform.HOOK_NAME}"
    wrapped = _engine_start_platform.__qualname__ if _engine_start_platform is not None else None
    _log_installed(set_name, line, [hook], wrapped)


_engine_start_platform: type | None = None


def _installed_planner() -> Planner:
    """The planner of the installed set (what the engine-start wrapper asks at every call)."""
    with _lock:
        inst = _installation
    if inst is not None and inst.adapter is None:
        return vllm033.state().planner
    return _adapter().planner


def _wrap_engine_start(line: VllmLine) -> str | None:
    """Wrap the active platform's ``update_block_size_for_backend`` when the installed set has an
    aligner vLLM's line lacks (``default``: ``draft-aware-align``), else undo an earlier wrap;
    returns the wrapped class's name. Without ``vllm.platforms`` (a stand-in vLLM: a real one
    always has it) nothing is wrapped."""
    global _engine_start_platform
    try:
        cls = vllm_platform.wrap_engine_start(_installed_planner, line.name)
    except VllmNotInstalledError:
        return None
    with _lock:
        old, _engine_start_platform = _engine_start_platform, cls
    if old is not None and old is not cls:
        vllm_platform.unwrap_engine_start(old)
    return None if cls is None else cls.__qualname__


def _undo(current: _Installation) -> int:
    """Take ``current`` out (under ``_lock``); returns how many replacements were undone."""
    global _installation
    restored = current.patches.restore() if current.patches is not None else 0
    if current.line.name == "0.32":
        vllm032.bind(None)
        vllm033.select(None)
    if current.line.name == "0.33":
        vllm_platform.restore_platform_hook()
        restored += 1
    _installation = None
    return restored


def uninstall() -> None:
    """Give vLLM its own planning back (a no-op when not installed)."""
    with _lock:
        current = _installation
        if current is None:
            return
        restored = _undo(current)
    _unwrap_engine_start()
    logs.info("kvrules.vllm.uninstalled", restored=restored)


def _unwrap_engine_start() -> None:
    """Give the platform wrapped by :func:`install` its own ``update_block_size_for_backend`` back."""
    global _engine_start_platform
    with _lock:
        cls, _engine_start_platform = _engine_start_platform, None
    if cls is not None:
        vllm_platform.unwrap_engine_start(cls)


def installed_strategies() -> str | None:
    """The name of the installed strategy set, or ``None`` when vLLM plans by itself."""
    with _lock:
        return None if _installation is None else _installation.strategy_set


def installed_line() -> VllmLine | None:
    """The vLLM line :func:`install` plugged into, or ``None`` when vLLM plans by itself."""
    with _lock:
        return None if _installation is None else _installation.line


def fallbacks() -> tuple[Decision, ...]:
    """The ``vllm-fallback`` decisions of this process: where vLLM's own planner answered
    because kvrules could not (:mod:`kvrules.integrations.vllm_fallback`)."""
    return fallback.decisions()


def parse_strategies(text: str, line_preset: str = "vllm-0.28") -> StrategySpec:
    """``"vllm"`` -> ``"vllm"``; ``"vllm,min-padding"`` -> ``["vllm", "min-padding"]``;
    ``"auto"`` (or ``""``) -> ``line_preset``."""
    return vllm033.parse_strategies(text, line_preset)


def vllm_general_plugin() -> None:
    """Entry point in vLLM's ``vllm.general_plugins`` group, run in every vLLM process.

    Unset (or empty) ``KVRULES_VLLM_STRATEGIES`` changes nothing, so merely installing kvrules
    never changes vLLM. Set (``auto``, ``default``, a preset or a rule list), it :func:`install` s
    kvrules on the installed line (``auto``: the line's preset). It never stops an engine vLLM
    could start: a vLLM whose seam kvrules does not know, or a strategy set it cannot make, is
    one error on the logs and vLLM's own planner stays in place (``KVRULES_VLLM_STRICT`` on:
    the error is raised). A ``KVRULES_VLLM_STRICT`` value that is not a boolean is raised here,
    at plugin load.
    """
    text = os.environ.get(STRATEGIES_ENV, "").strip()
    if not text:
        return
    strict = fallback.strict()
    try:
        line = vllm_lines.detect()
        install(parse_strategies(text, line.preset))
    except (UnknownVllmSeamError, VllmNotInstalledError, PluginError) as exc:
        if strict:
            raise
        logs.error("kvrules.vllm.not_installed", error=type(exc).__name__, reason=str(exc))
        vllm_log.error("kvrules is not planning this engine (%s=%s): %s", STRATEGIES_ENV, text, exc)


__all__ = [
    "DROP_IN_NAMES",
    "AdapterState",
    "STRATEGIES_ENV",
    "UnknownVllmSeamError",
    "VllmAdapter",
    "VllmCapacityError",
    "VllmClasses",
    "VllmNotInstalledError",
    "WorkerSpecMismatchError",
    "adapter_state",
    "fallbacks",
    "from_vllm_spec",
    "from_vllm_specs",
    "get_kv_cache_configs",
    "get_kv_cache_groups",
    "install",
    "installed_line",
    "installed_strategies",
    "parse_strategies",
    "reset",
    "resolve_strategies",
    "to_kv_cache_config",
    "to_kv_cache_configs",
    "to_kv_cache_groups",
    "to_vllm_spec",
    "to_vllm_specs",
    "unify_kv_cache_spec_page_size",
    "uninstall",
    "vllm_classes",
    "vllm_general_plugin",
]
