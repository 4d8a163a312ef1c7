"""The records a plan is made of (groups, tensors, workers, waste), frozen msgspec structs, and
the placement arithmetic that builds tensors; :class:`~kvrules.plan.Plan` holds them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from functools import partial
from importlib import resources
from itertools import chain, zip_longest
from operator import is_not
from typing import Annotated, Any

import msgspec

from kvrules.decisions import Decision, Name
from kvrules.errors import ConfigError, ModelFileError
from kvrules.specs.base import KVCacheSpec
from kvrules.values import MAX_BLOCKS, MAX_BYTES, shown

SCHEMA = "kvrules.plan/v2"
#: the schema id of every version :meth:`Plan.from_dict` reads, by version number
SCHEMAS = {1: "kvrules.plan/v1", 2: SCHEMA}

#: a byte count or offset of a document (``0 .. MAX_BYTES``)
Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_BYTES)]
#: a block count of a document
Blocks = Annotated[int, msgspec.Meta(ge=0, le=MAX_BLOCKS)]
#: a count with no upper bound (tokens, slots)
Total = Annotated[int, msgspec.Meta(ge=0)]


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


class KVCacheGroup(msgspec.Struct, frozen=True, gc=False):
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


class KVCacheTensor(msgspec.Struct, frozen=True, gc=False):
    """One raw byte buffer of a worker.

    ``shared_by`` lists the layers whose pages live in it. With ``block_stride > 0`` (packed
    layout) every tensor of the worker aliases ONE backing allocation of ``size`` bytes, and the
    page of a layer in ``shared_by`` for block ``b`` starts at ``offset + b * block_stride``.
    """

    size: Count
    shared_by: tuple[Name, ...]
    offset: Count = 0
    block_stride: Count = 0

    def to_dict(self) -> dict[str, Any]:
        """Plan-schema form."""
        return msgspec.structs.asdict(self) | {"shared_by": list(self.shared_by)}


class BackingTensor(msgspec.Struct, frozen=True, gc=False):
    """One tensor over a worker's single backing allocation, in vLLM 0.33's form
    (``KVCacheTensor(size, layers, layer_stride, block_stride, offset, host_resident)``).

    The page of ``layers[l]`` for block ``b`` starts at ``offset + l * layer_stride + b *
    block_stride`` inside the backing allocation of ``size`` bytes (every backing tensor of a
    worker has the same ``size``). Tensors of different groups overlap: the groups overlay the
    backing from byte 0, which is sound because a block belongs to one group at a time.
    """

    size: Count
    layers: tuple[Name, ...]
    layer_stride: Count
    block_stride: Count
    offset: Count = 0
    host_resident: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plan-schema form."""
        return msgspec.structs.asdict(self) | {"layers": list(self.layers)}


def allocated_bytes(tensors: Sequence[KVCacheTensor]) -> int:
    """Bytes of ``tensors``, the one backing allocation of packed tensors (``block_stride > 0``)
    counted once."""
    packed = max((t.size for t in tensors if t.block_stride > 0), default=0)
    return packed + sum(t.size for t in tensors if t.block_stride == 0)


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


class WorkerWaste(msgspec.Struct, frozen=True, gc=False):
    """One worker's bytes for one request of ``max_model_len`` (see :mod:`kvrules.pipeline.waste`)."""

    block_bytes: Count
    allocated_bytes: Count
    real_bytes: Count
    page_padding_bytes: Count
    slot_padding_bytes: Count
    #: the part of ``real_bytes`` that is quantisation scales (0 in documents written before 0.3)
    scale_bytes: Count = 0

    @property
    def efficiency(self) -> float:
        """Real state over allocated: ``(real - scales) / allocated`` (1.0 when nothing is
        allocated). Quantisation scales are not state (``KVCacheSpec.real_page_size_bytes``)."""
        return (
            1.0 if self.allocated_bytes == 0 else (self.real_bytes - self.scale_bytes) / self.allocated_bytes
        )

    def to_dict(self) -> dict[str, Any]:
        """Plan-schema form."""
        return {**msgspec.structs.asdict(self), "efficiency": self.efficiency}


class WasteReport(msgspec.Struct, frozen=True):
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
        """Bytes one request's pages need before padding (state and quantisation scales), all workers."""
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
    def scale_bytes(self) -> int:
        """The part of :attr:`real_bytes` that is quantisation scales, all workers."""
        return sum(w.scale_bytes for w in self.workers)

    @property
    def efficiency(self) -> float:
        """Real state over allocated, all workers: ``(real - scales) / allocated``."""
        if self.allocated_bytes == 0:
            return 1.0
        return (self.real_bytes - self.scale_bytes) / self.allocated_bytes

    def to_dict(self) -> dict[str, Any]:
        """Plan-schema form: the totals over workers (:data:`WASTE_TOTALS`), then the fields."""
        return {total: getattr(self, total) for total in WASTE_TOTALS} | {
            "padding_slots": self.padding_slots,
            "ideal_max_concurrency": finite(self.ideal_max_concurrency),
            "ideal_capacity_tokens": self.ideal_capacity_tokens,
            "workers": [w.to_dict() for w in self.workers],
        }


#: the figures of a :class:`WasteReport` summed (or, efficiency, derived) over its workers
WASTE_TOTALS = (
    "allocated_bytes",
    "real_bytes",
    "page_padding_bytes",
    "slot_padding_bytes",
    "scale_bytes",
    "efficiency",
)


class UnifyResult(msgspec.Struct, frozen=True):
    """Result of :meth:`Planner.unify`: the unified specs (the given mapping itself when its pages
    already agree) and the decisions taken."""

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


class WorkerPlan(msgspec.Struct, frozen=True):
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
        """Bytes of all buffers (:func:`allocated_bytes`)."""
        return allocated_bytes(self.tensors)

    def layer_names(self) -> tuple[str, ...]:
        """This worker's layers, group by group."""
        return tuple(n for g in self.groups for n in g.layer_names)

    def to_dict(self, *, records: bool = False) -> dict[str, Any]:
        """Plan-schema form (a group as its layer names, in the order of the plan's groups);
        ``records``: the tensors as the records themselves (msgspec encodes them to their form)."""
        tensors: Any = self.tensors if records else [t.to_dict() for t in self.tensors]
        backing: Any = self.backing if records else [t.to_dict() for t in self.backing]
        return {
            "num_blocks": self.num_blocks,
            "own_num_blocks": self.own_num_blocks,
            "layout": self.layout,
            "available_memory": self.available_memory,
            "allocated_bytes": self.allocated_bytes,
            "groups": [list(g.layer_names) for g in self.groups],
            "tensors": tensors,
        } | ({"backing": backing} if self.backing else {})


def finite(value: float) -> float | None:
    return None if math.isinf(value) else value
