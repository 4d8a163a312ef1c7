"""``Plan.from_json`` and the published schema against the result types.

``to_json(from_json(to_json(p))) == to_json(p)`` for every built-in example under the ``vllm`` and
``default`` sets, the stored documents (0.2's v1 included) decode as ``from_dict`` reads them, JSON
that is not strict JSON is refused, and every record type's ``to_dict()`` keys are in
``kvrules.plan/v2`` with values of the schema's types, every required key produced.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import jsonschema
import msgspec
import pytest

from kvrules import CapacityError, EngineConfig, ModelFileError, Plan, Planner
from kvrules.decisions import Decision
from kvrules.examples import example_names, load_example
from kvrules.plan import (
    BackingTensor,
    KVCacheGroup,
    KVCacheTensor,
    WasteReport,
    WorkerPlan,
    WorkerWaste,
    plan_json_schema,
)

GiB = 1 << 30
PLANS = Path(__file__).parent.parent / "data" / "plans"
V2 = plan_json_schema(version=2)
VALIDATOR = jsonschema.Draft202012Validator(V2)
SETS = ("vllm", "default")


def planned(name: str, strategies: str) -> Plan | None:
    """The example planned with ``strategies`` (``None`` where the set refuses its memory)."""
    model = load_example(name)
    try:
        return Planner(strategies).plan(
            model.worker_specs(), model.available_memory or [GiB], EngineConfig(**model.engine)
        )
    except CapacityError:
        return None


@pytest.mark.parametrize("strategies", SETS)
@pytest.mark.parametrize("name", example_names())
def test_to_json_of_from_json_is_the_same_text(name: str, strategies: str) -> None:
    plan = planned(name, strategies)
    if plan is None:
        pytest.skip(f"{strategies} refuses {name}'s memory")
    text = plan.to_json()
    again = Plan.from_json(text)
    assert again.to_json() == text
    assert Plan.from_json(text.encode("utf-8")).to_json() == text
    assert again.groups == plan.groups and again.workers == plan.workers and again.decisions == plan.decisions


@pytest.mark.parametrize("path", sorted(PLANS.glob("*.json")), ids=lambda p: p.name)
def test_stored_documents_decode_to_equal_plans(path: Path) -> None:
    """0.2's documents (v1) decode; re-encoded (as v2) they decode to the same plan again."""
    text = path.read_text(encoding="utf-8")
    plan = Plan.from_json(text)
    assert plan == Plan.from_dict(json.loads(text))
    again = Plan.from_json(plan.to_json())
    assert again == plan and again.to_json() == plan.to_json()


@pytest.fixture(scope="module")
def text() -> str:
    plan = planned("swa30-full20", "default")
    assert plan is not None
    return plan.to_json()


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_json_constants_are_refused(text: str, constant: str) -> None:
    document = json.loads(text)
    document["waste"]["efficiency"] = "CONSTANT"
    bad = json.dumps(document).replace('"CONSTANT"', constant)
    with pytest.raises(ModelFileError, match=rf"{constant} is not allowed: JSON numbers are finite"):
        Plan.from_json(bad)


def test_a_repeated_key_is_refused(text: str) -> None:
    bad = text.replace('{"schema":', '{"num_blocks":0,"schema":', 1)
    with pytest.raises(ModelFileError, match=r"key 'num_blocks' appears twice"):
        Plan.from_json(bad)


@pytest.mark.parametrize(
    "bad",
    ['{"schema":', b"\xff\xfe\x00", "[1, 2]", "1" * 5000, "[" * 100_000 + "]" * 100_000, 5, None],
    ids=["truncated", "not-unicode", "array", "too-many-digits", "too-deep", "an-int", "none"],
)
def test_text_that_is_not_a_plan_object_is_a_model_file_error(bad: object) -> None:
    with pytest.raises(ModelFileError, match=r"plan"):
        Plan.from_json(bad)  # type: ignore[arg-type]


