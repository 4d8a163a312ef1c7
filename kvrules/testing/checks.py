"""Conformance checks: does a rule, spec type, allocator or whole plugin keep the kvrules contract?

Each ``check_*`` function returns quietly (or with a small report) when the object conforms and
raises :class:`ConformanceError` (an ``AssertionError``, so pytest shows it as a failure) naming
the object, what broke and how to fix it. The checks never touch a GPU.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pickle
import re
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

from kvrules.config import EngineConfig
from kvrules.decisions import OUTCOMES, STAGES
from kvrules.errors import KVRulesError, PluginError
from kvrules.pipeline import Planner
from kvrules.plan import Plan, WorkerPlan
from kvrules.plugin.answers import spec_problem
from kvrules.plugin.manager import BUILTIN_PLUGINS, KVRulesPluginManager, get_plugin_manager
from kvrules.plugin.presets import StrategySet
from kvrules.plugin.registry import Registries, RuleRegistry, SpecTypeRegistry
from kvrules.plugin.rules import (
    NAME_PATTERN,
    RULE_KINDS,
    Aligner,
    Converter,
    Fallback,
    Grouper,
    LayerStrategy,
    Layout,
    Partitioner,
    Router,
    Rule,
)
from kvrules.specs import BUILTIN_SPEC_TYPES, KVCacheSpec, spec_from_dict, spec_to_dict
from kvrules.testing.allocators import MODEL_SAMPLES, Subject, check_allocator, check_named, check_view_layout
from kvrules.testing.errors import ConformanceError, fail
from kvrules.testing.samples import Scenario, sample_scenarios, sample_spec, samples_of

T = TypeVar("T")

TYPE_NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")

#: per rule base: the methods a rule of that kind must override
ACTIONS: dict[type[Rule], tuple[str, ...]] = {
    LayerStrategy: ("check", "apply"),
    Converter: ("check", "convert"),
    Router: ("check", "route"),
    Fallback: ("check", "route"),
    Partitioner: ("check", "partition"),
    Grouper: ("check", "group"),
    Layout: ("check", "block_bytes", "request_bytes", "tensors"),
    Aligner: ("check", "align"),
}

#: CUDA entry points that must not run while a plugin is imported
CUDA_CALLS: tuple[str, ...] = ("init", "_lazy_init", "is_available", "device_count", "current_device")


# -- rules ---------------------------------------------------------------------------------------
@dataclass
class RuleReport:
    """What :func:`check_rule` saw: per scenario, how often the rule was asked and what it answered.

    :ivar asked: scenario name -> number of ``check`` calls.
    :ivar outcomes: scenario name -> outcome counts of the rule's recorded decisions.
    :ivar errors: scenario name -> the :class:`~kvrules.KVRulesError` the plan raised, if any.
    """

    rule: str
    asked: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, Counter[str]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def applied(self) -> int:
        """Decisions in which the rule acted, over all scenarios."""
        return sum(c["applied"] for c in self.outcomes.values())


def _rule_base(rule: Rule) -> type[Rule]:
    for base in ACTIONS:
        if isinstance(rule, base):
            return base
    raise fail(
        f"rule {rule.name!r}",
        f"{type(rule).__name__} derives from none of the rule kinds",
        f"derive from one of {', '.join(base.__name__ for base in ACTIONS)}",
    )


def _check_rule_fields(who: str, rule: Rule) -> None:
    """Known kind, valid name, integer priority."""
    if rule.kind not in RULE_KINDS:
        raise fail(who, f"kind {rule.kind!r} is unknown", f"use one of {', '.join(RULE_KINDS)}")
    if not NAME_PATTERN.match(rule.name):
        raise fail(who, "the name is invalid", "use lower-case words separated by dashes")
    if isinstance(rule.priority, bool) or not isinstance(rule.priority, int):
        raise fail(who, f"priority {rule.priority!r} is not an integer", "give an int priority")


def _check_rejects_invalid_names(who: str, rule: Rule) -> None:
    """A copy with an invalid name raises a :class:`KVRulesError`."""
    for bad in ("Bad Name", ""):
        try:
            dataclasses.replace(rule, name=bad)  # type: ignore[type-var]
        except KVRulesError:
            continue
        except Exception as exc:
            raise fail(
                who,
                f"an invalid name raised {type(exc).__name__}, not a KVRulesError",
                "call super().__post_init__() from __post_init__",
            ) from exc
        raise fail(who, f"the invalid name {bad!r} was accepted", "call super().__post_init__()")


def _check_actions(who: str, rule: Rule, base: type[Rule]) -> None:
    """Every action of the rule's kind overridden; a layer strategy's or aligner's ``touches`` declared."""
    for method in ACTIONS[base]:
        if method == "route" and getattr(rule, "unifies", False):
            continue  # a unifying router only chooses the route; the pipeline unifies and groups
        if getattr(type(rule), method) is getattr(base, method):
            raise fail(who, f"it does not implement {method}()", f"override {base.__name__}.{method}")
    if isinstance(rule, (LayerStrategy, Aligner)):
        touches = type(rule).touches
        if not isinstance(touches, frozenset) or not touches or not all(isinstance(t, str) for t in touches):
            raise fail(
                who,
                f"touches={touches!r} must be a non-empty frozenset of spec field names",
                "declare the fields apply() may change, e.g. frozenset({'page_size_padded'})",
            )


