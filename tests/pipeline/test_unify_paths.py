"""Page unification asks the rules once per distinct spec and copies the answer's decisions to
every other layer with an equal spec, layer by layer: one path, whoever listens to the logs.
Equal but distinct spec objects share one answer, a failing unification leaves the records up to
the failing layer, and a plan never holds the caller's table."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from structlog.testing import capture_logs

from kvrules import (
    EngineConfig,
    FullAttentionSpec,
    MambaSpec,
    Planner,
    SlidingWindowSpec,
    UnificationError,
)
from kvrules.pipeline import unify

GiB = 1 << 30
PLANNERS = {name: Planner(name) for name in ("vllm", "default")}

MAMBA = MambaSpec(16, [[3, 768], [4, 32, 32]], ["bfloat16", "bfloat16"])
FULL = FullAttentionSpec(16, num_kv_heads=2, head_size=128, dtype="bfloat16")
DRAFT = FullAttentionSpec(16, num_kv_heads=4, head_size=128, dtype="bfloat16")
WINDOW = SlidingWindowSpec(16, num_kv_heads=2, head_size=128, dtype="bfloat16", sliding_window=512)


def test_equal_specs_in_distinct_objects_share_one_answer() -> None:
    twin = dataclasses.replace(MAMBA)
    assert twin == MAMBA and twin is not MAMBA
    specs = {f"l.{i}": [FULL, MAMBA, twin, DRAFT][i % 4] for i in range(40)}
    grouped = PLANNERS["vllm"].plan(specs, GiB, EngineConfig(max_model_len=4096))
    asked = [d for d in grouped.decisions if d.stage == "unify" and d.layer in ("l.1", "l.2")]
    assert [d.layer for d in asked] == ["l.1", "l.2"]  # the twin's first layer gets a copy


def test_a_failing_unification_leaves_the_records_up_to_the_failing_layer() -> None:
    """With no layer strategy for the Mamba layers the unifying route fails: every layer before
    the failing one has its records, in layer order."""
    narrow = SlidingWindowSpec(16, num_kv_heads=1, head_size=128, dtype="bfloat16", sliding_window=512)
    specs = {f"l.{i}": [FULL, narrow, MAMBA, narrow][min(i // 5, 3)] for i in range(20)}
    planner = Planner(
        ["unified-page", "block-scale", "uniform-type", "shared-pool", "per-layer", "vllm-group-size"]
    )

    def run() -> Any:
        ctx, ask = planner.context(EngineConfig(max_model_len=4096), [specs], [GiB])
        try:
            unify.unify_pages(specs, ctx, ask)
        except UnificationError as error:
            return ("raised", str(error), ctx.decisions.items)
        return ("planned", ctx.decisions.items)

    grouped = run()
    assert grouped[0] == "raised"
    records = grouped[2]
    assert [d.layer for d in records if d.rule == "block-scale" and d.outcome == "applied"] == [
        f"l.{i}" for i in range(5, 10)
    ]
    assert records[-1].layer == "l.10" and records[-1].outcome == "failed"


@pytest.mark.parametrize("name", ["vllm", "default"])
def test_a_plan_never_holds_the_callers_table(name: str) -> None:
    """The plan's specs are a table of its own, whether unification made a new one (which the
    plan then keeps without copying it) or left the caller's as it was."""
    full = FullAttentionSpec(16, num_kv_heads=2, head_size=64, dtype="bfloat16")
    wide = FullAttentionSpec(16, num_kv_heads=4, head_size=64, dtype="bfloat16")
    uniform = {f"l.{i}": full for i in range(4)}
    mixed = {f"l.{i}": [full, wide][i % 2] for i in range(4)}
    for specs in (uniform, mixed):
        before = dict(specs)
        plan = PLANNERS[name].plan(specs, GiB, EngineConfig(max_model_len=4096))
        assert plan.specs is not specs and specs == before
        assert set(plan.specs) == set(specs)


def test_listening_to_the_logs_does_not_change_the_log() -> None:
    """One unify path: the decision log is the same whether or not anyone listens."""
    specs = {f"l.{i}": [FULL, MAMBA, DRAFT][i % 3] for i in range(30)}
    quiet = PLANNERS["default"].plan(specs, GiB, EngineConfig(max_model_len=4096))
    with capture_logs():
        heard = PLANNERS["default"].plan(specs, GiB, EngineConfig(max_model_len=4096))
    assert quiet.decisions == heard.decisions
