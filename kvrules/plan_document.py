"""Reading plan documents (``kvrules.plan/v1`` and ``/v2``): JSON text, then typed records, then
a :class:`~kvrules.plan.Plan` whose derived figures agree with the document.

The invariants every plan holds are checked by :meth:`Plan.from_dict` (:func:`check_plan`);
this module only reads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Annotated, Any

import msgspec

from kvrules.config import EngineConfig
from kvrules.decisions import Decision, Name
from kvrules.errors import ModelFileError
from kvrules.jsonfile import loads
from kvrules.plan_records import (
    SCHEMA,
    SCHEMAS,
    WASTE_TOTALS,
    BackingTensor,
    Blocks,
    Count,
    KVCacheGroup,
    KVCacheTensor,
    Total,
    WasteReport,
    WorkerPlan,
    WorkerWaste,
    canonical_set_name,
    page_sizes,
    project_group,
)
from kvrules.specs.base import KVCacheSpec
from kvrules.specs.io import spec_from_dict
from kvrules.typed import typed
from kvrules.values import MAX_BYTES, MAX_TOKENS, shown

#: requests a plan holds: a number, or ``null`` for unbounded
Concurrency = Annotated[float, msgspec.Meta(ge=0, le=MAX_BYTES)] | None
_SIZE_KEYS = ("page_size_bytes", "real_page_size_bytes", "padding_bytes")
_MISSING = object()


class _Group(msgspec.Struct, frozen=True):
    layer_names: tuple[Name, ...]
    spec: dict[str, Any]
    is_eagle_group: bool = False


class _Worker(msgspec.Struct, frozen=True, kw_only=True):
    num_blocks: Blocks
    groups: tuple[tuple[Name, ...], ...]
    tensors: tuple[KVCacheTensor, ...]
    layout: str = ""
    available_memory: Count = 0
    own_num_blocks: Blocks = 0
    backing: tuple[BackingTensor, ...] = ()


class _Waste(msgspec.Struct, frozen=True, kw_only=True):
    workers: tuple[WorkerWaste, ...]
    padding_slots: Total
    ideal_max_concurrency: Concurrency
    ideal_capacity_tokens: Total


class _Document(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of a plan document a plan is built from (derived figures are checked apart)."""

    schema: str
    groups: tuple[_Group, ...]
    workers: tuple[_Worker, ...]
    num_blocks: Blocks
    specs: dict[Name, dict[str, Any]]
    decisions: tuple[Decision, ...] = ()
    max_concurrency: Concurrency
    capacity_tokens: Total
    max_model_len: Annotated[int, msgspec.Meta(ge=1, le=MAX_TOKENS)]
    config: dict[str, Any]
    strategy_set: str = ""
    rules: tuple[Name, ...] = ()
    route: str = ""
    waste: _Waste | None = None
    extra: dict[str, Any] = {}


def decode_json(text: str | bytes) -> dict[str, Any]:
    """The JSON object of a plan document's text (``bytes`` in UTF-8, -16 or -32), read as model
    files are (:func:`kvrules.jsonfile.loads`), refusing ``NaN`` / ``Infinity`` too.

    :raises ModelFileError: not text, not JSON, a repeated key, too deep, or those constants.
    """
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode(json.detect_encoding(text))
        except UnicodeDecodeError as exc:
            raise ModelFileError(f"plan document: not text in UTF-8, -16 or -32 ({exc})") from None
    if not isinstance(text, str):
        raise ModelFileError(
            f"plan document: {shown(text)} is not allowed: the JSON text (str) or its bytes; "
            "write it with Plan.to_json()"
        )
    return typed(loads(text, "plan document", "json", finite=True), dict[str, Any], "plan")


def plan_fields(
    data: Mapping[str, Any], spec_types: Mapping[str, type[KVCacheSpec]] | None
) -> dict[str, Any]:
    """The fields of the plan a v1 or v2 document describes, its derived figures checked (not the
    plan's invariants: :func:`~kvrules.plan.check_plan`).

    :raises ModelFileError: see :meth:`Plan.from_dict`.
    """
    data = typed(data, dict[str, Any], "plan")
    version = _version(data)
    doc = typed(data, _Document, "plan")
    groups = tuple(
        KVCacheGroup(g.layer_names, spec_from_dict(g.spec, spec_types=spec_types), g.is_eagle_group)
        for g in doc.groups
    )
    waste = doc.waste
    plan = dict(
        groups=groups,
        workers=tuple(_worker(w, f"workers[{i}]", groups) for i, w in enumerate(doc.workers)),
        num_blocks=doc.num_blocks,
        specs=_specs(doc.specs, spec_types),
        decisions=doc.decisions,
        max_concurrency=_concurrency(doc.max_concurrency),
        capacity_tokens=doc.capacity_tokens,
        max_model_len=doc.max_model_len,
        config=EngineConfig.from_dict(doc.config),
        strategy_set=canonical_set_name(doc.strategy_set),
        rules=doc.rules,
        route=doc.route,
        waste=None
        if waste is None
        else WasteReport(
            waste.workers,
            waste.padding_slots,
            _concurrency(waste.ideal_max_concurrency),
            waste.ideal_capacity_tokens,
        ),
        extra=doc.extra,
    )
    for where, given, derived in _derived_figures(data, plan, version):
        if given is _MISSING:
            raise ModelFileError(f"{where} is missing: schema {SCHEMAS[version]!r} requires it")
        if not _agrees(given, derived):
            raise ModelFileError(
                f"{where} = {shown(given)} does not match {derived!r}, the value the plan's specs, "
                "tensors and waste figures give; derived figures are recomputed on read and must agree"
            )
    return plan


