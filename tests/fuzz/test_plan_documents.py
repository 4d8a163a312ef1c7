"""Corrupt-document campaign: plan documents are a trust boundary (issue 24).

Every plan document below is written by kvrules, then corrupted: structurally (a value of the
wrong type, a huge number, NaN, a missing key, an unknown schema id) and semantically (tensors
past the worker's memory, ``available_memory`` shrunk, an unknown layer in a group, a layer in two
groups, ``num_blocks`` changed, ``capacity_tokens`` / ``max_concurrency`` changed, a layer dropped
from every tensor). Each mutation names the field whose invariant it breaks: ``Plan.from_dict``
must refuse it with a ``ModelFileError`` naming that field (0 accepted, 0 other exceptions), and
``allocate()`` must refuse the same corrupt plan built by hand.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest

from kvrules import (
    EngineConfig,
    FullAttentionSpec,
    KVRulesError,
    MambaSpec,
    ModelFileError,
    Plan,
    Planner,
    SlidingWindowSpec,
    allocate,
)
from kvrules.examples import example_names, load_example

GiB = 1 << 30
Doc = dict[str, Any]
#: (name, field the refusal must name, mutation of a document in place)
Mutation = tuple[str, str, Callable[[Doc], None]]


def _hybrid() -> Plan:
    """Two workers, sliding and full attention and mamba: several groups and tensors each."""
    full = FullAttentionSpec(16, num_kv_heads=2, head_size=128, dtype="bfloat16")
    sliding = SlidingWindowSpec(16, num_kv_heads=2, head_size=128, dtype="bfloat16", sliding_window=256)
    mamba = MambaSpec(16, [[3, 768], [4, 32, 32]], ["bfloat16", "bfloat16"])
    stage0 = {f"l.{i}": (sliding if i % 3 else full) for i in range(12)}
    stage1 = {f"l.{i}": (mamba if i % 2 else full) for i in range(12, 20)}
    return Planner().plan([stage0, stage1], [GiB, GiB], EngineConfig(max_model_len=4096))


def _examples() -> Iterator[tuple[str, Plan]]:
    yield "hybrid", _hybrid()
    for name in sorted(example_names())[:4]:
        model = load_example(name)
        engine = EngineConfig(**model.engine)
        yield name, Planner().plan(model.worker_specs(), model.available_memory or [GiB], engine)


BASES = dict(_examples())


def _scale_tensors(d: Doc, w: int) -> None:
    for t in d["workers"][w]["tensors"]:
        t["size"] *= 1000


def _shrink_memory(d: Doc, w: int) -> None:
    target = d["workers"][w]
    target["available_memory"] = max(1, max(t["size"] for t in target["tensors"]) // 2)


def _drop_layer(d: Doc, w: int) -> None:
    layer = next(n for t in d["workers"][w]["tensors"] for n in t["shared_by"])
    for t in d["workers"][w]["tensors"]:
        t["shared_by"] = [n for n in t["shared_by"] if n != layer]


def _add(key: str, delta: int) -> Callable[[Doc], None]:
    return lambda d: d.__setitem__(key, d[key] + delta)


def _semantic(doc: Doc, rng: random.Random) -> Iterator[Mutation]:
    w = rng.randrange(len(doc["workers"]))
    first = doc["groups"][0]["layer_names"][0]
    yield "tensors scaled past the worker's memory", f"workers[{w}]", lambda d: _scale_tensors(d, w)
    yield "available_memory shrunk", f"workers[{w}].available_memory", lambda d: _shrink_memory(d, w)
    yield (
        "an unknown layer in a group",
        "plan field groups: the plan ",
        lambda d: d["groups"][0]["layer_names"].append("no.such"),
    )
    if len(doc["groups"]) > 1:
        yield (
            "a layer in two groups",
            "plan field groups: the plan ",
            lambda d: d["groups"][-1]["layer_names"].append(first),
        )
    yield "num_blocks changed", "num_blocks", _add("num_blocks", rng.randint(1, 1000))
    yield "capacity_tokens changed", "capacity_tokens", _add("capacity_tokens", rng.choice([-1, 1, 4096]))
    yield (
        "one worker's num_blocks changed",
        f"workers[{w}].num_blocks",
        lambda d: d["workers"][w].__setitem__("num_blocks", d["workers"][w]["num_blocks"] + 1),
    )
    if doc["max_concurrency"] is not None:
        factor = rng.choice([0.5, 2.0, 10.0])
        yield (
            "max_concurrency changed",
            "max_concurrency",
            lambda d: d.__setitem__("max_concurrency", d["max_concurrency"] * factor),
        )
    if doc["workers"][w]["tensors"]:
        yield "a layer dropped from every tensor", f"workers[{w}].tensors", lambda d: _drop_layer(d, w)
        yield (
            "an unknown layer in a tensor",
            f"workers[{w}].tensors: the plan put layer 'no.such', which is not on this worker, in tensor 0",
            lambda d: d["workers"][w]["tensors"][0]["shared_by"].append("no.such"),
        )


#: required numeric fields (path from the document root) and values of the wrong kind for them
NUMBERS = [
    ("num_blocks",),
    ("capacity_tokens",),
    ("max_model_len",),
    ("workers", 0, "num_blocks"),
    ("workers", 0, "tensors", 0, "size"),
]
BAD_NUMBERS: list[Any] = ["12", None, [], {}, 10**30, -1, math.nan, math.inf, 1.5, True]
REQUIRED = [
    "schema",
    "groups",
    "workers",
    "num_blocks",
    "specs",
    "max_concurrency",
    "capacity_tokens",
    "config",
]


def _at(doc: Doc, path: tuple[Any, ...]) -> tuple[Any, Any]:
    node = doc
    for key in path[:-1]:
        node = node[key]
    return node, path[-1]


def _structural(doc: Doc, rng: random.Random) -> Iterator[Mutation]:
    for path in NUMBERS:
        field = ".".join(str(p) for p in path if isinstance(p, str))
        for bad in rng.sample(BAD_NUMBERS, 4):

            def change(d: Doc, path: tuple[Any, ...] = path, bad: Any = bad) -> None:
                node, key = _at(d, path)
                node[key] = bad

            yield f"{path} = {bad!r}", field.rsplit(".", 1)[-1], change
    for key in rng.sample(REQUIRED, 3):
        yield f"no {key}", key, lambda d, key=key: d.pop(key)
    for schema in ["kvrules.plan/v3", "kvrules.plan", "", 2]:
        yield f"schema {schema!r}", "schema", lambda d, schema=schema: d.__setitem__("schema", schema)
    yield "groups not a list", "groups", lambda d: d.__setitem__("groups", {"a": 1})
    yield "a layer name not a string", "groups[0]", lambda d: d["groups"][0]["layer_names"].append(7)


def _campaign() -> Iterator[tuple[str, Doc, str, str]]:
    rng = random.Random(24)
    for base_name, plan in BASES.items():
        doc = plan.to_dict()
        for name, field, mutate in [*_semantic(doc, rng), *_structural(doc, rng)]:
            corrupt = copy.deepcopy(doc)
            mutate(corrupt)
            yield f"{base_name}: {name}", corrupt, field, base_name


CASES = list(_campaign())


def test_every_base_document_reads_back() -> None:
    for plan in BASES.values():
        assert Plan.from_dict(plan.to_dict()).to_json() == plan.to_json()


def test_no_corrupt_document_is_accepted() -> None:
    accepted, foreign, unnamed = [], [], []
    for name, doc, field, _ in CASES:
        try:
            Plan.from_dict(doc)
        except ModelFileError as exc:
            if field not in str(exc):
                unnamed.append(f"{name}: {exc}")
        except KVRulesError as exc:
            foreign.append(f"{name}: {type(exc).__name__}: {exc}")
        except Exception as exc:  # the campaign counts every other exception
            foreign.append(f"{name}: {type(exc).__name__}: {exc}")
        else:
            accepted.append(name)
    assert len(CASES) > 100
    assert (accepted, foreign, unnamed) == ([], [], [])


def _semantic_plans() -> Iterator[tuple[str, Plan]]:
    """The semantic corruptions applied to the plan objects themselves (no document read)."""
    plan = BASES["hybrid"]
    worker = plan.workers[0]
    tensors = tuple(msgspec.structs.replace(t, size=t.size * 1000) for t in worker.tensors)
    yield (
        "tensors past memory",
        msgspec.structs.replace(
            plan, workers=(msgspec.structs.replace(worker, tensors=tensors), *plan.workers[1:])
        ),
    )
    yield "capacity", msgspec.structs.replace(plan, capacity_tokens=plan.capacity_tokens + 1)
    yield "num_blocks", msgspec.structs.replace(plan, num_blocks=plan.num_blocks + 1)


@pytest.mark.parametrize("name", ["tensors past memory", "capacity", "num_blocks"])
def test_allocate_refuses_a_corrupt_plan_it_did_not_make(name: str) -> None:
    plan = dict(_semantic_plans())[name]
    with pytest.raises(ModelFileError, match="plan field"):
        allocate(plan, "meta")


def test_allocate_trusts_the_plans_planner_made_and_checks_documents() -> None:
    plan = BASES["hybrid"]
    assert allocate(plan, "meta").plan is plan
    assert allocate(Plan.from_dict(plan.to_dict()), "meta").views


def test_a_refusal_names_the_group_and_the_layer() -> None:
    doc = copy.deepcopy(BASES["hybrid"].to_dict())
    doc["groups"][0]["layer_names"].append("no.such")
    with pytest.raises(
        ModelFileError, match=r"plan field groups: the plan placed unknown layer 'no\.such' in group 0"
    ):
        Plan.from_dict(doc)
