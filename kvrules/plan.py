"""The plan: what an engine needs to build its KV cache, and its versioned JSON form.

The JSON form is schema ``kvrules.plan/v2`` (docs/plan-schema.md; the JSON Schema ships as
``kvrules/schemas/plan-v2.json``). :meth:`Plan.to_dict` and :meth:`Plan.to_json` write v2;
:meth:`Plan.from_dict` reads v1 and v2 and refuses a document whose derived figures (page sizes,
allocated bytes, waste totals) differ from what its specs, tensors and waste figures give.

:meth:`Plan.to_json` writes the text in pieces (:meth:`Plan.iter_json`): a fragment that repeats
(a spec's form shared by many layers, a decision shared by layers with the same answer) is
encoded once, so a 100,000-layer plan serialises in about the time it took to plan.
"""

from __future__ import annotations

import json
import math
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from importlib import resources
from itertools import chain, islice, repeat, zip_longest
from json.encoder import encode_basestring_ascii as _string
from operator import attrgetter, is_not, itemgetter
from typing import Any, cast

from kvrules.config import EngineConfig
from kvrules.decisions import Body, Decision, DeferredDecisions, Run, decision_runs, with_body
from kvrules.errors import ConfigError, ModelFileError
from kvrules.specs.asked import blocks_of
from kvrules.specs.base import KVCacheSpec
from kvrules.specs.io import spec_from_dict
from kvrules.values import MAX_BLOCKS, MAX_BYTES, MAX_TOKENS, as_int, as_name, as_number, shown

SCHEMA = "kvrules.plan/v2"
#: the schema id of every version :meth:`Plan.from_dict` reads, by version number
SCHEMAS = {1: "kvrules.plan/v1", 2: SCHEMA}


#: preset names kept as aliases: name -> the preset it stands for. ``vllm`` is ``vllm-0.28``
#: through kvrules 0.3 (deprecated; removed in 0.4); a set chosen by an alias records the
#: preset it resolves to (``StrategySet.name``, ``Plan.strategy_set``), and a document written
#: with the alias (kvrules 0.1) reads back with the preset's name. Re-exported by
#: :mod:`kvrules.plugin.presets`.
PRESET_ALIASES: dict[str, str] = {"vllm": "vllm-0.28"}


def canonical_set_name(name: str) -> str:
    """``name`` with a leading preset alias replaced by the preset it stands for
    (``vllm`` -> ``vllm-0.28``, ``vllm+x`` -> ``vllm-0.28+x``); any other name unchanged."""
    head, plus, rest = name.partition("+")
    return PRESET_ALIASES.get(head, head) + plus + rest