def _check_rule_static(rule: Any) -> type[Rule]:
    who = check_named(rule, Rule, "rule")
    _check_rule_fields(who, rule)
    _check_rejects_invalid_names(who, rule)
    base = _rule_base(rule)
    _check_actions(who, rule, base)
    try:
        RuleRegistry().add(rule)
    except KVRulesError as exc:
        raise fail(who, f"a registry rejects it ({exc})", "fix what the message names") from exc
    return base


def _subject_manager(rule: Rule, pm: KVRulesPluginManager | None) -> KVRulesPluginManager:
    base = pm or get_plugin_manager(autoload=False)
    registered = base.registries.rules.rules.get(rule.name)
    if registered is not None:
        if registered != rule:
            raise fail(
                f"rule {rule.name!r}",
                f"the name is already taken by {registered!r} from {base.registries.provider_of(rule.name)}",
                "choose a unique name (prefix it with your plugin's name)",
            )
        return base
    if pm is not None:
        raise fail(
            f"rule {rule.name!r}",
            "it is not registered in the plugin manager passed to check_rule",
            "register it through kvrules_register_rules, or omit plugin_manager=",
        )
    return get_plugin_manager(autoload=False, plugins=[Subject(rule)])


def _spy(rule: Rule, calls: Counter[str]) -> Rule:
    """A copy of ``rule`` whose methods count their calls in ``calls``."""
    cls = type(rule)

    def counting(method: str) -> Callable[..., Any]:
        original = getattr(cls, method)

        def wrapper(self: Rule, *args: Any, **kwargs: Any) -> Any:
            calls[method] += 1
            return original(self, *args, **kwargs)

        return wrapper

    spy_cls = type(f"Spied{cls.__name__}", (cls,), {m: counting(m) for m in ACTIONS[_rule_base(rule)]})
    values = {f.name: getattr(rule, f.name) for f in dataclasses.fields(rule) if f.init}
    spy: Rule = spy_cls(**values)
    return spy


def _with_rule(planner: Planner, spy: Rule, others: bool) -> StrategySet:
    active = dict(planner.strategies.active)
    kept = tuple(r for r in active.get(spy.kind, ()) if r.name != spy.name) if others else ()
    active[spy.kind] = tuple(sorted((*kept, spy), key=lambda r: r.sort_key))
    return StrategySet(f"{planner.strategies.name}+{spy.name}", active)


