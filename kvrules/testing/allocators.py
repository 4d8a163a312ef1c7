"""Conformance checks for allocators and view layouts (see :mod:`kvrules.allocation.allocate`).

Both run on the ``meta`` device by default: buffers get shapes and strides but no memory, so the
checks need no GPU and work for plans of any size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvrules import hookimpl
from kvrules.allocation import Allocator, ViewLayout, allocate
from kvrules.errors import KVRulesError
from kvrules.pipeline import Planner
from kvrules.plan import Plan
from kvrules.plugin.manager import KVRulesPluginManager, get_plugin_manager
from kvrules.plugin.registry import AllocatorRegistry, NamedPlugin, RuleRegistry
from kvrules.plugin.rules import Check, Rule
from kvrules.specs import KVCacheSpec
from kvrules.testing.errors import ConformanceError, fail
from kvrules.testing.samples import SAMPLE_SPEC_NAMES, Scenario, make_specs, sample_spec

SUBJECT = "kvrules-testing-subject"

#: sample specs that can be a model's layer (a uniform-type spec is a group's spec only)
MODEL_SAMPLES: tuple[str, ...] = tuple(n for n in SAMPLE_SPEC_NAMES if n != "uniform-type")


class Subject:
    """A plugin object registering the one rule, allocator or view layout a check is about."""

    def __init__(self, obj: Any) -> None:
        self.name = SUBJECT
        self._obj = obj

    @hookimpl
    def kvrules_register_rules(self, registry: RuleRegistry) -> None:
        if isinstance(self._obj, Rule):
            registry.add(self._obj)

    @hookimpl
    def kvrules_register_allocators(self, registry: AllocatorRegistry) -> None:
        if isinstance(self._obj, ViewLayout):
            registry.add_view_layout(self._obj)
        elif isinstance(self._obj, Allocator):
            registry.add(self._obj)


def _manager_with(obj: Any, view_layout: bool) -> KVRulesPluginManager:
    pm = get_plugin_manager(autoload=False)
    registry = pm.registries.allocators
    table = registry.view_layouts if view_layout else registry.items
    found = table.get(obj.name)
    if found is not None:
        if found != obj:
            raise fail(
                f"{'view layout' if view_layout else 'allocator'} {obj.name!r}",
                "the name is already taken by a built-in",
                "choose a unique name (prefix it with your plugin's name)",
            )
        return pm
    return get_plugin_manager(autoload=False, plugins=[Subject(obj)])


def check_named(obj: Any, base: type[NamedPlugin], what: str) -> str:
    """What a rule, allocator or view layout ``obj`` shares: an instance of ``base``, a frozen
    dataclass, a one-line description, hashable. Returns how failures name it (``rule 'x'``)."""
    who = f"{what} {getattr(obj, 'name', obj)!r}"
    if not isinstance(obj, base):
        raise fail(
            who,
            f"{type(obj).__name__} does not derive from {base.__module__}.{base.__name__}",
            "derive from it",
        )
    params = getattr(type(obj), "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise fail(who, "it is not a frozen dataclass", "decorate it with @dataclass(frozen=True)")
    description = getattr(obj, "description", "")
    if not isinstance(description, str) or not description.strip() or "\n" in description:
        raise fail(who, "the description is empty or spans lines", "give a one-line description")
    try:
        hash(obj)
    except TypeError as exc:
        raise fail(who, f"it is not hashable ({exc})", "keep the dataclass frozen") from None
    return who


def _ask(who: str, fn: Any, arg: Any) -> Check:
    try:
        answer = fn(arg)
    except KVRulesError:
        raise
    except Exception as exc:
        raise fail(
            who, f"supports({arg!r}) raised {type(exc).__name__}: {exc}", "decline with a reason instead"
        ) from exc
    if not isinstance(answer, Check) or not answer.reason:
        raise fail(
            who, f"supports({arg!r}) returned {answer!r}", "return applies(reason) or declines(reason)"
        )
    return answer


def default_plan(pm: KVRulesPluginManager | None = None) -> Plan:
    """A small two-worker hybrid plan (full + sliding-window attention + Mamba) to allocate."""
    scenario = Scenario.single(
        "allocator-check", make_specs("full-b64", "full-b64", "mamba", "full-b64"), max_model_len=1024
    ).split((64 << 20, 48 << 20))
    planner = Planner(plugin_manager=pm or get_plugin_manager(autoload=False))
    return planner.plan(list(scenario.workers), list(scenario.memory), scenario.config)


def _allocate_all(who: str, plan: Plan, device: str, pm: KVRulesPluginManager, **choice: Any) -> list[Any]:
    done = []
    for worker in range(len(plan.workers)):
        try:
            allocation = allocate(plan, device, worker, plugin_manager=pm, **choice)
            allocation.verify()
        except KVRulesError as exc:
            raise fail(
                who, f"worker {worker} on {device!r}: {type(exc).__name__}: {exc}", "fix what it names"
            ) from exc
        except Exception as exc:
            raise fail(
                who,
                f"worker {worker} on {device!r} raised {type(exc).__name__}: {exc}",
                "raise kvrules.AllocationError (or another KVRulesError) for a failure",
            ) from exc
        done.append(allocation)
    return done


def check_allocator(allocator: Any, plan: Plan | None = None, *, device: str = "meta") -> None:
    """Check an allocator's contract on ``device`` (``"meta"``: no memory, no GPU).

    Name and priority valid; ``supports("meta")`` answers a bool; allocating every worker of
    ``plan`` on ``device`` gives buffers matching the plan's tensors and a view for every layer;
    ``verify()`` (if present) accepts the result; bad requests raise ``KVRulesError``.

    :param plan: the plan to allocate (default: a small hybrid model with the default planner).
    :raises ConformanceError: the first broken contract.
    """
    who = check_named(allocator, Allocator, "allocator")
    overrides_allocate = type(allocator).allocate is not Allocator.allocate
    if type(allocator).supports is Allocator.supports:
        raise fail(who, "it does not implement supports(device)", "override Allocator.supports")
    if not overrides_allocate and type(allocator).buffer is Allocator.buffer:
        raise fail(who, "it implements neither buffer() nor allocate()", "override Allocator.buffer")
    if _ask(who, allocator.supports, "no-such-device:7").applies:
        raise fail(who, "it claims to support the device 'no-such-device:7'", "decline unknown devices")
    if not _ask(who, allocator.supports, device).applies:
        raise fail(
            who,
            f"it declines {device!r}",
            f"support {device!r} (a dry run), or pass device= a device it supports",
        )
    pm = _manager_with(allocator, view_layout=False)
    plan = plan or default_plan(pm)
    for allocation in _allocate_all(who, plan, device, pm, allocator=allocator.name):
        tensors = plan.workers[allocation.worker].tensors
        if len(allocation.buffers) != len(tensors):
            raise fail(who, f"{len(allocation.buffers)} buffers for {len(tensors)} tensors", "one per tensor")
        for index, (buffer, tensor) in enumerate(zip(allocation.buffers, tensors, strict=True)):
            nbytes = int(buffer.numel()) * int(buffer.element_size())
            if nbytes != tensor.size:
                raise fail(
                    who,
                    f"worker {allocation.worker}: buffer {index} has {nbytes} bytes, the plan says {tensor.size}",
                    "allocate exactly the planned size",
                )
        if not any(d.rule == allocator.name and d.outcome == "applied" for d in allocation.decisions):
            raise fail(who, "no allocate decision names it", "let kvrules.allocate choose it (do not bypass)")


#: this module's name of :func:`check_allocator` (published as :func:`kvrules.testing.check_allocator`)
check_allocator_contract = check_allocator


def check_view_layout(
    layout: Any, examples: Sequence[KVCacheSpec] | None = None, *, device: str = "meta"
) -> list[str]:
    """Check a view layout: ``supports`` answers every sample with a reason, and the views it
    builds for each example it supports pass :meth:`kvrules.Allocation.verify` on ``device``.

    :param examples: specs the layout is meant for (default: kvrules' sample specs).
    :return: the type names of the examples it supports (each once, in order).
    :raises ConformanceError: the first broken contract (including: it supports none of the examples).
    """
    who = check_named(layout, ViewLayout, "view layout")
    for method in ("supports", "build"):
        if getattr(type(layout), method) is getattr(ViewLayout, method):
            raise fail(who, f"it does not implement {method}()", f"override ViewLayout.{method}")
    for name in SAMPLE_SPEC_NAMES:
        _ask(who, layout.supports, sample_spec(name))
    candidates = list(examples) if examples is not None else [sample_spec(n) for n in MODEL_SAMPLES]
    pm = _manager_with(layout, view_layout=True)
    planner = Planner(plugin_manager=pm)
    supported = []
    for spec in candidates:
        if not _ask(who, layout.supports, spec).applies:
            continue
        scenario = Scenario.single(
            f"view-{spec.type_name}", make_specs(spec, repeat=2), memory=64 << 20, max_model_len=256
        )
        try:
            plan = planner.plan(list(scenario.workers), list(scenario.memory), scenario.config)
        except KVRulesError as exc:
            raise fail(who, f"a model of {spec!r} does not plan ({exc})", "pass examples that plan") from exc
        for allocation in _allocate_all(who, plan, device, pm, layout=layout.name):
            if set(allocation.layouts.values()) != {layout.name}:
                raise fail(who, f"it was not used for {spec.type_name}", "report applies() only when it can")
        supported.append(spec.type_name)
    if not supported:
        raise fail(who, "it supports none of the examples", "pass examples= with specs it is meant for")
    return list(dict.fromkeys(supported))


__all__ = ["ConformanceError", "check_allocator_contract", "check_view_layout", "default_plan"]