def plan_json_schema(version: int = 2) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of plan documents of ``version`` (1 or 2; :meth:`Plan.to_dict`
    writes 2), shipped with the package.

    :raises ModelFileError: ``version`` is not a schema version kvrules ships.
    """
    if isinstance(version, bool) or version not in SCHEMAS:
        raise ModelFileError(
            f"plan_json_schema(version={shown(version)}) is not allowed: one of {', '.join(map(str, SCHEMAS))}"
        )
    text = (resources.files("kvrules") / "schemas" / f"plan-v{version}.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


def page_sizes(spec: KVCacheSpec) -> dict[str, int]:
    """The v2 size record of one page of ``spec``: ``page_size_bytes`` (what a block takes in the
    pool), ``real_page_size_bytes`` (before padding: real state plus quantisation scales, the
    spec's ``unpadded_page_size_bytes``) and ``padding_bytes`` (their difference)."""
    return {
        "page_size_bytes": spec.page_size_bytes,
        "real_page_size_bytes": spec.unpadded_page_size_bytes,
        "padding_bytes": spec.padding_bytes,
    }


@dataclass(frozen=True, slots=True)
class KVCacheGroup:
    """Layers that share one block table; ``spec`` describes one layer of the group.

    For a uniform-type group, ``spec`` is a :class:`~kvrules.UniformTypeKVCacheSpecs` whose
    members are the layers' own specs.
    """

    layer_names: tuple[str, ...]
    spec: KVCacheSpec
    is_eagle_group: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plan-schema form (v2: with the group page's :func:`page_sizes`)."""
        return {
            "layer_names": list(self.layer_names),
            "spec": self.spec.to_dict(),
            "is_eagle_group": self.is_eagle_group,
            **page_sizes(self.spec),
        }


@dataclass(frozen=True, slots=True)
class KVCacheTensor:
    """One raw byte buffer of a worker.

    ``shared_by`` lists the layers whose pages live in it. With ``block_stride > 0`` (packed
    layout) every tensor of the worker aliases ONE backing allocation of ``size`` bytes, and the
    page of a layer in ``shared_by`` for block ``b`` starts at ``offset + b * block_stride``.
    """

    size: int
    shared_by: tuple[str, ...]
    offset: int = 0
    block_stride: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Plan-schema form."""
        return {
            "size": self.size,
            "shared_by": list(self.shared_by),
            "offset": self.offset,
            "block_stride": self.block_stride,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "tensor") -> KVCacheTensor:
        """Inverse of :meth:`to_dict`.

        :raises ModelFileError: a missing key or a value of the wrong kind (names ``where``).
        """
        data = _object(data, where)
        return cls(
            size=_count(_get(data, "size", where), f"{where}.size"),
            shared_by=_names(_get(data, "shared_by", where), f"{where}.shared_by"),
            offset=_count(data.get("offset", 0), f"{where}.offset"),
            block_stride=_count(data.get("block_stride", 0), f"{where}.block_stride"),
        )


@dataclass(frozen=True)
class BackingTensor:
    """One tensor over a worker's single backing allocation, in vLLM 0.33's form
    (``KVCacheTensor(size, layers, layer_stride, block_stride, offset, host_resident)``).

    The page of ``layers[l]`` for block ``b`` starts at ``offset + l * layer_stride + b *
    block_stride`` inside the backing allocation of ``size`` bytes (every backing tensor of a
    worker has the same ``size``). Tensors of different groups overlap: the groups overlay the
    backing from byte 0, which is sound because a block belongs to one group at a time.
    """

    size: int
    layers: tuple[str, ...]
    layer_stride: int
    block_stride: int
    offset: int = 0
    host_resident: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plan-schema form."""
        return {
            "size": self.size,
            "layers": list(self.layers),
            "layer_stride": self.layer_stride,
            "block_stride": self.block_stride,
            "offset": self.offset,
            "host_resident": self.host_resident,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "backing tensor") -> BackingTensor:
        """Inverse of :meth:`to_dict`.

        :raises ModelFileError: a missing key or a value of the wrong kind (names ``where``).
        """
        data = _object(data, where)
        resident = data.get("host_resident", False)
        if not isinstance(resident, bool):
            raise ModelFileError(f"{where}.host_resident = {shown(resident)} must be true or false")
        return cls(
            size=_count(_get(data, "size", where), f"{where}.size"),
            layers=_names(_get(data, "layers", where), f"{where}.layers"),
            layer_stride=_count(_get(data, "layer_stride", where), f"{where}.layer_stride"),
            block_stride=_count(_get(data, "block_stride", where), f"{where}.block_stride"),
            offset=_count(data.get("offset", 0), f"{where}.offset"),
            host_resident=resident,
        )


def spec_runs(group: KVCacheGroup) -> list[tuple[KVCacheSpec, tuple[str, ...]]]:
    """A group's layers by distinct member spec, in order of first appearance: vLLM 0.33 places
    one tensor per (group, distinct spec)."""
    members = group.spec.members(group.layer_names)
    runs: dict[KVCacheSpec, list[str]] = {}
    for name in group.layer_names:
        runs.setdefault(members[name], []).append(name)
    return [(spec, tuple(names)) for spec, names in runs.items()]


def interleaved(rows: Sequence[Sequence[Any]]) -> list[Any]:
    """The first item of every row, then the second of every row that has one, and so on: a
    shared pool's tensors hold its groups' layers so, tensor ``i`` the ``i``-th of each group."""
    if len(set(map(len, rows))) <= 1:
        return list(chain.from_iterable(zip(*rows, strict=True)))
    fill = object()  # pads the short rows; dropped by identity (no item is looked at)
    return list(filter(partial(is_not, fill), chain.from_iterable(zip_longest(*rows, fillvalue=fill))))


#: vLLM 0.33's logical axes of a KV-cache tensor: layers, blocks, heads, states, content bytes;
#: a KV-cache layout names them in stride order, outermost first (``LBNHC``, ``BLHNC``, ...)
LAYOUT_AXES = "LBHNC"


def layout_strides(
    spec: KVCacheSpec, num_blocks: int, num_layers: int, layout: str, *, block_stride: int | None = None
) -> tuple[int, int]:
    """``(layer_stride, block_stride)`` in bytes of ``num_layers`` layers of ``spec`` over
    ``num_blocks`` blocks laid out in ``layout``'s axis order, as vLLM 0.33 strides them: the
    innermost axis is one byte apart and each outer axis spans the ones inside it; a padded page
    (``page_size_padded``) widens the innermost of the layer and block axes to the padded page;
    ``block_stride`` fixes the block axis (block-outermost layouts: the bytes of one block).

    :raises ConfigError: ``layout`` is no order of the five axes, or it puts heads or states
        outside a padded page (vLLM cannot pad such a page either).
    """
    if sorted(layout) != sorted(LAYOUT_AXES):
        raise ConfigError(f"KV-cache layout {layout!r} is no order of the axes {', '.join(LAYOUT_AXES)}")
    heads, states, content = spec.page_shape()
    size = {"L": num_layers, "B": num_blocks, "H": heads, "N": states, "C": content}
    padded = getattr(spec, "page_size_padded", None)
    grid_end = max(layout.index("L"), layout.index("B")) + 1
    if padded is not None and math.prod(size[a] for a in layout[:grid_end]) != num_layers * num_blocks:
        raise ConfigError(
            f"KV-cache layout {layout} puts {heads} heads or {states} states of a {type(spec).__name__} "
            f"page outside its padded page ({padded} bytes); only layers and blocks may lie outside a "
            "padded page: choose a layout with L and B outermost"
        )
    strides: dict[str, int] = {}
    stride = 1
    for index in reversed(range(len(layout))):
        axis = layout[index]
        if padded is not None and index == grid_end - 1:
            stride = max(stride, int(padded))
        strides[axis] = (block_stride if axis == "B" else None) or stride
        stride = strides[axis] * size[axis]
    return strides["L"], strides["B"]


def backing_tensors(
    groups: Sequence[KVCacheGroup],
    num_blocks: int,
    block_bytes: int,
    *,
    block_outermost: bool,
    layout: str | None = None,
) -> tuple[BackingTensor, ...]:
    """vLLM 0.33's placement of ``groups`` in one backing of ``block_bytes x num_blocks`` bytes.

    Each group overlays the backing from byte 0 and lays its distinct-spec runs one after the
    other, strided as ``layout`` orders the axes (:func:`layout_strides`; default ``LBNHC``, or
    ``BLNHC`` when ``block_outermost``). Layer-outermost: each layer owns a region of
    ``layer_stride`` bytes (``page x num_blocks``; ``block_stride`` is the page, or a head's
    share of it when heads lie outside blocks, ``LHBNC``); block-outermost: each block holds every
    layer's page back to back (``block_stride = block_bytes``).
    """
    order = layout or ("BLNHC" if block_outermost else "LBNHC")
    size = block_bytes * num_blocks
    out: list[BackingTensor] = []
    for group in groups:
        offset = 0
        for spec, names in spec_runs(group):
            fixed = block_bytes if block_outermost else None
            layer_stride, block_stride = layout_strides(
                spec, num_blocks, len(names), order, block_stride=fixed
            )
            out.append(BackingTensor(size, names, layer_stride, block_stride, offset))
            offset += len(names) * (spec.page_size_bytes if block_outermost else layer_stride)
    return tuple(out)


def tensors_of_backing(
    backing: Sequence[BackingTensor], *, block_outermost: bool
) -> tuple[KVCacheTensor, ...]:
    """The same placement in kvrules' (vLLM 0.28's) tensor form: one tensor per distinct start
    byte with the layers aliasing it. Layer-outermost: ``size`` is a layer region; block-outermost:
    ``size`` is the backing's, ``offset`` the place inside a block and ``block_stride`` the block."""
    starts: dict[int, list[str]] = {}
    sizes: dict[int, int] = {}
    stride = 0
    for tensor in backing:
        stride = tensor.block_stride
        for index, name in enumerate(tensor.layers):
            start = tensor.offset + index * tensor.layer_stride
            starts.setdefault(start, []).append(name)
            sizes[start] = max(sizes.get(start, 0), tensor.size if block_outermost else tensor.layer_stride)
    if block_outermost:
        return tuple(KVCacheTensor(sizes[s], tuple(starts[s]), s, stride) for s in sorted(starts))
    return tuple(KVCacheTensor(sizes[s], tuple(starts[s])) for s in sorted(starts))


@dataclass(frozen=True)
class WorkerWaste:
    """One worker's bytes for one request of ``max_model_len`` (see the module docstring)."""

    block_bytes: int
    allocated_bytes: int
    real_bytes: int
    page_padding_bytes: int
    slot_padding_bytes: int

    @property
    def efficiency(self) -> float:
        """``real / allocated`` (1.0 when nothing is allocated)."""
        return 1.0 if self.allocated_bytes == 0 else self.real_bytes / self.allocated_bytes

    def to_dict(self) -> dict[str, Any]:
        """Plan-schema form."""
        return {**asdict(self), "efficiency": self.efficiency}


@dataclass(frozen=True)
class WasteReport:
    """Padding and efficiency of a plan, summed over workers.

    :ivar padding_slots: empty tensor slots over the groups (a shared pool's ``group_size -
        len(group)`` summed over groups).
    :ivar ideal_max_concurrency: requests the same memory would hold with no padding.
    :ivar ideal_capacity_tokens: ``floor(ideal_max_concurrency * max_model_len)``.
    """

    workers: tuple[WorkerWaste, ...]
    padding_slots: int
    ideal_max_concurrency: float
    ideal_capacity_tokens: int

    @property
    def allocated_bytes(self) -> int:
        """Bytes one request reserves, all workers."""
        return sum(w.allocated_bytes for w in self.workers)

    @property
    def real_bytes(self) -> int:
        """Bytes of real state one request holds, all workers."""
        return sum(w.real_bytes for w in self.workers)

    @property
    def page_padding_bytes(self) -> int:
        """Page padding one request reserves, all workers."""
        return sum(w.page_padding_bytes for w in self.workers)

    @property
    def slot_padding_bytes(self) -> int:
        """Slot padding one request reserves, all workers."""
        return sum(w.slot_padding_bytes for w in self.workers)

    @property
    def efficiency(self) -> float:
        """``real / allocated`` over all workers."""
        return 1.0 if self.allocated_bytes == 0 else self.real_bytes / self.allocated_bytes

    def to_dict(self) -> dict[str, Any]:
        """Plan-schema form."""
        return {
            "allocated_bytes": self.allocated_bytes,
            "real_bytes": self.real_bytes,
            "page_padding_bytes": self.page_padding_bytes,
            "slot_padding_bytes": self.slot_padding_bytes,
            "efficiency": self.efficiency,
            "padding_slots": self.padding_slots,
            "ideal_max_concurrency": None
            if math.isinf(self.ideal_max_concurrency)
            else self.ideal_max_concurrency,
            "ideal_capacity_tokens": self.ideal_capacity_tokens,
            "workers": [w.to_dict() for w in self.workers],
        }


@dataclass(frozen=True)
class UnifyResult:
    """Result of :meth:`Planner.unify`: the unified specs and the decisions taken."""

    specs: Mapping[str, KVCacheSpec]
    decisions: tuple[Decision, ...]


def project_group(group: KVCacheGroup, layers: Mapping[str, Any] | set[str]) -> KVCacheGroup:
    """``group`` restricted to ``layers`` (a uniform-type spec keeps only those members; the
    EAGLE flag stays only when some layer remains, as in vLLM 0.28); ``group`` itself when it
    keeps every layer."""
    names = tuple(filter(layers.__contains__, group.layer_names))
    if names and len(names) == len(group.layer_names):
        return group
    return KVCacheGroup(names, group.spec.restricted_to(names), group.is_eagle_group and bool(names))


@dataclass(frozen=True)
class WorkerPlan:
    """One worker's (pipeline stage's) share of the plan.

    :ivar num_blocks: the agreed number of blocks (same on every worker).
    :ivar tensors: the worker's buffers, sized for ``num_blocks``.
    :ivar groups: the global groups restricted to this worker's layers (same order).
    :ivar layout: the name of the tensor layout used.
    :ivar available_memory: bytes planned against (after ``num_gpu_blocks_override``).
    :ivar own_num_blocks: blocks this worker's memory alone would give.
    :ivar backing: vLLM 0.33's form of the same placement (:class:`BackingTensor`), from a
        layout that places one backing allocation per worker (``one-backing``); empty otherwise.
    """

    num_blocks: int
    tensors: tuple[KVCacheTensor, ...]
    groups: tuple[KVCacheGroup, ...] = ()
    layout: str = ""
    available_memory: int = 0
    own_num_blocks: int = 0
    backing: tuple[BackingTensor, ...] = ()

    @property
    def allocated_bytes(self) -> int:
        """Bytes of all buffers, a packed backing allocation counted once."""
        packed = {t.size for t in self.tensors if t.block_stride > 0}
        plain = sum(t.size for t in self.tensors if t.block_stride == 0)
        return plain + (max(packed) if packed else 0)

    def layer_names(self) -> tuple[str, ...]:
        """This worker's layers, group by group."""
        return tuple(n for g in self.groups for n in g.layer_names)


@dataclass(frozen=True)
class Plan:
    """A complete KV-cache plan (architecture §3). Build one with :meth:`kvrules.Planner.plan`."""

    groups: tuple[KVCacheGroup, ...]
    workers: tuple[WorkerPlan, ...]
    num_blocks: int
    specs: Mapping[str, KVCacheSpec]
    decisions: tuple[Decision, ...]
    max_concurrency: float
    capacity_tokens: int
    max_model_len: int
    config: EngineConfig
    strategy_set: str = "default"
    rules: tuple[str, ...] = ()
    route: str = ""
    waste: WasteReport | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The plan in schema ``kvrules.plan/v2`` (plain JSON values).

        Layers with equal specs share one spec form and one size record, and a decision's
        summaries are the decision's own: treat the result as read-only (``copy.deepcopy`` it
        before changing anything).
        """
        forms = _Memo(lambda spec: spec.to_dict())
        sizes = _Memo(page_sizes)
        return {
            "schema": SCHEMA,
            "strategy_set": self.strategy_set,
            "rules": list(self.rules),
            "route": self.route,
            "max_model_len": self.max_model_len,
            "num_blocks": self.num_blocks,
            "max_concurrency": _concurrency(self.max_concurrency),
            "capacity_tokens": self.capacity_tokens,
            "config": self.config.to_dict(),
            "specs": {name: forms(spec) for name, spec in self.specs.items()},
            "spec_sizes": {name: sizes(spec) for name, spec in self.specs.items()},
            "groups": [
                {
                    "layer_names": list(g.layer_names),
                    "spec": forms(g.spec),
                    "is_eagle_group": g.is_eagle_group,
                    **sizes(g.spec),
                }
                for g in self.groups
            ],
            "workers": [_worker_dict(w) for w in self.workers],
            "waste": self.waste.to_dict() if self.waste is not None else None,
            "decisions": [d.to_dict() for d in self.decisions],
            **({"extra": dict(self.extra)} if self.extra else {}),
        }

    def iter_json(self, *, indent: int | None = None) -> Iterator[str]:
        """:meth:`to_json`'s text in pieces (each a few thousand parts of the document: layer
        names, spec forms, decision records), for writing a large plan to a file or socket
        without holding all of it: ``"".join`` of the pieces is :meth:`to_json`."""
        return _JSONText(indent).pieces(self)

    def to_json(self, *, indent: int | None = None) -> str:
        """:meth:`to_dict` as JSON text: compact by default (no spaces or newlines), or indented
        by ``indent`` spaces. Byte for byte ``json.dumps(self.to_dict(), indent=indent,
        separators=(",", ":" if indent is None else ": "))``, in about the time planning took."""
        return "".join(_JSONText(indent).tokens(self))

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, spec_types: Mapping[str, type[KVCacheSpec]] | None = None
    ) -> Plan:
        """Rebuild a plan from a ``kvrules.plan/v1`` or ``kvrules.plan/v2`` document.

        Derived figures in the document (v2's page sizes, each worker's ``allocated_bytes``, the
        waste totals and efficiencies) are recomputed and must match, and the plan must hold every
        plan invariant (:func:`plan_problem`: each layer in exactly one group, tensors covering
        every layer of their worker and fitting its memory, block counts, concurrency and capacity
        recomputed): a plan document is input from outside, like a model file.

        :raises ModelFileError: not a plan document of a known version, a missing key, a value of
            the wrong kind, a derived figure that differs (naming the field and both values), or
            a broken invariant (naming the field and the invariant).
        :raises SpecError: a spec that does not build (naming the layer).
        """
        data = _object(data, "plan")
        version = _version(data)
        groups = _read_groups(_get(data, "groups", "plan"), spec_types)
        workers = _array(_get(data, "workers", "plan"), "workers")
        plan = cls(
            groups=groups,
            workers=tuple(_read_worker(w, f"workers[{i}]", groups) for i, w in enumerate(workers)),
            num_blocks=_count(_get(data, "num_blocks", "plan"), "num_blocks", MAX_BLOCKS),
            specs=_read_specs(_get(data, "specs", "plan"), spec_types),
            decisions=tuple(
                Decision.from_dict(d, where=f"decisions[{i}]")
                for i, d in enumerate(_array(data.get("decisions", []), "decisions"))
            ),
            max_concurrency=_read_concurrency(_get(data, "max_concurrency", "plan"), "max_concurrency"),
            capacity_tokens=_count(_get(data, "capacity_tokens", "plan"), "capacity_tokens", None),
            max_model_len=as_int(
                _get(data, "max_model_len", "plan"),
                "max_model_len",
                minimum=1,
                maximum=MAX_TOKENS,
                error=ModelFileError,
            ),
            config=EngineConfig.from_dict(dict(_object(_get(data, "config", "plan"), "config"))),
            strategy_set=canonical_set_name(_text(data.get("strategy_set", ""), "strategy_set")),
            rules=_names(data.get("rules", []), "rules"),
            route=_text(data.get("route", ""), "route"),
            waste=_read_waste(data.get("waste")),
            extra=dict(_object(data.get("extra", {}), "extra")),
        )
        _check_derived(data, plan, version)
        return check_plan(plan)

    @classmethod
    def from_json(
        cls, text: str | bytes, *, spec_types: Mapping[str, type[KVCacheSpec]] | None = None
    ) -> Plan:
        """Rebuild a plan from a plan document's JSON text (:meth:`to_json`'s output, or bytes
        in UTF-8, -16 or -32): decoded with the standard :mod:`json` module, refusing what JSON
        does not allow (``NaN``, ``Infinity``, ``-Infinity``) and an object naming a key twice,
        then read and checked by :meth:`from_dict`.

        :raises ModelFileError: text that is not JSON, holds one of those constants or a
            repeated key, or anything :meth:`from_dict` refuses.
        :raises SpecError: a spec that does not build (naming the layer).
        """
        try:
            data = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)
        except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, too many digits
            if isinstance(e, ModelFileError):
                raise
            raise ModelFileError(
                f"plan document: not JSON text ({e}); write it with Plan.to_json()"
            ) from None
        return cls.from_dict(_object(data, "plan"), spec_types=spec_types)


def _refuse_constant(name: str) -> Any:
    raise ModelFileError(f"plan document: {name} is not allowed: JSON numbers are finite")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    made: dict[str, Any] = {}
    for key, value in pairs:
        if key in made:
            raise ModelFileError(f"plan document: key {key!r} appears twice in one object; keep one")
        made[key] = value
    return made


class _MadeOnRead:
    """:attr:`Plan.decisions`: the tuple given to the constructor, or, for a plan the pipeline
    built (:func:`with_deferred_decisions`), its log's records, made into that tuple when first
    read and kept (beside the columns, which :meth:`Plan.to_json` keeps writing from). Planning
    a million layers then makes no million records the garbage collector walks meanwhile;
    reading ``plan.decisions`` makes them once."""

    def __get__(self, plan: Plan | None, owner: type | None = None) -> tuple[Decision, ...]:
        if plan is None:
            raise AttributeError("decisions")  # for dataclasses: the field has no default
        stored = plan.__dict__["decisions"]
        if type(stored) is DeferredDecisions:
            return stored.made()  # kept beside the columns the JSON is written from
        return stored  # type: ignore[no-any-return]

    def __set__(self, plan: Plan, value: tuple[Decision, ...] | DeferredDecisions) -> None:
        plan.__dict__["decisions"] = value


# installed after @dataclass made the field, so the generated __init__, __eq__ and __repr__
# store and read the field through it
setattr(Plan, "decisions", _MadeOnRead())  # noqa: B010


def with_deferred_decisions(plan: Plan, decisions: DeferredDecisions) -> Plan:
    """``plan``, its decisions replaced by ``decisions``, made when ``plan.decisions`` is first
    read (for the pipeline: ``plan`` is new and not yet shared)."""
    object.__setattr__(plan, "decisions", decisions)
    return plan


def plan_decision_runs(plan: Plan) -> Iterator[Run]:
    """``plan``'s decisions in order, as columns, without making deferred ones."""
    return decision_runs(plan.__dict__["decisions"])


