"""The one way kvrules asks a plugin anything.

Every extension point (converter, router, fallback, layer strategy, partitioner, grouper,
layout, aligner, spec type, architecture, allocator, view layout) is asked through an
:class:`Asker`. It

* calls the plugin's method with a guard: an input error (:class:`~kvrules.SpecError`,
  :class:`~kvrules.ConfigError`, :class:`~kvrules.ModelFileError`) and the other kvrules errors a
  rule may answer with (``UnificationError``, ``GroupingError``, ``CapacityError``, ...) pass
  through; any other exception becomes a :class:`~kvrules.PluginError` naming the plugin whose
  code raised it (found from the traceback: a built-in that merely called a faulty third-party
  spec type is not blamed) and its distribution, or ``registered in-process``;
* checks the answer with the kind's checker (:mod:`kvrules.plugin.answers`): a wrong type or a
  broken invariant is a :class:`~kvrules.PluginError` naming the plugin. That includes a spec
  given to the plugin and changed in place (checked before anything else about the answer), and
  every spec the plugin made, which must answer like a valid spec (a copy forged past its own
  validation is refused, naming the plugin that returned it);
* hands an allocator view layouts that are asked the same way (:class:`AskedViewLayout`): a
  buffer the allocator gives one is checked first (wrong: the allocator's fault), then the
  layout's views (wrong: the layout's);
* records the decision.

When the plugin asked is not the one whose code raised (a built-in rule calling a third-party
spec type's method), the message names the plugin whose code raised and the object that was
being asked by name only: neither that object nor its distribution is blamed.

The stages of :mod:`kvrules.pipeline`, the front door (:mod:`kvrules.hf`) and allocation
(:mod:`kvrules.allocation`) use it; nothing else calls a plugin.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import is_
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

from kvrules.config import EngineConfig
from kvrules.decisions import Decision, DecisionLog
from kvrules.errors import KVRulesError, PluginError, SpecAnswerError, SpecError
from kvrules.plan import BackingTensor, KVCacheGroup, KVCacheTensor
from kvrules.plugin import answers
from kvrules.plugin.allocator import Placement, ViewLayout
from kvrules.plugin.registry import IN_PROCESS, Registries, Registry
from kvrules.plugin.rules import Check, Rule
from kvrules.specs.base import KVCacheSpec, distinct_specs
from kvrules.values import shown

#: what :meth:`Asker.each` threads through the rules it asks
S = TypeVar("S")

#: how each kind of plugin object is named in messages
KIND_WORDS = {
    "convert": "converter",
    "router": "router",
    "fallback": "fallback",
    "layer-strategy": "layer strategy",
    "partition": "partitioner",
    "grouper": "grouper",
    "layout": "layout",
    "align": "aligner",
    "spec-type": "spec type",
    "architecture": "architecture",
    "allocator": "allocator",
    "view-layout": "view layout",
}


def _innermost_plugin_module(
    tb: types.TracebackType | None, registries: Registries
) -> tuple[str, str] | None:
    """``(module, provider)`` of the innermost traceback frame in a plugin's own module.

    kvrules' core modules (``kvrules`` and below) are never blamed this way: when the innermost
    frames are core code, the object that was asked is responsible.
    """
    found = None
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if module != "kvrules" and not module.startswith("kvrules."):
            provider = registries.provider_of_module(module)
            if provider is not None:
                found = (module, provider)
        tb = tb.tb_next
    return found


class Asked(NamedTuple):
    """What :meth:`Asker.first` found: the first object that applies (``None`` when none did),
    its answer, and each one that declined before it (``"name: reason"``, and as decisions)."""

    found: Any
    check: Check
    declined: list[str]
    declines: list[Decision]

    @property
    def said(self) -> str:
        """The declines for a message: ``"a: reason; b: reason"``, or ``"none active"``."""
        return "; ".join(self.declined) or "none active"


@dataclass
class Asker:
    """Asks plugins for one plan, one model build or one allocation.

    :ivar registries: where the objects came from (for naming providers).
    :ivar decisions: where decisions are recorded.
    """

    registries: Registries
    decisions: DecisionLog = field(default_factory=DecisionLog)
    #: (id(spec), id(config)) -> (spec, config, checked blocks_per_request): a spec is asked once
    #: per config (the entry keeps both alive, so their ids are not reused meanwhile)
    _blocks: dict[tuple[int, int], tuple[KVCacheSpec, EngineConfig, int]] = field(
        default_factory=dict, init=False, repr=False
    )

    @staticmethod
    def frozen(specs: Mapping[str, Any]) -> Mapping[str, Any]:
        """A read-only view of ``specs`` (no copy): a rule cannot change the mapping it is given.
        A guard hands its work to its action in its answer (``Check.work``), never by the
        identity of this view."""
        return specs if isinstance(specs, MappingProxyType) else MappingProxyType(specs)  # type: ignore[arg-type]

    # -- naming ---------------------------------------------------------------------------
    def provider(self, kind: str, name: str) -> str:
        """``plugin 'p' (dist 1.0)`` for the object ``name`` of ``kind``, or ``registered in-process``."""
        registries: dict[str, Registry[Any]] = {
            "spec-type": self.registries.spec_types,
            "architecture": self.registries.architectures,
            "allocator": self.registries.allocators,
            "view-layout": self.registries.allocators.layouts,
        }
        registry = registries.get(kind, self.registries.rules)
        return registry.providers.get(name, IN_PROCESS)

    def what(self, kind: str, obj: Any) -> str:
        """``layer strategy 'x'`` (``rule 'x'`` for a rule), without its provider."""
        word = "rule" if isinstance(obj, Rule) else KIND_WORDS.get(kind, kind)
        return f"{word} {_name(kind, obj)!r}"

    def who(self, kind: str, obj: Any) -> str:
        """``layer strategy 'x' (plugin 'p' (dist 1.0))``."""
        return f"{self.what(kind, obj)} ({self.provider(kind, _name(kind, obj))})"

    def fault(self, kind: str, obj: Any, problem: str) -> PluginError:
        """A :class:`PluginError` saying that ``obj`` broke its contract: ``problem``."""
        return PluginError(f"{self.who(kind, obj)} {problem}")

    # -- calling --------------------------------------------------------------------------
    def call(self, kind: str, obj: Any, method: str, *args: Any) -> Any:
        """``obj.method(*args)``, guarded (see the module docstring)."""
        fn = getattr(obj, method, None)
        if not callable(fn):
            raise self.fault(kind, obj, f"has no callable {method}()")
        try:
            answer = fn(*args)
        except SpecAnswerError as error:  # a spec answered the rule wrongly: the spec's fault
            raise self.fault("spec-type", error.spec, error.problem) from error
        except KVRulesError as error:
            self._note(error, kind, obj)
            raise
        except Exception as exc:
            raise self._blame(kind, obj, method, exc, args) from exc
        problem = answers.answer_problem(kind, method, answer)
        if problem:
            raise self.fault(kind, obj, f"answered {method}() with {problem}")
        return answer

    def value(self, kind: str, obj: Any, attribute: str) -> Any:
        """``obj.attribute`` (a property may run plugin code), guarded like :meth:`call`."""
        try:
            return getattr(obj, attribute)
        except SpecAnswerError as error:
            raise self.fault("spec-type", error.spec, error.problem) from error
        except KVRulesError:
            raise
        except Exception as exc:
            raise self._blame(kind, obj, attribute, exc) from exc

    def _note(self, error: KVRulesError, kind: str, obj: Any) -> None:
        """Name a third party's object on a kvrules error its own code raised (class and text kept)."""
        provider = self.provider(kind, _name(kind, obj))
        if provider in self.registries.builtin or getattr(error, "_kvrules_noted", False):
            return
        error.add_note(f"raised by {self.what(kind, obj)} of {provider}")
        error._kvrules_noted = True  # type: ignore[attr-defined]  # the innermost asker names it

    def _blame(
        self, kind: str, obj: Any, method: str, exc: Exception, args: tuple[Any, ...] = ()
    ) -> PluginError:
        """Whom ``exc``, raised while ``obj`` was asked ``method(*args)``, is a fault of: the plugin
        whose module raised it; else a spec among ``args`` whose answers, asked again, are now
        wrong (a spec type answering sanely when checked and wrongly later, which the rule then
        tripped on); else ``obj``."""
        raised = f"raised {type(exc).__name__} in {method}: {exc}"
        origin = _innermost_plugin_module(exc.__traceback__, self.registries)
        asked = self.provider(kind, _name(kind, obj))
        if origin is not None and origin[1] != asked and not isinstance(obj, type):
            module, provider = origin
            return PluginError(
                f"{provider} (module {module}) raised {type(exc).__name__} while "
                f"{self.what(kind, obj)} was asked {method}(): {exc}"
            )
        late = None if kind == "spec-type" else _late_spec_fault(args)
        if late is not None:
            spec, problem = late
            return self.fault(
                "spec-type",
                spec,
                f"answered sanely when checked but, asked again, {problem}; "
                f"{self.what(kind, obj)} then raised {type(exc).__name__} in {method}: {exc}",
            )
        return self.fault(kind, obj, raised)

    def check(self, kind: str, obj: Any, method: str, *args: Any) -> Check:
        """A guard's answer: ``obj.method(*args)`` checked to be a :class:`Check`."""
        check = self.call(kind, obj, method, *args)
        problem = answers.check_problem(check)
        if problem:
            raise self.fault(kind, obj, f"returned {check!r} from {method}(): {problem}")
        return check  # type: ignore[no-any-return]

    # -- recording ------------------------------------------------------------------------
    @property
    def record(self) -> Callable[..., Decision]:
        """:meth:`DecisionLog.record` of :attr:`decisions`: append one decision (see :class:`~kvrules.Decision`)."""
        return self.decisions.record

    # -- the common loops -----------------------------------------------------------------
    def first(
        self,
        asked: Sequence[Any],
        stage: str,
        args: tuple[Any, ...],
        *,
        kind: str | None = None,
        method: str = "check",
        layer: str | None = None,
        before: Mapping[str, Any] | None = None,
        note: Callable[[str], str] = lambda reason: reason,
        record: bool = True,
    ) -> Asked:
        """Ask ``asked`` (already in order) their guard ``method(*args)`` until one applies.

        Each decline becomes a decision of ``stage`` (its reason passed through ``note``, for
        ``layer`` with spec summary ``before``), recorded at once, or with ``record=False`` only
        returned, for a caller that copies or filters them (one answer shared by many layers).

        :param kind: the kind of every object asked (rules: each rule's own ``kind``).
        """
        declined: list[str] = []
        declines: list[Decision] = []
        for obj in asked:
            answer = self.check(kind or obj.kind, obj, method, *args)
            if answer.applies:
                return Asked(obj, answer, declined, declines)
            decision = Decision(stage, obj.name, "declined", layer, note(answer.reason), before)
            if record:
                self.decisions.add(decision)
            declines.append(decision)
            declined.append(f"{obj.name}: {answer.reason}")
        return Asked(None, Check(False, ""), declined, declines)

    def each(
        self,
        rules: Sequence[Rule],
        stage: str,
        state: S,
        act: Callable[[Rule, Check, S], S],
        args: Callable[[S], tuple[Any, ...]],
        *,
        until: Callable[[S], bool] = lambda state: False,
    ) -> S:
        """Every rule of ``rules`` in order acting on ``state`` in turn: a rule whose guard
        ``check(*args(state))`` holds gives the next state, ``act(rule, answer, state)``.

        A decline is recorded at once, an applied decision (with the answer's ``details``) once
        the rule has acted. Stops early when ``until(state)`` holds.

        :returns: the last state.
        """
        for rule in rules:
            if until(state):
                break
            answer = self.check(rule.kind, rule, "check", *args(state))
            if not answer.applies:
                self.record(stage, rule.name, "declined", answer.reason)
                continue
            state = act(rule, answer, state)
            self.record(stage, rule.name, "applied", answer.reason, details=answer.details)
        return state

    # -- spec types ---------------------------------------------------------------------------
    def specs(
        self, specs: Mapping[str, Any], config: EngineConfig, *, where: str = ""
    ) -> Mapping[str, KVCacheSpec]:
        """Check every spec's own answers (sizes, memory, hash) once per distinct spec value.

        :returns: ``specs``, or where several layers hold equal spec objects, a new table whose
            layers hold one of them (the first seen), so that later per-spec work runs once per
            distinct value (a model file or HF config gives every layer its own object).
        :raises SpecError: a value is not a spec at all (the caller's input).
        :raises PluginError: a spec's type answers wrongly (naming the spec type's plugin).
        """
        seen: dict[KVCacheSpec, KVCacheSpec] = {}
        distinct = distinct_specs(specs.values())
        firsts = _first_layers(specs, distinct)
        same: dict[int, KVCacheSpec] = {}
        for spec in distinct:
            layer = firsts[id(spec)]
            if not isinstance(spec, KVCacheSpec):
                raise SpecError(f"{where}layer {layer!r}: {spec!r} is not a KV-cache spec")
            problem, first = self._spec(layer, spec, config, seen)
            if problem:
                raise self.fault("spec-type", spec, f"(layer {layer!r}) {problem}")
            if first is not spec:
                same[id(spec)] = first
        if not same:
            return specs
        return {name: same.get(id(spec), spec) for name, spec in specs.items()}

    def _spec(
        self,
        layer: str,
        spec: KVCacheSpec,
        config: EngineConfig | None,
        seen: dict[KVCacheSpec, KVCacheSpec],
    ) -> tuple[str | None, KVCacheSpec]:
        """The problem of ``spec``'s answers (checked once per distinct value: ``seen`` maps each
        value checked to the first object that held it) and that first object."""
        try:
            first = seen.get(spec)
            if first is not None:
                return None, first
            problem = answers.spec_problem(spec, config)
            seen[spec] = spec
            return problem, spec
        except KVRulesError:
            raise
        except Exception as exc:
            raise self._blame("spec-type", spec, f"the sizes of layer {layer!r}", exc) from exc

    def made(
        self,
        kind: str,
        obj: Any,
        made: Mapping[str, KVCacheSpec] | Sequence[tuple[str, KVCacheSpec]],
        given: Mapping[str, KVCacheSpec],
        config: EngineConfig | None = None,
    ) -> None:
        """Check the specs ``obj`` answered with (layer -> spec) that it was not ``given``.

        :raises PluginError: naming ``obj`` when a spec it made answers like no valid spec
            (a spec type's own code raising is blamed on that spec type's plugin).
        """
        known = set(map(id, distinct_specs(given.values())))
        if isinstance(made, Mapping) and known.issuperset(map(id, made.values())):
            return  # every spec object was given (checked before): no per-layer loop
        seen: dict[KVCacheSpec, KVCacheSpec] = {}
        for layer, spec in made.items() if isinstance(made, Mapping) else made:
            if id(spec) in known:
                continue
            known.add(id(spec))
            problem, _ = self._spec(layer, spec, config, seen)
            if problem:
                builtin = self.registries.builtin
                owner = self.provider("spec-type", _name("spec-type", spec))
                if self.provider(kind, _name(kind, obj)) in builtin and owner not in builtin:
                    # a built-in made a spec of a third party's type (say, with evolve()): the
                    # type's own answers are wrong, not the built-in that made it
                    raise self.fault(
                        "spec-type",
                        spec,
                        f"(layer {layer}, made by {KIND_WORDS.get(kind, kind)} {_name(kind, obj)!r}) {problem}",
                    )
                raise self.fault(
                    kind, obj, f"returned a spec for {layer} that, as a {type(spec).__name__}, {problem}"
                )

    def blocks(self, spec: KVCacheSpec, config: EngineConfig) -> int:
        """A group spec's ``blocks_per_request(config)``, asked of its spec type and checked (an int
        >= 0), once per spec object and config."""
        known = self._blocks.get((id(spec), id(config)))
        if known is not None:
            return known[2]
        value = self.call("spec-type", spec, "blocks_per_request", config)
        problem = answers.int_problem(value, "blocks_per_request()", 0)
        if problem:
            raise self.fault("spec-type", spec, problem)
        self._blocks[(id(spec), id(config))] = (spec, config, int(value))
        return int(value)

    def summary(self, spec: KVCacheSpec) -> dict[str, Any]:
        """A spec's ``summary()`` for a decision record, asked of its spec type and checked (a dict)."""
        value = self.call("spec-type", spec, "summary")
        if not isinstance(value, dict):
            raise self.fault("spec-type", spec, f"answers summary() = {value!r}, not a dict")
        return value

    def watched(
        self, before: Mapping[int, tuple[Any, tuple[Any, ...]]], rule: Rule, method: str, *args: Any
    ) -> Any:
        """:meth:`call`, and when the rule raises a kvrules error, first whether it had changed a
        spec it was given in place (then that is its fault, whatever it raised)."""
        config = next((a.config for a in args if isinstance(getattr(a, "config", None), EngineConfig)), None)
        settings = dict(vars(config)) if config is not None else None
        try:
            answer = self.call(rule.kind, rule, method, *args)
        except KVRulesError as exc:
            problem = changed_in_place(before)
            if problem:
                raise self.fault(rule.kind, rule, problem) from exc
            raise
        if config is not None and dict(vars(config)) != settings:
            raise self.fault(
                rule.kind, rule, "changed the engine settings (ctx.config) in place; they are immutable"
            )
        return answer

    # -- converters, routers, fallbacks ---------------------------------------------------------
    def convert(
        self, rule: Rule, specs: Mapping[str, KVCacheSpec], ctx: Any, check: Check | None = None
    ) -> dict[str, KVCacheSpec]:
        """A converter's rewritten specs: the same layers in the same order, each a spec
        (``check``: the converter's guard's answer, handed to it as ``ctx.check``)."""
        before = snapshot(specs)
        new = self.watched(before, rule, "convert", self.frozen(specs), acting(ctx, check))
        problem = changed_in_place(before) or answers.specs_problem(new, specs, "convert()")
        if problem:
            raise self.fault(rule.kind, rule, problem)
        self.made(rule.kind, rule, _layers(new), specs, getattr(ctx, "config", None))
        return dict(new)

    def route(
        self, rule: Rule, specs: Mapping[str, KVCacheSpec], ctx: Any, check: Check | None = None
    ) -> list[KVCacheGroup]:
        """A router's or fallback's groups, covering every layer of ``specs`` once.

        A router or fallback with an ``explain(layer, before, after, ctx)`` method changes
        layers' specs (``full-allocation-fallback``): each layer whose spec its groups changed
        gets a decision of its own, with that sentence and both summaries."""
        groups = self._groups(rule, "route", specs, ctx, check)
        if callable(getattr(rule, "explain", None)):
            self._explain_changes(rule, specs, groups, ctx)
        return groups

    def _explain_changes(
        self, rule: Rule, specs: Mapping[str, KVCacheSpec], groups: Sequence[KVCacheGroup], ctx: Any
    ) -> None:
        for group in groups:
            for layer, after in group.spec.members(group.layer_names).items():
                before = specs[layer]
                if after != before:
                    self.record(
                        "route",
                        rule.name,
                        "applied",
                        self.sentence(rule.kind, rule, "explain", layer, before, after, ctx),
                        layer=layer,
                        before=self.summary(before),
                        after=self.summary(after),
                    )

    def _groups(
        self, rule: Rule, method: str, specs: Mapping[str, KVCacheSpec], ctx: Any, check: Check | None
    ) -> list[KVCacheGroup]:
        before = snapshot(specs)
        groups = self.watched(before, rule, method, self.frozen(specs), acting(ctx, check))
        problem = changed_in_place(before) or answers.groups_problem(groups, specs)
        if problem:
            raise self.fault(rule.kind, rule, problem)
        self.made(rule.kind, rule, _group_specs(groups), specs)
        return list(groups)

    # -- layer strategies ---------------------------------------------------------------------
    def strategy(
        self, rule: Rule, layer: str, spec: KVCacheSpec, target: int, ctx: Any, check: Check | None = None
    ) -> KVCacheSpec:
        """A layer strategy's new spec for ``layer``: same type, page ``target``, only its
        ``touches`` changed, and the given spec left as it was."""
        before = spec.field_values()
        new = self.call(rule.kind, rule, "apply", layer, spec, target, acting(ctx, check))
        touches = frozenset(getattr(rule, "touches", frozenset()))
        problem = None
        if spec.field_values() != before:
            problem = f"changed the spec of layer {layer!r} in place; return a new spec (spec.evolve(...))"
        problem = problem or answers.strategy_problem(layer, spec, new, target, touches)
        if problem:
            raise self.fault(rule.kind, rule, problem)
        self.made(rule.kind, rule, [(f"layer {layer!r}", new)], {layer: spec})
        return new  # type: ignore[no-any-return]

    # -- partitioners and groupers ----------------------------------------------------------------
    def partition(
        self, rule: Rule, specs: Mapping[str, KVCacheSpec], ctx: Any, check: Check | None = None
    ) -> tuple[list[KVCacheGroup], Mapping[str, KVCacheSpec]]:
        """A partitioner's groups and the specs it leaves: together, every layer once."""
        before = snapshot(specs)
        answer = self.watched(before, rule, "partition", self.frozen(specs), acting(ctx, check))
        if not (isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], Mapping)):
            raise self.fault(
                rule.kind, rule, f"returned {answer!r} from partition(), not (groups, remaining specs)"
            )
        groups, remaining = answer
        problem, left = answers.partition_problem(groups, remaining, specs)
        problem = changed_in_place(before) or problem
        if problem:
            raise self.fault(rule.kind, rule, problem)
        self.made(rule.kind, rule, _group_specs(groups), specs)
        return list(groups), left

    def group(
        self, rule: Rule, specs: Mapping[str, KVCacheSpec], ctx: Any, check: Check | None = None
    ) -> list[KVCacheGroup]:
        """A grouper's groups, covering every layer of ``specs`` once."""
        return self._groups(rule, "group", specs, ctx, check)

    # -- layouts -------------------------------------------------------------------------------
    def block_bytes(self, rule: Rule, groups: Sequence[KVCacheGroup]) -> int:
        """Bytes one block costs on the worker (an int > 0)."""
        return self._int(rule, "block_bytes", 1, groups)

    def request_bytes(self, rule: Rule, groups: Sequence[KVCacheGroup], config: EngineConfig) -> int:
        """Bytes one request of ``config.max_model_len`` needs on the worker (an int >= 0)."""
        return self._int(rule, "request_bytes", 0, groups, config)

    def _int(self, rule: Rule, method: str, minimum: int, *args: Any) -> int:
        value = self.call(rule.kind, rule, method, *args)
        problem = answers.int_problem(value, f"{method}()", minimum)
        if problem:
            raise self.fault(rule.kind, rule, problem)
        return int(value)

    def tensors(
        self,
        rule: Rule,
        groups: Sequence[KVCacheGroup],
        num_blocks: int,
        memory: int,
    ) -> tuple[KVCacheTensor, ...]:
        """The worker's tensors: non-negative, covering every layer, fitting ``memory``."""
        tensors = self.call(rule.kind, rule, "tensors", groups, num_blocks)
        problem = answers.tensors_problem(tensors, groups, memory, num_blocks)
        if problem:
            raise self.fault(rule.kind, rule, problem)
        return tuple(tensors)

    def backing(
        self, rule: Rule, groups: Sequence[KVCacheGroup], num_blocks: int, layout: str | None
    ) -> tuple[BackingTensor, ...]:
        """A layout's one backing allocation in vLLM 0.33's form (``backing(groups, num_blocks,
        layout)``): a tuple of :class:`~kvrules.plan.BackingTensor`."""
        backing = self.call(rule.kind, rule, "backing", groups, num_blocks, layout)
        if not isinstance(backing, tuple) or not all(isinstance(t, BackingTensor) for t in backing):
            raise self.fault(
                rule.kind,
                rule,
                f"returned {shown(backing)} from backing(); it must return a tuple of kvrules.plan.BackingTensor",
            )
        return backing

    # -- aligners --------------------------------------------------------------------------------
    def align(
        self, rule: Rule, specs: Mapping[str, KVCacheSpec], ctx: Any, check: Check | None = None
    ) -> dict[str, KVCacheSpec]:
        """An aligner's specs: same layers, order and types; only its ``touches`` changed."""
        before = snapshot(specs)
        new = self.watched(before, rule, "align", self.frozen(specs), acting(ctx, check))
        touches = frozenset(getattr(rule, "touches", frozenset()))
        problem = changed_in_place(before) or answers.alignment_problem(specs, new, touches)
        if problem:
            raise self.fault(rule.kind, rule, problem)
        self.made(rule.kind, rule, _layers(new), specs)
        return dict(new)

    def sentence(self, kind: str, obj: Any, method: str, *args: Any) -> str:
        """A plugin's sentence for a decision record (``explain``), checked to be a str."""
        text = self.call(kind, obj, method, *args)
        if not isinstance(text, str):
            raise self.fault(kind, obj, f"returned {text!r} from {method}(), not a sentence (str)")
        return text

    # -- architectures -----------------------------------------------------------------------------
    def build(
        self, arch: Any, config: Any, settings: Any, method: str = "build", *extra: Any
    ) -> dict[str, KVCacheSpec]:
        """An architecture's specs (``build``, or ``mtp_specs`` with ``extra`` arguments)."""
        specs = self.call("architecture", arch, method, config, settings, *extra)
        problem = answers.architecture_problem(specs)
        if problem:
            raise self.fault("architecture", arch, problem)
        self.made("architecture", arch, _layers(specs), {})
        return specs  # type: ignore[no-any-return]

    # -- allocators ---------------------------------------------------------------------------------
    def allocate(self, allocator: Any, request: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """An allocator's ``(buffers, views)``: one buffer per tensor, of its planned size, and a
        view entry for every layer of the worker."""
        asked = dataclasses.replace(request, layouts=self._asked_layouts(allocator, request))
        result = self.call("allocator", allocator, "allocate", asked)
        layers = {p.layer for p in request.placements}
        problem = answers.allocation_problem(result, request.sizes, request.backing, layers)
        if problem:
            del result
            raise self.fault("allocator", allocator, problem)
        return tuple(result[0]), dict(result[1])

    def _asked_layouts(self, allocator: Any, request: Any) -> dict[str, ViewLayout]:
        """``request.layouts`` with each distinct view layout wrapped once in an :class:`AskedViewLayout`."""
        wrapped: dict[int, ViewLayout] = {}
        out: dict[str, ViewLayout] = {}
        for layer, layout in request.layouts.items():
            if id(layout) not in wrapped:
                wrapped[id(layout)] = AskedViewLayout.around(layout, self, allocator, request)
            out[layer] = wrapped[id(layout)]
        return out

    def layer_view(self, allocator: Any, layout: Any, request: Any, raw: Any, place: Placement) -> Any:
        """``layout.build(raw, place)`` on behalf of ``allocator``: ``raw`` checked to be the
        planned buffer first (else the allocator is at fault), then the views (else the layout is)."""
        expected = request.sizes[request.backing[place.tensor]]
        problem = answers.buffer_problem(raw, expected)
        if problem:
            raise self.fault(
                "allocator",
                allocator,
                f"handed view layout {_name('view-layout', layout)!r} buffer {place.tensor} "
                f"(layer {place.layer!r}) of {problem}",
            )
        view = self.call("view-layout", layout, "build", raw, place)
        problem = answers.view_problem(view, place.num_blocks, place.content_bytes)
        if problem:
            raise self.fault("view-layout", layout, f"(layer {place.layer!r}) {problem}")
        return view


@dataclass(frozen=True, eq=False)
class AskedViewLayout(ViewLayout):
    """A view layout as an allocator finds it in its request: ``build`` and ``supports`` are asked
    through the asker (:meth:`Asker.layer_view`); every other attribute is the wrapped layout's."""

    layout: Any = field(default=None, repr=False)
    asker: Any = field(default=None, repr=False)
    allocator: Any = field(default=None, repr=False)
    request: Any = field(default=None, repr=False)

    @classmethod
    def around(cls, layout: Any, asker: Asker, allocator: Any, request: Any) -> AskedViewLayout:
        """``layout`` (its name, priority, description and ``default``) asked through ``asker``."""
        return cls(
            name=_name("view-layout", layout),
            priority=getattr(layout, "priority", 0),
            description=getattr(layout, "description", ""),
            default=getattr(layout, "default", True),
            layout=layout,
            asker=asker,
            allocator=allocator,
            request=request,
        )

    def supports(self, spec: KVCacheSpec) -> Check:
        """The wrapped layout's answer, checked to be a :class:`Check`."""
        return self.asker.check("view-layout", self.layout, "supports", spec)  # type: ignore[no-any-return]

    def build(self, raw: Any, place: Placement) -> Any:
        """The wrapped layout's views, asked through :meth:`Asker.layer_view`."""
        return self.asker.layer_view(self.allocator, self.layout, self.request, raw, place)

    def __getattr__(self, attribute: str) -> Any:
        if attribute in {"layout", "asker", "allocator", "request"} or attribute.startswith("__"):
            raise AttributeError(attribute)
        return getattr(self.layout, attribute)


def acting(ctx: Any, check: Check | None) -> Any:
    """``ctx`` as a rule's action is handed it: a copy whose ``check`` is the answer the rule's
    guard gave (``ctx`` itself without an answer, or for a context that has no ``check``)."""
    if check is None or not hasattr(ctx, "check") or not dataclasses.is_dataclass(ctx):
        return ctx
    return dataclasses.replace(ctx, check=check)  # type: ignore[type-var]


def _layers(specs: Mapping[str, KVCacheSpec]) -> list[tuple[str, KVCacheSpec]]:
    """``("layer 'x'", spec)`` for :meth:`Asker.made`."""
    return [(f"layer {name!r}", spec) for name, spec in specs.items()]


def _group_specs(groups: Sequence[KVCacheGroup]) -> list[tuple[str, KVCacheSpec]]:
    """``("group i", spec)`` of every group, for :meth:`Asker.made`."""
    return [(f"group {index}", group.spec) for index, group in enumerate(groups)]


def _late_spec_fault(args: tuple[Any, ...]) -> tuple[KVCacheSpec, str] | None:
    """The first spec among ``args`` (a spec, the values of a mapping, groups' specs and their
    members) whose answers (:func:`~kvrules.plugin.answers.spec_problem`, per request with the
    engine settings among ``args``) are wrong when asked now, with what is wrong."""
    config = next((a for a in args if isinstance(a, EngineConfig)), None) or next(
        (a.config for a in args if isinstance(getattr(a, "config", None), EngineConfig)), None
    )
    try:
        specs = _specs_among(args)
    except Exception:  # asking on behalf of a failure: a spec that cannot even say this is not it
        return None
    for spec in specs:
        try:
            problem = answers.spec_problem(spec, config)
        except KVRulesError:
            continue
        except Exception as exc:
            problem = f"raised {type(exc).__name__} ({exc})"
        if problem:
            return spec, problem
    return None


def _specs_among(args: tuple[Any, ...]) -> list[KVCacheSpec]:
    found: list[Any] = []
    for arg in args:
        if isinstance(arg, KVCacheSpec):
            found.append(arg)
        elif isinstance(arg, Mapping):
            found += distinct_specs(arg.values())
        elif isinstance(arg, (list, tuple)):
            found += [g.spec for g in arg if isinstance(g, KVCacheGroup)]
    members = [m for s in found if isinstance(s, KVCacheSpec) and s.has_members for m in _members(s)]
    return [s for s in distinct_specs([*found, *members]) if isinstance(s, KVCacheSpec)]


def _members(spec: KVCacheSpec) -> list[Any]:
    try:
        return list(getattr(spec, "kv_cache_specs", {}).values())
    except Exception:  # a broken group spec: its own check names it
        return []


def _name(kind: str, obj: Any) -> str:
    if kind == "spec-type":
        cls = obj if isinstance(obj, type) else type(obj)
        return str(getattr(cls, "type_name", cls.__name__))
    return str(getattr(obj, "name", type(obj).__name__))


def snapshot(specs: Mapping[str, Any]) -> dict[int, tuple[Any, tuple[Any, ...]]]:
    """Field values of every distinct spec object in ``specs`` (to catch a plugin mutating them)."""
    return {id(spec): (spec, spec.field_values()) for spec in distinct_specs(specs.values())}


def changed_in_place(before: Mapping[int, tuple[Any, tuple[Any, ...]]]) -> str | None:
    """The first spec of a :func:`snapshot` whose fields changed since, described (else ``None``)."""
    for spec, values in before.values():
        if spec.field_values() != values:
            return f"changed a spec it was given in place ({type(spec).__name__}); specs are immutable"
    return None


def _first_layers(specs: Mapping[str, Any], distinct: Sequence[Any]) -> dict[int, str]:
    """The first layer of each object in ``distinct`` (by ``id``), in work linear in layers.

    A few shared objects: one C-level scan each; many distinct objects (one per layer, say):
    one Python pass over the table, never a scan per object (that is quadratic, issue 25 R1).
    """
    if len(distinct) <= 8:
        return {id(spec): next(compress(specs, map(is_, specs.values(), repeat(spec)))) for spec in distinct}
    firsts: dict[int, str] = {}
    for layer, spec in specs.items():
        firsts.setdefault(id(spec), layer)
    return firsts


__all__ = ["KIND_WORDS", "Asked", "AskedViewLayout", "Asker", "changed_in_place", "snapshot"]
