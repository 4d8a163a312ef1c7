"""The command line: plan (table and JSON), strategies, examples, and clean errors (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_cli as run

from kvrules.examples import example_names


def test_plan_example_prints_groups_tensors_and_decisions(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "--example", "issue-43626", "--strategies", "vllm")
    assert code == 0
    assert "KV-cache groups (7)" in out
    assert "mamba-pad" in out and "block-scale" in out
    assert "num_blocks 1538" in out and "efficiency" in out


def test_plan_json_is_the_whole_plan(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "--example", "gemma3-27b", "--json", "--strategies", "vllm")
    assert code == 0
    data = json.loads(out)
    assert data["schema"] == "kvrules.plan/v2"
    assert data["num_blocks"] == 16384 and len(data["groups"]) == 7


def test_plan_flags_override_the_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "plan",
        "--example",
        "gemma3-27b",
        "--workers",
        "2",
        "--memory",
        "20GiB,10GiB",
        "--max-model-len",
        "auto",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert [w["own_num_blocks"] for w in data["workers"]] == [32768, 16384]
    assert data["num_blocks"] == 16384


def test_model_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = {
        "layers": {
            "l0": {
                "type": "full_attention",
                "block_size": 16,
                "num_kv_heads": 8,
                "head_size": 128,
                "dtype": "bfloat16",
            },
            "l1": {
                "type": "sliding_window",
                "block_size": 16,
                "num_kv_heads": 8,
                "head_size": 128,
                "dtype": "bfloat16",
                "sliding_window": 128,
            },
        },
        "engine": {"max_model_len": 8192},
    }
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model))
    code, out, _ = run(capsys, "plan", str(path), "--memory", "1GiB")
    assert code == 0 and "route: unified-page" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read the model file"),
        ("{not json", "invalid JSON"),
        (
            '{"layers": {"l0": {"type": "full_attention", "block_size": 16}}}',
            "layer 'l0': type 'full_attention' needs field(s)",
        ),
        (
            '{"layers": {"l0": {"type": "mamba", "block_size": 16, "shapes": [[3, 4]], "dtypes": ["bf17"]}}}',
            "bf17",
        ),
        ('{"layers": {}, "wrkers": []}', "unknown top-level key(s) 'wrkers'"),
    ],
)
def test_bad_model_files_exit_2_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "model.json"
    if content is not None:
        path.write_text(content)
    code, _, err = run(capsys, "plan", str(path), "--memory", "1GiB", "--max-model-len", "1024")
    assert code == 2
    assert message in err and str(path) in err
    assert "Traceback" not in err


def test_capacity_error_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--example", "llama3-8b", "--memory", "1GiB")
    assert code == 2
    assert "The largest max_model_len that fits is" in err


def test_strategies_lists_every_rule_with_provider(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "strategies")
    assert code == 0
    for name in (
        "mamba-pad",
        "block-scale",
        "stride-pad",
        "unified-page",
        "vllm-group-size",
        "packed",
        "hybrid-disabled",
    ):
        assert name in out
    assert "plugin 'page-unify' (kvrules" in out
    assert "presets:" in out and "vllm" in out


def test_examples_lists_the_builtin_examples(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "examples")
    assert code == 0
    for name in example_names():
        assert name in out


def test_unknown_strategy_is_a_clean_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--example", "llama3-8b", "--strategies", "fastest")
    assert code == 2 and "unknown strategy set 'fastest'" in err


def test_log_format_json_streams_decisions(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--example", "issue-43626", "--log-format", "json")
    assert code == 0
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any(e["event"] == "kvrules.decision" and e["rule"] == "mamba-pad" for e in events)
    assert any(e["event"] == "kvrules.plan.finished" for e in events)
