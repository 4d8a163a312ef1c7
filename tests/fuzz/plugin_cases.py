"""Faulty plugins under fuzz: random faults at random extension points, in random combinations.

One plugin, ``fuzz-plugin``, registered in-process through the public API
(``kvrules.get_plugin_manager(autoload=False, plugins=[plugin])``), carries one wrapper object per
chosen extension point. Each wrapper is sound by itself: it asks the built-in objects of its kind
(those of the chosen strategy set) and returns what they answer, so the plan is the baseline
plan. It turns faulty at the ``call``-th call of one method: it raises, returns ``None`` or a
value of the wrong type, breaks an invariant of its answer, or changes its input in place.

A case is data::

    {"model": "hybrid", "base": "vllm" | "default",
     "faults": [{"point": "layout", "method": "tensors", "fault": "omit", "call": 1}, ...]}

:func:`run_plugin_case` classifies the run (:mod:`fuzz.outcome`): a ``PluginError`` naming
``fuzz-plugin`` (and no built-in plugin) is the right refusal (``error``); a plan accepted is
``ok`` when it keeps every invariant, left the caller's specs and config as they were and, when
no fault fired, equals the baseline plan, else ``broken``. Another KVRulesError is right when the
built-ins alone end in it too, when it names the faulty object (``'fuzz-...'``), or when every
fault that fired is a lie kvrules cannot tell from the truth (:data:`LIES`); otherwise, and for a
PluginError that does not name ``fuzz-plugin`` or names a built-in plugin, it is ``blame``.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar

import kvrules
from fuzz.draw import Draw
from fuzz.invariants import InvariantBroken, check_plan_invariants
from fuzz.outcome import BLAME, BROKEN, ERROR, OK, Outcome, from_exception, head, time_limit
from kvrules import get_plugin_manager, resolve_strategies
from kvrules.plugin import (
    Aligner,
    Allocator,
    Architecture,
    Check,
    Converter,
    Fallback,
    Grouper,
    LayerStrategy,
    Layout,
    Partitioner,
    Router,
    ViewLayout,
    applies,
    declines,
    hookimpl,
)

PLUGIN = "fuzz-plugin"
HIGH = 1_000_000
Case = dict[str, Any]
Specs = Mapping[str, kvrules.KVCacheSpec]


@dataclass(eq=False)
class Box:
    """A wrapper's mutable state (its frozen dataclass holds the box, never changes it): calls
    per method, the faults that fired, the built-in object chosen by the last guard."""

    faults: tuple[tuple[str, str, int], ...] = ()
    calls: Counter[str] = field(default_factory=Counter)
    fired: list[str] = field(default_factory=list)
    chosen: Any = None

    def fault(self, method: str) -> str | None:
        """The fault to commit on this call of ``method`` (``None``: behave)."""
        self.calls[method] += 1
        for name, fault, call in self.faults:
            if name == method and call == self.calls[method]:
                self.fired.append(f"{method}:{fault}")
                return fault
        return None


EXCEPTIONS: tuple[type[Exception], ...] = (
    ValueError,
    KeyError,
    RuntimeError,
    TypeError,
    AttributeError,
    ZeroDivisionError,
    IndexError,
    RecursionError,
    OverflowError,
    MemoryError,
    AssertionError,
    NotImplementedError,
    StopIteration,
)
WRONG: tuple[Any, ...] = (0, -1, "yes", [], {}, True, 1.5, (1, 2), float("nan"), object())
WRONG_CHECKS: tuple[Any, ...] = (True, "yes", 1, None, (True, "why"), Check(True, 12345), Check("yes", "why"))


def generic(fault: str) -> Any:
    """Commit a fault every method can have: ``raise:<Type>``, ``none``, ``wrong:<i>``."""
    kind, _, arg = fault.partition(":")
    if kind == "raise":
        raise {e.__name__: e for e in EXCEPTIONS}[arg](f"the fuzz plugin fails on purpose ({arg})")
    if kind == "wrong":
        return WRONG[int(arg)]
    if kind == "check":
        return WRONG_CHECKS[int(arg)]
    return None


CACHED = ("page_size_bytes", "real_page_size_bytes", "unpadded_page_size_bytes", "state_bytes", "_hash")


def _drop_caches(spec: kvrules.KVCacheSpec) -> None:
    for name in CACHED:
        spec.__dict__.pop(name, None)


def forged(spec: kvrules.KVCacheSpec, **fields: Any) -> kvrules.KVCacheSpec:
    """A copy of ``spec`` with ``fields`` forced past its validation."""
    copy = dataclasses.replace(spec)  # type: ignore[type-var]
    for name, value in fields.items():
        object.__setattr__(copy, name, value)
    _drop_caches(copy)
    return copy


def mutate(spec: kvrules.KVCacheSpec) -> None:
    """Change ``spec`` in place (its block size doubled, cached sizes dropped)."""
    object.__setattr__(spec, "block_size", spec.block_size * 2)
    _drop_caches(spec)


def mutate_config(ctx: Any) -> None:
    """Change the engine settings the plugin was handed, in place."""
    config = getattr(ctx, "config", None)
    if config is not None:
        object.__setattr__(config, "max_model_len", max(1, config.max_model_len // 2))


# -- corrupting answers ------------------------------------------------------------------------------


def bad_specs(fault: str, specs: Specs, new: dict[str, kvrules.KVCacheSpec]) -> Any:
    """A converter's or aligner's answer (layer -> spec) broken the way ``fault`` says."""
    names = list(new)
    if fault == "drop":
        return {n: new[n] for n in names[1:]}
    if fault == "add":
        return {**new, "fuzz.stranger": new[names[0]]}
    if fault == "reorder":
        return {n: new[n] for n in reversed(names)}
    if fault == "forged":
        return {**new, names[0]: forged(new[names[0]], block_size=0)}
    if fault == "ints":
        return dict.fromkeys(names, 16)
    if fault == "other-type":
        mamba = kvrules.MambaSpec(16, [[4, 4]], ["bfloat16"])
        return {**new, names[0]: mamba}
    if fault == "untouched":
        first = new[names[0]]
        changed = forged(first, dtype="float32") if getattr(first, "dtype", None) else first
        return {**new, names[0]: changed}
    return generic(fault)


def bad_groups(fault: str, groups: list[kvrules.KVCacheGroup]) -> Any:
    """A router's, fallback's or grouper's groups broken the way ``fault`` says."""
    if not groups:
        return generic("none") if fault != "empty-group" else groups
    first = groups[0]
    names = first.layer_names
    fixes: dict[str, Any] = {
        "drop": lambda: [kvrules.KVCacheGroup(names[1:], first.spec), *groups[1:]],
        "dup": lambda: [*groups, kvrules.KVCacheGroup(names[:1], first.spec)],
        "unknown": lambda: [kvrules.KVCacheGroup((*names, "fuzz.stranger"), first.spec), *groups[1:]],
        "merge": lambda: [kvrules.KVCacheGroup(tuple(n for g in groups for n in g.layer_names), first.spec)],
        "forged": lambda: [kvrules.KVCacheGroup(names, forged(first.spec, block_size=0)), *groups[1:]],
        "list-names": lambda: [kvrules.KVCacheGroup(list(names), first.spec), *groups[1:]],  # type: ignore[arg-type]
        "eagle-str": lambda: [kvrules.KVCacheGroup(names, first.spec, "yes"), *groups[1:]],  # type: ignore[arg-type]
        "empty-group": lambda: [*groups, kvrules.KVCacheGroup((), first.spec)],
        "non-spec": lambda: [kvrules.KVCacheGroup(names, 5), *groups[1:]],  # type: ignore[arg-type]
        "strings": lambda: [n for g in groups for n in g.layer_names],
        "tuple": lambda: tuple(groups),
    }
    make = fixes.get(fault)
    return make() if make is not None else generic(fault)


