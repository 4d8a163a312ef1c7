"""One spec object per layer (issue 25 R1): models whose every layer has its own spec object, from
a model file or a stretched Hugging Face config, plan with every invariant kept, and kvrules' work
grows linearly in layers. Work is counted (lines of kvrules' code executed), never timed; timing
is ``benchmarks/plan_scaling.py``'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

import kvrules
from fuzz.ci import ci, expect_sound, seeded_sample
from fuzz.distinct_cases import (
    CountingLayers,
    build,
    distinct_case,
    run_distinct_case,
    show_distinct,
    shrink_distinct,
    work_count,
)
from fuzz.draw import strategy
from fuzz.invariants import check_plan_invariants

SMALL, LARGE = 200, 800


def _plan(case: dict[str, Any], work: Path) -> tuple[kvrules.Plan, int, int]:
    """The plan of ``case``, the lines of kvrules it took and the layer-table entries it read."""
    specs, memory = build(case, work)
    if isinstance(specs, list):
        (specs,) = specs  # the model file's one worker
    assert len({id(spec) for spec in specs.values()}) == len(specs)  # one object per layer
    config = kvrules.EngineConfig(max_model_len=case["max_model_len"])
    planner = kvrules.Planner(case["strategies"])
    planner.plan(specs, memory, config)  # first-call costs (rule tables, caches) are not per layer
    plan, lines = work_count(lambda: planner.plan(specs, memory, config))
    counted = CountingLayers(specs)
    assert planner.plan(counted, memory, config).to_dict() == plan.to_dict()
    check_plan_invariants(plan, specs, memory)
    return plan, lines, counted.reads


@pytest.mark.parametrize(
    ("via", "example"),
    [("model", "gemma3-27b"), ("model", "deepseek-v4-flash"), ("hf", "jamba-v0.1")],
)
def test_one_spec_object_per_layer_plans_in_linear_work(via: str, example: str, tmp_path: Path) -> None:
    base = {
        "via": via,
        "example": example,
        "vary": False,
        "strategies": "vllm",
        "max_model_len": 4096,
        "memory_per_layer": 1 << 30,
    }
    small, small_lines, small_reads = _plan({**base, "layers": SMALL}, tmp_path)
    large, large_lines, large_reads = _plan({**base, "layers": LARGE}, tmp_path)
    assert sum(len(g.layer_names) for g in large.groups) == LARGE
    assert sum(len(g.layer_names) for g in small.groups) == SMALL
    # 4x the layers: linear work is about 4x; a scan of the table per distinct object is 16x
    # (R1 before its fix: 15x the table reads; its lines stayed 4x, the scan being in C)
    assert large_reads < 6 * small_reads, (small_reads, large_reads)
    assert large_lines < 6 * small_lines, (small_lines, large_lines)


@pytest.mark.parametrize("via", ["model", "hf"])
def test_varied_spec_objects_per_layer_keep_every_invariant(via: str) -> None:
    example = "gemma3-27b" if via == "model" else "gpt-oss-20b-eagle"
    case = {
        "via": via,
        "example": example,
        "layers": 2000,
        "vary": True,
        "strategies": "default",
        "max_model_len": 32768,
        "memory_per_layer": 64 << 20,
    }
    outcome = run_distinct_case(case)
    assert outcome.kind in ("ok", "error"), outcome


@ci(12)
@given(case=strategy(distinct_case))
def test_drawn_models_with_one_spec_object_per_layer_plan_soundly(case: Any) -> None:
    expect_sound(case, run_distinct_case, shrink_distinct, show_distinct)


def test_a_seeded_sample_with_one_spec_object_per_layer_plans_soundly() -> None:
    seeded_sample(
        distinct_case, run_distinct_case, shrink_distinct, show_distinct, count=20, prefix="ci-distinct"
    )