# -- the published schema against the result types ---------------------------------------------
#: each record type and the schema definition its to_dict() is (``None``: the document's root)
DEFS: dict[type, str | None] = {
    Plan: None,
    KVCacheGroup: "group",
    KVCacheTensor: "tensor",
    BackingTensor: "backing_tensor",
    WorkerPlan: "worker",
    WorkerWaste: "worker_waste",
    WasteReport: "waste",
    Decision: "decision",
}


def definition(record: type) -> dict[str, Any]:
    name = DEFS[record]
    return V2 if name is None else V2["$defs"][name]  # type: ignore[no-any-return]


def records(plan: Plan) -> Iterator[tuple[Any, dict[str, Any]]]:
    """Every record of ``plan`` (the plan first) with its form in ``plan.to_dict()``."""
    document = plan.to_dict()
    yield plan, document
    yield from zip(plan.groups, document["groups"], strict=True)
    yield from zip(plan.decisions, document["decisions"], strict=True)
    for worker, form in zip(plan.workers, document["workers"], strict=True):
        yield worker, form
        yield from zip(worker.tensors, form["tensors"], strict=True)
        yield from zip(worker.backing, form.get("backing", []), strict=True)
    if plan.waste is not None:
        yield plan.waste, document["waste"]
        yield from zip(plan.waste.workers, document["waste"]["workers"], strict=True)


def schema_plans() -> list[Plan]:
    """Plans that write every key: hybrid, draft, multi-worker examples, with and without backing."""
    names = ("swa30-full20", "gpt-oss-20b-draft8")
    plans = [planned(name, strategies) for name in names for strategies in ("default", "vllm-0.33")]
    made = [p for p in plans if p is not None]
    return [*made, msgspec.structs.replace(made[0], extra={"connector": "test"})]


def test_every_record_key_is_in_the_schema_with_its_type() -> None:
    """Each record's form keys are its definition's properties (the document valid against the
    schema, so each value of its property's type), every required property produced; across the examples every property of
    every definition is produced by some record (the schema describes nothing the types lack)."""
    produced: dict[type, set[str]] = {record: set() for record in DEFS}
    for plan in schema_plans():
        VALIDATOR.validate(plan.to_dict())  # every value of the schema's type
        for record, form in records(plan):
            kind = type(record)
            schema = definition(kind)
            if hasattr(record, "to_dict"):
                assert record.to_dict() == form
            where = f"{kind.__name__}'s form"
            assert set(form) <= set(schema["properties"]), f"{where}: keys the schema lacks"
            assert set(schema["required"]) <= set(form), f"{where}: required keys it does not write"
            for key, value in form.items():
                jsonschema.validate(value, {"$defs": V2["$defs"], **schema["properties"][key]})
            produced[kind] |= set(form)
    for kind, keys in produced.items():
        assert keys == set(definition(kind)["properties"]), kind.__name__


def test_every_record_field_is_written() -> None:
    """A field a record type holds is in its document form (nothing silently left out)."""
    for kind in DEFS:
        properties = set(definition(kind)["properties"])
        fields = {f.name for f in msgspec.structs.fields(kind)}
        assert fields, kind.__name__
        assert fields <= properties, (
            f"{kind.__name__}: fields {sorted(fields - properties)} not in the schema"
        )


def test_decision_records_with_odd_figures_write_their_to_dict() -> None:
    """A rule's figures holding ``"details": null`` at the end of an object, or a summary that is
    a read-only mapping, reach the JSON as ``Decision.to_dict`` writes them."""
    plan = planned("swa30-full20", "default")
    assert plan is not None
    summary = MappingProxyType(dict(plan.decisions[-1].before or {"spec_type": "x"}))
    odd = (
        Decision("group", "r", "applied", None, "x", details={"alt": 1, "details": None}),
        Decision("group", "r", "applied", "l", "x", summary, None, 0, {"details": None}),
    )
    made = msgspec.structs.replace(plan, decisions=(*plan.decisions, *odd))
    document = json.loads(made.to_json())
    assert document == made.to_dict() and document["decisions"][-2]["details"] == {"alt": 1, "details": None}
    assert "details" not in document["decisions"][0]
