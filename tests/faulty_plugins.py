"""Faulty plugins for ``test_plugin_faults.py``: one object per extension point, each able to
break its contract in one chosen way (its ``fault``).

Everything here imports only :mod:`kvrules` and :mod:`kvrules.plugin`, as a third-party plugin
author would. A :class:`FaultyPlugin` registers what it is given from its registration hooks;
registered with ``kvrules.get_plugin_manager(autoload=False, plugins=[plugin])`` it is
``plugin '<name>' (registered in-process)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import kvrules
from kvrules.plugin import (
    AlignContext,
    Aligner,
    AllocationRequest,
    Allocator,
    AllocatorRegistry,
    Architecture,
    ArchitectureRegistry,
    BackingTensor,
    Check,
    Converter,
    Fallback,
    Grouper,
    LayerStrategy,
    Layout,
    Partitioner,
    Placement,
    PlanContext,
    Router,
    RuleRegistry,
    SpecTypeRegistry,
    ViewLayout,
    applies,
    declines,
    hookimpl,
)

#: asked before every built-in object of its kind
HIGH = 10_000

Specs = Mapping[str, kvrules.KVCacheSpec]
#: what a registration hook adds: objects, or a callable making them inside the hook
Supply = Iterable[Any] | Callable[[], Iterable[Any]]


def _objects(supply: Supply) -> Iterable[Any]:
    return supply() if callable(supply) else supply


class FaultyPlugin:
    """A plugin object that registers ``rules``, ``spec_types``, ``allocators``, ``view_layouts``
    and ``architectures`` from the matching hooks (a callable supply is called inside the hook,
    so that objects whose construction fails fail there, as a real plugin's would). With
    ``tamper``, every object's fields are forced to those values once it is registered."""

    def __init__(
        self,
        name: str,
        *,
        rules: Supply = (),
        spec_types: Supply = (),
        allocators: Supply = (),
        view_layouts: Supply = (),
        architectures: Supply = (),
        tamper: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.tamper = dict(tamper or {})
        self.rules = rules
        self.spec_types = spec_types
        self.allocators = allocators
        self.view_layouts = view_layouts
        self.architectures = architectures

    def _add(self, add: Callable[[Any], None], supply: Supply) -> None:
        for obj in _objects(supply):
            add(obj)
            for field, value in self.tamper.items():
                object.__setattr__(obj, field, value)

    @hookimpl
    def kvrules_register_spec_types(self, registry: SpecTypeRegistry) -> None:
        self._add(registry.add, self.spec_types)

    @hookimpl
    def kvrules_register_rules(self, registry: RuleRegistry) -> None:
        self._add(registry.add, self.rules)

    @hookimpl
    def kvrules_register_allocators(self, registry: AllocatorRegistry) -> None:
        self._add(registry.add, self.allocators)
        self._add(registry.add_view_layout, self.view_layouts)

    @hookimpl
    def kvrules_register_architectures(self, registry: ArchitectureRegistry) -> None:
        self._add(registry.add, self.architectures)

    def __repr__(self) -> str:
        return f"FaultyPlugin({self.name!r})"


class MisspelledHook:
    """A plugin whose hook name has a typo (``kvrules_register_rulez``)."""

    name = "test-misspelled"

    @hookimpl
    def kvrules_register_rulez(self, registry: RuleRegistry) -> None:
        """Never called: kvrules has no such hook."""


# -- helpers the faults share ------------------------------------------------------------------


def mutate(spec: kvrules.KVCacheSpec, **changes: Any) -> kvrules.KVCacheSpec:
    """``spec`` itself with ``changes`` forced onto its frozen fields (what no plugin may do)."""
    for name, value in changes.items():
        object.__setattr__(spec, name, value)
    spec.__dict__.pop("_hash", None)
    return spec


def forged(spec: kvrules.KVCacheSpec, **changes: Any) -> kvrules.KVCacheSpec:
    """A copy of ``spec`` with ``changes`` forced past validation (an invalid spec)."""
    copy = spec.evolve()
    fields = {f.name for f in dataclasses.fields(copy)}
    for key in [k for k in copy.__dict__ if k not in fields]:
        del copy.__dict__[key]  # cached sizes: the forged copy answers from its forged fields
    return mutate(copy, **changes)


def zero_blocks(spec: kvrules.KVCacheSpec) -> kvrules.KVCacheSpec:
    """A forged copy of ``spec`` with the same page but ``block_size`` 0 (as a group spec, it
    passes the pooled-page check and divides by zero in the capacity arithmetic)."""
    return forged(spec, block_size=0, page_size_padded=spec.page_size_bytes)


def one_uniform_group(specs: Specs) -> list[kvrules.KVCacheGroup]:
    """All layers in one uniform-type group (a sound route: one tensor per layer)."""
    block = next(iter(specs.values())).block_size
    return [kvrules.KVCacheGroup(tuple(specs), kvrules.UniformTypeKVCacheSpecs(block, dict(specs)))]


def one_group(specs: Specs) -> list[kvrules.KVCacheGroup]:
    """All layers in one pooled group with the first layer's spec (mixed pages: invalid)."""
    return [kvrules.KVCacheGroup(tuple(specs), next(iter(specs.values())))]


def groups_answer(fault: str, specs: Specs) -> Any:
    """What a faulty router, fallback or grouper returns for ``fault`` (none: a group per layer)."""
    names = list(specs)
    if fault == "none":
        return None
    if fault == "raise":
        raise ZeroDivisionError("the faulty plugin divided by zero")
    if fault == "non-spec":
        return [kvrules.KVCacheGroup(tuple(names), 5)]  # type: ignore[arg-type]
    if fault == "strings":
        return names
    if fault == "drop":
        return [kvrules.KVCacheGroup((name,), specs[name]) for name in names[1:]]
    if fault == "twice":
        return [kvrules.KVCacheGroup((name,), specs[name]) for name in [*names, names[0]]]
    if fault == "mixed-pages":
        return one_group(specs)
    if fault == "forged-block":
        return [kvrules.KVCacheGroup((n,), zero_blocks(s)) for n, s in specs.items()]
    if fault == "mutate":
        mutate(next(iter(specs.values())), page_size_padded=1 << 20)
        return [kvrules.KVCacheGroup((n,), s) for n, s in specs.items()]
    assert not fault, fault
    return [kvrules.KVCacheGroup((n,), s) for n, s in specs.items()]


def check_answer(fault: str) -> Any:
    """What a faulty guard returns for ``fault`` (else: it applies)."""
    if fault == "check-yes":
        return "yes"
    if fault == "check-true":
        return True
    if fault == "check-none":
        return None
    if fault == "check-int-reason":
        return Check(True, 12345)  # type: ignore[arg-type]
    if fault == "check-raise":
        raise KeyError("the faulty guard")
    return applies("the faulty plugin always applies.")


# -- rules -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FaultyConverter(Converter):
    name: str = "faulty-convert"
    priority: int = HIGH
    fault: str = ""

    def check(self, specs: Specs, ctx: PlanContext) -> Check:
        return check_answer(self.fault)  # type: ignore[no-any-return]

    def convert(self, specs: Specs, ctx: PlanContext) -> dict[str, kvrules.KVCacheSpec]:
        first = next(iter(specs))
        if self.fault == "none":
            return None  # type: ignore[return-value]
        if self.fault == "ints":
            return dict.fromkeys(specs, 1)  # type: ignore[arg-type]
        if self.fault == "drop":
            return {n: s for n, s in specs.items() if n != first}
        if self.fault == "mutate":
            mutate(specs[first], page_size_padded=1 << 20)
            return dict(specs)
        if self.fault == "forged-spec":
            return {**specs, first: forged(specs[first], block_size=0)}
        return dict(specs)


@dataclass(frozen=True)
class FaultyRouter(Router):
    name: str = "faulty-router"
    priority: int = HIGH
    fault: str = ""

    def check(self, specs: Specs, ctx: PlanContext) -> Check:
        return check_answer(self.fault)  # type: ignore[no-any-return]

    def route(self, specs: Specs, ctx: PlanContext) -> list[kvrules.KVCacheGroup]:
        if not self.fault:
            return one_uniform_group(specs)
        return groups_answer(self.fault, specs)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class FaultyFallback(Fallback):
    name: str = "faulty-fallback"
    priority: int = HIGH
    fault: str = ""

    def check(self, specs: Specs, ctx: PlanContext) -> Check:
        return check_answer(self.fault)  # type: ignore[no-any-return]

    def route(self, specs: Specs, ctx: PlanContext) -> list[kvrules.KVCacheGroup]:
        if not self.fault:
            return one_uniform_group(specs)
        return groups_answer(self.fault, specs)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class FaultyStrategy(LayerStrategy):
    touches: ClassVar[frozenset[str]] = frozenset({"page_size_padded"})
    name: str = "faulty-strategy"
    priority: int = HIGH
    fault: str = ""

    def check(self, layer: str, spec: kvrules.KVCacheSpec, target: int, ctx: PlanContext) -> Check:
        return check_answer(self.fault)  # type: ignore[no-any-return]

    def apply(
        self, layer: str, spec: kvrules.KVCacheSpec, target: int, ctx: PlanContext
    ) -> kvrules.KVCacheSpec:
        if self.fault == "none":
            return None  # type: ignore[return-value]
        if self.fault == "raise":
            raise ValueError("the faulty strategy")
        if self.fault == "field":
            return spec.evolve(num_kv_heads=7)
        if self.fault == "mutate":
            return mutate(spec, page_size_padded=target)
        return spec.evolve(page_size_padded=target)


@dataclass(frozen=True)
class FaultyPartitioner(Partitioner):
    name: str = "faulty-partition"
    priority: int = HIGH
    fault: str = ""

    def check(self, specs: Specs, ctx: PlanContext) -> Check:
        return check_answer(self.fault)  # type: ignore[no-any-return]

    def partition(
        self, specs: Specs, ctx: PlanContext
    ) -> tuple[list[kvrules.KVCacheGroup], dict[str, kvrules.KVCacheSpec]]:
        first, *rest = list(specs)
        kept = [kvrules.KVCacheGroup((first,), specs[first])]
        if self.fault == "none":
            return None  # type: ignore[return-value]
        if self.fault == "ints":
            return 1, 2  # type: ignore[return-value]
        if self.fault == "non-spec":
            return [kvrules.KVCacheGroup((first,), 5)], {n: specs[n] for n in rest}  # type: ignore[arg-type]
        if self.fault == "lose":
            return kept, {n: specs[n] for n in rest[1:]}
        if self.fault == "both":
            return kept, dict(specs)
        if self.fault == "forged-block":
            return [kvrules.KVCacheGroup((first,), zero_blocks(specs[first]))], {n: specs[n] for n in rest}
        return kept, {n: specs[n] for n in rest}


@dataclass(frozen=True)
class FaultyGrouper(Grouper):
    name: str = "faulty-grouper"
    priority: int = HIGH
    fault: str = ""

    def check(self, specs: Specs, ctx: PlanContext) -> Check:
        return check_answer(self.fault)  # type: ignore[no-any-return]

    def group(self, specs: Specs, ctx: PlanContext) -> list[kvrules.KVCacheGroup]:
        if self.fault == "other-page":
            spec = next(iter(specs.values()))
            return [
                kvrules.KVCacheGroup(tuple(specs), spec.evolve(page_size_padded=spec.page_size_bytes * 2))
            ]
        return groups_answer(self.fault, specs)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class FaultyLayout(Layout):
    name: str = "faulty-layout"
    priority: int = HIGH
    fault: str = ""

    def check(self, groups: Sequence[kvrules.KVCacheGroup], ctx: PlanContext) -> Check:
        return check_answer(self.fault)  # type: ignore[no-any-return]

    def _page(self, groups: Sequence[kvrules.KVCacheGroup]) -> int:
        return max(g.spec.page_size_bytes for g in groups)

    def _width(self, groups: Sequence[kvrules.KVCacheGroup]) -> int:
        return max(len(g.layer_names) for g in groups)

    def block_bytes(self, groups: Sequence[kvrules.KVCacheGroup]) -> int:
        if self.fault == "block-zero":
            return 0
        if self.fault == "block-str":
            return "4096"  # type: ignore[return-value]
        return self._width(groups) * self._page(groups)

    def request_bytes(self, groups: Sequence[kvrules.KVCacheGroup], config: kvrules.EngineConfig) -> int:
        if self.fault == "request-raise":
            raise RuntimeError("the faulty layout cannot count")
        if self.fault == "request-str":
            return "12"  # type: ignore[return-value]
        return self.block_bytes(groups) * sum(g.spec.blocks_per_request(config) for g in groups)

    def tensors(
        self, groups: Sequence[kvrules.KVCacheGroup], num_blocks: int
    ) -> tuple[kvrules.KVCacheTensor, ...]:
        page = self._page(groups)
        tensors = tuple(
            kvrules.KVCacheTensor(
                page * num_blocks, tuple(g.layer_names[i] for g in groups if i < len(g.layer_names))
            )
            for i in range(self._width(groups))
        )
        if self.fault == "tensors-none":
            return None  # type: ignore[return-value]
        if self.fault == "tensors-huge":
            return (kvrules.KVCacheTensor(10**15, tensors[0].shared_by), *tensors[1:])
        if self.fault == "tensors-negative":
            return (kvrules.KVCacheTensor(-5, tensors[0].shared_by), *tensors[1:])
        if self.fault == "tensors-omit":
            return tensors[1:]
        if self.fault == "tensors-stranger":
            return (*tensors, kvrules.KVCacheTensor(page, ("not-a-layer",)))
        return tensors


@dataclass(frozen=True)
class FaultyBackingLayout(FaultyLayout):
    """A layout that also places one backing allocation (vLLM 0.33's form), faulty there."""

    name: str = "faulty-backing-layout"

    def backing(
        self, groups: Sequence[kvrules.KVCacheGroup], num_blocks: int, layout: str | None = None
    ) -> tuple[BackingTensor, ...]:
        if self.fault == "backing-raise":
            raise RuntimeError("the faulty layout cannot place")
        if self.fault == "backing-list":
            return []  # type: ignore[return-value]
        return ()


@dataclass(frozen=True)
class FaultyAligner(Aligner):
    name: str = "faulty-align"
    priority: int = HIGH
    fault: str = ""

    def check(self, specs: Specs, ctx: AlignContext) -> Check:
        return check_answer(self.fault)  # type: ignore[no-any-return]

    def align(self, specs: Specs, ctx: AlignContext) -> dict[str, kvrules.KVCacheSpec]:
        first = next(n for n, s in specs.items() if isinstance(s, kvrules.AttentionSpec))
        if self.fault == "none":
            return None  # type: ignore[return-value]
        if self.fault == "ints":
            return dict.fromkeys(specs, 16)  # type: ignore[arg-type]
        if self.fault == "drop":
            return {n: s for n, s in specs.items() if n != first}
        if self.fault == "field":
            return {**specs, first: specs[first].evolve(num_kv_heads=1)}
        if self.fault == "mutate":
            mutate(specs[first], block_size=specs[first].block_size * 2)
            return dict(specs)
        if self.fault == "forged-spec":
            return {**specs, first: forged(specs[first], page_size_padded=7)}
        return {**specs, first: specs[first].evolve(block_size=specs[first].block_size * 2)}

    def explain(
        self, layer: str, before: kvrules.KVCacheSpec, after: kvrules.KVCacheSpec, ctx: AlignContext
    ) -> str:
        if self.fault == "explain-none":
            return None  # type: ignore[return-value]
        return "the faulty aligner doubled the block size."


# -- spec types ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False, kw_only=True)
class FaultySpec(kvrules.FullAttentionSpec):
    """Full attention whose own answers break the spec contract as ``fault`` says, once it is
    constructed (its own validation sees sane sizes: the fault shows when kvrules asks)."""

    type_name: ClassVar[str] = "test_faulty_attention"

    fault: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.fault == "evolve-raise" and self.block_size != 16:
            raise ValueError("this spec type cannot take another block size")
        self.__dict__["_built"] = True

    @property  # type: ignore[override]
    def page_size_bytes(self) -> Any:
        real = self.unpadded_page_size_bytes
        if not self.__dict__.get("_built"):
            return real
        if self.fault == "page-raise":
            raise RuntimeError("this spec type cannot size its page")
        answers = {"page-zero": 0, "page-str": str(real), "page-negative": -1, "page-float": 65536.5}
        if self.fault in answers:
            return answers[self.fault]
        padded = self.page_size_padded
        return padded if padded is not None else real

    def max_memory_usage_bytes(self, config: kvrules.EngineConfig) -> int:
        if self.fault == "memory-raise":
            raise OverflowError("this spec type cannot count a request")
        if self.fault == "memory-negative":
            return -1
        return super().max_memory_usage_bytes(config)

    def uniform_type_key(self) -> Any:
        if self.fault == "key-list":
            return ["full"]
        return super().uniform_type_key()

    @classmethod
    def merge(cls, specs: Any) -> Any:
        if any(getattr(spec, "fault", "") == "merge-int" for spec in specs):
            return 5
        return super().merge(specs)

    def summary(self) -> dict[str, Any]:
        if self.fault == "summary-raise":
            raise RuntimeError("this spec type cannot summarise itself")
        return super().summary()

    def unification_hint(self, target: int) -> str:
        if self.fault == "hint-raise":
            raise NotImplementedError("this spec type has no hint")
        return super().unification_hint(target)

    def blocks_per_request(self, config: kvrules.EngineConfig) -> int:
        if self.fault == "blocks-raise":
            raise RuntimeError("this spec type cannot count blocks")
        if self.fault == "blocks-later-str":  # sane when first asked (when kvrules checks it)
            asked = self.__dict__["_asked"] = self.__dict__.get("_asked", 0) + 1
            if asked > 1:
                return "3"  # type: ignore[return-value]
        return super().blocks_per_request(config)

    def __hash__(self) -> int:
        if self.fault == "unhashable":
            raise TypeError("unhashable spec type")
        return super().__hash__()


class NotASpec:
    """Registered as a spec type: not a KVCacheSpec subclass."""

    type_name = "test_not_a_spec"


# -- architectures ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FaultyArchitecture(Architecture):
    name: str = "faulty-arch"
    priority: int = HIGH
    fault: str = ""

    def recognises(self, config: Any) -> Check:
        return check_answer(self.fault)  # type: ignore[no-any-return]

    def build(self, config: Any, settings: Any) -> dict[str, kvrules.KVCacheSpec]:
        spec = kvrules.FullAttentionSpec(settings.block_size, num_kv_heads=2, head_size=128, dtype="bfloat16")
        specs: dict[str, kvrules.KVCacheSpec] = {f"model.layers.{i}.self_attn.attn": spec for i in range(4)}
        if self.fault == "build-raise":
            raise KeyError("num_hidden_layers")
        if self.fault == "build-non-specs":
            return dict.fromkeys(specs, 128)  # type: ignore[arg-type]
        if self.fault == "build-int-keys":
            return dict(enumerate(specs.values()))  # type: ignore[arg-type]
        if self.fault == "build-forged":
            return {name: forged(s, block_size=0) for name, s in specs.items()}
        return specs

    def uses_mla(self, config: Any) -> bool:
        if self.fault == "mla-raise":
            raise AttributeError("the faulty architecture has no attention kind")
        return False

    def engine_settings(self, config: Any, settings: Any) -> tuple[dict[str, Any], str]:
        if self.fault == "engine-none":
            return None  # type: ignore[return-value]
        if self.fault == "engine-unknown-key":
            return {"bogus_setting": 1}, "a setting no EngineConfig has"
        return {}, ""


# -- allocators and view layouts -----------------------------------------------------------------


@dataclass(frozen=True)
class FaultyAllocator(Allocator):
    name: str = "test-alloc"
    priority: int = HIGH
    fault: str = ""

    def supports(self, device: str) -> Check:
        if self.fault == "supports-none":
            return None  # type: ignore[return-value]
        if self.fault == "supports-str":
            return "meta"  # type: ignore[return-value]
        return applies("the faulty allocator takes any device.")

    def buffer(self, nbytes: int, device: str) -> Any:
        import torch

        if self.fault == "buffer-raise":
            raise MemoryError("the faulty allocator lost its memory")
        if self.fault == "buffer-small":
            nbytes //= 2
        if self.fault == "buffer-large":
            nbytes *= 2
        if self.fault == "buffer-bytes":
            return bytearray(8)
        return torch.zeros(nbytes, dtype=torch.int8, device=device)

    def allocate(self, request: AllocationRequest) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if self.fault == "allocate-none":
            return None  # type: ignore[return-value]
        if self.fault == "allocate-short":
            buffers, views = super().allocate(request)
            return buffers[:-1], views
        if self.fault == "allocate-no-views":
            buffers, _ = super().allocate(request)
            return buffers, {}
        return super().allocate(request)


@dataclass(frozen=True)
class FaultyViewLayout(ViewLayout):
    name: str = "test-view"
    priority: int = HIGH
    default: bool = False
    fault: str = ""

    def supports(self, spec: kvrules.KVCacheSpec) -> Check:
        if self.fault == "supports-none":
            return None  # type: ignore[return-value]
        if self.fault == "supports-true":
            return True  # type: ignore[return-value]
        if self.fault == "supports-int-reason":
            return Check(True, 12345)  # type: ignore[arg-type]
        if isinstance(spec, kvrules.AttentionSpec):
            return applies("an attention page is one flat run of bytes.")
        return declines("not attention.")

    def build(self, raw: Any, place: Placement) -> Any:
        if self.fault == "build-raise":
            raise IndexError("the faulty view layout")
        if self.fault == "build-none":
            return None
        if self.fault == "build-wrong":
            return raw[:1]
        return raw.as_strided((place.num_blocks, place.content_bytes), (place.block_stride, 1), place.offset)