def bad_int(fault: str, value: int) -> Any:
    """A layout's byte count broken (or lied about) the way ``fault`` says."""
    table = {"zero": 0, "negative": -value, "huge": 10**30, "float": value + 0.5, "str": str(value)}
    if fault in table:
        return table[fault]
    if fault == "half":
        return max(1, value // 2)
    if fault == "double":
        return value * 2
    return generic(fault)


def bad_tensors(fault: str, tensors: tuple[kvrules.KVCacheTensor, ...]) -> Any:
    """A layout's tensors broken the way ``fault`` says."""
    if not tensors:
        return generic("none")
    first = tensors[0]
    rest = tensors[1:]

    def with_first(**changes: Any) -> tuple[kvrules.KVCacheTensor, ...]:
        return (dataclasses.replace(first, **changes), *rest)

    table: dict[str, Any] = {
        "negative": lambda: with_first(size=-5),
        "huge": lambda: with_first(size=first.size + 10**15),
        "omit": lambda: rest if rest else with_first(shared_by=first.shared_by[1:]),
        "unknown": lambda: with_first(shared_by=(*first.shared_by, "fuzz.stranger")),
        "dup": lambda: (*tensors, first),
        "offset-negative": lambda: with_first(offset=-1),
        "stride-negative": lambda: with_first(block_stride=-1),
        "float-size": lambda: with_first(size=float(first.size)),
        "list": lambda: list(tensors),
        "double": lambda: with_first(size=first.size * 2),
        "smaller": lambda: with_first(size=first.size // 2),
    }
    make = table.get(fault)
    return make() if make is not None else generic(fault)


# -- the wrappers -------------------------------------------------------------------------------------


@cache
def builtin_registries() -> Any:
    """The registries of a plugin manager with the built-in plugins only."""
    return get_plugin_manager(autoload=False).registries


def builtin_rules(kind: str, base: str) -> tuple[Any, ...]:
    """The built-in rules of ``kind`` active in the strategy set ``base``, in asking order."""
    return resolve_strategies(base, builtin_registries().rules).rules(kind)


@dataclass(frozen=True)
class Wrapper:
    """Fields of every wrapper: the built-in objects it asks, and its box."""

    inner: tuple[Any, ...] = field(default=(), repr=False)
    box: Box = field(default_factory=Box, repr=False)

    def first(self, *args: Any) -> Check:
        """The first inner rule whose guard applies becomes the chosen one."""
        fault = self.box.fault("check")
        if fault is not None:
            return generic(fault)  # type: ignore[no-any-return]
        for rule in self.inner:
            check = rule.check(*args)
            if check.applies:
                self.box.chosen = rule
                return applies(f"fuzz: {rule.name} applies: {check.reason}")
        self.box.chosen = None
        return declines("fuzz: no built-in rule applies.")


@dataclass(frozen=True)
class FuzzConverter(Wrapper, Converter):
    """Passes the specs through unchanged (the built-in converters run after it)."""

    name: str = "fuzz-convert"
    priority: int = HIGH

    def check(self, specs: Specs, ctx: Any) -> Check:
        fault = self.box.fault("check")
        return generic(fault) if fault is not None else applies("fuzz: passes the specs on.")

    def convert(self, specs: Specs, ctx: Any) -> dict[str, kvrules.KVCacheSpec]:
        fault = self.box.fault("convert")
        new = dict(specs)
        if fault == "mutate":
            mutate(next(iter(specs.values())))
        if fault == "mutate-config":
            mutate_config(ctx)
        return new if fault in (None, "mutate", "mutate-config") else bad_specs(fault, specs, new)


@dataclass(frozen=True)
class FuzzRouter(Wrapper, Router):
    """Routes like the first built-in router that applies."""

    name: str = "fuzz-router"
    priority: int = HIGH

    @property
    def unifies(self) -> bool:  # type: ignore[override]
        return bool(getattr(self.box.chosen, "unifies", False))

    def check(self, specs: Specs, ctx: Any) -> Check:
        return self.first(specs, ctx)

    def route(self, specs: Specs, ctx: Any) -> list[kvrules.KVCacheGroup]:
        return _groups_answer(self.box, "route", lambda: self.box.chosen.route(specs, ctx), specs, ctx)


@dataclass(frozen=True)
class FuzzFallback(Wrapper, Fallback):
    """Falls back like the first built-in fallback that applies."""

    name: str = "fuzz-fallback"
    priority: int = HIGH

    def check(self, specs: Specs, ctx: Any) -> Check:
        return self.first(specs, ctx)

    def route(self, specs: Specs, ctx: Any) -> list[kvrules.KVCacheGroup]:
        return _groups_answer(self.box, "route", lambda: self.box.chosen.route(specs, ctx), specs, ctx)


@dataclass(frozen=True)
class FuzzGrouper(Wrapper, Grouper):
    """Groups like the first built-in grouper that applies."""

    name: str = "fuzz-grouper"
    priority: int = HIGH

    def check(self, specs: Specs, ctx: Any) -> Check:
        return self.first(specs, ctx)

    def group(self, specs: Specs, ctx: Any) -> list[kvrules.KVCacheGroup]:
        return _groups_answer(self.box, "group", lambda: self.box.chosen.group(specs, ctx), specs, ctx)


def _groups_answer(box: Box, method: str, answer: Any, specs: Specs, ctx: Any) -> Any:
    fault = box.fault(method)
    if fault == "mutate":
        mutate(next(iter(specs.values())))
    if fault == "mutate-config":
        mutate_config(ctx)
    groups = list(answer())
    return groups if fault in (None, "mutate", "mutate-config") else bad_groups(fault, groups)


@dataclass(frozen=True)
class FuzzPartitioner(Wrapper, Partitioner):
    """Sets nothing aside (the built-in partitioners run after it)."""

    name: str = "fuzz-partition"
    priority: int = HIGH

    def check(self, specs: Specs, ctx: Any) -> Check:
        fault = self.box.fault("check")
        return generic(fault) if fault is not None else applies("fuzz: sets nothing aside.")

    def partition(self, specs: Specs, ctx: Any) -> Any:
        fault = self.box.fault("partition")
        names = list(specs)
        first = specs[names[0]]
        table: dict[str, Any] = {
            "lose": lambda: ([], {n: specs[n] for n in names[1:]}),
            "both": lambda: ([kvrules.KVCacheGroup(tuple(names[:1]), first)], dict(specs)),
            "foreign": lambda: ([], {**specs, "fuzz.stranger": first}),
            "not-tuple": lambda: [[], dict(specs)],
            "changed": lambda: ([], {**specs, names[0]: forged(first, block_size=first.block_size + 1)}),
        }
        if fault == "mutate":
            mutate(first)
        if fault in (None, "mutate"):
            return [], dict(specs)
        make = table.get(fault)
        return make() if make is not None else generic(fault)


@dataclass(frozen=True)
class FuzzStrategy(Wrapper, LayerStrategy):
    """Brings pages to the target like the first built-in layer strategy that applies."""

    name: str = "fuzz-strategy"
    priority: int = HIGH

    @property
    def touches(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset(getattr(self.box.chosen, "touches", frozenset()))

    def check(self, layer: str, spec: kvrules.KVCacheSpec, target: int, ctx: Any) -> Check:
        return self.first(layer, spec, target, ctx)

    def apply(self, layer: str, spec: kvrules.KVCacheSpec, target: int, ctx: Any) -> Any:
        fault = self.box.fault("apply")
        if fault == "mutate":
            mutate(spec)
        new = self.box.chosen.apply(layer, spec, target, ctx)
        table: dict[str, Any] = {
            "wrong-page": lambda: forged(new, page_size_padded=target + 1),
            "other-type": lambda: kvrules.MambaSpec(16, [[target]], ["int8"]),
            "untouched": lambda: forged(new, num_kv_heads=getattr(new, "num_kv_heads", 1) + 1),
            "same": lambda: spec,
            "forged": lambda: forged(new, block_size=0),
        }
        if fault in (None, "mutate"):
            return new
        make = table.get(fault)
        return make() if make is not None else generic(fault)


@dataclass(frozen=True)
class FuzzLayout(Wrapper, Layout):
    """Lays tensors out like the first built-in layout that applies."""

    name: str = "fuzz-layout"
    priority: int = HIGH

    def _inner(self, groups: Sequence[kvrules.KVCacheGroup]) -> Any:
        ctx = self.box.chosen[1] if isinstance(self.box.chosen, tuple) else None
        return next(r for r in self.inner if r.check(groups, ctx).applies)

    def check(self, groups: Sequence[kvrules.KVCacheGroup], ctx: Any) -> Check:
        fault = self.box.fault("check")
        if fault is not None:
            return generic(fault)  # type: ignore[no-any-return]
        self.box.chosen = (None, ctx)
        rule = next((r for r in self.inner if r.check(groups, ctx).applies), None)
        return (
            applies(f"fuzz: {rule.name} applies.") if rule else declines("fuzz: no built-in layout applies.")
        )

    def block_bytes(self, groups: Sequence[kvrules.KVCacheGroup]) -> Any:
        fault = self.box.fault("block_bytes")
        value = self._inner(groups).block_bytes(groups)
        return value if fault is None else bad_int(fault, value)

    def request_bytes(self, groups: Sequence[kvrules.KVCacheGroup], config: Any) -> Any:
        fault = self.box.fault("request_bytes")
        value = self._inner(groups).request_bytes(groups, config)
        return value if fault is None else bad_int(fault, value)

    def tensors(self, groups: Sequence[kvrules.KVCacheGroup], num_blocks: int) -> Any:
        fault = self.box.fault("tensors")
        if fault == "mutate":
            mutate(groups[0].spec)
        tensors = self._inner(groups).tensors(groups, num_blocks)
        return tensors if fault in (None, "mutate") else bad_tensors(fault, tensors)


@dataclass(frozen=True)
class FuzzAligner(Wrapper, Aligner):
    """Aligns like the first built-in aligner that applies."""

    name: str = "fuzz-align"
    priority: int = HIGH

    @property
    def touches(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset(getattr(self.box.chosen, "touches", Aligner.touches))

    def check(self, specs: Specs, ctx: Any) -> Check:
        return self.first(specs, ctx)

    def align(self, specs: Specs, ctx: Any) -> Any:
        fault = self.box.fault("align")
        if fault == "mutate":
            mutate(next(iter(specs.values())))
        new = dict(self.box.chosen.align(specs, ctx))
        return new if fault in (None, "mutate") else bad_specs(fault, specs, new)

    def explain(self, layer: str, before: Any, after: Any, ctx: Any) -> Any:
        fault = self.box.fault("explain")
        text = self.box.chosen.explain(layer, before, after, ctx)
        return text if fault is None else generic(fault)


# -- spec type ----------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False, kw_only=True)
class FuzzSpec(kvrules.FullAttentionSpec):
    """Full attention whose answers turn faulty (the faults live in the class, see :func:`spec_class`)."""

    type_name: ClassVar[str] = "fuzz_attention"
    box: ClassVar[Box] = Box()

    def _answer(self, method: str, value: Any) -> Any:
        fault = type(self).box.fault(method)
        if fault is None:
            return value
        number = value if isinstance(value, int) else 0
        table = {
            "zero": 0,
            "negative": -1,
            "str": str(value),
            "float": number + 0.5,
            "huge": 10**30,
            "list": ["full"],
        }
        return table[fault] if fault in table else generic(fault)

    @property
    def page_size_bytes(self) -> int:  # type: ignore[override]
        return self._answer("page_size_bytes", kvrules.FullAttentionSpec.page_size_bytes.func(self))  # type: ignore[attr-defined,no-any-return]

    def max_memory_usage_bytes(self, config: Any) -> int:
        return self._answer("max_memory_usage_bytes", super().max_memory_usage_bytes(config))  # type: ignore[no-any-return]

    def blocks_per_request(self, config: Any) -> int:
        return self._answer("blocks_per_request", super().blocks_per_request(config))  # type: ignore[no-any-return]

    def uniform_type_key(self) -> Any:
        return self._answer("uniform_type_key", super().uniform_type_key())

    def summary(self) -> Any:
        return self._answer("summary", super().summary())

    def to_dict(self) -> Any:
        return self._answer("to_dict", super().to_dict())

    def evolve(self, **changes: Any) -> Any:
        fault = type(self).box.fault("evolve")
        if fault == "self":
            return self
        return super().evolve(**changes) if fault is None else generic(fault)

    def __hash__(self) -> int:
        fault = type(self).box.fault("hash")
        return super().__hash__() if fault is None else generic(fault)  # type: ignore[no-any-return]


def spec_class(box: Box) -> type[FuzzSpec]:
    """A :class:`FuzzSpec` subclass whose faults are ``box``'s (one class per case)."""
    return type("FuzzSpec", (FuzzSpec,), {"box": box, "__module__": __name__})


# -- architecture, allocator, view layout -----------------------------------------------------------


@dataclass(frozen=True)
class FuzzArchitecture(Architecture):
    """Recognises and builds like the built-in architecture that recognises the config."""

    name: str = "fuzz-arch"
    priority: int = HIGH
    box: Box = field(default_factory=Box, repr=False)

    def _arch(self, config: Any) -> Any:
        for arch in builtin_registries().architectures.ordered():
            if arch.recognises(config).applies:
                return arch
        return None

    def _call(self, method: str, config: Any, *args: Any) -> Any:
        fault = self.box.fault(method)
        answer = getattr(self._arch(config), method)(config, *args)
        if fault is None:
            return answer
        return _bad_build(fault, answer) if method in ("build", "mtp_specs") else generic(fault)

    def recognises(self, config: Any) -> Check:
        fault = self.box.fault("recognises")
        if fault is not None:
            return generic(fault)  # type: ignore[no-any-return]
        arch = self._arch(config)
        return applies(f"fuzz: {arch.name} recognises it.") if arch else declines("fuzz: no built-in does.")

    def build(self, config: Any, settings: Any) -> Any:
        return self._call("build", config, settings)

    def uses_mla(self, config: Any) -> Any:
        return self._call("uses_mla", config)

    def mamba_ssm_dtype_default(self, config: Any) -> Any:
        return self._call("mamba_ssm_dtype_default", config)

    def mtp_layer_count(self, config: Any) -> Any:
        fault = self.box.fault("mtp_layer_count")
        count = self._arch(config).mtp_layer_count(config)
        table = {"minus": -1, "huge": 10**9, "str": "1"}
        if fault is None:
            return count
        return table[fault] if fault in table else generic(fault)

    def engine_settings(self, config: Any, settings: Any) -> Any:
        fault = self.box.fault("engine_settings")
        answer = self._arch(config).engine_settings(config, settings)
        table = {
            "bogus": ({"bogus_setting": 1}, "fuzz"),
            "negative": ({"max_model_len": -1}, "fuzz"),
            "reason-int": ({}, 5),
        }
        if fault is None:
            return answer
        return table[fault] if fault in table else generic(fault)


def _bad_build(fault: str, specs: dict[str, Any]) -> Any:
    names = list(specs)
    table: dict[str, Any] = {
        "non-spec": lambda: dict.fromkeys(names, 128),
        "int-keys": lambda: {i: s for i, s in enumerate(specs.values())},
        "forged": lambda: {**specs, names[0]: forged(specs[names[0]], block_size=0)},
        "empty": lambda: {},
    }
    make = table.get(fault)
    return make() if make is not None else generic(fault)


@dataclass(frozen=True)
class FuzzAllocator(Allocator):
    """Allocates like the built-in ``torch`` allocator."""

    name: str = "fuzz-alloc"
    priority: int = HIGH
    box: Box = field(default_factory=Box, repr=False)

    @property
    def torch(self) -> Any:
        return builtin_registries().allocators.items["torch"]

    def supports(self, device: str) -> Check:
        fault = self.box.fault("supports")
        return self.torch.supports(device) if fault is None else generic(fault)  # type: ignore[no-any-return]

    def device_memory(self, device: str) -> Any:
        fault = self.box.fault("device_memory")
        table = {"negative": (-1, 0), "str": "lots"}
        if fault is None:
            return self.torch.device_memory(device)
        return table[fault] if fault in table else generic(fault)

    def buffer(self, nbytes: int, device: str) -> Any:
        fault = self.box.fault("buffer")
        table: dict[str, Any] = {
            "half": lambda: self.torch.buffer(max(1, nbytes // 2), device),
            "double": lambda: self.torch.buffer(nbytes * 2, device),
            "bytes": lambda: bytearray(8),
            "oom": lambda: _raise(RuntimeError("CUDA out of memory (fuzz)")),
        }
        if fault is None:
            return self.torch.buffer(nbytes, device)
        make = table.get(fault)
        return make() if make is not None else generic(fault)

    def is_out_of_memory(self, error: BaseException) -> bool:
        fault = self.box.fault("is_out_of_memory")
        return self.torch.is_out_of_memory(error) if fault is None else generic(fault)  # type: ignore[no-any-return]

    def build_views(self, request: Any, buffers: Sequence[Any]) -> Any:
        return self.torch.build_views(request, buffers)

    def allocate(self, request: Any) -> Any:
        fault = self.box.fault("allocate")
        buffers, views = super().allocate(request)
        table: dict[str, Any] = {
            "short": lambda: (buffers[:-1], views),
            "no-views": lambda: (buffers, {}),
            "list": lambda: [buffers, views],
        }
        if fault is None:
            return buffers, views
        make = table.get(fault)
        return make() if make is not None else generic(fault)


def _raise(error: Exception) -> Any:
    raise error


@dataclass(frozen=True)
class FuzzViewLayout(ViewLayout):
    """Views pages like the first built-in view layout that supports the spec."""

    name: str = "fuzz-view"
    priority: int = HIGH
    box: Box = field(default_factory=Box, repr=False)

    def _inner(self, spec: Any) -> Any:
        layouts = builtin_registries().allocators.ordered_view_layouts()
        return next((v for v in layouts if v.supports(spec).applies), None)

    def supports(self, spec: Any) -> Check:
        fault = self.box.fault("supports")
        if fault is not None:
            return generic(fault)  # type: ignore[no-any-return]
        inner = self._inner(spec)
        return (
            applies(f"fuzz: {inner.name} does.") if inner else declines("fuzz: no built-in view layout does.")
        )

    def build(self, raw: Any, place: Any) -> Any:
        fault = self.box.fault("build")
        view = self._inner(place.spec).build(raw, place)
        table: dict[str, Any] = {"tiny": lambda: raw[:1], "raw": lambda: raw, "empty-tuple": lambda: ()}
        if fault is None:
            return view
        make = table.get(fault)
        return make() if make is not None else generic(fault)


# -- the plugin ---------------------------------------------------------------------------------------


class FuzzPlugin:
    """The plugin ``fuzz-plugin``: registers its wrappers from the matching hooks; a
    ``registration`` fault breaks one hook."""

    name = PLUGIN

    def __init__(self, objects: Mapping[str, Any], spec: type | None, registration: str | None) -> None:
        self.objects = dict(objects)
        self.spec = spec
        self.registration = registration

    def _extra(self, hook: str) -> list[Any]:
        fault = self.registration or ""
        if fault == f"raise-{hook}":
            raise RuntimeError(f"the fuzz plugin's {hook} hook fails on purpose")
        if fault == f"object-{hook}":
            return [object()]
        return []

    @hookimpl
    def kvrules_register_rules(self, registry: Any) -> None:
        for point in RULE_POINTS:
            if point in self.objects:
                registry.add(self.objects[point])
        if self.registration == "builtin-name":
            registry.add(FuzzGrouper(name="vllm-group-size"))
        for extra in self._extra("rules"):
            registry.add(extra)

    @hookimpl
    def kvrules_register_spec_types(self, registry: Any) -> None:
        if self.spec is not None:
            registry.add(self.spec)
        for extra in self._extra("spec_types"):
            registry.add(extra)

    @hookimpl
    def kvrules_register_architectures(self, registry: Any) -> None:
        if "architecture" in self.objects:
            registry.add(self.objects["architecture"])

    @hookimpl
    def kvrules_register_allocators(self, registry: Any) -> None:
        if "allocator" in self.objects:
            registry.add(self.objects["allocator"])
        if "view-layout" in self.objects:
            registry.add_view_layout(self.objects["view-layout"])
        for extra in self._extra("allocators"):
            registry.add(extra)


RULES: dict[str, tuple[type, str]] = {
    "converter": (FuzzConverter, "convert"),
    "router": (FuzzRouter, "router"),
    "fallback": (FuzzFallback, "fallback"),
    "layer-strategy": (FuzzStrategy, "layer-strategy"),
    "partitioner": (FuzzPartitioner, "partition"),
    "grouper": (FuzzGrouper, "grouper"),
    "layout": (FuzzLayout, "layout"),
    "aligner": (FuzzAligner, "align"),
}
RULE_POINTS = tuple(RULES)

GENERIC = (
    "raise:ValueError",
    "raise:KeyError",
    "raise:RuntimeError",
    "raise:TypeError",
    "raise:AttributeError",
    "raise:ZeroDivisionError",
    "raise:IndexError",
    "raise:RecursionError",
    "raise:OverflowError",
    "raise:MemoryError",
    "raise:AssertionError",
    "raise:NotImplementedError",
    "raise:StopIteration",
    "none",
    *(f"wrong:{i}" for i in range(len(WRONG))),
)
CHECKS = (*GENERIC[:14], *(f"check:{i}" for i in range(len(WRONG_CHECKS))))
SPECS_FAULTS = ("drop", "add", "reorder", "forged", "ints", "mutate")
GROUP_FAULTS = (
    "drop",
    "dup",
    "unknown",
    "merge",
    "forged",
    "list-names",
    "eagle-str",
    "empty-group",
    "non-spec",
    "strings",
    "tuple",
    "mutate",
    "mutate-config",
)
INT_FAULTS = ("zero", "negative", "huge", "float", "str", "half", "double")
TENSOR_FAULTS = (
    "negative",
    "huge",
    "omit",
    "unknown",
    "dup",
    "offset-negative",
    "stride-negative",
    "float-size",
    "list",
    "double",
    "smaller",
    "mutate",
)
SIZE_FAULTS = ("zero", "negative", "str", "float", "huge")

#: point -> method -> its own faults (every method also has the generic ones)
METHODS: dict[str, dict[str, tuple[str, ...]]] = {
    "converter": {"check": CHECKS, "convert": (*SPECS_FAULTS, "mutate-config")},
    "router": {"check": CHECKS, "route": GROUP_FAULTS},
    "fallback": {"check": CHECKS, "route": GROUP_FAULTS},
    "layer-strategy": {
        "check": CHECKS,
        "apply": ("wrong-page", "other-type", "untouched", "same", "forged", "mutate"),
    },
    "partitioner": {
        "check": CHECKS,
        "partition": ("lose", "both", "foreign", "not-tuple", "changed", "mutate"),
    },
    "grouper": {"check": CHECKS, "group": GROUP_FAULTS},
    "layout": {
        "check": CHECKS,
        "block_bytes": INT_FAULTS,
        "request_bytes": INT_FAULTS,
        "tensors": TENSOR_FAULTS,
    },
    "aligner": {"check": CHECKS, "align": (*SPECS_FAULTS, "other-type", "untouched"), "explain": ()},
    "spec-type": {
        "page_size_bytes": SIZE_FAULTS,
        "max_memory_usage_bytes": SIZE_FAULTS,
        "blocks_per_request": SIZE_FAULTS,
        "uniform_type_key": ("list",),
        "summary": ("str",),
        "to_dict": ("str",),
        "evolve": ("self",),
        "hash": (),
    },
    "architecture": {
        "recognises": CHECKS,
        "build": ("non-spec", "int-keys", "forged", "empty"),
        "uses_mla": (),
        "mamba_ssm_dtype_default": (),
        "mtp_layer_count": ("minus", "huge", "str"),
        "engine_settings": ("bogus", "negative", "reason-int"),
    },
    "allocator": {
        "supports": CHECKS,
        "device_memory": ("negative", "str"),
        "buffer": ("half", "double", "bytes", "oom"),
        "is_out_of_memory": (),
        "allocate": ("short", "no-views", "list"),
    },
    "view-layout": {"supports": CHECKS, "build": ("tiny", "raw", "empty-tuple")},
}
REGISTRATION = (
    "raise-rules",
    "object-rules",
    "builtin-name",
    "raise-spec_types",
    "object-spec_types",
    "raise-allocators",
    "object-allocators",
)
#: lies kvrules cannot tell from the truth: any KVRulesError (or a sound plan) is a right answer
LIES = frozenset(
    {
        "block_bytes:double",  # a block dearer than it is: fewer blocks
        "block_bytes:huge",  # a block larger than the memory: nothing fits
        "request_bytes:zero",
        "request_bytes:half",
        "request_bytes:huge",
        "device_memory:negative",
        "build:empty",  # an architecture may have no layer to copy for MTP
        "buffer:oom",  # an allocator that runs out of memory
        "evolve:self",  # a spec type that ignores a change: unification fails, naming the layer
        "blocks_per_request:huge",  # a spec type's own sizes, well typed
        "max_memory_usage_bytes:huge",
        "max_memory_usage_bytes:zero",
        "page_size_bytes:huge",
    }
)
#: invariants a plan may break by following a lie (the checker asks the spec type's true answers)
FOLLOWS_LIES = frozenset({"capacity", "tensor-size", "pool"})
HF_POINTS = frozenset({"aligner", "architecture"})
ALLOCATION_POINTS = frozenset({"allocator", "view-layout"})
MODELS = (
    "hybrid",
    "mismatched",
    "mamba",
    "uniform",
    "swa30-full20",
    "gpt-oss-20b-draft8",
    "issue-43626",
    "deepseek-v4-flash",
)
HF_MODELS = ("qwen3-coder-next", "jamba-v0.1", "gemma-3-27b", "deepseek-v3", "gpt-oss-20b-eagle")


def fault_case(draw: Draw) -> dict[str, Any]:
    """One fault: a point, one of its methods, a fault and the call it happens on."""
    point = draw.choice(tuple(METHODS))
    method = draw.choice(tuple(METHODS[point]))
    own = METHODS[point][method]
    fault = draw.choice(own) if own and draw.chance(60) else draw.choice(GENERIC)
    return {"point": point, "method": method, "fault": fault, "call": draw.choice((1, 1, 2, 3, 7, 30))}


def plugin_case(draw: Draw) -> Case:
    """One to three faults at distinct points, the model and the strategy set they act on."""
    faults: list[dict[str, Any]] = []
    for _ in range(draw.integer(1, 3)):
        fault = fault_case(draw)
        if all(f["point"] != fault["point"] for f in faults):
            faults.append(fault)
    points = {f["point"] for f in faults}
    case: Case = {"base": draw.choice(("vllm", "default")), "faults": faults}
    case["model"] = draw.choice(HF_MODELS) if points & HF_POINTS else draw.choice(MODELS)
    if draw.chance(4):
        case["registration"] = draw.choice(REGISTRATION)
    return case


# -- running --------------------------------------------------------------------------------------------


def _full(heads: int) -> kvrules.FullAttentionSpec:
    return kvrules.FullAttentionSpec(16, num_kv_heads=heads, head_size=128, dtype="bfloat16")


def _window(heads: int) -> kvrules.SlidingWindowSpec:
    return kvrules.SlidingWindowSpec(
        16, num_kv_heads=heads, head_size=128, dtype="bfloat16", sliding_window=512
    )


def _synthetic(name: str) -> dict[str, kvrules.KVCacheSpec]:
    mamba = kvrules.MambaSpec(
        16, [[3, 1024], [4, 32, 32]], ["bfloat16", "bfloat16"], mamba_cache_mode="align"
    )
    return {
        "hybrid": lambda: {"attn.0": _full(2), "attn.1": _full(2), "swa.0": _window(4), "swa.1": _window(4)},
        "mismatched": lambda: {"attn.0": _full(3), "swa.0": _window(4), "swa.1": _window(4)},
        "mamba": lambda: {"mamba.0": mamba, "mamba.1": mamba, "mamba.2": mamba, "attn.0": _full(8)},
        "uniform": lambda: {"a.0": _full(2), "a.1": _full(4), "a.2": _full(8)},
    }[name]()


@dataclass
class Inputs:
    """What is planned: the specs (one mapping per worker), memory and engine settings."""

    workers: list[dict[str, kvrules.KVCacheSpec]]
    memory: list[int]
    config: kvrules.EngineConfig


def model_inputs(name: str, spec: type | None) -> Inputs:
    """A synthetic model or a shipped example (with a :class:`FuzzSpec` layer when ``spec``)."""
    if name in ("hybrid", "mismatched", "mamba", "uniform"):
        inputs = Inputs([_synthetic(name)], [1 << 30], kvrules.EngineConfig(max_model_len=4096))
    else:
        from kvrules.examples import load_example

        model = load_example(name)
        workers = [dict(w) for w in model.worker_specs()]
        memory = list(model.available_memory or [40 << 30])
        inputs = Inputs(
            workers,
            memory * len(workers) if len(memory) == 1 else memory,
            kvrules.EngineConfig.from_dict(model.engine),
        )
    if spec is not None:
        inputs.workers[0]["odd.0"] = spec(16, num_kv_heads=2, head_size=128, dtype="bfloat16")
    return inputs


def hf_inputs(name: str, strategies: Any, pm: Any) -> Inputs:
    """A shipped Hugging Face example built with ``pm`` (its aligners and architectures)."""
    from kvrules.hf import build_hf_model
    from kvrules.hf.examples import load_hf_example_info

    example = load_hf_example_info(f"hf-{name}")
    built = build_hf_model(
        example.config, example.draft, example.options, strategies=strategies, plugin_manager=pm
    )
    model = built.to_model_file(example.available_memory)
    engine = {**model.engine, **example.engine}
    workers = [dict(w) for w in model.worker_specs()]
    return Inputs(workers, list(model.available_memory or [40 << 30]), kvrules.EngineConfig.from_dict(engine))


@dataclass
class Setup:
    """One case made real: the plugin, its boxes, the strategy list naming its rules."""

    plugin: FuzzPlugin
    boxes: dict[str, Box]
    spec: type | None
    strategies: list[str]


def set_up(case: Case) -> Setup:
    """The plugin of ``case`` (faults not armed yet) and the strategy list naming its rules."""
    boxes: dict[str, Box] = {}
    for fault in case["faults"]:
        boxes.setdefault(fault["point"], Box())
    objects: dict[str, Any] = {}
    names = [case["base"]]
    for point, (cls, kind) in RULES.items():
        if point in boxes:
            objects[point] = cls(inner=builtin_rules(kind, case["base"]), box=boxes[point])
            names.append(objects[point].name)
            if kind in ("convert", "partition"):  # pass-throughs: the built-ins still act
                names += [r.name for r in builtin_rules(kind, case["base"])]
    for point, cls in (
        ("architecture", FuzzArchitecture),
        ("allocator", FuzzAllocator),
        ("view-layout", FuzzViewLayout),
    ):
        if point in boxes:
            objects[point] = cls(box=boxes[point])
    spec = spec_class(boxes["spec-type"]) if "spec-type" in boxes else None
    return Setup(FuzzPlugin(objects, spec, case.get("registration")), boxes, spec, names)


def arm(setup: Setup, case: Case) -> None:
    """Give every box its faults and forget the calls made so far."""
    for box in setup.boxes.values():
        box.calls.clear()
        box.faults = ()
    for fault in case["faults"]:
        box = setup.boxes[fault["point"]]
        box.faults = (*box.faults, (fault["method"], fault["fault"], fault["call"]))


def disarm(setup: Setup) -> None:
    for box in setup.boxes.values():
        box.faults = ()


def _snapshot(inputs: Inputs) -> tuple[Any, ...]:
    specs = tuple((n, id(s), s.field_values()) for w in inputs.workers for n, s in w.items())
    return specs, dataclasses.astuple(inputs.config)


def _essence(plan: kvrules.Plan) -> dict[str, Any]:
    """The plan without what names the rules that made it."""
    data = plan.to_dict()
    for key in ("decisions", "rules", "strategy_set", "route"):
        data.pop(key, None)
    for worker in data["workers"]:
        worker.pop("layout", None)
    return data


def _blames_right(error: kvrules.PluginError, case: Case) -> bool:
    text = str(error)
    if f"plugin {PLUGIN!r}" not in text:
        return False
    if case.get("registration") == "builtin-name":
        return True
    return not any(f"plugin {b!r}" in text for b in kvrules.BUILTIN_PLUGINS)


def _names_ours(error: kvrules.KVRulesError) -> bool:
    """True when ``error`` names one of the fuzz plugin's objects (``'fuzz-...'``, a spec type
    ``fuzz_attention``) and no built-in plugin."""
    text = str(error)
    ours = "'fuzz-" in text or "fuzz_attention" in text
    return ours and not any(f"plugin {b!r}" in text for b in kvrules.BUILTIN_PLUGINS)


def _fired(setup: Setup, case: Case) -> list[str]:
    fired = [f"{p}.{f}" for p, box in setup.boxes.items() for f in box.fired]
    return fired + ([f"registration.{case['registration']}"] if case.get("registration") else [])


def _only_lies(fired: list[str]) -> bool:
    """True when every fault that fired (``point.method:fault``) is a lie (:data:`LIES`)."""
    return all(f.split(".", 1)[-1] in LIES for f in fired)


@dataclass
class Run:
    """What one run of a case did (filled in as it goes)."""

    setup: Setup
    inputs: Inputs | None = None
    plan: kvrules.Plan | None = None


def _act(case: Case, run: Run) -> None:
    setup = run.setup
    pm = get_plugin_manager(autoload=False, plugins=[setup.plugin])
    if case["model"] in HF_MODELS:
        arm(setup, case)
        run.inputs = hf_inputs(case["model"], setup.strategies, pm)
    else:
        run.inputs = model_inputs(case["model"], setup.spec)
        arm(setup, case)
    before = _snapshot(run.inputs)
    inputs = run.inputs
    run.plan = kvrules.Planner(setup.strategies, plugin_manager=pm).plan(
        inputs.workers, inputs.memory, inputs.config
    )
    points = {f["point"] for f in case["faults"]}
    if points & ALLOCATION_POINTS:
        allocator = "fuzz-alloc" if "allocator" in points else None
        kvrules.allocate(run.plan, "meta", allocator=allocator, plugin_manager=pm).verify()
    disarm(setup)  # what kvrules made is checked, not what a spec type answers the checker
    check_plan_invariants(
        run.plan, inputs.workers, inputs.memory, spec_types=pm.registries.spec_types.classes
    )
    if _snapshot(inputs) != before:
        raise InvariantBroken("input-mutated", "the caller's specs or engine settings changed in place")


def _baseline(case: Case, run: Run) -> Any:
    """The plan (or the error) of the same inputs with the built-in plugins only."""
    disarm(run.setup)
    assert run.inputs is not None
    pm = get_plugin_manager(autoload=False)
    try:
        return _essence(
            kvrules.Planner(case["base"], plugin_manager=pm).plan(
                run.inputs.workers, run.inputs.memory, run.inputs.config
            )
        )
    except kvrules.KVRulesError as error:
        return type(error).__name__


def _refused(case: Case, run: Run, error: kvrules.KVRulesError) -> Outcome:
    """A KVRulesError is right when it is a PluginError naming the fuzz plugin, or what the
    built-ins alone answer too (the model does not plan), or the answer to a lie."""
    fired = _fired(run.setup, case)
    plugin_error = isinstance(error, kvrules.PluginError)
    if plugin_error and _blames_right(error, case):
        return Outcome(ERROR, head(error), "PluginError")
    if not plugin_error and run.inputs is not None and _baseline(case, run) == type(error).__name__:
        return Outcome(ERROR, head(error), type(error).__name__)
    if not plugin_error and fired and _names_ours(error):
        return Outcome(ERROR, head(error), type(error).__name__)
    if not fired:
        return Outcome(BLAME, f"no fault fired, yet {head(error)}", type(error).__name__, "no fault")
    if _only_lies(fired) and not plugin_error:
        return Outcome(ERROR, head(error), type(error).__name__)
    return Outcome(
        BLAME,
        f"after {', '.join(fired)}: {head(error)}",
        type(error).__name__,
        ",".join(sorted({f.split(":")[0] for f in fired})),
    )


def run_plugin_case(case: Case, *, seconds: float = 10) -> Outcome:
    """Run ``case`` (see the module docstring). Never raises (but ``KeyboardInterrupt``)."""
    run = Run(set_up(case))
    try:
        with time_limit(seconds):
            _act(case, run)
            if not _fired(run.setup, case) and _baseline(case, run) != _essence(run.plan):  # type: ignore[arg-type]
                raise InvariantBroken(
                    "baseline", "no fault fired, but the plan differs from the built-ins' plan"
                )
    except InvariantBroken as broken:
        fired = _fired(run.setup, case)
        if fired and _only_lies(fired) and broken.invariant in FOLLOWS_LIES:
            return Outcome(OK, f"follows the lie {', '.join(fired)}")
        shown = ", ".join(fired) or "no fault"
        return Outcome(BROKEN, f"after {shown}: {broken}"[:400], "InvariantBroken", broken.invariant)
    except kvrules.KVRulesError as error:
        return _refused(case, run, error)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        return from_exception(exc)
    return Outcome(OK)


def _fewer(case: Case) -> list[Case]:
    out = [
        {**case, "faults": case["faults"][:i] + case["faults"][i + 1 :]}
        for i in range(len(case["faults"]))
        if len(case["faults"]) > 1
    ]
    if case.get("registration"):
        out.append({k: v for k, v in case.items() if k != "registration"})
    if case["base"] != "vllm":
        out.append({**case, "base": "vllm"})
    if case["model"] not in ("hybrid", *HF_MODELS[:1]):
        out.append({**case, "model": "hybrid" if case["model"] in MODELS else HF_MODELS[0]})
    for i, fault in enumerate(case["faults"]):
        if fault["call"] != 1:
            out.append(
                {**case, "faults": [*case["faults"][:i], {**fault, "call": 1}, *case["faults"][i + 1 :]]}
            )
    return out


def shrink_plugin_case(case: Case, seconds: float = 10) -> tuple[Case, Outcome]:
    """A simpler case failing for the same cause (fewer faults, the small model, call 1)."""
    import time

    target = run_plugin_case(case)
    deadline = time.monotonic() + seconds
    progress = True
    while progress and time.monotonic() < deadline:
        progress = False
        for candidate in _fewer(case):
            outcome = run_plugin_case(candidate)
            if outcome.cause == target.cause:
                case, target, progress = candidate, outcome, True
                break
    return case, target


__all__ = ["PLUGIN", "plugin_case", "run_plugin_case", "shrink_plugin_case"]
