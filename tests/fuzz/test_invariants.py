"""The invariant checker itself: sound plans pass, and each way a plan can be corrupt is caught
under the invariant's name (a checker that cannot fail proves nothing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

import kvrules
from fuzz.invariants import InvariantBroken, check_plan_invariants
from kvrules.examples import example_names, load_example

CFG = kvrules.EngineConfig(max_model_len=4096)
GIB = 1 << 30


def full(heads: int) -> kvrules.FullAttentionSpec:
    return kvrules.FullAttentionSpec(16, num_kv_heads=heads, head_size=128, dtype="bfloat16")


def window(heads: int) -> kvrules.SlidingWindowSpec:
    return kvrules.SlidingWindowSpec(
        16, num_kv_heads=heads, head_size=128, dtype="bfloat16", sliding_window=512
    )


HYBRID = {"attn.0": full(2), "attn.1": full(2), "swa.0": window(4), "swa.1": window(4)}
TWO_WORKERS = [{"attn.0": full(2), "swa.0": window(4)}, {"attn.1": full(2), "swa.1": window(4)}]


@pytest.mark.parametrize("name", example_names())
@pytest.mark.parametrize("strategies", ["vllm", "default"])
def test_the_shipped_examples_keep_every_invariant(name: str, strategies: str) -> None:
    model = load_example(name)
    workers = model.worker_specs()
    memory = model.available_memory or [40 * GIB]
    config = kvrules.EngineConfig.from_dict(model.engine)
    plan = kvrules.Planner(strategies).plan(workers, memory, config)
    check_plan_invariants(plan, workers, memory)


def _plan(specs: Any = HYBRID, memory: Any = GIB) -> kvrules.Plan:
    return kvrules.Planner("vllm").plan(specs, memory, CFG)


def _worker(plan: kvrules.Plan, **changes: Any) -> kvrules.Plan:
    return msgspec.structs.replace(
        plan, workers=(msgspec.structs.replace(plan.workers[0], **changes), *plan.workers[1:])
    )


def _tensor(plan: kvrules.Plan, **changes: Any) -> kvrules.Plan:
    tensors = plan.workers[0].tensors
    return _worker(plan, tensors=(msgspec.structs.replace(tensors[0], **changes), *tensors[1:]))


def _group(plan: kvrules.Plan, **changes: Any) -> kvrules.Plan:
    return msgspec.structs.replace(
        plan, groups=(msgspec.structs.replace(plan.groups[0], **changes), *plan.groups[1:])
    )


def _decision(plan: kvrules.Plan) -> kvrules.Plan:
    d = plan.decisions[0]
    bad = kvrules.Decision(d.stage, d.rule, d.outcome, d.layer, 12345, d.before, d.after)  # type: ignore[arg-type]
    return msgspec.structs.replace(plan, decisions=(bad, *plan.decisions[1:]))


CORRUPTIONS: dict[str, tuple[str, Callable[[kvrules.Plan], kvrules.Plan]]] = {
    "group-drops-a-layer": ("layers", lambda p: _group(p, layer_names=p.groups[0].layer_names[1:])),
    "group-names-a-stranger": (
        "unknown-layers",
        lambda p: _group(p, layer_names=(*p.groups[0].layer_names, "x")),
    ),
    "layer-in-two-groups": ("layers", lambda p: msgspec.structs.replace(p, groups=(*p.groups, p.groups[0]))),
    "tensor-omits-a-layer": ("layers", lambda p: _tensor(p, shared_by=p.workers[0].tensors[0].shared_by[1:])),
    "blocks-negative": ("num-blocks", lambda p: msgspec.structs.replace(p, num_blocks=-1)),
    "blocks-differ": ("num-blocks", lambda p: _worker(p, num_blocks=p.num_blocks + 1)),
    "tensor-negative": ("negative", lambda p: _tensor(p, size=-5)),
    "over-memory": ("memory", lambda p: _tensor(p, size=p.workers[0].tensors[0].size + 2 * GIB)),
    "memory-not-the-callers": ("memory", lambda p: _worker(p, available_memory=GIB // 2)),
    "pool-of-two-pages": ("pool", lambda p: _group(p, spec=full(8))),
    "tensor-not-page-times-blocks": (
        "tensor-size",
        lambda p: _tensor(p, size=p.workers[0].tensors[0].size - 1),
    ),
    "concurrency-off": (
        "capacity",
        lambda p: msgspec.structs.replace(p, max_concurrency=p.max_concurrency + 1),
    ),
    "capacity-off": ("capacity", lambda p: msgspec.structs.replace(p, capacity_tokens=p.capacity_tokens + 1)),
    "concurrency-nan": ("capacity", lambda p: msgspec.structs.replace(p, max_concurrency=float("nan"))),
    "schema-reason-not-a-string": ("schema", _decision),
    "layer-name-not-a-string": ("json", lambda p: _rename_layer(p, 0)),
}


def _rename_layer(plan: kvrules.Plan, new: Any) -> kvrules.Plan:
    """``plan`` with layer ``attn.0`` called ``new`` everywhere (checked against specs named so too)."""

    def rename(names: tuple[str, ...]) -> tuple[Any, ...]:
        return tuple(new if n == "attn.0" else n for n in names)

    groups = tuple(msgspec.structs.replace(g, layer_names=rename(g.layer_names)) for g in plan.groups)
    worker = plan.workers[0]
    workers = (
        msgspec.structs.replace(
            worker,
            groups=tuple(
                msgspec.structs.replace(g, layer_names=rename(g.layer_names)) for g in worker.groups
            ),
            tensors=tuple(msgspec.structs.replace(t, shared_by=rename(t.shared_by)) for t in worker.tensors),
        ),
    )
    specs = {new if n == "attn.0" else n: s for n, s in plan.specs.items()}
    return msgspec.structs.replace(plan, groups=groups, workers=workers, specs=specs)


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_a_corrupt_plan_is_caught_naming_the_invariant(name: str) -> None:
    invariant, corrupt = CORRUPTIONS[name]
    plan = _plan()
    check_plan_invariants(plan, HYBRID, GIB)
    bad = corrupt(plan)
    specs = (
        {0 if n == "attn.0" else n: s for n, s in HYBRID.items()}
        if name == "layer-name-not-a-string"
        else HYBRID
    )
    with pytest.raises(InvariantBroken) as caught:
        check_plan_invariants(bad, specs, GIB)
    assert caught.value.invariant == invariant, caught.value


def test_two_workers_and_every_layout_are_checked() -> None:
    check_plan_invariants(_plan(TWO_WORKERS, [GIB, 2 * GIB]), TWO_WORKERS, [GIB, 2 * GIB])
    uniform = {"a.0": full(2), "a.1": full(4), "a.2": full(8)}
    plan = _plan(uniform)
    assert plan.workers[0].layout == "per-layer"
    check_plan_invariants(plan, uniform, GIB)
    with pytest.raises(InvariantBroken, match="tensor-size"):
        check_plan_invariants(_tensor(plan, size=plan.workers[0].tensors[0].size * 2 // 3), uniform, GIB)


def test_a_plan_checked_against_other_inputs_is_caught() -> None:
    plan = _plan()
    with pytest.raises(InvariantBroken, match="layers"):
        check_plan_invariants(plan, {**HYBRID, "extra": full(2)}, GIB)
    with pytest.raises(InvariantBroken, match="memory"):
        check_plan_invariants(plan, HYBRID, 2 * GIB)