def _agrees(given: Any, derived: int | float) -> bool:
    """``given`` is the number ``derived`` (an integer figure must be written as an integer)."""
    kinds = int if isinstance(derived, int) else (int, float)
    return not isinstance(given, bool) and isinstance(given, kinds) and bool(given == derived)


def _concurrency(value: float | None) -> float:
    return math.inf if value is None else float(value)


def _version(data: Mapping[str, Any]) -> int:
    """The document's schema version; a v1 document must not hold v2's keys."""
    schema = data.get("schema")
    version = next((v for v, name in SCHEMAS.items() if name == schema), None)
    if version is None:
        known = ", ".join(repr(name) for name in SCHEMAS.values())
        raise ModelFileError(f"not a kvrules plan: schema = {shown(schema)} is not allowed: one of {known}")
    found = _v2_key_in(data) if version == 1 else ""
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
    wanted = {"groups": _SIZE_KEYS, "decisions": ("details",), "workers": ("backing",)}
    for section, keys in wanted.items():
        items = data.get(section)
        for i, item in enumerate(items if isinstance(items, list | tuple) else ()):
            key = next((k for k in keys if isinstance(item, Mapping) and k in item), None)
            if key is not None:
                return f"{section}[{i}].{key}"
    return ""


def _specs(
    forms: dict[str, dict[str, Any]], spec_types: Mapping[str, type[KVCacheSpec]] | None
) -> dict[str, KVCacheSpec]:
    """Every layer's spec; layers whose spec forms are equal share one spec object (built once)."""
    built: dict[str, KVCacheSpec] = {}
    specs = {}
    for name, form in forms.items():
        try:  # equal texts: equal specs (``1``, ``1.0`` and ``true`` differ)
            key: str | None = json.dumps(form, allow_nan=False)
        except (TypeError, ValueError):  # spec_from_dict says what is wrong with it
            key = None
        spec = built.get(key) if key is not None else None
        if spec is None:
            spec = spec_from_dict(form, layer=name, spec_types=spec_types)
            if key is not None:
                built[key] = spec
        specs[name] = spec
    return specs


def _worker(doc: _Worker, where: str, groups: tuple[KVCacheGroup, ...]) -> WorkerPlan:
    if len(doc.groups) != len(groups):
        raise ModelFileError(
            f"{where}.groups has {len(doc.groups)} entries for {len(groups)} groups: one per group, in "
            "the order of 'groups' (empty for a group with no layer on this worker)"
        )
    own = []
    for j, (group, names) in enumerate(zip(groups, doc.groups, strict=True)):
        stray = set(names).difference(group.layer_names)
        if stray:
            raise ModelFileError(
                f"{where}.groups[{j}] names layer {sorted(stray)[0]!r}, which the group does not hold: a "
                "worker's groups are the global groups restricted to its layers"
            )
        own.append(project_group(group, set(names)))
    return WorkerPlan(**msgspec.structs.asdict(doc) | {"groups": tuple(own)})


def _derived_figures(
    data: Mapping[str, Any], plan: dict[str, Any], version: int
) -> Iterator[tuple[str, Any, Any]]:
    """(where, the document's value, the derived value) for every derived figure."""
    for i, (doc, worker) in enumerate(zip(data["workers"], plan["workers"], strict=True)):
        if "allocated_bytes" in doc or version >= 2:
            yield (
                f"workers[{i}].allocated_bytes",
                doc.get("allocated_bytes", _MISSING),
                worker.allocated_bytes,
            )
    if plan["waste"] is not None:
        doc, derived = data["waste"], plan["waste"].to_dict()
        for key in WASTE_TOTALS:
            if key in doc:
                yield f"waste.{key}", doc[key], derived[key]
        for i, (x, waste) in enumerate(zip(doc["workers"], plan["waste"].workers, strict=True)):
            if "efficiency" in x:
                yield f"waste.workers[{i}].efficiency", x["efficiency"], waste.efficiency
    if version >= 2:
        for i, (doc, group) in enumerate(zip(data["groups"], plan["groups"], strict=True)):
            for key, size in page_sizes(group.spec).items():
                yield f"groups[{i}].{key}", doc.get(key, _MISSING), size
        if "spec_sizes" not in data:
            raise ModelFileError("plan: the key 'spec_sizes' is missing")
        yield from _spec_size_figures(
            typed(data["spec_sizes"], dict[str, dict[str, Any]], "spec_sizes"), plan["specs"]
        )


def _spec_size_figures(
    doc: dict[str, dict[str, Any]], specs: Mapping[str, KVCacheSpec]
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
    sizes = cache(page_sizes)
    for name, spec in specs.items():
        record, derived = doc[name], sizes(spec)
        if record == derived and all(type(v) is int for v in record.values()):
            continue  # the common case, checked at once
        for key, size in derived.items():
            yield f"spec_sizes[{name!r}].{key}", record.get(key, _MISSING), size