def _check_layout_results(rule: Layout, plan: Plan, config: EngineConfig) -> None:
    who = f"layout {rule.name!r}"
    for index, worker in enumerate(plan.workers):
        if worker.layout != rule.name:
            continue
        groups = worker.groups
        block = rule.block_bytes(groups)
        for blocks in (1, 3):
            tensors = rule.tensors(groups, blocks)
            total = WorkerPlan(blocks, tuple(tensors)).allocated_bytes
            if total != blocks * block:
                raise fail(
                    who,
                    f"worker {index}: tensors for {blocks} blocks hold {total} bytes, but block_bytes says "
                    f"{block} bytes per block ({blocks * block} bytes)",
                    "make tensors() allocate exactly num_blocks x block_bytes()",
                )
            covered = {name for t in tensors for name in t.shared_by}
            missing = [n for g in groups for n in g.layer_names if n not in covered]
            if missing:
                raise fail(
                    who,
                    f"worker {index}: layers {', '.join(missing[:3])} are in no tensor",
                    "list every layer of the groups in some tensor's shared_by",
                )
        need = rule.request_bytes(groups, config)
        if isinstance(need, bool) or not isinstance(need, int) or need < 0:
            raise fail(who, f"request_bytes returned {need!r}", "return a non-negative int")


def _check_decisions(rule: Rule, plan: Plan, scenario: str) -> Counter[str]:
    mine = [d for d in plan.decisions if d.rule == rule.name]
    if not mine:
        raise fail(
            f"rule {rule.name!r}",
            f"it was asked in scenario {scenario!r} but no decision names it",
            "return a Check with a reason (the core records it, with its details=)",
        )
    for decision in mine:
        if decision.stage not in STAGES or decision.outcome not in OUTCOMES:
            raise fail(
                f"rule {rule.name!r}",
                f"it recorded stage {decision.stage!r} / outcome {decision.outcome!r}",
                f"use a stage of {STAGES} and an outcome of {OUTCOMES}",
            )
        if not isinstance(decision.reason, str) or not decision.reason.strip():
            raise fail(
                f"rule {rule.name!r}", f"a decision in {scenario!r} has no reason", "say why in one sentence"
            )
    return Counter(d.outcome for d in mine)


def check_rule(
    rule: Rule,
    *,
    scenarios: Iterable[Scenario] | None = None,
    plugin_manager: KVRulesPluginManager | None = None,
    require_asked: bool = True,
    others: bool = False,
) -> RuleReport:
    """Check a rule's contract statically, then plan every scenario with the rule active.

    Static: frozen dataclass, valid name, integer priority, one-line description, kind known,
    every action overridden, invalid names rejected with a ``KVRulesError``, a layer strategy's
    ``touches`` declared (aligners, which the planner never asks, get the static checks only).
    Dynamic (the default strategy set, with this rule as the only active
    rule of its kind unless ``others``, so that every scenario reaching its stage asks it): planning raises
    only ``KVRulesError``; when the rule is asked, a decision names it with a reason; planning is
    deterministic; a layout's tensors hold ``num_blocks x block_bytes`` and cover every layer.

    :param scenarios: models to plan (default: :func:`~kvrules.testing.sample_scenarios`).
    :param plugin_manager: a manager in which the rule is already registered (default: the
        built-ins plus the rule).
    :param require_asked: fail when no scenario makes the planner ask the rule.
    :param others: keep the default set's other rules of the same kind active beside it.
    :raises ConformanceError: the first broken contract, naming the rule and the fix.
    """
    _check_rule_static(rule)
    if isinstance(rule, Aligner):
        return RuleReport(rule.name)  # aligners run when specs are built from a model config
    pm = _subject_manager(rule, plugin_manager)
    planner = Planner(None, plugin_manager=pm)
    calls: Counter[str] = Counter()
    planner.strategies = _with_rule(planner, _spy(rule, calls), others)
    report = RuleReport(rule.name)
    for scenario in sample_scenarios() if scenarios is None else scenarios:
        calls.clear()
        plan = _plan(planner, scenario, rule, report)
        report.asked[scenario.name] = calls["check"]
        if plan is None or not calls["check"]:
            continue
        report.outcomes[scenario.name] = _check_decisions(rule, plan, scenario.name)
        again = _plan(planner, scenario, rule, report)
        if again is None or again.to_json() != plan.to_json():
            raise fail(
                f"rule {rule.name!r}",
                f"planning scenario {scenario.name!r} twice gave different plans",
                "make the rule a pure function of its inputs (no global state, no randomness)",
            )
        if isinstance(rule, Layout):
            _guarded(rule, scenario.name, functools.partial(_check_layout_results, rule, plan, plan.config))
    if require_asked and not any(report.asked.values()):
        raise fail(
            f"rule {rule.name!r}",
            f"the planner never asked it in {len(report.asked)} scenarios",
            "pass scenarios= with a model that reaches the rule's stage (and a higher-priority rule "
            "does not decide first)",
        )
    return report