def _concurrency(value: float) -> float | None:
    return None if math.isinf(value) else value


def _worker_dict(w: WorkerPlan) -> dict[str, Any]:
    return {
        "num_blocks": w.num_blocks,
        "own_num_blocks": w.own_num_blocks,
        "layout": w.layout,
        "available_memory": w.available_memory,
        "allocated_bytes": w.allocated_bytes,
        "groups": [list(g.layer_names) for g in w.groups],
        "tensors": [t.to_dict() for t in w.tensors],
    } | ({"backing": [t.to_dict() for t in w.backing]} if w.backing else {})


class _Memo:
    """``make(spec)`` once per distinct spec (equal specs have equal forms and sizes: their fields
    are validated, so ``1``, ``1.0`` and ``True`` never meet in one field); unhashable specs are
    computed every time."""

    def __init__(self, make: Callable[[KVCacheSpec], Any]) -> None:
        self.make = make
        self.done: dict[KVCacheSpec, Any] = {}

    def __call__(self, spec: KVCacheSpec) -> Any:
        try:
            value = self.done.get(spec)
        except TypeError:
            return self.make(spec)
        if value is None:
            value = self.done[spec] = self.make(spec)
        return value


# -- reading: plan documents ------------------------------------------------------------------

_SIZE_KEYS = ("page_size_bytes", "real_page_size_bytes", "padding_bytes")
_MISSING = object()


