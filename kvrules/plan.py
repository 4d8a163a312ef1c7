"""The plan: what an engine needs to build its KV cache, as a frozen msgspec record.

The JSON form is schema ``kvrules.plan/v2`` (docs/plan-schema.md; the JSON Schema ships as
``kvrules/schemas/plan-v2.json``). :meth:`Plan.to_dict` and :meth:`Plan.to_json` write v2;
:meth:`Plan.from_dict` and :meth:`Plan.from_json` read v1 and v2 (:mod:`kvrules.plan_document`)
and check every plan invariant (:func:`check_plan`). The records a plan is made of live in
:mod:`kvrules.plan_records` and are importable from here.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterator, Mapping
from functools import cache
from itertools import chain
from operator import itemgetter, methodcaller
from typing import Any

import msgspec
from msgspec.structs import astuple

from kvrules.config import EngineConfig
from kvrules.decisions import Decision
from kvrules.errors import ModelFileError
from kvrules.plan_checks import groups_problem, placement_problem
from kvrules.plan_document import decode_json, plan_fields
from kvrules.plan_records import (
    LAYOUT_AXES,
    PRESET_ALIASES,
    SCHEMA,
    SCHEMAS,
    BackingTensor,
    KVCacheGroup,
    KVCacheTensor,
    UnifyResult,
    WasteReport,
    WorkerPlan,
    WorkerWaste,
    backing_tensors,
    canonical_set_name,
    finite,
    interleaved,
    layout_strides,
    page_sizes,
    plan_json_schema,
    project_group,
    spec_runs,
    tensors_of_backing,
)
from kvrules.specs.asked import blocks_of
from kvrules.specs.base import KVCacheSpec, distinct_specs
from kvrules.values import as_int

__all__ = [
    "LAYOUT_AXES",
    "PRESET_ALIASES",
    "SCHEMA",
    "SCHEMAS",
    "BackingTensor",
    "KVCacheGroup",
    "KVCacheTensor",
    "Plan",
    "UnifyResult",
    "WasteReport",
    "WorkerPlan",
    "WorkerWaste",
    "backing_tensors",
    "canonical_set_name",
    "check_plan",
    "interleaved",
    "layout_strides",
    "mark_planned",
    "page_sizes",
    "plan_json_schema",
    "plan_problem",
    "project_group",
    "spec_runs",
    "tensors_of_backing",
    "was_planned",
]


class Plan(msgspec.Struct, frozen=True, kw_only=True, weakref=True):
    """A complete KV-cache plan (architecture §3). Build one with :meth:`kvrules.Planner.plan`."""

    groups: tuple[KVCacheGroup, ...]
    workers: tuple[WorkerPlan, ...]
    num_blocks: int
    specs: dict[str, KVCacheSpec]
    decisions: tuple[Decision, ...]
    max_concurrency: float
    capacity_tokens: int
    max_model_len: int
    config: EngineConfig
    strategy_set: str = "default"
    rules: tuple[str, ...] = ()
    route: str = ""
    waste: WasteReport | None = None
    extra: dict[str, Any] = {}

    def to_dict(self) -> dict[str, Any]:
        """The plan in schema ``kvrules.plan/v2`` (plain JSON values).

        Layers with equal specs share one spec form and one size record, and a decision's
        summaries are the decision's own: treat the result as read-only (``copy.deepcopy`` it
        before changing anything).
        """
        return self._document([d.to_dict() for d in self.decisions])

    def _document(self, decisions: Any, *, records: bool = False) -> dict[str, Any]:
        """:meth:`to_dict` with ``decisions`` as its decision records (``records``: tensors as
        records, for msgspec to encode); each distinct spec object's form and sizes made once
        (then once per equal spec) and shared by its layers."""
        forms, sizes = cache(methodcaller("to_dict")), cache(page_sizes)  # once per equal spec (specs hash)
        made = {id(s): (forms(s), sizes(s)) for s in distinct_specs(self.specs.values())}
        layers = list(map(made.__getitem__, map(id, self.specs.values())))
        return {
            "schema": SCHEMA,
            "strategy_set": self.strategy_set,
            "rules": list(self.rules),
            "route": self.route,
            "max_model_len": self.max_model_len,
            "num_blocks": self.num_blocks,
            "max_concurrency": finite(self.max_concurrency),
            "capacity_tokens": self.capacity_tokens,
            "config": self.config.to_dict(),
            "specs": dict(zip(self.specs, map(itemgetter(0), layers), strict=True)),
            "spec_sizes": dict(zip(self.specs, map(itemgetter(1), layers), strict=True)),
            "groups": [
                {
                    "layer_names": list(g.layer_names),
                    "spec": forms(g.spec),
                    "is_eagle_group": g.is_eagle_group,
                    **sizes(g.spec),
                }
                for g in self.groups
            ],
            "workers": [w.to_dict(records=records) for w in self.workers],
            "waste": self.waste.to_dict() if self.waste is not None else None,
            "decisions": decisions,
            **({"extra": dict(self.extra)} if self.extra else {}),
        }

    def to_json(self, *, indent: int | None = None) -> str:
        """:meth:`to_dict` as JSON text (UTF-8 as it is, no ``\\u`` escapes): compact by default
        (no spaces or newlines), or indented by ``indent`` spaces (0: one line with a space after
        each separator), as :func:`msgspec.json.format` indents.

        :raises ModelFileError: ``indent`` is not an integer from 0 to 16.
        """
        try:  # the records as they are; a mapping that is not a dict (a rule's figures): plain dicts
            text = msgspec.json.encode(self._document(_decision_records(self.decisions), records=True))
        except TypeError:
            text = msgspec.json.encode(self._document([d.to_dict() for d in self.decisions], records=True))
        if indent is not None:
            indent = as_int(indent, "to_json(indent=...)", minimum=0, maximum=16, error=ModelFileError)
            text = msgspec.json.format(text, indent=indent)
        return text.decode("utf-8")

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, spec_types: Mapping[str, type[KVCacheSpec]] | None = None
    ) -> Plan:
        """Rebuild a plan from a ``kvrules.plan/v1`` or ``kvrules.plan/v2`` document.

        Every field is decoded with its type, derived figures in the document (v2's page sizes,
        each worker's ``allocated_bytes``, the waste totals and efficiencies) are recomputed and
        must match, and the plan must hold every plan invariant (:func:`plan_problem`): a plan
        document is input from outside, like a model file.

        :raises ModelFileError: not a plan document of a known version, a missing key, a value of
            the wrong type (naming the field, the value and the type), a derived figure that
            differs (naming the field and both values), or a broken invariant (naming the field
            and the invariant).
        :raises SpecError: a spec that does not build (naming the layer).
        """
        return check_plan(cls(**plan_fields(data, spec_types)))

    @classmethod
    def from_json(
        cls, text: str | bytes, *, spec_types: Mapping[str, type[KVCacheSpec]] | None = None
    ) -> Plan:
        """Rebuild a plan from a plan document's JSON text (:meth:`to_json`'s output, or bytes
        in UTF-8, -16 or -32), refusing what JSON does not allow (``NaN``, ``Infinity``,
        ``-Infinity``) and an object naming a key twice, then read and checked as
        :meth:`from_dict` does.

        :raises ModelFileError: text that is not JSON, holds one of those constants or a
            repeated key, or anything :meth:`from_dict` refuses.
        :raises SpecError: a spec that does not build (naming the layer).
        """
        return cls.from_dict(decode_json(text), spec_types=spec_types)


class _DecisionJSON(msgspec.Struct, omit_defaults=True, gc=False):
    """A decision as a plan document writes it (:meth:`Decision.to_dict`): every key, but
    ``details`` only when it is set (the one field with a default here)."""

    stage: str
    rule: str
    outcome: str
    layer: str | None
    reason: str
    before: Any
    after: Any
    padding_bytes: int
    details: Any = None


def _decision_records(decisions: tuple[Decision, ...]) -> list[_DecisionJSON]:
    """The decisions as msgspec encodes them into :meth:`Decision.to_dict`'s JSON."""
    return [_DecisionJSON(*astuple(d)) for d in decisions]


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
    problem = groups_problem(plan.groups, plan.specs)
    if problem is not None:
        yield "groups", f"the plan {problem} (each layer of 'specs' in exactly one group)"


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
        problem = (
            placement_problem(worker.tensors, worker.groups, worker.num_blocks) if worker.tensors else None
        )
        if problem is not None:
            yield f"{where}.tensors", f"the plan {problem} (tensors cover each of the worker's layers once)"
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
