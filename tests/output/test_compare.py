"""``kvrules compare``: several strategy sets side by side, ratios to the first, JSON, errors."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_cli as run

from kvrules import EngineConfig, Planner
from kvrules.cli.compare import METRICS, SetResult, figures_of, parse_set, ratios
from kvrules.examples import load_example


def test_text_table_has_every_metric_and_ratios_to_the_first_set(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys, "compare", "--example", "swa30-full20", "--strategies", "vllm", "--strategies", "default"
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "kvrules compare: example 'swa30-full20' (max_model_len 131072, memory 40.00 GiB)"
    assert lines[1].split() == ["metric", "vllm", "default"]
    rows = {line.split("  ")[1].strip(): line for line in lines[3:11]}
    assert set(rows) == {label for _, label in METRICS}
    assert rows["groups"].split()[1:] == ["3", "5", "(x1.67)"]
    assert rows["padding slots"].split()[2:] == ["10", "0", "(x0.00)"]
    assert rows["efficiency"].split()[1:] == ["96.0%", "100.0%", "(x1.04)"]
    assert "(x1.04)" in rows["max concurrency"] and "(x1.04)" in rows["capacity tokens"]


def test_default_sets_are_vllm_then_default(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "compare", "--example", "llama3-8b", "--json")
    document = json.loads(out)
    assert code == 0 and [s["strategies"] for s in document["sets"]] == ["vllm", "default"]


def test_json_has_figures_and_ratios_for_every_set(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "compare",
        "--example",
        "gpt-oss-20b-draft8",
        "--memory",
        "8GiB",
        "--strategies",
        "vllm",
        "--strategies",
        "default",
        "--strategies",
        "vllm,min-padding,vllm-group-size",
        "--json",
    )
    assert code == 0
    document = json.loads(out)
    assert document["schema"] == "kvrules.compare/v1" and document["baseline"] == "vllm"
    assert document["available_memory"] == [8 << 30] and document["max_model_len"] == 131072
    vllm, default, custom = document["sets"]
    assert custom["strategy_set"] == "vllm-0.28+min-padding,vllm-group-size"
    for entry in document["sets"]:
        assert {key for key, _ in METRICS} <= set(entry) and set(entry["ratios"]) == {k for k, _ in METRICS}
    assert vllm["ratios"]["max_concurrency"] == 1.0
    assert default["ratios"]["max_concurrency"] == pytest.approx(
        default["max_concurrency"] / vllm["max_concurrency"]
    )
    assert default["padding_slots"] == 0 and vllm["padding_slots"] == 4
    assert default["page_sizes"] == [32768]


def test_a_set_that_cannot_plan_shows_its_error_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    # 1 GiB: one 131072-token request needs more than that under vLLM's grouping, fits under default's
    code, out, err = run(
        capsys, "compare", "--example", "gpt-oss-20b-draft8", "--memory", "1GiB", "--max-model-len", "131072"
    )
    assert code == 2
    assert "vllm: CapacityError:" in out and "error" in out.splitlines()[3]
    assert "could not plan" in err


def test_unknown_strategy_set_fails_before_planning(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys, "compare", "--example", "llama3-8b", "--strategies", "vllm", "--strategies", "fastest"
    )
    assert code == 2 and out == ""
    assert "unknown strategy set 'fastest'" in err


def test_parse_set_and_ratios() -> None:
    assert parse_set("vllm") == "vllm"
    assert parse_set("vllm, min-padding,") == ["vllm", "min-padding"]
    model = load_example("llama3-8b")
    plan = Planner("vllm").plan(
        model.worker_specs(), model.available_memory or [1 << 30], EngineConfig(**model.engine)
    )
    base = figures_of(plan, "vllm")
    assert base.figures is not None and base.figures["groups"] == 1 and base.figures["efficiency"] == 1.0
    failed = SetResult("broken")
    assert ratios([base, failed])[1] == {key: None for key, _ in METRICS}
    assert ratios([failed, base])[1]["groups"] is None


def test_a_model_built_from_a_config_is_rebuilt_with_each_sets_aligner(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """vLLM #43626 from its configs: default's draft-aware-align halves the page (x1.37 at 4096)."""
    code, out, _ = run(
        capsys,
        "compare",
        "--example",
        "hf-qwen3-coder-next",
        "--max-model-len",
        "4096",
        "--memory",
        "40GiB",
        "--json",
    )
    assert code == 0
    vllm, default = json.loads(out)["sets"]
    assert (vllm["page_size_bytes"], default["page_size_bytes"]) == (2_326_528, 1_179_648)
    assert default["ratios"]["max_concurrency"] >= 1.25