def _get(data: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in data:
        raise ModelFileError(f"{where}: the key {key!r} is missing")
    return data[key]


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ModelFileError(f"{where} = {shown(value)} is not allowed: an object")
    return value


def _array(value: Any, where: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise ModelFileError(f"{where} = {shown(value)} is not allowed: an array")
    return value


def _count(value: Any, where: str, maximum: int | None = MAX_BYTES) -> int:
    return as_int(value, where, minimum=0, maximum=maximum, error=ModelFileError)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ModelFileError(f"{where} = {shown(value)} is not allowed: a string")
    return value


def _names(value: Any, where: str) -> tuple[str, ...]:
    return tuple(
        as_name(n, f"{where}[{i}]", error=ModelFileError) for i, n in enumerate(_array(value, where))
    )


def _version(data: Mapping[str, Any]) -> int:
    """The document's schema version; a v1 document must not hold v2's keys."""
    schema = data.get("schema")
    version = next((v for v, name in SCHEMAS.items() if name == schema), None)
    if version is None:
        known = ", ".join(repr(name) for name in SCHEMAS.values())
        raise ModelFileError(f"not a kvrules plan: schema = {shown(schema)} is not allowed: one of {known}")
    if version == 1:
        found = _v2_key_in(data)
        if found:
            raise ModelFileError(
                f"{found} is not part of schema {SCHEMAS[1]!r} (it is new in {SCHEMA!r}); "
                f"write the document with schema {SCHEMA!r}, or drop the v2 keys"
            )
    return version


def _v2_key_in(data: Mapping[str, Any]) -> str:
    """The first key of v2 found in ``data`` (``""`` if none)."""
    if "spec_sizes" in data:
        return "spec_sizes"
    for i, group in enumerate(_entries(data, "groups")):
        for key in _SIZE_KEYS:
            if key in group:
                return f"groups[{i}].{key}"
    for i, decision in enumerate(_entries(data, "decisions")):
        if "details" in decision:
            return f"decisions[{i}].details"
    for i, worker in enumerate(_entries(data, "workers")):
        if "backing" in worker:
            return f"workers[{i}].backing"
    return ""


def _entries(data: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    """The objects in the array ``data[key]`` (none when it is not an array; read errors say why)."""
    value = data.get(key)
    items = value if isinstance(value, list | tuple) else ()
    return [item for item in items if isinstance(item, Mapping)]


def _read_specs(value: Any, spec_types: Mapping[str, type[KVCacheSpec]] | None) -> dict[str, KVCacheSpec]:
    """Every layer's spec; layers whose spec forms are equal share one spec object (built once)."""
    built: dict[str, KVCacheSpec] = {}
    specs = {}
    for name, form in _object(value, "specs").items():
        as_name(name, "a layer name in specs", error=ModelFileError)
        key = _form_key(form)
        spec = built.get(key) if key is not None else None
        if spec is None:
            spec = spec_from_dict(form, layer=name, spec_types=spec_types)
            if key is not None:
                built[key] = spec
        specs[name] = spec
    return specs


def _form_key(form: Any) -> str | None:
    """A spec form's JSON text (equal texts: equal specs; ``1``, ``1.0`` and ``true`` differ), or
    ``None`` for what JSON cannot write (``spec_from_dict`` says what is wrong with it)."""
    try:
        return json.dumps(form, allow_nan=False)
    except (TypeError, ValueError):
        return None


def _read_groups(value: Any, spec_types: Mapping[str, type[KVCacheSpec]] | None) -> tuple[KVCacheGroup, ...]:
    groups = []
    for i, group in enumerate(_array(value, "groups")):
        where = f"groups[{i}]"
        group = _object(group, where)
        eagle = group.get("is_eagle_group", False)
        if not isinstance(eagle, bool):
            raise ModelFileError(f"{where}.is_eagle_group = {shown(eagle)} is not allowed: true or false")
        spec = spec_from_dict(_object(_get(group, "spec", where), f"{where}.spec"), spec_types=spec_types)
        groups.append(
            KVCacheGroup(_names(_get(group, "layer_names", where), f"{where}.layer_names"), spec, eagle)
        )
    return tuple(groups)


def _read_worker(value: Any, where: str, groups: tuple[KVCacheGroup, ...]) -> WorkerPlan:
    data = _object(value, where)
    names = _array(_get(data, "groups", where), f"{where}.groups")
    if len(names) != len(groups):
        raise ModelFileError(
            f"{where}.groups has {len(names)} entries for {len(groups)} groups: one per group, in "
            "the order of 'groups' (empty for a group with no layer on this worker)"
        )
    tensors = _array(_get(data, "tensors", where), f"{where}.tensors")
    backing = _array(data.get("backing", []), f"{where}.backing")
    return WorkerPlan(
        num_blocks=_count(_get(data, "num_blocks", where), f"{where}.num_blocks", MAX_BLOCKS),
        tensors=tuple(
            KVCacheTensor.from_dict(t, where=f"{where}.tensors[{k}]") for k, t in enumerate(tensors)
        ),
        groups=tuple(
            _worker_group(g, _names(n, f"{where}.groups[{j}]"), f"{where}.groups[{j}]")
            for j, (g, n) in enumerate(zip(groups, names, strict=True))
        ),
        layout=_text(data.get("layout", ""), f"{where}.layout"),
        available_memory=_count(data.get("available_memory", 0), f"{where}.available_memory"),
        own_num_blocks=_count(data.get("own_num_blocks", 0), f"{where}.own_num_blocks", MAX_BLOCKS),
        backing=tuple(
            BackingTensor.from_dict(t, where=f"{where}.backing[{k}]") for k, t in enumerate(backing)
        ),
    )


def _worker_group(group: KVCacheGroup, names: tuple[str, ...], where: str) -> KVCacheGroup:
    """``group`` restricted to a worker's ``names``, which must all be the group's."""
    stray = set(names).difference(group.layer_names)
    if stray:
        raise ModelFileError(
            f"{where} names layer {sorted(stray)[0]!r}, which the group does not hold: a worker's "
            "groups are the global groups restricted to its layers"
        )
    return project_group(group, set(names))


def _read_concurrency(value: Any, where: str) -> float:
    if value is None:
        return math.inf
    number = as_number(value, where, minimum=0, maximum=MAX_BYTES, error=ModelFileError)
    return float(number)


def _read_waste(value: Any) -> WasteReport | None:
    if value is None:
        return None
    data = _object(value, "waste")
    workers = []
    for i, x in enumerate(_array(_get(data, "workers", "waste"), "waste.workers")):
        where = f"waste.workers[{i}]"
        x = _object(x, where)
        keys = ("block_bytes", "allocated_bytes", "real_bytes", "page_padding_bytes", "slot_padding_bytes")
        workers.append(WorkerWaste(*(_count(_get(x, k, where), f"{where}.{k}") for k in keys)))
    ideal = _get(data, "ideal_max_concurrency", "waste")
    return WasteReport(
        tuple(workers),
        _count(_get(data, "padding_slots", "waste"), "waste.padding_slots", None),
        _read_concurrency(ideal, "waste.ideal_max_concurrency"),
        _count(_get(data, "ideal_capacity_tokens", "waste"), "waste.ideal_capacity_tokens", None),
    )


def _check_derived(data: Mapping[str, Any], plan: Plan, version: int) -> None:
    """Every derived figure in ``data`` equals what ``plan`` derives (v2's sizes must be there)."""
    for where, given, derived in _derived_figures(data, plan, version):
        if given is _MISSING:
            raise ModelFileError(f"{where} is missing: schema {SCHEMAS[version]!r} requires it")
        if not _agrees(given, derived):
            raise ModelFileError(
                f"{where} = {shown(given)} does not match {derived!r}, the value the plan's specs, "
                "tensors and waste figures give; derived figures are recomputed on read and must agree"
            )


def _agrees(given: Any, derived: int | float) -> bool:
    """``given`` is the number ``derived`` (an integer figure must be written as an integer)."""
    if isinstance(given, bool) or not isinstance(given, int | float):
        return False
    if isinstance(derived, int) and not isinstance(given, int):
        return False
    return bool(given == derived)


def _derived_figures(data: Mapping[str, Any], plan: Plan, version: int) -> Iterator[tuple[str, Any, Any]]:
    """(where, the document's value, the derived value) for every derived figure."""
    for i, (doc, worker) in enumerate(zip(data["workers"], plan.workers, strict=True)):
        if "allocated_bytes" in doc or version >= 2:
            yield (
                f"workers[{i}].allocated_bytes",
                doc.get("allocated_bytes", _MISSING),
                worker.allocated_bytes,
            )
    if plan.waste is not None:
        yield from _waste_figures(data["waste"], plan.waste)
    if version >= 2:
        for i, (doc, group) in enumerate(zip(data["groups"], plan.groups, strict=True)):
            for key, size in page_sizes(group.spec).items():
                yield f"groups[{i}].{key}", doc.get(key, _MISSING), size
        yield from _spec_size_figures(_object(_get(data, "spec_sizes", "plan"), "spec_sizes"), plan.specs)


def _waste_figures(doc: Mapping[str, Any], waste: WasteReport) -> Iterator[tuple[str, Any, Any]]:
    derived = waste.to_dict()
    for key in ("allocated_bytes", "real_bytes", "page_padding_bytes", "slot_padding_bytes", "efficiency"):
        if key in doc:
            yield f"waste.{key}", doc[key], derived[key]
    for i, (x, worker) in enumerate(zip(doc["workers"], waste.workers, strict=True)):
        if "efficiency" in x:
            yield f"waste.workers[{i}].efficiency", x["efficiency"], worker.efficiency


def _spec_size_figures(
    doc: Mapping[str, Any], specs: Mapping[str, KVCacheSpec]
) -> Iterator[tuple[str, Any, Any]]:
    missing = next((name for name in specs if name not in doc), None)
    if missing is not None:
        raise ModelFileError(
            f"spec_sizes[{missing!r}] is missing: spec_sizes has one entry per layer of 'specs'"
        )
    stray = next((name for name in doc if name not in specs), None)
    if stray is not None:
        raise ModelFileError(
            f"spec_sizes[{stray!r}] is not a layer of 'specs': spec_sizes has one entry per layer"
        )
    sizes = _Memo(page_sizes)
    for name, spec in specs.items():
        record, derived = _object(doc[name], f"spec_sizes[{name!r}]"), sizes(spec)
        if record == derived and all(type(v) is int for v in record.values()):
            continue  # the common case, checked at once
        for key, size in derived.items():
            yield f"spec_sizes[{name!r}].{key}", record.get(key, _MISSING), size


# -- writing: JSON text in pieces -------------------------------------------------------------

#: tokens joined into one piece of :meth:`Plan.iter_json`
_BATCH = 2000
#: distinct decision bodies remembered at a time (decisions repeat in runs of layers)
_DECISION_MEMO = 4096


class _JSONText:
    """The JSON text of a plan, equal to ``json.dumps`` of :meth:`Plan.to_dict` with the same
    ``indent``, written piece by piece; what repeats is encoded once."""

    def __init__(self, indent: int | None) -> None:
        if indent is not None:
            indent = as_int(indent, "to_json(indent=...)", minimum=0, maximum=16, error=ModelFileError)
        self.indent = indent
        self.colon = ":" if indent is None else ": "
        self.keys: dict[str, str] = {}  # the few keys of the document's objects, with their colon
        self.plain_keys: tuple[object, bool] = (None, False)  # a mapping, whether its keys are plain
        self.arrays: dict[int, tuple[Sequence[str], str]] = {}  # by id: a tuple of names, its text
        self.specs = _Memo(lambda spec: self.value(spec.to_dict(), 2))
        self.sizes = _Memo(lambda spec: self.value(page_sizes(spec), 2))
        self.group_specs = _Memo(lambda spec: self.value(spec.to_dict(), 3))
        self.bodies: dict[tuple[Any, ...], tuple[str, str]] = {}
        self.contents: dict[tuple[Any, ...], tuple[str, str]] = {}

    # -- generic pieces ------------------------------------------------------------------
    def newline(self, depth: int) -> str:
        """What comes before an item at ``depth`` (nothing in compact text)."""
        return "" if self.indent is None else "\n" + " " * (self.indent * depth)

    def value(self, obj: Any, depth: int) -> str:
        """Any JSON value written at ``depth``."""
        text = json.dumps(obj, indent=self.indent, separators=(",", self.colon))
        return text if self.indent is None else text.replace("\n", self.newline(depth))

    def key(self, name: str) -> str:
        """An object key with its colon."""
        text = self.keys.get(name)
        if text is None:
            text = self.keys[name] = _string(name) + self.colon
        return text

    def separator(self, depth: int) -> str:
        """What comes before each item of a container whose items are at ``depth`` (the first
        item's loses its comma: :meth:`container`)."""
        return "," + self.newline(depth)

    def container(self, brackets: str, items: Iterable[tuple[str, ...]], depth: int) -> Iterable[str]:
        """The tokens of an array (``"[]"``) or object (``"{}"``) at ``depth`` whose items are
        ``items``, each given as the tuple of its tokens (an object's item with its key), the
        first token starting with :meth:`separator`; no Python call is made per item."""
        rest = iter(items)
        first = next(rest, None)
        if first is None:
            return (brackets,)
        head = brackets[0] + first[0][1:]  # the first item's separator without its comma
        return chain((head,), first[1:], chain.from_iterable(rest), (self.newline(depth) + brackets[1],))

    def whole(self, brackets: str, items: Iterable[str], depth: int) -> str:
        """:meth:`container` as one string (for small containers)."""
        items = list(items)
        if not items:
            return brackets
        if self.indent is None:
            return brackets[0] + ",".join(items) + brackets[1]
        inner = self.newline(depth + 1)
        return brackets[0] + inner + ("," + inner).join(items) + self.newline(depth) + brackets[1]

    def names(self, names: Sequence[str], depth: int) -> str:
        """An array of layer names; in compact text, written once per tuple of names (a group's
        layers appear in ``groups`` and again in its worker's ``groups``)."""
        if self.indent is not None:
            return self.whole("[]", map(_string, names), depth)
        known = self.arrays.get(id(names))
        if known is None or known[0] is not names:
            text = '["' + '","'.join(names) + '"]' if names and _plain(names) else None
            known = self.arrays[id(names)] = (names, text or "[" + ",".join(map(_string, names)) + "]")
        return known[1]

    # -- the plan's parts ---------------------------------------------------------------
    def tokens(self, plan: Plan) -> Iterator[str]:
        """The whole document as tokens (strings whose concatenation it is), in the key order
        of :meth:`Plan.to_dict`; one chain of the sections' iterators, so that no Python frame
        is resumed per token (a large plan has about ten tokens per layer)."""
        parts: list[Iterable[str]] = []
        lead = "{" + self.newline(1)
        for name, tokens in self.sections(plan):
            parts += ((lead + self.key(name),), tokens)
            lead = "," + self.newline(1)
        parts.append((self.newline(0) + "}",))
        return chain.from_iterable(parts)

    def pieces(self, plan: Plan) -> Iterator[str]:
        """:meth:`tokens` joined into pieces of :data:`_BATCH` tokens."""
        tokens = self.tokens(plan)
        while batch := list(islice(tokens, _BATCH)):
            yield "".join(batch)

    def sections(self, plan: Plan) -> Iterator[tuple[str, Iterable[str]]]:
        """Each top-level key with its value's pieces."""
        small = {
            "schema": SCHEMA,
            "strategy_set": plan.strategy_set,
            "rules": list(plan.rules),
            "route": plan.route,
            "max_model_len": plan.max_model_len,
            "num_blocks": plan.num_blocks,
            "max_concurrency": _concurrency(plan.max_concurrency),
            "capacity_tokens": plan.capacity_tokens,
            "config": plan.config.to_dict(),
        }
        for name, value in small.items():
            yield name, (self.value(value, 1),)
        yield "specs", self.container("{}", self.per_layer(plan.specs, self.specs), 1)
        yield "spec_sizes", self.container("{}", self.per_layer(plan.specs, self.sizes), 1)
        sep = (self.separator(2),)
        yield "groups", self.container("[]", (sep + self.group(g) for g in plan.groups), 1)
        yield "workers", self.container("[]", (sep + self.worker(w) for w in plan.workers), 1)
        yield "waste", (self.value(plan.waste.to_dict() if plan.waste is not None else None, 1),)
        yield (
            "decisions",
            self.container("[]", chain.from_iterable(map(self.decisions, plan_decision_runs(plan))), 1),
        )
        if plan.extra:
            yield "extra", (self.value(dict(plan.extra), 1),)

    def group(self, group: KVCacheGroup) -> tuple[str, ...]:
        """One entry of ``groups`` (depth 2), as tokens (its layer names' text is one token,
        shared with the worker's ``groups``)."""
        fields = [
            self.key("spec") + self.group_specs(group.spec),
            self.key("is_eagle_group") + ("true" if group.is_eagle_group else "false"),
        ]
        fields += [self.key(k) + _int(v) for k, v in page_sizes(group.spec).items()]
        if self.indent is not None:
            return (
                self.whole("{}", [self.key("layer_names") + self.names(group.layer_names, 3), *fields], 2),
            )
        return ("{" + self.key("layer_names"), self.names(group.layer_names, 3), "," + ",".join(fields) + "}")

    def worker(self, worker: WorkerPlan) -> tuple[str, ...]:
        """One entry of ``workers`` (depth 2), as tokens: in compact text its groups' names and
        its tensors (:meth:`tensors`) are tokens of their own, not copied into one string."""
        head = {
            "num_blocks": worker.num_blocks,
            "own_num_blocks": worker.own_num_blocks,
            "layout": worker.layout,
            "available_memory": worker.available_memory,
            "allocated_bytes": worker.allocated_bytes,
        }
        fields = [self.key(k) + self.value(v, 3) for k, v in head.items()]
        backing = self.whole("[]", map(self.backing, worker.backing), 3) if worker.backing else None
        if self.indent is not None:
            fields.append(
                self.key("groups")
                + self.whole("[]", (self.names(g.layer_names, 4) for g in worker.groups), 3)
            )
            fields.append(self.key("tensors") + self.whole("[]", map(self.tensor, worker.tensors), 3))
            if backing is not None:
                fields.append(self.key("backing") + backing)
            return (self.whole("{}", fields, 2),)
        groups = list(
            chain.from_iterable(zip(repeat(","), (self.names(g.layer_names, 4) for g in worker.groups)))
        )
        end = "]" if backing is None else "]," + self.key("backing") + backing
        return (
            "{" + ",".join(fields) + "," + self.key("groups") + "[",
            *groups[1:],
            "]," + self.key("tensors") + "[",
            *self.tensors(worker.tensors),
            end + "}",
        )

    def backing(self, tensor: BackingTensor) -> str:
        """One backing tensor of a worker (depth 4)."""
        fields = [
            self.key("size") + _int(tensor.size),
            self.key("layers") + self.names(tensor.layers, 5),
            self.key("layer_stride") + _int(tensor.layer_stride),
            self.key("block_stride") + _int(tensor.block_stride),
            self.key("offset") + _int(tensor.offset),
            self.key("host_resident") + ("true" if tensor.host_resident else "false"),
        ]
        return self.whole("{}", fields, 4)

    def tensors(self, tensors: Sequence[KVCacheTensor]) -> list[str]:
        """A worker's tensors in compact text, as tokens (a worker of a large model has a tensor
        per few layers): the text around each one's layer names written once per distinct size,
        offset and stride, the rest put together without a Python call per tensor."""
        figures = list(
            zip(
                map(attrgetter("size"), tensors),
                map(attrgetter("offset"), tensors),
                map(attrgetter("block_stride"), tensors),
                strict=True,
            )
        )
        around = {
            key: (
                '{"size":' + _int(key[0]) + ',"shared_by":[',
                '],"offset":' + _int(key[1]) + ',"block_stride":' + _int(key[2]) + "}",
            )
            for key in dict.fromkeys(figures)
        }
        layers = list(map(attrgetter("shared_by"), tensors))
        if min(map(len, layers), default=0) > 0 and _plain(chain.from_iterable(layers)):
            # every name is its own text between quotes: the quotes go around the run of names
            around = {key: (head + '"', '"' + tail) for key, (head, tail) in around.items()}
            names = map('","'.join, layers)
        else:
            names = map(",".join, map(map, repeat(_string), layers))
        parts = list(map(around.__getitem__, figures))
        tokens = chain.from_iterable(
            zip(repeat(","), map(itemgetter(0), parts), names, map(itemgetter(1), parts))
        )
        return list(islice(tokens, 1, None))  # no comma before the first

    def tensor(self, tensor: KVCacheTensor) -> str:
        """One tensor of a worker in indented text (depth 4)."""
        fields = [
            self.key("size") + _int(tensor.size),
            self.key("shared_by") + self.names(tensor.shared_by, 5),
            self.key("offset") + _int(tensor.offset),
            self.key("block_stride") + _int(tensor.block_stride),
        ]
        return self.whole("{}", fields, 4)

    def per_layer(
        self, specs: Mapping[str, KVCacheSpec], text: Callable[[KVCacheSpec], str]
    ) -> Iterator[tuple[str, str, str]]:
        """``(separator, layer name, colon + text(spec))`` for each layer of ``specs``, ``text``
        asked once per spec object (layers share a few) and the rest done without a Python call
        per layer. When no name needs escaping (:func:`_plain`), each is written as it is, the
        separator ending and the text starting with its quotes."""
        if self.plain_keys[0] is not specs:  # the sections of one mapping share the answer
            self.plain_keys = (specs, _plain(specs))
        quote = '"' if self.plain_keys[1] else ""
        values = list(specs.values())
        distinct = dict(zip(map(id, values), values, strict=True))
        texts = {key: quote + self.colon + text(spec) for key, spec in distinct.items()}
        keys = iter(specs) if quote else map(_string, specs)
        return zip(repeat(self.separator(2) + quote), keys, map(texts.__getitem__, map(id, values)))

    def decisions(self, run: Run) -> Iterator[tuple[str, str, str]]:
        """The entries of ``decisions`` (depth 2) for one run of decisions in columns, each as
        its head (with the separator), its layer name and its tail; each body of the run is
        encoded once (:meth:`parts`), the rest done without a Python call per decision."""
        layers, kinds, bodies, named = run
        names: Iterable[str]
        quote = ""  # or the quote that ends each head and starts each tail
        if not named:
            names = ("null" if n is None else _string(n) for n in layers)
        elif _plain(cast("Sequence[str]", layers)):  # each name written as it is
            names, quote = cast("Sequence[str]", layers), '"'
        else:
            names = map(_string, cast("Sequence[str]", layers))
        parts = [("", "") if body is None else self.parts(body) for body in bodies]
        sep = self.separator(2)
        heads, tails = [sep + p[0] + quote for p in parts], [quote + p[1] for p in parts]
        return zip(map(heads.__getitem__, kinds), names, map(tails.__getitem__, kinds), strict=False)

    def parts(self, body: Body) -> tuple[str, str]:
        """The text of a decision with ``body``, before and after its layer name; looked up by
        the identity of the body's mappings, then by their content (summaries made afresh for
        each layer). The plan holds every body while its text is written, so an identity is not
        reused meanwhile."""
        stage, rule, outcome, reason, before, after, padding, details = body
        fast = (stage, rule, outcome, reason, id(before), id(after), padding, id(details))
        parts = self.bodies.get(fast)
        if parts is None:
            if len(self.bodies) >= _DECISION_MEMO:
                self.bodies.clear()
                self.contents.clear()
            parts = self.bodies[fast] = self.body(with_body(None, body))
        return parts

    def body(self, d: Decision) -> tuple[str, str]:
        """The text of ``d`` before and after its layer name."""
        content = _content(d)
        parts = None if content is None else self.contents.get(content)
        if parts is None:
            form = d.to_dict()
            form["layer"] = None
            # the first '"layer": null' is the record's own: only stage, rule and outcome come
            # before it, and quotes inside their strings are escaped
            head, _, tail = self.value(form, 2).partition(self.key("layer") + "null")
            parts = (head + self.key("layer"), tail)
            if content is not None:
                self.contents[content] = parts
        return parts


def _plain(names: Iterable[str]) -> bool:
    """Whether each of ``names`` is its own JSON text between quotes (printable ASCII without a
    quote or backslash: nothing to escape); one pass over all of them, no call per name."""
    text = "".join(names)
    return text.isascii() and not text.encode("ascii").translate(None, _PLAIN)


#: the bytes JSON writes as they are: printable ASCII but the quote and the backslash
_PLAIN = bytes(c for c in range(0x20, 0x7F) if chr(c) not in '"\\')


def _content(d: Decision) -> tuple[Any, ...] | None:
    """``d`` without its layer as a key (value types included, so ``1`` and ``True`` differ);
    ``None`` when it has ``details`` or a summary value cannot be hashed."""
    if d.details is not None:
        return None
    summaries = tuple(
        None if m is None else tuple((k, type(v), v) for k, v in m.items()) for m in (d.before, d.after)
    )
    key = (d.stage, d.rule, d.outcome, d.reason, summaries, d.padding_bytes)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _int(value: int) -> str:
    """An integer's JSON text."""
    return repr(int(value))


# --- invariants: what every plan holds, checked on documents and on plans made elsewhere -----

#: id -> plan for the plans Planner.plan returned in this process (weakly held: a plan that dies
#: leaves, so a later object at the same id is not mistaken for it)
_PLANNED: weakref.WeakValueDictionary[int, Plan] = weakref.WeakValueDictionary()


def mark_planned(plan: Plan) -> Plan:
    """Record ``plan`` as made by ``Planner.plan`` in this process (checked there already)."""
    _PLANNED[id(plan)] = plan
    return plan


def was_planned(plan: Plan) -> bool:
    """Whether ``plan`` is one :func:`mark_planned` recorded (the very object, still alive)."""
    return _PLANNED.get(id(plan)) is plan


def check_plan(plan: Plan) -> Plan:
    """``plan`` if it holds every plan invariant (:func:`plan_problem`).

    :raises ModelFileError: naming the field and the invariant it breaks.
    """
    problem = plan_problem(plan)
    if problem is not None:
        where, invariant = problem
        raise ModelFileError(f"plan field {where}: {invariant}; this is not a plan kvrules made")
    return plan


def plan_problem(plan: Plan) -> tuple[str, str] | None:
    """The first ``(field, invariant)`` that ``plan`` breaks, or ``None``."""
    return next(chain(_group_problems(plan), _worker_problems(plan), _capacity_problems(plan)), None)


def _group_problems(plan: Plan) -> Iterator[tuple[str, str]]:
    seen: set[str] = set()
    for g, group in enumerate(plan.groups):
        for name in group.layer_names:
            if name not in plan.specs:
                yield f"groups[{g}].layer_names", f"layer {name!r} has no spec in 'specs'"
            if name in seen:
                yield (
                    f"groups[{g}].layer_names",
                    f"layer {name!r} is in two groups (each layer in exactly one)",
                )
            seen.add(name)
    missing = [name for name in plan.specs if name not in seen]
    if missing:
        yield "groups", f"layer {missing[0]!r} of 'specs' is in no group (each layer in exactly one)"


def _worker_problems(plan: Plan) -> Iterator[tuple[str, str]]:
    for w, worker in enumerate(plan.workers):
        where = f"workers[{w}]"
        if worker.num_blocks != plan.num_blocks:
            yield (
                f"{where}.num_blocks",
                f"{worker.num_blocks} differs from the plan's {plan.num_blocks} blocks",
            )
        if worker.own_num_blocks and worker.own_num_blocks < plan.num_blocks:
            yield (
                f"{where}.own_num_blocks",
                (
                    f"{worker.own_num_blocks} is below the agreed {plan.num_blocks} blocks (the least of every worker's)"
                ),
            )
        pages = {name: g.spec.page_size_bytes for g in worker.groups for name in g.layer_names}
        covered: set[str] = set()
        for t, tensor in enumerate(worker.tensors):
            stray = [name for name in tensor.shared_by if name not in pages]
            if stray:
                yield f"{where}.tensors[{t}].shared_by", f"layer {stray[0]!r} is not in the worker's groups"
                continue
            covered.update(tensor.shared_by)
            # a layer's own page (a uniform-type group's page is the sum of its members' pages)
            own = [plan.specs[n].page_size_bytes if n in plan.specs else pages[n] for n in tensor.shared_by]
            per_block = tensor.block_stride or max(own, default=0)
            if tensor.size < per_block * worker.num_blocks:
                yield (
                    f"{where}.tensors[{t}].size",
                    (f"{tensor.size} bytes hold fewer than {worker.num_blocks} blocks of {per_block} bytes"),
                )
        uncovered = [name for name in pages if name not in covered]
        if uncovered and worker.tensors:
            yield f"{where}.tensors", f"layer {uncovered[0]!r} is in no tensor (tensors cover every layer)"
        if worker.available_memory and worker.allocated_bytes > worker.available_memory:
            yield (
                f"{where}.available_memory",
                (
                    f"the tensors take {worker.allocated_bytes} bytes, more than the worker's "
                    f"{worker.available_memory} (tensors fit the worker's memory)"
                ),
            )


def _capacity_problems(plan: Plan) -> Iterator[tuple[str, str]]:
    needed = sum(blocks_of(g.spec, plan.config) for g in plan.groups)
    concurrency = math.inf if needed == 0 else plan.num_blocks / needed
    if not _same_float(plan.max_concurrency, concurrency):
        yield (
            "max_concurrency",
            f"{plan.max_concurrency} differs from num_blocks / blocks per request = {concurrency}",
        )
    capacity = 0 if math.isinf(concurrency) else math.floor(concurrency * plan.max_model_len)
    if plan.capacity_tokens != capacity:
        yield (
            "capacity_tokens",
            f"{plan.capacity_tokens} differs from max_concurrency * max_model_len = {capacity}",
        )
    if plan.max_model_len != plan.config.max_model_len:
        yield (
            "max_model_len",
            f"{plan.max_model_len} differs from config.max_model_len {plan.config.max_model_len}",
        )


def _same_float(given: float, derived: float) -> bool:
    if math.isinf(derived) or math.isinf(given):
        return given == derived
    return math.isclose(given, derived, rel_tol=1e-4, abs_tol=1e-4)