def _guarded(rule: Rule, scenario: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except (KVRulesError, ConformanceError):
        raise
    except Exception as exc:
        raise fail(
            f"rule {rule.name!r}",
            f"it raised {type(exc).__name__} in scenario {scenario!r}: {exc}",
            "raise a kvrules.KVRulesError subclass naming the layer, the values and the fix",
        ) from exc


def _blames(error: PluginError, rule: Rule) -> bool:
    """Whether the core's ``error`` names ``rule`` (or, for groupers, the grouping it made)."""
    text = str(error)
    if any(f"{what} {rule.name!r}" in text for what in ("rule", "router", "fallback", "layout")):
        return True
    return isinstance(rule, (Grouper, Partitioner)) and text.startswith("grouping ")


def _plan(planner: Planner, scenario: Scenario, rule: Rule, report: RuleReport) -> Plan | None:
    try:
        return _guarded(
            rule,
            scenario.name,
            lambda: planner.plan(list(scenario.workers), list(scenario.memory), scenario.config),
        )
    except PluginError as exc:
        if _blames(exc, rule):
            raise fail(
                f"rule {rule.name!r}",
                f"in scenario {scenario.name!r} the core rejected it: {exc}",
                "return results that keep the rule kind's contract (see kvrules.plugin.rules)",
            ) from exc
        report.errors[scenario.name] = f"{type(exc).__name__}: {exc}"
        return None
    except KVRulesError as exc:
        report.errors[scenario.name] = f"{type(exc).__name__}: {exc}"
        return None


# -- spec types ----------------------------------------------------------------------------------
def _spec_types_with(cls: type[KVCacheSpec]) -> dict[str, type[KVCacheSpec]]:
    types = {c.type_name: c for c in BUILTIN_SPEC_TYPES}
    types[cls.type_name] = cls
    return types


def _check_spec_class(cls: Any) -> None:
    who = f"spec type {getattr(cls, '__name__', cls)!r}"
    if not (isinstance(cls, type) and issubclass(cls, KVCacheSpec)):
        raise fail(who, "it is not a subclass of kvrules.KVCacheSpec", "derive from KVCacheSpec")
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise fail(who, "it is not a frozen dataclass", "use @dataclass(frozen=True, eq=False)")
    if cls.__eq__ is not KVCacheSpec.__eq__ or cls.__hash__ is not KVCacheSpec.__hash__:
        raise fail(
            who,
            "it replaces the base class's __eq__/__hash__ (specs must hash by value)",
            "use @dataclass(frozen=True, eq=False)",
        )
    name = cls.type_name
    if not isinstance(name, str) or not TYPE_NAME_PATTERN.match(name):
        raise fail(who, f"type_name {name!r} is invalid", "use lower_case_with_underscores")
    builtin = {c.type_name: c for c in BUILTIN_SPEC_TYPES}
    if name in builtin and builtin[name] is not cls:
        raise fail(who, f"type_name {name!r} is a built-in type's name", "choose a new name")
    try:
        SpecTypeRegistry().add(cls)
    except KVRulesError as exc:
        raise fail(who, f"a registry rejects it ({exc})", "fix what the message names") from exc


def _expect_spec_error(who: str, what: str, fn: Callable[[], Any]) -> None:
    try:
        fn()
    except KVRulesError:
        return
    except Exception as exc:
        raise fail(
            who,
            f"{what} raised {type(exc).__name__}, not a kvrules.SpecError",
            "validate in __post_init__ and raise SpecError naming the field and the value",
        ) from exc
    raise fail(who, f"{what} was accepted", "validate in __post_init__ and raise SpecError")


def _check_sizes(who: str, spec: KVCacheSpec) -> None:
    """The core's own checks of a spec's answers (:func:`~kvrules.plugin.answers.spec_problem`),
    memory non-decreasing in ``max_model_len``, the page doubling with ``block_size`` if it says so."""
    previous = -1
    for length in (1, 17, 4096, 65536):
        config = EngineConfig(max_model_len=length)
        problem = spec_problem(spec, config)
        if problem:
            raise fail(who, f"it {problem}", "keep the KVCacheSpec contract (see kvrules.plugin.answers)")
        need = spec.max_memory_usage_bytes(config)
        if need < previous:
            raise fail(who, f"memory for {length} tokens is less than for fewer", "make it non-decreasing")
        previous = need
    page = spec.page_size_bytes
    if spec.page_scales_with_block_size and spec.padding_bytes == 0:
        doubled = spec.evolve(block_size=spec.block_size * 2)
        if doubled.page_size_bytes != 2 * page:
            raise fail(
                who,
                f"doubling block_size gives a page of {doubled.page_size_bytes} bytes, not {2 * page}",
                "set page_scales_with_block_size = False, or fix the page formula",
            )


def _check_identity(who: str, spec: KVCacheSpec) -> None:
    copy = spec.evolve()
    if copy != spec or hash(copy) != hash(spec):
        raise fail(who, "an identical copy is not equal (or hashes differently)", "keep eq=False")
    try:
        pickled = pickle.loads(pickle.dumps(spec))
    except Exception as exc:
        raise fail(
            who,
            f"it cannot be pickled ({type(exc).__name__}: {exc}); engines send plans to worker processes",
            "store picklable values, or define __reduce__",
        ) from exc
    if pickled != spec:
        raise fail(who, "a pickled copy is not equal", "store only picklable plain values in fields")
    key = spec.uniform_type_key()
    if key is not None:
        hash(key)
        if copy.uniform_type_key() != key:
            raise fail(who, "uniform_type_key() differs between equal specs", "derive it from fields")
    if type(spec).merge([spec, copy]) != spec:
        raise fail(who, "merge([spec, spec]) is not spec", "return the spec when all are equal")
    summary = spec.summary()
    if summary.get("spec_type") != spec.type_name or summary.get("page_size_bytes") != spec.page_size_bytes:
        raise fail(who, f"summary() is {summary!r}", "keep the base class's summary keys")


def _check_json(who: str, spec: KVCacheSpec, types: Mapping[str, type[KVCacheSpec]]) -> None:
    data = spec_to_dict(spec)
    try:
        text = json.dumps(data)
    except (TypeError, ValueError) as exc:
        raise fail(who, f"its model-file form is not JSON ({exc})", "store JSON-friendly values") from exc
    try:
        back = spec_from_dict(json.loads(text), layer="conformance", spec_types=types)
    except KVRulesError as exc:
        raise fail(who, f"its JSON form does not load back ({exc})", "accept what to_dict() writes") from exc
    if back != spec or spec_to_dict(back) != data:
        raise fail(
            who,
            f"the JSON round trip changed it: {data} -> {spec_to_dict(back)}",
            "normalise field values in __post_init__ (tuples, enums, dtype names)",
        )
    _expect_spec_error(
        who,
        "an unknown key in its JSON form",
        lambda: spec_from_dict({**data, "no_such_field": 1}, spec_types=types),
    )


def check_spec_type(cls: type[KVCacheSpec], examples: Sequence[KVCacheSpec] | None = None) -> None:
    """Check a spec class and example instances of it.

    Frozen dataclass with the base's value equality; a valid, new ``type_name``; for every
    example: sizes consistent (real <= unpadded <= page), memory non-decreasing in
    ``max_model_len``, page doubling with ``block_size`` when it says so, equal copies hash
    equally, pickling and the JSON round trip (``spec_to_dict`` -> JSON -> ``spec_from_dict``)
    give an equal spec, invalid values and unknown keys raise ``SpecError``.

    :param examples: instances to check (default: kvrules' samples of a built-in type; a
        third-party type must pass its own).
    :raises ConformanceError: the first broken contract.
    """
    _check_spec_class(cls)
    items = list(examples) if examples is not None else samples_of(cls)
    who = f"spec type {cls.__name__!r} ({cls.type_name})"
    if not items:
        raise fail(
            who,
            "no example instances",
            f"pass check_spec_type({cls.__name__}, examples=[{cls.__name__}(...)]) with one or more instances",
        )
    types = _spec_types_with(cls)
    for spec in items:
        if type(spec) is not cls:
            raise fail(who, f"example {spec!r} is a {type(spec).__name__}", f"pass {cls.__name__} instances")
        for label, step in (
            ("sizes", _check_sizes),
            ("equality, pickling, merge and summary", _check_identity),
        ):
            try:
                step(who, spec)
            except ConformanceError:
                raise
            except Exception as exc:
                raise fail(
                    who,
                    f"checking {label} of {spec!r} raised {type(exc).__name__}: {exc}",
                    "keep the KVCacheSpec contract (see kvrules.specs.base)",
                ) from exc
        _check_json(who, spec, types)
        _expect_spec_error(who, "block_size=0", lambda s=spec: s.evolve(block_size=0))  # type: ignore[misc]
        _expect_spec_error(who, "block_size='16'", lambda s=spec: s.evolve(block_size="16"))  # type: ignore[misc]


# -- whole plugins -------------------------------------------------------------------------------
#: run in a fresh interpreter: trap torch.cuda's entry points as soon as torch.cuda is loaded
#: (only if the module imports torch at all), then import the module
_GPU_PROBE = textwrap.dedent(
    """
    import importlib, importlib.abc, importlib.util, sys
    touched = []

    def patch(cuda):
        for name in CALLS:
            original = getattr(cuda, name, None)
            if original is None:
                continue
            def trap(*args, _name=name, _original=original, **kwargs):
                caller = sys._getframe(1).f_globals.get("__name__", "")
                if not (caller == "torch" or caller.startswith("torch.")):
                    touched.append(_name)
                return _original(*args, **kwargs)
            setattr(cuda, name, trap)

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != "torch.cuda":
                return None
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(fullname)
            finally:
                sys.meta_path.insert(0, self)
            if spec is None or spec.loader is None:
                return spec
            run = spec.loader.exec_module
            def exec_module(module):
                run(module)
                patch(module)
            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Finder())
    importlib.import_module(MODULE)
    cuda = sys.modules.get("torch.cuda")
    if touched or (cuda is not None and cuda.is_initialized()):
        print("touched:" + ",".join(touched or ["CUDA initialised"]))
        sys.exit(3)
    """
)


def check_import_is_gpu_free(module: str, *, timeout: float = 120.0) -> None:
    """Import ``module`` in a fresh interpreter with torch.cuda's entry points trapped.

    Calls made by torch itself are ignored; torch is not imported unless the module imports it.

    :raises ConformanceError: the import called ``torch.cuda.init``, ``is_available``,
        ``device_count`` (and the like) or initialised CUDA, or failed.
    """
    code = _GPU_PROBE.replace("CALLS", repr(CUDA_CALLS)).replace("MODULE", repr(module))
    # the child sees this process's import path (after any PYTHONPATH the caller set)
    path = [os.environ.get("PYTHONPATH", ""), *(p for p in sys.path if p)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, check=False, env=env
    )
    if result.returncode == 3:
        calls = result.stdout.strip().removeprefix("touched:")
        raise fail(
            f"module {module!r}",
            f"importing it touched the GPU ({calls})",
            "import torch.cuda lazily and ask for devices only when first used",
        )
    if result.returncode != 0:
        raise fail(
            f"module {module!r}",
            f"importing it failed: {result.stderr.strip().splitlines()[-1:] or result.returncode}",
            "make the module importable without side effects",
        )


def _spec_examples_for(
    name: str,
    cls: type[KVCacheSpec],
    given: Mapping[str, Sequence[KVCacheSpec]] | None,
    types: Mapping[str, type[KVCacheSpec]],
) -> Sequence[KVCacheSpec]:
    """The examples :func:`check_plugin` checks spec type ``name`` with: ``given[name]`` or the
    samples of a built-in type; ``given``'s keys must be the plugin's type names."""
    given = given or {}
    unknown = sorted(str(key) for key in given if key not in types)
    if unknown:
        raise fail(
            "check_plugin(spec_examples=...)",
            f"its keys {', '.join(map(repr, unknown))} are not spec types the plugin registers",
            f"key the examples by type name ({', '.join(map(repr, sorted(types)))})",
        )
    examples = list(given[name]) if name in given else samples_of(cls)
    if not examples:
        raise fail(
            f"spec type {cls.__name__!r} ({name})",
            "check_plugin has no example instances of it",
            f"pass check_plugin(plugin, spec_examples={{{name!r}: [{cls.__name__}(...)]}}) "
            "(keyword-only, keyed by type name)",
        )
    return examples


@dataclass
class PluginReport:
    """What :func:`check_plugin` checked: the registries it filled and each rule's report."""

    registries: Registries
    rules: dict[str, RuleReport] = field(default_factory=dict)


def check_plugin(
    plugin: ModuleType | object,
    *,
    scenarios: Iterable[Scenario] | None = None,
    spec_examples: Mapping[str, Sequence[KVCacheSpec]] | None = None,
    allocator_plan: Plan | None = None,
    require_asked: bool = True,
) -> PluginReport:
    """Run every check on everything ``plugin`` registers (alone, beside the built-ins).

    Registers ``plugin`` on a fresh manager (its hook implementations must match the hookspecs),
    collects its spec types, rules, allocators and view layouts, and runs :func:`check_spec_type`,
    :func:`check_rule`, :func:`check_allocator` and :func:`check_view_layout` on each (a view
    layout with kvrules' sample specs and every spec of ``spec_examples``); a module plugin is
    also imported in a fresh interpreter by :func:`check_import_is_gpu_free`.

    :param spec_examples: type name (``cls.type_name``) -> example instances, for every spec type
        the plugin registers (built-in types have samples); an unknown key is an error.
    :raises ConformanceError: the first broken contract.
    """
    try:
        pm = get_plugin_manager(autoload=False, plugins=[plugin])
        own = get_plugin_manager(autoload=False, plugins=[plugin], blocked=BUILTIN_PLUGINS)
        mine = own.registries
    except KVRulesError as exc:
        raise fail(f"plugin {plugin!r}", f"it does not load ({exc})", "fix what the message names") from exc
    except Exception as exc:  # pluggy's validation errors for misspelled hooks or arguments
        raise fail(
            f"plugin {plugin!r}",
            f"{type(exc).__name__}: {exc}",
            "name hook implementations exactly as in kvrules.plugin.hookspecs, with the same arguments",
        ) from exc
    if isinstance(plugin, ModuleType):
        check_import_is_gpu_free(plugin.__name__)
    for name, cls in mine.spec_types.classes.items():
        check_spec_type(cls, _spec_examples_for(name, cls, spec_examples, mine.spec_types.classes))
    report = PluginReport(mine)
    runs = list(scenarios) if scenarios is not None else None
    for name, rule in mine.rules.rules.items():
        report.rules[name] = check_rule(rule, scenarios=runs, plugin_manager=pm, require_asked=require_asked)
    for allocator in mine.allocators.ordered():
        check_allocator(allocator, allocator_plan)
    view_examples = [
        *(sample_spec(n) for n in MODEL_SAMPLES),
        *(s for v in (spec_examples or {}).values() for s in v),
    ]
    for layout in mine.allocators.ordered_view_layouts():
        check_view_layout(layout, view_examples)
    return report


__all__ = [
    "ConformanceError",
    "PluginReport",
    "RuleReport",
    "check_allocator",
    "check_import_is_gpu_free",
    "check_plugin",
    "check_rule",
    "check_spec_type",
]
